"""The chat agent's ASGI app for plain uvicorn: ``uvicorn bench.chat_asgi:app`` (``bench streaming``).

The same app the warmstart handler serves: `functions.runtime.agent.build_app` on the chat
agent's own declaration, with an `AgentRuntime` over ``os.environ`` (``CHAT_LLM_URLS``,
``CHAT_TOOL_URL``, ``CHAT_FIRST_TOKEN_MS``), as ``tests/agents/test_chat_agent.py`` serves it.
The declaration is taken from ``functions/chat/handler.py`` without its last statement
(``handler = agent.lambda_handler()``), so this process runs no toolkit init or preload: what
uvicorn costs is measured alone. Raises ``RuntimeError`` at import when that statement is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from functions.runtime import lifecycle
from functions.runtime.agent import build_app
from functions.runtime.agent_runtime import AgentRuntime
from functions.runtime.config import InitType, RuntimeConfig

HANDLER_SOURCE = Path(__file__).resolve().parents[1] / "functions" / "chat" / "handler.py"
LAST_STATEMENT = "handler = agent.lambda_handler()"


def declared_agent() -> object:
    """The chat agent's ``Agent`` declaration, its module run up to ``LAST_STATEMENT``."""
    source = HANDLER_SOURCE.read_text()
    if LAST_STATEMENT not in source:
        raise RuntimeError(f"{HANDLER_SOURCE} no longer ends with {LAST_STATEMENT!r}: update bench/chat_asgi.py")
    namespace: dict[str, object] = {"__name__": "bench_chat_declaration"}
    exec(compile(source.split(LAST_STATEMENT)[0], str(HANDLER_SOURCE), "exec"), namespace)  # noqa: S102
    return namespace["agent"]


agent = declared_agent()
settings = dict(os.environ)
app = build_app(agent, AgentRuntime(agent, RuntimeConfig.from_env(settings), settings,  # type: ignore[arg-type]
                                    lifecycle.ExecutionEnvironment(InitType.ON_DEMAND, 0.0), None))
