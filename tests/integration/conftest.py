"""Shared fixtures of the integration tests: the real GPU endpoint server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.gpu_endpoint.container import IntentService
from functions.gpu_endpoint.server import BackgroundServer, create_app

MODEL_DIR = Path(__file__).resolve().parents[2] / "layers" / "model" / "artifact"
#: Endpoint name the GPU server answers under (`POST /endpoints/{name}/invocations`).
GPU_ENDPOINT_NAME = "warmstart-overflow"


@pytest.fixture(scope="module")
def service() -> IntentService:
    """The endpoint's model service (CPU provider: this machine has no GPU), once per module."""
    return IntentService(MODEL_DIR, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def server(service: IntentService) -> Iterator[BackgroundServer]:
    """The GPU endpoint app (fault-injection API on) served on an ephemeral port."""
    app = create_app(service=service, endpoint_name=GPU_ENDPOINT_NAME, enable_fault_api=True)
    with BackgroundServer(app) as srv:
        yield srv
