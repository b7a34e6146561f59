"""Streamed answers through the emulator: real environments running warmstart's runtime client.

Each function sets ``AWS_LAMBDA_EXEC_WRAPPER=/var/task/functions/runtime/warmstart-stream``
(as the deployed function does) over a code folder holding the ``functions`` package and the
test handlers; the handler ``streamer.handler`` returns a ``StreamedResponse`` driven by its
event. Synchronisation is by files the test creates, never by timing.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html (response streaming)
https://docs.aws.amazon.com/lambda/latest/api/API_InvokeWithResponseStream.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-modify.html (wrapper scripts)
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.runtime.streaming import encode_prelude, error_trailers, split_prelude
from infra.local.emulator import EmulatorConfig, InvocationLog
from infra.local.emulator.runtime_api import Invocation, RuntimeApiServer, capped_wait_s
from infra.local.errors import TooManyRequestsException
from infra.local.spec import AliasSpec, FunctionSpec
from tests.e2e.conftest import HANDLERS

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = "/var/task/functions/runtime/warmstart-stream"


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    """A function's code folder: the ``functions`` package (linked) and the test handlers."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "functions").symlink_to(ROOT / "functions")
    for name in ("streamer.py", "basic.py"):
        shutil.copy(HANDLERS / name, code / name)
    return code


def _spec(code: Path, name: str = "streamer", handler: str = "streamer.handler",
          **kwargs: Any) -> FunctionSpec:
    environment = dict(kwargs.pop("environment", {}))
    environment.setdefault("AWS_LAMBDA_EXEC_WRAPPER", WRAPPER)
    kwargs.setdefault("aliases", (AliasSpec("live", "1"),))
    return FunctionSpec(name=name, handler=handler, code_dir=code, environment=environment, **kwargs)


def _event(**kwargs: Any) -> bytes:
    return json.dumps(kwargs).encode()


def _wait_for(path: Path, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)
    return path.read_text()


def test_chunks_reach_the_caller_one_by_one_while_the_handler_still_produces(make_emulator, code_dir, tmp_path):
    # GIVEN a handler that makes its third chunk only once the test has seen the first two
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    gate = tmp_path / "gate"
    stream = emu.invoke_stream("streamer", _event(chunks=4, gate=str(gate), gate_at=2), qualifier="live")
    # WHEN the caller reads
    prelude = next(stream)
    seen = [next(stream), next(stream)]
    gate.write_text("go")  # only now can the handler produce chunk 2
    rest = list(stream)
    # THEN each chunk came separately, in order, and the first two before the third existed
    meta, body = split_prelude(prelude) or ({}, b"")
    assert body == b"" and meta["statusCode"] == 200 and meta["cookies"] == ["a=1"]
    assert meta["headers"]["x-streams"] == "True"  # the runtime marked itself before the handler's init
    assert seen == [b"chunk-0", b"chunk-1"]
    assert rest == [b"chunk-2", b"chunk-3"]  # not b"gate-timeout": nothing waited for the whole body
    assert stream.error is None and stream.streamed is True and stream.executed_version == "1"
    result = stream.result
    assert result is not None and result.function_error is None and result.streamed
    assert result.payload == prelude + b"chunk-0chunk-1chunk-2chunk-3"
    assert result.response_bytes == len(result.payload)
    assert stream.first_byte_ms is not None and stream.last_byte_ms is not None
    assert stream.first_byte_ms <= stream.last_byte_ms


def test_the_prelude_is_the_first_chunk_byte_for_byte(make_emulator, code_dir):
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    stream = emu.invoke_stream("streamer", _event(chunks=1, sse=True), qualifier="live")
    chunks = list(stream)
    request_id = stream.result.request_id
    assert chunks[0] == encode_prelude(200, {"content-type": "text/event-stream", "x-streams": "True",
                                             "x-request-id": request_id}, ["a=1"])
    assert chunks[1:] == [b'data: {"token":0}\n\n']


def test_an_iterator_that_raises_after_two_chunks_ends_the_stream_with_error_trailers(make_emulator, code_dir):
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    stream = emu.invoke_stream("streamer", _event(raise_after=2), qualifier="live")
    chunks = list(stream)
    assert chunks[1:] == [b"chunk-0", b"chunk-1"]
    assert stream.error == ("Runtime.StreamError", {"errorType": "Runtime.StreamError",
                                                    "errorMessage": "the model went away"})
    assert stream.result.function_error == "Unhandled"
    assert json.loads(stream.result.payload)["errorType"] == "Runtime.StreamError"
    # the environment is kept (an app error, not a runtime failure) and serves the next one
    env_id = stream.result.environment_id
    again = emu.invoke_stream("streamer", _event(chunks=1), qualifier="live")
    assert list(again)[1:] == [b"chunk-0"] and again.result.environment_id == env_id


def test_a_stream_over_the_size_limit_fails_and_the_runtime_closes_the_response(make_emulator, code_dir, tmp_path):
    # GIVEN a limit of 10,000 bytes and a handler that streams 1,000-byte chunks until closed
    emu = make_emulator(max_stream_bytes=10_000)
    emu.add_function(_spec(code_dir))
    closed, outcome = tmp_path / "closed", tmp_path / "outcome.json"
    stream = emu.invoke_stream("streamer", _event(endless=True, chunk_bytes=1000, sleep_s=0.002,
                                                  closed_flag=str(closed), outcome_file=str(outcome)),
                               qualifier="live")
    delivered = b"".join(stream)
    # THEN the caller got at most the limit and the size error
    assert len(delivered) <= 10_000
    code, details = stream.error
    assert code == "Function.ResponseSizeTooLarge" and "10000 bytes" in details["errorMessage"]
    # AND the runtime's next write failed: it closed the response, so the app stopped
    assert _wait_for(closed) == "closed"
    finished = json.loads(_wait_for(outcome))
    assert finished["error_type"] == "ClientDisconnected"
    # AND the environment serves the next invocation once the runtime asked for it
    again = emu.invoke_stream("streamer", _event(chunks=1), qualifier="live")
    assert list(again)[1:] == [b"chunk-0"] and again.error is None


def test_the_function_timeout_bounds_the_whole_stream(make_emulator, code_dir):
    emu = make_emulator()
    emu.add_function(_spec(code_dir, timeout_s=1.0))
    stream = emu.invoke_stream("streamer", _event(hang_after=2), qualifier="live")
    chunks = list(stream)
    assert chunks[1:] == [b"chunk-0", b"chunk-1"]
    code, details = stream.error
    assert code == "Sandbox.Timedout" and "Task timed out after 1.00 seconds" in details["errorMessage"]
    assert stream.result.function_error == "Unhandled"
    assert emu.environments("streamer") == []  # reset, as after a buffered timeout


def test_a_buffered_invoke_collects_the_stream(make_emulator, code_dir):
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    result = emu.invoke("streamer", _event(chunks=3), qualifier="live")
    assert result.function_error is None and result.streamed
    meta, body = split_prelude(result.payload)
    assert meta["statusCode"] == 200 and body == b"chunk-0chunk-1chunk-2"


def test_a_buffered_invoke_of_a_stream_over_6_mb_fails_as_a_large_buffered_answer(make_emulator, code_dir,
                                                                                 tmp_path):
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    closed = tmp_path / "closed"
    result = emu.invoke("streamer", _event(endless=True, chunk_bytes=1024 * 1024, closed_flag=str(closed)),
                        qualifier="live")
    assert result.function_error == "Unhandled"
    assert json.loads(result.payload) == {
        "errorMessage": "Response payload size exceeded maximum allowed payload size (6291556 bytes).",
        "errorType": "Function.ResponseSizeTooLarge"}
    assert _wait_for(closed) == "closed"  # cut at 6 MB: the producer was stopped
    # the same stream to a streaming caller is fine (under the 200 MB limit)
    stream = emu.invoke_stream("streamer", _event(chunks=7, chunk_bytes=1024 * 1024), qualifier="live")
    assert sum(len(c) for c in stream) > 7 * 1024 * 1024 and stream.error is None


def test_buffered_answers_and_failures_through_invoke_stream(make_emulator, code_dir):
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    emu.add_function(_spec(code_dir, name="fail", handler="basic.fail"))
    emu.add_function(_spec(code_dir, name="missing", handler="no_such_module.handler"))
    # a buffered answer is one chunk: the handler saw the streaming runtime at init and now
    stream = emu.invoke_stream("streamer", _event(buffered=True), qualifier="live")
    assert [json.loads(c) for c in stream] == [{"buffered": True, "streams": True, "at_init": True}]
    assert stream.error is None and not stream.result.streamed and stream.streamed is False
    # a handler error: no chunk, the error object (awslambdaric's shape)
    failed = emu.invoke_stream("fail", b'{"order_id": 7}', qualifier="live")
    assert list(failed) == []
    code, details = failed.error
    assert code == "ValueError" and details["errorMessage"] == "bad order id 7"
    assert set(details) == {"errorMessage", "errorType", "requestId", "stackTrace"}
    assert any("basic.py" in frame for frame in details["stackTrace"])
    # an init error, through the runtime client's /init/error
    missing = emu.invoke_stream("missing", b"{}", qualifier="live")
    assert list(missing) == [] and missing.error[0] == "Runtime.ImportModuleError"
    assert "no_such_module" in missing.error[1]["errorMessage"]


def test_the_exec_wrapper_runs_with_the_runtime_command_and_handler(make_emulator, code_dir, tmp_path):
    # GIVEN a wrapper of the user's own that logs what Lambda passes it, then runs the runtime
    args_log = tmp_path / "args.json"
    wrapper = code_dir / "wrap.sh"
    wrapper.write_text('#!/bin/sh\nprintf \'{"argv": "%s", "handler": "%s"}\' "$*" "$_HANDLER" > '
                       f'{args_log}\nexec "$@"\n')
    wrapper.chmod(0o755)
    emu = make_emulator(runtime_client="bootstrap")
    emu.add_function(_spec(code_dir, environment={"AWS_LAMBDA_EXEC_WRAPPER": "/var/task/wrap.sh"}))
    emu.add_function(_spec(code_dir, name="plain", environment={"AWS_LAMBDA_EXEC_WRAPPER": ""}))
    # WHEN invoked
    answer = json.loads(emu.invoke("streamer", _event(buffered=True), qualifier="live").payload)
    plain = json.loads(emu.invoke("plain", _event(buffered=True), qualifier="live").payload)
    # THEN the wrapper got the runtime's command and _HANDLER; it ran the bootstrap, which
    # stands in for warmstart's runtime when a wrapper is set
    logged = json.loads(args_log.read_text())
    assert logged["handler"] == "streamer.handler"
    assert logged["argv"].endswith("infra/local/bootstrap.py") and " -u " in logged["argv"]
    assert answer["streams"] is True
    assert plain == {"buffered": True, "streams": False, "at_init": False}  # no wrapper: buffered


def test_a_function_without_the_wrapper_answers_a_streamed_response_as_awslambdaric_does(make_emulator, code_dir):
    emu = make_emulator()  # awslambdaric, no wrapper: it cannot marshal a StreamedResponse
    emu.add_function(_spec(code_dir, environment={"AWS_LAMBDA_EXEC_WRAPPER": ""}))
    result = emu.invoke("streamer", _event(chunks=1), qualifier="live")
    assert result.function_error == "Unhandled"
    assert json.loads(result.payload)["errorType"] == "Runtime.MarshalError"


def test_snapstart_restored_environments_stream(make_emulator, code_dir, tmp_path):
    emu = make_emulator()
    emu.add_function(_spec(code_dir, snap_start=True))
    gate = tmp_path / "gate"
    stream = emu.invoke_stream("streamer", _event(chunks=3, gate=str(gate), gate_at=1), qualifier="live")
    assert next(stream).startswith(b'{"statusCode":200')
    assert next(stream) == b"chunk-0"
    gate.write_text("go")
    assert list(stream) == [b"chunk-1", b"chunk-2"]
    assert stream.result.init_type == "snap-start" and stream.result.cold_start
    assert stream.error is None


def test_a_streaming_invocation_holds_its_environment_until_the_stream_ends(make_emulator, code_dir, tmp_path):
    # GIVEN a function limited to one concurrent invocation, streaming behind a gate
    emu = make_emulator()
    emu.add_function(_spec(code_dir, reserved_concurrency=1))
    gate = tmp_path / "gate"
    stream = emu.invoke_stream("streamer", _event(chunks=3, gate=str(gate), gate_at=1), qualifier="live")
    next(stream), next(stream)
    # WHEN another invocation comes while the stream is open: throttled
    with pytest.raises(TooManyRequestsException):
        emu.invoke("streamer", _event(buffered=True), qualifier="live")
    gate.write_text("go")
    list(stream)
    # THEN once it ended, the same environment takes the next one
    assert emu.invoke("streamer", _event(buffered=True), qualifier="live").environment_id == \
        stream.result.environment_id


def test_a_caller_that_stops_reading_leaves_the_function_running_to_its_end(make_emulator, code_dir, tmp_path):
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    gate, outcome = tmp_path / "gate", tmp_path / "outcome.json"
    stream = emu.invoke_stream("streamer", _event(chunks=3, gate=str(gate), gate_at=1,
                                                  outcome_file=str(outcome)), qualifier="live")
    next(stream)
    stream.close()
    gate.write_text("go")
    assert list(stream) == []  # closed: nothing more for this caller
    result = stream.wait(10)
    assert result is not None and result.function_error is None
    assert json.loads(_wait_for(outcome))["chunks"] == 3  # the function streamed to its end


def test_listeners_get_the_first_and_last_byte_of_every_invocation(make_emulator, code_dir):
    emu = make_emulator()
    logs: list[InvocationLog] = []
    emu.add_listener(logs.append)
    emu.add_function(_spec(code_dir))
    list(emu.invoke_stream("streamer", _event(chunks=2, sleep_s=0.01), qualifier="live"))
    emu.invoke("streamer", _event(buffered=True), qualifier="live")
    list(emu.invoke_stream("streamer", _event(raise_after=1), qualifier="live"))
    streamed, buffered, failed = logs
    assert streamed.streamed and streamed.stream_error is None and streamed.cold_start
    assert 0 < streamed.time_to_first_byte_ms < streamed.time_to_last_byte_ms
    assert streamed.response_bytes == len(streamed.payload)
    assert streamed.report is not None and streamed.report.init_duration_ms is not None
    assert not buffered.streamed and buffered.time_to_first_byte_ms == buffered.time_to_last_byte_ms
    assert failed.streamed and failed.stream_error == "Runtime.StreamError" and failed.function_error


def test_the_stream_path_header_is_read_from_the_prelude(make_emulator, code_dir):
    record = InvocationLog("f", None, "1", "r", "RequestResponse", 0.0, "{}", streamed=True,
                           payload=encode_prelude(200, {"X-Warmstart-Path": "local"}) + b"data")
    assert record.path == "local"


# ---- the Runtime API's streaming mode over plain HTTP ------------------------------------------
@pytest.fixture
def api() -> Iterator[RuntimeApiServer]:
    """One environment's Runtime API that takes streams of at most 64 bytes."""
    server = RuntimeApiServer("fn", "1", "app.handler", "123456789012", label="stream",
                              max_stream_bytes=64)
    try:
        server.start()
        yield server
    finally:
        server.close()


def _taken_invocation(api: RuntimeApiServer) -> Invocation:
    """An invocation the runtime has taken (its ``next`` answered), as the emulator starts it."""
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(_http_next(api.address)), daemon=True)
    thread.start()
    assert api.wait_init(5, lambda: True) == "ready"
    inv = Invocation("req-1", b"{}", 1_900_000_000_000, "arn:fn")
    api.start_invocation(inv)
    thread.join(5)
    assert got == [200]
    return inv


def _http_next(address: str) -> int:
    conn = http.client.HTTPConnection(address, timeout=10)
    conn.request("GET", "/2018-06-01/runtime/invocation/next")
    status = conn.getresponse().status
    conn.close()
    return status


def _open_stream(api: RuntimeApiServer, data: bytes, request_id: str = "req-1") -> socket.socket:
    """A runtime's connection that has sent the head of a streamed answer to ``request_id``,
    then ``data``, in one write."""
    host, port = api.address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    head = (f"POST /2018-06-01/runtime/invocation/{request_id}/response HTTP/1.1\r\nHost: x\r\n"
            "Lambda-Runtime-Function-Response-Mode: streaming\r\nTransfer-Encoding: chunked\r\n"
            "Trailer: Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body\r\n\r\n")
    sock.sendall(head.encode() + data)
    return sock


def test_a_streamed_post_is_decoded_chunk_by_chunk_with_its_trailers(api):
    inv = _taken_invocation(api)
    first = threading.Event()
    pieces: list[bytes] = []
    inv.on_chunk = lambda data: (pieces.append(data), first.set())
    sock = _open_stream(api, b"5\r\nhello\r\n")
    # the first chunk reaches the consumer while the request is still open
    assert first.wait(5) and pieces == [b"hello"] and not inv.stream_done
    trailers = "".join(f"{k}: {v}\r\n" for k, v in error_trailers("Runtime.StreamError", "cut").items())
    sock.sendall(b"6\r\n world\r\n0\r\n" + trailers.encode() + b"\r\n")
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 202")
    assert pieces == [b"hello", b" world"] and inv.stream_bytes == 11
    assert inv.stream_error == ("Runtime.StreamError", {"errorType": "Runtime.StreamError",
                                                        "errorMessage": "cut"})


def test_a_streamed_post_for_an_unknown_request_is_refused(api):
    # the head and the body in one write: the server answers after the head and closes, so a
    # client writing its body after the answer (http.client does) races the close (EPIPE)
    _taken_invocation(api)
    sock = _open_stream(api, b"1\r\nx\r\n0\r\n\r\n", request_id="nope")
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        piece = sock.recv(4096)
        if not piece:
            break
        answer += piece
    sock.close()
    assert answer.startswith(b"HTTP/1.1 400")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["errorType"] == "InvalidRequestID"


def test_a_stream_cut_before_its_last_chunk_ends_with_a_stream_error(api):
    inv = _taken_invocation(api)
    sock = _open_stream(api, b"3\r\nabc\r\n")
    sock.close()
    assert api.wait_stream_end(time.perf_counter() + 5, lambda: True)
    assert inv.stream_error[0] == "Runtime.StreamError" and bytes(inv.body) == b"abc"


def test_a_streamed_post_over_the_limit_is_answered_413_and_not_read_further(api):
    inv = _taken_invocation(api)
    sock = _open_stream(api, b"28\r\n" + b"y" * 40 + b"\r\n" + b"28\r\n" + b"z" * 40 + b"\r\n")
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["errorType"] == "Function.ResponseSizeTooLarge"
    assert inv.stream_done and inv.stream_bytes == 40 and bytes(inv.body) == b"y" * 40
    assert inv.stream_error[0] == "Function.ResponseSizeTooLarge"


def test_a_provisioned_environment_streams_and_is_held_until_its_stream_ends(make_emulator, code_dir, tmp_path):
    emu = make_emulator()
    emu.add_function(_spec(code_dir, aliases=(AliasSpec("live", "1", provisioned_concurrency=1),)))
    gate = tmp_path / "gate"
    stream = emu.invoke_stream("streamer", _event(chunks=2, gate=str(gate), gate_at=1), qualifier="live")
    next(stream), next(stream)
    [env] = [e for e in emu.environments("streamer") if e["provisioned_for"] == "live"]
    assert env["state"] == "busy"  # held while the stream is open
    gate.write_text("go")
    assert list(stream) == [b"chunk-1"]
    assert stream.result.init_type == "provisioned-concurrency" and not stream.result.cold_start
    assert stream.result.environment_id == env["id"]


def test_past_its_first_6_mb_a_stream_is_read_at_the_bandwidth_cap():
    mb = 1024 * 1024
    assert capped_wait_s(6 * mb, 0.0, 2 * mb) == 0.0  # the first 6 MB are uncapped
    assert capped_wait_s(7 * mb, 0.0, 2 * mb) == pytest.approx(0.5)  # 1 MB over: 0.5 s at 2 MB/s
    assert capped_wait_s(7 * mb, 0.2, 2 * mb) == pytest.approx(0.3)  # part of it already spent
    assert capped_wait_s(7 * mb, 2.0, 2 * mb) == 0.0  # behind the cap's pace: no wait
    assert capped_wait_s(50 * mb, 0.0, None) == 0.0  # no cap configured
    with pytest.raises(ValueError, match="stream_bytes_per_s must be > 0"):
        EmulatorConfig(stream_bytes_per_s=0)


def test_a_runtime_that_dies_mid_stream_fails_the_invocation_and_resets_the_environment(make_emulator, code_dir):
    emu = make_emulator()
    emu.add_function(_spec(code_dir))
    stream = emu.invoke_stream("streamer", _event(exit_after=2), qualifier="live")
    assert list(stream)[1:] == [b"chunk-0", b"chunk-1"]
    code, details = stream.error
    assert code == "Runtime.ExitError" and "exit status 3" in details["errorMessage"]
    assert emu.environments("streamer") == []
    again = emu.invoke_stream("streamer", _event(chunks=1), qualifier="live")
    assert list(again)[1:] == [b"chunk-0"] and again.result.cold_start
