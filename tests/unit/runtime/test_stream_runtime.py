"""warmstart's runtime client on the wire, against a small Runtime API on a real socket.

The fake Runtime API (``http.server``, its own chunked decoder) records every request: method,
path, headers, the body's chunks as they arrived and the trailers. It answers ``next`` from a
queue of events (500 when the queue is empty: the environment ends), 202 to every post, and
can cut a streamed post after some chunks (a reset connection).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html (response streaming)
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from functions.runtime import stream_runtime as sr
from functions.runtime.streaming import (
    StreamedResponse,
    StreamOutcome,
    encode_prelude,
    read_error_trailers,
)

ROOT = Path(__file__).resolve().parents[3]
HANDLERS = ROOT / "tests" / "e2e" / "handlers"


class Recorded:
    def __init__(self, method: str, path: str, headers: dict[str, str]) -> None:
        self.method, self.path, self.headers = method, path, headers
        self.chunks: list[bytes] = []
        self.body = b""
        self.trailers: dict[str, str] = {}
        self.done = threading.Event()


class FakeRuntimeApi:
    """A Runtime API on 127.0.0.1 that records what the runtime sends."""

    def __init__(self, events: list[tuple[bytes, dict[str, str]]] = (), *,  # type: ignore[assignment]
                 cut_after_chunks: int | None = None) -> None:
        self.events = list(events)
        self.cut_after_chunks = cut_after_chunks
        self.requests: list[Recorded] = []
        self.changed = threading.Condition()
        self.connections = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait(self, predicate: Any, timeout_s: float = 10.0) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout_s), [r.path for r in self.requests]

    def posts(self, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith(suffix)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with fake.changed:
                    fake.connections += 1

            def _record(self) -> Recorded:
                rec = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
                with fake.changed:
                    fake.requests.append(rec)
                    fake.changed.notify_all()
                return rec

            def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._record()
                with fake.changed:
                    event = fake.events.pop(0) if fake.events else None
                if self.path.endswith("/restore/next"):
                    self._answer(200, b"")
                elif event is None:
                    self._answer(500, b'{"errorType":"Runtime.ContainerError"}')
                else:
                    body, headers = event
                    self._answer(200, body, headers)

            def do_POST(self) -> None:
                rec = self._record()
                if "chunked" in self.headers.get("Transfer-Encoding", ""):
                    while True:  # an independent chunked decoder
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            break
                        data = self.rfile.read(size)
                        self.rfile.readline()
                        with fake.changed:
                            rec.chunks.append(data)
                            fake.changed.notify_all()
                        if fake.cut_after_chunks is not None and len(rec.chunks) >= fake.cut_after_chunks:
                            # a reset, not a clean close: the runtime's next write fails
                            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                       struct.pack("ii", 1, 0))
                            self.close_connection = True
                            rec.done.set()
                            return
                    while (line := self.rfile.readline()) not in (b"\r\n", b""):
                        name, _, value = line.decode().partition(":")
                        rec.trailers[name.strip()] = value.strip()
                    rec.body = b"".join(rec.chunks)
                else:
                    rec.body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec.done.set()
                with fake.changed:
                    fake.changed.notify_all()
                self._answer(202, b'{"status":"OK"}')

        return Handler


@pytest.fixture
def fake() -> Iterator[FakeRuntimeApi]:
    server = FakeRuntimeApi()
    yield server
    server.close()


def _event(request_id: str = "req-1", body: Any = None, **headers: str) -> tuple[bytes, dict[str, str]]:
    base = {"Lambda-Runtime-Aws-Request-Id": request_id, "Lambda-Runtime-Deadline-Ms": "1900000000000",
            "Lambda-Runtime-Invoked-Function-Arn": "arn:aws:lambda:us-east-1:1:function:f:live",
            "Lambda-Runtime-Trace-Id": "Root=1-abc", "Content-Type": "application/json"}
    return json.dumps({} if body is None else body).encode(), dict(base, **headers)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 10.0
        return self.now


# ---- the streamed answer ------------------------------------------------------------------------
def test_a_streamed_response_goes_out_as_the_runtime_apis_streaming_mode(fake):
    finished: list[StreamOutcome] = []
    response = StreamedResponse(201, {"content-type": "text/plain"}, iter([b"a", b"", "bc", b"d"]),
                                cookies=["c=1"])
    response.on_finish = finished.append
    outcome = sr.post_stream(sr.RuntimeConnection(fake.address), "req-1", response, clock_ms=Clock())
    [post] = fake.posts("/invocation/req-1/response")
    assert post.headers["lambda-runtime-function-response-mode"] == "streaming"
    assert post.headers["transfer-encoding"] == "chunked"
    assert post.headers["content-type"] == "application/vnd.awslambda.http-integration-response"
    assert post.headers["trailer"] == "Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body"
    assert "content-length" not in post.headers
    # the prelude is the first chunk; an empty chunk is never sent (it would end the stream)
    assert post.chunks == [encode_prelude(201, {"content-type": "text/plain"}, ["c=1"]), b"a", b"bc", b"d"]
    assert post.trailers == {}
    assert outcome == StreamOutcome(10.0, 30.0, 4, 3, None)
    assert finished == [outcome]


def test_an_iterator_that_raises_ends_the_stream_with_error_trailers(fake):
    def chunks() -> Iterator[bytes]:
        yield b"one"
        raise TimeoutError("the model timed out")

    outcome = sr.post_stream(sr.RuntimeConnection(fake.address), "req-1",
                             StreamedResponse(200, {}, chunks()))
    [post] = fake.posts("/response")
    assert post.chunks[1:] == [b"one"]
    assert read_error_trailers(post.trailers) == ("Runtime.StreamError", {
        "errorType": "Runtime.StreamError", "errorMessage": "the model timed out"})
    assert outcome.error_type == "Runtime.StreamError" and outcome.chunks == 1


def test_a_stream_over_the_limit_is_stopped_and_its_producer_closed(fake):
    state = {"closed": 0, "finally": False}

    def chunks() -> Iterator[bytes]:
        try:
            while True:
                yield b"abc"
        finally:
            state["finally"] = True

    response = StreamedResponse(200, {}, chunks(), on_close=lambda: state.update(closed=state["closed"] + 1))
    outcome = sr.post_stream(sr.RuntimeConnection(fake.address), "req-1", response, max_bytes=7)
    [post] = fake.posts("/response")
    assert post.chunks[1:] == [b"abc", b"abc"]  # 6 bytes: a third chunk would pass 7
    error_type, error = read_error_trailers(post.trailers)
    assert error_type == "Function.ResponseSizeTooLarge" and "(7 bytes)" in error["errorMessage"]
    assert outcome.error_type == "Function.ResponseSizeTooLarge" and outcome.body_bytes == 6
    assert state == {"closed": 1, "finally": True}


def test_a_failed_write_to_the_runtime_api_closes_the_response():
    fake = FakeRuntimeApi(cut_after_chunks=2)  # the prelude and one body chunk, then a reset
    try:
        state = {"closed": False, "finally": False}
        finished: list[StreamOutcome] = []

        def chunks() -> Iterator[bytes]:
            try:
                while True:
                    yield b"token "
            finally:
                state["finally"] = True

        response = StreamedResponse(200, {}, chunks(), on_close=lambda: state.update(closed=True))
        response.on_finish = finished.append
        outcome = sr.post_stream(sr.RuntimeConnection(fake.address), "req-1", response)
        assert outcome.error_type == "ClientDisconnected"
        assert state == {"closed": True, "finally": True}
        assert finished == [outcome]
    finally:
        fake.close()


def test_a_failing_on_finish_never_breaks_the_runtime(fake, capsys):
    response = StreamedResponse(200, {}, [b"x"])
    response.on_finish = lambda outcome: 1 / 0
    assert sr.post_stream(sr.RuntimeConnection(fake.address), "req-1", response).chunks == 1
    assert "on_finish failed: ZeroDivisionError" in capsys.readouterr().err


# ---- buffered answers, as awslambdaric posts them ----------------------------------------------
def _invoke(fake: FakeRuntimeApi, handler: Any, *, streams: bool = True, **headers: str) -> Recorded:
    body, head = _event(body={"q": 1}, **headers)
    lowered = {k.lower(): v for k, v in head.items()}
    sr.serve_invocation(sr.RuntimeConnection(fake.address), handler, lowered, body, streams=streams)
    return fake.requests[-1]


def test_buffered_results_are_posted_as_awslambdaric_posts_them(fake, monkeypatch):
    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.12")
    seen: list[Any] = []

    def handler(event: Any, context: Any) -> Any:
        seen.append((event, context.aws_request_id, context.invoked_function_arn,
                     os.environ.get("_X_AMZN_TRACE_ID")))
        return {"answer": "é", "n": float("nan")}

    post = _invoke(fake, handler)
    assert post.path == "/2018-06-01/runtime/invocation/req-1/response"
    assert post.headers["content-type"] == "application/json"
    assert post.body == '{"answer": "é", "n": NaN}'.encode()  # ensure_ascii off on python3.12
    assert seen == [({"q": 1}, "req-1", "arn:aws:lambda:us-east-1:1:function:f:live", "Root=1-abc")]
    raw = _invoke(fake, lambda e, c: b"\x00raw")
    assert raw.headers["content-type"] == "application/unknown" and raw.body == b"\x00raw"


def test_a_handler_error_is_posted_with_its_type_and_xray_cause(fake):
    def handler(event: Any, context: Any) -> Any:
        raise ValueError("bad order")

    post = _invoke(fake, handler)
    assert post.path.endswith("/invocation/req-1/error")
    assert post.headers["lambda-runtime-function-error-type"] == "ValueError"
    body = json.loads(post.body)
    assert set(body) == {"errorMessage", "errorType", "requestId", "stackTrace"}
    assert body["errorMessage"] == "bad order" and body["requestId"] == "req-1"
    assert "in handler" in body["stackTrace"][0]  # the runtime's own frames are left out
    cause = json.loads(post.headers["lambda-runtime-function-xray-error-cause"])
    assert cause["exceptions"][0]["type"] == "ValueError"


@pytest.mark.parametrize(("result", "streams"), [(object(), True),
                                                  (StreamedResponse(200, {}, [b"x"]), False)])
def test_a_result_that_is_not_json_is_a_marshal_error(fake, result, streams):
    post = _invoke(fake, lambda e, c: result, streams=streams)
    body = json.loads(post.body)
    assert post.path.endswith("/error") and body["errorType"] == "Runtime.MarshalError"
    assert body["errorMessage"].startswith("Unable to marshal response:")


def test_a_chunk_iterator_that_cannot_start_is_a_plain_error(fake):
    post = _invoke(fake, lambda e, c: StreamedResponse(200, {}, 42))  # type: ignore[arg-type]
    assert post.path.endswith("/error") and json.loads(post.body)["errorType"] == "TypeError"


def test_the_trace_id_variable_follows_each_invocation(fake, monkeypatch):
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "stale")
    body, head = _event()
    del head["Lambda-Runtime-Trace-Id"]
    seen: list[Any] = []
    sr.serve_invocation(sr.RuntimeConnection(fake.address), lambda e, c: seen.append(os.environ.get("_X_AMZN_TRACE_ID")),
                         {k.lower(): v for k, v in head.items()}, body)
    assert seen == [None]


def test_the_loop_serves_on_one_keep_alive_connection_until_the_api_goes_away():
    fake = FakeRuntimeApi([_event("a", {"n": 1}), _event("b", {"n": 2})])
    try:
        sr.serve(sr.RuntimeConnection(fake.address), lambda e, c: e["n"] * 10)
        assert [r.body for r in fake.posts("/response")] == [b"10", b"20"]
        assert fake.connections == 1
    finally:
        fake.close()


def test_the_context_object_has_awslambdarics_attributes(monkeypatch):
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "f")
    cc = {"client": {"app_title": "t"}, "custom": {"a": 1}, "env": {"e": 2},
          "w3c": {"traceparent": "00-1", "other": "x"}}
    ctx = sr.context_from_headers({"lambda-runtime-aws-request-id": "r", "lambda-runtime-deadline-ms": "1",
                                   "lambda-runtime-client-context": json.dumps(cc),
                                   "lambda-runtime-cognito-identity": '{"cognitoIdentityId": "i"}',
                                   "lambda-runtime-aws-tenant-id": "t1"})
    assert (ctx.aws_request_id, ctx.function_name, ctx.memory_limit_in_mb, ctx.tenant_id) == ("r", "f", "256", "t1")
    assert ctx.client_context.client.app_title == "t" and ctx.client_context.custom == {"a": 1}
    assert ctx.w3c() == {"traceparent": "00-1"} and ctx.identity.cognito_identity_id == "i"
    assert ctx.get_remaining_time_in_millis() == 0
    with pytest.raises(sr.FaultError, match="Unable to parse Client Context JSON"):
        sr.context_from_headers({"lambda-runtime-client-context": "{nope"})


def test_the_chunked_decoder_refuses_bad_framing():
    assert list(sr.read_chunks(io.BytesIO(b"3\r\nabc\r\n0\r\n\r\n"))) == [b"abc"]
    with pytest.raises(ValueError):
        list(sr.read_chunks(io.BytesIO(b"zz\r\nabc\r\n")))
    with pytest.raises(ConnectionResetError):
        list(sr.read_chunks(io.BytesIO(b"5\r\nab")))


# ---- the process: init, SnapStart, SIGTERM, import cost -----------------------------------------
def _runtime(fake: FakeRuntimeApi, handler: str, *, task_root: Path = HANDLERS, stdout: Any = subprocess.DEVNULL,
             **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "functions.runtime.stream_runtime"], cwd=task_root,
                            env={"PATH": os.environ.get("PATH", ""), "AWS_LAMBDA_RUNTIME_API": fake.address,
                                 "_HANDLER": handler, "LAMBDA_TASK_ROOT": str(task_root), **env},
                            stdout=stdout, stderr=subprocess.PIPE)


def test_an_init_error_is_reported_and_the_process_exits(fake):
    proc = _runtime(fake, "no_such_module.handler")
    try:
        assert proc.wait(timeout=20) == 1
    finally:
        proc.stderr.close()
    [post] = fake.posts("/runtime/init/error")
    assert post.headers["lambda-runtime-function-error-type"] == "Runtime.ImportModuleError"
    assert "Unable to import module 'no_such_module'" in json.loads(post.body)["errorMessage"]


def test_under_snapstart_the_runtime_waits_for_the_restore_before_next(fake):
    proc = _runtime(fake, "basic.echo", AWS_LAMBDA_INITIALIZATION_TYPE="snap-start")
    try:
        assert proc.wait(timeout=20) == 0  # next answered 500: the environment ended
    finally:
        proc.stderr.close()
    assert [r.path for r in fake.requests] == ["/2018-06-01/runtime/restore/next",
                                               "/2018-06-01/runtime/invocation/next"]


def test_sigterm_mid_stream_closes_the_response_and_ends_the_process(tmp_path):
    flag = tmp_path / "closed"
    fake = FakeRuntimeApi([_event(body={"endless": True, "sleep_s": 0.01, "closed_flag": str(flag)})])
    proc = _runtime(fake, "streamer.handler")
    try:
        fake.wait(lambda: any(len(r.chunks) >= 3 for r in fake.requests))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert flag.read_text() == "closed"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
        fake.close()


def test_importing_the_runtime_client_loads_no_http_client_nor_ssl():
    probe = ("import sys, functions.runtime.stream_runtime; "
             "print(sorted(m for m in ('http.client', 'ssl', 'email', 'asyncio', 'urllib.request') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-S", "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=30)
    assert out.stdout.strip() == "[]"


def test_the_exec_wrapper_is_an_executable_posix_shell_script():
    wrapper = ROOT / "functions" / "runtime" / "warmstart-stream"
    assert os.access(wrapper, os.X_OK)
    assert wrapper.read_text().startswith("#!/bin/sh\n")
    assert "exec \"$python\" -m functions.runtime.stream_runtime" in wrapper.read_text()


def test_a_producer_that_fails_to_close_still_gets_its_stream_ended(fake, capsys):
    def on_close() -> None:
        raise OSError("the model connection was already gone")

    response = StreamedResponse(200, {}, iter([b"abc", b"def"]), on_close=on_close)
    outcome = sr.post_stream(sr.RuntimeConnection(fake.address), "req-1", response, max_bytes=4)
    [post] = fake.posts("/response")
    assert read_error_trailers(post.trailers)[0] == "Function.ResponseSizeTooLarge"
    assert outcome.error_type == "Function.ResponseSizeTooLarge"
    assert "closing the response failed: OSError" in capsys.readouterr().err


def test_log_records_get_awslambdarics_format_with_the_request_id(tmp_path):
    (tmp_path / "logs.py").write_text("import logging\n\ndef handler(event, context):\n"
                                      "    logging.getLogger('app').info('hello %s', event['n'])\n"
                                      "    return 1\n")
    fake = FakeRuntimeApi([_event("req-7", {"n": 1})])
    proc = _runtime(fake, "logs.handler", task_root=tmp_path, stdout=subprocess.PIPE,
                    AWS_LAMBDA_LOG_LEVEL="info")
    try:
        out, _err = proc.communicate(timeout=20)
    finally:
        proc.stderr.close()
        fake.close()
    assert re.search(rb"^\[INFO\]\t\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\treq-7\thello 1$", out, re.MULTILINE), out


def test_a_runtime_api_gone_before_the_stream_starts_closes_the_producer_and_posts_nothing():
    fake = FakeRuntimeApi()
    address = fake.address
    fake.close()  # the environment is ending: connections are refused
    closed: list[bool] = []
    response = StreamedResponse(200, {}, [b"x"], on_close=lambda: closed.append(True))
    body, head = _event()
    with pytest.raises(sr.RuntimeApiGone):
        sr.serve_invocation(sr.RuntimeConnection(address), lambda e, c: response,
                             {k.lower(): v for k, v in head.items()}, body)
    assert closed == [True] and fake.requests == []
