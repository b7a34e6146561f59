"""The SageMaker inference container's contract, without a web framework: the intent service
(the shared model, `functions.intent_model`), what ``/invocations`` answers
(`answer_invocation`), what SageMaker's front end makes of it (`sagemaker_facade`) and the
injected faults. The routes (`functions.gpu_endpoint.app`, fastapi) and the server
(`functions.gpu_endpoint.server`) are built on it; it imports neither (standard library at
import; onnxruntime and the model when an `IntentService` is made).

References
----------
SageMaker inference container contract (``/ping``, ``/invocations``, ``/opt/ml/model``):
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html
InvokeEndpoint errors (ModelError 424, ThrottlingException, ValidationError):
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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
class EndpointFault:
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
        self._fault: EndpointFault | None = None
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
            self._fault = EndpointFault(kind, float(delay_ms))  # type: ignore[arg-type]
            self._remaining = count

    def clear(self) -> None:
        """No more faults."""
        with self._lock:
            self._fault, self._remaining = None, None

    def take(self) -> EndpointFault | None:
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


def answer_invocation(
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
