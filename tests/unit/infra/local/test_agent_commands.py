"""Choosing an agent in the commands that read the synthesized template or cdk.json:
``warmstart local up`` (each agent's URL), ``warmstart replay --agent`` and ``warmstart plan --agent``
(in process through ``infra.cli.main``; no local stack is started)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from infra.cli import main
from infra.commands.local import agent_lines
from infra.commands.plan import agent_function_name
from infra.commands.replay import for_agent
from infra.local.spec import SpecError
from infra.local.template import read_template

REPO = Path(__file__).resolve().parents[4]
TRACES = REPO / "tests" / "data" / "traces"
REAL = TRACES / "azure2019_fullday_realhash"


@pytest.fixture(scope="module")
def cdk_out(synthesized_template: Path) -> Path:
    """The cloud assembly folder of the synthesized app (its Warmstart template)."""
    return synthesized_template.parent


def test_local_up_prints_each_agents_url(synthesized_template):
    app = read_template(synthesized_template)
    intent, lookup, chat = app.agent("intent"), app.agent("lookup"), app.agent("chat")
    assert agent_lines(app, "http://127.0.0.1:8080") == [
        f"agent    chat         http://127.0.0.1:8080/chat  -> {chat.function_name}:live",
        f"agent    intent       http://127.0.0.1:8080/  -> {intent.function_name}:live",
        f"agent    lookup       http://127.0.0.1:8080/lookup  -> {lookup.function_name}:live",
    ]


def test_replay_picks_the_agents_function(synthesized_template):
    app = read_template(synthesized_template)
    assert for_agent(app, None).gateway.function_name == app.agent("intent").function_name  # the root agent
    lookup = for_agent(app, "lookup")
    assert lookup.gateway.function_name == app.agent("lookup").function_name
    assert lookup.gateway.qualifier == "live" and lookup.functions == app.functions
    with pytest.raises(SpecError) as caught:
        for_agent(app, "search")
    assert str(caught.value) == "unknown agent 'search'; known agents: chat, intent, lookup"


def test_replay_with_an_unknown_agent_is_a_one_line_error(synthesized_template, capsys):
    code = main(["replay", "--trace", str(TRACES / "azure2019_invocations.csv"), "--function", "bb5d90ea",
                 "--start-minute", "300", "--minutes", "20", "--template", str(synthesized_template),
                 "--agent", "search"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "warmstart replay: error: unknown agent 'search'; known agents: chat, intent, lookup")


def test_plan_with_an_agents_policy_and_unknown_agents(capsys):
    args = ["plan", "--trace", str(REAL / "invocations.csv"), "--top", "1",
            "--durations", str(REAL / "durations.csv"), "--unreserved", "900"]
    assert main([*args, "--agent", "search"]) == 2
    assert capsys.readouterr().err == ("warmstart plan: error: unknown agent 'search'; known agents: "
                                       "intent, lookup, chat\n")
    # lookup: strategy none in cdk.json -> nothing is provisioned; an explicit flag wins
    assert main([*args, "--agent", "lookup"]) == 0
    assert "provisioned concurrency" not in capsys.readouterr().out
    assert main([*args, "--agent", "lookup", "--strategy", "provisioned"]) == 0
    assert "provisioned concurrency" in capsys.readouterr().out


def test_plan_from_cloudwatch_finds_the_agents_function_in_cdk_out(cdk_out, tmp_path, capsys):
    lookup = agent_function_name(cdk_out, "lookup")
    assert lookup == read_template(next(cdk_out.glob("*.template.json"))).agent("lookup").function_name
    now = dt.datetime.now(tz=dt.UTC).replace(second=0, microsecond=0)
    with mock_aws():
        cw = boto3.client("cloudwatch", region_name="us-east-1")
        dims = [{"Name": "FunctionName", "Value": lookup}, {"Name": "Resource", "Value": f"{lookup}:live"}]
        cw.put_metric_data(Namespace="AWS/Lambda", MetricData=[
            {"MetricName": "ConcurrentExecutions", "Dimensions": dims,
             "Timestamp": now - dt.timedelta(minutes=m), "Value": 6.0} for m in range(1, 200)])
        code = main(["plan", "--cloudwatch", "--agent", "lookup", "--strategy", "provisioned",
                     "--cdk-out", str(cdk_out), "--history-days", "1", "--unreserved", "900"])
    assert code == 0 and f"{lookup}:live: provisioned concurrency" in capsys.readouterr().out
    # without a synthesized template the function name is needed
    empty = tmp_path / "cdk.out"
    empty.mkdir()
    assert main(["plan", "--cloudwatch", "--cdk-out", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warmstart plan: error: --cloudwatch needs --function-name (agent intent: no "
                          "*.template.json")
