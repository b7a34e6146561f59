"""Warm policies: the ``Policy`` port and the baselines the warmstart policy is compared with.

A policy sees one function's workload and its per-minute metric history (``Observed``) and
returns the ``Controls`` the engine simulates. Policies that react to load read only minutes
before the one they act in (they are causal), except ``FixedProvisioned`` whose fixed schedule
is sized from the first hour, by definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

import numpy as np

from warmers.simulator.calibration import Calibration
from warmers.simulator.constants import (
    DEFAULT_KEEP_ALIVE_S,
    PC_ALLOCATION_PER_MIN,
    PC_PREPARATION_S,
    PING_CONCURRENCY,
    PING_INTERVAL_S,
    TT_MIN_CAPACITY,
    TT_SCALE_IN_COOLDOWN_S,
    TT_SCALE_IN_FACTOR,
    TT_SCALE_IN_POINTS,
    TT_SCALE_OUT_COOLDOWN_S,
    TT_SCALE_OUT_POINTS,
    TT_TARGET,
)
from warmers.simulator.controls import Controls, HistogramWindows
from warmers.simulator.trace import MINUTE_MS, Workload, demand_concurrency, mean_concurrency


@dataclass(frozen=True, eq=False)
class Observed:
    """Per-minute metrics of one function, as CloudWatch would report them with warm requests.

    Attributes
    ----------
    invocations : np.ndarray
        ``(n_minutes,)`` invocations per minute.
    concurrency_max : np.ndarray
        ``(n_minutes,)`` peak requests in flight per minute (``ConcurrentExecutions`` Maximum).
    concurrency_mean : np.ndarray
        ``(n_minutes,)`` mean requests in flight per minute.
    duration_ms : np.ndarray
        ``(n_minutes,)`` mean duration per minute (NaN in minutes without invocations).
    """

    invocations: np.ndarray
    concurrency_max: np.ndarray
    concurrency_mean: np.ndarray
    duration_ms: np.ndarray

    @classmethod
    def from_workload(cls, w: Workload) -> Observed:
        minute = np.minimum((w.arrivals_ms // MINUTE_MS).astype(np.int64), w.n_minutes - 1)
        total = np.bincount(minute, weights=w.durations_ms, minlength=w.n_minutes)
        counts = np.bincount(minute, minlength=w.n_minutes)
        with np.errstate(invalid="ignore", divide="ignore"):
            dur = np.where(counts > 0, total / np.maximum(counts, 1), np.nan)
        return cls(
            invocations=counts.astype(float),
            concurrency_max=demand_concurrency(w).astype(float),
            concurrency_mean=mean_concurrency(w),
            duration_ms=dur,
        )


class ColdStartControls(TypedDict):
    """``Controls`` keywords of a cold start (``PolicyContext.cold_start``)."""

    cold_start_ms: float
    cold_start_sigma: float


@dataclass(frozen=True)
class PolicyContext:
    """What every policy may use: calibrated times and the modelled Lambda idle reclaim."""

    calibration: Calibration
    default_keep_alive_ms: float = DEFAULT_KEEP_ALIVE_S * 1000.0

    @property
    def init_ms(self) -> float:
        return self.calibration.init_ms.p50

    def cold_start(self, *, restore: bool = False) -> ColdStartControls:
        """``Controls`` keywords of a cold start: the calibrated init (or SnapStart restore),
        its median and its lognormal spread (``Controls.cold_start_sigma``)."""
        t = self.calibration.restore_ms if restore else self.calibration.init_ms
        return {"cold_start_ms": t.p50, "cold_start_sigma": t.log_sigma}

    def controls(self, *, restore: bool = False, **settings: Any) -> Controls:
        """The ``Controls`` every policy starts from: the modelled idle reclaim
        (``default_keep_alive_ms``) and the calibrated cold start (`cold_start`; a SnapStart
        restore with ``restore``), with a policy's own ``settings`` (``Controls`` fields:
        ``pc_effective``, ``ping_times_ms``...).

        Raises
        ------
        TypeError
            A setting that is not a ``Controls`` field.
        """
        return Controls(keep_alive_ms=self.default_keep_alive_ms,
                        **self.cold_start(restore=restore), restore=restore, **settings)


class Policy(Protocol):
    """A warm policy: per function, the controls the simulator runs."""

    @property
    def name(self) -> str:
        """Row label in the results table (unique in a run)."""
        ...

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        """Controls for one function (pure; reads only ``observed`` history it may know)."""
        ...


def pc_allocation_delay_min(requested: int) -> int:
    """Whole minutes until a provisioned-concurrency change to ``requested`` is usable.

    References
    ----------
    "after a minute or two of preparation", then up to 6,000 environments a minute:
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
    """
    if requested < 0:
        raise ValueError(f"requested provisioned concurrency must be >= 0, got {requested}")
    return math.ceil(PC_PREPARATION_S / 60.0 + requested / PC_ALLOCATION_PER_MIN)


def apply_allocation_delay(configured: np.ndarray) -> np.ndarray:
    """Usable provisioned concurrency per minute for a configured series.

    An increase requested in minute ``m`` is usable from ``m + delay`` (the previous value
    stays usable meanwhile); a decrease applies at once.

    Parameters
    ----------
    configured : np.ndarray
        ``(n_minutes,)`` integer provisioned concurrency set in each minute.

    Returns
    -------
    np.ndarray
        ``(n_minutes,)`` int64 usable environments.
    """
    conf = np.asarray(configured, dtype=np.int64)
    n = conf.shape[0]
    eff = np.zeros(n, dtype=np.int64)
    usable = 0
    pending: list[tuple[int, int]] = []  # (ready minute, value)
    prev = 0
    for m in range(n):
        c = int(conf[m])
        if c != prev:
            if c < prev:
                usable = min(usable, c)
                pending = [(r, min(v, c)) for r, v in pending]
            else:
                pending.append((m + pc_allocation_delay_min(c), c))
            prev = c
        while pending and pending[0][0] <= m:
            _, v = pending.pop(0)
            usable = v
        usable = min(usable, c)
        eff[m] = usable
    return eff


@dataclass(frozen=True)
class KeepAlive:
    """On-demand only; Lambda's idle reclaim modelled as a fixed keep-alive."""

    minutes: float
    name: str = ""

    def __post_init__(self) -> None:
        if self.minutes < 0:
            raise ValueError(f"keep-alive must be >= 0 minutes, got {self.minutes}")
        if not self.name:
            object.__setattr__(self, "name", f"on-demand, keep-alive {self.minutes:g} min")

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        return Controls(keep_alive_ms=self.minutes * MINUTE_MS, **ctx.cold_start())


@dataclass(frozen=True)
class WarmPings:
    """Warm pings on a fixed schedule (Serverless warmup plugin: every 5 min, concurrency 1)."""

    interval_s: float = PING_INTERVAL_S
    concurrency: int = PING_CONCURRENCY
    name: str = "warm pings 5 min x1"

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        pings = np.arange(0.0, workload.horizon_ms, self.interval_s * 1000.0)
        return ctx.controls(
            ping_times_ms=pings,
            ping_concurrency=self.concurrency,
        )


def target_tracking_schedule(
    utilization_source: np.ndarray,
    *,
    target: float = TT_TARGET,
    min_capacity: int = TT_MIN_CAPACITY,
    max_capacity: int = 1000,
    scale_out_points: int = TT_SCALE_OUT_POINTS,
    scale_in_points: int = TT_SCALE_IN_POINTS,
    scale_in_factor: float = TT_SCALE_IN_FACTOR,
    scale_out_cooldown_min: int = TT_SCALE_OUT_COOLDOWN_S // 60,
    scale_in_cooldown_min: int = TT_SCALE_IN_COOLDOWN_S // 60,
) -> tuple[np.ndarray, np.ndarray]:
    """Reactive Application Auto Scaling target tracking on provisioned-concurrency utilization.

    Each minute's metric is ``min(concurrency, usable PC) / usable PC`` (it cannot exceed 1:
    spillover is not counted). After ``scale_out_points`` consecutive minutes above the target
    the capacity becomes ``ceil(capacity * metric / target)``; after ``scale_in_points``
    consecutive minutes below ``scale_in_factor * target`` it shrinks the same way (not below
    ``min_capacity``). A change is requested in the minute after the last data point and is
    usable after ``pc_allocation_delay_min``.

    Parameters
    ----------
    utilization_source : np.ndarray
        ``(n_minutes,)`` concurrency the metric is computed from (mean per minute, the
        predefined metric's Average statistic).

    Returns
    -------
    (configured, usable) : tuple[np.ndarray, np.ndarray]
        ``(n_minutes,)`` int64 each.

    References
    ----------
    https://docs.aws.amazon.com/autoscaling/application/userguide/target-tracking-scaling-policy-overview.html ;
    https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html
    """
    conc = np.asarray(utilization_source, dtype=float)
    n = conc.shape[0]
    configured = np.zeros(n, dtype=np.int64)
    cap = min_capacity
    above = below = 0
    last_out = last_in = -10**9
    usable = cap  # configured before the trace starts
    pending: list[tuple[int, int]] = []
    usable_out = np.zeros(n, dtype=np.int64)
    for m in range(n):
        configured[m] = cap
        while pending and pending[0][0] <= m:
            usable = pending.pop(0)[1]
        usable = min(usable, cap)
        usable_out[m] = usable
        metric = min(conc[m], usable) / usable if usable > 0 else 0.0
        above = above + 1 if metric > target else 0
        below = below + 1 if metric < scale_in_factor * target else 0
        new = cap
        if above >= scale_out_points and m - last_out >= scale_out_cooldown_min:
            new = min(max_capacity, max(cap + 1, math.ceil(cap * metric / target)))
            last_out = m
            above = 0
        elif below >= scale_in_points and m - last_in >= scale_in_cooldown_min:
            new = max(min_capacity, math.ceil(cap * metric / target))
            last_in = m
            below = 0
        if new != cap:
            if new > cap:
                pending.append((m + 1 + pc_allocation_delay_min(new), new))
            else:
                pending = [(r, min(v, new)) for r, v in pending]
            cap = new
    return configured, usable_out


@dataclass(frozen=True)
class TargetTracking:
    """Application Auto Scaling target tracking at 0.7 on provisioned-concurrency utilization."""

    target: float = TT_TARGET
    name: str = "target tracking 0.7"

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        configured, usable = target_tracking_schedule(
            observed.concurrency_mean, target=self.target
        )
        # the change requested in minute m applies from m + 1 + delay: shift the billed series
        # by nothing (billing starts with the request) and the usable one is already delayed
        return ctx.controls(
            pc_effective=usable,
            pc_configured=configured,
        )


@dataclass(frozen=True)
class FixedProvisioned:
    """A fixed provisioned-concurrency value, the p90 of the first hour's peak concurrency."""

    quantile: float = 0.90
    first_minutes: int = 60
    name: str = "fixed PC (p90 of hour 1)"

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        head = observed.concurrency_max[: self.first_minutes]
        value = math.ceil(float(np.quantile(head, self.quantile))) if head.size else 0
        n = workload.n_minutes
        pc = np.full(n, value, dtype=np.int64)
        if value == 0:
            return ctx.controls()
        return ctx.controls(
            pc_effective=pc,
            pc_configured=pc,
        )


@dataclass(frozen=True)
class HybridHistogram:
    """Shahrad et al.'s hybrid histogram policy (4 h range, 5th / 99th percentiles), per
    function (the paper's unit is the application: 287 applications hold the trace's 298
    functions); settings and branches in ``engine.HistogramWindows``."""

    windows: HistogramWindows = field(default_factory=HistogramWindows)
    name: str = "hybrid histogram"

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        return ctx.controls(
            histogram=self.windows,
        )


@dataclass(frozen=True)
class SnapStart:
    """SnapStart: every cold start is a restore of the published version's snapshot."""

    name: str = "SnapStart"

    def controls(self, workload: Workload, observed: Observed, ctx: PolicyContext) -> Controls:
        return ctx.controls(restore=True)


def baseline_policies() -> list[Policy]:
    """The baselines of issue 6, in table order."""
    return [
        KeepAlive(5),
        KeepAlive(10),
        KeepAlive(15),
        WarmPings(),
        TargetTracking(),
        FixedProvisioned(),
        HybridHistogram(),
        HybridHistogram(windows=HistogramWindows.issue_model(),
                        name="hybrid histogram (issue 11 reading)"),
        SnapStart(),
    ]
