"""The edge is total: each input issue 13's probe found turns into a clean answer in the
source's format (a 4xx for the client's faults, a generic 500 for ours), never an exception, a
leak or an unwritable log line; and the environment keeps serving.

Each defect is replayed with its exact input against the real handlers: the intent agent
(``functions.agent.handler``) and the fuzzer's minimal user agent (`bench.fuzz_events`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from bench.fuzz_events import LogProbe, leaks, probing_logs, user_agent
from functions.runtime.agent import Agent, Route
from functions.runtime.agent_handler import AgentHandler
from functions.runtime.events import MAX_RESPONSE_BYTES, json_too_deep
from tests.conftest import LambdaContext, adapt_event
from tests.unit.agent.conftest import LogCollector, body_of, headers_of

ERROR_KEYS = {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}
#: The exact body of the probe: about 2 KB, 1,000 nested arrays.
DEEP = '{"text":"hi","tool_ms":1,"x":' + "[" * 1000 + "]" * 1000 + "}"
DEEP_NO_TOOL = '{"text":"hi","x":' + "[" * 1000 + "]" * 1000 + "}"
SOURCES = ("http_api_v2.json", "rest_api_v1.json", "alb.json", "function_url.json")


@pytest.fixture(scope="module")
def intent() -> AgentHandler:
    """The reference intent agent's handler, preload finished (real model)."""
    from functions.agent.handler import handler

    assert handler.preload.wait_all(180.0), "the intent agent's preload did not finish"
    handler.preload.result("model")
    return handler


@pytest.fixture(scope="module")
def user() -> AgentHandler:
    """A minimal user agent (FastAPI, a payload hook, a route that raises), loaded."""
    return user_agent().lambda_handler(env={
        "AWS_LAMBDA_INITIALIZATION_TYPE": "provisioned-concurrency",
        "POWERTOOLS_SERVICE_NAME": "edge-user", "AWS_REGION": "us-east-1"})


@pytest.fixture
def logs(intent: AgentHandler, user: AgentHandler) -> Iterator[LogProbe]:
    """Every record the agents and the toolkit log, checked to be writable as UTF-8."""
    with probing_logs([intent.config.service_name, user.config.service_name]) as probe:
        yield probe
    assert probe.unwritable == 0, "a log record could not be written"


@pytest.fixture
def failures(intent: AgentHandler, user: AgentHandler, logs: LogProbe) -> Iterator[LogCollector]:
    """The failure tags the agents log during the test (beside the probe of `logs`)."""
    collector = LogCollector()
    loggers = [logging.getLogger(h.config.service_name) for h in (intent, user)]
    for logger in loggers:
        logger.addHandler(collector)
    yield collector
    for logger in loggers:
        logger.removeHandler(collector)


def call(handler: AgentHandler, event: Any) -> dict[str, Any]:
    response = handler(event, LambdaContext())
    assert isinstance(response, dict)
    json.dumps(response, allow_nan=False)  # what the runtime sends: plain JSON
    return response


def assert_clean_4xx(response: dict[str, Any], status: int = 400, fragment: str = "") -> None:
    assert response["statusCode"] == status, response
    body = body_of(response)
    assert set(body) == ERROR_KEYS and body["error"] == "bad_request", body
    assert fragment in body["message"]
    assert headers_of(response)["x-warmstart-path"] == "local"
    assert leaks(response["body"]) == [], response["body"]


def assert_still_serving(intent: AgentHandler) -> None:
    good = call(intent, adapt_event("http_api_v2.json", "POST", "/v1/intent",
                                    {"text": "I want my money back"}))
    assert good["statusCode"] == 200 and body_of(good)["intent"] == "refund_request", good


# -- deep JSON ----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [DEEP, DEEP_NO_TOOL], ids=["tool_ms", "no_tool_ms"])
@pytest.mark.parametrize("source", SOURCES)
def test_deeply_nested_json_is_a_clean_400(intent: AgentHandler, logs: LogProbe,
                                           failures: LogCollector, body: str, source: str) -> None:
    # WHEN the probe's body (1,000 nested arrays) arrives, with and without tool_ms
    response = call(intent, adapt_event(source, "POST", "/v1/intent", body))
    # THEN it is refused before any parse, as a 400 naming the limit, tagged bad_request
    assert_clean_4xx(response, 400, "deeper than 64 levels")
    assert failures.failures() == ["bad_request"]
    assert_still_serving(intent)


@pytest.mark.parametrize("path", ["/v1/echo", "/v1/items"])
def test_deep_json_is_a_400_for_a_user_agent_with_or_without_a_payload_hook(
        user: AgentHandler, logs: LogProbe, path: str) -> None:
    # /v1/echo has a validate hook; /v1/items goes to the app as is (a pydantic body)
    deep = '{"message": "hi", "name": "pen", "x": ' + "[" * 1000 + "]" * 1000 + "}"
    for content_type in ("application/json", "text/plain"):
        response = call(user, adapt_event("http_api_v2.json", "POST", path, deep,
                                          headers={"content-type": content_type}))
        assert_clean_4xx(response, 400, "deeper than 64 levels")


def test_brackets_inside_json_strings_do_not_count_as_nesting(intent: AgentHandler) -> None:
    text = "[" * 300 + " where is my order " + "}" * 300
    response = call(intent, adapt_event("http_api_v2.json", "POST", "/v1/intent", {"text": text}))
    assert response["statusCode"] == 200, response
    assert not json_too_deep(json.dumps({"text": text}))
    assert json_too_deep("[" * 65 + "]" * 65) and not json_too_deep("[" * 64 + "]" * 64)


# -- Host and X-Forwarded-Port -----------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{"host": "example.com:abc"}, {"host": "a:b:c"},
                                     {"x-forwarded-port": "abc"}, {"Host": "[::1]:8080"},
                                     {"x-forwarded-proto": "javascript"}, {"host": ""},
                                     {"x-forwarded-proto": "HTTP"}],
                         ids=["host-port-abc", "host-a:b:c", "x-forwarded-port", "ip-literal",
                              "x-forwarded-proto", "host-empty", "x-forwarded-proto-upper"])
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("route", [("GET", "/healthz", None), ("POST", "/v1/intent", {"text": "hi"})],
                         ids=["healthz", "intent"])
def test_a_malformed_host_or_forwarded_header_is_a_400_on_every_route(
        intent: AgentHandler, logs: LogProbe, headers: dict[str, str], source: str,
        route: tuple[str, str, Any]) -> None:
    method, path, body = route
    response = call(intent, adapt_event(source, method, path, body, headers=headers))
    assert_clean_4xx(response, 400, "X-Forwarded" if "x-forwarded" in next(iter(headers)) else "Host")
    assert_still_serving(intent)


def test_two_host_headers_are_a_400(intent: AgentHandler) -> None:
    event = adapt_event("rest_api_v1.json", "GET", "/healthz")
    event["multiValueHeaders"]["Host"] = ["a.example", "b.example"]
    assert_clean_4xx(call(intent, event), 400, "more than one Host")


# -- ALB without path, lone surrogates ---------------------------------------------------------------


def test_an_alb_event_without_path_is_a_400(intent: AgentHandler, logs: LogProbe) -> None:
    for multi in (False, True):
        event = adapt_event("alb.json", "GET", "/healthz")
        if multi:
            event["multiValueHeaders"] = {k: [v] for k, v in event.pop("headers").items()}
        del event["path"]
        response = call(intent, event)
        assert_clean_4xx(response, 400, "no 'path'")
        assert ("multiValueHeaders" in response) is multi and response["statusDescription"] == "400 Bad Request"
    assert_still_serving(intent)


def _surrogate_in(where: str, source: str) -> dict[str, Any]:
    if where == "body":
        return adapt_event(source, "POST", "/v1/intent", '{"text": "hi \ud800"}')
    if where == "header":
        return adapt_event(source, "GET", "/healthz", headers={"x-note": "\ud800"})
    if where == "path":
        return adapt_event(source, "GET", "/heal\ud800thz")
    event = adapt_event(source, "GET", "/healthz")
    if event.get("version") == "2.0":
        event["rawQueryString"] = "q=\ud800"
    else:
        event["queryStringParameters"] = {"q": "\ud800"}
    return event


@pytest.mark.parametrize("where", ["body", "header", "query", "path"])
@pytest.mark.parametrize("source", SOURCES)
def test_a_lone_surrogate_is_a_400_and_every_log_record_is_written(
        intent: AgentHandler, logs: LogProbe, failures: LogCollector, where: str, source: str) -> None:
    # WHEN a field Mangum encodes carries a lone UTF-16 surrogate
    response = call(intent, _surrogate_in(where, source))
    # THEN a 400 names the field; no exception text in the body; the log lines are written
    assert_clean_4xx(response, 400, "not valid Unicode text")
    assert failures.failures() == ["bad_request"]
    assert logs.lines > 0
    assert_still_serving(intent)


# -- redirects ------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("host", [None, "evil.example", "EVIL.example:8443"])
def test_the_trailing_slash_redirect_is_relative_whatever_the_host(
        intent: AgentHandler, source: str, host: str | None) -> None:
    event = adapt_event(source, "POST", "/v1/intent/", {"text": "hi"},
                        headers={"host": host} if host else None)
    response = call(intent, event)
    assert response["statusCode"] == 307, response
    assert headers_of(response)["location"] == "/v1/intent"  # nothing taken from Host


# -- our own faults -------------------------------------------------------------------------------


def test_an_apps_unhandled_exception_is_a_json_500_tagged_app_error(
        user: AgentHandler, failures: LogCollector, logs: LogProbe) -> None:
    response = call(user, adapt_event("http_api_v2.json", "GET", "/v1/boom"))
    assert response["statusCode"] == 500
    assert leaks(response["body"]) == [], response["body"]
    assert headers_of(response)["x-warmstart-path"] == "local"
    assert headers_of(response)["content-type"] == "application/json"  # never text/plain
    assert body_of(response)["error"] == "app_error"
    assert failures.failures() == ["app_error"]  # model_error is for the model only


def _unserialisable_degraded(payload: dict[str, Any]) -> dict[str, Any]:
    return {"message": payload["message"], "tags": {"a", "b"}}  # a set: not JSON


def test_a_failure_inside_the_toolkit_is_a_generic_500_without_its_exception(
        caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN an agent whose degraded answer cannot be serialised, at L2 (every answer degraded)
    agent = user_agent()
    agent.routes[1].degraded = _unserialisable_degraded
    handler = agent.lambda_handler(env={
        "AWS_LAMBDA_INITIALIZATION_TYPE": "provisioned-concurrency", "WARMSTART_DEGRADATION_LEVEL": "L2",
        "POWERTOOLS_SERVICE_NAME": "edge-l2", "AWS_REGION": "us-east-1"})
    collector = LogCollector()
    logging.getLogger("edge-l2").addHandler(collector)
    try:
        with caplog.at_level(logging.ERROR, logger="warmstart"):
            for source in SOURCES:
                response = call(handler, adapt_event(source, "POST", "/v1/echo", {"message": "hi"}))
                # THEN a 500 in the source's format, the contract's body, no exception detail
                assert response["statusCode"] == 500, response
                body = body_of(response)
                assert set(body) == ERROR_KEYS and body["error"] == "internal_error"
                assert "TypeError" not in response["body"] and "set" not in response["body"]
                assert headers_of(response)["x-warmstart-path"] == "local"
                if source == "alb.json":
                    assert response["statusDescription"] == "500 Internal Server Error"
        # AND the cause is logged with its traceback, and the failure with its tag
        assert any("TypeError" in r.getMessage() for r in caplog.records)
        assert collector.failures() == ["model_error"] * len(SOURCES)
        # AND the environment keeps serving
        assert call(handler, adapt_event("http_api_v2.json", "GET", "/healthz"))["statusCode"] == 200
    finally:
        logging.getLogger("edge-l2").removeHandler(collector)


def _big_app() -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/big")
    async def big() -> PlainTextResponse:
        return PlainTextResponse("x" * (MAX_RESPONSE_BYTES + 1))

    return app


def test_an_answer_over_lambdas_response_limit_is_a_500_not_a_function_error() -> None:
    handler = Agent("bigagent", app=_big_app, routes=[Route("GET", "/v1/big", tier="P1")]).lambda_handler(
        env={"AWS_LAMBDA_INITIALIZATION_TYPE": "provisioned-concurrency",
             "POWERTOOLS_SERVICE_NAME": "edge-big", "AWS_REGION": "us-east-1"})
    response = call(handler, adapt_event("http_api_v2.json", "GET", "/v1/big"))
    assert response["statusCode"] == 500 and body_of(response)["error"] == "internal_error"
    assert len(json.dumps(response)) < 10_000


@pytest.mark.parametrize("event", [None, [], "text", 42, {"requestContext": None},
                                   {"Records": [{"cf": {}}]}, {"warmstart": {"ping": True,
                                                                             "hold_ms": [[[]]]}}])
def test_any_json_value_is_answered_as_json(intent: AgentHandler, event: Any) -> None:
    response = call(intent, event)
    assert response["statusCode"] == 400 and body_of(response)["error"] == "bad_request"


# -- JSON only Python's lenient parser takes (the 73,800-example fuzz run after 155fb6b) --------


@pytest.mark.parametrize(("body", "fragment"), [
    ('{"name": "pen", "price": NaN}', "uses NaN"),
    ('{"name": "pen", "price": -Infinity}', "uses -Infinity, which JSON does not allow"),
    ('{"name": "\\ud800"}', "lone UTF-16 surrogate escape"),
    ('{"order_id": 1e999}', "too large for a double"),
])
def test_non_standard_json_is_a_400_before_the_app_echoes_it(
        user: AgentHandler, logs: LogProbe, body: str, fragment: str) -> None:
    # FastAPI's validation error echoes the input and cannot render NaN or a lone surrogate:
    # the fuzzer found each as a 500 of the user agent's pydantic route /v1/items
    response = call(user, adapt_event("http_api_v2.json", "POST", "/v1/items", body,
                                      headers={"content-type": "application/json"}))
    assert_clean_4xx(response, 400, fragment)


def test_a_json_body_that_is_not_utf8_is_a_400(intent: AgentHandler, logs: LogProbe) -> None:
    # the fuzzer's exact body: base64 of {"text": "hi <an encoded lone surrogate>"}, which
    # json.loads(bytes) decodes with surrogatepass; the tokenizer then failed (a 500)
    event = adapt_event("rest_api_v1.json", "POST", "/v1/intent", "x")
    event["body"] = "eyJ0ZXh0IjogImhpIO2ggCJ9"
    event["isBase64Encoded"] = True
    assert_clean_4xx(call(intent, event), 400, "not valid UTF-8")
    assert_still_serving(intent)


def test_paired_surrogates_and_the_words_nan_and_infinity_in_strings_are_fine(
        intent: AgentHandler) -> None:
    for text in ("NaN or Infinity? \\ud83d\\ude00 I want my money back", "refund \\\\ud800"):
        body = '{"text": "' + text + '"}'
        response = call(intent, adapt_event("http_api_v2.json", "POST", "/v1/intent", body))
        assert response["statusCode"] == 200, response


def test_a_redirect_to_a_host_starlette_percent_encodes_and_gives_a_port_is_relative(
        user: AgentHandler) -> None:
    # the fuzzer's case: Host "{}" became Location https://%7B%7D:80/v1/boom (absolute)
    event = adapt_event("http_api_v2.json", "DELETE", "/v1/boom/", None, headers={"host": "{}"})
    response = call(user, event)
    assert response["statusCode"] == 307, response
    assert headers_of(response)["location"] == "/v1/boom", response
