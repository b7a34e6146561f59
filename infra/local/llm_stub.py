"""A local LLM service speaking the OpenAI-compatible chat completions stream (standard library).

``POST /v1/chat/completions`` with ``"stream": true`` answers Server-Sent Events, one
``data: {chat.completion.chunk}`` line per event, then ``data: [DONE]``, the wire the OpenAI API
reference defines and vLLM, TGI, Ollama and LiteLLM serve as well
(https://platform.openai.com/docs/api-reference/chat/create,
https://platform.openai.com/docs/api-reference/chat/streaming):

* a request with ``tools`` and no ``tool`` message yet is answered with one tool call to the
  first tool: a first chunk with ``delta.tool_calls[0]`` (``index``, ``id``, ``type``,
  ``function.name``, ``function.arguments: ""``), the arguments JSON in fragments
  (``delta.tool_calls[0].function.arguments``), a last chunk with ``finish_reason:
  "tool_calls"``;
* otherwise (no tools, or after the tool result) a text answer, one ``delta.content`` token per
  chunk (the first with ``role: "assistant"``), a last chunk with ``finish_reason: "stop"``, and
  a usage chunk when ``stream_options.include_usage`` is set. The text repeats the last tool
  result's ``status`` when there is one.

``"stream": false`` (or absent) gets the whole ``chat.completion`` object after the same wait.
``GET /v1/models`` and ``GET /healthz`` answer at once.

Timing (``ttft_ms``, ``tokens_per_s``)
--------------------------------------
Defaults are Artificial Analysis' published medians for GPT-4.1 mini on OpenAI's API, a small
hosted model: time to first token **0.93 s** and output speed **77.2 tokens/s** ("GPT-4.1 mini
API Provider Benchmarking & Analysis", https://artificialanalysis.ai/models/gpt-4-1-mini/providers,
medians of the past 72 hours under their default workload of 10k input tokens; the page prints
no date: read 2026-12-02; also in tests/data/SOURCES.md). A chat turn's prompt is shorter than
10k tokens, so the default TTFT is on the slow side. The first content (or tool-call) chunk
leaves ``ttft_ms`` after the request was read, each further chunk ``1000 / tokens_per_s`` ms
after the previous one; every wait is divided by ``time_scale`` (stub seconds per real second:
100 runs a stream 100x faster), so tests keep the shape and lose the time.

Faults
------
Chosen per request, first match wins: the next entry of a scripted queue (`LLMStub.script`),
the standing fault (`LLMStub.fail`, optionally for ``times`` requests), the request header
``X-Stub-Fault`` (``rate_limit``, ``unavailable``, ``close_early``, ``stall``, with
``;key=value`` options: ``X-Stub-Fault: rate_limit;retry_after_s=2``):

``rate_limit``
    429 with ``Retry-After`` (whole seconds, rounded up: RFC 9110 section 10.2.3) and
    ``retry-after-ms`` (OpenAI sends both; openai-python reads the ms header first), and an
    OpenAI error body (``{"error": {"message", "type", "code"}}``).
``unavailable``
    503 (with ``Retry-After`` only when ``retry_after_s`` is given).
``close_early``
    the stream starts, sends ``after_tokens`` chunks (default 3), then the connection is
    closed without the chunked body's end: the client reads an incomplete body.
``stall``
    the stream starts, sends ``after_tokens`` chunks (default 0: not even the first), then
    nothing for ``stall_s`` (default 30 s), or until `release`, `reset` or `stop`; then the
    connection is closed without the body's end.

Counts: `LLMStub.served` (requests, streams completed, tool calls, text answers, tokens, client
disconnects, faults per kind) and `LLMStub.requests` (each request body, in arrival order).

From a test::

    stub = LLMStub(time_scale=100).start()
    env = {"CHAT_LLM_URLS": stub.url}              # http://127.0.0.1:PORT/v1
    stub.script(LLMFault("rate_limit", retry_after_s=0.05), None)   # next two requests
    stub.fail("unavailable", times=2)
    stub.served["faults"]["rate_limit"]
    stub.stop()

From a shell: ``python -m infra.local.llm_stub --port 8901`` (then
``curl -N localhost:8901/v1/chat/completions -d '{"stream": true, "messages": [...]}'``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal
from urllib.parse import urlsplit

from infra.local.stub_server import StubServer

__all__ = ["DEFAULT_TOKENS_PER_S", "DEFAULT_TTFT_MS", "FAULTS", "LLMFault", "LLMStub", "main"]

#: Time to first token, ms: Artificial Analysis, GPT-4.1 mini on OpenAI (module docstring).
DEFAULT_TTFT_MS = 930.0
#: Output speed, tokens per second: the same source.
DEFAULT_TOKENS_PER_S = 77.2
#: The model name answered when the request names none.
DEFAULT_MODEL = "stub-gpt-4.1-mini"
#: Longest a ``stall`` holds its stream, stub seconds (well past any client timeout).
DEFAULT_STALL_S = 30.0
#: Largest request body read, bytes.
MAX_REQUEST_BYTES = 1024 * 1024
#: The header that picks a fault for one request.
FAULT_HEADER = "X-Stub-Fault"

LLMFaultKind = Literal["rate_limit", "unavailable", "close_early", "stall"]
FAULTS: tuple[str, ...] = ("rate_limit", "unavailable", "close_early", "stall")
_ID = re.compile(r"\b[A-Za-z]{1,4}-\d{1,10}\b")
_TOKEN = re.compile(r"\s*\S+")


@dataclass(frozen=True)
class LLMFault:
    """One injected failure (see the module docstring).

    Parameters
    ----------
    kind : {"rate_limit", "unavailable", "close_early", "stall"}
    retry_after_s : float | None
        ``rate_limit``: the advised wait, s (default 1); ``unavailable``: sent only when given.
    after_tokens : int | None
        ``close_early`` (default 3) and ``stall`` (default 0): chunks sent before it happens.
    stall_s : float
        ``stall``: how long nothing is sent, stub seconds.

    Raises
    ------
    ValueError
        An unknown kind, a negative wait or count.
    """

    kind: LLMFaultKind
    retry_after_s: float | None = None
    after_tokens: int | None = None
    stall_s: float = DEFAULT_STALL_S

    def __post_init__(self) -> None:
        if self.kind not in FAULTS:
            raise ValueError(f"unknown fault {self.kind!r}: use one of {', '.join(FAULTS)}")
        if self.retry_after_s is not None and not self.retry_after_s >= 0:
            raise ValueError(f"retry_after_s must be >= 0, got {self.retry_after_s}")
        if self.after_tokens is not None and self.after_tokens < 0:
            raise ValueError(f"after_tokens must be >= 0, got {self.after_tokens}")
        if not self.stall_s >= 0:
            raise ValueError(f"stall_s must be >= 0, got {self.stall_s}")

    @classmethod
    def parse(cls, text: str) -> LLMFault:
        """``"rate_limit;retry_after_s=2"`` -> ``LLMFault("rate_limit", retry_after_s=2.0)``.

        Raises
        ------
        ValueError
            An unknown kind or option, or a value that is not a number.
        """
        kind, *options = [part.strip() for part in text.split(";")]
        values: dict[str, Any] = {}
        for option in filter(None, options):
            key, _, raw = option.partition("=")
            key = key.strip()
            if key not in ("retry_after_s", "after_tokens", "stall_s"):
                raise ValueError(f"unknown fault option {key!r}: use retry_after_s, after_tokens, stall_s")
            values[key] = int(raw) if key == "after_tokens" else float(raw)
        return cls(kind, **values)  # type: ignore[arg-type]

    def tokens_before(self) -> int:
        """Chunks sent before a ``close_early`` or ``stall``."""
        if self.after_tokens is not None:
            return self.after_tokens
        return 3 if self.kind == "close_early" else 0


def _counts() -> dict[str, Any]:
    return {"requests": 0, "streams_completed": 0, "tool_calls": 0, "text_answers": 0,
            "tokens": 0, "bad_requests": 0, "disconnects": 0, "faults": dict.fromkeys(FAULTS, 0)}


@dataclass
class _State:
    queue: deque[LLMFault | None] = field(default_factory=deque)
    standing: LLMFault | None = None
    standing_left: int | None = None
    served: dict[str, Any] = field(default_factory=_counts)
    requests: list[dict[str, Any]] = field(default_factory=list)


class LLMStub(StubServer):
    """The LLM service on ``127.0.0.1``, served from daemon threads.

    Parameters
    ----------
    host : str
        Bind address.
    port : int
        0: any free port (read `url` after `start`).
    ttft_ms : float
        Wait before the first chunk, stub ms (>= 0).
    tokens_per_s : float
        Chunks per stub second after the first (> 0).
    time_scale : float
        Stub seconds per real second (> 0): every wait is divided by it.
    model : str
        The model answered when the request names none.
    answer : str | None
        The text answer's template; ``{status}`` and ``{subject}`` are filled from the last tool
        result (default: a sentence of about 30 tokens about an order).

    Raises
    ------
    ValueError
        A negative TTFT, a non-positive speed or time scale.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, ttft_ms: float = DEFAULT_TTFT_MS,
                 tokens_per_s: float = DEFAULT_TOKENS_PER_S, time_scale: float = 1.0,
                 model: str = DEFAULT_MODEL, answer: str | None = None) -> None:
        if not ttft_ms >= 0:
            raise ValueError(f"ttft_ms must be >= 0, got {ttft_ms}")
        if not tokens_per_s > 0:
            raise ValueError(f"tokens_per_s must be > 0, got {tokens_per_s}")
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        super().__init__(host=host, port=port)
        self.ttft_ms = float(ttft_ms)
        self.tokens_per_s = float(tokens_per_s)
        self.time_scale = float(time_scale)
        self.model = model
        self.answer = answer or ("Your order {subject} is {status}. I checked the order service just "
                                 "now; if anything changes you will get an email, and you can ask "
                                 "me again at any time.")
        self._state = _State()
        self._lock = threading.Lock()

    thread_name = "llm-stub"
    title = "the LLM stub"
    #: the OpenAI-style base URL: clients post to ``{url}/chat/completions``
    url_path = "/v1"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _Handler

    # -- what tests drive -------------------------------------------------------------------
    def fail(self, fault: LLMFault | LLMFaultKind | None, *, times: int | None = None) -> None:
        """Fail the next requests with ``fault`` (an `LLMFault` or its kind; None: answer normally),
        all of them or ``times`` of them.

        Raises
        ------
        ValueError
            An unknown kind, or ``times`` < 1.
        """
        if times is not None and times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        if isinstance(fault, str):
            fault = LLMFault(fault)
        with self._lock:
            self._state.standing, self._state.standing_left = fault, times if fault else None

    def script(self, *faults: LLMFault | LLMFaultKind | None) -> None:
        """Queue one entry per coming request, in order (None: that request is answered
        normally); a queued entry wins over `fail` and the header."""
        with self._lock:
            self._state.queue.extend(LLMFault(f) if isinstance(f, str) else f for f in faults)

    def release(self) -> None:
        """End every stall now (each stalled stream then closes without its end)."""
        self._released.set()
        self._released.clear()

    def reset(self) -> None:
        """No faults, no queue, zero counts, no recorded requests; stalled streams released."""
        self._released.set()
        with self._lock:
            self._state = _State()
        self._released.clear()

    @property
    def served(self) -> dict[str, Any]:
        """A copy of the counts: ``requests``, ``streams_completed``, ``tool_calls``,
        ``text_answers``, ``tokens`` (content and argument chunks sent), ``bad_requests``,
        ``disconnects`` (streams the client closed before their end; the stub stopped
        generating), ``faults`` (kind -> count)."""
        with self._lock:
            served = dict(self._state.served)
            served["faults"] = dict(served["faults"])
            return served

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received on ``/v1/chat/completions``, in arrival order."""
        with self._lock:
            return list(self._state.requests)

    # -- what a request gets ----------------------------------------------------------------
    def _next_fault(self, header: str | None) -> LLMFault | None:
        with self._lock:
            state = self._state
            if state.queue:
                return state.queue.popleft()
            if state.standing is not None:
                fault = state.standing
                if state.standing_left is not None:
                    state.standing_left -= 1
                    if state.standing_left <= 0:
                        state.standing, state.standing_left = None, None
                return fault
        return LLMFault.parse(header) if header else None

    def _count(self, key: str, by: int = 1) -> None:
        with self._lock:
            self._state.served[key] += by

    def _count_fault(self, kind: str) -> None:
        with self._lock:
            self._state.served["faults"][kind] += 1

    def _record(self, body: dict[str, Any]) -> None:
        with self._lock:
            self._state.served["requests"] += 1
            self._state.requests.append(body)

    def wait_s(self, stub_ms: float) -> float:
        """Real seconds for ``stub_ms`` stub milliseconds."""
        return stub_ms / 1000.0 / self.time_scale

    def stalled(self, stub_s: float) -> None:
        """Hold for ``stub_s`` stub seconds, or until `reset` / `stop`."""
        self._released.wait(stub_s / self.time_scale)


def plan_turn(body: Mapping[str, Any], answer: str) -> tuple[str, Any]:
    """What the stub answers to ``body``: ``("tool_call", (name, arguments_json))`` or
    ``("text", [token, ...])`` (see the module docstring)."""
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    tool_results = [m for m in messages if m.get("role") == "tool"]
    user_text = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    if tools and not tool_results:
        function = tools[0].get("function") or {}
        name = str(function.get("name") or "tool")
        required = (function.get("parameters") or {}).get("required") or []
        found = _ID.search(user_text)
        value = found.group(0) if found else user_text.strip()[:64]
        return "tool_call", (name, json.dumps({str(key): value for key in required}))
    found = _ID.search(user_text)
    status, subject = "unknown", found.group(0) if found else "you asked about"
    if tool_results:
        try:
            result = json.loads(str(tool_results[-1].get("content") or ""))
        except ValueError:
            result = None
        if isinstance(result, dict):
            status = str(result.get("status") or result.get("error") or status)
            subject = str(result.get("order_id") or subject)
    return "text", _TOKEN.findall(answer.format(status=status, subject=subject))


class _StreamClosed(Exception):
    """A ``close_early`` fault: end the connection without ending the chunked body."""


class _Handler(BaseHTTPRequestHandler):
    stub: LLMStub
    server_version = "llm-stub/1"
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as the hosted APIs

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and the CLI read the stub's counts, not its access log

    def _json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str, kind: str, code: str | None = None,
               headers: Mapping[str, str] | None = None) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": code}},
                   headers)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/healthz":
            self._json(200, {"status": "ok"})
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.stub.model, "object": "model",
                                                         "owned_by": "warmstart-local"}]})
        else:
            self._error(404, f"no route GET {path}", "invalid_request_error", "not_found")

    def do_POST(self) -> None:
        stub = self.stub
        path = urlsplit(self.path).path.rstrip("/")
        length = self.headers.get("Content-Length")
        try:
            size = int(length) if length is not None else 0
        except ValueError:
            size = -1
        if not 0 <= size <= MAX_REQUEST_BYTES:
            self.close_connection = True
            stub._count("bad_requests")
            self._error(400, f"Content-Length must be 0..{MAX_REQUEST_BYTES}", "invalid_request_error")
            return
        raw = self.rfile.read(size)
        if path != "/v1/chat/completions":
            self._error(404, f"no route POST {path}: use /v1/chat/completions", "invalid_request_error",
                        "not_found")
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
                raise ValueError("messages must be a non-empty list")
            fault = stub._next_fault(self.headers.get(FAULT_HEADER))
        except ValueError as exc:
            stub._count("bad_requests")
            self._error(400, f"bad request: {exc}", "invalid_request_error")
            return
        stub._record(body)
        if fault is not None and fault.kind in ("rate_limit", "unavailable"):
            self._refuse(fault)
            return
        kind, plan = plan_turn(body, stub.answer)
        model = str(body.get("model") or stub.model)
        if body.get("stream"):
            self._stream(body, model, kind, plan, fault)
        else:
            self._whole(model, kind, plan)

    def _refuse(self, fault: LLMFault) -> None:
        stub = self.stub
        stub._count_fault(fault.kind)
        headers: dict[str, str] = {}
        retry = fault.retry_after_s if fault.retry_after_s is not None else (
            1.0 if fault.kind == "rate_limit" else None)
        if retry is not None:
            headers = {"Retry-After": str(math.ceil(retry)), "retry-after-ms": f"{retry * 1000:.0f}"}
        if fault.kind == "rate_limit":
            self._error(429, "Rate limit reached for requests (injected by the LLM stub)", "requests",
                        "rate_limit_exceeded", headers)
        else:
            self._error(503, "The server is overloaded or not ready yet (injected by the LLM stub)",
                        "server_error", "service_unavailable", headers)

    def _chunks(self, model: str, kind: str, plan: Any, include_usage: bool) -> Iterator[tuple[dict[str, Any], bool]]:
        """``(chunk, counts_as_token)`` in order, the last without ``choices`` when usage is on."""
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "system_fingerprint": "fp_stub", "choices": [
                        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        count = 0
        if kind == "tool_call":
            name, arguments = plan
            yield chunk({"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                 "function": {"name": name, "arguments": ""}}]}), True
            for piece in _fragments(arguments):
                count += 1
                yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}), True
            yield chunk({}, "tool_calls"), False
        else:
            for i, token in enumerate(plan):
                count += 1
                yield chunk({"role": "assistant", "content": token} if i == 0 else {"content": token}), True
            yield chunk({}, "stop"), False
        if include_usage:
            usage = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": count + 1,
                                              "total_tokens": count + 1}}
            yield usage, False

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, body: Mapping[str, Any], model: str, kind: str, plan: Any, fault: LLMFault | None) -> None:
        stub = self.stub
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        sent = 0
        try:
            for i, (chunk, is_token) in enumerate(self._chunks(model, kind, plan, include_usage)):
                if fault is not None and sent == fault.tokens_before() and is_token:
                    stub._count_fault(fault.kind)
                    if fault.kind == "stall":
                        stub.stalled(fault.stall_s)
                    raise _StreamClosed
                time.sleep(stub.wait_s(stub.ttft_ms if i == 0 else 1000.0 / stub.tokens_per_s))
                self._write_chunk(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
                if is_token:
                    sent += 1
                    stub._count("tokens")
            # counted before [DONE]: a client that stops reading at [DONE] sees the counts
            stub._count("streams_completed")
            stub._count("tool_calls" if kind == "tool_call" else "text_answers")
            self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except _StreamClosed:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away: stop generating
            stub._count("disconnects")

    def _whole(self, model: str, kind: str, plan: Any) -> None:
        stub = self.stub
        tokens = len(list(_fragments(plan[1]))) if kind == "tool_call" else len(plan)
        time.sleep(stub.wait_s(stub.ttft_ms + max(0, tokens - 1) * 1000.0 / stub.tokens_per_s))
        if kind == "tool_call":
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                 "function": {"name": plan[0], "arguments": plan[1]}}]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "".join(plan)}, "stop"
        stub._count("tokens", tokens)
        stub._count("tool_calls" if kind == "tool_call" else "text_answers")
        self._json(200, {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
                         "created": int(time.time()), "model": model,
                         "choices": [{"index": 0, "message": message, "logprobs": None,
                                      "finish_reason": finish}],
                         "usage": {"prompt_tokens": 0, "completion_tokens": tokens,
                                   "total_tokens": tokens}})


def _fragments(arguments: str, size: int = 8) -> Iterator[str]:
    """The arguments JSON in pieces of ``size`` characters, as a model streams them."""
    for start in range(0, len(arguments), size):
        yield arguments[start:start + size]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m infra.local.llm_stub``: serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m infra.local.llm_stub",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8901, help="0: any free port")
    parser.add_argument("--ttft-ms", type=float, default=DEFAULT_TTFT_MS, help="time to first token, ms")
    parser.add_argument("--tokens-per-s", type=float, default=DEFAULT_TOKENS_PER_S, help="output speed")
    parser.add_argument("--time-scale", type=float, default=1.0, help="stub seconds per real second")
    parser.add_argument("--fail", default=None, metavar="FAULT",
                        help=f"a standing fault: {', '.join(FAULTS)}, with ;key=value options")
    args = parser.parse_args(argv)
    try:
        fault = LLMFault.parse(args.fail) if args.fail else None
        stub = LLMStub(host=args.host, port=args.port, ttft_ms=args.ttft_ms,
                       tokens_per_s=args.tokens_per_s, time_scale=args.time_scale)
    except ValueError as exc:
        parser.error(str(exc))
    stub.start()
    stub.fail(fault)
    print(f"llm stub: {stub.url} (TTFT {args.ttft_ms:g} ms, {args.tokens_per_s:g} tokens/s, "
          f"time scale {args.time_scale:g}{', fault ' + args.fail if args.fail else ''}); "
          "Ctrl-C stops it", flush=True)
    stub.wait_for_interrupt()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
