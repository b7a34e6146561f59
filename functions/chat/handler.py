"""Lambda entry point of the chat agent: ``functions.chat.handler.handler``.

An LLM chat agent with one tool (``lookup_order``, the order service) that streams its answer
as Server-Sent Events: ``POST /chat`` with ``{"message": "..."}``. The LLM is any
OpenAI-compatible chat completions endpoint (``CHAT_LLM_URLS``; `functions.chat.llm` says
why that contract). A declaration through the toolkit's entry point, nothing else; the init
imports the toolkit only (standard library): FastAPI and httpx load in the preload.

With an overflow endpoint configured (``WARMSTART_OVERFLOW_ENDPOINT_NAME``, and
``WARMSTART_OVERFLOW_ENDPOINT_URL`` locally), a cold start that cannot send a first token in time
streams the endpoint's OpenAI-style chat completion instead
(`functions.chat.hooks.overflow_request` / `overflow_event`).
"""

from __future__ import annotations

import os

from functions.chat.settings import first_token_ms
from functions.runtime.agent import Agent, Route

HOOKS = "functions.chat.hooks"
#: The first token's SLA, from the request's arrival, ms: a chat UI shows its first words
#: within a second (``CHAT_FIRST_TOKEN_MS`` overrides it, default 1,000). The app retries and
#: falls back to a second LLM only within it.
FIRST_TOKEN_MS = first_token_ms(os.environ)

agent = Agent(
    "chat",
    app="functions.chat.app:create_app",
    model=None,
    routes=[
        Route("POST", "/chat", tier="P0", stream=True, first_token_ms=FIRST_TOKEN_MS,
              validate=f"{HOOKS}:chat_payload", degraded_event=f"{HOOKS}:busy_event",
              overflow_request=f"{HOOKS}:overflow_request", overflow_event=f"{HOOKS}:overflow_event"),
        Route("GET", "/capabilities", tier="P1"),
        Route("GET", "/healthz", tier="P1"),
    ],
)

handler = agent.lambda_handler()
