"""``warmstart new NAME``: what it writes, and every refusal (one line, nothing written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infra.cli import main
from infra.commands.new import agent_entry, insert_agent

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    (tmp_path / "functions").mkdir()
    return tmp_path


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_new_writes_the_agent_its_test_and_registers_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (project / "cdk.json").read_text()
    assert main(["new", "billing_helper", "--root", str(project)]) == 0
    assert {"functions/billing_helper/__init__.py", "functions/billing_helper/app.py",
            "functions/billing_helper/handler.py", "tests/agents/test_billing_helper.py"} <= _files(project)
    agents = json.loads((project / "cdk.json").read_text())["context"]["warmstart"]["agents"]
    assert agents["billing_helper"] == agent_entry("billing_helper")
    assert agents["billing_helper"]["path_prefix"] == "/billing_helper"
    # the rest of cdk.json is byte for byte what it was (only the new entry is inserted)
    after = (project / "cdk.json").read_text()
    assert after.replace(',\n        "billing_helper": ' + json.dumps(agent_entry("billing_helper"),
                                                                separators=(", ", ": ")), "") == before
    out = capsys.readouterr().out
    assert "wrote functions/billing_helper/handler.py" in out and "make test" in out


def test_new_gives_the_agent_its_own_requirements_layer(project: Path) -> None:
    # GIVEN a project, WHEN an agent is scaffolded
    assert main(["new", "billing_helper", "--root", str(project)]) == 0
    # THEN it has layers/billing_helper/requirements.txt (no package yet), listed after web
    requirements = project / "layers" / "billing_helper" / "requirements.txt"
    from infra.constructs.bundling import requirement_lines

    assert requirement_lines(requirements) == []
    assert "layers/web/requirements.txt" in requirements.read_text()
    agents = json.loads((project / "cdk.json").read_text())["context"]["warmstart"]["agents"]
    assert agents["billing_helper"]["layers"] == ["web", "billing_helper"]


def test_a_name_whose_layer_folder_exists_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "layers" / "web").mkdir(parents=True)
    assert main(["new", "web", "--root", str(project)]) == 2
    assert "layers/web exists already" in capsys.readouterr().err
    assert not (project / "functions" / "web").exists()


@pytest.mark.parametrize(("name", "message"), [
    ("Billing", "is not a valid agent name"),
    ("2fast", "is not a valid agent name"),
    ("billing-helper", "is not a valid agent name"),
    ("class", "is reserved"),
    ("runtime", "is reserved"),
    ("intent", "exists already in cdk.json"),
])
def test_bad_or_taken_names_are_refused_with_one_line(project: Path, name: str, message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    before = _files(project), (project / "cdk.json").read_text()
    assert main(["new", name, "--root", str(project)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("warmstart new: ")
    assert (_files(project), (project / "cdk.json").read_text()) == before  # nothing written


def test_an_existing_folder_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "functions" / "billing").mkdir()
    assert main(["new", "billing", "--root", str(project)]) == 2
    assert "functions/billing exists already" in capsys.readouterr().err
    assert "billing" not in json.loads((project / "cdk.json").read_text())["context"]["warmstart"]["agents"]


def test_a_cdk_json_without_agents_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"warmstart": {"agent": {}}}}))
    assert main(["new", "billing", "--root", str(tmp_path)]) == 2
    assert "no context.warmstart.agents map" in capsys.readouterr().err
    assert not (tmp_path / "functions").exists()


def test_insert_keeps_an_empty_agents_map_valid() -> None:
    text = '{"context": {"warmstart": {"agents": {}}}}'
    out = json.loads(insert_agent(text, "x", {"handler": "h"}))
    assert out["context"]["warmstart"]["agents"] == {"x": {"handler": "h"}}
