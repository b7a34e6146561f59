"""An agent's declaration: `AgentSpec` (its app, routes, model and hooks), `Route`,
and resolving them (hooks, the app factory, the routes' check against the app).

Inert: nothing here starts an execution environment. `functions.runtime.agent.Agent` (the
framework's entry point, which users import) is this declaration plus ``lambda_handler()``;
`functions.runtime.agent_handler` builds the execution environment from a declaration. Kept
apart so that the handler can use the declaration without importing the entry point that
imports it (no import circle).

Imports only the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from functions.runtime import lifecycle
from functions.runtime.agent_runtime import AgentRuntime
from functions.runtime.clock import monotonic_ms as _clock_ms
from functions.runtime.config import InitType, RuntimeConfig
from functions.runtime.routes import TIERS, RouteRegistry, RouteSpec

__all__ = [
    "LIFESPAN_ON_RESTORE",
    "METHODS",
    "STARTUP_TIMEOUT_S",
    "AgentSpec",
    "DeclarationError",
    "Hook",
    "Route",
    "app_routes",
    "build_app",
    "call_with_runtime",
    "check_routes",
    "resolve",
    "resolve_hooks",
    "with_runtime",
]

#: Default bound of the app's lifespan startup (and of its shutdown), s: Lambda's init phase
#: is limited to 10 s on an on-demand init (past it, the init is retried in the invoke phase).
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html#runtimes-lifecycle-ib
STARTUP_TIMEOUT_S = 10.0
#: What happens to the app's lifespan around a SnapStart snapshot (see `Agent`).
LIFESPAN_ON_RESTORE = ("restart", "keep")

#: HTTP methods a route may declare.
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})

Hook = Callable[..., Any] | str
#: An agent's name, as ``cdk.json``'s ``agents`` map accepts it (infra/config.py).
_AGENT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class DeclarationError(ValueError):
    """The agent's declaration is wrong (names the agent, the route and the field)."""



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
    except Exception as exc:
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


def call_with_runtime(factory: Callable[..., Any], runtime: AgentRuntime) -> Any:
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
        payload). Only for ``needs_model`` routes and streaming routes.
    overflow_answer : callable or "module:attr", optional
        ``overflow_answer(answer) -> answer``: check (and shape) the endpoint's JSON answer;
        raise ``ValueError`` to reject it (the request then falls back: degraded or shed).
        A route overflows only when it declares this check and ``validate`` (the payload is
        what is sent): an endpoint serving another model never answers for it unchecked.
        The rule (`functions.runtime.overflow`, "Answer check"): the client gets exactly the
        object the check returns, so fields it leaves out are dropped; the toolkit refuses,
        as ``model_error``, an endpoint body over Lambda's 6 MB response or nested deeper
        than 64 levels, and a checked answer that is not plain JSON or would not fit the
        response.
    downstream_ms : callable or "module:attr", optional
        ``downstream_ms(payload) -> ms``: downstream work (a tool call) the full answer will
        spend besides the app's own compute; admission adds it to the local and overflow
        estimates (the degraded answer skips it).
    stream : bool
        The route streams (the app answers with a ``StreamingResponse``, e.g. Server-Sent
        Events): the client gets the status and headers first, then each chunk as the app
        sends it (`functions.runtime.streaming`). Deployed behind a function URL with
        ``InvokeMode: RESPONSE_STREAM``; a buffered caller (HTTP API, ``Invoke``) gets the
        whole stream as one answer, within Lambda's 6 MB. An app that sent an error event of
        its own and wants the stream to end as failed (the Runtime API's error trailers, the
        invocation tagged) raises `functions.runtime.stream_parts.StreamAborted` (also
        importable from `functions.runtime.asgi_stream`) from its body iterator.
    first_token_ms : float | None
        Streaming routes only: the SLA of the first token (the first body chunk) from the
        request's arrival, ms (None: ``sla_ms``, else the tier's default). The stream as a
        whole is bounded by the function's timeout.
    degraded_event : callable or "module:attr", optional
        Streaming routes only: ``degraded_event(payload) -> data`` (a JSON object), the first
        event sent when no full path can send a first token within ``first_token_ms``; the
        full stream follows when the local path is ready, else a final error event.
    overflow_event : callable or "module:attr", optional
        Streaming routes only: ``overflow_event(part) -> data | None`` maps one part of the
        GPU endpoint's stream (``InvokeEndpointWithResponseStream``; a part is one JSON
        object of the container's stream, an SSE ``data:`` line or a JSON line, decoded by
        `functions.runtime.overflow_stream`) to the data of one SSE event of the route's
        stream (a JSON object or a string), or None to skip the part; raise ``ValueError`` to
        refuse it (the stream then fails as ``model_error``). A streaming route overflows
        only when it declares this hook and ``validate`` (the payload is what is sent,
        through ``overflow_request``); no ``needs_model`` needed: the endpoint's stream
        stands in for a local path that is not ready within ``first_token_ms``.

    Raises
    ------
    DeclarationError
        Unknown method or tier, a path without a leading ``/``, a non-positive SLA,
        ``degradable=True`` without a ``degraded`` hook, a hook that is neither callable nor
        a ``"module:attribute"`` string, ``first_token_ms``, ``degraded_event`` or
        ``overflow_event`` on a route that does not stream, ``overflow_answer`` on a route
        without ``needs_model``, ``overflow_request`` on a route that neither needs the model
        nor streams.
    """

    __slots__ = ("degradable", "degraded", "degraded_event", "downstream_ms", "first_token_ms",
                 "method", "name", "needs_model", "overflow_answer", "overflow_event",
                 "overflow_request", "path", "sla_ms", "stream", "tier", "validate")

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
        stream: bool = False,
        first_token_ms: float | None = None,
        degraded_event: Hook | None = None,
        overflow_event: Hook | None = None,
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
        if overflow_answer is not None and not needs_model:
            raise DeclarationError(f"{where}: overflow hooks need needs_model=True (only model "
                                   "routes overflow)")
        if overflow_request is not None and not (needs_model or stream):
            raise DeclarationError(f"{where}: overflow hooks need needs_model=True or stream=True "
                                   "(only model routes and streaming routes overflow)")
        if not stream and (first_token_ms is not None or degraded_event is not None
                           or overflow_event is not None):
            raise DeclarationError(f"{where}: first_token_ms, degraded_event and overflow_event "
                                   "are for streaming routes (stream=True)")
        if first_token_ms is not None and (isinstance(first_token_ms, bool)
                                           or not isinstance(first_token_ms, (int, float))
                                           or not 0 < first_token_ms < float("inf")):
            raise DeclarationError(f"{where}: first_token_ms must be a positive number of ms, "
                                   f"got {first_token_ms!r}")
        for field, hook in (("validate", validate), ("degraded", degraded),
                            ("overflow_request", overflow_request),
                            ("overflow_answer", overflow_answer), ("downstream_ms", downstream_ms),
                            ("degraded_event", degraded_event),
                            ("overflow_event", overflow_event)):
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
        self.stream = bool(stream)
        self.first_token_ms = float(first_token_ms) if first_token_ms is not None else None
        self.degraded_event = degraded_event
        self.overflow_event = overflow_event

    def spec(self) -> RouteSpec:
        """The route as admission and ``/capabilities`` see it."""
        return RouteSpec(self.name, self.method, self.path, self.tier, self.sla_ms,  # type: ignore[arg-type]
                         self.degradable, self.needs_model, self.stream, self.first_token_ms)

    def __repr__(self) -> str:
        return f"Route({self.method!r}, {self.path!r}, tier={self.tier!r}, name={self.name!r})"


def _feature_name(path: str) -> str:
    """``/v1/intent`` -> ``intent``; ``/orders/{id}`` -> ``orders``; ``/`` -> ``root``."""
    parts = [p for p in path.split("/") if p and not p.startswith("{")]
    parts = [p for p in parts if not (p[:1] == "v" and p[1:].isdigit())] or parts
    return "_".join(parts[-1:]).replace("-", "_") or "root"


class AgentSpec:
    """An agent's declaration, checked: its app, routes, model, SnapStart hooks, text types
    and lifespan settings, with its routes' `functions.runtime.routes.RouteRegistry`
    (``registry``). Inert; the parameters, their meaning and the `DeclarationError` cases are
    those of `functions.runtime.agent.Agent` (this plus ``lambda_handler``).
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
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        lifespan_on_restore: str = "restart",
    ) -> None:
        if not isinstance(name, str) or not _AGENT_NAME.match(name):
            raise DeclarationError(f"agent name must be lower-case letters, digits and '_', "
                                   f"starting with a letter (the cdk.json agents key), got {name!r}")
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
        for stage, ms in self.stage_p95_ms.items():
            if (not isinstance(stage, str) or isinstance(ms, bool) or not isinstance(ms, (int, float))
                    or not 0 <= ms < float("inf")):
                raise DeclarationError(f"agent {name!r}: stage_p95_ms[{stage!r}] must be a finite "
                                       f"number of ms >= 0, got {ms!r}")
        self.before_snapshot = tuple(before_snapshot)
        self.after_restore = tuple(after_restore)
        self.text_mime_types = tuple(text_mime_types) if text_mime_types is not None else None
        if (isinstance(startup_timeout_s, bool) or not isinstance(startup_timeout_s, (int, float))
                or not 0 < startup_timeout_s < float("inf")):
            raise DeclarationError(f"agent {name!r}: startup_timeout_s must be a positive number "
                                   f"of seconds, got {startup_timeout_s!r}")
        if lifespan_on_restore not in LIFESPAN_ON_RESTORE:
            raise DeclarationError(f"agent {name!r}: lifespan_on_restore must be one of "
                                   f"{', '.join(LIFESPAN_ON_RESTORE)}, got {lifespan_on_restore!r}")
        self.startup_timeout_s = float(startup_timeout_s)
        self.lifespan_on_restore = lifespan_on_restore

    def check(self, env: Mapping[str, str] | None = None, *, load_model: bool = False) -> list[str]:
        """Resolve every hook and the model loader, build the app now and compare its routes
        with the declaration (for tests and CI).

        Parameters
        ----------
        env : Mapping[str, str] | None
            The settings the app factory (and loader) see as ``runtime.settings`` (default
            none: pass what the factory reads).
        load_model : bool
            Also run the model loader (slow for a real model).

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
            resolve_hooks(self.name, route)
        if self.model is not None:
            loader = resolve(self.model, agent=self.name, where="agent", field="model")
            if load_model:
                try:
                    call_with_runtime(loader, runtime)
                except Exception as exc:
                    raise DeclarationError(f"agent {self.name!r}: the model loader {self.model!r} "
                                           f"failed: {type(exc).__name__}: {exc}") from exc
        app = build_app(self, runtime)
        return check_routes(self, app)


def resolve_hooks(agent: str, route: Route) -> dict[str, Callable[..., Any] | None]:
    where = f"route {route.method} {route.path}"
    return {field: (resolve(getattr(route, field), agent=agent, where=where, field=field)
                    if getattr(route, field) is not None else None)
            for field in ("validate", "degraded", "overflow_request", "overflow_answer",
                          "downstream_ms", "degraded_event", "overflow_event")}


def build_app(agent: AgentSpec, runtime: AgentRuntime) -> Any:
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
        app = call_with_runtime(target, runtime)
    except Exception as exc:
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


def check_routes(agent: AgentSpec, app: Any) -> list[str]:
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
