"""Per-invocation mechanics of a warmstart handler: ping, validate, choose a path, run the app.

A handler module does its init (config, environment, preload) and builds one
:class:`Dispatcher` in the first preload stage; ``handler(event, context)`` then calls
:meth:`Dispatcher.handle`:

1. a warm ping is answered without app code (:mod:`functions.runtime.pings`);
2. any other event is validated (:func:`functions.runtime.events.parse_http_event`); a
   malformed one gets a JSON 4xx tagged ``bad_request`` in the source's response format;
3. the path selector (the seam admission plugs into) picks ``local`` or ``shed``
   (admission adds ``overflow`` / ``degraded``);
4. for ``local`` the dispatcher waits for the web stack (and, when the selector allows, for the
   model), runs the ASGI app through Mangum, and adds ``X-Warmstart-Path`` and
   ``Server-Timing`` to the response;
5. the invocation is logged and counted (:class:`functions.runtime.telemetry.Telemetry`).

``Server-Timing`` entries: ``init`` = the init phase (on the environment's cold start) plus any
wait for the background preload of the web stack; ``queue`` = time between the request's
arrival at API Gateway and the invocation; ``model`` = wait for the model to load; ``infer`` =
inference (set by the app); ``overflow`` (set by admission, issue 5).

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from functions.runtime import events, pings
from functions.runtime.config import RuntimeConfig
from functions.runtime.errors import BadRequest, FailureTag, WarmstartError, error_body
from functions.runtime.lifecycle import ExecutionEnvironment
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
    "NO_CONTEXT_REMAINING_MS",
    "REMAINING_MARGIN_MS",
    "Dispatcher",
    "PathChoice",
    "PathSelector",
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


_SHED_MESSAGES = {
    "model_failed": "the model failed to load in this execution environment; retry "
    "(another environment will serve it)",
    "budget_exhausted": "the request's SLA budget was spent before it reached the function; retry",
}


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


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
        self._init_type = environment.init_type.value

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
        try:
            request = events.parse_http_event(event, kind=kind)
        except BadRequest as exc:
            record.route = "?"
            response = self._fail(kind, event, record, exc, "local")
        else:
            record.route = request.route
            queue_ms = events.queue_ms(request, self._wall_ms())
            if queue_ms:
                record.timings_ms["queue"] = queue_ms
            route = self.routes.match(request.method, request.path)
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
        self.telemetry.request_done(
            record,
            status=status,
            duration_ms=duration_ms,
            cold_start=cold_start,
            init_type=self._init_type,
            environment_id=env.environment_id,
            init_duration_ms=env.init_duration_ms,
            now_ms=now_ms,
        )
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
        record.path = choice.path
        token = set_current(record)
        try:
            response: dict[str, Any] = adapter(event, context)
            return response
        finally:
            reset_current(token)
