"""Failure tags, the JSON error body, and the exceptions the handler turns into responses.

Every failure is logged with exactly one :class:`FailureTag`. Error bodies follow the shared
contract ``{"error", "message", "retry_after_s", "estimated_recovery_at", "level",
"request_id"}``.

Imports only the standard library.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "AppFailure",
    "BadRequest",
    "FailureTag",
    "WarmstartError",
    "error_body",
]


class FailureTag(enum.StrEnum):
    """The one tag every logged failure carries (DESIGN.md)."""

    TIMEOUT_RESOURCE = "timeout_resource"
    TIMEOUT_NETWORK = "timeout_network"
    MODEL_ERROR = "model_error"
    TOOL_UNAVAILABLE = "tool_unavailable"
    BAD_REQUEST = "bad_request"
    #: the app raised inside a route (not a downstream's or the model's failure)
    APP_ERROR = "app_error"
    #: a downstream call inside a route timed out, or the route ran past its SLA budget
    DOWNSTREAM_TIMEOUT = "downstream_timeout"
    #: a streamed answer failed after it started (the app raised, or answered non-2xx behind
    #: a degraded first event): it ended with an error event and the error trailers
    STREAM_ERROR = "stream_error"
    #: a streamed answer reached its deadline (the function's, less a margin) or the app sent
    #: nothing for longer than the idle bound (`functions.runtime.asgi_stream`)
    STREAM_TIMEOUT = "stream_timeout"
    #: the client of a streamed answer went away before its end
    CLIENT_DISCONNECTED = "client_disconnected"
    #: a degraded first event was sent and the local path was not ready before the stream's
    #: deadline: the stream ended with an error event
    COLD_START_TIMEOUT = "cold_start_timeout"


class WarmstartError(Exception):
    """A failure the handler answers with a JSON error response.

    Parameters
    ----------
    message : str
        What was wrong and what to do about it.
    status : int
        HTTP status code of the response.
    code : str
        Short machine-readable error code (the body's ``error`` field).
    tag : FailureTag
        Failure tag logged with the response.
    retry_after_s : float | None
        Seconds after which a retry may succeed (``Retry-After`` header when set).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        tag: FailureTag,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.tag = tag
        self.retry_after_s = retry_after_s


class BadRequest(WarmstartError):
    """The event or request is malformed (tag ``bad_request``, status 400 unless given)."""

    def __init__(self, message: str, *, status: int = 400, code: str = "bad_request") -> None:
        super().__init__(message, status=status, code=code, tag=FailureTag.BAD_REQUEST)


class AppFailure(Exception):
    """The app raised while serving a request (or ran past ``cancel_after_s``).

    Attributes
    ----------
    error : BaseException
        What the app raised (a ``TimeoutError`` when it was cut at ``cancel_after_s``).
    response : dict[str, Any]
        What Mangum answered (Starlette's ``500 text/plain``): never sent as is.
    cut : bool
        The toolkit cancelled the route at ``cancel_after_s``.
    """

    def __init__(self, error: BaseException, response: dict[str, Any], *, cut: bool) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error
        self.response = response
        self.cut = cut


def error_body(
    code: str,
    message: str,
    *,
    request_id: str | None,
    retry_after_s: float | None = None,
    estimated_recovery_at: str | None = None,
    level: str | None = None,
) -> dict[str, Any]:
    """The JSON error body of the shared contract.

    Parameters
    ----------
    code : str
        Error code, e.g. ``"bad_request"``, ``"not_ready"``.
    message : str
        Human-readable explanation with what to do.
    request_id : str | None
        The Lambda request id (``context.aws_request_id``).
    retry_after_s : float | None
        Seconds until a retry may succeed.
    estimated_recovery_at : str | None
        ISO-8601 UTC time the service expects to recover.
    level : str | None
        Degradation level in force (``"L0"``..``"L3"``).

    Returns
    -------
    dict[str, Any]
    """
    return {
        "error": code,
        "message": message,
        "retry_after_s": retry_after_s,
        "estimated_recovery_at": estimated_recovery_at,
        "level": level,
        "request_id": request_id,
    }
