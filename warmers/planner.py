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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from warmers.cost import CostModel
from warmers.forecast import AliasForecast, QuantileForecast
from warmers.pricing import load_prices

Strategy = Literal["provisioned", "snapstart", "ping", "none"]
Action = Literal["provisioned", "ping", "none"]
STRATEGIES: tuple[str, ...] = ("provisioned", "snapstart", "ping", "none")

#: Lambda keeps at least this much concurrency unreserved in an account.
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
UNRESERVED_MINIMUM = 100


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


def _nothing(policy: AliasPolicy, *, now_s: float, previous: WarmPlan | None, reason: str,
             method: str = "-", demand: float = float("nan"), fallback: bool = False) -> WarmPlan:
    changed = previous.changed_at_s if previous and previous.action == "none" else now_s
    return WarmPlan(policy.function_name, policy.alias, "none", 0, 0, 0, 0.0, demand, method,
                    now_s, changed, reason, fallback)


def _clamp_pc(value: int, policy: AliasPolicy, config: PlannerConfig, headroom: int | None,
              previous_pc: int, reasons: list[str]) -> int:
    if value < policy.floor:
        reasons.append(f"raised to floor {policy.floor}")
        value = policy.floor
    if value > policy.cap:
        reasons.append(f"capped at {policy.cap}")
        value = policy.cap
    by_budget = budget_units(policy, config.cost)
    if value > by_budget:
        reasons.append(
            f"limited to {by_budget} by the budget ${policy.budget_usd_per_hour:.2f}/h "
            f"(${config.cost.pc_hourly_usd(1, policy.memory_mb):.4f}/h per environment)")
        value = by_budget
    if headroom is None:
        keep = max(previous_pc, policy.floor)
        if value > keep:
            reasons.append(
                f"account headroom unknown: not raised above {keep} (current or floor)")
            value = keep
    elif value > headroom:
        reasons.append(f"limited to {headroom} by the account's unreserved concurrency")
        value = headroom
    return value


def plan_alias(forecast: AliasForecast | None, policy: AliasPolicy,
               config: PlannerConfig | None = None, *, now_s: float,
               previous: WarmPlan | None = None, headroom: int | None = None) -> WarmPlan:
    """Plan one alias.

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
    config = config or PlannerConfig()
    cost = config.cost
    if policy.strategy == "provisioned" and policy.floor > budget_units(policy, cost):
        raise PlanError(
            f"{policy.key}: floor {policy.floor} costs "
            f"${cost.pc_hourly_usd(policy.floor, policy.memory_mb):.4f}/h, above the budget "
            f"${policy.budget_usd_per_hour:.2f}/h; raise the budget or lower the floor")
    if policy.strategy == "none":
        return _nothing(policy, now_s=now_s, previous=previous, reason="strategy none")
    if policy.strategy == "snapstart":
        return _nothing(policy, now_s=now_s, previous=previous,
                        reason="strategy snapstart: restores cover cold starts; provisioned "
                               "concurrency cannot be combined with SnapStart")
    previous_pc = previous.provisioned_concurrency if previous else 0
    if forecast is None:
        return _fallback(policy, config, now_s=now_s, previous=previous, headroom=headroom)

    fc = forecast.concurrency
    if config.planning_quantile not in fc.quantiles:
        raise PlanError(f"planning quantile {config.planning_quantile} is not one of the "
                        f"forecast's levels {fc.quantiles}")
    demand = fc.at(config.planning_quantile)
    top = fc.values[-1]
    head = (f"forecast {fc.method} q{config.planning_quantile:g}={demand:.2f} concurrent "
            f"(q{fc.quantiles[-1]:g}={top:.2f}) for minutes +{fc.lead_min}..+"
            f"{fc.lead_min + fc.window_min}")
    sparse = fc.active_fraction < policy.sparse_active_fraction and policy.floor == 0
    if policy.strategy == "ping" or sparse:
        why = "strategy ping" if policy.strategy == "ping" else (
            f"sparse: active in {fc.active_fraction:.1%} of minutes "
            f"< {policy.sparse_active_fraction:.0%}, no provisioned concurrency")
        return _ping_or_nothing(policy, config, fc, demand, [why, head], now_s=now_s,
                                previous=previous, weigh=policy.strategy != "ping")

    reasons = [head]
    cover = max(0, math.ceil(demand - 1e-9))
    break_even = cost.utilization_break_even()
    busy = forecast.busy_concurrency
    if math.isfinite(busy) and busy >= 0.0:
        busy_why = f"mean in flight {busy:.2f} (last hour, Little's law)"
    else:
        busy = max(0.0, fc.at(fc.quantiles[0]))
        busy_why = (f"mean in flight unknown: q{fc.quantiles[0]:g} of the peak {busy:.2f} used "
                    "(overestimates it)")
    desired = units_that_pay(busy, cover, break_even)
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
            value = previous_pc
        else:
            value = stable
            if stable > desired:
                reasons.append(f"lowered to {stable}, the highest wanted in the stabilization "
                               "window")
    value = _clamp_pc(value, policy, config, headroom, previous_pc, reasons)
    if value == 0:
        reasons.append("no provisioned concurrency")
        return _ping_or_nothing(policy, config, fc, demand, reasons, now_s=now_s,
                                previous=previous, weigh=True)
    utilization = expected_utilization(busy, value)
    reasons.append(
        f"PC {value}: expected utilization {utilization:.0%} "
        f"{'>=' if utilization >= break_even else '<'} break-even {break_even:.0%} "
        f"({'no dearer than' if utilization >= break_even else 'costs more than'} on demand)")
    changed = (previous.changed_at_s if previous is not None and previous.action == "provisioned"
               and previous.provisioned_concurrency == value else now_s)
    return WarmPlan(policy.function_name, policy.alias, "provisioned", value, 0, 0,
                    cost.pc_hourly_usd(value, policy.memory_mb), demand, fc.method, now_s,
                    changed, "; ".join(reasons), ceiling=_ceiling(policy, config, value),
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
                     previous: WarmPlan | None, weigh: bool) -> WarmPlan:
    """Warm pings x ceil(demand), or nothing when no invocation is expected, the budget allows
    none, or (``weigh``) they cost more than the cold starts they may avoid."""
    cost = config.cost
    top = fc.values[-1]
    if top <= 0:
        return _nothing(policy, now_s=now_s, previous=previous, method=fc.method,
                        demand=demand, reason="; ".join(
                            [*reasons, "no invocation expected: no pings"]))
    n = max(1, math.ceil(demand - 1e-9))
    per = cost.ping_hourly_usd(1, policy.ping_interval_s, policy.ping_hold_ms, policy.memory_mb)
    limit = min(policy.cap if policy.cap > 0 else n,
                int(policy.budget_usd_per_hour // per) if per > 0 else n)
    reasons = list(reasons)
    if n > limit:
        reasons.append(f"ping concurrency limited to {limit} by cap/budget")
        n = limit
    if n <= 0:
        return _nothing(policy, now_s=now_s, previous=previous, method=fc.method,
                        demand=demand, reason="; ".join(reasons + ["budget allows no pings"]))
    if weigh:
        p = chance_of_invocation(fc)
        avoided_usd = (p * n * (60.0 / fc.window_min) * (policy.memory_mb / 1024.0)
                       * config.cold_start_usd_per_gb)
        if n * per > avoided_usd:
            dearer = (f"pings x{n} (${n * per:.2e}/h) cost more than the cold starts they may "
                      f"avoid (${avoided_usd:.2e}/h at {p:.0%} chance of an invocation per "
                      "window): no pings")
            return _nothing(policy, now_s=now_s, previous=previous, method=fc.method,
                            demand=demand, reason="; ".join([*reasons, dearer]))
        reasons.append(f"pings ${n * per:.2e}/h < cold starts they may avoid "
                       f"${avoided_usd:.2e}/h")
    same = previous is not None and previous.action == "ping" and previous.ping_concurrency == n
    reasons.append(f"warm pings x{n} every {policy.ping_interval_s} s")
    return WarmPlan(policy.function_name, policy.alias, "ping", 0, n, policy.ping_interval_s,
                    n * per, demand, fc.method, now_s,
                    previous.changed_at_s if same and previous else now_s, "; ".join(reasons))


def _ceiling(policy: AliasPolicy, config: PlannerConfig, value: int) -> int:
    return max(value, min(policy.cap, budget_units(policy, config.cost)))


def _fallback(policy: AliasPolicy, config: PlannerConfig, *, now_s: float,
              previous: WarmPlan | None, headroom: int | None) -> WarmPlan:
    """Metrics unavailable: keep the last good plan within floor, cap, budget and headroom."""
    if previous is None:
        reasons = ["metrics unavailable and no previous plan: floor only"]
        value = _clamp_pc(policy.floor, policy, config, headroom, policy.floor, reasons)
        if value == 0:
            return _nothing(policy, now_s=now_s, previous=None, reason="; ".join(reasons),
                            fallback=True)
        return WarmPlan(policy.function_name, policy.alias, "provisioned", value, 0, 0,
                        config.cost.pc_hourly_usd(value, policy.memory_mb), float("nan"),
                        "fallback", now_s, now_s, "; ".join(reasons), fallback=True,
                        ceiling=_ceiling(policy, config, value))
    reasons = [f"metrics unavailable: kept the last good plan of {previous.issued_at_s:.0f}"]
    if previous.action == "provisioned" or policy.floor > 0:
        value = _clamp_pc(previous.provisioned_concurrency, policy, config, headroom,
                          previous.provisioned_concurrency, reasons)
        if value == 0:
            return _nothing(policy, now_s=now_s, previous=previous, reason="; ".join(reasons),
                            fallback=True)
        return replace(previous, action="provisioned", provisioned_concurrency=value,
                       ping_concurrency=0, ping_interval_s=0,
                       hourly_cost_usd=config.cost.pc_hourly_usd(value, policy.memory_mb),
                       issued_at_s=now_s, reason="; ".join(reasons), fallback=True,
                       ceiling=_ceiling(policy, config, value),
                       changed_at_s=previous.changed_at_s
                       if value == previous.provisioned_concurrency else now_s)
    return replace(previous, issued_at_s=now_s, reason="; ".join(reasons), fallback=True)
