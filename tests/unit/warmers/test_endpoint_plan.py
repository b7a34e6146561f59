"""The GPU overflow endpoint's capacity plan (``planner.plan_endpoint``, inside ``plan_run``):
the overflow demand from the agents' forecasts and PC plans, the rule for when the endpoint
pays, the shared hysteresis and clamps, the fallback, and bad configuration."""

from __future__ import annotations

import json

import numpy as np
import pytest

from warmers.config import WarmerConfig, WarmerConfigError
from warmers.plan.endpoint import AgentDemand, EndpointPlan, EndpointPolicy, plan_endpoint
from warmers.plan.policy import PlanError, PlannerConfig
from warmers.plan.run import AccountLimits, MetricsMissing, plan_run
from warmers.series import MetricSeries

NOW = 1_800_000_000.0 - 1_800_000_000.0 % 60
G6 = 1.1267  # warmers/prices.json sagemaker_ml_g6_xlarge_hour
MINUTES = 240


def bursty(name: str, peak: float, every: int = 7) -> MetricSeries:
    conc = np.ones(MINUTES)
    conc[np.arange(MINUTES) % every == 0] = peak
    conc[-5:] = 1.0
    return MetricSeries(function_name=name, alias="live", start_s=NOW - MINUTES * 60.0,
                        invocations=conc * 100.0, concurrency=conc,
                        duration_ms=np.full(MINUTES, 600.0))


def config(strategy: str = "snapstart", **endpoint: object) -> WarmerConfig:
    return WarmerConfig.from_dict({
        "aliases": [{"function_name": "intent", "alias": "live", "strategy": strategy,
                     "memory_mb": 2048},
                    {"function_name": "lookup", "alias": "live", "strategy": "none"}],
        "endpoints": [{"endpoint_name": "gpu", "agents": ["intent:live", "lookup:live"],
                       "target": "inference_component", "inference_component": "overflow-ic",
                       "cap": 4, "budget_usd_per_hour": 5.0,
                       "failed_answer_usd": None} | endpoint],
        "history_days": MINUTES / 1440})


def series() -> dict[str, MetricSeries | MetricsMissing]:
    return {"intent:live": bursty("intent", 8.0), "lookup:live": bursty("lookup", 4.0)}


def values(entry: object) -> dict[str, object]:
    return {s.name: s.value for s in entry.steps}  # type: ignore[attr-defined]


def demand(key: str, new: int, chance: float = 1.0) -> AgentDemand:
    return AgentDemand(key, peak=new + 1, warm=1, new_environments=new, chance=chance)


def test_the_forecast_rise_of_every_agent_is_one_endpoints_demand_counted_once() -> None:
    # GIVEN a SnapStart agent (the forecaster runs for it although the warmer plans it no PC)
    # and an on-demand one, both bursting every 7 minutes, calm now
    run = plan_run(series(), {}, AccountLimits.lambda_default(), config(), NOW)
    entry = run.endpoint("gpu")
    steps = values(entry)
    # THEN each agent's new environments (forecast peak - warm now) add up to one demand
    assert run.alias("intent:live").forecast is not None
    assert steps["new_environments[intent:live]"] == 7
    assert steps["new_environments[lookup:live]"] == 3
    assert steps["overflow_concurrency"] == 10.0 and steps["instances_wanted"] == 3
    # failed answers not priced: the cap and budget bound the spend
    assert entry.plan.pays and entry.plan.capacity == 3
    assert entry.plan.hourly_cost_usd == pytest.approx(3 * G6)  # one endpoint, one cost
    assert "failed answers not priced" in entry.plan.reason
    assert entry.plan.cold_starts_per_hour == pytest.approx(10 * 12)
    json.dumps(run.to_dict())  # the whole run plan stays JSON


def test_an_endpoint_that_does_not_pay_plans_zero_and_says_why_with_numbers() -> None:
    # GIVEN failed answers valued at 0.1 cent: 120 cold starts/h are worth $0.12/h
    run = plan_run(series(), {}, AccountLimits.lambda_default(),
                   config(failed_answer_usd=0.001), NOW)
    plan = run.endpoint("gpu").plan
    assert not plan.pays and plan.capacity == 0 and plan.hourly_cost_usd == 0.0
    assert plan.alternative_usd_per_hour == pytest.approx(120 * 0.001)
    assert "does not pay: 3 instance(s) $3.3801/h > $0.1200/h" in plan.reason
    # at 5 cents a failed answer ($6/h) the same capacity pays
    dear = plan_run(series(), {}, AccountLimits.lambda_default(),
                    config(failed_answer_usd=0.05), NOW).endpoint("gpu").plan
    assert dear.pays and dear.capacity == 3


def test_pc_that_covers_the_same_cold_starts_for_less_is_the_alternative() -> None:
    policy = EndpointPolicy("gpu", ("a:live",), target="inference_component",
                            inference_component="ic")
    cfg = PlannerConfig()
    # GIVEN a provisioned agent with 3 new environments of 2 GB: PC for them costs 3 x $0.03/h
    entry = plan_endpoint(policy, {"a:live": demand("a:live", 3)}, {"a:live": "provisioned"},
                          {"a:live": 2048}, cfg, window_min=5, now_s=NOW, previous=None)
    pc = cfg.cost.pc_hourly_usd(3, 2048)
    assert entry.plan.alternative_usd_per_hour == pytest.approx(pc)
    assert not entry.plan.pays and entry.plan.capacity == 0
    assert f"a:live PC for 3 ${pc:.4f}/h" in entry.plan.reason
    # the same with a production variant: held at 1, the least it can hold, and said so
    variant = EndpointPolicy("gpu", ("a:live",))
    held = plan_endpoint(variant, {"a:live": demand("a:live", 3)}, {"a:live": "provisioned"},
                         {"a:live": 2048}, cfg, window_min=5, now_s=NOW, previous=None).plan
    assert held.capacity == 1 and held.hourly_cost_usd == pytest.approx(G6)
    assert "only inference components scale to zero" in held.reason


def test_pc_is_the_alternative_only_for_what_its_cap_still_allows() -> None:
    policy = EndpointPolicy("gpu", ("a:live",), target="inference_component",
                            inference_component="ic", failed_answer_usd=0.5)
    cfg = PlannerConfig()
    room = AgentDemand("a:live", peak=8, warm=5, new_environments=3, chance=1.0, pc_room=1)
    # GIVEN 3 new environments of a provisioned agent whose PC may grow by 1 more (its cap)
    entry = plan_endpoint(policy, {"a:live": room}, {"a:live": "provisioned"},
                          {"a:live": 2048}, cfg, window_min=5, now_s=NOW, previous=None)
    # THEN PC prices 1 of them and the other 2 are failed answers (12 windows/h x $0.50)
    pc = cfg.cost.pc_hourly_usd(1, 2048)
    assert entry.plan.alternative_usd_per_hour == pytest.approx(pc + 2 * 12 * 0.5)
    assert "2 beyond the PC it may still add (1" in entry.plan.reason
    assert entry.plan.pays and entry.plan.capacity == 1  # $1.13/h < $12.0x/h
    # unpriced failed answers beyond the cap: the endpoint pays, the cap and budget bound it
    capped = AgentDemand("a:live", peak=8, warm=5, new_environments=3, chance=1.0, pc_room=0)
    unpriced = EndpointPolicy("gpu", ("a:live",), target="inference_component",
                              inference_component="ic", failed_answer_usd=None)
    plan = plan_endpoint(unpriced, {"a:live": capped}, {"a:live": "provisioned"},
                         {"a:live": 2048}, cfg, window_min=5, now_s=NOW, previous=None).plan
    assert plan.pays and plan.capacity == 1 and "failed answers not priced" in plan.reason


def test_plan_run_gives_a_capped_provisioned_agent_its_pc_room() -> None:
    # GIVEN the provisioned agent capped at 2 PC, bursting to 8
    cfg = WarmerConfig.from_dict({
        "aliases": [{"function_name": "intent", "alias": "live", "strategy": "provisioned",
                     "memory_mb": 2048, "cap": 2, "objective": "sla"}],
        "endpoints": [{"endpoint_name": "gpu", "agents": ["intent:live"],
                       "target": "inference_component", "inference_component": "overflow-ic",
                       "cap": 4}],
        "history_days": MINUTES / 1440})
    run = plan_run({"intent:live": bursty("intent", 8.0)}, {}, AccountLimits.lambda_default(),
                   cfg, NOW)
    alias = run.alias("intent:live")
    assert alias.plan.provisioned_concurrency == 2
    assert alias.overflow_demand is not None and alias.overflow_demand.pc_room == 0
    # THEN what PC cannot take goes to the endpoint, which pays (failed answers not priced)
    plan = run.endpoint("gpu").plan
    assert plan.pays and plan.capacity >= 1 and "beyond the PC it may still add (0" in plan.reason


def test_the_capacity_follows_the_shared_hysteresis_floor_cap_and_budget() -> None:
    policy = EndpointPolicy("gpu", ("a:live",), target="inference_component",
                            inference_component="ic", cap=10, budget_usd_per_hour=3.0)
    cfg = PlannerConfig()

    def plan(new: int, now: float, previous: EndpointPlan | None) -> EndpointPlan:
        return plan_endpoint(policy, {"a:live": demand("a:live", new)}, {"a:live": "none"},
                             {"a:live": 1024}, cfg, window_min=5, now_s=now,
                             previous=previous).plan

    # GIVEN 20 new environments: 5 instances wanted, the $3/h budget pays 2
    first = plan(20, NOW, None)
    assert first.capacity == 2 and "limited to 2 by the budget $3.00/h" in first.reason
    # WHEN nothing is forecast a minute later THEN kept (cooldown), lowered only after it
    kept = plan(0, NOW + 60, first)
    assert kept.capacity == 2 and "hysteresis: kept 2 instead of 0" in kept.reason
    assert kept.changed_at_s == NOW
    later = plan(0, NOW + 60 + cfg.scale_down_cooldown_s, kept)
    assert later.capacity == 0 and later.changed_at_s == NOW + 60 + cfg.scale_down_cooldown_s
    # a floor holds capacity although nothing is forecast
    floored = EndpointPolicy("gpu", ("a:live",), target="inference_component",
                             inference_component="ic", floor=1)
    held = plan_endpoint(floored, {"a:live": demand("a:live", 0)}, {"a:live": "none"},
                         {"a:live": 1024}, cfg, window_min=5, now_s=NOW, previous=None).plan
    assert held.capacity == 1 and "raised to floor 1" in held.reason


def test_missing_metrics_keep_the_last_good_capacity() -> None:
    cfg = config()
    good = plan_run(series(), {}, AccountLimits.lambda_default(), cfg, NOW).endpoint("gpu")
    missing = {"intent:live": MetricsMissing("Throttling: Rate exceeded"),
               "lookup:live": bursty("lookup", 4.0)}
    run = plan_run(missing, {}, AccountLimits.lambda_default(), cfg, NOW + 60,
                   previous_endpoints={"gpu": good.plan})
    entry = run.endpoint("gpu")
    assert entry.plan.fallback and entry.plan.capacity == good.plan.capacity == 3
    assert "kept the last good capacity 3" in entry.plan.reason
    assert entry.notes == ("no usable forecast for intent:live: capacity kept",)
    # and without a previous plan: the floor
    fresh = plan_run(missing, {}, AccountLimits.lambda_default(), cfg, NOW).endpoint("gpu")
    assert fresh.plan.capacity == 0 and fresh.plan.fallback


def test_a_saved_endpoint_plan_round_trips_and_a_malformed_one_is_refused() -> None:
    plan = plan_run(series(), {}, AccountLimits.lambda_default(), config(),
                    NOW).endpoint("gpu").plan
    assert EndpointPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    with pytest.raises(PlanError, match="saved endpoint plan is malformed"):
        EndpointPlan.from_dict({"endpoint_name": "gpu"})


@pytest.mark.parametrize(("endpoint", "message"), [
    ({"agents": ["other:live"]}, "agents \\['other:live'\\] are not in 'aliases'"),
    ({"agents": "intent:live"}, "agents must be a list"),
    ({"warm": True}, "unknown keys \\['warm'\\]"),
    ({"target": "serverless"}, "target must be one of"),
    ({"inference_component": None}, "needs inference_component"),
    ({"floor": 3, "cap": 2}, "need 0 <= floor <= cap"),
    ({"concurrent_requests_per_instance": 0}, "must be >= 1"),
    ({"failed_answer_usd": -1}, "failed_answer_usd must be >= 0"),
])
def test_bad_endpoint_config_is_refused_naming_the_entry(endpoint: dict[str, object],
                                                          message: str) -> None:
    with pytest.raises(WarmerConfigError, match=f"endpoints\\[0\\]: .*{message}"):
        config(**endpoint)


def test_a_floor_above_the_budget_or_an_unpriced_instance_is_refused_before_planning() -> None:
    for endpoint, message in (({"floor": 3, "budget_usd_per_hour": 2.0}, "floor 3 costs"),
                              ({"instance_type": "ml.x9.huge"}, "no price for ml.x9.huge")):
        with pytest.raises(PlanError, match=message):
            plan_run(series(), {}, AccountLimits.lambda_default(), config(**endpoint), NOW)
    priced = plan_run(series(), {}, AccountLimits.lambda_default(),
                      config(instance_type="ml.x9.huge", instance_usd_per_hour=0.5), NOW)
    assert priced.endpoint("gpu").plan.hourly_cost_usd == pytest.approx(3 * 0.5)


def test_the_account_headroom_left_is_shared_once_among_the_agents_pc_rooms() -> None:
    import dataclasses

    # GIVEN two provisioned agents bursting to 8; the account leaves 10 above its reserve,
    # which the second (objective sla) takes entirely
    def alias(name: str, objective: str) -> dict[str, object]:
        return {"function_name": name, "alias": "live", "strategy": "provisioned",
                "memory_mb": 2048, "cap": 50, "objective": objective}

    cfg = WarmerConfig.from_dict({
        "aliases": [alias("a", "cost"), alias("b", "sla")],
        "endpoints": [{"endpoint_name": "gpu", "agents": ["a:live", "b:live"],
                       "target": "inference_component", "inference_component": "ic", "cap": 4,
                       "failed_answer_usd": 0.5}],
        "history_days": MINUTES / 1440})
    account = dataclasses.replace(AccountLimits.lambda_default(), unreserved_concurrency=110)
    run = plan_run({"a:live": bursty("a", 8.0), "b:live": bursty("b", 8.0)}, {}, account, cfg,
                   NOW)
    assert run.headroom_left == 0
    rooms = [run.alias(k).overflow_demand.pc_room for k in ("a:live", "b:live")]  # type: ignore[union-attr]
    # THEN no agent counts on PC the account can no longer give: the endpoint is priced
    # against the failed answers, and pays
    assert rooms == [0, 0]
    plan = run.endpoint("gpu").plan
    assert plan.pays and plan.capacity >= 1, plan.reason
