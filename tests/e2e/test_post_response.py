"""Answer first, finish after (issue 10): the toolkit's internal extension in a real execution
environment of the emulator (Runtime and Extensions API), with the reference agent and the
local GPU endpoint reached through boto3.

A cold request that overflows gets its answer as soon as the runtime posts it; the preload
goes on in the invocation's post-response phase (billed: REPORT's Duration and
PostRuntimeExtensionsDuration include it); the environment is busy meanwhile, then the next
request is served locally by the same environment. ``before`` holds the answer back instead.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local.emulator import Emulator
from infra.local.services import GpuEndpointService
from infra.local.spec import FunctionSpec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
HANDLER = "functions.agent.handler.handler"
SLA_MS = 4000


def intent_event(text: str = "where is my package") -> bytes:
    now = int(time.time() * 1000)
    return json.dumps({
        "version": "2.0", "routeKey": "$default", "rawPath": "/v1/intent", "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/v1/intent", "protocol": "HTTP/1.1",
                                    "sourceIp": "127.0.0.1", "userAgent": "test"},
                           "requestId": "r", "routeKey": "$default", "stage": "$default",
                           "timeEpoch": now},
        "body": json.dumps({"text": text}), "isBase64Encoded": False}).encode()


@pytest.fixture(scope="module")
def gpu() -> Iterator[GpuEndpointService]:
    service = GpuEndpointService()
    service.start()
    yield service
    service.stop()


#: A calibration whose model stage takes 20 s: local cannot fit the SLA, so admission (local
#: first) overflows the first request at once; the test is about what happens after the answer.
SLOW_MODEL_CALIBRATION = json.dumps({
    "version": 1, "agent": "intent", "memory_mb": 2048, "machine": "test host",
    "measured_at": dt.datetime.now(dt.UTC).isoformat(), "stage_p95_ms": {"model": 20_000.0},
    "overflow_p95_ms": None})


def add_agent(emu: Emulator, name: str, gpu: GpuEndpointService, finish: str) -> None:
    emu.add_function(FunctionSpec(
        name=name, handler=HANDLER, code_dir=ROOT, memory_mb=2048, timeout_s=30,
        environment={"WARMSTART_SLA_MS": str(SLA_MS), "WARMSTART_FINISH_PRELOAD": finish,
                     "WARMSTART_CALIBRATION": SLOW_MODEL_CALIBRATION,
                     "WARMSTART_OVERFLOW_ENDPOINT_NAME": gpu.endpoint_name,
                     "WARMSTART_OVERFLOW_ENDPOINT_URL": gpu.endpoint,
                     "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                     "AWS_REGION": "us-east-1", "POWERTOOLS_SERVICE_NAME": name}))


def answer(result: Any) -> tuple[dict[str, Any], dict[str, str]]:
    payload = json.loads(result.payload)
    return json.loads(payload["body"]), payload["headers"]


def test_a_cold_overflow_is_answered_at_once_and_the_preload_finishes_after_it(
        make_emulator: Any, gpu: GpuEndpointService) -> None:
    emu = make_emulator()
    finals: list[Any] = []
    done = threading.Event()

    def listen(record: Any) -> None:
        finals.append(record)
        done.set()

    emu.add_listener(listen)
    add_agent(emu, "answer-first", gpu, "after")
    # WHEN the first request of a new function arrives
    cold = emu.invoke("answer-first", intent_event())
    body, headers = answer(cold)
    # THEN it is a cold start answered by overflow, with no wait for the preload in it
    assert cold.cold_start and headers["x-warmstart-path"] == "overflow", headers
    assert body["intent"] == "check_order_status" and body["degraded"] is False
    assert "preload;dur=" not in headers.get("server-timing", "")
    assert cold.report is not None and cold.report.post_runtime_extensions_duration_ms is None
    # the invoke phase goes on after the answer: the final REPORT bills the post-response
    # phase (the model loading) on top of the answer's duration
    assert done.wait(60), "the post-response phase never ended"
    final = next(r for r in finals if r.request_id == cold.request_id)
    assert final.report.post_runtime_extensions_duration_ms > 0
    assert final.report.duration_ms > cold.report.duration_ms
    assert final.report.status == "success"
    # the next request finds the model loaded in the same environment
    warm = emu.invoke("answer-first", intent_event("I want a refund for my order"))
    body, headers = answer(warm)
    assert not warm.cold_start and warm.environment_id == cold.environment_id
    assert headers["x-warmstart-path"] == "local" and body["intent"] == "refund_request"


def test_before_holds_the_answer_back_for_the_preload(make_emulator: Any,
                                                     gpu: GpuEndpointService) -> None:
    emu = make_emulator()
    add_agent(emu, "before", gpu, "before")
    cold = emu.invoke("before", intent_event())
    _, headers = answer(cold)
    assert cold.cold_start and headers["x-warmstart-path"] == "overflow", headers
    assert "preload;dur=" in headers["server-timing"]  # the wait is in the answer
    # no extension works after the answer: the report handed back with it is already final
    assert cold.report is not None and cold.report.final
