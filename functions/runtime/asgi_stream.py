"""Run a streaming route's app so that its answer streams: a `functions.runtime.streaming.StreamedResponse`.

The buffered adapter (`functions.runtime.asgi.Adapter`) returns once the app's answer is
complete; a streaming route's client wants the status and headers first, then each chunk as the
app sends it. :class:`AppStream` runs the app for one request with the same ASGI scope
(Mangum's, completed by `functions.runtime.asgi.Adapter.prepare_scope`: ``root_path``,
``state``, ``warmstart.runtime``), on the execution environment's one event loop
(`functions.runtime.lifespan.AppLoop`), run by a producer thread that holds the loop's lock
for the stream's duration (Lambda runs one invocation at a time per environment, so nothing
else waits for it but the post-response phase):

* ``http.response.start`` gives the status and headers: :meth:`AppStream.wait_started`
  returns once it has arrived (the handler then returns the `StreamedResponse`), or the app's
  buffered answer (a dict in the event source's format) when the app finished at once (a
  JSON error, an ``HTTPException``: start and the final body sent without a pause);
* each ``http.response.body`` with content is one chunk, handed to the runtime client's thread
  through a thread-safe queue (:meth:`AppStream.chunks`); the producer waits while more than
  :data:`HIGH_WATER_BYTES` are queued (a slow client slows the app, memory stays bounded);
* :meth:`AppStream.close` (the client went away) makes the app's ``receive()`` return
  ``http.disconnect`` (Starlette's ``StreamingResponse`` listens for it) and cancels the app;
* an exception after the start ends the iterator: for ``text/event-stream`` it yields a final
  ``sse_event({"error": {"type": "stream_error", "message": ...}}, event="error")`` first,
  then raises :class:`StreamFailed`, so the runtime client sends the error trailers;
* an app that ends its stream with an error event of its own raises :class:`StreamAborted`
  after it: the iterator adds no event and raises :class:`StreamFailed` with the app's
  failure tag, so the stream still ends with the error trailers (``Runtime.StreamError``;
  the ``ErrorCode`` an ``InvokeWithResponseStream`` client reads), as the toolkit's own
  failures end; an app's ``event: error`` without it ends the stream cleanly;
* the stream is bounded: it ends with an error event (``stream_timeout``) at its deadline,
  the function's remaining time less :data:`DEADLINE_MARGIN_MS` (:func:`stream_deadline_ms`),
  and when the app sends nothing for longer than the idle bound (``idle_s``, default
  :data:`DEFAULT_IDLE_S`, ``WARMSTART_STREAM_IDLE_MS``): it never hangs until the function
  timeout;
* the app's work after its final body (FastAPI's ``BackgroundTasks``) is kept as the buffered
  adapter keeps it (`functions.runtime.asgi.Adapter.keep_tail`): the post-response phase when
  the toolkit's extension takes it, else finished before the iterator ends, bounded by the
  invocation's remaining time; its failures are reported, never sent.

Imported only for streaming routes (the web stage has imported ``asyncio`` and Mangum).

References
----------
https://asgi.readthedocs.io/en/latest/specs/www.html (``http.response.start`` / ``.body``,
``more_body``, ``http.disconnect``)
https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from functions.runtime.asgi import Adapter, Scope, _log_background_failure
from functions.runtime.clock import monotonic_ms as _clock_ms
from functions.runtime.errors import AppFailure, FailureTag
from functions.runtime.events import HttpRequest, parse_http_event
from functions.runtime.lifespan import CANCEL_GRACE_S
from functions.runtime.stream_parts import (  # re-exported: the light parts of a stream
    DEADLINE_MARGIN_MS,
    StreamAborted,
    StreamFailed,
    StreamTally,
    error_event,
    is_sse,
    stream_deadline_ms,
)
from functions.runtime.streaming import StreamedResponse

__all__ = [
    "DEADLINE_MARGIN_MS",
    "DEFAULT_IDLE_S",
    "HIGH_WATER_BYTES",
    "AppStream",
    "StreamAborted",
    "StreamFailed",
    "StreamTally",
    "error_event",
    "is_sse",
    "stream_app",
    "stream_deadline_ms",
]

#: Longest the app may send nothing (before its first chunk or between two), s, by default:
#: 30 s, CloudFront's default origin response timeout (the wait for the first byte and between
#: two packets), which would cut a silent stream behind a distribution anyway.
#: https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/DownloadDistValuesOrigin.html#DownloadDistValuesOriginResponseTimeout
DEFAULT_IDLE_S = 30.0
#: Bytes queued for the runtime client beyond which the app's ``send`` waits (it resumes once
#: half of them are written): 1 MiB, half a second of Lambda's capped streaming rate (2 MB/s).
HIGH_WATER_BYTES = 1024 * 1024

_END = object()  # the producer's last queue item



def _aborted(error: BaseException) -> StreamAborted | None:
    """The `StreamAborted` ``error`` is, or the only one an exception group holds."""
    if isinstance(error, StreamAborted):
        return error
    if isinstance(error, BaseExceptionGroup):
        group = error.subgroup(StreamAborted)
        leaves = [] if group is None else list(_leaves(group))
        if len(leaves) == 1 and isinstance(leaves[0], StreamAborted):
            return leaves[0]
    return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        else:
            yield error


class AppStream:
    """One request's run of the app, its answer handed over chunk by chunk.

    Parameters
    ----------
    adapter : Adapter
        The web stage's adapter (its app, loop, scope completion and background-task keeping).
    event : dict[str, Any]
        The HTTP event (a function URL event when the answer streams to the client).
    context : Any
        The Lambda context (``aws.context`` in the scope; the remaining time bounds the tail).
    request : HttpRequest | None
        The event as the dispatcher parsed it (None: parsed here).
    deadline_ms : float
        When the stream must end, monotonic ms (:func:`stream_deadline_ms`).
    idle_s : float
        Longest silence of the app, s (before its start, its first chunk, between two).
    clock_ms : Callable[[], float]
        Monotonic clock, ms (``time.perf_counter``'s, as the dispatcher's).
    on_first_chunk : Callable[[], None] | None
        Called once when the app's first chunk is handed out (admission then moves the
        invocation's deadline from the first token's to the stream's end).

    Attributes
    ----------
    status : int
        The app's status, once started.
    raw_headers : list
        The app's ``[name, value]`` byte pairs, once started.
    complete : bool
        The app sent its final body message.
    failure : BaseException | None
        What the app raised before its answer was complete.
    app_started_ms : float | None
        When the app was started, monotonic ms.
    tally : StreamTally
        What the iterator handed out (an error event included) and when (the runtime client
        writes each chunk a moment later); ``tally.tag``: why the stream ended early
        (``client_disconnected`` when it was closed before its end).
    """

    def __init__(self, adapter: Adapter, event: dict[str, Any], context: Any,
                 request: HttpRequest | None = None, *, deadline_ms: float,
                 idle_s: float = DEFAULT_IDLE_S, clock_ms: Callable[[], float] = _clock_ms,
                 on_first_chunk: Callable[[], None] | None = None) -> None:
        if request is None:
            request = parse_http_event(event, base_path=adapter.base_path,
                                       strip_prefixes=adapter.strip_prefixes)
        handler = adapter.mangum.infer(event, context)
        self.scope: Scope = handler.scope
        adapter.prepare_scope(self.scope, request)
        self.adapter = adapter
        self.event = event
        self.context = context
        self.deadline_ms = deadline_ms
        self.idle_s = idle_s
        self._clock_ms = clock_ms
        self._handler = handler
        self._body: bytes = handler.body
        self.status = 500
        self.raw_headers: list[Any] = []
        self.started = False
        self.complete = False
        self.failure: BaseException | None = None
        self.app_started_ms: float | None = None
        self.tally = StreamTally(clock_ms, on_first=on_first_chunk)
        self._early: list[bytes] = []
        #: The first-token guard (set by admission before `chunks`): when the app has sent no
        #: body by ``first_token_guard_ms`` (monotonic), `chunks` sends ``first_token_event()``
        #: first (None from it: nothing) and goes on with the app's stream.
        self.first_token_guard_ms: float | None = None
        self.first_token_event: Callable[[], bytes | None] | None = None
        self.guarded = False  # the guard fired: the stream's first event is not the app's
        self._announced = False
        self._streams = False  # at the announce: started, not complete, not failed
        self._answering: BaseException | None = None
        self._request_sent = False
        self._abandoned = False
        self._cut = False  # the producer's deadline timer cancelled the app
        self._closed = False
        self._ended = False  # the iterator reached its end (complete or failed)
        self._ready = threading.Event()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued_bytes = 0
        self._waiting = False
        self._loop = adapter.loop.loop
        self._task: asyncio.Task[None] | None = None
        self._sent: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._disconnected: asyncio.Event | None = None
        self._drained: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    # -- the handler's side ------------------------------------------------------------------
    def start(self) -> None:
        """Start the app on the producer thread (returns at once)."""
        self.app_started_ms = self._clock_ms()
        thread = threading.Thread(target=self._produce, name="warmstart-stream", daemon=True)
        self._thread = thread
        thread.start()

    def wait_started(self) -> dict[str, Any] | None:
        """Wait for the app's ``http.response.start`` (at most the idle bound, and the deadline).

        Returns
        -------
        dict[str, Any] | None
            None: the answer streams (status and headers are set, iterate :meth:`chunks`);
            a dict: the app finished at once, its buffered answer in the event source's format
            (its background tasks kept, as the buffered adapter keeps them).

        Raises
        ------
        AppFailure
            The app raised before its answer was complete (``response``: Starlette's
            ``500 text/plain``), or sent no start within its bounds (a ``TimeoutError``,
            ``cut``).
        """
        left_s = min(self.idle_s, (self.deadline_ms - self._clock_ms()) / 1000.0)
        if not self._ready.wait(max(0.0, left_s)):
            self.close()
            raise AppFailure(TimeoutError(
                f"the streaming route sent no response start within {left_s * 1000:.0f} ms and "
                "was cancelled"), {}, cut=True)
        if not self._streams:
            self._join(self.deadline_ms)  # the tail is kept (or finished) by the producer
            response = self.buffered()
            if self.failure is not None or not self.started:
                error = self.failure or RuntimeError("the app returned without a response")
                raise AppFailure(error, response, cut=False)
            return response
        self.tally.sse = is_sse(self.header("content-type"))
        return None

    def header(self, name: str) -> str | None:
        """The app's response header ``name`` (lower case), the first value; None without one."""
        key = name.encode("latin-1")
        for item in self.raw_headers:
            if bytes(item[0]).lower() == key:
                return bytes(item[1]).decode("latin-1")
        return None

    def headers(self) -> tuple[dict[str, str], list[str]]:
        """The app's headers as the prelude carries them: lower-case names, repeated ones
        joined with ``", "``, ``Set-Cookie`` values apart (the second item)."""
        out: dict[str, str] = {}
        cookies: list[str] = []
        for item in self.raw_headers:
            name = bytes(item[0]).decode("latin-1").lower()
            value = bytes(item[1]).decode("latin-1")
            if name == "set-cookie":
                cookies.append(value)
            elif name in out:
                out[name] = f"{out[name]}, {value}"
            else:
                out[name] = value
        return out, cookies

    def buffered(self) -> dict[str, Any]:
        """The app's answer so far as one buffered response in the event source's format
        (Mangum's, corrected as the buffered adapter corrects it)."""
        response: dict[str, Any] = self._handler(
            {"status": self.status, "headers": self.raw_headers, "body": b"".join(self._early)})
        return self.adapter.finish_response(response, self.event)

    def chunks(self) -> Iterator[bytes]:
        """The body, chunk by chunk, as the app sends it (blocking between chunks).

        Raises
        ------
        StreamFailed
            After the final error event (SSE answers only): the app raised
            (``stream_error``), reached the deadline or the idle bound (``stream_timeout``);
            or, with no event of the toolkit's, the app raised `StreamAborted` (its tag).
        """
        try:
            early, self._early = self._early, []
            guard = self.first_token_event if not early else None
            for chunk in early:
                self._taken(len(chunk))
                yield self.tally.out(chunk)
            while True:
                now = self._clock_ms()
                deadline_left_s = (self.deadline_ms - now) / 1000.0
                if deadline_left_s <= 0:
                    yield from self._fail(FailureTag.STREAM_TIMEOUT, self._deadline_message())
                wait_s = min(self.idle_s, deadline_left_s)
                guard_bound = False  # this wait ends at the first-token guard
                if guard is not None and self.first_token_guard_ms is not None:
                    guard_left_s = max(0.0, (self.first_token_guard_ms - now) / 1000.0)
                    guard_bound = guard_left_s <= wait_s
                    wait_s = min(wait_s, guard_left_s)
                try:
                    item = self._queue.get(timeout=wait_s)
                except queue.Empty:
                    if guard_bound and guard is not None:
                        first, guard = guard(), None
                        if first:
                            self.guarded = True
                            yield self.tally.out(first)
                        continue
                    if self.idle_s < deadline_left_s:
                        yield from self._fail(FailureTag.STREAM_TIMEOUT, (
                            f"the app sent nothing for {self.idle_s * 1000:.0f} ms (the stream's "
                            "idle bound) and was cancelled"))
                    yield from self._fail(FailureTag.STREAM_TIMEOUT, self._deadline_message())
                if item is _END:
                    break
                assert isinstance(item, bytes)
                guard = None
                self._taken(len(item))
                yield self.tally.out(item)
            if self._cut:
                yield from self._fail(FailureTag.STREAM_TIMEOUT, self._deadline_message())
            if self.failure is not None:
                error = self.failure
                aborted = _aborted(error)
                if aborted is not None:  # the app sent its own error event
                    self._abort(aborted)
                yield from self._fail(FailureTag.STREAM_ERROR, (
                    f"the app failed after its stream started: {type(error).__name__}: "
                    f"{error}")[:500])
            if not self.complete:
                yield from self._fail(FailureTag.STREAM_ERROR,
                                      "the app ended without the final body of its answer")
            self._ended = True
            self._join(self.deadline_ms)
        finally:
            if not self._ended:  # the consumer stopped early (GeneratorExit) or the stream failed
                self.close()

    def close(self) -> None:
        """Abandon the stream (idempotent, any thread): the app's ``receive()`` returns
        ``http.disconnect`` and the app is cancelled, then given
        :data:`functions.runtime.lifespan.CANCEL_GRACE_S` to unwind."""
        if self._closed:
            return
        self._closed = True
        if not self._ended and self.tally.tag is None:
            self.tally.tag = FailureTag.CLIENT_DISCONNECTED
        try:
            self._loop.call_soon_threadsafe(self._abandon)
        except RuntimeError:  # the loop is closed: nothing runs on it any more
            return
        self._join(self._clock_ms() + CANCEL_GRACE_S * 1000.0)

    def report(self, error: BaseException) -> None:
        """A failure of the app's work after its answer (a background task; ``TimeoutError``
        when cut at the deadline): told to the adapter's ``on_background_failure``."""
        try:
            self.adapter.on_background_failure(error, self.scope)
        except Exception:  # noqa: BLE001 - a report never breaks the loop
            _log_background_failure(error, self.scope)

    # -- the iterator's helpers ----------------------------------------------------------------
    def _fail(self, tag: FailureTag, message: str) -> Iterator[bytes]:
        self.tally.tag = tag
        self.close()
        if self.tally.sse:
            yield self.tally.out(error_event(tag, message))
        self._ended = True
        raise StreamFailed(tag, message)

    def _abort(self, aborted: StreamAborted) -> NoReturn:
        self.tally.tag = aborted.tag
        self.close()
        self._ended = True
        raise StreamFailed(aborted.tag, aborted.message) from aborted

    def _deadline_message(self) -> str:
        return ("the stream reached its deadline (the function's remaining time less "
                f"{DEADLINE_MARGIN_MS:.0f} ms) and was cancelled")

    def _taken(self, size: int) -> None:
        with self._lock:
            self._queued_bytes -= size
            wake = self._waiting and self._queued_bytes <= HIGH_WATER_BYTES // 2
            if wake:
                self._waiting = False
        drained = self._drained
        if wake and drained is not None:
            try:
                self._loop.call_soon_threadsafe(drained.set)
            except RuntimeError:
                pass

    def _join(self, until_ms: float) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, (until_ms - self._clock_ms()) / 1000.0))

    # -- the producer thread (the event loop) --------------------------------------------------
    def _produce(self) -> None:
        apploop = self.adapter.loop
        try:
            with apploop.lock:  # one run at a time, on the environment's loop
                loop = self._loop = apploop.loop
                asyncio.set_event_loop(loop)
                self._disconnected = asyncio.Event()
                self._drained = asyncio.Event()
                sent = self._sent = loop.create_future()
                task = self._task = loop.create_task(self._run())
                task.add_done_callback(self._app_ended)
                left_s = max(0.0, (self.deadline_ms - self._clock_ms()) / 1000.0)
                self._timer = loop.call_later(left_s, self._deadline)
                if self._closed:  # closed before the loop ran: abandon at once
                    loop.call_soon(self._abandon)
                try:
                    loop.run_until_complete(sent)  # the final body, or the app's end
                    if self._answering is not None and not task.done():
                        loop.run_until_complete(task)  # an error answer: is the app failing?
                finally:
                    if self._timer is not None:
                        self._timer.cancel()
                if not task.done():
                    if self.complete and not self._abandoned:  # the background tasks
                        self.adapter.keep_tail(task, self, self.context)
                    else:  # abandoned or cut: cancelled, let it unwind
                        task.cancel()
                        loop.run_until_complete(asyncio.wait({task}, timeout=CANCEL_GRACE_S))
        except BaseException as exc:  # noqa: BLE001 - a toolkit failure: the stream fails
            if self.failure is None:
                self.failure = exc
        finally:
            self._announce()
            self._queue.put(_END)

    def _announce(self) -> None:
        """The handler may look at the answer now (idempotent; on the producer thread)."""
        if self._announced:
            return
        task = self._task
        if self.complete and self._answering is not None and task is not None and not task.done():
            return  # an error answer sent while handling an exception: wait for the app's end
        self._announced = True
        # what the handler sees, fixed now: the producer goes on meanwhile
        self._streams = self.started and not self.complete and self.failure is None
        self._ready.set()

    def _app_ended(self, _task: asyncio.Task[None]) -> None:
        sent = self._sent
        if sent is not None and not sent.done():
            sent.set_result(None)

    def _deadline(self) -> None:
        self._cut = True
        self._abandon()

    def _abandon(self) -> None:
        """On the loop: the client is gone (or the deadline came): disconnect and cancel."""
        self._abandoned = True
        for event in (self._disconnected, self._drained):
            if event is not None:
                event.set()
        task = self._task
        if task is not None and not task.done() and not self.complete:
            task.cancel()

    async def _receive(self) -> dict[str, Any]:
        if not self._request_sent:
            self._request_sent = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        disconnected = self._disconnected
        assert disconnected is not None
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Any) -> None:
        if self._abandoned:
            return  # the client is gone: what the app still sends is dropped
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("the app sent http.response.start twice")
            self.started = True
            self.status = int(message["status"])
            self.raw_headers = list(message.get("headers") or [])
            # after the app's current step: an answer sent whole without a pause is buffered
            self._loop.call_soon(self._announce)
        elif kind == "http.response.body":
            if not self.started or self.complete:
                raise RuntimeError("the app sent http.response.body outside its answer")
            body = message.get("body") or b""
            if body:
                chunk = bytes(body)
                with self._lock:
                    self._queued_bytes += len(chunk)
                if self._announced:
                    self._queue.put(chunk)
                else:
                    self._early.append(chunk)
            if not message.get("more_body", False):
                self.complete = True
                self._answering = sys.exc_info()[1]
                if self._timer is not None:  # the answer is complete: its deadline is met
                    self._timer.cancel()
                sent = self._sent
                if sent is not None and not sent.done():
                    sent.set_result(None)
            elif body:
                await self._backpressure()

    async def _backpressure(self) -> None:
        drained = self._drained
        while drained is not None and not self._abandoned:
            with self._lock:
                if self._queued_bytes <= HIGH_WATER_BYTES:
                    return
                drained.clear()
                self._waiting = True
            await drained.wait()

    async def _run(self) -> None:
        try:
            await self.adapter.app(self.scope, self._receive, self._send)
        except asyncio.CancelledError as exc:
            if self.complete and not self._abandoned:
                raise  # the tail cut at the invocation's deadline: reported there
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if not self._abandoned:  # cancelled by the app itself: a failure of the app
                self.failure = exc
        except Exception as exc:
            if self.complete and exc is not self._answering:
                self.report(exc)  # raised after the answer (a background task): it stands
                return
            if not self._abandoned:
                self.failure = exc
                if not self.started:
                    import logging

                    logging.getLogger("mangum.http").exception(
                        "An error occurred running the application.")


def stream_app(adapter: Adapter, event: dict[str, Any], context: Any,
               request: HttpRequest | None = None, *, deadline_ms: float | None = None,
               idle_s: float = DEFAULT_IDLE_S) -> StreamedResponse | dict[str, Any]:
    """Run the app for one request and return its answer as it starts.

    Parameters
    ----------
    adapter, event, context, request
        As :class:`AppStream`.
    deadline_ms : float | None
        When the stream must end, monotonic ms (None: :func:`stream_deadline_ms` of ``context``).
    idle_s : float
        The idle bound, s.

    Returns
    -------
    StreamedResponse | dict[str, Any]
        The streamed answer (status, headers, cookies; ``close`` abandons the app); or the
        app's buffered answer when it finished at once.

    Raises
    ------
    AppFailure
        As :meth:`AppStream.wait_started`.
    """
    now = _clock_ms()
    stream = AppStream(adapter, event, context, request,
                       deadline_ms=stream_deadline_ms(context, now) if deadline_ms is None else deadline_ms,
                       idle_s=idle_s)
    stream.start()
    buffered = stream.wait_started()
    if buffered is not None:
        return buffered
    headers, cookies = stream.headers()
    return StreamedResponse(stream.status, headers, stream.chunks(), cookies=cookies,
                            on_close=stream.close)
