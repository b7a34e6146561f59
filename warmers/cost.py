"""Cost model: AWS Lambda prices (us-east-1, USD) and the derived costs the planner compares.

Pure. The numbers come from the shared price table ``warmers/prices.json`` (via
:mod:`warmers.pricing`), each with its public source; that table is checked against
``tests/data/pricing.md``. Rows marked unverified there are ``verified=False`` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from warmers.pricing import Price, PriceTable, load_prices

Architecture = Literal["x86_64", "arm64"]
ARCHITECTURES: Final[tuple[Architecture, ...]] = ("x86_64", "arm64")

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
