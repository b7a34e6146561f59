"""The endpoint's spend guard (``planner.plan_endpoint``, issue 19 item 4): the spend over a
rolling window against the overflow requests the agents actually answered in it; a window that
paid for nothing scales the endpoint in to the floor and says so."""

from __future__ import annotations

import json

import pytest

from warmers.plan.endpoint import (
    MAX_SPEND_SEGMENTS,
    AgentDemand,
    EndpointPlan,
    EndpointPolicy,
    plan_endpoint,
)
from warmers.plan.policy import PlanError, PlannerConfig
from warmers.plan.run import AccountLimits, plan_run

NOW = 1_800_000_000.0 - 1_800_000_000.0 % 60
G6 = 1.1267  # warmers/prices.json sagemaker_ml_g6_xlarge_hour
KEY = "intent:live"


def policy(**kw: object) -> EndpointPolicy:
    base: dict[str, object] = {"endpoint_name": "gpu", "agents": (KEY,),
                               "target": "inference_component", "inference_component": "ic",
                               "cap": 1, "budget_usd_per_hour": 5.0,
                               "failed_answer_usd": None}
    return EndpointPolicy(**(base | kw))  # type: ignore[arg-type]


def demand(new: int = 3) -> dict[str, AgentDemand | None]:
    # failed answers not priced: the endpoint pays for its cap whenever cold starts come
    return {KEY: AgentDemand(KEY, peak=new + 1, warm=1, new_environments=new, chance=1.0)}


def steps(run: object) -> dict[str, object]:
    return {s.name: s.value for s in run.steps}  # type: ignore[attr-defined]


def runs(p: EndpointPolicy, minutes: range, answered: int | None,
         previous: EndpointPlan | None = None) -> list[EndpointPlan]:
    """One warmer run a minute over ``minutes`` (from NOW), each fed the last plan."""
    out = []
    for m in minutes:
        run = plan_endpoint(p, demand(), {KEY: "snapstart"}, {KEY: 2048}, PlannerConfig(),
                            window_min=15, now_s=NOW + 60.0 * m, previous=previous,
                            answered_in_window=answered)
        previous = run.plan
        out.append(run.plan)
    return out


def test_the_default_threshold_is_one_instance_held_for_the_window() -> None:
    assert policy().spend_guard_threshold_usd() == pytest.approx(G6)
    assert policy(spend_guard_window_min=30).spend_guard_threshold_usd() == pytest.approx(G6 / 2)
    assert policy(spend_guard_usd=0.25).spend_guard_threshold_usd() == 0.25


def test_a_window_that_paid_for_no_answer_scales_in_to_the_floor_and_holds_it() -> None:
    # GIVEN an endpoint bought for forecast cold starts every minute, and 0 overflow answers
    plans = runs(policy(), range(121), answered=0)
    # THEN it holds its 1 instance until the window holds one instance-hour of spend
    assert [p.capacity for p in plans[:60]] == [1] * 60
    assert plans[59].window_spend_usd == pytest.approx(59 * G6 / 60)
    # at minute 60 the window spent $1.1267 (>= the threshold) for 0 answers: the floor
    guarded = plans[60]
    assert guarded.capacity == 0 and guarded.window_spend_usd == pytest.approx(G6)
    assert guarded.spend_guard_since_s == NOW + 3600
    assert guarded.reason.startswith("spend guard: $1.1267 spent in the last 60 min >= "
                                     "$1.1267 (EndpointPolicy.spend_guard_usd) and 0 overflow "
                                     "requests answered: scaled in to the floor 0")
    assert guarded.unanswered_spend_usd == pytest.approx(G6)
    # it holds the floor for one window although the forecast still wants an instance
    assert [p.capacity for p in plans[61:120]] == [0] * 59
    assert all(p.reason.startswith("spend guard: holding the floor") for p in plans[61:120])
    # then the planner buys again (nothing was spent in the last window)
    assert plans[120].capacity == 1 and plans[120].spend_guard_since_s is None
    assert plans[120].window_spend_usd == 0.0


def test_the_guard_says_what_it_did_in_a_plan_step() -> None:
    first = runs(policy(), range(60), answered=0)[-1]
    run = plan_endpoint(policy(), demand(), {KEY: "snapstart"}, {KEY: 2048}, PlannerConfig(),
                        window_min=15, now_s=NOW + 3600, previous=first, answered_in_window=0)
    s = steps(run)
    assert s["spend_guard"] is True and s["answered_in_window"] == 0
    assert s["window_spend_usd"] == pytest.approx(G6)
    assert s["capacity"] == 0
    text = next(x.source for x in run.steps if x.name == "spend_guard")
    assert "0 overflow requests answered: scaled in to the floor 0" in text


def test_answers_in_the_window_keep_the_capacity_and_release_a_hold() -> None:
    plans = runs(policy(), range(121), answered=3)
    assert [p.capacity for p in plans] == [1] * 121
    assert plans[90].unanswered_spend_usd == 0.0
    run = plan_endpoint(policy(), demand(), {KEY: "snapstart"}, {KEY: 2048}, PlannerConfig(),
                        window_min=15, now_s=NOW + 121 * 60, previous=plans[-1],
                        answered_in_window=3)
    detail = next(x.source for x in run.steps if x.name == "spend_guard")
    assert detail == "3 overflow answers for $1.1267 in the window ($0.3756 per answer): not applied"
    # a hold is released as soon as a window answers something
    held = runs(policy(), range(62), answered=0)[-1]
    assert held.capacity == 0 and held.spend_guard_since_s is not None
    resumed = runs(policy(), range(62, 63), answered=1, previous=held)[-1]
    assert resumed.capacity == 1 and resumed.spend_guard_since_s is None


def test_unknown_answers_do_not_apply_the_guard_and_say_so() -> None:
    plans = runs(policy(), range(121), answered=None)
    assert [p.capacity for p in plans] == [1] * 121
    assert plans[-1].window_spend_usd == pytest.approx(G6)
    assert plans[-1].unanswered_spend_usd is None
    run = plan_endpoint(policy(), demand(), {KEY: "snapstart"}, {KEY: 2048}, PlannerConfig(),
                        window_min=15, now_s=NOW + 121 * 60, previous=plans[-1])
    s = steps(run)
    assert s["spend_guard"] is None and s["answered_in_window"] is None
    assert next(x.source for x in run.steps if x.name == "spend_guard") == (
        "not applied: the overflow answers of the window are unknown")
    # a hold already in force is kept while the answers are unknown
    held = runs(policy(), range(61), answered=0)[-1]
    assert runs(policy(), range(61, 62), answered=None, previous=held)[-1].capacity == 0


def test_spend_below_the_threshold_is_not_guarded() -> None:
    # two instances for half an hour reach one instance-hour; one for 59 minutes does not
    plans = runs(policy(), range(60), answered=0)
    assert all(p.capacity == 1 for p in plans)
    two = runs(policy(cap=2), range(31), answered=0)
    assert [p.capacity for p in two[:30]] == [1] * 30  # 3 cold starts / 4 per instance: 1
    doubled = runs(policy(cap=2, concurrent_requests_per_instance=2), range(31), answered=0)
    assert [p.capacity for p in doubled[:30]] == [2] * 30
    assert doubled[30].capacity == 0 and doubled[30].window_spend_usd == pytest.approx(G6)


def test_a_variant_is_scaled_in_to_the_least_it_holds() -> None:
    p = policy(target="variant", inference_component=None, cap=2,
               concurrent_requests_per_instance=2)
    plans = runs(p, range(40), answered=0)
    assert plans[29].capacity == 2 and plans[30].capacity == 1
    assert "spend guard" in plans[30].reason
    assert "only inference components scale to zero" in plans[30].reason


def test_the_saved_plan_round_trips_the_spend_window_and_the_hold() -> None:
    plans = runs(policy(), range(65), answered=0)
    for plan in (plans[30], plans[60], plans[64]):
        doc = json.loads(json.dumps(plan.to_dict()))
        assert EndpointPlan.from_dict(doc) == plan
    # a warmer resuming from the saved plan (a fresh execution environment) plans the same
    restored = EndpointPlan.from_dict(json.loads(json.dumps(plans[30].to_dict())))
    assert runs(policy(), range(31, 65), answered=0, previous=restored) == plans[31:]
    # a plan saved before the guard existed still loads (no spend known)
    old = {k: v for k, v in plans[30].to_dict().items()
           if k not in ("spend_window", "window_spend_usd", "answered_in_window",
                        "spend_guard_since_s")}
    legacy = EndpointPlan.from_dict(old)
    assert legacy.spend_window == () and legacy.spend_guard_since_s is None
    with pytest.raises(PlanError, match="saved endpoint plan is malformed"):
        EndpointPlan.from_dict(plans[30].to_dict() | {"spend_window": [[1, 2]]})


def test_the_spend_window_stays_small_when_capacity_changes_every_run() -> None:
    p = policy(cap=4, concurrent_requests_per_instance=1)
    previous = None
    for m in range(60):
        # alternating wanted capacity, each run's rate a new segment
        got = {KEY: AgentDemand(KEY, peak=1 + 1 + m % 4, warm=1, new_environments=1 + m % 4,
                                chance=1.0)}
        run = plan_endpoint(p, got, {KEY: "snapstart"}, {KEY: 2048},
                            PlannerConfig(scale_down_cooldown_s=0.0), window_min=15,
                            now_s=NOW + 60.0 * m, previous=previous, answered_in_window=5)
        if previous is not None:
            spent = previous.window_spend_usd + previous.hourly_cost_usd / 60.0
            assert run.plan.window_spend_usd == pytest.approx(spent)  # nothing lost by merging
        previous = run.plan
    assert previous is not None
    assert len(previous.spend_window) <= MAX_SPEND_SEGMENTS
    assert len(json.dumps(previous.to_dict())) < 4096  # one standard SSM parameter


def test_plan_run_passes_each_endpoints_answers() -> None:
    from tests.unit.warmers.test_endpoint_plan import config, series

    cfg = config()
    previous: dict[str, EndpointPlan | None] = {}
    capacities = []
    for m in range(0, 70, 5):
        run = plan_run(series(), {}, AccountLimits.lambda_default(), cfg, NOW + 60.0 * m,
                       previous_endpoints=previous, endpoint_answers={"gpu": 0})
        previous = {"gpu": run.endpoint("gpu").plan}
        capacities.append(run.endpoint("gpu").plan.capacity)
    # 3 instances ($3.38/h) reach one instance-hour in 20 minutes: then the floor
    assert capacities[:4] == [3] * 4 and capacities[4] == 0
    assert run.endpoint("gpu").plan.reason.startswith("spend guard")
    unguarded = plan_run(series(), {}, AccountLimits.lambda_default(), cfg, NOW + 60.0 * 20,
                         previous_endpoints={"gpu": None})
    assert unguarded.endpoint("gpu").plan.answered_in_window is None


@pytest.mark.parametrize(("kw", "message"), [
    ({"spend_guard_window_min": 0}, "spend_guard_window_min must be between 1 and 1440 minutes"),
    ({"spend_guard_usd": 0.0}, "spend_guard_usd must be > 0 or null"),
    ({"agent_services": ("a", "b")}, "agent_services must name one service per agent (1), got 2"),
])
def test_a_bad_guard_configuration_is_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        policy(**kw)


def test_the_agents_services_default_to_their_function_names() -> None:
    assert policy().services() == ((KEY, "intent"),)
    assert policy(agent_services=("intent-agent",)).services() == ((KEY, "intent-agent"),)
