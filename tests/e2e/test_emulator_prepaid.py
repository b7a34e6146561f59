"""Provisioned concurrency on an alias and SnapStart restore, through the real boto3 client."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from infra.local.clock import ScaledClock
from infra.local.spec import AliasSpec
from tests.e2e.conftest import assert_gone, spec


def _payload(resp: dict) -> dict:
    return json.loads(resp["Payload"].read())


def _headers(resp: dict) -> dict:
    return resp["ResponseMetadata"]["HTTPHeaders"]


def test_provisioned_concurrency_allocates_after_the_delay_and_serves_without_init(make_emulator, lambda_api):
    # GIVEN an allocation delay of 60 clock-seconds at time scale 120 (0.5 real seconds)
    emu = make_emulator(clock=ScaledClock(120.0), pc_allocation_delay_s=60.0)
    emu.add_function(spec("agent", "basic.echo"))
    client = lambda_api(emu)
    # WHEN two provisioned environments are requested on the alias
    put = client.put_provisioned_concurrency_config(FunctionName="agent", Qualifier="live",
                                                    ProvisionedConcurrentExecutions=2)
    # THEN the config is IN_PROGRESS, then READY with both allocated
    assert put["Status"] == "IN_PROGRESS" and put["RequestedProvisionedConcurrentExecutions"] == 2
    assert client.get_provisioned_concurrency_config(FunctionName="agent", Qualifier="live")[
        "Status"] == "IN_PROGRESS"
    ready = emu.wait_provisioned_ready("agent", "live", timeout_s=20)
    assert ready["Status"] == "READY" and ready["AllocatedProvisionedConcurrentExecutions"] == 2
    got = client.get_provisioned_concurrency_config(FunctionName="agent", Qualifier="live")
    assert got["Status"] == "READY" and got["AvailableProvisionedConcurrentExecutions"] == 2
    listed = client.list_provisioned_concurrency_configs(FunctionName="agent")
    assert [c["FunctionArn"].rsplit(":", 1)[1] for c in listed["ProvisionedConcurrencyConfigs"]] == ["live"]
    # AND invocations land on them with no init on the request path
    barrier = threading.Barrier(3)

    def call(_):
        barrier.wait()
        return client.invoke(FunctionName="agent", Qualifier="live", Payload=b'{"sleep_s": 0.4}')

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(call, range(3)))
    provisioned = [r for r in results if _headers(r)["x-warmstart-spillover"] == "false"]
    spilled = [r for r in results if _headers(r)["x-warmstart-spillover"] == "true"]
    assert len(provisioned) == 2 and len(spilled) == 1  # spillover beyond N goes on-demand
    for r in provisioned:
        body = _payload(r)
        assert body["init_type"] == "provisioned-concurrency"
        assert json.loads(_headers(r)["x-warmstart-report"])["init_duration_ms"] is None
        assert _headers(r)["x-warmstart-cold-start"] == "false"
    spill = _payload(spilled[0])
    assert spill["init_type"] == "on-demand"
    assert json.loads(_headers(spilled[0])["x-warmstart-report"])["init_duration_ms"] > 0
    # provisioned environments are never reclaimed as idle; deleting the config ends them
    pids = [e["pid"] for e in emu.environments("agent") if e["provisioned_for"] == "live"]
    client.delete_provisioned_concurrency_config(FunctionName="agent", Qualifier="live")
    assert_gone(pids)
    with pytest.raises(ClientError) as err:
        client.get_provisioned_concurrency_config(FunctionName="agent", Qualifier="live")
    assert err.value.response["Error"]["Code"] == "ProvisionedConcurrencyConfigNotFoundException"


def test_provisioned_concurrency_from_the_spec_is_ready_at_deploy(make_emulator, lambda_api):
    emu = make_emulator(pc_allocation_delay_s=3600.0)  # the deploy does not wait for the delay
    emu.add_function(spec("agent", "basic.echo", aliases=(AliasSpec("live", "1", 1),)))
    client = lambda_api(emu)
    assert client.get_provisioned_concurrency_config(FunctionName="agent", Qualifier="live")[
        "Status"] == "READY"
    body = _payload(client.invoke(FunctionName="agent", Qualifier="live"))
    assert body["init_type"] == "provisioned-concurrency"
    # $LATEST never uses the alias's provisioned environments
    latest = _payload(client.invoke(FunctionName="agent"))
    assert latest["init_type"] == "on-demand" and latest["env"]["AWS_LAMBDA_FUNCTION_VERSION"] == "$LATEST"


def test_provisioned_concurrency_bad_requests(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("agent", "basic.echo"))
    emu.add_function(spec("snappy", "snap.handler", snap_start=True))
    client = lambda_api(emu)
    cases = [
        ({"FunctionName": "agent", "Qualifier": "$LATEST"}, "InvalidParameterValueException",
         "unpublished function versions"),
        ({"FunctionName": "agent", "Qualifier": "nope"}, "ResourceNotFoundException", "Function not found"),
        ({"FunctionName": "nope", "Qualifier": "live"}, "ResourceNotFoundException", "Function not found"),
        ({"FunctionName": "snappy", "Qualifier": "live"}, "InvalidParameterValueException", "SnapStart"),
    ]
    for kwargs, code, text in cases:
        with pytest.raises(ClientError) as err:
            client.put_provisioned_concurrency_config(ProvisionedConcurrentExecutions=1, **kwargs)
        assert err.value.response["Error"]["Code"] == code, kwargs
        assert text in err.value.response["Error"]["Message"]
    client.put_function_concurrency(FunctionName="agent", ReservedConcurrentExecutions=1)
    with pytest.raises(ClientError) as err:
        client.put_provisioned_concurrency_config(FunctionName="agent", Qualifier="live",
                                                  ProvisionedConcurrentExecutions=2)
    assert "exceeds the function's reserved concurrency" in err.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as err:
        client.delete_provisioned_concurrency_config(FunctionName="agent", Qualifier="live")
    assert err.value.response["Error"]["Code"] == "ProvisionedConcurrencyConfigNotFoundException"
    assert emu.environments("agent") == []


def test_snapstart_restores_forks_that_ran_the_hooks_and_are_unique(make_emulator, lambda_api):
    emu = make_emulator()
    emu.add_function(spec("snappy", "snap.handler", snap_start=True, environment={"INIT_SLEEP_S": "0.3"}))
    client = lambda_api(emu)
    barrier = threading.Barrier(2)

    def call(_):
        barrier.wait()
        return client.invoke(FunctionName="snappy", Qualifier="live", LogType="Tail",
                             Payload=b'{"sleep_s": 0.3}')

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(call, range(2)))
    bodies = [_payload(r) for r in results]
    for r, body in zip(results, bodies):
        report = json.loads(_headers(r)["x-warmstart-report"])
        assert body["init_type"] == "snap-start" and _headers(r)["x-warmstart-init-type"] == "snap-start"
        assert report["restore_duration_ms"] > 0 and report["init_duration_ms"] is None
        # the 0.3 s init sleep was paid once, by the snapshot, not on the request path
        assert report["restore_duration_ms"] < emu.snapshot_init_ms("snappy")
        assert body["before_snapshot"] == 1 and body["after_restore"] == 1
        assert body["connection"] == "reopened" and body["pid"] != body["init_pid"]
    assert bodies[0]["pid"] != bodies[1]["pid"]
    assert bodies[0]["env_id"] != bodies[1]["env_id"]
    assert bodies[0]["random"] != bodies[1]["random"]
    # the next invocation of a restored environment reports no restore
    again = client.invoke(FunctionName="snappy", Qualifier="live")
    assert json.loads(_headers(again)["x-warmstart-report"])["restore_duration_ms"] is None
    # $LATEST is not snapshotted: a plain on-demand init
    assert _payload(client.invoke(FunctionName="snappy"))["init_type"] == "on-demand"


def test_snapstart_without_hooks_shares_the_snapshot_state(make_emulator, lambda_api):
    # what the after-restore hook protects against: forks of one snapshot repeat its state
    emu = make_emulator()
    emu.add_function(spec("snappy", "snap.handler", snap_start=True, environment={"SNAP_HOOKS": "off"}))
    client = lambda_api(emu)
    barrier = threading.Barrier(2)

    def call(_):
        barrier.wait()
        return _payload(client.invoke(FunctionName="snappy", Qualifier="live",
                                      Payload=b'{"sleep_s": 0.3}'))

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(call, range(2))
    assert a["pid"] != b["pid"]
    assert a["random"] == b["random"] and a["env_id"] == b["env_id"]


def test_snapstart_snapshot_failure_is_reported_at_deploy(make_emulator):
    emu = make_emulator()
    with pytest.raises(RuntimeError, match="cannot reach the config store"):
        emu.add_function(spec("broken", "broken_init.handler", snap_start=True))
    assert emu.process_ids() == [] and emu.functions() == []  # nothing half-deployed


def test_idle_reclaim_keeps_provisioned_environments(make_emulator, lambda_api):
    emu = make_emulator(clock=ScaledClock(200.0), idle_timeout_s=60.0)
    emu.add_function(spec("agent", "basic.echo", aliases=(AliasSpec("live", "1", 1),)))
    client = lambda_api(emu)
    client.invoke(FunctionName="agent")  # an on-demand environment on $LATEST
    time.sleep(1.0)  # 200 clock-seconds
    envs = emu.environments("agent")
    assert [e["provisioned_for"] for e in envs] == ["live"]
