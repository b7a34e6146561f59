"""Warm pings: parsed from an explicit direct-invoke marker, answered without app code.

Payload ``{"warmstart": {"ping": true, "concurrency": N, "hold_ms": 75}}`` -> answer
``{"warmstart": {"pong": true, "environment_id": ..., "init_type": ..., "cold_start": bool, ...}}``.

A ping is recognised only by :func:`functions.runtime.events.classify` returning ``PING``: never
by ``source == "aws.events"`` and never inside an HTTP event.

Counting: a ping is not traffic (no request metric, ``requests`` not incremented). A ping that
lands on a fresh on-demand environment does use up its cold start: it reports
``cold_start: true`` (the warmer learns it paid an init) and the next real request is warm,
which is the point of pinging.

Holding: with ``concurrency > 1`` the warmer invokes N times at once; each invocation holds its
environment for ``hold_ms`` so the concurrent pings land on distinct environments. A ping on an
environment whose background preload is still running also waits for the preload (bounded by the
invocation's remaining time): Lambda freezes the environment between invocations, so a preload
left running when the ping returns would not advance until the next request.

Imports only the standard library.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from functions.runtime.errors import BadRequest

#: The execution environment's `functions.runtime.dispatch.Dispatcher` (not imported, even
#: for type checking: the dispatcher imports this module, and no import circle is kept).
Dispatcher = Any

__all__ = ["MAX_CONCURRENCY", "MAX_HOLD_MS", "WarmPing", "answer", "parse_ping", "pong"]

#: Longest hold a ping may ask for, milliseconds. Holding is billed duration; one second is
#: ample for N concurrent invokes to be placed (the warmer sends them together).
MAX_HOLD_MS = 1000
#: Largest fan-out a ping may declare: Lambda's default regional concurrency quota
#: (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
MAX_CONCURRENCY = 1000


@dataclass(frozen=True)
class WarmPing:
    """A parsed warm ping.

    Attributes
    ----------
    concurrency : int
        How many environments the warmer is pinging at once (1..1000).
    hold_ms : int
        How long to hold this environment before answering, milliseconds (0..1000).
    """

    concurrency: int = 1
    hold_ms: int = 0


def _int(marker: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = marker.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value)[:32] if isinstance(value, (int, float, str)) else type(value).__name__
        raise BadRequest(f"warm ping field {key!r} must be an integer in [{low}, {high}], got {shown}")
    return value


def parse_ping(event: Mapping[str, Any]) -> WarmPing:
    """Parse the marker of an event already classified as a ping.

    Parameters
    ----------
    event : Mapping[str, Any]
        ``{"warmstart": {"ping": true, "concurrency": N, "hold_ms": ms}}``.

    Returns
    -------
    WarmPing

    Raises
    ------
    BadRequest
        The marker is not an object, ``ping`` is not ``true``, or ``concurrency`` /
        ``hold_ms`` are not integers in range.
    """
    marker = event.get("warmstart")
    if not isinstance(marker, Mapping) or marker.get("ping") is not True:
        raise BadRequest('a warm ping is {"warmstart": {"ping": true, "concurrency": N, "hold_ms": ms}}')
    return WarmPing(
        concurrency=_int(marker, "concurrency", 1, 1, MAX_CONCURRENCY),
        hold_ms=_int(marker, "hold_ms", 0, 0, MAX_HOLD_MS),
    )


def pong(
    *,
    environment_id: str,
    init_type: str,
    cold_start: bool,
    ready: bool,
    held_ms: float,
) -> dict[str, Any]:
    """The answer to a warm ping.

    Parameters
    ----------
    environment_id : str
        This execution environment's id (renewed after a SnapStart restore).
    init_type : str
        ``AWS_LAMBDA_INITIALIZATION_TYPE`` of this environment.
    cold_start : bool
        True when this ping was the environment's first invocation (on-demand only).
    ready : bool
        True when the web stack and the model are loaded.
    held_ms : float
        How long the ping held the environment, milliseconds.

    Returns
    -------
    dict[str, Any]
    """
    return {
        "warmstart": {
            "pong": True,
            "environment_id": environment_id,
            "init_type": init_type,
            "cold_start": cold_start,
            "ready": ready,
            "held_ms": round(held_ms, 3),
        }
    }


def answer(d: Dispatcher, event: Any, context: Any, started_ms: float) -> dict[str, Any]:
    """Answer a warm ping in the execution environment of ``d`` (no app code, not counted as
    traffic): finish the preload within the invocation's time, hold for ``hold_ms``, pong; a
    malformed marker is a JSON 4xx tagged ``bad_request``.

    Parameters
    ----------
    d : Dispatcher
        The environment's `functions.runtime.dispatch.Dispatcher`.
    event, context : Any
        The ping event and the Lambda context (or None).
    started_ms : float
        Monotonic invocation start, ms.
    """
    from functions.runtime import events
    from functions.runtime.errors import FailureTag, error_body
    from functions.runtime.request_context import remaining_ms

    env = d.environment
    try:
        ping = parse_ping(event)
    except BadRequest as exc:
        env.begin_invocation(counted=False)
        d.telemetry.failure(FailureTag.BAD_REQUEST, "malformed warm ping", reason=exc.message)
        body = error_body(exc.code, exc.message, request_id=getattr(context, "aws_request_id", None))
        return events.respond(events.EventKind.UNKNOWN, event, exc.status, body, {})
    cold_start = env.begin_invocation(counted=False)
    # Lambda freezes the environment between invocations: finish the preload now, within
    # this invocation's time, so the next request finds the environment warm.
    d.preload.wait_all(remaining_ms(context) / 1000.0)
    held_ms = d._clock_ms() - started_ms
    if held_ms < ping.hold_ms:
        d._sleep_s((ping.hold_ms - held_ms) / 1000.0)
        held_ms = d._clock_ms() - started_ms
    ready = d.local.ready(True)
    init_type = env.init_type.value
    d.telemetry.ping_done(cold_start=cold_start, init_type=init_type,
                          environment_id=env.environment_id, held_ms=held_ms, ready=ready)
    return pong(environment_id=env.environment_id, init_type=init_type, cold_start=cold_start,
                ready=ready, held_ms=held_ms)
