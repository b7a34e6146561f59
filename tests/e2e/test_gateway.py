"""The local HTTP API: real HTTP in, payload-2.0 events (checked against the real samples), HTTP out;
the limits the deployed API applies (stage throttling, payload sizes, the integration timeout)."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from infra.local.gateway import MAX_LAMBDA_RESPONSE_BYTES, MAX_REQUEST_BYTES, Gateway
from infra.local.spec import GatewayRoute, RouteThrottle, StageSettings
from tests.e2e.conftest import EVENTS, spec


@pytest.fixture
def gateway(make_emulator) -> Iterator[tuple[Gateway, object]]:
    emu = make_emulator()
    emu.add_function(spec("http-fn", "http_app.handler"))
    gw = Gateway(emu, "http-fn", "live")
    gw.start()
    yield gw, emu
    gw.stop()


def _sample(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def test_request_becomes_the_http_api_v2_event(gateway):
    gw, _ = gateway
    sample = _sample("http_api_v2.json")
    before_ms = int(time.time() * 1000)
    resp = httpx.post(
        f"{gw.endpoint}{sample['rawPath']}?{sample['rawQueryString']}",
        headers=[("Header1", "value1"), ("Header2", "value1"), ("Header2", "value2"),
                 ("Cookie", "; ".join(sample["cookies"])), ("content-type", "application/json")],
        content=sample["body"].encode())
    after_ms = int(time.time() * 1000)
    assert resp.status_code == 201
    event = resp.json()["event"]
    for key in ("version", "routeKey", "rawPath", "rawQueryString", "cookies",
                "queryStringParameters", "body", "isBase64Encoded"):
        assert event[key] == sample[key], key
    assert event["headers"]["header1"] == "value1"
    assert event["headers"]["header2"] == "value1,value2"  # repeated headers joined by commas
    assert all(k == k.lower() for k in event["headers"]) and "cookie" not in event["headers"]
    ctx, sample_ctx = event["requestContext"], sample["requestContext"]
    assert set(sample_ctx) - {"authentication", "authorizer"} <= set(ctx)
    assert set(sample_ctx["http"]) <= set(ctx["http"])
    assert ctx["http"]["method"] == "POST" and ctx["http"]["path"] == sample["rawPath"]
    assert ctx["http"]["sourceIp"] == "127.0.0.1" and ctx["routeKey"] == "$default"
    assert before_ms <= ctx["timeEpoch"] <= after_ms
    assert ctx["requestId"] == resp.headers["apigw-requestid"]
    assert set(event) <= set(sample)  # no key the real event does not have


def test_binary_body_arrives_base64_encoded(gateway):
    gw, _ = gateway
    sample = _sample("http_api_v2_base64_body.json")
    raw = base64.b64decode(sample["body"])
    resp = httpx.post(f"{gw.endpoint}{sample['rawPath']}", content=raw,
                      headers={"content-type": "application/octet-stream"})
    event = resp.json()["event"]
    assert event["isBase64Encoded"] is True and event["body"] == sample["body"]
    no_body = httpx.get(f"{gw.endpoint}/").json()["event"]
    assert "body" not in no_body and no_body["isBase64Encoded"] is False
    assert no_body["rawQueryString"] == "" and "cookies" not in no_body


def test_function_response_maps_to_http(gateway):
    gw, _ = gateway
    resp = httpx.get(f"{gw.endpoint}/cookies")
    assert resp.status_code == 201
    assert resp.headers.get_list("set-cookie") == ["session=abc; Path=/", "theme=dark"]
    assert resp.headers.get_list("x-multi") == ["a", "b"] and resp.headers["x-echo"] == "yes"
    binary = httpx.get(f"{gw.endpoint}/binary")
    assert binary.content == bytes(range(256))
    assert binary.headers["content-type"] == "application/octet-stream"
    plain = httpx.get(f"{gw.endpoint}/plain")
    assert plain.status_code == 200 and plain.json() == {"hello": "world"}
    assert plain.headers["content-type"] == "application/json"


def test_function_error_and_throttle_become_500(gateway):
    gw, emu = gateway
    boom = httpx.get(f"{gw.endpoint}/boom")
    assert boom.status_code == 500 and boom.json() == {"message": "Internal Server Error"}
    assert boom.headers["x-warmstart-gateway-error"] == "function error: RuntimeError"
    emu.put_function_concurrency("http-fn", 0)
    throttled = httpx.get(f"{gw.endpoint}/plain")
    assert throttled.status_code == 500
    assert throttled.headers["x-warmstart-gateway-error"] == "TooManyRequestsException"


class ManualClock:
    """The throttling buckets' clock, moved by the test."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _limits_gateway(emu, **kwargs) -> Gateway:
    emu.add_function(spec("limits-fn", "limits_app.handler", timeout_s=10.0))
    gw = Gateway(emu, "limits-fn", "live", **kwargs)
    gw.start()
    return gw


def test_stage_throttling_is_a_token_bucket_per_route_answered_429(make_emulator):
    # GIVEN a stage throttled at 2 req/s with a burst of 3, and a route with its own settings
    emu = make_emulator()
    emu.add_function(spec("http-fn", "http_app.handler"))
    clock = ManualClock()
    stage = StageSettings(RouteThrottle(rate_per_s=2.0, burst=3),
                          {"ANY /open": RouteThrottle(rate_per_s=1000.0, burst=1000)})
    gw = Gateway(emu, routes=(GatewayRoute("http-fn", "live", "ANY /open"),
                              GatewayRoute("http-fn", "live", "$default")),
                 stage=stage, monotonic_s=clock)
    gw.start()
    try:
        with httpx.Client(base_url=gw.endpoint) as client:
            # WHEN requests arrive faster than the bucket refills (the clock does not move)
            statuses = [client.get("/plain").status_code for _ in range(5)]
            # THEN the burst passes and the rest are throttled with API Gateway's answer
            assert statuses == [200, 200, 200, 429, 429]
            throttled = client.get("/plain")
            assert throttled.status_code == 429 and throttled.json() == {"message": "Too Many Requests"}
            assert throttled.headers["apigw-requestid"]
            assert "throttled: route $default" in throttled.headers["x-warmstart-gateway-error"]
            # a route with its own RouteSettings has its own bucket
            assert [client.get("/open").status_code for _ in range(5)] == [201] * 5
            # the bucket refills at the rate (2 tokens in 1 s) ...
            clock.now_s += 1.0
            assert [client.get("/plain").status_code for _ in range(3)] == [200, 200, 429]
            # ... and never beyond the burst
            clock.now_s += 60.0
            assert [client.get("/plain").status_code for _ in range(4)] == [200, 200, 200, 429]
        # throttled requests never reached the function: 3 + 5 + 2 + 3 invocations
        assert sum(e["invocations"] for e in emu.environments("http-fn")) == 13
    finally:
        gw.stop()


def test_payload_limits_are_api_gateways_and_lambdas(make_emulator):
    gw = _limits_gateway(make_emulator())
    try:
        with httpx.Client(base_url=gw.endpoint, timeout=60) as client:
            # a body within both limits arrives whole
            ok = client.post("/count", content=b"a" * (4 * 1024 * 1024),
                             headers={"content-type": "text/plain"})
            assert ok.status_code == 200 and ok.json() == {"received_bytes": 4 * 1024 * 1024}
            # over the HTTP API's 10 MB payload quota: 413 before any invocation
            over = client.post("/count", content=b"a" * (MAX_REQUEST_BYTES + 1),
                               headers={"content-type": "text/plain"})
            assert over.status_code == 413
            assert over.text == "HTTP content length exceeded 10485760 bytes."
            # the same for a chunked body (no Content-Length)
            chunks = (b"a" * (1 << 20) for _ in range(11))
            chunked = client.post("/count", content=chunks, headers={"content-type": "text/plain"})
            assert chunked.status_code == 413
            # under 10 MB but an event over Lambda's 6 MB request limit (base64 adds a third)
            binary = client.post("/count", content=bytes(5 * 1024 * 1024),
                                 headers={"content-type": "application/octet-stream"})
            assert binary.status_code == 413 and binary.json() == {"message": "Request Too Long"}
            # a function response over Lambda's 6 MB response limit (refused by the emulator's
            # Runtime API): an integration failure
            big = client.get("/bytes", params={"n": str(MAX_LAMBDA_RESPONSE_BYTES)})
            assert big.status_code == 500 and big.json() == {"message": "Internal Server Error"}
            assert big.headers["x-warmstart-gateway-error"] == "function error: Function.ResponseSizeTooLarge"
            under = client.get("/bytes", params={"n": "6000000"})
            assert under.status_code == 200 and len(under.content) == 6_000_000
            # after all that the gateway still answers on the same connection
            assert client.post("/count", content=b"abc").json() == {"received_bytes": 3}
    finally:
        gw.stop()


def test_a_malformed_content_length_is_a_400_not_a_dropped_connection(make_emulator):
    gw = _limits_gateway(make_emulator())
    try:
        port = int(gw.endpoint.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 400 ") and reply.endswith(b'{"message":"Bad Request"}')
    finally:
        gw.stop()


def test_the_integration_timeout_is_a_503_while_the_function_runs_on(make_emulator):
    # GIVEN an integration timeout of 0.5 s (TimeoutInMillis 500) and a function that takes 2 s
    emu = make_emulator()
    gw = _limits_gateway(emu, stage=StageSettings(integration_timeouts_s={"$default": 0.5}))
    try:
        with httpx.Client(base_url=gw.endpoint, timeout=30) as client:
            resp = client.get("/sleep", params={"s": "2"})
            # THEN the client gets the HTTP API's 503 while the invocation is still running
            states = [e["state"] for e in emu.environments("limits-fn")]
            assert resp.status_code == 503 and resp.json() == {"message": "Service Unavailable"}
            assert resp.headers["x-warmstart-gateway-error"] == "integration timeout (0.5 s)"
            assert states == ["busy"]
            # AND once it has ended, the environment serves the next request
            deadline = time.monotonic() + 10
            while emu.environments("limits-fn")[0]["state"] == "busy" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.post("/count", content=b"ab").json() == {"received_bytes": 2}
            assert len(emu.environments("limits-fn")) == 1
    finally:
        gw.stop()
