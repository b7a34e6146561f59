"""The parts of a stream that need no event loop: its deadline, its tally, its failures.

`functions.runtime.admission.stream` decides a cold streaming request's path with these
before the web stack (and asyncio, ~30-100 ms to import beside the web stage's own import on
a cold start, measured 2026-12-02 in the emulator) is needed; `functions.runtime.asgi_stream`
(the app's side: an ASGI app driven on the environment's event loop) re-exports them.

Imports only the standard library and the toolkit's stdlib-only modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from functions.runtime.errors import FailureTag
from functions.runtime.streaming import sse_event

__all__ = ["DEADLINE_MARGIN_MS", "MAX_INVOCATION_S", "StreamAborted", "StreamFailed",
           "StreamTally", "error_event", "is_sse", "stream_deadline_ms"]

#: A stream ends this long before the invocation's deadline, ms: the final error event, the
#: Runtime API's error trailers and the end of the chunked body must reach Lambda before the
#: function timeout (which would turn the stream into a bare ``Sandbox.Timedout``); covers the
#: app's cancellation being scheduled and a GIL stall of a busy preload thread (~100 ms,
#: `functions.runtime.admission.HANDLER_HEADROOM_MS`), with room to spare.
DEADLINE_MARGIN_MS = 500.0
#: An invocation's longest duration without a Lambda context, s: Lambda's maximum function
#: timeout. https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html
MAX_INVOCATION_S = 900.0


def stream_deadline_ms(context: Any, now_ms: float) -> float:
    """When a stream must end, on the monotonic clock of ``now_ms`` (ms): the invocation's
    remaining time (``context.get_remaining_time_in_millis()``; Lambda's 900 s maximum without
    a context) less :data:`DEADLINE_MARGIN_MS`."""
    remaining_ms = MAX_INVOCATION_S * 1000.0
    get = getattr(context, "get_remaining_time_in_millis", None)
    if callable(get):
        try:
            remaining_ms = float(get())
        except (TypeError, ValueError):
            pass
    return now_ms + remaining_ms - DEADLINE_MARGIN_MS


def is_sse(content_type: str | None) -> bool:
    """True for a ``text/event-stream`` media type (parameters and case ignored)."""
    return bool(content_type) and str(content_type).partition(";")[0].strip().lower() == "text/event-stream"


def error_event(tag: FailureTag | str, message: str) -> bytes:
    """The final event of an SSE stream that failed after it started (``event: error``)."""
    return sse_event({"error": {"type": str(tag), "message": message}}, event="error")


class StreamTally:
    """What a stream handed out: chunks, bytes, SSE events, first and last chunk times.

    Attributes
    ----------
    first_ms, last_ms : float | None
        Monotonic ms when the first and the last chunk were handed out (None: none was).
    chunks, bytes, events : int
        Chunks, body bytes, and SSE events (blank-line terminated) counted when ``sse``.
    sse : bool
        The body is ``text/event-stream``.
    tag : FailureTag | None
        Why the stream ended early (None: complete, or not ended).

    ``on_first`` (optional) is called once, when the first chunk is handed out.
    """

    __slots__ = ("_clock_ms", "_on_first", "bytes", "chunks", "events", "first_ms", "last_ms",
                 "sse", "tag")

    def __init__(self, clock_ms: Callable[[], float], *, sse: bool = False,
                 on_first: Callable[[], None] | None = None) -> None:
        self._clock_ms = clock_ms
        self._on_first = on_first
        self.sse = sse
        self.first_ms: float | None = None
        self.last_ms: float | None = None
        self.chunks = 0
        self.bytes = 0
        self.events = 0
        self.tag: FailureTag | None = None

    def out(self, chunk: bytes) -> bytes:
        """Count ``chunk`` as handed out now; returns it."""
        now = self._clock_ms()
        if self.first_ms is None:
            self.first_ms = now
            if self._on_first is not None:
                self._on_first()
        self.last_ms = now
        self.chunks += 1
        self.bytes += len(chunk)
        if self.sse:
            self.events += chunk.count(b"\n\n") + chunk.count(b"\r\n\r\n")
        return chunk


class StreamFailed(Exception):
    """A stream failed after its start; raised by the chunk iterator (after the error event of
    an SSE stream), so the runtime client ends the stream with the error trailers.

    Attributes
    ----------
    tag : FailureTag
        ``stream_error``, ``stream_timeout``, ``cold_start_timeout``, ``model_error`` ...
    message : str
    """

    def __init__(self, tag: FailureTag, message: str) -> None:
        super().__init__(f"{tag}: {message}")
        self.tag = tag
        self.message = message


class StreamAborted(Exception):
    """Raised by a streaming route's app, after it sent the final error event of its own, to
    end its stream as failed: the toolkit sends no error event of its own, tags the
    invocation's failure ``tag`` and ends the stream with the Runtime API's error trailers
    (``Runtime.StreamError``, ``errorMessage`` ``"<tag>: <message>"``), so a client reading
    the trailers (``InvokeWithResponseStream``'s ``InvokeComplete.ErrorCode``) tells it apart
    from a complete stream, as it does for the toolkit's own failures (the app's error event,
    whatever its shape, is the stream's last). Without it an app's own error event ends the
    stream cleanly.

    Raise it from the body iterator (Starlette's ``StreamingResponse`` lets it through). Before
    the answer started it is a failure of the app like any other (the buffered failure answer),
    tagged ``tag``; so it is for a caller that gets the stream buffered (HTTP API, Invoke).

    Parameters
    ----------
    tag : FailureTag | str
        The invocation's failure tag, a `functions.runtime.errors.FailureTag` value
        (``stream_error``, ``downstream_timeout``, ``tool_unavailable`` ...).
    message : str
        The trailers' error message (the first 500 characters).

    Raises
    ------
    ValueError
        ``tag`` is not a `FailureTag` value.

    Example
    -------
    >>> async def tokens():                                                  # doctest: +SKIP
    ...     yield sse_event({"token": "the"})
    ...     yield sse_event({"error": {"type": "llm_stream_error", "message": "the LLM stream "
    ...                                "broke"}}, event="error")
    ...     raise StreamAborted("stream_error", "the LLM stream broke after 1 token")

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/api/API_InvokeWithResponseStreamCompleteEvent.html
    """

    def __init__(self, tag: FailureTag | str, message: str) -> None:
        try:
            self.tag = FailureTag(tag)
        except ValueError:
            raise ValueError(f"StreamAborted: {tag!r} is not a failure tag; use one of "
                             f"{', '.join(t.value for t in FailureTag)}") from None
        self.message = str(message)[:500]
        super().__init__(f"{self.tag}: {self.message}")
