"""Model loading under Lambda's freeze: hand-computed cases of ``finish_preload``.

Lambda freezes an execution environment when its invocation returns
(https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html): the model of an
environment loads only during its init phase and invocations (their post-response phase
included). ``after`` (the default): an overflowed or degraded cold answer leaves at once and
the environment stays busy, billed, until the model is ready (the toolkit's internal
extension); ``before``: the invocation waits for the model until the SLA deadline less the
admission headroom (``functions/runtime/dispatch.py`` ``_finish_preload``) and answers then.
"""

from __future__ import annotations

import numpy as np
import pytest

from functions.runtime.admission import FINISH_PRELOAD_MARGIN_MS
from tests.unit.simulator.sim_helpers import workload
from warmers.simulator.calibration import Calibration, Timing
from warmers.simulator.constants import BILL_ONDEMAND_INIT, PING_BILLED_MS
from warmers.simulator.controls import DEGRADED, LOCAL, OVERFLOW, SHED, Controls
from warmers.simulator.engine import simulate_function
from warmers.simulator.policies import Observed, PolicyContext
from warmers.simulator.trace import MINUTE_MS
from warmers.simulator.warmstart_policy import WarmstartPolicy

TOOLKIT_MS = 79.0
OVERFLOW_MS = 52.0
DUR_MS = 100.0
SLA_MS = 2000.0
HEADROOM_MS = 100.0
KEEP_ALIVE_MS = 15 * MINUTE_MS


class _Scripted:
    """Admission that answers ``path`` while the model loads, local once it is ready."""

    def __init__(self, path: int) -> None:
        self.path = path
        self.calls: list[tuple[float, float, bool]] = []

    def decide(self, arrival_ms: float, now_ms: float, sla_ms: float, duration_ms: float,
               model_ready_in_ms: float, cold_start: bool) -> int:
        self.calls.append((now_ms - arrival_ms, model_ready_in_ms, cold_start))
        return self.path if cold_start or model_ready_in_ms > 0 else LOCAL


def _controls(load_ms: float, adm: _Scripted, **kw: object) -> Controls:
    kw.setdefault("finish_preload", "before")
    return Controls(
        keep_alive_ms=KEEP_ALIVE_MS, cold_start_ms=load_ms, admission=adm,
        toolkit_init_ms=TOOLKIT_MS, overflow_extra_ms=OVERFLOW_MS, degraded_ms=1.0,
        preload_headroom_ms=HEADROOM_MS, **kw,  # type: ignore[arg-type]
    )


def test_before_an_overflowed_cold_start_returns_when_the_model_is_ready() -> None:
    # init + model load 1,445 ms < deadline - headroom 1,900 ms: the invocation returns with
    # the model loaded at 1,445 ms; the next request (10 min later) is local without admission
    w = workload([0.0, 10 * MINUTE_MS], DUR_MS, n_minutes=11, sla_ms=SLA_MS)
    adm = _Scripted(OVERFLOW)
    res = simulate_function(w, _controls(1445.0, adm))
    assert adm.calls == [(TOOLKIT_MS, 1445.0 - TOOLKIT_MS, True)]
    assert res.paths.tolist() == [OVERFLOW, LOCAL]
    assert res.latencies_ms.tolist() == pytest.approx([1445.0, DUR_MS])
    assert res.breach.tolist() == [False, False]
    assert res.cold_starts == 1
    # billed: init phase = the toolkit's init, the invocation from there until it returned
    assert res.ondemand_busy_ms == pytest.approx(1445.0 - TOOLKIT_MS + DUR_MS)
    assert res.init_billed_ms == pytest.approx(TOOLKIT_MS if BILL_ONDEMAND_INIT else 0.0)
    idle = (10 * MINUTE_MS - 1445.0) + (MINUTE_MS - DUR_MS)
    assert res.idle_env_ms == pytest.approx(idle)


def test_slow_load_freezes_at_the_deadline_and_resumes_in_later_invocations() -> None:
    # load 3,000 ms: the overflowed invocation returns at 2,000 - 100 = 1,900 ms with 1,900 ms
    # of progress; frozen while idle, 1,100 ms are left 10 min later: admission again, the
    # overflowed answer waits 1,100 ms (< 1,900) and returns with the model; then local
    w = workload([0.0, 10 * MINUTE_MS, 20 * MINUTE_MS], DUR_MS, n_minutes=21, sla_ms=SLA_MS)
    adm = _Scripted(OVERFLOW)
    res = simulate_function(w, _controls(3000.0, adm))
    assert adm.calls == [(TOOLKIT_MS, 3000.0 - TOOLKIT_MS, True), (0.0, 1100.0, False)]
    assert res.paths.tolist() == [OVERFLOW, OVERFLOW, LOCAL]
    assert res.latencies_ms.tolist() == pytest.approx([1900.0, 1100.0, DUR_MS])
    assert not res.breach.any()  # within the SLA by construction
    assert res.cold_starts == 1 and res.env_inits == 1
    assert res.ondemand_busy_ms == pytest.approx((1900.0 - TOOLKIT_MS) + 1100.0 + DUR_MS)
    idle = (10 * MINUTE_MS - 1900.0) + (10 * MINUTE_MS - 1100.0) + (MINUTE_MS - DUR_MS)
    assert res.idle_env_ms == pytest.approx(idle)


def test_load_longer_than_two_invocations_stays_frozen_between_them() -> None:
    # load 5,000 ms: 1,900 ms in the first invocation, 1,900 in the second (3,100 left at
    # 10 min), 1,200 left at 20 min: the third waits 1,200 ms; the fourth is local
    arrivals = [0.0, 10 * MINUTE_MS, 20 * MINUTE_MS, 30 * MINUTE_MS]
    w = workload(arrivals, DUR_MS, n_minutes=31, sla_ms=SLA_MS)
    adm = _Scripted(DEGRADED)
    res = simulate_function(w, _controls(5000.0, adm))
    assert [c[1] for c in adm.calls] == pytest.approx([5000.0 - TOOLKIT_MS, 3100.0, 1200.0])
    assert res.paths.tolist() == [DEGRADED, DEGRADED, DEGRADED, LOCAL]
    assert res.latencies_ms.tolist() == pytest.approx([1900.0, 1900.0, 1200.0, DUR_MS])
    assert not res.breach.any()


def test_without_finish_preload_the_model_freezes_with_the_answer() -> None:
    # WARMSTART_FINISH_PRELOAD off: the invocation returns with the overflow answer at
    # 79 + 52 + 100 = 231 ms; 3,000 - 231 = 2,769 ms of load are left 10 min later
    w = workload([0.0, 10 * MINUTE_MS], DUR_MS, n_minutes=11, sla_ms=SLA_MS)
    adm = _Scripted(OVERFLOW)
    res = simulate_function(w, _controls(3000.0, adm, finish_preload="off"))
    assert adm.calls[1] == (0.0, pytest.approx(2769.0), False)
    assert res.latencies_ms.tolist() == pytest.approx([231.0, OVERFLOW_MS + DUR_MS])


def test_late_overflow_answer_is_not_held_longer() -> None:
    # the overflow answer itself ends after the deadline - headroom (79 + 52 + 1,950 =
    # 2,081 ms > 1,900): the invocation returns with it, a breach; 919 ms of load are left
    w = workload([0.0, 10 * MINUTE_MS], 1950.0, n_minutes=11, sla_ms=SLA_MS)
    adm = _Scripted(OVERFLOW)
    res = simulate_function(w, _controls(3000.0, adm))
    assert res.latencies_ms[0] == pytest.approx(2081.0)
    assert bool(res.breach[0])
    assert adm.calls[1] == (0.0, pytest.approx(919.0), False)


def test_shed_cold_start_does_not_wait_and_keeps_the_init_progress() -> None:
    # shed: the 503 leaves after the init phase (79 ms); only that progress counts
    w = workload([0.0, 10 * MINUTE_MS], DUR_MS, n_minutes=11, sla_ms=SLA_MS)
    adm = _Scripted(SHED)
    res = simulate_function(w, _controls(3000.0, adm))
    assert res.latencies_ms[0] == pytest.approx(TOOLKIT_MS)
    assert adm.calls[1] == (0.0, pytest.approx(3000.0 - TOOLKIT_MS), False)


def test_a_warm_ping_advances_a_frozen_load_by_its_hold() -> None:
    # a ping at 5 min runs 1 ms on the environment frozen with 1,100 ms left
    w = workload([0.0, 10 * MINUTE_MS], DUR_MS, n_minutes=11, sla_ms=SLA_MS)
    adm = _Scripted(OVERFLOW)
    ctl = _controls(3000.0, adm, ping_times_ms=np.array([5 * MINUTE_MS]))
    res = simulate_function(w, ctl)
    assert res.pings == 1 and res.env_inits == 1
    assert adm.calls[1] == (0.0, pytest.approx(1100.0 - PING_BILLED_MS), False)


def test_after_the_answer_leaves_at_once_and_the_environment_stays_busy_until_the_model_is_ready(
) -> None:
    # init + model 1,445 ms: the overflow answer leaves at 79 + 52 + 100 = 231 ms; the
    # post-response phase runs (busy, billed) until 1,445 ms; the next request is local
    w = workload([0.0, 10 * MINUTE_MS], DUR_MS, n_minutes=11, sla_ms=SLA_MS)
    adm = _Scripted(OVERFLOW)
    res = simulate_function(w, _controls(1445.0, adm, finish_preload="after"))
    assert res.paths.tolist() == [OVERFLOW, LOCAL]
    assert res.latencies_ms.tolist() == pytest.approx([231.0, DUR_MS])
    assert len(adm.calls) == 1  # the model was ready: no admission on the next request
    assert res.ondemand_busy_ms == pytest.approx(1445.0 - TOOLKIT_MS + DUR_MS)
    idle = (10 * MINUTE_MS - 1445.0) + (MINUTE_MS - DUR_MS)
    assert res.idle_env_ms == pytest.approx(idle)


def test_after_a_request_arriving_during_the_post_response_phase_gets_another_environment() -> None:
    w = workload([0.0, 500.0], DUR_MS, n_minutes=2, sla_ms=SLA_MS)
    adm = _Scripted(OVERFLOW)
    res = simulate_function(w, _controls(1445.0, adm, finish_preload="after"))
    assert res.cold_starts == 2 and res.env_inits == 2  # the first environment was busy


def test_after_the_post_response_phase_ends_at_the_function_timeout() -> None:
    # a 40 s load with a 30 s timeout: billed 30 s after the init phase, 9,921 ms left frozen
    w = workload([0.0, 10 * MINUTE_MS], DUR_MS, n_minutes=11, sla_ms=SLA_MS)
    adm = _Scripted(DEGRADED)
    res = simulate_function(w, _controls(40_000.0, adm, finish_preload="after",
                                         post_response_limit_ms=30_000.0))
    assert res.latencies_ms[0] == pytest.approx(TOOLKIT_MS + 1.0)
    assert adm.calls[1] == (0.0, pytest.approx(40_000.0 - TOOLKIT_MS - 30_000.0), False)


def test_a_bad_finish_preload_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="finish_preload must be 'after', 'before' or 'off'"):
        Controls(keep_alive_ms=0.0, cold_start_ms=0.0, finish_preload="later")
    assert Controls(keep_alive_ms=0.0, cold_start_ms=0.0, finish_preload=True).finish_preload == "before"


def test_negative_preload_headroom_is_rejected() -> None:
    with pytest.raises(ValueError, match="preload_headroom_ms"):
        Controls(keep_alive_ms=0.0, cold_start_ms=0.0, preload_headroom_ms=-1.0)


def test_warmstart_policy_uses_the_handler_headroom_with_the_real_admission() -> None:
    # init p50 3,000 ms (p95 3,100) cannot meet the 2 s SLA: the real admission overflows the
    # first request; with ``before`` its invocation returns at 2,000 - the finish-preload
    # margin (1,800); 5 min later the frozen model has 3,000 - 1,800 = 1,200 ms left, and
    # 1,200 + 100 fits the budget: local
    cal = Calibration(init_ms=Timing(3000.0, 3100.0), restore_ms=Timing(50.0, 80.0),
                      infer_ms=Timing(5.0, 9.0), toolkit_init_ms=Timing(TOOLKIT_MS, 90.0),
                      overflow_ms=Timing(OVERFLOW_MS, 60.0), degraded_ms=Timing(1.0, 2.0))
    w = workload([1000.0, 1000.0 + 5 * MINUTE_MS], DUR_MS, n_minutes=10, sla_ms=SLA_MS)
    policy = WarmstartPolicy(finish_preload="before")
    controls = policy.controls(w, Observed.from_workload(w), PolicyContext(calibration=cal))
    assert controls.finish_preload == "before"
    assert controls.preload_headroom_ms == FINISH_PRELOAD_MARGIN_MS
    res = simulate_function(w, controls)
    deadline_less_headroom = SLA_MS - FINISH_PRELOAD_MARGIN_MS
    assert res.paths.tolist() == [OVERFLOW, LOCAL]
    assert res.latencies_ms.tolist() == pytest.approx(
        [deadline_less_headroom, 3000.0 - deadline_less_headroom + DUR_MS])
    assert not res.breach.any()


def test_warmstart_policy_answers_first_by_default() -> None:
    # the same case with the default ``after``: the overflow answer leaves after the init
    # phase and the overflow call; the model loads after the response; 5 min later: local
    cal = Calibration(init_ms=Timing(3000.0, 3100.0), restore_ms=Timing(50.0, 80.0),
                      infer_ms=Timing(5.0, 9.0), toolkit_init_ms=Timing(TOOLKIT_MS, 90.0),
                      overflow_ms=Timing(OVERFLOW_MS, 60.0), degraded_ms=Timing(1.0, 2.0))
    w = workload([1000.0, 1000.0 + 5 * MINUTE_MS], DUR_MS, n_minutes=10, sla_ms=SLA_MS)
    controls = WarmstartPolicy().controls(w, Observed.from_workload(w), PolicyContext(calibration=cal))
    assert controls.finish_preload == "after"
    res = simulate_function(w, controls)
    assert res.paths.tolist() == [OVERFLOW, LOCAL]
    assert res.latencies_ms[0] < 1000.0 and res.latencies_ms[1] == pytest.approx(DUR_MS)
    assert res.ondemand_busy_ms >= 3000.0 - controls.toolkit_init_ms  # the model load is billed
