"""``warmstart new NAME``: scaffold an agent and register it in ``cdk.json``.

Writes ``functions/NAME/`` (``__init__.py``, ``app.py`` with ``GET /healthz`` and one ``POST``
route, ``handler.py`` with the declaration), ``layers/NAME/requirements.txt`` (the agent's own
packages: none yet) and ``tests/agents/test_NAME.py``, and adds ``agents.NAME`` to the
``warmstart`` context of ``cdk.json`` (path prefix ``/NAME``, layers ``web`` and ``NAME``, no
model). The synth builds ``layers/NAME`` into the agent's function (not shipped while it lists
no package) and checks the handler imports from the function's code and layers alone. With no other edit the agent synthesizes (``make synth``), runs under
``warmstart local up`` (``http://127.0.0.1:PORT/NAME/...``) and its test runs in ``make test``.

Refused, with one line and exit 2: a name that is not a lower-case Python identifier, a Python
keyword, a name the toolkit uses (``runtime``, ...), a folder that exists (``functions/NAME``,
``layers/NAME``), an agent already in
``cdk.json``, or a ``cdk.json`` without a ``warmstart.agents`` map. Nothing is written then.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
from pathlib import Path
from typing import Any

from infra.commands.common import UsageError, command

#: Folder names under functions/ that are not agents (the toolkit, shared code).
RESERVED = frozenset({"runtime", "intent_model", "gpu_endpoint", "functions", "tests", "infra",
                      "warmers", "bench", "layers"})
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

APP = '''"""The {name} agent's FastAPI app (scaffolded by ``warmstart new``; make it yours).

Served behind Mangum by the warmstart toolkit: every route here is declared once in
``handler.py`` (tier, SLA, hooks); a route added here and not declared there fails the init
with a message naming it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from functions.runtime.agent import AgentRuntime


class AnswerRequest(BaseModel):
    """Body of ``POST /v1/answer``."""

    question: str


def create_app(runtime: AgentRuntime) -> FastAPI:
    """Build the app; ``runtime`` gives the agent's settings, level, capabilities, timings."""
    app = FastAPI(title="{name}")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {{"status": "ok", "agent": runtime.name,
                 "environment_id": runtime.environment.environment_id}}

    @app.post("/v1/answer")
    async def answer(body: AnswerRequest) -> dict[str, Any]:
        # call your model, tools or downstream services here
        return {{"answer": f"you asked: {{body.question}}", "degraded": False}}

    return app
'''

HANDLER = '''"""Lambda entry point of the {name} agent: ``functions.{name}.handler.handler``.

The declaration, once: the app factory, each route's tier and hooks. The toolkit owns the rest
(init phase, SnapStart hooks, warm pings, admission, degradation, telemetry).
"""

from __future__ import annotations

from typing import Any

from functions.runtime.agent import Agent, BadRequest, Route


def check_question(body: Any) -> dict[str, Any]:
    """Payload check of ``POST /v1/answer``, before any path runs (a 4xx, never overflowed)."""
    if not isinstance(body, dict) or not isinstance(body.get("question"), str) or not body["question"].strip():
        raise BadRequest('send {{"question": "..."}}', status=422)
    return {{"question": body["question"]}}


def degraded_answer(payload: dict[str, Any]) -> dict[str, Any]:
    """The cheaper answer when the full one cannot meet the SLA (marked degraded by the toolkit)."""
    return {{"answer": None, "partial": True, "message": "busy right now: retry shortly"}}


agent = Agent(
    "{name}",
    app="functions.{name}.app:create_app",
    routes=[
        Route("GET", "/healthz", tier="P1"),
        Route("POST", "/v1/answer", tier="P0", validate=check_question, degraded=degraded_answer),
    ],
)

handler = agent.lambda_handler()
'''

REQUIREMENTS = '''# The {name} agent's own packages, pinned (e.g. httpx==0.28.1), one a line; the web layer
# (layers/web/requirements.txt: fastapi, pydantic, mangum, powertools) is shipped already, and
# the Lambda runtime provides boto3.
# `make synth` installs these for the Lambda platform (manylinux, the agent's CPython) into the
# layer "{name}" (warmstart.agents.{name}.layers in cdk.json); a package the web layer holds too is
# shipped once. The synth imports functions/{name}/handler.py, its app and hooks with only the
# function's code and layers on sys.path, and fails naming a module that is missing here.
'''

TEST = '''"""The {name} agent (scaffolded by ``warmstart new``): declaration, routes, bad input."""

from __future__ import annotations

import json

from tests.conftest import LambdaContext, adapt_event


def test_the_declared_routes_match_the_app() -> None:
    from functions.{name}.handler import agent

    assert agent.check() == ["GET /healthz", "POST /v1/answer"]


def test_answers_and_refuses_bad_input() -> None:
    from functions.{name}.handler import handler

    assert handler.preload.wait_all(120.0)  # the on-demand init's background preload
    event = adapt_event("http_api_v2.json", "POST", "/v1/answer", {{"question": "hi"}})
    response = handler(event, LambdaContext())
    assert response["statusCode"] == 200, response
    assert json.loads(response["body"])["answer"] == "you asked: hi"
    assert response["headers"]["x-warmstart-path"] == "local"

    bad = adapt_event("http_api_v2.json", "POST", "/v1/answer", {{"q": 1}})
    response = handler(bad, LambdaContext())
    assert response["statusCode"] == 422
    assert json.loads(response["body"])["error"] == "bad_request"
'''

#: ``cdk.json`` entry of a scaffolded agent (infra/config.py fills in the other defaults).
def agent_entry(name: str) -> dict[str, Any]:
    """The ``agents.NAME`` entry ``warmstart new`` writes."""
    return {
        "handler": f"functions.{name}.handler.handler",
        "code": [f"functions/{name}"],
        "path_prefix": f"/{name}",
        "layers": ["web", name],
        "memory_mb": 512,
        "timeout_s": 30,
        "strategy": "none",
        "sla_ms": 2000,
    }


class ScaffoldError(ValueError):
    """The scaffold was refused (one line, nothing written)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the agent's name: lower case letters, digits, '_' "
                                     "(a Python identifier), e.g. billing_helper")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="project root holding cdk.json and functions/ (default: .)")


def check_name(name: str, root: Path, agents: dict[str, Any]) -> None:
    """Refuse a bad or taken name.

    Raises
    ------
    ScaffoldError
        With the one-line reason.
    """
    if not _NAME.match(name) or not name.isidentifier():
        raise ScaffoldError(f"{name!r} is not a valid agent name: use lower case letters, digits and "
                            "'_', starting with a letter (a Python identifier), e.g. billing_helper")
    if keyword.iskeyword(name) or name in RESERVED:
        raise ScaffoldError(f"{name!r} is reserved (a Python keyword or a toolkit folder): pick another name")
    if name in agents:
        raise ScaffoldError(f"agent {name!r} exists already in cdk.json (warmstart.agents.{name})")
    if (root / "functions" / name).exists():
        raise ScaffoldError(f"functions/{name} exists already: pick another name or remove it")
    if (root / "layers" / name).exists():
        raise ScaffoldError(f"layers/{name} exists already (a layer of that name): pick another name "
                            "or remove it")
    if (root / "tests" / "agents" / f"test_{name}.py").exists():
        raise ScaffoldError(f"tests/agents/test_{name}.py exists already: pick another name or remove it")


def insert_agent(text: str, name: str, entry: dict[str, Any]) -> str:
    """``cdk.json`` text with ``agents.NAME`` added, the rest of the file unchanged.

    The entry is inserted before the closing brace of the ``warmstart.agents`` object (found by
    parsing, so comments-free JSON of any layout works); the result is parsed again to check.

    Raises
    ------
    ScaffoldError
        No ``context.warmstart.agents`` object.
    """
    data = json.loads(text)
    agents = data.get("context", {}).get("warmstart", {}).get("agents")
    if not isinstance(agents, dict):
        raise ScaffoldError("cdk.json has no context.warmstart.agents map: add \"agents\": {} under "
                            "\"warmstart\" first (see README, 'Bring your own agent')")
    decoder = json.JSONDecoder()
    start = text.index('"agents"', text.index('"warmstart"'))
    brace = text.index("{", start)
    _, end = decoder.raw_decode(text, brace)  # end: just past the agents object's "}"
    close = end - 1
    body = text[brace + 1:close]
    indent = "        "
    match = re.search(r"\n([ \t]+)\"", body)
    if match:
        indent = match.group(1)
    rendered = json.dumps(entry, separators=(", ", ": "))
    sep = "," if body.strip() else ""
    closing_indent = indent[:-2] if len(indent) >= 2 else ""
    new_body = body.rstrip() + f"{sep}\n{indent}\"{name}\": {rendered}\n{closing_indent}"
    result = text[:brace + 1] + new_body + text[close:]
    if json.loads(result)["context"]["warmstart"]["agents"].get(name) != entry:  # pragma: no cover
        raise ScaffoldError("could not insert the agent into cdk.json")
    return result


def scaffold(name: str, root: Path) -> list[Path]:
    """Write the agent's files and register it; returns the paths written.

    Raises
    ------
    ScaffoldError
        As `check_name`; or ``root/cdk.json`` is missing or has no ``warmstart.agents``.
    """
    cdk_json = root / "cdk.json"
    if not cdk_json.is_file():
        raise ScaffoldError(f"{cdk_json} not found: run warmstart new from the project root (or --root)")
    text = cdk_json.read_text(encoding="utf-8")
    try:
        agents = json.loads(text).get("context", {}).get("warmstart", {}).get("agents")
    except ValueError as exc:
        raise ScaffoldError(f"cdk.json is not valid JSON ({exc}): fix it first") from None
    if not isinstance(agents, dict):
        raise ScaffoldError("cdk.json has no context.warmstart.agents map: add \"agents\": {} under "
                            "\"warmstart\" first (see README, 'Bring your own agent')")
    check_name(name, root, agents)
    updated = insert_agent(text, name, agent_entry(name))
    package = root / "functions" / name
    test = root / "tests" / "agents" / f"test_{name}.py"
    requirements = root / "layers" / name / "requirements.txt"
    files = {
        package / "__init__.py": f'"""The {name} agent (scaffolded by ``warmstart new``)."""\n',
        package / "app.py": APP.format(name=name),
        package / "handler.py": HANDLER.format(name=name),
        requirements: REQUIREMENTS.format(name=name),
        test: TEST.format(name=name),
    }
    package.mkdir(parents=True)
    requirements.parent.mkdir(parents=True)
    test.parent.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        path.write_text(content, encoding="utf-8")
    cdk_json.write_text(updated, encoding="utf-8")
    return [*files, cdk_json]


@command("warmstart new")
def run(args: argparse.Namespace) -> int:
    try:
        written = scaffold(args.name, args.root)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from exc
    root = args.root.resolve()
    for path in written:
        print(f"wrote {path.resolve().relative_to(root)}")
    print(f"next: make test (runs tests/agents/test_{args.name}.py), make synth, "
          f".venv/bin/warmstart local up -> http://127.0.0.1:PORT/{args.name}/healthz")
    return 0
