"""`AgentHandler`: one execution environment of an agent, its init phase and its Lambda handler.

Built by `functions.runtime.agent.Agent.lambda_handler`: reads the run-time config, starts the
execution environment, declares the preload stages the agent needs, runs them now (pre-paid
init: provisioned concurrency, SnapStart, with the SnapStart hooks registered) or starts them on
a background thread (on-demand init), and serves invocations through the dispatcher the
``toolkit`` stage builds. Imports only the standard library at import time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from functions.runtime import lifecycle
from functions.runtime.agent_declaration import (
    AgentSpec,
    DeclarationError,
    build_app,
    call_with_runtime,
    check_routes,
    resolve,
    resolve_hooks,
    with_runtime,
)
from functions.runtime.agent_runtime import AgentRuntime
from functions.runtime.clock import monotonic_ms as _clock_ms
from functions.runtime.config import FinishPreload, InitType, RuntimeConfig
from functions.runtime.preload import Preloader, Stage, StageFailed

if TYPE_CHECKING:  # typing only: the init imports no more than it needs
    from functions.runtime.admission.state import Admission
    from functions.runtime.calibration import AdmissionCalibration
    from functions.runtime.contract.levels import Level
    from functions.runtime.degradation_level import DegradationLevelReader
    from functions.runtime.dispatch import Dispatcher
    from functions.runtime.lifespan import Lifespan
    from functions.runtime.overflow import OverflowClient
    from functions.runtime.overflow_capacity import OverflowCapacityReader
    from functions.runtime.post_response import PostResponse
    from functions.runtime.streaming import StreamedResponse

__all__ = ["AgentHandler"]

#: SSM client timeouts for the level reader, s: a GetParameter answers in tens of ms; 0.5 s
#: bounds a stalled read, which runs on the preload thread (first read) or the reader's daemon
#: refresh thread, never on a request's path (the reader keeps the last level on failure).
#: https://docs.aws.amazon.com/sdkref/latest/guide/feature-timeouts.html
SSM_TIMEOUT_S = 0.5
#: Budget of the overflow client's prewarm: the SLA less this, ms (headroom and the init).
PREWARM_HEADROOM_MS = 300.0
#: Longest the on-demand preload waits between stages for a cold request's overflow call, s.
#: A choice of ours, not measured: long enough for any call that answers within a 1 s SLA,
#: short enough that a slow or hung call cannot hold the local path's stages back for a whole
#: P0 SLA (``WARMSTART_SLA_MS``, default 2 s).
YIELD_TO_OVERFLOW_S = 1.0
#: How long a local process waits at exit for a running preload (onnxruntime aborts in C++
#: teardown when the interpreter exits mid-load; Lambda itself never exits the process), s.
ATEXIT_WAIT_S = 60.0



def _log_once(exc: BaseException, *, before: str = "", after: str = "") -> None:
    """Log a declaration or load failure with its traceback (stdlib logging: Powertools may not
    be loaded yet; Lambda sends stderr to CloudWatch Logs). A `DeclarationError`'s message
    already names the agent and the field, so it leads."""
    import logging

    what = str(exc) if isinstance(exc, DeclarationError) else f"{type(exc).__name__}: {exc}"
    text = f"{before}: {what}" if before else what
    logging.getLogger("warmstart").error("%s%s", text, f" {after}" if after else "",
                                         exc_info=(type(exc), exc, exc.__traceback__))


class AgentHandler:
    """One execution environment of an agent: its init phase, and the Lambda handler.

    Built by `Agent.lambda_handler`; call it as ``handler(event, context)``.

    Attributes
    ----------
    agent : AgentSpec
    config : RuntimeConfig
    environment : ExecutionEnvironment
    preload : Preloader
    runtime : AgentRuntime
    overflow : OverflowClient | None
        The overflow endpoint's client once the toolkit stage built it.
    admission : Admission | None
    dispatcher : Dispatcher | None
        Set by the toolkit stage.
    init_resources : dict[str, ResourceState]
        Resource states at the end of the init phase (what the init paid for).
    """

    def __init__(self, agent: AgentSpec, settings: dict[str, str], init_started_ms: float) -> None:
        self.agent = agent
        self.settings = settings
        self.config = config = RuntimeConfig.from_env(settings)
        self.environment = lifecycle.start_environment(config.init_type, init_started_ms)
        self.runtime = AgentRuntime(agent, config, settings, self.environment, self)
        self.dispatcher: Dispatcher | None = None
        self.admission: Admission | None = None
        self.overflow: OverflowClient | None = None
        self.level_reader: DegradationLevelReader | None = None
        self.capacity_reader: OverflowCapacityReader | None = None
        self._static_level: Level | None = None
        self._misconfigured: BaseException | None = None
        self._model_loader: Callable[..., Any] | None = None
        self.lifespan: Lifespan | None = None  # the app's ASGI lifespan, once the web stage ran
        self._adapter: Any = None
        # the fleet's calibration (issue 20 item 3): this environment's alias (from the first
        # invocation's ARN; "" when it has none), the stage durations waiting for it, and
        # whether the published fleet numbers were applied
        self._alias: str | None = None
        self._fleet_pending = True
        self._fleet_report: dict[str, float] | None = None
        self._fleet_applied = False
        import threading

        self._fleet_lock = threading.Lock()
        self.preload = Preloader(self._stages(), self.environment, _clock_ms,
                                 between_stages=self._yield_to_overflow)
        self.post_response = self._register_post_response()
        if config.agent_name is not None and config.agent_name != agent.name:
            import logging

            logging.getLogger("warmstart").warning(
                "agent %r is deployed as %r (WARMSTART_AGENT_NAME, the cdk.json agents key): "
                "logs and metrics use the deployed name", agent.name, config.agent_name)

        if config.init_type.prepaid:
            self.preload.run()
            if self.post_response is None and self._needs_post_response_after_init():
                self.post_response = self._register_post_response(background=True)
            for stage in ("toolkit", "web"):  # a declaration error fails a pre-paid init
                if self.preload.failed(stage):
                    try:
                        self.preload.result(stage)
                    except StageFailed as failed:  # the DeclarationError itself, not the wrapper
                        cause = failed.__cause__
                        if cause is None:
                            raise
                        raise cause  # keeps its own __cause__ (e.g. the app factory's exception)
            if config.init_type is InitType.SNAP_START:
                self._register_snapstart_hooks()
        self.init_resources = dict(self.environment.resources)
        self.environment.finish_init(_clock_ms())
        self._register_shutdown()
        if not config.init_type.prepaid:
            import atexit

            atexit.register(self.preload.wait_all, ATEXIT_WAIT_S)  # runs before shutdown (LIFO)
            self.preload.start()  # last: the init is done, the preload overlaps the first request

    # -- the handler ----------------------------------------------------------------------
    def __call__(self, event: Any, context: Any) -> dict[str, Any] | StreamedResponse:
        """The Lambda handler.

        Parameters
        ----------
        event : Any
            A warm ping ``{"warmstart": {"ping": true, ...}}``, or an API Gateway HTTP API
            (payload 2.0), function URL, REST API (payload 1.0) or ALB event.
        context : Any
            The Lambda context (``aws_request_id``, ``get_remaining_time_in_millis()``); None
            in local calls.

        Returns
        -------
        dict[str, Any] | StreamedResponse
            A pong for a warm ping; otherwise a response in the event source's format (never
            raises: a failure of the toolkit itself is a generic 500 tagged ``model_error``);
            for a streaming route whose caller streams, a
            `functions.runtime.streaming.StreamedResponse` (the runtime client sends it; the
            post-response phase starts when the stream ends, its ``on_finish``).
        """
        # the invocation's start: read here only while work comes before the dispatcher (the
        # first invocations learn the alias; a cold request waits for the toolkit stage); a
        # warm one starts when the dispatcher does (its own first clock read)
        started_ms: float | None = None
        if self._fleet_pending or self.dispatcher is None:
            started_ms = _clock_ms()
        if self._fleet_pending:  # until the alias is known (the first invocations only)
            self._learn_fleet(context)
        post = self.post_response
        if post is None:
            return self._handle(event, context, started_ms)
        request_id = getattr(context, "aws_request_id", None)
        response: dict[str, Any] | StreamedResponse | None = None
        try:
            response = self._handle(event, context, started_ms)
            return response
        finally:  # the extension may start this invocation's post-response work now
            if type(response) is dict or not self._returned_at_end(response, post, request_id):
                post.handler_returned(request_id)

    @staticmethod
    def _returned_at_end(response: Any, post: PostResponse, request_id: str | None) -> bool:
        """A streamed answer: the post-response phase starts when the stream ended (after
        the dispatcher's own ``on_finish``), not when the handler returns. False otherwise."""
        if response is None or not hasattr(response, "on_finish"):
            return False
        recorded = response.on_finish

        def on_finish(outcome: Any) -> None:
            try:
                if recorded is not None:
                    recorded(outcome)
            finally:
                post.handler_returned(request_id)

        response.on_finish = on_finish
        return True

    def _handle(self, event: Any, context: Any,
                started_ms: float | None) -> dict[str, Any] | StreamedResponse:
        # one frame between the handler and the dispatcher (the warm path's calls are counted)
        try:
            dispatcher = self.dispatcher
            if self._misconfigured is not None:  # the web stage refused the declaration
                return self._misconfigured_response(event, context)
            if dispatcher is None:
                self.preload.wait("toolkit", None)
                dispatcher = self.dispatcher
                if dispatcher is None:
                    return self._misconfigured_response(event, context)
            response = dispatcher.handle(event, context, started_ms)
            if self._misconfigured is not None:  # the web stage failed while this request waited
                if type(response) is not dict:  # a stream: its app is abandoned
                    response.close()
                return self._misconfigured_response(event, context)
            return response
        except Exception as exc:  # noqa: BLE001 - never raise to the runtime: a generic 500
            from functions.runtime.dispatch import internal_error_response

            return internal_error_response(event, context, exc)

    def _register_post_response(self, *, background: bool = False) -> PostResponse | None:
        """Register the toolkit's internal extension (init phase).

        Only where it may have work, with ``WARMSTART_FINISH_PRELOAD=after`` (the default) and
        a Runtime API (``AWS_LAMBDA_RUNTIME_API``): every on-demand environment (the preload of
        a model agent with admission on; the app's background tasks, which cannot be known
        before the app is built); a provisioned-concurrency environment whose app takes
        FastAPI's ``BackgroundTasks`` (``background``: the app was built in the init). Never
        under SnapStart (the extension's thread and its ``event/next`` connection do not
        survive a restore). Where none registers, the app's background tasks finish before
        the handler returns. A refused registration is logged (``extension_refused``) and the
        preload (and the background tasks) finish before the response instead.
        """
        config = self.config
        if config.finish_preload != FinishPreload.AFTER or not config.runtime_api:
            return None
        if config.init_type.prepaid and not background:
            return None
        from functions.runtime.post_response import PostResponse, PostResponseError

        def on_error(tag: str, message: str) -> None:
            import logging  # not on the init path: logging costs ~12 ms to import

            logging.getLogger("warmstart").warning("agent %r: %s (failure_tag=%s)",
                                                   self.agent.name, message, tag)

        post = PostResponse(config.runtime_api, on_error=on_error)
        try:
            post.register()
        except PostResponseError as exc:
            import logging

            logging.getLogger("warmstart").warning(
                "agent %r: the post-response extension could not register (%s); the preload "
                "finishes before the response (failure_tag=extension_refused)",
                self.agent.name, exc)
            return None
        return post

    def _needs_post_response_after_init(self) -> bool:
        """A provisioned-concurrency environment whose app (built in the init) takes FastAPI's
        ``BackgroundTasks``: its extension registers now, still in the init phase."""
        if self.config.init_type is not InitType.PROVISIONED_CONCURRENCY or self._adapter is None:
            return False
        from functions.runtime.asgi import uses_background_tasks

        return uses_background_tasks(self._adapter.app)

    def _background_after_response(self, adapter: Any, context: Any) -> bool:
        """The adapter's ``after_response``: the app's background tasks go to this invocation's
        post-response phase when the extension runs (True), else they finish before the
        handler returns (False)."""
        post = self.post_response
        request_id = getattr(context, "aws_request_id", None)
        if post is None or not post.active or not isinstance(request_id, str):
            return False
        post.submit(request_id, adapter.finish_background, first=True)
        return True

    def _background_failed(self, error: BaseException, scope: Any) -> None:
        """The adapter's ``on_background_failure``: logged with its traceback and counted
        (`functions.runtime.telemetry.Telemetry.background_failed`), tagged by its cause."""
        from functions.runtime.asgi import describe_scope
        from functions.runtime.local_path import failure_tag

        request_id, route = describe_scope(scope)
        dispatcher = self.dispatcher
        if dispatcher is None:
            raise RuntimeError("no telemetry yet")  # the adapter logs it itself
        dispatcher.telemetry.background_failed(failure_tag(error), error, request_id=request_id,
                                               route=route)

    def shutdown(self) -> None:
        """End the app's lifespan (its shutdown, bounded by ``Agent.startup_timeout_s``);
        idempotent, never raises (a failure is logged). Runs on the runtime's ``SHUTDOWN``
        (the toolkit's extension, or ``SIGTERM``, which Lambda sends the runtime when an
        extension is registered) and at process end. Background tasks still pending finish
        first (within the same bound): they may use what the shutdown closes."""
        lifespan = self.lifespan
        if lifespan is None or not lifespan.running:
            return
        adapter = self._adapter
        if adapter is not None and adapter.background_pending:
            adapter.finish_background(time.time() * 1000.0 + self.agent.startup_timeout_s * 1000.0)
        try:
            lifespan.shutdown()
        except Exception as exc:  # noqa: BLE001 - the environment ends anyway: logged
            _log_once(exc, before=f"agent {self.agent.name!r}: the app's lifespan shutdown failed")

    def _register_shutdown(self) -> None:
        """Run `shutdown` when the environment ends: at process end (``atexit``), on a
        ``SHUTDOWN`` event of the toolkit's extension, and on ``SIGTERM`` where a Runtime API
        is set and this is the main thread (the previous handler runs after it)."""
        import atexit

        atexit.register(self.shutdown)
        post = self.post_response
        if post is not None:
            post.on_shutdown(lambda _until_ms: self.shutdown())
        if not self.config.runtime_api:
            return
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: Any) -> None:
            self.shutdown()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:  # end as SIGTERM would have
                import os

                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

        try:
            signal.signal(signal.SIGTERM, on_sigterm)
        except (ValueError, OSError):  # not the main interpreter: atexit only
            pass

    def current_level(self) -> Level:
        """The degradation level; never blocks: the static level until the SSM reader's first
        read (the ``level`` stage) is done, then the reader's cached value (an expired one is
        refreshed on a daemon thread; this request gets the last level)."""
        reader = self.level_reader
        if reader is not None and self.preload.done("level"):
            return reader.level()
        if self._static_level is None:
            from functions.runtime.contract.levels import parse_level

            self._static_level = parse_level(str(self.config.degradation_level))
        return self._static_level

    # -- stages ---------------------------------------------------------------------------
    def _overflows(self) -> bool:
        """Some route can overflow: a model route with a payload and an answer check, or a
        streaming route with a payload and an ``overflow_event`` hook."""
        return any(r.validate is not None and (
            (r.needs_model and r.overflow_answer is not None)
            or (r.stream and r.overflow_event is not None)) for r in self.agent.routes)

    def _stages(self) -> list[Stage]:
        config = self.config
        stages = [Stage("toolkit", self._load_toolkit)]
        overflow = config.admission and config.overflow_endpoint_name is not None and self._overflows()
        if overflow:  # first after the toolkit: off a cold request's path
            stages.append(Stage("overflow", self._prewarm_overflow))
        stages += [Stage("web", self._load_web), Stage("telemetry", self._load_telemetry)]
        if self.agent.model is not None:
            stages.append(Stage("model", self._load_model))
        if config.admission and config.degradation_parameter:
            stages.append(Stage("level", self._read_level))
        if not config.init_type.prepaid:  # the fleet's calibration: report the stages at the end
            last = stages[-1]
            stages[-1] = Stage(last.name, self._reporting(last.name, last.load))
        return stages

    # -- the fleet's calibration (issue 20 item 3) ---------------------------------------------
    def _reporting(self, name: str, load: Callable[[], Any]) -> Callable[[], Any]:
        """``load``, then this preload's stage durations as EMF ``StageDuration``."""
        def run() -> Any:
            started = _clock_ms()
            result = load()  # a stage that raises is not a duration to learn from
            durations = {n: f - s for n, s, f in self.preload.progress()
                         if s is not None and f is not None and self.preload.ready(n)}
            durations[name] = _clock_ms() - started
            self._report_stages(durations)
            return result
        return run

    def _report_stages(self, durations: dict[str, float]) -> None:
        dispatcher = self.dispatcher
        if dispatcher is None or not dispatcher.telemetry.loaded:
            return  # no telemetry: nothing to emit with
        telemetry = dispatcher.telemetry
        with self._fleet_lock:
            if self._alias is None:  # no invocation yet: the first one emits them
                self._fleet_report = durations
                return
            named = telemetry.set_fleet(self.config.function_name, self._alias or None,
                                        self.config.memory_mb)
        if named:
            telemetry.stage_durations(durations)

    def _learn_fleet(self, context: Any) -> None:
        """Learn the alias from the invocation's ARN (``...:function:NAME:ALIAS``) and name
        the fleet's metrics with it; emits stage durations that waited for it."""
        with self._fleet_lock:
            if self._alias is None:
                arn = getattr(context, "invoked_function_arn", None)
                parts = arn.split(":") if isinstance(arn, str) else []
                self._alias = parts[7] if len(parts) == 8 and parts[7] else ""
            dispatcher = self.dispatcher
            if dispatcher is None:
                return  # the toolkit stage has not run: the next invocation tries again
            telemetry = dispatcher.telemetry
            named = telemetry.set_fleet(self.config.function_name, self._alias or None,
                                        self.config.memory_mb)
            report, self._fleet_report = self._fleet_report, None
            self._fleet_pending = False
        if named and report:
            telemetry.stage_durations(report)

    def _apply_fleet_calibration(self) -> None:
        """Start admission from the fleet's numbers the warmer published with the level
        (`functions.runtime.calibration.load_fleet`: malformed, stale or of another memory
        size is ignored with one log line, the seeds stay). Once per environment, after the
        level's first read."""
        reader, admission = self.level_reader, self.admission
        if reader is None or admission is None or self._fleet_applied or reader.calibration is None:
            return
        self._fleet_applied = True
        import logging

        from functions.runtime import calibration

        cal, line = calibration.load_fleet(reader.calibration, memory_mb=self.config.memory_mb)
        log = logging.getLogger("warmstart")
        if cal is None:
            log.warning("agent %r: %s (failure_tag=%s)", self.agent.name, line,
                        line.split(":", 1)[0])
            return
        admission.stage_p95_ms.update(cal.stage_p95_ms)
        admission.route_p95_ms.update(cal.route_p95_ms)  # routes this environment has not seen
        if cal.degrade_p95_ms is not None and admission.degraded.count == 0:
            from functions.runtime.admission import LatencyTracker

            admission.degraded = LatencyTracker(cal.degrade_p95_ms)
        overflow = self.overflow
        if cal.overflow_p95_ms is not None and overflow is not None and overflow.latency.count == 0:
            from functions.runtime.admission import LatencyTracker

            overflow.latency = LatencyTracker(cal.overflow_p95_ms)
        log.info("agent %r: admission takes the fleet's numbers: %s", self.agent.name,
                 cal.describe())

    def _load_toolkit(self) -> Dispatcher:
        from functions.runtime.admission import BASELINE_POLICY, HANDLER_POLICY
        from functions.runtime.admission.state import Admission, RouteHooks
        from functions.runtime.dispatch import Dispatcher
        from functions.runtime.overflow import checked
        from functions.runtime.telemetry import Telemetry

        config = self.config
        if self.agent.model is not None:  # a typo in the loader's name is a declaration error
            self._model_loader = resolve(self.agent.model, agent=self.agent.name, where="agent",
                                         field="model")
        hooks = {}
        for route in self.agent.routes:
            resolved = {field: (with_runtime(hook, self.runtime) if hook is not None else None)
                        for field, hook in resolve_hooks(self.agent.name, route).items()}
            answer = resolved["overflow_answer"]
            resolved["overflow_answer"] = checked(answer) if answer is not None else None
            hooks[route.name] = RouteHooks(**resolved)
        stage_p95_ms, overflow_p95_ms, cal = self._calibrated_seeds()
        if config.admission and config.overflow_endpoint_name and self._overflows():
            from functions.runtime.admission import LatencyTracker
            from functions.runtime.overflow import DEFAULT_CLIENT_INIT_P95_MS, OverflowClient

            self.overflow = OverflowClient(
                config.overflow_endpoint_name, endpoint_url=config.overflow_endpoint_url,
                region_name=config.region,
                inference_component=config.overflow_inference_component,
                latency=LatencyTracker(overflow_p95_ms) if overflow_p95_ms is not None else None,
                client_init_p95_ms=stage_p95_ms.get("overflow", DEFAULT_CLIENT_INIT_P95_MS))
            if cal is not None:  # each streaming route's measured first event
                for name, ms in cal.stream_overflow_p95_ms.items():
                    self.overflow.stream_latency[name] = LatencyTracker(ms)
            if config.overflow_capacity_parameter:  # the warmer's published capacity
                from functions.runtime.overflow_capacity import OverflowCapacityReader

                self.capacity_reader = OverflowCapacityReader(
                    config.overflow_capacity_parameter, client_factory=self._ssm_client)
                self.overflow.capacity_available = self.capacity_reader.available
        if config.admission and config.degradation_parameter:
            from functions.runtime.degradation_level import DegradationLevelReader

            self.level_reader = DegradationLevelReader(
                config.degradation_parameter, default_level=str(config.degradation_level),
                client_factory=self._ssm_client)
        self.admission = Admission(
            level=self.current_level,
            overflow=self.overflow,
            hooks=hooks,
            stage_p95_ms=stage_p95_ms,
            policy=HANDLER_POLICY if config.admission else BASELINE_POLICY,
            route_p95_ms=cal.route_p95_ms if cal is not None else None,
        )
        if cal is not None and cal.degrade_p95_ms is not None:
            from functions.runtime.admission import LatencyTracker

            self.admission.degraded = LatencyTracker(cal.degrade_p95_ms)
        self.dispatcher = Dispatcher(
            config=config,
            environment=self.environment,
            preload=self.preload,
            routes=self.agent.registry,
            telemetry=Telemetry(config),  # Powertools is imported by the "telemetry" stage
            admission=self.admission,
            model_stage="model" if self.agent.model is not None else None,
            telemetry_stage="telemetry",
            post_response=self.post_response,
        )
        return self.dispatcher

    def _calibrated_seeds(self) -> tuple[dict[str, float], float | None,
                                         AdmissionCalibration | None]:
        """Stage p95 seeds and the overflow call's p95 seed, ms, and the calibration used (for
        its per-route seeds; None: the seeds only): the deployed calibration
        (``WARMSTART_CALIBRATION``, `functions.runtime.calibration`) over the agent's declared
        ``stage_p95_ms`` over the toolkit's defaults (measured beats declared). Logs, once per
        environment, which calibration is used or why none is."""
        import logging

        from functions.runtime import calibration

        config = self.config
        cal, line = calibration.load(config.calibration, agent=config.agent_name or self.agent.name,
                                     memory_mb=config.memory_mb)
        stages = dict(self.agent.stage_p95_ms)
        if cal is None:
            tag = line.split(":", 1)[0]
            logging.getLogger("warmstart").warning("agent %r: %s (failure_tag=%s)",
                                                   self.agent.name, line, tag)
            return stages, None, None
        logging.getLogger("warmstart").info("agent %r: %s", self.agent.name, line)
        stages.update(cal.stage_p95_ms)
        return stages, cal.overflow_p95_ms, cal

    def _yield_to_overflow(self, _next_stage: str = "") -> None:
        """Between on-demand preload stages: wait while a cold request's overflow call is in
        flight (at most :data:`YIELD_TO_OVERFLOW_S`), so the next stage's imports do not share
        the GIL with it."""
        overflow = self.overflow
        if overflow is not None:
            overflow.wait_idle(YIELD_TO_OVERFLOW_S)

    def _prewarm_overflow(self) -> OverflowClient | None:
        # the client first (awscrt, tens of ms): a cold request may overflow as soon as it is
        # made; the capacity's first read imports boto3 (hundreds of ms) and admission tries
        # overflow while that read is still running
        self._prewarm_overflow_client()
        if self.capacity_reader is not None:  # first read, off any request's path
            self._yield_to_overflow()  # a request waiting for the client calls first
            self.capacity_reader.refresh()
            if self.level_reader is not None:
                # boto3 is loaded now: the level's first read here brings the fleet's numbers
                # before the web and model stages, whose estimates they replace
                self.level_reader.refresh()
                self._apply_fleet_calibration()
        return self.overflow

    def _prewarm_overflow_client(self) -> None:
        if self.overflow is not None:
            # the client a cold request's budget buys (the SLA less headroom and the init so far)
            self.overflow.prewarm(max(self.config.sla_ms - PREWARM_HEADROOM_MS, 50.0))

    def _load_web(self) -> Any:
        """Build the app, check its routes, make the adapter on the environment's event loop
        and run the app's lifespan startup (`functions.runtime.lifespan`)."""
        from functions.runtime.asgi import make_adapter
        from functions.runtime.lifespan import AppLoop, Lifespan

        try:
            app = build_app(self.agent, self.runtime)
            check_routes(self.agent, app)
            options: dict[str, Any] = {}
            if self.agent.text_mime_types is not None:
                options["text_mime_types"] = self.agent.text_mime_types
            loop = AppLoop()
            adapter = make_adapter(app, base_path=self.config.base_path,
                                   strip_prefixes=self.config.strip_prefixes, loop=loop,
                                   runtime=self.runtime, **options)
            adapter.after_response = lambda context: self._background_after_response(adapter, context)
            adapter.on_background_failure = self._background_failed
            lifespan = Lifespan(app, loop, timeout_s=self.agent.startup_timeout_s)
            lifespan.startup()  # raises LifespanFailed / LifespanTimeout: misconfigured
            self.lifespan, self._adapter = lifespan, adapter
            adapter.lifespan_state = lifespan.state if lifespan.supported else None
            return adapter
        except Exception as exc:
            if not self.config.init_type.prepaid:  # a pre-paid init fails with it instead
                self._misconfigured = exc  # every request of this environment gets a 500
                _log_once(exc, before="" if isinstance(exc, DeclarationError) else
                          f"agent {self.agent.name!r}: the web stage failed (the app, its routes "
                          "or its lifespan startup)",
                          after="(every request of this execution environment gets a 500 "
                                "agent_misconfigured)")
            raise

    def _load_telemetry(self) -> object:
        assert self.dispatcher is not None
        telemetry = self.dispatcher.telemetry.load()
        self.dispatcher.flush_pending()  # requests answered before Powertools was loaded
        return telemetry

    def _load_model(self) -> Any:
        loader = self._model_loader
        if loader is None:  # the toolkit stage failed: it logged why
            raise RuntimeError(f"agent {self.agent.name!r}: the model loader was not resolved")
        try:
            return call_with_runtime(loader, self.runtime)
        except Exception as exc:
            _log_once(exc, before=f"agent {self.agent.name!r}: the model loader {self.agent.model!r} "
                                  "failed", after="(model routes overflow, degrade or shed; "
                                                  "runtime.model_state() is 'failed')")
            raise

    def _read_level(self) -> Level:
        # the first read, synchronous on the preload thread (off any request's path)
        reader = self.level_reader
        if reader is None:
            return self.current_level()
        level = reader.refresh() if not reader.read_once else reader.value()
        self._apply_fleet_calibration()
        return level

    def _ssm_client(self) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(connect_timeout=SSM_TIMEOUT_S, read_timeout=SSM_TIMEOUT_S,
                        retries={"total_max_attempts": 1, "mode": "standard"})
        return boto3.client("ssm", region_name=self.config.region, config=config)

    def _register_snapstart_hooks(self) -> None:
        from functions.runtime import snapstart

        # no connection survives a snapshot: the overflow and SSM clients are rebuilt after a
        # restore, and the degradation level cached at snapshot time is re-read
        closers: list[Callable[[], object]] = []
        restorers: list[Callable[[], object]] = []
        if self.overflow is not None:  # closed for the snapshot, made again at the restore
            closers.append(self.overflow.close)
            restorers.append(self._prewarm_overflow_client)
        for reader in (self.level_reader, self.capacity_reader):
            if reader is not None:
                closers.append(reader.close)
                restorers.append(reader.expire)
        if self.agent.lifespan_on_restore == "restart" and self.lifespan is not None:
            # what the app's startup opened does not survive a snapshot either: the agent's
            # own hooks see the app running on both sides
            snapstart.register_hooks(
                self.environment, _clock_ms,
                before_snapshot=[*closers, *self.agent.before_snapshot, self.shutdown],
                after_restore=[*restorers, self._restart_lifespan, *self.agent.after_restore])
            return
        snapstart.register_hooks(self.environment, _clock_ms,
                                 before_snapshot=[*closers, *self.agent.before_snapshot],
                                 after_restore=[*restorers, *self.agent.after_restore])

    def _restart_lifespan(self) -> None:
        """After a SnapStart restore: the app's lifespan startup again, on a fresh event loop
        (the snapshot's loop, selector and sockets are not this environment's). A startup
        that fails makes this environment misconfigured (``500 agent_misconfigured``, logged
        with its traceback); the restore itself goes on."""
        lifespan, adapter = self.lifespan, self._adapter
        if lifespan is None or adapter is None:
            return
        try:
            self.shutdown()  # a no-op after the snapshot's; a second restore in one process
            lifespan.loop.renew()
            lifespan.startup()
            adapter.lifespan_state = lifespan.state if lifespan.supported else None
        except Exception as exc:  # noqa: BLE001 - answered as 500 agent_misconfigured
            self._misconfigured = exc
            _log_once(exc, before=f"agent {self.agent.name!r}: the app's lifespan startup failed "
                                  "after a SnapStart restore",
                      after="(every request of this execution environment gets a 500 "
                            "agent_misconfigured)")

    def _misconfigured_response(self, event: Any, context: Any) -> dict[str, Any]:
        """The declaration failed to load (a hook cannot be resolved, the app factory failed,
        the routes do not match the app): a 500 in the source's format, tagged
        ``tool_unavailable``; the cause is logged once per environment (never in the body)."""
        from functions.runtime import events
        from functions.runtime.errors import error_body

        if self._misconfigured is None and self.preload.failed("toolkit"):
            try:
                self.preload.result("toolkit")
            except Exception as exc:  # noqa: BLE001 - logged, then answered as a 500
                self._misconfigured = exc.__cause__ or exc
                _log_once(self._misconfigured, before=f"agent {self.agent.name!r} is misconfigured")
        kind = events.classify(event)
        body = error_body("agent_misconfigured",
                          f"agent {self.agent.name!r} cannot serve requests: its declaration or "
                          "its app's startup failed; see the function's log", request_id=getattr(context, "aws_request_id", None),
                          level=str(self.config.degradation_level))
        return events.respond(kind if kind.is_http else events.EventKind.UNKNOWN, event, 500,
                                     body, {"x-warmstart-path": "shed"})
