"""Per-invocation mechanics of a warmstart handler: ping, validate, choose a path, run the app.

A handler module does its init (config, environment, preload) and builds one
:class:`Dispatcher` in the first preload stage; ``handler(event, context)`` then calls
:meth:`Dispatcher.handle`:

1. a warm ping is answered without app code (:mod:`functions.runtime.pings`);
2. any other event is validated (:func:`functions.runtime.events.parse_http_event`); a
   malformed one gets a JSON 4xx tagged ``bad_request`` in the source's response format;
3. with an :class:`Admission` (the agent handler always has one), every declared route goes
   through SLA-aware admission: a warm path when everything is loaded and the decision table's
   rows 1-5 say local (:func:`functions.runtime.admission.ready_local_fits`); otherwise the
   route's payload is validated (4xx before any path) and
   :func:`functions.runtime.admission_flow.serve` picks local / overflow / degraded / shed from
   the preload's progress, measured latencies, the overflow client and the level. Without
   admission, the path selector picks ``local`` or ``shed`` from readiness alone;
4. for ``local`` the dispatcher waits for the web stack (and, when the selector allows, for the
   model), runs the ASGI app through Mangum, and adds ``X-Warmstart-Path`` and
   ``Server-Timing`` to the response;
5. the invocation is logged and counted (:class:`functions.runtime.telemetry.Telemetry`).

``Server-Timing`` entries: ``init`` = the init phase (on the environment's cold start) plus any
wait for the background preload of the web stack; ``queue`` = time between the request's
arrival at API Gateway and the invocation; ``model`` = wait for the model to load; ``infer`` =
inference (set by the app); ``overflow`` = the overflow call (admission).

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from functions.runtime import events, pings
from functions.runtime.admission import (
    DEFAULT_DEGRADE_P95_MS,
    DEFAULT_INFER_P95_MS,
    FINISH_PRELOAD_MARGIN_MS,
    HANDLER_POLICY,
    MAX_QUEUE_MS,
    AdmissionPolicy,
    EnvState,
    LatencyTracker,
    ModelState,
    Path,
    RequestInfo,
    StageProgress,
    default_sla_ms,
    estimate_load_remaining_ms,
    ready_local_fits,
)
from functions.runtime.admission_flow import LocalUnavailable, Outcome, serve
from functions.runtime.config import RuntimeConfig
from functions.runtime.degradation import Level, mark_degraded
from functions.runtime.errors import BadRequest, FailureTag, WarmstartError, error_body
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.overflow import OverflowClient, OverflowResult
from functions.runtime.preload import Preloader
from functions.runtime.routes import RouteRegistry, RouteSpec
from functions.runtime.telemetry import (
    InvocationRecord,
    Telemetry,
    reset_current,
    server_timing,
    set_current,
)

__all__ = [
    "DEFAULT_STAGE_P95_MS",
    "NO_CONTEXT_REMAINING_MS",
    "REMAINING_MARGIN_MS",
    "Admission",
    "Dispatcher",
    "LocalFailed",
    "PathChoice",
    "PathSelector",
    "RouteHooks",
    "arrival_ms_of",
    "readiness_path",
]

#: Safety margin kept from the invocation's remaining time when waiting, milliseconds.
REMAINING_MARGIN_MS = 250.0
#: Wait bound when no Lambda context is given (local calls), milliseconds.
NO_CONTEXT_REMAINING_MS = 30_000.0


class PathChoice(NamedTuple):
    """Which path a request takes, decided before the app runs.

    Immutable like a frozen dataclass, but a named tuple: one is built for every request and a
    tuple costs a fraction of a frozen dataclass's ``__init__`` (the warm-path budget is ~5%).

    Attributes
    ----------
    path : str
        ``local`` or ``shed`` (admission adds ``overflow`` and ``degraded``).
    reason : str
        Machine-readable reason (``model_ready``, ``model_loading``, ``model_failed``,
        ``budget_exhausted``, ``no_model_needed``); a ``shed`` reason is the error code.
    budget_ms : float
        SLA budget left when the choice was made, milliseconds.
    wait_ms : float
        For ``local``: how long the dispatcher may wait for the model, milliseconds.
    retry_after_s : int | None
        For ``shed``: seconds after which a retry may succeed.
    tag : FailureTag | None
        For ``shed``: the failure tag to log.
    """

    path: str
    reason: str
    budget_ms: float
    wait_ms: float = 0.0
    retry_after_s: int | None = None
    tag: FailureTag | None = None


#: ``select(request, route, budget_ms) -> PathChoice``: the seam admission plugs into.
PathSelector = Callable[[events.HttpRequest, "RouteSpec | None", float], PathChoice]


def readiness_path(
    preload: Preloader,
    request: events.HttpRequest,
    route: RouteSpec | None,
    budget_ms: float,
    *,
    model_stage: str = "model",
) -> PathChoice:
    """Path choice from the model's readiness alone (before admission exists).

    Routes that do not need the model run locally; a model route runs locally when the model is
    ready, or may wait for the preload for the rest of its SLA budget; it is shed (503) when the
    model failed to load or no budget is left.

    Parameters
    ----------
    preload : Preloader
        The environment's preload (stage ``model_stage`` loads the model).
    request : events.HttpRequest
        The validated request.
    route : RouteSpec | None
        Its spec (None: a route the app does not have; it answers 404 locally).
    budget_ms : float
        SLA budget left, milliseconds.
    model_stage : str
        Name of the model's preload stage.

    Returns
    -------
    PathChoice
    """
    if route is None or not route.needs_model:
        return PathChoice("local", "no_model_needed", budget_ms)
    if preload.ready(model_stage):
        return PathChoice("local", "model_ready", budget_ms)
    if preload.done(model_stage):
        return PathChoice("shed", "model_failed", budget_ms, tag=FailureTag.MODEL_ERROR)
    if budget_ms <= 0:
        return PathChoice(
            "shed", "budget_exhausted", budget_ms, retry_after_s=1, tag=FailureTag.TIMEOUT_RESOURCE
        )
    return PathChoice("local", "model_loading", budget_ms, wait_ms=budget_ms)


def on_demand_path(
    preload: Preloader,
    request: events.HttpRequest,
    route: RouteSpec | None,
    budget_ms: float,
    *,
    model_stage: str = "model",
) -> PathChoice:
    """The plain on-demand baseline (``WARMSTART_ADMISSION=off``, "warmstart off").

    No SLA logic: a model route waits for the local model for as long as the invocation has
    left (the dispatcher bounds ``wait_ms`` by ``context.get_remaining_time_in_millis()``); it
    never overflows, is never degraded and is never shed for its budget. Only a model that
    failed to load gives a ``503`` (``model_failed``, tag ``model_error``).

    Parameters
    ----------
    preload : Preloader
    request : events.HttpRequest
    route : RouteSpec | None
    budget_ms : float
        SLA budget left, ms (reported in the choice, not used to decide).
    model_stage : str

    Returns
    -------
    PathChoice
    """
    # readiness_path with an unbounded budget: never "budget_exhausted", wait without limit
    choice = readiness_path(preload, request, route, math.inf, model_stage=model_stage)
    return choice._replace(budget_ms=budget_ms)


#: p95 seeds of the preload stages, ms, until this environment measures them. Measured on the
#: project's 2-core host with the on-demand preload (``ENVIRONMENT.resource_load_ms`` of a fresh
#: process): toolkit 46 ms (now with admission ~60), web (fastapi + mangum + app) 700 ms,
#: telemetry (Powertools) 26 ms, model (onnxruntime + session + tokenizer + warm-up) 1,070 ms;
#: x1.3 for a p95, rounded up. ``overflow`` is boto3 import + client
#: (`functions.runtime.overflow.DEFAULT_CLIENT_INIT_P95_MS`).
DEFAULT_STAGE_P95_MS: dict[str, float] = {
    "toolkit": 100.0,
    "overflow": 800.0,
    "web": 900.0,
    "telemetry": 100.0,
    "model": 1400.0,
    "level": 300.0,
}


class LocalFailed(LocalUnavailable):
    """A preload stage the route needs failed: this environment cannot serve it locally."""

    def __init__(self, message: str, tag: FailureTag) -> None:
        super().__init__(message)
        self.tag = tag


class RouteHooks(NamedTuple):
    """The app's admission hooks for one route (by feature name).

    Attributes
    ----------
    payload : Callable[[Any], dict[str, Any]]
        ``event -> JSON payload`` for the overflow endpoint and the degraded answer. It
        validates the body and raises :class:`functions.runtime.errors.BadRequest` (4xx) so
        bad input is refused before any path runs, never overflowed.
    degrade : Callable[[dict[str, Any]], dict[str, Any]] | None
        ``payload -> cheaper answer body`` (no model; marked ``degraded: true`` by the
        dispatcher). None: the route has no degraded answer.
    tool_ms : Callable[[Any], float] | None
        ``event -> downstream tool time of the full answer, ms`` (cheap, never raises: 0 when
        the body has none or is invalid; validation is ``payload``'s job). Used on the warm
        path, where the body is not validated, so row 5 counts the tool call too. The
        validated ``payload``'s ``"tool_ms"`` key is used on the full path.
    """

    payload: Callable[[Any], dict[str, Any]]
    degrade: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    tool_ms: Callable[[Any], float] | None = None


class Admission:
    """SLA-aware admission of one execution environment (built once, in the preload).

    Per request the dispatcher decides with :func:`functions.runtime.admission.decide` (through
    :func:`functions.runtime.admission_flow.serve`) between local, overflow, degraded and shed,
    from the measured state kept here.

    Parameters
    ----------
    level : Callable[[], Level]
        Current degradation level; must not block (the handler answers the static level until
        the SSM reader is ready).
    overflow : OverflowClient | None
        The overflow endpoint's client (None: not configured).
    hooks : Mapping[str, RouteHooks]
        Feature name -> the route's payload validator and degraded answer.
    stage_p95_ms : Mapping[str, float]
        p95 seed of each preload stage, ms (default :data:`DEFAULT_STAGE_P95_MS`).
    policy : AdmissionPolicy
        Admission tunables (default ``HANDLER_POLICY``: 100 ms headroom).
    """

    def __init__(
        self,
        *,
        level: Callable[[], Level],
        overflow: OverflowClient | None = None,
        hooks: Mapping[str, RouteHooks] | None = None,
        stage_p95_ms: Mapping[str, float] | None = None,
        policy: AdmissionPolicy = HANDLER_POLICY,
    ) -> None:
        self.level = level
        self.overflow = overflow
        self.hooks = dict(hooks or {})
        self.stage_p95_ms = dict(DEFAULT_STAGE_P95_MS if stage_p95_ms is None else stage_p95_ms)
        self.policy = policy
        self.local: dict[str, LatencyTracker] = {}
        self.degraded = LatencyTracker(DEFAULT_DEGRADE_P95_MS)
        self._sla: dict[str, float] = {}
        #: feature -> (SLA ms, local latency tracker): one lookup on the warm path
        self.per_route: dict[str, tuple[float, LatencyTracker]] = {}

    def tracker(self, feature: str) -> LatencyTracker:
        """p95 tracker of the local answer time of ``feature`` (seeded with 50 ms)."""
        tracker = self.local.get(feature)
        if tracker is None:
            tracker = self.local[feature] = LatencyTracker(DEFAULT_INFER_P95_MS, refresh_every=8)
        return tracker

    def sla_ms(self, route: RouteSpec, p0_sla_ms: float) -> float:
        """The route's SLA: its own, else the tier default from ``WARMSTART_SLA_MS``, ms."""
        sla = self._sla.get(route.feature)  # keyed by name: hashing a frozen dataclass costs ~1 us
        if sla is None:
            sla = self._sla[route.feature] = float(route.sla_ms or default_sla_ms(route.tier, p0_sla_ms))
        return sla

    def debug(self) -> dict[str, Any]:
        """``/debug/resource`` fields: local p95s, overflow breaker and latencies."""
        out: dict[str, Any] = {
            "local_p95_ms": {k: t.p95_ms for k, t in self.local.items()},
            "degraded_p95_ms": self.degraded.p95_ms,
            "overflow": None,
        }
        ov = self.overflow
        if ov is not None:
            snap = ov.breaker.snapshot()
            out["overflow"] = {
                "endpoint_name": ov.endpoint_name,
                "client_ready": ov.client_ready,
                "breaker": str(snap.state),
                "p95_ms": ov.latency.p95_ms,
                "recent_latencies_ms": [round(v, 1) for v in ov.latency.recent()],
            }
        return out


_SHED_MESSAGES = {
    "model_failed": "the model failed to load in this execution environment; retry "
    "(another environment will serve it)",
    "budget_exhausted": "the request's SLA budget was spent before it reached the function; retry",
}


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


def arrival_ms_of(request: events.HttpRequest, invocation_wall_ms: float) -> float:
    """When the SLA clock of ``request`` started, epoch ms.

    The same as :func:`functions.runtime.admission.arrival_ms_from_event` (a test checks it),
    from the epoch the event parser already read (``requestContext.timeEpoch`` /
    ``requestTimeEpoch``), so the warm path does not walk the event twice.

    Parameters
    ----------
    request : events.HttpRequest
        The parsed request.
    invocation_wall_ms : float
        Invocation start, epoch ms.

    Returns
    -------
    float
        ``min(epoch, invocation_wall_ms)``; ``invocation_wall_ms`` without a usable epoch or
        when it is older than ``MAX_QUEUE_MS`` (30 s, the API Gateway integration timeout).
    """
    epoch = request.arrival_epoch_ms
    if epoch is None or math.isnan(epoch) or invocation_wall_ms - epoch > MAX_QUEUE_MS:
        return invocation_wall_ms
    return min(invocation_wall_ms, epoch)


#: Admission chose LOCAL and the stages the route needs are loaded: run the app now.
_LOCAL_NOW = PathChoice("local", "admitted", 0.0)


class Dispatcher:
    """Serves the invocations of one execution environment.

    Parameters
    ----------
    config : RuntimeConfig
        Run-time configuration (SLA default, degradation level).
    environment : ExecutionEnvironment
        This environment (cold start, records).
    preload : Preloader
        Stages ``web_stage`` (returns the Mangum adapter) and ``model_stage``.
    routes : RouteRegistry
        Route specs (tier, SLA, needs_model).
    telemetry : Telemetry
        Logger and metrics.
    select_path : PathSelector
        The path choice (admission's seam).
    clock_ms : Callable[[], float]
        Monotonic clock, milliseconds.
    wall_ms : Callable[[], float]
        Wall clock, epoch milliseconds (queue time against the request's arrival).
    sleep_s : Callable[[float], object]
        Sleep, seconds (ping holds).
    admission : Admission | None
        SLA-aware admission (local / overflow / degraded / shed); None: ``select_path`` alone.
    telemetry_stage : str | None
        Preload stage that loads Powertools: while it is not done, finished requests are logged
        and counted once it is (a cold request does not import Powertools on its own path).
    """

    def __init__(
        self,
        *,
        config: RuntimeConfig,
        environment: ExecutionEnvironment,
        preload: Preloader,
        routes: RouteRegistry,
        telemetry: Telemetry,
        select_path: PathSelector,
        clock_ms: Callable[[], float] = _clock_ms,
        wall_ms: Callable[[], float] = lambda: time.time() * 1000.0,
        sleep_s: Callable[[float], object] = time.sleep,
        web_stage: str = "web",
        model_stage: str = "model",
        admission: Admission | None = None,
        telemetry_stage: str | None = None,
    ) -> None:
        self.config = config
        self.environment = environment
        self.preload = preload
        self.routes = routes
        self.telemetry = telemetry
        self.select_path = select_path
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms
        self._sleep_s = sleep_s
        self._web = web_stage
        self._model = model_stage
        self._loops = threading.local()
        self._adapter: Any = None
        self._adapter_thread = 0
        self._init_type = environment.init_type.value
        self.admission = admission
        self._loaded = False  # web and model stages ready (admission's warm path)
        self._telemetry_stage = telemetry_stage
        self._pending: list[tuple[InvocationRecord, dict[str, Any]]] = []
        self._pending_lock = threading.Lock()

    # -- entry ---------------------------------------------------------------------------
    def handle(self, event: Any, context: Any, started_ms: float | None = None) -> dict[str, Any]:
        """Serve one invocation (see the module docstring for the steps).

        Parameters
        ----------
        event : Any
            Warm ping, or an HTTP API v2, function URL, REST v1 or ALB event.
        context : Any
            Lambda context (``aws_request_id``, ``get_remaining_time_in_millis``) or None.
        started_ms : float | None
            Monotonic invocation start, milliseconds (default: now).

        Returns
        -------
        dict[str, Any]
            A pong, or a response in the event source's format.
        """
        started_ms = self._clock_ms() if started_ms is None else started_ms
        kind = events.classify(event)
        if kind is events.EventKind.PING:
            return self._answer_ping(event, context, started_ms)

        env = self.environment
        cold_start = env.begin_invocation()
        record = InvocationRecord(getattr(context, "aws_request_id", None))
        deadline_ms: float | None = None  # the SLA's end on the monotonic clock (admission)
        try:
            request = events.parse_http_event(event, kind=kind)
        except BadRequest as exc:
            record.route = "?"
            response = self._fail(kind, event, record, exc, "local")
        else:
            record.route = request.route
            route = self.routes.match(request.method, request.path)
            if self.admission is not None and route is not None:
                response, deadline_ms = self._admit(kind, event, context, record, request, route, started_ms)
            else:
                queue_ms = events.queue_ms(request, self._wall_ms())
                if queue_ms:
                    record.timings_ms["queue"] = queue_ms
                sla_ms = route.sla_ms if route is not None and route.sla_ms else self.config.sla_ms
                choice = self.select_path(request, route, sla_ms - queue_ms)
                response = self._serve(kind, event, context, record, choice)
        status = int(response.get("statusCode", 500))
        if cold_start and env.init_duration_ms is not None:
            record.timings_ms["init"] = record.timings_ms.get("init", 0.0) + env.init_duration_ms
        extra = {"x-warmstart-path": record.path}
        timing = server_timing(record.timings_ms)
        if timing:
            extra["server-timing"] = timing
        events.add_headers(kind, response, extra)
        now_ms = self._clock_ms()
        duration_ms = now_ms - started_ms
        env.record(record.route, record.path, status, duration_ms)
        overflow_ms = record.timings_ms.get("overflow") if record.path == "overflow" else None
        sla_breach = deadline_ms is not None and now_ms > deadline_ms
        telemetry = self.telemetry
        if telemetry.loaded or self._telemetry_stage is None or self.preload.done(self._telemetry_stage):
            if self._pending:
                self.flush_pending()
            telemetry.request_done(
                record,
                status=status,
                duration_ms=duration_ms,
                cold_start=cold_start,
                init_type=self._init_type,
                environment_id=env.environment_id,
                init_duration_ms=env.init_duration_ms,
                now_ms=now_ms,
                overflow_ms=overflow_ms,
                sla_breach=sla_breach,
            )
        else:  # a cold request: Powertools is still loading on the preload thread
            done = {
                "status": status, "duration_ms": duration_ms, "cold_start": cold_start,
                "init_type": self._init_type, "environment_id": env.environment_id,
                "init_duration_ms": env.init_duration_ms, "now_ms": now_ms,
                "overflow_ms": overflow_ms, "sla_breach": sla_breach,
            }
            with self._pending_lock:
                self._pending.append((record, done))
        return response

    def flush_pending(self) -> int:
        """Log and count the requests finished before Powertools was loaded (loads it).

        The handler's telemetry preload stage calls it; later requests call it too, so a
        record appended while the stage was flushing is not lost.

        Returns
        -------
        int
            Records flushed.
        """
        with self._pending_lock:
            pending, self._pending = self._pending, []
        for record, done in pending:
            self.telemetry.request_done(record, **done)
        return len(pending)

    # -- admission ----------------------------------------------------------------------
    def _admit(
        self,
        kind: events.EventKind,
        event: Any,
        context: Any,
        record: InvocationRecord,
        request: events.HttpRequest,
        route: RouteSpec,
        started_ms: float,
    ) -> tuple[dict[str, Any], float]:
        """Serve one request along the path admission picks; returns (response, SLA deadline
        on the monotonic clock)."""
        adm = self.admission
        assert adm is not None
        clock_now = self._clock_ms()
        wall_now = self._wall_ms()
        invocation_wall_ms = wall_now - (clock_now - started_ms)
        arrival_ms = arrival_ms_of(request, invocation_wall_ms)
        queue_ms = invocation_wall_ms - arrival_ms
        if queue_ms > 0:
            record.timings_ms["queue"] = queue_ms
        per_route = adm.per_route.get(route.feature)
        if per_route is None:
            per_route = adm.per_route[route.feature] = (
                adm.sla_ms(route, self.config.sla_ms), adm.tracker(route.feature))
        sla_ms, tracker = per_route
        deadline_ms = started_ms + (arrival_ms + sla_ms - invocation_wall_ms)
        level = adm.level()
        preload = self.preload

        # warm path: everything loaded and rows 1-5 of the decision table say LOCAL
        hooks = adm.hooks.get(route.feature)
        tool_of = hooks.tool_ms if hooks is not None else None
        tool_ms = tool_of(event) if tool_of is not None else 0.0
        loaded = self._loaded
        if not loaded and preload.ready(self._web) and preload.ready(self._model):
            loaded = self._loaded = True  # stages never unload: checked once per environment
        if (
            (loaded or (not route.needs_model and preload.ready(self._web)))
            and ready_local_fits(
                route.tier, route.degradable, level.rank,
                sla_ms - (wall_now - arrival_ms if wall_now > arrival_ms else 0.0),
                tracker.p95_ms, adm.policy, tool_ms,
            )
        ):
            response = self._serve(kind, event, context, record, _LOCAL_NOW)
            # the tracker measures the answer without the tool call (admission adds tool_ms)
            tracker.observe(max(0.0, self._clock_ms() - clock_now - record.timings_ms.get("tool", 0.0)))
            return response, deadline_ms

        payload: dict[str, Any] | None = None
        if hooks is not None:
            try:
                payload = hooks.payload(event)  # bad input: 4xx now, never overflowed
            except BadRequest as exc:
                return self._fail(kind, event, record, exc, "local"), deadline_ms
        degrade = hooks.degrade if hooks is not None and payload is not None else None
        if payload is not None:
            tool_ms = float(payload.get("tool_ms", 0.0))
        info = RequestInfo(route.path, route.tier, sla_ms, arrival_ms,
                           degradable=route.degradable and degrade is not None, tool_ms=tool_ms)

        def run_local(wait_ms: float) -> dict[str, Any]:
            return self._run_local(kind, event, context, record, route, wait_ms, tracker)

        def run_degraded() -> dict[str, Any]:
            assert degrade is not None and payload is not None
            t0 = self._clock_ms()
            answer = mark_degraded(degrade(payload), level=level)
            adm.degraded.observe(self._clock_ms() - t0)
            return events.error_response(kind, event, 200, answer, {})

        def on_overflow(result: OverflowResult) -> dict[str, Any]:
            return events.error_response(kind, event, 200, result.body, {})

        outcome: Outcome = serve(
            info,
            env=lambda: self._env_state(route, tracker),
            level=level,
            clock_ms=self._wall_ms,
            run_local=run_local,
            run_degraded=run_degraded if info.degradable else None,
            overflow=adm.overflow if route.needs_model and payload is not None else None,
            overflow_payload=payload,
            on_overflow=on_overflow,
            request_id=record.request_id or "",
            feature=route.feature,
            policy=adm.policy,
        )
        record.path = outcome.header_path
        overflow_ms = outcome.timings_ms.get("overflow")
        if overflow_ms is not None:
            record.timings_ms["overflow"] = overflow_ms
        tag = outcome.failure_tag
        if tag is not None and record.failure is None:
            record.failure = FailureTag(tag)
        if (self.config.finish_preload and outcome.path in (Path.OVERFLOW, Path.DEGRADE)
                and not preload.ready(self._model)):
            self._finish_preload(record, deadline_ms - FINISH_PRELOAD_MARGIN_MS)
        if outcome.path is Path.SHED:
            shed = outcome.response
            headers = {k.lower(): v for k, v in shed.headers.items() if k.lower() != "content-type"}
            return events.error_response(kind, event, shed.status_code, shed.body, headers), deadline_ms
        answered: dict[str, Any] = outcome.response
        return answered, deadline_ms

    def _finish_preload(self, record: InvocationRecord, until_ms: float) -> None:
        """Wait for the model stage until ``until_ms`` (monotonic clock, ms) at the latest.

        Called after an overflowed or degraded answer while the model loads, when
        ``RuntimeConfig.finish_preload`` is on: Lambda freezes the environment once the
        invocation returns, so this is the time the preload can use. The wait is recorded in
        ``Server-Timing`` as ``preload``.
        """
        wait_ms = until_ms - self._clock_ms()
        if wait_ms <= 0:
            return
        t0 = self._clock_ms()
        self.preload.wait(self._model, wait_ms / 1000.0)
        record.timings_ms["preload"] = self._clock_ms() - t0

    def _env_state(self, route: RouteSpec, tracker: LatencyTracker) -> EnvState:
        """This environment as admission sees it for ``route`` (from the preload's progress)."""
        adm = self.admission
        assert adm is not None
        preload = self.preload
        needed = self._model if route.needs_model else self._web
        degrade_p95 = adm.degraded.p95_ms
        if preload.ready(self._web) and preload.ready(needed):
            return EnvState(ModelState.READY, 0.0, tracker.p95_ms, degrade_p95)
        stages = []
        for name, started, finished in preload.progress():
            p95 = adm.stage_p95_ms.get(name, DEFAULT_STAGE_P95_MS["model"])
            stages.append(StageProgress(name, p95, started, finished))
            if name == needed:
                break
        remaining = estimate_load_remaining_ms(stages, self._clock_ms())
        state = ModelState.LOADING if stages and stages[0].started_ms is not None else ModelState.NOT_LOADED
        if preload.failed(self._web) or preload.failed(needed):
            state = ModelState.NOT_LOADED  # run_local fails at once; admission falls back
        return EnvState(state, remaining, tracker.p95_ms, degrade_p95)

    def _run_local(
        self,
        kind: events.EventKind,
        event: Any,
        context: Any,
        record: InvocationRecord,
        route: RouteSpec,
        wait_ms: float,
        tracker: LatencyTracker,
    ) -> dict[str, Any]:
        """The local path: wait for the stages ``route`` needs (at most ``wait_ms``), run the app.

        Raises
        ------
        LocalFailed
            A stage the route needs failed to load (tag ``model_error`` / ``tool_unavailable``).
        LocalUnavailable
            The stages were not ready within ``wait_ms`` (tag ``timeout_resource``).
        """
        preload = self.preload
        deadline = self._clock_ms() + wait_ms
        needed = (self._web, self._model) if route.needs_model else (self._web,)
        for stage, timing in zip(needed, ("init", "model")):
            if not preload.ready(stage):
                t0 = self._clock_ms()
                preload.wait(stage, max(0.0, deadline - t0) / 1000.0)
                waited = self._clock_ms() - t0
                record.timings_ms[timing] = record.timings_ms.get(timing, 0.0) + waited
                if preload.failed(stage):
                    tag = FailureTag.MODEL_ERROR if stage == self._model else FailureTag.TOOL_UNAVAILABLE
                    raise LocalFailed(f"preload stage {stage!r} failed in this execution environment", tag)
                if not preload.ready(stage):
                    raise LocalUnavailable(
                        f"preload stage {stage!r} not ready after {waited:.0f} ms (the wait admission allowed)"
                    )
        t0 = self._clock_ms()
        response = self._serve(kind, event, context, record, _LOCAL_NOW)
        tracker.observe(max(0.0, self._clock_ms() - t0 - record.timings_ms.get("tool", 0.0)))
        return response

    # -- helpers -------------------------------------------------------------------------
    def remaining_ms(self, context: Any) -> float:
        """Invocation time left minus a safety margin, milliseconds."""
        get = getattr(context, "get_remaining_time_in_millis", None)
        if get is None:
            return NO_CONTEXT_REMAINING_MS
        return max(0.0, float(get()) - REMAINING_MARGIN_MS)

    def _answer_ping(self, event: Any, context: Any, started_ms: float) -> dict[str, Any]:
        env = self.environment
        try:
            ping = pings.parse_ping(event)
        except BadRequest as exc:
            env.begin_invocation(counted=False)
            self.telemetry.failure(FailureTag.BAD_REQUEST, "malformed warm ping", reason=exc.message)
            body = error_body(exc.code, exc.message, request_id=getattr(context, "aws_request_id", None))
            return events.error_response(events.EventKind.UNKNOWN, event, exc.status, body, {})
        cold_start = env.begin_invocation(counted=False)
        # Lambda freezes the environment between invocations: finish the preload now, within
        # this invocation's time, so the next request finds the environment warm.
        self.preload.wait_all(self.remaining_ms(context) / 1000.0)
        held_ms = self._clock_ms() - started_ms
        if held_ms < ping.hold_ms:
            self._sleep_s((ping.hold_ms - held_ms) / 1000.0)
            held_ms = self._clock_ms() - started_ms
        ready = self.preload.ready(self._web) and self.preload.ready(self._model)
        self.telemetry.ping_done(
            cold_start=cold_start,
            init_type=env.init_type.value,
            environment_id=env.environment_id,
            held_ms=held_ms,
            ready=ready,
        )
        return pings.pong(
            environment_id=env.environment_id,
            init_type=env.init_type.value,
            cold_start=cold_start,
            ready=ready,
            held_ms=held_ms,
        )

    def _fail(
        self,
        kind: events.EventKind,
        event: Any,
        record: InvocationRecord,
        error: WarmstartError,
        path: str,
    ) -> dict[str, Any]:
        record.failure = error.tag
        record.path = path
        headers = {"x-warmstart-path": path}
        retry_after_s = error.retry_after_s
        recovery_at = None
        if retry_after_s is not None:
            headers["retry-after"] = str(math.ceil(retry_after_s))
            recovery_at = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._wall_ms() / 1000.0 + retry_after_s)
            )
        body = error_body(
            error.code,
            error.message,
            request_id=record.request_id,
            retry_after_s=retry_after_s,
            estimated_recovery_at=recovery_at,
            level=str(self.config.degradation_level),
        )
        return events.error_response(kind, event, error.status, body, headers)

    def _ensure_event_loop(self) -> None:
        # Mangum runs the app with asyncio.get_event_loop(); the adapter may have been built on
        # the preload thread, so the invoking thread gets its own loop once.
        if not getattr(self._loops, "ready", False):
            import asyncio

            asyncio.set_event_loop(asyncio.new_event_loop())
            self._loops.ready = True

    def _serve(
        self,
        kind: events.EventKind,
        event: Any,
        context: Any,
        record: InvocationRecord,
        choice: PathChoice,
    ) -> dict[str, Any]:
        if choice.path == "shed":
            error = WarmstartError(
                _SHED_MESSAGES.get(choice.reason, f"request shed ({choice.reason})"),
                status=503,
                code=choice.reason,
                tag=choice.tag or FailureTag.TIMEOUT_RESOURCE,
                retry_after_s=choice.retry_after_s,
            )
            return self._fail(kind, event, record, error, "shed")

        adapter = self._adapter
        if (
            adapter is not None and choice.wait_ms <= 0 and threading.get_ident() == self._adapter_thread
        ):  # warm path: web stack loaded, this thread has its event loop
            record.path = choice.path
            previous = set_current(record)
            try:
                response: dict[str, Any] = adapter(event, context)
                return response
            finally:
                reset_current(previous)

        preload = self.preload
        if not preload.ready(self._web):
            remaining_ms = self.remaining_ms(context)
            wait_started = self._clock_ms()
            preload.wait(self._web, remaining_ms / 1000.0)
            # the rest of this environment's init, paid by this request
            record.timings_ms["init"] = self._clock_ms() - wait_started
            if not preload.ready(self._web):
                error = WarmstartError(
                    "the web stack is not available in this execution environment; retry",
                    status=503, code="web_unavailable", tag=FailureTag.TOOL_UNAVAILABLE,
                    retry_after_s=1,
                )
                return self._fail(kind, event, record, error, "shed")
        if choice.wait_ms > 0 and not preload.ready(self._model):
            model_started = self._clock_ms()
            wait_ms = min(choice.wait_ms - record.timings_ms.get("init", 0.0), self.remaining_ms(context))
            finished = preload.wait(self._model, max(0.0, wait_ms) / 1000.0)
            record.timings_ms["model"] = self._clock_ms() - model_started
            if not finished or not preload.ready(self._model):
                error = WarmstartError(
                    "the model failed to load in this execution environment; retry"
                    if finished
                    else f"the model is still loading after {record.timings_ms['model']:.0f} ms "
                    "(the request's SLA budget); retry shortly",
                    status=503,
                    code="model_failed" if finished else "not_ready",
                    tag=FailureTag.MODEL_ERROR if finished else FailureTag.TIMEOUT_RESOURCE,
                    retry_after_s=None if finished else 1,
                )
                return self._fail(kind, event, record, error, "shed")

        adapter = preload.result(self._web)
        self._ensure_event_loop()
        self._adapter = adapter  # this thread has its event loop: later calls take the warm path
        self._adapter_thread = threading.get_ident()
        record.path = choice.path
        previous = set_current(record)
        try:
            response = adapter(event, context)
            return response
        finally:
            reset_current(previous)
