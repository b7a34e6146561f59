"""How the policy simulator scales: wall time and peak memory per worker as the input grows.

Stages, all on the shipped data (``tests/data/traces``):

1. *functions*: the first 100 / 400 / 1,600 full-day series (one policy), to fit the cost per
   invocation and per function-minute;
2. *invocations*: the busiest full-day series (16.4 M invocations) alone, cut into time chunks
   of 500 k, against a 2 M-invocation series simulated unsplit (the baseline of the same run):
   with chunks the worker's peak memory must not grow with the function's size;
3. *days*: the 14-day real series, 1 / 7 / 14 days;
4. *8-hour trace*: every policy, warmstart included (target <= 60 s);
5. *5,200 full-day series*, none skipped (one policy);
6. a projection to the full 14-day trace (~46,000 functions x 14 days) from the fitted curve.

Memory per worker is each worker process's peak resident set (``getrusage`` ``ru_maxrss``),
the local pool of ``--jobs`` fork workers started afresh for every run.

Run: ``.venv/bin/python bench/bench_simulator_scale.py [--jobs 2] [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import figure, load_average, machine, now_utc, ratio, write_result

TRACES = ROOT / "tests" / "data" / "traces"
FULLDAY = TRACES / "azure2019_fullday_union.csv.gz"
DAY14 = TRACES / "azure2019_14day"
#: The full Azure 2019 trace, for the projection (Shahrad et al., USENIX ATC 2020, sec. 3).
FULL_FUNCTIONS = 46_000
FULL_DAYS = 14


def _run(series: Any, policies: Any, calibration: Any, jobs: int,
         **kw: Any) -> tuple[Any, dict[str, Any]]:
    from warmers.simulator.run import run_series

    t0 = time.perf_counter()
    res = run_series(series, policies, calibration, jobs=jobs, **kw)
    wall = time.perf_counter() - t0
    rss = max(res.worker_peak_rss_mb.values(), default=float("nan"))
    inv = res.totals[0].requests
    return res, {"wall_s": wall, "peak_rss_mb_per_worker": rss, "invocations": inv,
                 "functions": res.n_functions, "minutes": res.n_minutes,
                 "function_minutes": res.n_functions * res.n_minutes, "chunks": res.chunks,
                 "largest_chunk_invocations": res.largest_chunk_invocations,
                 "workers": len(res.worker_peak_rss_mb)}


def _say(label: str, m: dict) -> None:  # type: ignore[type-arg]
    print(f"{label}: {m['functions']} fn x {m['minutes']} min, {m['invocations']:,} inv, "
          f"{m['wall_s']:.1f} s, peak RSS/worker {m['peak_rss_mb_per_worker']:.0f} MB, "
          f"{m['chunks']} chunks", flush=True)


def _nonnegative_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: the best of the fits on each subset of the
    columns whose coefficients all come out non-negative (3 columns: 7 subsets)."""
    best, best_res = np.zeros(x.shape[1]), float(np.sum(y * y))
    for mask in range(1, 2 ** x.shape[1]):
        cols = [j for j in range(x.shape[1]) if mask >> j & 1]
        c, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
        if np.all(c >= 0):
            res = float(np.sum((x[:, cols] @ c - y) ** 2))
            if res < best_res:
                best, best_res = np.zeros(x.shape[1]), res
                best[cols] = c
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="small sizes (a reduced run)")
    p.add_argument("--chunk-invocations", type=int, default=500_000)
    args = p.parse_args(argv)

    from warmers.simulator.calibration import load_calibration
    from warmers.simulator.policies import KeepAlive, baseline_policies
    from warmers.simulator.sketch import RELATIVE_ACCURACY
    from warmers.simulator.stream import FunctionSeries, iter_fullday_series, series_of_trace
    from warmers.simulator.trace import load_trace
    from warmers.simulator.warmstart_policy import warmstart_variants

    cal = load_calibration(None)
    profiles = load_trace(TRACES)
    one = [KeepAlive(10)]
    chunk = args.chunk_invocations
    jobs = args.jobs
    load_before = load_average()
    stages: dict[str, list[dict]] = {}  # type: ignore[type-arg]

    # 1. functions: every k-th full-day series (the file lists the busiest first)
    strides = (800, 200) if args.quick else (80, 20)
    stages["functions"] = []
    for k in strides:
        _, m = _run(islice(iter_fullday_series(FULLDAY, profiles), k // 2, None, k), one, cal, jobs,
                    chunk_invocations=chunk)
        m["stride"] = k
        _say(f"functions, every {k}th", m)
        stages["functions"].append(m)

    # 2. invocations: one function, chunked, against an unsplit 2 M series
    all_totals = [(s.invocations, i) for i, s in
                  enumerate(iter_fullday_series(FULLDAY, profiles))]
    busiest_i = max(all_totals)[1]
    mid_i = min(all_totals, key=lambda t: abs(t[0] - (300_000 if args.quick else 2_000_000)))[1]

    def nth(i: int) -> FunctionSeries:
        for k, s in enumerate(iter_fullday_series(FULLDAY, profiles)):
            if k == i:
                return s  # type: ignore[no-any-return]
        raise IndexError(i)

    busiest = nth(busiest_i)
    mid = nth(mid_i)
    if args.quick:
        busiest = replace(busiest, counts=busiest.counts[:60])
    stages["invocations"] = []
    for label, s, ck in (("mid, unsplit", mid, 10**12), ("mid, chunked", mid, chunk),
                         ("busiest, chunked", busiest, chunk)):
        _, m = _run([s], one, cal, jobs, chunk_invocations=ck)
        m["label"] = label
        _say(f"invocations {label}", m)
        stages["invocations"].append(m)

    # 3. days: the 14-day real series
    counts14 = np.loadtxt(next(DAY14.glob("*.csv")), skiprows=1, dtype=np.int64)
    stages["days"] = []
    for days in (1, 7, 14):
        s = FunctionSeries(function_id="azure2019-14day", trigger="unknown",
                           counts=counts14[: days * 1440],
                           duration_pct_ms=profiles.duration_pct_ms[0],
                           memory_mb=int(profiles.memory_mb[0]),
                           duration_count=int(profiles.duration_count[0])
                           if profiles.duration_count is not None else None)
        _, m = _run([s], baseline_policies(), cal, 1, chunk_invocations=chunk)
        m["days"] = days
        _say(f"days {days}", m)
        stages["days"].append(m)

    # 4. the 8-hour trace, every policy
    trace8 = profiles.select(list(range(20))) if args.quick else profiles
    res8, m8 = _run(series_of_trace(trace8), [*baseline_policies(), *warmstart_variants(15)],
                    cal, jobs, chunk_invocations=chunk)
    m8["cpu_s_by_policy"] = {t.policy: round(t.cpu_s, 2) for t in res8.totals}
    m8["trace"] = "8-hour (azure2019_invocations.csv)"
    _say("8-hour trace", m8)
    stages["trace_8h"] = [m8]

    # 5. every full-day series, none skipped
    full = iter_fullday_series(FULLDAY, profiles)
    _, mf = _run(islice(full, 0, None, 100) if args.quick else full, one, cal, jobs,
                 chunk_invocations=chunk)
    _say("full-day series", mf)
    stages["fullday_all"] = [mf]

    # 6. projection: wall = a + b * invocations + c * function-minutes (least squares over
    # every one-policy run), applied to the full trace at the full-day sample's invocation rate
    pts = stages["functions"] + stages["fullday_all"] + [
        m for m in stages["invocations"] if m["label"] != "mid, unsplit"]
    x = np.array([[1.0, m["invocations"], m["function_minutes"]] for m in pts])
    y = np.array([m["wall_s"] for m in pts])
    coef = _nonnegative_fit(x, y)
    inv_per_fn_day = mf["invocations"] / mf["functions"]
    full_inv = FULL_FUNCTIONS * FULL_DAYS * inv_per_fn_day
    full_fm = FULL_FUNCTIONS * FULL_DAYS * 1440
    proj_wall = float(coef[0] + coef[1] * full_inv + coef[2] * full_fm)
    proj = {"wall_s_at_jobs": proj_wall, "intercept_s": float(coef[0]), "jobs": jobs, "cpu_hours": proj_wall * jobs / 3600,
            "invocations": full_inv, "function_minutes": full_fm,
            "s_per_million_invocations": float(coef[1] * 1e6),
            "s_per_million_function_minutes": float(coef[2] * 1e6),
            "policies": 1, "assumption": "the 5,200 full-day series' mean invocations per "
            "function-day for every function and day"}
    # with every policy: the 8-hour trace's CPU time per invocation, all policies
    cpu8 = sum(m8["cpu_s_by_policy"].values())
    proj["cpu_hours_all_policies"] = cpu8 / max(m8["invocations"], 1) * full_inv / 3600
    load_after = load_average()

    # memory independence: the busiest (chunked) against the unsplit mid series
    inv = {m["label"]: m for m in stages["invocations"]}
    mem_ratio = (inv["busiest, chunked"]["peak_rss_mb_per_worker"]
                 / inv["mid, chunked"]["peak_rss_mb_per_worker"])
    growth = (inv["busiest, chunked"]["invocations"] / inv["mid, chunked"]["invocations"])
    ratios = [
        ratio("peak RSS per worker, busiest (chunked) / mid-size (chunked)", mem_ratio, 1.25,
              size_ratio=growth),
        ratio("8-hour trace wall time / 60 s", m8["wall_s"] / 60.0, 1.0),
    ]
    figures = [figure(f"{k} {m.get('label', m.get('days', m['functions']))}: {f}", m[f], u)
               for k, rows in stages.items() for m in rows
               for f, u in (("wall_s", "s"), ("peak_rss_mb_per_worker", "MB"))]
    figures.append(figure("projection: full 14-day trace, one policy", proj["cpu_hours"],
                          "CPU-hours"))
    figures.append(figure("projection: full 14-day trace, every policy",
                          proj["cpu_hours_all_policies"], "CPU-hours"))

    def table(rows: list[dict], key: str) -> str:  # type: ignore[type-arg]
        out = [(f"| {key} | functions | minutes | invocations | chunks | wall s | "
                "peak RSS/worker MB |"), "|---|---|---|---|---|---|---|"]
        for m in rows:
            out.append(f"| {m.get(key, m['functions'])} | {m['functions']} | {m['minutes']} | "
                       f"{m['invocations']:,} | {m['chunks']} | {m['wall_s']:.1f} | "
                       f"{m['peak_rss_mb_per_worker']:.0f} |")
        return "\n".join(out)

    md = f"""# Simulator at scale

{now_utc()}; {machine()}; load average before {load_before}, after {load_after} (the
machine was shared with other jobs: wall times are upper bounds). {jobs} local fork workers,
time chunks of at most {chunk:,} invocations, latency quantiles by DDSketch within
{100 * RELATIVE_ACCURACY:.0f} % (relative), counts exact.

## Functions (every k-th full-day series, keep-alive 10 min)

{table(stages["functions"], "stride")}

## Invocations of one function

{table(stages["invocations"], "label")}

Peak RSS per worker, busiest series (16.4 M invocations, chunked) / the mid-size series
(chunked): **{mem_ratio:.2f}x** for {growth:.1f}x the invocations (target <= 1.25x: bounded by
the chunk size, not the function). Unsplit, the mid-size series alone peaks at
{inv["mid, unsplit"]["peak_rss_mb_per_worker"]:.0f} MB.

## Days (the 14-day real series, the baseline policies, one worker)

{table(stages["days"], "days")}

## The 8-hour trace, every policy (warmstart included)

{table(stages["trace_8h"], "trace")}

{m8["wall_s"]:.1f} s (target <= 60 s). CPU s by policy: {m8["cpu_s_by_policy"]}.

## All 5,200 full-day series, none skipped (keep-alive 10 min)

{table(stages["fullday_all"], "functions")}

## Projection to the full trace ({FULL_FUNCTIONS:,} functions x {FULL_DAYS} days)

Non-negative least squares over the one-policy runs ({len(pts)} points): intercept
{coef[0]:.1f} s, {proj["s_per_million_invocations"]:.2f} s per million
invocations and {proj["s_per_million_function_minutes"]:.2f} s per million function-minutes at
{jobs} workers. At the full-day sample's {inv_per_fn_day:,.0f} invocations per function-day,
the full trace holds ~{full_inv / 1e9:.1f} G invocations: **{proj["cpu_hours"]:.1f} CPU-hours**
for one policy, **{proj["cpu_hours_all_policies"]:.0f} CPU-hours** for every policy (the
8-hour trace's CPU time per invocation); memory per worker stays at the chunk bound, so the
run spreads over any number of Dask workers (`warmstart simulate --engine dask`).
"""
    reduced = "--quick: small sizes" if args.quick else None
    path = write_result(
        "simulator_scale", md, figures, ratios=ratios,
        command="python bench/bench_simulator_scale.py" + (" --quick" if args.quick else ""),
        reduced=reduced, extra={"stages": stages, "projection": proj, "jobs": jobs,
                                "chunk_invocations": chunk})
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
