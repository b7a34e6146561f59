"""The replay's additions to the local stack: a plan-recording warmer schedule and metric history.

The GPU endpoint process and the warmer schedule themselves are the local stack's
(:mod:`infra.local.services`: :class:`~infra.local.services.GpuEndpointService`,
:func:`~infra.local.services.warmer_service` building :class:`warmers.schedule.WarmerSchedule`);
``GetAccountSettings`` is answered by the emulator's Lambda API. Here:

- :class:`ReplayWarmer` is that schedule, keeping each run's plan for the report and signalling
  each finished run.
- :func:`replay_warmer_document` is the warmer's configuration for the replayed alias.
- :func:`seed_history` writes the trace minutes before the slice to CloudWatch (moto) as
  ``AWS/Lambda`` metrics, so the forecaster starts with the history production would have.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from warmers.schedule import WarmerSchedule

_WARMER_LOGGER = "warmstart.warmer"


@dataclass(frozen=True)
class EndpointRecord:
    """One warmer run's plan of the GPU endpoint and the capacity it published.

    ``t_s``: stack clock; ``planned``: copies the plan asked for; ``capacity`` and ``state``:
    what the warmer published (``warmers.actuators.EndpointCapacity``); ``reason``: the plan's.
    """

    t_s: float
    planned: int
    capacity: int
    state: str
    reason: str


class ServiceUnavailable(RuntimeError):
    """A replay component could not start; the message says which and why."""


@dataclass(frozen=True)
class PlanRecord:
    """One warmer run's plan for the replayed alias (for the report).

    ``t_s`` is the stack clock (emulated epoch seconds); ``demand`` the forecast concurrency at
    the planning quantile for the window ``lead_min`` minutes ahead (NaN without a forecast).
    """

    t_s: float
    provisioned_concurrency: int
    demand: float
    method: str
    action: str
    reason: str
    fallback: bool
    lead_min: int
    window_min: int


class ReplayWarmer(WarmerSchedule):
    """:class:`warmers.schedule.WarmerSchedule` that records each run's plans.

    Same constructor as the base class (built by :func:`infra.local.services.warmer_service`
    with ``schedule_type=ReplayWarmer``).

    Attributes
    ----------
    plans : list of PlanRecord
        Every plan of every run, in order.
    error_messages : list of str
        Why failed runs failed (the schedule keeps running, as EventBridge does).
    completed : threading.Semaphore
        Released after every run, failed or not.
    """

    def __init__(self, config: Any, clients: Any, *, clock_time: Callable[[], float],
                 period_s: float = 60.0, poll_s: float = 0.05) -> None:
        super().__init__(config, clients, clock_time=clock_time, period_s=period_s,
                         poll_s=poll_s)
        self._clock_time = clock_time
        self._forecast = config.forecast
        self._record_lock = threading.Lock()
        self.plans: list[PlanRecord] = []
        self.endpoint_records: list[EndpointRecord] = []
        self.error_messages: list[str] = []
        self.completed = threading.Semaphore(0)
        self._handler: logging.Handler | None = None
        self._propagate = True

    def run_now(self) -> list[Any]:
        now_s = self._clock_time()
        try:
            plans = super().run_now()
        except Exception as exc:
            with self._record_lock:
                self.error_messages.append(f"{type(exc).__name__}: {exc}")
            self.completed.release()
            raise
        forecast = self._forecast
        with self._record_lock:
            self.plans += [PlanRecord(now_s, p.provisioned_concurrency, float(p.demand), p.method,
                                      p.action, p.reason, p.fallback, forecast.lead_min,
                                      forecast.window_min) for p in plans]
            run = self._runtime.last_run
            for entry in (run.endpoints if run is not None else ()):
                state = self._runtime.endpoint_states.get(entry.key)
                self.endpoint_records.append(EndpointRecord(
                    now_s, entry.plan.capacity, state.capacity if state else 0,
                    state.state if state else "unknown", entry.plan.reason))
        self.completed.release()
        return plans

    def log_to(self, stream: IO[str]) -> None:
        """Send the warmer's JSON log lines to ``stream`` only (until :meth:`stop`)."""
        logger = logging.getLogger(_WARMER_LOGGER)
        self._handler = logging.StreamHandler(stream)
        self._propagate = logger.propagate
        logger.addHandler(self._handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False

    def stop(self) -> None:
        super().stop()
        if self._handler is not None:
            logger = logging.getLogger(_WARMER_LOGGER)
            logger.removeHandler(self._handler)
            logger.propagate = self._propagate
            self._handler = None


def seed_history(cloudwatch: Any, function_name: str, alias: str, *, end_s: float,
                 counts: np.ndarray, concurrency: np.ndarray, duration_ms: np.ndarray) -> int:
    """Write per-minute history ending at ``end_s`` as ``AWS/Lambda`` metrics.

    Minute ``k`` of ``h`` is stamped ``end_s - (h - k) * 60``. Minutes without invocations are
    left out, as Lambda sends no data point for them (the metrics source zero-fills counts).

    Parameters
    ----------
    cloudwatch : boto3 CloudWatch client (the moto server)
    function_name, alias : str
    end_s : float
        Epoch seconds (stack clock) of the end of the history, on a minute boundary.
    counts, concurrency, duration_ms : np.ndarray
        ``(h,)`` invocations, peak concurrency and mean duration (ms) per minute.

    Returns
    -------
    int
        Data points written.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
    """
    h = int(counts.shape[0])
    dim_sets = ([{"Name": "FunctionName", "Value": function_name}],
                [{"Name": "FunctionName", "Value": function_name},
                 {"Name": "Resource", "Value": f"{function_name}:{alias}"}])
    datums: list[dict[str, Any]] = []
    for k in range(h):
        n = float(counts[k])
        if n <= 0:
            continue
        stamp = dt.datetime.fromtimestamp(end_s - (h - k) * 60.0, tz=dt.UTC)
        values = [("Invocations", n, "Count", {"SampleCount": n, "Sum": n, "Minimum": 1.0,
                                               "Maximum": 1.0}),
                  ("ConcurrentExecutions", float(concurrency[k]), "Count",
                   {"SampleCount": 1.0, "Sum": float(concurrency[k]),
                    "Minimum": float(concurrency[k]), "Maximum": float(concurrency[k])})]
        if np.isfinite(duration_ms[k]):
            d = float(duration_ms[k])
            values.append(("Duration", d, "Milliseconds",
                           {"SampleCount": n, "Sum": d * n, "Minimum": d, "Maximum": d}))
        for dims in dim_sets:
            for name, _, unit, stats in values:
                datums.append({"MetricName": name, "Dimensions": dims, "Timestamp": stamp,
                               "StatisticValues": stats, "Unit": unit, "StorageResolution": 60})
    for start in range(0, len(datums), 20):
        cloudwatch.put_metric_data(Namespace="AWS/Lambda", MetricData=datums[start:start + 20])
    return len(datums)


def replay_warmer_document(*, function_name: str, alias: str, memory_mb: int, floor: int,
                           cap: int, budget_usd_per_hour: float,
                           degradation_parameter: str | None,
                           available_concurrency: int | None,
                           history_min: int, objective: str = "cost",
                           endpoints: Sequence[Mapping[str, Any]] = (),
                           strategy: str = "provisioned", sla_ms: float | None = None,
                           cold_start_ms: tuple[float, float] | None = None) -> dict[str, Any]:
    """The warmer's configuration document for the replayed alias (``strategy``
    ``provisioned`` or ``snapstart``, Lambda PC API, the planner's ``objective``), with the
    planned GPU endpoint's ``endpoints`` entries
    (:meth:`infra.local.endpoint_capacity.PlannedEndpoint.warmer_entry`), for
    :func:`infra.local.services.warmer_service`'s ``document``. With ``sla_ms`` and
    ``cold_start_ms`` (``(p50, p95)`` ms of the deployed strategy's cold start) the endpoint
    planner counts only the cold starts that would answer late, as the stack's warmer does
    (``warmers.plan.endpoint.cold_start_late_fraction``)."""
    alias_doc: dict[str, Any] = {
        "function_name": function_name, "alias": alias, "strategy": strategy,
        "memory_mb": memory_mb, "floor": floor, "cap": cap,
        "budget_usd_per_hour": budget_usd_per_hour,
        "degradation_parameter": degradation_parameter,
        "available_concurrency": available_concurrency, "objective": objective}
    if sla_ms is not None and cold_start_ms is not None:
        alias_doc |= {"sla_ms": sla_ms, "cold_start_p50_ms": cold_start_ms[0],
                      "cold_start_p95_ms": cold_start_ms[1]}
    doc: dict[str, Any] = {
        "aliases": [alias_doc],
        "actuator": "lambda",
        "history_days": max(history_min, 60) / 1440.0,
    }
    if endpoints:  # set through SageMaker's API (moto's Application Auto Scaling lacks it)
        doc["endpoints"] = [dict(e) for e in endpoints]
        doc["endpoint_actuator"] = "sagemaker"
    return doc
