"""The chat agent's route hooks (declared in `functions.chat.handler`): the payload check and
the degraded first event. Standard library and the toolkit's `BadRequest` only.

Request body of ``POST /chat``: ``{"message": "Where is my order A-1001?"}`` (1 to
:data:`MAX_MESSAGE_CHARS` characters, nothing else).
"""

from __future__ import annotations

from typing import Any

from functions.runtime.agent import BadRequest

__all__ = ["MAX_MESSAGE_CHARS", "busy_event", "chat_payload"]

#: Longest user message, characters (about 1,000 tokens at ~4 characters a token).
MAX_MESSAGE_CHARS = 4000
CHAT_EXAMPLE = '{"message": "Where is my order A-1001?"}'


def chat_payload(body: Any) -> dict[str, Any]:
    """``validate`` of ``POST /chat``.

    Raises
    ------
    BadRequest
        422: not a JSON object, another field, a missing, empty or too long ``message``.
    """
    if not isinstance(body, dict):
        raise BadRequest(f"send a JSON object: {CHAT_EXAMPLE}", status=422)
    extra = sorted(set(body) - {"message"})
    if extra:
        named = ", ".join(repr(str(name)[:64]) for name in extra[:5]) + (", ..." if len(extra) > 5 else "")
        raise BadRequest(f"unknown field(s) {named}: send {CHAT_EXAMPLE}", status=422)
    message = body.get("message")
    if not isinstance(message, str) or not message.strip():
        raise BadRequest(f"message must be a non-empty string: send {CHAT_EXAMPLE}", status=422)
    if len(message) > MAX_MESSAGE_CHARS:
        raise BadRequest(f"message has {len(message)} characters; at most {MAX_MESSAGE_CHARS}",
                         status=422)
    return {"message": message}


def busy_event(payload: dict[str, Any]) -> dict[str, Any]:
    """``degraded_event``: the first event when no path can send a first token within the
    route's ``first_token_ms`` (the answer follows, or a final ``error`` event)."""
    return {"status": "busy", "message": "One moment: your answer follows shortly."}
