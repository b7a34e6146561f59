"""The agent handler imported once per test session (real model, real ONNX inference).

The handler module declares the agent and does its init at import (``handler =
agent.lambda_handler()``, that is what it is for), so it is imported once, with the
environment the test process has, and its background preload is awaited. The fixture is the
`functions.runtime.agent.AgentHandler` (``agent(event, context)``, ``.preload``, ``.config``,
``.environment``, ``.runtime``, ``.admission``). Each test gets a fresh log collector and the
environment's counters as they stand (tests that need a fresh environment run the handler in a
subprocess).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from functions.runtime import telemetry
from functions.runtime.agent import AgentRuntime
from functions.runtime.agent_handler import AgentHandler


class LogCollector(logging.Handler):
    """Keeps the Powertools logger's records (their ``extra`` fields are attributes)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def failures(self) -> list[str]:
        return [r.failure for r in self.records if hasattr(r, "failure")]


@pytest.fixture(scope="session")
def agent() -> AgentHandler:
    """``functions.agent.handler.handler`` with its preload finished."""
    from functions.agent.handler import handler

    assert handler.preload.wait_all(180.0), "preload did not finish in 180 s"
    handler.preload.result("model")  # raises StageFailed with the cause if it failed
    return handler


@pytest.fixture(autouse=True)
def per_test_state(request: pytest.FixtureRequest) -> Iterator[None]:
    """No invocation record leaks between tests."""
    token = telemetry.set_current(None)
    yield
    telemetry.reset_current(token)


@pytest.fixture
def logs(agent: AgentHandler) -> Iterator[LogCollector]:
    """Records logged by the agent's Powertools logger during the test."""
    logger = logging.getLogger(agent.config.service_name)
    collector = LogCollector()
    logger.addHandler(collector)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield collector
    finally:
        logger.removeHandler(collector)
        logger.setLevel(previous)


def runtime_with(agent: AgentHandler, **config: Any) -> AgentRuntime:
    """The agent's runtime handle with some run-time config changed (e.g.
    ``debug_resource=True``), bound to the same environment, preload and admission."""
    return AgentRuntime(agent.agent, agent.config._replace(**config), agent.settings,
                        agent.environment, agent)


def headers_of(response: dict[str, Any]) -> dict[str, str]:
    """Response headers, lower-cased, whichever format the source uses."""
    if response.get("headers"):
        return {k.lower(): v for k, v in response["headers"].items()}
    return {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}


def timings_of(response: dict[str, Any]) -> dict[str, float]:
    """The ``Server-Timing`` entries of a response, name -> ms."""
    out = {}
    for part in headers_of(response)["server-timing"].split(","):
        name, _, dur = part.strip().partition(";dur=")
        out[name] = float(dur)
    return out


def body_of(response: dict[str, Any]) -> Any:
    """The JSON body of a response."""
    assert response.get("isBase64Encoded") is not True
    return json.loads(response["body"])
