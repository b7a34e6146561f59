"""The Lambda Runtime API and Extensions API of one execution environment, on 127.0.0.1:PORT.

Every execution environment gets its own server; its address is the environment's
``AWS_LAMBDA_RUNTIME_API``. The runtime (the home-made :mod:`infra.local.bootstrap` or AWS's
``awslambdaric``) and every extension talk plain HTTP to it, exactly as on Lambda:

Runtime API (2018-06-01)
    ``GET /runtime/invocation/next`` (long poll; the event as body, headers
    ``Lambda-Runtime-Aws-Request-Id``, ``-Deadline-Ms``, ``-Invoked-Function-Arn``, ``-Trace-Id``,
    ``-Client-Context``), ``POST /runtime/invocation/{id}/response`` and ``/error``
    (``Lambda-Runtime-Function-Error-Type``), ``POST /runtime/init/error``,
    ``POST /runtime/restore/error`` (SnapStart after-restore hooks failed). Answers: 202
    ``{"status": "OK"}``; 400 ``InvalidRequestID`` for an unknown request id; 403
    ``InvalidStateTransition`` for a second answer to one invocation or an init error after
    init; 413 ``RequestEntityTooLarge`` for a response over 6,291,556 bytes (the invocation then
    fails with ``Function.ResponseSizeTooLarge``).
Streaming mode (``POST .../response`` with ``Lambda-Runtime-Function-Response-Mode: streaming``)
    the body is read as it comes (``Transfer-Encoding: chunked``, decoded incrementally) and each
    piece is handed to the invocation's consumer (:attr:`Invocation.on_chunk`) at once; the
    trailers ``Lambda-Runtime-Function-Error-Type`` / ``-Error-Body`` end it with an error. A
    stream over ``max_stream_bytes`` (AWS: 200 MB) fails with ``Function.ResponseSizeTooLarge``:
    413, the connection closed, the rest not read. Past its first 6 MB a stream is read at
    ``stream_bytes_per_s`` at most (AWS: 2 MB/s; the runtime's writes then block, as on
    Lambda). A buffered answer sent chunked is read whole.
Extensions API (2020-01-01)
    ``POST /extension/register`` (``Lambda-Extension-Name`` = the extension's file name, body
    ``{"events": ["INVOKE", "SHUTDOWN"]}``; 200 with ``Lambda-Extension-Identifier`` and
    ``{"functionName", "functionVersion", "handler"}``, plus ``accountId`` when asked with
    ``Lambda-Extension-Accept-Feature: accountId``), ``GET /extension/event/next``
    (``Lambda-Extension-Identifier``; an ``INVOKE`` event ``{"eventType", "deadlineMs",
    "requestId", "invokedFunctionArn", "tracing"}`` or ``SHUTDOWN`` ``{"eventType",
    "shutdownReason", "deadlineMs"}``), ``POST /extension/init/error`` and
    ``/extension/exit/error`` (``Lambda-Extension-Function-Error-Type``). Refusals are 403 with
    ``{"errorMessage", "errorType"}``: ``Extension.RegistrationClosed`` (after the init phase),
    ``Extension.AlreadyRegistered`` (a name registered twice), ``Extension.TooManyExtensions``
    (more than 10), ``Extension.InvalidEventType``, ``ShutdownEventNotSupportedForInternalExtension``
    (an internal extension, i.e. one the emulator did not start, asked for SHUTDOWN),
    ``Extension.UnknownExtensionIdentifier``; 400 ``InvalidRequest`` for a missing name or a
    body that is not JSON.

Semantics (from the docs below): the init phase ends when the runtime and every registered
extension have called ``next``; the invoke phase ends when the runtime has answered, and it and
every extension wait on ``next`` again (only then is the environment frozen); the function
timeout bounds the whole invoke phase; ``SHUTDOWN`` goes to the external extensions that asked
for it, with a deadline of 2,000 ms (300 ms without external extensions).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html (Lambda Runtime API)
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html (Lambda Extensions
API: lifecycle, limits, 10 extensions, internal extensions may not register for Shutdown)
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from functions.runtime import stream_runtime as wire
from functions.runtime import streaming
from infra.local.httpserver import LocalHTTPServer, serve_in_background, shutdown

_LOG = logging.getLogger("warmstart.local.runtime_api")
RUNTIME = "/2018-06-01/runtime"
EXTENSION = "/2020-01-01/extension"
#: Response payload limit of a synchronous invocation, bytes, as Lambda's error names it
#: ("Response payload size exceeded maximum allowed payload size (6291556 bytes)").
#: References: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
MAX_RESPONSE_BYTES = 6_291_556
#: Extensions per function. References: runtimes-extensions-api.html ("up to 10 extensions")
MAX_EXTENSIONS = 10
#: Shutdown phase limits. References: runtimes-extensions-api.html, "Shutdown phase"
SHUTDOWN_MS_EXTERNAL = 2000
SHUTDOWN_MS_NONE = 300
EVENT_TYPES = ("INVOKE", "SHUTDOWN")
#: How often a waiting emulator thread checks that the environment's process still lives (s).
_POLL_S = 0.05

Phase = Literal["init", "idle", "invoke", "shutdown", "closed"]


class RuntimeApiHttpError(Exception):
    """An HTTP answer other than success: ``status`` and the ``errorType`` of its body."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


@dataclass
class Invocation:
    """One invocation handed to the runtime, and its answer once posted."""

    request_id: str
    event: bytes
    deadline_ms: int
    invoked_function_arn: str
    client_context: str | None = None
    trace_id: str = ""
    outcome: Literal["response", "error"] | None = None
    body: bytes | bytearray = b""
    error_type: str | None = None
    taken: bool = False
    #: time.perf_counter() when the runtime posted the answer (a stream: when it ended)
    answered_at: float = 0.0
    #: the runtime answers in the Runtime API's streaming mode (``body`` collects the first
    #: ``MAX_RESPONSE_BYTES + 1`` bytes of the stream, prelude included)
    streaming: bool = False
    stream_done: bool = False
    stream_bytes: int = 0
    trailers: dict[str, str] = field(default_factory=dict)
    #: ``(error type, error object)`` when the stream failed after it started
    stream_error: tuple[str, dict[str, Any]] | None = None
    #: the runtime's connection ended before the stream's last chunk (it may be exiting)
    stream_cut: bool = False
    first_byte_at: float = 0.0  #: time.perf_counter() of the answer's first byte
    capped_since: float = 0.0  #: time.perf_counter() when the stream passed its uncapped bytes
    last_byte_at: float = 0.0
    #: called with each piece of a streamed answer as it is read (from the request's thread)
    on_chunk: Callable[[bytes], None] | None = None
    #: the largest stream this invocation takes (a buffered caller: ``MAX_RESPONSE_BYTES``);
    #: None: the server's ``max_stream_bytes``
    max_stream_bytes: int | None = None


@dataclass
class Extension:
    """A registered extension: ``waiting`` while it blocks on ``event/next`` with nothing queued."""

    id: str
    name: str
    events: frozenset[str]
    external: bool
    waiting: bool = False
    queued: list[dict[str, Any]] = field(default_factory=list)
    last_next_at: float = 0.0  #: time.perf_counter() of its latest ``event/next``


class RuntimeApiServer:
    """The Runtime and Extensions API of one execution environment.

    Parameters
    ----------
    function_name, function_version, handler : str
        What ``register`` answers (``functionName``, ``functionVersion``, ``handler``).
    account_id : str
    external_names : frozenset of str
        File names of the external extensions the emulator started for this environment;
        any other registration is an internal extension (no ``SHUTDOWN``).
    label : str
        For log lines (function name and environment id).
    max_stream_bytes : int
        Largest streamed answer, bytes (AWS: 200 MB).
    stream_bytes_per_s : float or None
        Bandwidth of a stream past its first 6 MB, bytes per second (AWS: 2 MB/s); None: no cap.
    """

    def __init__(self, function_name: str, function_version: str, handler: str, account_id: str,
                 *, external_names: frozenset[str] = frozenset(), label: str = "",
                 max_stream_bytes: int = streaming.MAX_STREAMED_RESPONSE_BYTES,
                 stream_bytes_per_s: float | None = streaming.CAPPED_STREAM_BYTES_PER_S) -> None:
        self.max_stream_bytes = max_stream_bytes
        self.stream_bytes_per_s = stream_bytes_per_s
        self.info = {"functionName": function_name, "functionVersion": function_version,
                     "handler": handler}
        self.account_id = account_id
        self.external_names = external_names
        self.label = label
        self.phase: Phase = "init"
        self.cond = threading.Condition()
        self.runtime_waiting = False
        self.runtime_next_at = 0.0
        self.init_error: dict[str, Any] | None = None
        self.fatal_error: dict[str, Any] | None = None  # an extension's exit/error
        self.invocation: Invocation | None = None
        self.extensions: dict[str, Extension] = {}
        self.refusals: list[str] = []  # errorType of every refused call, for tests and logs
        self._server: LocalHTTPServer | None = None
        self._address = ""
        self._thread: threading.Thread | None = None

    # ---- server ---------------------------------------------------------------------------
    def start(self) -> str:
        """Serve on an ephemeral port; returns ``host:port`` (``AWS_LAMBDA_RUNTIME_API``)."""
        self._server, self._thread = serve_in_background("127.0.0.1", 0, _handler_for(self),
                                                         f"runtime-api-{self.label}")
        host, port = self._server.server_address[:2]
        self._address = f"{host!s}:{port}"
        return self._address

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` once started, else an empty string."""
        return self._address

    def close(self) -> None:
        """Stop serving: calls blocked on ``next`` get 500 (container error); safe twice."""
        with self.cond:
            self.phase = "closed"
            self.cond.notify_all()
        server, self._server = self._server, None
        if server is not None:
            shutdown(server, self._thread, timeout_s=2.0)

    # ---- the emulator's side --------------------------------------------------------------
    def _all_extensions_waiting(self) -> bool:
        return all(e.waiting and not e.queued for e in self.extensions.values())

    def _wait(self, done: Callable[[], bool], deadline: float, alive: Callable[[], bool]) -> bool:
        """Wait (holding ``cond``) until ``done()``; False at ``deadline`` (perf_counter) or when
        the process is gone or the server closed."""
        while not done():
            left = deadline - time.perf_counter()
            if left <= 0 or self.phase == "closed" or not alive():
                return done()
            self.cond.wait(min(left, _POLL_S))
        return True

    def wait_init(self, timeout_s: float, alive: Callable[[], bool]) -> Literal["ready", "error", "timeout", "exited"]:
        """Block until the init phase ends: the runtime and every extension wait on ``next``
        (``ready``), the runtime or an extension reported an init error (``error``: see
        :attr:`init_error`), the process ended (``exited``) or ``timeout_s`` passed."""
        deadline = time.perf_counter() + timeout_s
        with self.cond:
            ok = self._wait(lambda: self.init_error is not None
                            or (self.runtime_waiting and self._all_extensions_waiting()),
                            deadline, alive)
            if self.init_error is not None:
                return "error"
            if ok:
                self.phase = "idle"
                return "ready"
            return "timeout" if alive() and self.phase != "closed" else "exited"

    def start_invocation(self, invocation: Invocation) -> None:
        """Hand ``invocation`` to the runtime's ``next`` and ``INVOKE`` to the extensions."""
        with self.cond:
            if self.phase != "idle":
                raise RuntimeError(f"environment {self.label} is {self.phase}, not idle")
            self.phase = "invoke"
            self.invocation = invocation
            event = {"eventType": "INVOKE", "deadlineMs": invocation.deadline_ms,
                     "requestId": invocation.request_id,
                     "invokedFunctionArn": invocation.invoked_function_arn,
                     "tracing": {"type": "X-Amzn-Trace-Id", "value": invocation.trace_id}}
            for ext in self.extensions.values():
                if "INVOKE" in ext.events:
                    ext.queued.append(event)
            self.cond.notify_all()

    def wait_answer(self, deadline: float, alive: Callable[[], bool]) -> bool:
        """Block until the runtime posted the current invocation's response or error
        (True), or until ``deadline`` (perf_counter), the process ending or the server closing."""
        with self.cond:
            current = self.invocation
            assert current is not None
            return self._wait(lambda: current.outcome is not None, deadline, alive)

    def wait_stream_end(self, deadline: float, alive: Callable[[], bool]) -> bool:
        """After a streamed answer started: block until it ended (True: its last chunk, an error,
        the size limit), or until ``deadline`` (perf_counter), the process ending or the server
        closing."""
        with self.cond:
            current = self.invocation
            assert current is not None
            return self._wait(lambda: current.stream_done, deadline, alive)

    def wait_runtime_next(self, deadline: float, alive: Callable[[], bool]) -> bool:
        """After the answer: block until the runtime waits on ``next`` again (True), or until
        ``deadline`` (perf_counter) or the process ends."""
        with self.cond:
            return self._wait(lambda: self.runtime_waiting, deadline, alive)

    def invoke_done(self) -> bool:
        with self.cond:
            return self._invoke_done()

    def _invoke_done(self) -> bool:
        inv = self.invocation
        return (inv is not None and inv.outcome is not None and self.runtime_waiting
                and self._all_extensions_waiting())

    def wait_invoke_done(self, deadline: float, alive: Callable[[], bool]) -> float | None:
        """Block until the invoke phase ends (the runtime answered and it and every extension
        wait on ``next``); returns the perf_counter time it ended, else ``None`` (deadline,
        process gone). On success the environment is idle again."""
        with self.cond:
            if not self._wait(self._invoke_done, deadline, alive):
                return None
            ended = max([self.runtime_next_at] + [e.last_next_at for e in self.extensions.values()])
            self.phase = "idle"
            self.invocation = None
            return ended

    def late_extensions(self) -> list[str]:
        """Names of the extensions that have not called ``next`` since the current event."""
        with self.cond:
            return [e.name for e in self.extensions.values() if not (e.waiting and not e.queued)]

    def shutdown_deadline_ms(self) -> int:
        with self.cond:
            external = any(e.external for e in self.extensions.values())
        return SHUTDOWN_MS_EXTERNAL if external else SHUTDOWN_MS_NONE

    def send_shutdown(self, reason: Literal["spindown", "timeout", "failure"],
                      alive: Callable[[], bool]) -> list[str]:
        """Send ``SHUTDOWN`` to the extensions registered for it and wait until each has called
        ``next`` again, within the documented deadline. Returns the names that did not."""
        with self.cond:
            targets = [e for e in self.extensions.values() if "SHUTDOWN" in e.events]
            if not targets or self.phase == "closed":
                return []
            limit_ms = SHUTDOWN_MS_EXTERNAL
            deadline = time.perf_counter() + limit_ms / 1000.0
            event = {"eventType": "SHUTDOWN", "shutdownReason": reason,
                     "deadlineMs": int(time.time() * 1000) + limit_ms}
            self.phase = "shutdown"
            for ext in targets:
                ext.queued.append(event)
            self.cond.notify_all()
            self._wait(lambda: all(e.waiting and not e.queued for e in targets), deadline, alive)
            return [e.name for e in targets if not (e.waiting and not e.queued)]

    # ---- the HTTP side (called from request threads) --------------------------------------
    def runtime_next(self) -> Invocation:
        with self.cond:
            if self.phase == "invoke" and self.invocation is not None and self.invocation.taken \
                    and self.invocation.outcome is None:
                # the runtime asked for more work without answering: Lambda counts that as
                # an error of the invocation
                inv = self.invocation
                inv.outcome, inv.error_type = "error", "Runtime.NoResponse"
                inv.body = json.dumps({"errorMessage": "the runtime called next without "
                                       "answering the invocation", "errorType": "Runtime.NoResponse"}).encode()
                inv.answered_at = time.perf_counter()
            self.runtime_waiting = True
            self.runtime_next_at = time.perf_counter()
            self.cond.notify_all()
            while True:
                pending = self.invocation
                if self.phase == "invoke" and pending is not None and not pending.taken:
                    pending.taken = True
                    self.runtime_waiting = False
                    return pending
                if self.phase == "closed":
                    raise RuntimeApiHttpError(500, "Runtime.ContainerError", "the environment is shutting down")
                self.cond.wait()

    def runtime_answer(self, request_id: str, outcome: Literal["response", "error"], body: bytes,
                       error_type: str | None) -> None:
        with self.cond:
            inv = self._answerable(request_id)
            if len(body) > MAX_RESPONSE_BYTES:
                inv.outcome, inv.error_type = "error", "Function.ResponseSizeTooLarge"
                inv.body = json.dumps({
                    "errorMessage": "Response payload size exceeded maximum allowed payload size "
                                    f"({MAX_RESPONSE_BYTES} bytes).",
                    "errorType": "Function.ResponseSizeTooLarge"}).encode()
                inv.answered_at = time.perf_counter()
                self.cond.notify_all()
                raise RuntimeApiHttpError(413, "RequestEntityTooLarge", "response too large")
            inv.outcome, inv.body, inv.error_type = outcome, body, error_type
            inv.answered_at = inv.first_byte_at = inv.last_byte_at = time.perf_counter()
            self.cond.notify_all()

    def _answerable(self, request_id: str) -> Invocation:
        inv = self.invocation
        if inv is None or inv.request_id != request_id or not inv.taken:
            raise RuntimeApiHttpError(400, "InvalidRequestID", f"Invalid request ID: {request_id!r}")
        if inv.outcome is not None:
            raise RuntimeApiHttpError(403, "InvalidStateTransition",
                                  f"invocation {request_id} has already been answered")
        return inv

    def stream_begin(self, request_id: str) -> Invocation:
        """The runtime starts a streamed answer (refused as :meth:`runtime_answer` refuses)."""
        with self.cond:
            inv = self._answerable(request_id)
            inv.outcome, inv.streaming, inv.body = "response", True, bytearray()
            inv.answered_at = time.perf_counter()
            self.cond.notify_all()
            return inv

    def stream_chunk(self, inv: Invocation, data: bytes) -> bool:
        """One piece of a streamed answer: counted, kept (the first 6 MB) and handed to the
        consumer. False when the stream has ended (the size limit, reached now or before; the
        invocation timed out): the caller stops reading."""
        with self.cond:
            if inv.stream_done:
                return False
            limit = inv.max_stream_bytes or self.max_stream_bytes
            if inv.stream_bytes + len(data) > limit:
                message = f"Response payload size exceeded maximum allowed payload size ({limit} bytes)."
                self._end_stream(inv, None, ("Function.ResponseSizeTooLarge", {
                    "errorMessage": message, "errorType": "Function.ResponseSizeTooLarge"}))
                return False
            now = time.perf_counter()
            inv.first_byte_at = inv.first_byte_at or now
            inv.last_byte_at = now
            inv.stream_bytes += len(data)
            if not inv.capped_since and inv.stream_bytes > streaming.UNCAPPED_STREAM_BYTES:
                inv.capped_since = now
            kept = inv.body
            if isinstance(kept, bytearray) and len(kept) <= MAX_RESPONSE_BYTES:
                kept += data[:MAX_RESPONSE_BYTES + 1 - len(kept)]
            consumer = inv.on_chunk
            wait_s = capped_wait_s(inv.stream_bytes, now - inv.capped_since, self.stream_bytes_per_s)
        if consumer is not None:
            consumer(data)
        until = time.perf_counter() + wait_s
        while not inv.stream_done and (left := until - time.perf_counter()) > 0:
            time.sleep(min(left, _POLL_S))  # the bandwidth cap: the runtime's writes block
        return True

    def stream_end(self, inv: Invocation, trailers: dict[str, str] | None = None,
                   error: tuple[str, dict[str, Any]] | None = None) -> None:
        """A streamed answer ended: its trailers (an error in them), or ``error``; the first end
        counts (a later one, e.g. the connection closing after a timeout, is ignored)."""
        with self.cond:
            self._end_stream(inv, trailers, error)

    def _end_stream(self, inv: Invocation, trailers: dict[str, str] | None,
                    error: tuple[str, dict[str, Any]] | None) -> None:
        if inv.stream_done:
            return
        inv.trailers = dict(trailers or {})
        inv.stream_error = error or streaming.read_error_trailers(inv.trailers)
        inv.stream_done = True
        inv.answered_at = time.perf_counter()
        if inv.stream_error is not None:
            inv.error_type = inv.stream_error[0]
        self.cond.notify_all()

    def runtime_init_error(self, body: bytes, error_type: str | None) -> None:
        with self.cond:
            if self.phase != "init":
                raise RuntimeApiHttpError(403, "InvalidStateTransition", "the init phase has ended")
            self.init_error = _error_object(body, error_type or "Runtime.Unknown")
            self.cond.notify_all()

    def register(self, name: str | None, body: bytes, accept_feature: str | None) -> tuple[str, dict[str, Any]]:
        if not name:
            raise RuntimeApiHttpError(400, "InvalidRequest", "the Lambda-Extension-Name header is required")
        try:
            data = json.loads(body or b"{}")
            events = data.get("events") or []
            if not isinstance(events, list):
                raise TypeError("events must be a list")
        except (ValueError, TypeError, AttributeError) as exc:
            raise RuntimeApiHttpError(400, "InvalidRequest", f"bad register body: {exc}") from exc
        external = name in self.external_names
        with self.cond:
            if self.phase != "init":
                raise RuntimeApiHttpError(403, "Extension.RegistrationClosed",
                                      f"{name}: extensions register during the init phase only")
            for event in events:
                if event not in EVENT_TYPES:
                    raise RuntimeApiHttpError(403, "Extension.InvalidEventType", f"{name}: event {event!r}")
                if event == "SHUTDOWN" and not external:
                    raise RuntimeApiHttpError(403, "ShutdownEventNotSupportedForInternalExtension",
                                          f"{name}: internal extensions cannot register for SHUTDOWN")
            if any(e.name == name for e in self.extensions.values()):
                raise RuntimeApiHttpError(403, "Extension.AlreadyRegistered", f"{name} is already registered")
            if len(self.extensions) >= MAX_EXTENSIONS:
                raise RuntimeApiHttpError(403, "Extension.TooManyExtensions",
                                      f"at most {MAX_EXTENSIONS} extensions per function")
            ext = Extension(str(uuid.uuid4()), name, frozenset(events), external)
            self.extensions[ext.id] = ext
            self.cond.notify_all()
        answer = dict(self.info)
        if accept_feature and "accountId" in accept_feature:
            answer["accountId"] = self.account_id
        _LOG.info("%s: %s extension %s registered for %s", self.label,
                  "external" if external else "internal", name, sorted(events))
        return ext.id, answer

    def _extension(self, ext_id: str | None) -> Extension:
        ext = self.extensions.get(ext_id or "")
        if ext is None:
            raise RuntimeApiHttpError(403, "Extension.UnknownExtensionIdentifier",
                                  f"unknown Lambda-Extension-Identifier {ext_id!r}")
        return ext

    def extension_next(self, ext_id: str | None) -> dict[str, Any]:
        with self.cond:
            ext = self._extension(ext_id)
            ext.waiting = True
            ext.last_next_at = time.perf_counter()
            self.cond.notify_all()
            while not ext.queued:
                if self.phase == "closed":
                    raise RuntimeApiHttpError(500, "Extension.ContainerError", "the environment is shutting down")
                self.cond.wait()
            ext.waiting = False
            return ext.queued.pop(0)

    def extension_error(self, ext_id: str | None, kind: Literal["init", "exit"], body: bytes,
                        error_type: str | None) -> None:
        with self.cond:
            ext = self._extension(ext_id)
            error = _error_object(body, error_type or "Extension.Unknown")
            error.setdefault("errorMessage", f"extension {ext.name} reported an {kind} error")
            if kind == "init" and self.phase == "init":
                self.init_error = error
            else:
                self.fatal_error = error
            _LOG.warning("%s: extension %s reported an %s error: %s", self.label, ext.name, kind,
                         error.get("errorType"))
            self.cond.notify_all()


def capped_wait_s(streamed_bytes: int, capped_for_s: float, bytes_per_s: float | None,
                  uncapped_bytes: int = streaming.UNCAPPED_STREAM_BYTES) -> float:
    """Seconds a stream waits before its next bytes so that the bytes past its first
    ``uncapped_bytes`` go at ``bytes_per_s`` at most.

    Parameters
    ----------
    streamed_bytes : int
        Bytes streamed so far.
    capped_for_s : float
        Seconds since the stream passed ``uncapped_bytes`` (0 before).
    bytes_per_s : float or None
        The cap (AWS: 2 MB/s); None: no cap.
    uncapped_bytes : int
        AWS: the first 6 MB are uncapped.

    Returns
    -------
    float
        0 below the threshold, without a cap, or when the stream is behind the cap's pace.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html
    """
    if bytes_per_s is None or streamed_bytes <= uncapped_bytes:
        return 0.0
    return max(0.0, (streamed_bytes - uncapped_bytes) / bytes_per_s - capped_for_s)


def _error_object(body: bytes, error_type: str) -> dict[str, Any]:
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        data = {"errorMessage": body.decode("utf-8", "replace")}
    if not isinstance(data, dict):
        data = {"errorMessage": str(data)}
    data.setdefault("errorType", error_type)
    data.setdefault("errorMessage", "")
    data.setdefault("stackTrace", [])
    return data


def _handler_for(api: RuntimeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the runtime clients expect

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            import socket
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _chunked(self) -> bool:
            return "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()

        def _body(self) -> bytes:
            if self._chunked():  # a buffered answer may be sent chunked too: read it whole
                body = b"".join(wire.read_chunks(self.rfile))
                wire.read_trailers(self.rfile)
                return body
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _stream(self, request_id: str) -> None:
            """A streamed answer: each piece to the consumer as it is read, then the trailers."""
            try:
                inv = api.stream_begin(request_id)
            except RuntimeApiHttpError as exc:
                self.close_connection = True  # its body is not read
                self._refuse(exc)
                return
            chunked = self._chunked()
            try:
                if chunked:
                    pieces: Any = wire.read_chunks(self.rfile)
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    pieces = [self.rfile.read(length)] if length else []
                for piece in pieces:
                    if not api.stream_chunk(inv, piece):
                        break
                else:
                    api.stream_end(inv, wire.read_trailers(self.rfile) if chunked else {})
                    self._accepted()
                    return
            except (OSError, ValueError) as exc:
                # the runtime's connection ended (or broke the framing) before the last chunk
                inv.stream_cut = True
                api.stream_end(inv, error=("Runtime.StreamError", {
                    "errorType": "Runtime.StreamError",
                    "errorMessage": f"the response stream ended before its last chunk: {exc}"}))
                self.close_connection = True
                return
            # stopped reading: over the size limit, or the invocation has ended (timeout)
            self.close_connection = True
            error = inv.stream_error
            if error is not None and error[0] == "Function.ResponseSizeTooLarge":
                self._refuse(RuntimeApiHttpError(413, error[0], str(error[1].get("errorMessage"))))

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            buffer: list[bytes] = getattr(self, "_headers_buffer", [])  # what send_header() wrote
            head = b"".join([*buffer, b"\r\n"])
            buffer.clear()
            try:
                self.wfile.write(head + body)  # one segment: status, headers and body
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the process went away (ended environment)

        def _refuse(self, exc: RuntimeApiHttpError) -> None:
            with api.cond:
                api.refusals.append(exc.error_type)
            log = _LOG.debug if exc.status == 500 else _LOG.warning  # 500: the environment ends
            log("%s: %s %s refused: %s %s (%s)", api.label, self.command, self.path,
                         exc.status, exc.error_type, exc.message)
            self._send(exc.status, json.dumps({"errorMessage": exc.message,
                                               "errorType": exc.error_type}).encode())

        def _accepted(self) -> None:
            self._send(202, b'{"status":"OK"}')

        def do_GET(self) -> None:
            try:
                if self.path == f"{RUNTIME}/invocation/next":
                    inv = api.runtime_next()
                    headers = {"Lambda-Runtime-Aws-Request-Id": inv.request_id,
                               "Lambda-Runtime-Deadline-Ms": str(inv.deadline_ms),
                               "Lambda-Runtime-Invoked-Function-Arn": inv.invoked_function_arn,
                               "Lambda-Runtime-Trace-Id": inv.trace_id}
                    if inv.client_context:
                        headers["Lambda-Runtime-Client-Context"] = inv.client_context
                    self._send(200, inv.event, headers)
                elif self.path == f"{EXTENSION}/event/next":
                    ext_id = self.headers.get("Lambda-Extension-Identifier")
                    event = api.extension_next(ext_id)
                    self._send(200, json.dumps(event).encode(),
                               {"Lambda-Extension-Identifier": ext_id or "",
                                "Lambda-Extension-Event-Identifier": str(uuid.uuid4())})
                else:
                    self._refuse(RuntimeApiHttpError(404, "InvalidRequest", f"no such path {self.path}"))
            except RuntimeApiHttpError as exc:
                self._refuse(exc)

        def do_POST(self) -> None:
            path = self.path
            if path.startswith(f"{RUNTIME}/invocation/") and path.endswith("/response") and \
                    (self.headers.get(streaming.RESPONSE_MODE_HEADER) or "").lower() == "streaming":
                self._stream(path[len(f"{RUNTIME}/invocation/"):].rpartition("/")[0])
                return
            body = self._body()
            try:
                if path.startswith(f"{RUNTIME}/invocation/") and path.endswith(("/response", "/error")):
                    request_id, _, kind = path[len(f"{RUNTIME}/invocation/"):].rpartition("/")
                    if kind == "response":
                        api.runtime_answer(request_id, "response", body, None)
                    else:
                        error_type = self.headers.get("Lambda-Runtime-Function-Error-Type")
                        api.runtime_answer(request_id, "error", body, error_type)
                    self._accepted()
                elif path in (f"{RUNTIME}/init/error", f"{RUNTIME}/restore/error"):
                    api.runtime_init_error(body, self.headers.get("Lambda-Runtime-Function-Error-Type"))
                    self._accepted()
                elif path == f"{EXTENSION}/register":
                    ext_id, answer = api.register(self.headers.get("Lambda-Extension-Name"), body,
                                                  self.headers.get("Lambda-Extension-Accept-Feature"))
                    self._send(200, json.dumps(answer).encode(), {"Lambda-Extension-Identifier": ext_id})
                elif path in (f"{EXTENSION}/init/error", f"{EXTENSION}/exit/error"):
                    stage: Literal["init", "exit"] = "init" if path.endswith("/init/error") else "exit"
                    api.extension_error(self.headers.get("Lambda-Extension-Identifier"), stage, body,
                                        self.headers.get("Lambda-Extension-Function-Error-Type"))
                    self._accepted()
                else:
                    self._refuse(RuntimeApiHttpError(404, "InvalidRequest", f"no such path {path}"))
            except RuntimeApiHttpError as exc:
                self._refuse(exc)

    return Handler
