"""The GPU endpoint server: a real uvicorn process/thread, the real model, the real boto3 client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from functions.gpu_endpoint.__main__ import URL_PREFIX
from functions.gpu_endpoint.container import FaultInjector, IntentService, select_providers
from functions.gpu_endpoint.server import BackgroundServer, create_app
from functions.intent_model.answers import MODEL_NAME

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "layers" / "model" / "artifact"
ENDPOINT = "warmstart-overflow"
ANSWER_KEYS = {"intent", "score", "scores", "degraded", "model"}


@pytest.fixture(autouse=True)
def _no_faults(server: BackgroundServer) -> Iterator[None]:
    yield
    httpx.delete(f"{server.url}/_faults", timeout=5)


def _runtime(url: str) -> object:
    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=Config(retries={"total_max_attempts": 1}))


def test_provider_selection_prefers_cuda_and_keeps_cpu() -> None:
    assert select_providers(["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert select_providers(["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert select_providers([]) == ["CPUExecutionProvider"]
    from functions.intent_model.model import MODEL_ID

    assert MODEL_NAME == MODEL_ID  # the agent and the endpoint name the same model


def test_module_entry_point_serves_ping_and_invocations_on_an_ephemeral_port(
    service: IntentService,
) -> None:
    """GIVEN `python -m functions.gpu_endpoint --port 0` WHEN it prints its URL THEN /ping and
    /invocations answer with the agent's model and answer format."""
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1", "WARMSTART_MODEL_DIR": str(MODEL_DIR),
           "WARMSTART_GPU_PROVIDERS": "CPUExecutionProvider"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "functions.gpu_endpoint", "--host", "127.0.0.1", "--port", "0",
         "--endpoint-name", ENDPOINT],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith(URL_PREFIX), proc.stderr.read()  # type: ignore[union-attr]
        url = line[len(URL_PREFIX):]
        ping = httpx.get(f"{url}/ping", timeout=10)
        assert ping.status_code == 200
        assert ping.json()["model"] == MODEL_NAME
        assert ping.json()["providers"] == ["CPUExecutionProvider"]
        text = "I was charged twice on my credit card"
        reply = httpx.post(f"{url}/invocations", json={"text": text}, timeout=10)
        assert reply.status_code == 200
        body = reply.json()
        assert set(body) == ANSWER_KEYS and body["degraded"] is False
        expected = service.answer(text)
        assert body["intent"] == expected["intent"]
        assert body["score"] == pytest.approx(expected["score"], abs=1e-5)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def test_entry_point_refuses_a_missing_model(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "functions.gpu_endpoint", "--model-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert f"no model.onnx in {tmp_path}" in proc.stderr


def test_boto3_sagemaker_runtime_client_works_against_the_local_endpoint(
    server: BackgroundServer, service: IntentService,
) -> None:
    client = _runtime(server.url)
    text = "hello there, good morning"
    out = client.invoke_endpoint(EndpointName=ENDPOINT, Body=json.dumps({"text": text}),
                                 ContentType="application/json")
    assert out["InvokedProductionVariant"] == "AllTraffic"
    assert out["ContentType"] == "application/json"
    body = json.loads(out["Body"].read())
    assert body == service.answer(text)


def test_sagemaker_error_shapes(server: BackgroundServer) -> None:
    client = _runtime(server.url)
    with pytest.raises(ClientError) as info:
        client.invoke_endpoint(EndpointName="nope", Body=b"{}")
    assert info.value.response["Error"]["Code"] == "ValidationError"
    assert "Endpoint nope" in info.value.response["Error"]["Message"]
    # a bad body makes the container answer 400, which SageMaker reports as ModelError 424
    with pytest.raises(ClientError) as info:
        client.invoke_endpoint(EndpointName=ENDPOINT, Body=b"not json")
    assert info.value.response["Error"]["Code"] == "ModelError"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert info.value.response["OriginalStatusCode"] == 400
    # too long a text: the model wrapper's limit, answered 413 by the container
    reply = httpx.post(f"{server.url}/invocations", json={"text": "x" * 5000}, timeout=10)
    assert reply.status_code == 413 and reply.json()["error"] == "bad_request"
    reply = httpx.post(f"{server.url}/invocations", json={"txt": "hi"}, timeout=10)
    # the shared intent contract's message (functions.intent_model.answers), as the agent says it
    assert reply.status_code == 400
    assert "body.text: a string is required" in reply.json()["message"]


def test_fault_api(server: BackgroundServer) -> None:
    assert httpx.post(f"{server.url}/_faults", json={"kind": "bogus"}).status_code == 400
    assert httpx.post(f"{server.url}/_faults", json={"kind": "throttled", "count": 1}).status_code == 200
    client = _runtime(server.url)
    with pytest.raises(ClientError) as info:
        client.invoke_endpoint(EndpointName=ENDPOINT, Body=b'{"text": "hi"}')
    assert info.value.response["Error"]["Code"] == "ThrottlingException"
    out = client.invoke_endpoint(EndpointName=ENDPOINT, Body=b'{"text": "hi"}')  # count used up
    assert json.loads(out["Body"].read())["model"] == MODEL_NAME
    with pytest.raises(ValueError, match="unknown fault 'x'"):
        FaultInjector().set("x")
    with pytest.raises(ValueError, match="needs model_dir"):
        create_app()


def _timing(header: str) -> dict[str, float]:
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        out[name] = float(dur)
    return out


def test_tool_ms_is_awaited_after_inference_like_the_local_path(
    server: BackgroundServer, service: IntentService,
) -> None:
    """GIVEN an overflowed request with ``tool_ms``, THEN the endpoint does the same simulated
    tool call as the agent's local path (after inference) and reports it in Server-Timing;
    the answer is unchanged; an out-of-range ``tool_ms`` is refused (400, ModelError via the
    SageMaker facade)."""
    text = "what is the weather tomorrow"
    reply = httpx.post(f"{server.url}/invocations", json={"text": text, "tool_ms": 150}, timeout=10)
    assert reply.status_code == 200 and reply.json() == service.answer(text)
    timing = _timing(reply.headers["server-timing"])
    assert set(timing) == {"infer", "tool"} and timing["tool"] >= 150.0
    plain = httpx.post(f"{server.url}/invocations", json={"text": text}, timeout=10)
    assert set(_timing(plain.headers["server-timing"])) == {"infer"}
    # through the real boto3 client: same header on the SageMaker facade
    out = _runtime(server.url).invoke_endpoint(
        EndpointName=ENDPOINT, Body=json.dumps({"text": text, "tool_ms": 120}),
        ContentType="application/json")
    assert json.loads(out["Body"].read()) == service.answer(text)
    headers = out["ResponseMetadata"]["HTTPHeaders"]
    assert _timing(headers["server-timing"])["tool"] >= 120.0
    for bad in (-1, 10_001, "5", True, None):
        reply = httpx.post(f"{server.url}/invocations", json={"text": text, "tool_ms": bad},
                           timeout=10)
        assert reply.status_code == 400 and "tool_ms" in reply.json()["message"], bad
    with pytest.raises(ClientError) as info:
        _runtime(server.url).invoke_endpoint(EndpointName=ENDPOINT,
                                             Body=json.dumps({"text": text, "tool_ms": -5}))
    assert info.value.response["OriginalStatusCode"] == 400
