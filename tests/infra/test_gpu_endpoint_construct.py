"""GpuEndpoint construct in a minimal test stack: resources, grant scope, config errors, cdk-nag."""

from __future__ import annotations

from types import MappingProxyType

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
