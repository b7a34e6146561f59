"""The reference agent's FastAPI app (served behind Mangum with ``lifespan="off"``).

Routes
------
``POST /v1/intent``     ``{"text": ...}`` -> intent and scores (nearest prototype over
                        all-MiniLM-L6-v2 embeddings, ONNX int8).
``POST /v1/report``     ``{"texts": [...]}`` -> intent counts and per-message intents; tier P2
                        (non-critical), so degradation level L1 turns it off.
``GET /capabilities``   routes with tier and SLA, intents, model, degradation level.
``GET /healthz``        liveness plus model state.
``GET /debug/resource`` environment id, init type and duration, model state and load time,
                        degradation level, recent latencies (404 unless
                        ``WARMSTART_DEBUG_RESOURCE=true``).

Route functions are ``async`` on purpose: behind Mangum an execution environment serves one
request at a time, so running inference on the event loop costs nothing and saves the thread-pool
hop FastAPI makes for plain ``def`` routes.

There is no startup event: the handler loads the model in the init phase and hands the app a
provider for it (Mangum's lifespan would re-run startup on every invocation, mangum #342).

Errors are JSON bodies of the shared contract; client errors are tagged ``bad_request`` on the
invocation record (the handler logs the tag once per invocation).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from functions.agent.model import MAX_TOOL_MS
from functions.runtime.config import RuntimeConfig
from functions.runtime.degradation import capabilities as degradation_capabilities
from functions.runtime.errors import FailureTag, error_body
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.routes import RouteRegistry
from functions.runtime.telemetry import current_invocation

__all__ = ["MAX_TEXT_CHARS", "MODEL_NAME", "AgentModel", "IntentRequest", "create_app"]

#: Model name reported in every intent answer (shared contract).
MODEL_NAME = "all-MiniLM-L6-v2-int8"
#: Longest text accepted (``functions.agent.model.MAX_TEXT_CHARS``, repeated here so the app
#: imports without the model module; a test checks they agree).
MAX_TEXT_CHARS = 2000


class AgentModel(Protocol):
    """What the init phase loaded for the app (``functions.agent.handler.LoadedModel``).

    Attributes
    ----------
    classifier : Any
        ``functions.agent.model.IntentClassifier``; ``classify(text) -> IntentResult``.
    intents : Mapping[str, Sequence[str]]
        Intent name -> example phrases.
    load_ms : float
        Session + tokenizer load time measured by the model, milliseconds.
    """

    @property
    def classifier(self) -> Any: ...
    @property
    def intents(self) -> Mapping[str, Sequence[str]]: ...
    @property
    def load_ms(self) -> float: ...


class IntentRequest(BaseModel):
    """Body of ``POST /v1/intent``.

    Attributes
    ----------
    text : str
        The message to classify (at most ``MAX_TEXT_CHARS`` characters).
    tool_ms : float
        Optional, default 0: after classifying, the reference agent waits this long, in
        milliseconds (0 to ``MAX_TOOL_MS``), standing in for the downstream tool call a real
        agent makes (a database or API lookup). ``warmstart replay`` sets it to the trace's
        per-invocation duration so the replay reproduces the trace's execution times. It is
        reported in ``Server-Timing`` as ``tool``. The overflow path makes the same call (the
        GPU endpoint awaits ``tool_ms`` after inference), so an overflowed answer does the same
        work as a local one; the degraded answer skips it on purpose (that is what makes it
        cheaper; ``/capabilities`` says so at L2).
    """

    text: str
    tool_ms: float = Field(default=0.0, ge=0.0, le=MAX_TOOL_MS, strict=True)


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


def _record_failure(tag: FailureTag) -> str | None:
    record = current_invocation()
    if record is None:
        return None
    record.failure = tag
    return record.request_id


def _error(status: int, code: str, message: str, tag: FailureTag, level: str) -> JSONResponse:
    request_id = _record_failure(tag)
    return JSONResponse(
        status_code=status,
        content=error_body(code, message, request_id=request_id, level=level),
    )


def create_app(
    *,
    config: RuntimeConfig,
    environment: ExecutionEnvironment,
    routes: RouteRegistry,
    model: Callable[[], AgentModel],
    level: Callable[[], str] | None = None,
    debug_extra: Callable[[], Mapping[str, Any]] | None = None,
) -> FastAPI:
    """Build the agent app.

    Parameters
    ----------
    config : RuntimeConfig
        Run-time configuration (debug switch, default SLA).
    environment : ExecutionEnvironment
        This execution environment (for ``/debug/resource`` and ``/healthz``).
    routes : RouteRegistry
        Route specs (tier, SLA) listed by ``/capabilities``.
    model : Callable[[], AgentModel]
        Returns the loaded model; raises when it is not loaded (the handler only runs
        model routes once it is).
    level : Callable[[], str] | None
        Current degradation level (default: the configured static level).
    debug_extra : Callable[[], Mapping[str, Any]] | None
        More ``/debug/resource`` fields (the handler adds admission's: local p95s, the
        overflow endpoint's breaker state and recent latencies).

    Returns
    -------
    FastAPI
    """
    app = FastAPI(title="warmstart agent", docs_url=None, redoc_url=None, openapi_url=None)
    def current_level() -> str:
        return str(level() if level is not None else config.degradation_level)


    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return _error(400, "bad_request", "request body is not valid JSON: send "
                          '{"text": "..."} with content-type application/json',
                          FailureTag.BAD_REQUEST, current_level())
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors
        )
        return _error(422, "bad_request", f"invalid request: {details}",
                      FailureTag.BAD_REQUEST, current_level())

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}: see GET /capabilities"
        return _error(exc.status_code, code, message, FailureTag.BAD_REQUEST, current_level())

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return _error(500, "model_error", f"the agent failed: {type(exc).__name__}: {exc}",
                      FailureTag.MODEL_ERROR, current_level())

    def _parse(model_type: type[_Body], raw: bytes, example: str) -> _Body | JSONResponse:
        """Validate a JSON body against ``model_type``; a JSON 400/422 ``bad_request`` if bad."""
        try:
            return model_type.model_validate_json(raw)
        except ValidationError as exc:
            if any(e.get("type") == "json_invalid" for e in exc.errors()):
                return _error(400, "bad_request", f"request body is not valid JSON: send {example}",
                              FailureTag.BAD_REQUEST, current_level())
            details = "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg', 'invalid')}"
                for e in exc.errors()
            )
            return _error(422, "bad_request", f"invalid request: {details}",
                          FailureTag.BAD_REQUEST, current_level())

    @app.post("/v1/intent")
    async def intent(request: Request) -> Any:
        # The body is parsed here, whatever the content-type: API clients often send JSON
        # without ``application/json`` (curl -d sends form encoding).
        raw = await request.body()
        if not raw.strip():
            return _error(422, "bad_request", 'request body is missing: send {"text": "..."}',
                          FailureTag.BAD_REQUEST, current_level())
        body = _parse(IntentRequest, raw, '{"text": "..."}')
        if isinstance(body, JSONResponse):
            return body
        if len(body.text) > MAX_TEXT_CHARS:
            return _error(413, "too_large",
                          f"text has {len(body.text)} characters; the limit is {MAX_TEXT_CHARS}",
                          FailureTag.BAD_REQUEST, current_level())
        if not body.text.strip():
            return _error(422, "bad_request", "text is empty: send a sentence to classify",
                          FailureTag.BAD_REQUEST, current_level())
        loaded = model()
        started = time.perf_counter()
        try:
            result = loaded.classifier.classify(body.text)
        except ValueError as exc:
            return _error(422, "bad_request", str(exc), FailureTag.BAD_REQUEST, current_level())
        except Exception as exc:  # noqa: BLE001 - any inference failure is a model error
            return _error(500, "model_error", f"inference failed: {type(exc).__name__}: {exc}",
                          FailureTag.MODEL_ERROR, current_level())
        infer_ms = (time.perf_counter() - started) * 1000.0
        record = current_invocation()
        if record is not None:
            record.timings_ms["infer"] = infer_ms
        if body.tool_ms > 0:
            tool_started = time.perf_counter()
            await asyncio.sleep(body.tool_ms / 1000.0)
            if record is not None:
                record.timings_ms["tool"] = (time.perf_counter() - tool_started) * 1000.0
        return {
            "intent": result.intent,
            "score": float(result.score),
            "scores": {k: float(v) for k, v in result.scores.items()},
            "degraded": bool(result.degraded),
            "model": MODEL_NAME,
        }

    @app.post("/v1/report")
    async def report(request: Request) -> Any:
        # P2 (non-critical) feature: a routing report over a batch of messages. Degradation
        # level L1 and above turn it off (503 feature_disabled, decided before this runs).
        raw = await request.body()
        body = _parse(ReportRequest, raw, '{"texts": ["...", ...]}')
        if isinstance(body, JSONResponse):
            return body
        for index, text in enumerate(body.texts):
            if len(text) > MAX_TEXT_CHARS or not text.strip():
                return _error(422, "bad_request", f"texts[{index}] must be a non-empty sentence "
                              f"of at most {MAX_TEXT_CHARS} characters",
                              FailureTag.BAD_REQUEST, current_level())
        loaded = model()
        started = time.perf_counter()
        try:
            results = [loaded.classifier.classify(text) for text in body.texts]
        except Exception as exc:  # noqa: BLE001 - any inference failure is a model error
            return _error(500, "model_error", f"inference failed: {type(exc).__name__}: {exc}",
                          FailureTag.MODEL_ERROR, current_level())
        record = current_invocation()
        if record is not None:
            record.timings_ms["infer"] = (time.perf_counter() - started) * 1000.0
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
            intents = sorted(model().intents)
        except Exception:  # noqa: BLE001 - model not loaded yet: say so
            intents = None
        level_now = str(current_level())
        visible = [r for r in routes if not r.path.startswith("/debug/") or config.debug_resource]
        at_level = degradation_capabilities(visible, level_now).to_dict()
        return {
            "model": MODEL_NAME,
            "model_state": str(environment.resource("model")),
            "intents": intents,
            "level": level_now,
            "features": at_level["features"],  # what is on, off or degraded at this level
            "disabled": at_level["disabled"],
            "degraded": at_level["degraded"],
            "max_text_chars": MAX_TEXT_CHARS,
            "routes": [
                {
                    "feature": r.feature,
                    "method": r.method,
                    "path": r.path,
                    "tier": r.tier,
                    "sla_ms": r.sla_ms if r.sla_ms is not None else config.sla_ms,
                }
                for r in routes
                if not r.path.startswith("/debug/") or config.debug_resource
            ],
        }

    @app.get("/healthz")
    async def healthz() -> Any:
        return {
            "status": "ok",
            "model": str(environment.resource("model")),
            "environment_id": environment.environment_id,
        }

    @app.get("/debug/resource")
    async def debug_resource() -> Any:
        if not config.debug_resource:
            raise StarletteHTTPException(status_code=404)
        try:
            model_load_ms: float | None = model().load_ms
        except Exception:  # noqa: BLE001
            model_load_ms = None
        return {
            "environment_id": environment.environment_id,
            "init_type": str(environment.init_type),
            "init_duration_ms": environment.init_duration_ms,
            "restored": environment.restored,
            "invocations": environment.invocations,
            "requests": environment.requests,
            "resources": {k: str(v) for k, v in environment.resources.items()},
            "resource_load_ms": dict(environment.resource_load_ms),
            "model_state": str(environment.resource("model")),
            "model_load_ms": model_load_ms,
            "degradation_level": str(current_level()),
            "recent_latencies": environment.recent_latencies(),
            **(dict(debug_extra()) if debug_extra is not None else {}),
        }

    return app
