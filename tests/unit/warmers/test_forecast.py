from __future__ import annotations

import numpy as np
import pytest

from warmers.forecast import (
    ForecastConfig,
    ForecastError,
    coverage,
    forecast_alias,
    forecast_candidates,
    forecast_series,
    pinball_loss,
    target_series,
)
from warmers.series import MetricSeries, littles_law_concurrency

CFG = ForecastConfig()


def _check_shape(fc, cfg=CFG):
    assert fc.quantiles == cfg.quantiles
    assert len(fc.values) == len(cfg.quantiles)
    assert all(np.isfinite(fc.values)) and min(fc.values) >= 0
    assert list(fc.values) == sorted(fc.values)


def test_pinball_loss_and_coverage_known_values():
    y = np.array([10.0, 0.0])
    f = np.array([8.0, 2.0])
    # q=0.9: under-forecast by 2 costs 1.8, over-forecast by 2 costs 0.2
    assert pinball_loss(y, f, 0.9) == pytest.approx((1.8 + 0.2) / 2)
    assert coverage(y, f) == 0.5
    assert np.isnan(pinball_loss(np.array([np.nan]), np.array([1.0]), 0.5))


def test_target_is_peak_of_window_after_lead():
    cfg = ForecastConfig(lead_min=2, window_min=2, season_min=60, short_season_min=10)
    y = np.arange(10, dtype=float)
    t = target_series(y, cfg)
    assert t[0] == 3.0  # max(y[2:4])
    assert np.isnan(t[-1]) and np.isfinite(t[10 - 4])


def test_all_zeros_forecasts_zero():
    fc = forecast_series(np.zeros(2000))
    _check_shape(fc)
    assert fc.values == (0.0, 0.0, 0.0, 0.0)
    assert fc.active_fraction == 0.0


def test_all_gaps_is_empty_not_an_error():
    fc = forecast_series(np.full(500, np.nan))
    assert fc.method == "empty" and fc.values == (0.0,) * 4


def test_too_short_history_uses_observed_peak():
    fc = forecast_series(np.array([0.0, 3.0, 1.0]))
    assert fc.method == "fallback_max" and fc.values[-1] == 3.0


def test_one_spike_does_not_inflate_the_median():
    y = np.zeros(1440)
    y[700] = 400.0
    fc = forecast_series(y)
    _check_shape(fc)
    assert fc.at(0.5) == 0.0


def test_gaps_are_tolerated():
    rng = np.random.default_rng(1)
    y = 20 + 5 * np.sin(np.arange(1440) / 100) + rng.normal(0, 1, 1440)
    y[rng.random(1440) < 0.2] = np.nan
    y[1000:1100] = np.nan
    fc = forecast_series(np.clip(y, 0, None))
    _check_shape(fc)
    assert 15 < fc.at(0.95) < 45


def test_step_up_is_followed():
    y = np.concatenate([np.full(1200, 10.0), np.full(240, 50.0)])
    fc = forecast_series(y)
    assert fc.at(0.95) >= 45


def test_daily_step_is_anticipated_only_by_seasonal_methods():
    day = np.full(1440, 5.0)
    day[540:1020] = 100.0  # 09:00-17:00
    y = np.tile(day, 3)
    origin = 2 * 1440 + 540 - 15  # day 3, 15 min before the step: target window after it
    hist = y[: origin + 1]
    hw = forecast_series(hist, methods=("holt_winters",))
    sn = forecast_series(hist, methods=("seasonal_naive",))
    naive = forecast_series(hist, methods=("naive",))
    assert hw.method == "holt_winters" and hw.at(0.95) >= 90
    assert sn.at(0.95) >= 90
    assert naive.at(0.95) < 50


def test_very_sparse_idle_histogram_predicts_the_next_arrival():
    y = np.zeros(1440)
    y[::60] = 1.0  # a timer every hour
    cfg = ForecastConfig()
    just_after = forecast_series(y[: 1320 + 1], cfg, methods=("idle_histogram",))
    assert just_after.method == "idle_histogram" and just_after.at(0.95) == 0.0
    before = forecast_series(y[: 1320 + 44 + 1], cfg, methods=("idle_histogram",))
    # next arrival at minute 1380 = origin + 15: inside [t+15, t+20)
    assert before.at(0.95) == 1.0


def test_very_dense_poisson_quantiles_cover():
    rng = np.random.default_rng(7)
    y = rng.poisson(500, 1800).astype(float)
    target = target_series(y, CFG)
    origins = range(1300, 1780, 10)
    pred = [forecast_series(y[: t + 1]).at(0.95) for t in origins]
    cov = coverage(target[list(origins)], np.array(pred))
    assert cov >= 0.85
    assert 480 < np.median(pred) < 600


def test_real_trace_coverage_and_not_worse_than_naive(realhash_series):
    """GIVEN the 10 busy full-day Azure functions WHEN forecasting every 30 min of the 2nd half
    THEN coverage at q=0.95 is near 0.95 and pinball loss is within 20% of naive's."""
    covs, ratio_num, ratio_den = [], 0.0, 0.0
    for y in realhash_series.values():
        target = target_series(y, CFG)
        origins = list(range(720, 1440 - CFG.reach_min + 1, 30))
        sel = np.array([forecast_series(y[: t + 1]).at(0.95) for t in origins])
        nai = np.array([forecast_series(y[: t + 1], methods=("naive",)).at(0.95)
                        for t in origins])
        covs.append(coverage(target[origins], sel))
        ratio_num += pinball_loss(target[origins], sel, 0.95)
        ratio_den += pinball_loss(target[origins], nai, 0.95)
    assert 0.85 <= float(np.mean(covs)) <= 1.0
    assert ratio_num <= 1.2 * ratio_den


def test_candidates_report_backtest_losses():
    rng = np.random.default_rng(3)
    y = rng.poisson(5, 1440).astype(float)
    cands = forecast_candidates(y)
    names = [c.method for c in cands]
    assert {"naive", "ses", "peak_hold", "ensemble"} <= set(names)
    assert all(np.isfinite(c.selection_loss) for c in cands if c.method != "holt_winters")
    fc = forecast_series(y)
    assert fc.method in names and fc.selection and "pinball" in fc.reason


@pytest.mark.parametrize("bad, msg", [
    (np.array([1.0, -1.0]), "negative"),
    (np.array([[1.0]]), "1-D"),
    (np.array([1.0, np.inf]), "infinite"),
])
def test_bad_series_raise_clear_errors(bad, msg):
    with pytest.raises(ForecastError, match=msg):
        forecast_series(bad)


@pytest.mark.parametrize("kwargs, msg", [
    ({"lead_min": 0}, "lead_min"),
    ({"quantiles": (0.9, 0.5)}, "sorted"),
    ({"planning_quantile": 0.8}, "planning_quantile"),
    ({"methods": ("arima",)}, "unknown"),
    ({"short_season_min": 10}, "seasons"),
    ({"ses_alpha": 0.0}, "ses_alpha"),
])
def test_bad_config_raises(kwargs, msg):
    with pytest.raises(ForecastError, match=msg):
        ForecastConfig(**kwargs)


def test_littles_law_and_alias_forecast_from_counts_only():
    assert littles_law_concurrency(np.array([120.0]), 500.0)[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="duration_ms"):
        littles_law_concurrency(np.array([1.0]), -1.0)
    n = 600
    series = MetricSeries("f", "live", 0.0, invocations=np.full(n, 600.0),
                          concurrency=np.full(n, np.nan), duration_ms=np.full(n, 200.0))
    fc = forecast_alias(series, issued_at_s=36000.0, forecast_rate=True)
    assert fc.concurrency.at(0.5) == pytest.approx(2.0)  # 10/s * 0.2 s
    assert fc.rate_per_min is not None and fc.rate_per_min.at(0.5) == pytest.approx(600.0)
    # the planner never reads the rate: not forecast unless asked for
    assert forecast_alias(series, issued_at_s=36000.0).rate_per_min is None
    assert "Little" in fc.notes[0]
