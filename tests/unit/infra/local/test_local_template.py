"""The template reader of the local stack, on small hand-written CloudFormation templates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.local.clock import ScaledClock
from infra.local.spec import AgentEndpoint, AliasSpec, FunctionSpec, GatewayRoute, SpecError
from infra.local.template import TemplateError, find_templates, read_template

E2E_TEMPLATE = Path(__file__).parents[3] / "e2e" / "templates" / "local_app.template.json"


def _write(tmp_path: Path, resources: dict, **extra) -> Path:
    path = tmp_path / "t.template.json"
    path.write_text(json.dumps({"Resources": resources, **extra}))
    return path


def _fn(**props) -> dict:
    base = {"Handler": "app.handler", "Runtime": "python3.12", "Code": {"ZipFile": "def handler(e, c):\n    return e\n"}}
    return {"Type": "AWS::Lambda::Function", "Properties": {**base, **props}}


def test_reads_functions_aliases_strategies_and_gateway():
    app = read_template(E2E_TEMPLATE)
    echo = app.function("echo-fn")
    assert (echo.handler, echo.memory_mb, echo.timeout_s) == ("basic.echo", 256, 5.0)
    assert echo.aliases == (AliasSpec("live", "1", 1),)
    assert echo.code_dir.is_dir() and (echo.code_dir / "basic.py").exists()
    assert dict(echo.environment) == {
        "GREETING": "hello", "STAGE": "test", "REGION_NAME": "us-east-1",
        "SELF_ARN": "arn:aws:lambda:us-east-1:123456789012:function:echo-fn",
        "DEGRADATION_PARAMETER": "/warmstart/echo/degradation-level", "JOINED": "a-test-b",
        "SUBBED": "us-east-1/test"}
    assert any("IMPORTED left out" in w for w in app.warnings)
    snap = app.function("SnapFunction")  # no FunctionName: the logical ID names it
    assert snap.snap_start and snap.aliases == (AliasSpec("live", "1", 0),)
    assert app.gateway is not None and (app.gateway.function_name, app.gateway.qualifier) == ("http-fn", "live")


def test_inline_code_defaults_and_layer_paths(tmp_path):
    layer = tmp_path / "layer-asset"
    (layer / "model").mkdir(parents=True)
    path = _write(tmp_path, {
        "Layer": {"Type": "AWS::Lambda::LayerVersion", "Metadata": {"aws:asset:path": "layer-asset"},
                  "Properties": {}},
        "Fn": _fn(Layers=[{"Ref": "Layer"}],
                  Environment={"Variables": {"MODEL_DIR": "/opt/model", "OTHER": "/opt/absent",
                                             "FLAG": True}}),
    })
    app = read_template(path, inline_code_dir=tmp_path / "inline")
    fn = app.functions[0]
    assert (fn.name, fn.memory_mb, fn.timeout_s, fn.aliases) == ("Fn", 128, 3.0, ())
    assert (fn.code_dir / "app.py").read_text().startswith("def handler")
    assert fn.environment["MODEL_DIR"] == str(layer.resolve() / "model")  # /opt/<x> -> layer asset
    assert fn.environment["OTHER"] == "/opt/absent" and fn.environment["FLAG"] == "true"
    assert any("/opt/absent" in w for w in app.warnings)
    assert app.gateway is not None and app.gateway.qualifier == "$LATEST"


@pytest.mark.parametrize(("resources", "message"), [
    ({}, "no AWS::Lambda::Function"),
    ({"Fn": _fn(Handler=None)}, "Handler is missing"),
    ({"Fn": _fn(Runtime="nodejs20.x")}, "is not Python"),
    ({"Fn": _fn(MemorySize=64)}, "memory_mb must be 128..10240"),
    ({"Fn": _fn(Code={"S3Bucket": "b", "S3Key": "k"})}, "no code location"),
    ({"Fn": {**_fn(), "Metadata": {"aws:asset:path": "missing-asset"}}}, "code asset"),
    ({"Fn": _fn(SnapStart={"ApplyOn": "PublishedVersions"}),
      "V": {"Type": "AWS::Lambda::Version", "Properties": {"FunctionName": {"Ref": "Fn"}}},
      "A": {"Type": "AWS::Lambda::Alias", "Properties": {
          "FunctionName": {"Ref": "Fn"}, "Name": "live", "FunctionVersion": {"Fn::GetAtt": ["V", "Version"]},
          "ProvisionedConcurrencyConfig": {"ProvisionedConcurrentExecutions": 2}}}},
     "SnapStart and provisioned concurrency cannot be combined"),
    ({"Fn": _fn(),
      "A": {"Type": "AWS::Lambda::Alias", "Properties": {
          "FunctionName": {"Ref": "Fn"}, "Name": "live", "FunctionVersion": "$LATEST",
          "ProvisionedConcurrencyConfig": {"ProvisionedConcurrentExecutions": 1}}}},
     "cannot be applied to $LATEST"),
])
def test_bad_templates_are_refused_with_the_reason(tmp_path, resources, message):
    with pytest.raises(TemplateError, match=message.replace("$", r"\$")):
        read_template(_write(tmp_path, resources), inline_code_dir=tmp_path / "inline")


def test_unreadable_files_and_directories(tmp_path):
    with pytest.raises(TemplateError, match="does not exist"):
        read_template(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(TemplateError, match="is not JSON"):
        read_template(bad)
    bad.write_text("[]")
    with pytest.raises(TemplateError, match="no Resources"):
        read_template(bad)
    with pytest.raises(TemplateError, match="not a directory"):
        find_templates(tmp_path / "cdk.out")
    (tmp_path / "cdk.out").mkdir()
    with pytest.raises(TemplateError, match="no \\*.template.json"):
        find_templates(tmp_path / "cdk.out")


def test_spec_validation_messages(tmp_path):
    with pytest.raises(SpecError, match="must be 'module.function'"):
        FunctionSpec(name="f", handler="nodot", code_dir=tmp_path)
    with pytest.raises(SpecError, match="timeout_s must be > 0"):
        FunctionSpec(name="f", handler="a.b", code_dir=tmp_path, timeout_s=0)
    with pytest.raises(SpecError, match="duplicate alias"):
        FunctionSpec(name="f", handler="a.b", code_dir=tmp_path, aliases=(AliasSpec("x"), AliasSpec("x")))
    with pytest.raises(SpecError, match="alias name"):
        AliasSpec("$LATEST")


def test_scaled_clock_runs_faster_and_sleeps_shorter():
    with pytest.raises(ValueError, match="time_scale must be > 0"):
        ScaledClock(0)
    clock = ScaledClock(1000.0, start_epoch_s=0.0)
    t0 = clock.monotonic()
    clock.sleep(100.0)  # 0.1 real seconds
    assert clock.monotonic() - t0 >= 100.0
    assert clock.real_seconds(60.0) == pytest.approx(0.06)
    assert clock.time() < 3600  # started at epoch 0, ran a few hundred clock-seconds


def test_reads_the_synthesized_stack(synthesized_template):
    """The real app, synthesized in process with bundling skipped (no cdk.out needed)."""
    app = read_template(synthesized_template)
    intent = next(f for f in app.functions if f.handler == "functions.agent.handler.handler")
    lookup = next(f for f in app.functions if f.handler == "functions.lookup.handler.handler")
    chat = next(f for f in app.functions if f.handler == "functions.chat.handler.handler")
    for agent in (intent, lookup, chat):
        # the unbundled source asset runs from the folder that holds the `functions` package
        assert (agent.code_dir / "functions" / "runtime" / "__init__.py").exists()
        assert agent.aliases == (AliasSpec("live", "1", 1),)  # provisioned variant: min 1
        assert not agent.snap_start
    assert (intent.timeout_s, lookup.timeout_s, chat.timeout_s) == (30, 30, 60)  # cdk.json
    assert (intent.memory_mb, lookup.memory_mb) == (2048, 512)
    env = intent.environment
    assert env["WARMSTART_AGENT_NAME"] == "intent" and "WARMSTART_BASE_PATH" not in env
    assert env["WARMSTART_DEGRADATION_PARAMETER"] == "/warmstart/intent/degradation-level"
    assert env["WARMSTART_OVERFLOW_ENDPOINT_NAME"] == "Warmstart-GpuEndpoint"  # Fn::GetAtt resolved (its fixed name)
    # /opt/model is not there without bundled layers: left out, so the model's default applies
    assert "WARMSTART_MODEL_DIR" not in env
    assert any("WARMSTART_MODEL_DIR=/opt/model left out" in w for w in app.warnings)
    assert lookup.environment["WARMSTART_BASE_PATH"] == "/lookup"
    assert "WARMSTART_OVERFLOW_ENDPOINT_NAME" not in lookup.environment
    # the streaming agent runs warmstart's streaming runtime client through the exec wrapper
    assert chat.environment["AWS_LAMBDA_EXEC_WRAPPER"] == "/var/task/functions/runtime/warmstart-stream"
    assert "AWS_LAMBDA_EXEC_WRAPPER" not in lookup.environment
    parameters = dict(app.parameters)
    # gpu_endpoint and warmer on: the warmer plans the endpoint's capacity and publishes it
    # (it starts unknown: the agents degrade rather than overflow until the warmer has run)
    [capacity] = [k for k in parameters if k.endswith("/overflow-capacity")]
    assert json.loads(parameters.pop(capacity))["state"] == "unknown"
    assert parameters == {"/warmstart/intent/degradation-level": "L0",
                          "/warmstart/lookup/degradation-level": "L0",
                          "/warmstart/chat/degradation-level": "L0"}
    # the HTTP API's routes: RouteKey -> integration -> alias live
    assert app.gateway == GatewayRoute(intent.name, "live", "$default")
    assert app.routes == (GatewayRoute(chat.name, "live", "ANY /chat"),
                          GatewayRoute(chat.name, "live", "ANY /chat/{proxy+}"),
                          GatewayRoute(lookup.name, "live", "ANY /lookup"),
                          GatewayRoute(lookup.name, "live", "ANY /lookup/{proxy+}"))
    assert set(app.agents) == {AgentEndpoint("intent", intent.name, "/"),
                               AgentEndpoint("lookup", lookup.name, "/lookup"),
                               AgentEndpoint("chat", chat.name, "/chat")}
    assert app.agent().name == "intent" and app.agent("lookup").function_name == lookup.name
    warmer = next(f for f in app.functions if f.handler == "warmers.handler.handler")
    assert (warmer.code_dir / "warmers" / "handler.py").exists()
    for agent in (intent, lookup, chat):
        assert f'"function_name":"{agent.name}"' in warmer.environment["WARMSTART_WARMER_CONFIG"]


def test_routes_of_a_hand_written_template(tmp_path):
    # GIVEN two functions with live aliases, integrations, and routes (one to a foreign target)
    def alias(fn):
        return {"Type": "AWS::Lambda::Alias", "Properties": {
            "FunctionName": {"Ref": fn}, "Name": "live", "FunctionVersion": "$LATEST"}}

    def integration(alias_lid):
        return {"Type": "AWS::ApiGatewayV2::Integration", "Properties": {
            "IntegrationType": "AWS_PROXY", "IntegrationUri": {"Ref": alias_lid}}}

    def route(key, integration_lid):
        return {"Type": "AWS::ApiGatewayV2::Route", "Properties": {
            "RouteKey": key, "Target": {"Fn::Join": ["", ["integrations/", {"Ref": integration_lid}]]}}}

    path = _write(tmp_path, {
        "Root": _fn(FunctionName="root-fn"), "Orders": _fn(FunctionName="orders-fn"),
        "RootLive": alias("Root"), "OrdersLive": alias("Orders"),
        "RootInt": integration("RootLive"), "OrdersInt": integration("OrdersLive"),
        "R0": route("$default", "RootInt"), "R1": route("GET /orders/{id}", "OrdersInt"),
        "R2": route("ANY /elsewhere", "NotHere"),
        "Other": {"Type": "AWS::ApiGatewayV2::Integration", "Properties": {"IntegrationType": "HTTP_PROXY",
                                                                          "IntegrationUri": "https://x"}},
        "R3": route("ANY /proxy", "Other"),
    })
    app = read_template(path, inline_code_dir=tmp_path / "inline")
    assert app.gateway == GatewayRoute("root-fn", "live")
    assert app.routes == (GatewayRoute("orders-fn", "live", "GET /orders/{id}"),)
    assert app.routes[0].path_prefix == "/orders"
    assert any(w.startswith("route R2 left out (Ref to unknown NotHere)") for w in app.warnings)
    assert any(w.startswith("route R3 (ANY /proxy) left out: its target integrations/Other is not a "
                            "Lambda integration") for w in app.warnings)
    # no agent declared (no WARMSTART_AGENT_NAME): none listed, and asking for one says so
    assert app.agents == ()
    with pytest.raises(SpecError, match="declares no agent"):
        app.agent()


def test_ssm_parameters_are_read_and_unresolvable_ones_reported(tmp_path):
    path = _write(tmp_path, {
        "Fn": _fn(),
        "P": {"Type": "AWS::SSM::Parameter", "Properties": {"Name": "/a/level", "Value": "L1"}},
        "Q": {"Type": "AWS::SSM::Parameter",
              "Properties": {"Name": {"Fn::ImportValue": "x"}, "Value": "L0"}},
    })
    app = read_template(path, inline_code_dir=tmp_path / "inline")
    assert app.parameters == {"/a/level": "L1"}
    assert any(w.startswith("parameter Q left out") for w in app.warnings)


def test_a_bundled_function_runs_with_its_own_layers_in_order(tmp_path):
    # GIVEN a cloud assembly: a code asset and two layer assets bundled next to the template
    for name in ("asset.code", "asset.web", "asset.own"):
        (tmp_path / name).mkdir()
    (tmp_path / "asset.code" / "app.py").write_text("def handler(e, c):\n    return e\n")
    layer = {"Type": "AWS::Lambda::LayerVersion", "Properties": {}}
    path = _write(tmp_path, {
        "Web": {**layer, "Metadata": {"aws:asset:path": "asset.web"}},
        "Own": {**layer, "Metadata": {"aws:asset:path": "asset.own"}},
        "Fn": {**_fn(Layers=[{"Ref": "Web"}, {"Ref": "Own"}], Code={"S3Bucket": "b", "S3Key": "k"},
                     Architectures=["arm64"]),
               "Metadata": {"aws:asset:path": "asset.code"}},
        "Bare": {**_fn(Code={"S3Bucket": "b", "S3Key": "k"}), "Metadata": {"aws:asset:path": "asset.code"}},
    })
    app = read_template(path)
    # THEN each function is described with its layers (a function without any: an empty tuple)
    fn = app.function("Fn")
    assert fn.layers == ((tmp_path / "asset.web").resolve(), (tmp_path / "asset.own").resolve())
    assert fn.architecture == "arm64"
    assert app.function("Bare").layers == ()
    assert not [w for w in app.warnings if "runs with this project's Python packages" in w]


@pytest.mark.parametrize(("layers", "why"), [
    ([{"Ref": "Elsewhere"}], 'layer {"Ref": "Elsewhere"} is not a layer asset of this template'),
    (["arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3:1"],
     ('layer "arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3:1" is not a '
     "layer asset of this template")),
    ([{"Ref": "Source"}], "layer Source is not bundled (bundling was skipped)"),
])
def test_a_function_whose_layers_are_not_all_here_runs_with_the_project_packages_and_says_why(
        tmp_path, layers, why):
    (tmp_path / "assembly" / "asset.code").mkdir(parents=True)
    (tmp_path / "assembly" / "asset.code" / "app.py").write_text("def handler(e, c):\n    return e\n")
    (tmp_path / "source-layer").mkdir()
    path = tmp_path / "assembly" / "t.template.json"
    path.write_text(json.dumps({"Resources": {
        "Source": {"Type": "AWS::Lambda::LayerVersion", "Metadata": {"aws:asset:path": "../source-layer"},
                   "Properties": {}},
        "Fn": {**_fn(Layers=layers, Code={"S3Bucket": "b", "S3Key": "k"}),
               "Metadata": {"aws:asset:path": "asset.code"}},
    }}))
    app = read_template(path)
    assert app.function("Fn").layers is None
    assert f"function Fn: runs with this project's Python packages, not only its code and layers: {why}" \
        in app.warnings


def test_an_unbundled_code_asset_runs_with_the_project_packages():
    app = read_template(E2E_TEMPLATE)  # its code asset is the source folder tests/e2e/handlers
    assert app.function("echo-fn").layers is None
    assert any(w.startswith("function EchoFunction: runs with this project's Python packages") and
               w.endswith("its code asset is not bundled (a source folder, or bundling was skipped)")
               for w in app.warnings)
