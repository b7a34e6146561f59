"""AWS/Lambda metrics from the emulator, published to CloudWatch (a moto server locally).

The emulator records each event (an invocation, an error, a throttle, a duration, the
concurrency it saw) into 1-minute buckets keyed by metric name and dimensions; a publisher
thread sends what accumulated since its last flush as ``StatisticValues`` with the bucket's
minute as timestamp. CloudWatch (and moto) aggregate several data points of one minute
(``Sum`` adds, ``Maximum`` takes the max), so partial flushes add up to the right values.

Dimensions follow AWS: ``[FunctionName]`` and ``[FunctionName, Resource]`` with
``Resource = "<function>:<alias or version>"`` for qualified invocations.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from infra.local.clock import Clock

NAMESPACE = "AWS/Lambda"
_LOG = logging.getLogger("warmstart.local.metrics")

#: metric name -> CloudWatch unit
UNITS = {
    "Invocations": "Count",
    "Errors": "Count",
    "Throttles": "Count",
    "Duration": "Milliseconds",
    "ConcurrentExecutions": "Count",
    "ProvisionedConcurrentExecutions": "Count",
    "ProvisionedConcurrencyUtilization": "None",
    "ProvisionedConcurrencySpilloverInvocations": "Count",
    "ProvisionedConcurrencyInvocations": "Count",
}


class MetricsSink(Protocol):
    """Port the emulator records into."""

    def record(
        self, metric: str, value: float, function_name: str, resource: str | None
    ) -> None: ...


@dataclass
class _Agg:
    total: float = 0.0
    minimum: float = float("inf")
    maximum: float = float("-inf")
    count: float = 0.0

    def add(self, value: float) -> None:
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        self.count += 1


class NullMetrics:
    """Records nothing (no CloudWatch configured)."""

    def record(self, metric: str, value: float, function_name: str, resource: str | None) -> None:
        return None


class CloudWatchMetrics:
    """Aggregates to 1-minute buckets and publishes with ``put_metric_data``.

    Parameters
    ----------
    client : botocore client
        A CloudWatch client (``boto3.client("cloudwatch", endpoint_url=...)``).
    clock : Clock
        Gives each data point its (possibly scaled) timestamp.
    flush_interval_s : float
        Real seconds between background flushes (>0); :meth:`flush` publishes at once.
    """

    def __init__(self, client: Any, clock: Clock, flush_interval_s: float = 10.0) -> None:
        if not flush_interval_s > 0:
            raise ValueError(f"flush_interval_s must be > 0, got {flush_interval_s}")
        self._client = client
        self._clock = clock
        self._interval_s = flush_interval_s
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, str, tuple[tuple[str, str], ...]], _Agg] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published_datums = 0

    def record(self, metric: str, value: float, function_name: str, resource: str | None) -> None:
        """Record one observation under ``[FunctionName]`` and, if given, ``[.., Resource]``."""
        minute = int(self._clock.time() // 60) * 60
        dim_sets: list[tuple[tuple[str, str], ...]] = [(("FunctionName", function_name),)]
        if resource:
            dim_sets.append((("FunctionName", function_name), ("Resource", resource)))
        with self._lock:
            for dims in dim_sets:
                self._pending.setdefault((minute, metric, dims), _Agg()).add(float(value))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="metrics-publisher", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 (keep publishing; the data is kept)
                _LOG.exception("publishing AWS/Lambda metrics failed; will retry")

    def flush(self) -> int:
        """Publish everything recorded since the last flush; returns the datum count.

        Raises
        ------
        botocore.exceptions.ClientError, EndpointConnectionError
            If CloudWatch rejects the data; the data is put back for the next flush.
        """
        with self._lock:
            pending, self._pending = self._pending, {}
        datums = [self._datum(key, agg) for key, agg in pending.items()]
        sent = 0
        try:
            for start in range(0, len(datums), 20):
                self._client.put_metric_data(Namespace=NAMESPACE, MetricData=datums[start:start + 20])
                sent = start + 20
        except Exception:
            with self._lock:  # put unsent buckets back
                for key, agg in list(pending.items())[sent:]:
                    self._pending.setdefault(key, _Agg())
                    merged = self._pending[key]
                    merged.total += agg.total
                    merged.count += agg.count
                    merged.minimum = min(merged.minimum, agg.minimum)
                    merged.maximum = max(merged.maximum, agg.maximum)
            raise
        self.published_datums += len(datums)
        return len(datums)

    @staticmethod
    def _datum(key: tuple[int, str, tuple[tuple[str, str], ...]], agg: _Agg) -> dict[str, Any]:
        minute, metric, dims = key
        return {
            "MetricName": metric,
            "Dimensions": [{"Name": n, "Value": v} for n, v in dims],
            "Timestamp": dt.datetime.fromtimestamp(minute, tz=dt.UTC),
            "StatisticValues": {
                "SampleCount": agg.count,
                "Sum": agg.total,
                "Minimum": agg.minimum,
                "Maximum": agg.maximum,
            },
            "Unit": UNITS.get(metric, "None"),
            "StorageResolution": 60,
        }

    def stop(self) -> None:
        """Stop the background thread and publish what is left (best effort)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.flush()
        except Exception:  # noqa: BLE001
            _LOG.warning("final metrics flush failed", exc_info=True)


def metric_names() -> Sequence[str]:
    return tuple(UNITS)
