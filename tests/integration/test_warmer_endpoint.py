"""The GPU overflow endpoint's capacity, planned and applied by the warmer, against moto
(CloudWatch metrics, SageMaker endpoint, Application Auto Scaling, SSM); Lambda's
GetAccountSettings, which moto lacks, through botocore Stubber; a throttled or refused
Application Auto Scaling through a botocore ``before-call`` hook on the real client."""

from __future__ import annotations

import json

import boto3
import numpy as np
import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from moto import mock_aws

from functions.runtime.overflow_capacity import OverflowCapacity
from tests.integration.test_warmer_handler import END, NOW, _account, _put_load
from warmers.actuators import EndpointCapacityActuator
from warmers.config import WarmerConfig
from warmers.runner import WarmerClients, WarmerRuntime, run_once

ENDPOINT = "warmstart-overflow"
RESOURCE = f"endpoint/{ENDPOINT}/variant/AllTraffic"
PARAMETER = "/warmstart/app/overflow-capacity"
MINUTES = 240


def config(**endpoint: object) -> WarmerConfig:
    return WarmerConfig.from_dict({
        "aliases": [
            {"function_name": "intent", "alias": "live", "strategy": "snapstart",
             "memory_mb": 2048},
            {"function_name": "lookup", "alias": "live", "strategy": "none", "memory_mb": 512},
        ],
        "endpoints": [{"endpoint_name": ENDPOINT, "agents": ["intent:live", "lookup:live"],
                       "cap": 3, "budget_usd_per_hour": 5.0, "capacity_parameter": PARAMETER}
                      | endpoint],
        "history_days": MINUTES / 1440,
    })


def bursts(peak: float, every: int = 7) -> np.ndarray:
    """1 in flight, ``peak`` once every ``every`` minutes, the last minutes calm: the forecast
    sees the next burst coming while the environments warm now are few."""
    values = np.ones(MINUTES)
    values[np.arange(MINUTES) % every == 0] = peak
    values[-5:] = 1.0
    return values


@pytest.fixture
def aws():
    with mock_aws():
        kw = {"region_name": "us-east-1"}
        sm = boto3.client("sagemaker", **kw)
        sm.create_model(ModelName="overflow-model", ExecutionRoleArn=(
            "arn:aws:iam::123456789012:role/sagemaker"),
            PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu:1"})
        sm.create_endpoint_config(EndpointConfigName="overflow-config", ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "overflow-model",
            "InitialInstanceCount": 1, "InstanceType": "ml.g4dn.xlarge"}])  # moto lacks g6
        sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="overflow-config")
        yield WarmerClients(cloudwatch=boto3.client("cloudwatch", **kw),
                            lambda_=boto3.client("lambda", **kw),
                            application_autoscaling=boto3.client("application-autoscaling",
                                                                 **kw),
                            ssm=boto3.client("ssm", **kw), sagemaker=sm)


def _runtime(aws: WarmerClients, cfg: WarmerConfig) -> WarmerRuntime:
    runtime = WarmerRuntime.build(aws, cfg)
    runtime.endpoint_actuator = EndpointCapacityActuator(
        aws.application_autoscaling, aws.sagemaker, sleep=lambda _s: None)
    return runtime


def _run(aws: WarmerClients, cfg: WarmerConfig, runtime: WarmerRuntime, now: float) -> None:
    with Stubber(aws.lambda_) as stub:
        _account(stub)
        run_once(now, None, cfg, runtime=runtime)


def _target(aws: WarmerClients) -> tuple[int, int] | None:
    rows = aws.application_autoscaling.describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[RESOURCE],
        ScalableDimension="sagemaker:variant:DesiredInstanceCount")["ScalableTargets"]
    return (rows[0]["MinCapacity"], rows[0]["MaxCapacity"]) if rows else None


def _published(aws: WarmerClients) -> OverflowCapacity:
    raw = aws.ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"]
    return OverflowCapacity.parse(raw)  # what the handlers parse


def _saved(aws: WarmerClients) -> dict[str, object]:
    name = f"/warmstart/warmer/sagemaker/endpoint/{ENDPOINT}/plan"
    return json.loads(aws.ssm.get_parameter(Name=name)["Parameter"]["Value"])


def _refuse(client: object, operation: str, code: str) -> list[str]:
    """Answer ``operation`` of the real ``client`` with the AWS error ``code``; returns the
    list of refused calls."""
    refused: list[str] = []

    def answer(**_kwargs: object) -> tuple[AWSResponse, dict[str, object]]:
        refused.append(operation)
        return (AWSResponse("https://application-autoscaling.us-east-1.amazonaws.com", 400,
                            {}, None),
                {"Error": {"Code": code, "Message": "Rate exceeded"},
                 "ResponseMetadata": {"HTTPStatusCode": 400}})

    service = client.meta.service_model.service_id.hyphenize()  # type: ignore[attr-defined]
    client.meta.events.register(f"before-call.{service}.{operation}", answer)  # type: ignore[attr-defined]
    return refused


def test_capacity_is_raised_ahead_of_a_forecast_rise_and_published(aws):
    # GIVEN two agents (SnapStart and on demand: no PC to cover their cold starts) whose
    # history has a burst of 8 and 4 every 7 minutes, calm now
    _put_load(aws.cloudwatch, "intent", "live", bursts(8.0))
    _put_load(aws.cloudwatch, "lookup", "live", bursts(4.0))
    cfg = config()
    runtime = _runtime(aws, cfg)
    # WHEN the warmer runs
    _run(aws, cfg, runtime, NOW)
    entry = runtime.last_run.endpoint(ENDPOINT)
    steps = {s.name: s.value for s in entry.steps}
    # THEN the new environments the bursts need (forecast peak - what is warm) are the overflow
    # demand, the instances that answer it (4 at once each) are wanted and capped at 3
    assert steps["new_environments[intent:live]"] == 7
    assert steps["new_environments[lookup:live]"] == 3
    assert steps["overflow_concurrency"] == 10 and steps["instances_wanted"] == 3
    assert entry.plan.pays and entry.plan.capacity == 3
    assert entry.plan.hourly_cost_usd == pytest.approx(3 * 1.1267)
    # and Application Auto Scaling holds the variant at exactly that
    assert _target(aws) == (3, 3)
    # the handlers read what serves now (moto's endpoint keeps its 1 instance)
    assert _published(aws) == OverflowCapacity(1, "in_service", NOW)
    assert _saved(aws)["capacity"] == 3
    # WHEN the warmer runs again a minute later THEN the same capacity, and the state, which
    # has not changed, is not rewritten
    _run(aws, cfg, runtime, NOW + 60)
    assert runtime.last_run.endpoint(ENDPOINT).plan.capacity == 3
    assert _published(aws).at_s == NOW


def test_an_endpoint_that_does_not_pay_is_held_at_the_least_a_variant_allows(aws):
    # GIVEN the same bursts, and a failed answer valued at a tenth of a cent
    _put_load(aws.cloudwatch, "intent", "live", bursts(8.0))
    _put_load(aws.cloudwatch, "lookup", "live", bursts(4.0))
    cfg = config(failed_answer_usd=0.001)
    runtime = _runtime(aws, cfg)
    _run(aws, cfg, runtime, NOW)
    plan = runtime.last_run.endpoint(ENDPOINT).plan
    # THEN 3 instances ($3.38/h) cost more than the failed answers they prevent: 0 wanted,
    # and the variant is held at 1, the least Application Auto Scaling lets it hold
    assert not plan.pays and plan.capacity == 1
    assert plan.alternative_usd_per_hour < 3 * 1.1267
    assert "does not pay: 3 instance(s) $3.3801/h" in plan.reason
    assert "only inference components scale to zero" in plan.reason
    assert _target(aws) == (1, 1)


@pytest.mark.parametrize("code", ["ThrottlingException", "AccessDeniedException"])
def test_a_throttled_or_refused_scaling_api_keeps_the_last_capacity_state_unknown(aws, code):
    _put_load(aws.cloudwatch, "intent", "live", bursts(8.0))
    _put_load(aws.cloudwatch, "lookup", "live", bursts(4.0))
    cfg = config()
    runtime = _runtime(aws, cfg)
    _run(aws, cfg, runtime, NOW)
    assert _target(aws) == (3, 3) and _published(aws).state == "in_service"
    # WHEN Application Auto Scaling refuses every RegisterScalableTarget
    refused = _refuse(aws.application_autoscaling, "RegisterScalableTarget", code)
    _put_load(aws.cloudwatch, "intent", "live", bursts(16.0), end=END)
    _run(aws, cfg, runtime, NOW + 60)
    # THEN throttling was retried (5 attempts) and a refusal was not; nothing changed
    assert len(refused) == (5 if code == "ThrottlingException" else 1)
    assert _target(aws) == (3, 3)
    result = runtime.last_results[-1]
    assert not result.applied and "last capacity 1 kept, state unknown" in result.detail
    # the handlers read "unknown" (and degrade), with the last capacity known
    assert _published(aws) == OverflowCapacity(1, "unknown", NOW + 60)
    assert not _published(aws).available
    # the plan not applied is not the last good one
    assert _saved(aws)["issued_at_s"] == NOW


def test_a_throttled_describe_endpoint_publishes_unknown(aws):
    _put_load(aws.cloudwatch, "intent", "live", bursts(8.0))
    _put_load(aws.cloudwatch, "lookup", "live", bursts(4.0))
    cfg = config()
    runtime = _runtime(aws, cfg)
    _refuse(aws.sagemaker, "DescribeEndpoint", "ThrottlingException")
    _run(aws, cfg, runtime, NOW)
    assert _target(aws) == (3, 3)
    assert _published(aws) == OverflowCapacity(0, "unknown", NOW)


def test_a_fresh_environment_resumes_with_the_saved_endpoint_plan(aws, caplog):
    from warmers.plan.endpoint import EndpointPlan
    from warmers.state import SsmPlanStore

    plan = EndpointPlan(ENDPOINT, 2, 2 * 1.1267, 6.0, 72.0, float("inf"), True, NOW, NOW - 60,
                        "test", recent_wanted=((NOW, 2),))
    SsmPlanStore(aws.ssm, "/warmstart/warmer").save_endpoint(plan)
    # a new execution environment (empty memory) reads it back from SSM
    assert SsmPlanStore(aws.ssm, "/warmstart/warmer").load_endpoint(ENDPOINT) == plan
    assert SsmPlanStore(aws.ssm, "/warmstart/warmer").load_endpoint("other") is None
    # a malformed saved plan is ignored, said so
    aws.ssm.put_parameter(Name=f"/warmstart/warmer/sagemaker/endpoint/{ENDPOINT}/plan",
                          Value='{"capacity": "two"}', Type="String", Overwrite=True)
    assert SsmPlanStore(aws.ssm, "/warmstart/warmer").load_endpoint(ENDPOINT) is None
    assert "saved endpoint plan is malformed" in caplog.text


def test_the_sagemaker_actuator_sets_a_variants_instances_through_moto(aws: WarmerClients) -> None:
    """``SageMakerCapacityActuator`` on the production variant (moto's SageMaker answers
    ``UpdateEndpointWeightsAndCapacities``): the plan becomes the desired instance count, a
    plan equal to it sends nothing, and what serves is read back."""
    from warmers.actuators import SageMakerCapacityActuator
    from warmers.plan.endpoint import EndpointPlan, EndpointPolicy

    sent: list[dict[str, object]] = []
    aws.sagemaker.meta.events.register(
        "before-call.sagemaker.UpdateEndpointWeightsAndCapacities",
        lambda params, **_: sent.append(params))
    policy = EndpointPolicy(ENDPOINT, ("intent:live",))

    def plan(n: int) -> EndpointPlan:
        return EndpointPlan(ENDPOINT, n, 1.1267 * n, 1.0, 12.0, float("inf"), True, 0.0, 0.0, "t")

    actuator = SageMakerCapacityActuator(aws.sagemaker, sleep=lambda _s: None)
    result, state = actuator.apply(plan(2), policy, now_s=NOW, last=None)
    assert result.applied and (state.capacity, state.state) == (2, "in_service")
    assert len(sent) == 1
    variant = aws.sagemaker.describe_endpoint(EndpointName=ENDPOINT)["ProductionVariants"][0]
    assert variant["DesiredInstanceCount"] == 2
    result, same = actuator.apply(plan(2), policy, now_s=NOW + 60, last=state)
    assert result.applied and len(sent) == 1 and same == state  # nothing to change: no call
