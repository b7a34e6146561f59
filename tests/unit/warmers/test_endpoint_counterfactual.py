"""The endpoint planner's counterfactual (issue 19): it pays only for the cold starts that
would fail without it, from the alias's SLA and cold-start time (``warmers.strategy``'s
late-fraction model), never for raw new environments."""

from __future__ import annotations

import numpy as np
import pytest

from warmers.plan.endpoint import (
    AgentDemand,
    EndpointPolicy,
    cold_start_late_fraction,
    plan_endpoint,
)
from warmers.plan.policy import AliasPolicy, PlanError, PlannerConfig
from warmers.series import MetricSeries

NOW = 1_800_000_000.0 - 1_800_000_000.0 % 60


def history(duration_ms: float, minutes: int = 60) -> MetricSeries:
    return MetricSeries(function_name="fn", alias="live", start_s=NOW - minutes * 60.0,
                        invocations=np.full(minutes, 100.0), concurrency=np.full(minutes, 2.0),
                        duration_ms=np.full(minutes, duration_ms))


def policy(**kw: object) -> AliasPolicy:
    return AliasPolicy("fn", "live", **kw)  # type: ignore[arg-type]


def test_cold_starts_that_fit_the_sla_are_not_late_and_those_that_cannot_are() -> None:
    # an init of 1.6/1.9 s p50/p95 and 500 ms requests: 2.4 s fits an 8 s SLA...
    roomy = policy(sla_ms=8000.0, cold_start_p50_ms=1600.0, cold_start_p95_ms=1900.0)
    share, why = cold_start_late_fraction(roomy, history(500.0))
    assert share == pytest.approx(0.0, abs=1e-9) and "0.00% of cold starts late" in why
    # ...never a 1 s SLA; half of them at a 2.1 s one (the init's median ends at the SLA)
    tight = policy(sla_ms=1000.0, cold_start_p50_ms=1600.0, cold_start_p95_ms=1900.0)
    assert cold_start_late_fraction(tight, history(500.0))[0] == pytest.approx(1.0)
    half = policy(sla_ms=2100.0, cold_start_p50_ms=1600.0, cold_start_p95_ms=1900.0)
    assert cold_start_late_fraction(half, history(500.0))[0] == pytest.approx(0.5, abs=0.01)


def test_unknown_sla_cold_start_or_durations_count_every_new_environment() -> None:
    share, why = cold_start_late_fraction(policy(), history(500.0))
    assert share is None and "every new environment counted" in why
    few = policy(sla_ms=8000.0, cold_start_p50_ms=1600.0, cold_start_p95_ms=1900.0)
    gaps = history(500.0, minutes=10)
    gaps.duration_ms[:7] = np.nan  # minutes without a Duration datapoint
    share, why = cold_start_late_fraction(few, gaps)
    assert share is None and "3 minutes with a Duration" in why


def test_bad_sla_or_cold_start_times_are_refused_naming_the_alias() -> None:
    with pytest.raises(PlanError, match="fn:live: sla_ms must be"):
        policy(sla_ms=0.0)
    with pytest.raises(PlanError, match="go together"):
        policy(cold_start_p50_ms=10.0)
    with pytest.raises(PlanError, match="cold_start_p50_ms <= cold_start_p95_ms"):
        policy(cold_start_p50_ms=10.0, cold_start_p95_ms=5.0)


def _plan(demand: AgentDemand, failed_answer_usd: float | None) -> object:
    endpoint = EndpointPolicy("gpu", agents=("fn:live",), target="inference_component",
                              inference_component="ic", cap=4, budget_usd_per_hour=10.0,
                              failed_answer_usd=failed_answer_usd)
    return plan_endpoint(endpoint, {"fn:live": demand}, {"fn:live": "snapstart"},
                         {"fn:live": 1024}, PlannerConfig(), window_min=15, now_s=NOW,
                         previous=None)


@pytest.mark.parametrize("failed_answer_usd", [None, 1.0])
def test_no_capacity_is_bought_for_cold_starts_that_answer_in_time_anyway(
        failed_answer_usd: float | None) -> None:
    # GIVEN 8 new environments forecast, none of whose cold starts would answer late
    ok = AgentDemand("fn:live", peak=9, warm=1, new_environments=8, chance=1.0,
                     late_fraction=0.0, late_source="0.00% of cold starts late")
    run = _plan(ok, failed_answer_usd)
    # THEN the endpoint wants nothing, even with failed answers not priced
    assert run.plan.capacity == 0 and not run.plan.pays  # type: ignore[attr-defined]
    assert run.plan.alternative_usd_per_hour == 0.0  # type: ignore[attr-defined]
    assert "answer in time without the endpoint" in {
        s.name: s.source for s in run.steps}["alternative_usd_per_hour"]  # type: ignore[attr-defined]


def test_only_the_late_share_of_cold_starts_is_priced() -> None:
    every = AgentDemand("fn:live", peak=9, warm=1, new_environments=8, chance=1.0)
    tenth = AgentDemand("fn:live", peak=9, warm=1, new_environments=8, chance=1.0,
                        late_fraction=0.1, late_source="10% late")
    a, b = _plan(every, 0.05), _plan(tenth, 0.05)
    # 8 x 4 windows/h = 32 cold starts/h; all of them at $0.05, or a tenth of them
    assert a.plan.alternative_usd_per_hour == pytest.approx(32 * 0.05)  # type: ignore[attr-defined]
    assert b.plan.alternative_usd_per_hour == pytest.approx(3.2 * 0.05)  # type: ignore[attr-defined]
    assert {s.name: s.value for s in b.steps}["late_fraction[fn:live]"] == 0.1  # type: ignore[attr-defined]


def test_an_sla_below_the_warm_duration_makes_no_cold_start_late_and_buys_nothing() -> None:
    # every request is in the tail (its warm duration alone misses the SLA): a cold start
    # cannot make it worse, so the endpoint would avoid no failed answer
    tail_only = policy(sla_ms=300.0, cold_start_p50_ms=1600.0, cold_start_p95_ms=1900.0)
    share, _ = cold_start_late_fraction(tail_only, history(500.0))
    assert share == 0.0
    run = _plan(AgentDemand("fn:live", peak=5, warm=1, new_environments=4, chance=1.0,
                            late_fraction=share, late_source="tail only"), None)
    assert run.plan.capacity == 0  # type: ignore[attr-defined]


def test_a_forecast_that_jumps_by_orders_of_magnitude_is_bounded_by_cap_and_budget() -> None:
    from warmers.config import WarmerConfig
    from warmers.plan.run import AccountLimits, plan_run

    minutes = 240
    conc = np.ones(minutes)
    conc[np.arange(minutes) % 7 == 0] = 5000.0  # bursts of x5,000 every 7 minutes
    conc[-5:] = 1.0  # calm now: the forecast burst is all new environments
    jump = MetricSeries(function_name="fn", alias="live", start_s=NOW - minutes * 60.0,
                        invocations=conc * 100.0, concurrency=conc,
                        duration_ms=np.full(minutes, 600.0))
    config = WarmerConfig.from_dict({
        "aliases": [{"function_name": "fn", "alias": "live", "strategy": "provisioned",
                     "memory_mb": 1024, "cap": 20, "budget_usd_per_hour": 1.0,
                     "objective": "sla", "sla_ms": 2000.0, "cold_start_p50_ms": 1600.0,
                     "cold_start_p95_ms": 1900.0}],
        "endpoints": [{"endpoint_name": "gpu", "agents": ["fn:live"],
                       "target": "inference_component", "inference_component": "ic", "cap": 3,
                       "budget_usd_per_hour": 2.5, "failed_answer_usd": 1.0}],
        "history_days": minutes / 1440})
    run = plan_run({"fn:live": jump}, {}, AccountLimits.lambda_default(), config, NOW)
    alias, endpoint = run.alias("fn:live"), run.endpoint("gpu")
    # THEN the PC stays within its cap and hourly budget, the endpoint within its own (2 of
    # $1.1267/h copies fit $2.5/h), each saying what bound it
    assert 0 < alias.plan.provisioned_concurrency <= 20
    assert alias.plan.hourly_cost_usd <= 1.0 + 1e-9
    assert endpoint.plan.capacity == 2
    assert endpoint.plan.hourly_cost_usd <= 2.5
    assert "budget" in endpoint.plan.reason
