"""What the emulator hands back and logs per invocation: REPORT numbers, Invoke results, logs."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from infra.local.emulator.config import EmulatedInitType
from infra.local.errors import TooManyRequestsException


@dataclass(frozen=True)
class Report:
    """The numbers of Lambda's REPORT log line for one invocation.

    ``duration_ms`` is the whole invoke phase: from the invocation to the moment the runtime
    and every extension called ``next`` again, so it includes extensions' work after the
    response (``post_runtime_extensions_duration_ms``, Lambda's
    ``PostRuntimeExtensionsDuration``); ``billed_duration_ms`` is it rounded up to the ms plus
    an on-demand init. ``status`` is the Telemetry API's ``platform.report`` status
    (``success``, ``error``, ``timeout``: an extension still working at the function timeout).

    A report handed back with the answer while the invoke phase still runs (an extension still
    working) has ``post_runtime_extensions_duration_ms = None`` and ``duration_ms`` up to the
    answer; the final one goes to the log stream and to the listeners (:class:`InvocationLog`).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html ("Invoke phase":
    the timeout bounds the whole phase; PostRuntimeExtensionsDuration)
    https://docs.aws.amazon.com/lambda/latest/dg/telemetry-schema-reference.html (platform.report)
    """

    request_id: str
    duration_ms: float
    billed_duration_ms: int
    memory_size_mb: int
    max_memory_used_mb: int
    init_duration_ms: float | None = None
    restore_duration_ms: float | None = None
    billed_restore_duration_ms: int | None = None
    post_runtime_extensions_duration_ms: float | None = 0.0
    status: str = "success"

    @property
    def final(self) -> bool:
        """The invoke phase had ended when this report was made."""
        return self.post_runtime_extensions_duration_ms is not None

    def line(self) -> str:
        """The REPORT line as Lambda writes it to the function's log stream."""
        parts = [
            f"REPORT RequestId: {self.request_id}",
            f"Duration: {self.duration_ms:.2f} ms",
            f"Billed Duration: {self.billed_duration_ms} ms",
            f"Memory Size: {self.memory_size_mb} MB",
            f"Max Memory Used: {self.max_memory_used_mb} MB",
        ]
        if self.init_duration_ms is not None:
            parts.append(f"Init Duration: {self.init_duration_ms:.2f} ms")
        if self.restore_duration_ms is not None:
            parts.append(f"Restore Duration: {self.restore_duration_ms:.2f} ms")
            parts.append(f"Billed Restore Duration: {self.billed_restore_duration_ms} ms")
        if self.status != "success":
            parts.append(f"Status: {self.status}")
        return "\t".join(parts)


def billed_report(request_id: str, duration_ms: float, *, memory_size_mb: int,
                  max_memory_used_mb: int, init_duration_ms: float | None = None,
                  restore_duration_ms: float | None = None,
                  post_runtime_extensions_duration_ms: float | None = 0.0,
                  status: str = "success") -> Report:
    """The :class:`Report` of one invocation, with Lambda's billing.

    ``Billed Duration`` is the duration rounded up to the ms, plus an on-demand init (rounded
    up) when ``init_duration_ms`` is given (since 1 Aug 2025 the on-demand init phase is
    billed); a SnapStart restore is billed apart (``Billed Restore Duration``, rounded up).
    Durations in real ms.

    References
    ----------
    https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/
    https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html (restore billed)
    """
    billed = math.ceil(duration_ms)
    if init_duration_ms is not None:
        billed += math.ceil(init_duration_ms)
    return Report(request_id=request_id, duration_ms=duration_ms, billed_duration_ms=billed,
                  memory_size_mb=memory_size_mb, max_memory_used_mb=max_memory_used_mb,
                  init_duration_ms=init_duration_ms, restore_duration_ms=restore_duration_ms,
                  billed_restore_duration_ms=None if restore_duration_ms is None
                  else math.ceil(restore_duration_ms),
                  post_runtime_extensions_duration_ms=post_runtime_extensions_duration_ms,
                  status=status)


@dataclass(frozen=True)
class InvokeResult:
    """What one Invoke returned.

    ``function_error`` is ``"Unhandled"`` when the handler raised, timed out or its
    environment died; ``payload`` then holds ``errorMessage``/``errorType``/``stackTrace``.
    It is returned when the runtime posts its answer: ``report`` is final
    (:attr:`Report.final`) unless extensions still work after the response, in which case the
    final numbers reach the listeners (:class:`InvocationLog`) when the invoke phase ends.

    A streamed answer (the Runtime API's streaming mode) has ``streamed`` set, ``payload`` =
    the bytes streamed (prelude included; only the first 6 MB are kept) or the error object
    when the stream failed, and ``response_bytes`` = every byte streamed.
    ``time_to_first_byte_ms`` / ``time_to_last_byte_ms``: real ms from the invocation's arrival
    (a cold start's init included) to the first and the last byte of the answer (equal for a
    buffered answer); None when no answer came.
    """

    status_code: int
    payload: bytes
    request_id: str
    executed_version: str
    function_error: str | None = None
    report: Report | None = None
    environment_id: str | None = None
    init_type: EmulatedInitType | None = None
    cold_start: bool = False
    spillover: bool = False
    streamed: bool = False
    response_bytes: int = 0
    time_to_first_byte_ms: float | None = None
    time_to_last_byte_ms: float | None = None

    def log_tail(self) -> str:
        """Base64 of the START/END/REPORT lines (``X-Amz-Log-Result`` for ``LogType=Tail``)."""
        lines = [f"START RequestId: {self.request_id} Version: {self.executed_version}",
                 f"END RequestId: {self.request_id}"]
        if self.report is not None:
            lines.append(self.report.line())
        return base64.b64encode(("\n".join(lines) + "\n").encode()).decode()


@dataclass(frozen=True)
class InvocationLog:
    """One invocation as the emulator saw it, given to every listener (:meth:`Emulator.add_listener`).

    Attributes
    ----------
    function_name : str
    qualifier : str or None
        The alias invoked, else the version (``None`` for ``$LATEST``).
    version : str
        The version that ran (``ExecutedVersion``).
    request_id : str
        Lambda's request id (the REPORT line's ``RequestId``).
    invocation_type : str
        ``RequestResponse`` or ``Event``.
    t_s : float
        Emulator clock (epoch seconds, scaled in replays) when the invocation arrived.
    event : str
        The event JSON as invoked (see :attr:`gateway_request_id`, :attr:`warm_ping`).
    payload : bytes
        The function's response (see :attr:`path`); empty when throttled.
    report : Report or None
        The final REPORT numbers (``Duration`` and ``Billed Duration`` of the whole invoke
        phase, post-response work of extensions included; ``Init Duration``, ``Restore
        Duration``, ``Max Memory Used``; real ms); ``None`` when throttled or when the init
        phase failed. Listeners are called when the invoke phase ends.
    environment_id : str or None
    init_type : {"on-demand", "provisioned-concurrency", "snap-start"} or None
    cold_start : bool
        A new execution environment ran its init phase (or restore) for this invocation.
    spillover : bool
        Served on demand while the alias had provisioned concurrency configured.
    function_error : str or None
        ``Unhandled`` for a handler error, timeout, crash or init failure.
    error_type : str or None
        The Lambda API error that refused it (``TooManyRequestsException``), if any.
    streamed : bool
        The function answered in the Runtime API's streaming mode (``payload``: the bytes
        streamed, the first 6 MB, prelude included; the error object when the stream failed).
    response_bytes : int
        Bytes of the answer (every byte of a stream).
    time_to_first_byte_ms, time_to_last_byte_ms : float or None
        Real ms from the invocation's arrival to the first and the last byte of the answer
        (equal when buffered); None without an answer (throttled, init failed, timed out
        before any byte).
    stream_error : str or None
        The error code a stream ended with (``Runtime.StreamError``,
        ``Function.ResponseSizeTooLarge``, ``Sandbox.Timedout``), None when it completed.
    """

    function_name: str
    qualifier: str | None
    version: str
    request_id: str
    invocation_type: str
    t_s: float
    event: str
    payload: bytes = b""
    report: Report | None = None
    environment_id: str | None = None
    init_type: EmulatedInitType | None = None
    cold_start: bool = False
    spillover: bool = False
    function_error: str | None = None
    error_type: str | None = None
    streamed: bool = False
    response_bytes: int = 0
    time_to_first_byte_ms: float | None = None
    time_to_last_byte_ms: float | None = None
    stream_error: str | None = None

    @property
    def throttled(self) -> bool:
        return self.error_type == TooManyRequestsException.error_type

    @cached_property
    def _event_object(self) -> Any:
        try:
            return json.loads(self.event)
        except ValueError:
            return None

    @property
    def gateway_request_id(self) -> str | None:
        """``requestContext.requestId`` of an API Gateway event (the ``apigw-requestid``
        response header), else ``None``."""
        event = self._event_object
        try:
            return str(event["requestContext"]["requestId"])
        except (KeyError, TypeError):
            return None

    @property
    def warm_ping(self) -> bool:
        """The event is a warmstart warm ping (``{"warmstart": {"ping": true, ...}}``)."""
        event = self._event_object
        return isinstance(event, dict) and isinstance(event.get("warmstart"), dict) \
            and bool(event["warmstart"].get("ping"))

    @cached_property
    def path(self) -> str | None:
        """The response's ``X-Warmstart-Path`` header (``local``, ``overflow``, ``degraded``,
        ``shed``) when the function answered an API Gateway proxy response (or streamed one:
        its prelude's headers), else ``None``."""
        try:
            if self.streamed and not self.function_error:
                from functions.runtime.streaming import split_prelude

                prelude = split_prelude(self.payload)
                response = prelude[0] if prelude else {}
            else:
                response = json.loads(self.payload or b"null")
            headers = response.get("headers") or {}
        except (ValueError, AttributeError):
            return None
        for key, value in headers.items() if isinstance(headers, dict) else ():
            if str(key).lower() == "x-warmstart-path":
                return str(value)
        return None


InvocationListener = Callable[[InvocationLog], None]
