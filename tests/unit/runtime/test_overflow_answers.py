"""Overflow answers are checked before a client sees them (issue 13, item 3).

A real HTTP server speaks the SageMaker runtime contract as the GPU endpoint, through the real
boto3 client the toolkit builds; the agent is the reference intent agent's declaration (its
app, its hooks) with a model loader that never finishes, so every intent request overflows.
An answer of 20 MB with extra fields, one naming an intent the agent does not know, one with a
non-finite score: each is refused (``model_error``) and the request degrades. A good answer
with extra fields reaches the client with the contract's fields only.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from functions.agent import hooks
from functions.gpu_endpoint.server import BackgroundServer
from functions.intent_model.answers import MODEL_NAME
from functions.runtime.agent import Agent, Route
from functions.runtime.agent_handler import AgentHandler
from functions.runtime.overflow import MAX_ANSWER_BYTES, OverflowModelError, checked
from tests.conftest import LambdaContext, adapt_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of

ENDPOINT = "intent-overflow"
CONTRACT = {"intent", "score", "scores", "degraded", "model"}
GOOD = {"intent": "refund_request", "score": 0.9, "scores": {"refund_request": 0.9}, "degraded": False,
        "model": MODEL_NAME}


class Endpoint:
    """The GPU endpoint stand-in: answers ``POST /endpoints/{name}/invocations`` with whatever
    body the test sets (bytes, as the container would send them)."""

    def __init__(self) -> None:
        self.answer = json.dumps(GOOD).encode()
        self.calls = 0
        app = FastAPI()

        @app.post("/endpoints/{name}/invocations")
        async def invoke(name: str, request: Request) -> Response:
            await request.body()
            self.calls += 1
            return Response(self.answer, media_type="application/json",
                            headers={"x-Amzn-Invoked-Production-Variant": "AllTraffic"})

        self.server = BackgroundServer(app)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    stand_in = Endpoint()
    with stand_in.server:
        yield stand_in


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # boto3 signs its calls (SigV4)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture(scope="module")
def cold(endpoint: Endpoint) -> Iterator[tuple[AgentHandler, LogCollector]]:
    """An on-demand environment of the intent agent whose model never loads, overflowing to
    the stand-in; its web stack and overflow client are loaded."""
    never = threading.Event()

    def load_model() -> Any:
        never.wait(60)
        raise RuntimeError("the test's model never loads")

    base = "functions.agent.hooks"
    agent = Agent("intent", app="functions.agent.app:create_app", model=load_model, routes=[
        Route("POST", "/v1/intent", tier="P0", needs_model=True, validate=f"{base}:intent_payload",
              degraded=f"{base}:intent_degraded", overflow_answer=f"{base}:intent_overflow_answer",
              downstream_ms=f"{base}:intent_downstream_ms"),
        Route("POST", "/v1/report", tier="P2", needs_model=True),
        Route("GET", "/capabilities", tier="P1"),
        Route("GET", "/healthz", tier="P1"),
        Route("GET", "/debug/resource", tier="P2", name="debug_resource"),
    ], stage_p95_ms={"model": 60_000.0})
    service = f"overflow-answers-{uuid.uuid4().hex[:6]}"
    collector = LogCollector()
    logging.getLogger(service).addHandler(collector)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        handler = agent.lambda_handler(env={
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand", "WARMSTART_SLA_MS": "3000",
            "WARMSTART_FINISH_PRELOAD": "off", "AWS_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": service, "WARMSTART_OVERFLOW_ENDPOINT_NAME": ENDPOINT,
            "WARMSTART_OVERFLOW_ENDPOINT_URL": endpoint.server.url})
        assert handler.preload.wait("telemetry", 60) and handler.overflow is not None
        yield handler, collector
    never.set()  # the loader raises: the stage fails, the environment is done with
    handler.preload.wait_all(30)
    logging.getLogger(service).removeHandler(collector)


def ask(handler: AgentHandler) -> dict[str, Any]:
    return handler(adapt_event("http_api_v2.json", "POST", "/v1/intent",
                               {"text": "I want my money back"}), LambdaContext())


def test_a_good_answer_reaches_the_client_with_the_contracts_fields_only(
        cold: tuple[AgentHandler, LogCollector], endpoint: Endpoint) -> None:
    handler, _ = cold
    endpoint.answer = json.dumps({**GOOD, "debug": {"gpu": "a10g"}, "trace": "x" * 1000}).encode()
    response = ask(handler)
    assert response["statusCode"] == 200, response
    assert headers_of(response)["x-warmstart-path"] == "overflow"
    assert body_of(response) == GOOD  # the unknown fields were dropped by the rule
    assert set(body_of(response)) == CONTRACT


@pytest.mark.parametrize("case", ["20 MB with extra fields", "unknown intent", "NaN score",
                                  "huge model name", "not JSON"])
def test_a_refused_answer_is_model_error_and_the_request_degrades(
        cold: tuple[AgentHandler, LogCollector], endpoint: Endpoint, case: str) -> None:
    handler, logs = cold
    endpoint.answer = {
        "20 MB with extra fields": json.dumps({**GOOD, "padding": "x" * (20 * 2**20),
                                               "extra": [1, 2, 3]}).encode(),
        "unknown intent": json.dumps({**GOOD, "intent": "launch_rocket",
                                      "scores": {"launch_rocket": 0.99}}).encode(),
        "NaN score": b'{"intent": "refund_request", "score": NaN, "scores": {}, "degraded": false}',
        "huge model name": json.dumps({**GOOD, "model": "m" * 10_000}).encode(),
        "not JSON": b"<html>502</html>",
    }[case]
    calls = endpoint.calls
    logs.records.clear()
    assert handler.overflow is not None
    handler.overflow.breaker.record_success()  # each case on a closed breaker (3 failures open it)
    # WHEN the endpoint answers it
    response = ask(handler)
    # THEN the endpoint was asked, the answer refused (model_error), and the request degraded:
    # the lexical answer, never the endpoint's body
    assert endpoint.calls == calls + 1
    assert response["statusCode"] == 200, response
    assert headers_of(response)["x-warmstart-path"] == "degraded"
    body = body_of(response)
    assert body["degraded"] is True and body["intent"] in {*hooks.intents(), "unknown"}
    assert "padding" not in body and "launch_rocket" not in response["body"]
    assert len(response["body"]) < 10_000
    assert logs.failures() == ["model_error"]


def test_the_framework_check_bounds_any_routes_answer() -> None:
    # a route's own check that passes everything through: the framework still refuses what
    # cannot be sent (too big for Lambda's response, NaN, non-JSON types)
    passthrough = checked(lambda answer: answer)
    assert passthrough({"a": 1}) == {"a": 1}
    for bad, message in [({"a": "x" * MAX_ANSWER_BYTES}, "Lambda returns at most"),
                         ({"a": float("nan")}, "not plain JSON"),
                         ({"a": {1, 2}}, "not plain JSON")]:
        with pytest.raises(OverflowModelError, match=message) as info:
            passthrough(bad)
        assert info.value.tag == "model_error"
