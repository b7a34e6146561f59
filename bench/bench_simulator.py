"""Benchmark: the policy simulator over the whole shipped Azure 2019 trace.

Runs every policy (the baselines of issue 6 and warmstart) over all 298 functions x 480
minutes, and writes ``bench/results/simulator.md`` (machine, date, table, ratios, wall time
against the 60 s target) and ``bench/results/simulator_pareto.png``.

Targets (issue 11): warmstart has the fewest failed answers (late + degraded + shed; the tail of
requests slower than their SLA even when warm is apart) of every policy, and its total cost
(Lambda + provisioned concurrency + endpoint, and the warmer's own CloudWatch reads) is no more
than the cheapest baseline that fails no more answers, or, where none does, no more than 1.1x the cheapest baseline; the simulator
runs the whole trace in <= 60 s on this machine.

Run: ``.venv/bin/python bench/bench_simulator.py [--jobs 2] [--calibration FILE]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import resource
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warmers.simulator.run import SimulationResult
    from warmers.simulator.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import command_line, figure, machine, ratio, write_result

TARGET_WALL_S = 60.0


#: What changed in this run's accounting (issue 11, items 3 and 4), and the rows it replaced
#: (the committed run of 2026-12-01 08:02 UTC, same trace, seed and calibration).
WHAT_CHANGED = (
    "## What changed (issue 11: failed answers, duration tail, hybrid histogram)",
    "",
    ("Before, the headline was SLA breaches: ~9,184 per policy were requests slower than their "
     "SLA even when warm, an artifact of sampling durations linearly between p99 and the "
     "maximum, and degraded answers were not counted (699 for warmstart, no overflow). "
     "Previous rows: warmstart 846 cold starts, 9,187 breaches, $13.31; warmstart, no overflow "
     "846 cold starts, 9,184 breaches + 699 uncounted degraded, $4.29; hybrid histogram 4,792 "
     "cold starts against 2,833 for the 10-minute keep-alive."),
    "",
    ("Now (1) durations above p99 follow a lognormal tail from p99 to the maximum, the maximum "
     "placed at level N/(N+1) of the durations file's Count (`trace.sample_durations`); (2) a "
     "request fails when it is shed, degraded, or answered late although its warm duration met "
     "the SLA; the tail is reported apart; (3) the hybrid histogram runs per function at minute "
     "granularity with the function loaded as a unit (the paper's application), validated "
     "against an independent minute model in `tests/unit/simulator/test_sim_hybrid.py`."),
)


def _cold_pct_quartiles(result: SimulationResult, policy: str) -> tuple[float, float]:
    """Per-function cold-start % (cold starts / requests) p50 and p75 of ``policy``."""
    import numpy as np

    pct = [100.0 * r.cold_starts / r.requests for r in result.rows
           if r.policy == policy and r.requests]
    p50, p75 = np.percentile(pct, [50, 75])
    return float(p50), float(p75)


def _minute_model_lines(trace: Trace) -> list[str]:
    """The issue's independent minute model of the hybrid histogram and of the 10-minute
    keep-alive (``tests/unit/simulator/test_sim_hybrid.py``), run on ``trace`` here."""
    import numpy as np

    from tests.unit.simulator.test_sim_hybrid import minute_model

    invocations = trace.counts.sum(axis=1)
    runs = {p: [minute_model(c, p) for c in trace.counts.tolist()] for p in ("hybrid", "fixed10")}
    pct = {p: np.percentile(100.0 * np.array([r[0] for r in v]) / invocations, [50, 75])
           for p, v in runs.items()}
    between = {p: sum(r[1] for r in v) for p, v in runs.items()}
    to_end = {p: sum(r[2] for r in v) for p, v in runs.items()}
    return [
        (f"- The issue's independent minute model (one instance per function, one group per "
         f"minute; `tests/unit/simulator/test_sim_hybrid.py`), run here: per-function cold-start "
         f"% p50 / p75 {pct['hybrid'][0]:.1f} / {pct['hybrid'][1]:.1f} for its hybrid and "
         f"{pct['fixed10'][0]:.1f} / {pct['fixed10'][1]:.1f} for the 10-minute keep-alive "
         "(issue: 2.1 / 12.5 and 8.1 / 100); the hybrid's idle minutes "
         f"{between['hybrid'] / between['fixed10']:.2f}x the fixed policy's between invocations "
         f"({to_end['hybrid'] / to_end['fixed10']:.2f}x with those after the last invocation; "
         "issue: 1.62x). The engine running the issue's reading agrees with it on every minute "
         "whose first request found no request in flight (the test compares every such minute of "
         "the functions with at most 20,000 requests); the engine's other cold starts are "
         "concurrency (requests finding every environment busy), which the minute model has "
         "not."),
    ]


def _verdict(result: SimulationResult, name: str, horizon_h: float,
             alt_endpoint_usd_h: float, ratios: list[dict[str, object]]) -> list[str]:
    """The issue's two targets for the variant ``name``, measured in this run (their ratios are
    appended to ``ratios``)."""
    from warmers.simulator.report import ratios as cost_ratios

    ws = result.by_name(name)
    others = [t for t in result.totals if t.policy != name]
    fewest = min(others, key=lambda t: t.failed_answers)
    met_f = ws.failed_answers <= fewest.failed_answers
    value = (ws.failed_answers / fewest.failed_answers if fewest.failed_answers
             else (0.0 if ws.failed_answers == 0 else math.inf))
    ratios.append(ratio(f"{name}: failed answers / fewest of the other policies ({fewest.policy})",
                        value, 1.0, policy=name, failed=ws.failed_answers,
                        other=fewest.failed_answers))
    lines = [
        (f"**{name}** ({ws.failed_answers:,} failed answers = {ws.late:,} late + "
         f"{ws.degraded:,} degraded + {ws.shed:,} shed; {ws.cold_start_pct:.3f} % cold starts; "
         f"${ws.total_usd:.2f} = Lambda ${ws.lambda_usd - ws.pc_usd:.2f} + provisioned "
         f"concurrency ${ws.pc_usd:.2f} + endpoint ${ws.endpoint_usd:.2f} + the warmer's "
         f"CloudWatch reads ${ws.warmer_usd:.2f}):"),
        "",
        (f"- Fewest failed answers of every policy: **{'met' if met_f else 'NOT met'}** - "
         f"{ws.failed_answers:,} against the fewest of the others, {fewest.failed_answers:,} "
         f"({fewest.policy}"
         + (", a tie" if ws.failed_answers == fewest.failed_answers else "") + ")."),
    ]
    r = cost_ratios(result, name)
    ref = r.cheapest_same_rate or r.cheapest
    what = ("the cheapest baseline failing no more answers" if r.cheapest_same_rate else
            "no baseline fails as few answers; the cheapest baseline")
    ratios.append(ratio(f"{name}: cost / {what} ({ref})", r.cost_ratio_total, r.cost_target,
                        policy=name))
    b = result.by_name(ref)
    lines.append(
        f"- Cost: {what} is {ref} ({b.failed_answers:,} failed, ${b.total_usd:.2f}); ratio "
        f"**{r.cost_ratio_total:.3f}** (target <= {r.cost_target:g}): "
        f"**{'met' if r.cost_met else 'NOT met'}**; Lambda alone {r.cost_ratio_lambda:.3f}.")
    if ws.strategies:
        snap = ws.strategies.get("snapstart", 0)
        lines.append(
            f"- Cold-start strategy (`warmers.strategy.recommend_strategy`): SnapStart on {snap:,} "
            f"of {ws.functions:,} functions (an on-demand cold start would answer more than "
            f"0.1 % of their requests late), on demand with the warmer on the other "
            f"{ws.functions - snap:,}; SnapStart's cost ${ws.cost_usd.get('snapstart', 0.0):.2f} "
            "(snapshot cache and restores).")
    e = ws.endpoint
    if e:
        lines.append(
            f"- Endpoint ({e['mode']}, {e['concurrent_requests_per_instance']:.0f} requests "
            f"per instance at once): {e['instance_hours']:.2f} instance-hours "
            f"(${ws.endpoint_usd:.2f}), at most {e['max_in_service']:.0f} in service, none for "
            f"{e['minutes_without_capacity']:.0f} of {result.n_minutes} minutes; "
            f"{ws.overflowed:,} requests answered by it ({e['queued']:.0f} queued, longest wait "
            f"{e['max_wait_ms']:,.0f} ms), {e['timed_out']:.0f} timed out (the overflow "
            "call's SLA budget: answered degraded at the deadline), "
            f"{e['sent_without_capacity']:.0f} sent while none was in service (answered "
            f"without overflow: {e['degraded_or_shed_without_capacity']:.0f} degraded or shed); "
            f"the warmer's plan paid for itself in {e['plans_paying']:.0f} of {e['plans']:.0f} "
            "runs" + (" (the always-on variant is not planned)" if e["mode"] == "always_on"
                      else "") + ".")
    if ws.endpoint_usd > 0:
        alt = ws.lambda_usd + ws.warmer_usd + ws.endpoint["instance_hours"] * alt_endpoint_usd_h
        lines.append(
            f"- On an ml.g4dn.xlarge (${alt_endpoint_usd_h}/h, secondary unverified price in "
            f"warmers/prices.json) the total would be ${alt:.2f} "
            f"(ratio {alt / b.total_usd:.3f} to {ref}).")
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2019)
    parser.add_argument("--calibration", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "simulator.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("MPLCONFIGDIR", str(ROOT / ".cache" / "matplotlib"))

    from warmers.simulator.calibration import load_calibration
    from warmers.simulator.constants import DEFAULT_KEEP_ALIVE_S, TRACE_CITATION, SimulatorPrices
    from warmers.simulator.policies import baseline_policies
    from warmers.simulator.report import (
        ASSUMPTIONS,
        FAILED_DEFINITION,
        markdown_table,
        pareto_plot,
        ratios_markdown,
    )
    from warmers.simulator.run import run_simulation
    from warmers.simulator.trace import load_trace
    from warmers.simulator.warmstart_policy import warmstart_variants

    load_before = os.getloadavg()
    t_load = time.perf_counter()
    trace = load_trace(ROOT / "tests" / "data" / "traces")
    calibration = load_calibration(args.calibration)
    policies = [*baseline_policies(), *warmstart_variants()]
    cpu0 = time.process_time()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    result = run_simulation(trace, policies, calibration, seed=args.seed, jobs=args.jobs)
    wall = time.perf_counter() - t0
    total_wall = time.perf_counter() - t_load
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (time.process_time() - cpu0) + (children1.ru_utime - children0.ru_utime) + (
        children1.ru_stime - children0.ru_stime)
    load_after = os.getloadavg()
    result.wall_s = wall
    png = args.out.with_name("simulator_pareto.png")
    pareto_plot(result, png)

    prices = SimulatorPrices()
    horizon_h = trace.n_minutes / 60.0
    from warmers.pricing import load_prices

    alt_usd_h = load_prices().price("sagemaker_ml_g4dn_xlarge_hour").usd
    memory = dict(zip(trace.function_ids, trace.memory_mb.tolist(), strict=True))
    ping_extra_usd = sum(r.pings * 0.074 * memory[r.function_id] / 1024.0
                         for r in result.rows if r.policy == "warmstart"
                         ) * prices.ondemand_gb_s_usd
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    ok = "met" if total_wall <= TARGET_WALL_S else "NOT met"
    ratios: list[dict[str, object]] = [ratio("simulator wall time (with trace loading) / 60 s target",
                                             total_wall / TARGET_WALL_S, 1.0, seconds=total_wall)]
    command = command_line(["simulator", "--jobs", str(args.jobs), "--seed", str(args.seed),
                            *(["--calibration", str(args.calibration)] if args.calibration else [])])
    lines = [
        "# Policy simulator over the Azure Functions 2019 trace",
        "",
        f"- Date: {date}",
        (f"- Machine: {machine()}; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after (the machine is shared: other processes compete for the "
        "2 cores)"),
        f"- Command: `{command}`",
        (f"- Trace: {trace.n_functions} functions x {trace.n_minutes} minutes "
        f"({int(trace.counts.sum()):,} invocations), arrivals spread uniformly within each "
        f"minute, durations from the trace's percentiles, seed {args.seed}"),
        (f"- Calibration (`warmers/simulator/calibration.json` unless given): init p50 "
        f"{calibration.init_ms.p50:.0f} ms / p95 {calibration.init_ms.p95:.0f} ms, restore p50 "
        f"{calibration.restore_ms.p50:.0f} ms / p95 {calibration.restore_ms.p95:.0f} ms, "
        f"toolkit init p50 {calibration.toolkit_init_ms.p50:.0f} ms, overflow p50 "
        f"{calibration.overflow.p50:.0f} ms, measured {calibration.measured_at} on "
        f"{calibration.machine}"),
        (f"- SLA per function: max(2,000 ms, 1.5 x its p99 duration); Lambda idle reclaim of "
        f"policies without their own keep-alive: {DEFAULT_KEEP_ALIVE_S // 60} min; overflow "
        f"endpoint ml.g6.xlarge ${prices.gpu_endpoint_hour_usd}/h per instance, shared by every "
        "function and counted once: planned by the warmer (`warmstart`) or 1 instance always "
        "on (`warmstart, always-on endpoint`)"),
        "",
        "## Wall time",
        "",
        (f"- Simulation: **{wall:.1f} s** with {args.jobs} worker process(es); with loading the "
        f"trace {total_wall:.1f} s; target <= {TARGET_WALL_S:.0f} s: **{ok}** "
        f"(ratio {total_wall / TARGET_WALL_S:.2f})."),
        f"- CPU time of all processes: {cpu:.1f} s. Per policy (CPU s, summed over workers): "
        + ", ".join(f"{t.policy} {t.cpu_s:.1f}" for t in result.totals) + ".",
        "",
        "## Results",
        "",
        markdown_table(result),
        "",
        FAILED_DEFINITION,
        "",
        "## Assumptions",
        "",
        *ASSUMPTIONS,
        "",
        "## Targets of issue 11 (this run)",
        "",
        *_verdict(result, "warmstart", horizon_h, alt_usd_h, ratios),
        *_verdict(result, "warmstart, always-on endpoint", horizon_h, alt_usd_h, ratios),
        *_verdict(result, "warmstart, no overflow", horizon_h, alt_usd_h, ratios),
        (f"The tail (warm duration over the SLA) is {result.totals[0].tail:,} requests under "
         f"every policy ({result.totals[0].long_requests:,} of them longer than 30 s, the "
         "deployment's default function timeout: the trace's own durations, which a "
         "deployment would need a longer timeout for); it is not in the comparison. warmstart's only possible failures are "
         "the cold answers of its on-demand functions (SnapStart functions restore in the "
         "calibrated restore time): admission answers them locally when the model is ready "
         "in time, else by the endpoint when it has an instance in service (degraded at the "
         "deadline when the queue or the overflow path itself would miss the SLA), else "
         "degraded (each a failure). The planned endpoint is sized by the warmer's "
         "`plan_endpoint`, which wants instances only when they cost less than the same cold "
         "starts without them; see its runs paying above. The always-on variant overflows "
         "cold starts that would have been on time locally on this trace's on-demand "
         "functions and its single instance's queue makes some of them miss the SLA."),
        "",
        "## Hybrid histogram: the paper's text and the issue's reading (this run)",
        "",
        *[f"- {name}: {result.by_name(name).cold_starts:,} cold starts, per-function cold-start "
          f"% p50 {p50:.1f} / p75 {p75:.1f}, idle {result.by_name(name).idle_gb_s:,.0f} GB-s"
          for name in ("hybrid histogram", "hybrid histogram (issue 11 reading)",
                       "on-demand, keep-alive 10 min")
          for p50, p75 in [_cold_pct_quartiles(result, name)]],
        *_minute_model_lines(trace),
        "",
        "Lambda cost by item (USD): " + "; ".join(
            f"{t.policy}: " + ", ".join(f"{k} {v:.3f}" for k, v in t.cost_usd.items() if v)
            for t in result.totals) + ".",
        "",
        (f"Warm pings: {', '.join(f'{t.policy} {t.pings:,}' for t in result.totals if t.pings)}. "
         "The simulator bills each ping 1 ms (`PING_BILLED_MS`, the engine's single-ping case) "
         "also where warmstart sends N > 1 at once, which the contract holds 75 ms; billing every "
         f"warmstart ping 74 ms more would add at most ${ping_extra_usd:.3f}."),
        "",
        "## Failed answers (warmstart with the overflow endpoint, per baseline)",
        "",
        ratios_markdown(result),
        "",
        "## Failed answers (warmstart, no overflow, per baseline)",
        "",
        ratios_markdown(result, "warmstart, no overflow"),
        "",
        *WHAT_CHANGED,
        "",
        "Admission decisions of the warmstart policies (reason: count): "
        + "; ".join(
            f"{t.policy}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(t.decisions.items()))
            for t in result.totals if t.decisions
        ) + ".",
        "",
        f"Pareto plot: `{png.relative_to(ROOT)}`.",
        "",
        TRACE_CITATION,
        "",
    ]
    figures = [figure("simulation wall time", wall, "s", jobs=args.jobs),
               figure("wall time with trace loading", total_wall, "s"),
               figure("CPU time of all processes", cpu, "s")]
    for t in result.totals:
        where = {"policy": t.policy}
        figures += [figure(f"{t.policy}: cold starts", t.cold_start_pct, "%", count=t.cold_starts, **where),
                    figure(f"{t.policy}: failed answers", t.failed_answers, "count",
                           late=t.late, degraded=t.degraded, shed=t.shed, **where),
                    figure(f"{t.policy}: tail (warm duration over the SLA)", t.tail, "count",
                           **where),
                    figure(f"{t.policy}: total cost", t.total_usd, "USD",
                           lambda_usd=t.lambda_usd - t.pc_usd, pc_usd=t.pc_usd,
                           endpoint_usd=t.endpoint_usd, **where)]
    path = write_result(args.out.stem, "\n".join(lines), figures, ratios=ratios, command=command,
                        directory=args.out.parent,
                        extra={"load_average_before": list(load_before), "load_average_after": list(load_after)})
    print("\n".join(lines))
    print(f"wrote {path} (and .json) and {png}", file=sys.stderr)
    return 0 if all(r["met"] for r in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
