"""The admission calibration at synth: ``warmstart.agents.<name>.calibration`` (or
``calibration/<name>.json``) validated and put into ``WARMSTART_CALIBRATION`` compactly."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from functions.runtime.calibration import parse
from infra.config import StackConfigError, parse_config
from infra.constructs.agent_function import admission_calibration
from tests.infra.cdk_helpers import REPO

BASE: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())["context"]["warmstart"]


def agent_with(**settings: Any) -> Any:
    raw = copy.deepcopy(BASE)
    raw["agents"]["intent"].update(settings)
    return parse_config(raw).agent("intent")


def write(root: Path, rel: str, **changes: Any) -> dict[str, Any]:
    agent = agent_with()
    doc: dict[str, Any] = {
        "version": 1, "agent": "intent", "memory_mb": agent.memory_mb, "machine": "ci host",
        "measured_at": "2026-12-01T10:00:00+00:00",
        "stage_p95_ms": {"toolkit": 60.0, "overflow": 300.0, "web": 700.0, "model": 1100.0},
        "overflow_p95_ms": 55.0, "method": "x" * 3000,
    }
    doc.update(changes)
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(json.dumps(doc), encoding="utf-8")
    return doc


def test_the_conventional_file_is_used_compactly_and_without_its_method(tmp_path: Path) -> None:
    doc = write(tmp_path, "calibration/intent.json")
    value = admission_calibration(agent_with(), tmp_path)
    assert value is not None and "method" not in json.loads(value)
    assert len(value) < 400  # Lambda's environment variables share 4 KB
    cal = parse(value)
    assert cal.stage_p95_ms == doc["stage_p95_ms"] and cal.overflow_p95_ms == 55.0


def test_no_file_means_no_variable(tmp_path: Path) -> None:
    assert admission_calibration(agent_with(), tmp_path) is None


def test_a_named_file_that_is_missing_or_wrong_fails_the_synth_with_the_field(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError, match=r"warmstart.agents.intent.calibration: 'cal/i.json' does "
                                          r"not exist; run `warmstart calibrate --agent intent"):
        admission_calibration(agent_with(calibration="cal/i.json"), tmp_path)
    write(tmp_path, "cal/i.json", memory_mb=512)
    with pytest.raises(StackConfigError, match="measured for agent 'intent' at 512 MB, this agent is"):
        admission_calibration(agent_with(calibration="cal/i.json"), tmp_path)
    write(tmp_path, "cal/i.json", agent="lookup")
    with pytest.raises(StackConfigError, match="measured for agent 'lookup'"):
        admission_calibration(agent_with(calibration="cal/i.json"), tmp_path)
    (tmp_path / "cal/i.json").write_text("{")
    with pytest.raises(StackConfigError, match="cal/i.json is not a calibration: not JSON"):
        admission_calibration(agent_with(calibration="cal/i.json"), tmp_path)


@pytest.mark.parametrize("entry", ["/etc/cal.json", "../cal.json", "calibration/intent.txt"])
def test_the_calibration_key_must_be_a_json_file_in_the_repository(entry: str) -> None:
    with pytest.raises(StackConfigError, match="warmstart.agents.intent.calibration: .* must be a .json "
                                          "file relative to the repository root"):
        agent_with(calibration=entry)
