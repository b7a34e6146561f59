"""The dispatcher with SLA-aware admission, on a real Mangum + FastAPI app and a controllable
model stage; plus the small toolkit APIs admission relies on (preload progress, tracker
refresh, deferred telemetry, overflow client close, request body)."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from functions.runtime.admission import EnvState, LatencyTracker, ModelState, RequestInfo
from functions.runtime.admission.flow import LocalUnavailable
from functions.runtime.admission.state import DEFAULT_STAGE_P95_MS, Admission, RouteHooks
from functions.runtime.asgi import Adapter, make_adapter
from functions.runtime.config import FinishPreload, InitType, RuntimeConfig
from functions.runtime.contract.levels import Level
from functions.runtime.dispatch import Dispatcher
from functions.runtime.errors import BadRequest, FailureTag
from functions.runtime.events import request_body
from functions.runtime.lifecycle import ExecutionEnvironment
from functions.runtime.local_path import LocalFailed
from functions.runtime.overflow import OverflowClient
from functions.runtime.preload import Preloader, Stage
from functions.runtime.routes import RouteRegistry, RouteSpec
from functions.runtime.telemetry import Telemetry
from tests.conftest import LambdaContext, adapt_event
from tests.unit.runtime.admission_paths import serve_calls as serve


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


def _payload(body: Any) -> dict[str, Any]:
    """The route's ``validate`` hook: the JSON body (None when empty) -> payload."""
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise BadRequest("send {'text': ...}", status=422)
    return {"text": body["text"]}


class Harness:
    """A dispatcher with admission whose model stage waits for ``release`` (or fails)."""

    def __init__(self, *, fail_model: bool = False, stage_p95_ms: dict[str, float] | None = None,
                 degradable: bool = True, level: str = "L0", hold_telemetry: bool = False,
                 finish_preload: FinishPreload = FinishPreload.OFF) -> None:
        self.release = threading.Event()
        self.telemetry_release = threading.Event()
        if not hold_telemetry:
            self.telemetry_release.set()
        self.log = io.StringIO()
        self.level = Level(level)
        # finish_preload off: these tests time the path decisions themselves (the wait after
        # an overflowed/degraded answer is tested through the handler in tests/unit/agent)
        config = RuntimeConfig(sla_ms=2000.0, service_name=f"admit-{uuid.uuid4().hex[:8]}",
                               finish_preload=finish_preload)
        self.env = ExecutionEnvironment(InitType.ON_DEMAND, _clock_ms())

        def web() -> Adapter:
            app = FastAPI()

            @app.get("/healthz")
            async def healthz() -> dict[str, str]:
                return {"status": "ok"}

            @app.post("/v1/intent")
            async def intent() -> dict[str, Any]:
                return {"intent": self.preload.result("model"), "degraded": False}

            return make_adapter(app)  # Mangum, lifespan off

        def model() -> str:
            self.release.wait(30)
            if fail_model:
                raise OSError("model.onnx is corrupt")
            return "check_order_status"

        def telemetry() -> Telemetry:
            self.telemetry_release.wait(30)
            self.dispatcher.telemetry.load()
            self.dispatcher.flush_pending()
            return self.dispatcher.telemetry

        self.preload = Preloader(
            [Stage("web", web), Stage("telemetry", telemetry), Stage("model", model)],
            self.env, _clock_ms,
        )
        routes = RouteRegistry([
            RouteSpec("intent", "POST", "/v1/intent", "P0", degradable=degradable, needs_model=True),
            RouteSpec("healthz", "GET", "/healthz", "P1"),
        ])
        hooks = {"intent": RouteHooks(_payload, (lambda p: {"intent": "lexical", "text": p["text"]})
                                      if degradable else None)}
        self.admission = Admission(level=lambda: self.level, hooks=hooks,
                                   stage_p95_ms=stage_p95_ms or {"web": 50.0, "telemetry": 10.0,
                                                                 "model": 300.0})
        self.dispatcher = Dispatcher(
            config=config, environment=self.env, preload=self.preload, routes=routes,
            telemetry=Telemetry(config, stream=self.log),
            admission=self.admission, telemetry_stage="telemetry",
        )
        self.env.finish_init(_clock_ms())
        self.preload.start()

    def call(self, event: Any) -> dict[str, Any]:
        return self.dispatcher.handle(event, LambdaContext())

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.getvalue().splitlines()]


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[Harness] = []

    def factory(**kw: Any) -> Harness:
        h = Harness(**kw)
        made.append(h)
        return h

    yield factory
    for h in made:
        h.release.set()
        h.telemetry_release.set()
        h.preload.wait_all(30)


def _intent(body: Any = None) -> dict[str, Any]:
    return adapt_event("http_api_v2.json", "POST", "/v1/intent",
                       {"text": "where is my order"} if body is None else body)


def test_cold_request_waits_for_the_model_when_the_estimate_fits(make: Any) -> None:
    # GIVEN a preload estimated to finish well inside the SLA (model p95 300 ms)
    h = make()
    threading.Timer(0.15, h.release.set).start()
    # WHEN the first request arrives THEN it waits and is served locally
    response = h.call(_intent())
    assert response["statusCode"] == 200, response
    assert response["headers"]["x-warmstart-path"] == "local"
    assert json.loads(response["body"])["intent"] == "check_order_status"
    assert "model;dur=" in response["headers"]["server-timing"]


def test_cold_request_degrades_at_once_when_the_model_cannot_be_ready(make: Any) -> None:
    h = make(stage_p95_ms={"web": 50.0, "telemetry": 10.0, "model": 5000.0})
    started = time.perf_counter()
    response = h.call(_intent())
    assert (time.perf_counter() - started) < 1.0  # no wait for a model that cannot make it
    assert response["statusCode"] == 200
    assert response["headers"]["x-warmstart-path"] == "degraded"
    body = json.loads(response["body"])
    assert body == {"intent": "lexical", "text": "where is my order", "degraded": True, "level": "L0"}


def test_degraded_cold_answer_waits_for_the_preload_until_the_sla_deadline(make: Any) -> None:
    # GIVEN finish_preload on and a model the preload will not finish in time (held)
    h = make(stage_p95_ms={"web": 50.0, "telemetry": 10.0, "model": 5000.0}, finish_preload=FinishPreload.BEFORE)
    started = time.perf_counter()
    response = h.call(_intent())
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    # THEN the degraded answer leaves only when the SLA budget (less headroom) is used up,
    # and the wait is reported as Server-Timing "preload"
    assert response["headers"]["x-warmstart-path"] == "degraded"
    assert "preload;dur=" in response["headers"]["server-timing"]
    assert 2000.0 - 2 * 100.0 - 150.0 <= elapsed_ms < 2000.0, elapsed_ms
    h.release.set()


def test_not_degradable_and_nothing_fits_is_shed_with_retry_after(make: Any) -> None:
    h = make(stage_p95_ms={"web": 50.0, "telemetry": 10.0, "model": 5000.0}, degradable=False)
    response = h.call(_intent())
    assert response["statusCode"] == 503
    body = json.loads(response["body"])
    assert body["error"] == "sla_unreachable" and body["retry_after_s"] >= 1
    assert response["headers"]["retry-after"] == str(body["retry_after_s"])
    h.telemetry_release.set()
    h.preload.wait("telemetry", 10)
    (line,) = [x for x in h.log_lines() if x.get("failure")]
    assert line["failure"] == "timeout_resource" and line["path"] == "shed"


def test_failed_model_falls_back_to_the_degraded_answer_tagged_model_error(make: Any) -> None:
    h = make(fail_model=True)
    h.release.set()
    h.preload.wait_all(30)
    response = h.call(_intent())
    assert response["statusCode"] == 200
    assert response["headers"]["x-warmstart-path"] == "degraded"
    (line,) = [x for x in h.log_lines() if x.get("failure")]
    assert line["failure"] == "model_error"
    # the environment keeps serving routes that do not need the model
    assert h.call(adapt_event("http_api_v2.json", "GET", "/healthz"))["statusCode"] == 200


def test_bad_body_is_a_4xx_before_any_path(make: Any) -> None:
    h = make(stage_p95_ms={"web": 50.0, "telemetry": 10.0, "model": 5000.0})
    response = h.call(_intent("not json"))
    assert response["statusCode"] == 400
    assert response["headers"]["x-warmstart-path"] == "local"
    assert not h.preload.done("model")


def test_requests_before_powertools_loads_are_logged_once_it_does(make: Any) -> None:
    # GIVEN the telemetry stage is held back
    h = make(hold_telemetry=True)
    h.release.set()
    response = h.call(adapt_event("http_api_v2.json", "GET", "/healthz"))
    assert response["statusCode"] == 200
    assert h.log_lines() == []  # nothing logged on the cold request's own path
    # WHEN Powertools loads THEN the pending request is logged, once
    h.telemetry_release.set()
    assert h.preload.wait("telemetry", 10)
    h.call(adapt_event("http_api_v2.json", "GET", "/healthz"))
    cold = [x for x in h.log_lines() if x.get("cold_start") is True and x.get("route")]
    assert len(cold) == 1 and cold[0]["route"] == "GET /healthz"


def test_load_estimate_follows_the_preload_progress(make: Any) -> None:
    h = make(stage_p95_ms={"web": 50.0, "telemetry": 10.0, "model": 400.0})
    route = h.dispatcher.routes.match("POST", "/v1/intent")
    assert route is not None
    tracker = h.admission.tracker("intent")
    h.preload.wait("telemetry", 10)
    def env_state() -> EnvState:
        return h.admission.env_state(h.preload, "model", "web", tracker)

    first = env_state()
    time.sleep(0.1)
    second = env_state()
    assert first.model_state is ModelState.LOADING
    assert 0 < second.load_remaining_ms < first.load_remaining_ms <= 400.0
    h.release.set()
    h.preload.wait("model", 10)
    assert env_state().model_state is ModelState.READY


def test_sla_of_a_route_defaults_by_tier() -> None:
    adm = Admission(level=lambda: Level.L0)
    assert adm.sla_ms(RouteSpec("a", "GET", "/a", "P0"), 2000.0) == 2000.0
    assert adm.sla_ms(RouteSpec("b", "GET", "/b", "P1"), 2000.0) == 5000.0
    assert adm.sla_ms(RouteSpec("c", "GET", "/c", "P2", sla_ms=700.0), 2000.0) == 700.0


def test_stage_seeds_replace_the_defaults_one_by_one() -> None:
    adm = Admission(level=lambda: Level.L0, stage_p95_ms={"model": 5000.0})
    assert adm.stage_p95_ms == {**DEFAULT_STAGE_P95_MS, "model": 5000.0}
    assert Admission(level=lambda: Level.L0).stage_p95_ms == DEFAULT_STAGE_P95_MS


def test_a_failing_validate_hook_is_a_500_never_the_clients_fault(make: Any) -> None:
    # GIVEN the route's payload check itself crashes (a bug in the agent, not bad input)
    h = make()
    h.release.set()
    h.preload.wait_all(30)

    def broken(body: Any) -> dict[str, Any]:
        raise RuntimeError("validator bug")

    h.admission.hooks["intent"] = h.admission.hooks["intent"]._replace(validate=broken)
    h.admission.per_route.clear()
    response = h.call(_intent())
    # THEN a 500 internal_error tagged model_error (not a 4xx), the cause only in the log
    assert response["statusCode"] == 500
    body = json.loads(response["body"])
    assert body["error"] == "internal_error" and "validator bug" not in body["message"]
    (line,) = [x for x in h.log_lines() if x.get("failure")]
    assert line["failure"] == "model_error"
    assert h.call(adapt_event("http_api_v2.json", "GET", "/healthz"))["statusCode"] == 200


def test_a_failing_degraded_hook_is_a_500_tagged_model_error(make: Any) -> None:
    # GIVEN a model that cannot make the SLA and a degraded answer that crashes
    h = make(stage_p95_ms={"web": 50.0, "telemetry": 10.0, "model": 5000.0})

    def broken(payload: Any) -> dict[str, Any]:
        raise KeyError("lexicon")

    h.admission.hooks["intent"] = h.admission.hooks["intent"]._replace(degraded=broken)
    h.admission.per_route.clear()
    response = h.call(_intent())
    # THEN the request is a 500 (the agent's hook failed: not a capacity problem), tagged
    # model_error, with no internal detail in the body
    assert response["statusCode"] == 500 and response["headers"]["x-warmstart-path"] == "shed"
    body = json.loads(response["body"])
    assert body["error"] == "internal_error" and "lexicon" not in body["message"]
    assert h.preload.wait("telemetry", 10)  # the cold request is logged once Powertools is in
    (line,) = [x for x in h.log_lines() if x.get("failure")]
    assert line["failure"] == "model_error" and line["path"] == "shed"


# -- small APIs -------------------------------------------------------------------------------


def test_preloader_reports_progress_and_failures() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, _clock_ms())

    def boom() -> None:
        raise ValueError("no")

    preload = Preloader([Stage("a", lambda: 1), Stage("b", boom)], env, _clock_ms)
    assert preload.stage_names == ("a", "b")
    assert preload.progress() == (("a", None, None), ("b", None, None))
    preload.run()
    (_, a_start, a_end), (_, b_start, _) = preload.progress()
    assert a_start is not None and a_end is not None and a_start <= a_end <= (b_start or 0.0)
    assert preload.failed("b") and not preload.failed("a") and not preload.ready("b")


def test_local_failed_carries_its_own_tag_into_the_outcome() -> None:
    def run_local(wait_ms: float) -> Any:
        raise LocalFailed("model failed", FailureTag.MODEL_ERROR)

    request = RequestInfo("/r", "P0", 2000.0, 0.0, degradable=True)
    out = serve(request, env=lambda: EnvState(ModelState.READY, 0.0, 10.0, 10.0), level="L0",
                clock_ms=lambda: 0.0, run_local=run_local, run_degraded=lambda: "cheap")
    assert out.response == "cheap" and out.failure_tag == "model_error"
    assert issubclass(LocalFailed, LocalUnavailable)


def test_tracker_refresh_every_bounds_the_lag() -> None:
    tracker = LatencyTracker(10.0, window=64, min_samples=1, refresh_every=4)
    tracker.observe(10.0)
    assert tracker.p95_ms == 10.0
    for _ in range(3):
        tracker.observe(500.0)
    assert tracker.p95_ms == 10.0  # cached: 3 observations since the last sort
    tracker.observe(500.0)
    assert tracker.p95_ms == 500.0
    with pytest.raises(ValueError, match="refresh_every"):
        LatencyTracker(10.0, refresh_every=0)


def test_overflow_client_close_drops_and_closes_its_clients() -> None:
    built: list[Any] = []

    class FakeClient:
        closed = False

        def close(self) -> None:
            self.closed = True

    def factory(connect_s: float, read_s: float) -> FakeClient:
        built.append(FakeClient())
        return built[-1]

    client = OverflowClient("ep", client_factory=factory)
    client.prewarm(1000.0)
    assert client.client_ready and len(built) == 1
    client.close()
    assert built[0].closed and not client.client_ready
    client.prewarm(1000.0)
    assert len(built) == 2


def test_request_body_decodes_plain_and_base64() -> None:
    assert request_body({"body": "héllo"}) == "héllo".encode()
    assert request_body({"body": base64.b64encode(b"\x00\x01").decode(), "isBase64Encoded": True}) == b"\x00\x01"
    assert request_body({"body": None}) == b""


def test_telemetry_emits_admission_metrics() -> None:
    out = io.StringIO()
    config = RuntimeConfig(service_name=f"admit-metrics-{uuid.uuid4().hex[:8]}")
    telemetry = Telemetry(config, stream=out)
    assert not telemetry.loaded
    telemetry.load()
    assert telemetry.loaded
    from functions.runtime.telemetry import InvocationRecord

    record = InvocationRecord("r1", "POST /v1/intent", "overflow")
    import contextlib

    emf = io.StringIO()
    with contextlib.redirect_stdout(emf):
        telemetry.request_done(record, status=200, duration_ms=5.0, cold_start=False,
                               init_type="on-demand", environment_id="e", init_duration_ms=None,
                               now_ms=0.0, overflow_ms=42.0, sla_breach=True)
        record2 = InvocationRecord("r2", "POST /v1/intent", "degraded")
        telemetry.request_done(record2, status=200, duration_ms=5.0, cold_start=False,
                               init_type="on-demand", environment_id="e", init_duration_ms=None,
                               now_ms=0.0)
    names = []
    for line in emf.getvalue().splitlines():
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            names += [m["Name"] for m in directive["Metrics"]]
            if any(m["Name"] == "OverflowLatency" for m in directive["Metrics"]):
                assert doc["OverflowLatency"] in (42.0, [42.0])
    assert {"OverflowLatency", "SlaBreaches", "Degradations", "Requests"} <= set(names)
