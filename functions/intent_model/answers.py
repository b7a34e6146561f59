"""The intent contract, once: the request body's check and the answer's shape.

Used by the reference agent (its app, its payload hook and its degraded answer) and by the GPU
overflow endpoint, so the three agree by construction. Imports only the standard library.

Request: ``{"text": str, "tool_ms": number?}``; ``text`` non-blank, at most
``MAX_TEXT_CHARS`` characters; ``tool_ms`` (optional, 0 to ``MAX_TOOL_MS``) is the reference
agent's simulated downstream tool call, in ms: after classifying, the agent waits this long,
standing in for the lookup a real agent makes (``warmstart replay`` sets it to the trace's
per-invocation duration). The overflow endpoint waits the same; the degraded answer skips it.

Answer: ``{"intent": str, "score": float, "scores": {intent: float}, "degraded": bool,
"model": str}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = [
    "DEGRADED_MODEL_NAME",
    "MAX_TEXT_CHARS",
    "MAX_TOOL_MS",
    "MODEL_NAME",
    "BodyError",
    "IntentBody",
    "check_intent_answer",
    "intent_answer",
    "parse_intent_body",
    "parse_intent_json",
]

#: Model name in every full intent answer.
MODEL_NAME = "all-MiniLM-L6-v2-int8"
#: Model name of the degraded (lexical, model-free) answer.
DEGRADED_MODEL_NAME = "lexical-tfidf"
#: Longest text accepted, characters (the model sees at most 256 tokens anyway).
MAX_TEXT_CHARS = 2000
#: Longest simulated tool call, ms (10 s: well inside the 30 s API Gateway timeout).
MAX_TOOL_MS = 10_000.0
#: Longest ``model`` name an intent answer may carry, characters.
MAX_MODEL_NAME_CHARS = 128
#: What a client should send.
EXAMPLE = '{"text": "..."}'


class BodyError(ValueError):
    """The request body breaks the intent contract.

    Attributes
    ----------
    status : int
        400 (not JSON), 413 (text too long) or 422 (wrong shape).
    code : str
        ``bad_request`` or ``too_large``.
    """

    def __init__(self, message: str, *, status: int = 422, code: str = "bad_request") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class IntentBody(NamedTuple):
    """A valid intent request."""

    text: str
    tool_ms: float = 0.0

    def payload(self) -> dict[str, Any]:
        """The JSON payload (``tool_ms`` only when non-zero)."""
        return {"text": self.text, "tool_ms": self.tool_ms} if self.tool_ms else {"text": self.text}


def parse_intent_body(body: Any) -> IntentBody:
    """Check a parsed JSON body against the intent contract.

    Parameters
    ----------
    body : Any
        The decoded JSON (None for an empty body).

    Returns
    -------
    IntentBody

    Raises
    ------
    BodyError
        Missing body or text (422), empty text (422), text longer than ``MAX_TEXT_CHARS``
        (413 ``too_large``), ``tool_ms`` not a number from 0 to ``MAX_TOOL_MS`` (422).
    """
    if body is None:
        raise BodyError(f"request body is missing: send {EXAMPLE}")
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise BodyError(f"invalid request: body.text: a string is required; send {EXAMPLE}")
    text = body["text"]
    if len(text) > MAX_TEXT_CHARS:
        raise BodyError(f"text has {len(text)} characters; the limit is {MAX_TEXT_CHARS}",
                        status=413, code="too_large")
    if not text.strip():
        raise BodyError("text is empty: send a sentence to classify")
    tool_ms = body.get("tool_ms", 0.0)
    if (isinstance(tool_ms, bool) or not isinstance(tool_ms, (int, float))
            or not 0.0 <= tool_ms <= MAX_TOOL_MS):
        raise BodyError("invalid request: body.tool_ms must be a number of milliseconds from 0 "
                        f"to {MAX_TOOL_MS:g}")
    return IntentBody(text, float(tool_ms))


def parse_intent_json(raw: bytes | str) -> IntentBody:
    """`parse_intent_body` of a raw body.

    Raises
    ------
    BodyError
        As `parse_intent_body`; 400 when the body is not JSON (or nests too deeply).
    """
    import json

    if not raw.strip():
        return parse_intent_body(None)
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise BodyError(f"request body is not valid JSON: send {EXAMPLE} with content-type "
                        "application/json", status=400) from None
    return parse_intent_body(body)


def intent_answer(result: Any, *, model: str = MODEL_NAME) -> dict[str, Any]:
    """The answer body from an `functions.intent_model.model.IntentResult`."""
    return {
        "intent": result.intent,
        "score": float(result.score),
        "scores": {k: float(v) for k, v in result.scores.items()},
        "degraded": bool(result.degraded),
        "model": model,
    }


def check_intent_answer(body: Any, *, known_intents: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Check an intent answer (e.g. from the overflow endpoint) and return only its fields.

    Parameters
    ----------
    body : Any
        The decoded JSON answer.
    known_intents : Mapping[str, Any] | None
        When given, ``intent`` must be one of these (or ``"unknown"``).

    Returns
    -------
    dict[str, Any]
        ``intent``, ``score``, ``scores``, ``degraded``, ``model``: only these fields, whatever
        else the answer carries (extra fields are dropped, never passed on).

    Raises
    ------
    ValueError
        Not an object of that shape; the message names the first problem: no string
        ``intent``, or one outside ``known_intents``; ``score`` or a ``scores`` value that is
        not a finite number; ``scores`` naming an unknown intent; ``degraded`` not a boolean;
        ``model`` not a string of at most ``MAX_MODEL_NAME_CHARS`` characters.
    """
    if not isinstance(body, dict):
        raise ValueError(f"intent answer is {type(body).__name__}, expected an object")  # noqa: TRY004 - the overflow_answer contract
    intent = body.get("intent")
    if not isinstance(intent, str):
        raise ValueError("intent answer has no string 'intent'")  # noqa: TRY004
    if known_intents is not None and intent not in known_intents and intent != "unknown":
        raise ValueError(f"intent answer names an unknown intent {intent[:64]!r}")
    score = _finite(body.get("score"))
    if score is None:
        raise ValueError("intent answer has no numeric 'score'")
    scores = body.get("scores")
    if not isinstance(scores, dict) or not all(_finite(v) is not None for v in scores.values()):
        raise ValueError("intent answer has no 'scores' object of numbers")
    if known_intents is not None and not set(scores) <= set(known_intents) | {"unknown"}:
        raise ValueError("intent answer scores unknown intents")
    degraded = body.get("degraded", False)
    if not isinstance(degraded, bool):
        raise ValueError("intent answer has a 'degraded' that is not true or false")  # noqa: TRY004
    model = body.get("model", MODEL_NAME)
    if not isinstance(model, str) or len(model) > MAX_MODEL_NAME_CHARS:
        raise ValueError(f"intent answer has a 'model' that is not a name of at most "
                         f"{MAX_MODEL_NAME_CHARS} characters")
    return {"intent": intent, "score": score,
            "scores": {str(k): float(v) for k, v in scores.items()},
            "degraded": degraded, "model": model}


def _finite(value: object) -> float | None:
    """``value`` as a finite float; None when it is not a JSON number that is one
    (``json.loads`` accepts ``NaN``, ``Infinity`` and integers too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
