"""Admission of a streaming route, against the time to first token, and the record of its stream.

The dispatcher (`functions.runtime.dispatch.Dispatcher`) sends a streaming route
(``Route(stream=True)``) here when the answer can stream to its client (:func:`streams_to`: a
function URL event, and a runtime client that streams, `functions.runtime.streaming.runtime_streams`);
any other caller gets today's buffered path, the stream collected into one answer, with
``x-warmstart-stream: buffered``. Imported only for streaming routes.

**The SLA is the first token**: ``first_token_ms`` (default: the route's ``sla_ms``, else its
tier's), from the request's arrival to the first body chunk. The decision is the buffered
routes' (`functions.runtime.admission.decide` through `functions.runtime.admission.flow.serve`,
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
`functions.runtime.overflow_stream`): :func:`overflow_stream` gives `serve` the stream's
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
    EnvState,
    ModelState,
    Path,
    Reason,
    RequestInfo,
    remaining_budget_ms,
)
from functions.runtime.admission.flow import DegradeUnavailable, LocalUnavailable, Outcome, serve
from functions.runtime.degradation import mark_degraded
from functions.runtime.errors import AppFailure, FailureTag
from functions.runtime.levels import Level
from functions.runtime.local_path import AppFailed, failure_tag
from functions.runtime.overflow import OverflowFailure
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
    from functions.runtime.dispatch import Dispatcher
    from functions.runtime.overflow_stream import StreamOverflow

__all__ = ["Streamed", "admit", "overflow_stream", "record_when_done", "streams_to"]

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


def admit(d: Dispatcher, kind: events.EventKind, event: Any, context: Any,
          record: InvocationRecord, request: events.HttpRequest, route: RouteSpec,
          started_ms: float) -> tuple[dict[str, Any] | Streamed, float]:
    """Serve one request of a streaming route whose answer streams (see the module docstring).

    Parameters
    ----------
    d : Dispatcher
        The execution environment's dispatcher (admission, preload, local path, helpers).
    kind, event, context, record, request, route
        As the dispatcher has them (``record`` is the current invocation).
    started_ms : float
        Monotonic invocation start, ms.

    Returns
    -------
    tuple[dict[str, Any] | Streamed, float]
        A buffered answer (refused input, shed, a buffered degraded answer, an app that
        failed or finished at once) or a `Streamed`; and the first token's deadline on the
        monotonic clock, ms.
    """
    adm = d.admission
    clock_now = d._clock_ms()
    invocation_wall_ms = d._wall_ms() - (clock_now - started_ms)
    from functions.runtime.dispatch import arrival_ms_of

    arrival_ms = arrival_ms_of(request, invocation_wall_ms)
    queue_ms = invocation_wall_ms - arrival_ms
    if queue_ms > 0:
        record.timings_ms["queue"] = queue_ms
    sla_ms, tracker, hooks = adm.route_state(route, d.config.sla_ms)
    first_token_ms = route.first_token_ms or sla_ms
    deadline_ms = record.deadline_ms = started_ms + (arrival_ms + first_token_ms - invocation_wall_ms)
    payload, downstream_ms, refused = d._validate(kind, event, request, record, route, hooks)
    if refused is not None:
        return refused, deadline_ms
    level = adm.level()
    end_ms = stream_deadline_ms(context, clock_now)  # the whole stream's bound
    idle_s = d.config.stream_idle_ms / 1000.0
    on_event = hooks.degraded_event
    degrade = hooks.degraded if route.degradable else None
    info = RequestInfo(route.path, route.tier, first_token_ms, arrival_ms,
                       degradable=on_event is not None or degrade is not None,
                       downstream_ms=downstream_ms)
    local = d.local
    cold = False  # the route's stages were not ready when admission looked (a cold start)

    def start_app(*, answer_failure: bool = True) -> dict[str, Any] | AppStream:
        """The stages are ready: start the app; its answer once it started. An app that fails
        before its start gets the buffered failure answers (``answer_failure``), else raises
        `functions.runtime.errors.AppFailure`."""
        from functions.runtime.asgi_stream import AppStream  # the web stage has loaded asyncio

        record.path = "local"
        stream = AppStream(d.preload.result(d._web), event, context, request, deadline_ms=end_ms,
                           idle_s=idle_s, clock_ms=d._clock_ms)
        stream.start()
        try:
            buffered = stream.wait_started()
        except AppFailure as exc:
            if not answer_failure:
                raise
            failed = AppFailed(exc.error, cut=exc.cut, response=exc.response)
            if degrade is not None:
                answer = d._degrade_failure(kind, event, record, route, degrade, payload, level,
                                            failed)
                if answer is not None:
                    return answer
            return d._app_failed(kind, event, record, route, failed)
        return stream if buffered is None else buffered

    def run_local(wait_ms: float) -> dict[str, Any] | Streamed:
        local.wait(record, needs_model=route.needs_model,
                   wait_ms=min(wait_ms, end_ms - d._clock_ms()))  # LocalUnavailable: fall back
        answer = start_app()
        if isinstance(answer, dict):  # a buffered answer (failed, or complete at once)
            return answer
        if cold and on_event is not None and level is not Level.L2 \
                and is_sse(answer.headers()[0].get("content-type")):
            guard(answer)
        return _local_stream(answer)

    def guard(stream: AppStream) -> None:
        """The first-token guard of a cold start served locally: the app's own time to its
        first token is an estimate on a new environment (none measured yet), so when the app
        has sent nothing by the first token's deadline, less the degraded hook's p95, the
        degraded first event goes out and the app's stream follows it in the same response."""
        def first_event() -> bytes | None:
            try:
                data = mark_degraded(on_event(payload or {}), level=level)  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - the app's stream goes on without it
                d._log_hook_failure(route, "degraded_event", exc)
                return None
            record.path = "degraded"
            return sse_event(data, event="degraded")

        stream.first_token_guard_ms = deadline_ms - adm.degraded.p95_ms
        stream.first_token_event = first_event

    def run_degraded() -> dict[str, Any] | Streamed:
        if on_event is None:
            assert degrade is not None
            return d._degraded_answer(kind, event, route, degrade, payload, level)
        t0 = d._clock_ms()
        try:
            data = mark_degraded(on_event(payload or {}), level=level)
            first = sse_event(data, event="degraded")
        except Exception as exc:
            d._log_hook_failure(route, "degraded_event", exc)
            raise DegradeUnavailable(
                f"the degraded_event hook of route {route.feature!r} failed") from exc
        adm.degraded.observe(d._clock_ms() - t0)
        tally = StreamTally(d._clock_ms, sse=True)
        if level is Level.L2:  # the precision cut: the degraded event is the whole answer
            chunks: Iterator[bytes] = iter((tally.out(first),))
            return Streamed(StreamedResponse(200, DEGRADED_PRELUDE_HEADERS, chunks), tally)
        streamed = Streamed(StreamedResponse(200, DEGRADED_PRELUDE_HEADERS, iter(())), tally)
        chunks = _degraded_then_full(streamed, record, first, wait_local, start_app)
        streamed.response = StreamedResponse(200, DEGRADED_PRELUDE_HEADERS, chunks,
                                             on_close=lambda: _close_app(streamed))
        return streamed

    def wait_local() -> None:
        """Wait for the local path until the stream's deadline (less the app's first-token
        estimate); raise `LocalUnavailable` when it cannot be ready by then."""
        state = adm.env_state(d.preload, d._needed(route), d._web, tracker)
        left_ms = end_ms - d._clock_ms() - state.infer_p95_ms
        if state.local_ms > end_ms - d._clock_ms():
            raise LocalUnavailable(f"the local path is estimated ready in {state.local_ms:.0f} "
                                   f"ms, after the stream's deadline ({left_ms:.0f} ms left)")
        local.wait(record, needs_model=route.needs_model, wait_ms=max(0.0, left_ms))

    overflow = overflow_stream(adm, route, payload, stream_deadline_ms=end_ms,
                               part_timeout_s=idle_s)

    def on_overflow(result: Any) -> Streamed:
        assert overflow is not None and overflow.response is not None
        return _overflowed(overflow.response, d._clock_ms)

    def env() -> EnvState:
        """The environment as `decide` sees it. Warm (every stage the route needs ready), the
        app's own time to its first token counts as 0: the degraded first event and the
        stream's overflow answer a cold start's wait, never an app (its LLM) that is slow to
        its first token on a warm environment, which no path of the toolkit makes faster."""
        nonlocal cold
        state = adm.env_state(d.preload, d._needed(route), d._web, tracker)
        if state.model_state is ModelState.READY:
            return replace(state, infer_p95_ms=0.0)
        cold = True
        return state

    outcome: Outcome = serve(
        info,
        env=env,
        level=level,
        clock_ms=d._wall_ms,
        run_local=run_local,
        run_degraded=run_degraded if info.degradable else None,
        overflow=overflow,  # type: ignore[arg-type]  # serve's overflow protocol
        overflow_payload=payload,
        on_overflow=on_overflow,
        request_id=record.request_id or "",
        feature=route.feature,
        policy=adm.policy,
    )
    if (outcome.path is Path.SHED and outcome.decision.reason is Reason.NO_PATH_FITS
            and on_event is not None
            and not any(f.path is Path.DEGRADE for f in outcome.failures)
            and remaining_budget_ms(info, d._wall_ms()) >= adm.degraded.p95_ms):
        # The degraded first event is a streaming route's last resort: admission keeps its
        # headroom (`functions.runtime.admission.HANDLER_HEADROOM_MS`) out of every path's
        # budget for a fallback that finishes late, and nothing comes after this one. A 503
        # sent now would reach the client no sooner than the event, which the full stream
        # then follows (seen in bench streaming at SLA 500 ms: the overflow that could not
        # start left 44 ms of budget, under the 50 ms degraded seed, and every sample was shed)
        try:
            outcome = replace(outcome, path=Path.DEGRADE, response=run_degraded())
        except DegradeUnavailable:  # run_degraded logged the hook's failure: the 503 stays
            pass
    answer = d._outcome_answer(kind, event, record, route, outcome, deadline_ms,
                               finish_preload=type(outcome.response) is dict)
    if isinstance(answer, Streamed):
        answer.route = route
        answer.arrival_ms = deadline_ms - first_token_ms
        if record.path == "overflow":
            # why the local path was passed over (``timeout_resource``) is no failure of the
            # stream the endpoint then delivered: a stream's failure tag is its own (the
            # log's "stream failed", ``StreamFailures``), set when it ends (`_record`)
            record.failure = None
    return answer, deadline_ms


def _close_app(streamed: Streamed) -> None:
    app = streamed.app
    if app is not None:
        app.close()


def _degraded_then_full(streamed: Streamed, record: InvocationRecord, first: bytes,
                        wait_local: Callable[[], None],
                        start_app: Callable[..., dict[str, Any] | AppStream]) -> Iterator[bytes]:
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
        wait_local()
    except LocalUnavailable as exc:
        tag = exc.tag if exc.tag is not FailureTag.TIMEOUT_RESOURCE else FailureTag.COLD_START_TIMEOUT
        yield from fail(tag, f"the full answer could not start before the stream's deadline: {exc}")
    try:
        answer = start_app(answer_failure=False)
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


def record_when_done(d: Dispatcher, streamed: Streamed, record: InvocationRecord,
                     started_ms: float, cold_start: bool, deadline_ms: float,
                     previous: InvocationRecord | None) -> StreamedResponse:
    """Put ``X-Warmstart-Path`` and ``Server-Timing`` (what was timed before the start) in the
    stream's prelude and record the invocation when the stream ends (its ``on_finish``, once);
    returns the response for the runtime client."""
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
        if d._pending:
            d.flush_pending()
        telemetry.stream_done(record, **done)
    else:  # Powertools is still loading on the preload thread
        with d._pending_lock:
            d._pending.append((record, done))
        # Powertools loaded meanwhile (the stage may have flushed before the append above):
        # flush this one too. ``loaded`` is set before the stage's own flush, so a record
        # appended after that flush is seen here, and one appended before it there
        if telemetry.loaded or d.preload.done(stage):
            d.flush_pending()
