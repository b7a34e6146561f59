"""CloudWatch ``GetMetricData`` reader for an alias's ``AWS/Lambda`` metrics (a MetricsSource);
the overflow answers of an endpoint's agents (their EMF ``Requests``) and the warmer's own
spend-guard metric (``PutMetricData``).

One call may hold up to 500 metric queries and return up to 100,800 data points; longer ranges
are split into time chunks, and each call is paginated with ``NextToken``. 1-minute data is
kept 15 days, so 14 days of history fit.
https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricData.html
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from warmers.ports import MetricsEmpty, MetricsSource, MetricsUnavailable
from warmers.series import PERIOD_S, MetricSeries

if TYPE_CHECKING:
    from warmers.plan.endpoint import EndpointPlan, EndpointPolicy

logger = logging.getLogger("warmstart.warmer")

#: GetMetricData limits (API reference above).
MAX_DATAPOINTS_PER_CALL = 100_800
MAX_QUERIES_PER_CALL = 500
#: 1-minute data retention.
RETENTION_1MIN_S = 15 * 86_400

#: (query id, metric name, statistic, MetricSeries field, is a count that Lambda omits at zero).
#: Only what the warmer plans from: the forecast and the degradation level read concurrency,
#: invocations and duration. GetMetricData is priced per metric requested, so every query is
#: paid at every run of every alias (``ProvisionedConcurrencyUtilization`` and
#: ``ProvisionedConcurrencySpilloverInvocations`` were read until nothing used them: 2 of 5).
QUERIES: tuple[tuple[str, str, str, str, bool], ...] = (
    ("conc", "ConcurrentExecutions", "Maximum", "concurrency", True),
    ("inv", "Invocations", "Sum", "invocations", True),
    ("dur", "Duration", "Average", "duration_ms", False),
)


#: Namespace of the warmer's own metrics (the construct grants ``PutMetricData`` on it only).
WARMER_NAMESPACE = "Warmstart/Warmer"
#: USD an endpoint spent in its spend guard's window when it answered no overflow request in
#: it (0 when it answered some), dimension ``EndpointName``: ``EndpointPlan.unanswered_spend_usd``.
SPEND_UNANSWERED_METRIC = "EndpointSpendUnansweredUsd"
#: The toolkit's request count (``functions/runtime/telemetry.py``: dimensions ``service``,
#: ``path``) and the path of an answer the endpoint gave.
REQUESTS_METRIC = "Requests"
OVERFLOW_PATH = "overflow"
#: PutMetricData takes at most 1,000 metrics per call (API reference).
MAX_DATUMS_PER_PUT = 1000


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


class CloudWatchMetricsSource:
    """Reads ``AWS/Lambda`` metrics of one alias (dimensions FunctionName + Resource fn:alias).

    Parameters
    ----------
    client : boto3 CloudWatch client
        Injected (``endpoint_url``-able: a moto server or the local stack).
    zero_fill_counts : bool
        Lambda sends ``Invocations``/``ConcurrentExecutions`` only for minutes with
        invocations, so a missing minute of a count means zero; set False to keep NaN for every
        missing minute (raw gaps). ``Duration`` gaps stay NaN either way.
        https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
        The same holds for a whole range: Lambda sends metrics when a function finishes
        processing an event (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics.html),
        so a successful answer with no data point at all means no invocation in the range,
        which is told apart from a failed or throttled call (``MetricsUnavailable``).
    max_datapoints_per_call : int
        Data points one call may return (100,800); lowered in tests to force chunking.
    """

    def __init__(self, client: Any, *, zero_fill_counts: bool = True,
                 max_datapoints_per_call: int = MAX_DATAPOINTS_PER_CALL) -> None:
        if max_datapoints_per_call < len(QUERIES):
            raise ValueError(
                f"max_datapoints_per_call must be >= {len(QUERIES)} (one per metric per minute)")
        self._client = client
        self._zero_fill = zero_fill_counts
        self._max_points = max_datapoints_per_call
        self.calls = 0

    def _queries(self, function_name: str, alias: str) -> list[dict[str, Any]]:
        dims = [{"Name": "FunctionName", "Value": function_name},
                {"Name": "Resource", "Value": f"{function_name}:{alias}"}]
        return [
            {"Id": qid, "ReturnData": True,
             "MetricStat": {"Metric": {"Namespace": "AWS/Lambda", "MetricName": name,
                                       "Dimensions": dims},
                            "Period": PERIOD_S, "Stat": stat}}
            for qid, name, stat, _, _ in QUERIES
        ]

    def fetch(self, function_name: str, alias: str, *, start_s: float,
              end_s: float) -> MetricSeries:
        """1-minute series over ``[start_s, end_s)``, both floored to the minute.

        Raises
        ------
        ValueError
            If the range is empty or longer than the 15 days of 1-minute retention.
        MetricsUnavailable
            On a throttled or failed call or a Forbidden/InternalError status;
            ``MetricsEmpty`` (a subclass) when no metric has a single data point and
            ``zero_fill_counts`` is False. With ``zero_fill_counts`` (the default) an answer
            without any data point is zero traffic: a series of zero counts (duration NaN) is
            returned.
        """
        start = int(start_s // PERIOD_S) * PERIOD_S
        end = int(end_s // PERIOD_S) * PERIOD_S
        n = (end - start) // PERIOD_S
        if n <= 0:
            raise ValueError(f"empty range: start_s={start_s} end_s={end_s}")
        if end - start > RETENTION_1MIN_S:
            raise ValueError(
                f"{(end - start) / 86400:.1f} days requested; 1-minute metrics are kept 15 days")
        queries = self._queries(function_name, alias)
        arrays = {qid: np.full(n, np.nan) for qid, *_ in QUERIES}
        chunk_min = self._max_points // len(queries)
        seen = 0
        for chunk_start in range(start, end, chunk_min * PERIOD_S):
            chunk_end = min(end, chunk_start + chunk_min * PERIOD_S)
            seen += self._fetch_chunk(queries, chunk_start, chunk_end, start, arrays)
        if seen == 0:
            if self._zero_fill:
                # answered, with nothing: zero traffic (see the class notes), not an outage
                return zero_traffic_series(function_name, alias, start, end)
            raise MetricsEmpty(
                f"CloudWatch returned no data point for {function_name}:{alias} in "
                f"{n} minutes")
        fields: dict[str, np.ndarray] = {}
        for qid, _, _, field_name, is_count in QUERIES:
            arr = arrays[qid]
            if is_count and self._zero_fill:
                arr = np.nan_to_num(arr, nan=0.0)
            fields[field_name] = arr
        return MetricSeries(function_name=function_name, alias=alias, start_s=float(start),
                            source="cloudwatch", **fields)

    def _fetch_chunk(self, queries: list[dict[str, Any]], chunk_start: int, chunk_end: int,
                     origin: int, arrays: dict[str, np.ndarray]) -> int:
        seen = 0
        for result in _results(self._client, queries, chunk_start, chunk_end, self._count):
            arr = arrays.get(result.get("Id", ""))
            if arr is None:
                continue
            for ts, value in zip(result.get("Timestamps", []), result.get("Values", [])):
                idx = int((ts.timestamp() - origin) // PERIOD_S)
                if 0 <= idx < arr.shape[0]:
                    arr[idx] = float(value)
                    seen += 1
        return seen

    def _count(self) -> None:
        self.calls += 1


def _results(client: Any, queries: list[dict[str, Any]], start: int, end: int,
             on_call: Callable[[], None], what: str = "") -> Iterator[dict[str, Any]]:
    """Every ``MetricDataResults`` entry of one paginated ``GetMetricData`` over
    ``[start, end)``; ``on_call`` before each call.

    Raises
    ------
    MetricsUnavailable
        On a throttled or failed call or a ``Forbidden``/``InternalError`` status.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"MetricDataQueries": queries, "StartTime": _ts(start),
                                  "EndTime": _ts(end), "ScanBy": "TimestampAscending"}
        if token:
            kwargs["NextToken"] = token
        try:
            on_call()
            resp = client.get_metric_data(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise MetricsUnavailable(f"GetMetricData{what} failed: {exc}") from exc
        for result in resp.get("MetricDataResults", []):
            status = result.get("StatusCode", "Complete")
            if status in ("Forbidden", "InternalError"):
                raise MetricsUnavailable(f"GetMetricData {result.get('Id')}: status {status}")
            yield result
        token = resp.get("NextToken")
        if not token:
            return


class CachingMetricsSource:
    """Keeps each alias's history between runs and fetches only the new minutes.

    The warmer runs every minute over 14 days of history; re-reading 20,160 minutes x 3 metrics
    per alias each time would cost a full GetMetricData call per alias per minute. This wrapper
    fetches the whole range once per execution environment, then only
    ``[last end - overlap_min, now)`` (late data points for recent minutes are re-read).

    Parameters
    ----------
    inner : MetricsSource
        Usually :class:`CloudWatchMetricsSource` (with ``zero_fill_counts=True``).
    overlap_min : int
        Minutes re-read at the end of the cached range.

    Notes
    -----
    An increment with no data point at all (``MetricsEmpty``) means no invocation in those
    minutes: counts are extended with zeros, duration with NaN. Any other
    ``MetricsUnavailable`` propagates (the runner keeps the last good plan). A range that holds
    no data at all (an idle alias, zero-traffic series) is not cached: the next run reads the
    whole range again, so data that arrives late for older minutes is not missed.
    """

    def __init__(self, inner: MetricsSource, *, overlap_min: int = 5) -> None:
        if overlap_min < 0:
            raise ValueError("overlap_min must be >= 0")
        self._inner = inner
        self._overlap_s = overlap_min * PERIOD_S
        self._cache: dict[str, MetricSeries] = {}
        self.full_fetches = 0
        self.incremental_fetches = 0

    def fetch(self, function_name: str, alias: str, *, start_s: float,
              end_s: float) -> MetricSeries:
        """Same contract as :meth:`CloudWatchMetricsSource.fetch`."""
        key = f"{function_name}:{alias}"
        start = int(start_s // PERIOD_S) * PERIOD_S
        end = int(end_s // PERIOD_S) * PERIOD_S
        cached = self._cache.get(key)
        if cached is None or cached.start_s > start or cached.end_s <= start or cached.end_s > end:
            series = self._inner.fetch(function_name, alias, start_s=start, end_s=end)
            self.full_fetches += 1
        else:
            begin = int(max(start, cached.end_s - self._overlap_s))
            series = cached
            if begin < end:
                try:
                    new = self._inner.fetch(function_name, alias, start_s=begin, end_s=end)
                except MetricsEmpty:
                    new = zero_traffic_series(function_name, alias, begin, end)
                self.incremental_fetches += 1
                series = _splice(cached, new)
        series = _trim(series, start)
        if _has_data(series):
            self._cache[key] = series
        else:  # idle so far: read the whole range again next time (as cheap: no data points)
            self._cache.pop(key, None)
        return series


_FIELDS = ("invocations", "concurrency", "duration_ms")


def _has_data(series: MetricSeries) -> bool:
    """True when any minute shows traffic or a measured value (not only zero-filled counts)."""
    counts = (series.invocations, series.concurrency)
    return bool(any(np.nan_to_num(a, nan=0.0).any() for a in counts)
                or np.isfinite(series.duration_ms).any())


def zero_traffic_series(function_name: str, alias: str, begin: int, end: int) -> MetricSeries:
    """Minutes ``[begin, end)`` without invocations: counts 0, duration NaN."""
    n = (end - begin) // PERIOD_S
    zeros = np.zeros(n)
    return MetricSeries(function_name, alias, float(begin), invocations=zeros,
                        concurrency=zeros.copy(), duration_ms=np.full(n, np.nan),
                        source="cloudwatch")


def _splice(old: MetricSeries, new: MetricSeries) -> MetricSeries:
    """``old`` up to where ``new`` starts, then ``new`` (both on the same minute grid)."""
    cut = int((new.start_s - old.start_s) // PERIOD_S)
    fields = {f: np.concatenate([getattr(old, f)[:cut], getattr(new, f)]) for f in _FIELDS}
    return MetricSeries(old.function_name, old.alias, old.start_s, source=old.source, **fields)


def _trim(series: MetricSeries, start: int) -> MetricSeries:
    drop = int((start - series.start_s) // PERIOD_S)
    if drop <= 0:
        return series
    fields = {f: getattr(series, f)[drop:] for f in _FIELDS}
    return MetricSeries(series.function_name, series.alias, float(start), source=series.source,
                        **fields)


class CloudWatchOverflowAnswers:
    """Overflow requests an endpoint's agents answered, from their own EMF metrics (an
    ``OverflowAnswersSource``).

    One ``GetMetricData`` call (paginated) with one query per agent: ``Requests`` with
    dimensions ``service`` (the agent's ``POWERTOOLS_SERVICE_NAME``) and ``path=overflow`` in
    the agents' namespace, ``Sum`` per minute, added up over the window. A minute without a
    data point is one without an overflow answer (the toolkit emits a count only when there
    is one). Each query is one metric requested (priced as the alias queries are).

    Parameters
    ----------
    client : boto3 CloudWatch client
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls = 0

    def answered(self, policy: EndpointPolicy, *, start_s: float, end_s: float) -> int:
        """Overflow answers of ``policy``'s agents in ``[start_s, end_s)``, both floored to
        the minute.

        Raises
        ------
        MetricsUnavailable
            On a throttled or failed call or a ``Forbidden``/``InternalError`` status.
        """
        start = int(start_s // PERIOD_S) * PERIOD_S
        end = max(start + PERIOD_S, int(end_s // PERIOD_S) * PERIOD_S)
        queries = [
            {"Id": f"answered{i}", "ReturnData": True,
             "MetricStat": {"Metric": {"Namespace": policy.metrics_namespace,
                                       "MetricName": REQUESTS_METRIC,
                                       "Dimensions": [{"Name": "service", "Value": service},
                                                      {"Name": "path", "Value": OVERFLOW_PATH}]},
                            "Period": PERIOD_S, "Stat": "Sum"}}
            for i, (_, service) in enumerate(policy.services())]
        total = 0.0
        for i in range(0, len(queries), MAX_QUERIES_PER_CALL):
            for result in _results(self._client, queries[i:i + MAX_QUERIES_PER_CALL], start,
                                   end, self._count,
                                   f" (overflow answers of {policy.endpoint_name})"):
                total += float(sum(result.get("Values", [])))
        return round(total)

    def _count(self) -> None:
        self.calls += 1


class EndpointSpendPublisher:
    """Publishes each endpoint's ``EndpointSpendUnansweredUsd`` (``PutMetricData``, namespace
    :data:`WARMER_NAMESPACE`, dimension ``EndpointName``) for the construct's alarm.

    An endpoint whose answers are unknown this run sends no datum (the guard was not applied;
    the alarm treats missing data as not breaching).

    Parameters
    ----------
    client : boto3 CloudWatch client
    namespace : str
    """

    def __init__(self, client: Any, *, namespace: str = WARMER_NAMESPACE) -> None:
        self._client = client
        self._namespace = namespace

    def publish(self, plans: Sequence[EndpointPlan]) -> int:
        """Send one datum per plan whose answers are known; returns how many were sent.

        Raises
        ------
        botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError
            When CloudWatch refuses or throttles the call (the runner logs it).
        """
        datums = [{"MetricName": SPEND_UNANSWERED_METRIC,
                   "Dimensions": [{"Name": "EndpointName", "Value": plan.endpoint_name}],
                   "Timestamp": _ts(plan.issued_at_s), "Unit": "None",
                   "Value": float(plan.unanswered_spend_usd)}
                  for plan in plans if plan.unanswered_spend_usd is not None]
        for i in range(0, len(datums), MAX_DATUMS_PER_PUT):
            self._client.put_metric_data(Namespace=self._namespace,
                                         MetricData=datums[i:i + MAX_DATUMS_PER_PUT])
        return len(datums)


#: The toolkit's per-stage preload duration (``functions/runtime/telemetry.py``,
#: ``Telemetry.stage_durations``: dimensions ``function``, ``alias``, ``memory_mb``, ``stage``)
#: and its overflow call latency (``OverflowLatency``: ``function``, ``alias``, ``memory_mb``).
STAGE_METRIC = "StageDuration"
OVERFLOW_LATENCY_METRIC = "OverflowLatency"
#: The preload stages a calibration may carry (``functions.runtime.calibration.STAGES``; the
#: warmer does not import the runtime).
FLEET_STAGES = ("toolkit", "overflow", "web", "telemetry", "model", "level")
#: Window the fleet's p95 is read over, minutes: an hour holds enough cold starts of a busy
#: alias for a p95 and forgets a deploy's old version within the hour.
FLEET_WINDOW_MIN = 60


class FleetTimings(NamedTuple):
    """The fleet's p95 per preload stage and of the overflow call, ms (measured stages only)."""

    stage_p95_ms: dict[str, float]
    overflow_p95_ms: float | None


class CloudWatchFleetTimings:
    """p95 of the stage durations and overflow calls an alias's environments measured.

    One ``GetMetricData`` call per alias per run, with one query per stage and one for the
    overflow latency (7 metrics requested), ``Stat="p95"`` over one period that covers the
    window. A stage with no data point in the window is left out (the functions keep their
    seeds for it).

    Parameters
    ----------
    client : boto3 CloudWatch client
    namespace : str
        The agents' ``POWERTOOLS_METRICS_NAMESPACE``.
    stat : str
        ``p95`` (CloudWatch percentile statistic). moto 5.2 answers GetMetricData only for
        Sum/Average/Minimum/Maximum/SampleCount (a percentile fails in its serializer), so its
        tests pass ``Maximum``.
    window_min : int
        Minutes read up to the run's time.

    References
    ----------
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Statistics-definitions.html
    """

    def __init__(self, client: Any, *, namespace: str = "Warmstart", stat: str = "p95",
                 window_min: int = FLEET_WINDOW_MIN) -> None:
        if window_min < 1:
            raise ValueError(f"window_min must be >= 1, got {window_min}")
        self._client = client
        self._namespace = namespace
        self._stat = stat
        self._window_s = window_min * PERIOD_S
        self.calls = 0

    def read(self, function_name: str, alias: str, memory_mb: int, *,
             now_s: float) -> FleetTimings:
        """The fleet's p95s over the window ending at ``now_s`` (floored to the minute).

        Raises
        ------
        MetricsUnavailable
            On a throttled or failed call or a ``Forbidden``/``InternalError`` status.
        """
        dims = [{"Name": "function", "Value": function_name}, {"Name": "alias", "Value": alias},
                {"Name": "memory_mb", "Value": str(memory_mb)}]
        names = {f"stage{i}": stage for i, stage in enumerate(FLEET_STAGES)}
        queries = [
            {"Id": qid, "ReturnData": True,
             "MetricStat": {"Metric": {"Namespace": self._namespace, "MetricName": STAGE_METRIC,
                                       "Dimensions": [*dims, {"Name": "stage", "Value": stage}]},
                            "Period": self._window_s, "Stat": self._stat}}
            for qid, stage in names.items()]
        queries.append(
            {"Id": "overflow", "ReturnData": True,
             "MetricStat": {"Metric": {"Namespace": self._namespace,
                                       "MetricName": OVERFLOW_LATENCY_METRIC, "Dimensions": dims},
                            "Period": self._window_s, "Stat": self._stat}})
        end = int(now_s // PERIOD_S) * PERIOD_S
        stages: dict[str, float] = {}
        overflow: float | None = None
        for result in _results(self._client, queries, end - self._window_s, end, self._count,
                               f" (fleet timings of {function_name}:{alias})"):
            values = [float(v) for v in result.get("Values", []) if v is not None]
            if not values:
                continue  # no data point: the seed stays
            p95 = max(values)  # more than one period (window misaligned): the worst
            qid = result.get("Id", "")
            if qid == "overflow":
                overflow = p95
            elif qid in names:
                stages[names[qid]] = p95
        return FleetTimings(stages, overflow)

    def _count(self) -> None:
        self.calls += 1
