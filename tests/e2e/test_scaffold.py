"""The scaffold end to end: ``warmstart new``, then with no other edit ``cdk synth``, ``warmstart
local up`` serving the new agent under its prefix, and the scaffolded test passing.

Runs in a copy of the project (the checkout is never written); the virtualenv, node_modules and
the pip wheelhouse are linked, not copied, so the synth bundles the layers offline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import project_copy

ROOT = Path(__file__).resolve().parents[2]
NAME = "scaffold_probe"
pytestmark = pytest.mark.slow


def _run(project: Path, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_LAMBDA_"))}
    env.update(JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", CDK_DISABLE_CLI_TELEMETRY="true",
               PYTHONPATH=str(project))
    return subprocess.run(list(args), cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)


@pytest.mark.skipif(not (ROOT / "node_modules" / ".bin" / "cdk").exists(), reason="CDK CLI not installed (make setup)")
def test_new_agent_synthesizes_serves_locally_and_its_test_passes(tmp_path: Path) -> None:
    # GIVEN a copy of the project, WHEN warmstart new scaffolds an agent
    project = project_copy(tmp_path)
    python = str(project / ".venv" / "bin" / "python")
    new = _run(project, python, "-m", "infra.cli", "new", NAME, timeout_s=60)
    assert new.returncode == 0, new.stderr
    assert (project / "functions" / NAME / "handler.py").is_file()

    # THEN its own test passes (as make test would run it)
    tested = _run(project, python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  f"tests/agents/test_{NAME}.py", timeout_s=180)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert "2 passed" in tested.stdout

    # AND the app synthesizes with the real CDK CLI: one more function, alias live, its route
    synth = _run(project, str(project / "node_modules" / ".bin" / "cdk"), "synth", "--quiet",
                 timeout_s=420)
    assert synth.returncode == 0, synth.stderr[-4000:]
    template = json.loads((project / "cdk.out" / "Warmstart.template.json").read_text())
    resources = template["Resources"].values()
    paths = {r.get("Metadata", {}).get("aws:cdk:path") for r in resources}
    assert f"Warmstart/Agent-{NAME}/Function/Resource" in paths
    assert f"Warmstart/Agent-{NAME}/Alias/Resource" in paths
    route_keys = {r["Properties"]["RouteKey"] for r in resources if r["Type"] == "AWS::ApiGatewayV2::Route"}
    assert {f"ANY /{NAME}", f"ANY /{NAME}/{{proxy+}}"} <= route_keys

    # AND warmstart local up serves it under its prefix
    endpoints_file = tmp_path / "endpoints.json"
    proc = subprocess.Popen(
        [python, "-m", "infra.cli", "local", "up", "--no-warmer", "--no-gpu-endpoint",
         "--endpoints-file", str(endpoints_file)],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("WARMSTART_")},
             "PYTHONPATH": str(project)})
    try:
        deadline = time.monotonic() + 180
        while not endpoints_file.exists():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "local up did not become ready in 180 s"
            time.sleep(0.5)
        gateway = json.loads(endpoints_file.read_text())["gateway"]
        health = httpx.get(f"{gateway}/{NAME}/healthz", timeout=60)
        assert health.status_code == 200, health.text
        assert health.json()["agent"] == NAME
        answer = httpx.post(f"{gateway}/{NAME}/v1/answer", json={"question": "hi"}, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-warmstart-path"] in ("local", "degraded")
        bad = httpx.post(f"{gateway}/{NAME}/v1/answer", json={"q": 1}, timeout=60)
        assert bad.status_code == 422 and bad.json()["error"] == "bad_request"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()[-3000:] if proc.stderr else ""
