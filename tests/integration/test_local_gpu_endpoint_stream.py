"""The local stack's GPU endpoint (`infra.local.services.GpuEndpointService`, a real process
started as ``python -m infra.local.gpu_endpoint_main``) serves SageMaker's streaming front end:
a real boto3 ``sagemaker-runtime`` client's ``InvokeEndpointWithResponseStream`` reads the
container's chat completions stream as ``PayloadPart`` events, as it does against AWS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from functions.runtime.overflow_stream import PartDecoder
from infra.local.gpu_endpoint_main import main
from infra.local.services import GPU_ENDPOINT_MODULE, GpuEndpointService
from tests.integration.conftest import MODEL_DIR

ENDPOINT = "warmstart-local-stream"
REQUEST = {"messages": [{"role": "user", "content": "where is my parcel"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def gpu() -> Iterator[GpuEndpointService]:
    service = GpuEndpointService(ENDPOINT, model_dir=MODEL_DIR,
                                 env={"WARMSTART_GPU_PROVIDERS": "CPUExecutionProvider"})
    service.start()
    yield service
    service.stop()


def sagemaker(url: str) -> Any:
    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=Config(retries={"total_max_attempts": 1}))


def test_the_local_stack_starts_the_endpoint_with_the_streaming_front_end() -> None:
    assert GpuEndpointService(ENDPOINT)._command()[1:3] == ["-m", GPU_ENDPOINT_MODULE]


def test_boto3_reads_the_local_endpoints_stream(gpu: GpuEndpointService) -> None:
    response = sagemaker(gpu.endpoint).invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, Body=json.dumps(REQUEST), ContentType="application/json",
        Accept="text/event-stream")
    assert response["ContentType"] == "text/event-stream"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    events = list(response["Body"])
    assert events and all(set(event) == {"PayloadPart"} for event in events)
    decoder = PartDecoder()
    parts = [p for e in events for p in decoder.feed(e["PayloadPart"]["Bytes"])]
    tokens = [p["choices"][0]["delta"].get("content") for p in parts]
    assert len([t for t in tokens if t]) == REQUEST["max_tokens"]
    assert b"data: [DONE]" in b"".join(e["PayloadPart"]["Bytes"] for e in events)


def test_the_local_endpoint_refuses_another_endpoint_name_as_sagemaker_does(
        gpu: GpuEndpointService) -> None:
    client = sagemaker(gpu.endpoint)
    with pytest.raises(client.exceptions.ValidationError):
        client.invoke_endpoint_with_response_stream(EndpointName="nope", Body=json.dumps(REQUEST))


def test_the_entry_point_refuses_bad_options_as_the_containers_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--port", "70000"], {}) == 2
    assert "--port must be 0..65535" in capsys.readouterr().err
