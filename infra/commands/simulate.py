"""``warmstart simulate``: every warm policy over the whole shipped Azure 2019 trace.

Prints the results table, writes a Markdown report, a per-function CSV and a Pareto plot
(cold starts against cost). Costs use the calibration written by ``warmstart calibrate``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACE_DIR = REPO_ROOT / "tests" / "data" / "traces"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE_DIR,
                        help="directory holding azure2019_{invocations,durations,memory}.csv")
    parser.add_argument("--calibration", type=Path, default=None,
                        help="calibration JSON from `warmstart calibrate` (default: the shipped "
                             "warmers/simulator/calibration.json)")
    parser.add_argument("--out", type=Path, default=Path("simulate-out"),
                        help="output directory for simulation.md, functions.csv, pareto.png")
    parser.add_argument("--seed", type=int, default=2019, help="seed of arrivals and durations")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--functions", type=int, default=0,
                        help="simulate only the first N functions (0 = all)")
    parser.add_argument("--minutes", type=int, default=0,
                        help="simulate only the first N minutes (0 = all)")
    parser.add_argument("--fullday", type=int, default=0,
                        help="instead of the 8-hour subset, simulate N full-day series from "
                             "azure2019_fullday_union.csv.gz (durations and memory borrowed "
                             "from the subset's functions)")
    parser.add_argument("--plan-every-min", type=int, default=15,
                        help="minutes between two warmer runs of the warmstart policy")
    parser.add_argument("--no-warmstart", action="store_true",
                        help="baselines only (no forecaster / planner / admission)")


def run(args: argparse.Namespace) -> int:
    from warmers.simulator.calibration import CalibrationError, load_calibration
    from warmers.simulator.constants import TRACE_CITATION
    from warmers.simulator.policies import baseline_policies
    from warmers.simulator.report import (
        markdown_report,
        pareto_plot,
        ratios_markdown,
        text_table,
        write_function_csv,
    )
    from warmers.simulator.run import run_simulation
    from warmers.simulator.trace import TraceFormatError, load_fullday_trace, load_trace

    if (args.jobs < 1 or args.functions < 0 or args.minutes < 0 or args.plan_every_min < 1
            or args.fullday < 0):
        print("error: --jobs and --plan-every-min must be >= 1, --functions/--minutes >= 0",
              file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace_dir)
        if args.fullday:
            trace = load_fullday_trace(args.trace_dir / "azure2019_fullday_union.csv.gz",
                                       trace, limit=args.fullday)
            print(f"full-day series: {trace.n_functions} x {trace.n_minutes} min; durations "
                  "and memory borrowed from the 8-hour subset's functions", file=sys.stderr)
        calibration = load_calibration(args.calibration)
    except FileNotFoundError as exc:
        print(f"error: {exc.filename or exc}: no such file", file=sys.stderr)
        return 2
    except (TraceFormatError, CalibrationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.functions:
        trace = trace.select(list(range(min(args.functions, trace.n_functions))))
    if args.minutes:
        from dataclasses import replace

        trace = replace(trace, counts=trace.counts[:, : args.minutes])
    policies = list(baseline_policies())
    if not args.no_warmstart:
        from warmers.simulator.warmstart_policy import warmstart_variants

        policies.extend(warmstart_variants(args.plan_every_min))
    t0 = time.perf_counter()
    result = run_simulation(trace, policies, calibration, seed=args.seed, jobs=args.jobs)
    result.wall_s = time.perf_counter() - t0
    print(text_table(result))
    print()
    if not args.no_warmstart:
        print(ratios_markdown(result))
        print()
    print("CPU s per policy: " + ", ".join(f"{t.policy} {t.cpu_s:.1f}" for t in result.totals))
    print(f"{trace.n_functions} functions x {trace.n_minutes} min, "
          f"{int(trace.counts.sum()):,} invocations, {len(policies)} policies, "
          f"seed {args.seed}, {args.jobs} job(s): {result.wall_s:.1f} s")
    print(f"calibration: init p50 {calibration.init_ms.p50:.0f} ms, restore p50 "
          f"{calibration.restore_ms.p50:.0f} ms ({calibration.method or 'no method recorded'})")
    print(TRACE_CITATION)
    args.out.mkdir(parents=True, exist_ok=True)
    preamble = (
        f"{trace.n_functions} functions x {trace.n_minutes} minutes, "
        f"{int(trace.counts.sum()):,} invocations, seed {args.seed}; simulated in "
        f"{result.wall_s:.1f} s with {args.jobs} job(s). Calibration: init p50 "
        f"{calibration.init_ms.p50:.0f} ms / p95 {calibration.init_ms.p95:.0f} ms, restore p50 "
        f"{calibration.restore_ms.p50:.0f} ms."
    )
    (args.out / "simulation.md").write_text(
        markdown_report(result, title="warmstart simulate", preamble=preamble,
                        policy="warmstart" if not args.no_warmstart else "-"),
        encoding="utf-8",
    )
    write_function_csv(result, args.out / "functions.csv")
    pareto_plot(result, args.out / "pareto.png")
    print(f"wrote {args.out / 'simulation.md'}, {args.out / 'functions.csv'}, "
          f"{args.out / 'pareto.png'}")
    return 0
