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


def _put(cw, fn, now, minutes, value):
    dims = [{"Name": "FunctionName", "Value": fn}, {"Name": "Resource", "Value": f"{fn}:live"}]
    cw.put_metric_data(Namespace="AWS/Lambda", MetricData=[
        {"MetricName": "ConcurrentExecutions", "Dimensions": dims,
         "Timestamp": now - dt.timedelta(minutes=m), "Value": value}
        for m in range(1, minutes + 1)])


def _throttle_metrics_of(cw, function_name):
    """ThrottlingException for GetMetricData calls about ``function_name`` on the real
    (moto-backed) client: the function is read off the call's parameters, the call answered
    with a 400 before it is sent."""
    from botocore.awsrequest import AWSResponse

    def remember(params, context, **_):
        dims = params["MetricDataQueries"][0]["MetricStat"]["Metric"]["Dimensions"]
        context["function"] = next(d["Value"] for d in dims if d["Name"] == "FunctionName")

    def throttle(context, **_):
        if context.get("function") == function_name:
            return (AWSResponse("https://monitoring.us-east-1.amazonaws.com/", 400, {}, None),
                    {"Error": {"Code": "Throttling", "Message": "Rate exceeded"},
                     "ResponseMetadata": {"HTTPStatusCode": 400}})
        return None

    cw.meta.events.register("before-parameter-build.cloudwatch.GetMetricData", remember)
    cw.meta.events.register("before-call.cloudwatch.GetMetricData", throttle)


def test_plan_from_cloudwatch_plans_around_an_alias_without_metrics(capsys, monkeypatch):
    """GIVEN two functions, CloudWatch throttling one's metrics, and the warmer's saved plan of
    the throttled one in SSM WHEN ``warmstart plan --cloudwatch`` runs THEN the other is planned
    from its metrics, the throttled one keeps the warmer's last good plan, and the note says
    why; WHEN every alias lacks metrics THEN it fails (exit 1) saying so."""
    import json

    from warmers.plan.policy import WarmPlan

    now = dt.datetime.now(tz=dt.UTC).replace(second=0, microsecond=0)
    with mock_aws():
        cw = boto3.client("cloudwatch", region_name="us-east-1")
        _put(cw, "agent", now, 120, 6.0)
        _put(cw, "other", now, 120, 3.0)
        saved = WarmPlan("other", "live", "provisioned", 4, 0, 0, 0.06, 3.5, "naive",
                         now.timestamp() - 120, now.timestamp() - 900, "earlier", ceiling=50)
        boto3.client("ssm", region_name="us-east-1").put_parameter(
            Name="/warmstart/warmer/other/live/plan", Value=json.dumps(saved.to_dict()),
            Type="String")
        real = boto3.client
        clients = []

        def client(name, **kw):  # the CLI's own clients, with the throttle hooked on
            made = real(name, **kw)
            if name == "cloudwatch":
                _throttle_metrics_of(made, "other")
                clients.append(made)
            return made

        monkeypatch.setattr(boto3, "client", client)
        args = ["plan", "--cloudwatch", "--function-name", "agent", "--function-name", "other",
                "--history-days", "0.1", "--unreserved", "900"]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "agent:live: provisioned concurrency 6" in out
        assert "other:live: provisioned concurrency 4" in out  # the warmer's last good plan
        assert "metrics unavailable: kept the last good plan" in out
        assert "(other:live: metrics unavailable (" in out and "Throttling" in out
        assert main(["plan", "--cloudwatch", "--function-name", "other", "--history-days",
                     "0.1", "--unreserved", "900"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("warmstart plan: error: no alias had metrics: other:live: "
                              "metrics unavailable (")
    assert len(clients) == 2  # the hooked clients were the ones the CLI used
