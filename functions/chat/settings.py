"""The chat agent's settings, read once from ``runtime.settings`` (the environment at init).

``CHAT_LLM_URLS``
    OpenAI-compatible base URLs, comma separated, in order of preference
    (``https://api.openai.com/v1,http://vllm.internal:8000/v1``); the first is the primary,
    the others take over when it refuses or is rate limited (`functions.chat.llm`). Empty: not
    configured (``POST /chat`` answers 503 ``llm_not_configured``); ``warmstart local up``
    fills it with the local LLM stub's URL.
``CHAT_LLM_MODEL``
    The ``model`` sent (default :data:`DEFAULT_MODEL`).
``CHAT_LLM_API_KEY``
    Sent as a bearer token when set (a hosted API); leave it unset for a local or in-VPC model.
``CHAT_TOOL_URL``
    The order service's base URL (``GET {url}/orders/{id}``); empty: the tool answers
    ``tool_not_configured`` to the LLM.
``CHAT_LLM_IDLE_TIMEOUT_MS``
    Longest gap between two LLM chunks once the stream has started (default 5,000 ms).
``CHAT_TOOL_TIMEOUT_MS``
    Whole-call bound of one tool call (default 1,000 ms).
``CHAT_MAX_TOKENS``
    ``max_tokens`` of each LLM call (default 512).
``CHAT_FIRST_TOKEN_MS``
    The first token's SLA of ``POST /chat``, ms from the request's arrival (default
    :data:`DEFAULT_FIRST_TOKEN_MS`); read at import by `functions.chat.handler`
    (:func:`first_token_ms`), e.g. ``500`` for ``bench streaming``'s second SLA.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

__all__ = ["DEFAULT_FIRST_TOKEN_MS", "DEFAULT_MODEL", "ChatSettings", "first_token_ms"]

DEFAULT_MODEL = "gpt-4.1-mini"
#: A gap of 5 s is ~385 token times at the stub's 77 tokens/s: a stall, not a slow model.
DEFAULT_IDLE_TIMEOUT_MS = 5000.0
#: Half the route's 1,000 ms first-token budget: a slow tool cannot take the whole of it.
DEFAULT_TOOL_TIMEOUT_MS = 1000.0
DEFAULT_MAX_TOKENS = 512
#: A chat UI shows its first words within a second.
DEFAULT_FIRST_TOKEN_MS = 1000.0


def _url(name: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{name}: {value!r} is not an http(s) URL")
    return value.rstrip("/")


def _positive(settings: Mapping[str, str], name: str, default: float) -> float:
    raw = str(settings.get(name, "") or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive number, got {raw!r}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number, got {raw!r}")
    return value


def first_token_ms(settings: Mapping[str, str]) -> float:
    """``CHAT_FIRST_TOKEN_MS`` of ``settings`` (the environment), ms; default
    :data:`DEFAULT_FIRST_TOKEN_MS`.

    Raises
    ------
    ValueError
        Not a positive number (the message names the variable).
    """
    return _positive(settings, "CHAT_FIRST_TOKEN_MS", DEFAULT_FIRST_TOKEN_MS)


class ChatSettings(NamedTuple):
    """The parsed settings (see the module docstring)."""

    llm_urls: tuple[str, ...]
    model: str
    api_key: str | None
    tool_url: str | None
    idle_timeout_ms: float
    tool_timeout_ms: float
    max_tokens: int

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> ChatSettings:
        """Parse ``settings``.

        Raises
        ------
        ValueError
            A URL that is not http(s), a timeout or token count that is not a positive number
            (the message names the variable).
        """
        urls = tuple(_url("CHAT_LLM_URLS", u.strip())
                     for u in str(settings.get("CHAT_LLM_URLS", "") or "").split(",") if u.strip())
        tool = str(settings.get("CHAT_TOOL_URL", "") or "").strip()
        max_tokens = _positive(settings, "CHAT_MAX_TOKENS", DEFAULT_MAX_TOKENS)
        if max_tokens != int(max_tokens):
            raise ValueError(f"CHAT_MAX_TOKENS must be a whole number, got {max_tokens:g}")
        return cls(llm_urls=urls,
                   model=str(settings.get("CHAT_LLM_MODEL", "") or "").strip() or DEFAULT_MODEL,
                   api_key=str(settings.get("CHAT_LLM_API_KEY", "") or "").strip() or None,
                   tool_url=_url("CHAT_TOOL_URL", tool) if tool else None,
                   idle_timeout_ms=_positive(settings, "CHAT_LLM_IDLE_TIMEOUT_MS", DEFAULT_IDLE_TIMEOUT_MS),
                   tool_timeout_ms=_positive(settings, "CHAT_TOOL_TIMEOUT_MS", DEFAULT_TOOL_TIMEOUT_MS),
                   max_tokens=int(max_tokens))
