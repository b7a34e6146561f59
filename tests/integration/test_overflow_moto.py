"""Overflow client against moto's sagemaker-runtime in server mode (results configured through
moto's API): the client's real signed HTTP request (awscrt SigV4 over ``http.client``) goes to
moto's server, which routes it by its signature's service and path as AWS would."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from moto.server import ThreadedMotoServer

from functions.gpu_endpoint.server import bind_socket
from functions.intent_model.answers import check_intent_answer
from functions.runtime.breaker import BreakerState, CircuitBreaker
from functions.runtime.overflow import (
    OverflowClient,
    OverflowModelError,
    OverflowUnavailable,
    checked,
)

ANSWER = {"intent": "billing", "score": 0.81, "scores": {"billing": 0.81, "greeting": 0.1},
          "degraded": False, "model": "all-MiniLM-L6-v2-int8"}


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _aws(monkeypatch: pytest.MonkeyPatch, moto_url: str) -> Iterator[None]:
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    yield
    requests.post(f"{moto_url}/moto-api/reset", timeout=5)


@pytest.fixture
def client_for(moto_url: str) -> Callable[..., OverflowClient]:
    """``client_for(**options)``: the default overflow client, sending to the moto server."""

    def make(**options: Any) -> OverflowClient:
        return OverflowClient("agent-overflow", endpoint_url=moto_url, region_name="us-east-1",
                              **options)

    return make


def queue_results(moto_url: str, *bodies: str) -> None:
    results = [{"Body": body, "ContentType": "application/json",
                "InvokedProductionVariant": "AllTraffic"} for body in bodies]
    reply = requests.post(f"{moto_url}/moto-api/static/sagemaker/endpoint-results",
                          json={"results": results, "region": "us-east-1"}, timeout=5)
    assert reply.status_code == 201


def test_valid_answer_is_returned_and_latency_tracked(
    moto_url: str, client_for: Callable[..., OverflowClient],
) -> None:
    queue_results(moto_url, json.dumps(ANSWER))
    client = client_for()
    result = client.invoke({"text": "my invoice is wrong"}, budget_ms=5000)
    assert result.body == ANSWER
    assert result.attempts == 1
    assert result.invoked_variant == "AllTraffic"
    assert result.latency_ms > 0
    assert client.latency.count == 1
    assert client.breaker.state is BreakerState.CLOSED


def test_malformed_bodies_are_model_errors_and_open_the_breaker(
    moto_url: str, client_for: Callable[..., OverflowClient],
) -> None:
    """GIVEN an endpoint answering garbage and the intent route's answer check (what
    ``Route(overflow_answer=...)`` wires in), WHEN called three times THEN each call fails with
    model_error (not retried) and the breaker opens, refusing the fourth call."""
    queue_results(moto_url, "not json at all", json.dumps({"label": "x"}), "[1, 2]",
                  json.dumps(ANSWER))
    client = client_for(breaker=CircuitBreaker(lambda: 0.0, failure_threshold=3))
    intent_check = checked(check_intent_answer)
    expected = ["not JSON", "no string 'intent'", "is list"]
    for i, message in enumerate(expected):
        with pytest.raises(OverflowModelError, match=message) as info:
            client.invoke({"text": f"request {i}"}, budget_ms=5000, validate=intent_check)
        assert info.value.tag == "model_error"
        assert info.value.attempts == 1
    assert client.breaker.state is BreakerState.OPEN
    with pytest.raises(OverflowUnavailable, match="circuit breaker is open") as info:
        client.invoke({"text": "request 4"}, budget_ms=5000, validate=intent_check)
    assert info.value.tag == "tool_unavailable" and info.value.attempts == 0
    assert client.latency.count == 0


def test_without_a_route_check_any_json_object_is_the_answer(
    moto_url: str, client_for: Callable[..., OverflowClient],
) -> None:
    """The toolkit knows no agent: by default a JSON object is accepted as it is, anything
    else is still a model_error."""
    other = {"label": "x", "confidence": 0.2}
    queue_results(moto_url, json.dumps(other), "[1, 2]")
    client = client_for()
    assert client.invoke({"text": "a"}, budget_ms=5000).body == other
    with pytest.raises(OverflowModelError, match="overflow answer is list, expected an object"):
        client.invoke({"text": "b"}, budget_ms=5000)


def test_client_is_created_lazily_and_cached_per_timeout_bucket(
    moto_url: str, client_for: Callable[..., OverflowClient],
) -> None:
    queue_results(moto_url, json.dumps(ANSWER), json.dumps(ANSWER), json.dumps(ANSWER))
    made: list[tuple[float, float]] = []
    client = client_for()
    real_factory = client._factory

    def counting(connect_s: float, read_s: float) -> object:
        made.append((connect_s, read_s))
        return real_factory(connect_s, read_s)

    client._factory = counting
    assert made == []  # nothing until the first call
    client.invoke({"text": "a"}, budget_ms=1100)  # ~1080 ms left after reserve -> 1.0 s bucket
    client.invoke({"text": "b"}, budget_ms=1200)  # same bucket, cached client
    client.invoke({"text": "c"}, budget_ms=2500)  # 2.0 s bucket
    assert made == [(0.25, 0.75), (0.5, 1.5)]
