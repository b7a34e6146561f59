"""Warmer construct in a minimal test stack: function + layer + schedule + scoped IAM, cdk-nag.

The stack also gives the warmer a second scaling scope (a SageMaker variant), as the GPU
endpoint's scalable target would: its grant is its own namespace, dimension and alarm prefix."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from infra.constructs.nag import acknowledge
from infra.constructs.warmer import ScalingScope, Warmer, WarmerPropsError, WarmerTarget

pytestmark = pytest.mark.slow


SAGEMAKER_SCOPE = ScalingScope("sagemaker", "sagemaker:variant:DesiredInstanceCount",
                               ("TargetTracking-endpoint/warmstart-gpu/variant/AllTraffic-",))


def _agent(stack: cdk.Stack) -> tuple[lambda_.Function, lambda_.Alias, ssm.StringParameter]:
    fn = lambda_.Function(stack, "Agent", runtime=lambda_.Runtime.PYTHON_3_12,
                          handler="index.handler", function_name="agent-fn",
                          code=lambda_.Code.from_inline("def handler(e, c):\n    return e\n"))
    acknowledge(fn, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole]",
                "test-only stand-in for the agent: the managed basic execution role is Lambda's "
                "default")
    acknowledge(fn, "AwsSolutions-L1",
                "test-only stand-in for the agent: its runtime is irrelevant to the warmer under "
                "test")
    alias = lambda_.Alias(stack, "Live", alias_name="live", version=fn.current_version)
    param = ssm.StringParameter(stack, "Level", parameter_name="/warmstart/agent/degradation-level",
                                string_value="L0")
    return fn, alias, param


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")),
                  context={"aws:cdk:bundling-stacks": []})
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "WarmerTestStack",
                      env=cdk.Environment(account="123456789012", region="us-east-1"))
    fn, alias, param = _agent(stack)
    Warmer(stack, "Warmer", targets=[WarmerTarget(
        function=fn, alias_name=alias.alias_name, floor=1, cap=20, budget_usd_per_hour=2.0,
        degradation_parameter=param, objective="sla")], scaling_scopes=[SAGEMAKER_SCOPE])
    app.synth()  # unacknowledged cdk-nag findings fail here
    return Template.from_stack(stack)


def test_function_layer_and_config(template: Template) -> None:
    template.has_resource_properties("AWS::Lambda::Function", {
        "Handler": "warmers.handler.handler", "Runtime": "python3.12",
        "ReservedConcurrentExecutions": 1,
        "Layers": [{"Ref": Match.string_like_regexp("WarmerForecastLayer")}],
        "Environment": {"Variables": {
            "WARMSTART_WARMER_CONFIG": Match.any_value(),
            "WARMSTART_WARMER_STATE_PREFIX": "/warmstart/warmer"}},
    })
    template.resource_count_is("AWS::Lambda::LayerVersion", 1)
    (warmer,) = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "warmers.handler.handler"}}).values()
    # the config is JSON whose function name is the agent's Ref, resolved at deploy time
    text = json.dumps(warmer["Properties"]["Environment"]["Variables"]["WARMSTART_WARMER_CONFIG"])
    assert '\\"alias\\":\\"live\\"' in text and '"Ref": "Agent' in text
    assert '\\"floor\\":1' in text and '\\"cap\\":20' in text
    assert '\\"objective\\":\\"sla\\"' in text  # the planner's AliasPolicy.objective


def test_schedule_every_minute_targets_the_warmer_alias(template: Template) -> None:
    template.has_resource_properties("AWS::Scheduler::Schedule", {
        "ScheduleExpression": "rate(1 minute)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {"Arn": {"Ref": Match.string_like_regexp("WarmerAlias")},
                   "RetryPolicy": {"MaximumRetryAttempts": 0}},
    })


def test_iam_is_scoped_to_the_alias_targets_and_parameters(template: Template) -> None:
    policies = template.find_resources("AWS::IAM::Policy")
    statements = [s for p in policies.values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    by_sid = {s.get("Sid"): s for s in statements if s.get("Sid")}
    alias_res = json.dumps(by_sid["ManagedAliases"]["Resource"])
    assert ":live" in alias_res and "$LATEST" not in alias_res
    assert "lambda:PutProvisionedConcurrencyConfig" in by_sid["ManagedAliases"]["Action"]
    # Application Auto Scaling writes: scalable-target/* (random ids), Lambda PC only by condition
    lambda_targets = by_sid["ScalableTargetsLambdaFunctionProvisionedConcurrency"]
    assert "scalable-target/*" in json.dumps(lambda_targets["Resource"])
    assert lambda_targets["Condition"] == {"StringEquals": {
        "application-autoscaling:service-namespace": "lambda",
        "application-autoscaling:scalable-dimension": "lambda:function:ProvisionedConcurrency"}}
    assert "application-autoscaling:RegisterScalableTarget" in lambda_targets["Action"]
    # target-tracking alarms: only those of the managed alias function:<agent fn>:live
    alarms = by_sid["TargetTrackingAlarmsLambdaFunctionProvisionedConcurrency"]
    assert sorted(alarms["Action"]) == [
        "cloudwatch:DeleteAlarms", "cloudwatch:DescribeAlarms", "cloudwatch:PutMetricAlarm"]
    [agent_fn] = template.find_resources("AWS::Lambda::Function",
                                         {"Properties": {"Handler": "index.handler"}})
    parts = alarms["Resource"]["Fn::Join"][1]
    assert parts[-3].endswith(":alarm:TargetTracking-function:")
    assert parts[-2:] == [{"Ref": agent_fn}, ":live-*"]
    # every scaling write is under a namespace/dimension condition; no broad alarm grant is left
    writes = [st for st in statements if "application-autoscaling:PutScalingPolicy"
              in json.dumps(st["Action"])]
    assert len(writes) == 2 and all("Condition" in st for st in writes)
    assert "TargetTracking-function:*" not in json.dumps(statements)
    # the second scope (a SageMaker variant) gets its own dimension and alarm prefix
    sagemaker = by_sid["ScalableTargetsSagemakerVariantDesiredInstanceCount"]
    assert sagemaker["Condition"]["StringEquals"] == {
        "application-autoscaling:service-namespace": "sagemaker",
        "application-autoscaling:scalable-dimension": "sagemaker:variant:DesiredInstanceCount"}
    assert "TargetTracking-endpoint/warmstart-gpu/variant/AllTraffic-*" in json.dumps(
        by_sid["TargetTrackingAlarmsSagemakerVariantDesiredInstanceCount"]["Resource"])
    assert by_sid["AutoScalingServiceLinkedRole"]["Condition"] == {
        "StringLike": {"iam:AWSServiceName": "lambda.application-autoscaling.amazonaws.com"}}
    assert "parameter/warmstart/warmer/*" in json.dumps(by_sid["PlanState"]["Resource"])
    # the degradation parameter: read and write for the warmer, nothing broader
    put = [s for s in statements if "ssm:PutParameter" in json.dumps(s.get("Action"))]
    assert any("Level" in json.dumps(s["Resource"]) for s in put)
    wildcard = [s for s in statements if s["Resource"] == "*"]
    assert {a for s in wildcard for a in ([s["Action"]] if isinstance(s["Action"], str)
                                          else s["Action"])} == {
        "cloudwatch:GetMetricData", "lambda:GetAccountSettings",
        "application-autoscaling:DescribeScalableTargets",
        "application-autoscaling:DescribeScalingPolicies",
        "application-autoscaling:DescribeScheduledActions"}


@pytest.mark.parametrize("kwargs, message", [
    ({}, "at least one target"),
    ({"alias": "$LATEST"}, "never $LATEST"),
    ({"actuator": "magic"}, "actuator must be"),
    ({"floor": 5, "cap": 1}, "floor <= cap"),
])
def test_invalid_props_raise_exact_message(kwargs: dict, message: str) -> None:
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    stack = cdk.Stack(app, "Bad")
    fn, _, _ = _agent(stack)
    targets = [] if not kwargs else [WarmerTarget(
        function=fn, alias_name=kwargs.get("alias", "live"), floor=kwargs.get("floor", 0),
        cap=kwargs.get("cap", 10))]
    with pytest.raises(WarmerPropsError, match=message.replace("$", r"\$")):
        Warmer(stack, "Warmer", targets=targets, actuator=kwargs.get("actuator", "autoscaling"))


def test_a_scaling_scope_needs_its_alarm_prefixes_and_is_added_once() -> None:
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    stack = cdk.Stack(app, "Scopes")
    fn, _, _ = _agent(stack)
    warmer = Warmer(stack, "Warmer", targets=[WarmerTarget(function=fn, alias_name="live")])
    with pytest.raises(WarmerPropsError, match=(
            "scaling scope sagemaker:variant:DesiredInstanceCount needs the alarm name prefixes "
            "of the resources it manages")):
        warmer.allow_scaling(ScalingScope("sagemaker", "sagemaker:variant:DesiredInstanceCount", ()))
    with pytest.raises(WarmerPropsError, match=(
            "scaling scope lambda:function:ProvisionedConcurrency is already allowed")):
        warmer.allow_scaling(ScalingScope("lambda", "lambda:function:ProvisionedConcurrency",
                                          ("TargetTracking-function:x:live-",)))


def test_an_endpoint_capacity_the_document_or_its_price_refuses_is_refused_at_synth() -> None:
    from infra.constructs.warmer import EndpointTarget

    stack = cdk.Stack(cdk.App(), "EndpointTargetStack")
    fn, alias, param = _agent(stack)
    target = WarmerTarget(function=fn, alias_name=alias.alias_name)

    def endpoint(**options: object) -> EndpointTarget:
        return EndpointTarget("gpu", "AllTraffic", "arn:endpoint", "arn:config", (target,), param,
                              options=options)

    doc = endpoint(cap=3, failed_answer_usd=0.01).to_json()
    assert doc["cap"] == 3 and doc["capacity_parameter"] == param.parameter_name
    for options, message in (({"floor": 4, "cap": 3}, "need 0 <= floor <= cap"),
                             ({"surge": 1}, r"unknown keys \['surge'\]"),
                             ({"budget_usd_per_hour": 1.0, "floor": 1}, "floor 1 costs")):
        with pytest.raises(WarmerPropsError, match=f"gpu_endpoint.capacity: .*{message}"):
            endpoint(**options).to_json()


def test_an_inference_component_endpoint_passes_its_target_and_needs_its_arn() -> None:
    from infra.constructs.warmer import EndpointTarget

    stack = cdk.Stack(cdk.App(context={"aws:cdk:bundling-stacks": []}), "IcTargetStack")
    fn, alias, param = _agent(stack)
    target = WarmerTarget(function=fn, alias_name=alias.alias_name)
    endpoint = EndpointTarget("gpu", "AllTraffic", "arn:endpoint", "arn:config", (target,), param,
                              options={"cap": 2}, target="inference_component",
                              inference_component="gpu-model")
    assert endpoint.resource_id == "inference-component/gpu-model"
    assert endpoint.scalable_dimension == "sagemaker:inference-component:DesiredCopyCount"
    doc = endpoint.to_json()  # accepted by the planner's EndpointPolicy
    assert (doc["target"], doc["inference_component"]) == ("inference_component", "gpu-model")
    # a variant's entry stays as it was: no target key (EndpointPolicy's default)
    assert "target" not in EndpointTarget("gpu", "AllTraffic", "arn:endpoint", "arn:config",
                                          (target,), param).to_json()
    with pytest.raises(WarmerPropsError, match="gpu_endpoint.capacity: .*target "
                                               "inference_component needs inference_component"):
        EndpointTarget("gpu", "AllTraffic", "arn:e", "arn:c", (target,), param,
                       target="inference_component").to_json()
    with pytest.raises(WarmerPropsError, match=(
            "endpoint gpu: target inference_component needs inference_component_arn")):
        Warmer(stack, "Warmer", targets=[target], endpoints=[endpoint])


def test_the_constructs_resource_ids_are_the_warmers() -> None:
    """The ids the construct grants (the alias's alarm prefix, the endpoint's scalable target)
    are the ones the warmer's actuators and planner call: both sides use the contract's rule."""
    from infra.constructs.warmer import EndpointTarget, lambda_scope
    from warmers.actuators import resource_id
    from warmers.plan.endpoint import EndpointPolicy

    stack = cdk.Stack(cdk.App(context={"aws:cdk:bundling-stacks": []}), "IdsStack")
    fn, alias, param = _agent(stack)
    target = WarmerTarget(function=fn, alias_name=alias.alias_name)
    assert lambda_scope([target]).alarm_name_prefixes == (
        f"TargetTracking-{resource_id(fn.function_name, 'live')}-",)
    for kwargs in ({}, {"target": "inference_component", "inference_component": "gpu-model"}):
        endpoint = EndpointTarget("gpu", "AllTraffic", "arn:e", "arn:c", (target,), param,
                                  **kwargs)
        policy = EndpointPolicy(endpoint_name="gpu", agents=("agent-fn:live",), **kwargs)
        assert (endpoint.resource_id, endpoint.scalable_dimension) == (
            policy.resource_id, policy.scalable_dimension)
