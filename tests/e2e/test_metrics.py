"""AWS/Lambda metrics published to CloudWatch in a real moto server, read back with get_metric_data."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest

from infra.local.clock import SystemClock
from infra.local.metrics import CloudWatchMetrics
from infra.local.spec import AliasSpec
from infra.local.stack import LOCAL_CREDENTIALS, MotoServer
from tests.e2e.conftest import assert_gone, spec


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = MotoServer()
    server.start()
    yield server.endpoint
    pid = server.pid
    server.stop()
    assert_gone([pid])


def _query(cw, name: str, stat: str, dims: dict[str, str]) -> list[float]:
    now = dt.datetime.now(dt.UTC)
    out = cw.get_metric_data(
        MetricDataQueries=[{"Id": "m", "MetricStat": {"Metric": {
            "Namespace": "AWS/Lambda", "MetricName": name,
            "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()]},
            "Period": 60, "Stat": stat}}],
        StartTime=now - dt.timedelta(minutes=10), EndTime=now + dt.timedelta(minutes=2))
    return out["MetricDataResults"][0]["Values"]


def test_metrics_read_back_from_cloudwatch(make_emulator, moto_endpoint):
    # GIVEN an emulator publishing to CloudWatch in the moto server
    cw = boto3.client("cloudwatch", endpoint_url=moto_endpoint, region_name="us-east-1", **LOCAL_CREDENTIALS)
    publisher = CloudWatchMetrics(cw, SystemClock(), flush_interval_s=3600)
    emu = make_emulator(metrics=publisher)
    emu.add_function(spec("agent", "basic.echo", aliases=(AliasSpec("live", "1", 1),), reserved_concurrency=3))
    emu.add_function(spec("failing", "basic.fail"))
    # WHEN 2 requests arrive at once on the alias with 1 provisioned environment, one fails elsewhere,
    # and one is throttled
    barrier = threading.Barrier(2)

    def call(_):
        barrier.wait()
        return emu.invoke("agent", b'{"sleep_s": 0.3}', qualifier="live")

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(call, range(2)))
    assert sorted(r.spillover for r in results) == [False, True]
    emu.invoke("failing", b"{}", qualifier="live")
    emu.put_function_concurrency("failing", 0)
    with pytest.raises(Exception, match="Rate Exceeded"):
        emu.invoke("failing", b"{}", qualifier="live")
    assert publisher.flush() > 0
    # THEN any CloudWatch client reads them as from AWS
    agent = {"FunctionName": "agent"}
    live = {"FunctionName": "agent", "Resource": "agent:live"}
    assert sum(_query(cw, "Invocations", "Sum", agent)) == 2
    assert sum(_query(cw, "Invocations", "Sum", live)) == 2
    assert max(_query(cw, "ConcurrentExecutions", "Maximum", agent)) == 2
    assert sum(_query(cw, "ProvisionedConcurrencySpilloverInvocations", "Sum", live)) == 1
    assert max(_query(cw, "ProvisionedConcurrentExecutions", "Maximum", live)) == 1
    assert max(_query(cw, "ProvisionedConcurrencyUtilization", "Maximum", live)) == 1.0
    durations = _query(cw, "Duration", "Average", live)
    assert durations and 250 <= durations[0] <= 5000
    assert sum(_query(cw, "Errors", "Sum", {"FunctionName": "failing"})) == 1
    assert sum(_query(cw, "Throttles", "Sum", {"FunctionName": "failing"})) == 1
    # a later flush adds to the same minute instead of replacing it
    emu.invoke("agent", b"{}", qualifier="live")
    publisher.flush()
    assert sum(_query(cw, "Invocations", "Sum", live)) == 3


def test_a_failed_publish_keeps_the_data(make_emulator, moto_endpoint):
    bad = boto3.client("cloudwatch", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                       **LOCAL_CREDENTIALS)
    publisher = CloudWatchMetrics(bad, SystemClock(), flush_interval_s=3600)
    publisher.record("Invocations", 1, "fn", "fn:live")
    with pytest.raises(Exception):  # noqa: B017 (connection refused, botocore's own type)
        publisher.flush()
    good = boto3.client("cloudwatch", endpoint_url=moto_endpoint, region_name="us-east-1",
                        **LOCAL_CREDENTIALS)
    publisher._client = good
    assert publisher.flush() == 2  # [FunctionName] and [FunctionName, Resource]
    assert sum(_query(good, "Invocations", "Sum", {"FunctionName": "fn"})) == 1
    with pytest.raises(ValueError, match="flush_interval_s"):
        CloudWatchMetrics(good, SystemClock(), flush_interval_s=0)
