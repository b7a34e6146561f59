"""The edge of a warmstart handler's request pipeline: one request walked through its stages.

`functions.runtime.agent` builds one :class:`Dispatcher` per execution environment (in the
preload); the handler calls :meth:`Dispatcher.handle`, which walks each stage once: a warm
ping is answered without app code (`functions.runtime.pings.answer`); any other event is
parsed and routed into one `functions.runtime.request_context.RequestContext`; a declared
route's payload hooks run (bad input is a 4xx before any path, `functions.runtime.answers`);
then the warm path (everything loaded and rows 1-5 of the decision table say local,
`functions.runtime.admission.ready_local_fits`) runs the app
(`functions.runtime.local_path.LocalPath`), else the path objects' loop
(`functions.runtime.admission.paths`, `functions.runtime.admission.flow.serve_paths`) picks local,
overflow, degraded or shed; a streaming route whose caller streams is
`functions.runtime.admission.stream`'s; an undeclared route goes to the app as is. Every answer
gets ``X-Warmstart-Path`` and ``Server-Timing`` (``init``, ``queue``, ``model``, ``infer`` /
``tool`` set by the app, ``overflow``, ``preload``); the invocation is logged and counted.

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from functions.runtime import events, pings
from functions.runtime.admission import ready_local_fits
from functions.runtime.admission.paths import BufferedPaths
from functions.runtime.admission.state import Admission
from functions.runtime.answers import (
    CUT_MARGIN_MS,
    STREAM_HEADER,
    Answers,
    internal_error_response,
    toolkit_failed,
)
from functions.runtime.clock import monotonic_ms as _clock_ms
from functions.runtime.config import RuntimeConfig
from functions.runtime.contract.levels import Level
from functions.runtime.errors import BadRequest
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.local_path import AppFailed, LocalPath
from functions.runtime.pending import PendingRecords
from functions.runtime.preload import Preloader
from functions.runtime.request_context import RequestContext, arrival_ms_of, start_admission
from functions.runtime.routes import RouteRegistry
from functions.runtime.telemetry import (
    InvocationRecord,
    Telemetry,
    reset_current,
    server_timing,
    set_current,
)

if TYPE_CHECKING:  # registered by the handler only where it has work
    from functions.runtime.post_response import PostResponse
    from functions.runtime.streaming import StreamedResponse

__all__ = ["STREAM_HEADER", "Dispatcher", "arrival_ms_of", "internal_error_response"]

#: `Level.rank` of each level, read on the warm path as one dict lookup
_RANKS: dict[Level, int] = {level: level.rank for level in Level}




def _streams_to(kind: events.EventKind) -> bool:
    from functions.runtime.admission import stream  # imported for streaming routes only

    return stream.streams_to(kind)


class Dispatcher:
    """Serves the invocations of one execution environment.

    Parameters
    ----------
    config, environment, preload, routes, telemetry, admission
        The environment's configuration, lifecycle, preload (stage ``web_stage`` returns the
        Mangum adapter), declared routes, telemetry and admission state.
    clock_ms, wall_ms, sleep_s : Callable
        Monotonic ms; epoch ms; sleep in s (ping holds).
    web_stage, model_stage, telemetry_stage : str | None
        Stage names (``model_stage`` None: no model; until ``telemetry_stage`` is done,
        finished requests are logged and counted once it is).
    post_response : PostResponse | None
        The toolkit's internal extension, when registered (``WARMSTART_FINISH_PRELOAD=after``).
    """

    def __init__(self, *, config: RuntimeConfig, environment: ExecutionEnvironment,
                 preload: Preloader, routes: RouteRegistry, telemetry: Telemetry,
                 admission: Admission, clock_ms: Callable[[], float] = _clock_ms,
                 wall_ms: Callable[[], float] = lambda: time.time() * 1000.0,
                 sleep_s: Callable[[float], object] = time.sleep, web_stage: str = "web",
                 model_stage: str | None = "model", telemetry_stage: str | None = None,
                 post_response: PostResponse | None = None) -> None:
        self.config, self.post_response, self.environment = config, post_response, environment
        self.preload, self.routes, self.telemetry, self.admission = preload, routes, telemetry, admission
        self._clock_ms, self._wall_ms, self._sleep_s = clock_ms, wall_ms, sleep_s
        self._web, self._model, self._telemetry_stage = web_stage, model_stage, telemetry_stage
        self.local = LocalPath(preload, clock_ms, web_stage=web_stage, model_stage=model_stage)
        self.answers = Answers(admission, routes, clock_ms, wall_ms)
        self.paths = BufferedPaths(self)
        self._init_type = environment.init_type.value
        self._loaded = False  # every stage a route can need is ready (checked once per env)
        self.pending = PendingRecords(telemetry)

    def handle(self, event: Any, context: Any,
               started_ms: float | None = None) -> dict[str, Any] | StreamedResponse:
        """Serve one invocation: ``event`` (a warm ping, an HTTP API v2, function URL, REST v1
        or ALB event), ``context`` (the Lambda context or None), ``started_ms`` (monotonic ms,
        default now). Returns a pong, a response in the event source's format, or for a
        streaming route whose caller streams a `functions.runtime.streaming.StreamedResponse`
        (recorded when it ends). Never raises: a failure of the toolkit itself is a generic
        500 tagged ``model_error`` (`functions.runtime.answers.toolkit_failed`)."""
        clock_now = self._clock_ms()  # admission's start (read before any other module runs)
        wall_now = self._wall_ms()
        started_ms = clock_now if started_ms is None else started_ms
        # One stage after the other, each module entered once on the way in (the warm path
        # calls no helper of this module, and runs in this frame: bench request_walk counts
        # the entries)
        try:
            kind = events.classify(event)
            if kind is events.EventKind.PING:
                return pings.answer(self, event, context, started_ms)
            try:
                request: events.HttpRequest | None = events.parse_http_event(
                    event, kind=kind, base_path=self.config.base_path,
                    strip_prefixes=self.config.strip_prefixes)
            except BadRequest as exc:
                request, refused = None, exc
            route_name = request.route if request is not None else "?"  # still in events
            route = self.routes.match(request.method, request.path) if request is not None else None
            env, answers = self.environment, self.answers
            cold_start = env.begin_invocation()
            record = InvocationRecord(getattr(context, "aws_request_id", None))
            record.route = route_name
            # the current invocation for the hooks and the app (runtime.payload(), path_params(),
            # remaining_ms(), timing()): one request at a time per execution environment
            previous = set_current(record)
            ctx = RequestContext(event, context, kind, started_ms, record, cold_start, request, route,
                                 admitted_ms=clock_now)
            streamed = False  # a stream's app still runs: its record stays current
            try:
                now_ms: float | None = None  # when the answer was ready, monotonic ms
                if request is None:
                    response = answers.refuse(ctx, refused, "local")
                elif route is None:  # not declared: the app answers (its own 404 / 405)
                    response = self.paths.unrouted(ctx)
                elif route.stream and _streams_to(kind):
                    from functions.runtime.admission import stream  # imported for streams only

                    response = stream.serve_stream(self, ctx, wall_now, previous)
                    if not isinstance(response, dict):
                        streamed = True
                        return response
                else:  # a buffered route, or a streaming route whose caller does not stream
                    if route.stream:  # the stream collected into one answer
                        ctx.stream_buffered, record.stream = True, "buffered"
                    start_admission(ctx, self.admission, self.config.sla_ms, wall_now)
                    hooks = ctx.hooks
                    refusal = answers.validate(ctx) if hooks.validate is not None or "{" in route.path else None
                    adm = self.admission
                    level = ctx.level = adm.level()
                    rank = _RANKS.get(level)  # Level.rank without its property and enum lookups
                    if rank is None:
                        rank = level.rank
                    # warm path: everything loaded and rows 1-5 of the decision table say LOCAL
                    if not self._loaded and self.local.ready(True):
                        self._loaded = True  # stages never unload
                    tracker = ctx.tracker
                    assert tracker is not None and ctx.deadline_ms is not None
                    if refusal is not None:
                        response = refusal
                    elif (self._loaded or self.local.ready(route.needs_model)) and ready_local_fits(
                            route.tier, route.degradable, rank,
                            ctx.sla_ms - (wall_now - ctx.arrival_ms if wall_now > ctx.arrival_ms else 0.0),
                            tracker.p95_ms, adm.policy, ctx.downstream_ms):
                        cut = None  # the baseline ignores the SLA budget: it never cuts the app at it
                        if route.degradable and hooks.degraded is not None and not adm.policy.baseline:
                            cut = max(0.0, ctx.deadline_ms - clock_now - adm.degraded.p95_ms
                                      - CUT_MARGIN_MS) / 1000.0
                        try:
                            response = self.local.run_now(event, context, record, request, cut)
                        except AppFailed as exc:
                            response = answers.failed_over(ctx, exc)
                        else:
                            # the tracker measures the answer without the downstream work
                            # (admission adds it)
                            now_ms = self._clock_ms()
                            tracker.observe(max(0.0, now_ms - clock_now
                                                - record.timings_ms.get("tool", 0.0)))
                    else:
                        response = self.paths.admit(ctx)
                if now_ms is None:
                    now_ms = self._clock_ms()
                status = answers.finish(ctx, response)
                duration_ms = now_ms - started_ms
                env.record(record.route, record.path, status, duration_ms)
                environment_id, init_ms = env.environment_id, env.init_duration_ms
                if cold_start and init_ms is not None:
                    record.timings_ms["init"] = record.timings_ms.get("init", 0.0) + init_ms
                overflow_ms = record.timings_ms.get("overflow") if record.path == "overflow" else None
                sla_breach = ctx.deadline_ms is not None and now_ms > ctx.deadline_ms
                timing = server_timing(record.timings_ms)
                telemetry = self.telemetry
                if telemetry.loaded and not self.pending.records:  # the warm path: keywords, no dict
                    telemetry.request_done(
                        record, status=status, duration_ms=duration_ms, cold_start=cold_start,
                        init_type=self._init_type, environment_id=environment_id,
                        init_duration_ms=init_ms, now_ms=now_ms, overflow_ms=overflow_ms,
                        sla_breach=sla_breach)
                else:
                    self._record_later(record, {
                        "status": status, "duration_ms": duration_ms, "cold_start": cold_start,
                        "init_type": self._init_type, "environment_id": environment_id,
                        "init_duration_ms": init_ms, "now_ms": now_ms, "overflow_ms": overflow_ms,
                        "sla_breach": sla_breach})
            finally:
                if not streamed:
                    reset_current(previous)
            headers = response.get("headers")
            # Mangum's and respond's header maps (lower-case names) are set in place
            direct = type(headers) is dict and kind is not events.EventKind.ALB
            target = headers if direct else {}
            target["x-warmstart-path"] = record.path
            if timing:
                target["server-timing"] = timing
            if ctx.stream_buffered:
                target[STREAM_HEADER] = "buffered"
            if not direct:
                events.add_headers(kind, response, target)
            return response
        except Exception as exc:  # noqa: BLE001 - the edge is total: our fault, a generic 500
            return toolkit_failed(self, event, context, exc, started_ms)

    def _record_later(self, record: InvocationRecord, done: dict[str, Any]) -> None:
        """Log and count ``record`` now when Powertools is loaded, else once it is."""
        if self.telemetry.loaded or self._telemetry_stage is None or self.preload.done(self._telemetry_stage):
            if self.pending.records:
                self.pending.flush()
            self.telemetry.request_done(record, **done)
        else:  # a cold request: Powertools is still loading on the preload thread
            self.pending.add(record, done)

    def flush_pending(self) -> int:
        """Log and count the requests finished before Powertools was loaded (the telemetry
        stage calls it); returns how many (`functions.runtime.pending.PendingRecords`)."""
        return self.pending.flush()
