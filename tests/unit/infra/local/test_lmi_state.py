"""The emulator's Lambda Managed Instances model without processes: the scaling rule (and the
doubling rule it gives), placement on instances at the vCPU limit, instance-time billing."""

from __future__ import annotations

import pytest

from infra.local.emulator.config import ManagedInstancesConfig, check_scaling
from infra.local.emulator.lmi_state import (
    CapacityProviderState,
    LmiFunction,
    want_environments,
)


class Worker:
    """What `LmiFunction` reads of a runtime process: its state."""

    def __init__(self) -> None:
        self.state = "idle"


def function(minimum: int = 1, maximum: int | None = None, per_environment: int = 4,
             environments: int = 1, **kw: object) -> LmiFunction:
    config = ManagedInstancesConfig(per_environment_max_concurrency=per_environment,
                                    min_execution_environments=minimum,
                                    max_execution_environments=maximum, **kw)
    provider = CapacityProviderState(config.capacity_provider_arn, "m7g.large", 2, 400)
    lmi = LmiFunction(config, provider, 2048)
    lmi.requested["1"] = (minimum, maximum)
    from infra.local.emulator.lmi_state import LmiEnvironment

    for _ in range(environments):
        inst = provider.place(1.0, 0.0, 0.0)
        assert inst is not None
        env = LmiEnvironment("1", inst, 1.0, "/nowhere", state="ready")
        env.workers = [Worker() for _ in range(per_environment)]  # type: ignore[misc]
        lmi.environments.append(env)
    return lmi


def serve(lmi: LmiFunction, n: int) -> tuple[int, int]:
    """``n`` requests arrive at once and stay in flight: -> (served, throttled)."""
    served = sum(1 for _ in range(n) if lmi.acquire("1") is not None)
    return served, n - served


def test_want_is_demand_over_the_target_share_of_the_slots_within_min_and_max() -> None:
    assert want_environments(0, 4, 0.5, 3, None) == 3  # the minimum, even with no traffic
    assert want_environments(5, 4, 0.5, 1, None) == 3  # ceil(5 / 2)
    assert want_environments(100, 4, 0.5, 1, 10) == 10  # never above the maximum
    assert want_environments(8, 4, 1.0, 0, None) == 2


def test_traffic_that_at_most_doubles_is_served_and_more_than_doubling_is_throttled() -> None:
    # GIVEN steady traffic of 4 requests at once, and the capacity the scaler gave it
    lmi = function(per_environment=4, environments=1)
    assert serve(lmi, 4) == (4, 0)
    want = lmi.decide("1", now=0.0)
    assert want == 2  # 4 in flight at most half of the slots: 2 environments of 4
    lmi = function(per_environment=4, environments=want)
    # WHEN traffic doubles before the next decision, THEN it is all served
    assert serve(lmi, 8) == (8, 0)
    # WHEN it more than doubles, THEN what is beyond the capacity is throttled (429)
    lmi = function(per_environment=4, environments=want)
    assert serve(lmi, 11) == (8, 3)
    assert lmi.throttles == 3
    # AND the throttled requests count as demand at the next decision
    assert lmi.decide("1", now=15.0) == 6  # ceil((8 + 3) / 2)


def test_capacity_comes_down_only_after_the_hold() -> None:
    lmi = function(per_environment=4, environments=3, scale_in_hold_s=300.0)
    serve(lmi, 12)
    assert lmi.decide("1", now=0.0) == 6
    for worker in (w for e in lmi.environments for w in e.workers):
        worker.state = "idle"
        lmi.released("1")
    assert lmi.decide("1", now=100.0) == 6  # the 12 were in flight in this interval too
    assert lmi.decide("1", now=200.0) == 6  # no demand now, but the want of 100 s ago holds
    assert lmi.decide("1", now=401.0) == 1  # the hold has passed: down to the minimum


def test_placement_fills_instances_then_stops_at_the_vcpu_limit() -> None:
    provider = CapacityProviderState("arn", "m7g.large", 2, 4)  # two instances at most
    placed = [provider.place(1.0, now=0.0, launch_s=60.0) for _ in range(5)]
    assert placed[0] is placed[1] and placed[2] is placed[3] and placed[0] is not placed[2]
    assert placed[4] is None and provider.scale_out_blocked == 1
    assert placed[0].ready_at == 60.0  # usable after the launch delay
    # billing: from launch to end, per instance type
    assert provider.instance_seconds(now=30.0) == {"m7g.large": 0.0}
    provider.release(placed[2], 1.0, now=100.0)
    provider.release(placed[3], 1.0, now=160.0)  # left empty: the instance ends
    assert provider.instance_seconds(now=360.0) == {"m7g.large": 300.0 + 100.0}
    assert len(provider.live()) == 1


@pytest.mark.parametrize(("low", "high", "message"), [
    (5, 4, "MinExecutionEnvironments (5) is greater than MaxExecutionEnvironments (4)"),
    (-1, None, "MinExecutionEnvironments must be an integer 0..15000, got -1"),
    (1, 15001, "MaxExecutionEnvironments must be an integer 0..15000, got 15001"),
    (True, None, "MinExecutionEnvironments must be an integer 0..15000, got True"),
    ("2", None, "MinExecutionEnvironments must be an integer 0..15000, got '2'"),
])
def test_a_bad_scaling_config_is_refused_by_field(low: object, high: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_scaling(low, high)
    assert str(info.value) == message


@pytest.mark.parametrize(("field", "value", "message"), [
    ("max_vcpu", 1, "max_vcpu must be 2..15000"),
    ("memory_gib_per_vcpu", 1.0, "memory_gib_per_vcpu must be 2..8"),
    ("per_environment_max_concurrency", 0, "per_environment_max_concurrency must be 1..1600"),
    ("target_utilization", 0.0, "target_utilization must be in (0, 1]"),
    ("scale_interval_s", 0.0, "scale_interval_s must be > 0"),
])
def test_bad_settings_are_refused_by_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        ManagedInstancesConfig(**{field: value})  # type: ignore[arg-type]


def test_python_default_is_16_processes_per_vcpu() -> None:
    config = ManagedInstancesConfig(memory_gib_per_vcpu=2.0)
    assert config.vcpus_per_environment(4096) == 2.0 and config.concurrency(4096) == 32
    assert config.vcpus_per_environment(2048) == 1.0 and config.concurrency(2048) == 16


def test_a_scaling_config_change_between_decisions_keeps_the_intervals_demand() -> None:
    lmi = function(per_environment=4, environments=1, maximum=10, scale_in_hold_s=0.0)
    assert serve(lmi, 10) == (4, 6)
    lmi.requested["1"] = (3, 10)  # PutFunctionScalingConfig: minimum 3
    assert lmi.decide("1", now=5.0, interval_ended=False) == 5  # applied at once
    assert lmi.decide("1", now=15.0) == 5  # the demand (4 + 6) still counts: ceil(10 / 2)
    assert lmi.decide("1", now=25.0) == 3  # then 4 in flight: ceil(4 / 2) = 2, the minimum 3
    lmi.requested["1"] = (1, 2)  # a lower maximum caps at once
    assert lmi.decide("1", now=20.0, interval_ended=False) == 2
