"""The replay's extra parts of the local stack: GPU endpoint, warmer schedule, metric history.

Adapters over other packages' public entry points (nothing here re-implements them):

- :class:`GpuEndpointProcess` runs ``python -m functions.gpu_endpoint`` (the overflow model
  server) on an ephemeral port and reads its URL from the first stdout line.
- :class:`WarmerSchedule` calls :func:`warmers.runner.run_once` at every minute of the stack's
  clock, as EventBridge Scheduler ``rate(1 minute)`` does, with boto3 clients pointed at the moto
  server (CloudWatch, SSM, Application Auto Scaling) and at the emulator's Lambda API.
- :func:`seed_history` writes the trace minutes before the slice to CloudWatch (moto) as
  ``AWS/Lambda`` metrics, so the forecaster starts with the history production would have.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from infra.local.clock import Clock

URL_PREFIX = "WARMSTART_GPU_ENDPOINT_URL="
REPO_ROOT = Path(__file__).resolve().parents[2]


class ServiceUnavailable(RuntimeError):
    """A replay component could not start; the message says which and why."""


class GpuEndpointProcess:
    """The local GPU (overflow) endpoint server in its own process.

    Parameters
    ----------
    endpoint_name : str
        The SageMaker endpoint name it answers on ``/endpoints/{name}/invocations``.
    env : Mapping[str, str]
        Extra environment (e.g. ``WARMSTART_MODEL_DIR``).
    log_stream : file, optional
        Where its stderr goes.
    start_timeout_s : float
        Real seconds to wait for the URL line (model load included).
    """

    name = "gpu-endpoint"

    def __init__(self, endpoint_name: str = "warmstart-local-gpu", *,
                 env: Mapping[str, str] | None = None, log_stream: IO[str] | None = None,
                 start_timeout_s: float = 60.0, python: str = sys.executable) -> None:
        self.endpoint_name = endpoint_name
        self._env = dict(env or {})
        self._log = log_stream
        self._timeout_s = start_timeout_s
        self._python = python
        self._proc: subprocess.Popen[str] | None = None
        self._url: str | None = None

    @property
    def endpoint(self) -> str:
        if self._url is None:
            raise RuntimeError("the GPU endpoint is not started")
        return self._url

    def start(self) -> None:
        env = dict(os.environ)
        env.update(self._env)
        env.setdefault("ORT_DISABLE_TELEMETRY", "1")
        self._proc = subprocess.Popen(
            [self._python, "-m", "functions.gpu_endpoint", "--host", "127.0.0.1", "--port", "0",
             "--endpoint-name", self.endpoint_name],
            cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self._log or subprocess.DEVNULL, text=True, start_new_session=True)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self._proc.stdout.readline()  # type: ignore[union-attr]
                                                             if self._proc else ""), daemon=True)
        reader.start()
        reader.join(self._timeout_s)
        text = line[0].strip() if line else ""
        if not text.startswith(URL_PREFIX):
            code = self._proc.poll()
            self.stop()
            raise ServiceUnavailable(
                "the GPU endpoint (python -m functions.gpu_endpoint) did not start"
                + (f": exited with status {code}" if code is not None else
                   f" within {self._timeout_s:.0f} s") + (f" ({text})" if text else ""))
        self._url = text[len(URL_PREFIX):]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout:
            proc.stdout.close()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid


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


class WarmerSchedule:
    """Runs the warmer every minute of the stack's clock, in a thread.

    Parameters
    ----------
    clock : Clock
        The stack's (scaled) clock.
    config : warmers.config.WarmerConfig
    clients : warmers.runner.WarmerClients
    function_name, alias : str
        The alias whose plans are recorded for the report.
    log_stream : file, optional
        Where the warmer's JSON log lines go (default: discarded).
    account : object, optional
        Answers ``get_account_settings()`` (:class:`LocalAccountSettings`); without it the
        planner does not raise provisioned concurrency (headroom unknown).
    """

    name = "warmer"

    def __init__(self, clock: Clock, config: Any, clients: Any, function_name: str,
                 alias: str = "live", log_stream: IO[str] | None = None,
                 account: Any = None) -> None:
        self._clock = clock
        self._config = config
        self._runtime = local_runtime(clients, account)
        self._key = f"{function_name}:{alias}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.plans: list[PlanRecord] = []
        self.errors: list[str] = []
        self.runs = threading.Semaphore(0)
        self._handler: logging.Handler | None = None
        logger = logging.getLogger("warmstart.warmer")
        if log_stream is not None:
            self._handler = logging.StreamHandler(log_stream)
            logger.addHandler(self._handler)
            logger.setLevel(logging.INFO)
        logger.propagate = False

    @property
    def endpoint(self) -> str:
        return "schedule: every minute of the stack clock"

    def run_now(self) -> None:
        """One warmer run at the clock's current time (errors are kept, not raised)."""
        from warmers.runner import run_once

        now_s = self._clock.time()
        try:
            plans = run_once(now_s, None, self._config, runtime=self._runtime)
        except Exception as exc:  # noqa: BLE001 - the schedule keeps running, as EventBridge does
            with self._lock:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.runs.release()
            return
        for plan in plans:
            if plan.key == self._key:
                with self._lock:
                    self.plans.append(PlanRecord(
                        now_s, plan.provisioned_concurrency, float(plan.demand), plan.method,
                        plan.action, plan.reason, plan.fallback, self._config.forecast.lead_min,
                        self._config.forecast.window_min))
        self.runs.release()

    def _loop(self) -> None:
        while True:
            now = self._clock.time()
            wait_s = 60.0 - (now % 60.0) + 0.5  # just after the minute boundary
            if self._clock.wait(self._stop, wait_s):
                return
            self.run_now()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="warmer-schedule", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._handler is not None:
            logging.getLogger("warmstart.warmer").removeHandler(self._handler)
            self._handler = None


class LocalAccountSettings:
    """``GetAccountSettings`` answered from the emulator (its Lambda API does not serve it yet).

    ``UnreservedConcurrentExecutions`` = account limit - reserved concurrency - provisioned
    concurrency requested, as Lambda accounts for it.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/api/API_GetAccountSettings.html
    """

    def __init__(self, emulator: Any) -> None:
        self._emulator = emulator

    def get_account_settings(self) -> dict[str, Any]:
        limit = int(self._emulator.config.account_concurrency_limit)
        taken = 0
        for spec in self._emulator.functions():
            reserved = self._emulator.get_function_concurrency(spec.name)
            pc = sum(int(c.get("RequestedProvisionedConcurrentExecutions", 0))
                     for c in self._emulator.list_provisioned_concurrency(spec.name))
            taken += max(reserved or 0, pc)
        return {"AccountLimit": {"ConcurrentExecutions": limit,
                                 "UnreservedConcurrentExecutions": limit - taken}}


def local_runtime(clients: Any, account: Any = None) -> Any:
    """A :class:`warmers.runner.WarmerRuntime` for the local stack.

    Like ``WarmerRuntime.build`` with the Lambda actuator (PC set directly on the alias through
    the emulator's Lambda API), except that ``GetAccountSettings`` comes from ``account`` (e.g.
    :class:`LocalAccountSettings`): the emulator's Lambda API does not answer it yet, and without
    it the planner never raises provisioned concurrency (headroom unknown).
    """
    from warmers.actuators import LambdaPCActuator, WarmPingActuator
    from warmers.cloudwatch import CloudWatchMetricsSource
    from warmers.degradation import SsmLevelPublisher
    from warmers.runner import WarmerRuntime
    from warmers.state import MemoryPlanStore

    return WarmerRuntime(metrics=CloudWatchMetricsSource(clients.cloudwatch),
                         pc_actuator=LambdaPCActuator(clients.lambda_),
                         ping_actuator=WarmPingActuator(clients.lambda_), store=MemoryPlanStore(),
                         publisher=SsmLevelPublisher(clients.ssm), lambda_client=account)


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


def warmer_config(*, function_name: str, alias: str, memory_mb: int, floor: int, cap: int,
                  budget_usd_per_hour: float, degradation_parameter: str | None,
                  available_concurrency: int | None, history_min: int, region: str) -> Any:
    """The warmer's config for the replayed alias (strategy ``provisioned``, Lambda PC API).

    Raises
    ------
    warmers.config.ConfigError
    """
    from warmers.config import WarmerConfig

    data = {
        "aliases": [{"function_name": function_name, "alias": alias, "strategy": "provisioned",
                     "memory_mb": memory_mb, "floor": floor, "cap": cap,
                     "budget_usd_per_hour": budget_usd_per_hour,
                     "degradation_parameter": degradation_parameter,
                     "available_concurrency": available_concurrency}],
        "actuator": "lambda",
        "history_days": max(history_min, 60) / 1440.0,
    }
    return WarmerConfig.from_dict(json.loads(json.dumps(data)), state_prefix="", region=region)
