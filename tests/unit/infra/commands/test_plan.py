"""``warmstart plan``: flag checks, hash prefixes (ambiguous ones refused), no credentials,
``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.cli import main

TRACES = Path(__file__).resolve().parents[4] / "tests/data/traces"
REAL = TRACES / "azure2019_fullday_realhash"
TRACE = str(REAL / "invocations.csv")
ARGS = ["plan", "--trace", TRACE, "--durations", str(REAL / "durations.csv"), "--unreserved", "900"]


def test_top_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--trace", TRACE, "--top", "-3"]) == 2
    assert capsys.readouterr().err == ("warmstart plan: error: --top must be a positive "
                                       "integer, got -3 (see warmstart plan --help)\n")


def test_a_hash_prefix_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--function", "6590c82e"]) == 0
    assert capsys.readouterr().out.startswith(
        "6590c82e22abcdaf4887f5e84c39b3d264276cb7fb5bd585cdde6e8966a58966:live: ")


def test_the_issues_prefix_on_the_subset_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--trace", str(TRACES / "azure2019_invocations.csv"), "--function",
                 "6ebf3ebd"]) == 0
    assert capsys.readouterr().out.startswith(
        "6ebf3ebd2876e935950c7a566d8c766d134321276ce922870bfc98d53655709e:live: ")


def test_unknown_and_ambiguous_prefixes_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--function", "6ebf3ebd"]) == 2
    assert capsys.readouterr().err == ("warmstart plan: error: --function 6ebf3ebd: no function "
                                       "in the trace has this hash or prefix (10 functions)\n")
    subset = str(TRACES / "azure2019_invocations.csv")
    from warmers.traces import read_invocations

    names = list(read_invocations(Path(subset)))
    prefix = next(n[:1] for n in names if sum(m.startswith(n[:1]) for m in names) > 1)
    count = sum(m.startswith(prefix) for m in names)
    assert main(["plan", "--trace", subset, "--function", prefix]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"warmstart plan: error: --function {prefix}: matches {count} "
                          "functions in the trace (")
    assert err.endswith("...); give more of the hash\n") and err.count("\n") == 1


def test_floor_above_cap_and_at_minute_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--floor", "5", "--cap", "2"]) == 2
    assert capsys.readouterr().err == ("warmstart plan: error: --floor must be <= --cap, got "
                                       "--floor 5 --cap 2\n")
    assert main([*ARGS, "--at-minute", "5000"]) == 2
    assert capsys.readouterr().err == ("warmstart plan: error: --at-minute must be in "
                                       "[0, 1439], got 5000\n")


def test_cloudwatch_without_credentials_fails_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["plan", "--cloudwatch", "--function-name", "agent"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no "nothing, $0.0000/h" plan
    assert captured.err == (
        "warmstart plan: error: --cloudwatch: no AWS credentials found; set AWS_PROFILE or "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (any value for a local stack with "
        "--endpoint-url)\n")


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--top", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "trace" and doc["agent"] is None and doc["at_minute"] == 1439
    assert len(doc["plans"]) == 2 and doc["notes"] == []
    plan = doc["plans"][0]
    assert set(plan) == {"key", "function_name", "alias", "action", "provisioned_concurrency",
                         "ping_concurrency", "ping_interval_s", "hourly_cost_usd", "demand",
                         "method", "reason", "forecast_reason"}
    assert plan["key"] == f"{plan['function_name']}:live" and plan["alias"] == "live"
    assert plan["action"] in ("provisioned", "ping", "none") and plan["reason"]


def test_the_shared_overflow_endpoint_is_planned_and_explained(capsys: pytest.CaptureFixture[str]) -> None:
    # the busiest real function at a busy minute, its strategy ping (no PC alternative)
    argv = [*ARGS, "--top", "2", "--strategy", "ping", "--overflow-endpoint", "gpu",
            "--endpoint-target", "inference_component", "--inference-component", "intent-model"]
    assert main([*argv, "--explain"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("endpoint gpu "))
    assert line.startswith("endpoint gpu (inference-component/intent-model): ")
    assert " copies (ml.g6.xlarge), $" in line
    for step in ("instance_usd_per_hour", "overflow_concurrency", "instances_wanted",
                 "alternative_usd_per_hour", "pays", "hysteresis", "target_minimum", "capacity"):
        assert f"      {step} " in out, step
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [endpoint] = doc["run_plan"]["endpoints"]
    assert endpoint["plan"]["endpoint_name"] == "gpu"
    assert endpoint["policy"]["agents"] == [p["key"] for p in doc["plans"]]
    # each alias's share of the demand is in the run plan too
    assert all(a["overflow_demand"] is not None for a in doc["run_plan"]["aliases"])
    # an inference component needs its name
    assert main([*ARGS, "--top", "1", "--overflow-endpoint", "gpu", "--endpoint-target",
                 "inference_component"]) == 2
    assert "needs inference_component" in capsys.readouterr().err


def test_objective_sla_covers_the_peak_the_cost_objective_would_not_buy(
        capsys: pytest.CaptureFixture[str]) -> None:
    # the issue's bursty subset function at trace minute 180: PC does not pay (cost) but the
    # sla objective covers the forecast peak, and says what pays
    base = ["plan", "--trace", str(TRACES / "azure2019_invocations.csv"), "--durations",
            str(TRACES / "azure2019_durations.csv"), "--function", "bb5d90ea", "--at-minute",
            "180", "--unreserved", "900", "--floor", "1", "--cap", "10", "--json"]
    assert main(base) == 0
    cost = json.loads(capsys.readouterr().out)["plans"][0]
    assert main([*base, "--objective", "sla"]) == 0
    sla = json.loads(capsys.readouterr().out)["plans"][0]
    assert sla["provisioned_concurrency"] > cost["provisioned_concurrency"] >= 1
    assert "objective sla: cover the peak with" in sla["reason"]
    assert "objective sla" not in cost["reason"]
    assert main([*base, "--objective", "latency"]) == 2
    assert "--objective" in capsys.readouterr().err
