"""warmstart's Lambda runtime client: awslambdaric's loop, plus the Runtime API's streaming mode.

No maintained Python runtime interface client streams a response (awslambdaric 4.2.2 has no
streaming mode: aws/aws-lambda-python-runtime-interface-client#100), so this module is the
runtime of a function that streams. On Lambda's managed python3.12/3.13 runtime it is started
by the exec wrapper next to it (``AWS_LAMBDA_EXEC_WRAPPER=/var/task/functions/runtime/
warmstart-stream``), which runs ``python3 -m functions.runtime.stream_runtime`` in
``LAMBDA_TASK_ROOT``. Standard library only and no ``http.client`` (it imports ``ssl`` and
``email``: ~40 ms at every cold start); the HTTP it needs is written on a plain socket.

The loop (:func:`main`):

1. :func:`functions.runtime.streaming.mark_runtime_streams`, then the handler from ``_HANDLER``
   is imported (the init phase); an import failure goes to ``POST /runtime/init/error`` with
   awslambdaric's error types and the process exits 1. Under SnapStart
   (``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start``) the before-snapshot hooks run, then
   ``GET /runtime/restore/next``, then the after-restore hooks (snapshot-restore-py), as
   awslambdaric does.
2. ``GET /runtime/invocation/next``; ``_X_AMZN_TRACE_ID`` is set from
   ``Lambda-Runtime-Trace-Id``; the handler gets the event and a :class:`InvocationContext`.
3. A :class:`~functions.runtime.streaming.StreamedResponse` is posted in streaming mode
   (:func:`post_stream`); anything else is posted buffered exactly as awslambdaric does
   (:func:`marshal_response`: JSON, ``bytes`` as ``application/unknown``; a handler's exception
   to ``/error`` with awslambdaric's error object and X-Ray error cause).
4. Until the Runtime API goes away (connection refused, 500): then the process exits.

Logging: once the process has imported :mod:`logging` (this client never imports it: it costs
the init), the root logger gets awslambdaric's text handler: ``[LEVEL]\ttime\trequest id\t
message`` on stdout, level from ``AWS_LAMBDA_LOG_LEVEL`` (checked after the init and at each
invocation; a root logger that already has a handler is left as it is). stdout and stderr are
line-buffered (awslambdaric makes them unbuffered) and flushed before each answer.

``SIGTERM`` (Lambda sends it to the runtime when extensions are registered, before the end of
the environment) raises ``SystemExit`` in the main thread, so ``atexit`` hooks run and a stream
being written is closed (:meth:`StreamedResponse.close`); a handler that installs its own
``SIGTERM`` handler and calls the previous one keeps this behaviour.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html (response streaming)
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-modify.html (wrapper scripts)
https://docs.aws.amazon.com/lambda/latest/dg/python-context.html (the context object)
https://github.com/aws/aws-lambda-python-runtime-interface-client (awslambdaric 4.2.2:
bootstrap.py, lambda_context.py, lambda_runtime_marshaller.py)
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

from functions.runtime import streaming
from functions.runtime.streaming import StreamedResponse, StreamOutcome

RUNTIME = "/2018-06-01/runtime"
ERROR_TYPE_HEADER = "Lambda-Runtime-Function-Error-Type"
XRAY_ERROR_HEADER = "Lambda-Runtime-Function-XRay-Error-Cause"
#: awslambdaric drops an X-Ray error cause of 1 MiB or more (lambda_runtime_client.py).
MAX_XRAY_CAUSE_BYTES = 1024 * 1024
#: Headers of a streamed answer (the Runtime API's streaming mode, HTTP-integration body).
STREAM_HEADERS = {
    streaming.RESPONSE_MODE_HEADER: "streaming",
    "Transfer-Encoding": "chunked",
    "Content-Type": streaming.HTTP_INTEGRATION_CONTENT_TYPE,
    "Trailer": f"{streaming.ERROR_TYPE_TRAILER}, {streaming.ERROR_BODY_TRAILER}",
}
#: The runtime environments where awslambdaric writes JSON with ``ensure_ascii=False``.
_UNICODE_ENVS = frozenset(f"AWS_Lambda_python3.{m}" for m in (12, 13, 14, 15))
_HERE = os.path.abspath(__file__)
#: awslambdaric's text log format (bootstrap.py, ``_setup_logging``).
LOG_FORMAT = "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s\n"
#: The invocation being served (for log records) and whether logging has been set up.
_state: dict[str, Any] = {"request_id": "", "logging": False}


# ---- the context object ---------------------------------------------------------------------
class InvocationContext:
    """The context object a Python handler gets: the attributes of awslambdaric's
    ``LambdaContext`` (named for what it is here, so the name means one thing in the project).

    Parameters
    ----------
    invoke_id : str
        ``aws_request_id`` (``Lambda-Runtime-Aws-Request-Id``).
    client_context : dict or None
        The parsed ``Lambda-Runtime-Client-Context``; its ``w3c`` entry is taken out and served
        by :meth:`w3c` (its ``traceparent``, ``tracestate``, ``baggage`` strings only).
    cognito_identity : dict or None
        The parsed ``Lambda-Runtime-Cognito-Identity``.
    epoch_deadline_time_in_ms : int
        ``Lambda-Runtime-Deadline-Ms``: the invocation's deadline, epoch milliseconds.
    invoked_function_arn : str or None
    tenant_id : str or None
        ``Lambda-Runtime-Aws-Tenant-Id``.

    Attributes ``function_name``, ``function_version``, ``memory_limit_in_mb`` (a string, as
    awslambdaric reads it), ``log_group_name``, ``log_stream_name`` come from the environment.
    """

    def __init__(self, invoke_id: str, client_context: dict[str, Any] | None,
                 cognito_identity: dict[str, Any] | None, epoch_deadline_time_in_ms: int,
                 invoked_function_arn: str | None = None, tenant_id: str | None = None) -> None:
        env = os.environ
        self.aws_request_id = invoke_id
        self.log_group_name = env.get("AWS_LAMBDA_LOG_GROUP_NAME")
        self.log_stream_name = env.get("AWS_LAMBDA_LOG_STREAM_NAME")
        self.function_name = env.get("AWS_LAMBDA_FUNCTION_NAME")
        self.memory_limit_in_mb = env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
        self.function_version = env.get("AWS_LAMBDA_FUNCTION_VERSION")
        self.invoked_function_arn = invoked_function_arn
        self.tenant_id = tenant_id
        w3c = client_context.pop("w3c", None) if isinstance(client_context, dict) else None
        self._w3c = {k: w3c[k] for k in ("traceparent", "tracestate", "baggage")
                     if isinstance(w3c, dict) and isinstance(w3c.get(k), str)}
        self.client_context = None if client_context is None else ClientContext(client_context)
        self.identity = CognitoIdentity(cognito_identity or {})
        self._epoch_deadline_time_in_ms = epoch_deadline_time_in_ms

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds until the invocation's deadline, 0 once it has passed."""
        return max(0, self._epoch_deadline_time_in_ms - int(time.time() * 1000))

    def w3c(self) -> dict[str, str]:
        """The W3C trace context the invocation came with (a copy)."""
        return dict(self._w3c)

    def log(self, msg: object) -> None:
        sys.stdout.write(str(msg))

    def __repr__(self) -> str:  # awslambdaric's LambdaContext repr, word for word
        return (f"LambdaContext([aws_request_id={self.aws_request_id},function_name="
                f"{self.function_name},function_version={self.function_version},"
                f"invoked_function_arn={self.invoked_function_arn}])")


class _FromDict:
    __slots__: tuple[str, ...] = ()

    def __init__(self, data: Mapping[str, Any]) -> None:
        for name in self.__slots__:
            setattr(self, name, data.get(name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}([{','.join(f'{n}={getattr(self, n)}' for n in self.__slots__)}])"


class Client(_FromDict):
    __slots__ = ("app_package_name", "app_title", "app_version_code", "app_version_name",
                 "installation_id")


class ClientContext(_FromDict):
    __slots__ = ("client", "custom", "env")
    client: Any
    custom: Any
    env: Any

    def __init__(self, data: Mapping[str, Any]) -> None:
        super().__init__(data)
        if self.client is not None:
            self.client = Client(self.client)


class CognitoIdentity:
    __slots__ = ("cognito_identity_id", "cognito_identity_pool_id")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.cognito_identity_id = data.get("cognitoIdentityId")
        self.cognito_identity_pool_id = data.get("cognitoIdentityPoolId")


def context_from_headers(headers: Mapping[str, str]) -> InvocationContext:
    """The :class:`InvocationContext` of an invocation from its ``next`` headers (lower-case keys).

    Raises
    ------
    FaultError
        ``Runtime.LambdaContextUnmarshalError``: a client context or identity that is not JSON.
    """
    return InvocationContext(
        headers.get("lambda-runtime-aws-request-id", ""),
        _json_header(headers.get("lambda-runtime-client-context"), "Client Context"),
        _json_header(headers.get("lambda-runtime-cognito-identity"), "Cognito Identity"),
        int(headers.get("lambda-runtime-deadline-ms") or 0),
        headers.get("lambda-runtime-invoked-function-arn"),
        headers.get("lambda-runtime-aws-tenant-id"))


def _json_header(value: str | None, name: str) -> Any:
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise FaultError("Runtime.LambdaContextUnmarshalError",
                         f"Unable to parse {name} JSON: {exc}") from None


# ---- errors, as awslambdaric shapes them ----------------------------------------------------
class FaultError(Exception):
    """A failure with a Lambda error type (awslambdaric's ``FaultException``)."""

    def __init__(self, error_type: str, message: str, trace: list[str] | None = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.trace = trace or []


def make_error(message: str, error_type: str, stack_trace: list[str],
               request_id: str = "") -> dict[str, Any]:
    """Lambda's error object ``{"errorMessage", "errorType", "requestId", "stackTrace"}``."""
    return {"errorMessage": message or "", "errorType": error_type or "",
            "requestId": request_id, "stackTrace": stack_trace or []}


def _user_frames(exc: BaseException) -> list[tuple[str, int, str, str | None]]:
    """The traceback of ``exc`` from the first frame outside this module (awslambdaric drops
    its own ``bootstrap.py`` frames the same way)."""
    import traceback

    frames = [(f.filename, f.lineno or 0, f.name, f.line) for f in traceback.extract_tb(exc.__traceback__)]
    for i, frame in enumerate(frames):
        if os.path.abspath(frame[0]) != _HERE:
            return frames[i:]
    return frames


def error_from_exception(exc: BaseException, request_id: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """``(error object, X-Ray error cause)`` of a handler's exception, as awslambdaric builds them."""
    import traceback

    if isinstance(exc, FaultError):
        cause = _xray_cause("LambdaValidationError", exc.message, [])
        return make_error(exc.message, exc.error_type, exc.trace, request_id), cause
    frames = _user_frames(exc)
    error = make_error(str(exc), type(exc).__name__, traceback.format_list(frames), request_id)
    return error, _xray_cause(type(exc).__name__, str(exc), frames)


def _xray_cause(error_type: str, message: str, frames: list[tuple[str, int, str, str | None]]) -> dict[str, Any]:
    return {"working_directory": os.getcwd(),
            "exceptions": [{"message": message, "type": error_type,
                            "stack": [{"label": n, "path": f, "line": ln} for f, ln, n, _ in frames]}],
            "paths": list({f for f, *_ in frames})}


def log_error(error: Mapping[str, Any]) -> None:
    """The ``[ERROR] type: message`` log line awslambdaric writes (text format)."""
    lines = [f"[ERROR] {error.get('errorType')}: {error.get('errorMessage')}".rstrip(": "),
             "Traceback (most recent call last):"]
    for element in error.get("stackTrace") or []:
        lines += [line.replace(" ", "\u00a0", len(line) - len(line.lstrip(" ")))
                  for line in str(element).splitlines()]
    sys.stdout.write("\r".join(lines) + "\n")


# ---- marshalling ----------------------------------------------------------------------------
def _default(obj: Any) -> Any:
    import decimal

    if isinstance(obj, decimal.Decimal):
        # awslambdaric writes a Decimal's digits (simplejson RawJSON); the standard library
        # cannot, so an integral Decimal is written exactly and any other as a float
        return float("nan") if obj.is_nan() else int(obj) if obj == obj.to_integral_value() else float(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def to_json(obj: Any) -> str:
    """JSON as awslambdaric writes it: NaN allowed, non-ASCII kept on python3.12 and later."""
    return json.dumps(obj, default=_default, allow_nan=True,
                      ensure_ascii=os.environ.get("AWS_EXECUTION_ENV") not in _UNICODE_ENVS)


def marshal_response(result: Any) -> tuple[bytes, str]:
    """``(body, content type)`` of a buffered answer: ``bytes`` as they are
    (``application/unknown``), anything else as JSON.

    Raises
    ------
    FaultError
        ``Runtime.MarshalError``: the result is not JSON-serializable.
    """
    if isinstance(result, bytes):
        return result, "application/unknown"
    try:
        return to_json(result).encode(), "application/json"
    except (TypeError, ValueError, RecursionError) as exc:
        raise FaultError("Runtime.MarshalError", f"Unable to marshal response: {exc}") from None


def unmarshal_event(body: bytes, content_type: str | None) -> Any:
    """The event: JSON when ``content_type`` is ``application/json`` (the default), else the bytes.

    Raises
    ------
    FaultError
        ``Runtime.UnmarshalError``.
    """
    if (content_type or "application/json") != "application/json":
        return body
    try:
        return json.loads(body)
    except ValueError as exc:
        raise FaultError("Runtime.UnmarshalError", f"Unable to unmarshal input: {exc}") from None


# ---- HTTP to the Runtime API ----------------------------------------------------------------
class RuntimeApiGone(Exception):
    """The Runtime API refused the connection, closed it or answered 500: the environment ends."""


class StreamWriteError(Exception):
    """Writing a streamed answer to the Runtime API failed (the connection went away)."""


class RuntimeConnection:
    """One keep-alive HTTP/1.1 connection to the Runtime API (``host:port``), Nagle off.

    Parameters
    ----------
    address : str
        ``AWS_LAMBDA_RUNTIME_API`` (``127.0.0.1:9001``).
    """

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._host, self._port = host or "127.0.0.1", int(port)
        self._sock: socket.socket | None = None
        self._rfile: Any = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            try:
                sock = socket.create_connection((self._host, self._port))
            except OSError as exc:
                raise RuntimeApiGone(f"cannot connect to the Runtime API {self.address}: {exc}") from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock, self._rfile = sock, sock.makefile("rb")
        return self._sock

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                self._rfile.close()
                sock.close()
            except OSError:
                pass

    def _head(self, method: str, path: str, headers: Mapping[str, str]) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.address}",
                 "User-Agent: warmstart-stream-runtime",
                 *(f"{k}: {v}" for k, v in headers.items())]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def request(self, method: str, path: str, body: bytes = b"",
                headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """Send one request and read its answer: ``(status, headers with lower-case names, body)``.

        A keep-alive connection the server had closed is reopened once.

        Raises
        ------
        RuntimeApiGone
            No connection, or a 5xx answer (the environment is ending).
        """
        fields = dict(headers or {})
        if method != "GET" or body:
            fields["Content-Length"] = str(len(body))
        data = self._head(method, path, fields) + body
        for attempt in (0, 1):
            reused = self._sock is not None
            sock = self._connect()
            try:
                sock.sendall(data)
                answer = self.read_response()
            except (OSError, ValueError) as exc:
                self.close()
                if reused and not attempt:
                    continue
                raise RuntimeApiGone(f"{method} {path}: {exc}") from exc
            if answer[0] >= 500:
                raise RuntimeApiGone(f"{method} {path}: {answer[0]} {answer[2][:200]!r}")
            return answer
        raise AssertionError("unreachable")

    def read_response(self) -> tuple[int, dict[str, str], bytes]:
        """Read one HTTP response; ValueError when it is malformed, OSError when cut."""
        rfile = self._rfile
        line = rfile.readline(65537)
        if not line:
            raise ConnectionResetError("the Runtime API closed the connection")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise ValueError(f"bad status line {line[:80]!r}")
        status = int(parts[1])
        headers = _read_fields(rfile)
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b"".join(read_chunks(rfile))
            _read_fields(rfile)  # trailers
        else:
            length = int(headers.get("content-length") or 0)
            body = rfile.read(length) if length else b""
            if len(body) < length:
                raise ConnectionResetError("the Runtime API closed the connection mid-answer")
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body

    # -- a streamed request ----------------------------------------------------------------
    def start_stream(self, path: str, headers: Mapping[str, str], first: bytes) -> None:
        """Send the head of a chunked ``POST`` and its first chunk, in one write.

        Raises
        ------
        RuntimeApiGone
            No connection to the Runtime API.
        StreamWriteError
            The write failed.
        """
        sock = self._connect()
        try:
            sock.sendall(self._head("POST", path, headers) + _chunk(first))
        except OSError as exc:
            self.close()
            raise StreamWriteError(str(exc)) from exc

    def write_chunk(self, data: bytes) -> None:
        """One HTTP chunk, sent at once (Nagle is off). Raises StreamWriteError."""
        try:
            self._connect().sendall(_chunk(data))
        except (OSError, RuntimeApiGone) as exc:
            self.close()
            raise StreamWriteError(str(exc)) from exc

    def end_stream(self, trailers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        """The last (empty) chunk and the trailers, then the Runtime API's answer.

        Raises
        ------
        StreamWriteError
            The write failed or no answer came.
        """
        tail = "0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in trailers.items()) + "\r\n"
        try:
            self._connect().sendall(tail.encode("latin-1"))
            answer = self.read_response()
        except (OSError, ValueError, RuntimeApiGone) as exc:
            self.close()
            raise StreamWriteError(str(exc)) from exc
        return answer


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _read_fields(rfile: Any) -> dict[str, str]:
    """Header (or trailer) fields up to the blank line, names lower-cased."""
    fields: dict[str, str] = {}
    while True:
        line = rfile.readline(65537)
        if not line:
            raise ConnectionResetError("connection closed in the middle of the header fields")
        if line in (b"\r\n", b"\n"):
            return fields
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ValueError(f"bad header line {line[:80]!r}")
        fields[name.strip().lower()] = value.strip()


def read_chunks(rfile: Any, *, max_piece: int = 1 << 20) -> Iterator[bytes]:
    """Decode ``Transfer-Encoding: chunked`` from a binary file: each chunk's data as it arrives
    (a chunk larger than ``max_piece`` bytes in pieces), until the last (empty) chunk; the
    trailers are left to read (:func:`read_trailers`).

    Raises
    ------
    ValueError
        A chunk-size line that is not hexadecimal.
    ConnectionResetError
        The connection ended before the last chunk.

    References
    ----------
    RFC 9112, section 7.1 (chunked transfer coding)
    """
    while True:
        line = rfile.readline(1024)
        if not line:
            raise ConnectionResetError("connection closed before the last chunk")
        size = int(line.split(b";", 1)[0].strip() or b"x", 16)
        if size == 0:
            return
        while size:
            piece = rfile.read(min(size, max_piece))
            if not piece:
                raise ConnectionResetError("connection closed in the middle of a chunk")
            size -= len(piece)
            yield piece
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise ValueError("chunk data not followed by CRLF")


def read_trailers(rfile: Any) -> dict[str, str]:
    """The trailer fields after the last chunk (names lower-cased)."""
    return _read_fields(rfile)


# ---- posting answers ------------------------------------------------------------------------
def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def post_stream(conn: RuntimeConnection, request_id: str, response: StreamedResponse,
                iterator: Iterator[bytes] | None = None, *,
                max_bytes: int = streaming.MAX_STREAMED_RESPONSE_BYTES,
                clock_ms: Callable[[], float] = _monotonic_ms) -> StreamOutcome:
    """Post ``response`` to ``/runtime/invocation/{request_id}/response`` in streaming mode.

    The prelude goes first (with the request's head), then each chunk of the body as one HTTP
    chunk as soon as the iterator yields it. The stream ends with the last chunk and, when it
    failed after it started, the error trailers: ``Runtime.StreamError`` (the iterator raised;
    the message is the exception's) or ``Function.ResponseSizeTooLarge`` (more than
    ``max_bytes`` of body: the producer is stopped with ``response.close()``). When a write to
    the Runtime API fails, ``response.close()`` is called and the outcome's error is
    ``ClientDisconnected``. ``response.on_finish(outcome)`` is called in every case.

    Parameters
    ----------
    conn : RuntimeConnection
    request_id : str
    response : StreamedResponse
    iterator : iterator of bytes, optional
        ``iter(response)``, when the caller made it already.
    max_bytes : int
        Largest body, bytes (AWS: 200 MB, :data:`~functions.runtime.streaming.MAX_STREAMED_RESPONSE_BYTES`).
    clock_ms : callable
        Monotonic clock in ms, for the outcome's first and last body byte.

    Returns
    -------
    StreamOutcome

    Raises
    ------
    RuntimeApiGone
        The Runtime API cannot be reached at all (the environment is ending).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html (response streaming)
    https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html (200 MB)
    """
    chunks = iter(response) if iterator is None else iterator
    first_ms = last_ms = None
    sent = count = 0
    error: tuple[str, str] | None = None
    closed = False
    try:
        conn.start_stream(f"{RUNTIME}/invocation/{request_id}/response", STREAM_HEADERS,
                          response.prelude())
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - the app's failure ends the stream
                error = ("Runtime.StreamError", str(exc) or type(exc).__name__)
                break
            data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            if not data:
                continue  # an empty HTTP chunk would end the stream
            if sent + len(data) > max_bytes:
                error = ("Function.ResponseSizeTooLarge",
                         f"Response payload size exceeded maximum allowed payload size ({max_bytes} bytes).")
                closed = True
                _close(response)
                break
            conn.write_chunk(data)
            sent += len(data)
            count += 1
            last_ms = clock_ms()
            first_ms = last_ms if first_ms is None else first_ms
        status, _h, body = conn.end_stream(streaming.error_trailers(*error) if error else {})
        if status != 202:
            sys.stderr.write(f"stream_runtime: streamed response answered {status}: {body[:300]!r}\n")
    except StreamWriteError as exc:
        sys.stderr.write(f"stream_runtime: the streamed response to {request_id} was cut: {exc}\n")
        error = ("ClientDisconnected", str(exc))
        if not closed:
            closed = True
            _close(response)
    except BaseException:
        if not closed:  # SIGTERM (SystemExit), the Runtime API gone: the producer stops
            _close(response)
        raise
    finally:
        outcome = StreamOutcome(first_ms, last_ms, sent, count, error[0] if error else None)
        _finish(response, outcome)
    return outcome


def _close(response: StreamedResponse) -> None:
    """Stop the producer; its own failure is logged, never raised (the answer has started)."""
    try:
        response.close()
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write(f"stream_runtime: closing the response failed: {type(exc).__name__}: {exc}\n")


def _finish(response: StreamedResponse, outcome: StreamOutcome) -> None:
    if response.on_finish is None:
        return
    try:
        response.on_finish(outcome)
    except Exception as exc:  # noqa: BLE001 - telemetry never breaks the runtime loop
        sys.stderr.write(f"stream_runtime: on_finish failed: {type(exc).__name__}: {exc}\n")


def post_error(conn: RuntimeConnection, path: str, error: Mapping[str, Any],
               xray_cause: Mapping[str, Any] | None = None, *, error_type: str | None = None) -> None:
    """``POST`` Lambda's error object to ``path`` (``/invocation/{id}/error``, ``/init/error``,
    ``/restore/error``) with ``Lambda-Runtime-Function-Error-Type`` (``error_type``, else the
    object's ``errorType``) and, when it fits in 1 MiB, awslambdaric's
    ``Lambda-Runtime-Function-XRay-Error-Cause``. (awslambdaric 4.2.2 sends no error-type
    header with an invocation's error; the Runtime API documents it, and the emulator reads it.)

    Raises
    ------
    RuntimeApiGone
    """
    headers = {"Content-Type": "application/json",
               ERROR_TYPE_HEADER: error_type or str(error.get("errorType") or "")}
    if xray_cause is not None:
        cause = to_json(xray_cause)
        if len(cause.encode()) < MAX_XRAY_CAUSE_BYTES:
            headers[XRAY_ERROR_HEADER] = cause
    status, _h, body = conn.request("POST", path, to_json(error).encode(), headers)
    if status != 202:
        sys.stderr.write(f"stream_runtime: POST {path} answered {status}: {body[:300]!r}\n")


def serve_invocation(conn: RuntimeConnection, handler: Callable[[Any, Any], Any],
                      headers: Mapping[str, str], body: bytes, *, streams: bool = True) -> None:
    """Run one invocation: the handler, then its answer posted (streamed or buffered).

    Parameters
    ----------
    conn : RuntimeConnection
    handler : callable
        ``handler(event, context)``.
    headers : Mapping[str, str]
        The ``next`` answer's headers, lower-case names.
    body : bytes
        The event.
    streams : bool
        Post a :class:`StreamedResponse` in streaming mode; when False it is marshalled as
        awslambdaric would (a ``Runtime.MarshalError``).

    Raises
    ------
    RuntimeApiGone
    """
    request_id = headers.get("lambda-runtime-aws-request-id", "")
    _state["request_id"] = request_id
    setup_logging()
    trace_id = headers.get("lambda-runtime-trace-id")
    if trace_id is not None:
        os.environ["_X_AMZN_TRACE_ID"] = trace_id
    else:
        os.environ.pop("_X_AMZN_TRACE_ID", None)
    chunks: Iterator[bytes] | None = None
    try:
        result = handler(unmarshal_event(body, headers.get("content-type")),
                         context_from_headers(headers))
        if streams and isinstance(result, StreamedResponse):
            chunks = iter(result)  # before the stream starts: a failure here is a plain error
        else:
            payload, content_type = marshal_response(result)
    except Exception as exc:  # noqa: BLE001 - every handler failure is the invocation's error
        error, cause = error_from_exception(exc, request_id)
        log_error(error)
        _flush()
        post_error(conn, f"{RUNTIME}/invocation/{request_id}/error", error, cause)
        return
    _flush()
    if chunks is not None:
        post_stream(conn, request_id, result, chunks)  # once started, never a second answer
        return
    status, _h, answer = conn.request("POST", f"{RUNTIME}/invocation/{request_id}/response", payload,
                                      {"Content-Type": content_type})
    if status != 202:
        sys.stderr.write(f"stream_runtime: response to {request_id} answered {status}: {answer[:300]!r}\n")


def setup_logging() -> bool:
    """Give the root logger awslambdaric's text handler once :mod:`logging` is loaded.

    Returns
    -------
    bool
        True once done (now or before); False while :mod:`logging` is not imported.
    """
    if _state["logging"]:
        return True
    logging = sys.modules.get("logging")
    if logging is None:
        return False
    _state["logging"] = True
    root = logging.getLogger()
    level = (os.environ.get("AWS_LAMBDA_LOG_LEVEL") or "").upper()
    if level in logging.getLevelNamesMapping():
        root.setLevel(level)
    if root.handlers:  # the handler configured logging itself
        return True

    handler = logging.StreamHandler(sys.stdout)
    handler.terminator = ""  # the format ends the line
    formatter = logging.Formatter(LOG_FORMAT, "%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    handler.addFilter(_with_request_id)
    root.addHandler(handler)
    return True


def _with_request_id(record: Any) -> bool:
    record.aws_request_id = _state["request_id"]
    return True


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def serve(conn: RuntimeConnection, handler: Callable[[Any, Any], Any], *, streams: bool = True) -> None:
    """The runtime loop: ``next``, :func:`serve_invocation`; returns when the Runtime API goes away."""
    while True:
        try:
            status, headers, body = conn.request("GET", f"{RUNTIME}/invocation/next")
            if status != 200:
                sys.stderr.write(f"stream_runtime: next answered {status}: {body[:300]!r}\n")
                return
            serve_invocation(conn, handler, headers, body, streams=streams)
        except RuntimeApiGone:
            return


# ---- init -----------------------------------------------------------------------------------
def load_handler(handler: str) -> Callable[[Any, Any], Any]:
    """Import ``module.function`` as awslambdaric does, with its error types.

    Raises
    ------
    FaultError
        ``Runtime.MalformedHandlerName``, ``Runtime.BuiltInModuleConflict``,
        ``Runtime.ImportModuleError``, ``Runtime.UserCodeSyntaxError``,
        ``Runtime.HandlerNotFound``.
    Exception
        Whatever the handler module's own init code raised.
    """
    import importlib

    try:
        module_name, attr = handler.rsplit(".", 1)
    except ValueError as exc:
        raise FaultError("Runtime.MalformedHandlerName", f"Bad handler '{handler}': {exc}") from None
    if module_name.split(".")[0] in sys.builtin_module_names:
        raise FaultError("Runtime.BuiltInModuleConflict",
                         f"Cannot use built-in module {module_name} as a handler module")
    try:
        module = importlib.import_module(module_name.replace("/", "."))
    except ImportError as exc:
        raise FaultError("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}") from None
    except SyntaxError as exc:
        raise FaultError("Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}",
                         [f'  File "{exc.filename}" Line {exc.lineno}\n    {exc.text}']) from None
    try:
        func = getattr(module, attr)
    except AttributeError:
        raise FaultError("Runtime.HandlerNotFound", f"Handler '{attr}' missing on module '{module_name}'") from None
    return func  # type: ignore[no-any-return]


def run_hooks(kind: str) -> None:
    """Run snapshot-restore-py's ``before`` snapshot or ``after`` restore hooks, if it is loaded."""
    mod = sys.modules.get("snapshot_restore_py")
    if mod is None:
        return
    hooks = mod.get_before_snapshot() if kind == "before" else mod.get_after_restore()
    for func, args, kwargs in list(hooks):
        func(*args, **kwargs)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def install_sigterm() -> None:
    """``SIGTERM`` -> ``SystemExit(0)`` in the main thread (``atexit`` and ``finally`` run)."""
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)


def _init_failed(conn: RuntimeConnection, path: str, error: dict[str, Any], code: int,
                 error_type: str | None = None) -> NoReturn:
    log_error(error)
    try:
        post_error(conn, path, error, error_type=error_type)
    except RuntimeApiGone:
        pass
    sys.exit(code)


def main() -> None:
    """The runtime's process: init, SnapStart hooks when restoring, then :func:`serve`."""
    install_sigterm()
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    conn = RuntimeConnection(os.environ["AWS_LAMBDA_RUNTIME_API"])
    streaming.mark_runtime_streams()
    try:
        handler = load_handler(os.environ["_HANDLER"])
    except FaultError as exc:
        _init_failed(conn, f"{RUNTIME}/init/error", make_error(exc.message, exc.error_type, exc.trace), 1)
    except Exception as exc:  # noqa: BLE001 - the handler module's init code raised
        _init_failed(conn, f"{RUNTIME}/init/error", error_from_exception(exc)[0], 1)
    setup_logging()
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start":
        try:
            run_hooks("before")
            conn.request("GET", f"{RUNTIME}/restore/next")
        except Exception as exc:  # noqa: BLE001
            _init_failed(conn, f"{RUNTIME}/init/error", error_from_exception(exc)[0], 64,
                         "Runtime.BeforeSnapshotError")
        try:
            run_hooks("after")
        except Exception as exc:  # noqa: BLE001
            _init_failed(conn, f"{RUNTIME}/restore/error", error_from_exception(exc)[0], 65,
                         "Runtime.AfterRestoreError")
    serve(conn, handler)


if __name__ == "__main__":
    main()
