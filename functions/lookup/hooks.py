"""The lookup agent's route hooks and answer shapes (declared in `functions.lookup.handler`).

Imported by the toolkit's preload stage, not at init; standard library and
`functions.lookup.tool` only (no model, no web stack).

Answers
-------
Full (``source`` ``tool``, or ``cache`` for a fresh cached one)::

    {"order_id": "A-1001", "status": "shipped", "order": {...the tool's object...},
     "source": "tool", "age_s": 0.0, "stale": false, "partial": false}

Degraded, from the cache (``stale`` when older than ``LOOKUP_CACHE_TTL_S``; the toolkit or the
app adds ``degraded: true`` and ``level``)::

    {"order_id": "A-1001", "status": "shipped", "order": {...}, "source": "cache",
     "age_s": 42.1, "stale": true, "partial": false, "degraded": true, "level": "L2"}

Degraded, partial (nothing cached for the order)::

    {"order_id": "A-1001", "status": "unknown", "order": null, "source": "none", "age_s": null,
     "stale": false, "partial": true, "retry_after_s": 5, "message": "...",
     "degraded": true, "level": "L2"}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from functions.lookup import tool
from functions.runtime.agent import BadRequest

__all__ = [
    "check_order_id",
    "lookup_degraded",
    "lookup_downstream_ms",
    "lookup_payload",
    "order_answer",
    "orders_downstream_ms",
    "partial_answer",
    "path_only",
]

#: An order id: a letter or digit, then letters, digits, ``-`` or ``_``; 64 characters at most
#: (the order service's id format; anything else is refused before the tool is called).
ORDER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
#: The body of ``POST /v1/lookup``, for error messages.
LOOKUP_EXAMPLE = '{"order_id": "A-1001"}'


def check_order_id(value: object) -> str:
    """The order id, checked.

    Raises
    ------
    ValueError
        Not a string of 1-64 letters, digits, ``-`` or ``_`` starting with a letter or digit.
    """
    if not isinstance(value, str) or ORDER_ID.fullmatch(value) is None:
        shown = repr(value)[:80] if isinstance(value, (str, int, float)) else type(value).__name__
        raise ValueError(f"order_id must be 1-64 letters, digits, '-' or '_' (starting with a "
                         f"letter or digit), got {shown}")
    return value


def lookup_payload(body: Any) -> dict[str, Any]:
    """``validate`` of ``POST /v1/lookup``: ``{"order_id": "..."}`` and nothing else.

    Raises
    ------
    BadRequest
        422: not a JSON object, a missing or malformed ``order_id``, or another field.
    """
    if not isinstance(body, dict):
        raise BadRequest(f"send a JSON object: {LOOKUP_EXAMPLE}", status=422)
    if len(body) != 1 or "order_id" not in body:
        extra = sorted(set(body) - {"order_id"})
    else:
        extra = []
    if extra:  # named as sent, at most 5 and 64 characters each (the body may be 64 KiB)
        named = ", ".join(repr(name[:64]) for name in extra[:5]) + (", ..." if len(extra) > 5 else "")
        raise BadRequest(f"unknown field(s) {named}: send {LOOKUP_EXAMPLE}", status=422)
    if "order_id" not in body:
        raise BadRequest(f"order_id is required: send {LOOKUP_EXAMPLE}", status=422)
    try:
        return {"order_id": check_order_id(body["order_id"])}
    except ValueError as exc:
        raise BadRequest(str(exc), status=422) from None


def path_only(body: Any) -> dict[str, Any]:
    """``validate`` of ``GET /v1/orders/{order_id}``: the route has no body and the hooks do not
    see path parameters, so the payload is empty (the app checks the id).

    It is declared so that ``downstream_ms`` runs (the toolkit calls it only with a payload).
    """
    return {}


def lookup_downstream_ms(payload: Mapping[str, Any]) -> float:
    """``downstream_ms`` of ``POST /v1/lookup``: 0 when a fresh cached answer serves the order,
    else the tool's measured p95 latency, ms (admission adds it to the local estimate)."""
    return tool.state().downstream_ms(payload.get("order_id"))


def orders_downstream_ms(payload: Mapping[str, Any]) -> float:
    """``downstream_ms`` of ``GET /v1/orders/{order_id}``: the tool's measured p95, ms (the
    order id is in the path, which hooks do not see)."""
    return tool.state().downstream_ms(None)


def order_answer(order_id: str, order: Mapping[str, Any], *, source: str, age_s: float,
                 stale: bool) -> dict[str, Any]:
    """A full or cached answer (see the module docstring)."""
    return {
        "order_id": order_id,
        "status": order["status"],
        "order": dict(order),
        "source": source,
        "age_s": round(age_s, 3),
        "stale": stale,
        "partial": False,
    }


def partial_answer(order_id: str) -> dict[str, Any]:
    """The answer when nothing is cached for the order: its status is unknown; retry later."""
    return {
        "order_id": order_id,
        "status": "unknown",
        "order": None,
        "source": "none",
        "age_s": None,
        "stale": False,
        "partial": True,
        "retry_after_s": tool.RETRY_AFTER_S,
        "message": (f"the status of order {order_id!r} is unknown right now (the order service "
                    f"was not asked, and no answer is cached); retry after {tool.RETRY_AFTER_S} s"),
    }


def cached_answer(order_id: str, cached: tool.CachedAnswer) -> dict[str, Any]:
    """A cached answer, ``stale`` when older than the freshness TTL."""
    current = tool.state()
    return order_answer(order_id, cached.order, source="cache", age_s=cached.age_s,
                        stale=current.is_stale(cached))


def lookup_degraded(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``degraded`` of ``POST /v1/lookup`` (L2, or no full answer fits the SLA): the last
    cached answer for the order, with its age, else the partial answer. Never calls the tool."""
    order_id = str(payload["order_id"])
    cached = tool.state().usable(order_id)
    return cached_answer(order_id, cached) if cached is not None else partial_answer(order_id)
