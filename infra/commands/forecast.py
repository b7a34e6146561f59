"""``warmstart forecast --trace FILE --function HASH``: forecast against what happened, with a plot.

``FILE`` is an Azure 2019 invocations file (per-function or full-day union format) or one
multi-day series (one column, one count per minute, e.g.
``tests/data/traces/azure2019_14day/<hash>.csv``; the function is the file's name, gaps are
empty cells). Replays one trace function through the warmer's forecaster at rolling origins (each sees only
the past), prints forecast against actual and the pinball loss / coverage of every method at the
planning quantile, and writes a PNG (matplotlib, Agg backend).

Data: Azure Functions Trace 2019 (CC-BY 4.0), Shahrad et al., USENIX ATC 2020.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from infra.commands.common import command

DEFAULT_TRACE = "tests/data/traces/azure2019_fullday_realhash/invocations.csv"


JSON_SCHEMA = """\
--json writes one JSON object to stdout (the table goes away; the plot is still written):
  function        str    the full HashFunction
  trigger         str    the trace's trigger (http, timer, ...)
  minutes         int    minutes in the series
  metric          str    the unit of every value below
  lead_min        int    --lead-min
  reach_min       int    the target is the peak of [t+lead_min, t+reach_min) minutes
  quantile        float  --quantile (the planning quantile)
  origins         list   one object per origin: minute (int, the trace's minute label:
                         minute of day, or minute from the start of a multi-day series), actual,
                         q50, q (the selector's median and planning quantile), naive_q
                         (floats), method (str, the method the selector chose)
  methods         list   one object per method: method (str), pinball (float, the loss
                         at q), coverage (float, share of actuals <= the forecast),
                         vs_seasonal_naive (float or null, pinball / seasonal naive's)
  last            object the forecast at the last minute: method (str), reason (str: why
                         this method, its fitted parameters), notes (list of str: a daily or
                         weekly season the history is too short for)
  plot            str    the PNG written
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from infra.commands.common import (
        existing_file,
        non_negative_int,
        output_file,
        positive_int,
        probability,
    )

    parser.epilog = JSON_SCHEMA
    parser.add_argument("--trace", required=True, type=existing_file,
                        help="Azure 2019 invocations file (.csv or .csv.gz, per-function or "
                             f"union format, e.g. {DEFAULT_TRACE}) or one multi-day series "
                             "(one count per minute per line, e.g. "
                             "tests/data/traces/azure2019_14day/40d07b99...csv)")
    parser.add_argument("--function", required=True,
                        help="HashFunction (or a unique prefix of it)")
    parser.add_argument("--durations", type=existing_file,
                        help="durations file (needed by --metric concurrency, Little's law)")
    parser.add_argument("--metric", choices=("rate", "concurrency"), default="rate",
                        help="invocations per minute, or concurrency = rate x mean duration "
                             "(needs --durations)")
    parser.add_argument("--lead-min", type=positive_int, default=15,
                        help="minutes between the forecast and the window it forecasts")
    parser.add_argument("--window-min", type=positive_int, default=5,
                        help="minutes of the window whose peak is forecast")
    parser.add_argument("--quantile", type=probability, default=0.95, help="planning quantile")
    parser.add_argument("--step-min", type=positive_int, default=15,
                        help="minutes between origins")
    parser.add_argument("--start-min", type=non_negative_int, default=None,
                        help="first origin (default: half of the series)")
    parser.add_argument("--plot", type=output_file, default=None,
                        help="PNG to write, in an existing folder (default "
                             "OUT_DIR/forecast-<hash8>.png)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the tables (schema below)")


@command("warmstart forecast")
def run(args: argparse.Namespace) -> int:
    import numpy as np

    from infra.commands.common import (
        UsageError,
        finite,
        out_dir,
        pick_hash,
        print_json,
        say,
    )
    from warmers.evaluate import rolling_forecasts
    from warmers.forecast import ForecastConfig, ForecastError, forecast_series
    from warmers.series import littles_law_concurrency
    from warmers.traces import TraceFormatError, read_durations, read_invocations

    if args.metric == "concurrency" and args.durations is None:
        raise UsageError("--metric concurrency needs --durations FILE (the trace's durations "
                         "file, e.g. tests/data/traces/azure2019_fullday_realhash/durations.csv)")
    try:
        functions = read_invocations(args.trace)
        name = pick_hash(functions, args.function)
        fn = functions[name]
        y = fn.invocations.astype(float)
        unit = "invocations/min"
        if args.metric == "concurrency":
            stats = read_durations(args.durations).get(name)
            if stats is None:
                raise UsageError(f"--durations {args.durations}: no row for function "
                                 f"{name[:12]}...; give the durations file of the same trace")
            y = littles_law_concurrency(y, stats.average_ms)
            unit = f"concurrency (Little's law, {stats.average_ms:.0f} ms)"
        quantiles = tuple(sorted({0.5, 0.9, 0.95, 0.99, args.quantile}))
        config = ForecastConfig(lead_min=args.lead_min, window_min=args.window_min,
                                quantiles=quantiles, planning_quantile=args.quantile)
    except (FileNotFoundError, TraceFormatError, ForecastError) as exc:
        raise UsageError(f"--trace {args.trace}: {exc}") from exc
    n = y.shape[0]
    start = args.start_min if args.start_min is not None else n // 2
    last = n - config.reach_min
    if not 0 <= start <= last:
        raise UsageError(f"--start-min must be in [0, {last}] for {n} minutes with --lead-min "
                         f"{config.lead_min} and --window-min {config.window_min}, got {start}")
    origins = np.arange(start, last + 1, args.step_min)
    rf = rolling_forecasts(y, config, origins)
    q = config.planning_quantile
    j = quantiles.index(q)
    j50 = quantiles.index(0.5)
    rows: list[dict[str, Any]] = [{"minute": fn.first_minute + int(t), "actual": finite(rf.actual[i]),
             "q50": finite(rf.predictions["selector"][i, j50]),
             "q": finite(rf.predictions["selector"][i, j]),
             "naive_q": finite(rf.predictions["naive"][i, j]), "method": str(rf.chosen[i])}
            for i, t in enumerate(origins)]
    base_loss, _ = rf.score("seasonal_naive")
    methods: list[dict[str, Any]] = []
    for method in rf.predictions:
        if np.isnan(rf.predictions[method][:, j]).all():
            continue
        loss, cov = rf.score(method)
        methods.append({"method": method, "pinball": finite(loss), "coverage": finite(cov),
                        "vs_seasonal_naive": finite(loss / base_loss) if base_loss > 0 else None})
    last = forecast_series(y, config)
    last_doc = {"method": last.method, "reason": last.reason, "notes": list(last.notes)}
    plot = args.plot or out_dir(args) / f"forecast-{name[:8]}.png"
    _plot(plot, y, rf, fn.first_minute, j, j50, q, name, unit)
    if args.json:
        print_json({"function": name, "trigger": fn.trigger, "minutes": int(n), "metric": unit,
                    "lead_min": config.lead_min, "reach_min": config.reach_min, "quantile": q,
                    "origins": rows, "methods": methods, "last": last_doc, "plot": str(plot)})
        say(args, f"wrote {plot}")
        return 0
    print(f"{name} ({fn.trigger}), {n} min, metric {unit}; target = peak of "
          f"[t+{config.lead_min}, t+{config.reach_min}) min; q={q}")
    print(f"{'minute':>6} {'actual':>10} {'q0.5':>10} {'q' + str(q):>10} {'naive q':>10}  method")
    for row in rows:
        print(f"{row['minute']:>6} {_f(row['actual'])} {_f(row['q50'])} {_f(row['q'])} "
              f"{_f(row['naive_q'])}  {row['method']}")
    print(f"\n{'method':<22} {'pinball@q':>10} {'coverage':>9} {'vs s-naive':>10}")
    for m in methods:
        ratio = m["vs_seasonal_naive"]
        print(f"{m['method']:<22} {_or(m['pinball']):>10.4g} {_or(m['coverage']):>9.3f} "
              f"{_or(ratio):>10.3f}")
    print(f"\nat the last minute: {last.method}: {last.reason}")
    print(f"\nwrote {plot}")
    return 0


def _or(value: float | None) -> float:
    return float("nan") if value is None else value


def _f(value: float | None) -> str:
    return f"{_or(value):>10.2f}"


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
    ax.set_xlabel("minute of day (origin)" if len(y) <= 1440 else "minute from the start (origin)")
    ax.set_ylabel(unit)
    ax.set_title(f"{name[:16]}: forecast {rf.config.lead_min} min ahead (Azure Functions 2019, "
                 "Shahrad et al. 2020)", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
