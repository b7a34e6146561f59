"""The warmstart policy with the real forecaster, planner and admission code."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import periodic, workload
from warmers.simulator.calibration import Calibration, Timing
from warmers.simulator.controls import DEGRADED, OVERFLOW
from warmers.simulator.engine import simulate_function
from warmers.simulator.policies import KeepAlive, Observed, PolicyContext
from warmers.simulator.trace import MINUTE_MS
from warmers.simulator.warmstart_policy import WarmstartPolicy, warmstart_variants


def _run(policy, w, calibration):  # type: ignore[no-untyped-def]
    ctx = PolicyContext(calibration=calibration)
    controls = policy.controls(w, Observed.from_workload(w), ctx)
    return controls, simulate_function(w, controls)


def test_steady_load_gets_provisioned_concurrency(calibration: Calibration) -> None:
    # GIVEN ~4 requests in flight every minute for 2 hours
    w = periodic(100.0, 120, 400.0, offset_ms=37.0)
    policy = WarmstartPolicy(keep_plans=True)
    controls, res = _run(policy, w, calibration)
    plans = policy.plans[w.function_id]
    # THEN after the first plan (no history yet) the planner provisions concurrency
    assert plans[0].action != "provisioned"
    assert all(p.action == "provisioned" for p in plans[1:])
    assert controls.pc_configured is not None
    assert controls.pc_configured[-1] >= 4
    assert controls.pc_effective is not None
    # usable only after the allocation delay
    first = int(np.argmax(controls.pc_configured > 0))
    assert controls.pc_effective[first] == 0 and controls.pc_effective[first + 3] > 0
    assert res.pc_busy_ms > 0.5 * w.durations_ms.sum()
    _, od = _run(KeepAlive(10), w, calibration)
    assert res.cold_starts <= od.cold_starts


def test_low_utilization_function_gets_pings_not_provisioned_concurrency(
    calibration: Calibration,
) -> None:
    # GIVEN bursts of 3 simultaneous 50 ms requests every 12 minutes (longer than the 10-minute
    # idle reclaim) for 2 hours: the window peak is 3 environments, ~0.0002 in flight on average
    a = np.sort(np.concatenate([np.arange(1000.0, 120 * MINUTE_MS, 12 * MINUTE_MS) + k
                                for k in (0.0, 1.0, 2.0)]))
    w = workload(a.tolist(), 50.0, n_minutes=120)
    policy = WarmstartPolicy(keep_plans=True)
    controls, res = _run(policy, w, calibration)
    plans = policy.plans[w.function_id]
    # THEN the planner never buys provisioned concurrency (3 environments would be ~0 % used)
    # and says why; it keeps 3 environments warm with pings instead
    assert controls.pc_configured is None
    later = plans[1:]
    assert all(p.action == "ping" and p.ping_concurrency == 3 for p in later)
    assert all("< break-even 60%" in p.reason and "0 pay" in p.reason for p in later)
    # AND it costs no more than on demand, with fewer cold starts (each burst after the first
    # plan finds its environments warm)
    _, od = _run(KeepAlive(10), w, calibration)
    from warmers.simulator.constants import SimulatorPrices

    prices = SimulatorPrices()
    ws_usd = sum(res.cost_usd(prices).values())
    od_usd = sum(od.cost_usd(prices).values())
    assert ws_usd <= od_usd
    assert od.cold_starts == 30 and res.cold_starts <= 6


def test_sparse_function_gets_pings_or_nothing(calibration: Calibration) -> None:
    # a request every 70 minutes: active in ~1.5 % of minutes
    w = periodic(70 * MINUTE_MS, 480, 100.0, offset_ms=5 * MINUTE_MS)
    policy = WarmstartPolicy(keep_plans=True)
    controls, res = _run(policy, w, calibration)
    plans = policy.plans[w.function_id]
    # once an hour of history shows how sparse it is, the planner only pings (or does nothing)
    later = [p for p in plans if p.issued_at_s >= 3600.0]
    assert later and {p.action for p in later} <= {"ping", "none"}
    assert any(p.action == "ping" for p in later)
    # with minutes of history it may provision one environment for one planning interval
    pc_minutes = 0 if controls.pc_configured is None else int((controls.pc_configured > 0).sum())
    assert pc_minutes <= 15
    assert res.pings > 0


def test_cold_starts_overflow_when_init_cannot_meet_the_sla(calibration: Calibration) -> None:
    # init p95 2.5 s > SLA 2 s: the real admission sends every cold start to the endpoint
    slow = Calibration(init_ms=Timing(2400.0, 2500.0), restore_ms=calibration.restore_ms,
                       infer_ms=calibration.infer_ms, toolkit_init_ms=Timing(20.0, 30.0),
                       overflow_ms=Timing(40.0, 60.0), degraded_ms=Timing(1.0, 2.0))
    w = periodic(20 * MINUTE_MS, 60, 100.0, sla_ms=2000.0)
    with_overflow, _always_on, no_overflow = warmstart_variants(strategy="provisioned")
    controls, res = _run(with_overflow, w, slow)
    _, od = _run(KeepAlive(10), w, slow)
    assert od.cold_starts == 3 and int(od.breach.sum()) == 3
    assert res.cold_starts >= 1
    cold = res.paths != 0
    assert np.all(res.paths[cold] == OVERFLOW)
    assert int(res.breach.sum()) == 0
    assert controls.admission is not None
    assert controls.admission.decisions.get("overflow_fits", 0) == res.cold_starts  # type: ignore[attr-defined]
    # without an endpoint the same cold starts get the degraded (lexical) answer
    _, res2 = _run(no_overflow, w, slow)
    assert np.all(res2.paths[res2.paths != 0] == DEGRADED)
    assert int(res2.breach.sum()) == 0


def test_cold_start_runs_locally_when_it_fits(calibration: Calibration) -> None:
    # init p95 700 ms + 100 ms fits the 2 s SLA: local, no overflow
    w = workload([1000.0], 100.0, n_minutes=5)
    _, res = _run(WarmstartPolicy(), w, calibration)
    assert res.cold_starts == 1 and res.paths.tolist() == [0]
    assert res.latencies_ms[0] == calibration.init_ms.p50 + 100.0


def test_degradation_level_per_minute_uses_the_previous_minute() -> None:
    from warmers.simulator.warmstart_policy import _levels

    conc = np.array([0.0, 960.0, 990.0, 999.0, 10.0])
    # utilization of the previous minute against 1,000: -, 0.0, 0.96, 0.99, 0.999
    assert _levels(conc).tolist() == [0, 0, 1, 2, 3]


def test_auto_strategy_deploys_snapstart_where_on_demand_cold_starts_are_late(
        calibration: Calibration) -> None:
    # GIVEN an init (p95 2.5 s) that cannot meet the 2 s SLA on demand
    slow = Calibration(init_ms=Timing(2400.0, 2500.0), restore_ms=Timing(30.0, 40.0),
                       infer_ms=calibration.infer_ms, toolkit_init_ms=Timing(20.0, 30.0),
                       overflow_ms=Timing(40.0, 60.0), degraded_ms=Timing(1.0, 2.0))
    w = periodic(20 * MINUTE_MS, 60, 100.0, sla_ms=2000.0)
    auto = warmstart_variants(strategy="auto")[0]
    # WHEN the auto policy runs the function
    controls, res = _run(auto, w, slow)
    # THEN it is deployed with SnapStart: cold starts are restores, answered locally in time,
    # with no provisioned concurrency and nothing sent to the endpoint
    assert auto.deployed_strategy(w, PolicyContext(calibration=slow)) == "snapstart"
    assert controls.restore and controls.pc_effective is None and controls.admission is None
    assert res.cold_starts == 3 and np.all(res.paths == 0) and int(res.breach.sum()) == 0
    assert res.latencies_ms.max() < 2000.0


def test_auto_strategy_stays_on_demand_where_the_init_fits(calibration: Calibration) -> None:
    # a 100 ms request under a 10 s SLA: a full init (p95 ~1.9 s) is on time, SnapStart's
    # cache would buy nothing
    w = periodic(20 * MINUTE_MS, 60, 100.0, sla_ms=10_000.0)
    auto = WarmstartPolicy(strategy="auto")
    controls, res = _run(auto, w, calibration)
    assert auto.deployed_strategy(w, PolicyContext(calibration=calibration)) == "provisioned"
    assert not controls.restore and controls.admission is not None
    assert res.cold_starts >= 1 and int(res.breach.sum()) == 0


def test_unknown_policy_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="strategy must be one of"):
        WarmstartPolicy(strategy="lambda")
