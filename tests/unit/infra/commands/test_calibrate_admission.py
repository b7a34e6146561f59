"""``warmstart calibrate --agent NAME``: real measurements of a cdk.json agent (fresh processes,
the local GPU endpoint through the toolkit's boto3 client), the document the function reads
(`functions.runtime.calibration.parse` accepts it), and the refusals before anything runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from functions.runtime.calibration import parse
from infra.cli import main

REPO_ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project's cdk.json in a folder of its own (the output lands beside it)."""
    shutil.copy(REPO_ROOT / "cdk.json", tmp_path / "cdk.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("argv", "message"), [
    (["--agent", "nosuch"], "unknown agent 'nosuch'"),
    (["--agent", "intent", "--body", "{not json"], "--body is not JSON"),
])
def test_bad_choices_are_refused_before_measuring(app_dir: Path, argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (app_dir / "calibration").exists()


@pytest.mark.slow
def test_a_model_free_agent_gets_its_stages_measured_and_no_overflow(
        app_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--agent", "lookup", "--samples", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    written = json.loads((app_dir / "calibration" / "lookup.json").read_text())
    assert written == doc
    cal = parse(json.dumps(doc))
    assert cal.agent == "lookup" and cal.overflow_p95_ms is None
    assert {"toolkit", "web", "telemetry"} <= set(cal.stage_p95_ms)
    assert "model" not in cal.stage_p95_ms  # the lookup agent has no model
    assert all(v > 0 for v in cal.stage_p95_ms.values())


@pytest.mark.slow
def test_an_overflowing_agent_gets_its_overflow_calls_measured_through_boto3(
        app_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--agent", "intent", "--samples", "2", "--out",
                 str(app_dir / "intent.json")]) == 0
    cal = parse((app_dir / "intent.json").read_text())
    assert cal.agent == "intent" and cal.memory_mb > 0
    assert {"toolkit", "overflow", "web", "telemetry", "model"} <= set(cal.stage_p95_ms)
    assert cal.overflow_p95_ms is not None and 0 < cal.overflow_p95_ms < 10_000
    assert "40 warm InvokeEndpoint calls" in json.loads((app_dir / "intent.json").read_text())["method"]


@pytest.mark.slow
def test_a_body_the_route_refuses_is_a_clear_error(app_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--agent", "intent", "--samples", "2", "--body", '{"txt": 1}']) == 1
    err = capsys.readouterr().err
    assert "the overflow calls failed" in err and "--body" in err
    assert not (app_dir / "calibration").exists()


@pytest.mark.slow
def test_a_streaming_agent_gets_its_routes_first_token_and_degraded_event_measured(
        app_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The chat agent (its LLM and order service: the local stubs, started for the empty
    CHAT_LLM_URLS / CHAT_TOOL_URL): the route's warm first chunk waits on the stub LLM's time
    to first token (930 ms, `infra.local.llm_stub`), so its p95 is at least that; the degraded
    event's p95 is at least one GIL switch interval."""
    body = json.dumps({"message": "Where is my order A-1001?"})
    assert main(["calibrate", "--agent", "chat", "--samples", "2", "--body", body, "--out",
                 str(app_dir / "chat.json")]) == 0
    cal = parse((app_dir / "chat.json").read_text())
    assert cal.agent == "chat" and set(cal.route_p95_ms) == {"chat"}
    assert 930.0 <= cal.route_p95_ms["chat"] < 5_000.0
    assert cal.degrade_p95_ms is not None and cal.degrade_p95_ms >= 5.0
    assert cal.stream_overflow_p95_ms == {}  # cdk.json's chat agent does not overflow
    assert "route chat p95" in capsys.readouterr().out


@pytest.mark.slow
def test_a_body_the_measured_route_refuses_leaves_the_route_seeds_and_says_why(
        app_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--agent", "chat", "--samples", "2", "--body", '{"text": "hi"}',
                 "--out", str(app_dir / "chat.json")]) == 0
    cal = parse((app_dir / "chat.json").read_text())
    assert cal.route_p95_ms == {} and cal.degrade_p95_ms is None
    assert "route latency not measured: POST /chat answered 422" in capsys.readouterr().err
