"""What an agent's declaration says about its routes, read at synth in a separate interpreter.

The stack decides per agent whether it streams (a function URL with ``InvokeMode:
RESPONSE_STREAM`` on its alias ``live``) from the agent's own declaration, the ``Agent(...,
routes=[Route(..., stream=True)])`` in its handler module, never from its name or a config flag:
the declaration is where the route's author says it streams.

The handler module runs its init phase when imported (``handler = agent.lambda_handler()``), so
the synth never imports it itself (runtime code stays out of the CDK process): a child
interpreter (this one, isolated: ``-I``, the repository's code first on ``sys.path``) imports it,
reads every ``Agent`` it declares, prints one JSON line and leaves at once (``os._exit``, so the
on-demand init's background preload never runs to the end). The first-token SLA of each
streaming route is resolved there with the toolkit's own rule (``first_token_ms``, else
``sla_ms``, else `functions.runtime.admission.default_sla_ms` of its tier and the agent's
``sla_ms``), so the deploy and the run time agree. About 0.1 s per agent.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from functions.runtime.contract import environment as names
from infra.constructs.bundling import CHILD_SCRIPT_END, BundlingError

#: Run by ``python -I``: argv[1] is ``{"root", "module", "agent", "p0_sla_ms"}``; prints
#: ``{"ok": true, "declared": bool, "routes": [...]}`` or ``{"ok": false, "message": ...}``.
_READ_SCRIPT: Final = r'''
import importlib, json, os, sys
args = json.loads(sys.argv[1])
sys.path[:0] = [args["root"]]
try:
    module = importlib.import_module(args["module"])
    from functions.runtime.agent import Agent
    from functions.runtime.admission import default_sla_ms
    agents = [v for v in vars(module).values() if isinstance(v, Agent)]
    chosen = [a for a in agents if a.name == args["agent"]] or agents
    if len(chosen) > 1:
        out = {"ok": False, "message": "the module declares several agents (%s) and none is named %r"
               % (", ".join(a.name for a in chosen), args["agent"])}
    else:
        routes = []
        for agent in chosen:
            for r in agent.routes:
                sla = r.first_token_ms or r.sla_ms or default_sla_ms(r.tier, args["p0_sla_ms"])
                routes.append({"method": r.method, "path": r.path, "tier": r.tier,
                               "stream": r.stream, "first_token_sla_ms": sla if r.stream else None})
        out = {"ok": True, "declared": bool(chosen), "routes": routes}
except BaseException as exc:
    out = {"ok": False, "message": "%s: %s" % (type(exc).__name__, exc)}
''' + CHILD_SCRIPT_END


class DeclarationReadError(BundlingError):
    """The agent's handler module could not be imported to read its declaration."""


@dataclass(frozen=True)
class DeclaredRoute:
    """One route as the agent declares it (what the deploy needs of it).

    Attributes
    ----------
    method, path : str
        ``POST``, ``/v1/chat`` (the app's own path, without the agent's prefix).
    tier : str
        ``P0``, ``P1`` or ``P2``.
    stream : bool
        ``Route(..., stream=True)``.
    first_token_sla_ms : float or None
        Streaming routes: the first token's SLA from the request's arrival, ms; None otherwise.
    """

    method: str
    path: str
    tier: str
    stream: bool
    first_token_sla_ms: float | None = None

    @property
    def key(self) -> str:
        """``"POST /v1/chat"``."""
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class AgentDeclaration:
    """The routes one agent declares (empty when its handler module declares no ``Agent``).

    Attributes
    ----------
    agent : str
    routes : tuple of DeclaredRoute
    """

    agent: str
    routes: tuple[DeclaredRoute, ...] = ()

    @property
    def streaming_routes(self) -> tuple[DeclaredRoute, ...]:
        """The routes declared with ``stream=True``."""
        return tuple(r for r in self.routes if r.stream)

    @property
    def streams(self) -> bool:
        """True when at least one route streams: the agent gets a streaming function URL."""
        return bool(self.streaming_routes)

    @property
    def first_token_sla_ms(self) -> dict[str, float]:
        """``"METHOD /path"`` -> first-token SLA (ms) of each streaming route."""
        return {r.key: float(r.first_token_sla_ms) for r in self.streaming_routes
                if r.first_token_sla_ms is not None}

    @property
    def strictest_first_token_ms(self) -> float | None:
        """The smallest first-token SLA of the streaming routes, ms (None: none streams)."""
        return min(self.first_token_sla_ms.values(), default=None)


def read_declaration(handler: str, *, agent: str, code_root: Path, p0_sla_ms: float,
                     python: str | None = None, timeout_s: float = 60.0) -> AgentDeclaration:
    """Import the agent's handler module in a child interpreter and return its routes.

    Parameters
    ----------
    handler : str
        ``package.module.function`` (``functions.chat.handler.handler``).
    agent : str
        The ``cdk.json`` agent name: the declared ``Agent`` of that name is read (the module's
        only one otherwise).
    code_root : Path
        The folder the handler module's package is under (the repository root).
    p0_sla_ms : float
        The agent's ``sla_ms`` (``WARMSTART_SLA_MS``): the default SLA of its P0 routes, ms.
    python : str or None
        The interpreter; ``None``: this one (its site-packages, isolated from ``PYTHON*``).
    timeout_s : float
        Bound of the import, s.

    Returns
    -------
    AgentDeclaration
        With no routes when the module declares no ``Agent`` (a plain handler function).

    Raises
    ------
    DeclarationReadError
        The import failed or timed out, or the module declares several agents and none by
        that name; one line naming ``warmstart.agents.<agent>.handler``.
    """
    import json
    import subprocess
    import sys

    module = handler.rsplit(".", 1)[0]
    where = f"warmstart.agents.{agent}.handler"
    args = {"root": str(Path(code_root).resolve()), "module": module, "agent": agent,
            "p0_sla_ms": float(p0_sla_ms)}
    try:
        proc = subprocess.run([python or sys.executable, "-I", "-c", _READ_SCRIPT, json.dumps(args)],
                              capture_output=True, text=True, timeout=timeout_s, check=False,
                              env={"LANG": "C.UTF-8", names.ENV_AGENT_NAME: agent,
                                   names.ENV_SLA_MS: str(int(p0_sla_ms))},
                              cwd=str(Path(code_root).resolve()))
    except subprocess.TimeoutExpired:
        raise DeclarationReadError(
            f"{where}: importing {module} to read its routes did not finish within "
            f"{timeout_s:.0f} s; move slow work out of import time") from None
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise DeclarationReadError(
            f"{where}: reading the declaration of {module} gave no result (exit {proc.returncode}): "
            + proc.stderr.strip()[-500:].replace("\n", " ")) from None
    if not result["ok"]:
        raise DeclarationReadError(
            f"{where}: cannot read the routes of {module}: {result['message']}".replace("\n", " "))
    return AgentDeclaration(agent, tuple(
        DeclaredRoute(r["method"], r["path"], r["tier"], bool(r["stream"]), r["first_token_sla_ms"])
        for r in result["routes"]))
