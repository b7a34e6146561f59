"""``InvokeWithResponseStream`` through the local Lambda API, read with the real boto3 client.

The first part drives the HTTP side against :class:`StandInEmulator`, a stand-in with the
interface of ``Emulator.invoke_stream`` whose chunks the test releases one at a time (so each
event is seen to arrive before the next chunk exists: no timing). The second part runs a real
streaming function in a real execution environment (skipped until the emulator streams).
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.local.emulator import InvokeResult
from infra.local.errors import ResourceNotFoundException, TooManyRequestsException
from tests.e2e.conftest import HANDLERS
from tests.e2e.test_emulator_streaming import _event, _spec


class StandInStream:
    """An ``InvocationStream`` look-alike: yields ``chunks``; before chunk *i* > 0 it waits for
    ``release[i]`` (set by the test), then ends with ``error``."""

    def __init__(self, chunks: list[bytes], *, error: tuple[str, dict[str, Any]] | None = None,
                 raise_first: Exception | None = None, gated: bool = True) -> None:
        self.chunks = chunks
        self.release = [threading.Event() for _ in chunks]
        if not gated:
            for event in self.release:
                event.set()
        self.sent = [threading.Event() for _ in chunks]
        self.closed = threading.Event()
        self.ended = threading.Event()
        self._error = error
        self._raise_first = raise_first
        self.result: InvokeResult | None = None
        self.error: tuple[str, dict[str, Any]] | None = None
        self.first_byte_ms: float | None = None
        self.last_byte_ms: float | None = None
        self.payload: bytes | None = None

    def __iter__(self) -> Iterator[bytes]:
        if self._raise_first is not None:
            raise self._raise_first
        try:
            for i, chunk in enumerate(self.chunks):
                if i and not self.release[i].wait(10):
                    raise AssertionError(f"chunk {i} never released")
                if self.closed.is_set():
                    return
                self.sent[i].set()
                yield chunk
        finally:
            self.error = self._error
            self.result = InvokeResult(200, b"", "req-1", "1",
                                       function_error="Unhandled" if self._error else None)
            self.ended.set()

    def close(self) -> None:
        self.closed.set()
        for event in self.release:
            event.set()


class StandInEmulator:
    """``resolve``/``invoke`` (DryRun)/``invoke_stream`` for one function ``fn`` (alias live -> 1)."""

    def __init__(self) -> None:
        self.streams: list[StandInStream] = []
        self.calls: list[dict[str, Any]] = []
        self.throttle = False

    def resolve(self, name: str, qualifier: str | None) -> tuple[None, str, str | None]:
        if name != "fn":
            raise ResourceNotFoundException(f"Function not found: arn:aws:lambda:us-east-1:123456789012:function:{name}")
        return None, "1" if qualifier == "live" else "$LATEST", qualifier

    def invoke(self, name: str, payload: bytes | None = None, *, qualifier: str | None = None,
               invocation_type: str = "RequestResponse", client_context: str | None = None) -> InvokeResult:
        version = self.resolve(name, qualifier)[1]
        assert invocation_type == "DryRun"
        return InvokeResult(204, b"", "dry", version)

    def invoke_stream(self, name: str, payload: bytes | None = None, *, qualifier: str | None = None,
                      client_context: str | None = None) -> StandInStream:
        self.resolve(name, qualifier)
        if self.throttle:
            raise TooManyRequestsException("Rate Exceeded.", reason="ReservedFunctionConcurrentInvocationLimitExceeded")
        self.calls.append({"payload": payload, "qualifier": qualifier, "client_context": client_context})
        stream = self.streams.pop(0)
        stream.payload = payload
        return stream


@pytest.fixture
def standin(lambda_api) -> tuple[StandInEmulator, Any]:
    emu = StandInEmulator()
    return emu, lambda_api(emu)


def test_each_chunk_arrives_as_a_payload_chunk_before_the_next_exists(standin):
    emu, client = standin
    stream = StandInStream([b"one", b"two", b"three"])
    emu.streams.append(stream)
    ctx = base64.b64encode(json.dumps({"custom": {"k": "v"}}).encode()).decode()
    resp = client.invoke_with_response_stream(FunctionName="fn", Qualifier="live",
                                              Payload=b'{"q": 1}', ClientContext=ctx)
    assert resp["StatusCode"] == 200 and resp["ExecutedVersion"] == "1"
    assert resp["ResponseStreamContentType"] == "application/vnd.amazon.eventstream"
    assert emu.calls == [{"payload": b'{"q": 1}', "qualifier": "live", "client_context": ctx}]
    seen = []
    for i, event in enumerate(resp["EventStream"]):
        seen.append(event)
        if "PayloadChunk" in event:
            # chunk i+1 has not been produced yet: this event came on its own
            assert i + 1 >= len(stream.chunks) or not stream.sent[i + 1].is_set()
            if i + 1 < len(stream.release):
                stream.release[i + 1].set()
    assert [e["PayloadChunk"]["Payload"] for e in seen[:-1]] == [b"one", b"two", b"three"]
    assert seen[-1] == {"InvokeComplete": {"LogResult": ""}}  # no ErrorCode on success


def test_log_type_tail_fills_log_result(standin):
    emu, client = standin
    emu.streams.append(StandInStream([b"x"], gated=False))
    events = list(client.invoke_with_response_stream(FunctionName="fn", LogType="Tail")["EventStream"])
    log = base64.b64decode(events[-1]["InvokeComplete"]["LogResult"]).decode()
    assert "START RequestId: req-1" in log and "END RequestId: req-1" in log


def test_a_stream_that_fails_midway_ends_with_the_error_code(standin):
    emu, client = standin
    emu.streams.append(StandInStream([b"data: 1\n\n", b"event: error\n\n"], gated=False, error=(
        "Runtime.StreamError", {"errorType": "Runtime.StreamError", "errorMessage": "upstream reset"})))
    events = list(client.invoke_with_response_stream(FunctionName="fn")["EventStream"])
    assert [e["PayloadChunk"]["Payload"] for e in events[:-1]] == [b"data: 1\n\n", b"event: error\n\n"]
    assert events[-1]["InvokeComplete"] == {"ErrorCode": "Runtime.StreamError",
                                            "ErrorDetails": "upstream reset", "LogResult": ""}


def test_a_function_that_fails_before_any_byte_still_completes_with_its_error(standin):
    emu, client = standin
    emu.streams.append(StandInStream([], error=("Sandbox.Timedout", {
        "errorType": "Sandbox.Timedout", "errorMessage": "Task timed out after 3.00 seconds"})))
    events = list(client.invoke_with_response_stream(FunctionName="fn")["EventStream"])
    assert events == [{"InvokeComplete": {"ErrorCode": "Sandbox.Timedout", "LogResult": "",
                                          "ErrorDetails": "Task timed out after 3.00 seconds"}}]


def test_an_unknown_function_is_resource_not_found(standin):
    _, client = standin
    with pytest.raises(ClientError) as err:
        client.invoke_with_response_stream(FunctionName="nope")
    assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_throttling_before_the_stream_is_too_many_requests(standin):
    emu, client = standin
    emu.throttle = True
    with pytest.raises(client.exceptions.TooManyRequestsException) as err:
        client.invoke_with_response_stream(FunctionName="fn")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429


def test_an_error_raised_at_the_first_read_is_answered_as_invoke_answers_it(standin):
    emu, client = standin
    stream = StandInStream([b"x"], raise_first=TooManyRequestsException("Rate Exceeded."))
    emu.streams.append(stream)
    with pytest.raises(client.exceptions.TooManyRequestsException):
        client.invoke_with_response_stream(FunctionName="fn")
    assert stream.closed.is_set()


def test_dry_run_is_204_and_event_is_refused(standin):
    emu, client = standin
    resp = client.invoke_with_response_stream(FunctionName="fn", Qualifier="live", InvocationType="DryRun")
    assert resp["StatusCode"] == 204 and resp["ExecutedVersion"] == "1"
    assert list(resp["EventStream"]) == []
    with pytest.raises(ClientError) as err:  # not in the operation's enum, so botocore sends it as is
        client.invoke_with_response_stream(FunctionName="fn", InvocationType="Event")
    assert err.value.response["Error"]["Code"] == "InvalidParameterValueException"
    assert emu.calls == []


def test_a_client_that_goes_away_closes_the_stream(lambda_api):
    emu = StandInEmulator()
    server_client = lambda_api(emu)
    endpoint = server_client.meta.endpoint_url
    stream = StandInStream([b"a" * 1024, b"b" * 1024, b"c" * 1024])
    emu.streams.append(stream)
    host, port = endpoint.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /2021-11-15/functions/fn/response-streaming-invocations HTTP/1.1\r\n"
                 b"Host: x\r\nContent-Length: 2\r\n\r\n{}")
    assert sock.recv(64).startswith(b"HTTP/1.1 200")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # RST: the next write fails
    for event in stream.release:
        event.set()
    assert stream.closed.wait(10)


# ---- a real streaming function in a real execution environment ---------------------------------
def stream_code_dir(tmp_path: Path) -> Path:
    """A function's code folder: the ``functions`` package (linked) and the test handlers
    ``streamer``, ``url_streamer`` and ``basic`` (run under ``AWS_LAMBDA_EXEC_WRAPPER``, see
    ``test_emulator_streaming``)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "functions").symlink_to(Path(__file__).resolve().parents[2] / "functions")
    for name in ("streamer.py", "url_streamer.py", "basic.py"):
        shutil.copy(HANDLERS / name, code / name)
    return code


@pytest.fixture
def stream_code(tmp_path: Path) -> Path:
    return stream_code_dir(tmp_path)




@pytest.fixture
def real(make_emulator, lambda_api, stream_code) -> tuple[Any, Any]:
    emu = make_emulator()
    emu.add_function(_spec(stream_code))
    emu.add_function(_spec(stream_code, name="fail", handler="basic.fail"))
    return emu, lambda_api(emu)


def test_a_real_stream_reaches_boto3_event_by_event(real, tmp_path):
    # GIVEN a handler whose third chunk exists only once the client has seen the first two
    _, client = real
    gate = tmp_path / "gate"
    resp = client.invoke_with_response_stream(
        FunctionName="streamer", Qualifier="live", LogType="Tail",
        Payload=_event(chunks=4, gate=str(gate), gate_at=2))
    assert resp["StatusCode"] == 200 and resp["ExecutedVersion"] == "1"
    payloads, complete = [], None
    for event in resp["EventStream"]:
        if "PayloadChunk" in event:
            payloads.append(event["PayloadChunk"]["Payload"])
            if payloads[-1] == b"chunk-1":
                gate.write_text("go")  # only now can chunk 2 be made
        else:
            complete = event["InvokeComplete"]
    # THEN the prelude and each chunk came as its own event, none waited for the whole body
    assert payloads[0].endswith(b"\x00" * 8) and b'"statusCode":200' in payloads[0]
    assert payloads[1:] == [b"chunk-0", b"chunk-1", b"chunk-2", b"chunk-3"]  # not gate-timeout
    assert "ErrorCode" not in complete
    assert "REPORT RequestId:" in base64.b64decode(complete["LogResult"]).decode()


def test_a_real_stream_that_raises_midway_completes_with_its_error(real):
    _, client = real
    events = list(client.invoke_with_response_stream(
        FunctionName="streamer", Qualifier="live", Payload=_event(raise_after=1))["EventStream"])
    assert [e["PayloadChunk"]["Payload"] for e in events[1:-1]] == [b"chunk-0"]
    assert events[-1]["InvokeComplete"] == {"ErrorCode": "Runtime.StreamError",
                                            "ErrorDetails": "the model went away", "LogResult": ""}


def test_a_real_handler_error_and_a_buffered_answer(real):
    _, client = real
    failed = list(client.invoke_with_response_stream(FunctionName="fail", Qualifier="live",
                                                     Payload=b'{"order_id": 7}')["EventStream"])
    assert failed == [{"InvokeComplete": {"ErrorCode": "ValueError", "ErrorDetails": "bad order id 7",
                                          "LogResult": ""}}]
    buffered = list(client.invoke_with_response_stream(FunctionName="streamer", Qualifier="live",
                                                       Payload=_event(buffered=True))["EventStream"])
    assert json.loads(buffered[0]["PayloadChunk"]["Payload"])["buffered"] is True
    assert buffered[1:] == [{"InvokeComplete": {"LogResult": ""}}]


def test_real_errors_before_the_stream(real):
    emu, client = real
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke_with_response_stream(FunctionName="nope")
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke_with_response_stream(FunctionName="streamer", Qualifier="no-such-alias")
    with pytest.raises(client.exceptions.InvalidRequestContentException):
        client.invoke_with_response_stream(FunctionName="streamer", Payload=b"not json")
    emu.put_function_concurrency("streamer", 0)
    with pytest.raises(client.exceptions.TooManyRequestsException):
        client.invoke_with_response_stream(FunctionName="streamer", Qualifier="live")
