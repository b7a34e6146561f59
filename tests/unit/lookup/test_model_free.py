"""The lookup agent is model-free: a fresh execution environment (a new process, the default
on-demand init) inits, serves every route, and never imports numpy or onnxruntime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from infra.local.tool_stub import ToolStub
from tests.conftest import REPO_ROOT

SCRIPT = textwrap.dedent("""
    import json, sys
    from tests.conftest import LambdaContext, adapt_event

    from functions.lookup.handler import handler  # the init phase (on-demand)

    def invoke(method, path, body=None):
        response = handler(adapt_event("http_api_v2.json", method, path, body), LambdaContext())
        return response["statusCode"], response["headers"].get("x-warmstart-path")

    out = {"cold": invoke("POST", "/v1/lookup", {"order_id": "A-1001"})}
    out["preloaded"] = handler.preload.wait_all(60.0)
    out["warm"] = [invoke("POST", "/v1/lookup", {"order_id": "B-2002"}),
                   invoke("GET", "/v1/orders/C-3003"), invoke("GET", "/healthz"),
                   invoke("GET", "/capabilities")]
    out["init_type"] = str(handler.environment.init_type)
    out["heavy"] = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "onnxruntime",
                                                                         "tokenizers"))
    print(json.dumps(out))
""")


def test_a_fresh_environment_imports_no_numpy_or_onnxruntime(stub: ToolStub) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WARMSTART_", "AWS_LAMBDA_", "LOOKUP_"))}
    env.update({"LOOKUP_TOOL_URL": stub.url, "PYTHONPATH": str(REPO_ROOT),
                "POWERTOOLS_SERVICE_NAME": "lookup"})
    proc = subprocess.run([sys.executable, "-c", SCRIPT], check=False, cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["init_type"] == "on-demand" and out["preloaded"] is True
    assert out["cold"][0] == 200  # answered while the web stack loaded (locally or degraded)
    assert out["warm"] == [[200, "local"]] * 4
    assert out["heavy"] == []
    assert "B-2002" in stub.requests and "C-3003" in stub.requests
