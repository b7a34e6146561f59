"""The warmstart declaration of the production-style app (``tests/agents/llm_app/app.py``).

Imports only the toolkit: the app, FastAPI, httpx and Pydantic load in the preload.
"""

from __future__ import annotations

from functions.runtime.agent import Agent, Route

APP = "tests.agents.llm_app.app"

agent = Agent(
    "llm_app",
    app=f"{APP}:app",                                   # a module-level app
    routes=[
        Route("GET", "/", tier="P1"),
        Route("GET", "/healthz", tier="P1"),
        Route("POST", "/v1/ask", tier="P0", sla_ms=1500, validate=f"{APP}:check_question",
              degraded=f"{APP}:busy_answer"),
        Route("POST", "/v1/summarize", tier="P1", validate=f"{APP}:check_question"),
        Route("GET", "/v1/echo/{word}", tier="P1"),
        Route("GET", "/v1/boom", tier="P1"),
        Route("POST", "/v1/feedback", tier="P1"),           # BackgroundTasks: after the answer
    ],
    startup_timeout_s=5.0,
)
