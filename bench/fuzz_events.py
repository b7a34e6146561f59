"""Property-based fuzzing of the event edge: Hypothesis strategies for every event source, and
the property each answer must have.

Used by ``tests/fuzz/test_edge_fuzz.py`` (a bounded, derandomized profile in ``make test``) and
``bench/bench_fuzz.py`` (the long profile, >= 100,000 examples). In-process, against the real
handlers (``Agent.lambda_handler``) of both reference agents (``functions.agent``,
``functions.lookup``) and of :func:`user_agent`, a minimal agent a user could write.

Strategies
----------
:func:`cases` draws one :class:`Case`: a source (HTTP API v2, function URL, REST API v1, ALB
with and without multi-value headers, warm ping, unknown event), an event built from the real
AWS sample of that source (``tests/data/events``) aimed at one of the agent's routes (or a
made-up path) with a valid or mutated body and headers, then 0-3 structural mutations of any
field: replaced by another JSON type, null, a huge, deep (to 1,500 levels) or surrogate-laden
value, or deleted; a new key added.

Property (:func:`check`)
------------------------
1. The handler returns (an exception out of it is an *escape*).
2. The answer is in the format of the event's source (ALB: ``statusDescription``, and
   ``multiValueHeaders`` exactly when the event used them; REST: both header maps; HTTP API,
   function URL: ``headers``; a warm ping: a pong or a 400; anything else: a 400 in the proxy
   format), JSON-serialisable, within Lambda's 6 MB, with ``X-Warmstart-Path`` on HTTP answers.
3. The status class: no 5xx except the user agent's deliberately failing route (a generic 500).
4. No internal detail in the body: no traceback, exception class name, file path or the
   failing route's secret text, unless the request itself carried it.
5. Every log record can be written (UTF-8): a record that cannot is a finding.
6. The next valid request to the same execution environment is answered correctly.

Imports Hypothesis (a dev dependency); the agents' code is imported by :func:`environments`.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from bench.fuzz_user_app import BOOM_PATH, SECRET

#: Event sources the strategies draw.
SOURCES = ("http_api_v2", "function_url", "rest_api_v1", "alb", "alb_multi", "ping", "unknown")
_SAMPLES = {"http_api_v2": "http_api_v2.json", "function_url": "function_url.json",
            "rest_api_v1": "rest_api_v1.json", "alb": "alb.json", "alb_multi": "alb.json"}
#: The user agent's deliberately failing route, and the text its exception carries (which must
#: never reach a body).
#: Text that means internal detail leaked into a body (unless the request carried it).
_DETAIL = re.compile(r"Traceback|File \"|\b[A-Z][A-Za-z]*(?:Error|Exception)\b|site-packages|"
                     r"/work/|\.py\b|" + re.escape(SECRET))
_MAX_RESPONSE_BYTES = 6_291_556


def _context() -> Any:
    """A Lambda context object for one fuzzed invocation (the tests' ``LambdaContext``)."""
    from tests.conftest import LambdaContext

    return LambdaContext(function_name="fuzz")


# -- events ---------------------------------------------------------------------------------------


def http_event(source: str, method: str, path: str, body: str | None = None, *,
               headers: Mapping[str, str] | None = None, base64_body: bool = False) -> dict[str, Any]:
    """A real AWS sample event of ``source`` aimed at ``method path``
    (``tests.conftest.adapt_event``), as an ALB with multi-value headers for ``alb_multi``,
    its body base64-encoded when ``base64_body``."""
    from tests.conftest import adapt_event

    event = adapt_event(_SAMPLES[source], method, path, body, headers=headers)
    if source == "alb_multi":
        event["multiValueHeaders"] = {k: [v] for k, v in event.pop("headers").items()}
        event["multiValueQueryStringParameters"] = None
        event.pop("queryStringParameters", None)
    if base64_body and body is not None:
        event["body"] = base64.b64encode(body.encode("utf-8", "surrogatepass")).decode()
        event["isBase64Encoded"] = True
    return event


# -- the agents -----------------------------------------------------------------------------------


@dataclass
class Environment:
    """One execution environment under fuzz: its handler, its routes and its valid requests.

    Attributes
    ----------
    name : str
    handler : AgentHandler
        ``handler(event, context) -> response``.
    routes : list[tuple[str, str]]
        ``(method, path)`` of the declared routes (templates filled in).
    bodies : list[Any]
        Valid JSON bodies of its body routes.
    good : list[tuple[dict, Callable[[int, Any], bool]]]
        Valid requests with the check of their answer ``(status, body) -> ok``.
    failing_path : str | None
        The route that fails on purpose (a generic 500 is its right answer).
    """

    name: str
    handler: Any
    routes: list[tuple[str, str]]
    bodies: list[Any]
    good: list[tuple[Callable[[], dict[str, Any]], Callable[[int, Any], bool]]]
    failing_path: str | None = None
    next_good: int = field(default=0)


def user_agent() -> Any:
    """A minimal agent a user could write: a FastAPI app, a payload hook with a degraded
    answer, a path template, a pydantic body, and a route whose code raises."""
    from functions.runtime.agent import Agent, BadRequest, Route

    def check_echo(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("message"), str):
            raise BadRequest('send {"message": "..."}', status=422)
        return {"message": body["message"][:200]}

    return Agent("fuzzuser", app="bench.fuzz_user_app:create_app", routes=[
        Route("GET", "/healthz", tier="P1"),
        Route("POST", "/v1/echo", tier="P0", validate=check_echo,
              degraded=lambda payload: {"message": payload["message"], "partial": True}),
        Route("POST", "/v1/items", tier="P1"),
        Route("GET", "/v1/items/{item_id}", tier="P1", name="item"),
        Route("GET", BOOM_PATH, tier="P2", name="boom"),
    ])


def _ok(expected: Callable[[Any], bool]) -> Callable[[int, Any], bool]:
    return lambda status, body: status == 200 and isinstance(body, dict) and expected(body)


def environments(tool_url: str) -> list[Environment]:
    """The three environments under fuzz, fully loaded (provisioned-concurrency inits).

    Parameters
    ----------
    tool_url : str
        The lookup agent's downstream tool (``infra.local.tool_stub``).
    """
    from functions.agent.handler import agent as intent
    from functions.lookup.handler import agent as lookup

    base = {"AWS_LAMBDA_INITIALIZATION_TYPE": "provisioned-concurrency", "AWS_REGION": "us-east-1",
            "WARMSTART_SLA_MS": "5000"}
    intent_handler = intent.lambda_handler(env={**base, "POWERTOOLS_SERVICE_NAME": "fuzz-intent"})
    lookup_handler = lookup.lambda_handler(env={**base, "POWERTOOLS_SERVICE_NAME": "fuzz-lookup",
                                                "LOOKUP_TOOL_URL": tool_url})
    user_handler = user_agent().lambda_handler(env={**base, "POWERTOOLS_SERVICE_NAME": "fuzz-user"})

    def get(path: str) -> Callable[[], dict[str, Any]]:
        return lambda: http_event("http_api_v2", "GET", path)

    def post(path: str, body: Any) -> Callable[[], dict[str, Any]]:
        return lambda: http_event("http_api_v2", "POST", path, json.dumps(body))

    return [
        Environment("intent", intent_handler,
                    [("POST", "/v1/intent"), ("POST", "/v1/report"), ("GET", "/capabilities"),
                     ("GET", "/healthz"), ("GET", "/debug/resource")],
                    [{"text": "I want my money back"}, {"text": "where is my order", "tool_ms": 1},
                     {"texts": ["hello", "refund please"]}],
                    [(post("/v1/intent", {"text": "I want my money back"}),
                      _ok(lambda b: b.get("intent") == "refund_request")),
                     (get("/healthz"), _ok(lambda b: b.get("status") == "ok"))]),
        Environment("lookup", lookup_handler,
                    [("POST", "/v1/lookup"), ("GET", "/v1/orders/A-1001"), ("GET", "/capabilities"),
                     ("GET", "/healthz")],
                    [{"order_id": "A-1001"}, {"order_id": "B-7"}],
                    [(post("/v1/lookup", {"order_id": "A-1001"}),
                      _ok(lambda b: b.get("order_id") == "A-1001")),
                     (get("/healthz"), _ok(lambda b: b.get("status") == "ok"))]),
        Environment("user", user_handler,
                    [("GET", "/healthz"), ("POST", "/v1/echo"), ("POST", "/v1/items"),
                     ("GET", "/v1/items/abc"), ("GET", BOOM_PATH)],
                    [{"message": "hi"}, {"name": "pen", "count": 2}],
                    [(post("/v1/echo", {"message": "hi"}), _ok(lambda b: b.get("echo") == "hi")),
                     (get("/v1/items/abc"), _ok(lambda b: b.get("item_id") == "abc"))],
                    failing_path=BOOM_PATH),
    ]


# -- strategies -----------------------------------------------------------------------------------

#: Strings that broke or could break an edge (the issue's probe and the usual suspects).
NASTY = (
    "\ud800", "a\udfffb", "example.com:abc", "a:b:c", "[::1]:8080", "example.com:", "abc",
    "99999", "-1", "\u0663", "", " ", "%", "%zz", "%2F..%2F", "../../etc/passwd", "//evil.example",
    "\x00", "\r\nX-Injected: 1", "caf\u00e9", "\U0001f600", "null", "true", "{}", "[]",
    "javascript", "HTTP", "https", "GET", "POST", "G E T", "application/json",
    "application/problem+json; charset=utf-8", "text/plain", "evil.example/path", "user@host",
    "$default", "ANY /{proxy+}",
)
_TEXT = st.text(st.characters(exclude_categories=()), max_size=24)  # surrogates included
STRINGS = st.one_of(st.sampled_from(NASTY), _TEXT,
                    st.integers(1, 200_000).map(lambda n: "x" * n),
                    st.integers(1, 1_500).map(lambda n: "[" * n + "]" * n))
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(10**30), 10**30),
                    st.floats(allow_nan=False, allow_infinity=False), STRINGS)
JSON_VALUES = st.recursive(
    _LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6)


def nested(depth: int, leaf: Any = None) -> Any:
    """``depth`` nested lists around ``leaf``, built without recursion."""
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


#: Any JSON value, sometimes nested deep (a JSON decoder hands such values to the handler).
ANY_JSON = st.one_of(JSON_VALUES, st.integers(1, 1_500).map(nested))


def _deep_body(depth: int, tool_ms: bool) -> str:
    head = '{"text":"hi","tool_ms":1,"x":' if tool_ms else '{"text":"hi","x":'
    return head + "[" * depth + "]" * depth + "}"


def bodies(valid: list[Any]) -> st.SearchStrategy[str | None]:
    """Request bodies: valid ones, valid ones with extra or changed fields, any JSON, deep
    JSON, invalid JSON, surrogates, oversized."""
    valid_dicts = st.sampled_from(valid)
    changed = st.builds(lambda b, k, v: {**b, k: v} if isinstance(b, dict) else b,
                        valid_dicts, st.sampled_from(["text", "tool_ms", "order_id", "message",
                                                      "name", "count", "texts", "x"]), ANY_JSON)
    return st.one_of(
        st.none(),
        valid_dicts.map(json.dumps),
        changed.map(lambda b: json.dumps(b, ensure_ascii=False)),
        ANY_JSON.map(lambda v: json.dumps(v, ensure_ascii=False)),
        st.builds(_deep_body, st.integers(1, 1_500), st.booleans()),
        STRINGS,
        st.sampled_from(['{"text": "hi"', "text=where+is+my+order", '{"text": "\\ud800"}',
                         '{"text": "hi \ud800"}', '{"order_id": 1e999}', '{"text": NaN}',
                         '{"count": ' + "9" * 5000 + "}"]),
    )


_HEADER_NAMES = st.sampled_from(["host", "Host", "HOST", "x-forwarded-port", "X-Forwarded-Port",
                                 "x-forwarded-proto", "content-type", "Content-Type", "cookie",
                                 "accept", "x-\ud800", "x-custom", ""])
HEADERS = st.dictionaries(_HEADER_NAMES, STRINGS, max_size=3)


@dataclass
class Case:
    """One fuzzed invocation: the source the event was built for and the event itself.

    ``kind_fields_touched``: a mutation touched what classifies the event (then its format is
    the one of the kind the event now has, not of ``source``).
    """

    source: str
    event: Any
    kind_fields_touched: bool = False


_KIND_FIELDS = frozenset({"requestContext", "version", "httpMethod", "elb", "domainName",
                          "warmstart", "rawPath", "routeKey", "headers", "multiValueHeaders",
                          "body"})


def _containers(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every dict and list in ``value`` with its path (iterative: events may be deep)."""
    stack = [(path, value)]
    seen = 0
    while stack and seen < 200:
        where, item = stack.pop()
        if isinstance(item, (dict, list)):
            seen += 1
            yield where, item
            children = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((where + (k,), v) for k, v in children if isinstance(v, (dict, list)))


@st.composite
def mutated(draw: st.DrawFn, event: Any) -> tuple[Any, bool]:
    """``event`` with 0-3 structural mutations; whether one touched a classifying field."""
    touched = False
    for _ in range(draw(st.integers(0, 3))):
        places = list(_containers(event))
        if not places:
            break
        where, container = draw(st.sampled_from(places))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        key: Any
        if isinstance(container, dict):
            keys = list(container)
            if op == "add" or not keys:
                key = draw(st.one_of(st.sampled_from(sorted(_KIND_FIELDS)), _TEXT))
                container[key] = draw(ANY_JSON)
            else:
                key = draw(st.sampled_from(keys))
                if op == "delete":
                    del container[key]
                else:
                    container[key] = draw(ANY_JSON)
        else:
            if container and op != "add":
                index = draw(st.integers(0, len(container) - 1))
                if op == "delete":
                    del container[index]
                else:
                    container[index] = draw(ANY_JSON)
                key = index
            else:
                container.append(draw(ANY_JSON))
                key = len(container) - 1
        touched = touched or bool(set(where) & _KIND_FIELDS) or key in _KIND_FIELDS
    return event, touched


# never a valid hold above a few ms: the fuzzer must not sleep for the 1 s a ping may hold
_PING_VALUES = st.one_of(st.integers(0, 3), st.integers(max_value=-1), st.integers(min_value=10**7),
                         st.none(), st.booleans(), st.floats(allow_nan=False), STRINGS,
                         st.lists(st.integers(), max_size=2), st.integers(1, 1_500).map(nested))
_PING_MARKERS = st.fixed_dictionaries(
    {"ping": st.one_of(st.just(True), st.just(True), ANY_JSON)},
    optional={"concurrency": st.one_of(st.integers(1, 5), _PING_VALUES), "hold_ms": _PING_VALUES,
              "extra": ANY_JSON})
_UNKNOWN_EVENTS = st.one_of(
    ANY_JSON,
    st.just({"Records": [{"cf": {"request": {"uri": "/"}}}]}),
    st.builds(lambda v: {"requestContext": v}, ANY_JSON),
    st.builds(lambda v: {"source": "aws.events", "detail": v}, ANY_JSON))
_METHODS = st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "get", "PATCH"])
_QUERIES = st.one_of(STRINGS, st.just("a=1&b=%zz"))
#: Per environment (by name): its request bodies and its ``(method, path)`` routes.
_PER_ENV: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {}


def _env_strategies(env: Environment) -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any],
                                               st.SearchStrategy[Any]]:
    """``(bodies, bodies or none, routes)`` of ``env``, built once (building a strategy costs
    more than drawing from it)."""
    known = _PER_ENV.get(env.name)
    if known is None:
        body = bodies(env.bodies)
        known = _PER_ENV[env.name] = (body, st.one_of(st.none(), st.none(), body),
                                      st.sampled_from(env.routes))
    return known


@st.composite
def cases(draw: st.DrawFn, env: Environment) -> Case:
    """One fuzzed invocation of ``env`` (see the module docstring)."""
    source = draw(st.sampled_from(SOURCES))
    if source == "ping":
        marker = draw(_PING_MARKERS)
        event = {"warmstart": marker if draw(st.integers(0, 2)) else draw(ANY_JSON)}
        if draw(st.booleans()):
            event[draw(_TEXT)] = draw(ANY_JSON)
        return Case(source, event)
    if source == "unknown":
        return Case(source, draw(_UNKNOWN_EVENTS))
    body_strategy, maybe_body, routes = _env_strategies(env)
    method, path = draw(routes)
    choice = draw(st.integers(0, 3))
    method = method if choice < 2 else draw(_METHODS) if choice == 2 else draw(STRINGS)
    choice = draw(st.integers(0, 5))
    if choice == 2:
        path += "/"
    elif choice == 3:
        path = draw(st.sampled_from(["/", "/prod" + path, "/nope", "//" + path, path + "?q=1",
                                     path.upper(), "/v1/items/%2e%2e"]))
    elif choice == 4:
        path = "/" + draw(STRINGS)
    body = draw(body_strategy) if method.upper() in ("POST", "PUT", "PATCH") else draw(maybe_body)
    try:
        event = http_event(source, method, path, body, headers=draw(HEADERS),
                           base64_body=draw(st.booleans()) and body is not None)
    except UnicodeEncodeError:  # pragma: no cover - surrogatepass encodes any str
        event = http_event(source, method, path, None)
    if draw(st.booleans()):
        query = draw(_QUERIES)
        if event.get("version") == "2.0":
            event["rawQueryString"] = query
        else:
            key = ("multiValueQueryStringParameters" if source == "alb_multi"
                   else "queryStringParameters")
            event[key] = {query[:20]: [query] if source == "alb_multi" else query}
    event, touched = draw(mutated(event))
    return Case(source, event, touched)


# -- the property ---------------------------------------------------------------------------------


class LogProbe:
    """Counts log records that cannot be written as UTF-8 (what Lambda's stdout needs): wraps
    the handlers of the agents' loggers, which keep formatting as they do; the lines
    themselves go nowhere (100,000 examples would flood the terminal).
    """

    def __init__(self) -> None:
        self.unwritable = 0
        self.lines = 0


@contextmanager
def probing_logs(names: list[str]) -> Iterator[LogProbe]:
    """Route the named loggers (and ``warmstart``) to a :class:`LogProbe` for the block."""
    probe = LogProbe()

    class Sink(logging.Handler):
        def __init__(self, formatter: logging.Formatter | None) -> None:
            super().__init__(logging.DEBUG)
            if formatter is not None:
                self.setFormatter(formatter)

        def emit(self, record: logging.LogRecord) -> None:
            try:
                self.format(record).encode("utf-8")
            except Exception:  # noqa: BLE001 - the finding: this record could not be written
                probe.unwritable += 1
            probe.lines += 1

    saved: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    for name in [*names, "warmstart", "mangum"]:
        logger = logging.getLogger(name)
        formatter = next((h.formatter for h in logger.handlers if h.formatter is not None), None)
        saved.append((logger, list(logger.handlers), logger.propagate))
        logger.handlers = [Sink(formatter)]
        logger.propagate = False
    try:
        yield probe
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate


def _headers_of(response: Mapping[str, Any]) -> dict[str, str]:
    headers = response.get("headers")
    if isinstance(headers, dict):
        return {str(k).lower(): v for k, v in headers.items()}
    multi = response.get("multiValueHeaders") or {}
    return {str(k).lower(): v[-1] for k, v in multi.items() if isinstance(v, list) and v}


def _format_problems(kind: Any, event: Any, response: Mapping[str, Any]) -> list[str]:
    from functions.runtime.events import EventKind

    problems = []
    status = response.get("statusCode")
    if type(status) is not int or not 100 <= status <= 599:
        return [f"format: statusCode {status!r}"]
    if type(response.get("body")) is not str or type(response.get("isBase64Encoded")) is not bool:
        problems.append("format: body or isBase64Encoded")
    headers, multi = response.get("headers"), response.get("multiValueHeaders")
    if headers is not None and not (isinstance(headers, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
        problems.append("format: headers are not strings")
    if multi is not None and not (isinstance(multi, dict) and all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in multi.values())):
        problems.append("format: multiValueHeaders are not lists of strings")
    if kind is EventKind.ALB:  # statusDescription is optional (Mangum sends none); if sent, right
        if not str(response.get("statusDescription", status)).startswith(str(status)):
            problems.append("format: ALB statusDescription does not match statusCode")
        uses_multi = isinstance(event, dict) and "multiValueHeaders" in event
        if uses_multi and (multi is None or headers is not None):
            problems.append("format: ALB multi-value event answered without multiValueHeaders only")
        if not uses_multi and headers is None:
            problems.append("format: ALB event answered without headers")
    elif kind is EventKind.REST_API_V1:
        if headers is None or multi is None:
            problems.append("format: REST answer without headers and multiValueHeaders")
    elif headers is None:
        problems.append(f"format: {kind} answer without headers")
    headers_lower = _headers_of(response)
    if kind.is_http and "x-warmstart-path" not in headers_lower:
        problems.append("format: no X-Warmstart-Path")
    location = headers_lower.get("location")
    if isinstance(location, str) and "://" in location:
        problems.append("redirect: an absolute Location (built from the request's Host)")
    return problems


def check(env: Environment, case: Case, call: Callable[[Any], Any]) -> list[str]:
    """The property (module docstring) for one case; the problems found (empty: it holds).

    Parameters
    ----------
    env : Environment
    case : Case
    call : Callable[[Any], Any]
        ``call(event) -> response`` (the environment's handler with a fresh context).
    """
    from functions.runtime.events import EventKind, classify

    event = case.event
    try:
        response = call(event)
    except Exception as exc:  # noqa: BLE001 - the finding
        return [f"escape: {type(exc).__name__}"]
    if not isinstance(response, dict):
        return [f"format: answer is {type(response).__name__}"]
    try:
        size = len(json.dumps(response, allow_nan=False))
    except (TypeError, ValueError):
        return ["format: answer is not JSON"]
    problems = ["format: answer over 6 MB"] if size > _MAX_RESPONSE_BYTES else []
    kind = classify(event)
    if not case.kind_fields_touched and case.source not in ("ping", "unknown"):
        expected = {"alb_multi": "alb"}.get(case.source, case.source)
        if kind.value != expected:
            problems.append(f"classify: {case.source} event taken for {kind.value}")
    if kind is EventKind.PING:
        pong = response.get("warmstart")
        if not (isinstance(pong, dict) and pong.get("pong") is True) and response.get("statusCode") != 400:
            problems.append("ping: neither a pong nor a 400")
        return problems
    if not kind.is_http:
        kind = EventKind.UNKNOWN
    problems += _format_problems(kind, event, response)
    status = response.get("statusCode")
    if kind is EventKind.UNKNOWN and status != 400:
        problems.append(f"status: unknown event answered {status}")
    if type(status) is int and status >= 500:
        deliberate = status == 500 and env.failing_path is not None and _path_of(event) == env.failing_path
        if not deliberate:
            problems.append(f"status: {status} for {case.source}")
    body = response.get("body")
    if isinstance(body, str) and not response.get("isBase64Encoded"):
        problems += [f"detail: {leak!r} in the body" for leak in leaks(body, _text_of(event))]
    return problems


def leaks(body: str, carried: str = "") -> list[str]:
    """Internal detail in an answer's body (traceback, exception class name, file path, the
    failing route's secret) that the request itself (``carried``) did not contain."""
    return sorted(leak for leak in set(_DETAIL.findall(body[:100_000])) if leak not in carried)


def _path_of(event: Any) -> Any:
    if not isinstance(event, dict):
        return None
    if event.get("version") == "2.0":
        context = event.get("requestContext")
        http = context.get("http") if isinstance(context, dict) else None
        return http.get("path") if isinstance(http, dict) else None
    return event.get("path")


def _text_of(event: Any) -> str:
    """The event as text, for "did the request carry this" (deep events: their repr fails too)."""
    try:
        return json.dumps(event, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return ""


def check_next_valid(env: Environment) -> list[str]:
    """The environment still answers a valid request correctly: ``env.good[0]`` (the agent's
    main route: the model for the intent agent) every 4th example, the others in turn
    between."""
    count = env.next_good
    env.next_good += 1
    index = 0 if count % 4 == 0 or len(env.good) == 1 else 1 + count % (len(env.good) - 1)
    make, ok = env.good[index]
    try:
        response = env.handler(make(), _context())
        body = json.loads(response["body"])
    except Exception as exc:  # noqa: BLE001 - the finding
        return [f"next valid request: {type(exc).__name__}"]
    if not ok(int(response["statusCode"]), body):
        return [f"next valid request: {response['statusCode']} {str(response.get('body'))[:120]}"]
    return []


def run_case(env: Environment, case: Case) -> list[str]:
    """:func:`check` on a copy of the case's event, then :func:`check_next_valid`."""
    event = copy.deepcopy(case.event) if _shallow_enough(case.event) else case.event
    problems = check(env, Case(case.source, event, case.kind_fields_touched),
                     lambda e: env.handler(e, _context()))
    return problems + check_next_valid(env)


def _shallow_enough(value: Any) -> bool:
    """``copy.deepcopy`` recurses: only for values far from Python's recursion limit."""
    depth, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        depth = max(depth, level)
        if depth > 200:
            return False
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return True


def describe(case: Case, limit: int = 400) -> str:
    """A short, printable description of a case (for reports)."""
    text = _text_of(case.event) or f"<{type(case.event).__name__} nested beyond json.dumps>"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{case.source}: {text[:limit]}" + ("..." if len(text) > limit else "")
