"""Which cold-start strategy an alias needs: SnapStart only where an on-demand cold start can
break the SLA.

SnapStart turns a cold start into a restore of a snapshot taken after the init phase, but for
Python it bills the snapshot's cache for every second the published version is active, whether
requests come or not, plus each restore (Lambda pricing: "SnapStart ... cache ... per GB-second,
restore ... per GB"; https://aws.amazon.com/lambda/pricing/), and it cannot be combined with
provisioned concurrency (https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html,
"Supported features and limitations"). An alias whose warm answers leave room in the SLA for a
full on-demand init gains nothing from that cache: a cold start there is slow but on time.

:func:`recommend_strategy` compares the share of cold starts that would answer a request late
(its warm duration within the SLA, its answer after it) on demand and under SnapStart, from the
alias's duration quantiles and the calibrated init and restore times (``warmstart
calibrate``), and picks on-demand (strategy ``provisioned``: the warmer buys provisioned
concurrency where it pays) when that share is at most ``max_late_fraction``, else
``snapstart``. Pure: numpy and the standard library only (it runs in the warmer and in
``warmstart plan``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

#: Default most cold starts in which one may answer late on demand (one in a thousand): a
#: tolerance of ours, not from a source; ``recommend_strategy(max_late_fraction=...)`` sets it.
DEFAULT_MAX_LATE_FRACTION = 1e-3

#: Share of its concurrency limit from which an alias's peak counts as *at the limit*: there
#: every on-demand cold start holds one of the last slots for its whole init (Lambda counts an
#: initializing invocation as in flight), so the next requests are throttled; a SnapStart
#: restore holds it for the restore only. A tolerance of ours, not from a source (issue 19:
#: on a full-day series that reached the 1,000 account limit, on-demand inits cost 12 more
#: throttles than SnapStart's restores).
NEAR_LIMIT_FRACTION = 0.9

#: Points of the duration's quantile function the late share is integrated over.
GRID_POINTS = 4001

#: z of the 95th percentile of the standard normal (the lognormal through p50 and p95).
Z_95 = 1.6448536269514722

Advised = Literal["provisioned", "snapstart"]


def lognormal_sigma(p50_ms: float, p95_ms: float) -> float:
    """Shape of the lognormal through a median and a 95th percentile: ``ln(p95 / p50) / z_0.95``
    (``z_0.95`` = 1.6449, the standard normal's 95th percentile); 0 when they are equal or the
    median is 0. Both in the same unit (ms)."""
    if p50_ms <= 0 or p95_ms <= p50_ms:
        return 0.0
    return math.log(p95_ms / p50_ms) / Z_95


@dataclass(frozen=True)
class ColdStartTime:
    """A cold start's added latency, ms: a lognormal through its median and 95th percentile
    (the calibration's ``Timing``)."""

    p50_ms: float
    p95_ms: float

    def __post_init__(self) -> None:
        for name in ("p50_ms", "p95_ms"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number of ms >= 0, got {v!r}")
        if self.p95_ms < self.p50_ms:
            raise ValueError(f"p95_ms ({self.p95_ms}) must be >= p50_ms ({self.p50_ms})")

    @property
    def log_sigma(self) -> float:
        """:func:`lognormal_sigma` of this time."""
        return lognormal_sigma(self.p50_ms, self.p95_ms)

    def exceeds(self, slack_ms: np.ndarray) -> np.ndarray:
        """``P(cold start > slack)`` for each slack, ms (1 where the slack is <= 0)."""
        slack = np.asarray(slack_ms, dtype=float)
        out = np.ones_like(slack)
        pos = slack > 0
        sigma = self.log_sigma
        if self.p50_ms <= 0:
            out[pos] = 0.0
        elif sigma == 0.0:
            out[pos] = (slack[pos] < self.p50_ms).astype(float)
        else:
            z = (np.log(slack[pos]) - math.log(self.p50_ms)) / sigma
            erfc = np.frompyfunc(math.erfc, 1, 1)
            out[pos] = 0.5 * erfc(z / math.sqrt(2.0)).astype(float)
        return out


@dataclass(frozen=True)
class StrategyAdvice:
    """The recommended strategy and why.

    Attributes
    ----------
    strategy : {"provisioned", "snapstart"}
        ``provisioned``: on demand, the warmer buying provisioned concurrency where it pays;
        ``snapstart``: every cold start a restore, no provisioned concurrency.
    late_fraction_on_demand, late_fraction_snapstart : float
        Share of cold starts, in [0, 1], whose request would be answered after the SLA
        although its warm duration met it, with an on-demand init or a SnapStart restore.
    reason : str
        One sentence with the numbers.
    """

    strategy: Advised
    late_fraction_on_demand: float
    late_fraction_snapstart: float
    reason: str


def late_fraction(sla_ms: float, cold: ColdStartTime, duration_levels: np.ndarray,
                  duration_ms: np.ndarray) -> float:
    """Share of cold starts that answer late: ``P(cold + d > sla and d <= sla)``.

    ``d`` is the request's warm duration, read off the quantile function through
    ``(duration_levels, duration_ms)`` (linear between the given points, as the Azure trace's
    percentiles are read), on a grid of :data:`GRID_POINTS` levels; ``cold`` is independent of
    ``d``.

    Parameters
    ----------
    sla_ms : float
        The alias's SLA, ms (> 0).
    cold : ColdStartTime
    duration_levels : np.ndarray
        ``(k,)`` increasing levels in [0, 1], from 0 to 1 (k >= 2).
    duration_ms : np.ndarray
        ``(k,)`` non-decreasing durations at those levels, ms.

    Returns
    -------
    float
        In [0, 1].

    Raises
    ------
    ValueError
        A non-positive SLA, levels not spanning [0, 1] increasingly, durations not
        non-decreasing, shapes that differ, or NaN.
    """
    if not math.isfinite(sla_ms) or sla_ms <= 0:
        raise ValueError(f"sla_ms must be a finite number > 0, got {sla_ms!r}")
    levels = np.asarray(duration_levels, dtype=float)
    values = np.asarray(duration_ms, dtype=float)
    if levels.ndim != 1 or levels.shape != values.shape or levels.shape[0] < 2:
        raise ValueError("duration_levels and duration_ms need the same shape (k,), k >= 2")
    if np.isnan(levels).any() or np.isnan(values).any():
        raise ValueError("duration quantiles contain NaN")
    if levels[0] != 0.0 or levels[-1] != 1.0 or np.any(np.diff(levels) <= 0):
        raise ValueError("duration_levels must increase from 0 to 1")
    if np.any(np.diff(values) < 0) or values[0] < 0:
        raise ValueError("duration_ms must be non-decreasing and >= 0")
    grid = (np.arange(GRID_POINTS) + 0.5) / GRID_POINTS
    d = np.interp(grid, levels, values)
    on_time_warm = d <= sla_ms
    p = cold.exceeds(sla_ms - d) * on_time_warm
    return float(p.mean())


def recommend_strategy(sla_ms: float, init: ColdStartTime, restore: ColdStartTime,
                       duration_levels: np.ndarray, duration_ms: np.ndarray, *,
                       max_late_fraction: float = DEFAULT_MAX_LATE_FRACTION,
                       snapstart_supported: bool = True,
                       peak_concurrency: float | None = None,
                       concurrency_limit: int | None = None) -> StrategyAdvice:
    """On demand where its cold starts meet the SLA, SnapStart where they do not.

    Parameters
    ----------
    sla_ms : float
        The alias's SLA, ms.
    init, restore : ColdStartTime
        The calibrated on-demand init (until the agent can answer) and SnapStart restore.
    duration_levels, duration_ms : np.ndarray
        The alias's warm duration quantile function (:func:`late_fraction`).
    max_late_fraction : float
        In [0, 1): the most late cold starts on demand tolerated (default 1e-3).
    snapstart_supported : bool
        False where SnapStart is unavailable (runtime older than python3.12, EFS, ephemeral
        storage over 512 MB): the advice stays on demand and says what it costs.
    peak_concurrency, concurrency_limit : float, int or None
        The alias's peak in flight and the concurrency Lambda allows it (reserved concurrency
        or the account's pool): at :data:`NEAR_LIMIT_FRACTION` of the limit or more, SnapStart
        also where its cold starts are on time (its restores hold a slot shorter than an init,
        so fewer requests are throttled). None: not considered.

    Returns
    -------
    StrategyAdvice

    Raises
    ------
    ValueError
        ``max_late_fraction`` out of range, or bad quantiles (:func:`late_fraction`).
    """
    if not 0.0 <= max_late_fraction < 1.0:
        raise ValueError(f"max_late_fraction must be in [0, 1), got {max_late_fraction!r}")
    on_demand = late_fraction(sla_ms, init, duration_levels, duration_ms)
    snap = late_fraction(sla_ms, restore, duration_levels, duration_ms)
    shares = (f"an on-demand cold start ({init.p50_ms:.0f} ms p50, {init.p95_ms:.0f} ms p95) "
              f"answers {on_demand:.2%} of its requests after the {sla_ms:.0f} ms SLA, a "
              f"SnapStart restore ({restore.p50_ms:.0f} ms p50) {snap:.2%}")
    near = (peak_concurrency is not None and concurrency_limit is not None
            and concurrency_limit > 0
            and peak_concurrency >= NEAR_LIMIT_FRACTION * concurrency_limit)
    if on_demand <= max_late_fraction and near and snapstart_supported:
        return StrategyAdvice("snapstart", on_demand, snap,
                              f"SnapStart: {shares}, but its peak of {peak_concurrency:.0f} in "
                              f"flight reaches {NEAR_LIMIT_FRACTION:.0%} of its concurrency "
                              f"limit {concurrency_limit}: an on-demand init holds a slot "
                              f"{init.p50_ms:.0f} ms, a restore {restore.p50_ms:.0f} ms, so "
                              "fewer requests are throttled")
    if on_demand <= max_late_fraction:
        return StrategyAdvice("provisioned", on_demand, snap,
                              f"on demand: {shares}; at most {max_late_fraction:.2%} tolerated, "
                              "so SnapStart's snapshot cache would buy nothing")
    if not snapstart_supported:
        return StrategyAdvice("provisioned", on_demand, snap,
                              f"on demand although {shares}: SnapStart is not available here")
    return StrategyAdvice("snapstart", on_demand, snap,
                          f"SnapStart: {shares} (more than {max_late_fraction:.2%} tolerated)")
