"""Quantile forecasts of per-minute load (concurrency, invocation rate) with a lead time.

Pure: numpy only, no I/O, no clock. The warmer and the policy simulator both call
:func:`forecast_series` / :func:`forecast_alias`.

What is forecast
----------------
At origin ``t`` (index of the last observed minute) the *target* is the peak of the series over
the window of ``window_min`` minutes that starts ``lead_min`` minutes ahead::

    target[t] = max(y[t + lead_min : t + lead_min + window_min])

because provisioned concurrency requested now is usable only after a minute or two of
preparation plus allocation (https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html),
and it must then cover the peak of the minutes it is meant for.

How
---
Each point method below gives ``point[t]``; the quantiles are ``point[t] + quantile(residuals)``
over the most recent ``calibration_min`` residuals ``target[s] - point[s]`` already observed at
``t`` (split conformal prediction, with the finite-sample ``ceil((m+1) q) / m`` level), clipped at
zero. The idle-time histogram method is distributional and needs no residuals.

* ``naive``          peak of the last ``window_min`` minutes (persistence).
* ``seasonal_naive`` the target one season ago; season = ``season_min`` (1 day) when the history
  holds a season plus calibration, else ``short_season_min`` (1 hour).
* ``ses``            simple exponential smoothing of the last-window peak.
* ``holt_winters``   additive daily season without trend, ETS(A,N,A): a level smoothed like
  ``ses`` on the de-seasonalised series plus a seasonal profile smoothed across days. Needs a
  full day of history before the calibration window.
* ``seasonal_median`` median of the targets 1..``seasons_in_median`` seasons ago.
* ``peak_hold``      peak of the last ``peak_window_min`` minutes.
* ``idle_histogram`` Shahrad et al.'s idle-time (inter-arrival) histogram for sparse functions:
  the probability that the next arrival falls in the target window given the time since the
  last one, mixed with the empirical distribution of non-zero targets.

* ``ensemble``       mean of the conformal quantiles of the point methods above (quantile
  averaging).

:func:`forecast_series` back-tests every available method over the last ``selection_min``
origins (pinball loss at the planning quantile, out of sample) and keeps the winner. On the Azure
trace the selector beats every single method on the geometric mean of per-function loss ratios,
but not on summed losses, which the busiest functions dominate and where naive/ses do as well
(``bench/bench_forecast.py``; results in ``bench/results/bench_forecast.md``).

References
----------
- Koenker, R. and Bassett, G. (1978). Regression quantiles. Econometrica 46(1) (pinball loss).
- Lei, J. et al. (2018). Distribution-free predictive inference for regression. JASA 113(523)
  (split conformal quantiles).
- Hyndman, R. J. and Athanasopoulos, G. Forecasting: Principles and Practice, 3rd ed., ch. 5.2
  (naive, seasonal naive) and 8 (exponential smoothing, ETS(A,N,A)). https://otexts.com/fpp3/
- Shahrad, M. et al. (2020). Serverless in the Wild: Characterizing and Optimizing the Serverless
  Workload at a Large Cloud Provider. USENIX ATC 2020 (idle-time histogram policy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from warmers.series import MetricSeries

Method = Literal[
    "naive", "seasonal_naive", "seasonal_median", "ses", "holt_winters", "peak_hold",
    "idle_histogram", "ensemble",
]

ALL_METHODS: tuple[Method, ...] = (
    "naive",
    "seasonal_naive",
    "seasonal_median",
    "ses",
    "holt_winters",
    "peak_hold",
    "idle_histogram",
    "ensemble",
)
#: Members of the ``ensemble`` (mean of their conformal quantiles).
ENSEMBLE_MEMBERS: tuple[Method, ...] = ("naive", "seasonal_naive", "ses", "holt_winters", "peak_hold")
#: Methods used only as yardsticks in reports; they stay in the selector's pool too.
BASELINES: tuple[Method, ...] = ("naive", "seasonal_naive")


class ForecastError(ValueError):
    """The input series or configuration cannot be forecast (the message says why)."""


@dataclass(frozen=True)
class ForecastConfig:
    """Knobs of the forecaster. All durations are in minutes (the series resolution).

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
    season_min, short_season_min : int
        Daily season, and the fallback season when there is less than a day of history.
    calibration_min : int
        Number of most recent residuals used for the conformal quantiles.
    selection_min : int
        Number of most recent origins used to back-test and pick the method (shortened for short
        histories so that ``min_calibration`` residuals come before it).
    min_calibration : int
        Fewer usable residuals than this and a method is not used.
    ses_alpha : float
        Smoothing constant of ``ses`` and of the ``holt_winters`` level, in (0, 1].
    hw_gamma : float
        Smoothing constant of the ``holt_winters`` seasonal profile across days, in (0, 1].
    peak_window_min : int
        Window of ``peak_hold``.
    idle_min_samples : int
        Fewest idle times (gaps between active minutes) for ``idle_histogram``.
    max_history_min : int
        Longest history used (older minutes are ignored); 14 days by default.
    methods : tuple of str
        Candidate methods for the selector.

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
    calibration_min: int = 480
    selection_min: int = 480
    min_calibration: int = 30
    ses_alpha: float = 0.2
    hw_gamma: float = 0.3
    peak_window_min: int = 60
    seasons_in_median: int = 4
    idle_min_samples: int = 5
    max_history_min: int = 14 * 1440
    methods: tuple[Method, ...] = ALL_METHODS

    def __post_init__(self) -> None:
        ints = ("lead_min", "window_min", "season_min", "short_season_min", "calibration_min",
                "selection_min", "min_calibration", "peak_window_min", "idle_min_samples",
                "max_history_min")
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
        unknown = set(self.methods) - set(ALL_METHODS)
        if unknown or not self.methods:
            raise ForecastError(
                f"ForecastConfig.methods must be a non-empty subset of {ALL_METHODS}, "
                f"unknown: {sorted(unknown)}"
            )
        for season in (self.season_min, self.short_season_min):
            if season < self.lead_min + self.window_min:
                raise ForecastError(
                    "ForecastConfig seasons must be >= lead_min + window_min so the seasonal "
                    f"target is already observed (got {season})"
                )

    @property
    def reach_min(self) -> int:
        """Minutes from origin to the end of the target window, inclusive of the origin."""
        return self.lead_min + self.window_min


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
        One line on why this method.
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
    """Forecasts of one alias at one origin (``issued_at_s``, epoch seconds, passed in)."""

    function_name: str
    alias: str
    issued_at_s: float
    concurrency: QuantileForecast
    rate_per_min: QuantileForecast
    recent_duration_ms: float
    #: concurrency per invocation/min, for converting rate quantiles (NaN when unknown)
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: mean requests in flight over the recent hour (Little's law, :func:`busy_concurrency`);
    #: the planner's utilization estimate. NaN when unknown.
    busy_concurrency: float = float("nan")


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
    y = validate_series(y)
    n = y.shape[0]
    out = np.full(n, np.nan)
    m = _window_max(y, config.window_min)  # m[i] = max y[i : i+window]
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


# --------------------------------------------------------------------------- point methods


def _point_forecasts(y: np.ndarray, target: np.ndarray, method: Method,
                     config: ForecastConfig) -> tuple[np.ndarray, str]:
    """``point[t]`` for every origin ``t`` using only ``y[: t+1]``; NaN where unavailable."""
    n = y.shape[0]
    if method == "naive":
        return _ffill(_last_window_peak(y, config.window_min)), "peak of the last window"
    if method == "peak_hold":
        return _ffill(_last_window_peak(y, config.peak_window_min)), (
            f"peak of the last {config.peak_window_min} min")
    if method == "ses":
        last_peak = _last_window_peak(y, config.window_min)
        return _ses(_ffill(last_peak), config.ses_alpha), f"alpha={config.ses_alpha}"
    if method == "seasonal_naive":
        season = _season_for(n, config)
        out = np.full(n, np.nan)
        if n > season:
            out[season:] = target[: n - season]
        return out, f"season={season} min"
    if method == "seasonal_median":
        season = _season_for(n, config)
        k_max = config.seasons_in_median
        if n <= season:
            return np.full(n, np.nan), "needs one season"
        lags = np.full((k_max, n), np.nan)
        for k in range(1, k_max + 1):
            if n > k * season:
                lags[k - 1, k * season:] = target[: n - k * season]
        return _column_nanmedian(lags), f"median of the last {k_max} seasons of {season} min"
    if method == "holt_winters":
        season = config.season_min
        out = np.full(n, np.nan)
        if n < 2 * season:
            return out, "needs two seasons"
        x = _ffill(_last_window_peak(y, config.window_min))
        tgt = _ffill(target) if np.isfinite(target).any() else target
        sea_now = np.full(n, np.nan)
        sea_fut = np.full(n, np.nan)
        num_now = np.zeros(n)
        num_fut = np.zeros(n)
        den = np.zeros(n)
        g = config.hw_gamma
        for k in range(1, n // season + 1):
            w = g * (1.0 - g) ** (k - 1)
            shift = k * season
            num_now[shift:] += w * x[: n - shift]
            # the target k seasons ago ends at t + reach - k*season <= t (observed), and only
            # targets whose window lies inside the history count
            fut = tgt[: n - shift]
            num_fut[shift:] += w * np.where(np.isnan(fut), x[: n - shift], fut)
            den[shift:] += w
        ok = den > 0
        sea_now[ok] = num_now[ok] / den[ok]
        sea_fut[ok] = num_fut[ok] / den[ok]
        level = np.full(n, np.nan)
        start = season
        level[start:] = _ses(x[start:] - sea_now[start:], config.ses_alpha)
        out[start:] = level[start:] + sea_fut[start:]
        return out, f"season={season} min, alpha={config.ses_alpha}, gamma={g}"
    raise ForecastError(f"no point forecast for method {method!r}")


def _sliced_point_forecasts(y: np.ndarray, target: np.ndarray, method: Method,
                            config: ForecastConfig) -> tuple[np.ndarray, str]:
    """:func:`_point_forecasts` on the shortest tail of the history that gives the same values
    over the calibration and selection windows (a 14-day history costs what a day does)."""
    n = y.shape[0]
    tail = (config.calibration_min + config.selection_min + 2 * config.reach_min
            + config.peak_window_min + _ses_reach(config.ses_alpha))
    season = _season_for(n, config)
    extra = {"seasonal_naive": season, "seasonal_median": config.seasons_in_median * season,
             "holt_winters": n}.get(method, 0)
    keep = tail + extra
    if keep >= n or method == "seasonal_naive" and season != _season_for(keep, config):
        return _point_forecasts(y, target, method, config)
    part, detail = _point_forecasts(y[n - keep:], target[n - keep:], method, config)
    out = np.full(n, np.nan)
    out[n - keep:] = part
    return out, detail


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


def _season_for(n: int, config: ForecastConfig) -> int:
    if n >= config.season_min + config.reach_min + config.min_calibration:
        return config.season_min
    return config.short_season_min


def _conformal_offsets(residuals: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Split-conformal offsets: the ``ceil((m+1) q)/m`` empirical quantile of the residuals."""
    m = residuals.shape[0]
    levels = np.minimum(1.0, np.ceil((m + 1) * np.asarray(quantiles)) / m)
    return np.asarray(np.quantile(residuals, levels, method="higher"), dtype=float)


# --------------------------------------------------------------------------- idle-time histogram


def _idle_histogram_quantiles(y: np.ndarray, target: np.ndarray, origins: np.ndarray,
                              fit_end: int, config: ForecastConfig,
                              quantiles: tuple[float, ...]) -> np.ndarray | None:
    """Quantiles at each origin from the idle-time histogram fitted on ``y[: fit_end+1]``.

    Returns shape ``(len(origins), len(quantiles))`` or None when there are too few idle times.
    """
    active = np.nan_to_num(y, nan=0.0) > 0
    act_idx = np.flatnonzero(active[: fit_end + 1])
    if act_idx.shape[0] < config.idle_min_samples + 1:
        return None
    idle = np.sort(np.diff(act_idx))  # minutes between successive active minutes
    n_idle = idle.shape[0]
    # targets whose window ended by fit_end
    known = target[: max(0, fit_end - config.reach_min + 2)]
    known = known[np.isfinite(known)]
    positive = np.sort(known[known > 0])
    if positive.shape[0] == 0:
        positive = np.sort(y[: fit_end + 1][active[: fit_end + 1]])
    p_uncond = float(np.mean(known > 0)) if known.shape[0] else float(np.mean(active))

    def survival(k: np.ndarray) -> np.ndarray:
        """P(idle > k)."""
        return np.asarray((n_idle - np.searchsorted(idle, k, side="right")) / n_idle,
                          dtype=float)

    # last active index at or before each origin
    last_active = np.where(active, np.arange(y.shape[0]), -1)
    np.maximum.accumulate(last_active, out=last_active)
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
        vals = np.quantile(positive, level, method="higher")
        out[:, j] = np.where(need > 0, vals, 0.0)
    return out


# --------------------------------------------------------------------------- selection


def forecast_candidates(y: np.ndarray, config: ForecastConfig | None = None,
                        methods: tuple[Method, ...] | None = None) -> list[Candidate]:
    """Every available method's quantile forecast at the last origin, with its back-test loss.

    Parameters
    ----------
    y : np.ndarray
        Shape ``(n,)``, one value per minute, oldest first; NaN = gap.
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
    config = config or ForecastConfig()
    y = validate_series(y)[-config.max_history_min:]
    n = y.shape[0]
    methods = methods or config.methods
    target = target_series(y, config)
    t_end = n - 1
    last_known = n - config.reach_min  # last origin whose target is observed
    q_plan = config.planning_quantile
    q_idx = config.quantiles.index(q_plan)
    # short histories: shorten the back-test so that min_calibration residuals precede it
    sel_len = min(config.selection_min,
                  max(0, last_known + 1 - config.reach_min - config.min_calibration))
    sel_start = last_known - sel_len + 1 if sel_len > 0 else last_known + 1
    cal_end = sel_start - config.reach_min  # last residual observed before selection starts
    out: list[Candidate] = []
    for method in ALL_METHODS:
        if method not in methods:
            continue
        if method == "ensemble":
            continue
        if method == "idle_histogram":
            cand = _idle_candidate(y, target, config, last_known, sel_start, q_idx)
            if cand is not None:
                out.append(cand)
            continue
        point, detail = _sliced_point_forecasts(y, target, method, config)
        if not np.isfinite(point[t_end]):
            continue
        resid = target - point
        final = resid[max(0, last_known - config.calibration_min + 1): last_known + 1]
        final = final[np.isfinite(final)]
        if final.shape[0] < config.min_calibration:
            continue
        values = np.maximum(0.0, point[t_end] + _conformal_offsets(final, config.quantiles))
        values = np.maximum.accumulate(values)
        loss = float("nan")
        sel_pred = None
        if sel_start > 0 and cal_end > 0:
            cal = resid[max(0, cal_end - config.calibration_min + 1): cal_end + 1]
            cal = cal[np.isfinite(cal)]
            if cal.shape[0] >= config.min_calibration:
                off = _conformal_offsets(cal, (q_plan,))[0]
                pred = np.maximum(0.0, point[sel_start: last_known + 1] + off)
                loss = pinball_loss(target[sel_start: last_known + 1], pred, q_plan)
                sel_pred = pred
        out.append(Candidate(method, values, float(point[t_end]), loss, detail, sel_pred))
    if "ensemble" in methods:
        members = [c for c in out if c.method in ENSEMBLE_MEMBERS]
        if len(members) >= 2:
            out.append(_ensemble(members, target[max(0, sel_start): last_known + 1], q_plan))
    return out


def _ensemble(members: list[Candidate], actual: np.ndarray, q_plan: float) -> Candidate:
    """Quantile averaging (Vincentisation) of the members' conformal quantiles."""
    values = np.mean([c.values for c in members], axis=0)
    point = float(np.mean([c.point for c in members]))
    preds = [c.selection_pred for c in members]
    loss, sel_pred = float("nan"), None
    if all(p is not None and p.shape == actual.shape for p in preds):
        sel_pred = np.mean(np.stack(preds), axis=0)  # type: ignore[arg-type]
        loss = pinball_loss(actual, sel_pred, q_plan)
    names = "+".join(c.method for c in members)
    return Candidate("ensemble", values, point, loss, f"mean of {names}", sel_pred)


def _idle_candidate(y: np.ndarray, target: np.ndarray, config: ForecastConfig, last_known: int,
                    sel_start: int, q_idx: int) -> Candidate | None:
    n = y.shape[0]
    final = _idle_histogram_quantiles(y, target, np.array([n - 1]), n - 1, config,
                                      config.quantiles)
    if final is None:
        return None
    values = np.maximum.accumulate(final[0])
    loss = float("nan")
    fit_end = sel_start - 1
    if sel_start > 0 and last_known >= sel_start:
        origins = np.arange(sel_start, last_known + 1)
        pred = _idle_histogram_quantiles(y, target, origins, fit_end, config,
                                         (config.planning_quantile,))
        if pred is not None:
            loss = pinball_loss(target[origins], pred[:, 0], config.planning_quantile)
            return Candidate("idle_histogram", values, float(values[0]), loss,
                             "Shahrad et al. 2020 idle-time histogram", pred[:, 0])
    return Candidate("idle_histogram", values, float(values[0]), loss,
                     "Shahrad et al. 2020 idle-time histogram")


def forecast_series(y: np.ndarray, config: ForecastConfig | None = None, *,
                    metric: str = "concurrency",
                    methods: tuple[Method, ...] | None = None) -> QuantileForecast:
    """Forecast quantiles of the peak of ``y`` in the target window; pick the best method.

    Parameters
    ----------
    y : np.ndarray
        Shape ``(n,)``, one value per minute, oldest first, >= 0; NaN = gap.
    config : ForecastConfig, optional
    metric : str
        Name stored on the result.
    methods : tuple of str, optional
        Restrict the pool (a single method forces it).

    Returns
    -------
    QuantileForecast
        The back-test winner (lowest pinball loss at the planning quantile; ties go to the
        earlier method in ``ALL_METHODS``). Methods without a back-test are used only when no
        method has one. With too little history: the observed peak (``fallback_max``); with no
        observed value at all: zeros (``empty``).

    Raises
    ------
    ForecastError
        On a malformed series.
    """
    config = config or ForecastConfig()
    arr = validate_series(y, name=metric)[-config.max_history_min:]
    finite = arr[np.isfinite(arr)]
    n = arr.shape[0]
    active = float(np.mean(finite > 0)) if finite.shape[0] else 0.0
    base = {"metric": metric, "lead_min": config.lead_min, "window_min": config.window_min,
                "quantiles": config.quantiles, "n_history_min": n, "active_fraction": active}
    if finite.shape[0] == 0:
        zeros = tuple(0.0 for _ in config.quantiles)
        return QuantileForecast(method="empty", values=zeros, point=0.0,
                                reason="no observed minute: nothing to forecast", **base)
    cands = forecast_candidates(arr, config, methods)
    if not cands:
        peak = float(finite.max())
        return QuantileForecast(
            method="fallback_max", values=tuple(peak for _ in config.quantiles), point=peak,
            reason=f"{n} min of history is too short to calibrate: using the observed peak",
            **base)
    best, tested = choose(cands)
    selection = tuple((c.method, round(float(c.selection_loss), 6)) for c in cands)
    if tested:
        reason = (f"{best.method} ({best.detail}) had the lowest back-test pinball loss "
                  f"{best.selection_loss:.4g} at q={config.planning_quantile} of {tested} "
                  f"methods over {config.selection_min} min")
    else:
        reason = f"{best.method} ({best.detail}): history too short to back-test a choice"
    return QuantileForecast(method=best.method, values=tuple(float(v) for v in best.values),
                            point=best.point, selection=selection, reason=reason, **base)


def choose(cands: list[Candidate]) -> tuple[Candidate, int]:
    """The candidate with the lowest back-test loss (ties: earlier in ``ALL_METHODS``).

    Returns the winner and how many candidates had a back-test; with none back-tested, the
    first candidate.

    Raises
    ------
    ValueError
        On an empty list.
    """
    if not cands:
        raise ValueError("no candidate to choose from")
    tested = [c for c in cands if np.isfinite(c.selection_loss)]
    if not tested:
        return cands[0], 0
    return min(tested, key=lambda c: c.selection_loss), len(tested)


def forecast_alias(series: MetricSeries, *, issued_at_s: float,
                   config: ForecastConfig | None = None) -> AliasForecast:
    """Forecast concurrency and invocation rate of one alias.

    Parameters
    ----------
    series : MetricSeries
        1-minute history; its last minute is the origin.
    issued_at_s : float
        Epoch seconds of "now" (passed in; the forecaster never reads the clock).
    config : ForecastConfig, optional

    Returns
    -------
    AliasForecast
        Concurrency by the back-test winner; the invocation rate by the same method.
    """
    config = config or ForecastConfig()
    notes: list[str] = []
    conc = series.concurrency
    if np.isnan(conc).all() and not np.isnan(series.invocations).all():
        from warmers.series import littles_law_concurrency

        conc = littles_law_concurrency(series.invocations, series.duration_ms)
        notes.append("concurrency from Little's law (rate x duration)")
    dur = series.duration_ms[-60:]
    dur = dur[np.isfinite(dur)]
    concurrency = forecast_series(conc, config, metric="concurrency")
    # the rate reuses the method chosen for concurrency (proportional under Little's law), so
    # the back-test runs once per alias
    rate_methods: tuple[Method, ...] | None = None
    if concurrency.method == "ensemble":
        rate_methods = (*ENSEMBLE_MEMBERS, "ensemble")
    elif concurrency.method in ALL_METHODS:
        rate_methods = (concurrency.method,)
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
        rate_per_min=forecast_series(series.invocations, config, metric="rate_per_min",
                                     methods=rate_methods),
        recent_duration_ms=float(dur.mean()) if dur.shape[0] else float("nan"),
        notes=tuple(notes),
        busy_concurrency=busy,
    )
