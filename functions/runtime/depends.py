"""The agent's `AgentRuntime` inside a FastAPI / Starlette app, whatever the app's layout.

An app factory gets the runtime as its argument (``create_app(runtime)``); a module-level app
(``Agent(..., app="pkg.app:app")``, the usual FastAPI layout) has no factory to receive it. The
toolkit puts the runtime in every request's ASGI scope (``scope["warmstart.runtime"]``), and
:func:`agent_runtime` reads it back, as a FastAPI dependency or called with the request::

    from fastapi import Depends, FastAPI
    from functions.runtime.agent import AgentRuntime, agent_runtime

    app = FastAPI()

    @app.post("/v1/ask")
    async def ask(question: Question, runtime: AgentRuntime = Depends(agent_runtime)):
        budget_ms = runtime.remaining_ms()          # what is left of this request's SLA
        ...

In a test of the app alone (``TestClient``, no warmstart handler), override the dependency:
``app.dependency_overrides[agent_runtime] = lambda: fake_runtime``.

Imports only the standard library; ``agent_runtime`` imports Starlette (the app's own stack)
when it is first taken, so take it in the app, not in a handler module
(``functions.runtime.agent`` re-exports it, lazily too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what module __getattr__ below builds on first use
    from starlette.requests import HTTPConnection

    from functions.runtime.agent_runtime import AgentRuntime

    def agent_runtime(connection: HTTPConnection) -> AgentRuntime: ...

__all__ = ["SCOPE_KEY", "agent_runtime"]

#: The ASGI scope key the toolkit puts the runtime under (an extension key, like Mangum's
#: ``aws.event``).
SCOPE_KEY = "warmstart.runtime"

_made: dict[str, Any] = {}


def _make() -> Any:
    """Build `agent_runtime` (FastAPI reads its parameter's annotation, Starlette's
    ``HTTPConnection``: imported here, on first use, so this module imports only the standard
    library like every runtime module)."""
    from starlette.requests import HTTPConnection

    from functions.runtime.agent_runtime import AgentRuntime

    def agent_runtime(connection: HTTPConnection) -> AgentRuntime:
        """The `AgentRuntime` of the agent serving this request.

        Parameters
        ----------
        connection : starlette.requests.HTTPConnection
            The request (FastAPI passes it when this is used as ``Depends(agent_runtime)``).

        Returns
        -------
        AgentRuntime

        Raises
        ------
        RuntimeError
            The request was not served through a warmstart handler
            (``Agent(...).lambda_handler()``): says so, and how to test the app alone.
        """
        runtime = connection.scope.get(SCOPE_KEY)
        if runtime is None:
            raise RuntimeError(
                "no warmstart AgentRuntime in this request's scope: the app is not served "
                "through Agent(...).lambda_handler(); in a test of the app alone, set "
                "app.dependency_overrides[agent_runtime] = lambda: <a runtime>")
        return runtime  # type: ignore[no-any-return]

    # FastAPI reads the annotations; this module's are strings (postponed evaluation) that
    # its globals cannot resolve
    agent_runtime.__annotations__ = {"connection": HTTPConnection, "return": AgentRuntime}
    agent_runtime.__module__ = __name__
    return agent_runtime


def __getattr__(name: str) -> Any:
    """``agent_runtime``, built once on first use (one object: ``dependency_overrides`` keys
    on it)."""
    if name == "agent_runtime":
        made = _made.get(name)
        if made is None:
            made = _made[name] = _make()
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
