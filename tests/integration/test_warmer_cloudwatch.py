"""CloudWatch metrics source against moto (data, gaps, chunking) and Stubber (pagination,
throttling), which moto does not model."""

from __future__ import annotations

import datetime as dt

import boto3
import numpy as np
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from warmers.cloudwatch import QUERIES, CloudWatchMetricsSource
from warmers.ports import MetricsEmpty, MetricsUnavailable

END = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
END_S = END.timestamp()
DIMS = [{"Name": "FunctionName", "Value": "agent"}, {"Name": "Resource", "Value": "agent:live"}]


@pytest.fixture
def cw():
    with mock_aws():
        yield boto3.client("cloudwatch", region_name="us-east-1")


def _put(cw, name, minutes_ago_values, dims=DIMS):
    data = [{"MetricName": name, "Dimensions": dims, "Timestamp": END - dt.timedelta(minutes=m),
             "Value": float(v)} for m, v in minutes_ago_values]
    for i in range(0, len(data), 500):
        cw.put_metric_data(Namespace="AWS/Lambda", MetricData=data[i:i + 500])


def test_reads_alias_metrics_with_gaps_and_zero_fill(cw):
    _put(cw, "Invocations", [(1, 30), (2, 20), (5, 10)])
    _put(cw, "ConcurrentExecutions", [(1, 3), (2, 2), (5, 1)])
    _put(cw, "Duration", [(1, 150.0)])
    # another alias's metric must not leak in
    _put(cw, "Invocations", [(1, 999)], dims=[DIMS[0], {"Name": "Resource",
                                                        "Value": "agent:canary"}])
    raw = CloudWatchMetricsSource(cw, zero_fill_counts=False).fetch(
        "agent", "live", start_s=END_S - 600, end_s=END_S)
    assert raw.n_minutes == 10 and raw.start_s == END_S - 600
    assert raw.invocations[-1] == 30 and raw.invocations[-2] == 20 and raw.invocations[-5] == 10
    assert np.isnan(raw.invocations[-3]) and np.isnan(raw.invocations[0])
    assert raw.concurrency[-1] == 3 and raw.duration_ms[-1] == 150.0
    assert np.isnan(raw.duration_ms[:-1]).all()  # minutes without a data point
    filled = CloudWatchMetricsSource(cw).fetch("agent", "live", start_s=END_S - 600,
                                               end_s=END_S)
    assert filled.invocations[-3] == 0 and np.isnan(filled.duration_ms[-3])


def test_long_ranges_are_chunked(cw):
    _put(cw, "Invocations", [(m, m) for m in range(1, 301)])
    # 60 minutes of every metric per call: 300 minutes take 5 calls
    small = CloudWatchMetricsSource(cw, max_datapoints_per_call=len(QUERIES) * 60)
    series = small.fetch("agent", "live", start_s=END_S - 300 * 60, end_s=END_S)
    assert small.calls == 5
    np.testing.assert_array_equal(series.invocations, np.arange(300, 0, -1, dtype=float))
    whole = CloudWatchMetricsSource(cw)
    whole.fetch("agent", "live", start_s=END_S - 14 * 86400, end_s=END_S)
    assert whole.calls == 1  # 3 metrics x 20,160 minutes = 60,480 points of 100,800: one call


def test_empty_and_bad_ranges(cw):
    src = CloudWatchMetricsSource(cw)
    # an answer with no data point at all is zero traffic (Lambda publishes nothing without
    # invocations), not an outage
    idle = src.fetch("agent", "live", start_s=END_S - 600, end_s=END_S)
    assert idle.n_minutes == 10 and not idle.is_empty
    assert not idle.invocations.any() and not idle.concurrency.any()
    assert np.isnan(idle.duration_ms).all()
    # raw mode keeps "nothing" distinguishable
    with pytest.raises(MetricsEmpty, match="no data point"):
        CloudWatchMetricsSource(cw, zero_fill_counts=False).fetch(
            "agent", "live", start_s=END_S - 600, end_s=END_S)
    with pytest.raises(ValueError, match="15 days"):
        src.fetch("agent", "live", start_s=END_S - 16 * 86400, end_s=END_S)
    with pytest.raises(ValueError, match="empty range"):
        src.fetch("agent", "live", start_s=END_S, end_s=END_S)


def _stubbed():
    client = boto3.client("cloudwatch", region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def test_next_token_pagination():
    client, stub = _stubbed()
    t = [END - dt.timedelta(minutes=2), END - dt.timedelta(minutes=1)]
    stub.add_response("get_metric_data", {"MetricDataResults": [
        {"Id": "inv", "Timestamps": [t[0]], "Values": [5.0], "StatusCode": "PartialData"}],
        "NextToken": "page2"}, {"MetricDataQueries": ANY, "StartTime": ANY, "EndTime": ANY,
                                "ScanBy": "TimestampAscending"})
    stub.add_response("get_metric_data", {"MetricDataResults": [
        {"Id": "inv", "Timestamps": [t[1]], "Values": [7.0], "StatusCode": "Complete"}]},
        {"MetricDataQueries": ANY, "StartTime": ANY, "EndTime": ANY,
         "ScanBy": "TimestampAscending", "NextToken": "page2"})
    with stub:
        series = CloudWatchMetricsSource(client).fetch("agent", "live", start_s=END_S - 180,
                                                       end_s=END_S)
    assert list(series.invocations) == [0.0, 5.0, 7.0]
    stub.assert_no_pending_responses()


def test_throttling_and_forbidden_become_metrics_unavailable():
    client, stub = _stubbed()
    stub.add_client_error("get_metric_data", service_error_code="Throttling",
                          http_status_code=400)
    with stub, pytest.raises(MetricsUnavailable, match="Throttling"):
        CloudWatchMetricsSource(client).fetch("agent", "live", start_s=END_S - 60, end_s=END_S)
    client, stub = _stubbed()
    stub.add_response("get_metric_data", {"MetricDataResults": [
        {"Id": "inv", "Timestamps": [], "Values": [], "StatusCode": "Forbidden"}]})
    with stub, pytest.raises(MetricsUnavailable, match="Forbidden"):
        CloudWatchMetricsSource(client).fetch("agent", "live", start_s=END_S - 60, end_s=END_S)


def test_caching_source_fetches_only_new_minutes(cw):
    from warmers.cloudwatch import CachingMetricsSource

    _put(cw, "Invocations", [(m, 100 + m) for m in range(1, 121)])
    inner = CloudWatchMetricsSource(cw)
    src = CachingMetricsSource(inner, overlap_min=5)
    first = src.fetch("agent", "live", start_s=END_S - 7200, end_s=END_S)
    assert first.n_minutes == 120 and src.full_fetches == 1
    # GIVEN two more minutes WHEN fetching one minute later THEN only the tail is re-read
    _put(cw, "Invocations", [(0, 7)])  # the minute [END, END+60)
    calls = inner.calls
    later = src.fetch("agent", "live", start_s=END_S - 7200 + 60, end_s=END_S + 60)
    assert src.incremental_fetches == 1 and inner.calls == calls + 1
    assert later.n_minutes == 120 and later.start_s == END_S - 7200 + 60
    assert later.invocations[-1] == 7 and later.invocations[-2] == 101
    np.testing.assert_array_equal(later.invocations[:-1], first.invocations[1:])
    # an increment without any data point is zero invocations, not a fault
    quiet = src.fetch("agent", "live", start_s=END_S - 7200 + 3600, end_s=END_S + 3600)
    assert quiet.invocations[-1] == 0 and np.isnan(quiet.duration_ms[-1])


def test_caching_source_does_not_cache_an_idle_range(cw):
    """GIVEN an alias with no data point at all WHEN it is read THEN it is zero traffic and is
    not cached, so data that arrives later for older minutes is seen on the next read."""
    from warmers.cloudwatch import CachingMetricsSource

    src = CachingMetricsSource(CloudWatchMetricsSource(cw), overlap_min=5)
    idle = src.fetch("agent", "live", start_s=END_S - 7200, end_s=END_S)
    assert idle.n_minutes == 120 and not idle.invocations.any()
    _put(cw, "Invocations", [(m, 50) for m in range(30, 61)])  # back-filled, 30-60 min ago
    later = src.fetch("agent", "live", start_s=END_S - 7200 + 60, end_s=END_S + 60)
    assert src.full_fetches == 2 and src.incremental_fetches == 0
    assert later.invocations.sum() == 50 * 31
