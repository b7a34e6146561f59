from __future__ import annotations

import random
import uuid

import pytest

from functions.runtime import lifecycle
from functions.runtime.config import InitType
from functions.runtime.lazy import ClientCache
from functions.runtime.lifecycle import ExecutionEnvironment, ResourceState


class Closable:
    """A client stand-in that records whether its connections were closed."""

    def __init__(self, service: str, **kwargs: object) -> None:
        self.service = service
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_cold_start_only_on_first_on_demand_invocation() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)
    assert [env.begin_invocation() for _ in range(3)] == [True, False, False]
    assert env.invocations == env.requests == 3


@pytest.mark.parametrize("init_type", [InitType.PROVISIONED_CONCURRENCY, InitType.SNAP_START])
def test_no_cold_start_when_init_was_prepaid(init_type: InitType) -> None:
    env = ExecutionEnvironment(init_type, 0.0)
    assert env.begin_invocation() is False


def test_a_ping_uses_up_the_cold_start_but_is_not_a_request() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)
    assert env.begin_invocation(counted=False) is True
    assert env.begin_invocation() is False
    assert (env.invocations, env.requests) == (2, 1)


def test_init_duration_is_measured_from_the_times_given() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 1000.0)
    assert env.init_duration_ms is None
    assert env.finish_init(1042.5) == 42.5
    assert env.init_duration_ms == 42.5


def test_environment_id_is_a_uuid4() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)
    assert uuid.UUID(env.environment_id).version == 4
    assert ExecutionEnvironment(InitType.ON_DEMAND, 0.0).environment_id != env.environment_id


def test_random_uuid4_is_a_version_4_rfc_uuid_in_uuids_own_spelling() -> None:
    drawn = {lifecycle.random_uuid4() for _ in range(2000)}
    assert len(drawn) == 2000  # 122 random bits: no repeat
    for text in drawn:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text  # lower-case hex, 8-4-4-4-12, as str(uuid.uuid4())


def test_restore_renews_identity_reseeds_random_and_drops_clients() -> None:
    # GIVEN two environments restored from the same snapshot (same random state)
    clients = ClientCache(factory=Closable)
    env = ExecutionEnvironment(InitType.SNAP_START, 0.0, clients=clients)
    ssm = clients.get("ssm", region_name="us-east-1")
    old_id = env.environment_id
    draws = []
    for _ in range(2):
        random.seed(1234)  # the state a snapshot would hold
        # WHEN the restore hook runs
        env.after_restore(5000.0)
        draws.append(random.random())
    # THEN each restored copy has its own random stream, id and clients
    assert draws[0] != draws[1]
    assert env.environment_id != old_id
    assert env.restored and env.restores == 2 and env.restored_at_ms == 5000.0
    assert ssm.closed and len(clients) == 0
    assert clients.get("ssm", region_name="us-east-1") is not ssm
    assert env.begin_invocation() is False


def test_before_snapshot_closes_clients() -> None:
    clients = ClientCache(factory=Closable)
    env = ExecutionEnvironment(InitType.SNAP_START, 0.0, clients=clients)
    client = clients.get("sagemaker-runtime")
    env.before_snapshot()
    assert client.closed and len(clients) == 0


def test_resources_and_recent_latencies() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)
    assert env.resource("model") is ResourceState.NOT_STARTED
    env.set_resource("model", ResourceState.READY, load_ms=130.0)
    assert env.resource("model") is ResourceState.READY
    assert env.resource_load_ms == {"model": 130.0}
    for i in range(lifecycle.RECENT_LATENCIES + 5):
        env.record("GET /healthz", "local", 200, float(i))
    recent = env.recent_latencies()
    assert len(recent) == lifecycle.RECENT_LATENCIES
    assert recent[-1] == {"route": "GET /healthz", "path": "local", "status": 200, "duration_ms": 54.0}


def test_one_environment_per_process() -> None:
    with pytest.raises(RuntimeError, match="call lifecycle.start_environment"):
        lifecycle.current_environment()
    env = lifecycle.start_environment(InitType.ON_DEMAND, 0.0)
    assert lifecycle.current_environment() is env
