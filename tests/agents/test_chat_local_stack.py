"""``warmstart local up``'s wiring of the chat agent: the LLM stub as a backing service (empty
``CHAT_LLM_URLS``) and a streaming function URL for a function that runs the streaming runtime
client. The stream through the emulator is tested by the emulator's and the gateway's own tests;
here the stack is started with moto off and nothing is invoked."""

from __future__ import annotations

from pathlib import Path

import httpx

from infra.local.services import llm_stub_factory
from infra.local.spec import AliasSpec, FunctionSpec, LocalApp
from infra.local.stack import LocalStack, LocalStackConfig, streaming_functions

WRAPPER = "/var/task/functions/runtime/warmstart-stream"


def _spec(name: str, **env: str) -> FunctionSpec:
    return FunctionSpec(name=name, handler="functions.chat.handler.handler",
                        code_dir=Path("functions/chat"), environment=env,
                        aliases=(AliasSpec("live"),))


def test_a_streaming_function_gets_a_function_url_and_the_llm_stub_its_url() -> None:
    chat = _spec("chat-fn", CHAT_LLM_URLS="", AWS_LAMBDA_EXEC_WRAPPER=WRAPPER)
    plain = _spec("lookup-fn", LOOKUP_TOOL_URL="")
    app = LocalApp((chat, plain))
    assert [s.name for s in streaming_functions(app)] == ["chat-fn"]
    stack = LocalStack(app, LocalStackConfig(moto=False), backing_services=[llm_stub_factory(time_scale=100.0)])
    with stack:
        endpoints = stack.endpoints()
        assert set(stack.function_urls) == {"chat-fn"}
        assert endpoints["function-url-chat-fn"] == stack.function_urls["chat-fn"]
        deployed = {s.name: s for s in stack.deployed_app.functions}  # type: ignore[union-attr]
        llm_url = deployed["chat-fn"].environment["CHAT_LLM_URLS"]
        assert llm_url == endpoints["llm-stub"] and llm_url.endswith("/v1")
        assert "CHAT_LLM_URLS" not in deployed["lookup-fn"].environment
        assert httpx.get(f"{llm_url}/models").status_code == 200
