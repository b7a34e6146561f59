"""What :meth:`~infra.local.emulator.Emulator.invoke_stream` returns: the answer's bytes as they come.

The Runtime API's request thread pushes each piece of a streamed answer (prelude included) as
soon as it has read it; the invocation's own thread finishes the stream with its
:class:`~infra.local.emulator.records.InvokeResult` and error. The caller iterates (blocking).

References
----------
https://docs.aws.amazon.com/lambda/latest/api/API_InvokeWithResponseStream.html
https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

from infra.local.emulator.records import InvokeResult


class InvocationStream:
    """The answer of one invocation, chunk by chunk.

    Iterating yields the raw bytes the runtime posted (a streamed answer's prelude included),
    each as soon as it arrived, blocking until the next one or the end. A function that answers
    buffered yields its payload as one chunk; a failed invocation (the handler raised, the init
    failed, a timeout) yields no payload chunk.

    Attributes
    ----------
    request_id : str
    executed_version : str
        The version that runs (``X-Amz-Executed-Version``), known before the first chunk.
    streamed : bool or None
        True once the runtime started a streamed answer (the first chunk is its prelude),
        False for a buffered answer (its one chunk is the payload); None until either.
    result : InvokeResult or None
        Set when the stream has ended (always before the iteration stops): ``function_error``
        None or ``"Unhandled"``, ``report``, ``time_to_first_byte_ms`` ...
    error : tuple[str, dict] or None
        None for a complete answer; else ``(error code, error object)``: from the stream's
        error trailers (``Runtime.StreamError``), the emulator's limits
        (``Function.ResponseSizeTooLarge``), the function's failure (its ``errorType``:
        ``ValueError``, ``Runtime.ImportModuleError`` ...) or ``Sandbox.Timedout``.
    first_byte_ms, last_byte_ms : float or None
        ``time.monotonic()`` in ms when the first and the last chunk reached this stream;
        None while none has.
    """

    def __init__(self, request_id: str, executed_version: str = "$LATEST") -> None:
        self.request_id = request_id
        self.executed_version = executed_version
        self.streamed: bool | None = None
        self.result: InvokeResult | None = None
        self.error: tuple[str, dict[str, Any]] | None = None
        self.first_byte_ms: float | None = None
        self.last_byte_ms: float | None = None
        self._cond = threading.Condition()
        self._chunks: deque[bytes] = deque()
        self._ended = False
        self._closed = False

    # ---- the emulator's side ------------------------------------------------------------------
    def push(self, data: bytes, *, streamed: bool = True) -> None:
        """One piece of the answer (dropped once the caller closed the stream); ``streamed``
        False for the payload of a buffered answer."""
        now_ms = time.monotonic() * 1000.0
        with self._cond:
            if self.streamed is None:
                self.streamed = streamed
            if self._closed or self._ended:
                return
            if self.first_byte_ms is None:
                self.first_byte_ms = now_ms
            self.last_byte_ms = now_ms
            self._chunks.append(bytes(data))
            self._cond.notify_all()

    def finish(self, result: InvokeResult, error: tuple[str, dict[str, Any]] | None) -> None:
        """The invocation's answer is complete (or failed): the iteration ends after the chunks
        already pushed."""
        with self._cond:
            self.result, self.error, self._ended = result, error, True
            if self.streamed is None:
                self.streamed = result.streamed
            self._cond.notify_all()

    # ---- the caller's side --------------------------------------------------------------------
    def __iter__(self) -> InvocationStream:
        return self

    def __next__(self) -> bytes:
        with self._cond:
            while not self._chunks and not self._ended and not self._closed:
                self._cond.wait()
            if self._chunks:
                return self._chunks.popleft()
            raise StopIteration

    def close(self) -> None:
        """The caller stopped reading: the iteration ends and later chunks are dropped. The
        function goes on (AWS does not stop a function whose streaming client disconnected);
        :meth:`wait` gives its result once it ends."""
        with self._cond:
            self._closed = True
            self._chunks.clear()
            self._cond.notify_all()

    def wait(self, timeout_s: float | None = None) -> InvokeResult | None:
        """Block until the invocation ended (real seconds; None: no limit); its result, or None
        at the timeout."""
        with self._cond:
            self._cond.wait_for(lambda: self._ended, timeout_s)
            return self.result

    @property
    def ended(self) -> bool:
        """The invocation has ended (:attr:`result` is set)."""
        return self._ended

    def read_all(self) -> bytes:
        """Every remaining chunk, joined (blocks until the end)."""
        return b"".join(self)


def error_of(result: InvokeResult) -> tuple[str, dict[str, Any]] | None:
    """``(errorType, error object)`` of a failed invocation's payload, else None."""
    if not result.function_error:
        return None
    try:
        body = json.loads(result.payload)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"errorMessage": result.payload.decode("utf-8", "replace"), "errorType": "Unhandled"}
    return str(body.get("errorType") or "Unhandled"), body
