"""Malformed events get a JSON 4xx tagged bad_request, and the environment keeps serving."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from functions.runtime.agent_handler import AgentHandler
from functions.runtime.events import MAX_BODY_BYTES
from tests.conftest import LambdaContext, adapt_event, load_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of

ERROR_KEYS = {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}


def _intent(name: str = "http_api_v2.json", body: Any = None, **kw: Any) -> dict[str, Any]:
    return adapt_event(name, "POST", "/v1/intent", body, **kw)


def _with(event: dict[str, Any], **changes: Any) -> dict[str, Any]:
    event.update(changes)
    return event


CASES: dict[str, tuple[Callable[[], Any], int, str]] = {
    "null headers (HTTP API)": (lambda: _with(_intent(body={"text": "hi"}), headers=None), 400, "is null"),
    "null headers (ALB)": (lambda: _with(_intent("alb.json", {"text": "hi"}), headers=None), 400, "headers"),
    "non-string header value": (
        lambda: _with(_intent(body={"text": "hi"}), headers={"x-count": 3}), 400, "must be a string"),
    "body not JSON": (lambda: _intent(body="text=where+is+my+order"), 400, "not valid JSON"),
    "body not JSON (REST)": (lambda: _intent("rest_api_v1.json", "{oops"), 400, "not valid JSON"),
    "missing body": (lambda: _intent(), 422, "body is missing"),
    "empty object": (lambda: _intent(body={}), 422, "text"),
    "text not a string": (lambda: _intent(body={"text": 42}), 422, "text"),
    "blank text": (lambda: _intent(body={"text": "   "}), 422, "empty"),
    "invalid base64": (
        lambda: _with(_intent("http_api_v2_base64_body.json", {"text": "hi"}), body="not*base64!"),
        400, "not valid base64"),
    "body not a string": (lambda: _with(_intent(body={"text": "hi"}), body={"text": "hi"}), 400, "must be a string"),
    "unknown event shape": (lambda: {"hello": "world"}, 400, "unknown event shape"),
    "event not an object": (lambda: ["not", "an", "event"], 400, "unknown event shape"),
    "oversized text": (lambda: _intent(body={"text": "order " * 400}), 413, "limit is 2000"),
    "tool_ms negative": (lambda: _intent(body={"text": "hi", "tool_ms": -1}), 422, "tool_ms"),
    "tool_ms over the limit": (lambda: _intent(body={"text": "hi", "tool_ms": 10_001}), 422, "tool_ms"),
    "tool_ms not a number": (lambda: _intent(body={"text": "hi", "tool_ms": "5"}), 422, "tool_ms"),
    "oversized body": (lambda: _intent(body={"text": "x" * (MAX_BODY_BYTES + 10)}), 413, "exceeds"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gets_json_4xx_and_the_environment_keeps_serving(
    agent: AgentHandler, logs: LogCollector, case: str
) -> None:
    make, status, fragment = CASES[case]
    context = LambdaContext()
    # WHEN a malformed event arrives
    response = agent(make(), context)
    # THEN it gets a JSON error with the contract's fields, tagged bad_request
    assert response["statusCode"] == status, response
    body = body_of(response)
    assert set(body) == ERROR_KEYS
    assert body["error"] in ("bad_request", "too_large")
    assert fragment in body["message"]
    assert body["request_id"] == context.aws_request_id
    assert headers_of(response)["content-type"] == "application/json"
    assert logs.failures() == ["bad_request"]
    # AND the next good request is served normally
    good = agent(_intent(body={"text": "I want my money back"}), LambdaContext())
    assert good["statusCode"] == 200, good
    assert body_of(good)["intent"] == "refund_request"


def test_rest_api_null_headers_are_served(agent: AgentHandler) -> None:
    # API Gateway REST sends null headers for a request without any: that is valid input
    event = _with(adapt_event("rest_api_v1.json", "GET", "/healthz"), headers=None, multiValueHeaders=None)
    response = agent(event, None)
    assert response["statusCode"] == 200 and body_of(response)["status"] == "ok"


def test_valid_base64_body_is_decoded(agent: AgentHandler) -> None:
    event = _intent("http_api_v2_base64_body.json", {"text": "where is my package"})
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b'{"text": "where is my package"}'
    response = agent(event, None)
    assert response["statusCode"] == 200 and body_of(response)["intent"] == "check_order_status"


def test_malformed_event_of_an_unknown_source_answers_plain_json(agent: AgentHandler) -> None:
    response = agent(load_event("scheduled_event.json"), None)
    assert response["statusCode"] == 400 and headers_of(response)["x-warmstart-path"] == "local"
