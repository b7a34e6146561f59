"""The local HTTP API: real HTTP in, payload-2.0 events (checked against the real samples), HTTP out."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from infra.local.gateway import Gateway
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
    emu.put_function_concurrency("http-fn", 0)
    throttled = httpx.get(f"{gw.endpoint}/plain")
    assert throttled.status_code == 500
    assert throttled.headers["x-warmstart-gateway-error"] == "TooManyRequestsException"
