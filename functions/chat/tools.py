"""The chat agent's one tool: ``lookup_order``, the order-status service over HTTP.

The tool is the same downstream the lookup agent calls, ``GET {CHAT_TOOL_URL}/orders/{order_id}``
-> a JSON object with at least ``status`` (locally `infra.local.tool_stub`, which
``warmstart local up`` starts and points empty ``*_TOOL_URL`` variables at). The LLM sees it as
an OpenAI ``tools`` entry (:data:`LOOKUP_ORDER`); its result goes back as a ``tool`` message,
the JSON of `OrderTool.run`'s answer: the order, or ``{"error": code, "message": ...}`` (the
model then says it could not check; the stream goes on).

Error codes: ``bad_arguments`` (not JSON, no valid ``order_id``), ``unknown_tool``,
``tool_not_configured`` (``CHAT_TOOL_URL`` unset), ``order_not_found`` (404),
``tool_unavailable`` (refused, another status, not a JSON object), ``tool_timeout``.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["LOOKUP_ORDER", "ORDER_ID", "OrderTool", "ToolResult"]

#: An order id as the order service accepts it (the lookup agent's rule).
ORDER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
#: Largest tool answer read, bytes.
MAX_ANSWER_BYTES = 64 * 1024

#: The tool as the chat completions API declares one (``tools``, type ``function``).
LOOKUP_ORDER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up the status and expected delivery date of a customer's order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order id, e.g. A-1001"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
    },
}


class ToolResult:
    """One tool call's outcome: ``content`` (what the LLM gets), ``ok``, ``elapsed_ms``."""

    __slots__ = ("content", "elapsed_ms", "ok")

    def __init__(self, content: dict[str, Any], ok: bool, elapsed_ms: float) -> None:
        self.content, self.ok, self.elapsed_ms = content, ok, elapsed_ms


def _error(code: str, message: str, started: float) -> ToolResult:
    return ToolResult({"error": code, "message": message}, False, (time.perf_counter() - started) * 1000)


class OrderTool:
    """Runs the tool calls the LLM asks for.

    Parameters
    ----------
    client : httpx.AsyncClient
        The app's pooled client.
    base_url : str | None
        ``CHAT_TOOL_URL`` (None: every call answers ``tool_not_configured``).
    timeout_s : float
        Whole-call bound of one lookup, s.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str | None, *, timeout_s: float) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/") if base_url else None
        self.timeout_s = float(timeout_s)

    async def run(self, name: str, arguments: str) -> ToolResult:
        """Run tool ``name`` with its JSON ``arguments`` (never raises for a tool failure)."""
        started = time.perf_counter()
        if name != LOOKUP_ORDER["function"]["name"]:
            return _error("unknown_tool", f"no tool {name[:64]!r}: use lookup_order", started)
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return _error("bad_arguments", "the arguments are not JSON", started)
        order_id = args.get("order_id") if isinstance(args, dict) else None
        if not isinstance(order_id, str) or ORDER_ID.fullmatch(order_id) is None:
            return _error("bad_arguments", "order_id must be 1-64 letters, digits, '-' or '_'", started)
        if self.base_url is None:
            return _error("tool_not_configured", "CHAT_TOOL_URL is not set", started)
        try:
            reply = await self.client.get(f"{self.base_url}/orders/{quote(order_id, safe='')}",
                                          timeout=httpx.Timeout(self.timeout_s))
        except httpx.TimeoutException:
            return _error("tool_timeout", f"the order service did not answer within "
                          f"{self.timeout_s * 1000:.0f} ms", started)
        except httpx.TransportError as exc:
            return _error("tool_unavailable", f"the order service is unreachable ({type(exc).__name__})",
                          started)
        if reply.status_code == 404:
            return _error("order_not_found", f"no order {order_id!r}", started)
        if reply.status_code != 200 or len(reply.content) > MAX_ANSWER_BYTES:
            return _error("tool_unavailable", f"the order service answered {reply.status_code}", started)
        try:
            order = reply.json()
        except ValueError:
            order = None
        if not isinstance(order, dict) or not isinstance(order.get("status"), str):
            return _error("tool_unavailable", "the order service's answer has no status", started)
        return ToolResult(order, True, (time.perf_counter() - started) * 1000)
