"""The warmer's side of the fleet calibration (issue 20 item 3): the p95 read
(`warmers.cloudwatch.CloudWatchFleetTimings`), the document (`warmers.level_publisher.
fleet_calibration`) and the publisher's JSON form (`warmers.level_publisher.SsmLevelPublisher`)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from warmers.cloudwatch import FLEET_STAGES, CloudWatchFleetTimings, FleetTimings
from warmers.level_publisher import FLEET_REFRESH_S, SsmLevelPublisher, fleet_calibration
from warmers.ports import MetricsUnavailable

NOW = dt.datetime(2026, 12, 2, 12, 0, 30, tzinfo=dt.UTC).timestamp()
PARAMETER = "/warmstart/orders/degradation-level"


def _result(qid: str, values: list[float]) -> dict[str, Any]:
    ts = [dt.datetime(2026, 12, 2, 11, 0, tzinfo=dt.UTC)] * len(values)
    return {"Id": qid, "Label": qid, "Timestamps": ts, "Values": values, "StatusCode": "Complete"}


def test_one_call_reads_every_stage_and_the_overflow_call_at_p95_over_the_hour() -> None:
    cw = boto3.client("cloudwatch", region_name="us-east-1")
    stub = Stubber(cw)
    expected = {
        "StartTime": dt.datetime(2026, 12, 2, 11, 0, tzinfo=dt.UTC),
        "EndTime": dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC),
        "ScanBy": "TimestampAscending",
        "MetricDataQueries": [
            {"Id": f"stage{i}", "ReturnData": True, "MetricStat": {
                "Metric": {"Namespace": "Warmstart", "MetricName": "StageDuration", "Dimensions": [
                    {"Name": "function", "Value": "orders-fn"}, {"Name": "alias", "Value": "live"},
                    {"Name": "memory_mb", "Value": "2048"}, {"Name": "stage", "Value": stage}]},
                "Period": 3600, "Stat": "p95"}}
            for i, stage in enumerate(FLEET_STAGES)] + [
            {"Id": "overflow", "ReturnData": True, "MetricStat": {
                "Metric": {"Namespace": "Warmstart", "MetricName": "OverflowLatency", "Dimensions": [
                    {"Name": "function", "Value": "orders-fn"}, {"Name": "alias", "Value": "live"},
                    {"Name": "memory_mb", "Value": "2048"}]},
                "Period": 3600, "Stat": "p95"}}],
    }
    # web (stage2) and model (stage4) measured; every other stage answered with no data point
    stub.add_response("get_metric_data", {"MetricDataResults": [
        _result("stage0", []), _result("stage1", []), _result("stage2", [640.0]),
        _result("stage3", []), _result("stage4", [810.5, 790.0]), _result("stage5", []),
        _result("overflow", [61.0])]}, expected)
    fleet = CloudWatchFleetTimings(cw)
    with stub:
        timings = fleet.read("orders-fn", "live", 2048, now_s=NOW)
    stub.assert_no_pending_responses()
    # a stage with no data point is left out (the handlers keep its seed); two periods: the worst
    assert timings == FleetTimings({"web": 640.0, "model": 810.5}, 61.0)
    assert fleet.calls == 1


def test_a_throttled_read_is_metrics_unavailable() -> None:
    cw = boto3.client("cloudwatch", region_name="us-east-1")
    stub = Stubber(cw)
    stub.add_client_error("get_metric_data", "Throttling", http_status_code=400)
    with stub, pytest.raises(MetricsUnavailable):
        CloudWatchFleetTimings(cw).read("orders-fn", "live", 2048, now_s=NOW)


def test_the_document_is_a_version_1_calibration_from_the_fleet() -> None:
    doc = fleet_calibration("orders-fn:live", 2048, {"web": 640.04, "model": float("nan"),
                                                     "level": -1.0}, 61.0, now_s=NOW,
                            window_min=60)
    assert doc is not None
    assert doc["version"] == 1 and doc["source"] == "fleet" and doc["memory_mb"] == 2048
    assert doc["stage_p95_ms"] == {"web": 640.0}  # NaN and negative values left out
    assert doc["overflow_p95_ms"] == 61.0
    assert doc["measured_at"] == "2026-12-02T12:00:30+00:00"
    assert fleet_calibration("orders-fn:live", 2048, {}, None, now_s=NOW, window_min=60) is None


def test_the_runtime_reads_what_the_warmer_writes() -> None:
    from functions.runtime import calibration
    from functions.runtime.degradation_level import parse_published

    doc = fleet_calibration("orders-fn:live", 2048, {"web": 640.0}, 61.0, now_s=NOW,
                            window_min=60)
    value = json.dumps({"level": "L1", "calibration": doc})
    level, text = parse_published(value)
    cal, _ = calibration.load_fleet(text, memory_mb=2048,
                                    now=dt.datetime.fromtimestamp(NOW + 60, dt.UTC))
    assert str(level) == "L1" and cal is not None and cal.stage_p95_ms == {"web": 640.0}


@pytest.fixture
def ssm(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")


def _stored(ssm: Any) -> str:
    return ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"]


def test_without_fleet_numbers_the_plain_level_is_written(ssm: Any) -> None:
    assert SsmLevelPublisher(ssm).publish(PARAMETER, "L1")
    assert _stored(ssm) == "L1"


def test_the_json_form_is_rewritten_on_change_and_before_it_goes_stale(ssm: Any) -> None:
    publisher = SsmLevelPublisher(ssm)

    def doc(at: float, web: float = 640.0) -> dict[str, Any] | None:
        return fleet_calibration("orders-fn:live", 2048, {"web": web}, None, now_s=at,
                                 window_min=60)

    assert publisher.publish(PARAMETER, "L0", calibration=doc(NOW), now_s=NOW)
    stored = json.loads(_stored(ssm))
    assert stored["level"] == "L0" and stored["calibration"]["stage_p95_ms"] == {"web": 640.0}
    # the same numbers a minute later: not rewritten (only measured_at would change)
    assert not publisher.publish(PARAMETER, "L0", calibration=doc(NOW + 60), now_s=NOW + 60)
    # other numbers, or the level: rewritten
    assert publisher.publish(PARAMETER, "L0", calibration=doc(NOW + 120, 700.0), now_s=NOW + 120)
    assert publisher.publish(PARAMETER, "L2", calibration=doc(NOW + 180, 700.0), now_s=NOW + 180)
    # unchanged but FLEET_REFRESH_S old: rewritten, so the handlers never read it stale
    later = NOW + 180 + FLEET_REFRESH_S
    assert publisher.publish(PARAMETER, "L2", calibration=doc(later, 700.0), now_s=later)
    assert json.loads(_stored(ssm))["calibration"]["measured_at"] == \
        dt.datetime.fromtimestamp(later, dt.UTC).isoformat()
    # fleet numbers gone (nothing measured in the window): back to the plain level
    assert publisher.publish(PARAMETER, "L2", now_s=later + 60)
    assert _stored(ssm) == "L2"


def test_a_new_warmer_rewrites_a_stored_document_it_did_not_write(ssm: Any) -> None:
    old = fleet_calibration("orders-fn:live", 2048, {"web": 640.0}, None, now_s=NOW - 3600,
                            window_min=60)
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True,
                      Value=json.dumps({"level": "L0", "calibration": old}))
    new = fleet_calibration("orders-fn:live", 2048, {"web": 640.0}, None, now_s=NOW,
                            window_min=60)
    assert SsmLevelPublisher(ssm).publish(PARAMETER, "L0", calibration=new, now_s=NOW)
    assert json.loads(_stored(ssm))["calibration"]["measured_at"] == new["measured_at"]
