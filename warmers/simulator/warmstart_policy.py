"""The warmstart policy in the simulator, built from the real control-plane and runtime code.

Per function, every ``plan_every_min`` simulated minutes:

1. **Forecaster and planner**: ``warmers.plan.run.plan_run``, the function the warmer Lambda and
   ``warmstart plan`` call, on the per-minute history observed so far as CloudWatch would hold
   it (``ConcurrentExecutions`` Maximum, ``Invocations``, ``Duration``; :func:`observed_series`),
   fed back its previous plan, in an account of Lambda's default quota (1,000) holding only this
   function. Inside: ``warmers.forecast.forecast_alias`` (quantiles of peak concurrency over
   the minutes the next plan will be in force, the mean in flight by Little's law), then the
   planner: provisioned concurrency only as far as its expected utilization reaches the
   break-even, with floor, cap, budget and hysteresis; else warm pings when they cost less than
   the cold starts they may avoid (valued at the SnapStart restore price plus the calibrated
   billed init); or nothing. (The deployed warmer runs every minute.)
2. The plan's provisioned concurrency is billed from the minute it is set and usable after the
   allocation delay (``policies.apply_allocation_delay``); a ping plan sends its pings until
   the next plan.
3. **Admission** (``functions.runtime.admission.decide``) on every remaining cold start and on
   requests that reach an environment whose model is still loading: local, overflow to the
   GPU endpoint, degraded answer, or shed; the degradation level comes from
   ``warmers.degradation.level_for_utilization`` of the previous minute. An overflowed or
   degraded answer then leaves at once and the model goes on loading in the invocation's
   post-response phase (``WARMSTART_FINISH_PRELOAD=after``; ``before``: the invocation waits
   for it until the SLA deadline less the admission headroom, the runtime's
   ``_finish_preload``); the model loads only while its environment runs (``engine`` module
   docstring).

Only this module calls the planner and admission (``report`` only reads the
admission headroom for its text); their APIs are used as published (nothing here
re-implements them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from functions.runtime import admission as adm
from warmers.config import WarmerConfig
from warmers.degradation import level_for_utilization, utilization
from warmers.forecast import ForecastConfig
from warmers.plan.endpoint import AgentDemand
from warmers.plan.policy import DEFAULT_ACCOUNT_CONCURRENCY, AliasPolicy, PlannerConfig, WarmPlan
from warmers.plan.run import AccountLimits, MetricsMissing, plan_run
from warmers.series import MetricSeries
from warmers.simulator.calibration import Calibration
from warmers.simulator.constants import PC_PREPARATION_S, SimulatorPrices
from warmers.simulator.controls import DEGRADED, LOCAL, OVERFLOW, SHED, Controls
from warmers.simulator.endpoint import EndpointModel, EndpointRun
from warmers.simulator.policies import Observed, PolicyContext, apply_allocation_delay
from warmers.simulator.trace import DURATION_LEVELS, MINUTE_MS, Workload
from warmers.strategy import (
    DEFAULT_MAX_LATE_FRACTION,
    ColdStartTime,
    StrategyAdvice,
    recommend_strategy,
)

#: ``WarmstartPolicy.strategy`` values: a fixed cold-start strategy, or ``auto`` (per function,
#: ``warmers.strategy.recommend_strategy``).
POLICY_STRATEGIES = ("provisioned", "snapstart", "auto")

#: Account concurrency the degradation level is computed against (Lambda's default limit,
#: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
ACCOUNT_CONCURRENCY = DEFAULT_ACCOUNT_CONCURRENCY

#: How long before the SLA deadline an overflowed or degraded invocation stops waiting for its
#: model (the handler's margin, ``functions.runtime.admission.FINISH_PRELOAD_MARGIN_MS``).
PRELOAD_HEADROOM_MS = adm.FINISH_PRELOAD_MARGIN_MS

_PATH_CODE = {
    adm.Path.LOCAL: LOCAL,
    adm.Path.OVERFLOW: OVERFLOW,
    adm.Path.DEGRADE: DEGRADED,
    adm.Path.SHED: SHED,
}


def duration_quantile_ms(workload_pct_ms: np.ndarray, q: float) -> float:
    """Duration at level ``q`` from the trace percentiles (same inverse CDF as the sampler)."""
    return float(np.interp(q, DURATION_LEVELS, workload_pct_ms))


@dataclass
class AdmissionAdapter:
    """Engine ``AdmissionPort`` backed by ``functions.runtime.admission.decide``.

    Parameters
    ----------
    sla_ms : float
        The function's SLA (P0 route, degradable: the agent's intent route has the lexical
        fallback).
    load_p95_ms : float
        Calibrated p95 init (model load) time.
    local_p95_ms : float
        p95 of a local answer once loaded (the function's p95 duration).
    overflow_p95_ms : float
        p95 of an overflow answer (calibrated overflow overhead + the function's duration).
    degrade_p95_ms : float
        p95 of the degraded answer.
    levels : np.ndarray
        ``(n_minutes,)`` degradation level index per minute (0..3).
    """

    sla_ms: float
    load_p95_ms: float
    local_p95_ms: float
    overflow_p95_ms: float
    degrade_p95_ms: float
    levels: np.ndarray
    overflow_configured: bool = True
    decisions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._overflow = adm.OverflowState(
            configured=self.overflow_configured,
            healthy=self.overflow_configured,
            latency_p95_ms=self.overflow_p95_ms,
        )

    def decide(
        self, arrival_ms: float, now_ms: float, sla_ms: float, duration_ms: float,
        model_ready_in_ms: float, cold_start: bool,
    ) -> int:
        request = adm.RequestInfo(
            route="/v1/intent", tier="P0", sla_ms=sla_ms, arrival_ms=arrival_ms, degradable=True
        )
        if cold_start:
            # the init phase started the background preload: the model is loading, its p95
            # remaining time is the calibrated p95 load less the init already spent
            remaining = max(0.0, self.load_p95_ms - (now_ms - arrival_ms))
        else:
            remaining = model_ready_in_ms
        env = adm.EnvState(
            model_state=adm.ModelState.LOADING if remaining > 0 else adm.ModelState.READY,
            load_remaining_ms=remaining,
            infer_p95_ms=self.local_p95_ms,
            degrade_p95_ms=self.degrade_p95_ms,
        )
        m = min(int(arrival_ms // MINUTE_MS), self.levels.shape[0] - 1)
        level = f"L{int(self.levels[m])}"
        decision = adm.decide(request, env, self._overflow, level, now_ms)
        key = str(decision.reason)
        self.decisions[key] = self.decisions.get(key, 0) + 1
        return _PATH_CODE[decision.path]


@dataclass
class ScheduleCache:
    """Shares one function's warmer run between warmstart variants (same forecasts, plans)."""

    key: tuple[str, int] | None = None
    value: tuple[np.ndarray, np.ndarray, list[float], list[WarmPlan], dict[int, AgentDemand | None]] | None = None


@dataclass
class WarmstartPolicy:
    """forecaster -> planner -> provisioned concurrency / pings, + admission with overflow.

    Parameters
    ----------
    plan_every_min : int
        Simulated minutes between two warmer runs (the deployed warmer runs every minute; the
        simulator plans less often to fit its time budget).
    forecast_config : ForecastConfig or None
        Default: lead = the provisioned-concurrency preparation time, window = the planning
        interval (the minutes the plan will be in force), other knobs as the forecaster's.
    planner_config : PlannerConfig
    cap : int
        Provisioned concurrency cap per function (``AliasPolicy``'s default, 50).
    budget_usd_per_hour : float
        Hourly budget per function (``AliasPolicy``'s default, $1/h).
    overflow : bool
        Overflow to the GPU endpoint configured.
    cache : ScheduleCache or None
        Shared with another variant so the warmer runs once per function.
    finish_preload : {"after", "before", "off"}
        The runtime's ``WARMSTART_FINISH_PRELOAD`` (default ``after``): an overflowed or
        degraded answer leaves at once and the environment stays busy (billed) after the
        response until the model is ready; ``before``: the invocation waits for the model
        until the SLA deadline less the handler's admission headroom
        (``functions.runtime.admission.HANDLER_POLICY.headroom_ms``) before it answers;
        between invocations the model's loading is frozen either way.
    endpoint : EndpointModel or None
        The shared overflow endpoint (with ``overflow``): planned by the warmer or always on,
        finite (``warmers.simulator.endpoint``). None: unlimited and free (the engine alone;
        for tests of admission).
    strategy : {"provisioned", "snapstart", "auto"}
        The functions' cold-start strategy as deployed: ``provisioned`` (on demand; the warmer
        plans provisioned concurrency or pings; admission on every cold start), ``snapstart``
        (every cold start a restore of a snapshot taken after the model loaded: no provisioned
        concurrency, which SnapStart excludes, and nothing for admission to decide), or
        ``auto``: per function, ``warmers.strategy.recommend_strategy`` from its SLA, its
        duration percentiles and the calibrated init and restore.
    max_late_fraction : float
        ``auto``: the most on-demand cold starts that may answer late (``recommend_strategy``).
    objective : {"cost", "sla"}
        The planner's ``AliasPolicy.objective`` for on-demand functions (default ``cost``).
    floor : int
        Provisioned concurrency floor per function (``AliasPolicy.floor``, default 0).
    """

    plan_every_min: int = 15
    forecast_config: ForecastConfig | None = None
    planner_config: PlannerConfig = field(default_factory=PlannerConfig)
    cap: int = 50
    budget_usd_per_hour: float = 1.0
    overflow: bool = True
    name: str = "warmstart"
    plans: dict[str, list[WarmPlan]] = field(default_factory=dict)
    keep_plans: bool = False
    cache: ScheduleCache | None = None
    finish_preload: str = "after"
    endpoint: EndpointModel | None = None
    strategy: str = "provisioned"
    max_late_fraction: float = DEFAULT_MAX_LATE_FRACTION
    objective: str = "cost"
    floor: int = 0
    #: with ``keep_plans``: the overflowed requests' outcomes on the endpoint (the runner sets it)
    endpoint_run: EndpointRun | None = field(default=None, repr=False)
    #: the last function's overflow demand per warmer-run minute (read by the runner)
    last_demands: dict[int, AgentDemand | None] = field(default_factory=dict, repr=False)
    _advice: dict[tuple[str, float], StrategyAdvice] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.plan_every_min < 1:
            raise ValueError(f"plan_every_min must be >= 1, got {self.plan_every_min}")
        if self.strategy not in POLICY_STRATEGIES:
            raise ValueError(f"strategy must be one of {POLICY_STRATEGIES}, got {self.strategy!r}")
        if self.forecast_config is None:
            self.forecast_config = ForecastConfig(
                lead_min=math.ceil(PC_PREPARATION_S / 60.0),
                window_min=self.plan_every_min,
                quantiles=(0.5, 0.9, 0.95, 0.99),
                planning_quantile=self.planner_config.planning_quantile,
            )

    def schedule(
        self, workload: Workload, observed: Observed, init_ms: float | None = None,
        cold_start_ms: tuple[float, float] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, list[float], list[WarmPlan], dict[int, AgentDemand | None]]:
        """Run the warmer over the trace for one function.

        Parameters
        ----------
        workload, observed
            The function and its per-minute metrics (the planner sees minutes before ``m``).
        init_ms : float or None
            Calibrated init time: its billed duration (on-demand GB-s price) is added to the
            planner's value of an avoided cold start (``PlannerConfig.cold_start_usd_per_gb``),
            as a deployment does with the times ``warmstart calibrate`` measured.
        cold_start_ms : (p50, p95) or None
            The calibrated on-demand init, ms: with the workload's SLA, the endpoint planner
            counts only the cold starts that would answer late without the endpoint
            (``AliasPolicy.cold_start_p50_ms``, ``warmers.plan.endpoint.cold_start_late_fraction``).

        Returns
        -------
        (pc_configured, ping_concurrency, ping_times_ms, plans, demands)
            ``(n_minutes,)`` configured provisioned concurrency, ``(n_minutes,)`` ping
            concurrency in force, the ping times, the plans issued, and the function's share
            of the overflow endpoint's demand at each warmer-run minute (``plan_run``'s
            ``AliasRunPlan.overflow_demand``; None without a usable forecast).
        """
        cfg = self.forecast_config
        assert cfg is not None
        n = workload.n_minutes
        policy = AliasPolicy(
            function_name=workload.function_id,
            alias="live",
            strategy="provisioned",
            memory_mb=workload.memory_mb,
            floor=self.floor,
            cap=self.cap,
            budget_usd_per_hour=self.budget_usd_per_hour,
            objective=self.objective,  # type: ignore[arg-type]
            sla_ms=workload.sla_ms if cold_start_ms is not None else None,
            cold_start_p50_ms=cold_start_ms[0] if cold_start_ms is not None else None,
            cold_start_p95_ms=cold_start_ms[1] if cold_start_ms is not None else None,
        )
        configured = np.zeros(n, dtype=np.int64)
        ping_conc = np.zeros(n, dtype=np.int64)
        ping_interval = np.zeros(n, dtype=np.int64)
        plans: list[WarmPlan] = []
        previous: WarmPlan | None = None
        planner = self.planner_config
        if init_ms is not None:
            planner = replace(planner, cold_start_usd_per_gb=planner.cold_start_usd_per_gb
                              + init_ms / 1000.0 * planner.cost.on_demand_gb_s.usd)
        # the function overflows to the shared endpoint: plan_run computes its share of the
        # demand (the endpoint itself is planned over every function, endpoint.plan_capacity)
        config = WarmerConfig(policies=(policy,), forecast=cfg, planner=planner, endpoints=(
            EndpointModel().policy((policy.key,)),))
        demands: dict[int, AgentDemand | None] = {}
        for m in range(0, n, self.plan_every_min):
            entry = plan_run(
                {policy.key: observed_series(policy, observed, m)},
                {policy.key: previous},
                # the function alone in an account of Lambda's default quota, its own PC
                # already allocated in it
                AccountLimits.lambda_default(
                    previous.provisioned_concurrency if previous else 0),
                config, m * 60.0,
            ).aliases[0]
            plan = entry.plan
            demands[m] = entry.overflow_demand
            previous = plan
            plans.append(plan)
            end = min(n, m + self.plan_every_min)
            if plan.action == "provisioned":
                configured[m:end] = plan.provisioned_concurrency
            elif plan.action == "ping":
                ping_conc[m:end] = plan.ping_concurrency
                ping_interval[m:end] = plan.ping_interval_s
        # a ping plan with concurrency N sends N simultaneous pings: each one holds its
        # environment, so they land on N distinct environments
        pings: list[float] = []
        next_ping_ms = -1.0
        for m in range(n):
            if ping_conc[m] <= 0:
                next_ping_ms = -1.0
                continue
            start = m * MINUTE_MS
            next_ping_ms = max(next_ping_ms, start)
            while next_ping_ms < start + MINUTE_MS:
                pings.extend([next_ping_ms] * int(ping_conc[m]))
                next_ping_ms += float(ping_interval[m]) * 1000.0
        return configured, ping_conc, pings, plans, demands

    def advice(self, workload: Workload, ctx: PolicyContext,
               observed: Observed | None = None) -> StrategyAdvice:
        """The strategy ``auto`` deploys for this function (``recommend_strategy`` on its SLA,
        its duration percentiles, the calibrated init and restore, and, given ``observed``, its
        peak in flight against ``Workload.concurrency_limit``: the function's profile, as a
        user reads it off their own trace with ``warmstart simulate``). Cached per function:
        ``controls`` computes it with ``observed`` first."""
        key = (workload.function_id, workload.sla_ms)
        known = self._advice.get(key)
        if known is not None:
            return known
        cal = ctx.calibration
        peak = (float(np.max(observed.concurrency_max, initial=0.0))
                if observed is not None else None)
        self._advice[key] = advice = recommend_strategy(
            workload.sla_ms, ColdStartTime(cal.init_ms.p50, cal.init_ms.p95),
            ColdStartTime(cal.restore_ms.p50, cal.restore_ms.p95),
            np.asarray(DURATION_LEVELS, dtype=float), _pct(workload),
            max_late_fraction=self.max_late_fraction, peak_concurrency=peak,
            concurrency_limit=workload.concurrency_limit)
        return advice

    def deployed_strategy(self, workload: Workload, ctx: PolicyContext) -> str:
        """``provisioned`` or ``snapstart`` for this function."""
        if self.strategy == "auto":
            return self.advice(workload, ctx).strategy
        return self.strategy

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        if self.strategy == "auto":
            self.advice(workload, ctx, observed)  # cached with the function's peak
        if self.deployed_strategy(workload, ctx) == "snapstart":
            # the planner plans nothing for a SnapStart alias (no provisioned concurrency, no
            # pings: restores cover cold starts) and a restored environment has its model
            self.last_demands = {}
            if self.keep_plans:
                self.plans[workload.function_id] = []
            restore = ctx.calibration.restore_ms
            return Controls(keep_alive_ms=ctx.default_keep_alive_ms, cold_start_ms=restore.p50,
                            cold_start_sigma=restore.log_sigma, restore=True)
        key = (workload.function_id, workload.n_minutes)
        if self.cache is not None and self.cache.key == key and self.cache.value is not None:
            configured, ping_conc, pings, plans, demands = self.cache.value
        else:
            init = ctx.calibration.init_ms
            configured, ping_conc, pings, plans, demands = self.schedule(
                workload, observed, init.p50, (init.p50, init.p95))
            if self.cache is not None:
                self.cache.key = key
                self.cache.value = (configured, ping_conc, pings, plans, demands)
        self.last_demands = demands
        if self.keep_plans:
            self.plans[workload.function_id] = plans
        usable = apply_allocation_delay(configured)
        cal: Calibration = ctx.calibration
        p95_dur = duration_quantile_ms(_pct(workload), 0.95)
        levels = _levels(observed.concurrency_max,
                         workload.concurrency_limit or ACCOUNT_CONCURRENCY)
        admission = AdmissionAdapter(
            sla_ms=workload.sla_ms,
            load_p95_ms=cal.init_ms.p95,
            local_p95_ms=p95_dur,
            overflow_p95_ms=cal.overflow.p95 + p95_dur,
            degrade_p95_ms=max(cal.degraded_ms.p95, 1.0),
            levels=levels,
            overflow_configured=self.overflow,
        )
        has_pc = bool(configured.any())
        return ctx.controls(
            pc_effective=usable if has_pc else None,
            pc_configured=configured if has_pc else None,
            ping_times_ms=np.asarray(pings, dtype=float) if pings else None,
            ping_concurrency=1,
            admission=admission,
            toolkit_init_ms=cal.toolkit_init_ms.p50,
            overflow_extra_ms=cal.overflow.p50,
            degraded_ms=cal.degraded_ms.p50,
            finish_preload=self.finish_preload,
            preload_headroom_ms=PRELOAD_HEADROOM_MS,
        )


def without_capacity(controls: Controls) -> Controls:
    """The same controls with an admission that finds the shared endpoint without capacity
    (it decides as with no overflow configured: local if the model is ready in time, else
    degraded or shed), the outcome of a request sent while no instance is in service
    (``warmers.simulator.endpoint``). Controls without admission (a SnapStart function) are
    returned as they are."""
    got = controls.admission
    if got is None:  # a SnapStart function: nothing overflows, nothing changes
        return controls
    if not isinstance(got, AdmissionAdapter):
        raise TypeError(f"without_capacity needs the warmstart admission, got {type(got).__name__}")
    return replace(controls, admission=replace(got, overflow_configured=False, decisions={}))


def observed_series(policy: AliasPolicy, observed: Observed, m: int) -> MetricSeries | MetricsMissing:
    """What CloudWatch would hold for the function at minute ``m``: minutes ``[0, m)`` of
    ``observed`` (``ConcurrentExecutions`` Maximum, ``Invocations``, ``Duration`` Average), the
    first minute at epoch 0; ``MetricsMissing`` at minute 0 (no history yet)."""
    if m <= 0:
        return MetricsMissing("no history yet (the first minute of the trace)")
    return MetricSeries(
        function_name=policy.function_name, alias=policy.alias, start_s=0.0,
        invocations=observed.invocations[:m], concurrency=observed.concurrency_max[:m],
        duration_ms=observed.duration_ms[:m], source="trace")


def _pct(workload: Workload) -> np.ndarray:
    pct = workload.duration_pct_ms
    if pct is not None:
        return np.asarray(pct, dtype=float)
    # workloads built by hand carry no percentiles: use the sampled durations
    d = workload.durations_ms
    if d.size == 0:
        return np.zeros(len(DURATION_LEVELS))
    return np.asarray(np.quantile(d, DURATION_LEVELS), dtype=float)


def _levels(concurrency_max: np.ndarray, limit: int = ACCOUNT_CONCURRENCY) -> np.ndarray:
    """Degradation level per minute from the previous minute's utilization of the function's
    concurrency limit (0 in minute 0): what CloudWatch reports is at most the limit (Lambda
    throttles the rest).

    ``warmers.degradation.level_for_utilization`` is called once per distinct concurrency
    value (a function has few).
    """
    prev = np.concatenate([[0.0], np.minimum(np.asarray(concurrency_max, dtype=float)[:-1],
                                             float(limit))])
    values, inverse = np.unique(prev, return_inverse=True)
    per_value = np.array(
        [int(str(level_for_utilization(utilization(float(v), limit)))[1])
         for v in values],
        dtype=np.int8,
    )
    return per_value[inverse.reshape(-1)]


def warmstart_variants(plan_every_min: int = 15, prices: SimulatorPrices | None = None,
                       endpoint: EndpointModel | None = None,
                       strategy: str = "auto", objective: str = "cost",
                       floor: int = 0, cap: int = 50) -> list[WarmstartPolicy]:
    """The warmstart policy and two variants, sharing one warmer run per function, each
    deploying ``strategy`` (default ``auto``: SnapStart only where an on-demand cold start can
    break the function's SLA, ``warmers.strategy``), the planner's ``objective``, ``floor`` and ``cap``.

    ``warmstart``: overflow to the shared GPU endpoint whose capacity the warmer plans
    (``endpoint``, default an inference component that scales to zero, priced from
    ``prices``); ``warmstart, always-on endpoint``: the same with one instance for the whole
    trace (the shipped fixed-size endpoint); ``warmstart, no overflow``: admission degrades
    instead of overflowing.
    """
    cache = ScheduleCache()
    hourly = (prices or SimulatorPrices()).gpu_endpoint_hour_usd
    planned = replace(endpoint or EndpointModel(), mode="planned", instance_usd_per_hour=hourly)
    return [
        WarmstartPolicy(plan_every_min=plan_every_min, cache=cache, endpoint=planned,
                        strategy=strategy, objective=objective, floor=floor, cap=cap),
        WarmstartPolicy(plan_every_min=plan_every_min, cache=cache,
                        name="warmstart, always-on endpoint",
                        endpoint=replace(planned, mode="always_on"), strategy=strategy,
                        objective=objective, floor=floor, cap=cap),
        WarmstartPolicy(plan_every_min=plan_every_min, overflow=False,
                        name="warmstart, no overflow", cache=cache, strategy=strategy,
                        objective=objective, floor=floor, cap=cap),
    ]
