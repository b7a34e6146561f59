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


def test_respond_in_each_source_format() -> None:
    body = {"error": "bad_request"}
    v2 = events.respond(EventKind.HTTP_API_V2, {}, 400, body, {"x-warmstart-path": "local"})
    assert v2["headers"]["content-type"] == "application/json"
    assert json.loads(v2["body"]) == body and v2["statusCode"] == 400
    rest = events.respond(EventKind.REST_API_V1, {}, 400, body, {})
    assert rest["multiValueHeaders"] == {}
    alb_multi = events.respond(EventKind.ALB, {"multiValueHeaders": {}}, 413, body, {})
    assert alb_multi["multiValueHeaders"]["content-type"] == ["application/json"]
    assert alb_multi["statusDescription"] == "413 Content Too Large" and "headers" not in alb_multi
    alb = events.respond(EventKind.ALB, {"headers": {}}, 400, body, {})
    assert alb["headers"]["content-type"] == "application/json"


def test_add_headers_respects_the_response_format() -> None:
    v2: dict = {"statusCode": 200, "body": ""}
    events.add_headers(EventKind.HTTP_API_V2, v2, {"X-Warmstart-Path": "local"})
    assert v2["headers"] == {"x-warmstart-path": "local"}
    alb = {"statusCode": 200, "multiValueHeaders": {"content-type": ["text/plain"]}}
    events.add_headers(EventKind.ALB, alb, {"Server-Timing": "infer;dur=2.0"})
    assert alb["multiValueHeaders"]["server-timing"] == ["infer;dur=2.0"]


# -- external prefixes (split_path / parse_http_event(base_path=...)) --------------------------


def _rest_event(path: str, context_path: str, *, stage: str, resource: str, params: dict | None) -> dict:
    event = load_event("rest_api_v1.json")
    event.pop("version")
    event.update(path=path, resource=resource, pathParameters=params)
    event["requestContext"].update(path=context_path, stage=stage, resourcePath=resource)
    return event


def _v2_event(raw_path: str, *, stage: str = "$default", route_key: str = "$default",
              params: dict | None = None) -> dict:
    event = load_event("http_api_v2.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = raw_path
    event["requestContext"]["stage"] = stage
    event["routeKey"] = event["requestContext"]["routeKey"] = route_key
    event["pathParameters"] = params
    return event


@pytest.mark.parametrize(
    ("path", "base_path", "expected"),
    [
        ("/lookup/x", "/lookup", ("/lookup", "/x")),
        ("/lookup/x/", "/lookup", ("/lookup", "/x/")),
        ("/lookup", "/lookup", ("/lookup", "/")),
        ("/lookup/", "/lookup", ("/lookup", "/")),
        ("/lookupx", "/lookup", ("", "/lookupx")),
        ("/lookupx/y", "/lookup", ("", "/lookupx/y")),
        ("/other/lookup/x", "/lookup", ("", "/other/lookup/x")),
        ("/lookup/x", "lookup/", ("/lookup", "/x")),  # normalized
        ("/lookup/x", "/", ("", "/lookup/x")),
        ("/lookup/x", None, ("", "/lookup/x")),
        ("/a/b/c", "/a/b", ("/a/b", "/c")),
        ("/a/bc", "/a/b", ("", "/a/bc")),
    ],
)
def test_base_path_is_stripped_only_at_a_slash_boundary(path: str, base_path: str | None,
                                                        expected: tuple[str, str]) -> None:
    for event in (adapt_event("alb.json", "GET", path), adapt_event("function_url.json", "GET", path)):
        assert events.split_path(events.classify(event), event, path, base_path=base_path) == expected
        request = events.parse_http_event(event, base_path=base_path)
        assert (request.root_path, request.path) == expected


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        # REST, execute-api domain: requestContext.path has the stage, path does not
        (_rest_event("/lookup/x", "/prod/lookup/x", stage="prod", resource="/lookup/{proxy+}",
                     params={"proxy": "x"}), ("/prod/lookup", "/x")),
        (_rest_event("/", "/prod/", stage="prod", resource="/", params=None), ("/prod", "/")),
        (_rest_event("/", "/prod", stage="prod", resource="/", params=None), ("/prod", "/")),
        # REST, custom domain: the mapping key stays in path and requestContext.path
        (_rest_event("/v1/lookup/x", "/v1/lookup/x", stage="prod", resource="/lookup/{proxy+}",
                     params={"proxy": "x"}), ("/v1/lookup", "/x")),
        (_rest_event("/shop/v2/lookup/a/b", "/shop/v2/lookup/a/b", stage="prod",
                     resource="/lookup/{proxy+}", params={"proxy": "a/b"}), ("/shop/v2/lookup", "/a/b")),
        (_rest_event("/v1/lookup/items/7", "/v1/lookup/items/7", stage="prod",
                     resource="/lookup/items/{id}", params={"id": "7"}), ("/v1/lookup", "/items/7")),
        # REST, custom domain on the root mapping: nothing but the base path
        (_rest_event("/lookup/x", "/lookup/x", stage="prod", resource="/lookup/{proxy+}",
                     params={"proxy": "x"}), ("/lookup", "/x")),
        # HTTP API, $default stage: no gateway prefix, even for a path starting like a stage
        (_v2_event("/prod/lookup/x"), ("", "/prod/lookup/x")),
        # HTTP API, named stage: in rawPath; found from the route template or the stage name
        (_v2_event("/prod/lookup/x", stage="prod", route_key="ANY /lookup/{proxy+}",
                   params={"proxy": "x"}), ("/prod/lookup", "/x")),
        (_v2_event("/prod/lookup/x", stage="prod"), ("/prod/lookup", "/x")),
        (_v2_event("/prod", stage="prod"), ("/prod", "/")),
        (_v2_event("/production/lookup/x", stage="prod"), ("", "/production/lookup/x")),
        # HTTP API, custom domain mapping key: from the route template
        (_v2_event("/v1/lookup/x", stage="prod", route_key="GET /lookup/{proxy+}",
                   params={"proxy": "x"}), ("/v1/lookup", "/x")),
        # ... and a route matching the whole path means there is no gateway prefix at all,
        # even when the app's own path starts with the stage's name
        (_v2_event("/prod/items", stage="prod", route_key="GET /prod/items"), ("", "/prod/items")),
        # a template that does not fit the path (percent-encoding) falls back to the stage
        (_v2_event("/prod/lookup/a%20b", stage="prod", route_key="ANY /lookup/{proxy+}",
                   params={"proxy": "a b"}), ("/prod/lookup", "/a%20b")),
    ],
)
def test_gateway_prefixes(event: dict, expected: tuple[str, str]) -> None:
    request = events.parse_http_event(event, base_path="/lookup")
    assert (request.root_path, request.path) == expected


def test_configured_prefix_for_a_mapping_the_event_does_not_reveal() -> None:
    # GIVEN a custom domain mapping "v1" in front of the catch-all $default route
    event = _v2_event("/v1/lookup/x", stage="prod")
    assert events.parse_http_event(event, base_path="/lookup").root_path == ""
    request = events.parse_http_event(event, base_path="/lookup", strip_prefixes=("/v0", "v1/"))
    assert (request.root_path, request.path) == ("/v1/lookup", "/x")
    # a configured prefix is also stripped only at a boundary
    request = events.parse_http_event(_v2_event("/v1x/lookup/x"), strip_prefixes=("/v1",))
    assert (request.root_path, request.path) == ("", "/v1x/lookup/x")


def test_route_still_reports_the_apps_path() -> None:
    request = events.parse_http_event(adapt_event("http_api_v2.json", "POST", "/lookup/v1/intent"),
                                      base_path="/lookup")
    assert request.route == "POST /v1/intent"


@pytest.mark.parametrize(
    ("prefix", "normalized"),
    [(None, ""), ("", ""), ("/", ""), ("//", ""), ("lookup", "/lookup"), ("/lookup/", "/lookup"),
     ("/a/b", "/a/b")],
)
def test_normalize_prefix(prefix: str | None, normalized: str) -> None:
    assert events.normalize_prefix(prefix) == normalized


@pytest.mark.parametrize("prefix", ["/a//b", "/a b", "/a?b", "/a#b"])
def test_unusable_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="cannot match a request path"):
        events.normalize_prefix(prefix)


def test_one_event_age_limit_is_lambdas_longest_timeout() -> None:
    # 900 s (Lambda's maximum timeout), not 30 s: a function URL or a REST API with a raised
    # integration timeout can hold a genuine request longer than 30 s
    assert events.MAX_EVENT_AGE_MS == 900_000.0
    request = events.parse_http_event(load_event("function_url.json"))
    arrival = request.arrival_epoch_ms
    assert arrival is not None
    assert events.queue_ms(request, arrival + 60_000.0) == 60_000.0


def _full_header_check(headers: dict) -> str | None:
    """What the full loop of `events._headers` says about ``headers`` (its fast path off)."""
    real = events._plain_headers
    events._plain_headers = lambda _h: False  # type: ignore[assignment]
    try:
        events._headers({"headers": headers}, "headers", nullable=False, multi=False)
    except BadRequest as exc:
        return str(exc)
    finally:
        events._plain_headers = real  # type: ignore[assignment]
    return None


@pytest.mark.parametrize("headers", [
    {"host": "api.example.com", "x-forwarded-proto": "https", "x-forwarded-port": "443"},
    {"host": "bad host", "x-forwarded-port": "443"},
    {"x-forwarded-port": "99999", "host": "bad host"},  # two faults: the first in map order
    {"x-forwarded-proto": "HTTPS"},
    {"host": "a", "accept": 3},
    {"host": "a", "accept": "caf\u00e9"},
    {"host": "a", "x": "\ud800"},
    {"Host": "a", "host": "b"},
    {"HOST": "bad host"},
    {},
])
def test_header_fast_path_says_what_the_full_check_says(headers: dict) -> None:
    # GIVEN a single-value header map (HTTP API v2 / function URL shape)
    # WHEN the warm path checks it (the fast path first, the loop when it declines)
    try:
        events._headers({"headers": headers}, "headers", nullable=False, multi=False)
        said = None
    except BadRequest as exc:
        said = str(exc)
    # THEN the verdict and message are the full loop's
    assert said == _full_header_check(headers)


def test_ascii_body_scan_refuses_what_the_bytes_scan_refuses() -> None:
    for body in ['{"a": NaN}', '{"a": -Infinity}', '{"a": 1e999}', '{"a": "\\ud800"}']:
        with pytest.raises(BadRequest):
            events.check_strict_json(body)
        with pytest.raises(BadRequest):
            events.check_strict_json(body.encode())
    for body in ['{"a": 1}', '{"a": "\\ud83d\\ude00"}', '{"a": 1e99}', "not json NaN"]:
        events.check_strict_json(body)
        events.check_strict_json(body.encode())
