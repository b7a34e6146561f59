"""The chat agent's FastAPI app: ``POST /chat`` streams an LLM's answer as Server-Sent Events.

Routes (the app's own paths; the deploy serves them under ``/chat``)
------
``POST /chat``         ``{"message": "..."}`` -> ``text/event-stream``: ``tool_call`` and ``tool``
                       events, ``{"token"}`` events, then ``done`` or ``error``
                       (`functions.chat.conversation`).
                       Refused before the stream starts: 400 body not JSON, 422 bad payload
                       (`functions.chat.hooks.chat_payload`), 503 ``llm_not_configured``
                       (``CHAT_LLM_URLS`` empty).
``GET /capabilities``  routes, tiers, SLAs, the level; the LLM endpoints and their counts.
``GET /healthz``       liveness; whether the LLM and the tool are configured; no LLM call.

The app's lifespan makes one ``httpx.AsyncClient`` (pooled keep-alive connections to the LLM
and the tool) and closes it at shutdown; under SnapStart the toolkit runs the lifespan again
after each restore (``lifespan_on_restore="restart"``), so no connection outlives a snapshot.
Settings: `functions.chat.settings`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from functions.chat import hooks
from functions.chat.conversation import Turn
from functions.chat.llm import LLMRouter, LLMStats
from functions.chat.settings import ChatSettings
from functions.chat.tools import OrderTool
from functions.runtime.agent import AgentRuntime, BadRequest

__all__ = ["create_app", "first_token_budget_ms"]

#: Pooled connections kept per host: one environment serves one request at a time behind
#: Lambda; a few cover the LLM, the tool and a fallback endpoint.
MAX_KEEPALIVE = 8
#: The first-token SLA when the route declares none, ms (the handler declares 1,000).
DEFAULT_FIRST_TOKEN_MS = 1000.0


def first_token_budget_ms(runtime: AgentRuntime) -> float:
    """The declared ``first_token_ms`` of ``POST /chat`` (else its ``sla_ms``, else
    :data:`DEFAULT_FIRST_TOKEN_MS`)."""
    for spec in runtime.routes:
        if spec.method == "POST" and spec.path == "/chat":
            return float(spec.first_token_ms or spec.sla_ms or DEFAULT_FIRST_TOKEN_MS)
    return DEFAULT_FIRST_TOKEN_MS


def create_app(runtime: AgentRuntime) -> FastAPI:
    """Build the chat app.

    Parameters
    ----------
    runtime : AgentRuntime
        ``settings`` (``CHAT_*``), ``remaining_ms()``, ``fail()``, ``error_body()``,
        ``capabilities()``.

    Returns
    -------
    FastAPI

    Raises
    ------
    ValueError
        A ``CHAT_*`` setting is unusable (the message names it).
    """
    settings = ChatSettings.from_settings(runtime.settings)
    stats = LLMStats()
    budget_ms = first_token_budget_ms(runtime)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limits = httpx.Limits(max_keepalive_connections=MAX_KEEPALIVE, keepalive_expiry=60.0)
        async with httpx.AsyncClient(limits=limits, headers={"User-Agent": "warmstart-chat/1"}) as client:
            app.state.router = (LLMRouter(client, settings.llm_urls, api_key=settings.api_key,
                                          idle_timeout_s=settings.idle_timeout_ms / 1000.0, stats=stats)
                                if settings.llm_urls else None)
            app.state.tool = OrderTool(client, settings.tool_url,
                                       timeout_s=settings.tool_timeout_ms / 1000.0)
            yield

    app = FastAPI(title="warmstart chat agent", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)

    def error(status: int, code: str, message: str, tag: str) -> JSONResponse:
        runtime.fail(tag)
        return JSONResponse(status_code=status, content=runtime.error_body(code, message))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        message = (f"no route {request.method} {request.url.path}: see GET /capabilities"
                   if exc.status_code in (404, 405) else str(exc.detail))
        return error(exc.status_code, code, message, "bad_request")

    @app.post("/chat", response_model=None)
    async def chat(request: Request) -> StreamingResponse | JSONResponse:
        started_s = time.monotonic()
        # the toolkit ran the validate hook already; checking again keeps the app correct when
        # it is served without the toolkit (uvicorn, tests)
        raw = await request.body()
        try:
            payload = hooks.chat_payload(json.loads(raw) if raw.strip() else None)
        except ValueError:
            return error(400, "bad_request", f"request body is not valid JSON: send "
                         f"{hooks.CHAT_EXAMPLE}", "bad_request")
        except BadRequest as exc:
            return error(exc.status, exc.code, exc.message, "bad_request")
        router: LLMRouter | None = request.app.state.router
        if router is None:
            return error(503, "llm_not_configured", "CHAT_LLM_URLS is empty: set it to one or more "
                         "OpenAI-compatible base URLs (comma separated)", "tool_unavailable")
        remaining = runtime.remaining_ms()
        budget = budget_ms if remaining is None else max(0.0, min(budget_ms, remaining))
        turn = Turn(router, request.app.state.tool, model=settings.model,
                    max_tokens=settings.max_tokens, budget_s=budget / 1000.0, started_s=started_s,
                    fail=runtime.fail)
        return StreamingResponse(turn.events(payload["message"]), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/capabilities")
    async def capabilities() -> Any:
        return {**runtime.capabilities(),
                "llm": {"endpoints": list(settings.llm_urls), "model": settings.model,
                        "first_token_ms": budget_ms, "idle_timeout_ms": settings.idle_timeout_ms,
                        "counts": stats.snapshot()},
                "tool": {"configured": settings.tool_url is not None,
                         "timeout_ms": settings.tool_timeout_ms}}

    @app.get("/healthz")
    async def healthz() -> Any:
        return {"status": "ok", "agent": runtime.name,
                "llm": "configured" if settings.llm_urls else "not_configured",
                "tool": "configured" if settings.tool_url is not None else "not_configured",
                "environment_id": runtime.environment.environment_id}

    return app
