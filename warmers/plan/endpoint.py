"""The GPU overflow endpoint's plan: one endpoint per app, shared by the agents that overflow
to it; its capacity (instances of a production variant, or copies of an inference component)
from the overflow its agents are forecast to send, priced against the answers it saves.

Pure: no I/O, no clock. Called by :func:`warmers.plan.run.plan_run` with each agent's demand
(:func:`agent_overflow_demand`); the same floor/cap/budget clamps and hysteresis as provisioned
concurrency (:mod:`warmers.plan.policy`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from functions.runtime.contract.warmer_document import EndpointEntry
from warmers.forecast import AliasForecast
from warmers.plan.policy import (
    AliasPolicy,
    PlanError,
    PlannerConfig,
    Step,
    WarmPlan,
    apply_hysteresis,
    binding,
    chance_of_invocation,
    clamp_bounds,
    jsonable,
)
from warmers.pricing import load_prices
from warmers.series import MetricSeries

#: Least capacity Application Auto Scaling lets each kind of target hold: a production variant
#: at least 1 instance ("--min-capacity ... must be set to at least 1",
#: https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-policy.html);
#: inference-component copies down to 0
#: (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html).
TARGET_MINIMUM: Mapping[str, int] = {"variant": 1, "inference_component": 0}


def instance_price_name(instance_type: str) -> str:
    """The ``warmers/prices.json`` item of a SageMaker real-time instance type
    (``ml.g6.xlarge`` -> ``sagemaker_ml_g6_xlarge_hour``)."""
    return "sagemaker_" + instance_type.replace(".", "_") + "_hour"


@dataclass(frozen=True)
class EndpointPolicy(EndpointEntry):
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
        the contract's ``DEFAULT_FAILED_ANSWER_USD``); None: not priced, every failed answer the endpoint
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

    # the fields and defaults are the contract's (EndpointEntry)

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
        return self.spend_guard_usd_at(self.instance_hourly_usd())

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
        doc: dict[str, Any] = jsonable(asdict(self))
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
    clamps as provisioned concurrency (:func:`apply_hysteresis`, :func:`clamp_bounds`), and the
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
        value, recent, hysteresis = apply_hysteresis(
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
    value = clamp_bounds(value, floor=policy.floor, cap=policy.cap, by_budget=by_budget,
                          budget_usd_h=policy.budget_usd_per_hour, unit_usd_h=unit,
                          unit=f"{policy.instance_type} instance", unit_short="instance",
                          owner="EndpointPolicy", reasons=reasons, steps=steps)
    steps.append(Step("target_minimum", policy.minimum,
                      f"least a {policy.target} holds (TARGET_MINIMUM) "
                      f"({binding(value < policy.minimum)})"))
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
