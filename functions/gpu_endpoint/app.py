"""FastAPI routes of the GPU endpoint (imported by `functions.gpu_endpoint.server.create_app`).

Kept apart from ``server.py`` so fastapi is imported only when an app is built, while the
route signatures can still use module-level annotations (FastAPI resolves them here).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from functions.gpu_endpoint.server import (
    ContainerReply,
    FaultInjector,
    IntentService,
    handle_invocation,
    sagemaker_facade,
)
from functions.intent_model.answers import MODEL_NAME


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


async def _response(reply: ContainerReply) -> Response:
    """The reply, after its simulated tool call (awaited: no worker thread is held)."""
    headers = dict(reply.headers)
    timing = []
    if reply.infer_ms is not None:
        timing.append(f"infer;dur={reply.infer_ms:.1f}")
    if 200 <= reply.status < 300 and reply.tool_ms > 0:
        started = time.perf_counter()
        await asyncio.sleep(reply.tool_ms / 1000.0)
        timing.append(f"tool;dur={(time.perf_counter() - started) * 1000.0:.1f}")
    if timing:
        headers["Server-Timing"] = ", ".join(timing)
    return Response(content=reply.body, status_code=reply.status, headers=headers)


def build_app(
    service: IntentService,
    *,
    endpoint_name: str | None,
    faults: FaultInjector | None,
    enable_fault_api: bool,
    sleep_s: Callable[[float], None],
) -> FastAPI:
    """The FastAPI app; see `functions.gpu_endpoint.server` for the routes."""
    app = FastAPI(title="warmstart GPU endpoint", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.service = service
    app.state.faults = faults

    @app.get("/ping")
    def ping() -> Response:
        body = {"status": "ok", "model": MODEL_NAME, "providers": service.active_providers,
                "load_ms": round(service.load_ms, 1)}
        return Response(_json_bytes(body), 200, media_type="application/json")

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        raw = await request.body()
        reply = await run_in_threadpool(handle_invocation, service, raw, faults, sleep_s)
        return await _response(reply)

    @app.post("/endpoints/{name}/invocations")
    async def endpoint_invocations(name: str, request: Request) -> Response:
        if endpoint_name is not None and name != endpoint_name:
            body = {"message": f"Endpoint {name} of account 000000000000 not found."}
            return Response(_json_bytes(body), 400, media_type="application/json",
                            headers={"x-amzn-ErrorType": "ValidationError"})
        raw = await request.body()
        reply = await run_in_threadpool(handle_invocation, service, raw, faults, sleep_s)
        return await _response(sagemaker_facade(reply, name))

    if enable_fault_api and faults is not None:
        injector = faults

        @app.post("/_faults")
        async def set_fault(request: Request) -> Response:
            try:
                spec = json.loads(await request.body())
                injector.set(str(spec["kind"]), count=spec.get("count"),
                             delay_ms=float(spec.get("delay_ms") or 0.0))
            except (ValueError, KeyError, TypeError) as exc:
                return Response(_json_bytes({"error": "bad_request", "message": str(exc)}), 400,
                                media_type="application/json")
            return Response(_json_bytes({"ok": True}), 200, media_type="application/json")

        @app.delete("/_faults")
        def clear_faults() -> Response:
            injector.clear()
            return Response(_json_bytes({"ok": True, "served": injector.served}), 200,
                            media_type="application/json")

    return app
