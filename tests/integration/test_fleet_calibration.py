"""Admission calibrates itself from the fleet (issue 20 item 3), end to end against moto:
an on-demand environment measures its preload stages and emits them (EMF ``StageDuration``),
the warmer reads their p95 per alias and publishes them with the degradation level, and a new
environment starts from those numbers, not from the seeds.

moto 5.2 neither turns EMF log lines into metrics nor computes percentile statistics in
``GetMetricData`` (only Sum/Average/Minimum/Maximum/SampleCount; ``p95`` with data points
fails in its serializer): the EMF events the first environment printed are put with
``PutMetricData`` (one data point per stage, so its p95 is its Maximum), and the warmer's
reader is built with ``stat="Maximum"``. The ``p95`` query itself is checked against
botocore's stubber in ``tests/unit/warmers/test_fleet.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.runtime.admission.state import DEFAULT_STAGE_P95_MS
from tests.unit.runtime.test_agent import (  # noqa: F401 - fixtures used by name
    Built,
    _credentials,
    built,
    call,
    env_for,
    orders_agent,
)
from warmers.cloudwatch import CloudWatchFleetTimings
from warmers.config import WarmerConfig
from warmers.runner import WarmerClients, WarmerRuntime, run_once

PARAMETER = "/warmstart/orders/degradation-level"
FUNCTION = "agent"  # tests.conftest.LambdaContext's ARN: function "agent", alias "live"


@pytest.fixture
def aws() -> Any:
    with mock_aws():
        region = {"region_name": "us-east-1"}
        yield WarmerClients(cloudwatch=boto3.client("cloudwatch", **region),
                            lambda_=boto3.client("lambda", **region),
                            application_autoscaling=boto3.client("application-autoscaling",
                                                                 **region),
                            ssm=boto3.client("ssm", **region))


def _env(init_type: str) -> dict[str, str]:
    return env_for(init_type, WARMSTART_DEGRADATION_PARAMETER=PARAMETER,
                   AWS_LAMBDA_FUNCTION_MEMORY_SIZE="2048", AWS_LAMBDA_FUNCTION_NAME=FUNCTION)


def _warmer(aws: WarmerClients) -> tuple[WarmerConfig, WarmerRuntime]:
    """The warmer of one alias that publishes a level (its reader: Maximum, see above)."""
    config = WarmerConfig.from_dict({
        "aliases": [{"function_name": FUNCTION, "alias": "live", "strategy": "none",
                     "memory_mb": 2048, "degradation_parameter": PARAMETER,
                     "available_concurrency": 50}],
        "unreserved_concurrency": 900, "history_days": 0.1})
    runtime = WarmerRuntime.build(aws, config)
    runtime.fleet = CloudWatchFleetTimings(aws.cloudwatch, stat="Maximum")
    return config, runtime


def _put_emf(cw: Any, out: str) -> dict[str, float]:
    """What CloudWatch Logs makes of the EMF lines: the fleet's StageDuration data points."""
    measured: dict[str, float] = {}
    for line in out.splitlines():
        if not line.startswith('{"_aws"') or "StageDuration" not in line:
            continue
        event = json.loads(line)
        sets = event["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        fleet = next(s for s in sets if "function" in s)
        stamp = dt.datetime.fromtimestamp(event["_aws"]["Timestamp"] / 1000.0, dt.UTC)
        value = event["StageDuration"][0]
        cw.put_metric_data(Namespace=event["_aws"]["CloudWatchMetrics"][0]["Namespace"],
                           MetricData=[{"MetricName": "StageDuration", "Timestamp": stamp,
                                        "Dimensions": [{"Name": k, "Value": event[k]} for k in fleet],
                                        "Value": value, "Unit": "Milliseconds"}])
        measured[event["stage"]] = value
    return measured


def test_a_new_environment_starts_from_what_the_fleet_measured(
        aws: WarmerClients, built: Built, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811 (the fixture imported above)
    aws.ssm.put_parameter(Name=PARAMETER, Value="L0", Type="String")  # the plain form, as today
    # GIVEN a first on-demand environment that served a request and finished its preload
    first, _ = built.handler(orders_agent(built.gate(released=True)), _env("on-demand"))
    call(first, "GET", "/healthz")
    assert first.preload.wait_all(30.0)
    deadline = time.monotonic() + 5.0
    while first.preload.thread is not None and first.preload.thread.is_alive() \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    # THEN it emitted one StageDuration per stage under its function, alias and memory size
    measured = _put_emf(aws.cloudwatch, capsys.readouterr().out)
    assert set(measured) == {"toolkit", "web", "telemetry", "model", "level"}, measured

    # WHEN the warmer runs (one GetMetricData per alias; moto: Maximum, see the module notes)
    config, runtime = _warmer(aws)
    run_once(time.time() + 60.0, None, config, runtime=runtime)  # the next minute's run
    stored = json.loads(aws.ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"])
    assert stored["level"] == "L0" and stored["calibration"]["source"] == "fleet"
    assert stored["calibration"]["stage_p95_ms"] == {k: round(v, 1) for k, v in measured.items()}

    # THEN a new environment starts from the fleet's numbers, not from the seeds
    second, _ = built.handler(orders_agent(built.gate(released=True),
                                           stage_p95_ms={"model": 5000.0}),
                              _env("provisioned-concurrency"))
    assert second.admission is not None
    for stage, value in measured.items():
        assert second.admission.stage_p95_ms[stage] == round(value, 1)
    assert second.admission.stage_p95_ms["toolkit"] != DEFAULT_STAGE_P95_MS["toolkit"]
    assert second.admission.stage_p95_ms["model"] != 5000.0
    assert str(second.current_level()) == "L0"


def test_an_alias_whose_fleet_measured_nothing_keeps_the_plain_level(aws: WarmerClients) -> None:
    config, runtime = _warmer(aws)
    run_once(time.time(), None, config, runtime=runtime)
    assert aws.ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"] == "L0"


def test_the_fleet_is_read_every_five_minutes_not_every_run(aws: WarmerClients) -> None:
    # GIVEN a fleet that measured its web stage
    stamp = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2)
    aws.cloudwatch.put_metric_data(Namespace="Warmstart", MetricData=[{
        "MetricName": "StageDuration", "Timestamp": stamp, "Value": 640.0, "Unit": "Milliseconds",
        "Dimensions": [{"Name": "function", "Value": FUNCTION}, {"Name": "alias", "Value": "live"},
                       {"Name": "memory_mb", "Value": "2048"}, {"Name": "stage", "Value": "web"}]}])
    config, runtime = _warmer(aws)
    assert runtime.fleet is not None
    now = time.time()
    # WHEN the warmer runs every minute for six minutes
    for minute in range(6):
        run_once(now + 60.0 * minute, None, config, runtime=runtime)
    # THEN the fleet was read twice (at 0 and 5 min) and every run published its numbers
    assert runtime.fleet.calls == 2
    stored = json.loads(aws.ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"])
    assert stored["calibration"]["stage_p95_ms"] == {"web": 640.0}
    assert stored["calibration"]["measured_at"] == \
        dt.datetime.fromtimestamp(now + 300.0, dt.UTC).isoformat()
