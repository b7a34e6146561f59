"""Lambda Managed Instances in the emulator: environments of real runtime processes, 429 beyond
capacity, background scale-out, Put/GetFunctionScalingConfig through the real boto3 client,
the warmer's actuator against it, instance-time billing.

Processes are held busy by a file gate (``release`` in the environment's shared ``TMPDIR``),
never by timing.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.local.clock import ScaledClock
from infra.local.emulator import Emulator, ManagedInstancesConfig
from infra.local.errors import InvalidParameterValueException, TooManyRequestsException
from tests.e2e.conftest import spec

pytestmark = pytest.mark.slow


def lmi_config(**kw: Any) -> ManagedInstancesConfig:
    kw.setdefault("per_environment_max_concurrency", 3)
    kw.setdefault("min_execution_environments", 1)
    kw.setdefault("max_execution_environments", 4)
    kw.setdefault("scale_interval_s", 3600.0)  # the tests make each scaling decision
    return ManagedInstancesConfig(**kw)


def add(emu: Emulator, config: ManagedInstancesConfig, name: str = "lmi") -> None:
    emu.add_function(spec(name, "lmi_worker.handler", memory_mb=2048), managed_instances=config)


def wait_for(predicate: Any, timeout_s: float = 30.0) -> None:
    """Poll ``predicate`` (a bound, not an assertion on time)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def busy_workers(emu: Emulator, name: str = "lmi") -> int:
    return sum(1 for e in emu.environments(name) if e["state"] == "busy")


def hold(emu: Emulator, n: int, name: str = "lmi") -> tuple[ThreadPoolExecutor, list[Any]]:
    """Start ``n`` held invocations; return when ``n`` processes are busy."""
    pool = ThreadPoolExecutor(n)
    futures = [pool.submit(emu.invoke, name, b'{"hold": true}', qualifier="live")
               for _ in range(n)]
    wait_for(lambda: busy_workers(emu, name) >= n)
    return pool, futures


def test_one_environment_serves_requests_at_once_in_its_own_processes(make_emulator: Any) -> None:
    # GIVEN an LMI function with one environment of three runtime processes
    emu = make_emulator()
    add(emu, lmi_config(max_execution_environments=1))
    workers = emu.environments("lmi")
    assert len(workers) == 3 and {w["worker"] for w in workers} == {0, 1, 2}
    assert len({w["id"] for w in workers}) == 1 and len({w["pid"] for w in workers}) == 3
    first = json.loads(emu.invoke("lmi", b"{}", qualifier="live").payload)
    tmp = Path(first["tmp"])
    # WHEN three requests are held at once
    pool, futures = hold(emu, 3)
    # THEN a fourth is throttled at once (no cold start on LMI), and counted
    with pytest.raises(TooManyRequestsException):
        emu.invoke("lmi", b"{}", qualifier="live")
    (tmp / "release").write_text("go")
    results = [f.result(timeout=30) for f in futures]
    pool.shutdown()
    bodies = [json.loads(r.payload) for r in results]
    # AND the three ran in three processes of one environment sharing one TMPDIR, each with its
    # own init (three init files in the shared folder), initialised before traffic
    assert len({b["pid"] for b in bodies}) == 3
    assert {r.environment_id for r in results} == {workers[0]["id"]}
    assert {b["tmp"] for b in bodies} == {str(tmp)} and len(bodies[0]["inits"]) == 3
    assert {b["init_type"] for b in bodies} == {"lambda-managed-instances"}
    assert {b["max_concurrency"] for b in bodies} == {"3"}
    assert len({b["log_stream"] for b in bodies}) == 1
    assert not any(r.cold_start for r in results)
    assert all(r.report is not None and r.report.init_duration_ms is None for r in results)
    usage = emu.managed_instances_usage("lmi")
    assert usage["throttles"] == 1 and usage["environments"] == {"1": 1}
    assert usage["instances"] == 1


def test_an_unpublished_version_is_refused_and_a_crashed_process_leaves_the_others(
        make_emulator: Any) -> None:
    emu = make_emulator()
    add(emu, lmi_config(max_execution_environments=1))
    with pytest.raises(InvalidParameterValueException, match=r"version \$LATEST is not published "
                                                             "on a capacity provider"):
        emu.invoke("lmi", b"{}")
    # WHEN one runtime process of the environment dies
    victim = emu.environments("lmi")[0]["pid"]
    import os
    import signal

    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in [w["pid"] for w in emu.environments("lmi")])
    emu.scale_managed_instances("lmi")
    # THEN the environment goes on with its two other processes
    left = emu.environments("lmi")
    assert len(left) == 2 and len({w["id"] for w in left}) == 1
    assert json.loads(emu.invoke("lmi", b"{}", qualifier="live").payload)["pid"] != victim


def test_background_scale_out_from_saturation_waits_for_new_instances(make_emulator: Any) -> None:
    # GIVEN one environment of 3 processes (1 vCPU) on a 2-vCPU instance, launch delay 60
    # clock-seconds at time scale 60 (1 real second)
    emu = make_emulator(clock=ScaledClock(60.0))
    add(emu, lmi_config(instance_launch_s=60.0))
    first = json.loads(emu.invoke("lmi", b"{}", qualifier="live").payload)
    pool, futures = hold(emu, 3)
    for _ in range(3):  # demand beyond capacity: throttled, and counted as saturation
        with pytest.raises(TooManyRequestsException):
            emu.invoke("lmi", b"{}", qualifier="live")
    # WHEN the scaler decides: demand 3 in flight + 3 throttled = 6, at most half of the slots
    # -> ceil(6 / (3 x 0.5)) = 4 environments (the maximum)
    decision = emu.scale_managed_instances("lmi")["lmi:1"]
    # THEN three start: one on the instance's free vCPU, two on a newly launched instance
    assert decision == {"want": 4, "environments": 4, "started": 3, "retired": 0,
                        "blocked": False}
    assert emu.managed_instances_usage("lmi")["instances"] == 2
    emu.wait_managed_instances_ready("lmi")
    Path(first["tmp"], "release").write_text("go")
    for f in futures:
        f.result(timeout=30)
    pool.shutdown()
    # AND 4 environments x 3 processes serve 12 requests at once now
    assert len(emu.environments("lmi")) == 12
    usage = emu.managed_instances_usage("lmi")
    assert usage["environments"] == {"1": 4} and usage["throttles"] == 3
    assert usage["instance_seconds"]["m7g.large"] > 0 and usage["cost_usd"] > 0


def test_at_the_vcpu_limit_scale_out_stops_and_requests_are_throttled(make_emulator: Any) -> None:
    # GIVEN a capacity provider of 2 vCPUs at most: one instance, room for two environments
    emu = make_emulator()
    add(emu, lmi_config(max_vcpu=2, instance_launch_s=0.0, per_environment_max_concurrency=2))
    first = json.loads(emu.invoke("lmi", b"{}", qualifier="live").payload)
    pool, futures = hold(emu, 2)
    with pytest.raises(TooManyRequestsException):
        emu.invoke("lmi", b"{}", qualifier="live")
    # WHEN the scaler wants 3 environments (demand 3 on 2-process environments at 0.5)
    decision = emu.scale_managed_instances("lmi")["lmi:1"]
    # THEN it gets 2 (the instance's two vCPUs), the refused one is counted and logged
    assert decision["want"] == 3 and decision["environments"] == 2 and decision["blocked"]
    emu.wait_managed_instances_ready("lmi")
    usage = emu.managed_instances_usage("lmi")
    assert usage["scale_out_blocked"] == 1 and usage["instances"] == 1
    Path(first["tmp"], "release").write_text("go")
    for f in futures:
        f.result(timeout=30)
    pool.shutdown()


def test_scaling_config_through_boto3_and_the_warmers_actuator(make_emulator: Any,
                                                               lambda_api: Any) -> None:
    from warmers.actuators import ManagedInstancesActuator
    from warmers.plan.policy import WarmPlan

    emu = make_emulator()
    add(emu, lmi_config(per_environment_max_concurrency=1, max_execution_environments=2))
    emu.add_function(spec("plain", "basic.echo"))
    client = lambda_api(emu)
    # GIVEN the deploy's scaling config, read with the real boto3 client
    got = client.get_function_scaling_config(FunctionName="lmi", Qualifier="1")
    assert got["AppliedFunctionScalingConfig"] == {"MinExecutionEnvironments": 1,
                                                   "MaxExecutionEnvironments": 2}
    assert got["FunctionArn"].endswith(":function:lmi:1")
    config = client.get_function_configuration(FunctionName="lmi", Qualifier="1")
    assert config["CapacityProviderConfig"]["LambdaManagedInstancesCapacityProviderConfig"][
        "PerExecutionEnvironmentMaxConcurrency"] == 1
    # WHEN the warmer's actuator applies a plan of minimum 2 on the alias's version
    plan = WarmPlan("lmi", "live", "managed_instances", 0, 0, 0, 0.5, 160.0, "naive", 0.0, 0.0,
                    "test", ceiling=3, min_execution_environments=2)
    result = ManagedInstancesActuator(client).apply(plan, now_s=0.0)
    # THEN the version has it, and a second environment is started before traffic
    assert result.applied and "1/2 -> 2/3" in result.detail
    got = client.get_function_scaling_config(FunctionName="lmi", Qualifier="$LATEST.PUBLISHED")
    assert got["RequestedFunctionScalingConfig"] == {"MinExecutionEnvironments": 2,
                                                     "MaxExecutionEnvironments": 3}
    emu.wait_managed_instances_ready("lmi")
    assert emu.managed_instances_usage("lmi")["environments"] == {"1": 2}
    assert not ManagedInstancesActuator(client).apply(plan, now_s=0.0).applied  # in force

    def refused(**kw: Any) -> dict[str, str]:
        with pytest.raises(ClientError) as info:
            client.put_function_scaling_config(**kw)
        return info.value.response["Error"]

    # AND the API's faults, as boto3 sees them
    assert refused(FunctionName="lmi", Qualifier="1", FunctionScalingConfig={
        "MinExecutionEnvironments": 5, "MaxExecutionEnvironments": 4}) == {
        "Code": "InvalidParameterValueException", "Message": (
            "MinExecutionEnvironments (5) is greater than MaxExecutionEnvironments (4)")}
    assert refused(FunctionName="plain", Qualifier="1", FunctionScalingConfig={
        "MinExecutionEnvironments": 1})["Code"] == "InvalidParameterValueException"
    assert refused(FunctionName="lmi", Qualifier="9", FunctionScalingConfig={
        "MinExecutionEnvironments": 1})["Code"] == "ResourceNotFoundException"
    assert "not an alias" in refused(FunctionName="lmi", Qualifier="live", FunctionScalingConfig={
        "MinExecutionEnvironments": 1})["Message"]
    with pytest.raises(InvalidParameterValueException, match="MaxExecutionEnvironments must be "
                                                             "an integer 0..15000, got 15001"):
        emu.put_function_scaling_config("lmi", "1", {"MaxExecutionEnvironments": 15001})
    with pytest.raises(ClientError, match="not configured with a capacity provider"):
        client.get_function_scaling_config(FunctionName="plain", Qualifier="1")
    # AND a refused version is refused by the actuator too (not on a capacity provider)
    from warmers.actuators import ActuationError

    with pytest.raises(ActuationError, match="is not on a capacity provider"):
        ManagedInstancesActuator(client).version("plain", "live")
    assert emu.get_function_scaling_config("lmi", "1")["AppliedFunctionScalingConfig"] == {
        "MinExecutionEnvironments": 2, "MaxExecutionEnvironments": 3}


def test_a_bad_lmi_deploy_is_refused_by_name(make_emulator: Any) -> None:
    emu = make_emulator()
    with pytest.raises(ValueError, match="memory_mb 1024 is below LMI's minimum of 2048"):
        emu.add_function(spec("small", "lmi_worker.handler", memory_mb=1024),
                         managed_instances=lmi_config())
    with pytest.raises(ValueError, match="min_execution_environments|MinExecutionEnvironments"):
        lmi_config(min_execution_environments=3, max_execution_environments=2)
    with pytest.raises(ValueError, match="an environment takes 4 vCPUs"):
        emu.add_function(spec("big", "lmi_worker.handler", memory_mb=8192),
                         managed_instances=lmi_config())
    assert [f.name for f in emu.functions()] == []  # nothing half-deployed


def test_concurrent_invocations_see_one_busy_count(make_emulator: Any) -> None:
    """Many threads at once never get more processes than exist: served + throttled = sent."""
    emu = make_emulator()
    add(emu, lmi_config(max_execution_environments=1, per_environment_max_concurrency=2))
    first = json.loads(emu.invoke("lmi", b"{}", qualifier="live").payload)
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def call() -> None:
        barrier.wait()
        try:
            emu.invoke("lmi", b'{"hold": true}', qualifier="live")
            outcomes.append("served")
        except TooManyRequestsException:
            outcomes.append("throttled")

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    wait_for(lambda: outcomes.count("throttled") == 4 and busy_workers(emu) == 2)
    Path(first["tmp"], "release").write_text("go")
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["served"] * 2 + ["throttled"] * 4
    assert emu.managed_instances_usage("lmi")["throttles"] == 4


def test_a_deploy_whose_lmi_init_fails_is_refused_with_the_error(make_emulator: Any) -> None:
    emu = make_emulator()
    with pytest.raises(RuntimeError, match="failed their init: .*cannot reach the config store"):
        emu.add_function(spec("broken", "broken_init.handler", memory_mb=2048),
                         managed_instances=lmi_config(per_environment_max_concurrency=2))
    assert [f.name for f in emu.functions()] == [] and emu.process_ids() == []


def test_a_timed_out_invocation_leaves_its_process_running_until_it_asks_for_more(
        make_emulator: Any) -> None:
    # GIVEN a 1-second function timeout on one environment of one process
    emu = make_emulator()
    emu.add_function(spec("lmi", "lmi_worker.handler", memory_mb=2048, timeout_s=1.0),
                     managed_instances=lmi_config(per_environment_max_concurrency=1,
                                                  max_execution_environments=1))
    first = json.loads(emu.invoke("lmi", b"{}", qualifier="live").payload)
    # WHEN an invocation runs past the timeout
    late = emu.invoke("lmi", b'{"hold": true}', qualifier="live")
    # THEN it fails as timed out, but the process is not ended: it is still busy (a request now
    # is throttled), and once its code finishes it serves again, the same process
    assert late.function_error == "Unhandled"
    assert json.loads(late.payload)["errorType"] == "Sandbox.Timedout"
    assert [w["pid"] for w in emu.environments("lmi")] == [first["pid"]]
    with pytest.raises(TooManyRequestsException):
        emu.invoke("lmi", b"{}", qualifier="live")
    Path(first["tmp"], "release").write_text("go")
    wait_for(lambda: busy_workers(emu) == 0)
    again = json.loads(emu.invoke("lmi", b"{}", qualifier="live").payload)
    assert again["pid"] == first["pid"] and again["served"] == 3
