"""bench lmi's throttle breakdown (`bench.bench_lmi.throttle_causes`): what the function's own
history showed before each throttled request, on a trace built so that each cause occurs."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_lmi import throttle_causes
from warmers.lmi import LmiSettings
from warmers.simulator.calibration import load_calibration
from warmers.simulator.lmi import LmiReactive, WarmstartLmi
from warmers.simulator.run import run_simulation
from warmers.simulator.trace import Trace

MINUTES = 120


def _trace(counts: list[np.ndarray]) -> Trace:
    n = len(counts)
    # durations of ~20 s: a minute's calls are in flight together
    pct = np.tile(np.array([15_000.0, 16_000.0, 18_000.0, 20_000.0, 22_000.0, 24_000.0, 25_000.0]),
                  (n, 1))
    return Trace(function_ids=tuple(f"fn{i}" for i in range(n)), triggers=("http",) * n,
                 counts=np.stack(counts).astype(np.int64), duration_pct_ms=pct,
                 memory_mb=np.full(n, 128, dtype=np.int64))


def test_each_throttle_is_put_down_to_what_the_history_showed() -> None:
    # GIVEN a function silent for an hour, then a burst of 12 calls every 20 minutes (the
    # first one no history announces; the later ones the same size, but one of 40), and 2
    # requests per environment with a minimum of 1
    burst = np.zeros(MINUTES)
    burst[60::20] = 12
    burst[100] = 40
    trace = _trace([burst])
    settings = LmiSettings(concurrency_per_environment=2)
    policies = [LmiReactive(settings, minimum=1), WarmstartLmi(settings, floor=1)]
    result = run_simulation(trace, policies, load_calibration(None), seed=7, jobs=1)
    causes = throttle_causes(trace, 7, policies, result.rows)
    throttled = {r.policy: r.throttled for r in result.rows}
    # THEN every throttled request is counted once, under one cause
    for name, by_cause in causes.items():
        assert sum(by_cause.values()) == throttled[name]
    # the first burst has no history: both policies throttle it alike
    assert causes["lmi reactive"]["no_history"] == causes["warmstart lmi"]["no_history"] > 0
    # the later bursts are within what the function had shown: reactive scaling (scaled in
    # between) throttles them again, warmstart's held peak covers them
    assert causes["lmi reactive"]["within_history"] > 0
    assert causes["warmstart lmi"]["within_history"] == 0
    # and the one burst larger than any before is beyond history for both
    assert causes["lmi reactive"]["beyond_history"] > 0
    assert causes["warmstart lmi"]["beyond_history"] > 0


def test_a_breakdown_that_does_not_describe_the_run_is_refused() -> None:
    # GIVEN rows that claim a throttle count the function's own simulation does not give
    burst = np.zeros(MINUTES)
    burst[60] = 12
    trace = _trace([burst])
    settings = LmiSettings(concurrency_per_environment=2)
    policies = [LmiReactive(settings, minimum=1)]
    result = run_simulation(trace, policies, load_calibration(None), seed=7, jobs=1)
    [row] = result.rows
    assert row.throttled > 0
    from dataclasses import replace

    wrong = [replace(row, throttled=row.throttled + 1)]
    # THEN the breakdown stops with the two numbers rather than describe another run
    with pytest.raises(RuntimeError, match="throttled when simulated alone"):
        throttle_causes(trace, 7, policies, wrong)
