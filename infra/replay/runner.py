"""One replay run, end to end: start the local stack in a configuration, send the slice, measure.

Configurations
--------------
``off``  on-demand only: no provisioned concurrency, no SnapStart, no warmer, no overflow
         endpoint, static degradation level L0, and ``WARMSTART_ADMISSION=off`` (the handler's
         plain on-demand path, once the runtime honours it).
``on``   warmstart: the warmer on its schedule (every minute of the stack clock) sets
         forecast-driven provisioned concurrency on the alias through the Lambda API; the
         function overflows to the local GPU endpoint; the warmer publishes the degradation
         level to SSM (moto) and the function reads it. SnapStart is off because it cannot be
         combined with provisioned concurrency (AWS Lambda). With ``ReplayOptions.strategy``
         ``snapstart`` (what ``warmers.strategy.recommend_strategy`` advises where on-demand
         cold starts break the SLA; :mod:`infra.replay.strategy`) the function runs with
         SnapStart instead (every cold start a restore of the emulator's snapshot) and the
         warmer plans no provisioned concurrency, only the GPU endpoint and the level.

Both run the function read from the synthesized template (handler, memory, timeout, env).

Timeline of a run: stack up; (``on``) the trace minutes before the slice are written to
CloudWatch as the metric history production would have, the warmer runs at the next minute and
its provisioned concurrency is allocated (as it would be after a warmer that had been running);
the slice starts at the next minute boundary of the stack clock and lasts ``minutes`` trace
minutes, whatever the answer times; then everything is stopped.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from functions.runtime.contract import environment as names
from infra.local.services import (
    TOOL_URL_SUFFIX,
    GpuEndpointService,
    LLMStubService,
    ServiceStartError,
    ToolStubService,
    gpu_endpoint_service,
    overflow_target,
    wants_llm_stub,
)
from infra.local.spec import FunctionSpec, GatewayRoute, LocalApp
from infra.replay.client import ClientRecord, RequestShape, send_requests
from infra.replay.observe import (
    InvocationObservation,
    InvocationRecorder,
    StateSample,
    StateSampler,
)
from infra.replay.pick import LEAD_IN_MIN
from infra.replay.services import (
    PlanRecord,
    ReplayWarmer,
    ServiceUnavailable,
    replay_warmer_document,
    seed_history,
)
from infra.replay.summary import EndpointUsage, Prices, RunSummary, endpoint_usage, summarize
from infra.replay.workload import ReplayWorkload

if TYPE_CHECKING:
    from infra.local.endpoint_capacity import PlannedEndpoint

Config = Literal["off", "on"]
CONFIGS: tuple[Config, ...] = ("off", "on")
#: Cold-start strategies the ``on`` run can deploy (``ReplayOptions.strategy``).
STRATEGIES = ("provisioned", "snapstart")
ALIAS = "live"
DEFAULT_DEGRADATION_PARAMETER = "/warmstart/replay/degradation-level"
#: The overflow endpoint's variables, removed from each replayed function's environment.
_OVERFLOW_KEYS = (names.ENV_OVERFLOW_ENDPOINT_NAME, names.ENV_OVERFLOW_ENDPOINT_URL,
                  names.ENV_OVERFLOW_INFERENCE_COMPONENT, names.ENV_OVERFLOW_CAPACITY_PARAMETER)


@dataclass(frozen=True)
class ReplayOptions:
    """How to run a replay.

    Parameters
    ----------
    time_scale : float
        Trace seconds per real second (> 0).
    scale_durations : bool
        Divide each request's simulated work by the time scale (keeps concurrency as in the
        trace); False sends the trace durations as they are (concurrency grows ``X``-fold).
    idle_timeout_s, pc_allocation_delay_s : float
        Stack clock seconds (the emulator's settings; AWS does not publish the idle timeout).
    pc_floor, pc_cap : int
        Provisioned concurrency bounds for the warmer (``on``).
    pc_objective : {"cost", "sla"}
        What the warmer buys provisioned concurrency for (``AliasPolicy.objective``).
    budget_usd_per_hour : float
        The warmer's hourly budget for provisioned concurrency.
    history_min : int
        Trace minutes before the slice written as metric history (``on``).
    sla_ms : float, optional
        SLA of the replayed route; default: the function's ``WARMSTART_SLA_MS`` (2000).
    request_timeout_s : float
        Client timeout per request, real seconds.
    pc_ready_timeout_s : float
        Real seconds to wait for the first provisioned concurrency before starting anyway.
    overflow : bool
        Start the local GPU endpoint and let the function overflow to it (``on``).
    log_dir : Path, optional
        Where the emulator's, GPU endpoint's and warmer's logs go (default: discarded).
    progress : file, optional
        Where the progress goes (default: stderr; ``infra.progress``).
    quiet : bool
        No progress at all (``--quiet``).
    endpoint : infra.local.endpoint_capacity.PlannedEndpoint, optional
        ``on``: the local GPU endpoint as an inference component whose copies the warmer plans
        (0 at the start, provisioned ``endpoint.provisioning_delay_s`` clock seconds after the
        warmer asks, billed per copy-second while asked for); None: always on with one
        instance, billed for the whole slice.
    strategy : {"provisioned", "snapstart"}
        ``on``'s cold-start strategy: on demand with the warmer's provisioned concurrency
        (default), or SnapStart (no provisioned concurrency; the warmer's alias strategy
        ``snapstart``).
    cold_start_ms : tuple of (float, float), optional
        ``(p50, p95)`` ms a cold start of that strategy adds (the calibrated init, or the
        restore under SnapStart): with the SLA, the warmer's endpoint planner counts only the
        cold starts that would answer late (``warmers.plan.endpoint.cold_start_late_fraction``);
        None: every new environment counted.
    """

    time_scale: float = 20.0
    scale_durations: bool = True
    idle_timeout_s: float = 600.0
    pc_allocation_delay_s: float = 60.0
    pc_floor: int = 0
    pc_cap: int = 10
    pc_objective: str = "cost"
    budget_usd_per_hour: float = 1.0
    history_min: int = 360
    sla_ms: float | None = None
    request_timeout_s: float = 60.0
    pc_ready_timeout_s: float = 120.0
    overflow: bool = True
    log_dir: Path | None = None
    progress: IO[str] | None = None
    shape: RequestShape | None = None
    quiet: bool = False
    endpoint: PlannedEndpoint | None = None
    strategy: str = "provisioned"
    cold_start_ms: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise ValueError(f"time scale must be a number > 0, got {self.time_scale}")
        if self.pc_floor < 0 or self.pc_cap < self.pc_floor:
            raise ValueError(f"need 0 <= pc floor <= pc cap, got {self.pc_floor}, {self.pc_cap}")
        if self.pc_objective not in ("cost", "sla"):
            raise ValueError(f"pc objective must be 'cost' or 'sla', got {self.pc_objective!r}")


@dataclass
class RunResult:
    """Everything one run measured (the report plots it)."""

    config: Config
    workload: ReplayWorkload
    options: ReplayOptions
    function: FunctionSpec
    summary: RunSummary
    records: list[ClientRecord]
    observations: dict[str, InvocationObservation]
    samples: list[StateSample]
    plans: list[PlanRecord]
    t0_s: float
    wall_s: float
    notes: list[str] = field(default_factory=list)


def function_for(app: LocalApp) -> FunctionSpec:
    """The function behind the gateway's route (the agent).

    Raises
    ------
    ServiceUnavailable
        If the template has no HTTP API route to a function.
    """
    if app.gateway is None:
        raise ServiceUnavailable("the template has no HTTP API integration: nothing to replay "
                                 "against (synthesize the warmstart stack: npx cdk synth)")
    return app.function(app.gateway.function_name)


def configure(spec: FunctionSpec, config: Config, strategy: str = "provisioned") -> FunctionSpec:
    """The function as the configuration runs it (see the module docstring): SnapStart only
    in ``on`` with ``strategy`` ``snapstart``, never with provisioned concurrency.

    The overflow endpoint's variables are removed here; in ``on`` the stack's GPU endpoint
    service adds its own (:class:`~infra.local.services.GpuEndpointService`)."""
    env = {k: v for k, v in spec.environment.items() if k not in _OVERFLOW_KEYS}
    aliases = tuple(dataclasses.replace(a, provisioned_concurrency=0) for a in spec.aliases)
    if not any(a.name == ALIAS for a in aliases):
        raise ServiceUnavailable(f"function {spec.name} has no alias {ALIAS!r} (the gateway "
                                 "invokes the live alias)")
    if config == "off":
        env.pop(names.ENV_DEGRADATION_PARAMETER, None)
        env[names.ENV_DEGRADATION_LEVEL] = "L0"
        # asks the handler for a plain on-demand request path (wait for the local model; no
        # overflow, degraded answer or shed): requested from the runtime, see names.ENV_ADMISSION
        env[names.ENV_ADMISSION] = "off"
    else:
        env.setdefault(names.ENV_DEGRADATION_PARAMETER, DEFAULT_DEGRADATION_PARAMETER)
    snap_start = config == "on" and strategy == "snapstart"
    return dataclasses.replace(spec, snap_start=snap_start, aliases=aliases, environment=env,
                               extensions=() if snap_start else spec.extensions)


def downstream_stubs(spec: FunctionSpec) -> list[ToolStubService | LLMStubService]:
    """The local downstreams the replayed function calls, as backing services of both runs
    (not started): the tool stub for an empty ``*_TOOL_URL`` variable (a tool-calling agent),
    the LLM stub for an empty ``*_LLM_URLS`` / ``*_LLM_URL`` (the chat agent's
    ``CHAT_LLM_URLS``, `infra.local.services.wants_llm_stub`; without it the agent answers
    ``503 llm_not_configured``), as ``warmstart local up`` starts them. Each fills only the
    empty variables of its suffix."""
    stubs: list[ToolStubService | LLMStubService] = []
    if any(k.endswith(TOOL_URL_SUFFIX) and not str(v).strip() for k, v in spec.environment.items()):
        stubs.append(ToolStubService())
    if wants_llm_stub(spec):
        stubs.append(LLMStubService())
    return stubs


def _log(options: ReplayOptions, name: str) -> IO[str] | None:
    if options.log_dir is None:
        return None
    options.log_dir.mkdir(parents=True, exist_ok=True)
    return open(options.log_dir / name, "w", encoding="utf-8")


def _wait_clock(clock: Any, target_s: float, time_scale: float) -> None:
    while True:
        left = target_s - clock.time()
        if left <= 0:
            return
        time.sleep(min(left / time_scale, 0.5))


def run_replay(app: LocalApp, workload: ReplayWorkload, config: Config,
               options: ReplayOptions, *, prices: Prices | None = None,
               say: Callable[[str], None] | None = None) -> RunResult:
    """Run the slice once against a fresh local stack in ``config``.

    Raises
    ------
    ServiceUnavailable
        If the local stack cannot start (the message names the part).
    """
    from infra.local.stack import LocalStack, LocalStackConfig

    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    if config not in CONFIGS:
        raise ValueError(f"config must be one of {CONFIGS}, got {config!r}")
    prices = prices or Prices.load()
    base = function_for(app)
    notes: list[str] = []
    logs: list[IO[str]] = []
    x = options.time_scale
    started_wall = time.monotonic()
    try:
        spec = configure(base, config, options.strategy)
        sla_ms = options.sla_ms or float(spec.environment.get(names.ENV_SLA_MS, 2000))
        run_app = dataclasses.replace(app, functions=(spec,),
                                      gateway=GatewayRoute(spec.name, ALIAS))
        backing: list[Any] = []
        gpu: _OptionalGpu | None = None
        if config == "on" and options.overflow and overflow_target(spec):
            gpu_log = _log(options, f"{config}-gpu-endpoint.log")
            if gpu_log:
                logs.append(gpu_log)
            gpu = _OptionalGpu(gpu_endpoint_service(run_app, functions=[spec.name],
                                                    log_stream=gpu_log, planned=options.endpoint,
                                                    time_scale=x), config, notes, say)
            backing.append(gpu)
        backing += downstream_stubs(spec)
        lambda_log = _log(options, f"{config}-lambda.log")
        if lambda_log:
            logs.append(lambda_log)
        stack_config = LocalStackConfig(
            time_scale=x, idle_timeout_s=options.idle_timeout_s,
            pc_allocation_delay_s=options.pc_allocation_delay_s,
            metrics_flush_interval_s=max(0.25, 60.0 / x / 4.0), moto=True)
        stack = LocalStack(run_app, stack_config, backing_services=backing,
                           log_stream=lambda_log or _devnull(logs))
        recorder = InvocationRecorder(spec.name)
        warmer: ReplayWarmer | None = None
        sampler: StateSampler | None = None
        planned = options.endpoint if gpu is not None else None
        endpoint_usage: EndpointUsage | None = None
        try:
            try:
                stack.start()
            except (RuntimeError, OSError, TimeoutError) as exc:
                raise ServiceUnavailable(f"the local stack did not start: {exc}") from exc
            if planned is not None and gpu is not None and gpu.up:
                from infra.local.endpoint_capacity import create_capacity_parameter

                create_capacity_parameter(stack.client("ssm"), planned)
                say(f"[{config}] GPU endpoint: inference component {planned.inference_component}, "
                    f"0 copies until the warmer plans some ({planned.concurrent_requests_per_copy} "
                    f"requests at once per copy, in service {planned.provisioning_delay_s / 60:g} "
                    "trace min after the warmer asks)")
            # every invocation (gateway requests and the warmer's direct invokes)
            stack.emulator.add_listener(recorder)
            clock = stack.clock
            # a streaming function is replayed through its function URL, as its clients call it
            streams = spec.name in stack.function_urls
            endpoint = stack.function_urls[spec.name] if streams else stack.endpoints()["gateway"]
            say(f"[{config}] local stack up: {'function URL' if streams else 'gateway'} {endpoint}, "
                f"function {spec.name} "
                f"({spec.memory_mb} MB), time scale {x:g}")
            t0 = math.ceil(clock.time() / 60.0) * 60.0 + 60.0
            if config == "on":
                endpoints = ([planned.warmer_entry(gpu.service.endpoint_name,
                                                   [f"{spec.name}:{ALIAS}"])]
                             if planned is not None and gpu is not None and gpu.up else [])
                warmer = _make_warmer(stack, spec, workload, options, t0, notes, say, logs,
                                      endpoints)
                if warmer is not None:
                    # first run at the minute the history ends, then every minute of the clock
                    _wait_clock(clock, t0, x)
                    warmer.start()
                    if not warmer.completed.acquire(timeout=60.0):
                        notes.append("the warmer's first run did not finish within 60 s")
                    _wait_pc(stack, spec, options, notes, say)
                    # the slice starts LEAD_IN_MIN after the first run (the rule of
                    # infra/replay/pick.py counts on it), or at the next minute once PC is READY
                    ready_t = math.ceil(clock.time() / 60.0) * 60.0
                    lead_t = t0 + LEAD_IN_MIN * 60.0
                    if ready_t > lead_t:
                        notes.append(f"provisioned concurrency was READY {(ready_t - t0) / 60:.0f} "
                                     f"trace min after the warmer's first run, later than the "
                                     f"{LEAD_IN_MIN} min the slice rule counts on")
                    t0 = max(lead_t, ready_t)
                    if warmer.plans:
                        p, first = warmer.plans[-1], warmer.plans[0]
                        say(f"[{config}] warmer: {p.action} PC={p.provisioned_concurrency} "
                            f"(forecast {p.demand:.2f} by {p.method}); slice starts "
                            f"{(t0 - first.t_s) / 60.0 + 0.0:.1f} min after its first plan")
            _wait_clock(clock, t0, x)
            sampler = StateSampler(stack.emulator, clock, spec.name, ALIAS, interval_s=0.1)
            sampler.start()
            clock_t0 = clock.time()
            wall_t0 = time.time()
            offsets = workload.real_offsets_s(x)
            tool = workload.tool_ms(x, scale_durations=options.scale_durations)
            records = send_requests(endpoint, offsets.tolist(), tool.tolist(),
                                    timeout_s=options.request_timeout_s, label=f"[{config}]",
                                    progress_stream=options.progress, quiet=options.quiet,
                                    shape=options.shape)
            _wait_clock(clock, clock_t0 + workload.minutes * 60.0, x)
            wall_end = time.time()
            sampler.stop()
            if planned is not None and gpu is not None and gpu.up:
                endpoint_usage = _endpoint_usage(gpu.service, warmer, wall_t0, wall_end,
                                                 clock_t0, x, notes)
            observations = dict(recorder.observations)
            slice_end = clock_t0 + workload.minutes * 60.0
            direct = [o for o in recorder.direct if clock_t0 <= o.t_s < slice_end]
            plans = list(warmer.plans) if warmer else []
            if warmer and warmer.error_messages:
                notes.append(f"warmer errors: {warmer.error_messages[-1]} "
                             f"({len(warmer.error_messages)} runs)")
        finally:
            if sampler is not None:
                sampler.stop()
            if warmer is not None:
                warmer.stop()
            stack.stop()
    finally:
        for log in logs:
            log.close()
    summary = summarize(config, records, observations, sampler.samples if sampler else [],
                        memory_mb=spec.memory_mb, sla_ms=sla_ms, time_scale=x, prices=prices,
                        # a planned endpoint whose copies could not be read is not billed
                        # as if always on (the note says its cost is not counted)
                        gpu_endpoint_up=gpu is not None and gpu.up
                        and (planned is None or endpoint_usage is not None),
                        slice_minutes=workload.minutes, notes=notes, direct=direct,
                        planned_pc=[p.provisioned_concurrency for p in plans],
                        endpoint=endpoint_usage, snap_start=spec.snap_start)
    if config == "off" and (summary.degraded or summary.overflowed):
        notes.append(f"the handler still chose degraded/overflow paths with {names.ENV_ADMISSION}=off "
                     f"({summary.degraded} degraded, {summary.overflowed} overflowed), so 'off' "
                     "is not a plain on-demand baseline (the runtime did not honour the switch)")
    if options.shape is not None:
        notes.append(f"requests were {options.shape.method} {options.shape.path} with a fixed body: "
                     "the trace's arrivals are replayed, its durations are not (only the reference "
                     "agent's POST /v1/intent takes tool_ms)")
    elif summary.tool_requested and summary.tool_honoured < 0.5 * summary.tool_requested:
        notes.append(f"the agent did not do the simulated work (tool_ms) on "
                     f"{summary.tool_requested - summary.tool_honoured} of "
                     f"{summary.tool_requested} local answers: trace durations were not "
                     "reproduced (POST /v1/intent must honour tool_ms)")
    return RunResult(config, workload, options, spec, summary, records, observations,
                     sampler.samples if sampler else [], plans, clock_t0,
                     time.monotonic() - started_wall, notes)


class _OptionalGpu:
    """The stack's GPU endpoint service as a backing service that may fail to start: the run
    then goes on without overflow (and says so) instead of failing."""

    name = "gpu-endpoint"

    def __init__(self, service: GpuEndpointService, config: str, notes: list[str],
                 say: Callable[[str], None]) -> None:
        self.service = service
        self._config = config
        self._notes = notes
        self._say = say
        self.up = False

    @property
    def endpoint(self) -> str:
        return self.service.endpoint if self.up else "not running (no overflow)"

    def start(self) -> None:
        try:
            self.service.start()
        except ServiceStartError as exc:
            self._notes.append(f"no overflow: {exc}")
            self._say(f"[{self._config}] warning: {exc}; running without overflow")
            return
        self.up = True
        self._say(f"[{self._config}] GPU endpoint at {self.service.endpoint}")

    def function_environment(self, spec: FunctionSpec) -> dict[str, str]:
        return self.service.function_environment(spec)  # empty unless it is running

    def stop(self) -> None:
        self.service.stop()  # ``up`` keeps saying whether it served this run (for the costs)


def _devnull(logs: list[IO[str]]) -> IO[str]:
    import os

    stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed with the logs
    logs.append(stream)
    return stream


def _endpoint_usage(service: Any, warmer: ReplayWarmer | None, wall_t0: float,
                    wall_end: float, clock_t0: float, time_scale: float,
                    notes: list[str]) -> EndpointUsage | None:
    """The planned endpoint's copies over the slice (from its ``GET /_capacity`` history and
    the warmer's published states); None (with a note) when the server does not answer."""
    try:
        doc = service.capacity()
    except (OSError, ValueError, RuntimeError) as exc:
        notes.append(f"the GPU endpoint's capacity could not be read ({exc}): its cost is not "
                     "counted")
        return None
    records = list(warmer.endpoint_records) if warmer is not None else []
    return endpoint_usage(doc.get("history") or [], wall_t0, wall_end, time_scale,
                          published=[(r.t_s - clock_t0, r.state, r.capacity) for r in records],
                          planned=[(r.t_s - clock_t0, r.planned) for r in records],
                          reason=records[-1].reason if records else "")


def _make_warmer(stack: Any, spec: FunctionSpec, workload: ReplayWorkload,
                 options: ReplayOptions, history_end_s: float, notes: list[str],
                 say: Callable[[str], None], logs: list[IO[str]],
                 endpoints: Sequence[Mapping[str, Any]] = ()) -> ReplayWarmer | None:
    """Seed the metric history, then build the stack's warmer schedule (not started); None
    (with a note) on failure."""
    from infra.local.services import warmer_service

    try:
        warmer = warmer_service(stack, document=replay_warmer_document(
            function_name=spec.name, alias=ALIAS, memory_mb=spec.memory_mb,
            floor=0 if spec.snap_start else options.pc_floor,
            cap=0 if spec.snap_start else options.pc_cap,
            strategy="snapstart" if spec.snap_start else "provisioned",
            sla_ms=options.sla_ms or float(spec.environment.get(names.ENV_SLA_MS, 2000)),
            cold_start_ms=options.cold_start_ms,
            budget_usd_per_hour=options.budget_usd_per_hour,
            degradation_parameter=spec.environment.get(names.ENV_DEGRADATION_PARAMETER),
            available_concurrency=spec.reserved_concurrency or stack.config.account_concurrency_limit,
            history_min=max(options.history_min, 60), objective=options.pc_objective,
            endpoints=endpoints),
            schedule_type=ReplayWarmer)
        assert isinstance(warmer, ReplayWarmer)
        n = seed_history(stack.client("cloudwatch"), spec.name, ALIAS, end_s=history_end_s,
                         counts=workload.history_counts,
                         concurrency=workload.history_concurrency,
                         duration_ms=workload.history_duration_ms)
        say(f"[on] metric history: {workload.history_counts.shape[0]} trace minutes before the "
            f"slice ({n} data points) written to CloudWatch (moto)")
        log = _log(options, "on-warmer.log")
        if log is None:
            log = _devnull(logs)
        else:
            logs.append(log)
        warmer.log_to(log)
        return warmer
    except Exception as exc:  # noqa: BLE001 - run without a warmer and say so
        notes.append(f"no warmer: {type(exc).__name__}: {exc}")
        say(f"[on] warning: the warmer could not start ({type(exc).__name__}: {exc}); "
            "running without forecast-driven provisioned concurrency")
        return None


def _wait_pc(stack: Any, spec: FunctionSpec, options: ReplayOptions, notes: list[str],
             say: Callable[[str], None]) -> None:
    from infra.local.errors import LambdaApiError

    try:
        cfg: Mapping[str, Any] = stack.emulator.get_provisioned_concurrency(spec.name, ALIAS)
    except LambdaApiError:
        return
    started = time.monotonic()
    try:
        cfg = stack.emulator.wait_provisioned_ready(spec.name, ALIAS,
                                                    timeout_s=options.pc_ready_timeout_s)
    except TimeoutError:
        notes.append(f"provisioned concurrency not READY after {options.pc_ready_timeout_s:.0f} s;"
                     " the slice started anyway")
        return
    say(f"[on] provisioned concurrency {cfg.get('Status')}: "
        f"{cfg.get('AllocatedProvisionedConcurrentExecutions')} environments in "
        f"{time.monotonic() - started:.1f} s")


def load_local_app(*, template: Path | None = None, cdk_out: Path = Path("cdk.out"),
                   inline_code_dir: Path | None = None) -> LocalApp:
    """The functions and gateway route of the synthesized stack (as ``warmstart local up``).

    Raises
    ------
    ServiceUnavailable
        No template, or no template with a function behind an HTTP API (the message says to
        synthesize first).
    """
    from infra.local.template import TemplateError, find_templates, read_template

    try:
        templates = [template] if template else find_templates(cdk_out)
    except TemplateError as exc:
        raise ServiceUnavailable(str(exc)) from exc
    problems = []
    for path in templates:
        if not path.is_file():
            raise ServiceUnavailable(f"template {path} does not exist; run `npx cdk synth` first")
        try:
            app = read_template(path, inline_code_dir=inline_code_dir)
        except TemplateError as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        if app.gateway is not None:
            return app
        problems.append(f"{path.name}: no HTTP API integration")
    raise ServiceUnavailable("no synthesized template with a function behind an HTTP API ("
                             + "; ".join(problems) + "); run `npx cdk synth` first")
