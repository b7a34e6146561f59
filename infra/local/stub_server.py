"""What the local stub servers share (the LLM stub, :mod:`infra.local.llm_stub`, and the order
service, :mod:`infra.local.tool_stub`): listening on a daemon thread, ``start``/``stop`` and the
context manager, the ``url``, and the event that lets go of held requests on ``stop``.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler
from typing import ClassVar, Self

from infra.local.httpserver import LocalHTTPServer, serve_in_background, shutdown


class StubServer:
    """A local HTTP stub served from a daemon thread (a base class: a stub names its request
    handler in :meth:`_handler_class`, whose ``stub`` attribute is then the running stub).
    ``host`` is the bind address, ``port`` 0 any free port (read `url` after `start`).
    """

    #: The serving thread's name; what error messages call the stub; the URL's path.
    thread_name: ClassVar[str] = "stub"
    title: ClassVar[str] = "the stub"
    url_path: ClassVar[str] = ""

    def __init__(self, *, host: str, port: int) -> None:
        self.host = host
        self.port = port
        #: set on ``stop`` (and by a stub's own release): held requests stop waiting on it
        self._released = threading.Event()
        self._server: LocalHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> Self:
        """Listen and serve (returns self).

        Raises
        ------
        OSError
            The port cannot be bound.
        """
        self._released.clear()
        self._listen()
        return self

    def stop(self) -> None:
        """Release held requests, stop serving and close the port (idempotent)."""
        self._released.set()
        self._close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_for_interrupt(self) -> None:
        """Serve until Ctrl-C (the stubs' command lines), then `stop`."""
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    @property
    def url(self) -> str:
        """``http://host:port`` and the stub's `url_path`.

        Raises
        ------
        RuntimeError
            The stub is not started.
        """
        if not self.port:
            raise RuntimeError(f"{self.title} is not started")
        return f"http://{self.host}:{self.port}{self.url_path}"

    # -- serving ----------------------------------------------------------------------------
    def _listen(self) -> None:
        base = self._handler_class()
        handler = type(base.__name__, (base,), {"stub": self})
        self._server, self._thread = serve_in_background(self.host, self.port, handler,
                                                         self.thread_name)
        self.port = self._server.server_port  # the same port when reopened

    def _close(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        shutdown(server, thread)
