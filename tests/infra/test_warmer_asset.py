"""The warmer Lambda's asset holds the control plane only: what ``warmers.handler`` imports
(``infra.constructs.warmer.control_plane_files``), never the simulator or the other evaluation
tools, and the handler imports from that asset and the warmer's layer alone.

A real synth with bundling (the numpy layer pip-installed from the local wheelhouse); the
import check runs the function's CPython in a clean ``python -I -S`` whose ``sys.path`` is the
staged asset, the layer's ``python/`` and the SDK the Lambda runtime provides."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from infra.constructs.bundling import staged_path
from infra.constructs.runtime_python import find_python, link_runtime_provided
from infra.constructs.warmer import REPO_ROOT, Warmer, WarmerTarget, control_plane_files

pytestmark = pytest.mark.slow

RUNTIME_VERSION = "3.12"  # the warmer's default runtime, python3.12

#: Imports the handler module from sys.path (argv[1], a JSON list) and says what it loaded.
_CHECK = (
    "import json, sys\n"
    "sys.path[:0] = json.loads(sys.argv[1])\n"
    "import warmers.handler\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
    "('warmers', 'infra', 'aws_cdk', 'constructs', 'jsii'))))\n"
)


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the warmer function's staged asset, its forecast layer's staged asset)."""
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = cdk.Stack(app, "WarmerAssetStack",
                      env=cdk.Environment(account="123456789012", region="us-east-1"))
    fn = lambda_.Function(stack, "Agent", runtime=lambda_.Runtime.PYTHON_3_12,
                          handler="index.handler", function_name="agent-fn",
                          code=lambda_.Code.from_inline("def handler(e, c):\n    return e\n"))
    alias = lambda_.Alias(stack, "Live", alias_name="live", version=fn.current_version)
    warmer = Warmer(stack, "Warmer", targets=[WarmerTarget(
        function=fn, alias_name=alias.alias_name, floor=0, cap=5, budget_usd_per_hour=1.0)])
    code, layer = staged_path(warmer.function), staged_path(warmer.layer)
    assert code is not None and layer is not None
    return code, layer


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_the_asset_holds_what_the_handler_reaches_and_no_simulator(
        staged: tuple[Path, Path]) -> None:
    code, _ = staged
    shipped = _files(code)
    assert shipped == {dest for _, dest in control_plane_files()}
    assert {"warmers/handler.py", "warmers/runner.py", "warmers/plan/run.py",
            "warmers/prices.json"} <= shipped
    assert not [f for f in shipped if f.startswith("warmers/simulator")]
    assert "warmers/evaluate.py" not in shipped
    everything = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "warmers").rglob("*.py")
                  if "__pycache__" not in p.parts}
    assert len(shipped) < len(everything)  # the old recipe shipped all of warmers/


def test_the_handler_imports_from_the_asset_and_layer_alone(
        staged: tuple[Path, Path], tmp_path: Path) -> None:
    python = find_python(RUNTIME_VERSION)
    if python is None:
        pytest.skip(f"no CPython {RUNTIME_VERSION} on this machine (the layer's numpy is built "
                    "for it)")
    code, layer = staged
    sdk = link_runtime_provided(tmp_path / "runtime")
    path = [str(code), str(layer / "python"), str(sdk)]
    done = subprocess.run([python, "-I", "-S", "-B", "-c", _CHECK, json.dumps(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "warmers.handler" in loaded and "warmers.plan.run" in loaded
    assert [m for m in loaded if not m.startswith("warmers")] == []  # no infra, no CDK
    assert not [m for m in loaded if m.startswith("warmers.simulator")]


def test_without_the_asset_the_handler_does_not_import(tmp_path: Path) -> None:
    """The check can fail: the same interpreter with an empty asset folder."""
    python = find_python(RUNTIME_VERSION)
    if python is None:
        pytest.skip(f"no CPython {RUNTIME_VERSION} on this machine")
    (tmp_path / "empty").mkdir()
    done = subprocess.run([python, "-I", "-S", "-B", "-c", _CHECK,
                           json.dumps([str(tmp_path / "empty")])],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "No module named 'warmers'" in done.stderr
