"""GpuEndpoint construct in a minimal test stack: resources, grant scope, config errors, cdk-nag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from infra.config import GpuEndpointConfig
from infra.constructs.gpu_endpoint import (
    GpuEndpoint,
    GpuEndpointConfigError,
    default_endpoint_name,
    validate_config,
)
from infra.constructs.nag import acknowledge

pytestmark = pytest.mark.slow


def _config(instance_type: str = "ml.g6.xlarge", **options: object) -> GpuEndpointConfig:
    return GpuEndpointConfig(enabled=True, instance_type=instance_type,
                             model_asset="layers/model/artifact",
                             options=MappingProxyType(dict(options)))


def _function(stack: cdk.Stack, name: str) -> lambda_.Function:
    fn = lambda_.Function(stack, name, runtime=lambda_.Runtime.PYTHON_3_13,
                          handler="index.handler",
                          code=lambda_.Code.from_inline("def handler(e, c):\n    return e\n"))
    acknowledge(fn, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole]",
                "test-only stand-in for the agent: the managed basic execution role is Lambda's default")
    acknowledge(fn, "AwsSolutions-L1",
                "test-only stand-in for the agent: its runtime is irrelevant to the endpoint under test")
    return fn


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Template]:
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")),
                  context={"aws:cdk:bundling-stacks": []})
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    # GIVEN a stack with the agent function, another function and the endpoint built from the repo
    asset_stack = cdk.Stack(app, "GpuAssetStack")
    agent = _function(asset_stack, "Agent")
    _function(asset_stack, "Other")
    GpuEndpoint(asset_stack, "GpuEndpoint", config=_config()).connect(agent)
    # and one with a prebuilt image on a GPU type without instance storage
    image_stack = cdk.Stack(app, "GpuImageStack")
    fn = _function(image_stack, "Agent")
    GpuEndpoint(image_stack, "GpuEndpoint",
                config=_config("ml.p3.2xlarge", image_uri="123456789012.dkr.ecr.us-east-1."
                               "amazonaws.com/warmstart-gpu:1", initial_instance_count=2,
                               endpoint_name="warmstart-overflow")
                ).connect(fn)
    app.synth()  # cdk-nag findings that are not acknowledged fail here
    return {"asset": Template.from_stack(asset_stack), "image": Template.from_stack(image_stack)}


def test_model_config_and_endpoint_with_gpu_instance(synth: dict[str, Template]) -> None:
    t = synth["asset"]
    t.resource_count_is("AWS::SageMaker::Model", 1)
    t.resource_count_is("AWS::SageMaker::Endpoint", 1)
    t.has_resource_properties("AWS::SageMaker::EndpointConfig", {
        "ProductionVariants": [Match.object_like({
            "InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1,
            "VariantName": "AllTraffic"})],
        "KmsKeyId": Match.absent(),  # g6 has NVMe instance storage
    })
    t.has_resource_properties("AWS::SageMaker::Model", {
        "PrimaryContainer": Match.object_like({
            "Image": Match.any_value(), "Mode": "SingleModel",
            "Environment": {"WARMSTART_MODEL_DIR": "/opt/model", "ORT_DISABLE_TELEMETRY": "1"}}),
        "ExecutionRoleArn": Match.any_value(),
    })
    t.has_resource_properties("AWS::IAM::Role", {"AssumeRolePolicyDocument": Match.object_like({
        "Statement": [Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})]})})


def test_invoke_granted_to_the_agent_function_only(synth: dict[str, Template]) -> None:
    t = synth["asset"]
    policies = t.find_resources("AWS::IAM::Policy")
    invokers = []
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "sagemaker:InvokeEndpoint" in str(statement["Action"]):
                assert statement["Action"] == "sagemaker:InvokeEndpoint"
                assert "GpuEndpoint" in statement["Resource"]["Ref"]  # this endpoint's ARN only
                invokers.append(policy["Properties"]["Roles"])
    assert len(invokers) == 1
    [roles] = invokers
    assert len(roles) == 1 and "AgentServiceRole" in roles[0]["Ref"]
    t.has_resource_properties("AWS::Lambda::Function", {"Environment": {"Variables": {
        "WARMSTART_OVERFLOW_ENDPOINT_NAME": {"Fn::GetAtt": [Match.any_value(), "EndpointName"]}}}})
    functions = t.find_resources("AWS::Lambda::Function")
    with_env = [f for f in functions.values() if "Environment" in f["Properties"]]
    assert len(with_env) == 1


def _log_statement(t: Template) -> dict:
    [statement] = [st for p in t.find_resources("AWS::IAM::Policy").values()
                   for st in p["Properties"]["PolicyDocument"]["Statement"]
                   if "logs:PutLogEvents" in st["Action"]]
    return statement


def test_the_endpoint_has_a_fixed_name_and_its_role_writes_only_its_log_group(
        synth: dict[str, Template]) -> None:
    for stack, name in (("asset", "GpuAssetStack-GpuEndpoint"), ("image", "warmstart-overflow")):
        t = synth[stack]
        t.has_resource_properties("AWS::SageMaker::Endpoint", {"EndpointName": name})
        statement = _log_statement(t)
        resources = [r["Fn::Join"][1][-1] for r in statement["Resource"]]
        assert resources == [f":log-group:/aws/sagemaker/Endpoints/{name}",
                             f":log-group:/aws/sagemaker/Endpoints/{name}:*"]
        assert "Endpoints/*" not in str(statement)
    assert default_endpoint_name("Warmstart", "GpuEndpoint") == "Warmstart-GpuEndpoint"
    assert default_endpoint_name("my_app.v2", "Gpu") == "my-app-v2-Gpu"
    assert len(default_endpoint_name("x" * 80, "GpuEndpoint")) == 63


def test_prebuilt_image_and_kms_key_without_instance_storage(synth: dict[str, Template]) -> None:
    t = synth["image"]
    t.has_resource_properties("AWS::SageMaker::Model", {"PrimaryContainer": Match.object_like({
        "Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/warmstart-gpu:1"})})
    t.has_resource_properties("AWS::SageMaker::EndpointConfig", {
        "KmsKeyId": Match.any_value(),
        "ProductionVariants": [Match.object_like({"InstanceType": "ml.p3.2xlarge",
                                                  "InitialInstanceCount": 2})]})
    t.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_config("ml.m5.large"), ("gpu_endpoint.instance_type 'ml.m5.large' is not a GPU "
                                  "instance type; use one of the families")),
        (_config("g5.xlarge"), ("'g5.xlarge' is not a SageMaker instance type "
                                "(expected ml.<family>.<size>, e.g. ml.g6.xlarge)")),
        (_config(initial_instance_count=0), "initial_instance_count must be an integer >= 1, got 0"),
        (GpuEndpointConfig(True, "ml.g5.xlarge", ""), "gpu_endpoint needs model_asset"),
        (_config(endpoint_name="-bad_name"), ("gpu_endpoint.endpoint_name '-bad_name' is not a "
                                              "SageMaker endpoint name: letters, digits and '-', "
                                              "starting and ending with a letter or digit, at most "
                                              "63 characters")),
    ],
)
def test_invalid_config_raises_exact_message(config: GpuEndpointConfig, message: str) -> None:
    with pytest.raises(GpuEndpointConfigError) as info:
        validate_config(config)
    assert message in str(info.value)


# --- target inference_component (scale to zero) -------------------------------------------------

IC_NAME = "warmstart-overflow-intent"


@pytest.fixture(scope="module")
def ic_synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[Template, Path]:
    """One stack: an agent alias overflowing to an endpoint whose target is an inference
    component, the warmer planning its copies; cdk-nag runs at synth, the template path is for
    cfn-lint."""
    from infra.constructs.warmer import Warmer, WarmerTarget, endpoint_target_for

    outdir = tmp_path_factory.mktemp("cdk-ic.out")
    app = cdk.App(outdir=str(outdir), context={"aws:cdk:bundling-stacks": []})
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "GpuIcStack")
    agent = _function(stack, "Agent")
    alias = lambda_.Alias(stack, "Live", alias_name="live", version=agent.current_version)
    endpoint = GpuEndpoint(stack, "GpuEndpoint", config=_config(
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/warmstart-gpu:1",
        endpoint_name="warmstart-overflow", target="inference_component",
        inference_component_name=IC_NAME, memory_per_copy_mb=2048,
        capacity={"floor": 0, "cap": 3, "budget_usd_per_hour": 5.0}))
    endpoint.manage_capacity()
    endpoint.connect(agent)
    target = WarmerTarget(function=agent, alias_name=alias.alias_name)
    # endpoint_target_for reads only each agent's declared overflow
    overflowing = SimpleNamespace(agent=SimpleNamespace(overflow="gpu"))
    Warmer(stack, "Warmer", targets=[target],
           endpoints=[endpoint_target_for(endpoint, [target], [overflowing])])
    # as AgentFunction does: the stand-in depends on its role's policy only, the role itself is
    # implied by GetAtt Role.Arn (cfn-lint W3005 on the stand-in, not on what is under test)
    policy = agent.role.node.find_child("DefaultPolicy").node.default_child  # type: ignore[union-attr]
    agent.node.default_child.add_override(  # type: ignore[union-attr]
        "DependsOn", [stack.get_logical_id(policy)])  # type: ignore[arg-type]
    app.synth()  # cdk-nag findings that are not acknowledged fail here
    return Template.from_stack(stack), outdir / "GpuIcStack.template.json"


def _statements(t: Template) -> list[dict[str, Any]]:
    return [st for p in t.find_resources("AWS::IAM::Policy").values()
            for st in p["Properties"]["PolicyDocument"]["Statement"]]


def _logical_id(t: Template, kind: str) -> str:
    [logical_id] = t.find_resources(kind)
    return logical_id


def test_inference_component_endpoint_config_names_no_model_and_scales_instances_to_zero(
        ic_synth: tuple[Template, Path]) -> None:
    t, _ = ic_synth
    [config] = t.find_resources("AWS::SageMaker::EndpointConfig").values()
    [role] = t.find_resources("AWS::IAM::Role", {"Properties": {"AssumeRolePolicyDocument": {
        "Statement": [Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})]}}})
    assert config["Properties"] == {
        "ExecutionRoleArn": {"Fn::GetAtt": [role, "Arn"]},
        "ProductionVariants": [{
            "VariantName": "AllTraffic", "InstanceType": "ml.g6.xlarge",
            "InitialInstanceCount": 1, "InitialVariantWeight": 1.0,
            "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0,
                                       "MaxInstanceCount": 3},  # capacity.cap
            "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}}],
    }
    # SageMaker uses the role from the endpoint's creation on: its policy is attached first
    assert any("ExecutionRoleDefaultPolicy" in d for d in config["DependsOn"])


def test_inference_component_runs_the_model_with_one_copy_at_create(
        ic_synth: tuple[Template, Path]) -> None:
    t, _ = ic_synth
    [component] = t.find_resources("AWS::SageMaker::InferenceComponent").values()
    assert component["Properties"] == {
        "EndpointName": {"Fn::GetAtt": [_logical_id(t, "AWS::SageMaker::Endpoint"),
                                        "EndpointName"]},
        "InferenceComponentName": IC_NAME,
        "VariantName": "AllTraffic",
        "Specification": {
            "ModelName": {"Fn::GetAtt": [_logical_id(t, "AWS::SageMaker::Model"), "ModelName"]},
            "ComputeResourceRequirements": {"NumberOfAcceleratorDevicesRequired": 1,
                                            "MinMemoryRequiredInMb": 2048}},
        "RuntimeConfig": {"CopyCount": 1},  # floor 0: one copy proves the image at deploy
    }
    t.has_resource_properties("AWS::SageMaker::Endpoint", {"EndpointName": "warmstart-overflow"})


def test_inference_component_copies_are_the_scalable_target_from_zero(
        ic_synth: tuple[Template, Path]) -> None:
    t, _ = ic_synth
    [scalable] = t.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert scalable["Properties"] == {
        "ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{IC_NAME}",
        "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
        "MinCapacity": 0, "MaxCapacity": 3}
    assert scalable["DependsOn"] == [_logical_id(t, "AWS::SageMaker::InferenceComponent")]


def test_the_agent_invokes_the_component_by_name_on_its_endpoint_only(
        ic_synth: tuple[Template, Path]) -> None:
    t, _ = ic_synth
    component = _logical_id(t, "AWS::SageMaker::InferenceComponent")
    [invoke] = [st for st in _statements(t) if st["Action"] == "sagemaker:InvokeEndpoint"]
    assert invoke == {"Action": "sagemaker:InvokeEndpoint", "Effect": "Allow", "Resource": [
        {"Ref": _logical_id(t, "AWS::SageMaker::Endpoint")},
        {"Fn::GetAtt": [component, "InferenceComponentArn"]}]}
    [agent] = t.find_resources("AWS::Lambda::Function",
                               {"Properties": {"Handler": "index.handler"}}).values()
    env = agent["Properties"]["Environment"]["Variables"]
    assert env["WARMSTART_OVERFLOW_INFERENCE_COMPONENT"] == IC_NAME
    assert env["WARMSTART_OVERFLOW_ENDPOINT_NAME"] == {
        "Fn::GetAtt": [_logical_id(t, "AWS::SageMaker::Endpoint"), "EndpointName"]}
    assert "WARMSTART_OVERFLOW_CAPACITY_PARAMETER" in env


def test_the_warmer_plans_copies_and_may_touch_only_this_component(
        ic_synth: tuple[Template, Path]) -> None:
    t, _ = ic_synth
    by_sid = {st["Sid"]: st for st in _statements(t) if "Sid" in st}
    component = _logical_id(t, "AWS::SageMaker::InferenceComponent")
    assert by_sid["OverflowInferenceComponent"] == {
        "Sid": "OverflowInferenceComponent", "Effect": "Allow",
        "Action": ["sagemaker:DescribeInferenceComponent",
                   "sagemaker:UpdateInferenceComponentRuntimeConfig"],
        "Resource": {"Fn::GetAtt": [component, "InferenceComponentArn"]}}
    assert by_sid["OverflowEndpoint"] == {
        "Sid": "OverflowEndpoint", "Effect": "Allow", "Action": "sagemaker:DescribeEndpoint",
        "Resource": {"Ref": _logical_id(t, "AWS::SageMaker::Endpoint")}}
    assert by_sid["OverflowEndpointConfig"] == {
        "Sid": "OverflowEndpointConfig", "Effect": "Allow",
        "Action": "sagemaker:DescribeEndpointConfig",
        "Resource": {"Ref": _logical_id(t, "AWS::SageMaker::EndpointConfig")}}
    scope = by_sid["ScalableTargetsSagemakerInferenceComponentDesiredCopyCount"]
    assert scope["Action"] == "application-autoscaling:RegisterScalableTarget"
    assert scope["Condition"] == {"StringEquals": {
        "application-autoscaling:service-namespace": "sagemaker",
        "application-autoscaling:scalable-dimension":
            "sagemaker:inference-component:DesiredCopyCount"}}
    assert "ScalableTargetsSagemakerVariantDesiredInstanceCount" not in by_sid
    assert "UpdateEndpointWeightsAndCapacities" not in json.dumps(_statements(t))
    # the warmer config's endpoint entry: what the planner's EndpointPolicy reads
    [warmer] = t.find_resources("AWS::Lambda::Function",
                                {"Properties": {"Handler": "warmers.handler.handler"}}).values()
    text = json.dumps(warmer["Properties"]["Environment"]["Variables"]["WARMSTART_WARMER_CONFIG"])
    assert '\\"target\\":\\"inference_component\\"' in text
    assert f'\\"inference_component\\":\\"{IC_NAME}\\"' in text


def test_cfn_lint_is_clean_on_the_inference_component_stack(
        ic_synth: tuple[Template, Path]) -> None:
    _, template_path = ic_synth
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), str(template_path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _ic(**options: object) -> GpuEndpointConfig:
    return _config(target="inference_component", **options)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_config(target="copies"), ("gpu_endpoint.target must be 'variant' or "
                                    "'inference_component', got 'copies'")),
        (_config(memory_per_copy_mb=2048), ("gpu_endpoint.memory_per_copy_mb applies only to "
                                            "target 'inference_component' (set "
                                            "gpu_endpoint.target, or remove it)")),
        (_ic(inference_component_name="bad_name-"), (
            "gpu_endpoint.inference_component_name 'bad_name-' is not a SageMaker inference "
            "component name: letters, digits and '-', starting and ending with a letter or "
            "digit, at most 63 characters")),
        (_ic(inference_component_name="a" * 64), "is not a SageMaker inference component name"),
        (_ic(accelerators_per_copy=0),
         "gpu_endpoint.accelerators_per_copy must be an integer >= 1, got 0"),
        (_ic(accelerators_per_copy=1.5),
         "gpu_endpoint.accelerators_per_copy must be an integer >= 1, got 1.5"),
        (_ic(memory_per_copy_mb=64),
         "gpu_endpoint.memory_per_copy_mb must be an integer >= 128, got 64"),
        (_ic(max_instance_count=0),
         "gpu_endpoint.max_instance_count must be an integer >= 1, got 0"),
        (_ic(max_instance_count=1, initial_instance_count=2), (
            "gpu_endpoint.max_instance_count 1 is below initial_instance_count 2")),
    ],
)
def test_invalid_inference_component_option_raises_exact_message(
        config: GpuEndpointConfig, message: str) -> None:
    with pytest.raises(GpuEndpointConfigError) as info:
        validate_config(config)
    assert message in str(info.value)


def test_defaults_and_names_known_only_in_the_stack_are_checked_there() -> None:
    stack = cdk.Stack(cdk.App(context={"aws:cdk:bundling-stacks": []}), "Defaults")
    endpoint = GpuEndpoint(stack, "Gpu", config=_ic(image_uri="registry/image:1"))
    assert endpoint.inference_component_name == "Defaults-Gpu-model"
    assert endpoint.resource_id == "inference-component/Defaults-Gpu-model"
    t = Template.from_stack(stack)
    t.has_resource_properties("AWS::SageMaker::InferenceComponent", {"Specification": {
        "ModelName": Match.any_value(), "ComputeResourceRequirements": {
            "NumberOfAcceleratorDevicesRequired": 1, "MinMemoryRequiredInMb": 4096}}})
    t.has_resource_properties("AWS::SageMaker::EndpointConfig", {"ProductionVariants": [
        Match.object_like({"ManagedInstanceScaling": Match.object_like({
            "MaxInstanceCount": 2})})]})  # capacity.cap's default
    with pytest.raises(GpuEndpointConfigError, match=(
            "the GPU endpoint's default inference component name '"
            + "e" * 63 + "-model' is not a SageMaker inference component name.*; set "
            "gpu_endpoint.inference_component_name")):
        GpuEndpoint(stack, "Long", config=_ic(image_uri="registry/image:1",
                                              endpoint_name="e" * 63))
    with pytest.raises(GpuEndpointConfigError, match=(
            r"gpu_endpoint.capacity.cap must be an integer >= 1 \(the warmer plans at most cap "
            r"copies\), got 0")):
        GpuEndpoint(stack, "NoCap", config=_ic(image_uri="registry/image:1",
                                               endpoint_name="no-cap", capacity={"cap": 0}))


def test_the_app_deploys_an_inference_component_from_cdk_json(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The real app (cdk.json's context, the keys under ``warmstart.gpu_endpoint``): the stack
    wires the component to the overflow agent and the warmer; cdk-nag and cfn-lint clean."""
    from tests.infra.cdk_helpers import synth as synth_app

    s = synth_app(tmp_path_factory.mktemp("cdk-app-ic"), strategy="provisioned", overrides={
        "warmer.enabled": True, "gpu_endpoint.enabled": True,
        "gpu_endpoint.target": "inference_component",
        "gpu_endpoint.capacity": {"cap": 2, "budget_usd_per_hour": 5.0}})
    assert s.error is None, s.error  # cdk-nag: no unacknowledged finding
    resources = s.template["Resources"]
    [component] = [r for r in resources.values()
                   if r["Type"] == "AWS::SageMaker::InferenceComponent"]
    name = component["Properties"]["InferenceComponentName"]
    assert name == "Warmstart-GpuEndpoint-model"
    overflow_envs = [r["Properties"]["Environment"]["Variables"] for r in resources.values()
                     if r["Type"] == "AWS::Lambda::Function"
                     and "WARMSTART_OVERFLOW_ENDPOINT_NAME" in json.dumps(r)]
    assert [e["WARMSTART_OVERFLOW_INFERENCE_COMPONENT"] for e in overflow_envs] == [name]
    [target] = [r for r in resources.values()
                if r["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget"
                and r["Properties"]["ServiceNamespace"] == "sagemaker"]
    assert (target["Properties"]["ResourceId"], target["Properties"]["MinCapacity"]) == (
        f"inference-component/{name}", 0)
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), str(s.template_path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_warmer_alarms_on_an_endpoint_that_pays_for_no_answer(
        ic_synth: tuple[Template, Path]) -> None:
    """The spend guard's metric: published by the warmer on its own namespace only, alarmed
    at the guard's threshold (one g6.xlarge held for the 60-minute window: $1.1267)."""
    t, _ = ic_synth
    by_sid = {st["Sid"]: st for st in _statements(t) if "Sid" in st}
    assert by_sid["PublishSpendGuard"] == {
        "Sid": "PublishSpendGuard", "Effect": "Allow", "Action": "cloudwatch:PutMetricData",
        "Resource": "*",
        "Condition": {"StringEquals": {"cloudwatch:namespace": "Warmstart/Warmer"}}}
    [alarm] = t.find_resources("AWS::CloudWatch::Alarm", {"Properties": {
        "MetricName": "EndpointSpendUnansweredUsd"}}).values()
    props = alarm["Properties"]
    assert props["Namespace"] == "Warmstart/Warmer"
    assert props["Dimensions"] == [{"Name": "EndpointName", "Value": "warmstart-overflow"}]
    assert props["Threshold"] == 1.1267  # warmers/prices.json sagemaker_ml_g6_xlarge_hour
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert (props["Statistic"], props["Period"]) == ("Maximum", 300)
    assert props["TreatMissingData"] == "notBreaching"
    assert "without answering one overflow request" in props["AlarmDescription"]
