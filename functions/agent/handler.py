"""Lambda entry point of the reference agent: ``functions.agent.handler.handler``.

Init phase (module import) imports only the toolkit's init part (standard library), records the
init start, reads the configuration once and creates the execution environment. Then, by init
type:

* ``on-demand``: a background thread loads, in order, the toolkit's invocation part
  (dispatcher; ~10 ms), fastapi + mangum + the app (~450 ms), Powertools Logger + Metrics
  (~60-90 ms) and the model (~1 s with its warm-up); the import returns at once (~12 ms
  measured in-process). A request that needs only the web stack does not wait for the model.
* ``provisioned-concurrency`` / ``snap-start``: the same stages run before the import returns
  (the init is pre-paid, and under SnapStart captured in the snapshot); SnapStart hooks are
  registered.

With an overflow endpoint configured (``WARMSTART_OVERFLOW_ENDPOINT_NAME``) the stage right
after the toolkit imports boto3 and builds the ``sagemaker-runtime`` client, so a cold request
that overflows does not pay for it on its own path. With an SSM degradation parameter
(``WARMSTART_DEGRADATION_PARAMETER``) the last stage makes the first read; until then the
static level (``WARMSTART_DEGRADATION_LEVEL``) applies; after it, an expired cached level is
refreshed on a daemon thread started at the start of an invocation (served stale meanwhile), so
no request waits for boto3 or SSM.

``WARMSTART_ADMISSION=off`` is the plain on-demand baseline ("warmstart off"): no overflow client,
no level reader, no degraded answer; a model request waits for the local model for the rest of
the invocation (:func:`baseline_path`).

Invocation: :func:`handler` hands the event to the toolkit's dispatcher: a warm ping -> pong
without app code; otherwise validate the event, then SLA-aware admission
(:class:`functions.runtime.dispatch.Admission`): the request's body is validated first (bad
input is a 4xx, never overflowed), then local (waiting for the preload only as long as the
SLA allows), overflow to the GPU endpoint, the lexical degraded answer, or a shed ``503`` with
``Retry-After``. On an on-demand cold start the first request overflows when the model cannot
be ready within its SLA while the preload goes on; later requests run locally. Every response
carries ``X-Warmstart-Path`` and ``Server-Timing``.
"""

from __future__ import annotations

import time

_INIT_STARTED_MS = time.perf_counter() * 1000.0

import os

from functions.runtime import lifecycle
from functions.runtime.config import InitType, RuntimeConfig
from functions.runtime.preload import Preloader, Stage

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing-only imports (the init imports no more than it needs)
    from collections.abc import Callable
    from typing import Any

    from functions.agent.app import AgentModel
    from functions.runtime.degradation import Level
    from functions.runtime.degradation_level import DegradationLevelReader
    from functions.runtime.dispatch import Dispatcher, PathChoice
    from functions.runtime.events import HttpRequest
    from functions.runtime.overflow import OverflowClient
    from functions.runtime.routes import RouteRegistry, RouteSpec


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


CONFIG = RuntimeConfig.from_env(os.environ)
ENVIRONMENT = lifecycle.start_environment(CONFIG.init_type, _INIT_STARTED_MS)


def agent_routes() -> RouteRegistry:
    """The agent's routes: tier, SLA (None = ``WARMSTART_SLA_MS``) and model need."""
    from functions.runtime.routes import RouteRegistry, RouteSpec

    return RouteRegistry(
        [
            RouteSpec("intent", "POST", "/v1/intent", "P0", degradable=True, needs_model=True),
            RouteSpec("report", "POST", "/v1/report", "P2", needs_model=True),
            RouteSpec("capabilities", "GET", "/capabilities", "P1"),
            RouteSpec("healthz", "GET", "/healthz", "P1"),
            RouteSpec("debug_resource", "GET", "/debug/resource", "P2"),
        ]
    )


def select_path(request: HttpRequest, route: RouteSpec | None, budget_ms: float) -> PathChoice:
    """Readiness-only path choice (the dispatcher's fallback seam; admission replaces it for
    every route the app declares).

    :func:`functions.runtime.dispatch.readiness_path`: local when the model is ready or not
    needed; wait for the preload within the SLA budget; 503 when the model failed or no budget
    is left.

    Parameters
    ----------
    request : HttpRequest
        The validated request (method, path, arrival time).
    route : RouteSpec | None
        Its route spec (None for routes the app does not have).
    budget_ms : float
        SLA budget left, milliseconds.

    Returns
    -------
    PathChoice
    """
    return _Toolkit.readiness_path(PRELOAD, request, route, budget_ms)


def baseline_path(request: HttpRequest, route: RouteSpec | None, budget_ms: float) -> PathChoice:
    """``WARMSTART_ADMISSION=off``: the plain on-demand baseline
    (:func:`functions.runtime.dispatch.on_demand_path`): wait for the local model for the rest
    of the invocation; no overflow, no degraded answer, no shed for the SLA budget."""
    return _Toolkit.on_demand_path(PRELOAD, request, route, budget_ms)


class _Toolkit:
    """What the toolkit stage loaded, bound once for the hot path (no per-call lookups)."""

    dispatcher: Dispatcher | None = None
    readiness_path: Callable[[Preloader, HttpRequest, RouteSpec | None, float], PathChoice]
    on_demand_path: Callable[[Preloader, HttpRequest, RouteSpec | None, float], PathChoice]
    overflow: OverflowClient | None = None
    level_reader: DegradationLevelReader | None = None
    static_level: Level
    intents: dict[str, list[str]]


#: SSM client timeouts for the level reader, s: a GetParameter answers in tens of ms; 0.5 s
#: bounds a stalled read, which runs on the preload thread (first read) or the reader's daemon
#: refresh thread, never on a request's path (the reader keeps the last level on failure).
#: https://docs.aws.amazon.com/sdkref/latest/guide/feature-timeouts.html
SSM_TIMEOUT_S = 0.5


def _ssm_client() -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=SSM_TIMEOUT_S, read_timeout=SSM_TIMEOUT_S,
                    retries={"total_max_attempts": 1, "mode": "standard"})
    return boto3.client("ssm", region_name=CONFIG.region, config=config)


def current_level() -> Level:
    """The degradation level; never blocks: the static level until the SSM reader's first read
    (the ``level`` preload stage) is done, then the reader's cached value. When the cache has
    expired the reader starts a refresh on a daemon thread (at the start of this invocation,
    never joined) and this request gets the last level: no request waits for SSM."""
    reader = _Toolkit.level_reader
    if reader is not None and PRELOAD.done("level"):
        return reader.level()
    return _Toolkit.static_level


def intent_payload(event: Any) -> dict[str, Any]:
    """Validate the body of ``POST /v1/intent`` before any path runs: ``{"text": str}``
    (optional ``tool_ms``: 0 to ``MAX_TOOL_MS`` milliseconds).

    Raises
    ------
    BadRequest
        Missing body or text (422), body not JSON (400), empty text (422), text longer than
        ``MAX_TEXT_CHARS`` (413 ``too_large``), ``tool_ms`` not a number from 0 to
        ``MAX_TOOL_MS`` (422): the same answers the app gives.
    """
    import json

    from functions.agent.model import MAX_TEXT_CHARS, MAX_TOOL_MS, TextTooLongError, check_text
    from functions.runtime.errors import BadRequest
    from functions.runtime.events import request_body

    raw = request_body(event)
    if not raw.strip():
        raise BadRequest('request body is missing: send {"text": "..."}', status=422)
    try:
        body = json.loads(raw)
    except ValueError:
        raise BadRequest('request body is not valid JSON: send {"text": "..."}') from None
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise BadRequest('invalid request: body.text: a string is required; send {"text": "..."}',
                         status=422)
    text = body["text"]
    try:
        check_text(text)
    except TextTooLongError:
        raise BadRequest(f"text has {len(text)} characters; the limit is {MAX_TEXT_CHARS}",
                         status=413, code="too_large") from None
    except ValueError:
        raise BadRequest("text is empty: send a sentence to classify", status=422) from None
    tool_ms = body.get("tool_ms", 0.0)
    if (isinstance(tool_ms, bool) or not isinstance(tool_ms, (int, float))
            or not 0.0 <= tool_ms <= MAX_TOOL_MS):
        raise BadRequest(f"invalid request: body.tool_ms must be a number of milliseconds from 0 "
                         f"to {MAX_TOOL_MS:g}", status=422)
    return {"text": text, "tool_ms": float(tool_ms)} if tool_ms else {"text": text}


def intent_tool_ms(event: Any) -> float:
    """The ``tool_ms`` of a ``POST /v1/intent`` body for the warm path's admission check, ms.

    Cheap and total: a substring test first (no JSON parse for the common body without it);
    0 for a body without a valid ``tool_ms`` (the app validates the body and answers 422).
    """
    body = event.get("body") if isinstance(event, dict) else None
    if isinstance(body, str) and not event.get("isBase64Encoded") and "tool_ms" not in body:
        return 0.0  # the common case: no tool call, no decoding, no parse
    from functions.agent.model import MAX_TOOL_MS
    from functions.runtime.events import request_body
    try:
        raw = request_body(event)
    except Exception:  # noqa: BLE001 - invalid bodies are the app's to refuse
        return 0.0
    if b"tool_ms" not in raw:
        return 0.0
    import json
    try:
        value = json.loads(raw).get("tool_ms", 0.0)
    except (ValueError, AttributeError):
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if 0.0 <= value <= MAX_TOOL_MS else 0.0


#: Model name of the degraded (lexical, model-free) intent answer.
DEGRADED_MODEL_NAME = "lexical-tfidf"


def intent_degraded(payload: dict[str, Any]) -> dict[str, Any]:
    """The L2 / fallback intent answer: lexical nearest prototype, no model (``degraded``).

    It skips the simulated downstream tool call (``tool_ms``) on purpose: that is what makes it
    cheaper (admission counts ``tool_ms`` for the local and overflow paths only)."""
    from functions.agent.model import lexical_classify

    result = lexical_classify(payload["text"], _Toolkit.intents)
    return {
        "intent": result.intent,
        "score": float(result.score),
        "scores": {k: float(v) for k, v in result.scores.items()},
        "degraded": True,
        "model": DEGRADED_MODEL_NAME,
    }


def _load_toolkit() -> Dispatcher:
    from functions.agent.model import load_intents
    from functions.runtime.degradation import parse_level
    from functions.runtime.dispatch import (
        Admission,
        Dispatcher,
        RouteHooks,
        on_demand_path,
        readiness_path,
    )
    from functions.runtime.telemetry import Telemetry

    _Toolkit.readiness_path = readiness_path
    _Toolkit.on_demand_path = on_demand_path
    _Toolkit.static_level = parse_level(str(CONFIG.degradation_level))
    _Toolkit.intents = load_intents(CONFIG.intents_file)
    if not CONFIG.admission:  # the plain on-demand baseline: no overflow, level or degrade
        return Dispatcher(
            config=CONFIG,
            environment=ENVIRONMENT,
            preload=PRELOAD,
            routes=agent_routes(),
            telemetry=Telemetry(CONFIG),
            select_path=baseline_path,
            admission=None,
            telemetry_stage="telemetry",
        )
    if CONFIG.overflow_endpoint_name:
        from functions.runtime.overflow import OverflowClient

        _Toolkit.overflow = OverflowClient(
            CONFIG.overflow_endpoint_name,
            endpoint_url=CONFIG.overflow_endpoint_url,
            region_name=CONFIG.region,
        )
    if CONFIG.degradation_parameter:
        from functions.runtime.degradation_level import DegradationLevelReader

        _Toolkit.level_reader = DegradationLevelReader(
            CONFIG.degradation_parameter,
            default_level=str(CONFIG.degradation_level),
            client_factory=_ssm_client,
        )
    admission = Admission(
        level=current_level,
        overflow=_Toolkit.overflow,
        hooks={"intent": RouteHooks(intent_payload, intent_degraded, intent_tool_ms)},
    )
    return Dispatcher(
        config=CONFIG,
        environment=ENVIRONMENT,
        preload=PRELOAD,
        routes=agent_routes(),
        telemetry=Telemetry(CONFIG),  # Powertools is imported by the "telemetry" stage
        select_path=select_path,
        admission=admission,
        telemetry_stage="telemetry",
    )


def _prewarm_overflow() -> OverflowClient | None:
    overflow = _Toolkit.overflow
    if overflow is not None:
        # the client a cold request's budget buys (the SLA less headroom and the init so far)
        overflow.prewarm(max(CONFIG.sla_ms - 300.0, 50.0))
    return overflow


def _load_telemetry() -> object:
    dispatcher = PRELOAD.result("toolkit")
    telemetry = dispatcher.telemetry.load()
    dispatcher.flush_pending()  # requests answered before Powertools was loaded
    return telemetry


def _read_level() -> Level:
    reader = _Toolkit.level_reader
    # the first read, synchronous on the preload thread (off any request's path)
    return reader.refresh() if reader is not None else _Toolkit.static_level


def _load_web() -> Any:
    from mangum import Mangum

    from functions.agent.app import create_app

    dispatcher = PRELOAD.result("toolkit")
    app = create_app(
        config=CONFIG,
        environment=ENVIRONMENT,
        routes=dispatcher.routes,
        model=lambda: PRELOAD.result("model"),
        level=current_level,
        debug_extra=dispatcher.admission.debug if dispatcher.admission is not None else None,
    )
    return Mangum(app, lifespan="off")


class LoadedModel:
    """The model stage's result (satisfies ``functions.agent.app.AgentModel``)."""

    __slots__ = ("classifier", "intents", "load_ms")

    def __init__(self, classifier: Any, intents: dict[str, list[str]], load_ms: float) -> None:
        self.classifier = classifier
        self.intents = intents
        self.load_ms = load_ms


def _load_model() -> AgentModel:
    from functions.agent import model as agent_model

    embedding = agent_model.EmbeddingModel.load(CONFIG.model_dir, intra_op_threads=1)
    intents = agent_model.load_intents(CONFIG.intents_file)
    classifier = agent_model.IntentClassifier(embedding, intents)
    classifier.classify("warm up")  # the first run allocates the session's buffers
    return LoadedModel(classifier, intents, float(embedding.load_ms))


def _stages() -> list[Stage]:
    stages = [Stage("toolkit", _load_toolkit)]
    if CONFIG.admission and CONFIG.overflow_endpoint_name:  # first after the toolkit: off a cold request's path
        stages.append(Stage("overflow", _prewarm_overflow))
    stages += [Stage("web", _load_web), Stage("telemetry", _load_telemetry), Stage("model", _load_model)]
    if CONFIG.admission and CONFIG.degradation_parameter:
        stages.append(Stage("level", _read_level))
    return stages


PRELOAD = Preloader(_stages(), ENVIRONMENT, _clock_ms)

if CONFIG.init_type.prepaid:
    PRELOAD.run()
    if CONFIG.init_type is InitType.SNAP_START:
        from functions.runtime import snapstart

        # no connection survives a snapshot: the overflow and SSM clients are rebuilt after a
        # restore, and the degradation level cached at snapshot time is re-read
        closers: list[Callable[[], object]] = []
        restorers: list[Callable[[], object]] = []
        if _Toolkit.overflow is not None:
            closers.append(_Toolkit.overflow.close)
        if _Toolkit.level_reader is not None:
            closers.append(_Toolkit.level_reader.close)
            restorers.append(_Toolkit.level_reader.expire)
        snapstart.register_hooks(ENVIRONMENT, _clock_ms, before_snapshot=closers,
                                 after_restore=restorers)

#: Resource states at the end of the init phase (what the init paid for).
INIT_RESOURCES = dict(ENVIRONMENT.resources)
ENVIRONMENT.finish_init(_clock_ms())
if not CONFIG.init_type.prepaid:
    import atexit

    # A local process that exits while onnxruntime is loading on the daemon thread would abort
    # in C++ teardown; wait for the preload first (Lambda itself never exits the process).
    atexit.register(PRELOAD.wait_all, 60.0)
    PRELOAD.start()  # last statement: the init is done, the preload overlaps the first request


def handler(event: Any, context: Any) -> dict[str, Any]:
    """Lambda handler.

    Parameters
    ----------
    event : Any
        A warm ping ``{"warmstart": {"ping": true, ...}}``, or an API Gateway HTTP API
        (payload 2.0), function URL, REST API (payload 1.0) or ALB event.
    context : Any
        The Lambda context (``aws_request_id``, ``get_remaining_time_in_millis()``); None in
        local calls.

    Returns
    -------
    dict[str, Any]
        A pong for a warm ping; otherwise a response in the event source's format.
    """
    started_ms = _clock_ms()
    dispatcher = _Toolkit.dispatcher
    if dispatcher is None:
        PRELOAD.wait("toolkit", None)
        dispatcher = _Toolkit.dispatcher = PRELOAD.result("toolkit")
    return dispatcher.handle(event, context, started_ms)
