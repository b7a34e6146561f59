"""Lambda Managed Instances (LMI): the warmer's minimum-execution-environments step.

On LMI a function version's execution environments run on EC2 instances of a capacity
provider, many requests at once per environment; there is no per-request cold start. LMI
scales asynchronously on CPU use and environment fullness, and traffic that more than doubles
within 5 minutes may be throttled (HTTP 429) while it catches up. The one handle a function has
is ``PutFunctionScalingConfig`` ``MinExecutionEnvironments`` / ``MaxExecutionEnvironments``
per version; AWS's advice for known increases is to have the capacity there before them. This
module plans that minimum from the same forecast and planning quantile the provisioned-
concurrency plan uses (``warmers.planner``):

1. ``demand``: the forecast peak concurrency at the planning quantile over minutes
   ``+lead..+lead+window`` (the planner's shared demand step).
2. ``cover``: ``ceil(demand / concurrency_per_environment)`` environments.
3. ``lead``: the minimum is raised now, ``lead - 1`` minutes before the window (the forecast's
   origin is the last observed minute); less than :attr:`LmiSettings.scale_out_lead_min` is
   reported as late.
4. hysteresis (raise at once, lower slowly: the planner's rule), then floor (the configured
   minimum; a forecast of zero never goes below it), the function's maximum (``cap``), the
   hourly budget (environment-hours at the instance price plus the management fee) and the
   capacity provider's maximum (``MaxVCpuCount / vcpus_per_environment``).

Metrics missing (a new function): the last good minimum, clamped; without one, the floor.

Facts used (AWS Lambda developer guide and API reference, read 2026-12-02 through the search
tool):

* scaling on CPU utilization and multi-concurrency saturation; "If your traffic more than
  doubles within 5 minutes, you may see throttles":
  https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html ,
  https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-troubleshooting.html
* ``MinExecutionEnvironments`` / ``MaxExecutionEnvironments``: 0..15000 each:
  https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html ; default 3
  (SAM's ``FunctionScalingConfig``):
  https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-property-function-functionscalingconfig.html
* Python: one process per concurrent request, default 16 concurrent requests per vCPU
  (``PerExecutionEnvironmentMaxConcurrency``):
  https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html
* at least 1 vCPU and 2 GB per function: the scaling page above.
* capacity provider ``MaxVCpuCount`` 2..15000:
  https://docs.aws.amazon.com/lambda/latest/api/API_CapacityProviderScalingConfig.html
* price: EC2 on-demand instance price + a 15 % management fee + $0.20 per 1M requests
  (``warmers/prices.json``; a secondary transcription of https://aws.amazon.com/lambda/pricing/,
  whose rates load client-side).

Assumption (not found in the docs): how long LMI takes to add an instance and its
environments. :data:`SCALE_OUT_LEAD_MIN` = 5 minutes, the window of the documented doubling
rule; change it per function with :attr:`LmiSettings.scale_out_lead_min` once measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from warmers.pricing import PriceTable, load_prices

if TYPE_CHECKING:
    from warmers.forecast import AliasForecast
    from warmers.planner import AliasPolicy, PlannerConfig, Step, WarmPlan

#: Window of AWS's rule: traffic that more than doubles within it may be throttled, s.
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html
DOUBLING_WINDOW_S: Final = 300.0
#: Default concurrent requests per vCPU of the Python runtime on LMI.
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html
PYTHON_CONCURRENCY_PER_VCPU: Final = 16
#: Default ``MinExecutionEnvironments`` (SAM FunctionScalingConfig; three for AZ resiliency,
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html).
DEFAULT_MIN_EXECUTION_ENVIRONMENTS: Final = 3
#: Largest ``Min``/``MaxExecutionEnvironments`` the API takes.
#: https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html
MAX_EXECUTION_ENVIRONMENTS: Final = 15_000
#: ASSUMPTION (no figure in the docs): minutes from a scale-out decision to environments that
#: take requests; the doubling rule's 5-minute window.
SCALE_OUT_LEAD_MIN: Final = 5.0
#: Price items (``warmers/prices.json``).
MANAGEMENT_FEE_ITEM: Final = "lmi_management_fee_fraction"
REQUESTS_ITEM: Final = "lmi_requests_per_million"


class LmiConfigError(ValueError):
    """LMI settings are invalid (the message names the field and what to change)."""


def instance_price_item(instance_type: str) -> str:
    """Price item of an EC2 instance type: ``m7g.large`` -> ``ec2_m7g_large_hour``."""
    return "ec2_" + instance_type.replace(".", "_") + "_hour"


@dataclass(frozen=True)
class LmiSettings:
    """How one function runs on its capacity provider (``AliasPolicy.managed_instances``).

    Parameters
    ----------
    instance_type : str
        EC2 instance type of the capacity provider; its on-demand hour price must be in
        ``warmers/prices.json`` as ``ec2_<type>_hour`` (default ``m7g.large``).
    instance_vcpus : int
        vCPUs of one instance (m7g.large: 2).
    vcpus_per_environment : float
        vCPUs one execution environment takes (memory / ``ExecutionEnvironmentMemoryGiBPerVCpu``);
        at least 1 (the docs' minimum function size).
    concurrency_per_environment : int or None
        Requests one environment serves at once (``PerExecutionEnvironmentMaxConcurrency``);
        None: Python's default, 16 per vCPU.
    provider_max_vcpus : int or None
        The capacity provider's ``MaxVCpuCount`` (2..15000) shared by its functions; None:
        unknown, not bounded here.
    scale_out_lead_min : float
        Minutes LMI needs to add environments (an assumption, :data:`SCALE_OUT_LEAD_MIN`).

    Raises
    ------
    LmiConfigError
        On a value out of its documented range.
    """

    instance_type: str = "m7g.large"
    instance_vcpus: int = 2
    vcpus_per_environment: float = 1.0
    concurrency_per_environment: int | None = None
    provider_max_vcpus: int | None = None
    scale_out_lead_min: float = SCALE_OUT_LEAD_MIN

    def __post_init__(self) -> None:
        if self.instance_vcpus < 1:
            raise LmiConfigError(f"instance_vcpus must be >= 1, got {self.instance_vcpus}")
        if not 1.0 <= self.vcpus_per_environment <= self.instance_vcpus:
            raise LmiConfigError(
                "vcpus_per_environment must be between 1 (LMI's minimum function size) and "
                f"instance_vcpus {self.instance_vcpus}, got {self.vcpus_per_environment}")
        if self.concurrency_per_environment is not None and not (
                1 <= self.concurrency_per_environment <= 1600):
            raise LmiConfigError("concurrency_per_environment must be 1..1600 "
                                 f"(PerExecutionEnvironmentMaxConcurrency), got "
                                 f"{self.concurrency_per_environment}")
        if self.provider_max_vcpus is not None and not 2 <= self.provider_max_vcpus <= 15_000:
            raise LmiConfigError("provider_max_vcpus must be 2..15000 (MaxVCpuCount), got "
                                 f"{self.provider_max_vcpus}")
        if not (math.isfinite(self.scale_out_lead_min) and self.scale_out_lead_min >= 0):
            raise LmiConfigError("scale_out_lead_min must be a finite number of minutes >= 0, "
                                 f"got {self.scale_out_lead_min}")

    @property
    def per_environment(self) -> int:
        """Requests one environment serves at once."""
        if self.concurrency_per_environment is not None:
            return self.concurrency_per_environment
        return max(1, int(PYTHON_CONCURRENCY_PER_VCPU * self.vcpus_per_environment))

    @property
    def provider_max_environments(self) -> int | None:
        """Environments the capacity provider's vCPU limit holds (None: unknown)."""
        if self.provider_max_vcpus is None:
            return None
        return int(self.provider_max_vcpus // self.vcpus_per_environment)

    def instance_hourly_usd(self, table: PriceTable | None = None) -> float:
        """EC2 on-demand price plus the management fee of one instance, USD per hour.

        Raises
        ------
        warmers.pricing.MissingPriceError
            When ``warmers/prices.json`` has no price for the instance type.
        """
        table = table if table is not None else load_prices()
        ec2 = table.price(instance_price_item(self.instance_type)).usd
        return ec2 * (1.0 + table.price(MANAGEMENT_FEE_ITEM).usd)

    def environment_hourly_usd(self, table: PriceTable | None = None) -> float:
        """Instance-time one environment takes (its vCPU share), fee included, USD per hour."""
        return self.instance_hourly_usd(table) * self.vcpus_per_environment / self.instance_vcpus


def request_usd(table: PriceTable | None = None) -> float:
    """LMI's per-request charge, USD per request."""
    table = table if table is not None else load_prices()
    return table.price(REQUESTS_ITEM).usd / 1_000_000


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
    warmers.planner.PlanError
    """
    from warmers.planner import PlanError

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
    from warmers.planner import Step, WarmPlan, _clamp_bounds, _hysteresis, demand_step

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
        value, recent, text = _hysteresis(
            cover, current=current, holds=holds,
            changed_at_s=previous.changed_at_s if previous is not None else now_s,
            recent_wanted=previous.recent_wanted if holds and previous is not None else (),
            config=config, now_s=now_s, reasons=reasons, what="minimum")
        steps.append(Step("hysteresis", value, text))
    value = _clamp_bounds(value, floor=policy.floor, cap=policy.cap,
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
                    min_execution_environments=value)
