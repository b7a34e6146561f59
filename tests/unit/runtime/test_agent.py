"""The framework entry point (`functions.runtime.agent`) with a user's own app.

Each test declares a small "orders" agent of its own (a FastAPI app, its routes and hooks, a
model loader the test releases or fails) through ``Agent(...)`` / ``Route(...)`` and runs its
init with ``lambda_handler(env=...)``, in this process: the real FastAPI app behind the real
Mangum adapter, real preload threads, the real boto3 ``sagemaker-runtime`` client against a
small real HTTP server that speaks the SageMaker contract, real ``snapshot_restore_py`` hooks.
Nothing of the reference intent agent is used.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import snapshot_restore_py
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from functions.gpu_endpoint.server import BackgroundServer
from functions.runtime.agent import (
    Agent,
    AgentRuntime,
    BadRequest,
    DeclarationError,
    ModelNotReady,
    Route,
)
from functions.runtime.agent_handler import AgentHandler
from functions.runtime.contract.levels import Level
from tests.conftest import LambdaContext, adapt_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of, timings_of

ENDPOINT = "orders-overflow"
STATUSES = {"A-17": "shipped", "B-2": "delayed"}
ERROR_KEYS = {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}
ORDER_ID = re.compile(r"^[A-Z]-[0-9]+$")


# -- the agent's pieces (what a user writes in functions/<agent>/) ------------------------------


class Gate:
    """The agent's model loader; the model loads when the test releases it (or fails)."""

    def __init__(self, *, released: bool = False, fail: Exception | None = None) -> None:
        self.released = threading.Event()
        if released:
            self.released.set()
        self.fail = fail
        self.loaded_for: list[str] = []

    def load(self, runtime: AgentRuntime) -> dict[str, Any]:
        self.released.wait(30)
        if self.fail is not None:
            raise self.fail
        self.loaded_for.append(runtime.name)
        return {"statuses": dict(STATUSES)}


def status_payload(body: Any) -> dict[str, Any]:
    """``validate`` of ``POST /v1/status``: ``{"order_id": "A-17"}``."""
    if not isinstance(body, dict) or not isinstance(body.get("order_id"), str):
        raise BadRequest('send {"order_id": "A-17"}', status=422)
    if not ORDER_ID.match(body["order_id"]):
        raise ValueError(f"order_id {body['order_id'][:20]!r} is not like 'A-17'")
    return {"order_id": body["order_id"]}


def status_degraded(payload: dict[str, Any]) -> dict[str, Any]:
    """The cheaper answer: no model."""
    return {"order_id": payload["order_id"], "status": "unknown", "source": "degraded"}


def status_overflow_request(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "agent": "orders"}


def check_status_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """``overflow_answer``: the endpoint's answer must name a known status."""
    if answer.get("status") not in {*STATUSES.values(), "unknown"}:
        raise ValueError(f"unknown status {answer.get('status')!r}")
    return {"order_id": answer["order_id"], "status": answer["status"], "source": answer["source"]}


def orders_app(runtime: AgentRuntime) -> FastAPI:
    """The agent's app (model route, model-free routes, a path template)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/v1/status")
    async def status(request: Request) -> Any:
        order_id = (await request.json())["order_id"]
        started = time.perf_counter()
        answer = runtime.model()["statuses"].get(order_id, "unknown")
        runtime.timing("infer", (time.perf_counter() - started) * 1000.0)
        return {"order_id": order_id, "status": answer, "source": "model"}

    @app.get("/orders/{order_id}")
    async def order(order_id: str) -> Any:
        return {"order_id": order_id, "agent": runtime.name}

    @app.get("/healthz")
    async def healthz() -> Any:
        return {"status": "ok", "model": runtime.model_state()}

    @app.get("/capabilities")
    async def capabilities() -> Any:
        return runtime.capabilities()

    return app


def orders_routes(**status_hooks: Any) -> list[Route]:
    hooks: dict[str, Any] = {"validate": status_payload, "degraded": status_degraded,
                             "overflow_request": status_overflow_request,
                             "overflow_answer": check_status_answer}
    hooks.update(status_hooks)
    return [
        Route("POST", "/v1/status", tier="P0", needs_model=True, **hooks),
        Route("GET", "/orders/{order_id}", tier="P2", name="order"),
        Route("GET", "/healthz", tier="P1"),
        Route("GET", "/capabilities", tier="P1"),
    ]


# -- fixtures ---------------------------------------------------------------------------------


def env_for(init_type: str = "on-demand", **extra: str) -> dict[str, str]:
    env = {
        "AWS_LAMBDA_INITIALIZATION_TYPE": init_type, "WARMSTART_SLA_MS": "2000",
        "WARMSTART_FINISH_PRELOAD": "off", "AWS_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": f"orders-test-{uuid.uuid4().hex[:8]}",
    }
    env.update(extra)
    return env


class Built:
    """Handlers and gates made by one test; released and drained at teardown."""

    def __init__(self) -> None:
        self.handlers: list[AgentHandler] = []
        self.gates: list[Gate] = []
        self.logs: list[tuple[logging.Logger, LogCollector]] = []

    def gate(self, **kw: Any) -> Gate:
        self.gates.append(Gate(**kw))
        return self.gates[-1]

    def handler(self, agent: Agent, env: dict[str, str]) -> tuple[AgentHandler, LogCollector]:
        """``agent.lambda_handler(env=env)`` with a collector on its Powertools logger."""
        logger = logging.getLogger(env["POWERTOOLS_SERVICE_NAME"])
        collector = LogCollector()
        logger.addHandler(collector)
        self.logs.append((logger, collector))
        handler = agent.lambda_handler(env=env)
        self.handlers.append(handler)
        return handler, collector

    def close(self) -> None:
        for gate in self.gates:
            gate.released.set()
        for handler in self.handlers:
            handler.preload.wait_all(30)
        for logger, collector in self.logs:
            logger.removeHandler(collector)


@pytest.fixture
def built() -> Iterator[Built]:
    b = Built()
    yield b
    b.close()


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # the overflow client signs its requests (SigV4) like on Lambda; boto3 reads these itself
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


class SageMakerStandIn:
    """A small real HTTP server speaking the SageMaker runtime contract for the orders model
    (``POST /endpoints/{name}/invocations``), what the boto3 client calls with endpoint_url."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.malformed = False
        app = FastAPI()

        @app.get("/ping")
        async def ping() -> Any:
            return {"status": "ok"}

        @app.post("/endpoints/{name}/invocations")
        async def invoke(name: str, request: Request) -> Any:
            if name != ENDPOINT:
                return JSONResponse({"message": f"Endpoint {name} not found."}, status_code=400,
                                    headers={"x-amzn-ErrorType": "ValidationError"})
            body = await request.json()
            self.requests.append(body)
            status = 42 if self.malformed else STATUSES.get(body["order_id"], "unknown")
            return JSONResponse({"order_id": body["order_id"], "status": status, "source": "gpu",
                                 "extra": "dropped by the route's check"},
                                headers={"x-Amzn-Invoked-Production-Variant": "AllTraffic"})

        self.server = BackgroundServer(app)


@pytest.fixture(scope="module")
def sagemaker() -> Iterator[SageMakerStandIn]:
    stand_in = SageMakerStandIn()
    with stand_in.server:
        yield stand_in


@pytest.fixture
def endpoint(sagemaker: SageMakerStandIn) -> SageMakerStandIn:
    sagemaker.requests.clear()
    sagemaker.malformed = False
    return sagemaker


def call(handler: AgentHandler, method: str, path: str, body: Any = None,
         source: str = "http_api_v2.json") -> dict[str, Any]:
    return handler(adapt_event(source, method, path, body), LambdaContext())


def timed_call(handler: AgentHandler, method: str, path: str, body: Any = None) -> tuple[dict[str, Any], float]:
    """``call`` and how long it took, ms."""
    started = time.perf_counter()
    response = call(handler, method, path, body)
    return response, (time.perf_counter() - started) * 1000.0


def assert_refused_by_check_and_a_prepaid_init(agent: Agent, expected: str) -> None:
    """``agent.check()`` and a pre-paid init both raise `DeclarationError` with ``expected``."""
    with pytest.raises(DeclarationError) as info:
        agent.check()
    assert str(info.value) == expected
    with pytest.raises(DeclarationError) as info:
        agent.lambda_handler(env=env_for("provisioned-concurrency"))
    assert str(info.value) == expected


def orders_agent(gate: Gate | None, **kw: Any) -> Agent:
    routes = kw.pop("routes", None) or orders_routes()
    return Agent("orders", app=kw.pop("app", orders_app), routes=routes,
                 model=gate.load if gate is not None else None, **kw)


# -- the local path -----------------------------------------------------------------------------


def test_an_app_built_in_the_test_is_served_locally_behind_the_entry_point(built: Built) -> None:
    """GIVEN a FastAPI app written here, declared with its routes and a model loader, WHEN
    the on-demand init runs, THEN it returns before the app or the model is loaded; a
    model-free route is served while the model loads, a model route once it is loaded; every
    answer carries X-Warmstart-Path and Server-Timing; the factory got the runtime handle."""
    seen: dict[str, Any] = {}

    def create_app(runtime: AgentRuntime) -> FastAPI:
        seen["runtime"] = runtime
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

        @app.get("/hello")
        async def hello() -> Any:
            # an agent reads its own settings from the runtime, never from os.environ
            return {"greeting": runtime.settings["ORDERS_GREETING"], "model": runtime.model_state()}

        @app.post("/v1/status")
        async def status(request: Request) -> Any:
            order_id = (await request.json())["order_id"]
            runtime.timing("infer", 1.5)
            return {"order_id": order_id, "status": runtime.model()["statuses"][order_id]}

        return app

    gate = built.gate()
    agent = Agent("orders", app=create_app, model=gate.load, routes=[
        Route("GET", "/hello", tier="P1"),
        Route("POST", "/v1/status", needs_model=True, validate=status_payload),
    ])
    # WHEN the init runs (on-demand)
    handler, _ = built.handler(agent, env_for(ORDERS_GREETING="hi there"))
    assert isinstance(handler, AgentHandler) and handler.agent is agent
    assert handler.config.init_type.value == "on-demand" and handler.preload.thread is not None
    assert set(handler.init_resources.values()) <= {"not_started", "loading"}
    # THEN a model-free route is served while the model still loads
    hello = call(handler, "GET", "/hello")
    assert hello["statusCode"] == 200, hello
    assert body_of(hello)["greeting"] == "hi there"
    assert body_of(hello)["model"] in ("not_started", "loading")  # not "ready": the gate holds it
    assert headers_of(hello)["x-warmstart-path"] == "local"
    assert "init" in timings_of(hello)  # the cold start paid the rest of the init
    assert seen["runtime"] is handler.runtime and seen["runtime"].name == "orders"
    # AND the model route, once the model is loaded, runs locally with the app's timing
    gate.released.set()
    assert handler.preload.wait("model", 10)
    status = call(handler, "POST", "/v1/status", {"order_id": "A-17"})
    assert status["statusCode"] == 200 and body_of(status) == {"order_id": "A-17", "status": "shipped"}
    assert headers_of(status)["x-warmstart-path"] == "local" and timings_of(status)["infer"] == 1.5
    assert gate.loaded_for == ["orders"]  # the loader got the runtime too
    assert handler.runtime.model() == {"statuses": STATUSES}
    # AND bad input is refused by the route's validate hook before any path
    bad = call(handler, "POST", "/v1/status", {"order_id": "nope"})
    assert bad["statusCode"] == 422 and set(body_of(bad)) == ERROR_KEYS
    assert "order_id 'nope' is not like 'A-17'" in body_of(bad)["message"]
    assert call(handler, "POST", "/v1/status", {"id": 1})["statusCode"] == 422
    assert call(handler, "POST", "/v1/status", "{oops")["statusCode"] == 400


def test_capabilities_and_debug_describe_the_declaration(built: Built) -> None:
    handler, _ = built.handler(orders_agent(built.gate(released=True)), env_for(WARMSTART_SLA_MS="1500"))
    assert handler.preload.wait_all(30)
    caps = body_of(call(handler, "GET", "/capabilities"))
    assert caps["agent"] == "orders" and caps["level"] == "L0" and caps["model_state"] == "ready"
    routes = {(r["method"], r["path"]): r for r in caps["routes"]}
    assert routes[("POST", "/v1/status")] == {
        "feature": "status", "method": "POST", "path": "/v1/status", "tier": "P0", "sla_ms": 1500.0,
        "needs_model": True, "degradable": True}
    assert routes[("GET", "/orders/{order_id}")]["sla_ms"] == 29_000.0  # P2's default
    assert routes[("GET", "/healthz")]["sla_ms"] == 1500.0 * 2.5  # P1's default
    debug = handler.runtime.debug()
    assert debug["agent"] == "orders" and debug["admission"] == "on" and debug["overflow"] is None
    assert debug["resources"] == {"toolkit": "ready", "web": "ready", "telemetry": "ready", "model": "ready"}


def test_path_templates_are_declared_routes(built: Built) -> None:
    # GIVEN a declaration whose parameter is named differently from the app's (same route)
    routes = orders_routes()
    routes[1] = Route("GET", "/orders/{id}", tier="P2", name="order")
    handler, _ = built.handler(orders_agent(built.gate(released=True), routes=routes), env_for())
    assert handler.preload.wait_all(30)
    # THEN the app's /orders/{order_id} matches it, and a request is admitted as that route
    ok = call(handler, "GET", "/orders/A-17", source="alb.json")
    assert ok["statusCode"] == 200 and body_of(ok) == {"order_id": "A-17", "agent": "orders"}
    handler._static_level = Level.L1  # the static level admission reads: P2 is off from L1
    try:
        off = call(handler, "GET", "/orders/A-17")
        assert off["statusCode"] == 503 and body_of(off)["error"] == "feature_disabled"
        assert "'order'" in body_of(off)["message"]
        # a path the template does not match is not that route: the app answers it (404)
        assert call(handler, "GET", "/orders/A-17/items")["statusCode"] == 404
    finally:
        handler._static_level = None
    assert sorted(orders_agent(Gate(), routes=routes).check()) == [  # check() loads no model
        "GET /capabilities", "GET /healthz", "GET /orders/{order_id}", "POST /v1/status"]


# -- the overflow path --------------------------------------------------------------------------


def test_a_cold_model_route_overflows_to_the_sagemaker_endpoint(
    built: Built, endpoint: SageMakerStandIn,
) -> None:
    """GIVEN an on-demand cold start whose model cannot be ready within the SLA and an overflow
    endpoint (a real HTTP server with the SageMaker contract), WHEN a model request arrives,
    THEN it is answered by the endpoint through the real boto3 client within its SLA: the
    request shaped by the route's overflow_request hook, the answer by its overflow_answer
    check; WHEN the endpoint answers something the check rejects, THEN the request falls back
    to the degraded answer, tagged model_error."""
    gate = built.gate()
    agent = orders_agent(gate, stage_p95_ms={"model": 10_000.0})
    handler, logs = built.handler(agent, env_for(WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                                 WARMSTART_OVERFLOW_ENDPOINT_URL=endpoint.server.url))
    # the first stages of the preload are done (boto3 client prewarmed); the model is not
    assert handler.preload.wait("overflow", 30) and handler.preload.wait("web", 30)
    assert handler.overflow is not None and handler.overflow.client_ready
    response, elapsed_ms = timed_call(handler, "POST", "/v1/status", {"order_id": "B-2"})
    assert response["statusCode"] == 200, response
    assert headers_of(response)["x-warmstart-path"] == "overflow"
    assert body_of(response) == {"order_id": "B-2", "status": "delayed", "source": "gpu"}
    assert endpoint.requests == [{"order_id": "B-2", "agent": "orders"}]
    assert "overflow" in timings_of(response) and elapsed_ms < 2000.0
    assert not handler.preload.done("model")  # the model was never waited for
    # WHEN the endpoint's answer fails the route's check
    endpoint.malformed = True
    rejected = call(handler, "POST", "/v1/status", {"order_id": "A-17"})
    assert rejected["statusCode"] == 200 and headers_of(rejected)["x-warmstart-path"] == "degraded"
    assert body_of(rejected) == {"order_id": "A-17", "status": "unknown", "source": "degraded",
                                 "degraded": True, "level": "L0"}
    assert len(endpoint.requests) == 2
    assert handler.preload.wait("telemetry", 10)
    assert logs.failures() == ["model_error"]
    # a model-free route never overflows
    assert headers_of(call(handler, "GET", "/healthz"))["x-warmstart-path"] == "local"
    assert len(endpoint.requests) == 2


# -- the degraded path ------------------------------------------------------------------------


def test_l2_answers_degradable_routes_cheaply(built: Built) -> None:
    handler, _ = built.handler(orders_agent(built.gate(released=True)),
                               env_for(WARMSTART_DEGRADATION_LEVEL="L2"))
    assert handler.preload.wait_all(30)
    response = call(handler, "POST", "/v1/status", {"order_id": "A-17"}, source="rest_api_v1.json")
    assert response["statusCode"] == 200 and headers_of(response)["x-warmstart-path"] == "degraded"
    assert body_of(response) == {"order_id": "A-17", "status": "unknown", "source": "degraded",
                                 "degraded": True, "level": "L2"}
    # a route without a cheaper answer is still served at full precision
    health = call(handler, "GET", "/healthz")
    assert health["statusCode"] == 200 and headers_of(health)["x-warmstart-path"] == "local"
    assert body_of(call(handler, "GET", "/capabilities"))["degraded"] == ["status"]


def test_a_full_overflow_answer_after_the_local_wait_ran_out_is_no_failed_request(
    built: Built, endpoint: SageMakerStandIn,
) -> None:
    """GIVEN a model stage whose 300 ms estimate fits the SLA but that never comes, and an
    overflow endpoint, WHEN a model request arrives, THEN it waits locally (bounded), is
    answered in full by the endpoint, and is logged as a request (not "request failed", no
    failure tag) with the local path it passed over and why."""
    gate = built.gate()
    handler, logs = built.handler(orders_agent(gate, stage_p95_ms={"model": 300.0}),
                                  env_for(WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                          WARMSTART_OVERFLOW_ENDPOINT_URL=endpoint.server.url))
    assert handler.preload.wait("overflow", 30) and handler.preload.wait("telemetry", 30)
    response = call(handler, "POST", "/v1/status", {"order_id": "B-2"})
    assert response["statusCode"] == 200 and headers_of(response)["x-warmstart-path"] == "overflow"
    assert timings_of(response)["model"] > 0  # it did wait for the model first
    lines = [r for r in logs.records if r.getMessage() in ("request", "request failed")]
    assert [(r.getMessage(), getattr(r, "failure", None), r.passed_over) for r in lines] == [
        ("request", None, ["local:timeout_resource"])]
    assert logs.failures() == []


def test_a_model_not_ready_in_time_gets_the_degraded_answer_within_the_sla(built: Built) -> None:
    """GIVEN no overflow endpoint, an 800 ms SLA and a model the preload estimates at 300 ms
    that does not come, WHEN a model request arrives, THEN it waits for the model as long as
    the SLA allows (keeping the degraded answer's reserve), then gets the degraded answer inside
    its SLA, tagged timeout_resource; WHEN the model can never make the SLA, THEN the degraded
    answer comes at once."""
    gate = built.gate()
    handler, logs = built.handler(orders_agent(gate, stage_p95_ms={"model": 300.0}),
                                  env_for(WARMSTART_SLA_MS="800"))
    assert handler.preload.wait("web", 30) and handler.preload.wait("telemetry", 30)
    response, elapsed_ms = timed_call(handler, "POST", "/v1/status", {"order_id": "A-17"})
    assert response["statusCode"] == 200 and headers_of(response)["x-warmstart-path"] == "degraded"
    assert body_of(response)["degraded"] is True and body_of(response)["source"] == "degraded"
    assert timings_of(response)["model"] >= 300.0  # it did wait for the model...
    assert elapsed_ms < 800.0, elapsed_ms  # ...and answered inside the SLA
    assert logs.failures() == ["timeout_resource"]

    slow, _ = built.handler(orders_agent(built.gate(), stage_p95_ms={"model": 10_000.0}),
                            env_for(WARMSTART_SLA_MS="800"))
    assert slow.preload.wait("web", 30)
    at_once, elapsed_ms = timed_call(slow, "POST", "/v1/status", {"order_id": "A-17"})
    assert headers_of(at_once)["x-warmstart-path"] == "degraded"
    assert "model" not in timings_of(at_once) and elapsed_ms < 400.0


# -- the off baseline ---------------------------------------------------------------------------


def test_admission_off_waits_for_the_model_and_never_overflows_or_degrades(
    built: Built, endpoint: SageMakerStandIn,
) -> None:
    """GIVEN WARMSTART_ADMISSION=off with an overflow endpoint configured, static level L3 and
    a 300 ms SLA, WHEN a model request arrives on a cold start, THEN it waits for the local
    model past its SLA and is answered locally at full precision; no overflow client is built,
    the endpoint and the degraded hook are never called."""
    degraded_calls: list[Any] = []

    def degraded(payload: dict[str, Any]) -> dict[str, Any]:
        degraded_calls.append(payload)
        return status_degraded(payload)

    gate = built.gate()
    handler, _ = built.handler(
        orders_agent(gate, routes=orders_routes(degraded=degraded), stage_p95_ms={"model": 10_000.0}),
        env_for(WARMSTART_ADMISSION="off", WARMSTART_SLA_MS="300", WARMSTART_DEGRADATION_LEVEL="L3",
                WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                WARMSTART_OVERFLOW_ENDPOINT_URL=endpoint.server.url))
    assert "overflow" not in handler.preload.stage_names
    threading.Timer(0.5, gate.released.set).start()
    response, elapsed_ms = timed_call(handler, "POST", "/v1/status", {"order_id": "A-17"})
    assert response["statusCode"] == 200, response
    assert headers_of(response)["x-warmstart-path"] == "local"
    assert body_of(response) == {"order_id": "A-17", "status": "shipped", "source": "model"}
    assert elapsed_ms >= 400.0 and timings_of(response)["model"] >= 300.0  # waited past the SLA
    assert handler.overflow is None and endpoint.requests == [] and degraded_calls == []
    # L3 is ignored too: the next requests are served
    assert call(handler, "GET", "/healthz")["statusCode"] == 200
    assert handler.runtime.debug()["admission"] == "baseline"
    # bad input is still a 4xx
    assert call(handler, "POST", "/v1/status", {"order_id": "x"})["statusCode"] == 422


# -- SnapStart ----------------------------------------------------------------------------------


def test_snap_start_runs_the_agents_own_hooks_around_the_snapshot(
    built: Built, endpoint: SageMakerStandIn,
) -> None:
    """GIVEN a snap-start init with an overflow endpoint and the agent's own hooks, THEN the
    init loads everything before it returns and registers one hook each with
    snapshot_restore_py; WHEN the runtime takes the snapshot, THEN the toolkit closes the
    overflow client first, then the agent's before_snapshot runs; WHEN it restores, THEN the
    environment gets a new identity and the agent's after_restore runs; requests are served
    locally, none is a cold start."""
    calls: list[tuple[str, Any]] = []
    holder: dict[str, AgentHandler] = {}

    def close_pool() -> None:
        overflow = holder["handler"].overflow
        calls.append(("before_snapshot", overflow is not None and overflow.client_ready))

    def reopen_pool() -> None:
        calls.append(("after_restore", holder["handler"].environment.restored))

    agent = orders_agent(built.gate(released=True), before_snapshot=[close_pool],
                         after_restore=[reopen_pool])
    handler, _ = built.handler(agent, env_for("snap-start", WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                              WARMSTART_OVERFLOW_ENDPOINT_URL=endpoint.server.url))
    holder["handler"] = handler
    assert handler.preload.thread is None  # pre-paid: no background preload
    assert handler.init_resources == {"toolkit": "ready", "overflow": "ready", "web": "ready",
                                      "telemetry": "ready", "model": "ready"}
    assert handler.overflow is not None and handler.overflow.client_ready
    before = snapshot_restore_py.get_before_snapshot()
    after = snapshot_restore_py.get_after_restore()
    assert (len(before), len(after)) == (1, 1) and calls == []
    first_id = handler.environment.environment_id
    # WHEN the snapshot is taken
    for func, args, kwargs in before:
        func(*args, **kwargs)
    assert calls == [("before_snapshot", False)]  # the toolkit's closer ran first
    assert handler.environment.environment_id == first_id
    # WHEN the snapshot is restored
    for func, args, kwargs in after:
        func(*args, **kwargs)
    assert calls == [("before_snapshot", False), ("after_restore", True)]
    assert handler.environment.environment_id != first_id
    assert handler.overflow.client_ready  # made again by the toolkit's restore hook (no socket)
    pong = handler({"warmstart": {"ping": True}}, None)["warmstart"]
    assert pong["cold_start"] is False and pong["init_type"] == "snap-start" and pong["ready"] is True
    response = call(handler, "POST", "/v1/status", {"order_id": "A-17"})
    assert response["statusCode"] == 200 and headers_of(response)["x-warmstart-path"] == "local"
    assert endpoint.requests == []


def test_provisioned_concurrency_registers_no_snapstart_hooks(built: Built) -> None:
    calls: list[str] = []
    agent = orders_agent(built.gate(released=True), before_snapshot=[lambda: calls.append("b")])
    handler, _ = built.handler(agent, env_for("provisioned-concurrency"))
    assert set(handler.init_resources.values()) == {"ready"}
    assert snapshot_restore_py.get_before_snapshot() == [] and calls == []


# -- bad declarations -----------------------------------------------------------------------------


def _noop_app() -> FastAPI:
    return FastAPI(docs_url=None, redoc_url=None, openapi_url=None)


def test_a_route_declared_twice_is_refused() -> None:
    with pytest.raises(DeclarationError) as info:
        Agent("orders", app=_noop_app, routes=[Route("GET", "/healthz", name="health"),
                                               Route("GET", "/healthz/", name="health_again")])
    assert str(info.value) == "agent 'orders': duplicate route GET /healthz/ is declared twice"
    # the same template with another parameter name is the same route
    with pytest.raises(DeclarationError) as info:
        Agent("orders", app=_noop_app, routes=[Route("GET", "/orders/{id}", name="a"),
                                               Route("GET", "/orders/{order_id}", name="b")])
    assert str(info.value) == "agent 'orders': duplicate route GET /orders/{order_id} is declared twice"


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "fast", True, None])
def test_a_declared_stage_p95_must_be_a_number_of_ms(bad: Any) -> None:
    """A bad seed fails the declaration, not every cold request later."""
    with pytest.raises(DeclarationError) as info:
        Agent("orders", app=_noop_app, routes=[Route("GET", "/healthz")],
              stage_p95_ms={"model": bad})
    assert str(info.value) == (f"agent 'orders': stage_p95_ms['model'] must be a finite number "
                               f"of ms >= 0, got {bad!r}")


def test_a_route_declared_twice_without_names_says_declared_twice() -> None:
    with pytest.raises(DeclarationError) as info:
        Agent("orders", app=_noop_app, routes=[Route("GET", "/healthz"), Route("GET", "/healthz")])
    assert str(info.value) == "agent 'orders': duplicate route GET /healthz is declared twice"


def test_two_routes_with_one_name_are_refused() -> None:
    with pytest.raises(DeclarationError) as info:
        Agent("orders", app=_noop_app, routes=[Route("GET", "/v1/orders"), Route("POST", "/v2/orders")])
    assert str(info.value) == ("agent 'orders': routes GET /v1/orders and POST /v2/orders have the "
                               "same name 'orders'; give one name=...")


def test_a_model_route_without_a_model_is_refused() -> None:
    with pytest.raises(DeclarationError) as info:
        Agent("orders", app=_noop_app, routes=[Route("POST", "/v1/status", needs_model=True)])
    assert str(info.value) == ("agent 'orders': route POST /v1/status needs_model=True but the agent "
                               "declares no model loader (model=...)")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"method": "FETCH"}, "route FETCH /x: method must be one of DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"),
    ({"path": "x"}, "route GET x: path must start with '/'"),
    ({"tier": "P3"}, "route GET /x: tier must be one of P0, P1, P2, got 'P3'"),
    ({"sla_ms": 0}, "route GET /x: sla_ms must be a positive number of ms, got 0"),
    ({"degradable": True}, "route GET /x: degradable=True needs a degraded hook (the cheaper answer)"),
    ({"overflow_answer": check_status_answer},
     "route GET /x: overflow hooks need needs_model=True (only model routes overflow)"),
    ({"validate": "no_colon"},
     "agent '?': route GET /x: validate must be a callable or a 'module:attribute' string, got 'no_colon'"),
])
def test_a_bad_route_is_refused_with_its_reason(kwargs: dict[str, Any], message: str) -> None:
    args = {"method": kwargs.pop("method", "GET"), "path": kwargs.pop("path", "/x")}
    with pytest.raises(DeclarationError) as info:
        Route(args["method"], args["path"], **kwargs)
    assert str(info.value) == message


UNIMPORTABLE = ("agent 'orders': route POST /v1/status: validate 'tests.no_such_module:check': "
                "importing 'tests.no_such_module' failed: ModuleNotFoundError: No module named "
                "'tests.no_such_module'")


def test_a_hook_that_cannot_be_imported_fails_a_prepaid_init_naming_agent_route_and_field(
    built: Built,
) -> None:
    agent = orders_agent(built.gate(released=True),
                         routes=orders_routes(validate="tests.no_such_module:check"))
    with pytest.raises(DeclarationError) as info:
        agent.lambda_handler(env=env_for("provisioned-concurrency"))
    assert str(info.value) == UNIMPORTABLE
    with pytest.raises(DeclarationError) as info:
        agent.check()
    assert str(info.value) == UNIMPORTABLE
    missing = Agent("orders", app=_noop_app,
                    routes=[Route("POST", "/v1/status", validate="tests.conftest:no_such_hook")])
    with pytest.raises(DeclarationError) as info:
        missing.check()
    assert str(info.value) == ("agent 'orders': route POST /v1/status: validate "
                               "'tests.conftest:no_such_hook': 'tests.conftest' has no attribute "
                               "'no_such_hook'")


def test_a_hook_that_cannot_be_imported_makes_on_demand_requests_500s(
    built: Built, caplog: pytest.LogCaptureFixture,
) -> None:
    agent = orders_agent(built.gate(released=True),
                         routes=orders_routes(validate="tests.no_such_module:check"))
    handler, _ = built.handler(agent, env_for())
    with caplog.at_level(logging.ERROR, logger="warmstart"):
        for _ in range(2):  # the environment keeps answering
            response = call(handler, "GET", "/healthz")
            assert response["statusCode"] == 500 and headers_of(response)["x-warmstart-path"] == "shed"
            body = body_of(response)
            assert body["error"] == "agent_misconfigured" and "no_such_module" not in body["message"]
    assert [r.getMessage() for r in caplog.records if "misconfigured" in r.getMessage()] == [
        f"agent 'orders' is misconfigured: {UNIMPORTABLE}"]  # logged once per environment


def _no_database_app() -> FastAPI:
    raise RuntimeError("no database URL")


def test_an_app_factory_that_raises_fails_a_prepaid_init_naming_agent_and_field() -> None:
    agent = Agent("orders", app=_no_database_app, routes=[Route("GET", "/healthz")])
    with pytest.raises(DeclarationError) as info:
        agent.lambda_handler(env=env_for("snap-start"))
    message = str(info.value)
    assert message.startswith("agent 'orders': the app factory <function _no_database_app ")
    assert message.endswith(" failed: RuntimeError: no database URL")
    assert snapshot_restore_py.get_before_snapshot() == []  # the init stopped before the hooks


def test_a_prepaid_init_failure_keeps_the_app_factorys_exception_chained() -> None:
    agent = Agent("orders", app=_no_database_app, routes=[Route("GET", "/healthz")])
    with pytest.raises(DeclarationError) as info:
        agent.lambda_handler(env=env_for("provisioned-concurrency"))
    assert isinstance(info.value.__cause__, RuntimeError)


def test_an_app_factory_that_raises_on_demand_answers_5xx_and_keeps_answering(
    built: Built, caplog: pytest.LogCaptureFixture,
) -> None:
    def create_app() -> FastAPI:
        time.sleep(0.05)
        raise RuntimeError("no database URL")

    agent = Agent("orders", app=create_app, routes=[Route("GET", "/healthz", tier="P1")])
    with caplog.at_level(logging.ERROR, logger="warmstart"):
        handler, _ = built.handler(agent, env_for())
        first = call(handler, "GET", "/healthz")  # during or after the failing web stage
        assert 500 <= first["statusCode"] < 600 and set(body_of(first)) == ERROR_KEYS
        assert handler.preload.wait("web", 10) and handler.preload.failed("web")
        for _ in range(2):
            later, elapsed_ms = timed_call(handler, "GET", "/healthz")
            assert later["statusCode"] == 500 and body_of(later)["error"] == "agent_misconfigured"
            assert elapsed_ms < 500.0
    logged = [r.getMessage() for r in caplog.records if "no database URL" in r.getMessage()]
    assert logged and logged[0].startswith("agent 'orders': the app factory ")


def test_declared_and_app_routes_that_differ_are_listed_in_one_message() -> None:
    def create_app() -> FastAPI:
        app = _noop_app()

        @app.get("/healthz")
        async def healthz() -> Any:
            return {}

        @app.get("/extra")
        async def extra() -> Any:
            return {}

        @app.delete("/orders/{order_id}")
        async def cancel(order_id: str) -> Any:
            return {}

        return app

    agent = Agent("orders", app=create_app, routes=[Route("GET", "/healthz"), Route("GET", "/missing"),
                                                    Route("POST", "/orders/{order_id}")])
    expected = ("agent 'orders': routes do not match the app: declared but not in the app: "
                "GET /missing, POST /orders/{order_id}; in the app but not declared (add a Route "
                "for each): GET /extra, DELETE /orders/{order_id}")
    assert_refused_by_check_and_a_prepaid_init(agent, expected)


@pytest.mark.parametrize("init_type", ["on-demand", "provisioned-concurrency"])
def test_a_model_loader_that_fails_degrades_or_sheds_model_routes_and_healthz_says_failed(
    built: Built, init_type: str,
) -> None:
    """GIVEN a model loader that raises, WHEN the init ran (a pre-paid init does not fail for
    it), THEN a degradable model route gets its degraded answer and one without a cheaper answer
    is shed with Retry-After, both tagged model_error; model-free routes are served, and the
    app's /healthz (runtime.model_state()) says failed."""
    gate = built.gate(released=True, fail=OSError("model.bin is corrupt"))
    routes = [*orders_routes(), Route("POST", "/v1/report", tier="P1", needs_model=True)]

    def create_app(runtime: AgentRuntime) -> FastAPI:
        app = orders_app(runtime)

        @app.post("/v1/report")
        async def report() -> Any:
            return {"statuses": runtime.model()["statuses"]}

        return app

    handler, logs = built.handler(orders_agent(gate, app=create_app, routes=routes), env_for(init_type))
    assert handler.preload.wait_all(30)
    assert handler.preload.failed("model") and handler.environment.resource("model") == "failed"
    degraded = call(handler, "POST", "/v1/status", {"order_id": "A-17"})
    assert degraded["statusCode"] == 200 and headers_of(degraded)["x-warmstart-path"] == "degraded"
    shed = call(handler, "POST", "/v1/report", {})
    assert shed["statusCode"] == 503 and headers_of(shed)["x-warmstart-path"] == "shed"
    assert int(headers_of(shed)["retry-after"]) >= 1 and set(body_of(shed)) == ERROR_KEYS
    health = call(handler, "GET", "/healthz")
    assert health["statusCode"] == 200 and body_of(health) == {"status": "ok", "model": "failed"}
    assert call(handler, "GET", "/orders/A-17")["statusCode"] == 200
    assert logs.failures() == ["model_error", "model_error"]
    with pytest.raises(ModelNotReady, match="the model failed to load") as info:
        handler.runtime.model()
    assert isinstance(info.value.__cause__.__cause__, OSError)  # StageFailed <- the loader's error


def test_a_model_free_agent_has_no_model_stage(built: Built) -> None:
    def create_app(runtime: AgentRuntime) -> FastAPI:
        app = _noop_app()

        @app.get("/healthz")
        async def healthz() -> Any:
            return {"status": "ok", "model": runtime.model_state()}

        return app

    handler, _ = built.handler(Agent("orders", app=create_app, routes=[Route("GET", "/healthz")]),
                               env_for())
    assert handler.preload.wait_all(30)
    assert "model" not in handler.preload.stage_names
    assert body_of(call(handler, "GET", "/healthz")) == {"status": "ok", "model": "none"}
    with pytest.raises(ModelNotReady, match="has no model"):
        handler.runtime.model()
