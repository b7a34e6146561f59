"""FastAPI routes of the GPU endpoint (imported by `functions.gpu_endpoint.server.create_app`)
over the container contract (`functions.gpu_endpoint.container`).

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

from functions.gpu_endpoint.capacity import (
    AMZ_JSON_CONTENT_TYPE,
    InferenceComponentCapacity,
    NoCapacity,
    handle_control_request,
)
from functions.gpu_endpoint.container import (
    ContainerReply,
    FaultInjector,
    IntentService,
    answer_invocation,
    sagemaker_facade,
)
from functions.intent_model.answers import MODEL_NAME


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


#: What SageMaker's ``InvokeEndpoint`` answers (``ValidationError``, HTTP 400) when an endpoint
#: hosting inference components is invoked without ``InferenceComponentName``: the sentence
#: SDKs match on (e.g. LiteLLM's SageMaker provider checks for "Inference Component Name header
#: is required"); the rest of SageMaker's message is not reproduced. The message for another
#: component's name is ours.
IC_HEADER_REQUIRED_MESSAGE = (
    "Inference Component Name header is required for endpoints to which you plan to deploy "
    "inference components."
)
#: The header boto3's ``invoke_endpoint`` sends for ``InferenceComponentName``.
IC_HEADER = "X-Amzn-SageMaker-Inference-Component"


def _validation_error(message: str) -> Response:
    """An ``InvokeEndpoint`` ``ValidationError`` (HTTP 400, as SageMaker's runtime answers)."""
    return Response(_json_bytes({"message": message}), 400, media_type="application/json",
                    headers={"x-amzn-ErrorType": "ValidationError"})


async def _response(reply: ContainerReply, queue_ms: float | None = None) -> Response:
    """The reply, after its simulated tool call (awaited: no worker thread is held);
    ``queue_ms``: the wait for a capacity slot, reported as ``queue`` in Server-Timing."""
    headers = dict(reply.headers)
    timing = [] if queue_ms is None else [f"queue;dur={queue_ms:.1f}"]
    if reply.infer_ms is not None:
        timing.append(f"infer;dur={reply.infer_ms:.1f}")
    if 200 <= reply.status < 300 and reply.tool_ms > 0:
        started = time.perf_counter()
        await asyncio.sleep(reply.tool_ms / 1000.0)
        timing.append(f"tool;dur={(time.perf_counter() - started) * 1000.0:.1f}")
    if timing:
        headers["Server-Timing"] = ", ".join(timing)
    return Response(content=reply.body, status_code=reply.status, headers=headers)


def build_endpoint_app(
    service: IntentService,
    *,
    endpoint_name: str | None,
    faults: FaultInjector | None,
    enable_fault_api: bool,
    sleep_s: Callable[[float], None],
    capacity: InferenceComponentCapacity | None = None,
) -> FastAPI:
    """The FastAPI app; see `functions.gpu_endpoint.server` for the routes."""
    app = FastAPI(title="warmstart GPU endpoint", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.service = service
    app.state.faults = faults
    app.state.capacity = capacity

    async def answer(raw: bytes, facade_name: str | None, queue_ms: float | None) -> Response:
        reply = await run_in_threadpool(answer_invocation, service, raw, faults, sleep_s)
        return await _response(reply if facade_name is None
                               else sagemaker_facade(reply, facade_name), queue_ms)

    async def invoke(raw: bytes, facade_name: str | None) -> Response:
        """Inference, then the tool call; with a capacity both hold one of its slots."""
        if capacity is None:
            return await answer(raw, facade_name, None)
        try:
            async with capacity.slot() as queue_ms:
                return await answer(raw, facade_name, queue_ms)
        except NoCapacity as exc:
            return _validation_error(exc.message)

    @app.get("/ping")
    def ping() -> Response:
        body = {"status": "ok", "model": MODEL_NAME, "providers": service.active_providers,
                "load_ms": round(service.load_ms, 1)}
        return Response(_json_bytes(body), 200, media_type="application/json")

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        return await invoke(await request.body(), None)

    @app.post("/endpoints/{name}/invocations")
    async def endpoint_invocations(name: str, request: Request) -> Response:
        if endpoint_name is not None and name != endpoint_name:
            return _validation_error(f"Endpoint {name} of account 000000000000 not found.")
        if capacity is not None:
            component = request.headers.get(IC_HEADER)
            if component is None:
                return _validation_error(IC_HEADER_REQUIRED_MESSAGE)
            if component != capacity.name:
                return _validation_error(f"Inference Component {component} of endpoint {name} "
                                         "of account 000000000000 not found.")
        return await invoke(await request.body(), name)

    if capacity is not None:
        ic = capacity

        @app.post("/")
        async def control_plane(request: Request) -> Response:
            status, body = handle_control_request(ic, request.headers.get("x-amz-target"),
                                                  await request.body())
            return Response(_json_bytes(body), status, media_type=AMZ_JSON_CONTENT_TYPE)

        @app.get("/_capacity")
        def capacity_state() -> Response:
            return Response(_json_bytes(ic.snapshot()), 200, media_type="application/json")

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
