"""``warmstart simulate``: one message per flag, outputs under the output directory,
``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.cli import main


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    monkeypatch.delenv("WARMSTART_OUT_DIR", raising=False)


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--jobs", "0", "--jobs must be a positive integer, got 0"),
    ("--plan-every-min", "0", "--plan-every-min must be a positive integer, got 0"),
    ("--functions", "-1", "--functions must be an integer >= 0, got -1"),
    ("--fullday", "x", "--fullday must be an integer >= 0, got x"),
    ("--calibration", "missing.json", "--calibration is not a file, got missing.json"),
])
def test_each_flag_has_its_own_message(flag: str, value: str, message: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", flag, value]) == 2
    assert capsys.readouterr().err == (f"warmstart simulate: error: {message} "
                                       "(see warmstart simulate --help)\n")


def test_a_missing_trace_dir_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"warmstart simulate: error: --trace-dir {tmp_path / 'nope'}: ")
    assert err.endswith(": no such file\n") and err.count("\n") == 1


def test_json_and_files_under_out_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--functions", "3", "--minutes", "45", "--jobs", "1", "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    out = Path("out/simulate")
    assert doc["files"] == {"markdown": str(out / "simulation.md"), "csv": str(out / "functions.csv"),
                            "policies": str(out / "policies.csv"),
                            "pareto": str(out / "pareto.png"), "report": str(out / "report.html")}
    assert all((tmp_path / p).is_file() for p in doc["files"].values())
    assert doc["functions"] == 3 and doc["minutes"] == 45 and doc["seed"] == 2019 and doc["jobs"] == 1
    assert set(doc["calibration"]) == {"init_p50_ms", "init_p95_ms", "restore_p50_ms", "method"}
    policies = {p["policy"]: p for p in doc["policies"]}
    assert "warmstart" in policies and "SnapStart" in policies
    ws = policies["warmstart"]
    assert set(ws) == {"policy", "requests", "cold_starts", "env_inits", "failed_answers", "late",
                       "tail", "sla_breaches", "overflowed", "degraded", "shed", "pings",
                       "functions", "cold_start_pct", "p50_ms", "p95_ms", "p99_ms", "idle_gb_s",
                       "lambda_usd",
                       "pc_usd", "endpoint_usd", "total_usd", "cost_usd", "decisions",
                           "strategies"}
    assert ws["failed_answers"] == ws["late"] + ws["degraded"] + ws["shed"]
    assert ws["requests"] == doc["invocations"]
    assert "wrote out/simulate/report.html" in captured.err  # the human lines go to stderr


def test_the_html_report_shares_the_replay_template(tmp_path: Path) -> None:
    import html

    from infra.replay import report as replay_report
    from warmers.simulator.report import PARETO_CAPTION

    # WHEN simulate runs THEN its HTML report is the replay / demo report's page
    assert main(["simulate", "--functions", "3", "--minutes", "45", "--jobs", "1", "--json"]) == 0
    doc = (tmp_path / "out" / "simulate" / "report.html").read_text(encoding="utf-8")
    assert replay_report.STYLE in doc and "<title>warmstart simulate</title>" in doc
    # the summary in words first, then the styled tables, the embedded plot with its caption
    summary = doc.index('<p class="summary">Over 3 functions x 45 minutes (')
    assert summary < doc.index("<table") and "failed answers" in doc[summary:doc.index("</p>", summary)]
    assert "late + " in doc and "warm duration alone exceeds the SLA" in doc
    assert doc.count("<table") == 2 and "<th>SnapStart</th>" in doc
    assert doc.count('src="data:image/png;base64,') == 1
    assert f"<figcaption>{html.escape(PARETO_CAPTION)}</figcaption>" in doc
    # the assumptions' Markdown rendered, no raw backticks; the trace cited
    assumptions = doc[doc.index("<h2>Assumptions</h2>"):]
    assert "<code>WARMSTART_FINISH_PRELOAD</code>" in assumptions and "`" not in assumptions
    assert '<p class="citation">Trace: Azure Functions Trace 2019' in doc
