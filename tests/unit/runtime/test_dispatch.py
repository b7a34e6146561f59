"""The dispatcher with a real Mangum + FastAPI app and a controllable model stage."""

from __future__ import annotations

import io
import json
import math
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from mangum import Mangum

from functions.runtime.config import InitType, RuntimeConfig
from functions.runtime.dispatch import Dispatcher, on_demand_path, readiness_path
from functions.runtime.errors import FailureTag
from functions.runtime.events import parse_http_event
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.preload import Preloader, Stage
from functions.runtime.routes import RouteRegistry, RouteSpec
from functions.runtime.telemetry import Telemetry, current_invocation
from tests.conftest import LambdaContext, adapt_event


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


class Harness:
    """A dispatcher whose model stage waits for ``release`` (or fails)."""

    def __init__(self, *, fail_model: bool = False, sla_ms: float = 2000.0,
                 selector: Any = readiness_path) -> None:
        self.release = threading.Event()
        self.log = io.StringIO()
        config = RuntimeConfig(sla_ms=sla_ms, service_name=f"dispatch-{uuid.uuid4().hex[:8]}")
        self.env = ExecutionEnvironment(InitType.ON_DEMAND, _clock_ms())

        def web() -> Mangum:
            app = FastAPI()

            @app.get("/healthz")
            async def healthz() -> dict[str, str]:
                return {"status": "ok"}

            @app.post("/v1/intent")
            async def intent() -> dict[str, Any]:
                record = current_invocation()
                assert record is not None
                record.timings_ms["infer"] = 1.0
                return {"intent": self.preload.result("model")}

            return Mangum(app, lifespan="off")

        def model() -> str:
            self.release.wait(30)
            if fail_model:
                raise OSError("model.onnx is corrupt")
            return "check_order_status"

        self.preload = Preloader([Stage("web", web), Stage("model", model)], self.env, _clock_ms)
        routes = RouteRegistry(
            [RouteSpec("intent", "POST", "/v1/intent", "P0", needs_model=True),
             RouteSpec("healthz", "GET", "/healthz", "P1")]
        )
        self.dispatcher = Dispatcher(
            config=config, environment=self.env, preload=self.preload, routes=routes,
            telemetry=Telemetry(config, stream=self.log),
            select_path=lambda req, route, budget: selector(self.preload, req, route, budget),
        )
        self.env.finish_init(_clock_ms())
        self.preload.start()

    def call(self, event: Any, context: Any = None) -> dict[str, Any]:
        return self.dispatcher.handle(event, context or LambdaContext())

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.getvalue().splitlines()]


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.release.set()
    h.preload.wait_all(30)


def _intent() -> dict[str, Any]:
    return adapt_event("http_api_v2.json", "POST", "/v1/intent", {"text": "where is my order"})


def test_routes_without_the_model_are_served_while_it_loads(harness: Harness) -> None:
    response = harness.call(adapt_event("http_api_v2.json", "GET", "/healthz"))
    assert response["statusCode"] == 200
    assert response["headers"]["x-warmstart-path"] == "local"
    assert "init;dur=" in response["headers"]["server-timing"]  # the cold start's init
    assert not harness.preload.done("model")


def test_model_route_waits_within_its_budget_then_sheds_with_retry_after(harness: Harness) -> None:
    # GIVEN a request whose SLA budget is almost spent on arrival
    event = _intent()
    event["requestContext"]["timeEpoch"] -= 1950  # 1.95 s of the 2 s SLA spent queueing
    response = harness.call(event)
    # THEN it waited at most the remaining budget and is shed with Retry-After
    assert response["statusCode"] == 503
    body = json.loads(response["body"])
    assert body["error"] == "not_ready" and body["retry_after_s"] == 1
    assert body["estimated_recovery_at"].endswith("Z")
    headers = response["headers"]
    assert headers["x-warmstart-path"] == "shed" and headers["retry-after"] == "1"
    assert "model;dur=" in headers["server-timing"] and "queue;dur=" in headers["server-timing"]
    (line,) = [x for x in harness.log_lines() if x.get("failure")]
    assert line["failure"] == FailureTag.TIMEOUT_RESOURCE and line["path"] == "shed"


def test_model_route_is_served_once_the_model_loads_during_the_wait(harness: Harness) -> None:
    threading.Timer(0.2, harness.release.set).start()
    response = harness.call(_intent())
    assert response["statusCode"] == 200, response
    assert json.loads(response["body"]) == {"intent": "check_order_status"}
    timing = response["headers"]["server-timing"]
    assert "model;dur=" in timing and "infer;dur=1.0" in timing


def test_budget_spent_before_arrival_is_shed_at_once(harness: Harness) -> None:
    event = _intent()
    event["requestContext"]["timeEpoch"] -= 5000
    response = harness.call(event)
    assert response["statusCode"] == 503
    assert json.loads(response["body"])["error"] == "budget_exhausted"
    assert "model;dur=" not in response["headers"]["server-timing"]  # no wait for the model


def test_failed_model_sheds_with_model_error_and_keeps_serving() -> None:
    h = Harness(fail_model=True)
    h.release.set()
    h.preload.wait_all(30)
    response = h.call(_intent())
    assert response["statusCode"] == 503
    assert json.loads(response["body"])["error"] == "model_failed"
    assert [x["failure"] for x in h.log_lines() if "failure" in x] == [FailureTag.MODEL_ERROR]
    assert h.call(adapt_event("alb.json", "GET", "/healthz"))["statusCode"] == 200


def test_ping_on_a_loading_environment_waits_for_the_preload(harness: Harness) -> None:
    threading.Timer(0.2, harness.release.set).start()
    answer = harness.call({"warmstart": {"ping": True, "hold_ms": 10}})
    pong = answer["warmstart"]
    assert pong["cold_start"] is True and pong["ready"] is True
    assert pong["held_ms"] >= 150
    assert harness.env.requests == 0


def test_ping_wait_is_bounded_by_the_invocation_time_left(harness: Harness) -> None:
    # 0.5 s left, 0.25 s safety margin: the ping returns while the model still loads (the model
    # stage only finishes when the fixture releases it)
    answer = harness.call({"warmstart": {"ping": True}}, LambdaContext(timeout_s=0.5))
    assert answer["warmstart"]["ready"] is False
    assert not harness.preload.done("model")


# -- WARMSTART_ADMISSION=off: the plain on-demand baseline -------------------------------------


def test_on_demand_baseline_waits_past_the_sla_bounded_by_the_invocation() -> None:
    """GIVEN the baseline selector and a request whose SLA is spent on arrival, WHEN the model
    becomes ready 0.3 s later, THEN the request waited for it and is answered locally (never
    shed for its budget); with less invocation time left than the load, it is a 503
    ``not_ready`` once the invocation's time is up."""
    h = Harness(selector=on_demand_path)
    try:
        event = _intent()
        event["requestContext"]["timeEpoch"] -= 5000  # the SLA is long gone
        threading.Timer(0.3, h.release.set).start()
        response = h.call(event)
        assert response["statusCode"] == 200, response
        assert response["headers"]["x-warmstart-path"] == "local"
        assert "model;dur=" in response["headers"]["server-timing"]
    finally:
        h.release.set()
        h.preload.wait_all(30)

    h = Harness(selector=on_demand_path)
    try:
        # 0.6 s left in the invocation, less the dispatcher's margin: the wait stops there
        response = h.call(_intent(), LambdaContext(timeout_s=0.6))
        assert response["statusCode"] == 503
        assert json.loads(response["body"])["error"] == "not_ready"
    finally:
        h.release.set()
        h.preload.wait_all(30)


def test_on_demand_baseline_choices() -> None:
    h = Harness(fail_model=True, selector=on_demand_path)
    routes = h.dispatcher.routes
    intent = routes.match("POST", "/v1/intent")
    health = routes.match("GET", "/healthz")
    request = parse_http_event(_intent())
    choice = on_demand_path(h.preload, request, intent, -100.0)
    assert (choice.path, choice.reason, choice.wait_ms) == ("local", "model_loading", math.inf)
    assert on_demand_path(h.preload, request, health, -100.0).reason == "no_model_needed"
    h.release.set()
    h.preload.wait_all(30)
    failed = on_demand_path(h.preload, request, intent, 500.0)
    assert (failed.path, failed.reason, failed.tag) == ("shed", "model_failed",
                                                        FailureTag.MODEL_ERROR)
