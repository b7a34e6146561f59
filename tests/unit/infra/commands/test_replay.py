"""``warmstart replay``: flag checks before the stack starts, hash prefixes, the ``--json``
document (built from a run's summary)."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest

from infra.cli import main
from infra.commands.replay import JSON_SCHEMA, replay_json, run_json
from infra.replay.summary import RunSummary

TRACE = str(Path(__file__).resolve().parents[4] / "tests/data/traces/azure2019_invocations.csv")
FUNCTION = "bb5d90ea"


@pytest.mark.parametrize(("argv", "message"), [
    (["--time-scale", "0"],
     "--time-scale must be a positive number, got 0 (see warmstart replay --help)"),
    (["--minutes", "0"], "--minutes must be a positive integer, got 0 (see warmstart replay --help)"),
    (["--report", "/nonexistent-dir/x/r.html"],
     ("--report is in a folder that does not exist, got /nonexistent-dir/x/r.html (create "
     "/nonexistent-dir/x first) (see warmstart replay --help)")),
    (["--pc-floor", "5", "--pc-cap", "2"], "--pc-floor must be <= --pc-cap, got --pc-floor 5 --pc-cap 2"),
    (["--body", "{}"], "--body needs --route (the request it is the body of)"),
])
def test_bad_flags_are_refused_before_the_stack_starts(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--trace", TRACE, "--function", FUNCTION, *argv]) == 2
    assert capsys.readouterr().err == f"warmstart replay: error: {message}\n"


def test_short_and_unknown_prefixes_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--trace", TRACE, "--function", "bb5d"]) == 2
    assert capsys.readouterr().err == (
        "warmstart replay: error: --function: 'bb5d' is not a hash in the trace; give the full "
        "HashFunction or a prefix of at least 6 characters\n")
    assert main(["replay", "--trace", TRACE, "--function", "ffffffffffff"]) == 2
    assert capsys.readouterr().err.startswith(
        "warmstart replay: error: --function: no function 'ffffffffffff' in the trace")


def _summary(**kw: object) -> RunSummary:
    values: dict[str, object] = {}
    for f in dataclasses.fields(RunSummary):
        if f.name == "label":
            values[f.name] = "on"
        elif f.name == "notes":
            values[f.name] = ("a note",)
        elif f.type in ("int", int):
            values[f.name] = 3
        else:
            values[f.name] = 1.5
    values.update(kw)
    return RunSummary(**values)  # type: ignore[arg-type]


def test_json_document_follows_the_schema() -> None:
    run = run_json(_summary(lambda_usd=float("nan")), "on", ["stack note"])
    fields = {f.name for f in dataclasses.fields(RunSummary)} - {"label", "notes"}
    assert set(run) == fields | {"config", "usd", "notes"}
    assert run["config"] == "on" and run["requests"] == 3 and run["p95_ms"] == 1.5
    assert run["lambda_usd"] is None and run["usd"] is None  # NaN: not measured
    assert run["notes"] == ["a note", "stack note"]
    workload = types.SimpleNamespace(function_id="bb5d" * 16, trigger="http", start_minute=300,
                                     minutes=20, n_requests=72)
    doc = replay_json(workload, 10.0, [run], Path("out/replay/report.html"))
    assert json.loads(json.dumps(doc)) == {
        "function": "bb5d" * 16, "trigger": "http", "start_minute": 300, "minutes": 20,
        "requests": 72, "time_scale": 10.0, "report": "out/replay/report.html", "runs": [run]}
    for key in ("function", "trigger", "start_minute", "minutes", "requests", "time_scale",
                "report", "runs", "cold_starts", "usd"):
        assert key in JSON_SCHEMA, key


def test_help_documents_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--json writes one JSON object to stdout" in out and "runs           list" in out


def test_a_planned_endpoint_is_refused_with_attach_and_with_a_bad_cdk_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--trace", TRACE, "--function", FUNCTION, "--endpoint", "planned",
                 "--attach", str(tmp_path / "endpoints.json")]) == 2
    assert capsys.readouterr().err == (
        "warmstart replay: error: --endpoint planned starts the local GPU endpoint; with "
        "--attach the running stack's endpoint is used as it is\n")
    bad = tmp_path / "cdk.json"
    bad.write_text(json.dumps({"context": {"warmstart": {
        "agents": [{"name": "a", "handler": "functions.agent:app"}],
        "gpu_endpoint": {"capacity": {"cap": -1}}}}}), encoding="utf-8")
    assert main(["replay", "--trace", TRACE, "--function", FUNCTION, "--endpoint", "planned",
                 "--cdk-json", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"warmstart replay: error: {bad}") and err.count("\n") == 1


def test_the_json_document_carries_the_planned_endpoint_without_nan() -> None:
    from infra.replay.summary import EndpointUsage

    use = EndpointUsage(0.35, 0, -3.0, float("nan"), float("nan"),
                        states=((-120.0, "provisioning", 0),), planned=((-180.0, 1),),
                        reason="1 instance(s) pay")
    run = run_json(_summary(endpoint=use), "on")
    assert run["endpoint"] == {
        "copy_hours": 0.35, "max_in_service": 0, "ordered_at_min": -3.0,
        "in_service_at_min": None, "published_in_service_at_min": None,
        "states": [[-120.0, "provisioning", 0]], "planned": [[-180.0, 1]],
        "reason": "1 instance(s) pay"}
    json.dumps(run, allow_nan=False)  # strict JSON: NaN would raise
    assert "endpoint               object or null" in JSON_SCHEMA
