"""The order-status tool: its settings, its HTTP client, and this execution environment's
answer cache and latency window.

The tool is a downstream HTTP service, ``GET {LOOKUP_TOOL_URL}/orders/{order_id}`` -> a JSON
object with at least ``status`` (a string). `OrderClient` calls it with `http.client` under one
deadline for the whole call (connect, request, headers, body); `LookupState` keeps what one
execution environment learns: the last answers (`AnswerCache`, bounded, with a freshness TTL
and a longer stale limit for degraded answers) and the tool's recent latencies
(`LatencyWindow`, whose p95 the ``downstream_ms`` hook hands to admission).

Why module state: the route hooks (``degraded``, ``downstream_ms``) receive only the request's
payload, not the `AgentRuntime`, so the cache the app fills must be reachable from a module
(`state`). One process is one execution environment in Lambda, so this is per environment;
tests reset it with `reset_state`.

Imports only the standard library. `http.client` (~30 ms: it imports the ``email`` package) is
imported when an `OrderClient` is made (by the app factory, in the web stage), not at module
import: the hooks import this module in the toolkit stage, which a cold request waits for.
``ssl`` only for an ``https`` URL.
"""

from __future__ import annotations

import json
import threading
import time
from bisect import bisect_left, insort
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    import http.client

__all__ = [
    "AnswerCache",
    "CachedAnswer",
    "LatencyWindow",
    "LookupSettings",
    "LookupState",
    "OrderClient",
    "OrderNotFound",
    "ToolError",
    "ToolTimeout",
    "ToolUnavailable",
    "apply_settings",
    "reset_state",
    "state",
]

#: The agent's settings (environment variables, read through ``runtime.settings``).
TOOL_URL_SETTING = "LOOKUP_TOOL_URL"
TIMEOUT_SETTING = "LOOKUP_TOOL_TIMEOUT_MS"
CACHE_TTL_SETTING = "LOOKUP_CACHE_TTL_S"
MAX_STALE_SETTING = "LOOKUP_CACHE_MAX_STALE_S"
CACHE_SIZE_SETTING = "LOOKUP_CACHE_SIZE"

#: Whole-call timeout of one tool call, ms: half the default P0 SLA (2,000 ms), so a call that
#: times out still leaves time for the init's tail and a cached or error answer within the SLA.
DEFAULT_TIMEOUT_MS = 1000.0
#: How long a cached answer is served as fresh (no tool call), s: an order's status changes on a
#: scale of hours; 30 s bounds how old a "fresh" answer can be (a project choice).
DEFAULT_CACHE_TTL_S = 30.0
#: How old a cached answer may be and still be served, marked stale, as the degraded answer, s.
DEFAULT_MAX_STALE_S = 900.0
#: Answers kept per execution environment (an order answer is ~200 bytes: ~0.2 MB at most).
DEFAULT_CACHE_SIZE = 1024
#: Largest tool answer read, bytes (an order status is a few hundred bytes).
MAX_ANSWER_BYTES = 64 * 1024
#: The tool's p95 latency until this environment measured one, ms (a same-region HTTP service
#: answering from its own store; a project choice, replaced by the first measurements).
TOOL_P95_SEED_MS = 100.0
#: Latencies older than this are forgotten, s: after an outage that pushed the p95 above the SLA
#: (so admission degraded instead of calling the tool), the seed lets the tool be tried again.
LATENCY_WINDOW_S = 60.0
#: Most latencies kept (p95 by nearest rank over at most this many).
LATENCY_SAMPLES = 64
#: ``retry_after_s`` of tool-failure errors and partial answers, s: the toolkit re-reads the
#: degradation level at this period (5 s SSM cache), so a retry sooner sees the same level.
RETRY_AFTER_S = 5

SecondsClock = Callable[[], float]


def _number(settings: Mapping[str, str], name: str, default: float, *, minimum: float,
            integer: bool = False) -> float:
    raw = settings.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = float("nan")
    if not value >= minimum or value == float("inf"):  # NaN fails the comparison
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name}={raw!r} is not {kind} >= {minimum:g}: unset it for the default "
                         f"{default:g} or give {kind}")
    return value


class LookupSettings(NamedTuple):
    """The lookup agent's settings, read once from ``runtime.settings``.

    Attributes
    ----------
    tool_url : str | None
        ``LOOKUP_TOOL_URL``: the order service's base URL (None when unset or unusable).
    url_problem : str | None
        Why ``tool_url`` is None, naming the variable (None when the URL is usable).
    timeout_ms : float
        ``LOOKUP_TOOL_TIMEOUT_MS``: whole-call timeout of one tool call, ms.
    cache_ttl_s : float
        ``LOOKUP_CACHE_TTL_S``: a cached answer this young is served without a tool call, s.
    max_stale_s : float
        ``LOOKUP_CACHE_MAX_STALE_S``: a cached answer this old may still be the degraded one, s.
    cache_size : int
        ``LOOKUP_CACHE_SIZE``: answers kept per execution environment.
    """

    tool_url: str | None = None
    url_problem: str | None = (f"{TOOL_URL_SETTING} is not set: set it to the order service's "
                               "base URL (e.g. http://127.0.0.1:8900)")
    timeout_ms: float = DEFAULT_TIMEOUT_MS
    cache_ttl_s: float = DEFAULT_CACHE_TTL_S
    max_stale_s: float = DEFAULT_MAX_STALE_S
    cache_size: int = DEFAULT_CACHE_SIZE

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> LookupSettings:
        """Parse the settings.

        An unset or unusable ``LOOKUP_TOOL_URL`` is not an error here: the app answers 503
        naming it (its other routes keep working).

        Raises
        ------
        ValueError
            A numeric setting is not a number in range (the message names the variable).
        """
        raw = settings.get(TOOL_URL_SETTING, "").strip()
        url: str | None = None
        problem = cls._field_defaults["url_problem"]
        if raw:
            parts = urlsplit(raw)
            try:
                parts.port  # noqa: B018 - raises ValueError on a bad port
                bad_port = False
            except ValueError:
                bad_port = True
            if parts.scheme not in ("http", "https") or not parts.hostname or bad_port:
                problem = (f"{TOOL_URL_SETTING} is not an http(s) URL with a host: set it to the "
                           "order service's base URL (e.g. http://127.0.0.1:8900)")
            else:
                url, problem = raw.rstrip("/"), None
        ttl_s = _number(settings, CACHE_TTL_SETTING, DEFAULT_CACHE_TTL_S, minimum=0.0)
        max_stale_s = _number(settings, MAX_STALE_SETTING, max(DEFAULT_MAX_STALE_S, ttl_s),
                              minimum=0.0)
        if max_stale_s < ttl_s:
            raise ValueError(f"{MAX_STALE_SETTING}={max_stale_s:g} is below {CACHE_TTL_SETTING}="
                             f"{ttl_s:g}: a stale answer must be allowed to be at least as old as "
                             "a fresh one")
        return cls(
            tool_url=url,
            url_problem=problem,
            timeout_ms=_number(settings, TIMEOUT_SETTING, DEFAULT_TIMEOUT_MS, minimum=1.0),
            cache_ttl_s=ttl_s,
            max_stale_s=max_stale_s,
            cache_size=int(_number(settings, CACHE_SIZE_SETTING, DEFAULT_CACHE_SIZE, minimum=1,
                                   integer=True)),
        )


# -- errors ---------------------------------------------------------------------------------
class ToolError(Exception):
    """A tool call failed; ``status``, ``code`` and ``tag`` say how the app answers it.

    Attributes
    ----------
    message : str
    status : int
        HTTP status of the error answer (when no cached answer can stand in).
    code : str
        The error body's ``error``.
    tag : str
        The failure tag (`AgentRuntime.fail`).
    elapsed_ms : float
        Time the call waited before failing, ms (``Server-Timing: tool``).
    """

    status = 502
    code = "tool_unavailable"
    tag = "tool_unavailable"

    def __init__(self, message: str, elapsed_ms: float = 0.0) -> None:
        super().__init__(message)
        self.message = message
        self.elapsed_ms = elapsed_ms


class ToolUnavailable(ToolError):
    """The tool refused the connection, failed (5xx), or gave an unusable answer (502)."""


class ToolTimeout(ToolError):
    """The tool did not answer within the timeout (504, tag ``timeout_network``)."""

    status = 504
    code = "tool_timeout"
    tag = "timeout_network"


class OrderNotFound(ToolError):
    """The tool does not know the order (404; a client error, tag ``bad_request``)."""

    status = 404
    code = "order_not_found"
    tag = "bad_request"


# -- the client -----------------------------------------------------------------------------
class OrderClient:
    """HTTP client of the order service (standard library, one connection per call).

    Parameters
    ----------
    base_url : str
        ``http(s)://host[:port][/base]``; orders are at ``{base_url}/orders/{order_id}``.
    timeout_ms : float
        Whole-call deadline, ms: connect, send, headers and body each wait at most what is left
        of it (name resolution is not bounded by it).
    clock_s : Callable[[], float]
        Monotonic clock, s.
    """

    def __init__(self, base_url: str, *, timeout_ms: float, clock_s: SecondsClock = time.monotonic) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.host = parts.hostname
        self.port = parts.port
        self.https = parts.scheme == "https"
        self.base_path = parts.path.rstrip("/")
        self.timeout_ms = float(timeout_ms)
        self._clock_s = clock_s
        import http.client  # noqa: F401 - paid here (the web stage), not by the first call

    def order(self, order_id: str) -> dict[str, Any]:
        """``GET /orders/{order_id}``: the tool's JSON object.

        Raises
        ------
        OrderNotFound
            The tool answered 404.
        ToolTimeout
            No complete answer within ``timeout_ms``.
        ToolUnavailable
            Connection refused or reset, a non-200 status, or an answer that is not a JSON
            object with a string ``status``.
        """
        import http.client

        started = self._clock_s()
        deadline = started + self.timeout_ms / 1000.0

        def left_s() -> float:
            left = deadline - self._clock_s()
            if left <= 0:
                raise TimeoutError("deadline")
            return left

        def elapsed_ms() -> float:
            return (self._clock_s() - started) * 1000.0

        where = "the order service"  # not its URL: the message goes to the client
        path = f"{self.base_path}/orders/{quote(order_id, safe='')}"
        conn = self._connection(left_s())
        try:
            conn.connect()
            sock = conn.sock
            sock.settimeout(left_s())
            conn.request("GET", path, headers={"Accept": "application/json", "Connection": "close"})
            sock.settimeout(left_s())
            response = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_ANSWER_BYTES:
                sock.settimeout(left_s())
                chunk = response.read1(16 * 1024)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            status = response.status
            response.close()
        except TimeoutError:
            raise ToolTimeout(f"{where} did not answer within {self.timeout_ms:g} ms "
                              f"({TIMEOUT_SETTING})", elapsed_ms()) from None
        except ConnectionRefusedError:
            raise ToolUnavailable(f"{where} refused the connection", elapsed_ms()) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ToolUnavailable(f"{where} failed: {type(exc).__name__}: {exc}",
                                  elapsed_ms()) from None
        finally:
            conn.close()
        took_ms = elapsed_ms()
        if status == 404:
            raise OrderNotFound(f"no order {order_id!r}: the order service does not know it", took_ms)
        if status != 200:
            raise ToolUnavailable(f"{where} answered HTTP {status}", took_ms)
        if size > MAX_ANSWER_BYTES:
            raise ToolUnavailable(f"{where} answered more than {MAX_ANSWER_BYTES} bytes", took_ms)
        try:
            answer = json.loads(b"".join(chunks))
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("status"), str):
            raise ToolUnavailable(f"{where} answered something that is not an order (a JSON "
                                  "object with a string 'status')", took_ms)
        return answer

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        import http.client

        if self.https:
            import ssl

            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)


# -- what one execution environment learns ---------------------------------------------------
class LatencyWindow:
    """p95 of the tool's recent call latencies (failures included: their wait was real).

    Parameters
    ----------
    seed_ms : float
        The p95 while no latency younger than ``window_s`` is known, ms.
    window_s : float
        Latencies older than this are dropped, s.
    max_samples : int
        Most latencies kept.
    clock_s : Callable[[], float]
        Monotonic clock, s.
    """

    def __init__(self, seed_ms: float = TOOL_P95_SEED_MS, *, window_s: float = LATENCY_WINDOW_S,
                 max_samples: int = LATENCY_SAMPLES, clock_s: SecondsClock = time.monotonic) -> None:
        self.seed_ms = float(seed_ms)
        self.window_s = float(window_s)
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)
        #: the latencies of ``_samples``, kept sorted as they come and go: the ``downstream_ms``
        #: hook reads the p95 on every request, without sorting the window each time
        self._sorted: list[float] = []
        self._clock_s = clock_s
        self._lock = threading.Lock()

    def observe(self, latency_ms: float) -> None:
        """Record one call's latency, ms."""
        sample = (self._clock_s(), max(0.0, float(latency_ms)))
        with self._lock:
            samples = self._samples
            if samples and len(samples) == samples.maxlen:  # the append drops the oldest
                self._forget(samples[0][1])
            samples.append(sample)
            if samples:
                insort(self._sorted, sample[1])

    def _forget(self, latency_ms: float) -> None:
        """Take one ``latency_ms`` out of the sorted latencies (the lock held)."""
        values = self._sorted
        del values[bisect_left(values, latency_ms)]

    def p95_ms(self) -> float:
        """Nearest-rank p95 of the latencies of the last ``window_s``, ms (the seed if none)."""
        oldest = self._clock_s() - self.window_s
        with self._lock:
            samples = self._samples
            while samples and samples[0][0] < oldest:
                self._forget(samples.popleft()[1])
            values = self._sorted
            if not values:
                return self.seed_ms
            return values[max(0, -(-95 * len(values) // 100) - 1)]

    def __len__(self) -> int:
        return len(self._samples)


class CachedAnswer(NamedTuple):
    """A cached tool answer and its age (s)."""

    order: dict[str, Any]
    age_s: float


class AnswerCache:
    """The last tool answer per order, least recently used dropped first.

    Parameters
    ----------
    max_entries : int
        Answers kept.
    clock_s : Callable[[], float]
        Monotonic clock, s.
    """

    def __init__(self, *, max_entries: int = DEFAULT_CACHE_SIZE, clock_s: SecondsClock = time.monotonic) -> None:
        self.max_entries = int(max_entries)
        self._entries: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._clock_s = clock_s
        self._lock = threading.Lock()

    def put(self, order_id: str, order: Mapping[str, Any]) -> None:
        """Keep ``order`` as the answer for ``order_id`` (now)."""
        with self._lock:
            self._entries[order_id] = (self._clock_s(), dict(order))
            self._entries.move_to_end(order_id)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def get(self, order_id: str, max_age_s: float) -> CachedAnswer | None:
        """The answer for ``order_id`` when it is at most ``max_age_s`` old, else None."""
        with self._lock:
            entry = self._entries.get(order_id)
            if entry is None:
                return None
            age_s = max(0.0, self._clock_s() - entry[0])
            if age_s > max_age_s:
                return None
            self._entries.move_to_end(order_id)
            return CachedAnswer(dict(entry[1]), age_s)

    def resize(self, max_entries: int) -> None:
        """Keep at most ``max_entries`` answers from now on (drops the oldest at once)."""
        with self._lock:
            self.max_entries = int(max_entries)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class LookupState:
    """What this execution environment knows about the tool: cached answers and latencies.

    Parameters
    ----------
    settings : LookupSettings | None
        TTLs and cache size (default: the defaults).
    clock_s : Callable[[], float]
        Monotonic clock, s.
    """

    def __init__(self, settings: LookupSettings | None = None, *, clock_s: SecondsClock = time.monotonic) -> None:
        self.settings = settings or LookupSettings()
        self.cache = AnswerCache(max_entries=self.settings.cache_size, clock_s=clock_s)
        self.latency = LatencyWindow(clock_s=clock_s)
        self._clock_s = clock_s

    def configure(self, settings: LookupSettings) -> None:
        """Apply ``settings`` (the cached answers and latencies are kept)."""
        self.settings = settings
        self.cache.resize(settings.cache_size)

    def fresh(self, order_id: str) -> CachedAnswer | None:
        """A cached answer young enough to serve without calling the tool."""
        return self.cache.get(order_id, self.settings.cache_ttl_s)

    def usable(self, order_id: str) -> CachedAnswer | None:
        """A cached answer young enough to stand in, marked stale, for the tool's."""
        return self.cache.get(order_id, self.settings.max_stale_s)

    def is_stale(self, cached: CachedAnswer) -> bool:
        """True when ``cached`` is older than the freshness TTL."""
        return cached.age_s > self.settings.cache_ttl_s

    def downstream_ms(self, order_id: str | None) -> float:
        """The wait a full answer will spend on the tool, ms: 0 when a fresh cached answer
        serves it, else the tool's measured p95."""
        if order_id is not None and self.fresh(order_id) is not None:
            return 0.0
        return self.latency.p95_ms()

    def fetch(self, tool: OrderClient, order_id: str) -> tuple[dict[str, Any], float]:
        """Call the tool, record its latency, cache the answer; ``(order, elapsed_ms)``.

        Raises
        ------
        ToolError
            As `OrderClient.order` (the latency is recorded first; ``elapsed_ms`` is set).
        """
        started = self._clock_s()
        try:
            order = tool.order(order_id)
        except ToolError as exc:
            exc.elapsed_ms = (self._clock_s() - started) * 1000.0
            self.latency.observe(exc.elapsed_ms)
            raise
        elapsed_ms = (self._clock_s() - started) * 1000.0
        self.latency.observe(elapsed_ms)
        self.cache.put(order_id, order)
        return order, elapsed_ms


class _Environment:
    """This execution environment's state (an attribute, not a ``global`` statement)."""

    state = LookupState()


def state() -> LookupState:
    """This execution environment's `LookupState`."""
    return _Environment.state


def apply_settings(settings: LookupSettings) -> LookupState:
    """Apply the app's settings to this environment's state (called by the app factory)."""
    current = _Environment.state
    current.configure(settings)
    return current


def reset_state(*, clock_s: SecondsClock = time.monotonic) -> LookupState:
    """A new, empty state for this environment (tests; a fresh process starts with one)."""
    _Environment.state = LookupState(clock_s=clock_s)
    return _Environment.state
