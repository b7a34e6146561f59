"""A tiny model-free agent declared through the entry point (a handler module, for the import
budget tests): FastAPI app, two routes, a payload check and a degraded answer, no model.

Importing it runs the init phase (``handler = agent.lambda_handler()``), as a Lambda handler
module does. Its app factory imports FastAPI when the ``web`` preload stage calls it.
"""

from __future__ import annotations

from typing import Any

from functions.runtime.agent import Agent, AgentRuntime, BadRequest, Route


def create_app(runtime: AgentRuntime) -> Any:
    """The agent's FastAPI app (``GET /healthz``, ``POST /v1/echo``)."""
    from fastapi import FastAPI, Request

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "agent": runtime.name, "model": runtime.model_state()}

    @app.post("/v1/echo")
    async def echo(request: Request) -> dict[str, Any]:
        return {"echo": (await request.json())["text"], "degraded": False}

    return app


def echo_payload(body: Any) -> dict[str, Any]:
    """``validate``: ``{"text": str}``."""
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise BadRequest('send {"text": "..."}', status=422)
    return {"text": body["text"]}


agent = Agent(
    "echo",
    app=create_app,
    routes=[
        Route("GET", "/healthz", tier="P1"),
        Route("POST", "/v1/echo", tier="P0", validate=echo_payload,
              degraded=lambda payload: {"echo": None, "partial": True}),
    ],
)

handler = agent.lambda_handler()
