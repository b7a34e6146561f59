"""Per-invocation mechanics of a warmstart handler: ping, validate, admit, answer, record.

`functions.runtime.agent` builds one :class:`Dispatcher` per execution environment (in the
toolkit's preload stage); the handler then calls :meth:`Dispatcher.handle`:

1. a warm ping is answered without app code (:mod:`functions.runtime.pings`);
2. any other event is validated (:func:`functions.runtime.events.parse_http_event`); a
   malformed one gets a JSON 4xx tagged ``bad_request`` in the source's response format;
3. a declared route goes through admission, the one decision path: its payload hook validates
   the body first (bad input is a 4xx before any path runs, never overflowed); then the warm
   path when everything is loaded and the decision table's rows 1-5 say local
   (:func:`functions.runtime.admission.ready_local_fits`), else
   :func:`functions.runtime.admission.flow.serve` picks local / overflow / degraded / shed.
   ``WARMSTART_ADMISSION=off`` is the same walk under the baseline policy
   (`functions.runtime.admission.BASELINE_POLICY`). A route the agent did not declare goes to
   the app as is (it answers its own 404). A streaming route (``Route(stream=True)``) whose
   caller streams (a function URL event, a runtime client that streams) goes to
   `functions.runtime.admission.stream` (imported then, never on a buffered route's path):
   admission against its first token, a `functions.runtime.streaming.StreamedResponse`
   recorded when the stream ends; any other caller gets the path above, the stream collected
   into one answer, with ``x-warmstart-stream: buffered``;
4. the local path (:class:`functions.runtime.local_path.LocalPath`) runs the app through
   Mangum; every answer gets ``X-Warmstart-Path`` and ``Server-Timing``. A failure inside the
   app (an exception; a degradable route's run past its SLA budget less the degraded answer's
   p95, which cancels it) is answered like a cold start the SLA cannot wait for: the route's
   ``degraded`` answer (``X-Warmstart-Path: degraded``, counted) when it has one, else the
   JSON error contract (``app_error`` 500, ``downstream_timeout`` 504, ``tool_unavailable``
   502), never Starlette's ``500 text/plain``; an app's own JSON error answer is kept;
5. the invocation is logged and counted (:class:`functions.runtime.telemetry.Telemetry`).

``Server-Timing`` entries: ``init`` = the init phase (on the environment's cold start) plus any
wait for the background preload of the web stack; ``queue`` = time between the request's
arrival at API Gateway and the invocation; ``model`` = wait for the model to load; ``infer`` /
``tool`` = set by the app (`functions.runtime.agent.AgentRuntime.timing`); ``overflow`` = the
overflow call; ``preload`` = the finish-preload wait.

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from functions.runtime import events, pings
from functions.runtime.admission import (
    FINISH_PRELOAD_MARGIN_MS,
    Path,
    RequestInfo,
    ready_local_fits,
)
from functions.runtime.admission.flow import DegradeUnavailable, Outcome, serve
from functions.runtime.admission.state import Admission, RouteHooks
from functions.runtime.config import FinishPreload, RuntimeConfig
from functions.runtime.degradation import mark_degraded
from functions.runtime.errors import BadRequest, FailureTag, WarmstartError, error_body
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.local_path import AppFailed, LocalPath
from functions.runtime.overflow import OverflowResult
from functions.runtime.preload import Preloader
from functions.runtime.routes import RouteRegistry, RouteSpec
from functions.runtime.telemetry import (
    InvocationRecord,
    Telemetry,
    reset_current,
    safe_text,
    server_timing,
    set_current,
)

if TYPE_CHECKING:  # registered by the handler only where it has work
    from functions.runtime.post_response import PostResponse
    from functions.runtime.streaming import StreamedResponse

__all__ = [
    "NO_CONTEXT_REMAINING_MS",
    "REMAINING_MARGIN_MS",
    "STREAM_HEADER",
    "Dispatcher",
    "arrival_ms_of",
    "internal_error_response",
    "read_payload",
    "too_large",
]

#: Safety margin kept from the invocation's remaining time when waiting, milliseconds.
REMAINING_MARGIN_MS = 250.0
#: Wait bound when no Lambda context is given (local calls), milliseconds.
NO_CONTEXT_REMAINING_MS = 30_000.0
#: Kept from a degradable route's SLA after its degraded answer's p95 when the app's run is
#: cut, milliseconds (the answer's serialisation and the handler's return).
CUT_MARGIN_MS = 20.0
#: Response header of a streaming route answered buffered (a caller that does not stream:
#: HTTP API, REST API, ALB, ``Invoke``; or a runtime client that cannot stream).
STREAM_HEADER = "x-warmstart-stream"
#: The status of a non-degradable route's failure inside the app, by tag (502: the
#: downstream failed, 504: it did not answer in time; RFC 9110 15.6.3, 15.6.5).
APP_FAILURE_STATUS = {FailureTag.DOWNSTREAM_TIMEOUT: 504, FailureTag.TOOL_UNAVAILABLE: 502}


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
        when it is older than :data:`functions.runtime.events.MAX_EVENT_AGE_MS`.
    """
    epoch = request.arrival_epoch_ms
    if epoch is None or math.isnan(epoch) or invocation_wall_ms - epoch > events.MAX_EVENT_AGE_MS:
        return invocation_wall_ms
    return min(invocation_wall_ms, epoch)


def read_payload(event: Any, validate: Callable[[Any], Mapping[str, Any]]) -> dict[str, Any]:
    """Run a route's ``validate`` hook on the request's JSON body (None when the body is empty).

    Raises
    ------
    BadRequest
        The body is not JSON (400), nests deeper than `functions.runtime.events.MAX_JSON_DEPTH`
        (400, checked before parsing), or the hook refused it (its own
        ``BadRequest``, or 422 with the message of a ``ValueError`` / ``TypeError``).
    """
    raw = events.request_body(event)
    body: Any = None
    if raw.strip():
        events.check_json_depth(raw)  # before the parse: no recursion on a client's nesting
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise BadRequest("request body is not valid JSON (or nests too deeply)") from None
    try:
        payload = validate(body)
    except BadRequest:
        raise
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"invalid request: {exc}", status=422) from None
    if not isinstance(payload, Mapping):
        raise HookError(f"the validate hook must return a dict (the payload), got "
                        f"{type(payload).__name__}")
    return dict(payload)


#: Bodies longer than this (characters) are measured against Lambda's response limit before
#: they are returned (shorter ones cannot reach it with their headers).
LARGE_BODY_CHARS = 1_000_000


def too_large(response: Mapping[str, Any]) -> bool:
    """True when ``response`` serialised as the runtime sends it (JSON, ASCII) exceeds
    `functions.runtime.events.MAX_RESPONSE_BYTES`."""
    try:
        return len(json.dumps(response)) > events.MAX_RESPONSE_BYTES
    except (TypeError, ValueError):  # not JSON at all: Lambda could not send it either
        return True


def internal_error_response(event: Any, context: Any, exc: BaseException, *,
                            level: str | None = None) -> dict[str, Any]:
    """The answer when the toolkit itself failed on a request: a generic 500 in the event
    source's format, tagged ``model_error``; the exception and its traceback are logged (made
    safe to write), never put in the body.

    Parameters
    ----------
    event : Any
        The invocation's event (any JSON value).
    context : Any
        The Lambda context or None.
    exc : BaseException
        What was raised.
    level : str | None
        The degradation level for the body.

    Returns
    -------
    dict[str, Any]
        ``statusCode`` 500, ``X-Warmstart-Path: local``, body ``{"error": "internal_error", ...}``.
    """
    import logging
    import traceback

    request_id = getattr(context, "aws_request_id", None)
    try:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        logging.getLogger("warmstart").error("request %s failed inside the toolkit (failure "
                                             "model_error; answered 500): %s",
                                             safe_text(request_id), safe_text(trace, 20_000))
    except Exception:  # noqa: BLE001, S110 - logging must not turn a 500 into a crash
        pass
    try:
        kind = events.classify(event)
    except Exception:  # noqa: BLE001 - an event even classify cannot read: answer as JSON
        kind = events.EventKind.UNKNOWN
    if not kind.is_http:
        kind = events.EventKind.UNKNOWN
    body = error_body("internal_error", "the request failed in this execution environment; "
                      "see the function's log for this request id",
                      request_id=request_id if isinstance(request_id, str) else None, level=level)
    return events.respond(kind, event, 500, body, {"x-warmstart-path": "local"})


class HookError(TypeError):
    """An agent's hook broke its contract (a wrong return type): a 500, logged with the hook."""


class Dispatcher:
    """Serves the invocations of one execution environment.

    Parameters
    ----------
    config : RuntimeConfig
        Run-time configuration (SLA default, degradation level, finish-preload switch).
    environment : ExecutionEnvironment
        This environment (cold start, records).
    preload : Preloader
        Stages ``web_stage`` (returns the Mangum adapter) and ``model_stage``.
    routes : RouteRegistry
        The declared routes (tier, SLA, needs_model).
    telemetry : Telemetry
        Logger and metrics.
    admission : Admission
        Admission state (hooks, trackers, overflow client, level, policy).
    clock_ms : Callable[[], float]
        Monotonic clock, milliseconds.
    wall_ms : Callable[[], float]
        Wall clock, epoch milliseconds (queue time against the request's arrival).
    sleep_s : Callable[[float], object]
        Sleep, seconds (ping holds).
    web_stage : str
    model_stage : str | None
        None: the agent has no model.
    telemetry_stage : str | None
        Preload stage that loads Powertools: while it is not done, finished requests are logged
        and counted once it is (a cold request does not import Powertools on its own path).
    post_response : PostResponse | None
        The toolkit's internal extension (`functions.runtime.post_response`) when registered:
        ``WARMSTART_FINISH_PRELOAD=after`` queues the preload's end to the post-response phase.
    """

    def __init__(
        self,
        *,
        config: RuntimeConfig,
        environment: ExecutionEnvironment,
        preload: Preloader,
        routes: RouteRegistry,
        telemetry: Telemetry,
        admission: Admission,
        clock_ms: Callable[[], float] = _clock_ms,
        wall_ms: Callable[[], float] = lambda: time.time() * 1000.0,
        sleep_s: Callable[[float], object] = time.sleep,
        web_stage: str = "web",
        model_stage: str | None = "model",
        telemetry_stage: str | None = None,
        post_response: PostResponse | None = None,
    ) -> None:
        self.config = config
        self.post_response = post_response
        self.environment = environment
        self.preload = preload
        self.routes = routes
        self.telemetry = telemetry
        self.admission = admission
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms
        self._sleep_s = sleep_s
        self._web = web_stage
        self._model = model_stage
        self.local = LocalPath(preload, clock_ms, web_stage=web_stage, model_stage=model_stage)
        self._init_type = environment.init_type.value
        self._loaded = False  # every stage a route can need is ready (checked once per env)
        self._telemetry_stage = telemetry_stage
        self._pending: list[tuple[InvocationRecord, dict[str, Any]]] = []
        import threading

        self._pending_lock = threading.Lock()

    # -- entry ---------------------------------------------------------------------------
    def handle(self, event: Any, context: Any,
               started_ms: float | None = None) -> dict[str, Any] | StreamedResponse:
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
        dict[str, Any] | StreamedResponse
            A pong, or a response in the event source's format; for a streaming route whose
            caller streams (`functions.runtime.admission.stream`), a
            `functions.runtime.streaming.StreamedResponse`, recorded when it ends (its
            ``on_finish``).
        """
        started_ms = self._clock_ms() if started_ms is None else started_ms
        try:
            return self._handle(event, context, started_ms)
        except Exception as exc:  # noqa: BLE001 - the edge is total: our fault, a generic 500
            response = internal_error_response(event, context, exc, level=self._level_or_none())
            try:  # logged with its tag and counted, as any failed request is
                self.environment.record("?", "local", 500, self._clock_ms() - started_ms)
                self.telemetry.failure(FailureTag.MODEL_ERROR, "request failed inside the toolkit",
                                       request_id=getattr(context, "aws_request_id", None),
                                       status=500, path="local")
            except Exception:  # noqa: BLE001, S110 - the answer must go out anyway
                pass
            return response

    def _level_or_none(self) -> str | None:
        try:
            return str(self.admission.level())
        except Exception:  # noqa: BLE001 - the level is informative only
            return None

    def _handle(self, event: Any, context: Any,
                started_ms: float) -> dict[str, Any] | StreamedResponse:
        kind = events.classify(event)
        if kind is events.EventKind.PING:
            return self._answer_ping(event, context, started_ms)

        env = self.environment
        cold_start = env.begin_invocation()
        record = InvocationRecord(getattr(context, "aws_request_id", None))
        deadline_ms: float | None = None  # the SLA's end on the monotonic clock
        # the current invocation for the hooks and the app (runtime.payload(), path_params(),
        # remaining_ms(), timing()): one request at a time per execution environment
        previous = set_current(record)
        streamed: StreamedResponse | None = None  # a stream: recorded when it ends
        stream_buffered = False
        try:
            try:
                request = events.parse_http_event(event, kind=kind, base_path=self.config.base_path,
                                                  strip_prefixes=self.config.strip_prefixes)
            except BadRequest as exc:
                record.route = "?"
                response = self._fail(kind, event, record, exc, "local")
            else:
                record.route = request.route
                route = self.routes.match(request.method, request.path)
                if route is None:  # not declared: the app answers (its own 404 / 405)
                    response = self._unrouted(kind, event, context, record, request)
                elif not route.stream:
                    response, deadline_ms = self._admit(kind, event, context, record, request, route,
                                                        started_ms)
                else:
                    from functions.runtime.admission import stream as admission_stream

                    if admission_stream.streams_to(kind):
                        answer, deadline_ms = admission_stream.admit(
                            self, kind, event, context, record, request, route, started_ms)
                        if isinstance(answer, admission_stream.Streamed):
                            streamed = admission_stream.record_when_done(
                                self, answer, record, started_ms, cold_start, deadline_ms, previous)
                            return streamed
                        response = answer  # refused, shed, degraded, or complete at once
                    else:  # a buffered caller: the stream collected into one answer
                        stream_buffered = True
                        response, deadline_ms = self._admit(kind, event, context, record, request,
                                                            route, started_ms)
                    record.stream = "buffered"
        finally:
            if streamed is None:  # a stream's app still runs: its record stays current
                reset_current(previous)
        status = int(response.get("statusCode", 500))
        if status >= 400 and record.failure is None and record.path == "local":
            # the app's own error answer, untagged by the app: a 5xx is the agent's fault
            record.failure = FailureTag.APP_ERROR if status >= 500 else FailureTag.BAD_REQUEST
        body = response.get("body")
        if type(body) is str and len(body) > LARGE_BODY_CHARS and too_large(response):
            response = self._too_large(kind, event, record)
            status = 500
        if cold_start and env.init_duration_ms is not None:
            record.timings_ms["init"] = record.timings_ms.get("init", 0.0) + env.init_duration_ms
        timing = server_timing(record.timings_ms)
        headers = response.get("headers")
        if type(headers) is dict and kind is not events.EventKind.ALB:
            # Mangum's and respond's header maps: lower-case names, set in place
            headers["x-warmstart-path"] = record.path
            if timing:
                headers["server-timing"] = timing
            if stream_buffered:
                headers[STREAM_HEADER] = "buffered"
        else:
            extra = {"x-warmstart-path": record.path}
            if timing:
                extra["server-timing"] = timing
            if stream_buffered:
                extra[STREAM_HEADER] = "buffered"
            events.add_headers(kind, response, extra)
        now_ms = self._clock_ms()
        duration_ms = now_ms - started_ms
        env.record(record.route, record.path, status, duration_ms)
        overflow_ms = record.timings_ms.get("overflow") if record.path == "overflow" else None
        sla_breach = deadline_ms is not None and now_ms > deadline_ms
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
        """Log and count the requests finished before Powertools was loaded.

        The toolkit's telemetry preload stage calls it; later requests call it too, so a
        record appended while the stage was flushing is not lost.

        Returns
        -------
        int
            Records flushed.
        """
        with self._pending_lock:
            pending, self._pending = self._pending, []
        for record, done in pending:
            if "stream" in done:  # a streamed answer (`functions.runtime.admission.stream`)
                self.telemetry.stream_done(record, **done)
            else:
                self.telemetry.request_done(record, **done)
        return len(pending)

    # -- the paths ------------------------------------------------------------------------
    def _unrouted(self, kind: events.EventKind, event: Any, context: Any,
                  record: InvocationRecord, request: events.HttpRequest) -> dict[str, Any]:
        """A route the agent did not declare: the app answers it (waiting for the web stack
        for the rest of the invocation; no SLA logic for a route without an SLA)."""
        queue_ms = events.queue_ms(request, self._wall_ms())
        if queue_ms:
            record.timings_ms["queue"] = queue_ms
        try:
            return self.local.run(event, context, record, needs_model=False,
                                  wait_ms=self.remaining_ms(context), request=request)
        except AppFailed as exc:
            return self._app_failed(kind, event, record, None, exc)
        except Exception as exc:  # noqa: BLE001 - LocalFailed / LocalUnavailable: the web stack
            error = WarmstartError(
                "the web stack is not available in this execution environment; retry",
                status=503, code="web_unavailable", tag=getattr(exc, "tag", FailureTag.TOOL_UNAVAILABLE),
                retry_after_s=1,
            )
            return self._fail(kind, event, record, error, "shed")

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
        """Serve one declared route along the path admission picks; returns (response, SLA
        deadline on the monotonic clock)."""
        adm = self.admission
        clock_now = self._clock_ms()
        wall_now = self._wall_ms()
        invocation_wall_ms = wall_now - (clock_now - started_ms)
        arrival_ms = arrival_ms_of(request, invocation_wall_ms)
        queue_ms = invocation_wall_ms - arrival_ms
        if queue_ms > 0:
            record.timings_ms["queue"] = queue_ms
        sla_ms, tracker, hooks = adm.route_state(route, self.config.sla_ms)
        deadline_ms = record.deadline_ms = started_ms + (arrival_ms + sla_ms - invocation_wall_ms)

        payload: dict[str, Any] | None = None
        downstream_ms = 0.0
        if hooks.validate is not None or "{" in route.path:  # no call for a route without them
            payload, downstream_ms, refused = self._validate(kind, event, request, record, route,
                                                             hooks)
            if refused is not None:
                return refused, deadline_ms
        level = adm.level()
        local = self.local

        # warm path: everything loaded and rows 1-5 of the decision table say LOCAL
        if not self._loaded and local.ready(True):
            self._loaded = True  # stages never unload
        if (
            (self._loaded or local.ready(route.needs_model))
            and ready_local_fits(
                route.tier, route.degradable, level.rank,
                sla_ms - (wall_now - arrival_ms if wall_now > arrival_ms else 0.0),
                tracker.p95_ms, adm.policy, downstream_ms,
            )
        ):
            degradable = route.degradable and hooks.degraded is not None
            # the baseline ignores the SLA budget: it never cuts the app at it
            cuts = degradable and not adm.policy.baseline
            try:
                response = local.run_now(event, context, record, request,
                                         self._cut_s(deadline_ms) if cuts else None)
            except AppFailed as exc:
                degraded = self._degrade_failure(kind, event, record, route, hooks.degraded,
                                                 payload, level, exc) if degradable else None
                return degraded or self._app_failed(kind, event, record, route, exc), deadline_ms
            # the tracker measures the answer without the downstream work (admission adds it)
            tracker.observe(max(0.0, self._clock_ms() - clock_now - record.timings_ms.get("tool", 0.0)))
            return response, deadline_ms

        degrade = hooks.degraded  # a refused payload returned above: the payload is valid or absent
        info = RequestInfo(route.path, route.tier, sla_ms, arrival_ms,
                           degradable=route.degradable and degrade is not None,
                           downstream_ms=downstream_ms)
        remaining_ms = self.remaining_ms(context)

        def run_local(wait_ms: float) -> dict[str, Any]:
            t0 = self._clock_ms()
            try:
                response = local.run(event, context, record, needs_model=route.needs_model,
                                     wait_ms=min(wait_ms, remaining_ms - (t0 - clock_now)),
                                     request=request,
                                     cancel_after_s=(cut if info.degradable
                                                     and not adm.policy.baseline else None))
            except AppFailed as exc:
                self._log_app_failure(route, exc)
                if info.degradable:
                    raise  # serve falls back: the degraded answer (or overflow, or shed)
                return self._app_failed(kind, event, record, route, exc, logged=True)
            tracker.observe(max(0.0, self._clock_ms() - t0 - record.timings_ms.get("tool", 0.0)
                                - record.timings_ms.get("model", 0.0) - record.timings_ms.get("init", 0.0)))
            return response

        def cut() -> float:
            return self._cut_s(deadline_ms)

        def run_degraded() -> dict[str, Any]:
            assert degrade is not None
            return self._degraded_answer(kind, event, route, degrade, payload, level)

        def on_overflow(result: OverflowResult) -> dict[str, Any]:
            return events.respond(kind, event, 200, result.body, {})

        # a model route overflows when it declared a payload (validate: what is sent) and a
        # check of the endpoint's answer (overflow_answer): never another model's answer as is
        overflow = (adm.overflow if route.needs_model and payload is not None
                    and hooks.overflow_answer is not None else None)
        overflow_payload = payload or {}
        if overflow is not None and hooks.overflow_request is not None:
            try:
                overflow_payload = dict(hooks.overflow_request(overflow_payload))
            except Exception as exc:  # noqa: BLE001 - the agent's hook failed: no overflow
                self._log_hook_failure(route, "overflow_request", exc)
                overflow = None
        outcome: Outcome = serve(
            info,
            env=lambda: adm.env_state(self.preload, self._needed(route), self._web, tracker),
            level=level,
            clock_ms=self._wall_ms,
            run_local=run_local,
            run_degraded=run_degraded if info.degradable else None,
            overflow=overflow,
            overflow_payload=overflow_payload,
            overflow_validate=hooks.overflow_answer,
            on_overflow=on_overflow,
            request_id=record.request_id or "",
            feature=route.feature,
            policy=adm.policy,
        )
        return self._outcome_answer(kind, event, record, route, outcome, deadline_ms), deadline_ms

    def _outcome_answer(self, kind: events.EventKind, event: Any, record: InvocationRecord,
                        route: RouteSpec, outcome: Outcome, deadline_ms: float, *,
                        finish_preload: bool = True) -> Any:
        """The answer of ``outcome`` (`functions.runtime.admission.flow.serve`'s), with the
        record's path and failure tag set; an overflowed or degraded cold answer lets the
        preload finish (``finish_preload``, `_finish_preload`)."""
        adm = self.admission
        if not (outcome.path is Path.LOCAL and record.path == "degraded"):  # app's own cheaper answer
            record.path = outcome.header_path
        overflow_ms = outcome.timings_ms.get("overflow")
        if overflow_ms is not None:
            record.timings_ms["overflow"] = overflow_ms
        if outcome.failures:
            record.passed_over = tuple(f"{f.path.header_value}:{f.tag}" for f in outcome.failures)
        tag = outcome.failure_tag
        if tag is not None and record.failure is None and outcome.path is not Path.OVERFLOW:
            # a full overflow answer is no failure of the request: why the paths before it were
            # passed over is logged as ``passed_over``; a degraded or shed answer keeps its tag
            record.failure = FailureTag(tag)
        if (finish_preload and outcome.path in (Path.OVERFLOW, Path.DEGRADE)
                and self._model is not None
                and not self.preload.ready(self._model)):
            self._finish_preload(record, deadline_ms - FINISH_PRELOAD_MARGIN_MS)
        if outcome.path is Path.SHED and any(f.path is Path.DEGRADE for f in outcome.failures):
            # the route's degraded hook raised: the agent's fault, not a capacity problem
            error = WarmstartError(f"the degraded answer of route {route.feature!r} failed; see "
                                   "the function's log", status=500, code="internal_error",
                                   tag=FailureTag.MODEL_ERROR)
            return self._fail(kind, event, record, error, "shed")
        if outcome.path is Path.SHED and adm.policy.baseline and outcome.failures:
            # the baseline has no SLA logic: say why the local path could not answer
            failed = outcome.failures[-1].tag == FailureTag.MODEL_ERROR.value
            error = WarmstartError(
                "the model failed to load in this execution environment; retry" if failed else
                "the model is still loading and the invocation's time ran out; retry shortly",
                status=503, code="model_failed" if failed else "not_ready",
                tag=FailureTag(outcome.failures[-1].tag), retry_after_s=1)
            return self._fail(kind, event, record, error, "shed")
        if outcome.path is Path.SHED:
            shed = outcome.response
            headers = {k.lower(): v for k, v in shed.headers.items() if k.lower() != "content-type"}
            return events.respond(kind, event, shed.status_code, shed.body, headers)
        return outcome.response

    def _validate(self, kind: events.EventKind, event: Any, request: events.HttpRequest,
                  record: InvocationRecord, route: RouteSpec, hooks: RouteHooks,
                  ) -> tuple[dict[str, Any] | None, float, dict[str, Any] | None]:
        """The route's path parameters and its payload hooks, before any path runs (bad input
        is a 4xx, never overflowed): ``(payload or None, downstream ms, None)``, or
        ``(None, 0, the refusal)`` (a 4xx, or a 500 when a hook broke)."""
        if "{" in route.path:  # a templated route: its parameters, for the hooks and the app
            record.path_params = self.routes.path_params(route, request.path)
        payload: dict[str, Any] | None = None
        downstream_ms = 0.0
        try:
            if hooks.validate is not None:
                payload = record.payload = read_payload(event, hooks.validate)
                if hooks.downstream_ms is not None:
                    value = hooks.downstream_ms(payload)
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise HookError(f"the downstream_ms hook must return a number of ms, got "
                                        f"{type(value).__name__}")
                    downstream_ms = max(0.0, float(value))
        except BadRequest as exc:
            return None, 0.0, self._fail(kind, event, record, exc, "local")
        except Exception as exc:  # noqa: BLE001 - the agent's hook failed: our fault, not the client's
            field = "downstream_ms" if payload is not None else "validate"
            return None, 0.0, self._hook_failed(kind, event, record, route, field, exc)
        return payload, downstream_ms, None

    def _degraded_answer(self, kind: events.EventKind, event: Any, route: RouteSpec,
                         degrade: Callable[[Any], Any], payload: dict[str, Any] | None,
                         level: Any) -> dict[str, Any]:
        """The route's cheaper answer (its ``degraded`` hook), marked degraded, in the source's
        format; its time is measured for admission.

        Raises
        ------
        DegradeUnavailable
            The hook raised (logged).
        """
        t0 = self._clock_ms()
        try:
            answer = mark_degraded(degrade(payload or {}), level=level)
        except Exception as exc:
            self._log_hook_failure(route, "degraded", exc)
            raise DegradeUnavailable(f"the degraded hook of route {route.feature!r} failed") from exc
        self.admission.degraded.observe(self._clock_ms() - t0)
        return events.respond(kind, event, 200, answer, {})

    def _needed(self, route: RouteSpec) -> str:
        return self._model if route.needs_model and self._model is not None else self._web

    def _finish_preload(self, record: InvocationRecord, until_ms: float) -> None:
        """Let the preload finish the model stage after an overflowed or degraded answer.

        Lambda freezes the environment once the invocation is complete, so the preload only
        progresses while this invocation lasts (`RuntimeConfig.finish_preload`):

        - ``after``, with the toolkit's internal extension active: queue a wait for the model
          stage to the post-response phase (bounded by the function timeout; then the
          requests this environment finished before Powertools loaded are flushed); the
          answer returns at once.
        - ``before`` (or ``after`` without an Extensions API): wait here until ``until_ms``
          (monotonic clock, ms: the SLA's end less a margin) at the latest; the wait is
          recorded in ``Server-Timing`` as ``preload``.
        - ``off``: nothing.
        """
        assert self._model is not None
        mode = self.config.finish_preload
        if not mode or mode == FinishPreload.OFF:
            return
        post = self.post_response
        if mode == FinishPreload.AFTER and post is not None and post.active and record.request_id:
            post.submit(record.request_id, self._preload_after_response)
            return
        wait_ms = until_ms - self._clock_ms()
        if wait_ms <= 0:
            return
        t0 = self._clock_ms()
        self.preload.wait(self._model, wait_ms / 1000.0)
        record.timings_ms["preload"] = self._clock_ms() - t0

    def _preload_after_response(self, until_wall_ms: float) -> None:
        """Post-response work: wait for the model stage until ``until_wall_ms`` (epoch ms),
        then flush telemetry of requests that finished before Powertools loaded."""
        assert self._model is not None
        left_s = (until_wall_ms - self._wall_ms()) / 1000.0
        if left_s > 0:
            self.preload.wait(self._model, left_s)
        if self._pending and (self._telemetry_stage is None or self.preload.done(self._telemetry_stage)):
            self.flush_pending()

    # -- failures inside the app ------------------------------------------------------------
    def _cut_s(self, deadline_ms: float) -> float:
        """How long a degradable route's app may run from now, s: its SLA's end less the
        degraded answer's p95 and :data:`CUT_MARGIN_MS` (at least 0)."""
        left_ms = deadline_ms - self._clock_ms() - self.admission.degraded.p95_ms - CUT_MARGIN_MS
        return max(0.0, left_ms) / 1000.0

    def _log_app_failure(self, route: RouteSpec | None, failed: AppFailed) -> None:
        """One line per failure, with its tag (Mangum logged the traceback as the app raised)."""
        import logging

        where = f"route {route.method} {route.path}" if route is not None else "an undeclared route"
        logging.getLogger("warmstart").error(
            "%s: the app failed (failure_tag=%s%s): %s", where, failed.tag.value,
            ", cut at its SLA budget" if failed.cut else "", safe_text(str(failed.error), 2000))

    def _degrade_failure(self, kind: events.EventKind, event: Any, record: InvocationRecord,
                         route: RouteSpec, degrade: Callable[[Any], Any] | None,
                         payload: dict[str, Any] | None, level: Any,
                         failed: AppFailed) -> dict[str, Any] | None:
        """The route's degraded answer after a failure inside the app (warm path), marked
        degraded and tagged with the failure; None when the hook itself raised."""
        self._log_app_failure(route, failed)
        assert degrade is not None
        t0 = self._clock_ms()
        try:
            answer = mark_degraded(degrade(payload or {}), level=level)
        except Exception as exc:  # noqa: BLE001 - then the JSON error contract
            self._log_hook_failure(route, "degraded", exc)
            return None
        self.admission.degraded.observe(self._clock_ms() - t0)
        record.path = "degraded"
        record.failure = failed.tag
        return events.respond(kind, event, 200, answer, {})

    def _app_failed(self, kind: events.EventKind, event: Any, record: InvocationRecord,
                    route: RouteSpec | None, failed: AppFailed, *,
                    logged: bool = False) -> dict[str, Any]:
        """A failure inside the app without a degraded answer: the app's own JSON error answer
        when it sent one (an exception handler), else the JSON error contract; tagged."""
        if not logged and (route is None or not route.degradable):
            self._log_app_failure(route, failed)
        record.path = "local"
        record.failure = failed.tag
        own = failed.response
        if own is not None and not failed.cut:
            headers = own.get("headers") or {}
            content_type = headers.get("content-type", "") if type(headers) is dict else ""
            if "json" in content_type.lower():
                return own
        what = route.feature if route is not None else record.route
        error = WarmstartError(
            f"the request failed inside the app ({what}: {failed.tag.value}); see the "
            "function's log for this request id",
            status=APP_FAILURE_STATUS.get(failed.tag, 500), code=failed.tag.value, tag=failed.tag)
        return self._fail(kind, event, record, error, "local")

    # -- helpers -------------------------------------------------------------------------
    def _log_hook_failure(self, route: RouteSpec, field: str, exc: BaseException) -> None:
        """Log an agent hook's exception once per request (the body never carries it)."""
        import logging

        logging.getLogger("warmstart").error("route %s %s: the %s hook raised %s: %s",
                                             route.method, route.path, field, type(exc).__name__, exc)

    def _too_large(self, kind: events.EventKind, event: Any, record: InvocationRecord) -> dict[str, Any]:
        """The answer does not fit Lambda's synchronous response: a 500 instead of Lambda's
        own function error (which API Gateway turns into a bare 502)."""
        import logging

        logging.getLogger("warmstart").error("route %s: the answer exceeds Lambda's %d-byte "
                                             "response limit; answered 500", record.route,
                                             events.MAX_RESPONSE_BYTES)
        error = WarmstartError("the answer is larger than a Lambda response may be; see the "
                               "function's log", status=500, code="internal_error",
                               tag=FailureTag.MODEL_ERROR)
        return self._fail(kind, event, record, error, record.path)

    def _hook_failed(self, kind: events.EventKind, event: Any, record: InvocationRecord,
                     route: RouteSpec, field: str, exc: BaseException) -> dict[str, Any]:
        self._log_hook_failure(route, field, exc)
        error = WarmstartError(f"the request could not be checked (route {route.feature!r}); "
                               "see the function's log", status=500, code="internal_error",
                               tag=FailureTag.MODEL_ERROR)
        return self._fail(kind, event, record, error, "local")

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
            return events.respond(events.EventKind.UNKNOWN, event, exc.status, body, {})
        cold_start = env.begin_invocation(counted=False)
        # Lambda freezes the environment between invocations: finish the preload now, within
        # this invocation's time, so the next request finds the environment warm.
        self.preload.wait_all(self.remaining_ms(context) / 1000.0)
        held_ms = self._clock_ms() - started_ms
        if held_ms < ping.hold_ms:
            self._sleep_s((ping.hold_ms - held_ms) / 1000.0)
            held_ms = self._clock_ms() - started_ms
        ready = self.local.ready(True)
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
            level=str(self.admission.level()),
        )
        return events.respond(kind, event, error.status, body, headers)

