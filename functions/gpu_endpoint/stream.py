"""Streamed generation on the GPU endpoint, and the local ``InvokeEndpointWithResponseStream``.

Two routes, mounted by `functions.gpu_endpoint.server.create_app` as one ASGI middleware in
front of the buffered routes (`mount_streaming`):

``POST /invocations`` with ``Accept: text/event-stream`` (the container side)
    An OpenAI-compatible chat completions stream (``chat.completion.chunk`` objects as
    Server-Sent Events ``data: {...}``, then ``data: [DONE]``), chunked. Request body: a JSON
    object with ``messages`` (``[{"role", "content"}]``; the last ``user`` message is the
    prompt) or ``prompt`` (a string), and optionally ``max_tokens`` (1 to
    :data:`MAX_TOKENS`). The endpoint generates the tokens itself (a deterministic reply
    built from the prompt) at the pace of its `GenerationConfig`: the first content chunk
    after ``first_token_ms``, the next ones ``token_interval_ms`` apart; a bad body is ``400
    {"error": "bad_request"}`` before any chunk. Without that ``Accept`` the buffered intent
    route answers, as before.
``POST /endpoints/{name}/invocations-response-stream`` (SageMaker's front end, local stand-in)
    What the SageMaker runtime answers ``InvokeEndpointWithResponseStream``: ``200``,
    ``Content-Type: application/vnd.amazon.eventstream``, ``X-Amzn-SageMaker-Content-Type``
    (the container's media type), ``x-Amzn-Invoked-Production-Variant``, then one
    ``PayloadPart`` event per container chunk (its ``Bytes`` the chunk as is). The request's
    ``X-Amzn-SageMaker-Accept`` is the container's ``Accept`` (default ``text/event-stream``).
    Errors before the stream are SageMaker's (`functions.gpu_endpoint.container.sagemaker_facade`:
    a container error is ``424 ModelError``; an unknown endpoint, a missing or unknown
    inference component, no capacity: ``400 ValidationError``; ``503 ServiceUnavailable``);
    errors after it are exception events (``:message-type: exception``):
    ``ModelStreamError`` (``{"Message", "ErrorCode"}``, ``ErrorCode`` ``StreamBroken`` or
    ``ModelInvocationTimeExceeded``) and ``InternalStreamFailure`` (``{"Message"}``). Only
    served when the app is given an event-stream encoder (``encode_event``).

Why the encoder is injected: the event-stream encoding of this stand-in is
``infra.local.eventstream.encode_message`` (the local Lambda API's too), and runtime code
never imports ``infra``; the SageMaker front end is an AWS service, not part of the container
that ``functions/gpu_endpoint`` ships, so whoever runs the stand-in (a test, the local stack)
hands the encoder in. The container side needs no encoder and is always served.

Faults (`StreamFaults`, ``POST /_faults/stream`` / ``DELETE /_faults/stream`` with the fault
API on), for the next ``count`` streams: ``slow_first_part`` (``delay_ms`` more before the
first token), ``unavailable`` (``503 ServiceUnavailable`` before the stream), ``model_error``
(the container answers 500: ``424 ModelError``), ``cut`` (the connection closes after
``after_parts`` parts, without the chunked body's end: the endpoint reset mid-stream),
``stall`` (``delay_ms`` of silence after ``after_parts`` parts, then the rest),
``model_stream_error`` (a ``ModelStreamError`` event after ``after_parts`` parts, then the end)
and ``internal_stream_failure`` (likewise ``InternalStreamFailure``).

References
----------
InvokeEndpointWithResponseStream (request headers, response, errors):
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpointWithResponseStream.html
ResponseStream (PayloadPart, ModelStreamError, InternalStreamFailure):
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_ResponseStream.html
How containers serve (streamed) requests:
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html
OpenAI chat completions streaming (``chat.completion.chunk``, ``data: [DONE]``):
https://platform.openai.com/docs/api-reference/chat-streaming
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from functions.gpu_endpoint.container import ContainerReply, sagemaker_facade

if TYPE_CHECKING:
    from functions.gpu_endpoint.capacity import InferenceComponentCapacity

#: Media type of the container's stream.
STREAM_MEDIA_TYPE = "text/event-stream"
#: ``Content-Type`` of SageMaker's event-stream answer.
EVENT_STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
#: ``InvokeEndpointWithResponseStream``'s ``Accept`` (the container's media type).
SAGEMAKER_ACCEPT_HEADER = "x-amzn-sagemaker-accept"
#: ``InvokeEndpointWithResponseStream``'s ``ContentType`` of the answer.
SAGEMAKER_CONTENT_TYPE_HEADER = "X-Amzn-SageMaker-Content-Type"
#: The most tokens one stream generates.
MAX_TOKENS = 4096
#: Model name in the chunks.
STREAM_MODEL = "warmstart-gpu-stream"

EventEncoder = Callable[[Mapping[str, str], bytes], bytes]
"""``encode(headers, payload) -> bytes``: one event-stream message
(``infra.local.eventstream.encode_message``)."""

StreamFaultKind = Literal["slow_first_part", "unavailable", "model_error", "cut", "stall",
                          "model_stream_error", "internal_stream_failure"]
STREAM_FAULT_KINDS: tuple[str, ...] = ("slow_first_part", "unavailable", "model_error", "cut",
                                       "stall", "model_stream_error", "internal_stream_failure")
#: ``ModelStreamError``'s error codes (the API reference's ResponseStream).
MODEL_STREAM_ERROR_CODES = ("StreamBroken", "ModelInvocationTimeExceeded")


@dataclass(frozen=True)
class GenerationConfig:
    """The pace of a generated stream.

    Parameters
    ----------
    first_token_ms : float
        From the request to the first content chunk, ms, >= 0.
    token_interval_ms : float
        Between content chunks, ms, >= 0.
    max_tokens : int
        Tokens generated when the request does not ask for fewer, 1 to :data:`MAX_TOKENS`.

    Notes
    -----
    The defaults (100 ms, 20 ms i.e. 50 tokens/s, 32 tokens) are illustrative, not a
    measurement: a test or the bench sets its own.

    Raises
    ------
    ValueError
        A negative time or a token count outside 1 to :data:`MAX_TOKENS`.
    """

    first_token_ms: float = 100.0
    token_interval_ms: float = 20.0
    max_tokens: int = 32

    def __post_init__(self) -> None:
        if not (self.first_token_ms >= 0 and self.token_interval_ms >= 0):
            raise ValueError("first_token_ms and token_interval_ms must be >= 0 ms")
        if not 1 <= self.max_tokens <= MAX_TOKENS:
            raise ValueError(f"max_tokens must be 1 to {MAX_TOKENS}, got {self.max_tokens}")


@dataclass(frozen=True)
class StreamFault:
    """One injected stream fault (see the module docstring for the kinds).

    Parameters
    ----------
    kind : str
        One of :data:`STREAM_FAULT_KINDS`.
    after_parts : int
        ``cut``, ``stall``, ``model_stream_error``, ``internal_stream_failure``: parts sent
        first, >= 0.
    delay_ms : float
        ``slow_first_part``: added before the first token; ``stall``: the silence, ms, >= 0.
    error_code : str
        ``model_stream_error``: one of :data:`MODEL_STREAM_ERROR_CODES`.
    """

    kind: StreamFaultKind
    after_parts: int = 0
    delay_ms: float = 0.0
    error_code: str = "StreamBroken"


class StreamFaults:
    """Faults for the next streams (thread-safe); ``served`` counts streams asked for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fault: StreamFault | None = None
        self._remaining: int | None = None
        self.served = 0

    def set(self, kind: str, *, count: int | None = None, after_parts: int = 0,
            delay_ms: float = 0.0, error_code: str = "StreamBroken") -> None:
        """Inject ``kind`` for the next ``count`` streams (all when None) until `clear`.

        Raises
        ------
        ValueError
            An unknown kind or error code, a negative count, part count or delay.
        """
        if kind not in STREAM_FAULT_KINDS:
            raise ValueError(f"unknown stream fault {kind!r}: use one of {', '.join(STREAM_FAULT_KINDS)}")
        if error_code not in MODEL_STREAM_ERROR_CODES:
            raise ValueError(f"error_code must be one of {', '.join(MODEL_STREAM_ERROR_CODES)}")
        if (count is not None and count < 0) or after_parts < 0 or delay_ms < 0:
            raise ValueError("count, after_parts and delay_ms must be >= 0")
        with self._lock:
            self._fault = StreamFault(kind, int(after_parts), float(delay_ms), error_code)  # type: ignore[arg-type]
            self._remaining = count

    def clear(self) -> None:
        """No more faults."""
        with self._lock:
            self._fault, self._remaining = None, None

    def take(self) -> StreamFault | None:
        """The fault of this stream (consumes one of ``count``)."""
        with self._lock:
            self.served += 1
            if self._fault is None or self._remaining == 0:
                return None
            if self._remaining is not None:
                self._remaining -= 1
            return self._fault


class StreamCut(ConnectionAbortedError):
    """Raised inside a response body to make the server drop the connection mid-stream."""


@dataclass(frozen=True)
class GenerationRequest:
    """A parsed stream request: the prompt and the token count, 1 to ``max_tokens``."""

    prompt: str
    max_tokens: int


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _bad_request(message: str) -> ContainerReply:
    return ContainerReply(400, _json_bytes({"error": "bad_request", "message": message}),
                          {"Content-Type": "application/json"})


def parse_generation(raw: bytes, config: GenerationConfig) -> GenerationRequest | ContainerReply:
    """The request of a stream, or the container's ``400`` reply for a bad body."""
    try:
        body = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _bad_request("the body must be JSON")
    if not isinstance(body, dict):
        return _bad_request('send a JSON object: {"messages": [{"role": "user", "content": "..."}]}')
    prompt = body.get("prompt")
    messages = body.get("messages")
    if isinstance(messages, list):
        users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        prompt = users[-1] if users else None
    if not isinstance(prompt, str) or not prompt.strip():
        return _bad_request("no prompt: send messages with a user message, or prompt")
    count = body.get("max_tokens", config.max_tokens)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TOKENS:
        return _bad_request(f"max_tokens must be an integer 1 to {MAX_TOKENS}")
    return GenerationRequest(prompt.strip(), min(count, config.max_tokens))


def reply_tokens(request: GenerationRequest) -> list[str]:
    """The generated tokens: a deterministic reply to the prompt, ``max_tokens`` long."""
    words = ["Answer", "from", "the", "GPU", "endpoint", "to:", *request.prompt.split()]
    return [(" " if i else "") + words[i % len(words)] for i in range(request.max_tokens)]


def _chunk(stream_id: str, created: int, delta: dict[str, Any], finish: str | None) -> bytes:
    body = {"id": stream_id, "object": "chat.completion.chunk", "created": created,
            "model": STREAM_MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + _json_bytes(body) + b"\n\n"


async def generate(request: GenerationRequest, config: GenerationConfig,
                   fault: StreamFault | None = None) -> AsyncIterator[bytes]:
    """The container's SSE chunks: the role chunk at once, the tokens at the configured pace,
    the final chunk (``finish_reason`` ``length``), then ``data: [DONE]``."""
    stream_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    yield _chunk(stream_id, created, {"role": "assistant", "content": ""}, None)
    delay_ms = config.first_token_ms
    if fault is not None and fault.kind == "slow_first_part":
        delay_ms += fault.delay_ms
    for token in reply_tokens(request):
        await asyncio.sleep(delay_ms / 1000.0)
        delay_ms = config.token_interval_ms
        yield _chunk(stream_id, created, {"content": token}, None)
    yield _chunk(stream_id, created, {}, "length")
    yield b"data: [DONE]\n\n"


def _event(encode: EventEncoder, chunk: bytes) -> bytes:
    return encode({":event-type": "PayloadPart", ":content-type": "application/octet-stream",
                   ":message-type": "event"}, chunk)


def _exception(encode: EventEncoder, kind: str, body: Mapping[str, str]) -> bytes:
    return encode({":exception-type": kind, ":content-type": "application/json",
                   ":message-type": "exception"}, _json_bytes(dict(body)))


async def _faulted(chunks: AsyncIterator[bytes], fault: StreamFault | None,
                   wrap: Callable[[bytes], bytes],
                   failure: Callable[[StreamFault], bytes | None]) -> AsyncIterator[bytes]:
    """``chunks`` through ``wrap``; a mid-stream fault after ``after_parts`` parts: a silence
    (``stall``), or the ``failure`` bytes then the end, or the connection dropped
    (`StreamCut`) when ``failure`` gives None."""
    sent = 0
    async for chunk in chunks:
        if fault is not None and fault.kind == "stall" and sent == fault.after_parts:
            await asyncio.sleep(fault.delay_ms / 1000.0)
        if fault is not None and fault.kind in ("cut", "model_stream_error",
                                                "internal_stream_failure") \
                and sent >= fault.after_parts:
            last = failure(fault)
            if last is None:
                raise StreamCut(f"injected: stream cut after {sent} parts")
            yield last
            return
        yield wrap(chunk)
        sent += 1


def _facade_failure(encode: EventEncoder) -> Callable[[StreamFault], bytes | None]:
    def failure(fault: StreamFault) -> bytes | None:
        if fault.kind == "model_stream_error":
            return _exception(encode, "ModelStreamError", {
                "Message": "injected: the model stream failed", "ErrorCode": fault.error_code})
        if fault.kind == "internal_stream_failure":
            return _exception(encode, "InternalStreamFailure",
                              {"Message": "injected: the stream processing failed"})
        return None
    return failure


def _container_failure(fault: StreamFault) -> bytes | None:
    """Without the facade a mid-stream fault is a dropped connection (a container has no
    error event)."""
    return None


class StreamRoutes:
    """ASGI middleware serving the streaming routes (see the module docstring) in front of
    ``app``; every other request goes to ``app`` untouched.

    Parameters
    ----------
    app : ASGI app
    endpoint_name : str or None
        The only endpoint name answered (any when None).
    capacity : InferenceComponentCapacity, optional
        As the buffered routes: the inference component header is required and one slot is
        held for the whole stream.
    encode_event : callable, optional
        `EventEncoder`; None: the facade route is not served.
    generation : GenerationConfig
    faults : StreamFaults, optional
    enable_fault_api : bool
        Serve ``POST``/``DELETE /_faults/stream``.
    """

    def __init__(self, app: Any, *, endpoint_name: str | None,
                 capacity: InferenceComponentCapacity | None, encode_event: EventEncoder | None,
                 generation: GenerationConfig, faults: StreamFaults | None,
                 enable_fault_api: bool) -> None:
        self.app = app
        self.endpoint_name = endpoint_name
        self.capacity = capacity
        self.encode_event = encode_event
        self.generation = generation
        self.faults = faults
        self.enable_fault_api = enable_fault_api

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        handler = self._route(scope) if scope["type"] == "http" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        from starlette.requests import Request

        response = await handler(Request(scope, receive))
        await response(scope, receive, send)

    def _route(self, scope: Mapping[str, Any]) -> Callable[[Any], Any] | None:
        method, path = scope["method"], scope["path"]
        if method == "POST" and path == "/invocations":
            accept = dict(scope["headers"]).get(b"accept", b"").decode("latin-1")
            return self._container if STREAM_MEDIA_TYPE in accept else None
        parts = path.split("/")
        if (method == "POST" and self.encode_event is not None and len(parts) == 4
                and parts[1] == "endpoints" and parts[3] == "invocations-response-stream"):
            return self._facade
        if path == "/_faults/stream" and self.enable_fault_api and self.faults is not None \
                and method in ("POST", "DELETE"):
            return self._fault_api
        return None

    # -- the container ----------------------------------------------------------------------
    async def _container(self, request: Any) -> Any:
        from starlette.responses import Response, StreamingResponse

        fault = self.faults.take() if self.faults is not None else None
        parsed = self._parse(await request.body(), fault)
        if isinstance(parsed, ContainerReply):
            return Response(parsed.body, parsed.status, headers=dict(parsed.headers))
        chunks = _faulted(generate(parsed, self.generation, fault), fault, lambda c: c,
                          _container_failure)
        return StreamingResponse(chunks, 200, media_type=STREAM_MEDIA_TYPE)

    def _parse(self, raw: bytes, fault: StreamFault | None) -> GenerationRequest | ContainerReply:
        if fault is not None and fault.kind == "model_error":
            return ContainerReply(500, _json_bytes({"error": "model_error",
                                                    "message": "injected container failure"}),
                                  {"Content-Type": "application/json"})
        return parse_generation(raw, self.generation)

    # -- SageMaker's front end --------------------------------------------------------------
    async def _facade(self, request: Any) -> Any:
        from starlette.responses import Response, StreamingResponse

        from functions.gpu_endpoint.app import IC_HEADER, IC_HEADER_REQUIRED_MESSAGE

        name = request.url.path.split("/")[2]
        refused: str | None = None
        if self.endpoint_name is not None and name != self.endpoint_name:
            refused = f"Endpoint {name} of account 000000000000 not found."
        elif self.capacity is not None:
            component = request.headers.get(IC_HEADER)
            if component is None:
                refused = IC_HEADER_REQUIRED_MESSAGE
            elif component != self.capacity.name:
                refused = (f"Inference Component {component} of endpoint {name} of account "
                           "000000000000 not found.")
        if refused is not None:
            return _error_response(400, "ValidationError", refused)
        fault = self.faults.take() if self.faults is not None else None
        if fault is not None and fault.kind == "unavailable":
            return _error_response(503, "ServiceUnavailable", "Service unavailable (injected)")
        accept = request.headers.get(SAGEMAKER_ACCEPT_HEADER, STREAM_MEDIA_TYPE)
        if STREAM_MEDIA_TYPE not in accept:
            reply = _bad_request(f"this container streams {STREAM_MEDIA_TYPE} only, not {accept!r}")
            return _reply_response(sagemaker_facade(reply, name))
        parsed = self._parse(await request.body(), fault)
        if isinstance(parsed, ContainerReply):
            return _reply_response(sagemaker_facade(parsed, name))
        slot = await self._slot()
        if isinstance(slot, Response):
            return slot
        encode = self.encode_event
        assert encode is not None
        body = _faulted(generate(parsed, self.generation, fault), fault,
                        lambda chunk: _event(encode, chunk), _facade_failure(encode))
        headers = {SAGEMAKER_CONTENT_TYPE_HEADER: STREAM_MEDIA_TYPE,
                   "x-Amzn-Invoked-Production-Variant": "AllTraffic"}
        return StreamingResponse(self._holding(body, slot), 200, headers=headers,
                                 media_type=EVENT_STREAM_CONTENT_TYPE)

    async def _slot(self) -> Any:
        """None without a capacity; else a held slot's releaser, or the 400 of no capacity."""
        if self.capacity is None:
            return None
        from functions.gpu_endpoint.capacity import NoCapacity

        try:
            await self.capacity.acquire()
        except NoCapacity as exc:
            return _error_response(400, "ValidationError", exc.message)
        return self.capacity.release

    @staticmethod
    async def _holding(body: AsyncIterator[bytes],
                       release: Callable[[], None] | None) -> AsyncIterator[bytes]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            if release is not None:
                release()

    # -- faults -----------------------------------------------------------------------------
    async def _fault_api(self, request: Any) -> Any:
        from starlette.responses import Response

        faults = self.faults
        assert faults is not None
        if request.method == "DELETE":
            faults.clear()
            return Response(_json_bytes({"ok": True, "served": faults.served}), 200,
                            media_type="application/json")
        try:
            spec = json.loads(await request.body())
            faults.set(str(spec["kind"]), count=spec.get("count"),
                       after_parts=int(spec.get("after_parts") or 0),
                       delay_ms=float(spec.get("delay_ms") or 0.0),
                       error_code=str(spec.get("error_code") or "StreamBroken"))
        except (ValueError, KeyError, TypeError) as exc:
            return Response(_json_bytes({"error": "bad_request", "message": str(exc)}), 400,
                            media_type="application/json")
        return Response(_json_bytes({"ok": True}), 200, media_type="application/json")


def _error_response(status: int, code: str, message: str) -> Any:
    from starlette.responses import Response

    return Response(_json_bytes({"message": message}), status, media_type="application/json",
                    headers={"x-amzn-ErrorType": code})


def _reply_response(reply: ContainerReply) -> Any:
    from starlette.responses import Response

    return Response(reply.body, reply.status, headers=dict(reply.headers))


def mount_streaming(app: Any, *, endpoint_name: str | None,
                    capacity: InferenceComponentCapacity | None = None,
                    encode_event: EventEncoder | None = None,
                    generation: GenerationConfig | None = None,
                    faults: StreamFaults | None = None, enable_fault_api: bool = False) -> None:
    """Serve the streaming routes in front of the FastAPI ``app`` (before it starts).

    Sets ``app.state.stream_faults`` (a new `StreamFaults` when the fault API is on and none
    is given) and ``app.state.generation``.
    """
    if faults is None and enable_fault_api:
        faults = StreamFaults()
    generation = generation or GenerationConfig()
    app.state.stream_faults = faults
    app.state.generation = generation
    app.add_middleware(StreamRoutes, endpoint_name=endpoint_name, capacity=capacity,
                       encode_event=encode_event, generation=generation, faults=faults,
                       enable_fault_api=enable_fault_api)
