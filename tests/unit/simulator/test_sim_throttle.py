"""Lambda's concurrency limit in the engine: the same throttle (429) for every policy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import workload
from warmers.simulator.constants import SimulatorPrices
from warmers.simulator.controls import LOCAL, OVERFLOW, THROTTLED, Controls, HistogramWindows
from warmers.simulator.engine import simulate_function
from warmers.simulator.trace import MINUTE_MS, Workload


class _Overflow:
    """Admission that overflows every cold start (the environment stays busy meanwhile)."""

    def decide(self, arrival_ms: float, now_ms: float, sla_ms: float, duration_ms: float,
               model_ready_in_ms: float, cold_start: bool) -> int:
        return OVERFLOW if cold_start or model_ready_in_ms > 0 else LOCAL


def _three_at_once(limit: int | None) -> Workload:
    # three requests of 1 s at 0, 10 and 20 ms, and a fourth at 2 s when all are done
    w = workload([0.0, 10.0, 20.0, 2000.0], 1000.0, n_minutes=1)
    return replace(w, concurrency_limit=limit)


PLAIN = Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=100.0)
POOL = Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=100.0, admission=_Overflow(),
                toolkit_init_ms=10.0, overflow_extra_ms=5.0, finish_preload="off")
HISTOGRAM = Controls(keep_alive_ms=MINUTE_MS, cold_start_ms=100.0,
                     histogram=HistogramWindows())


@pytest.mark.parametrize("controls", [PLAIN, POOL, HISTOGRAM], ids=["plain", "admission",
                                                                    "histogram"])
def test_the_request_beyond_the_limit_is_throttled_failed_and_not_billed(controls: Controls) -> None:
    # GIVEN a limit of 2 in flight and three overlapping requests
    res = simulate_function(_three_at_once(2), controls)
    unlimited = simulate_function(_three_at_once(None), controls)
    # THEN the third is throttled: a 429 at once, a failed answer, no environment, no bill
    assert res.paths.tolist() == [res.paths[0], res.paths[1], THROTTLED, res.paths[3]]
    assert res.throttled == 1 and unlimited.throttled == 0
    assert res.latencies_ms[2] == 0.0
    assert bool(res.failed[2]) and not res.breach[2]
    assert res.failed_answers == unlimited.failed_answers + 1
    assert res.cold_starts == unlimited.cold_starts - 1
    prices = SimulatorPrices()
    assert res.cost_usd(prices)["requests"] == pytest.approx(3 * prices.request_usd)
    # the fourth request, after the others ended, is served (a throttle frees nothing later)
    assert res.paths[3] != THROTTLED


def test_provisioned_environments_in_flight_count_against_the_limit() -> None:
    # GIVEN 1 provisioned environment and a limit of 2: the first request runs on it, the
    # second cold on demand, the third finds 2 in flight
    pc = np.ones(1, dtype=np.int64)
    controls = replace(PLAIN, pc_effective=pc, pc_configured=pc)
    res = simulate_function(_three_at_once(2), controls)
    assert res.paths.tolist()[:3] == [LOCAL, LOCAL, THROTTLED]
    assert res.cold_starts == 1


def test_a_limit_at_or_above_the_peak_changes_nothing() -> None:
    for controls in (PLAIN, POOL, HISTOGRAM):
        a = simulate_function(_three_at_once(3), controls)
        b = simulate_function(_three_at_once(None), controls)
        assert a.paths.tolist() == b.paths.tolist()
        assert a.latencies_ms.tolist() == b.latencies_ms.tolist()
        assert a.cold_starts == b.cold_starts


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="concurrency_limit must be >= 1"):
        _three_at_once(0)


def test_every_policy_of_a_run_meets_the_same_limit(calibration) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the shipped trace's busiest function and a limit below its peak in flight
    from tests.unit.simulator.sim_helpers import TRACE_DIR
    from warmers.simulator.policies import HybridHistogram, KeepAlive, SnapStart
    from warmers.simulator.run import run_simulation
    from warmers.simulator.trace import load_trace
    from warmers.simulator.warmstart_policy import warmstart_variants

    trace = load_trace(TRACE_DIR)
    busiest = int(np.argmax(trace.counts.sum(axis=1)))
    one = replace(trace.select([busiest]), counts=trace.counts[[busiest], :60])
    policies = [KeepAlive(10), HybridHistogram(), SnapStart(), *warmstart_variants(15)]
    free = run_simulation(one, policies, calibration, concurrency_limit=None)
    capped = run_simulation(one, policies, calibration, concurrency_limit=2)
    for t_free, t_capped in zip(free.totals, capped.totals, strict=True):
        # THEN each policy has throttles there and none without the limit, counted as failed
        assert t_free.throttled == 0, t_free.policy
        assert t_capped.throttled > 0, t_capped.policy
        assert t_capped.failed_answers >= t_capped.throttled
        assert t_capped.requests == t_free.requests
        row = next(r for r in capped.rows if r.policy == t_capped.policy)
        assert row.throttled == t_capped.throttled


def test_requests_longer_than_the_default_timeout_are_counted_the_same_for_every_policy(calibration) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the subset's function with the longest p99 duration (minutes long in the trace)
    from tests.unit.simulator.sim_helpers import TRACE_DIR
    from warmers.simulator.policies import KeepAlive, SnapStart
    from warmers.simulator.run import run_simulation
    from warmers.simulator.trace import load_trace

    trace = load_trace(TRACE_DIR)
    longest = int(np.argmax(trace.duration_pct_ms[:, 5]))
    one = trace.select([longest])
    res = run_simulation(one, [KeepAlive(10), SnapStart()], calibration)
    # THEN they are said (counted) and identical under each policy (the trace's durations)
    counts = {t.policy: t.long_requests for t in res.totals}
    assert len(set(counts.values())) == 1
    assert 0 < next(iter(counts.values())) < res.totals[0].requests
