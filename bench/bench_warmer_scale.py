"""Planning past one machine (issue 12): a warmer for 10,000 aliases, on paper and by simulation.

Measured here (this run): the warmer's own work per alias (``warmers.runner.run_once`` dry run:
forecast + ``plan_run`` over 14 days of 1-minute history, the series of ``bench_warmer_run``)
and the history's bytes per alias. Taken from AWS's documents (cited in :data:`LIMITS`): what
CloudWatch ``GetMetricData``, Lambda's control plane and Application Auto Scaling allow.

From those, for N aliases (1,000, 10,000, 50,000): how many warmer shards (invocations, each
its own slice of aliases by a stable hash of ``function:alias``) keep one run inside the
1-minute schedule, the memory of each shard, the time to fill a cold shard's 14-day history,
and a minute-by-minute simulation of one hour of runs where every shard draws from the
account-wide API budgets (token buckets: GetMetricData TPS and data points per second, the
Lambda control plane's requests per second) to say whether each run ends within its minute
and how many planned changes wait for the next run.

Run: ``.venv/bin/python -m bench warmer_scale``. Writes ``bench/results/warmer_scale.md`` and
``.json``. No target: these are the figures behind docs/scale.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import command_line, figure, machine, now_utc, table, write_result

#: AWS limits the projection uses (value, source).
LIMITS: dict[str, tuple[float, str]] = {
    "gmd_queries_per_call": (500, "GetMetricData API reference: up to 500 metrics per call"),
    "gmd_points_per_call": (100_800, "GetMetricData API reference: up to 100,800 data points per call"),
    "gmd_tps": (50, "repost.aws knowledge center cloudwatch-getmetricdata-api: 50 TPS"),
    "gmd_dps_recent": (180_000, "same: 180,000 data points/s when StartTime <= 3 h ago"),
    "gmd_dps_old": (396_000, "same: 396,000 data points/s when StartTime > 3 h ago"),
    "lambda_control_rps": (15, ("Lambda quotas page, 'Lambda API requests': control plane 15 "
                                "requests/s, not adjustable (not verified from a stored copy "
                                "here)")),
    "aas_targets_per_type": (500, ("Application Auto Scaling quotas: 500 scalable targets per "
                                   "resource type (Lambda), adjustable")),
    "lambda_memory_mb_max": (10_240, "Lambda quotas: 10,240 MB per function"),
}
#: Metrics read per alias (warmers/cloudwatch.py QUERIES).
METRICS_PER_ALIAS = 3
HISTORY_MIN = 14 * 1440
#: Share of the 60 s schedule a run's compute may use (the rest: API calls, jitter).
COMPUTE_SHARE_S = 30.0
SIZES = (1_000, 10_000, 50_000)
#: Share of aliases whose plan changes in a run (PC raised or lowered): from hysteresis, most
#: runs change few; the simulation is shown for each.
CHANGE_SHARES = (0.01, 0.05, 0.10)


@dataclass
class Bucket:
    """An API budget of ``rate`` units per second served first come, first served (no burst
    credit: conservative)."""

    rate: float
    next_free_s: float = 0.0

    def grant(self, t_s: float, units: float = 1.0) -> float:
        """When a request of ``units`` made at ``t_s`` is served, s."""
        start = max(t_s, self.next_free_s)
        self.next_free_s = start + units / self.rate
        return start


def _measure(functions: int, repeats: int) -> tuple[float, float, int]:
    """Seconds of warmer work per alias (median of repeats), history bytes per alias, n."""
    from bench.bench_warmer_run import _build, _run

    series, now_s = _build(functions, 14)
    times = [_run(series, now_s, None)[0] for _ in range(repeats)]
    nbytes = [sum(getattr(s, f).nbytes for f in ("invocations", "concurrency", "duration_ms"))
              for s in series.values()]
    # the warmer keeps one series per metric it reads, the 3 the bench builds
    per_alias = statistics.mean(nbytes) * METRICS_PER_ALIAS / 3
    return statistics.median(times) / functions, per_alias, functions


def project(n: int, sec_per_alias: float, bytes_per_alias: float) -> dict[str, Any]:
    """Shards, memory and cold-fill time for ``n`` aliases (see the module docstring)."""
    lim = {k: v for k, (v, _) in LIMITS.items()}
    shards = max(1, math.ceil(n * sec_per_alias / COMPUTE_SHARE_S))
    per_shard = math.ceil(n / shards)
    memory_mb = 200.0 + per_shard * bytes_per_alias / 2**20  # 200 MB: interpreter + numpy
    calls_run = math.ceil(n * METRICS_PER_ALIAS / lim["gmd_queries_per_call"])
    points_fill = n * METRICS_PER_ALIAS * HISTORY_MIN
    calls_fill = math.ceil(points_fill / lim["gmd_points_per_call"])
    fill_s = max(calls_fill / lim["gmd_tps"], points_fill / lim["gmd_dps_old"])
    return {"aliases": n, "shards": shards, "aliases_per_shard": per_shard,
            "memory_mb_per_shard": memory_mb, "compute_s_per_run": per_shard * sec_per_alias,
            "gmd_calls_per_run": calls_run, "gmd_calls_cold_fill": calls_fill,
            "cold_fill_s": fill_s, "scalable_targets_needed": n,
            "scalable_target_quota_default": int(lim["aas_targets_per_type"])}


def simulate(n: int, shards: int, sec_per_alias: float, change_share: float,
             minutes: int = 60, seed: int = 7) -> dict[str, Any]:
    """One hour of runs, as events in time order: each minute every shard reads its new minute
    of metrics (GetMetricData calls through the account's TPS and data-point budgets), plans
    (``sec_per_alias`` each), then applies its changes one by one through the Lambda control
    plane's budget; a change not applied within the minute waits for the next run (carried).
    Returns the run ends (s after the minute starts) and the carried changes."""
    import heapq

    lim = {k: v for k, (v, _) in LIMITS.items()}
    rng = np.random.default_rng(seed)
    tps, dps = Bucket(lim["gmd_tps"]), Bucket(lim["gmd_dps_recent"])
    ctl = Bucket(lim["lambda_control_rps"])
    per_shard = math.ceil(n / shards)
    calls = math.ceil(per_shard * METRICS_PER_ALIAS / lim["gmd_queries_per_call"])
    points_per_call = per_shard * METRICS_PER_ALIAS * 2 / calls  # 2 new points per query
    ends: list[float] = []
    carried = [0] * shards
    carried_sum = 0
    for minute in range(minutes):
        start = minute * 60.0
        changes = [int(rng.binomial(per_shard, change_share)) + carried[s] for s in range(shards)]
        events = [(start + 0.05 * s, s, 0, calls) for s in range(shards)]  # 0 = read, 1 = apply
        heapq.heapify(events)
        while events:
            t, s, kind, left = heapq.heappop(events)
            if kind == 0:
                served = max(tps.grant(t), dps.grant(t, points_per_call))
                if left > 1:
                    heapq.heappush(events, (served, s, 0, left - 1))
                else:
                    heapq.heappush(events, (served + per_shard * sec_per_alias, s, 1, changes[s]))
            elif left == 0:
                carried[s] = 0
                ends.append(t - start)
            else:
                served = ctl.grant(t)
                if served > start + 60.0:  # the next run starts: the rest waits for it
                    carried[s] = left
                    ctl.next_free_s = min(ctl.next_free_s, start + 60.0)
                    ends.append(60.0)
                else:
                    heapq.heappush(events, (served, s, 1, left - 1))
        carried_sum += sum(carried)
    return {"aliases": n, "shards": shards, "change_share": change_share,
            "run_end_p50_s": float(np.percentile(ends, 50)),
            "run_end_max_s": float(np.max(ends)),
            "runs_cut_at_60_s": int(sum(1 for e in ends if e >= 60.0)),
            "changes_carried_per_run": carried_sum / (minutes * shards)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench warmer_scale")
    parser.add_argument("--functions", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args, _ = parser.parse_known_args(argv)
    import logging

    logging.getLogger("warmstart.warmer").setLevel(logging.WARNING)
    sec_per_alias, bytes_per_alias, n_measured = _measure(args.functions, args.repeats)
    projections = [project(n, sec_per_alias, bytes_per_alias) for n in SIZES]
    sims = [simulate(p["aliases"], p["shards"], sec_per_alias, share)
            for p in projections for share in CHANGE_SHARES]
    rows = [[f"{p['aliases']:,}", str(p["shards"]), f"{p['aliases_per_shard']:,}",
             f"{p['compute_s_per_run']:.1f}", f"{p['memory_mb_per_shard']:.0f}",
             str(p["gmd_calls_per_run"]), f"{p['gmd_calls_cold_fill']:,}",
             f"{p['cold_fill_s'] / 60:.1f}"] for p in projections]
    sim_rows = [[f"{s['aliases']:,}", str(s["shards"]), f"{s['change_share']:.0%}",
                 f"{s['run_end_p50_s']:.1f}", f"{s['run_end_max_s']:.1f}",
                 str(s["runs_cut_at_60_s"]), f"{s['changes_carried_per_run']:.1f}"] for s in sims]
    md = "\n".join([
        "# Planning past one machine: a warmer for 10,000 aliases",
        "",
        f"- Date: {now_utc()}; machine: {machine()}",
        f"- Command: `{command_line(argv, module='bench/bench_warmer_scale.py')}`",
        (f"- Measured: warmer work {sec_per_alias * 1000:.1f} ms per alias (dry run of "
         f"`run_once`, forecast + plan_run, {n_measured} aliases x 14 days of 1-minute history, "
         f"median of {args.repeats}); history {bytes_per_alias / 1024:.0f} KiB per alias "
         f"({METRICS_PER_ALIAS} float64 series x {HISTORY_MIN:,} minutes)."),
        "- Limits: " + "; ".join(f"{k} = {v:g} ({src})" for k, (v, src) in LIMITS.items()),
        "",
        "## Shards, memory and the cold fill",
        "",
        table(["aliases", "shards", "aliases/shard", "compute s/run", "MB/shard",
               "GetMetricData calls/run", "calls to fill 14 days", "fill minutes"], rows),
        "",
        (f"Shards: enough that one run's compute stays under {COMPUTE_SHARE_S:.0f} s of the "
         "1-minute schedule. Filling a cold shard's 14 days is bound by GetMetricData's data "
         "points per second (396,000 for data older than 3 h): keep the history between runs "
         "(the warmer's CachingMetricsSource does, per warm execution environment; persist it, "
         "or read days 3-14 as 5-minute aggregates, when shards go cold)."),
        "",
        "## One hour of runs through the account's API budgets (simulation)",
        "",
        table(["aliases", "shards", "changes/run", "run end p50 s", "run end max s",
               "runs cut at 60 s", "changes carried/run"], sim_rows),
        "",
        ("Every shard shares the account's budgets: GetMetricData 50 TPS and 180,000 recent data "
        f"points/s (reads are cheap: {METRICS_PER_ALIAS} queries x 2 new points per alias), and "
        "the Lambda control "
        "plane's 15 requests/s for applying provisioned concurrency, which binds first: at most "
        "~900 changes a minute for the whole account, whatever the shard count. Changes that do "
        "not fit wait for the next run; hysteresis and the plan's change budget keep the share "
        "low. 10,000 aliases also need the Application Auto Scaling quota of Lambda scalable "
        "targets (500 by default) raised, or PutProvisionedConcurrencyConfig directly."),
    ])
    write_result("warmer_scale", md,
                 [figure("warmer work per alias", sec_per_alias * 1000, "ms", n=n_measured),
                  figure("history per alias", bytes_per_alias / 1024, "KiB")]
                 + [figure(f"shards for {p['aliases']} aliases", p["shards"], "count")
                    for p in projections],
                 command=command_line(argv, module="bench/bench_warmer_scale.py"),
                 extra={"limits": {k: {"value": v, "source": s} for k, (v, s) in LIMITS.items()},
                        "projections": projections, "simulations": sims})
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
