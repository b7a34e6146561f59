from __future__ import annotations

import pytest

from warmers.degradation import (
    level_for_utilization,
    seconds_at_or_above,
    sustained_level,
    utilization,
)


@pytest.mark.parametrize("u, level", [
    (0.0, "L0"), (0.9499, "L0"), (0.95, "L1"), (0.9799, "L1"), (0.98, "L2"),
    (0.9949, "L2"), (0.995, "L3"), (1.2, "L3"),
])
def test_thresholds(u, level):
    assert level_for_utilization(u) == level


def test_bad_utilization():
    with pytest.raises(ValueError):
        level_for_utilization(float("nan"))
    with pytest.raises(ValueError, match="available_concurrency"):
        utilization(5, 0)
    assert utilization(99.5, 100) == pytest.approx(0.995)


def test_sustained_needs_the_whole_window():
    now = 1000.0
    # 1-second samples (instantaneous: max == mean): 40 s at 0.99 -> L2 held for 30 s
    samples = [(now - 40 + i, 0.99, 0.99) for i in range(41)]
    assert sustained_level(samples, now_s=now, period_s=1.0) == "L2"
    # a 20 s burst at 1.0 after 0.96: only L1 was sustained 30 s
    samples = [(now - 40 + i, *(2 * (0.96 if i < 21 else 1.0,))) for i in range(41)]
    assert sustained_level(samples, now_s=now, period_s=1.0) == "L1"
    # a hole or NaN in the window -> no evidence -> L0
    holed = [s for s in samples if not 985 <= s[0] <= 990]
    assert sustained_level(holed, now_s=now, period_s=1.0) == "L0"
    assert sustained_level([(now - 60, float("nan"), float("nan"))], now_s=now) == "L0"
    assert sustained_level([(now - 60, 1.0, float("nan"))], now_s=now) == "L0"
    assert sustained_level([(now - 10, 1.0, 1.0)], now_s=now, period_s=1.0) == "L0"
    # one 1-minute CloudWatch sample that stayed at 0.999 covers the 30 s
    assert sustained_level([(now - 60, 0.999, 0.999)], now_s=now) == "L3"


def test_a_one_minute_spike_does_not_raise_the_level():
    """GIVEN 1-minute samples whose Maximum hit 100 % WHEN the mean shows it lasted seconds
    THEN the level stays L0; a minute that stayed saturated sets L3."""
    now = 6000.0
    # a 1-second spike to 100 % on a 50 % minute: mean ~0.508
    spike = [(now - 180, 0.5, 0.5), (now - 120, 0.5, 0.5), (now - 60, 1.0, 0.5 + 0.5 / 60)]
    assert sustained_level(spike, now_s=now) == "L0"
    # saturated the whole minute (mean 0.999 of available, peak 1.0): >= 48 s above 99.5 %
    saturated = [*spike[:2], (now - 60, 1.0, 0.999)]
    assert sustained_level(saturated, now_s=now) == "L3"
    # high, but only 15 s provably above 98 % (mean 0.985, peak 1.0): L1 (42 s), not L2
    assert seconds_at_or_above(1.0, 0.985, 0.95, 60.0) == pytest.approx(42.0)
    assert seconds_at_or_above(1.0, 0.985, 0.98, 60.0) == pytest.approx(15.0)
    assert sustained_level([(now - 60, 1.0, 0.985)], now_s=now) == "L1"


@pytest.mark.parametrize("peak, mean, threshold, seconds", [
    (0.9, 0.9, 0.95, 0.0),      # never reached
    (0.95, 0.95, 0.95, 60.0),   # peak == threshold and mean == peak: the whole minute
    (0.95, 0.94, 0.95, 0.0),    # peak == threshold, mean below: no proof
    (1.0, 1.0, 0.995, 60.0),
    (1.0, 0.9975, 0.995, 30.0),  # mean == (peak + T) / 2: exactly 30 s
    (1.0, 1.2, 0.995, 60.0),    # a mean above the peak (estimate) is clamped to the peak
    (1.0, 0.5, 0.995, 0.0),
])
def test_seconds_at_or_above_bound(peak, mean, threshold, seconds):
    assert seconds_at_or_above(peak, mean, threshold, 60.0) == pytest.approx(seconds)
