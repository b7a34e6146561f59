"""``local up`` runs each function with its own code and layers (issue 21 item 4), as Lambda does.

Real layers built by the project's code (``LayerCatalog.for_function``: ``web`` and the agent's
own ``depx`` with httpx, which pip resolves with anyio, idna, ... that ``web`` already holds, so
the function ships them once), a real code asset, real execution environments (the emulator
through ``LocalStack``) under the function's CPython with ``-S``: only the code asset, the
layers and what the Lambda runtime provides on the path, never the project's ``.venv``.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.constructs.runtime_python import find_python
from infra.local.spec import AliasSpec, FunctionSpec, LocalApp
from infra.local.stack import LocalStack, LocalStackConfig
from tests.conftest import adapt_event

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(find_python("3.12") is None, reason="no python3.12 on this machine")]

REPO = Path(__file__).parents[2]
HANDLER = '''from functions.runtime.agent import Agent, Route

agent = Agent("depx", app="functions.depx.app:create_app", routes=[
    Route("GET", "/where", tier="P1"),
])
handler = agent.lambda_handler()
'''
APP = '''import sys

import fastapi
import httpx


def create_app():
    import anyio
    import boto3

    app = fastapi.FastAPI()

    @app.get("/where")
    def where():
        return {"httpx": httpx.__file__, "anyio": anyio.__file__, "fastapi": fastapi.__file__,
                "boto3": boto3.__file__, "python": "%d.%d" % sys.version_info[:2],
                "no_site": sys.flags.no_site, "path": sys.path}

    return app
'''


def _code(root: Path) -> Path:
    """A function code asset as the synth stages it: functions/, the toolkit, agent depx."""
    (root / "functions" / "depx").mkdir(parents=True)
    shutil.copy(REPO / "functions" / "__init__.py", root / "functions" / "__init__.py")
    shutil.copytree(REPO / "functions" / "runtime", root / "functions" / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in {"__init__.py": "", "handler.py": HANDLER, "app.py": APP}.items():
        (root / "functions" / "depx" / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Layers web and depx (httpx) of one function, built by the stack's LayerCatalog."""
    import aws_cdk as cdk

    from infra.constructs.bundling import installed_distributions
    from infra.constructs.layers import LayerCatalog

    tmp = tmp_path_factory.mktemp("own-layers")
    layers = tmp / "layers"
    for name, text in {"web": (REPO / "layers" / "web" / "requirements.txt").read_text(),
                       "depx": "httpx==0.28.1\n"}.items():
        (layers / name).mkdir(parents=True)
        (layers / name / "requirements.txt").write_text(text)
    catalog = LayerCatalog(cdk.Stack(cdk.App(outdir=str(tmp / "cdk.out")), "OwnLayers"), "Layers",
                           layers_dir=layers)
    web, depx = catalog.for_function(["web", "depx"], agent="depx", runtime="python3.12",
                                     architecture="x86_64")
    full = catalog.built[("depx", "python3.12", "x86_64")]
    assert web.staged_dir and depx.staged_dir and full.python_dir and depx.python_dir and web.python_dir
    return {"code": _code(tmp / "code"), "web": web.staged_dir, "depx": depx.staged_dir,
            "dists": {name: set(installed_distributions(b.python_dir))  # type: ignore[arg-type]
                      for name, b in (("web", web), ("depx", depx), ("depx-full", full))}}


def _spec(name: str, code: Path, layers: tuple[Path, ...] | None) -> FunctionSpec:
    return FunctionSpec(name=name, handler="functions.depx.handler.handler", code_dir=code,
                        runtime="python3.12", memory_mb=512, timeout_s=60, layers=layers,
                        # an SLA no cold start misses on a loaded machine: every answer is local
                        environment={"WARMSTART_AGENT_NAME": "depx", "POWERTOOLS_SERVICE_NAME": "depx",
                                     "WARMSTART_SLA_MS": "50000"},
                        aliases=(AliasSpec("live"),))


@pytest.fixture
def stack(built: dict[str, Any], tmp_path: Path) -> Iterator[tuple[LocalStack, Path]]:
    log = tmp_path / "stack.log"
    functions = (_spec("declared", built["code"], (built["web"], built["depx"])),
                 _spec("missing", built["code"], (built["web"],)),
                 _spec("venv", built["code"], None))
    with open(log, "w") as stream, LocalStack(LocalApp(functions), LocalStackConfig(moto=False),
                                              log_stream=stream) as running:
        yield running, log


def _get(stack: LocalStack, function: str, path: str) -> dict[str, Any]:
    result = stack.emulator.invoke(function, json.dumps(adapt_event("http_api_v2.json", "GET", path)).encode(),
                                   qualifier="live")
    return json.loads(result.payload)


def test_a_shared_package_is_shipped_in_one_layer_of_the_function(built: dict[str, Any]) -> None:
    # httpx's own layer, as pip resolves it, holds anyio and idna; web holds them too
    assert {"httpx", "httpcore", "anyio", "idna"} <= built["dists"]["depx-full"]
    assert {"anyio", "idna"} <= built["dists"]["web"]
    # shipped: each in exactly one of the function's layers
    shipped = [built["dists"]["web"], built["dists"]["depx"]]
    for dist in ("anyio", "idna", "httpx", "httpcore", "fastapi"):
        assert sum(dist in layer for layer in shipped) == 1, dist
    assert not (built["depx"] / "python" / "anyio").exists()  # nor its byte code
    # the layers ship byte code compiled by the function's CPython (Lambda cannot write it)
    assert (built["web"] / "python" / "fastapi" / "__pycache__" / "__init__.cpython-312.pyc").is_file()
    assert (built["depx"] / "python" / "httpx" / "__pycache__" / "__init__.cpython-312.pyc").is_file()


def test_a_function_imports_from_its_own_code_and_layers_only(stack: tuple[LocalStack, Path],
                                                               built: dict[str, Any]) -> None:
    running, _log = stack
    # WHEN the function with both layers answers
    answer = _get(running, "declared", "/where")
    assert answer["statusCode"] == 200, answer
    where = json.loads(answer["body"])
    # THEN every package came from the function's layers, boto3 from the runtime's stand-in,
    # under CPython 3.12 without site-packages, and nothing from the project's .venv
    assert where["python"] == "3.12" and where["no_site"] == 1
    assert where["httpx"].startswith(str(built["depx"].resolve()))
    assert where["anyio"].startswith(str(built["web"].resolve()))  # shipped once, found in web
    assert where["fastapi"].startswith(str(built["web"].resolve()))
    assert "local-runtime" in where["boto3"] or ".venv" in where["boto3"]  # the SDK's link
    assert not [p for p in where["path"] if "site-packages" in p and ".venv" in p], where["path"]
    assert where["path"][0] == str(built["code"].resolve())
    # and nothing was written into the code asset or the layers (read-only, as on Lambda)
    assert not list(built["code"].rglob("__pycache__"))


def test_a_module_missing_from_the_layers_fails_locally_naming_module_and_agent(
        stack: tuple[LocalStack, Path]) -> None:
    running, log = stack
    __import__("httpx")  # the project's .venv has it; the function's layers do not
    # WHEN the function without its own layer is invoked
    answer = _get(running, "missing", "/where")
    # THEN it fails as on AWS: 500 agent_misconfigured, and the log names the module and agent
    assert answer["statusCode"] == 500, answer
    assert json.loads(answer["body"])["error"] == "agent_misconfigured"
    text = log.read_text()
    assert "No module named 'httpx'" in text and "agent 'depx'" in text
    # while the same code under the project's .venv (the escape hatch) imports it
    assert _get(running, "venv", "/where")["statusCode"] == 200


PROBE_HANDLER = '''import sys


def handler(event, context):
    try:
        import httpx  # in the project's .venv, in no layer of this function
        httpx_found = True
    except ImportError:
        httpx_found = False
    import boto3  # the runtime provides it
    return {"no_site": sys.flags.no_site, "python": "%d.%d" % sys.version_info[:2],
            "httpx": httpx_found, "boto3": bool(boto3.__version__)}
'''


def _local_up(template: Path, endpoints: Path, *extra: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli", "local", "up", "--template", str(template),
                             "--endpoints-file", str(endpoints), "--no-moto", "--no-gpu-endpoint",
                             "--no-tool-stub", "--no-warmer", *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    while not lines or "ready" not in lines[-1]:
        line = proc.stdout.readline()
        assert line, f"local up exited early: {proc.stderr.read() if proc.stderr else ''}"
        lines.append(line)
    return proc, lines


@pytest.mark.parametrize(("extra", "packages", "isolated"), [
    ((), "packages=own (python3.12: code + 0 layer(s))", True),
    (("--venv",), "packages=.venv", False),
])
def test_local_up_runs_a_bundled_function_with_its_own_packages_unless_told_venv(
        tmp_path: Path, extra: tuple[str, ...], packages: str, isolated: bool) -> None:
    # GIVEN a cloud assembly: a template and the function's code asset bundled beside it
    (tmp_path / "asset.code").mkdir()
    (tmp_path / "asset.code" / "probe.py").write_text(PROBE_HANDLER)
    template = tmp_path / "t.template.json"
    template.write_text(json.dumps({"Resources": {"Probe": {
        "Type": "AWS::Lambda::Function", "Metadata": {"aws:asset:path": "asset.code"},
        "Properties": {"FunctionName": "probe", "Handler": "probe.handler", "Runtime": "python3.12",
                       "Code": {"S3Bucket": "b", "S3Key": "k"}, "Timeout": 30}}}}))
    # WHEN local up serves it (with --venv or without)
    proc, lines = _local_up(template, tmp_path / "endpoints.json", *extra)
    try:
        [line] = [ln for ln in lines if "function probe " in ln]
        assert packages in line
        import boto3

        client = boto3.client("lambda", endpoint_url=json.loads((tmp_path / "endpoints.json").read_text())["lambda"],
                              region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
        answer = json.loads(client.invoke(FunctionName="probe")["Payload"].read())
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    # THEN its own: CPython 3.12, no site-packages, no httpx; --venv: the project's packages
    if isolated:
        assert answer == {"no_site": 1, "python": "3.12", "httpx": False, "boto3": True}
    else:
        assert answer["no_site"] == 0 and answer["httpx"] is True and answer["boto3"] is True
