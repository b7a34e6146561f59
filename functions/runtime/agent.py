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

The app's ASGI lifespan runs once per execution environment, in the ``web`` stage (see
`functions.runtime.lifespan`), and every request runs on the environment's one event loop; a
module-level app (``app="pkg.app:app"``) reaches the `AgentRuntime` with
``Depends(agent_runtime)`` (`functions.runtime.depends`).

Hooks may be callables or ``"module:attribute"`` strings (resolved by the ``toolkit`` stage,
off the init's critical path). Their contracts (see `Route`) are small and synchronous; a hook
declared with a second parameter also gets the `AgentRuntime` (``validate(body, runtime)``).

The declaration itself (`Agent`'s fields and checks, `Route`, resolving hooks and the app) is
`functions.runtime.agent_declaration`; this module adds ``lambda_handler`` and re-exports the
public names. Imports only the standard library.
"""

from __future__ import annotations

import time

_IMPORTED_MS = time.perf_counter() * 1000.0  # the init phase has started by now

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from functions.runtime.agent_declaration import (
    LIFESPAN_ON_RESTORE,
    METHODS,
    STARTUP_TIMEOUT_S,
    AgentSpec,
    DeclarationError,
    Hook,
    Route,
    app_routes,
    build_app,
    call_with_runtime,
    check_routes,
    resolve,
    resolve_hooks,
    with_runtime,
)
from functions.runtime.agent_runtime import AgentRuntime, ModelNotReady
from functions.runtime.config import RuntimeConfigError
from functions.runtime.errors import BadRequest

if TYPE_CHECKING:  # typing only: the init imports no more than it needs
    from functions.runtime.agent_handler import AgentHandler
    from functions.runtime.depends import agent_runtime  # module __getattr__ below

__all__ = [
    "LIFESPAN_ON_RESTORE",
    "METHODS",
    "STARTUP_TIMEOUT_S",
    "Agent",
    "AgentRuntime",
    "BadRequest",
    "DeclarationError",
    "Hook",
    "ModelNotReady",
    "Route",
    "RuntimeConfigError",
    "agent_runtime",
    "app_routes",
    "build_app",
    "call_with_runtime",
    "check_routes",
    "resolve",
    "resolve_hooks",
    "with_runtime",
]


def __getattr__(name: str) -> Any:
    """``agent_runtime`` (the FastAPI dependency, `functions.runtime.depends`) on first use:
    it imports Starlette, which a handler module's init must not."""
    if name == "agent_runtime":
        from functions.runtime import depends

        return depends.agent_runtime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Agent(AgentSpec):
    """An agent: its app, its routes and its model, declared once (inert until
    `lambda_handler`; the declaration is `functions.runtime.agent_declaration.AgentSpec`).

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
        p95 seeds of the preload stages, ms, until measured: declare your app's (``web``) and
        model's (``model``), e.g. ``{"web": 600, "model": 5000}``; the toolkit seeds only its
        own stages (`functions.runtime.admission.state.DEFAULT_STAGE_P95_MS`). A stage left
        undeclared is assumed to fit (never degraded for it), but a cold request does not
        wait for it when the overflow endpoint can answer in full
        (`functions.runtime.admission.state.UNKNOWN_STAGE_WAIT_MS`); a calibration wins.
    before_snapshot, after_restore : Sequence[callable]
        The agent's own SnapStart hooks (close its connections before the snapshot, reopen
        or reseed after a restore); run after the toolkit's.
    text_mime_types : Sequence[str] | None
        Response media types sent as text, not base64 (``"text/"``, ``"application/json"``,
        ``"+json"`` ...); default `functions.runtime.asgi.DEFAULT_TEXT_MIME_TYPES` (text/*,
        JSON, XML, JavaScript and the ``+json`` / ``+xml`` suffixes of RFC 6839).
    startup_timeout_s : float
        Bound of the app's ASGI lifespan startup, and of its shutdown, s (default
        :data:`STARTUP_TIMEOUT_S`, Lambda's on-demand init limit). A startup that raises or
        runs past it makes the environment misconfigured (``500 agent_misconfigured`` on an
        on-demand init, a failed init when it is pre-paid), logged with its traceback.
    lifespan_on_restore : {"restart", "keep"}
        Under SnapStart: ``restart`` (default) runs the app's lifespan shutdown before the
        snapshot and its startup again after each restore, on a fresh event loop, so what
        startup opened (an ``httpx.AsyncClient``, a database pool) belongs to the restored
        environment; ``keep`` leaves the app as the snapshot has it (startup opened nothing
        that a restore breaks, or the agent's own ``after_restore`` hooks reopen it).

    Raises
    ------
    DeclarationError
        A bad name, a ``stage_p95_ms`` value that is not a number of ms >= 0, no routes,
        a route declared twice (same method and path), two routes
        with one name, a ``needs_model`` route without a model, a hook or factory that is
        neither callable nor a ``"module:attribute"`` string.
    """

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
        RuntimeConfigError
            A ``WARMSTART_*`` variable holds an unusable value (the message names it).
        DeclarationError
            Under a pre-paid init (provisioned concurrency, SnapStart): the app factory or a
            hook failed, or the declared routes do not match the app's.
        """
        from functions.runtime import agent_handler

        return agent_handler.AgentHandler(self, dict(os.environ if env is None else env),
                            _IMPORTED_MS if init_started_ms is None else init_started_ms)
