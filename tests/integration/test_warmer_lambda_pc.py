"""Lambda provisioned-concurrency actuator with botocore Stubber (moto 5.2 lacks these APIs)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from warmers.actuators import ActuationError, LambdaPCActuator
from warmers.plan.policy import WarmPlan

NOW = 1_800_000_000.0
ARN = "arn:aws:lambda:us-east-1:123456789012:function:agent"


def plan(pc: int, alias: str = "live") -> WarmPlan:
    return WarmPlan("agent", alias, "provisioned" if pc else "none", pc, 0, 0, 0.0, float(pc),
                    "naive", NOW, NOW, "test")


@pytest.fixture
def lam():
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def _alias(stub, version="7"):
    stub.add_response("get_alias", {"AliasArn": f"{ARN}:live", "Name": "live",
                                    "FunctionVersion": version},
                      {"FunctionName": "agent", "Name": "live"})


def test_sets_pc_on_alias_and_reconciles_old_version(lam):
    client, stub = lam
    _alias(stub)
    stub.add_client_error("get_provisioned_concurrency_config",
                          "ProvisionedConcurrencyConfigNotFoundException", http_status_code=404,
                          expected_params={"FunctionName": "agent", "Qualifier": "live"})
    stub.add_response("put_provisioned_concurrency_config",
                      {"RequestedProvisionedConcurrentExecutions": 6, "Status": "IN_PROGRESS"},
                      {"FunctionName": "agent", "Qualifier": "live",
                       "ProvisionedConcurrentExecutions": 6})
    stub.add_response("list_provisioned_concurrency_configs", {
        "ProvisionedConcurrencyConfigs": [
            {"FunctionArn": f"{ARN}:live", "RequestedProvisionedConcurrentExecutions": 6}],
        "NextMarker": "m2"}, {"FunctionName": "agent"})
    stub.add_response("list_provisioned_concurrency_configs", {
        "ProvisionedConcurrencyConfigs": [
            {"FunctionArn": f"{ARN}:5", "RequestedProvisionedConcurrentExecutions": 4}]},
        {"FunctionName": "agent", "Marker": "m2"})
    stub.add_response("delete_provisioned_concurrency_config", {},
                      {"FunctionName": "agent", "Qualifier": "5"})
    res = LambdaPCActuator(client).apply(plan(6), now_s=NOW)
    assert res.applied and "PC 0 -> 6 on live (version 7)" in res.detail
    assert "version(s) 5" in res.detail


def test_unchanged_and_removed(lam):
    client, stub = lam
    _alias(stub)
    stub.add_response("get_provisioned_concurrency_config",
                      {"RequestedProvisionedConcurrentExecutions": 6})
    stub.add_response("list_provisioned_concurrency_configs", {"ProvisionedConcurrencyConfigs": []})
    res = LambdaPCActuator(client).apply(plan(6), now_s=NOW)
    assert not res.applied and "already 6" in res.detail
    _alias(stub)
    stub.add_response("get_provisioned_concurrency_config",
                      {"RequestedProvisionedConcurrentExecutions": 6})
    stub.add_response("delete_provisioned_concurrency_config", {},
                      {"FunctionName": "agent", "Qualifier": "live"})
    res = LambdaPCActuator(client, reconcile_versions=False).apply(plan(0), now_s=NOW)
    assert res.applied and "6 -> 0" in res.detail


def test_conflict_is_retried(lam):
    client, stub = lam
    sleeps: list[float] = []
    _alias(stub)
    stub.add_response("get_provisioned_concurrency_config",
                      {"RequestedProvisionedConcurrentExecutions": 2})
    stub.add_client_error("put_provisioned_concurrency_config", "ResourceConflictException",
                          http_status_code=409)
    stub.add_response("put_provisioned_concurrency_config",
                      {"RequestedProvisionedConcurrentExecutions": 3})
    act = LambdaPCActuator(client, reconcile_versions=False, sleep=sleeps.append,
                           rng=lambda: 1.0)
    assert act.apply(plan(3), now_s=NOW).applied and sleeps == [0.2]


def test_latest_is_refused(lam):
    client, stub = lam
    with pytest.raises(ActuationError, match=r"\$LATEST"):
        LambdaPCActuator(client).apply(plan(2, alias="$LATEST"), now_s=NOW)
    _alias(stub, version="$LATEST")
    with pytest.raises(ActuationError, match="publish a version"):
        LambdaPCActuator(client).apply(plan(2), now_s=NOW)
