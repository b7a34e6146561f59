"""Invoke through the real boto3 client: cold/warm, scaling, reclaim, throttling, failures."""

from __future__ import annotations

import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from infra.local.clock import ScaledClock
from tests.e2e.conftest import assert_gone, spec


def _payload(resp: dict) -> dict:
    return json.loads(resp["Payload"].read())


def _report(resp: dict) -> dict:
    return json.loads(resp["ResponseMetadata"]["HTTPHeaders"]["x-warmstart-report"])


def _tail(resp: dict) -> str:
    return base64.b64decode(resp["LogResult"]).decode()


def test_cold_then_warm_invocation(make_emulator, lambda_api):
    # GIVEN an echo function with no environment yet
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo", memory_mb=256, timeout_s=4,
                          environment={"GREETING": "hi"}))
    client = lambda_api(emu)
    assert emu.environments("echo") == []
    # WHEN it is invoked twice through the alias
    first = client.invoke(FunctionName="echo", Qualifier="live", Payload=b'{"n": 1}', LogType="Tail")
    second = client.invoke(FunctionName="echo", Qualifier="live", Payload=b'{"n": 2}', LogType="Tail")
    # THEN the first is a cold start with Init Duration, the second reuses the environment
    one, two = _payload(first), _payload(second)
    assert first["StatusCode"] == 200 and "FunctionError" not in first
    assert first["ExecutedVersion"] == "1"
    assert one["event"] == {"n": 1} and one["init_type"] == "on-demand"
    assert "Init Duration:" in _tail(first) and "Init Duration" not in _tail(second)
    assert _report(first)["init_duration_ms"] > 0 and _report(second)["init_duration_ms"] is None
    assert two["env_id"] == one["env_id"] and two["invocation"] == 2
    assert len(emu.environments("echo")) == 1
    # the context and environment variables are Lambda's
    ctx = one["context"]
    # awslambdaric gives the memory size as the variable's text, as on Lambda
    assert ctx["function_name"] == "echo" and int(ctx["memory_limit_in_mb"]) == 256
    assert ctx["invoked_function_arn"] == "arn:aws:lambda:us-east-1:123456789012:function:echo:live"
    assert ctx["aws_request_id"] == first["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
    assert 0 < ctx["remaining_ms"] <= 4000
    assert ctx["log_group_name"] == "/aws/lambda/echo"
    env = one["env"]
    assert env["AWS_LAMBDA_FUNCTION_VERSION"] == "1" and env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert env["AWS_LAMBDA_INITIALIZATION_TYPE"] == "on-demand" and env["_HANDLER"] == "basic.echo"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1" and env["TZ"] == ":UTC"
    assert env["GREETING"] == "hi" and env["LAMBDA_TASK_ROOT"].endswith("handlers")
    report_line = next(ln for ln in _tail(first).splitlines() if ln.startswith("REPORT"))
    for field in ("Duration:", "Billed Duration:", "Memory Size: 256 MB", "Max Memory Used:"):
        assert field in report_line


def test_concurrent_requests_get_their_own_environments(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    n = 4
    barrier = threading.Barrier(n)

    def call(_):
        barrier.wait()
        return _payload(client.invoke(FunctionName="echo", Qualifier="live",
                                      Payload=b'{"sleep_s": 0.5}'))

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(call, range(n)))
    assert len({r["env_id"] for r in results}) == n
    assert len({r["pid"] for r in results}) == n
    assert len(emu.environments("echo")) == n


def test_idle_environments_are_reclaimed_on_the_scaled_clock(make_emulator, lambda_api):
    # idle timeout 60 clock-seconds at time scale 100 = 0.6 real seconds
    emu = make_emulator(clock=ScaledClock(100.0), idle_timeout_s=60.0)
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    first = _payload(client.invoke(FunctionName="echo", Qualifier="live"))
    pid = first["pid"]
    deadline = time.monotonic() + 5
    while emu.environments("echo") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emu.environments("echo") == []
    assert_gone([pid])
    again = client.invoke(FunctionName="echo", Qualifier="live", LogType="Tail")
    assert _payload(again)["env_id"] != first["env_id"] and "Init Duration" in _tail(again)


def test_function_concurrency_limit_throttles_with_429(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    assert client.put_function_concurrency(FunctionName="echo", ReservedConcurrentExecutions=1)[
        "ReservedConcurrentExecutions"] == 1
    assert client.get_function_concurrency(FunctionName="echo")["ReservedConcurrentExecutions"] == 1
    started = threading.Event()

    def slow():
        started.set()
        return client.invoke(FunctionName="echo", Qualifier="live", Payload=b'{"sleep_s": 1.0}')

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(slow)
        started.wait()
        deadline = time.monotonic() + 5
        while not any(e["state"] in ("init", "busy") for e in emu.environments("echo")):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(ClientError) as err:
            client.invoke(FunctionName="echo", Qualifier="live")
        assert future.result()["StatusCode"] == 200
    assert err.value.response["Error"]["Code"] == "TooManyRequestsException"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert err.value.response["Reason"] == "ReservedFunctionConcurrentInvocationLimitExceeded"
    client.delete_function_concurrency(FunctionName="echo")
    assert "ReservedConcurrentExecutions" not in client.get_function_concurrency(FunctionName="echo")


def test_timeout_ends_the_environment_and_the_next_call_gets_a_fresh_one(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo", timeout_s=0.5))
    client = lambda_api(emu)
    warm = _payload(client.invoke(FunctionName="echo", Qualifier="live"))
    resp = client.invoke(FunctionName="echo", Qualifier="live", Payload=b'{"sleep_s": 5}')
    body = _payload(resp)
    assert resp["FunctionError"] == "Unhandled"
    assert "Task timed out after 0.50 seconds" in body["errorMessage"]
    assert_gone([warm["pid"]])
    after = _payload(client.invoke(FunctionName="echo", Qualifier="live"))
    assert after["env_id"] != warm["env_id"] and after["invocation"] == 1


def test_crash_gives_exit_error_and_a_fresh_environment_next_time(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("crashy", "basic.crash"))
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    resp = client.invoke(FunctionName="crashy", Qualifier="live")
    body = _payload(resp)
    assert resp["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Runtime.ExitError"
    assert "Runtime exited with error: exit status 3" in body["errorMessage"]
    assert emu.environments("crashy") == []
    again = client.invoke(FunctionName="crashy", Qualifier="live", LogType="Tail")
    assert "Init Duration" in _tail(again)  # a fresh environment, init again


def test_an_environment_dying_mid_invocation_fails_only_that_request(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo"))
    emu.add_function(spec("crashy", "basic.crash"))
    client = lambda_api(emu)
    with ThreadPoolExecutor(4) as pool:
        ok = [pool.submit(client.invoke, FunctionName="echo", Qualifier="live",
                          Payload=b'{"sleep_s": 0.4}') for _ in range(3)]
        bad = pool.submit(client.invoke, FunctionName="crashy", Qualifier="live",
                          Payload=b'{"sleep_s": 0.1}')
        results = [f.result() for f in ok]
    assert bad.result()["FunctionError"] == "Unhandled"
    assert all("FunctionError" not in r and _payload(r)["event"] == {"sleep_s": 0.4} for r in results)


def test_a_handler_that_raises_returns_lambda_error_shape(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("failing", "basic.fail"))
    client = lambda_api(emu)
    resp = client.invoke(FunctionName="failing", Qualifier="live", Payload=b'{"order_id": 7}')
    body = _payload(resp)
    assert resp["StatusCode"] == 200 and resp["FunctionError"] == "Unhandled"
    assert body["errorType"] == "ValueError" and body["errorMessage"] == "bad order id 7"
    assert any("basic.py" in line for line in body["stackTrace"])
    assert body["requestId"] == resp["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
    # the environment survives a handled error and serves the next invocation
    assert len(emu.environments("failing")) == 1
    marshal = _payload(client.invoke(FunctionName="failing", Qualifier="live", Payload=b"{}"))
    assert marshal["errorType"] == "ValueError"


def test_unserializable_result_is_a_marshal_error(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("odd", "basic.unserializable"))
    resp = lambda_api(emu).invoke(FunctionName="odd")
    assert resp["FunctionError"] == "Unhandled"
    assert _payload(resp)["errorType"] == "Runtime.MarshalError"


def test_init_error_is_reported_and_the_environment_discarded(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("broken", "broken_init.handler"))
    emu.add_function(spec("missing", "nope_module.handler"))
    client = lambda_api(emu)
    resp = client.invoke(FunctionName="broken", Qualifier="live")
    body = _payload(resp)
    assert resp["FunctionError"] == "Unhandled"
    assert body["errorType"] == "RuntimeError"
    assert "cannot reach the config store" in body["errorMessage"]
    assert emu.environments("broken") == []
    missing = _payload(client.invoke(FunctionName="missing"))
    assert missing["errorType"] == "Runtime.ImportModuleError"


def test_unknown_function_or_qualifier_is_resource_not_found(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    for kwargs in ({"FunctionName": "nope"}, {"FunctionName": "echo", "Qualifier": "staging"},
                   {"FunctionName": "echo", "Qualifier": "7"}):
        with pytest.raises(ClientError) as err:
            client.invoke(**kwargs)
        assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        assert "Function not found: arn:aws:lambda:us-east-1:123456789012:function:" in str(err.value)


def test_payload_that_is_not_json_is_invalid_request_content(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    with pytest.raises(ClientError) as err:
        client.invoke(FunctionName="echo", Payload=b"{not json")
    assert err.value.response["Error"]["Code"] == "InvalidRequestContentException"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert emu.environments("echo") == []  # nothing was started for a bad request
    with pytest.raises(ClientError) as err:
        client.invoke(FunctionName="echo", ClientContext="%%%not-base64")
    assert err.value.response["Error"]["Code"] == "InvalidRequestContentException"


def test_event_and_dry_run_invocations(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    assert client.invoke(FunctionName="echo", InvocationType="DryRun")["StatusCode"] == 204
    assert emu.environments("echo") == []
    assert client.invoke(FunctionName="echo", InvocationType="Event", Payload=b"{}")["StatusCode"] == 202
    deadline = time.monotonic() + 5
    while not any(e["invocations"] for e in emu.environments("echo")):
        assert time.monotonic() < deadline, "the Event invocation never ran"
        time.sleep(0.05)


def test_raw_http_bad_requests_get_aws_error_shapes(make_emulator, lambda_api):
    import httpx

    from infra.local.errors import ServiceException

    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo"))
    client = lambda_api(emu)
    url = client.meta.endpoint_url
    cases = [
        ("PUT", "/2019-09-30/functions/echo/provisioned-concurrency?Qualifier=live", b"{nope",
         400, "InvalidRequestContentException"),
        ("PUT", "/2019-09-30/functions/echo/provisioned-concurrency?Qualifier=live",
         b'{"ProvisionedConcurrentExecutions": 0}', 400, "InvalidParameterValueException"),
        ("PUT", "/2019-09-30/functions/echo/provisioned-concurrency", b'{"ProvisionedConcurrentExecutions": 1}',
         400, "InvalidParameterValueException"),
        ("PUT", "/2017-10-31/functions/echo/concurrency", b'{"ReservedConcurrentExecutions": -1}',
         400, "InvalidParameterValueException"),
        ("GET", "/2015-03-31/functions/echo/nothing-here", b"", 404, "UnknownOperationException"),
    ]
    for method, path, body, status, error_type in cases:
        resp = httpx.request(method, url + path, content=body)
        assert resp.status_code == status, (path, resp.text)
        assert resp.headers["x-amzn-ErrorType"] == error_type
        assert resp.json()["Message"]
    # read-only operations answer like AWS
    assert client.get_alias(FunctionName="echo", Name="live")["FunctionVersion"] == "1"
    assert client.get_function(FunctionName="echo")["Configuration"]["Handler"] == "basic.echo"
    assert [f["FunctionName"] for f in client.list_functions()["Functions"]] == ["echo"]
    emu.stop()
    with pytest.raises(ServiceException, match="stopped"):
        emu.invoke("echo")


def test_exceeding_the_memory_size_ends_the_environment(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("hog", "basic.hog", memory_mb=128))
    client = lambda_api(emu)
    small = client.invoke(FunctionName="hog", Payload=b'{"mb": 8}')
    assert "FunctionError" not in small and _payload(small) == {"touched_mb": 8}
    big = client.invoke(FunctionName="hog", Payload=b'{"mb": 200}')
    body = _payload(big)
    assert big["FunctionError"] == "Unhandled" and body["errorType"] == "Runtime.OutOfMemory"
    assert json.loads(big["ResponseMetadata"]["HTTPHeaders"]["x-warmstart-report"])["max_memory_used_mb"] > 128
    assert emu.environments("hog") == []
