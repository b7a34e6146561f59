"""The hybrid histogram policy against an independent, minute-level model of it.

The model (``minute_model``) is written here from issue 11's description, apart from the
engine: per minute, one instance per function; a minute with invocations is one group, cold
when no instance is alive in that minute; cold-start % = cold starts / invocations of the
function. Its hybrid policy (``HistogramWindows.issue_model`` in the engine's terms): the
histogram is representative with >= 10 in-range idle times, at most half of all idle times out
of range (>= 240 min) and the idle times' coefficient of variation >= 2; then pre-warm =
floor(0.9 x p5), keep-alive = ceil(1.1 x p99) - pre-warm (numpy percentiles of the in-range
idle times); otherwise keep-alive 240 min, no pre-warm. An idle time is the number of minutes
from one minute with invocations to the next; after the minute ``a`` an instance is alive in
minute ``m`` when ``max(1, pre-warm) <= m - a <= pre-warm + keep-alive``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import TRACE_DIR
from warmers.simulator.calibration import Calibration
from warmers.simulator.controls import HistogramWindows
from warmers.simulator.engine import simulate_function
from warmers.simulator.policies import HybridHistogram, Observed, PolicyContext
from warmers.simulator.trace import MINUTE_MS, load_trace, make_workload

RANGE_MIN = 240


def _windows(s1: float, s2: float, in_range: list[int], n_all: int) -> tuple[int, int]:
    """(pre-warm, keep-alive) minutes of the issue's hybrid policy."""
    n = len(in_range)
    if n < 10 or n_all - n > n_all / 2:
        return 0, RANGE_MIN
    mean = s1 / n
    cv = math.sqrt(max(0.0, s2 / n - mean * mean)) / mean if mean > 0 else 0.0
    if cv < 2.0:
        return 0, RANGE_MIN
    p5, p99 = np.percentile(in_range, [5, 99])
    pw = math.floor(0.9 * p5)
    return pw, math.ceil(1.1 * p99) - pw


def minute_model(counts: list[int], policy: str) -> tuple[int, int, int, list[int]]:
    """(cold starts, idle minutes before the last invocation, idle minutes to the end, cold
    minutes) of ``policy`` (``"hybrid"`` or ``"fixed10"``) on one function's per-minute
    counts."""
    cold = idle_between = idle_all = 0
    cold_minutes: list[int] = []
    last = -1
    pw, ka = (0, RANGE_MIN) if policy == "hybrid" else (0, 10)
    in_range: list[int] = []
    n_all = 0
    s1 = s2 = 0.0
    last_active = max(m for m, c in enumerate(counts) if c)
    for m, c in enumerate(counts):
        alive = last >= 0 and max(1, pw) <= m - last <= pw + ka
        if c:
            if not alive:
                cold += 1
                cold_minutes.append(m)
            if last >= 0 and policy == "hybrid":
                it = m - last
                n_all += 1
                if it < RANGE_MIN:
                    in_range.append(it)
                    s1 += it
                    s2 += it * it
                pw, ka = _windows(s1, s2, in_range, n_all)
            last = m
        elif alive:
            idle_all += 1
            idle_between += m < last_active
    return cold, idle_between, idle_all, cold_minutes


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    return load_trace(TRACE_DIR)


@pytest.fixture(scope="module")
def model_runs(trace) -> dict[str, list[tuple[int, int, int, list[int]]]]:  # type: ignore[no-untyped-def]
    counts = trace.counts.tolist()
    return {p: [minute_model(c, p) for c in counts] for p in ("hybrid", "fixed10")}


def test_minute_model_reproduces_the_issue_figures(trace, model_runs) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the shipped 8-hour trace (298 functions, every one invoked at least once)
    invocations = trace.counts.sum(axis=1)
    assert np.all(invocations > 0)
    pct = {p: 100.0 * np.array([r[0] for r in runs]) / invocations
           for p, runs in model_runs.items()}
    # THEN per-function cold-start % p50 / p75 are the issue's 2.1 / 12.5 (hybrid) and
    # 8.1 / 100 (fixed 10-minute keep-alive), within 1 percentage point
    hyb50, hyb75 = np.percentile(pct["hybrid"], [50, 75])
    fix50, fix75 = np.percentile(pct["fixed10"], [50, 75])
    assert abs(hyb50 - 2.1) <= 1.0 and abs(hyb75 - 12.5) <= 1.0, (hyb50, hyb75)
    assert abs(fix50 - 8.1) <= 1.0 and abs(fix75 - 100.0) <= 1.0, (fix50, fix75)
    # AND the hybrid holds an instance idle longer than the fixed policy: 1.62x in the issue;
    # this model gives 1.59x counting the idle minutes between invocations (1.92x counting
    # also those after the last invocation until the trace ends)
    between = {p: sum(r[1] for r in runs) for p, runs in model_runs.items()}
    to_end = {p: sum(r[2] for r in runs) for p, runs in model_runs.items()}
    assert between["hybrid"] / between["fixed10"] == pytest.approx(1.62, abs=0.05)
    assert to_end["hybrid"] / to_end["fixed10"] == pytest.approx(1.92, abs=0.05)


def test_minute_model_by_hand() -> None:
    # a timer every 3 minutes, 40 times: every idle time 3 min, CV 0 -> never representative:
    # keep-alive 240 min, only the first minute cold
    counts = ([1, 0, 0] * 40)[:118]
    cold, between, _, minutes = minute_model(counts, "hybrid")
    assert (cold, between, minutes) == (1, 2 * 39, [0])
    # fixed 10 min: gaps of 11 minutes are cold, of 10 warm
    assert minute_model([1] + [0] * 10 + [1] + [0] * 9 + [1], "fixed10")[0] == 2


def test_engine_hybrid_agrees_with_the_minute_model(  # type: ignore[no-untyped-def]
        trace, model_runs, calibration: Calibration) -> None:
    # GIVEN the engine running the issue's variant of the policy on every function with at
    # most 20,000 requests (the busiest few only cost time)
    policy = HybridHistogram(windows=HistogramWindows.issue_model())
    ctx = PolicyContext(calibration=calibration)
    small = np.flatnonzero(trace.counts.sum(axis=1) <= 20_000)
    compared = 0
    for i in small.tolist():
        w = make_workload(trace, i, seed=2019, default_sla_ms=2000.0, sla_duration_factor=1.5)
        res = simulate_function(w, policy.controls(w, Observed.from_workload(w), ctx))
        cold = res.latencies_ms > w.durations_ms
        ends = w.arrivals_ms + res.latencies_ms
        minute = (w.arrivals_ms // MINUTE_MS).astype(int)
        first = np.flatnonzero(np.r_[True, np.diff(minute) > 0])
        model_cold = set(model_runs["hybrid"][i][3])
        for k in first.tolist():
            # a minute whose first request found no request in flight: one instance is enough,
            # so the engine's cold start there is the model's cold minute
            if k and np.max(ends[:k]) > w.arrivals_ms[k]:
                continue
            compared += 1
            assert bool(cold[k]) == (int(minute[k]) in model_cold), (w.function_id, minute[k])
        # THEN every cold minute of the model is a cold start of the engine, and the engine's
        # other cold starts are requests that found every environment busy
        assert res.cold_starts >= model_runs["hybrid"][i][0]
    assert compared > 10_000
