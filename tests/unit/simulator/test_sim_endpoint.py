"""The shared GPU overflow endpoint in the simulator: planned capacity, provisioning, queue."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import TRACE_DIR
from warmers.plan.endpoint import AgentDemand
from warmers.plan.policy import PlannerConfig
from warmers.simulator.calibration import Calibration, Timing
from warmers.simulator.controls import DEGRADED
from warmers.simulator.endpoint import EndpointModel, plan_capacity, serve_overflow
from warmers.simulator.run import run_simulation
from warmers.simulator.trace import MINUTE_MS, load_trace
from warmers.simulator.warmstart_policy import WarmstartPolicy, warmstart_variants


@pytest.fixture(scope="module")
def small():  # type: ignore[no-untyped-def]
    trace = load_trace(TRACE_DIR)
    return replace(trace.select(list(range(8))), counts=trace.counts[:8, :90])


@pytest.fixture
def slow(calibration: Calibration) -> Calibration:
    # init p95 2.5 s > SLA 2 s: admission overflows the cold starts it can
    return replace(calibration, init_ms=Timing(2400.0, 2500.0), overflow_ms=Timing(40.0, 60.0),
                   toolkit_init_ms=Timing(20.0, 30.0), degraded_ms=Timing(1.0, 2.0))


def _cols(send_ms: list[float], hold_ms: float = 100.0) -> dict[str, np.ndarray]:
    n = len(send_ms)
    return {"send_ms": np.asarray(send_ms), "hold_ms": np.full(n, hold_ms),
            "latency_ms": np.full(n, 150.0), "fallback_ms": np.full(n, 3.0),
            "fallback_path": np.full(n, DEGRADED, dtype=np.int8), "sla_ms": np.full(n, 2000.0),
            "tail": np.zeros(n, dtype=bool), "function_id": np.full(n, "f:live", dtype=object)}


def test_a_full_endpoint_queues_fifo_and_none_in_service_falls_back() -> None:
    timeline = plan_capacity(EndpointModel(mode="always_on", always_on_instances=1), {}, {}, {},
                             PlannerConfig(), n_minutes=2, plan_every_min=1, window_min=1)
    # one slot: three requests at once wait 0, 100 and 200 ms; a later one finds it free
    served = serve_overflow(_cols([0.0, 0.0, 0.0, 1_000.0]), timeline, concurrent_requests_per_instance=1)
    assert served.wait_ms.tolist() == [0.0, 100.0, 200.0, 0.0]
    assert served.latency_ms.tolist() == [150.0, 250.0, 350.0, 150.0]
    assert not served.no_capacity.any()
    # two slots: the third waits for the first to finish
    two = serve_overflow(_cols([0.0, 0.0, 0.0]), timeline, concurrent_requests_per_instance=2)
    assert two.wait_ms.tolist() == [0.0, 0.0, 100.0]
    # no instance: every request gets its fallback (here degraded, 3 ms)
    none = plan_capacity(EndpointModel(mode="always_on", always_on_instances=0), {}, {}, {},
                         PlannerConfig(), n_minutes=2, plan_every_min=1, window_min=1)
    out = serve_overflow(_cols([0.0, MINUTE_MS + 1]), none, concurrent_requests_per_instance=4)
    assert out.no_capacity.all() and out.latency_ms.tolist() == [3.0, 3.0]


def _demand(new: int) -> AgentDemand:
    return AgentDemand(key="f:live", peak=new, warm=0, new_environments=new, chance=1.0)


def test_planned_capacity_is_in_service_after_the_provisioning_delay_and_billed_from_the_ask() -> None:
    # 200 new 10-GB environments: provisioned concurrency for them ($30/h) costs more than
    # the 50 instances at $0.5/h that would answer them (4 at once each); the cap holds 4
    model = EndpointModel(mode="planned", instance_usd_per_hour=0.5, cap=4,
                          provisioning_delay_s=300.0)
    demands = {m: {"f:live": _demand(200)} for m in range(0, 30, 5)}
    t = plan_capacity(model, demands, {"f:live": "provisioned"}, {"f:live": 10_240},
                      PlannerConfig(), n_minutes=30, plan_every_min=5, window_min=5)
    assert all(p.pays for p in t.plans) and t.wanted.tolist() == [4] * 30
    assert t.in_service.tolist() == [0] * 5 + [4] * 25  # 5 minutes provisioning
    assert t.instance_hours == pytest.approx(4 * 30 / 60)  # billed while provisioning too
    # the same cold starts of a 128-MB function: PC ($0.38/h) is cheaper, the endpoint does
    # not pay
    cheap = plan_capacity(model, demands, {"f:live": "provisioned"}, {"f:live": 128},
                          PlannerConfig(), n_minutes=30, plan_every_min=5, window_min=5)
    assert not any(p.pays for p in cheap.plans) and cheap.wanted.max() == 0
    assert "does not pay" in cheap.plans[0].reason


def test_an_unlimited_always_on_endpoint_counts_as_the_engine_does(small, slow: Calibration) -> None:  # type: ignore[no-untyped-def]
    huge = EndpointModel(mode="always_on", concurrent_requests_per_instance=10**6,
                         instance_usd_per_hour=2.0)
    res = run_simulation(small, [WarmstartPolicy(name="modelled", endpoint=huge),
                                 WarmstartPolicy(name="engine only")], slow)
    a, b = res.by_name("modelled"), res.by_name("engine only")
    assert a.overflowed > 0
    for attr in ("requests", "cold_starts", "failed_answers", "shed", "tail"):
        assert getattr(a, attr) == getattr(b, attr), attr
    # no queue: an overflow answer later than the SLA (the engine's late one) is the
    # runtime's overflow timeout, answered degraded at the deadline
    timed_out = a.endpoint["timed_out"]
    assert a.overflowed == b.overflowed - timed_out
    assert (a.late, a.degraded) == (b.late - timed_out, b.degraded + timed_out)
    assert a.endpoint["queued"] == 0
    assert a.endpoint_usd == pytest.approx(2.0 * 90 / 60) and b.endpoint_usd == 0.0
    rows = {r.function_id: r for r in res.rows if r.policy == "engine only"}
    for r in (r for r in res.rows if r.policy == "modelled"):
        other = rows[r.function_id]
        # (a timed-out request moves from overflowed and late to degraded)
        assert (r.failed_answers, r.overflowed - r.cold_breaches, r.degraded + r.cold_breaches) \
            == (other.failed_answers, other.overflowed - other.cold_breaches,
                other.degraded + other.cold_breaches)


def test_an_endpoint_that_never_has_capacity_gets_the_no_overflow_outcomes(small, slow: Calibration) -> None:  # type: ignore[no-untyped-def]
    never = EndpointModel(mode="planned", cap=0)
    res = run_simulation(small, [WarmstartPolicy(name="cap 0", endpoint=never),
                                 WarmstartPolicy(name="unlimited"),
                                 WarmstartPolicy(name="no overflow", overflow=False)], slow)
    zero, unlimited, none = (res.by_name(n) for n in ("cap 0", "unlimited", "no overflow"))
    assert unlimited.overflowed > 0
    assert zero.overflowed == 0 and zero.endpoint_usd == 0.0
    assert zero.endpoint["sent_without_capacity"] == unlimited.overflowed
    # each such request got what admission decides without overflow (degraded, or local
    # when the model is ready in time): the no-overflow policy's failures on these requests
    assert zero.failed_answers > unlimited.failed_answers
    assert zero.degraded + zero.shed == pytest.approx(none.degraded + none.shed, rel=0.05)


def test_the_variants_share_one_warmer_run_and_only_the_always_on_one_pays_by_the_hour(small, slow: Calibration) -> None:  # type: ignore[no-untyped-def]
    planned, always, _none = warmstart_variants(15, strategy="provisioned")
    res = run_simulation(small, [planned, always], slow)
    p, a = res.by_name("warmstart"), res.by_name("warmstart, always-on endpoint")
    assert a.endpoint["mode"] == "always_on" and p.endpoint["mode"] == "planned"
    assert a.endpoint["instance_hours"] == pytest.approx(90 / 60)
    assert p.endpoint["plans"] == 6  # a warmer run every 15 of the 90 minutes
    # the same engine run: every request admission overflowed was sent, with or without capacity
    assert p.overflowed + p.endpoint["sent_without_capacity"] == \
        a.overflowed + a.endpoint["sent_without_capacity"] > 0
    assert (p.cold_starts, p.requests) == (a.cold_starts, a.requests)


def test_the_calibrated_endpoint_concurrency_is_used_unless_configured(small, slow: Calibration) -> None:  # type: ignore[no-untyped-def]
    measured = replace(slow, endpoint_concurrency=1)
    res = run_simulation(small, [
        WarmstartPolicy(name="measured", endpoint=EndpointModel(mode="always_on")),
        WarmstartPolicy(name="configured",
                        endpoint=EndpointModel(mode="always_on", concurrent_requests_per_instance=64)),
    ], measured)
    one, many = res.by_name("measured"), res.by_name("configured")
    assert one.endpoint["concurrent_requests_per_instance"] == 1
    assert many.endpoint["concurrent_requests_per_instance"] == 64
    assert one.endpoint["queued"] >= many.endpoint["queued"] == 0
    # neither measured nor configured: the planner's default
    default = run_simulation(small, [WarmstartPolicy(endpoint=EndpointModel(mode="always_on"))], slow)
    assert default.by_name("warmstart").endpoint["concurrent_requests_per_instance"] == 4


def test_the_warmer_pays_for_its_cloudwatch_reads_and_a_baseline_does_not(small, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    from warmers.cloudwatch import QUERIES
    from warmers.simulator.constants import SimulatorPrices
    from warmers.simulator.policies import KeepAlive

    res = run_simulation(small, [KeepAlive(10), WarmstartPolicy(plan_every_min=15)], calibration)
    ws, base = res.by_name("warmstart"), res.by_name("on-demand, keep-alive 10 min")
    # 8 functions x 6 warmer runs (every 15 of 90 minutes) x 3 metrics (concurrency,
    # invocations, duration: what the planner reads)
    assert [q[1] for q in QUERIES] == ["ConcurrentExecutions", "Invocations", "Duration"]
    assert ws.warmer_usd == pytest.approx(8 * 6 * 3 * SimulatorPrices().get_metric_data_metric_usd)
    assert ws.total_usd == pytest.approx(ws.lambda_usd + ws.endpoint_usd + ws.warmer_usd)
    assert base.warmer_usd == 0.0


def _guarded(**kw: object) -> EndpointModel:
    base: dict[str, object] = {"mode": "planned", "instance_usd_per_hour": 0.5, "cap": 4,
                               "provisioning_delay_s": 300.0, "failed_answer_usd": None}
    return EndpointModel(**(base | kw))  # type: ignore[arg-type]


def _every_minute(n_minutes: int, latency_ms: float) -> dict[str, np.ndarray]:
    cols = _cols([m * MINUTE_MS + 30_000.0 for m in range(n_minutes)])
    cols["latency_ms"] = np.full(n_minutes, latency_ms)
    return cols


def test_an_endpoint_that_answers_nothing_is_scaled_in_by_the_spend_guard() -> None:
    # GIVEN 200 cold starts forecast at every run (the endpoint pays for its cap, 4 x $0.5/h)
    # and one overflow request a minute that the endpoint answers after the SLA (5 s > 2 s)
    demands = {m: {"f:live": _demand(200)} for m in range(0, 180, 5)}
    cols = _every_minute(180, latency_ms=5_000.0)
    t = plan_capacity(_guarded(), demands, {"f:live": "provisioned"}, {"f:live": 10_240},
                      PlannerConfig(), n_minutes=180, plan_every_min=5, window_min=5,
                      columns=cols, concurrent_requests_per_instance=4)
    # THEN after 15 minutes the window holds one instance-hour ($0.5) and no answer in time:
    # the guard scales in to 0 and holds it one window (60 min), then the planner buys again
    assert t.wanted[:15].tolist() == [4] * 15
    assert t.wanted[15:75].tolist() == [0] * 60
    assert t.wanted[75:90].tolist() == [4] * 15 and t.wanted[90:150].max() == 0
    guarded = [p for p in t.plans if p.spend_guard_since_s is not None]
    assert guarded[0].issued_at_s == 15 * 60.0 and guarded[0].reason.startswith("spend guard")
    assert t.instance_hours == pytest.approx(4 * (15 + 15 + 15) / 60)
    assert t.served is not None and t.served.no_capacity[:5].all()  # provisioning
    # the same endpoint answering in time (150 ms) keeps its capacity
    ok = plan_capacity(_guarded(), demands, {"f:live": "provisioned"}, {"f:live": 10_240},
                       PlannerConfig(), n_minutes=180, plan_every_min=5, window_min=5,
                       columns=_every_minute(180, latency_ms=150.0),
                       concurrent_requests_per_instance=4)
    assert ok.wanted.tolist() == [4] * 180
    assert all(p.answered_in_window for p in ok.plans[2:])  # after the provisioning


def test_served_between_the_plans_is_served_at_once_when_the_guard_never_acts() -> None:
    # GIVEN a bursty demand (scale-outs and scale-ins) and requests queueing on the endpoint
    rng = np.random.default_rng(7)
    demands = {m: {"f:live": _demand(int(rng.integers(0, 24)))} for m in range(0, 240, 5)}
    cols = _cols(sorted(rng.uniform(0, 240 * MINUTE_MS, 3_000).tolist()), hold_ms=4_000.0)
    cols["latency_ms"] = rng.uniform(100.0, 2_500.0, 3_000)
    args = ({"f:live": "provisioned"}, {"f:live": 10_240}, PlannerConfig())
    kw = {"n_minutes": 240, "plan_every_min": 5, "window_min": 5}
    model = _guarded(spend_guard_usd=1e9)  # never reached
    before = plan_capacity(model, demands, *args, **kw)  # plans without answers
    after = plan_capacity(model, demands, *args, **kw, columns=cols,
                          concurrent_requests_per_instance=2)
    # THEN the same capacity, and the outcomes of one pass over the final timeline
    assert after.wanted.tolist() == before.wanted.tolist()
    assert after.in_service.tolist() == before.in_service.tolist()
    assert 0 < before.in_service.max() and (before.in_service == 0).any()
    once = serve_overflow(cols, before, 2)
    assert after.served is not None
    assert np.array_equal(after.served.no_capacity, once.no_capacity)
    assert np.array_equal(after.served.wait_ms, once.wait_ms) and once.wait_ms.max() > 0
    assert np.array_equal(after.served.latency_ms, once.latency_ms)


def test_a_scale_out_that_never_completes_stops_being_paid_for() -> None:
    # GIVEN an endpoint whose instances never come into service (provisioning longer than the
    # trace): every overflow request gets its fallback while the capacity asked for is billed
    demands = {m: {"f:live": _demand(200)} for m in range(0, 240, 5)}
    cols = _every_minute(240, latency_ms=150.0)
    args = ({"f:live": "provisioned"}, {"f:live": 10_240}, PlannerConfig())
    kw = {"n_minutes": 240, "plan_every_min": 5, "window_min": 5, "columns": cols,
          "concurrent_requests_per_instance": 4}
    never = _guarded(provisioning_delay_s=10**6)
    guarded = plan_capacity(never, demands, *args, **kw)
    unguarded = plan_capacity(replace(never, spend_guard_usd=1e9), demands, *args, **kw)
    assert guarded.in_service.max() == unguarded.in_service.max() == 0
    # THEN the guard pays 4 instances for 15 minutes of every 75 (one instance-hour, then the
    # hold of one window) instead of all along, and no answer is lost (there was none)
    assert unguarded.instance_hours == pytest.approx(4 * 240 / 60)
    assert guarded.wanted[:90].tolist() == [4] * 15 + [0] * 60 + [4] * 15
    assert guarded.instance_hours == pytest.approx(4 * (4 * 15) / 60)
    assert guarded.served is not None and unguarded.served is not None
    assert guarded.served.no_capacity.all() and unguarded.served.no_capacity.all()
    assert not any(p.spend_guard_since_s for p in unguarded.plans)
    assert guarded.plans[3].reason.startswith("spend guard: $0.5000 spent in the last 60 min")


def test_the_simulator_reports_the_plans_the_guard_scaled_in(small, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    res = run_simulation(small, [WarmstartPolicy(endpoint=EndpointModel(mode="planned"))],
                         calibration)
    assert res.by_name("warmstart").endpoint["plans_spend_guarded"] == 0
