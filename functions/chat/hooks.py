"""The chat agent's route hooks (declared in `functions.chat.handler`): the payload check, the
degraded first event and the overflow stream's request and events. Standard library and the
toolkit's `BadRequest` only.

Request body of ``POST /chat``: ``{"message": "Where is my order A-1001?"}`` (1 to
:data:`MAX_MESSAGE_CHARS` characters, nothing else).
"""

from __future__ import annotations

from typing import Any

from functions.runtime.agent import BadRequest

__all__ = ["MAX_MESSAGE_CHARS", "busy_event", "chat_payload", "overflow_event", "overflow_request"]

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


def overflow_request(payload: dict[str, Any]) -> dict[str, Any]:
    """``overflow_request``: the body sent to the overflow endpoint's stream, an OpenAI-style
    chat request of the user's message (``{"messages": [{"role": "user", "content": ...}]}``;
    the local GPU endpoint's facade, `functions.gpu_endpoint.stream`, reads that shape). The
    overflow answer has no tool: the endpoint answers from the message alone."""
    return {"messages": [{"role": "user", "content": payload["message"]}]}


def overflow_event(part: dict[str, Any]) -> dict[str, str] | None:
    """``overflow_event``: one ``chat.completion.chunk`` of the endpoint's stream -> the agent's
    ``{"token": text}`` event, or None for a chunk without content (the role chunk, the last
    chunk with ``finish_reason``, a usage chunk).

    Raises
    ------
    ValueError
        ``choices`` present but not a list of objects with a ``delta`` object (the toolkit
        ends the stream with its error event).
    """
    choices = part.get("choices")
    if not choices:
        return None
    if not isinstance(choices, list) or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("delta", {}), dict):
        raise ValueError("not a chat.completion.chunk: choices[0].delta is not an object")  # noqa: TRY004 (malformed input: callers catch ValueError)
    content = choices[0].get("delta", {}).get("content")
    return {"token": content} if isinstance(content, str) and content else None
