"""Lambda entry point of the lookup agent: ``functions.lookup.handler.handler``.

A model-free, tool-calling agent: it answers order-status questions by calling a downstream HTTP
service (``LOOKUP_TOOL_URL``), caches the answers per execution environment, and degrades to
the cached answer (marked stale, with its age) or a partial one. A declaration through the
toolkit's entry point, nothing else; the init imports the toolkit only (standard library).
"""

from __future__ import annotations

from functions.runtime.agent import Agent, Route

HOOKS = "functions.lookup.hooks"

agent = Agent(
    "lookup",
    app="functions.lookup.app:create_app",
    model=None,
    routes=[
        Route("POST", "/v1/lookup", tier="P0", validate=f"{HOOKS}:lookup_payload",
              degraded=f"{HOOKS}:lookup_degraded", downstream_ms=f"{HOOKS}:lookup_downstream_ms"),
        Route("GET", "/v1/orders/{order_id}", tier="P1",
              validate=f"{HOOKS}:path_only", downstream_ms=f"{HOOKS}:orders_downstream_ms"),
        Route("GET", "/capabilities", tier="P1"),
        Route("GET", "/healthz", tier="P1"),
    ],
)

handler = agent.lambda_handler()
