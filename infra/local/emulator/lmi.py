"""Lambda Managed Instances (LMI) mode of the emulator: environments of worker processes on
instances of a capacity provider, background scaling, the scaling-config API, instance billing.

A function deployed with ``Emulator.add_function(spec, managed_instances=ManagedInstancesConfig(...))``
runs each published version on LMI (the model and its sources: :mod:`.lmi_state`):

- at deploy each version gets its ``MinExecutionEnvironments`` environments, initialised
  before the call returns (Lambda starts them before it marks the version ACTIVE);
- each environment runs ``PerExecutionEnvironmentMaxConcurrency`` real runtime processes with
  ``AWS_LAMBDA_INITIALIZATION_TYPE=lambda-managed-instances``, ``AWS_LAMBDA_MAX_CONCURRENCY``
  and one ``TMPDIR`` for the environment; each process has its own init and serves one request
  at a time (Python's model on LMI). Each process has its own Runtime API address here, where
  Lambda gives the environment one Runtime API that takes concurrent ``next`` calls: the
  runtime sees the same protocol either way;
- a request that finds no idle process is throttled at once (``TooManyRequestsException``,
  counted); capacity only comes from the background scaler (:meth:`ManagedInstances.scale_managed_instances`,
  every ``scale_interval_s``) or a raised minimum;
- ``PutFunctionScalingConfig`` / ``GetFunctionScalingConfig`` on a version (or
  ``$LATEST.PUBLISHED``), with the API's errors;
- :meth:`ManagedInstances.managed_instances_usage`: instance-seconds per instance type,
  throttles, refused scale-outs, and the cost at ``warmers/prices.json``'s prices.

Not emulated: external extensions on LMI, SnapStart or provisioned concurrency with LMI (AWS
refuses both), instance types' own memory limits, AZ spreading.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-execution-environment.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html
https://docs.aws.amazon.com/lambda/latest/api/API_PutFunctionScalingConfig.html
https://docs.aws.amazon.com/lambda/latest/api/API_GetFunctionScalingConfig.html
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import tempfile
import threading
import time
from typing import Any

from infra.local.emulator.concurrency import Concurrency
from infra.local.emulator.config import ManagedInstancesConfig, check_scaling
from infra.local.emulator.core import EmulatorContext, FunctionPool
from infra.local.emulator.environment import EmulatedEnvironment, InitFailed
from infra.local.emulator.lmi_state import (
    LMI_INIT_TYPE,
    MIN_INIT_TIMEOUT_S,
    MIN_MEMORY_MB,
    WORKER_MARK,
    CapacityProviderState,
    LmiEnvironment,
    LmiFunction,
)
from infra.local.emulator.processes import Processes
from infra.local.errors import (
    InvalidParameterValueException,
    ResourceNotFoundException,
    TooManyRequestsException,
)
from infra.local.spec import FunctionSpec

#: ``Qualifier`` of the scaling-config operations (botocore's lambda model).
_QUALIFIER = re.compile(r"^(\$LATEST\.PUBLISHED|[0-9]+)$")
#: Real seconds a deploy waits for its minimum environments at most.
DEPLOY_WAIT_S = 300.0


class InitFailedOnDeploy(RuntimeError):
    """A deploy's minimum LMI environments failed their init (Lambda does not make such a
    version ACTIVE); the message carries the init error."""


class ManagedInstances:
    """LMI functions: deploy, routing, background scaling, scaling-config API, usage.

    Parameters
    ----------
    context : EmulatorContext
        The functions, clock, log, background threads.
    processes : Processes
        Runs each runtime worker's init phase.
    concurrency : Concurrency
        Counts the invocations in flight (an LMI function has no Lambda concurrency limit).
    """

    def __init__(self, context: EmulatorContext, processes: Processes,
                 concurrency: Concurrency) -> None:
        self.context = context
        self.processes = processes
        self.concurrency = concurrency
        #: the capacity providers by ARN (shared by the functions given the same ARN)
        self.providers: dict[str, CapacityProviderState] = {}
        self._scaler_started = False

    # ---- deploy ---------------------------------------------------------------------------
    def deploy(self, fs: FunctionPool, config: ManagedInstancesConfig, wait: bool) -> None:
        """Put a new function on LMI and start each published version's minimum environments
        (without the launch delay; waited for when ``wait``). Raises ValueError."""
        spec = fs.spec
        _check_spec(spec, config)
        with self.context.lock:
            providers = self.providers
            provider = providers.get(config.capacity_provider_arn)
            if provider is None:
                provider = providers[config.capacity_provider_arn] = CapacityProviderState(
                    config.capacity_provider_arn, config.instance_type, config.instance_vcpus,
                    config.max_vcpu)
            elif (provider.instance_type, provider.instance_vcpus) != (
                    config.instance_type, config.instance_vcpus):
                raise ValueError(f"function {spec.name!r}: capacity provider "
                                 f"{config.capacity_provider_arn} has instances "
                                 f"{provider.instance_type} ({provider.instance_vcpus} vCPUs)")
        lmi = LmiFunction(config, provider, spec.memory_mb)
        if lmi.vcpus_per_environment > config.instance_vcpus:
            raise ValueError(f"function {spec.name!r}: an environment takes "
                             f"{lmi.vcpus_per_environment:g} vCPUs (memory_mb / "
                             f"memory_gib_per_vcpu) but an instance has {config.instance_vcpus}")
        scaling = (config.min_execution_environments, config.max_execution_environments)
        with fs.lock:
            fs.lmi = lmi
            for version in spec.versions:
                if version != "$LATEST":
                    lmi.requested[version] = lmi.applied[version] = scaling
        for version in lmi.requested:
            self._scale_version(fs, version, launch_s=0.0, interval_ended=False)
        with self.context.lock:
            start, self._scaler_started = not self._scaler_started, True
        if start:
            self.context.track(threading.Thread(target=self._lmi_loop, name="lmi-scaler", daemon=True))
        if wait:
            self._wait_lmi(fs, DEPLOY_WAIT_S)
            with fs.lock:
                short = [v for v, (low, _) in lmi.requested.items() if len(lmi.live(v)) < low]
                error = lmi.init_error
            if short and error is not None:
                raise InitFailedOnDeploy(f"function {spec.name!r}: the LMI environments of "
                                         f"version(s) {short} failed their init: {error}")

    # ---- routing -------------------------------------------------------------------------
    def acquire(self, fs: FunctionPool, version: str, resource: str | None) -> EmulatedEnvironment:
        """An idle runtime process of the version's environments (marked busy); never starts
        one on the request path. Raises InvalidParameterValueException for a version not on a
        capacity provider, TooManyRequestsException (counted) when every process is busy."""
        lmi = fs.lmi
        assert lmi is not None
        name = fs.spec.name
        with fs.lock:
            if version not in lmi.requested:
                raise InvalidParameterValueException(
                    f"{self.context.arn(name)} version {version} is not published on a capacity "
                    "provider: invoke a published version or an alias")
            env = lmi.acquire(version)
            if env is None:
                self.context.metrics.record("Throttles", 1, name, resource)
                raise TooManyRequestsException(
                    "Rate Exceeded.", reason="ConcurrentInvocationLimitExceeded")
            self.concurrency.enter(fs, resource)
            return env

    def _wait_lmi(self, fs: FunctionPool, timeout_s: float) -> None:
        """Block until no environment of ``fs`` is launching or initialising (real seconds)."""
        deadline = time.monotonic() + timeout_s
        lmi = fs.lmi
        assert lmi is not None
        with fs.lock:
            while any(e.state in ("launching", "init") or any(w.state == "init" for w in e.workers)
                      for e in lmi.environments):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"LMI environments of {fs.spec.name} not ready after "
                                       f"{timeout_s} s")
                fs.lock.wait(min(left, 0.5))

    def wait_managed_instances_ready(self, function_name: str, timeout_s: float = 60.0) -> None:
        """Block until every environment the scaler started for the function is ready (or
        ended); real seconds. Raises TimeoutError, ResourceNotFoundException."""
        self._wait_lmi(self._lmi_pool(function_name), timeout_s)

    # ---- scaling -------------------------------------------------------------------------
    def _lmi_loop(self) -> None:
        """The background scaler: a decision every ``scale_interval_s`` clock seconds (the
        smallest of the LMI functions')."""
        while not self.context.clock.wait(self.context.stopped, min(
                (fs.lmi.config.scale_interval_s for fs in self.context.pools() if fs.lmi is not None),
                default=15.0)):
            self.scale_managed_instances()

    def scale_managed_instances(self, function_name: str | None = None) -> dict[str, dict[str, Any]]:
        """One background scaling decision for every LMI version (of one function, or all).

        Returns
        -------
        dict
            ``{"function:version": {"want", "environments", "started", "retired", "blocked"}}``:
            environments wanted and live after the decision, started and retired by it, and
            whether the provider's vCPU limit stopped it.
        """
        pools = [self._lmi_pool(function_name)] if function_name else [
            fs for fs in self.context.pools() if fs.lmi is not None]
        out = {}
        for fs in pools:
            self.prune(fs)
            assert fs.lmi is not None
            with fs.lock:
                versions = list(fs.lmi.requested)
            for version in versions:
                out[f"{fs.spec.name}:{version}"] = self._scale_version(fs, version)
        return out

    def _scale_version(self, fs: FunctionPool, version: str, launch_s: float | None = None,
                       *, interval_ended: bool = True) -> dict[str, Any]:
        lmi = fs.lmi
        assert lmi is not None
        now = self.context.clock.time()
        launch_s = lmi.config.instance_launch_s if launch_s is None else launch_s
        started: list[LmiEnvironment] = []
        retired: list[EmulatedEnvironment] = []
        blocked = False
        with fs.lock:
            want = lmi.decide(version, now, interval_ended=interval_ended)
            live = lmi.live(version)
            for _ in range(want - len(live)):
                inst = lmi.provider.place(lmi.vcpus_per_environment, now, launch_s)
                if inst is None:
                    blocked = True
                    break
                env = LmiEnvironment(version, inst, lmi.vcpus_per_environment,
                                     tempfile.mkdtemp(prefix="warmstart-lmi-tmp-"))
                lmi.environments.append(env)
                started.append(env)
            surplus = len(live) - want
            for env in sorted(live, key=LmiEnvironment.busy):  # the least busy first
                if surplus <= 0:
                    break
                surplus -= 1
                env.retire = True
                for worker in env.workers:
                    if worker.state in ("idle", "init"):
                        worker.state = "dead"
                        if worker in fs.envs:
                            fs.envs.remove(worker)
                        retired.append(worker)
                    else:
                        worker.retire = True  # ended by _release when its request is done
            lmi.applied[version] = lmi.requested[version]
            live_after = len(lmi.live(version))
        for worker in retired:
            worker.kill()
        for env in started:
            self.context.track(threading.Thread(target=self._start_lmi_environment, args=(fs, env),
                                         name=f"lmi-{env.id[:8]}", daemon=True))
        if blocked:
            self.context.log(f"LMI {fs.spec.name}:{version}: capacity provider {lmi.provider.arn} is at "
                      f"its vCPU limit ({lmi.provider.max_vcpu}): scale-out stopped at "
                      f"{live_after} environments (wanted {want})\n")
        self.prune(fs)
        return {"want": want, "environments": live_after, "started": len(started),
                "retired": len({id(w) for w in retired}), "blocked": blocked}

    def _start_lmi_environment(self, fs: FunctionPool, env: LmiEnvironment) -> None:
        """Wait for the instance, then run every worker's init (in parallel); the environment
        is ready when its first worker is (Lambda: at least one runtime worker called next)."""
        wait_s = env.instance.ready_at - self.context.clock.time()
        if wait_s > 0 and self.context.clock.wait(self.context.stopped, wait_s):
            return
        lmi = fs.lmi
        assert lmi is not None
        day = dt.datetime.fromtimestamp(self.context.clock.time(), tz=dt.UTC).strftime("%Y/%m/%d")
        with fs.lock:
            if env.retire or self.context.stopped.is_set():
                env.state = "dead"
                fs.lock.notify_all()
                return
            env.state = "init"
            for index in range(lmi.per_environment):
                worker = EmulatedEnvironment(fs.spec, env.version, LMI_INIT_TYPE,
                                             provisioned_for=WORKER_MARK + env.id,
                                             now=self.context.clock.time())
                worker.id = env.id  # the environment's id; the worker is its process
                worker.worker_index = index
                worker.log_stream_name = f"{day}/[{env.version}]{env.id}"
                worker.extra_vars = {"TMPDIR": env.tmp_dir,
                                     "AWS_LAMBDA_MAX_CONCURRENCY": str(lmi.per_environment)}
                worker.init_timeout_s = max(MIN_INIT_TIMEOUT_S, fs.spec.timeout_s)
                env.workers.append(worker)
                fs.envs.append(worker)
        threads = [threading.Thread(target=self._init_worker, args=(fs, env, w), daemon=True,
                                    name=f"lmi-init-{env.id[:8]}-{w.worker_index}")
                   for w in env.workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with fs.lock:
            if env.state == "init":
                env.state = "ready" if env.workers else "dead"
            fs.lock.notify_all()
        self.prune(fs)

    def _init_worker(self, fs: FunctionPool, env: LmiEnvironment, worker: EmulatedEnvironment) -> None:
        try:
            self.processes.initialize(fs, worker)
        except InitFailed as exc:
            self.context.log(f"LMI environment {env.id[:8]} of {fs.spec.name}: a runtime worker's init "
                      f"failed: {exc.body.get('errorMessage')}\n")
            with fs.lock:
                if worker in fs.envs:
                    fs.envs.remove(worker)
                if worker in env.workers:
                    env.workers.remove(worker)
                assert fs.lmi is not None
                fs.lmi.init_error = str(exc.body.get("errorMessage"))
            return
        with fs.lock:
            if worker.state == "dead" or env.retire or self.context.stopped.is_set():
                stale = True
            else:
                worker.state = "idle"  # never frozen on LMI (continuous operation)
                worker.last_used = self.context.clock.monotonic()
                env.state = "ready"  # serves from its first ready worker
                stale = False
            fs.lock.notify_all()
        if stale:
            worker.kill()

    def prune(self, fs: FunctionPool) -> None:
        """Forget ended workers; an environment without workers ends (its vCPUs go back, its
        ``TMPDIR`` is removed, an instance left empty ends)."""
        lmi = fs.lmi
        if lmi is None:
            return
        ended = []
        with fs.lock:
            for env in lmi.environments:
                env.workers = [w for w in env.workers if w in fs.envs and w.state != "dead"]
                if env.state in ("ready", "dead") and not env.workers or (
                        env.state == "dead" and env in lmi.environments):
                    ended.append(env)
            lmi.environments = [e for e in lmi.environments if e not in ended]
            fs.lock.notify_all()
        now = self.context.clock.time()
        for env in ended:
            env.state = "dead"
            lmi.provider.release(env.instance, env.vcpus, now)
            shutil.rmtree(env.tmp_dir, ignore_errors=True)

    def stop(self) -> None:
        """At stop: end the instances (billing stops) and remove the environments' folders."""
        now = self.context.clock.time()
        for fs in self.context.pools():
            if fs.lmi is None:
                continue
            for env in fs.lmi.environments:
                shutil.rmtree(env.tmp_dir, ignore_errors=True)
            fs.lmi.provider.end_all(now)

    # ---- the scaling-config API ---------------------------------------------------------
    def _lmi_pool(self, function_name: str) -> FunctionPool:
        fs = self.context.state(function_name)
        if fs.lmi is None:
            raise InvalidParameterValueException(
                f"Function {self.context.arn(fs.spec.name)} is not configured with a capacity provider: "
                "scaling configs apply to Lambda Managed Instances functions only")
        return fs

    def _scaling_version(self, fs: FunctionPool, qualifier: str | None) -> str:
        if not qualifier or not _QUALIFIER.match(qualifier):
            raise InvalidParameterValueException(
                f"Qualifier {qualifier!r} is not valid: use a published version number or "
                "$LATEST.PUBLISHED (not an alias, not $LATEST)")
        assert fs.lmi is not None
        if qualifier == "$LATEST.PUBLISHED":
            published = sorted((v for v in fs.lmi.requested), key=int)
            if not published:
                raise ResourceNotFoundException(
                    f"Function not found: {self.context.arn(fs.spec.name, qualifier)}")
            return published[-1]
        if qualifier not in fs.lmi.requested:
            raise ResourceNotFoundException(f"Function not found: {self.context.arn(fs.spec.name, qualifier)}")
        return qualifier

    def put_function_scaling_config(self, function_name: str, qualifier: str | None,
                                    scaling: dict[str, Any] | None) -> dict[str, Any]:
        """``PutFunctionScalingConfig``: set a version's minimum/maximum execution environments.

        A raised minimum starts environments now (on instances with room, else after the
        launch delay); a lowered maximum retires the surplus now; a lowered minimum lets the
        scaler come down after its hold.

        Parameters
        ----------
        function_name : str
        qualifier : str
            A published version or ``$LATEST.PUBLISHED``.
        scaling : dict
            ``{"MinExecutionEnvironments": int, "MaxExecutionEnvironments": int}`` (either may
            be left out: it keeps its value).

        Returns
        -------
        dict
            ``{"FunctionState": "Active"}`` (what the API answers with 202).

        Raises
        ------
        ResourceNotFoundException
            Unknown function or version.
        InvalidParameterValueException
            The function is not on a capacity provider; a bad qualifier; values not integers
            0..15000; minimum greater than maximum.
        """
        fs = self._lmi_pool(function_name)
        version = self._scaling_version(fs, qualifier)
        if scaling is not None and not isinstance(scaling, dict):
            raise InvalidParameterValueException("FunctionScalingConfig must be an object")
        scaling = scaling or {}
        assert fs.lmi is not None
        with fs.lock:
            low, high = fs.lmi.requested[version]
        low = scaling.get("MinExecutionEnvironments", low)
        high = scaling.get("MaxExecutionEnvironments", high)
        try:
            check_scaling(low, high)
        except ValueError as exc:
            raise InvalidParameterValueException(str(exc)) from None
        with fs.lock:
            fs.lmi.requested[version] = (low, high)
        self._scale_version(fs, version, interval_ended=False)
        return {"FunctionState": "Active"}

    def get_function_scaling_config(self, function_name: str, qualifier: str | None) -> dict[str, Any]:
        """``GetFunctionScalingConfig``: ``FunctionArn``, ``AppliedFunctionScalingConfig`` (what
        the scaler last applied) and ``RequestedFunctionScalingConfig``.

        Raises
        ------
        ResourceNotFoundException, InvalidParameterValueException
            As :meth:`put_function_scaling_config`.
        """
        fs = self._lmi_pool(function_name)
        version = self._scaling_version(fs, qualifier)
        assert fs.lmi is not None
        with fs.lock:
            applied, requested = fs.lmi.applied[version], fs.lmi.requested[version]

        def view(pair: tuple[int, int | None]) -> dict[str, int]:
            out = {"MinExecutionEnvironments": pair[0]}
            if pair[1] is not None:
                out["MaxExecutionEnvironments"] = pair[1]
            return out

        return {"FunctionArn": self.context.arn(fs.spec.name, version),
                "AppliedFunctionScalingConfig": view(applied),
                "RequestedFunctionScalingConfig": view(requested)}

    def capacity_provider_config(self, function_name: str) -> dict[str, Any] | None:
        """The function's ``CapacityProviderConfig`` as ``GetFunctionConfiguration`` shows it
        (None when it is not on LMI)."""
        fs = self.context.state(function_name)
        if fs.lmi is None:
            return None
        config = fs.lmi.config
        return {"LambdaManagedInstancesCapacityProviderConfig": {
            "CapacityProviderArn": config.capacity_provider_arn,
            "PerExecutionEnvironmentMaxConcurrency": fs.lmi.per_environment,
            "ExecutionEnvironmentMemoryGiBPerVCpu": config.memory_gib_per_vcpu}}

    # ---- usage -----------------------------------------------------------------------------
    def managed_instances_usage(self, function_name: str) -> dict[str, Any]:
        """What the function's LMI capacity did and cost so far.

        Returns
        -------
        dict
            ``environments`` (live, per version), ``instances`` (live, on its provider),
            ``instance_seconds`` (billed clock seconds per instance type, the provider's, from
            each launch to its end), ``throttles`` (this function's 429s), ``scale_out_blocked``
            (environments the vCPU limit refused, provider-wide), ``cost_usd`` (instance time x
            (EC2 price + management fee) from ``warmers/prices.json``, None when it has no
            price for the type; requests not included).
        """
        fs = self._lmi_pool(function_name)
        lmi = fs.lmi
        assert lmi is not None
        now = self.context.clock.time()
        with fs.lock:
            environments = {v: len(lmi.live(v)) for v in lmi.requested}
            throttles = lmi.throttles
        seconds = lmi.provider.instance_seconds(now)
        return {"environments": environments, "instances": len(lmi.provider.live()),
                "instance_seconds": seconds, "throttles": throttles,
                "scale_out_blocked": lmi.provider.scale_out_blocked,
                "cost_usd": _instance_cost_usd(seconds)}


def _instance_cost_usd(seconds: dict[str, float]) -> float | None:
    """Instance time at the EC2 on-demand price plus LMI's management fee (``warmers/prices.json``;
    unverified transcriptions, marked so there). None when a type has no price."""
    from warmers.lmi import MANAGEMENT_FEE_ITEM, instance_price_item
    from warmers.pricing import load_prices

    table = load_prices()
    try:
        fee = table.price(MANAGEMENT_FEE_ITEM).usd
        return sum(s / 3600.0 * table.price(instance_price_item(t)).usd * (1.0 + fee)
                   for t, s in seconds.items())
    except KeyError:
        return None


def _check_spec(spec: FunctionSpec, config: ManagedInstancesConfig) -> None:
    """Raise ValueError for a function LMI (or its emulation) cannot run."""
    if spec.memory_mb < MIN_MEMORY_MB:
        raise ValueError(f"function {spec.name!r}: memory_mb {spec.memory_mb} is below LMI's "
                         f"minimum of {MIN_MEMORY_MB}")
    if spec.snap_start or any(a.provisioned_concurrency for a in spec.aliases):
        raise ValueError(f"function {spec.name!r}: SnapStart and provisioned concurrency do not "
                         "apply to Lambda Managed Instances")
    if spec.extensions:
        raise ValueError(f"function {spec.name!r}: external extensions are not emulated on LMI")
    if not any(v != "$LATEST" for v in spec.versions):
        raise ValueError(f"function {spec.name!r}: LMI runs published versions: give it an alias")
