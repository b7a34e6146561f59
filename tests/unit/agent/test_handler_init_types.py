"""Init by init type, in fresh processes (the handler module does its init at import).

on-demand: the import loads no third-party module on the main thread and leaves the web stack
and the model to a background thread; the first invocation is the cold start.
provisioned-concurrency / snap-start: everything is loaded before the import returns and no
invocation is a cold start; under snap-start the snapshot-restore-py hooks renew the identity.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = r"""
import json, sys, threading
main_thread_imports = []
def audit(event, args):
    if event == "import" and threading.current_thread() is threading.main_thread():
        main_thread_imports.append(args[0])
sys.addaudithook(audit)

from functions.agent.handler import handler as h

top = {m.split(".")[0] for m in main_thread_imports}
import importlib.util
# an import attempt of a module that does not exist (copy.py tries "org.python.core") loads nothing
third_party = sorted(
    m for m in top
    if m not in sys.stdlib_module_names and m != "functions" and importlib.util.find_spec(m)
)
out = {
    "init_resources": {k: str(v) for k, v in h.init_resources.items()},
    "background_thread": h.preload.thread is not None,
    "main_thread_third_party": third_party,
    "init_ms": h.environment.init_duration_ms,
}
import snapshot_restore_py
out["hooks"] = [len(snapshot_restore_py.get_before_snapshot()), len(snapshot_restore_py.get_after_restore())]
first_id = h.environment.environment_id
if out["hooks"][0]:
    for func, args, kwargs in snapshot_restore_py.get_before_snapshot():
        func(*args, **kwargs)
    for func, args, kwargs in snapshot_restore_py.get_after_restore():
        func(*args, **kwargs)
out["id_renewed"] = h.environment.environment_id != first_id
out["ping"] = h({"warmstart": {"ping": True}}, None)["warmstart"]
from tests.conftest import adapt_event
response = h(adapt_event("http_api_v2.json", "POST", "/v1/intent", {"text": "cancel my order please"}), None)
out["status"] = response["statusCode"]
out["intent"] = json.loads(response["body"]).get("intent")
out["restored"] = h.environment.restored
print("RESULT " + json.dumps(out))
"""


def run_handler(init_type: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_LAMBDA_"))}
    env.update(AWS_LAMBDA_INITIALIZATION_TYPE=init_type, ORT_DISABLE_TELEMETRY="1")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return {t: run_handler(t) for t in ("on-demand", "provisioned-concurrency", "snap-start")}


def test_on_demand_init_returns_before_loading(results: dict[str, dict[str, Any]]) -> None:
    out = results["on-demand"]
    # THEN the init imported only the standard library and the toolkit on the main thread
    assert out["main_thread_third_party"] == []
    assert out["background_thread"] is True
    assert set(out["init_resources"].values()) == {"not_started"}
    assert out["hooks"] == [0, 0]
    # AND the first invocation (a ping here) is the cold start, and it waits for the preload
    assert out["ping"]["cold_start"] is True and out["ping"]["ready"] is True
    assert (out["status"], out["intent"]) == (200, "cancel_order")


@pytest.mark.parametrize("init_type", ["provisioned-concurrency", "snap-start"])
def test_prepaid_init_loads_everything_before_returning(
    results: dict[str, dict[str, Any]], init_type: str
) -> None:
    out = results[init_type]
    assert out["background_thread"] is False
    assert out["init_resources"] == {"toolkit": "ready", "web": "ready", "telemetry": "ready", "model": "ready"}
    assert {"fastapi", "mangum", "onnxruntime"} <= set(out["main_thread_third_party"])
    assert out["ping"]["cold_start"] is False and out["ping"]["ready"] is True
    assert out["ping"]["init_type"] == init_type
    assert (out["status"], out["intent"]) == (200, "cancel_order")


def test_snap_start_registers_hooks_that_renew_the_identity(results: dict[str, dict[str, Any]]) -> None:
    assert results["snap-start"]["hooks"] == [1, 1]
    assert results["snap-start"]["id_renewed"] is True and results["snap-start"]["restored"] is True
    assert results["provisioned-concurrency"]["hooks"] == [0, 0]


def test_each_environment_has_its_own_id(results: dict[str, dict[str, Any]]) -> None:
    ids = {r["ping"]["environment_id"] for r in results.values()}
    assert len(ids) == 3
