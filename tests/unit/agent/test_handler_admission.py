"""The handler with SLA-aware admission: cold start + overflow, degradation levels, bad input.

Cold starts run the real handler module in a fresh subprocess (a new execution environment,
``AWS_LAMBDA_INITIALIZATION_TYPE=on-demand``) whose overflow endpoint is the real local GPU
endpoint server (``python -m functions.gpu_endpoint``) reached through the real boto3
``sagemaker-runtime`` client with ``endpoint_url``. Level tests use the session's handler
(preload done) and switch the static level the handler falls back to without a warmer.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from functions.runtime.admission import (
    HANDLER_POLICY,
    NO_OVERFLOW,
    EnvState,
    ModelState,
    RequestInfo,
    arrival_ms_from_event,
    decide,
    ready_local_fits,
)
from functions.runtime.admission import Path as AdmissionPath
from functions.runtime.agent import BadRequest
from functions.runtime.agent_handler import AgentHandler
from functions.runtime.contract.levels import Level
from functions.runtime.dispatch import arrival_ms_of
from functions.runtime.events import parse_http_event
from tests.conftest import LambdaContext, adapt_event, load_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of, runtime_with, timings_of

REPO = Path(__file__).resolve().parents[3]
ENDPOINT = "warmstart-overflow"
SLA_MS = 2000.0
ERROR_KEYS = {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}

# The child: stamps the first request's arrival BEFORE importing the handler (so the init phase
# counts against the SLA, as on Lambda), then answers the planned requests in order.
CHILD = r"""
import json, os, sys, time
ARRIVAL_MS = time.time() * 1000.0
sys.path.insert(0, os.getcwd())
from tests.conftest import LambdaContext, adapt_event
from functions.agent.handler import handler as h

plan = json.loads(sys.argv[1])
out = []
for step in plan:
    if step.get("wait_preload"):
        out.append({"preload_done": h.preload.wait_all(120.0)})
        continue
    event = adapt_event("http_api_v2.json", step["method"], step["path"], step.get("body"))
    arrival = ARRIVAL_MS if not out else time.time() * 1000.0
    event["requestContext"]["timeEpoch"] = int(arrival)
    response = h(event, LambdaContext())
    overflow = h.overflow
    out.append({
        "status": response["statusCode"],
        "headers": {k.lower(): v for k, v in response.get("headers", {}).items()},
        "body": json.loads(response["body"]),
        "elapsed_ms": time.time() * 1000.0 - int(arrival),
        "model_ready": h.preload.ready("model"),
        "overflow_successes": overflow.latency.count if overflow is not None else None,
        "breaker": str(overflow.breaker.state) if overflow is not None else None,
    })
sys.stdout.write("CHILD_RESULT " + json.dumps(out) + "\n")
sys.stdout.flush()
h.preload.wait_all(120.0)  # let the preload finish: onnxruntime must not be torn down mid-load
os._exit(0)
"""

INTENT = {"method": "POST", "path": "/v1/intent", "body": {"text": "where is my package"}}


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_LAMBDA_"))}
    env.update({
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand", "WARMSTART_SLA_MS": str(int(SLA_MS)),
        "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "ORT_DISABLE_TELEMETRY": "1",
        "POWERTOOLS_SERVICE_NAME": "warmstart-admission-test",
    })
    env.update(extra)
    return env


def run_child(plan: list[dict[str, Any]], **env: str) -> tuple[list[dict[str, Any]], str]:
    """Run the plan in a fresh on-demand execution environment; (results, stdout)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(plan)], cwd=REPO,
                          env=_child_env(**env), capture_output=True, text=True, timeout=180,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("CHILD_RESULT "))
    return json.loads(line[len("CHILD_RESULT "):]), proc.stdout


def log_lines(stdout: str) -> list[dict[str, Any]]:
    """The Powertools JSON log lines (not EMF blobs) of a child's stdout."""
    lines = []
    for raw in stdout.splitlines():
        if raw.startswith("{") and '"_aws"' not in raw:
            lines.append(json.loads(raw))
    return lines


def emf_metrics(stdout: str) -> list[str]:
    """Names of the EMF metrics a child emitted."""
    names = []
    for raw in stdout.splitlines():
        if raw.startswith("{") and '"_aws"' in raw:
            doc = json.loads(raw)
            for directive in doc["_aws"]["CloudWatchMetrics"]:
                names += [m["Name"] for m in directive["Metrics"]]
    return names


@pytest.fixture(scope="module")
def gpu_endpoint() -> Iterator[str]:
    """The real local GPU endpoint server (CPU provider here), stopped after the module."""
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1",
           "WARMSTART_GPU_PROVIDERS": "CPUExecutionProvider"}
    proc = subprocess.Popen([sys.executable, "-m", "functions.gpu_endpoint", "--port", "0",
                             "--endpoint-name", ENDPOINT], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("WARMSTART_GPU_ENDPOINT_URL="), line
        yield line.split("=", 1)[1]
    finally:
        proc.terminate()
        proc.wait(10)


def _dead_url() -> str:
    """A local URL nobody listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- cold start -------------------------------------------------------------------------------


def test_cold_start_first_request_overflows_then_later_ones_run_locally(gpu_endpoint: str) -> None:
    """GIVEN an on-demand cold start whose model cannot be ready within the 2 s SLA,
    WHEN the first request arrives, THEN it is answered by the GPU endpoint within its SLA
    while the preload goes on; bad bodies meanwhile are 4xx and never overflowed; once the
    preload is done the same environment answers locally."""
    plan = [
        INTENT,
        {"method": "POST", "path": "/v1/intent", "body": "text=not+json"},
        {"method": "POST", "path": "/v1/intent", "body": {"text": "order " * 400}},
        {"method": "POST", "path": "/v1/intent", "body": {"text": "   "}},
        {"wait_preload": True},
        INTENT,
        INTENT,
    ]
    # finish_preload off: the invocation returns as soon as the overflow answer is in. The
    # model "cannot be ready": a deployed calibration says it takes 20 s (here it loads in about
    # 0.2 s, and without the calibration the first request's bounded wait for the unmeasured
    # model races its load: local or overflow by a few ms, tested apart below)
    results, stdout = run_child(plan, WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                WARMSTART_OVERFLOW_ENDPOINT_URL=gpu_endpoint,
                                WARMSTART_FINISH_PRELOAD="off",
                                WARMSTART_CALIBRATION=_slow_model_calibration())
    first, not_json, too_long, blank, waited, *later = results

    assert first["model_ready"] is False  # the preload was still going on
    assert first["status"] == 200 and first["headers"]["x-warmstart-path"] == "overflow"
    assert first["body"]["intent"] == "check_order_status"
    assert first["body"]["model"] == "all-MiniLM-L6-v2-int8" and first["body"]["degraded"] is False
    assert "overflow;dur=" in first["headers"]["server-timing"]
    assert first["elapsed_ms"] < SLA_MS
    assert first["overflow_successes"] == 1

    for bad, status in ((not_json, 400), (too_long, 413), (blank, 422)):
        assert bad["status"] == status and bad["headers"]["x-warmstart-path"] == "local"
        assert set(bad["body"]) == ERROR_KEYS
        assert bad["overflow_successes"] == 1  # no further call reached the endpoint

    assert waited == {"preload_done": True}
    for answer in later:
        assert answer["status"] == 200 and answer["headers"]["x-warmstart-path"] == "local"
        assert answer["body"]["intent"] == first["body"]["intent"]
        assert answer["body"]["scores"] == pytest.approx(first["body"]["scores"], abs=1e-3)
        assert answer["overflow_successes"] == 1

    logs = log_lines(stdout)
    overflowed = [x for x in logs if x.get("path") == "overflow"]
    assert len(overflowed) == 1 and overflowed[0]["cold_start"] is True
    # local cannot fit (the calibration's 20 s model): straight to the overflow, no wait passed
    # over; the only failures are the three bad requests
    assert [x["failure"] for x in logs if "failure" in x] == ["bad_request"] * 3
    assert "passed_over" not in overflowed[0]
    assert "OverflowLatency" in emf_metrics(stdout)


def test_an_unmeasured_model_is_not_waited_for_the_cold_request_overflows_in_full(
        gpu_endpoint: str) -> None:
    """GIVEN the reference agent as shipped (no stage_p95_ms, no calibration: its app and model
    are stages nobody measured), WHEN a cold start's first request arrives, THEN it is not
    degraded for them (they are assumed to fit) but not held for them either: it overflows at
    once (`UNKNOWN_STAGE_WAIT_MS` 0, issue 20) and gets a full answer within its SLA, no
    local wait passed over; only an environment whose app and model were already ready when
    it arrived answers locally; never a failed request."""
    (first,), stdout = run_child([INTENT], WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                 WARMSTART_OVERFLOW_ENDPOINT_URL=gpu_endpoint,
                                 WARMSTART_FINISH_PRELOAD="off")
    path = first["headers"]["x-warmstart-path"]
    assert first["status"] == 200 and path in ("local", "overflow"), first
    assert first["elapsed_ms"] < SLA_MS and first["body"].get("degraded") is not True
    logs = log_lines(stdout)
    assert [x["failure"] for x in logs if "failure" in x] == []
    [request] = [x for x in logs if x.get("path") == path]
    assert "passed_over" not in request  # no local wait that ran out first
    if path == "local":
        assert first["model_ready"] is True


def test_cold_start_overflow_spends_the_sla_slack_finishing_the_preload(gpu_endpoint: str) -> None:
    """GIVEN finish_preload on (the default) and a cold start whose model is not ready,
    WHEN the first request overflows, THEN the invocation keeps waiting for the preload with
    what is left of the SLA (Lambda freezes the environment after it returns) and still answers
    within the SLA; the wait shows in Server-Timing, and the next request runs locally without
    any explicit wait for the preload."""
    # the model "is not ready": a deployed calibration says it takes 20 s (see the test above)
    results, _ = run_child([INTENT, INTENT], WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                           WARMSTART_OVERFLOW_ENDPOINT_URL=gpu_endpoint,
                           WARMSTART_CALIBRATION=_slow_model_calibration())
    first, second = results
    assert first["status"] == 200 and first["headers"]["x-warmstart-path"] == "overflow", first
    assert "preload;dur=" in first["headers"]["server-timing"]
    assert first["elapsed_ms"] < SLA_MS
    # either the model finished within the slack, or the wait used the budget to its end
    assert first["model_ready"] or first["elapsed_ms"] >= SLA_MS - 2 * 100.0 - 50.0, first
    if first["model_ready"]:
        assert second["headers"]["x-warmstart-path"] == "local", second
        assert second["overflow_successes"] == 1


def _slow_model_calibration() -> str:
    """A deployed calibration (``WARMSTART_CALIBRATION``) in which the intent model takes 20 s
    to load: local cannot fit any SLA here, so a cold start's first request overflows. Without
    it the model (about 0.2 s here) fits and the first request waits for it (local first)."""
    return json.dumps({
        "version": 1, "agent": "intent", "memory_mb": 2048, "machine": "test host",
        "measured_at": datetime.now(UTC).isoformat(), "stage_p95_ms": {"model": 20_000.0},
        "overflow_p95_ms": None})


def test_cold_start_with_a_dead_endpoint_degrades_within_the_sla() -> None:
    """GIVEN the overflow endpoint refuses connections and a model that cannot load within the
    SLA, WHEN a cold start's first request arrives, THEN it still gets an answer within its SLA
    (the lexical degraded answer), and the one failure tag logged is the endpoint's."""
    results, stdout = run_child([INTENT], WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                WARMSTART_OVERFLOW_ENDPOINT_URL=_dead_url(),
                                WARMSTART_CALIBRATION=_slow_model_calibration())
    (first,) = results
    assert first["elapsed_ms"] < SLA_MS
    path = first["headers"]["x-warmstart-path"]
    assert path in ("degraded", "shed"), first
    if path == "degraded":
        assert first["status"] == 200 and first["body"]["degraded"] is True
        assert first["body"]["model"] == "lexical-tfidf" and first["body"]["level"] == "L0"
    else:
        assert first["status"] == 503 and "retry-after" in first["headers"]
    failures = [x["failure"] for x in log_lines(stdout) if "failure" in x]
    assert failures == ["tool_unavailable"]
    assert "Degradations" in emf_metrics(stdout) or path == "shed"


def test_cold_start_without_overflow_answers_degraded_not_late() -> None:
    """GIVEN no overflow endpoint, WHEN the model cannot be ready within the SLA, THEN the
    first request gets the degraded answer in time instead of waiting past its SLA."""
    (first,), _ = run_child([INTENT])
    assert first["elapsed_ms"] < SLA_MS
    assert first["headers"]["x-warmstart-path"] in ("degraded", "local")
    assert first["status"] == 200 and first["body"]["intent"] == "check_order_status"


# -- degradation levels through the handler ---------------------------------------------------


@pytest.fixture
def level(agent: AgentHandler) -> Iterator[Any]:
    """Set the static degradation level the handler uses while no warmer parameter exists."""
    assert agent.level_reader is None  # no WARMSTART_DEGRADATION_PARAMETER in this process
    previous = agent.current_level()

    def set_level(value: str) -> None:
        # the static level (WARMSTART_DEGRADATION_LEVEL, parsed once) admission reads per request
        agent._static_level = Level(value)

    yield set_level
    agent._static_level = previous


def _call(agent: AgentHandler, method: str, path: str, body: Any = None,
          name: str = "http_api_v2.json") -> dict[str, Any]:
    return agent(adapt_event(name, method, path, body), LambdaContext())


@pytest.mark.parametrize("name", ["http_api_v2.json", "rest_api_v1.json", "alb.json"])
def test_l1_turns_p2_routes_off_and_capabilities_says_so(
    agent: AgentHandler, level: Any, logs: LogCollector, name: str
) -> None:
    level("L1")
    report = _call(agent, "POST", "/v1/report", {"texts": ["where is my package"]}, name=name)
    assert report["statusCode"] == 503 and body_of(report)["error"] == "feature_disabled"
    assert headers_of(report)["retry-after"] == "60"
    response = _call(agent, "GET", "/debug/resource", name=name)
    assert response["statusCode"] == 503
    headers = headers_of(response)
    assert headers["x-warmstart-path"] == "shed" and headers["retry-after"] == "60"
    body = body_of(response)
    assert set(body) == ERROR_KEYS and body["error"] == "feature_disabled" and body["level"] == "L1"
    assert body["estimated_recovery_at"].endswith("Z")
    assert logs.failures() == []  # a policy outcome, not a failure

    caps = body_of(_call(agent, "GET", "/capabilities"))
    assert caps["level"] == "L1" and "report" in caps["disabled"]
    # P0 / P1 still served at L1
    assert _call(agent, "POST", "/v1/intent", {"text": "where is my package"})["statusCode"] == 200
    assert _call(agent, "GET", "/healthz")["statusCode"] == 200


def test_capabilities_lists_what_is_off_at_the_level(agent: AgentHandler, level: Any) -> None:
    level("L0")
    caps = body_of(_call(agent, "GET", "/capabilities"))
    assert caps["disabled"] == [] and caps["degraded"] == []
    level("L2")
    caps = body_of(_call(agent, "GET", "/capabilities"))
    assert caps["degraded"] == ["intent"]


def test_l2_answers_the_intent_route_cheaply_marked_degraded(agent: AgentHandler, level: Any) -> None:
    level("L2")
    response = _call(agent, "POST", "/v1/intent", {"text": "I was charged twice on my card"})
    assert response["statusCode"] == 200
    assert headers_of(response)["x-warmstart-path"] == "degraded"
    body = body_of(response)
    assert body["degraded"] is True and body["level"] == "L2" and body["model"] == "lexical-tfidf"
    assert set(body["scores"]) >= {body["intent"]} or body["intent"] == "unknown"
    # routes without a cheaper answer still run at full precision
    assert headers_of(_call(agent, "GET", "/healthz"))["x-warmstart-path"] == "local"


def test_l3_sheds_p1_requests_with_retry_after_and_answers_p0(agent: AgentHandler, level: Any) -> None:
    level("L3")
    response = _call(agent, "GET", "/healthz")  # P1
    assert response["statusCode"] == 503
    headers = headers_of(response)
    assert headers["x-warmstart-path"] == "shed" and int(headers["retry-after"]) >= 1
    out = body_of(response)
    assert out["error"] == "overloaded" and out["level"] == "L3" and out["estimated_recovery_at"]
    # a P0 request the handler sees was admitted by Lambda: L3 does not shed it (issue 19)
    response = _call(agent, "POST", "/v1/intent", {"text": "hello"})
    assert response["statusCode"] == 200
    assert headers_of(response)["x-warmstart-path"] == "local"


def test_bad_body_is_refused_before_admission_even_at_l2(agent: AgentHandler, level: Any) -> None:
    level("L2")  # L2 would answer the route cheaply: the bad body must still be a 4xx
    response = _call(agent, "POST", "/v1/intent", "{oops")
    assert response["statusCode"] == 400 and headers_of(response)["x-warmstart-path"] == "local"
    assert body_of(response)["error"] == "bad_request"


def test_a_request_older_than_its_sla_is_shed(agent: AgentHandler) -> None:
    event = adapt_event("http_api_v2.json", "POST", "/v1/intent", {"text": "hello"})
    event["requestContext"]["timeEpoch"] = int(time.time() * 1000 - SLA_MS - 500)
    response = agent(event, LambdaContext())
    assert response["statusCode"] == 503
    assert body_of(response)["error"] == "sla_unreachable"
    assert headers_of(response)["x-warmstart-path"] == "shed"


def test_debug_resource_shows_admission_state(agent: AgentHandler) -> None:
    from mangum import Mangum

    from functions.agent.app import create_app

    _call(agent, "POST", "/v1/intent", {"text": "where is my package"})
    app = create_app(runtime_with(agent, debug_resource=True))
    body = body_of(Mangum(app, lifespan="off")(adapt_event("http_api_v2.json", "GET",
                                                           "/debug/resource"), None))
    assert body["local_p95_ms"]["intent"] > 0
    assert body["degradation_level"] == "L0"
    assert body["admission"] == "on"
    assert body["overflow"] is None  # not configured in this process
    assert agent.admission is not None and body["local_p95_ms"] == pytest.approx(
        {k: t.p95_ms for k, t in agent.admission.local.items()})


# -- the warm path agrees with the decision table ----------------------------------------------


@pytest.mark.parametrize("tier", ["P0", "P1", "P2"])
@pytest.mark.parametrize("degradable", [False, True])
@pytest.mark.parametrize("lvl", list(Level))
@pytest.mark.parametrize("budget_ms", [-5.0, 0.0, 99.0, 100.0, 149.0, 150.0, 151.0, 2000.0])
def test_ready_local_fits_agrees_with_decide(tier: str, degradable: bool, lvl: Level,
                                             budget_ms: float) -> None:
    infer_p95_ms = 50.0
    request = RequestInfo("/r", tier, 2000.0, 0.0, degradable)  # type: ignore[arg-type]
    now_ms = 2000.0 - budget_ms
    env = EnvState(ModelState.READY, 0.0, infer_p95_ms)
    decision = decide(request, env, NO_OVERFLOW, lvl, now_ms, policy=HANDLER_POLICY)
    fast = ready_local_fits(tier, degradable, lvl.rank, budget_ms, infer_p95_ms, HANDLER_POLICY)
    assert fast == (decision.path is AdmissionPath.LOCAL)


@pytest.mark.parametrize("name", ["http_api_v2.json", "rest_api_v1.json", "function_url.json",
                                  "alb.json"])
@pytest.mark.parametrize("age_ms", [None, -100, 0, 1500, 29_999, 30_001])
def test_the_dispatchers_arrival_matches_arrival_ms_from_event(name: str, age_ms: int | None) -> None:
    event = load_event(name)
    now = 1_800_000_000_000.0
    context = event["requestContext"]
    key = "timeEpoch" if "timeEpoch" in context else "requestTimeEpoch"
    if age_ms is not None and name != "alb.json":
        context[key] = now - age_ms
    assert arrival_ms_of(parse_http_event(event), now) == arrival_ms_from_event(event, now)


# -- the level from the warmer's SSM parameter ------------------------------------------------


@pytest.fixture(scope="module")
def ssm_url() -> Iterator[str]:
    """A real moto server (SSM API over HTTP) on an ephemeral port, stopped after the module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_level_comes_from_ssm_after_the_preload_never_blocking_the_cold_request(ssm_url: str) -> None:
    """GIVEN the warmer wrote L3 to the SSM parameter, WHEN a cold environment answers its
    first request, THEN it uses the static level (no boto3 import or SSM call on that request's
    path); once the preload's first read is done, new requests are shed at L3."""
    import boto3

    name = f"/warmstart/test-{uuid.uuid4().hex[:8]}/degradation-level"
    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=ssm_url,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    ssm.put_parameter(Name=name, Value="L3", Type="String")
    plan = [{"method": "GET", "path": "/healthz"}, {"wait_preload": True},
            {"method": "GET", "path": "/healthz"}]
    results, _ = run_child(plan, WARMSTART_DEGRADATION_PARAMETER=name,
                           AWS_ENDPOINT_URL_SSM=ssm_url)
    first, waited, later = results
    assert first["status"] == 200 and first["headers"]["x-warmstart-path"] == "local"
    assert waited == {"preload_done": True}
    assert later["status"] == 503 and later["body"]["error"] == "overloaded"
    assert later["body"]["level"] == "L3" and later["headers"]["retry-after"] == "60"


# -- tool_ms: the simulated downstream tool call ----------------------------------------------




def test_warm_request_whose_tool_call_would_breach_the_sla_gets_the_degraded_answer(
    agent: AgentHandler, level: Any
) -> None:
    """GIVEN a warm environment (SLA 2 s, 100 ms headroom), WHEN a request asks for a tool call
    that fits, THEN it runs locally with the tool time in Server-Timing; WHEN the tool call
    would take the local answer past the budget, THEN admission picks the degraded answer,
    which skips the tool call (no wait)."""
    level("L0")
    sla = agent.config.sla_ms
    ok = _call(agent, "POST", "/v1/intent", {"text": "where is my package", "tool_ms": 120})
    assert ok["statusCode"] == 200 and headers_of(ok)["x-warmstart-path"] == "local"
    assert timings_of(ok)["tool"] >= 120.0
    started = time.perf_counter()
    over = _call(agent, "POST", "/v1/intent", {"text": "where is my package",
                                               "tool_ms": sla - 60.0})
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    assert over["statusCode"] == 200 and headers_of(over)["x-warmstart-path"] == "degraded"
    assert body_of(over)["degraded"] is True and "tool" not in timings_of(over)
    assert elapsed_ms < sla - 60.0  # the tool call was not made
    # an invalid tool_ms is still the app's 422 (the warm-path peek never decides validity)
    bad = _call(agent, "POST", "/v1/intent", {"text": "hi", "tool_ms": -1})
    assert bad["statusCode"] == 422


def test_intent_payload_forwards_tool_ms_to_the_overflow_endpoint() -> None:
    """The route's hooks: ``validate`` keeps ``tool_ms`` in the payload (what the overflow
    endpoint gets, so it makes the same tool call) and ``downstream_ms`` reads it back for
    admission; a bad ``tool_ms`` is refused by ``validate`` (422) before any path runs."""
    from functions.agent import hooks

    payload = hooks.intent_payload({"text": "hello", "tool_ms": 250})
    assert payload == {"text": "hello", "tool_ms": 250.0}
    assert hooks.intent_downstream_ms(payload) == 250.0
    plain = hooks.intent_payload({"text": "hello"})
    assert plain == {"text": "hello"} and hooks.intent_downstream_ms(plain) == 0.0
    for body in ({"text": "x", "tool_ms": "9"}, {"text": "x", "tool_ms": 20_000},
                 {"text": "x", "tool_ms": -1}, {"text": "x", "tool_ms": True}):
        with pytest.raises(BadRequest, match="tool_ms") as info:
            hooks.intent_payload(body)
        assert info.value.status == 422


def test_cold_start_overflow_makes_the_same_tool_call(gpu_endpoint: str) -> None:
    """GIVEN a cold start whose first request carries ``tool_ms``, WHEN it overflows, THEN the
    GPU endpoint makes the tool call too (the overflow takes at least ``tool_ms``), and the
    answer is still within the SLA."""
    tool_ms = 300.0
    # a wider SLA than the module's: with the seeds (client 800 + call 300 + the tool 300 ms
    # and the degraded reserve) 2 s leaves too little slack on a loaded 2-core host, and this
    # test is about where the tool call runs, not about the budget or the preload's end
    # (both tested above): finish-preload off, so the answer returns with the overflow
    # local first (issue 19): the cold start overflows only because a calibration says its
    # model takes 20 s to load, so local cannot fit the SLA
    sla_ms = 4000.0
    slow_model = _slow_model_calibration()
    plan = [{"method": "POST", "path": "/v1/intent",
             "body": {"text": "where is my package", "tool_ms": tool_ms}}]
    (first,), _ = run_child(plan, WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                            WARMSTART_OVERFLOW_ENDPOINT_URL=gpu_endpoint,
                            WARMSTART_SLA_MS=str(int(sla_ms)), WARMSTART_FINISH_PRELOAD="off",
                            WARMSTART_CALIBRATION=slow_model)
    assert first["status"] == 200 and first["headers"]["x-warmstart-path"] == "overflow", first
    timing = dict(part.strip().split(";dur=") for part in
                  first["headers"]["server-timing"].split(","))
    assert float(timing["overflow"]) >= tool_ms
    assert tool_ms <= first["elapsed_ms"] < sla_ms


# -- WARMSTART_ADMISSION=off: the plain on-demand baseline ------------------------------------


def test_admission_off_waits_for_the_local_model_and_never_overflows_degrades_or_sheds(
    gpu_endpoint: str,
) -> None:
    """GIVEN WARMSTART_ADMISSION=off with an overflow endpoint configured, static level L3 and
    an SLA the cold start cannot meet, WHEN the first request arrives, THEN it waits for the
    local model (past its SLA) and is answered locally at full precision; bad input is still a
    4xx; later requests run locally too."""
    plan = [INTENT, {"method": "POST", "path": "/v1/intent", "body": "text=not+json"}, INTENT,
            {"method": "GET", "path": "/healthz"}]
    results, stdout = run_child(plan, WARMSTART_ADMISSION="off", WARMSTART_SLA_MS="200",
                                WARMSTART_DEGRADATION_LEVEL="L3",
                                WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                                WARMSTART_OVERFLOW_ENDPOINT_URL=gpu_endpoint)
    first, bad, later, health = results
    assert first["status"] == 200 and first["headers"]["x-warmstart-path"] == "local", first
    assert first["body"]["degraded"] is False and first["body"]["model"] == "all-MiniLM-L6-v2-int8"
    assert first["model_ready"] is True and first["elapsed_ms"] > 200.0  # waited past its SLA
    assert first["overflow_successes"] is None  # no overflow client was even built
    assert bad["status"] == 400 and set(bad["body"]) == ERROR_KEYS
    assert later["status"] == 200 and later["headers"]["x-warmstart-path"] == "local"
    assert health["status"] == 200 and health["headers"]["x-warmstart-path"] == "local"
    assert "OverflowLatency" not in emf_metrics(stdout)


@pytest.fixture(scope="module")
def off_with_a_failed_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """WARMSTART_ADMISSION=off, the model folder missing: (the first answer, stdout)."""
    missing = tmp_path_factory.mktemp("model") / "missing"
    (first,), stdout = run_child([INTENT], WARMSTART_ADMISSION="off", WARMSTART_MODEL_DIR=str(missing))
    return first, stdout


def test_admission_off_with_a_model_that_failed_to_load_is_a_503_model_error(
    off_with_a_failed_model: tuple[dict[str, Any], str],
) -> None:
    first, stdout = off_with_a_failed_model
    assert first["status"] == 503 and set(first["body"]) == ERROR_KEYS, first
    assert first["headers"]["x-warmstart-path"] == "shed" and first["headers"]["retry-after"] == "1"
    assert first["model_ready"] is False
    assert [x["failure"] for x in log_lines(stdout) if "failure" in x] == ["model_error"]


def test_admission_off_503_for_a_failed_model_says_model_failed(
    off_with_a_failed_model: tuple[dict[str, Any], str],
) -> None:
    first, _ = off_with_a_failed_model
    assert first["body"]["error"] == "model_failed", first


def test_admission_switch_is_validated_at_init() -> None:
    proc = subprocess.run([sys.executable, "-c", "import functions.agent.handler"], cwd=REPO,
                          env=_child_env(WARMSTART_ADMISSION="maybe"), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode != 0
    assert "WARMSTART_ADMISSION='maybe' is not one of 'on', 'off'" in proc.stderr


# -- the SSM level refresh is off the request path ---------------------------------------------

STALLED_SSM_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from tests.conftest import LambdaContext, adapt_event
from functions.agent.handler import handler as h

assert h.preload.wait_all(120.0)
reader = h.level_reader
out = {"reads_after_preload": reader.reads, "level": str(h.current_level())}
reader._read_at = -1e12  # the cached level expired (instead of waiting out the 5 s TTL)
event = adapt_event("http_api_v2.json", "POST", "/v1/intent", {"text": "where is my package"})
t0 = time.perf_counter()
response = h(event, LambdaContext())
out["elapsed_ms"] = (time.perf_counter() - t0) * 1000.0
out["status"] = response["statusCode"]
out["body"] = json.loads(response["body"])
out["refreshing_after_request"] = reader.refreshing
out["joined"] = reader.wait_refresh(5.0)
out["reads"] = reader.reads
sys.stdout.write("CHILD_RESULT " + json.dumps(out) + "\n")
sys.stdout.flush()
os._exit(0)
"""


def test_a_stalled_ssm_never_blocks_a_request_and_keeps_the_static_level() -> None:
    """GIVEN the SSM endpoint stalls (accepts connections, never answers; the client gives up
    after 0.5 s) and the static level is L2, WHEN the preload's first read failed and a request
    arrives after the cached level expired, THEN the request is answered at L2 (degraded) at
    once while the refresh runs on its own thread, and ``tool_unavailable`` is logged once for
    the streak."""
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(16)
        url = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        proc = subprocess.run(
            [sys.executable, "-c", STALLED_SSM_CHILD], cwd=REPO, capture_output=True, text=True,
            timeout=180, check=False,
            env=_child_env(WARMSTART_DEGRADATION_PARAMETER="/warmstart/stalled/degradation-level",
                           WARMSTART_DEGRADATION_LEVEL="L2", AWS_ENDPOINT_URL_SSM=url))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("CHILD_RESULT "))
    out = json.loads(line[len("CHILD_RESULT "):])
    assert out["reads_after_preload"] == 1 and out["level"] == "L2"
    assert out["status"] == 200 and out["body"]["degraded"] is True and out["body"]["level"] == "L2"
    assert out["refreshing_after_request"] is True  # the read was still stalled...
    assert out["elapsed_ms"] < 400.0  # ...and the request did not wait for its 0.5 s timeout
    assert out["joined"] is True and out["reads"] == 2
    assert (proc.stdout + proc.stderr).count('"tag": "tool_unavailable"') == 1
