"""Lambda entry point of the reference intent agent: ``functions.agent.handler.handler``.

A declaration through the toolkit's entry point (`functions.runtime.agent`), nothing else: the
app (`functions.agent.app`), its routes with their tiers and hooks (`functions.agent.hooks`),
and the model loader. The init imports the toolkit only (standard library).
"""

from __future__ import annotations

from functions.runtime.agent import Agent, Route

HOOKS = "functions.agent.hooks"

agent = Agent(
    "intent",
    app="functions.agent.app:create_app",
    model=f"{HOOKS}:load_model",
    routes=[
        Route("POST", "/v1/intent", tier="P0", needs_model=True,
              validate=f"{HOOKS}:intent_payload", degraded=f"{HOOKS}:intent_degraded",
              overflow_answer=f"{HOOKS}:intent_overflow_answer",
              downstream_ms=f"{HOOKS}:intent_downstream_ms"),
        Route("POST", "/v1/report", tier="P2", needs_model=True),
        Route("GET", "/capabilities", tier="P1"),
        Route("GET", "/healthz", tier="P1"),
        Route("GET", "/debug/resource", tier="P2", name="debug_resource"),
    ],
)

handler = agent.lambda_handler()
