from __future__ import annotations

import pytest

from warmers.degradation import level_for_utilization, sustained_level, utilization


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
    # 1-second samples: 40 s at 0.99 -> L2 held for 30 s
    samples = [(now - 40 + i, 0.99) for i in range(41)]
    assert sustained_level(samples, now_s=now, period_s=1.0) == "L2"
    # a 20 s burst at 1.0 after 0.96: only L1 was sustained 30 s
    samples = [(now - 40 + i, 0.96 if i < 21 else 1.0) for i in range(41)]
    assert sustained_level(samples, now_s=now, period_s=1.0) == "L1"
    # a hole or NaN in the window -> no evidence -> L0
    holed = [s for s in samples if not 985 <= s[0] <= 990]
    assert sustained_level(holed, now_s=now, period_s=1.0) == "L0"
    assert sustained_level([(now - 60, float("nan"))], now_s=now) == "L0"
    assert sustained_level([(now - 10, 1.0)], now_s=now, period_s=1.0) == "L0"
    # one 1-minute CloudWatch sample covers 30 s
    assert sustained_level([(now - 60, 0.999)], now_s=now) == "L3"
