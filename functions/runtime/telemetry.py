"""Telemetry: Powertools JSON logs, EMF metrics, and the ``Server-Timing`` header.

Powertools is imported lazily (in :meth:`Telemetry.load`, which the handler runs as the first
preload stage): ``Logger`` and ``Metrics`` cost ~35 ms each to import; ``Tracer`` (X-Ray SDK,
~470 ms) is not used.

Per-invocation cost is kept small so the toolkit adds at most ~5% to a warm request (where each
microsecond goes: ``bench/results/warm_path.md``):

* one JSON log line per notable invocation (cold start, failure, a path other than ``local``,
  warm ping) at INFO; a plain warm ``local`` request logs at DEBUG
  (``POWERTOOLS_LOG_LEVEL=DEBUG`` shows every request). Keys: ``cold_start``, ``init_type``,
  ``environment_id``, ``path``, ``route``, ``status``, ``duration_ms`` and ``failure`` (the
  failure tag) when the request failed;
* request counts are buffered per request path and flushed as CloudWatch EMF metric
  ``Requests`` (dimension ``path``) once :data:`FLUSH_VALUES` requests are buffered or the oldest
  is :data:`FLUSH_AGE_MS` old, and at once for cold starts, failures and non-local paths. Counts
  buffered when an environment is reclaimed are lost (at most one flush window). ``ColdStart``
  and ``InitDuration`` (dimension ``init_type``) are emitted at once, as is
  ``BackgroundFailures`` (dimension ``failure``: a background task that failed after its
  response, logged at ERROR with its traceback). A streamed answer is logged once it ended,
  one line each, with its ``TimeToFirstTokenMs``, ``TokensPerSecond``, ``StreamBytes`` and
  ``StreamChunks`` (`Telemetry.stream_done`). Latency is not repeated here: Lambda's own
  ``Duration`` metric and the log lines carry it.
* the fleet's calibration (issue 20 item 3): at the end of an on-demand preload, each stage's
  duration as ``StageDuration`` (ms; dimension sets ``service`` + ``stage`` and ``function``,
  ``alias``, ``memory_mb``, ``stage``), one EMF event per stage, once per environment; and
  ``OverflowLatency`` also under ``function``, ``alias``, ``memory_mb`` once the alias is known
  (`Telemetry.set_fleet`). The warmer reads their p95 per alias
  (``warmers.cloudwatch.CloudWatchFleetTimings``) and publishes it with the degradation level.

Imports only the standard library at import time.

References
----------
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
https://www.w3.org/TR/server-timing/
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import IO, Any

from functions.runtime.config import RuntimeConfig
from functions.runtime.errors import FailureTag

__all__ = [
    "FLUSH_AGE_MS",
    "FLUSH_VALUES",
    "SERVER_TIMING_NAMES",
    "InvocationRecord",
    "Telemetry",
    "current_invocation",
    "safe_text",
    "server_timing",
]

#: Flush buffered request counts after this many requests (bounds what a reclaimed environment
#: can lose; one EMF event per path per flush keeps log volume ~1% of one line per request).
FLUSH_VALUES = 100
#: Flush buffered metrics once the oldest value is this old, ms (CloudWatch's standard
#: resolution is one minute; 10 s keeps dashboards current).
FLUSH_AGE_MS = 10_000.0
#: Server-Timing metric names of the shared contract, in header order.
SERVER_TIMING_NAMES = ("init", "queue", "model", "infer", "overflow")


def safe_text(text: object, limit: int = 2000) -> str:
    """``text`` as a log line can carry it: at most ``limit`` characters, with lone UTF-16
    surrogates (``\\ud800``, which UTF-8 cannot encode: the log write would fail) escaped."""
    value = str(text)[:limit]
    if value.isascii():
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


_CONTRACT_NAMES = frozenset(SERVER_TIMING_NAMES)
#: Each contract name's place in the header
_CONTRACT_ORDER = {name: index for index, name in enumerate(SERVER_TIMING_NAMES)}
_OTHER = len(SERVER_TIMING_NAMES)  # other names: after the contract's, in insertion order
_INF = float("inf")
_DEBUG = 10  # logging.DEBUG, without importing logging at module import
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
#: Other Server-Timing names already checked against `_TOKEN` (an agent times a handful:
#: ``tool``, ``preload``, ...); bounded, so a caller making up names cannot grow it.
_TOKENS: set[str] = set()
_MAX_TOKENS = 64
#: `_one_decimal` formats values below this with integers (ms: 11.6 days).
_INT_FORMAT_BELOW = 1e9


def _one_decimal(value: float) -> str:
    """``f"{value:.1f}"`` (for ``value >= 0``), with integer formatting below 1e9.

    Between requests the float formatter's code goes cold: formatting one duration measured
    ~5 us in place on the warm path, two small integers ~1 us (``bench/bench_warm_path.py``).
    ``value * 10`` is off by at most one rounding (< 1e-6 here), so a fractional part more
    than 1e-6 away from one half rounds as the exact binary value does; one within 1e-6 of a
    tie goes to the formatter (which rounds the exact binary value, half to even).
    """
    if value < _INT_FORMAT_BELOW:
        scaled = value * 10.0
        tenths = int(scaled)
        rest = scaled - tenths
        if rest > 0.500001:
            tenths += 1
        elif rest >= 0.499999:
            return f"{value:.1f}"
        return f"{tenths // 10}.{tenths % 10}"
    return f"{value:.1f}"


def server_timing(durations_ms: Mapping[str, float | None]) -> str:
    """Build a ``Server-Timing`` header value.

    Parameters
    ----------
    durations_ms : Mapping[str, float | None]
        Metric name -> duration in milliseconds; None values are left out. Contract names
        (``init``, ``queue``, ``model``, ``infer``, ``overflow``) come first in that order,
        other names after them in insertion order.

    Returns
    -------
    str
        E.g. ``"init;dur=812.4, infer;dur=2.9"`` (empty when nothing was timed).

    Raises
    ------
    ValueError
        A name is not an HTTP token or a duration is negative or not finite.

    References
    ----------
    https://www.w3.org/TR/server-timing/#the-server-timing-header-field
    """
    if not durations_ms:
        return ""
    if len(durations_ms) == 1:  # the warm path: only ``queue`` was timed
        for name, value in durations_ms.items():
            if name in _CONTRACT_NAMES and value is not None and 0.0 <= value < _INF:
                return f"{name};dur={_one_decimal(value)}"
    if len(durations_ms) == 2:  # the warm path's ``queue`` and ``infer`` (or ``tool``)
        (first, first_ms), (second, second_ms) = durations_ms.items()
        # a contract name's place, else after them (a name checked before), else None
        first_at = _CONTRACT_ORDER.get(first, _OTHER if first in _TOKENS else None)
        second_at = _CONTRACT_ORDER.get(second, _OTHER if second in _TOKENS else None)
        if (first_at is not None and second_at is not None and first_ms is not None
                and second_ms is not None and 0.0 <= first_ms < _INF and 0.0 <= second_ms < _INF):
            if first_at > second_at:
                first, first_ms, second, second_ms = second, second_ms, first, first_ms
            return f"{first};dur={_one_decimal(first_ms)}, {second};dur={_one_decimal(second_ms)}"
    parts = []
    for name in SERVER_TIMING_NAMES:  # contract names: known tokens, in contract order
        value = durations_ms.get(name)
        if value is not None:
            if not 0.0 <= value < _INF:
                raise ValueError(f"Server-Timing duration for {name!r} must be finite and >= 0, got {value}")
            parts.append(f"{name};dur={_one_decimal(value)}")
    for name, value in durations_ms.items():
        if value is None or name in _CONTRACT_NAMES:
            continue
        if name not in _TOKENS:
            if not _TOKEN.match(name):
                raise ValueError(f"Server-Timing name {name!r} is not an HTTP token")
            if len(_TOKENS) < _MAX_TOKENS:
                _TOKENS.add(name)
        if not 0.0 <= value < _INF:
            raise ValueError(f"Server-Timing duration for {name!r} must be finite and >= 0, got {value}")
        parts.append(f"{name};dur={_one_decimal(value)}")
    return ", ".join(parts)


#: The path parameters of a request to an exact (not templated) route: none (shared, never written).
_NO_PARAMS: dict[str, str] = {}


class InvocationRecord:
    """What one invocation did, filled in by the handler and the app.

    Attributes
    ----------
    request_id : str | None
        Lambda request id.
    route : str
        ``METHOD /path``.
    path : str
        Request path taken (``local``, ``overflow``, ``degraded``, ``shed``).
    failure : FailureTag | None
        Failure tag when the request failed.
    timings_ms : dict[str, float]
        Server-Timing durations in milliseconds.
    payload : dict[str, Any] | None
        The route's validated payload (`functions.runtime.agent.AgentRuntime.payload`).
    deadline_ms : float | None
        The request's SLA deadline, monotonic ms (`functions.runtime.agent.AgentRuntime.remaining_ms`);
        a streaming route's: its first token's, then, once its first chunk is out, the stream's
        end.
    stream : str | None
        A streaming route's answer that did not stream: ``"buffered"`` (logged as the
        ``stream`` field); None for a buffered route (a streamed answer is logged by
        `Telemetry.stream_done` with its numbers).
    """

    __slots__ = ("deadline_ms", "failure", "passed_over", "path", "path_params", "payload",
                 "request_id", "route", "stream", "timings_ms")

    def __init__(self, request_id: str | None, route: str = "", path: str = "local") -> None:
        self.request_id = request_id
        self.route = route
        self.path = path
        self.failure: FailureTag | None = None
        self.timings_ms: dict[str, float] = {}
        #: the route's validated payload (its ``validate`` hook's result), None without one
        self.payload: dict[str, Any] | None = None
        #: the request's SLA deadline on the monotonic clock (``time.perf_counter()`` ms)
        self.deadline_ms: float | None = None
        #: the templated route's path parameters (``{}`` for an exact route)
        self.path_params: dict[str, str] = _NO_PARAMS
        #: ``"buffered"``: a streaming route answered in one piece (None: a buffered route)
        self.stream: str | None = None
        #: the paths admission tried and passed over before the one that answered, as
        #: ``"<path>:<failure tag>"`` (logged as ``passed_over``; e.g. ``("local:timeout_resource",)``
        #: for a full overflow answer after the local wait ran out: no failure of the request)
        self.passed_over: tuple[str, ...] = ()


class _Current:
    """The invocation being served.

    An execution environment serves one invocation at a time (Lambda's concurrency model), so a
    plain attribute is enough; a ``ContextVar`` was measured to add ~8 us CPU per request (asyncio
    runs every callback of the request inside the copied context), a sixth of the toolkit's
    warm-path cost. The attribute is an instance's (one slot), not the class's: assigning a class
    attribute modifies the type, which invalidates the interpreter's caches for it, twice per
    request (measured ~2.5 us in place).
    """

    __slots__ = ("record",)

    def __init__(self) -> None:
        self.record: InvocationRecord | None = None


_CURRENT = _Current()


def current_invocation() -> InvocationRecord | None:
    """The record of the invocation being served (None outside an invocation)."""
    return _CURRENT.record


def set_current(record: InvocationRecord | None) -> InvocationRecord | None:
    """Make ``record`` the current invocation; returns the previous one (for :func:`reset_current`).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
    (one request at a time per execution environment)
    """
    current = _CURRENT
    previous = current.record
    current.record = record
    return previous


def reset_current(previous: InvocationRecord | None) -> None:
    """Undo :func:`set_current` (end of the invocation)."""
    _CURRENT.record = previous


def _fields(record: InvocationRecord, cold_start: bool, init_type: str, environment_id: str,
            status: int, duration_ms: float) -> dict[str, Any]:
    """The keys of a request's log line."""
    return {
        "cold_start": cold_start,
        "init_type": init_type,
        "environment_id": environment_id,
        "path": record.path,
        "route": record.route if record.route.isascii() else safe_text(record.route),
        "status": status,
        "duration_ms": round(duration_ms, 3),
        "request_id": record.request_id,
    } | ({"passed_over": list(record.passed_over)} if record.passed_over else {})


class Telemetry:
    """Powertools Logger + EMF Metrics for one execution environment, created lazily.

    Parameters
    ----------
    config : RuntimeConfig
        Service name and metrics namespace.
    stream : IO[str] | None
        Where log lines go (default: standard output, which Lambda sends to CloudWatch Logs).
        Powertools configures one logger per service name once per process.
    """

    def __init__(self, config: RuntimeConfig, *, stream: IO[str] | None = None) -> None:
        self._config = config
        self._stream = stream
        self._logger: Any = None
        self._metrics: Any = None
        self._unit: Any = None
        self._counts: dict[str, int] = {}
        self._buffered = 0
        self._oldest_ms: float | None = None
        self._debug = False
        self._lock = threading.Lock()
        #: Powertools' ``Metrics`` buffers one event at a time and is not thread-safe: every
        #: emission takes turns under this lock (the preload thread's stage durations, a
        #: request's or stream's record, a background task's failure, a flush), and so do the
        #: log lines written beside them (one physical line each); re-entrant: a record's
        #: emission ends with `flush`
        self._emit_lock = threading.RLock()
        #: ``function``/``alias``/``memory_mb`` dimensions of the fleet's metrics (None: unknown)
        self._fleet: dict[str, str] | None = None

    def set_fleet(self, function_name: str | None, alias: str | None,
                  memory_mb: int | None) -> bool:
        """Name this environment's function, alias and memory size for the fleet's metrics.

        Returns True when all three are known (the alias comes from the first invocation's
        ``invoked_function_arn``); until then `stage_durations` emits nothing and
        ``OverflowLatency`` carries the ``service`` dimension only.
        """
        if not function_name or not alias or memory_mb is None:
            return False
        self._fleet = {"function": function_name, "alias": alias, "memory_mb": str(memory_mb)}
        return True

    @property
    def fleet_known(self) -> bool:
        """`set_fleet` named the function, alias and memory size."""
        return self._fleet is not None

    def stage_durations(self, durations_ms: Mapping[str, float]) -> int:
        """Emit each preload stage's duration as EMF ``StageDuration`` (ms), one event per stage.

        Parameters
        ----------
        durations_ms : Mapping[str, float]
            Stage name -> how long it ran, ms (finite, >= 0; others are skipped).

        Returns
        -------
        int
            Events emitted (0 before :meth:`load` or `set_fleet`).
        """
        fleet = self._fleet
        if fleet is None or self._metrics is None:
            return 0
        metrics, unit = self._metrics, self._unit
        sent = 0
        with self._emit_lock:
            for stage, value in durations_ms.items():
                if not 0.0 <= value < _INF:
                    continue
                metrics.add_dimension("stage", stage)
                metrics.add_dimensions(**fleet, stage=stage)
                metrics.add_metric(name="StageDuration", unit=unit.Milliseconds, value=value)
                metrics.flush_metrics()
                sent += 1
        return sent

    def load(self) -> Telemetry:
        """Import Powertools and create the logger and metrics (idempotent)."""
        if self._logger is None:
            with self._lock:
                if self._logger is None:
                    from aws_lambda_powertools.logging.logger import Logger
                    from aws_lambda_powertools.metrics import Metrics, MetricUnit

                    self._metrics = Metrics(
                        namespace=self._config.metrics_namespace,
                        service=self._config.service_name,
                    )
                    self._unit = MetricUnit
                    logger = Logger(service=self._config.service_name, stream=self._stream)
                    self._debug = logger.log_level <= _DEBUG
                    self._logger = logger
        return self

    @property
    def logger(self) -> Any:
        """The Powertools ``Logger`` (JSON to stdout)."""
        return self.load()._logger

    # -- per invocation -----------------------------------------------------------------
    def request_done(
        self,
        record: InvocationRecord,
        *,
        status: int,
        duration_ms: float,
        cold_start: bool,
        init_type: str,
        environment_id: str,
        init_duration_ms: float | None,
        now_ms: float,
        overflow_ms: float | None = None,
        sla_breach: bool = False,
    ) -> None:
        """Log and count a finished HTTP request.

        Parameters
        ----------
        record : InvocationRecord
            The invocation's route, path, failure tag and timings.
        status : int
            HTTP status returned.
        duration_ms : float
            Handler duration, milliseconds.
        cold_start : bool
            First invocation of an on-demand environment.
        init_type : str
            ``AWS_LAMBDA_INITIALIZATION_TYPE``.
        environment_id : str
            Execution environment id.
        init_duration_ms : float | None
            Init duration (reported with the cold start), milliseconds.
        now_ms : float
            Monotonic time, milliseconds (flush scheduling).
        overflow_ms : float | None
            Duration of the overflow call when the request went to the overflow endpoint,
            milliseconds: emitted at once as EMF ``OverflowLatency``.
        sla_breach : bool
            The answer left later than the route's SLA after the request's arrival: EMF
            ``SlaBreaches`` (count). A ``degraded`` path also emits ``Degradations`` (count).
        """
        path = record.path
        if (path == "local" and not cold_start and not self._debug and record.failure is None
                and overflow_ms is None and not sla_breach and self._logger is not None):
            # the warm path: a plain local answer is counted, not logged (its DEBUG line is off)
            counts = self._counts
            counts["local"] = counts.get("local", 0) + 1
            self._buffered = buffered = self._buffered + 1
            oldest = self._oldest_ms
            if oldest is None:
                self._oldest_ms = oldest = now_ms
            if buffered >= FLUSH_VALUES or now_ms - oldest >= FLUSH_AGE_MS:
                self.flush()
            return
        if self._logger is None:
            self.load()
        with self._emit_lock:
            self._record_done(record, status, duration_ms, cold_start, init_type,
                              environment_id, init_duration_ms, now_ms, overflow_ms, sla_breach)

    def _record_done(self, record: InvocationRecord, status: int, duration_ms: float,
                     cold_start: bool, init_type: str, environment_id: str,
                     init_duration_ms: float | None, now_ms: float, overflow_ms: float | None,
                     sla_breach: bool) -> None:
        """`request_done` past the warm path (under the emission lock)."""
        path = record.path
        notable = cold_start or record.failure is not None or path != "local"
        if notable or self._debug:
            fields = _fields(record, cold_start, init_type, environment_id, status, duration_ms)
            if record.stream is not None:
                fields["stream"] = record.stream
            if record.failure is not None:
                fields["failure"] = str(record.failure)
                self._logger.warning("request failed", extra=fields)
            elif notable:
                self._logger.info("request", extra=fields)
            else:
                self._logger.debug("request", extra=fields)

        self._count(path, now_ms, cold_start, init_type, init_duration_ms)
        if overflow_ms is not None or sla_breach or path == "degraded":
            self._emit_admission(path, overflow_ms, sla_breach)
        oldest = self._oldest_ms  # set by _count
        if (
            notable
            or self._buffered >= FLUSH_VALUES
            or (oldest is not None and now_ms - oldest >= FLUSH_AGE_MS)
        ):
            self.flush()

    def stream_done(
        self,
        record: InvocationRecord,
        *,
        status: int,
        duration_ms: float,
        cold_start: bool,
        init_type: str,
        environment_id: str,
        init_duration_ms: float | None,
        now_ms: float,
        sla_breach: bool,
        stream: Mapping[str, Any],
    ) -> None:
        """Log and count a streamed answer once it ended (`functions.runtime.admission.stream`).

        One JSON line per stream (INFO ``stream``, WARNING ``stream failed`` with ``failure``:
        ``stream_error``, ``stream_timeout``, ``client_disconnected``, ``cold_start_timeout``
        ...), with the keys of `request_done` and ``stream`` (``ttft_ms``, ``tokens_per_s``,
        ``tokens``, ``body_bytes``, ``chunks``); EMF ``TimeToFirstTokenMs`` (Milliseconds, from
        the request's arrival to the first body chunk written), ``TokensPerSecond``
        (Count/Second: chunks after the first, SSE events for ``text/event-stream``, over the
        last-minus-first chunk time), ``StreamBytes`` (Bytes) and ``StreamChunks`` (Count) in
        one event (the ``service`` dimension), ``StreamFailures`` (Count, dimension
        ``failure``) for a failed one; ``Requests`` counted by path, ``ColdStart``,
        ``Degradations`` and ``SlaBreaches`` (the first token after ``first_token_ms``) as
        for a buffered answer.

        Parameters
        ----------
        record : InvocationRecord
        status : int
            The status the prelude carried.
        duration_ms : float
            From the invocation's start to the stream's end, ms.
        cold_start, init_type, environment_id, init_duration_ms, now_ms
            As `request_done`.
        sla_breach : bool
            The first chunk came after the first-token SLA (or none came).
        stream : Mapping[str, Any]
            ``ttft_ms`` (float | None), ``tokens_per_s`` (float | None), ``tokens``,
            ``body_bytes``, ``chunks`` (int).
        """
        self.load()
        with self._emit_lock:
            fields = _fields(record, cold_start, init_type, environment_id, status, duration_ms)
            fields["stream"] = dict(stream)
            if record.failure is not None:
                fields["failure"] = str(record.failure)
                self._logger.warning("stream failed", extra=fields)
            else:
                self._logger.info("stream", extra=fields)
            path = record.path
            self._count(path, now_ms, cold_start, init_type, init_duration_ms)
            if sla_breach or path == "degraded":
                self._emit_admission(path, None, sla_breach)
            metrics, unit = self._metrics, self._unit
            ttft_ms, tokens_per_s = stream.get("ttft_ms"), stream.get("tokens_per_s")
            if ttft_ms is not None:
                metrics.add_metric(name="TimeToFirstTokenMs", unit=unit.Milliseconds, value=ttft_ms)
            if tokens_per_s is not None:
                metrics.add_metric(name="TokensPerSecond", unit=unit.CountPerSecond, value=tokens_per_s)
            metrics.add_metric(name="StreamBytes", unit=unit.Bytes, value=int(stream.get("body_bytes", 0)))
            metrics.add_metric(name="StreamChunks", unit=unit.Count, value=int(stream.get("chunks", 0)))
            metrics.flush_metrics()
            if record.failure is not None:
                metrics.add_dimension("failure", str(record.failure))
                metrics.add_metric(name="StreamFailures", unit=unit.Count, value=1)
                metrics.flush_metrics()
            self.flush()

    def ping_done(
        self, *, cold_start: bool, init_type: str, environment_id: str, held_ms: float, ready: bool
    ) -> None:
        """Log a warm ping (INFO). Pings are not traffic: no request metric is counted."""
        self.load()
        self._logger.info(
            "warm ping",
            extra={
                "cold_start": cold_start,
                "init_type": init_type,
                "environment_id": environment_id,
                "path": "ping",
                "held_ms": round(held_ms, 3),
                "ready": ready,
            },
        )
        if cold_start:
            # the init was paid by the warmer: count it as a cold start, not as a request
            with self._emit_lock:
                self._emit_cold_start(init_type, None)

    def failure(self, tag: FailureTag, message: str, **fields: Any) -> None:
        """Log a failure outside an HTTP request (e.g. a malformed direct invocation)."""
        self.load()
        self._logger.warning(safe_text(message), extra={
            "failure": str(tag),
            **{k: safe_text(v) if isinstance(v, str) else v for k, v in fields.items()}})

    def background_failed(self, tag: FailureTag, error: BaseException, *, request_id: str | None,
                          route: str) -> None:
        """Log and count a failure of the app's work after its response (a background task
        that raised, or was cut at the invocation's deadline): one ERROR line with the
        traceback (keys ``failure``, ``path`` = ``background``, ``route``, ``request_id``) and
        EMF ``BackgroundFailures`` (count, dimension ``failure``). The answer was already sent.

        Parameters
        ----------
        tag : FailureTag
            The cause (`functions.runtime.local_path.failure_tag`).
        error : BaseException
            What the task raised (a ``TimeoutError`` when it was cut).
        request_id : str | None
            The invocation whose response scheduled the task.
        route : str
            ``"METHOD /path"`` of that request.
        """
        self.load()
        self._logger.error(
            safe_text(f"a background task failed after the response: {type(error).__name__}: "
                      f"{error}"),
            exc_info=(type(error), error, error.__traceback__),
            extra={"failure": str(tag), "path": "background", "route": safe_text(route),
                   "request_id": request_id})
        metrics, unit = self._metrics, self._unit
        with self._emit_lock:
            metrics.add_dimension("failure", str(tag))
            metrics.add_metric(name="BackgroundFailures", unit=unit.Count, value=1)
            metrics.flush_metrics()

    def _count(self, path: str, now_ms: float, cold_start: bool, init_type: str,
               init_duration_ms: float | None) -> None:
        """Buffer one request of ``path``; a cold start's metrics go out at once."""
        self._counts[path] = self._counts.get(path, 0) + 1
        self._buffered += 1
        if self._oldest_ms is None:
            self._oldest_ms = now_ms
        if cold_start:
            self._emit_cold_start(init_type, init_duration_ms)

    def _emit_cold_start(self, init_type: str, init_duration_ms: float | None) -> None:
        metrics, unit = self._metrics, self._unit
        metrics.add_dimension("init_type", init_type)
        metrics.add_metric(name="ColdStart", unit=unit.Count, value=1)
        if init_duration_ms is not None:
            metrics.add_metric(name="InitDuration", unit=unit.Milliseconds, value=init_duration_ms)
        metrics.flush_metrics()

    def _emit_admission(self, path: str, overflow_ms: float | None, sla_breach: bool) -> None:
        metrics, unit = self._metrics, self._unit
        if overflow_ms is not None and self._fleet is not None:
            # its own event: the fleet's dimension set is the overflow latency's only
            metrics.add_dimensions(**self._fleet)
            metrics.add_metric(name="OverflowLatency", unit=unit.Milliseconds, value=overflow_ms)
            metrics.flush_metrics()
            if path != "degraded" and not sla_breach:
                return
        elif overflow_ms is not None:
            metrics.add_metric(name="OverflowLatency", unit=unit.Milliseconds, value=overflow_ms)
        if path == "degraded":
            metrics.add_metric(name="Degradations", unit=unit.Count, value=1)
        if sla_breach:
            metrics.add_metric(name="SlaBreaches", unit=unit.Count, value=1)
        metrics.flush_metrics()

    @property
    def loaded(self) -> bool:
        """Powertools is imported and the logger and metrics exist (:meth:`load` ran)."""
        return self._logger is not None

    def flush(self) -> None:
        """Emit buffered request counts as EMF, one event per request path."""
        if not self._buffered or self._metrics is None:
            return
        metrics, unit = self._metrics, self._unit
        with self._emit_lock:
            for path, count in self._counts.items():
                metrics.add_dimension("path", path)
                metrics.add_metric(name="Requests", unit=unit.Count, value=count)
                metrics.flush_metrics()
            self._counts.clear()
            self._buffered = 0
            self._oldest_ms = None
