"""Execution environments as processes: spawn, init phase, SnapStart template and restore, end.

An environment is a process group: the external extensions the function has (started first,
as Lambda's ``Extension init``), then the runtime (``awslambdaric`` or
:mod:`infra.local.bootstrap`), each talking HTTP to the environment's own
:class:`~infra.local.emulator.runtime_api.RuntimeApiServer`. A SnapStart environment is a fork
of the version's template process, in a process group of its own.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html (init sub-phases:
extensions register before the runtime starts; Shutdown phase)
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-modify.html (wrapper scripts)
https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html
"""

from __future__ import annotations

import ctypes
import datetime as dt
import errno
import json
import logging
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from infra.local.emulator.config import EmulatedEnvState, EmulatedInitType
from infra.local.emulator.runtime_api import RuntimeApiServer
from infra.local.spec import FunctionSpec

_LOG = logging.getLogger("warmstart.local.emulator")
ShutdownReason = Literal["spindown", "timeout", "failure"]
#: The runtime's share of the Shutdown phase when extensions are registered: 500 ms with
#: internal extensions only, 300 ms beside external ones (runtimes-extensions-api.html,
#: "Shutdown phase"); Lambda sends the runtime SIGTERM then (aws-samples,
#: graceful-shutdown-with-aws-lambda).
RUNTIME_SHUTDOWN_MS_INTERNAL = 500
RUNTIME_SHUTDOWN_MS_EXTERNAL = 300
#: ``tgkill`` syscall numbers (Linux ``unistd`` tables) by machine.
_SYS_TGKILL = {"x86_64": 234, "aarch64": 131}
#: Variables an extension does not see (runtimes-extensions-api.html, "Environment variables").
RUNTIME_ONLY_VARS = ("AWS_EXECUTION_ENV", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME",
                     "AWS_XRAY_CONTEXT_MISSING", "AWS_XRAY_DAEMON_ADDRESS", "LAMBDA_RUNTIME_DIR",
                     "LAMBDA_TASK_ROOT", "_AWS_XRAY_DAEMON_ADDRESS", "_AWS_XRAY_DAEMON_PORT", "_HANDLER")


def _signal_main_thread(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the main thread of process ``pid`` (``tgkill``), else to the process.

    Lambda freezes an environment with the cgroup freezer; the emulator uses SIGSTOP/SIGCONT.
    Right after a SIGCONT the kernel may still mark the main thread as having a signal pending
    and route a process-directed SIGTERM to another thread, where Python's handler never wakes
    the main thread (it runs only there): the runtime would miss its graceful-shutdown window
    about one time in ten. Thread-directed delivery is what a thawed, idle runtime gets on Lambda
    (the kernel prefers the main thread when it is not busy with another signal).
    """
    number = _SYS_TGKILL.get(platform.machine()) if sys.platform == "linux" else None
    if number is not None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(number, pid, pid, int(sig)) == 0:
            return
        if ctypes.get_errno() == errno.ESRCH:
            raise ProcessLookupError(pid)
    os.kill(pid, sig)


#: A function's wrapper script: Lambda runs ``[wrapper, *runtime command]`` instead of the
#: runtime (runtimes-modify.html, "Wrapper scripts").
EXEC_WRAPPER_VAR = "AWS_LAMBDA_EXEC_WRAPPER"
#: The script of a Lambda Managed Instances runtime process under awslambdaric.
LMI_WORKER = Path(__file__).with_name("lmi_worker.py")
#: Where a function's code is on Lambda; the emulator's is ``FunctionSpec.code_dir``.
LAMBDA_TASK_ROOT = "/var/task"


def task_path(spec: FunctionSpec, path: str) -> str:
    """``path`` as a function's process sees it: under ``/var/task`` it is in the function's code
    folder (``LAMBDA_TASK_ROOT``, the code folder); any other path is used as it is."""
    if path == LAMBDA_TASK_ROOT or path.startswith(LAMBDA_TASK_ROOT + "/"):
        return str(spec.code_dir / path[len(LAMBDA_TASK_ROOT):].lstrip("/"))
    return path


class EnvironmentDied(Exception):
    pass


class InitFailed(Exception):
    """The init phase (or restore) failed; ``body`` is Lambda's error object."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("errorMessage"))
        self.body = body


def max_memory_used_mb(pids: list[int]) -> int:
    """Peak resident set size (``VmHWM``, per address space, so afresh at exec and at fork) of
    the environment's processes together, in MB; 0 for processes already gone."""
    total_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        total_kb += int(line.split()[1])
                        break
        except OSError:
            continue
    return int(total_kb / 1024 + 0.5)


class EmulatedEnvironment:
    """One emulated execution environment: its processes, Runtime API and bookkeeping."""

    def __init__(self, function: FunctionSpec, version: str, init_type: EmulatedInitType,
                 *, provisioned_for: str | None, now: float) -> None:
        self.id = uuid.uuid4().hex
        self.function = function
        self.version = version
        self.init_type: EmulatedInitType = init_type
        self.provisioned_for = provisioned_for  # alias name, or None for on-demand
        self.state: EmulatedEnvState = "init"
        self.api: RuntimeApiServer | None = None
        self.proc: subprocess.Popen[bytes] | None = None  # the runtime (None when forked)
        self.extension_procs: list[subprocess.Popen[bytes]] = []
        self.pid: int | None = None  # the runtime's pid
        self.pgid: int | None = None  # the environment's process group
        self.init_duration_ms: float | None = None
        self.restore_duration_ms: float | None = None
        self.report_init_pending = True
        self.created_at = now
        self.last_used = 0.0  # clock.monotonic() of the last release; set when it turns idle
        self.invocations = 0
        self.retire = False
        self.frozen = False
        #: on Lambda Managed Instances: which runtime process of its environment this is
        self.worker_index: int | None = None
        #: variables added to the runtime's (LMI: ``TMPDIR``, ``AWS_LAMBDA_MAX_CONCURRENCY``)
        self.extra_vars: dict[str, str] = {}
        #: real seconds its init may take (None: the emulator's setting for its init type)
        self.init_timeout_s: float | None = None
        self._end_lock = threading.Lock()
        day = dt.datetime.fromtimestamp(now, tz=dt.UTC).strftime("%Y/%m/%d")
        self.log_stream_name = f"{day}/[{version}]{self.id}"

    @property
    def label(self) -> str:
        return f"{self.function.name}/{self.id[:8]}"

    def pids(self) -> list[int]:
        out = [p.pid for p in self.extension_procs]
        return out + ([self.pid] if self.pid else [])

    def alive(self) -> bool:
        """The runtime process lives (and every external extension: Lambda resets an
        environment whose extension crashed)."""
        if any(p.poll() is not None for p in self.extension_procs):
            return False
        if self.proc is None and self.pid is None:
            return bool(self.extension_procs)  # extension init: the runtime is not started yet
        return self._runtime_alive()

    def exit_reason(self) -> str:
        for ext in self.extension_procs:
            if ext.poll() is not None:
                args = ext.args if isinstance(ext.args, list) else [ext.args]
                return f"Extension {Path(str(args[0])).name} exited with status {ext.returncode}"
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
        starts a new group and a restored one calls ``setpgid``), else to its process only,
        so a SnapStart template never receives an environment's signal."""
        target = self.pgid or self.pid
        if target is None:
            return
        try:
            if os.getpgid(target) == target:
                os.killpg(target, sig)
            else:
                os.kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass  # already gone (or a recycled pid): nothing to freeze or thaw

    def freeze(self) -> None:
        """SIGSTOP the environment (idle between invocations, as Lambda freezes it).

        The caller holds the function's lock and has just made the environment idle: the
        runtime and every extension wait on ``next``. Never on Lambda Managed Instances, whose
        environments run continuously (lambda-managed-instances-execution-environment.html).
        """
        if self.init_type == "lambda-managed-instances":
            return
        if not self.frozen and self.state == "idle" and self.alive():
            self._signal(signal.SIGSTOP)
            self.frozen = True

    def thaw(self) -> None:
        """SIGCONT the environment if it is frozen (before an invocation or its end)."""
        if self.frozen:
            self.frozen = False
            self._signal(signal.SIGCONT)

    def _runtime_alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True

    def _extensions_alive(self) -> bool:
        return bool(self.extension_procs) and all(p.poll() is None for p in self.extension_procs)

    def _terminate_runtime(self, limit_ms: int) -> None:
        """The runtime's part of the Shutdown phase: SIGTERM to the runtime process (where an
        in-process internal extension can clean up), then up to ``limit_ms`` for it to exit."""
        if self.pid is None:
            return
        try:
            _signal_main_thread(self.pid, signal.SIGTERM)
        except OSError:
            return
        deadline = time.perf_counter() + limit_ms / 1000.0
        while self._runtime_alive() and time.perf_counter() < deadline:
            time.sleep(0.01)

    def kill(self, reason: ShutdownReason = "spindown") -> None:
        """End the environment (the Shutdown phase): thaw it; when extensions are registered,
        SIGTERM the runtime and give it 500 ms (300 ms beside external extensions) to exit;
        send ``SHUTDOWN`` (with ``reason``) to the external extensions that registered for it
        and wait for them within the documented deadline (2,000 ms); then SIGKILL its
        processes and close its Runtime API. Safe to call twice.
        """
        with self._end_lock:
            self.thaw()
            self.state = "dead"
            api = self.api
            if api is not None and self.alive() and api.extensions:
                self._terminate_runtime(RUNTIME_SHUTDOWN_MS_INTERNAL if not any(
                    e.external for e in api.extensions.values()) else RUNTIME_SHUTDOWN_MS_EXTERNAL)
            if api is not None and self._extensions_alive():
                late = api.send_shutdown(reason, self._extensions_alive)
                if late:
                    _LOG.warning("environment %s: extension(s) %s did not finish SHUTDOWN within "
                                 "%d ms: SIGKILL", self.label, late, api.shutdown_deadline_ms())
            self._signal(signal.SIGKILL)
            for proc in [*self.extension_procs, *([self.proc] if self.proc else [])]:
                if proc.poll() is None:
                    proc.kill()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    _LOG.error("environment %s (pid %s) did not exit", self.id, proc.pid)
            if self.proc is None and self.pid is not None:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            if api is not None:
                api.close()


class SnapshotTemplate:
    """The SnapStart template process of one published version (forked on each restore)."""

    def __init__(self, proc: subprocess.Popen[bytes], control: socket.socket, init_ms: float,
                 api: RuntimeApiServer) -> None:
        self.proc = proc
        self.control = control
        self.init_ms = init_ms
        self.api = api  # the template's own Runtime API (extensions may register at its init)
        self.lock = threading.Lock()

    def fork(self, log_stream_name: str, runtime_api: str) -> int:
        """Fork a restored environment that serves ``runtime_api``; returns its pid."""
        with self.lock:
            msg = json.dumps({"type": "fork", "log_stream_name": log_stream_name,
                              "runtime_api": runtime_api}).encode()
            self.control.send(msg)
            self.control.settimeout(30)
            reply = self.control.recv(65536)
        if not reply:
            raise EnvironmentDied("the SnapStart template process is gone")
        return int(json.loads(reply)["pid"])

    def stop(self) -> None:
        try:
            self.control.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)
        self.api.close()
