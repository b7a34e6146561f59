"""The chat agent against the real LLM stub and the real tool stub, over real sockets.

The app (``functions.chat.app``, built from the real declaration as the toolkit builds it)
runs under uvicorn on 127.0.0.1 in a thread, with its own lifespan (the ``httpx.AsyncClient``);
the LLM is `infra.local.llm_stub.LLMStub` (one or two of them: the second endpoint), at 50x
its published timing; the tool is `infra.local.tool_stub.ToolStub`. Each test reads the SSE
stream with an ``httpx`` client as a browser would. Faults are scripted on the stub, so every
assertion is about what was sent, never about how long it took.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import httpx
import pytest
import uvicorn

from functions.runtime import lifecycle
from functions.runtime.agent import build_app
from functions.runtime.agent_runtime import AgentRuntime
from functions.runtime.config import InitType, RuntimeConfig
from infra.local.llm_stub import LLMFault, LLMStub
from infra.local.tool_stub import ToolStub

TIME_SCALE = 50.0


class Event(NamedTuple):
    event: str
    data: Any


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    """SSE events from a line iterator (``event:`` name, JSON ``data:``)."""
    name, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield Event(name, json.loads("\n".join(data)))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


@pytest.fixture(scope="module", autouse=True)
def imported_handler_settled() -> None:
    """Importing the handler runs its own on-demand init: let its preload finish first."""
    from functions.chat import handler as module

    assert module.handler.preload.wait_all(60.0), "the import-time preload did not finish"


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMStub]:
    stub = LLMStub(time_scale=TIME_SCALE).start()
    yield stub
    stub.stop()


@pytest.fixture(scope="module")
def llm2() -> Iterator[LLMStub]:
    stub = LLMStub(time_scale=TIME_SCALE, model="second").start()
    yield stub
    stub.stop()


@pytest.fixture(scope="module")
def orders() -> Iterator[ToolStub]:
    stub = ToolStub().start()
    yield stub
    stub.stop()


@pytest.fixture(autouse=True)
def fresh(llm: LLMStub, llm2: LLMStub, orders: ToolStub) -> Iterator[None]:
    for stub in (llm, llm2, orders):
        stub.reset()
    yield
    for stub in (llm, llm2, orders):
        stub.reset()


class Served:
    """The app under uvicorn on 127.0.0.1 (its lifespan on), from a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on",
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="chat-app", daemon=True)
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                break
            self.thread.join(0.01)
        assert self.server.started, "uvicorn did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def chat(self, body: Any, **kwargs: Any) -> list[Event]:
        """POST /chat and read the whole stream."""
        with httpx.stream("POST", f"{self.url}/chat", json=body, timeout=30.0, **kwargs) as reply:
            assert reply.status_code == 200, reply.read()
            assert reply.headers["content-type"].startswith("text/event-stream")
            return list(parse_events(reply.iter_lines()))


@pytest.fixture
def serve(llm: LLMStub, orders: ToolStub) -> Iterator[Callable[..., Served]]:
    """``serve(**env)``: the chat app with ``CHAT_LLM_URLS`` = the stub, ``CHAT_TOOL_URL`` = the
    order stub, unless given."""
    from functions.chat.handler import agent

    started: list[Served] = []

    def make(**env: str) -> Served:
        settings = {"CHAT_LLM_URLS": llm.url, "CHAT_TOOL_URL": orders.url, **env}
        runtime = AgentRuntime(agent, RuntimeConfig.from_env(settings), settings,
                               lifecycle.ExecutionEnvironment(InitType.ON_DEMAND, 0.0), None)
        served = Served(build_app(agent, runtime))
        started.append(served)
        return served

    yield make
    for served in started:
        served.stop()


def tokens(events: list[Event]) -> list[str]:
    return [e.data["token"] for e in events if e.event == "message"]


QUESTION = {"message": "Where is my order A-1001?"}


def _turn_events(urls: list[str], orders: ToolStub, *, budget_s: float, idle_s: float) -> tuple[list[Event], list[str]]:
    """One turn run directly (no server): its events and the tags it handed ``runtime.fail``."""
    import asyncio
    import time

    from functions.chat.conversation import Turn
    from functions.chat.llm import LLMRouter, LLMStats
    from functions.chat.tools import OrderTool

    tags: list[str] = []

    async def run() -> list[bytes]:
        async with httpx.AsyncClient() as client:
            router = LLMRouter(client, urls, api_key=None, idle_timeout_s=idle_s, stats=LLMStats())
            turn = Turn(router, OrderTool(client, orders.url, timeout_s=1.0), model="m", max_tokens=64,
                        budget_s=budget_s, started_s=time.monotonic(), fail=tags.append)
            return [event async for event in turn.events("Where is A-1001?")]

    raw = b"".join(asyncio.run(run())).decode()
    return list(parse_events(iter(raw.split("\n")))), tags


def test_the_declared_routes_match_the_app() -> None:
    from functions.chat.handler import agent

    assert agent.check({"CHAT_LLM_URLS": "http://127.0.0.1:9/v1"}) == [
        "POST /chat", "GET /capabilities", "GET /healthz"]
    route = next(r for r in agent.routes if r.path == "/chat")
    assert route.stream and route.first_token_ms == 1000
    from functions.chat.hooks import busy_event, chat_payload

    assert chat_payload({"message": "hi"}) == {"message": "hi"}
    assert busy_event({"message": "hi"})["status"] == "busy"  # the degraded first event's data


def test_a_turn_calls_the_tool_then_streams_the_answer_token_by_token(
        serve: Callable[..., Served], llm: LLMStub, orders: ToolStub) -> None:
    orders.statuses["A-1001"] = "shipped"
    app = serve()
    events = app.chat(QUESTION)
    # THEN: the tool call as soon as the LLM names it, the tool event with the order service's
    # answer, the tokens one event each, done last
    assert [e.event for e in events[:2]] == ["tool_call", "tool"] and events[-1].event == "done"
    assert events[0].data == {"tool_call": {"name": "lookup_order"}}
    tool = events[1].data["tool"]
    assert tool["name"] == "lookup_order" and json.loads(tool["arguments"]) == {"order_id": "A-1001"}
    assert tool["result"]["status"] == "shipped" and orders.requests == ["A-1001"]
    answer = tokens(events)
    assert len(answer) > 10 and all(len(t.split()) == 1 for t in answer)
    assert "".join(answer).strip().startswith("Your order A-1001 is shipped.")
    assert events[-1].data == {"finish_reason": "stop", "tokens": len(answer), "model": "gpt-4.1-mini",
                               "endpoint": 0}
    # the second LLM call carried the tool call and its result, as the API defines them
    first, second = llm.requests
    assert first["tools"][0]["function"]["name"] == "lookup_order" and first["stream"] is True
    assistant, result = second["messages"][-2:]
    call = assistant["tool_calls"][0]
    assert call["function"] == {"name": "lookup_order", "arguments": '{"order_id": "A-1001"}'}
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
    assert json.loads(result["content"])["status"] == "shipped"
    assert llm.served["tool_calls"] == 1 and llm.served["text_answers"] == 1


def test_tokens_reach_the_client_while_the_llm_is_still_generating(
        serve: Callable[..., Served], llm: LLMStub) -> None:
    # GIVEN the answer's stream held by the stub after 3 tokens (until released)
    llm.script(None, LLMFault("stall", after_tokens=3, stall_s=60.0))
    app = serve()
    seen: list[str] = []
    with httpx.stream("POST", f"{app.url}/chat", json=QUESTION, timeout=30.0) as reply:
        events = parse_events(reply.iter_lines())
        for event in events:
            if event.event == "message":
                seen.append(event.data["token"])
                if len(seen) == 3:
                    break
        # THEN the 3 tokens arrived while the LLM had not finished (it is still held): the stub
        # counts the stall on its own thread just after it wrote the 3rd token, so wait for it
        deadline = time.monotonic() + 10.0
        while llm.served["faults"]["stall"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert llm.served["text_answers"] == 0 and llm.served["faults"]["stall"] == 1
        llm.release()  # the stub closes the held stream without its end
        rest = list(events)
    assert rest[-1].event == "error" and rest[-1].data["error"]["type"] == "llm_stream_error"


def test_a_client_that_goes_away_mid_answer_stops_the_llm_stream(
        serve: Callable[..., Served]) -> None:
    # GIVEN an LLM that writes its tokens 50 ms apart (real time: the answer takes ~1.5 s)
    slow = LLMStub(ttft_ms=0.0, tokens_per_s=20.0).start()
    try:
        app = serve(CHAT_LLM_URLS=slow.url)
        with httpx.stream("POST", f"{app.url}/chat", json=QUESTION, timeout=30.0) as reply:
            seen = 0
            for event in parse_events(reply.iter_lines()):
                seen += event.event == "message"
                if seen == 2:
                    break  # WHEN the client closes the connection after 2 tokens
        # THEN the agent closes its LLM stream: the stub's next write fails and it stops
        for _ in range(300):
            if slow.served["disconnects"]:
                break
            threading.Event().wait(0.01)
        assert slow.served["disconnects"] == 1 and slow.served["text_answers"] == 0
    finally:
        slow.stop()


def test_a_429_is_retried_on_the_same_endpoint_within_the_first_token_budget(
        serve: Callable[..., Served], llm: LLMStub) -> None:
    llm.script(LLMFault("rate_limit", retry_after_s=0.05))
    app = serve()
    events = app.chat(QUESTION)
    assert events[-1].event == "done" and tokens(events)
    assert llm.served["faults"]["rate_limit"] == 1 and llm.served["requests"] == 3
    counts = httpx.get(f"{app.url}/capabilities").json()["llm"]["counts"]
    assert counts["retries"] == 1 and counts["causes"]["rate_limited"] == 1 and counts["fallbacks"] == 0


def test_a_429_advising_a_wait_past_the_budget_is_not_waited_for(
        serve: Callable[..., Served], llm: LLMStub) -> None:
    # GIVEN one endpoint that asks for 5 s, and a first-token budget of 1 s
    llm.fail(LLMFault("rate_limit", retry_after_s=5.0))
    app = serve()
    events = app.chat(QUESTION)
    # THEN no retry: the stream ends at once with llm_unavailable, naming the cause
    assert [e.event for e in events] == ["error"]
    assert events[0].data["error"]["type"] == "llm_unavailable"
    assert "429" in events[0].data["error"]["message"] and llm.served["requests"] == 1


def test_a_503_moves_to_the_second_endpoint_and_later_turns_start_there(
        serve: Callable[..., Served], llm: LLMStub, llm2: LLMStub) -> None:
    llm.fail("unavailable")
    app = serve(CHAT_LLM_URLS=f"{llm.url},{llm2.url}")
    events = app.chat(QUESTION)
    assert events[1].event == "tool" and events[-1].event == "done"
    assert events[-1].data["endpoint"] == 1 and tokens(events)
    assert llm.served["faults"]["unavailable"] == 1 and llm2.served["requests"] == 2
    # WHEN the next turn comes while the first endpoint cools off (0.5 s backoff)
    llm.fail(None)
    again = app.chat(QUESTION)
    # THEN it goes to the second endpoint first
    assert again[-1].data["endpoint"] == 1 and llm.served["requests"] == 1
    counts = httpx.get(f"{app.url}/capabilities").json()["llm"]["counts"]
    assert counts["fallbacks"] == 1 and counts["causes"]["unavailable"] == 1


def test_both_endpoints_down_ends_with_an_llm_unavailable_error_event(
        serve: Callable[..., Served], llm: LLMStub, llm2: LLMStub) -> None:
    llm.fail(LLMFault("unavailable", retry_after_s=5.0))
    llm2.fail(LLMFault("rate_limit", retry_after_s=5.0))
    app = serve(CHAT_LLM_URLS=f"{llm.url},{llm2.url}")
    events = app.chat(QUESTION)
    assert [e.event for e in events] == ["error"]
    error = events[0].data["error"]
    assert error["type"] == "llm_unavailable" and "2 attempt(s)" in error["message"]
    counts = httpx.get(f"{app.url}/capabilities").json()["llm"]["counts"]
    assert counts["unavailable"] == 1
    assert counts["causes"]["unavailable"] == 1 and counts["causes"]["rate_limited"] == 1


def test_a_refused_connection_moves_to_the_second_endpoint(
        serve: Callable[..., Served], llm: LLMStub) -> None:
    app = serve(CHAT_LLM_URLS=f"http://127.0.0.1:9/v1,{llm.url}")  # nothing listens on port 9
    events = app.chat(QUESTION)
    assert events[-1].event == "done" and events[-1].data["endpoint"] == 1
    counts = httpx.get(f"{app.url}/capabilities").json()["llm"]["counts"]
    assert counts["causes"]["connect_error"] == 1


def test_an_llm_stream_closed_mid_answer_ends_with_llm_stream_error(
        serve: Callable[..., Served], llm: LLMStub) -> None:
    llm.script(None, LLMFault("close_early", after_tokens=3))
    app = serve()
    events = app.chat(QUESTION)
    assert [e.event for e in events] == ["tool_call", "tool", "message", "message", "message", "error"]
    error = events[-1].data["error"]
    assert error["type"] == "llm_stream_error" and "ended early" in error["message"]
    counts = httpx.get(f"{app.url}/capabilities").json()["llm"]["counts"]
    assert counts["stream_errors"] == 1 and counts["causes"]["stream_closed"] == 1


def test_a_stall_mid_answer_is_cut_at_the_idle_timeout(
        serve: Callable[..., Served], llm: LLMStub) -> None:
    # GIVEN the answer held for 60 s after 2 tokens, and an idle timeout of 200 ms
    llm.script(None, LLMFault("stall", after_tokens=2, stall_s=600.0))
    app = serve(CHAT_LLM_IDLE_TIMEOUT_MS="200")
    events = app.chat(QUESTION)
    # THEN the agent ends the stream itself (the stub still holds its side)
    assert [e.event for e in events][-3:] == ["message", "message", "error"]
    assert events[-1].data["error"]["type"] == "llm_stream_error"
    assert "CHAT_LLM_IDLE_TIMEOUT_MS" in events[-1].data["error"]["message"]
    assert llm.served["streams_completed"] == 1  # the tool call only


def test_a_stall_before_the_first_token_is_bounded_by_the_first_token_budget(
        serve: Callable[..., Served], llm: LLMStub) -> None:
    # GIVEN an LLM that sends nothing for 12 s (600 stub s), an idle timeout below the budget
    llm.fail(LLMFault("stall", after_tokens=0, stall_s=600.0))
    app = serve(CHAT_LLM_IDLE_TIMEOUT_MS="200")
    events = app.chat(QUESTION)
    assert [e.event for e in events] == ["error"]
    error = events[0].data["error"]
    assert error["type"] == "llm_unavailable" and "no first chunk within" in error["message"]


def test_a_tool_failure_goes_to_the_llm_and_the_answer_still_streams(
        serve: Callable[..., Served], llm: LLMStub, orders: ToolStub) -> None:
    orders.fail("error", status=503)
    app = serve()
    events = app.chat(QUESTION)
    assert events[1].data["tool"]["result"]["error"] == "tool_unavailable"
    assert events[-1].event == "done" and "tool_unavailable" in "".join(tokens(events))


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{not json", 400, "bad_request"),
    (json.dumps({"message": ""}).encode(), 422, "bad_request"),
    (json.dumps({"message": "hi", "stream": True}).encode(), 422, "bad_request"),
])
def test_bad_input_is_refused_before_any_llm_call(serve: Callable[..., Served], llm: LLMStub,
                                                  body: bytes, status: int, code: str) -> None:
    app = serve()
    reply = httpx.post(f"{app.url}/chat", content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == status and reply.json()["error"] == code
    assert llm.served["requests"] == 0


def test_without_llm_urls_the_route_answers_503_llm_not_configured(serve: Callable[..., Served]) -> None:
    app = serve(CHAT_LLM_URLS="")
    reply = httpx.post(f"{app.url}/chat", json=QUESTION)
    assert reply.status_code == 503 and reply.json()["error"] == "llm_not_configured"
    assert httpx.get(f"{app.url}/healthz").json()["llm"] == "not_configured"


def test_an_unusable_setting_fails_the_app_naming_it() -> None:
    from functions.chat.settings import ChatSettings

    with pytest.raises(ValueError, match="CHAT_LLM_IDLE_TIMEOUT_MS must be a positive number"):
        ChatSettings.from_settings({"CHAT_LLM_IDLE_TIMEOUT_MS": "0"})
    with pytest.raises(ValueError, match="CHAT_LLM_URLS: 'ftp://x' is not an http"):
        ChatSettings.from_settings({"CHAT_LLM_URLS": "http://a/v1, ftp://x"})


@pytest.mark.parametrize(("script", "idle_ms", "kind", "tag"), [
    ([LLMFault("unavailable", retry_after_s=5.0)], 5000.0, "llm_unavailable", "tool_unavailable"),
    ([LLMFault("stall", after_tokens=0, stall_s=3000.0)], 100.0, "llm_unavailable", "downstream_timeout"),
    ([None, LLMFault("close_early", after_tokens=2)], 5000.0, "llm_stream_error", "stream_error"),
    ([None, LLMFault("stall", after_tokens=2, stall_s=60.0)], 100.0, "llm_stream_error", "downstream_timeout"),
])
def test_each_failure_tags_the_invocation(llm: LLMStub, orders: ToolStub, script: list[LLMFault | None],
                                          idle_ms: float, kind: str, tag: str) -> None:
    """The turn itself (no server): the tag it hands ``runtime.fail`` per error event."""
    llm.script(*script)
    events, tags = _turn_events([llm.url], orders, budget_s=0.5, idle_s=idle_ms / 1000.0)
    assert events[-1].event == "error" and events[-1].data["error"]["type"] == kind
    assert tags == [tag]


def test_the_init_imports_no_third_party_module_on_the_main_thread() -> None:
    """The handler module's import (the init) loads the toolkit only; FastAPI and httpx load in
    the background preload (``tests/perf/test_import_budget.py``'s check, for this agent)."""
    import subprocess
    import sys

    from tests.perf.test_import_budget import HANDLER_MAIN_THREAD, REPO_ROOT

    proc = subprocess.run([sys.executable, "-c", HANDLER_MAIN_THREAD, "functions.chat.handler"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)})
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["third_party"] == [] and found["background_preload"] is True


def test_a_slow_but_healthy_llm_is_waited_for_past_the_budget(llm: LLMStub, orders: ToolStub) -> None:
    # GIVEN a budget already spent (a cold start took it) and one endpoint that answers
    events, tags = _turn_events([llm.url], orders, budget_s=0.0, idle_s=5.0)
    # THEN its late answer is streamed (the toolkit's degraded first event covers the SLA)
    assert events[-1].event == "done" and tokens(events) and tags == []


def test_a_primary_that_stalls_is_cut_at_the_budget_for_the_second_endpoint(
        llm: LLMStub, llm2: LLMStub, orders: ToolStub) -> None:
    llm.fail(LLMFault("stall", after_tokens=0, stall_s=3000.0), times=1)
    events, tags = _turn_events([llm.url, llm2.url], orders, budget_s=0.3, idle_s=5.0)
    assert events[-1].event == "done" and events[-1].data["endpoint"] == 1 and tags == []
    assert llm.served["faults"]["stall"] == 1 and llm2.served["requests"] == 2


def test_chat_first_token_ms_overrides_the_routes_first_token_sla() -> None:
    """``CHAT_FIRST_TOKEN_MS`` in the environment at import sets ``first_token_ms`` of
    ``POST /chat`` (a fresh interpreter: the declaration is read at import)."""
    import os
    import subprocess
    import sys

    from functions.chat.settings import DEFAULT_FIRST_TOKEN_MS, first_token_ms

    assert first_token_ms({}) == DEFAULT_FIRST_TOKEN_MS == 1000.0
    assert first_token_ms({"CHAT_FIRST_TOKEN_MS": "500"}) == 500.0
    for bad in ("0", "-5", "soon", "inf"):
        with pytest.raises(ValueError, match="CHAT_FIRST_TOKEN_MS"):
            first_token_ms({"CHAT_FIRST_TOKEN_MS": bad})
    code = ("from functions.chat.handler import agent; "
            "print(next(r.first_token_ms for r in agent.routes if r.path == '/chat'))")
    env = {**os.environ, "CHAT_FIRST_TOKEN_MS": "500"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip().splitlines()[-1] == "500.0"


def test_the_overflow_hooks_map_the_message_and_the_endpoints_chunks() -> None:
    from functions.chat.handler import agent
    from functions.chat.hooks import overflow_event, overflow_request

    route = next(r for r in agent.routes if r.path == "/chat")
    assert route.overflow_request is not None and route.overflow_event is not None
    assert overflow_request({"message": "hi"}) == {"messages": [{"role": "user", "content": "hi"}]}
    assert overflow_event({"choices": [{"delta": {"content": "Your"}}]}) == {"token": "Your"}
    assert overflow_event({"choices": [{"delta": {"role": "assistant"}}]}) is None
    assert overflow_event({"choices": [{"delta": {}, "finish_reason": "stop"}]}) is None
    assert overflow_event({"usage": {"completion_tokens": 3}, "choices": []}) is None
    for bad in ({"choices": "x"}, {"choices": [{"delta": "x"}]}):
        with pytest.raises(ValueError, match="chat.completion.chunk"):
            overflow_event(bad)
