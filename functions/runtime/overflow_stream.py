"""Overflow for streaming routes: the GPU endpoint's token stream as the route's SSE stream.

On a cold start, when the local path cannot send a first token within the route's
``first_token_ms``, the dispatcher calls :func:`open_overflow_stream`: SageMaker's
``InvokeEndpointWithResponseStream`` (``POST /endpoints/{EndpointName}/invocations-response-stream``,
``X-Amzn-SageMaker-Accept: text/event-stream``), signed with SigV4 by awscrt and sent with
``http.client`` through the buffered overflow's pooled client
(`functions.runtime.sagemaker_runtime.SageMakerRuntime.post`; no boto3 at a cold start).

The answer is an AWS event stream (``application/vnd.amazon.eventstream``), decoded with
botocore's ``EventStreamBuffer`` (imported on the first stream that overflows, never at init:
10-20 ms in a fresh process on the project's 2-core host, median 14 ms of 7; 3-4 ms once the
toolkit's overflow modules are loaded, which bring part of what it imports; measured
2026-12-02 with ``time.perf_counter`` around the import). Its events:

``PayloadPart`` (``Bytes``)
    A piece of the container's stream. Part boundaries are the container's writes, not its
    records, so the bytes go through a line buffer: each complete line is one *part*, a JSON
    object, either an SSE ``data: {...}`` line (OpenAI-compatible and TGI streams; other SSE
    fields, comments and ``data: [DONE]`` are skipped) or a JSON line (DJL/LMI's
    ``jsonlines``). A line that is not a JSON object fails the stream (``model_error``).
``ModelStreamError`` (``{"Message", "ErrorCode"}``)
    The model's stream broke (``StreamBroken``) or ran past SageMaker's limit
    (``ModelInvocationTimeExceeded``): ``model_error``.
``InternalStreamFailure`` (``{"Message"}``)
    SageMaker's own failure: ``tool_unavailable``.

Each part goes through the route's ``overflow_event(part) -> data | None`` hook; the data
becomes one SSE event (`functions.runtime.streaming.sse_event`), None skips the part.

Timing. The first event (the first part the hook maps to data) must arrive before
``deadline_ms``, the first-token deadline: connect, request and every read before it are
bounded by the time left; past it, or on any failure before it, the call gives up cleanly
(socket closed, failure counted, logged with its tag) and returns None: the caller falls back
to the route's degraded first event. After the first event each read waits at most
``part_timeout_s`` (:data:`PART_TIMEOUT_S`) and never past ``stream_deadline_ms`` (the
function's own deadline less a margin), so a stalled endpoint never holds the stream until the
function's timeout.

A failure after the first event (the endpoint reset, a ``ModelStreamError``, a stall, a part
the hook refuses) ends the stream with one last event, ``sse_event({"error": {"type":
"overflow_stream_error", "message": ...}}, event="error")``, then raises the failure (an
`functions.runtime.overflow.OverflowFailure`, its ``tag`` the failure tag), so the runtime
client sends the Runtime API's error trailers and the client can tell it apart from a complete
stream.

Circuit breaker: the stream asks the overflow client's breaker first (an open breaker is no
call); a complete stream is a success, any failure one failure, as the buffered overflow counts
them; a client that goes away (``StreamedResponse.close``) is neither (a half-open probe is
released).

References
----------
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpointWithResponseStream.html
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_ResponseStream.html
https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-test-endpoints.html
(a streamed answer's parts do not follow the container's records: read them through a line buffer)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from functions.runtime.clock import monotonic_ms as _clock_ms
from functions.runtime.overflow import (
    OverflowFailure,
    OverflowModelError,
    OverflowResult,
    OverflowTimeout,
    OverflowUnavailable,
)
from functions.runtime.streaming import StreamedResponse, sse_event

if TYPE_CHECKING:
    from functions.runtime.admission import LatencyTracker, OverflowState
    from functions.runtime.admission.state import RouteHooks
    from functions.runtime.overflow import OverflowClient

__all__ = [
    "EVENT_STREAM_CONTENT_TYPE",
    "MAX_LINE_BYTES",
    "PART_TIMEOUT_S",
    "STREAM_ERROR_TYPE",
    "PartDecoder",
    "StreamOverflow",
    "open_overflow_stream",
    "stream_overflow",
]

#: ``Content-Type`` of SageMaker's streamed answer.
EVENT_STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
#: The ``type`` of the final ``error`` event of an overflow stream that failed midway.
STREAM_ERROR_TYPE = "overflow_stream_error"
#: The longest wait for the next part once the stream has started, s: an endpoint that sends
#: nothing for this long is taken as stalled (SageMaker itself allows a streamed invocation
#: 8 minutes in total, ``ModelInvocationTimeExceeded``; a token stream's gaps are tens of ms).
PART_TIMEOUT_S = 10.0
#: The longest line (one part) of the container's stream, bytes.
MAX_LINE_BYTES = 1024 * 1024
#: Bytes asked of the socket per read (a chunked answer returns at most one chunk).
READ_BYTES = 64 * 1024
#: Less time than this left for the first event: no call, ms.
MIN_BUDGET_MS = 10.0
#: Kept from a streamed overflow's budget for what follows a stream that cannot start: the
#: socket's close, the log line and admission's next decision before the degraded first
#: event, ms. The buffered client keeps 20 ms (``OverflowClient.reserve_ms``); on the
#: project's 2-core host under the test suite's load that step took over 13 ms more than
#: that reserve left, so a cold request was shed instead of degraded (seen in
#: tests/integration/test_overflow_stream.py, 2026-12-02): 50 ms.
STREAM_RESERVE_MS = 50.0
_ACCEPT_HEADER = "X-Amzn-SageMaker-Accept"
_IC_HEADER = "X-Amzn-SageMaker-Inference-Component"
#: The fields of an SSE line (``field: value``); any other line is a JSON line.
_SSE_FIELDS = frozenset({b"data", b"event", b"id", b"retry"})
_log = logging.getLogger("warmstart")



class PartDecoder:
    """Parts of the container's stream from ``PayloadPart`` bytes (see the module docstring).

    ``feed(data)`` returns the parts its complete lines hold; ``finish()`` those of a last line
    without its newline.

    Raises
    ------
    OverflowModelError
        A line that is not a JSON object (after ``data:``), or one over :data:`MAX_LINE_BYTES`.
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE_BYTES:
            raise OverflowModelError(f"the overflow stream sent a line over {MAX_LINE_BYTES} bytes")
        return [part for line in lines if (part := self._part(line)) is not None]

    def finish(self) -> list[dict[str, Any]]:
        line, self._pending = self._pending, b""
        part = self._part(line)
        return [part] if part is not None else []

    @staticmethod
    def _part(line: bytes) -> dict[str, Any] | None:
        text = line.strip()
        if not text or text.startswith(b":"):
            return None  # a blank line ends an SSE event; ':' starts a comment
        field, colon, value = text.partition(b":")
        if colon and field in _SSE_FIELDS:
            if field != b"data":
                return None  # event:, id:, retry:
            text = value.strip()
            if text == b"[DONE]" or not text:
                return None
        try:
            part = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise OverflowModelError(
                f"the overflow stream sent a part that is not JSON: {text[:80]!r}") from None
        if not isinstance(part, dict):
            raise OverflowModelError(
                f"the overflow stream sent a part that is {type(part).__name__}, not a JSON object")
        return part


class _EventStream:
    """The endpoint's event stream read part by part; each read bounded by ``timeout_s()``."""

    def __init__(self, body: Any, endpoint: str, timeout_s: Callable[[], float]) -> None:
        from botocore.eventstream import EventStreamBuffer  # lazy: only a stream that overflows

        self._body = body
        self._endpoint = endpoint
        self._timeout_s = timeout_s
        self._buffer = EventStreamBuffer()
        self._decoder = PartDecoder()
        self._ended = False
        self._unparsed = 0  # bytes fed to the buffer and not yet parsed into a message

    def parts(self) -> Iterator[dict[str, Any]]:
        """Every part, in order; raises an `OverflowFailure` when the stream fails."""
        from botocore.eventstream import ParserError

        from functions.runtime import sagemaker_runtime as smr

        while not self._ended:
            wait_s = self._timeout_s()
            if wait_s <= 0:
                raise OverflowTimeout(f"overflow endpoint {self._endpoint!r}: no time left for "
                                      "the next part of its stream")
            self._body.set_timeout(wait_s)
            try:
                data = self._body.read1(READ_BYTES)
            except smr.ReadTimeout as exc:
                raise OverflowTimeout(f"overflow endpoint {self._endpoint!r}: no part of its "
                                      f"stream within {wait_s:.2f} s") from exc
            except smr.EndpointError as exc:
                raise OverflowTimeout(f"overflow endpoint {self._endpoint!r} dropped the "
                                      f"connection mid-stream: {exc}") from exc
            if not data:
                self._ended = True
                if self._unparsed:  # bytes of a message that never ended
                    raise OverflowTimeout(f"overflow endpoint {self._endpoint!r}: the stream "
                                          "ended inside an event (connection dropped)")
                yield from self._decoder.finish()
                return
            self._buffer.add_data(data)
            self._unparsed += len(data)
            try:
                messages = list(self._buffer)
            except ParserError as exc:
                raise OverflowUnavailable(f"overflow endpoint {self._endpoint!r}: its event "
                                          f"stream is corrupt: {exc}") from exc
            for message in messages:
                self._unparsed -= message.prelude.total_length
                yield from self._message(message.headers, message.payload)

    def _message(self, headers: Mapping[str, Any], payload: bytes) -> list[dict[str, Any]]:
        kind = headers.get(":message-type")
        if kind == "event":
            if headers.get(":event-type") == "PayloadPart":
                return self._decoder.feed(payload)
            return []  # an event this client does not know: skipped, as botocore does
        name = self._endpoint
        if kind == "exception":
            exception = str(headers.get(":exception-type", ""))
            try:
                body = json.loads(payload or b"{}")
            except (ValueError, UnicodeDecodeError):
                body = {}
            body = body if isinstance(body, dict) else {}
            message = str(body.get("Message") or body.get("message") or "")
            if exception == "InternalStreamFailure":
                raise OverflowUnavailable(f"overflow endpoint {name!r}: InternalStreamFailure: "
                                          f"{message}")
            code = body.get("ErrorCode")
            raise OverflowModelError(f"overflow endpoint {name!r}: {exception or 'exception'}"
                                     f"{f' ({code})' if code else ''}: {message}")
        code = headers.get(":error-code", "")
        raise OverflowUnavailable(f"overflow endpoint {name!r}: stream error {code}: "
                                  f"{headers.get(':error-message', '')}")

    def close(self) -> None:
        self._body.close()


class _OverflowEvents:
    """The route's SSE events from the endpoint's parts: the first one already read, the
    rest as they come; after a failure the ``error`` event, then the failure raised. An
    iterator (not a generator) so `close` may come from any thread."""

    def __init__(self, first: bytes, parts: Iterator[dict[str, Any]], stream: _EventStream,
                 map_part: Callable[[dict[str, Any]], Any], overflow: OverflowClient,
                 feature: str) -> None:
        self._first: bytes | None = first
        self._parts = parts
        self._stream = stream
        self._map = map_part
        self._overflow = overflow
        self._feature = feature
        self._closed = False
        self._done = False
        self._raise: OverflowFailure | None = None
        #: the mid-stream failure, once there was one
        self.failure: OverflowFailure | None = None

    def __iter__(self) -> _OverflowEvents:
        return self

    def __next__(self) -> bytes:
        if self._raise is not None:
            failure, self._raise = self._raise, None
            raise failure
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self._done or self._closed:
            raise StopIteration
        try:
            for part in self._parts:
                data = _mapped(self._map, part)
                if data is not None:
                    return sse_event(data)
        except OverflowFailure as failure:
            self._done = True
            self._stream.close()
            if self._closed:  # the client went away and the socket was closed under the read
                raise StopIteration from None
            self._overflow.breaker.record_failure()
            self.failure = self._raise = failure
            _log_failure(self._overflow, self._feature, failure, "mid-stream")
            return sse_event({"error": {"type": STREAM_ERROR_TYPE, "message": failure.message}},
                             event="error")
        self._done = True
        self._overflow.breaker.record_success()
        raise StopIteration

    def close(self) -> None:
        """The client went away: close the socket; the breaker counts nothing."""
        if self._closed:
            return
        self._closed = True
        if not self._done:
            self._overflow.breaker.release()
        self._stream.close()


def _mapped(map_part: Callable[[dict[str, Any]], Any], part: dict[str, Any]) -> Any:
    """The route's data of one part; a hook's refusal is `OverflowModelError`."""
    try:
        return map_part(part)
    except OverflowFailure:
        raise
    except Exception as exc:
        raise OverflowModelError(f"the route's overflow_event hook refused a part: "
                                 f"{type(exc).__name__}: {exc}") from exc


def _log_failure(overflow: OverflowClient, feature: str, failure: OverflowFailure,
                 when: str) -> None:
    _log.warning("route %r: overflow stream of endpoint %r failed %s: %s (failure_tag=%s)",
                 feature, overflow.endpoint_name, when, failure.message, failure.tag)


def open_overflow_stream(
    overflow: OverflowClient,
    hooks: RouteHooks,
    payload: Mapping[str, Any],
    deadline_ms: float,
    *,
    feature: str = "",
    stream_deadline_ms: float | None = None,
    part_timeout_s: float = PART_TIMEOUT_S,
    clock_ms: Callable[[], float] = _clock_ms,
    latency: LatencyTracker | None = None,
    on_failure: Callable[[OverflowFailure], None] | None = None,
) -> StreamedResponse | None:
    """Open the GPU endpoint's stream for a streaming route and wait for its first event.

    Parameters
    ----------
    overflow : OverflowClient
        The environment's overflow client (endpoint name, inference component, breaker and
        the awscrt client it shares).
    hooks : RouteHooks
        The route's hooks: ``overflow_event`` (required), ``overflow_request`` (optional).
    payload : Mapping[str, Any]
        The route's validated payload; sent as JSON through ``overflow_request``.
    deadline_ms : float
        The first-token deadline on ``clock_ms`` (the dispatcher's monotonic ms clock).
    feature : str
        The route's name, for the log lines.
    stream_deadline_ms : float, optional
        No read of the stream past this time on ``clock_ms`` (the function's deadline less a
        margin); None: only ``part_timeout_s`` bounds each wait.
    part_timeout_s : float
        After the first event, the longest wait for the next part, s (> 0).
    clock_ms : callable
        Monotonic ms clock (default ``time.perf_counter() * 1000``, the dispatcher's).
    latency : LatencyTracker, optional
        Observes the time from the call to the first event, ms (the estimate admission uses
        for an overflowed stream's first token).
    on_failure : callable, optional
        Gets the `OverflowFailure` when the call gives up before the first event.

    Returns
    -------
    StreamedResponse or None
        ``200``, ``content-type: text/event-stream``, ``x-warmstart-path: overflow``,
        ``server-timing: overflow;dur=<ms to the first event>``; its chunks are the route's SSE
        events (the first one already read), and, after a mid-stream failure, the ``error``
        event then the failure raised. ``close()`` closes the socket. None when the stream
        cannot send a first event by ``deadline_ms`` (breaker open, no budget, the endpoint
        refused or failed, too slow, the hooks failed): the failure is counted and logged
        with its tag, nothing is left open.

    Raises
    ------
    ValueError
        ``hooks.overflow_event`` is None.
    """
    if hooks.overflow_event is None:
        raise ValueError("open_overflow_stream needs a route with an overflow_event hook")
    started_ms = clock_ms()
    name = overflow.endpoint_name

    def give_up(failure: OverflowFailure, *, count: bool = True) -> None:
        if count:
            overflow.breaker.record_failure()
        else:
            overflow.breaker.release()
        _log_failure(overflow, feature, failure, "before its first event")
        if on_failure is not None:
            on_failure(failure)

    try:
        body = dict(hooks.overflow_request(payload)) if hooks.overflow_request is not None \
            else dict(payload)
        raw = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except Exception as exc:  # noqa: BLE001 - the agent's hook failed, or a body that is not JSON
        failure = OverflowModelError(f"the route's overflow_request hook failed or returned no "
                                     f"JSON object: {type(exc).__name__}: {exc}")
        _log_failure(overflow, feature, failure, "before its first event")
        if on_failure is not None:
            on_failure(failure)
        return None
    if not overflow.breaker.allow():
        give_up(OverflowUnavailable(f"overflow endpoint {name!r}: circuit breaker is open"),
                count=False)
        return None

    def left_s() -> float:
        return (deadline_ms - clock_ms()) / 1000.0

    stream: _EventStream | None = None
    try:
        if left_s() * 1000.0 < MIN_BUDGET_MS:
            raise OverflowTimeout(f"no time left for an overflow stream (first-token deadline "
                                  f"in {left_s() * 1000.0:.0f} ms)")
        runtime = overflow.sagemaker_runtime()
        if runtime is None:
            give_up(OverflowUnavailable("the overflow client is not the awscrt client (a "
                                        "client_factory was given): no stream"), count=False)
            return None
        headers = [("Content-Type", "application/json"), (_ACCEPT_HEADER, "text/event-stream")]
        if overflow.inference_component:
            headers.append((_IC_HEADER, overflow.inference_component))
        budget_s = left_s()
        if budget_s * 1000.0 < MIN_BUDGET_MS:
            raise OverflowTimeout("no time left for an overflow stream after making the client")
        answer = _post(overflow, runtime, f"/endpoints/{quote(name, safe='')}/invocations-response-stream",
                       headers, raw, connect_s=min(overflow.connect_timeout_cap_s, budget_s / 2.0),
                       read_s=budget_s)
        status_headers, response = answer
        content_type = status_headers.get("content-type", "")
        if EVENT_STREAM_CONTENT_TYPE not in content_type:
            response.close()
            raise OverflowUnavailable(f"overflow endpoint {name!r} answered {content_type!r}, "
                                      f"not {EVENT_STREAM_CONTENT_TYPE}")
        started = [False]

        def read_timeout_s() -> float:
            if not started[0]:
                return left_s()
            bound = part_timeout_s
            if stream_deadline_ms is not None:
                bound = min(bound, (stream_deadline_ms - clock_ms()) / 1000.0)
            return bound

        stream = _EventStream(response, name, read_timeout_s)
        parts = stream.parts()
        first: bytes | None = None
        for part in parts:
            data = _mapped(hooks.overflow_event, part)
            if data is not None:
                first = sse_event(data)
                break
        if first is None:
            raise OverflowModelError(f"overflow endpoint {name!r}: its stream ended without "
                                     "an event for the route")
        if left_s() < 0:
            raise OverflowTimeout(f"overflow endpoint {name!r}: the first event came after "
                                  "the first-token deadline")
        started[0] = True
    except OverflowFailure as failure:
        if stream is not None:
            stream.close()
        give_up(failure)
        return None
    first_ms = clock_ms() - started_ms
    if latency is not None:
        latency.observe(first_ms)
    events = _OverflowEvents(first, parts, stream, hooks.overflow_event, overflow, feature)
    headers_out = {"content-type": "text/event-stream", "cache-control": "no-cache",
                   "x-warmstart-path": "overflow", "server-timing": f"overflow;dur={first_ms:.1f}"}
    return StreamedResponse(200, headers_out, events, on_close=events.close)


def _post(overflow: OverflowClient, runtime: Any, path: str, headers: list[tuple[str, str]],
          body: bytes, *, connect_s: float, read_s: float) -> tuple[dict[str, str], Any]:
    """The signed request; its failures as the buffered overflow classifies them."""
    try:
        _status, answer_headers, response = runtime.post(path, headers, body,
                                                         connect_timeout_s=connect_s,
                                                         read_timeout_s=read_s)
    except Exception as exc:  # classified as the buffered call's (re-raised when unknown)
        raise overflow._classify(exc) from exc
    return answer_headers, response


class StreamOverflow:
    """One streaming request's overflow, in the shape `functions.runtime.admission.flow.serve_paths`
    takes an overflow client: ``state()`` for the decision, ``invoke(payload, budget_ms=...)``
    for the call; the stream itself is `response` once ``invoke`` returned.

    Made by `stream_overflow`; the estimate admission compares with the first-token budget is
    the route's first-event p95 (``OverflowClient.stream_latency``, seeded with the buffered
    call's p95 until this environment has measured 5 streams), plus the client's creation
    while it is not made.

    Parameters
    ----------
    overflow : OverflowClient
    hooks : RouteHooks
        With ``overflow_event``.
    feature : str
        The route's name.
    stream_deadline_ms : float, optional
        As `open_overflow_stream`.
    part_timeout_s : float
        As `open_overflow_stream`, s.
    clock_ms : callable
        The dispatcher's monotonic ms clock.

    Attributes
    ----------
    response : StreamedResponse or None
        The opened stream, after a successful ``invoke``.
    """

    def __init__(self, overflow: OverflowClient, hooks: RouteHooks, *, feature: str,
                 stream_deadline_ms: float | None = None, part_timeout_s: float = PART_TIMEOUT_S,
                 clock_ms: Callable[[], float] = _clock_ms) -> None:
        from functions.runtime.admission import LatencyTracker

        self.overflow = overflow
        self.hooks = hooks
        self.feature = feature
        self.stream_deadline_ms = stream_deadline_ms
        self.part_timeout_s = part_timeout_s
        self.reserve_ms = STREAM_RESERVE_MS
        self._clock_ms = clock_ms
        tracker = overflow.stream_latency.get(feature)
        if tracker is None:
            tracker = overflow.stream_latency[feature] = LatencyTracker(overflow.latency.p95_ms)
        self.latency = tracker
        self.response: StreamedResponse | None = None

    @property
    def endpoint_name(self) -> str:
        return self.overflow.endpoint_name

    def state(self) -> OverflowState:
        """The client's `OverflowState` with the first-event estimate as its latency."""
        import dataclasses

        state = self.overflow.state()
        client_init_ms = state.client_init_ms
        return dataclasses.replace(state, latency_p95_ms=self.latency.p95_ms + client_init_ms)

    def invoke(self, payload: Mapping[str, Any], *, budget_ms: float,
               validate: Any = None) -> OverflowResult:
        """Open the stream within ``budget_ms`` less :data:`STREAM_RESERVE_MS` (its first
        event; the reserve is left for a fallback); ``validate`` is unused (the route's
        ``overflow_event`` checks every part).

        Returns
        -------
        OverflowResult
            ``body`` empty, ``latency_ms`` the time to the first event; the stream is
            `response`.

        Raises
        ------
        OverflowFailure
            Why no first event could be sent in time (see `open_overflow_stream`).
        """
        failures: list[OverflowFailure] = []
        started_ms = self._clock_ms()
        response = open_overflow_stream(
            self.overflow, self.hooks, payload,
            started_ms + float(budget_ms) - self.reserve_ms,  # room for the fallback
            feature=self.feature, stream_deadline_ms=self.stream_deadline_ms,
            part_timeout_s=self.part_timeout_s, clock_ms=self._clock_ms, latency=self.latency, on_failure=failures.append)
        if response is None:
            raise failures[-1] if failures else OverflowUnavailable("no overflow stream", attempts=0)
        self.response = response
        return OverflowResult({}, self._clock_ms() - started_ms, 1)


def stream_overflow(overflow: OverflowClient | None, hooks: RouteHooks, payload: Any, *,
                    feature: str, stream_deadline_ms: float | None = None,
                    part_timeout_s: float = PART_TIMEOUT_S,
                    clock_ms: Callable[[], float] = _clock_ms) -> StreamOverflow | None:
    """The overflow of one streaming request, or None when the route cannot overflow.

    A streaming route overflows when the environment has an overflow client (an endpoint is
    configured), the route declares ``overflow_event`` and its payload was validated
    (``payload`` not None: what is sent). Give the result to
    `functions.runtime.admission.flow.serve_paths` as ``overflow=`` with the *validated* payload as
    ``overflow_payload`` (``overflow_request`` is applied here), and take the stream from its
    `StreamOverflow.response` in ``on_overflow``.
    """
    if overflow is None or hooks.overflow_event is None or payload is None:
        return None
    return StreamOverflow(overflow, hooks, feature=feature, stream_deadline_ms=stream_deadline_ms,
                          part_timeout_s=part_timeout_s, clock_ms=clock_ms)
