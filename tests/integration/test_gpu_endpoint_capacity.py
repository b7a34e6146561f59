"""The GPU endpoint as a SageMaker inference component with finite, planned capacity: the real
uvicorn server, the real model, the real boto3 ``sagemaker`` and ``sagemaker-runtime`` clients."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from functions.gpu_endpoint.__main__ import URL_PREFIX
from functions.gpu_endpoint.capacity import NO_CAPACITY_MESSAGE, InferenceComponentCapacity
from functions.gpu_endpoint.container import IntentService
from functions.gpu_endpoint.server import BackgroundServer, create_app
from infra.replay.client import parse_server_timing as _timing

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "layers" / "model" / "artifact"
ENDPOINT = "warmstart-overflow"
COMPONENT = "overflow-model"
TEXT = "I was charged twice on my credit card"


def _client(service_name: str, url: str) -> Any:
    return boto3.client(service_name, endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=Config(retries={"total_max_attempts": 1}, read_timeout=20))


def _invoke(url: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return dict(_client("sagemaker-runtime", url).invoke_endpoint(
        EndpointName=ENDPOINT, Body=json.dumps(body), ContentType="application/json", **kw))


def _serve(service: IntentService, **capacity: Any) -> tuple[BackgroundServer,
                                                              InferenceComponentCapacity]:
    ic = InferenceComponentCapacity(COMPONENT, endpoint_name=ENDPOINT, **capacity)
    return BackgroundServer(create_app(service=service, capacity=ic)), ic


@pytest.fixture
def scaled_to_zero(service: IntentService) -> Iterator[tuple[str, InferenceComponentCapacity]]:
    server, ic = _serve(service, copies=0, concurrent_requests_per_copy=1,
                        provisioning_delay_s=1.0)
    with server:
        yield server.url, ic


def test_scaled_to_zero_refuses_then_provisions_after_the_delay_and_answers(
    scaled_to_zero: tuple[str, InferenceComponentCapacity], service: IntentService,
) -> None:
    """GIVEN no copy WHEN invoked THEN ValidationError; WHEN the warmer's call raises the copy
    count to 1 THEN Updating with no copy serving (invocations still refused) until the
    provisioning delay is over, then InService and the invocation is answered."""
    url, ic = scaled_to_zero
    with pytest.raises(ClientError) as info:
        _invoke(url, {"text": TEXT}, InferenceComponentName=COMPONENT)
    assert info.value.response["Error"]["Code"] == "ValidationError"
    assert info.value.response["Error"]["Message"] == NO_CAPACITY_MESSAGE
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400

    sagemaker = _client("sagemaker", url)
    out = sagemaker.update_inference_component_runtime_config(
        InferenceComponentName=COMPONENT, DesiredRuntimeConfig={"CopyCount": 1})
    assert out["InferenceComponentArn"] == ic.arn
    described = sagemaker.describe_inference_component(InferenceComponentName=COMPONENT)
    assert described["InferenceComponentStatus"] == "Updating"
    assert described["RuntimeConfig"] == {"DesiredCopyCount": 1, "CurrentCopyCount": 0}
    assert described["EndpointName"] == ENDPOINT
    assert isinstance(described["CreationTime"], dt.datetime)  # boto3 parsed the epoch float
    assert described["CreationTime"].timestamp() == pytest.approx(ic.creation_time_s, abs=1e-3)
    assert described["LastModifiedTime"] >= described["CreationTime"]
    with pytest.raises(ClientError, match="no capacity"):
        _invoke(url, {"text": TEXT}, InferenceComponentName=COMPONENT)

    deadline = time.monotonic() + 10.0
    while described["InferenceComponentStatus"] != "InService" and time.monotonic() < deadline:
        time.sleep(0.05)
        described = sagemaker.describe_inference_component(InferenceComponentName=COMPONENT)
    assert described["InferenceComponentStatus"] == "InService"
    assert described["RuntimeConfig"] == {"DesiredCopyCount": 1, "CurrentCopyCount": 1}
    answered = _invoke(url, {"text": TEXT}, InferenceComponentName=COMPONENT)
    assert json.loads(answered["Body"].read()) == service.answer(TEXT)
    timing = _timing(answered["ResponseMetadata"]["HTTPHeaders"]["server-timing"])
    assert set(timing) == {"queue", "infer"} and timing["queue"] == 0.0

    state = httpx.get(f"{url}/_capacity", timeout=5).json()
    assert (state["inference_component"], state["desired"], state["in_service"]) == (
        COMPONENT, 1, 1)
    assert (state["concurrent_requests_per_copy"], state["provisioning_delay_s"]) == (1, 1.0)
    assert [(row["desired"], row["in_service"]) for row in state["history"]] == [
        (0, 0), (1, 0), (1, 1)]
    assert state["history"][2]["at"] - state["history"][1]["at"] == pytest.approx(1.0)
    assert state["billed_copy_s"] >= 1.0  # billed from the request, provisioning included


def test_one_slot_queues_the_second_invocation_for_the_first_ones_whole_answer(
    service: IntentService,
) -> None:
    """GIVEN 1 copy x 1 slot WHEN two invocations with a 300 ms tool call arrive together
    THEN one is served at once and the other waits for its slot (inference + tool call), as
    each reports in ``Server-Timing: queue``."""
    server, ic = _serve(service, copies=1, concurrent_requests_per_copy=1)
    with server, ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(_invoke, server.url, {"text": TEXT, "tool_ms": 300},
                               InferenceComponentName=COMPONENT) for _ in range(2)]
        replies = [f.result() for f in futures]
    queues = sorted(_timing(r["ResponseMetadata"]["HTTPHeaders"]["server-timing"])["queue"]
                    for r in replies)
    assert queues[0] == 0.0
    assert queues[1] >= 250.0
    assert all(json.loads(r["Body"].read()) == service.answer(TEXT) for r in replies)
    assert (ic.in_flight(), ic.queue_length()) == (0, 0)


def test_invocation_errors_with_a_capacity(service: IntentService) -> None:
    server, ic = _serve(service, copies=0)
    with server:
        with pytest.raises(ClientError) as info:  # no InferenceComponentName
            _invoke(server.url, {"text": TEXT})
        assert info.value.response["Error"]["Code"] == "ValidationError"
        assert "Inference Component Name header is required" in str(info.value)
        with pytest.raises(ClientError) as info:
            _invoke(server.url, {"text": TEXT}, InferenceComponentName="another-model")
        assert info.value.response["Error"]["Code"] == "ValidationError"
        assert "Inference Component another-model" in str(info.value)
        with pytest.raises(ClientError, match="Endpoint nope"):
            _client("sagemaker-runtime", server.url).invoke_endpoint(
                EndpointName="nope", Body=b"{}", InferenceComponentName=COMPONENT)
        # the container route is gated too
        reply = httpx.post(f"{server.url}/invocations", json={"text": TEXT}, timeout=10)
        assert reply.status_code == 400
        assert reply.headers["x-amzn-errortype"] == "ValidationError"
        assert reply.json()["message"] == NO_CAPACITY_MESSAGE
        assert (ic.in_flight(), ic.queue_length(), len(ic.history())) == (0, 0, 1)
    with pytest.raises(ValueError, match="is not the inference component's endpoint"):
        create_app(service=service, endpoint_name="other", capacity=ic)


def test_malformed_control_requests_get_400s_and_change_nothing(service: IntentService) -> None:
    server, ic = _serve(service, copies=1)
    with server:
        sagemaker = _client("sagemaker", server.url)
        with pytest.raises(ClientError) as info:
            sagemaker.describe_inference_component(InferenceComponentName="missing")
        assert info.value.response["Error"]["Code"] == "ValidationException"
        assert "Could not find inference component" in info.value.response["Error"]["Message"]
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        with pytest.raises(ClientError) as info:
            sagemaker.describe_endpoint(EndpointName=ENDPOINT)  # an operation not served
        assert info.value.response["Error"]["Code"] == "UnknownOperationException"
        target = {"X-Amz-Target": "SageMaker.UpdateInferenceComponentRuntimeConfig",
                  "Content-Type": "application/x-amz-json-1.1"}
        cases = [
            ({}, b"{}", "UnknownOperationException"),
            (target, b"{not json", "SerializationException"),
            (target, b"[]", "SerializationException"),
            (target, json.dumps({"InferenceComponentName": COMPONENT,
                                 "DesiredRuntimeConfig": {"CopyCount": -2}}).encode(),
             "ValidationException"),
            (target, json.dumps({"InferenceComponentName": COMPONENT}).encode(),
             "ValidationException"),
        ]
        for headers, body, kind in cases:
            reply = httpx.post(f"{server.url}/", headers=headers, content=body, timeout=5)
            assert reply.status_code == 400, (headers, body)
            assert reply.json()["__type"] == kind, (headers, body)
        assert (ic.desired(), len(ic.history())) == (1, 1)


def test_without_a_capacity_no_control_plane_is_served(service: IntentService) -> None:
    with BackgroundServer(create_app(service=service, endpoint_name=ENDPOINT)) as server:
        assert httpx.get(f"{server.url}/_capacity", timeout=5).status_code == 404
        assert httpx.post(f"{server.url}/", content=b"{}", timeout=5).status_code in (404, 405)
        out = _invoke(server.url, {"text": TEXT})  # always on: no header needed, no queue
        assert "queue" not in _timing(out["ResponseMetadata"]["HTTPHeaders"]["server-timing"])


def _entry(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1", "WARMSTART_MODEL_DIR": str(MODEL_DIR),
           "WARMSTART_GPU_PROVIDERS": "CPUExecutionProvider"}
    env.pop("WARMSTART_OVERFLOW_ENDPOINT_NAME", None)
    return subprocess.Popen([sys.executable, "-m", "functions.gpu_endpoint", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("args", "message"), [
    (["--inference-component", COMPONENT], "--inference-component needs --endpoint-name"),
    (["--inference-component", COMPONENT, "--endpoint-name", ENDPOINT, "--copies", "-1"],
     "copies must be >= 0"),
    (["--inference-component", COMPONENT, "--endpoint-name", ENDPOINT,
      "--concurrent-requests-per-copy", "0"], "concurrent_requests_per_copy must be"),
    (["--inference-component", "bad_name", "--endpoint-name", ENDPOINT], "name pattern"),
])
def test_entry_point_refuses_bad_capacity_options(args: list[str], message: str) -> None:
    proc = _entry(*args)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and message in stderr


def test_entry_point_serves_an_inference_component(service: IntentService) -> None:
    """GIVEN ``--inference-component`` with 1 copy WHEN the warmer's client raises it to 2
    THEN the control plane and ``/_capacity`` say so, with the options' slot count and delay."""
    proc = _entry("--port", "0", "--endpoint-name", ENDPOINT, "--inference-component", COMPONENT,
                  "--copies", "1", "--concurrent-requests-per-copy", "2",
                  "--provisioning-delay-s", "30")
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith(URL_PREFIX), proc.stderr.read()  # type: ignore[union-attr]
        url = line[len(URL_PREFIX):]
        sagemaker = _client("sagemaker", url)
        described = sagemaker.describe_inference_component(InferenceComponentName=COMPONENT)
        assert described["InferenceComponentStatus"] == "InService"
        assert described["RuntimeConfig"] == {"DesiredCopyCount": 1, "CurrentCopyCount": 1}
        sagemaker.update_inference_component_runtime_config(
            InferenceComponentName=COMPONENT, DesiredRuntimeConfig={"CopyCount": 2})
        state = httpx.get(f"{url}/_capacity", timeout=5).json()
        assert (state["desired"], state["in_service"]) == (2, 1)
        assert (state["concurrent_requests_per_copy"], state["provisioning_delay_s"]) == (2, 30.0)
        out = _invoke(url, {"text": TEXT}, InferenceComponentName=COMPONENT)
        assert json.loads(out["Body"].read()) == service.answer(TEXT)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def test_the_runtime_overflow_client_names_the_inference_component(
    scaled_to_zero: tuple[str, InferenceComponentCapacity], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handler's OverflowClient (``WARMSTART_OVERFLOW_INFERENCE_COMPONENT``) sends
    ``InferenceComponentName``: refused while no copy serves, answered once one does; without
    the name the component endpoint refuses it."""
    from functions.runtime.overflow import OverflowClient, OverflowFailure

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    url, ic = scaled_to_zero
    named = OverflowClient(ENDPOINT, endpoint_url=url, region_name="us-east-1",
                           inference_component=COMPONENT, max_attempts=1)
    unnamed = OverflowClient(ENDPOINT, endpoint_url=url, region_name="us-east-1", max_attempts=1)
    with pytest.raises(OverflowFailure, match="no capacity"):
        named.invoke({"text": TEXT}, budget_ms=5000)
    ic.set_desired(1)
    deadline = time.monotonic() + 10
    while ic.in_service() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ic.in_service() == 1
    result = named.invoke({"text": TEXT}, budget_ms=5000)
    assert result.body["intent"] and result.body["degraded"] is False
    with pytest.raises(OverflowFailure, match="[Ii]nference [Cc]omponent"):
        unnamed.invoke({"text": TEXT}, budget_ms=5000)
    with pytest.raises(ValueError, match="inference_component"):
        OverflowClient(ENDPOINT, inference_component="")


def _plan(capacity: int) -> Any:
    from warmers.plan.endpoint import EndpointPlan

    return EndpointPlan(ENDPOINT, capacity, 1.1267 * capacity, 1.0, 12.0, float("inf"), True,
                        0.0, 0.0, "test")


def test_the_warmers_sagemaker_actuator_sets_the_copies_and_reads_what_serves(
    scaled_to_zero: tuple[str, InferenceComponentCapacity],
) -> None:
    """``SageMakerCapacityActuator`` (the local warmer's: moto's Application Auto Scaling has no
    inference-component dimension) through the real boto3 ``sagemaker`` client: a copy asked
    for is ``provisioning`` until it serves, a scale-in to 0 is ``zero`` at once, an endpoint
    that does not answer leaves the last capacity with the state ``unknown``."""
    from warmers.actuators import SageMakerCapacityActuator
    from warmers.plan.endpoint import EndpointPolicy

    url, ic = scaled_to_zero
    policy = EndpointPolicy(ENDPOINT, ("intent:live",), target="inference_component",
                            inference_component=COMPONENT)
    actuator = SageMakerCapacityActuator(_client("sagemaker", url), sleep=lambda _s: None)
    result, state = actuator.apply(_plan(1), policy, now_s=1.0, last=None)
    assert result.applied and (state.capacity, state.state) == (0, "provisioning")
    assert ic.desired() == 1 and ic.in_service() == 0
    deadline = time.monotonic() + 10
    while ic.in_service() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    sent: list[str] = []
    actuator._sm.meta.events.register(  # count the update calls the actuator makes
        "before-call.sagemaker.UpdateInferenceComponentRuntimeConfig",
        lambda **_: sent.append("update"))
    result, again = actuator.apply(_plan(1), policy, now_s=2.0, last=state)
    assert (again.capacity, again.state) == (1, "in_service") and ic.desired() == 1
    assert sent == []  # the plan is what the endpoint is asked for already: no update
    _, zero = actuator.apply(_plan(0), policy, now_s=3.0, last=again)
    assert (zero.capacity, zero.state) == (0, "zero") and ic.in_service() == 0
    assert sent == ["update"]
    dead = SageMakerCapacityActuator(_client("sagemaker", "http://127.0.0.1:9"), attempts=1,
                                     sleep=lambda _s: None)
    result, unknown = dead.apply(_plan(1), policy, now_s=4.0, last=again)
    assert not result.applied and (unknown.capacity, unknown.state) == (1, "unknown")
    assert "last capacity 1 kept" in result.detail


def test_a_throttled_sagemaker_update_changes_nothing_and_publishes_what_serves(
    scaled_to_zero: tuple[str, InferenceComponentCapacity],
) -> None:
    """SageMaker throttles the copy-count update on every retry: nothing changes on the
    endpoint, the run says it was not applied, and what serves (read after the refusal) is
    published, here no copy (the handlers degrade rather than overflow)."""
    from warmers.actuators import SageMakerCapacityActuator
    from warmers.endpoint_state import EndpointCapacity
    from warmers.plan.endpoint import EndpointPolicy

    url, ic = scaled_to_zero
    client = _client("sagemaker", url)
    calls: list[str] = []

    def throttle(**_: object) -> None:
        calls.append("update")
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}},
                          "UpdateInferenceComponentRuntimeConfig")

    client.meta.events.register(
        "before-call.sagemaker.UpdateInferenceComponentRuntimeConfig", throttle)
    policy = EndpointPolicy(ENDPOINT, ("intent:live",), target="inference_component",
                            inference_component=COMPONENT)
    actuator = SageMakerCapacityActuator(client, attempts=3, sleep=lambda _s: None)
    last = EndpointCapacity(0, "zero", 0.0)
    result, state = actuator.apply(_plan(2), policy, now_s=5.0, last=last)
    assert len(calls) == 3  # every attempt was made, each throttled
    assert not result.applied and "ThrottlingException" in result.detail
    assert (state.capacity, state.state) == (0, "zero") and ic.desired() == 0
    # a copy in service stays published as such while a later update is refused
    ic.set_desired(1)
    deadline = time.monotonic() + 10
    while ic.in_service() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    result, serving = actuator.apply(_plan(2), policy, now_s=6.0, last=state)
    assert not result.applied and (serving.capacity, serving.state) == (1, "in_service")


def test_a_client_that_disconnects_mid_answer_keeps_its_slot_until_the_work_ends(
    service: IntentService,
) -> None:
    """GIVEN 1 copy x 1 slot WHEN a client sends an invocation with an 800 ms tool call and
    closes its connection at once THEN the slot stays held until that work is over (a
    container keeps running a request whose client left), so the next invocation queues for
    it instead of running beside it."""
    import socket

    server, ic = _serve(service, copies=1, concurrent_requests_per_copy=1)
    body = json.dumps({"text": TEXT, "tool_ms": 800}).encode()
    with server:
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(
                f"POST /endpoints/{ENDPOINT}/invocations HTTP/1.1\r\nHost: x\r\n"
                f"Content-Type: application/json\r\nX-Amzn-SageMaker-Inference-Component: "
                f"{COMPONENT}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            deadline = time.monotonic() + 5.0
            while ic.in_flight() == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert ic.in_flight() == 1
        time.sleep(0.2)  # uvicorn has seen the disconnect
        assert ic.in_flight() == 1  # the work holds its slot
        reply = _invoke(server.url, {"text": TEXT}, InferenceComponentName=COMPONENT)
        queue_ms = _timing(reply["ResponseMetadata"]["HTTPHeaders"]["server-timing"])["queue"]
        assert queue_ms >= 300.0  # waited for the disconnected request's tool call
        assert (ic.in_flight(), ic.queue_length()) == (0, 0)
