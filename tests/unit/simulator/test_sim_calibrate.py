"""``warmstart calibrate`` on the real local emulator with the real reference agent."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from infra.commands import calibrate
from warmers.simulator.calibration import load_calibration


def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    calibrate.add_arguments(parser)
    return parser.parse_args(["--out", str(tmp_path / "cal.json"), *extra])


def test_intent_event_is_an_http_api_v2_post() -> None:
    event = json.loads(calibrate.intent_event("hello", now_ms=1234))
    assert event["version"] == "2.0" and event["rawPath"] == "/v1/intent"
    assert event["requestContext"]["http"]["method"] == "POST"
    assert event["requestContext"]["timeEpoch"] == 1234
    assert json.loads(event["body"]) == {"text": "hello"}


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calibrate.run(_args(tmp_path, "--samples", "1")) == 2
    assert "--samples" in capsys.readouterr().err
    assert not (tmp_path / "cal.json").exists()


@pytest.mark.slow
def test_calibrate_measures_cold_start_and_restore(tmp_path: Path) -> None:
    # GIVEN the reference agent on the emulator (real processes); WHEN calibrating with 2
    # fresh environments and 2 restores
    rc = calibrate.run(_args(tmp_path, "--samples", "2", "--warm", "1", "--no-overflow"))
    assert rc == 0
    # THEN the file loads, and a restore adds far less than a full init
    cal = load_calibration(tmp_path / "cal.json")
    assert cal.samples == 2 and "emulator" in cal.method
    assert cal.init_ms.p50 > 0 and cal.toolkit_init_ms.p50 > 0
    assert cal.restore_ms.p50 < cal.init_ms.p50
    assert cal.overflow_ms is None
