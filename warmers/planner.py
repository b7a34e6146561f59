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
   minutes, floor 0) skip provisioned concurrency.
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
from typing import Any, Literal, Protocol

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

Strategy = Literal["provisioned", "snapstart", "ping", "none"]
Action = Literal["provisioned", "ping", "none"]
STRATEGIES: tuple[str, ...] = ("provisioned", "snapstart", "ping", "none")

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
    strategy : {"provisioned", "snapstart", "ping", "none"}
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

    Raises
    ------
    PlanError
        On ``$LATEST``, an unknown strategy, negative bounds or floor > cap.
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

    def __post_init__(self) -> None:
        if not self.function_name or not self.alias:
            raise PlanError("AliasPolicy needs a function_name and an alias")
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
        """Whether the warmer forecasts and actuates this alias (``provisioned``, ``ping``)."""
        return self.strategy in ("provisioned", "ping")

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


def _clamp_pc(value: int, policy: AliasPolicy, config: PlannerConfig, headroom: int | None,
              previous_pc: int, reasons: list[str], steps: list[Step]) -> int:
    steps.append(Step("floor", policy.floor, f"AliasPolicy.floor ({_bound(value < policy.floor)})"))
    if value < policy.floor:
        reasons.append(f"raised to floor {policy.floor}")
        value = policy.floor
    steps.append(Step("cap", policy.cap, f"AliasPolicy.cap ({_bound(value > policy.cap)})"))
    if value > policy.cap:
        reasons.append(f"capped at {policy.cap}")
        value = policy.cap
    by_budget = budget_units(policy, config.cost)
    unit = config.cost.pc_hourly_usd(1, policy.memory_mb)
    steps.append(Step("budget_units", by_budget,
                      f"floor(budget ${policy.budget_usd_per_hour:.2f}/h / ${unit:.4f}/h per "
                      f"provisioned environment of {policy.memory_mb} MB) "
                      f"({_bound(value > by_budget)})"))
    if value > by_budget:
        reasons.append(
            f"limited to {by_budget} by the budget ${policy.budget_usd_per_hour:.2f}/h "
            f"(${unit:.4f}/h per environment)")
        value = by_budget
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
    previous_pc = previous.provisioned_concurrency if previous else 0
    if forecast is None:
        return _fallback(policy, config, now_s=now_s, previous=previous, headroom=headroom,
                         steps=steps)

    fc = forecast.concurrency
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
    if desired < cover:
        util_cover = expected_utilization(busy, cover) if cover else 0.0
        reasons.append(
            f"{busy_why}: covering the peak with {cover} would be {util_cover:.0%} used "
            f"< break-even {break_even:.0%}; {desired} pay")
    else:
        reasons.append(busy_why)
    window_start = now_s - config.scale_down_cooldown_s
    recent_wanted = tuple(
        (t, v) for t, v in (previous.recent_wanted if previous else ()) if t > window_start
    ) + ((now_s, desired),)
    value = desired
    hysteresis = "not applied: no lower value than the current PC wanted"
    if previous is not None and previous.action == "provisioned" and desired < previous_pc:
        stable = max(v for _, v in recent_wanted)
        step = previous_pc - stable
        small = step < max(1.0, config.scale_down_fraction * previous_pc)
        recent = now_s - previous.changed_at_s < config.scale_down_cooldown_s
        if small or recent:
            why = (f"highest wanted in the last {config.scale_down_cooldown_s:.0f} s is "
                   f"{stable}" if small
                   else f"last change {now_s - previous.changed_at_s:.0f} s ago "
                        f"< {config.scale_down_cooldown_s:.0f} s cooldown")
            reasons.append(f"hysteresis: kept {previous_pc} instead of {desired} ({why})")
            hysteresis = (f"kept the current {previous_pc} instead of {desired} ({why}; "
                          f"PlannerConfig.scale_down_fraction {config.scale_down_fraction:g}, "
                          f"scale_down_cooldown_s {config.scale_down_cooldown_s:g})")
            value = previous_pc
        else:
            value = stable
            hysteresis = (f"lowered from {previous_pc} to {stable}, the highest wanted in the "
                          f"{config.scale_down_cooldown_s:.0f} s stabilization window")
            if stable > desired:
                reasons.append(f"lowered to {stable}, the highest wanted in the stabilization "
                               "window")
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
    """

    plan: WarmPlan
    strategy: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    forecast: QuantileForecast | None = None
    degradation_parameter: str | None = None
    degradation_level: str | None = None

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

    Notes
    -----
    Issue 11 adds the GPU endpoint's capacity plan here (``endpoints``), planned in
    :func:`plan_run` after the aliases: one endpoint is shared by the agents that overflow to
    it, so its plan needs every alias's forecast and belongs to the run, not to one alias.
    """

    issued_at_s: float
    account: AccountLimits
    aliases: tuple[AliasRunPlan, ...]
    headroom_left: int | None

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
             config: RunConfig, now_s: float) -> RunPlan:
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

    Returns
    -------
    RunPlan

    Raises
    ------
    PlanError
        Before anything is planned, when a policy cannot be planned as configured (floor
        above budget, planning quantile not among the forecast's levels).

    Notes
    -----
    Per alias, in config order: forecast (``warmers.forecast.forecast_alias`` with
    ``config.forecast``; a series it refuses, ``ForecastError``, counts as missing metrics),
    the zero-traffic note, :func:`explain_alias` within the account headroom left, the
    degradation level. Headroom: ``unreserved - 100`` spare at the start
    (:data:`UNRESERVED_MINIMUM`); an alias may take the spare plus the PC it holds now
    (:func:`account_headroom`), and what it takes beyond that is gone for the aliases after it.
    """
    for policy in config.policies:
        check_policy(policy, config.planner)
        if policy.plans_warmth and config.planner.planning_quantile not in \
                config.forecast.quantiles:
            raise PlanError(f"planning quantile {config.planner.planning_quantile} is not one "
                            f"of the forecast's levels {config.forecast.quantiles}")
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
        elif got is None and (policy.plans_warmth or policy.degradation_parameter):
            notes.append("metrics unavailable: no series given for this alias")
        forecast: AliasForecast | None = None
        idle: str | None = None
        if series is not None and policy.plans_warmth:
            try:
                forecast = forecast_alias(series, issued_at_s=now_s, config=config.forecast)
            except ForecastError as exc:
                notes.append(f"metrics unusable: {exc}")
                series = None
            else:
                idle = idle_note(series)
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
        entries.append(AliasRunPlan(
            plan=plan, strategy=policy.strategy, steps=tuple(steps), notes=tuple(notes),
            forecast=forecast.concurrency if forecast is not None else None,
            degradation_parameter=policy.degradation_parameter, degradation_level=level))
    # issue 11: the GPU endpoint's capacity plan goes here (see RunPlan, Notes)
    return RunPlan(issued_at_s=now_s, account=account, aliases=tuple(entries),
                   headroom_left=spare)
