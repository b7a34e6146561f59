"""What a fresh execution environment assumes before it measured anything
(`functions.runtime.admission.state`, issue 20 item 2): the toolkit's own stages start from
their measured seeds, the agent's from what it declares, and a stage nobody measured or declared
is assumed to fit with a bounded wait, so a cold request is not degraded at once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from functions.runtime.admission import (
    DEFAULT_DEGRADE_P95_MS,
    DEFAULT_INFER_P95_MS,
    DEFAULT_OVERFLOW_P95_MS,
    HANDLER_POLICY,
    NO_OVERFLOW,
    LatencyTracker,
    ModelState,
    OverflowState,
    Reason,
    RequestInfo,
    decide,
)
from functions.runtime.admission import (
    Path as AdmissionPath,
)
from functions.runtime.admission.state import (
    DEFAULT_STAGE_P95_MS,
    UNKNOWN_STAGE_P95_MS,
    UNKNOWN_STAGE_WAIT_MS,
    Admission,
)
from functions.runtime.contract.levels import Level
from functions.runtime.overflow import DEFAULT_CLIENT_INIT_P95_MS, TIMEOUT_BUCKETS_S

REPO = Path(__file__).resolve().parents[3]
STAGES = ("toolkit", "overflow", "web", "telemetry", "model")


class PreloadAt:
    """A preload frozen at one moment: ``done`` stages finished, the next one running since
    ``running_for_ms``, the rest not started (the clock is ``now_ms``)."""

    def __init__(self, done: int, running_for_ms: float = 0.0, now_ms: float = 10_000.0) -> None:
        self.done, self._now = done, now_ms
        self._progress = []
        for i, name in enumerate(STAGES):
            if i < done:
                self._progress.append((name, 0.0, 1.0))
            elif i == done:
                self._progress.append((name, now_ms - running_for_ms, None))
            else:
                self._progress.append((name, None, None))

    def ready(self, name: str) -> bool:
        return STAGES.index(name) < self.done

    def failed(self, name: str) -> bool:
        return False

    def now_ms(self) -> float:
        return self._now

    def progress(self) -> tuple[tuple[str, float | None, float | None], ...]:
        return tuple(self._progress)


def _cold_decision(admission: Admission, preload: PreloadAt, budget_ms: float,
                   overflow: OverflowState) -> tuple[float, object]:
    env = admission.env_state(preload, "model", "web", LatencyTracker(DEFAULT_INFER_P95_MS))
    request = RequestInfo(route="/v1/intent", tier="P0", sla_ms=budget_ms + HANDLER_POLICY.headroom_ms,
                          arrival_ms=0.0, degradable=True)
    return env.load_remaining_ms, decide(request, env, overflow, Level.L0, 0.0, policy=HANDLER_POLICY)


def test_the_seeds_are_the_toolkits_own_stages_only() -> None:
    # the agent's app and model are the agent's to declare: no toolkit guess stands in for them
    assert set(DEFAULT_STAGE_P95_MS) == {"toolkit", "overflow", "telemetry", "level"}
    assert DEFAULT_STAGE_P95_MS["overflow"] == DEFAULT_CLIENT_INIT_P95_MS
    assert UNKNOWN_STAGE_P95_MS == 0.0
    # the call's own seed is the least budget the client gives a call
    assert DEFAULT_OVERFLOW_P95_MS == TIMEOUT_BUCKETS_S[0] * 1000.0


def test_the_overflow_client_seed_covers_what_the_awscrt_client_measured() -> None:
    """The seed comes from bench/results/overflow_client.json (its docstring says so): at least
    the nearest-rank p95 of the awscrt client's import + creation there, and below boto3's."""
    doc = json.loads((REPO / "bench/results/overflow_client.json").read_text())

    def p95(kind: str) -> float:
        values = sorted(s["client_ms"] for s in doc["samples"][kind])
        return values[math.ceil(0.95 * len(values)) - 1]

    assert p95("awscrt") <= DEFAULT_CLIENT_INIT_P95_MS < p95("boto3")


def test_an_unknown_stage_is_not_waited_for_when_the_overflow_can_answer_in_full() -> None:
    # GIVEN a fresh environment of an agent that declared nothing, its preload in the web
    # stage, a usable endpoint whose call was never measured, SLA budget 900 ms
    admission = Admission(level=lambda: Level.L0)
    overflow = OverflowState(configured=True)
    remaining, decision = _cold_decision(admission, PreloadAt(done=2, running_for_ms=50.0), 900.0,
                                         overflow)
    # THEN only the toolkit's known telemetry stage counts; web and model are assumed to fit
    # (no degraded answer for them)...
    assert remaining == DEFAULT_STAGE_P95_MS["telemetry"]
    assert UNKNOWN_STAGE_WAIT_MS == 0.0
    # ...but nobody can say how long they take, so the request does not wait for them: it
    # overflows at once (a full answer), with the degraded answer kept in reserve
    assert decision.path is AdmissionPath.OVERFLOW and decision.reason is Reason.OVERFLOW_FITS
    assert decision.limit_ms == 900.0 - DEFAULT_DEGRADE_P95_MS


def test_an_unknown_stage_that_finished_no_longer_holds_the_request_back() -> None:
    # GIVEN an agent that declared its model but not its app, once the app (web) has finished
    admission = Admission(level=lambda: Level.L0, stage_p95_ms={"model": 200.0})
    overflow = OverflowState(configured=True)
    remaining, decision = _cold_decision(admission, PreloadAt(done=3), 900.0, overflow)
    # THEN only known stages are left (telemetry, the declared model): the request waits for
    # them (the fallback chain kept) and answers locally
    assert remaining == DEFAULT_STAGE_P95_MS["telemetry"] + 200.0
    assert decision.path is AdmissionPath.LOCAL and decision.reason is Reason.LOCAL_AFTER_LOAD
    assert decision.limit_ms == pytest.approx(
        900.0 - DEFAULT_INFER_P95_MS - DEFAULT_OVERFLOW_P95_MS - DEFAULT_DEGRADE_P95_MS)
    # while the app was still running, the same request would not have waited
    _, before = _cold_decision(admission, PreloadAt(done=2), 900.0, overflow)
    assert before.path is AdmissionPath.OVERFLOW


def test_without_overflow_the_wait_for_an_unknown_stage_is_the_whole_budget() -> None:
    # GIVEN no overflow endpoint: the degraded answer is the only fallback
    admission = Admission(level=lambda: Level.L0)
    _, decision = _cold_decision(admission, PreloadAt(done=2), 900.0, NO_OVERFLOW)
    # THEN waiting is the only way to a full answer: as long as the degraded reserve allows
    assert decision.path is AdmissionPath.LOCAL
    assert decision.limit_ms == 900.0 - DEFAULT_INFER_P95_MS - DEFAULT_DEGRADE_P95_MS


def test_known_stages_leave_the_wait_unbounded_as_before() -> None:
    admission = Admission(level=lambda: Level.L0, stage_p95_ms={"web": 100.0, "model": 200.0})
    env = admission.env_state(PreloadAt(done=2), "model", "web", LatencyTracker(50.0))
    assert env.wait_cap_ms == math.inf
    unknown = Admission(level=lambda: Level.L0).env_state(PreloadAt(done=2), "model", "web",
                                                         LatencyTracker(50.0))
    assert unknown.wait_cap_ms == UNKNOWN_STAGE_WAIT_MS == 0.0


def test_a_declared_slow_stage_sends_the_cold_request_to_overflow() -> None:
    # GIVEN the agent declared its model's p95 (Agent(stage_p95_ms=...)), too slow for the SLA
    admission = Admission(level=lambda: Level.L0, stage_p95_ms={"web": 700.0, "model": 1100.0})
    overflow = OverflowState(configured=True)
    remaining, decision = _cold_decision(admission, PreloadAt(done=2), 900.0, overflow)
    assert remaining == 700.0 + DEFAULT_STAGE_P95_MS["telemetry"] + 1100.0
    # THEN the cold request overflows at once, with the degraded answer kept in reserve
    assert decision.path is AdmissionPath.OVERFLOW and decision.reason is Reason.OVERFLOW_FITS
    assert decision.limit_ms == 900.0 - DEFAULT_DEGRADE_P95_MS


def test_a_fresh_client_without_a_calibration_overflows_at_sla_500() -> None:
    """The case issue 20 reported: every cold first request degraded under the seeds."""
    # GIVEN the preload just started the overflow stage (awscrt client), the agent's model
    # declared slow, 400 ms of budget left (SLA 500 less the handler headroom)
    admission = Admission(level=lambda: Level.L0, stage_p95_ms={"model": 1100.0})
    overflow = OverflowState(configured=True,
                             latency_p95_ms=DEFAULT_OVERFLOW_P95_MS + DEFAULT_CLIENT_INIT_P95_MS)
    _, decision = _cold_decision(admission, PreloadAt(done=1), 400.0, overflow)
    # THEN it overflows (before: 300 + 800 ms of seeds left only the degraded answer)
    assert decision.path is AdmissionPath.OVERFLOW
    old = OverflowState(configured=True, latency_p95_ms=300.0 + 800.0)
    assert _cold_decision(admission, PreloadAt(done=1), 400.0, old)[1].path is AdmissionPath.DEGRADE


def test_a_measured_stage_replaces_the_assumption() -> None:
    admission = Admission(level=lambda: Level.L0, stage_p95_ms={"model": 5000.0})
    env = admission.env_state(PreloadAt(done=4), "model", "web", LatencyTracker(50.0))
    assert env.model_state is ModelState.LOADING and env.load_remaining_ms == 5000.0
