from __future__ import annotations

import snapshot_restore_py

from functions.runtime import snapstart
from functions.runtime.config import InitType
from functions.runtime.lazy import ClientCache
from functions.runtime.lifecycle import ExecutionEnvironment


class Closable:
    def __init__(self, service: str, **kwargs: object) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _run(registry: list) -> None:
    """Run hooks the way the Lambda runtime does: each (func, args, kwargs) entry."""
    for func, args, kwargs in registry:
        func(*args, **kwargs)


def test_hooks_registered_with_snapshot_restore_py_close_and_renew() -> None:
    # GIVEN an environment with a cached client and extra callbacks
    clients = ClientCache(factory=Closable)
    env = ExecutionEnvironment(InitType.SNAP_START, 0.0, clients=clients)
    client = clients.get("sagemaker-runtime")
    calls: list[str] = []
    snapstart.register_hooks(
        env,
        clock_ms=lambda: 777.0,
        before_snapshot=[lambda: calls.append("pool closed")],
        after_restore=[lambda: calls.append("reconnected")],
    )
    assert len(snapshot_restore_py.get_before_snapshot()) == 1
    assert len(snapshot_restore_py.get_after_restore()) == 1
    old_id = env.environment_id

    # WHEN the runtime takes the snapshot
    _run(snapshot_restore_py.get_before_snapshot())
    # THEN connections are closed
    assert client.closed and len(clients) == 0
    assert calls == ["pool closed"]
    assert env.environment_id == old_id

    # WHEN it restores the snapshot
    _run(snapshot_restore_py.get_after_restore())
    # THEN the copy is unique and knows it was restored
    assert env.environment_id != old_id
    assert env.restored_at_ms == 777.0
    assert calls == ["pool closed", "reconnected"]
    assert env.begin_invocation() is False
