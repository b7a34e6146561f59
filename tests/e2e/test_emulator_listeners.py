"""Invocation listeners, init failures from a runtime that cannot start, and the gateway's
arrival time under a scaled clock: real processes, real HTTP, the real boto3 client."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from infra.local.emulator import InvocationLog
from infra.local.errors import TooManyRequestsException
from infra.local.spec import AliasSpec, FunctionSpec, GatewayRoute, LocalApp
from infra.local.stack import LocalStack, LocalStackConfig
from tests.e2e.conftest import HANDLERS, assert_gone, spec


def test_listener_gets_every_invocation_with_its_report(make_emulator, lambda_api):
    # GIVEN an HTTP function with a listener registered
    emu = make_emulator()
    emu.add_function(spec("http-fn", "http_app.handler"))
    records: list[InvocationLog] = []
    emu.add_listener(records.append)
    client = lambda_api(emu)
    event = {"rawPath": "/x", "requestContext": {"requestId": "gw-1"},
             "headers": {}}
    # WHEN it is invoked twice through the REST API and once in-process
    client.invoke(FunctionName="http-fn", Qualifier="live", Payload=json.dumps(event).encode())
    client.invoke(FunctionName="http-fn", Qualifier="live",
                  Payload=json.dumps({"warmstart": {"ping": True}}).encode())
    emu.invoke("http-fn", b'{"rawPath": "/plain"}', qualifier="live")
    # THEN each invocation produced one record with the REPORT numbers and the environment
    assert len(records) == 3
    first, ping, plain = records
    assert first.function_name == "http-fn" and first.qualifier == "live"
    assert first.version == "1" and first.invocation_type == "RequestResponse"
    assert first.cold_start and first.init_type == "on-demand"
    assert first.report is not None and first.report.init_duration_ms is not None
    assert first.report.billed_duration_ms >= first.report.duration_ms
    assert first.gateway_request_id == "gw-1" and not first.warm_ping
    assert not first.spillover and first.function_error is None and not first.throttled
    assert ping.warm_ping and ping.gateway_request_id is None
    assert not ping.cold_start and ping.environment_id == first.environment_id
    assert ping.report is not None and ping.report.init_duration_ms is None
    assert plain.path is None  # no X-Warmstart-Path header in this app's answers
    # AND after remove_listener nothing more is recorded
    emu.remove_listener(records.append)
    emu.invoke("http-fn", b"{}", qualifier="live")
    assert len(records) == 3


def test_listener_sees_the_path_header_throttles_and_survives_a_failing_listener(make_emulator):
    emu = make_emulator()
    emu.add_function(spec("http-fn", "http_app.handler"))
    emu.add_function(spec("echo", "basic.echo", reserved_concurrency=1))
    records: list[InvocationLog] = []

    def broken(_record: InvocationLog) -> None:
        raise RuntimeError("listener bug")

    emu.add_listener(broken)
    emu.add_listener(records.append)
    # a response with X-Warmstart-Path (http_app echoes cookies/headers; craft one directly)
    out = emu.invoke("http-fn", b'{"rawPath": "/x"}', qualifier="live")
    assert out.function_error is None  # the failing listener did not break the invocation
    assert records[-1].path is None
    record = InvocationLog("f", "live", "1", "r", "RequestResponse", 0.0, "{}",
                              payload=json.dumps({"statusCode": 200, "headers": {
                                  "X-Warmstart-Path": "degraded"}}).encode())
    assert record.path == "degraded"
    # WHEN a second invocation arrives while the only allowed environment is busy
    slow = threading.Thread(target=emu.invoke, args=("echo", b'{"sleep_s": 1.0}'),
                            kwargs={"qualifier": "live"})
    slow.start()
    deadline = time.monotonic() + 10
    while not any(e["state"] == "busy" for e in emu.environments("echo")):
        assert time.monotonic() < deadline, "the slow invocation never started"
        time.sleep(0.02)
    with pytest.raises(TooManyRequestsException):
        emu.invoke("echo", b"{}", qualifier="live")
    slow.join()
    # THEN the throttle is recorded too, without a report or environment
    throttled = [r for r in records if r.throttled]
    assert len(throttled) == 1 and throttled[0].function_name == "echo"
    assert throttled[0].report is None and throttled[0].environment_id is None
    assert sum(1 for r in records if r.function_name == "echo" and not r.throttled) == 1


def test_a_runtime_that_cannot_start_is_an_init_failure_not_a_broken_environment(
        make_emulator, lambda_api, tmp_path: Path):
    # GIVEN a function whose code folder no longer exists (removed after deployment)
    code = tmp_path / "code"
    shutil.copytree(HANDLERS, code)
    emu = make_emulator()
    emu.add_function(FunctionSpec(name="gone", handler="basic.echo", code_dir=code,
                                  aliases=(AliasSpec("live", "1"),)))
    client = lambda_api(emu)
    shutil.rmtree(code)
    # WHEN it is invoked (twice: nothing broken may be left for the second request)
    for _ in range(2):
        out = client.invoke(FunctionName="gone", Qualifier="live", Payload=b"{}")
        # THEN the request gets a Runtime error, as Lambda reports a failed init phase
        assert out["StatusCode"] == 200 and out["FunctionError"] == "Unhandled"
        body = json.loads(out["Payload"].read())
        assert body["errorType"] == "Runtime.InvalidEntrypoint"
        assert "could not start the runtime" in body["errorMessage"]
        # AND no environment is left behind (none idle without a process)
        assert emu.environments("gone") == []
    # WHEN provisioned concurrency is requested for it
    client.put_provisioned_concurrency_config(FunctionName="gone", Qualifier="live",
                                              ProvisionedConcurrentExecutions=1)
    cfg = emu.wait_provisioned_ready("gone", "live", timeout_s=30)
    # THEN the allocation FAILED with Lambda's init-failure status reason
    assert cfg["Status"] == "FAILED"
    assert cfg["StatusReason"].startswith("FUNCTION_ERROR_INIT_FAILURE")
    api = client.get_provisioned_concurrency_config(FunctionName="gone", Qualifier="live")
    assert api["Status"] == "FAILED" and "could not start" in api["StatusReason"]
    assert emu.environments("gone") == []


def test_stack_gateway_stamps_real_arrival_time_under_a_scaled_clock(tmp_path: Path):
    # GIVEN a stack whose clock runs 60x faster than real time
    app = LocalApp((spec("http-fn", "http_app.handler"),), GatewayRoute("http-fn", "live"))
    with open(tmp_path / "stack.log", "w") as log, LocalStack(
            app, LocalStackConfig(moto=False, time_scale=60.0), log_stream=log) as stack:
        time.sleep(1.0)
        assert stack.clock.time() - time.time() > 30  # the scaled clock is ahead of real time
        before_ms = int(time.time() * 1000)
        resp = httpx.post(f"{stack.endpoints()['gateway']}/echo", json={"a": 1})
        after_ms = int(time.time() * 1000)
        pids = stack.emulator.process_ids()
    # THEN requestContext.timeEpoch is the real wall-clock arrival time (API Gateway's)
    ctx = resp.json()["event"]["requestContext"]
    assert before_ms <= ctx["timeEpoch"] <= after_ms
    assert_gone(pids)
