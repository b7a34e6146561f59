"""The environment pool: acquire an idle environment (or a new one), release it, reclaim idle ones.

Provisioned environments of an alias are used first, then the most recently used idle
on-demand environment of the version (Lambda reuses warm environments), else a new one
(a cold start: SnapStart restore when the version has a snapshot). A released environment is
frozen when the runtime and every extension wait on ``next``; an idle on-demand environment
is reclaimed after ``EmulatorConfig.idle_timeout_s`` (its extensions get ``SHUTDOWN``).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
"""

from __future__ import annotations

from typing import Any

from infra.local.emulator.concurrency import Concurrency
from infra.local.emulator.config import EmulatedInitType
from infra.local.emulator.core import EmulatorContext, FunctionPool
from infra.local.emulator.environment import EmulatedEnvironment, ShutdownReason


class EnvironmentPool:
    """Acquire, release and reclaim the execution environments of every function.

    It starts no process: a new environment it hands out is in state ``init`` and the caller
    runs its init phase (:meth:`~infra.local.emulator.processes.Processes.initialize`).

    Parameters
    ----------
    context : EmulatorContext
        The functions, clock (idle times), settings (``idle_timeout_s``, ``freeze_idle``).
    concurrency : Concurrency
        Admits each acquisition (throttles beyond the limit) and counts it.
    """

    def __init__(self, context: EmulatorContext, concurrency: Concurrency) -> None:
        self.context = context
        self.concurrency = concurrency

    @staticmethod
    def resource(fs: FunctionPool, version: str, alias: str | None) -> str | None:
        """The metrics' ``Resource`` dimension (``name:alias-or-version``), None for ``$LATEST``."""
        qualifier = alias or (None if version == "$LATEST" else version)
        return f"{fs.spec.name}:{qualifier}" if qualifier else None

    def acquire(self, fs: FunctionPool, version: str, alias: str | None,
                resource: str | None) -> tuple[EmulatedEnvironment, bool, bool]:
        """-> (environment marked busy, cold, spillover). Raises TooManyRequestsException.

        Reuse order: an idle provisioned environment of ``alias``, else the most recently
        released idle on-demand environment of ``version``, else a new one (cold: SnapStart
        restore when the version has a snapshot, else on-demand; in state ``init``). Not for
        a function on Lambda Managed Instances (:meth:`~.lmi.ManagedInstances.acquire`).
        """
        with fs.lock:
            self.concurrency.check(fs, resource)
            env = self.idle(fs, version, alias)
            cold = env is None
            if env is None:
                init_type: EmulatedInitType = "on-demand"
                if fs.spec.snap_start and version in fs.templates:
                    init_type = "snap-start"
                env = EmulatedEnvironment(fs.spec, version, init_type, provisioned_for=None,
                                           now=self.context.clock.time())
                fs.envs.append(env)
            else:
                env.state = "busy"
                env.thaw()  # before anything is sent to it (a warm ping too)
            self.concurrency.enter(fs, resource)
            spillover = self.concurrency.provisioned_use(fs, alias, env, resource)
            return env, cold, spillover

    @staticmethod
    def idle(fs: FunctionPool, version: str, alias: str | None) -> EmulatedEnvironment | None:
        """The environment an invocation of ``version`` (through ``alias``) reuses, None for a
        cold start: an idle provisioned environment of the alias (not retiring), else the most
        recently started idle on-demand environment of the version. The caller holds ``fs.lock``."""
        env = None
        if alias is not None:
            env = next((e for e in fs.envs if e.state == "idle" and e.provisioned_for == alias
                        and not e.retire), None)
        if env is None:
            env = next((e for e in reversed(fs.envs) if e.state == "idle"
                        and e.provisioned_for is None and e.version == version), None)
        return env

    def release(self, fs: FunctionPool, env: EmulatedEnvironment, resource: str | None,
                 dead: bool, reason: ShutdownReason = "failure") -> None:
        """End the invocation's hold on ``env``: idle (and frozen) again, or ended when ``dead``
        (``reason`` goes to its extensions' ``SHUTDOWN``) or retired."""
        kill = False
        with fs.lock:
            self.concurrency.leave(fs, resource)
            if fs.lmi is not None and env.worker_index is not None:
                fs.lmi.released(env.version)
            env.last_used = self.context.clock.monotonic()
            if dead or env.retire or env.state == "dead":
                kill = True
                reason = reason if dead else "spindown"
                env.state = "dead"
                if env in fs.envs:
                    fs.envs.remove(env)
            else:
                env.state = "idle"
                if self.context.config.freeze_idle:
                    env.freeze()
            fs.lock.notify_all()
        if kill:
            env.kill(reason)

    def reap_loop(self) -> None:
        """Reclaim idle environments every ``reap_interval_s`` real seconds until the stop."""
        while not self.context.stopped.wait(self.context.config.reap_interval_s):
            self.reclaim_idle()

    def reclaim_idle(self) -> int:
        """Reclaim on-demand environments idle for longer than the idle timeout; returns how many."""
        now = self.context.clock.monotonic()
        victims: list[EmulatedEnvironment] = []
        for fs in self.context.pools():
            with fs.lock:
                for env in list(fs.envs):
                    idle_too_long = now - env.last_used >= self.context.config.idle_timeout_s
                    if env.state == "idle" and env.provisioned_for is None and idle_too_long or env.state == "idle" and not env.alive():
                        env.state = "dead"
                        fs.envs.remove(env)
                        victims.append(env)
        for env in victims:
            env.kill()
        return len(victims)

    def environments(self, function_name: str) -> list[dict[str, Any]]:
        """A snapshot of the function's live environments (id, state, init type, pid, ...)."""
        fs = self.context.state(function_name)
        with fs.lock:
            return [{"id": e.id, "state": e.state, "init_type": e.init_type, "pid": e.pid,
                     "version": e.version, "provisioned_for": e.provisioned_for,
                     "worker": e.worker_index,
                     "invocations": e.invocations, "init_duration_ms": e.init_duration_ms,
                     "restore_duration_ms": e.restore_duration_ms,
                     "runtime_api": e.api.address if e.api is not None else None,
                     "extensions": sorted(x.name for x in e.api.extensions.values()) if e.api else []}
                    for e in fs.envs]

    def process_ids(self) -> list[int]:
        """PIDs of every environment's processes (runtime, external extensions) and of every
        template process (for leak checks)."""
        pids = []
        for fs in self.context.pools():
            with fs.lock:
                pids += [p for e in fs.envs for p in e.pids()]
                pids += [t.proc.pid for t in fs.templates.values()]
        return pids

