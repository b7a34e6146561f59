from __future__ import annotations

import io
import json
import uuid

import pytest

from functions.runtime import telemetry
from functions.runtime.config import RuntimeConfig
from functions.runtime.errors import FailureTag
from functions.runtime.telemetry import InvocationRecord, Telemetry, server_timing


def test_server_timing_orders_contract_names_and_skips_none() -> None:
    header = server_timing({"infer": 2.94, "custom": 1.0, "init": 812.35, "overflow": None, "queue": 0.0})
    assert header == "init;dur=812.4, queue;dur=0.0, infer;dur=2.9, custom;dur=1.0"
    assert server_timing({}) == ""


@pytest.mark.parametrize(("timings", "header"), [
    ({"infer": 2.94, "queue": 0.05}, "queue;dur=0.1, infer;dur=2.9"),  # contract order
    ({"queue": 1.0, "overflow": 47.91}, "queue;dur=1.0, overflow;dur=47.9"),
    ({"infer": 2.0, "init": None}, "infer;dur=2.0"),
    ({"tool": 3.0, "queue": 1.0}, "queue;dur=1.0, tool;dur=3.0"),  # others after the contract's
    ({"zeta": 3.0, "alpha": 1.0}, "zeta;dur=3.0, alpha;dur=1.0"),  # in insertion order
])
def test_server_timing_of_two_entries_as_of_more(timings: dict[str, float | None], header: str) -> None:
    # GIVEN two timings (the warm path's usual pair: queue and infer or tool)
    # THEN the header is the one the same entries give among others (here a None one)
    assert server_timing({**timings, "model": None}) == header
    assert server_timing(timings) == header  # its other names now known tokens
    assert server_timing(timings) == header


@pytest.mark.parametrize(
    ("timings", "message"),
    [({"infer": 1.0, "queue": -1.0}, "must be finite and >= 0"),
     ({"queue": 1.0, "bad name": 1.0}, "not an HTTP token"),
     ({"bad name": 1.0}, "not an HTTP token"), ({"infer": -1.0}, "must be finite and >= 0"),
     ({"infer": float("nan")}, "must be finite and >= 0")],
)
def test_server_timing_rejects_bad_entries(timings: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        server_timing(timings)


def _telemetry() -> tuple[Telemetry, io.StringIO]:
    stream = io.StringIO()
    config = RuntimeConfig(service_name=f"svc-{uuid.uuid4().hex[:8]}", metrics_namespace="WarmstartTest")
    return Telemetry(config, stream=stream), stream


def _done(t: Telemetry, record: InvocationRecord, *, cold: bool = False, now_ms: float = 0.0) -> None:
    t.request_done(
        record, status=200 if record.failure is None else 400, duration_ms=1.5, cold_start=cold,
        init_type="on-demand", environment_id="env-1", init_duration_ms=40.0, now_ms=now_ms,
    )


def _emf(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def test_failure_is_logged_with_its_tag_and_flushed(capsys: pytest.CaptureFixture[str]) -> None:
    t, stream = _telemetry()
    record = InvocationRecord("req-1", "POST /v1/intent", "local")
    record.failure = FailureTag.BAD_REQUEST
    _done(t, record)
    line = json.loads(stream.getvalue().strip())
    assert line["level"] == "WARNING"
    for key, value in {"failure": "bad_request", "cold_start": False, "init_type": "on-demand",
                       "path": "local", "route": "POST /v1/intent", "request_id": "req-1"}.items():
        assert line[key] == value
    (emf,) = _emf(capsys.readouterr().out)
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "WarmstartTest"
    assert emf["path"] == "local" and emf["Requests"] == [1.0]


def test_warm_local_requests_are_buffered_and_flushed_in_one_emf_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN warm, successful local requests
    t, stream = _telemetry()
    for i in range(telemetry.FLUSH_VALUES - 1):
        _done(t, InvocationRecord(f"r{i}", "GET /healthz", "local"), now_ms=float(i))
    # THEN nothing is written yet (INFO level hides the per-request DEBUG line)
    assert stream.getvalue() == ""
    assert _emf(capsys.readouterr().out) == []
    # WHEN the last request of the window arrives, one EMF event counts all of them
    _done(t, InvocationRecord("last", "GET /healthz", "local"), now_ms=100.0)
    (emf,) = _emf(capsys.readouterr().out)
    assert emf["Requests"] == [float(telemetry.FLUSH_VALUES)]


def test_buffer_is_flushed_once_its_oldest_value_is_old(capsys: pytest.CaptureFixture[str]) -> None:
    t, _ = _telemetry()
    _done(t, InvocationRecord("a", "GET /healthz", "local"), now_ms=0.0)
    assert _emf(capsys.readouterr().out) == []
    _done(t, InvocationRecord("b", "GET /healthz", "local"), now_ms=telemetry.FLUSH_AGE_MS)
    (emf,) = _emf(capsys.readouterr().out)
    assert emf["Requests"] == [2.0]


def test_cold_start_emits_cold_start_metrics_and_an_info_line(capsys: pytest.CaptureFixture[str]) -> None:
    t, stream = _telemetry()
    _done(t, InvocationRecord("a", "GET /healthz", "local"), cold=True)
    line = json.loads(stream.getvalue().strip())
    assert line["level"] == "INFO" and line["cold_start"] is True
    emfs = _emf(capsys.readouterr().out)
    cold = [e for e in emfs if "ColdStart" in e]
    assert cold and cold[0]["InitDuration"] == [40.0] and cold[0]["init_type"] == "on-demand"
    assert any(e.get("Requests") == [1.0] for e in emfs)


def test_a_ping_is_logged_but_not_counted_as_a_request(capsys: pytest.CaptureFixture[str]) -> None:
    t, stream = _telemetry()
    t.ping_done(cold_start=True, init_type="on-demand", environment_id="e", held_ms=75.0, ready=True)
    line = json.loads(stream.getvalue().strip())
    assert line["path"] == "ping" and line["cold_start"] is True
    emfs = _emf(capsys.readouterr().out)
    assert all("Requests" not in e for e in emfs)
    assert any("ColdStart" in e for e in emfs)


def test_current_invocation_is_set_and_reset() -> None:
    assert telemetry.current_invocation() is None
    record = InvocationRecord("x")
    token = telemetry.set_current(record)
    assert telemetry.current_invocation() is record
    telemetry.reset_current(token)
    assert telemetry.current_invocation() is None


def _race(t: Telemetry, out: io.StringIO, rounds: int) -> str:
    """A preload thread's stage durations against cold requests, background failures and
    warm flushes on another thread, at once; returns what reached stdout."""
    import contextlib
    import threading

    barrier = threading.Barrier(2)

    def preload() -> None:
        barrier.wait()
        for _ in range(rounds):
            t.stage_durations({"toolkit": 40.0, "web": 600.0})

    def requests() -> None:
        barrier.wait()
        for i in range(rounds):
            record = InvocationRecord(f"r{i}", "POST /v1/intent", "overflow" if i % 2 else "local")
            t.request_done(record, status=200, duration_ms=1.5, cold_start=True,
                           init_type="on-demand", environment_id="env-1", init_duration_ms=40.0,
                           now_ms=float(i), overflow_ms=50.0 if i % 2 else None)
            if i % 7 == 0:
                t.background_failed(FailureTag.APP_ERROR, RuntimeError("store down"),
                                    request_id=f"r{i}", route="POST /v1/feedback")

    with contextlib.redirect_stdout(out):
        threads = [threading.Thread(target=preload), threading.Thread(target=requests)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    return out.getvalue()


def test_emissions_from_two_threads_never_share_an_emf_event_or_a_line() -> None:
    """Powertools' Metrics holds one event at a time: the preload thread's StageDuration and a
    request's ColdStart/OverflowLatency/Requests must each go out in their own event, and every
    physical line must be one JSON document."""
    out = io.StringIO()  # log lines and EMF on one stream, as on Lambda
    t = Telemetry(RuntimeConfig(service_name=f"svc-{uuid.uuid4().hex[:8]}",
                                metrics_namespace="WarmstartTest"), stream=out)
    t.load()
    assert t.set_fleet("agent-fn", "live", 2048)
    text = _race(t, out, 400)
    assert '"request"' in text and "a background task failed" in text
    lines = [line for line in text.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # raises on a line two writers shared
    emf = [e for e in events if "_aws" in e]
    stage = [e for e in emf if "StageDuration" in e]
    assert len(stage) == 800
    for event in emf:
        names = {m["Name"] for m in event["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
        assert names in ({"StageDuration"}, {"ColdStart", "InitDuration"}, {"OverflowLatency"},
                         {"Requests"}, {"BackgroundFailures"}), names
