"""Cost model: AWS Lambda prices (us-east-1, USD) and the derived costs the planner compares.

Pure. The numbers come from the shared price table ``warmers/prices.json`` (via
:mod:`warmers.pricing`), each with its public source; that table is checked against
``tests/data/pricing.md``. Rows marked unverified there are ``verified=False`` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from functions.runtime.contract.warmer_document import ARCHITECTURES, Architecture
from warmers.pricing import Price, PriceTable, load_prices

#: Source URLs of the Lambda rows (kept for callers; the table holds each item's own source).
PRICE_LIST_LAMBDA: Final = (
    "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AWSLambda/current/us-east-1/index.json"
)
LAMBDA_PRICING_PAGE: Final = "https://aws.amazon.com/lambda/pricing/"
#: The table prices requests per million (``lambda_requests_per_million``, unit "1M requests").
REQUESTS_PER_PRICE_UNIT: Final = 1_000_000


@dataclass(frozen=True)
class CostModel:
    """Lambda prices for one architecture, and the derived costs the planner compares.

    Attributes
    ----------
    on_demand_gb_s, pc_configured_gb_s, pc_duration_gb_s, request : Price
        On-demand duration, provisioned concurrency configured (per GB-s configured),
        duration while on provisioned concurrency, and per-request price (the table's price
        per million requests divided by 1,000,000).

    References
    ----------
    AWS Lambda pricing, https://aws.amazon.com/lambda/pricing/ and the Price List API
    (PRICE_LIST_LAMBDA); values in warmers/prices.json, checked against tests/data/pricing.md.
    """

    architecture: Architecture
    on_demand_gb_s: Price
    pc_configured_gb_s: Price
    pc_duration_gb_s: Price
    request: Price

    @classmethod
    def us_east_1(cls, architecture: Architecture = "x86_64") -> CostModel:
        """Prices for us-east-1, tier 1, from the shared table ``warmers/prices.json``.

        Raises
        ------
        ValueError
            For an unknown architecture.
        warmers.pricing.PriceTableError
            If the table cannot be read or is invalid.
        """
        return cls.from_table(load_prices(), architecture)

    @classmethod
    def from_table(cls, table: PriceTable, architecture: Architecture = "x86_64") -> CostModel:
        """The Lambda prices of ``table`` for ``architecture`` (e.g. a table with overrides).

        Parameters
        ----------
        table : warmers.pricing.PriceTable
            Needs ``lambda_duration_gb_s``, ``pc_configured_gb_s``, ``pc_duration_gb_s`` (each
            per architecture or shared) and ``lambda_requests_per_million``.
        architecture : {"x86_64", "arm64"}

        Raises
        ------
        ValueError
            For an unknown architecture.
        warmers.pricing.MissingPriceError
            (a ``KeyError``) if the table lacks one of the items, naming it and the file.
        """
        if architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be 'x86_64' or 'arm64', got {architecture!r}")
        per_million = table.price("lambda_requests_per_million")
        request = Price(per_million.usd / REQUESTS_PER_PRICE_UNIT, "request", per_million.source,
                        per_million.verified, f"{per_million.usd} USD per {per_million.unit}")
        return cls(
            architecture=architecture,
            on_demand_gb_s=table.price("lambda_duration_gb_s", architecture=architecture),
            pc_configured_gb_s=table.price("pc_configured_gb_s", architecture=architecture),
            pc_duration_gb_s=table.price("pc_duration_gb_s", architecture=architecture),
            request=request,
        )

    def pc_hourly_usd(self, units: float, memory_mb: int) -> float:
        """Hourly charge for keeping ``units`` environments of ``memory_mb`` provisioned.

        Billed from enable to disable (rounded up to 5 minutes, pricing page); the duration
        charge of invocations served on them is extra and usage-driven (see
        :meth:`utilization_break_even`).
        """
        return float(units) * (memory_mb / 1024.0) * 3600.0 * self.pc_configured_gb_s.usd

    def on_demand_hourly_usd(self, busy_concurrency: float, memory_mb: int) -> float:
        """Duration charge for ``busy_concurrency`` environments busy all hour, on demand."""
        return busy_concurrency * (memory_mb / 1024.0) * 3600.0 * self.on_demand_gb_s.usd

    def pc_total_hourly_usd(self, units: int, busy_concurrency: float, memory_mb: int) -> float:
        """PC configured charge plus the duration served on it (busy part), per hour."""
        busy_on_pc = min(float(units), busy_concurrency)
        spill = max(0.0, busy_concurrency - units)
        gb_h = (memory_mb / 1024.0) * 3600.0
        return (self.pc_hourly_usd(units, memory_mb) + busy_on_pc * gb_h * self.pc_duration_gb_s.usd
                + spill * gb_h * self.on_demand_gb_s.usd)

    def utilization_break_even(self) -> float:
        """Utilization of configured PC above which PC is cheaper than on demand.

        u * od = pc + u * pcd  =>  u = pc / (od - pcd); about 0.60 for x86 and Arm.

        References
        ----------
        tests/data/pricing.md, row "PC break-even (derived)".
        """
        return self.pc_configured_gb_s.usd / (self.on_demand_gb_s.usd - self.pc_duration_gb_s.usd)

    def ping_hourly_usd(self, concurrency: int, interval_s: float, hold_ms: float,
                        memory_mb: int) -> float:
        """Cost of warm pings: ``concurrency`` invocations of ``hold_ms`` every ``interval_s``."""
        per_hour = 3600.0 / interval_s * concurrency
        gb_s = per_hour * (hold_ms / 1000.0) * (memory_mb / 1024.0)
        return per_hour * self.request.usd + gb_s * self.on_demand_gb_s.usd


#: Hours in the month AWS's pricing examples use (365 x 24 / 12).
HOURS_PER_MONTH: Final = 730.0
#: The warmer's compute per managed alias per run, ms: forecast + plan of one alias
#: (``bench/results/warmer_scale.md``: 10.3 ms per alias, dry run of ``run_once``).
WARMER_COMPUTE_MS_PER_ALIAS: Final = 10.3
#: The warmer function's memory, MB (``infra/constructs/warmer.py``, ``Warmer(memory_mb=512)``).
WARMER_MEMORY_MB: Final = 512


@dataclass(frozen=True)
class WarmerMonthlyCost:
    """What the scheduled warmer costs a month, USD: a part per managed alias, a fixed part.

    Attributes
    ----------
    runs_per_month : float
        Scheduled runs in :data:`HOURS_PER_MONTH`.
    metrics_per_alias_month : float
        GetMetricData metrics requested per alias (one query per metric per run).
    reads_usd_per_alias : float
        Those reads (priced per metric requested).
    compute_usd_per_alias : float
        The warmer's duration for one alias's forecast and plan, on demand.
    invocations_usd : float
        The warmer Lambda's requests, and the duration of its API waits when given (whole
        stack, not per alias).
    scheduler_usd : float
        EventBridge Scheduler's invocations, beyond its monthly free tier (0 within it).
    """

    runs_per_month: float
    metrics_per_alias_month: float
    reads_usd_per_alias: float
    compute_usd_per_alias: float
    invocations_usd: float
    scheduler_usd: float

    @property
    def per_alias_usd(self) -> float:
        """USD per managed alias per month (reads + compute)."""
        return self.reads_usd_per_alias + self.compute_usd_per_alias

    @property
    def fixed_usd(self) -> float:
        """USD per month whatever the aliases (invocations + schedule beyond the free tier)."""
        return self.invocations_usd + self.scheduler_usd

    def total_usd(self, aliases: int) -> float:
        """USD per month for ``aliases`` managed aliases."""
        return self.fixed_usd + aliases * self.per_alias_usd


def warmer_monthly_cost(table: PriceTable, *, metrics_per_run: int, period_s: float = 60.0,
                        compute_ms_per_alias: float = WARMER_COMPUTE_MS_PER_ALIAS,
                        memory_mb: int = WARMER_MEMORY_MB,
                        architecture: Architecture = "x86_64",
                        scheduler_free_tier: bool = True,
                        wait_ms_per_run: float = 0.0) -> WarmerMonthlyCost:
    """The scheduled warmer's monthly cost from the price table.

    Parameters
    ----------
    table : warmers.pricing.PriceTable
        Needs ``cloudwatch_get_metric_data_per_1000_metrics``, ``lambda_duration_gb_s``,
        ``lambda_requests_per_million`` and ``eventbridge_scheduler_per_million``.
    metrics_per_run : int
        GetMetricData metrics the warmer requests per alias per run
        (``len(warmers.cloudwatch.QUERIES)``).
    period_s : float
        Seconds between runs (``rate(1 minute)``: 60), > 0.
    compute_ms_per_alias : float
        Warmer duration per alias per run, ms.
    memory_mb : int
        The warmer function's memory, MB.
    architecture : {"x86_64", "arm64"}
    scheduler_free_tier : bool
        The account's 14M free Scheduler invocations a month cover the warmer's (the usual
        case); False prices every invocation.
    wait_ms_per_run : float
        Duration each run spends waiting on AWS APIs whatever the aliases, ms (not measured
        without an account; 0 by default), priced into ``invocations_usd``.

    Returns
    -------
    WarmerMonthlyCost

    Raises
    ------
    ValueError
        ``period_s`` <= 0 or ``metrics_per_run`` < 0.

    References
    ----------
    Prices and their sources: warmers/prices.json (tests/data/pricing.md). Not included, as the
    shared price list has no price for them: CloudWatch Logs ingestion of the warmer's log
    lines, the target-tracking alarms Application Auto Scaling creates for aliases on
    provisioned concurrency; SSM standard parameters and their standard throughput are free
    (tests/data/pricing.md).
    """
    if period_s <= 0 or metrics_per_run < 0 or wait_ms_per_run < 0:
        raise ValueError(f"period_s must be > 0, metrics_per_run and wait_ms_per_run >= 0, got "
                         f"{period_s}, {metrics_per_run}, {wait_ms_per_run}")
    runs = HOURS_PER_MONTH * 3600.0 / period_s
    metrics = runs * metrics_per_run
    reads = metrics / 1000.0 * table.price("cloudwatch_get_metric_data_per_1000_metrics").usd
    gb_s_per_ms = runs / 1000.0 * memory_mb / 1024.0  # GB-s a month per ms of every run
    gb_s_usd = table.price("lambda_duration_gb_s", architecture=architecture).usd
    compute = gb_s_per_ms * compute_ms_per_alias * gb_s_usd
    invocations = (runs / REQUESTS_PER_PRICE_UNIT * table.price("lambda_requests_per_million").usd
                   + gb_s_per_ms * wait_ms_per_run * gb_s_usd)
    scheduler = 0.0 if scheduler_free_tier else (
        runs / REQUESTS_PER_PRICE_UNIT * table.price("eventbridge_scheduler_per_million").usd)
    return WarmerMonthlyCost(runs, metrics, reads, compute, invocations, scheduler)
