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
(`select_providers`). fastapi, onnxruntime and the model wrapper are imported by
`create_app`, not at module import.

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

import json
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from functions.intent_model.answers import MODEL_NAME  # noqa: F401 - re-exported (stdlib only)

if TYPE_CHECKING:
    from functions.gpu_endpoint.capacity import InferenceComponentCapacity
    from functions.gpu_endpoint.stream import EventEncoder, GenerationConfig

CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
#: SageMaker's model artifact directory inside the container.
SAGEMAKER_MODEL_DIR = Path("/opt/ml/model")

FaultKind = Literal["slow", "container_error", "service_unavailable", "throttled", "malformed",
                    "expired_token", "signature_rejected"]
FAULT_KINDS: tuple[str, ...] = (
    "slow", "container_error", "service_unavailable", "throttled", "malformed",
    "expired_token", "signature_rejected",
)
#: What SageMaker's front end answers a request whose credentials it refuses (403, before any
#: container sees it): kind -> (x-amzn-ErrorType, message). Source: SageMaker API Reference,
#: Common Errors, https://docs.aws.amazon.com/sagemaker/latest/APIReference/CommonErrors.html
AUTH_FAULTS: dict[str, tuple[str, str]] = {
    "expired_token": ("ExpiredTokenException",
                      "The security token included in the request is expired"),
    "signature_rejected": ("InvalidSignatureException",
                           ("The request signature we calculated does not match the signature "
                           "you provided. Check your AWS Secret Access Key and signing method. "
                           "Consult the service documentation for details.")),
}


def select_providers(available: Sequence[str]) -> list[str]:
    """onnxruntime providers: CUDA first when available, CPU always as the fallback.

    Parameters
    ----------
    available : sequence of str
        ``onnxruntime.get_available_providers()``.

    Returns
    -------
    list of str
    """
    if CUDA_PROVIDER in available:
        return [CUDA_PROVIDER, CPU_PROVIDER]
    return [CPU_PROVIDER]


@dataclass(frozen=True)
class Fault:
    """One injected fault.

    Parameters
    ----------
    kind : {"slow", "container_error", "service_unavailable", "throttled", "malformed", \
            "expired_token", "signature_rejected"}
        ``expired_token`` and ``signature_rejected`` answer 403 as SageMaker does for refused
        credentials (`AUTH_FAULTS`).
    delay_ms : float
        Added latency before answering (``slow``; also allowed with the others), ms.
    """

    kind: FaultKind
    delay_ms: float = 0.0


class FaultInjector:
    """Faults for the next invocations (thread-safe). Off unless set.

    ``set(kind, count=None)`` applies ``kind`` to the next ``count`` invocations (all of them
    when None) until `clear`. ``served`` counts invocations that reached the server.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fault: Fault | None = None
        self._remaining: int | None = None
        self.served = 0

    def set(self, kind: str, *, count: int | None = None, delay_ms: float = 0.0) -> None:
        """Inject ``kind`` for the next ``count`` invocations.

        Raises
        ------
        ValueError
            Unknown kind, negative count or delay.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}: use one of {', '.join(FAULT_KINDS)}")
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        with self._lock:
            self._fault = Fault(kind, float(delay_ms))  # type: ignore[arg-type]
            self._remaining = count

    def clear(self) -> None:
        """No more faults."""
        with self._lock:
            self._fault, self._remaining = None, None

    def take(self) -> Fault | None:
        """The fault for this invocation (consumes one of ``count``)."""
        with self._lock:
            self.served += 1
            if self._fault is None:
                return None
            if self._remaining is not None:
                if self._remaining <= 0:
                    self._fault = None
                    return None
                self._remaining -= 1
            return self._fault


def answer_body(result: Any) -> dict[str, Any]:
    """The intent answer of the shared contract from an ``IntentResult``."""
    from functions.intent_model.answers import intent_answer

    return intent_answer(result)


@dataclass(frozen=True)
class ContainerReply:
    """What the container answers on ``/invocations`` (before the SageMaker facade)."""

    status: int
    body: bytes
    headers: Mapping[str, str]
    #: Simulated tool call to await after the answer is computed, ms (2xx answers only).
    tool_ms: float = 0.0
    #: Inference time, ms (None: no inference ran).
    infer_ms: float | None = None


class IntentService:
    """Loads the embedding model and intent classifier once; answers texts.

    Parameters
    ----------
    model_dir : Path
        Holds ``model.onnx`` and ``tokenizer.json``.
    intents_path : Path, optional
        Intents JSON (default: the agent's ``intents.json``).
    providers : sequence of str, optional
        onnxruntime providers (default `select_providers` of what onnxruntime offers).
    intra_op_threads : int
        onnxruntime intra-op threads.

    Raises
    ------
    FileNotFoundError
        ``model_dir`` lacks the model files (raised by the model wrapper).
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        intents_path: Path | None = None,
        providers: Sequence[str] | None = None,
        intra_op_threads: int = 1,
    ) -> None:
        import onnxruntime

        from functions.intent_model.model import EmbeddingModel, IntentClassifier, load_intents

        self.providers = list(providers) if providers is not None else select_providers(
            onnxruntime.get_available_providers()
        )
        t0 = time.perf_counter()
        self.model = EmbeddingModel.load(
            Path(model_dir), intra_op_threads=intra_op_threads, providers=self.providers
        )
        self.classifier = IntentClassifier(self.model, load_intents(intents_path))
        self.load_ms = (time.perf_counter() - t0) * 1000.0
        self.active_providers: list[str] = list(self.model.providers)

    def answer(self, text: str) -> dict[str, Any]:
        """Classify ``text``; raises ValueError for an empty or too long text."""
        return answer_body(self.classifier.classify(text))


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _bad_request(message: str, status: int = 400) -> ContainerReply:
    return ContainerReply(status, _json_bytes({"error": "bad_request", "message": message}),
                          {"Content-Type": "application/json"})


def handle_invocation(
    service: IntentService, raw: bytes, faults: FaultInjector | None, sleep_s: Callable[[float], None]
) -> ContainerReply:
    """The container's ``/invocations``: parse, apply an injected fault, classify."""
    fault = faults.take() if faults is not None else None
    if fault is not None and fault.delay_ms > 0:
        sleep_s(fault.delay_ms / 1000.0)
    if fault is not None and fault.kind == "container_error":
        return ContainerReply(500, _json_bytes({"error": "model_error",
                                                "message": "injected container failure"}),
                              {"Content-Type": "application/json"})
    if fault is not None and fault.kind == "throttled":
        return ContainerReply(429, _json_bytes({"message": "Rate exceeded (injected)"}),
                              {"Content-Type": "application/json",
                               "x-amzn-ErrorType": "ThrottlingException"})
    if fault is not None and fault.kind == "service_unavailable":
        return ContainerReply(503, _json_bytes({"message": "Service unavailable (injected)"}),
                              {"Content-Type": "application/json",
                               "x-amzn-ErrorType": "ServiceUnavailable"})
    if fault is not None and fault.kind == "malformed":
        return ContainerReply(200, b'{"intent": "trunc', {"Content-Type": "application/json"})
    if fault is not None and fault.kind in AUTH_FAULTS:
        code, message = AUTH_FAULTS[fault.kind]
        return ContainerReply(403, _json_bytes({"message": message}),
                              {"Content-Type": "application/json", "x-amzn-ErrorType": code})
    from functions.intent_model.answers import BodyError, parse_intent_json

    try:
        request = parse_intent_json(raw or b"")
    except BodyError as exc:
        return _bad_request(exc.message, exc.status if exc.status == 413 else 400)
    started = time.perf_counter()
    try:
        body = service.answer(request.text)
    except ValueError as exc:
        return _bad_request(str(exc), 400)
    infer_ms = (time.perf_counter() - started) * 1000.0
    return ContainerReply(200, _json_bytes(body), {"Content-Type": "application/json"},
                          request.tool_ms, infer_ms)


def sagemaker_facade(reply: ContainerReply, endpoint_name: str) -> ContainerReply:
    """Turn a container reply into what SageMaker's ``InvokeEndpoint`` returns.

    2xx passes through with ``x-Amzn-Invoked-Production-Variant``; throttling and service
    errors pass through with their ``x-amzn-ErrorType``; any other non-2xx becomes ``424
    ModelError`` carrying ``OriginalStatusCode`` and ``OriginalMessage``.
    """
    if 200 <= reply.status < 300:
        return ContainerReply(reply.status, reply.body,
                              {**reply.headers, "x-Amzn-Invoked-Production-Variant": "AllTraffic"},
                              reply.tool_ms, reply.infer_ms)
    if "x-amzn-ErrorType" in reply.headers:
        return reply
    message = (f"Received server error ({reply.status}) from primary with message "
               f"\"{reply.body.decode('utf-8', 'replace')}\".")
    body = {
        "ErrorCode": "SERVER_ERROR_FROM_MODEL" if reply.status >= 500 else "CLIENT_ERROR_FROM_MODEL",
        "LogStreamArn": f"arn:aws:logs:local:000000000000:log-group:/aws/sagemaker/Endpoints/{endpoint_name}",
        "message": message,
        "OriginalMessage": reply.body.decode("utf-8", "replace"),
        "OriginalStatusCode": reply.status,
    }
    return ContainerReply(424, _json_bytes(body),
                          {"Content-Type": "application/json", "x-amzn-ErrorType": "ModelError"})


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
    from functions.gpu_endpoint.app import build_app  # fastapi, imported only here
    from functions.gpu_endpoint.stream import mount_streaming

    app = build_app(service, endpoint_name=endpoint_name, faults=faults,
                    enable_fault_api=enable_fault_api, sleep_s=sleep_s, capacity=capacity)
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
