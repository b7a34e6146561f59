"""Lambda event shapes: classify, validate, and answer in the source's response format.

The agent accepts the HTTP event sources Mangum handles: API Gateway HTTP API (payload 2.0),
Lambda function URLs (same payload), API Gateway REST API (payload 1.0) and Application Load
Balancer. :func:`parse_http_event` checks what Mangum would otherwise trip over and raises
:class:`BadRequest` with a clear message, so a malformed event gets a JSON 4xx instead of a
crash: null or non-object headers and query parameters, non-string values, non-string bodies,
invalid base64, oversized bodies, a REST event without ``resource`` or with a null
``identity``, an ALB event without ``path``, a method that is not an HTTP token, text Mangum
cannot encode (lone UTF-16 surrogates such as ``\\ud800`` in a header, the query string, a
cookie, the path or the body), a ``Host`` header that is not a valid ``host[:port]`` (RFC 9112
section 3.2: answer 400), a non-numeric ``X-Forwarded-Port`` (Mangum's ``int()`` of either raised
``ValueError``), an ``X-Forwarded-Proto`` other than ``http``/``https`` (the ASGI scheme apps
build URLs from), and a body nested deeper than :data:`MAX_JSON_DEPTH` (text bodies, and
base64 bodies typed JSON).

Imports only the standard library.

References
----------
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html
https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html
https://docs.aws.amazon.com/elasticloadbalancing/latest/application/lambda-functions.html

External prefixes
-----------------
A request reaches the app through a path prefix the app does not route on; :func:`split_path`
finds it, so routes match the app's own paths and the prefix becomes the ASGI ``root_path``
(see :mod:`functions.runtime.asgi`). A prefix is only ever removed at a ``/`` boundary
(``/lookup`` takes ``/lookup/x`` to ``/x`` and ``/lookup`` to ``/``, never ``/lookupx``).
In order, from the front of the path:

1. **The gateway's own prefix** (REST and HTTP APIs only):
   - REST API on its execute-api domain: ``path`` lacks the stage, ``requestContext.path``
     has it (``/prod/my/path`` for ``/my/path``); the difference is the prefix.
   - Custom domain with an API mapping (``api.example.com/v1`` -> a stage): API Gateway routes
     without the mapping key, but REST APIs leave it in ``path`` and ``requestContext.path``
     (and, by most reports, HTTP APIs in ``rawPath``); no field names it. It is the part of the
     path before the API-internal path: the route template (``resource``; the path of
     ``routeKey``) filled with ``pathParameters``. Whatever a gateway puts there, the template
     check strips exactly what is not the API's own path.
   - HTTP API named stage (anything but ``$default``) on the execute-api domain: ``rawPath`` and
     ``requestContext.http.path`` start with ``/<stage>`` (also caught by the template, and by
     itself for the catch-all ``$default`` route, which has no template). The same check covers
     HTTP APIs sending payload 1.0 and a mapping key equal to the stage name.
2. **Configured prefixes** ``strip_prefixes`` (first match; Powertools' option of that name):
   mapping keys that cannot be derived (the ``$default`` route behind a custom domain).
3. **The agent's base path** ``base_path`` (``WARMSTART_BASE_PATH``, e.g. ``/lookup``): where
   the API or the load balancer routes this agent. ALB and function URLs have only 2 and 3.

Paths are compared as the event delivers them (not percent-decoded), with two exceptions of
the template check: ``path`` stays percent-encoded while ``pathParameters`` arrive decoded
(``/api/echo/a%20b`` with ``pathParameters`` ``{"word": "a b"}``), so an encoded path is also
compared decoded, cut at one of its own ``/``; and a mapping's root (``/api`` with resource
``/``) is the prefix with the app's ``/``.

References: https://docs.aws.amazon.com/apigateway/latest/developerguide/rest-api-mappings.html
(the mapped base path is stripped for routing), https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-stages.html;
reports of the fields above: aws-powertools/powertools-lambda-python #576, #579 (REST mapping key
in ``path``; ``strip_prefixes``), #621 (HTTP API stage in ``rawPath``), aws/serverless-java-container
#34, Kludex/mangum ``api_gateway_base_path`` (strips without a ``/`` boundary, no stage).
"""

from __future__ import annotations

import binascii
import enum
import json
import re
from base64 import b64decode
from collections.abc import Mapping
from typing import Any, NamedTuple

from functions.runtime.errors import BadRequest

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_EVENT_AGE_MS",
    "MAX_JSON_DEPTH",
    "MAX_RESPONSE_BYTES",
    "EventKind",
    "HttpRequest",
    "add_headers",
    "check_json_depth",
    "check_strict_json",
    "classify",
    "json_too_deep",
    "normalize_prefix",
    "parse_http_event",
    "request_body",
    "respond",
    "split_path",
]

#: Largest request body accepted, bytes. The agent's only body is ``{"text": ...}`` with at
#: most 2,000 characters (4 bytes each in UTF-8 at worst, plus JSON escaping); 64 KiB leaves 8x
#: headroom and stays far below Lambda's 6 MB synchronous payload limit
#: (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
MAX_BODY_BYTES = 64 * 1024

#: Largest response Lambda returns to a synchronous caller, bytes: the serialised response
#: object (status, headers, the body as a JSON string). Beyond it the invocation fails with
#: ``Response payload size exceeded maximum allowed payload size (6291556 bytes)`` and API
#: Gateway answers a bare 502/500 (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
MAX_RESPONSE_BYTES = 6_291_556

#: The one "event too old" limit, milliseconds. No HTTP source keeps a request waiting longer
#: than Lambda's longest function timeout (900 s): HTTP APIs give up after 30 s, REST APIs after
#: 29 s by default but later on a quota increase (Regional and private APIs, since June 2024),
#: function URLs wait as long as the function's timeout. An arrival time older than this
#: is a replayed or hand-written event: the SLA clock starts at invocation start instead. A
#: genuine request between 30 s and 900 s old is late and counted so (its budget is spent).
#: A 30 s limit would take a slow REST API or function URL request for a replayed one.
#: https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html,
#: https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html,
#: https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html,
#: https://aws.amazon.com/about-aws/whats-new/2024/06/amazon-api-gateway-integration-timeout-limit-29-seconds/
MAX_EVENT_AGE_MS = 900_000.0

#: Deepest JSON nesting (objects and arrays) a request body may have. Deeper bodies get a 400
#: before any parse (``json.loads`` raises ``RecursionError`` near 1,000 levels on Python 3.11
#: and accepts them on 3.12+, leaving hooks and apps to recurse on them). 64 is the default
#: ``MaxDepth`` of .NET's System.Text.Json (https://learn.microsoft.com/dotnet/api/system.text.json.jsonreaderoptions.maxdepth);
#: the agents' contracts nest two levels.
MAX_JSON_DEPTH = 64

#: ``Host`` as Mangum can split it and an app can build a URL from it: a host without ``:``
#: and an optional port of 1-5 digits. Strict where it matters (Mangum 0.22 splits the header
#: on every ``:`` and ``int()``s the port, ``mangum.handlers.utils.get_server_and_port``, so an
#: IP-literal ``[::1]`` is refused too; ``/ ? # @ \\``, whitespace, control and non-ASCII
#: characters would move a URL's authority or path, or not fit a header), lenient on the rest
#: (AWS's own sample function URL event carries ``<url-id>``). Not empty: an http(s) target
#: always has an authority (Starlette would build ``https://:80/...``). RFC 9112 section 3.2:
#: an invalid Host is answered 400.
_HOST = re.compile(r"(?:(?![/?#@\\\[\]:])[!-~])+(?::[0-9]{1,5})?")
#: An HTTP method: a token (RFC 9110 section 9.1 and 5.6.2).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: JSON strings, dropped before the depth count (their brackets are text).
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
#: Header names whose values Mangum parses (``Host`` and ``X-Forwarded-Port`` become the ASGI
#: ``server``, ``X-Forwarded-Proto`` its ``scheme``); by length first, so most names cost no
#: ``lower()``.
_PARSED_HEADERS = {4: "host", 16: "x-forwarded-port", 17: "x-forwarded-proto"}
_MANY_HOSTS = "the request has more than one Host header: send one (RFC 9112 section 3.2)"
#: The schemes ``X-Forwarded-Proto`` may name (Mangum makes it the ASGI ``scheme``; apps build
#: URLs from it).
_SCHEMES = frozenset({"http", "https"})
#: Media types whose bodies are checked for nesting before the app sees them.
_JSON_TYPES = ("application/json",)

#: Keys that mark an event as an HTTP request (of any source).
HTTP_MARKERS = frozenset(
    {"requestContext", "httpMethod", "rawPath", "routeKey", "headers", "multiValueHeaders", "body"}
)


class EventKind(enum.StrEnum):
    """What kind of event an invocation carries."""

    HTTP_API_V2 = "http_api_v2"
    FUNCTION_URL = "function_url"
    REST_API_V1 = "rest_api_v1"
    ALB = "alb"
    PING = "ping"
    UNKNOWN = "unknown"

    @property
    def is_http(self) -> bool:
        """True for the HTTP event sources."""
        return self is not EventKind.PING and self is not EventKind.UNKNOWN


def classify(event: object) -> EventKind:
    """Say which kind of event this is, by its shape alone.

    A warm ping is a direct-invoke payload with a top-level ``warmstart`` object and none of the
    HTTP keys: a ``warmstart`` marker inside an HTTP event (body, header, anywhere) does not make
    it a ping, and neither does ``source == "aws.events"``.

    Parameters
    ----------
    event : object
        The Lambda event as decoded from JSON.

    Returns
    -------
    EventKind
    """
    if type(event) is not dict and not isinstance(event, Mapping):
        return EventKind.UNKNOWN
    context = event.get("requestContext")
    if type(context) is dict or isinstance(context, Mapping):
        if "elb" in context:
            return EventKind.ALB
        if event.get("version") == "2.0":
            domain = context.get("domainName")
            if isinstance(domain, str) and ".lambda-url." in domain:
                return EventKind.FUNCTION_URL
            return EventKind.HTTP_API_V2
        if "httpMethod" in event:
            return EventKind.REST_API_V1
        return EventKind.UNKNOWN
    if "warmstart" in event and not (HTTP_MARKERS & event.keys()):
        return EventKind.PING
    return EventKind.UNKNOWN


class HttpRequest(NamedTuple):
    """What the toolkit needs to know about an HTTP event before running the app.

    Immutable (a named tuple: built on every request, so it is the cheapest immutable record).

    Attributes
    ----------
    kind : EventKind
        The event source.
    method : str
        HTTP method, upper case.
    path : str
        The app's own path: the request path with the external prefix (``root_path``) removed,
        ``/`` when nothing is left; as the event delivers it (not percent-decoded).
    arrival_epoch_ms : float | None
        When the request reached API Gateway (``requestContext.timeEpoch`` for payload 2.0,
        ``requestContext.requestTimeEpoch`` for REST), epoch milliseconds; None when the source
        does not say (ALB).
    body_bytes : int
        Size of the decoded body in bytes.
    root_path : str
        The external prefix the client's URL has before :attr:`path` (``/prod/lookup``,
        ``/v1``), ``""`` for none; never ends with ``/``. The ASGI ``root_path`` (see
        :func:`split_path`).
    """

    kind: EventKind
    method: str
    path: str
    arrival_epoch_ms: float | None
    body_bytes: int
    root_path: str = ""

    @property
    def route(self) -> str:
        """``"METHOD /path"``."""
        return f"{self.method} {self.path}"


_new_tuple = tuple.__new__


def _encodable(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (no lone UTF-16 surrogate such as ``\\ud800``)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(name: str) -> str:
    """A client-sent name for an error message: at most 64 characters, escaped."""
    return ascii(name[:64])


def _text(value: str, where: str) -> None:
    if not value.isascii() and not _encodable(value):
        raise BadRequest(f"{where} is not valid Unicode text (a lone UTF-16 surrogate such as "
                         "\\ud800): send UTF-8")


def _headers(event: Mapping[str, Any], key: str, *, nullable: bool, multi: bool) -> None:
    """Check one header map: names and values are text Mangum can encode, and ``Host`` /
    ``X-Forwarded-Port`` (which Mangum parses into the ASGI ``server``) are well formed."""
    value = event.get(key)
    if value is None:
        if key in event and not nullable:
            raise BadRequest(f"event field {key!r} is null: send an object of header names to values")
        return
    if type(value) is not dict and not isinstance(value, Mapping):
        raise BadRequest(f"event field {key!r} must be an object, got {type(value).__name__}")
    if not multi and _plain_headers(value):
        return
    hosts = 0
    for name, item in value.items():
        if multi:
            if type(item) is not list:
                raise BadRequest(f"{key}[{_shown(name)}] must be a list of strings")
            items: list[Any] = item
        else:
            items = [item]
        for v in items:
            if type(v) is not str:
                raise BadRequest(f"header {_shown(name)} in {key!r} must be a string value")
            if not v.isascii() and not _encodable(v):
                raise BadRequest(f"header {_shown(name)} is not valid Unicode text (a lone UTF-16 "
                                 "surrogate such as \\ud800): send UTF-8")
        if not name.isascii() and not _encodable(name):
            raise BadRequest(f"a header name in {key!r} is not valid Unicode text (a lone UTF-16 "
                             "surrogate such as \\ud800): send UTF-8")
        parsed = _PARSED_HEADERS.get(len(name))
        if parsed is None or name.lower() != parsed:
            continue
        for v in items:
            hosts += parsed == "host"
            _check_parsed_header(parsed, v)
    if hosts > 1:
        raise BadRequest(_MANY_HOSTS)


def _check_parsed_header(parsed: str, v: str) -> None:
    """One value of a header Mangum parses (``host``, ``x-forwarded-proto``,
    ``x-forwarded-port``, named in lower case)."""
    if parsed == "host":
        if _HOST.fullmatch(v) is None or (":" in v and int(v.rpartition(":")[2]) > 65535):
            raise BadRequest("the Host header is not a valid host[:port] (RFC 9112 section "
                             "3.2): send a host name or IPv4 address and an optional port "
                             "of 0-65535")
    elif parsed == "x-forwarded-proto":
        if v not in _SCHEMES:  # Starlette looks the scheme's port up as sent: lower case
            raise BadRequest("the X-Forwarded-Proto header must be http or https (lower case)")
    elif not (v.isascii() and v.isdigit() and len(v) <= 5 and int(v) <= 65535):
        raise BadRequest("the X-Forwarded-Port header must be a port number (0-65535)")


def _plain_headers(headers: Mapping[str, Any]) -> bool:
    """The warm path's check of a single-value header map, in a few C calls: True when every
    name and value is an ASCII ``str`` and the parsed headers are well formed (any name case;
    at most one ``Host``). False: the map needs the full check (:func:`_headers` loops, which
    names what is wrong); raises only what that loop raises for the same map, in its order."""
    try:
        names = "".join(headers)
        values = "".join(headers.values())
    except TypeError:  # a name or a value that is not a str
        return False
    if not (names.isascii() and values.isascii()):
        return False
    lower = names == names.lower()  # HTTP API v2 and function URLs send lower-case names
    hosts = 0
    for name, v in headers.items():  # in the map's order, as the full check reports
        parsed = _PARSED_HEADERS.get(len(name))
        if parsed is not None and (name == parsed or (not lower and name.lower() == parsed)):
            hosts += parsed == "host"
            _check_parsed_header(parsed, v)
    if hosts > 1:
        raise BadRequest(_MANY_HOSTS)
    return True


def _query(event: Mapping[str, Any], key: str, *, multi: bool) -> None:
    """A query parameter map: null, or an object of strings (lists of strings when ``multi``)."""
    value = event.get(key)
    if value is None:
        return
    if type(value) is not dict and not isinstance(value, Mapping):
        raise BadRequest(f"event field {key!r} must be an object or null, got {type(value).__name__}")
    for name, item in value.items():
        items = item if multi and type(item) is list else [item]
        if not all(type(v) is str for v in items):
            raise BadRequest(f"{key}[{_shown(name)}] must be "
                             f"{'a list of strings' if multi else 'a string'}")
        _text(name, f"a name in {key!r}")
        for v in items:
            _text(v, f"{key}[{_shown(name)}]")


def _string(container: Mapping[str, Any], key: str, where: str) -> str:
    value = container.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"event field {where} must be a non-empty string")
    return value


def _method(container: Mapping[str, Any], key: str, where: str) -> str:
    value = _string(container, key, where)
    if _TOKEN.fullmatch(value) is None:
        raise BadRequest(f"event field {where} must be an HTTP method (a token, RFC 9110 section 9.1)")
    return value


def json_too_deep(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``raw`` nests objects and arrays deeper than ``limit``.

    Counts brackets outside strings without parsing (no recursion, linear time); a body with
    at most ``limit`` opening brackets is answered at once. Malformed JSON is counted as is
    (the parse that follows refuses it).
    """
    if isinstance(raw, str):
        if raw.count("[") + raw.count("{") <= limit:
            return False
        data = raw.encode("utf-8", "surrogatepass")
    else:
        data = raw
        if data.count(b"[") + data.count(b"{") <= limit:
            return False
    depth = 0
    for byte in _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS):
        if byte == 0x5B or byte == 0x7B:  # [ {
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


#: What a strict JSON body cannot hold, found by a scan before any parse: the non-standard
#: constants Python's ``json`` accepts (``NaN``, ``Infinity``), numbers that may overflow a
#: double to infinity (3-digit exponents, 300-digit runs), and ``\\u`` escapes of UTF-16
#: surrogates (paired ones are fine; a lone one decodes to a string no UTF-8 encoder takes).
_SUSPECT_JSON = re.compile(rb"NaN|Infinity|\\u[dD][89a-fA-F]|[eE][+-]?[0-9]{3}|[0-9]{300}")
#: The same scan for a text body that is all ASCII (the warm path's usual body: no encode to
#: bytes and no UTF-8 check needed, an ASCII ``str`` is valid UTF-8 without surrogates).
_SUSPECT_JSON_TEXT = re.compile(_SUSPECT_JSON.pattern.decode("ascii"))


_INF = float("inf")


class _NonStandardConstant(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonStandardConstant(name)


def check_strict_json(raw: bytes | str) -> None:
    """Refuse a JSON body that only Python's lenient ``json`` would take.

    RFC 8259 (sections 6 and 8.1-8.2): no ``NaN`` / ``Infinity``, text in UTF-8, strings of
    Unicode characters (a lone surrogate cannot be encoded back). Apps decode such bodies
    (``json.loads`` of bytes uses ``surrogatepass``) and then fail while answering: FastAPI's
    validation error echoes the input and cannot render ``NaN`` or ``\\ud800``; a tokenizer
    cannot encode a lone surrogate. Refusing them here makes those 500s the client's 400, for
    any agent. A body that is not JSON at all is left to the app (it answers as it would).
    Costs a regex scan on the warm path; the parse runs only when the scan finds a suspect.

    Raises
    ------
    BadRequest
        400, saying which rule the body broke.
    """
    if type(raw) is str and raw.isascii():  # the usual text body: one scan, no copy
        if _SUSPECT_JSON_TEXT.search(raw) is None:
            return
        data = raw.encode("ascii")
    else:
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("request body is not valid UTF-8 text (RFC 8259 section 8.1): send "
                             "JSON in UTF-8") from None
        if _SUSPECT_JSON.search(data) is None:
            return
    import json

    try:
        doc = json.loads(data, parse_constant=_refuse_constant)
    except _NonStandardConstant as exc:
        raise BadRequest(f"request body uses {exc}, which JSON does not allow (RFC 8259 "
                         "section 6): send a number or null") from None
    except (ValueError, RecursionError):
        return  # not JSON: the app's own parse answers
    stack = [doc]
    while stack:  # depth is bounded by check_json_depth before this
        value = stack.pop()
        if isinstance(value, float) and value in (_INF, -_INF):
            raise BadRequest("request body holds a number too large for a double (1e999 reads as "
                             "infinity; RFC 8259 section 6): send a smaller number") from None
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadRequest("request body holds a lone UTF-16 surrogate escape (\\ud800-"
                                 "\\udfff without its pair): send Unicode text") from None
        elif isinstance(value, dict):
            stack.extend(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _looks_like_json(raw: bytes | str) -> bool:
    """A body whose first non-blank character opens a JSON object or array."""
    head = raw[:64].lstrip()
    return bool(head) and head[:1] in ("{", "[", b"{", b"[")


def check_json_depth(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a JSON body nested deeper than ``limit`` (see :func:`json_too_deep`).

    Raises
    ------
    BadRequest
        400, naming the limit.
    """
    if json_too_deep(raw, limit):
        raise BadRequest(f"request body nests JSON deeper than {limit} levels: send a flatter body")


def _body_bytes(event: Mapping[str, Any], max_body_bytes: int) -> int:
    body = event.get("body")
    encoded = event.get("isBase64Encoded", False)
    if not isinstance(encoded, bool):
        raise BadRequest("event field 'isBase64Encoded' must be true or false")
    if body is None:
        return 0
    if not isinstance(body, str):
        raise BadRequest(f"event field 'body' must be a string, got {type(body).__name__}")
    if encoded:
        if len(body) > (max_body_bytes * 4) // 3 + 4:
            raise BadRequest(f"request body exceeds {max_body_bytes} bytes", status=413, code="too_large")
        try:
            size = len(b64decode(body, validate=True))
        except (binascii.Error, ValueError):
            raise BadRequest(
                "body is not valid base64 although isBase64Encoded is true: "
                "encode the body or set isBase64Encoded to false"
            ) from None
    elif body.isascii():
        size = len(body)
    else:
        try:
            size = len(body.encode("utf-8"))
        except UnicodeEncodeError:
            raise BadRequest("request body is not valid Unicode text (a lone UTF-16 surrogate "
                             "such as \\ud800): send UTF-8, or base64 with isBase64Encoded") from None
    if size > max_body_bytes:
        raise BadRequest(f"request body exceeds {max_body_bytes} bytes", status=413, code="too_large")
    return size


def _json_content_type(event: Mapping[str, Any]) -> bool:
    """The request says its body is JSON (``application/json`` or a ``+json`` type)."""
    for key in ("headers", "multiValueHeaders"):
        headers = event.get(key)
        if not headers:
            continue
        value = headers.get("content-type")
        if value is None:
            for name, item in headers.items():
                if len(name) == 12 and name.lower() == "content-type":
                    value = item
                    break
        if type(value) is list:
            value = value[0] if value else None
        if type(value) is str:
            media = value.partition(";")[0].strip().lower()
            return media in _JSON_TYPES or media.endswith("+json")
    return False


def request_body(event: Mapping[str, Any]) -> bytes:
    """The decoded request body (``b""`` when there is none).

    Call it after :func:`parse_http_event` accepted the event (which checked the body's type,
    base64 and size).
    """
    body = event.get("body")
    if not body:
        return b""
    if event.get("isBase64Encoded"):
        return b64decode(body)
    return str(body).encode("utf-8", "surrogatepass")


_NORMALIZED: dict[str, str] = {"": "", "/": ""}


def normalize_prefix(prefix: str | None) -> str:
    """A path prefix in the form :func:`split_path` compares: ``/a/b``, or ``""`` for none.

    Parameters
    ----------
    prefix : str | None
        ``None``, ``""`` and ``"/"`` mean no prefix; a missing leading ``/`` is added, trailing
        ones are dropped (``lookup/`` -> ``/lookup``).

    Returns
    -------
    str

    Raises
    ------
    ValueError
        A prefix with whitespace, ``//``, ``?`` or ``#``: it could never match a request path.
    """
    if prefix is None:
        return ""
    known = _NORMALIZED.get(prefix)
    if known is not None:
        return known
    value = prefix.strip("/")
    if not value:
        return ""
    if "//" in value or "?" in value or "#" in value or any(c.isspace() for c in value):
        raise ValueError(
            f"path prefix {prefix!r} cannot match a request path: use e.g. '/lookup' "
            "(no spaces, '//', '?' or '#')"
        )
    value = "/" + value
    if len(_NORMALIZED) < 64:  # a few configured prefixes per process; bounded anyway
        _NORMALIZED[prefix] = value
    return value


def _strip(path: str, prefix: str) -> str | None:
    """``path`` without ``prefix`` when it starts with it at a ``/`` boundary, else None."""
    if not prefix or not path.startswith(prefix):
        return None
    size = len(prefix)
    if len(path) == size:
        return "/"
    if path[size] == "/":
        return path[size:]
    return None


def _fill(template: str, params: object) -> str | None:
    """A route template (``/lookup/{proxy+}``) with its path parameters filled in."""
    if "{" not in template:
        return template
    if type(params) is not dict and not isinstance(params, Mapping):
        return None
    parts = template.split("/")
    for index, part in enumerate(parts):
        if part.startswith("{") and part.endswith("}"):
            value = params.get(part[1:-1].rstrip("+"))
            if type(value) is not str:
                return None
            parts[index] = value
        elif "{" in part:  # not a whole segment: not a template API Gateway accepts
            return None
    return "/".join(parts)


def _split_encoded(path: str, internal: str) -> tuple[str, str] | None:
    """``(prefix, rest)`` of a percent-encoded ``path`` whose decoded tail is ``internal`` (the
    route template filled with decoded path parameters), cut at a ``/`` of ``path`` itself; the
    rest stays encoded, as the path came (``/api/echo/a%20b`` -> ``/api``, ``/echo/a%20b``).
    None when no cut matches."""
    from urllib.parse import unquote

    start = path.find("/", 1)
    while start > 0:
        rest = path[start:]
        if unquote(rest) == internal:
            return path[:start], rest
        start = path.find("/", start + 1)
    return None


def _gateway_prefix(
    kind: EventKind, event: Mapping[str, Any], context: Mapping[str, Any], path: str
) -> tuple[str, str]:
    """``(prefix, rest)``: what API Gateway put before the API-internal path ``rest``."""
    stage = context.get("stage")
    # "/<stage>" for a named stage ($default is served at the root of the API's URL)
    stage_prefix = "/" + stage if isinstance(stage, str) and stage and stage != "$default" else ""
    if kind is EventKind.REST_API_V1:
        if stage_prefix:  # execute-api domain: requestContext.path is "/<stage>" + path
            external = context.get("path")
            if type(external) is str and _strip(external, stage_prefix) == path:
                return stage_prefix, path
        template = event.get("resource")
    elif kind is EventKind.HTTP_API_V2:
        route_key = event.get("routeKey")  # "ANY /lookup/{proxy+}", or "$default"
        template = route_key.partition(" ")[2] if type(route_key) is str else None
    else:
        return "", path
    if type(template) is str and template.startswith("/"):
        internal = _fill(template, event.get("pathParameters"))
        if internal is not None:
            if internal == path:
                return "", path
            cut = len(path) - len(internal)
            if cut > 0 and path.endswith(internal) and path[cut - 1] != "/" and path[0] == "/":
                return path[:cut], internal  # a custom domain's mapping key, or the stage
            if internal == "/" and len(path) > 1 and path[0] == "/" and path[-1] != "/":
                return path, "/"  # the mapping's root: "/api" with resource "/"
            if "%" in path:  # the path stays percent-encoded, pathParameters arrive decoded
                split = _split_encoded(path, internal)
                if split is not None:
                    return split
    if stage_prefix:
        rest = _strip(path, stage_prefix)
        if rest is not None:
            return stage_prefix, rest
    return "", path


def split_path(
    kind: EventKind,
    event: Mapping[str, Any],
    path: str,
    *,
    base_path: str | None = None,
    strip_prefixes: tuple[str, ...] = (),
) -> tuple[str, str]:
    """Split a request path into the external prefix and the app's own path.

    See the module docstring ("External prefixes") for where each prefix comes from.

    Parameters
    ----------
    kind : EventKind
        The event's source.
    event : Mapping[str, Any]
        The event (``requestContext``, ``resource`` / ``routeKey``, ``pathParameters`` are read).
    path : str
        The path the event carries (``requestContext.http.path`` for payload 2.0, ``path``
        otherwise).
    base_path : str | None
        The agent's prefix (``WARMSTART_BASE_PATH``), e.g. ``/lookup``; see
        :func:`normalize_prefix`.
    strip_prefixes : tuple[str, ...]
        Further prefixes to remove after the gateway's and before ``base_path`` (first match),
        e.g. a custom domain's mapping key that the event does not reveal.

    Returns
    -------
    tuple[str, str]
        ``(root_path, app_path)``: ``root_path`` is ``""`` or ``/a/b`` (no trailing ``/``);
        ``app_path`` starts with ``/``. The client's path is ``root_path + app_path``, except
        that a path equal to a prefix (``/lookup``) gives ``app_path`` ``/``.

    Raises
    ------
    ValueError
        An unusable ``base_path`` or ``strip_prefixes`` entry (:func:`normalize_prefix`).
    """
    context = event.get("requestContext")
    if type(context) is dict or isinstance(context, Mapping):
        root, rest = _gateway_prefix(kind, event, context, path)
    else:
        root, rest = "", path
    for entry in strip_prefixes:
        prefix = normalize_prefix(entry)
        stripped = _strip(rest, prefix)
        if stripped is not None:
            root += prefix
            rest = stripped
            break
    base = normalize_prefix(base_path) if base_path else ""
    if base:
        stripped = _strip(rest, base)
        if stripped is not None:
            root += base
            rest = stripped
    if not rest.startswith("/"):
        rest = "/" + rest
    return root, rest


def _epoch_ms(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_http_event(
    event: object,
    *,
    kind: EventKind | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    base_path: str | None = None,
    strip_prefixes: tuple[str, ...] = (),
) -> HttpRequest:
    """Validate an HTTP event and extract what admission and routing need.

    Parameters
    ----------
    event : object
        The Lambda event.
    kind : EventKind | None
        Its kind when already classified (saves a second :func:`classify`).
    max_body_bytes : int
        Largest decoded body accepted, bytes.
    base_path : str | None
        The agent's external prefix (``WARMSTART_BASE_PATH``, e.g. ``/lookup``), removed from
        the path at a ``/`` boundary only; None for the root agent.
    strip_prefixes : tuple[str, ...]
        Further prefixes to remove (see :func:`split_path`).

    Returns
    -------
    HttpRequest
        With ``path`` the app's own path and ``root_path`` the external prefix.

    Raises
    ------
    BadRequest
        Unknown event shape; null or non-object headers where the source always sends them
        (HTTP API, function URL, ALB; REST API sends ``null`` for a request without headers and
        that is accepted); non-string header or query parameter values; a missing method or
        path, or a method that is not an HTTP token; a REST event without ``resource`` or with a
        non-object ``identity``; text with a lone UTF-16 surrogate (header, cookie, query,
        path, body); an invalid or repeated ``Host``, a non-numeric ``X-Forwarded-Port``, an
        ``X-Forwarded-Proto`` other than http/https; a text body, or a base64 one typed
        JSON (``application/json``, ``+json``), nested deeper than :data:`MAX_JSON_DEPTH`; a
        body that is not a string, is not valid base64 while ``isBase64Encoded`` is true, or is
        larger than ``max_body_bytes`` (status 413).
    ValueError
        An unusable ``base_path`` or ``strip_prefixes`` entry (a configuration error: check it
        once at init with :func:`normalize_prefix`).
    """
    if kind is None:
        kind = classify(event)
    if kind is EventKind.PING or kind is EventKind.UNKNOWN:
        raise BadRequest(
            "unknown event shape: send an API Gateway (HTTP or REST), function URL or ALB event, "
            'or a warm ping {"warmstart": {"ping": true}}'
        )
    assert type(event) is dict or isinstance(event, Mapping)  # a dict: no ABC check
    context = event["requestContext"]
    arrival: float | None = None
    if kind is EventKind.HTTP_API_V2 or kind is EventKind.FUNCTION_URL:
        # the warm path's checks inline (a plain header map, str fields, ASCII text); anything
        # else takes the helpers, which name what is wrong
        headers = event.get("headers")
        if type(headers) is not dict or not _plain_headers(headers):
            _headers(event, "headers", nullable=False, multi=False)
        http = context.get("http")
        if type(http) is not dict and not isinstance(http, Mapping):
            raise BadRequest("event field requestContext.http must be an object")
        method = http.get("method")
        if type(method) is not str or _TOKEN.fullmatch(method) is None:
            method = _method(http, "method", "requestContext.http.method")
        path = http.get("path")
        if type(path) is not str or not path:
            path = _string(http, "path", "requestContext.http.path")
        if not isinstance(http.get("sourceIp"), str):
            raise BadRequest("event field requestContext.http.sourceIp must be a string")
        cookies = event.get("cookies")
        if cookies is not None:
            if type(cookies) is not list:
                raise BadRequest("event field 'cookies' must be a list of strings")
            for cookie in cookies:
                if type(cookie) is not str:
                    raise BadRequest("event field 'cookies' must be a list of strings")
                if not cookie.isascii():
                    _text(cookie, "a cookie")
        if "rawQueryString" in event:
            query = event["rawQueryString"]
            if not isinstance(query, str):
                raise BadRequest("event field 'rawQueryString' must be a string")
            if not query.isascii():
                _text(query, "the query string")
        epoch = context.get("timeEpoch")
        arrival = float(epoch) if type(epoch) is int or type(epoch) is float else _epoch_ms(epoch)
    elif kind is EventKind.REST_API_V1:
        if "resource" not in event and "version" not in event:
            raise BadRequest("REST API event has no 'resource' (the route template API Gateway sends)")
        _headers(event, "headers", nullable=True, multi=False)
        _headers(event, "multiValueHeaders", nullable=True, multi=True)
        identity = context.get("identity", {})
        if type(identity) is not dict and not isinstance(identity, Mapping):
            raise BadRequest("event field requestContext.identity must be an object")
        method = _method(event, "httpMethod", "'httpMethod'")
        path = _string(event, "path", "'path'")
        _query(event, "queryStringParameters", multi=False)
        _query(event, "multiValueQueryStringParameters", multi=True)
        arrival = _epoch_ms(context.get("requestTimeEpoch"))
    else:  # ALB
        if "multiValueHeaders" in event:
            _headers(event, "multiValueHeaders", nullable=False, multi=True)
            if event.get("multiValueHeaders") is None:
                raise BadRequest("event field 'multiValueHeaders' is null")
        else:
            if not isinstance(event.get("headers"), Mapping):
                raise BadRequest("ALB event needs a 'headers' object")
            _headers(event, "headers", nullable=False, multi=False)
        method = _method(event, "httpMethod", "'httpMethod'")
        if "path" not in event:
            raise BadRequest("ALB event has no 'path' (the load balancer always sends it)")
        path = event["path"]
        if not isinstance(path, str):
            raise BadRequest("event field 'path' must be a string")
        path = path or "/"
        _query(event, "queryStringParameters", multi=False)
        _query(event, "multiValueQueryStringParameters", multi=True)
    if not path.isascii():
        _text(path, "the request path")
    size = _body_bytes(event, max_body_bytes)
    if size:
        # text bodies whatever their Content-Type (clients send JSON as form data: curl -d);
        # base64 bodies when they say they are JSON (binary data would count random brackets)
        # or look like it
        body: bytes | str | None = None
        if not event.get("isBase64Encoded"):
            body = event["body"]
        elif _json_content_type(event) or _looks_like_json(request_body(event)):
            body = request_body(event)
        if body is not None:
            if size > MAX_JSON_DEPTH:  # a body is at most as deep as it is long
                check_json_depth(body)
            if _looks_like_json(body) or _json_content_type(event):
                check_strict_json(body)
    root, path = split_path(kind, event, path, base_path=base_path, strip_prefixes=strip_prefixes)
    # the tuple built as NamedTuple._make builds it (no Python-level __new__ per request)
    return _new_tuple(HttpRequest, (kind, method.upper(), path, arrival, size, root))


def queue_ms(request: HttpRequest, now_epoch_ms: float) -> float:
    """Time the request spent before this invocation started, milliseconds.

    Parameters
    ----------
    request : HttpRequest
        Parsed event.
    now_epoch_ms : float
        Wall-clock time of invocation start, epoch milliseconds.

    Returns
    -------
    float
        ``now - arrival``; 0 when the source gives no arrival time, when it lies in the future
        (clock skew) or is older than :data:`MAX_EVENT_AGE_MS` (a replayed event).
    """
    if request.arrival_epoch_ms is None:
        return 0.0
    waited = now_epoch_ms - request.arrival_epoch_ms
    if waited < 0 or waited > MAX_EVENT_AGE_MS:
        return 0.0
    return waited


_REASONS = {
    400: "Bad Request",
    404: "Not Found",
    413: "Content Too Large",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def respond(
    kind: EventKind,
    event: object,
    status: int,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
) -> dict[str, Any]:
    """A JSON response in the format the event source expects: every answer the toolkit builds
    itself (a refusal, a shed, an overflowed or degraded answer, an error) comes from here; the
    app's own answers come from Mangum (`functions.runtime.asgi`).

    Parameters
    ----------
    kind : EventKind
        Source of the event being answered (UNKNOWN answers in the proxy format too, which a
        direct invoker reads as plain JSON).
    event : object
        The event (ALB answers with ``multiValueHeaders`` when the event used them).
    status : int
        HTTP status code.
    body : Mapping[str, Any]
        JSON body.
    headers : Mapping[str, str]
        Extra response headers; ``content-type: application/json`` is always set.

    Returns
    -------
    dict[str, Any]
    """
    all_headers = {"content-type": "application/json", **headers}
    response: dict[str, Any] = {
        "statusCode": status,
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }
    if kind is EventKind.ALB:
        response["statusDescription"] = f"{status} {_REASONS.get(status, 'Error')}"
        if isinstance(event, Mapping) and "multiValueHeaders" in event:
            response["multiValueHeaders"] = {k: [v] for k, v in all_headers.items()}
            return response
    response["headers"] = all_headers
    if kind is EventKind.REST_API_V1:
        response["multiValueHeaders"] = {}
    return response


def add_headers(kind: EventKind, response: dict[str, Any], headers: Mapping[str, str]) -> None:
    """Add headers to a response made by Mangum, in the source's format (in place).

    Parameters
    ----------
    kind : EventKind
        Source of the event being answered.
    response : dict[str, Any]
        Lambda proxy response.
    headers : Mapping[str, str]
        Headers to add (replacing same-named ones).
    """
    if kind is EventKind.ALB and "multiValueHeaders" in response and "headers" not in response:
        multi = response["multiValueHeaders"]
        for name, value in headers.items():
            multi[name.lower()] = [value]
        return
    target = response.get("headers")
    if target is None:
        response["headers"] = {name.lower(): value for name, value in headers.items()}
    else:
        target.update({name.lower(): value for name, value in headers.items()})
