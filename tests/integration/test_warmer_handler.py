"""The warmer end to end against moto (CloudWatch, SSM, Application Auto Scaling); Lambda's
GetAccountSettings, which moto lacks, through botocore Stubber."""

from __future__ import annotations

import datetime as dt
import json
import logging

import boto3
import numpy as np
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from warmers import handler as warmer_handler
from warmers.actuators import DIMENSION
from warmers.config import WarmerConfig
from warmers.runner import WarmerClients, WarmerRuntime, run_once

END = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
NOW = END.timestamp()
CONFIG = {
    "aliases": [
        {"function_name": "agent", "alias": "live", "floor": 1, "cap": 40,
         "budget_usd_per_hour": 2.0, "degradation_parameter": "/warmstart/agent/degradation-level",
         "available_concurrency": 50},
        {"function_name": "quiet", "alias": "live", "floor": 0, "cap": 5},
    ],
    "history_days": 0.5,
}


#: with Invocations = 100 x value per minute, a Duration of 600 ms makes the minute's mean in
#: flight (Little's law: 100 v x 0.6 s / 60 s) equal to ``value``: a load that held all minute
HELD_MS = 600.0


def _put_load(cw, fn, alias, values, end=END, duration_ms=None, invocations=None):
    dims = [{"Name": "FunctionName", "Value": fn}, {"Name": "Resource", "Value": f"{fn}:{alias}"}]
    n = len(values)
    data = []
    for i, v in enumerate(values):
        ts = end - dt.timedelta(minutes=n - i)
        data.append({"MetricName": "ConcurrentExecutions", "Dimensions": dims, "Timestamp": ts,
                     "Value": float(v)})
        data.append({"MetricName": "Invocations", "Dimensions": dims, "Timestamp": ts,
                     "Value": float(v) * 100 if invocations is None else float(invocations)})
        if duration_ms is not None:
            data.append({"MetricName": "Duration", "Dimensions": dims, "Timestamp": ts,
                         "Value": float(duration_ms)})
    for i in range(0, len(data), 1000):
        cw.put_metric_data(Namespace="AWS/Lambda", MetricData=data[i:i + 1000])


@pytest.fixture
def aws():
    with mock_aws():
        lam = boto3.client("lambda", region_name="us-east-1")
        yield WarmerClients(cloudwatch=boto3.client("cloudwatch", region_name="us-east-1"),
                            lambda_=lam,
                            application_autoscaling=boto3.client("application-autoscaling",
                                                                 region_name="us-east-1"),
                            ssm=boto3.client("ssm", region_name="us-east-1"))


def _account(stub, unreserved=900, times=1):
    for _ in range(times):
        stub.add_response("get_account_settings", {"AccountLimit": {
            "ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": unreserved}})


def _min_capacity(aas, fn):
    rows = aas.describe_scalable_targets(ServiceNamespace="lambda",
                                         ResourceIds=[f"function:{fn}:live"],
                                         ScalableDimension=DIMENSION)["ScalableTargets"]
    return rows[0]["MinCapacity"] if rows else None


def test_run_once_plans_applies_publishes_and_survives_faults(aws, caplog):
    rng = np.random.default_rng(0)
    _put_load(aws.cloudwatch, "agent", "live", 10 + rng.poisson(2, 720))
    config = WarmerConfig.from_dict(CONFIG)
    stub = Stubber(aws.lambda_)
    _account(stub, times=3)
    with stub, caplog.at_level(logging.INFO, logger="warmstart.warmer"):
        # GIVEN a day of steady load WHEN the warmer runs THEN the alias's minimum is set ahead
        runtime = WarmerRuntime.build(aws, config)
        plans = run_once(NOW, None, config, runtime=runtime)
        agent, quiet = plans
        assert agent.action == "provisioned" and 12 <= agent.provisioned_concurrency <= 22
        assert _min_capacity(aws.application_autoscaling, "agent") == agent.provisioned_concurrency
        # no data point at all for "quiet": zero traffic, not an outage
        assert quiet.action == "none" and not quiet.fallback and "zero traffic" in quiet.reason
        saved = json.loads(aws.ssm.get_parameter(Name="/warmstart/warmer/agent/live/plan")
                           ["Parameter"]["Value"])
        assert saved["provisioned_concurrency"] == agent.provisioned_concurrency
        level = aws.ssm.get_parameter(Name="/warmstart/agent/degradation-level")
        assert level["Parameter"]["Value"] == "L0"

        # WHEN CloudWatch is throttled THEN the last good plan is kept and tool_unavailable logged
        throttled = Stubber(aws.cloudwatch)
        throttled.add_client_error("get_metric_data", "Throttling", http_status_code=400)
        throttled.add_client_error("get_metric_data", "Throttling", http_status_code=400)
        with throttled:
            fresh = WarmerRuntime.build(aws, config)  # new environment: state from SSM
            kept = run_once(NOW + 60, None, config, runtime=fresh)[0]
        assert kept.fallback and kept.provisioned_concurrency == agent.provisioned_concurrency
        tags = [json.loads(r.getMessage()).get("tag") for r in caplog.records]
        assert "tool_unavailable" in tags

        # WHEN the load nears the reserved 50 THEN the published level rises (sustained minute)
        _put_load(aws.cloudwatch, "agent", "live", [49.9], end=END + dt.timedelta(minutes=1),
                  duration_ms=HELD_MS)
        run_once(NOW + 60, None, config, runtime=runtime)
        level = aws.ssm.get_parameter(Name="/warmstart/agent/degradation-level")
        assert level["Parameter"]["Value"] == "L3"


def test_account_headroom_limits_pc(aws):
    _put_load(aws.cloudwatch, "agent", "live", np.full(720, 30.0))
    config = WarmerConfig.from_dict(CONFIG)
    stub = Stubber(aws.lambda_)
    _account(stub, unreserved=110)  # only 10 above the 100 that must stay unreserved
    with stub:
        plan = run_once(NOW, aws, config)[0]
    assert plan.provisioned_concurrency == 10 and "unreserved" in plan.reason


def test_headroom_is_shared_between_aliases(aws):
    for fn in ("a", "b"):
        _put_load(aws.cloudwatch, fn, "live", np.full(720, 30.0))
    config = WarmerConfig.from_dict({"aliases": [
        {"function_name": fn, "alias": "live", "cap": 100, "budget_usd_per_hour": 10}
        for fn in ("a", "b")], "history_days": 0.5})
    stub = Stubber(aws.lambda_)
    _account(stub, unreserved=150)  # 50 may be provisioned in all
    with stub:
        a, b = run_once(NOW, aws, config)
    assert (a.provisioned_concurrency, b.provisioned_concurrency) == (30, 20)
    assert "unreserved" in b.reason


def test_handler_from_env_with_moto(aws, monkeypatch, caplog):
    """The Lambda entry: config from env; moto has no GetAccountSettings, so PC is never raised
    (logged tool_unavailable) while the floor is still honoured."""
    wall = dt.datetime.now(tz=dt.UTC).replace(second=0, microsecond=0)
    _put_load(aws.cloudwatch, "agent", "live", np.full(600, 5.0), end=wall)
    monkeypatch.setenv("WARMSTART_WARMER_CONFIG", json.dumps(CONFIG))
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    warmer_handler.reset()
    with caplog.at_level(logging.INFO, logger="warmstart.warmer"):
        out = warmer_handler.handler({"source": "aws.scheduler"}, None)
    warmer_handler.reset()
    agent = out["plans"][0]
    assert agent["provisioned_concurrency"] == 1 and "headroom unknown" in agent["reason"]
    messages = [json.loads(r.getMessage()) for r in caplog.records]
    assert any(m.get("source") == "lambda:GetAccountSettings" for m in messages)
    assert any(m.get("event") == "warm_plan" for m in messages)


def test_snapstart_alias_still_gets_its_degradation_level(aws):
    _put_load(aws.cloudwatch, "agent", "live", np.full(30, 99.8), duration_ms=HELD_MS)
    config = WarmerConfig.from_dict({"aliases": [CONFIG["aliases"][0] | {
        "strategy": "snapstart", "available_concurrency": 100, "floor": 0}],
        "history_days": 0.5})
    stub = Stubber(aws.lambda_)
    _account(stub)
    with stub:
        plan = run_once(NOW, aws, config)[0]
    assert plan.action == "none" and "SnapStart" in plan.reason
    level = aws.ssm.get_parameter(Name="/warmstart/agent/degradation-level")
    assert level["Parameter"]["Value"] == "L3"


def test_sparse_function_gets_warm_pings_through_invoke(aws):
    """GIVEN a function invoked about once an hour WHEN the warmer runs near the expected next
    invocation THEN it plans warm pings and invokes the alias with the ping payload."""
    import io

    from botocore.response import StreamingBody

    values = np.zeros(720)
    values[::60] = 1.0  # minute 0, 60, ... ; the next after the last is due 15 min ahead
    values = values[:705]  # last arrival at minute 660: 44 min ago, the next in 16 min
    _put_load(aws.cloudwatch, "sparse", "live", values)
    config = WarmerConfig.from_dict({"aliases": [{"function_name": "sparse", "alias": "live"}],
                                     "history_days": 0.5})
    pong = b'{"warmstart": {"pong": true, "environment_id": "e1", "cold_start": false}}'
    stub = Stubber(aws.lambda_)
    _account(stub)
    stub.add_response("invoke", {"StatusCode": 200,
                                  "Payload": StreamingBody(io.BytesIO(pong), len(pong))},
                      {"FunctionName": "sparse", "Qualifier": "live",
                       "InvocationType": "RequestResponse",
                       "Payload": b'{"warmstart": {"ping": true, "concurrency": 1, '
                                  b'"hold_ms": 75}}'})
    with stub:
        runtime = WarmerRuntime.build(aws, config)
        plan = run_once(NOW, None, config, runtime=runtime)[0]
    stub.assert_no_pending_responses()
    assert plan.action == "ping" and plan.ping_concurrency == 1 and "sparse" in plan.reason
    assert any("1 distinct environments" in r.detail for r in runtime.last_results)


def _level(aws):
    return aws.ssm.get_parameter(Name="/warmstart/agent/degradation-level")["Parameter"]["Value"]


def test_a_one_second_spike_minute_does_not_shed_but_a_saturated_minute_does(aws):
    """GIVEN 29 minutes at 40 % of the 50 available WHEN the next minute's ConcurrentExecutions
    Maximum hits 50 but its Invocations x Duration show a mean of 21 in flight (a spike) THEN the
    published level stays L0; WHEN a minute stays at 50 all along THEN it is L3."""
    config = WarmerConfig.from_dict({"aliases": [CONFIG["aliases"][0] | {
        "strategy": "snapstart", "floor": 0}], "history_days": 0.5})
    _put_load(aws.cloudwatch, "agent", "live", np.full(29, 20.0),
              end=END - dt.timedelta(minutes=1), duration_ms=HELD_MS)
    # the spike minute: peak 50, 2,100 invocations x 600 ms / 60 s = 21 in flight on average
    _put_load(aws.cloudwatch, "agent", "live", [50.0], duration_ms=HELD_MS, invocations=2100)
    stub = Stubber(aws.lambda_)
    _account(stub, times=2)
    with stub:
        runtime = WarmerRuntime.build(aws, config)
        run_once(NOW, None, config, runtime=runtime)
        assert _level(aws) == "L0"
        # saturated: peak 50 and 5,000 x 600 ms / 60 s = 50 in flight all minute
        _put_load(aws.cloudwatch, "agent", "live", [50.0], end=END + dt.timedelta(minutes=1),
                  duration_ms=HELD_MS, invocations=5000)
        run_once(NOW + 60, None, config, runtime=runtime)
        assert _level(aws) == "L3"


def _throttle_ssm(client, names, operations=("GetParameter", "PutParameter")):
    """Answer ``operations`` on the parameters ``names`` with ThrottlingException on the real
    (moto-backed) client: a ``before-call`` hook short-circuits the request like a 400 would."""
    from botocore.awsrequest import AWSResponse

    hits: list[str] = []

    def throttle(params, model, **_):
        name = json.loads(params["body"] or b"{}").get("Name")
        if model.name in operations and name in names:
            hits.append(f"{model.name} {name}")
            return (AWSResponse("https://ssm.us-east-1.amazonaws.com/", 400, {}, None),
                    {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                     "ResponseMetadata": {"HTTPStatusCode": 400}})
        return None

    for op in operations:
        client.meta.events.register(f"before-call.ssm.{op}", throttle)
    return hits


def test_throttled_plan_store_does_not_abort_the_run(aws, caplog):
    """GIVEN SSM throttles the plan parameter of one alias WHEN the warmer runs THEN every alias
    is still planned and applied, the throttled one's plan lives on in memory, and
    tool_unavailable is logged."""
    for fn in ("agent", "other"):
        _put_load(aws.cloudwatch, fn, "live", np.full(720, 10.0))
    config = WarmerConfig.from_dict({"aliases": [
        {"function_name": fn, "alias": "live", "floor": 1, "cap": 40, "budget_usd_per_hour": 2}
        for fn in ("agent", "other")], "history_days": 0.5})
    hits = _throttle_ssm(aws.ssm, {"/warmstart/warmer/agent/live/plan"})
    stub = Stubber(aws.lambda_)
    _account(stub, times=2)
    with stub, caplog.at_level(logging.INFO, logger="warmstart.warmer"):
        runtime = WarmerRuntime.build(aws, config)
        agent, other = run_once(NOW, None, config, runtime=runtime)
        assert agent.action == other.action == "provisioned"
        assert _min_capacity(aws.application_autoscaling, "agent") == agent.provisioned_concurrency
        assert _min_capacity(aws.application_autoscaling, "other") == other.provisioned_concurrency
        assert runtime.store.load("agent", "live") == agent  # the in-memory last plan
        saved = aws.ssm.get_parameter(Name="/warmstart/warmer/other/live/plan")
        assert json.loads(saved["Parameter"]["Value"])["provisioned_concurrency"] == \
            other.provisioned_concurrency
        # the next run in this environment still sees agent's last plan (hysteresis input)
        again = run_once(NOW + 60, None, config, runtime=runtime)[0]
        assert again.changed_at_s == agent.changed_at_s
    assert "GetParameter /warmstart/warmer/agent/live/plan" in hits
    assert "PutParameter /warmstart/warmer/agent/live/plan" in hits
    messages = [json.loads(r.getMessage()) for r in caplog.records]
    sources = {m.get("source") for m in messages if m.get("tag") == "tool_unavailable"}
    assert {"ssm:GetParameter", "ssm:PutParameter"} <= sources


def test_idle_alias_heads_for_the_floor_but_a_throttled_read_keeps_the_plan(aws):
    """GIVEN an alias planned at PC > floor WHEN CloudWatch is throttled THEN the last good plan
    is kept (fallback); WHEN CloudWatch answers with no data point over the whole window (no
    invocation: Lambda publishes nothing) THEN the plan goes to the floor, saying why."""
    _put_load(aws.cloudwatch, "agent", "live", np.full(720, 12.0))
    config = WarmerConfig.from_dict({"aliases": [
        {"function_name": "agent", "alias": "live", "floor": 1, "cap": 40,
         "budget_usd_per_hour": 2}], "history_days": 0.5})
    later = NOW + 86_400  # the 12-hour window now holds no data point at all
    stub = Stubber(aws.lambda_)
    _account(stub, times=3)
    with stub:
        runtime = WarmerRuntime.build(aws, config)
        busy = run_once(NOW, None, config, runtime=runtime)[0]
        assert busy.action == "provisioned" and busy.provisioned_concurrency >= 12
        throttled = Stubber(aws.cloudwatch)
        throttled.add_client_error("get_metric_data", "Throttling", http_status_code=400)
        with throttled:
            kept = run_once(later, None, config, runtime=runtime)[0]
        assert kept.fallback and kept.provisioned_concurrency == busy.provisioned_concurrency
        assert "metrics unavailable" in kept.reason
        idle = run_once(later + 60, None, config, runtime=runtime)[0]
    assert not idle.fallback and idle.provisioned_concurrency == 1  # the floor
    assert "zero traffic" in idle.reason and "no data point" in idle.reason
    # the actuator lowers the minimum by a scheduled action (after the forecast's hold)
    assert any("-> 1 scheduled" in r.detail for r in runtime.last_results)


def _throttle_aas(client, resource_ids, times):
    """ThrottlingException on the real (moto-backed) Application Auto Scaling client for calls
    that name one of ``resource_ids``, ``times[rid]`` times each (None: always)."""
    from botocore.awsrequest import AWSResponse

    hits: list[str] = []

    def throttle(params, model, **_):
        body = json.loads(params["body"] or b"{}")
        rid = body.get("ResourceId") or (body.get("ResourceIds") or [None])[0]
        left = times.get(rid, 0)
        if rid in resource_ids and (left is None or left > 0):
            if left is not None:
                times[rid] = left - 1
            hits.append(f"{model.name} {rid}")
            return (AWSResponse("https://application-autoscaling.us-east-1.amazonaws.com/", 400,
                                {}, None),
                    {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                     "ResponseMetadata": {"HTTPStatusCode": 400}})
        return None

    client.meta.events.register("before-call.application-autoscaling", throttle)
    return hits


def test_apply_retries_a_throttled_api_and_one_aliases_failure_spares_the_others(aws, caplog):
    """GIVEN three aliases WHEN Application Auto Scaling throttles a's calls twice and b's
    always THEN a is applied after retries (warmers.retry), b is not applied and its plan not
    saved (tool_unavailable logged), c is applied as if nothing happened."""
    from warmers.actuators import AutoScalingActuator

    for fn in ("a", "b", "c"):  # 90 minutes: moto's GetMetricData grows with the points
        _put_load(aws.cloudwatch, fn, "live", np.full(90, 10.0), duration_ms=HELD_MS)
    config = WarmerConfig.from_dict({"aliases": [
        {"function_name": fn, "alias": "live", "cap": 40, "budget_usd_per_hour": 2}
        for fn in ("a", "b", "c")], "history_days": 90 / 1440, "unreserved_concurrency": 900})
    times = {"function:a:live": 2, "function:b:live": None}
    hits = _throttle_aas(aws.application_autoscaling, set(times), times)
    slept: list[float] = []
    runtime = WarmerRuntime.build(aws, config)
    runtime.pc_actuator = AutoScalingActuator(aws.application_autoscaling, hold_s=1200.0,
                                              lambda_client=aws.lambda_, sleep=slept.append)
    with caplog.at_level(logging.INFO, logger="warmstart.warmer"):
        a, b, c = run_once(NOW, None, config, runtime=runtime)
    assert a.action == b.action == c.action == "provisioned"
    times["function:b:live"] = 0  # the checks below read b unthrottled
    assert _min_capacity(aws.application_autoscaling, "a") == a.provisioned_concurrency
    assert _min_capacity(aws.application_autoscaling, "c") == c.provisioned_concurrency
    assert _min_capacity(aws.application_autoscaling, "b") is None
    assert hits.count("DescribeScalableTargets function:a:live") == 2
    assert len([h for h in hits if h.endswith("function:b:live")]) == 5  # the attempts, spent
    assert len(slept) == 2 + 4 and all(0.0 <= s <= 3.0 for s in slept)
    assert runtime.store.load("a", "live") == a and runtime.store.load("b", "live") is None
    errors = [json.loads(r.getMessage()) for r in caplog.records if r.levelno == logging.ERROR]
    assert [(m["alias"], m["tag"]) for m in errors] == [("b:live", "tool_unavailable")]
    assert "ThrottlingException" in errors[0]["message"]


def test_dry_run_plans_but_applies_saves_and_publishes_nothing(aws):
    _put_load(aws.cloudwatch, "agent", "live", np.full(90, 10.0), duration_ms=HELD_MS)
    config = WarmerConfig.from_dict(CONFIG, dry_run=True)
    stub = Stubber(aws.lambda_)
    _account(stub)
    with stub:
        runtime = WarmerRuntime.build(aws, config)
        agent, quiet = run_once(NOW, None, config, runtime=runtime)
    assert agent.action == "provisioned" and agent.provisioned_concurrency >= 10
    assert runtime.last_run is not None and runtime.last_run.plans == [agent, quiet]
    assert runtime.last_run.aliases[0].degradation_level == "L0"  # planned, not published
    assert runtime.last_results == []
    assert _min_capacity(aws.application_autoscaling, "agent") is None
    assert aws.ssm.describe_parameters()["Parameters"] == []
