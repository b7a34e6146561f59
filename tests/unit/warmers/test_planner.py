from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from warmers.cost import CostModel
from warmers.forecast import (
    AliasForecast,
    ForecastError,
    QuantileForecast,
    busy_concurrency,
    forecast_alias,
)
from warmers.plan.alias import explain_alias, plan_alias
from warmers.plan.policy import (
    AliasPolicy,
    PlanError,
    PlannerConfig,
    WarmPlan,
    account_headroom,
    budget_units,
    chance_of_invocation,
    expected_utilization,
    units_that_pay,
)
from warmers.series import MetricSeries

NOW = 1_800_000_000.0
Q = (0.5, 0.9, 0.95, 0.99)


def fc(values, active=0.9, method="naive", busy=None) -> AliasForecast:
    """A forecast; ``busy`` (mean in flight) defaults to a steady load at the q0.95 peak."""
    qf = QuantileForecast("concurrency", method, 15, 5, Q, tuple(values), values[0], 1440,
                          active)
    rate = QuantileForecast("rate_per_min", method, 15, 5, Q, (0.0,) * 4, 0.0, 1440, active)
    return AliasForecast("agent", "live", NOW, qf, rate, 100.0,
                         busy_concurrency=float(values[2]) if busy is None else busy)


POLICY = AliasPolicy("agent", "live", memory_mb=1024, floor=0, cap=50, budget_usd_per_hour=1.0)


def test_provisions_ceil_of_planning_quantile_with_reason():
    plan = plan_alias(fc((4, 6, 7.2, 9)), POLICY, now_s=NOW, headroom=900)
    assert plan.action == "provisioned" and plan.provisioned_concurrency == 8
    assert "q0.95=7.20" in plan.reason and "break-even 60%" in plan.reason
    assert "mean in flight 7.20" in plan.reason
    assert plan.hourly_cost_usd == pytest.approx(CostModel.us_east_1().pc_hourly_usd(8, 1024))
    assert plan.ceiling >= 8


def test_clamps_floor_cap_budget_headroom():
    assert plan_alias(fc((0, 0, 0.4, 1)), AliasPolicy("a", "live", floor=2), now_s=NOW,
                      headroom=900).provisioned_concurrency == 2
    capped = plan_alias(fc((30, 60, 70, 80)), AliasPolicy("a", "live", cap=20,
                                                          budget_usd_per_hour=100), now_s=NOW,
                        headroom=900)
    assert capped.provisioned_concurrency == 20 and "capped at 20" in capped.reason
    # $1/h at 1 GB buys floor(1 / 0.015) = 66 environments; at 4 GB: 16
    policy = AliasPolicy("a", "live", memory_mb=4096, cap=100, budget_usd_per_hour=1.0)
    assert budget_units(policy, CostModel.us_east_1()) == 16
    by_budget = plan_alias(fc((30, 60, 70, 80)), policy, now_s=NOW, headroom=900)
    assert by_budget.provisioned_concurrency == 16 and "budget" in by_budget.reason
    assert by_budget.hourly_cost_usd <= 1.0
    by_account = plan_alias(fc((30, 60, 70, 80)), AliasPolicy("a", "live", cap=100,
                                                              budget_usd_per_hour=10),
                            now_s=NOW, headroom=12)
    assert by_account.provisioned_concurrency == 12 and "unreserved" in by_account.reason


def test_account_headroom_keeps_100_unreserved():
    assert account_headroom(150, 0) == 50
    assert account_headroom(150, 20) == 70
    assert account_headroom(80, 0) == 0


def test_unknown_headroom_never_raises():
    prev = plan_alias(fc((4, 5, 5, 6)), POLICY, now_s=NOW, headroom=900)
    plan = plan_alias(fc((10, 20, 30, 40)), POLICY, now_s=NOW + 60, previous=prev, headroom=None)
    assert plan.provisioned_concurrency == 5 and "headroom unknown" in plan.reason


def test_hysteresis_small_or_recent_decreases_are_held():
    prev = plan_alias(fc((18, 19, 20, 22)), POLICY, now_s=NOW, headroom=900)
    assert prev.provisioned_concurrency == 20
    small = plan_alias(fc((17, 18, 19, 20)), POLICY, now_s=NOW + 3600, previous=prev,
                       headroom=900)
    assert small.provisioned_concurrency == 20 and "hysteresis" in small.reason
    recent = plan_alias(fc((2, 3, 4, 5)), POLICY, now_s=NOW + 60, previous=prev, headroom=900)
    assert recent.provisioned_concurrency == 20 and "hysteresis" in recent.reason
    later = plan_alias(fc((2, 3, 4, 5)), POLICY, now_s=NOW + 3600, previous=prev, headroom=900)
    assert later.provisioned_concurrency == 4 and later.changed_at_s == NOW + 3600
    # the stabilization window: lowered only to the highest value wanted in the last 600 s
    mid = plan_alias(fc((10, 11, 12, 13)), POLICY, now_s=NOW + 300, previous=prev, headroom=900)
    assert mid.provisioned_concurrency == 20
    low = plan_alias(fc((2, 3, 4, 5)), POLICY, now_s=NOW + 700, previous=mid, headroom=900)
    assert low.provisioned_concurrency == 12 and "stabilization" in low.reason
    up = plan_alias(fc((22, 23, 24, 25)), POLICY, now_s=NOW + 60, previous=prev, headroom=900)
    assert up.provisioned_concurrency == 24  # raising is never held back


def test_no_flapping_on_a_noisy_steady_load():
    rng = np.random.default_rng(0)
    plan, values = None, []
    for i in range(120):
        d = 10 + rng.normal(0, 1.0)
        plan = plan_alias(fc((d - 1, d, d + 0.5, d + 1)), POLICY, now_s=NOW + 60 * i,
                          previous=plan, headroom=900)
        values.append(plan.provisioned_concurrency)
    changes = sum(1 for a, b in itertools.pairwise(values) if a != b)
    assert changes <= 6


def test_fallback_keeps_last_good_plan_within_bounds():
    prev = plan_alias(fc((10, 11, 12, 13)), POLICY, now_s=NOW, headroom=900)
    kept = plan_alias(None, POLICY, now_s=NOW + 60, previous=prev, headroom=900)
    assert kept.fallback and kept.provisioned_concurrency == 12
    assert "metrics unavailable" in kept.reason
    tighter = AliasPolicy("agent", "live", floor=1, cap=8)
    assert plan_alias(None, tighter, now_s=NOW + 60, previous=prev,
                      headroom=900).provisioned_concurrency == 8
    first = plan_alias(None, AliasPolicy("a", "live", floor=3), now_s=NOW, headroom=900)
    assert first.fallback and first.provisioned_concurrency == 3
    nothing = plan_alias(None, AliasPolicy("a", "live"), now_s=NOW, headroom=900)
    assert nothing.action == "none" and nothing.fallback


def test_sparse_function_gets_pings_or_nothing():
    sparse = AliasPolicy("a", "live", sparse_active_fraction=0.05)
    ping = plan_alias(fc((0, 0, 1, 1), active=0.01), sparse, now_s=NOW, headroom=900)
    assert ping.action == "ping" and ping.ping_concurrency == 1
    assert ping.ping_interval_s == 300 and ping.provisioned_concurrency == 0
    assert "sparse" in ping.reason and ping.hourly_cost_usd < 0.01
    idle = plan_alias(fc((0, 0, 0, 0), active=0.01), sparse, now_s=NOW, headroom=900)
    assert idle.action == "none" and "no invocation expected" in idle.reason
    explicit = plan_alias(fc((2, 3, 3.5, 4)), AliasPolicy("a", "live", strategy="ping"),
                          now_s=NOW, headroom=900)
    assert explicit.action == "ping" and explicit.ping_concurrency == 4


def test_snapstart_and_none_strategies_plan_nothing():
    snap = plan_alias(fc((5, 6, 7, 8)), AliasPolicy("a", "live", strategy="snapstart"),
                      now_s=NOW)
    assert snap.action == "none" and "SnapStart" in snap.reason
    assert plan_alias(fc((5, 6, 7, 8)), AliasPolicy("a", "live", strategy="none"),
                      now_s=NOW).action == "none"


@pytest.mark.parametrize("kwargs, msg", [
    ({"alias": "$LATEST"}, r"\$LATEST"),
    ({"floor": 5, "cap": 2}, "floor <= cap"),
    ({"strategy": "magic"}, "strategy"),
    ({"ping_interval_s": 10}, "ping_interval_s"),
    ({"objective": "latency"}, "objective must be one of"),
])
def test_invalid_policies(kwargs, msg):
    base = {"function_name": "a", "alias": "live"} | kwargs
    with pytest.raises(PlanError, match=msg):
        AliasPolicy(**base)


def test_floor_above_budget_is_refused():
    with pytest.raises(PlanError, match="above the budget"):
        plan_alias(fc((1, 1, 1, 1)), AliasPolicy("a", "live", floor=40, cap=50,
                                                 budget_usd_per_hour=0.1), now_s=NOW)


def test_planning_quantile_must_exist():
    with pytest.raises(PlanError, match="planning quantile"):
        plan_alias(fc((1, 1, 1, 1)), POLICY, PlannerConfig(planning_quantile=0.8), now_s=NOW)


def test_plan_round_trips_and_rejects_garbage():
    plan = plan_alias(fc((4, 6, 7.2, 9)), POLICY, now_s=NOW, headroom=900)
    assert WarmPlan.from_dict(plan.to_dict()) == plan
    nan_plan = plan_alias(None, AliasPolicy("a", "live", floor=1), now_s=NOW, headroom=900)
    back = WarmPlan.from_dict(nan_plan.to_dict())
    assert math.isnan(back.demand)
    with pytest.raises(PlanError, match="malformed"):
        WarmPlan.from_dict({"function_name": "a"})


def test_cost_model_break_even_is_sixty_percent():
    for arch in ("x86_64", "arm64"):
        assert CostModel.us_east_1(arch).utilization_break_even() == pytest.approx(0.6, abs=1e-3)
    with pytest.raises(ValueError, match="architecture"):
        CostModel.us_east_1("sparc")  # type: ignore[arg-type]
    c = CostModel.us_east_1()
    assert c.pc_hourly_usd(1, 1024) * 730 == pytest.approx(10.95, abs=0.01)


def test_real_trace_plan_end_to_end(realhash_series):
    y = next(iter(realhash_series.values()))
    series = MetricSeries("f", "live", 0.0, invocations=y, concurrency=np.full(y.shape, np.nan),
                          duration_ms=np.full(y.shape, 300.0))
    forecast = forecast_alias(series, issued_at_s=86400.0)
    plan = plan_alias(forecast, AliasPolicy("f", "live", cap=500, budget_usd_per_hour=50),
                      now_s=86400.0, headroom=900)
    # forecast_alias measured the mean in flight (Little's law on the last hour)
    busy = forecast.busy_concurrency
    assert busy == pytest.approx(float(np.mean(y[-60:])) * 300.0 / 60_000.0)
    cover = math.ceil(forecast.concurrency.at(0.95) - 1e-9)
    paying = units_that_pay(busy, cover, CostModel.us_east_1().utilization_break_even())
    if paying:
        assert plan.action == "provisioned" and plan.provisioned_concurrency == paying
    else:
        assert plan.action in ("ping", "none") and plan.provisioned_concurrency == 0
    assert plan.provisioned_concurrency <= cover


# --------------------------------------------------------------- provisioned concurrency pays


def test_expected_utilization_is_poisson_in_flight():
    # one environment is busy whenever a request is in flight: P(C >= 1) = 1 - e^-b
    assert expected_utilization(0.5, 1) == pytest.approx(1.0 - math.exp(-0.5))
    # two environments: (P(C>=1) + P(C>=2)) / 2
    b = 1.64
    p1 = 1.0 - math.exp(-b)
    p2 = 1.0 - math.exp(-b) * (1.0 + b)
    assert expected_utilization(b, 2) == pytest.approx((p1 + p2) / 2.0)
    assert expected_utilization(0.0, 3) == 0.0
    assert expected_utilization(2000.0, 10) == pytest.approx(1.0)  # no overflow of exp()
    # more environments are used less
    assert expected_utilization(4.0, 4) > expected_utilization(4.0, 6) > expected_utilization(4.0, 8)
    assert units_that_pay(4.0, 10, 0.6) == 6 and units_that_pay(4.0, 3, 0.6) == 3
    assert units_that_pay(0.5, 10, 0.6) == 0
    for bad_busy, bad_units in ((-1.0, 1), (float("nan"), 1), (1.0, 0)):
        with pytest.raises(ValueError):
            expected_utilization(bad_busy, bad_units)


def test_low_utilization_function_gets_no_provisioned_concurrency():
    # GIVEN a function whose window peak is 1-3 environments but that has ~0.05 requests in
    # flight on average (short requests now and then: the Azure trace's common case)
    plan = plan_alias(fc((1, 2, 2, 3), busy=0.05), POLICY, now_s=NOW, headroom=900)
    # THEN no provisioned concurrency: 2 environments would be ~2.5 % used, far below the 60 %
    # break-even, and the reason says so
    assert plan.provisioned_concurrency == 0 and plan.action in ("ping", "none")
    assert "mean in flight 0.05" in plan.reason
    assert "< break-even 60%" in plan.reason and "0 pay" in plan.reason
    # warm pings keep 2 environments for far less than the cold starts they may avoid
    assert plan.action == "ping" and plan.ping_concurrency == 2
    assert "cold starts they may avoid" in plan.reason
    assert plan.hourly_cost_usd < 1e-3


def test_steady_busy_function_gets_provisioned_concurrency():
    # GIVEN a steady 12 requests in flight, window peak 12-15
    plan = plan_alias(fc((12, 13, 14, 15), busy=12.0), POLICY, now_s=NOW, headroom=900)
    # THEN PC covers the peak at the planning quantile: 14 environments are >= 60 % used
    assert plan.action == "provisioned" and plan.provisioned_concurrency == 14
    assert expected_utilization(12.0, 14) >= 0.6
    assert "mean in flight 12.00" in plan.reason and ">= break-even 60%" in plan.reason
    assert "no dearer than on demand" in plan.reason


def test_bursty_function_gets_only_the_provisioned_concurrency_that_pays():
    # GIVEN 4 in flight on average but bursts to 10 in the window
    plan = plan_alias(fc((8, 9, 10, 12), busy=4.0), POLICY, now_s=NOW, headroom=900)
    # THEN PC stops where the next environment would push utilization below break-even;
    # the bursts above it go on demand
    assert plan.action == "provisioned" and plan.provisioned_concurrency == 6
    assert "covering the peak with 10 would be" in plan.reason and "6 pay" in plan.reason
    assert expected_utilization(4.0, 6) >= 0.6 > expected_utilization(4.0, 7)


def test_objective_sla_covers_the_forecast_peak_and_says_what_it_costs():
    # GIVEN the same bursty forecast (4 in flight on average, 10 at the q0.95 peak)
    sla = AliasPolicy("agent", "live", memory_mb=1024, floor=0, cap=50, budget_usd_per_hour=1.0,
                      objective="sla")
    plan, steps = explain_alias(fc((8, 9, 10, 12), busy=4.0), sla, now_s=NOW, headroom=900)
    # THEN the whole cover is bought, not only the 6 that pay, and the plan says so
    assert plan.action == "provisioned" and plan.provisioned_concurrency == 10
    assert "objective sla: cover the peak with 10" in plan.reason and "6 would pay" in plan.reason
    assert [s.value for s in steps if s.name == "objective"] == [10]
    # AND the clamps still hold: the cap, then the budget
    capped = plan_alias(fc((8, 9, 10, 12), busy=4.0),
                        AliasPolicy("agent", "live", memory_mb=1024, cap=7, objective="sla"),
                        now_s=NOW, headroom=900)
    assert capped.provisioned_concurrency == 7
    poor = AliasPolicy("agent", "live", memory_mb=1024, cap=50, objective="sla",
                       budget_usd_per_hour=budget_units_price(3))
    assert plan_alias(fc((8, 9, 10, 12), busy=4.0), poor, now_s=NOW,
                      headroom=900).provisioned_concurrency == 3
    # AND where the cover pays anyway, both objectives agree
    steady = fc((12, 13, 14, 15), busy=12.0)
    assert (plan_alias(steady, sla, now_s=NOW, headroom=900).provisioned_concurrency
            == plan_alias(steady, POLICY, now_s=NOW, headroom=900).provisioned_concurrency)


def budget_units_price(units: int) -> float:
    """An hourly budget that buys ``units`` environments of 1,024 MB and half of one more."""
    one = PlannerConfig().cost.pc_hourly_usd(1, 1024)
    return units * one + 0.5 * one


def test_provisioned_concurrency_is_dropped_when_load_falls_away():
    busy = plan_alias(fc((12, 13, 14, 15), busy=12.0), POLICY, now_s=NOW, headroom=900)
    quiet = plan_alias(fc((0, 1, 1, 2), busy=0.02), POLICY, now_s=NOW + 900, previous=busy,
                       headroom=900)
    assert quiet.provisioned_concurrency == 0 and quiet.action in ("ping", "none")
    # within the cooldown it is held (hysteresis), as before
    held = plan_alias(fc((0, 1, 1, 2), busy=0.02), POLICY, now_s=NOW + 60, previous=busy,
                      headroom=900)
    assert held.provisioned_concurrency == 14 and "hysteresis" in held.reason


def test_floor_is_kept_even_when_it_does_not_pay():
    plan = plan_alias(fc((1, 1, 1, 2), busy=0.01), AliasPolicy("a", "live", floor=1), now_s=NOW,
                      headroom=900)
    assert plan.provisioned_concurrency == 1 and "raised to floor 1" in plan.reason
    assert "costs more than on demand" in plan.reason


def test_unknown_mean_in_flight_uses_the_median_peak():
    plan = plan_alias(fc((4, 6, 7.2, 9), busy=float("nan")), POLICY, now_s=NOW, headroom=900)
    assert plan.provisioned_concurrency == units_that_pay(4.0, 8, 0.6) == 6
    assert "mean in flight unknown" in plan.reason


def test_pings_only_when_cheaper_than_the_cold_starts_they_may_avoid():
    sparse = AliasPolicy("a", "live", memory_mb=128)
    # an invocation is expected only at the q0.99 level (1 % - 5 % chance per window)
    rare = fc((0, 0, 0, 1), active=0.01, busy=0.0)
    assert chance_of_invocation(rare.concurrency) == pytest.approx(0.05)
    cheap_value = PlannerConfig(cold_start_usd_per_gb=1e-6)
    none = plan_alias(rare, sparse, cheap_value, now_s=NOW, headroom=900)
    assert none.action == "none" and "cost more than the cold starts" in none.reason
    # valued at the SnapStart restore price (the default), the same pings pay
    ping = plan_alias(rare, sparse, now_s=NOW, headroom=900)
    assert ping.action == "ping" and ping.ping_concurrency == 1
    with pytest.raises(PlanError, match="cold_start_usd_per_gb"):
        PlannerConfig(cold_start_usd_per_gb=-1.0)


def test_busy_concurrency_is_littles_law_over_the_last_hour():
    inv = np.array([600.0] * 30 + [0.0] * 30 + [120.0] * 60)
    dur = np.array([1000.0] * 30 + [np.nan] * 30 + [500.0] * 60)
    # last 60 minutes: 120/min x 0.5 s = 1 in flight
    assert busy_concurrency(inv, dur) == pytest.approx(1.0)
    # last 90: 30 min at 10 in flight, 30 idle, 30 at 1 -> 11/3; idle minutes count as 0
    assert busy_concurrency(inv[:-30], dur[:-30], minutes=90) == pytest.approx(11.0 / 3.0)
    assert math.isnan(busy_concurrency(np.full(5, np.nan), np.full(5, np.nan)))
    with pytest.raises(ForecastError, match="equal"):
        busy_concurrency(inv, dur[:-1])
    with pytest.raises(ForecastError, match="minutes"):
        busy_concurrency(inv, dur, minutes=0)


def test_forecast_alias_marks_the_mean_unknown_without_invocation_metrics():
    conc = np.full(240, 4.0)
    series = MetricSeries("f", "live", 0.0, invocations=np.zeros(240), concurrency=conc,
                          duration_ms=np.full(240, np.nan))
    forecast = forecast_alias(series, issued_at_s=240 * 60.0)
    assert math.isnan(forecast.busy_concurrency)
    assert any("mean in flight unknown" in n for n in forecast.notes)
    plan = plan_alias(forecast, POLICY, now_s=240 * 60.0, headroom=900)
    assert plan.action == "provisioned" and "mean in flight unknown" in plan.reason
