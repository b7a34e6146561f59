"""The local LLM stub (`infra.local.llm_stub`) over real sockets: the OpenAI-compatible chat
completions stream, its tool call, its faults and its counts, read with ``httpx`` as a client
of the hosted API would read them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.chat.llm import retry_after_s
from infra.local.llm_stub import DEFAULT_TOKENS_PER_S, DEFAULT_TTFT_MS, LLMFault, LLMStub
from tests.conftest import REPO_ROOT

TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                                           "required": ["order_id"]}}}]
USER = {"role": "user", "content": "Where is my order A-1001?"}


@pytest.fixture(scope="module")
def module_stub() -> Iterator[LLMStub]:
    server = LLMStub(time_scale=100.0).start()
    yield server
    server.stop()


@pytest.fixture
def stub(module_stub: LLMStub) -> Iterator[LLMStub]:
    module_stub.reset()
    yield module_stub
    module_stub.reset()


def stream(stub: LLMStub, body: dict[str, Any], **headers: str) -> tuple[httpx.Response, list[str]]:
    """POST a streaming request; the ``data`` of every event, ``[DONE]`` included."""
    with httpx.stream("POST", f"{stub.url}/chat/completions", json={"stream": True, **body},
                      headers=headers, timeout=10.0) as reply:
        if reply.status_code != 200:
            reply.read()
            return reply, []
        return reply, [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]


def test_the_published_timing_is_the_default() -> None:
    # Artificial Analysis, GPT-4.1 mini on OpenAI (tests/data/SOURCES.md)
    assert (DEFAULT_TTFT_MS, DEFAULT_TOKENS_PER_S) == (930.0, 77.2)


def test_a_text_answer_streams_one_token_per_chunk_then_done(stub: LLMStub) -> None:
    reply, data = stream(stub, {"model": "m", "messages": [USER],
                                "stream_options": {"include_usage": True}})
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["transfer-encoding"] == "chunked"
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    texts = [c["choices"][0]["delta"].get("content") for c in chunks[:-2]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant" and all(texts)
    assert "".join(texts).startswith("Your order A-1001 is unknown.")
    assert chunks[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(texts) + 1
    assert stub.served["text_answers"] == 1 and stub.served["tokens"] == len(texts)


def test_a_request_with_tools_gets_one_tool_call_in_fragments(stub: LLMStub) -> None:
    _, data = stream(stub, {"messages": [USER], "tools": TOOLS})
    chunks = [json.loads(d) for d in data[:-1]]
    first = chunks[0]["choices"][0]["delta"]["tool_calls"][0]
    assert first["index"] == 0 and first["type"] == "function" and first["id"].startswith("call_")
    assert first["function"] == {"name": "lookup_order", "arguments": ""}
    arguments = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                        for c in chunks[1:-1])
    assert len(chunks) > 3 and json.loads(arguments) == {"order_id": "A-1001"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # after the tool result it answers with text that uses it
    result = {"role": "tool", "tool_call_id": first["id"],
              "content": json.dumps({"order_id": "A-1001", "status": "delivered"})}
    _, data = stream(stub, {"messages": [USER, {"role": "assistant", "tool_calls": [first]}, result],
                            "tools": TOOLS})
    text = "".join(json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-1])
    assert text.startswith("Your order A-1001 is delivered.")
    assert stub.served["tool_calls"] == 1 and stub.served["text_answers"] == 1


def test_a_non_streaming_request_gets_the_whole_completion(stub: LLMStub) -> None:
    reply = httpx.post(f"{stub.url}/chat/completions", json={"messages": [USER], "tools": TOOLS})
    message = reply.json()["choices"][0]["message"]
    assert reply.json()["object"] == "chat.completion" and reply.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"order_id": "A-1001"}


def test_a_rate_limit_sends_retry_after_in_seconds_and_ms(stub: LLMStub) -> None:
    stub.script(LLMFault("rate_limit", retry_after_s=1.5))
    reply, _ = stream(stub, {"messages": [USER]})
    assert reply.status_code == 429
    assert reply.headers["retry-after"] == "2" and reply.headers["retry-after-ms"] == "1500"
    assert reply.json()["error"]["code"] == "rate_limit_exceeded"
    assert retry_after_s(reply.headers) == 1.5
    assert retry_after_s({"Retry-After": "3"}) == 3.0 and retry_after_s({}) is None
    assert retry_after_s({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now_s=1445412470.0) == 10.0
    # the queue held one entry: the next request is answered
    assert stream(stub, {"messages": [USER]})[0].status_code == 200
    assert stub.served["faults"]["rate_limit"] == 1 and stub.served["requests"] == 2


def test_a_standing_fault_for_a_number_of_requests_and_the_header(stub: LLMStub) -> None:
    stub.fail("unavailable", times=2)
    statuses = [stream(stub, {"messages": [USER]})[0].status_code for _ in range(3)]
    assert statuses == [503, 503, 200]
    reply, _ = stream(stub, {"messages": [USER]}, **{"X-Stub-Fault": "rate_limit;retry_after_s=0"})
    assert reply.status_code == 429 and reply.headers["retry-after"] == "0"
    assert stub.served["faults"] == {"rate_limit": 1, "unavailable": 2, "close_early": 0, "stall": 0}


def test_close_early_ends_the_body_without_its_end(stub: LLMStub) -> None:
    stub.script(LLMFault("close_early", after_tokens=2))
    got: list[str] = []
    with (pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"),
          httpx.stream("POST", f"{stub.url}/chat/completions",
                       json={"stream": True, "messages": [USER]}, timeout=10.0) as reply):
        got.extend(line for line in reply.iter_lines() if line.startswith("data: "))
    assert len(got) == 2 and stub.served["streams_completed"] == 0


def test_a_stall_holds_the_stream_until_the_client_gives_up(stub: LLMStub) -> None:
    stub.script(LLMFault("stall", after_tokens=1, stall_s=60.0))
    got: list[str] = []
    with (pytest.raises(httpx.ReadTimeout),
          httpx.stream("POST", f"{stub.url}/chat/completions", json={"stream": True, "messages": [USER]},
                       timeout=httpx.Timeout(5.0, read=0.3)) as reply):
        got.extend(line for line in reply.iter_lines() if line.startswith("data: "))
    assert len(got) == 1 and stub.served["faults"]["stall"] == 1


@pytest.mark.parametrize(("body", "fragment"), [
    ({"stream": True}, "messages must be a non-empty list"),
    ({"messages": []}, "messages must be a non-empty list"),
])
def test_a_bad_request_is_a_400_in_the_api_error_shape(stub: LLMStub, body: dict[str, Any], fragment: str) -> None:
    reply = httpx.post(f"{stub.url}/chat/completions", json=body)
    assert reply.status_code == 400 and fragment in reply.json()["error"]["message"]
    assert stub.served["bad_requests"] == 1 and stub.served["requests"] == 0


def test_models_and_health(stub: LLMStub) -> None:
    assert httpx.get(f"{stub.url}/models").json()["data"][0]["id"] == "stub-gpt-4.1-mini"
    assert httpx.get(stub.url.removesuffix("/v1") + "/healthz").json() == {"status": "ok"}


def test_bad_settings_and_faults_are_refused() -> None:
    with pytest.raises(ValueError, match="tokens_per_s must be > 0"):
        LLMStub(tokens_per_s=0)
    with pytest.raises(ValueError, match="unknown fault 'boom'"):
        LLMFault.parse("boom")
    with pytest.raises(ValueError, match="unknown fault option 'wait'"):
        LLMFault.parse("stall;wait=3")


def test_it_runs_alone_from_the_command_line() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "infra.local.llm_stub", "--port", "0", "--time-scale", "100"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[2]
        assert line.startswith("llm stub: http://127.0.0.1:") and url.endswith("/v1")
        reply = httpx.post(f"{url}/chat/completions", json={"messages": [USER]}, timeout=10.0)
        assert reply.json()["choices"][0]["finish_reason"] == "stop"
    finally:
        proc.terminate()
        proc.wait(10)


def test_as_a_local_stack_service_it_fills_empty_llm_urls() -> None:
    from pathlib import Path

    from infra.local.services import LLMStubService, wants_llm_stub
    from infra.local.spec import FunctionSpec

    spec = FunctionSpec(name="chat-fn", handler="functions.chat.handler.handler",
                        code_dir=Path("functions/chat"),
                        environment={"CHAT_LLM_URLS": "", "OTHER_LLM_URLS": "https://api.example/v1",
                                     "CHAT_TOOL_URL": ""})
    assert wants_llm_stub(spec)
    assert not wants_llm_stub(FunctionSpec(name="f", handler="h.h", code_dir=Path("f"),
                                           environment={"CHAT_LLM_URLS": "https://api.example/v1"}))
    service = LLMStubService(time_scale=100.0)
    service.start()
    try:
        # only the empty *_LLM_URLS variable is filled; a deployed URL and the tool's stay
        env = service.function_environment(spec)
        assert env == {"CHAT_LLM_URLS": service.endpoint} and service.endpoint.endswith("/v1")
        reply = httpx.post(f"{service.endpoint}/chat/completions", json={"messages": [USER]}, timeout=10.0)
        assert reply.status_code == 200
    finally:
        service.stop()
