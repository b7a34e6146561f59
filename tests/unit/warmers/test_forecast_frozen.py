"""The forecaster's outputs on real histories, frozen: a speed-up must not change them.

``test_forecast_frozen.json`` holds, for each case below, what ``forecast_series`` and
``forecast_candidates`` returned (selected method, quantiles, point, every candidate's back-test
loss, fitted parameters, the ensemble's members and a digest of its back-test forecasts),
computed by ``warmers/forecast.py`` as of the commit recorded in the file. Frozen first from the
forecaster before its back-test was batched (02f4de1) and checked against every speed-up since;
refrozen when the selector became the pooled combination (the ensemble's membership, its
forecasts and the selected method changed on purpose; the single methods' did not). Histories: the 14-day Azure series (whole, prefixes, gaps,
5- and 60-minute aggregates, as concurrency by Little's law), the 10 busy full-day functions
(as they are and repeated 14 days with Poisson resampling, as ``bench/bench_warmer_run.py``
builds them) and 8-hour functions of the Azure 2019 subset (whole and short prefixes, the
simulator's regime), under the default config and one with wider fitting grids.

Regenerate (only when a forecast is meant to change, and say why in the commit):
``.venv/bin/python tests/unit/warmers/test_forecast_frozen.py --freeze``.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from warmers.forecast import (
    ForecastConfig,
    _sliding_kth,
    forecast_alias,
    forecast_candidates,
    forecast_series,
)
from warmers.series import MetricSeries, aggregate_max, littles_law_concurrency
from warmers.traces import read_invocations

HERE = Path(__file__).resolve().parent
FROZEN = HERE / "test_forecast_frozen.json"
DATA = HERE.parents[1] / "data" / "traces"
SERIES_14DAY = (DATA / "azure2019_14day"
                / "40d07b9935b0d765eec41cedf70847d06699c0df3e24e1216e0ca893e6e8f71d.csv")
DAY, WEEK = 1440, 7 * 1440
#: The equivalence bound on every quantile, point and loss (the brief: 1e-9).
TOL = 1e-9

#: ``warmers.simulator.warmstart_policy``'s forecast config (lead = PC preparation, window =
#: the 15-minute planning interval)
SIMULATOR = {"lead_min": 2, "window_min": 15, "planning_quantile": 0.95}
WIDE = {"ses_alpha_grid": (0.05, 0.1, 0.2, 0.5, 0.9), "hw_gamma_grid": (0.1, 0.3, 0.7),
        "peak_window_grid": (30, 60, 120)}


def _with_gaps(y: np.ndarray, gaps: list[tuple[int, int]]) -> np.ndarray:
    out = y.astype(float, copy=True)
    for start, length in gaps:
        out[start: start + length] = np.nan
    return out


def _cases() -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
    """name -> (series, ForecastConfig keyword arguments)."""
    y14 = next(iter(read_invocations(SERIES_14DAY).values())).invocations.astype(float)
    c14 = littles_law_concurrency(y14, 200.0)
    n = y14.shape[0]
    cases: dict[str, tuple[np.ndarray, dict[str, Any]]] = {
        "14day counts": (y14, {}),
        "14day concurrency": (c14, {}),
        "14day counts wide grids": (y14, WIDE),
        "14day first week + day": (y14[: WEEK + DAY], {}),
        "14day first week + day + 333": (y14[: WEEK + DAY + 333], {}),
        "14day first 3 days": (y14[: 3 * DAY], {}),
        "14day first 3 days wide grids": (y14[: 3 * DAY], WIDE),
        "14day first day + 100": (y14[: DAY + 100], {}),
        "14day weekend (first 6.5 days)": (y14[: 6 * DAY + 720], {}),
        "14day gaps in calibration and back-test": (
            _with_gaps(y14, [(n - 200, 30), (n - 1000, 120), (n - 3 * DAY, 600)]), {}),
        "14day gaps, first 3 days": (_with_gaps(y14[: 3 * DAY], [(2 * DAY + 50, 45)]), {}),
        "14day 5-min aggregate": (aggregate_max(y14, 5), {"period_min": 5}),
        "14day 60-min aggregate": (aggregate_max(y14, 60), {"period_min": 60}),
        "14day sqrt scaling only": (y14, {"scalings": ("sqrt",)}),
        "14day ses + holt_winters": (y14, {"methods": ("ses", "holt_winters")}),
        # back-test layouts: the median (no chunking pays), blocks that do not divide the
        # calibration window, and blocks that do
        "14day first 3 days, planning quantile 0.5": (
            y14[: 3 * DAY], {"planning_quantile": 0.5, "quantiles": (0.5, 0.9)}),
        "14day recalibrated every 45 min": (y14, {"recalibrate_every_min": 45}),
        "14day recalibrated every 40 min": (y14, {"recalibrate_every_min": 40}),
        "14day calibration 300 min, gaps": (
            _with_gaps(y14, [(n - 700, 20)]), {"calibration_min": 300}),
    }
    with (DATA / "azure2019_fullday_realhash" / "invocations.csv").open() as fh:
        rows = list(csv.reader(fh))[1:]
    rng = np.random.default_rng(14)
    for i, r in enumerate(rows):
        day = np.array(r[4:], dtype=float)
        cases[f"busy day {i}"] = (littles_law_concurrency(day, 200.0), {})
        if i < 4:
            tiled = rng.poisson(np.tile(day, 14)).astype(float)
            cases[f"busy day {i} x 14 Poisson"] = (littles_law_concurrency(tiled, 200.0), {})
    sub = read_invocations(DATA / "azure2019_invocations.csv")
    keys = sorted(sub)
    for i in range(0, len(keys), len(keys) // 8):
        inv = sub[keys[i]].invocations.astype(float)
        for length in (inv.shape[0], 240, 110):
            cases[f"8h {i} first {length} min"] = (inv[:length], {})
        if i < 3 * (len(keys) // 8):  # the simulator's config (warmstart_policy)
            conc = np.ceil(littles_law_concurrency(inv, 500.0))
            for length in (465, 300, 150, 45):
                cases[f"8h {i} first {length} min, simulator config"] = (conc[:length], SIMULATOR)
    return cases


def _digest(pred: np.ndarray | None) -> list[float] | None:
    if pred is None:
        return None
    finite = pred[np.isfinite(pred)]
    return [float(pred.shape[0]), float(finite.shape[0]), float(finite.sum())]


def outputs(y: np.ndarray, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the forecaster returns for one case, as JSON-able values."""
    config = ForecastConfig(**kwargs)
    fc = forecast_series(y, config)
    cands = forecast_candidates(y, config)
    return {
        "method": fc.method, "values": list(fc.values), "point": fc.point,
        "selection": [[m, loss] for m, loss in fc.selection], "reason": fc.reason,
        "candidates": [{"method": c.method, "values": [float(v) for v in c.values],
                        "point": c.point, "loss": c.selection_loss, "detail": c.detail,
                        "members": list(c.members), "pred": _digest(c.selection_pred)}
                       for c in cands],
    }


def alias_outputs(series: MetricSeries, **kwargs: Any) -> dict[str, Any]:
    fc = forecast_alias(series, issued_at_s=0.0, **kwargs)
    out: dict[str, Any] = {"method": fc.concurrency.method,
                           "values": list(fc.concurrency.values),
                           "point": fc.concurrency.point, "busy": fc.busy_concurrency,
                           "duration_ms": fc.recent_duration_ms, "notes": list(fc.notes)}
    if fc.rate_per_min is not None:
        out["rate"] = {"method": fc.rate_per_min.method, "values": list(fc.rate_per_min.values)}
    return out


def _alias_cases() -> dict[str, MetricSeries]:
    y14 = next(iter(read_invocations(SERIES_14DAY).values())).invocations.astype(float)
    n = y14.shape[0]
    dur = np.full(n, 180.0)
    return {
        "14day alias": MetricSeries("f", "live", 0.0, y14, littles_law_concurrency(y14, dur), dur),
        "14day alias, concurrency from Little's law": MetricSeries(
            "f", "live", 0.0, y14, np.full(n, np.nan), dur),
    }


def _close(got: Any, want: Any, where: str) -> None:
    if isinstance(want, float) and isinstance(got, float):
        if np.isnan(want):
            assert np.isnan(got), f"{where}: {got} != NaN"
        else:
            assert abs(got - want) <= TOL * max(1.0, abs(want)), f"{where}: {got} != {want}"
    elif isinstance(want, list) and isinstance(got, list):
        assert len(got) == len(want), f"{where}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{where}[{i}]")
    elif isinstance(want, dict) and isinstance(got, dict):
        assert set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.fixture(scope="module")
def frozen() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FROZEN.read_text())
    return doc


@pytest.fixture(scope="module")
def cases() -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
    return _cases()


def test_every_case_is_frozen(frozen: dict[str, Any],
                              cases: dict[str, tuple[np.ndarray, dict[str, Any]]]) -> None:
    assert sorted(frozen["series"]) == sorted(cases)
    assert sorted(frozen["alias"]) == sorted(_alias_cases())
    methods = {c["method"] for case in frozen["series"].values() for c in case["candidates"]}
    # the sample exercises every method, and the selector picks more than one
    assert len(methods) == 9, methods
    assert len({case["method"] for case in frozen["series"].values()}) >= 3


def test_forecasts_equal_the_frozen_ones(frozen: dict[str, Any],
                                         cases: dict[str, tuple[np.ndarray, dict[str, Any]]]
                                         ) -> None:
    for name, (y, kwargs) in cases.items():
        _close(outputs(y, kwargs), frozen["series"][name], name)


def test_alias_forecasts_equal_the_frozen_ones(frozen: dict[str, Any]) -> None:
    for name, series in _alias_cases().items():
        want = frozen["alias"][name]
        _close(alias_outputs(series, forecast_rate=True), want, name)
        without = dict(want)
        del without["rate"]
        _close(alias_outputs(series), without, name + " (no rate)")


@pytest.mark.parametrize(("step", "width", "kth"), [
    (60, 480, 456),  # the default back-test: chunks of 60, the 24 largest of each
    (45, 480, 456),  # chunks of gcd 15 < 24: one window at a time
    (40, 480, 239),  # the median
    (7, 21, 20),  # the maximum
    (5, 10, 0),  # the minimum
])
def test_sliding_order_statistic_is_the_sorted_windows(step: int, width: int, kth: int) -> None:
    rng = np.random.default_rng(width + step)
    rows = rng.integers(0, 6, size=(3, 9 * step + width)).astype(float)  # many ties
    got = _sliding_kth(rows, step, width, kth)
    starts = np.arange(0, rows.shape[1] - width + 1, step)
    want = np.stack([np.sort(rows[:, b: b + width], axis=1)[:, kth] for b in starts], axis=1)
    np.testing.assert_array_equal(got, want)


def _freeze(run_cases: Callable[[], dict[str, Any]]) -> None:
    commit = subprocess.run(["git", "log", "-1", "--format=%h", "--", "warmers/forecast.py"],
                            capture_output=True, text=True, check=True,
                            cwd=HERE.parents[2]).stdout.strip()
    doc = {"forecast_py_commit": commit, **run_cases()}
    FROZEN.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--freeze"]:
    _freeze(lambda: {
        "series": {name: outputs(y, kw) for name, (y, kw) in _cases().items()},
        "alias": {name: alias_outputs(s, forecast_rate=True) for name, s in _alias_cases().items()},
    })
