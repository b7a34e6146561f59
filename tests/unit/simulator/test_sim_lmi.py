"""Lambda Managed Instances in the simulator: reactive scaling, the doubling rule's throttles,
the forecast-driven minimum (warmstart on LMI) and instance-time billing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import workload
from warmers.lmi import LmiSettings, request_usd
from warmers.pricing import load_prices
from warmers.simulator.constants import SimulatorPrices
from warmers.simulator.controls import THROTTLED, EngineState
from warmers.simulator.engine import simulate_function
from warmers.simulator.lmi import LmiReactive, LmiStaticMinimum, WarmstartLmi, _controls
from warmers.simulator.policies import Observed, PolicyContext
from warmers.simulator.trace import MINUTE_MS


def load(in_flight_by_minute: list[int], duration_ms: float = 1000.0):
    """Each minute, requests every ``duration / k`` ms: ``k`` in flight all minute."""
    arrivals: list[float] = []
    for m, k in enumerate(in_flight_by_minute):
        if k:
            arrivals += list(np.arange(m * MINUTE_MS, (m + 1) * MINUTE_MS, duration_ms / k))
    return workload(arrivals, duration_ms, n_minutes=len(in_flight_by_minute))


def run(w, minimum: int):  # type: ignore[no-untyped-def]
    return simulate_function(w, _controls(LmiSettings(), np.full(w.n_minutes, minimum)))


def test_steady_load_is_served_without_throttles_and_billed_by_instance_time() -> None:
    w = load([10] * 30)
    res = run(w, 3)
    assert res.throttled == 0 and res.failed_answers == 0 and res.cold_starts == 0
    # 3 environments (the minimum) all along: 1 vCPU of a 2-vCPU m7g.large each, + 15 % fee
    table = load_prices()
    per_env_h = (table.price("ec2_m7g_large_hour").usd
                 * (1 + table.price("lmi_management_fee_fraction").usd) / 2)
    assert res.lmi_env_ms == pytest.approx(3 * 30 * MINUTE_MS)
    cost = res.cost_usd(SimulatorPrices())
    assert cost["lmi_instances"] == pytest.approx(3 * 0.5 * per_env_h)
    assert cost["requests"] == pytest.approx(res.n_requests * request_usd())
    assert cost["ondemand"] == 0.0 and cost["pc_configured"] == 0.0


def test_traffic_that_more_than_doubles_within_5_minutes_is_throttled() -> None:
    # GIVEN 10 in flight, capacity 2 environments (32 requests: twice the load, per the rule)
    # WHEN it rises to 18 (less than double): no throttle
    assert run(load([10] * 10 + [18] * 20), 0).throttled == 0
    # WHEN it rises to 40 (4x): throttled until the scale-out lands 5 minutes later
    res = run(load([10] * 10 + [40] * 20), 0)
    assert res.throttled > 0
    throttled_at = res.paths == THROTTLED
    minutes = np.unique((load([10] * 10 + [40] * 20).arrivals_ms[throttled_at]
                         // MINUTE_MS).astype(int))
    assert minutes.min() == 10 and minutes.max() <= 16
    # AND a 429 is a failed answer that is not billed
    assert res.failed_answers == res.throttled
    assert res.cost_usd(SimulatorPrices())["requests"] == pytest.approx(
        (res.n_requests - res.throttled) * request_usd())


def test_a_minimum_sized_for_the_peak_avoids_the_throttles() -> None:
    w = load([10] * 10 + [80] * 20)
    assert run(w, 3).throttled > 0  # 48 requests at once, 80 offered
    assert run(w, 3).throttled == simulate_function(
        w, LmiReactive().controls(w, Observed.from_workload(w), None)).throttled  # type: ignore[arg-type]
    static = LmiStaticMinimum().controls(w, Observed.from_workload(w), None)  # type: ignore[arg-type]
    assert static.managed_instances is not None
    assert int(static.managed_instances.minimum[0]) == 5  # ceil(80 / 16)
    assert simulate_function(w, static).throttled == 0


def test_capacity_scales_in_after_traffic_falls() -> None:
    high, low = run(load([40] * 20), 0), run(load([40] * 10 + [2] * 20), 0)
    assert low.throttled == 0
    assert low.lmi_env_ms < 1.3 * high.lmi_env_ms  # 30 minutes, not 1.5x the 20 of 'high'


def test_warmstart_lmi_plans_the_minimum_ahead_of_recurring_bursts(calibration) -> None:  # type: ignore[no-untyped-def]
    # GIVEN 6 hours of 8 in flight with a burst of 60 for 3 minutes every 30 minutes
    pattern = [8] * 27 + [60] * 3
    w = load(pattern * 12)
    observed = Observed.from_workload(w)
    ctx = PolicyContext(calibration)
    reactive = simulate_function(w, LmiReactive().controls(w, observed, ctx))
    policy = WarmstartLmi(keep_plans=True)
    planned = simulate_function(w, policy.controls(w, observed, ctx))
    # THEN reactive LMI throttles every burst, warmstart's forecast minimum far fewer
    assert reactive.throttled > 0
    assert planned.throttled <= 0.1 * reactive.throttled
    # AND every minimum came from plan_run with its reason
    plans = policy.plans[w.function_id]
    assert all(p.action == "managed_instances" and p.min_execution_environments >= 3
               for p in plans)
    assert all("LMI minimum" in p.reason for p in plans[1:])


def test_chunks_give_the_totals_of_one_pass() -> None:
    # GIVEN a step load cut into minute-aligned chunks, as the fleet runner cuts busy functions
    w = load([10] * 10 + [80] * 10 + [5] * 10)
    controls = _controls(LmiSettings(), np.full(w.n_minutes, 1))
    whole = simulate_function(w, controls)
    state, results = EngineState(), []
    for m0, m1 in ((0, 7), (7, 15), (15, 30)):
        keep = (w.arrivals_ms >= m0 * MINUTE_MS) & (w.arrivals_ms < m1 * MINUTE_MS)
        part = workload(w.arrivals_ms[keep], w.durations_ms[keep], n_minutes=w.n_minutes)
        results.append(simulate_function(part, controls, state=state, final=m1 == 30))
    # THEN the last chunk's totals are the one pass's, and the paths agree request by request
    assert whole.throttled > 0
    assert results[-1].throttled == whole.throttled
    assert results[-1].lmi_env_ms == whole.lmi_env_ms
    assert np.array_equal(np.concatenate([r.paths for r in results]), whole.paths)
