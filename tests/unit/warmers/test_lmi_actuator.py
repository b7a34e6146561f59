"""``ManagedInstancesActuator``: Put/GetFunctionScalingConfig on the alias's LMI version.

moto 5.2 answers both operations with 404 "Not yet implemented" (checked below), so the
actuator is tested against a small fake of :class:`warmers.actuators.ScalingConfigClient` that
raises botocore's real ``ClientError`` shapes.
"""

from __future__ import annotations

import logging
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from warmers.actuators import (
    ActuationError,
    ManagedInstancesActuator,
    ScalingConfigRefused,
    apply_managed_instances,
)
from warmers.plan.policy import WarmPlan
from warmers.plan.run import AccountLimits, AliasRunPlan, RunPlan

ARN = "arn:aws:lambda:us-east-1:123456789012:capacity-provider:cp"


def plan(minimum: int = 10, ceiling: int = 40) -> WarmPlan:
    return WarmPlan("f", "live", "managed_instances", 0, 0, 0, 0.5, 160.0, "naive", 0.0, 0.0,
                    "test", ceiling=ceiling, min_execution_environments=minimum)


def error(code: str, op: str = "PutFunctionScalingConfig") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (fake)"}}, op)


class FakeLambda:
    """Just the four calls the actuator makes; ``put_errors`` are raised in turn."""

    def __init__(self, *, version: str = "7", on_provider: bool = True,
                 put_errors: list[ClientError] | None = None) -> None:
        self.version, self.on_provider = version, on_provider
        self.put_errors = list(put_errors or [])
        self.applied: dict[str, int] = {"MinExecutionEnvironments": 3,
                                        "MaxExecutionEnvironments": 3}
        self.puts: list[dict[str, Any]] = []

    def get_alias(self, **kwargs: Any) -> dict[str, Any]:
        return {"FunctionVersion": self.version}

    def get_function_configuration(self, **kwargs: Any) -> dict[str, Any]:
        assert kwargs["Qualifier"] == self.version
        cp = {"LambdaManagedInstancesCapacityProviderConfig": {"CapacityProviderArn": ARN}}
        return {"Version": self.version, **({"CapacityProviderConfig": cp}
                                            if self.on_provider else {})}

    def get_function_scaling_config(self, **kwargs: Any) -> dict[str, Any]:
        return {"AppliedFunctionScalingConfig": dict(self.applied)}

    def put_function_scaling_config(self, **kwargs: Any) -> dict[str, Any]:
        self.puts.append(kwargs)
        if self.put_errors:
            raise self.put_errors.pop(0)
        self.applied = dict(kwargs["FunctionScalingConfig"])
        return {"FunctionState": "Active"}


def actuator(fake: FakeLambda) -> ManagedInstancesActuator:
    return ManagedInstancesActuator(fake, attempts=3, sleep=lambda s: None, rng=lambda: 0.0)


def test_moto_does_not_implement_the_scaling_config_api() -> None:
    with mock_aws():
        client = boto3.client("lambda", region_name="us-east-1")
        with pytest.raises(ClientError, match="Not yet implemented"):
            client.get_function_scaling_config(FunctionName="f", Qualifier="1")


def test_sets_min_and_max_on_the_version_the_alias_points_at() -> None:
    fake = FakeLambda()
    result = actuator(fake).apply(plan(10, 40), now_s=0.0)
    assert result.applied and "3/3 -> 10/40 on version 7" in result.detail
    assert fake.puts == [{"FunctionName": "f", "Qualifier": "7", "FunctionScalingConfig":
                          {"MinExecutionEnvironments": 10, "MaxExecutionEnvironments": 40}}]
    # the same plan again: nothing to put
    again = actuator(fake).apply(plan(10, 40), now_s=60.0)
    assert not again.applied and len(fake.puts) == 1


def test_throttling_is_retried_then_reported_clearly() -> None:
    fake = FakeLambda(put_errors=[error("TooManyRequestsException")])
    assert actuator(fake).apply(plan(), now_s=0.0).applied  # one throttle, retried
    fake = FakeLambda(put_errors=[error("TooManyRequestsException")] * 3)
    with pytest.raises(ScalingConfigRefused, match="throttled: retries spent") as caught:
        actuator(fake).apply(plan(), now_s=0.0)
    assert "in force: 3/3" in str(caught.value) and len(fake.puts) == 3


def test_a_refused_call_says_what_to_check() -> None:
    fake = FakeLambda(put_errors=[error("InvalidParameterValueException")])
    with pytest.raises(ScalingConfigRefused, match="refused: check the values"):
        actuator(fake).apply(plan(), now_s=0.0)
    assert len(fake.puts) == 1  # not retried


def test_a_version_not_on_a_capacity_provider_or_latest_is_refused() -> None:
    with pytest.raises(ActuationError, match="is not on a capacity provider"):
        actuator(FakeLambda(on_provider=False)).apply(plan(), now_s=0.0)
    with pytest.raises(ActuationError, match=r"points at \$LATEST"):
        actuator(FakeLambda(version="$LATEST")).apply(plan(), now_s=0.0)


def test_apply_for_a_run_keeps_the_plan_when_the_call_is_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeLambda(put_errors=[error("TooManyRequestsException")] * 3)
    entry = AliasRunPlan(plan=plan(), strategy="managed_instances", steps=())
    other = AliasRunPlan(plan=WarmPlan("g", "live", "none", 0, 0, 0, 0.0, 0.0, "-", 0.0, 0.0,
                                       "strategy none"), strategy="none", steps=())
    run = RunPlan(0.0, AccountLimits.unknown("test"), (entry, other), None)
    with caplog.at_level(logging.ERROR, logger="warmstart.warmer"):
        results = apply_managed_instances(run, actuator(fake))
    assert [r.key for r in results] == ["f:live"] and not results[0].applied
    assert "throttled" in results[0].detail
    assert "tool_unavailable" in caplog.text
    assert run.alias("f:live").plan.min_execution_environments == 10


# -- the warmer's apply ---------------------------------------------------------------------------


def _apply(fake: FakeLambda) -> tuple[list[Any], Any]:
    from warmers.runner import Actuators, apply
    from warmers.state import MemoryPlanStore

    class Unused:  # the PC and ping actuators must not be called for an LMI alias
        def apply(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("an LMI plan reached the provisioned-concurrency actuator")

    store = MemoryPlanStore()
    run = RunPlan(0.0, AccountLimits.unknown("test"),
                  (AliasRunPlan(plan=plan(minimum=12), strategy="managed_instances", steps=()),),
                  None)
    actuators = Actuators(pc=Unused(), pings=Unused(), store=store,  # type: ignore[arg-type]
                          lmi=actuator(fake))
    return apply(run, actuators), store


def test_the_warmer_applies_an_lmi_plan_and_saves_it_as_the_last_good_one() -> None:
    fake = FakeLambda()
    results, store = _apply(fake)
    assert [r.applied for r in results] == [True]
    assert fake.applied["MinExecutionEnvironments"] == 12
    saved = store.load("f", "live")
    assert saved is not None and saved.min_execution_environments == 12


def test_a_refused_lmi_plan_is_reported_logged_and_not_saved(
        caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeLambda(put_errors=[error("AccessDeniedException")])
    with caplog.at_level(logging.ERROR, logger="warmstart.warmer"):
        results, store = _apply(fake)
    assert [r.applied for r in results] == [False] and "not applied" in results[0].detail
    assert "tool_unavailable" in caplog.text and "PutFunctionScalingConfig" in caplog.text
    assert store.load("f", "live") is None  # the next run plans from the one before
