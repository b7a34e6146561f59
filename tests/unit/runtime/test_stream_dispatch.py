"""Streaming routes through the handler (`AgentHandler`): admission against the time to first
token, the degraded first event, the buffered caller, levels, and the record at the stream's end.

A small "chat" agent of the test's own: a FastAPI app whose routes stream SSE tokens from the
model (a loader the test releases), declared with ``Route(stream=True)``. The runtime client's
part is played by :func:`drain`: it iterates the `StreamedResponse` as the runtime client
writes it and calls its ``on_finish`` with the `StreamOutcome` it saw.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from functions.runtime import streaming
from functions.runtime.admission import stream as admission_stream
from functions.runtime.agent import Agent, AgentRuntime, BadRequest, Route
from functions.runtime.agent_handler import AgentHandler
from functions.runtime.asgi_stream import DEADLINE_MARGIN_MS, StreamAborted, StreamFailed
from functions.runtime.config import RuntimeConfig, RuntimeConfigError
from functions.runtime.local_path import LocalPath
from functions.runtime.post_response import PostResponse
from functions.runtime.streaming import StreamedResponse, StreamOutcome, sse_event
from tests.conftest import LambdaContext, adapt_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of
from tests.unit.runtime.test_agent import Built, Gate, env_for

WORDS = ["the", "order", "shipped"]


def chat_payload(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise BadRequest('send {"text": "..."}', status=422)
    return {"text": body["text"]}


def chat_degraded_event(payload: dict[str, Any]) -> dict[str, Any]:
    if payload["text"] == "boom":
        raise LookupError("no notice for this one")
    return {"notice": "warming up", "echo": payload["text"]}


def chat_degraded(payload: dict[str, Any]) -> dict[str, Any]:
    return {"answer": "please retry shortly", "echo": payload["text"]}


def chat_app(runtime: AgentRuntime) -> FastAPI:
    app = FastAPI()

    async def tokens(words: list[str]) -> Any:
        for word in words:
            await asyncio.sleep(0.001)
            yield sse_event({"token": word})

    def stream_of_model() -> StreamingResponse:
        return StreamingResponse(tokens(runtime.model()["words"]), media_type="text/event-stream")

    @app.post("/v1/chat")
    async def chat(request: Request) -> StreamingResponse:
        await request.json()
        return stream_of_model()

    @app.post("/v1/plain")
    async def plain() -> StreamingResponse:
        return stream_of_model()

    @app.post("/v1/bare")
    async def bare() -> StreamingResponse:
        return stream_of_model()

    @app.post("/v1/report")
    async def report() -> StreamingResponse:
        return StreamingResponse(tokens(["report"]), media_type="text/event-stream")

    @app.post("/v1/refuses")
    async def refuses() -> StreamingResponse:
        return StreamingResponse(tokens(["x"]), status_code=503, media_type="text/event-stream")

    @app.post("/v1/breaks")
    async def breaks() -> StreamingResponse:
        runtime.model()
        raise KeyError("the prompt template is missing")

    @app.post("/v1/once")
    async def once() -> dict[str, Any]:
        return {"answer": " ".join(runtime.model()["words"])}

    @app.post("/v1/stalls")
    async def stalls() -> StreamingResponse:
        async def one_then_nothing() -> Any:
            await asyncio.sleep(0)
            yield sse_event({"token": "first"})
            await asyncio.sleep(3600)  # cancelled at the idle bound
            yield sse_event({"token": "never"})
        return StreamingResponse(one_then_nothing(), media_type="text/event-stream")

    @app.post("/v1/big")
    async def big() -> StreamingResponse:
        async def megabytes() -> Any:
            for _ in range(7):
                await asyncio.sleep(0)
                yield sse_event("x" * (1024 * 1024))
        return StreamingResponse(megabytes(), media_type="text/event-stream")

    @app.post("/v1/aborts")
    async def aborts() -> StreamingResponse:
        async def own_error() -> Any:
            await asyncio.sleep(0)
            yield sse_event({"token": "the"})
            yield sse_event({"error": {"type": "llm_unavailable", "message": "no LLM answered"}},
                            event="error")
            raise StreamAborted("downstream_timeout", "no LLM answered in time")
        return StreamingResponse(own_error(), media_type="text/event-stream")

    @app.post("/v1/sync")
    def sync_tokens() -> StreamingResponse:  # a plain function, a plain generator
        def words() -> Iterator[bytes]:
            for word in WORDS:
                time.sleep(0.001)  # Starlette runs a sync iterator in its thread pool
                yield sse_event({"token": word})
        return StreamingResponse(words(), media_type="text/event-stream")

    @app.post("/v1/budget")
    async def budget(request: Request) -> StreamingResponse:
        await request.json()

        async def first_then_what_is_left() -> Any:
            yield sse_event({"left_ms": runtime.remaining_ms()})
            await asyncio.sleep(0.25)  # past the route's 150 ms first-token SLA
            yield sse_event({"left_ms": runtime.remaining_ms()})
        return StreamingResponse(first_then_what_is_left(), media_type="text/event-stream")

    @app.post("/v1/tight")
    @app.post("/v1/gone")
    async def tight(request: Request) -> StreamingResponse:
        await request.json()
        return stream_of_model()

    @app.post("/v1/slowfirst")
    async def slowfirst(request: Request) -> StreamingResponse:
        await request.json()

        async def held_then_tokens() -> Any:
            while not FIRST_TOKEN_HELD.is_set():  # released by the test, never by time
                await asyncio.sleep(0.005)
            for word in runtime.model()["words"]:
                yield sse_event({"token": word})
        return StreamingResponse(held_then_tokens(), media_type="text/event-stream")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


class ChatGate(Gate):
    def load(self, runtime: AgentRuntime) -> dict[str, Any]:
        super().load(runtime)
        return {"words": list(WORDS)}


def chat_agent(gate: ChatGate, **kw: Any) -> Agent:
    routes = [
        Route("POST", "/v1/chat", stream=True, needs_model=True, validate=chat_payload,
              degraded_event=chat_degraded_event, first_token_ms=800.0),
        Route("POST", "/v1/plain", stream=True, needs_model=True, validate=chat_payload,
              degradable=True, degraded=chat_degraded),
        Route("POST", "/v1/bare", stream=True, needs_model=True, tier="P1"),
        Route("POST", "/v1/report", stream=True, tier="P2"),
        Route("POST", "/v1/refuses", stream=True, needs_model=True, validate=chat_payload,
              degraded_event=chat_degraded_event),
        Route("POST", "/v1/big", stream=True),
        Route("POST", "/v1/slowfirst", stream=True, needs_model=True, validate=chat_payload,
              degraded_event=chat_degraded_event, first_token_ms=300.0),
        Route("POST", "/v1/stalls", stream=True),
        Route("POST", "/v1/breaks", stream=True, needs_model=True, validate=chat_payload,
              degraded_event=chat_degraded_event),
        Route("POST", "/v1/once", stream=True, needs_model=True, validate=chat_payload,
              degraded_event=chat_degraded_event),
        Route("POST", "/v1/aborts", stream=True),
        Route("POST", "/v1/tight", stream=True, needs_model=True, validate=chat_payload,
              degraded_event=chat_degraded_event, first_token_ms=140.0),
        Route("POST", "/v1/gone", stream=True, needs_model=True, validate=chat_payload,
              degraded_event=chat_degraded_event, first_token_ms=30.0),
        Route("POST", "/v1/sync", stream=True),
        Route("POST", "/v1/budget", stream=True, first_token_ms=150.0),
        Route("GET", "/healthz", tier="P1"),
    ]
    return Agent("chat", app=chat_app, routes=routes, model=gate.load, **kw)


@pytest.fixture(autouse=True)
def runtime_streams() -> Iterator[None]:
    """This process's runtime client streams (as `functions.runtime.stream_runtime` marks it)."""
    streaming.mark_runtime_streams()
    yield
    streaming._runtime_streams = False


@pytest.fixture
def built() -> Iterator[Built]:
    b = Built()
    yield b
    b.close()


def gate_of(built: Built, **kw: Any) -> ChatGate:
    gate = ChatGate(**kw)
    built.gates.append(gate)
    return gate


def handler_for(built: Built, *, released: bool = True, model_p95_ms: float = 300.0,
                **env: str) -> tuple[AgentHandler, LogCollector, ChatGate]:
    gate = gate_of(built, released=released)
    handler, logs = built.handler(chat_agent(gate, stage_p95_ms={"model": model_p95_ms}),
                                  env_for(**env))
    assert handler.preload.wait("web", 30) and handler.preload.wait("telemetry", 30)
    if released:
        assert handler.preload.wait_all(30)
    return handler, logs, gate


def url_call(handler: AgentHandler, path: str, body: Any = None, *,
             context: LambdaContext | None = None) -> Any:
    return handler(adapt_event("function_url.json", "POST", path, body), context or LambdaContext())


def drain(response: StreamedResponse) -> tuple[list[bytes], BaseException | None]:
    """What the runtime client does: write each chunk, then ``on_finish`` with the outcome."""
    chunks: list[bytes] = []
    first = last = None
    error: BaseException | None = None
    try:
        for chunk in response:
            last = time.perf_counter() * 1000.0
            first = first if first is not None else last
            chunks.append(chunk)
    except Exception as exc:  # noqa: BLE001 - the runtime client sends the trailers
        error = exc
    assert response.on_finish is not None
    response.on_finish(StreamOutcome(first, last, sum(map(len, chunks)), len(chunks),
                                     "Runtime.StreamError" if error is not None else None))
    return chunks, error


def events_of(chunks: list[bytes] | bytes) -> list[tuple[str | None, Any]]:
    """``(event name, JSON data)`` of each SSE event in ``chunks``."""
    out = []
    for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
        for block in chunk.decode().split("\n\n"):
            if not block.strip():
                continue
            name, data = None, None
            for line in block.split("\n"):
                key, _, value = line.partition(": ")
                if key == "event":
                    name = value
                elif key == "data":
                    data = json.loads(value)
            out.append((name, data))
    return out


def stream_lines(logs: LogCollector) -> list[logging.LogRecord]:
    return [r for r in logs.records if hasattr(r, "stream")]


def test_a_warm_streaming_route_streams_locally_and_is_recorded_when_it_ends(built: Built) -> None:
    handler, logs, _ = handler_for(built)
    response = url_call(handler, "/v1/chat", {"text": "where is A-17"})
    assert isinstance(response, StreamedResponse)
    assert response.status_code == 200 and response.headers["x-warmstart-path"] == "local"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert stream_lines(logs) == []  # not recorded before the stream ended
    chunks, error = drain(response)
    assert error is None
    assert events_of(chunks) == [(None, {"token": w}) for w in WORDS]
    (line,) = stream_lines(logs)
    assert line.path == "local" and line.status == 200 and not hasattr(line, "failure")
    assert line.stream["chunks"] == 3 and line.stream["tokens"] == 3
    assert line.stream["body_bytes"] == sum(map(len, chunks))
    assert line.stream["ttft_ms"] > 0 and line.stream["tokens_per_s"] > 0


def test_a_warm_stream_whose_app_is_slow_to_its_first_token_is_served_locally(
        built: Built) -> None:
    """GIVEN a warm environment whose route has learnt a time to first token far above its
    first-token SLA (an LLM slow to its first token) THEN the stream is the app's, local: the
    degraded first event answers a cold start's wait, not the app's own latency (warm, no
    path of the toolkit sends the app's first token sooner)."""
    handler, logs, _ = handler_for(built)
    dispatcher = handler.dispatcher
    assert dispatcher is not None
    route = next(r for r in dispatcher.routes if r.stream)
    sla_ms, tracker, hooks = dispatcher.admission.route_state(route, dispatcher.config.sla_ms)
    assert hooks.degraded_event is not None  # a degraded first event was possible
    tracker.extend([60_000.0] * 20)
    assert tracker.p95_ms > (route.first_token_ms or sla_ms)
    response = url_call(handler, "/v1/chat", {"text": "where is A-17"})
    assert isinstance(response, StreamedResponse)
    assert response.headers["x-warmstart-path"] == "local"
    chunks, error = drain(response)
    assert error is None and events_of(chunks) == [(None, {"token": w}) for w in WORDS]
    (line,) = stream_lines(logs)
    assert line.path == "local"


def test_bad_input_is_a_buffered_4xx(built: Built) -> None:
    handler, _, _ = handler_for(built)
    response = url_call(handler, "/v1/chat", {"nope": 1})
    assert isinstance(response, dict) and response["statusCode"] == 422


def test_a_buffered_caller_gets_the_whole_stream_in_one_answer(built: Built) -> None:
    handler, _, _ = handler_for(built)
    response = handler(adapt_event("http_api_v2.json", "POST", "/v1/chat", {"text": "hi"}),
                       LambdaContext())
    assert isinstance(response, dict) and response["statusCode"] == 200
    assert headers_of(response)["x-warmstart-stream"] == "buffered"
    assert events_of([response["body"].encode()]) == [(None, {"token": w}) for w in WORDS]
    # a buffered route keeps its answer as it was: no stream header
    health = handler(adapt_event("http_api_v2.json", "GET", "/healthz"), LambdaContext())
    assert "x-warmstart-stream" not in headers_of(health)


def test_a_buffered_caller_learns_its_own_tracker_not_the_streams_first_token_one(
        built: Built) -> None:
    """GIVEN a warm streaming route, WHEN callers that do not stream get the whole answer in one
    piece, THEN their answer times go to the route's buffered tracker, and the route's own
    tracker (the time to the first chunk, held against the first-token SLA) keeps only what
    streamed answers taught it: a buffered caller's whole-answer seconds must not make a
    streamed request look too slow to serve locally."""
    handler, _, _ = handler_for(built)
    dispatcher = handler.dispatcher
    assert dispatcher is not None
    route = next(r for r in dispatcher.routes if r.path == "/v1/chat")
    _, stream_tracker, _ = dispatcher.admission.route_state(route, dispatcher.config.sla_ms)
    _, buffered_tracker, _ = dispatcher.admission.route_state(
        route, dispatcher.config.sla_ms, buffered_stream=True)
    assert buffered_tracker is not stream_tracker
    before = list(stream_tracker.recent())
    for _ in range(3):
        response = handler(adapt_event("http_api_v2.json", "POST", "/v1/chat", {"text": "hi"}),
                           LambdaContext())
        assert headers_of(response)["x-warmstart-stream"] == "buffered"
    assert list(stream_tracker.recent()) == before
    assert len(list(buffered_tracker.recent())) == 3
    # a streamed answer still teaches the route's tracker its first chunk
    chunks, error = drain(url_call(handler, "/v1/chat", {"text": "hi"}))
    assert error is None and chunks
    assert len(list(stream_tracker.recent())) == len(before) + 1


def test_mid_stream_the_runtime_gives_the_streams_time_left_not_the_spent_first_token_budget(
        built: Built) -> None:
    """GIVEN a streaming route with a 150 ms first-token SLA, WHEN its app asks
    `AgentRuntime.remaining_ms` before its first token and again 250 ms after it, THEN the first
    answer is within the first token's budget and the second is the stream's time left (the
    invocation's remaining time less the stream margin), not a negative, spent first-token
    budget that would make a mid-stream downstream call time out at once."""
    handler, _, _ = handler_for(built)
    response = url_call(handler, "/v1/budget", {"text": "hi"})
    assert isinstance(response, StreamedResponse)
    chunks, error = drain(response)
    assert error is None
    first, later = (data["left_ms"] for _, data in events_of(chunks))
    assert 0 < first <= 150.0
    assert later > 1_000.0  # the test context's 30 s less the 0.5 s margin and the 0.25 s


def test_a_buffered_caller_of_a_stream_over_6_mb_gets_the_too_large_answer(built: Built) -> None:
    handler, logs, _ = handler_for(built)
    response = handler(adapt_event("http_api_v2.json", "POST", "/v1/big"), LambdaContext())
    assert isinstance(response, dict) and response["statusCode"] == 500
    assert body_of(response)["error"] == "internal_error"
    assert headers_of(response)["x-warmstart-stream"] == "buffered"
    assert logs.failures() == ["model_error"]


def test_a_runtime_client_that_cannot_stream_gets_the_buffered_answer(built: Built) -> None:
    handler, _, _ = handler_for(built)
    streaming._runtime_streams = False
    response = url_call(handler, "/v1/chat", {"text": "hi"})
    assert isinstance(response, dict) and headers_of(response)["x-warmstart-stream"] == "buffered"


def test_a_cold_start_sends_the_degraded_first_event_then_the_full_stream(built: Built) -> None:
    """GIVEN a model estimated at 10 s and a first-token SLA of 800 ms, WHEN a request comes,
    THEN the prelude and the degraded event go out at once; once the model is there the same
    response carries the app's full stream."""
    handler, logs, gate = handler_for(built, released=False, model_p95_ms=10_000.0)
    response = url_call(handler, "/v1/chat", {"text": "hi"}, context=LambdaContext(timeout_s=60))
    assert isinstance(response, StreamedResponse)
    assert response.status_code == 200 and response.headers["x-warmstart-path"] == "degraded"
    chunks = iter(response)
    first = next(chunks)  # sent while the model is still loading
    assert not gate.released.is_set()
    assert events_of([first]) == [("degraded", {"notice": "warming up", "echo": "hi",
                                                "degraded": True, "level": "L0"})]
    gate.released.set()
    rest = list(chunks)
    assert events_of(rest) == [(None, {"token": w}) for w in WORDS]
    assert response.on_finish is not None
    response.on_finish(None)  # a runtime client without numbers: the iterator's own count
    (line,) = stream_lines(logs)
    assert line.path == "degraded" and line.stream["chunks"] == 4 and not hasattr(line, "failure")


def test_the_degraded_first_event_is_the_last_resort_within_the_sla_not_a_503(built: Built) -> None:
    """GIVEN a cold start whose first-token SLA (140 ms) less admission's 100 ms headroom leaves
    less than the degraded event's 50 ms seed: no path fits that budget, but the SLA itself
    still holds the event THEN the degraded event goes out (a 503 would come no sooner) and
    the full stream follows it once the model is there."""
    handler, logs, gate = handler_for(built, released=False, model_p95_ms=10_000.0)
    response = url_call(handler, "/v1/tight", {"text": "hi"}, context=LambdaContext(timeout_s=60))
    assert isinstance(response, StreamedResponse) and response.headers["x-warmstart-path"] == "degraded"
    chunks = iter(response)
    assert events_of([next(chunks)])[0][0] == "degraded"
    gate.released.set()
    assert events_of(list(chunks)) == [(None, {"token": w}) for w in WORDS]
    assert response.on_finish is not None
    response.on_finish(None)
    (line,) = stream_lines(logs)
    assert line.path == "degraded"


def test_when_the_sla_cannot_hold_even_the_degraded_event_the_stream_is_shed(built: Built) -> None:
    """A first-token SLA of 30 ms, under the degraded event's 50 ms: a 503 with Retry-After."""
    handler, _, _ = handler_for(built, released=False, model_p95_ms=10_000.0)
    shed = url_call(handler, "/v1/gone", {"text": "hi"})
    assert isinstance(shed, dict) and shed["statusCode"] == 503
    assert "retry-after" in headers_of(shed) and headers_of(shed)["x-warmstart-path"] == "shed"


def test_a_local_path_that_cannot_be_ready_before_the_deadline_ends_with_cold_start_timeout(
        built: Built) -> None:
    handler, logs, _ = handler_for(built, released=False, model_p95_ms=60_000.0)
    context = LambdaContext(timeout_s=DEADLINE_MARGIN_MS / 1000.0 + 2.0)
    response = url_call(handler, "/v1/chat", {"text": "hi"}, context=context)
    assert isinstance(response, StreamedResponse)
    chunks, error = drain(response)
    assert [name for name, _ in events_of(chunks)] == ["degraded", "error"]
    assert events_of(chunks)[1][1]["error"]["type"] == "cold_start_timeout"
    assert isinstance(error, StreamFailed)
    (line,) = stream_lines(logs)
    assert line.failure == "cold_start_timeout" and line.path == "degraded"


def test_an_app_answering_non_2xx_behind_the_degraded_event_ends_with_an_error_event(
        built: Built) -> None:
    handler, _, gate = handler_for(built, released=False, model_p95_ms=10_000.0)
    response = url_call(handler, "/v1/refuses", {"text": "hi"}, context=LambdaContext(timeout_s=60))
    assert isinstance(response, StreamedResponse)
    chunks = iter(response)
    assert events_of([next(chunks)])[0][0] == "degraded"
    gate.released.set()
    rest = []
    with pytest.raises(StreamFailed) as failed:
        for chunk in chunks:
            rest.append(chunk)  # noqa: PERF402 - what came before the raise
    assert failed.value.tag.value == "app_error"
    assert [name for name, _ in events_of(rest)] == ["error"]


@pytest.mark.parametrize(("path", "expected"), [
    ("/v1/breaks", [("degraded", "notice"), ("error", "app_error")]),
    ("/v1/once", [("degraded", "notice"), (None, "answer")]),
])
def test_behind_the_degraded_event_an_app_failing_or_answering_at_once_still_ends_in_sse(
        built: Built, path: str, expected: list[tuple[str | None, str]]) -> None:
    """An app that raises before its start ends the stream with an error event tagged by its
    cause; one that answers JSON at once is sent as one event of that JSON."""
    handler, _, gate = handler_for(built, released=False, model_p95_ms=10_000.0)
    response = url_call(handler, path, {"text": "hi"}, context=LambdaContext(timeout_s=60))
    assert isinstance(response, StreamedResponse)
    chunks = iter(response)
    first = next(chunks)
    gate.released.set()
    rest: list[bytes] = []
    try:
        rest.extend(chunks)
    except StreamFailed:
        pass
    seen = []
    for name, data in events_of([first, *rest]):
        if name == "error":
            seen.append((name, data["error"]["type"]))
        elif name == "degraded":
            seen.append((name, "notice"))
        else:
            seen.append((name, next(iter(json.loads(data) if isinstance(data, str) else data))))
    assert seen == expected


def test_a_degraded_event_hook_that_raises_is_a_500(built: Built) -> None:
    handler, logs, _ = handler_for(built, released=False, model_p95_ms=10_000.0)
    response = url_call(handler, "/v1/chat", {"text": "boom"})
    assert isinstance(response, dict) and response["statusCode"] == 500
    assert body_of(response)["error"] == "internal_error" and logs.failures() == ["model_error"]


def test_without_a_hook_a_cold_stream_gets_the_buffered_degradation(built: Built) -> None:
    handler, logs, _ = handler_for(built, released=False, model_p95_ms=60_000.0)
    degraded = url_call(handler, "/v1/plain", {"text": "hi"})
    assert isinstance(degraded, dict) and degraded["statusCode"] == 200
    assert body_of(degraded)["degraded"] is True and body_of(degraded)["echo"] == "hi"
    shed = url_call(handler, "/v1/bare")
    assert isinstance(shed, dict) and shed["statusCode"] == 503
    assert "retry-after" in headers_of(shed) and headers_of(shed)["x-warmstart-path"] == "shed"
    # each decision is logged with its path, failure tag and the stream field
    assert [(r.path, getattr(r, "failure", None), r.stream) for r in logs.records
            if getattr(r, "route", "").startswith("POST")] == [
        ("degraded", None, "buffered"), ("shed", "timeout_resource", "buffered")]


def test_a_cold_stream_that_fits_waits_for_the_model_then_streams(built: Built) -> None:
    handler, _, gate = handler_for(built, released=False, model_p95_ms=50.0)
    gate.released.set()  # the model loads within its estimate
    response = url_call(handler, "/v1/chat", {"text": "hi"})
    assert isinstance(response, StreamedResponse) and response.headers["x-warmstart-path"] == "local"
    chunks, error = drain(response)
    assert error is None and len(events_of(chunks)) == 3


FIRST_TOKEN_HELD = threading.Event()


def test_a_cold_start_served_locally_whose_app_misses_the_first_token_gets_the_degraded_event_first(
        built: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN a cold start whose estimate fits (the model loads within its 50 ms estimate) and
    an app that then holds its first token past the route's 300 ms first-token SLA (a new
    environment has no measured time to first token) THEN the degraded first event goes out
    at the first token's deadline and the app's own tokens follow it in the same stream."""
    FIRST_TOKEN_HELD.clear()
    handler, logs, gate = handler_for(built, released=False, model_p95_ms=50.0)
    waited = LocalPath.wait

    def release_once_admission_waits(self: LocalPath, *args: Any, **kwargs: Any) -> None:
        # the model loads only after admission saw it loading (a cold start): released
        # before the call, the loader may finish first and the request is then warm
        gate.released.set()
        waited(self, *args, **kwargs)

    monkeypatch.setattr(LocalPath, "wait", release_once_admission_waits)
    response = url_call(handler, "/v1/slowfirst", {"text": "hi"})
    assert isinstance(response, StreamedResponse) and response.headers["x-warmstart-path"] == "local"
    chunks = iter(response)
    first = next(chunks)  # the app still holds its first token: this is the guard's event
    assert events_of(first)[0][0] == "degraded"
    FIRST_TOKEN_HELD.set()
    rest, error = drain_rest(response, chunks, [first])
    assert error is None
    assert events_of(rest)[1:] == [(None, {"token": w}) for w in WORDS]
    (line,) = stream_lines(logs)
    assert line.path == "degraded"  # the first token was the degraded one


def test_a_sync_endpoint_with_a_plain_generator_streams_too(built: Built) -> None:
    """The other common shape: a ``def`` endpoint returning a ``StreamingResponse`` over a plain
    generator (Starlette iterates it in its thread pool): each token is its own chunk."""
    handler, logs, _ = handler_for(built)
    response = url_call(handler, "/v1/sync")
    assert isinstance(response, StreamedResponse) and response.headers["x-warmstart-path"] == "local"
    chunks, error = drain(response)
    assert error is None and events_of(chunks) == [(None, {"token": w}) for w in WORDS]
    assert len(chunks) == len(WORDS)
    (line,) = stream_lines(logs)
    assert line.stream["chunks"] == len(WORDS) and not hasattr(line, "failure")


def test_a_warm_app_slow_to_its_first_token_gets_no_guard(built: Built) -> None:
    """The guard is for a cold start: warm, the app's first token is its own, however late."""
    FIRST_TOKEN_HELD.clear()
    handler, _, _ = handler_for(built)
    response = url_call(handler, "/v1/slowfirst", {"text": "hi"})
    assert isinstance(response, StreamedResponse)
    threading.Timer(0.5, FIRST_TOKEN_HELD.set).start()  # past the 300 ms first-token SLA
    chunks, error = drain(response)
    assert error is None and events_of(chunks) == [(None, {"token": w}) for w in WORDS]


def drain_rest(response: StreamedResponse, chunks: Iterator[bytes],
               taken: list[bytes]) -> tuple[list[bytes], BaseException | None]:
    """`drain` for an iterator already started (``taken`` its chunks so far)."""
    out = list(taken)
    error: BaseException | None = None
    try:
        out.extend(chunks)
    except Exception as exc:  # noqa: BLE001 - the runtime client sends the trailers
        error = exc
    assert response.on_finish is not None
    response.on_finish(StreamOutcome(1.0, 2.0, sum(map(len, out)), len(out),
                                     "Runtime.StreamError" if error is not None else None))
    return out, error


def test_levels_apply_to_streaming_routes(built: Built) -> None:
    l2, logs, _ = handler_for(built, WARMSTART_DEGRADATION_LEVEL="L2")
    cut = url_call(l2, "/v1/chat", {"text": "hi"})
    assert isinstance(cut, StreamedResponse) and cut.headers["x-warmstart-path"] == "degraded"
    chunks, error = drain(cut)  # the precision cut: the degraded event is the whole answer
    assert error is None and events_of(chunks) == [
        ("degraded", {"notice": "warming up", "echo": "hi", "degraded": True, "level": "L2"})]
    (line,) = stream_lines(logs)
    assert line.path == "degraded"
    l1, _, _ = handler_for(built, WARMSTART_DEGRADATION_LEVEL="L1")
    off = url_call(l1, "/v1/report")
    assert isinstance(off, dict) and off["statusCode"] == 503
    assert body_of(off)["error"] == "feature_disabled"
    l3, _, _ = handler_for(built, WARMSTART_DEGRADATION_LEVEL="L3")
    shed = url_call(l3, "/v1/bare")
    assert isinstance(shed, dict) and shed["statusCode"] == 503


def test_a_client_that_disconnects_is_tagged_and_the_post_response_phase_waits_for_the_end(
        built: Built) -> None:
    handler, logs, _ = handler_for(built)
    post = PostResponse("127.0.0.1:9")  # not registered: only its bookkeeping is used
    handler.post_response = post
    context = LambdaContext()
    response = url_call(handler, "/v1/chat", {"text": "hi"}, context=context)
    assert isinstance(response, StreamedResponse)
    assert context.aws_request_id not in post._returned  # the stream has not ended
    chunks = iter(response)
    next(chunks)
    response.close()  # the client went away
    assert response.on_finish is not None
    response.on_finish(StreamOutcome(None, None, 0, 1, "ClientDisconnected"))
    assert context.aws_request_id in post._returned
    (line,) = stream_lines(logs)
    assert line.failure == "client_disconnected"


def test_a_buffered_route_imports_nothing_of_the_streaming_path() -> None:
    """A buffered request, cold and warm, in a fresh process: the streaming modules stay unloaded
    (they are imported by the first request of a streaming route)."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from fastapi import FastAPI\n"
        "from functions.runtime.agent import Agent, Route\n"
        "from tests.conftest import LambdaContext, adapt_event\n"
        "def create_app():\n"
        "    app = FastAPI()\n"
        "    @app.get('/healthz')\n"
        "    async def healthz(): return {'status': 'ok'}\n"
        "    return app\n"
        "handler = Agent('plain', app=create_app, routes=[Route('GET', '/healthz')])"
        ".lambda_handler(env={'WARMSTART_FINISH_PRELOAD': 'off'})\n"
        "for source in ('function_url.json', 'http_api_v2.json', 'function_url.json'):\n"
        "    answer = handler(adapt_event(source, 'GET', '/healthz'), LambdaContext())\n"
        "    assert answer['statusCode'] == 200, answer\n"
        "names = ('functions.runtime.streaming', 'functions.runtime.asgi_stream',\n"
        "         'functions.runtime.admission.stream')\n"
        "print('LOADED=' + json.dumps(sorted(m for m in names if m in sys.modules)))\n"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=root)
    (loaded,) = [line for line in out.stdout.splitlines() if line.startswith("LOADED=")]
    assert json.loads(loaded.removeprefix("LOADED=")) == []


def test_the_idle_bound_is_configured_by_warmstart_stream_idle_ms(built: Built) -> None:
    handler, logs, _ = handler_for(built, WARMSTART_STREAM_IDLE_MS="200")
    response = url_call(handler, "/v1/stalls")
    assert isinstance(response, StreamedResponse)
    chunks, error = drain(response)
    assert [name for name, _ in events_of(chunks)] == [None, "error"]
    assert events_of(chunks)[1][1]["error"]["type"] == "stream_timeout"
    assert isinstance(error, StreamFailed)
    (line,) = stream_lines(logs)
    assert line.failure == "stream_timeout"
    with pytest.raises(RuntimeConfigError, match="WARMSTART_STREAM_IDLE_MS"):
        RuntimeConfig.from_env({"WARMSTART_STREAM_IDLE_MS": "0"})
    assert RuntimeConfig.from_env({}).stream_idle_ms == 30_000.0


def held_telemetry(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Hold the telemetry stage (Powertools) of the handlers made after this until the event
    is set; the stages after it (the model) wait with it."""
    release = threading.Event()
    original = AgentHandler._load_telemetry

    def held(self: AgentHandler) -> object:
        release.wait(30)
        return original(self)

    monkeypatch.setattr(AgentHandler, "_load_telemetry", held)
    return release


def a_stream_ended_while_powertools_loads(built: Built, monkeypatch: pytest.MonkeyPatch,
                                          wait_s: float) -> tuple[AgentHandler, LogCollector,
                                                                  StreamedResponse, threading.Event]:
    release = held_telemetry(monkeypatch)
    monkeypatch.setattr(admission_stream, "TELEMETRY_WAIT_S", wait_s)
    handler, logs = built.handler(chat_agent(gate_of(built)), env_for())
    assert handler.preload.wait("web", 30)
    response = url_call(handler, "/v1/report")  # no model: served once the web stack is up
    assert isinstance(response, StreamedResponse)
    assert not handler.preload.done("telemetry")
    return handler, logs, response, release


def test_a_stream_that_ends_while_powertools_loads_is_logged_before_its_end_returns(
        built: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN Powertools still loading when a stream ends, WHEN it loads within the record's
    wait THEN the stream is logged before ``on_finish`` returns: the runtime client asks for
    the next invocation after it, and Lambda freezes the environment until that comes."""
    _, logs, response, release = a_stream_ended_while_powertools_loads(built, monkeypatch, 30.0)
    releaser = threading.Timer(0.05, release.set)  # while on_finish waits for the stage
    releaser.start()
    chunks, error = drain(response)
    releaser.join()
    assert error is None and events_of(chunks) == [(None, {"token": "report"})]
    (line,) = stream_lines(logs)
    assert line.path == "local" and line.stream["chunks"] == 1


def test_a_stream_whose_record_outwaits_the_wait_is_logged_when_powertools_loads(
        built: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the wait the record is pending: the telemetry stage logs it, once, when it loads."""
    handler, logs, response, release = a_stream_ended_while_powertools_loads(built, monkeypatch,
                                                                             0.0)
    drain(response)
    assert stream_lines(logs) == []
    release.set()
    assert handler.preload.wait("telemetry", 30)
    (line,) = stream_lines(logs)
    assert line.stream["chunks"] == 1 and handler.dispatcher.flush_pending() == 0


def test_an_app_that_aborts_after_its_own_error_event_is_recorded_with_its_tag(
        built: Built) -> None:
    """`StreamAborted` after the app's own error event: the stream ends with that event and the
    runtime client's error trailers (the iterator raises), the record carries the app's tag; a
    buffered caller gets the JSON error answer of that tag."""
    handler, logs, _ = handler_for(built)
    response = url_call(handler, "/v1/aborts")
    assert isinstance(response, StreamedResponse)
    chunks, error = drain(response)
    assert [name for name, _ in events_of(chunks)] == [None, "error"]
    assert events_of(chunks)[1][1]["error"]["type"] == "llm_unavailable"  # the app's, as sent
    assert isinstance(error, StreamFailed) and error.tag == "downstream_timeout"
    (line,) = stream_lines(logs)
    assert line.failure == "downstream_timeout" and line.stream["chunks"] == 2
    buffered = handler(adapt_event("http_api_v2.json", "POST", "/v1/aborts"), LambdaContext())
    assert buffered["statusCode"] == 504 and body_of(buffered)["error"] == "downstream_timeout"
