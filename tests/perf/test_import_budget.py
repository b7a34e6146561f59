"""Import budget of the run-time toolkit, its entry point and agent handlers' inits.

The check that cannot flake: importing ``functions.runtime.<module>`` or (on the main thread)
an agent's handler module in a fresh process loads no third-party module; the entry point
(`functions.runtime.agent`) loads only the init-time part of the toolkit; a model-free agent
never loads the inference stack (onnxruntime, numpy, tokenizers: its function ships without
that layer). Import *time* is measured in ``bench/bench_init.py`` (ratios in one run), not
asserted here: a timed assertion flakes on a shared machine (load averages above 20 were seen
while writing this).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_MODULES = sorted(
    f"functions.runtime.{p.stem}"
    for p in (REPO_ROOT / "functions" / "runtime").glob("*.py")
    if p.stem != "__init__"
)
#: The reference (model) agent, and model-free agents: the test suite's own tiny one (always
#: there), the lookup agent and the streaming chat agent (``model=None``; when in the tree).
MODEL_AGENT = "functions.agent.handler"
MODEL_FREE_AGENTS = ["tests.perf.model_free_agent", "functions.lookup.handler",
                     "functions.chat.handler"]
#: What a model-free agent must never import (the inference layer it does not ship).
INFERENCE_STACK = ("onnxruntime", "numpy", "tokenizers")
#: Toolkit modules of the request path: loaded by the ``toolkit`` preload stage, never by the
#: init phase's own imports.
REQUEST_PATH_MODULES = ("functions.runtime.dispatch", "functions.runtime.admission",
                        "functions.runtime.admission.flow", "functions.runtime.admission.state",
                        "functions.runtime.overflow", "functions.runtime.telemetry",
                        "functions.runtime.events", "functions.runtime.asgi")

THIRD_PARTY = r"""
import importlib, json, sys
found = {{}}
for module in {modules!r}:
    before = set(sys.modules)
    importlib.import_module(module)
    new = {{m.split(".")[0] for m in set(sys.modules) - before}}
    found[module] = sorted(m for m in new if m not in sys.stdlib_module_names and m != "functions")
print(json.dumps(found))
"""

ENTRY_POINT = r"""
import json, sys
before = set(sys.modules)
import functions.runtime.agent
print(json.dumps(sorted(set(sys.modules) - before)))
"""

HANDLER_MAIN_THREAD = r"""
import importlib, importlib.util, json, sys, threading
seen = []
sys.addaudithook(lambda event, args: event == "import"
                 and threading.current_thread() is threading.main_thread() and seen.append(args[0]))
module = importlib.import_module(sys.argv[1])
loaded = {m.split(".")[0] for m in seen if m in sys.modules or importlib.util.find_spec(m.split(".")[0])}
print(json.dumps({
    "third_party": sorted(m for m in loaded if m not in sys.stdlib_module_names and m != "functions"),
    "toolkit": sorted(m for m in seen if m.startswith("functions.runtime.")),
    "background_preload": module.handler.preload.thread is not None,
}))
sys.stdout.flush()
import os; os._exit(0)  # do not wait for the background preload (the atexit hook would)
"""

# the whole init (pre-paid: every stage before the import returns; on-demand: the background
# preload awaited), then one request: what the execution environment holds by then
FULL_INIT = r"""
import importlib, json, sys
sys.path.insert(0, ".")
module = importlib.import_module(sys.argv[1])
h = module.handler
assert h.preload.wait_all(120.0), "preload did not finish"
from tests.conftest import adapt_event
response = h(adapt_event("http_api_v2.json", "GET", "/healthz"), None)
print("RESULT " + json.dumps({
    "loaded": sorted({m.split(".")[0] for m in sys.modules}),
    "stages": list(h.preload.stage_names),
    "resources": {k: str(v) for k, v in h.init_resources.items()},
    "status": response["statusCode"],
    "model_state": h.runtime.model_state(),
}))
sys.stdout.flush()
import os; os._exit(0)
"""


def _env(init_type: str = "on-demand") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_LAMBDA_"))}
    env["AWS_LAMBDA_INITIALIZATION_TYPE"] = init_type
    return env


def _run(code: str, *args: str, init_type: str = "on-demand") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO_ROOT, env=_env(init_type),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _agent_module(name: str) -> str:
    if importlib.util.find_spec(name.rpartition(".")[0]) is None or not (
            REPO_ROOT / (name.replace(".", "/") + ".py")).is_file():
        pytest.skip(f"{name} is not in this tree")
    return name


def test_the_toolkit_has_modules() -> None:
    assert {"functions.runtime.config", "functions.runtime.lifecycle", "functions.runtime.dispatch",
            "functions.runtime.agent"} <= set(RUNTIME_MODULES)


def test_runtime_modules_import_only_the_standard_library() -> None:
    # one fresh process; each module's new third-party modules are attributed to it
    found = json.loads(_run(THIRD_PARTY.format(modules=RUNTIME_MODULES)).stdout)
    assert set(found) == set(RUNTIME_MODULES)
    offenders = {module: loaded for module, loaded in found.items() if loaded}
    assert offenders == {}, f"third-party modules loaded at import: {offenders}"


def test_the_entry_point_imports_only_the_init_part_of_the_toolkit() -> None:
    loaded = set(json.loads(_run(ENTRY_POINT).stdout))
    assert "functions.runtime.agent" in loaded
    third_party = {m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"functions"}
    assert third_party == set()
    assert sorted(loaded & set(REQUEST_PATH_MODULES)) == []  # the toolkit stage loads those


@pytest.mark.parametrize("module", [MODEL_AGENT, *MODEL_FREE_AGENTS])
def test_handler_init_loads_no_third_party_module_on_the_main_thread(module: str) -> None:
    out = json.loads(_run(HANDLER_MAIN_THREAD, _agent_module(module)).stdout)
    assert out["third_party"] == []
    assert out["background_preload"] is True  # the init handed the loading to the preload
    assert "functions.runtime.agent" in out["toolkit"]
    assert sorted(set(out["toolkit"]) & set(REQUEST_PATH_MODULES)) == []


@pytest.mark.parametrize("init_type", ["on-demand", "provisioned-concurrency"])
@pytest.mark.parametrize("module", MODEL_FREE_AGENTS)
def test_a_model_free_agent_never_loads_the_inference_stack(module: str, init_type: str) -> None:
    """GIVEN a model-free agent (``model=None``), WHEN its whole init has run (pre-paid, or the
    on-demand background preload) and it answered a request, THEN its web stack is loaded but
    onnxruntime, numpy and tokenizers never were, and it has no model stage."""
    stdout = _run(FULL_INIT, _agent_module(module), init_type=init_type).stdout
    (line,) = [x for x in stdout.splitlines() if x.startswith("RESULT ")]  # not the log lines
    out = json.loads(line.removeprefix("RESULT "))
    assert out["status"] == 200 and out["model_state"] == "none"
    assert "model" not in out["stages"] and {"toolkit", "web"} <= set(out["stages"])
    assert {"fastapi", "mangum"} <= set(out["loaded"])  # the init did load the web stack
    assert sorted(set(out["loaded"]) & set(INFERENCE_STACK)) == []
    if init_type == "provisioned-concurrency":
        assert set(out["resources"].values()) == {"ready"}


OVERFLOW_PREWARM = r"""
import json, sys
from functions.runtime.overflow import OverflowClient
client = OverflowClient("ep", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
client.prewarm(1000.0)  # what the preload's overflow stage does (no connection is made)
print(json.dumps({"ready": client.client_ready,
                  "loaded": sorted(m for m in ("awscrt", "boto3", "botocore") if m in sys.modules)}))
"""


def test_the_overflow_client_prewarm_loads_awscrt_never_boto3() -> None:
    """The overflow stage makes the default client with awscrt alone (issue 20): boto3 and
    botocore (~300-400 ms in a fresh process, ``bench/results/overflow_client.md``) are not
    imported for it."""
    out = json.loads(_run(OVERFLOW_PREWARM).stdout)
    assert out == {"ready": True, "loaded": ["awscrt"]}
