from __future__ import annotations

import json

import pytest

from functions.runtime import events
from functions.runtime.errors import BadRequest
from functions.runtime.events import EventKind
from tests.conftest import adapt_event, load_event


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("http_api_v2.json", EventKind.HTTP_API_V2),
        ("http_api_v2_base64_body.json", EventKind.HTTP_API_V2),
        ("function_url.json", EventKind.FUNCTION_URL),
        ("rest_api_v1.json", EventKind.REST_API_V1),
        ("alb.json", EventKind.ALB),
        ("scheduled_event.json", EventKind.UNKNOWN),
    ],
)
def test_every_sample_is_classified(name: str, kind: EventKind) -> None:
    assert events.classify(load_event(name)) is kind


def test_ping_only_from_a_direct_invoke_marker() -> None:
    assert events.classify({"warmstart": {"ping": True}}) is EventKind.PING
    # a scheduled event is not a ping, whatever its source says
    assert events.classify(load_event("scheduled_event.json")) is EventKind.UNKNOWN
    # a marker inside an HTTP request (body or header) is not a ping
    in_body = adapt_event("http_api_v2.json", "POST", "/v1/intent", {"warmstart": {"ping": True}})
    in_header = adapt_event("alb.json", "GET", "/healthz", headers={"warmstart": "ping"})
    top_level = load_event("http_api_v2.json") | {"warmstart": {"ping": True}}
    assert events.classify(in_body) is EventKind.HTTP_API_V2
    assert events.classify(in_header) is EventKind.ALB
    assert events.classify(top_level) is EventKind.HTTP_API_V2
    assert events.classify({"warmstart": {"ping": True}, "body": "{}"}) is EventKind.UNKNOWN


@pytest.mark.parametrize(
    ("name", "method", "path", "arrival_key"),
    [
        ("http_api_v2.json", "POST", "/my/path", "timeEpoch"),
        ("function_url.json", "GET", "/", "timeEpoch"),
        ("rest_api_v1.json", "GET", "/my/path", "requestTimeEpoch"),
        ("alb.json", "GET", "/lambda", None),
    ],
)
def test_samples_parse(name: str, method: str, path: str, arrival_key: str | None) -> None:
    event = load_event(name)
    request = events.parse_http_event(event)
    assert (request.method, request.path) == (method, path)
    expected = event["requestContext"][arrival_key] if arrival_key else None
    assert request.arrival_epoch_ms == expected
    assert request.body_bytes == len((event.get("body") or "").encode())


def test_base64_sample_body_is_decoded_for_its_size() -> None:
    request = events.parse_http_event(load_event("http_api_v2_base64_body.json"))
    assert request.body_bytes == len(b'{"test":"body"}')


def _v2(**changes: object) -> dict:
    event = load_event("http_api_v2.json")
    event.update(changes)
    return event


@pytest.mark.parametrize(
    ("event", "status", "message"),
    [
        (_v2(headers=None), 400, "event field 'headers' is null: send an object of header names to values"),
        (_v2(headers={"a": 1}), 400, "header 'a' in 'headers' must be a string value"),
        (_v2(body={"text": "x"}), 400, "event field 'body' must be a string, got dict"),
        (_v2(isBase64Encoded="yes"), 400, "event field 'isBase64Encoded' must be true or false"),
        (
            _v2(body="%%%not base64%%%", isBase64Encoded=True),
            400,
            ("body is not valid base64 although isBase64Encoded is true: "
            "encode the body or set isBase64Encoded to false"),
        ),
        (_v2(body="x" * (events.MAX_BODY_BYTES + 1)), 413, f"request body exceeds {events.MAX_BODY_BYTES} bytes"),
        (load_event("scheduled_event.json"), 400, "unknown event shape"),
        ([1, 2, 3], 400, "unknown event shape"),
        (load_event("alb.json") | {"headers": None}, 400, "ALB event needs a 'headers' object"),
    ],
)
def test_malformed_events_raise_bad_request(event: object, status: int, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        events.parse_http_event(event)
    assert info.value.status == status
    assert str(info.value).startswith(message)


def test_missing_source_ip_is_rejected() -> None:
    event = load_event("http_api_v2.json")
    del event["requestContext"]["http"]["sourceIp"]
    with pytest.raises(BadRequest, match="sourceIp"):
        events.parse_http_event(event)


def test_rest_api_null_headers_are_a_request_without_headers() -> None:
    # API Gateway REST sends null headers when a request has none (console test invoke)
    event = load_event("rest_api_v1.json") | {"headers": None, "multiValueHeaders": None}
    assert events.parse_http_event(event).method == "GET"


def test_queue_time_ignores_missing_future_and_replayed_arrivals() -> None:
    request = events.parse_http_event(load_event("http_api_v2.json"))
    arrival = request.arrival_epoch_ms
    assert arrival is not None
    assert events.queue_ms(request, arrival + 12.0) == 12.0
    assert events.queue_ms(request, arrival - 5.0) == 0.0
    assert events.queue_ms(request, arrival + events.MAX_EVENT_AGE_MS + 1) == 0.0
    alb = events.parse_http_event(load_event("alb.json"))
    assert events.queue_ms(alb, 1e12) == 0.0


def test_error_response_in_each_source_format() -> None:
    body = {"error": "bad_request"}
    v2 = events.error_response(EventKind.HTTP_API_V2, {}, 400, body, {"x-warmstart-path": "local"})
    assert v2["headers"]["content-type"] == "application/json"
    assert json.loads(v2["body"]) == body and v2["statusCode"] == 400
    rest = events.error_response(EventKind.REST_API_V1, {}, 400, body, {})
    assert rest["multiValueHeaders"] == {}
    alb_multi = events.error_response(EventKind.ALB, {"multiValueHeaders": {}}, 413, body, {})
    assert alb_multi["multiValueHeaders"]["content-type"] == ["application/json"]
    assert alb_multi["statusDescription"] == "413 Content Too Large" and "headers" not in alb_multi
    alb = events.error_response(EventKind.ALB, {"headers": {}}, 400, body, {})
    assert alb["headers"]["content-type"] == "application/json"


def test_add_headers_respects_the_response_format() -> None:
    v2: dict = {"statusCode": 200, "body": ""}
    events.add_headers(EventKind.HTTP_API_V2, v2, {"X-Warmstart-Path": "local"})
    assert v2["headers"] == {"x-warmstart-path": "local"}
    alb = {"statusCode": 200, "multiValueHeaders": {"content-type": ["text/plain"]}}
    events.add_headers(EventKind.ALB, alb, {"Server-Timing": "infer;dur=2.0"})
    assert alb["multiValueHeaders"]["server-timing"] == ["infer;dur=2.0"]
