"""Lambda Managed Instances (LMI): an LMI function's settings and prices, and the AWS facts the
warmer's minimum-execution-environments step (:mod:`warmers.plan.managed_instances`) uses.

On LMI a function version's execution environments run on EC2 instances of a capacity
provider, many requests at once per environment; there is no per-request cold start. LMI
scales asynchronously on CPU use and environment fullness, and traffic that more than doubles
within 5 minutes may be throttled (HTTP 429) while it catches up. The one handle a function has
is ``PutFunctionScalingConfig`` ``MinExecutionEnvironments`` / ``MaxExecutionEnvironments``
per version; AWS's advice for known increases is to have the capacity there before them. The
warmer plans that minimum from the same forecast and planning quantile the provisioned-
concurrency plan uses (:mod:`warmers.plan.managed_instances`).

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
from typing import Final

from warmers.pricing import PriceTable, load_prices

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
#: warmstart's choice (an assumption, not AWS's): minutes the LMI minimum holds the highest
#: peak in flight observed (a day: a burst that recurs daily is covered from its second time).
#: On LMI a request beyond capacity is throttled (429, a failed answer, not a slower cold
#: start) and the scaler cannot catch traffic that more than doubles within 5 minutes; AWS's
#: advice for spikes is a higher minimum ahead of them (lambda-managed-instances-scaling.html).
PEAK_HOLD_MIN: Final = 1440
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
    peak_hold_min : int
        Minutes the planned minimum holds the highest peak in flight observed
        (:data:`PEAK_HOLD_MIN`; 0: the forecast and the planner's hysteresis alone), 0..20160.

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
    peak_hold_min: int = PEAK_HOLD_MIN

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
        if not 0 <= self.peak_hold_min <= 14 * 1440:
            raise LmiConfigError("peak_hold_min must be 0..20160 minutes (14 days, the warmer's "
                                 f"longest history), got {self.peak_hold_min}")

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
