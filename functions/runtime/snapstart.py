"""SnapStart runtime hooks through ``snapshot-restore-py``.

Before the snapshot: close connections (cached SDK clients and any extra closers).
After a restore: reseed ``random``, draw a new environment id, drop cached SDK clients, then run
extra restore callbacks.

The agent's handler (`functions.runtime.agent_handler`) passes its extras: its clients'
closers and re-readers, the agent's own ``before_snapshot`` / ``after_restore`` hooks, and, with
``Agent(lifespan_on_restore="restart")`` (the default), the app's ASGI lifespan: its shutdown
last before the snapshot, and after each restore a fresh event loop and its startup again
(before the agent's own restore hooks), so an ``httpx.AsyncClient`` or a pool the startup made
belongs to the restored environment; a startup that fails there makes the environment answer
``500 agent_misconfigured`` (the restore itself goes on). ``snapshot_restore_py`` is imported only when hooks are registered,
which the handler does only under ``snap-start`` (the module ships with the Lambda Python 3.12+
runtimes and is tiny, but the toolkit's import stays standard-library only).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/snapstart-runtime-hooks-python.html
https://docs.aws.amazon.com/lambda/latest/dg/snapstart-uniqueness.html
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from functions.runtime.lifecycle import ExecutionEnvironment

__all__ = ["register_hooks"]


def register_hooks(
    environment: ExecutionEnvironment,
    clock_ms: Callable[[], float],
    *,
    before_snapshot: Sequence[Callable[[], object]] = (),
    after_restore: Sequence[Callable[[], object]] = (),
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Register this environment's SnapStart hooks with ``snapshot_restore_py``.

    Parameters
    ----------
    environment : ExecutionEnvironment
        The environment whose clients are closed and whose identity is renewed.
    clock_ms : Callable[[], float]
        Monotonic clock in milliseconds (read when the restore hook runs).
    before_snapshot : Sequence[Callable[[], object]]
        Extra closers run before the snapshot, after the SDK clients are closed.
    after_restore : Sequence[Callable[[], object]]
        Extra callbacks run after the restore, after the identity is renewed.

    Returns
    -------
    tuple[Callable[[], None], Callable[[], None]]
        The registered ``(before_snapshot, after_restore)`` hooks (handy in tests).
    """
    import snapshot_restore_py  # only under SnapStart; standard-library only itself

    def _before_snapshot() -> None:
        environment.before_snapshot()
        for closer in before_snapshot:
            closer()

    def _after_restore() -> None:
        environment.after_restore(clock_ms())
        for callback in after_restore:
            callback()

    snapshot_restore_py.register_before_snapshot(_before_snapshot)
    snapshot_restore_py.register_after_restore(_after_restore)
    return _before_snapshot, _after_restore
