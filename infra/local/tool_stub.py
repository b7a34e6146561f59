"""A local order-status service: the downstream HTTP tool of the lookup agent (standard library).

``GET /orders/{order_id}`` answers ``{"order_id", "status", "eta", "updated_at"}`` after a real
wait (``latency_ms``); ``GET /healthz`` answers at once. Failures can be injected: an HTTP error
status (``error``), no answer until the client gives up (``hang``), or nothing listening on the
port (``refuse``: the listener is closed, connections are refused, and reopened on the same
port when the failure is cleared).

From a test::

    stub = ToolStub(latency_ms=40).start()
    env = {"LOOKUP_TOOL_URL": stub.url}
    stub.fail("error", status=503)   # or "hang", "refuse"; stub.fail(None) clears it
    stub.requests                    # order ids asked, in order
    stub.stop()

From a shell: ``python -m infra.local.tool_stub --port 8900 --latency-ms 40``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import zlib
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from infra.local.stub_server import StubServer

__all__ = ["STATUSES", "ToolStub", "main"]

#: The statuses an order goes through; an order without an explicit status gets one of them
#: from its id (CRC-32), so answers are stable across runs.
STATUSES = ("received", "packed", "shipped", "out_for_delivery", "delivered")
#: How long a ``hang`` holds a request at most when the stub is not stopped, s (well past any
#: client timeout the agent uses).
DEFAULT_HANG_S = 30.0

Failure = Literal["error", "hang", "refuse"]


class ToolStub(StubServer):
    """The order service on ``127.0.0.1``, served from a daemon thread.

    Parameters
    ----------
    host : str
        Bind address.
    port : int
        0: any free port (read `url` after `start`).
    latency_ms : float
        Real wait before each order answer, ms (settable while running).
    hang_s : float
        Longest a ``hang`` holds a request, s (a `stop` releases it at once).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency_ms: float = 0.0,
                 hang_s: float = DEFAULT_HANG_S) -> None:
        super().__init__(host=host, port=port)
        self.latency_ms = float(latency_ms)
        self.hang_s = float(hang_s)
        #: order id -> status, overriding the derived one
        self.statuses: dict[str, str] = {}
        #: order ids answered with 404
        self.missing: set[str] = set()
        self._requests: list[str] = []
        self._failure: Failure | None = None
        self._failure_status = 503
        self._failures_left: int | None = None
        self._lock = threading.Lock()

    thread_name = "tool-stub"
    title = "the tool stub"  # its url is the agent's ``LOOKUP_TOOL_URL``

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _Handler

    # -- what tests drive -------------------------------------------------------------------
    def fail(self, mode: Failure | None, *, status: int = 503, times: int | None = None) -> None:
        """Inject a failure into the next order requests (None: answer normally again).

        Parameters
        ----------
        mode : {"error", "hang", "refuse"} | None
            ``error``: answer ``status`` with a JSON error; ``hang``: answer nothing until
            the client gives up (or `hang_s`, or `stop`); ``refuse``: close the listener
            (connections are refused) until the failure is cleared.
        status : int
            The ``error`` status.
        times : int | None
            Fail only this many requests, then answer normally (``error`` and ``hang``).

        Raises
        ------
        ValueError
            An unknown mode, or ``times`` with ``refuse`` (nothing is received to count).
        """
        if mode not in (None, "error", "hang", "refuse"):
            raise ValueError(f"unknown failure {mode!r}: use 'error', 'hang', 'refuse' or None")
        if mode == "refuse" and times is not None:
            raise ValueError("times cannot count refused connections: clear 'refuse' with fail(None)")
        with self._lock:
            previous = self._failure
            self._failure, self._failure_status, self._failures_left = mode, int(status), times
        if mode == "refuse":
            self._close()
        elif previous == "refuse" and self._server is None:
            self._listen()

    def reset(self) -> None:
        """No failure, no latency, no recorded requests, derived statuses (between tests)."""
        self.fail(None)
        self._released.set()  # let go of a request still hanging from the last test
        self._released.clear()
        self.latency_ms = 0.0
        self.statuses.clear()
        self.missing.clear()
        with self._lock:
            self._requests.clear()

    @property
    def requests(self) -> list[str]:
        """The order ids asked for, in arrival order (every request the stub received)."""
        with self._lock:
            return list(self._requests)

    def order(self, order_id: str) -> dict[str, Any]:
        """The answer for ``order_id`` (what ``GET /orders/{order_id}`` returns)."""
        status = self.statuses.get(order_id) or STATUSES[zlib.crc32(order_id.encode()) % len(STATUSES)]
        return {
            "order_id": order_id,
            "status": status,
            "eta": None if status == "delivered" else "2025-01-17",
            "updated_at": "2025-01-15T09:30:00Z",
        }

    def _next_failure(self) -> tuple[Failure | None, int]:
        with self._lock:
            mode, status = self._failure, self._failure_status
            if mode is not None and self._failures_left is not None:
                self._failures_left -= 1
                if self._failures_left <= 0:
                    self._failure, self._failures_left = None, None
            return mode, status

    def _record(self, order_id: str) -> None:
        with self._lock:
            self._requests.append(order_id)


class _Handler(BaseHTTPRequestHandler):
    stub: ToolStub
    server_version = "tool-stub/1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and the CLI read the stub's state, not its access log

    def _send(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        stub = self.stub
        path = urlsplit(self.path).path
        if path == "/healthz":
            self._send(200, {"status": "ok"})
            return
        parts = path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "orders" or not parts[1]:
            self._send(404, {"error": "not_found", "message": f"no route GET {path}"})
            return
        order_id = unquote(parts[1])
        stub._record(order_id)
        if stub.latency_ms > 0:
            time.sleep(stub.latency_ms / 1000.0)
        mode, status = stub._next_failure()
        if mode == "hang":
            stub._released.wait(stub.hang_s)
            self.close_connection = True
            return  # no answer at all
        if mode == "error":
            self._send(status, {"error": "injected", "message": f"injected failure {status}"})
            return
        if order_id in stub.missing:
            self._send(404, {"error": "not_found", "message": f"no order {order_id!r}"})
            return
        self._send(200, stub.order(order_id))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m infra.local.tool_stub``: serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m infra.local.tool_stub", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900, help="0: any free port")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="real wait before each answer")
    parser.add_argument("--fail", choices=["error", "hang", "refuse"], default=None)
    parser.add_argument("--status", type=int, default=503, help="status of --fail error")
    args = parser.parse_args(argv)
    stub = ToolStub(host=args.host, port=args.port, latency_ms=args.latency_ms).start()
    if args.fail is not None:
        stub.fail(args.fail, status=args.status)
    print(f"tool stub: {stub.url} (latency {args.latency_ms:g} ms"
          f"{', failure ' + args.fail if args.fail else ''}); Ctrl-C stops it", flush=True)
    stub.wait_for_interrupt()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
