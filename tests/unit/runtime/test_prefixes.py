"""External prefixes per event source, through a real FastAPI app and `asgi.make_adapter`.

Each source is a real sample from ``tests/data/events`` pointed at a client URL the way that
source delivers it (see the module docstring of ``functions.runtime.events``). The agent's
base path is ``/lookup``; the app routes on its own paths (``/items/``, ``/go``, ``/``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse

from functions.runtime import events
from functions.runtime.asgi import make_adapter
from tests.conftest import LambdaContext, load_event

BASE = "/lookup"
EXECUTE_API = "id.execute-api.us-east-1.amazonaws.com"
CUSTOM_DOMAIN = "api.example.com"


def _app() -> FastAPI:
    app = FastAPI(title="prefix test")

    def seen(request: Request) -> dict[str, Any]:
        return {
            "route": request.scope["route"].path,
            "root_path": request.scope["root_path"],
            "url": str(request.url),
            "items_url": str(request.url_for("items")),
        }

    @app.get("/items/", name="items")
    async def items(request: Request) -> dict[str, Any]:
        return seen(request)

    @app.get("/")
    async def home(request: Request) -> dict[str, Any]:
        return seen(request)

    @app.get("/lookupx")
    async def lookupx(request: Request) -> dict[str, Any]:
        return seen(request)

    @app.get("/go")
    async def go(request: Request) -> RedirectResponse:
        return RedirectResponse(request.url_for("items"), status_code=303)

    return app


APP = _app()


def _route(path: str) -> tuple[str, dict[str, str] | None]:
    """The route API Gateway matches for ``path`` (after its own prefix): the deploy's routes
    ``/lookup``, ``/lookup/{proxy+}`` and a catch-all ``/{proxy+}``."""
    if path in ("/", BASE):
        return path, None
    if path.startswith(BASE + "/"):
        return BASE + "/{proxy+}", {"proxy": path[len(BASE) + 1 :]}
    return "/{proxy+}", {"proxy": path[1:]}


def _v2(name: str, external: str, api_path: str, *, stage: str, host: str, default_route: bool) -> dict[str, Any]:
    event = load_event(name)
    event["rawPath"] = external
    event["rawQueryString"] = "q=1"
    context = event["requestContext"]
    context["http"]["method"] = "GET"
    context["http"]["path"] = external
    context["stage"] = stage
    context["domainName"] = host
    event["headers"] = {"host": host, "x-forwarded-proto": "https", "x-forwarded-port": "443"}
    event.pop("body", None)
    event["isBase64Encoded"] = False
    if default_route:
        event["routeKey"] = context["routeKey"] = "$default"
        event.pop("pathParameters", None)
    else:
        template, params = _route(api_path)
        event["routeKey"] = context["routeKey"] = f"GET {template}"
        event["pathParameters"] = params
    return event


def _rest(external: str, path: str, api_path: str, *, stage: str, host: str) -> dict[str, Any]:
    event = load_event("rest_api_v1.json")
    event.pop("version")  # a REST API's own events have no version (the sample is payload 1.0)
    template, params = _route(api_path)
    event.update(path=path, httpMethod="GET", resource=template, pathParameters=params, body=None,
                 queryStringParameters={"q": "1"}, multiValueQueryStringParameters={"q": ["1"]})
    event["headers"] = {"Host": host, "X-Forwarded-Proto": "https", "X-Forwarded-Port": "443"}
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    context = event["requestContext"]
    context.update(path=external, stage=stage, resourcePath=template, httpMethod="GET", domainName=host)
    return event


def _alb(external: str, host: str) -> dict[str, Any]:
    event = load_event("alb.json")
    event.update(path=external, httpMethod="GET", queryStringParameters={"q": "1"}, body="")
    event["headers"]["host"] = host
    event["headers"]["x-forwarded-proto"] = "https"
    event["headers"]["x-forwarded-port"] = "443"
    return event


@dataclass(frozen=True)
class Source:
    """How one event source delivers the client path ``prefix + api_path``."""

    name: str
    prefix: str  # what the gateway adds before the API's own path
    host: str
    build: Callable[[str], dict[str, Any]]  # api_path -> event
    strip_prefixes: tuple[str, ...] = ()


SOURCES = [
    Source("http_api_v2 $default stage", "", EXECUTE_API,
           lambda p: _v2("http_api_v2.json", p, p, stage="$default", host=EXECUTE_API, default_route=False)),
    Source("http_api_v2 named stage", "/prod", EXECUTE_API,
           lambda p: _v2("http_api_v2.json", "/prod" + p, p, stage="prod", host=EXECUTE_API, default_route=False)),
    Source("http_api_v2 named stage, $default route", "/prod", EXECUTE_API,
           lambda p: _v2("http_api_v2.json", "/prod" + p, p, stage="prod", host=EXECUTE_API, default_route=True)),
    Source("http_api_v2 custom domain mapping", "/v1", CUSTOM_DOMAIN,
           lambda p: _v2("http_api_v2.json", "/v1" + p, p, stage="prod", host=CUSTOM_DOMAIN, default_route=False)),
    Source("http_api_v2 custom domain mapping, $default route (configured)", "/v1", CUSTOM_DOMAIN,
           lambda p: _v2("http_api_v2.json", "/v1" + p, p, stage="prod", host=CUSTOM_DOMAIN, default_route=True),
           strip_prefixes=("/v1",)),
    Source("rest_api_v1 stage", "/prod", EXECUTE_API,
           lambda p: _rest("/prod" + p, p, p, stage="prod", host=EXECUTE_API)),
    Source("rest_api_v1 custom domain base path", "/v1", CUSTOM_DOMAIN,
           lambda p: _rest("/v1" + p, "/v1" + p, p, stage="prod", host=CUSTOM_DOMAIN)),
    Source("alb path prefix", "", "lambda-alb-123578498.us-east-2.elb.amazonaws.com",
           lambda p: _alb(p, "lambda-alb-123578498.us-east-2.elb.amazonaws.com")),
    Source("function_url", "", "abc.lambda-url.us-east-1.on.aws",
           lambda p: _v2("function_url.json", p, p, stage="$default", host="abc.lambda-url.us-east-1.on.aws",
                         default_route=True)),
]


@pytest.fixture(params=SOURCES, ids=lambda s: s.name)
def source(request: pytest.FixtureRequest) -> Source:
    return request.param


def _call(source: Source, api_path: str) -> tuple[dict[str, Any], events.HttpRequest]:
    """GIVEN the source's event for ``api_path`` WHEN the dispatcher's two calls run."""
    event = source.build(api_path)
    request = events.parse_http_event(event, base_path=BASE, strip_prefixes=source.strip_prefixes)
    adapter = make_adapter(APP, base_path=BASE, strip_prefixes=source.strip_prefixes)
    return adapter(event, LambdaContext(), request=request), request


def _location(response: dict[str, Any]) -> str:
    if "headers" in response and "location" in response["headers"]:
        return response["headers"]["location"]
    return response["multiValueHeaders"]["location"][0]


def test_the_app_sees_its_own_path_and_urls_carry_the_prefix(source: Source) -> None:
    response, request = _call(source, BASE + "/items/")
    root = source.prefix + BASE
    assert (request.path, request.root_path) == ("/items/", root)
    assert response["statusCode"] == 200, response
    body = json.loads(response["body"])
    assert body["route"] == "/items/"
    assert body["root_path"] == root
    assert body["url"] == f"https://{source.host}{root}/items/?q=1"
    assert body["items_url"] == f"https://{source.host}{root}/items/"


def test_the_prefix_alone_is_the_apps_root(source: Source) -> None:
    response, request = _call(source, BASE)
    assert (request.path, request.root_path) == ("/", source.prefix + BASE)
    body = json.loads(response["body"])
    assert (body["route"], body["root_path"]) == ("/", source.prefix + BASE)


def test_a_prefix_is_stripped_only_at_a_slash_boundary(source: Source) -> None:
    response, request = _call(source, "/lookupx")
    assert (request.path, request.root_path) == ("/lookupx", source.prefix)
    body = json.loads(response["body"])
    assert (body["route"], body["root_path"]) == ("/lookupx", source.prefix)
    assert body["url"] == f"https://{source.host}{source.prefix}/lookupx?q=1"


def test_slash_redirect_is_relative_and_keeps_the_prefix(source: Source) -> None:
    response, _ = _call(source, BASE + "/items")
    assert response["statusCode"] == 307
    assert _location(response) == f"{source.prefix}{BASE}/items/?q=1"


def test_app_redirect_to_its_own_url_is_relative(source: Source) -> None:
    response, _ = _call(source, BASE + "/go")
    assert response["statusCode"] == 303
    assert _location(response) == f"{source.prefix}{BASE}/items/"


def test_openapi_and_docs_page_carry_the_prefix(source: Source) -> None:
    root = source.prefix + BASE
    response, _ = _call(source, BASE + "/openapi.json")
    assert json.loads(response["body"])["servers"] == [{"url": root}]
    response, _ = _call(source, BASE + "/docs")
    assert response["statusCode"] == 200 and not response["isBase64Encoded"]
    assert f"url: '{root}/openapi.json'" in response["body"]


def test_adapter_parses_when_not_given_the_request(source: Source) -> None:
    event = source.build(BASE + "/items/")
    adapter = make_adapter(APP, base_path=BASE, strip_prefixes=source.strip_prefixes)
    by_adapter = json.loads(adapter(event, LambdaContext())["body"])
    by_mangum = json.loads(adapter.mangum(source.build(BASE + "/items/"), LambdaContext())["body"])
    assert by_adapter["root_path"] == by_mangum["root_path"] == source.prefix + BASE
    assert by_adapter["route"] == by_mangum["route"] == "/items/"


def test_root_agent_without_base_path(source: Source) -> None:
    # GIVEN the root agent (no base path): only the gateway's prefix moves to root_path
    event = source.build("/items/")
    request = events.parse_http_event(event, strip_prefixes=source.strip_prefixes)
    response = make_adapter(APP, strip_prefixes=source.strip_prefixes)(event, LambdaContext(), request=request)
    assert (request.path, request.root_path) == ("/items/", source.prefix)
    body = json.loads(response["body"])
    assert body["url"] == f"https://{source.host}{source.prefix}/items/?q=1"


def test_redirect_never_carries_a_spoofed_alb_host() -> None:
    # GIVEN an ALB request whose Host header the client chose
    event = _alb(BASE + "/items", "evil.example")
    response = make_adapter(APP, base_path=BASE)(event, LambdaContext())
    # THEN the slash redirect stays on whatever host the client really reached
    assert response["statusCode"] == 307
    assert response["headers"]["location"] == "/lookup/items/?q=1"


def test_alb_multi_value_headers_redirect_is_relative() -> None:
    event = _alb(BASE + "/items", "lb.example")
    event["multiValueHeaders"] = {k: [v] for k, v in event.pop("headers").items()}
    event["multiValueQueryStringParameters"] = {"q": ["1"]}
    response = make_adapter(APP, base_path=BASE)(event, LambdaContext())
    assert response["multiValueHeaders"]["location"] == ["/lookup/items/?q=1"]


def test_redirect_to_another_host_is_left_alone() -> None:
    app = FastAPI()

    @app.get("/out")
    async def out() -> RedirectResponse:
        return RedirectResponse("https://elsewhere.example/x")

    event = _v2("http_api_v2.json", "/out", "/out", stage="$default", host=EXECUTE_API, default_route=True)
    response = make_adapter(app)(event, LambdaContext())
    assert response["headers"]["location"] == "https://elsewhere.example/x"


def test_percent_encoded_paths_are_decoded_once_for_the_app() -> None:
    app = FastAPI()

    @app.get("/files/{name}")
    async def files(name: str, request: Request) -> dict[str, str]:
        return {"name": name, "root_path": request.scope["root_path"]}

    event = _v2("http_api_v2.json", "/prod/lookup/files/a%20b", "/lookup/files/a%20b", stage="prod",
                host=EXECUTE_API, default_route=True)
    body = json.loads(make_adapter(app, base_path=BASE)(event, LambdaContext())["body"])
    assert body == {"name": "a b", "root_path": "/prod/lookup"}


@pytest.mark.parametrize(("external", "resource", "params", "expected"), [
    # REST keeps ``path`` percent-encoded, ``pathParameters`` arrive decoded
    ("/api/echo/a%20b", "/echo/{word}", {"word": "a b"}, ("/api", "/echo/a%20b")),
    ("/api/echo/ab", "/echo/{word}", {"word": "ab"}, ("/api", "/echo/ab")),
    ("/api/files/a%2Fb/c%25d", "/files/{proxy+}", {"proxy": "a/b/c%d"}, ("/api", "/files/a%2Fb/c%25d")),
    ("/api%20v1/echo/x", "/echo/{word}", {"word": "x"}, ("/api%20v1", "/echo/x")),
    # the mapping's root: "/api" with resource "/"
    ("/api", "/", None, ("/api", "/")),
    ("/api/", "/", None, ("/api", "/")),
])
def test_custom_domain_mapping_with_encoded_paths_and_its_root(
        external: str, resource: str, params: dict[str, str] | None, expected: tuple[str, str]) -> None:
    event = _rest(external, external, "/", stage="prod", host=CUSTOM_DOMAIN)
    event.update(resource=resource, pathParameters=params)
    event["requestContext"]["resourcePath"] = resource
    request = events.parse_http_event(event)
    assert (request.root_path, request.path) == expected


def test_an_encoded_path_behind_a_mapping_reaches_the_app_decoded_once() -> None:
    app = FastAPI()

    @app.get("/echo/{word}")
    async def echo(word: str, request: Request) -> dict[str, str]:
        return {"word": word, "root_path": request.scope["root_path"]}

    @app.get("/")
    async def root(request: Request) -> dict[str, str]:
        return {"root_path": request.scope["root_path"]}

    adapter = make_adapter(app)
    event = _rest("/api/echo/a%20b", "/api/echo/a%20b", "/", stage="prod", host=CUSTOM_DOMAIN)
    event.update(resource="/echo/{word}", pathParameters={"word": "a b"})
    assert json.loads(adapter(event, LambdaContext())["body"]) == {"word": "a b", "root_path": "/api"}
    event = _rest("/api", "/api", "/", stage="prod", host=CUSTOM_DOMAIN)
    event.update(resource="/", pathParameters=None)
    assert json.loads(adapter(event, LambdaContext())["body"]) == {"root_path": "/api"}
