"""The replay runner's downstream stubs (`infra.replay.runner.downstream_stubs`): a replay of the
chat agent (``cdk.json``'s environment) starts the LLM stub, so its function runs with
``CHAT_LLM_URLS`` set (not ``503 llm_not_configured``), and the tool stub for ``CHAT_TOOL_URL``;
an agent without such variables gets neither. The stack is started with moto off and nothing
is invoked."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from infra.local.services import LLMStubService, ToolStubService
from infra.local.spec import AliasSpec, FunctionSpec, LocalApp
from infra.local.stack import LocalStack, LocalStackConfig
from infra.replay.runner import ALIAS, configure, downstream_stubs

ROOT = Path(__file__).resolve().parents[4]


def agent_spec(agent: str) -> FunctionSpec:
    """The function of ``cdk.json``'s agent ``agent`` with the environment the deploy gives it."""
    config = json.loads((ROOT / "cdk.json").read_text())["context"]["warmstart"]["agents"][agent]
    return FunctionSpec(name=f"{agent}-fn", handler=config["handler"], code_dir=ROOT / config["code"][0],
                        environment=dict(config["environment"]), aliases=(AliasSpec(ALIAS),))


@pytest.mark.parametrize("config", ["on", "off"])
def test_a_replay_of_the_chat_agent_runs_it_with_the_llm_stubs_url(config: str) -> None:
    spec = configure(agent_spec("chat"), config)  # type: ignore[arg-type]
    stubs = downstream_stubs(spec)
    assert sorted(type(s).__name__ for s in stubs) == ["LLMStubService", "ToolStubService"]
    with LocalStack(LocalApp((spec,)), LocalStackConfig(moto=False), backing_services=stubs) as stack:
        (deployed,) = stack.deployed_app.functions  # type: ignore[union-attr]
        llm = next(s for s in stubs if isinstance(s, LLMStubService)).endpoint
        tool = next(s for s in stubs if isinstance(s, ToolStubService)).endpoint
        assert deployed.environment["CHAT_LLM_URLS"] == llm and llm.endswith("/v1")
        assert deployed.environment["CHAT_TOOL_URL"] == tool
        assert deployed.environment["CHAT_LLM_MODEL"] == "gpt-4.1-mini"  # not a URL: kept
        assert httpx.get(f"{llm}/models", timeout=10.0).status_code == 200


def test_an_agent_without_empty_downstream_urls_gets_no_stub() -> None:
    spec = agent_spec("chat")
    deployed = FunctionSpec(name=spec.name, handler=spec.handler, code_dir=spec.code_dir,
                            environment={"CHAT_LLM_URLS": "https://llm.example/v1",
                                         "CHAT_TOOL_URL": "https://orders.example"},
                            aliases=spec.aliases)
    assert downstream_stubs(deployed) == []
    lookup = downstream_stubs(agent_spec("lookup"))
    assert [type(s).__name__ for s in lookup] == ["ToolStubService"]
