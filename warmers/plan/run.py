"""One warmer run: every alias and endpoint at once.

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

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import numpy as np

from warmers.degradation import Level, sustained_level
from warmers.forecast import (
    AliasForecast,
    ForecastConfig,
    ForecastError,
    QuantileForecast,
    forecast_alias,
)
from warmers.plan.alias import check_policy, explain_alias, pc_ceiling
from warmers.plan.endpoint import (
    AgentDemand,
    EndpointPlan,
    EndpointPolicy,
    EndpointRunPlan,
    agent_overflow_demand,
    plan_endpoint,
)
from warmers.plan.policy import (
    DEFAULT_ACCOUNT_CONCURRENCY,
    UNRESERVED_MINIMUM,
    AliasPolicy,
    PlanError,
    PlannerConfig,
    Step,
    WarmPlan,
    jsonable,
)
from warmers.series import PERIOD_S, MetricSeries, littles_law_concurrency


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
        doc = jsonable(asdict(self))
        for entry, out in zip(self.aliases, doc["aliases"], strict=True):
            out["key"] = entry.key
        return doc  # type: ignore[no-any-return]


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
                cap_room[policy.key] = max(0, pc_ceiling(policy, config.planner, pc) - pc)
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
