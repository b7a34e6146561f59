"""The handler invoked in-process with every real event sample in tests/data/events/."""

from __future__ import annotations

import pytest

from functions.runtime.agent_handler import AgentHandler
from tests.conftest import EVENTS_DIR, HTTP_EVENT_FILES, LambdaContext, adapt_event, load_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of


def test_every_sample_file_is_covered() -> None:
    on_disk = {p.name for p in EVENTS_DIR.glob("*.json")}
    assert on_disk == set(HTTP_EVENT_FILES) | {"scheduled_event.json"}


@pytest.mark.parametrize("name", HTTP_EVENT_FILES)
def test_intent_through_every_http_source(agent: AgentHandler, name: str) -> None:
    event = adapt_event(name, "POST", "/v1/intent", {"text": "where is my order? it has not arrived"})
    response = agent(event, LambdaContext())
    assert response["statusCode"] == 200, response
    body = body_of(response)
    assert body["intent"] == "check_order_status"
    assert body["model"] == "all-MiniLM-L6-v2-int8" and body["degraded"] is False
    assert set(body["scores"]) == set(agent.preload.result("model").intents)
    assert body["score"] == max(body["scores"].values())
    headers = headers_of(response)
    assert headers["x-warmstart-path"] == "local"
    assert "infer;dur=" in headers["server-timing"]


@pytest.mark.parametrize("name", HTTP_EVENT_FILES)
@pytest.mark.parametrize(("path", "key"), [("/healthz", "status"), ("/capabilities", "routes")])
def test_get_routes_through_every_http_source(agent: AgentHandler, name: str, path: str, key: str) -> None:
    response = agent(adapt_event(name, "GET", path), LambdaContext())
    assert response["statusCode"] == 200, response
    assert key in body_of(response)
    assert headers_of(response)["x-warmstart-path"] == "local"


def test_capabilities_describe_routes_and_intents(agent: AgentHandler) -> None:
    body = body_of(agent(adapt_event("http_api_v2.json", "GET", "/capabilities"), None))
    routes = {(r["method"], r["path"]): r for r in body["routes"]}
    assert routes[("POST", "/v1/intent")]["tier"] == "P0"
    assert routes[("POST", "/v1/intent")]["sla_ms"] == agent.config.sla_ms
    assert body["intents"] == sorted(agent.preload.result("model").intents)
    assert body["model_state"] == "ready" and body["level"] == "L0"


@pytest.mark.parametrize("name", HTTP_EVENT_FILES)
def test_unmodified_samples_get_a_json_404(agent: AgentHandler, logs: LogCollector, name: str) -> None:
    # the samples' own paths (/my/path, /lambda, /path/to/resource, /) are not agent routes
    response = agent(load_event(name), LambdaContext())
    assert response["statusCode"] in (404, 405), response
    body = body_of(response)
    assert body["error"] in ("not_found", "method_not_allowed")
    assert set(body) == {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}
    assert logs.failures() == ["bad_request"]


def test_scheduled_event_is_not_a_ping_and_not_http(agent: AgentHandler, logs: LogCollector) -> None:
    requests_before = agent.environment.requests
    context = LambdaContext()
    response = agent(load_event("scheduled_event.json"), context)
    assert response["statusCode"] == 400
    body = body_of(response)
    assert body["error"] == "bad_request" and body["request_id"] == context.aws_request_id
    assert "unknown event shape" in body["message"]
    assert "warmstart" not in response
    assert agent.environment.requests == requests_before + 1
    assert logs.failures() == ["bad_request"]


def test_debug_resource_follows_config(agent: AgentHandler) -> None:
    response = agent(adapt_event("http_api_v2.json", "GET", "/debug/resource"), None)
    if agent.config.debug_resource:
        assert response["statusCode"] == 200
        assert body_of(response)["environment_id"] == agent.environment.environment_id
    else:
        assert response["statusCode"] == 404
        assert body_of(response)["error"] == "not_found"


def test_recent_latencies_are_recorded(agent: AgentHandler) -> None:
    agent(adapt_event("http_api_v2.json", "GET", "/healthz"), None)
    last = agent.environment.recent_latencies()[-1]
    assert last["route"] == "GET /healthz" and last["status"] == 200 and last["path"] == "local"
    assert last["duration_ms"] > 0


def test_tool_ms_is_waited_and_reported_in_server_timing(agent: AgentHandler) -> None:
    # GIVEN a request asking for a 60 ms simulated tool call (what `warmstart replay` sends)
    event = adapt_event("http_api_v2.json", "POST", "/v1/intent",
                        {"text": "where is my parcel", "tool_ms": 60})
    # WHEN it is served locally
    response = agent(event, LambdaContext())
    # THEN the answer is the normal one and Server-Timing shows the tool call took >= 60 ms
    assert response["statusCode"] == 200, response
    assert body_of(response)["intent"] == "check_order_status"
    timing = headers_of(response)["server-timing"]
    tool = [p for p in timing.split(", ") if p.startswith("tool;dur=")]
    assert tool, timing
    assert float(tool[0].split("=")[1]) >= 60.0


def test_report_counts_intents_of_a_batch(agent: AgentHandler) -> None:
    # GIVEN a batch of three messages for the P2 report route
    texts = ["where is my parcel", "has my order shipped yet", "I want my money back"]
    event = adapt_event("http_api_v2.json", "POST", "/v1/report", {"texts": texts})
    # WHEN it is served at L0
    response = agent(event, LambdaContext())
    # THEN every message is routed and the counts add up
    assert response["statusCode"] == 200, response
    body = body_of(response)
    assert body["count"] == 3 and sum(body["by_intent"].values()) == 3
    assert [item["intent"] for item in body["items"]] == [
        "check_order_status", "check_order_status", "refund_request"]


@pytest.mark.parametrize("payload, status", [
    ({"texts": []}, 422),
    ({"texts": ["ok"] * 51}, 422),
    ({"texts": ["fine", "   "]}, 422),
    ({"texts": "not a list"}, 422),
    ("{not json", 400),
])
def test_report_bad_input_is_a_4xx_and_the_environment_keeps_serving(
        agent: AgentHandler, payload: object, status: int) -> None:
    event = adapt_event("http_api_v2.json", "POST", "/v1/report", payload)
    response = agent(event, LambdaContext())
    assert response["statusCode"] == status, response
    assert body_of(response)["error"] == "bad_request"
    good = agent(adapt_event("http_api_v2.json", "POST", "/v1/report",
                                     {"texts": ["hello there"]}), LambdaContext())
    assert good["statusCode"] == 200, good
