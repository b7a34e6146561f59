"""Fixtures for the simulator tests."""

from __future__ import annotations

import pytest

from warmers.simulator.calibration import Calibration, Timing


@pytest.fixture
def calibration() -> Calibration:
    return Calibration(
        init_ms=Timing(500.0, 700.0), restore_ms=Timing(50.0, 80.0), infer_ms=Timing(5.0, 9.0),
        toolkit_init_ms=Timing(20.0, 30.0), overflow_ms=Timing(40.0, 60.0),
        degraded_ms=Timing(1.0, 2.0), method="test values",
    )
