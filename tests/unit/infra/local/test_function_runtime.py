"""The pieces that make ``local up`` run a function with its own code and layers: the launcher
(a real shell script run as a subprocess), the path, and each fault with its message. The whole
path, with layers built by pip and real execution environments, is tests/e2e/test_local_own_layers.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from functions.runtime.contract import environment as names
from infra.local.function_runtime import (
    LocalRuntime,
    RuntimeUnavailable,
    function_path,
    isolate,
    isolated_functions,
    prepare_runtime,
    write_launcher,
)
from infra.local.spec import FunctionSpec, LocalApp, SpecError
from infra.local.stack import EmulatorService, LocalStackConfig

PROBE = ("import json, os, sys; print(json.dumps({'no_site': sys.flags.no_site, "
         "'executable': sys.executable, 'var': os.environ.get('" + names.ENV_LOCAL_RUNTIME_PYTHON + "')}))")


def _run(launcher: Path, env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run([str(launcher), "-c", PROBE], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"], **env})
    return json.loads(out.stdout)


def test_the_launcher_runs_the_named_cpython_without_site_packages_and_hides_the_variable(
        tmp_path: Path) -> None:
    launcher = write_launcher(tmp_path / "bin", default_python=sys.executable)
    assert launcher.name == "python" and os.access(launcher, os.X_OK)
    # a function described with layers: its CPython, -S, and the variable gone from its environment
    isolated = _run(launcher, {names.ENV_LOCAL_RUNTIME_PYTHON: sys.executable})
    assert isolated == {"no_site": 1, "executable": sys.executable, "var": None}
    # any other (and the emulator's own awslambdaric check): the project's interpreter as given
    assert _run(launcher, {})["no_site"] == 0


def _runtime(tmp_path: Path) -> LocalRuntime:
    return LocalRuntime("python3.12", sys.executable, tmp_path / "client", tmp_path / "sdk")


def test_the_path_is_code_then_the_last_layer_first_then_the_sdk_and_the_runtime_client(tmp_path: Path) -> None:
    web, own = tmp_path / "web", tmp_path / "own"
    (web / "python").mkdir(parents=True)
    (own / "python" / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    spec = FunctionSpec(name="f", handler="a.handler", code_dir=tmp_path, layers=(web, own))
    assert function_path(spec, _runtime(tmp_path)) == [
        str(tmp_path), str(own / "python"), str(own / "python" / "lib" / "python3.12" / "site-packages"),
        str(web / "python"), str(tmp_path / "sdk"), str(tmp_path / "client")]
    env = isolate(spec, _runtime(tmp_path)).environment
    assert env[names.ENV_LOCAL_RUNTIME_PYTHON] == sys.executable and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)


def test_a_missing_layer_folder_is_refused_naming_the_function(tmp_path: Path) -> None:
    spec = FunctionSpec(name="agent-fn", handler="a.handler", code_dir=tmp_path, layers=(tmp_path / "gone",))
    with pytest.raises(RuntimeUnavailable, match=r"^function agent-fn: layer folder\(s\) \[.*gone'\] are "
                                                 r"missing; synthesize the app again \(make synth\)$"):
        isolate(spec, _runtime(tmp_path))


def test_no_cpython_for_the_runtime_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailable) as caught:
        prepare_runtime("python3.99", cache_dir=tmp_path)
    assert str(caught.value) == (
        "no CPython 3.99 for x86_64 on this machine to run the function's layers (built for "
        "python3.99); install it (e.g. `pyenv install 3.99`) or run `warmstart local up --venv` "
        "(every function with this project's .venv: not what Lambda runs)")
    spec = FunctionSpec(name="agent-fn", handler="a.handler", code_dir=tmp_path, runtime="python3.99", layers=())
    with pytest.raises(RuntimeUnavailable, match=r"^function agent-fn \(python3.99\): no CPython 3.99"):
        isolated_functions([spec], cache_dir=tmp_path)
    assert not (tmp_path / "local-runtime").exists()  # nothing built


def test_functions_without_layers_and_the_venv_escape_hatch_keep_the_project_interpreter(tmp_path: Path) -> None:
    described = FunctionSpec(name="own", handler="a.handler", code_dir=tmp_path, runtime="python3.99", layers=())
    by_hand = FunctionSpec(name="hand", handler="a.handler", code_dir=tmp_path)
    service = EmulatorService(LocalApp((by_hand,)), LocalStackConfig(moto=False), clock=None,  # type: ignore[arg-type]
                              moto_endpoint=None)
    assert service._functions() == ([by_hand], sys.executable)
    # --venv: even a function described with layers (whose CPython is not here) runs as before
    service = EmulatorService(LocalApp((described, by_hand)), LocalStackConfig(moto=False, own_layers=False),
                              clock=None, moto_endpoint=None)  # type: ignore[arg-type]
    functions, python = service._functions()
    assert python == sys.executable and [f.layers for f in functions] == [None, None]
    # without it, the stack refuses to start that function, naming it
    service = EmulatorService(LocalApp((described,)), LocalStackConfig(moto=False), clock=None,  # type: ignore[arg-type]
                              moto_endpoint=None)
    with pytest.raises(RuntimeUnavailable, match=r"^function own \(python3.99\)"):
        service._functions()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"architecture": "sparc"}, "function 'f': architecture must be 'x86_64' or 'arm64', got 'sparc'"),
    ({"runtime": "nodejs20.x", "layers": ()},
     ("function 'f': runtime 'nodejs20.x' is not a Lambda Python runtime (python3.12, ...): its layers "
     "cannot be run")),
])
def test_a_spec_the_layers_cannot_run_with_is_refused(tmp_path: Path, kwargs: dict[str, object],
                                                      message: str) -> None:
    with pytest.raises(SpecError) as caught:
        FunctionSpec(name="f", handler="a.handler", code_dir=tmp_path, **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message
