"""``planner.plan_run``: one plan for a whole run, shared by the warmer, ``warmstart plan`` and the
simulator (the same plan for the same input), with every number explained."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from infra.cli import main
from warmers.config import WarmerConfig
from warmers.plan.policy import PlanError, WarmPlan
from warmers.plan.run import AccountLimits, MetricsMissing, RunPlan, plan_run
from warmers.series import MetricSeries

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
REAL = TRACES / "azure2019_fullday_realhash"
NOW = 1_800_000_000.0 - 1_800_000_000.0 % 60
HELD_MS = 600.0  # with invocations = 100 x c per minute, Little's law gives c in flight


def steady(name: str, in_flight: float, minutes: int = 720, *, end_s: float = NOW) -> MetricSeries:
    """A load that holds ``in_flight`` requests all along (peak = mean = in_flight)."""
    return MetricSeries(function_name=name, alias="live", start_s=end_s - minutes * 60.0,
                        invocations=np.full(minutes, in_flight * 100.0),
                        concurrency=np.full(minutes, in_flight),
                        duration_ms=np.full(minutes, HELD_MS))


def config(*aliases: dict[str, object]) -> WarmerConfig:
    return WarmerConfig.from_dict({"aliases": [{"alias": "live"} | a for a in aliases],
                                   "history_days": 0.5})


def values(entry: object) -> dict[str, object]:
    return {s.name: s.value for s in entry.steps}  # type: ignore[attr-defined]


def test_headroom_is_carried_from_alias_to_alias_and_explained() -> None:
    # GIVEN three aliases that each want 30 and an account with 170 unreserved (70 above the
    # 100 that must stay unreserved), "b" already holding 10
    cfg = config(*({"function_name": f, "cap": 100, "budget_usd_per_hour": 10} for f in "abc"))
    series = {f"{f}:live": steady(f, 30.0) for f in "abc"}
    held = WarmPlan("b", "live", "provisioned", 10, 0, 0, 0.15, 10.0, "naive", NOW - 3600,
                    NOW - 3600, "earlier", ceiling=100)
    run = plan_run(series, {"b:live": held}, AccountLimits(170, 1000, "GetAccountSettings"), cfg,
                   NOW)
    # THEN they are served in config order from one pool of 70 + the 10 b gives back: a 30,
    # b 30 (its 10 + 20 more), c the 20 left
    assert [p.provisioned_concurrency for p in run.plans] == [30, 30, 20]
    assert run.headroom_left == 0
    a, b, c = run.aliases
    assert values(a)["account_headroom"] == 70 and values(b)["account_headroom"] == 50
    assert values(c)["account_headroom"] == 20
    assert "- 30 net taken by the aliases before it" in b.steps[0].source
    assert "- 50 net taken by the aliases before it" in c.steps[0].source
    assert "limited to 20 by the account's unreserved concurrency" in c.plan.reason
    # AND every number of a's plan has its source, in the order the planner derived it
    names = [s.name for s in a.steps]
    for earlier, later in [("account_headroom", "demand"), ("demand", "cover"),
                           ("cover", "pays"), ("busy", "pays"), ("pays", "hysteresis"),
                           ("hysteresis", "floor"), ("cap", "budget_units"),
                           ("budget_units", "headroom"), ("headroom", "provisioned_concurrency")]:
        assert names.index(earlier) < names.index(later)
    v = values(a)
    assert v["cover"] == 30 and v["pays"] == 30 and v["provisioned_concurrency"] == 30
    assert v["hourly_cost_usd"] == pytest.approx(a.plan.hourly_cost_usd)
    assert v["busy"] == pytest.approx(30.0)
    assert all(s.source for s in a.steps)


def test_a_busy_function_gets_pc_against_lambdas_default_quota_not_pings() -> None:
    """The issue's case: a function with 64 requests in flight on average, planned from a trace
    with no account to ask. Unknown limits never raise PC (the old ``warmstart plan`` then said
    'warm pings x50, account headroom unknown'); a trace is planned against Lambda's default
    quota, as the simulator is."""
    cfg = config({"function_name": "busy"})
    series = {"busy:live": steady("busy", 64.0)}
    unknown = plan_run(series, {}, AccountLimits.unknown("no account"), cfg, NOW).aliases[0]
    assert unknown.plan.action == "ping" and "headroom unknown" in unknown.plan.reason
    assert values(unknown)["headroom"] is None
    default = plan_run(series, {}, AccountLimits.lambda_default(), cfg, NOW).aliases[0]
    assert default.plan.action == "provisioned" and default.plan.provisioned_concurrency == 50
    assert "capped at 50" in default.plan.reason
    assert "default quota of 1,000" in default.steps[0].source


def test_missing_and_unusable_metrics_plan_the_others_and_say_why() -> None:
    # GIVEN "a" whose metrics failed, "b" with a series the forecaster refuses (negative
    # counts), "c" fine, and a held plan for "a"
    cfg = config(*({"function_name": f, "floor": 1} for f in "abc"))
    bad = steady("b", 5.0)
    bad = dataclasses.replace(bad, concurrency=np.full(bad.n_minutes, -3.0))
    held = WarmPlan("a", "live", "provisioned", 12, 0, 0, 0.18, 11.5, "naive", NOW - 60,
                    NOW - 600, "earlier", ceiling=50)
    run = plan_run({"a:live": MetricsMissing("Throttling: Rate exceeded"), "b:live": bad,
                    "c:live": steady("c", 8.0)}, {"a:live": held},
                   AccountLimits(900, 1000, "GetAccountSettings"), cfg, NOW)
    a, b, c = run.aliases
    # THEN a keeps its last good plan, b falls back to its floor, c is planned as usual
    assert a.plan.fallback and a.plan.provisioned_concurrency == 12
    assert a.notes[0] == "metrics unavailable: Throttling: Rate exceeded"
    assert b.plan.fallback and b.plan.provisioned_concurrency == 1
    assert b.notes[0].startswith("metrics unusable: ") and b.forecast is None
    assert not c.plan.fallback and c.plan.provisioned_concurrency >= 8 and c.forecast is not None
    # an alias with no entry at all is missing too (said, not guessed)
    alone = plan_run({}, {}, AccountLimits(900, 1000, "x"), config({"function_name": "d"}), NOW)
    assert alone.aliases[0].notes == ("metrics unavailable: no series given for this alias",)


def test_degradation_level_and_idle_note_are_part_of_the_plan() -> None:
    cfg = config({"function_name": "hot", "strategy": "snapstart",
                  "degradation_parameter": "/p/hot"},
                 {"function_name": "idle", "floor": 1},
                 {"function_name": "open", "degradation_parameter": "/p/open"})
    idle = MetricSeries("idle", "live", NOW - 720 * 60, np.zeros(720), np.zeros(720),
                        np.full(720, np.nan))
    run = plan_run({"hot:live": steady("hot", 999.0), "idle:live": idle,
                    "open:live": steady("open", 2.0)}, {},
                   AccountLimits.unknown("GetAccountSettings failed"), cfg, NOW)
    hot, quiet, open_ = run.aliases
    # 999 of the account's 1,000... unknown here: the level needs the available concurrency
    assert hot.degradation_level is None and "available concurrency unknown" in hot.notes[-1]
    assert quiet.plan.provisioned_concurrency == 1 and quiet.notes[0].startswith("zero traffic")
    assert quiet.plan.reason.startswith("zero traffic")
    assert open_.degradation_level is None
    known = plan_run({"hot:live": steady("hot", 999.0)}, {}, AccountLimits.lambda_default(),
                     cfg, NOW).aliases[0]
    assert known.degradation_level == "L3" and not known.actuates
    assert values(known)["degradation_level"] == "L3"


def test_run_plan_is_frozen_plain_data_and_json() -> None:
    cfg = config({"function_name": "a"}, {"function_name": "b", "strategy": "ping"})
    run = plan_run({"a:live": steady("a", 4.0), "b:live": MetricsMissing("no data")}, {},
                   AccountLimits(900, 1000, "GetAccountSettings"), cfg, NOW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.headroom_left = 3  # type: ignore[misc]
    doc = json.loads(json.dumps(run.to_dict(), allow_nan=False))
    assert [a["key"] for a in doc["aliases"]] == ["a:live", "b:live"]
    assert doc["aliases"][1]["plan"]["demand"] is None  # NaN -> null
    assert doc["aliases"][0]["plan"] == json.loads(json.dumps(run.plans[0].to_dict()))
    assert WarmPlan.from_dict(doc["aliases"][0]["plan"]) == run.plans[0]
    assert {"name", "value", "source"} == set(doc["aliases"][0]["steps"][0])
    assert isinstance(run, RunPlan) and run.alias("b:live").strategy == "ping"
    with pytest.raises(KeyError, match="zz:live: not in this run plan"):
        run.alias("zz:live")


def test_a_policy_that_cannot_be_planned_is_refused_before_anything_is_planned() -> None:
    cfg = config({"function_name": "a"}, {"function_name": "b", "floor": 40,
                                          "budget_usd_per_hour": 0.1})
    with pytest.raises(PlanError, match="b:live: floor 40 costs"):
        plan_run({"a:live": steady("a", 4.0)}, {}, AccountLimits(900, 1000, "x"), cfg, NOW)


def _trace_case() -> tuple[str, MetricSeries, WarmerConfig]:
    """One real trace function (busy all day) as the three callers see it, at minute 600."""
    from warmers.traces import read_durations, read_invocations, trace_series

    functions = read_invocations(REAL / "invocations.csv")
    name = next(k for k in functions if k.startswith("6590c82e"))
    stats = read_durations(REAL / "durations.csv")[name]
    series = trace_series(functions[name], duration_ms=stats.average_ms)
    cfg = WarmerConfig.from_dict({"aliases": [{"function_name": name, "alias": "live"}],
                                  "unreserved_concurrency": 1000}, dry_run=True)
    return name, series, cfg


def test_warmer_cli_and_simulator_make_the_same_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """GIVEN one trace function's first 600 minutes, an account of 1,000 with nothing
    provisioned, the warmer's default config and the same time WHEN the warmer (run_once),
    ``warmstart plan --trace`` and the simulator's warmstart policy plan it THEN the plans are
    equal, field for field; the warmer's and the CLI's explanations give the same numbers."""
    from warmers.actuators import WarmPingActuator
    from warmers.runner import WarmerRuntime, run_once
    from warmers.simulator.policies import Observed
    from warmers.simulator.trace import Workload
    from warmers.simulator.warmstart_policy import WarmstartPolicy
    from warmers.state import MemoryPlanStore
    from warmers.traces import TraceMetricsSource, read_durations, read_invocations

    name, series, cfg = _trace_case()
    m = 600
    now_s = m * 60.0
    # the warmer: run_once over a trace metrics source (dry run: nothing to actuate here)
    runtime = WarmerRuntime(
        metrics=TraceMetricsSource(read_invocations(REAL / "invocations.csv"),
                                   read_durations(REAL / "durations.csv")),
        pc_actuator=None, ping_actuator=WarmPingActuator(None),  # type: ignore[arg-type]
        store=MemoryPlanStore(), publisher=None)
    warmer = run_once(now_s, None, cfg, runtime=runtime)[0]
    assert runtime.last_run is not None
    # the CLI: the trace planned at minute m - 1 (its last observed minute)
    assert main(["plan", "--trace", str(REAL / "invocations.csv"), "--durations",
                 str(REAL / "durations.csv"), "--function", name[:8], "--at-minute", str(m - 1),
                 "--unreserved", "1000", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["run_plan"]["aliases"][0]
    # the simulator: its warmstart policy planning every m minutes, with the warmer's config
    n = series.n_minutes
    observed = Observed(invocations=series.invocations, concurrency_max=series.concurrency,
                        concurrency_mean=series.concurrency, duration_ms=series.duration_ms)
    workload = Workload(function_id=name, trigger="http", arrivals_ms=np.zeros(0),
                        durations_ms=np.zeros(0), counts=np.zeros(n, dtype=np.int64),
                        memory_mb=1024, sla_ms=2000.0, p99_duration_ms=0.0)
    policy = WarmstartPolicy(plan_every_min=m, forecast_config=cfg.forecast,
                             planner_config=cfg.planner)
    sim = policy.schedule(workload, observed)[3][1]  # the plan at minute m
    assert warmer.action == "provisioned" and warmer.provisioned_concurrency >= 1
    as_json = json.loads(json.dumps(warmer.to_dict()))
    assert cli["plan"] == as_json
    assert sim == warmer
    pairs = [(s.name, s.value) for s in runtime.last_run.aliases[0].steps]
    assert [[s["name"], s["value"]] for s in cli["steps"]] == json.loads(json.dumps(pairs))


def test_cli_explain_prints_each_number_with_its_source(capsys: pytest.CaptureFixture[str]) -> None:
    name, _, _ = _trace_case()
    other = "308ecb6c"
    assert main(["plan", "--trace", str(REAL / "invocations.csv"), "--durations",
                 str(REAL / "durations.csv"), "--function", name[:8], "--function", other,
                 "--unreserved", "101", "--explain"]) == 0
    out = capsys.readouterr().out
    assert out.count("    explain:") == 2
    # the second alias sees what the first took of the one environment above the minimum
    blocks = out.split("    explain:")
    first_pc = int(out.split("provisioned concurrency ", 1)[1].split(",")[0])
    assert first_pc == 1 and "account_headroom" in blocks[1]
    assert f"- {first_pc} net taken by the aliases before it this run" in blocks[2]
    for word in ("demand", "cover", "busy", "break_even", "pays", "hysteresis", "floor",
                 "cap", "budget_units", "headroom", "hourly_cost_usd"):
        assert f"      {word} " in blocks[1]
    assert "unreserved concurrency above the 100 minimum left after every alias: 0" in out
