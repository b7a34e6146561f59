"""Failure accounting of a replay run (``infra.replay.summary.summarize``): failed answers are
late + degraded + shed + errors; the tail (work alone over the SLA) is apart."""

from __future__ import annotations

from infra.replay.client import ClientRecord
from infra.replay.summary import Prices, summarize, table

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
    text = table([s])
    assert "failed answers (late + degraded + shed + errors)" in text
    assert "tail: work alone over the SLA (apart)" in text
    assert "answered after 2,000 ms" in text


def test_a_degraded_tail_request_is_still_a_failed_answer() -> None:
    s = summarize("on", [_record(0, 50.0, path="degraded", tool_ms=5_000.0)], None, [],
                  memory_mb=1024, sla_ms=2_000.0, time_scale=1.0, prices=PRICES,
                  gpu_endpoint_up=False, slice_minutes=1)
    assert (s.failed_answers, s.tail, s.late) == (1, 1, 0)
