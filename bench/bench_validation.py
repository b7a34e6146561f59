"""Validation of warmstart's decisions on traffic they were not tuned on (issue 19, item 5).

Runs the policy simulator on several traces and on variants made harder on purpose, with the
same concurrency limit (Lambda's throttle) for every policy, and reports per trace: failed
answers (late + degraded + shed + throttled) and cost of the baselines and of the three
warmstart variants, and the failed answers each warmstart mechanism avoids against on-demand
(10-minute keep-alive) with the USD it costs per avoided failed answer.

Traces (all Azure Functions 2019, CC-BY 4.0, Shahrad et al., USENIX ATC 2020, as vendored by
vHive InVitro, MIT; see tests/data/traces):

- ``8h``: the 298-function 8-hour subset;
- ``fullday``: every ``--stride``-th of the 5,200 full-day series (durations and memory borrowed
  from the subset's functions);
- ``14day``: the one 14-day series;
- variants of ``fullday``: ``sla-Kx-init``: every SLA = the function's warm p99 duration + K x
  the calibrated init p95, K = 0.5, 1.0, 1.2 (at 1.0 a p95 cold start of a p99 request just
  fits; at 0.5 most cold starts cannot be answered locally in time, so the strategy, the
  overflow endpoint or the degraded answer must act; SLAs stay above the warm duration, so
  the variant tests cold starts, not SLAs no answer can meet); ``slow-init``: the calibrated init 3x slower; ``burst-x4``:
  every minute's count x4 in one hour of the day; ``limit-50``: the account limit lowered to
  50 in flight.

Targets (issue 19): on every trace warmstart fails no more answers than the best baseline
and no more than ``warmstart, no overflow``, and costs no more than the cheapest baseline
with as few failed answers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from bench import command_line, figure, machine, ratio, write_result

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
BASELINE = "on-demand, keep-alive 10 min"


def _policies() -> list[Any]:
    from warmers.simulator.controls import HistogramWindows
    from warmers.simulator.policies import HybridHistogram, KeepAlive, SnapStart
    from warmers.simulator.warmstart_policy import warmstart_variants

    return [KeepAlive(10), SnapStart(),
            HybridHistogram(windows=HistogramWindows.issue_model(),
                            name="hybrid histogram (issue 11 reading)"),
            *warmstart_variants(15)]


def _traces(stride: int, calibration: Any) -> list[tuple[str, str, Any, dict[str, Any]]]:
    """(name, what, series factory, run_series keywords) per trace."""
    from warmers.simulator.stream import FunctionSeries, iter_fullday_series, series_of_trace
    from warmers.simulator.trace import load_trace

    profiles = load_trace(TRACES)
    fullday_path = TRACES / "azure2019_fullday_union.csv.gz"

    def fullday() -> Any:
        return islice(iter_fullday_series(fullday_path, profiles), 0, None, stride)

    def day14() -> Any:
        counts = np.loadtxt(next((TRACES / "azure2019_14day").glob("*.csv")), skiprows=1,
                            dtype=np.int64)
        return iter([FunctionSeries(
            function_id="azure2019-14day", trigger="unknown", counts=counts,
            duration_pct_ms=profiles.duration_pct_ms[0], memory_mb=int(profiles.memory_mb[0]),
            duration_count=None if profiles.duration_count is None
            else int(profiles.duration_count[0]))])

    def burst() -> Any:
        for s in fullday():
            counts = s.counts.copy()
            counts[600:660] *= 4  # 10:00-11:00 of the trace day
            yield replace(s, counts=counts)

    init_p95 = calibration.init_ms.p95
    return [
        ("8h", "the 8-hour subset, 298 functions", lambda: series_of_trace(profiles), {}),
        ("fullday", f"every {stride}th of the 5,200 full-day series", fullday, {}),
        ("14day", "the 14-day series (one function, 20,160 minutes)", day14, {}),
        *((f"sla-{k:g}x-init", (f"full-day, SLA = warm p99 + {k:g} x the init p95 "
           f"({k * init_p95:.0f} ms)"), fullday,
           {"default_sla_ms": 0.0, "sla_duration_factor": 1.0, "sla_extra_ms": k * init_p95})
          for k in (0.5, 1.0, 1.2)),
        ("slow-init", "full-day, the calibrated init 3x slower", fullday, {"slow": 3.0}),
        ("burst-x4", "full-day, every count x4 from 10:00 to 11:00", burst, {}),
        ("limit-50", "full-day, the account limit lowered to 50 in flight", fullday,
         {"concurrency_limit": 50}),
    ]


def _worse_functions(result: Any) -> list[str]:
    """Markdown rows of the functions where ``warmstart`` fails more than the best baseline."""
    by_fn: dict[str, dict[str, Any]] = {}
    for r in result.rows:
        by_fn.setdefault(r.function_id, {})[r.policy] = r
    out = []
    for fid, rows in sorted(by_fn.items()):
        ws = rows.get("warmstart")
        base = [r for p, r in rows.items() if not p.startswith("warmstart")]
        if ws is None or not base:
            continue
        best = min(base, key=lambda r: r.failed_answers)
        if ws.failed_answers > best.failed_answers:
            out.append(f"| {fid} | {ws.strategy} | {ws.sla_ms:.0f} | {ws.failed_answers:,} "
                       f"({ws.cold_breaches:,}, {ws.degraded:,}, {ws.shed:,}, {ws.throttled:,}) "
                       f"| {best.policy}: {best.failed_answers:,} (throttled "
                       f"{best.throttled:,}) |")
    return out


def _slower(calibration: Any, factor: float) -> Any:
    from warmers.simulator.calibration import Timing

    init = calibration.init_ms
    return replace(calibration, init_ms=Timing(init.p50 * factor, init.p95 * factor))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2019)
    parser.add_argument("--stride", type=int, default=130,
                        help="take every N-th full-day series (default 130: 40 of 5,200)")
    parser.add_argument("--only", default="", help="comma-separated trace names")
    parser.add_argument("--name", default="validation",
                        help="result file name in bench/results (default validation); a run "
                             "with --only under another name is published as its own figure, "
                             "e.g. validation-fullday-all for `--only fullday --stride 1`")
    args = parser.parse_args(argv)
    os.environ.setdefault("MPLCONFIGDIR", str(ROOT / ".cache" / "matplotlib"))

    from warmers.simulator.calibration import load_calibration
    from warmers.simulator.run import run_series

    calibration = load_calibration(None)
    wanted = {x for x in args.only.split(",") if x}
    lines = ["# Validation on traces warmstart was not tuned on (issue 19)", "",
             (f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}; machine: {machine()}; "
             f"load average {os.getloadavg()[0]:.2f} at start (shared host)"),
             f"- Command: `{command_line(['validation', *(argv or [])])}`",
             ("- Failed answers = late + degraded + shed + throttled (429 at the concurrency "
             "limit, the same for every policy; default 1,000 in flight, Lambda's account quota). "
             "Avoided = the on-demand 10-minute keep-alive's failed answers less the policy's; "
             "USD per avoided = the policy's extra cost over that baseline / avoided."),
             ("- Source: Azure Functions Trace 2019 (CC-BY 4.0; Shahrad et al., USENIX ATC "
             "2020), the subsets vendored by vHive InVitro (MIT)."), ""]
    figures: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    per_trace: dict[str, Any] = {}
    status = 0
    for name, what, make, kw in _traces(args.stride, calibration):
        if wanted and name not in wanted:
            continue
        kw = dict(kw)
        cal = _slower(calibration, kw.pop("slow")) if "slow" in kw else calibration
        t0 = time.perf_counter()
        result = run_series(make(), _policies(), cal, seed=args.seed, jobs=args.jobs, **kw)
        wall = time.perf_counter() - t0
        base = result.by_name(BASELINE)
        rows = []
        table = [("| policy | failed answers | late | degraded | shed | throttled | overflow | "
                 "endpoint USD | total USD | avoided vs on-demand | USD per avoided |"),
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for t in result.totals:
            avoided = base.failed_answers - t.failed_answers
            extra = t.total_usd - base.total_usd
            per = (f"{extra / avoided:.4f}" if avoided > 0 else "-")
            table.append(f"| {t.policy} | {t.failed_answers:,} | {t.late:,} | {t.degraded:,} | "
                         f"{t.shed:,} | {t.throttled:,} | {t.overflowed:,} | "
                         f"{t.endpoint_usd:.2f} | {t.total_usd:.2f} | {avoided:,} | {per} |")
            rows.append({"policy": t.policy, "failed_answers": t.failed_answers,
                         "late": t.late, "degraded": t.degraded, "shed": t.shed,
                         "throttled": t.throttled, "overflowed": t.overflowed,
                         "endpoint_usd": t.endpoint_usd, "total_usd": t.total_usd,
                         "avoided_vs_on_demand": avoided})
        ws = result.by_name("warmstart")
        no_ovf = result.by_name("warmstart, no overflow")
        baselines = [t for t in result.totals if not t.policy.startswith("warmstart")]
        best = min(t.failed_answers for t in baselines)
        cheapest = min((t.total_usd for t in baselines if t.failed_answers <= ws.failed_answers),
                       default=float("nan"))
        ok_best = ws.failed_answers <= best
        ok_no = ws.failed_answers <= no_ovf.failed_answers
        ok_cost = not np.isfinite(cheapest) or ws.total_usd <= cheapest * (1 + 1e-9)
        status |= int(not (ok_best and ok_no))
        verdict = (f"warmstart {ws.failed_answers:,} failed (best baseline {best:,}: "
                   f"{'met' if ok_best else 'NOT met'}; no overflow {no_ovf.failed_answers:,}: "
                   f"{'met' if ok_no else 'NOT met'}); ${ws.total_usd:.2f} against the cheapest "
                   f"baseline failing no more, ${cheapest:.2f}: "
                   f"{'met' if ok_cost else 'NOT met'}")
        worse = _worse_functions(result)
        lines += [f"## {name}: {what}", "",
                  (f"{result.n_functions} functions x {result.n_minutes} min, "
                  f"{base.requests:,} requests, {wall:.0f} s."), "", *table, "",
                  f"**{verdict}**", ""]
        if worse:
            lines += [(f"Functions where warmstart fails more than the best baseline there "
                      f"({len(worse)}; the first 5):"), "",
                      ("| function | warmstart strategy | SLA ms | warmstart failed (late, "
                      "degraded, shed, throttled) | best baseline there |"), "|---|---|---:|---|---|",
                      *worse[:5], ""]
        figures.append(figure(f"{name} wall", wall, "s"))
        ratios.append(ratio(f"{name}: warmstart failed answers / best baseline's",
                            (ws.failed_answers + 1) / (best + 1), 1.0))
        ratios.append(ratio(f"{name}: warmstart failed answers / warmstart no overflow's",
                            (ws.failed_answers + 1) / (no_ovf.failed_answers + 1), 1.0))
        per_trace[name] = {"what": what, "functions": result.n_functions,
                           "minutes": result.n_minutes, "requests": base.requests,
                           "wall_s": wall, "policies": rows, "verdict": verdict}
        print(f"{name}: {verdict} ({wall:.0f} s)", flush=True)
    lines += ["(ratios use failed answers + 1 so a trace with none divides by one)", ""]
    write_result(args.name, "\n".join(lines), figures, ratios=ratios,
                 command=command_line(["validation", *(argv or [])]),
                 # a run under its own --name is its own figure (its command says what it covers)
                 reduced=(None if not wanted or args.name != "validation"
                          else f"traces {sorted(wanted)} only"),
                 extra={"traces": per_trace, "stride": args.stride})
    return status


if __name__ == "__main__":
    raise SystemExit(main())
