"""One alias's plan: forecast + cost model + policy -> a frozen :class:`WarmPlan`.

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

The vocabulary (policy, plan, steps, the shared rules) is :mod:`warmers.plan.policy`; strategy
``managed_instances`` is :mod:`warmers.plan.managed_instances`; a whole run,
:func:`warmers.plan.run.plan_run`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from warmers.forecast import AliasForecast, QuantileForecast
from warmers.plan.managed_instances import check_lmi_policy, plan_managed_instances
from warmers.plan.policy import (
    CONCURRENCY_PER_ENVIRONMENT,
    AliasPolicy,
    PlanError,
    PlannerConfig,
    Step,
    WarmPlan,
    apply_hysteresis,
    binding,
    budget_units,
    chance_of_invocation,
    clamp_bounds,
    demand_step,
    expected_utilization,
    units_that_pay,
)


def _nothing(policy: AliasPolicy, *, now_s: float, previous: WarmPlan | None, reason: str,
             steps: list[Step], method: str = "-", demand: float = float("nan"),
             fallback: bool = False) -> WarmPlan:
    changed = previous.changed_at_s if previous and previous.action == "none" else now_s
    steps.append(Step("action", "none", reason.rsplit("; ", 1)[-1]))
    return WarmPlan(policy.function_name, policy.alias, "none", 0, 0, 0, 0.0, demand, method,
                    now_s, changed, reason, fallback)


def _clamp_pc(value: int, policy: AliasPolicy, config: PlannerConfig, headroom: int | None,
              previous_pc: int, reasons: list[str], steps: list[Step]) -> int:
    value = clamp_bounds(value, floor=policy.floor, cap=policy.cap,
                          by_budget=budget_units(policy, config.cost),
                          budget_usd_h=policy.budget_usd_per_hour,
                          unit_usd_h=config.cost.pc_hourly_usd(1, policy.memory_mb),
                          unit=f"provisioned environment of {policy.memory_mb} MB",
                          unit_short="environment", owner="AliasPolicy", reasons=reasons,
                          steps=steps)
    if headroom is None:
        keep = max(previous_pc, policy.floor)
        steps.append(Step("headroom", None, f"account headroom unknown: at most {keep} (current "
                                            f"or floor) ({binding(value > keep)})"))
        if value > keep:
            reasons.append(
                f"account headroom unknown: not raised above {keep} (current or floor)")
            value = keep
    else:
        steps.append(Step("headroom", headroom, "the account's unreserved concurrency left to "
                                                f"this alias ({binding(value > headroom)})"))
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
    if policy.strategy == "managed_instances":
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
    value, recent_wanted, hysteresis = apply_hysteresis(
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
    ceiling = pc_ceiling(policy, config, value)
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


def pc_ceiling(policy: AliasPolicy, config: PlannerConfig, value: int) -> int:
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
                        ceiling=pc_ceiling(policy, config, value))
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
                       ceiling=pc_ceiling(policy, config, value),
                       changed_at_s=previous.changed_at_s
                       if value == previous.provisioned_concurrency else now_s)
    steps.append(Step("action", previous.action, "the last good plan, unchanged"))
    return replace(previous, issued_at_s=now_s, reason="; ".join(reasons), fallback=True)
