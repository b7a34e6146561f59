"""The toolkit's own answers to a request, each built by `functions.runtime.events.respond`.

:class:`Answers` (one per execution environment, held by the dispatcher) answers a request
whose context (`functions.runtime.request_context.RequestContext`) says why: a refusal
(bad input, a hook that broke), a failure inside the app (the route's ``degraded`` answer, the
app's own JSON error, or the JSON error contract: ``app_error`` 500, ``downstream_timeout``
504, ``tool_unavailable`` 502; never Starlette's ``500 text/plain``), the degraded answer, an
answer too large for Lambda (:meth:`Answers.finish`, on every answer).
:func:`internal_error_response` is the answer when the toolkit itself failed.

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from functions.runtime import events
from functions.runtime.admission.flow import DegradeUnavailable
from functions.runtime.degradation import mark_degraded
from functions.runtime.errors import BadRequest, FailureTag, WarmstartError, error_body
from functions.runtime.request_context import RequestContext, read_hooks
from functions.runtime.telemetry import safe_text

if TYPE_CHECKING:
    from functions.runtime.admission.state import Admission
    from functions.runtime.local_path import AppFailed
    from functions.runtime.routes import RouteRegistry, RouteSpec

__all__ = [
    "APP_FAILURE_STATUS",
    "CUT_MARGIN_MS",
    "LARGE_BODY_CHARS",
    "STREAM_HEADER",
    "Answers",
    "internal_error_response",
    "log_hook_failure",
    "too_large",
    "toolkit_failed",
]

#: Kept from a degradable route's SLA after its degraded answer's p95 when the app's run is
#: cut, milliseconds (the answer's serialisation and the handler's return).
CUT_MARGIN_MS = 20.0
#: Response header of a streaming route answered buffered (a caller that does not stream:
#: HTTP API, REST API, ALB, ``Invoke``; or a runtime client that cannot stream).
STREAM_HEADER = "x-warmstart-stream"
#: The status of a non-degradable route's failure inside the app, by tag (502: the
#: downstream failed, 504: it did not answer in time; RFC 9110 15.6.3, 15.6.5).
APP_FAILURE_STATUS = {FailureTag.DOWNSTREAM_TIMEOUT: 504, FailureTag.TOOL_UNAVAILABLE: 502}
#: Bodies longer than this (characters) are measured against Lambda's response limit before
#: they are returned (shorter ones cannot reach it with their headers).
LARGE_BODY_CHARS = 1_000_000

_log = logging.getLogger("warmstart")


def too_large(response: dict[str, Any]) -> bool:
    """True when ``response`` serialised as the runtime sends it (JSON, ASCII) exceeds
    `functions.runtime.events.MAX_RESPONSE_BYTES`."""
    try:
        return len(json.dumps(response)) > events.MAX_RESPONSE_BYTES
    except (TypeError, ValueError):  # not JSON at all: Lambda could not send it either
        return True


def internal_error_response(event: Any, context: Any, exc: BaseException, *,
                            level: str | None = None) -> dict[str, Any]:
    """The answer when the toolkit itself failed on a request: a generic 500 in the event
    source's format, tagged ``model_error``; the exception and its traceback are logged (made
    safe to write), never put in the body.

    Parameters
    ----------
    event : Any
        The invocation's event (any JSON value).
    context : Any
        The Lambda context or None.
    exc : BaseException
        What was raised.
    level : str | None
        The degradation level for the body.

    Returns
    -------
    dict[str, Any]
        ``statusCode`` 500, ``X-Warmstart-Path: local``, body ``{"error": "internal_error", ...}``.
    """
    import traceback

    request_id = getattr(context, "aws_request_id", None)
    try:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        _log.error("request %s failed inside the toolkit (failure model_error; answered 500): %s",
                   safe_text(request_id), safe_text(trace, 20_000))
    except Exception:  # noqa: BLE001, S110 - logging must not turn a 500 into a crash
        pass
    try:
        kind = events.classify(event)
    except Exception:  # noqa: BLE001 - an event even classify cannot read: answer as JSON
        kind = events.EventKind.UNKNOWN
    if not kind.is_http:
        kind = events.EventKind.UNKNOWN
    body = error_body("internal_error", "the request failed in this execution environment; "
                      "see the function's log for this request id",
                      request_id=request_id if isinstance(request_id, str) else None, level=level)
    return events.respond(kind, event, 500, body, {"x-warmstart-path": "local"})


def toolkit_failed(d: Any, event: Any, context: Any, exc: BaseException,
                   started_ms: float) -> dict[str, Any]:
    """The dispatcher ``d`` failed on a request: :func:`internal_error_response` (with the
    level when it can be read), the invocation recorded and the failure logged, tagged
    ``model_error``; never raises."""
    try:
        level: str | None = str(d.admission.level())
    except Exception:  # noqa: BLE001 - the level is informative only
        level = None
    response = internal_error_response(event, context, exc, level=level)
    try:  # logged with its tag and counted, as any failed request is
        d.environment.record("?", "local", 500, d._clock_ms() - started_ms)
        d.telemetry.failure(FailureTag.MODEL_ERROR, "request failed inside the toolkit",
                            request_id=getattr(context, "aws_request_id", None), status=500,
                            path="local")
    except Exception:  # noqa: BLE001, S110 - the answer must go out anyway
        pass
    return response


def log_hook_failure(route: RouteSpec, field: str, exc: BaseException) -> None:
    """Log an agent hook's exception once per request (the body never carries it)."""
    _log.error("route %s %s: the %s hook raised %s: %s", route.method, route.path, field,
               type(exc).__name__, exc)


class Answers:
    """The toolkit's own answers in one execution environment.

    Parameters
    ----------
    admission : Admission
        The level (for bodies) and the degraded answer's tracker.
    routes : RouteRegistry
        Path parameters of templated routes.
    clock_ms, wall_ms : Callable[[], float]
        Monotonic ms; epoch ms (``estimated_recovery_at``).
    """

    def __init__(self, admission: Admission, routes: RouteRegistry, clock_ms: Callable[[], float],
                 wall_ms: Callable[[], float]) -> None:
        self.admission = admission
        self.routes = routes
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms

    # -- before any path runs -----------------------------------------------------------------
    def validate(self, ctx: RequestContext) -> dict[str, Any] | None:
        """The route's path parameters and payload hooks, before any path runs (bad input is a
        4xx, never overflowed): sets ``ctx.payload`` / ``ctx.downstream_ms``; returns None, or
        the refusal (a 4xx, or a 500 when a hook broke)."""
        route, hooks, record = ctx.route, ctx.hooks, ctx.record
        assert route is not None and ctx.request is not None
        if "{" in route.path:  # a templated route: its parameters, for the hooks and the app
            record.path_params = self.routes.path_params(route, ctx.request.path)
        try:
            if hooks.validate is not None:
                read_hooks(ctx)
        except BadRequest as exc:
            return self.refuse(ctx, exc, "local")
        except Exception as exc:  # noqa: BLE001 - the agent's hook failed: our fault, not the client's
            return self.hook_failed(ctx, "downstream_ms" if ctx.payload is not None else "validate", exc)
        return None

    # -- refusals and errors --------------------------------------------------------------------
    def refuse(self, ctx: RequestContext, error: WarmstartError, path: str) -> dict[str, Any]:
        """``error`` as the JSON error contract on ``path``, tagged in the record."""
        record = ctx.record
        record.failure = error.tag
        record.path = path
        headers = {"x-warmstart-path": path}
        retry_after_s = error.retry_after_s
        recovery_at = None
        if retry_after_s is not None:
            headers["retry-after"] = str(math.ceil(retry_after_s))
            recovery_at = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._wall_ms() / 1000.0 + retry_after_s))
        body = error_body(error.code, error.message, request_id=record.request_id,
                          retry_after_s=retry_after_s, estimated_recovery_at=recovery_at,
                          level=str(self.admission.level()))
        return events.respond(ctx.kind, ctx.event, error.status, body, headers)

    def hook_failed(self, ctx: RequestContext, field: str, exc: BaseException) -> dict[str, Any]:
        """An agent hook raised before any path ran: a 500, the hook logged."""
        assert ctx.route is not None
        log_hook_failure(ctx.route, field, exc)
        error = WarmstartError(f"the request could not be checked (route {ctx.route.feature!r}); "
                               "see the function's log", status=500, code="internal_error",
                               tag=FailureTag.MODEL_ERROR)
        return self.refuse(ctx, error, "local")

    # -- failures inside the app ----------------------------------------------------------------
    def cut_s(self, ctx: RequestContext) -> float:
        """How long a degradable route's app may run from now, s: its SLA's end less the
        degraded answer's p95 and :data:`CUT_MARGIN_MS` (at least 0)."""
        assert ctx.deadline_ms is not None
        left_ms = (ctx.deadline_ms - self._clock_ms() - self.admission.degraded.p95_ms
                   - CUT_MARGIN_MS)
        return max(0.0, left_ms) / 1000.0

    @staticmethod
    def log_app_failure(route: RouteSpec | None, failed: AppFailed) -> None:
        """One line per failure, with its tag (Mangum logged the traceback as the app raised)."""
        where = f"route {route.method} {route.path}" if route is not None else "an undeclared route"
        _log.error("%s: the app failed (failure_tag=%s%s): %s", where, failed.tag.value,
                   ", cut at its SLA budget" if failed.cut else "", safe_text(str(failed.error), 2000))

    def app_failed(self, ctx: RequestContext, failed: AppFailed, *,
                   logged: bool = False) -> dict[str, Any]:
        """A failure inside the app without a degraded answer: the app's own JSON error answer
        when it sent one (an exception handler), else the JSON error contract; tagged."""
        route, record = ctx.route, ctx.record
        if not logged and (route is None or not route.degradable):
            self.log_app_failure(route, failed)
        record.path = "local"
        record.failure = failed.tag
        own = failed.response
        if own is not None and not failed.cut:
            headers = own.get("headers") or {}
            content_type = headers.get("content-type", "") if type(headers) is dict else ""
            if "json" in content_type.lower():
                return own
        what = route.feature if route is not None else record.route
        error = WarmstartError(
            f"the request failed inside the app ({what}: {failed.tag.value}); see the "
            "function's log for this request id",
            status=APP_FAILURE_STATUS.get(failed.tag, 500), code=failed.tag.value, tag=failed.tag)
        return self.refuse(ctx, error, "local")

    def failed_over(self, ctx: RequestContext, failed: AppFailed) -> dict[str, Any]:
        """A failure inside the app on the warm path: the route's degraded answer, marked
        degraded and tagged with the failure, when it has one and it works; else
        :meth:`app_failed`."""
        route = ctx.route
        if route is None or not route.degradable or ctx.hooks.degraded is None:
            return self.app_failed(ctx, failed)
        self.log_app_failure(route, failed)
        try:
            answer = self.degraded(ctx)
        except DegradeUnavailable:  # logged: then the JSON error contract
            return self.app_failed(ctx, failed, logged=True)
        ctx.record.path = "degraded"
        ctx.record.failure = failed.tag
        return answer

    # -- the degraded answer --------------------------------------------------------------------
    def degraded(self, ctx: RequestContext) -> dict[str, Any]:
        """The route's cheaper answer (its ``degraded`` hook), marked degraded, in the source's
        format; its time is measured for admission.

        Raises
        ------
        DegradeUnavailable
            The hook raised (logged).
        """
        route, degrade = ctx.route, ctx.hooks.degraded
        assert route is not None and degrade is not None
        t0 = self._clock_ms()
        try:
            answer = mark_degraded(degrade(ctx.payload or {}), level=ctx.level)
        except Exception as exc:
            log_hook_failure(route, "degraded", exc)
            raise DegradeUnavailable(f"the degraded hook of route {route.feature!r} failed") from exc
        self.admission.degraded.observe(self._clock_ms() - t0)
        return events.respond(ctx.kind, ctx.event, 200, answer, {})

    # -- every answer ---------------------------------------------------------------------------
    def finish(self, ctx: RequestContext, response: dict[str, Any]) -> int:
        """Tag an untagged error answer of the app and replace an answer too large for Lambda
        (in place); returns the status. The dispatcher then puts ``X-Warmstart-Path`` and
        ``Server-Timing`` on it (and ``x-warmstart-stream: buffered``, :data:`STREAM_HEADER`)."""
        record = ctx.record
        status = int(response.get("statusCode", 500))
        if status >= 400 and record.failure is None and record.path == "local":
            # the app's own error answer, untagged by the app: a 5xx is the agent's fault
            record.failure = FailureTag.APP_ERROR if status >= 500 else FailureTag.BAD_REQUEST
        body = response.get("body")
        if type(body) is str and len(body) > LARGE_BODY_CHARS and too_large(response):
            _log.error("route %s: the answer exceeds Lambda's %d-byte response limit; answered "
                       "500", record.route, events.MAX_RESPONSE_BYTES)
            error = WarmstartError("the answer is larger than a Lambda response may be; see the "
                                   "function's log", status=500, code="internal_error",
                                   tag=FailureTag.MODEL_ERROR)
            refusal = self.refuse(ctx, error, record.path)
            response.clear()
            response.update(refusal)
            status = 500
        return status
