"""The home-made runtime of an execution environment: a Lambda Runtime API client (stdlib only).

Run as a script by the emulator (never imported by it): standard library only (and the
stdlib-only :mod:`functions.runtime.stream_runtime`), so the init phase it measures is the
handler's, not ours. It imports the handler (the init phase), then
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

The runtime loop, the context object, the error objects and the answers' wire (buffered, and
streamed in the Runtime API's streaming mode) are :mod:`functions.runtime.stream_runtime`'s
(one copy). Without ``AWS_LAMBDA_EXEC_WRAPPER`` this client behaves as awslambdaric (a
``StreamedResponse`` is a marshal error); when the function sets the wrapper (warmstart's
``warmstart-stream``), the process stands in for the runtime the wrapper starts: it marks the
runtime as streaming before the handler's init and streams ``StreamedResponse`` answers, so a
SnapStart template's restored children stream too.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html (the runtime loop)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any

from functions.runtime.contract import environment as names

try:
    from functions.runtime import stream_runtime as wire
except ImportError:  # an interpreter without this project installed: its checkout's copy
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from functions.runtime import stream_runtime as wire
from functions.runtime import streaming

RUNTIME = wire.RUNTIME


def _zygote_loop(control: socket.socket, handler: Any, streams: bool) -> None:
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
            conn = wire.RuntimeConnection(message["runtime_api"])
            try:
                wire.run_hooks("after")
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                try:
                    wire.post_error(conn, f"{RUNTIME}/restore/error", wire.error_from_exception(exc)[0],
                                    error_type="Runtime.AfterRestoreError")
                except wire.RuntimeApiGone:
                    pass
                finally:
                    os._exit(65)
            try:
                wire.serve(conn, handler, streams=streams)
            finally:
                os._exit(0)
        control.send(json.dumps({"type": "forked", "pid": pid}).encode())


def main() -> None:
    mode = os.environ.pop(names.ENV_LOCAL_MODE, "serve")
    control = None
    if mode == "zygote":
        fd = int(os.environ.pop(names.ENV_LOCAL_FD))
        control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd)
    # sys.path as Lambda has it: the task root first, never this file's directory
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    task_root = os.environ.get("LAMBDA_TASK_ROOT", os.getcwd())
    sys.path.insert(0, task_root)
    conn = wire.RuntimeConnection(os.environ["AWS_LAMBDA_RUNTIME_API"])
    # the function sets warmstart's exec wrapper: this process stands in for the runtime the
    # wrapper starts (a SnapStart template must be the process the emulator forks)
    streams = bool(os.environ.get("AWS_LAMBDA_EXEC_WRAPPER"))
    if streams:
        wire.install_sigterm()
        streaming.mark_runtime_streams()
    started = time.perf_counter()
    try:
        handler = wire.load_handler(os.environ["_HANDLER"])
    except wire.FaultError as exc:
        _report_init_error(conn, control, wire.make_error(exc.message, exc.error_type, exc.trace))
        return
    except Exception as exc:  # noqa: BLE001 (the handler module's init code raised)
        _report_init_error(conn, control, wire.error_from_exception(exc)[0])
        return
    if mode == "zygote":
        try:
            wire.run_hooks("before")
        except Exception as exc:  # noqa: BLE001
            body = wire.error_from_exception(exc)[0]
            _report_init_error(conn, control, dict(body, errorType="Runtime.BeforeSnapshotError"))
            return
    init_ms = (time.perf_counter() - started) * 1000.0
    if control is not None:
        control.send(json.dumps({"type": "snapshot_ready", "init_ms": init_ms,
                                 "pid": os.getpid()}).encode())
        _zygote_loop(control, handler, streams)
        return
    wire.serve(conn, handler, streams=streams)


def _report_init_error(conn: wire.RuntimeConnection, control: socket.socket | None,
                       body: dict[str, Any]) -> None:
    traceback.print_exc()
    if control is not None:
        control.send(json.dumps({"type": "init_error", "error": body}).encode())
    else:
        try:
            wire.post_error(conn, f"{RUNTIME}/init/error", body)
        except wire.RuntimeApiGone:
            pass
    sys.exit(1)


if __name__ == "__main__":
    main()
