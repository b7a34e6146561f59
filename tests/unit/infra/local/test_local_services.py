"""What the local services derive from the template and cdk.json (no processes started here;
tests/e2e/test_local_services.py runs them)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from functions.runtime.contract.warmer_document import (
    AliasEntry,
    EndpointEntry,
    WarmerDocument,
    read_entry,
)
from infra.config import load_config
from infra.local.emulator import Emulator, EmulatorConfig
from infra.local.services import (
    DEFAULT_ENDPOINT_NAME,
    GpuEndpointService,
    ServiceStartError,
    gpu_endpoint_service,
    managed_functions,
    warmer_document,
)
from infra.local.spec import AliasSpec, FunctionSpec, LocalApp
from infra.local.stack import LocalStack, LocalStackConfig
from infra.local.template import read_template
from warmers.config import WarmerConfig

REPO = Path(__file__).resolve().parents[4]
E2E_TEMPLATE = REPO / "tests" / "e2e" / "templates" / "local_app.template.json"
AGENT = "functions.agent.handler.handler"


def _document(app: LocalApp, **kwargs) -> WarmerDocument:
    """:func:`warmer_document`, read back as the warmer reads it (the contract's reader)."""
    return WarmerDocument.from_dict(warmer_document(app, **kwargs))


def _fn(name: str, handler: str = "m.h", *, pc: int = 0, alias: str = "live", **kw) -> FunctionSpec:
    return FunctionSpec(name=name, handler=handler, code_dir=REPO, aliases=(AliasSpec(alias, "1", pc),), **kw)


def test_warmer_manages_the_functions_the_template_marks():
    app = read_template(E2E_TEMPLATE)
    # echo-fn: PC on its live alias; http-fn and SnapFunction: nothing to manage
    assert [f.name for f in managed_functions(app)] == ["echo-fn"]
    doc = warmer_document(app)
    assert doc["version"] == 1
    document = WarmerDocument.from_dict(doc)
    assert document.actuator == "lambda" and document.history_days == 1.0
    assert document.aliases == (AliasEntry(
        function_name="echo-fn", alias="live", strategy="provisioned", memory_mb=256, floor=1,
        cap=10, budget_usd_per_hour=1.0, degradation_parameter=None,
        available_concurrency=None, objective="cost"),)
    WarmerConfig.from_dict(doc)  # valid for the warmer


def test_strategies_bounds_and_reserved_concurrency():
    app = LocalApp((
        _fn("agent", AGENT, memory_mb=2048,
            environment={"WARMSTART_DEGRADATION_PARAMETER": "/w/agent/level"}),
        _fn("snap", snap_start=True, environment={"WARMSTART_DEGRADATION_PARAMETER": "/w/snap"}),
        _fn("capped", pc=3, reserved_concurrency=2),
        _fn("other"),  # nothing marks it
    ))
    cdk = load_config(REPO / "cdk.json", strategy="ping")
    by_name = {a.function_name: a for a in _document(app, cdk_config=cdk).aliases}
    assert set(by_name) == {"agent", "snap", "capped"}
    assert by_name["agent"].strategy == "ping"  # the template cannot tell ping from none
    assert by_name["agent"].degradation_parameter == "/w/agent/level"
    assert by_name["snap"].strategy == "snapstart"
    # Lambda refuses PC above reserved concurrency: cap and floor follow it
    assert (by_name["capped"].floor, by_name["capped"].cap) == (2, 2)
    assert by_name["capped"].available_concurrency == 2
    # cdk.json's provisioned variant bounds the agent
    prov = load_config(REPO / "cdk.json", strategy="provisioned")
    app_pc = LocalApp((_fn("agent", AGENT, pc=1),))
    [agent] = _document(app_pc, cdk_config=prov).aliases
    assert (agent.strategy, agent.floor, agent.cap, agent.objective) == (
        "provisioned", 1, 5, "sla")


def test_the_templates_own_warmer_config_is_used_with_the_lambda_actuator(synthesized_template):
    app = read_template(synthesized_template)
    doc = _document(app, history_days=0.5)
    assert doc.actuator == "lambda"  # moto's App Auto Scaling does not drive the emulator
    assert doc.history_days == 0.5 and doc.architecture == "x86_64"
    # one alias per agent
    by_function = {a.function_name: a for a in doc.aliases}
    agents = {a.name: a.function_name for a in app.agents}
    assert set(by_function) == set(agents.values()) and len(agents) == 3
    for name, function in agents.items():
        alias = by_function[function]
        # cdk.json's provisioned variant: intent capped at 5 with the sla objective, lookup
        # and chat the default bounds and objective
        cap, objective = (5, "sla") if name == "intent" else (10, "cost")
        assert (alias.alias, alias.strategy, alias.floor, alias.cap) == (
            "live", "provisioned", 1, cap)
        assert alias.objective == objective
        assert alias.degradation_parameter == f"/warmstart/{name}/degradation-level"
    # the GPU endpoint answers the endpoint name the template gives the overflow agent
    intent = app.function(agents["intent"])
    assert gpu_endpoint_service(app).endpoint_name == intent.environment["WARMSTART_OVERFLOW_ENDPOINT_NAME"]


def test_each_agents_bounds_and_strategy_come_from_its_cdk_json_entry():
    # GIVEN two agents' functions as the template gives them (matched by WARMSTART_AGENT_NAME)
    app = LocalApp((
        _fn("intent-fn", AGENT, environment={"WARMSTART_AGENT_NAME": "intent"}),
        _fn("lookup-fn", "functions.lookup.handler.handler", memory_mb=512,
            environment={"WARMSTART_AGENT_NAME": "lookup", "WARMSTART_BASE_PATH": "/lookup"}),
    ))
    assert [f.name for f in managed_functions(app)] == ["intent-fn", "lookup-fn"]
    # WHEN the cdk.json of the ping variant bounds them THEN each gets its own agent's settings
    by_name = {a["function_name"]: a for a in warmer_document(
        app, cdk_config=load_config(REPO / "cdk.json", strategy="ping"))["aliases"]}
    assert (by_name["intent-fn"]["strategy"], by_name["lookup-fn"]["strategy"]) == ("ping", "ping")
    assert by_name["lookup-fn"]["memory_mb"] == 512
    raw_default = {a["function_name"]: a for a in warmer_document(
        app, cdk_config=load_config(REPO / "cdk.json"))["aliases"]}
    assert raw_default["lookup-fn"]["strategy"] == "none"  # lookup's own strategy in cdk.json


@pytest.mark.parametrize(("app", "functions", "message"), [
    (LocalApp((_fn("plain"),)), None, "no function to manage"),
    (LocalApp((_fn("plain"),)), ["nope"], "no function 'nope'"),
    (LocalApp((_fn("plain", alias="blue"),)), ["plain"], "has no 'live' alias"),
    (LocalApp((_fn("w", "warmers.handler.handler", environment={"WARMSTART_WARMER_CONFIG": "{x"}),)),
     None, "WARMSTART_WARMER_CONFIG is not JSON"),
])
def test_warmer_config_errors_say_what_is_wrong(app, functions, message):
    with pytest.raises(ServiceStartError, match=message):
        warmer_document(app, functions=functions)


def test_gpu_endpoint_environment_goes_to_the_overflow_functions_only(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.onnx").write_bytes(b"")
    agent = _fn("agent", AGENT, environment={"WARMSTART_MODEL_DIR": str(model)})
    other = _fn("other")
    service = gpu_endpoint_service(LocalApp((agent, other)))
    assert (service.endpoint_name, service.model_dir) == (DEFAULT_ENDPOINT_NAME, model)
    service._url = "http://127.0.0.1:9"  # as after start(), without a process
    assert service.function_environment(agent) == {
        "WARMSTART_OVERFLOW_ENDPOINT_NAME": DEFAULT_ENDPOINT_NAME,
        "WARMSTART_OVERFLOW_ENDPOINT_URL": "http://127.0.0.1:9"}
    assert service.function_environment(other) == {}
    named = GpuEndpointService("e", functions=["other"])
    named._url = "http://127.0.0.1:9"
    assert named.function_environment(other)["WARMSTART_OVERFLOW_ENDPOINT_NAME"] == "e"
    assert named.function_environment(agent) == {}
    with pytest.raises(ValueError, match="start_timeout_s"):
        GpuEndpointService(start_timeout_s=0)


def test_a_planned_gpu_endpoint_is_an_inference_component_the_warmer_sizes():
    from infra.local.endpoint_capacity import PlannedEndpoint

    planned = PlannedEndpoint(concurrent_requests_per_copy=8, provisioning_delay_s=600.0, cap=2)
    agent = _fn("agent", AGENT)
    service = gpu_endpoint_service(LocalApp((agent,)), planned=planned, time_scale=10.0)
    # the server starts with no copy and provisions in real seconds (600 trace s / 10)
    command = service._command()
    i = command.index("--inference-component")
    assert command[i:i + 8] == ["--inference-component", planned.inference_component,
                                "--copies", "0", "--concurrent-requests-per-copy", "8",
                                "--provisioning-delay-s", "60"]
    service._url = "http://127.0.0.1:9"
    env = service.function_environment(agent)
    assert env["WARMSTART_OVERFLOW_INFERENCE_COMPONENT"] == planned.inference_component
    assert env["WARMSTART_OVERFLOW_CAPACITY_PARAMETER"] == planned.capacity_parameter
    # the warmer's document plans it and sets it through SageMaker's API
    entry = planned.warmer_entry(service.endpoint_name, ["agent:live"])
    doc = warmer_document(LocalApp((agent,)), endpoints=[entry])
    document = WarmerDocument.from_dict(doc)
    assert document.endpoint_actuator == "sagemaker"
    assert document.endpoints == (read_entry(EndpointEntry, entry, "endpoints[0]"),)
    cfg = WarmerConfig.from_dict(doc)
    [policy] = cfg.endpoints
    assert (policy.target, policy.floor, policy.cap, policy.concurrent_requests_per_instance) == (
        "inference_component", 0, 2, 8)
    assert "endpoints" not in warmer_document(LocalApp((agent,)))
    with pytest.raises(RuntimeError, match="no planned capacity"):
        gpu_endpoint_service(LocalApp((agent,))).capacity()
    with pytest.raises(ValueError, match="time_scale"):
        GpuEndpointService(time_scale=0)
    for bad in ({"concurrent_requests_per_copy": 0}, {"floor": 3, "cap": 2},
                {"provisioning_delay_s": -1.0}, {"inference_component": ""}):
        with pytest.raises(ValueError):
            PlannedEndpoint(**bad)  # type: ignore[arg-type]


def test_function_environment_precedence():
    class Provider:
        name = "p"
        endpoint = "memory://p"

        def function_environment(self, spec):
            return {"A": "service", "B": "service"}

        def start(self):
            pass

        def stop(self):
            pass

    app = LocalApp((_fn("f", environment={"A": "template", "B": "template", "C": "template"}),))
    stack = LocalStack(app, LocalStackConfig(moto=False, env_overrides={"B": "override"}))
    [deployed] = stack._deployed([Provider()]).functions
    assert dict(deployed.environment) == {"A": "service", "B": "override", "C": "template"}


def test_account_settings_subtract_reserved_concurrency():
    with Emulator(EmulatorConfig(account_concurrency_limit=50)) as emu:
        emu.add_function(replace(_fn("a"), reserved_concurrency=None))
        emu.add_function(_fn("b"))
        emu.put_function_concurrency("b", 7)
        limit = emu.account_settings()["AccountLimit"]
        assert (limit["ConcurrentExecutions"], limit["UnreservedConcurrentExecutions"]) == (50, 43)
        assert json.loads(json.dumps(emu.account_settings()))["AccountUsage"]["FunctionCount"] == 2


def test_without_moto_the_environments_aws_calls_stay_on_loopback():
    # GIVEN a stack without the moto server, WHEN it starts, THEN every AWS SDK endpoint of the
    # environments is a closed loopback port: an SSM read fails locally, never reaches AWS
    from infra.local.clock import SystemClock
    from infra.local.stack import NO_AWS_ENDPOINT, EmulatorService

    app = LocalApp((_fn("f"),))
    service = EmulatorService(app, LocalStackConfig(moto=False), clock=SystemClock(), moto_endpoint=None)
    service.start()
    try:
        env = service.emulator.extra_env
        assert NO_AWS_ENDPOINT.startswith("http://127.0.0.1:")
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SSM", "AWS_ENDPOINT_URL_CLOUDWATCH"):
            assert env[name] == NO_AWS_ENDPOINT
        import boto3
        from botocore.config import Config
        from botocore.exceptions import EndpointConnectionError

        ssm = boto3.client("ssm", endpoint_url=env["AWS_ENDPOINT_URL_SSM"], region_name="us-east-1",
                           aws_access_key_id="x", aws_secret_access_key="x",
                           config=Config(retries={"max_attempts": 1}, connect_timeout=2))
        with pytest.raises(EndpointConnectionError):
            ssm.get_parameter(Name="/warmstart/intent/degradation-level")
    finally:
        service.stop()
