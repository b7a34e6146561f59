"""``warmstart local up``: what it refuses before starting anything (ports, files, a missing
``cdk.out``), where it finds the stack after ``make demo``, and the ``--json`` document."""

from __future__ import annotations

import argparse
import json
import socket
import types
from pathlib import Path

import pytest

from infra.cli import main
from infra.commands.common import UsageError
from infra.commands.local import endpoints_document, resolve_cdk_out
from infra.local.spec import AgentEndpoint


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WARMSTART_OUT_DIR", raising=False)


@pytest.mark.parametrize(("argv", "message"), [
    (["--gateway-port", "80000"],
     "--gateway-port must be a port number from 0 to 65535, got 80000 (see warmstart local up --help)"),
    (["--lambda-port", "-1"],
     "--lambda-port must be a port number from 0 to 65535, got -1 (see warmstart local up --help)"),
    (["--cdk-json", "missing.json"],
     "--cdk-json is not a file, got missing.json (see warmstart local up --help)"),
    (["--template", "nope.json"],
     "--template is not a file, got nope.json (see warmstart local up --help)"),
    (["--warmer-period-s", "0"],
     "--warmer-period-s must be a positive number, got 0 (see warmstart local up --help)"),
    (["--endpoints-file", "no/such/dir/e.json"],
     ("--endpoints-file is in a folder that does not exist, got no/such/dir/e.json (create "
     "no/such/dir first) (see warmstart local up --help)")),
])
def test_bad_flags_are_refused_before_anything_starts(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "up", *argv]) == 2
    assert capsys.readouterr().err == f"warmstart local up: error: {message}\n"


def test_a_port_in_use_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["local", "up", "--gateway-port", str(port)]) == 2
    assert capsys.readouterr().err == (f"warmstart local up: error: --gateway-port {port} is in "
                                       "use on 127.0.0.1 (pick another, or 0 for any free)\n")


def test_without_a_synthesized_stack_it_names_the_one_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "up"]) == 2
    assert capsys.readouterr().err == (
        "warmstart local up: error: no synthesized stack in cdk.out (nor in out/demo/cdk.out); "
        "run `make synth` first\n")
    Path("empty").mkdir()
    assert main(["local", "up", "--cdk-out", "empty"]) == 2
    assert capsys.readouterr().err == (
        "warmstart local up: error: --cdk-out empty: no synthesized template (*.template.json) "
        "there; run `make synth` first\n")


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"cdk_out": None, "out_dir": None, **kw})


def test_after_make_demo_it_finds_the_demos_cdk_out(tmp_path: Path) -> None:
    demo = tmp_path / "out" / "demo" / "cdk.out"
    demo.mkdir(parents=True)
    (demo / "Warmstart.template.json").write_text("{}")
    assert resolve_cdk_out(_args()) == Path("out/demo/cdk.out")
    # a cdk.out of its own wins; --out-dir moves the demo's
    (tmp_path / "cdk.out").mkdir()
    (tmp_path / "cdk.out" / "Warmstart.template.json").write_text("{}")
    assert resolve_cdk_out(_args()) == Path("cdk.out")
    (tmp_path / "cdk.out" / "Warmstart.template.json").unlink()
    with pytest.raises(UsageError, match=r"nor in elsewhere/demo/cdk.out\); run `make synth`"):
        resolve_cdk_out(_args(out_dir="elsewhere"))


def test_json_document_is_what_the_endpoints_file_holds() -> None:
    app = types.SimpleNamespace(agents=(AgentEndpoint("intent", "Agent-intent-fn", "/"),
                                        AgentEndpoint("lookup", "Agent-lookup-fn", "/lookup")))
    doc = endpoints_document({"lambda": "http://127.0.0.1:1", "gateway": "http://127.0.0.1:2"},
                             app)  # type: ignore[arg-type]
    assert json.loads(json.dumps(doc)) == {
        "lambda": "http://127.0.0.1:1", "gateway": "http://127.0.0.1:2",
        "agents": {"intent": {"url": "http://127.0.0.1:2", "function_name": "Agent-intent-fn",
                              "alias": "live"},
                   "lookup": {"url": "http://127.0.0.1:2/lookup",
                              "function_name": "Agent-lookup-fn", "alias": "live"}}}
