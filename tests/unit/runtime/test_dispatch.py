"""The dispatcher with a real Mangum + FastAPI app and a controllable model stage.

Every declared route goes through admission (`functions.runtime.admission.state.Admission`):
here with no hooks (no payload check, no degraded answer, no overflow), so a model route is
served locally, waiting for the model as far as its SLA allows, or shed; and under the off
baseline (``WARMSTART_ADMISSION=off``, `functions.runtime.admission.BASELINE_POLICY`), where it
waits for as long as the invocation lasts.
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from functions.runtime.admission import BASELINE_POLICY, HANDLER_POLICY, AdmissionPolicy
from functions.runtime.admission.state import Admission
from functions.runtime.asgi import Adapter, make_adapter
from functions.runtime.config import FinishPreload, InitType, RuntimeConfig
from functions.runtime.contract.levels import Level
from functions.runtime.dispatch import Dispatcher
from functions.runtime.errors import FailureTag
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.preload import Preloader, Stage
from functions.runtime.routes import RouteRegistry, RouteSpec
from functions.runtime.telemetry import Telemetry, current_invocation
from tests.conftest import LambdaContext, adapt_event
from tests.unit.agent.conftest import timings_of

#: Stage seeds that make a cold model route fit a 2 s SLA (web 50 ms, model 300 ms).
FAST_STAGES = {"web": 50.0, "model": 300.0}


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


class Harness:
    """A dispatcher whose model stage waits for ``release`` (or fails)."""

    def __init__(self, *, fail_model: bool = False, sla_ms: float = 2000.0,
                 policy: AdmissionPolicy = HANDLER_POLICY, level: str = "L0") -> None:
        self.release = threading.Event()
        self.log = io.StringIO()
        # finish_preload off: the tests time the paths themselves
        config = RuntimeConfig(sla_ms=sla_ms, service_name=f"dispatch-{uuid.uuid4().hex[:8]}",
                               finish_preload=FinishPreload.OFF, admission=not policy.baseline)
        self.env = ExecutionEnvironment(InitType.ON_DEMAND, _clock_ms())

        def web() -> Adapter:
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

            return make_adapter(app)  # Mangum, lifespan off

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
        self.admission = Admission(level=lambda: Level(level), stage_p95_ms=FAST_STAGES,
                                   policy=policy)
        self.dispatcher = Dispatcher(
            config=config, environment=self.env, preload=self.preload, routes=routes,
            telemetry=Telemetry(config, stream=self.log), admission=self.admission,
        )
        self.env.finish_init(_clock_ms())
        self.preload.start()

    def call(self, event: Any, context: Any = None) -> dict[str, Any]:
        return self.dispatcher.handle(event, context or LambdaContext())

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.getvalue().splitlines()]

    def close(self) -> None:
        self.release.set()
        self.preload.wait_all(30)


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[Harness] = []

    def factory(**kw: Any) -> Harness:
        made.append(Harness(**kw))
        return made[-1]

    yield factory
    for h in made:
        h.close()


@pytest.fixture
def harness(make: Any) -> Harness:
    return make()


def _intent() -> dict[str, Any]:
    return adapt_event("http_api_v2.json", "POST", "/v1/intent", {"text": "where is my order"})


def test_routes_without_the_model_are_served_while_it_loads(harness: Harness) -> None:
    response = harness.call(adapt_event("http_api_v2.json", "GET", "/healthz"))
    assert response["statusCode"] == 200
    assert response["headers"]["x-warmstart-path"] == "local"
    assert "init;dur=" in response["headers"]["server-timing"]  # the cold start's init
    assert not harness.preload.done("model")


def test_model_route_waits_within_its_budget_then_sheds_with_retry_after(make: Any) -> None:
    """GIVEN a model the preload estimates inside the SLA (300 ms) but never finishes, an SLA
    of 700 ms and 100 ms spent queueing, WHEN the request arrives, THEN it waits for the model
    at most what is left of its budget (less the handler's headroom and the inference) and is
    then shed with Retry-After, tagged timeout_resource."""
    h = make(sla_ms=700.0)
    event = _intent()
    event["requestContext"]["timeEpoch"] -= 100
    started = time.perf_counter()
    response = h.call(event)
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    assert response["statusCode"] == 503
    body = json.loads(response["body"])
    assert body["error"] == "sla_unreachable" and body["retry_after_s"] >= 1
    assert body["estimated_recovery_at"].endswith("Z")
    headers = response["headers"]
    assert headers["x-warmstart-path"] == "shed" and headers["retry-after"] == str(body["retry_after_s"])
    timing = timings_of(response)
    assert "queue" in timing and timing["queue"] >= 100.0
    # it waited for the model (the budget was 700 - 100 queue - 100 headroom - 50 inference)...
    assert 300.0 <= timing["model"] <= 450.0 + 50.0, timing
    # ...and gave up inside the SLA
    assert elapsed_ms < 700.0 - 100.0, elapsed_ms
    (line,) = [x for x in h.log_lines() if x.get("failure")]
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
    started = time.perf_counter()
    response = harness.call(event)
    assert (time.perf_counter() - started) < 0.25  # no wait for anything
    assert response["statusCode"] == 503
    body = json.loads(response["body"])
    assert body["error"] == "sla_unreachable" and "budget_exhausted" in body["message"]
    assert "model;dur=" not in response["headers"]["server-timing"]  # no wait for the model
    assert [x["failure"] for x in harness.log_lines() if "failure" in x] == [FailureTag.TIMEOUT_RESOURCE]


def test_failed_model_sheds_with_model_error_and_keeps_serving(make: Any) -> None:
    h = make(fail_model=True)
    h.release.set()
    h.preload.wait_all(30)
    started = time.perf_counter()
    response = h.call(_intent())
    assert (time.perf_counter() - started) < 0.5  # a failed stage is not waited for
    assert response["statusCode"] == 503
    assert response["headers"]["x-warmstart-path"] == "shed"
    assert json.loads(response["body"])["error"] == "sla_unreachable"
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


# -- WARMSTART_ADMISSION=off: the plain on-demand baseline (BASELINE_POLICY) ------------------


def test_on_demand_baseline_waits_past_the_sla_bounded_by_the_invocation(make: Any) -> None:
    """GIVEN the baseline policy and a request whose SLA is spent on arrival, WHEN the model
    becomes ready 0.3 s later, THEN the request waited for it and is answered locally (never
    shed for its budget); with less invocation time left than the load, it is a 503 once the
    invocation's time is up, tagged timeout_resource."""
    h = make(policy=BASELINE_POLICY)
    event = _intent()
    event["requestContext"]["timeEpoch"] -= 5000  # the SLA is long gone
    threading.Timer(0.3, h.release.set).start()
    response = h.call(event)
    assert response["statusCode"] == 200, response
    assert response["headers"]["x-warmstart-path"] == "local"
    assert timings_of(response)["model"] >= 250.0

    h = make(policy=BASELINE_POLICY)
    # 0.6 s left in the invocation, less the dispatcher's 0.25 s margin: the wait stops there
    started = time.perf_counter()
    response = h.call(_intent(), LambdaContext(timeout_s=0.6))
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    assert response["statusCode"] == 503 and response["headers"]["x-warmstart-path"] == "shed"
    assert 300.0 <= timings_of(response)["model"] <= 450.0 and elapsed_ms < 600.0
    assert response["headers"]["retry-after"] == "1"
    assert [x["failure"] for x in h.log_lines() if "failure" in x] == [FailureTag.TIMEOUT_RESOURCE]


def test_on_demand_baseline_ignores_the_level(make: Any) -> None:
    # GIVEN static level L3 (admission would shed everything) under the baseline
    h = make(policy=BASELINE_POLICY, level="L3")
    h.release.set()
    assert h.preload.wait_all(30)
    # THEN both routes are still served locally at full precision
    response = h.call(_intent())
    assert response["statusCode"] == 200 and response["headers"]["x-warmstart-path"] == "local"
    assert h.call(adapt_event("http_api_v2.json", "GET", "/healthz"))["statusCode"] == 200


def test_on_demand_baseline_sheds_a_failed_model_tagged_model_error(make: Any) -> None:
    h = make(fail_model=True, policy=BASELINE_POLICY)
    h.release.set()
    h.preload.wait_all(30)
    response = h.call(_intent())
    assert response["statusCode"] == 503 and response["headers"]["x-warmstart-path"] == "shed"
    assert response["headers"]["retry-after"] == "1"
    assert [x["failure"] for x in h.log_lines() if "failure" in x] == [FailureTag.MODEL_ERROR]
    assert h.call(adapt_event("alb.json", "GET", "/healthz"))["statusCode"] == 200


def test_on_demand_baseline_503s_say_why(make: Any) -> None:
    failed = make(fail_model=True, policy=BASELINE_POLICY)
    failed.release.set()
    failed.preload.wait_all(30)
    assert json.loads(failed.call(_intent())["body"])["error"] == "model_failed"
    loading = make(policy=BASELINE_POLICY)
    response = loading.call(_intent(), LambdaContext(timeout_s=0.6))
    assert json.loads(response["body"])["error"] == "not_ready"
