"""Failures a newcomer met with their own agent (issue 9's trial as a new user): each is loud,
names the agent and the field, and never passes for a capacity problem or a success."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from functions.runtime.agent import Agent, AgentRuntime, BadRequest, DeclarationError, Route
from tests.unit.agent.conftest import body_of, headers_of
from tests.unit.runtime.test_agent import (
    ENDPOINT,
    ERROR_KEYS,
    Built,
    SageMakerStandIn,
    assert_refused_by_check_and_a_prepaid_init,
    call,
    check_status_answer,
    env_for,
    orders_agent,
    orders_app,
    orders_routes,
    status_payload,
)


@pytest.fixture
def built() -> Iterator[Built]:
    b = Built()
    yield b
    b.close()


@pytest.fixture(scope="module")
def sagemaker() -> Iterator[SageMakerStandIn]:
    stand_in = SageMakerStandIn()
    with stand_in.server:
        yield stand_in


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def _slow_failing_app() -> FastAPI:
    time.sleep(0.3)  # the first request is admitted (and may degrade) while this runs
    raise RuntimeError("cannot connect to the vector database")


@pytest.mark.parametrize("path,body", [("/v1/status", {"order_id": "A-17"}), ("/healthz", None)])
def test_the_first_request_of_a_misconfigured_environment_is_a_500_not_degraded_or_shed(
    built: Built, path: str, body: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN an on-demand environment whose app factory fails after a while
    gate = built.gate(released=True)
    with caplog.at_level(logging.ERROR, logger="warmstart"):
        handler, _ = built.handler(orders_agent(gate, app=_slow_failing_app),
                                   env_for(WARMSTART_FINISH_PRELOAD="on"))
        # WHEN the very first request arrives while the web stage is still running
        first = call(handler, "POST" if body else "GET", path, body)
    # THEN it is the 500 agent_misconfigured every later request gets, never a 200 degraded
    # or a 503 that looks like a capacity problem
    assert first["statusCode"] == 500, first
    assert body_of(first)["error"] == "agent_misconfigured" and set(body_of(first)) == ERROR_KEYS
    assert "vector database" not in first["body"]  # no internal detail in the body
    # AND the cause is logged once with its traceback
    (record,) = [r for r in caplog.records if "vector database" in r.getMessage()]
    assert record.exc_info is not None and "agent 'orders'" in record.getMessage()


def test_a_failing_model_loader_is_logged_with_its_traceback(built: Built,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    gate = built.gate(released=True, fail=OSError("weights not found at /opt/model"))
    with caplog.at_level(logging.ERROR, logger="warmstart"):
        handler, _ = built.handler(orders_agent(gate), env_for())
        assert handler.preload.wait_all(30)
    (record,) = [r for r in caplog.records if "weights not found" in r.getMessage()]
    assert record.getMessage().startswith("agent 'orders': the model loader ")
    assert "OSError: weights not found at /opt/model" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is OSError


TYPO = "tests.unit.runtime.test_agent:lod"


def test_a_typo_in_the_model_loader_is_caught_by_check_and_by_a_prepaid_init(built: Built) -> None:
    agent = Agent("orders", app=orders_app, routes=orders_routes(), model=TYPO)
    expected = (f"agent 'orders': agent: model {TYPO!r}: 'tests.unit.runtime.test_agent' has no "
                "attribute 'lod'")
    assert_refused_by_check_and_a_prepaid_init(agent, expected)


def test_check_can_run_the_model_loader(built: Built) -> None:
    gate = built.gate(released=True, fail=OSError("weights not found"))
    with pytest.raises(DeclarationError, match=r"the model loader .* failed: OSError: weights not found"):
        orders_agent(gate).check(load_model=True)
    assert orders_agent(built.gate(released=True)).check(load_model=True)


@pytest.mark.parametrize("with_check", [True, False])
def test_a_model_route_overflows_only_with_an_overflow_answer_check(
    built: Built, sagemaker: SageMakerStandIn, with_check: bool,
) -> None:
    # GIVEN an overflow endpoint, a cold environment whose model cannot be ready in the SLA,
    # and a route with a payload, with or without a check of the endpoint's answer
    sagemaker.requests.clear()
    sagemaker.malformed = False
    hooks: dict[str, Any] = {"validate": status_payload}
    if with_check:
        hooks["overflow_answer"] = check_status_answer
    routes = [Route("POST", "/v1/status", tier="P0", needs_model=True, **hooks),
              *orders_routes()[1:]]
    agent = orders_agent(built.gate(), routes=routes, stage_p95_ms={"model": 10_000.0})
    handler, _ = built.handler(agent, env_for(WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                              WARMSTART_OVERFLOW_ENDPOINT_URL=sagemaker.server.url))
    # no route can overflow without a check: no overflow client, no boto3 prewarm stage
    assert handler.preload.has("overflow") is with_check
    if with_check:
        assert handler.preload.wait("overflow", 30)
    assert handler.preload.wait("web", 30)
    # WHEN a request arrives
    response = call(handler, "POST", "/v1/status", {"order_id": "B-2"})
    # THEN with the check it overflows; without it the endpoint (which may serve another
    # model) is never asked, and the request is shed inside its SLA
    if with_check:
        assert headers_of(response)["x-warmstart-path"] == "overflow" and len(sagemaker.requests) == 1
    else:
        assert headers_of(response)["x-warmstart-path"] == "shed" and sagemaker.requests == []
        assert handler.overflow is None


@pytest.mark.parametrize("hooks,logged", [
    ({"validate": lambda body: ["not", "a", "dict"]}, "the validate hook must return a dict"),
    ({"validate": status_payload, "downstream_ms": lambda payload: "fast"},
     "the downstream_ms hook must return a number of ms"),
])
def test_a_hook_that_breaks_its_contract_is_a_500_naming_the_hook(
    built: Built, hooks: dict[str, Any], logged: str, caplog: pytest.LogCaptureFixture,
) -> None:
    routes = [Route("POST", "/v1/status", tier="P0", needs_model=True, **hooks), *orders_routes()[1:]]
    handler, _ = built.handler(orders_agent(built.gate(released=True), routes=routes), env_for())
    assert handler.preload.wait_all(30)
    with caplog.at_level(logging.ERROR, logger="warmstart"):
        response = call(handler, "POST", "/v1/status", {"order_id": "A-17"})
    assert response["statusCode"] == 500 and body_of(response)["error"] == "internal_error"
    assert any(logged in r.getMessage() and "POST /v1/status" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["Orders", "orders-api", "1orders", "x" * 33])
def test_an_agent_name_cdk_json_would_refuse_is_refused_here_too(name: str) -> None:
    with pytest.raises(DeclarationError, match="agent name must be lower-case letters"):
        Agent(name, app=orders_app, routes=[Route("GET", "/healthz")])


def test_a_route_that_uses_the_model_without_needs_model_is_told_how_to_fix_it(built: Built) -> None:
    gate = built.gate()  # never released: the model is still loading

    def create_app(runtime: AgentRuntime) -> FastAPI:
        app = FastAPI()

        @app.get("/healthz")
        async def healthz() -> dict[str, Any]:
            return {"statuses": runtime.model()}

        return app

    handler, _ = built.handler(Agent("orders", app=create_app, routes=[Route("GET", "/healthz")],
                                     model=gate.load), env_for())
    assert handler.preload.wait("web", 30)
    with pytest.raises(Exception, match="needs_model=True"):
        handler.runtime.model()


def test_hooks_and_the_app_see_the_request_through_the_runtime(built: Built) -> None:
    """GIVEN a templated route whose validate hook takes the runtime, WHEN requests arrive,
    THEN the hook checks the path parameter before any path runs (a 4xx for a bad id), and the
    app reads the checked payload, the parameters and the SLA budget left from the runtime."""
    seen: dict[str, Any] = {}

    def check_order(body: Any, runtime: AgentRuntime) -> dict[str, Any]:
        order_id = runtime.path_params()["order_id"]
        if not order_id.startswith("A-"):
            raise BadRequest("order ids look like A-17", status=422)
        return {"order_id": order_id}

    def create_app(runtime: AgentRuntime) -> FastAPI:
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

        @app.get("/orders/{order_id}")
        async def order(order_id: str) -> dict[str, Any]:
            seen.update(payload=runtime.payload(), params=runtime.path_params(),
                        left_ms=runtime.remaining_ms())
            return {"order_id": order_id}

        return app

    agent = Agent("orders", app=create_app, routes=[
        Route("GET", "/orders/{order_id}", tier="P1", validate=check_order)])
    handler, _ = built.handler(agent, env_for())
    assert handler.preload.wait_all(30)
    assert call(handler, "GET", "/orders/A-17")["statusCode"] == 200
    assert seen["payload"] == {"order_id": "A-17"} and seen["params"] == {"order_id": "A-17"}
    assert 0 < seen["left_ms"] <= 5000.0  # P1: 2.5 x the 2,000 ms P0 SLA, less the time spent
    seen.clear()
    refused = call(handler, "GET", "/orders/zz-9")
    assert refused["statusCode"] == 422 and body_of(refused)["message"] == "order ids look like A-17"
    assert seen == {}  # refused before the app ran
    # outside an invocation there is no current request
    assert handler.runtime.path_params() == {} and handler.runtime.payload() is None
