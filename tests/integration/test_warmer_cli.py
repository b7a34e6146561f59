"""`warmstart forecast` and `warmstart plan` (in-process through infra.cli.main)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import boto3
from moto import mock_aws

from infra.cli import main

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
REAL = TRACES / "azure2019_fullday_realhash"


def _hash(row: int = 2) -> str:
    return (REAL / "invocations.csv").read_text().splitlines()[row - 1].split(",")[2]


def test_forecast_prints_against_actual_and_writes_png(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    png = tmp_path / "f.png"
    code = main(["forecast", "--trace", str(REAL / "invocations.csv"), "--function",
                 _hash(4)[:12], "--durations", str(REAL / "durations.csv"), "--metric",
                 "concurrency", "--step-min", "120", "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0 and png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "Little's law" in out and "selector" in out and "seasonal_naive" in out
    assert out.count("\n") > 15


def test_forecast_bad_inputs(tmp_path, capsys):
    assert main(["forecast", "--trace", str(tmp_path / "none.csv"), "--function", "x"]) == 2
    assert f"--trace is not a file, got {tmp_path / 'none.csv'}" in capsys.readouterr().err
    assert main(["forecast", "--trace", str(REAL / "invocations.csv"), "--function", "zzz"]) == 2
    assert "--function zzz: no function in the trace" in capsys.readouterr().err


def test_plan_from_trace_shows_reasons(capsys):
    code = main(["plan", "--trace", str(REAL / "invocations.csv"), "--top", "2",
                 "--durations", str(REAL / "durations.csv"), "--unreserved", "900"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("why:") == 2 and "provisioned concurrency" in out


def test_plan_from_cloudwatch(capsys):
    now = dt.datetime.now(tz=dt.UTC).replace(second=0, microsecond=0)
    with mock_aws():
        cw = boto3.client("cloudwatch", region_name="us-east-1")
        dims = [{"Name": "FunctionName", "Value": "agent"},
                {"Name": "Resource", "Value": "agent:live"}]
        cw.put_metric_data(Namespace="AWS/Lambda", MetricData=[
            {"MetricName": "ConcurrentExecutions", "Dimensions": dims,
             "Timestamp": now - dt.timedelta(minutes=m), "Value": 6.0} for m in range(1, 400)])
        code = main(["plan", "--cloudwatch", "--function-name", "agent", "--history-days", "1",
                     "--unreserved", "900"])
    out = capsys.readouterr().out
    assert code == 0 and "agent:live: provisioned concurrency 6" in out
