"""Planner: forecast + cost model + policy -> a frozen :class:`WarmPlan` per alias.

Pure: no I/O, never reads the clock (``now_s`` is passed in). Decisions, in order:

1. strategy ``none`` / ``snapstart`` -> nothing (SnapStart and provisioned concurrency cannot be
   combined on one function: https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html).
2. no forecast (metrics unavailable) -> keep the last good plan, clamped to floor/cap/budget.
3. strategy ``ping`` -> warm pings with concurrency N = ceil(forecast at the planning quantile)
   every ``ping_interval_s`` when the forecast says an invocation may come, else nothing.
4. strategy ``provisioned``: provisioned concurrency only as far as it pays. The forecast peak
   N = ceil(forecast at the planning quantile) is what would cover the window; the planner buys
   the largest k <= N whose expected utilization ``E[min(C, k)] / k`` is at least the cost
   model's break-even (about 60 %), with C, the requests in flight, Poisson with the mean
   ``busy_concurrency`` (M/G/infinity; :func:`expected_utilization`). Such a k costs no more than
   on demand for the same load. Then hysteresis (raise at once; lower only by at least
   ``scale_down_fraction`` and after ``scale_down_cooldown_s``, to the highest value wanted during
   that window - the scale-down stabilization window of the Kubernetes HPA) and the clamps:
   floor <= value <= cap, hourly charge <= budget, never more than the account's unreserved
   concurrency headroom. Sparse functions (active in fewer than ``sparse_active_fraction`` of
   minutes, floor 0) skip provisioned concurrency. With ``AliasPolicy.objective`` ``sla`` the
   planner buys the whole cover N instead (break-even or not; same hysteresis and clamps): for
   agents whose on-demand cold starts break their SLA and cannot use SnapStart.
5. no provisioned concurrency -> warm pings x N when they cost less than the cold starts they
   may avoid (N environments in each window with an expected invocation, each cold start valued
   at ``PlannerConfig.cold_start_usd_per_gb``), else nothing; the cold starts left are the
   runtime's (SnapStart restores, admission: overflow or degradation).

Why not provisioned concurrency to cover every peak: an environment kept warm by pings avoids
the same cold starts for about a microdollar per ping, so provisioned concurrency is bought for
the GB-s it saves against on demand, not for the cold starts.

A whole run: :func:`plan_run` (series of every alias, their previous plans, the account limits,
the config, the time) -> :class:`RunPlan`, the one plan the warmer Lambda
(``warmers.runner.run_once``), ``warmstart plan`` and the simulator's warmstart policy all
make; ``warmers.runner.apply`` makes it true (a dry run does not). Aliases are planned in config
order and share the account's unreserved concurrency; each number of the plan comes with a
:class:`Step` saying where it came from. Plan then execute, as in Chalice's deployer
(``chalice/deploy/planner.py``, ``executor.py``): the plan is inert data, the executor the only
part that calls AWS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from warmers.cost import CostModel
from warmers.degradation import Level, sustained_level
from warmers.forecast import (
    AliasForecast,
    ForecastConfig,
    ForecastError,
    QuantileForecast,
    forecast_alias,
)
from warmers.pricing import load_prices
from warmers.series import PERIOD_S, MetricSeries, littles_law_concurrency

if TYPE_CHECKING:
    from warmers.lmi import LmiSettings

Strategy = Literal["provisioned", "snapstart", "ping", "managed_instances", "none"]
Action = Literal["provisioned", "ping", "managed_instances", "none"]
STRATEGIES: tuple[str, ...] = ("provisioned", "snapstart", "ping", "managed_instances", "none")
Objective = Literal["cost", "sla"]
#: What provisioned concurrency is bought for (``AliasPolicy.objective``).
OBJECTIVES: tuple[str, ...] = ("cost", "sla")

#: Lambda keeps at least this much concurrency unreserved in an account.
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
UNRESERVED_MINIMUM = 100

#: Lambda's default concurrency quota per Region (an account whose limits are not read: a
#: trace, the simulator). https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
DEFAULT_ACCOUNT_CONCURRENCY = 1_000

#: Invocations one execution environment serves at a time, so environments = concurrency.
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
CONCURRENCY_PER_ENVIRONMENT = 1


class PlanError(ValueError):
    """A policy cannot be planned as configured (the message says what to change)."""


@dataclass(frozen=True)
class AliasPolicy:
    """What the warmer may do for one alias.

    Parameters
    ----------
    function_name, alias : str
        The alias the plan applies to; ``$LATEST`` is refused.
    strategy : {"provisioned", "snapstart", "ping", "managed_instances", "none"}
        ``managed_instances``: Lambda Managed Instances; ``floor``/``cap`` are then the minimum
        and maximum execution environments, the budget pays instance-time
        (``warmers.lmi.plan_managed_instances``).
    memory_mb : int
        Function memory (prices scale with it).
    floor, cap : int
        Provisioned concurrency bounds (environments).
    budget_usd_per_hour : float
        Most the warm state may add per hour (PC configured charge, or ping cost).
    ping_interval_s, ping_hold_ms : int
        Warm-ping period and how long each ping holds its environment.
    sparse_active_fraction : float
        Functions active in fewer minutes than this get pings instead of PC (when floor is 0).
    degradation_parameter : str or None
        SSM parameter name the degradation level is published to (None: not published).
    available_concurrency : int or None
        Concurrency the alias can use (reserved concurrency); None: the account limit.
    objective : {"cost", "sla"}
        What provisioned concurrency is bought for (strategy ``provisioned``). ``cost`` (the
        default): only the environments whose expected utilization reaches the break-even, so
        PC never costs more than on demand. ``sla``: enough to cover the forecast peak at the
        planning quantile, break-even or not, within floor, cap, budget and account headroom:
        for agents whose on-demand cold starts break their SLA and that cannot use SnapStart
        (``warmers.strategy``); the plan says what the cover costs above the break-even.
    sla_ms : float or None
        The alias's SLA, ms (its P0 routes'): with ``cold_start_p50_ms`` and
        ``cold_start_p95_ms``, the endpoint planner counts only the cold starts that would
        answer late without the endpoint (:func:`cold_start_late_fraction`); None: every new
        environment is counted as a failed answer (the conservative reading).
    cold_start_p50_ms, cold_start_p95_ms : float or None
        What a cold start of the deployed strategy adds before the agent can answer, ms: the
        calibrated init on demand, the restore under SnapStart (``warmstart calibrate``).
    managed_instances : warmers.lmi.LmiSettings or None
        Instance type, vCPUs and concurrency per environment, the capacity provider's vCPU
        limit (strategy ``managed_instances``; None: the defaults).

    Raises
    ------
    PlanError
        On ``$LATEST``, an unknown strategy or objective, negative bounds or floor > cap, a
        non-positive SLA, or cold-start times out of order.
    """

    function_name: str
    alias: str
    strategy: Strategy = "provisioned"
    memory_mb: int = 1024
    floor: int = 0
    cap: int = 50
    budget_usd_per_hour: float = 1.0
    ping_interval_s: int = 300
    ping_hold_ms: int = 75
    sparse_active_fraction: float = 0.05
    degradation_parameter: str | None = None
    available_concurrency: int | None = None
    objective: Objective = "cost"
    sla_ms: float | None = None
    cold_start_p50_ms: float | None = None
    cold_start_p95_ms: float | None = None
    managed_instances: LmiSettings | None = None

    def __post_init__(self) -> None:
        where = f"{self.function_name}:{self.alias}"
        if self.sla_ms is not None and not (math.isfinite(self.sla_ms) and self.sla_ms > 0):
            raise PlanError(f"{where}: sla_ms must be a finite number of ms > 0, got "
                            f"{self.sla_ms!r}")
        if (self.cold_start_p50_ms is None) != (self.cold_start_p95_ms is None):
            raise PlanError(f"{where}: cold_start_p50_ms and cold_start_p95_ms go together")
        if self.cold_start_p50_ms is not None and self.cold_start_p95_ms is not None and not (
                0 <= self.cold_start_p50_ms <= self.cold_start_p95_ms
                and math.isfinite(self.cold_start_p95_ms)):
            raise PlanError(f"{where}: need 0 <= cold_start_p50_ms <= cold_start_p95_ms, got "
                            f"{self.cold_start_p50_ms} and {self.cold_start_p95_ms}")
        if not self.function_name or not self.alias:
            raise PlanError("AliasPolicy needs a function_name and an alias")
        if self.objective not in OBJECTIVES:
            raise PlanError(
                f"{self.function_name}:{self.alias}: objective must be one of {OBJECTIVES}, "
                f"got {self.objective!r}")
        if self.alias == "$LATEST":
            raise PlanError(
                f"{self.function_name}: provisioned concurrency cannot target $LATEST; "
                "give the alias (e.g. 'live') that points at a published version"
            )
        if self.strategy not in STRATEGIES:
            raise PlanError(
                f"{self.function_name}:{self.alias}: strategy must be one of {STRATEGIES}, "
                f"got {self.strategy!r}"
            )
        if self.floor < 0 or self.cap < 0 or self.floor > self.cap:
            raise PlanError(
                f"{self.function_name}:{self.alias}: need 0 <= floor <= cap, got floor="
                f"{self.floor} cap={self.cap}"
            )
        if self.budget_usd_per_hour < 0 or self.memory_mb < 128:
            raise PlanError(
                f"{self.function_name}:{self.alias}: budget_usd_per_hour must be >= 0 and "
                f"memory_mb >= 128 (got {self.budget_usd_per_hour}, {self.memory_mb})"
            )
        if self.ping_interval_s < 60 or self.ping_hold_ms < 0:
            raise PlanError(
                f"{self.function_name}:{self.alias}: ping_interval_s must be >= 60 (the warmer "
                "runs every minute) and ping_hold_ms >= 0"
            )

    @property
    def key(self) -> str:
        return f"{self.function_name}:{self.alias}"

    @property
    def plans_warmth(self) -> bool:
        """Whether the warmer forecasts and actuates this alias (``provisioned``, ``ping``,
        ``managed_instances``)."""
        return self.strategy in ("provisioned", "ping", "managed_instances")

    @property
    def needs_metrics(self) -> bool:
        """Whether a run reads this alias's metrics (to plan, or for its degradation level)."""
        return self.plans_warmth or bool(self.degradation_parameter)


@dataclass(frozen=True)
class PlannerConfig:
    """Planner knobs.

    Parameters
    ----------
    planning_quantile : float
        Forecast level provisioned (must be one of the forecast's quantile levels).
    scale_down_fraction : float
        Lower PC only when the new value is at least this fraction below the current one.
    scale_down_cooldown_s : float
        Lower PC only this long after the last change, and never below the highest value wanted
        within this window (provisioned concurrency is billed in 5-minute steps,
        https://aws.amazon.com/lambda/pricing/; stabilization window as in the Kubernetes HPA,
        https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#stabilization-window).
    cost : CostModel
    cold_start_usd_per_gb : float
        What one avoided cold start is worth, per GB of function memory, when warm pings are
        weighed against the cold starts they may avoid. Default: the SnapStart restore price
        per GB (``snapstart_restore_gb`` in ``warmers/prices.json``), what AWS charges to make one
        cold start fast; add the billed init (init seconds x on-demand GB-s price) when it is
        measured (``warmstart calibrate``).
    """

    planning_quantile: float = 0.95
    scale_down_fraction: float = 0.1
    scale_down_cooldown_s: float = 600.0
    cost: CostModel = field(default_factory=CostModel.us_east_1)
    cold_start_usd_per_gb: float = field(
        default_factory=lambda: load_prices().price("snapstart_restore_gb").usd)

    def __post_init__(self) -> None:
        if not 0.0 < self.planning_quantile < 1.0:
            raise PlanError(f"planning_quantile must be in (0, 1), got {self.planning_quantile}")
        if not self.cold_start_usd_per_gb >= 0.0:
            raise PlanError("cold_start_usd_per_gb must be >= 0, got "
                            f"{self.cold_start_usd_per_gb}")


@dataclass(frozen=True)
class WarmPlan:
    """What the actuators should make true for one alias, and why.

    Attributes
    ----------
    action : {"provisioned", "ping", "none"}
    provisioned_concurrency : int
        Environments to keep provisioned on the alias (0 with ``ping``/``none``).
    ping_concurrency, ping_interval_s : int
        Warm pings: N concurrent pings every interval (0 unless ``ping``).
    hourly_cost_usd : float
        Added hourly charge of this plan (PC configured, or pings).
    demand : float
        Forecast concurrency at the planning quantile (NaN without a forecast).
    issued_at_s, changed_at_s : float
        Epoch seconds of this plan, and of the last change of its value (for the cooldown).
    reason : str
        Human-readable decision trail.
    fallback : bool
        True when planned without fresh metrics (last good plan kept).
    """

    function_name: str
    alias: str
    action: Action
    provisioned_concurrency: int
    ping_concurrency: int
    ping_interval_s: int
    hourly_cost_usd: float
    demand: float
    method: str
    issued_at_s: float
    changed_at_s: float
    reason: str
    fallback: bool = False
    #: most PC target tracking may scale to (min of cap and budget); 0 unless provisioned
    ceiling: int = 0
    #: (epoch s, wanted PC) of recent runs inside the stabilization window
    recent_wanted: tuple[tuple[float, int], ...] = ()
    #: Lambda Managed Instances: MinExecutionEnvironments to set (0 unless managed_instances)
    min_execution_environments: int = 0

    @property
    def key(self) -> str:
        return f"{self.function_name}:{self.alias}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if isinstance(d["demand"], float) and math.isnan(d["demand"]):
            d["demand"] = None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WarmPlan:
        """Rebuild a plan saved by :meth:`to_dict`.

        Raises
        ------
        PlanError
            If a field is missing or has the wrong type.
        """
        try:
            demand = data.get("demand")
            return cls(
                function_name=str(data["function_name"]), alias=str(data["alias"]),
                action=data["action"], provisioned_concurrency=int(data["provisioned_concurrency"]),
                ping_concurrency=int(data["ping_concurrency"]),
                ping_interval_s=int(data["ping_interval_s"]),
                hourly_cost_usd=float(data["hourly_cost_usd"]),
                demand=float("nan") if demand is None else float(demand),
                method=str(data["method"]), issued_at_s=float(data["issued_at_s"]),
                changed_at_s=float(data["changed_at_s"]), reason=str(data["reason"]),
                fallback=bool(data.get("fallback", False)),
                ceiling=int(data.get("ceiling", 0)),
                recent_wanted=tuple((float(t), int(v))
                                    for t, v in data.get("recent_wanted", ())),
                min_execution_environments=int(data.get("min_execution_environments", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"saved warm plan is malformed ({exc!r}); it will be ignored") from exc


def budget_units(policy: AliasPolicy, cost: CostModel) -> int:
    """Most provisioned environments the hourly budget pays for."""
    unit = cost.pc_hourly_usd(1, policy.memory_mb)
    return math.floor(policy.budget_usd_per_hour / unit + 1e-9) if unit > 0 else policy.cap


def expected_utilization(busy: float, units: int) -> float:
    """Expected utilization ``E[min(C, units)] / units`` of ``units`` provisioned environments.

    Parameters
    ----------
    busy : float
        Mean requests in flight (Little's law: arrival rate x mean duration), >= 0.
    units : int
        Provisioned environments, >= 1.

    Returns
    -------
    float
        In [0, 1]. C, the number of requests in flight, is Poisson with mean ``busy`` (the
        number in system of an M/G/infinity queue, whatever the duration distribution);
        ``E[min(C, k)] = sum_{j=1..k} P(C >= j)``. A steady (less variable) load uses the
        environments more than this; a burstier one less.

    Raises
    ------
    ValueError
        If ``units < 1`` or ``busy`` is negative or not finite.

    References
    ----------
    The M/G/infinity queue (Poisson arrivals, any service time): its number in system is
    Poisson with mean lambda E[S] (S. M. Ross, Introduction to Probability Models, the
    infinite-server Poisson queue); J. D. C. Little, Operations Research 9(3), 1961.
    """
    if units < 1:
        raise ValueError(f"units must be >= 1, got {units}")
    if not (math.isfinite(busy) and busy >= 0.0):
        raise ValueError(f"busy must be a finite mean concurrency >= 0, got {busy}")
    if busy == 0.0:
        return 0.0
    # P(C >= j) = 1 - P(C <= j - 1); pmf in log space (no underflow for large means)
    cdf = 0.0
    served = 0.0
    log_busy = math.log(busy)
    for j in range(1, units + 1):
        cdf += math.exp((j - 1) * log_busy - busy - math.lgamma(j))
        served += max(0.0, 1.0 - cdf)
    return min(1.0, served / units)


def units_that_pay(busy: float, cover: int, break_even: float) -> int:
    """Largest ``k <= cover`` with :func:`expected_utilization` ``>= break_even`` (0 if none).

    Utilization falls as ``k`` grows, so the search stops at the first ``k`` below it.
    """
    if cover < 1 or not (math.isfinite(busy) and busy > 0.0):
        return 0
    # the running sum of P(C >= j) of expected_utilization, one pass
    cdf = served = 0.0
    log_busy = math.log(busy)
    k = 0
    for j in range(1, cover + 1):
        cdf += math.exp((j - 1) * log_busy - busy - math.lgamma(j))
        served += max(0.0, 1.0 - cdf)
        if min(1.0, served / j) < break_even:
            break
        k = j
    return k


def account_headroom(unreserved_concurrency: int, current_pc: int) -> int:
    """PC this alias may hold without pushing unreserved concurrency below its minimum.

    Parameters
    ----------
    unreserved_concurrency : int
        ``AccountLimit.UnreservedConcurrentExecutions`` from ``GetAccountSettings`` (already
        net of the PC currently allocated).
    current_pc : int
        PC currently allocated to this alias (it is given back when the value changes).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html (at least 100
    unreserved) and https://docs.aws.amazon.com/lambda/latest/api/API_GetAccountSettings.html
    """
    return max(0, unreserved_concurrency + current_pc - UNRESERVED_MINIMUM)


@dataclass(frozen=True)
class Step:
    """One number of a plan and where it came from (``warmstart plan --explain``).

    Attributes
    ----------
    name : str
        What the number is (``demand``, ``cover``, ``busy``, ``break_even``, ``pays``,
        ``hysteresis``, ``floor``, ``cap``, ``budget_units``, ``headroom``,
        ``provisioned_concurrency``, ``ping_concurrency``, ``hourly_cost_usd``, ...).
    value : int, float, str or None
        The number (None: unknown).
    source : str
        Where it came from: the forecast quantile, the policy bound, the price, the rule.
    """

    name: str
    value: int | float | str | None
    source: str


def _nothing(policy: AliasPolicy, *, now_s: float, previous: WarmPlan | None, reason: str,
             steps: list[Step], method: str = "-", demand: float = float("nan"),
             fallback: bool = False) -> WarmPlan:
    changed = previous.changed_at_s if previous and previous.action == "none" else now_s
    steps.append(Step("action", "none", reason.rsplit("; ", 1)[-1]))
    return WarmPlan(policy.function_name, policy.alias, "none", 0, 0, 0, 0.0, demand, method,
                    now_s, changed, reason, fallback)


def _bound(bound: bool) -> str:
    return "binding" if bound else "not binding"


def _clamp_bounds(value: int, *, floor: int, cap: int, by_budget: int, budget_usd_h: float,
                  unit_usd_h: float, unit: str, unit_short: str, owner: str,
                  reasons: list[str], steps: list[Step]) -> int:
    """floor <= value <= cap, and no more units than the hourly budget pays for (the same
    rules for provisioned concurrency and for the overflow endpoint's instances)."""
    steps.append(Step("floor", floor, f"{owner}.floor ({_bound(value < floor)})"))
    if value < floor:
        reasons.append(f"raised to floor {floor}")
        value = floor
    steps.append(Step("cap", cap, f"{owner}.cap ({_bound(value > cap)})"))
    if value > cap:
        reasons.append(f"capped at {cap}")
        value = cap
    steps.append(Step("budget_units", by_budget,
                      f"floor(budget ${budget_usd_h:.2f}/h / ${unit_usd_h:.4f}/h per {unit}) "
                      f"({_bound(value > by_budget)})"))
    if value > by_budget:
        reasons.append(f"limited to {by_budget} by the budget ${budget_usd_h:.2f}/h "
                       f"(${unit_usd_h:.4f}/h per {unit_short})")
        value = by_budget
    return value


def _clamp_pc(value: int, policy: AliasPolicy, config: PlannerConfig, headroom: int | None,
              previous_pc: int, reasons: list[str], steps: list[Step]) -> int:
    value = _clamp_bounds(value, floor=policy.floor, cap=policy.cap,
                          by_budget=budget_units(policy, config.cost),
                          budget_usd_h=policy.budget_usd_per_hour,
                          unit_usd_h=config.cost.pc_hourly_usd(1, policy.memory_mb),
                          unit=f"provisioned environment of {policy.memory_mb} MB",
                          unit_short="environment", owner="AliasPolicy", reasons=reasons,
                          steps=steps)
    if headroom is None:
        keep = max(previous_pc, policy.floor)
        steps.append(Step("headroom", None, f"account headroom unknown: at most {keep} (current "
                                            f"or floor) ({_bound(value > keep)})"))
        if value > keep:
            reasons.append(
                f"account headroom unknown: not raised above {keep} (current or floor)")
            value = keep
    else:
        steps.append(Step("headroom", headroom, "the account's unreserved concurrency left to "
                                                f"this alias ({_bound(value > headroom)})"))
        if value > headroom:
            reasons.append(f"limited to {headroom} by the account's unreserved concurrency")
            value = headroom
    return value


def _hysteresis(desired: int, *, current: int, holds: bool, changed_at_s: float,
                recent_wanted: tuple[tuple[float, int], ...], config: PlannerConfig,
                now_s: float, reasons: list[str], what: str = "PC",
                ) -> tuple[int, tuple[tuple[float, int], ...], str]:
    """Raise at once; lower only by at least ``scale_down_fraction`` and after
    ``scale_down_cooldown_s``, to the highest value wanted in that window (the Kubernetes HPA's
    scale-down stabilization window). Shared by provisioned concurrency and the endpoint.

    Parameters
    ----------
    desired : int
        This run's wanted value.
    current, holds, changed_at_s, recent_wanted
        The value in force, whether one is in force (``holds``), when it last changed (epoch
        s) and the (epoch s, wanted) pairs of the earlier runs.

    Returns
    -------
    tuple
        (value, the recent wanted values including this run's, the hysteresis step's text).
    """
    window_start = now_s - config.scale_down_cooldown_s
    recent = tuple((t, v) for t, v in recent_wanted if t > window_start) + ((now_s, desired),)
    value = desired
    text = f"not applied: no lower value than the current {what} wanted"
    if holds and desired < current:
        stable = max(v for _, v in recent)
        small = current - stable < max(1.0, config.scale_down_fraction * current)
        cooling = now_s - changed_at_s < config.scale_down_cooldown_s
        if small or cooling:
            why = (f"highest wanted in the last {config.scale_down_cooldown_s:.0f} s is "
                   f"{stable}" if small
                   else f"last change {now_s - changed_at_s:.0f} s ago "
                        f"< {config.scale_down_cooldown_s:.0f} s cooldown")
            reasons.append(f"hysteresis: kept {current} instead of {desired} ({why})")
            text = (f"kept the current {current} instead of {desired} ({why}; "
                    f"PlannerConfig.scale_down_fraction {config.scale_down_fraction:g}, "
                    f"scale_down_cooldown_s {config.scale_down_cooldown_s:g})")
            value = current
        else:
            value = stable
            text = (f"lowered from {current} to {stable}, the highest wanted in the "
                    f"{config.scale_down_cooldown_s:.0f} s stabilization window")
            if stable > desired:
                reasons.append(f"lowered to {stable}, the highest wanted in the stabilization "
                               "window")
    return value, recent, text


def plan_alias(forecast: AliasForecast | None, policy: AliasPolicy,
               config: PlannerConfig | None = None, *, now_s: float,
               previous: WarmPlan | None = None, headroom: int | None = None) -> WarmPlan:
    """Plan one alias (:func:`explain_alias` without the explanation).

    Parameters
    ----------
    forecast : AliasForecast or None
        None when metrics were unavailable: the last good plan is kept (clamped).
    policy : AliasPolicy
    config : PlannerConfig, optional
    now_s : float
        Epoch seconds (passed in).
    previous : WarmPlan or None
        The last plan for this alias (for hysteresis and the fallback).
    headroom : int or None
        Most PC the account allows this alias (:func:`account_headroom`); None = unknown, in
        which case PC is never raised above the current value or the floor.

    Returns
    -------
    WarmPlan

    Raises
    ------
    PlanError
        If the floor alone costs more than the budget, or the planning quantile is not one of
        the forecast's levels.
    """
    return explain_alias(forecast, policy, config, now_s=now_s, previous=previous,
                         headroom=headroom)[0]


def explain_alias(forecast: AliasForecast | None, policy: AliasPolicy,
                  config: PlannerConfig | None = None, *, now_s: float,
                  previous: WarmPlan | None = None,
                  headroom: int | None = None) -> tuple[WarmPlan, tuple[Step, ...]]:
    """Plan one alias and say where each number came from.

    Same parameters, result and errors as :func:`plan_alias`; the second element lists the
    numbers in the order the planner derived them.
    """
    steps: list[Step] = []
    plan = _plan(forecast, policy, config or PlannerConfig(), now_s=now_s, previous=previous,
                 headroom=headroom, steps=steps)
    return plan, tuple(steps)


def check_policy(policy: AliasPolicy, config: PlannerConfig) -> None:
    """Refuse a policy whose floor alone costs more than its budget.

    Raises
    ------
    PlanError
        With what to change.
    """
    cost = config.cost
    if policy.strategy == "managed_instances":
        from warmers.lmi import check_lmi_policy

        check_lmi_policy(policy)
    if policy.strategy == "provisioned" and policy.floor > budget_units(policy, cost):
        raise PlanError(
            f"{policy.key}: floor {policy.floor} costs "
            f"${cost.pc_hourly_usd(policy.floor, policy.memory_mb):.4f}/h, above the budget "
            f"${policy.budget_usd_per_hour:.2f}/h; raise the budget or lower the floor")


def _plan(forecast: AliasForecast | None, policy: AliasPolicy, config: PlannerConfig, *,
          now_s: float, previous: WarmPlan | None, headroom: int | None,
          steps: list[Step]) -> WarmPlan:
    cost = config.cost
    check_policy(policy, config)
    steps.append(Step("strategy", policy.strategy, "AliasPolicy.strategy"))
    if policy.strategy == "none":
        return _nothing(policy, now_s=now_s, previous=previous, reason="strategy none",
                        steps=steps)
    if policy.strategy == "snapstart":
        return _nothing(policy, now_s=now_s, previous=previous, steps=steps,
                        reason="strategy snapstart: restores cover cold starts; provisioned "
                               "concurrency cannot be combined with SnapStart")
    if policy.strategy == "managed_instances":
        from warmers.lmi import plan_managed_instances

        return plan_managed_instances(forecast, policy, config, now_s=now_s, previous=previous,
                                      steps=steps)
    previous_pc = previous.provisioned_concurrency if previous else 0
    if forecast is None:
        return _fallback(policy, config, now_s=now_s, previous=previous, headroom=headroom,
                         steps=steps)

    fc = forecast.concurrency
    demand, head = demand_step(fc, config, steps)
    sparse = fc.active_fraction < policy.sparse_active_fraction and policy.floor == 0
    if policy.strategy == "ping" or sparse:
        why = "strategy ping" if policy.strategy == "ping" else (
            f"sparse: active in {fc.active_fraction:.1%} of minutes "
            f"< {policy.sparse_active_fraction:.0%}, no provisioned concurrency")
        if sparse and policy.strategy != "ping":
            steps.append(Step("active_fraction", fc.active_fraction,
                              "minutes with a value > 0 in the history, below "
                              f"AliasPolicy.sparse_active_fraction "
                              f"{policy.sparse_active_fraction:g}: pings, not PC"))
        return _ping_or_nothing(policy, config, fc, demand, [why, head], now_s=now_s,
                                previous=previous, weigh=policy.strategy != "ping", steps=steps)

    reasons = [head]
    cover = max(0, math.ceil(demand / CONCURRENCY_PER_ENVIRONMENT - 1e-9))
    steps.append(Step("cover", cover,
                      f"ceil(demand {demand:.2f} / {CONCURRENCY_PER_ENVIRONMENT} invocation per "
                      "execution environment): environments that would cover the peak"))
    break_even = cost.utilization_break_even()
    steps.append(Step("break_even", break_even,
                      "utilization above which PC costs less than on demand: PC configured "
                      "GB-s price / (on-demand - PC duration GB-s price), "
                      "CostModel.utilization_break_even (tests/data/pricing.md)"))
    busy = forecast.busy_concurrency
    if math.isfinite(busy) and busy >= 0.0:
        busy_why = f"mean in flight {busy:.2f} (last hour, Little's law)"
    else:
        busy = max(0.0, fc.at(fc.quantiles[0]))
        busy_why = (f"mean in flight unknown: q{fc.quantiles[0]:g} of the peak {busy:.2f} used "
                    "(overestimates it)")
    steps.append(Step("busy", busy, busy_why))
    desired = units_that_pay(busy, cover, break_even)
    steps.append(Step("pays", desired,
                      f"largest k <= cover {cover} whose expected utilization E[min(C, k)] / k "
                      f">= break-even {break_even:.0%}, C ~ Poisson(busy {busy:.2f}) "
                      "(M/G/infinity)"))
    if policy.objective == "sla" and desired < cover:
        util_cover = expected_utilization(busy, cover) if cover else 0.0
        reasons.append(
            f"{busy_why}: objective sla: cover the peak with {cover} ({util_cover:.0%} used "
            f"< break-even {break_even:.0%}; {desired} would pay)")
        steps.append(Step("objective", cover,
                          f"AliasPolicy.objective sla: cover {cover} instead of the {desired} "
                          "that pay, so no request of the forecast peak waits for an init"))
        desired = cover
    elif desired < cover:
        util_cover = expected_utilization(busy, cover) if cover else 0.0
        reasons.append(
            f"{busy_why}: covering the peak with {cover} would be {util_cover:.0%} used "
            f"< break-even {break_even:.0%}; {desired} pay")
    else:
        reasons.append(busy_why)
    holds = previous is not None and previous.action == "provisioned"
    value, recent_wanted, hysteresis = _hysteresis(
        desired, current=previous_pc, holds=holds,
        changed_at_s=previous.changed_at_s if previous is not None else now_s,
        recent_wanted=previous.recent_wanted if previous is not None else (), config=config,
        now_s=now_s, reasons=reasons)
    steps.append(Step("hysteresis", value, hysteresis))
    value = _clamp_pc(value, policy, config, headroom, previous_pc, reasons, steps)
    if value == 0:
        reasons.append("no provisioned concurrency")
        return _ping_or_nothing(policy, config, fc, demand, reasons, now_s=now_s,
                                previous=previous, weigh=True, steps=steps)
    utilization = expected_utilization(busy, value)
    reasons.append(
        f"PC {value}: expected utilization {utilization:.0%} "
        f"{'>=' if utilization >= break_even else '<'} break-even {break_even:.0%} "
        f"({'no dearer than' if utilization >= break_even else 'costs more than'} on demand)")
    changed = (previous.changed_at_s if previous is not None and previous.action == "provisioned"
               and previous.provisioned_concurrency == value else now_s)
    hourly = cost.pc_hourly_usd(value, policy.memory_mb)
    ceiling = _ceiling(policy, config, value)
    steps += [
        Step("provisioned_concurrency", value, "after hysteresis, floor, cap, budget and "
                                               f"headroom; expected utilization {utilization:.0%}"),
        Step("ceiling", ceiling, "most target tracking may scale to: max(value, min(cap, "
                                 "budget_units))"),
        Step("hourly_cost_usd", hourly, f"{value} x ${cost.pc_hourly_usd(1, policy.memory_mb):.4f}"
                                        "/h (PC configured GB-s price x memory x 3600 s, "
                                        "warmers/prices.json)"),
    ]
    return WarmPlan(policy.function_name, policy.alias, "provisioned", value, 0, 0,
                    hourly, demand, fc.method, now_s,
                    changed, "; ".join(reasons), ceiling=ceiling,
                    recent_wanted=recent_wanted)


def demand_step(fc: QuantileForecast, config: PlannerConfig,
                steps: list[Step]) -> tuple[float, str]:
    """The forecast peak at the planning quantile, with its step and reason text (shared by
    provisioned concurrency, pings and the LMI minimum, ``warmers.lmi``).

    Returns
    -------
    tuple of (float, str)
        Concurrency at ``config.planning_quantile`` over the forecast window, and the reason's
        head.

    Raises
    ------
    PlanError
        If the planning quantile is not one of the forecast's levels.
    """
    if config.planning_quantile not in fc.quantiles:
        raise PlanError(f"planning quantile {config.planning_quantile} is not one of the "
                        f"forecast's levels {fc.quantiles}")
    demand = fc.at(config.planning_quantile)
    top = fc.values[-1]
    window = f"minutes +{fc.lead_min}..+{fc.lead_min + fc.window_min}"
    head = (f"forecast {fc.method} q{config.planning_quantile:g}={demand:.2f} concurrent "
            f"(q{fc.quantiles[-1]:g}={top:.2f}) for {window}")
    steps.append(Step("demand", demand, f"forecast {fc.method}: quantile "
                                        f"{config.planning_quantile:g} (PlannerConfig."
                                        "planning_quantile) of the peak concurrency over "
                                        f"{window}, {fc.n_history_min} minutes of history"
                                        + (f" ({fc.reason})" if fc.reason else "")))
    return demand, head


def chance_of_invocation(fc: QuantileForecast) -> float:
    """Probability that the window sees an invocation, read off the forecast's quantiles.

    ``1 - q`` for the highest level ``q`` whose forecast peak is 0 (1.0 when even the lowest
    level is above 0, 0.0 when all are 0): a lower bound between the stored levels.
    """
    zero = [q for q, v in zip(fc.quantiles, fc.values, strict=True) if v <= 0.0]
    if not zero:
        return 1.0
    return 1.0 - max(zero)


def _ping_or_nothing(policy: AliasPolicy, config: PlannerConfig, fc: QuantileForecast,
                     demand: float, reasons: list[str], *, now_s: float,
                     previous: WarmPlan | None, weigh: bool, steps: list[Step]) -> WarmPlan:
    """Warm pings x ceil(demand), or nothing when no invocation is expected, the budget allows
    none, or (``weigh``) they cost more than the cold starts they may avoid."""
    cost = config.cost
    top = fc.values[-1]
    if top <= 0:
        return _nothing(policy, now_s=now_s, previous=previous, method=fc.method,
                        demand=demand, steps=steps, reason="; ".join(
                            [*reasons, "no invocation expected: no pings"]))
    n = max(1, math.ceil(demand - 1e-9))
    per = cost.ping_hourly_usd(1, policy.ping_interval_s, policy.ping_hold_ms, policy.memory_mb)
    limit = min(policy.cap if policy.cap > 0 else n,
                int(policy.budget_usd_per_hour // per) if per > 0 else n)
    steps.append(Step("ping_limit", limit,
                      f"min(cap {policy.cap}, floor(budget ${policy.budget_usd_per_hour:.2f}/h / "
                      f"${per:.2e}/h per pinged environment))"))
    reasons = list(reasons)
    if n > limit:
        reasons.append(f"ping concurrency limited to {limit} by cap/budget")
        n = limit
    if n <= 0:
        return _nothing(policy, now_s=now_s, previous=previous, method=fc.method, steps=steps,
                        demand=demand, reason="; ".join(reasons + ["budget allows no pings"]))
    if weigh:
        p = chance_of_invocation(fc)
        avoided_usd = (p * n * (60.0 / fc.window_min) * (policy.memory_mb / 1024.0)
                       * config.cold_start_usd_per_gb)
        steps += [
            Step("chance_of_invocation", p, "1 - the highest forecast quantile level whose "
                                            "peak is 0"),
            Step("cold_starts_avoided_usd_per_h", avoided_usd,
                 f"chance x {n} environments x {60.0 / fc.window_min:g} windows/h x "
                 f"{policy.memory_mb} MB x ${config.cold_start_usd_per_gb:.2e}/GB "
                 "(PlannerConfig.cold_start_usd_per_gb)"),
        ]
        if n * per > avoided_usd:
            dearer = (f"pings x{n} (${n * per:.2e}/h) cost more than the cold starts they may "
                      f"avoid (${avoided_usd:.2e}/h at {p:.0%} chance of an invocation per "
                      "window): no pings")
            return _nothing(policy, now_s=now_s, previous=previous, method=fc.method,
                            steps=steps, demand=demand, reason="; ".join([*reasons, dearer]))
        reasons.append(f"pings ${n * per:.2e}/h < cold starts they may avoid "
                       f"${avoided_usd:.2e}/h")
    same = previous is not None and previous.action == "ping" and previous.ping_concurrency == n
    reasons.append(f"warm pings x{n} every {policy.ping_interval_s} s")
    steps += [
        Step("ping_concurrency", n, f"ceil(demand {demand:.2f}), at least 1, at most ping_limit "
                                    f"{limit}: one ping per environment kept warm"),
        Step("ping_interval_s", policy.ping_interval_s, "AliasPolicy.ping_interval_s"),
        Step("hourly_cost_usd", n * per,
             f"{n} x ${per:.2e}/h (3600 / {policy.ping_interval_s} s requests of "
             f"{policy.ping_hold_ms} ms at {policy.memory_mb} MB, on-demand prices)"),
    ]
    return WarmPlan(policy.function_name, policy.alias, "ping", 0, n, policy.ping_interval_s,
                    n * per, demand, fc.method, now_s,
                    previous.changed_at_s if same and previous else now_s, "; ".join(reasons))


def _ceiling(policy: AliasPolicy, config: PlannerConfig, value: int) -> int:
    return max(value, min(policy.cap, budget_units(policy, config.cost)))


def _fallback(policy: AliasPolicy, config: PlannerConfig, *, now_s: float,
              previous: WarmPlan | None, headroom: int | None, steps: list[Step]) -> WarmPlan:
    """Metrics unavailable: keep the last good plan within floor, cap, budget and headroom."""
    if previous is None:
        reasons = ["metrics unavailable and no previous plan: floor only"]
        steps.append(Step("demand", None, reasons[0]))
        value = _clamp_pc(policy.floor, policy, config, headroom, policy.floor, reasons, steps)
        if value == 0:
            return _nothing(policy, now_s=now_s, previous=None, reason="; ".join(reasons),
                            steps=steps, fallback=True)
        hourly = config.cost.pc_hourly_usd(value, policy.memory_mb)
        steps += [Step("provisioned_concurrency", value, "the floor, clamped"),
                  Step("hourly_cost_usd", hourly, f"{value} x PC configured price")]
        return WarmPlan(policy.function_name, policy.alias, "provisioned", value, 0, 0,
                        hourly, float("nan"),
                        "fallback", now_s, now_s, "; ".join(reasons), fallback=True,
                        ceiling=_ceiling(policy, config, value))
    reasons = [f"metrics unavailable: kept the last good plan of {previous.issued_at_s:.0f}"]
    steps.append(Step("demand", None if math.isnan(previous.demand) else previous.demand,
                      reasons[0]))
    if previous.action == "provisioned" or policy.floor > 0:
        value = _clamp_pc(previous.provisioned_concurrency, policy, config, headroom,
                          previous.provisioned_concurrency, reasons, steps)
        if value == 0:
            return _nothing(policy, now_s=now_s, previous=previous, reason="; ".join(reasons),
                            steps=steps, fallback=True)
        hourly = config.cost.pc_hourly_usd(value, policy.memory_mb)
        steps += [Step("provisioned_concurrency", value,
                       f"the last good plan's {previous.provisioned_concurrency}, clamped"),
                  Step("hourly_cost_usd", hourly, f"{value} x PC configured price")]
        return replace(previous, action="provisioned", provisioned_concurrency=value,
                       ping_concurrency=0, ping_interval_s=0,
                       hourly_cost_usd=hourly,
                       issued_at_s=now_s, reason="; ".join(reasons), fallback=True,
                       ceiling=_ceiling(policy, config, value),
                       changed_at_s=previous.changed_at_s
                       if value == previous.provisioned_concurrency else now_s)
    steps.append(Step("action", previous.action, "the last good plan, unchanged"))
    return replace(previous, issued_at_s=now_s, reason="; ".join(reasons), fallback=True)


# --- one warmer run: every alias at once ---------------------------------------------------


@dataclass(frozen=True)
class AccountLimits:
    """The account's concurrency, as ``GetAccountSettings`` reports it.

    Attributes
    ----------
    unreserved_concurrency : int or None
        ``AccountLimit.UnreservedConcurrentExecutions`` (net of reserved concurrency and of the
        provisioned concurrency allocated now); None: unknown (PC is then never raised).
    concurrent_executions : int or None
        ``AccountLimit.ConcurrentExecutions`` (the Region's limit); the degradation level's
        available concurrency when the alias has no reserved concurrency.
    source : str
        Where the numbers came from (shown by ``--explain``).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/api/API_GetAccountSettings.html
    """

    unreserved_concurrency: int | None
    concurrent_executions: int | None
    source: str

    @classmethod
    def unknown(cls, why: str) -> AccountLimits:
        return cls(None, None, f"unknown: {why}")

    @classmethod
    def lambda_default(cls, allocated_pc: int = 0) -> AccountLimits:
        """Lambda's default quota (1,000 concurrent executions per Region, none reserved), with
        ``allocated_pc`` environments already provisioned in it (for a trace or a simulation,
        which have no account).

        References
        ----------
        https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
        """
        return cls(DEFAULT_ACCOUNT_CONCURRENCY - allocated_pc, DEFAULT_ACCOUNT_CONCURRENCY,
                   f"assumed: Lambda's default quota of {DEFAULT_ACCOUNT_CONCURRENCY:,} "
                   "concurrent executions per Region, none reserved")


@dataclass(frozen=True)
class MetricsMissing:
    """No usable metrics for one alias this run (the reason is shown and logged)."""

    reason: str


class RunConfig(Protocol):
    """What :func:`plan_run` reads of a configuration (``warmers.config.WarmerConfig``)."""

    @property
    def policies(self) -> tuple[AliasPolicy, ...]: ...

    @property
    def forecast(self) -> ForecastConfig: ...

    @property
    def planner(self) -> PlannerConfig: ...

    @property
    def endpoints(self) -> tuple[EndpointPolicy, ...]: ...


@dataclass(frozen=True)
class AliasRunPlan:
    """One alias in a :class:`RunPlan`: its plan, where each number came from, its level.

    Attributes
    ----------
    plan : WarmPlan
    strategy : str
        The policy's strategy (``provisioned`` and ``ping`` are actuated).
    steps : tuple of Step
        The plan's numbers in the order derived (account headroom first).
    notes : tuple of str
        Metrics missing or unusable (and why), zero traffic, the forecaster's notes.
    forecast : QuantileForecast or None
        The concurrency forecast planned on (None: no usable metrics, or not needed).
    degradation_parameter : str or None
        SSM parameter the level goes to (None: not published).
    degradation_level : str or None
        ``L0``..``L3`` from the last minutes' utilization of the available concurrency
        (``warmers.degradation.sustained_level``); None when not computed (see ``notes``).
    overflow_demand : AgentDemand or None
        What this alias adds to its endpoint's overflow demand (:func:`agent_overflow_demand`);
        None when it overflows to no endpoint or had no usable forecast.
    """

    plan: WarmPlan
    strategy: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    forecast: QuantileForecast | None = None
    degradation_parameter: str | None = None
    degradation_level: str | None = None
    overflow_demand: AgentDemand | None = None

    @property
    def key(self) -> str:
        return self.plan.key

    @property
    def actuates(self) -> bool:
        """Whether ``apply`` makes this plan true (strategies ``provisioned`` and ``ping``)."""
        return self.strategy in ("provisioned", "ping")


@dataclass(frozen=True)
class RunPlan:
    """Everything one warmer run decides, before anything is applied (Chalice's plan stage).

    Built by :func:`plan_run`, applied by ``warmers.runner.apply``; a dry run stops here.

    Attributes
    ----------
    issued_at_s : float
        Epoch seconds of the run.
    account : AccountLimits
        The limits planned against.
    aliases : tuple of AliasRunPlan
        One per managed alias, in config order (the order headroom is handed out in).
    headroom_left : int or None
        Unreserved concurrency above the 100 minimum left after every alias (None: unknown).
    endpoints : tuple of EndpointRunPlan
        The GPU overflow endpoints' capacity plans (:func:`plan_endpoint`), planned after the
        aliases: one endpoint is shared by the agents that overflow to it, so its plan needs
        every one's forecast and PC plan and belongs to the run, not to one alias.
    """

    issued_at_s: float
    account: AccountLimits
    aliases: tuple[AliasRunPlan, ...]
    headroom_left: int | None
    endpoints: tuple[EndpointRunPlan, ...] = ()

    @property
    def plans(self) -> list[WarmPlan]:
        return [a.plan for a in self.aliases]

    def alias(self, key: str) -> AliasRunPlan:
        """The entry of ``FUNCTION:ALIAS``.

        Raises
        ------
        KeyError
            If no managed alias has that key.
        """
        for entry in self.aliases:
            if entry.key == key:
                return entry
        raise KeyError(f"{key}: not in this run plan ({[a.key for a in self.aliases]})")

    def endpoint(self, name: str) -> EndpointRunPlan:
        """The entry of the endpoint ``name``.

        Raises
        ------
        KeyError
            If no endpoint of this run has that name.
        """
        for entry in self.endpoints:
            if entry.key == name:
                return entry
        raise KeyError(f"{name}: no such endpoint in this run plan "
                       f"({[e.key for e in self.endpoints]})")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN and infinities as null; tuples as lists)."""
        doc = _jsonable(asdict(self))
        for entry, out in zip(self.aliases, doc["aliases"], strict=True):
            out["key"] = entry.key
        return doc  # type: ignore[no-any-return]


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


# --- the GPU overflow endpoint: one per app, shared by the agents that overflow to it -------

EndpointTarget = Literal["variant", "inference_component"]

#: Least capacity Application Auto Scaling lets each kind of target hold: a production variant
#: at least 1 instance ("--min-capacity ... must be set to at least 1",
#: https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-policy.html);
#: inference-component copies down to 0
#: (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html).
TARGET_MINIMUM: Mapping[str, int] = {"variant": 1, "inference_component": 0}


#: What one failed answer costs an app when it says nothing, USD: a default of ours, not from a
#: source: about what serving one agent request end to end costs (an LLM call of a few
#: thousand tokens is $0.005-$0.05 at 2026 list prices), so failing it costs at least that. At
#: it one ml.g6.xlarge copy (its hourly price in warmers/prices.json) pays when it avoids 23 or
#: more failed answers an hour.
#: An app whose failed answer loses more says so (``failed_answer_usd``); ``null`` prices it
#: unbounded (every avoidable failure justifies the endpoint, within cap and budget).
DEFAULT_FAILED_ANSWER_USD = 0.05


def instance_price_name(instance_type: str) -> str:
    """The ``warmers/prices.json`` item of a SageMaker real-time instance type
    (``ml.g6.xlarge`` -> ``sagemaker_ml_g6_xlarge_hour``)."""
    return "sagemaker_" + instance_type.replace(".", "_") + "_hour"


@dataclass(frozen=True)
class EndpointPolicy:
    """The GPU overflow endpoint of an app and what the warmer may do with its capacity.

    One endpoint is shared by every agent of the app that declares ``"overflow": "gpu"``
    (cdk.json): its demand is the sum of theirs and its cost is counted once.

    Parameters
    ----------
    endpoint_name : str
        SageMaker endpoint name.
    agents : tuple of str
        ``FUNCTION:ALIAS`` of each agent that overflows to it (each must be a managed alias).
    target : {"variant", "inference_component"}
        What Application Auto Scaling scales: the production variant's
        ``sagemaker:variant:DesiredInstanceCount`` (the shipped endpoint; at least 1 instance)
        or an inference component's ``sagemaker:inference-component:DesiredCopyCount`` (one
        copy per instance; can hold 0).
    variant_name : str
        Production variant (``target="variant"``).
    inference_component : str or None
        Inference component name (required with ``target="inference_component"``).
    instance_type : str
        Priced from ``warmers/prices.json`` (:func:`instance_price_name`) unless
        ``instance_usd_per_hour`` is given.
    floor, cap : int
        Instance bounds (the target's own minimum, :data:`TARGET_MINIMUM`, applies too).
    budget_usd_per_hour : float
        Most the endpoint may cost per hour.
    concurrent_requests_per_instance : int
        Overflow requests one instance answers at once within their SLA (measure it with
        ``warmstart calibrate``; the default 4 is a guess for a small model on one GPU).
    environment_idle_min : int
        Minutes an idle on-demand execution environment is assumed to stay warm: environments
        busy within that many minutes are not new. Lambda documents no keep-alive; a short
        value forecasts more cold starts (errs toward capacity).
    failed_answer_usd : float or None
        What one failed (degraded) answer costs the app, USD (default
        :data:`DEFAULT_FAILED_ANSWER_USD`); None: not priced, every failed answer the endpoint
        may avoid justifies it (the cap and budget bound the spend; see :func:`plan_endpoint`).
    capacity_parameter : str or None
        SSM parameter the endpoint's state is published to (the handlers'
        ``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``).
    instance_usd_per_hour : float or None
        Price override, USD per instance-hour.
    spend_guard_window_min : int
        Rolling window of the spend guard, minutes (:func:`plan_endpoint`, Notes): the spend
        and the overflow answers are both counted over it. Default 60.
    spend_guard_usd : float or None
        Spend in the window, USD, at or above which an endpoint that answered no overflow
        request in it is scaled in to the floor. None (default): one instance held for the
        whole window (instance price x window / 60 min; one instance-hour with the default
        window): the least the endpoint spends when it kept capacity all along, so a short
        scale-out for a burst that did not come (minutes of one instance) never trips it,
        while an instance that stood a whole hour (or two for half of it) answering nothing
        does (:meth:`spend_guard_threshold_usd`).
    agent_services : tuple of str
        Each agent's ``service`` dimension (``POWERTOOLS_SERVICE_NAME``, the agent's name), in
        ``agents`` order; empty: the function name of each ``FUNCTION:ALIAS``. The warmer reads
        ``Requests`` {``service``, ``path=overflow``} of each to count the answers.
    metrics_namespace : str
        The agents' EMF namespace (``POWERTOOLS_METRICS_NAMESPACE``, ``Warmstart``).

    Raises
    ------
    PlanError
        On an empty name or agent list, an unknown target, bounds out of order, a negative
        budget or price, a spend-guard window below 1 minute or above 1 day, a threshold not
        above 0, or ``agent_services`` not one per agent.
    """

    endpoint_name: str
    agents: tuple[str, ...]
    target: EndpointTarget = "variant"
    variant_name: str = "AllTraffic"
    inference_component: str | None = None
    instance_type: str = "ml.g6.xlarge"
    floor: int = 0
    cap: int = 2
    budget_usd_per_hour: float = 5.0
    concurrent_requests_per_instance: int = 4
    environment_idle_min: int = 5
    failed_answer_usd: float | None = DEFAULT_FAILED_ANSWER_USD
    capacity_parameter: str | None = None
    instance_usd_per_hour: float | None = None
    spend_guard_window_min: int = 60
    spend_guard_usd: float | None = None
    agent_services: tuple[str, ...] = ()
    metrics_namespace: str = "Warmstart"

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        object.__setattr__(self, "agent_services", tuple(self.agent_services))
        where = f"endpoint {self.endpoint_name!r}"
        if not self.endpoint_name or not self.agents:
            raise PlanError(f"{where}: needs an endpoint_name and at least one agent alias")
        if self.target not in TARGET_MINIMUM:
            raise PlanError(f"{where}: target must be one of {tuple(TARGET_MINIMUM)}, got "
                            f"{self.target!r}")
        if self.target == "inference_component" and not self.inference_component:
            raise PlanError(f"{where}: target inference_component needs inference_component "
                            "(its name)")
        if self.floor < 0 or self.cap < 0 or self.floor > self.cap:
            raise PlanError(f"{where}: need 0 <= floor <= cap, got floor={self.floor} "
                            f"cap={self.cap}")
        if self.budget_usd_per_hour < 0 or (self.instance_usd_per_hour is not None
                                            and not self.instance_usd_per_hour > 0):
            raise PlanError(f"{where}: budget_usd_per_hour must be >= 0 and "
                            "instance_usd_per_hour > 0")
        if self.concurrent_requests_per_instance < 1 or self.environment_idle_min < 1:
            raise PlanError(f"{where}: concurrent_requests_per_instance and "
                            "environment_idle_min must be >= 1")
        if self.failed_answer_usd is not None and not self.failed_answer_usd >= 0:
            raise PlanError(f"{where}: failed_answer_usd must be >= 0 or null")
        if not 1 <= self.spend_guard_window_min <= 1440:
            raise PlanError(f"{where}: spend_guard_window_min must be between 1 and 1440 "
                            f"minutes, got {self.spend_guard_window_min}")
        if self.spend_guard_usd is not None and not self.spend_guard_usd > 0:
            raise PlanError(f"{where}: spend_guard_usd must be > 0 or null (one instance "
                            "held for the window)")
        if self.agent_services and len(self.agent_services) != len(self.agents):
            raise PlanError(f"{where}: agent_services must name one service per agent "
                            f"({len(self.agents)}), got {len(self.agent_services)}")

    @property
    def minimum(self) -> int:
        """Least capacity the target can hold (:data:`TARGET_MINIMUM`)."""
        return TARGET_MINIMUM[self.target]

    @property
    def resource_id(self) -> str:
        """Application Auto Scaling ``ResourceId`` of the target."""
        if self.target == "inference_component":
            return f"inference-component/{self.inference_component}"
        return f"endpoint/{self.endpoint_name}/variant/{self.variant_name}"

    @property
    def scalable_dimension(self) -> str:
        if self.target == "inference_component":
            return "sagemaker:inference-component:DesiredCopyCount"
        return "sagemaker:variant:DesiredInstanceCount"

    def instance_hourly_usd(self) -> float:
        """USD per instance-hour: the override, else ``warmers/prices.json``.

        Raises
        ------
        PlanError
            When the table has no price for ``instance_type``.
        """
        if self.instance_usd_per_hour is not None:
            return self.instance_usd_per_hour
        try:
            return load_prices().price(instance_price_name(self.instance_type)).usd
        except KeyError as exc:
            raise PlanError(f"endpoint {self.endpoint_name!r}: no price for {self.instance_type} "
                            f"({exc}); set instance_usd_per_hour") from exc

    def spend_guard_threshold_usd(self) -> float:
        """``spend_guard_usd``, else one instance held for the whole window, USD.

        Raises
        ------
        PlanError
            When the instance has no price.
        """
        if self.spend_guard_usd is not None:
            return self.spend_guard_usd
        return self.instance_hourly_usd() * self.spend_guard_window_min / 60.0

    def services(self) -> tuple[tuple[str, str], ...]:
        """(``FUNCTION:ALIAS``, ``service`` dimension) of each agent (:attr:`agent_services`,
        else the function name)."""
        names = self.agent_services or tuple(k.rsplit(":", 1)[0] for k in self.agents)
        return tuple(zip(self.agents, names, strict=True))

    def budget_units(self) -> int:
        """Most instances the hourly budget pays for."""
        return math.floor(self.budget_usd_per_hour / self.instance_hourly_usd() + 1e-9)

    def check_budget(self) -> int:
        """:meth:`budget_units`, refusing a floor the budget does not pay for.

        Raises
        ------
        PlanError
            When the floor alone costs more than the budget, or the instance has no price.
        """
        units = self.budget_units()
        if self.floor > units:
            raise PlanError(f"endpoint {self.endpoint_name!r}: floor {self.floor} costs "
                            f"${self.floor * self.instance_hourly_usd():.4f}/h, above the budget "
                            f"${self.budget_usd_per_hour:.2f}/h; raise the budget or lower the "
                            "floor")
        return units


@dataclass(frozen=True)
class EndpointPlan:
    """The capacity the endpoint should hold, and why.

    Attributes
    ----------
    endpoint_name : str
    capacity : int
        Instances (variant) or copies (inference component) to hold from now.
    hourly_cost_usd : float
        ``capacity`` x instance price.
    overflow_concurrency : float
        Forecast overflow requests at once (new environments over the agents; NaN: unknown).
    cold_starts_per_hour : float
        Forecast cold starts per hour the capacity would answer (NaN: unknown).
    alternative_usd_per_hour : float
        What the same cold starts cost without the endpoint (see :func:`plan_endpoint`).
    pays : bool
        The endpoint's cost for the wanted capacity is at most ``alternative_usd_per_hour``.
    issued_at_s, changed_at_s : float
        Epoch seconds of this plan and of the last change of ``capacity``.
    reason : str
    fallback : bool
        Planned without every agent's forecast (last good capacity kept).
    recent_wanted : tuple of (float, int)
        (epoch s, wanted capacity) inside the stabilization window.
    spend_window : tuple of (float, float, float)
        (from epoch s, to epoch s, USD per hour) of the capacity planned in force over the
        spend guard's window up to ``issued_at_s`` (each run adds the previous plan's
        ``hourly_cost_usd`` since its ``issued_at_s``; equal rates merged), kept from plan to
        plan (the SSM plan store) so a fresh warmer resumes it.
    window_spend_usd : float
        Spend in the window up to ``issued_at_s``, USD (from ``spend_window``).
    answered_in_window : int or None
        Overflow requests the agents answered in the window (their ``Requests``
        ``path=overflow``); None: unknown (metrics missing or not read: guard not applied).
    spend_guard_since_s : float or None
        Epoch seconds the spend guard last scaled the endpoint in; it holds the floor for one
        window from then (None: not holding).
    """

    endpoint_name: str
    capacity: int
    hourly_cost_usd: float
    overflow_concurrency: float
    cold_starts_per_hour: float
    alternative_usd_per_hour: float
    pays: bool
    issued_at_s: float
    changed_at_s: float
    reason: str
    fallback: bool = False
    recent_wanted: tuple[tuple[float, int], ...] = ()
    spend_window: tuple[tuple[float, float, float], ...] = ()
    window_spend_usd: float = 0.0
    answered_in_window: int | None = None
    spend_guard_since_s: float | None = None

    @property
    def unanswered_spend_usd(self) -> float | None:
        """The window's spend when it answered no overflow request, 0 when it answered some,
        None when the answers are unknown (the warmer's ``EndpointSpendUnansweredUsd``)."""
        if self.answered_in_window is None:
            return None
        return self.window_spend_usd if self.answered_in_window == 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: NaN as null, an unbounded alternative as ``"unbounded"``."""
        doc: dict[str, Any] = _jsonable(asdict(self))
        if math.isinf(self.alternative_usd_per_hour):
            doc["alternative_usd_per_hour"] = "unbounded"
        return doc

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EndpointPlan:
        """Rebuild a plan saved by :meth:`to_dict`.

        Raises
        ------
        PlanError
            If a field is missing or has the wrong type.
        """
        def num(key: str) -> float:
            value = data.get(key)
            return float("nan") if value is None else math.inf if value == "unbounded" \
                else float(value)

        try:
            return cls(
                endpoint_name=str(data["endpoint_name"]), capacity=int(data["capacity"]),
                hourly_cost_usd=float(data["hourly_cost_usd"]),
                overflow_concurrency=num("overflow_concurrency"),
                cold_starts_per_hour=num("cold_starts_per_hour"),
                alternative_usd_per_hour=num("alternative_usd_per_hour"),
                pays=bool(data["pays"]), issued_at_s=float(data["issued_at_s"]),
                changed_at_s=float(data["changed_at_s"]), reason=str(data["reason"]),
                fallback=bool(data.get("fallback", False)),
                recent_wanted=tuple((float(t), int(v))
                                    for t, v in data.get("recent_wanted", ())),
                spend_window=tuple((float(a), float(b), float(h))
                                   for a, b, h in data.get("spend_window", ())),
                window_spend_usd=float(data.get("window_spend_usd", 0.0)),
                answered_in_window=(None if data.get("answered_in_window") is None
                                    else int(data["answered_in_window"])),
                spend_guard_since_s=(None if data.get("spend_guard_since_s") is None
                                     else float(data["spend_guard_since_s"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"saved endpoint plan is malformed ({exc!r}); it will be ignored"
                            ) from exc


@dataclass(frozen=True)
class EndpointRunPlan:
    """One endpoint in a :class:`RunPlan`: its plan, where each number came from, the target.

    Attributes
    ----------
    plan : EndpointPlan
    policy : EndpointPolicy
    steps : tuple of Step
    notes : tuple of str
    """

    plan: EndpointPlan
    policy: EndpointPolicy
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.plan.endpoint_name


@dataclass(frozen=True)
class AgentDemand:
    """What one agent adds to its endpoint's overflow demand (:func:`agent_overflow_demand`).

    Attributes
    ----------
    key : str
        ``FUNCTION:ALIAS``.
    peak : int
        ceil(forecast concurrency at the planning quantile).
    warm : int
        Environments already warm: max(planned PC, warm pings, the peak of the last
        ``environment_idle_min`` minutes).
    new_environments : int
        ``max(0, peak - warm)``: environments the window may start cold.
    chance : float
        Probability of an invocation in the window (:func:`chance_of_invocation`).
    pc_room : int or None
        Provisioned concurrency the agent could still add above its plan within its cap and
        budget and the account's headroom left after every alias's plan (shared once, in config
        order; strategy ``provisioned``, set by :func:`plan_run`); None: not bounded here
        (strategies that cannot use PC, or a demand built by hand).
    late_fraction : float or None
        Share of its cold starts, in [0, 1], that would answer late without the endpoint
        (:func:`cold_start_late_fraction`); None: unknown, every new environment counts as a
        failed answer.
    late_source : str
        Where ``late_fraction`` came from (for the plan's explanation).
    """

    key: str
    peak: int
    warm: int
    new_environments: int
    chance: float
    pc_room: int | None = None
    late_fraction: float | None = None
    late_source: str = ""

    @property
    def failing_share(self) -> float:
        """``late_fraction``, or 1 when unknown (every new environment a failed answer)."""
        return 1.0 if self.late_fraction is None else self.late_fraction


#: Fewest minutes with a ``Duration`` datapoint the late-fraction model reads a duration
#: distribution from (fewer: unknown, every new environment counts as a failure).
MIN_DURATION_MINUTES = 5


def cold_start_late_fraction(policy: AliasPolicy, series: MetricSeries) -> tuple[float | None, str]:
    """Share of the alias's cold starts that answer late without the endpoint. Pure.

    ``warmers.strategy.late_fraction``: ``P(cold + d > sla and d <= sla)`` with the cold start
    a lognormal through the policy's ``cold_start_p50_ms`` / ``cold_start_p95_ms`` (init on
    demand, restore under SnapStart) and ``d`` the warm duration, read off the empirical
    quantile function of the history's per-minute ``Duration`` averages (what CloudWatch
    holds: it understates the tail of single requests, so the share errs low on functions
    with a long tail; the SLA's slack is what matters and the mean sets most of it).

    Returns
    -------
    (late_fraction or None, source) : tuple
        None when the policy has no SLA or cold-start times, or the history holds fewer than
        :data:`MIN_DURATION_MINUTES` minutes with a ``Duration``; ``source`` says which.

    References
    ----------
    ``warmers.strategy`` (the same model chooses SnapStart per function).
    """
    from warmers.strategy import ColdStartTime, late_fraction

    if policy.sla_ms is None or policy.cold_start_p50_ms is None or \
            policy.cold_start_p95_ms is None:
        return None, "no SLA or cold-start time in the policy: every new environment counted"
    d = series.duration_ms[np.isfinite(series.duration_ms)]
    if d.shape[0] < MIN_DURATION_MINUTES:
        return None, (f"{d.shape[0]} minutes with a Duration (< {MIN_DURATION_MINUTES}): every "
                      "new environment counted")
    values = np.sort(d.astype(float))
    levels = np.linspace(0.0, 1.0, values.shape[0])
    share = late_fraction(policy.sla_ms, ColdStartTime(policy.cold_start_p50_ms,
                                                       policy.cold_start_p95_ms),
                          levels, np.maximum(values, 0.0))
    return share, (f"{share:.2%} of cold starts late: cold start {policy.cold_start_p50_ms:.0f}/"
                   f"{policy.cold_start_p95_ms:.0f} ms p50/p95 against the {policy.sla_ms:.0f} "
                   f"ms SLA over {values.shape[0]} minutes of Duration")


def agent_overflow_demand(forecast: AliasForecast, series: MetricSeries, plan: WarmPlan,
                          planning_quantile: float, idle_min: int, *,
                          pc_room: int | None = None,
                          policy: AliasPolicy | None = None) -> AgentDemand:
    """New environments one agent may start in the forecast window, each with a cold start.

    ``pc_room`` (:attr:`AgentDemand.pc_room`) is passed through: what provisioned concurrency
    could still take of them (:func:`plan_endpoint` prices only that much as PC).

    Every request above what is warm lands on a new execution environment (one invocation per
    environment, https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html); its
    init phase is a cold start that admission overflows (or degrades) while it runs. So the
    overflow requests at once are at most the new environments: the forecast peak at the
    planning quantile less the environments already warm (the planner's PC or pings, and
    those busy in the last ``idle_min`` minutes).
    """
    peak = max(0, math.ceil(forecast.concurrency.at(planning_quantile) - 1e-9))
    recent = np.nan_to_num(series.concurrency[-idle_min:], nan=0.0)
    busy = math.ceil(float(recent.max()) - 1e-9) if recent.shape[0] else 0
    warm = max(plan.provisioned_concurrency, plan.ping_concurrency, busy)
    late, source = (cold_start_late_fraction(policy, series) if policy is not None
                    else (None, "no policy given: every new environment counted"))
    return AgentDemand(plan.key, peak, warm, max(0, peak - warm),
                       chance_of_invocation(forecast.concurrency), pc_room, late, source)


#: Most (from, to, USD/h) segments an endpoint plan keeps of its spend window: the saved plan
#: is one standard SSM parameter (4 KB); beyond this the oldest two are merged (their spend
#: kept, spread over both).
MAX_SPEND_SEGMENTS = 24


def _accrue_spend(previous: EndpointPlan | None, *, now_s: float, window_s: float
                  ) -> tuple[tuple[tuple[float, float, float], ...], float]:
    """The spend window up to ``now_s`` and the USD spent in it: the previous plan's segments
    plus its own ``hourly_cost_usd`` since it was issued, cut to ``[now_s - window_s, now_s]``."""
    segments = list(previous.spend_window) if previous is not None else []
    if previous is not None and now_s > previous.issued_at_s and previous.hourly_cost_usd > 0:
        rate = previous.hourly_cost_usd
        if segments and segments[-1][1] == previous.issued_at_s and segments[-1][2] == rate:
            segments[-1] = (segments[-1][0], now_s, rate)
        else:
            segments.append((previous.issued_at_s, now_s, rate))
    start = now_s - window_s
    kept = [(max(a, start), b, h) for a, b, h in segments if b > start]
    while len(kept) > MAX_SPEND_SEGMENTS:
        (a1, b1, h1), (a2, b2, h2) = kept[0], kept[1]
        usd = h1 * (b1 - a1) / 3600.0 + h2 * (b2 - a2) / 3600.0
        kept[:2] = [(a1, b2, usd * 3600.0 / (b2 - a1))]
    spend = sum(h * (b - a) / 3600.0 for a, b, h in kept)
    return tuple(kept), spend


def plan_endpoint(policy: EndpointPolicy, demands: Mapping[str, AgentDemand | None],
                  strategies: Mapping[str, str], memory_mb: Mapping[str, int],
                  config: PlannerConfig, *, window_min: int, now_s: float,
                  previous: EndpointPlan | None,
                  answered_in_window: int | None = None) -> EndpointRunPlan:
    """Plan the endpoint's capacity ahead of the agents' forecast cold starts. Pure.

    Parameters
    ----------
    policy : EndpointPolicy
    demands : mapping of ``FUNCTION:ALIAS`` to AgentDemand or None
        Each agent of the endpoint (None: no usable forecast this run).
    strategies, memory_mb : mappings of ``FUNCTION:ALIAS``
        The agents' strategies and memory sizes (for the PC alternative).
    config : PlannerConfig
    window_min : int
        The forecast window, minutes (cold starts per hour = per window x 60 / window_min).
    now_s : float
    previous : EndpointPlan or None
        Last good plan (hysteresis, fallback, the spend window).
    answered_in_window : int or None
        Overflow requests the agents answered over the last ``policy.spend_guard_window_min``
        minutes (their own ``Requests`` metric, ``path=overflow``); None: unknown (metrics
        missing or throttled), the spend guard is not applied (a plan step says so).

    Returns
    -------
    EndpointRunPlan

    Raises
    ------
    PlanError
        When the instance type has no price or the floor alone exceeds the budget.

    Notes
    -----
    Demand: overflow requests at once = the sum over the agents of their new environments
    (:func:`agent_overflow_demand`; the agents' windows may coincide, so the sum is taken at the
    planning quantile, as provisioned concurrency covers the peak); instances wanted =
    ceil(that / ``concurrent_requests_per_instance``).

    When it pays (the rule): the wanted instances cost ``n x`` the instance-hour price
    (``warmers/prices.json``, per second of provisioning). Without them the same cold starts
    cost, per agent: for a ``provisioned`` agent, provisioned concurrency for as many of its
    new environments as its PC may still grow by (``AgentDemand.pc_room``: cap, budget and
    account headroom above its plan; ``CostModel.pc_hourly_usd``: PC would answer them locally
    instead); for the rest of them, and for any other agent (SnapStart cannot be combined with
    PC; ``ping``/``none`` chose not to pay for it), its failed answers: cold starts per hour (new
    environments x chance of an invocation x windows per hour) x the share of them that would
    answer late without the endpoint (``AgentDemand.late_fraction``, the late-fraction model of
    ``warmers.strategy`` on the alias's SLA and cold-start time; 1 when unknown) x
    ``failed_answer_usd``, or
    unbounded when that is not priced (the app
    declared overflow and did not say what a failed answer costs: the cap and budget bound the
    spend then). The endpoint pays when its cost is at most the sum; otherwise the planner
    says so with both numbers and wants 0. Then the same hysteresis and floor, cap and budget
    clamps as provisioned concurrency (:func:`_hysteresis`, :func:`_clamp_bounds`), and the
    target's own minimum (:data:`TARGET_MINIMUM`: a variant cannot hold fewer than 1).
    Provisioning a SageMaker instance takes minutes, so the forecast's ``lead_min`` must cover
    it (the warmer's default 15 does).

    The spend guard (what the endpoint actually avoided, issue 19): the spend over the last
    ``spend_guard_window_min`` minutes (each plan's capacity x price for as long as it was in
    force, ``EndpointPlan.spend_window``) against the overflow requests the agents answered in
    that window, measured by their environments. An overflow answer is a failed answer avoided:
    admission overflows only when local serving would miss the SLA. When the window spent at
    least :meth:`EndpointPolicy.spend_guard_threshold_usd` and answered none, the endpoint
    scales in to the floor (then the target's minimum) whatever the forecast, says so in its
    reason, and holds there for one window (``spend_guard_since_s``) unless answers appear; a
    window that answered some releases it. Unknown answers: not applied.
    """
    unit = policy.instance_hourly_usd()
    by_budget = policy.check_budget()
    steps: list[Step] = [Step("instance_usd_per_hour", unit,
                              f"{policy.instance_type}: " + (
                                  "EndpointPolicy.instance_usd_per_hour"
                                  if policy.instance_usd_per_hour is not None else
                                  f"warmers/prices.json {instance_price_name(policy.instance_type)}"))]
    notes: list[str] = []
    reasons: list[str] = []
    missing = [k for k in policy.agents if demands.get(k) is None]
    current = previous.capacity if previous is not None else 0
    if missing:
        notes.append(f"no usable forecast for {', '.join(missing)}: capacity kept")
        reasons.append(f"forecast missing for {', '.join(missing)}: kept the last good capacity "
                       f"{current}" if previous is not None else
                       f"forecast missing for {', '.join(missing)} and no previous plan: floor")
        value = current if previous is not None else policy.floor
        steps.append(Step("capacity_wanted", value, reasons[-1]))
        overflow = per_hour = alternative = float("nan")
        pays = previous.pays if previous is not None else False
        recent: tuple[tuple[float, int], ...] = previous.recent_wanted if previous else ()
    else:
        present = [d for d in (demands[k] for k in policy.agents) if d is not None]
        overflow = float(sum(d.new_environments for d in present))
        per_window = 60.0 / window_min
        per_hour = sum(d.new_environments * d.chance * per_window for d in present)
        for d in present:
            steps.append(Step(f"new_environments[{d.key}]", d.new_environments,
                              f"peak {d.peak} (forecast q{config.planning_quantile:g}) - warm "
                              f"{d.warm} (PC, pings, busy in the last "
                              f"{policy.environment_idle_min} min)"))
            steps.append(Step(f"late_fraction[{d.key}]", d.failing_share,
                              d.late_source or "unknown: every new environment counted"))
        wanted = math.ceil(overflow / policy.concurrent_requests_per_instance - 1e-9)
        steps.append(Step("overflow_concurrency", overflow,
                          "sum of the agents' new environments: overflow requests at once"))
        steps.append(Step("instances_wanted", wanted,
                          f"ceil({overflow:g} / {policy.concurrent_requests_per_instance} "
                          "concurrent requests per instance)"))
        cost = wanted * unit
        alternative = 0.0
        parts = []
        for d in present:
            uncovered = d.new_environments
            part = 0.0
            if strategies.get(d.key) == "provisioned" and d.new_environments > 0:
                covered = (d.new_environments if d.pc_room is None
                           else min(d.new_environments, max(0, d.pc_room)))
                uncovered = d.new_environments - covered
                if covered:
                    part = config.cost.pc_hourly_usd(covered, memory_mb.get(d.key, 1024))
                    parts.append(f"{d.key} PC for {covered} ${part:.4f}/h")
                if uncovered:
                    parts.append(f"{d.key}: {uncovered} beyond the PC it may still add "
                                 f"({d.pc_room}: cap, budget, account headroom)")
            if uncovered == 0:
                pass
            elif d.failing_share <= 0.0:
                parts.append(f"{d.key}: its {uncovered} cold start(s) answer in time without "
                             f"the endpoint ({d.late_source})")
            elif policy.failed_answer_usd is None:
                part = math.inf
                parts.append(f"{d.key} failed answers not priced")
            else:
                # only the cold starts that would fail without it (issue 19's counterfactual)
                failed = uncovered * d.chance * per_window * d.failing_share
                part += failed * policy.failed_answer_usd
                parts.append(f"{d.key} {failed:.1f} failed answers/h x "
                             f"${policy.failed_answer_usd:g} = "
                             f"${failed * policy.failed_answer_usd:.4f}/h")
            alternative += part
        steps.append(Step("cold_starts_per_hour", per_hour,
                          f"new environments x chance of an invocation x {per_window:g} "
                          "windows/h"))
        steps.append(Step("alternative_usd_per_hour", alternative,
                          "the same cold starts without the endpoint: " + ("; ".join(parts)
                                                                           or "none")))
        pays = wanted > 0 and cost <= alternative
        if wanted == 0:
            reasons.append("no overflow forecast: no new environments above what is warm")
        elif pays and math.isinf(alternative):
            reasons.append(f"{wanted} instance(s) ${cost:.4f}/h answer the {per_hour:.1f} cold "
                           f"starts/h ({'; '.join(parts)}: EndpointPolicy.failed_answer_usd; "
                           "cap and budget bound the spend)")
        elif pays:
            reasons.append(f"{wanted} instance(s) ${cost:.4f}/h <= ${alternative:.4f}/h the "
                           f"{per_hour:.1f} cold starts/h cost without them "
                           f"({'; '.join(parts)})")
        else:
            reasons.append(f"does not pay: {wanted} instance(s) ${cost:.4f}/h > "
                           f"${alternative:.4f}/h the {per_hour:.1f} cold starts/h cost "
                           f"without them ({'; '.join(parts)}); 0 wanted")
        desired = wanted if pays else 0
        steps.append(Step("pays", pays, f"${cost:.4f}/h endpoint <= ${alternative:.4f}/h "
                                        "alternative (plan_endpoint, Notes)"))
        value, recent, hysteresis = _hysteresis(
            desired, current=current, holds=previous is not None,
            changed_at_s=previous.changed_at_s if previous is not None else now_s,
            recent_wanted=previous.recent_wanted if previous is not None else (),
            config=config, now_s=now_s, reasons=reasons, what="capacity")
        steps.append(Step("hysteresis", value, hysteresis))
    window_s = policy.spend_guard_window_min * 60.0
    spend_window, spend = _accrue_spend(previous, now_s=now_s, window_s=window_s)
    threshold = policy.spend_guard_threshold_usd()
    steps.append(Step("window_spend_usd", spend,
                      f"planned capacity x ${unit:.4f}/h over the last "
                      f"{policy.spend_guard_window_min} min (EndpointPlan.spend_window)"))
    steps.append(Step("answered_in_window", answered_in_window,
                      "overflow requests the agents answered in the window (Requests "
                      "path=overflow, their EMF)" if answered_in_window is not None else
                      "unknown: the agents' Requests metric missing or not read"))
    since = previous.spend_guard_since_s if previous is not None else None
    holding = since is not None and now_s - since < window_s
    guard: bool | None
    if answered_in_window is None:
        guard = True if holding else None
        text = (f"answers unknown; still holding the floor since the guard scaled in at "
                f"{since:.0f}" if holding else
                "not applied: the overflow answers of the window are unknown")
        since = since if holding else None
    elif answered_in_window > 0:
        guard, since = False, None
        text = (f"{answered_in_window} overflow answers for ${spend:.4f} in the window "
                f"(${spend / answered_in_window:.4f} per answer): not applied")
    elif holding:  # not renewed: the hold ends one window after the scale-in
        guard = True
        text = (f"holding the floor since the guard scaled in at {since:.0f} "
                f"(for {policy.spend_guard_window_min} min): still 0 overflow answers")
        reasons.insert(0, f"spend guard: {text}")
    elif spend >= threshold - 1e-9 * max(1.0, threshold):
        guard, since = True, now_s
        text = (f"${spend:.4f} spent in the last {policy.spend_guard_window_min} min >= "
                f"${threshold:.4f} (EndpointPolicy.spend_guard_usd) and 0 overflow requests "
                f"answered: scaled in to the floor {policy.floor}")
        reasons.insert(0, f"spend guard: {text}, held for {policy.spend_guard_window_min} min "
                          "unless answers appear")
    else:
        guard, since = False, None
        text = (f"0 overflow answers, but ${spend:.4f} spent in the window < "
                f"${threshold:.4f}: not applied")
    if guard:
        value = min(value, policy.floor)
    steps.append(Step("spend_guard", guard, text))
    value = _clamp_bounds(value, floor=policy.floor, cap=policy.cap, by_budget=by_budget,
                          budget_usd_h=policy.budget_usd_per_hour, unit_usd_h=unit,
                          unit=f"{policy.instance_type} instance", unit_short="instance",
                          owner="EndpointPolicy", reasons=reasons, steps=steps)
    steps.append(Step("target_minimum", policy.minimum,
                      f"least a {policy.target} holds (TARGET_MINIMUM) "
                      f"({_bound(value < policy.minimum)})"))
    if value < policy.minimum:
        reasons.append(f"a production variant holds at least {policy.minimum} instance "
                       f"(${policy.minimum * unit:.4f}/h): only inference components scale "
                       "to zero")
        value = policy.minimum
    hourly = value * unit
    steps += [Step("capacity", value, "after hysteresis, floor, cap, budget and the target's "
                                      "minimum"),
              Step("hourly_cost_usd", hourly, f"{value} x ${unit:.4f}/h")]
    changed = (previous.changed_at_s if previous is not None and previous.capacity == value
               else now_s)
    plan = EndpointPlan(policy.endpoint_name, value, hourly, overflow, per_hour,
                        alternative, pays, now_s, changed, "; ".join(reasons),
                        fallback=bool(missing), recent_wanted=recent,
                        spend_window=spend_window, window_spend_usd=spend,
                        answered_in_window=answered_in_window, spend_guard_since_s=since)
    return EndpointRunPlan(plan, policy, tuple(steps), tuple(notes))


def idle_note(series: MetricSeries) -> str | None:
    """Why the plan heads for the floor when the whole window had no invocation, else None.

    CloudWatch answering with no data point at all is zero traffic, not an outage: Lambda
    sends metrics when a function finishes processing an event, so a function with no
    invocations publishes none (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics.html,
    https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html). A failed or
    throttled call gives ``MetricsMissing`` instead and keeps the last good plan.
    """
    inv = np.nan_to_num(series.invocations, nan=0.0)
    conc = np.nan_to_num(series.concurrency, nan=0.0)
    if series.is_empty or inv.any() or conc.any():  # all NaN: gaps, not evidence of zero
        return None
    return (f"zero traffic: no invocation in the {series.n_minutes}-minute window (CloudWatch "
            "answered with no data point; Lambda publishes none without invocations), "
            "planning toward the floor")


def degradation_level(series: MetricSeries, available_concurrency: int) -> Level:
    """Level from the last three minutes' utilization of ``available_concurrency``.

    The minute's peak is ``ConcurrentExecutions`` Maximum; its mean is Little's law from
    ``Invocations`` x ``Duration`` (0 in a minute without invocations: Lambda publishes no
    Duration for it). See :func:`warmers.degradation.sustained_level`.
    """
    peak = series.concurrency[-3:]
    n = peak.shape[0]
    invocations = series.invocations[-n:]
    with np.errstate(invalid="ignore"):
        mean = np.where(invocations == 0, 0.0,
                        littles_law_concurrency(invocations, series.duration_ms[-n:]))
    starts = series.start_s + PERIOD_S * np.arange(series.n_minutes - n, series.n_minutes)
    samples = [(float(t), float(c) / available_concurrency, float(m) / available_concurrency)
               for t, c, m in zip(starts, peak, mean, strict=True)]
    return sustained_level(samples, now_s=series.end_s)


def plan_run(series_by_alias: Mapping[str, MetricSeries | MetricsMissing],
             previous_plans: Mapping[str, WarmPlan | None], account: AccountLimits,
             config: RunConfig, now_s: float, *,
             previous_endpoints: Mapping[str, EndpointPlan | None] | None = None,
             endpoint_answers: Mapping[str, int | None] | None = None) -> RunPlan:
    """Plan every managed alias of one warmer run. Pure: no I/O, no clock.

    The warmer (``warmers.runner.run_once``), ``warmstart plan`` and the simulator's warmstart
    policy all call this; ``warmers.runner.apply`` makes the result true.

    Parameters
    ----------
    series_by_alias : mapping of ``FUNCTION:ALIAS`` to MetricSeries or MetricsMissing
        1-minute history of each alias (covering ``config.history_min`` for the warmer), or why
        there is none. An alias absent from the mapping has no metrics (strategies ``none``
        and ``snapstart`` without a degradation parameter need none).
    previous_plans : mapping of ``FUNCTION:ALIAS`` to WarmPlan or None
        The last good plan of each alias (hysteresis, the metrics-missing fallback, and the PC
        each alias holds now, which it gives back to the account when its value changes).
    account : AccountLimits
    config : RunConfig
        ``policies`` (in the order headroom is handed out), ``forecast``, ``planner``.
    now_s : float
        Epoch seconds of the run (passed in).
    previous_endpoints : mapping of endpoint name to EndpointPlan or None, optional
        The last good plan of each endpoint of ``config.endpoints``.
    endpoint_answers : mapping of endpoint name to int or None, optional
        Overflow requests each endpoint's agents answered in its spend guard's window (None
        or absent: unknown, the guard is not applied; :func:`plan_endpoint`).

    Returns
    -------
    RunPlan

    Raises
    ------
    PlanError
        Before anything is planned, when a policy cannot be planned as configured (floor
        above budget, planning quantile not among the forecast's levels, an endpoint agent
        that is not a managed alias).

    Notes
    -----
    Per alias, in config order: forecast (``warmers.forecast.forecast_alias`` with
    ``config.forecast``; a series it refuses, ``ForecastError``, counts as missing metrics),
    the zero-traffic note, :func:`explain_alias` within the account headroom left, the
    degradation level. Headroom: ``unreserved - 100`` spare at the start
    (:data:`UNRESERVED_MINIMUM`); an alias may take the spare plus the PC it holds now
    (:func:`account_headroom`), and what it takes beyond that is gone for the aliases after it.
    Then each endpoint (:func:`plan_endpoint`) from its agents' forecasts (made for them
    whatever their strategy) and their plans (:func:`agent_overflow_demand`).
    """
    for policy in config.policies:
        check_policy(policy, config.planner)
        if policy.plans_warmth and config.planner.planning_quantile not in \
                config.forecast.quantiles:
            raise PlanError(f"planning quantile {config.planner.planning_quantile} is not one "
                            f"of the forecast's levels {config.forecast.quantiles}")
    managed = {p.key for p in config.policies}
    overflowing: set[str] = set()
    for endpoint in config.endpoints:
        unknown = [k for k in endpoint.agents if k not in managed]
        if unknown:
            raise PlanError(f"endpoint {endpoint.endpoint_name!r}: agents {unknown} are not "
                            f"managed aliases ({sorted(managed)})")
        overflowing.update(endpoint.agents)
    demands: dict[str, AgentDemand | None] = {}
    #: PC each overflowing provisioned agent may still add within its cap and budget
    cap_room: dict[str, int] = {}
    unreserved = account.unreserved_concurrency
    spare = None if unreserved is None else unreserved - UNRESERVED_MINIMUM
    entries: list[AliasRunPlan] = []
    for policy in config.policies:
        previous = previous_plans.get(policy.key)
        got = series_by_alias.get(policy.key)
        notes: list[str] = []
        series = got if isinstance(got, MetricSeries) else None
        if isinstance(got, MetricsMissing):
            notes.append(f"metrics unavailable: {got.reason}")
        elif got is None and (policy.plans_warmth or policy.degradation_parameter
                              or policy.key in overflowing):
            notes.append("metrics unavailable: no series given for this alias")
        forecast: AliasForecast | None = None
        idle: str | None = None
        if series is not None and (policy.plans_warmth or policy.key in overflowing):
            try:
                forecast = forecast_alias(series, issued_at_s=now_s, config=config.forecast)
            except ForecastError as exc:
                notes.append(f"metrics unusable: {exc}")
                series = None
            else:
                idle = idle_note(series) if policy.plans_warmth else None
                notes += forecast.notes
        current = previous.provisioned_concurrency if previous else 0
        steps: list[Step] = []
        headroom: int | None = None
        if spare is not None and unreserved is not None:
            headroom = max(0, spare + current)
            taken = unreserved - UNRESERVED_MINIMUM - spare
            steps.append(Step("account_headroom", headroom,
                              f"unreserved {unreserved} ({account.source}) - "
                              f"{UNRESERVED_MINIMUM} kept unreserved + {current} this alias "
                              f"holds - {taken} net taken by the aliases before it this run"))
        elif policy.plans_warmth:
            steps.append(Step("account_headroom", None, f"account limits {account.source}"))
        plan, planned = explain_alias(forecast, policy, config.planner, now_s=now_s,
                                      previous=previous, headroom=headroom)
        steps += planned
        if idle is not None:
            plan = replace(plan, reason=f"{idle}; {plan.reason}")
            notes.insert(0, idle)
        if spare is not None:
            spare -= plan.provisioned_concurrency - current
        level: Level | None = None
        if policy.degradation_parameter:
            available = policy.available_concurrency or account.concurrent_executions
            if series is None:
                notes.append("degradation level not computed: no metrics")
            elif not available:
                notes.append("degradation level not computed: available concurrency unknown "
                             "(no reserved concurrency and account limits unknown)")
            else:
                level = degradation_level(series, available)
                steps.append(Step("degradation_level", level,
                                  f"utilization of {available} available "
                                  + ("(reserved concurrency)" if policy.available_concurrency
                                     else f"(account limit, {account.source})")
                                  + " sustained 30 s over the last minutes"))
        steps.append(Step("changed_at_s", plan.changed_at_s,
                          "when this value was last changed (the cooldown's clock)"))
        if policy.key in overflowing:
            if policy.strategy == "provisioned":
                pc = plan.provisioned_concurrency
                cap_room[policy.key] = max(0, _ceiling(policy, config.planner, pc) - pc)
            demands[policy.key] = None if forecast is None or series is None else \
                agent_overflow_demand(forecast, series, plan, config.planner.planning_quantile,
                                      min(e.environment_idle_min for e in config.endpoints
                                          if policy.key in e.agents), policy=policy)
        entries.append(AliasRunPlan(
            plan=plan, strategy=policy.strategy, steps=tuple(steps), notes=tuple(notes),
            forecast=forecast.concurrency if forecast is not None else None,
            degradation_parameter=policy.degradation_parameter, degradation_level=level,
            overflow_demand=demands.get(policy.key)))
    # the account headroom left after every alias's plan is shared once, in config order
    left = spare
    for key, room in cap_room.items():
        if left is not None:
            room = min(room, max(0, left))
            left = max(0, left) - room
        got_demand = demands.get(key)
        if got_demand is not None:
            demands[key] = replace(got_demand, pc_room=room)
    entries = [replace(e, overflow_demand=demands.get(e.plan.key)) if e.plan.key in cap_room
               else e for e in entries]
    endpoints = tuple(
        plan_endpoint(endpoint, demands, {p.key: p.strategy for p in config.policies},
                      {p.key: p.memory_mb for p in config.policies}, config.planner,
                      window_min=config.forecast.window_min, now_s=now_s,
                      previous=(previous_endpoints or {}).get(endpoint.endpoint_name),
                      answered_in_window=(endpoint_answers or {}).get(endpoint.endpoint_name))
        for endpoint in config.endpoints)
    return RunPlan(issued_at_s=now_s, account=account, aliases=tuple(entries),
                   headroom_left=spare, endpoints=endpoints)
