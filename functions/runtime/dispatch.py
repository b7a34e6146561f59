"""The edge of a warmstart handler's request pipeline: ping, context, path, answer, record.

`functions.runtime.agent` builds one :class:`Dispatcher` per execution environment (in the
toolkit's preload stage); the handler then calls :meth:`Dispatcher.handle`:

1. a warm ping is answered without app code (:mod:`functions.runtime.pings`);
2. any other event gets one `functions.runtime.request_context.RequestContext` (event, source,
   parsed request, route, hooks, payload, deadline, record); a malformed event is a JSON 4xx
   tagged ``bad_request`` in the source's format (`functions.runtime.answers.Answers`);
3. a declared route's payload hooks run first (bad input is a 4xx before any path runs, never
   overflowed); then the warm path when everything is loaded and the decision table's rows 1-5
   say local (`functions.runtime.admission.ready_local_fits`), else the loop over the path
   objects (`functions.runtime.admission.paths.BufferedPaths`,
   `functions.runtime.admission.flow.serve`) picks local / overflow / degraded / shed.
   ``WARMSTART_ADMISSION=off`` is the same walk under the baseline policy. A route the agent
   did not declare goes to the app as is (it answers its own 404). A streaming route whose
   caller streams goes to `functions.runtime.admission.stream` (imported then); any other
   caller gets the buffered path, the stream collected into one answer, with
   ``x-warmstart-stream: buffered``;
4. the local path (`functions.runtime.local_path.LocalPath`) runs the app through Mangum; a
   failure inside the app is answered with the route's ``degraded`` answer when it has one,
   else the JSON error contract, never Starlette's ``500 text/plain``; every answer gets
   ``X-Warmstart-Path`` and ``Server-Timing`` (`functions.runtime.answers.Answers.finish`);
5. the invocation is logged and counted (:class:`functions.runtime.telemetry.Telemetry`).

``Server-Timing`` entries: ``init`` (the init phase on a cold start, plus any wait for the
web stack), ``queue`` (API Gateway arrival to invocation), ``model`` (wait for the model),
``infer`` / ``tool`` (set by the app), ``overflow``, ``preload`` (the finish-preload wait).

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from functions.runtime import events, pings
from functions.runtime.admission import ready_local_fits
from functions.runtime.admission.paths import BufferedPaths
from functions.runtime.admission.state import Admission
from functions.runtime.answers import STREAM_HEADER, Answers, internal_error_response
from functions.runtime.config import RuntimeConfig
from functions.runtime.errors import BadRequest, FailureTag, WarmstartError
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.local_path import AppFailed, LocalPath
from functions.runtime.preload import Preloader
from functions.runtime.request_context import RequestContext, arrival_ms_of
from functions.runtime.routes import RouteRegistry, RouteSpec
from functions.runtime.telemetry import InvocationRecord, Telemetry, reset_current, set_current

if TYPE_CHECKING:  # registered by the handler only where it has work
    from functions.runtime.post_response import PostResponse
    from functions.runtime.streaming import StreamedResponse

__all__ = ["NO_CONTEXT_REMAINING_MS", "REMAINING_MARGIN_MS", "STREAM_HEADER", "Dispatcher",
           "arrival_ms_of", "internal_error_response"]

#: Safety margin kept from the invocation's remaining time when waiting, milliseconds.
REMAINING_MARGIN_MS = 250.0
#: Wait bound when no Lambda context is given (local calls), milliseconds.
NO_CONTEXT_REMAINING_MS = 30_000.0


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


class Dispatcher:
    """Serves the invocations of one execution environment.

    Parameters
    ----------
    config : RuntimeConfig
        Run-time configuration (SLA default, base path, finish-preload switch).
    environment : ExecutionEnvironment
    preload : Preloader
        Stages ``web_stage`` (returns the Mangum adapter) and ``model_stage``.
    routes : RouteRegistry
    telemetry : Telemetry
    admission : Admission
        Hooks, trackers, overflow client, level, policy.
    clock_ms, wall_ms : Callable[[], float]
        Monotonic ms; epoch ms (queue time against the request's arrival).
    sleep_s : Callable[[float], object]
        Sleep, s (ping holds).
    web_stage, model_stage : str, str | None
        Stage names (``model_stage`` None: the agent has no model).
    telemetry_stage : str | None
        The stage that loads Powertools: until it is done, finished requests are logged and
        counted once it is (a cold request does not import Powertools on its own path).
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
        self._pending: list[tuple[InvocationRecord, dict[str, Any]]] = []
        self._pending_lock = threading.Lock()

    def handle(self, event: Any, context: Any,
               started_ms: float | None = None) -> dict[str, Any] | StreamedResponse:
        """Serve one invocation (the module docstring's steps); never raises: a failure of the
        toolkit itself is a generic 500 tagged ``model_error``.

        Parameters
        ----------
        event : Any
            Warm ping, or an HTTP API v2, function URL, REST v1 or ALB event.
        context : Any
            Lambda context (``aws_request_id``, ``get_remaining_time_in_millis``) or None.
        started_ms : float | None
            Monotonic invocation start, ms (default: now).

        Returns
        -------
        dict[str, Any] | StreamedResponse
            A pong, or a response in the event source's format; for a streaming route whose
            caller streams, a `functions.runtime.streaming.StreamedResponse`, recorded when it
            ends (its ``on_finish``).
        """
        started_ms = self._clock_ms() if started_ms is None else started_ms
        try:
            kind = events.classify(event)
            if kind is events.EventKind.PING:
                return pings.answer(self, event, context, started_ms)
            return self._handle(event, context, kind, started_ms)
        except Exception as exc:  # noqa: BLE001 - the edge is total: our fault, a generic 500
            try:
                level: str | None = str(self.admission.level())
            except Exception:  # noqa: BLE001 - the level is informative only
                level = None
            response = internal_error_response(event, context, exc, level=level)
            try:  # logged with its tag and counted, as any failed request is
                self.environment.record("?", "local", 500, self._clock_ms() - started_ms)
                self.telemetry.failure(FailureTag.MODEL_ERROR, "request failed inside the toolkit",
                                       request_id=getattr(context, "aws_request_id", None),
                                       status=500, path="local")
            except Exception:  # noqa: BLE001, S110 - the answer must go out anyway
                pass
            return response

    def _handle(self, event: Any, context: Any, kind: events.EventKind,
                started_ms: float) -> dict[str, Any] | StreamedResponse:
        cold_start = self.environment.begin_invocation()
        record = InvocationRecord(getattr(context, "aws_request_id", None))
        ctx = RequestContext(event, context, kind, started_ms, record, cold_start)
        # the current invocation for the hooks and the app (runtime.payload(), path_params(),
        # remaining_ms(), timing()): one request at a time per execution environment
        previous = set_current(record)
        streamed = False  # a stream's app still runs: its record stays current
        try:
            try:
                request = ctx.request = events.parse_http_event(
                    event, kind=kind, base_path=self.config.base_path,
                    strip_prefixes=self.config.strip_prefixes)
            except BadRequest as exc:
                record.route = "?"
                response = self.answers.refuse(ctx, exc, "local")
            else:
                record.route = request.route
                route = ctx.route = self.routes.match(request.method, request.path)
                if route is None:  # not declared: the app answers (its own 404 / 405)
                    response = self._unrouted(ctx)
                elif route.stream:
                    from functions.runtime.admission import stream

                    if stream.streams_to(kind):
                        answer = stream.admit(self, ctx)
                        if isinstance(answer, stream.Streamed):
                            streamed = True
                            return stream.record_when_done(self, answer, ctx, previous)
                        response = answer  # refused, shed, degraded, or complete at once
                    else:  # a buffered caller: the stream collected into one answer
                        ctx.stream_buffered = True
                        response = self._admit(ctx, route)
                    record.stream = "buffered"
                else:
                    response = self._admit(ctx, route)
        finally:
            if not streamed:
                reset_current(previous)
        env = self.environment
        status = self.answers.finish(ctx, response, env.init_duration_ms if cold_start else None)
        now_ms = self._clock_ms()
        duration_ms = now_ms - started_ms
        env.record(record.route, record.path, status, duration_ms)
        overflow_ms = record.timings_ms.get("overflow") if record.path == "overflow" else None
        sla_breach = ctx.deadline_ms is not None and now_ms > ctx.deadline_ms
        telemetry = self.telemetry
        if telemetry.loaded and not self._pending:  # the warm path: keywords, no dict to unpack
            telemetry.request_done(
                record, status=status, duration_ms=duration_ms, cold_start=cold_start,
                init_type=self._init_type, environment_id=env.environment_id,
                init_duration_ms=env.init_duration_ms, now_ms=now_ms, overflow_ms=overflow_ms,
                sla_breach=sla_breach)
            return response
        done: dict[str, Any] = {
            "status": status, "duration_ms": duration_ms, "cold_start": cold_start,
            "init_type": self._init_type, "environment_id": env.environment_id,
            "init_duration_ms": env.init_duration_ms, "now_ms": now_ms,
            "overflow_ms": overflow_ms, "sla_breach": sla_breach,
        }
        if telemetry.loaded or self._telemetry_stage is None or self.preload.done(self._telemetry_stage):
            if self._pending:
                self.flush_pending()
            telemetry.request_done(record, **done)
        else:  # a cold request: Powertools is still loading on the preload thread
            with self._pending_lock:
                self._pending.append((record, done))
        return response

    def flush_pending(self) -> int:
        """Log and count the requests finished before Powertools was loaded (the telemetry
        stage calls it; later requests too, so a record appended meanwhile is not lost);
        returns how many."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
        for record, done in pending:
            if "stream" in done:  # a streamed answer (`functions.runtime.admission.stream`)
                self.telemetry.stream_done(record, **done)
            else:
                self.telemetry.request_done(record, **done)
        return len(pending)

    def _unrouted(self, ctx: RequestContext) -> dict[str, Any]:
        """A route the agent did not declare: the app answers it (waiting for the web stack
        for the rest of the invocation; no SLA logic for a route without an SLA)."""
        assert ctx.request is not None
        record = ctx.record
        queue_ms = events.queue_ms(ctx.request, self._wall_ms())
        if queue_ms:
            record.timings_ms["queue"] = queue_ms
        try:
            return self.local.run(ctx.event, ctx.context, record, needs_model=False,
                                  wait_ms=self.remaining_ms(ctx.context), request=ctx.request)
        except AppFailed as exc:
            return self.answers.app_failed(ctx, exc)
        except Exception as exc:  # noqa: BLE001 - LocalFailed / LocalUnavailable: the web stack
            error = WarmstartError(
                "the web stack is not available in this execution environment; retry",
                status=503, code="web_unavailable",
                tag=getattr(exc, "tag", FailureTag.TOOL_UNAVAILABLE), retry_after_s=1)
            return self.answers.refuse(ctx, error, "shed")

    def admission_clock(self, ctx: RequestContext, route: RouteSpec, sla_of: str = "sla") -> float:
        """Set the context's SLA, arrival, deadline, tracker, hooks and queue time; returns
        the wall clock now, epoch ms (``sla_of="first_token"``: a stream's first token)."""
        clock_now = ctx.admitted_ms = self._clock_ms()
        wall_now = self._wall_ms()
        invocation_wall_ms = wall_now - (clock_now - ctx.started_ms)
        assert ctx.request is not None
        arrival_ms = ctx.arrival_ms = arrival_ms_of(ctx.request, invocation_wall_ms)
        queue_ms = invocation_wall_ms - arrival_ms
        if queue_ms > 0:
            ctx.record.timings_ms["queue"] = queue_ms
        sla_ms, ctx.tracker, ctx.hooks = self.admission.route_state(route, self.config.sla_ms)
        if sla_of == "first_token":
            sla_ms = route.first_token_ms or sla_ms
        ctx.sla_ms = sla_ms
        ctx.deadline_ms = ctx.record.deadline_ms = (
            ctx.started_ms + (arrival_ms + sla_ms - invocation_wall_ms))
        return wall_now

    def _admit(self, ctx: RequestContext, route: RouteSpec) -> dict[str, Any]:
        """A declared route: its payload, then the warm path, else the path objects' loop."""
        wall_now = self.admission_clock(ctx, route)
        hooks = ctx.hooks
        if hooks.validate is not None or "{" in route.path:  # no call for a route without them
            refused = self.answers.validate(ctx)
            if refused is not None:
                return refused
        adm, local = self.admission, self.local
        level = ctx.level = adm.level()
        # warm path: everything loaded and rows 1-5 of the decision table say LOCAL
        if not self._loaded and local.ready(True):
            self._loaded = True  # stages never unload
        if (self._loaded or local.ready(route.needs_model)) and ready_local_fits(
                route.tier, route.degradable, level.rank,
                ctx.sla_ms - (wall_now - ctx.arrival_ms if wall_now > ctx.arrival_ms else 0.0),
                ctx.tracker.p95_ms, adm.policy, ctx.downstream_ms):
            # the baseline ignores the SLA budget: it never cuts the app at it
            cuts = route.degradable and hooks.degraded is not None and not adm.policy.baseline
            try:
                response = local.run_now(ctx.event, ctx.context, ctx.record, ctx.request,
                                         self.answers.cut_s(ctx) if cuts else None)
            except AppFailed as exc:
                return self.answers.failed_over(ctx, exc)
            # the tracker measures the answer without the downstream work (admission adds it)
            ctx.tracker.observe(max(0.0, self._clock_ms() - ctx.admitted_ms
                                    - ctx.record.timings_ms.get("tool", 0.0)))
            return response
        return self.paths.admit(ctx)

    def needed(self, route: RouteSpec) -> str:
        """The last preload stage ``route`` needs (the model's, or the web stack's)."""
        return self._model if route.needs_model and self._model is not None else self._web

    def remaining_ms(self, context: Any) -> float:
        """Invocation time left minus a safety margin, milliseconds."""
        get = getattr(context, "get_remaining_time_in_millis", None)
        if get is None:
            return NO_CONTEXT_REMAINING_MS
        return max(0.0, float(get()) - REMAINING_MARGIN_MS)
