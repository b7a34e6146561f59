"""One Lambda Managed Instances alias's plan: the minimum execution environments for the
forecast window (strategy ``managed_instances``; the function's settings, prices and the AWS
facts used are :mod:`warmers.lmi`):

1. ``demand``: the forecast peak concurrency at the planning quantile over minutes
   ``+lead..+lead+window`` (the planner's shared demand step).
2. ``cover``: ``ceil(demand / concurrency_per_environment)`` environments.
3. ``lead``: the minimum is raised now, ``lead - 1`` minutes before the window (the forecast's
   origin is the last observed minute); less than :attr:`LmiSettings.scale_out_lead_min` is
   reported as late.
4. hysteresis (raise at once, lower slowly: the planner's rule).
5. ``peak_hold``: at least the environments the highest peak in flight observed within
   :attr:`LmiSettings.peak_hold_min` (a day by default) needs. On LMI a request beyond capacity
   is throttled (a failed answer) and a burst that more than doubles within 5 minutes outruns
   the scaler, so a peak seen once is held (a daily burst is covered from its second time); the
   forecast alone misses bursts that come in few minutes of the history.
6. floor (the configured minimum; a forecast of zero never goes below it), the function's
   maximum (``cap``), the hourly budget (environment-hours at the instance price plus the
   management fee) and the capacity provider's maximum (``MaxVCpuCount /
   vcpus_per_environment``).

Metrics missing (a new function): the last good minimum, clamped; without one, the floor.
"""

from __future__ import annotations

import math

from warmers.forecast import AliasForecast
from warmers.lmi import MAX_EXECUTION_ENVIRONMENTS, LmiSettings
from warmers.plan.policy import (
    AliasPolicy,
    PlanError,
    PlannerConfig,
    Step,
    WarmPlan,
    apply_hysteresis,
    clamp_bounds,
    demand_step,
)


def settings_of(policy: AliasPolicy) -> LmiSettings:
    """The policy's LMI settings (defaults when none are given)."""
    got = policy.managed_instances
    return got if got is not None else LmiSettings()


def budget_environments(policy: AliasPolicy, settings: LmiSettings) -> int:
    """Most environments the policy's hourly budget pays for."""
    unit = settings.environment_hourly_usd()
    return MAX_EXECUTION_ENVIRONMENTS if unit <= 0 else int(policy.budget_usd_per_hour // unit)


def check_lmi_policy(policy: AliasPolicy) -> None:
    """Refuse an LMI policy whose configured minimum alone costs more than its budget.

    Raises
    ------
    warmers.plan.policy.PlanError
    """
    settings = settings_of(policy)
    if policy.cap > MAX_EXECUTION_ENVIRONMENTS:
        raise PlanError(f"{policy.key}: cap {policy.cap} is above MaxExecutionEnvironments' "
                        f"limit {MAX_EXECUTION_ENVIRONMENTS}")
    if policy.floor > budget_environments(policy, settings):
        raise PlanError(
            f"{policy.key}: minimum {policy.floor} LMI environments cost "
            f"${policy.floor * settings.environment_hourly_usd():.4f}/h, above the budget "
            f"${policy.budget_usd_per_hour:.2f}/h; raise the budget or lower the floor")


def plan_managed_instances(forecast: AliasForecast | None, policy: AliasPolicy,
                           config: PlannerConfig, *, now_s: float, previous: WarmPlan | None,
                           steps: list[Step]) -> WarmPlan:
    """Minimum execution environments of one LMI alias for the forecast window.

    Parameters
    ----------
    forecast : AliasForecast or None
        None when metrics are missing (a new function, CloudWatch failed): the last good
        minimum is kept, clamped; without one, the floor.
    policy : AliasPolicy
        Strategy ``managed_instances``: ``floor`` is the configured minimum, ``cap`` the
        function's ``MaxExecutionEnvironments``, ``budget_usd_per_hour`` the most the minimum's
        instance-time may cost; ``managed_instances`` the :class:`LmiSettings`.
    config : PlannerConfig
        Planning quantile and hysteresis.
    now_s : float
        Epoch seconds (passed in).
    previous : WarmPlan or None
    steps : list of Step
        Appended to: each number and where it came from.

    Returns
    -------
    WarmPlan
        ``action="managed_instances"``, ``min_execution_environments`` the minimum,
        ``ceiling`` the maximum to set (the function's and the provider's).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html ;
    https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html
    """
    settings = settings_of(policy)
    unit_usd_h = settings.environment_hourly_usd()
    holds = previous is not None and previous.action == "managed_instances"
    current = previous.min_execution_environments if previous is not None and holds else 0
    reasons: list[str] = []
    if forecast is None:
        demand = float("nan")
        method = "fallback"
        if holds and previous is not None:
            wanted = current
            reasons.append(f"metrics unavailable: kept the last good minimum {current} of "
                           f"{previous.issued_at_s:.0f}")
        else:
            wanted = policy.floor
            reasons.append("metrics unavailable and no previous LMI plan (a new function?): "
                           f"the configured minimum {policy.floor}")
        steps.append(Step("demand", None, reasons[0]))
        value = wanted
        recent: tuple[tuple[float, int], ...] = previous.recent_wanted if holds and previous \
            else ()
    else:
        fc = forecast.concurrency
        demand, head = demand_step(fc, config, steps)
        method = fc.method
        reasons.append(head)
        per = settings.per_environment
        cover = max(0, math.ceil(demand / per - 1e-9))
        steps.append(Step("cover", cover,
                          f"ceil(demand {demand:.2f} / {per} requests per LMI environment "
                          "(PerExecutionEnvironmentMaxConcurrency; Python default 16 per vCPU, "
                          "https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-"
                          "python-runtime.html))"))
        # the window starts lead_min minutes after the last observed minute (the forecast's
        # origin, warmers.forecast), so lead_min - 1 minutes after now
        ahead = fc.lead_min - 1
        on_time = ahead >= settings.scale_out_lead_min
        steps.append(Step("lead", ahead,
                          f"minimum set now, {ahead} min before the window (forecast lead "
                          f"{fc.lead_min} min from the last observed minute); LMI's scale-out "
                          f"lead {settings.scale_out_lead_min:g} min (LmiSettings."
                          "scale_out_lead_min, an assumption) "
                          + ("is met" if on_time else "is NOT met: the minimum may come late")))
        if not on_time:
            reasons.append(f"the window starts {ahead} min from now < LMI scale-out lead "
                           f"{settings.scale_out_lead_min:g} min: the minimum may come late")
        if demand <= 0:
            reasons.append(f"no traffic forecast: the configured minimum {policy.floor}")
        value, recent, text = apply_hysteresis(
            cover, current=current, holds=holds,
            changed_at_s=previous.changed_at_s if previous is not None else now_s,
            recent_wanted=previous.recent_wanted if holds and previous is not None else (),
            config=config, now_s=now_s, reasons=reasons, what="minimum")
        steps.append(Step("hysteresis", value, text))
    peaks = hold_peaks(forecast, previous if holds else None, settings, now_s=now_s)
    held = max((v for _, v in peaks), default=0)
    steps.append(Step("peak_hold", held,
                      f"environments for the highest peak in flight observed in the last "
                      f"{settings.peak_hold_min} min (LmiSettings.peak_hold_min: a burst beyond "
                      "LMI capacity is throttled) "
                      + ("raise the minimum" if held > value else "not binding")))
    if held > value:
        reasons.append(f"held {held} environments for the peak in flight seen in the last "
                       f"{settings.peak_hold_min} min")
        value = held
    value = clamp_bounds(value, floor=policy.floor, cap=policy.cap,
                          by_budget=budget_environments(policy, settings),
                          budget_usd_h=policy.budget_usd_per_hour, unit_usd_h=unit_usd_h,
                          unit=f"LMI environment ({settings.vcpus_per_environment:g} vCPU of "
                               f"{settings.instance_type})",
                          unit_short="environment", owner="AliasPolicy", reasons=reasons,
                          steps=steps)
    provider = settings.provider_max_environments
    if provider is None:
        steps.append(Step("provider_max", None, "capacity provider MaxVCpuCount unknown "
                                                "(LmiSettings.provider_max_vcpus): not bounded"))
    else:
        steps.append(Step("provider_max", provider,
                          f"capacity provider MaxVCpuCount {settings.provider_max_vcpus} / "
                          f"{settings.vcpus_per_environment:g} vCPU per environment "
                          f"({'binding' if value > provider else 'not binding'})"))
    if provider is not None and value > provider:
        reasons.append(f"limited to {provider} by the capacity provider's "
                       f"{settings.provider_max_vcpus} vCPUs")
        value = provider
    ceiling = policy.cap if provider is None else min(policy.cap, provider)
    ceiling = max(ceiling, value)
    hourly = value * unit_usd_h
    reasons.append(f"LMI minimum {value} environments (max {ceiling})")
    steps += [
        Step("min_execution_environments", value,
             "after hysteresis, floor, cap, budget and the provider's maximum"),
        Step("max_execution_environments", ceiling,
             "min(AliasPolicy.cap (the function's maximum), provider maximum), at least the "
             "minimum"),
        Step("hourly_cost_usd", hourly,
             f"{value} x ${unit_usd_h:.4f}/h (EC2 {settings.instance_type} on-demand + "
             "management fee, per vCPU share; warmers/prices.json)"),
    ]
    changed = (previous.changed_at_s if holds and previous is not None
               and previous.min_execution_environments == value else now_s)
    return WarmPlan(policy.function_name, policy.alias, "managed_instances", 0, 0, 0, hourly,
                    demand, method, now_s, changed, "; ".join(reasons),
                    fallback=forecast is None, ceiling=ceiling, recent_wanted=recent,
                    min_execution_environments=value, recent_peaks=peaks)


def hold_peaks(forecast: AliasForecast | None, previous: WarmPlan | None,
               settings: LmiSettings, *, now_s: float) -> tuple[tuple[float, int], ...]:
    """The peaks the minimum holds: ``previous.recent_peaks`` within
    ``settings.peak_hold_min`` of ``now_s``, plus this run's (the environments
    ``forecast.recent_peak_concurrency``, the last hour's highest in flight, needs).

    Returns
    -------
    tuple of (epoch s, environments)
        Oldest first, each entry larger than every later one (a smaller, older peak can never
        be the highest again): at most one entry per distinct value, so the saved plan stays
        small over a day of one-minute runs. Empty with ``peak_hold_min`` 0.
    """
    if settings.peak_hold_min <= 0:
        return ()
    start_s = now_s - settings.peak_hold_min * 60.0
    got = [(t, v) for t, v in (previous.recent_peaks if previous is not None else ())
           if t > start_s]
    peak = forecast.recent_peak_concurrency if forecast is not None else float("nan")
    if math.isfinite(peak) and peak > 0:
        got.append((now_s, math.ceil(peak / settings.per_environment - 1e-9)))
    kept: list[tuple[float, int]] = []
    for t, v in reversed(got):
        if not kept or v > kept[-1][1]:
            kept.append((t, v))
    return tuple(reversed(kept))
