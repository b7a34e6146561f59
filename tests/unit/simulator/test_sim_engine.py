"""The engine's accounting against hand-computed cases."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import workload
from warmers.simulator.constants import SimulatorPrices
from warmers.simulator.controls import DEGRADED, LOCAL, OVERFLOW, SHED, Controls, HistogramWindows
from warmers.simulator.engine import histogram_windows_ms, simulate_function
from warmers.simulator.trace import MINUTE_MS


def test_keep_alive_long_one_cold_start_and_exact_idle_time() -> None:
    # GIVEN three requests of 100 ms at 0, 1 s, 2 s, init 500 ms, keep-alive 1 min, 1 minute
    w = workload([0.0, 1000.0, 2000.0], 100.0, n_minutes=1)
    res = simulate_function(w, Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=500.0))
    # THEN the first is cold (busy until 600), the others reuse it after 400 and 900 ms idle;
    # after 2,100 the environment idles until the horizon (57,900 ms)
    assert res.cold_starts == 1 and res.env_inits == 1
    assert res.idle_env_ms == pytest.approx(400.0 + 900.0 + 57_900.0)
    assert res.idle_gb_s == pytest.approx(59.2)
    assert res.latencies_ms.tolist() == [600.0, 100.0, 100.0]
    assert res.ondemand_busy_ms == pytest.approx(300.0)
    assert res.init_billed_ms == pytest.approx(500.0)


def test_keep_alive_short_reclaims_and_counts_idle_up_to_keep_alive() -> None:
    w = workload([0.0, 1000.0, 2000.0], 100.0, n_minutes=1)
    res = simulate_function(w, Controls(keep_alive_ms=500.0, cold_start_ms=500.0))
    # 0: cold, busy to 600; 1000: idle 400 < 500, warm, busy to 1100; 2000: idle 900 >= 500,
    # reclaimed after 500 ms, cold again, busy to 2600; then idle 500 ms and reclaimed.
    assert res.cold_starts == 2
    assert res.idle_env_ms == pytest.approx(400.0 + 500.0 + 500.0)
    assert res.latencies_ms.tolist() == [600.0, 100.0, 600.0]
    cost = res.cost_usd(SimulatorPrices())
    # 1 GB: (300 ms run + 2 x 500 ms init) = 1.3 GB-s on demand, 3 requests
    assert cost["ondemand"] == pytest.approx(1.3 * SimulatorPrices().ondemand_gb_s_usd)
    assert cost["requests"] == pytest.approx(3 * 0.2e-6)
    assert cost["pc_configured"] == 0.0


def test_concurrent_requests_each_cold_and_the_most_recently_used_env_is_reused() -> None:
    # two overlapping requests need two environments; the third takes the one freed last
    w = workload([0.0, 50.0, 1000.0], 100.0, n_minutes=1)
    res = simulate_function(w, Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=500.0))
    assert res.cold_starts == 2
    # env A free at 600, env B at 650; t=1000 takes B (idle 350). A idles 600 -> 60,000 (cap
    # at the horizon: 59,400), B idles 1,100 -> 60,000 (58,900).
    assert res.idle_env_ms == pytest.approx(350.0 + 59_400.0 + 58_900.0)


def test_cold_start_time_delays_only_the_request_that_created_the_env() -> None:
    # a request arriving while the first one's init runs finds no idle environment
    w = workload([0.0, 200.0], 10.0, n_minutes=1)
    res = simulate_function(w, Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=500.0))
    assert res.cold_starts == 2
    assert res.latencies_ms.tolist() == [510.0, 510.0]


def test_sla_breach_counts_late_answers_and_splits_cold_caused() -> None:
    w = workload([0.0, 10_000.0, 20_000.0], [1900.0, 1900.0, 2500.0], n_minutes=1,
                 sla_ms=2000.0)
    res = simulate_function(w, Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=500.0))
    # first: 2,400 cold (breach caused by the cold start); second warm 1,900 ok; third warm
    # 2,500 (breach of a request that was slow anyway)
    assert res.breach.tolist() == [True, False, True]
    assert res.cold_breaches == 1


def test_provisioned_environments_serve_first_and_spill_over() -> None:
    # PC 1 for the whole minute; two overlapping requests: one on PC, one spills over (cold)
    w = workload([0.0, 10.0, 5000.0], 100.0, n_minutes=1)
    pc = np.array([1])
    res = simulate_function(
        w, Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=500.0, pc_effective=pc,
                    pc_configured=pc),
    )
    assert res.cold_starts == 1
    assert res.latencies_ms.tolist() == [100.0, 600.0, 100.0]
    assert res.pc_busy_ms == pytest.approx(200.0)
    assert res.pc_configured_env_ms == pytest.approx(MINUTE_MS)
    cost = res.cost_usd(SimulatorPrices())
    assert cost["pc_configured"] == pytest.approx(60.0 * SimulatorPrices().pc_configured_gb_s_usd)
    assert cost["pc_duration"] == pytest.approx(0.2 * SimulatorPrices().pc_duration_gb_s_usd)
    # idle: PC env 60,000 - 200 busy; the spillover env from 610 to the horizon
    assert res.idle_env_ms == pytest.approx((MINUTE_MS - 200.0) + (MINUTE_MS - 610.0))


def test_pings_keep_one_environment_warm_and_are_not_traffic() -> None:
    # requests every 20 min, keep-alive 10 min: all cold without pings
    arrivals = [60_000.0 + k * 20 * MINUTE_MS for k in range(4)]
    w = workload(arrivals, 100.0, n_minutes=80)
    bare = simulate_function(w, Controls(keep_alive_ms=10 * MINUTE_MS, cold_start_ms=500.0))
    assert bare.cold_starts == 4
    pings = np.arange(0.0, 80 * MINUTE_MS, 5 * MINUTE_MS)
    res = simulate_function(
        w, Controls(keep_alive_ms=10 * MINUTE_MS, cold_start_ms=500.0, ping_times_ms=pings),
    )
    assert res.cold_starts == 0  # the ping at 0 created the environment
    assert res.env_inits == 1
    assert res.pings == 16
    assert res.n_requests == 4
    assert res.cost_usd(SimulatorPrices())["requests"] == pytest.approx(20 * 0.2e-6)


def test_snapstart_bills_restores_and_cache() -> None:
    w = workload([0.0], 100.0, n_minutes=1)
    res = simulate_function(w, Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=50.0,
                                        restore=True))
    assert res.restores == 1 and res.latencies_ms.tolist() == [150.0]
    p = SimulatorPrices()
    cost = res.cost_usd(p)
    assert cost["snapstart"] == pytest.approx(60.0 * p.snapstart_cache_gb_s_usd
                                              + p.snapstart_restore_gb_usd)


class _Fixed:
    def __init__(self, path: int) -> None:
        self.path = path
        self.calls: list[tuple[float, bool]] = []

    def decide(self, arrival_ms: float, now_ms: float, sla_ms: float, duration_ms: float,
               model_ready_in_ms: float, cold_start: bool) -> int:
        self.calls.append((now_ms - arrival_ms, model_ready_in_ms, cold_start))
        return self.path if cold_start or model_ready_in_ms > 0 else LOCAL


@pytest.mark.parametrize(
    ("path", "latency"),
    [(OVERFLOW, 20.0 + 40.0 + 100.0), (DEGRADED, 20.0 + 1.0), (SHED, 20.0), (LOCAL, 600.0)],
)
def test_admission_paths_set_latency_and_breach(path: int, latency: float) -> None:
    w = workload([0.0], 100.0, n_minutes=1, sla_ms=150.0)
    adm = _Fixed(path)
    # finish_preload off: the invocation returns with the path's answer (the wait for the
    # model is tested in test_sim_preload.py)
    res = simulate_function(w, Controls(
        keep_alive_ms=MINUTE_MS, cold_start_ms=500.0, admission=adm, toolkit_init_ms=20.0,
        overflow_extra_ms=40.0, degraded_ms=1.0, finish_preload=False))
    # decided after the 20 ms init phase, 480 ms before the model is ready
    assert adm.calls == [(20.0, 480.0, True)]
    assert res.latencies_ms[0] == pytest.approx(latency)
    assert res.paths[0] == path
    assert res.cold_starts == 1
    # degraded and shed answers are never SLA breaches; the others are late here
    assert bool(res.breach[0]) == (path in (OVERFLOW, LOCAL) and latency > 150.0)


def test_admission_is_asked_again_while_the_model_loads() -> None:
    # finish_preload off: the cold request overflows and returns at 160 ms with 160 ms of the
    # 500 ms load done; frozen while idle, 340 ms are left at 300 ms: overflow again (returns
    # at 440, 200 left); at 1,000: 200 left, overflow (60 left); at 2,000: 60 left, overflow
    # (loaded during it); at 3,000 it is local
    w = workload([0.0, 300.0, 1000.0, 2000.0, 3000.0], 100.0, n_minutes=1, sla_ms=2000.0)
    adm = _Fixed(OVERFLOW)
    res = simulate_function(w, Controls(
        keep_alive_ms=MINUTE_MS, cold_start_ms=500.0, admission=adm, toolkit_init_ms=20.0,
        overflow_extra_ms=40.0, finish_preload=False))
    assert res.cold_starts == 1
    assert adm.calls == [
        (20.0, 480.0, True), (0.0, 340.0, False), (0.0, 200.0, False), (0.0, 60.0, False)]
    assert res.paths.tolist() == [OVERFLOW, OVERFLOW, OVERFLOW, OVERFLOW, LOCAL]
    assert res.latencies_ms.tolist() == pytest.approx([160.0, 140.0, 140.0, 140.0, 100.0])


def test_histogram_windows_fall_back_when_not_representative() -> None:
    params = HistogramWindows()
    flat = [1] * params.range_min  # CV 0
    assert histogram_windows_ms(flat, 0, params) == (0.0, params.range_min * MINUTE_MS)
    few = [0] * params.range_min
    few[3] = params.min_samples - 1
    assert histogram_windows_ms(few, 0, params) == (0.0, params.range_min * MINUTE_MS)


def test_histogram_windows_from_percentiles_with_margin() -> None:
    params = HistogramWindows()
    hist = [0] * params.range_min
    hist[9] = 50  # every idle time 9 minutes
    pw, ka = histogram_windows_ms(hist, 0, params)
    assert pw == pytest.approx(9 * 0.9 * MINUTE_MS)
    assert ka == pytest.approx((9 * 1.1 - 9 * 0.9) * MINUTE_MS)
    # the issue's reading: whole minutes, numpy percentiles (p5 of 19 x 9 and one 30 is 9,
    # p99 is 9 + 0.81 x 21 = 26.01)
    hist[9], hist[30] = 19, 1
    issue = HistogramWindows.issue_model()
    assert issue.cv_of == "idle_times"  # CV of these idle times is 0.46 < 2: not representative
    assert histogram_windows_ms(hist, 0, issue) == (0.0, 240 * MINUTE_MS)
    spread = replace(issue, cv_threshold=0.0)
    pw, ka = histogram_windows_ms(hist, 0, spread)
    assert pw == 8 * MINUTE_MS and ka == (math.ceil(1.1 * 26.01) - 8) * MINUTE_MS
    values = [9] * 19 + [30]
    assert np.percentile(values, 99) == pytest.approx(26.01)


def test_histogram_out_of_bounds_branch_forecasts_the_next_idle_time() -> None:
    params = HistogramWindows()
    hist = [0] * params.range_min
    hist[3] = 1
    # 2 of 3 idle times >= 240 min: pre-warm at 0.85 x the last (300 min) for 0.3 x it
    pw, ka = histogram_windows_ms(hist, 2, params, last_idle_min=300.0)
    assert (pw, ka) == (pytest.approx(255 * MINUTE_MS), pytest.approx(90 * MINUTE_MS))
    # the issue's reading has no forecast: the standard keep-alive
    assert histogram_windows_ms(hist, 2, HistogramWindows.issue_model(),
                                last_idle_min=300.0) == (0.0, 240 * MINUTE_MS)
    with pytest.raises(ValueError, match="cv_of"):
        HistogramWindows(cv_of="bins")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"keep_alive_ms": -1.0, "cold_start_ms": 0.0}, {"keep_alive_ms": 0.0, "cold_start_ms": -5.0},
     {"keep_alive_ms": 0.0, "cold_start_ms": 0.0, "ping_concurrency": 0},
     {"keep_alive_ms": 0.0, "cold_start_ms": 0.0, "pc_effective": np.array([1])}],
)
def test_bad_controls_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Controls(**kwargs)  # type: ignore[arg-type]


def test_unsorted_arrivals_and_wrong_pc_length_are_rejected() -> None:
    w = workload([5.0, 1.0], 1.0, n_minutes=1)
    with pytest.raises(ValueError, match="sorted"):
        simulate_function(w, Controls(keep_alive_ms=1.0, cold_start_ms=1.0))
    w = workload([1.0], 1.0, n_minutes=2)
    pc = np.array([1])
    with pytest.raises(ValueError, match="shape"):
        simulate_function(w, Controls(keep_alive_ms=1.0, cold_start_ms=1.0, pc_effective=pc,
                                      pc_configured=pc))


def test_no_requests_no_cost_but_pc_is_billed() -> None:
    w = workload([], 1.0, n_minutes=2)
    res = simulate_function(w, Controls(keep_alive_ms=1.0, cold_start_ms=1.0))
    assert res.n_requests == 0 and res.cold_starts == 0 and res.idle_env_ms == 0.0
    pc = np.array([2, 2])
    res = simulate_function(w, Controls(keep_alive_ms=1.0, cold_start_ms=1.0, pc_effective=pc,
                                        pc_configured=pc))
    assert res.pc_configured_env_ms == pytest.approx(4 * MINUTE_MS)
    assert math.isclose(res.idle_env_ms, 4 * MINUTE_MS)


def test_simultaneous_pings_land_on_distinct_environments() -> None:
    # two pings at the same instant each hold an environment: two environments are created
    w = workload([], 1.0, n_minutes=1)
    res = simulate_function(w, Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=500.0,
                                        ping_times_ms=np.array([0.0, 0.0])))
    assert res.env_inits == 2 and res.pings == 2 and res.cold_starts == 0


def _reference(arrivals, durations, keep_alive, init, pc, horizon):  # type: ignore[no-untyped-def]
    """Naive O(n x envs) simulation with explicit environments (the engine's specification)."""
    envs: list[float] = []  # busy until (alive on-demand environments)
    pc_ends: list[float] = []
    cold = 0
    idle = 0.0
    for t, d in zip(arrivals, durations, strict=True):
        alive = []
        for end in envs:
            if end <= t and t - end >= keep_alive:
                idle += keep_alive  # reclaimed keep_alive after its last request
            else:
                alive.append(end)
        envs = alive
        if pc is not None:
            pc_ends = [e for e in pc_ends if e > t]
            if len(pc_ends) < pc[int(t // MINUTE_MS)]:
                pc_ends.append(t + d)
                continue
        free = [e for e in envs if e <= t]
        if free:
            mru = max(free)
            envs.remove(mru)
            idle += t - mru
            envs.append(t + d)
        else:
            cold += 1
            envs.append(t + init + d)
    for end in envs:
        idle += max(0.0, min(keep_alive, horizon - end))
    return cold, idle


@pytest.mark.parametrize("seed", range(6))
def test_engine_matches_a_naive_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_min = 30
    n = int(rng.integers(50, 400))
    a = np.sort(rng.uniform(0, n_min * MINUTE_MS, n))
    d = rng.exponential(rng.uniform(100, 20_000), n)
    ka = float(rng.choice([1_000.0, 30_000.0, 300_000.0]))
    pc = rng.integers(0, 3, n_min) if seed % 2 else None
    w = workload(a, d, n_minutes=n_min)
    controls = Controls(keep_alive_ms=ka, cold_start_ms=700.0, pc_effective=pc,
                        pc_configured=pc)
    res = simulate_function(w, controls)
    cold, idle = _reference(a.tolist(), d.tolist(), ka, 700.0, pc, n_min * MINUTE_MS)
    assert res.cold_starts == cold
    on_demand_idle = res.idle_env_ms
    if pc is not None:
        on_demand_idle -= float(pc.sum()) * MINUTE_MS - res.pc_busy_ms
    assert on_demand_idle == pytest.approx(idle)


class _AlwaysLocal:
    def decide(self, arrival_ms: float, now_ms: float, sla_ms: float, duration_ms: float,
               model_ready_in_ms: float, cold_start: bool) -> int:
        return LOCAL


@pytest.mark.parametrize("seed", range(3))
def test_admission_loop_equals_plain_loop_when_everything_runs_locally(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n_min = 20
    a = np.sort(rng.uniform(0, n_min * MINUTE_MS, 300))
    d = rng.exponential(5_000.0, 300)
    w = workload(a, d, n_minutes=n_min)
    pc = rng.integers(0, 2, n_min)
    pings = np.sort(rng.uniform(0, n_min * MINUTE_MS, 10))
    kw = {"keep_alive_ms": 60_000.0, "cold_start_ms": 900.0, "pc_effective": pc,
          "pc_configured": pc, "ping_times_ms": pings}
    plain = simulate_function(w, Controls(**kw))  # type: ignore[arg-type]
    pool = simulate_function(w, Controls(**kw, admission=_AlwaysLocal()))  # type: ignore[arg-type]
    assert pool.cold_starts == plain.cold_starts and pool.env_inits == plain.env_inits
    assert pool.idle_env_ms == pytest.approx(plain.idle_env_ms)
    assert pool.ondemand_busy_ms == pytest.approx(plain.ondemand_busy_ms)
    assert np.allclose(pool.latencies_ms, plain.latencies_ms)



def test_pings_after_the_last_arrival_take_provisioned_environments_in_both_loops() -> None:
    # GIVEN one request in minute 0, provisioned concurrency 1 all along, and pings in minutes
    # 5..9, after the last arrival
    n_min = 10
    w = workload([1000.0], 200.0, n_minutes=n_min)
    pc = np.ones(n_min, dtype=np.int64)
    kw = {"keep_alive_ms": 600_000.0, "cold_start_ms": 900.0, "pc_effective": pc,
          "pc_configured": pc, "ping_times_ms": MINUTE_MS * np.arange(5, 10, dtype=float)}
    plain = simulate_function(w, Controls(**kw))  # type: ignore[arg-type]
    pool = simulate_function(w, Controls(**kw, admission=_AlwaysLocal()))  # type: ignore[arg-type]
    # THEN each ping is answered by the provisioned environment (no on-demand init), in the
    # admission loop as in the plain one (its tail pings once skipped provisioned concurrency)
    assert plain.env_inits == 0 and plain.pings == 5
    assert (pool.env_inits, pool.pings) == (plain.env_inits, plain.pings)
    assert pool.pc_busy_ms == pytest.approx(plain.pc_busy_ms)
    assert pool.ondemand_busy_ms == pytest.approx(plain.ondemand_busy_ms)

def test_hybrid_histogram_unloads_and_prewarms_with_exact_idle_time() -> None:
    # GIVEN a 100 ms request every 10 minutes (at 1 s past the minute), init 500 ms, 8 hours
    w = workload([1000.0 + 10 * MINUTE_MS * k for k in range(48)], 100.0, n_minutes=480)
    res = simulate_function(w, Controls(keep_alive_ms=0.0, cold_start_ms=500.0,
                                        histogram=HistogramWindows()))
    # THEN the first 10 idle times are learnt under the 240-minute keep-alive (10 gaps idle
    # ~600 s each); from the 10th on the windows are pre-warm 0.9 x 10 = 9 min, keep-alive up
    # to 11 min: unloaded at the end of the request's minute (58.9 s idle), reloaded at minute
    # +9 and used 61 s later; after the last request: 58.9 s, then reloaded at minute 479 and
    # idle until the horizon (60 s)
    assert res.cold_starts == 1
    assert res.env_inits == 1 + 37 + 1
    want_s = (600.0 - 0.6) + 9 * (600.0 - 0.1) + 37 * (58.9 + 61.0) + 58.9 + 60.0
    assert res.idle_env_ms == pytest.approx(want_s * 1000.0)


def test_cold_start_times_follow_the_calibrated_p50_and_p95() -> None:
    from warmers.simulator.calibration import Timing
    from warmers.simulator.trace import standard_normals

    # GIVEN 20,000 requests 10 s apart, each a cold start (keep-alive 0)
    n = 20_000
    base = workload(np.arange(n) * 10_000.0, 100.0, n_minutes=n // 6 + 1)
    z = standard_normals(np.random.default_rng(7).random(2 * n))
    w = replace(base, init_z=z)
    init = Timing(1000.0, 3000.0)
    c = Controls(keep_alive_ms=0.0, cold_start_ms=init.p50, cold_start_sigma=init.log_sigma)
    r = simulate_function(w, c)
    cold = r.latencies_ms - w.durations_ms
    # THEN their median and p95 are the calibrated ones (within sampling error)
    assert r.cold_starts == n
    assert np.quantile(cold, 0.5) == pytest.approx(1000.0, rel=0.03)
    assert np.quantile(cold, 0.95) == pytest.approx(3000.0, rel=0.05)
    # and inits are billed at the lognormal's mean, above the median
    assert r.init_billed_ms == pytest.approx(n * 1000.0 * math.exp(init.log_sigma ** 2 / 2))
    assert r.init_billed_ms == pytest.approx(cold.sum(), rel=0.03)
    # without a spread (or without the per-request draws) every cold start is the median
    flat = simulate_function(w, replace(c, cold_start_sigma=0.0))
    assert np.allclose(flat.latencies_ms - w.durations_ms, 1000.0)
    assert np.array_equal(simulate_function(base, c).latencies_ms, flat.latencies_ms)
    with pytest.raises(ValueError, match="cold_start_sigma must be >= 0"):
        Controls(keep_alive_ms=0.0, cold_start_ms=1.0, cold_start_sigma=-1.0)
