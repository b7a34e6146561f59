"""Concurrency: the limit each invocation is admitted under, and the concurrency API.

:class:`Concurrency` admits an invocation or throttles it (the function's reserved
concurrency, else the account limit), counts what is in flight and records the concurrency
metrics; and it answers ``Put/Get/DeleteFunctionConcurrency``, ``GetAccountSettings`` and
``Put/Get/List/DeleteProvisionedConcurrencyConfig`` with Lambda's errors, and the allocation
of provisioned environments (after ``EmulatorConfig.pc_allocation_delay_s``; at once for a
deploy).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html
https://docs.aws.amazon.com/lambda/latest/api/API_AccountLimit.html
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from infra.local.emulator.core import EmulatorContext, FunctionPool, ProvisionedConfig
from infra.local.emulator.environment import EmulatedEnvironment, InitFailed
from infra.local.emulator.processes import Processes
from infra.local.errors import (
    InvalidParameterValueException,
    ProvisionedConcurrencyConfigNotFoundException,
    ResourceNotFoundException,
    TooManyRequestsException,
)


class Concurrency:
    """Reserved and provisioned concurrency of the emulated functions.

    Parameters
    ----------
    context : EmulatorContext
        The functions, the account limit, the allocation delay, clock and metrics.
    processes : Processes
        Runs the init phase of each provisioned environment it allocates.
    """

    def __init__(self, context: EmulatorContext, processes: Processes) -> None:
        self.context = context
        self.processes = processes

    # ---- the limit -----------------------------------------------------------------------
    def check(self, fs: FunctionPool, resource: str | None) -> None:
        """Refuse an invocation of ``fs`` at its concurrency limit (reserved concurrency, else
        the account's): count a ``Throttles`` and raise TooManyRequestsException (``reason``
        ``ReservedFunctionConcurrentInvocationLimitExceeded`` or
        ``ConcurrentInvocationLimitExceeded``). The caller holds ``fs.lock``."""
        limit = fs.reserved if fs.reserved is not None else self.context.config.account_concurrency_limit
        if fs.in_flight >= limit:
            self.context.metrics.record("Throttles", 1, fs.spec.name, resource)
            reason = ("ReservedFunctionConcurrentInvocationLimitExceeded" if fs.reserved is not None
                      else "ConcurrentInvocationLimitExceeded")
            raise TooManyRequestsException("Rate Exceeded.", reason=reason)

    def enter(self, fs: FunctionPool, resource: str | None) -> None:
        """Count an admitted invocation in flight (of the function, and of ``resource``) and
        record ``ConcurrentExecutions``. The caller holds ``fs.lock``."""
        name = fs.spec.name
        fs.in_flight += 1
        if resource:
            fs.in_flight_by_resource[resource] = fs.in_flight_by_resource.get(resource, 0) + 1
        self.context.metrics.record("ConcurrentExecutions", fs.in_flight, name, None)
        if resource:
            self.context.metrics.record("ConcurrentExecutions", fs.in_flight_by_resource[resource],
                                        name, resource)

    @staticmethod
    def leave(fs: FunctionPool, resource: str | None) -> None:
        """An invocation counted by :meth:`enter` ended. The caller holds ``fs.lock``."""
        fs.in_flight -= 1
        if resource:
            fs.in_flight_by_resource[resource] -= 1

    def provisioned_use(self, fs: FunctionPool, alias: str | None, env: EmulatedEnvironment,
                        resource: str | None) -> bool:
        """Record how an invocation through ``alias`` used its provisioned concurrency
        (``ProvisionedConcurrentExecutions``, ``...Utilization``, ``...Invocations`` or
        ``...SpilloverInvocations``); True for a spillover (the alias has provisioned
        concurrency but ``env`` is on demand). The caller holds ``fs.lock``."""
        pc = fs.pc.get(alias) if alias else None
        spillover = bool(pc and pc.requested > 0 and env.provisioned_for is None)
        if pc is None or alias is None:
            return spillover
        name, metrics = fs.spec.name, self.context.metrics
        busy_pc = sum(1 for e in fs.envs if e.provisioned_for == alias and e.state == "busy")
        metrics.record("ProvisionedConcurrentExecutions", busy_pc, name, resource)
        if pc.allocated:
            metrics.record("ProvisionedConcurrencyUtilization", busy_pc / pc.allocated, name, resource)
        if spillover:
            metrics.record("ProvisionedConcurrencySpilloverInvocations", 1, name, resource)
        elif env.provisioned_for == alias:
            metrics.record("ProvisionedConcurrencyInvocations", 1, name, resource)
        return spillover

    # ---- the concurrency API -------------------------------------------------------------

    def put_function_concurrency(self, function_name: str, reserved: int) -> int:
        """Set reserved concurrency (the function's concurrency limit).

        Raises
        ------
        ResourceNotFoundException, InvalidParameterValueException
        """
        fs = self.context.state(function_name)
        if not isinstance(reserved, int) or isinstance(reserved, bool) or reserved < 0:
            raise InvalidParameterValueException(
                "ReservedConcurrentExecutions must be an integer >= 0")
        if reserved > self.context.config.account_concurrency_limit:
            raise InvalidParameterValueException(
                f"Specified ReservedConcurrentExecutions for function decreases account's "
                f"UnreservedConcurrentExecution below its minimum value of [0]; the account "
                f"limit is {self.context.config.account_concurrency_limit}.")
        with fs.lock:
            total_pc = sum(c.requested for c in fs.pc.values())
            if reserved < total_pc:
                raise InvalidParameterValueException(
                    f"ReservedConcurrentExecutions {reserved} is below the provisioned "
                    f"concurrency of the function ({total_pc}).")
            fs.reserved = reserved
        return reserved

    def account_settings(self) -> dict[str, Any]:
        """``GetAccountSettings``: the account limit and the concurrency not reserved by functions.

        ``UnreservedConcurrentExecutions`` is the account limit minus the reserved concurrency
        of every function, as Lambda defines it.

        References
        ----------
        https://docs.aws.amazon.com/lambda/latest/api/API_AccountLimit.html
        """
        states = self.context.pools()
        reserved = sum(fs.reserved or 0 for fs in states)
        limit = self.context.config.account_concurrency_limit
        return {
            "AccountLimit": {"TotalCodeSize": 80530636800, "CodeSizeUnzipped": 262144000,
                             "CodeSizeZipped": 52428800, "ConcurrentExecutions": limit,
                             "UnreservedConcurrentExecutions": max(0, limit - reserved)},
            "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": len(states)},
        }

    def get_function_concurrency(self, function_name: str) -> int | None:
        """The function's reserved concurrency, None when it has none. Raises
        ResourceNotFoundException."""
        return self.context.state(function_name).reserved

    def delete_function_concurrency(self, function_name: str) -> None:
        """Remove the function's reserved concurrency. Raises ResourceNotFoundException."""
        fs = self.context.state(function_name)
        with fs.lock:
            fs.reserved = None

    def _pc_alias(self, fs: FunctionPool, qualifier: str | None) -> str:
        if not qualifier:
            raise InvalidParameterValueException("The Qualifier parameter is required.")
        if qualifier == "$LATEST":
            raise InvalidParameterValueException(
                "Provisioned Concurrency Configs cannot be applied to unpublished function versions.")
        if qualifier not in fs.aliases and qualifier not in fs.spec.versions:
            raise ResourceNotFoundException(f"Function not found: {self.context.arn(fs.spec.name, qualifier)}")
        return qualifier

    def put_provisioned_concurrency(self, function_name: str, qualifier: str | None,
                                    executions: int) -> dict[str, Any]:
        """Request N provisioned environments for an alias (allocation after the delay).

        Raises
        ------
        ResourceNotFoundException
            Unknown function or qualifier.
        InvalidParameterValueException
            Missing qualifier, ``$LATEST``, N < 1, N above reserved concurrency, or SnapStart.
        """
        fs = self.context.state(function_name)
        alias = self._pc_alias(fs, qualifier)
        if not isinstance(executions, int) or isinstance(executions, bool) or executions < 1:
            raise InvalidParameterValueException(
                "ProvisionedConcurrentExecutions must be an integer >= 1.")
        if fs.spec.snap_start:
            raise InvalidParameterValueException(
                "Provisioned concurrency cannot be configured on a function with SnapStart enabled.")
        with fs.lock:
            others = sum(c.requested for a, c in fs.pc.items() if a != alias)
            if fs.reserved is not None and others + executions > fs.reserved:
                raise InvalidParameterValueException(
                    f"Requested Provisioned Concurrency ({others + executions}) exceeds the "
                    f"function's reserved concurrency ({fs.reserved}).")
        self.set_pc(fs, alias, executions, delay_s=self.context.config.pc_allocation_delay_s)
        return self.get_provisioned_concurrency(function_name, alias)

    def get_provisioned_concurrency(self, function_name: str, qualifier: str | None) -> dict[str, Any]:
        fs = self.context.state(function_name)
        alias = self._pc_alias(fs, qualifier)
        with fs.lock:
            cfg = fs.pc.get(alias)
            if cfg is None:
                raise ProvisionedConcurrencyConfigNotFoundException(
                    "No Provisioned Concurrency Config found for this function")
            return self._pc_view(fs, alias, cfg)

    def _pc_view(self, fs: FunctionPool, alias: str, cfg: ProvisionedConfig) -> dict[str, Any]:
        idle_ready = sum(1 for e in fs.envs if e.provisioned_for == alias and e.state in ("idle", "busy"))
        out: dict[str, Any] = {
            "FunctionArn": self.context.arn(fs.spec.name, alias),
            "RequestedProvisionedConcurrentExecutions": cfg.requested,
            "AllocatedProvisionedConcurrentExecutions": cfg.allocated,
            "AvailableProvisionedConcurrentExecutions": min(cfg.allocated, idle_ready),
            "Status": cfg.status,
            "LastModified": cfg.last_modified,
        }
        if cfg.status_reason:
            out["StatusReason"] = cfg.status_reason
        return out

    def list_provisioned_concurrency(self, function_name: str) -> list[dict[str, Any]]:
        fs = self.context.state(function_name)
        with fs.lock:
            return [self._pc_view(fs, a, c) for a, c in sorted(fs.pc.items())]

    def delete_provisioned_concurrency(self, function_name: str, qualifier: str | None) -> None:
        fs = self.context.state(function_name)
        alias = self._pc_alias(fs, qualifier)
        victims = []
        with fs.lock:
            cfg = fs.pc.pop(alias, None)
            if cfg is None:
                raise ProvisionedConcurrencyConfigNotFoundException(
                    "No Provisioned Concurrency Config found for this function")
            cfg.generation += 1
            for env in list(fs.envs):
                if env.provisioned_for == alias:
                    if env.state == "idle" or env.state == "init":
                        env.state = "dead"
                        fs.envs.remove(env)
                        victims.append(env)
                    else:
                        env.retire = True
        for env in victims:
            env.kill()

    def wait_provisioned_ready(self, function_name: str, qualifier: str, timeout_s: float = 300.0) -> dict[str, Any]:
        """Block until the alias's provisioned concurrency is READY (or FAILED); real seconds.

        Raises
        ------
        TimeoutError
            If it is still allocating after ``timeout_s``.
        """
        fs = self.context.state(function_name)
        deadline = time.monotonic() + timeout_s
        with fs.lock:
            while True:
                cfg = fs.pc.get(qualifier)
                if cfg is None:
                    raise ProvisionedConcurrencyConfigNotFoundException(
                        "No Provisioned Concurrency Config found for this function")
                if cfg.status in ("READY", "FAILED"):
                    return self._pc_view(fs, qualifier, cfg)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"provisioned concurrency of {function_name}:{qualifier} "
                                       f"not READY after {timeout_s} s")
                fs.lock.wait(min(left, 0.5))

    def set_pc(self, fs: FunctionPool, alias: str, executions: int, *, delay_s: float) -> None:
        """Request ``executions`` provisioned environments for ``alias``: retire the surplus
        now, allocate the rest from a thread after ``delay_s`` clock seconds."""
        now_iso = dt.datetime.fromtimestamp(self.context.clock.time(), tz=dt.UTC).isoformat(
            timespec="seconds").replace("+00:00", "+0000")
        with fs.lock:
            cfg = fs.pc.get(alias)
            if cfg is None:
                cfg = fs.pc[alias] = ProvisionedConfig(requested=executions)
            cfg.requested = executions
            cfg.generation += 1
            cfg.status = "IN_PROGRESS"
            cfg.status_reason = None
            cfg.last_modified = now_iso
            generation = cfg.generation
            # shrink at once: retire surplus provisioned environments (idle first)
            mine = [e for e in fs.envs if e.provisioned_for == alias and not e.retire]
            surplus = len(mine) - executions
            victims = []
            for env in sorted(mine, key=lambda e: e.state != "idle"):
                if surplus <= 0:
                    break
                surplus -= 1
                if env.state in ("idle", "init"):
                    env.state = "dead"
                    fs.envs.remove(env)
                    victims.append(env)
                else:
                    env.retire = True
            cfg.allocated = min(cfg.allocated, executions)
        for env in victims:
            env.kill()
        thread = threading.Thread(target=self.allocate, args=(fs, alias, generation, delay_s),
                                  name=f"pc-{fs.spec.name}-{alias}", daemon=True)
        self.context.track(thread)

    def allocate(self, fs: FunctionPool, alias: str, generation: int, delay_s: float) -> None:
        """Start and initialise the alias's provisioned environments until ``requested`` (a
        later request, ``generation``, supersedes this one); READY, or FAILED on an init error."""
        if delay_s and self.context.clock.wait(self.context.stopped, delay_s):
            return
        version = fs.aliases.get(alias, alias)
        while not self.context.stopped.is_set():
            with fs.lock:
                cfg = fs.pc.get(alias)
                if cfg is None or cfg.generation != generation:
                    return
                have = sum(1 for e in fs.envs if e.provisioned_for == alias and not e.retire
                           and e.state != "dead")
                if have >= cfg.requested:
                    cfg.allocated = min(cfg.requested, sum(
                        1 for e in fs.envs if e.provisioned_for == alias and not e.retire
                        and e.state in ("idle", "busy")))
                    cfg.status = "READY"
                    fs.lock.notify_all()
                    return
                env = EmulatedEnvironment(fs.spec, version, "provisioned-concurrency",
                                           provisioned_for=alias, now=self.context.clock.time())
                fs.envs.append(env)
            try:
                self.processes.initialize(fs, env)
            except InitFailed as exc:
                with fs.lock:
                    if env in fs.envs:
                        fs.envs.remove(env)
                    cfg = fs.pc.get(alias)
                    if cfg is not None and cfg.generation == generation:
                        cfg.status = "FAILED"
                        cfg.status_reason = f"FUNCTION_ERROR_INIT_FAILURE: {exc.body.get('errorMessage')}"
                        fs.lock.notify_all()
                return
            with fs.lock:
                cfg = fs.pc.get(alias)
                if env.state == "dead" or cfg is None or cfg.generation != generation:
                    if env in fs.envs:
                        fs.envs.remove(env)
                    stale = True
                else:
                    env.state = "idle"
                    env.last_used = self.context.clock.monotonic()
                    if self.context.config.freeze_idle:
                        env.freeze()  # Lambda freezes a provisioned environment after its init
                    cfg.allocated += 1
                    stale = False
                fs.lock.notify_all()
            if stale:
                env.kill()
                return
