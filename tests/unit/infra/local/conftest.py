"""The real CDK app synthesized once, in process, for the local stack's unit tests.

Bundling is skipped (``aws:cdk:bundling-stacks = []``, see ``tests/infra/cdk_helpers.py``), so
the synth needs no pip or Docker and works on a fresh clone without ``cdk.out``. The variant
turns on everything the local stack reads: provisioned concurrency on the agent's alias, the
warmer function (its ``WARMSTART_WARMER_CONFIG``) and the GPU endpoint (the overflow variable).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]

for _key, _value in {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_RUNTIME_PACKAGE_CACHE_ROOT": str(REPO / ".cache" / "jsii"),
    "CDK_HOME": str(REPO / ".cache" / "cdk"),
    "CDK_DISABLE_CLI_TELEMETRY": "true",
}.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def synthesized_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``Warmstart.template.json`` of the real app (strategy provisioned, warmer and GPU endpoint on)."""
    from tests.infra.cdk_helpers import synth

    result = synth(tmp_path_factory.mktemp("cdk.out"), nag=False, strategy="provisioned",
                   overrides={"warmer.enabled": True, "gpu_endpoint.enabled": True})
    assert result.error is None, result.error
    yield result.template_path
