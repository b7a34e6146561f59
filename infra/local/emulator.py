"""A local Lambda service: real execution environments as Python processes.

Each execution environment is a child process running :mod:`infra.local.bootstrap`: it
imports the handler (the init phase, measured from process start to ready), then serves one
invocation at a time. The emulator scales from zero, reuses idle environments, reclaims them
after an idle timeout, throttles beyond the function's concurrency limit, keeps provisioned
environments for aliases, and restores SnapStart environments by forking an initialized
template process ("zygote") that ran the before-snapshot hooks. As on Lambda, an idle
environment is frozen (SIGSTOP to its process group) between invocations and thawed (SIGCONT)
before the next one or before it ends (``EmulatorConfig.freeze_idle``); templates never are.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html
https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any, Literal, Self

from infra.local import bootstrap as wire
from infra.local.clock import Clock, SystemClock
from infra.local.errors import (
    InvalidParameterValueException,
    InvalidRequestContentException,
    ProvisionedConcurrencyConfigNotFoundException,
    RequestTooLargeException,
    ResourceNotFoundException,
    ServiceException,
    TooManyRequestsException,
)
from infra.local.metrics import MetricsSink, NullMetrics
from infra.local.spec import FunctionSpec

InitType = Literal["on-demand", "provisioned-concurrency", "snap-start"]
EnvState = Literal["init", "idle", "busy", "dead"]
_LOG = logging.getLogger("warmstart.local.emulator")
BOOTSTRAP = Path(wire.__file__).resolve()
#: Synchronous invoke payload limit (6 MB). References: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
MAX_SYNC_PAYLOAD_BYTES = 6 * 1024 * 1024
#: Asynchronous (Event) payload limit (1 MB since 2025; was 256 KB).
MAX_ASYNC_PAYLOAD_BYTES = 1024 * 1024
#: Host variables passed to environments (the rest of the host environment is not).
DEFAULT_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "ORT_DISABLE_TELEMETRY",
                         "MPLCONFIGDIR", "PYTHONDONTWRITEBYTECODE", "TMPDIR")


@dataclass(frozen=True)
class EmulatorConfig:
    """Settings of the local Lambda service.

    Parameters
    ----------
    region : str
        Region in ARNs and ``AWS_REGION``.
    account_id : str
        Account in ARNs.
    idle_timeout_s : float
        Clock seconds an on-demand environment stays idle before it is reclaimed (AWS does not
        publish this; observed 5-15 minutes, default 600).
    account_concurrency_limit : int
        Concurrency limit of functions without reserved concurrency (AWS default 1000).
    pc_allocation_delay_s : float
        Clock seconds between a ``PutProvisionedConcurrencyConfig`` call and the start of
        allocation (AWS takes minutes; default 60).
    init_timeout_s : float
        Real seconds an on-demand init may take (Lambda: 10 s).
    prepaid_init_timeout_s : float
        Real seconds a provisioned or SnapStart (snapshot) init may take.
    python : str
        Interpreter for execution environments (default: this one).
    inherit_env : tuple of str
        Host environment variables passed through to environments.
    extra_env : Mapping[str, str]
        Variables added to every environment (e.g. ``AWS_ENDPOINT_URL`` of the moto server).
    reap_interval_s : float
        Real seconds between idle-reclaim sweeps.
    freeze_idle : bool
        Freeze an idle execution environment (SIGSTOP to its process group) once its first
        invocation returns, or once a provisioned environment's init phase ends, and thaw it
        (SIGCONT) just before the next invocation or before it is ended, as Lambda does: its
        background threads and processes make no progress between invocations. Default on;
        off only to compare with the optimistic never-frozen behaviour.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html (10 s init;
    the environment is frozen after the function and extensions complete)
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html (1000 default)
    """

    region: str = "us-east-1"
    account_id: str = "123456789012"
    idle_timeout_s: float = 600.0
    account_concurrency_limit: int = 1000
    pc_allocation_delay_s: float = 60.0
    init_timeout_s: float = 10.0
    prepaid_init_timeout_s: float = 120.0
    python: str = sys.executable
    inherit_env: tuple[str, ...] = DEFAULT_INHERITED_ENV
    extra_env: Mapping[str, str] = field(default_factory=dict)
    reap_interval_s: float = 1.0
    freeze_idle: bool = True

    def __post_init__(self) -> None:
        for name in ("idle_timeout_s", "init_timeout_s", "prepaid_init_timeout_s", "reap_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.pc_allocation_delay_s < 0:
            raise ValueError(f"pc_allocation_delay_s must be >= 0, got {self.pc_allocation_delay_s}")
        if self.account_concurrency_limit < 1:
            raise ValueError("account_concurrency_limit must be >= 1")


@dataclass(frozen=True)
class Report:
    """The numbers of Lambda's REPORT log line for one invocation."""

    request_id: str
    duration_ms: float
    billed_duration_ms: int
    memory_size_mb: int
    max_memory_used_mb: int
    init_duration_ms: float | None = None
    restore_duration_ms: float | None = None
    billed_restore_duration_ms: int | None = None

    def line(self) -> str:
        """The REPORT line as Lambda writes it to the function's log stream."""
        parts = [
            f"REPORT RequestId: {self.request_id}",
            f"Duration: {self.duration_ms:.2f} ms",
            f"Billed Duration: {self.billed_duration_ms} ms",
            f"Memory Size: {self.memory_size_mb} MB",
            f"Max Memory Used: {self.max_memory_used_mb} MB",
        ]
        if self.init_duration_ms is not None:
            parts.append(f"Init Duration: {self.init_duration_ms:.2f} ms")
        if self.restore_duration_ms is not None:
            parts.append(f"Restore Duration: {self.restore_duration_ms:.2f} ms")
            parts.append(f"Billed Restore Duration: {self.billed_restore_duration_ms} ms")
        return "\t".join(parts)


@dataclass(frozen=True)
class InvokeResult:
    """What one Invoke returned.

    ``function_error`` is ``"Unhandled"`` when the handler raised, timed out or its
    environment died; ``payload`` then holds ``errorMessage``/``errorType``/``stackTrace``.
    """

    status_code: int
    payload: bytes
    request_id: str
    executed_version: str
    function_error: str | None = None
    report: Report | None = None
    environment_id: str | None = None
    init_type: InitType | None = None
    cold_start: bool = False
    spillover: bool = False

    def log_tail(self) -> str:
        """Base64 of the START/END/REPORT lines (``X-Amz-Log-Result`` for ``LogType=Tail``)."""
        lines = [f"START RequestId: {self.request_id} Version: {self.executed_version}",
                 f"END RequestId: {self.request_id}"]
        if self.report is not None:
            lines.append(self.report.line())
        return base64.b64encode(("\n".join(lines) + "\n").encode()).decode()


@dataclass(frozen=True)
class InvocationRecord:
    """One invocation as the emulator saw it, given to every listener (:meth:`Emulator.add_listener`).

    Attributes
    ----------
    function_name : str
    qualifier : str or None
        The alias invoked, else the version (``None`` for ``$LATEST``).
    version : str
        The version that ran (``ExecutedVersion``).
    request_id : str
        Lambda's request id (the REPORT line's ``RequestId``).
    invocation_type : str
        ``RequestResponse`` or ``Event``.
    t_s : float
        Emulator clock (epoch seconds, scaled in replays) when the invocation arrived.
    event : str
        The event JSON as invoked (see :attr:`gateway_request_id`, :attr:`warm_ping`).
    payload : bytes
        The function's response (see :attr:`path`); empty when throttled.
    report : Report or None
        The REPORT numbers (``Duration``, ``Billed Duration``, ``Init Duration``,
        ``Restore Duration``, ``Max Memory Used``, all real ms); ``None`` when throttled or
        when the init phase failed.
    environment_id : str or None
    init_type : {"on-demand", "provisioned-concurrency", "snap-start"} or None
    cold_start : bool
        A new execution environment ran its init phase (or restore) for this invocation.
    spillover : bool
        Served on demand while the alias had provisioned concurrency configured.
    function_error : str or None
        ``Unhandled`` for a handler error, timeout, crash or init failure.
    error_type : str or None
        The Lambda API error that refused it (``TooManyRequestsException``), if any.
    """

    function_name: str
    qualifier: str | None
    version: str
    request_id: str
    invocation_type: str
    t_s: float
    event: str
    payload: bytes = b""
    report: Report | None = None
    environment_id: str | None = None
    init_type: InitType | None = None
    cold_start: bool = False
    spillover: bool = False
    function_error: str | None = None
    error_type: str | None = None

    @property
    def throttled(self) -> bool:
        return self.error_type == TooManyRequestsException.error_type

    @cached_property
    def _event_object(self) -> Any:
        try:
            return json.loads(self.event)
        except ValueError:
            return None

    @property
    def gateway_request_id(self) -> str | None:
        """``requestContext.requestId`` of an API Gateway event (the ``apigw-requestid``
        response header), else ``None``."""
        event = self._event_object
        try:
            return str(event["requestContext"]["requestId"])
        except (KeyError, TypeError):
            return None

    @property
    def warm_ping(self) -> bool:
        """The event is a warmstart warm ping (``{"warmstart": {"ping": true, ...}}``)."""
        event = self._event_object
        return isinstance(event, dict) and isinstance(event.get("warmstart"), dict) \
            and bool(event["warmstart"].get("ping"))

    @cached_property
    def path(self) -> str | None:
        """The response's ``X-Warmstart-Path`` header (``local``, ``overflow``, ``degraded``,
        ``shed``) when the function answered an API Gateway proxy response, else ``None``."""
        try:
            response = json.loads(self.payload or b"null")
            headers = response.get("headers") or {}
        except (ValueError, AttributeError):
            return None
        for key, value in headers.items() if isinstance(headers, dict) else ():
            if str(key).lower() == "x-warmstart-path":
                return str(value)
        return None


InvocationListener = Callable[[InvocationRecord], None]


class _EnvironmentDied(Exception):
    pass


class ExecutionEnvironment:
    """One execution environment (a child process) and its bookkeeping."""

    def __init__(self, function: FunctionSpec, version: str, init_type: InitType,
                 *, provisioned_for: str | None, now: float) -> None:
        self.id = uuid.uuid4().hex
        self.function = function
        self.version = version
        self.init_type: InitType = init_type
        self.provisioned_for = provisioned_for  # alias name, or None for on-demand
        self.state: EnvState = "init"
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.init_duration_ms: float | None = None
        self.restore_duration_ms: float | None = None
        self.report_init_pending = True
        self.created_at = now
        self.last_used = 0.0  # clock.monotonic() of the last release; set when it turns idle
        self.invocations = 0
        self.retire = False
        self.frozen = False
        day = dt.datetime.fromtimestamp(now, tz=dt.UTC).strftime("%Y/%m/%d")
        self.log_stream_name = f"{day}/[{version}]{self.id}"

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is not None:
            try:
                os.kill(self.pid, 0)
            except OSError:
                return False
            return True
        return False

    def exit_reason(self) -> str:
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return "Runtime exited without providing a reason"
            if code < 0:
                return f"Runtime exited with error: signal: {signal.Signals(-code).name.lower()[3:]}"
            return f"Runtime exited with error: exit status {code}"
        return "Runtime exited without providing a reason"

    def _signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the environment's process group (its own: a spawned environment
        starts a new session and a restored one calls ``setpgid``), else to its process only,
        so a SnapStart template never receives an environment's signal."""
        if self.pid is None:
            return
        try:
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # already gone (or a recycled pid): nothing to freeze or thaw

    def freeze(self) -> None:
        """SIGSTOP the environment (idle between invocations, as Lambda freezes it).

        The caller holds the function's lock and has just made the environment idle; the
        emulator never reads from or writes to a frozen environment's socket.
        """
        if not self.frozen and self.state == "idle" and self.alive():
            self._signal(signal.SIGSTOP)
            self.frozen = True

    def thaw(self) -> None:
        """SIGCONT the environment if it is frozen (before an invocation or its end)."""
        if self.frozen:
            self.frozen = False
            self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """End the process (SIGKILL) and close the socket; safe to call twice.

        A frozen environment is thawed first (SIGKILL ends a stopped process too, but a thawed
        one also sees its socket close, and its process group's other members get SIGCONT).
        """
        self.thaw()
        self.state = "dead"
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _LOG.error("environment %s (pid %s) did not exit", self.id, self.proc.pid)
        elif self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass


@dataclass
class _ProvisionedConfig:
    requested: int
    allocated: int = 0
    status: str = "IN_PROGRESS"
    status_reason: str | None = None
    last_modified: str = ""
    generation: int = 0


class _Zygote:
    """The SnapStart template process of one published version."""

    def __init__(self, proc: subprocess.Popen[bytes], control: socket.socket, init_ms: float) -> None:
        self.proc = proc
        self.control = control
        self.init_ms = init_ms
        self.lock = threading.Lock()

    def fork(self, log_stream_name: str) -> tuple[int, socket.socket]:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.lock:
                msg = json.dumps({"type": "fork", "log_stream_name": log_stream_name}).encode()
                socket.send_fds(self.control, [msg], [child.fileno()])
                self.control.settimeout(30)
                reply = self.control.recv(65536)
        finally:
            child.close()
        if not reply:
            parent.close()
            raise _EnvironmentDied("the SnapStart template process is gone")
        return int(json.loads(reply)["pid"]), parent

    def stop(self) -> None:
        try:
            self.control.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)


class _FunctionState:
    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        self.lock = threading.Condition()
        self.envs: list[ExecutionEnvironment] = []
        self.in_flight = 0
        self.in_flight_by_resource: dict[str, int] = {}
        self.reserved: int | None = spec.reserved_concurrency
        self.aliases: dict[str, str] = {a.name: a.version for a in spec.aliases}
        self.pc: dict[str, _ProvisionedConfig] = {}
        self.zygotes: dict[str, _Zygote] = {}


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

    Examples
    --------
    >>> with Emulator(EmulatorConfig()) as emu:                       # doctest: +SKIP
    ...     emu.add_function(FunctionSpec(name="echo", handler="echo.handler", code_dir=d))
    ...     emu.invoke("echo", b'{"a": 1}').payload
    """

    def __init__(self, config: EmulatorConfig | None = None, *, clock: Clock | None = None,
                 metrics: MetricsSink | None = None, log_stream: IO[str] | None = None) -> None:
        self.config = config or EmulatorConfig()
        self.clock: Clock = clock or SystemClock()
        self.metrics: MetricsSink = metrics or NullMetrics()
        self._log_stream = log_stream
        #: variables added to every new environment (the stack adds local endpoints here)
        self.extra_env: dict[str, str] = dict(self.config.extra_env)
        self._functions: dict[str, _FunctionState] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listeners: tuple[InvocationListener, ...] = ()
        self._reaper = threading.Thread(target=self._reap_loop, name="idle-reclaim", daemon=True)
        self._reaper.start()

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every execution environment and template process."""
        self._stopped.set()
        with self._lock:
            states = list(self._functions.values())
        for fs in states:
            with fs.lock:
                envs, fs.envs = list(fs.envs), []
                zygotes, fs.zygotes = list(fs.zygotes.values()), {}
                for cfg in fs.pc.values():
                    cfg.generation += 1
            for env in envs:
                env.kill()
            for zygote in zygotes:
                zygote.stop()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)
        self._reaper.join(timeout=5)

    def add_listener(self, listener: InvocationListener) -> None:
        """Call ``listener(record)`` after every invocation (synchronous and ``Event``, throttled
        ones too) with an :class:`InvocationRecord`.

        Listeners run on the invoking thread after the environment is released; they must be
        quick. An exception in a listener is logged and never reaches the caller.
        """
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: InvocationListener) -> None:
        """Stop calling ``listener`` (no error when it is not registered)."""
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x != listener)

    def _notify(self, record: InvocationRecord) -> None:
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:  # noqa: BLE001 - a listener never breaks an invocation
                _LOG.exception("invocation listener %r failed", listener)

    def add_function(self, spec: FunctionSpec, *, wait_provisioned: bool = True) -> None:
        """Deploy a function: create SnapStart snapshots and allocate the aliases' PC now.

        Like a CloudFormation deploy, provisioned concurrency set on an alias by the spec is
        allocated without the allocation delay, and (by default) this call waits until it is
        ``READY``.

        Raises
        ------
        ValueError
            If a function with this name exists.
        RuntimeError
            If a SnapStart snapshot init fails (its error message is included).
        """
        with self._lock:
            if spec.name in self._functions:
                raise ValueError(f"function {spec.name!r} already exists")
            fs = _FunctionState(spec)
            self._functions[spec.name] = fs
        if spec.snap_start:
            try:
                for version in spec.versions:
                    if version != "$LATEST":
                        fs.zygotes[version] = self._start_zygote(fs, version)
            except BaseException:
                with self._lock:
                    del self._functions[spec.name]
                for zygote in fs.zygotes.values():
                    zygote.stop()
                raise
        for alias in spec.aliases:
            if alias.provisioned_concurrency:
                self._set_pc(fs, alias.name, alias.provisioned_concurrency, delay_s=0.0)
        if wait_provisioned:
            for alias in spec.aliases:
                if alias.provisioned_concurrency:
                    self.wait_provisioned_ready(spec.name, alias.name)

    def functions(self) -> list[FunctionSpec]:
        with self._lock:
            return [fs.spec for fs in self._functions.values()]

    # ---- resolution and validation -------------------------------------------------------
    def arn(self, function_name: str, qualifier: str | None = None) -> str:
        base = f"arn:aws:lambda:{self.config.region}:{self.config.account_id}:function:{function_name}"
        return f"{base}:{qualifier}" if qualifier else base

    def _state(self, function_name: str) -> _FunctionState:
        name = function_name
        if name.startswith("arn:"):
            parts = name.split(":")
            name = parts[6] if len(parts) >= 7 else name
        elif ":" in name:
            name = name.split(":", 1)[0]
        with self._lock:
            fs = self._functions.get(name)
        if fs is None:
            raise ResourceNotFoundException(f"Function not found: {self.arn(name)}")
        return fs

    def _resolve(self, function_name: str, qualifier: str | None) -> tuple[_FunctionState, str, str | None]:
        """-> (function state, version, alias or None)."""
        if qualifier is None and (function_name.startswith("arn:") and function_name.count(":") >= 7):
            qualifier = function_name.split(":")[7]
        elif qualifier is None and not function_name.startswith("arn:") and ":" in function_name:
            qualifier = function_name.split(":", 1)[1]
        fs = self._state(function_name)
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
        if self._stopped.is_set():
            raise ServiceException("the local Lambda service is stopped")
        fs, version, alias = self._resolve(function_name, qualifier)
        limit = MAX_ASYNC_PAYLOAD_BYTES if invocation_type == "Event" else MAX_SYNC_PAYLOAD_BYTES
        if payload and len(payload) > limit:
            raise RequestTooLargeException(
                f"Request must be smaller than {limit} bytes for the InvokeFunction operation")
        event = self._event_text(payload)
        cc = self._client_context(client_context)
        if invocation_type == "DryRun":
            return InvokeResult(204, b"", uuid.uuid4().hex, version)
        if invocation_type == "Event":
            request_id = str(uuid.uuid4())
            thread = threading.Thread(target=self._invoke_async, daemon=True,
                                      args=(fs, version, alias, event, cc, request_id))
            self._track(thread)
            return InvokeResult(202, b"", request_id, version)
        if invocation_type != "RequestResponse":
            raise InvalidParameterValueException(
                f"Invalid InvocationType {invocation_type!r}: use RequestResponse, Event or DryRun")
        return self._invoke_sync(fs, version, alias, event, cc, str(uuid.uuid4()),
                                 "RequestResponse")

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

    def _invoke_async(self, fs: _FunctionState, version: str, alias: str | None, event: str,
                      cc: dict[str, Any] | None, request_id: str) -> None:
        delay_s = 1.0
        for _ in range(12):  # throttled events are retried, as Lambda's event queue does
            if self._stopped.is_set():
                return
            try:
                self._invoke_sync(fs, version, alias, event, cc, request_id, "Event")
                return
            except TooManyRequestsException:
                self.clock.wait(self._stopped, delay_s)
                delay_s = min(delay_s * 2, 60.0)
        _LOG.error("event %s for %s dropped after repeated throttling", request_id, fs.spec.name)

    def _resource(self, fs: _FunctionState, version: str, alias: str | None) -> str | None:
        qualifier = alias or (None if version == "$LATEST" else version)
        return f"{fs.spec.name}:{qualifier}" if qualifier else None

    def _acquire(self, fs: _FunctionState, version: str, alias: str | None,
                 resource: str | None) -> tuple[ExecutionEnvironment, bool, bool]:
        """-> (environment marked busy, cold, spillover). Raises TooManyRequestsException."""
        name = fs.spec.name
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
                init_type: InitType = "on-demand"
                if fs.spec.snap_start and version in fs.zygotes:
                    init_type = "snap-start"
                env = ExecutionEnvironment(fs.spec, version, init_type, provisioned_for=None,
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

    def _release(self, fs: _FunctionState, env: ExecutionEnvironment, resource: str | None,
                 dead: bool) -> None:
        kill = False
        with fs.lock:
            fs.in_flight -= 1
            if resource:
                fs.in_flight_by_resource[resource] -= 1
            env.last_used = self.clock.monotonic()
            if dead or env.retire or env.state == "dead":
                kill = True
                env.state = "dead"
                if env in fs.envs:
                    fs.envs.remove(env)
            else:
                env.state = "idle"
                if self.config.freeze_idle:
                    env.freeze()
            fs.lock.notify_all()
        if kill:
            env.kill()

    def _invoke_sync(self, fs: _FunctionState, version: str, alias: str | None, event: str,
                     cc: dict[str, Any] | None, request_id: str,
                     invocation_type: str) -> InvokeResult:
        if not self._listeners:
            return self._invoke_env(fs, version, alias, event, cc, request_id)
        qualifier = alias or (None if version == "$LATEST" else version)
        t_s = self.clock.time()
        try:
            result = self._invoke_env(fs, version, alias, event, cc, request_id)
        except TooManyRequestsException as exc:
            self._notify(InvocationRecord(fs.spec.name, qualifier, version, request_id,
                                          invocation_type, t_s, event, error_type=exc.error_type))
            raise
        self._notify(InvocationRecord(
            fs.spec.name, qualifier, result.executed_version, request_id, invocation_type, t_s,
            event, result.payload, result.report, result.environment_id, result.init_type,
            result.cold_start, result.spillover, result.function_error))
        return result

    def _invoke_env(self, fs: _FunctionState, version: str, alias: str | None, event: str,
                    cc: dict[str, Any] | None, request_id: str) -> InvokeResult:
        resource = self._resource(fs, version, alias)
        name = fs.spec.name
        env, cold, spillover = self._acquire(fs, version, alias, resource)
        self.metrics.record("Invocations", 1, name, resource)
        dead = False
        try:
            if cold:
                try:
                    self._initialize(fs, env)
                except _InitFailed as exc:
                    dead = True
                    self.metrics.record("Errors", 1, name, resource)
                    body = dict(exc.body, requestId=request_id)
                    return InvokeResult(200, json.dumps(body).encode(), request_id, version,
                                        function_error="Unhandled", environment_id=env.id,
                                        init_type=env.init_type, cold_start=True, spillover=spillover)
                with fs.lock:
                    env.state = "busy"
            result, dead = self._run(fs, env, alias, event, cc, request_id, cold, spillover)
            if result.function_error:
                self.metrics.record("Errors", 1, name, resource)
            if result.report is not None:
                # Duration in clock milliseconds, like the per-minute counts: under a time
                # scale, Invocations x Duration must give the emulated load (Little's law)
                duration_clock_ms = result.report.duration_ms * getattr(self.clock, "time_scale", 1.0)
                self.metrics.record("Duration", duration_clock_ms, name, resource)
            return result
        except BaseException:
            dead = True  # never leave an environment in an unknown state reusable
            raise
        finally:
            self._release(fs, env, resource, dead)

    def _run(self, fs: _FunctionState, env: ExecutionEnvironment, alias: str | None, event: str,
             cc: dict[str, Any] | None, request_id: str, cold: bool,
             spillover: bool) -> tuple[InvokeResult, bool]:
        spec = fs.spec
        qualifier = alias or env.version
        timeout_s = spec.timeout_s
        deadline_ms = int((time.time() + timeout_s) * 1000)
        message = {"type": "invoke", "request_id": request_id, "payload": event,
                   "deadline_ms": deadline_ms, "client_context": cc,
                   "invoked_function_arn": self.arn(spec.name, qualifier if qualifier != "$LATEST" else None)}
        started = time.perf_counter()
        assert env.sock is not None
        reply: dict[str, Any] | None
        try:
            env.sock.settimeout(timeout_s)
            wire.send(env.sock, message)
            reply = wire.recv(env.sock)
        except TimeoutError:
            reply = {"type": "timeout"}
        except OSError:
            reply = None
        duration_ms = (time.perf_counter() - started) * 1000.0
        init_ms = restore_ms = None
        if env.report_init_pending:
            env.report_init_pending = False
            if env.init_type == "snap-start":
                restore_ms = env.restore_duration_ms
            elif env.init_type == "on-demand":
                init_ms = env.init_duration_ms
        dead = False
        if reply is None or reply.get("type") == "timeout":
            dead = True
            if reply is None:
                error_type, text = "Runtime.ExitError", f"RequestId: {request_id} Error: {env.exit_reason()}"
            else:
                stamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
                error_type, text = "Sandbox.Timedout", (
                    f"{stamp.replace('+00:00', 'Z')} {request_id} "
                    f"Task timed out after {timeout_s:.2f} seconds")
                duration_ms = timeout_s * 1000.0
            payload = json.dumps({"errorMessage": text, "errorType": error_type}).encode()
            max_mem = 0
            ok = False
        else:
            payload = reply["payload"].encode()
            ok = bool(reply["ok"])
            duration_ms = float(reply["duration_ms"])
            max_mem = int(reply["max_memory_used_mb"])
            if max_mem > spec.memory_mb:
                # Lambda kills an environment that exceeds its memory size. The emulator sees the
                # peak after the invocation, so it discards the result and the environment then.
                dead, ok = True, False
                payload = json.dumps({
                    "errorMessage": f"RequestId: {request_id} Error: Runtime exited with error: "
                                    "signal: killed",
                    "errorType": "Runtime.OutOfMemory"}).encode()
        billed = math.ceil(duration_ms)
        if init_ms is not None:
            # Since 1 Aug 2025 the on-demand init phase is billed too.
            # References: https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/
            billed += math.ceil(init_ms)
        report = Report(request_id=request_id, duration_ms=duration_ms, billed_duration_ms=billed,
                        memory_size_mb=spec.memory_mb, max_memory_used_mb=max_mem,
                        init_duration_ms=init_ms, restore_duration_ms=restore_ms,
                        billed_restore_duration_ms=None if restore_ms is None else math.ceil(restore_ms))
        env.invocations += 1
        self._log(f"START RequestId: {request_id} Version: {env.version}\n"
                  f"END RequestId: {request_id}\n{report.line()}\n")
        if dead:
            self._log(f"environment {env.id[:8]} of {spec.name} ended: {payload.decode()}\n")
        return InvokeResult(200, payload, request_id, env.version,
                            function_error=None if ok else "Unhandled", report=report,
                            environment_id=env.id, init_type=env.init_type, cold_start=cold,
                            spillover=spillover), dead

    def _log(self, text: str) -> None:
        stream = self._log_stream or sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            pass

    # ---- environments ------------------------------------------------------------------------
    def _environment_vars(self, spec: FunctionSpec, version: str, init_type: InitType,
                          log_stream_name: str) -> dict[str, str]:
        host = os.environ
        env = {k: host[k] for k in self.config.inherit_env if k in host}
        env.update({
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
        })
        env.update(self.extra_env)
        env.update(spec.environment)
        env.update({
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_VERSION": version,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_INITIALIZATION_TYPE": init_type,
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": log_stream_name,
            "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{spec.runtime}",
            "AWS_REGION": self.config.region,
            "AWS_DEFAULT_REGION": self.config.region,
            "_HANDLER": spec.handler,
            "LAMBDA_TASK_ROOT": str(spec.code_dir),
            "LAMBDA_RUNTIME_DIR": str(BOOTSTRAP.parent),
            "TZ": ":UTC",
            "LANG": "en_US.UTF-8",
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def _spawn(self, spec: FunctionSpec, version: str, init_type: InitType, mode: str,
               log_stream_name: str) -> tuple[subprocess.Popen[bytes], socket.socket]:
        kind = socket.SOCK_SEQPACKET if mode == "zygote" else socket.SOCK_STREAM
        parent, child = socket.socketpair(socket.AF_UNIX, kind)
        env = self._environment_vars(spec, version, init_type, log_stream_name)
        env["_WARMSTART_ENV_FD"] = str(child.fileno())
        env["_WARMSTART_ENV_MODE"] = mode
        try:
            proc = subprocess.Popen(
                [self.config.python, "-u", str(BOOTSTRAP)], cwd=str(spec.code_dir), env=env,
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                stdout=self._log_stream or None, stderr=self._log_stream or None,
                # its own process group (frozen and thawed as one), in the emulator's session:
                # if the emulator dies while it is frozen, the kernel sends the orphaned group
                # SIGHUP and SIGCONT, so it never stays stopped
                process_group=0)
        finally:
            child.close()
        return proc, parent

    def _initialize(self, fs: _FunctionState, env: ExecutionEnvironment) -> None:
        """Run the init phase (or the SnapStart restore) of a new environment. Raises _InitFailed."""
        started = time.perf_counter()
        if env.init_type == "snap-start":
            zygote = fs.zygotes[env.version]
            try:
                env.pid, env.sock = zygote.fork(env.log_stream_name)
            except (OSError, _EnvironmentDied, ValueError) as exc:
                raise _InitFailed({"errorMessage": f"SnapStart restore failed: {exc}",
                                   "errorType": "Runtime.RestoreError", "stackTrace": []}) from exc
            timeout_s = self.config.init_timeout_s
        else:
            try:
                env.proc, env.sock = self._spawn(fs.spec, env.version, env.init_type, "serve",
                                                 env.log_stream_name)
            except OSError as exc:
                # e.g. the code folder no longer exists: Lambda reports a runtime error for the
                # init phase; the environment never existed
                env.kill()
                self._log(f"environment {env.id[:8]} of {fs.spec.name} could not start: {exc}\n")
                raise _InitFailed({
                    "errorMessage": f"RequestId: Error: could not start the runtime: {exc}",
                    "errorType": "Runtime.InvalidEntrypoint", "stackTrace": []}) from exc
            env.pid = env.proc.pid
            timeout_s = (self.config.init_timeout_s if env.init_type == "on-demand"
                         else self.config.prepaid_init_timeout_s)
        try:
            env.sock.settimeout(timeout_s)
            reply = wire.recv(env.sock)
        except TimeoutError:
            env.kill()
            raise _InitFailed({"errorMessage": f"INIT_REPORT Init Duration: {timeout_s * 1000:.2f} ms "
                                               "Phase: init Status: timeout",
                               "errorType": "Runtime.InitTimeout" if env.init_type != "snap-start"
                               else "Runtime.RestoreTimeout", "stackTrace": []}) from None
        except OSError:
            reply = None
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if reply is None or reply.get("type") != "ready":
            body = (reply or {}).get("error") or {
                "errorMessage": f"RequestId: Error: {env.exit_reason()}", "errorType": "Runtime.ExitError",
                "stackTrace": []}
            env.kill()
            raise _InitFailed(body)
        if env.init_type == "snap-start":
            env.restore_duration_ms = elapsed_ms
        else:
            env.init_duration_ms = elapsed_ms

    def _start_zygote(self, fs: _FunctionState, version: str) -> _Zygote:
        stream = f"snapshot/[{version}]{uuid.uuid4().hex}"
        try:
            proc, control = self._spawn(fs.spec, version, "snap-start", "zygote", stream)
        except OSError as exc:
            raise RuntimeError(f"SnapStart snapshot of {fs.spec.name}:{version} failed: "
                               f"could not start the runtime: {exc}") from exc
        started = time.perf_counter()
        control.settimeout(self.config.prepaid_init_timeout_s)
        try:
            data = control.recv(1 << 20)
        except OSError:
            data = b""
        init_ms = (time.perf_counter() - started) * 1000.0
        message = json.loads(data) if data else {}
        if message.get("type") != "snapshot_ready":
            control.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)
            raise RuntimeError(
                f"SnapStart snapshot of {fs.spec.name}:{version} failed: "
                f"{(message.get('error') or {}).get('errorMessage', 'process exited')}")
        self._log(f"SnapStart snapshot of {fs.spec.name}:{version} ready (init {init_ms:.1f} ms)\n")
        return _Zygote(proc, control, init_ms)

    def snapshot_init_ms(self, function_name: str, version: str = "1") -> float:
        """Init duration (ms) of the SnapStart snapshot of a version (paid at publish time)."""
        fs = self._state(function_name)
        return fs.zygotes[version].init_ms

    # ---- idle reclaim ------------------------------------------------------------------------
    def _reap_loop(self) -> None:
        while not self._stopped.wait(self.config.reap_interval_s):
            self.reclaim_idle()

    def reclaim_idle(self) -> int:
        """Reclaim on-demand environments idle for longer than the idle timeout; returns how many."""
        now = self.clock.monotonic()
        victims: list[ExecutionEnvironment] = []
        with self._lock:
            states = list(self._functions.values())
        for fs in states:
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
                     "invocations": e.invocations, "init_duration_ms": e.init_duration_ms,
                     "restore_duration_ms": e.restore_duration_ms} for e in fs.envs]

    def process_ids(self) -> list[int]:
        """PIDs of every environment and template process (for leak checks)."""
        pids = []
        with self._lock:
            states = list(self._functions.values())
        for fs in states:
            with fs.lock:
                pids += [e.pid for e in fs.envs if e.pid]
                pids += [z.proc.pid for z in fs.zygotes.values()]
        return pids

    # ---- concurrency APIs ----------------------------------------------------------------------
    def put_function_concurrency(self, function_name: str, reserved: int) -> int:
        """Set reserved concurrency (the function's concurrency limit).

        Raises
        ------
        ResourceNotFoundException, InvalidParameterValueException
        """
        fs = self._state(function_name)
        if not isinstance(reserved, int) or isinstance(reserved, bool) or reserved < 0:
            raise InvalidParameterValueException(
                "ReservedConcurrentExecutions must be an integer >= 0")
        if reserved > self.config.account_concurrency_limit:
            raise InvalidParameterValueException(
                f"Specified ReservedConcurrentExecutions for function decreases account's "
                f"UnreservedConcurrentExecution below its minimum value of [0]; the account "
                f"limit is {self.config.account_concurrency_limit}.")
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
        with self._lock:
            states = list(self._functions.values())
        reserved = sum(fs.reserved or 0 for fs in states)
        limit = self.config.account_concurrency_limit
        return {
            "AccountLimit": {"TotalCodeSize": 80530636800, "CodeSizeUnzipped": 262144000,
                             "CodeSizeZipped": 52428800, "ConcurrentExecutions": limit,
                             "UnreservedConcurrentExecutions": max(0, limit - reserved)},
            "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": len(states)},
        }

    def get_function_concurrency(self, function_name: str) -> int | None:
        return self._state(function_name).reserved

    def delete_function_concurrency(self, function_name: str) -> None:
        fs = self._state(function_name)
        with fs.lock:
            fs.reserved = None

    def _pc_alias(self, fs: _FunctionState, qualifier: str | None) -> str:
        if not qualifier:
            raise InvalidParameterValueException("The Qualifier parameter is required.")
        if qualifier == "$LATEST":
            raise InvalidParameterValueException(
                "Provisioned Concurrency Configs cannot be applied to unpublished function versions.")
        if qualifier not in fs.aliases and qualifier not in fs.spec.versions:
            raise ResourceNotFoundException(f"Function not found: {self.arn(fs.spec.name, qualifier)}")
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
        fs = self._state(function_name)
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
        self._set_pc(fs, alias, executions, delay_s=self.config.pc_allocation_delay_s)
        return self.get_provisioned_concurrency(function_name, alias)

    def get_provisioned_concurrency(self, function_name: str, qualifier: str | None) -> dict[str, Any]:
        fs = self._state(function_name)
        alias = self._pc_alias(fs, qualifier)
        with fs.lock:
            cfg = fs.pc.get(alias)
            if cfg is None:
                raise ProvisionedConcurrencyConfigNotFoundException(
                    "No Provisioned Concurrency Config found for this function")
            return self._pc_view(fs, alias, cfg)

    def _pc_view(self, fs: _FunctionState, alias: str, cfg: _ProvisionedConfig) -> dict[str, Any]:
        idle_ready = sum(1 for e in fs.envs if e.provisioned_for == alias and e.state in ("idle", "busy"))
        out: dict[str, Any] = {
            "FunctionArn": self.arn(fs.spec.name, alias),
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
        fs = self._state(function_name)
        with fs.lock:
            return [self._pc_view(fs, a, c) for a, c in sorted(fs.pc.items())]

    def delete_provisioned_concurrency(self, function_name: str, qualifier: str | None) -> None:
        fs = self._state(function_name)
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
        fs = self._state(function_name)
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

    def _set_pc(self, fs: _FunctionState, alias: str, executions: int, *, delay_s: float) -> None:
        now_iso = dt.datetime.fromtimestamp(self.clock.time(), tz=dt.UTC).isoformat(
            timespec="seconds").replace("+00:00", "+0000")
        with fs.lock:
            cfg = fs.pc.get(alias)
            if cfg is None:
                cfg = fs.pc[alias] = _ProvisionedConfig(requested=executions)
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
        thread = threading.Thread(target=self._allocate, args=(fs, alias, generation, delay_s),
                                  name=f"pc-{fs.spec.name}-{alias}", daemon=True)
        self._track(thread)

    def _track(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _allocate(self, fs: _FunctionState, alias: str, generation: int, delay_s: float) -> None:
        if delay_s and self.clock.wait(self._stopped, delay_s):
            return
        version = fs.aliases.get(alias, alias)
        while not self._stopped.is_set():
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
                env = ExecutionEnvironment(fs.spec, version, "provisioned-concurrency",
                                           provisioned_for=alias, now=self.clock.time())
                fs.envs.append(env)
            try:
                self._initialize(fs, env)
            except _InitFailed as exc:
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
                    env.last_used = self.clock.monotonic()
                    if self.config.freeze_idle:
                        env.freeze()  # Lambda freezes a provisioned environment after its init
                    cfg.allocated += 1
                    stale = False
                fs.lock.notify_all()
            if stale:
                env.kill()
                return


class _InitFailed(Exception):
    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("errorMessage"))
        self.body = body
