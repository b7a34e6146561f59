"""The overflow model server: SageMaker container contract over the shared intent model
(`functions.intent_model`; the endpoint never imports an agent).

Routes
------
``GET /ping``
    200 once the model is loaded (SageMaker health check).
``POST /invocations``
    ``{"text": "...", "tool_ms": 0}`` -> ``{"intent", "score", "scores", "degraded", "model"}``:
    the same model, body check and answer format as the reference agent's ``POST /v1/intent``
    (`functions.intent_model.answers`). ``tool_ms`` (optional,
    0 to ``MAX_TOOL_MS`` ms) is the simulated downstream tool call the agent's local path
    makes: the server awaits it after inference (an async sleep, so it holds no worker thread),
    so an overflowed answer does the same work as a local one. ``Server-Timing`` reports
    ``infer`` and ``tool`` (``dur`` in ms).
``POST /endpoints/{name}/invocations``
    Local stand-in for the SageMaker runtime ``InvokeEndpoint`` API, so the real boto3
    ``sagemaker-runtime`` client works with ``endpoint_url``: a container error becomes
    ``424 ModelError`` (with ``OriginalStatusCode``), an unknown endpoint ``400
    ValidationError``, as SageMaker answers.
``POST /invocations`` with ``Accept: text/event-stream``, ``POST /endpoints/{name}/invocations-response-stream``
    A streamed generation, and SageMaker's ``InvokeEndpointWithResponseStream`` around it
    (the latter with an ``event_encoder``): `functions.gpu_endpoint.stream`.
``POST /_faults``, ``DELETE /_faults``
    Fault injection for tests and the bench (only with ``enable_fault_api=True``): make the
    next ``count`` invocations slow, fail with 5xx, be throttled, return a malformed body, or
    be refused as SageMaker refuses bad credentials (403 ``ExpiredTokenException``,
    ``InvalidSignatureException``).

Finite capacity (only with ``capacity=``, an
`functions.gpu_endpoint.capacity.InferenceComponentCapacity`)
    The endpoint emulates a SageMaker inference component whose copy count is planned (as the
    warmer's ``EndpointCapacityActuator`` plans the deployed one). Both invocation routes take
    one of its slots before inference and hold it until the simulated tool call is over; a
    request waits FIFO for a free slot (``Server-Timing`` then also reports ``queue``, ms).
    With no copy in service they answer ``400`` ``x-amzn-ErrorType: ValidationError``,
    ``{"message": "Inference Component has no capacity to process this request. ..."}``
    (`functions.gpu_endpoint.capacity.NO_CAPACITY_MESSAGE`). ``/endpoints/{name}/invocations``
    also needs the header ``X-Amzn-SageMaker-Inference-Component`` (boto3's
    ``InferenceComponentName``) naming the component: missing or another name is ``400
    ValidationError``, as SageMaker answers for an endpoint hosting inference components.
``POST /`` (with a capacity)
    The SageMaker control-plane subset the warmer calls, in the awsJson1_1 protocol of the real
    boto3 ``sagemaker`` client (``X-Amz-Target: SageMaker.DescribeInferenceComponent`` or
    ``SageMaker.UpdateInferenceComponentRuntimeConfig``, JSON body); errors are 400 with
    ``{"__type", "message"}`` (`functions.gpu_endpoint.capacity.handle_control_request`).
``GET /_capacity`` (with a capacity)
    ``{"inference_component", "desired", "in_service", "concurrent_requests_per_copy",
    "provisioning_delay_s", "billed_copy_s", "history": [{"at", "desired", "in_service"}]}``
    (copy-seconds billed until now; ``at`` in epoch s): the endpoint's cost and timeline.

onnxruntime runs with the CUDA execution provider when it is available, else on CPU
(`functions.gpu_endpoint.container.select_providers`). The container contract without a web
framework (the intent service, ``/invocations``, SageMaker's facade, faults) is
`functions.gpu_endpoint.container`; the routes are `functions.gpu_endpoint.app`. fastapi,
onnxruntime and the model wrapper are imported by `create_app`, not at module import.

References
----------
SageMaker inference container contract (``/ping``, ``/invocations``, port 8080, ``serve``):
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html
InvokeEndpoint errors (ModelError 424, ThrottlingException, ValidationError):
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html
Inference components scaled to zero, provisioning delay:
https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from functions.gpu_endpoint.container import FaultInjector, IntentService

if TYPE_CHECKING:
    from functions.gpu_endpoint.capacity import InferenceComponentCapacity
    from functions.gpu_endpoint.stream import EventEncoder, GenerationConfig


def create_app(
    model_dir: Path | None = None,
    *,
    service: IntentService | None = None,
    intents_path: Path | None = None,
    providers: Sequence[str] | None = None,
    endpoint_name: str | None = None,
    faults: FaultInjector | None = None,
    enable_fault_api: bool = False,
    sleep_s: Callable[[float], None] = time.sleep,
    capacity: InferenceComponentCapacity | None = None,
    event_encoder: EventEncoder | None = None,
    generation: GenerationConfig | None = None,
) -> Any:
    """Build the FastAPI app (loads the model now, so ``/ping`` is 200 from the start).

    Parameters
    ----------
    model_dir : Path, optional
        Model directory; required unless ``service`` is given.
    service : IntentService, optional
        An already loaded service (shared by several apps in tests).
    intents_path, providers
        See `IntentService`.
    endpoint_name : str, optional
        Only this name is answered on ``/endpoints/{name}/invocations`` (any when None and no
        capacity is given).
    faults : FaultInjector, optional
        Fault source (a new one when ``enable_fault_api``).
    enable_fault_api : bool
        Serve ``/_faults`` (tests and bench only).
    sleep_s : callable
        Used for injected delays.
    capacity : InferenceComponentCapacity, optional
        Finite, planned capacity (an inference component's copies x slots, provisioning delay,
        billing) and the control-plane routes ``POST /`` and ``GET /_capacity``; None (default):
        always on, unlimited concurrency, no control plane.
    event_encoder : callable, optional
        ``encode(headers, payload) -> bytes``, one event-stream message
        (``infra.local.eventstream.encode_message``): serve SageMaker's
        ``/endpoints/{name}/invocations-response-stream`` too (`functions.gpu_endpoint.stream`;
        runtime code does not import ``infra``, so the caller hands it in).
    generation : GenerationConfig, optional
        Pace of the streamed generation on ``/invocations`` with ``Accept: text/event-stream``
        (default `functions.gpu_endpoint.stream.GenerationConfig`).

    Returns
    -------
    fastapi.FastAPI
        With ``app.state.service``, ``app.state.faults``, ``app.state.capacity``,
        ``app.state.stream_faults`` and ``app.state.generation``.

    Raises
    ------
    ValueError
        Neither ``model_dir`` nor ``service`` given, or ``endpoint_name`` is not the
        capacity's ``endpoint_name`` (when None it becomes the capacity's).
    """
    if capacity is not None:
        if endpoint_name is not None and endpoint_name != capacity.endpoint_name:
            raise ValueError(f"endpoint_name {endpoint_name!r} is not the inference component's "
                             f"endpoint {capacity.endpoint_name!r}")
        endpoint_name = capacity.endpoint_name
    if service is None:
        if model_dir is None:
            raise ValueError("create_app needs model_dir (or a loaded service)")
        service = IntentService(Path(model_dir), intents_path=intents_path, providers=providers)
    if faults is None and enable_fault_api:
        faults = FaultInjector()
    from functions.gpu_endpoint.app import build_endpoint_app  # fastapi, imported only here
    from functions.gpu_endpoint.stream import mount_streaming

    app = build_endpoint_app(service, endpoint_name=endpoint_name, faults=faults,
                             enable_fault_api=enable_fault_api, sleep_s=sleep_s,
                             capacity=capacity)
    mount_streaming(app, endpoint_name=endpoint_name, capacity=capacity,
                    encode_event=event_encoder, generation=generation,
                    enable_fault_api=enable_fault_api)
    return app


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket (port 0: an ephemeral port; read it from ``getsockname``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class BackgroundServer:
    """Serve an ASGI app with uvicorn on a thread (tests, the local stack).

    Parameters
    ----------
    app : ASGI app
    host : str
    port : int
        0 picks an ephemeral port; see `url`.

    Use as a context manager, or call `start` / `stop`.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self._sock = bind_socket(host, port)
        self.host, self.port = host, int(self._sock.getsockname()[1])
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True,
                                        name=f"gpu-endpoint-{self.port}")

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> Self:
        """Start and wait until uvicorn accepts connections.

        Raises
        ------
        TimeoutError
            Not started within ``timeout_s``.
        """
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise TimeoutError(f"GPU endpoint server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving and close the socket."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
