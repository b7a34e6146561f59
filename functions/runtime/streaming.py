"""The streamed response: what a streaming route's handler returns and how it goes on the wire.

Standard library only (the runtime client, the emulator's bootstrap and the local gateway all
import it). One object crosses from the handler to the runtime client:

:class:`StreamedResponse`
    ``status_code``, ``headers``, ``cookies`` (sent first, as the prelude), then ``chunks``, a
    blocking iterator of ``bytes`` the runtime client writes one HTTP chunk each, as they come.
    An exception raised by the iterator after the prelude ends the stream with the Runtime
    API's error trailers (:func:`error_trailers`); :meth:`StreamedResponse.close` is called when
    the client went away, so the app stops generating; :attr:`StreamedResponse.on_finish`
    (set by the dispatcher) receives the stream's :class:`StreamOutcome` once it has ended.

The wire, as Lambda defines it for a custom runtime that streams (AWS docs below):

* the runtime posts ``POST /2018-06-01/runtime/invocation/{id}/response`` with headers
  ``Lambda-Runtime-Function-Response-Mode: streaming``, ``Transfer-Encoding: chunked`` and
  ``Trailer: Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body``;
* for an HTTP answer (function URL, API Gateway's streaming transfer mode) the body's
  ``Content-Type`` is ``application/vnd.awslambda.http-integration-response`` and the body
  starts with the *prelude*: a JSON object ``{"statusCode", "headers", "cookies"}`` followed
  by 8 NUL bytes (:data:`PRELUDE_SEPARATOR`), then the response body as is;
* a failure after the body has started is sent as trailers: ``Lambda-Runtime-Function-Error-Type``
  (e.g. ``Runtime.StreamError``) and ``Lambda-Runtime-Function-Error-Body`` (the base64 of the
  JSON error object ``{"errorType", "errorMessage"}``).

Limits (AWS docs, "Response streaming for Lambda functions", checked 2026-12-02): a streamed
response may reach :data:`MAX_STREAMED_RESPONSE_BYTES` (200 MB); the first
:data:`UNCAPPED_STREAM_BYTES` (6 MB) stream at an uncapped rate, the rest at up to
:data:`CAPPED_STREAM_BYTES_PER_S` (2 MB/s); function URLs do not stream inside a VPC.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html (response streaming)
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
https://html.spec.whatwg.org/multipage/server-sent-events.html (the SSE wire format)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

#: ``Content-Type`` of a streamed HTTP answer whose body starts with the prelude.
HTTP_INTEGRATION_CONTENT_TYPE = "application/vnd.awslambda.http-integration-response"
#: Ends the JSON prelude of an HTTP-integration stream.
PRELUDE_SEPARATOR = b"\x00" * 8
#: The Runtime API header that switches a response to streaming.
RESPONSE_MODE_HEADER = "Lambda-Runtime-Function-Response-Mode"
ERROR_TYPE_TRAILER = "Lambda-Runtime-Function-Error-Type"
ERROR_BODY_TRAILER = "Lambda-Runtime-Function-Error-Body"

#: Largest streamed response, bytes (AWS: 200 MB).
MAX_STREAMED_RESPONSE_BYTES = 200 * 1024 * 1024
#: The first bytes of a stream go out at an uncapped rate (AWS: 6 MB) ...
UNCAPPED_STREAM_BYTES = 6 * 1024 * 1024
#: ... the rest at up to this rate, bytes per second (AWS: 2 MB/s).
CAPPED_STREAM_BYTES_PER_S = 2 * 1024 * 1024
#: A buffered answer (``Invoke``, HTTP API) holds at most this many bytes (6 MB).
MAX_BUFFERED_RESPONSE_BYTES = 6 * 1024 * 1024

#: The largest prelude accepted when reading one (a guard against a stream with no separator).
MAX_PRELUDE_BYTES = 64 * 1024


class StreamOutcome(NamedTuple):
    """How a stream ended, as the runtime client saw it.

    Attributes
    ----------
    first_byte_ms : float | None
        Monotonic clock (ms) when the first body chunk was written; None when none was.
    last_byte_ms : float | None
        When the last body chunk was written; None when none was.
    body_bytes : int
        Body bytes written (prelude not counted).
    chunks : int
        Body chunks written.
    error_type : str | None
        None for a complete stream; else the error type sent in the trailers
        (``Runtime.StreamError``, ``Function.ResponseSizeTooLarge``) or ``ClientDisconnected``.
    """

    first_byte_ms: float | None
    last_byte_ms: float | None
    body_bytes: int
    chunks: int
    error_type: str | None = None


class StreamedResponse:
    """A response streamed chunk by chunk: prelude (status, headers, cookies) first.

    Parameters
    ----------
    status_code : int
        HTTP status, 100-599.
    headers : Mapping[str, str]
        Response headers (one value each; ``Set-Cookie`` goes in ``cookies``).
    chunks : Iterable[bytes]
        The body, consumed once, in order, from the runtime client's thread; it may block
        between chunks. An exception from it after the first chunk ends the stream with
        error trailers; the runtime client never retries it.
    cookies : Iterable[str]
        ``Set-Cookie`` values.
    on_close : callable, optional
        Called once when the stream is abandoned before its end (the client disconnected,
        the function's deadline): the producer stops generating and releases what it holds.

    Attributes
    ----------
    on_finish : callable or None
        ``on_finish(outcome: StreamOutcome)``, called once by the runtime client after the
        stream ended (complete or not); set by whoever wants the numbers (telemetry).

    Raises
    ------
    ValueError
        A status outside 100-599.
    """

    __slots__ = ("_closed", "_iterator", "_on_close", "chunks", "cookies", "headers", "on_finish",
                 "status_code")

    def __init__(self, status_code: int, headers: Mapping[str, str], chunks: Iterable[bytes], *,
                 cookies: Iterable[str] = (), on_close: Callable[[], None] | None = None) -> None:
        if isinstance(status_code, bool) or not isinstance(status_code, int) or not 100 <= status_code <= 599:
            raise ValueError(f"status_code must be an HTTP status 100-599, got {status_code!r}")
        self.status_code = status_code
        self.headers = {str(k): str(v) for k, v in headers.items()}
        self.cookies = [str(c) for c in cookies]
        self.chunks = chunks
        self._iterator: Iterator[bytes] | None = None
        self._on_close = on_close
        self._closed = False
        self.on_finish: Callable[[StreamOutcome], None] | None = None

    def __iter__(self) -> Iterator[bytes]:
        if self._iterator is None:
            self._iterator = iter(self.chunks)
        return self._iterator

    def close(self) -> None:
        """Abandon the stream (idempotent): the producer's ``on_close``, then the iterator's."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._on_close is not None:
                self._on_close()
        finally:
            close = getattr(self._iterator if self._iterator is not None else self.chunks, "close", None)
            if callable(close):
                close()

    def prelude(self) -> bytes:
        """The HTTP-integration prelude: the JSON metadata then :data:`PRELUDE_SEPARATOR`."""
        return encode_prelude(self.status_code, self.headers, self.cookies)

    def __repr__(self) -> str:
        return f"StreamedResponse({self.status_code}, {self.headers.get('content-type', '')!r})"


def encode_prelude(status_code: int, headers: Mapping[str, str], cookies: Iterable[str] = ()) -> bytes:
    """``{"statusCode", "headers", "cookies"}`` as compact JSON, then 8 NUL bytes."""
    meta = {"statusCode": int(status_code), "headers": dict(headers), "cookies": list(cookies)}
    return json.dumps(meta, separators=(",", ":")).encode() + PRELUDE_SEPARATOR


class PreludeError(ValueError):
    """A stream that should start with an HTTP-integration prelude does not."""


def split_prelude(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    """Read the prelude at the start of ``data``.

    Returns
    -------
    tuple[dict, bytes] | None
        ``(metadata, rest of the body)`` once the separator has arrived; None while more
        bytes are needed.

    Raises
    ------
    PreludeError
        No separator within :data:`MAX_PRELUDE_BYTES`, or metadata that is not a JSON
        object with an integer ``statusCode``.
    """
    end = data.find(PRELUDE_SEPARATOR)
    if end < 0:
        if len(data) > MAX_PRELUDE_BYTES:
            raise PreludeError(f"no prelude separator in the first {MAX_PRELUDE_BYTES} bytes")
        return None
    try:
        meta = json.loads(data[:end])
    except ValueError as exc:
        raise PreludeError(f"prelude is not JSON: {exc}") from None
    if not isinstance(meta, dict) or isinstance(meta.get("statusCode"), bool) \
            or not isinstance(meta.get("statusCode", 200), int):
        raise PreludeError("prelude must be a JSON object with an integer statusCode")
    return meta, data[end + len(PRELUDE_SEPARATOR):]


def error_trailers(error_type: str, message: str) -> dict[str, str]:
    """The Runtime API's trailers for a stream that failed after it started."""
    body = json.dumps({"errorType": error_type, "errorMessage": message}, separators=(",", ":"))
    return {ERROR_TYPE_TRAILER: error_type, ERROR_BODY_TRAILER: base64.b64encode(body.encode()).decode()}


def read_error_trailers(trailers: Mapping[str, str]) -> tuple[str, dict[str, Any]] | None:
    """``(error_type, error object)`` from a stream's trailers; None when it ended cleanly.

    Header names are matched case-insensitively; an undecodable body becomes
    ``{"errorType": type, "errorMessage": ""}``.
    """
    lower = {k.lower(): v for k, v in trailers.items()}
    error_type = lower.get(ERROR_TYPE_TRAILER.lower())
    if not error_type:
        return None
    try:
        error = json.loads(base64.b64decode(lower.get(ERROR_BODY_TRAILER.lower(), ""), validate=True))
        if not isinstance(error, dict):
            raise ValueError  # noqa: TRY004 (caught below: a malformed trailer)
    except ValueError:
        error = {"errorType": error_type, "errorMessage": ""}
    return error_type, error


def sse_event(data: Any, *, event: str | None = None, id: str | None = None) -> bytes:
    """One Server-Sent Event: ``event:``/``id:`` lines when given, ``data:`` lines, a blank line.

    ``data`` that is not ``str`` is sent as compact JSON; a multi-line string becomes one
    ``data:`` line per line (the SSE rule, so the client joins them back with ``\\n``).
    """
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines = [f"event: {event}"] if event else []
    if id is not None:
        lines.append(f"id: {id}")
    lines.extend(f"data: {line}" for line in text.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


#: Whether this process's runtime client streams (set once by
#: `functions.runtime.stream_runtime` before it imports the handler). Under ``awslambdaric``,
#: which has no streaming mode (aws-lambda-python-runtime-interface-client#100), it stays
#: False and a streaming route is answered buffered.
_runtime_streams = False


def runtime_streams() -> bool:
    """True when the runtime client of this execution environment can stream a response."""
    return _runtime_streams


def mark_runtime_streams() -> None:
    """Called by a streaming runtime client before the handler is imported (the init phase)."""
    global _runtime_streams
    _runtime_streams = True
