"""Warm pings are answered by the toolkit, never by the app, and are not traffic."""

from __future__ import annotations

from functions.runtime.agent_handler import AgentHandler
from tests.conftest import LambdaContext, adapt_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of


def test_ping_is_answered_without_app_code_and_not_counted(agent: AgentHandler, logs: LogCollector) -> None:
    env = agent.environment
    requests, invocations = env.requests, env.invocations
    recent = len(env.recent)
    answer = agent({"warmstart": {"ping": True, "concurrency": 1, "hold_ms": 0}}, LambdaContext())
    pong = answer["warmstart"]
    assert pong["pong"] is True and pong["ready"] is True
    assert pong["environment_id"] == env.environment_id
    assert pong["init_type"] == agent.config.init_type.value
    # the cold start is the environment's first invocation, whichever test makes it
    first = invocations == 0 and agent.config.init_type.value == "on-demand"
    assert pong["cold_start"] is first
    assert agent({"warmstart": {"ping": True}}, None)["warmstart"]["cold_start"] is False
    assert "statusCode" not in answer
    # not traffic: no request counted, no latency sample, no request log line
    assert (env.requests, env.invocations, len(env.recent)) == (requests, invocations + 2, recent)
    assert [r.getMessage() for r in logs.records] == ["warm ping", "warm ping"]


def test_hold_keeps_the_environment_busy(agent: AgentHandler) -> None:
    answer = agent({"warmstart": {"ping": True, "concurrency": 4, "hold_ms": 75}}, LambdaContext())
    assert answer["warmstart"]["held_ms"] >= 75


def test_malformed_ping_is_a_bad_request(agent: AgentHandler, logs: LogCollector) -> None:
    response = agent({"warmstart": {"ping": True, "hold_ms": 60_000}}, LambdaContext())
    assert response["statusCode"] == 400
    assert "hold_ms" in body_of(response)["message"]
    assert logs.failures() == ["bad_request"]


def test_ping_marker_in_an_http_body_is_an_http_request(agent: AgentHandler) -> None:
    requests = agent.environment.requests
    event = adapt_event("http_api_v2.json", "POST", "/v1/intent", {"warmstart": {"ping": True}})
    response = agent(event, LambdaContext())
    assert "warmstart" not in response
    assert response["statusCode"] == 422  # served as a request: its body has no "text"
    assert agent.environment.requests == requests + 1


def test_ping_marker_in_a_header_is_an_http_request(agent: AgentHandler) -> None:
    event = adapt_event("function_url.json", "GET", "/healthz", headers={"warmstart": '{"ping": true}'})
    response = agent(event, LambdaContext())
    assert response["statusCode"] == 200 and body_of(response)["status"] == "ok"
    assert headers_of(response)["x-warmstart-path"] == "local"
