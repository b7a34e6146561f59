"""The demo's slice-picking rule (``infra.replay.pick``): on synthetic series, and on the
shipped 8-hour trace (with the cost objective the fallback decides; with the demo's warmer and
planned endpoint every mechanism acts in the slice picked)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infra.replay import pick
from warmers.simulator.trace import load_trace

TRACES = Path(__file__).resolve().parents[4] / "tests/data/traces"


def _series(n: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    conc = np.zeros(n, dtype=np.int64)
    counts = np.full(n, 5, dtype=np.int64)
    pc = np.zeros(n, dtype=np.int64)
    return conc, counts, pc


def test_a_window_qualifies_when_pc_rises_before_a_peak_that_exceeds_it() -> None:
    conc, counts, pc = _series()
    conc[75] = 6
    pc[70:] = 2  # raised at minute 70, before the peak at 75; 6 in flight > 2
    found = pick.qualifying_windows(conc, counts, pc, minutes=20, max_requests=1_000)
    assert found, "the window holding minutes 70..75 must qualify"
    excess, requests, start, peak, raised = found[0]
    assert (excess, requests, peak, raised) == (4, 100, 75, 70) and 56 <= start <= 70


def test_a_raise_before_the_window_counts_and_the_floor_does_not() -> None:
    conc, counts, pc = _series()
    conc[75] = 6
    pc[40:] = 2  # raised at minute 40, before every window that holds the peak
    found = pick.qualifying_windows(conc, counts, pc, minutes=20, max_requests=1_000)
    assert found and {f[4] for f in found} == {40}
    # provisioned concurrency at the floor is not the warmer acting: floor 2 disqualifies it
    assert pick.qualifying_windows(conc, counts, pc, minutes=20, max_requests=1_000,
                                   floor=2) == []


@pytest.mark.parametrize("case", ["raised_after_peak", "no_pc_at_peak", "pc_covers_peak",
                                  "too_many_requests"])
def test_windows_that_break_one_condition_do_not_qualify(case: str) -> None:
    conc, counts, pc = _series()
    conc[75] = 6
    pc[70:] = 2
    max_requests = 1_000
    if case == "raised_after_peak":
        pc[:] = 0
        pc[76:] = 2
    elif case == "no_pc_at_peak":
        pc[:] = 0
    elif case == "pc_covers_peak":
        pc[70:] = 6
    else:
        max_requests = 99
    assert pick.qualifying_windows(conc, counts, pc, minutes=20, max_requests=max_requests) == []


def test_every_mechanism_needs_a_burst_before_and_after_the_endpoint_copy_arrives() -> None:
    conc, _, pc = _series()
    pc[:] = 2
    wanted = np.zeros_like(pc)
    s = 60                   # the replay's first run is LEAD_IN_MIN (3) before the slice and
    wanted[s:] = 1           # plans as the simulator at the slice's first minute: a copy
    ready = 10 - pick.LEAD_IN_MIN  # a 10-minute provisioning: in service at slice minute 7
    conc[s + 2] = 4          # a burst beyond PC before the copy: degradation
    conc[s + 15] = 5         # and one after it: overflow
    acts = pick.endpoint_mechanisms(conc, pc, wanted, s, minutes=20, provisioning_min=10)
    assert acts == (2, 15, min(ready - 2, 15 - ready))
    # no copy asked for at the first run, or a burst on one side only: not every mechanism
    assert pick.endpoint_mechanisms(conc, pc, np.zeros_like(pc), s, minutes=20,
                                    provisioning_min=10) is None
    for only in (s + 2, s + 15):
        one = np.zeros_like(conc)
        one[only] = 5
        assert pick.endpoint_mechanisms(one, pc, wanted, s, minutes=20,
                                        provisioning_min=10) is None
    # a burst within ENDPOINT_MARGIN_MIN of the copy's arrival counts on neither side
    near = np.zeros_like(conc)
    near[[s + ready - 1, s + 15]] = 5
    assert pick.endpoint_mechanisms(near, pc, wanted, s, minutes=20, provisioning_min=10) is None


def test_bad_arguments_are_clear_errors() -> None:
    trace = load_trace(TRACES)
    with pytest.raises(ValueError, match="minutes and max_requests"):
        pick.pick_slice(trace, minutes=0)
    with pytest.raises(ValueError, match="not in the trace"):
        pick.simulated_cold_starts(trace, "no-such-function", 0, 10)
    with pytest.raises(ValueError, match="leaves the trace"):
        pick.simulated_cold_starts(trace, trace.function_ids[0], 475, 10)


@pytest.mark.slow
def test_the_rule_on_the_shipped_trace_is_reproducible_and_says_why() -> None:
    trace = load_trace(TRACES)
    found = pick.candidates(trace)
    assert found and all(trace.triggers[i] == "http" for i, _, _ in found)
    assert all(int((c >= pick.MIN_BURST_CONCURRENCY).sum()) >= pick.MIN_BURST_MINUTES
               for _, c, _ in found)
    picked = pick.pick_slice(trace, minutes=20)
    assert picked == pick.pick_slice(trace, minutes=20)  # same trace, same slice
    i = trace.function_ids.index(picked.function_id)
    assert i in [k for k, _, _ in found]
    counts = trace.counts[i]
    assert picked.requests == int(counts[picked.start_minute:picked.start_minute + 20].sum())
    assert picked.requests <= pick.DEFAULT_MAX_REQUESTS
    assert picked.start_minute >= pick.HISTORY_MIN
    assert picked.start_minute <= picked.peak_minute < picked.start_minute + 20
    # on this trace the simulator's planner raises provisioned concurrency ahead of no peak:
    # the fallback (highest peak in flight) decides, and the reason says so
    assert not picked.qualified and picked.windows == 0
    best_peak = max(int(c[s:s + 20].max()) for _, c, n in found
                    for s in range(pick.HISTORY_MIN, trace.n_minutes - 19)
                    if int(n[s:s + 20].sum()) <= pick.DEFAULT_MAX_REQUESTS)
    assert picked.peak_concurrency == best_peak
    assert "fallback" in picked.reason() and str(picked.requests) in picked.reason()
    # the demo's warmer (cdk.json's provisioned variant: objective sla, floor 1, cap 5) covers
    # the forecast peak: windows qualify, and the biggest burst is picked, its provisioned
    # concurrency raised above the floor before the peak and exceeded at it
    demo = pick.pick_slice(trace, minutes=20, objective="sla", floor=1, cap=5)
    assert demo.qualified and demo.windows > 0
    assert 1 < demo.pc_at_peak < demo.peak_concurrency and demo.pc_raised_at <= demo.peak_minute
    assert demo.peak_concurrency == best_peak
    assert "highest peak" in demo.reason() and "ahead of it" in demo.reason()
    assert not demo.endpoint_checked and not demo.every_mechanism


@pytest.mark.slow
def test_with_the_demos_planned_endpoint_every_mechanism_acts_in_the_pick() -> None:
    from warmers.simulator.endpoint import EndpointModel

    trace = load_trace(TRACES)
    # failed answers unpriced (every avoidable one justifies a copy): the pick rule's machinery
    # with an endpoint the planner wants wherever a cold start may fail
    model = EndpointModel(cap=2, concurrent_requests_per_instance=8, failed_answer_usd=None)
    picked = pick.pick_slice(trace, minutes=20, objective="sla", floor=1, cap=5, endpoint=model)
    assert picked.qualified and picked.endpoint_checked and picked.every_mechanism
    assert 0 < picked.full_windows <= picked.windows
    ready = picked.endpoint_ready_minute
    assert ready == 10 - pick.LEAD_IN_MIN
    margin = pick.margin_for(10.0)
    assert margin == 2 and pick.margin_for(30.0) == 4
    assert picked.degrade_minute <= ready - margin
    assert picked.overflow_minute >= ready + margin
    i = trace.function_ids.index(picked.function_id)
    pc, wanted = pick.planned_run(trace, i, objective="sla", floor=1, cap=5, endpoint=model)
    conc = {k: c for k, c, _ in pick.candidates(trace)}[i]
    s = picked.start_minute
    assert wanted[s] >= 1
    assert conc[s + picked.degrade_minute] > pc[s + picked.degrade_minute]
    assert conc[s + picked.overflow_minute] > pc[s + picked.overflow_minute]
    assert "finds no copy (admission degrades)" in picked.reason()
