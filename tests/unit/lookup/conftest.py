"""The lookup agent under test: the real tool stub (real HTTP, real waiting) and real handlers.

One `ToolStub` serves the whole session (starting and stopping one costs up to its 0.5 s poll
interval); it is reset before every test, and so is the agent's per-environment state (its
answer cache and tool latencies). Handlers come from the real declaration,
``agent.lambda_handler(env={...})``, with a provisioned-concurrency init (the web stack is
loaded before the handler is returned, so no test races the background preload).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import pytest

from functions.lookup import tool
from infra.local.tool_stub import ToolStub
from tests.conftest import LambdaContext, adapt_event


class Answer(NamedTuple):
    """A handler's response, decoded."""

    status: int
    headers: dict[str, str]
    body: Any

    def timing(self) -> dict[str, float]:
        """``Server-Timing`` as ``{name: dur}``."""
        out: dict[str, float] = {}
        for entry in filter(None, (e.strip() for e in self.headers.get("server-timing", "").split(","))):
            name, _, dur = entry.partition(";dur=")
            out[name] = float(dur or 0.0)
        return out


def decode(response: Mapping[str, Any]) -> Answer:
    """Status, lower-cased headers and JSON body of a Lambda proxy response (any source)."""
    if response.get("headers"):
        headers = {k.lower(): v for k, v in response["headers"].items()}
    else:
        headers = {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}
    assert response.get("isBase64Encoded") is not True
    return Answer(int(response["statusCode"]), headers, json.loads(response["body"]))


@pytest.fixture(scope="session", autouse=True)
def imported_handler_settled() -> None:
    """Importing ``functions.lookup.handler`` runs its own init (on-demand, ``os.environ``):
    wait for that background preload once, so it cannot reconfigure the state mid-test."""
    from functions.lookup import handler as module

    assert module.handler.preload.wait_all(60.0), "the import-time preload did not finish"


@pytest.fixture(scope="session")
def stub() -> Iterator[ToolStub]:
    server = ToolStub().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fresh_state(stub: ToolStub) -> Iterator[None]:
    """An empty answer cache and latency window, and a stub answering normally at once."""
    stub.reset()
    tool.reset_state()
    yield
    stub.reset()
    tool.reset_state()


Handler = Callable[[Mapping[str, Any]], Any]


@pytest.fixture
def make_handler(stub: ToolStub) -> Callable[..., Any]:
    """``make_handler(**env)``: the real handler for the lookup agent, the stub as its tool."""
    from functions.lookup.handler import agent

    def make(*, init_type: str = "provisioned-concurrency", **env: str) -> Any:
        settings = {"AWS_LAMBDA_INITIALIZATION_TYPE": init_type, "LOOKUP_TOOL_URL": stub.url,
                    "POWERTOOLS_SERVICE_NAME": "lookup", **env}
        return agent.lambda_handler(env={k: v for k, v in settings.items() if v is not None})

    return make


def call(handler: Any, method: str, path: str, body: Any = None, *,
         sample: str = "http_api_v2.json") -> Answer:
    """Invoke ``handler`` with a real event sample aimed at ``method path``."""
    return decode(handler(adapt_event(sample, method, path, body), LambdaContext()))


def lookup(handler: Any, order_id: Any, *, sample: str = "http_api_v2.json",
           path: str = "/v1/lookup") -> Answer:
    """``POST /v1/lookup {"order_id": order_id}``."""
    return call(handler, "POST", path, {"order_id": order_id}, sample=sample)


def failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The failure tags the toolkit logged (its Powertools logger, named after the service)."""
    return [r.failure for r in caplog.records if r.name == "lookup" and hasattr(r, "failure")]
