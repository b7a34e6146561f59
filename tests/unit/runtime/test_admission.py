"""The admission decision table, row by row and at each boundary."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path as FsPath

import pytest

from functions.runtime.admission import (
    BASELINE_POLICY,
    DEFAULT_INFER_P95_MS,
    HANDLER_POLICY,
    NO_OVERFLOW,
    AdmissionPolicy,
    Decision,
    EnvState,
    LatencyTracker,
    ModelState,
    OverflowState,
    Path,
    Reason,
    RequestInfo,
    StageProgress,
    arrival_ms_from_event,
    decide,
    estimate_load_remaining_ms,
    ready_local_fits,
    remaining_budget_ms,
)
from functions.runtime.breaker import BreakerState
from functions.runtime.contract.levels import Level
from functions.runtime.events import MAX_EVENT_AGE_MS

EVENTS = FsPath(__file__).resolve().parents[2] / "data" / "events"

ARRIVAL = 1_700_000_000_000.0
SLA = 2000.0


def req(tier: str = "P0", *, degradable: bool = True, sla_ms: float = SLA) -> RequestInfo:
    return RequestInfo(route="/v1/intent", tier=tier, sla_ms=sla_ms, arrival_ms=ARRIVAL,  # type: ignore[arg-type]
                       degradable=degradable)


READY = EnvState(ModelState.READY, 0.0, infer_p95_ms=50.0, degrade_p95_ms=10.0)
LOADING = EnvState(ModelState.LOADING, load_remaining_ms=1200.0, infer_p95_ms=50.0,
                   degrade_p95_ms=10.0)
NOT_LOADED = EnvState(ModelState.NOT_LOADED, load_remaining_ms=1500.0, infer_p95_ms=50.0,
                      degrade_p95_ms=10.0)
OVERFLOW_OK = OverflowState(configured=True, healthy=True, latency_p95_ms=300.0)


def at(elapsed_ms: float) -> float:
    """now_ms with ``elapsed_ms`` of the SLA gone."""
    return ARRIVAL + elapsed_ms


# ---- rows ---------------------------------------------------------------------------------

def test_row1_l3_sheds_p1_and_p2_with_level_retry_after_never_p0() -> None:
    d = decide(req("P1"), READY, OVERFLOW_OK, Level.L3, at(0))
    assert (d.path, d.reason, d.retry_after_s) == (Path.SHED, Reason.LEVEL_SHED, 60)
    d = decide(req("P2"), READY, OVERFLOW_OK, Level.L3, at(0))
    assert (d.path, d.reason, d.retry_after_s) == (Path.SHED, Reason.FEATURE_DISABLED, 60)
    # a P0 request the handler sees was admitted by Lambda: shedding it loses an answer
    for env in (READY, LOADING):
        d = decide(req("P0"), env, OVERFLOW_OK, Level.L3, at(0))
        assert (d.path, d.reason) == (Path.LOCAL, Reason.LOCAL_READY if env is READY
                                      else Reason.LOCAL_AFTER_LOAD)


@pytest.mark.parametrize("level", [Level.L1, Level.L2])
def test_row2_p2_feature_disabled_from_l1(level: Level) -> None:
    d = decide(req("P2", degradable=True), READY, OVERFLOW_OK, level, at(0))
    assert (d.path, d.reason, d.retry_after_s) == (Path.SHED, Reason.FEATURE_DISABLED, 60)


def test_row2_does_not_touch_p0_p1_at_l1_nor_p2_at_l0() -> None:
    assert decide(req("P0"), READY, OVERFLOW_OK, "L1", at(0)).path is Path.LOCAL
    assert decide(req("P1"), READY, OVERFLOW_OK, "L1", at(0)).path is Path.LOCAL
    assert decide(req("P2"), READY, OVERFLOW_OK, "L0", at(0)).path is Path.LOCAL


def test_row3_budget_exhausted_retry_after_is_time_until_model_ready() -> None:
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(SLA))  # budget exactly 0
    assert (d.path, d.reason, d.budget_ms) == (Path.SHED, Reason.BUDGET_EXHAUSTED, 0)
    assert d.retry_after_s == 2  # ceil(1200 ms / 1000)
    d = decide(req(), READY, OVERFLOW_OK, "L0", at(SLA + 500))
    assert (d.reason, d.budget_ms, d.retry_after_s) == (Reason.BUDGET_EXHAUSTED, -500, 1)


def test_row4_l2_precision_cut_for_degradable_routes_only() -> None:
    d = decide(req("P0"), READY, OVERFLOW_OK, "L2", at(0))
    assert (d.path, d.reason, d.estimate_ms) == (Path.DEGRADE, Reason.LEVEL_PRECISION_CUT, 10.0)
    d = decide(req("P1", degradable=False), READY, OVERFLOW_OK, "L2", at(0))
    assert (d.path, d.reason) == (Path.LOCAL, Reason.LOCAL_READY)


def test_row5_local_ready() -> None:
    d = decide(req(), READY, OVERFLOW_OK, "L0", at(100))
    assert d == Decision(Path.LOCAL, Reason.LOCAL_READY, 1900, None, 50.0, 0.0)


def test_row6_local_after_load_keeps_the_fallback_reserve() -> None:
    # overflow usable: reserve = overflow 300 + its degrade reserve 10; wait = budget-infer-reserve
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.reason, d.estimate_ms, d.limit_ms) == (
        Path.LOCAL, Reason.LOCAL_AFTER_LOAD, 1250.0, 2000 - 50 - 310)
    # no overflow, degradable: reserve = degrade 10 ms
    d = decide(req(), NOT_LOADED, NO_OVERFLOW, "L0", at(0))
    assert (d.path, d.reason, d.estimate_ms, d.limit_ms) == (
        Path.LOCAL, Reason.LOCAL_AFTER_LOAD, 1550.0, 2000 - 50 - 10)
    # nothing to fall back to: no reserve
    d = decide(req(degradable=False), NOT_LOADED, NO_OVERFLOW, "L0", at(0))
    assert d.limit_ms == 2000 - 50


def test_row7_cold_start_overflows_when_the_model_cannot_be_ready_in_time() -> None:
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(900))  # 1100 left < 1250 local
    assert (d.path, d.reason, d.budget_ms, d.estimate_ms, d.limit_ms) == (
        Path.OVERFLOW, Reason.OVERFLOW_FITS, 1100, 300.0, 1090.0)


def test_row7b_overflow_waits_for_a_client_still_being_made_keeping_the_degrade_reserve() -> None:
    # GIVEN the overflow client still being made: 220 ms of its p95 left, the call itself 50
    making = OverflowState(configured=True, latency_p95_ms=270.0, client_init_ms=220.0)
    # WHEN 200 ms are left (the local model loading: 1250 ms cannot fit)
    d = decide(req(), LOADING, making, "L0", at(SLA - 200))
    # THEN overflow, its deadline keeping the degraded answer's 10 ms: the call alone (50 + 10)
    # fits though the client's p95 with it (270 + 10) does not
    assert (d.path, d.reason, d.estimate_ms, d.limit_ms) == (
        Path.OVERFLOW, Reason.OVERFLOW_AFTER_CLIENT, 270.0, 190.0)
    # the call alone + the reserve is the boundary: 60 fits, 59 does not
    assert decide(req(), LOADING, making, "L0", at(SLA - 60)).path is Path.OVERFLOW
    assert decide(req(), LOADING, making, "L0", at(SLA - 59)).reason is Reason.NO_FULL_PATH_FITS
    # a route with no degraded answer has nothing to fall back on: row 7's p95 rule
    assert decide(req(degradable=False), LOADING, making, "L0", at(SLA - 200)).path is Path.SHED
    # once the client exists the p95 of the call is the whole estimate: row 7 or nothing
    made = OverflowState(configured=True, latency_p95_ms=270.0)
    assert decide(req(), LOADING, made, "L0", at(SLA - 200)).reason is Reason.NO_FULL_PATH_FITS
    # the bounded wait never outlives a failed overflow: excluded, the degraded answer fits
    d = decide(req(), LOADING, making, "L0", at(SLA - 30), exclude=frozenset({Path.OVERFLOW}))
    assert (d.path, d.reason) == (Path.DEGRADE, Reason.NO_FULL_PATH_FITS)


def test_row8_degrade_when_no_full_path_fits() -> None:
    d = decide(req(), LOADING, NO_OVERFLOW, "L0", at(900))
    assert (d.path, d.reason) == (Path.DEGRADE, Reason.NO_FULL_PATH_FITS)


def test_row9_shed_when_nothing_fits() -> None:
    d = decide(req(degradable=False), LOADING, NO_OVERFLOW, "L0", at(900))
    assert (d.path, d.reason, d.retry_after_s) == (Path.SHED, Reason.NO_PATH_FITS, 2)


# ---- boundaries ---------------------------------------------------------------------------

def test_boundary_local_keeps_the_richest_reserve_that_still_fits() -> None:
    # local 1200 + 50 = 1250, whole chain overflow 300 + degrade 10: needs 1560
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(440))
    assert (d.path, d.limit_ms) == (Path.LOCAL, 1560.0 - 50 - 310)
    # 1559 left: the chain no longer fits after the wait, local still does: LOCAL with the
    # degrade reserve (10 ms) only, never the overflow (issue 19: local first)
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(441))
    assert (d.path, d.reason, d.limit_ms) == (Path.LOCAL, Reason.LOCAL_AFTER_LOAD,
                                              1559.0 - 50 - 10)
    # 1255 left: not even the degrade reserve fits after the wait: LOCAL with no reserve
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(745))
    assert (d.path, d.limit_ms) == (Path.LOCAL, 1255.0 - 50)
    # 1249 left: local does not fit: overflow
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(751))
    assert (d.path, d.budget_ms) == (Path.OVERFLOW, 1249)


def test_boundary_local_without_any_fallback() -> None:
    # not degradable, no overflow: reserve 0, local 1250
    d = decide(req(degradable=False), LOADING, NO_OVERFLOW, "L0", at(750))
    assert (d.path, d.limit_ms) == (Path.LOCAL, 1200.0)
    d = decide(req(degradable=False), LOADING, NO_OVERFLOW, "L0", at(751))
    assert (d.path, d.reason) == (Path.SHED, Reason.NO_PATH_FITS)


def test_boundary_ready_local_equal_to_budget() -> None:
    assert decide(req(), READY, NO_OVERFLOW, "L0", at(1950)).path is Path.LOCAL  # 50 == 50
    d = decide(req(), READY, OVERFLOW_OK, "L0", at(1951))  # 49 < 50; overflow 300 no
    assert (d.path, d.reason) == (Path.DEGRADE, Reason.NO_FULL_PATH_FITS)


def test_boundary_overflow_plus_degrade_reserve_equal_to_budget_fits_one_ms_more_does_not() -> None:
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(1690))  # 300 + 10 == 310
    assert (d.path, d.limit_ms) == (Path.OVERFLOW, 300.0)  # the call keeps 10 ms for degrade
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(1691))  # 309 < 310
    assert (d.path, d.reason) == (Path.DEGRADE, Reason.NO_FULL_PATH_FITS)
    # not degradable: no reserve, the overflow may use the whole budget
    d = decide(req(degradable=False), LOADING, OVERFLOW_OK, "L0", at(1700))
    assert (d.path, d.limit_ms) == (Path.OVERFLOW, 300.0)
    d = decide(req(degradable=False), LOADING, OVERFLOW_OK, "L0", at(1701))
    assert (d.path, d.reason) == (Path.SHED, Reason.NO_PATH_FITS)


def test_boundary_degrade_estimate_equal_to_budget_fits_one_ms_more_does_not() -> None:
    assert decide(req(), LOADING, NO_OVERFLOW, "L0", at(1990)).path is Path.DEGRADE  # 10 == 10
    d = decide(req(), LOADING, NO_OVERFLOW, "L0", at(1991))
    assert (d.path, d.reason) == (Path.SHED, Reason.NO_PATH_FITS)


def test_boundary_l2_degrade_needs_budget_too() -> None:
    d = decide(req(), READY, NO_OVERFLOW, "L2", at(1991))  # 9 ms left < degrade 10 and local 50
    assert (d.path, d.reason) == (Path.SHED, Reason.NO_PATH_FITS)


def test_boundary_budget_one_ms_left_is_not_exhausted() -> None:
    tiny = EnvState(ModelState.READY, 0.0, infer_p95_ms=1.0, degrade_p95_ms=1.0)
    d = decide(req(), tiny, NO_OVERFLOW, "L0", at(1999))
    assert (d.path, d.budget_ms) == (Path.LOCAL, 1)


def test_fractional_budget_counts_against_estimates_before_flooring() -> None:
    # local 1250: 1249.5 left does not fit, though the floored budget_ms would say 1249
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(750.5))
    assert (d.path, d.budget_ms) == (Path.OVERFLOW, 1249)
    # the whole reserve chain (1560) against 1559.5: only the degrade reserve is kept
    d = decide(req(), LOADING, OVERFLOW_OK, "L0", at(440.5))
    assert (d.path, d.budget_ms, d.limit_ms) == (Path.LOCAL, 1559, 1559.5 - 50 - 10)


def test_arrival_in_the_future_clock_skew_counts_as_no_time_elapsed() -> None:
    d = decide(req(), READY, NO_OVERFLOW, "L0", ARRIVAL - 5000)
    assert d.budget_ms == 2000
    assert remaining_budget_ms(req(), ARRIVAL - 1) == 2000


# ---- overflow usability --------------------------------------------------------------------

@pytest.mark.parametrize(
    ("state", "usable"),
    [
        (OverflowState(configured=False), False),
        (OverflowState(configured=True, healthy=False), False),
        (OverflowState(configured=True, breaker=BreakerState.OPEN), False),
        (OverflowState(configured=True, breaker=BreakerState.HALF_OPEN), True),
        (OverflowState(configured=True, breaker=BreakerState.HALF_OPEN, probe_in_flight=True), False),
        (OverflowState(configured=True, breaker="closed"), True),  # type: ignore[arg-type]
    ],
)
def test_overflow_used_only_when_usable(state: OverflowState, usable: bool) -> None:
    assert state.usable is usable
    d = decide(req(), LOADING, state, "L0", at(900))
    assert d.path is (Path.OVERFLOW if usable else Path.DEGRADE)


def test_exclude_skips_failed_paths_and_refuses_to_exclude_shed() -> None:
    d = decide(req(), READY, OVERFLOW_OK, "L0", at(0), exclude=frozenset({Path.LOCAL}))
    assert d.path is Path.OVERFLOW
    d = decide(req(), READY, OVERFLOW_OK, "L0", at(0),
               exclude=frozenset({Path.LOCAL, Path.OVERFLOW}))
    assert d.path is Path.DEGRADE
    d = decide(req(), READY, OVERFLOW_OK, "L0", at(0),
               exclude=frozenset({Path.LOCAL, Path.OVERFLOW, Path.DEGRADE}))
    assert (d.path, d.reason) == (Path.SHED, Reason.NO_PATH_FITS)
    with pytest.raises(ValueError, match="SHED cannot be excluded"):
        decide(req(), READY, OVERFLOW_OK, "L0", at(0), exclude=frozenset({Path.SHED}))


# ---- the invariant, exhaustively over a grid -------------------------------------------------

def test_never_picks_a_path_over_budget_when_another_fits() -> None:
    envs = [READY, LOADING, NOT_LOADED,
            EnvState(ModelState.READY, 0.0, infer_p95_ms=2500.0, degrade_p95_ms=3000.0)]
    overflows = [NO_OVERFLOW, OVERFLOW_OK, OverflowState(True, latency_p95_ms=1900.0),
                 OverflowState(True, breaker=BreakerState.OPEN),
                 OverflowState(True, latency_p95_ms=1900.0, client_init_ms=1600.0)]
    checked = 0
    for env, ov, level, tier, degradable, elapsed in itertools.product(
        envs, overflows, list(Level), ("P0", "P1", "P2"), (True, False),
        range(-100, 2200, 37),
    ):
        request = req(tier, degradable=degradable)
        d = decide(request, env, ov, level, at(elapsed))
        budget = SLA - max(0, elapsed)
        fits = {Path.SHED}
        if env.local_ms <= budget:
            fits.add(Path.LOCAL)
        if ov.usable and ov.latency_p95_ms <= budget:
            fits.add(Path.OVERFLOW)
        if ov.usable and degradable and ov.latency_p95_ms - ov.client_init_ms + env.degrade_p95_ms <= budget:
            fits.add(Path.OVERFLOW)  # row 7b: the client's wait is bounded, the reserve kept
        if degradable and env.degrade_p95_ms <= budget:
            fits.add(Path.DEGRADE)
        assert d.path in fits, (env, ov, level, tier, elapsed, d)
        if d.reason is not Reason.OVERFLOW_AFTER_CLIENT:
            assert d.estimate_ms <= max(budget, 0)
        degrade_reserve = env.degrade_p95_ms if degradable else 0.0
        chains = ([ov.latency_p95_ms + degrade_reserve] if ov.usable else []) + (
            [env.degrade_p95_ms] if degradable else []) + [0.0]
        if (level is Level.L3 and tier != "P0") or (level.rank >= 1 and tier == "P2"):
            assert d.path is Path.SHED
        elif budget > 0 and env.local_ms <= budget and not (
                level is Level.L2 and degradable and Path.DEGRADE in fits):
            # local first: chosen whenever it fits, P0 at every level included (issue 19)
            assert d.path is Path.LOCAL, (env, ov, level, tier, elapsed, d)
            assert d.estimate_ms + d.limit_ms - env.local_ms + env.infer_p95_ms <= budget + 1e-9
        if d.path is Path.LOCAL and env.model_state is not ModelState.READY:
            # a failed wait leaves the richest reserve that fitted after it for the fallback
            kept = next(c for c in chains if env.local_ms + c <= budget)
            assert budget - (d.limit_ms + env.infer_p95_ms) >= kept - 1e-9
        if d.path is Path.OVERFLOW:
            # the call's deadline covers its p95 estimate, or (row 7b) the call alone
            bounded = ov.client_init_ms if d.reason is Reason.OVERFLOW_AFTER_CLIENT else 0.0
            assert d.limit_ms >= d.estimate_ms - bounded
            assert budget - d.limit_ms == (env.degrade_p95_ms if degradable else 0.0)
        if d.path is Path.SHED:
            assert d.retry_after_s is not None and d.retry_after_s >= 1
        else:
            assert d.retry_after_s is None
        checked += 1
    assert checked > 5000


# ---- the request's downstream work (downstream_ms, e.g. a tool call) ----------------------------

def tool_req(downstream_ms: float, *, degradable: bool = True) -> RequestInfo:
    return RequestInfo(route="/v1/intent", tier="P0", sla_ms=SLA, arrival_ms=ARRIVAL,
                       degradable=degradable, downstream_ms=downstream_ms)


def test_downstream_ms_counts_in_the_ready_local_estimate_at_the_boundary() -> None:
    # READY: infer 50 + tool 1950 == 2000 budget fits; one ms more does not -> degraded answer
    d = decide(tool_req(1950.0), READY, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.reason, d.estimate_ms) == (Path.LOCAL, Reason.LOCAL_READY, 2000.0)
    d = decide(tool_req(1951.0), READY, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.reason) == (Path.DEGRADE, Reason.NO_FULL_PATH_FITS)  # skips the tool call
    assert d.estimate_ms == READY.degrade_p95_ms
    d = decide(tool_req(1951.0, degradable=False), READY, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.reason) == (Path.SHED, Reason.NO_PATH_FITS)
    assert ready_local_fits("P0", True, 0, SLA, 50.0, downstream_ms=1950.0)
    assert not ready_local_fits("P0", True, 0, SLA, 50.0, downstream_ms=1951.0)


def test_downstream_ms_counts_in_the_overflow_estimate_at_the_boundary() -> None:
    # NOT_LOADED: local 1500 + 50 + tool cannot fit; overflow 300 + tool + degrade reserve 10
    d = decide(tool_req(1690.0), NOT_LOADED, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.reason, d.estimate_ms) == (Path.OVERFLOW, Reason.OVERFLOW_FITS, 1990.0)
    assert d.limit_ms == SLA - NOT_LOADED.degrade_p95_ms  # the call's budget includes the tool
    d = decide(tool_req(1691.0), NOT_LOADED, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.reason) == (Path.DEGRADE, Reason.NO_FULL_PATH_FITS)
    # a 500 ms tool: local 1550 + 500 no longer fits with its reserve, overflow 800 does
    d = decide(tool_req(500.0), NOT_LOADED, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.estimate_ms) == (Path.OVERFLOW, 800.0)
    assert decide(tool_req(0.0), NOT_LOADED, OVERFLOW_OK, "L0", at(0)).path is Path.LOCAL


def test_downstream_ms_counts_in_the_local_after_load_estimate_and_its_wait() -> None:
    # LOADING: 1200 + 50 + tool; the wait keeps the chain (overflow 300 + tool + degrade 10)
    # when it fits after it: a 200 ms tool: 1450 + 510 = 1960 fits
    d = decide(tool_req(200.0), LOADING, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.reason, d.estimate_ms) == (Path.LOCAL, Reason.LOCAL_AFTER_LOAD, 1450.0)
    assert d.limit_ms == SLA - 50.0 - 200.0 - (300.0 + 200.0 + 10.0)
    # a 221 ms tool: 1471 + 531 = 2002 does not, local 1471 does: local, degrade reserve only
    d = decide(tool_req(221.0), LOADING, OVERFLOW_OK, "L0", at(0))
    assert (d.path, d.limit_ms) == (Path.LOCAL, SLA - 50.0 - 221.0 - 10.0)
    # a 751 ms tool: local 2001 does not fit, overflow 300 + 751 + 10 does
    d = decide(tool_req(751.0), LOADING, OVERFLOW_OK, "L0", at(0))
    assert d.path is Path.OVERFLOW and d.estimate_ms == 1051.0


def test_never_picks_a_path_whose_estimate_with_the_tool_exceeds_the_budget() -> None:
    envs = [READY, LOADING, NOT_LOADED]
    overflows = [NO_OVERFLOW, OVERFLOW_OK, OverflowState(True, latency_p95_ms=900.0)]
    checked = 0
    for env, ov, degradable, downstream_ms, elapsed in itertools.product(
        envs, overflows, (True, False), (0.0, 100.0, 700.0, 1500.0, 1990.0, 2500.0),
        range(0, 2100, 97),
    ):
        d = decide(tool_req(downstream_ms, degradable=degradable), env, ov, "L0", at(elapsed))
        budget = SLA - elapsed
        if d.path is Path.LOCAL:
            assert env.local_ms + downstream_ms <= budget and d.estimate_ms == env.local_ms + downstream_ms
        elif d.path is Path.OVERFLOW:
            assert ov.latency_p95_ms + downstream_ms <= budget
            assert d.estimate_ms == ov.latency_p95_ms + downstream_ms
        elif d.path is Path.DEGRADE:
            assert degradable and env.degrade_p95_ms <= budget  # no tool call on this path
        checked += 1
    assert checked > 2000


# ---- the off baseline (WARMSTART_ADMISSION=off: BASELINE_POLICY) -----------------------------

def test_baseline_is_local_whatever_the_budget_level_or_overflow() -> None:
    """GIVEN the baseline policy, WHEN any request is decided (every tier, level, environment
    state, overflow state, budget from plenty to long gone), THEN it is LOCAL: ready now, or
    after the load with an unbounded wait (the handler bounds it by the invocation's time);
    never OVERFLOW, DEGRADE or SHED."""
    checked = 0
    for env, ov, level, tier, elapsed in itertools.product(
        (READY, LOADING, NOT_LOADED), (NO_OVERFLOW, OVERFLOW_OK), list(Level), ("P0", "P1", "P2"),
        (0.0, 1999.0, 2000.0, 60_000.0),
    ):
        d = decide(req(tier), env, ov, level, at(elapsed), policy=BASELINE_POLICY)
        assert d.path is Path.LOCAL, (env, ov, level, tier, elapsed, d)
        if env.model_state is ModelState.READY:
            assert (d.reason, d.limit_ms) == (Reason.LOCAL_READY, 0.0)
        else:
            assert (d.reason, d.limit_ms) == (Reason.LOCAL_AFTER_LOAD, math.inf)
        assert d.estimate_ms == env.local_ms and d.retry_after_s is None
        checked += 1
    assert checked == 3 * 2 * 4 * 3 * 4


def test_baseline_sheds_only_once_local_failed() -> None:
    # the model did not load (LOCAL excluded after it failed): 503 with the shortest retry
    d = decide(req(), NOT_LOADED, OVERFLOW_OK, "L0", at(0), policy=BASELINE_POLICY,
               exclude=frozenset({Path.LOCAL}))
    assert (d.path, d.reason, d.retry_after_s) == (Path.SHED, Reason.NO_PATH_FITS,
                                                   BASELINE_POLICY.min_retry_after_s)
    assert BASELINE_POLICY.baseline and not HANDLER_POLICY.baseline
    assert BASELINE_POLICY.headroom_ms == HANDLER_POLICY.headroom_ms


@pytest.mark.parametrize("level_rank", [0, 1, 2, 3])
@pytest.mark.parametrize("budget_ms", [-5000.0, 0.0, 2000.0])
def test_baseline_warm_path_is_always_local(level_rank: int, budget_ms: float) -> None:
    assert ready_local_fits("P2", True, level_rank, budget_ms, 50.0, BASELINE_POLICY,
                            downstream_ms=10_000.0)


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tier": "P9"}, "unknown tier 'P9'"),
        ({"sla_ms": 0}, "sla_ms must be > 0"),
        ({"sla_ms": float("nan")}, "sla_ms must be finite"),
        ({"arrival_ms": "now"}, "arrival_ms must be a number"),
        ({"downstream_ms": -1.0}, "downstream_ms must be >= 0"),
        ({"downstream_ms": float("inf")}, "downstream_ms must be finite"),
    ],
)
def test_request_info_rejects_bad_input(kwargs: dict, message: str) -> None:
    base = {"route": "/x", "tier": "P0", "sla_ms": 100.0, "arrival_ms": 0.0}
    with pytest.raises((ValueError, TypeError), match=message):
        RequestInfo(**{**base, **kwargs})


def test_env_and_overflow_state_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="load_remaining_ms must be >= 0"):
        EnvState(ModelState.LOADING, -1.0)
    with pytest.raises(ValueError, match="'warm' is not a valid ModelState"):
        EnvState("warm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="latency_p95_ms must be finite"):
        OverflowState(True, latency_p95_ms=float("inf"))
    with pytest.raises(ValueError, match="client_init_ms .* cannot exceed it"):
        OverflowState(True, latency_p95_ms=50.0, client_init_ms=60.0)
    with pytest.raises(ValueError, match="client_init_ms must be >= 0"):
        OverflowState(True, client_init_ms=-1.0)
    with pytest.raises(ValueError, match="unknown degradation level 'L7'"):
        decide(req(), READY, NO_OVERFLOW, "L7", at(0))
    with pytest.raises(ValueError, match="now_ms must be finite"):
        decide(req(), READY, NO_OVERFLOW, "L0", float("nan"))
    with pytest.raises(ValueError, match="min_retry_after_s <= level_retry_after_s"):
        AdmissionPolicy(level_retry_after_s=0, min_retry_after_s=1)


def test_headroom_is_kept_back_from_the_budget() -> None:
    policy = AdmissionPolicy(headroom_ms=100.0)
    d = decide(req(), READY, NO_OVERFLOW, "L0", at(100), policy=policy)
    assert (d.path, d.budget_ms) == (Path.LOCAL, 1800)
    # local 1250 fits 2000 - 650 - 100 = 1250 exactly, not one ms later
    assert decide(req(), LOADING, NO_OVERFLOW, "L0", at(650), policy=policy).path is Path.LOCAL
    d = decide(req(), LOADING, NO_OVERFLOW, "L0", at(651), policy=policy)
    assert d.path is Path.DEGRADE
    d = decide(req(), READY, NO_OVERFLOW, "L0", at(1900), policy=policy)
    assert (d.path, d.reason) == (Path.SHED, Reason.BUDGET_EXHAUSTED)
    with pytest.raises(ValueError, match="headroom_ms must be >= 0"):
        AdmissionPolicy(headroom_ms=-1.0)


def test_policy_sets_retry_after() -> None:
    d = decide(req("P1"), READY, NO_OVERFLOW, "L3", at(0), policy=AdmissionPolicy(120, 5))
    assert d.retry_after_s == 120
    d = decide(req(), READY, NO_OVERFLOW, "L0", at(SLA), policy=AdmissionPolicy(120, 5))
    assert d.retry_after_s == 5


# ---- arrival -----------------------------------------------------------------------------------

def _event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def test_arrival_from_http_api_time_epoch() -> None:
    event = _event("http_api_v2.json")
    epoch = event["requestContext"]["timeEpoch"]
    assert arrival_ms_from_event(event, epoch + 250) == epoch
    # clock skew: API Gateway's clock ahead of ours -> arrival is the invocation start
    assert arrival_ms_from_event(event, epoch - 10) == epoch - 10
    # a replayed sample (older than any HTTP source waits) starts at invocation
    assert arrival_ms_from_event(event, epoch + MAX_EVENT_AGE_MS + 1) == epoch + MAX_EVENT_AGE_MS + 1


def test_arrival_from_rest_api_request_time_epoch_and_fallbacks() -> None:
    rest = _event("rest_api_v1.json")
    epoch = rest["requestContext"]["requestTimeEpoch"]
    assert arrival_ms_from_event(rest, epoch + 5) == epoch
    for other in ("alb.json", "scheduled_event.json"):
        assert arrival_ms_from_event(_event(other), 123.0) == 123.0
    assert arrival_ms_from_event({"warmstart": {"ping": True}}, 7.0) == 7.0
    assert arrival_ms_from_event({"requestContext": {"timeEpoch": "soon"}}, 7.0) == 7.0
    assert arrival_ms_from_event(["not", "a", "dict"], 7.0) == 7.0
    with pytest.raises(ValueError, match="invocation_start_ms must be finite"):
        arrival_ms_from_event({}, float("inf"))


# ---- LatencyTracker ----------------------------------------------------------------------------

def test_latency_tracker_seeded_then_nearest_rank_p95() -> None:
    t = LatencyTracker(DEFAULT_INFER_P95_MS, window=20, min_samples=5)
    assert t.p95_ms == DEFAULT_INFER_P95_MS
    t.extend([3.0, 4.0, 5.0, 6.0])
    assert t.p95_ms == DEFAULT_INFER_P95_MS  # 4 < min_samples: max(default, observed)
    t.observe(70.0)
    assert t.p95_ms == 70.0  # 5 samples: rank ceil(0.95*5)=5
    t.extend([1.0] * 15)  # 20 samples: rank 19 of sorted -> 6.0
    assert t.p95_ms == 6.0
    t.extend([2.0] * 20)  # window slides: only 2.0s left
    assert t.p95_ms == 2.0 and t.count == 20
    assert t.quantile_ms(0.5) == 2.0


def test_latency_tracker_conservative_when_observations_exceed_seed() -> None:
    t = LatencyTracker(50.0, min_samples=3)
    t.observe(400.0)
    assert t.p95_ms == 400.0


def test_latency_tracker_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        LatencyTracker(1.0, window=0)
    with pytest.raises(ValueError, match="min_samples must be in 1..window"):
        LatencyTracker(1.0, window=4, min_samples=5)
    t = LatencyTracker(1.0)
    with pytest.raises(ValueError, match="value_ms must be >= 0"):
        t.observe(-3.0)
    with pytest.raises(ValueError, match="q must be in"):
        t.quantile_ms(0.0)
    assert t.count == 0


# ---- preload estimate ---------------------------------------------------------------------------

def test_load_remaining_from_preload_progress() -> None:
    stages = [
        StageProgress("import", 800.0, started_ms=0.0, finished_ms=700.0),
        StageProgress("session", 200.0, started_ms=700.0),
        StageProgress("tokenizer", 50.0),
    ]
    assert estimate_load_remaining_ms(stages, 750.0) == 150.0 + 50.0
    # the running stage overran its p95: floor at 10 % of its p95
    assert estimate_load_remaining_ms(stages, 2000.0) == 20.0 + 50.0
    assert estimate_load_remaining_ms([], 0.0) == 0.0
    with pytest.raises(ValueError, match="finished before it started"):
        estimate_load_remaining_ms([StageProgress("x", 1.0, 5.0, 4.0)], 10.0)
    with pytest.raises(ValueError, match="overrun_floor_fraction"):
        estimate_load_remaining_ms(stages, 0.0, overrun_floor_fraction=2.0)


def test_cold_start_sequence_overflow_then_local_on_the_same_environment() -> None:
    """GIVEN an on-demand cold start whose preload needs 1.5 s and a 2 s SLA that lost 600 ms
    to init, WHEN requests arrive while the model loads and after, THEN the first overflows
    and the later ones run locally."""
    stages = [StageProgress("import", 1200.0, started_ms=ARRIVAL),
              StageProgress("session", 300.0)]
    first_now = ARRIVAL + 600
    env1 = EnvState(ModelState.LOADING, estimate_load_remaining_ms(stages, first_now), 50.0)
    assert env1.load_remaining_ms == 900.0
    d1 = decide(req(), env1, OVERFLOW_OK, "L0", first_now)  # 1400 left, local 950 fits
    assert d1.path is Path.LOCAL
    late = RequestInfo("/v1/intent", "P0", SLA, ARRIVAL - 1000, True)  # queued 1.6 s
    d2 = decide(late, env1, OVERFLOW_OK, "L0", first_now)
    assert d2.path is Path.OVERFLOW
    ready = EnvState(ModelState.READY, 0.0, 50.0)
    d3 = decide(RequestInfo("/v1/intent", "P0", SLA, ARRIVAL + 5000), ready, OVERFLOW_OK,
                "L0", ARRIVAL + 5000)
    assert d3.path is Path.LOCAL
