"""Each policy on crafted load patterns."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import periodic, workload
from warmers.simulator.calibration import Calibration
from warmers.simulator.engine import simulate_function
from warmers.simulator.policies import (
    FixedProvisioned,
    HybridHistogram,
    KeepAlive,
    Observed,
    PolicyContext,
    SnapStart,
    TargetTracking,
    WarmPings,
    apply_allocation_delay,
    pc_allocation_delay_min,
    target_tracking_schedule,
)
from warmers.simulator.trace import MINUTE_MS


def _run(policy, w, calibration: Calibration):  # type: ignore[no-untyped-def]
    ctx = PolicyContext(calibration=calibration)
    controls = policy.controls(w, Observed.from_workload(w), ctx)
    return controls, simulate_function(w, controls)


def steady(n_minutes: int = 120, per_s: float = 10.0, duration_ms: float = 400.0):  # type: ignore[no-untyped-def]
    # about per_s x duration = 4 requests in flight, every minute
    return periodic(1000.0 / per_s, n_minutes, duration_ms, offset_ms=37.0)


def test_allocation_delay_holds_increases_and_applies_decreases_at_once() -> None:
    assert pc_allocation_delay_min(5) == 3  # 2 min preparation + 5/6,000 min, rounded up
    conf = np.array([0, 0, 5, 5, 5, 5, 5, 2, 2, 7, 7, 7, 7])
    assert apply_allocation_delay(conf).tolist() == [0, 0, 0, 0, 0, 5, 5, 2, 2, 2, 2, 2, 7]
    with pytest.raises(ValueError):
        pc_allocation_delay_min(-1)


def test_target_tracking_scales_out_after_three_points_and_in_after_fifteen() -> None:
    # 6 in flight: settles at PC 9 (6/9 = 0.67, between the scale-in 0.63 and the target 0.7)
    conc = np.concatenate([np.full(40, 6.0), np.zeros(40)])
    configured, usable = target_tracking_schedule(conc)
    # minute 0-2 above target at PC 1 -> scale out requested in minute 3
    assert configured[2] == 1 and configured[3] == 2
    assert usable[3] == 1 and usable[3 + pc_allocation_delay_min(2)] == 2
    assert configured[39] == 9
    # scale in only after 15 quiet minutes (40..54), never below the minimum capacity 1
    assert configured[54] == 9 and configured[55] == 1
    assert configured[-1] == 1
    assert np.all(usable <= configured)


def test_keep_alive_policies_order_cold_starts(calibration: Calibration) -> None:
    # arrivals every 7 minutes: keep-alive 5 -> all cold; 10 -> only the first
    w = periodic(7 * MINUTE_MS, 120, 100.0)
    _, r5 = _run(KeepAlive(5), w, calibration)
    _, r10 = _run(KeepAlive(10), w, calibration)
    assert r5.cold_starts == w.arrivals_ms.shape[0]
    assert r10.cold_starts == 1
    assert KeepAlive(10).name == "on-demand, keep-alive 10 min"


def test_sparse_function_warm_pings_remove_cold_starts(calibration: Calibration) -> None:
    w = periodic(40 * MINUTE_MS, 480, 100.0, offset_ms=2.5 * MINUTE_MS)
    _, bare = _run(KeepAlive(10), w, calibration)
    _, pinged = _run(WarmPings(), w, calibration)
    assert bare.cold_starts == w.arrivals_ms.shape[0]
    assert pinged.cold_starts == 0
    assert pinged.pings == 480 // 5


def test_steady_load_provisioned_concurrency_policies(calibration: Calibration) -> None:
    w = steady()
    _, od = _run(KeepAlive(10), w, calibration)
    fixed_controls, fixed = _run(FixedProvisioned(), w, calibration)
    tt_controls, tt = _run(TargetTracking(), w, calibration)
    # fixed PC = p90 of the first hour's peak concurrency, from minute 0: no cold start at all
    peak = Observed.from_workload(w).concurrency_max[:60]
    assert fixed_controls.pc_configured is not None
    assert int(fixed_controls.pc_configured[0]) == int(np.ceil(np.quantile(peak, 0.9)))
    assert fixed.cold_starts == 0
    assert fixed.pc_busy_ms > 0.9 * w.durations_ms.sum()
    # target tracking starts at PC 1 and reacts: spillover cold starts early, PC grows
    assert tt_controls.pc_configured is not None and tt_controls.pc_configured[-1] > 1
    assert 0 < tt.cold_starts <= od.cold_starts + 5


def test_periodic_timer_histogram_prewarms(calibration: Calibration) -> None:
    # GIVEN a timer every 10 minutes for 8 hours
    w = periodic(10 * MINUTE_MS, 480, 100.0)
    _, hist = _run(HybridHistogram(), w, calibration)
    _, ka15 = _run(KeepAlive(15), w, calibration)
    _, ka5 = _run(KeepAlive(5), w, calibration)
    # THEN once the histogram is representative the environment is unloaded after each run and
    # pre-warmed ~8 minutes later: warm like keep-alive 15, idle far less
    assert hist.cold_starts == 1 == ka15.cold_starts
    assert ka5.cold_starts == w.arrivals_ms.shape[0]
    assert hist.env_inits > 30  # reloaded before (almost) every invocation
    # ~10 learning periods idle the full 10 min, the other ~37 only ~1.9 min (10 - 8.1)
    assert hist.idle_env_ms < 0.4 * ka15.idle_env_ms


def test_snapstart_turns_cold_starts_into_restores(calibration: Calibration) -> None:
    w = periodic(20 * MINUTE_MS, 120, 100.0)
    _, snap = _run(SnapStart(), w, calibration)
    assert snap.restores == snap.cold_starts == w.arrivals_ms.shape[0]
    assert np.all(snap.latencies_ms == 100.0 + calibration.restore_ms.p50)


def test_observed_metrics_of_a_hand_built_workload() -> None:
    w = workload([0.0, 10.0, 61_000.0], [100.0, 100.0, 30_000.0], n_minutes=3)
    obs = Observed.from_workload(w)
    assert obs.invocations.tolist() == [2.0, 1.0, 0.0]
    assert obs.concurrency_max.tolist() == [2.0, 1.0, 0.0]
    assert obs.concurrency_mean.tolist() == pytest.approx([200 / MINUTE_MS, 0.5, 0.0])


def test_peak_concurrency_matches_a_brute_force_count() -> None:
    rng = np.random.default_rng(11)
    a = np.sort(rng.uniform(0, 5 * MINUTE_MS, 400))
    d = rng.exponential(3000.0, 400)
    w = workload(a, d, n_minutes=5)
    got = Observed.from_workload(w).concurrency_max
    # brute force: the level right after each event (ends first at ties), max per minute,
    # plus the level carried into each minute
    events = sorted([(t, 1) for t in a] + [(t, -1) for t in a + d], key=lambda e: (e[0], e[1]))
    want = np.zeros(5)
    level = 0
    carried = [0] * 5
    for t, step in events:
        level += step
        m = min(int(t // MINUTE_MS), 4)
        want[m] = max(want[m], level)
        for later in range(m + 1, 5):
            carried[later] = level
    assert got.tolist() == np.maximum(want, carried).tolist()
