"""Quantile forecasts of per-minute load (concurrency; invocation rate on request), lead time.

Pure: numpy only, no I/O, no clock. The warmer and the policy simulator both call
:func:`forecast_series` / :func:`forecast_alias`.

What is forecast
----------------
At origin ``t`` (index of the last observed period) the *target* is the peak of the series over
the window of ``window_min`` minutes that starts ``lead_min`` minutes ahead::

    target[t] = max(y[t + lead : t + lead + window])

because provisioned concurrency requested now is usable only after a minute or two of
preparation plus allocation (https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html),
and it must then cover the peak of the minutes it is meant for.

Resolution
----------
One value per minute by default (CloudWatch keeps 1-minute data 15 days,
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html#Metric).
Older history exists only as 5-minute (63 days) or 1-hour (455 days) aggregates: with
``ForecastConfig(period_min=5)`` (or 60) every duration of the config is converted to periods
(lead and window rounded up, seasons exact) and the series is read as one Maximum per period
(:func:`warmers.series.aggregate_max` makes one from 1-minute data).

How
---
Each point method below gives ``point[t]``; the quantiles are split-conformal:
``point[t] + s[t] * e_(k)`` where ``e`` are the most recent ``calibration_min`` normalised
residuals ``(target[s] - point[s]) / s[s]`` already observed at ``t``, ``e_(k)`` their
``k = ceil((m + 1) q)``-th smallest (Lei et al. 2018), and the scale ``s`` is 1 (``additive``) or
``sqrt(point + 1)`` (``sqrt``: a count's spread grows like the square root of its level, so a
quiet weekend is not given the weekday's margin). Clipped at zero. The idle-time histogram
method is distributional and needs no residuals.

* ``naive``            peak of the last ``window_min`` minutes (persistence).
* ``seasonal_naive``   the target one day ago (``season_min``); with less than a day plus
  calibration of history, one hour ago (``short_season_min``), and the result says so.
* ``seasonal_naive_weekly`` the target one week ago (``week_min``); absent, and said so, while
  the history is shorter than a week plus calibration.
* ``seasonal_median``  median of the targets 1..``seasons_in_median`` days ago.
* ``ses``              simple exponential smoothing of the last-window peak; alpha fitted.
* ``holt_winters``     additive season without trend, ETS(A,N,A): a level smoothed like ``ses``
  on the de-seasonalised series plus a seasonal profile averaged across past seasons with
  weights ``gamma (1 - gamma)^(k-1)``; the season is a week when the history holds one (plus
  calibration), else a day, else the method is absent. alpha and gamma fitted.
* ``peak_hold``        peak of the last ``w`` minutes, ``w`` fitted from ``peak_window_grid``.
* ``idle_histogram``   Shahrad et al.'s idle-time (inter-arrival) histogram for sparse functions:
  the probability that the next arrival falls in the target window given the time since the
  last one, mixed with the empirical distribution of non-zero targets.
* ``ensemble``         the pooled combination: the equal-weight mean of the conformal
  quantiles (quantile averaging) of the single methods whose back-test loss is within
  ``selection_margin`` of the best one, each with its fitted parameters (forecast pooling,
  Kourentzes et al. 2019); its detail names the members.

Fitting and selection (back-test on the function's own history)
---------------------------------------------------------------
The back-test rolls over the last ``selection_min`` origins as the warmer would: the conformal
offsets are recomputed every ``recalibrate_every_min`` minutes from the residuals observed
before that block, and each origin's forecast is scored by the pinball loss at the planning
quantile against the target that followed. Every parameter value on a method's grid (and both
residual scalings) is back-tested; the method keeps its best (its fitted parameters, named in
``Candidate.detail``).

The selector (:func:`choose`) keeps the combination, ``ensemble``, unless a single method's
back-test loss beats it by more than the stated margin (``SELECTION_MARGIN`` = 5 %,
``ForecastConfig.selection_margin``); then it takes the method with the lowest back-test loss.
Combination as the default follows the M4 competition (Makridakis et al. 2020: combinations
beat the selection of one method, whose ranking on a short history is noisy); the members are
pooled on the function's own back-test, so a method far behind the best (a 1-hour seasonal
naive on a one-day history) does not dilute it.

Stated margin, on the back-test window (the function's own history as seen at the origin):
the selector's loss there is at most ``(1 + SELECTION_MARGIN)`` x its best single candidate's.
The pinball loss is convex in the forecast, so the loss of the members' mean is at most the mean
of their losses (Jensen), each within the margin; :func:`choose` checks it as well (tested).
Out of sample there is no such guarantee; ``bench/bench_forecast.py`` measures it (figures in
``bench/results/forecast.md``). The 5 % and the pooling were chosen on the training half of the
real 14-day series and the 10 busy one-day series, before the test half was run: there the
selector's summed loss was 0.975x (one-day series: 0.992x) that of the former selector (single
methods ranked by a recency-weighted back-test loss); with a 0 % margin (the best single method
on the back-test) 1.038x (0.979x), 10 % 0.966x (0.999x), 20 % 0.980x (0.999x); 5 %, the former
stated margin, was kept. On the test half (days 8-14) it was then 0.873x the 7-day seasonal
naive's summed loss (geometric mean over days 0.885x, coverage 0.955 at q=0.95), 0.956x its best
single candidate's (ses) and 0.916x the former selector's; on the one-day series 0.974x (ses).

References
----------
- Koenker, R. and Bassett, G. (1978). Regression quantiles. Econometrica 46(1) (pinball loss).
- Kourentzes, N., Barrow, D. and Petropoulos, F. (2019). Another look at forecast selection and
  combination: evidence from forecast pooling. International Journal of Production Economics
  209 (forecast pooling).
- Lichtendahl, K. C., Grushka-Cockayne, Y. and Winkler, R. L. (2013). Is it better to average
  probabilities or quantiles? Management Science 59(7) (quantile averaging).
- Makridakis, S., Spiliotis, E. and Assimakopoulos, V. (2020). The M4 Competition: 100,000 time
  series and 61 forecasting methods. International Journal of Forecasting 36(1).
- Lei, J. et al. (2018). Distribution-free predictive inference for regression. JASA 113(523)
  (split conformal quantiles; normalised residuals, section 5.2).
- Hyndman, R. J. and Athanasopoulos, G. Forecasting: Principles and Practice, 3rd ed., ch. 5.2
  (naive, seasonal naive), 5.10 (time-series cross-validation) and 8 (exponential smoothing,
  ETS(A,N,A)). https://otexts.com/fpp3/
- Shahrad, M. et al. (2020). Serverless in the Wild: Characterizing and Optimizing the Serverless
  Workload at a Large Cloud Provider. USENIX ATC 2020 (idle-time histogram policy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Literal

import numpy as np

from warmers.series import MetricSeries

Method = Literal[
    "naive", "seasonal_naive", "seasonal_naive_weekly", "seasonal_median", "ses", "holt_winters",
    "peak_hold", "idle_histogram", "ensemble",
]

ALL_METHODS: tuple[Method, ...] = (
    "naive",
    "seasonal_naive",
    "seasonal_naive_weekly",
    "seasonal_median",
    "ses",
    "holt_winters",
    "peak_hold",
    "idle_histogram",
    "ensemble",
)
#: Methods the ``ensemble`` may pool (every single method; module docstring).
ENSEMBLE_MEMBERS: tuple[Method, ...] = tuple(m for m in ALL_METHODS if m != "ensemble")
#: Methods used only as yardsticks in reports; they stay in the selector's pool too.
BASELINES: tuple[Method, ...] = ("naive", "seasonal_naive", "seasonal_naive_weekly")
#: Residual scalings of the conformal quantiles (module docstring).
SCALINGS: tuple[str, ...] = ("additive", "sqrt")
#: The selector's stated margin (default ``ForecastConfig.selection_margin``): the ``ensemble``
#: pools the candidates within it of the best back-test loss, and the selector's back-test loss
#: is never above ``(1 + margin)`` x its best single candidate's (module docstring; tested).
SELECTION_MARGIN = 0.05


class ForecastError(ValueError):
    """The input series or configuration cannot be forecast (the message says why)."""


@dataclass(frozen=True)
class ForecastConfig:
    """Knobs of the forecaster. Durations are in minutes; the series holds one value per
    ``period_min`` minutes.

    Parameters
    ----------
    lead_min : int
        Minutes between the origin and the start of the target window (default 15: provisioned
        concurrency needs minutes to allocate).
    window_min : int
        Length of the target window; the target is its peak.
    quantiles : tuple of float
        Quantile levels returned, each in (0, 1).
    planning_quantile : float
        The level the planner uses and the selector optimises; must be in ``quantiles``.
    season_min, short_season_min, week_min : int
        Daily season, the fallback season when there is less than a day of history, and the
        weekly season (used when the history holds a week plus calibration).
    calibration_min : int
        Length of the most recent residuals used for the conformal quantiles.
    selection_min : int
        Number of most recent origins used to back-test, fit and pick the method (shortened for
        short histories so that ``min_calibration`` residuals come before it).
    recalibrate_every_min : int
        The back-test recomputes the conformal offsets every this many minutes.
    selection_half_life_min : int
        The back-test loss weighs an origin ``2^(-age / half_life)`` (age in minutes before the
        last back-test origin). A week by default, nearly flat over the one-day window: shorter
        half-lives (2-8 h) chased noise on the training half of the 14-day series.
    min_selection_min : int
        Candidates are compared over the same back-test origins: those a candidate without a
        forecast at the start of the window cannot cover are dropped from the comparison, as
        long as this many remain; a candidate covering fewer is not compared.
    min_calibration : int
        Fewer usable residuals than this and a method is not used (in periods).
    ses_alpha, hw_gamma : float
        Smoothing constants used when the history is too short to back-test (then nothing is
        fitted), in (0, 1].
    ses_alpha_grid, hw_gamma_grid : tuple of float
        Values tried when fitting ``ses`` / ``holt_winters`` (each in (0, 1]).
    peak_window_min : int
        Window of ``peak_hold`` when nothing is fitted.
    peak_window_grid : tuple of int
        Windows tried when fitting ``peak_hold``; one by default: on the training half of the
        14-day series and the one-day series, fitting it (30/60/120) lost more out of sample
        than it gained in the back-test.
    idle_min_samples : int
        Fewest idle times (gaps between active minutes) for ``idle_histogram``.
    max_history_min : int
        Longest history used (older minutes are ignored); 14 days by default.
    methods : tuple of str
        Candidate methods for the selector.
    scalings : tuple of str
        Residual scalings tried for the conformal quantiles (``SCALINGS``; the first is used
        when nothing can be back-tested).
    period_min : int
        Minutes per value of the series: 1 (CloudWatch 1-minute data), 5 or 60 for the
        aggregates CloudWatch keeps beyond 15 days. Seasons must be whole periods.
    selection_margin : float
        The ``ensemble`` pools the candidates whose back-test loss is within this fraction of
        the best one, and the selector keeps it unless a single candidate beats it by more
        (``SELECTION_MARGIN``, 5 %; module docstring), in [0, 1].

    Raises
    ------
    ForecastError
        On an out-of-range value (message names the field).
    """

    lead_min: int = 15
    window_min: int = 5
    quantiles: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99)
    planning_quantile: float = 0.95
    season_min: int = 1440
    short_season_min: int = 60
    week_min: int = 7 * 1440
    calibration_min: int = 480
    selection_min: int = 1440
    recalibrate_every_min: int = 60
    min_selection_min: int = 240
    selection_half_life_min: int = 7 * 1440
    min_calibration: int = 30
    ses_alpha: float = 0.2
    ses_alpha_grid: tuple[float, ...] = (0.05, 0.2, 0.5)
    hw_gamma: float = 0.3
    hw_gamma_grid: tuple[float, ...] = (0.3, 0.7)
    peak_window_min: int = 60
    peak_window_grid: tuple[int, ...] = (60,)
    seasons_in_median: int = 4
    idle_min_samples: int = 5
    max_history_min: int = 14 * 1440
    methods: tuple[Method, ...] = ALL_METHODS
    period_min: int = 1
    scalings: tuple[str, ...] = SCALINGS
    selection_margin: float = SELECTION_MARGIN

    def __post_init__(self) -> None:
        ints = ("lead_min", "window_min", "season_min", "short_season_min", "week_min",
                "calibration_min", "selection_min", "recalibrate_every_min", "min_selection_min",
                "selection_half_life_min",
                "min_calibration",
                "peak_window_min", "idle_min_samples", "max_history_min", "period_min")
        for name in ints:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ForecastError(f"ForecastConfig.{name} must be a positive int, got {value!r}")
        if not self.quantiles or any(not 0.0 < q < 1.0 for q in self.quantiles):
            raise ForecastError(f"ForecastConfig.quantiles must be in (0, 1), got {self.quantiles}")
        if tuple(sorted(self.quantiles)) != tuple(self.quantiles):
            raise ForecastError("ForecastConfig.quantiles must be sorted ascending")
        if self.planning_quantile not in self.quantiles:
            raise ForecastError(
                f"ForecastConfig.planning_quantile {self.planning_quantile} must be one of "
                f"quantiles {self.quantiles}"
            )
        for name in ("ses_alpha", "hw_gamma"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ForecastError(f"ForecastConfig.{name} must be in (0, 1], got {value}")
        if not 0.0 <= self.selection_margin <= 1.0:
            raise ForecastError(f"ForecastConfig.selection_margin must be in [0, 1], got "
                                f"{self.selection_margin}")
        for name in ("ses_alpha_grid", "hw_gamma_grid"):
            grid = getattr(self, name)
            if not grid or any(not 0.0 < v <= 1.0 for v in grid):
                raise ForecastError(f"ForecastConfig.{name} must be non-empty values in (0, 1], "
                                    f"got {grid}")
        if not self.peak_window_grid or any(not isinstance(w, int) or w < 1
                                            for w in self.peak_window_grid):
            raise ForecastError("ForecastConfig.peak_window_grid must be positive ints, got "
                                f"{self.peak_window_grid}")
        if not self.scalings or set(self.scalings) - set(SCALINGS):
            raise ForecastError(f"ForecastConfig.scalings must be a non-empty subset of "
                                f"{SCALINGS}, got {self.scalings}")
        unknown = set(self.methods) - set(ALL_METHODS)
        if unknown or not self.methods:
            raise ForecastError(
                f"ForecastConfig.methods must be a non-empty subset of {ALL_METHODS}, "
                f"unknown: {sorted(unknown)}"
            )
        for season in (self.season_min, self.short_season_min, self.week_min):
            if season < self.lead_min + self.window_min:
                raise ForecastError(
                    "ForecastConfig seasons must be >= lead_min + window_min so the seasonal "
                    f"target is already observed (got {season})"
                )
            if season % self.period_min:
                raise ForecastError(f"ForecastConfig seasons must be whole periods of "
                                    f"period_min={self.period_min} min (got {season})")

    @property
    def reach_min(self) -> int:
        """Minutes from origin to the end of the target window, inclusive of the origin."""
        return self.lead_min + self.window_min

    def in_periods(self) -> ForecastConfig:
        """The same config with every duration in periods of ``period_min`` (``period_min=1``).

        Lead and window are rounded up (the target window covers at least the minutes asked
        for); seasons are exact; calibration and selection keep at least ``min_calibration``
        periods; ``short_season_min`` stays at least ``lead + window`` periods.
        """
        p = self.period_min
        if p == 1:
            return self
        lead = -(-self.lead_min // p)
        window = -(-self.window_min // p)
        return replace(
            self, period_min=1, lead_min=lead, window_min=window,
            season_min=self.season_min // p, week_min=self.week_min // p,
            short_season_min=max(lead + window, self.short_season_min // p),
            calibration_min=max(self.min_calibration, self.calibration_min // p),
            selection_min=max(self.min_calibration, self.selection_min // p),
            min_selection_min=max(self.min_calibration, self.min_selection_min // p),
            selection_half_life_min=max(1, self.selection_half_life_min // p),
            recalibrate_every_min=max(1, self.recalibrate_every_min // p),
            peak_window_min=max(1, self.peak_window_min // p),
            peak_window_grid=tuple(sorted({max(1, w // p) for w in self.peak_window_grid})),
            max_history_min=max(1, self.max_history_min // p),
        )


@dataclass(frozen=True)
class QuantileForecast:
    """Quantiles of the peak load in the target window ``[t + lead, t + lead + window)``.

    Attributes
    ----------
    metric : str
        ``"concurrency"`` (environments) or ``"rate_per_min"`` (invocations per minute).
    method : str
        The method that produced it (or ``"fallback_max"`` / ``"empty"``).
    quantiles, values : tuple of float
        Levels and the forecast at each level (same unit as the metric), non-decreasing, >= 0.
    point : float
        The method's point forecast.
    n_history_min : int
        Minutes of history used.
    active_fraction : float
        Fraction of observed minutes with a value > 0 (sparsity).
    selection : tuple of (str, float)
        Back-test pinball loss at the planning quantile of each candidate (lower is better).
    reason : str
        One line on why this method (its fitted parameters, and any season it had to do
        without).
    notes : tuple of str
        The seasons not used and why (history shorter than a season plus calibration), and
        the resolution when it is not 1 minute.
    """

    metric: str
    method: str
    lead_min: int
    window_min: int
    quantiles: tuple[float, ...]
    values: tuple[float, ...]
    point: float
    n_history_min: int
    active_fraction: float
    selection: tuple[tuple[str, float], ...] = ()
    reason: str = ""
    notes: tuple[str, ...] = ()

    def at(self, q: float) -> float:
        """Forecast at level ``q`` (linear interpolation between the stored levels).

        Raises
        ------
        ValueError
            If ``q`` is outside the stored range of levels.
        """
        if q < self.quantiles[0] or q > self.quantiles[-1]:
            raise ValueError(f"quantile {q} outside the forecast's levels {self.quantiles}")
        return float(np.interp(q, self.quantiles, self.values))


@dataclass(frozen=True)
class AliasForecast:
    """Forecasts of one alias at one origin (``issued_at_s``, epoch seconds, passed in).

    ``rate_per_min`` (invocations per minute) is None unless asked for
    (``forecast_alias(..., forecast_rate=True)``): the planner reads only ``concurrency``.
    """

    function_name: str
    alias: str
    issued_at_s: float
    concurrency: QuantileForecast
    rate_per_min: QuantileForecast | None
    recent_duration_ms: float
    #: concurrency per invocation/min, for converting rate quantiles (NaN when unknown)
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: mean requests in flight over the recent hour (Little's law, :func:`busy_concurrency`);
    #: the planner's utilization estimate. NaN when unknown.
    busy_concurrency: float = float("nan")
    #: highest requests in flight (``ConcurrentExecutions`` Maximum) observed in the last
    #: 60 minutes of the history; NaN when none of them is observed. The LMI plan holds it
    #: (``warmers.plan.managed_instances``: a burst beyond capacity there is a 429).
    recent_peak_concurrency: float = float("nan")


def busy_concurrency(invocations_per_min: np.ndarray, duration_ms: np.ndarray,
                     minutes: int = 60) -> float:
    """Mean requests in flight over the last ``minutes`` minutes, by Little's law.

    Parameters
    ----------
    invocations_per_min : np.ndarray
        Shape ``(n,)``, invocations per minute (NaN = gap).
    duration_ms : np.ndarray
        Shape ``(n,)``, mean duration per minute in ms (NaN in minutes without invocations).
    minutes : int
        Length of the recent window.

    Returns
    -------
    float
        ``mean(invocations * duration_ms / 60,000)`` over the window's observed minutes (a
        minute without invocations counts as 0); NaN when no minute is observed.

    Raises
    ------
    ForecastError
        If the shapes differ or ``minutes < 1``.

    References
    ----------
    J. D. C. Little, "A proof for the queuing formula L = lambda W", Operations Research 9(3),
    1961; https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
    """
    inv = np.asarray(invocations_per_min, dtype=float)
    dur = np.asarray(duration_ms, dtype=float)
    if inv.shape != dur.shape or inv.ndim != 1:
        raise ForecastError(f"invocations {inv.shape} and durations {dur.shape} must be equal "
                            "1-D shapes")
    if minutes < 1:
        raise ForecastError(f"minutes must be >= 1, got {minutes}")
    inv, dur = inv[-minutes:], dur[-minutes:]
    busy = np.where(inv > 0, inv * dur / 60_000.0, np.where(inv == 0, 0.0, np.nan))
    busy = busy[np.isfinite(busy)]
    return float(busy.mean()) if busy.shape[0] else float("nan")


@dataclass(frozen=True, eq=False)
class Candidate:
    """One method's forecast at the last origin, plus its back-test (internal to selection)."""

    method: str
    values: np.ndarray  # (n_quantiles,)
    point: float
    selection_loss: float  # NaN when it could not be back-tested
    detail: str = ""
    selection_pred: np.ndarray | None = None  # (selection_min,) back-test forecasts at q_plan
    members: tuple[str, ...] = ()  # the methods an ``ensemble`` pooled


# --------------------------------------------------------------------------- evaluation metrics


def pinball_loss(y: np.ndarray, pred: np.ndarray, q: float) -> float:
    """Mean pinball (quantile) loss, NaN targets ignored.

    Parameters
    ----------
    y, pred : np.ndarray
        Shape ``(n,)``, actual values and forecasts at level ``q``.
    q : float
        Quantile level in (0, 1).

    Returns
    -------
    float
        ``mean(max(q (y - f), (q - 1) (y - f)))``; NaN when no pair is finite.

    References
    ----------
    Koenker and Bassett (1978), Econometrica 46(1).
    """
    y = np.asarray(y, dtype=float)
    pred = np.asarray(pred, dtype=float)
    ok = np.isfinite(y) & np.isfinite(pred)
    if not ok.any():
        return float("nan")
    diff = y[ok] - pred[ok]
    return float(np.mean(np.maximum(q * diff, (q - 1.0) * diff)))


def _selection_loss(y: np.ndarray, pred: np.ndarray, q: float, half_life: int) -> float:
    """Pinball loss at ``q`` weighted ``2^(-age / half_life)``, age counted back from the last
    element (NaN pairs ignored; NaN when none is finite)."""
    return float(_selection_losses(y, pred[None, :], q, half_life)[0])


def _selection_losses(y: np.ndarray, preds: np.ndarray, q: float, half_life: int) -> np.ndarray:
    """:func:`_selection_loss` of each row of ``preds`` (shape ``(k, n)``) against ``y``
    (``(n,)``), shape ``(k,)``. Rows with the same finite pairs are reduced together, over the
    same compressed values as one row alone (so each loss is the one-row loss, bit for bit)."""
    ok = np.isfinite(preds) & np.isfinite(y)[None, :]
    out = np.full(preds.shape[0], np.nan)
    age = np.arange(y.shape[0] - 1, -1, -1)
    groups: dict[bytes, list[int]] = {}
    for r in range(preds.shape[0]):
        groups.setdefault(ok[r].tobytes(), []).append(r)
    for rows in groups.values():
        mask = ok[rows[0]]
        if not mask.any():
            continue
        w = np.exp2(-age[mask] / half_life)
        if mask.all():
            diff = y[None, :] - preds[rows]
        else:
            diff = y[mask][None, :] - preds[rows][:, mask]
        # C order: each row is then summed as one contiguous (pairwise-summed) row
        terms = np.ascontiguousarray(w * np.maximum(q * diff, (q - 1.0) * diff))
        out[rows] = np.sum(terms, axis=1) / np.sum(w)
    return out


def coverage(y: np.ndarray, pred: np.ndarray) -> float:
    """Fraction of finite pairs with ``y <= pred`` (should be close to the level)."""
    y = np.asarray(y, dtype=float)
    pred = np.asarray(pred, dtype=float)
    ok = np.isfinite(y) & np.isfinite(pred)
    if not ok.any():
        return float("nan")
    return float(np.mean(y[ok] <= pred[ok] + 1e-9))


# --------------------------------------------------------------------------- series helpers


def validate_series(y: np.ndarray, *, name: str = "series") -> np.ndarray:
    """Return ``y`` as a 1-D float array; NaN (gap) allowed, negatives and inf are not.

    Raises
    ------
    ForecastError
        If ``y`` is not 1-D, holds a negative or infinite value.
    """
    arr = np.asarray(y, dtype=float)
    if arr.ndim != 1:
        raise ForecastError(f"{name} must be 1-D (one value per minute), got shape {arr.shape}")
    if np.isinf(arr).any():
        raise ForecastError(f"{name} holds an infinite value; use NaN for a gap")
    finite = arr[~np.isnan(arr)]
    if (finite < 0).any():
        raise ForecastError(f"{name} holds a negative value ({finite.min()}); loads are >= 0")
    return arr


def _window_max(y: np.ndarray, width: int) -> np.ndarray:
    """``out[i] = nanmax(y[i : i + width])``, shape ``(n - width + 1,)`` (NaN if all NaN)."""
    n = y.shape[0]
    if n < width:
        return np.zeros(0)
    # doubling ("sparse table"): O(n log width) instead of O(n width)
    out = y.astype(float, copy=True)
    span = 1
    while span * 2 <= width:
        out = np.fmax(out[:-span], out[span:])
        span *= 2
    if span < width:
        out = np.fmax(out[: n - width + 1], out[width - span: width - span + n - width + 1])
    return out[: n - width + 1]


def target_series(y: np.ndarray, config: ForecastConfig) -> np.ndarray:
    """Actual target for each origin: ``target[t] = max(y[t+lead : t+lead+window])``.

    Returns
    -------
    np.ndarray
        Shape ``(n,)``; NaN where the window is not (yet) observed or all gap.
    """
    config = config.in_periods()
    y = validate_series(y)
    return _targets(_window_max(y, config.window_min), y.shape[0], config)


def _targets(m: np.ndarray, n: int, config: ForecastConfig) -> np.ndarray:
    """:func:`target_series` from ``m[i] = max y[i : i + window]`` (config in periods)."""
    out = np.full(n, np.nan)
    last = n - config.reach_min  # last origin with a complete target window
    if last >= 0:
        out[: last + 1] = m[config.lead_min : config.lead_min + last + 1]
    return out


def _last_window_peak(y: np.ndarray, width: int) -> np.ndarray:
    """``out[t] = nanmax(y[t-width+1 : t+1])`` (shorter at the start), shape ``(n,)``."""
    n = y.shape[0]
    out = np.full(n, np.nan)
    if n == 0:
        return out
    padded = np.concatenate([np.full(width - 1, np.nan), y])
    out[:] = _window_max(padded, width)
    return out


def _ffill(x: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """Forward-fill NaN (leading NaN -> ``fill``)."""
    if x.shape[0] == 0:
        return x.copy()
    idx = np.where(np.isnan(x), 0, np.arange(x.shape[0]))
    np.maximum.accumulate(idx, out=idx)
    out = x[idx]
    return np.where(np.isnan(out), fill, out)


def _ses(x: np.ndarray, alpha: float) -> np.ndarray:
    """Simple exponential smoothing ``l[t] = a x[t] + (1-a) l[t-1]`` via a truncated kernel.

    The kernel ``a (1-a)^k`` is cut where it falls below 1e-6 of its first weight and each
    output is normalised by the weights it saw (so the start is not biased to zero).
    """
    n = x.shape[0]
    if n == 0:
        return x.copy()
    if alpha >= 1.0:
        return x.astype(float).copy()
    k = int(min(n, _ses_reach(alpha)))
    weights = alpha * (1.0 - alpha) ** np.arange(k)
    num = np.convolve(x, weights)[:n]
    den = 1.0 - (1.0 - alpha) ** np.minimum(np.arange(1, n + 1), k)  # sum of the weights seen
    return num / den


def _ses_reach(alpha: float) -> int:
    """Length of the truncated SES kernel (see :func:`_ses`)."""
    return 1 if alpha >= 1.0 else int(math.ceil(math.log(1e-6) / math.log(1.0 - alpha)) + 1)


def _column_nanmedian(a: np.ndarray) -> np.ndarray:
    """Median of each column ignoring NaN (NaN where a column is all NaN), without warnings."""
    srt = np.sort(a, axis=0)  # NaN sorts last
    count = np.sum(~np.isnan(a), axis=0)
    lo = np.clip((count - 1) // 2, 0, a.shape[0] - 1)
    hi = np.clip(count // 2, 0, a.shape[0] - 1)
    cols = np.arange(a.shape[1])
    med = 0.5 * (srt[lo, cols] + srt[hi, cols])
    return np.where(count > 0, med, np.nan)


# --------------------------------------------------------------------------- point methods


@dataclass(frozen=True, eq=False)
class _History:
    """One series prepared for the point methods; arrays over the tail ``[t0, n)`` are what
    the back-test and the final forecast read (older minutes serve as look-backs only)."""

    y: np.ndarray  # (n,) the series
    target: np.ndarray  # (n,) target_series(y)
    peak: np.ndarray  # (n,) forward-filled peak of the last window (the naive point)
    window_peak: np.ndarray  # (n - window + 1,) max of y[i : i + window]
    t0: int  # first origin whose point is computed
    daily: int  # season of seasonal_naive / seasonal_median (periods)
    weekly: int | None  # weekly season when the history holds it
    hw_season: int | None  # Holt-Winters season when the history holds one
    #: per-series work shared by the candidates and parameter values (seasonal lags, the
    #: Holt-Winters seasonal profile per season and gamma)
    cache: dict[tuple[str, int, float], tuple[int, tuple[np.ndarray, ...]]] = field(
        default_factory=dict)


def _prepare(y: np.ndarray, config: ForecastConfig, n_sel: int) -> _History:
    n = y.shape[0]
    reach = config.reach_min
    daily, weekly = _seasons(n, config)
    full_day = n >= config.season_min + reach + config.min_calibration
    window_peak = _window_max(y, config.window_min)
    return _History(
        y=y, target=_targets(window_peak, n, config),
        peak=_ffill(_last_window_peak(y, config.window_min)),
        window_peak=window_peak,
        t0=max(0, n - (2 * reach + n_sel + config.calibration_min + 1)),
        daily=daily, weekly=weekly,
        hw_season=weekly if weekly is not None else (config.season_min if full_day else None),
    )


def _seasons(n: int, config: ForecastConfig) -> tuple[int, int | None]:
    """(daily season, weekly season or None) for ``n`` periods of history: a season is used
    when the history holds it plus the lead, the window and ``min_calibration`` residuals."""
    spare = config.reach_min + config.min_calibration
    daily = config.season_min if n >= config.season_min + spare else config.short_season_min
    weekly = config.week_min if n >= config.week_min + spare else None
    return daily, weekly


def season_notes(n: int, config: ForecastConfig, period_min: int = 1) -> tuple[str, ...]:
    """Why the daily or weekly season is not used for ``n`` periods of history (empty when
    both are), in minutes; ``config`` in periods (:meth:`ForecastConfig.in_periods`) of
    ``period_min`` minutes."""
    daily, weekly = _seasons(n, config)
    p = period_min
    need = (config.reach_min + config.min_calibration) * p
    have = n * p
    out = []
    if daily != config.season_min:
        out.append(f"daily season ({config.season_min * p} min) not used: {have} min of history "
                   f"< one season + {need} min (lead, window, calibration); seasonal_naive falls "
                   f"back to {config.short_season_min * p} min and holt_winters is absent")
    if weekly is None:
        out.append(f"weekly season ({config.week_min * p} min) not used: {have} min of history "
                   f"< one season + {need} min")
    return tuple(out)


def _lagged(h: _History, lag: int, lead: int) -> np.ndarray:
    """``out[t - t0] = window_peak[t + lead - lag]`` (the target ``lag`` periods ago) over
    ``[t0, n)``; NaN where that window starts before the history."""
    key = ("lag", lag, float(lead))
    if key in h.cache:
        return h.cache[key][1][0]
    n = h.y.shape[0]
    idx = np.arange(h.t0, n) + lead - lag
    out = np.full(n - h.t0, np.nan)
    ok = idx >= 0
    out[ok] = h.window_peak[idx[ok]]
    h.cache[key] = (h.t0, (out,))
    return out


def _grid(method: Method, h: _History, config: ForecastConfig,
          fit: bool) -> list[dict[str, float]]:
    """Parameter values of ``method`` to back-test (one value each when nothing is fitted)."""
    if method == "ses":
        return [{"alpha": a} for a in (config.ses_alpha_grid if fit else (config.ses_alpha,))]
    if method == "peak_hold":
        widths = config.peak_window_grid if fit else (config.peak_window_min,)
        return [{"width": w} for w in widths]
    if method == "seasonal_naive_weekly":
        return [] if h.weekly is None else [{"lag": h.weekly}]
    if method in ("seasonal_naive", "seasonal_median"):
        return [{"lag": h.daily}]
    if method == "holt_winters":
        if h.hw_season is None:
            return []
        alphas = config.ses_alpha_grid if fit else (config.ses_alpha,)
        # gamma weighs season k against k+1: it matters only with two seasons of history
        several = h.y.shape[0] >= 2 * h.hw_season + config.reach_min
        gammas = config.hw_gamma_grid if fit and several else (config.hw_gamma,)
        return [{"season": h.hw_season, "alpha": a, "gamma": g} for a, g in product(alphas, gammas)]
    return [{}]


def _point(h: _History, method: Method, p: dict[str, float],
           config: ForecastConfig) -> tuple[np.ndarray, str]:
    """``point[t]`` over ``[t0, n)`` using only ``y[: t+1]`` at each ``t``; NaN where the method
    has no value. Returns the values and a description with the parameters."""
    y, t0 = h.y, h.t0
    n = y.shape[0]
    lead = config.lead_min
    if method == "naive":
        return h.peak[t0:], "peak of the last window"
    if method == "peak_hold":
        w = int(p["width"])
        lo = max(0, t0 - w + 1)
        part = _ffill(_last_window_peak(y[lo:], w))
        return part[t0 - lo:], f"peak of the last {w} periods"
    if method == "ses":
        alpha = p["alpha"]
        lo = max(0, t0 - _ses_reach(alpha))
        return _ses(h.peak[lo:], alpha)[t0 - lo:], f"alpha={alpha:g}"
    if method in ("seasonal_naive", "seasonal_naive_weekly"):
        lag = int(p["lag"])
        return _lagged(h, lag, lead), f"season={lag} periods"
    if method == "seasonal_median":
        lag = int(p["lag"])
        k_max = config.seasons_in_median
        if n <= lag:
            return np.full(n - t0, np.nan), "needs one season"
        lags = np.stack([_lagged(h, k * lag, lead) for k in range(1, k_max + 1)])
        return _column_nanmedian(lags), f"median of the last {k_max} seasons of {lag} periods"
    if method == "holt_winters":
        return _holt_winters(h, int(p["season"]), p["alpha"], p["gamma"], config)
    raise ForecastError(f"no point forecast for method {method!r}")


def _holt_winters(h: _History, season: int, alpha: float, gamma: float,
                  config: ForecastConfig) -> tuple[np.ndarray, str]:
    """ETS(A,N,A) point forecasts over ``[t0, n)``: ``level[t] + profile(t + lead)``.

    The profile at a phase is the mean of the series at that phase in the past seasons,
    weighted ``gamma (1 - gamma)^(k-1)`` for ``k`` seasons ago (the closed form of the seasonal
    smoothing equation, Hyndman and Athanasopoulos ch. 8.3); the level is ``ses`` with ``alpha``
    of the de-seasonalised last-window peak. Defined from one season of history on.
    """
    y, x = h.y, h.peak
    n = y.shape[0]
    detail = f"season={season} periods, alpha={alpha:g}, gamma={gamma:g}"
    lo = max(season, h.t0 - _ses_reach(alpha))  # first index of the level recursion
    out = np.full(n - h.t0, np.nan)
    if lo >= n:
        return out, detail
    num_now, num_fut, den = _hw_profile(h, season, gamma, lo, config.lead_min)
    level = _ses(x[lo:] - num_now / den, alpha)
    out[max(0, lo - h.t0):] = (level + num_fut / den)[max(0, h.t0 - lo):]
    return out, detail


def _hw_profile(h: _History, season: int, gamma: float, lo: int,
                lead: int) -> tuple[np.ndarray, ...]:
    """The weighted sums behind the Holt-Winters profile over origins ``[lo, n)``: (of the
    last-window peak, of the target window, of the weights), each shape ``(n - lo,)``.

    Each element depends on its origin alone, so one computation from the smallest ``lo`` asked
    for (the smallest alpha's) serves every alpha: cached per season and gamma.
    """
    key = ("hw", season, gamma)
    got = h.cache.get(key)
    if got is not None and got[0] <= lo:
        return tuple(a[lo - got[0]:] for a in got[1])
    x, tgt = h.peak, h.window_peak
    n = x.shape[0]
    t = np.arange(lo, n)
    num_now = np.zeros(t.shape[0])
    num_fut = np.zeros(t.shape[0])
    den = np.zeros(t.shape[0])
    for k in range(1, n // season + 1):
        past = t - k * season
        ok = past >= 0
        if not ok.any():
            break
        w = gamma * (1.0 - gamma) ** (k - 1)
        now = x[past[ok]]
        # the target window k seasons ago, [t + lead - k S, t + reach - k S), is observed
        fut = tgt[past[ok] + lead]
        num_now[ok] += w * now
        num_fut[ok] += w * np.where(np.isnan(fut), now, fut)
        den[ok] += w
    h.cache[key] = (lo, (num_now, num_fut, den))
    return num_now, num_fut, den


# --------------------------------------------------------------------------- back-test


def _conformal_rows(rows: np.ndarray, quantiles: tuple[float, ...],
                    min_count: int) -> np.ndarray:
    """Split-conformal offsets of each row: the ``k = ceil((m + 1) q)``-th smallest of its ``m``
    finite values (clipped to ``m``), shape ``(n_rows, n_quantiles)``; NaN for a row with fewer
    than ``min_count`` finite values. Lei et al. (2018), JASA 113(523)."""
    width = rows.shape[1]
    out = np.full((rows.shape[0], len(quantiles)), np.nan)
    rest = np.ones(rows.shape[0], dtype=bool)
    if width >= max(1, min_count):
        # rows without a gap (the usual case): a partial sort at the order statistics is
        # enough (the same elements a full sort puts there)
        ks = [min(math.ceil((width + 1) * q), width) - 1 for q in quantiles]
        rest = ~np.isfinite(rows).all(axis=1)
        if not rest.any():
            return np.partition(rows, sorted(set(ks)), axis=1)[:, ks]
        out[~rest] = np.partition(rows[~rest], sorted(set(ks)), axis=1)[:, ks]
    part = rows[rest]
    srt = np.sort(part, axis=1)  # NaN sorts last
    m = np.sum(np.isfinite(part), axis=1)
    good = m >= max(1, min_count)
    if not good.any():
        return out
    picked = np.full((part.shape[0], len(quantiles)), np.nan)
    for j, q in enumerate(quantiles):
        k_row = np.minimum(np.ceil((m + 1) * q).astype(int), m) - 1
        picked[good, j] = srt[np.flatnonzero(good), k_row[good]]
    out[rest] = picked
    return out


def _sliding_kth(rows: np.ndarray, step: int, width: int, kth: int) -> np.ndarray:
    """``out[r, b]`` = the ``kth`` smallest (0-based) of ``rows[r, b step : b step + width]``
    for every window that fits, shape ``(n_rows, n_windows)``; the rows hold no NaN.

    The windows overlap, so each chunk of ``g = gcd(step, width)`` values is reduced once to
    its ``width - kth`` largest: a window's ``width - kth`` largest are among its chunks' (a
    multiset argument), so its order statistic is that of the union. The same element as a
    sort of each window, with a fraction of the work when ``width - kth < g``.
    """
    n_rows, length = rows.shape
    n_windows = (length - width) // step + 1
    g = math.gcd(step, width)
    top = width - kth  # how many of the largest values hold the order statistic
    if top >= g:  # nothing to gain from chunks: one window at a time
        cols = (np.arange(n_windows) * step)[:, None] + np.arange(width)
        return np.partition(rows[:, cols], kth, axis=2)[:, :, kth]
    n_chunks = ((n_windows - 1) * step + width) // g
    chunks = rows[:, : n_chunks * g].reshape(n_rows, n_chunks, g)
    best = np.partition(chunks, g - top, axis=2)[:, :, g - top:]  # each chunk's largest
    per_window = width // g
    pick = (np.arange(n_windows) * (step // g))[:, None] + np.arange(per_window)
    union = best[:, pick].reshape(n_rows, n_windows, per_window * top)
    at = per_window * top - top  # the ``top``-th largest of the union
    return np.partition(union, at, axis=2)[:, :, at]


def _scale(point: np.ndarray, scaling: str) -> np.ndarray:
    if scaling == "sqrt":
        return np.asarray(np.sqrt(np.maximum(point, 0.0) + 1.0), dtype=float)
    return np.ones_like(point)


@dataclass(frozen=True, eq=False)
class _Window:
    """Back-test layout in tail coordinates (index ``i`` = origin ``t0 + i``)."""

    sel_start: int  # first back-test origin (absolute index)
    last_known: int  # last origin whose target is observed (absolute index)
    n_sel: int

    @property
    def tested(self) -> bool:
        return self.n_sel > 0


def _backtest(points: np.ndarray, scales: np.ndarray, h: _History, win: _Window,
              config: ForecastConfig) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Back-test of ``k`` candidates at once: (losses ``(k,)``, back-test forecasts at the
    planning quantile ``(k, n_sel)`` or None when nothing is back-tested, final offsets at
    every quantile ``(k, n_quantiles)``).

    ``points`` and ``scales`` are ``(k, n - t0)``, over ``[t0, n)``. The back-test recomputes
    the offsets every ``recalibrate_every_min`` origins from the residuals observed before each
    block; the final offsets use the ``calibration_min`` residuals observed at the last origin.
    The back-test forecast is NaN in a block without ``min_calibration`` residuals or a point
    (the loss is over the rest); a candidate whose final forecast lacks them (a NaN in its
    final offsets or last point) gets a NaN loss. Each row's figures are those of the row
    back-tested alone (numpy over origins and candidates; no arithmetic is regrouped).
    """
    t0 = h.t0
    cal, reach = config.calibration_min, config.reach_min
    k = points.shape[0]
    e = (h.target[t0:][None, :] - points) / scales  # normalised residual of origin t0 + i
    padded = np.concatenate([np.full((k, cal), np.nan), e], axis=1)  # padded[:, j + cal] = e[:, j]
    # residual of origin s is observed at origin t when s + reach - 1 <= t
    last_res = win.last_known - t0  # tail index of the last residual observed at the end
    # (without the padding's columns: NaN, as a gap)
    final = _conformal_rows(padded[:, max(last_res + 1, cal): last_res + 1 + cal],
                            config.quantiles, config.min_calibration)
    usable = np.isfinite(final).all(axis=1) & np.isfinite(points[:, -1])
    losses = np.full(k, np.nan)
    if not win.tested or not usable.any():
        return losses, None, final
    q = config.planning_quantile
    every = config.recalibrate_every_min
    starts = np.arange(win.sel_start, win.last_known + 1, every)
    ends = starts - reach + 1 - t0  # tail index of the last residual observed at each block
    ends = np.maximum(ends, -1)  # before the tail: an empty (all-NaN) calibration window
    first = ends + 1  # block b calibrates on padded[:, first[b] : first[b] + cal]
    offsets = np.full((k, starts.shape[0]), np.nan)
    todo = np.repeat(usable[:, None], starts.shape[0], axis=1)
    kth = min(math.ceil((cal + 1) * q), cal) - 1  # the order statistic of a gap-free window
    inside = np.flatnonzero(first >= cal)  # blocks whose window lies within the residuals
    if cal >= max(1, config.min_calibration) and inside.shape[0] > 1:
        b0 = int(inside[0])  # from b0 on the windows are ``every`` apart
        span = padded[:, first[b0]: first[-1] + cal]
        whole = usable & np.isfinite(span).all(axis=1)
        if whole.any():
            offsets[whole, b0:] = _sliding_kth(span[whole], every, cal, kth)
            todo[whole, b0:] = False
    if todo.any():
        row, blk = np.nonzero(todo)
        # padded[:, :cal] is the all-NaN padding: each window keeps its last ``width`` columns,
        # every residual of it (an order statistic of the finite values does not see the rest)
        stop = first[blk] + cal
        width = int(np.max(stop - np.maximum(first[blk], cal)))
        windows = padded[row[:, None], (stop - width)[:, None] + np.arange(width)]
        offsets[row, blk] = _conformal_rows(windows, (q,), config.min_calibration)[:, 0]
    i = np.arange(win.sel_start, win.last_known + 1) - t0
    pred = np.full((k, i.shape[0]), np.nan)
    # NaN where unavailable; origins i are consecutive, each block's offset repeated over it
    span_i = slice(int(i[0]), int(i[-1]) + 1)
    per_origin = np.repeat(offsets[usable], every, axis=1)[:, : i.shape[0]]
    pred[usable] = np.maximum(0.0, points[usable, span_i] + scales[usable, span_i] * per_origin)
    losses[usable] = _selection_losses(h.target[t0 + i], pred[usable], q,
                                       config.selection_half_life_min)
    return losses, pred, final


# --------------------------------------------------------------------------- idle-time histogram


def _idle_histogram_quantiles(y: np.ndarray, active: np.ndarray, last_active: np.ndarray,
                              target: np.ndarray, origins: np.ndarray, fit_end: int,
                              config: ForecastConfig,
                              quantiles: tuple[float, ...]) -> np.ndarray | None:
    """Quantiles at each origin from the idle-time histogram fitted on ``y[: fit_end+1]``.

    ``active`` is ``y > 0`` (a gap is inactive), ``last_active[t]`` the last active index at or
    before ``t`` (-1 before the first). Returns shape ``(len(origins), len(quantiles))`` or
    None when there are too few idle times.
    """
    act_idx = np.flatnonzero(active[: fit_end + 1])
    if act_idx.shape[0] < config.idle_min_samples + 1:
        return None
    # minutes between successive active minutes, as counts: at_most[k] = #idle <= k
    at_most = np.cumsum(np.bincount(np.diff(act_idx)))
    n_idle = act_idx.shape[0] - 1
    # targets whose window ended by fit_end
    known = target[: max(0, fit_end - config.reach_min + 2)]
    known = known[np.isfinite(known)]
    positive = np.sort(known[known > 0])
    # (a count over a length: np.mean's float, without its float conversion of the mask)
    p_uncond = (positive.shape[0] / known.shape[0] if known.shape[0]
                else np.count_nonzero(active) / active.shape[0])
    if positive.shape[0] == 0:
        positive = np.sort(y[: fit_end + 1][active[: fit_end + 1]])

    def survival(k: np.ndarray) -> np.ndarray:
        """P(idle > k) for ``k >= 0``."""
        return np.asarray((n_idle - at_most[np.minimum(k, at_most.shape[0] - 1)]) / n_idle,
                          dtype=float)

    la = last_active[origins]
    elapsed = origins - la
    lead, win = config.lead_min, config.window_min
    s_e = survival(elapsed)
    s_a = survival(elapsed + lead - 1)
    s_b = survival(elapsed + lead + win - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_window = np.where(s_e > 0, (s_a - s_b) / s_e, p_uncond)
        p_before = np.where(s_e > 0, (s_e - s_a) / s_e, 0.0)
    p = np.clip(p_window + p_before * p_uncond, 0.0, 1.0)
    p = np.where(la < 0, 0.0, p)
    out = np.zeros((origins.shape[0], len(quantiles)))
    for j, q in enumerate(quantiles):
        need = q - (1.0 - p)  # mass that must come from the non-zero part
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(p > 0, need / p, 0.0)
        level = np.clip(level, 0.0, 1.0)
        # np.quantile(positive, level, method="higher") on the sorted values, without its
        # partition per call: the element at ceil((m - 1) level) (Hyndman and Fan 1996)
        vals = positive[np.ceil((positive.shape[0] - 1) * level).astype(np.intp)]
        out[:, j] = np.where(need > 0, vals, 0.0)
    return out


# --------------------------------------------------------------------------- selection


def _window(n: int, config: ForecastConfig) -> _Window:
    """The back-test origins for ``n`` periods: the last ``selection_min``, shortened for short
    histories so that ``min_calibration`` residuals are observed before the first."""
    last_known = n - config.reach_min
    n_sel = min(config.selection_min,
                max(0, last_known + 1 - config.reach_min - config.min_calibration))
    return _Window(sel_start=last_known - n_sel + 1, last_known=last_known, n_sel=n_sel)


def forecast_candidates(y: np.ndarray, config: ForecastConfig | None = None,
                        methods: tuple[Method, ...] | None = None) -> list[Candidate]:
    """Every available method's quantile forecast at the last origin, with its back-test loss.

    Each method's parameters (and residual scaling) are fitted: the values on its grid with the
    lowest back-test loss (module docstring).

    Parameters
    ----------
    y : np.ndarray
        Shape ``(n,)``, one value per period (``config.period_min``), oldest first; NaN = gap.
    config : ForecastConfig, optional
    methods : tuple of str, optional
        Subset to compute (default ``config.methods``).

    Returns
    -------
    list of Candidate
        Methods that had enough history, in ``ALL_METHODS`` order.

    Raises
    ------
    ForecastError
        On a malformed series.
    """
    config = (config or ForecastConfig()).in_periods()
    return _candidates(validate_series(y)[-config.max_history_min:], config,
                       methods or config.methods)


def _candidates(y: np.ndarray, config: ForecastConfig,
                methods: tuple[Method, ...]) -> list[Candidate]:
    """:func:`forecast_candidates` of a validated series (config in periods)."""
    n = y.shape[0]
    win = _window(n, config)
    if win.last_known < 0:
        return []
    h = _prepare(y, config, win.n_sel)
    # every (method, parameters, scaling) on the grids, back-tested together
    tried: list[tuple[Method, str]] = []
    points: list[np.ndarray] = []
    scales: list[np.ndarray] = []
    for method in ALL_METHODS:
        if method not in methods or method in ("ensemble", "idle_histogram"):
            continue
        for params in _grid(method, h, config, fit=win.tested):
            point, detail = _point(h, method, params, config)
            for scaling in config.scalings if win.tested else config.scalings[:1]:
                tried.append((method, f"{detail}, {scaling} residuals"))
                points.append(point)
                scales.append(_scale(point, scaling))
    best: dict[str, Candidate] = {}
    if tried:
        point_k, scale_k = np.stack(points), np.stack(scales)
        losses, preds, finals = _backtest(point_k, scale_k, h, win, config)
        last = point_k[:, -1:]
        values_k = np.maximum.accumulate(np.maximum(0.0, last + scale_k[:, -1:] * finals), axis=1)
        usable = np.isfinite(finals).all(axis=1) & np.isfinite(last[:, 0])
        won: dict[Method, int] = {}  # each method's lowest back-test loss (ties: the first tried)
        for row in np.flatnonzero(usable).tolist():
            name = tried[row][0]
            if name not in won or _better_loss(float(losses[row]), float(losses[won[name]])):
                won[name] = row
        for name, row in won.items():
            best[name] = Candidate(name, values_k[row], float(last[row, 0]), float(losses[row]),
                                   tried[row][1], None if preds is None else preds[row])
    if "idle_histogram" in methods:
        idle = _idle_candidate(y, h.target, config, win.last_known, win.sel_start, win.n_sel)
        if idle is not None:
            best["idle_histogram"] = idle
    out = [best[m] for m in ALL_METHODS if m in best]
    actual = h.target[win.sel_start: win.last_known + 1]
    out = _common_window(out, actual, config)
    if "ensemble" in methods:
        pooled = _ensemble(out, actual, config)
        if pooled is not None:
            out.append(pooled)
    return out


def _common_window(cands: list[Candidate], actual: np.ndarray,
                   config: ForecastConfig) -> list[Candidate]:
    """Re-score every candidate over the same back-test origins: the longest suffix of the
    window where each candidate that covers at least ``min_selection_min`` origins (or the whole
    window, if shorter) has a forecast. A candidate that covers less gets a NaN loss (it is
    used only when no candidate is back-tested); forecasts before the common start become NaN.
    """
    n_sel = actual.shape[0]
    need = min(config.min_selection_min, n_sel)
    starts: dict[int, int] = {}
    for i, c in enumerate(cands):
        pred = c.selection_pred
        if pred is None or pred.shape[0] != n_sel or n_sel == 0:
            continue
        bad = np.flatnonzero(~np.isfinite(pred))
        first = int(bad[-1]) + 1 if bad.shape[0] else 0  # start of the all-finite suffix
        if n_sel - first >= need:
            starts[i] = first
    start = max(starts.values(), default=n_sel)
    q = config.planning_quantile
    compared = [i for i in starts if cands[i].selection_pred is not None]
    losses = np.full(len(cands), np.nan)
    preds: dict[int, np.ndarray] = {}
    if compared:
        kept = np.arange(n_sel) >= start
        stacked = np.stack([np.where(kept, cands[i].selection_pred, np.nan)  # type: ignore[arg-type]
                            for i in compared])
        losses[compared] = _selection_losses(actual[start:], stacked[:, start:], q,
                                             config.selection_half_life_min)
        preds = dict(zip(compared, stacked, strict=True))
    return [replace(c, selection_loss=float(losses[i]), selection_pred=preds.get(i))
            for i, c in enumerate(cands)]


def _better_loss(a: float, b: float) -> bool:
    """Back-test loss ``a`` is lower than ``b`` (a finite loss beats NaN; ties keep ``b``)."""
    if not math.isfinite(a):
        return False
    return not math.isfinite(b) or a < b


def _ensemble(cands: list[Candidate], actual: np.ndarray,
              config: ForecastConfig) -> Candidate | None:
    """The pooled combination: the equal-weight mean of the conformal quantiles of the single
    candidates whose back-test loss is within ``selection_margin`` of the best one (forecast
    pooling, Kourentzes et al. 2019; quantile averaging). None with fewer than two back-tested
    candidates.

    Its back-test loss is at most ``(1 + selection_margin)`` x the best single candidate's: the
    pinball loss is convex in the forecast, so the loss of the members' mean is at most the
    mean of their losses (Jensen), each within the margin of the best. The members share the
    back-test origins (:func:`_common_window`), so the same weights score all of them.
    """
    tested = [c for c in cands if c.method in ENSEMBLE_MEMBERS and c.selection_pred is not None
              and math.isfinite(c.selection_loss)]
    if len(tested) < 2:
        return None
    best = min(c.selection_loss for c in tested)
    members = [c for c in tested if c.selection_loss <= (1.0 + config.selection_margin) * best]
    values = np.mean([c.values for c in members], axis=0)
    point = float(np.mean([c.point for c in members]))
    sel_pred = np.mean(np.stack([c.selection_pred for c in members]),  # type: ignore[misc]
                       axis=0)
    loss = _selection_loss(actual, sel_pred, config.planning_quantile,
                           config.selection_half_life_min)
    names = tuple(c.method for c in members)
    if best > 0.0:
        why = (f"the {len(members)} of {len(tested)} candidates within "
               f"{config.selection_margin:.0%} of the best back-test loss {best:.4g}")
    else:
        why = (f"the {len(members)} of {len(tested)} candidates with a zero back-test loss "
               "(every back-test forecast equal to its target)")
    return Candidate("ensemble", values, point, loss, f"mean of {'+'.join(names)}: {why}",
                     sel_pred, members=names)


def _idle_candidate(y: np.ndarray, target: np.ndarray, config: ForecastConfig, last_known: int,
                    sel_start: int, n_sel: int) -> Candidate | None:
    n = y.shape[0]
    active = y > 0  # a gap (NaN) is inactive
    last_active = np.where(active, np.arange(n), -1)
    np.maximum.accumulate(last_active, out=last_active)
    final = _idle_histogram_quantiles(y, active, last_active, target, np.array([n - 1]), n - 1,
                                      config, config.quantiles)
    if final is None:
        return None
    values = np.maximum.accumulate(final[0])
    detail = "Shahrad et al. 2020 idle-time histogram"
    if n_sel > 0 and sel_start > 0:
        origins = np.arange(sel_start, last_known + 1)
        pred = _idle_histogram_quantiles(y, active, last_active, target, origins,
                                         sel_start - 1, config, (config.planning_quantile,))
        if pred is not None:
            loss = _selection_loss(target[origins], pred[:, 0], config.planning_quantile,
                                   config.selection_half_life_min)
            return Candidate("idle_histogram", values, float(values[0]), loss, detail, pred[:, 0])
    return Candidate("idle_histogram", values, float(values[0]), float("nan"), detail)


def forecast_series(y: np.ndarray, config: ForecastConfig | None = None, *,
                    metric: str = "concurrency",
                    methods: tuple[Method, ...] | None = None) -> QuantileForecast:
    """Forecast quantiles of the peak of ``y`` in the target window by the selector.

    Parameters
    ----------
    y : np.ndarray
        Shape ``(n,)``, one value per ``config.period_min`` minutes (default 1), oldest first,
        >= 0; NaN = gap (a missing CloudWatch datapoint). Use one Maximum per period for an
        aggregated history (:func:`warmers.series.aggregate_max`).
    config : ForecastConfig, optional
    metric : str
        Name stored on the result.
    methods : tuple of str, optional
        Restrict the pool (a single method forces it).

    Returns
    -------
    QuantileForecast
        The selector's choice (:func:`choose`: the pooled ``ensemble`` unless a single method
        beats its back-test pinball loss at the planning quantile by more than
        ``config.selection_margin``, then the lowest; ties go to the earlier method in
        ``ALL_METHODS``). Methods without a back-test are used only when no method has one. With too little history: the observed peak (``fallback_max``); with no
        observed value at all: zeros (``empty``). ``notes`` says which season the history was
        too short for; ``lead_min``, ``window_min`` and ``n_history_min`` are in minutes.

    Raises
    ------
    ForecastError
        On a malformed series.
    """
    config = config or ForecastConfig()
    p = config.period_min
    steps = config.in_periods()
    arr = validate_series(y, name=metric)[-steps.max_history_min:]
    finite = arr[np.isfinite(arr)]
    n = arr.shape[0]
    active = float(np.mean(finite > 0)) if finite.shape[0] else 0.0
    notes = season_notes(n, steps, p)
    if p != 1:
        resolution = (f"aggregated history: one value per {p} min; the target window is "
                      f"[t+{steps.lead_min * p}, t+{steps.reach_min * p}) min")
        notes = (resolution, *notes)
    base = {"metric": metric, "lead_min": steps.lead_min * p, "window_min": steps.window_min * p,
            "quantiles": config.quantiles, "n_history_min": n * p, "active_fraction": active,
            "notes": notes}
    if finite.shape[0] == 0:
        zeros = tuple(0.0 for _ in config.quantiles)
        return QuantileForecast(method="empty", values=zeros, point=0.0,
                                reason="no observed minute: nothing to forecast", **base)
    cands = _candidates(arr, steps, methods or steps.methods)
    if not cands:
        peak = float(finite.max())
        return QuantileForecast(
            method="fallback_max", values=tuple(peak for _ in config.quantiles), point=peak,
            reason=(f"{n * p} min of history is shorter than one season and too short to "
                    "calibrate: using the observed peak"),
            **base)
    best, tested = choose(cands, steps.selection_margin)
    selection = tuple((c.method, round(float(c.selection_loss), 6)) for c in cands)
    if tested:
        how = ("the combination is kept unless a single method beats it by more than "
               f"{steps.selection_margin:.0%}" if best.method == "ensemble" else
               "the lowest")
        reason = (f"{best.method} ({best.detail}): back-test pinball loss "
                  f"{best.selection_loss:.4g} at q={config.planning_quantile} ({how}) of "
                  f"{tested} methods over the last {_window(n, steps).n_sel * p} min")
    else:
        reason = f"{best.method} ({best.detail}): history too short to back-test a choice"
    if notes:
        reason = f"{reason}; {'; '.join(notes)}"
    return QuantileForecast(method=best.method, values=tuple(float(v) for v in best.values),
                            point=best.point, selection=selection, reason=reason, **base)


def choose(cands: list[Candidate],
           margin: float = SELECTION_MARGIN) -> tuple[Candidate, int]:
    """The selector: the ``ensemble`` (forecast combination) unless a single candidate's
    back-test loss beats it by more than ``margin``; then (or without an ensemble) the
    candidate with the lowest back-test loss (ties: earlier in ``ALL_METHODS``). An ensemble
    that pooled one method is that method, so the method itself is returned.

    Combination as the default follows the M4 competition (Makridakis, Spiliotis and
    Assimakopoulos 2020, IJF 36(1): combinations beat the selection of a single method); the
    rule keeps the chosen forecast's back-test loss within ``(1 + margin)`` x the best single
    candidate's.

    Returns the chosen candidate and how many candidates had a back-test; with none
    back-tested, the first candidate.

    Raises
    ------
    ValueError
        On an empty list or a negative ``margin``.
    """
    if not cands:
        raise ValueError("no candidate to choose from")
    if not margin >= 0.0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    tested = [c for c in cands if np.isfinite(c.selection_loss)]
    if not tested:
        return cands[0], 0
    singles = [c for c in tested if c.method != "ensemble"]
    best = min(singles or tested, key=lambda c: c.selection_loss)
    combo = next((c for c in tested if c.method == "ensemble"), None)
    if (combo is not None and len(combo.members) != 1
            and (not singles or combo.selection_loss <= (1.0 + margin) * best.selection_loss)):
        return combo, len(tested)
    return best, len(tested)


def forecast_alias(series: MetricSeries, *, issued_at_s: float,
                   config: ForecastConfig | None = None,
                   forecast_rate: bool = False) -> AliasForecast:
    """Forecast the concurrency (and, when asked, the invocation rate) of one alias.

    Parameters
    ----------
    series : MetricSeries
        1-minute history; its last minute is the origin.
    issued_at_s : float
        Epoch seconds of "now" (passed in; the forecaster never reads the clock).
    config : ForecastConfig, optional
        ``period_min`` must be 1 (a MetricSeries holds 1-minute data).
    forecast_rate : bool
        Also forecast invocations per minute (by the method chosen for concurrency). Off by
        default: no caller reads it (the planner plans from concurrency and the mean in
        flight), and it cost as much as a second back-test.

    Returns
    -------
    AliasForecast
        Concurrency by the selector's choice; ``rate_per_min`` None unless ``forecast_rate``.

    Raises
    ------
    ForecastError
        On a config whose ``period_min`` is not 1, or a malformed series.
    """
    config = config or ForecastConfig()
    if config.period_min != 1:
        raise ForecastError(f"forecast_alias reads 1-minute metrics; got period_min="
                            f"{config.period_min} (use forecast_series for aggregated history)")
    notes: list[str] = []
    conc = series.concurrency
    if np.isnan(conc).all() and not np.isnan(series.invocations).all():
        from warmers.series import littles_law_concurrency

        conc = littles_law_concurrency(series.invocations, series.duration_ms)
        notes.append("concurrency from Little's law (rate x duration)")
    dur = series.duration_ms[-60:]
    dur = dur[np.isfinite(dur)]
    concurrency = forecast_series(conc, config, metric="concurrency")
    rate: QuantileForecast | None = None
    if forecast_rate:
        # the rate reuses the method chosen for concurrency (proportional under Little's law),
        # so the back-test runs once per alias
        rate_methods: tuple[Method, ...] | None = None
        if concurrency.method == "ensemble":
            rate_methods = (*ENSEMBLE_MEMBERS, "ensemble")
        elif concurrency.method in ALL_METHODS:
            rate_methods = (concurrency.method,)
        rate = forecast_series(series.invocations, config, metric="rate_per_min",
                               methods=rate_methods)
    busy = busy_concurrency(series.invocations, series.duration_ms)
    recent_conc = series.concurrency[-60:]
    if busy == 0.0 and bool(np.any(np.nan_to_num(recent_conc, nan=0.0) > 0)):
        busy = float("nan")
        notes.append("no Invocations x Duration in the last hour while ConcurrentExecutions > 0: "
                     "mean in flight unknown")
    return AliasForecast(
        function_name=series.function_name,
        alias=series.alias,
        issued_at_s=issued_at_s,
        concurrency=concurrency,
        rate_per_min=rate,
        recent_duration_ms=float(dur.mean()) if dur.shape[0] else float("nan"),
        notes=tuple(notes),
        busy_concurrency=busy,
        recent_peak_concurrency=(float(np.nanmax(recent_conc))
                                 if bool(np.isfinite(recent_conc).any()) else float("nan")),
    )
