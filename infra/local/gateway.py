"""A local API Gateway HTTP API: HTTP -> payload format 2.0 event -> Lambda alias -> HTTP.

Every request goes to the ``$default`` route, which invokes one function alias (``live``)
through an :class:`Invoker` (the emulator, in-process). The event carries lower-cased headers,
the ``Cookie`` header as a ``cookies`` list, ``requestContext.timeEpoch`` (ms) and
``requestId``, and the body base64-encoded unless its content type is text. The function's
response is mapped back: ``statusCode``, ``headers``, ``multiValueHeaders``, ``cookies``
(``Set-Cookie``), ``isBase64Encoded``; a response without ``statusCode`` is a 200 JSON body.
Function errors and Lambda throttles become ``500 {"message": "Internal Server Error"}``, as
API Gateway's Lambda proxy integration returns them.

References
----------
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
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
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from infra.local.emulator import InvokeResult
from infra.local.errors import LambdaApiError
from infra.local.httpserver import serve_in_background, shutdown

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


def build_event(*, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
                source_ip: str, now_s: float, request_id: str, host: str,
                protocol: str = "HTTP/1.1", stage: str = "$default") -> dict[str, Any]:
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
        "routeKey": "$default",
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
            "routeKey": "$default",
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
    function_name : str
        Function behind the ``$default`` route.
    qualifier : str
        Alias invoked (``"live"``; never the unqualified function).
    host, port : str, int
        Bind address; port 0 = ephemeral.
    now_s : callable, optional
        Clock for ``timeEpoch`` and ``time`` (default ``time.time``: the real arrival time, as
        API Gateway stamps it; the local stack passes ``time.time`` even when its clock is
        scaled, because handlers measure their SLA from it with ``time.time()``).
    """

    name = "gateway"

    def __init__(self, invoker: Invoker, function_name: str, qualifier: str = "live", *,
                 host: str = "127.0.0.1", port: int = 0,
                 now_s: Callable[[], float] | None = None) -> None:
        self.invoker = invoker
        self.function_name = function_name
        self.qualifier = qualifier
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
        """Turn one HTTP request into an invocation and its response."""
        request_id = base64.b64encode(os.urandom(10)).decode().rstrip("=")
        event = build_event(method=method, target=target, headers=headers, body=body,
                            source_ip=source_ip, now_s=self._now_s(), request_id=request_id, host=host)
        try:
            result = self.invoker.invoke(self.function_name, json.dumps(event).encode(),
                                         qualifier=self.qualifier)
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
