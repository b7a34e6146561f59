"""Failure accounting of a replay run (``infra.replay.summary.summarize``): failed answers are
late + degraded + shed + errors; the tail (work alone over the SLA) is apart."""

from __future__ import annotations

import math

import pytest

from infra.replay.client import ClientRecord
from infra.replay.observe import InvocationObservation, StateSample
from infra.replay.summary import Prices, summarize, summary_table

PRICES = Prices(on_demand_gb_s=1.6667e-5, pc_configured_gb_s=4.1667e-6, pc_duration_gb_s=9.7222e-6,
                request=2e-7, gpu_instance_hour=None, gpu_instance_type=None)


def _record(i: int, latency_ms: float, status: int = 200, path: str = "local",
            tool_ms: float = 100.0, degraded_body: bool = False) -> ClientRecord:
    return ClientRecord(i, 0.0, 0.0, latency_ms, status, path, {}, f"r{i}", tool_ms,
                        degraded_body=degraded_body)


def test_failed_answers_count_late_degraded_shed_and_errors_but_not_the_tail() -> None:
    records = [
        _record(0, 300.0),                                   # on time
        _record(1, 2_500.0),                                 # late: its work met the SLA
        _record(2, 2_600.0, tool_ms=2_400.0),                # tail: work alone over the SLA
        _record(3, 90.0, path="degraded"),                   # degraded answer
        _record(4, 80.0, path="local", degraded_body=True),  # degraded, said in the body
        _record(5, 5.0, status=503, path="shed"),            # shed with Retry-After
        _record(6, 40.0, status=500),                        # server error
        _record(7, float("nan"), status=0),                  # no answer
        _record(8, 2_900.0, path="overflow", tool_ms=2_400.0),  # tail, overflowed, late
    ]
    s = summarize("on", records, None, [], memory_mb=1024, sla_ms=2_000.0, time_scale=1.0,
                  prices=PRICES, gpu_endpoint_up=False, slice_minutes=1)
    assert (s.late, s.degraded, s.shed, s.errors) == (1, 2, 1, 2)
    assert s.failed_answers == 1 + 2 + 1 + 2
    assert s.tail == 2  # records 2 and 8: the trace's, not a failure of the run
    assert s.sla_breaches == 1 + 1 + 1 + 2  # late answers (tail's included) and errors
    text = summary_table([s])
    assert "failed answers (late + degraded + shed + errors)" in text
    assert "tail: work alone over the SLA (apart)" in text
    assert "answered after 2,000 ms" in text


def test_a_degraded_tail_request_is_still_a_failed_answer() -> None:
    s = summarize("on", [_record(0, 50.0, path="degraded", tool_ms=5_000.0)], None, [],
                  memory_mb=1024, sla_ms=2_000.0, time_scale=1.0, prices=PRICES,
                  gpu_endpoint_up=False, slice_minutes=1)
    assert (s.failed_answers, s.tail, s.late) == (1, 1, 0)


def _obs(rid: str, *, cold: bool, init_type: str = "on-demand",
         billed_ms: float = 1_000.0) -> InvocationObservation:
    return InvocationObservation(rid, cold, init_type, billed_ms, billed_ms, 500.0 if cold else None,
                                 None, 1024, "env", False, None)


def test_overflowed_cold_starts_pc_and_cost_parts_are_rows() -> None:
    records = [
        ClientRecord(0, 0.0, 0.0, 700.0, 200, "overflow", {"overflow": 250.0}, "r0", 100.0),
        ClientRecord(1, 0.0, 0.0, 900.0, 200, "overflow", {"overflow": 350.0}, "r1", 100.0),
        ClientRecord(2, 0.0, 0.0, 400.0, 200, "overflow", {"overflow": 300.0}, "r2", 100.0),
        ClientRecord(3, 0.0, 0.0, 200.0, 200, "local", {}, "r3", 100.0),
    ]
    observations = {"r0": _obs("r0", cold=True), "r1": _obs("r1", cold=True),
                    "r2": _obs("r2", cold=False),
                    "r3": _obs("r3", cold=False, init_type="provisioned-concurrency")}
    # allocated 0 -> 1 -> 2 -> 1 -> 1: 2 at most; the warmer's plans 1, 2, 2, 0, 1: raised 3 times
    samples = [StateSample(t, 1, 2, alloc, alloc) for t, alloc in
               ((0.0, 0), (10.0, 1), (20.0, 2), (30.0, 1), (40.0, 1))]
    s = summarize("on", records, observations, samples, memory_mb=1024, sla_ms=2_000.0,
                  time_scale=1.0, prices=PRICES, gpu_endpoint_up=False, slice_minutes=1,
                  planned_pc=[1, 2, 2, 0, 1])
    assert (s.overflowed, s.cold_overflowed) == (3, 2)
    assert s.cold_overflow_p50_ms == 800.0          # the two cold answers, from sending
    assert s.overflow_p50_ms == 700.0               # every overflowed answer
    assert s.overflow_call_p50_ms == 300.0          # every overflow call's Server-Timing
    assert (s.pc_max, s.pc_raises) == (2, 3)
    pc_gb_s = 10.0 * 0 + 10.0 * 1 + 10.0 * 2 + 10.0 * 1  # left Riemann sum, 1 GB
    assert abs(s.pc_usd - (pc_gb_s * PRICES.pc_configured_gb_s + 1.0 * PRICES.pc_duration_gb_s)) < 1e-12
    assert abs(s.ondemand_usd + s.pc_usd - s.lambda_usd) < 1e-12 and s.ondemand_usd > 0
    text = summary_table([s])
    for row in ("cold starts answered by overflow", "overflow call alone p50",
                "overflowed answer p50",
                "provisioned concurrency, most allocated", "provisioned concurrency raised",
                "Lambda USD: requests + on-demand", "Lambda USD: provisioned concurrency",
                "cold starts, warmstart simulate (same slice)"):
        assert row in text


def test_without_overflow_the_overflow_rows_are_empty() -> None:
    s = summarize("off", [_record(0, 300.0)], None, [], memory_mb=1024, sla_ms=2_000.0,
                  time_scale=1.0, prices=PRICES, gpu_endpoint_up=False, slice_minutes=1)
    assert s.cold_overflowed == 0 and s.pc_max == 0 and s.pc_raises == 0 and s.pc_usd == 0.0
    assert math.isnan(s.cold_overflow_p50_ms) and math.isnan(s.overflow_call_p50_ms)
    row = next(line for line in summary_table([s]).splitlines() if line.startswith("overflow call alone"))
    assert row.split()[-1] == "-"  # not measured, not zero


def test_the_planned_endpoint_is_billed_for_its_copies_asked_for_within_the_slice() -> None:
    from infra.replay.summary import endpoint_usage

    # GIVEN a copy asked for 30 real s before the slice (time scale 10: 5 trace min), in
    # service 60 real s later, scaled in 90 real s into a 120 s slice
    t0 = 1_000.0
    history = [{"at": t0 - 30, "desired": 1, "in_service": 0},
               {"at": t0 + 30, "desired": 1, "in_service": 1},
               {"at": t0 + 90, "desired": 0, "in_service": 0}]
    use = endpoint_usage(history, t0, t0 + 120, 10.0,
                         published=[(-300.0, "provisioning", 0), (360.0, "in_service", 1)])
    # THEN billed only inside the slice: 90 real s x 10 = 900 trace s = 0.25 copy-hours
    assert math.isclose(use.copy_hours, 0.25)
    assert use.max_in_service == 1 and math.isclose(use.ordered_at_min, -5.0)
    assert math.isclose(use.in_service_at_min, 5.0)
    assert math.isclose(use.published_in_service_at_min, 6.0)
    prices = Prices(on_demand_gb_s=1.6667e-5, pc_configured_gb_s=4.1667e-6,
                    pc_duration_gb_s=9.7222e-6, request=2e-7, gpu_instance_hour=1.2,
                    gpu_instance_type="ml.g6.xlarge")
    s = summarize("on", [_record(0, 300.0)], None, [], memory_mb=1024, sla_ms=2000.0,
                  time_scale=10.0, prices=prices, gpu_endpoint_up=True, slice_minutes=20,
                  endpoint=use)
    assert math.isclose(s.gpu_usd, 0.25 * 1.2) and math.isclose(s.gpu_endpoint_hours, 0.25)
    assert s.endpoint_copies_max == 1 and math.isclose(s.endpoint_serving_at_min, 6.0)
    # always on (no planned endpoint): the whole slice
    always = summarize("on", [_record(0, 300.0)], None, [], memory_mb=1024, sla_ms=2000.0,
                       time_scale=10.0, prices=prices, gpu_endpoint_up=True, slice_minutes=20)
    assert math.isclose(always.gpu_usd, 20 / 60 * 1.2) and math.isnan(always.endpoint_copies_max)
    assert "GPU endpoint copies, most in service" in summary_table([s, always])
    never = endpoint_usage([{"at": t0 - 30, "desired": 0, "in_service": 0}], t0, t0 + 60, 10.0)
    assert never.copy_hours == 0.0 and math.isnan(never.ordered_at_min)
    for bad in ([{"at": t0, "desired": "x", "in_service": 0}], [{"desired": 1}]):
        with pytest.raises(ValueError, match="capacity history row"):
            endpoint_usage(bad, t0, t0 + 60, 10.0)
    with pytest.raises(ValueError, match="wall_end >= wall_t0"):
        endpoint_usage([], t0, t0 - 1, 10.0)


def test_outcome_is_what_summarize_counts() -> None:
    from infra.replay.summary import FAILED_OUTCOMES, outcome

    cases = [(_record(0, 300.0), "ok"), (_record(1, 2_500.0), "late"),
             (_record(2, 2_600.0, tool_ms=2_400.0), "tail"),
             (_record(3, 90.0, path="degraded"), "degraded"),
             (_record(4, 80.0, degraded_body=True), "degraded"),
             (_record(5, 5.0, status=503, path="shed"), "shed"),
             (_record(6, 40.0, status=500), "error"), (_record(7, float("nan"), status=0), "error")]
    assert [outcome(r, 2_000.0) for r, _ in cases] == [want for _, want in cases]
    s = summarize("on", [r for r, _ in cases], None, [], memory_mb=1024, sla_ms=2_000.0,
                  time_scale=1.0, prices=PRICES, gpu_endpoint_up=False, slice_minutes=1)
    assert s.failed_answers == sum(want in FAILED_OUTCOMES for _, want in cases) == 6


def _cost(failed: int, usd: float) -> object:
    import dataclasses

    s = summarize("x", [_record(0, 300.0)], None, [], memory_mb=1024, sla_ms=2_000.0,
                  time_scale=1.0, prices=PRICES, gpu_endpoint_up=False, slice_minutes=1)
    return dataclasses.replace(s, failed_answers=failed, lambda_usd=usd)


@pytest.mark.parametrize(("off", "on", "avoided", "extra", "ratio", "words"), [
    # on paid $0.0513 more and failed 34 fewer: $0.0513 / 34
    ((36, 0.3815), (2, 0.4328), 34, 0.0513, 0.0513 / 34,
     "$0.0015 per avoided failed answer ($0.0513 more for 34 failed answers avoided)"),
    # cheaper and fewer failed: a negative price per avoided failed answer, said as a saving
    ((22, 0.0625), (1, 0.0400), 21, -0.0225, -0.0225 / 21,
     ("nothing paid per avoided failed answer: 'on' avoided 21 failed answers and cost $0.0225 "
      "less (a saving of $0.0011 per avoided failed answer)")),
    ((5, 0.01), (4, 0.02), 1, 0.01, 0.01,
     "$0.0100 per avoided failed answer ($0.0100 more for 1 failed answer avoided)"),
    # none avoided: no ratio (not a division by zero, not infinity)
    ((3, 0.01), (3, 0.02), 0, 0.01, math.nan,
     ("no failed answer avoided, so no USD per avoided failed answer: 'on' failed as many as "
     "'off' and cost $0.0100 more")),
    # more failed: no ratio either, the difference said
    ((2, 0.03), (3, 0.01), -1, -0.02, math.nan,
     ("no USD per avoided failed answer: 'on' failed 1 more answer than 'off' and cost $0.0200 "
     "less")),
])
def test_usd_per_avoided_failed_answer(off: tuple[int, float], on: tuple[int, float],
                                       avoided: int, extra: float, ratio: float,
                                       words: str) -> None:
    from infra.replay.summary import cost_per_avoided

    got = cost_per_avoided(_cost(*off), _cost(*on))  # type: ignore[arg-type]
    assert got.avoided == avoided and math.isclose(got.extra_usd, extra, abs_tol=1e-12)
    assert (math.isnan(got.usd_per_avoided) if math.isnan(ratio)
            else math.isclose(got.usd_per_avoided, ratio))
    assert got.words() == words


def test_snapstart_is_charged_its_cache_over_the_slice_and_each_restore() -> None:
    # GIVEN a 2 GB SnapStart function, 20 trace minutes, 2 restores among 3 requests
    prices = Prices(on_demand_gb_s=0.0, pc_configured_gb_s=0.0, pc_duration_gb_s=0.0, request=0.0,
                    gpu_instance_hour=None, gpu_instance_type=None,
                    snapstart_cache_gb_s=1.5046e-6, snapstart_restore_gb=1.397998e-4)

    def obs(i: int, cold: bool) -> InvocationObservation:
        return InvocationObservation(f"r{i}", cold, "snap-start" if cold else "on-demand", 100.0,
                                     100.0, None, 30.0 if cold else None, 2048, "e", False, None)

    records = [_record(i, 300.0) for i in range(3)]
    observations = {"r0": obs(0, True), "r1": obs(1, True), "r2": obs(2, False)}
    s = summarize("on", records, observations, [], memory_mb=2048, sla_ms=2_000.0,
                  time_scale=10.0, prices=prices, gpu_endpoint_up=False, slice_minutes=20,
                  snap_start=True)
    # THEN cache 1,200 s x 2 GB and 2 restores x 2 GB, in Lambda's USD, apart in the table
    assert s.restores == 2
    assert math.isclose(s.snapstart_usd, 1200 * 2 * 1.5046e-6 + 2 * 2 * 1.397998e-4)
    assert math.isclose(s.lambda_usd, s.snapstart_usd) and s.ondemand_usd == pytest.approx(0.0)
    assert "Lambda USD: SnapStart cache + restores" in summary_table([s])
    # without SnapStart nothing of it
    plain = summarize("on", records, observations, [], memory_mb=2048, sla_ms=2_000.0,
                      time_scale=10.0, prices=prices, gpu_endpoint_up=False, slice_minutes=20)
    assert plain.snapstart_usd == 0.0 and plain.restores == 0


def test_time_to_first_byte_rows_appear_only_when_a_run_streamed() -> None:
    from dataclasses import replace

    buffered = [_record(0, 300.0), _record(1, 400.0)]
    streamed = [replace(_record(0, 500.0), first_byte_ms=40.0, last_byte_ms=480.0),
                replace(_record(1, 520.0), first_byte_ms=60.0, last_byte_ms=500.0),
                _record(2, 300.0)]  # a buffered answer in the same run: not counted
    kwargs = {"memory_mb": 1024, "sla_ms": 2_000.0, "time_scale": 1.0, "prices": PRICES,
                  "gpu_endpoint_up": False, "slice_minutes": 1}
    off = summarize("off", buffered, None, [], **kwargs)  # type: ignore[arg-type]
    on = summarize("on", streamed, None, [], **kwargs)  # type: ignore[arg-type]
    assert off.streamed == 0 and math.isnan(off.ttfb_p50_ms)
    assert on.streamed == 2 and on.ttfb_p50_ms == 50.0 and on.ttfb_p95_ms == pytest.approx(59.0)
    assert "time to first byte" not in summary_table([off])
    lines = summary_table([off, on]).splitlines()
    row = next(line for line in lines if line.startswith("time to first byte p50"))
    assert row.split()[-2:] == ["-", "50"]
    titles = [line.split("  ")[0] for line in lines]
    assert titles.index("latency p99 (ms, real)") + 1 == titles.index("streamed answers (chunked)")
