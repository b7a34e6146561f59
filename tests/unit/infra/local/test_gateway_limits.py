"""What the template's HTTP API stage declares, as the local gateway reads and enforces it: the
throttling token bucket, the integration timeouts, bad values refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.local.emulator import InvokeResult
from infra.local.gateway import MAX_LAMBDA_RESPONSE_BYTES, Gateway, TokenBucket
from infra.local.spec import (
    ACCOUNT_BURST,
    ACCOUNT_RATE_PER_S,
    GatewayRoute,
    RouteThrottle,
    SpecError,
    StageSettings,
)
from infra.local.template import TemplateError, read_template


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_token_bucket_starts_full_refills_at_the_rate_and_caps_at_the_burst():
    clock = Clock()
    bucket = TokenBucket(RouteThrottle(rate_per_s=50.0, burst=100), clock)
    assert sum(bucket.take() for _ in range(150)) == 100  # a burst of 100 at one instant
    clock.now_s += 0.1  # 5 tokens
    assert sum(bucket.take() for _ in range(10)) == 5
    clock.now_s += 1000.0
    assert sum(bucket.take() for _ in range(500)) == 100
    # steady state: requests twice as fast as the rate get the rate (binary fractions: exact)
    steady = TokenBucket(RouteThrottle(rate_per_s=64.0, burst=100), clock)
    assert sum(steady.take() for _ in range(100)) == 100
    passed = 0
    for _ in range(1024):  # 8 s at 128 requests/s
        clock.now_s += 1 / 128
        passed += steady.take()
    assert passed == 8 * 64


@pytest.mark.parametrize(("throttle", "passed"), [
    (RouteThrottle(rate_per_s=0.0, burst=3), 3),  # no refill: the burst, then nothing
    (RouteThrottle(rate_per_s=100.0, burst=0), 0),  # burst 0 refuses every request
])
def test_token_bucket_edges(throttle, passed):
    clock = Clock()
    bucket = TokenBucket(throttle, clock)
    got = 0
    for _ in range(100):
        clock.now_s += 0.5
        got += bucket.take()
    assert got == passed


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rate_per_s": -1.0, "burst": 1}, "rate must be >= 0"),
    ({"rate_per_s": float("nan"), "burst": 1}, "rate must be >= 0"),
    ({"rate_per_s": 1.0, "burst": -1}, "burst must be >= 0"),
])
def test_bad_throttles_are_refused(kwargs, message):
    with pytest.raises(SpecError, match=message):
        RouteThrottle(**kwargs)


def test_bad_integration_timeouts_are_refused():
    with pytest.raises(SpecError, match=r"route '\$default': integration timeout must be in \(0, 30\]"):
        StageSettings(integration_timeouts_s={"$default": 31.0})


def _template(tmp_path: Path, stage_props: dict, timeout_ms: object = None) -> Path:
    integration = {"IntegrationType": "AWS_PROXY", "IntegrationUri": {"Ref": "Live"}}
    if timeout_ms is not None:
        integration["TimeoutInMillis"] = timeout_ms
    resources = {
        "Fn": {"Type": "AWS::Lambda::Function", "Properties": {
            "FunctionName": "fn", "Handler": "app.handler", "Runtime": "python3.12",
            "Code": {"ZipFile": "def handler(e, c):\n    return {}\n"}}},
        "Live": {"Type": "AWS::Lambda::Alias", "Properties": {
            "FunctionName": {"Ref": "Fn"}, "Name": "live", "FunctionVersion": "$LATEST"}},
        "Int": {"Type": "AWS::ApiGatewayV2::Integration", "Properties": integration},
        "Route": {"Type": "AWS::ApiGatewayV2::Route", "Properties": {
            "RouteKey": "ANY /orders", "Target": {"Fn::Join": ["", ["integrations/", {"Ref": "Int"}]]}}},
        "Other": {"Type": "AWS::ApiGatewayV2::Stage", "Properties": {
            "StageName": "dev", "DefaultRouteSettings": {"ThrottlingRateLimit": 1}}},
        "Stage": {"Type": "AWS::ApiGatewayV2::Stage", "Properties": {"StageName": "$default", **stage_props}},
    }
    path = tmp_path / "app.template.json"
    path.write_text(json.dumps({"Parameters": {"Rate": {"Type": "Number", "Default": "7"}},
                                "Resources": resources}))
    return path


def test_the_default_stage_throttling_route_settings_and_timeouts_are_read(tmp_path):
    path = _template(tmp_path, {
        "DefaultRouteSettings": {"ThrottlingRateLimit": {"Ref": "Rate"}, "ThrottlingBurstLimit": 20},
        "RouteSettings": {"ANY /orders": {"ThrottlingBurstLimit": 5}, "GET /x": {"LoggingLevel": "INFO"}},
    }, timeout_ms=1500)
    stage = read_template(path, inline_code_dir=tmp_path / "code").stage
    # the $default stage, not the other one; a parameter resolved
    assert stage.default_throttle == RouteThrottle(7.0, 20)
    # a route setting with only a burst: the account-level rate for the missing value
    assert stage.throttle_for("ANY /orders") == RouteThrottle(ACCOUNT_RATE_PER_S, 5)
    assert stage.throttle_for("GET /x") == RouteThrottle(7.0, 20)  # no throttling keys: the default
    assert stage.timeout_for("ANY /orders") == 1.5 and stage.timeout_for("$default") == 30.0
    gateway = Gateway(object(), routes=(GatewayRoute("fn", "live", "ANY /orders"),), stage=stage)  # type: ignore[arg-type]
    assert gateway.limits(gateway.routes[0]) == "throttle 10000 req/s, burst 5; timeout 1.5 s"


def test_no_stage_means_no_throttling(tmp_path):
    path = _template(tmp_path, {})
    stage = read_template(path, inline_code_dir=tmp_path / "code").stage
    assert stage.default_throttle is None and stage.timeout_for("ANY /orders") == 30.0
    only_rate = read_template(_template(tmp_path, {"DefaultRouteSettings": {"ThrottlingRateLimit": 3}}),
                              inline_code_dir=tmp_path / "code").stage
    assert only_rate.default_throttle == RouteThrottle(3.0, ACCOUNT_BURST)


@pytest.mark.parametrize(("stage_props", "timeout_ms", "message"), [
    ({"DefaultRouteSettings": {"ThrottlingRateLimit": -5, "ThrottlingBurstLimit": 1}}, None,
     "stage Stage: throttling .* rate must be >= 0"),
    ({"DefaultRouteSettings": {"ThrottlingRateLimit": "fast", "ThrottlingBurstLimit": 1}}, None,
     "stage Stage: throttling"),
    ({}, 45000, r"integration timeout must be in \(0, 30\] s, got 45.0"),
    ({}, "soon", "integration Int: TimeoutInMillis"),
])
def test_bad_stage_values_are_refused_with_the_reason(tmp_path, stage_props, timeout_ms, message):
    with pytest.raises(TemplateError, match=message):
        read_template(_template(tmp_path, stage_props, timeout_ms), inline_code_dir=tmp_path / "code")


def test_the_synthesized_stack_declares_the_configured_throttle(synthesized_template):
    from infra.config import load_config

    http_api = load_config(Path(__file__).resolve().parents[4] / "cdk.json").http_api
    stage = read_template(synthesized_template).stage
    assert stage.default_throttle == RouteThrottle(float(http_api.throttle_rate_per_s),
                                                   int(http_api.throttle_burst))


class Answers:
    """An invoker that answers ``payload`` (no process): the gateway's own response-size check,
    for invokers that do not apply Lambda's limit themselves."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def invoke(self, function_name, payload=None, *, qualifier=None, invocation_type="RequestResponse",
               client_context=None):
        return InvokeResult(status_code=200, payload=self.payload, request_id="r", executed_version="1")


@pytest.mark.parametrize(("size", "status"), [(MAX_LAMBDA_RESPONSE_BYTES, 200), (MAX_LAMBDA_RESPONSE_BYTES + 1, 500)])
def test_a_function_result_over_6_mb_is_an_integration_failure(size, status):
    body = json.dumps({"statusCode": 200, "body": ""}).encode()
    payload = body[:-1] + b" " * (size - len(body)) + b"}"
    response = Gateway(Answers(payload), "fn").handle("GET", "/", [], b"", "127.0.0.1", "h")
    assert len(payload) == size and response.status == status
    if status == 500:
        assert response.body == b'{"message":"Internal Server Error"}'
        assert dict(response.headers)["x-warmstart-gateway-error"].startswith(
            "Response payload size exceeded maximum allowed payload size (6291556 bytes)")
