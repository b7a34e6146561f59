"""The lookup agent's FastAPI app (served behind Mangum by the toolkit, ``lifespan="off"``).

Routes (the app's own paths; the deploy routes ``/lookup/...`` here and the toolkit strips the
prefix, ``WARMSTART_BASE_PATH``)
------
``POST /v1/lookup``            ``{"order_id": "A-1001"}`` -> the order's status (P0, degradable).
``GET /v1/orders/{order_id}``  the same answer by path (P1; not degradable: the hooks do not see
                               path parameters, so they cannot pick the order's cached answer).
``GET /capabilities``          routes, tiers, effective SLAs, the level; the tool's state.
``GET /healthz``               liveness; whether the tool is configured; no tool call.

An order is answered from this execution environment's cache while fresh
(``LOOKUP_CACHE_TTL_S``), else by calling the order service (``LOOKUP_TOOL_URL``, whole-call
timeout ``LOOKUP_TOOL_TIMEOUT_MS``; ``Server-Timing: tool``). When the call fails, the last
cached answer (up to ``LOOKUP_CACHE_MAX_STALE_S`` old) is returned with ``degraded: true``,
``stale`` and ``tool_error``; without one, a JSON error of the shared contract: 502
``tool_unavailable`` (refused, 5xx, bad answer) or 504 ``tool_timeout``, with
``retry_after_s``. An unset or unusable ``LOOKUP_TOOL_URL`` is a 503 ``tool_not_configured``
naming the variable. The agent has no model: nothing here imports numpy or onnxruntime.

Route functions are ``async`` and call the tool synchronously: behind Mangum an execution
environment serves one request at a time, so blocking the loop costs nothing and saves the
thread-pool hop of a plain ``def`` route.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from functions.lookup import hooks, tool
from functions.runtime.agent import AgentRuntime, BadRequest

__all__ = ["create_app"]


def create_app(runtime: AgentRuntime) -> FastAPI:
    """Build the lookup app.

    Parameters
    ----------
    runtime : AgentRuntime
        The toolkit's handle: ``settings`` (``LOOKUP_*``), ``timing()``, ``fail()``,
        ``error_body()``, ``level()``, ``capabilities()``.

    Returns
    -------
    FastAPI

    Raises
    ------
    ValueError
        A numeric ``LOOKUP_*`` setting is unusable (the message names it); an unset
        ``LOOKUP_TOOL_URL`` is not an error here (the lookup routes answer 503).
    """
    settings = tool.LookupSettings.from_settings(runtime.settings)
    tool.apply_settings(settings)
    client = (tool.OrderClient(settings.tool_url, timeout_ms=settings.timeout_ms)
              if settings.tool_url is not None else None)

    app = FastAPI(title="warmstart lookup agent", docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, code: str, message: str, tag: str, *,
              retry_after_s: float | None = None) -> JSONResponse:
        runtime.fail(tag)
        headers = {"Retry-After": f"{retry_after_s:g}"} if retry_after_s is not None else None
        return JSONResponse(status_code=status, headers=headers,
                            content=runtime.error_body(code, message, retry_after_s=retry_after_s))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        message = (f"no route {request.method} {request.url.path}: see GET /capabilities"
                   if exc.status_code in (404, 405) else str(exc.detail))
        return error(exc.status_code, code, message, "bad_request")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # a model-free agent's own failure: the contract has no closer tag than model_error
        return error(500, "internal_error", "the agent failed; see the function's log", "model_error")

    def answer(order_id: str) -> Any:
        current = tool.state()
        cached = current.fresh(order_id)
        if cached is not None:
            return hooks.cached_answer(order_id, cached)
        if client is None:
            return error(503, "tool_not_configured", str(settings.url_problem), "tool_unavailable")
        try:
            order, elapsed_ms = current.fetch(client, order_id)
        except tool.ToolError as exc:
            runtime.timing("tool", exc.elapsed_ms)
            fallback = current.usable(order_id) if not isinstance(exc, tool.OrderNotFound) else None
            if fallback is None:
                retry = None if isinstance(exc, tool.OrderNotFound) else tool.RETRY_AFTER_S
                suffix = "" if retry is None else f"; no answer is cached for order {order_id!r}: retry after {retry} s"
                return error(exc.status, exc.code, exc.message + suffix, exc.tag, retry_after_s=retry)
            runtime.fail(exc.tag)  # answered, but a failure all the same (logged with its tag)
            return {**hooks.cached_answer(order_id, fallback), "degraded": True,
                    "level": runtime.level(), "tool_error": exc.code, "message": exc.message}
        runtime.timing("tool", elapsed_ms)
        return hooks.order_answer(order_id, order, source="tool", age_s=0.0, stale=False)

    @app.post("/v1/lookup")
    async def lookup(request: Request) -> Any:
        # the toolkit ran the validate hook already; the app gets the raw body, so it checks
        # again (cheap), which also keeps the app correct when served without the toolkit
        raw = await request.body()
        try:
            payload = hooks.lookup_payload(json.loads(raw) if raw.strip() else None)
        except ValueError:  # not JSON (json.JSONDecodeError)
            return error(400, "bad_request", f"request body is not valid JSON: send "
                         f"{hooks.LOOKUP_EXAMPLE}", "bad_request")
        except BadRequest as exc:
            return error(exc.status, exc.code, exc.message, "bad_request")
        return answer(payload["order_id"])

    @app.get("/v1/orders/{order_id}")
    async def order(order_id: str) -> Any:
        try:
            checked = hooks.check_order_id(order_id)
        except ValueError as exc:
            return error(422, "bad_request", str(exc), "bad_request")
        return answer(checked)

    def tool_state() -> dict[str, Any]:
        current = tool.state()
        return {"configured": client is not None, "problem": settings.url_problem,
                "timeout_ms": settings.timeout_ms, "p95_ms": current.latency.p95_ms(),
                "cached_answers": len(current.cache), "cache_ttl_s": settings.cache_ttl_s,
                "max_stale_s": settings.max_stale_s}

    @app.get("/capabilities")
    async def capabilities() -> Any:
        return {**runtime.capabilities(), "tool": tool_state()}

    @app.get("/healthz")
    async def healthz() -> Any:
        return {"status": "ok", "agent": runtime.name, "model": runtime.model_state(),
                "tool": "configured" if client is not None else "not_configured",
                "environment_id": runtime.environment.environment_id}

    return app
