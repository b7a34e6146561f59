"""A production-style FastAPI app (``tests/agents/llm_app/``) runs unchanged behind `Agent`.

The app is written the usual way: a module-level ``app``, an ``httpx.AsyncClient`` made in its
``lifespan`` to a downstream LLM service, Pydantic models, ``Depends`` (the client from the
lifespan state, the agent's runtime through ``Depends(agent_runtime)``). Each test serves it
through the real handler (``agent.lambda_handler(env=...)``: the real preload, FastAPI and
Mangum) with real API Gateway event shapes from ``tests/data/events/``, and the downstream is
a real HTTP/1.1 server on 127.0.0.1 that the test starts (keep-alive on, so the client's pooled
connections live across invocations and threads), answers slowly or resets the connection
mid-answer when told to.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest
import snapshot_restore_py

from functions.runtime.agent import Agent
from functions.runtime.agent_handler import AgentHandler
from functions.runtime.lifespan import LifespanFailed
from tests.agents.llm_app import app as llm_app
from tests.agents.llm_app.handler import agent as declared
from tests.conftest import LambdaContext, adapt_event, load_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of

ERROR_KEYS = {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}


# -- the downstream LLM service: a real HTTP server on loopback ---------------------------------


class StubLLM:
    """``POST /v1/complete`` -> ``{"text", "model"}``; ``mode`` ``ok`` / ``slow`` (sleeps
    ``delay_s`` first) / ``reset`` (sends half an answer, then resets the connection)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.delay_s = 0.0
        self.requests = 0
        self.held = 0  # slow-mode requests not answered yet
        self.release = threading.Event()  # set: slow-mode requests answer at once
        self.peers: set[tuple[str, int]] = set()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the client pools its connections

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                prompt = json.loads(self.rfile.read(length))["prompt"]
                stub.requests += 1
                stub.peers.add(self.client_address)
                if stub.mode == "slow":
                    stub.held += 1
                    stub.release.wait(stub.delay_s)
                    stub.held -= 1
                body = json.dumps({"text": f"answer to {prompt}", "model": "stub-llm-1"}).encode()
                if stub.mode == "reset":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
                    self.wfile.flush()
                    # SO_LINGER 0: close() sends a RST, the answer is cut mid-body
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the reset mode's half-closed sockets: expected, not worth a traceback

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def stub_service() -> Iterator[StubLLM]:
    with StubLLM() as stub:
        yield stub


@pytest.fixture
def stub(stub_service: StubLLM, monkeypatch: pytest.MonkeyPatch) -> StubLLM:
    stub_service.mode, stub_service.delay_s, stub_service.requests = "ok", 0.0, 0
    stub_service.release.clear()
    stub_service.peers.clear()
    monkeypatch.setenv("LLM_BASE_URL", stub_service.url)  # the app reads its own settings
    monkeypatch.delenv("LLM_STARTUP_FAILS", raising=False)
    monkeypatch.delenv("LLM_STARTUP_HANGS", raising=False)
    monkeypatch.setenv("LLM_TIMEOUT_S", "5")
    return stub_service


# -- the handler ----------------------------------------------------------------------------------


class Served:
    """Handlers made by one test, with a collector on each one's Powertools logger; shut down
    (the app's lifespan shutdown) at teardown."""

    def __init__(self) -> None:
        self.handlers: list[AgentHandler] = []
        self.logs: list[tuple[logging.Logger, LogCollector]] = []

    def handler(self, init_type: str = "on-demand", agent: Agent = declared,
                **env: str) -> tuple[AgentHandler, LogCollector]:
        name = f"llm-test-{uuid.uuid4().hex[:8]}"
        logger, collector = logging.getLogger(name), LogCollector()
        logger.addHandler(collector)
        self.logs.append((logger, collector))
        handler = agent.lambda_handler(env={
            "AWS_LAMBDA_INITIALIZATION_TYPE": init_type, "WARMSTART_SLA_MS": "2000",
            "WARMSTART_FINISH_PRELOAD": "off", "AWS_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": name, **env})
        self.handlers.append(handler)
        return handler, collector

    def close(self) -> None:
        for handler in self.handlers:
            handler.preload.wait_all(30)
            handler.shutdown()
        for logger, collector in self.logs:
            logger.removeHandler(collector)


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


def ask(handler: AgentHandler, question: str = "what is warm?", *, path: str = "/v1/ask",
        source: str = "http_api_v2.json") -> dict[str, Any]:
    return handler(adapt_event(source, "POST", path, {"question": question}), LambdaContext())


def get(handler: AgentHandler, path: str, source: str = "http_api_v2.json") -> dict[str, Any]:
    return handler(adapt_event(source, "GET", path), LambdaContext())


def ready(handler: AgentHandler) -> AgentHandler:
    assert handler.preload.wait("web", 30), "the web stage did not finish in 30 s"
    return handler


# -- lifespan ----------------------------------------------------------------------------------


def test_the_lifespan_runs_once_in_the_on_demand_preload_and_its_state_reaches_every_request(
        stub: StubLLM, served: Served) -> None:
    """GIVEN the app on an on-demand init, WHEN three requests are served, THEN its lifespan
    started once (in the background preload), every request used the lifespan-made client
    through the lifespan state and reached the AgentRuntime through Depends; shutdown closes
    the client once."""
    before = dict(llm_app.LIFECYCLE)
    handler, failures = served.handler()
    assert handler.preload.thread is not None  # the init returned; the preload runs behind it
    ready(handler)  # (a cold request on a loaded machine may be degraded: not this test's point)
    assert llm_app.LIFECYCLE["startups"] == before["startups"] + 1  # in the background preload
    answers = [ask(handler, f"q{i}") for i in range(3)]
    for i, response in enumerate(answers):
        assert response["statusCode"] == 200, response
        assert headers_of(response)["x-warmstart-path"] == "local"
        body = body_of(response)
        assert body["answer"] == f"answer to q{i}" and body["model"] == "stub-llm-1"
        assert body["agent"] == "llm_app"  # Depends(agent_runtime) in a module-level app
        assert 0 < body["budget_left_ms"] < 1500  # the route's SLA, counting down
    health = body_of(get(handler, "/healthz"))
    assert health == {"status": "ok", "llm": stub.url, "closed": False, "state": "lifespan"}
    assert llm_app.LIFECYCLE["startups"] == before["startups"] + 1  # once, not per invocation
    assert failures.failures() == []
    client = llm_app.app.state.llm
    handler.shutdown()
    handler.shutdown()  # idempotent
    assert client.is_closed and llm_app.LIFECYCLE["shutdowns"] == before["shutdowns"] + 1


def test_provisioned_concurrency_runs_the_startup_before_the_first_invocation(
        stub: StubLLM, served: Served) -> None:
    before = llm_app.LIFECYCLE["startups"]
    handler, _ = served.handler("provisioned-concurrency")
    assert llm_app.LIFECYCLE["startups"] == before + 1  # in the init, before any request
    assert stub.requests == 0
    response = ask(handler, source="rest_api_v1.json")
    assert response["statusCode"] == 200 and body_of(response)["answer"] == "answer to what is warm?"


def test_a_startup_that_raises_makes_every_request_a_json_500_agent_misconfigured(
        stub: StubLLM, served: Served, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("LLM_STARTUP_FAILS", "1")
    with caplog.at_level(logging.ERROR, logger="warmstart"):
        handler, _ = served.handler()
        handler.preload.wait_all(30)
        for _ in range(2):
            response = ask(handler)
            assert response["statusCode"] == 500, response
            assert headers_of(response)["content-type"] == "application/json"
            body = body_of(response)
            assert set(body) == ERROR_KEYS and body["error"] == "agent_misconfigured"
    assert stub.requests == 0
    logged = [r for r in caplog.records if "lifespan startup raised" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None  # once, with the traceback
    text = logging.Formatter().formatException(logged[0].exc_info)
    assert "cannot reach the model registry" in text and "in lifespan" in text
    # a pre-paid init fails with it instead (as a declaration error does)
    with pytest.raises(LifespanFailed, match="cannot reach the model registry"):
        served.handler("provisioned-concurrency")


def test_a_startup_that_hangs_is_bounded_by_the_startup_timeout_then_misconfigured(
        stub: StubLLM, served: Served, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("LLM_STARTUP_HANGS", "1")
    agent = Agent(declared.name, app=declared.app, routes=declared.routes, startup_timeout_s=0.5)
    started = time.perf_counter()
    with caplog.at_level(logging.ERROR, logger="warmstart"):
        handler, _ = served.handler(agent=agent)
        response = get(handler, "/healthz")
    waited_s = time.perf_counter() - started
    assert response["statusCode"] == 500 and body_of(response)["error"] == "agent_misconfigured"
    assert waited_s < 0.5 + 1.5, waited_s  # the bound, plus the web stage's own imports
    assert any("did not complete within 0.5 s" in r.getMessage() for r in caplog.records)


# -- one event loop, any thread ---------------------------------------------------------------------


def test_the_handler_called_from_many_threads_uses_one_loop_and_the_same_client(
        stub: StubLLM, served: Served) -> None:
    """The issue's case: six sequential threads (Python reuses their ids) gave
    [200, 500, 200, 200, 200, 500]; then calls from concurrent threads."""
    handler = ready(served.handler()[0])
    statuses: list[int] = []
    for i in range(6):
        thread = threading.Thread(target=lambda i=i: statuses.append(ask(handler, f"t{i}")["statusCode"]))
        thread.start()
        thread.join(30)
    assert statuses == [200] * 6
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda i: ask(handler, f"c{i}"), range(12)))
    assert [r["statusCode"] for r in concurrent] == [200] * 12
    assert sorted(body_of(r)["answer"] for r in concurrent) == sorted(f"answer to c{i}" for i in range(12))
    # one loop: the client's keep-alive connections served requests from every thread
    assert stub.requests == 18 and len(stub.peers) < 18


# -- failures inside the app ---------------------------------------------------------------------


def test_a_slow_downstream_is_cut_at_the_sla_and_answered_degraded(
        stub: StubLLM, served: Served) -> None:
    handler, failures = served.handler()
    ready(handler)
    assert ask(handler)["statusCode"] == 200  # warm, measured
    stub.mode, stub.delay_s = "slow", 30.0
    response = ask(handler)
    # answered while the downstream call was still unanswered: the app was cut, not waited for
    held = stub.held
    stub.release.set()
    assert held == 1, held
    assert response["statusCode"] == 200, response
    assert headers_of(response)["x-warmstart-path"] == "degraded"
    body = body_of(response)
    assert body["degraded"] is True and body["model"] == "none" and body["question"] == "what is warm?"
    assert failures.failures()[-1] == "downstream_timeout"


def test_the_off_baseline_never_cuts_a_slow_downstream_at_the_sla(
        stub: StubLLM, served: Served) -> None:
    """GIVEN WARMSTART_ADMISSION=off (the plain on-demand baseline, which ignores the SLA
    budget) and a downstream slower than the 2 s SLA, THEN the app is not cancelled at the
    budget: its own answer comes back, late, on path local."""
    handler, failures = served.handler(WARMSTART_ADMISSION="off")
    ready(handler)
    stub.mode, stub.delay_s = "slow", 2.5
    response = ask(handler)
    assert response["statusCode"] == 200, response
    assert headers_of(response)["x-warmstart-path"] == "local"
    assert body_of(response).get("degraded") is not True
    assert failures.failures() == []


def test_a_client_timeout_inside_a_degradable_route_is_degraded_tagged_downstream_timeout(
        stub: StubLLM, served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_TIMEOUT_S", "0.2")
    handler, failures = served.handler()
    ready(handler)
    stub.mode, stub.delay_s = "slow", 0.6
    started = time.perf_counter()
    response = ask(handler)
    assert (time.perf_counter() - started) < 1.0
    assert response["statusCode"] == 200 and headers_of(response)["x-warmstart-path"] == "degraded"
    assert failures.failures() == ["downstream_timeout"]
    # a non-degradable route: the JSON error contract, 504
    summary = ask(handler, path="/v1/summarize")
    assert summary["statusCode"] == 504 and headers_of(summary)["content-type"] == "application/json"
    assert body_of(summary)["error"] == "downstream_timeout" and set(body_of(summary)) == ERROR_KEYS


def test_a_downstream_that_resets_the_connection_mid_answer(stub: StubLLM, served: Served) -> None:
    handler, failures = served.handler()
    ready(handler)
    stub.mode = "reset"
    response = ask(handler)
    assert response["statusCode"] == 200 and headers_of(response)["x-warmstart-path"] == "degraded"
    summary = ask(handler, path="/v1/summarize")
    assert summary["statusCode"] == 502 and headers_of(summary)["content-type"] == "application/json"
    assert body_of(summary)["error"] == "tool_unavailable"
    assert failures.failures() == ["tool_unavailable", "tool_unavailable"]
    stub.mode = "ok"  # and the client recovers on the next request
    assert ask(handler)["statusCode"] == 200


def test_a_bug_in_a_route_without_a_degraded_answer_is_a_json_500_app_error(
        stub: StubLLM, served: Served) -> None:
    handler, failures = served.handler()
    ready(handler)
    response = get(handler, "/v1/boom")
    assert response["statusCode"] == 500 and headers_of(response)["content-type"] == "application/json"
    assert body_of(response)["error"] == "app_error" and set(body_of(response)) == ERROR_KEYS
    assert headers_of(response)["x-warmstart-path"] == "local"
    assert failures.failures() == ["app_error"]
    # bad input is still the app's own 422 from its Pydantic model, via the validate hook
    bad = handler(adapt_event("http_api_v2.json", "POST", "/v1/ask", {"question": ""}), LambdaContext())
    assert bad["statusCode"] == 422


# -- REST events behind a custom domain --------------------------------------------------------------


def rest_event(path: str, resource: str, params: dict[str, str] | None) -> dict[str, Any]:
    """A REST API (payload 1.0) event behind a custom domain mapped at ``/api``."""
    event = load_event("rest_api_v1.json")
    event.pop("version")  # a REST API's own events have no version
    event.update(path=path, httpMethod="GET", resource=resource, pathParameters=params, body=None,
                 queryStringParameters=None, multiValueQueryStringParameters=None)
    event["headers"] = {"Host": "api.example.com"}
    event["multiValueHeaders"] = {"Host": ["api.example.com"]}
    event["requestContext"].update(path=path, resourcePath=resource, stage="prod", httpMethod="GET",
                                   domainName="api.example.com",
                                   requestTimeEpoch=int(time.time() * 1000))
    return event


def test_percent_encoded_paths_and_the_mapping_root_behind_a_custom_domain(
        stub: StubLLM, served: Served) -> None:
    handler = ready(served.handler()[0])
    encoded = handler(rest_event("/api/v1/echo/a%20b", "/v1/echo/{word}", {"word": "a b"}),
                      LambdaContext())
    assert encoded["statusCode"] == 200 and body_of(encoded) == {"word": "a b"}  # was 404
    plain = handler(rest_event("/api/v1/echo/ab", "/v1/echo/{word}", {"word": "ab"}), LambdaContext())
    assert plain["statusCode"] == 200 and body_of(plain) == {"word": "ab"}
    root = handler(rest_event("/api", "/", None), LambdaContext())
    assert root["statusCode"] == 200 and body_of(root) == {"service": "llm agent", "root_path": "/api"}


# -- SnapStart ----------------------------------------------------------------------------------


def _snapshot() -> None:
    for func, args, kwargs in list(snapshot_restore_py.get_before_snapshot()):
        func(*args, **kwargs)


def _restore() -> None:
    for func, args, kwargs in list(snapshot_restore_py.get_after_restore()):
        func(*args, **kwargs)


def test_after_three_snapstart_restores_the_lifespan_client_works(
        stub: StubLLM, served: Served) -> None:
    """GIVEN a SnapStart init (startup before the snapshot), WHEN the snapshot is taken and the
    environment restored three times, THEN each restore runs the startup again on a fresh loop
    and the lifespan-made client answers after each."""
    snapshot_restore_py.get_before_snapshot().clear()
    snapshot_restore_py.get_after_restore().clear()
    before = dict(llm_app.LIFECYCLE)
    handler, _ = served.handler("snap-start")
    assert llm_app.LIFECYCLE["startups"] == before["startups"] + 1
    try:
        _snapshot()  # what startup opened is closed before the snapshot
        assert llm_app.LIFECYCLE["shutdowns"] == before["shutdowns"] + 1
        loops, clients = set(), set()
        for restore in range(3):
            _restore()
            loops.add(id(handler.lifespan.loop.loop) if handler.lifespan else None)
            clients.add(id(llm_app.app.state.llm))
            response = ask(handler, f"after restore {restore}")
            assert response["statusCode"] == 200, response
            assert body_of(response)["answer"] == f"answer to after restore {restore}"
        assert len(loops) == 3 and len(clients) == 3
        assert llm_app.LIFECYCLE["startups"] == before["startups"] + 4
    finally:
        snapshot_restore_py.get_before_snapshot().clear()
        snapshot_restore_py.get_after_restore().clear()


def test_a_startup_that_raises_after_a_restore_is_misconfigured(
        stub: StubLLM, served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot_restore_py.get_before_snapshot().clear()
    snapshot_restore_py.get_after_restore().clear()
    handler, _ = served.handler("snap-start")
    try:
        _snapshot()
        monkeypatch.setenv("LLM_STARTUP_FAILS", "1")
        _restore()  # the restore goes on; the environment cannot serve
        response = ask(handler)
        assert response["statusCode"] == 500 and body_of(response)["error"] == "agent_misconfigured"
    finally:
        snapshot_restore_py.get_before_snapshot().clear()
        snapshot_restore_py.get_after_restore().clear()


# -- the end of the environment ------------------------------------------------------------------

END_OF_ENVIRONMENT = """
import os, signal, sys, time
from tests.agents.llm_app.handler import agent
from tests.conftest import LambdaContext, adapt_event
handler = agent.lambda_handler(env={"AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
    "AWS_REGION": "us-east-1", "WARMSTART_FINISH_PRELOAD": "off", **dict(a.split("=", 1) for a in sys.argv[2:])})
response = handler(adapt_event("http_api_v2.json", "GET", "/healthz"), LambdaContext())
print("status", response["statusCode"], flush=True)
if sys.argv[1] == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
"""


@pytest.mark.parametrize(("how", "runtime_api", "returncode"), [
    ("exit", None, 0),  # the process ends: atexit
    ("sigterm", "127.0.0.1:9", -15),  # Lambda's Shutdown phase: SIGTERM, then as before
])
def test_the_lifespan_shutdown_runs_when_the_environment_ends(
        stub: StubLLM, tmp_path: Any, how: str, runtime_api: str | None, returncode: int) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    mark = tmp_path / "shutdown.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_LAMBDA_"))}
    env.update(LLM_SHUTDOWN_MARK=str(mark), LLM_BASE_URL=stub.url)
    args = [f"AWS_LAMBDA_RUNTIME_API={runtime_api}"] if runtime_api else []
    proc = subprocess.run([sys.executable, "-c", END_OF_ENVIRONMENT, how, *args], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "status 200" in proc.stdout.splitlines(), proc.stderr[-2000:]
    assert proc.returncode == returncode, proc.stderr[-2000:]
    assert mark.read_text() == "shutdown\n"  # once


def test_three_forked_restores_of_one_snapshot_each_reopen_the_client(
        stub: StubLLM, served: Served) -> None:
    """A restore as the emulator makes it: a fork of the snapshotted process (its loop,
    selector and sockets are copies of the template's) that runs the after-restore hooks."""
    import os

    snapshot_restore_py.get_before_snapshot().clear()
    snapshot_restore_py.get_after_restore().clear()
    handler, _ = served.handler("snap-start")
    try:
        _snapshot()
        answers = []
        for restore in range(3):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the restored execution environment
                code = 1
                try:
                    os.close(read_end)
                    _restore()
                    response = ask(handler, f"restore {restore}")
                    os.write(write_end, json.dumps([response["statusCode"], body_of(response)]).encode())
                    handler.shutdown()
                    code = 0
                finally:
                    os._exit(code)
            os.close(write_end)
            with os.fdopen(read_end, "rb") as pipe:
                data = pipe.read()
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0 and data, data
            answers.append(json.loads(data))
        assert [(s, b["answer"]) for s, b in answers] == [
            (200, f"answer to restore {i}") for i in range(3)]
    finally:
        snapshot_restore_py.get_before_snapshot().clear()
        snapshot_restore_py.get_after_restore().clear()


def test_a_failure_inside_the_app_on_a_cold_request_degrades_too(stub: StubLLM, served: Served) -> None:
    """The first request of an on-demand environment waits for the web stage inside admission's
    serve loop (not the warm path): the app's failure there falls back the same way."""
    from functions.runtime.agent import Route

    routes = [Route("POST", "/v1/ask", tier="P0", sla_ms=8000, validate=f"{llm_app.__name__}:check_question",
                    degraded=f"{llm_app.__name__}:busy_answer") if r.path == "/v1/ask" else r
              for r in declared.routes]
    agent = Agent(declared.name, app=declared.app, routes=routes)
    stub.mode = "reset"
    handler, failures = served.handler(agent=agent)
    response = ask(handler)  # cold: the web stage and the lifespan are still loading
    assert stub.requests == 1  # the app ran, and its downstream reset the connection
    assert response["statusCode"] == 200 and headers_of(response)["x-warmstart-path"] == "degraded"
    assert body_of(response)["degraded"] is True
    cold_summary, summary_failures = served.handler(agent=agent)
    summary = ask(cold_summary, path="/v1/summarize")
    assert summary["statusCode"] == 502 and body_of(summary)["error"] == "tool_unavailable"
    assert failures.failures() == ["tool_unavailable"] and summary_failures.failures() == ["tool_unavailable"]


# -- BackgroundTasks: after the answer --------------------------------------------------------------


def send_feedback(handler: AgentHandler, text: str, *, delay_s: float = 0.0, fails: bool = False,
                  context: LambdaContext | None = None) -> dict[str, Any]:
    event = adapt_event("http_api_v2.json", "POST", "/v1/feedback",
                        {"text": text, "store_delay_s": delay_s, "store_fails": fails})
    return handler(event, context or LambdaContext())


def wait_until(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def emf_names(out: str) -> list[str]:
    """The metric names of the EMF lines in ``out``."""
    names = []
    for line in out.splitlines():
        if line.startswith("{") and "_aws" in line:
            for metrics in json.loads(line)["_aws"]["CloudWatchMetrics"]:
                names += [m["Name"] for m in metrics["Metrics"]]
    return names


@pytest.fixture
def runtime_api() -> Iterator[Any]:
    from tests.unit.runtime.test_post_response import RuntimeApi

    api = RuntimeApi()
    yield api
    api.close()


@pytest.mark.parametrize("init_type", ["on-demand", "provisioned-concurrency"])
def test_background_tasks_run_in_the_post_response_phase_after_the_answer_left(
        stub: StubLLM, served: Served, runtime_api: Any, init_type: str) -> None:
    """GIVEN an environment with the Extensions API (a real HTTP server plays the Runtime API;
    under provisioned concurrency the extension registers because the app takes
    ``BackgroundTasks``), WHEN ``POST /v1/feedback`` queues a task that needs 0.5 s, THEN the
    handler returns the 202 before the task has finished, and the task finishes in the
    invocation's post-response phase with the lifespan-made client."""
    handler, failures = served.handler(init_type, WARMSTART_FINISH_PRELOAD="after",
                                       AWS_LAMBDA_RUNTIME_API=runtime_api.address)
    post = handler.post_response
    assert post is not None and post.active
    ready(handler)
    llm_app.FEEDBACK.clear()
    context = LambdaContext()
    runtime_api.invoke(context.aws_request_id)  # the INVOKE the extension gets with the runtime
    called = time.time()
    response = send_feedback(handler, "fast answers", delay_s=0.5, context=context)
    returned = time.time()
    assert response["statusCode"] == 202 and body_of(response)["accepted"] is True
    assert llm_app.FEEDBACK == []  # the answer is out, the feedback is not sent yet
    assert returned - called < 0.4, returned - called
    wait_until(lambda: llm_app.FEEDBACK)
    [record] = llm_app.FEEDBACK
    assert record["text"] == "fast answers" and stub.requests == 1
    assert record["started"] < returned < record["ended"] - 0.3  # ran on after the return
    # the phase is recorded once the task has returned, just after it appended its record
    wait_until(lambda: post.last_phase is not None)
    assert post.last_phase is not None and post.last_phase[0] == context.aws_request_id
    assert post.last_phase[1] >= 300  # ms of post-response work: the task's sleep
    # then the extension asks for the next event: the invocation is complete
    wait_until(lambda: [r[1] for r in runtime_api.requests].count(
        "/2020-01-01/extension/event/next") >= 2)
    assert failures.failures() == []


def test_a_background_task_that_raises_is_logged_counted_and_leaves_the_answer_alone(
        stub: StubLLM, served: Served, runtime_api: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    handler, failures = served.handler(WARMSTART_FINISH_PRELOAD="after",
                                       AWS_LAMBDA_RUNTIME_API=runtime_api.address)
    ready(handler)
    capsys.readouterr()
    context = LambdaContext()
    runtime_api.invoke(context.aws_request_id)
    response = send_feedback(handler, "refused", delay_s=0.2, fails=True, context=context)
    assert response["statusCode"] == 202 and body_of(response)["accepted"] is True
    assert headers_of(response)["x-warmstart-path"] == "local"
    post = handler.post_response
    assert post is not None
    wait_until(lambda: post.last_phase is not None and post.last_phase[0] == context.aws_request_id)
    assert failures.failures() == ["app_error"]
    [record] = [r for r in failures.records if hasattr(r, "failure")]
    assert record.levelname == "ERROR" and record.path == "background"
    assert record.route == "POST /v1/feedback" and record.request_id == context.aws_request_id
    assert record.exc_info is not None  # with its traceback
    text = logging.Formatter().formatException(record.exc_info)
    assert "the feedback store refused 'refused'" in text and "in send_feedback" in text
    assert "BackgroundFailures" in emf_names(capsys.readouterr().out)
    # the environment goes on serving
    next_context = LambdaContext()
    runtime_api.invoke(next_context.aws_request_id)
    assert ask(handler)["statusCode"] == 200


def test_without_an_extensions_api_background_tasks_finish_before_the_handler_returns(
        stub: StubLLM, served: Served) -> None:
    """No Runtime API (a local call): nothing runs after the return, so the task finishes
    before it, and the answer is the same; a task that raises changes nothing either."""
    handler, failures = served.handler(WARMSTART_FINISH_PRELOAD="after")
    assert handler.post_response is None
    ready(handler)
    llm_app.FEEDBACK.clear()
    started = time.time()
    response = send_feedback(handler, "kept", delay_s=0.3)
    returned = time.time()
    assert response["statusCode"] == 202 and body_of(response)["accepted"] is True
    [record] = llm_app.FEEDBACK
    assert started < record["ended"] <= returned and returned - started >= 0.3
    response = send_feedback(handler, "refused", fails=True)
    assert response["statusCode"] == 202 and body_of(response)["accepted"] is True
    assert failures.failures() == ["app_error"]


def test_a_background_task_is_bounded_by_the_invocation_deadline(
        stub: StubLLM, served: Served) -> None:
    """A task still running at the deadline (the function timeout less a margin) is cancelled
    and reported (``downstream_timeout``); the handler returns in time with the 202."""
    handler, failures = served.handler()
    ready(handler)
    llm_app.FEEDBACK.clear()
    started = time.perf_counter()
    response = send_feedback(handler, "too slow", delay_s=5.0, context=LambdaContext(timeout_s=0.6))
    took_s = time.perf_counter() - started
    assert response["statusCode"] == 202 and body_of(response)["accepted"] is True
    assert took_s < 0.6 + 0.3, took_s
    assert llm_app.FEEDBACK == [] and failures.failures() == ["downstream_timeout"]
    [record] = [r for r in failures.records if hasattr(r, "failure")]
    assert "still running at the invocation's deadline" in record.getMessage()
