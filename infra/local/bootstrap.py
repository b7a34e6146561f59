"""The home-made runtime of an execution environment: a Lambda Runtime API client (stdlib only).

Run as a script by the emulator (never imported by it): standard library only, so the init
phase it measures is the handler's, not ours. It imports the handler (the init phase), then
asks the environment's Runtime API (``AWS_LAMBDA_RUNTIME_API``, HTTP) for invocations one at a
time, the same calls AWS's ``awslambdaric`` makes: ``GET /2018-06-01/runtime/invocation/next``,
``POST .../invocation/{id}/response`` or ``/error``, ``POST .../runtime/init/error``.

The emulator runs ``awslambdaric`` (AWS's client) for on-demand and provisioned environments
by default (``EmulatorConfig.runtime_client``); this client is kept for the SnapStart template:

Modes (``_WARMSTART_ENV_MODE``):

``serve``
    init, then serve invocations from the Runtime API.
``zygote``
    SnapStart template: init, run the before-snapshot hooks (snapshot-restore-py), report
    ``snapshot_ready`` on a Unix control socket, then on each ``fork`` request fork a child
    (the restored execution environment) that takes the Runtime API address it is given, runs
    the after-restore hooks and serves invocations from it. The template's own main thread
    stays the only one that forks.

An environment exits when its Runtime API goes away (connection refused or reset, or a 500
"container error"): no orphans.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html (the runtime loop)
"""

from __future__ import annotations

import http.client
import importlib
import json
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any

RUNTIME = "/2018-06-01/runtime"


class ClientContext:
    def __init__(self, data: dict[str, Any]) -> None:
        self.client = data.get("client")
        self.custom = data.get("custom")
        self.env = data.get("env")


class LambdaContext:
    """The context object Lambda passes to a Python handler (from the ``next`` headers)."""

    def __init__(self, headers: Any) -> None:
        env = os.environ
        self.function_name = env.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = env.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.log_group_name = env.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = env.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.invoked_function_arn = headers.get("Lambda-Runtime-Invoked-Function-Arn", "")
        self.aws_request_id = headers.get("Lambda-Runtime-Aws-Request-Id", "")
        self.identity = None
        cc = headers.get("Lambda-Runtime-Client-Context")
        self.client_context = ClientContext(json.loads(cc)) if cc else None
        self._deadline_ms = int(headers.get("Lambda-Runtime-Deadline-Ms") or 0)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def error_body(exc: BaseException, error_type: str | None = None, message: str | None = None) -> dict[str, Any]:
    stack = traceback.format_list(traceback.extract_tb(exc.__traceback__))
    return {
        "errorMessage": str(exc) if message is None else message,
        "errorType": error_type or type(exc).__name__,
        "requestId": "",
        "stackTrace": stack,
    }


def load_handler(handler: str) -> Any:
    """Import ``module.function`` the way Lambda's Python runtime does, with its error types."""
    module_name, _, attr = handler.rpartition(".")
    try:
        module = importlib.import_module(module_name.replace("/", "."))
    except SyntaxError as exc:
        raise _InitError(error_body(exc, "Runtime.UserCodeSyntaxError",
                                    f"Syntax error in module '{module_name}': {exc}")) from exc
    except ImportError as exc:
        raise _InitError(error_body(exc, "Runtime.ImportModuleError",
                                    f"Unable to import module '{module_name}': {exc}")) from exc
    except Exception as exc:  # the handler module's own init code raised
        raise _InitError(error_body(exc)) from exc
    func = getattr(module, attr, None)
    if not callable(func):
        raise _InitError({"errorMessage": f"Handler '{attr}' missing on module '{module_name}'",
                          "errorType": "Runtime.HandlerNotFound", "requestId": "",
                          "stackTrace": []})
    return func


class _InitError(Exception):
    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body["errorMessage"])
        self.body = body


class RuntimeApiGone(Exception):
    """The Runtime API refused the connection or answered 500: the environment is ending."""


class RuntimeClient:
    """A keep-alive HTTP connection to the environment's Runtime API."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        """-> (status, headers, body). Raises RuntimeApiGone when the API is unreachable."""
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.address)
            try:
                self._conn.request(method, path, body=body, headers=headers or {})
                response = self._conn.getresponse()
                data = response.read()
            except (ConnectionRefusedError, FileNotFoundError) as exc:
                raise RuntimeApiGone(str(exc)) from exc
            except (OSError, http.client.HTTPException) as exc:
                self._conn.close()
                self._conn = None
                if attempt:
                    raise RuntimeApiGone(str(exc)) from exc
                continue  # a keep-alive connection the server had closed: once more
            if response.status >= 500:
                raise RuntimeApiGone(f"{path}: {response.status} {data[:200]!r}")
            return response.status, response.headers, data
        raise AssertionError("unreachable")

    def post_json(self, path: str, payload: Any, headers: dict[str, str] | None = None) -> int:
        status, _h, data = self.call("POST", path, json.dumps(payload).encode(),
                                     dict(headers or {}, **{"Content-Type": "application/json"}))
        if status != 202:
            sys.stderr.write(f"bootstrap: POST {path} answered {status}: {data[:300]!r}\n")
        return status


def _run_hooks(kind: str) -> None:
    mod = sys.modules.get("snapshot_restore_py")
    if mod is None:
        return
    hooks = mod.get_before_snapshot() if kind == "before" else mod.get_after_restore()
    for func, args, kwargs in list(hooks):
        func(*args, **kwargs)


def serve(client: RuntimeClient, handler: Any) -> None:
    """The runtime loop: ``next``, run the handler, post its response or error; until the
    Runtime API goes away."""
    while True:
        try:
            status, headers, body = client.call("GET", f"{RUNTIME}/invocation/next")
        except RuntimeApiGone:
            return
        if status != 200:
            sys.stderr.write(f"bootstrap: next answered {status}: {body[:300]!r}\n")
            return
        request_id = headers.get("Lambda-Runtime-Aws-Request-Id", "")
        try:
            event = json.loads(body or b"{}")
            result = handler(event, LambdaContext(headers))
            try:
                payload = json.dumps(result).encode()
            except (TypeError, ValueError) as exc:
                error: dict[str, Any] | None = {
                    "errorMessage": f"Unable to marshal response: {exc}",
                    "errorType": "Runtime.MarshalError", "requestId": request_id, "stackTrace": []}
            else:
                error = None
        except Exception as exc:  # noqa: BLE001
            error = error_body(exc)
            error["requestId"] = request_id
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            if error is None:
                client.call("POST", f"{RUNTIME}/invocation/{request_id}/response", payload,
                            {"Content-Type": "application/json"})
            else:
                client.post_json(f"{RUNTIME}/invocation/{request_id}/error", error,
                                 {"Lambda-Runtime-Function-Error-Type": error["errorType"]})
        except RuntimeApiGone:
            return


def _zygote_loop(control: socket.socket, handler: Any) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked environments are reaped by the kernel
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(control, 65536, 1)
        except OSError:
            return
        for fd in fds:
            os.close(fd)
        if not data:
            return
        message = json.loads(data)
        if message.get("type") != "fork":
            continue
        rng = sys.modules.get("random")
        rng_state = rng.getstate() if rng is not None else None
        pid = os.fork()
        if pid == 0:  # the restored execution environment
            control.close()
            # its own process group, so the emulator can freeze (SIGSTOP) the environment and
            # whatever it starts, never the template it was forked from
            os.setpgid(0, 0)
            if rng is not None:
                # A snapshot restores memory as it was: undo the reseed that `random` does
                # after fork (os.register_at_fork), so uniqueness is the hooks' job, as on AWS.
                rng.setstate(rng_state)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.environ["AWS_LAMBDA_LOG_STREAM_NAME"] = message["log_stream_name"]
            os.environ["AWS_LAMBDA_RUNTIME_API"] = message["runtime_api"]
            client = RuntimeClient(message["runtime_api"])
            try:
                _run_hooks("after")
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                try:
                    client.post_json(f"{RUNTIME}/restore/error", error_body(exc),
                                     {"Lambda-Runtime-Function-Error-Type": "Runtime.AfterRestoreError"})
                finally:
                    os._exit(65)
            try:
                serve(client, handler)
            finally:
                os._exit(0)
        control.send(json.dumps({"type": "forked", "pid": pid}).encode())


def main() -> None:
    mode = os.environ.pop("_WARMSTART_ENV_MODE", "serve")
    control = None
    if mode == "zygote":
        fd = int(os.environ.pop("_WARMSTART_ENV_FD"))
        control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd)
    # sys.path as Lambda has it: the task root first, never this file's directory
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    task_root = os.environ.get("LAMBDA_TASK_ROOT", os.getcwd())
    sys.path.insert(0, task_root)
    client = RuntimeClient(os.environ["AWS_LAMBDA_RUNTIME_API"])
    started = time.perf_counter()
    try:
        handler = load_handler(os.environ["_HANDLER"])
        if mode == "zygote":
            _run_hooks("before")
    except _InitError as exc:
        _report_init_error(client, control, exc.body)
        return
    except Exception as exc:  # noqa: BLE001 (a before-snapshot hook failed)
        _report_init_error(client, control, error_body(exc, "Runtime.BeforeSnapshotError"
                                                        if mode == "zygote" else None))
        return
    init_ms = (time.perf_counter() - started) * 1000.0
    if control is not None:
        control.send(json.dumps({"type": "snapshot_ready", "init_ms": init_ms,
                                 "pid": os.getpid()}).encode())
        _zygote_loop(control, handler)
        return
    serve(client, handler)


def _report_init_error(client: RuntimeClient, control: socket.socket | None, body: dict[str, Any]) -> None:
    traceback.print_exc()
    if control is not None:
        control.send(json.dumps({"type": "init_error", "error": body}).encode())
    else:
        try:
            client.post_json(f"{RUNTIME}/init/error", body,
                             {"Lambda-Runtime-Function-Error-Type": body["errorType"]})
        except RuntimeApiGone:
            pass
    sys.exit(1)


if __name__ == "__main__":
    main()
