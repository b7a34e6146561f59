"""Work after the response: an internal Lambda extension of the toolkit (Extensions API).

Lambda freezes an execution environment once its invocation is complete, and an invocation is
complete only when the runtime has posted the response **and** every registered extension has
called ``GET /2020-01-01/extension/event/next`` again. An *internal* extension is a thread of
the function's own process that registered during the init phase; the caller gets the answer
as soon as the runtime posts it, and the environment stays thawed (and billed) until the
extension asks for the next event. This module is that extension: the dispatcher answers a
cold request by overflow or a degraded answer at once and hands "wait for the preload" to it,
so the model finishes loading in the same invocation's post-response phase instead of holding
the answer back (``WARMSTART_FINISH_PRELOAD=after``, the default). The same queue serves other
post-response work: the app's background tasks (FastAPI ``BackgroundTasks``, run on the
environment's event loop after the answer left, `functions.runtime.asgi.Adapter.finish_background`)
and flushing the telemetry of requests finished before Powertools loaded.

Sources: AWS Compute Blog, "Running code after returning a response from an AWS Lambda
function" (internal extension thread, delayed ``event/next``); Lambda developer guide,
"Lambda Extensions API" (register: ``POST /2020-01-01/extension/register`` with
``Lambda-Extension-Name``, answered with ``Lambda-Extension-Identifier``; ``event/next``
returns ``INVOKE`` with ``requestId`` and ``deadlineMs``; internal extensions register in the
init phase and only for ``INVOKE``: ``SHUTDOWN`` is delivered to external extensions, the
runtime process ends its internal ones) and "Lambda execution environment lifecycle" (the
invoke phase ends after the runtime and every extension signal completion, bounded by the
function timeout).
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html

On the init path: imports only ``socket``, ``json`` and ``threading`` (``http.client`` would
import ``ssl``: 47 ms measured with ``-X importtime`` on the project host; the Runtime API is
plain HTTP/1.1 on the loopback interface, so a minimal client over one socket does).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["EXTENSION_NAME", "PostResponse", "PostResponseError", "RuntimeApiError"]

#: The name this extension registers with (``Lambda-Extension-Name``).
EXTENSION_NAME = "warmstart-post-response"
#: Extensions API version path.
API = "/2020-01-01/extension"
#: Work stops this long before the invocation's deadline, ms (the extension still has to call
#: ``event/next`` before the function timeout ends the invocation).
DEADLINE_MARGIN_MS = 100.0
#: Timeout of the register call, s (a local HTTP round trip; bounds a Runtime API that hangs).
REGISTER_TIMEOUT_S = 2.0
#: Attempts of ``event/next`` before the extension gives up (a Runtime API answering 500).
NEXT_ATTEMPTS = 3
#: Request ids of handler returns kept while their INVOKE event has not arrived (bounded).
MAX_PENDING_RETURNS = 64


class RuntimeApiError(OSError):
    """The Runtime API answered with an error status, or the connection failed."""


class PostResponseError(RuntimeError):
    """The extension could not register (the caller falls back to finishing before the
    response); the message says why."""


Work = Callable[[float], object]
"""Post-response work: called with the time it may run until (epoch ms); returns anything."""


def _request(address: str, method: str, path: str, headers: dict[str, str], body: bytes | None,
             timeout_s: float | None) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on a new connection (``Connection: close``); returns
    ``(status, lower-case headers, body)``.

    Raises
    ------
    RuntimeApiError
        The connection failed or the answer was not HTTP.
    """
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s)
    except (OSError, ValueError) as exc:
        raise RuntimeApiError(f"cannot reach the Runtime API at {address!r}: {exc}") from exc
    try:
        sock.settimeout(timeout_s)
        data = body or b""
        head = [f"{method} {path} HTTP/1.1", f"Host: {address}", "Connection: close",
                f"Content-Length: {len(data)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise RuntimeApiError(f"Runtime API {method} {path}: {exc}") from exc
    finally:
        sock.close()
    raw = b"".join(chunks)
    head_raw, sep, rest = raw.partition(b"\r\n\r\n")
    lines = head_raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise RuntimeApiError(f"Runtime API {method} {path}: not an HTTP answer: {raw[:80]!r}")
    out_headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        out_headers[name.strip().lower()] = value.strip()
    length = out_headers.get("content-length")
    if length is not None and length.isdigit():
        rest = rest[: int(length)]
    return int(parts[1]), out_headers, rest


class PostResponse:
    """The toolkit's internal extension: runs queued work after the response is sent.

    Parameters
    ----------
    runtime_api : str
        ``AWS_LAMBDA_RUNTIME_API`` (``host:port``).
    name : str
        ``Lambda-Extension-Name`` (default :data:`EXTENSION_NAME`).
    on_error : Callable[[str, str], None] | None
        Called with ``(failure tag, message)`` when the extension fails (register refused,
        the event loop lost the Runtime API, a work item raised); never raises back.
    wall_ms : Callable[[], float]
        Epoch clock, ms (the events' ``deadlineMs`` are epoch ms).

    Notes
    -----
    Thread-safe: the handler thread calls `submit` and `handler_returned`; the extension
    thread waits on ``event/next`` and runs the work. After the extension thread stops (a
    ``SHUTDOWN``, or a Runtime API error) `active` is False and the dispatcher finishes the
    preload before the response again.
    """

    def __init__(self, runtime_api: str, *, name: str = EXTENSION_NAME,
                 on_error: Callable[[str, str], None] | None = None,
                 wall_ms: Callable[[], float] = lambda: time.time() * 1000.0) -> None:
        self.runtime_api = runtime_api
        self.name = name
        self.extension_id: str | None = None
        self._on_error = on_error
        self._wall_ms = wall_ms
        self._cond = threading.Condition()
        self._work: dict[str, list[Work]] = {}
        self._shutdown_work: list[Work] = []
        self._returned: dict[str, None] = {}  # insertion-ordered set of request ids
        self._thread: threading.Thread | None = None
        self._stopped = False
        #: the last post-response phase: request id, ms from the handler's return to the
        #: extension's ``event/next`` (None until one ran)
        self.last_phase: tuple[str, float] | None = None
        self.shutdown_reason: str | None = None

    # -- registration -----------------------------------------------------------------------
    def register(self) -> str:
        """Register for ``INVOKE`` and start the extension thread.

        Call it in the init phase (before the runtime's first ``invocation/next``).

        Returns
        -------
        str
            The ``Lambda-Extension-Identifier``.

        Raises
        ------
        PostResponseError
            The Runtime API is unreachable or refused the registration (e.g. after the init
            phase, or a duplicate name); the message carries its status and body.
        """
        # internal extensions may not register for SHUTDOWN (Extensions API: "Shutdown" is for
        # external extensions; the runtime process stops its internal ones)
        body = json.dumps({"events": ["INVOKE"]}).encode()
        try:
            status, headers, answer = _request(
                self.runtime_api, "POST", f"{API}/register",
                {"Lambda-Extension-Name": self.name, "Content-Type": "application/json"},
                body, REGISTER_TIMEOUT_S)
        except RuntimeApiError as exc:
            raise PostResponseError(str(exc)) from exc
        ext_id = headers.get("lambda-extension-identifier")
        if status != 200 or not ext_id:
            raise PostResponseError(f"extension register refused: HTTP {status} "
                                    f"{answer[:200].decode('utf-8', 'replace')!r}")
        self.extension_id = ext_id
        self._thread = threading.Thread(target=self._loop, name="warmstart-post-response",
                                        daemon=True)
        self._thread.start()
        return ext_id

    @property
    def active(self) -> bool:
        """True while the extension thread runs (work submitted now will run)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopped

    # -- the handler's side -------------------------------------------------------------------
    def submit(self, request_id: str, work: Work, *, first: bool = False) -> None:
        """Queue ``work`` to run after invocation ``request_id``'s response is sent (``first``:
        before what is queued already, e.g. the app's background tasks before the wait for the
        preload, which goes on on its own thread meanwhile)."""
        with self._cond:
            queued = self._work.setdefault(request_id, [])
            if first:
                queued.insert(0, work)
            else:
                queued.append(work)

    def on_shutdown(self, work: Work) -> None:
        """Run ``work`` if a ``SHUTDOWN`` event arrives (bounded by its deadline). Internal
        extensions are not sent one on Lambda; a runtime that does send it is served."""
        with self._cond:
            self._shutdown_work.append(work)

    def handler_returned(self, request_id: str | None) -> None:
        """The handler is about to return invocation ``request_id``: its work may start."""
        if request_id is None:
            return
        with self._cond:
            self._returned[request_id] = None
            while len(self._returned) > MAX_PENDING_RETURNS:
                self._returned.pop(next(iter(self._returned)))
            self._cond.notify_all()

    # -- the extension thread -------------------------------------------------------------------
    def _fail(self, tag: str, message: str) -> None:
        if self._on_error is not None:
            try:
                self._on_error(tag, message)
            except Exception:  # noqa: BLE001, S110 - a logging callback never stops the extension
                pass

    def _next_event(self) -> dict[str, Any]:
        assert self.extension_id is not None
        status, _, body = _request(self.runtime_api, "GET", f"{API}/event/next",
                                   {"Lambda-Extension-Identifier": self.extension_id}, None, None)
        if status != 200:
            raise RuntimeApiError(f"event/next answered HTTP {status}: {body[:200]!r}")
        event = json.loads(body)
        if not isinstance(event, dict) or event.get("eventType") not in ("INVOKE", "SHUTDOWN"):
            raise RuntimeApiError(f"event/next answered an unknown event: {body[:200]!r}")
        return event

    def _deadline_ms(self, event: dict[str, Any]) -> float:
        deadline = event.get("deadlineMs")
        if isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
            return float(deadline) - DEADLINE_MARGIN_MS
        return self._wall_ms() + 1000.0  # no deadline given: a short bound, not forever

    def _run(self, work: list[Work], until_ms: float) -> None:
        for item in work:
            if self._wall_ms() >= until_ms:
                self._fail("timeout", "post-response work skipped: the invocation's deadline "
                           "has passed")
                return
            try:
                item(until_ms)
            except Exception as exc:  # noqa: BLE001 - one item's failure never stops the loop
                self._fail("internal_error", f"post-response work failed: "
                           f"{type(exc).__name__}: {exc}")

    def _next_event_retrying(self) -> dict[str, Any]:
        """`_next_event`, retried :data:`NEXT_ATTEMPTS` times with a short pause (a Runtime API
        that answered 500 once); then the extension reports ``exit/error`` and gives up."""
        for attempt in range(NEXT_ATTEMPTS):
            try:
                return self._next_event()
            except (RuntimeApiError, ValueError) as exc:
                last = exc
                time.sleep(0.05 * (attempt + 1))
        try:  # documented: an extension reports its error before it exits
            assert self.extension_id is not None
            _request(self.runtime_api, "POST", f"{API}/exit/error",
                     {"Lambda-Extension-Identifier": self.extension_id,
                      "Lambda-Extension-Function-Error-Type": "Extension.EventNextFailed"},
                     b"", REGISTER_TIMEOUT_S)
        except RuntimeApiError:
            pass
        raise last

    def _loop(self) -> None:
        try:
            while True:
                event = self._next_event_retrying()
                until_ms = self._deadline_ms(event)
                if event["eventType"] == "SHUTDOWN":
                    self.shutdown_reason = str(event.get("shutdownReason", ""))
                    with self._cond:
                        work, self._shutdown_work = self._shutdown_work, []
                    self._stopped = True
                    self._run(work, until_ms)
                    return
                request_id = str(event.get("requestId", ""))
                with self._cond:  # the handler returns before its work may start
                    while request_id not in self._returned:
                        left_s = (until_ms - self._wall_ms()) / 1000.0
                        if left_s <= 0:
                            break
                        self._cond.wait(left_s)
                    self._returned.pop(request_id, None)
                    work = self._work.pop(request_id, [])
                started = self._wall_ms()
                if work:
                    self._run(work, until_ms)
                    self.last_phase = (request_id, self._wall_ms() - started)
        except (RuntimeApiError, ValueError) as exc:
            self._stopped = True
            self._fail("internal_error", f"the post-response extension stopped: {exc}; the "
                       "preload now finishes before the response")
