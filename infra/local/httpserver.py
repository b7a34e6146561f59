"""The threaded HTTP server the local Lambda API and the gateway run on (standard library).

Both serve on 127.0.0.1 from a daemon thread; one definition keeps their socket settings
(listen backlog, Nagle off in the handlers) and their start/stop the same.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LocalHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with daemon request threads and a 256-connection backlog.

    The default listen backlog (5) reset connections in a burst of 20 requests arriving at
    once from zero (``bench emulator``), hence 256.
    """

    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closed or reset its connection is not an error (load tests, clients
        closing keep-alive connections); anything else is printed as before."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def serve_in_background(host: str, port: int, handler: type[BaseHTTPRequestHandler],
                        name: str) -> tuple[LocalHTTPServer, threading.Thread]:
    """Bind ``host:port`` (port 0: any free port) and serve on a daemon thread named ``name``.

    Raises
    ------
    OSError
        The address cannot be bound (e.g. the port is taken).
    """
    server = LocalHTTPServer((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return server, thread


def shutdown(server: ThreadingHTTPServer | None, thread: threading.Thread | None,
             timeout_s: float = 5.0) -> None:
    """Stop serving, close the socket and join the thread (each step only if started)."""
    if server is not None:
        server.shutdown()
        server.server_close()
    if thread is not None:
        thread.join(timeout=timeout_s)
