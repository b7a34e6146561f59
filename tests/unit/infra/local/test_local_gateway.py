"""The local gateway's routing: every agent at its path prefix (most specific route first, a prefix
only at a ``/`` boundary, ``$default`` last), the full raw path and the matched route in the event;
no process is started (an in-memory invoker records the invocations)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from infra.local.emulator import InvokeResult
from infra.local.gateway import Gateway, select_route
from infra.local.spec import GatewayRoute

#: The routes the warmstart stack synthesizes for cdk.json's agents (intent at /, lookup at /lookup).
STACK_ROUTES = (
    GatewayRoute("intent-fn", "live", "$default"),
    GatewayRoute("lookup-fn", "live", "ANY /lookup"),
    GatewayRoute("lookup-fn", "live", "ANY /lookup/{proxy+}"),
)


@dataclass
class Recorder:
    """An :class:`~infra.local.gateway.Invoker` that answers 200 and keeps every invocation."""

    calls: list[tuple[str, str | None, dict]] = field(default_factory=list)

    def invoke(self, function_name, payload=None, *, qualifier=None, invocation_type="RequestResponse",
               client_context=None):
        self.calls.append((function_name, qualifier, json.loads(payload)))
        return InvokeResult(status_code=200, payload=json.dumps({"statusCode": 200, "body": "ok"}).encode(),
                            request_id="r", executed_version="1")


def _route(method: str, path: str, routes=STACK_ROUTES) -> tuple[str, str, dict] | None:
    found = select_route(routes, method, path)
    return None if found is None else (found[0].function_name, found[0].route_key, found[1])


@pytest.mark.parametrize(("path", "expected"), [
    ("/", ("intent-fn", "$default", {})),
    ("/v1/intent", ("intent-fn", "$default", {})),
    ("/lookup", ("lookup-fn", "ANY /lookup", {})),
    ("/lookup/", ("lookup-fn", "ANY /lookup", {})),
    ("/lookup/v1/lookup", ("lookup-fn", "ANY /lookup/{proxy+}", {"proxy": "v1/lookup"})),
    # a prefix matches only at a / boundary
    ("/lookupx", ("intent-fn", "$default", {})),
    ("/lookupx/v1", ("intent-fn", "$default", {})),
    ("/v1/lookup", ("intent-fn", "$default", {})),
])
def test_each_path_goes_to_the_agent_with_the_longest_matching_prefix(path, expected):
    assert _route("POST", path) == expected


def test_longer_prefixes_and_exact_routes_win_and_methods_count():
    routes = (*STACK_ROUTES,
              GatewayRoute("deep-fn", "live", "ANY /lookup/deep"),
              GatewayRoute("deep-fn", "live", "ANY /lookup/deep/{proxy+}"),
              GatewayRoute("item-fn", "live", "GET /lookup/items/{id}"))
    assert _route("GET", "/lookup/deep", routes)[:2] == ("deep-fn", "ANY /lookup/deep")
    assert _route("GET", "/lookup/deep/x/y", routes) == ("deep-fn", "ANY /lookup/deep/{proxy+}", {"proxy": "x/y"})
    assert _route("GET", "/lookup/deeper", routes)[0] == "lookup-fn"  # not at a / boundary
    # a full match with a variable beats a greedy route; its own method beats ANY
    assert _route("GET", "/lookup/items/7", routes) == ("item-fn", "GET /lookup/items/{id}", {"id": "7"})
    assert _route("DELETE", "/lookup/items/7", routes)[:2] == ("lookup-fn", "ANY /lookup/{proxy+}")
    # without $default an unmatched path matches nothing
    assert _route("GET", "/other", STACK_ROUTES[1:]) is None


def test_the_gateway_invokes_the_routed_alias_with_the_full_raw_path():
    invoker = Recorder()
    gw = Gateway(invoker, routes=STACK_ROUTES, now_s=lambda: 1_700_000_000.0)
    response = gw.handle("POST", "/lookup/v1/lookup?q=a", [("Content-Type", "application/json")],
                         b'{"q": "a"}', "127.0.0.1", "localhost")
    assert response.status == 200
    [(function, qualifier, event)] = invoker.calls
    assert (function, qualifier) == ("lookup-fn", "live")
    # the full raw path: the agent's runtime strips its WARMSTART_BASE_PATH itself
    assert event["rawPath"] == "/lookup/v1/lookup" and event["rawQueryString"] == "q=a"
    assert event["routeKey"] == event["requestContext"]["routeKey"] == "ANY /lookup/{proxy+}"
    assert event["pathParameters"] == {"proxy": "v1/lookup"}
    assert event["requestContext"]["timeEpoch"] == 1_700_000_000_000
    gw.handle("GET", "/lookupx", [], b"", "127.0.0.1", "localhost")
    function, _, event = invoker.calls[-1]
    assert function == "intent-fn" and event["routeKey"] == "$default" and "pathParameters" not in event


def test_no_matching_route_is_404_and_the_one_function_form_still_works():
    invoker = Recorder()
    response = Gateway(invoker, routes=STACK_ROUTES[1:]).handle("GET", "/v1/intent", [], b"", "127.0.0.1", "h")
    assert (response.status, response.body) == (404, b'{"message":"Not Found"}')
    assert ("apigw-requestid" in {k for k, _ in response.headers}) and invoker.calls == []
    Gateway(invoker, "fn", "live").handle("GET", "/any/path", [], b"", "127.0.0.1", "h")
    assert invoker.calls[0][:2] == ("fn", "live") and invoker.calls[0][2]["routeKey"] == "$default"
    with pytest.raises(ValueError, match="function_name or routes"):
        Gateway(invoker)


def test_route_path_prefix():
    assert [r.path_prefix for r in STACK_ROUTES] == ["/", "/lookup", "/lookup"]
    assert GatewayRoute("f", "live", "GET /a/b/{id}").path_prefix == "/a/b"
