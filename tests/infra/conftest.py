"""Tool settings for the CDK tests (same as the Makefile's), so `pytest tests/infra` works outside make.

Each test module synthesizes once (module-scoped fixtures, see cdk_helpers.py). Bundling is skipped
(``aws:cdk:bundling-stacks = []``) except in ``test_layer_bundling.py``, which really pip-installs
the small forecast layer.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

for _key, _value in {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_RUNTIME_PACKAGE_CACHE_ROOT": str(REPO / ".cache" / "jsii"),
    "CDK_HOME": str(REPO / ".cache" / "cdk"),
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "SAM_CLI_TELEMETRY": "0",
}.items():
    os.environ.setdefault(_key, _value)
