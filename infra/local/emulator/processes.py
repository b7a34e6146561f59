"""Execution environments' processes: variables, spawn, the init phase, SnapStart templates.

:class:`Processes` starts what :mod:`.environment` describes: the external extensions, then
the runtime (``awslambdaric`` or :mod:`infra.local.bootstrap`), each with the environment's own
:class:`~infra.local.emulator.runtime_api.RuntimeApiServer`, and waits for the init phase; a
SnapStart environment is a fork of its version's template process.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html (init sub-phases)
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-modify.html (wrapper scripts)
https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

from infra.local.emulator.config import BOOTSTRAP, EmulatedInitType
from infra.local.emulator.core import EmulatorContext, FunctionPool
from infra.local.emulator.environment import (
    EXEC_WRAPPER_VAR,
    LMI_WORKER,
    RUNTIME_ONLY_VARS,
    EmulatedEnvironment,
    EnvironmentDied,
    InitFailed,
    SnapshotTemplate,
    task_path,
)
from infra.local.emulator.runtime_api import RuntimeApiServer
from infra.local.spec import FunctionSpec


class Processes:
    """Starting environments: variables, processes, the init phase, SnapStart templates.

    Parameters
    ----------
    context : EmulatorContext
        Settings (interpreter, runtime client, init timeouts, inherited variables), the
        variables added to every environment (``context.extra_env``) and the log stream the
        processes write to.
    """

    def __init__(self, context: EmulatorContext) -> None:
        self.context = context
        self.config = context.config

    def environment_vars(self, spec: FunctionSpec, version: str, init_type: EmulatedInitType,
                          log_stream_name: str, runtime_api: str) -> dict[str, str]:
        """The variables of a new environment of ``spec`` (``version``, ``init_type``): the
        inherited host variables, dummy credentials, ``context.extra_env``, the function's own,
        then Lambda's reserved ones (``AWS_LAMBDA_*``, ``_HANDLER``, ``LAMBDA_TASK_ROOT``, the
        Runtime API address ``runtime_api``), which nothing overrides.

        References
        ----------
        https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime
        """
        host = os.environ
        env = {k: host[k] for k in self.config.inherit_env if k in host}
        env.update({
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
        })
        env.update(self.context.extra_env)
        env.update(spec.environment)
        env.update({
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_VERSION": version,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_INITIALIZATION_TYPE": init_type,
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": log_stream_name,
            "AWS_LAMBDA_RUNTIME_API": runtime_api,
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

    def _new_api(self, spec: FunctionSpec, version: str, label: str) -> RuntimeApiServer:
        api = RuntimeApiServer(spec.name, version, spec.handler, self.config.account_id,
                               external_names=frozenset(Path(p).name for p in spec.extensions),
                               label=label, max_stream_bytes=self.config.max_stream_bytes,
                               stream_bytes_per_s=self.config.stream_bytes_per_s)
        api.start()
        return api

    def _popen(self, argv: list[str], spec: FunctionSpec, env: dict[str, str], pgid: int | None,
               pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv, cwd=str(spec.code_dir), env=env, pass_fds=pass_fds, stdin=subprocess.DEVNULL,
            stdout=self.context.log_stream or None, stderr=self.context.log_stream or None,
            # its own process group (frozen and thawed as one), in the emulator's session:
            # if the emulator dies while it is frozen, the kernel sends the orphaned group
            # SIGHUP and SIGCONT, so it never stays stopped
            process_group=0 if pgid is None else pgid)

    def _runtime_argv(self, spec: FunctionSpec, init_type: EmulatedInitType = "on-demand") -> list[str]:
        """The runtime's command; behind the function's exec wrapper when it sets one. A
        Lambda Managed Instances worker runs awslambdaric's LMI worker (:mod:`.lmi_worker`)."""
        if self.config.runtime_client == "awslambdaric" and init_type == "lambda-managed-instances":
            argv = [self.config.python, "-u", str(LMI_WORKER), spec.handler]
        elif self.config.runtime_client == "awslambdaric":
            argv = [self.config.python, "-m", "awslambdaric", spec.handler]
        else:
            argv = [self.config.python, "-u", str(BOOTSTRAP)]
        wrapper = spec.environment.get(EXEC_WRAPPER_VAR)
        return [task_path(spec, wrapper), *argv] if wrapper else argv

    def _start_extensions(self, env: EmulatedEnvironment, variables: dict[str, str],
                          deadline: float) -> None:
        """Extension init: start the external extensions, wait until each has registered."""
        api = env.api
        assert api is not None
        ext_env = {k: v for k, v in variables.items() if k not in RUNTIME_ONLY_VARS}
        for path in env.function.extensions:
            proc = self._popen([str(path)], env.function, ext_env, env.pgid)
            env.extension_procs.append(proc)
            env.pgid = env.pgid or proc.pid
        names = {Path(p).name for p in env.function.extensions}
        with api.cond:
            ok = api._wait(lambda: api.init_error is not None
                           or names <= {e.name for e in api.extensions.values()}, deadline, env.alive)
        if api.init_error is not None:
            raise InitFailed(api.init_error)
        if not ok:
            missing = sorted(names - {e.name for e in api.extensions.values()})
            raise InitFailed({"errorMessage": f"extension(s) {missing} did not register "
                                              f"({env.exit_reason() if not env.alive() else 'init timeout'})",
                              "errorType": "Extension.Crash" if not env.alive() else "Extension.InitTimeout",
                              "stackTrace": []})

    def initialize(self, fs: FunctionPool, env: EmulatedEnvironment) -> None:
        """Run the init phase (or the SnapStart restore, from ``fs.templates``) of a new
        environment ``env`` of function ``fs``. Raises InitFailed (the environment is ended)."""
        started = time.perf_counter()
        env.api = self._new_api(fs.spec, env.version, env.label)
        try:
            if env.init_type == "snap-start":
                template = fs.templates[env.version]
                try:
                    env.pid = env.pgid = template.fork(env.log_stream_name, env.api.address)
                except (OSError, EnvironmentDied, ValueError) as exc:
                    raise InitFailed({"errorMessage": f"SnapStart restore failed: {exc}",
                                      "errorType": "Runtime.RestoreError", "stackTrace": []}) from exc
                timeout_s = self.config.init_timeout_s
            else:
                timeout_s = env.init_timeout_s or (
                    self.config.init_timeout_s if env.init_type == "on-demand"
                    else self.config.prepaid_init_timeout_s)
                variables = self.environment_vars(fs.spec, env.version, env.init_type,
                                                   env.log_stream_name, env.api.address)
                variables.update(env.extra_vars)
                try:
                    self._start_extensions(env, variables, started + timeout_s)
                    env.proc = self._popen(self._runtime_argv(fs.spec, env.init_type), fs.spec,
                                           variables, env.pgid)
                except OSError as exc:
                    # e.g. the code folder no longer exists: Lambda reports a runtime error for
                    # the init phase; the environment never existed
                    self.context.log(f"environment {env.id[:8]} of {fs.spec.name} could not start: {exc}\n")
                    raise InitFailed({
                        "errorMessage": f"RequestId: Error: could not start the runtime: {exc}",
                        "errorType": "Runtime.InvalidEntrypoint", "stackTrace": []}) from exc
                env.pid = env.proc.pid
                env.pgid = env.pgid or env.proc.pid
            left_s = max(0.0, started + timeout_s - time.perf_counter())
            outcome = env.api.wait_init(left_s, env.alive)
            if outcome == "timeout":
                raise InitFailed({"errorMessage": f"INIT_REPORT Init Duration: {timeout_s * 1000:.2f} ms "
                                                  "Phase: init Status: timeout",
                                  "errorType": "Runtime.InitTimeout" if env.init_type != "snap-start"
                                  else "Runtime.RestoreTimeout", "stackTrace": []})
            if outcome == "error":
                assert env.api.init_error is not None
                raise InitFailed(env.api.init_error)
            if outcome == "exited":
                raise InitFailed({"errorMessage": f"RequestId: Error: {env.exit_reason()}",
                                  "errorType": "Runtime.ExitError", "stackTrace": []})
        except InitFailed:
            env.kill("failure")
            raise
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if env.init_type == "snap-start":
            env.restore_duration_ms = elapsed_ms
        else:
            env.init_duration_ms = elapsed_ms

    def start_template(self, fs: FunctionPool, version: str) -> SnapshotTemplate:
        """Start the SnapStart template process of ``version`` and run its init (before-snapshot
        hooks included). Raises RuntimeError with the init error when it fails."""
        stream = f"snapshot/[{version}]{uuid.uuid4().hex}"
        spec = fs.spec
        api = self._new_api(spec, version, f"{spec.name}/snapshot-{version}")
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        variables = self.environment_vars(spec, version, "snap-start", stream, api.address)
        variables["_WARMSTART_ENV_FD"] = str(child.fileno())
        variables["_WARMSTART_ENV_MODE"] = "zygote"
        try:
            proc = self._popen([self.config.python, "-u", str(BOOTSTRAP)], spec, variables, None,
                               pass_fds=(child.fileno(),))
        except OSError as exc:
            api.close()
            parent.close()
            raise RuntimeError(f"SnapStart snapshot of {spec.name}:{version} failed: "
                               f"could not start the runtime: {exc}") from exc
        finally:
            child.close()
        started = time.perf_counter()
        parent.settimeout(self.config.prepaid_init_timeout_s)
        try:
            data = parent.recv(1 << 20)
        except OSError:
            data = b""
        init_ms = (time.perf_counter() - started) * 1000.0
        message = json.loads(data) if data else {}
        if message.get("type") != "snapshot_ready":
            parent.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)
            api.close()
            raise RuntimeError(
                f"SnapStart snapshot of {spec.name}:{version} failed: "
                f"{(message.get('error') or {}).get('errorMessage', 'process exited')}")
        self.context.log(f"SnapStart snapshot of {spec.name}:{version} ready (init {init_ms:.1f} ms)\n")
        return SnapshotTemplate(proc, parent, init_ms, api)
