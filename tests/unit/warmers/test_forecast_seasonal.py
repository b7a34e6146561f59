"""Seasonal forecasting: weekly/daily seasons, fitted parameters, the selector (combination by
default) and its margin, the 14-day real series, aggregated history, and bad input (gaps,
duplicated rows, short series)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from warmers.evaluate import SELECTOR, rolling_forecasts
from warmers.forecast import (
    SELECTION_MARGIN,
    Candidate,
    ForecastConfig,
    ForecastError,
    choose,
    forecast_alias,
    forecast_candidates,
    forecast_series,
)
from warmers.series import MetricSeries, aggregate_max
from warmers.traces import TraceFormatError, read_invocations

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
SERIES_14DAY = (DATA / "azure2019_14day"
                / "40d07b9935b0d765eec41cedf70847d06699c0df3e24e1216e0ca893e6e8f71d.csv")
DAY, WEEK = 1440, 7 * 1440


@pytest.fixture(scope="module")
def y14() -> np.ndarray:
    fn = next(iter(read_invocations(SERIES_14DAY).values()))
    return fn.invocations


def _weekly_shape(weeks: int, seed: int = 0) -> np.ndarray:
    """Poisson counts: busy 09:00-17:00 on weekdays, 10x quieter on the weekend."""
    rng = np.random.default_rng(seed)
    day = np.full(DAY, 2.0)
    day[540:1020] = 30.0
    rate = np.concatenate([day] * 5 + [day / 10] * 2)
    return rng.poisson(np.tile(rate, weeks)).astype(float)


def test_the_14_day_file_reads_as_one_function_of_20160_minutes(y14: np.ndarray) -> None:
    assert y14.shape == (14 * DAY,)
    assert y14.sum() == 154_118  # tests/data/SOURCES.md
    assert y14[5 * DAY: 7 * DAY].sum() < 0.2 * y14[: 2 * DAY].sum()  # the weekend dip


def test_weekly_season_is_used_when_the_history_holds_a_week(y14: np.ndarray) -> None:
    week_plus = forecast_candidates(y14[: WEEK + DAY])
    names = {c.method: c for c in week_plus}
    assert "seasonal_naive_weekly" in names
    assert "season=10080" in names["holt_winters"].detail
    fc = forecast_series(y14[: WEEK + DAY])
    assert not any("weekly season" in n for n in fc.notes)


def test_shorter_than_a_season_falls_back_and_says_so(y14: np.ndarray) -> None:
    fc = forecast_series(y14[: 3 * DAY])
    assert any("weekly season (10080 min) not used: 4320 min" in n for n in fc.notes)
    assert "weekly season" in fc.reason
    assert "seasonal_naive_weekly" not in {m for m, _ in fc.selection}
    short = forecast_series(y14[:600])
    assert any("daily season (1440 min) not used" in n for n in short.notes)
    assert "holt_winters" not in {m for m, _ in short.selection}
    tiny = forecast_series(y14[:30])
    assert tiny.method == "fallback_max" and "shorter than one season" in tiny.reason


def test_parameters_are_fitted_on_the_back_test() -> None:
    """GIVEN a level that jumps every 4 h THEN ses fits a large alpha; GIVEN a steady noisy
    level THEN a small one (both from the grid, named in the detail)."""
    rng = np.random.default_rng(4)
    jumpy = np.repeat(rng.uniform(5, 100, 10), 240) + rng.normal(0, 1, 2400)
    steady = 50 + rng.normal(0, 8, 2400)
    cfg = ForecastConfig(ses_alpha_grid=(0.05, 0.5))

    def alpha(y: np.ndarray) -> str:
        (c,) = forecast_candidates(np.clip(y, 0, None), cfg, methods=("ses",))
        return c.detail.split(",")[0]

    assert alpha(jumpy) == "alpha=0.5"
    assert alpha(steady) == "alpha=0.05"


def test_weekend_quantiles_follow_the_weekly_season() -> None:
    """GIVEN two synthetic weeks (weekend 10x quieter) WHEN forecasting Saturday mid-morning of
    week 3 from the history THEN the q0.95 is near the weekend level, not the weekday's."""
    y = _weekly_shape(3)
    origin = 2 * WEEK + 5 * DAY + 600  # Saturday 10:00 of week 3
    fc = forecast_series(y[: origin + 1])
    weekday_peak = float(np.max(y[origin - DAY + 15: origin - DAY + 20]))
    assert fc.at(0.95) < 0.5 * weekday_peak
    assert fc.at(0.95) < 12.0  # the weekend rate is 3/min here


def _cand(method: str, loss: float, members: tuple[str, ...] = ()) -> Candidate:
    return Candidate(method, np.zeros(4), 0.0, loss, method, np.zeros(10), members=members)


def test_the_selector_keeps_the_combination_unless_a_single_method_beats_it_by_the_margin(
) -> None:
    """GIVEN an ensemble within SELECTION_MARGIN of the best single method THEN it is kept;
    GIVEN one more than the margin behind THEN the best single method is; GIVEN an ensemble
    that pooled one method THEN that method is returned; bad input is refused."""
    a, b = _cand("naive", 1.0), _cand("ses", 1.2)
    assert SELECTION_MARGIN == 0.05
    kept, tested = choose([a, b, _cand("ensemble", 1.0499, ("naive", "ses"))])
    assert (kept.method, tested) == ("ensemble", 3)
    assert choose([a, b, _cand("ensemble", 1.0501, ("naive", "ses"))])[0] is a
    assert choose([a, b, _cand("ensemble", 1.09, ("naive", "ses"))], margin=0.1)[0].method == (
        "ensemble")
    assert choose([a, b, _cand("ensemble", 1.0, ("naive",))])[0] is a
    assert choose([b, a])[0] is a  # without an ensemble: the lowest loss
    untested = _cand("naive", float("nan"))
    assert choose([untested, _cand("ensemble", float("nan"), ("naive", "ses"))]) == (
        untested, 0)
    with pytest.raises(ValueError, match="no candidate"):
        choose([])
    with pytest.raises(ValueError, match="margin must be >= 0"):
        choose([a], margin=-0.1)
    with pytest.raises(ForecastError, match="selection_margin must be in"):
        ForecastConfig(selection_margin=1.5)


def _guarantee_cases(y14: np.ndarray) -> list[tuple[str, np.ndarray]]:
    real = read_invocations(DATA / "azure2019_fullday_realhash" / "invocations.csv")
    sub = read_invocations(DATA / "azure2019_invocations.csv")
    keys = sorted(sub)
    cases = [(f"14day first {t} min", y14[:t])
             for t in (DAY + 200, 3 * DAY, 6 * DAY + 720, WEEK + DAY, 10 * DAY + 333, 14 * DAY)]
    cases += [(f"busy day {i}", fn.invocations[:t])
              for i, fn in enumerate(real.values()) for t in (900, 1440)]
    cases += [(f"8h {i}", sub[keys[i]].invocations[:480]) for i in range(0, len(keys), 37)]
    return cases


@pytest.mark.parametrize("margin", [SELECTION_MARGIN, 0.0, 0.2])
def test_on_the_back_test_the_selector_is_within_the_margin_of_its_best_single_candidate(
        y14: np.ndarray, margin: float) -> None:
    """GIVEN real histories (the 14-day series at prefixes from one day to two weeks, the busy
    one-day functions, 8-hour functions) WHEN the selector chooses THEN its back-test loss is
    at most (1 + margin) x the best single candidate's; the ensemble pools exactly the
    methods within the margin of the best, and its loss is at most their mean (convexity)."""
    cfg = ForecastConfig(selection_margin=margin)
    pooled = 0
    for name, y in _guarantee_cases(y14):
        cands = forecast_candidates(y, cfg)
        singles = {c.method: c.selection_loss for c in cands
                   if c.method != "ensemble" and np.isfinite(c.selection_loss)}
        chosen, _ = choose(cands, margin)
        best = min(singles.values())
        assert chosen.selection_loss <= (1 + margin) * best + 1e-12, name
        (ens,) = [c for c in cands if c.method == "ensemble"]
        within = {m for m, loss in singles.items() if loss <= (1 + margin) * best}
        assert set(ens.members) == within, name
        assert ens.selection_loss <= np.mean([singles[m] for m in within]) + 1e-12, name
        pooled += len(ens.members) > 1
    assert pooled >= 5  # the pool is more than one method in many of these histories


def test_a_zero_back_test_loss_gives_a_note_not_a_warning() -> None:
    """GIVEN the 8-hour function whose best back-test loss was 0 (the ratio the former
    ranking printed divided by it) and an all-zero history WHEN forecast with warnings as
    errors THEN no warning, and the all-zero case says why its ensemble pools every method."""
    sub = read_invocations(DATA / "azure2019_invocations.csv")
    y = sub[sorted(sub)[185]].invocations[:480]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fc = forecast_series(y)
        zero = forecast_series(np.zeros(2000))
    assert np.isfinite(fc.values).all()
    assert zero.method == "ensemble" and zero.values == (0.0, 0.0, 0.0, 0.0)
    assert "candidates with a zero back-test loss (every back-test forecast equal to its " \
           "target)" in zero.reason


@pytest.mark.slow
def test_real_14_day_series_rolled_over_the_second_week(y14: np.ndarray) -> None:
    """GIVEN the real 14-day series WHEN rolled every 2 h over days 8-14 THEN coverage at q0.95
    is near 0.95 and the selector beats the 1-day seasonal naive on summed loss (the full
    15-minute roll and the 7-day baseline are in bench/bench_forecast.py)."""
    cfg = ForecastConfig()
    rf = rolling_forecasts(y14, cfg, np.arange(WEEK + 59, 14 * DAY - cfg.reach_min, 120))
    sel, cov = rf.score(SELECTOR)
    assert 0.88 <= cov <= 1.0
    assert sel < rf.score("seasonal_naive")[0]


def test_aggregated_history_is_forecast_in_its_own_periods(y14: np.ndarray) -> None:
    five = aggregate_max(y14, 5)
    assert five.shape == (14 * DAY // 5,) and five[0] == y14[:5].max()
    fc = forecast_series(five, ForecastConfig(period_min=5))
    assert fc.lead_min == 15 and fc.window_min == 5 and fc.n_history_min == 14 * DAY
    assert "one value per 5 min" in fc.notes[0]
    names = {m for m, _ in fc.selection}
    assert "seasonal_naive_weekly" in names
    hourly = forecast_series(aggregate_max(y14, 60), ForecastConfig(period_min=60))
    assert hourly.lead_min == 60 and hourly.window_min == 60
    assert np.isfinite(hourly.values).all()
    with pytest.raises(ForecastError, match="whole periods"):
        ForecastConfig(period_min=7)
    with pytest.raises(ForecastError, match="period_min"):
        forecast_alias(MetricSeries("f", "live", 0.0, np.ones(100), np.ones(100),
                                    np.ones(100)), issued_at_s=0.0,
                       config=ForecastConfig(period_min=5))


def test_aggregate_max_keeps_gaps_and_refuses_bad_input() -> None:
    y = np.array([1.0, np.nan, 3.0, np.nan, np.nan, 0.0, 2.0])
    assert np.array_equal(aggregate_max(y, 2), [3.0, np.nan, 2.0], equal_nan=True)
    with pytest.raises(ValueError, match="period_min"):
        aggregate_max(y, 0)


def test_a_series_with_gaps_is_forecast_and_gaps_are_not_zeros(y14: np.ndarray) -> None:
    y = y14[: WEEK + DAY].copy()
    y[WEEK: WEEK + 180] = np.nan  # three hours missing, a week after the start
    y[np.random.default_rng(2).random(y.shape[0]) < 0.05] = np.nan
    fc = forecast_series(y)
    assert np.isfinite(fc.values).all() and min(fc.values) >= 0
    assert list(fc.values) == sorted(fc.values)
    filled = forecast_series(np.nan_to_num(y))
    assert fc.values != filled.values  # a gap is not read as a quiet minute


def test_one_series_file_with_gaps_and_bad_cells(tmp_path: Path) -> None:
    ok = tmp_path / "fn-a.csv"
    ok.write_text("0\n1\n\n3\nnan\n2\n")
    (fn,) = read_invocations(ok).values()
    assert fn.hash_function == "fn-a"
    assert np.array_equal(fn.invocations, [1, np.nan, 3, np.nan, 2], equal_nan=True)
    bad = tmp_path / "bad.csv"
    bad.write_text("0\n1\n-2\n")
    with pytest.raises(TraceFormatError, match="bad.csv:3: counts must be finite and >= 0"):
        read_invocations(bad)
    text = tmp_path / "text.csv"
    text.write_text("0\n1\nmany\n")
    with pytest.raises(TraceFormatError, match="text.csv:3: non-numeric count 'many'"):
        read_invocations(text)
    empty = tmp_path / "empty.csv"
    empty.write_text("0\n\n\n")
    with pytest.raises(TraceFormatError, match="no count"):
        read_invocations(empty)


def test_duplicated_rows_in_a_trace(tmp_path: Path) -> None:
    header = "HashOwner,HashApp,HashFunction,Trigger,1,2,3\n"
    same = tmp_path / "same.csv"
    same.write_text(header + "o,a,f1,http,1,2,3\no,a,f1,http,1,2,3\no,a,f2,timer,0,1,0\n")
    read = read_invocations(same)
    assert sorted(read) == ["f1", "f2"]  # an identical repeat is read once
    assert np.array_equal(read["f1"].invocations, [1, 2, 3])
    differ = tmp_path / "differ.csv"
    differ.write_text(header + "o,a,f1,http,1,2,3\no,a,f1,http,1,9,3\n")
    with pytest.raises(TraceFormatError, match=r"differ.csv:3: HashFunction f1\.\.\. repeats "
                                               r"line 2 with different counts"):
        read_invocations(differ)
