"""The synthesized Warmstart stack, per strategy: alias, SnapStart / provisioned concurrency,
scaling, HTTP API, alarms, dashboard; and the template checks (cdk-nag, cfn-lint, sam validate).

Two real synths of the real app (cdk.json context, cdk-nag on), once for this module; bundling is
skipped, so no layer is built here (see test_layer_bundling.py for a real build).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from tests.infra.cdk_helpers import REPO, Synth, synth

pytestmark = pytest.mark.slow

SAM = REPO / ".venv-sam" / "bin" / "sam"
#: Acknowledged cdk-nag findings; a new one must be reviewed (and added here) on purpose.
EXPECTED_ACKNOWLEDGED = {"AwsSolutions-L1", "AwsSolutions-APIG4"}


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synth(tmp_path_factory.mktemp("cdk-provisioned"), strategy="provisioned")


@pytest.fixture(scope="module")
def snapstart(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synth(tmp_path_factory.mktemp("cdk-snapstart"))  # the cdk.json default


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    # the extension points: GPU endpoint (overflow) and warmer enabled on the provisioned variant
    return synth(tmp_path_factory.mktemp("cdk-extended"), strategy="provisioned",
                 overrides={"warmer.enabled": True, "gpu_endpoint.enabled": True})


def template(s: Synth) -> Template:
    assert s.error is None, s.error
    return Template.from_json(s.template)


def only_id(t: Template, resource_type: str) -> str:
    found = t.find_resources(resource_type)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found))


# ---- function, version, alias ----------------------------------------------------------------


@pytest.mark.parametrize("variant", ["provisioned", "snapstart"])
def test_alias_live_points_at_a_published_version(variant: str, request: pytest.FixtureRequest) -> None:
    t = template(request.getfixturevalue(variant))
    function_id = only_id(t, "AWS::Lambda::Function")
    version_id = only_id(t, "AWS::Lambda::Version")
    t.has_resource_properties("AWS::Lambda::Alias", {
        "Name": "live",
        "FunctionName": {"Ref": function_id},
        "FunctionVersion": {"Fn::GetAtt": [version_id, "Version"]},
    })
    assert "$LATEST" not in json.dumps(request.getfixturevalue(variant).template)


def test_function_settings_and_environment_contract(snapstart: Synth) -> None:
    t = template(snapstart)
    t.has_resource_properties("AWS::Lambda::Function", {
        "Handler": "functions.agent.handler.handler",
        "Runtime": "python3.12",
        "Architectures": ["x86_64"],
        "MemorySize": 2048,
        "Timeout": 30,
        "Layers": Match.any_value(),
        "LoggingConfig": Match.object_like({"LogFormat": "JSON"}),
        "Environment": {"Variables": {
            "WARMSTART_MODEL_DIR": "/opt/model",
            "WARMSTART_SLA_MS": "2000",
            "WARMSTART_DEBUG_RESOURCE": "false",
            "WARMSTART_DEGRADATION_PARAMETER": "/warmstart/agent/degradation-level",
            "POWERTOOLS_SERVICE_NAME": "warmstart-agent",
            "POWERTOOLS_METRICS_NAMESPACE": "Warmstart",
        }},
    })
    [function] = t.find_resources("AWS::Lambda::Function").values()
    assert len(function["Properties"]["Layers"]) == 3
    t.resource_count_is("AWS::Lambda::LayerVersion", 3)
    t.all_resources_properties("AWS::Lambda::LayerVersion", {
        "CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["x86_64"]})
    t.has_resource_properties("AWS::SSM::Parameter", {
        "Name": "/warmstart/agent/degradation-level", "Type": "String", "Value": "L0"})


def test_code_and_layers_carry_asset_metadata_for_sam(snapstart: Synth) -> None:
    t = template(snapstart)
    t.has_resource("AWS::Lambda::Function", {"Metadata": Match.object_like({
        "aws:asset:property": "Code", "aws:asset:path": Match.any_value()})})
    t.all_resources("AWS::Lambda::LayerVersion", {"Metadata": Match.object_like({
        "aws:asset:property": "Content"})})


# ---- strategy: SnapStart ---------------------------------------------------------------------


def test_snapstart_on_published_versions_without_provisioned_concurrency(snapstart: Synth) -> None:
    t = template(snapstart)
    t.has_resource_properties("AWS::Lambda::Function", {
        "Runtime": "python3.12", "SnapStart": {"ApplyOn": "PublishedVersions"}})
    t.has_resource_properties("AWS::Lambda::Alias", {
        "Name": "live", "ProvisionedConcurrencyConfig": Match.absent()})
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalingPolicy", 0)


# ---- strategy: provisioned concurrency ------------------------------------------------------


def test_provisioned_concurrency_on_the_alias_never_latest(provisioned: Synth) -> None:
    t = template(provisioned)
    t.has_resource_properties("AWS::Lambda::Function", {"SnapStart": Match.absent()})
    t.has_resource_properties("AWS::Lambda::Alias", {
        "Name": "live", "ProvisionedConcurrencyConfig": {"ProvisionedConcurrentExecutions": 1}})
    t.has_resource_properties("AWS::Lambda::Version", {"ProvisionedConcurrencyConfig": Match.absent()})
    t.resource_properties_count_is(
        "AWS::Lambda::Version", {"ProvisionedConcurrencyConfig": Match.any_value()}, 0)


def test_scalable_target_on_the_alias_with_target_tracking(provisioned: Synth, snapstart: Synth) -> None:
    assert provisioned.stack.agent.scalable_target is not None  # exposed for the warmer
    assert snapstart.stack.agent.scalable_target is None
    t = template(provisioned)
    alias_id = only_id(t, "AWS::Lambda::Alias")
    t.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {
        "ServiceNamespace": "lambda",
        "ScalableDimension": "lambda:function:ProvisionedConcurrency",
        "MinCapacity": 1,
        "MaxCapacity": 10,
        # function:<name>:live, the name taken from the alias ARN
        "ResourceId": {"Fn::Join": ["", [
            "function:",
            {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": alias_id}]}]},
            ":live",
        ]]},
    })
    target_id = only_id(t, "AWS::ApplicationAutoScaling::ScalableTarget")
    t.has_resource_properties("AWS::ApplicationAutoScaling::ScalingPolicy", {
        "PolicyType": "TargetTrackingScaling",
        "ScalingTargetId": {"Ref": target_id},
        "TargetTrackingScalingPolicyConfiguration": Match.object_like({
            "TargetValue": 0.7,
            "PredefinedMetricSpecification": {
                "PredefinedMetricType": "LambdaProvisionedConcurrencyUtilization"},
        }),
    })


# ---- HTTP API --------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["provisioned", "snapstart"])
def test_http_api_integrates_with_the_alias(variant: str, request: pytest.FixtureRequest) -> None:
    t = template(request.getfixturevalue(variant))
    alias_id = only_id(t, "AWS::Lambda::Alias")
    t.has_resource_properties("AWS::ApiGatewayV2::Api", {"ProtocolType": "HTTP"})
    t.has_resource_properties("AWS::ApiGatewayV2::Integration", {
        "IntegrationType": "AWS_PROXY",
        "IntegrationUri": {"Ref": alias_id},  # Ref of an alias = its ARN (qualified with live)
        "PayloadFormatVersion": "2.0",
    })
    t.has_resource_properties("AWS::Lambda::Permission", {
        "Action": "lambda:InvokeFunction",
        "FunctionName": {"Ref": alias_id},
        "Principal": "apigateway.amazonaws.com",
    })
    t.has_resource_properties("AWS::ApiGatewayV2::Route", {"RouteKey": "$default"})


def test_default_stage_throttles_and_logs_access(snapstart: Synth) -> None:
    t = template(snapstart)
    log_groups = t.find_resources("AWS::Logs::LogGroup")
    stage = t.find_resources("AWS::ApiGatewayV2::Stage")
    [props] = [s["Properties"] for s in stage.values()]
    assert props["StageName"] == "$default" and props["AutoDeploy"] is True
    assert props["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 100, "ThrottlingRateLimit": 50}
    destination = props["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert destination in log_groups
    log_format = json.loads(props["AccessLogSettings"]["Format"])
    assert log_format["requestId"] == "$context.requestId"
    assert log_format["integrationLatency"] == "$context.integrationLatency"


# ---- alarms and dashboard --------------------------------------------------------------------


def _alarm_metrics(t: Template) -> dict[str, dict[str, Any]]:
    return {a["Properties"]["MetricName"]: a["Properties"]
            for a in t.find_resources("AWS::CloudWatch::Alarm").values()}


def test_alarms_on_the_alias(provisioned: Synth, snapstart: Synth) -> None:
    alarms = _alarm_metrics(template(provisioned))
    assert set(alarms) == {"Errors", "Throttles", "Duration", "ProvisionedConcurrencySpilloverInvocations"}
    duration = alarms["Duration"]
    assert (duration["ExtendedStatistic"], duration["Threshold"]) == ("p99", 2000)
    assert duration["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarms["Errors"]["Threshold"] == 5 and alarms["Throttles"]["Threshold"] == 1
    for props in alarms.values():
        names = {d["Name"] for d in props["Dimensions"]}
        assert names == {"FunctionName", "Resource"}  # the alias, not the whole function
        assert (props["Period"], props["EvaluationPeriods"], props["DatapointsToAlarm"]) == (60, 5, 3)
    # no spillover alarm without provisioned concurrency
    assert set(_alarm_metrics(template(snapstart))) == {"Errors", "Throttles", "Duration"}


def _dashboard_widgets(t: Template) -> list[dict[str, Any]]:
    [dashboard] = t.find_resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = "".join(p if isinstance(p, str) else "REF" for p in parts)
    return list(json.loads(body)["widgets"])


def test_dashboard_shows_cold_starts_pc_spillover_and_paths(provisioned: Synth) -> None:
    widgets = _dashboard_widgets(template(provisioned))
    expressions = [m[0]["expression"] for w in widgets for m in w["properties"].get("metrics", [])
                   if isinstance(m[0], dict) and "expression" in m[0]]
    for name in ("ColdStart", "InitDuration", "Requests"):  # toolkit EMF metrics, any dimensions
        assert any(f'Namespace="Warmstart" MetricName="{name}"' in e and e.startswith("SEARCH(")
                   for e in expressions), (name, expressions)
    lambda_metrics = {m[1] for w in widgets for m in w["properties"].get("metrics", [])
                      if m and m[0] == "AWS/Lambda"}
    assert {"ProvisionedConcurrencyUtilization", "ProvisionedConcurrencySpilloverInvocations",
            "Invocations", "Duration", "Errors", "Throttles", "ConcurrentExecutions"} <= lambda_metrics
    [logs_widget] = [w for w in widgets if w["type"] == "log"]
    assert "@initDuration" in logs_widget["properties"]["query"]


def test_outputs(provisioned: Synth) -> None:
    outputs = template(provisioned).find_outputs("*")
    assert {"ApiUrl", "FunctionName", "AliasArn", "Strategy", "DegradationParameterName",
            "DashboardName"} <= set(outputs)
    assert outputs["Strategy"]["Value"] == "provisioned"


# ---- template checks -------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["provisioned", "snapstart", "extended"])
def test_cdk_nag_aws_solutions_has_no_unacknowledged_finding(variant: str, request: pytest.FixtureRequest) -> None:
    s: Synth = request.getfixturevalue(variant)
    [report] = [r for r in s.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert report["violations"] == [], json.dumps(report["violations"], indent=1)[:3000]
    assert report["conclusion"] == "success"
    assert s.error is None
    acknowledged = {v["ruleName"] for v in report["suppressedViolations"]}
    if variant != "extended":  # the warmer and GPU endpoint constructs acknowledge their own
        assert acknowledged == EXPECTED_ACKNOWLEDGED
    assert EXPECTED_ACKNOWLEDGED <= acknowledged
    for finding in report["suppressedViolations"]:
        assert len(finding["reason"]) >= 40, finding


def test_extension_points_wire_gpu_endpoint_and_warmer(extended: Synth) -> None:
    t = template(extended)
    functions = t.find_resources("AWS::Lambda::Function")
    [agent] = [f for f in functions.values() if f["Properties"]["Handler"] == "functions.agent.handler.handler"]
    assert "WARMSTART_OVERFLOW_ENDPOINT_NAME" in agent["Properties"]["Environment"]["Variables"]
    t.resource_count_is("AWS::SageMaker::Endpoint", 1)
    t.resource_count_is("AWS::Scheduler::Schedule", 1)
    # the forecast layer (numpy) is built only for the warmer, and used by it, not by the agent
    t.resource_count_is("AWS::Lambda::LayerVersion", 4)
    [warmer] = [f for f in functions.values() if f is not agent]
    [forecast_ref] = warmer["Properties"]["Layers"]
    assert forecast_ref not in agent["Properties"]["Layers"]


def test_cfn_lint_is_clean(provisioned: Synth, snapstart: Synth) -> None:
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), str(provisioned.template_path), str(snapstart.template_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sam_validate_accepts_the_template(provisioned: Synth, tmp_path: Path) -> None:
    assert SAM.exists(), f"{SAM} missing: run `make .venv-sam/.installed` (part of `make setup`)"
    proc = subprocess.run(
        [str(SAM), "validate", "--template", str(provisioned.template_path)],  # cfn-lint: above
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SAM_CLI_TELEMETRY": "0",
             "AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "is a valid SAM Template" in proc.stdout + proc.stderr

