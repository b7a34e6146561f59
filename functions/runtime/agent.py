"""Put your own ASGI app (FastAPI first) behind warmstart: the framework's one entry point.

Declare the agent once, in its handler module; the toolkit owns everything else (run-time
config, the execution environment's lifecycle, the preload stages, SnapStart hooks, warm
pings, admission with its ``off`` baseline, the overflow client, telemetry)::

    # functions/myagent/handler.py
    from functions.runtime.agent import Agent, BadRequest, Route

    def check_question(body):                       # the JSON body (None when empty)
        if not isinstance(body, dict) or not isinstance(body.get("question"), str):
            raise BadRequest('send {"question": "..."}', status=422)
        return {"question": body["question"]}

    agent = Agent(
        "myagent",
        app="functions.myagent.app:create_app",     # factory(runtime) or factory(); or the app
        model=None,                                 # or a loader: "pkg.mod:load" / callable
        routes=[
            Route("GET", "/healthz", tier="P1"),
            Route("POST", "/v1/ask", tier="P0", validate=check_question,
                  degraded=lambda payload: {"answer": None, "partial": True}),
        ],
    )
    handler = agent.lambda_handler()                # the init phase runs here

Init phase (`Agent.lambda_handler`): importing this module costs the standard library only;
the app, its imports and the model are loaded by preload stages (``toolkit``, ``overflow``,
``web``, ``telemetry``, ``model``, ``level``; only those the agent needs). Under provisioned
concurrency and SnapStart they run before the handler is returned (pre-paid, snapshotted) and
a declaration error fails the init; on an on-demand init they run on a background thread while
the first request is admitted. The ``web`` stage checks the declared routes against the app's
routes: a route declared but missing from the app, or an app route not declared, fails it with
a message naming the route (`DeclarationError`).

Hooks may be callables or ``"module:attribute"`` strings (resolved by the ``toolkit`` stage,
off the init's critical path). Their contracts (see `Route`) are small and synchronous; a hook
declared with a second parameter also gets the `AgentRuntime` (``validate(body, runtime)``).

Imports only the standard library.
"""

from __future__ import annotations

import time

_IMPORTED_MS = time.perf_counter() * 1000.0  # the init phase has started by now

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from functions.runtime import lifecycle
from functions.runtime.config import ConfigError, InitType, RuntimeConfig
from functions.runtime.errors import BadRequest
from functions.runtime.preload import Preloader, Stage, StageFailed
from functions.runtime.routes import TIERS, RouteRegistry, RouteSpec

if TYPE_CHECKING:  # typing only: the init imports no more than it needs
    from functions.runtime.admission_state import Admission
    from functions.runtime.degradation_level import DegradationLevelReader
    from functions.runtime.dispatch import Dispatcher
    from functions.runtime.levels import Level
    from functions.runtime.overflow import OverflowClient

__all__ = [
    "Agent",
    "AgentHandler",
    "AgentRuntime",
    "BadRequest",
    "ConfigError",
    "DeclarationError",
    "ModelNotReady",
    "Route",
    "app_routes",
    "check_routes",
]

#: HTTP methods a route may declare.
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
#: SSM client timeouts for the level reader, s: a GetParameter answers in tens of ms; 0.5 s
#: bounds a stalled read, which runs on the preload thread (first read) or the reader's daemon
#: refresh thread, never on a request's path (the reader keeps the last level on failure).
#: https://docs.aws.amazon.com/sdkref/latest/guide/feature-timeouts.html
SSM_TIMEOUT_S = 0.5
#: Budget of the overflow client's prewarm: the SLA less this, ms (headroom and the init).
PREWARM_HEADROOM_MS = 300.0
#: How long a local process waits at exit for a running preload (onnxruntime aborts in C++
#: teardown when the interpreter exits mid-load; Lambda itself never exits the process), s.
ATEXIT_WAIT_S = 60.0

Hook = Callable[..., Any] | str


class DeclarationError(ValueError):
    """The agent's declaration is wrong (names the agent, the route and the field)."""


class ModelNotReady(RuntimeError):
    """`AgentRuntime.model` was called while the model is not loaded (or failed to load)."""


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


def _check_hook(agent: str, where: str, field: str, hook: object) -> None:
    if hook is None or callable(hook):
        return
    if isinstance(hook, str) and ":" in hook and all(hook.split(":", 1)):
        return
    raise DeclarationError(
        f"agent {agent!r}: {where}: {field} must be a callable or a 'module:attribute' string, "
        f"got {hook!r}"
    )


def resolve(spec: Hook, *, agent: str, where: str, field: str) -> Callable[..., Any]:
    """A hook's callable: ``spec`` itself, or the attribute a ``"module:attribute"`` names.

    Raises
    ------
    DeclarationError
        The module cannot be imported (its error is chained) or has no such attribute.
    """
    if not isinstance(spec, str):
        return spec
    module_name, _, attribute = spec.partition(":")
    import importlib

    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the declaration's fault
        raise DeclarationError(
            f"agent {agent!r}: {where}: {field} {spec!r}: importing {module_name!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise DeclarationError(
                f"agent {agent!r}: {where}: {field} {spec!r}: {module_name!r} has no "
                f"attribute {attribute!r}"
            ) from None
    return target  # type: ignore[no-any-return]


def _positional_count(function: Callable[..., Any]) -> int:
    """How many positional parameters ``function`` takes (a large number for ``*args``)."""
    import inspect

    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return 1
    count = 0
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            return 99
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def with_runtime(hook: Callable[..., Any], runtime: AgentRuntime) -> Callable[[Any], Any]:
    """A one-argument hook; a hook declared with two parameters gets ``(value, runtime)``
    (the agent's settings and state without module globals)."""
    if _positional_count(hook) >= 2:
        return lambda value: hook(value, runtime)
    return hook


def _call_with_runtime(factory: Callable[..., Any], runtime: AgentRuntime) -> Any:
    """``factory(runtime)`` when it takes a parameter, else ``factory()``."""
    import inspect

    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return factory()
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                      p.VAR_POSITIONAL)]
    return factory(runtime) if positional else factory()


class Route:
    """One route of an agent, declared once: how admission treats it and its hooks.

    Parameters
    ----------
    method : str
        HTTP method (``GET``, ``POST``, ...).
    path : str
        The app's own path (no stage or prefix), Starlette syntax for parameters
        (``/orders/{order_id}``).
    tier : {"P0", "P1", "P2"}
        Priority: P0 core (default SLA ``WARMSTART_SLA_MS``, 2,000 ms), P1 (2.5x), P2
        non-critical (29 s; switched off from degradation level L1). DESIGN.md.
    sla_ms : float | None
        The route's own SLA from the request's arrival, ms (None: the tier's default).
    needs_model : bool
        Serving it locally needs the agent's model (a model route overflows or degrades
        while the model loads; a model-free route waits only for the web stack).
    degradable : bool | None
        The route has a cheaper answer. Default: True when ``degraded`` is given.
    name : str | None
        Feature name in ``/capabilities``, logs and metrics (default: from the path).
    validate : callable or "module:attr", optional
        ``validate(body) -> payload``: ``body`` is the request's JSON body (None when
        empty); return the payload (a dict) the other hooks get; raise
        `functions.runtime.errors.BadRequest` (its status, 4xx) or ``ValueError`` (422) to
        refuse it. Runs before any path, so bad input is never overflowed or degraded.
        Without it the other hooks get ``{}`` and the body is not checked by the toolkit.
    degraded : callable or "module:attr", optional
        ``degraded(payload) -> answer`` (a JSON object): the cheaper answer (L2, or when no
        full path fits the SLA). The toolkit adds ``degraded: true`` and the level.
    overflow_request : callable or "module:attr", optional
        ``overflow_request(payload) -> body`` sent to the overflow endpoint (default: the
        payload). Only for ``needs_model`` routes.
    overflow_answer : callable or "module:attr", optional
        ``overflow_answer(answer) -> answer``: check (and shape) the endpoint's JSON answer;
        raise ``ValueError`` to reject it (the request then falls back: degraded or shed).
        Default: any JSON object is accepted as is.
    downstream_ms : callable or "module:attr", optional
        ``downstream_ms(payload) -> ms``: downstream work (a tool call) the full answer will
        spend besides the app's own compute; admission adds it to the local and overflow
        estimates (the degraded answer skips it).

    Raises
    ------
    DeclarationError
        Unknown method or tier, a path without a leading ``/``, a non-positive SLA,
        ``degradable=True`` without a ``degraded`` hook, a hook that is neither callable nor
        a ``"module:attribute"`` string.
    """

    __slots__ = ("degradable", "degraded", "downstream_ms", "method", "name", "needs_model",
                 "overflow_answer", "overflow_request", "path", "sla_ms", "tier", "validate")

    def __init__(
        self,
        method: str,
        path: str,
        *,
        tier: str = "P0",
        sla_ms: float | None = None,
        needs_model: bool = False,
        degradable: bool | None = None,
        name: str | None = None,
        validate: Hook | None = None,
        degraded: Hook | None = None,
        overflow_request: Hook | None = None,
        overflow_answer: Hook | None = None,
        downstream_ms: Hook | None = None,
    ) -> None:
        where = f"route {method} {path}"
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise DeclarationError(f"{where}: method must be one of {', '.join(sorted(METHODS))}")
        if not isinstance(path, str) or not path.startswith("/"):
            raise DeclarationError(f"{where}: path must start with '/'")
        if tier not in TIERS:
            raise DeclarationError(f"{where}: tier must be one of {', '.join(TIERS)}, got {tier!r}")
        if sla_ms is not None and (isinstance(sla_ms, bool) or not isinstance(sla_ms, (int, float))
                                   or not 0 < sla_ms < float("inf")):
            raise DeclarationError(f"{where}: sla_ms must be a positive number of ms, got {sla_ms!r}")
        if degradable and degraded is None:
            raise DeclarationError(f"{where}: degradable=True needs a degraded hook (the cheaper answer)")
        if (overflow_request is not None or overflow_answer is not None) and not needs_model:
            raise DeclarationError(f"{where}: overflow hooks need needs_model=True (only model "
                                   "routes overflow)")
        for field, hook in (("validate", validate), ("degraded", degraded),
                            ("overflow_request", overflow_request),
                            ("overflow_answer", overflow_answer), ("downstream_ms", downstream_ms)):
            _check_hook("?", where, field, hook)
        self.method = method.upper()
        self.path = path
        self.tier = tier
        self.sla_ms = float(sla_ms) if sla_ms is not None else None
        self.needs_model = bool(needs_model)
        self.degradable = bool(degraded is not None if degradable is None else degradable)
        self.name = name or _feature_name(path)
        self.validate = validate
        self.degraded = degraded
        self.overflow_request = overflow_request
        self.overflow_answer = overflow_answer
        self.downstream_ms = downstream_ms

    def spec(self) -> RouteSpec:
        """The route as admission and ``/capabilities`` see it."""
        return RouteSpec(self.name, self.method, self.path, self.tier, self.sla_ms,  # type: ignore[arg-type]
                         self.degradable, self.needs_model)

    def __repr__(self) -> str:
        return f"Route({self.method!r}, {self.path!r}, tier={self.tier!r}, name={self.name!r})"


def _feature_name(path: str) -> str:
    """``/v1/intent`` -> ``intent``; ``/orders/{id}`` -> ``orders``; ``/`` -> ``root``."""
    parts = [p for p in path.split("/") if p and not p.startswith("{")]
    parts = [p for p in parts if not (p[:1] == "v" and p[1:].isdigit())] or parts
    return "_".join(parts[-1:]).replace("-", "_") or "root"


class Agent:
    """An agent: its app, its routes and its model, declared once (inert until
    `lambda_handler`).

    Parameters
    ----------
    name : str
        The agent's name (a Python identifier; the ``agents`` key in ``cdk.json``).
    app : callable or "module:attr"
        The app factory: ``create_app(runtime)`` (gets the `AgentRuntime`) or
        ``create_app()``, returning an ASGI app (FastAPI, Starlette); or the ASGI app object
        itself (a ``"module:attr"`` naming an app instance).
    routes : Sequence[Route]
        Every route of the app, once. Checked against the app's routes when the web stack
        loads.
    model : callable or "module:attr" or None
        The model loader, ``load(runtime)`` or ``load()``, returning whatever the app needs
        (`AgentRuntime.model` hands it back); None for a model-free agent (its init never
        loads a model, and it needs no inference layer).
    stage_p95_ms : Mapping[str, float] | None
        p95 seeds of the preload stages, ms, until measured (e.g. ``{"model": 5000}`` for a
        slow model); see `functions.runtime.admission_state.DEFAULT_STAGE_P95_MS`.
    before_snapshot, after_restore : Sequence[callable]
        The agent's own SnapStart hooks (close its connections before the snapshot, reopen
        or reseed after a restore); run after the toolkit's.
    text_mime_types : Sequence[str] | None
        Response media types sent as text, not base64 (``"text/"``, ``"application/json"``,
        ``"+json"`` ...); default `functions.runtime.asgi.DEFAULT_TEXT_MIME_TYPES` (text/*,
        JSON, XML, JavaScript and the ``+json`` / ``+xml`` suffixes of RFC 6839).

    Raises
    ------
    DeclarationError
        A bad name, no routes, a route declared twice (same method and path), two routes
        with one name, a ``needs_model`` route without a model, a hook or factory that is
        neither callable nor a ``"module:attribute"`` string.
    """

    def __init__(
        self,
        name: str,
        *,
        app: Hook,
        routes: Sequence[Route],
        model: Hook | None = None,
        stage_p95_ms: Mapping[str, float] | None = None,
        before_snapshot: Sequence[Callable[[], object]] = (),
        after_restore: Sequence[Callable[[], object]] = (),
        text_mime_types: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise DeclarationError(f"agent name must be a Python identifier, got {name!r}")
        self.name = name
        _check_hook(name, "agent", "app", app)
        _check_hook(name, "agent", "model", model)
        if app is None:
            raise DeclarationError(f"agent {name!r}: app is required (an app factory)")
        routes = list(routes)
        if not routes or not all(isinstance(r, Route) for r in routes):
            raise DeclarationError(f"agent {name!r}: routes must be a non-empty list of Route")
        try:
            self.registry = RouteRegistry(r.spec() for r in routes)
        except ValueError as exc:
            raise DeclarationError(f"agent {name!r}: {exc} is declared twice") from None
        names: dict[str, Route] = {}
        for route in routes:
            other = names.get(route.name)
            if other is not None:
                raise DeclarationError(
                    f"agent {name!r}: routes {other.method} {other.path} and {route.method} "
                    f"{route.path} have the same name {route.name!r}; give one name=...")
            names[route.name] = route
            if route.needs_model and model is None:
                raise DeclarationError(
                    f"agent {name!r}: route {route.method} {route.path} needs_model=True but the "
                    "agent declares no model loader (model=...)")
        self.app = app
        self.routes = tuple(routes)
        self.model = model
        self.stage_p95_ms = dict(stage_p95_ms or {})
        self.before_snapshot = tuple(before_snapshot)
        self.after_restore = tuple(after_restore)
        self.text_mime_types = tuple(text_mime_types) if text_mime_types is not None else None

    def lambda_handler(self, env: Mapping[str, str] | None = None, *,
                       init_started_ms: float | None = None) -> AgentHandler:
        """Run the init phase now and return the Lambda handler (``handler = ...``).

        Parameters
        ----------
        env : Mapping[str, str] | None
            The environment variables (default ``os.environ``, read once, here).
        init_started_ms : float | None
            When the init phase started, monotonic ms (default: when this module was first
            imported).

        Returns
        -------
        AgentHandler
            ``handler(event, context)``.

        Raises
        ------
        ConfigError
            A ``WARMSTART_*`` variable holds an unusable value (the message names it).
        DeclarationError
            Under a pre-paid init (provisioned concurrency, SnapStart): the app factory or a
            hook failed, or the declared routes do not match the app's.
        """
        return AgentHandler(self, dict(os.environ if env is None else env),
                            _IMPORTED_MS if init_started_ms is None else init_started_ms)

    def check(self, env: Mapping[str, str] | None = None) -> list[str]:
        """Build the app now and compare its routes with the declaration (for tests and CI).

        Returns
        -------
        list[str]
            The app's routes as ``"METHOD /path"``, when they match.

        Raises
        ------
        DeclarationError
            A hook cannot be resolved, the factory failed, or the routes do not match.
        """
        runtime = AgentRuntime(self, RuntimeConfig.from_env(env or {}), dict(env or {}),
                               lifecycle.ExecutionEnvironment(InitType.ON_DEMAND, _clock_ms()),
                               None)
        for route in self.routes:
            _resolve_hooks(self.name, route)
        app = build_app(self, runtime)
        return check_routes(self, app)


def _resolve_hooks(agent: str, route: Route) -> dict[str, Callable[..., Any] | None]:
    where = f"route {route.method} {route.path}"
    return {field: (resolve(getattr(route, field), agent=agent, where=where, field=field)
                    if getattr(route, field) is not None else None)
            for field in ("validate", "degraded", "overflow_request", "overflow_answer",
                          "downstream_ms")}


def build_app(agent: Agent, runtime: AgentRuntime) -> Any:
    """Resolve and call the agent's app factory (or take the app object it names).

    Raises
    ------
    DeclarationError
        The factory cannot be resolved, raised, or returned something that is not an ASGI
        app (the factory's exception is chained).
    """
    target = resolve(agent.app, agent=agent.name, where="agent", field="app")
    if hasattr(target, "routes") or hasattr(target, "router"):  # already an app
        return target
    try:
        app = _call_with_runtime(target, runtime)
    except Exception as exc:  # noqa: BLE001 - any factory failure is reported with its name
        raise DeclarationError(
            f"agent {agent.name!r}: the app factory {agent.app!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(app):
        raise DeclarationError(
            f"agent {agent.name!r}: the app factory {agent.app!r} returned {type(app).__name__}, "
            "not an ASGI app")
    return app


def app_routes(app: Any) -> list[tuple[str, str]] | None:
    """``(METHOD, path)`` of every HTTP route of a Starlette / FastAPI app, or None when the
    app does not list its routes (a plain ASGI callable).

    FastAPI's generated documentation routes (``openapi_url``, ``docs_url``, its OAuth2
    redirect, ``redoc_url``) and Starlette's implicit ``HEAD`` of a ``GET`` route are left
    out; a mounted sub-application is listed as ``("*", "/mount/{path:path}")``.
    """
    routes = getattr(app, "routes", None)
    if routes is None:
        router = getattr(app, "router", None)
        routes = getattr(router, "routes", None)
    if routes is None:
        return None
    generated = {getattr(app, attr, None) for attr in ("openapi_url", "docs_url", "redoc_url",
                                                      "swagger_ui_oauth2_redirect_url")}
    generated.discard(None)
    out: list[tuple[str, str]] = []
    for route in routes:
        path = getattr(route, "path", None)
        if not isinstance(path, str) or path in generated:
            continue
        methods = getattr(route, "methods", None)
        if methods is None:
            if hasattr(route, "app") and not hasattr(route, "endpoint"):  # Mount / Host
                out.append(("*", path.rstrip("/") + "/{path:path}"))
            continue  # websocket routes: not served through Lambda's HTTP events
        has_get = "GET" in methods
        for method in sorted(methods):
            if method == "HEAD" and has_get:
                continue
            out.append((method, path))
    return out


def check_routes(agent: Agent, app: Any) -> list[str]:
    """Compare the declared routes with the app's (see `app_routes`).

    Returns
    -------
    list[str]
        The app's routes, ``"METHOD /path"``.

    Raises
    ------
    DeclarationError
        Lists every declared route the app lacks and every app route not declared.
    """
    from functions.runtime.routes import same_route_path

    found = app_routes(app)
    if found is None:
        return []  # a plain ASGI callable: nothing to compare
    declared = [(r.method, r.path) for r in agent.routes]
    mounts = [p[: -len("/{path:path}")] for m, p in found if m == "*"]

    def in_app(method: str, path: str) -> bool:
        if any(m == method and same_route_path(p, path) for m, p in found):
            return True
        return any(path == mount or path.startswith(mount + "/") for mount in mounts)

    missing = [f"{m} {p}" for m, p in declared if not in_app(m, p)]
    undeclared = [f"{m} {p}" for m, p in found if m != "*" and not any(
        m == dm and same_route_path(p, dp) for dm, dp in declared)]
    if missing or undeclared:
        parts = []
        if missing:
            parts.append("declared but not in the app: " + ", ".join(missing))
        if undeclared:
            parts.append("in the app but not declared (add a Route for each): " + ", ".join(undeclared))
        raise DeclarationError(f"agent {agent.name!r}: routes do not match the app: " + "; ".join(parts))
    return [f"{m} {p}" for m, p in found]


class AgentRuntime:
    """What the toolkit hands an agent's app factory and model loader.

    Attributes
    ----------
    name : str
        The agent's name.
    config : RuntimeConfig
        The toolkit's run-time configuration.
    settings : Mapping[str, str]
        The environment variables as read at init: the agent reads its own settings here
        (never ``os.environ`` in logic).
    environment : ExecutionEnvironment
        This execution environment (id, init type and duration, resources).
    routes : RouteRegistry
        The declared routes.
    """

    def __init__(self, agent: Agent, config: RuntimeConfig, settings: Mapping[str, str],
                 environment: lifecycle.ExecutionEnvironment, handler: AgentHandler | None) -> None:
        self.agent = agent
        self.name = agent.name
        self.config = config
        self.settings = settings
        self.environment = environment
        self.routes = agent.registry
        self._handler = handler

    def model(self) -> Any:
        """The loaded model (what the agent's loader returned).

        Raises
        ------
        ModelNotReady
            No model declared, not loaded yet, or its loader failed (chained).
        """
        handler = self._handler
        if handler is None or not handler.preload.has("model"):
            raise ModelNotReady(f"agent {self.name!r} has no model")
        preload = handler.preload
        if not preload.ready("model"):
            if preload.failed("model"):
                try:
                    preload.result("model")
                except Exception as exc:  # noqa: BLE001 - re-raised with the cause
                    raise ModelNotReady(f"agent {self.name!r}: the model failed to load") from exc
            raise ModelNotReady(f"agent {self.name!r}: the model is still loading")
        return preload.result("model")

    def model_state(self) -> str:
        """``ready``, ``loading``, ``not_started``, ``failed``; ``none`` without a model."""
        handler = self._handler
        if handler is None or not handler.preload.has("model"):
            return "none"
        return str(self.environment.resource("model"))

    def level(self) -> str:
        """The current degradation level, ``"L0"`` .. ``"L3"`` (never blocks)."""
        handler = self._handler
        return str(handler.current_level() if handler is not None else self.config.degradation_level)

    def timing(self, name: str, duration_ms: float) -> None:
        """Add ``name;dur=duration_ms`` to the current response's ``Server-Timing`` (e.g.
        ``infer``, ``tool``; ``tool`` is subtracted from the local latency admission learns,
        as it is declared per request through ``downstream_ms``)."""
        from functions.runtime.telemetry import current_invocation

        record = current_invocation()
        if record is not None:
            record.timings_ms[name] = record.timings_ms.get(name, 0.0) + float(duration_ms)

    def payload(self) -> dict[str, Any] | None:
        """The current request's payload, as its route's ``validate`` hook returned it (the app
        need not parse and check the body again); None when the route has no ``validate``."""
        from functions.runtime.telemetry import current_invocation

        record = current_invocation()
        return record.payload if record is not None else None

    def remaining_ms(self) -> float | None:
        """What is left of the current request's SLA budget, ms (negative once it is spent;
        None outside a declared route's invocation). Cap a downstream call's timeout with it."""
        from functions.runtime.telemetry import current_invocation

        record = current_invocation()
        if record is None or record.deadline_ms is None:
            return None
        return record.deadline_ms - _clock_ms()

    def mark_degraded(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """The app's own cheaper answer (e.g. a cached result after a downstream failure):
        returns ``answer`` with ``degraded: true`` and the level, and makes the response's
        ``X-Warmstart-Path`` ``degraded`` (counted as a degradation, never as a success)."""
        from functions.runtime.degradation import mark_degraded
        from functions.runtime.levels import parse_level
        from functions.runtime.telemetry import current_invocation

        record = current_invocation()
        if record is not None:
            record.path = "degraded"
        return mark_degraded(answer, level=parse_level(self.level()))

    def fail(self, tag: str) -> str | None:
        """Tag the current invocation's failure (``bad_request``, ``model_error``,
        ``tool_unavailable``, ``timeout_network``, ``timeout_resource``); returns its request id.

        Raises
        ------
        ValueError
            Unknown tag.
        """
        from functions.runtime.errors import FailureTag
        from functions.runtime.telemetry import current_invocation

        failure = FailureTag(tag)
        record = current_invocation()
        if record is None:
            return None
        record.failure = failure
        return record.request_id

    def error_body(self, code: str, message: str, **fields: Any) -> dict[str, Any]:
        """An error body of the shared contract (``error``, ``message``, ``level``,
        ``request_id``, ...) for the current invocation."""
        from functions.runtime.errors import error_body
        from functions.runtime.telemetry import current_invocation

        record = current_invocation()
        return error_body(code, message, request_id=record.request_id if record else None,
                          level=self.level(), **fields)

    def capabilities(self) -> dict[str, Any]:
        """A ``GET /capabilities`` body: each declared route with its tier, its effective SLA
        (the tier default when it declares none) and whether it is on, off or degraded at the
        current level; the level; the model's state."""
        from functions.runtime.admission import default_sla_ms
        from functions.runtime.degradation import capabilities

        level = self.level()
        visible = [r for r in self.routes if not r.path.startswith("/debug/") or self.config.debug_resource]
        at_level = capabilities(visible, level).to_dict()
        return {
            "agent": self.name,
            "level": level,
            "model_state": self.model_state(),
            "features": at_level["features"],
            "disabled": at_level["disabled"],
            "degraded": at_level["degraded"],
            "routes": [
                {"feature": r.feature, "method": r.method, "path": r.path, "tier": r.tier,
                 "sla_ms": r.sla_ms if r.sla_ms is not None else default_sla_ms(r.tier, self.config.sla_ms),
                 "needs_model": r.needs_model, "degradable": r.degradable}
                for r in visible
            ],
        }

    def debug(self) -> dict[str, Any]:
        """A ``GET /debug/resource`` body: environment id, init type and duration, restore,
        resources and their load times, model state, level, recent latencies, admission's
        measured state (local p95s, overflow breaker)."""
        env = self.environment
        handler = self._handler
        admission = handler.admission if handler is not None else None
        return {
            "agent": self.name,
            "environment_id": env.environment_id,
            "init_type": str(env.init_type),
            "init_duration_ms": env.init_duration_ms,
            "restored": env.restored,
            "invocations": env.invocations,
            "requests": env.requests,
            "resources": {k: str(v) for k, v in env.resources.items()},
            "resource_load_ms": dict(env.resource_load_ms),
            "model_state": self.model_state(),
            "degradation_level": self.level(),
            "recent_latencies": env.recent_latencies(),
            **(admission.debug() if admission is not None else {}),
        }


class AgentHandler:
    """One execution environment of an agent: its init phase, and the Lambda handler.

    Built by `Agent.lambda_handler`; call it as ``handler(event, context)``.

    Attributes
    ----------
    agent : Agent
    config : RuntimeConfig
    environment : ExecutionEnvironment
    preload : Preloader
    runtime : AgentRuntime
    overflow : OverflowClient | None
        The overflow endpoint's client once the toolkit stage built it.
    admission : Admission | None
    dispatcher : Dispatcher | None
        Set by the toolkit stage.
    init_resources : dict[str, ResourceState]
        Resource states at the end of the init phase (what the init paid for).
    """

    def __init__(self, agent: Agent, settings: dict[str, str], init_started_ms: float) -> None:
        self.agent = agent
        self.settings = settings
        self.config = config = RuntimeConfig.from_env(settings)
        self.environment = lifecycle.start_environment(config.init_type, init_started_ms)
        self.runtime = AgentRuntime(agent, config, settings, self.environment, self)
        self.dispatcher: Dispatcher | None = None
        self.admission: Admission | None = None
        self.overflow: OverflowClient | None = None
        self.level_reader: DegradationLevelReader | None = None
        self._static_level: Level | None = None
        self._misconfigured: BaseException | None = None
        self.preload = Preloader(self._stages(), self.environment, _clock_ms)
        if config.agent_name is not None and config.agent_name != agent.name:
            import logging

            logging.getLogger("warmstart").warning(
                "agent %r is deployed as %r (WARMSTART_AGENT_NAME, the cdk.json agents key): "
                "logs and metrics use the deployed name", agent.name, config.agent_name)

        if config.init_type.prepaid:
            self.preload.run()
            for stage in ("toolkit", "web"):  # a declaration error fails a pre-paid init
                if self.preload.failed(stage):
                    try:
                        self.preload.result(stage)
                    except StageFailed as failed:  # the DeclarationError itself, not the wrapper
                        cause = failed.__cause__
                        if cause is None:
                            raise
                        raise cause  # keeps its own __cause__ (e.g. the app factory's exception)
            if config.init_type is InitType.SNAP_START:
                self._register_snapstart_hooks()
        self.init_resources = dict(self.environment.resources)
        self.environment.finish_init(_clock_ms())
        if not config.init_type.prepaid:
            import atexit

            atexit.register(self.preload.wait_all, ATEXIT_WAIT_S)
            self.preload.start()  # last: the init is done, the preload overlaps the first request

    # -- the handler ----------------------------------------------------------------------
    def __call__(self, event: Any, context: Any) -> dict[str, Any]:
        """The Lambda handler.

        Parameters
        ----------
        event : Any
            A warm ping ``{"warmstart": {"ping": true, ...}}``, or an API Gateway HTTP API
            (payload 2.0), function URL, REST API (payload 1.0) or ALB event.
        context : Any
            The Lambda context (``aws_request_id``, ``get_remaining_time_in_millis()``); None
            in local calls.

        Returns
        -------
        dict[str, Any]
            A pong for a warm ping; otherwise a response in the event source's format.
        """
        started_ms = _clock_ms()
        dispatcher = self.dispatcher
        if self._misconfigured is not None:  # the web stage refused the declaration
            return self._misconfigured_response(event, context)
        if dispatcher is None:
            self.preload.wait("toolkit", None)
            dispatcher = self.dispatcher
            if dispatcher is None:
                return self._misconfigured_response(event, context)
        return dispatcher.handle(event, context, started_ms)

    def current_level(self) -> Level:
        """The degradation level; never blocks: the static level until the SSM reader's first
        read (the ``level`` stage) is done, then the reader's cached value (an expired one is
        refreshed on a daemon thread; this request gets the last level)."""
        reader = self.level_reader
        if reader is not None and self.preload.done("level"):
            return reader.level()
        if self._static_level is None:
            from functions.runtime.levels import parse_level

            self._static_level = parse_level(str(self.config.degradation_level))
        return self._static_level

    # -- stages ---------------------------------------------------------------------------
    def _stages(self) -> list[Stage]:
        config = self.config
        stages = [Stage("toolkit", self._load_toolkit)]
        overflow = (config.admission and config.overflow_endpoint_name is not None
                    and any(r.needs_model for r in self.agent.routes))
        if overflow:  # first after the toolkit: off a cold request's path
            stages.append(Stage("overflow", self._prewarm_overflow))
        stages += [Stage("web", self._load_web), Stage("telemetry", self._load_telemetry)]
        if self.agent.model is not None:
            stages.append(Stage("model", self._load_model))
        if config.admission and config.degradation_parameter:
            stages.append(Stage("level", self._read_level))
        return stages

    def _load_toolkit(self) -> Dispatcher:
        from functions.runtime.admission import BASELINE_POLICY, HANDLER_POLICY
        from functions.runtime.admission_state import Admission, RouteHooks
        from functions.runtime.dispatch import Dispatcher
        from functions.runtime.overflow import checked
        from functions.runtime.telemetry import Telemetry

        config = self.config
        hooks = {}
        for route in self.agent.routes:
            resolved = {field: (with_runtime(hook, self.runtime) if hook is not None else None)
                        for field, hook in _resolve_hooks(self.agent.name, route).items()}
            answer = resolved["overflow_answer"]
            resolved["overflow_answer"] = checked(answer) if answer is not None else None
            hooks[route.name] = RouteHooks(**resolved)
        if config.admission and config.overflow_endpoint_name and any(r.needs_model for r in self.agent.routes):
            from functions.runtime.overflow import OverflowClient

            self.overflow = OverflowClient(config.overflow_endpoint_name,
                                           endpoint_url=config.overflow_endpoint_url,
                                           region_name=config.region)
        if config.admission and config.degradation_parameter:
            from functions.runtime.degradation_level import DegradationLevelReader

            self.level_reader = DegradationLevelReader(
                config.degradation_parameter, default_level=str(config.degradation_level),
                client_factory=self._ssm_client)
        self.admission = Admission(
            level=self.current_level,
            overflow=self.overflow,
            hooks=hooks,
            stage_p95_ms=self.agent.stage_p95_ms,
            policy=HANDLER_POLICY if config.admission else BASELINE_POLICY,
        )
        self.dispatcher = Dispatcher(
            config=config,
            environment=self.environment,
            preload=self.preload,
            routes=self.agent.registry,
            telemetry=Telemetry(config),  # Powertools is imported by the "telemetry" stage
            admission=self.admission,
            model_stage="model" if self.agent.model is not None else None,
            telemetry_stage="telemetry",
        )
        return self.dispatcher

    def _prewarm_overflow(self) -> OverflowClient | None:
        if self.overflow is not None:
            # the client a cold request's budget buys (the SLA less headroom and the init so far)
            self.overflow.prewarm(max(self.config.sla_ms - PREWARM_HEADROOM_MS, 50.0))
        return self.overflow

    def _load_web(self) -> Any:
        from functions.runtime.asgi import make_adapter

        try:
            app = build_app(self.agent, self.runtime)
            check_routes(self.agent, app)
        except DeclarationError as exc:
            if not self.config.init_type.prepaid:  # a pre-paid init fails with it instead
                import logging

                logging.getLogger("warmstart").error("%s (every request of this execution "
                                                     "environment gets a 500 agent_misconfigured)", exc)
                self._misconfigured = exc
            raise
        options: dict[str, Any] = {}
        if self.agent.text_mime_types is not None:
            options["text_mime_types"] = self.agent.text_mime_types
        return make_adapter(app, base_path=self.config.base_path,
                            strip_prefixes=self.config.strip_prefixes, **options)

    def _load_telemetry(self) -> object:
        assert self.dispatcher is not None
        telemetry = self.dispatcher.telemetry.load()
        self.dispatcher.flush_pending()  # requests answered before Powertools was loaded
        return telemetry

    def _load_model(self) -> Any:
        loader = resolve(self.agent.model, agent=self.agent.name, where="agent",  # type: ignore[arg-type]
                         field="model")
        return _call_with_runtime(loader, self.runtime)

    def _read_level(self) -> Level:
        # the first read, synchronous on the preload thread (off any request's path)
        reader = self.level_reader
        return reader.refresh() if reader is not None else self.current_level()

    def _ssm_client(self) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(connect_timeout=SSM_TIMEOUT_S, read_timeout=SSM_TIMEOUT_S,
                        retries={"total_max_attempts": 1, "mode": "standard"})
        return boto3.client("ssm", region_name=self.config.region, config=config)

    def _register_snapstart_hooks(self) -> None:
        from functions.runtime import snapstart

        # no connection survives a snapshot: the overflow and SSM clients are rebuilt after a
        # restore, and the degradation level cached at snapshot time is re-read
        closers: list[Callable[[], object]] = []
        restorers: list[Callable[[], object]] = []
        if self.overflow is not None:
            closers.append(self.overflow.close)
        if self.level_reader is not None:
            closers.append(self.level_reader.close)
            restorers.append(self.level_reader.expire)
        snapstart.register_hooks(self.environment, _clock_ms,
                                 before_snapshot=[*closers, *self.agent.before_snapshot],
                                 after_restore=[*restorers, *self.agent.after_restore])

    def _misconfigured_response(self, event: Any, context: Any) -> dict[str, Any]:
        """The declaration failed to load (a hook cannot be resolved, the app factory failed,
        the routes do not match the app): a 500 in the source's format, tagged
        ``tool_unavailable``; the cause is logged once per environment (never in the body)."""
        from functions.runtime import events
        from functions.runtime.errors import error_body

        if self._misconfigured is None and self.preload.failed("toolkit"):
            try:
                self.preload.result("toolkit")
            except Exception as exc:  # noqa: BLE001 - logged, then answered as a 500
                self._misconfigured = exc
                import logging

                logging.getLogger("warmstart").error("agent %r is misconfigured: %s", self.agent.name,
                                                     exc.__cause__ or exc)
        kind = events.classify(event)
        body = error_body("agent_misconfigured",
                          f"agent {self.agent.name!r} cannot serve requests: its declaration failed "
                          "to load; see the function's log", request_id=getattr(context, "aws_request_id", None))
        return events.error_response(kind if kind.is_http else events.EventKind.UNKNOWN, event, 500,
                                     body, {"x-warmstart-path": "shed"})
