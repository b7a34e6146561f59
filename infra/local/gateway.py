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

**Limits, as the deployed HTTP API applies them** (checked in this order; each answer carries
``apigw-requestid`` and, locally only, ``x-warmstart-gateway-error`` saying why):

- *Payload size*: a request body over 10 MB (10,485,760 bytes, the HTTP API quota "Payload
  size 10 MB") is refused before any route or invocation with ``413`` and the text
  ``HTTP content length exceeded 10485760 bytes.`` (what API Gateway answered in
  koki-develop/lgtm-generator#10; HTTP APIs do not document their body). An event over
  Lambda's 6 MB synchronous request limit (``RequestTooLargeException`` from the Invoke API: a
  body under 10 MB can still make one, base64 adds a third) is
  ``413 {"message": "Request Too Long"}`` (the same observation).
- *Stage throttling*: each route has a token bucket (API Gateway's algorithm: ``burst`` tokens,
  refilled at ``rate`` per second, one per request, starting full) with the stage's
  ``DefaultRouteSettings`` (``ThrottlingRateLimit``, ``ThrottlingBurstLimit``) or the route's
  ``RouteSettings``; an empty bucket is ``429 {"message":"Too Many Requests"}``. The bucket runs
  on the stack's clock (seconds of a scaled clock under a replay's time scale, so a trace is
  throttled at its own rate; real seconds otherwise).
- *Integration timeout*: an invocation that has not answered within the integration's
  ``TimeoutInMillis`` (at most and by default 30 s, the HTTP API quota "Maximum integration
  timeout") is answered ``503 {"message":"Service Unavailable"}``, what an HTTP API returns
  (cortexlabs/cortex#1225 shows the response; serverless/serverless#11222: "a 503 with a
  successful lambda execution"; a REST API's 504 "Endpoint request timed out" differs). The
  function goes on running to its own timeout, as in Lambda. Real seconds, like the emulator's
  function timeout.
- *Response size*: a function result over 6 MB is Lambda's ``Response payload size exceeded
  maximum allowed payload size (6291556 bytes).`` (DataBiosphere/azul#8192 quotes it; the
  Lambda quota is 6 MB per synchronous response), an integration failure: an HTTP API answers
  ``500 {"message":"Internal Server Error"}`` for every Lambda integration failure (its
  troubleshooting guide); a REST API answers 502. The emulator's Runtime API refuses such a
  result itself (a ``Function.ResponseSizeTooLarge`` function error, the same 500); the
  gateway checks again for invokers that do not.

A function error's 500 names its ``errorType`` in ``x-warmstart-gateway-error``
(``function error: Runtime.ExitError`` for an environment that died mid-invocation).

**Function URLs** (:class:`FunctionUrlGateway`): a streaming agent's URL, one per function
alias, apart from the HTTP API (which never streams). Each request becomes a function URL
event (:func:`function_url_event`, how a function tells it from an HTTP API event) invoked
through ``Emulator.invoke_stream``; the prelude's status and headers go out at once, then each
chunk as one HTTP/1.1 chunk. Its limits and errors are in the class docstring.

References
----------
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-routes.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-troubleshooting-lambda.html
https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html
https://github.com/koki-develop/lgtm-generator/issues/10
https://github.com/cortexlabs/cortex/issues/1225
https://github.com/serverless/serverless/issues/11222
https://github.com/DataBiosphere/azul/issues/8192
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl, urlsplit

from functions.runtime import streaming
from infra.local.emulator import InvokeResult
from infra.local.errors import LambdaApiError, RequestTooLargeException, TooManyRequestsException
from infra.local.httpserver import serve_in_background, shutdown
from infra.local.spec import GatewayRoute, RouteThrottle, StageSettings

_LOG = logging.getLogger("warmstart.local.gateway")
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript",
               "application/x-www-form-urlencoded", "application/problem+json", "+json", "+xml")
#: Hop-by-hop or gateway-owned headers a function cannot set.
_DROPPED_RESPONSE_HEADERS = {"content-length", "connection", "transfer-encoding", "date", "server"}
#: HTTP API payload size quota (10 MB), bytes.
MAX_REQUEST_BYTES = 10 * 1024 * 1024
#: Lambda's synchronous response limit as its error message states it, bytes (6 MB quota).
MAX_LAMBDA_RESPONSE_BYTES = 6_291_556
#: A body this far over the limit is not read to its end: the connection is closed instead.
_MAX_DRAIN_BYTES = 4 * MAX_REQUEST_BYTES


class TokenBucket:
    """API Gateway's throttling algorithm: ``burst`` tokens, refilled at ``rate_per_s``, one per
    request; starts full. Thread-safe.

    Parameters
    ----------
    throttle : RouteThrottle
    monotonic : callable
        Seconds for differences (the stack's clock).
    """

    def __init__(self, throttle: RouteThrottle, monotonic: Callable[[], float]) -> None:
        self.throttle = throttle
        self._monotonic = monotonic
        self._tokens = float(throttle.burst)
        self._last = monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take one token; False (throttle the request) when fewer than one is left."""
        with self._lock:
            now = self._monotonic()
            self._tokens = min(float(self.throttle.burst),
                               self._tokens + max(0.0, now - self._last) * self.throttle.rate_per_s)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


class Invoker(Protocol):
    """Port the gateway invokes functions through (the emulator satisfies it)."""

    def invoke(self, function_name: str, payload: bytes | None = None, *, qualifier: str | None = None,
               invocation_type: str = "RequestResponse", client_context: str | None = None) -> InvokeResult: ...


class ResponseStream(Protocol):
    """One invocation's response as it streams (the emulator's ``InvocationStream``).

    Iterating it yields the raw body bytes the runtime posted (the HTTP-integration prelude
    included), each as it arrives, blocking; it may raise a :class:`LambdaApiError` before the
    first byte (as ``Invoke`` would). After the iteration: ``result`` (the ``InvokeResult``),
    ``error`` (None, or ``(error_code, error object)`` from the error trailers or the
    function's failure), ``first_byte_ms``/``last_byte_ms`` (monotonic ms, None without a byte).
    ``close()``: the caller stopped reading (idempotent).
    """

    result: InvokeResult | None
    error: tuple[str, dict[str, Any]] | None
    first_byte_ms: float | None
    last_byte_ms: float | None

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class StreamInvoker(Invoker, Protocol):
    """An :class:`Invoker` that also streams responses (``Emulator.invoke_stream``)."""

    def invoke_stream(self, function_name: str, payload: bytes | None = None, *,
                      qualifier: str | None = None, client_context: str | None = None) -> ResponseStream: ...


def send_response(handler: BaseHTTPRequestHandler, response: GatewayResponse) -> None:
    """Write ``response`` with a ``Content-Length`` (no body for ``HEAD``); ``Connection: close``
    when the handler closes the connection after it."""
    handler.send_response(response.status)
    for key, value in response.headers:
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(response.body)))
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(response.body)


def write_chunk(wfile: BufferedIOBase, data: bytes) -> None:
    """One HTTP/1.1 chunk (size line, data, CRLF) in one write, so it leaves at once
    (the handlers' ``wfile`` is unbuffered and Nagle is off). An empty ``data`` writes nothing
    (an empty chunk would end the body)."""
    if data:
        wfile.write(b"%x\r\n%b\r\n" % (len(data), data))


def end_chunks(wfile: BufferedIOBase) -> None:
    """The last chunk of a chunked body (no trailers)."""
    wfile.write(b"0\r\n\r\n")


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


class _Workers:
    """Daemon threads that run the gateway's invocations, reused: over a direct call, a new
    thread per request added ~0.43 ms and a handoff to an idle one ~0.12 ms (``handle`` with an
    in-memory invoker, 2 cores at load average ~8). A thread is added when none is idle, so an
    invocation never waits for another to end."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._threads += 1
                threading.Thread(target=self._work, name="gateway-integration", daemon=True).start()
        self._tasks.put(task)

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            task()
            with self._lock:
                self._idle += 1

    def stop(self) -> None:
        """Let every thread end once its invocation has (none is joined)."""
        with self._lock:
            count, self._threads, self._idle = self._threads, 0, 0
        for _ in range(count):
            self._tasks.put(None)


class GatewayResponse:
    """An HTTP response: status, header list (repeats allowed), body."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


def _gateway_error(status: int, body: bytes, reason: str,
                   content_type: str = "application/json") -> GatewayResponse:
    return GatewayResponse(status, [("content-type", content_type),
                                    ("x-warmstart-gateway-error", reason)], body)


def _internal_error(reason: str, status: int = 500) -> GatewayResponse:
    return _gateway_error(status, b'{"message":"Internal Server Error"}', reason)


def payload_too_large() -> GatewayResponse:
    """The 413 for a request body over `MAX_REQUEST_BYTES` (see the module docstring)."""
    return _gateway_error(413, f"HTTP content length exceeded {MAX_REQUEST_BYTES} bytes.".encode(),
                          "request body over the 10 MB payload quota", "text/plain; charset=utf-8")


class _BodyError(Exception):
    """The request body cannot be read: ``response`` says how the gateway answers."""

    def __init__(self, response: GatewayResponse, *, close: bool = True) -> None:
        super().__init__(response.status)
        self.response = response
        self.close = close


def _bad_request(reason: str) -> _BodyError:
    return _BodyError(_gateway_error(400, b'{"message":"Bad Request"}', reason))


def read_body(headers: Any, rfile: Any) -> bytes:
    """The request body (``Content-Length`` or chunked), at most `MAX_REQUEST_BYTES`.

    Raises
    ------
    _BodyError
        400 for a malformed length or chunk, 413 past the limit (a body up to 4x the limit is
        read and discarded first, so the client sees the 413, not a reset).
    """
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        return _read_chunked(rfile)
    raw = (headers.get("Content-Length") or "0").strip()
    if not raw.isdigit():
        raise _bad_request(f"Content-Length {raw[:40]!r} is not a number")
    length = int(raw)
    if length > MAX_REQUEST_BYTES:
        if length <= _MAX_DRAIN_BYTES:
            left = length
            while left > 0:
                chunk = rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        raise _BodyError(payload_too_large())
    return rfile.read(length) if length else b""


def _read_chunked(rfile: Any) -> bytes:
    body = bytearray()
    while True:
        line = rfile.readline(1024).split(b";", 1)[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            raise _bad_request("malformed chunk size") from None
        if size == 0:
            while rfile.readline(1024).strip():  # trailers
                pass
            return bytes(body)
        if len(body) + size > MAX_REQUEST_BYTES:
            raise _BodyError(payload_too_large())
        body += rfile.read(size)
        rfile.readline(8)  # the CRLF after the chunk


def map_response(result: InvokeResult, *, error_status: int = 500) -> GatewayResponse:
    """Map a function's payload-2.0 response to HTTP.

    ``error_status`` is the status of a function error or a malformed response: 500 from an
    HTTP API, 502 from a function URL.

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html#http-api-develop-integrations-lambda.response
    """
    if result.function_error:
        try:
            error_type = json.loads(result.payload or b"{}").get("errorType")
        except (ValueError, AttributeError):
            error_type = None
        return _internal_error(f"function error: {error_type}" if isinstance(error_type, str)
                               else "function error", error_status)
    try:
        data = json.loads(result.payload or b"null")
    except ValueError:
        return _internal_error("function response is not JSON", error_status)
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
        return _internal_error("malformed Lambda proxy response", error_status)
    if not 100 <= status <= 599:
        return _internal_error("malformed Lambda proxy response", error_status)
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
    stage : StageSettings, optional
        Throttling and integration timeouts to enforce (see the module docstring); default
        none throttled, every integration timeout 30 s.
    monotonic_s : callable, optional
        Clock the throttling buckets refill on, seconds (default ``time.monotonic``; the local
        stack passes its clock's, scaled under a time scale).
    """

    name = "gateway"

    def __init__(self, invoker: Invoker, function_name: str | None = None, qualifier: str = "live", *,
                 routes: Sequence[GatewayRoute] = (), host: str = "127.0.0.1", port: int = 0,
                 now_s: Callable[[], float] | None = None, stage: StageSettings | None = None,
                 monotonic_s: Callable[[], float] | None = None) -> None:
        if not routes and function_name is None:
            raise ValueError("Gateway needs function_name or routes")
        self.invoker = invoker
        self.routes: tuple[GatewayRoute, ...] = (
            tuple(routes) if routes else (GatewayRoute(str(function_name), qualifier),))
        self.stage = stage or StageSettings()
        self._host = host
        self._port = port
        self._now_s = now_s or time.time
        monotonic = monotonic_s or time.monotonic
        self._buckets: dict[str, TokenBucket] = {}
        for route in self.routes:
            throttle = self.stage.throttle_for(route.route_key)
            if throttle is not None:
                self._buckets[route.route_key] = TokenBucket(throttle, monotonic)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._workers = _Workers()

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the gateway is not started")
        return f"http://{self._host}:{self._server.server_port}"

    def limits(self, route: GatewayRoute) -> str:
        """The route's limits in words (``throttle 50 req/s, burst 100; timeout 30 s``)."""
        throttle = self.stage.throttle_for(route.route_key)
        rate = (f"throttle {throttle.rate_per_s:g} req/s, burst {throttle.burst}"
                if throttle is not None else "not throttled")
        return f"{rate}; timeout {self.stage.timeout_for(route.route_key):g} s"

    def handle(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
               source_ip: str, host: str) -> GatewayResponse:
        """Turn one HTTP request into an invocation of the route's alias and its response.

        The limits of the module docstring apply in its order: payload size (413), route (404),
        throttling (429), the invocation within the integration timeout (503), the response
        size and shape (500).
        """
        request_id = base64.b64encode(os.urandom(10)).decode().rstrip("=")
        response = self._answer(method, target, headers, body, source_ip, host, request_id)
        response.headers.append(("apigw-requestid", request_id))
        return response

    def _answer(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
                source_ip: str, host: str, request_id: str) -> GatewayResponse:
        if len(body) > MAX_REQUEST_BYTES:
            return payload_too_large()
        selected = select_route(self.routes, method, urlsplit(target).path or "/")
        if selected is None:
            return GatewayResponse(404, [("content-type", "application/json")], b'{"message":"Not Found"}')
        route, params = selected
        bucket = self._buckets.get(route.route_key)
        if bucket is not None and not bucket.take():
            return _gateway_error(429, b'{"message":"Too Many Requests"}',
                                  f"throttled: route {route.route_key} ({self.limits(route)})")
        event = build_event(method=method, target=target, headers=headers, body=body,
                            source_ip=source_ip, now_s=self._now_s(), request_id=request_id, host=host,
                            route_key=route.route_key, path_parameters=params)
        timeout_s = self.stage.timeout_for(route.route_key)
        try:
            result = self._invoke(route, json.dumps(event).encode(), timeout_s)
        except RequestTooLargeException:
            return _gateway_error(413, b'{"message":"Request Too Long"}',
                                  "event over Lambda's 6 MB synchronous request limit")
        except LambdaApiError as exc:
            return _internal_error(exc.error_type)
        if result is None:
            return _gateway_error(503, b'{"message":"Service Unavailable"}',
                                  f"integration timeout ({timeout_s:g} s)")
        if len(result.payload or b"") > MAX_LAMBDA_RESPONSE_BYTES:
            return _internal_error("Response payload size exceeded maximum allowed payload size "
                                   f"({MAX_LAMBDA_RESPONSE_BYTES} bytes).")
        return map_response(result)

    def _invoke(self, route: GatewayRoute, payload: bytes, timeout_s: float) -> InvokeResult | None:
        """The invocation's result, or None when it did not end within ``timeout_s`` (it goes
        on in its thread, as a Lambda invocation outlives the integration that gave up)."""
        outcome: list[InvokeResult | BaseException] = []
        done = threading.Event()

        def run() -> None:
            try:
                outcome.append(self.invoker.invoke(route.function_name, payload,
                                                   qualifier=route.qualifier))
            except BaseException as exc:  # noqa: BLE001 - handed to the request's thread
                outcome.append(exc)
            finally:
                done.set()

        self._workers.submit(run)
        if not done.wait(timeout_s):
            return None
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def start(self) -> None:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between writes
            server_version = "warmstart-local-gateway"

            def log_message(self, format: str, *args: Any) -> None:
                _LOG.debug(format, *args)

            def _send(self, response: GatewayResponse) -> None:
                send_response(self, response)

            def _any(self) -> None:
                try:
                    body = read_body(self.headers, self.rfile)
                except _BodyError as exc:
                    self.close_connection = exc.close
                    exc.response.headers.append(
                        ("apigw-requestid", base64.b64encode(os.urandom(10)).decode().rstrip("=")))
                    self._send(exc.response)
                    return
                try:
                    response = gateway.handle(self.command, self.path, list(self.headers.items()), body,
                                              self.client_address[0], self.headers.get("Host", "localhost"))
                except Exception:  # noqa: BLE001 - a gateway defect is a 500, never a dropped connection
                    _LOG.exception("gateway: request %s %s failed", self.command, self.path)
                    response = _internal_error("gateway error")
                self._send(response)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _any

        self._server, self._thread = serve_in_background(self._host, self._port, Handler, "gateway")

    def stop(self) -> None:
        shutdown(self._server, self._thread)
        self._workers.stop()


#: A function URL's request payload quota (Lambda's synchronous invocation payload: 6 MB), bytes.
MAX_FUNCTION_URL_REQUEST_BYTES = 6 * 1024 * 1024
FunctionUrlInvokeMode = Literal["RESPONSE_STREAM", "BUFFERED"]


def function_url_event(*, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
                       source_ip: str, now_s: float, request_id: str, url_id: str,
                       region: str) -> dict[str, Any]:
    """The event a Lambda function URL sends: payload format 2.0 with ``routeKey``/``stage``
    ``$default``, no ``pathParameters``, ``requestContext.domainName``
    ``<url-id>.lambda-url.<region>.on.aws`` (how a function tells a function URL event apart),
    ``apiId``/``domainPrefix`` the url id, ``accountId`` ``anonymous`` (auth type NONE).

    Parameters as :func:`build_event`; ``url_id`` (32 lower-case alphanumerics on AWS), ``region``.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads
    """
    domain = f"{url_id}.lambda-url.{region}.on.aws"
    event = build_event(method=method, target=target, headers=headers, body=body,
                        source_ip=source_ip, now_s=now_s, request_id=request_id, host=domain)
    event["requestContext"].update(accountId="anonymous", apiId=url_id)
    return event


class FunctionUrlGateway:
    """A Lambda function URL for one function alias, on 127.0.0.1, that streams.

    Every request (any method, any path: a function URL has no routes) becomes a function URL
    event (:func:`function_url_event`) for ``function_name:qualifier``. With ``invoke_mode``
    ``RESPONSE_STREAM`` (the ``InvokeMode`` of ``AWS::Lambda::Url``) it is invoked through
    :meth:`StreamInvoker.invoke_stream`:

    - the body's HTTP-integration prelude (:func:`functions.runtime.streaming.split_prelude`)
      gives the status, headers and cookies, sent to the client at once; then every body chunk
      as it arrives, one HTTP/1.1 chunk each (``Transfer-Encoding: chunked``; to an HTTP/1.0
      client the raw body, then the connection closes), so ``curl -N`` and a browser's
      ``EventSource`` see each event when it is written;
    - a function that answered buffered (its payload has no prelude: JSON never holds the
      8-NUL separator) is mapped as a function URL maps a buffered answer (as
      :func:`map_response`: a result without ``statusCode`` is a 200 JSON body);
    - a stream that fails after it started just ends (the function already wrote its error
      event); its error trailers are logged (``warmstart.local.gateway``, warning);
    - a body over ``max_response_bytes`` (AWS: 200 MB per streamed response) is cut there, the
      stream closed, the response ended, a warning logged;
    - the client disconnecting: :meth:`ResponseStream.close` (the function goes on, as on AWS),
      nothing raised; it is noticed at the next chunk written.

    Errors before the response starts (the answers of a deployed function URL; the 502 and 429
    bodies are what clients observe, AWS does not document them): a function error, a
    stream that ends or fails before its prelude, a malformed prelude or response:
    ``502 {"message":"Internal Server Error"}``; throttled: ``429
    {"message":"Too Many Requests"}``; an event over Lambda's 6 MB request payload quota:
    ``413 {"message":"Request Too Long"}``; other Invoke errors: 502. Each carries
    ``x-warmstart-gateway-error`` saying why, and ``x-amzn-RequestId``. The function's timeout
    bounds the whole response (the emulator enforces it; AWS: at most 15 minutes).

    ``invoke_mode`` ``BUFFERED``: one ``invoke``, mapped as above.

    Parameters
    ----------
    invoker : StreamInvoker
        The emulator (``invoke_stream`` needed for ``RESPONSE_STREAM`` only).
    function_name : str
    qualifier : str
        The alias the URL targets (``live``).
    invoke_mode : {"RESPONSE_STREAM", "BUFFERED"}
    region : str
        For ``domainName``.
    url_id : str, optional
        Default: 32 random lower-case hex characters.
    host, port : str, int
        Bind address; port 0 = ephemeral (read :attr:`endpoint` after :meth:`start`).
    now_s : callable, optional
        Arrival-time clock for ``timeEpoch`` (default ``time.time``).
    max_response_bytes : int
        Streamed body limit, bytes (default :data:`streaming.MAX_STREAMED_RESPONSE_BYTES`).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html
    https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html
    https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
    """

    name = "function-url"

    def __init__(self, invoker: StreamInvoker, function_name: str, qualifier: str = "live", *,
                 invoke_mode: FunctionUrlInvokeMode = "RESPONSE_STREAM", region: str = "us-east-1",
                 url_id: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 now_s: Callable[[], float] | None = None,
                 max_response_bytes: int = streaming.MAX_STREAMED_RESPONSE_BYTES) -> None:
        if invoke_mode not in ("RESPONSE_STREAM", "BUFFERED"):
            raise ValueError(f"invoke_mode must be RESPONSE_STREAM or BUFFERED, got {invoke_mode!r}")
        self.invoker = invoker
        self.function_name = function_name
        self.qualifier = qualifier
        self.invoke_mode = invoke_mode
        self.region = region
        self.url_id = url_id or uuid.uuid4().hex
        self.max_response_bytes = max_response_bytes
        self._host = host
        self._port = port
        self._now_s = now_s or time.time
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the function URL is not started")
        return f"http://{self._host}:{self._server.server_port}"

    @property
    def domain_name(self) -> str:
        """``<url-id>.lambda-url.<region>.on.aws``, the event's ``requestContext.domainName``."""
        return f"{self.url_id}.lambda-url.{self.region}.on.aws"

    def event(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
              source_ip: str, request_id: str) -> dict[str, Any]:
        """The function URL event for one request (see :func:`function_url_event`)."""
        return function_url_event(method=method, target=target, headers=headers, body=body,
                                  source_ip=source_ip, now_s=self._now_s(), request_id=request_id,
                                  url_id=self.url_id, region=self.region)

    @staticmethod
    def invoke_error(exc: LambdaApiError) -> GatewayResponse:
        """The answer to an Invoke error before the response started."""
        if isinstance(exc, RequestTooLargeException):
            return _gateway_error(413, b'{"message":"Request Too Long"}',
                                  "event over Lambda's 6 MB request payload quota")
        if isinstance(exc, TooManyRequestsException):
            return _gateway_error(429, b'{"message":"Too Many Requests"}', f"throttled: {exc.message}")
        return _internal_error(exc.error_type, 502)

    def open(self, payload: bytes) -> tuple[dict[str, Any], Iterator[bytes], ResponseStream] | GatewayResponse:
        """Invoke for ``payload`` and read the stream up to its prelude.

        Returns
        -------
        (prelude, rest, stream) or GatewayResponse
            The prelude's metadata, an iterator of the body's bytes (the bytes after the
            prelude first) and the stream, once the prelude has come; else the whole answer
            (a buffered result mapped, or an error), the stream then consumed or closed.
        """
        try:
            stream = self.invoker.invoke_stream(self.function_name, payload, qualifier=self.qualifier)
        except LambdaApiError as exc:
            return self.invoke_error(exc)
        chunks = iter(stream)
        data = b""
        try:
            for chunk in chunks:
                data += chunk
                found = streaming.split_prelude(data)
                if found is None:
                    continue
                meta, rest = found
                status = meta.get("statusCode", 200)
                if not 100 <= status <= 599:
                    stream.close()
                    return _internal_error(f"prelude status {status} is not an HTTP status", 502)
                return meta, _then(rest, chunks), stream
        except LambdaApiError as exc:
            return self.invoke_error(exc)
        except streaming.PreludeError as exc:
            stream.close()
            return _internal_error(f"malformed prelude: {exc}", 502)
        return self._buffered(stream, data)

    @staticmethod
    def _buffered(stream: ResponseStream, data: bytes) -> GatewayResponse:
        """The answer to a stream that ended without a prelude: a buffered result, or a failure."""
        result = stream.result
        if stream.error is not None:
            what = ("function error" if result is not None and result.function_error
                    else "stream failed before its prelude")
            return _internal_error(f"{what}: {stream.error[0]}", 502)
        if result is None:
            result = InvokeResult(200, data, "", "$LATEST")
        else:
            result = replace(result, payload=data)
        if not data and not result.function_error:
            return _internal_error("the function sent no prelude and no response", 502)
        if len(data) > MAX_LAMBDA_RESPONSE_BYTES:
            return _internal_error("Response payload size exceeded maximum allowed payload size "
                                   f"({MAX_LAMBDA_RESPONSE_BYTES} bytes).", 502)
        return map_response(result, error_status=502)

    def start(self) -> None:
        url = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # each chunk leaves at once
            server_version = "warmstart-local-function-url"

            def log_message(self, format: str, *args: Any) -> None:
                _LOG.debug(format, *args)

            def _send(self, response: GatewayResponse, request_id: str) -> None:
                response.headers.append(("x-amzn-RequestId", request_id))
                send_response(self, response)

            def _any(self) -> None:
                request_id = str(uuid.uuid4())
                try:
                    body = read_body(self.headers, self.rfile)
                except _BodyError as exc:
                    self.close_connection = exc.close
                    self._send(exc.response, request_id)
                    return
                if len(body) > MAX_FUNCTION_URL_REQUEST_BYTES:
                    self._send(_gateway_error(413, b'{"message":"Request Too Long"}',
                                              "request body over the 6 MB payload quota"), request_id)
                    return
                event = url.event(self.command, self.path, list(self.headers.items()), body,
                                  self.client_address[0], request_id)
                payload = json.dumps(event).encode()
                try:
                    if url.invoke_mode == "BUFFERED":
                        self._send(self._invoke_buffered(payload), request_id)
                        return
                    opened = url.open(payload)
                except Exception:  # noqa: BLE001 - a gateway defect is a 502, never a dropped connection
                    _LOG.exception("function URL: request %s %s failed", self.command, self.path)
                    self._send(_internal_error("gateway error", 502), request_id)
                    return
                if isinstance(opened, GatewayResponse):
                    self._send(opened, request_id)
                    return
                self._stream(*opened, request_id)

            def _invoke_buffered(self, payload: bytes) -> GatewayResponse:
                try:
                    result = url.invoker.invoke(url.function_name, payload, qualifier=url.qualifier)
                except LambdaApiError as exc:
                    return url.invoke_error(exc)
                if len(result.payload or b"") > MAX_LAMBDA_RESPONSE_BYTES:
                    return _internal_error("Response payload size exceeded maximum allowed payload "
                                           f"size ({MAX_LAMBDA_RESPONSE_BYTES} bytes).", 502)
                return map_response(result, error_status=502)

            def _stream(self, meta: dict[str, Any], chunks: Iterator[bytes], stream: ResponseStream,
                        request_id: str) -> None:
                chunked = self.request_version != "HTTP/1.0"
                sent = 0
                try:
                    self.send_response(int(meta.get("statusCode", 200)))
                    for key, value in (meta.get("headers") or {}).items():
                        if str(key).lower() not in _DROPPED_RESPONSE_HEADERS:
                            self.send_header(str(key), str(value))
                    for cookie in meta.get("cookies") or ():
                        self.send_header("Set-Cookie", str(cookie))
                    self.send_header("x-amzn-RequestId", request_id)
                    if chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                    else:
                        self.close_connection = True
                        self.send_header("Connection", "close")
                    self.end_headers()
                    if self.command == "HEAD":
                        stream.close()
                        return
                    for data in chunks:
                        if sent + len(data) > url.max_response_bytes:
                            data = data[:url.max_response_bytes - sent]
                            self._write(data, chunked)
                            _LOG.warning("function URL %s: response cut at the %d-byte streamed "
                                         "response limit (request %s)", url.function_name,
                                         url.max_response_bytes, request_id)
                            stream.close()
                            break
                        self._write(data, chunked)
                        sent += len(data)
                    if stream.error is not None:  # logged before the end goes out
                        code, details = stream.error
                        _LOG.warning("function URL %s: the stream ended in %s after %d body bytes: "
                                     "%s (request %s)", url.function_name, code, sent,
                                     details.get("errorMessage", ""), request_id)
                    if chunked:
                        end_chunks(self.wfile)
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    _LOG.info("function URL %s: the client went away after %d body bytes "
                              "(request %s)", url.function_name, sent, request_id)
                    self.close_connection = True
                    stream.close()

            def _write(self, data: bytes, chunked: bool) -> None:
                if chunked:
                    write_chunk(self.wfile, data)
                elif data:
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _any

        self._server, self._thread = serve_in_background(self._host, self._port, Handler, "function-url")

    def stop(self) -> None:
        shutdown(self._server, self._thread)


def _then(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    """``first`` (when not empty), then every item of ``rest``."""
    if first:
        yield first
    yield from rest
