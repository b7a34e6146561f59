"""``warmstart simulate``: every warm policy over the whole shipped Azure 2019 trace.

Prints the results table, writes a Markdown report, an HTML report (the replay / demo report's
template: a summary in words, the styled table, the Pareto plot with its caption), a
per-policy CSV (``policies.csv``, for other tools), a per-function CSV and a Pareto plot (cold
starts against cost). Costs use the calibration written by ``warmstart calibrate``.

The headline is *failed answers*: requests shed, answered degraded, or answered later than
their SLA although their warm duration met it; requests slower than their SLA even when warm
(the *tail*, the same under every policy) are counted apart.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from itertools import islice
from pathlib import Path

from infra.commands.common import command

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACE_DIR = REPO_ROOT / "tests" / "data" / "traces"


JSON_SCHEMA = """\
--json writes one JSON object to stdout (the tables go away; the files are still written):
  functions, minutes, invocations, seed, jobs   int
  wall_s                                        float   simulation wall time, s
  engine                                        str     local or dask
  quantile_relative_accuracy                    float   DDSketch bound of every p50/p95/p99
  chunks, largest_chunk_invocations             int     time chunks simulated; the largest
  worker_peak_rss_mb                            object  worker -> peak resident set, MB
  calibration     object  init_p50_ms, init_p95_ms, restore_p50_ms (float), method (str)
  policies        list    one object per policy:
    policy                               str
    requests, cold_starts, env_inits, failed_answers, late, degraded, shed,
    overflowed, tail, sla_breaches, pings, functions     int
      (failed_answers = late + degraded + shed; tail: warm duration over the SLA, apart;
       sla_breaches: every late answer, the tail's included)
    cold_start_pct                       float, %
    p50_ms, p95_ms, p99_ms               float or null, ms (within 1 %, DDSketch)
    idle_gb_s                            float, GB-s
    lambda_usd, pc_usd, endpoint_usd, total_usd  float, USD (pc_usd is part of lambda_usd)
    cost_usd                             object  Lambda USD by item
    decisions                            object  plan actions counted
    strategies                           object  functions per deployed cold-start strategy
                                                 (warmstart: provisioned / snapstart)
  files           object  markdown, csv, policies, pareto, report (str): the paths written
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from infra.commands.common import existing_file, non_negative_int, positive_int

    parser.epilog = JSON_SCHEMA
    parser.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE_DIR,
                        help="directory holding azure2019_{invocations,durations,memory}.csv "
                             "(default: tests/data/traces)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--days", type=Path, default=None,
                     help="directory of the published Azure 2019 day files "
                          "(invocations_per_function_md.anon.dNN.csv, durations, memory), "
                          "streamed one function at a time")
    src.add_argument("--parquet", type=Path, default=None,
                     help="directory of Parquet shards (warmers.simulator.sources schema)")
    parser.add_argument("--skip-unprofiled", action="store_true",
                        help="with --days: skip functions without a duration or memory row")
    parser.add_argument("--calibration", type=existing_file, default=None,
                        help="calibration JSON from `warmstart calibrate` (default: the shipped "
                             "warmers/simulator/calibration.json)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory for simulation.md, report.html, policies.csv (one "
                             "row per policy), functions.csv, pareto.png "
                             "(default: OUT_DIR/simulate)")
    parser.add_argument("--seed", type=int, default=2019, help="seed of arrivals and durations")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="worker processes (local pool, or the local Dask cluster's workers)")
    parser.add_argument("--engine", choices=("local", "dask"), default="local",
                        help="local process pool (default) or Dask (the dist extra); same results")
    parser.add_argument("--dask-address", default=None,
                        help="scheduler of a running Dask cluster (default: start a local one)")
    parser.add_argument("--chunk-invocations", type=positive_int, default=None,
                        help="most invocations of one function simulated at once (the memory "
                             "bound per worker; default 500,000)")
    parser.add_argument("--functions", type=non_negative_int, default=0,
                        help="simulate only the first N functions (0 = all)")
    parser.add_argument("--minutes", type=non_negative_int, default=0,
                        help="simulate only the first N minutes (0 = all)")
    parser.add_argument("--fullday", type=non_negative_int, default=0,
                        help="instead of the 8-hour subset, simulate N full-day series from "
                             "azure2019_fullday_union.csv.gz (durations and memory borrowed "
                             "from the subset's functions; 0 = no)")
    parser.add_argument("--plan-every-min", type=positive_int, default=15,
                        help="minutes between two warmer runs of the warmstart policy")
    parser.add_argument("--strategy", choices=("auto", "provisioned", "snapstart"),
                        default="auto",
                        help="the warmstart policy's cold-start strategy per function: auto "
                             "(default: SnapStart only where an on-demand cold start would "
                             "answer more than 0.1%% of requests late, warmers.strategy; the "
                             "per-function CSV's strategy column), or one for every function")
    parser.add_argument("--no-warmstart", action="store_true",
                        help="baselines only (no forecaster / planner / admission)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the tables (schema below)")


@command("warmstart simulate")
def run(args: argparse.Namespace) -> int:
    from infra.commands.common import UsageError, out_dir, print_json
    from warmers.simulator.calibration import SimulatorCalibrationError, load_calibration
    from warmers.simulator.constants import TRACE_CITATION
    from warmers.simulator.policies import baseline_policies
    from warmers.simulator.report import (
        markdown_report,
        pareto_plot,
        ratios_markdown,
        text_table,
        write_function_csv,
        write_policies_csv,
    )
    from warmers.simulator.stream import iter_fullday_series
    from warmers.simulator.trace import TraceFormatError, load_trace

    out = args.out or out_dir(args) / "simulate"
    info = sys.stderr if args.json else sys.stdout
    from warmers.simulator.sources import DayFiles, iter_parquet_series
    from warmers.simulator.stream import FunctionSeries, series_of_trace

    notes: list[str] = []
    series: Iterable[FunctionSeries]
    try:
        if args.days is not None:
            src = DayFiles(args.days, skip_unprofiled=args.skip_unprofiled)
            notes = src.notes
            series = src
            print(f"day files: {src.n_functions} functions x {len(src.days)} day(s) "
                  f"{src.days}", file=sys.stderr)
        elif args.parquet is not None:
            series = iter_parquet_series(args.parquet)
        else:
            series = series_of_trace(load_trace(args.trace_dir))
        if args.fullday:
            trace = load_trace(args.trace_dir)
            series = iter_fullday_series(args.trace_dir / "azure2019_fullday_union.csv.gz",
                                         trace, limit=args.fullday)
            print(f"full-day series: up to {args.fullday} x 1440 min, none skipped; durations "
                  "and memory borrowed from the 8-hour subset's functions", file=sys.stderr)
        calibration = load_calibration(args.calibration)
    except FileNotFoundError as exc:
        raise UsageError(f"{_input(args)}: {exc.filename or exc}: no such file") from exc
    except TraceFormatError as exc:
        raise UsageError(f"{_input(args)}: {exc}") from exc
    except SimulatorCalibrationError as exc:
        raise UsageError(f"--calibration {args.calibration or 'default'}: {exc}") from exc
    if args.functions:
        series = islice(series, args.functions)
    if args.minutes:
        series = (replace(s, counts=s.counts[: args.minutes]) for s in series)
    policies = list(baseline_policies())
    if not args.no_warmstart:
        from warmers.simulator.warmstart_policy import warmstart_variants

        policies.extend(warmstart_variants(args.plan_every_min, strategy=args.strategy))
    t0 = time.perf_counter()
    from warmers.simulator.run import EngineUnavailable, run_series
    from warmers.simulator.stream import CHUNK_INVOCATIONS

    try:
        result = run_series(
            series, policies, calibration, seed=args.seed, jobs=args.jobs, engine=args.engine,
            dask_address=args.dask_address,
            chunk_invocations=args.chunk_invocations or CHUNK_INVOCATIONS)
    except EngineUnavailable as exc:
        raise UsageError(f"--engine {args.engine}: {exc}") from exc
    except TraceFormatError as exc:  # found while streaming
        raise UsageError(f"{_input(args)}: {exc}") from exc
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    n_inv = result.totals[0].requests if result.totals else 0
    result.wall_s = time.perf_counter() - t0
    if not args.json:
        print(text_table(result))
        print()
        if not args.no_warmstart:
            print(ratios_markdown(result))
            print()
    print("CPU s per policy: " + ", ".join(f"{t.policy} {t.cpu_s:.1f}" for t in result.totals),
          file=info)
    print(f"{result.n_functions} functions x {result.n_minutes} min, "
          f"{n_inv:,} invocations, {len(policies)} policies, "
          f"seed {args.seed}, {args.jobs} job(s), engine {result.engine}: {result.wall_s:.1f} s; "
          f"peak RSS per worker {max(result.worker_peak_rss_mb.values(), default=0):.0f} MB; "
          f"latency quantiles within {100 * result.quantile_relative_accuracy:.0f} % (DDSketch)",
          file=info)
    print(f"calibration: init p50 {calibration.init_ms.p50:.0f} ms, restore p50 "
          f"{calibration.restore_ms.p50:.0f} ms ({calibration.method or 'no method recorded'})",
          file=info)
    print(TRACE_CITATION, file=info)
    out.mkdir(parents=True, exist_ok=True)
    preamble = (
        f"{result.n_functions} functions x {result.n_minutes} minutes, "
        f"{n_inv:,} invocations, seed {args.seed}; simulated in "
        f"{result.wall_s:.1f} s with {args.jobs} job(s). Calibration: init p50 "
        f"{calibration.init_ms.p50:.0f} ms / p95 {calibration.init_ms.p95:.0f} ms, restore p50 "
        f"{calibration.restore_ms.p50:.0f} ms."
    )
    files = {"markdown": out / "simulation.md", "csv": out / "functions.csv",
             "policies": out / "policies.csv", "pareto": out / "pareto.png",
             "report": out / "report.html"}
    files["markdown"].write_text(
        markdown_report(result, title="warmstart simulate", preamble=preamble,
                        policy="warmstart" if not args.no_warmstart else "-"),
        encoding="utf-8",
    )
    write_function_csv(result, files["csv"])
    write_policies_csv(result, files["policies"])
    pareto_plot(result, files["pareto"])
    write_html_report(result, files["report"], preamble=preamble, pareto=files["pareto"],
                      policy="warmstart" if not args.no_warmstart else "-")
    if args.json:
        print_json(simulate_json(result, calibration, args, files))
    print(f"wrote {files['report']}, {files['markdown']}, {files['policies']}, {files['csv']}, "
          f"{files['pareto']}", file=info)
    return 0


def write_html_report(result: object, path: Path, *, preamble: str, pareto: Path,
                      policy: str = "warmstart") -> Path:
    """The HTML report in the replay / demo report's template (`infra.replay.report.page`): the
    summary in words, the styled results table, the breaches against each baseline and the cost
    sentence, the Pareto plot (``pareto``, embedded) with its caption, the assumptions.

    Raises
    ------
    OSError
        If ``pareto`` cannot be read or the report cannot be written.
    """
    import base64
    import html
    import re

    from infra.replay.report import figure_html, write_page
    from warmers.simulator import report as sim
    from warmers.simulator.constants import TRACE_CITATION

    def inline(text: str) -> str:  # the Markdown of the assumptions: `code`
        return re.sub(r"`(.+?)`", r"<code>\1</code>", html.escape(text, quote=False))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in sim.HEADERS)
    rows = "".join("<tr><th>" + html.escape(row[0]) + "</th>"
                   + "".join(f"<td>{html.escape(c)}</td>" for c in row[1:]) + "</tr>"
                   for row in sim.table_rows(result))  # type: ignore[arg-type]
    parts = [f"<p>{html.escape(preamble)}</p>", "<h2>Every policy</h2>",
             (f"<div class=\"scroll\"><table class=\"wide\"><thead><tr>{head}</tr></thead>"
              f"<tbody>{rows}</tbody></table></div>"),
             f"<p>{html.escape(sim.FAILED_DEFINITION)}</p>"]
    totals = result.totals  # type: ignore[attr-defined]
    if any(t.policy == policy for t in totals):
        ratio = sim.ratios(result, policy)  # type: ignore[arg-type]
        ws = result.by_name(policy)  # type: ignore[attr-defined]
        lines = "".join(
            f"<tr><th>{html.escape(t.policy)}</th><td>{t.failed_answers:,}</td>"
            f"<td>{t.late:,}</td><td>{t.degraded:,}</td><td>{t.shed:,}</td>"
            f"<td>{ratio.failed_vs[t.policy]:.3f}</td></tr>"
            for t in totals if sim.is_baseline(t.policy))
        parts += [
            f"<h2>{html.escape(policy)} against each baseline</h2>",
            (f"<p>Failed answers, {html.escape(policy)} / baseline ({html.escape(policy)}: "
             f"{ws.failed_answers:,} = {ws.late:,} late + {ws.degraded:,} degraded + "
             f"{ws.shed:,} shed; the tail of {ws.tail:,} requests slower than the SLA even "
             "when warm is apart).</p>"),
            ("<table><thead><tr><th>baseline</th><th>failed answers</th><th>late</th>"
             "<th>degraded</th><th>shed</th><th>ratio</th></tr></thead>"
             f"<tbody>{lines}</tbody></table>"),
            f"<p>{html.escape(sim.cost_words(result, policy))}</p>"]  # type: ignore[arg-type]
    png = base64.b64encode(Path(pareto).read_bytes()).decode()
    parts.append(figure_html("Cold starts against cost (Pareto plot)", png, sim.PARETO_CAPTION))
    parts.append("<h2>Assumptions</h2><ul class=\"definitions\">" + "".join(
        f"<li>{inline(a.removeprefix('- '))}</li>" for a in sim.ASSUMPTIONS) + "</ul>")
    return write_page(path, title="warmstart simulate",
                      summary=sim.summary_words(result, policy),  # type: ignore[arg-type]
                      body="\n".join(parts), citation=TRACE_CITATION)


def _input(args: argparse.Namespace) -> str:
    if args.days is not None:
        return f"--days {args.days}"
    if args.parquet is not None:
        return f"--parquet {args.parquet}"
    return f"--trace-dir {args.trace_dir}"


def simulate_json(result: object, calibration: object, args: argparse.Namespace,
                  files: dict[str, Path]) -> dict[str, object]:
    """The ``--json`` document (see `JSON_SCHEMA`)."""
    from infra.commands.common import finite

    def policy(t: object) -> dict[str, object]:
        return {"policy": t.policy, "requests": t.requests,  # type: ignore[attr-defined]
                "cold_starts": t.cold_starts, "env_inits": t.env_inits,  # type: ignore[attr-defined]
                "failed_answers": t.failed_answers, "late": t.late,  # type: ignore[attr-defined]
                "degraded": t.degraded, "shed": t.shed, "tail": t.tail,  # type: ignore[attr-defined]
                "overflowed": t.overflowed, "sla_breaches": t.sla_breaches,  # type: ignore[attr-defined]
                "pings": t.pings, "functions": t.functions,  # type: ignore[attr-defined]
                "cold_start_pct": finite(t.cold_start_pct), "p50_ms": finite(t.p50_ms),  # type: ignore[attr-defined]
                "p95_ms": finite(t.p95_ms), "p99_ms": finite(t.p99_ms),  # type: ignore[attr-defined]
                "idle_gb_s": finite(t.idle_gb_s), "lambda_usd": finite(t.lambda_usd),  # type: ignore[attr-defined]
                "pc_usd": finite(t.pc_usd),  # type: ignore[attr-defined]
                "endpoint_usd": finite(t.endpoint_usd), "total_usd": finite(t.total_usd),  # type: ignore[attr-defined]
                "cost_usd": {k: finite(v) for k, v in t.cost_usd.items()},  # type: ignore[attr-defined]
                "decisions": dict(t.decisions),  # type: ignore[attr-defined]
                "strategies": dict(t.strategies)}  # type: ignore[attr-defined]

    cal = calibration
    return {"functions": int(result.n_functions), "minutes": int(result.n_minutes),  # type: ignore[attr-defined]
            "invocations": int(result.totals[0].requests) if result.totals else 0,  # type: ignore[attr-defined]
            "seed": args.seed, "jobs": args.jobs,
            "wall_s": finite(result.wall_s), "engine": result.engine,  # type: ignore[attr-defined]
            "quantile_relative_accuracy": result.quantile_relative_accuracy,  # type: ignore[attr-defined]
            "chunks": result.chunks,  # type: ignore[attr-defined]
            "largest_chunk_invocations": result.largest_chunk_invocations,  # type: ignore[attr-defined]
            "worker_peak_rss_mb": dict(result.worker_peak_rss_mb),  # type: ignore[attr-defined]
            "calibration": {"init_p50_ms": finite(cal.init_ms.p50),  # type: ignore[attr-defined]
                            "init_p95_ms": finite(cal.init_ms.p95),  # type: ignore[attr-defined]
                            "restore_p50_ms": finite(cal.restore_ms.p50),  # type: ignore[attr-defined]
                            "method": cal.method},  # type: ignore[attr-defined]
            "policies": [policy(t) for t in result.totals],  # type: ignore[attr-defined]
            "files": {k: str(v) for k, v in files.items()}}
