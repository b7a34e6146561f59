"""The FastAPI app on its own (plain Mangum, same loaded model as the handler)."""

from __future__ import annotations

import pytest
from mangum import Mangum

from functions.agent import app as agent_app
from functions.intent_model import answers
from functions.intent_model import model as intent_model
from functions.runtime.agent_handler import AgentHandler
from tests.conftest import adapt_event
from tests.unit.agent.conftest import body_of, runtime_with


def _adapter(agent: AgentHandler, *, debug: bool) -> Mangum:
    app = agent_app.create_app(runtime_with(agent, debug_resource=debug))
    return Mangum(app, lifespan="off")


def test_text_limit_agrees_with_the_model() -> None:
    assert agent_app.MAX_TEXT_CHARS == intent_model.MAX_TEXT_CHARS == answers.MAX_TEXT_CHARS
    assert agent_app.MODEL_NAME == answers.MODEL_NAME == intent_model.MODEL_ID


def test_the_app_matches_the_declaration(agent: AgentHandler) -> None:
    assert sorted(agent.agent.check()) == sorted(f"{r.method} {r.path}" for r in agent.agent.routes)


def test_debug_resource_is_404_unless_enabled(agent: AgentHandler) -> None:
    event = adapt_event("http_api_v2.json", "GET", "/debug/resource")
    off = _adapter(agent, debug=False)(event, None)
    assert off["statusCode"] == 404 and body_of(off)["error"] == "not_found"
    on = _adapter(agent, debug=True)(adapt_event("http_api_v2.json", "GET", "/debug/resource"), None)
    assert on["statusCode"] == 200
    body = body_of(on)
    assert body["agent"] == "intent"
    assert body["environment_id"] == agent.environment.environment_id
    assert body["init_type"] == agent.config.init_type.value
    assert body["init_duration_ms"] == pytest.approx(agent.environment.init_duration_ms)
    assert body["model_state"] == "ready" and body["model_load_ms"] > 0
    assert body["resources"] == {"toolkit": "ready", "web": "ready", "telemetry": "ready", "model": "ready"}
    assert body["degradation_level"] == "L0"
    assert isinstance(body["recent_latencies"], list)


def test_debug_route_listed_only_when_enabled(agent: AgentHandler) -> None:
    def paths(debug: bool) -> set[str]:
        response = _adapter(agent, debug=debug)(adapt_event("alb.json", "GET", "/capabilities"), None)
        return {r["path"] for r in body_of(response)["routes"]}

    assert "/debug/resource" not in paths(False)
    assert "/debug/resource" in paths(True)


def test_method_not_allowed_is_json(agent: AgentHandler) -> None:
    response = _adapter(agent, debug=False)(adapt_event("http_api_v2.json", "GET", "/v1/intent"), None)
    assert response["statusCode"] == 405 and body_of(response)["error"] == "method_not_allowed"
