"""``warmers.strategy``: SnapStart only where an on-demand cold start can break the SLA."""

from __future__ import annotations

import math

import numpy as np
import pytest

from warmers.strategy import ColdStartTime, late_fraction, recommend_strategy

LEVELS = np.array([0.0, 0.01, 0.25, 0.5, 0.75, 0.99, 1.0])
INIT = ColdStartTime(1646.0, 1912.0)  # the shipped calibration's on-demand init
RESTORE = ColdStartTime(28.0, 33.0)


def _uniform(lo_ms: float, hi_ms: float) -> np.ndarray:
    return lo_ms + (hi_ms - lo_ms) * LEVELS


def test_no_cold_start_is_late_when_the_slowest_request_leaves_room_for_the_init() -> None:
    # durations 0..1 s, SLA 10 s: even a 5-sigma init (~3.6 s) is on time
    assert late_fraction(10_000.0, INIT, LEVELS, _uniform(0.0, 1000.0)) < 1e-9
    advice = recommend_strategy(10_000.0, INIT, RESTORE, LEVELS, _uniform(0.0, 1000.0))
    assert advice.strategy == "provisioned" and "on demand" in advice.reason


def test_late_fraction_matches_the_lognormal_tail_for_a_fixed_duration() -> None:
    # every request takes 200 ms: late iff init > 1,800 ms; P = 1 - Phi(ln(1800/1646)/sigma)
    fixed = np.full(LEVELS.shape, 200.0)
    sigma = math.log(1912.0 / 1646.0) / 1.6448536269514722
    expected = 0.5 * math.erfc(math.log(1800.0 / 1646.0) / sigma / math.sqrt(2.0))
    assert late_fraction(2000.0, INIT, LEVELS, fixed) == pytest.approx(expected, rel=1e-9)
    advice = recommend_strategy(2000.0, INIT, RESTORE, LEVELS, fixed)
    assert advice.strategy == "snapstart"
    assert advice.late_fraction_on_demand == pytest.approx(expected, rel=1e-9)
    assert advice.late_fraction_snapstart == 0.0
    assert f"{expected:.2%}" in advice.reason


def test_requests_slower_than_the_sla_when_warm_are_not_counted_late() -> None:
    # half the requests take longer than the SLA even warm (the tail, apart); the other half
    # take 100 ms and leave 9.9 s for the init
    levels = np.array([0.0, 0.5, 0.500001, 1.0])
    durations = np.array([100.0, 100.0, 20_000.0, 20_000.0])
    assert late_fraction(10_000.0, INIT, levels, durations) < 1e-3


def test_a_fixed_init_counts_exactly_the_requests_it_pushes_over() -> None:
    fixed_init = ColdStartTime(1000.0, 1000.0)
    # durations uniform on 0..2,000 ms, SLA 2,000: late iff d > 1,000 ms: half of them
    assert late_fraction(2000.0, fixed_init, LEVELS, _uniform(0.0, 2000.0)) == pytest.approx(
        0.5, abs=1e-3)


def test_without_snapstart_the_advice_stays_on_demand_and_says_why() -> None:
    fixed = np.full(LEVELS.shape, 200.0)
    advice = recommend_strategy(2000.0, INIT, RESTORE, LEVELS, fixed, snapstart_supported=False)
    assert advice.strategy == "provisioned" and "not available" in advice.reason


def test_the_tolerance_moves_the_choice() -> None:
    fixed = np.full(LEVELS.shape, 200.0)
    share = late_fraction(2000.0, INIT, LEVELS, fixed)
    assert recommend_strategy(2000.0, INIT, RESTORE, LEVELS, fixed,
                              max_late_fraction=share).strategy == "provisioned"
    assert recommend_strategy(2000.0, INIT, RESTORE, LEVELS, fixed,
                              max_late_fraction=share * 0.99).strategy == "snapstart"


@pytest.mark.parametrize("kwargs, match", [
    ({"sla_ms": 0.0}, "sla_ms"),
    ({"sla_ms": float("nan")}, "sla_ms"),
    ({"levels": np.array([0.0, 0.5])}, "same shape"),
    ({"levels": np.array([0.1, 0.01, 0.25, 0.5, 0.75, 0.99, 1.0])}, "increase from 0 to 1"),
    ({"durations": np.array([5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])}, "non-decreasing"),
    ({"durations": np.full(7, np.nan)}, "NaN"),
])
def test_bad_quantiles_get_a_clear_error(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    args = {"sla_ms": 2000.0, "levels": LEVELS, "durations": _uniform(0.0, 100.0), **kwargs}
    with pytest.raises(ValueError, match=match):
        late_fraction(args["sla_ms"], INIT, args["levels"], args["durations"])


def test_bad_times_and_tolerance_get_a_clear_error() -> None:
    with pytest.raises(ValueError, match="p95_ms"):
        ColdStartTime(100.0, 50.0)
    with pytest.raises(ValueError, match="p50_ms"):
        ColdStartTime(-1.0, 50.0)
    with pytest.raises(ValueError, match="max_late_fraction"):
        recommend_strategy(2000.0, INIT, RESTORE, LEVELS, _uniform(0.0, 100.0),
                           max_late_fraction=1.0)


def test_an_alias_at_its_concurrency_limit_gets_snapstart_even_when_its_cold_starts_are_on_time() -> None:
    fast = np.array([10.0, 20.0, 40.0, 60.0, 80.0, 150.0, 300.0])
    # GIVEN cold starts that leave room in a 9 s SLA: on demand, whatever the peak below 90 %
    for peak in (None, 10.0, 899.0):
        got = recommend_strategy(9000.0, INIT, RESTORE, LEVELS, fast,
                                 peak_concurrency=peak, concurrency_limit=1000)
        assert got.strategy == "provisioned", peak
    # WHEN its peak reaches 90 % of the limit, THEN SnapStart, saying why
    got = recommend_strategy(9000.0, INIT, RESTORE, LEVELS, fast, peak_concurrency=900.0,
                             concurrency_limit=1000)
    assert got.strategy == "snapstart" and "concurrency limit 1000" in got.reason
    # unless SnapStart is not available there
    got = recommend_strategy(9000.0, INIT, RESTORE, LEVELS, fast, peak_concurrency=1000.0,
                             concurrency_limit=1000, snapstart_supported=False)
    assert got.strategy == "provisioned"
