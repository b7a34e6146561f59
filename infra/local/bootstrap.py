"""The runtime loop inside one execution environment (a child process of the emulator).

Run as a script by the emulator (never imported by it): standard library only, so the init
phase it measures is the handler's, not ours. It imports the handler (the init phase), then
serves invocations one at a time over a Unix socket inherited from the emulator, with
length-prefixed JSON frames.

Modes (``_WARMSTART_ENV_MODE``):

``serve``
    init, report ``ready``, serve invocations.
``zygote``
    SnapStart template: init, run the before-snapshot hooks (snapshot-restore-py), report
    ``snapshot_ready``, then on each ``fork`` request (a SOCK_SEQPACKET message carrying a
    fresh socket) fork a child that runs the after-restore hooks and serves on that socket.
    The zygote stays single-threaded so forking is safe.

An environment exits when its socket closes (the emulator went away): no orphans.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import socket
import struct
import sys
import time
import traceback
from typing import Any

_HEADER = struct.Struct(">I")


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket) -> dict[str, Any] | None:
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


def max_memory_used_mb() -> int:
    """Peak resident set size of this process in MB.

    ``VmHWM`` from /proc (per address space, so it starts afresh at exec and at fork);
    ``ru_maxrss`` would carry the emulator's own peak across exec on Linux.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(int(line.split()[1]) / 1024 + 0.5)
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + 0.5)


class ClientContext:
    def __init__(self, data: dict[str, Any]) -> None:
        self.client = data.get("client")
        self.custom = data.get("custom")
        self.env = data.get("env")


class LambdaContext:
    """The context object Lambda passes to a Python handler."""

    def __init__(self, message: dict[str, Any]) -> None:
        env = os.environ
        self.function_name = env.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = env.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.log_group_name = env.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = env.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.invoked_function_arn = message["invoked_function_arn"]
        self.aws_request_id = message["request_id"]
        self.identity = None
        cc = message.get("client_context")
        self.client_context = ClientContext(cc) if isinstance(cc, dict) else None
        self._deadline_ms = int(message["deadline_ms"])

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


def _run_hooks(kind: str) -> None:
    mod = sys.modules.get("snapshot_restore_py")
    if mod is None:
        return
    hooks = mod.get_before_snapshot() if kind == "before" else mod.get_after_restore()
    for func, args, kwargs in list(hooks):
        func(*args, **kwargs)


def serve(sock: socket.socket, handler: Any) -> None:
    """Serve invocations until the socket closes."""
    while True:
        message = recv(sock)
        if message is None or message.get("type") == "shutdown":
            return
        request_id = message["request_id"]
        started = time.perf_counter()
        ok = True
        try:
            event = json.loads(message["payload"])
            context = LambdaContext(message)
            result = handler(event, context)
            try:
                payload = json.dumps(result)
            except (TypeError, ValueError) as exc:
                ok = False
                payload = json.dumps({"errorMessage": f"Unable to marshal response: {exc}",
                                      "errorType": "Runtime.MarshalError",
                                      "requestId": request_id, "stackTrace": []})
        except Exception as exc:  # noqa: BLE001
            ok = False
            body = error_body(exc)
            body["requestId"] = request_id
            payload = json.dumps(body)
        duration_ms = (time.perf_counter() - started) * 1000.0
        sys.stdout.flush()
        sys.stderr.flush()
        send(sock, {"type": "result", "ok": ok, "payload": payload,
                    "duration_ms": duration_ms, "max_memory_used_mb": max_memory_used_mb()})


def _zygote_loop(control: socket.socket, handler: Any) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked environments are reaped by the kernel
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(control, 65536, 1)
        except OSError:
            return
        if not data:
            return
        message = json.loads(data)
        if message.get("type") != "fork" or not fds:
            for fd in fds:
                os.close(fd)
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
            env_sock = socket.socket(fileno=fds[0])
            started = time.perf_counter()
            try:
                _run_hooks("after")
            except Exception as exc:  # noqa: BLE001
                send(env_sock, {"type": "init_error", "error": error_body(exc)})
                os._exit(1)
            hooks_ms = (time.perf_counter() - started) * 1000.0
            send(env_sock, {"type": "ready", "pid": os.getpid(), "hooks_ms": hooks_ms,
                            "max_memory_used_mb": max_memory_used_mb()})
            try:
                serve(env_sock, handler)
            finally:
                os._exit(0)
        os.close(fds[0])
        control.send(json.dumps({"type": "forked", "pid": pid}).encode())


def main() -> None:
    fd = int(os.environ.pop("_WARMSTART_ENV_FD"))
    mode = os.environ.pop("_WARMSTART_ENV_MODE", "serve")
    family_type = socket.SOCK_SEQPACKET if mode == "zygote" else socket.SOCK_STREAM
    sock = socket.socket(socket.AF_UNIX, family_type, fileno=fd)
    # sys.path as Lambda has it: the task root first, never this file's directory
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    task_root = os.environ.get("LAMBDA_TASK_ROOT", os.getcwd())
    sys.path.insert(0, task_root)
    started = time.perf_counter()
    try:
        handler = load_handler(os.environ["_HANDLER"])
        if mode == "zygote":
            _run_hooks("before")
    except _InitError as exc:
        _report_init_error(sock, mode, exc.body)
        return
    except Exception as exc:  # noqa: BLE001 (a before-snapshot hook failed)
        _report_init_error(sock, mode, error_body(exc))
        return
    init_ms = (time.perf_counter() - started) * 1000.0
    if mode == "zygote":
        sock.send(json.dumps({"type": "snapshot_ready", "init_ms": init_ms,
                              "pid": os.getpid()}).encode())
        _zygote_loop(sock, handler)
        return
    send(sock, {"type": "ready", "init_ms": init_ms, "pid": os.getpid(),
                "max_memory_used_mb": max_memory_used_mb()})
    serve(sock, handler)


def _report_init_error(sock: socket.socket, mode: str, body: dict[str, Any]) -> None:
    traceback.print_exc()
    message = {"type": "init_error", "error": body}
    if mode == "zygote":
        sock.send(json.dumps(message).encode())
    else:
        send(sock, message)
    sys.exit(1)


if __name__ == "__main__":
    main()
