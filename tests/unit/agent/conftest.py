"""The agent handler imported once per test session (real model, real ONNX inference).

The handler module does its init at import (that is what it is for), so it is imported once,
with the environment the test process has, and its background preload is awaited. Each test
gets a fresh log collector and the environment's counters as they stand (``ExecutionEnvironment``
state is per process; tests that need a fresh environment run the handler in a subprocess).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from functions.runtime import telemetry


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
def agent() -> ModuleType:
    """``functions.agent.handler`` with its preload finished."""
    import functions.agent.handler as handler_module

    assert handler_module.PRELOAD.wait_all(180.0), "preload did not finish in 180 s"
    handler_module.PRELOAD.result("model")  # raises StageFailed with the cause if it failed
    return handler_module


@pytest.fixture(autouse=True)
def per_test_state(request: pytest.FixtureRequest) -> Iterator[None]:
    """No invocation record leaks between tests."""
    token = telemetry.set_current(None)
    yield
    telemetry.reset_current(token)


@pytest.fixture
def logs(agent: ModuleType) -> Iterator[LogCollector]:
    """Records logged by the agent's Powertools logger during the test."""
    logger = logging.getLogger(agent.CONFIG.service_name)
    collector = LogCollector()
    logger.addHandler(collector)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield collector
    finally:
        logger.removeHandler(collector)
        logger.setLevel(previous)


def headers_of(response: dict[str, Any]) -> dict[str, str]:
    """Response headers, lower-cased, whichever format the source uses."""
    if response.get("headers"):
        return {k.lower(): v for k, v in response["headers"].items()}
    return {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}


def body_of(response: dict[str, Any]) -> Any:
    """The JSON body of a response."""
    assert response.get("isBase64Encoded") is not True
    return json.loads(response["body"])
