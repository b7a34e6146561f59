"""``warmstart forecast --trace FILE --function HASH``: forecast against what happened, with a plot.

Replays one trace function through the warmer's forecaster at rolling origins (each sees only
the past), prints forecast against actual and the pinball loss / coverage of every method at the
planning quantile, and writes a PNG (matplotlib, Agg backend).

Data: Azure Functions Trace 2019 (CC-BY 4.0), Shahrad et al., USENIX ATC 2020.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_TRACE = "tests/data/traces/azure2019_fullday_realhash/invocations.csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", required=True, type=Path,
                        help="Azure 2019 invocations file (.csv or .csv.gz, either format), "
                             f"e.g. {DEFAULT_TRACE}")
    parser.add_argument("--function", required=True,
                        help="HashFunction (or a unique prefix of it)")
    parser.add_argument("--durations", type=Path,
                        help="durations file; with it the metric can be concurrency (Little's law)")
    parser.add_argument("--metric", choices=("rate", "concurrency"), default="rate",
                        help="invocations per minute, or concurrency = rate x mean duration")
    parser.add_argument("--lead-min", type=int, default=15)
    parser.add_argument("--window-min", type=int, default=5)
    parser.add_argument("--quantile", type=float, default=0.95, help="planning quantile")
    parser.add_argument("--step-min", type=int, default=15, help="minutes between origins")
    parser.add_argument("--start-min", type=int, default=None,
                        help="first origin (default: half of the series)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG to write (default out/forecast-<hash8>.png)")


def _pick(functions: Mapping[str, Any], wanted: str) -> str:
    if wanted in functions:
        return wanted
    matches = [k for k in functions if k.startswith(wanted)]
    if len(matches) != 1:
        raise SystemExit(
            f"warmstart forecast: function {wanted!r} matches {len(matches)} functions in the "
            "trace; give more of the hash")
    return str(matches[0])


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from warmers.evaluate import rolling_forecasts
    from warmers.forecast import ForecastConfig, ForecastError
    from warmers.series import littles_law_concurrency
    from warmers.traces import (
        DEFAULT_DURATION_MS,
        TraceFormatError,
        read_durations,
        read_invocations,
    )

    try:
        functions = read_invocations(args.trace)
        name = _pick(functions, args.function)
        fn = functions[name]
        y = fn.invocations.astype(float)
        unit = "invocations/min"
        if args.metric == "concurrency":
            duration = DEFAULT_DURATION_MS
            if args.durations:
                stats = read_durations(args.durations).get(name)
                duration = stats.average_ms if stats else DEFAULT_DURATION_MS
            y = littles_law_concurrency(y, duration)
            unit = f"concurrency (Little's law, {duration:.0f} ms)"
        quantiles = tuple(sorted({0.5, 0.9, 0.95, 0.99, args.quantile}))
        config = ForecastConfig(lead_min=args.lead_min, window_min=args.window_min,
                                quantiles=quantiles, planning_quantile=args.quantile)
    except (FileNotFoundError, TraceFormatError, ForecastError) as exc:
        print(f"warmstart forecast: {exc}")
        return 2
    n = y.shape[0]
    start = args.start_min if args.start_min is not None else n // 2
    last = n - config.reach_min
    if not 0 <= start <= last:
        print(f"warmstart forecast: --start-min must be in [0, {last}] for {n} minutes")
        return 2
    origins = np.arange(start, last + 1, max(1, args.step_min))
    rf = rolling_forecasts(y, config, origins)
    q = config.planning_quantile
    j = quantiles.index(q)
    j50 = quantiles.index(0.5)
    print(f"{name} ({fn.trigger}), {n} min, metric {unit}; target = peak of "
          f"[t+{config.lead_min}, t+{config.reach_min}) min; q={q}")
    print(f"{'minute':>6} {'actual':>10} {'q0.5':>10} {'q' + str(q):>10} {'naive q':>10}  method")
    for i, t in enumerate(origins):
        label = fn.first_minute + int(t)
        print(f"{label:>6} {rf.actual[i]:>10.2f} {rf.predictions['selector'][i, j50]:>10.2f} "
              f"{rf.predictions['selector'][i, j]:>10.2f} {rf.predictions['naive'][i, j]:>10.2f}"
              f"  {rf.chosen[i]}")
    base_loss, _ = rf.score("seasonal_naive")
    print(f"\n{'method':<16} {'pinball@q':>10} {'coverage':>9} {'vs s-naive':>10}")
    for method in rf.predictions:
        if np.isnan(rf.predictions[method][:, j]).all():
            continue
        loss, cov = rf.score(method)
        ratio = loss / base_loss if base_loss > 0 else float("nan")
        print(f"{method:<16} {loss:>10.4g} {cov:>9.3f} {ratio:>10.3f}")

    plot = args.plot or Path("out") / f"forecast-{name[:8]}.png"
    _plot(plot, y, rf, fn.first_minute, j, j50, q, name, unit)
    print(f"\nwrote {plot}")
    return 0


def _plot(path: Path, y: Any, rf: Any, first_minute: int, j: int, j50: int, q: float,
          name: str, unit: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    minutes = first_minute + rf.origins
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.plot([first_minute + i for i in range(len(y))], y, color="0.75", lw=0.8, label="per minute")
    ax.plot(minutes, rf.actual, "k.", ms=4, label="actual target (window peak)")
    ax.fill_between(minutes, rf.predictions["selector"][:, j50], rf.predictions["selector"][:, j],
                    step="mid", alpha=0.3, label=f"selector q0.5..q{q}")
    ax.step(minutes, rf.predictions["selector"][:, j], where="mid", color="tab:blue", lw=1.2,
            label=f"selector q{q}")
    ax.step(minutes, rf.predictions["naive"][:, j], where="mid", color="tab:red", lw=0.9,
            label=f"naive q{q}")
    ax.set_xlabel("minute of day (origin)")
    ax.set_ylabel(unit)
    ax.set_title(f"{name[:16]}: forecast {rf.config.lead_min} min ahead (Azure Functions 2019, "
                 "Shahrad et al. 2020)", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
