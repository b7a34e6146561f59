"""The synthesized Warmstart stack with cdk.json's three agents (intent at /, lookup at /lookup, chat
at /chat), per
strategy: one function + alias live + strategy + alarms per agent, only the layers each declares,
one HTTP API routing by path prefix, a dashboard band per agent, outputs per agent; the security
options (JWT authorizer on every route, the log groups' KMS key, reserved concurrency, the
warmer's and GPU endpoint's scoped grants); and the template checks (cdk-nag, cfn-lint, sam
validate).

Three real synths of the real app (cdk.json context, cdk-nag on), once for this module; bundling is
skipped, so no layer is built here (see test_layer_bundling.py for a real build). Resources are
found by what they are (handler, alias name, RouteKey), never by hashed logical IDs.
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
HANDLERS = {"intent": "functions.agent.handler.handler", "lookup": "functions.lookup.handler.handler",
            "chat": "functions.chat.handler.handler"}
#: cdk.json's agents, in its order.
AGENTS = tuple(HANDLERS)
#: The warmer's function: cdk.json deploys it by default (``warmer.enabled: true``, issue 20).
WARMER_HANDLER = "warmers.handler.handler"


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synth(tmp_path_factory.mktemp("cdk-provisioned"), strategy="provisioned")


@pytest.fixture(scope="module")
def snapstart(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    # the cdk.json default: intent on SnapStart, lookup on demand (strategy none)
    return synth(tmp_path_factory.mktemp("cdk-snapstart"))


#: The JWT authorizer of the ``extended`` synth.
JWT = {"type": "jwt", "issuer": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example",
       "audience": ["client-1"], "scopes": ["agents/invoke"]}


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    # the extension points: GPU endpoint (overflow) and warmer enabled on the provisioned variant,
    # with every security option on: JWT authorization, the log key, a reservation on lookup
    return synth(tmp_path_factory.mktemp("cdk-extended"), strategy="provisioned",
                 overrides={"warmer.enabled": True, "gpu_endpoint.enabled": True,
                            "http_api.authorization": JWT, "logs": {"kms_key": True},
                            "agents.lookup.reserved_concurrency": 20})


def template(s: Synth) -> Template:
    assert s.error is None, s.error
    return Template.from_json(s.template)


def function_id(s: Synth, agent: str) -> str:
    """Logical ID of the agent's function, found by its handler."""
    [found] = template(s).find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": HANDLERS[agent]}})
    return found


def function_props(s: Synth, agent: str) -> dict[str, Any]:
    return dict(s.template["Resources"][function_id(s, agent)]["Properties"])


def alias_id(s: Synth, agent: str) -> str:
    [found] = template(s).find_resources(
        "AWS::Lambda::Alias", {"Properties": {"FunctionName": {"Ref": function_id(s, agent)}}})
    return found


def layer_ids(s: Synth) -> dict[str, str]:
    """Layer name (from its description, ``warmstart <name>...``) -> logical ID."""
    out = {}
    for lid, res in template(s).find_resources("AWS::Lambda::LayerVersion").items():
        description = res["Properties"]["Description"]
        name = "model" if "model artifact" in description else description.split()[1].rstrip(":")
        out[name] = lid
    return out


# ---- one function, version and alias live per agent ------------------------------------------


@pytest.mark.parametrize("variant", ["provisioned", "snapstart"])
def test_each_agent_has_its_alias_live_on_a_published_version(variant: str, request: pytest.FixtureRequest) -> None:
    s: Synth = request.getfixturevalue(variant)
    t = template(s)
    # the three agents, and the warmer cdk.json deploys by default; each with its alias live
    handlers = sorted(f["Properties"]["Handler"]
                      for f in t.find_resources("AWS::Lambda::Function").values())
    assert handlers == sorted([*HANDLERS.values(), WARMER_HANDLER])
    t.resource_count_is("AWS::Lambda::Alias", 4)
    t.all_resources_properties("AWS::Lambda::Alias", {"Name": "live"})
    for agent in AGENTS:
        fn = function_id(s, agent)
        [version] = t.find_resources("AWS::Lambda::Version", {"Properties": {"FunctionName": {"Ref": fn}}})
        t.has_resource_properties("AWS::Lambda::Alias", {
            "Name": "live",
            "FunctionName": {"Ref": fn},
            "FunctionVersion": {"Fn::GetAtt": [version, "Version"]},
        })
    assert "$LATEST" not in json.dumps(s.template)
    assert set(s.stack.agents) == set(AGENTS)
    assert s.stack.agents["lookup"].function.node.path == "Warmstart/Agent-lookup/Function"


def test_function_settings_and_environment_contract_per_agent(snapstart: Synth) -> None:
    t = template(snapstart)
    t.has_resource_properties("AWS::Lambda::Function", {
        "Handler": HANDLERS["intent"],
        "Runtime": "python3.12",
        "Architectures": ["x86_64"],
        "MemorySize": 2048,
        "Timeout": 30,
        "LoggingConfig": Match.object_like({"LogFormat": "JSON"}),
        "Environment": {"Variables": {
            "WARMSTART_AGENT_NAME": "intent",
            "WARMSTART_MODEL_DIR": "/opt/model",
            "WARMSTART_SLA_MS": "2000",
            "WARMSTART_DEBUG_RESOURCE": "false",
            "WARMSTART_DEGRADATION_PARAMETER": "/warmstart/intent/degradation-level",
            "POWERTOOLS_SERVICE_NAME": "intent",
            "POWERTOOLS_METRICS_NAMESPACE": "Warmstart",
        }},  # the root agent: no WARMSTART_BASE_PATH
    })
    t.has_resource_properties("AWS::Lambda::Function", {
        "Handler": HANDLERS["lookup"],
        "Runtime": "python3.12",
        "MemorySize": 512,
        "Timeout": 30,
        "Environment": {"Variables": {
            "WARMSTART_AGENT_NAME": "lookup",
            "WARMSTART_BASE_PATH": "/lookup",
            "WARMSTART_SLA_MS": "2000",
            "WARMSTART_DEBUG_RESOURCE": "false",
            "WARMSTART_DEGRADATION_PARAMETER": "/warmstart/lookup/degradation-level",
            "POWERTOOLS_SERVICE_NAME": "lookup",
            "POWERTOOLS_METRICS_NAMESPACE": "Warmstart",
            "LOOKUP_TOOL_URL": "",
        }},  # model-free: no WARMSTART_MODEL_DIR
    })
    for agent in AGENTS:
        t.has_resource_properties("AWS::SSM::Parameter", {
            "Name": f"/warmstart/{agent}/degradation-level", "Type": "String", "Value": "L0"})


def test_each_agent_ships_only_the_layers_it_declares_built_once(snapstart: Synth) -> None:
    t = template(snapstart)
    layers = layer_ids(snapstart)
    # web once, shared by the agents; chat (httpx) for the chat agent; forecast (numpy) for the
    # default warmer only
    assert set(layers) == {"web", "inference", "model", "forecast", "chat"}
    t.all_resources_properties("AWS::Lambda::LayerVersion", {
        "CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["x86_64"]})
    intent = function_props(snapstart, "intent")["Layers"]
    lookup = function_props(snapstart, "lookup")["Layers"]
    assert sorted(ref["Ref"] for ref in intent) == sorted(
        layers[name] for name in ("web", "inference", "model"))
    assert lookup == [{"Ref": layers["web"]}]  # no inference, no model layer on the model-free agent
    chat = function_props(snapstart, "chat")["Layers"]
    assert sorted(ref["Ref"] for ref in chat) == sorted(layers[name] for name in ("web", "chat"))
    [warmer] = [f["Properties"] for f in t.find_resources("AWS::Lambda::Function").values()
                if f["Properties"]["Handler"] == WARMER_HANDLER]
    assert warmer["Layers"] == [{"Ref": layers["forecast"]}]
    assert snapstart.stack.layers.built.keys() == {
        (name, "python3.12", "x86_64") for name in ("web", "inference", "model", "forecast", "chat")}


def test_code_and_layers_carry_asset_metadata_for_sam(snapstart: Synth) -> None:
    t = template(snapstart)
    t.all_resources("AWS::Lambda::Function", {"Metadata": Match.object_like({
        "aws:asset:property": "Code", "aws:asset:path": Match.any_value()})})
    t.all_resources("AWS::Lambda::LayerVersion", {"Metadata": Match.object_like({
        "aws:asset:property": "Content"})})
    # each agent has its own code asset (its own code folders)
    resources = snapstart.template["Resources"]
    hashes = {resources[function_id(snapstart, a)]["Properties"]["Code"]["S3Key"] for a in AGENTS}
    assert len(hashes) == 3


# ---- strategies ------------------------------------------------------------------------------


def test_snapstart_agent_and_on_demand_agent_side_by_side(snapstart: Synth) -> None:
    t = template(snapstart)
    assert function_props(snapstart, "intent")["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert "SnapStart" not in function_props(snapstart, "lookup")  # strategy none
    t.all_resources_properties("AWS::Lambda::Alias", {"ProvisionedConcurrencyConfig": Match.absent()})
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalingPolicy", 0)
    assert snapstart.stack.agents["intent"].scalable_target is None


def test_provisioned_variant_puts_provisioned_concurrency_on_every_alias(provisioned: Synth) -> None:
    t = template(provisioned)
    t.all_resources_properties("AWS::Lambda::Function", {"SnapStart": Match.absent()})
    for agent in AGENTS:  # (the warmer's own alias has none)
        t.has_resource_properties("AWS::Lambda::Alias", {
            "Name": "live", "FunctionName": {"Ref": function_id(provisioned, agent)},
            "ProvisionedConcurrencyConfig": {"ProvisionedConcurrentExecutions": 1}})
    t.resource_properties_count_is(
        "AWS::Lambda::Version", {"ProvisionedConcurrencyConfig": Match.any_value()}, 0)
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 3)
    # intent: cdk.json's variant caps it at 5; lookup, chat: the variant's default bounds (1, 10)
    for agent, most in (("intent", 5), ("lookup", 10), ("chat", 10)):
        assert provisioned.stack.agents[agent].scalable_target is not None  # exposed for the warmer
        alias = alias_id(provisioned, agent)
        [target] = t.find_resources("AWS::ApplicationAutoScaling::ScalableTarget", {"Properties": {
            "ServiceNamespace": "lambda",
            "ScalableDimension": "lambda:function:ProvisionedConcurrency",
            "MinCapacity": 1,
            "MaxCapacity": most,
            # function:<name>:live, the name taken from the alias ARN
            "ResourceId": {"Fn::Join": ["", [
                "function:", {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": alias}]}]}, ":live"]]},
        }})
        t.has_resource_properties("AWS::ApplicationAutoScaling::ScalingPolicy", {
            "PolicyType": "TargetTrackingScaling",
            "ScalingTargetId": {"Ref": target},
            "TargetTrackingScalingPolicyConfiguration": Match.object_like({
                "TargetValue": 0.7,
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "LambdaProvisionedConcurrencyUtilization"},
            }),
        })


# ---- one HTTP API, one path prefix per agent -------------------------------------------------


def _integration_of(s: Synth, agent: str) -> str:
    [found] = template(s).find_resources("AWS::ApiGatewayV2::Integration", {"Properties": {
        "IntegrationType": "AWS_PROXY",
        "IntegrationUri": {"Ref": alias_id(s, agent)},  # Ref of an alias = its ARN (qualified with live)
        "PayloadFormatVersion": "2.0",
    }})
    return found


@pytest.mark.parametrize("variant", ["provisioned", "snapstart"])
def test_http_api_routes_each_prefix_to_its_agents_alias(variant: str, request: pytest.FixtureRequest) -> None:
    s: Synth = request.getfixturevalue(variant)
    t = template(s)
    t.resource_count_is("AWS::ApiGatewayV2::Api", 1)
    t.has_resource_properties("AWS::ApiGatewayV2::Api", {"ProtocolType": "HTTP"})
    routes = {r["Properties"]["RouteKey"]: r["Properties"]["Target"]
              for r in t.find_resources("AWS::ApiGatewayV2::Route").values()}
    to = {agent: {"Fn::Join": ["", ["integrations/", {"Ref": _integration_of(s, agent)}]]}
          for agent in AGENTS}
    assert routes == {"$default": to["intent"], "ANY /lookup": to["lookup"],
                      "ANY /lookup/{proxy+}": to["lookup"], "ANY /chat": to["chat"],
                      "ANY /chat/{proxy+}": to["chat"]}
    for agent in AGENTS:
        t.has_resource_properties("AWS::Lambda::Permission", {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Ref": alias_id(s, agent)},
            "Principal": "apigateway.amazonaws.com",
        })


def test_default_stage_throttles_and_logs_access(snapstart: Synth) -> None:
    t = template(snapstart)
    log_groups = t.find_resources("AWS::Logs::LogGroup")
    [props] = [s["Properties"] for s in t.find_resources("AWS::ApiGatewayV2::Stage").values()]
    assert props["StageName"] == "$default" and props["AutoDeploy"] is True
    assert props["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 100, "ThrottlingRateLimit": 50}
    destination = props["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert destination in log_groups
    log_format = json.loads(props["AccessLogSettings"]["Format"])
    assert log_format["requestId"] == "$context.requestId"
    assert log_format["routeKey"] == "$context.routeKey"  # says which agent's route served it
    assert log_format["integrationLatency"] == "$context.integrationLatency"


# ---- alarms and dashboard --------------------------------------------------------------------


def _alarms(t: Template) -> dict[tuple[str, str], dict[str, Any]]:
    """(agent, metric) -> alarm properties; the agent read from the alarm description."""
    out = {}
    for alarm in t.find_resources("AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        agent = props["AlarmDescription"].split()[2].rstrip(",")
        out[(agent, props["MetricName"])] = props
    return out


def test_alarms_on_each_agents_alias(provisioned: Synth, snapstart: Synth) -> None:
    alarms = _alarms(template(provisioned))
    metrics = {"Errors", "Throttles", "Duration", "ProvisionedConcurrencySpilloverInvocations"}
    # the streaming chat agent's SLA alarm is its first token's, not its streams' Duration
    assert set(alarms) == ({(agent, m) for agent in AGENTS for m in metrics} - {("chat", "Duration")}
                           | {("chat", "TimeToFirstTokenMs")})
    first_token = alarms.pop(("chat", "TimeToFirstTokenMs"))
    assert (first_token["ExtendedStatistic"], first_token["Threshold"]) == ("p95", 1000)
    for (agent, metric), props in alarms.items():
        names = {d["Name"] for d in props["Dimensions"]}
        assert names == {"FunctionName", "Resource"}  # the alias, not the whole function
        function = [d["Value"] for d in props["Dimensions"] if d["Name"] == "FunctionName"]
        assert function == [{"Ref": function_id(provisioned, agent)}]
        assert (props["Period"], props["EvaluationPeriods"], props["DatapointsToAlarm"]) == (60, 5, 3)
    duration = alarms[("lookup", "Duration")]
    assert (duration["ExtendedStatistic"], duration["Threshold"]) == ("p99", 2000)  # lookup's SLA
    assert duration["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarms[("intent", "Errors")]["Threshold"] == 5 and alarms[("intent", "Throttles")]["Threshold"] == 1
    # no spillover alarm without provisioned concurrency
    assert {m for _, m in _alarms(template(snapstart))} == {"Errors", "Throttles", "Duration",
                                                            "TimeToFirstTokenMs"}


def _dashboard_widgets(t: Template) -> list[dict[str, Any]]:
    [dashboard] = t.find_resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = "".join(p if isinstance(p, str) else "REF" for p in parts)
    return list(json.loads(body)["widgets"])


def test_dashboard_has_a_band_per_agent(provisioned: Synth) -> None:
    widgets = _dashboard_widgets(template(provisioned))
    titles = [w["properties"]["markdown"] for w in widgets if w["type"] == "text"]
    assert [t.split("`")[1] for t in titles] == list(AGENTS)
    expressions = [m[0]["expression"] for w in widgets for m in w["properties"].get("metrics", [])
                   if isinstance(m[0], dict) and "expression" in m[0]]
    for agent in AGENTS:
        for name in ("ColdStart", "InitDuration", "Requests"):  # toolkit EMF metrics, any dimensions
            assert any(e.startswith("SEARCH(") and f'Namespace="Warmstart" MetricName="{name}" '
                       f'service="{agent}"' in e for e in expressions), (agent, name, expressions)
    lambda_metrics = {m[1] for w in widgets for m in w["properties"].get("metrics", [])
                      if m and m[0] == "AWS/Lambda"}
    assert {"ProvisionedConcurrencyUtilization", "ProvisionedConcurrencySpilloverInvocations",
            "Invocations", "Duration", "Errors", "Throttles", "ConcurrentExecutions"} <= lambda_metrics
    log_widgets = [w for w in widgets if w["type"] == "log"]
    assert len(log_widgets) == 3 and all("@initDuration" in w["properties"]["query"] for w in log_widgets)
    assert [w["properties"]["title"].split(":")[0] for w in log_widgets] == list(AGENTS)


def test_outputs_per_agent(provisioned: Synth) -> None:
    outputs = template(provisioned).find_outputs("*")
    per_agent = {f"{p}{k}" for p in ("Intent", "Lookup", "Chat")
                 for k in ("FunctionName", "AliasArn", "Url", "Strategy", "DegradationParameterName")}
    assert {"ApiUrl", "DashboardName", "Agents"} | per_agent <= set(outputs)
    assert outputs["Agents"]["Value"] == "intent,lookup,chat"
    assert outputs["LookupStrategy"]["Value"] == "provisioned"
    assert outputs["IntentAliasArn"]["Value"] == {"Ref": alias_id(provisioned, "intent")}
    assert outputs["LookupFunctionName"]["Value"] == {"Ref": function_id(provisioned, "lookup")}
    assert json.dumps(outputs["LookupUrl"]["Value"]).endswith('"/lookup"]]}')
    assert outputs["IntentUrl"]["Value"] == outputs["ApiUrl"]["Value"]


# ---- template checks -------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["provisioned", "snapstart", "extended"])
def test_cdk_nag_aws_solutions_has_no_unacknowledged_finding(variant: str, request: pytest.FixtureRequest) -> None:
    s: Synth = request.getfixturevalue(variant)
    [report] = [r for r in s.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert report["violations"] == [], json.dumps(report["violations"], indent=1)[:3000]
    assert report["conclusion"] == "success"
    assert s.error is None
    # the warmer (in every variant: on by default) and the GPU endpoint constructs acknowledge
    # their own findings; the rest of the stack only these
    extensions = ("Warmstart/Warmer", "Warmstart/GpuEndpoint")
    acknowledged = {v["ruleName"] for v in report["suppressedViolations"]
                    if not v["acknowledgedAt"].startswith(extensions)}
    assert any(v["acknowledgedAt"].startswith("Warmstart/Warmer/")
               for v in report["suppressedViolations"])
    if variant != "extended":
        assert acknowledged == EXPECTED_ACKNOWLEDGED
    else:  # JWT on every route: nothing to acknowledge for APIG4
        assert "AwsSolutions-APIG4" not in acknowledged and "AwsSolutions-L1" in acknowledged
    for finding in report["suppressedViolations"]:
        assert len(finding["reason"]) >= 40, finding


def test_extension_points_share_the_gpu_endpoint_and_warm_every_alias(extended: Synth) -> None:
    t = template(extended)
    intent, lookup = function_props(extended, "intent"), function_props(extended, "lookup")
    # only the agent that declares overflow gpu is wired to the (one) endpoint
    assert "WARMSTART_OVERFLOW_ENDPOINT_NAME" in intent["Environment"]["Variables"]
    assert "WARMSTART_OVERFLOW_ENDPOINT_NAME" not in lookup["Environment"]["Variables"]
    t.resource_count_is("AWS::SageMaker::Endpoint", 1)
    invokers = [p for p in t.find_resources("AWS::IAM::Policy").values()
                if "sagemaker:InvokeEndpoint" in json.dumps(p["Properties"]["PolicyDocument"])]
    assert [p["Properties"]["Roles"] for p in invokers] == [[{"Ref": intent["Role"]["Fn::GetAtt"][0]}]]
    # one warmer manages every agent's alias
    t.resource_count_is("AWS::Scheduler::Schedule", 1)
    functions = t.find_resources("AWS::Lambda::Function")
    [warmer] = [f for f in functions.values() if f["Properties"]["Handler"] == "warmers.handler.handler"]
    config = json.dumps(warmer["Properties"]["Environment"]["Variables"]["WARMSTART_WARMER_CONFIG"])
    for agent in AGENTS:
        assert f'"Ref": "{function_id(extended, agent)}"' in config
    assert config.count('\\"alias\\":\\"live\\"') == 3
    # the forecast layer (numpy) is built only for the warmer, and used by it, not by the agents
    t.resource_count_is("AWS::Lambda::LayerVersion", 5)
    [forecast_ref] = warmer["Properties"]["Layers"]
    assert forecast_ref not in intent["Layers"] and forecast_ref not in lookup["Layers"]


def test_cfn_lint_is_clean(provisioned: Synth, snapstart: Synth, extended: Synth) -> None:
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), str(provisioned.template_path), str(snapstart.template_path),
                           str(extended.template_path)],
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


def test_the_old_single_agent_key_still_synthesizes_one_root_agent(tmp_path: Path) -> None:
    from aws_cdk.assertions import Annotations

    from infra.app import build_cdk_app
    from tests.infra.cdk_helpers import cdk_context

    # GIVEN a cdk.json of before issue 9: one `agent` key, one degradation parameter
    context = cdk_context()
    legacy = context["warmstart"]
    legacy.pop("agents")
    legacy["variants"] = {}
    legacy["agent"] = {"handler": HANDLERS["intent"], "runtime": "python3.12", "memory_mb": 2048,
                       "timeout_s": 30, "strategy": "snapstart", "sla_ms": 2000}
    legacy["degradation_parameter"] = "/warmstart/agent/degradation-level"
    # WHEN the app is built THEN it is one agent named agent at /, with the whole functions package,
    # all three layers and the old parameter, and a warning that says how to migrate
    _, stack, config = build_cdk_app(context, outdir=str(tmp_path), nag=False)
    assert list(stack.agents) == ["agent"] and config.warnings
    t = Template.from_stack(stack)
    t.has_resource_properties("AWS::Lambda::Function", {
        "Handler": HANDLERS["intent"], "SnapStart": {"ApplyOn": "PublishedVersions"},
        "Environment": {"Variables": Match.object_like({
            "WARMSTART_AGENT_NAME": "agent", "WARMSTART_MODEL_DIR": "/opt/model",
            "WARMSTART_DEGRADATION_PARAMETER": "/warmstart/agent/degradation-level"})}})
    [function] = t.find_resources("AWS::Lambda::Function",
                                  {"Properties": {"Handler": HANDLERS["intent"]}}).values()
    assert len(function["Properties"]["Layers"]) == 3
    t.has_resource_properties("AWS::Lambda::Function", {"Handler": WARMER_HANDLER})  # the default
    assert {r["Properties"]["RouteKey"] for r in t.find_resources("AWS::ApiGatewayV2::Route").values()} == {"$default"}
    Annotations.from_stack(stack).has_warning(
        "/Warmstart", Match.string_like_regexp("warmstart.agent is the old single-agent key"))


# ---- security options ------------------------------------------------------------------------


def test_the_public_default_is_a_synth_warning(snapstart: Synth, extended: Synth) -> None:
    from aws_cdk.assertions import Annotations

    Annotations.from_stack(snapstart.stack).has_warning(
        "/Warmstart/HttpApi", Match.string_like_regexp("The HTTP API is public"))
    Annotations.from_stack(extended.stack).has_no_warning(
        "*", Match.string_like_regexp("The HTTP API is public"))
    t = template(snapstart)
    t.all_resources_properties("AWS::ApiGatewayV2::Route", {"AuthorizationType": "NONE"})


def test_jwt_authorizer_on_every_route(extended: Synth) -> None:
    t = template(extended)
    [authorizer] = t.find_resources("AWS::ApiGatewayV2::Authorizer", {"Properties": {
        "AuthorizerType": "JWT", "IdentitySource": ["$request.header.Authorization"],
        "JwtConfiguration": {"Issuer": JWT["issuer"], "Audience": ["client-1"]}}})
    routes = t.find_resources("AWS::ApiGatewayV2::Route")
    assert {r["Properties"]["RouteKey"] for r in routes.values()} == {
        "$default", "ANY /lookup", "ANY /lookup/{proxy+}", "ANY /chat", "ANY /chat/{proxy+}"}
    for route in routes.values():
        assert route["Properties"]["AuthorizationType"] == "JWT"
        assert route["Properties"]["AuthorizerId"] == {"Ref": authorizer}
        assert route["Properties"]["AuthorizationScopes"] == ["agents/invoke"]


def test_every_log_group_is_encrypted_with_the_stacks_key(extended: Synth) -> None:
    t = template(extended)
    [key] = t.find_resources("AWS::KMS::Key", {"Properties": {"EnableKeyRotation": True,
                                                               "Description": Match.string_like_regexp("log groups")}})
    log_groups = t.find_resources("AWS::Logs::LogGroup")
    assert len(log_groups) == 5  # three agents, the access logs, the warmer
    for group in log_groups.values():
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    statements = extended.template["Resources"][key]["Properties"]["KeyPolicy"]["Statement"]
    [logs] = [st for st in statements if st.get("Sid") == "CloudWatchLogsEncryptsThisAccountsLogGroups"]
    assert logs["Principal"] == {"Service": {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"},
                                                               ".amazonaws.com"]]}}
    assert sorted(logs["Action"]) == ["kms:Decrypt*", "kms:Describe*", "kms:Encrypt*",
                                      "kms:GenerateDataKey*", "kms:ReEncrypt*"]
    [arn] = logs["Condition"]["ArnLike"].values()
    assert list(logs["Condition"]["ArnLike"]) == ["kms:EncryptionContext:aws:logs:arn"]
    assert arn["Fn::Join"][1][-1] == ":log-group:*"


def test_no_log_key_by_default(snapstart: Synth) -> None:
    t = template(snapstart)
    t.resource_count_is("AWS::KMS::Key", 0)
    t.all_resources_properties("AWS::Logs::LogGroup", {"KmsKeyId": Match.absent()})


def test_reserved_concurrency_reaches_the_function_and_the_warmer(extended: Synth) -> None:
    assert function_props(extended, "lookup")["ReservedConcurrentExecutions"] == 20
    assert "ReservedConcurrentExecutions" not in function_props(extended, "intent")
    [warmer] = [f for f in template(extended).find_resources("AWS::Lambda::Function").values()
                if f["Properties"]["Handler"] == "warmers.handler.handler"]
    config = json.dumps(warmer["Properties"]["Environment"]["Variables"]["WARMSTART_WARMER_CONFIG"])
    assert config.count('\\"available_concurrency\\":20') == 1  # lookup's, measured against it


def test_warmer_and_gpu_endpoint_grants_are_scoped(extended: Synth) -> None:
    statements = [st for p in template(extended).find_resources("AWS::IAM::Policy").values()
                  for st in p["Properties"]["PolicyDocument"]["Statement"]]
    text = json.dumps(statements)
    assert "TargetTracking-function:*" not in text and "/aws/sagemaker/Endpoints/*" not in text
    [alarms] = [st for st in statements if st.get("Sid", "").startswith("TargetTrackingAlarms")]
    refs = sorted(r["Fn::Join"][1][-2]["Ref"] for r in alarms["Resource"])
    assert refs == sorted(function_id(extended, a) for a in AGENTS)
    writes = {st["Condition"]["StringEquals"]["application-autoscaling:scalable-dimension"]:
              st["Action"] for st in statements
              if "application-autoscaling:RegisterScalableTarget" in json.dumps(st["Action"])}
    # Lambda PC: every write; the GPU endpoint's variant: its capacity only (no policy, no alarm)
    assert set(writes) == {"lambda:function:ProvisionedConcurrency",
                           "sagemaker:variant:DesiredInstanceCount"}
    assert writes["sagemaker:variant:DesiredInstanceCount"] == (
        "application-autoscaling:RegisterScalableTarget")
    [endpoint_calls] = [st for st in statements if st.get("Sid") == "OverflowEndpoint"]
    assert endpoint_calls["Resource"] == {"Ref": next(iter(template(extended).find_resources(
        "AWS::SageMaker::Endpoint")))}
    template(extended).has_resource_properties("AWS::SageMaker::Endpoint", {
        "EndpointName": "Warmstart-GpuEndpoint"})
    assert "/aws/sagemaker/Endpoints/Warmstart-GpuEndpoint:*" in text



def test_the_warmer_plans_the_gpu_endpoints_capacity_for_its_overflow_agents(
        extended: Synth) -> None:
    t = template(extended)
    # the variant is a scalable target the warmer sets (1 to the cap: a variant holds >= 1)
    t.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {
        "ServiceNamespace": "sagemaker", "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "ResourceId": "endpoint/Warmstart-GpuEndpoint/variant/AllTraffic",
        "MinCapacity": 1, "MaxCapacity": 2})
    t.has_resource_properties("AWS::SSM::Parameter", {
        "Name": "/warmstart/Warmstart/overflow-capacity",
        "Value": '{"capacity":0,"state":"unknown","at":null}'})
    # only the overflow agent reads it
    intent, lookup = function_props(extended, "intent"), function_props(extended, "lookup")
    assert intent["Environment"]["Variables"]["WARMSTART_OVERFLOW_CAPACITY_PARAMETER"] == {
        "Ref": next(iter(t.find_resources("AWS::SSM::Parameter", {"Properties": {
            "Name": "/warmstart/Warmstart/overflow-capacity"}})))}
    assert "WARMSTART_OVERFLOW_CAPACITY_PARAMETER" not in lookup["Environment"]["Variables"]
    # the warmer's config names the endpoint and its one overflow agent
    [warmer] = [f for f in t.find_resources("AWS::Lambda::Function").values()
                if f["Properties"]["Handler"] == "warmers.handler.handler"]
    config = json.dumps(warmer["Properties"]["Environment"]["Variables"]["WARMSTART_WARMER_CONFIG"])
    assert '\\"endpoints\\":[{\\"endpoint_name\\":\\"Warmstart-GpuEndpoint\\"' in config
    assert '\\"capacity_parameter\\"' in config


def test_the_warmers_spend_guard_reads_each_overflow_agents_service_and_alarms(
        extended: Synth) -> None:
    t = template(extended)
    [warmer] = [f for f in t.find_resources("AWS::Lambda::Function").values()
                if f["Properties"]["Handler"] == "warmers.handler.handler"]
    config = json.dumps(warmer["Properties"]["Environment"]["Variables"]["WARMSTART_WARMER_CONFIG"])
    # the service dimension of the overflow agent's EMF Requests: its name
    assert '\\"agent_services\\":[\\"intent\\"]' in config
    t.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "Warmstart/Warmer", "MetricName": "EndpointSpendUnansweredUsd",
        "Dimensions": [{"Name": "EndpointName", "Value": "Warmstart-GpuEndpoint"}],
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "EvaluationPeriods": 3})


def test_iam_authorization_on_every_route() -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk.assertions import Annotations

    from infra.config import HttpApiConfig
    from infra.constructs.http_api import AgentHttpApi, ApiRoute

    # GIVEN the HTTP API construct alone, in front of one alias at / and /b
    stack = cdk.Stack(cdk.App(), "IamApi")
    fn = lambda_.Function(stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                          code=lambda_.Code.from_inline("def handler(e, c):\n    return e\n"))
    alias = lambda_.Alias(stack, "Live", alias_name="live", version=fn.current_version)
    routes = [ApiRoute("a", "/", alias), ApiRoute("b", "/b", alias)]
    # WHEN authorization is iam THEN every route, $default included, takes SigV4 only
    AgentHttpApi(stack, "HttpApi", routes=routes, config=HttpApiConfig(50, 100, 30, "iam"))
    t = Template.from_stack(stack)
    t.resource_count_is("AWS::ApiGatewayV2::Route", 3)
    t.all_resources_properties("AWS::ApiGatewayV2::Route", {"AuthorizationType": "AWS_IAM"})
    t.resource_count_is("AWS::ApiGatewayV2::Authorizer", 0)  # IAM needs no authorizer resource
    Annotations.from_stack(stack).has_no_warning("*", Match.string_like_regexp("is public"))
    # AND jwt without its issuer and audience is refused by the construct too
    with pytest.raises(ValueError, match="'jwt' needs its issuer and audience"):
        AgentHttpApi(stack, "JwtApi", routes=routes, config=HttpApiConfig(50, 100, 30, "jwt"))
