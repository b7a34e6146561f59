"""Streaming agents in the CDK app: a function URL with ``InvokeMode: RESPONSE_STREAM`` and
``AuthType: AWS_IAM`` on the alias ``live`` of every agent whose declaration has a
``stream=True`` route, the streaming runtime's exec wrapper, the two invoke permissions, the
``<Name>StreamUrl`` output, the first-token alarm and dashboard row; nothing changes for the
agents that do not stream; the config checks of a streaming agent; reading the declaration.

The streaming agent is ``tests/infra/fixtures/streamer`` copied into a temporary code root as
``functions/streamer`` next to a copy of the repository's own ``functions/*``; streaming is found from its
declaration (``Route(..., stream=True)``), not from its name. The module's two real synths (the
app with cdk.json's agents, and the same plus ``streamer``; strategy provisioned, cdk-nag on,
bundling skipped) run once; the construct-level tests synthesize one agent each.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match, Template

from infra.config import (
    CONTEXT_KEY,
    EXEC_WRAPPER_ENV,
    MAX_STREAM_DURATION_S,
    STREAM_EXEC_WRAPPER,
    StackConfigError,
    check_streaming_agent,
    config_from_context,
)
from infra.constructs.agent_function import STREAM_WRAPPER_FILE, AgentFunction, check_stream_wrapper
from infra.constructs.bundling import BundlingError, CopyLocalBundling, staged_path
from infra.constructs.declaration import (
    AgentDeclaration,
    DeclarationReadError,
    DeclaredRoute,
    read_declaration,
)
from infra.constructs.layers import function_code
from tests.infra.cdk_helpers import REPO, Synth, cdk_context, synth

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "streamer"
STREAMER = {"path_prefix": "/streamer", "timeout_s": 120}
PRINCIPALS = ["111122223333", "arn:aws:iam::111122223333:role/chat-client"]
HANDLER = "functions.streamer.handler.handler"


def _code_root(root: Path) -> Path:
    """A code root: a copy of the repository's ``functions/`` (one snapshot for both synths, so
    that an edit elsewhere between them changes neither), plus the fixture as
    ``functions/streamer``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "functions", root / "functions", ignore=ignore)
    shutil.copytree(FIXTURE, root / "functions" / "streamer", ignore=ignore)
    return root


@pytest.fixture(scope="module")
def code_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _code_root(tmp_path_factory.mktemp("code-root"))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory, code_root: Path) -> Synth:
    return synth(tmp_path_factory.mktemp("cdk-baseline"), strategy="provisioned", code_root=code_root)


@pytest.fixture(scope="module")
def streaming(tmp_path_factory: pytest.TempPathFactory, code_root: Path) -> Synth:
    return synth(tmp_path_factory.mktemp("cdk-streaming"), strategy="provisioned", code_root=code_root,
                 overrides={"agents.streamer": STREAMER, "function_url_principals": PRINCIPALS})


def template(s: Synth) -> Template:
    assert s.error is None, s.error
    return Template.from_json(s.template)


def _function_id(s: Synth, handler: str) -> str:
    [found] = template(s).find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    return found


def _alias_id(s: Synth, handler: str) -> str:
    [found] = template(s).find_resources(
        "AWS::Lambda::Alias", {"Properties": {"FunctionName": {"Ref": _function_id(s, handler)}}})
    return found


def _url(s: Synth, handler: str) -> tuple[str, dict[str, Any]]:
    """(logical id, resource) of the function URL of the agent with ``handler``."""
    target = {"Fn::GetAtt": [_function_id(s, handler), "Arn"]}
    [(found, url)] = [(k, r) for k, r in template(s).find_resources("AWS::Lambda::Url").items()
                      if r["Properties"]["TargetFunctionArn"] == target]
    return found, url


def _streaming_agents(s: Synth) -> set[str]:
    """The agents whose declaration streams (cdk.json may hold some besides the fixture)."""
    return {name for name, d in s.stack.declarations.items() if d.streams}


# ---- the synthesized app ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_streaming_agent_gets_a_streaming_iam_function_url_on_its_alias_live(streaming: Synth) -> None:
    t = template(streaming)
    alias = _alias_id(streaming, HANDLER)
    # the alias the URL qualifies is the one with provisioned concurrency (the warmer's)
    alias_props = streaming.template["Resources"][alias]["Properties"]
    assert alias_props["Name"] == "live" and alias_props["ProvisionedConcurrencyConfig"]
    _, url = _url(streaming, HANDLER)
    assert url["Properties"] == {
        "AuthType": "AWS_IAM", "InvokeMode": "RESPONSE_STREAM", "Qualifier": "live",
        "TargetFunctionArn": {"Fn::GetAtt": [_function_id(streaming, HANDLER), "Arn"]}}
    assert url["DependsOn"] == [alias]
    # the function starts the streaming runtime client
    props = streaming.template["Resources"][_function_id(streaming, HANDLER)]["Properties"]
    assert props["Environment"]["Variables"][EXEC_WRAPPER_ENV] == STREAM_EXEC_WRAPPER
    assert STREAM_EXEC_WRAPPER == f"/var/task/{STREAM_WRAPPER_FILE}"
    # and the HTTP API route stays (buffered callers get the collected stream)
    routes = {r["Properties"]["RouteKey"] for r in t.find_resources("AWS::ApiGatewayV2::Route").values()}
    assert {"ANY /streamer", "ANY /streamer/{proxy+}"} <= routes
    # the warmer manages that alias
    warmer = [f for f in t.find_resources("AWS::Lambda::Function").values()
              if f["Properties"]["Handler"] == "warmers.handler.handler"]
    assert f'"Ref": "{_function_id(streaming, HANDLER)}"' in json.dumps(warmer)


@pytest.mark.slow
def test_each_configured_principal_may_invoke_the_url_with_both_actions(streaming: Synth) -> None:
    alias = _alias_id(streaming, HANDLER)
    permissions = [p["Properties"] for p in template(streaming).find_resources("AWS::Lambda::Permission").values()
                   if p["Properties"]["FunctionName"] == {"Ref": alias}
                   and p["Properties"]["Principal"] != "apigateway.amazonaws.com"]
    granted = {(p["Principal"], p["Action"], p.get("FunctionUrlAuthType"), p.get("InvokedViaFunctionUrl"))
               for p in permissions}
    assert granted == {(principal, action, auth, via) for principal in PRINCIPALS
                       for action, auth, via in (("lambda:InvokeFunctionUrl", "AWS_IAM", None),
                                                 ("lambda:InvokeFunction", None, True))}
    assert len(permissions) == 4


@pytest.mark.slow
def test_the_stream_url_is_an_output(streaming: Synth) -> None:
    outputs = template(streaming).find_outputs("*")
    url_id, _ = _url(streaming, HANDLER)
    assert outputs["StreamerStreamUrl"]["Value"] == {"Fn::GetAtt": [url_id, "FunctionUrl"]}
    assert "SigV4" in outputs["StreamerStreamUrl"]["Description"]
    # one per agent whose declaration streams (found by its routes, whatever its name)
    assert "streamer" in _streaming_agents(streaming)
    assert {k for k in outputs if k.endswith("StreamUrl")} == {
        f"{''.join(w.capitalize() for w in n.split('_'))}StreamUrl" for n in _streaming_agents(streaming)}
    assert len(template(streaming).find_resources("AWS::Lambda::Url")) == len(_streaming_agents(streaming))


@pytest.mark.slow
def test_first_token_alarm_replaces_the_duration_alarm_of_the_streaming_agent(streaming: Synth) -> None:
    alarms = [a["Properties"] for a in template(streaming).find_resources("AWS::CloudWatch::Alarm").values()
              if a["Properties"]["AlarmDescription"].startswith("warmstart agent streamer,")]
    by_metric = {a["MetricName"]: a for a in alarms}
    assert set(by_metric) == {"Errors", "Throttles", "ProvisionedConcurrencySpilloverInvocations",
                              "TimeToFirstTokenMs"}
    first = by_metric["TimeToFirstTokenMs"]
    # the strictest first-token SLA of its streaming routes (800 ms; the P1 route's is 5,000)
    assert (first["Namespace"], first["ExtendedStatistic"], first["Threshold"]) == ("Warmstart", "p95", 800)
    assert first["Dimensions"] == [{"Name": "service", "Value": "streamer"}]
    assert first["ComparisonOperator"] == "GreaterThanThreshold"
    assert (first["Period"], first["EvaluationPeriods"], first["DatapointsToAlarm"]) == (60, 5, 3)


def _widgets(s: Synth) -> list[dict[str, Any]]:
    [dashboard] = template(s).find_resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    return list(json.loads("".join(p if isinstance(p, str) else "REF" for p in parts))["widgets"])


@pytest.mark.slow
def test_the_dashboard_shows_first_token_and_tokens_per_second_of_the_streaming_agent(
        baseline: Synth, streaming: Synth) -> None:
    widgets = _widgets(streaming)
    graphs = {w["properties"]["title"]: w["properties"] for w in widgets if w["type"] == "metric"}
    first = graphs["streamer: time to first token ms (toolkit EMF TimeToFirstTokenMs)"]
    expressions = [m[0]["expression"] for m in first["metrics"]]
    assert [e.split(", ")[1] for e in expressions] == ["'p50'", "'p95'"]
    assert all('MetricName="TimeToFirstTokenMs" service="streamer"' in e for e in expressions)
    assert first["annotations"]["horizontal"] == [{"value": 800, "label": "first-token SLA", "yAxis": "left"}]
    rate = graphs["streamer: tokens per second (toolkit EMF TokensPerSecond)"]
    assert [m[0]["expression"].split(", ")[1] for m in rate["metrics"]] == ["'p50'"]
    assert 'MetricName="TokensPerSecond" service="streamer"' in rate["metrics"][0][0]["expression"]
    # the agents that do not stream have no streaming row
    assert {t.split(":")[0] for t in graphs if "first token" in t} == _streaming_agents(streaming)
    assert len(widgets) == len(_widgets(baseline)) + 12  # title, 3 rows of 3, the streaming row of 2


@pytest.mark.slow
def test_agents_that_do_not_stream_are_synthesized_exactly_as_before(baseline: Synth, streaming: Synth) -> None:
    before, after = baseline.template["Resources"], streaming.template["Resources"]
    streams = _streaming_agents(streaming)
    plain = set(streaming.stack.declarations) - streams
    assert {"intent", "lookup"} <= plain
    # (the streaming agents of cdk.json, if any, change too: function_url_principals is set)
    changed = {k for k in before if after.get(k) != before[k]
               and not any(n in k.lower() for n in streams)}
    # the resources that list every agent: the API's description, the dashboard (a band more),
    # the warmer (it manages the new alias too)
    assert {before[k]["Type"] for k in changed if not k.startswith("Warmer")} == {
        "AWS::ApiGatewayV2::Api", "AWS::CloudWatch::Dashboard"}
    api = next(k for k in changed if before[k]["Type"] == "AWS::ApiGatewayV2::Api")
    assert {**before[api]["Properties"], "Description": None} == {**after[api]["Properties"], "Description": None}
    assert _widgets(streaming)[:len(_widgets(baseline))] == _widgets(baseline)
    # every resource of the agents that do not stream (function, alias, role, alarms, routes,
    # permissions), and none of them has a URL or the wrapper
    own = [k for k in before if any(n in k.lower() for n in plain)]
    assert len(own) > 10 * len(plain) and all(after[k] == before[k] for k in own)
    for name in plain:
        props = next(r["Properties"] for k, r in after.items()
                     if k.lower().startswith(f"agent{name}function") and r["Type"] == "AWS::Lambda::Function")
        assert EXEC_WRAPPER_ENV not in props["Environment"]["Variables"]
    outputs = streaming.template["Outputs"]
    assert not {f"{n.capitalize()}StreamUrl" for n in plain} & set(outputs)
    same = [k for k in baseline.template["Outputs"] if k != "Agents" and not any(
        k.lower().startswith(n.replace("_", "")) for n in streams)]
    assert all(outputs[k] == baseline.template["Outputs"][k] for k in same)


@pytest.mark.slow
def test_cdk_nag_and_cfn_lint_are_clean_with_a_streaming_agent(baseline: Synth, streaming: Synth) -> None:
    [report] = [r for r in streaming.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert report["violations"] == [] and report["conclusion"] == "success", report["violations"][:3]
    # nothing new to acknowledge: the streaming agent's findings are the others' kinds
    [before] = [r for r in baseline.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]

    def kinds(r: dict[str, Any]) -> set[str]:
        return {v["ruleName"].split("[")[0] for v in r["suppressedViolations"]}

    assert kinds(report) == kinds(before)
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), str(streaming.template_path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- one agent, construct level --------------------------------------------------------------


def _config(code_root: Path, **agent: Any) -> Any:
    context = cdk_context(overrides={"agents.streamer": {**STREAMER, **agent}})
    return config_from_context(context)


def _declaration(*routes: tuple[str, float | None]) -> AgentDeclaration:
    return AgentDeclaration("streamer", tuple(
        DeclaredRoute("POST", path, "P0", ms is not None, ms) for path, ms in routes))


def _stack(tmp_path: Path, *, bundling: bool = False) -> cdk.Stack:
    context = {} if bundling else {"aws:cdk:bundling-stacks": []}
    return cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out"), context=context), "One")


def _agent_function(tmp_path: Path, code_root: Path, declaration: AgentDeclaration | None, *,
                    bundling: bool = False, **agent: Any) -> AgentFunction:
    cfg = _config(code_root, **agent)
    return AgentFunction(_stack(tmp_path, bundling=bundling), "Agent-streamer", agent=cfg.agent("streamer"),
                         alarms=cfg.alarms, layers=[], environment={}, code_root=code_root,
                         declaration=declaration)


def test_by_default_the_url_is_for_this_accounts_principals(tmp_path: Path, code_root: Path) -> None:
    made = _agent_function(tmp_path, code_root, _declaration(("/v1/chat", 900.0)), strategy="snapstart")
    t = Template.from_stack(cdk.Stack.of(made))
    account = {"Ref": "AWS::AccountId"}
    t.has_resource_properties("AWS::Lambda::Permission", {
        "Action": "lambda:InvokeFunctionUrl", "FunctionUrlAuthType": "AWS_IAM", "Principal": account})
    t.has_resource_properties("AWS::Lambda::Permission", {
        "Action": "lambda:InvokeFunction", "InvokedViaFunctionUrl": True, "Principal": account})
    t.resource_count_is("AWS::Lambda::Permission", 2)
    # under SnapStart too, the URL is on the alias live, which points at the published version
    t.has_resource_properties("AWS::Lambda::Url", {"Qualifier": "live", "InvokeMode": "RESPONSE_STREAM"})
    t.has_resource_properties("AWS::Lambda::Function", {"SnapStart": {"ApplyOn": "PublishedVersions"}})
    assert made.function_url is not None and made.first_token_ms == 900.0
    # the synth says what each kind of caller gets
    Annotations.from_stack(cdk.Stack.of(made)).has_info("/One/Agent-streamer", Match.string_like_regexp(
        "streams up to 200 MB for up to 120 s; its HTTP API route answers buffered callers with the "
        "whole stream, within 6 MB and the HTTP API's 30 s integration timeout"))


def test_an_agent_without_a_streaming_route_gets_no_url_and_no_wrapper(tmp_path: Path, code_root: Path) -> None:
    for i, declaration in enumerate((None, _declaration(("/v1/chat", None)), AgentDeclaration("streamer"))):
        made = _agent_function(tmp_path / str(i), code_root, declaration)
        t = Template.from_stack(cdk.Stack.of(made))
        t.resource_count_is("AWS::Lambda::Url", 0)
        t.resource_count_is("AWS::Lambda::Permission", 0)
        t.has_resource_properties("AWS::Lambda::Function", {
            "Environment": {"Variables": Match.object_like({EXEC_WRAPPER_ENV: Match.absent()})}})
        t.has_resource_properties("AWS::CloudWatch::Alarm", {"MetricName": "Duration"})
        assert made.function_url is None and "first_token_p95" not in made.alarms
        Annotations.from_stack(cdk.Stack.of(made)).has_no_info("*", Match.string_like_regexp("streams up to"))


def test_a_configured_duration_threshold_keeps_the_streaming_agents_duration_alarm(
        tmp_path: Path, code_root: Path) -> None:
    cfg = config_from_context(cdk_context(overrides={"agents.streamer": STREAMER,
                                                     "alarms.duration_p99_ms": 60000}))
    made = AgentFunction(_stack(tmp_path), "Agent-streamer", agent=cfg.agent("streamer"), alarms=cfg.alarms,
                         layers=[], environment={}, code_root=code_root,
                         declaration=_declaration(("/v1/chat", 800.0)))
    assert made.alarms["duration_p99"] is not None and made.alarms["first_token_p95"] is not None
    Template.from_stack(cdk.Stack.of(made)).has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "Duration", "Threshold": 60000})


def test_a_streaming_agent_whose_timeout_ends_before_its_first_token_is_refused(
        tmp_path: Path, code_root: Path) -> None:
    with pytest.raises(StackConfigError) as caught:
        _agent_function(tmp_path, code_root, _declaration(("/v1/chat", 800.0), ("/v1/summary", 5000.0)),
                        timeout_s=3, sla_ms=1000)
    assert str(caught.value) == (
        "warmstart.agents.streamer.timeout_s: 3 s ends the function before the first-token SLA of "
        "the streaming route POST /v1/summary (5000 ms); raise timeout_s or lower the route's "
        "first_token_ms")


def test_a_streaming_agent_may_not_set_its_own_exec_wrapper(tmp_path: Path, code_root: Path) -> None:
    with pytest.raises(StackConfigError) as caught:
        _agent_function(tmp_path, code_root, _declaration(("/v1/chat", 800.0)),
                        environment={EXEC_WRAPPER_ENV: "/opt/other-wrapper"})
    assert str(caught.value).startswith(
        f"warmstart.agents.streamer.environment.{EXEC_WRAPPER_ENV}: set by the deploy for an agent "
        f"with a streaming route (the streaming runtime client {STREAM_EXEC_WRAPPER}")
    # an agent that does not stream keeps its own wrapper
    made = _agent_function(tmp_path / "plain", code_root, None, environment={EXEC_WRAPPER_ENV: "/opt/w"})
    Template.from_stack(cdk.Stack.of(made)).has_resource_properties("AWS::Lambda::Function", {
        "Environment": {"Variables": Match.object_like({EXEC_WRAPPER_ENV: "/opt/w"})}})


def test_a_streaming_timeout_above_lambdas_maximum_is_refused(code_root: Path) -> None:
    agent = dataclasses.replace(_config(code_root).agent("streamer"), timeout_s=MAX_STREAM_DURATION_S + 1)
    with pytest.raises(StackConfigError) as caught:
        check_streaming_agent(agent, {"POST /v1/chat": 800.0})
    assert str(caught.value) == (
        "warmstart.agents.streamer.timeout_s: 901 s is outside 1-900 s: a streaming agent's stream "
        "lasts at most the function's timeout, and Lambda's longest is 900 s; see "
        "https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html")
    check_streaming_agent(dataclasses.replace(agent, timeout_s=900), {"POST /v1/chat": 800.0})


# ---- the wrapper script in the code asset ----------------------------------------------------


def _bundled_root(root: Path, *, mode: int | None = 0o755) -> Path:
    """A code root with real copies (no links) of the toolkit, the fixture agent and a wrapper."""
    ignore = shutil.ignore_patterns("__pycache__")
    (root / "functions").mkdir(parents=True)
    shutil.copy2(REPO / "functions" / "__init__.py", root / "functions" / "__init__.py")
    shutil.copytree(REPO / "functions" / "runtime", root / "functions" / "runtime", ignore=ignore)
    shutil.copytree(FIXTURE, root / "functions" / "streamer", ignore=ignore)
    wrapper = root / STREAM_WRAPPER_FILE
    wrapper.unlink(missing_ok=True)
    if mode is not None:
        wrapper.write_text("#!/bin/sh\nexec python3 -m functions.runtime.stream_runtime\n")
        wrapper.chmod(mode)
    return root


def test_the_bundled_code_asset_keeps_the_wrapper_executable(tmp_path: Path) -> None:
    root = _bundled_root(tmp_path / "src")
    made = _agent_function(tmp_path, root, _declaration(("/v1/chat", 800.0)), bundling=True)
    cdk.Stage.of(made).synth()  # type: ignore[union-attr]
    staged = staged_path(made.function)
    assert staged is not None
    copied = staged / STREAM_WRAPPER_FILE
    assert copied.read_bytes() == (root / STREAM_WRAPPER_FILE).read_bytes()
    assert os.stat(copied).st_mode & stat.S_IXUSR and os.access(copied, os.X_OK)


def test_the_synth_refuses_a_missing_or_non_executable_wrapper(tmp_path: Path) -> None:
    root = _bundled_root(tmp_path / "plain", mode=0o644)
    with pytest.raises(BundlingError) as caught:
        _agent_function(tmp_path / "a", root, _declaration(("/v1/chat", 800.0)), bundling=True)
    assert str(caught.value).startswith(f"{STREAM_WRAPPER_FILE} is not executable: run `chmod +x ")
    (root / STREAM_WRAPPER_FILE).unlink()
    with pytest.raises(BundlingError, match="the streaming runtime wrapper is missing"):
        check_stream_wrapper(root)
    # bundling skipped (nothing is built): not checked
    assert _agent_function(tmp_path / "b", root, _declaration(("/v1/chat", 800.0))).function_url is not None


def test_making_the_wrapper_executable_changes_the_assets_hash(tmp_path: Path) -> None:
    root = _bundled_root(tmp_path, mode=0o644)
    wrapper = root / STREAM_WRAPPER_FILE
    bundler = CopyLocalBundling(copies=[(root / "functions", "functions")])
    before = bundler.fingerprint()
    wrapper.chmod(0o755)
    assert bundler.fingerprint() != before  # not a cached staging without the bit


def test_the_repositorys_wrapper_is_executable_in_git_on_disk_and_in_every_agents_asset(tmp_path: Path) -> None:
    found = subprocess.run(["git", "ls-files", "-s", STREAM_WRAPPER_FILE], cwd=REPO, capture_output=True,
                           text=True, check=False).stdout.split()
    if not found:
        pytest.skip(f"{STREAM_WRAPPER_FILE} is not committed yet")
    assert found[0] == "100755", found
    assert check_stream_wrapper(REPO) == REPO / STREAM_WRAPPER_FILE
    # the toolkit goes with every agent: its code bundle keeps the bit
    _, bundler = function_code(["functions/lookup"], agent="lookup", root=REPO)
    assert bundler.try_bundle(str(tmp_path))
    assert os.access(tmp_path / STREAM_WRAPPER_FILE, os.X_OK)


# ---- reading the declaration -----------------------------------------------------------------


def test_the_declaration_is_read_from_the_handler_module(code_root: Path) -> None:
    found = read_declaration(HANDLER, agent="streamer", code_root=code_root, p0_sla_ms=2000)
    assert [(r.key, r.stream, r.first_token_sla_ms) for r in found.routes] == [
        ("POST /v1/chat", True, 800.0), ("POST /v1/summary", True, 5000.0), ("GET /healthz", False, None)]
    assert found.first_token_sla_ms == {"POST /v1/chat": 800.0, "POST /v1/summary": 5000.0}
    assert found.strictest_first_token_ms == 800.0
    assert not read_declaration("functions.lookup.handler.handler", agent="lookup", code_root=code_root,
                                p0_sla_ms=2000).streams


def _module(root: Path, name: str, text: str) -> str:
    (root / "functions" / name).mkdir(parents=True, exist_ok=True)
    (root / "functions" / name / "__init__.py").write_text("")
    (root / "functions" / name / "handler.py").write_text(text)
    return f"functions.{name}.handler.handler"


@pytest.fixture
def scratch_root(tmp_path: Path) -> Path:
    (tmp_path / "functions").mkdir()
    (tmp_path / "functions" / "__init__.py").write_text("")
    (tmp_path / "functions" / "runtime").symlink_to(REPO / "functions" / "runtime")
    return tmp_path


def test_a_handler_module_without_an_agent_declares_no_routes(scratch_root: Path) -> None:
    handler = _module(scratch_root, "plain", "def handler(event, context):\n    return {}\n")
    assert read_declaration(handler, agent="plain", code_root=scratch_root, p0_sla_ms=2000) == \
        AgentDeclaration("plain")


def test_a_handler_module_that_fails_to_import_stops_the_synth_in_one_line(scratch_root: Path) -> None:
    handler = _module(scratch_root, "broken", "import no_such_module_here\n")
    with pytest.raises(DeclarationReadError) as caught:
        read_declaration(handler, agent="broken", code_root=scratch_root, p0_sla_ms=2000)
    assert str(caught.value) == (
        "warmstart.agents.broken.handler: cannot read the routes of functions.broken.handler: "
        "ModuleNotFoundError: No module named 'no_such_module_here'")


def test_a_module_declaring_two_agents_none_by_that_name_is_refused(scratch_root: Path) -> None:
    two = ("from functions.runtime.agent import Agent, Route\n"
           "a = Agent('one', app='x:y', routes=[Route('GET', '/a')])\n"
           "b = Agent('two', app='x:y', routes=[Route('GET', '/b', stream=True)])\n")
    handler = _module(scratch_root, "pair", two)
    with pytest.raises(DeclarationReadError, match=r"declares several agents \(one, two\) and none is named 'pair'"):
        read_declaration(handler, agent="pair", code_root=scratch_root, p0_sla_ms=2000)
    # the one named as the cdk.json agent is read
    assert read_declaration(handler, agent="two", code_root=scratch_root, p0_sla_ms=2000).streams


def test_a_module_that_does_not_finish_importing_is_stopped(scratch_root: Path) -> None:
    handler = _module(scratch_root, "slow", "import time\ntime.sleep(30)\n")
    with pytest.raises(DeclarationReadError, match="did not finish within 1 s"):
        read_declaration(handler, agent="slow", code_root=scratch_root, p0_sla_ms=2000, timeout_s=1)


def test_a_child_that_prints_nothing_is_reported(scratch_root: Path) -> None:
    handler = _module(scratch_root, "quiet", "import os\nos._exit(3)\n")
    with pytest.raises(DeclarationReadError, match=r"gave no result \(exit 3\)"):
        read_declaration(handler, agent="quiet", code_root=scratch_root, p0_sla_ms=2000)


# ---- config ----------------------------------------------------------------------------------


def _principals(value: Any) -> tuple[str, ...]:
    context = cdk_context()
    context[CONTEXT_KEY]["function_url_principals"] = value
    return config_from_context(context).function_url_principals


def test_function_url_principals_default_and_valid_entries() -> None:
    assert config_from_context(cdk_context()).function_url_principals == ()
    assert _principals(None) == ()
    entries = ["111122223333", "arn:aws:iam::111122223333:root", "arn:aws:iam::111122223333:user/ci",
               "arn:aws-us-gov:iam::111122223333:role/path/app-client"]
    assert _principals(entries) == tuple(entries)


@pytest.mark.parametrize(("value", "message"), [
    (["12345"], ("warmstart.function_url_principals: '12345' is not a 12-digit account id or an IAM "
                 "ARN (arn:aws:iam::<account>:root, :role/<name> or :user/<name>); see "
                 "https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html")),
    (["arn:aws:iam::111122223333:group/devs"], ("warmstart.function_url_principals: "
                                                "'arn:aws:iam::111122223333:group/devs' is not a 12-digit")),
    (["*"], "warmstart.function_url_principals: '*' is not a 12-digit account id"),
    (["111122223333", "111122223333"], "warmstart.function_url_principals: '111122223333' is listed twice"),
    ("111122223333", "warmstart.function_url_principals: expected a non-empty list of strings, got str"),
    ([], "warmstart.function_url_principals: expected a non-empty list of strings, got list []"),
])
def test_function_url_principals_are_refused_in_one_line(value: Any, message: str) -> None:
    with pytest.raises(StackConfigError) as caught:
        _principals(value)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
