"""Lambda entry point of the reference agent: ``functions.agent.handler.handler``.

Init phase (module import) imports only the toolkit's init part (standard library), records the
init start, reads the configuration once and creates the execution environment. Then, by init
type:

* ``on-demand``: a background thread loads, in order, the toolkit's invocation part
  (dispatcher, Powertools), fastapi + mangum + the app, and the model; the import returns at
  once (tens of milliseconds).
* ``provisioned-concurrency`` / ``snap-start``: the same stages run before the import returns
  (the init is pre-paid, and under SnapStart captured in the snapshot); SnapStart hooks are
  registered.

Invocation: :func:`handler` hands the event to the toolkit's dispatcher (warm ping -> pong
without app code; otherwise validate, :func:`select_path`, run the app, add ``X-Warmstart-Path``
and ``Server-Timing``).
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
    from functions.runtime.dispatch import Dispatcher, PathChoice
    from functions.runtime.events import HttpRequest
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
            RouteSpec("capabilities", "GET", "/capabilities", "P1"),
            RouteSpec("healthz", "GET", "/healthz", "P1"),
            RouteSpec("debug_resource", "GET", "/debug/resource", "P2"),
        ]
    )


def select_path(request: HttpRequest, route: RouteSpec | None, budget_ms: float) -> PathChoice:
    """Pick the path of one request: THE seam where admission (issue 5) plugs in.

    Today: :func:`functions.runtime.dispatch.readiness_path` (local when the model is ready or
    not needed; wait for the preload within the SLA budget; 503 when the model failed or no
    budget is left).

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


class _Toolkit:
    """What the toolkit stage loaded, bound once for the hot path (no per-call lookups)."""

    dispatcher: Dispatcher | None = None
    readiness_path: Callable[[Preloader, HttpRequest, RouteSpec | None, float], PathChoice]


def _load_toolkit() -> Dispatcher:
    from functions.runtime.dispatch import Dispatcher, readiness_path
    from functions.runtime.telemetry import Telemetry

    _Toolkit.readiness_path = readiness_path
    return Dispatcher(
        config=CONFIG,
        environment=ENVIRONMENT,
        preload=PRELOAD,
        routes=agent_routes(),
        telemetry=Telemetry(CONFIG).load(),
        select_path=select_path,
    )


def _load_web() -> Any:
    from mangum import Mangum

    from functions.agent.app import create_app

    app = create_app(
        config=CONFIG,
        environment=ENVIRONMENT,
        routes=PRELOAD.result("toolkit").routes,
        model=lambda: PRELOAD.result("model"),
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


PRELOAD = Preloader(
    [Stage("toolkit", _load_toolkit), Stage("web", _load_web), Stage("model", _load_model)],
    ENVIRONMENT,
    _clock_ms,
)

if CONFIG.init_type.prepaid:
    PRELOAD.run()
    if CONFIG.init_type is InitType.SNAP_START:
        from functions.runtime import snapstart

        snapstart.register_hooks(ENVIRONMENT, _clock_ms)

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
