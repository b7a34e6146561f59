"""The agents the benchmarks drive: handler module, external prefix, settings, one request per route.

Each agent is measured in its own process (its own execution environment, as on Lambda), with
the settings the deploy gives its function (`plan/API.md`: ``WARMSTART_AGENT_NAME``,
``WARMSTART_BASE_PATH``, ``POWERTOOLS_SERVICE_NAME`` and the agent's own variables). An agent
whose handler module is not in this checkout is skipped (`BenchAgent.present`).

Standard library only.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from functions.runtime.contract import environment as names

__all__ = ["AGENTS", "BenchAgent", "BenchRequest", "WarmAgent", "agent_named", "load_warm",
           "present_agents", "run_in_agent_process", "tool_stub"]

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BenchRequest:
    """One request of a benchmark: ``method`` and the app's own ``path`` (no prefix), a JSON
    ``body`` (None: no body), and ``needs_tool`` when the route calls the agent's downstream
    tool (the bench starts the tool stub for it)."""

    method: str
    path: str
    body: Mapping[str, Any] | None = None
    needs_tool: bool = False

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class BenchAgent:
    """An agent as the benchmarks see it.

    Attributes
    ----------
    name : str
        The agent's name (``cdk.json`` ``agents`` key).
    module : str
        Its handler module (``handler`` and ``agent`` attributes).
    base_path : str
        External prefix the gateway serves it under (``""``: the root agent).
    settings : Mapping[str, str]
        Agent-specific environment variables for a local run (the tool URL is added by the
        bench that starts the tool stub).
    requests : tuple[BenchRequest, ...]
        One request per declared route, each answered 200 by a warm environment.
    tool_setting : str | None
        The variable that names its downstream tool's URL.
    """

    name: str
    module: str
    base_path: str = ""
    settings: Mapping[str, str] = field(default_factory=dict)
    requests: tuple[BenchRequest, ...] = ()
    tool_setting: str | None = None

    def present(self) -> bool:
        """The handler module is in this checkout (found without importing it)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:  # its package is missing
            return False

    def environment(self, *, init_type: str, tool_url: str | None = None) -> dict[str, str]:
        """The variables the deploy sets for this agent's function, for a local process."""
        env = {
            "AWS_LAMBDA_INITIALIZATION_TYPE": init_type,
            names.ENV_AGENT_NAME: self.name,
            "POWERTOOLS_SERVICE_NAME": self.name,
            **self.settings,
        }
        if self.base_path:
            env[names.ENV_BASE_PATH] = self.base_path
        if self.tool_setting is not None:
            env[self.tool_setting] = tool_url or "http://127.0.0.1:9"  # discard port: never answered
        return env


INTENT = BenchAgent(
    "intent",
    "functions.agent.handler",
    requests=(
        BenchRequest("GET", "/healthz"),
        BenchRequest("GET", "/capabilities"),
        BenchRequest("GET", "/debug/resource"),
        BenchRequest("POST", "/v1/intent", {"text": "where is my order? it has not arrived"}),
        BenchRequest("POST", "/v1/report", {"texts": ["I want a refund", "where is my package"]}),
    ),
    settings={names.ENV_DEBUG_RESOURCE: "true"},
)

LOOKUP = BenchAgent(
    "lookup",
    "functions.lookup.handler",
    base_path="/lookup",
    requests=(
        BenchRequest("GET", "/healthz"),
        BenchRequest("GET", "/capabilities"),
        BenchRequest("POST", "/v1/lookup", {"order_id": "A-1001"}, needs_tool=True),
        BenchRequest("GET", "/v1/orders/A-1002", needs_tool=True),
    ),
    # no cache: every lookup calls the order service (the route's full work, a real HTTP call)
    settings={"LOOKUP_CACHE_TTL_S": "0"},
    tool_setting="LOOKUP_TOOL_URL",
)

#: Every agent of the project, the root agent first.
AGENTS: tuple[BenchAgent, ...] = (INTENT, LOOKUP)


def present_agents() -> list[BenchAgent]:
    """The agents whose handler module is in this checkout."""
    return [a for a in AGENTS if a.present()]


def agent_named(name: str) -> BenchAgent:
    """The agent called ``name``.

    Raises
    ------
    KeyError
        No such agent (the message lists the known ones).
    """
    for agent in AGENTS:
        if agent.name == name:
            return agent
    raise KeyError(f"unknown agent {name!r}; known: {', '.join(a.name for a in AGENTS)}")


def run_in_agent_process(
    agent: BenchAgent,
    module: str,
    args: Sequence[str],
    *,
    init_type: str = "provisioned-concurrency",
    tool_url: str | None = None,
) -> dict[str, Any]:
    """Run ``python -m module --child NAME ARGS --child-out FILE`` in a fresh process with the
    agent's deploy settings (its own execution environment) and return the JSON it wrote.

    Raises
    ------
    subprocess.CalledProcessError
        The child failed (its standard error is passed through).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMSTART_")}
    for other in AGENTS:
        if other.tool_setting is not None:
            env.pop(other.tool_setting, None)
    env.update(agent.environment(init_type=init_type, tool_url=tool_url))
    env.setdefault("ORT_DISABLE_TELEMETRY", "1")
    env["PYTHONPATH"] = str(REPO_ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([sys.executable, "-m", module, "--child", agent.name, *args,
                        "--child-out", str(out)],
                       cwd=REPO_ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())  # type: ignore[no-any-return]


@dataclass
class WarmAgent:
    """An agent loaded in this process: its handler module, the warm handler, and the plain
    baseline on the same app factory."""

    bench: BenchAgent
    module: Any
    handler: Any
    plain: Any

    def event(self, request: BenchRequest) -> dict[str, Any]:
        """An HTTP API v2 event (the real sample, adapted) for ``request``, prefix included."""
        from tests.conftest import adapt_event

        body = dict(request.body) if request.body is not None else None
        return adapt_event("http_api_v2.json", request.method, self.bench.base_path + request.path, body)


def load_warm(agent: BenchAgent, *, timeout_s: float = 300.0) -> WarmAgent:
    """Import the agent's handler module (its settings already in ``os.environ``), wait for its
    preload, and build the plain baseline: ``Mangum(app, lifespan="off")`` on an app built by
    the same factory with the handler's own `AgentRuntime` (the same loaded model).

    Raises
    ------
    RuntimeError
        The preload did not finish in ``timeout_s``.
    functions.runtime.preload.StageFailed
        A preload stage failed.
    """
    from mangum import Mangum

    from functions.runtime.agent import build_app

    module = importlib.import_module(agent.module)
    handler = module.handler
    if not handler.preload.wait_all(timeout_s):
        raise RuntimeError(f"{agent.name}: the handler's preload did not finish in {timeout_s:g} s")
    for stage in handler.preload.stage_names:
        handler.preload.result(stage)  # raises when a stage failed
    plain = Mangum(build_app(module.agent, handler.runtime), lifespan="off",
                   api_gateway_base_path=agent.base_path or "/")
    return WarmAgent(agent, module, handler, plain)


@contextlib.contextmanager
def tool_stub(needed: bool = True) -> Iterator[str | None]:
    """The lookup agent's downstream tool (`infra.local.tool_stub`) in its own process, so its
    CPU is not counted in the agent's thread time; yields its URL (None when not ``needed`` or
    not in this checkout) and stops it on exit.

    Raises
    ------
    RuntimeError
        The stub did not print its URL.
    """
    try:
        present = importlib.util.find_spec("infra.local.tool_stub") is not None
    except ModuleNotFoundError:
        present = False
    if not needed or not present:
        yield None
        return
    proc = subprocess.Popen([sys.executable, "-m", "infra.local.tool_stub", "--port", "0"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"https?://[^\s)]+", line)
        if found is None:
            raise RuntimeError(f"the tool stub did not print its URL (got {line!r})")
        yield found.group(0)
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
