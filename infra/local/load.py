"""Bounded concurrent load through the local gateway, faults injected under it, every request
accounted for (``tests/e2e/test_load_faults.py``, ``bench/bench_load.py``).

``clients`` closed-loop clients (asyncio tasks sharing one ``httpx.AsyncClient``, as the replay's
client does) each send a request, wait for its answer, record it, and send the next until the
run's duration or request budget is spent; after a ``429`` or a ``5xx`` a client waits
``backoff_s`` first, as API Gateway asks throttled clients to ("resubmit the failed requests in
a way that is rate limiting"). A request that started is never dropped from the record: it ends
with an HTTP status or, when no response came (connection refused or reset, client timeout), as
*lost*. The client timeout is longer than the gateway's 30 s integration timeout, so a request
can only be lost when the gateway itself fails to answer.

Faults (:class:`ScheduledFault`) run one after the other on their own thread, each ``delay_s``
after the previous one ended (the first after the load started); each records when it ran and what it
did. The load goes on until ``duration_s`` and until ``tail_s`` after the last fault ended, so
every fault, and the recovery from it, happens under load. :func:`stack_faults` builds the standard set against a
:class:`~infra.local.stack.LocalStack`: an execution environment killed (SIGKILL) while it runs an
invocation, the GPU endpoint killed and restarted, the moto server killed and restarted (the
last two on the same port, so the functions' endpoints still hold).

Statuses are counted as: ``answered`` (any status but those below: the agent's answers, 4xx
included), ``throttled`` (429), ``shed`` (503: the agent's graceful shed or the gateway's
integration timeout), ``errors`` (other 5xx: e.g. the 500 of an invocation whose environment was
killed) and ``lost`` (no response).

References
----------
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from infra.local.stack import LocalStack

#: Sentences the clients send (paraphrases of support requests, as the Locust file's).
TEXTS: tuple[str, ...] = (
    "where is my package, it was supposed to arrive yesterday",
    "please cancel the order I placed this morning",
    "I want my money back for the broken headphones",
    "why was I charged twice on my credit card",
    "the app keeps crashing when I open settings",
    "how do I reset my password",
)
#: Longer than the gateway's 30 s integration timeout: the gateway always answers first.
CLIENT_TIMEOUT_S = 40.0


@dataclass(frozen=True)
class ClientOutcome:
    """One request as its client saw it.

    Attributes
    ----------
    client : int
        Which client sent it (0-based).
    sent_s, done_s : float
        Real seconds from the start of the load.
    status : int
        HTTP status; 0 when no response came (lost).
    path : str
        ``X-Warmstart-Path`` (``local``, ``overflow``, ``degraded``, ``shed``), ``""`` if absent.
    gateway_error : str
        ``x-warmstart-gateway-error``: why the local gateway itself answered (throttled, ...).
    error : str
        Client-side error of a lost request.
    """

    client: int
    sent_s: float
    done_s: float
    status: int
    path: str = ""
    gateway_error: str = ""
    error: str = ""

    @property
    def latency_ms(self) -> float:
        return (self.done_s - self.sent_s) * 1000.0

    @property
    def kind(self) -> str:
        """``answered``, ``throttled``, ``shed``, ``errors`` or ``lost`` (module docstring)."""
        if self.status == 0:
            return "lost"
        if self.status == 429:
            return "throttled"
        if self.status == 503:
            return "shed"
        return "errors" if self.status >= 500 else "answered"


@dataclass(frozen=True)
class ScheduledFault:
    """A fault to inject ``delay_s`` real seconds after the previous one ended (the first:
    after the load started).

    ``action`` returns a line saying what it did (``killed environment 3f2a (pid 123) mid-
    invocation``); an exception it raises is recorded as the fault's failure, never raised.
    """

    delay_s: float
    name: str
    action: Callable[[], str]


@dataclass(frozen=True)
class FaultRecord:
    """A fault as it ran: real seconds from the start of the load, what it did, whether it
    succeeded."""

    name: str
    started_s: float
    ended_s: float
    detail: str
    ok: bool


@dataclass
class LoadResult:
    """Every request of one run and the faults injected into it."""

    clients: int
    duration_s: float
    outcomes: list[ClientOutcome]
    faults: list[FaultRecord] = field(default_factory=list)
    sent: int = 0
    wall_s: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        """``answered``, ``throttled``, ``shed``, ``errors``, ``lost`` and ``sent``; the first
        five add up to ``sent``."""
        kinds = Counter(o.kind for o in self.outcomes)
        out = {k: kinds.get(k, 0) for k in ("answered", "throttled", "shed", "errors", "lost")}
        out["sent"] = self.sent
        return out

    @property
    def by_status(self) -> dict[int, int]:
        return dict(sorted(Counter(o.status for o in self.outcomes).items()))

    @property
    def unaccounted(self) -> int:
        """Requests sent without a record: 0 unless the client itself is broken."""
        return self.sent - len(self.outcomes)

    def throughput_per_s(self, kind: str | None = "answered") -> float:
        """Responses of ``kind`` (None: every response) per second of the run's wall time."""
        n = sum(1 for o in self.outcomes if o.status and (kind is None or o.kind == kind))
        return n / self.wall_s if self.wall_s > 0 else math.nan

    def latency_ms(self, q: float, kind: str | None = "answered") -> float:
        """The ``q`` quantile (0..1) of the latency of responses of ``kind``, ms (NaN if none)."""
        values = sorted(o.latency_ms for o in self.outcomes if o.status and (kind is None or o.kind == kind))
        if not values:
            return math.nan
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _body(i: int, tool_ms: float) -> dict[str, Any]:
    return {"text": TEXTS[i % len(TEXTS)], "tool_ms": tool_ms}


async def _drive(url: str, clients: int, keep_going: Callable[[float], bool],
                 max_requests: int | None, backoff_s: float, method: str, path: str,
                 tool_ms: float, started: threading.Event, start: list[float],
                 result: LoadResult) -> None:
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S, limits=limits) as client:
        t0 = start[0] = time.monotonic()
        started.set()  # the fault thread's clock starts with the load's

        async def one(index: int) -> None:
            while keep_going(time.monotonic() - t0):
                if max_requests is not None and result.sent >= max_requests:
                    return
                number = result.sent
                result.sent += 1
                sent = time.monotonic() - t0
                try:
                    resp = await (client.post(path, json=_body(number, tool_ms)) if method == "POST"
                                  else client.request(method, path))
                except httpx.HTTPError as exc:
                    result.outcomes.append(ClientOutcome(index, sent, time.monotonic() - t0, 0,
                                                   error=f"{type(exc).__name__}: {exc}"[:200]))
                    await asyncio.sleep(backoff_s)
                    continue
                outcome = ClientOutcome(index, sent, time.monotonic() - t0, resp.status_code,
                                  resp.headers.get("x-warmstart-path", ""),
                                  resp.headers.get("x-warmstart-gateway-error", ""))
                result.outcomes.append(outcome)
                if outcome.kind != "answered":
                    await asyncio.sleep(backoff_s)

        await asyncio.gather(*(one(i) for i in range(clients)))
        result.wall_s = time.monotonic() - t0


def _run_faults(faults: Sequence[ScheduledFault], started: threading.Event, start: list[float],
                records: list[FaultRecord], stop: threading.Event, done_at: list[float]) -> None:
    started.wait()
    try:
        for fault in faults:
            if stop.wait(fault.delay_s):
                return
            begin = time.monotonic() - start[0]
            try:
                detail, ok = fault.action(), True
            except Exception as exc:  # noqa: BLE001 - a failed fault is recorded, the load goes on
                detail, ok = f"{type(exc).__name__}: {exc}", False
            records.append(FaultRecord(fault.name, begin, time.monotonic() - start[0], detail, ok))
    finally:
        done_at[0] = time.monotonic() - start[0]


def run_load(url: str, *, clients: int, duration_s: float, max_requests: int | None = None,
             faults: Sequence[ScheduledFault] = (), tail_s: float = 1.5, backoff_s: float = 0.1,
             method: str = "POST", path: str = "/v1/intent", tool_ms: float = 20.0) -> LoadResult:
    """Drive ``clients`` closed-loop clients against ``url``; inject ``faults`` under the load.

    Parameters
    ----------
    url : str
        The gateway (``http://127.0.0.1:PORT``).
    clients : int
        Concurrent clients, >= 1.
    duration_s : float
        No request starts after this many real seconds, nor before the faults are done plus
        ``tail_s``; those in flight finish.
    max_requests : int, optional
        At most this many requests in all (the faults still run to their end).
    faults : sequence of ScheduledFault
        Injected one after the other (see the module docstring).
    tail_s : float
        Load after the last fault ended, seconds (the recovery is measured too).
    backoff_s : float
        A client's wait after a 429, a 5xx or a lost request, seconds.
    method, path, tool_ms : str, str, float
        ``POST path`` with ``{"text", "tool_ms"}`` (the reference agent's route, where
        ``tool_ms`` is a simulated tool call that keeps each invocation that long), or another
        method without a body (``GET /healthz``).

    Returns
    -------
    LoadResult

    Raises
    ------
    ValueError
        ``clients`` < 1, ``duration_s`` <= 0, ``max_requests`` < 1, a negative tail or backoff,
        a path that does not start with ``/``.
    """
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    if max_requests is not None and max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests}")
    if tail_s < 0 or backoff_s < 0:
        raise ValueError(f"tail_s and backoff_s must be >= 0, got {tail_s}, {backoff_s}")
    if not path.startswith("/"):
        raise ValueError(f"path must start with '/', got {path!r}")
    result = LoadResult(clients, duration_s, [])
    started, stop = threading.Event(), threading.Event()
    start, done_at = [0.0], [math.nan if faults else -math.inf]
    injector = threading.Thread(target=_run_faults,
                                args=(faults, started, start, result.faults, stop, done_at),
                                name="load-faults", daemon=True)
    injector.start()

    def keep_going(elapsed_s: float) -> bool:
        # NaN while the faults run: comparisons are False, so the load goes on
        return elapsed_s < duration_s or not elapsed_s >= done_at[0] + tail_s

    try:
        asyncio.run(_drive(url, clients, keep_going, max_requests, backoff_s, method.upper(), path,
                           tool_ms, started, start, result))
    except BaseException:
        stop.set()  # the remaining faults are not injected
        raise
    finally:
        started.set()
        injector.join(timeout=300.0)
    return result


# ---- faults against the local stack --------------------------------------------------------


def kill_busy_environment(stack: LocalStack, function_name: str, *, wait_s: float = 5.0) -> str:
    """SIGKILL the process of one of the function's environments while it runs an invocation.

    Polls the emulator's environments (``Emulator.environments``) for one that is ``busy``.

    Raises
    ------
    RuntimeError
        No environment was busy within ``wait_s`` seconds.
    """
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for env in stack.emulator.environments(function_name):
            if env["state"] == "busy" and env["pid"]:
                os.kill(int(env["pid"]), signal.SIGKILL)
                return (f"killed environment {str(env['id'])[:8]} (pid {env['pid']}, "
                        f"{env['init_type']}) mid-invocation")
        time.sleep(0.002)
    raise RuntimeError(f"no environment of {function_name} was busy within {wait_s:g} s")


def _service_action(stack: LocalStack, name: str, restart: bool) -> Callable[[], str]:
    def act() -> str:
        begin = time.monotonic()
        if restart:
            stack.restart_service(name)
            return f"{name} restarted on the same endpoint in {time.monotonic() - begin:.2f} s"
        stack.kill_service(name)
        return f"{name} killed (SIGKILL)"

    return act


#: The standard fault plan: (delay after the previous fault ended, fault). An environment is
#: replaced while the GPU endpoint is down (its cold start would overflow to it).
STANDARD_PLAN: tuple[tuple[float, str], ...] = (
    (1.0, "kill-environment"),
    (1.0, "kill-gpu-endpoint"),
    (0.3, "kill-environment"),
    (1.0, "restart-gpu-endpoint"),
    (1.0, "kill-moto"),
    (1.0, "restart-moto"),
)


def stack_faults(stack: LocalStack, function_name: str,
                 plan: Sequence[tuple[float, str]] = STANDARD_PLAN) -> list[ScheduledFault]:
    """The faults of ``plan`` (delay in seconds, name) against ``stack``.

    Names: ``kill-environment`` (:func:`kill_busy_environment`), ``kill-gpu-endpoint``,
    ``restart-gpu-endpoint``, ``kill-moto``, ``restart-moto``
    (:meth:`~infra.local.stack.LocalStack.kill_service`, ``restart_service``).

    Raises
    ------
    ValueError
        An unknown fault name or a negative delay.
    """
    actions: Mapping[str, Callable[[], str]] = {
        "kill-environment": lambda: kill_busy_environment(stack, function_name),
        "kill-gpu-endpoint": _service_action(stack, "gpu-endpoint", restart=False),
        "restart-gpu-endpoint": _service_action(stack, "gpu-endpoint", restart=True),
        "kill-moto": _service_action(stack, "moto", restart=False),
        "restart-moto": _service_action(stack, "moto", restart=True),
    }
    faults = []
    for delay_s, name in plan:
        if name not in actions:
            raise ValueError(f"unknown fault {name!r}; known: {', '.join(actions)}")
        if delay_s < 0:
            raise ValueError(f"fault {name}: delay must be >= 0 s, got {delay_s}")
        faults.append(ScheduledFault(delay_s, name, actions[name]))
    return faults
