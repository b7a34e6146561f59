"""Overflow for streaming routes (issue 24 item 4): ``InvokeEndpointWithResponseStream`` from the
toolkit's stdlib + awscrt client, against the GPU endpoint's own SageMaker facade served on
127.0.0.1 (real sockets, real event-stream bytes encoded by the local stack's encoder and
decoded by botocore), every fault path, and the real boto3 ``sagemaker-runtime`` client
reading the same facade (the wire is AWS's).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import boto3
import botocore.exceptions
import httpx
import pytest

from functions.gpu_endpoint.capacity import InferenceComponentCapacity
from functions.gpu_endpoint.server import BackgroundServer, create_app
from functions.gpu_endpoint.stream import GenerationConfig, StreamFaults
from functions.runtime.admission import EnvState, LatencyTracker, ModelState, RequestInfo
from functions.runtime.admission import Path as AdmissionPath
from functions.runtime.admission.flow import LocalUnavailable
from functions.runtime.admission.state import RouteHooks
from functions.runtime.agent import DeclarationError, Route, resolve_hooks
from functions.runtime.breaker import BreakerState
from functions.runtime.overflow import (
    OverflowClient,
    OverflowFailure,
    OverflowModelError,
    OverflowTimeout,
    OverflowUnavailable,
)
from functions.runtime.overflow_stream import (
    MAX_LINE_BYTES,
    STREAM_ERROR_TYPE,
    PartDecoder,
    open_overflow_stream,
    stream_overflow,
)
from functions.runtime.streaming import StreamedResponse
from infra.local.eventstream import encode_message
from tests.unit.runtime.admission_paths import serve_calls as admit_and_serve

ENDPOINT = "warmstart-stream"
REGION = "us-east-1"
TOKENS = 8
GENERATION = GenerationConfig(first_token_ms=20.0, token_interval_ms=2.0, max_tokens=TOKENS)
EXPECTED = ["Answer", " from", " the", " GPU", " endpoint", " to:", " hello", " world"]


class NoModel:
    """The GPU endpoint's service where only the streaming routes are called (they never use
    the intent model): what ``/ping`` reads."""

    active_providers: ClassVar[list[str]] = []
    load_ms = 0.0


def clock_ms() -> float:
    return time.perf_counter() * 1000.0


def token_event(part: Mapping[str, Any]) -> dict[str, str] | None:
    """The route's hook: one OpenAI chunk's content as ``{"token"}``; the role chunk and the
    final chunk carry none and are skipped."""
    content = part["choices"][0]["delta"].get("content")
    return {"token": content} if content else None


def chat_request(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": payload["question"]}]}


HOOKS = RouteHooks(overflow_event=token_event, overflow_request=chat_request)
PAYLOAD = {"question": "hello world"}


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def serve(**kwargs: Any) -> BackgroundServer:
    kwargs.setdefault("endpoint_name", ENDPOINT)
    kwargs.setdefault("event_encoder", encode_message)
    app = create_app(service=NoModel(), enable_fault_api=True, generation=GENERATION, **kwargs)
    return BackgroundServer(app)


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with serve() as srv:
        yield srv


@pytest.fixture()
def faults(server: BackgroundServer) -> Iterator[StreamFaults]:
    injector: StreamFaults = server._server.config.app.state.stream_faults
    injector.clear()
    injector.served = 0
    yield injector
    injector.clear()


def client(url: str, **kwargs: Any) -> OverflowClient:
    overflow = OverflowClient(ENDPOINT, endpoint_url=url, region_name=REGION, **kwargs)
    overflow.prewarm()
    return overflow


def opened(overflow: OverflowClient, *, budget_ms: float = 3000.0, hooks: RouteHooks = HOOKS,
           failures: list[OverflowFailure] | None = None, **kwargs: Any) -> StreamedResponse | None:
    return open_overflow_stream(overflow, hooks, PAYLOAD, clock_ms() + budget_ms,
                                feature="chat", on_failure=(failures.append if failures is not None
                                                            else None), **kwargs)


def sse_data(chunk: bytes) -> tuple[str | None, Any]:
    """(event name, decoded data) of one SSE event."""
    event, data = None, []
    for line in chunk.decode().strip("\n").split("\n"):
        field, _, value = line.partition(": ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    return event, json.loads("\n".join(data))


def drain(response: StreamedResponse) -> tuple[list[bytes], BaseException | None]:
    chunks: list[bytes] = []
    try:
        for chunk in response:
            chunks.append(chunk)  # noqa: PERF402 (keeps the chunks read before a failure)
    except OverflowFailure as exc:
        return chunks, exc
    return chunks, None


# -- the part decoder -----------------------------------------------------------------------
def test_parts_come_from_whole_lines_whatever_the_payload_parts_boundaries() -> None:
    stream = (b'data: {"a": 1}\n\n: a comment\nevent: delta\nid: 7\n'
              b'data: {"b": "x\\ny"}\n\n{"c": [1, 2]}\ndata: [DONE]\n\n')
    for size in (1, 3, 7, len(stream)):
        decoder = PartDecoder()
        parts = []
        for start in range(0, len(stream), size):
            parts += decoder.feed(stream[start:start + size])
        parts += decoder.finish()
        assert parts == [{"a": 1}, {"b": "x\ny"}, {"c": [1, 2]}], size


def test_a_last_json_line_without_its_newline_is_a_part() -> None:
    decoder = PartDecoder()
    assert decoder.feed(b'{"token": "a"}\n{"token": "b"}') == [{"token": "a"}]
    assert decoder.finish() == [{"token": "b"}]


@pytest.mark.parametrize(("line", "says"), [
    (b"data: not json\n", "not JSON"),
    (b"plain text\n", "not JSON"),
    (b'data: ["a list"]\n', "list, not a JSON object"),
    (b"data: 3\n", "int, not a JSON object"),
])
def test_a_part_that_is_not_a_json_object_is_a_model_error(line: bytes, says: str) -> None:
    with pytest.raises(OverflowModelError, match=says):
        PartDecoder().feed(line)


def test_a_line_longer_than_the_limit_is_a_model_error() -> None:
    decoder = PartDecoder()
    decoder.feed(b"data: " + b"x" * (MAX_LINE_BYTES // 2))
    with pytest.raises(OverflowModelError, match="line over"):
        decoder.feed(b"x" * (MAX_LINE_BYTES // 2 + 16))


# -- the stream -----------------------------------------------------------------------------
def test_the_stream_arrives_as_the_routes_events_and_its_connection_is_reused(
    server: BackgroundServer, faults: StreamFaults,
) -> None:
    overflow = client(server.url)
    latency = LatencyTracker(500.0)
    response = opened(overflow, latency=latency)
    assert response is not None
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["x-warmstart-path"] == "overflow"
    assert response.headers["server-timing"].startswith("overflow;dur=")
    chunks, failure = drain(response)
    assert failure is None
    assert [sse_data(c) for c in chunks] == [(None, {"token": t}) for t in EXPECTED]
    assert latency.count == 1
    snap = overflow.breaker.snapshot()
    assert (snap.state, snap.consecutive_failures) == (BreakerState.CLOSED, 0)
    runtime = overflow.sagemaker_runtime()
    assert len(runtime._idle) == 1
    again = opened(overflow)  # on the pooled connection
    assert again is not None and len(drain(again)[0]) == TOKENS


def test_the_first_event_is_read_before_the_call_returns(server: BackgroundServer,
                                                         faults: StreamFaults) -> None:
    overflow = client(server.url)
    response = opened(overflow)
    assert response is not None
    assert faults.served == 1
    # the first event is already in hand: the server may have gone on, the client has it
    first = next(iter(response))
    assert sse_data(first) == (None, {"token": "Answer"})
    response.close()


def test_a_client_that_goes_away_closes_the_socket_and_counts_nothing(
    server: BackgroundServer, faults: StreamFaults,
) -> None:
    overflow = client(server.url)
    overflow.breaker.record_failure()  # one failure before: a close must not reset or add
    response = opened(overflow)
    assert response is not None
    next(iter(response))
    response.close()
    assert list(response) == []
    snap = overflow.breaker.snapshot()
    assert (snap.state, snap.consecutive_failures) == (BreakerState.CLOSED, 1)
    assert overflow.sagemaker_runtime()._idle == []


def test_the_inference_component_is_named_when_the_endpoint_hosts_one(faults: StreamFaults) -> None:
    capacity = InferenceComponentCapacity("chat-ic", endpoint_name=ENDPOINT, copies=1,
                                          provisioning_delay_s=0.0)
    with serve(capacity=capacity) as srv:
        named = client(srv.url, inference_component="chat-ic")
        response = opened(named)
        assert response is not None and len(drain(response)[0]) == TOKENS
        failures: list[OverflowFailure] = []
        assert opened(client(srv.url), failures=failures) is None
        assert isinstance(failures[0], OverflowUnavailable)
        assert "Inference Component Name header is required" in failures[0].message


# -- before the first event: None, counted, nothing left open --------------------------------
@pytest.mark.parametrize(("fault", "kind", "says"), [
    ({"kind": "unavailable"}, OverflowUnavailable, "503 ServiceUnavailable"),
    ({"kind": "model_error"}, OverflowModelError, "424 ModelError"),
    ({"kind": "cut", "after_parts": 1}, OverflowTimeout, "dropped the connection"),
    ({"kind": "model_stream_error", "after_parts": 1}, OverflowModelError, "StreamBroken"),
    ({"kind": "internal_stream_failure", "after_parts": 0}, OverflowUnavailable,
     "InternalStreamFailure"),
    ({"kind": "slow_first_part", "delay_ms": 3000}, OverflowTimeout, "no part of its stream"),
])
def test_a_failure_before_the_first_event_gives_up_and_counts_one_failure(
    server: BackgroundServer, faults: StreamFaults, fault: dict[str, Any],
    kind: type[OverflowFailure], says: str,
) -> None:
    overflow = client(server.url)
    faults.set(fault.pop("kind"), count=1, **fault)
    failures: list[OverflowFailure] = []
    assert opened(overflow, budget_ms=400.0, failures=failures) is None
    assert [type(f) for f in failures] == [kind]
    assert says in failures[0].message
    assert overflow.breaker.snapshot().consecutive_failures == 1
    after = opened(overflow)  # nothing was left half-read on the client's connections
    assert after is not None and len(drain(after)[0]) == TOKENS


def test_an_unknown_endpoint_is_refused_before_the_stream(server: BackgroundServer,
                                                          faults: StreamFaults) -> None:
    overflow = OverflowClient("another-endpoint", endpoint_url=server.url, region_name=REGION)
    failures: list[OverflowFailure] = []
    assert opened(overflow, failures=failures) is None
    assert isinstance(failures[0], OverflowUnavailable)
    assert "400 ValidationError: Endpoint another-endpoint" in failures[0].message


def test_an_open_breaker_or_no_time_left_sends_nothing(server: BackgroundServer,
                                                       faults: StreamFaults) -> None:
    overflow = client(server.url)
    failures: list[OverflowFailure] = []
    assert opened(overflow, budget_ms=-5.0, failures=failures) is None
    assert isinstance(failures[0], OverflowTimeout)
    for _ in range(overflow.breaker.failure_threshold):
        overflow.breaker.record_failure()
    assert opened(overflow, failures=failures) is None
    assert "circuit breaker is open" in failures[1].message
    assert faults.served == 0


def test_a_hook_that_fails_before_the_first_event_gives_up(server: BackgroundServer,
                                                           faults: StreamFaults) -> None:
    overflow = client(server.url)
    failures: list[OverflowFailure] = []

    def broken_request(payload: Mapping[str, Any]) -> dict[str, Any]:
        raise KeyError("question")

    assert opened(overflow, hooks=HOOKS._replace(overflow_request=broken_request),
                  failures=failures) is None
    assert faults.served == 0  # nothing sent
    assert isinstance(failures[0], OverflowModelError) and "overflow_request" in failures[0].message

    def refuses(part: Mapping[str, Any]) -> Any:
        if part["choices"][0]["delta"].get("content"):
            raise ValueError("unexpected token")
        return None

    assert opened(overflow, hooks=HOOKS._replace(overflow_event=refuses), failures=failures) is None
    assert isinstance(failures[1], OverflowModelError) and "unexpected token" in failures[1].message


def test_a_stream_without_any_event_for_the_route_gives_up(server: BackgroundServer,
                                                           faults: StreamFaults) -> None:
    failures: list[OverflowFailure] = []
    assert opened(client(server.url), hooks=HOOKS._replace(overflow_event=lambda part: None),
                  failures=failures) is None
    assert "ended without an event" in failures[0].message


# -- after the first event: the error event, then the failure raised ------------------------
@pytest.mark.parametrize(("fault", "kind", "tag", "says"), [
    ({"kind": "cut", "after_parts": 4}, OverflowTimeout, "timeout_network", "dropped the connection"),
    ({"kind": "model_stream_error", "after_parts": 4, "error_code": "ModelInvocationTimeExceeded"},
     OverflowModelError, "model_error", "ModelStreamError (ModelInvocationTimeExceeded)"),
    ({"kind": "internal_stream_failure", "after_parts": 4}, OverflowUnavailable,
     "tool_unavailable", "InternalStreamFailure"),
    ({"kind": "stall", "after_parts": 4, "delay_ms": 3000}, OverflowTimeout, "timeout_network",
     "no part of its stream"),
])
def test_a_failure_mid_stream_ends_with_the_error_event_then_raises(
    server: BackgroundServer, faults: StreamFaults, fault: dict[str, Any],
    kind: type[OverflowFailure], tag: str, says: str,
) -> None:
    overflow = client(server.url)
    faults.set(fault.pop("kind"), count=1, **fault)
    response = opened(overflow, part_timeout_s=0.3)
    assert response is not None
    chunks, failure = drain(response)
    # parts 0-3: the role chunk (skipped) and 3 tokens; then the error event
    assert [sse_data(c) for c in chunks[:-1]] == [(None, {"token": t}) for t in EXPECTED[:3]]
    event, data = sse_data(chunks[-1])
    assert event == "error" and data["error"]["type"] == STREAM_ERROR_TYPE
    assert says in data["error"]["message"]
    assert isinstance(failure, kind) and failure.tag == tag
    assert overflow.breaker.snapshot().consecutive_failures == 1


def test_the_function_deadline_bounds_the_stream(server: BackgroundServer,
                                                 faults: StreamFaults) -> None:
    overflow = client(server.url)
    faults.set("stall", count=1, after_parts=2, delay_ms=3000)
    response = opened(overflow, stream_deadline_ms=clock_ms() + 300.0)
    assert response is not None
    chunks, failure = drain(response)
    assert isinstance(failure, OverflowTimeout)
    assert sse_data(chunks[-1])[0] == "error"


def test_a_part_the_hook_refuses_mid_stream_is_a_model_error(server: BackgroundServer,
                                                             faults: StreamFaults) -> None:
    def picky(part: Mapping[str, Any]) -> Any:
        content = part["choices"][0]["delta"].get("content")
        if content == " GPU":
            raise ValueError("no GPUs here")
        return {"token": content} if content else None

    response = opened(client(server.url), hooks=HOOKS._replace(overflow_event=picky))
    assert response is not None
    chunks, failure = drain(response)
    assert isinstance(failure, OverflowModelError) and "no GPUs here" in failure.message
    assert len(chunks) == 4 and sse_data(chunks[-1])[0] == "error"


def corrupting(after: int) -> Callable[[Mapping[str, str], bytes], bytes]:
    """An encoder whose messages after the first ``after`` carry a wrong message CRC."""
    sent = [0]

    def encode(headers: Mapping[str, str], payload: bytes) -> bytes:
        message = encode_message(headers, payload)
        sent[0] += 1
        if sent[0] <= after:
            return message
        crc = struct.unpack("!I", message[-4:])[0]
        return message[:-4] + struct.pack("!I", crc ^ 1)

    return encode


def test_a_corrupt_event_stream_is_refused_mid_stream(faults: StreamFaults) -> None:
    with serve(event_encoder=corrupting(3)) as srv:
        response = opened(client(srv.url))
        assert response is not None
        chunks, failure = drain(response)
    assert isinstance(failure, OverflowUnavailable) and "corrupt" in failure.message
    assert len(chunks) == 3  # 2 tokens, the error event


# -- the wire is AWS's -----------------------------------------------------------------------
def boto3_client(url: str) -> Any:
    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name=REGION,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def test_boto3_reads_the_facades_stream(server: BackgroundServer, faults: StreamFaults) -> None:
    response = boto3_client(server.url).invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, Body=json.dumps(chat_request(PAYLOAD)),
        ContentType="application/json", Accept="text/event-stream")
    assert response["ContentType"] == "text/event-stream"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    events = list(response["Body"])
    assert all(set(e) == {"PayloadPart"} for e in events)
    decoder = PartDecoder()
    parts = [p for e in events for p in decoder.feed(e["PayloadPart"]["Bytes"])]
    assert [token_event(p) for p in parts if token_event(p)] == [{"token": t} for t in EXPECTED]


def test_boto3_sees_the_facades_errors_as_aws_sends_them(server: BackgroundServer,
                                                         faults: StreamFaults) -> None:
    sagemaker = boto3_client(server.url)
    body = json.dumps(chat_request(PAYLOAD))
    faults.set("model_stream_error", count=1, after_parts=2)
    stream = sagemaker.invoke_endpoint_with_response_stream(EndpointName=ENDPOINT, Body=body)
    with pytest.raises(botocore.exceptions.EventStreamError) as info:
        list(stream["Body"])
    assert info.value.response["Error"]["Code"] == "ModelStreamError"
    faults.set("model_error", count=1)
    with pytest.raises(sagemaker.exceptions.ModelError):
        sagemaker.invoke_endpoint_with_response_stream(EndpointName=ENDPOINT, Body=body)
    with pytest.raises(sagemaker.exceptions.ValidationError):
        sagemaker.invoke_endpoint_with_response_stream(EndpointName="nope", Body=body)


def test_the_container_streams_its_own_route_and_refuses_a_bad_body(
    server: BackgroundServer, faults: StreamFaults,
) -> None:
    headers = {"Accept": "text/event-stream"}
    with httpx.stream("POST", f"{server.url}/invocations", json={"prompt": "hi"},
                      headers=headers, timeout=5) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(answer.iter_raw())
    assert raw.endswith(b"data: [DONE]\n\n")
    bad = httpx.post(f"{server.url}/invocations", json={"messages": []}, headers=headers, timeout=5)
    assert bad.status_code == 400 and bad.json()["error"] == "bad_request"


# -- declaration and import budget ----------------------------------------------------------
def test_a_streaming_route_declares_its_overflow_without_the_model() -> None:
    route = Route("POST", "/v1/chat", stream=True, validate=lambda body: body,
                  overflow_request=chat_request, overflow_event=token_event)
    assert resolve_hooks("chat", route)["overflow_event"] is token_event
    with pytest.raises(DeclarationError, match="overflow_event are for streaming routes"):
        Route("POST", "/v1/chat", overflow_event=token_event)
    with pytest.raises(DeclarationError, match="needs_model=True or stream=True"):
        Route("POST", "/v1/chat", overflow_request=chat_request)


def test_importing_the_stream_overflow_loads_neither_botocore_nor_awscrt() -> None:
    code = ("import sys, functions.runtime.overflow_stream; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('botocore', 'boto3', 'awscrt')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- through admission -------------------------------------------------------------------------
COLD = EnvState(ModelState.LOADING, load_remaining_ms=5000.0, infer_p95_ms=50.0,
                degrade_p95_ms=10.0)


def admitted(overflow: OverflowClient, first_token_ms: float = 1500.0) -> tuple[Any, Any]:
    """One cold request of a streaming route through `functions.runtime.admission.flow.serve_paths`: (outcome, the
    stream overflow it was given)."""
    adapter = stream_overflow(overflow, HOOKS, PAYLOAD, feature="chat")
    assert adapter is not None

    def run_local(wait_ms: float) -> Any:
        raise LocalUnavailable("the web stack is still loading")

    info = RequestInfo("/v1/chat", "P0", first_token_ms, time.time() * 1000.0, degradable=True)
    outcome = admit_and_serve(info, env=lambda: COLD, level="L0",
                              clock_ms=lambda: time.time() * 1000.0, run_local=run_local,
                              run_degraded=lambda: "degraded first event", overflow=adapter,
                              overflow_payload=PAYLOAD,
                              on_overflow=lambda result: adapter.response)
    return outcome, adapter


def test_a_cold_streaming_request_overflows_to_the_stream(server: BackgroundServer,
                                                          faults: StreamFaults) -> None:
    overflow = client(server.url)
    outcome, adapter = admitted(overflow)
    assert outcome.path is AdmissionPath.OVERFLOW
    assert isinstance(outcome.response, StreamedResponse)
    assert len(drain(outcome.response)[0]) == TOKENS
    assert overflow.stream_latency["chat"].count == 1  # the first event's time, measured
    assert adapter.state().latency_p95_ms == overflow.stream_latency["chat"].p95_ms


def test_a_stream_that_cannot_start_in_time_falls_back_to_the_degraded_first_event(
    server: BackgroundServer, faults: StreamFaults,
) -> None:
    faults.set("slow_first_part", count=1, delay_ms=3000)
    outcome, adapter = admitted(client(server.url), first_token_ms=600.0)
    assert outcome.path is AdmissionPath.DEGRADE
    assert outcome.response == "degraded first event"
    assert [f.tag for f in outcome.failures] == ["timeout_network"]
    assert adapter.response is None


def test_no_stream_overflow_without_the_hook_the_payload_or_a_client(
    server: BackgroundServer,
) -> None:
    overflow = client(server.url)
    assert stream_overflow(None, HOOKS, PAYLOAD, feature="chat") is None
    assert stream_overflow(overflow, HOOKS._replace(overflow_event=None), PAYLOAD,
                           feature="chat") is None
    assert stream_overflow(overflow, HOOKS, None, feature="chat") is None
