"""One request's context, built once at the edge and read by every stage of the pipeline.

The dispatcher (`functions.runtime.dispatch.Dispatcher`) makes one :class:`RequestContext` per
invocation: the event, its source, the parsed request, the route and its hooks, the payload,
the SLA's deadline and the invocation record. The decision
(`functions.runtime.admission.decide`), the paths (`functions.runtime.admission.paths`,
`functions.runtime.admission.stream`), the answers (`functions.runtime.answers`) and the loop
(`functions.runtime.admission.flow.serve_paths`) all take it instead of a dozen arguments.

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from functions.runtime import events
from functions.runtime.admission.state import NO_HOOKS, RouteHooks
from functions.runtime.errors import BadRequest

if TYPE_CHECKING:
    from functions.runtime.admission import LatencyTracker, RequestInfo
    from functions.runtime.admission.flow import PathFailure
    from functions.runtime.admission.state import Admission
    from functions.runtime.contract.levels import Level
    from functions.runtime.overflow import OverflowResult
    from functions.runtime.routes import RouteSpec
    from functions.runtime.telemetry import InvocationRecord

__all__ = ["NO_CONTEXT_REMAINING_MS", "REMAINING_MARGIN_MS", "HookError", "RequestContext", "arrival_ms_of", "read_payload", "remaining_ms", "start_admission"]


#: Safety margin kept from the invocation's remaining time when waiting, milliseconds.
REMAINING_MARGIN_MS = 250.0
#: Wait bound when no Lambda context is given (local calls), milliseconds.
NO_CONTEXT_REMAINING_MS = 30_000.0


def remaining_ms(context: Any) -> float:
    """The invocation's time left (``context.get_remaining_time_in_millis()``) minus
    :data:`REMAINING_MARGIN_MS`, ms, at least 0; :data:`NO_CONTEXT_REMAINING_MS` without a
    Lambda context (local calls)."""
    get = getattr(context, "get_remaining_time_in_millis", None)
    if get is None:
        return NO_CONTEXT_REMAINING_MS
    return max(0.0, float(get()) - REMAINING_MARGIN_MS)


class HookError(TypeError):
    """An agent's hook broke its contract (a wrong return type): a 500, logged with the hook."""


@dataclass(slots=True, eq=False)
class RequestContext:
    """One invocation on its way through the pipeline (mutable: each stage fills its part).

    Attributes
    ----------
    event : Any
        The invocation's event (any JSON value).
    context : Any
        The Lambda context (``aws_request_id``, ``get_remaining_time_in_millis``) or None.
    kind : events.EventKind
        The event's source.
    started_ms : float
        Monotonic invocation start, ms.
    record : InvocationRecord
        The invocation's record (the current invocation for the hooks and the app).
    cold_start : bool
        First invocation of this execution environment.
    request : events.HttpRequest | None
        The parsed request (None until parsed, or when the event is malformed).
    route : RouteSpec | None
        The declared route (None: undeclared, the app answers).
    hooks : RouteHooks
    sla_ms : float
        The route's SLA (a streaming route's first token), ms.
    arrival_ms : float
        When the SLA clock started, epoch ms.
    deadline_ms : float | None
        The SLA's end on the monotonic clock, ms.
    admitted_ms : float
        Monotonic time when admission started, ms.
    remaining_ms : float
        The invocation's time left at ``admitted_ms`` less a safety margin, ms (a cold
        request only).
    tracker : LatencyTracker | None
        The route's local latency tracker.
    payload : dict[str, Any] | None
        The ``validate`` hook's payload (None: no hook, or not validated yet).
    downstream_ms : float
        The ``downstream_ms`` hook's estimate, ms.
    level : Level | None
        The degradation level admission read for this request.
    info : RequestInfo | None
        The decision's view of the request (a cold request only).
    overflow : Any
        The request's overflow (an `functions.runtime.overflow.OverflowClient`, or a stream's
        `functions.runtime.overflow_stream.StreamOverflow`), None when it cannot overflow.
    overflow_payload : Mapping[str, Any] | None
        What the overflow sends (the ``overflow_request`` hook's, else the payload).
    overflow_result : OverflowResult | None
        The endpoint's answer, once overflowed.
    failures : list[PathFailure] | None
        Paths that failed so far (`functions.runtime.admission.flow.serve_paths`).
    stream_buffered : bool
        A streaming route answered in one piece (its caller does not stream).
    """

    event: Any
    context: Any
    kind: events.EventKind
    started_ms: float
    record: InvocationRecord
    cold_start: bool = False
    request: events.HttpRequest | None = None
    route: RouteSpec | None = None
    hooks: RouteHooks = NO_HOOKS
    sla_ms: float = 0.0
    arrival_ms: float = 0.0
    deadline_ms: float | None = None
    admitted_ms: float = 0.0
    remaining_ms: float = 0.0
    tracker: LatencyTracker | None = None
    payload: dict[str, Any] | None = None
    downstream_ms: float = 0.0
    level: Level | None = None
    info: RequestInfo | None = None
    overflow: Any = None
    overflow_payload: Mapping[str, Any] | None = None
    overflow_result: OverflowResult | None = None
    failures: list[PathFailure] | None = None
    stream_buffered: bool = False

    @property
    def request_id(self) -> str:
        """The Lambda request id ("" without one)."""
        return self.record.request_id or ""

    @property
    def feature(self) -> str:
        """The route's feature name ("" for an undeclared route)."""
        return self.route.feature if self.route is not None else ""


def arrival_ms_of(request: events.HttpRequest, invocation_wall_ms: float) -> float:
    """When the SLA clock of ``request`` started, epoch ms.

    The same as :func:`functions.runtime.admission.arrival_ms_from_event` (a test checks it),
    from the epoch the event parser already read (``requestContext.timeEpoch`` /
    ``requestTimeEpoch``), so the warm path does not walk the event twice.

    Parameters
    ----------
    request : events.HttpRequest
        The parsed request.
    invocation_wall_ms : float
        Invocation start, epoch ms.

    Returns
    -------
    float
        ``min(epoch, invocation_wall_ms)``; ``invocation_wall_ms`` without a usable epoch or
        when it is older than :data:`functions.runtime.events.MAX_EVENT_AGE_MS`.
    """
    epoch = request.arrival_epoch_ms
    if epoch is None or math.isnan(epoch) or invocation_wall_ms - epoch > events.MAX_EVENT_AGE_MS:
        return invocation_wall_ms
    return min(invocation_wall_ms, epoch)


#: What ``bytes.strip()`` strips (ASCII whitespace): a text body is blank by the same rule.
_ASCII_BLANKS = " \t\n\r\x0b\x0c"


#: `json.loads` of a ``str`` without its BOM check (`_json_text` keeps a BOM for the bytes parse)
_decode = json.JSONDecoder().decode


def _json_text(event: Any) -> bytes | str:
    """The request body as `json.loads` reads it: a text body (already checked to be valid
    Unicode by `functions.runtime.events.parse_http_event`) as the ``str`` itself, which
    ``json.loads`` of its UTF-8 bytes would decode back to (no encode, no encoding detection,
    no decode); the bytes (`functions.runtime.events.request_body`) for a base64 body, and for
    a text that starts with a BOM or a NUL (``json.loads`` of bytes reads those as another
    encoding)."""
    body = event.get("body")
    if (type(body) is str and body and not event.get("isBase64Encoded")
            and body[0] != "\ufeff" and "\x00" not in body[:2]):
        return body
    return events.request_body(event)


def read_payload(event: Any, validate: Callable[[Any], Mapping[str, Any]]) -> dict[str, Any]:
    """Run a route's ``validate`` hook on the request's JSON body (None when the body is empty).

    Raises
    ------
    BadRequest
        The body is not JSON (400), nests deeper than `functions.runtime.events.MAX_JSON_DEPTH`
        (400, checked before parsing), or the hook refused it (its own
        ``BadRequest``, or 422 with the message of a ``ValueError`` / ``TypeError``).
    HookError
        The hook returned something other than a mapping.
    """
    raw = _json_text(event)
    body: Any = None
    if (raw.strip(_ASCII_BLANKS) if type(raw) is str else raw.strip()):
        # before the parse: no recursion on a client's nesting (a body is at most as deep as
        # it is long: a short one has too few brackets to count)
        if len(raw) > events.MAX_JSON_DEPTH:
            events.check_json_depth(raw)
        try:
            body = _decode(raw) if type(raw) is str else json.loads(raw)
        except (ValueError, RecursionError):
            raise BadRequest("request body is not valid JSON (or nests too deeply)") from None
    try:
        payload = validate(body)
    except BadRequest:
        raise
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"invalid request: {exc}", status=422) from None
    if type(payload) is not dict and not isinstance(payload, Mapping):  # a dict: no ABC check
        raise HookError(f"the validate hook must return a dict (the payload), got "
                        f"{type(payload).__name__}")
    return dict(payload)


def read_hooks(ctx: RequestContext) -> None:
    """Run the route's ``validate`` hook (:func:`read_payload`) and its ``downstream_ms`` hook:
    sets ``ctx.payload`` (and the record's) and ``ctx.downstream_ms`` (ms, 0 without the hook).

    Raises
    ------
    BadRequest
        As :func:`read_payload`.
    HookError
        A hook returned the wrong type (``ctx.payload`` is set when it was ``downstream_ms``).
    Exception
        Whatever a hook raised.
    """
    hooks = ctx.hooks
    assert hooks.validate is not None
    payload = ctx.payload = ctx.record.payload = read_payload(ctx.event, hooks.validate)
    if hooks.downstream_ms is not None:
        value = hooks.downstream_ms(payload)
        if type(value) is float:  # the usual answer: no type checks, no float()
            ctx.downstream_ms = max(0.0, value)
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise HookError(f"the downstream_ms hook must return a number of ms, got "
                            f"{type(value).__name__}")
        ctx.downstream_ms = max(0.0, float(value))


def start_admission(ctx: RequestContext, admission: Admission, p0_sla_ms: float, wall_now: float,
                    *, first_token: bool = False) -> None:
    """Set ``ctx``'s SLA, arrival, deadline, tracker and hooks, and its queue time.

    Parameters
    ----------
    ctx : RequestContext
        Parsed and routed; ``admitted_ms`` (monotonic ms) is when admission started.
    admission : Admission
        The route's SLA, tracker and hooks (`functions.runtime.admission.state.Admission.route_state`).
    p0_sla_ms : float
        ``WARMSTART_SLA_MS``, the P0 default, ms.
    wall_now : float
        Epoch ms read with ``ctx.admitted_ms``.
    first_token : bool
        A streaming route: its SLA is the first token's (``Route.first_token_ms``, else its SLA).
    """
    route, request, record = ctx.route, ctx.request, ctx.record
    assert route is not None and request is not None
    invocation_wall_ms = wall_now - (ctx.admitted_ms - ctx.started_ms)
    arrival_ms = ctx.arrival_ms = arrival_ms_of(request, invocation_wall_ms)
    if invocation_wall_ms > arrival_ms:
        record.timings_ms["queue"] = invocation_wall_ms - arrival_ms
    sla_ms, ctx.tracker, ctx.hooks = admission.route_state(route, p0_sla_ms,
                                                           buffered_stream=ctx.stream_buffered)
    if first_token:
        sla_ms = route.first_token_ms or sla_ms
    ctx.sla_ms = sla_ms
    ctx.deadline_ms = record.deadline_ms = ctx.started_ms + (arrival_ms + sla_ms - invocation_wall_ms)
