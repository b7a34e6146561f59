"""Each agent's own dependencies (issue 21 item 4): the synth's import check in a clean interpreter
(real subprocess, real layers pip-installed for the Lambda platform from the local wheelhouse) and
one package shipped once across a function's layers.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest

from infra.constructs.bundling import PipLocalBundling, installed_distributions, lambda_platforms
from infra.constructs.layers import (
    BuiltLayer,
    LayerCatalog,
    MissingDependencyError,
    check_imports,
    find_python,
)
from tests.infra.cdk_helpers import REPO

pytestmark = pytest.mark.slow

HANDLER = '''from functions.runtime.agent import Agent, Route

agent = Agent("depx", app="functions.depx.app:create_app", routes=[
    Route("GET", "/healthz", tier="P1"),
    Route("POST", "/v1/answer", tier="P0", degraded="functions.depx.hooks:degraded"),
])
handler = agent.lambda_handler()
'''
APP_OK = "from fastapi import FastAPI\n\ndef create_app():\n    return FastAPI()\n"
HOOKS_OK = "import json\n\ndef degraded(payload):\n    return {}\n"


def _code(root: Path, *, app: str = APP_OK, hooks: str = HOOKS_OK) -> Path:
    """A function code asset like the synth stages it: functions/, the toolkit, agent depx."""
    (root / "functions" / "depx").mkdir(parents=True)
    shutil.copy(REPO / "functions" / "__init__.py", root / "functions" / "__init__.py")
    shutil.copytree(REPO / "functions" / "runtime", root / "functions" / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in {"__init__.py": "", "handler.py": HANDLER, "app.py": app, "hooks.py": hooks}.items():
        (root / "functions" / "depx" / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def web_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """layers/web built for python3.12 manylinux x86_64, as the synth builds it."""
    out = tmp_path_factory.mktemp("web-layer")
    PipLocalBundling(requirements=REPO / "layers" / "web" / "requirements.txt", python_version="3.12",
                     platforms=lambda_platforms("x86_64"), no_deps=False).try_bundle(str(out))
    return out / "python"


def _check(code: Path, layers: list[Path], **kwargs: str) -> object:
    return check_imports(agent="depx", handler="functions.depx.handler.handler", code_dir=code,
                         layer_dirs=layers, runtime="python3.12", **kwargs)


def test_a_module_missing_from_code_and_layers_fails_with_one_line(tmp_path: Path, web_layer: Path) -> None:
    # GIVEN an agent whose app imports httpx, with only the web layer (no httpx in it)
    code = _code(tmp_path, app="from fastapi import FastAPI\nimport httpx\n\ndef create_app():\n"
                               "    return FastAPI()\n")
    # WHEN the synth's check imports it THEN it fails with one line naming the module and the agent
    with pytest.raises(MissingDependencyError) as caught:
        _check(code, [web_layer])
    assert str(caught.value) == (
        "warmstart.agents.depx: module 'httpx' is not in the function's code or layers (imported at "
        "functions/depx/app.py:2); add the package that provides it to the agent's requirements "
        "(layers/depx/requirements.txt, listed in warmstart.agents.depx.layers) and synth again")
    assert "\n" not in str(caught.value)
    __import__("httpx")  # while the project's .venv, which the check never sees, has it


def test_a_declared_hook_is_imported_too(tmp_path: Path, web_layer: Path) -> None:
    code = _code(tmp_path, hooks="import tenacity\n\ndef degraded(payload):\n    return {}\n")
    with pytest.raises(MissingDependencyError, match=r"^warmstart.agents.depx: module 'tenacity' is not "
                                                     r"in the function's code or layers \(imported at "
                                                     r"functions/depx/hooks.py:1\)"):
        _check(code, [web_layer])


@pytest.mark.skipif(find_python("3.12") is None, reason="no python3.12 on this machine")
def test_the_happy_path_imports_everything_under_the_functions_cpython(tmp_path: Path, web_layer: Path) -> None:
    before = sorted(web_layer.rglob("*.pyc"))
    check = _check(_code(tmp_path), [web_layer])
    assert check.complete and check.note is None  # type: ignore[attr-defined]
    # the check writes no byte code into the code asset or the layers (what `cdk deploy` zips)
    assert not list(tmp_path.rglob("__pycache__")) and sorted(web_layer.rglob("*.pyc")) == before
    assert check.python == find_python("3.12")  # type: ignore[attr-defined]
    assert check.elapsed_ms < 30_000  # type: ignore[attr-defined]
    # boto3 is the runtime's, not a layer's: it imports too
    code = _code(tmp_path / "b", app="import boto3\nfrom fastapi import FastAPI\n\ndef create_app():\n"
                                     "    return FastAPI()\n")
    assert _check(code, [web_layer]).complete  # type: ignore[attr-defined]


def test_under_another_python_compiled_wheels_end_the_check_incomplete_not_failed(
        tmp_path: Path, web_layer: Path) -> None:
    # GIVEN this interpreter (3.11), where the layer's cp312 pydantic-core cannot load
    assert sys.version_info[:2] != (3, 12)
    check = _check(_code(tmp_path), [web_layer], python=sys.executable)
    assert not check.complete  # type: ignore[attr-defined]
    assert "the layers hold it built for CPython 3.12" in check.note  # type: ignore[attr-defined]
    # a module that is in no layer still fails, before the compiled one is reached
    code = _code(tmp_path / "m", app="import httpx\nfrom fastapi import FastAPI\n")
    with pytest.raises(MissingDependencyError, match="module 'httpx' is not in"):
        _check(code, [web_layer], python=sys.executable)


def _requirements(layers: Path, name: str, text: str) -> None:
    (layers / name).mkdir(parents=True, exist_ok=True)
    (layers / name / "requirements.txt").write_text(text)


def test_a_package_two_layers_of_one_function_hold_is_shipped_once(tmp_path: Path) -> None:
    # GIVEN layers web and depx; depx lists anyio and typing_extensions (both in web) and packaging
    layers = tmp_path / "layers"
    _requirements(layers, "web", (REPO / "layers" / "web" / "requirements.txt").read_text())
    _requirements(layers, "depx", "anyio==4.16.0\ntyping_extensions==4.16.0\npackaging==26.4\n")
    _requirements(layers, "empty", "# nothing yet\n")
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    catalog = LayerCatalog(cdk.Stack(app, "Dedupe"), "Layers", layers_dir=layers)
    # WHEN two functions ship [web, depx] (and an empty layer)
    first = catalog.for_function(["web", "depx", "empty"], agent="depx", runtime="python3.12",
                                 architecture="x86_64")
    second = catalog.for_function(["web", "depx"], agent="other", runtime="python3.12", architecture="x86_64")
    # THEN depx is shipped without what web holds: anyio, idna, typing_extensions once
    assert [b.name for b in first] == ["web", "depx"]  # the empty one is not shipped
    web, depx = first
    assert web.python_dir is not None and depx.python_dir is not None
    full_layer = catalog.built[("depx", "python3.12", "x86_64")]
    assert full_layer.python_dir is not None
    full = installed_distributions(full_layer.python_dir)
    assert {"anyio", "idna", "typing-extensions", "packaging"} <= set(full)
    assert set(installed_distributions(depx.python_dir)) == {"packaging"}
    assert (depx.python_dir / "packaging" / "version.py").is_file()
    assert not (depx.python_dir / "anyio").exists() and not (depx.python_dir / "typing_extensions.py").exists()
    assert (web.python_dir / "anyio" / "__init__.py").is_file()
    full_size = full_layer.unzipped_size_bytes
    assert depx.unzipped_size_bytes is not None and full_size is not None
    assert depx.unzipped_size_bytes < full_size
    # and the deduplicated copy is one layer, shared by both functions
    assert second[1].layer is depx.layer and second[0].layer is web.layer
    # and the full depx layer, which no function ships as it is, leaves the template
    assert catalog.prune() == ["depx-python3.12-x86_64"]
    template = app.synth().get_stack_by_name("Dedupe").template
    layer_descriptions = sorted(r["Properties"]["Description"] for r in template["Resources"].values()
                                if r["Type"] == "AWS::Lambda::LayerVersion")
    assert layer_descriptions == [
        "warmstart depx layer without anyio, idna, typing-extensions (shipped by web)",
        "warmstart web: fastapi, mangum, pydantic, powertools, snapshot-restore-py, awscrt",
    ]


def _fake_layer(root: Path, dists: dict[str, str]) -> Path:
    for name, version in dists.items():
        info = root / "python" / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
        (root / "python" / name).mkdir()
        (root / "python" / name / "__init__.py").write_text("")
    return root


def test_two_versions_of_one_package_in_a_functions_layers_are_refused(tmp_path: Path) -> None:
    layers = tmp_path / "layers"
    _requirements(layers, "web", "anyio==4.16.0\n")
    _requirements(layers, "depx", "anyio==4.9.0\n")
    catalog = LayerCatalog(cdk.Stack(cdk.App(), "Conflict"), "Layers", layers_dir=layers)
    for name, version in (("web", "4.16.0"), ("depx", "4.9.0")):  # as if built
        catalog.built[(name, "python3.12", "x86_64")] = BuiltLayer(
            name, None, 1, _fake_layer(tmp_path / name, {"anyio": version}))  # type: ignore[arg-type]
    with pytest.raises(Exception) as caught:
        catalog.for_function(["web", "depx"], agent="depx", runtime="python3.12", architecture="x86_64")
    assert str(caught.value) == (
        "warmstart.agents.depx.layers: layers 'web' and 'depx' hold anyio 4.16.0 and 4.9.0; Lambda "
        "merges a function's layers into one /opt/python, so pin anyio==4.16.0 in "
        "layers/depx/requirements.txt (or drop it there)")


def test_the_synth_refuses_an_agent_whose_requirements_lack_a_module_it_imports(tmp_path: Path) -> None:
    from infra.config import config_from_context
    from infra.stacks.warmstart_stack import WarmstartStack

    # GIVEN a project whose agent depx imports httpx, declared with layers web and depx, and
    # layers/depx/requirements.txt that does not list it
    root = _code(tmp_path / "project", app="import httpx\nfrom fastapi import FastAPI\n\n"
                                           "def create_app():\n    return FastAPI()\n")
    layers = tmp_path / "layers"
    _requirements(layers, "web", (REPO / "layers" / "web" / "requirements.txt").read_text())
    _requirements(layers, "depx", "packaging==26.4\n")
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    context["warmstart"]["agents"] = {"depx": {"path_prefix": "/", "layers": ["web", "depx"]}}
    context["warmstart"]["warmer"]["enabled"] = False
    config = config_from_context(context, layers_dir=layers)
    # WHEN the stack is built (bundling on, as `make synth`) THEN it stops with the one line
    with pytest.raises(MissingDependencyError) as caught:
        WarmstartStack(cdk.App(outdir=str(tmp_path / "cdk.out")), "Deps", config=config,
                       layers_dir=layers, code_root=root)
    assert str(caught.value).startswith("warmstart.agents.depx: module 'httpx' is not in the function's "
                                        "code or layers (imported at functions/depx/app.py:1)")
    # AND with httpx's absence fixed in the code, the same stack synthesizes and says it checked
    (root / "functions" / "depx" / "app.py").write_text(APP_OK)
    stack = WarmstartStack(cdk.App(outdir=str(tmp_path / "cdk.out2")), "Deps", config=config,
                           layers_dir=layers, code_root=root)
    check = stack.import_checks["depx"]
    assert check is not None and check.agent == "depx"


def test_relative_asset_paths_work_as_a_cli_synth_stages_them(tmp_path: Path, web_layer: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN assets under a relative cdk.out (what `npx cdk synth` gives), WHEN checked from there
    _code(tmp_path / "cdk.out" / "asset.code")
    shutil.copytree(web_layer, tmp_path / "cdk.out" / "asset.web" / "python")
    monkeypatch.chdir(tmp_path)
    check = _check(Path("cdk.out/asset.code"), [Path("cdk.out/asset.web/python")], python=sys.executable)
    # THEN the toolkit and the layer were found (it got as far as the compiled pydantic-core)
    assert "pydantic_core" in check.note  # type: ignore[attr-defined]


def test_a_dropped_distribution_takes_its_byte_code_with_it() -> None:
    from infra.constructs.layers import _dropped

    dropped = {"anyio/__init__.py", "anyio/abc/_tasks.py", "six.py", "anyio-4.16.0.dist-info/RECORD"}
    assert _dropped("anyio/__init__.py", dropped)
    assert _dropped("anyio/__pycache__/__init__.cpython-312.pyc", dropped)
    assert _dropped("anyio/abc/__pycache__/_tasks.cpython-312.pyc", dropped)
    assert _dropped("__pycache__/six.cpython-312.pyc", dropped)
    assert not _dropped("httpx/__pycache__/__init__.cpython-312.pyc", dropped)
    assert not _dropped("anyio/__pycache__/other.cpython-312.pyc", dropped)
