"""A local API Gateway HTTP API: HTTP -> payload format 2.0 event -> Lambda alias -> HTTP.

A request goes to the most specific of the gateway's routes that matches it, as API Gateway
selects routes: a route whose path matches exactly (literal segments, then ``{name}``
variables) before a greedy ``{proxy+}`` route, longer literal prefixes first, a route's own
method before ``ANY``, and ``$default`` last; no match is ``404 {"message": "Not Found"}``. With
the warmstart stack's routes (``$default`` -> the root agent, ``ANY /lookup`` and
``ANY /lookup/{proxy+}`` -> the lookup agent) this is routing by the longest path prefix, at a
``/`` boundary: ``/lookup`` and ``/lookup/x`` go to lookup, ``/lookupx`` to the root agent. The
route invokes one function alias (``live``) through an :class:`Invoker` (the emulator,
in-process); the event's ``rawPath`` is the full request path (each agent's runtime strips its
own ``WARMSTART_BASE_PATH``), ``routeKey`` the matched route, ``pathParameters`` its variables
(``proxy`` for ``{proxy+}``). The event carries lower-cased headers,
the ``Cookie`` header as a ``cookies`` list, ``requestContext.timeEpoch`` (ms) and
``requestId``, and the body base64-encoded unless its content type is text. The function's
response is mapped back: ``statusCode``, ``headers``, ``multiValueHeaders``, ``cookies``
(``Set-Cookie``), ``isBase64Encoded``; a response without ``statusCode`` is a 200 JSON body.
Function errors and Lambda throttles become ``500 {"message": "Internal Server Error"}``, as
API Gateway's Lambda proxy integration returns them.

References
----------
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-routes.html
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from infra.local.emulator import InvokeResult
from infra.local.errors import LambdaApiError
from infra.local.httpserver import serve_in_background, shutdown
from infra.local.spec import GatewayRoute

_LOG = logging.getLogger("warmstart.local.gateway")
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript",
               "application/x-www-form-urlencoded", "application/problem+json", "+json", "+xml")
#: Hop-by-hop or gateway-owned headers a function cannot set.
_DROPPED_RESPONSE_HEADERS = {"content-length", "connection", "transfer-encoding", "date", "server"}


class Invoker(Protocol):
    """Port the gateway invokes functions through (the emulator satisfies it)."""

    def invoke(self, function_name: str, payload: bytes | None = None, *, qualifier: str | None = None,
               invocation_type: str = "RequestResponse", client_context: str | None = None) -> InvokeResult: ...


def is_text(content_type: str | None) -> bool:
    """Whether API Gateway passes a body of this content type as text (else base64)."""
    if not content_type:
        return True
    ct = content_type.split(";", 1)[0].strip().lower()
    return any(ct.startswith(t) if t.endswith("/") else (ct == t or ct.endswith(t)) for t in _TEXT_TYPES)


def _segments(path: str) -> list[str]:
    stripped = path.strip("/")
    return stripped.split("/") if stripped else []


def _route_match(route_key: str, method: str, path: str) -> tuple[tuple[int, int, int], dict[str, str]] | None:
    """How specifically ``route_key`` matches the request (a larger key is more specific), and
    its path variables; ``None`` when it does not match. ``$default`` matches everything, least
    specifically. A trailing ``/`` is ignored."""
    if route_key == "$default":
        return (0, 0, 0), {}
    route_method, _, route_path = route_key.partition(" ")
    if route_method.upper() not in ("ANY", method.upper()):
        return None
    want, have = _segments(route_path), _segments(path)
    greedy = bool(want) and want[-1].startswith("{") and want[-1].endswith("+}")
    fixed = want[:-1] if greedy else want
    if (len(have) <= len(fixed)) if greedy else (len(have) != len(fixed)):
        return None
    params: dict[str, str] = {}
    literal = 0
    for pattern, segment in zip(fixed, have, strict=False):
        if pattern.startswith("{") and pattern.endswith("}"):
            params[pattern[1:-1]] = segment
        elif pattern == segment:
            literal += 1
        else:
            return None
    if greedy:
        params[want[-1][1:-2]] = "/".join(have[len(fixed):])
    return (1 if greedy else 2, literal, 0 if route_method.upper() == "ANY" else 1), params


def select_route(routes: Sequence[GatewayRoute], method: str, path: str) -> tuple[GatewayRoute, dict[str, str]] | None:
    """The route API Gateway would pick for ``method path``, with its path parameters.

    Full matches beat greedy ``{proxy+}`` routes, which beat ``$default``; then more literal
    segments win, then a route's own method beats ``ANY``. ``None``: no route matches (404).

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-routes.html
    """
    best: tuple[tuple[int, int, int], GatewayRoute, dict[str, str]] | None = None
    for route in routes:
        matched = _route_match(route.route_key, method, path)
        if matched is not None and (best is None or matched[0] > best[0]):
            best = (matched[0], route, matched[1])
    return None if best is None else (best[1], best[2])


def build_event(*, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
                source_ip: str, now_s: float, request_id: str, host: str,
                protocol: str = "HTTP/1.1", stage: str = "$default", route_key: str = "$default",
                path_parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """An HTTP API payload-format-2.0 event for one HTTP request.

    Parameters
    ----------
    method, target : str
        Request method and target (path with query string).
    headers : list of (name, value)
        Request headers as received (repeated names allowed).
    body : bytes
    source_ip : str
    now_s : float
        Arrival time, epoch seconds (``timeEpoch`` is this in ms).
    request_id : str
    host : str
        Host header value (``domainName``).
    route_key : str
        The matched route (``$default``, ``ANY /lookup/{proxy+}``).
    path_parameters : dict, optional
        The route's path variables (``{"proxy": "x/y"}``); left out when empty, as API Gateway does.
    """
    parts = urlsplit(target)
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies += [c.strip() for c in value.split(";") if c.strip()]
            continue
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    joined.setdefault("x-forwarded-for", source_ip)
    joined.setdefault("x-forwarded-proto", "http")
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        query[key] = f"{query[key]},{value}" if key in query else value
    stamp = dt.datetime.fromtimestamp(now_s, tz=dt.UTC)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": parts.path or "/",
        "rawQueryString": parts.query,
        "headers": joined,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": host,
            "domainPrefix": host.split(".", 1)[0],
            "http": {"method": method, "path": parts.path or "/", "protocol": protocol,
                     "sourceIp": source_ip, "userAgent": joined.get("user-agent", "")},
            "requestId": request_id,
            "routeKey": route_key,
            "stage": stage,
            "time": stamp.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now_s * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if body:
        if is_text(joined.get("content-type")):
            try:
                event["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                event["body"] = base64.b64encode(body).decode()
                event["isBase64Encoded"] = True
        else:
            event["body"] = base64.b64encode(body).decode()
            event["isBase64Encoded"] = True
    return event


class GatewayResponse:
    """An HTTP response: status, header list (repeats allowed), body."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


def _internal_error(reason: str) -> GatewayResponse:
    return GatewayResponse(500, [("content-type", "application/json"),
                                 ("x-warmstart-gateway-error", reason)],
                           b'{"message":"Internal Server Error"}')


def map_response(result: InvokeResult) -> GatewayResponse:
    """Map a function's payload-2.0 response to HTTP.

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html#http-api-develop-integrations-lambda.response
    """
    if result.function_error:
        return _internal_error("function error")
    try:
        data = json.loads(result.payload or b"null")
    except ValueError:
        return _internal_error("function response is not JSON")
    if not (isinstance(data, dict) and "statusCode" in data):
        return GatewayResponse(200, [("content-type", "application/json")], result.payload)
    try:
        status = int(data["statusCode"])
        headers: list[tuple[str, str]] = []
        for key, value in (data.get("headers") or {}).items():
            headers.append((str(key), str(value)))
        for key, values in (data.get("multiValueHeaders") or {}).items():
            headers += [(str(key), str(v)) for v in values]
        headers += [("set-cookie", str(c)) for c in data.get("cookies") or []]
        raw = data.get("body")
        if raw is None:
            body = b""
        elif data.get("isBase64Encoded"):
            body = base64.b64decode(raw, validate=True)
        else:
            body = (raw if isinstance(raw, str) else json.dumps(raw)).encode()
    except (TypeError, ValueError, AttributeError, binascii.Error):
        return _internal_error("malformed Lambda proxy response")
    if not 100 <= status <= 599:
        return _internal_error("malformed Lambda proxy response")
    headers = [(k, v) for k, v in headers if k.lower() not in _DROPPED_RESPONSE_HEADERS]
    return GatewayResponse(status, headers, body)


class Gateway:
    """The local HTTP API.

    Parameters
    ----------
    invoker : Invoker
        Where requests go (the emulator).
    function_name : str, optional
        Function behind the ``$default`` route when ``routes`` is not given.
    qualifier : str
        Alias that route invokes (``"live"``; never the unqualified function).
    routes : sequence of GatewayRoute, optional
        Every route (``$default`` and ``METHOD /path`` ones); replaces ``function_name``.
    host, port : str, int
        Bind address; port 0 = ephemeral.
    now_s : callable, optional
        Clock for ``timeEpoch`` and ``time`` (default ``time.time``: the real arrival time, as
        API Gateway stamps it; the local stack passes ``time.time`` even when its clock is
        scaled, because handlers measure their SLA from it with ``time.time()``).
    """

    name = "gateway"

    def __init__(self, invoker: Invoker, function_name: str | None = None, qualifier: str = "live", *,
                 routes: Sequence[GatewayRoute] = (), host: str = "127.0.0.1", port: int = 0,
                 now_s: Callable[[], float] | None = None) -> None:
        if not routes and function_name is None:
            raise ValueError("Gateway needs function_name or routes")
        self.invoker = invoker
        self.routes: tuple[GatewayRoute, ...] = (
            tuple(routes) if routes else (GatewayRoute(str(function_name), qualifier),))
        self._host = host
        self._port = port
        self._now_s = now_s or time.time
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the gateway is not started")
        return f"http://{self._host}:{self._server.server_port}"

    def handle(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
               source_ip: str, host: str) -> GatewayResponse:
        """Turn one HTTP request into an invocation of the route's alias and its response."""
        request_id = base64.b64encode(os.urandom(10)).decode().rstrip("=")
        selected = select_route(self.routes, method, urlsplit(target).path or "/")
        if selected is None:
            response = GatewayResponse(404, [("content-type", "application/json")],
                                       b'{"message":"Not Found"}')
            response.headers.append(("apigw-requestid", request_id))
            return response
        route, params = selected
        event = build_event(method=method, target=target, headers=headers, body=body,
                            source_ip=source_ip, now_s=self._now_s(), request_id=request_id, host=host,
                            route_key=route.route_key, path_parameters=params)
        try:
            result = self.invoker.invoke(route.function_name, json.dumps(event).encode(),
                                         qualifier=route.qualifier)
        except LambdaApiError as exc:
            response = _internal_error(exc.error_type)
        else:
            response = map_response(result)
        response.headers.append(("apigw-requestid", request_id))
        return response

    def start(self) -> None:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between writes
            server_version = "warmstart-local-gateway"

            def log_message(self, format: str, *args: Any) -> None:
                _LOG.debug(format, *args)

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                response = gateway.handle(self.command, self.path, list(self.headers.items()), body,
                                          self.client_address[0], self.headers.get("Host", "localhost"))
                self.send_response(response.status)
                for key, value in response.headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(response.body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _any

        self._server, self._thread = serve_in_background(self._host, self._port, Handler, "gateway")

    def stop(self) -> None:
        shutdown(self._server, self._thread)
