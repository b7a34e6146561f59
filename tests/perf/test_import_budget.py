"""Import budget of the run-time toolkit and the agent handler's init.

The check that cannot flake: importing ``functions.runtime.<module>`` or (on the main thread)
``functions.agent.handler`` in a fresh process loads no third-party module. Import *time* is
measured in ``bench/bench_init.py`` (ratios in one run), not asserted here: a timed assertion
flakes on a shared machine (load averages above 20 were seen while writing this).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_MODULES = sorted(
    f"functions.runtime.{p.stem}"
    for p in (REPO_ROOT / "functions" / "runtime").glob("*.py")
    if p.stem != "__init__"
)

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

HANDLER_MAIN_THREAD = r"""
import importlib.util, json, sys, threading
seen = []
sys.addaudithook(lambda event, args: event == "import"
                 and threading.current_thread() is threading.main_thread() and seen.append(args[0]))
before = set(sys.modules)
import functions.agent.handler
loaded = {m.split(".")[0] for m in seen if m in sys.modules or importlib.util.find_spec(m.split(".")[0])}
print(json.dumps(sorted(m for m in loaded if m not in sys.stdlib_module_names and m != "functions")))
sys.stdout.flush()
import os; os._exit(0)  # do not wait for the background preload (the atexit hook would)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_LAMBDA_"))}
    env["AWS_LAMBDA_INITIALIZATION_TYPE"] = "on-demand"
    return env


def _run(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, *flags, "-c", code], cwd=REPO_ROOT, env=_env(),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_the_toolkit_has_modules() -> None:
    assert {"functions.runtime.config", "functions.runtime.lifecycle", "functions.runtime.dispatch"} <= set(
        RUNTIME_MODULES
    )


def test_runtime_modules_import_only_the_standard_library() -> None:
    # one fresh process; each module's new third-party modules are attributed to it
    found = json.loads(_run(THIRD_PARTY.format(modules=RUNTIME_MODULES)).stdout)
    assert set(found) == set(RUNTIME_MODULES)
    offenders = {module: loaded for module, loaded in found.items() if loaded}
    assert offenders == {}, f"third-party modules loaded at import: {offenders}"


def test_handler_init_loads_no_third_party_module_on_the_main_thread() -> None:
    loaded = json.loads(_run(HANDLER_MAIN_THREAD).stdout)
    assert loaded == []
