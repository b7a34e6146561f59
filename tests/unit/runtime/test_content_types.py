"""Text-like responses stay text, binary goes base64, for every event source."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import Response
from mangum import Mangum

from functions.runtime.asgi import DEFAULT_TEXT_MIME_TYPES, TextMimeTypes, make_adapter
from tests.conftest import LambdaContext, adapt_event

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)
BODIES = {
    "application/problem+json": b'{"type":"about:blank","title":"Not Found","status":404}',
    "application/vnd.api+json; charset=utf-8": b'{"data":[]}',
    "image/svg+xml": b'<svg xmlns="http://www.w3.org/2000/svg"/>',
    "text/csv": "a,b\n1,\u00e9\n".encode(),
    "Application/JSON": b'{"upper":true}',
    "application/xml; charset=UTF-8": b"<a/>",
    "application/octet-stream": bytes(range(256)),
    "image/png": PNG,
}
TEXT = [t for t in BODIES if t not in ("application/octet-stream", "image/png")]
BINARY = ["application/octet-stream", "image/png"]
TYPES = list(BODIES)


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/body/{index}")
    async def body(index: int) -> Response:
        media_type = TYPES[index]
        return Response(BODIES[media_type], headers={"content-type": media_type})

    @app.get("/latin1")
    async def latin1() -> Response:
        return Response("caf\u00e9".encode("latin-1"), headers={"content-type": "text/plain; charset=latin-1"})

    return app


APP = _app()
SOURCES = ["http_api_v2.json", "function_url.json", "rest_api_v1.json", "alb.json", "alb multi-value"]


def _event(source: str, path: str) -> dict[str, Any]:
    if source == "alb multi-value":
        event = adapt_event("alb.json", "GET", path)
        event["multiValueHeaders"] = {k: [v] for k, v in event.pop("headers").items()}
        return event
    return adapt_event(source, "GET", path)


def _content_type(response: dict[str, Any]) -> str:
    headers = response.get("headers") or {}
    if "content-type" in headers:
        return str(headers["content-type"])
    return str(response["multiValueHeaders"]["content-type"][0])


def _body(response: dict[str, Any]) -> bytes:
    if response["isBase64Encoded"]:
        return base64.b64decode(response["body"])
    return str(response["body"]).encode()


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("media_type", TYPES)
def test_text_stays_text_and_binary_is_base64(source: str, media_type: str) -> None:
    response = make_adapter(APP)(_event(source, f"/body/{TYPES.index(media_type)}"), LambdaContext())
    assert response["statusCode"] == 200
    assert _content_type(response) == media_type
    assert response["isBase64Encoded"] is (media_type in BINARY)
    assert _body(response) == BODIES[media_type]


@pytest.mark.parametrize("source", SOURCES)
def test_text_that_is_not_utf8_goes_base64(source: str) -> None:
    # API Gateway reads a text body as UTF-8: Latin-1 bytes must travel as base64
    response = make_adapter(APP)(_event(source, "/latin1"), LambdaContext())
    assert response["isBase64Encoded"] is True
    assert base64.b64decode(response["body"]) == "caf\u00e9".encode("latin-1")


def test_bare_mangum_base64s_structured_suffixes() -> None:
    # why the adapter exists: Mangum 0.22 matches text types as substrings of the header
    event = adapt_event("rest_api_v1.json", "GET", f"/body/{TYPES.index('application/problem+json')}")
    assert Mangum(APP, lifespan="off")(copy.deepcopy(event), LambdaContext())["isBase64Encoded"] is True
    assert make_adapter(APP)(event, LambdaContext())["isBase64Encoded"] is False


def test_agent_configured_text_types() -> None:
    adapter = make_adapter(APP, text_mime_types=("text/",))
    event = adapt_event("http_api_v2.json", "GET", f"/body/{TYPES.index('application/problem+json')}")
    assert adapter(event, LambdaContext())["isBase64Encoded"] is True  # no longer text
    event = adapt_event("http_api_v2.json", "GET", f"/body/{TYPES.index('text/csv')}")
    assert adapter(event, LambdaContext())["isBase64Encoded"] is False


@pytest.mark.parametrize(
    ("content_type", "text"),
    [
        ("text/html; charset=utf-8", True),
        ("TEXT/PLAIN", True),
        ("application/json", True),
        ("application/json;charset=utf-8", True),
        ("application/ld+json", True),
        ("application/problem+xml", True),
        ("application/atom+xml; type=feed", True),
        ("application/vnd.oai.openapi", True),
        ("application/javascript", True),
        ("application/jsonx", False),
        ("application/zip", False),
        ("application/octet-stream; name=\"text/plain\"", False),  # a parameter is not the type
        ("image/png", False),
        ("+json", False),
        ("", False),
    ],
)
def test_text_mime_type_rules(content_type: str, text: bool) -> None:
    assert TextMimeTypes(DEFAULT_TEXT_MIME_TYPES)(content_type) is text


def test_pattern_forms() -> None:
    types = TextMimeTypes(["image/*", "+YAML", "Application/X-NDJSON"])
    assert types("image/png") and types("application/vnd.foo+yaml") and types("application/x-ndjson")
    assert not types("application/json")
    assert types.patterns == ("image/", "application/x-ndjson", "+yaml")


@pytest.mark.parametrize("pattern", ["", "json", "/json", "a/b/c", "+", "+a/b"])
def test_bad_pattern_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="text MIME type"):
        TextMimeTypes([pattern])


@pytest.mark.parametrize("name", ["http_api_v2.json", "rest_api_v1.json", "alb.json"])
def test_the_adapter_builds_each_request_scope_once(name: str) -> None:
    # GIVEN the adapter's Mangum handler for an event
    adapter = make_adapter(_app())
    event = adapt_event(name, "GET", "/text")
    handler = adapter.mangum.infer(event, LambdaContext())
    # WHEN its scope is read twice (the cycle, then the response)
    first = handler.scope
    # THEN it is the same dict, equal to the scope Mangum's own handler builds
    assert handler.scope is first
    plain = next(cls for cls in type(handler).__mro__[1:] if "scope" in vars(cls))
    assert first == vars(plain)["scope"].fget(handler)
