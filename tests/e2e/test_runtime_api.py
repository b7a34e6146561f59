"""The emulator's Lambda Runtime API and Extensions API, driven as a runtime and extensions drive it.

Plain HTTP against one environment's API (what any runtime client sends), the real runtime
clients against the emulator (AWS's ``awslambdaric`` and the stdlib bootstrap), an internal
extension that works after the response, one that hangs, and an external extension that gets
``SHUTDOWN``.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time

import pytest

from infra.local.emulator import InvocationLog
from infra.local.emulator.config import BOOTSTRAP
from infra.local.emulator.runtime_api import MAX_RESPONSE_BYTES, Invocation, RuntimeApiServer
from tests.e2e.conftest import HANDLERS, alive, assert_gone, spec

RUNTIMES = ("awslambdaric", "bootstrap")
POST_S = 1.0


def _http(address: str, method: str, path: str, body: bytes | dict | None = None,
          headers: dict | None = None, timeout_s: float = 10.0) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection(address, timeout=timeout_s)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    conn.request(method, path, body=data, headers=headers or {})
    response = conn.getresponse()
    out = response.status, dict(response.headers), response.read()
    conn.close()
    return out


@pytest.fixture
def api():
    server = RuntimeApiServer("fn", "1", "app.handler", "123456789012", label="test")
    server.start()
    yield server
    server.close()


def _background(target, *args):
    out: list = []
    thread = threading.Thread(target=lambda: out.append(target(*args)), daemon=True)
    thread.start()
    return thread, out


# ---- plain HTTP, as a runtime and an extension send it -----------------------------------------
def test_runtime_and_extension_lifecycle_over_plain_http(api):
    # GIVEN an extension registered during init, and the runtime and it waiting on next
    status, headers, body = _http(api.address, "POST", "/2020-01-01/extension/register",
                                  {"events": ["INVOKE"]}, {"Lambda-Extension-Name": "ext.py",
                                                          "Lambda-Extension-Accept-Feature": "accountId"})
    assert status == 200
    assert json.loads(body) == {"functionName": "fn", "functionVersion": "1",
                                "handler": "app.handler", "accountId": "123456789012"}
    ext_id = headers["Lambda-Extension-Identifier"]
    runtime, runtime_out = _background(_http, api.address, "GET", "/2018-06-01/runtime/invocation/next")
    assert api.wait_init(0.3, lambda: True) == "timeout"  # the extension has not called next
    ext, ext_out = _background(_http, api.address, "GET", "/2020-01-01/extension/event/next", None,
                               {"Lambda-Extension-Identifier": ext_id})
    assert api.wait_init(5, lambda: True) == "ready"
    # registration closes with the init phase
    status, _h, body = _http(api.address, "POST", "/2020-01-01/extension/register", {"events": []},
                             {"Lambda-Extension-Name": "late.py"})
    assert status == 403 and json.loads(body)["errorType"] == "Extension.RegistrationClosed"
    # WHEN an invocation comes
    api.start_invocation(Invocation("req-1", b'{"a": 1}', 1_900_000_000_000, "arn:fn:live",
                                    client_context='{"custom": {"k": 1}}', trace_id="Root=1-x"))
    runtime.join(5)
    ext.join(5)
    status, headers, body = runtime_out[0]
    # THEN the runtime gets the event with Lambda's headers, the extension the INVOKE event
    assert status == 200 and json.loads(body) == {"a": 1}
    assert headers["Lambda-Runtime-Aws-Request-Id"] == "req-1"
    assert headers["Lambda-Runtime-Deadline-Ms"] == "1900000000000"
    assert headers["Lambda-Runtime-Invoked-Function-Arn"] == "arn:fn:live"
    assert headers["Lambda-Runtime-Trace-Id"] == "Root=1-x"
    assert headers["Lambda-Runtime-Client-Context"] == '{"custom": {"k": 1}}'
    event = json.loads(ext_out[0][2])
    assert event == {"eventType": "INVOKE", "deadlineMs": 1_900_000_000_000, "requestId": "req-1",
                     "invokedFunctionArn": "arn:fn:live",
                     "tracing": {"type": "X-Amzn-Trace-Id", "value": "Root=1-x"}}
    # an unknown request id is refused, the right one accepted once
    status, _h, body = _http(api.address, "POST", "/2018-06-01/runtime/invocation/nope/response", b"{}")
    assert status == 400 and json.loads(body)["errorType"] == "InvalidRequestID"
    assert _http(api.address, "POST", "/2018-06-01/runtime/invocation/req-1/response", b'"ok"')[0] == 202
    status, _h, body = _http(api.address, "POST", "/2018-06-01/runtime/invocation/req-1/response", b'"again"')
    assert status == 403 and json.loads(body)["errorType"] == "InvalidStateTransition"
    assert api.wait_answer(time.perf_counter() + 1, lambda: True)
    # the invoke phase ends only when the runtime and the extension wait on next again
    runtime, _ = _background(_http, api.address, "GET", "/2018-06-01/runtime/invocation/next")
    time.sleep(0.1)
    assert not api.invoke_done() and api.late_extensions() == ["ext.py"]
    ext, _ = _background(_http, api.address, "GET", "/2020-01-01/extension/event/next", None,
                         {"Lambda-Extension-Identifier": ext_id})
    assert api.wait_invoke_done(time.perf_counter() + 5, lambda: True) is not None
    # an unknown extension id is refused; the refusals were recorded
    status, _h, body = _http(api.address, "GET", "/2020-01-01/extension/event/next", None,
                             {"Lambda-Extension-Identifier": "not-registered"})
    assert status == 403 and json.loads(body)["errorType"] == "Extension.UnknownExtensionIdentifier"
    assert api.refusals == ["Extension.RegistrationClosed", "InvalidRequestID",
                            "InvalidStateTransition", "Extension.UnknownExtensionIdentifier"]
    # WHEN the environment ends THEN the calls blocked on next get 500 (container error)
    api.close()
    runtime.join(5)
    ext.join(5)
    assert not runtime.is_alive() and not ext.is_alive()


def test_registration_refusals_and_errors(api):
    def register(name: str | None, events: object) -> tuple[int, str | None]:
        headers = {"Lambda-Extension-Name": name} if name else {}
        body = events if isinstance(events, bytes) else json.dumps({"events": events}).encode()
        status, _h, data = _http(api.address, "POST", "/2020-01-01/extension/register", body, headers)
        return status, json.loads(data).get("errorType")

    assert register("a.py", ["INVOKE"])[0] == 200
    assert register("a.py", ["INVOKE"]) == (403, "Extension.AlreadyRegistered")
    assert register("b.py", ["SHUTDOWN"]) == (403, "ShutdownEventNotSupportedForInternalExtension")
    assert register("c.py", ["RESTORE"]) == (403, "Extension.InvalidEventType")
    assert register(None, ["INVOKE"]) == (400, "InvalidRequest")
    assert register("d.py", b"{not json") == (400, "InvalidRequest")
    for i in range(9):
        assert register(f"n{i}.py", [])[0] == 200
    assert register("eleventh.py", []) == (403, "Extension.TooManyExtensions")
    # a runtime's init error ends the init phase with it
    status, _h, _b = _http(api.address, "POST", "/2018-06-01/runtime/init/error",
                           {"errorMessage": "boom", "errorType": "Runtime.ImportModuleError"},
                           {"Lambda-Runtime-Function-Error-Type": "Runtime.ImportModuleError"})
    assert status == 202
    assert api.wait_init(1, lambda: True) == "error"
    assert api.init_error is not None and api.init_error["errorMessage"] == "boom"


def test_a_response_over_lambdas_limit_fails_the_invocation(api):
    runtime, _ = _background(_http, api.address, "GET", "/2018-06-01/runtime/invocation/next")
    assert api.wait_init(5, lambda: True) == "ready"
    api.start_invocation(Invocation("big", b"{}", 0, "arn:fn"))
    runtime.join(5)
    status, _h, body = _http(api.address, "POST", "/2018-06-01/runtime/invocation/big/response",
                             b"x" * (MAX_RESPONSE_BYTES + 1))
    assert status == 413 and json.loads(body)["errorType"] == "RequestEntityTooLarge"
    inv = api.invocation
    assert inv is not None and inv.outcome == "error"
    assert json.loads(inv.body) == {
        "errorMessage": "Response payload size exceeded maximum allowed payload size (6291556 bytes).",
        "errorType": "Function.ResponseSizeTooLarge"}


def test_the_bootstrap_exits_when_its_runtime_api_answers_500(api, tmp_path):
    # GIVEN the stdlib runtime waiting on next
    (tmp_path / "app.py").write_text("def handler(event, context):\n    return event\n")
    proc = subprocess.Popen([sys.executable, str(BOOTSTRAP)], cwd=tmp_path,
                            env={"AWS_LAMBDA_RUNTIME_API": api.address, "_HANDLER": "app.handler",
                                 "LAMBDA_TASK_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"},
                            stderr=subprocess.PIPE)
    try:
        assert api.wait_init(10, lambda: proc.poll() is None) == "ready"
        # WHEN its environment ends (next answers 500, then the port closes)
        api.close()
        # THEN it exits at once, cleanly
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()


# ---- real runtime clients in the emulator -----------------------------------------------------
def _ext_spec(**kwargs):
    return spec("ext", "extension_app.handler", **kwargs)


def _invoke(emu, event: dict) -> tuple[dict, object, float]:
    t0 = time.perf_counter()
    result = emu.invoke("ext", json.dumps(event).encode(), qualifier="live")
    elapsed = time.perf_counter() - t0
    assert result.function_error is None, result.payload
    return json.loads(result.payload), result, elapsed


@pytest.mark.parametrize("runtime_client", RUNTIMES)
def test_internal_extension_works_after_the_response(make_emulator, runtime_client):
    emu = make_emulator(runtime_client=runtime_client)
    logs: list[InvocationLog] = []
    emu.add_listener(logs.append)
    emu.add_function(_ext_spec(timeout_s=5))
    # WHEN the extension works POST_S after the answer
    first, result, _elapsed = _invoke(emu, {"post_s": POST_S})
    answered_at = time.time()
    # THEN the answer comes before that work ends (checked below); the environment stays busy
    assert first["runtime_api"].startswith("127.0.0.1:") and first["register"]["status"] == 200
    assert first["register"]["body"] == {"functionName": "ext", "functionVersion": "1",
                                         "handler": "extension_app.handler",
                                         "accountId": "123456789012"}
    assert first["duplicate"]["body"]["errorType"] == "Extension.AlreadyRegistered"
    assert first["shutdown_internal"]["body"]["errorType"] == \
        "ShutdownEventNotSupportedForInternalExtension"
    assert result.report is not None and not result.report.final
    [env] = emu.environments("ext")
    assert env["state"] == "busy" and env["extensions"] == ["extension_app.py"]
    # a request meanwhile goes to another environment, as on Lambda
    other, _r, _e = _invoke(emu, {})
    assert other["pid"] != first["pid"]
    # the final REPORT counts the post-response phase
    deadline = time.monotonic() + 10
    while len(logs) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    log = next(x for x in logs if x.request_id == first["request_id"])
    assert log.report is not None and log.report.final and log.report.status == "success"
    assert log.report.post_runtime_extensions_duration_ms >= POST_S * 1000 * 0.9
    assert log.report.duration_ms >= log.report.post_runtime_extensions_duration_ms
    assert log.report.billed_duration_ms >= log.report.duration_ms + (log.report.init_duration_ms or 0)
    # after the phase both environments are idle again; the first did the work while thawed
    barrier = threading.Barrier(2)

    def call(_):
        barrier.wait()
        return _invoke(emu, {"sleep_s": 0.3})

    calls = [_background(call, i) for i in range(2)]
    for thread, _out in calls:
        thread.join(20)
    answers = {out[0][0]["pid"]: out[0] for _t, out in calls}
    assert set(answers) == {first["pid"], other["pid"]}
    again, result, _e = answers[first["pid"]]
    [event] = [e for e in again["events"] if e["requestId"] == first["request_id"]]
    assert event["eventType"] == "INVOKE" and event["invokedFunctionArn"].endswith(":ext:live")
    [done] = [w for w in again["post_work"] if w["request_id"] == first["request_id"]]
    assert done["ended"] - done["started"] >= POST_S * 0.9
    assert answered_at < done["ended"]  # the caller had its answer while the work went on


def test_runtime_with_an_internal_extension_gets_sigterm_at_shutdown(make_emulator, tmp_path):
    # GIVEN a runtime with an internal extension and a SIGTERM handler
    sigterm_log = tmp_path / "sigterm.jsonl"
    emu = make_emulator(idle_timeout_s=1e-6, reap_interval_s=3600.0)
    emu.add_function(_ext_spec(environment={"SIGTERM_LOG": str(sigterm_log)}))
    body, _r, _e = _invoke(emu, {})
    # WHEN its environment is reclaimed
    assert emu.reclaim_idle() == 1
    # THEN the runtime process had SIGTERM (its graceful-shutdown window) before the end
    assert [json.loads(x)["signal"] for x in sigterm_log.read_text().splitlines()] == [15]
    assert_gone([body["pid"]])


def test_an_extension_exit_error_resets_the_environment_after_the_invocation(make_emulator):
    emu = make_emulator()
    logs: list[InvocationLog] = []
    emu.add_listener(logs.append)
    emu.add_function(_ext_spec())
    # WHEN the extension reports exit/error during an invocation
    body, _r, _e = _invoke(emu, {"exit_error": True})
    # THEN the caller has its answer, and the environment is reset once the phase is over
    assert_gone([body["pid"]])
    assert [x.function_error for x in logs] == [None]
    after, result, _e = _invoke(emu, {})
    assert after["pid"] != body["pid"] and result.cold_start


def test_registration_after_init_is_refused(make_emulator):
    emu = make_emulator()
    emu.add_function(_ext_spec())
    body, _r, _e = _invoke(emu, {"register_late": True})
    assert body["late"]["status"] == 403
    assert body["late"]["body"]["errorType"] == "Extension.RegistrationClosed"


def test_an_extension_that_never_calls_next_runs_into_the_timeout(make_emulator):
    emu = make_emulator()
    logs: list[InvocationLog] = []
    emu.add_listener(logs.append)
    emu.add_function(_ext_spec(timeout_s=1.0))
    # WHEN the extension hangs after the answer
    body, result, _elapsed = _invoke(emu, {"hang": True})
    # THEN the caller still has its answer (before the timeout ended the phase)
    assert result.report is not None and not result.report.final
    deadline = time.monotonic() + 10
    while not logs and time.monotonic() < deadline:
        time.sleep(0.05)
    [log] = logs
    assert log.report is not None and log.report.status == "timeout"
    assert log.report.duration_ms == pytest.approx(1000.0)
    assert log.function_error is None  # the answer had gone out
    # the environment was reset: the next request is a cold start
    assert_gone([body["pid"]])
    after, result, _e = _invoke(emu, {})
    assert after["pid"] != body["pid"] and result.cold_start


def test_external_extension_gets_shutdown_on_reclaim(make_emulator, tmp_path):
    shutdown_log = tmp_path / "shutdown.jsonl"
    emu = make_emulator(idle_timeout_s=0.3)
    emu.add_function(spec("echo", "basic.echo", environment={"SHUTDOWN_LOG": str(shutdown_log)},
                          extensions=(HANDLERS / "shutdown_extension.py",)))
    result = emu.invoke("echo", b"{}", qualifier="live")
    assert result.function_error is None, result.payload
    [env] = emu.environments("echo")
    assert env["extensions"] == ["shutdown_extension.py"]
    pids = emu.process_ids()
    assert len(pids) == 2  # the runtime and its external extension
    # WHEN the idle environment is reclaimed (its processes end after the SHUTDOWN phase)
    assert_gone(pids, timeout_s=15)
    assert emu.environments("echo") == []
    # THEN its extension got SHUTDOWN (spindown, with a deadline) before the processes ended
    [event] = [json.loads(line) for line in shutdown_log.read_text().splitlines()]
    assert event["eventType"] == "SHUTDOWN" and event["shutdownReason"] == "spindown"
    assert event["deadlineMs"] > time.time() * 1000 - 20_000


def test_an_extension_that_fails_to_register_fails_the_init(make_emulator, tmp_path):
    broken = tmp_path / "broken_ext.sh"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    emu = make_emulator()
    emu.add_function(spec("echo", "basic.echo", extensions=(broken,)))
    result = emu.invoke("echo", b"{}", qualifier="live")
    assert result.function_error == "Unhandled"
    body = json.loads(result.payload)
    assert body["errorType"] == "Extension.Crash" and "broken_ext.sh" in body["errorMessage"]
    assert emu.environments("echo") == []


def test_runtime_api_address_is_per_environment(make_emulator):
    emu = make_emulator()
    emu.add_function(_ext_spec())
    barrier = threading.Barrier(2)

    def call(_):
        barrier.wait()
        return _invoke(emu, {"post_s": 0.2})[0]["runtime_api"]

    threads = [_background(call, i) for i in range(2)]
    for thread, _out in threads:
        thread.join(20)
    addresses = {out[0] for _t, out in threads}
    assert len(addresses) == 2


def test_an_interpreter_without_awslambdaric_is_refused_with_a_clear_message(tmp_path):
    from infra.local.emulator import Emulator, EmulatorConfig

    python = tmp_path / "python-without-ric"
    python.write_text("#!/bin/sh\nexit 1\n")  # an interpreter that cannot import awslambdaric
    python.chmod(0o755)
    with pytest.raises(ValueError, match="cannot import awslambdaric.*runtime_client='bootstrap'"):
        Emulator(EmulatorConfig(python=str(python)))
    with pytest.raises(ValueError, match="runtime_client must be"):
        EmulatorConfig(runtime_client="rapid")  # type: ignore[arg-type]


def test_awslambdaric_reports_handler_errors_through_the_runtime_api(make_emulator):
    emu = make_emulator(runtime_client="awslambdaric")
    emu.add_function(spec("fail", "basic.fail"))
    result = emu.invoke("fail", b'{"order_id": 7}', qualifier="live")
    body = json.loads(result.payload)
    assert result.function_error == "Unhandled"
    assert body["errorType"] == "ValueError" and body["errorMessage"] == "bad order id 7"
    assert any("basic.py" in frame for frame in body["stackTrace"])
    [env] = emu.environments("fail")
    assert alive(env["pid"])  # a handler error keeps the environment


@pytest.mark.parametrize("runtime_client", RUNTIMES)
def test_init_errors_reach_the_caller(make_emulator, runtime_client):
    emu = make_emulator(runtime_client=runtime_client)
    emu.add_function(spec("missing", "no_such_module.handler"))
    result = emu.invoke("missing", b"{}", qualifier="live")
    body = json.loads(result.payload)
    assert result.function_error == "Unhandled"
    assert body["errorType"] == "Runtime.ImportModuleError"
    assert "no_such_module" in body["errorMessage"]
    assert emu.environments("missing") == []



def test_an_extension_that_ignores_shutdown_is_killed_at_the_deadline(make_emulator, tmp_path, caplog):
    shutdown_log = tmp_path / "shutdown.jsonl"
    emu = make_emulator(idle_timeout_s=1e-6, reap_interval_s=3600.0)
    emu.add_function(spec("echo", "basic.echo",
                          environment={"SHUTDOWN_LOG": str(shutdown_log), "SHUTDOWN_HANG": "1"},
                          extensions=(HANDLERS / "shutdown_extension.py",)))
    assert emu.invoke("echo", b"{}", qualifier="live").function_error is None
    pids = emu.process_ids()
    # WHEN the environment ends (reclaim) and its extension never calls next after SHUTDOWN
    t0 = time.perf_counter()
    with caplog.at_level("WARNING", logger="warmstart.local.emulator"):
        assert emu.reclaim_idle() == 1  # idle_timeout_s is tiny
    elapsed_s = time.perf_counter() - t0
    # THEN it had SHUTDOWN, was SIGKILLed at the 2,000 ms deadline, and that was logged
    assert json.loads(shutdown_log.read_text())["eventType"] == "SHUTDOWN"
    assert 1.9 <= elapsed_s < 10.0
    assert any("did not finish SHUTDOWN within 2000 ms" in r.getMessage() for r in caplog.records)
    assert_gone(pids)


def test_snapstart_restore_takes_an_extension_registered_in_an_after_restore_hook(make_emulator):
    # GIVEN a SnapStart function whose internal extension registers at init and again after
    # each restore (a fork keeps only the forking thread)
    emu = make_emulator()
    emu.add_function(spec("snapx", "snap_extension.handler", snap_start=True))
    # WHEN restored environments serve
    first = emu.invoke("snapx", b"{}", qualifier="live")
    second = emu.invoke("snapx", b"{}", qualifier="live")
    # THEN the restored environment has its own Runtime API with the extension on it, and its
    # invoke phases end (the new thread calls next), so the environment is reused
    one, two = json.loads(first.payload), json.loads(second.payload)
    assert first.init_type == "snap-start" and first.cold_start and not second.cold_start
    assert one["registered"] == [200, 200] and two["pid"] == one["pid"]
    [env] = emu.environments("snapx")
    assert env["extensions"] == ["snap_extension.py"] and env["runtime_api"] == one["runtime_api"]
    assert first.report is not None and second.report is not None and second.report.final
