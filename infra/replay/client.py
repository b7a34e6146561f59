"""Send a replay's requests to the gateway on time, concurrently (asyncio + httpx).

Each request is a real ``POST /v1/intent`` with ``{"text": ..., "tool_ms": ...}``: ``tool_ms`` asks
the reference agent for a simulated tool call of that many milliseconds (the trace duration,
scaled), so the handler does that much work. Requests go out at their scheduled real offsets,
independent of earlier answers (an open-loop client, as production traffic is).

Progress (``infra.progress``, tqdm): a live bar on a terminal, a plain line every few seconds
otherwise, nothing when quiet.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

import httpx

from infra.progress import Progress

#: Sentences the replay sends (intents of ``functions/intent_model/intents.json``-like queries).
TEXTS: tuple[str, ...] = (
    "where is my order",
    "I want to cancel my subscription",
    "my invoice is wrong, I was charged twice",
    "how do I reset my password",
    "talk to a human please",
    "what are your opening hours",
    "the app crashes when I upload a photo",
    "can I change the delivery address",
)
ROUTE = "/v1/intent"


@dataclass(frozen=True)
class RequestShape:
    """What each replayed request is, for an agent other than the reference one.

    Attributes
    ----------
    method : str
        HTTP method (``POST``).
    path : str
        The agent's route, as the client sends it (the gateway adds nothing).
    body : dict or None
        JSON body sent with every request (None: no body).

    The reference agent's default (``None`` shape) is ``POST /v1/intent`` with one of `TEXTS`
    and the request's ``tool_ms``: only that route reproduces the trace's durations.
    """

    method: str
    path: str
    body: dict[str, object] | None = None

    @classmethod
    def parse(cls, route: str, body: str | None) -> RequestShape:
        """From ``--route "POST /v1/lookup"`` and ``--body '{"order_id": "A-1"}'``.

        Raises
        ------
        ValueError
            A route that is not ``METHOD /path``, a body that is not a JSON object.
        """
        method, _, path = route.strip().partition(" ")
        if not method.isalpha() or not path.startswith("/"):
            raise ValueError(f"--route {route!r} is not 'METHOD /path' (e.g. 'POST /v1/lookup')")
        parsed = None
        if body is not None:
            try:
                parsed = json.loads(body)
            except ValueError as exc:
                raise ValueError(f"--body is not JSON: {exc}") from None
            if not isinstance(parsed, dict):
                raise ValueError("--body must be a JSON object, e.g. '{\"order_id\": \"A-1\"}'")
        return cls(method.upper(), path.strip(), parsed)


@dataclass(frozen=True)
class ClientRecord:
    """One request as the client saw it.

    Attributes
    ----------
    index : int
        Position in the workload.
    planned_s, sent_s : float
        Real seconds from the replay start: scheduled and actual send time.
    latency_ms : float
        Real ms from sending to the full response (NaN when no response came).
    status : int
        HTTP status (0 when the connection failed).
    path : str
        ``X-Warmstart-Path`` header (``""`` when absent).
    server_timing_ms : dict
        ``Server-Timing`` entries, name -> ``dur`` in ms.
    gateway_request_id : str
        ``apigw-requestid`` header (a function URL's: ``x-amzn-RequestId``), the event's
        ``requestContext.requestId``.
    tool_ms : float
        Simulated work asked for.
    degraded_body : bool
        The JSON body said ``"degraded": true``.
    error : str
        Client-side error (timeout, connection refused), ``""`` otherwise.
    first_byte_ms, last_byte_ms : float
        When the answer streamed (``Transfer-Encoding: chunked``, what a function URL in
        ``RESPONSE_STREAM`` mode sends): real ms from sending to its first and its last body
        byte (time to first byte; the last one is about ``latency_ms``); NaN for a buffered
        answer (``Content-Length``) or none.
    """

    index: int
    planned_s: float
    sent_s: float
    latency_ms: float
    status: int
    path: str
    server_timing_ms: dict[str, float]
    gateway_request_id: str
    tool_ms: float
    degraded_body: bool = False
    error: str = ""
    error_code: str = ""
    first_byte_ms: float = math.nan
    last_byte_ms: float = math.nan

    @property
    def streamed(self) -> bool:
        """The answer streamed (see ``first_byte_ms``)."""
        return not math.isnan(self.first_byte_ms)


def parse_server_timing(value: str | None) -> dict[str, float]:
    """``"init;dur=12.5, infer;dur=3"`` -> ``{"init": 12.5, "infer": 3.0}`` (W3C Server Timing).

    Entries without ``dur`` get 0; malformed durations are skipped.

    References
    ----------
    https://www.w3.org/TR/server-timing/
    """
    out: dict[str, float] = {}
    if not value:
        return out
    for entry in value.split(","):
        parts = [p.strip() for p in entry.split(";") if p.strip()]
        if not parts:
            continue
        dur = 0.0
        for param in parts[1:]:
            key, _, raw = param.partition("=")
            if key.strip().lower() == "dur":
                try:
                    dur = float(raw.strip().strip('"'))
                except ValueError:
                    dur = float("nan")
        if not math.isnan(dur):
            out[parts[0]] = dur
    return out


async def _send_all(base_url: str, offsets_s: Sequence[float], tool_ms: Sequence[float],
                    timeout_s: float, progress: Progress,
                    on_start: Callable[[], None] | None,
                    shape: RequestShape | None = None) -> list[ClientRecord]:
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
    records: list[ClientRecord | None] = [None] * len(offsets_s)
    sent_n, done = [0], [0]
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as client:
        loop = asyncio.get_running_loop()
        if on_start is not None:
            on_start()
        t0 = loop.time()

        async def one(i: int) -> None:
            sent = loop.time() - t0
            started = time.perf_counter()
            try:
                if shape is None:
                    body = {"text": TEXTS[i % len(TEXTS)], "tool_ms": round(float(tool_ms[i]), 3)}
                    request = client.build_request("POST", ROUTE, json=body)
                else:
                    request = client.build_request(shape.method, shape.path, json=shape.body)
                resp = await client.send(request, stream=True)
                streamed = "chunked" in resp.headers.get("transfer-encoding", "").lower()
                first_ms = last_ms = math.nan
                content = bytearray()
                try:
                    async for piece in resp.aiter_bytes():
                        if piece:
                            last_ms = (time.perf_counter() - started) * 1000.0
                            first_ms = last_ms if math.isnan(first_ms) else first_ms
                            content += piece
                finally:
                    await resp.aclose()
                latency_ms = (time.perf_counter() - started) * 1000.0
                if not streamed:
                    first_ms = last_ms = math.nan
                degraded = False
                code = ""
                try:
                    data = json.loads(content)
                    if isinstance(data, dict):
                        degraded = data.get("degraded") is True
                        code = str(data.get("error") or "")
                except ValueError:
                    pass
                records[i] = ClientRecord(
                    i, float(offsets_s[i]), sent, latency_ms, resp.status_code,
                    resp.headers.get("x-warmstart-path", ""),
                    parse_server_timing(resp.headers.get("server-timing")),
                    resp.headers.get("apigw-requestid") or resp.headers.get("x-amzn-requestid", ""),
                    float(tool_ms[i]), degraded,
                    error_code=code, first_byte_ms=first_ms, last_byte_ms=last_ms)
            except httpx.HTTPError as exc:
                records[i] = ClientRecord(i, float(offsets_s[i]), sent, float("nan"), 0, "", {},
                                          "", float(tool_ms[i]),
                                          error=f"{type(exc).__name__}: {exc}")
            done[0] += 1
            progress.update(1, sent=sent_n[0], in_flight=sent_n[0] - done[0])

        tasks = []
        for i, offset in enumerate(offsets_s):
            delay = t0 + float(offset) - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
            sent_n[0] += 1
            progress.set_postfix(sent=sent_n[0], in_flight=sent_n[0] - done[0])
        await asyncio.gather(*tasks)
    progress.close()
    return [r for r in records if r is not None]


def send_requests(base_url: str, offsets_s: Sequence[float], tool_ms: Sequence[float], *,
                  timeout_s: float = 60.0, label: str = "", progress_stream: IO[str] | None = None,
                  quiet: bool = False,
                  on_start: Callable[[], None] | None = None,
                  shape: RequestShape | None = None) -> list[ClientRecord]:
    """Send request ``i`` at real offset ``offsets_s[i]`` (seconds) and wait for every answer.

    Parameters
    ----------
    base_url : str
        The gateway (``http://127.0.0.1:PORT``).
    offsets_s : sequence of float
        ``(n,)`` sorted real seconds from the start.
    tool_ms : sequence of float
        ``(n,)`` simulated work per request, ms.
    timeout_s : float
        Per-request client timeout, real seconds.
    label : str
        Shown in the progress line.
    progress_stream : file, optional
        Where the progress goes (default: stderr): a tqdm bar on a terminal, a plain line
        every 10 s otherwise (``infra.progress.Progress``).
    quiet : bool
        No progress at all.
    on_start : callable, optional
        Called once right before the first request is scheduled (the replay's time zero).
    shape : RequestShape, optional
        Another agent's request (default: the reference agent's ``POST /v1/intent`` with
        ``tool_ms``).

    Returns
    -------
    list of ClientRecord
        One per request, in workload order.
    """
    if len(offsets_s) != len(tool_ms):
        raise ValueError("offsets_s and tool_ms need one entry per request")
    progress = Progress(len(offsets_s), f"replay {label}".strip(), unit="req",
                        stream=progress_stream, quiet=quiet)
    return asyncio.run(_send_all(base_url, offsets_s, tool_ms, timeout_s, progress, on_start, shape))
