"""Strategy ``managed_instances`` (Lambda Managed Instances) in the CDK app: the capacity
provider the stack creates from the agent's subnets and security groups (or the one it takes by
ARN), the function on it, the version with its minimum and maximum execution environments, the
alias ``live`` on that version, the warmer's scoped scaling-config permissions and its config
document (read back by ``warmers.config.WarmerConfig``); cdk-nag and cfn-lint clean; the other
agents synthesized exactly as without it; and each refusal of ``infra.config``.

Three real synths run once for the module (cdk-nag on, bundling skipped): cdk.json as it is, the
same with agent ``lookup`` on LMI with a created provider, and with an imported one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from infra.config import (
    LMI_DEFAULT_MIN_EXECUTION_ENVIRONMENTS,
    StackConfigError,
    check_streaming_agent,
    config_from_context,
)
from infra.constructs.warmer import WarmerPropsError, lmi_settings
from tests.infra.cdk_helpers import Synth, cdk_context, synth
from warmers.config import WarmerConfig
from warmers.lmi import LmiSettings

SUBNETS = ["subnet-0abc1234", "subnet-0def5678"]
GROUPS = ["sg-0abc1234"]
LMI = {
    "strategy": "managed_instances",
    "runtime": "python3.13",
    "memory_mb": 2048,
    "architecture": "arm64",
    "managed_instances": {
        "subnet_ids": SUBNETS, "security_group_ids": GROUPS, "instance_types": ["m7g.large"],
        "max_vcpu": 64, "per_execution_environment_max_concurrency": 8,
        "min_execution_environments": 2, "max_execution_environments": 12,
    },
}
PROVIDER_ARN = "arn:aws:lambda:us-east-1:111122223333:capacity-provider:shared-lmi"
LOOKUP = "functions.lookup.handler.handler"
OTHERS = ("functions.agent.handler.handler", "functions.chat.handler.handler")  # intent, chat


def _lookup(**agent: Any) -> dict[str, Any]:
    """Overrides that put agent ``lookup`` on LMI (``agent`` refines :data:`LMI`)."""
    return {f"agents.lookup.{key}": value for key, value in {**LMI, **agent}.items()}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synth(tmp_path_factory.mktemp("cdk-baseline"))


@pytest.fixture(scope="module")
def lmi(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synth(tmp_path_factory.mktemp("cdk-lmi"), overrides=_lookup())


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    block = {"capacity_provider_arn": PROVIDER_ARN, "min_execution_environments": 1}
    return synth(tmp_path_factory.mktemp("cdk-lmi-imported"),
                 overrides=_lookup(managed_instances=block))


def template(s: Synth) -> Template:
    assert s.error is None, s.error
    return Template.from_json(s.template)


def _function_id(s: Synth, handler: str) -> str:
    [found] = template(s).find_resources("AWS::Lambda::Function",
                                         {"Properties": {"Handler": handler}})
    return found


def _of_function(s: Synth, function_id: str, kind: str) -> tuple[str, dict[str, Any]]:
    """(logical id, resource) of the one ``kind`` whose FunctionName is ``Ref`` the function."""
    [found] = template(s).find_resources(
        kind, {"Properties": {"FunctionName": {"Ref": function_id}}}).items()
    return found


def _warmer_document(s: Synth) -> dict[str, Any]:
    """The warmer's WARMSTART_WARMER_CONFIG with each token made a readable stand-in."""
    [warmer] = template(s).find_resources("AWS::Lambda::Function", {"Properties": {
        "Handler": "warmers.handler.handler"}}).values()
    raw = warmer["Properties"]["Environment"]["Variables"]["WARMSTART_WARMER_CONFIG"]
    parts = raw["Fn::Join"][1] if isinstance(raw, dict) else [raw]
    text = "".join(p if isinstance(p, str) else f"<{p.get('Ref', 'token')}>" for p in parts)
    return json.loads(text)


def _warmer_statements(s: Synth) -> dict[str, dict[str, Any]]:
    """Sid -> statement of the warmer's own policy (the one with the ManagedAliases/LMI sids)."""
    for policy in template(s).find_resources("AWS::IAM::Policy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        sids = {st.get("Sid") for st in statements}
        if "ReadLambdaMetrics" in sids:
            return {st["Sid"]: st for st in statements}
    raise AssertionError("no warmer policy")


def _resources(st: dict[str, Any]) -> list[Any]:
    got = st["Resource"]
    return got if isinstance(got, list) else [got]


# ---- the synthesized app ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_stack_creates_the_capacity_provider_in_the_given_vpc(lmi: Synth) -> None:
    t = template(lmi)
    t.resource_count_is("AWS::Lambda::CapacityProvider", 1)
    t.has_resource_properties("AWS::Lambda::CapacityProvider", {
        "VpcConfig": {"SubnetIds": SUBNETS, "SecurityGroupIds": GROUPS},
        "InstanceRequirements": {"Architectures": ["arm64"], "AllowedInstanceTypes": ["m7g.large"]},
        "CapacityProviderScalingConfig": {"MaxVCpuCount": 64},
        "PermissionsConfig": {"CapacityProviderOperatorRoleArn": Match.any_value()},
    })
    # the operator role Lambda assumes to manage the instances: AWS's managed policy for it
    t.has_resource_properties("AWS::IAM::Role", {
        "AssumeRolePolicyDocument": Match.object_like({"Statement": [Match.object_like(
            {"Principal": {"Service": "lambda.amazonaws.com"}})]}),
        "ManagedPolicyArns": [{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                                 ":iam::aws:policy/AWSLambdaManagedEC2ResourceOperator"]]}],
    })


@pytest.mark.slow
def test_the_function_runs_on_the_provider_and_the_alias_on_its_published_version(lmi: Synth) -> None:
    t = template(lmi)
    fn = _function_id(lmi, LOOKUP)
    [provider] = t.find_resources("AWS::Lambda::CapacityProvider")
    props = lmi.template["Resources"][fn]["Properties"]
    assert props["CapacityProviderConfig"] == {"LambdaManagedInstancesCapacityProviderConfig": {
        "CapacityProviderArn": {"Fn::GetAtt": [provider, "Arn"]},
        "PerExecutionEnvironmentMaxConcurrency": 8}}
    # the one version that runs is the stack's: no $LATEST.PUBLISHED with instances of its own
    assert props["PublishToLatestPublished"] is False
    assert props["Runtime"] == "python3.13" and props["Architectures"] == ["arm64"]
    assert "SnapStart" not in props and "VpcConfig" not in props
    version_id, version = _of_function(lmi, fn, "AWS::Lambda::Version")
    assert version["Properties"]["FunctionScalingConfig"] == {
        "MinExecutionEnvironments": 2, "MaxExecutionEnvironments": 12}
    alias = _of_function(lmi, fn, "AWS::Lambda::Alias")[1]["Properties"]
    assert alias["Name"] == "live"
    assert alias["FunctionVersion"] == {"Fn::GetAtt": [version_id, "Version"]}
    assert "ProvisionedConcurrencyConfig" not in alias
    # no Application Auto Scaling target on it: LMI has no provisioned concurrency
    assert not [r for r in t.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
                if fn in json.dumps(r)]
    outputs = lmi.template["Outputs"]
    assert outputs["LookupStrategy"]["Value"] == "managed_instances"
    assert outputs["LookupCapacityProviderArn"]["Value"] == {"Fn::GetAtt": [provider, "Arn"]}
    assert [k for k in outputs if k.endswith("CapacityProviderArn")] == ["LookupCapacityProviderArn"]


@pytest.mark.slow
def test_the_warmer_may_only_read_and_set_the_scaling_config_of_that_function(lmi: Synth) -> None:
    fn = _function_id(lmi, LOOKUP)
    arn = {"Fn::GetAtt": [fn, "Arn"]}
    statements = _warmer_statements(lmi)
    scaling = statements["ManagedInstancesScaling"]
    assert sorted(scaling["Action"]) == ["lambda:GetFunctionConfiguration",
                                         "lambda:GetFunctionScalingConfig",
                                         "lambda:PutFunctionScalingConfig"]
    assert _resources(scaling) == [arn, {"Fn::Join": ["", [arn, ":*"]]}]
    assert statements["ManagedInstancesAliases"]["Action"] == "lambda:GetAlias"
    assert _resources(statements["ManagedInstancesAliases"]) == [{"Fn::Join": ["", [arn, ":live"]]}]
    # no other statement names the LMI function: no PC, no invoke, no scalable target
    others = [st for sid, st in statements.items() if not sid.startswith("ManagedInstances")]
    assert fn not in json.dumps(others)
    # and no scaling-config action anywhere else
    assert all("FunctionScalingConfig" not in json.dumps(st["Action"]) for st in others)


@pytest.mark.slow
def test_the_warmer_config_marks_the_alias_managed_instances_as_the_warmer_reads_it(lmi: Synth) -> None:
    doc = _warmer_document(lmi)
    fn = _function_id(lmi, LOOKUP)
    [entry] = [a for a in doc["aliases"] if a["function_name"] == f"<{fn}>"]
    assert entry["strategy"] == "managed_instances" and entry["alias"] == "live"
    assert (entry["floor"], entry["cap"]) == (2, 12)
    assert entry["managed_instances"] == {"vcpus_per_environment": 1.0,
                                          "concurrency_per_environment": 8,
                                          "provider_max_vcpus": 64}
    config = WarmerConfig.from_dict(doc)  # the warmer's own reading side
    [policy] = [p for p in config.policies if p.function_name == f"<{fn}>"]
    assert policy.strategy == "managed_instances" and policy.plans_warmth
    assert (policy.floor, policy.cap) == (2, 12)
    assert policy.managed_instances == LmiSettings(vcpus_per_environment=1.0,
                                                   concurrency_per_environment=8,
                                                   provider_max_vcpus=64)


@pytest.mark.slow
def test_an_existing_capacity_provider_is_taken_by_arn(imported: Synth) -> None:
    t = template(imported)
    t.resource_count_is("AWS::Lambda::CapacityProvider", 0)
    fn = _function_id(imported, LOOKUP)
    props = imported.template["Resources"][fn]["Properties"]
    assert props["CapacityProviderConfig"] == {
        "LambdaManagedInstancesCapacityProviderConfig": {"CapacityProviderArn": PROVIDER_ARN}}
    assert props["PublishToLatestPublished"] is False
    assert imported.template["Outputs"]["LookupCapacityProviderArn"]["Value"] == PROVIDER_ARN
    _, version = _of_function(imported, fn, "AWS::Lambda::Version")
    assert version["Properties"]["FunctionScalingConfig"] == {
        "MinExecutionEnvironments": 1, "MaxExecutionEnvironments": 10}  # default max
    # the imported provider's vCPU limit is unknown at synth: not in the warmer's settings
    [entry] = [a for a in _warmer_document(imported)["aliases"]
               if a["function_name"] == f"<{fn}>"]
    assert entry["managed_instances"] == {"vcpus_per_environment": 1.0}
    assert "ManagedInstancesScaling" in _warmer_statements(imported)


@pytest.mark.slow
def test_cdk_nag_and_cfn_lint_are_clean_with_an_lmi_agent(lmi: Synth, imported: Synth) -> None:
    for s in (lmi, imported):
        [report] = [r for r in s.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
        assert report["violations"] == [] and report["conclusion"] == "success", report["violations"][:3]
    [report] = [r for r in lmi.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    # the one new acknowledgement: the operator role's AWS managed policy
    assert any(v["ruleName"].startswith("AwsSolutions-IAM4[")
               and "AWSLambdaManagedEC2ResourceOperator" in v["ruleName"]
               for v in report["suppressedViolations"])
    # cfn-lint 1.58 has the AWS::Lambda::CapacityProvider schema and the Function's
    # CapacityProviderConfig: no override
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), str(lmi.template_path), str(imported.template_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_other_agents_are_synthesized_exactly_as_without_lmi(baseline: Synth, lmi: Synth) -> None:
    for handler in OTHERS:
        fn = _function_id(baseline, handler)
        assert _function_id(lmi, handler) == fn
        # the function and everything that names it (version, alias, alarms, URL, permissions),
        # except the warmer's function and policy and the dashboard, which list every agent
        def named(s: Synth, fn: str = fn) -> dict[str, Any]:
            return {k: r for k, r in s.template["Resources"].items()
                    if (k == fn or re.search(rf'"{fn}"', json.dumps(r)))
                    and r["Type"] not in ("AWS::IAM::Policy", "AWS::CloudWatch::Dashboard")
                    and "warmers.handler.handler" not in json.dumps(r)}
        assert named(lmi) == named(baseline), handler
        entries = [[a for a in _warmer_document(s)["aliases"] if a["function_name"] == f"<{fn}>"]
                   for s in (baseline, lmi)]
        assert entries[0] == entries[1]
    # their warmer grants are the same, lookup's PC grants are gone
    before, after = _warmer_statements(baseline), _warmer_statements(lmi)
    lookup = _function_id(baseline, LOOKUP)
    for sid in ("ManagedAliases", "ListPc", "ReconcileOldVersions"):
        kept = [r for r in _resources(before[sid]) if lookup not in json.dumps(r)]
        assert _resources(after[sid]) == kept, sid
    assert "ManagedInstancesScaling" not in before


# ---- the config's refusals -------------------------------------------------------------------


def _config(**agent: Any) -> Any:
    return config_from_context(cdk_context(overrides=_lookup(**agent)))


def test_the_config_reads_the_managed_instances_block() -> None:
    cfg = _config().agent("lookup")
    lmi = cfg.managed_instances
    assert cfg.on_managed_instances and lmi is not None and not lmi.imported
    assert (lmi.subnet_ids, lmi.security_group_ids) == (tuple(SUBNETS), tuple(GROUPS))
    assert (lmi.min_execution_environments, lmi.maximum) == (2, 12)
    plain = _config(managed_instances={"subnet_ids": SUBNETS, "security_group_ids": GROUPS})
    settings = plain.agent("lookup").managed_instances
    assert settings.min_execution_environments == LMI_DEFAULT_MIN_EXECUTION_ENVIRONMENTS == 3
    assert settings.maximum == 10 and settings.max_vcpu is None
    # the other agents keep no block
    assert plain.agent("intent").managed_instances is None


AGENT = "warmstart.agents.lookup"
REFUSALS = [
    ({"managed_instances": None},
     (rf"^{AGENT}\.managed_instances: strategy 'managed_instances' runs the function on a capacity "
     r"provider in your VPC and needs it: .*capacity_provider_arn.*subnet_ids.*security_group_ids")),
    ({"managed_instances": {"subnet_ids": SUBNETS}},
     (rf"^{AGENT}\.managed_instances: missing security_group_ids: Lambda Managed Instances run in "
     r"your VPC")),
    ({"managed_instances": {}},
     rf"^{AGENT}\.managed_instances: missing subnet_ids and security_group_ids: "),
    ({"runtime": "python3.12"},
     rf"^{AGENT}\.runtime: Lambda Managed Instances need python3\.13 or newer, got 'python3\.12'"),
    ({"provisioned_concurrency": {"min": 1, "max": 2}},
     (rf"^{AGENT}\.provisioned_concurrency: strategy 'managed_instances' cannot be combined with "
     r"provisioned concurrency")),
    ({"strategy": "snapstart"},
     (rf"^{AGENT}\.managed_instances: only for strategy 'managed_instances' \(this agent's strategy "
     r"is 'snapstart'\)")),
    ({"memory_mb": 1024},
     rf"^{AGENT}\.memory_mb: 1024 MB is below the 2048 MB a Lambda Managed Instances function needs"),
    ({"managed_instances": {"capacity_provider_arn": PROVIDER_ARN, "subnet_ids": SUBNETS}},
     rf"^{AGENT}\.managed_instances\.subnet_ids: set by the existing capacity provider"),
    ({"managed_instances": {"capacity_provider_arn": "arn:aws:lambda:us-east-1:1:function:x"}},
     rf"^{AGENT}\.managed_instances\.capacity_provider_arn: .* is not a capacity provider ARN"),
    ({"managed_instances": {"subnet_ids": ["subnet-xyz"], "security_group_ids": GROUPS}},
     rf"^{AGENT}\.managed_instances\.subnet_ids: 'subnet-xyz' is not an id such as"),
    ({"managed_instances": {"subnet_ids": [f"subnet-{i:08x}" for i in range(17)],
                            "security_group_ids": GROUPS}},
     rf"^{AGENT}\.managed_instances\.subnet_ids: 17 given, a capacity provider takes 1-16"),
    ({"managed_instances": {"subnet_ids": SUBNETS, "security_group_ids": GROUPS * 2}},
     rf"^{AGENT}\.managed_instances\.security_group_ids: 'sg-0abc1234' is listed twice"),
    ({"managed_instances": {**LMI["managed_instances"], "max_execution_environments": 1}},
     (rf"^{AGENT}\.managed_instances\.max_execution_environments: 1 is below "
     r"min_execution_environments \(2\)")),
    ({"managed_instances": {**LMI["managed_instances"], "max_vcpu": 1}},
     rf"^{AGENT}\.managed_instances\.max_vcpu: 1 is outside 2-15000 vCPUs"),
    ({"managed_instances": {**LMI["managed_instances"],
                            "per_execution_environment_max_concurrency": 0}},
     rf"^{AGENT}\.managed_instances\.per_execution_environment_max_concurrency: 0 is outside 1-1600"),
    ({"managed_instances": {**LMI["managed_instances"], "instance_types": ["large"]}},
     rf"^{AGENT}\.managed_instances\.instance_types: 'large' is not an EC2 instance type"),
    ({"managed_instances": {**LMI["managed_instances"], "subnets": SUBNETS}},
     rf"^{AGENT}\.managed_instances: unknown key\(s\) 'subnets'"),
]


@pytest.mark.parametrize(("agent", "message"), REFUSALS,
                         ids=[m.split(": ", 1)[0].rsplit(".", 1)[-1] + f"-{i}"
                              for i, (_, m) in enumerate(REFUSALS)])
def test_the_config_refuses_with_a_one_line_message_naming_agent_and_field(
        agent: dict[str, Any], message: str) -> None:
    with pytest.raises(StackConfigError) as info:
        _config(**agent)
    assert "\n" not in str(info.value)
    assert re.search(message, str(info.value)), str(info.value)


def test_a_streaming_agent_is_refused_on_managed_instances() -> None:
    agent = _config().agent("lookup")
    with pytest.raises(StackConfigError, match=(
            rf"^{AGENT}\.strategy: 'managed_instances' cannot serve a streaming agent here: its "
            r"streaming runtime client \(AWS_LAMBDA_EXEC_WRAPPER\) replaces the Python runtime")):
        check_streaming_agent(agent, {"POST /chat": 1000.0})


def test_another_strategy_variant_drops_the_managed_instances_block() -> None:
    cfg = config_from_context(cdk_context(strategy="none", overrides=_lookup()))
    assert cfg.agent("lookup").strategy == "none"
    assert cfg.agent("lookup").managed_instances is None


def test_the_warmer_refuses_an_environment_larger_than_its_lmi_instance() -> None:
    agent = _config(memory_mb=8192).agent("lookup")  # 4 vCPUs at 2 GiB per vCPU
    with pytest.raises(WarmerPropsError, match=(
            rf"^{AGENT}\.memory_mb: 8192 MB is 4 vCPUs per execution environment")):
        lmi_settings(agent)


@pytest.mark.slow
def test_the_stack_refuses_the_streaming_chat_agent_on_managed_instances(tmp_path: Path) -> None:
    from infra.app import build_cdk_app

    overrides = {f"agents.chat.{key}": value for key, value in {
        **LMI, "memory_mb": 2048, "architecture": "x86_64"}.items()}
    with pytest.raises(StackConfigError, match=(
            r"^warmstart\.agents\.chat\.strategy: 'managed_instances' cannot serve a streaming "
            r"agent here")):
        build_cdk_app(cdk_context(overrides=overrides), outdir=str(tmp_path), nag=False)


def test_local_up_reads_the_synthesized_function_onto_its_capacity_provider(lmi: Synth) -> None:
    """What ``local up`` reads of this synth (``infra.local.template``): the LMI agent's function
    with cdk.json's provider limits, per-environment concurrency and scaling config; the other
    agents' functions not on LMI."""
    from infra.local.template import read_template

    app = read_template(lmi.template_path, fallback_code_dir=Path.cwd())
    lookup = _function_id(lmi, LOOKUP)
    assert set(app.managed_instances) == {app.function(lookup).name}
    config = app.managed_instances[app.function(lookup).name]
    block = LMI["managed_instances"]
    assert config.max_vcpu == block["max_vcpu"]
    assert (config.instance_type, config.instance_vcpus) == ("m7g.large", 2)
    assert config.per_environment_max_concurrency == block["per_execution_environment_max_concurrency"]
    assert (config.min_execution_environments, config.max_execution_environments) == (
        block["min_execution_environments"], block["max_execution_environments"])


def test_local_up_takes_an_imported_provider_by_its_arn_with_the_emulator_defaults(
        imported: Synth) -> None:
    from infra.local.emulator import ManagedInstancesConfig
    from infra.local.template import read_template

    app = read_template(imported.template_path, fallback_code_dir=Path.cwd())
    [config] = app.managed_instances.values()
    assert config.capacity_provider_arn == PROVIDER_ARN
    assert config.max_vcpu == ManagedInstancesConfig().max_vcpu  # its limits are not in the template
    assert config.min_execution_environments == 1
