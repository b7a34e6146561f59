"""The local function URL (``FunctionUrlGateway``): the function URL event, a streamed answer
sent chunk by chunk over a real socket, buffered answers mapped, and its faults.

A reader on ``http.client`` records the order in which chunks arrive relative to the ones the
producer has released (synchronised with events, no timing). The first part drives the
gateway with the stand-in stream of ``test_invoke_stream_api``; the second part a real
streaming function in a real execution environment.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from functions.runtime import streaming
from infra.local.emulator import InvokeResult
from infra.local.errors import RequestTooLargeException, TooManyRequestsException
from infra.local.gateway import FunctionUrlGateway
from tests.e2e.conftest import EVENTS
from tests.e2e.test_emulator_streaming import _event, _spec, _wait_for
from tests.e2e.test_invoke_stream_api import StandInEmulator, StandInStream, stream_code_dir


class BufferedStandIn(StandInEmulator):
    """Also answers ``invoke`` (a function URL in BUFFERED mode)."""

    def __init__(self, result: InvokeResult | Exception) -> None:
        super().__init__()
        self.answer = result
        self.payloads: list[bytes] = []

    def invoke(self, name: str, payload: bytes | None = None, **kwargs: Any) -> InvokeResult:
        self.payloads.append(payload or b"")
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def url_factory() -> Iterator[Any]:
    made: list[FunctionUrlGateway] = []

    def make(invoker: Any, **kwargs: Any) -> FunctionUrlGateway:
        gw = FunctionUrlGateway(invoker, "fn", "live", **kwargs)
        gw.start()
        made.append(gw)
        return gw

    yield make
    for gw in made:
        gw.stop()


def _connect(gw: FunctionUrlGateway) -> http.client.HTTPConnection:
    host, port = gw.endpoint.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=30)


def _prelude(status: int = 200, headers: dict[str, str] | None = None, cookies: tuple[str, ...] = ()) -> bytes:
    return streaming.encode_prelude(status, headers or {"content-type": "text/event-stream"}, cookies)


def test_the_request_becomes_a_function_url_event(url_factory):
    sample = json.loads((EVENTS / "function_url.json").read_text())
    emu = StandInEmulator()
    emu.streams.append(StandInStream([_prelude() + b"ok"], gated=False))
    gw = url_factory(emu, region="eu-west-1", url_id="abc123")
    conn = _connect(gw)
    conn.request("POST", "/chat/x?a=1&a=2", body=b'{"m": 1}',
                 headers={"content-type": "application/json", "Cookie": "s=1; t=2"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read() == b"ok"
    event = json.loads(emu.calls[0]["payload"])
    assert emu.calls[0]["qualifier"] == "live"
    assert set(event) - {"body", "cookies", "queryStringParameters"} == set(sample)
    ctx = event["requestContext"]
    assert set(ctx) == set(sample["requestContext"])
    assert ctx["domainName"] == "abc123.lambda-url.eu-west-1.on.aws" == gw.domain_name
    assert ctx["domainPrefix"] == ctx["apiId"] == "abc123" and ctx["accountId"] == "anonymous"
    assert event["routeKey"] == ctx["routeKey"] == ctx["stage"] == "$default"
    assert "pathParameters" not in event
    assert event["rawPath"] == ctx["http"]["path"] == "/chat/x" and event["rawQueryString"] == "a=1&a=2"
    assert event["queryStringParameters"] == {"a": "1,2"} and event["cookies"] == ["s=1", "t=2"]
    assert event["body"] == '{"m": 1}' and event["isBase64Encoded"] is False
    assert ctx["requestId"] == resp.getheader("x-amzn-RequestId")


def test_status_and_headers_come_at_once_then_each_chunk_as_it_is_written(url_factory):
    emu = StandInEmulator()
    stream = StandInStream([_prelude(201, {"content-type": "text/event-stream", "x-a": "1",
                                           "content-length": "99"}, ("s=1; Path=/",)),
                            b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"])
    emu.streams.append(stream)
    gw = url_factory(emu)
    conn = _connect(gw)
    conn.request("GET", "/stream")
    resp = conn.getresponse()  # returns once the status line and headers are in
    assert resp.status == 201 and not stream.sent[1].is_set()  # before any body chunk exists
    assert resp.getheader("content-type") == "text/event-stream" and resp.getheader("x-a") == "1"
    assert resp.getheader("set-cookie") == "s=1; Path=/"
    assert resp.getheader("transfer-encoding") == "chunked" and resp.getheader("content-length") is None
    got = []
    for i in range(1, 4):
        stream.release[i].set()
        got.append(resp.read1(64))  # one chunk, released just now; the next is not produced yet
        assert i == 3 or not stream.sent[i + 1].is_set()
    assert got == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
    assert resp.read() == b""  # the terminating chunk: a complete response
    emu.streams.append(StandInStream([_prelude(), b"z"], gated=False))
    conn.request("GET", "/again")  # the connection is kept alive after a chunked body
    assert conn.getresponse().read() == b"z"


def test_body_bytes_after_the_prelude_in_the_same_chunk_are_sent(url_factory):
    emu = StandInEmulator()
    emu.streams.append(StandInStream([_prelude()[:5], _prelude()[5:] + b"first", b"second"], gated=False))
    resp = _get(url_factory(emu))
    assert resp.status == 200 and resp.read() == b"firstsecond"


def _get(gw: FunctionUrlGateway, path: str = "/", **kwargs: Any) -> http.client.HTTPResponse:
    conn = _connect(gw)
    conn.request("GET", path, **kwargs)
    return conn.getresponse()


def test_a_buffered_answer_is_mapped_as_function_urls_map_it(url_factory):
    emu = StandInEmulator()
    answer = {"statusCode": 202, "headers": {"x-b": "2"}, "body": "hi", "cookies": ["c=1"]}
    emu.streams.append(StandInStream([json.dumps(answer).encode()], gated=False))
    emu.streams.append(StandInStream([b'{"plain": true}'], gated=False))
    gw = url_factory(emu)
    resp = _get(gw)
    assert (resp.status, resp.getheader("x-b"), resp.getheader("set-cookie"), resp.read()) == (202, "2", "c=1", b"hi")
    resp = _get(gw)
    assert resp.status == 200 and resp.getheader("content-type") == "application/json"
    assert json.loads(resp.read()) == {"plain": True}


def test_a_stream_that_fails_midway_just_ends_and_its_trailers_are_logged(url_factory, caplog):
    emu = StandInEmulator()
    error_event = streaming.sse_event({"error": {"type": "llm_reset", "message": "x"}}, event="error")
    emu.streams.append(StandInStream([_prelude(), b"data: 1\n\n", error_event], gated=False, error=(
        "Runtime.StreamError", {"errorType": "Runtime.StreamError", "errorMessage": "upstream reset"})))
    with caplog.at_level(logging.WARNING, logger="warmstart.local.gateway"):
        resp = _get(url_factory(emu))
        assert resp.status == 200 and resp.read() == b"data: 1\n\n" + error_event
    assert "Runtime.StreamError" in caplog.text and "upstream reset" in caplog.text


@pytest.mark.parametrize(("chunks", "error", "reason"), [
    ([], ("Sandbox.Timedout", {"errorMessage": "Task timed out after 3.00 seconds"}),
     "function error: Sandbox.Timedout"),
    ([b'{"statusCode": 200, '], ("Runtime.StreamError", {"errorMessage": "x"}),
     "function error: Runtime.StreamError"),
    ([b"x" * (streaming.MAX_PRELUDE_BYTES + 1)], None, "malformed prelude"),
    ([b"[1, 2]" + streaming.PRELUDE_SEPARATOR], None, "malformed prelude"),
    ([b'{"statusCode": 999}' + streaming.PRELUDE_SEPARATOR], None, "not an HTTP status"),
    ([], None, "no prelude and no response"),
    ([b"not json"], None, "not JSON"),
])
def test_a_prelude_that_never_comes_is_502(url_factory, chunks, error, reason):
    emu = StandInEmulator()
    emu.streams.append(StandInStream(chunks, gated=False, error=error))
    resp = _get(url_factory(emu))
    assert resp.status == 502 and json.loads(resp.read()) == {"message": "Internal Server Error"}
    assert reason in resp.getheader("x-warmstart-gateway-error")


def test_a_function_error_answered_buffered_is_502(url_factory):
    emu = StandInEmulator()
    emu.streams.append(StandInStream([b'{"errorType": "ValueError", "errorMessage": "bad"}'], gated=False,
                                     error=("ValueError", {"errorType": "ValueError", "errorMessage": "bad"})))
    resp = _get(url_factory(emu))
    assert resp.status == 502 and resp.getheader("x-warmstart-gateway-error") == "function error: ValueError"


@pytest.mark.parametrize(("exc", "status", "body"), [
    (TooManyRequestsException("Rate Exceeded."), 429, {"message": "Too Many Requests"}),
    (RequestTooLargeException("Request must be smaller"), 413, {"message": "Request Too Long"}),
])
def test_invoke_errors_before_the_stream(url_factory, exc, status, body):
    emu = StandInEmulator()
    emu.streams.append(StandInStream([b"x"], raise_first=exc))
    resp = _get(url_factory(emu))
    assert resp.status == status and json.loads(resp.read()) == body


def test_an_unknown_function_is_502(url_factory):
    gw = FunctionUrlGateway(StandInEmulator(), "missing")
    gw.start()
    try:
        resp = _get(gw)
        assert resp.status == 502 and resp.getheader("x-warmstart-gateway-error") == "ResourceNotFoundException"
    finally:
        gw.stop()


def test_a_request_over_6_mb_is_413_without_an_invocation(url_factory):
    emu = StandInEmulator()
    gw = url_factory(emu)
    conn = _connect(gw)
    conn.request("POST", "/", body=b"x" * (6 * 1024 * 1024 + 1))
    resp = conn.getresponse()
    assert resp.status == 413 and emu.calls == []


def test_a_stream_over_the_response_limit_is_cut_and_closed(url_factory, caplog):
    emu = StandInEmulator()
    stream = StandInStream([_prelude(), b"a" * 6, b"b" * 6, b"c" * 6], gated=False)
    emu.streams.append(stream)
    with caplog.at_level(logging.WARNING, logger="warmstart.local.gateway"):
        resp = _get(url_factory(emu, max_response_bytes=10))
        assert resp.read() == b"aaaaaabbbb"
    assert stream.closed.is_set() and "streamed response limit" in caplog.text


def test_a_client_that_disconnects_closes_the_stream_and_nothing_is_raised(url_factory, caplog):
    emu = StandInEmulator()
    stream = StandInStream([_prelude(), b"1" * 1024, b"2" * 1024, b"3" * 1024])
    emu.streams.append(stream)
    gw = url_factory(emu)
    host, port = gw.endpoint.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert sock.recv(64).startswith(b"HTTP/1.1 200")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # RST
    with caplog.at_level(logging.INFO, logger="warmstart.local.gateway"):
        for event in stream.release:
            event.set()
        assert stream.closed.wait(10)
        assert stream.ended.wait(10)
    assert "client went away" in caplog.text and "Traceback" not in caplog.text


def test_an_http_1_0_client_gets_the_raw_body_then_the_connection_closes(url_factory):
    emu = StandInEmulator()
    emu.streams.append(StandInStream([_prelude(), b"a", b"b"], gated=False))
    gw = url_factory(emu)
    host, port = gw.endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"chunked" not in head.lower() and body == b"ab"


def test_buffered_mode_maps_one_invoke(url_factory):
    emu = BufferedStandIn(InvokeResult(200, json.dumps({"statusCode": 203, "body": "b"}).encode(), "r", "1"))
    resp = _get(url_factory(emu, invoke_mode="BUFFERED"))
    assert resp.status == 203 and resp.read() == b"b"
    assert ".lambda-url." in json.loads(emu.payloads[0])["requestContext"]["domainName"]
    throttled = BufferedStandIn(TooManyRequestsException("Rate Exceeded."))
    assert _get(url_factory(throttled, invoke_mode="BUFFERED")).status == 429
    failed = BufferedStandIn(InvokeResult(200, b'{"errorType": "E"}', "r", "1", function_error="Unhandled"))
    assert _get(url_factory(failed, invoke_mode="BUFFERED")).status == 502


def test_an_unknown_invoke_mode_is_refused():
    with pytest.raises(ValueError, match="RESPONSE_STREAM or BUFFERED"):
        FunctionUrlGateway(StandInEmulator(), "fn", invoke_mode="STREAM")  # type: ignore[arg-type]


def test_the_replay_client_records_first_and_last_byte_of_streamed_answers(url_factory):
    from infra.replay.client import RequestShape, send_requests

    emu = StandInEmulator()
    stream = StandInStream([_prelude(), b"data: 1\n\n", b"data: 2\n\n"])
    emu.streams.append(stream)
    streaming_url = url_factory(emu)
    buffered = BufferedStandIn(InvokeResult(200, b'{"statusCode": 200, "body": "{}"}', "r", "1"))
    buffered_url = url_factory(buffered, invoke_mode="BUFFERED")
    shape = RequestShape("POST", "/chat", {"m": "hi"})

    def release_when_first_chunk_is_out() -> None:  # the 2nd chunk comes after the 1st was sent
        stream.release[1].set()
        assert stream.sent[1].wait(10)
        stream.release[2].set()

    threading.Thread(target=release_when_first_chunk_is_out, daemon=True).start()
    (rec,) = send_requests(streaming_url.endpoint, [0.0], [0.0], shape=shape, quiet=True)
    assert rec.status == 200 and rec.streamed
    assert 0.0 < rec.first_byte_ms <= rec.last_byte_ms <= rec.latency_ms
    # matched to the emulator's record by the event's request id, as through the HTTP API
    assert rec.gateway_request_id == json.loads(emu.calls[0]["payload"])["requestContext"]["requestId"]
    (plain,) = send_requests(buffered_url.endpoint, [0.0], [0.0], shape=shape, quiet=True)
    assert plain.status == 200 and not plain.streamed and math.isnan(plain.last_byte_ms)


# ---- a real streaming function in a real execution environment ---------------------------------


@pytest.fixture
def stream_code(tmp_path) -> Any:
    return stream_code_dir(tmp_path)


@pytest.fixture
def real_url(make_emulator, stream_code, url_factory) -> tuple[Any, FunctionUrlGateway]:
    """The function URL of ``fn`` (``url_streamer.handler``, the streaming runtime client)."""
    emu = make_emulator()
    emu.add_function(_spec(stream_code, name="fn", handler="url_streamer.handler"))
    return emu, url_factory(emu)


def _post(gw: FunctionUrlGateway, event: bytes) -> http.client.HTTPResponse:
    """POST ``event`` to the function URL; the streamer reads its keys from the body."""
    conn = _connect(gw)
    conn.request("POST", "/chat", body=event, headers={"content-type": "application/json"})
    return conn.getresponse()


def test_a_real_sse_stream_reaches_an_http_client_event_by_event(real_url, tmp_path):
    # GIVEN a handler that makes its third event only once the client has read the first two
    _, gw = real_url
    gate = tmp_path / "gate"
    resp = _post(gw, _event(chunks=4, sse=True, gate=str(gate), gate_at=2))
    # THEN the status and headers came first, from the prelude
    assert resp.status == 200 and resp.getheader("content-type") == "text/event-stream"
    assert resp.getheader("x-streams") == "True" and resp.getheader("set-cookie") == "a=1"
    assert resp.getheader("transfer-encoding") == "chunked"
    events = []
    while len(events) < 2:
        events.append(resp.read1(4096))
    gate.write_text("go")
    rest = resp.read()
    assert events == [b'data: {"token":0}\n\n', b'data: {"token":1}\n\n']
    assert rest == b'data: {"token":2}\n\ndata: {"token":3}\n\n'  # not gate-timeout


def test_the_real_function_sees_a_function_url_event(real_url):
    _, gw = real_url
    resp = _post(gw, _event(echo=True))
    ctx = json.loads(resp.read())["requestContext"]
    assert resp.status == 200 and ctx["domainName"] == gw.domain_name and ".lambda-url." in ctx["domainName"]


def test_a_real_stream_that_raises_midway_just_ends(real_url, caplog):
    _, gw = real_url
    with caplog.at_level(logging.WARNING, logger="warmstart.local.gateway"):
        resp = _post(gw, _event(raise_after=1))
        assert resp.status == 200 and resp.read() == b"chunk-0"  # a complete chunked body, then
    assert "Runtime.StreamError" in caplog.text and "the model went away" in caplog.text


def test_a_real_buffered_answer_and_a_real_failure(real_url):
    _, gw = real_url
    resp = _post(gw, _event(buffered=True))
    assert resp.status == 200 and resp.getheader("content-type") == "application/json"
    assert json.loads(resp.read()) == {"buffered": True, "streams": True, "at_init": True}
    resp = _post(gw, _event(raise_before=True))
    assert resp.status == 502 and resp.getheader("x-warmstart-gateway-error") == "function error: ValueError"


def test_a_real_prelude_that_never_comes_is_502_at_the_function_timeout(make_emulator, stream_code, url_factory):
    emu = make_emulator()
    emu.add_function(_spec(stream_code, name="fn", handler="url_streamer.handler", timeout_s=1.0))
    resp = _post(url_factory(emu), _event(hang_before=30))
    assert resp.status == 502
    assert resp.getheader("x-warmstart-gateway-error") == "function error: Sandbox.Timedout"


def test_a_real_client_that_disconnects_mid_stream(real_url, tmp_path, caplog):
    # GIVEN a stream whose third chunk waits for a file the test writes after it disconnected
    _, gw = real_url
    gate, outcome = tmp_path / "gate", tmp_path / "outcome.json"
    host, port = gw.endpoint.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    body = _event(chunks=200, chunk_bytes=4096, gate=str(gate), gate_at=2, outcome_file=str(outcome))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert sock.recv(64).startswith(b"HTTP/1.1 200")
    with caplog.at_level(logging.INFO, logger="warmstart.local.gateway"):  # before any write can fail
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
        # WHEN the rest of the stream comes
        gate.write_text("go")
        # THEN the function ran to its end (the emulator drains, as AWS does), nothing raised
        finished = json.loads(_wait_for(outcome))
        # AND the gateway noticed at its next write (its thread may log after the function ended)
        for _ in range(1000):
            if "client went away" in caplog.text:
                break
            threading.Event().wait(0.01)
    assert finished["error_type"] is None and finished["chunks"] == 200
    assert "client went away" in caplog.text and "Traceback" not in caplog.text
