"""Lambda Managed Instances (LMI) in the policy simulator: the engine's LMI mode and its policies.

Model (one function version on a capacity provider), minute by minute:

- Capacity: ``E[m]`` execution environments usable in minute ``m``, each serving
  ``per_environment`` requests at once (Python: one process per request, 16 per vCPU by
  default). No per-request cold start: a request that finds a free slot runs for its warm
  duration (path ``local``).
- A request that arrives while every slot is busy is throttled: ``429
  TooManyRequestsException``, path ``throttled``, a failed answer, not billed.
- Reactive scaling, as AWS documents it: asynchronous, from utilization and environment
  fullness, never on an arrival. After each minute the scaler wants ``ceil(headroom x served
  peak / per_environment)`` environments; what it wants becomes usable ``lead_min`` minutes
  later; scale-in follows the highest want of the last ``scale_in_hold_min`` minutes. With
  ``headroom`` 2 and ``lead_min`` 5, traffic that more than doubles within 5 minutes outruns the
  capacity and is throttled: the documented rule.
- The minimum (``MinExecutionEnvironments``): ``minimum[m]`` requested in minute ``m``, usable
  ``lead_min`` minutes later (instances launch like any scale-out); AWS's default is 3.
- Billing: environment-time x (the instance's EC2 on-demand price + the management fee) x the
  environment's vCPU share of the instance, plus the per-request charge
  (``warmers/prices.json`` via ``warmers.lmi.LmiSettings``); no duration charge.
- The function starts with the capacity its first minute wants (it was running before the
  trace), the same under every LMI policy.

Assumptions (not in the docs; stated, and parameters of :class:`LmiControls`): the scale-out
lead (5 minutes, the doubling rule's window), the scaler's headroom (2x: the doubling rule),
the 5-minute scale-in hold, environments billed by their vCPU share (instances are not
bin-packed whole), the function's Lambda concurrency limit not applying on LMI.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html ;
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html ;
https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html ;
pricing: ``warmers/prices.json`` items ``ec2_*_hour``, ``lmi_management_fee_fraction``,
``lmi_requests_per_million`` (secondary transcriptions of https://aws.amazon.com/lambda/pricing/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

from warmers.lmi import (
    DEFAULT_MIN_EXECUTION_ENVIRONMENTS,
    SCALE_OUT_LEAD_MIN,
    LmiSettings,
)
from warmers.simulator.controls import (
    LOCAL,
    Controls,
    EngineState,
    FunctionResult,
    LmiControls,
    account_result,
)
from warmers.simulator.trace import MINUTE_MS, Workload

if TYPE_CHECKING:
    from warmers.plan.policy import WarmPlan
    from warmers.simulator.policies import Observed, PolicyContext


def simulate_lmi(workload: Workload, controls: Controls, *, state: EngineState | None = None,
                 final: bool = True) -> FunctionResult:
    """Simulate one function on LMI (``engine.simulate_function`` calls this).

    Parameters
    ----------
    workload : Workload
        Its requests; with ``state``, one minute-aligned chunk of them (``stream.chunk_bounds``).
    controls : Controls
        With ``managed_instances`` set.
    state : EngineState, optional
        Requests in flight, the scaler's wants and the counters carried from the previous
        chunk (updated in place); consecutive chunks give one call's totals.
    final : bool
        The last chunk: the minutes to the end of the horizon are accounted.

    Returns
    -------
    FunctionResult
        Paths ``local`` or ``throttled``; no cold starts; ``lmi_env_ms`` the environment-time
        held (a running total with ``final=False``) and ``lmi_env_usd_per_hour`` its price.

    Raises
    ------
    ValueError
        When ``minimum`` does not have one value per minute.
    """
    lmi = controls.managed_instances
    assert lmi is not None
    n_min = workload.n_minutes
    minimum = np.asarray(lmi.minimum, dtype=np.int64)
    if minimum.shape != (n_min,):
        raise ValueError(f"minimum must have shape ({n_min},), got {minimum.shape}")
    per = lmi.settings.per_environment
    top = math.inf if lmi.maximum is None else float(lmi.maximum)
    arrivals = workload.arrivals_ms.tolist()
    durations = workload.durations_ms.tolist()
    n = len(arrivals)
    latencies = np.asarray(workload.durations_ms, dtype=float).copy()
    paths = np.full(n, LOCAL, dtype=np.int8)
    throttled: list[int] = []
    if state is not None and state.saved is not None:
        m_next, busy, wants, env_minutes, busy_ms, start, n_throttled = state.saved
    else:
        busy = []  # end times of requests in flight (heap)
        wants = np.zeros(n_min, dtype=np.int64)
        # the first minute's want, as if the function had been running before the trace
        first_peak = _first_minute_peak(arrivals, durations)
        start = max(1, math.ceil(lmi.headroom * first_peak / per)) if first_peak else 0
        m_next, env_minutes, busy_ms, n_throttled = 0, 0, 0.0, 0
    last = n_min if final else (min(n_min, int(arrivals[-1] // MINUTE_MS) + 1) if n else m_next)
    i = 0
    for m in range(m_next, last):
        lo = m - lmi.lead_min - lmi.scale_in_hold_min
        hi = m - lmi.lead_min
        held = int(wants[max(0, lo):hi + 1].max()) if hi >= 0 else 0
        if m <= lmi.lead_min + lmi.scale_in_hold_min:
            held = max(held, start)
        floor = int(minimum[hi]) if hi >= 0 else int(minimum[0])
        cap_env = int(min(top, max(floor, held)))
        env_minutes += cap_env
        slots = cap_env * per
        end_ms = (m + 1) * MINUTE_MS
        peak = len(busy)
        while i < n and arrivals[i] < end_ms:
            t = arrivals[i]
            while busy and busy[0] <= t:
                heappop(busy)
            if len(busy) >= slots:
                throttled.append(i)
            else:
                heappush(busy, t + durations[i])
                busy_ms += durations[i]
                peak = max(peak, len(busy))
            i += 1
        wants[m] = math.ceil(lmi.headroom * peak / per - 1e-9) if peak else 0
    n_throttled += len(throttled)
    if state is not None:
        state.saved = (last, busy, wants, env_minutes, busy_ms, start, n_throttled)
    env_ms = float(env_minutes) * MINUTE_MS
    from dataclasses import replace

    result = account_result(workload, controls, latencies, paths, 0, 0, 0.0, 0.0,
                     max(0.0, env_ms - busy_ms / per), 0, throttled_idx=throttled, final=final)
    return replace(result, lmi_env_ms=env_ms, throttled=n_throttled,
                   lmi_env_usd_per_hour=lmi.settings.environment_hourly_usd())


def _first_minute_peak(arrivals: list[float], durations: list[float]) -> int:
    """Peak requests in flight in the first minute (unbounded capacity)."""
    busy: list[float] = []
    peak = 0
    for t, d in zip(arrivals, durations, strict=True):
        if t >= MINUTE_MS:
            break
        while busy and busy[0] <= t:
            heappop(busy)
        heappush(busy, t + d)
        peak = max(peak, len(busy))
    return peak


def _controls(settings: LmiSettings, minimum: np.ndarray) -> Controls:
    return Controls(keep_alive_ms=0.0, cold_start_ms=0.0,
                    managed_instances=LmiControls(settings=settings, minimum=minimum))


@dataclass
class LmiReactive:
    """LMI as AWS scales it: the default minimum (3) and reactive scale-out only."""

    settings: LmiSettings = field(default_factory=LmiSettings)
    minimum: int = DEFAULT_MIN_EXECUTION_ENVIRONMENTS
    name: str = "lmi reactive"

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        return _controls(self.settings, np.full(workload.n_minutes, self.minimum,
                                                dtype=np.int64))


@dataclass
class LmiStaticMinimum:
    """LMI with a fixed minimum sized for the function's peak in flight over the whole trace
    (by definition not causal, like ``FixedProvisioned``): ``ceil(peak / per_environment)``."""

    settings: LmiSettings = field(default_factory=LmiSettings)
    floor: int = DEFAULT_MIN_EXECUTION_ENVIRONMENTS
    name: str = "lmi static minimum"

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        peak = float(np.max(observed.concurrency_max, initial=0.0))
        low = max(self.floor, math.ceil(peak / self.settings.per_environment - 1e-9))
        return _controls(self.settings, np.full(workload.n_minutes, low, dtype=np.int64))


@dataclass
class WarmstartLmi:
    """``warmstart`` on LMI: every ``plan_every_min`` minutes ``warmers.plan.run.plan_run`` (the
    warmer's own function, strategy ``managed_instances``) on the history observed so far sets
    ``MinExecutionEnvironments`` for the forecast window; AWS's reactive scaling works above it.

    Attributes
    ----------
    floor : int
        The configured minimum (AWS's default 3).
    budget_usd_per_hour : float
        Most the minimum's instance-time may cost per hour.
    lead_min : int
        Forecast lead, minutes: at least the LMI scale-out lead.
    """

    settings: LmiSettings = field(default_factory=LmiSettings)
    floor: int = DEFAULT_MIN_EXECUTION_ENVIRONMENTS
    cap: int = 15_000
    budget_usd_per_hour: float = 50.0
    plan_every_min: int = 1
    lead_min: int = int(SCALE_OUT_LEAD_MIN)
    name: str = "warmstart lmi"
    keep_plans: bool = False
    plans: dict[str, list[WarmPlan]] = field(default_factory=dict, repr=False)

    def schedule(self, workload: Workload, observed: Observed) -> np.ndarray:
        """``(n_minutes,)`` minimum requested in each minute (from the plans)."""
        from warmers.config import WarmerConfig
        from warmers.forecast import ForecastConfig
        from warmers.plan.policy import AliasPolicy, PlannerConfig
        from warmers.plan.run import AccountLimits, plan_run
        from warmers.simulator.warmstart_policy import observed_series

        policy = AliasPolicy(function_name=workload.function_id, alias="live",
                             strategy="managed_instances", memory_mb=workload.memory_mb,
                             floor=self.floor, cap=self.cap,
                             budget_usd_per_hour=self.budget_usd_per_hour,
                             managed_instances=self.settings)
        planner = PlannerConfig()
        # the forecast's origin is the last observed minute (m - 1): lead + 1 reaches the first
        # minute the minimum requested at m is usable in (m + lead)
        forecast = ForecastConfig(lead_min=self.lead_min + 1, window_min=self.plan_every_min,
                                  quantiles=(0.5, 0.9, 0.95, 0.99),
                                  planning_quantile=planner.planning_quantile)
        config = WarmerConfig(policies=(policy,), forecast=forecast, planner=planner)
        n = workload.n_minutes
        minimum = np.full(n, self.floor, dtype=np.int64)
        previous: WarmPlan | None = None
        plans: list[WarmPlan] = []
        for m in range(0, n, self.plan_every_min):
            plan = plan_run({policy.key: observed_series(policy, observed, m)},
                            {policy.key: previous}, AccountLimits.lambda_default(), config,
                            m * 60.0).aliases[0].plan
            previous = plan
            plans.append(plan)
            minimum[m:m + self.plan_every_min] = plan.min_execution_environments
        if self.keep_plans:
            self.plans[workload.function_id] = plans
        return minimum

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        return _controls(self.settings, self.schedule(workload, observed))
