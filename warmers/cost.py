"""Cost model: AWS Lambda and SageMaker prices (us-east-1, USD), each with its public source.

Pure. Values come from ``tests/data/pricing.md`` (collected 2025-10-28 / 2026-09-19); rows marked
unverified there are marked here too. Re-check before a release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Architecture = Literal["x86_64", "arm64"]

PRICE_LIST_LAMBDA = (
    "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AWSLambda/current/us-east-1/index.json"
)
LAMBDA_PRICING_PAGE = "https://aws.amazon.com/lambda/pricing/"


@dataclass(frozen=True)
class Price:
    """One price with its unit and source."""

    usd: float
    unit: str
    source: str
    verified: bool


@dataclass(frozen=True)
class CostModel:
    """Lambda prices for one architecture, and the derived costs the planner compares.

    Attributes
    ----------
    on_demand_gb_s, pc_configured_gb_s, pc_duration_gb_s, request : Price
        On-demand duration, provisioned concurrency configured (per GB-s configured),
        duration while on provisioned concurrency, and per-request price.

    References
    ----------
    AWS Lambda pricing, https://aws.amazon.com/lambda/pricing/ and the Price List API
    (PRICE_LIST_LAMBDA); tests/data/pricing.md.
    """

    architecture: Architecture
    on_demand_gb_s: Price
    pc_configured_gb_s: Price
    pc_duration_gb_s: Price
    request: Price

    @classmethod
    def us_east_1(cls, architecture: Architecture = "x86_64") -> CostModel:
        """Prices for us-east-1, tier 1.

        Raises
        ------
        ValueError
            For an unknown architecture.
        """
        table = {
            "x86_64": (0.0000166667, 0.0000041667, 0.0000097222),
            "arm64": (0.0000133334, 0.0000033334, 0.0000077778),
        }
        if architecture not in table:
            raise ValueError(f"architecture must be 'x86_64' or 'arm64', got {architecture!r}")
        od, pc, pcd = table[architecture]
        return cls(
            architecture=architecture,
            on_demand_gb_s=Price(od, "GB-s", PRICE_LIST_LAMBDA, False),
            pc_configured_gb_s=Price(pc, "GB-s configured", PRICE_LIST_LAMBDA, False),
            pc_duration_gb_s=Price(pcd, "GB-s", PRICE_LIST_LAMBDA, False),
            request=Price(0.20 / 1_000_000, "request", LAMBDA_PRICING_PAGE, True),
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
