"""``warmstart calibrate`` on the real local emulator with the real reference agent."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
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


def test_the_gpu_endpoint_server_is_measured_for_round_trips_and_concurrency() -> None:
    # the real local GPU endpoint server (ONNX on the CPU), 3 round trips, 2 rounds per level
    times, concurrency = calibrate.measure_overflow(n=3, concurrency_rounds=2)
    assert len(times) == 3 and all(t > 0 for t in times)
    assert concurrency in calibrate.CONCURRENCY_LEVELS


def test_endpoint_concurrency_is_the_last_level_within_the_slowdown() -> None:
    p95 = {1: 10.0, 2: 15.0, 4: 19.0, 8: 40.0, 16: 15.0}
    assert calibrate.endpoint_concurrency(p95) == 4  # 8 is past 2 x 10 ms: the search ends
    assert calibrate.endpoint_concurrency({1: 10.0}) == 1
    assert calibrate.endpoint_concurrency(p95, slowdown=5.0) == 16
    with pytest.raises(ValueError, match="level 1"):
        calibrate.endpoint_concurrency({2: 10.0})


def test_the_measured_endpoint_concurrency_round_trips_and_bad_values_are_refused() -> None:
    from warmers.simulator.calibration import Calibration, SimulatorCalibrationError

    cal = load_calibration()
    doc = json.loads(replace(cal, endpoint_concurrency=3).to_json())
    assert doc["endpoint_concurrency"] == 3
    assert Calibration.from_mapping(doc).endpoint_concurrency == 3
    assert "endpoint_concurrency" not in json.loads(replace(cal, endpoint_concurrency=None).to_json())
    for bad in (0, True, 2.5, "4"):
        with pytest.raises(SimulatorCalibrationError, match="endpoint_concurrency must be an integer"):
            Calibration.from_mapping({**doc, "endpoint_concurrency": bad})
