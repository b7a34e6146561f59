"""``local up`` runs a function on Lambda Managed Instances in the emulator's LMI mode (issue 22).

The template is what ``cdk synth`` writes for an agent of strategy ``managed_instances`` (the
function's ``CapacityProviderConfig`` naming the stack's ``AWS::Lambda::CapacityProvider``, the
published version's ``FunctionScalingConfig``, the alias on that version; the shapes of
``tests/infra/test_managed_instances_stack.py``'s synth), cut to one function. The stack deploys
it with real runtime processes, answers Get/PutFunctionScalingConfig on its Lambda API, and
throttles a request beyond the environments' processes (no cold start on LMI).
"""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from infra.local.errors import TooManyRequestsException
from infra.local.stack import LocalStack, LocalStackConfig
from infra.local.template import read_template
from warmers.actuators import ManagedInstancesActuator

pytestmark = pytest.mark.slow

FUNCTION = "AgentlmiFunction1234ABCD"
PROVIDER = "AgentlmiCapacityProvider5678EF90"


def _template(code: Path) -> dict[str, Any]:
    return {"Resources": {
        PROVIDER: {"Type": "AWS::Lambda::CapacityProvider", "Properties": {
            "CapacityProviderScalingConfig": {"MaxVCpuCount": 16},
            "InstanceRequirements": {"AllowedInstanceTypes": ["m7g.large"], "Architectures": ["x86_64"]},
            "VpcConfig": {"SecurityGroupIds": ["sg-0abc1234"], "SubnetIds": ["subnet-0abc1234"]}}},
        FUNCTION: {"Type": "AWS::Lambda::Function", "Properties": {
            "Handler": "app.handler", "Runtime": "python3.12", "MemorySize": 2048, "Timeout": 30,
            "Code": {"S3Bucket": "assets", "S3Key": "code.zip"},
            "CapacityProviderConfig": {"LambdaManagedInstancesCapacityProviderConfig": {
                "CapacityProviderArn": {"Fn::GetAtt": [PROVIDER, "Arn"]},
                "PerExecutionEnvironmentMaxConcurrency": 8}}},
            "Metadata": {"aws:asset:path": str(code)}},
        "AgentlmiFunctionCurrentVersionABCDEF": {"Type": "AWS::Lambda::Version", "Properties": {
            "FunctionName": {"Ref": FUNCTION},
            "FunctionScalingConfig": {"MinExecutionEnvironments": 1, "MaxExecutionEnvironments": 2}}},
        "AgentlmiFunctionAliaslive": {"Type": "AWS::Lambda::Alias", "Properties": {
            "FunctionName": {"Ref": FUNCTION}, "Name": "live",
            "FunctionVersion": {"Fn::GetAtt": ["AgentlmiFunctionCurrentVersionABCDEF", "Version"]}}},
    }}


@pytest.fixture
def template_file(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(textwrap.dedent("""
        import os, time
        def handler(event, context):
            time.sleep(event.get("sleep_s", 0))
            return {"pid": os.getpid(), "init": os.environ["AWS_LAMBDA_INITIALIZATION_TYPE"]}
    """))
    path = tmp_path / "template.json"
    path.write_text(json.dumps(_template(code)))
    return path


def test_the_template_puts_the_function_on_its_capacity_provider(template_file: Path) -> None:
    app = read_template(template_file)
    config = app.managed_instances[FUNCTION]
    assert config.capacity_provider_arn.endswith(f":capacity-provider:{PROVIDER}")
    assert (config.max_vcpu, config.instance_type, config.instance_vcpus) == (16, "m7g.large", 2)
    assert config.per_environment_max_concurrency == 8
    assert (config.min_execution_environments, config.max_execution_environments) == (1, 2)


def test_local_up_runs_it_on_managed_instances_with_its_scaling_config(template_file: Path,
                                                                       tmp_path: Path) -> None:
    app = read_template(template_file)
    with open(tmp_path / "stack.log", "w") as log, LocalStack(
            app, LocalStackConfig(moto=False, lmi_processes_per_environment=2),
            log_stream=log) as stack:
        emulator = stack.emulator
        # THEN the version's minimum (1 environment) runs, with 2 processes (the local cap of 8)
        state = emulator.function_state(FUNCTION)
        assert state.lmi is not None
        workers = [e for e in emulator.environments(FUNCTION) if e["worker"] is not None]
        assert len(workers) == 2 and {e["init_type"] for e in workers} == {"lambda-managed-instances"}
        # AND the scaling config is the template's, on the local Lambda API as on AWS (for a
        # published version: AWS refuses an alias there)
        client = boto3.client("lambda", endpoint_url=stack.lambda_service.endpoint,  # type: ignore[union-attr]
                              region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing",
                              config=Config(retries={"max_attempts": 0}))
        applied = client.get_function_scaling_config(FunctionName=FUNCTION, Qualifier="1")
        assert applied["AppliedFunctionScalingConfig"] == {"MinExecutionEnvironments": 1,
                                                           "MaxExecutionEnvironments": 2}
        # AND the warmer's LMI actuator finds the alias's version on its capacity provider (it
        # refuses a version that is not) and reads the minimum in force, as it does on AWS
        actuator = ManagedInstancesActuator(client)
        assert actuator.version(FUNCTION, "live") == "1"
        assert actuator.current(FUNCTION, "live") == (1, 2)
        # WHEN three requests arrive at once on 2 processes
        answers: list[Any] = []

        def call() -> None:
            try:
                answers.append(json.loads(emulator.invoke(
                    FUNCTION, json.dumps({"sleep_s": 1.5}).encode(), qualifier="live").payload))
            except TooManyRequestsException as exc:  # what this test looks for
                answers.append(exc)

        threads = [threading.Thread(target=call) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        # THEN two are served by two processes of the environment, the third throttled (429)
        served = [a for a in answers if isinstance(a, dict)]
        throttled = [a for a in answers if not isinstance(a, dict)]
        assert len(served) == 2 and len({a["pid"] for a in served}) == 2
        assert {a["init"] for a in served} == {"lambda-managed-instances"}
        assert [type(a).__name__ for a in throttled] == ["TooManyRequestsException"]
        # AND a minimum above the maximum is refused as AWS refuses it
        with pytest.raises(ClientError) as refused:
            client.put_function_scaling_config(
                FunctionName=FUNCTION, Qualifier="1",
                FunctionScalingConfig={"MinExecutionEnvironments": 3, "MaxExecutionEnvironments": 2})
        assert refused.value.response["Error"]["Code"] == "InvalidParameterValueException"
        client.put_function_scaling_config(
            FunctionName=FUNCTION, Qualifier="1",
            FunctionScalingConfig={"MinExecutionEnvironments": 2, "MaxExecutionEnvironments": 2})
        assert actuator.current(FUNCTION, "live") == (2, 2)


def test_a_capacity_provider_value_out_of_range_is_a_template_error_naming_the_function(
        tmp_path: Path) -> None:
    from infra.local.template import TemplateError

    doc = _template(tmp_path)
    doc["Resources"][PROVIDER]["Properties"]["CapacityProviderScalingConfig"]["MaxVCpuCount"] = 1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TemplateError, match=f"function {FUNCTION}: max_vcpu must be 2..15000"):
        read_template(path)


def test_the_local_cap_must_be_a_valid_concurrency() -> None:
    with pytest.raises(ValueError, match="lmi_processes_per_environment must be 1..1600"):
        LocalStackConfig(lmi_processes_per_environment=0)
