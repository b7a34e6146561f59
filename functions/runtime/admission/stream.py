"""Admission of a streaming route, against the time to first token, and the record of its stream.

The dispatcher (`functions.runtime.dispatch.Dispatcher`) sends a streaming route
(``Route(stream=True)``) here when the answer can stream to its client (:func:`streams_to`: a
function URL event, and a runtime client that streams, `functions.runtime.streaming.runtime_streams`);
any other caller gets today's buffered path, the stream collected into one answer, with
``x-warmstart-stream: buffered``. Imported only for streaming routes.

**The SLA is the first token**: ``first_token_ms`` (default: the route's ``sla_ms``, else its
tier's), from the request's arrival to the first body chunk. The decision is the buffered
routes' (`functions.runtime.admission.decide` through `functions.runtime.admission.flow.serve_paths`,
the same stage estimates: p95 seeds, calibration, the fleet's numbers), with the first-token
SLA as the budget and the route's first-token latency (measured from the app's start to its
first chunk) as the local estimate:

(a) **local** when the app's first token is expected within the budget: wait for the stages
    (the web stack, the model for ``needs_model``), then stream the app's answer
    (`functions.runtime.asgi_stream`); an app that fails before its start gets the buffered
    failure answers (the route's ``degraded`` answer, else the JSON error contract);
(b) else, with a ``degraded_event`` hook: the prelude at once (200, ``text/event-stream``) and
    ``sse_event({...hook's data..., "degraded": true, "level": ...}, event="degraded")``, then
    the wait for the local path and the app's full stream in the same response. The app's own
    status and headers are then dropped (the prelude has gone): an app that answers non-2xx
    ends the stream with an error event (``app_error`` for 5xx, ``bad_request`` for 4xx); a
    local path that cannot be ready before the stream's deadline (estimated, or by waiting)
    ends it with an error event ``cold_start_timeout`` (``model_error`` / ``tool_unavailable``
    when a stage failed to load). At L2 (the precision cut) the degraded event is the whole
    answer (the capacity the full stream would take is what L2 frees);
(c) without a hook: the buffered degradation the route has today: its ``degraded`` answer, or
    ``503`` with ``Retry-After``. Levels act as on buffered routes (L1 sheds P2, L3 sheds P1).

**Overflow of streams** (SageMaker ``InvokeEndpointWithResponseStream``,
`functions.runtime.overflow_stream`): :func:`overflow_stream` gives `serve_paths` the stream's
overflow when the route declares ``overflow_event``, its payload was validated and an endpoint
is configured; the order is local when its first token fits, else the overflow stream when its
first event is expected in time, else the degraded first event (an overflow stream that cannot
start in time falls back to it).

**The record** (:func:`record_when_done`): the stream's invocation is logged and counted when
the stream ends (the runtime client's `functions.runtime.streaming.StreamedResponse.on_finish`),
not when the handler returns: ``TimeToFirstTokenMs``, ``TokensPerSecond``, body bytes, chunks
and the failure tag (``stream_error``, ``stream_timeout``, ``client_disconnected``,
``cold_start_timeout``), through `functions.runtime.telemetry.Telemetry.stream_done`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from functions.runtime import events
from functions.runtime.admission import (
    Decision,
    EnvState,
    ModelState,
    Path,
    Reason,
    RequestInfo,
    remaining_budget_ms,
)
from functions.runtime.admission.flow import (
    DegradeUnavailable,
    LocalUnavailable,
    Outcome,
    ShedPath,
    serve_paths,
)
from functions.runtime.answers import log_hook_failure
from functions.runtime.contract.levels import Level
from functions.runtime.degradation import mark_degraded
from functions.runtime.errors import AppFailure, FailureTag
from functions.runtime.local_path import AppFailed, failure_tag
from functions.runtime.overflow import OverflowFailure
from functions.runtime.request_context import RequestContext, start_admission
from functions.runtime.routes import RouteSpec
from functions.runtime.stream_parts import (  # not asgi_stream: no asyncio before the decision
    StreamFailed,
    StreamTally,
    error_event,
    is_sse,
    stream_deadline_ms,
)
from functions.runtime.streaming import StreamedResponse, StreamOutcome, runtime_streams, sse_event
from functions.runtime.telemetry import InvocationRecord, reset_current, server_timing

if TYPE_CHECKING:
    from functions.runtime.admission.state import Admission
    from functions.runtime.asgi_stream import AppStream
    from functions.runtime.overflow_stream import StreamOverflow

#: The execution environment's `functions.runtime.dispatch.Dispatcher` (not imported, even
#: for type checking: the dispatcher imports this module, and no import circle is kept).
Dispatcher = Any

__all__ = ["StreamPaths", "Streamed", "admit", "overflow_stream", "record_when_done", "serve_stream",
           "streams_to"]

#: Headers of the prelude a degraded first event goes out with (the app's are not known yet).
DEGRADED_PRELUDE_HEADERS = {"content-type": "text/event-stream; charset=utf-8",
                            "cache-control": "no-cache"}
#: At a stream's end, how long its record waits for the telemetry stage (Powertools) when that
#: stage is still loading, s. The answer has reached the client by then (the runtime client
#: calls ``on_finish`` after the end of the body), and the stage's p95 seed is 100 ms
#: (`functions.runtime.admission.state.DEFAULT_STAGE_P95_MS`): 10x that bounds the wait. Past
#: it the record waits for a later invocation, as a buffered cold request's does (Lambda
#: freezes the environment between invocations, so a stage left running does not finish).
TELEMETRY_WAIT_S = 1.0
#: The runtime client's ``StreamOutcome.error_type`` for a client that went away.
CLIENT_DISCONNECTED_ERROR = "ClientDisconnected"


def streams_to(kind: events.EventKind) -> bool:
    """True when a streaming route's answer streams to this caller: a function URL event, in
    an execution environment whose runtime client streams."""
    return kind is events.EventKind.FUNCTION_URL and runtime_streams()


def overflow_stream(admission: Admission, route: RouteSpec, payload: dict[str, Any] | None, *,
                    stream_deadline_ms: float | None = None, part_timeout_s: float = 10.0,
                    ) -> StreamOverflow | None:
    """The overflow of a stream to the GPU endpoint's stream (SageMaker
    ``InvokeEndpointWithResponseStream``, `functions.runtime.overflow_stream.stream_overflow`):
    None when the route cannot overflow (no endpoint, no ``overflow_event``, no payload)."""
    if admission.overflow is None:
        return None
    from functions.runtime.admission.state import NO_HOOKS
    from functions.runtime.overflow_stream import stream_overflow

    return stream_overflow(admission.overflow, admission.hooks.get(route.feature, NO_HOOKS),
                           payload, feature=route.feature, stream_deadline_ms=stream_deadline_ms,
                           part_timeout_s=part_timeout_s)


def _overflowed(response: StreamedResponse, clock_ms: Callable[[], float]) -> Streamed:
    """The overflow's stream, counted; a mid-stream failure's tag is the stream's."""
    tally = StreamTally(clock_ms, sse=True)

    def chunks() -> Iterator[bytes]:
        try:
            for chunk in response:
                yield tally.out(chunk)
        except OverflowFailure as exc:  # its error event was counted above
            tally.tag = exc.tag
            raise

    return Streamed(StreamedResponse(response.status_code, response.headers, chunks(),
                                     on_close=response.close), tally)


class Streamed:
    """A streamed answer on its way out: the response and what it handed out.

    Attributes
    ----------
    response : StreamedResponse
    tally : StreamTally
        Chunks, bytes, events, first and last chunk times (the iterator's count).
    app : AppStream | None
        The app's run (None while a degraded first event waits for it, or for none).
    route : RouteSpec | None
        The route (set by `admit`).
    arrival_ms : float
        The request's arrival on the monotonic clock, ms (set by `admit`; the time to first
        token counts from it).
    """

    __slots__ = ("app", "arrival_ms", "response", "route", "tally")

    def __init__(self, response: StreamedResponse, tally: StreamTally,
                 app: AppStream | None = None) -> None:
        self.response = response
        self.tally = tally
        self.app = app
        self.route: RouteSpec | None = None
        self.arrival_ms = 0.0


def _local_stream(stream: AppStream) -> Streamed:
    headers, cookies = stream.headers()
    response = StreamedResponse(stream.status, headers, stream.chunks(), cookies=cookies,
                                on_close=stream.close)
    return Streamed(response, stream.tally, stream)


class StreamPaths:
    """One streaming request's paths (`functions.runtime.admission.flow.Paths`): the local
    stream, the degraded first event, the endpoint's stream, the buffered shed answer.

    Parameters
    ----------
    d : Dispatcher
        The execution environment's dispatcher (admission, preload, local path, answers).
    ctx : RequestContext
        The request (``level``, ``payload``, ``deadline_ms`` set: the first token's deadline).
    end_ms : float
        The whole stream's bound on the monotonic clock, ms.
    """

    def __init__(self, d: Dispatcher, ctx: RequestContext, end_ms: float) -> None:
        self.d, self.ctx, self.end_ms = d, ctx, end_ms
        self.idle_s = d.config.stream_idle_ms / 1000.0
        self.on_event = ctx.hooks.degraded_event
        assert ctx.route is not None
        self.degrade = ctx.hooks.degraded if ctx.route.degradable else None
        self.cold = False  # the route's stages were not ready when admission looked
        self.policy = d.admission.policy
        self.local = _StreamLocal(self)
        self.degraded = _StreamDegraded(self)
        self.overflow = _StreamOverflowPath(self)
        self.shed = ShedPath(self)

    def wall_ms(self) -> float:
        return self.d._wall_ms()

    def env_state(self, ctx: RequestContext) -> EnvState:
        """The environment as `decide` sees it. Warm (every stage the route needs ready), the
        app's own time to its first token counts as 0: the degraded first event and the
        stream's overflow answer a cold start's wait, never an app (its LLM) that is slow to
        its first token on a warm environment, which no path of the toolkit makes faster."""
        d = self.d
        assert ctx.route is not None and ctx.tracker is not None
        state = d.admission.env_state(d.preload, d.local.needed(ctx.route), d._web, ctx.tracker)
        if state.model_state is ModelState.READY:
            return replace(state, infer_p95_ms=0.0)
        self.cold = True
        return state

    def start_app(self, *, answer_failure: bool = True) -> dict[str, Any] | AppStream:
        """The stages are ready: start the app; its answer once it started. An app that fails
        before its start gets the buffered failure answers (``answer_failure``), else raises
        `functions.runtime.errors.AppFailure`."""
        from functions.runtime.asgi_stream import AppStream  # the web stage has loaded asyncio

        d, ctx = self.d, self.ctx
        ctx.record.path = "local"
        record, end_ms = ctx.record, self.end_ms

        def past_first_token() -> None:  # AgentRuntime.remaining_ms: the stream's end from now
            record.deadline_ms = end_ms

        stream = AppStream(d.preload.result(d._web), ctx.event, ctx.context, ctx.request,
                           deadline_ms=end_ms, idle_s=self.idle_s, clock_ms=d._clock_ms,
                           on_first_chunk=past_first_token)
        stream.start()
        try:
            buffered = stream.wait_started()
        except AppFailure as exc:
            if not answer_failure:
                raise
            failed = AppFailed(exc.error, cut=exc.cut, response=exc.response)
            if self.degrade is not None:
                return d.answers.failed_over(ctx, failed)
            return d.answers.app_failed(ctx, failed)
        return stream if buffered is None else buffered

    def wait_local(self) -> None:
        """Wait for the local path until the stream's deadline (less the app's first-token
        estimate); raise `LocalUnavailable` when it cannot be ready by then."""
        d, ctx = self.d, self.ctx
        assert ctx.route is not None and ctx.tracker is not None
        state = d.admission.env_state(d.preload, d.local.needed(ctx.route), d._web, ctx.tracker)
        left_ms = self.end_ms - d._clock_ms() - state.infer_p95_ms
        if state.local_ms > self.end_ms - d._clock_ms():
            raise LocalUnavailable(f"the local path is estimated ready in {state.local_ms:.0f} "
                                   f"ms, after the stream's deadline ({left_ms:.0f} ms left)")
        d.local.wait(ctx.record, needs_model=ctx.route.needs_model, wait_ms=max(0.0, left_ms))

    def guard(self, stream: AppStream) -> None:
        """The first-token guard of a cold start served locally: the app's own time to its
        first token is an estimate on a new environment (none measured yet), so when the app
        has sent nothing by the first token's deadline, less the degraded hook's p95, the
        degraded first event goes out and the app's stream follows it in the same response."""
        ctx, on_event = self.ctx, self.on_event
        assert on_event is not None and ctx.deadline_ms is not None and ctx.route is not None
        route = ctx.route

        def first_event() -> bytes | None:
            try:
                data = mark_degraded(on_event(ctx.payload or {}), level=ctx.level)
            except Exception as exc:  # noqa: BLE001 - the app's stream goes on without it
                log_hook_failure(route, "degraded_event", exc)
                return None
            ctx.record.path = "degraded"
            return sse_event(data, event="degraded")

        stream.first_token_guard_ms = ctx.deadline_ms - self.d.admission.degraded.p95_ms
        stream.first_token_event = first_event


class _StreamLocal:
    """The app's stream (wait for the stages, bounded by the stream's deadline)."""

    def __init__(self, paths: StreamPaths) -> None:
        self.paths = paths

    def answer(self, ctx: RequestContext, decision: Decision) -> dict[str, Any] | Streamed:
        paths, d = self.paths, self.paths.d
        assert ctx.route is not None
        d.local.wait(ctx.record, needs_model=ctx.route.needs_model,  # LocalUnavailable: fall back
                     wait_ms=min(float(decision.limit_ms), paths.end_ms - d._clock_ms()))
        answer = paths.start_app()
        if isinstance(answer, dict):  # a buffered answer (failed, or complete at once)
            return answer
        if paths.cold and paths.on_event is not None and ctx.level is not Level.L2 \
                and is_sse(answer.headers()[0].get("content-type")):
            paths.guard(answer)
        return _local_stream(answer)


class _StreamDegraded:
    """The degraded first event (then the full stream, but at L2), else the route's buffered
    degraded answer."""

    def __init__(self, paths: StreamPaths) -> None:
        self.paths = paths

    def answer(self, ctx: RequestContext, decision: Decision | None) -> dict[str, Any] | Streamed:
        paths, d = self.paths, self.paths.d
        on_event = paths.on_event
        if on_event is None:
            return d.answers.degraded(ctx)
        assert ctx.route is not None
        t0 = d._clock_ms()
        try:
            data = mark_degraded(on_event(ctx.payload or {}), level=ctx.level)
            first = sse_event(data, event="degraded")
        except Exception as exc:
            log_hook_failure(ctx.route, "degraded_event", exc)
            raise DegradeUnavailable(
                f"the degraded_event hook of route {ctx.route.feature!r} failed") from exc
        d.admission.degraded.observe(d._clock_ms() - t0)
        tally = StreamTally(d._clock_ms, sse=True)
        if ctx.level is Level.L2:  # the precision cut: the degraded event is the whole answer
            chunks: Iterator[bytes] = iter((tally.out(first),))
            return Streamed(StreamedResponse(200, DEGRADED_PRELUDE_HEADERS, chunks), tally)
        streamed = Streamed(StreamedResponse(200, DEGRADED_PRELUDE_HEADERS, iter(())), tally)
        chunks = _degraded_then_full(streamed, ctx.record, first, paths)
        streamed.response = StreamedResponse(200, DEGRADED_PRELUDE_HEADERS, chunks,
                                             on_close=lambda: _close_app(streamed))
        return streamed


class _StreamOverflowPath:
    """The GPU endpoint's stream (`functions.runtime.overflow_stream.StreamOverflow`)."""

    def __init__(self, paths: StreamPaths) -> None:
        self.paths = paths

    def answer(self, ctx: RequestContext, decision: Decision) -> Streamed:
        overflow = ctx.overflow
        ctx.overflow_result = overflow.invoke(ctx.overflow_payload or {},
                                              budget_ms=float(decision.limit_ms))
        assert overflow.response is not None
        return _overflowed(overflow.response, self.paths.d._clock_ms)


def serve_stream(d: Dispatcher, ctx: RequestContext, wall_now: float,
                 previous: InvocationRecord | None) -> dict[str, Any] | StreamedResponse:
    """A streaming route whose caller streams: `admit`, then a `Streamed` answer is recorded
    when it ends (`record_when_done`; ``previous`` is then the current invocation again); a
    buffered answer (refused, shed, degraded, complete at once) is returned as it is."""
    answer = admit(d, ctx, wall_now)
    if isinstance(answer, Streamed):
        return record_when_done(d, answer, ctx, previous)
    ctx.record.stream = "buffered"
    return answer


def admit(d: Dispatcher, ctx: RequestContext, wall_now: float) -> dict[str, Any] | Streamed:
    """Serve one request of a streaming route whose answer streams (see the module docstring).

    Parameters
    ----------
    d : Dispatcher
        The execution environment's dispatcher (admission, preload, local path, answers).
    ctx : RequestContext
        The request, parsed and routed (``ctx.record`` is the current invocation); its
        ``deadline_ms`` is set here to the first token's deadline on the monotonic clock.
    wall_now : float
        Epoch ms read with ``ctx.admitted_ms`` (when admission started).

    Returns
    -------
    dict[str, Any] | Streamed
        A buffered answer (refused input, shed, a buffered degraded answer, an app that
        failed or finished at once) or a `Streamed`.
    """
    route = ctx.route
    assert route is not None
    start_admission(ctx, d.admission, d.config.sla_ms, wall_now, first_token=True)
    refused = d.answers.validate(ctx)
    if refused is not None:
        return refused
    ctx.level = d.admission.level()
    end_ms = stream_deadline_ms(ctx.context, ctx.admitted_ms)  # the whole stream's bound
    paths = StreamPaths(d, ctx, end_ms)
    info = ctx.info = RequestInfo(route.path, route.tier, ctx.sla_ms, ctx.arrival_ms,
                                  degradable=paths.on_event is not None or paths.degrade is not None,
                                  downstream_ms=ctx.downstream_ms)
    ctx.overflow = overflow_stream(d.admission, route, ctx.payload, stream_deadline_ms=end_ms,
                                   part_timeout_s=paths.idle_s)
    ctx.overflow_payload = ctx.payload
    outcome: Outcome = serve_paths(ctx, paths)
    if (outcome.path is Path.SHED and outcome.decision.reason is Reason.NO_PATH_FITS
            and paths.on_event is not None
            and not any(f.path is Path.DEGRADE for f in outcome.failures)
            and remaining_budget_ms(info, d._wall_ms()) >= d.admission.degraded.p95_ms):
        # The degraded first event is a streaming route's last resort: admission keeps its
        # headroom (`functions.runtime.admission.HANDLER_HEADROOM_MS`) out of every path's
        # budget for a fallback that finishes late, and nothing comes after this one. A 503
        # sent now would reach the client no sooner than the event, which the full stream
        # then follows (seen in bench streaming at SLA 500 ms: the overflow that could not
        # start left 44 ms of budget, under the 50 ms degraded seed, and every sample was shed)
        try:
            outcome = replace(outcome, path=Path.DEGRADE,
                              response=paths.degraded.answer(ctx, None))
        except DegradeUnavailable:  # the hook's failure was logged: the 503 stays
            pass
    answer = d.paths.outcome_answer(ctx, outcome, finish_preload=type(outcome.response) is dict)
    if isinstance(answer, Streamed):
        assert ctx.deadline_ms is not None
        answer.route = route
        answer.arrival_ms = ctx.deadline_ms - ctx.sla_ms
        if ctx.record.path == "overflow":
            # why the local path was passed over (``timeout_resource``) is no failure of the
            # stream the endpoint then delivered: a stream's failure tag is its own (the
            # log's "stream failed", ``StreamFailures``), set when it ends (`_record`)
            ctx.record.failure = None
    return answer


def _close_app(streamed: Streamed) -> None:
    app = streamed.app
    if app is not None:
        app.close()


def _degraded_then_full(streamed: Streamed, record: InvocationRecord, first: bytes,
                        paths: StreamPaths) -> Iterator[bytes]:
    """The degraded first event, then the app's full stream once the local path is ready
    (the answer stays ``degraded``: its first event was). An app that fails before its start
    ends the stream with an error event tagged by its cause; an answer it completed at once
    is sent as it is when it is SSE, else as one event of its text."""
    tally = streamed.tally

    def fail(tag: FailureTag, message: str) -> Iterator[bytes]:
        tally.tag = tag
        yield tally.out(error_event(tag, message))
        raise StreamFailed(tag, message)

    yield tally.out(first)
    try:
        paths.wait_local()
    except LocalUnavailable as exc:
        tag = exc.tag if exc.tag is not FailureTag.TIMEOUT_RESOURCE else FailureTag.COLD_START_TIMEOUT
        yield from fail(tag, f"the full answer could not start before the stream's deadline: {exc}")
    try:
        answer = paths.start_app(answer_failure=False)
    except AppFailure as exc:
        record.path = "degraded"
        yield from fail(failure_tag(exc.error, cut=exc.cut), (
            f"the full answer failed before it started: {type(exc.error).__name__}: "
            f"{exc.error}")[:500])
    record.path = "degraded"
    if isinstance(answer, dict):  # complete at once: its body
        status = int(answer.get("statusCode", 500))
        if not 200 <= status < 300:
            yield from fail(FailureTag.APP_ERROR if status >= 500 else FailureTag.BAD_REQUEST,
                            f"the full answer failed: HTTP {status}")
        body = answer.get("body") or ""
        if answer.get("isBase64Encoded"):
            import base64

            data = base64.b64decode(body)
        else:
            data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        headers = answer.get("headers") or {}
        if data and not is_sse(headers.get("content-type") if isinstance(headers, dict) else None):
            data = sse_event(data.decode("utf-8", "replace"))
        if data:
            yield tally.out(data)
        return
    streamed.app = answer
    if not 200 <= answer.status < 300:
        answer.close()
        tag = FailureTag.APP_ERROR if answer.status >= 500 else FailureTag.BAD_REQUEST
        yield from fail(tag, f"the full answer failed: HTTP {answer.status}")
    answer.tally.sse = True  # the prelude said text/event-stream: its error event is one too
    try:
        for chunk in answer.chunks():
            yield tally.out(chunk)
    except StreamFailed as exc:  # its error event was yielded (and counted) above
        tally.tag = exc.tag
        raise
    finally:
        if tally.tag is None and answer.tally.tag is not None:
            tally.tag = answer.tally.tag


def record_when_done(d: Dispatcher, streamed: Streamed, ctx: RequestContext,
                     previous: InvocationRecord | None) -> StreamedResponse:
    """Put ``X-Warmstart-Path`` and ``Server-Timing`` (what was timed before the start) in the
    stream's prelude and record the invocation when the stream ends (its ``on_finish``, once;
    then ``previous`` is the current invocation again); returns the response for the runtime
    client."""
    record, started_ms, cold_start = ctx.record, ctx.started_ms, ctx.cold_start
    deadline_ms = ctx.deadline_ms
    assert deadline_ms is not None
    env = d.environment
    response = streamed.response
    if cold_start and env.init_duration_ms is not None:
        record.timings_ms["init"] = record.timings_ms.get("init", 0.0) + env.init_duration_ms
    response.headers["x-warmstart-path"] = record.path
    timing = server_timing(record.timings_ms)
    if timing:
        response.headers["server-timing"] = timing
    finished: list[bool] = []

    def on_finish(outcome: StreamOutcome | None) -> None:
        if finished:
            return
        finished.append(True)
        try:
            _record(d, streamed, record, outcome, started_ms=started_ms, cold_start=cold_start,
                    deadline_ms=deadline_ms)
        except Exception as exc:  # noqa: BLE001 - the stream has ended: never raise to the runtime
            import logging

            logging.getLogger("warmstart").error("the record of a stream failed: %s: %s",
                                                 type(exc).__name__, exc)
        finally:
            reset_current(previous)

    response.on_finish = on_finish
    return response


def _record(d: Dispatcher, streamed: Streamed, record: InvocationRecord,
            outcome: StreamOutcome | None, *, started_ms: float, cold_start: bool,
            deadline_ms: float) -> None:
    """Log and count one ended stream (`functions.runtime.telemetry.Telemetry.stream_done`)."""
    tally = streamed.tally
    first_ms, last_ms = tally.first_ms, tally.last_ms
    body_bytes, chunks = tally.bytes, tally.chunks
    tag = tally.tag
    if outcome is not None:  # the runtime client's numbers: when the chunks were written
        if outcome.first_byte_ms is not None:
            first_ms, last_ms = outcome.first_byte_ms, outcome.last_byte_ms
        elif outcome.chunks == 0:
            first_ms = last_ms = None
        body_bytes, chunks = outcome.body_bytes, outcome.chunks
        if outcome.error_type == CLIENT_DISCONNECTED_ERROR:
            tag = FailureTag.CLIENT_DISCONNECTED
        elif outcome.error_type is not None and tag is None:
            tag = FailureTag.STREAM_ERROR
    if tag is not None:
        record.failure = tag
    tokens = tally.events if tally.sse else chunks
    tokens_per_s = None
    if tokens > 1 and first_ms is not None and last_ms is not None and last_ms > first_ms:
        tokens_per_s = (tokens - 1) / ((last_ms - first_ms) / 1000.0)
    ttft_ms = first_ms - streamed.arrival_ms if first_ms is not None else None
    app, route = streamed.app, streamed.route
    if (app is not None and route is not None and record.path == "local" and tag is None
            and app.app_started_ms is not None and app.tally.first_ms is not None):
        # the route's first-token latency, what admission estimates the local path with
        d.admission.tracker(route.feature).observe(max(0.0, app.tally.first_ms - app.app_started_ms))
    now_ms = d._clock_ms()
    duration_ms = now_ms - started_ms
    env = d.environment
    status = streamed.response.status_code
    env.record(record.route, record.path, status, duration_ms)
    stream = {"ttft_ms": None if ttft_ms is None else round(ttft_ms, 3),
              "tokens_per_s": None if tokens_per_s is None else round(tokens_per_s, 3),
              "tokens": tokens, "body_bytes": body_bytes, "chunks": chunks}
    done: dict[str, Any] = {
        "status": status, "duration_ms": duration_ms, "cold_start": cold_start,
        "init_type": env.init_type.value, "environment_id": env.environment_id,
        "init_duration_ms": env.init_duration_ms, "now_ms": now_ms,
        "sla_breach": first_ms is None or first_ms > deadline_ms, "stream": stream,
    }
    telemetry = d.telemetry
    stage = d._telemetry_stage
    if not telemetry.loaded and stage is not None and not d.preload.done(stage):
        d.preload.wait(stage, TELEMETRY_WAIT_S)  # after the answer: Powertools is nearly there
    if telemetry.loaded or stage is None or d.preload.done(stage):
        if d.pending.records:
            d.pending.flush()
        telemetry.stream_done(record, **done)
    else:  # Powertools is still loading on the preload thread
        d.pending.add(record, done)
        # Powertools loaded meanwhile (the stage may have flushed before the append above):
        # flush this one too. ``loaded`` is set before the stage's own flush, so a record
        # appended after that flush is seen here, and one appended before it there
        if telemetry.loaded or d.preload.done(stage):
            d.flush_pending()
