"""Prices, Lambda limits and policy defaults used by the simulator, each with its source.

Prices are us-east-1, x86, USD, read from the shared table ``warmers/prices.json`` (see
:mod:`warmers.pricing`; checked against ``tests/data/pricing.md``, the copy of
``../shared/data/pricing.md``); rows marked *unverified* there are ``verified=False`` in the table.

References
----------
PL-λ: https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AWSLambda/current/us-east-1/index.json
PL-SM: https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonSageMaker/current/us-east-1/index.csv
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from warmers.cost import REQUESTS_PER_PRICE_UNIT
from warmers.pricing import PriceTable, load_prices

PL_LAMBDA = (
    "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AWSLambda/current/us-east-1/index.json"
)
PL_SAGEMAKER = (
    "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonSageMaker/current/us-east-1/"
    "index.csv"
)

#: Architecture the simulator prices (the agent's default, cdk.json ``agent.architecture``).
SIM_ARCHITECTURE: Final = "x86_64"
#: Instance type of the GPU overflow endpoint (cdk.json ``gpu_endpoint.instance_type``).
GPU_ENDPOINT_INSTANCE_TYPE: Final = "ml.g6.xlarge"

#: Field of :class:`SimulatorPrices` -> item of ``warmers/prices.json`` (looked up for ``SIM_ARCHITECTURE``).
PRICE_ITEMS: Final[dict[str, str]] = {
    "ondemand_gb_s_usd": "lambda_duration_gb_s",
    "request_usd": "lambda_requests_per_million",
    "pc_configured_gb_s_usd": "pc_configured_gb_s",
    "pc_duration_gb_s_usd": "pc_duration_gb_s",
    "snapstart_cache_gb_s_usd": "snapstart_cache_gb_s",
    "snapstart_restore_gb_usd": "snapstart_restore_gb",
    "gpu_endpoint_hour_usd": "sagemaker_" + GPU_ENDPOINT_INSTANCE_TYPE.replace(".", "_") + "_hour",
    "get_metric_data_metric_usd": "cloudwatch_get_metric_data_per_1000_metrics",
}


def _usd(name: str, table: PriceTable | None = None) -> float:
    """USD of the :class:`SimulatorPrices` field ``name`` in ``table`` (default: the shared table)."""
    source = table if table is not None else load_prices()
    price = source.price(PRICE_ITEMS[name], architecture=SIM_ARCHITECTURE)
    if name == "request_usd":
        return price.usd / REQUESTS_PER_PRICE_UNIT
    if name == "get_metric_data_metric_usd":
        return price.usd / 1000.0  # priced per 1,000 metrics requested
    return price.usd


@dataclass(frozen=True)
class SimulatorPrices:
    """Unit prices of the cost model (USD); defaults come from ``warmers/prices.json``.

    Attributes
    ----------
    ondemand_gb_s_usd : float
        Lambda on-demand duration, per GB-s (x86, tier 1). Source: PL-λ (unverified).
    request_usd : float
        Lambda request, per request (the table prices 1M requests). Source:
        https://aws.amazon.com/lambda/pricing/
    pc_configured_gb_s_usd : float
        Provisioned concurrency, per GB-s configured. Source: PL-λ (unverified).
    pc_duration_gb_s_usd : float
        Duration of invocations served by provisioned concurrency, per GB-s. Source: PL-λ.
    snapstart_cache_gb_s_usd : float
        SnapStart snapshot cache, per GB-s of the published version. Source: PL-λ (unverified).
    snapstart_restore_gb_usd : float
        SnapStart restore, per GB restored. Source: PL-λ (unverified).
    gpu_endpoint_hour_usd : float
        SageMaker real-time ``ml.g6.xlarge``, per hour (the overflow endpoint). Source: PL-SM
        (unverified transcription; the table's note names the CSV version).
    get_metric_data_metric_usd : float
        CloudWatch ``GetMetricData``, per metric requested (the table prices 1,000; not in
        the free tier): what the warmer's reads cost. Source: secondary (unverified).

    The table item behind each field is in :data:`PRICE_ITEMS`; its source in
    :data:`PRICE_SOURCES`.
    """

    ondemand_gb_s_usd: float = _usd("ondemand_gb_s_usd")
    request_usd: float = _usd("request_usd")
    pc_configured_gb_s_usd: float = _usd("pc_configured_gb_s_usd")
    pc_duration_gb_s_usd: float = _usd("pc_duration_gb_s_usd")
    snapstart_cache_gb_s_usd: float = _usd("snapstart_cache_gb_s_usd")
    snapstart_restore_gb_usd: float = _usd("snapstart_restore_gb_usd")
    gpu_endpoint_hour_usd: float = _usd("gpu_endpoint_hour_usd")
    get_metric_data_metric_usd: float = _usd("get_metric_data_metric_usd")

    @classmethod
    def from_table(cls, table: PriceTable) -> SimulatorPrices:
        """All fields from ``table`` (e.g. the shared table with overrides).

        Raises
        ------
        warmers.pricing.MissingPriceError
            (a ``KeyError``) if the table lacks an item of :data:`PRICE_ITEMS`.
        """
        return cls(**{name: _usd(name, table) for name in PRICE_ITEMS})


def price_sources(table: PriceTable | None = None) -> dict[str, str]:
    """Field of :class:`SimulatorPrices` -> source of its value in ``table`` (default: the shared table)."""
    table = table if table is not None else load_prices()
    return {name: table.price(item, architecture=SIM_ARCHITECTURE).source
            for name, item in PRICE_ITEMS.items()}


#: Field of :class:`SimulatorPrices` -> source URL (or "secondary: ...") of its value in the shared table.
PRICE_SOURCES: dict[str, str] = price_sources()

#: Billing of the on-demand init phase: since 2025-08-01 Lambda bills INIT like invocation
#: duration for on-demand functions. Source:
#: https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/
BILL_ONDEMAND_INIT = True

#: Lambda memory range and step. Source:
#: https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html
LAMBDA_MIN_MEMORY_MB = 128
LAMBDA_MAX_MEMORY_MB = 10_240

#: Provisioned concurrency becomes usable "after a minute or two of preparation", then
#: up to 6,000 environments a minute per function; nothing is usable until the whole request
#: is allocated. Source: https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
PC_PREPARATION_S = 120
PC_ALLOCATION_PER_MIN = 6_000

#: Provisioned concurrency is billed from enable to disable, rounded up to 5 minutes.
#: Source: https://aws.amazon.com/lambda/pricing/
PC_BILLING_ROUND_S = 300

#: Lambda does not document its idle reclaim ("kept for some time",
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). Policies that
#: do not set a keep-alive of their own model it as this fixed keep-alive (the middle of the
#: 5/10/15-minute baselines; Shahrad et al. also quote 10 minutes for AWS).
DEFAULT_KEEP_ALIVE_S = 600

#: Warm pings of the Serverless warmup plugin: ``rate(5 minutes)``, concurrency 1. Source:
#: https://github.com/juanjoDiaz/serverless-plugin-warmup (README, "Configuration").
PING_INTERVAL_S = 300
PING_CONCURRENCY = 1
#: Billed duration of a ping answered without app code (Lambda bills in 1 ms steps,
#: https://aws.amazon.com/lambda/pricing/). The contract's ``hold_ms`` (75) applies to N > 1.
PING_BILLED_MS = 1.0
PING_HOLD_MS = 75.0

#: Application Auto Scaling target tracking on ``LambdaProvisionedConcurrencyUtilization``:
#: target 0.7 (DESIGN.md; the Lambda docs' example), scale-out alarm after 3 one-minute data
#: points above the target, scale-in alarm after 15 data points below 90 % of it, cool-downs
#: 0 s for Lambda (CDK/App Auto Scaling default for Lambda provisioned concurrency).
#: Sources: https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html ,
#: https://docs.aws.amazon.com/autoscaling/application/userguide/target-tracking-scaling-policy-overview.html ,
#: https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_lambda.UtilizationScalingOptions.html
TT_TARGET = 0.7
TT_SCALE_OUT_POINTS = 3
TT_SCALE_IN_POINTS = 15
TT_SCALE_IN_FACTOR = 0.9
TT_SCALE_OUT_COOLDOWN_S = 0
TT_SCALE_IN_COOLDOWN_S = 0
TT_MIN_CAPACITY = 1

#: Hybrid histogram policy, Shahrad et al., "Serverless in the Wild", USENIX ATC 2020, sec. 4.2:
#: 4-hour range of 1-minute bins, pre-warm window at the 5th and keep-alive up to the 99th
#: percentile of idle times with a 10 % margin, standard keep-alive (no pre-warm, keep-alive =
#: the range) while the histogram is not representative (coefficient of variation of the bin
#: counts below 2, or fewer than 10 idle times: our threshold, the paper names none), and a
#: forecast of the next idle time, pre-warmed with a 15 % margin, when more than half of the
#: idle times are out of bounds (the paper: "most").
HIST_RANGE_MIN = 240
HIST_HEAD_PCT = 5.0
HIST_TAIL_PCT = 99.0
HIST_MARGIN = 0.10
HIST_CV_THRESHOLD = 2.0
HIST_MIN_SAMPLES = 10
HIST_OOB_SHARE = 0.5
HIST_FORECAST_MARGIN = 0.15

#: Default SLA of a P0 route (DESIGN.md). Functions whose own p99 duration is long get
#: ``SLA_DURATION_FACTOR`` x p99 instead (they behave like P2 "long report" routes).
DEFAULT_SLA_MS = 2_000.0
SLA_DURATION_FACTOR = 1.5

#: Citation printed under every result computed from the trace.
TRACE_CITATION = (
    "Trace: Azure Functions Trace 2019 (Azure Public Dataset, CC-BY 4.0), M. Shahrad et al., "
    '"Serverless in the Wild: Characterizing and Optimizing the Serverless Workload at a Large '
    'Cloud Provider", USENIX ATC 2020; subset as vendored by vHive InVitro (MIT).'
)
