"""The reference agent's FastAPI app (served behind Mangum with ``lifespan="off"``).

Routes
------
``POST /v1/intent``     ``{"text": ...}`` -> intent and scores (nearest prototype over
                        all-MiniLM-L6-v2 embeddings, ONNX int8). The body contract is
                        `functions.intent_model.answers` (shared with the payload hook and
                        the GPU endpoint).
``POST /v1/report``     ``{"texts": [...]}`` -> intent counts and per-message intents; tier P2
                        (non-critical), so degradation level L1 turns it off.
``GET /capabilities``   routes with tier and effective SLA, intents, model, degradation level.
``GET /healthz``        liveness plus model state.
``GET /debug/resource`` environment id, init type and duration, model state and load time,
                        degradation level, recent latencies (404 unless
                        ``WARMSTART_DEBUG_RESOURCE=true``).

Route functions are ``async`` on purpose: behind Mangum an execution environment serves one
request at a time, so running inference on the event loop costs nothing and saves the thread-pool
hop FastAPI makes for plain ``def`` routes.

There is no startup event: the toolkit loads the model in the init phase and the app reads it
with ``runtime.model()`` (Mangum's lifespan would re-run startup on every invocation, mangum
#342).

Errors are JSON bodies of the shared contract; client errors are tagged ``bad_request`` on the
invocation record.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from functions.intent_model.answers import (
    MAX_TEXT_CHARS,
    MODEL_NAME,
    BodyError,
    intent_answer,
    parse_intent_json,
)
from functions.runtime.agent import AgentRuntime

__all__ = ["create_app"]

#: Most messages one ``POST /v1/report`` may carry (bounds the request's work).
MAX_REPORT_TEXTS = 50


class ReportRequest(BaseModel):
    """Body of ``POST /v1/report`` (tier P2, off from degradation level L1).

    Attributes
    ----------
    texts : list[str]
        1 to ``MAX_REPORT_TEXTS`` messages, each a non-empty sentence of at most
        ``MAX_TEXT_CHARS`` characters. The answer counts the routed intents
        (``by_intent``) and gives each message's intent and score (``items``, same order).
    """

    texts: list[str] = Field(min_length=1, max_length=MAX_REPORT_TEXTS)


_Body = TypeVar("_Body", bound=BaseModel)


def create_app(runtime: AgentRuntime) -> FastAPI:
    """Build the agent app.

    Parameters
    ----------
    runtime : AgentRuntime
        The toolkit's handle: ``model()`` (the loaded `functions.agent.hooks.LoadedModel`;
        model routes run only once it is loaded), ``level()``, ``capabilities()``,
        ``debug()``, ``timing()``, ``error_body()``, ``config.debug_resource``.

    Returns
    -------
    FastAPI
    """
    app = FastAPI(title="warmstart agent", docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, code: str, message: str, tag: str = "bad_request") -> JSONResponse:
        runtime.fail(tag)
        return JSONResponse(status_code=status, content=runtime.error_body(code, message))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()
        )
        return error(422, "bad_request", f"invalid request: {details}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}: see GET /capabilities"
        return error(exc.status_code, code, message)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error(500, "model_error", "the agent failed; see the function's log", "model_error")

    def parse(model_type: type[_Body], raw: bytes, example: str) -> _Body | JSONResponse:
        """Validate a JSON body against ``model_type``; a JSON 400/422 ``bad_request`` if bad."""
        try:
            return model_type.model_validate_json(raw)
        except ValidationError as exc:
            if any(e.get("type") == "json_invalid" for e in exc.errors()):
                return error(400, "bad_request", f"request body is not valid JSON: send {example}")
            details = "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg', 'invalid')}"
                for e in exc.errors()
            )
            return error(422, "bad_request", f"invalid request: {details}")

    @app.post("/v1/intent")
    async def intent(request: Request) -> Any:
        # The body is parsed here, whatever the content-type: API clients often send JSON
        # without ``application/json`` (curl -d sends form encoding).
        try:
            body = parse_intent_json(await request.body())
        except BodyError as exc:
            return error(exc.status, exc.code, exc.message)
        loaded = runtime.model()
        started = time.perf_counter()
        try:
            result = loaded.classifier.classify(body.text)
        except ValueError as exc:
            return error(422, "bad_request", str(exc))
        except Exception:  # noqa: BLE001 - any inference failure is a model error
            return error(500, "model_error", "inference failed; see the function's log", "model_error")
        runtime.timing("infer", (time.perf_counter() - started) * 1000.0)
        if body.tool_ms > 0:  # the simulated downstream tool call
            tool_started = time.perf_counter()
            await asyncio.sleep(body.tool_ms / 1000.0)
            runtime.timing("tool", (time.perf_counter() - tool_started) * 1000.0)
        return intent_answer(result)

    @app.post("/v1/report")
    async def report(request: Request) -> Any:
        # P2 (non-critical) feature: a routing report over a batch of messages. Degradation
        # level L1 and above turn it off (503 feature_disabled, decided before this runs).
        body = parse(ReportRequest, await request.body(), '{"texts": ["...", ...]}')
        if isinstance(body, JSONResponse):
            return body
        for index, text in enumerate(body.texts):
            if len(text) > MAX_TEXT_CHARS or not text.strip():
                return error(422, "bad_request", f"texts[{index}] must be a non-empty sentence "
                             f"of at most {MAX_TEXT_CHARS} characters")
        loaded = runtime.model()
        started = time.perf_counter()
        try:
            results = [loaded.classifier.classify(text) for text in body.texts]
        except Exception:  # noqa: BLE001 - any inference failure is a model error
            return error(500, "model_error", "inference failed; see the function's log", "model_error")
        runtime.timing("infer", (time.perf_counter() - started) * 1000.0)
        counts: dict[str, int] = {}
        for result in results:
            counts[result.intent] = counts.get(result.intent, 0) + 1
        return {
            "count": len(results),
            "by_intent": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
            "items": [{"intent": r.intent, "score": float(r.score)} for r in results],
            "model": MODEL_NAME,
        }

    @app.get("/capabilities")
    async def capabilities() -> Any:
        try:
            intents: list[str] | None = sorted(runtime.model().intents)
        except Exception:  # noqa: BLE001 - model not loaded yet: say so
            intents = None
        return {**runtime.capabilities(), "model": MODEL_NAME, "intents": intents,
                "max_text_chars": MAX_TEXT_CHARS}

    @app.get("/healthz")
    async def healthz() -> Any:
        return {
            "status": "ok",
            "model": runtime.model_state(),
            "environment_id": runtime.environment.environment_id,
        }

    @app.get("/debug/resource")
    async def debug_resource() -> Any:
        if not runtime.config.debug_resource:
            raise StarletteHTTPException(status_code=404)
        try:
            model_load_ms: float | None = runtime.model().load_ms
        except Exception:  # noqa: BLE001
            model_load_ms = None
        return {**runtime.debug(), "model_load_ms": model_load_ms}

    return app
