"""Lambda entry point of the chat agent: ``functions.chat.handler.handler``.

An LLM chat agent with one tool (``lookup_order``, the order service) that streams its answer
as Server-Sent Events: ``POST /chat`` with ``{"message": "..."}``. The LLM is any
OpenAI-compatible chat completions endpoint (``CHAT_LLM_URLS``; `functions.chat.llm` says
why that contract). A declaration through the toolkit's entry point, nothing else; the init
imports the toolkit only (standard library): FastAPI and httpx load in the preload.
"""

from __future__ import annotations

from functions.runtime.agent import Agent, Route

HOOKS = "functions.chat.hooks"
#: The first token's SLA, from the request's arrival, ms: a chat UI shows its first words
#: within a second. The app retries and falls back to a second LLM only within it.
FIRST_TOKEN_MS = 1000

agent = Agent(
    "chat",
    app="functions.chat.app:create_app",
    model=None,
    routes=[
        Route("POST", "/chat", tier="P0", stream=True, first_token_ms=FIRST_TOKEN_MS,
              validate=f"{HOOKS}:chat_payload", degraded_event=f"{HOOKS}:busy_event"),
        Route("GET", "/capabilities", tier="P1"),
        Route("GET", "/healthz", tier="P1"),
    ],
)

handler = agent.lambda_handler()
