"""Application Auto Scaling actuator against moto; ConcurrentUpdateException via Stubber."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from warmers.actuators import DIMENSION, AutoScalingActuator
from warmers.plan.policy import WarmPlan

NOW = 1_800_000_000.0
RID = "function:agent:live"


def plan(pc: int, ceiling: int = 20) -> WarmPlan:
    action = "provisioned" if pc else "none"
    return WarmPlan("agent", "live", action, pc, 0, 0, 0.0, float(pc), "naive", NOW, NOW,
                    "test", ceiling=ceiling if pc else 0)


@pytest.fixture
def aas():
    with mock_aws():
        yield boto3.client("application-autoscaling", region_name="us-east-1")


def _target(aas):
    rows = aas.describe_scalable_targets(ServiceNamespace="lambda", ResourceIds=[RID],
                                         ScalableDimension=DIMENSION)["ScalableTargets"]
    return rows[0] if rows else None


def _actions(aas):
    return aas.describe_scheduled_actions(ServiceNamespace="lambda", ResourceId=RID,
                                          ScalableDimension=DIMENSION)["ScheduledActions"]


def test_raise_now_lower_later_prune_and_remove(aas):
    act = AutoScalingActuator(aas, hold_s=1200)
    # GIVEN no scalable target WHEN a plan asks for 5 THEN the alias is registered with min 5
    res = act.apply(plan(5), now_s=NOW)
    assert res.applied and _target(aas)["MinCapacity"] == 5 and _target(aas)["MaxCapacity"] == 20
    policies = aas.describe_scaling_policies(ServiceNamespace="lambda", ResourceId=RID,
                                             ScalableDimension=DIMENSION)["ScalingPolicies"]
    cfg = policies[0]["TargetTrackingScalingPolicyConfiguration"]
    assert cfg["TargetValue"] == 0.7
    assert cfg["PredefinedMetricSpecification"]["PredefinedMetricType"] == (
        "LambdaProvisionedConcurrencyUtilization")
    assert act.current("agent", "live") == 5
    assert "target tracking 0.7 added" in res.detail
    assert "target tracking" not in act.apply(plan(5), now_s=NOW + 30).detail  # kept, not re-put
    # WHEN the plan drops to 3 THEN min stays 5 now and a scheduled action lowers it later
    res = act.apply(plan(3), now_s=NOW + 60)
    assert _target(aas)["MinCapacity"] == 5 and "scheduled" in res.detail
    (lower,) = _actions(aas)
    assert lower["ScheduledActionName"] == "warmstart-lower"
    assert lower["Schedule"] == "at(2027-01-15T08:21:00)"  # NOW + 60 + 1200 s, UTC
    assert lower["ScalableTargetAction"]["MinCapacity"] == 3
    # a foreign scheduled action is left alone
    aas.put_scheduled_action(ServiceNamespace="lambda", ScheduledActionName="ops-weekend",
                             ResourceId=RID, ScalableDimension=DIMENSION,
                             Schedule="cron(0 0 ? * SAT *)",
                             ScalableTargetAction={"MinCapacity": 1})
    # WHEN demand rises again to 8 THEN min is raised now and the pending lowering is stale
    res = act.apply(plan(8), now_s=NOW + 120)
    assert _target(aas)["MinCapacity"] == 8
    assert [a["ScheduledActionName"] for a in _actions(aas)] == ["ops-weekend"]
    assert "removed stale" in res.detail
    # WHEN nothing is needed THEN the scalable target goes away
    act.apply(plan(0), now_s=NOW + 180)
    assert _target(aas) is None
    assert not act.apply(plan(0), now_s=NOW + 240).applied


def test_past_scheduled_actions_are_pruned(aas):
    act = AutoScalingActuator(aas, hold_s=60)
    act.apply(plan(5), now_s=NOW)
    act.apply(plan(2), now_s=NOW + 10)  # lower at NOW + 70
    assert len(_actions(aas)) == 1
    act.apply(plan(5), now_s=NOW + 600)
    assert _actions(aas) == []


def test_concurrent_update_is_retried_with_jitter_then_gives_up():
    client = boto3.client("application-autoscaling", region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    sleeps: list[float] = []
    act = AutoScalingActuator(client, attempts=3, sleep=sleeps.append, rng=lambda: 0.5)
    stub.add_client_error("describe_scalable_targets", "ConcurrentUpdateException")
    stub.add_client_error("describe_scalable_targets", "ConcurrentUpdateException")
    stub.add_response("describe_scalable_targets", {"ScalableTargets": []})
    stub.add_response("register_scalable_target", {})
    stub.add_response("describe_scaling_policies", {"ScalingPolicies": []})
    stub.add_client_error("put_scaling_policy", "ConcurrentUpdateException")
    stub.add_response("put_scaling_policy", {"PolicyARN": "arn:aws:autoscaling:x"})
    stub.add_response("describe_scheduled_actions", {"ScheduledActions": []})
    with stub:
        assert act.apply(plan(4), now_s=NOW).applied
    assert sleeps == [0.1, 0.2, 0.1]  # 0.5 x min(3, 0.2 x 2^i)
    stub.add_client_error("describe_scalable_targets", "ConcurrentUpdateException")
    stub.add_client_error("describe_scalable_targets", "ConcurrentUpdateException")
    stub.add_client_error("describe_scalable_targets", "ConcurrentUpdateException")
    with stub, pytest.raises(ClientError, match="ConcurrentUpdateException"):
        act.apply(plan(4), now_s=NOW)
    stub.add_client_error("describe_scalable_targets", "ValidationException")
    sleeps.clear()
    with stub, pytest.raises(ClientError, match="ValidationException"):
        act.apply(plan(4), now_s=NOW)
    assert sleeps == []  # not retryable: no retry
