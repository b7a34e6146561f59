"""Streamed overflow against the real GPU endpoint (intent model loaded, both SageMaker
operations on one server): the buffered ``InvokeEndpoint`` and the streamed
``InvokeEndpointWithResponseStream`` share one client, one pool of connections and one
circuit breaker, as they do in a Lambda execution environment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from functions.gpu_endpoint.server import BackgroundServer, IntentService, create_app
from functions.gpu_endpoint.stream import GenerationConfig, StreamFaults
from functions.runtime.admission_state import RouteHooks
from functions.runtime.breaker import BreakerState, CircuitBreaker
from functions.runtime.overflow import OverflowClient, OverflowFailure, OverflowTimeout
from functions.runtime.overflow_stream import STREAM_ERROR_TYPE, open_overflow_stream
from functions.runtime.streaming import StreamedResponse
from infra.local.eventstream import encode_message
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
    injector: StreamFaults = endpoint._server.config.app.state.stream_faults  # noqa: SLF001
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
    assert len(runtime._idle) == 1  # noqa: SLF001 - the one connection, reused three times


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
