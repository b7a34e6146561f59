"""Layer bundling for real: pip installs the forecast layer (numpy) for the Lambda platform
(manylinux x86_64, CPython 3.12), not for this machine's CPython 3.11; sizes are measured and the
250 MB limit is enforced with numbers; bad inputs fail with a clear error.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from infra.constructs.agent_function import (
    UNZIPPED_LIMIT_BYTES,
    PackageTooLargeError,
    check_unzipped_size,
)
from infra.constructs.bundling import (
    BundlingError,
    PipLocalBundling,
    dir_size_bytes,
    lambda_platforms,
)
from infra.constructs.layers import DependencyLayer, ModelLayer, find_python, function_code
from tests.infra.cdk_helpers import REPO

pytestmark = pytest.mark.slow

#: An agent's code folders, as cdk.json's intent agent lists them.
CODE = ("functions/agent", "functions/intent_model")


def _source_files(*folders: str) -> set[Path]:
    """Files of ``folders`` (relative to the repository) that belong in an asset."""
    return {p.relative_to(REPO) for folder in folders for p in (REPO / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and "tests" not in p.parts}


@pytest.fixture(scope="module")
def forecast(tmp_path_factory: pytest.TempPathFactory) -> tuple[DependencyLayer, Path]:
    # GIVEN a stack that bundles (no aws:cdk:bundling-stacks) with the real forecast requirements
    outdir = tmp_path_factory.mktemp("cdk-bundled")
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, "LayerBuild")
    layer = DependencyLayer(
        stack, "Forecast", requirements=REPO / "layers" / "forecast" / "requirements.txt",
        runtime="python3.12", architecture="x86_64", description="test",
    )
    # and an agent's code asset, bundled the same way (the toolkit and the agent's code folders)
    lambda_.Function(stack, "Code", code=function_code(CODE, agent="intent", runtime="python3.12",
                                                       architecture="x86_64")[0],
                     handler="functions.agent.handler.handler", runtime=lambda_.Runtime.PYTHON_3_12)
    app.synth()
    [staged] = [p for p in outdir.glob("asset.*") if (p / "python").is_dir()]
    return layer, staged


@pytest.fixture(scope="module")
def code_asset(forecast: tuple[DependencyLayer, Path]) -> Path:
    [staged] = [p for p in forecast[1].parent.glob("asset.*") if (p / "functions").is_dir()]
    return staged


def test_function_code_asset_is_the_toolkit_and_the_agents_code_only(code_asset: Path) -> None:
    assert [p.name for p in code_asset.iterdir()] == ["functions"]
    copied = {p.relative_to(code_asset) for p in code_asset.rglob("*") if p.is_file()}
    sources = {p for p in copied if p.suffix != ".pyc"}
    assert sources == {Path("functions/__init__.py")} | _source_files("functions/runtime", *CODE)
    # and the byte code of each module, as the function's CPython (3.12) reads it, when this
    # machine has one: Lambda's /var/task is read-only, so without it every cold start would
    # compile what it imports
    compiled = copied - sources
    if find_python("3.12") is None:
        assert not compiled
    else:
        modules = {p for p in sources if p.suffix == ".py"}
        assert compiled == {m.parent / "__pycache__" / f"{m.stem}.cpython-312.pyc" for m in modules}
    # another agent's folders are not in it
    assert not (code_asset / "functions" / "gpu_endpoint").exists()


def test_the_code_assets_byte_code_is_what_python_312_imports_without_compiling(
        code_asset: Path, tmp_path: Path) -> None:
    """GIVEN the bundled code asset, WHEN the function's CPython imports the toolkit from it
    without writing byte code (as on Lambda's read-only /var/task), THEN no module is
    compiled: every one comes from its shipped .pyc (unchecked-hash: used as it is); the probe
    does see a compile once one module's .pyc is taken away."""
    python = find_python("3.12")
    if python is None:
        pytest.skip("no CPython 3.12 on this machine: the asset ships source only")

    def compiled_on_import(root: Path) -> list[str]:
        probe = ("import importlib.machinery as m, sys\n"
                 f"sys.path.insert(0, {str(root)!r})\n"
                 "compiled = []\n"
                 "real = m.SourceFileLoader.source_to_code\n"
                 "def spy(self, data, path, *a, **k):\n"
                 "    compiled.append(path)\n"
                 "    return real(self, data, path, *a, **k)\n"
                 "m.SourceFileLoader.source_to_code = spy\n"
                 "import functions.runtime.dispatch, functions.runtime.admission.paths\n"
                 "print(json.dumps([p for p in compiled if '/functions/' in p]))\n")
        proc = subprocess.run([python, "-I", "-B", "-c", "import json\n" + probe],
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert compiled_on_import(code_asset) == []
    copy = tmp_path / "asset"
    shutil.copytree(code_asset, copy)
    (copy / "functions/runtime/__pycache__/dispatch.cpython-312.pyc").unlink()
    assert compiled_on_import(copy) == [str(copy / "functions/runtime/dispatch.py")]


def test_function_code_copies_nested_folders_once_and_names_a_missing_one(tmp_path: Path) -> None:
    # GIVEN a repository-like tree with the toolkit and one agent
    (tmp_path / "functions" / "runtime").mkdir(parents=True)
    (tmp_path / "functions" / "__init__.py").write_text("")
    (tmp_path / "functions" / "runtime" / "agent.py").write_text("x = 1\n")
    for rel in ("orders/handler.py", "orders/lib/util.py", "orders/tests/test_x.py"):
        (tmp_path / "functions" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "functions" / rel).write_text("")
    _, bundler = function_code(["functions/orders", "functions/orders/lib"], agent="orders", root=tmp_path)
    assert [rel for _, rel in bundler.files()] == [
        "functions/__init__.py", "functions/runtime/agent.py", "functions/orders/handler.py",
        "functions/orders/lib/util.py"]  # lib once, tests never
    # a whole-package code folder (the old single agent's "functions") covers the toolkit
    _, bundler = function_code(["functions"], agent="agent", root=tmp_path)
    assert [rel for _, rel in bundler.files()] == [
        "functions/__init__.py", "functions/orders/handler.py", "functions/orders/lib/util.py",
        "functions/runtime/agent.py"]
    # WHEN a code folder is missing THEN the error names the agent and the field
    with pytest.raises(BundlingError) as caught:
        function_code(["functions/orders", "functions/lookup"], agent="lookup", root=tmp_path)
    assert str(caught.value) == (
        f"warmstart.agents.lookup.code: functions/lookup not found at {tmp_path / 'functions/lookup'} "
        "(missing); create it or list the agent's code folders (relative to the repository root) in "
        "cdk.json")
    (tmp_path / "functions" / "lookup").mkdir()
    with pytest.raises(BundlingError, match=r"functions/lookup not found at .* \(empty folder\)"):
        function_code(["functions/lookup"], agent="lookup", root=tmp_path)
    # WHEN the handler names a module that is not there (a typo) THEN synth stops, naming it
    assert function_code(["functions/orders"], agent="orders", root=tmp_path,
                         handler="functions.orders.handler.handler")
    with pytest.raises(BundlingError) as caught:
        function_code(["functions/orders"], agent="orders", root=tmp_path,
                      handler="functions.orders.handlr.handler")
    assert str(caught.value) == (
        "warmstart.agents.orders.handler: 'functions.orders.handlr.handler': no module file "
        f"functions/orders/handlr.py under {tmp_path}; fix the handler (package.module.function) "
        "or create the module")


def test_the_stack_refuses_an_agent_whose_code_folder_is_missing(tmp_path: Path) -> None:
    from infra.app import build_cdk_app
    from tests.infra.cdk_helpers import cdk_context

    # GIVEN a checkout where the lookup agent's code folder does not exist yet
    (tmp_path / "functions").mkdir()
    for rel in ("functions/__init__.py", "functions/runtime", "functions/agent", "functions/intent_model"):
        (tmp_path / rel).symlink_to(REPO / rel)
    # WHEN the app is built THEN the error names the agent's code field
    with pytest.raises(BundlingError) as caught:
        build_cdk_app(cdk_context(), nag=False, code_root=tmp_path)
    assert str(caught.value).startswith(
        f"warmstart.agents.lookup.code: functions/lookup not found at {tmp_path / 'functions/lookup'} (missing)")


def test_forecast_layer_holds_manylinux_x86_64_cp312_wheels(forecast: tuple[DependencyLayer, Path]) -> None:
    _, staged = forecast
    assert (staged / "python" / "numpy" / "__init__.py").is_file()
    tags = [line.split(":", 1)[1].strip()
            for wheel in (staged / "python").glob("*.dist-info/WHEEL")
            for line in wheel.read_text().splitlines() if line.startswith("Tag:")]
    assert tags and all(re.fullmatch(r"cp312-cp312-manylinux_\d+_\d+_x86_64|cp312-cp312-manylinux2014_x86_64", t)
                        for t in tags), tags
    extensions = [p.name for p in (staged / "python").rglob("*.so") if ".cpython-" in p.name]
    assert extensions and all(n.endswith(".cpython-312-x86_64-linux-gnu.so") for n in extensions)
    assert not list((staged / "python").rglob("*cpython-311*"))
    # byte code only as the function's CPython reads it (compiled by python3.12, when found)
    compiled = list((staged / "python").rglob("*.pyc"))
    assert all(p.name.endswith(".cpython-312.pyc") and p.parent.name == "__pycache__" for p in compiled)
    assert bool(compiled) == (find_python("3.12") is not None)
    assert not (staged / "python" / "bin").exists()


def test_built_size_is_measured(forecast: tuple[DependencyLayer, Path]) -> None:
    layer, staged = forecast
    assert layer.unzipped_size_bytes == dir_size_bytes(staged)
    assert 20 * 2**20 < layer.unzipped_size_bytes < 120 * 2**20  # numpy 2.x: about 54 MB


def test_over_250_mb_is_refused_with_the_numbers(forecast: tuple[DependencyLayer, Path]) -> None:
    layer, _ = forecast
    size = layer.unzipped_size_bytes
    assert size is not None
    assert check_unzipped_size([("function code", 1_000_000), ("layer forecast", size)]) == size + 1_000_000
    with pytest.raises(PackageTooLargeError) as caught:
        check_unzipped_size([("function code", 2**20), ("layer forecast", size), ("layer model", 220 * 2**20)])
    total_mb = (2**20 + size + 220 * 2**20) / 2**20
    assert str(caught.value) == (
        f"function code and layers take {total_mb:.1f} MB unzipped, over Lambda's 250 MB limit by "
        f"{total_mb - 250:.1f} MB (function code 1.0 MB, layer forecast {size / 2**20:.1f} MB, "
        "layer model 220.0 MB); shrink a layer (pip --no-deps, drop unused packages) or ship the model "
        "in a container image. See https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
    )
    assert UNZIPPED_LIMIT_BYTES == 262_144_000
    assert check_unzipped_size([("function code", None), ("layer web", 10)]) is None  # not built


def test_pip_commands_target_the_lambda_platform(tmp_path: Path) -> None:
    bundler = PipLocalBundling(requirements=REPO / "layers" / "inference" / "requirements.txt",
                               python_version="3.12", platforms=lambda_platforms("x86_64"), no_deps=True)
    platform = ("--platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 "
                "--python-version 3.12 --implementation cp --only-binary=:all:")
    wheelhouse = REPO / ".cache" / "pip" / "wheelhouse" / "cp312-manylinux2014_x86_64"
    assert bundler.wheelhouse == wheelhouse
    install = " ".join(bundler.command(tmp_path)[1:])
    assert install.startswith("-m pip install ")
    assert platform in install
    assert f"--no-index --find-links {wheelhouse} --target {tmp_path / 'python'}" in install
    assert install.endswith(f"-r {REPO / 'layers' / 'inference' / 'requirements.txt'} --no-deps")
    download = " ".join(bundler.download_command()[1:])
    assert download.startswith("-m pip download ") and platform in download
    assert f"--cache-dir {REPO / '.cache' / 'pip'} --dest {wheelhouse}" in download
    assert lambda_platforms("arm64") == ("manylinux2014_aarch64", "manylinux_2_28_aarch64")


def test_pip_failure_is_reported_with_pip_output(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy===not a version!!\n")
    bundler = PipLocalBundling(requirements=requirements, python_version="3.12",
                               platforms=lambda_platforms("x86_64"), no_deps=False,
                               cache_dir=tmp_path / "cache")
    with pytest.raises(BundlingError) as caught:
        bundler.try_bundle(str(tmp_path / "out"), image=None)
    message = str(caught.value)
    assert message.startswith(f"pip for layer {requirements} failed (exit ")
    assert "command: " in message and "numpy===not a version!!" in message


def test_missing_inputs_fail_clearly(tmp_path: Path) -> None:
    stack = cdk.Stack(cdk.App(context={"aws:cdk:bundling-stacks": []}), "Missing")
    with pytest.raises(BundlingError) as caught:
        ModelLayer(stack, "Model", artifact_dir=tmp_path / "artifact", runtime="python3.12", architecture="x86_64")
    assert str(caught.value) == (
        f"model artifact not found at {tmp_path / 'artifact'} (missing): export it first with the model "
        "export script under layers/model/ (it writes model.onnx and tokenizer.json there)"
    )
    (tmp_path / "artifact").mkdir()
    with pytest.raises(BundlingError, match=r"\(empty folder\)"):
        ModelLayer(stack, "Model2", artifact_dir=tmp_path / "artifact", runtime="python3.12", architecture="x86_64")
    with pytest.raises(BundlingError) as caught:
        DependencyLayer(stack, "Web", requirements=tmp_path / "nope.txt", runtime="python3.12",
                        architecture="x86_64", description="x")
    assert str(caught.value) == f"requirements file not found: {tmp_path / 'nope.txt'}"
