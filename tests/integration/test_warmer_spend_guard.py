"""The endpoint's spend guard in the deployed warmer, against moto: the agents' own EMF
``Requests`` {service, path=overflow} read with GetMetricData, the guard applied by the plan,
``EndpointSpendUnansweredUsd`` published with PutMetricData; a throttled read (a botocore
``before-call`` hook on the real client) skips the guard and never stops the run."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from tests.integration import test_warmer_endpoint as endpoint_tests
from tests.integration.test_warmer_endpoint import (
    ENDPOINT,
    _run,
    _runtime,
    _target,
    bursts,
    config,
)
from tests.integration.test_warmer_handler import END, NOW, _put_load
from warmers.cloudwatch import (
    SPEND_UNANSWERED_METRIC,
    WARMER_NAMESPACE,
    CloudWatchOverflowAnswers,
    EndpointSpendPublisher,
)
from warmers.plan.endpoint import EndpointPlan
from warmers.ports import MetricsUnavailable
from warmers.runner import WarmerClients
from warmers.state import SsmPlanStore

G6 = 1.1267  # warmers/prices.json sagemaker_ml_g6_xlarge_hour
#: moto's CloudWatch, SSM, Application Auto Scaling and SageMaker endpoint (the endpoint
#: tests' fixture)
aws = endpoint_tests.aws


def _requests(cw: Any, service: str, path: str, counts: dict[int, float]) -> None:
    """The toolkit's EMF ``Requests`` as CloudWatch stores it: ``{minutes before NOW: count}``."""
    cw.put_metric_data(Namespace="Warmstart", MetricData=[
        {"MetricName": "Requests", "Timestamp": END - dt.timedelta(minutes=m), "Value": v,
         "Unit": "Count", "Dimensions": [{"Name": "service", "Value": service},
                                         {"Name": "path", "Value": path}]}
        for m, v in counts.items()])


def _load(aws: WarmerClients) -> None:
    _put_load(aws.cloudwatch, "intent", "live", bursts(8.0))
    _put_load(aws.cloudwatch, "lookup", "live", bursts(4.0))


def _paid_an_hour(aws: WarmerClients) -> EndpointPlan:
    """The plan a warmer left a minute ago: 3 instances held for the last hour."""
    plan = EndpointPlan(ENDPOINT, 3, 3 * G6, 10.0, 120.0, float("inf"), True, NOW - 60,
                        NOW - 3600, "bought for the bursts", recent_wanted=((NOW - 60, 3),),
                        spend_window=((NOW - 3600, NOW - 60, 3 * G6),),
                        window_spend_usd=3 * G6 * 59 / 60, answered_in_window=0)
    SsmPlanStore(aws.ssm, "/warmstart/warmer").save_endpoint(plan)
    return plan


def _published(aws: WarmerClients) -> list[float]:
    got = aws.cloudwatch.get_metric_data(MetricDataQueries=[{
        "Id": "spend", "MetricStat": {"Metric": {
            "Namespace": WARMER_NAMESPACE, "MetricName": SPEND_UNANSWERED_METRIC,
            "Dimensions": [{"Name": "EndpointName", "Value": ENDPOINT}]},
            "Period": 60, "Stat": "Maximum"}}],
        StartTime=END - dt.timedelta(minutes=5), EndTime=END + dt.timedelta(minutes=5))
    return list(got["MetricDataResults"][0]["Values"])


def test_the_overflow_answers_are_the_agents_own_requests_metric_in_the_window(aws) -> None:
    # GIVEN the two agents' EMF counts: overflow answers inside the last hour, one before it,
    # and other paths
    _requests(aws.cloudwatch, "intent", "overflow", {5: 2.0, 30: 3.0, 90: 50.0})
    _requests(aws.cloudwatch, "lookup", "overflow", {59: 1.0})
    _requests(aws.cloudwatch, "intent", "local", {5: 400.0})
    _requests(aws.cloudwatch, "other-agent", "overflow", {5: 9.0})
    policy = config().endpoints[0]
    answers = CloudWatchOverflowAnswers(aws.cloudwatch)
    # THEN one query per agent of this endpoint, path overflow, over the window only
    assert answers.answered(policy, start_s=NOW - 3600, end_s=NOW) == 6
    assert answers.calls == 1
    # the service dimension is the agent's name when it differs from its function's
    named = config(agent_services=["intent-agent", "lookup-agent"]).endpoints[0]
    assert answers.answered(named, start_s=NOW - 3600, end_s=NOW) == 0
    _requests(aws.cloudwatch, "intent-agent", "overflow", {10: 4.0})
    assert answers.answered(named, start_s=NOW - 3600, end_s=NOW) == 4


def test_an_endpoint_that_paid_an_hour_for_no_answer_is_scaled_in_and_says_so(aws) -> None:
    # GIVEN bursts the planner buys 3 instances for, a saved plan that held 3 for the last
    # hour, and no overflow answer in it
    _load(aws)
    _paid_an_hour(aws)
    cfg = config(failed_answer_usd=None)
    runtime = _runtime(aws, cfg)
    # WHEN the warmer runs
    _run(aws, cfg, runtime, NOW)
    entry = runtime.last_run.endpoint(ENDPOINT)
    steps = {s.name: s.value for s in entry.steps}
    # THEN the forecast still wants 3, but $3.38 spent for 0 answers scales in to the floor
    # (a variant holds at least 1), and the plan says why
    assert steps["instances_wanted"] == 3 and steps["spend_guard"] is True
    assert steps["answered_in_window"] == 0
    assert entry.plan.window_spend_usd == pytest.approx(3 * G6)
    assert entry.plan.capacity == 1 and _target(aws) == (1, 1)
    assert entry.plan.reason.startswith("spend guard: $3.3801 spent in the last 60 min >= "
                                        "$1.1267")
    # the metric the alarm reads: the window's spend, unanswered
    assert _published(aws) == [pytest.approx(3 * G6)]
    # and the plan saved for the next run keeps the spend window and the hold
    saved = SsmPlanStore(aws.ssm, "/warmstart/warmer").load_endpoint(ENDPOINT)
    assert saved == entry.plan and saved.spend_guard_since_s == NOW


def test_answers_in_the_window_keep_the_capacity_and_publish_zero(aws) -> None:
    _load(aws)
    _paid_an_hour(aws)
    _requests(aws.cloudwatch, "lookup", "overflow", {12: 2.0})
    cfg = config(failed_answer_usd=None)
    runtime = _runtime(aws, cfg)
    _run(aws, cfg, runtime, NOW)
    entry = runtime.last_run.endpoint(ENDPOINT)
    assert entry.plan.answered_in_window == 2 and entry.plan.capacity == 3
    assert "spend guard" not in entry.plan.reason
    assert _target(aws) == (3, 3)
    assert _published(aws) == [0.0]


def _throttle_requests_reads(aws: WarmerClients) -> list[str]:
    """Answer every GetMetricData that reads the agents' ``Warmstart`` namespace with a
    throttling error (the alias metrics in ``AWS/Lambda`` still answer)."""
    refused: list[str] = []
    events = aws.cloudwatch.meta.events

    def mark(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["throttle"] = any(q.get("MetricStat", {}).get("Metric", {}).get("Namespace")
                                  == "Warmstart" for q in params.get("MetricDataQueries", []))

    def answer(context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not context.get("throttle"):
            return None
        refused.append("GetMetricData")
        return (AWSResponse("https://monitoring.us-east-1.amazonaws.com", 400, {}, None),
                {"Error": {"Code": "Throttling", "Message": "Rate exceeded"},
                 "ResponseMetadata": {"HTTPStatusCode": 400}})

    events.register("before-parameter-build.cloudwatch.GetMetricData", mark)
    events.register("before-call.cloudwatch.GetMetricData", answer)
    return refused


def test_a_throttled_answers_read_skips_the_guard_and_never_stops_the_run(aws, caplog) -> None:
    _load(aws)
    _paid_an_hour(aws)
    refused = _throttle_requests_reads(aws)
    with pytest.raises(MetricsUnavailable, match="overflow answers of warmstart-overflow"):
        CloudWatchOverflowAnswers(aws.cloudwatch).answered(
            config().endpoints[0], start_s=NOW - 3600, end_s=NOW)
    cfg = config(failed_answer_usd=None)
    runtime = _runtime(aws, cfg)
    caplog.set_level("WARNING", logger="warmstart.warmer")
    _run(aws, cfg, runtime, NOW)
    entry = runtime.last_run.endpoint(ENDPOINT)
    # THEN the read was refused, the run planned and applied anyway, the guard not applied
    assert refused
    assert entry.plan.answered_in_window is None and entry.plan.capacity == 3
    assert {s.name: s.value for s in entry.steps}["spend_guard"] is None
    assert _target(aws) == (3, 3)
    faults = [json.loads(r.message) for r in caplog.records if r.message.startswith("{")]
    assert any(f.get("tag") == "tool_unavailable" and f.get("alias") == ENDPOINT
               and "spend guard not applied" in f["message"] for f in faults)
    # nothing is published for a window whose answers are unknown
    assert _published(aws) == []


def test_a_refused_put_metric_data_is_logged_not_raised(aws, caplog) -> None:
    _load(aws)
    cfg = config(failed_answer_usd=None)
    runtime = _runtime(aws, cfg)

    def refuse(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        return (AWSResponse("https://monitoring.us-east-1.amazonaws.com", 403, {}, None),
                {"Error": {"Code": "AccessDenied", "Message": "not authorized"},
                 "ResponseMetadata": {"HTTPStatusCode": 403}})

    aws.cloudwatch.meta.events.register("before-call.cloudwatch.PutMetricData", refuse)
    caplog.set_level("WARNING", logger="warmstart.warmer")
    _run(aws, cfg, runtime, NOW)
    assert runtime.last_run.endpoint(ENDPOINT).plan.capacity == 3
    assert "endpoint spend metric not published" in caplog.text


def test_the_publisher_sends_one_datum_per_endpoint_whose_answers_are_known(aws) -> None:
    known = EndpointPlan(ENDPOINT, 1, G6, 0.0, 0.0, 0.0, False, NOW, NOW, "t",
                         window_spend_usd=0.5, answered_in_window=0)
    unknown = EndpointPlan("other", 1, G6, 0.0, 0.0, 0.0, False, NOW, NOW, "t",
                           window_spend_usd=0.5)
    assert EndpointSpendPublisher(aws.cloudwatch).publish([known, unknown]) == 1
    assert _published(aws) == [0.5]
    metrics = aws.cloudwatch.list_metrics(Namespace=WARMER_NAMESPACE)["Metrics"]
    assert [m["Dimensions"] for m in metrics] == [[{"Name": "EndpointName", "Value": ENDPOINT}]]
