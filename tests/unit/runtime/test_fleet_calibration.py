"""The fleet's calibration on the handler side (issue 20 item 3): the degradation parameter in
both forms, `functions.runtime.calibration.load_fleet`'s checks, the stage durations the
environment publishes, and a handler that starts from the fleet's numbers or, for every bad
input, from the seeds with one log line."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from collections.abc import Iterator
from contextlib import redirect_stdout
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.runtime import calibration
from functions.runtime.admission.state import DEFAULT_STAGE_P95_MS
from functions.runtime.config import RuntimeConfig
from functions.runtime.contract.levels import Level
from functions.runtime.degradation_level import DegradationLevelReader, parse_published
from functions.runtime.telemetry import Telemetry
from tests.unit.runtime.test_agent import (  # noqa: F401 - fixtures used by name
    ENDPOINT,
    Built,
    SageMakerStandIn,
    built,
    endpoint,
    env_for,
    orders_agent,
    sagemaker,
)

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
PARAMETER = "/warmstart/orders/degradation-level"


def fleet_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1, "agent": "orders-fn:live", "memory_mb": 2048,
        "machine": "fleet of orders-fn:live, CloudWatch p95 over 60 min",
        "measured_at": (NOW - dt.timedelta(minutes=2)).isoformat(),
        "stage_p95_ms": {"toolkit": 41.0, "web": 612.0, "model": 733.0},
        "overflow_p95_ms": 57.0, "source": "fleet"}
    doc.update(changes)
    return doc


# -- the parameter's two forms --------------------------------------------------------------
@pytest.mark.parametrize("raw", ["L2", " l2 ", "L2\n"])
def test_the_plain_level_is_read_as_before(raw: str) -> None:
    assert parse_published(raw) == (Level.L2, None)


def test_the_json_form_carries_the_level_and_the_calibration() -> None:
    level, cal = parse_published(json.dumps({"level": "L1", "calibration": fleet_doc()}))
    assert level == Level.L1 and cal is not None
    assert json.loads(cal)["stage_p95_ms"]["web"] == 612.0
    assert parse_published('{"level": "L0"}') == (Level.L0, None)


@pytest.mark.parametrize("raw", ["{not json", '{"calibration": {}}', '{"level": "L7"}',
                                 '{"level": 1}', "L9"])
def test_a_value_without_a_valid_level_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_published(raw)


class _Ssm:
    def __init__(self, value: str) -> None:
        self.value = value

    def get_parameter(self, Name: str) -> dict[str, Any]:
        return {"Parameter": {"Name": Name, "Value": self.value}}


def test_the_reader_keeps_the_last_reads_calibration() -> None:
    ssm = _Ssm(json.dumps({"level": "L1", "calibration": fleet_doc()}))
    reader = DegradationLevelReader(PARAMETER, client=ssm)
    assert reader.refresh() == Level.L1 and reader.calibration is not None
    ssm.value = "L0"  # the warmer went back to the plain form
    assert reader.refresh() == Level.L0 and reader.calibration is None


def test_a_malformed_level_in_the_json_form_keeps_the_last_level_and_calibration(
        caplog: pytest.LogCaptureFixture) -> None:
    ssm = _Ssm(json.dumps({"level": "L1", "calibration": fleet_doc()}))
    reader = DegradationLevelReader(PARAMETER, client=ssm)
    reader.refresh()
    ssm.value = '{"level": "L9"'
    with caplog.at_level(logging.WARNING, logger="warmstart.runtime"):
        assert reader.refresh() == Level.L1
    assert reader.calibration is not None
    assert any("bad_request" in r.getMessage() for r in caplog.records)


# -- load_fleet: every bad input -------------------------------------------------------------
def test_a_fresh_fleet_calibration_of_this_memory_size_is_used() -> None:
    cal, line = calibration.load_fleet(json.dumps(fleet_doc()), memory_mb=2048, now=NOW)
    assert cal is not None and cal.stage_p95_ms["model"] == 733.0 and cal.overflow_p95_ms == 57.0
    assert "fleet of orders-fn:live" in line


@pytest.mark.parametrize(("doc", "tag", "detail"), [
    ("{not json", "calibration_invalid", "not JSON"),
    (json.dumps(fleet_doc(stage_p95_ms={"web": "slow"})), "calibration_invalid",
     "stage_p95_ms.web must be"),
    (json.dumps(fleet_doc(version=2)), "calibration_invalid", "version must be 1"),
    (json.dumps(fleet_doc(measured_at=(NOW - dt.timedelta(minutes=16)).isoformat())),
     "calibration_stale", "16 min ago (more than 15)"),
    (json.dumps(fleet_doc(memory_mb=1024)), "calibration_mismatch",
     "measured at 1024 MB, this function has 2048 MB"),
    (json.dumps(fleet_doc(measured_at=(NOW + dt.timedelta(days=3)).isoformat())),
     "calibration_invalid", "in the future"),
])
def test_an_unusable_fleet_calibration_is_ignored_and_says_why(doc: str, tag: str,
                                                               detail: str) -> None:
    cal, line = calibration.load_fleet(doc, memory_mb=2048, now=NOW)
    assert cal is None and line.startswith(f"{tag}:") and detail in line, line
    assert "fleet calibration" in line


def test_the_fleet_limit_is_fifteen_minutes() -> None:
    assert calibration.FLEET_MAX_AGE_S == 900.0
    edge = fleet_doc(measured_at=(NOW - dt.timedelta(minutes=14, seconds=59)).isoformat())
    assert calibration.load_fleet(json.dumps(edge), memory_mb=2048, now=NOW)[0] is not None


# -- what an environment publishes -----------------------------------------------------------
def _emf(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def test_stage_durations_are_emf_per_stage_under_function_alias_memory_and_stage() -> None:
    telemetry = Telemetry(RuntimeConfig(service_name="orders", metrics_namespace="Warmstart"))
    telemetry.load()
    assert telemetry.stage_durations({"web": 1.0}) == 0  # alias unknown: nothing emitted
    assert not telemetry.set_fleet("orders-fn", None, 2048)
    assert telemetry.set_fleet("orders-fn", "live", 2048)
    out = io.StringIO()
    with redirect_stdout(out):
        sent = telemetry.stage_durations({"toolkit": 40.5, "web": 610.0, "bad": float("nan")})
        telemetry.request_done(  # an overflow answer: OverflowLatency under the fleet's set too
            _record("overflow"), status=200, duration_ms=80.0, cold_start=False,
            init_type="on-demand", environment_id="e1", init_duration_ms=None, now_ms=0.0,
            overflow_ms=55.0)
    assert sent == 2
    events = _emf(out.getvalue())
    stages = [e for e in events if "StageDuration" in e]
    assert [(e["stage"], e["StageDuration"]) for e in stages] == [("toolkit", [40.5]), ("web", [610.0])]
    for e in stages:
        assert e["function"] == "orders-fn" and e["alias"] == "live" and e["memory_mb"] == "2048"
        sets = e["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        assert ["function", "alias", "memory_mb", "stage"] in sets
        assert e["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Warmstart"
    latency = [e for e in events if "OverflowLatency" in e]
    assert len(latency) == 1 and latency[0]["OverflowLatency"] == [55.0]
    assert ["function", "alias", "memory_mb"] in latency[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"]


def _record(path: str) -> Any:
    from functions.runtime.telemetry import InvocationRecord

    return InvocationRecord("r1", "POST /orders", path)


# -- a handler starts from the fleet's numbers -----------------------------------------------
@pytest.fixture
def ssm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")


def _env(**extra: str) -> dict[str, str]:
    return env_for("provisioned-concurrency", WARMSTART_DEGRADATION_PARAMETER=PARAMETER,
                   AWS_LAMBDA_FUNCTION_MEMORY_SIZE="2048", AWS_LAMBDA_FUNCTION_NAME="orders-fn",
                   **extra)


def _fresh(**changes: Any) -> dict[str, Any]:
    return fleet_doc(measured_at=dt.datetime.now(dt.UTC).isoformat(), **changes)


def test_a_new_environment_starts_from_the_published_fleet_numbers(
        built: Built, ssm: Any, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811 (the fixture imported above)
    # GIVEN the warmer published the level with the fleet's numbers
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True,
                      Value=json.dumps({"level": "L0", "calibration": _fresh()}))
    agent = orders_agent(built.gate(released=True), stage_p95_ms={"model": 5000.0})
    # WHEN a new environment starts
    with caplog.at_level(logging.INFO, logger="warmstart"):
        handler, _ = built.handler(agent, _env())
    # THEN its admission estimates are the fleet's (over the declared and the seeds)
    assert handler.admission is not None
    assert handler.admission.stage_p95_ms["model"] == 733.0
    assert handler.admission.stage_p95_ms["web"] == 612.0
    assert handler.admission.stage_p95_ms["level"] == DEFAULT_STAGE_P95_MS["level"]
    assert str(handler.current_level()) == "L0"
    assert any("admission takes the fleet's numbers" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("value", "tag"), [
    (lambda: {"level": "L0", "calibration": {"version": 1, "agent": "x"}}, "calibration_invalid"),
    (lambda: {"level": "L0", "calibration": "{broken"}, "calibration_invalid"),
    (lambda: {"level": "L0", "calibration": fleet_doc(
        measured_at=(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).isoformat())},
     "calibration_stale"),
    (lambda: {"level": "L0", "calibration": _fresh(memory_mb=4096)}, "calibration_mismatch"),
])
def test_a_bad_fleet_calibration_leaves_the_seeds_with_one_log_line(
        built: Built, ssm: Any, caplog: pytest.LogCaptureFixture, value: Any, tag: str) -> None:  # noqa: F811 (the fixture imported above)
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True, Value=json.dumps(value()))
    agent = orders_agent(built.gate(released=True), stage_p95_ms={"model": 5000.0})
    with caplog.at_level(logging.WARNING, logger="warmstart"):
        handler, _ = built.handler(agent, _env())
    assert handler.admission is not None
    assert handler.admission.stage_p95_ms == {**DEFAULT_STAGE_P95_MS, "model": 5000.0}
    assert str(handler.current_level()) == "L0"  # the level itself still counts
    lines = [r.getMessage() for r in caplog.records if "fleet calibration" in r.getMessage()]
    assert len(lines) == 1 and f"failure_tag={tag}" in lines[0], lines


def test_the_plain_level_leaves_the_seeds_without_a_line(
        built: Built, ssm: Any, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811 (the fixture imported above)
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True, Value="L1")
    agent = orders_agent(built.gate(released=True), stage_p95_ms={"model": 5000.0})
    with caplog.at_level(logging.INFO, logger="warmstart"):
        handler, _ = built.handler(agent, _env())
    assert handler.admission is not None
    assert handler.admission.stage_p95_ms == {**DEFAULT_STAGE_P95_MS, "model": 5000.0}
    assert str(handler.current_level()) == "L1"
    assert not any("fleet" in r.getMessage() for r in caplog.records)


def test_on_demand_the_fleet_numbers_arrive_before_the_model_stage_ends(
        built: Built, ssm: Any, endpoint: SageMakerStandIn,  # noqa: F811 - the imported fixture
        caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN an on-demand environment that overflows and reads the endpoint's capacity (boto3
    # is loaded in its overflow stage), and the fleet's numbers published with the level
    capacity = "/warmstart/orders/overflow-capacity"
    ssm.put_parameter(Name=capacity, Type="String",
                      Value=json.dumps({"capacity": 1, "state": "in_service", "at": 1.0}))
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True,
                      Value=json.dumps({"level": "L0", "calibration": _fresh()}))
    gate = built.gate()  # the model loader waits on it: the model stage cannot end
    agent = orders_agent(gate, stage_p95_ms={"model": 10_000.0})
    with caplog.at_level(logging.INFO, logger="warmstart"):
        handler, _ = built.handler(agent, env_for(
            WARMSTART_DEGRADATION_PARAMETER=PARAMETER, AWS_LAMBDA_FUNCTION_MEMORY_SIZE="2048",
            WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
            WARMSTART_OVERFLOW_ENDPOINT_URL=endpoint.server.url,
            WARMSTART_OVERFLOW_CAPACITY_PARAMETER=capacity))
        # WHEN its overflow stage is done
        assert handler.preload.wait("overflow", 30)
    # THEN admission already estimates the model (still loading) with the fleet's p95, and the
    # overflow call with the fleet's; the level stage later reads nothing again
    assert not handler.preload.done("model")
    assert handler.admission is not None and handler.admission.stage_p95_ms["model"] == 733.0
    assert handler.overflow is not None and handler.overflow.latency.p95_ms == 57.0
    gate.released.set()
    assert handler.preload.wait_all(30)
    assert handler.level_reader is not None and handler.level_reader.reads == 1


def test_stage_durations_wait_for_the_alias_of_the_first_invocation(
        built: Built, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811 (the fixture imported above)
    # GIVEN an on-demand environment whose preload ended before any invocation
    handler, _ = built.handler(orders_agent(built.gate(released=True)),
                               env_for(AWS_LAMBDA_FUNCTION_MEMORY_SIZE="2048",
                                       AWS_LAMBDA_FUNCTION_NAME="agent"))
    assert handler.preload.wait_all(30)
    handler.preload.thread.join(5)  # type: ignore[union-attr]
    assert not [e for e in _emf(capsys.readouterr().out) if "StageDuration" in e]
    # WHEN the first invocation names its alias (tests.conftest.LambdaContext: agent:live)
    from tests.unit.runtime.test_agent import call

    call(handler, "GET", "/healthz")
    call(handler, "GET", "/healthz")
    # THEN the durations are emitted once, under it
    stages = [e for e in _emf(capsys.readouterr().out) if "StageDuration" in e]
    assert sorted(e["stage"] for e in stages) == ["model", "telemetry", "toolkit", "web"]
    assert {(e["function"], e["alias"], e["memory_mb"]) for e in stages} == {("agent", "live", "2048")}


def test_a_provisioned_environment_reports_no_stage_durations(
        built: Built, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811 (the fixture imported above)
    handler, _ = built.handler(orders_agent(built.gate(released=True)),
                               env_for("provisioned-concurrency",
                                       AWS_LAMBDA_FUNCTION_MEMORY_SIZE="2048",
                                       AWS_LAMBDA_FUNCTION_NAME="agent"))
    from tests.unit.runtime.test_agent import call

    call(handler, "GET", "/healthz")
    assert not [e for e in _emf(capsys.readouterr().out) if "StageDuration" in e]
