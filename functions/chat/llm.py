"""The chat agent's LLM client: an OpenAI-compatible chat completions stream, over ``httpx``.

Why this wire contract
----------------------
The OpenAI chat completions stream (``POST {base}/chat/completions`` with ``"stream": true``:
Server-Sent Events, one ``data: {chat.completion.chunk}`` per event, ``data: [DONE]`` last; a
tool call as ``delta.tool_calls[i]`` with ``function.name`` / ``function.arguments``
fragments and ``finish_reason: "tool_calls"``; API reference:
https://platform.openai.com/docs/api-reference/chat/create and
https://platform.openai.com/docs/api-reference/chat/streaming) is what vLLM, TGI, Ollama,
LiteLLM and most gateways serve, so the same agent runs against a hosted API, a self-hosted
model or a GPU endpoint by changing ``CHAT_LLM_URLS``. Bedrock ``ConverseStream`` would tie it
to one vendor and need SigV4 signing and AWS event-stream frame decoding in the agent. No SDK:
the contract is small, and ``httpx`` (async, pooled, already in the app) carries it.

What a call does (`LLMRouter.open`)
-----------------------------------
A call must produce its first chunk before a deadline (the route's first-token budget). The
endpoints of ``CHAT_LLM_URLS`` are tried in order, those cooling off after a recent 429/5xx
last. On one endpoint:

* every failure makes the endpoint cool off (new calls try it after the others) for the
  advised wait (``retry-after-ms``, else ``Retry-After`` seconds or HTTP date: RFC 9110
  section 10.2.3), else openai-python's backoff: 0.5 s doubling per consecutive failure up to
  8 s (https://github.com/openai/openai-python, ``_base_client.py``, ``INITIAL_RETRY_DELAY``,
  ``MAX_RETRY_DELAY``); a success ends it;
* the call moves to the next endpoint at once;
* the last endpoint, after a 429 or 5xx, is retried after that wait, only when the wait ends
  before the deadline, at most :data:`MAX_ATTEMPTS_PER_ENDPOINT` attempts (a refused
  connection, another 4xx, a stream that ends or stalls before its first chunk are not).

The deadline bounds the waiting and the trying, not a healthy but slow answer: an attempt on
an endpoint that is not the last is cut at the deadline (so the next one gets its turn); the
last option (the last endpoint, or the one attempt still made once the deadline has passed)
waits for its first chunk up to ``max(time left, idle timeout)``, since a late answer (the
toolkit may have sent the route's degraded first event meanwhile) beats an error event. When
no endpoint produced a first chunk, `LLMUnavailable` (its ``cause`` the last failure's). After the first chunk, `LLMStream` yields chunks; a gap longer than the idle
timeout raises `LLMStreamError` (cause ``stall``), a connection that ends early
(``stream_closed``), an undecodable event (``bad_chunk``) and an ``{"error": ...}`` event
(``upstream_error``) too. Each failure is counted per cause in `LLMStats` and logged with the
counts (logger ``warmstart.chat``).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import httpx

__all__ = [
    "CAUSES",
    "LLMRouter",
    "LLMStats",
    "LLMStream",
    "LLMStreamError",
    "LLMUnavailable",
    "retry_after_s",
]

_LOG = logging.getLogger("warmstart.chat")

#: Failure causes, as counted and logged.
CAUSES = ("rate_limited", "unavailable", "http_error", "connect_error", "first_token_timeout",
          "stream_closed", "stall", "bad_chunk", "upstream_error")
#: Attempts on one endpoint within one call (the first and two retries: openai-python's
#: default ``max_retries`` is 2).
MAX_ATTEMPTS_PER_ENDPOINT = 3
#: The first backoff without a ``Retry-After``, s (openai-python's INITIAL_RETRY_DELAY), doubled
#: per consecutive failure of the endpoint ...
INITIAL_BACKOFF_S = 0.5
#: ... up to this, s (openai-python's MAX_RETRY_DELAY).
MAX_BACKOFF_S = 8.0


class LLMUnavailable(Exception):
    """No endpoint produced a first chunk before the deadline.

    Attributes
    ----------
    cause : str
        The last failure's cause (one of :data:`CAUSES`).
    attempts : int
        Requests sent during the call.
    """

    def __init__(self, cause: str, message: str, attempts: int) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message
        self.attempts = attempts


class LLMStreamError(Exception):
    """The stream failed after its first chunk (``cause``: ``stall``, ``stream_closed``,
    ``bad_chunk``, ``upstream_error``)."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


class LLMStats:
    """This execution environment's LLM call counts (thread-safe).

    ``calls`` (streams opened), ``attempts`` (requests sent), ``retries`` (same endpoint again),
    ``fallbacks`` (the next endpoint after a failure), ``unavailable`` (calls that got no first
    chunk), ``stream_errors`` (streams that failed after it), and ``causes`` (cause -> count).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(
            ("calls", "attempts", "retries", "fallbacks", "unavailable", "stream_errors"), 0)
        self._causes: dict[str, int] = dict.fromkeys(CAUSES, 0)

    def add(self, key: str, cause: str | None = None) -> None:
        with self._lock:
            self._counts[key] += 1
            if cause is not None:
                self._causes[cause] += 1

    def cause(self, cause: str) -> None:
        with self._lock:
            self._causes[cause] += 1

    def snapshot(self) -> dict[str, Any]:
        """The counts now: ``{"calls": ..., ..., "causes": {cause: n}}``."""
        with self._lock:
            return {**self._counts, "causes": dict(self._causes)}


def retry_after_s(headers: Mapping[str, str], *, now_s: float | None = None) -> float | None:
    """The advised wait of a 429/503, s: ``retry-after-ms`` (OpenAI's), else ``Retry-After`` as
    delay-seconds or an HTTP date (RFC 9110 section 10.2.3); None when absent or unreadable."""
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = lower.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


class _AttemptFailed(Exception):
    def __init__(self, cause: str, message: str, *, retryable: bool = False,
                 wait_s: float | None = None) -> None:
        super().__init__(message)
        self.cause, self.message, self.retryable, self.wait_s = cause, message, retryable, wait_s


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data`` of each Server-Sent Event (multi-line data joined by ``\\n``); comments and
    other fields are skipped; stops at ``[DONE]``."""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                text = "\n".join(data)
                data = []
                if text.strip() == "[DONE]":
                    return
                yield text
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" "))
    if data and "\n".join(data).strip() != "[DONE]":
        yield "\n".join(data)


def _decode(text: str) -> dict[str, Any]:
    try:
        chunk = json.loads(text)
    except ValueError:
        raise LLMStreamError("bad_chunk", f"an event is not JSON: {text[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise LLMStreamError("bad_chunk", "an event is not a JSON object")
    if "error" in chunk:
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise LLMStreamError("upstream_error", f"the LLM sent an error event: {str(message)[:200]}")
    return chunk


class LLMStream:
    """An open chat completions stream whose first chunk has arrived.

    Iterate it for the decoded ``chat.completion.chunk`` objects (the first one included), in
    order; `aclose` releases the connection (also when the client went away).

    Attributes
    ----------
    endpoint : int
        Index of the endpoint in ``CHAT_LLM_URLS`` that answered.
    first_chunk_s : float
        Seconds from the call's start to the first chunk.
    """

    def __init__(self, endpoint: int, response: httpx.Response, events: AsyncIterator[str],
                 first: dict[str, Any], *, idle_timeout_s: float, first_chunk_s: float) -> None:
        self.endpoint = endpoint
        self.first_chunk_s = first_chunk_s
        self._response = response
        self._events = events
        self._first: dict[str, Any] | None = first
        self._idle_timeout_s = idle_timeout_s

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[dict[str, Any]]:
        if self._first is not None:
            first, self._first = self._first, None
            yield first
        while True:
            try:
                async with asyncio.timeout(self._idle_timeout_s):
                    text = await anext(self._events)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise LLMStreamError("stall", f"no chunk for {self._idle_timeout_s * 1000:.0f} ms "
                                     "(CHAT_LLM_IDLE_TIMEOUT_MS)") from None
            except httpx.TimeoutException:
                raise LLMStreamError("stall", "the LLM connection timed out mid-stream") from None
            except httpx.TransportError as exc:
                raise LLMStreamError("stream_closed", f"the LLM stream ended early: "
                                     f"{type(exc).__name__}: {exc}") from None
            yield _decode(text)

    async def aclose(self) -> None:
        await self._response.aclose()


class LLMRouter:
    """Opens chat completion streams on the first endpoint that answers in time (module
    docstring).

    Parameters
    ----------
    client : httpx.AsyncClient
        The app's pooled client (made in its lifespan).
    urls : Sequence[str]
        Base URLs in order of preference (``https://api.openai.com/v1``,
        ``http://vllm:8000/v1``): requests go to ``{url}/chat/completions``.
    api_key : str | None
        Sent as ``Authorization: Bearer ...`` when given.
    idle_timeout_s : float
        Longest gap between two chunks after the first, s.
    stats : LLMStats
    clock : callable
        Monotonic seconds (tests inject one only to read it; waits are real).

    Raises
    ------
    ValueError
        No URL, or a non-positive idle timeout.
    """

    def __init__(self, client: httpx.AsyncClient, urls: Sequence[str], *, api_key: str | None,
                 idle_timeout_s: float, stats: LLMStats,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not urls:
            raise ValueError("at least one LLM URL is needed (CHAT_LLM_URLS)")
        if not idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {idle_timeout_s}")
        self.client = client
        self.urls = tuple(u.rstrip("/") for u in urls)
        self.api_key = api_key
        self.idle_timeout_s = float(idle_timeout_s)
        self.stats = stats
        self._clock = clock
        self._cool_until = [0.0] * len(self.urls)
        self._failures = [0] * len(self.urls)  # consecutive failed attempts per endpoint

    def order(self) -> list[int]:
        """Endpoint indexes to try: those not cooling off first, each group in declared order."""
        now = self._clock()
        return sorted(range(len(self.urls)), key=lambda i: (self._cool_until[i] > now, i))

    def _failed(self, endpoint: int, failure: _AttemptFailed, status: int | None = None) -> None:
        self.stats.cause(failure.cause)
        _LOG.warning(json.dumps({"message": "llm attempt failed", "cause": failure.cause,
                                 "endpoint": endpoint, "url": self.urls[endpoint], "status": status,
                                 "detail": failure.message[:200], "counts": self.stats.snapshot()}))

    async def open(self, body: Mapping[str, Any], deadline_s: float) -> LLMStream:
        """Send ``body`` (a chat completions request with ``"stream": true``) and return the
        stream once its first chunk arrived; ``deadline_s`` (this router's clock, s) ends the
        retries and the fallbacks (the module docstring says how).

        Raises
        ------
        LLMUnavailable
            No endpoint produced a first chunk in time (see the module docstring).
        """
        self.stats.add("calls")
        started = self._clock()
        attempts = 0
        last: _AttemptFailed | None = None
        order = self.order()
        late = False  # the one attempt allowed once the deadline has passed was made
        for position, endpoint in enumerate(order):
            if late:
                break
            if position > 0:
                self.stats.add("fallbacks")
            for attempt in range(1, MAX_ATTEMPTS_PER_ENDPOINT + 1):
                remaining = deadline_s - self._clock()
                # the last option waits for its first chunk up to the idle timeout, even past
                # the deadline (a late answer beats none); an earlier one is cut at the deadline
                final = position == len(order) - 1 or remaining <= 0
                late = remaining <= 0
                wait_s = max(remaining, self.idle_timeout_s) if final else remaining
                attempts += 1
                self.stats.add("attempts")
                status: int | None = None
                try:
                    stream = await self._attempt(endpoint, body, wait_s, started)
                except _AttemptFailed as failure:
                    last = failure
                    status = getattr(failure, "status", None)
                else:
                    self._failures[endpoint] = 0
                    self._cool_until[endpoint] = 0.0
                    return stream
                self._failed(endpoint, last, status)
                self._failures[endpoint] += 1
                backoff = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2 ** (self._failures[endpoint] - 1))
                wait = last.wait_s if last.wait_s is not None else backoff
                self._cool_until[endpoint] = max(self._cool_until[endpoint], self._clock() + wait)
                if not last.retryable or position < len(order) - 1:
                    break  # not worth a retry, or another endpoint is ready now: no wait here
                if late or attempt == MAX_ATTEMPTS_PER_ENDPOINT or self._clock() + wait >= deadline_s:
                    break
                self.stats.add("retries")
                await asyncio.sleep(wait)
        self.stats.add("unavailable")
        cause = last.cause if last is not None else "first_token_timeout"
        message = last.message if last is not None else "no attempt"
        raise LLMUnavailable(cause, f"no LLM endpoint sent a first chunk ({attempts} attempt(s) "
                                    f"within the first-token budget; last: {message})", attempts)

    async def _attempt(self, endpoint: int, body: Mapping[str, Any], remaining_s: float,
                       started_s: float) -> LLMStream:
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        timeout = httpx.Timeout(remaining_s, read=self.idle_timeout_s + 1.0)
        request = self.client.build_request("POST", f"{self.urls[endpoint]}/chat/completions",
                                            json=dict(body), headers=headers, timeout=timeout)
        response: httpx.Response | None = None
        try:
            async with asyncio.timeout(remaining_s):
                response = await self.client.send(request, stream=True)
                if response.status_code != 200:
                    await response.aread()
                    raise _status_failure(response)
                events = _events(response.aiter_lines())
                try:
                    first = _decode(await anext(events))
                except StopAsyncIteration:
                    raise _AttemptFailed("stream_closed", "the stream ended before its first chunk") from None
        except _AttemptFailed:
            await _close(response)
            raise
        except LLMStreamError as exc:
            await _close(response)
            raise _AttemptFailed(exc.cause, exc.message) from None
        except TimeoutError:
            await _close(response)
            raise _AttemptFailed("first_token_timeout",
                                 f"no first chunk within {remaining_s * 1000:.0f} ms") from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            await _close(response)
            raise _AttemptFailed("connect_error", f"{type(exc).__name__}: {exc}") from None
        except httpx.TimeoutException as exc:
            await _close(response)
            raise _AttemptFailed("first_token_timeout", f"{type(exc).__name__}: {exc}") from None
        except httpx.TransportError as exc:
            await _close(response)
            raise _AttemptFailed("stream_closed", f"{type(exc).__name__}: {exc}") from None
        except BaseException:  # cancelled (the client went away): release the connection
            await _close(response)
            raise
        return LLMStream(endpoint, response, events, first, idle_timeout_s=self.idle_timeout_s,
                         first_chunk_s=self._clock() - started_s)


def _status_failure(response: httpx.Response) -> _AttemptFailed:
    status = response.status_code
    try:
        detail = str((response.json().get("error") or {}).get("message") or "")[:200]
    except (ValueError, AttributeError):
        detail = response.text[:200]
    wait = retry_after_s(response.headers)
    if status == 429:
        failure = _AttemptFailed("rate_limited", f"429 {detail}", retryable=True, wait_s=wait)
    elif status >= 500:
        failure = _AttemptFailed("unavailable", f"{status} {detail}", retryable=True, wait_s=wait)
    else:
        failure = _AttemptFailed("http_error", f"{status} {detail}")
    failure.status = status  # type: ignore[attr-defined]
    return failure


async def _close(response: httpx.Response | None) -> None:
    if response is not None:
        await response.aclose()
