"""The scheduled warmer's own monthly cost (issue 20 item 4): computed from the price table and
the warmer's actual reads, and the README and cdk.json say the same number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warmers.cloudwatch import QUERIES
from warmers.cost import HOURS_PER_MONTH, warmer_monthly_cost
from warmers.pricing import load_prices

REPO = Path(__file__).resolve().parents[3]


def test_the_cost_per_alias_month_is_the_reads_and_the_compute() -> None:
    table = load_prices()
    cost = warmer_monthly_cost(table, metrics_per_run=len(QUERIES))
    assert len(QUERIES) == 3  # ConcurrentExecutions, Invocations, Duration
    assert cost.runs_per_month == HOURS_PER_MONTH * 60 == 43_800
    assert cost.metrics_per_alias_month == 131_400
    per_1000 = table.price("cloudwatch_get_metric_data_per_1000_metrics").usd
    assert cost.reads_usd_per_alias == pytest.approx(131.4 * per_1000) == pytest.approx(1.314)
    gb_s = 43_800 * 0.0103 * 0.5  # 10.3 ms a run at 512 MB
    assert cost.compute_usd_per_alias == pytest.approx(
        gb_s * table.price("lambda_duration_gb_s", architecture="x86_64").usd)
    assert cost.per_alias_usd == pytest.approx(1.3178, abs=1e-4)
    # the stack's fixed part: the warmer's requests; the schedule is within its free tier
    assert cost.invocations_usd == pytest.approx(0.0438 * 0.2) and cost.scheduler_usd == 0.0
    assert cost.total_usd(2) == pytest.approx(2 * cost.per_alias_usd + cost.fixed_usd)
    beyond = warmer_monthly_cost(table, metrics_per_run=3, scheduler_free_tier=False)
    assert beyond.scheduler_usd == pytest.approx(0.0438)
    waiting = warmer_monthly_cost(table, metrics_per_run=3, wait_ms_per_run=100.0)
    assert waiting.fixed_usd - cost.fixed_usd == pytest.approx(0.0365, abs=1e-4)
    slower = warmer_monthly_cost(table, metrics_per_run=3, period_s=300.0)
    assert slower.per_alias_usd == pytest.approx(cost.per_alias_usd / 5)
    with pytest.raises(ValueError, match="period_s must be > 0"):
        warmer_monthly_cost(table, metrics_per_run=3, period_s=0)


def test_the_readme_and_cdk_json_state_the_computed_cost() -> None:
    """GIVEN the cost computed from warmers/prices.json WHEN the README's switch table and
    cdk.json's warmer note state it THEN they round it the same way (a price change that moves
    it must update both)."""
    cost = warmer_monthly_cost(load_prices(), metrics_per_run=len(QUERIES))
    stated = f"${cost.per_alias_usd:.2f} per alias-month"
    readme = (REPO / "README.md").read_text()
    assert f"**about {stated}**" in readme
    assert f"about {stated}" in readme.split("| `warmer.enabled` | `true` | the scheduled", 1)[1]
    assert f"${cost.reads_usd_per_alias:.3f} |" in readme
    assert f"about ${cost.total_usd(1):.2f} a month" in readme
    assert f"about ${cost.total_usd(2):.2f}" in readme
    gpu_hour = load_prices().price("sagemaker_ml_g6_xlarge_hour").usd  # the default instance
    assert f"`ml.g6.xlarge` ${gpu_hour} an instance-hour, **about ${gpu_hour * HOURS_PER_MONTH:,.0f} " \
        "per instance-month**" in readme
    warmstart = json.loads((REPO / "cdk.json").read_text())["context"]["warmstart"]
    assert warmstart["warmer"]["enabled"] is True
    assert warmstart["gpu_endpoint"]["enabled"] is False  # opt-in
    assert f"About {stated}" in warmstart["warmer"]["_doc"]
