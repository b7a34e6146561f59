"""``warmstart calibrate``: flag checks before anything is measured, the output under the
output directory, ``--json`` (measurements stubbed: the real ones are in
tests/unit/simulator/test_sim_calibrate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.cli import main
from infra.commands import calibrate


@pytest.fixture
def stubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WARMSTART_OUT_DIR", raising=False)

    def measure(samples: int, warm: int, memory_mb: int, **_: object) -> dict[str, list[float]]:
        calls.append("emulator")
        return {"cold_wall": [900.0, 1100.0], "restore_wall": [40.0, 60.0],
                "warm_wall": [10.0, 10.0], "init_phase": [50.0, 70.0],
                "restore_phase": [20.0, 30.0], "warm_duration": [5.0, 7.0]}

    monkeypatch.setattr(calibrate, "measure_on_emulator", measure)
    monkeypatch.setattr(calibrate, "measure_degraded", lambda: [0.1, 0.2])
    return calls


@pytest.mark.parametrize(("argv", "message"), [
    (["--samples", "1"], "--samples must be an integer >= 2, got 1"),
    (["--memory-mb", "64"], "--memory-mb must be from 128 to 10240 (Lambda's range), got 64"),
    (["--warm", "0"], "--warm must be a positive integer, got 0 (see warmstart calibrate --help)"),
    (["--out", "no/such/dir/c.json"],
     ("--out is in a folder that does not exist, got no/such/dir/c.json (create no/such/dir "
     "first) (see warmstart calibrate --help)")),
])
def test_bad_flags_are_refused_before_measuring(argv: list[str], message: str, stubbed: list[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", *argv]) == 2
    assert capsys.readouterr().err == f"warmstart calibrate: error: {message}\n"
    assert stubbed == []


def test_writes_under_out_and_prints_json(tmp_path: Path, stubbed: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--no-overflow", "--json"]) == 0
    captured = capsys.readouterr()
    written = tmp_path / "out" / "calibration.json"
    assert json.loads(captured.out) == json.loads(written.read_text())
    doc = json.loads(captured.out)
    assert set(doc) == {"init_ms", "restore_ms", "infer_ms", "toolkit_init_ms", "degraded_ms",
                        "method", "machine", "measured_at", "samples"}
    assert doc["init_ms"]["p50"] == pytest.approx(990.0) and doc["samples"] == 7
    assert captured.err.endswith("wrote out/calibration.json (warmstart simulate --calibration "
                                 "out/calibration.json)\n")
    assert main(["calibrate", "--no-overflow"]) == 0
    assert capsys.readouterr().out.startswith("init p50 990 ms / p95 ")


def test_a_failed_measurement_exits_1(stubbed: list[str], monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def fail(*_: object, **__: object) -> None:
        raise RuntimeError("on-demand cold start: the agent did not answer 200")

    monkeypatch.setattr(calibrate, "measure_on_emulator", fail)
    assert main(["calibrate", "--no-overflow"]) == 1
    assert capsys.readouterr().err == ("warmstart calibrate: error: on-demand cold start: the "
                                       "agent did not answer 200\n")
