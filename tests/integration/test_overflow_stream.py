"""Streamed overflow against the real GPU endpoint (intent model loaded, both SageMaker
operations on one server): the buffered ``InvokeEndpoint`` and the streamed
``InvokeEndpointWithResponseStream`` share one client, one pool of connections and one
circuit breaker, as they do in a Lambda execution environment.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from functions.gpu_endpoint.container import IntentService
from functions.gpu_endpoint.server import BackgroundServer, create_app
from functions.gpu_endpoint.stream import GenerationConfig, StreamFaults
from functions.runtime import lifecycle, streaming
from functions.runtime.admission.state import RouteHooks
from functions.runtime.agent import Agent, AgentRuntime, BadRequest, Route
from functions.runtime.agent_handler import AgentHandler
from functions.runtime.breaker import BreakerState, CircuitBreaker
from functions.runtime.overflow import OverflowClient, OverflowFailure, OverflowTimeout
from functions.runtime.overflow_stream import STREAM_ERROR_TYPE, open_overflow_stream
from functions.runtime.streaming import StreamedResponse, StreamOutcome, sse_event
from infra.local.eventstream import encode_message
from tests.conftest import LambdaContext, adapt_event
from tests.integration.conftest import GPU_ENDPOINT_NAME

TOKENS = 6


class FakeClock:
    """Monotonic ms the breaker reads (its cool-down is passed by moving it, not by waiting)."""

    def __init__(self) -> None:
        self.now_ms = 0.0

    def __call__(self) -> float:
        return self.now_ms


def token_event(part: Mapping[str, Any]) -> dict[str, str] | None:
    content = part["choices"][0]["delta"].get("content")
    return {"token": content} if content else None


HOOKS = RouteHooks(overflow_event=token_event,
                   overflow_request=lambda p: {"messages": [{"role": "user", "content": p["text"]}]})


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture(scope="module")
def endpoint(service: IntentService) -> Iterator[BackgroundServer]:
    """The GPU endpoint with the model and the streaming facade (the local stack's encoder)."""
    app = create_app(service=service, endpoint_name=GPU_ENDPOINT_NAME, enable_fault_api=True,
                     event_encoder=encode_message,
                     generation=GenerationConfig(first_token_ms=10.0, token_interval_ms=2.0,
                                                 max_tokens=TOKENS))
    with BackgroundServer(app) as srv:
        yield srv


@pytest.fixture()
def faults(endpoint: BackgroundServer) -> Iterator[StreamFaults]:
    injector: StreamFaults = endpoint._server.config.app.state.stream_faults
    injector.clear()
    yield injector
    injector.clear()


def stream(client: OverflowClient, text: str = "where is my parcel") -> StreamedResponse | None:
    import time

    now = time.perf_counter() * 1000.0
    return open_overflow_stream(client, HOOKS, {"text": text}, now + 3000.0, feature="chat")


def drain(response: StreamedResponse) -> tuple[list[bytes], OverflowFailure | None]:
    chunks: list[bytes] = []
    try:
        chunks.extend(response)
    except OverflowFailure as exc:
        return chunks, exc
    return chunks, None


def intent(client: OverflowClient, text: str) -> dict[str, Any]:
    return client.invoke({"text": text}, budget_ms=3000.0).body


def test_buffered_and_streamed_calls_share_one_pooled_connection(
    endpoint: BackgroundServer, service: IntentService, faults: StreamFaults,
) -> None:
    client = OverflowClient(GPU_ENDPOINT_NAME, endpoint_url=endpoint.url, region_name="us-east-1")
    assert intent(client, "please reset my password") == service.answer("please reset my password")
    response = stream(client)
    assert response is not None
    chunks, failure = drain(response)
    assert failure is None and len(chunks) == TOKENS
    assert intent(client, "cancel my order") == service.answer("cancel my order")
    runtime = client.sagemaker_runtime()
    assert len(runtime._idle) == 1


def test_a_stream_cut_midway_leaves_the_buffered_path_working(
    endpoint: BackgroundServer, service: IntentService, faults: StreamFaults,
) -> None:
    client = OverflowClient(GPU_ENDPOINT_NAME, endpoint_url=endpoint.url, region_name="us-east-1")
    faults.set("cut", count=1, after_parts=3)
    response = stream(client)
    assert response is not None
    chunks, failure = drain(response)
    assert isinstance(failure, OverflowTimeout)
    assert STREAM_ERROR_TYPE.encode() in chunks[-1]
    # the dropped connection is not reused: the next buffered call gets a good one
    assert intent(client, "cancel my order") == service.answer("cancel my order")


def test_stream_failures_open_the_shared_breaker_and_a_probe_stream_closes_it(
    endpoint: BackgroundServer, faults: StreamFaults,
) -> None:
    clock = FakeClock()
    client = OverflowClient(GPU_ENDPOINT_NAME, endpoint_url=endpoint.url, region_name="us-east-1",
                            breaker=CircuitBreaker(clock, failure_threshold=3, cooldown_ms=5000.0))
    faults.set("unavailable", count=3)
    for _ in range(3):
        assert stream(client) is None
    assert client.breaker.state is BreakerState.OPEN
    served = faults.served
    assert stream(client) is None  # refused by the breaker: nothing sent
    assert faults.served == served
    with pytest.raises(OverflowFailure, match="circuit breaker is open"):
        client.invoke({"text": "hi"}, budget_ms=1000.0)  # the buffered path sees it too
    clock.now_ms += 5000.0
    probe = stream(client)
    assert probe is not None and client.breaker.state is BreakerState.HALF_OPEN
    assert drain(probe)[1] is None
    assert client.breaker.state is BreakerState.CLOSED


# -- through the handler: a cold start of a streaming route -------------------------------------
WORDS = ["the", "order", "shipped"]


def chat_payload(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise BadRequest('send {"text": "..."}', status=422)
    return {"text": body["text"]}


def chat_app(runtime: AgentRuntime) -> FastAPI:
    app = FastAPI()

    async def tokens() -> Any:
        for word in runtime.model()["words"]:
            yield sse_event({"token": word})

    @app.post("/v1/chat")
    async def chat(request: Request) -> StreamingResponse:
        await request.json()
        return StreamingResponse(tokens(), media_type="text/event-stream")

    return app


class ChatModel:
    """The agent's model loader: it loads when the test releases it (a cold start until then)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def load(self, runtime: AgentRuntime) -> dict[str, Any]:
        self.released.wait(30)
        return {"words": list(WORDS)}


@pytest.fixture()
def cold_chat(endpoint: BackgroundServer) -> Iterator[tuple[AgentHandler, ChatModel]]:
    """A chat agent on a cold start (its model loading, p95 5 s) whose streaming route overflows
    to the GPU endpoint's stream; this process's runtime client streams."""
    lifecycle.reset_environment()
    streaming.mark_runtime_streams()
    model = ChatModel()
    route = Route("POST", "/v1/chat", stream=True, needs_model=True, first_token_ms=1500.0,
                  validate=chat_payload, overflow_request=HOOKS.overflow_request,
                  overflow_event=token_event,
                  degraded_event=lambda payload: {"notice": "warming up"})
    agent = Agent("chat", app=chat_app, routes=[route], model=model.load,
                  stage_p95_ms={"model": 5000.0})
    handler = agent.lambda_handler(env={
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand", "AWS_REGION": "us-east-1",
        "WARMSTART_FINISH_PRELOAD": "off",
        "POWERTOOLS_SERVICE_NAME": f"chat-test-{uuid.uuid4().hex[:8]}",
        "WARMSTART_OVERFLOW_ENDPOINT_NAME": GPU_ENDPOINT_NAME,
        "WARMSTART_OVERFLOW_ENDPOINT_URL": endpoint.url})
    assert handler.preload.wait("overflow", 30) and handler.preload.wait("web", 30)
    yield handler, model
    model.released.set()
    handler.preload.wait_all(30)
    streaming._runtime_streams = False
    lifecycle.reset_environment()


def streamed(handler: AgentHandler) -> StreamedResponse:
    """A function URL request of the chat route; its answer streams."""
    response = handler(adapt_event("function_url.json", "POST", "/v1/chat",
                                   {"text": "where is my parcel"}), LambdaContext())
    assert isinstance(response, StreamedResponse)
    return response


def finished(response: StreamedResponse) -> tuple[list[bytes], OverflowFailure | None]:
    """What the runtime client does: write every chunk, then ``on_finish``."""
    chunks, failure = drain(response)
    assert response.on_finish is not None
    response.on_finish(StreamOutcome(None, None, sum(map(len, chunks)), len(chunks),
                                     "Runtime.StreamError" if failure is not None else None))
    return chunks, failure


def test_a_cold_streaming_request_is_answered_by_the_endpoints_stream(
    cold_chat: tuple[AgentHandler, ChatModel], faults: StreamFaults,
) -> None:
    handler, _ = cold_chat
    response = streamed(handler)
    assert response.headers["x-warmstart-path"] == "overflow"
    chunks, failure = finished(response)
    assert failure is None and len(chunks) == TOKENS
    assert b'"token":"Answer"' in chunks[0]


def test_an_overflow_stream_after_a_local_wait_that_ran_out_is_logged_as_delivered(
    cold_chat: tuple[AgentHandler, ChatModel], faults: StreamFaults,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """GIVEN a model estimated ready in 50 ms that does not load: admission waits for the local
    path (local first), the wait runs out (``timeout_resource``), the endpoint's stream answers
    THEN the stream is logged as delivered, not as a failed one."""
    handler, _ = cold_chat
    assert handler.admission is not None and handler.preload.wait("telemetry", 30)  # the log line
    handler.admission.stage_p95_ms["model"] = 50.0
    response = streamed(handler)
    assert response.headers["x-warmstart-path"] == "overflow"
    chunks, failure = finished(response)
    assert failure is None and len(chunks) == TOKENS
    # a delivered overflow stream is no failed stream: why local was passed over is the path
    # (the EMF lines: the Powertools logger may write to an earlier test's captured stream)
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines()
             if line.startswith("{")]
    assert [line for line in lines if "TimeToFirstTokenMs" in line]  # the stream's record ran
    assert [line.get("path") for line in lines if "Requests" in line] == ["overflow"]
    assert not [line for line in lines if "StreamFailures" in line]


def test_a_cold_stream_cut_midway_ends_with_the_error_event_and_the_trailers(
    cold_chat: tuple[AgentHandler, ChatModel], faults: StreamFaults,
) -> None:
    handler, _ = cold_chat
    faults.set("cut", count=1, after_parts=3)
    response = streamed(handler)
    chunks, failure = finished(response)
    assert isinstance(failure, OverflowTimeout)  # raised: the runtime client sends the trailers
    assert b"event: error" in chunks[-1] and STREAM_ERROR_TYPE.encode() in chunks[-1]


def test_an_endpoint_that_cannot_start_in_time_leaves_the_degraded_first_event(
    cold_chat: tuple[AgentHandler, ChatModel], faults: StreamFaults,
) -> None:
    handler, model = cold_chat
    faults.set("slow_first_part", count=1, delay_ms=5000)
    response = streamed(handler)
    assert response.headers["x-warmstart-path"] == "degraded"
    model.released.set()  # the local path gets ready: the full stream follows
    chunks, failure = finished(response)
    assert failure is None
    assert chunks[0].startswith(b"event: degraded")
    assert b"".join(chunks[1:]) == b"".join(sse_event({"token": w}) for w in WORDS)
