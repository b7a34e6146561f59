"""The local Lambda service: :class:`Emulator` (invoke; the layers below it do the rest).

An invocation: resolve the function and qualifier, validate the payload, acquire an
environment from the pool (:mod:`.pool`; a cold one runs its init phase, :mod:`.environment`),
hand the event to its runtime through its Runtime API (:mod:`.runtime_api`), return the answer
as soon as the runtime posts it, and release the environment when the invoke phase has ended
(the runtime and every extension wait on ``next``): at once, or from a thread when extensions
work after the response. Listeners then get an :class:`~.records.InvocationLog`.

A runtime may answer in the Runtime API's streaming mode: :meth:`Emulator.invoke_stream`
hands each piece to the caller as it arrives (:class:`~.stream.InvocationStream`), and
:meth:`Emulator.invoke` collects the stream (at most 6 MB, as a buffered answer: a longer
stream is cut there and fails with ``Function.ResponseSizeTooLarge``). Either way
the function timeout bounds the whole stream, and the environment stays busy until the stream
has ended and the runtime asks for its next event.

References
----------
https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html ("Invoke phase")
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import IO, Any, Self

from infra.local.clock import Clock
from infra.local.emulator.concurrency import Concurrency
from infra.local.emulator.config import (
    MAX_ASYNC_PAYLOAD_BYTES,
    MAX_SYNC_PAYLOAD_BYTES,
    EmulatorConfig,
    ManagedInstancesConfig,
)
from infra.local.emulator.core import EmulatorContext, FunctionPool
from infra.local.emulator.environment import (
    EmulatedEnvironment,
    InitFailed,
    ShutdownReason,
    SnapshotTemplate,
    max_memory_used_mb,
)
from infra.local.emulator.lmi import ManagedInstances
from infra.local.emulator.pool import EnvironmentPool
from infra.local.emulator.processes import Processes
from infra.local.emulator.records import (
    InvocationListener,
    InvocationLog,
    InvokeResult,
    Report,
    billed_report,
)
from infra.local.emulator.runtime_api import MAX_RESPONSE_BYTES, Invocation
from infra.local.emulator.stream import InvocationStream, error_of
from infra.local.errors import (
    InvalidParameterValueException,
    InvalidRequestContentException,
    RequestTooLargeException,
    ResourceNotFoundException,
    ServiceException,
    TooManyRequestsException,
)
from infra.local.metrics import MetricsSink
from infra.local.spec import FunctionSpec

_LOG = logging.getLogger("warmstart.local.emulator")
#: Real seconds the answer waits, once the runtime asked for its next event, for extensions to
#: do the same (one with no work after the response needs ~1 ms); longer work goes on after
#: the answer (the invoke phase then ends in the background).
EXTENSIONS_GRACE_S = 0.005
#: Real seconds to tell, after a runtime's connection ended mid-stream, a runtime that goes on
#: (it asks for its next event within ms) from one that is exiting (a crash).
CUT_STREAM_GRACE_S = 1.0


class Emulator:
    """The local Lambda service.

    Parameters
    ----------
    config : EmulatorConfig
        Settings (idle timeout, limits, allocation delay, ...).
    clock : Clock, optional
        Time source; a :class:`~infra.local.clock.ScaledClock` speeds up idle timeouts and
        allocation delays for replays.
    metrics : MetricsSink, optional
        Where AWS/Lambda metrics go (default: nowhere).
    log_stream : file, optional
        Where environments' stdout/stderr and the REPORT lines go (default: this stderr).

    Attributes
    ----------
    context : EmulatorContext
        What the parts share: settings, clock, metrics, log, the deployed functions.
    processes : Processes
        Environments' processes: spawn, init phase, SnapStart templates.
    concurrency : Concurrency
        The concurrency limit (throttles), reserved and provisioned concurrency.
    pool : EnvironmentPool
        Acquire, release, reclaim environments.
    managed_instances : ManagedInstances
        Lambda Managed Instances: capacity, scaling, scaling-config API, usage.

    Examples
    --------
    >>> with Emulator(EmulatorConfig()) as emu:                       # doctest: +SKIP
    ...     emu.add_function(FunctionSpec(name="echo", handler="echo.handler", code_dir=d))
    ...     emu.invoke("echo", b'{"a": 1}').payload
    """

    def __init__(self, config: EmulatorConfig | None = None, *, clock: Clock | None = None,
                 metrics: MetricsSink | None = None, log_stream: IO[str] | None = None) -> None:
        self.context = context = EmulatorContext(config, clock=clock, metrics=metrics,
                                                 log_stream=log_stream)
        self.config, self.clock, self.metrics = context.config, context.clock, context.metrics
        #: variables added to every new environment (the stack adds local endpoints here)
        self.extra_env = context.extra_env
        self.processes = Processes(context)
        self.concurrency = Concurrency(context, self.processes)
        self.pool = EnvironmentPool(context, self.concurrency)
        self.managed_instances = ManagedInstances(context, self.processes, self.concurrency)
        self._listeners: tuple[InvocationListener, ...] = ()
        self._reaper = threading.Thread(target=self.pool.reap_loop, name="idle-reclaim", daemon=True)
        self._reaper.start()

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every execution environment and template process."""
        self.context.stopped.set()
        envs: list[EmulatedEnvironment] = []
        templates: list[SnapshotTemplate] = []
        for fs in self.context.pools():
            with fs.lock:
                envs += fs.envs
                templates += fs.templates.values()
                fs.envs, fs.templates = [], {}
                for cfg in fs.pc.values():
                    cfg.generation += 1
        # every environment's SHUTDOWN phase at once (each is bounded by its deadline)
        enders = [threading.Thread(target=env.kill, name=f"end-{env.id[:8]}") for env in envs]
        for thread in enders:
            thread.start()
        for thread in enders:
            thread.join(timeout=10)
        for template in templates:
            template.stop()
        self.managed_instances.stop()
        self.context.join(timeout_s=5)
        self._reaper.join(timeout=5)

    def add_listener(self, listener: InvocationListener) -> None:
        """Call ``listener(record)`` after every invocation (synchronous and ``Event``, throttled
        ones too) with an :class:`InvocationLog`.

        Listeners run when the invocation's invoke phase has ended (after extensions' work
        after the response, so the REPORT numbers are final) and its environment is released:
        on the invoking thread, or on the thread that waited for that phase. They must be
        quick. An exception in a listener is logged and never reaches the caller.
        """
        with self.context.lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: InvocationListener) -> None:
        """Stop calling ``listener`` (no error when it is not registered)."""
        with self.context.lock:
            self._listeners = tuple(x for x in self._listeners if x != listener)

    def _notify(self, record: InvocationLog) -> None:
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:  # noqa: BLE001 - a listener never breaks an invocation
                _LOG.exception("invocation listener %r failed", listener)

    def add_function(self, spec: FunctionSpec, *, wait_provisioned: bool = True,
                     managed_instances: ManagedInstancesConfig | None = None) -> None:
        """Deploy a function: create SnapStart snapshots and allocate the aliases' PC now.

        Like a CloudFormation deploy, provisioned concurrency set on an alias by the spec is
        allocated without the allocation delay, and (by default) this call waits until it is
        ``READY``. With ``managed_instances`` the function runs on Lambda Managed Instances
        (:mod:`infra.local.emulator.lmi`): each published version starts its minimum execution
        environments now, and this call waits until they are initialised.

        Raises
        ------
        ValueError
            If a function with this name exists, or LMI cannot run it (memory below 2048 MB,
            SnapStart, provisioned concurrency, external extensions, no published version).
        RuntimeError
            If a SnapStart snapshot init fails, or the minimum LMI environments' init fails
            (its error message is included); the function is not deployed.
        """
        functions = self.context.functions
        with self.context.lock:
            if spec.name in functions:
                raise ValueError(f"function {spec.name!r} already exists")
            fs = FunctionPool(spec)
            functions[spec.name] = fs
        if managed_instances is not None:
            try:
                self.managed_instances.deploy(fs, managed_instances, wait_provisioned)
            except (ValueError, RuntimeError):  # RuntimeError: its minimum failed the init
                with self.context.lock:
                    del functions[spec.name]
                with fs.lock:
                    left, fs.envs = list(fs.envs), []
                for env in left:
                    env.kill()
                self.managed_instances.prune(fs)
                raise
            return
        if spec.snap_start:
            try:
                for version in spec.versions:
                    if version != "$LATEST":
                        fs.templates[version] = self.processes.start_template(fs, version)
            except BaseException:
                with self.context.lock:
                    del functions[spec.name]
                for template in fs.templates.values():
                    template.stop()
                raise
        for alias in spec.aliases:
            if alias.provisioned_concurrency:
                self.concurrency.set_pc(fs, alias.name, alias.provisioned_concurrency, delay_s=0.0)
        if wait_provisioned:
            for alias in spec.aliases:
                if alias.provisioned_concurrency:
                    self.wait_provisioned_ready(spec.name, alias.name)

    # ---- what the parts answer (the public API, unchanged) --------------------------------
    def functions(self) -> list[FunctionSpec]:
        """The deployed functions' specs."""
        return self.context.specs()

    def arn(self, function_name: str, qualifier: str | None = None) -> str:
        """The function's ARN (``:QUALIFIER`` appended when given)."""
        return self.context.arn(function_name, qualifier)

    def function_state(self, function_name: str) -> FunctionPool:
        """The function's state (spec, aliases, environments, LMI state). Raises
        ResourceNotFoundException."""
        return self.context.state(function_name)

    def environments(self, function_name: str) -> list[dict[str, Any]]:
        """See :meth:`EnvironmentPool.environments`."""
        return self.pool.environments(function_name)

    def process_ids(self) -> list[int]:
        """See :meth:`EnvironmentPool.process_ids`."""
        return self.pool.process_ids()

    def reclaim_idle(self) -> int:
        """See :meth:`EnvironmentPool.reclaim_idle`."""
        return self.pool.reclaim_idle()

    def snapshot_init_ms(self, function_name: str, version: str = "1") -> float:
        """Init duration (ms) of the SnapStart snapshot of a version (paid at publish time)."""
        return self.context.state(function_name).templates[version].init_ms

    def put_function_concurrency(self, function_name: str, reserved: int) -> int:
        """See :meth:`Concurrency.put_function_concurrency`."""
        return self.concurrency.put_function_concurrency(function_name, reserved)

    def get_function_concurrency(self, function_name: str) -> int | None:
        """The function's reserved concurrency, None when it has none."""
        return self.concurrency.get_function_concurrency(function_name)

    def delete_function_concurrency(self, function_name: str) -> None:
        """Remove the function's reserved concurrency."""
        self.concurrency.delete_function_concurrency(function_name)

    def account_settings(self) -> dict[str, Any]:
        """See :meth:`Concurrency.account_settings`."""
        return self.concurrency.account_settings()

    def put_provisioned_concurrency(self, function_name: str, qualifier: str | None,
                                    executions: int) -> dict[str, Any]:
        """See :meth:`Concurrency.put_provisioned_concurrency`."""
        return self.concurrency.put_provisioned_concurrency(function_name, qualifier, executions)

    def get_provisioned_concurrency(self, function_name: str, qualifier: str | None) -> dict[str, Any]:
        """See :meth:`Concurrency.get_provisioned_concurrency`."""
        return self.concurrency.get_provisioned_concurrency(function_name, qualifier)

    def list_provisioned_concurrency(self, function_name: str) -> list[dict[str, Any]]:
        """See :meth:`Concurrency.list_provisioned_concurrency`."""
        return self.concurrency.list_provisioned_concurrency(function_name)

    def delete_provisioned_concurrency(self, function_name: str, qualifier: str | None) -> None:
        """See :meth:`Concurrency.delete_provisioned_concurrency`."""
        self.concurrency.delete_provisioned_concurrency(function_name, qualifier)

    def wait_provisioned_ready(self, function_name: str, qualifier: str,
                               timeout_s: float = 300.0) -> dict[str, Any]:
        """See :meth:`Concurrency.wait_provisioned_ready`."""
        return self.concurrency.wait_provisioned_ready(function_name, qualifier, timeout_s)

    def put_function_scaling_config(self, function_name: str, qualifier: str | None,
                                    scaling: dict[str, Any] | None) -> dict[str, Any]:
        """See :meth:`ManagedInstances.put_function_scaling_config`."""
        return self.managed_instances.put_function_scaling_config(function_name, qualifier, scaling)

    def get_function_scaling_config(self, function_name: str, qualifier: str | None) -> dict[str, Any]:
        """See :meth:`ManagedInstances.get_function_scaling_config`."""
        return self.managed_instances.get_function_scaling_config(function_name, qualifier)

    def capacity_provider_config(self, function_name: str) -> dict[str, Any] | None:
        """See :meth:`ManagedInstances.capacity_provider_config`."""
        return self.managed_instances.capacity_provider_config(function_name)

    def scale_managed_instances(self, function_name: str | None = None) -> dict[str, dict[str, Any]]:
        """See :meth:`ManagedInstances.scale_managed_instances`."""
        return self.managed_instances.scale_managed_instances(function_name)

    def wait_managed_instances_ready(self, function_name: str, timeout_s: float = 60.0) -> None:
        """See :meth:`ManagedInstances.wait_managed_instances_ready`."""
        self.managed_instances.wait_managed_instances_ready(function_name, timeout_s)

    def managed_instances_usage(self, function_name: str) -> dict[str, Any]:
        """See :meth:`ManagedInstances.managed_instances_usage`."""
        return self.managed_instances.managed_instances_usage(function_name)

    # ---- resolution and validation -------------------------------------------------------
    def resolve(self, function_name: str, qualifier: str | None) -> tuple[FunctionPool, str, str | None]:
        """-> (function state, version, alias or None) of a name, ``name:qualifier`` or ARN and
        an optional qualifier. Raises ResourceNotFoundException."""
        if qualifier is None and (function_name.startswith("arn:") and function_name.count(":") >= 7):
            qualifier = function_name.split(":")[7]
        elif qualifier is None and not function_name.startswith("arn:") and ":" in function_name:
            qualifier = function_name.split(":", 1)[1]
        fs = self.context.state(function_name)
        if qualifier in (None, "", "$LATEST"):
            return fs, "$LATEST", None
        assert qualifier is not None
        if qualifier in fs.aliases:
            return fs, fs.aliases[qualifier], qualifier
        if qualifier in fs.spec.versions:
            return fs, qualifier, None
        raise ResourceNotFoundException(f"Function not found: {self.arn(fs.spec.name, qualifier)}")

    @staticmethod
    def _event_text(payload: bytes | None) -> str:
        if not payload:
            return "{}"
        try:
            text = payload.decode("utf-8")
            json.loads(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidRequestContentException(
                f"Could not parse request body into json: Could not parse payload into json: {exc}"
            ) from exc
        return text

    # ---- invoke --------------------------------------------------------------------------
    def invoke(self, function_name: str, payload: bytes | None = None, *, qualifier: str | None = None,
               invocation_type: str = "RequestResponse", client_context: str | None = None) -> InvokeResult:
        """Invoke a function the way the Lambda Invoke API does.

        Parameters
        ----------
        function_name : str
            Name, ``name:qualifier`` or ARN.
        payload : bytes
            JSON event (empty = ``{}``).
        qualifier : str, optional
            Alias or version; ``None`` = ``$LATEST``.
        invocation_type : {"RequestResponse", "Event", "DryRun"}
        client_context : str, optional
            Base64 JSON (``X-Amz-Client-Context``).

        Returns
        -------
        InvokeResult
            200 with the handler's result or an ``Unhandled`` function error; 202 for Event;
            204 for DryRun.

        Raises
        ------
        ResourceNotFoundException
            Unknown function, alias or version.
        InvalidRequestContentException
            The payload is not JSON.
        TooManyRequestsException
            The function is at its concurrency limit.
        InvalidParameterValueException, RequestTooLargeException
            Bad invocation type, client context or payload size.
        ServiceException
            The emulator has been stopped.
        """
        fs, version, alias, event, cc = self._prepare(function_name, payload, qualifier,
                                                      client_context, invocation_type)
        if invocation_type == "DryRun":
            return InvokeResult(204, b"", uuid.uuid4().hex, version)
        if invocation_type == "Event":
            request_id = str(uuid.uuid4())
            thread = threading.Thread(target=self._invoke_async, daemon=True,
                                      args=(fs, version, alias, event, cc, request_id))
            self.context.track(thread)
            return InvokeResult(202, b"", request_id, version)
        if invocation_type != "RequestResponse":
            raise InvalidParameterValueException(
                f"Invalid InvocationType {invocation_type!r}: use RequestResponse, Event or DryRun")
        return self._invoke_sync(fs, version, alias, event, cc, str(uuid.uuid4()),
                                 "RequestResponse")

    def _prepare(self, function_name: str, payload: bytes | None, qualifier: str | None,
                 client_context: str | None, invocation_type: str,
                 ) -> tuple[FunctionPool, str, str | None, str, dict[str, Any] | None]:
        """Resolve and validate an Invoke: -> (function, version, alias, event, client context)."""
        if self.context.stopped.is_set():
            raise ServiceException("the local Lambda service is stopped")
        fs, version, alias = self.resolve(function_name, qualifier)
        limit = MAX_ASYNC_PAYLOAD_BYTES if invocation_type == "Event" else MAX_SYNC_PAYLOAD_BYTES
        if payload and len(payload) > limit:
            raise RequestTooLargeException(
                f"Request must be smaller than {limit} bytes for the InvokeFunction operation")
        return fs, version, alias, self._event_text(payload), self._client_context(client_context)

    def invoke_stream(self, function_name: str, payload: bytes | None = None, *,
                      qualifier: str | None = None, client_context: str | None = None) -> InvocationStream:
        """Invoke a function and read its answer as it comes (``InvokeWithResponseStream``).

        Parameters
        ----------
        function_name, payload, qualifier, client_context
            As :meth:`invoke` (a ``RequestResponse`` invocation).

        Returns
        -------
        InvocationStream
            Iterate it for the answer's bytes (a streamed answer's prelude included), each as
            soon as the runtime has posted it; a buffered answer comes as one chunk. After the
            iteration, ``result`` is the :class:`InvokeResult` and ``error`` is None or
            ``(error code, error object)``. ``close()`` stops reading; the function goes on
            until its stream ends (the environment stays busy until then).

        Raises
        ------
        ResourceNotFoundException, InvalidRequestContentException, TooManyRequestsException,
        InvalidParameterValueException, RequestTooLargeException, ServiceException
            As :meth:`invoke`, before the stream starts.

        References
        ----------
        https://docs.aws.amazon.com/lambda/latest/api/API_InvokeWithResponseStream.html
        """
        fs, version, alias, event, cc = self._prepare(function_name, payload, qualifier,
                                                      client_context, "RequestResponse")
        request_id = str(uuid.uuid4())
        stream = InvocationStream(request_id, version)
        call, env, cold, spillover = self._admit(fs, version, alias, event, cc, request_id,
                                                 "RequestResponse", sink=stream)
        thread = threading.Thread(target=self._drive_stream, name=f"stream-{request_id[:8]}",
                                  args=(call, env, cold, spillover, stream), daemon=True)
        self.context.track(thread)
        return stream

    def _drive_stream(self, call: _Call, env: EmulatedEnvironment, cold: bool, spillover: bool,
                      stream: InvocationStream) -> None:
        try:
            result = self._serve(call, env, cold, spillover)
            error = call.stream_error or error_of(result)
        except Exception as exc:  # noqa: BLE001 - the caller learns it from the stream
            _LOG.exception("streamed invocation %s failed in the emulator", call.request_id)
            error = ("ServiceException", {"errorType": "ServiceException", "errorMessage": str(exc)})
            result = InvokeResult(200, json.dumps(error[1]).encode(), call.request_id, call.version,
                                  function_error="Unhandled", environment_id=env.id)
        stream.finish(result, error)

    @staticmethod
    def _client_context(value: str | None) -> dict[str, Any] | None:
        if not value:
            return None
        try:
            data = json.loads(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequestContentException(
                "Client context must be a valid Base64-encoded JSON object.") from exc
        if not isinstance(data, dict):
            raise InvalidRequestContentException("Client context must be a JSON object.")
        return data

    def _invoke_async(self, fs: FunctionPool, version: str, alias: str | None, event: str,
                      cc: dict[str, Any] | None, request_id: str) -> None:
        delay_s = 1.0
        for _ in range(12):  # throttled events are retried, as Lambda's event queue does
            if self.context.stopped.is_set():
                return
            try:
                self._invoke_sync(fs, version, alias, event, cc, request_id, "Event")
                return
            except TooManyRequestsException:
                self.clock.wait(self.context.stopped, delay_s)
                delay_s = min(delay_s * 2, 60.0)
        _LOG.error("event %s for %s dropped after repeated throttling", request_id, fs.spec.name)

    def _invoke_sync(self, fs: FunctionPool, version: str, alias: str | None, event: str,
                     cc: dict[str, Any] | None, request_id: str,
                     invocation_type: str) -> InvokeResult:
        call, env, cold, spillover = self._admit(fs, version, alias, event, cc, request_id,
                                                 invocation_type)
        return self._serve(call, env, cold, spillover)

    def _admit(self, fs: FunctionPool, version: str, alias: str | None, event: str,
               cc: dict[str, Any] | None, request_id: str, invocation_type: str,
               sink: InvocationStream | None = None) -> tuple[_Call, EmulatedEnvironment, bool, bool]:
        """Acquire an environment for the invocation: -> (call, environment, cold, spillover).
        Raises TooManyRequestsException (the listeners are told)."""
        call = _Call(fs, version, alias, event, cc, request_id, invocation_type,
                     self.clock.time(), self.pool.resource(fs, version, alias), sink=sink)
        name = fs.spec.name
        try:
            if fs.lmi is not None:  # no cold start on the request path, no Lambda concurrency limit
                env, cold, spillover = self.managed_instances.acquire(fs, version, call.resource), False, False
            else:
                env, cold, spillover = self.pool.acquire(fs, version, alias, call.resource)
        except TooManyRequestsException as exc:
            self._notify(InvocationLog(name, call.qualifier, version, request_id,
                                       invocation_type, call.t_s, event, error_type=exc.error_type))
            raise
        self.metrics.record("Invocations", 1, name, call.resource)
        return call, env, cold, spillover

    def _serve(self, call: _Call, env: EmulatedEnvironment, cold: bool, spillover: bool) -> InvokeResult:
        """The init phase of a cold environment, then the invocation (:meth:`_run`)."""
        fs, version, request_id = call.fs, call.version, call.request_id
        try:
            if cold:
                try:
                    self.processes.initialize(fs, env)
                except InitFailed as exc:
                    body = dict(exc.body, requestId=request_id)
                    result = InvokeResult(200, json.dumps(body).encode(), request_id, version,
                                          function_error="Unhandled", environment_id=env.id,
                                          init_type=env.init_type, cold_start=True, spillover=spillover)
                    self._finish(call, env, result, dead=True, reason="failure")
                    return result
                with fs.lock:
                    env.state = "busy"
            return self._run(call, env, cold, spillover)
        except BaseException:
            if not call.finished:  # never leave an environment in an unknown state reusable
                call.finished = True
                self.pool.release(fs, env, call.resource, True)
            raise

    @staticmethod
    def _report(call: _Call, env: EmulatedEnvironment, duration_ms: float, max_mem: int,
                post_ms: float | None, status: str = "success") -> Report:
        """The invocation's REPORT numbers; its init (or restore) counted on the first one."""
        return billed_report(
            call.request_id, duration_ms, memory_size_mb=call.fs.spec.memory_mb,
            max_memory_used_mb=max_mem,
            init_duration_ms=env.init_duration_ms if call.report_init and env.init_type == "on-demand" else None,
            restore_duration_ms=env.restore_duration_ms if call.report_init and env.init_type == "snap-start" else None,
            post_runtime_extensions_duration_ms=post_ms, status=status)

    def _run(self, call: _Call, env: EmulatedEnvironment, cold: bool, spillover: bool) -> InvokeResult:
        """Hand the invocation to the environment's runtime; return when it has answered.

        The invoke phase goes on until the runtime and every extension wait on ``next``; when
        that is not the case within ``post_response_grace_s`` of the answer, the answer is
        returned at once and a thread waits for the phase to end (within the function timeout)
        before the environment is released and the final REPORT is written.
        """
        spec = call.fs.spec
        api = env.api
        assert api is not None
        qualifier = call.alias or env.version
        timeout_s = spec.timeout_s
        call.report_init = env.report_init_pending
        env.report_init_pending = False
        started = time.perf_counter()
        deadline = started + timeout_s
        inv = Invocation(
            call.request_id, call.event.encode(), int((time.time() + timeout_s) * 1000),
            self.context.arn(spec.name, qualifier if qualifier != "$LATEST" else None),
            client_context=json.dumps(call.cc) if call.cc else None,
            trace_id=f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0")

        inv.on_chunk = call.sink.push if call.sink is not None else None
        # a buffered caller takes what a buffered answer may hold: a longer stream is cut there
        inv.max_stream_bytes = MAX_RESPONSE_BYTES if call.sink is None else None

        def answer(payload: bytes, function_error: str | None, report: Report) -> InvokeResult:
            first = inv.first_byte_at or None
            return InvokeResult(200, payload, call.request_id, env.version,
                                function_error=function_error, report=report,
                                environment_id=env.id, init_type=env.init_type, cold_start=cold,
                                spillover=spillover, streamed=inv.streaming,
                                response_bytes=inv.stream_bytes if inv.streaming else len(inv.body),
                                time_to_first_byte_ms=None if first is None else (first - call.arrived) * 1000.0,
                                time_to_last_byte_ms=None if first is None
                                else (inv.last_byte_at - call.arrived) * 1000.0)

        def failed() -> InvokeResult:
            """No answer (or no end of the stream) by the deadline, or the process ended: the
            invocation fails and the environment is reset."""
            timed_out = env.alive() and time.perf_counter() >= deadline
            if timed_out:
                stamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
                error_type, text = "Sandbox.Timedout", (
                    f"{stamp.replace('+00:00', 'Z')} {call.request_id} "
                    f"Task timed out after {timeout_s:.2f} seconds")
                duration_ms = timeout_s * 1000.0
            else:
                error_type = "Runtime.ExitError"
                text = f"RequestId: {call.request_id} Error: {env.exit_reason()}"
                duration_ms = (time.perf_counter() - started) * 1000.0
            error = {"errorMessage": text, "errorType": error_type}
            if inv.streaming:  # later pieces (until the environment ends) are not delivered
                api.stream_end(inv, error=(error_type, error))
                call.stream_error = (error_type, error)
            report = self._report(call, env, duration_ms, 0, 0.0, "timeout" if timed_out else "error")
            result = answer(json.dumps(error).encode(), "Unhandled", report)
            if timed_out and env.init_type == "lambda-managed-instances" and not inv.streaming:
                # LMI does not end the environment on a timeout: the code runs on, and the
                # process takes no other request until it asks for its next event
                # (lambda-managed-instances-execution-environment.html, "Invocation timeouts")
                self.context.track(threading.Thread(target=self._after_lmi_timeout, daemon=True,
                                             args=(call, env, result), name=f"lmi-late-{env.id[:8]}"))
                return result
            self._finish(call, env, result, dead=True, reason="timeout" if timed_out else "failure")
            return result

        api.start_invocation(inv)
        if not api.wait_answer(deadline, env.alive):
            return failed()
        if inv.streaming and not api.wait_stream_end(deadline, env.alive):
            return failed()
        if inv.stream_cut:
            # the connection ended mid-stream: a runtime that goes on asks for its next event,
            # one that crashed is gone (Runtime.ExitError, the environment reset)
            api.wait_runtime_next(min(deadline, time.perf_counter() + CUT_STREAM_GRACE_S), env.alive)
            if not env.alive():
                return failed()
        response_ms = (inv.answered_at - started) * 1000.0
        max_mem = max_memory_used_mb(env.pids())
        ok = inv.outcome == "response"
        payload = bytes(inv.body)
        if inv.streaming and inv.stream_error is not None:
            call.stream_error = inv.stream_error
            ok, payload = False, json.dumps(inv.stream_error[1]).encode()
        if max_mem > spec.memory_mb:
            # Lambda kills an environment that exceeds its memory size. The emulator sees the
            # peak after the answer, so it discards the answer and the environment then.
            payload = json.dumps({
                "errorMessage": f"RequestId: {call.request_id} Error: Runtime exited with error: "
                                "signal: killed",
                "errorType": "Runtime.OutOfMemory"}).encode()
            report = self._report(call, env, response_ms, max_mem, 0.0, "error")
            result = answer(payload, "Unhandled", report)
            self._finish(call, env, result, dead=True, reason="failure")
            return result
        if ok and not inv.streaming and call.sink is not None:
            call.sink.push(payload, streamed=False)  # a buffered answer to a streaming caller: one chunk
        # the runtime asks for the next event right after its answer; extensions may go on
        api.wait_runtime_next(min(deadline, inv.answered_at + self.config.post_response_grace_s),
                              env.alive)
        # an extension that has no work after the response calls next a moment after the
        # runtime: a few ms so that the environment is idle for the caller's next request
        ended = api.wait_invoke_done(time.perf_counter() + EXTENSIONS_GRACE_S, env.alive)
        function_error = None if ok else "Unhandled"
        if ended is not None:
            report = self._report(call, env, (ended - started) * 1000.0, max_mem,
                                  max(0.0, (ended - inv.answered_at) * 1000.0))
            result = answer(payload, function_error, report)
            self._finish(call, env, result, dead=api.fatal_error is not None, reason="failure")
            return result
        # extensions still at work after the response: answer now, end the phase later
        provisional = self._report(call, env, response_ms, max_mem, None)
        result = answer(payload, function_error, provisional)
        thread = threading.Thread(target=self._end_invoke_phase, name=f"post-response-{env.id[:8]}",
                                  args=(call, env, result, inv, started, deadline), daemon=True)
        self.context.track(thread)
        return result

    def _after_lmi_timeout(self, call: _Call, env: EmulatedEnvironment, result: InvokeResult) -> None:
        """An LMI runtime process whose invocation timed out: released (idle again) once it
        asks for its next event; ended if it has not within ten more function timeouts, or exits."""
        api = env.api
        assert api is not None
        ended = api.wait_invoke_done(time.perf_counter() + 10 * call.fs.spec.timeout_s, env.alive)
        self._finish(call, env, result, dead=ended is None, reason="timeout")

    def _end_invoke_phase(self, call: _Call, env: EmulatedEnvironment, result: InvokeResult,
                          inv: Invocation, started: float, deadline: float) -> None:
        """Wait (after the answer went out) until the runtime and every extension wait on
        ``next``, at most until the function timeout; then release the environment."""
        api = env.api
        assert api is not None
        ended = api.wait_invoke_done(deadline, env.alive)
        max_mem = max_memory_used_mb(env.pids())
        spec = call.fs.spec
        if ended is None:
            late = api.late_extensions()
            timed_out = env.alive()
            if timed_out:
                duration_ms = spec.timeout_s * 1000.0
                self.context.log(f"environment {env.id[:8]} of {spec.name}: extension(s) {late} still at "
                          f"work at the function timeout ({spec.timeout_s:.2f} s) after the answer "
                          f"to {call.request_id}: Extension.TimedOut, environment reset\n")
            else:
                duration_ms = (time.perf_counter() - started) * 1000.0
                self.context.log(f"environment {env.id[:8]} of {spec.name} ended after the answer to "
                          f"{call.request_id}: {env.exit_reason()}\n")
            report = self._report(call, env, duration_ms, max_mem,
                                  duration_ms - (inv.answered_at - started) * 1000.0,
                                  "timeout" if timed_out else "error")
            self._finish(call, env, replace(result, report=report), dead=True,
                         reason="timeout" if timed_out else "failure")
            return
        report = self._report(call, env, (ended - started) * 1000.0, max_mem,
                              max(0.0, (ended - inv.answered_at) * 1000.0))
        self._finish(call, env, replace(result, report=report), dead=api.fatal_error is not None,
                     reason="failure")

    def _finish(self, call: _Call, env: EmulatedEnvironment, result: InvokeResult, *, dead: bool,
                reason: ShutdownReason) -> None:
        """The invoke phase has ended: write START/END/REPORT, record metrics, release the
        environment (ended when ``dead``), tell the listeners."""
        if call.finished:
            return
        call.finished = True
        name = call.fs.spec.name
        report = result.report
        if result.function_error:
            self.metrics.record("Errors", 1, name, call.resource)
        if report is not None:
            env.invocations += 1
            # Duration in clock milliseconds, like the per-minute counts: under a time
            # scale, Invocations x Duration must give the emulated load (Little's law)
            scale = getattr(self.clock, "time_scale", 1.0)
            self.metrics.record("Duration", report.duration_ms * scale, name, call.resource)
            if report.post_runtime_extensions_duration_ms:
                self.metrics.record("PostRuntimeExtensionsDuration",
                                    report.post_runtime_extensions_duration_ms * scale, name,
                                    call.resource)
            self.context.log(f"START RequestId: {call.request_id} Version: {env.version}\n"
                      f"END RequestId: {call.request_id}\n{report.line()}\n")
        if dead and env.api is not None and env.api.fatal_error is not None:
            self.context.log(f"environment {env.id[:8]} of {name}: an extension reported "
                      f"{env.api.fatal_error.get('errorType')}: environment reset\n")
        elif dead:
            self.context.log(f"environment {env.id[:8]} of {name} ended: {result.payload.decode(errors='replace')}\n")
        self.pool.release(call.fs, env, call.resource, dead, reason)
        if self._listeners:
            self._notify(InvocationLog(
                name, call.qualifier, result.executed_version, call.request_id, call.invocation_type,
                call.t_s, call.event, result.payload, report, result.environment_id,
                result.init_type, result.cold_start, result.spillover, result.function_error,
                streamed=result.streamed, response_bytes=result.response_bytes,
                time_to_first_byte_ms=result.time_to_first_byte_ms,
                time_to_last_byte_ms=result.time_to_last_byte_ms,
                stream_error=call.stream_error[0] if call.stream_error else None))


@dataclass
class _Call:
    """One invocation on its way through the emulator."""

    fs: FunctionPool
    version: str
    alias: str | None
    event: str
    cc: dict[str, Any] | None
    request_id: str
    invocation_type: str
    t_s: float
    resource: str | None
    report_init: bool = False
    finished: bool = False
    #: the streaming caller (:meth:`Emulator.invoke_stream`), None for a buffered one
    sink: InvocationStream | None = None
    #: time.perf_counter() when the invocation arrived
    arrived: float = field(default_factory=time.perf_counter)
    #: ``(error code, error object)`` a stream ended with
    stream_error: tuple[str, dict[str, Any]] | None = None

    @property
    def qualifier(self) -> str | None:
        return self.alias or (None if self.version == "$LATEST" else self.version)
