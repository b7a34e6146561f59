"""Rolling-origin evaluation of the forecaster (for the CLI, the benchmark and the simulator).

Pure: numpy only. At each origin ``t`` every method sees only ``y[: t+1]``; the actual is
``target_series(y)[t]``. Scores: pinball loss and coverage at the planning quantile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from warmers.forecast import (
    ALL_METHODS,
    ForecastConfig,
    choose,
    coverage,
    forecast_candidates,
    pinball_loss,
    target_series,
)

SELECTOR = "selector"


@dataclass(frozen=True, eq=False)
class RollingForecasts:
    """Forecasts at each origin.

    Attributes
    ----------
    origins : np.ndarray
        Shape ``(k,)``, origin indices.
    actual : np.ndarray
        Shape ``(k,)``, the target at each origin.
    predictions : dict of str to np.ndarray
        Method (and ``"selector"``) -> shape ``(k, n_quantiles)``; NaN where unavailable.
    chosen : list of str
        Method the selector picked at each origin.
    """

    origins: np.ndarray
    actual: np.ndarray
    predictions: dict[str, np.ndarray]
    chosen: list[str]
    config: ForecastConfig

    def score(self, method: str, q: float | None = None) -> tuple[float, float]:
        """(pinball loss, coverage) of ``method`` at level ``q`` (default: planning quantile)."""
        q = self.config.planning_quantile if q is None else q
        j = self.config.quantiles.index(q)
        pred = self.predictions[method][:, j]
        return pinball_loss(self.actual, pred, q), coverage(self.actual, pred)


def rolling_forecasts(y: np.ndarray, config: ForecastConfig, origins: np.ndarray) -> RollingForecasts:
    """Forecast at every origin with every method and the selector.

    Parameters
    ----------
    y : np.ndarray
        Shape ``(n,)``, the whole series.
    config : ForecastConfig
    origins : np.ndarray
        Origin indices, each ``< n - config.reach_min + 1`` so the actual is known.

    Raises
    ------
    ValueError
        If an origin has no observed target.
    """
    y = np.asarray(y, dtype=float)
    target = target_series(y, config)
    origins = np.asarray(origins, dtype=int)
    if origins.size and (origins.max() > y.shape[0] - config.reach_min or origins.min() < 0):
        raise ValueError("every origin needs its target window inside the series")
    nq = len(config.quantiles)
    names = [m for m in ALL_METHODS if m in config.methods] + [SELECTOR]
    preds = {m: np.full((origins.shape[0], nq), np.nan) for m in names}
    chosen: list[str] = []
    for i, t in enumerate(origins):
        cands = forecast_candidates(y[: t + 1], config)
        for c in cands:
            preds[c.method][i] = c.values
        if cands:
            best, _ = choose(cands, config.selection_margin)
            preds[SELECTOR][i] = best.values
            chosen.append(best.method)
        else:
            finite = y[: t + 1][np.isfinite(y[: t + 1])]
            preds[SELECTOR][i] = finite.max() if finite.size else 0.0
            chosen.append("fallback_max")
    return RollingForecasts(origins, target[origins], preds, chosen, config)
