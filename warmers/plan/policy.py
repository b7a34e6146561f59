"""The planner's vocabulary, shared by the alias, LMI and endpoint plans: the alias policy and
the planner's settings, the frozen :class:`WarmPlan` and its :class:`Step`, and the rules more
than one plan applies (expected utilization and the break-even, the account headroom, the
hysteresis, the floor/cap/budget clamps, the forecast's demand step).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from functions.runtime.contract.warmer_document import (
    ALIAS_OBJECTIVES,
    ALIAS_STRATEGIES,
    AliasEntry,
)
from warmers.cost import CostModel
from warmers.forecast import QuantileForecast
from warmers.pricing import load_prices

if TYPE_CHECKING:
    from warmers.lmi import LmiSettings


Action = Literal["provisioned", "ping", "managed_instances", "none"]


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
class AliasPolicy(AliasEntry):
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

    # the fields and defaults are the contract's (AliasEntry); only the LMI settings' type is
    # the planner's own (the document holds them as a mapping, warmers.config makes them)
    managed_instances: LmiSettings | None = None  # type: ignore[assignment]

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
        if self.objective not in ALIAS_OBJECTIVES:
            raise PlanError(
                f"{self.function_name}:{self.alias}: objective must be one of {ALIAS_OBJECTIVES}, "
                f"got {self.objective!r}")
        if self.alias == "$LATEST":
            raise PlanError(
                f"{self.function_name}: provisioned concurrency cannot target $LATEST; "
                "give the alias (e.g. 'live') that points at a published version"
            )
        if self.strategy not in ALIAS_STRATEGIES:
            raise PlanError(
                f"{self.function_name}:{self.alias}: strategy must be one of {ALIAS_STRATEGIES}, "
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
    #: Lambda Managed Instances: (epoch s, environments the peak in flight observed then
    #: needs) inside ``LmiSettings.peak_hold_min``, each newer than every larger one
    recent_peaks: tuple[tuple[float, int], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.function_name}:{self.alias}"

    def to_dict(self) -> dict[str, Any]:
        """The plan as saved in the plan store (JSON-ready: an unknown ``demand`` is null)."""
        d = asdict(self)
        if isinstance(d["demand"], float) and math.isnan(d["demand"]):
            d["demand"] = None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WarmPlan:
        """The plan :meth:`to_dict` saved; fields added since (``ceiling``, ``recent_wanted``,
        the LMI ones) default when a plan saved before them lacks them.

        Raises
        ------
        PlanError
            A required field is missing or holds the wrong type (the caller ignores the plan).
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
                recent_peaks=tuple((float(t), int(v)) for t, v in data.get("recent_peaks", ())),
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


def binding(bound: bool) -> str:
    return "binding" if bound else "not binding"


def clamp_bounds(value: int, *, floor: int, cap: int, by_budget: int, budget_usd_h: float,
                  unit_usd_h: float, unit: str, unit_short: str, owner: str,
                  reasons: list[str], steps: list[Step]) -> int:
    """floor <= value <= cap, and no more units than the hourly budget pays for (the same
    rules for provisioned concurrency and for the overflow endpoint's instances)."""
    steps.append(Step("floor", floor, f"{owner}.floor ({binding(value < floor)})"))
    if value < floor:
        reasons.append(f"raised to floor {floor}")
        value = floor
    steps.append(Step("cap", cap, f"{owner}.cap ({binding(value > cap)})"))
    if value > cap:
        reasons.append(f"capped at {cap}")
        value = cap
    steps.append(Step("budget_units", by_budget,
                      f"floor(budget ${budget_usd_h:.2f}/h / ${unit_usd_h:.4f}/h per {unit}) "
                      f"({binding(value > by_budget)})"))
    if value > by_budget:
        reasons.append(f"limited to {by_budget} by the budget ${budget_usd_h:.2f}/h "
                       f"(${unit_usd_h:.4f}/h per {unit_short})")
        value = by_budget
    return value


def apply_hysteresis(desired: int, *, current: int, holds: bool, changed_at_s: float,
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


def jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj
