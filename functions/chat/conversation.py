"""One chat turn as a stream of Server-Sent Events: the LLM, its tool call, the answer's tokens.

Events (``text/event-stream``; `functions.runtime.streaming.sse_event`), in order:

``event: tool_call`` ``{"tool_call": {"name"}}``, as soon as the LLM's stream names a tool (its
                  first chunk): the client can show "looking up your order"; on a tool turn
                  this is the first token, one LLM time-to-first-token after the request.
``event: tool``   ``{"tool": {"name", "arguments", "result"}}``, once per tool call, after the
                  tool answered.
``data``          ``{"token": "..."}``: one per content chunk of the LLM, as it arrives.
``event: done``   ``{"finish_reason", "tokens", "model", "endpoint"}``: the stream is complete.
``event: error``  ``{"error": {"type", "message"}}``, last, instead of ``done``: ``type``
                  ``llm_unavailable`` (no endpoint sent a first chunk: the retries and the
                  second endpoint the first-token budget allowed, and the last option's wait,
                  `functions.chat.llm`) or ``llm_stream_error`` (the LLM stream failed after
                  it started: closed early, stalled past ``CHAT_LLM_IDLE_TIMEOUT_MS``, an
                  undecodable or error event). The stream ends normally after it (no Runtime
                  API error trailers); the invocation's failure is tagged (``runtime.fail``).

The turn: the LLM is called with the tool; when it answers with tool calls (``finish_reason:
"tool_calls"``) each is run and its result sent back as a ``tool`` message, and the LLM is
called again (at most :data:`MAX_TOOL_ROUNDS` rounds with tools, then without). Each call's
retries and fallbacks end at a first-token deadline: for the first call what is left of
``first_token_ms`` since the request's arrival, for a call after a tool ``first_token_ms`` from
the moment the tool's event was sent (the client has seen progress then). Nothing sent to the
client is ever retried: a failure after the call's first chunk ends the stream with
``llm_stream_error``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from functions.chat.llm import LLMRouter, LLMStreamError, LLMUnavailable
from functions.chat.tools import LOOKUP_ORDER, OrderTool
from functions.runtime.stream_parts import error_event
from functions.runtime.streaming import sse_event

__all__ = ["MAX_TOOL_ROUNDS", "SYSTEM_PROMPT", "Turn"]

_LOG = logging.getLogger("warmstart.chat")

#: LLM calls that may ask for tools in one turn; the next call is sent without tools.
MAX_TOOL_ROUNDS = 2
SYSTEM_PROMPT = ("You are a customer-support assistant for an online shop. Use the lookup_order "
                 "tool to check an order's status before you answer questions about it; answer "
                 "in one or two short sentences.")

#: The invocation's failure tag (`functions.runtime.errors.FailureTag`) per error event and
#: cause: the LLM is a downstream (unavailable, or too slow: ``downstream_timeout``); a stream
#: that broke after it started is a ``stream_error``.
_TAGS = {("llm_unavailable", "first_token_timeout"): "downstream_timeout",
         ("llm_stream_error", "stall"): "downstream_timeout"}
_DEFAULT_TAGS = {"llm_unavailable": "tool_unavailable", "llm_stream_error": "stream_error"}


class Turn:
    """One chat turn (see the module docstring).

    Parameters
    ----------
    router : LLMRouter
    tool : OrderTool
    model : str
        The ``model`` sent.
    max_tokens : int
        ``max_tokens`` of each call.
    budget_s : float
        The first-token budget of each call, s.
    started_s : float
        The request's arrival on the router's clock, s.
    fail : callable
        ``fail(tag)``: tags the invocation's failure (``AgentRuntime.fail``).
    clock : callable
        Monotonic seconds, the router's clock.
    """

    def __init__(self, router: LLMRouter, tool: OrderTool, *, model: str, max_tokens: int,
                 budget_s: float, started_s: float, fail: Callable[[str], object],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.router, self.tool, self.model, self.max_tokens = router, tool, model, max_tokens
        self.budget_s, self.started_s, self._fail, self._clock = budget_s, started_s, fail, clock
        self.tokens = 0

    def _request(self, messages: list[dict[str, Any]], with_tools: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True,
                                "max_tokens": self.max_tokens}
        if with_tools:
            body["tools"] = [LOOKUP_ORDER]
        return body

    def _failed(self, kind: str, cause: str, message: str) -> bytes:
        self._fail(_TAGS.get((kind, cause), _DEFAULT_TAGS[kind]))
        if kind == "llm_stream_error":  # an unavailable LLM is counted by the router
            self.router.stats.add("stream_errors", cause)
        _LOG.warning(json.dumps({"message": f"chat stream ended with {kind}", "cause": cause,
                                 "tokens": self.tokens, "counts": self.router.stats.snapshot()}))
        return error_event(kind, message)

    async def events(self, message: str) -> AsyncIterator[bytes]:
        """The turn's events, each as SSE bytes (the module docstring's order)."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": message}]
        deadline = self.started_s + self.budget_s
        for round_ in range(MAX_TOOL_ROUNDS + 1):
            try:
                stream = await self.router.open(self._request(messages, round_ < MAX_TOOL_ROUNDS),
                                                deadline)
            except LLMUnavailable as exc:
                yield self._failed("llm_unavailable", exc.cause, exc.message)
                return
            calls: dict[int, dict[str, Any]] = {}
            finish: str | None = None
            try:
                async for chunk in stream:
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        content = delta.get("content")
                        if isinstance(content, str) and content:
                            self.tokens += 1
                            yield sse_event({"token": content})
                        for fragment in delta.get("tool_calls") or ():
                            named = _merge_tool_call(calls, fragment)
                            if named is not None:
                                yield sse_event({"tool_call": {"name": named}}, event="tool_call")
                        finish = choice.get("finish_reason") or finish
            except LLMStreamError as exc:
                yield self._failed("llm_stream_error", exc.cause, exc.message)
                return
            finally:
                await stream.aclose()
            if finish is None:
                yield self._failed("llm_stream_error", "stream_closed",
                                   "the LLM stream ended without a finish_reason")
                return
            if finish != "tool_calls" or not calls:
                yield sse_event({"finish_reason": finish, "tokens": self.tokens, "model": self.model,
                                 "endpoint": stream.endpoint}, event="done")
                return
            ordered = [calls[i] for i in sorted(calls)]
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}} for c in ordered]})
            for call in ordered:
                result = await self.tool.run(call["name"], call["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": json.dumps(result.content)})
                yield sse_event({"tool": {"name": call["name"], "arguments": call["arguments"],
                                          "result": result.content}}, event="tool")
            deadline = self._clock() + self.budget_s
        # the last call was sent without tools and still asked for one
        yield self._failed("llm_stream_error", "bad_chunk",
                           f"the LLM asked for tools more than {MAX_TOOL_ROUNDS} times")


def _merge_tool_call(calls: dict[int, dict[str, Any]], fragment: Any) -> str | None:
    """Add one ``delta.tool_calls[i]`` fragment to the call at its ``index``; the tool's name
    when this fragment is the first to name it, else None."""
    if not isinstance(fragment, dict):
        return None
    index = fragment.get("index", 0)
    call = calls.setdefault(index if isinstance(index, int) else 0,
                            {"id": "", "name": "", "arguments": ""})
    if fragment.get("id"):
        call["id"] = str(fragment["id"])
    function = fragment.get("function") or {}
    named = None
    if function.get("name"):
        named = None if call["name"] else str(function["name"])
        call["name"] += str(function["name"])
    if function.get("arguments"):
        call["arguments"] += str(function["arguments"])
    return named
