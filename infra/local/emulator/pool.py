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

from infra.local.emulator.config import EmulatedInitType
from infra.local.emulator.core import FunctionPool
from infra.local.emulator.environment import EmulatedEnvironment, ProcessesMixin, ShutdownReason
from infra.local.errors import InvalidParameterValueException, TooManyRequestsException


class PoolMixin(ProcessesMixin):
    """Acquire, release and reclaim execution environments; what is running."""

    def _resource(self, fs: FunctionPool, version: str, alias: str | None) -> str | None:
        qualifier = alias or (None if version == "$LATEST" else version)
        return f"{fs.spec.name}:{qualifier}" if qualifier else None

    def _acquire(self, fs: FunctionPool, version: str, alias: str | None,
                 resource: str | None) -> tuple[EmulatedEnvironment, bool, bool]:
        """-> (environment marked busy, cold, spillover). Raises TooManyRequestsException.

        A function on Lambda Managed Instances (``fs.lmi``) takes an idle runtime process of the
        version's environments, never starts one on the request path, and is throttled when
        every process is busy (:mod:`.lmi_state`); its Lambda concurrency limit does not apply.
        """
        name = fs.spec.name
        if fs.lmi is not None:
            return self._acquire_lmi(fs, version, resource), False, False
        with fs.lock:
            limit = fs.reserved if fs.reserved is not None else self.config.account_concurrency_limit
            if fs.in_flight >= limit:
                self.metrics.record("Throttles", 1, name, resource)
                reason = ("ReservedFunctionConcurrentInvocationLimitExceeded" if fs.reserved is not None
                          else "ConcurrentInvocationLimitExceeded")
                raise TooManyRequestsException("Rate Exceeded.", reason=reason)
            pc = fs.pc.get(alias) if alias else None
            env = None
            if alias is not None:
                env = next((e for e in fs.envs if e.state == "idle" and e.provisioned_for == alias
                            and not e.retire), None)
            if env is None:
                env = next((e for e in reversed(fs.envs) if e.state == "idle"
                            and e.provisioned_for is None and e.version == version), None)
            cold = env is None
            if env is None:
                init_type: EmulatedInitType = "on-demand"
                if fs.spec.snap_start and version in fs.templates:
                    init_type = "snap-start"
                env = EmulatedEnvironment(fs.spec, version, init_type, provisioned_for=None,
                                           now=self.clock.time())
                fs.envs.append(env)
            else:
                env.state = "busy"
                env.thaw()  # before anything is sent to it (a warm ping too)
            spillover = bool(pc and pc.requested > 0 and env.provisioned_for is None)
            fs.in_flight += 1
            if resource:
                fs.in_flight_by_resource[resource] = fs.in_flight_by_resource.get(resource, 0) + 1
            self.metrics.record("ConcurrentExecutions", fs.in_flight, name, None)
            if resource:
                self.metrics.record("ConcurrentExecutions", fs.in_flight_by_resource[resource], name, resource)
            if pc is not None and alias is not None:
                busy_pc = sum(1 for e in fs.envs if e.provisioned_for == alias and e.state == "busy")
                self.metrics.record("ProvisionedConcurrentExecutions", busy_pc, name, resource)
                if pc.allocated:
                    self.metrics.record("ProvisionedConcurrencyUtilization",
                                        busy_pc / pc.allocated, name, resource)
                if spillover:
                    self.metrics.record("ProvisionedConcurrencySpilloverInvocations", 1, name, resource)
                elif env.provisioned_for == alias:
                    self.metrics.record("ProvisionedConcurrencyInvocations", 1, name, resource)
            return env, cold, spillover

    def _acquire_lmi(self, fs: FunctionPool, version: str, resource: str | None) -> EmulatedEnvironment:
        lmi = fs.lmi
        assert lmi is not None
        name = fs.spec.name
        with fs.lock:
            if version not in lmi.requested:
                raise InvalidParameterValueException(
                    f"{self.arn(name)} version {version} is not published on a capacity "
                    "provider: invoke a published version or an alias")
            env = lmi.acquire(version)
            if env is None:
                self.metrics.record("Throttles", 1, name, resource)
                raise TooManyRequestsException(
                    "Rate Exceeded.", reason="ConcurrentInvocationLimitExceeded")
            fs.in_flight += 1
            if resource:
                fs.in_flight_by_resource[resource] = fs.in_flight_by_resource.get(resource, 0) + 1
                self.metrics.record("ConcurrentExecutions", fs.in_flight_by_resource[resource],
                                    name, resource)
            self.metrics.record("ConcurrentExecutions", fs.in_flight, name, None)
            return env

    def _release(self, fs: FunctionPool, env: EmulatedEnvironment, resource: str | None,
                 dead: bool, reason: ShutdownReason = "failure") -> None:
        """End the invocation's hold on ``env``: idle (and frozen) again, or ended when ``dead``
        (``reason`` goes to its extensions' ``SHUTDOWN``) or retired."""
        kill = False
        with fs.lock:
            fs.in_flight -= 1
            if fs.lmi is not None and env.worker_index is not None:
                fs.lmi.released(env.version)
            if resource:
                fs.in_flight_by_resource[resource] -= 1
            env.last_used = self.clock.monotonic()
            if dead or env.retire or env.state == "dead":
                kill = True
                reason = reason if dead else "spindown"
                env.state = "dead"
                if env in fs.envs:
                    fs.envs.remove(env)
            else:
                env.state = "idle"
                if self.config.freeze_idle:
                    env.freeze()
            fs.lock.notify_all()
        if kill:
            env.kill(reason)

    def _reap_loop(self) -> None:
        while not self._stopped.wait(self.config.reap_interval_s):
            self.reclaim_idle()

    def reclaim_idle(self) -> int:
        """Reclaim on-demand environments idle for longer than the idle timeout; returns how many."""
        now = self.clock.monotonic()
        victims: list[EmulatedEnvironment] = []
        for fs in self._pools():
            with fs.lock:
                for env in list(fs.envs):
                    idle_too_long = now - env.last_used >= self.config.idle_timeout_s
                    if env.state == "idle" and env.provisioned_for is None and idle_too_long or env.state == "idle" and not env.alive():
                        env.state = "dead"
                        fs.envs.remove(env)
                        victims.append(env)
        for env in victims:
            env.kill()
        return len(victims)

    def environments(self, function_name: str) -> list[dict[str, Any]]:
        """A snapshot of the function's live environments (id, state, init type, pid, ...)."""
        fs = self._state(function_name)
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
        for fs in self._pools():
            with fs.lock:
                pids += [p for e in fs.envs for p in e.pids()]
                pids += [t.proc.pid for t in fs.templates.values()]
        return pids

