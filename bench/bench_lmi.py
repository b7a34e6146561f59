"""Benchmark: Lambda Managed Instances (issue 22) on the shipped 8-hour Azure 2019 trace.

Policies, every function of the trace (298 x 480 minutes) through the fleet simulator
(``warmers.simulator.run.run_simulation``, its LMI mode ``warmers.simulator.lmi``):

- ``lmi reactive``: LMI as AWS scales it, the default minimum of 3 environments;
- ``lmi static minimum``: a minimum sized for each function's peak (known in advance);
- ``warmstart lmi``: ``plan_run`` strategy ``managed_instances`` every minute sets the minimum
  for the forecast window;
- ``warmstart (lambda)``: the existing warmstart policy on Lambda (strategy per function by
  ``recommend_strategy``: provisioned concurrency / pings or SnapStart), without the overflow
  endpoint so that every cost and failed answer is per function;
- ``warmstart, strategy per function``: per function ``warmstart lmi`` where
  ``warmers.strategy.advise_managed_instances`` chose LMI from the function's per-minute profile
  (its peak and mean in flight, as CloudWatch shows them; the input ``recommend_strategy(lmi=)``
  takes), else ``warmstart (lambda)``; chosen before the runs, from the profile alone (the
  oracle, the cheaper of the two runs' rows at no more failed answers, is reported beside it).

The whole trace runs twice: at the trace's own memory sizes (128 MB for most functions) and at
2048 MB (an agent with a local model; LMI's smallest function, 2 GB per vCPU), where Lambda's
duration price is 16x and the choice can turn.

And the three LMI policies once more on the trace made harder on purpose (:func:`harder_trace`:
bursts at random minutes that more than double the traffic within 5 minutes).

Targets (issue 22): warmstart lmi throttles <= 10 % of lmi reactive's at a cost <= lmi static
minimum's; the per-function mix fails no more answers than the best single-strategy fleet, at a
lower cost. Also for the 10 busiest functions alone.

Run: ``.venv/bin/python bench/bench_lmi.py [--jobs 2]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import command_line, figure, machine, ratio, table, write_result

BUSIEST = 10
MIX = "warmstart, strategy per function"
LAMBDA = "warmstart (lambda)"
LMI = "warmstart lmi"


def _fleets(rows: list[Any], ids: set[str] | None, lambda_name: str, lmi_name: str,
            mix_name: str, advised: set[str]) -> dict[str, dict[str, float]]:
    """Per policy: functions, requests, throttled, failed answers, cost over ``ids``; and the
    per-function mix of ``lambda_name`` and ``lmi_name`` as ``mix_name``: LMI for the functions
    in ``advised`` (``oracle_lmi_functions``: how many the cheaper row at no more failed answers
    would have put on LMI)."""
    out: dict[str, dict[str, float]] = {}
    by_fn: dict[str, dict[str, Any]] = {}
    for r in rows:
        if ids is not None and r.function_id not in ids:
            continue
        by_fn.setdefault(r.function_id, {})[r.policy] = r
        f = out.setdefault(r.policy, dict.fromkeys(
            ("functions", "requests", "throttled", "failed", "cost_usd", "lmi_functions"), 0.0))
        f["functions"] += 1
        f["requests"] += r.requests
        f["throttled"] += r.throttled
        f["failed"] += r.failed_answers
        f["cost_usd"] += r.lambda_usd
    mix = dict.fromkeys(("functions", "requests", "throttled", "failed", "cost_usd",
                         "lmi_functions", "oracle_lmi_functions"), 0.0)
    for fn, got in by_fn.items():
        lam, lmi = got[lambda_name], got[lmi_name]
        pick = lmi if fn in advised else lam
        oracle = min((lam, lmi), key=lambda r: (r.failed_answers, r.lambda_usd))
        mix["oracle_lmi_functions"] += oracle is lmi
        mix["functions"] += 1
        mix["requests"] += pick.requests
        mix["throttled"] += pick.throttled
        mix["failed"] += pick.failed_answers
        mix["cost_usd"] += pick.lambda_usd
        mix["lmi_functions"] += pick is lmi
    out[mix_name] = mix
    return out


AGENT_MEMORY_MB = 2048  # LMI's smallest function (2 GB per vCPU) and a model agent's size


def _advice(trace: Any, seed: int, settings: Any, minimum: int) -> dict[str, Any]:
    """``advise_managed_instances`` per function of ``trace`` from its per-minute profile (the
    simulator's requests for ``seed``: peak and mean in flight, invocations), at the trace's
    memory sizes, with the shipped prices."""
    from warmers.cost import CostModel
    from warmers.lmi import request_usd
    from warmers.simulator.constants import SIM_ARCHITECTURE
    from warmers.simulator.trace import demand_concurrency, make_workload, mean_concurrency
    from warmers.strategy import advise_managed_instances

    cost = CostModel.us_east_1(SIM_ARCHITECTURE)
    out: dict[str, Any] = {}
    for i in range(trace.n_functions):
        w = make_workload(trace, i, seed=seed, default_sla_ms=1000.0, sla_duration_factor=1.0)
        out[w.function_id] = advise_managed_instances(
            demand_concurrency(w).astype(float), mean_concurrency(w),
            trace.counts[i].astype(float), memory_mb=w.memory_mb,
            on_demand_gb_s_usd=cost.on_demand_gb_s.usd,
            pc_configured_gb_s_usd=cost.pc_configured_gb_s.usd,
            pc_duration_gb_s_usd=cost.pc_duration_gb_s.usd, lambda_request_usd=cost.request.usd,
            environment_hourly_usd=settings.environment_hourly_usd(),
            lmi_request_usd=request_usd(), per_environment=settings.per_environment,
            minimum_environments=minimum, lead_min=int(settings.scale_out_lead_min))
    return out


HARDER_BURSTS = 3  # per function
HARDER_FACTOR = 8  # x the minute's count (at least 8 calls), for 2 minutes


def harder_trace(trace: Any, seed: int) -> Any:
    """``trace`` made harder on purpose: per function, :data:`HARDER_BURSTS` bursts at random
    minutes (seeded), each 2 minutes of ``max(HARDER_FACTOR x count, HARDER_FACTOR)`` calls:
    traffic that more than doubles within 5 minutes, at minutes no history announces."""
    from dataclasses import replace

    import numpy as np

    rng = np.random.default_rng(seed)
    counts = trace.counts.copy()
    for i in range(counts.shape[0]):
        for m in rng.choice(counts.shape[1] - 2, HARDER_BURSTS, replace=False):
            counts[i, m:m + 2] = np.maximum(counts[i, m:m + 2] * HARDER_FACTOR, HARDER_FACTOR)
    return replace(trace, counts=counts)


#: Causes of a throttled request (:func:`throttle_causes`), in the order the tables show them.
CAUSES = ("no_history", "beyond_history", "within_history")


def throttle_causes(trace: Any, seed: int, policies: list[Any], rows: list[Any]
                    ) -> dict[str, dict[str, int]]:
    """Each LMI policy's throttled requests by what the function's own history showed.

    A request throttled in minute ``m`` of a function is

    - ``no_history``: the function had no request in the minutes before ``m - lead`` (``lead``
      the policy's ``LmiSettings.scale_out_lead_min``: a minimum usable at ``m`` was set then),
      so nothing it had done could announce the minute: the trace's first minutes, or the
      first traffic of a function silent until then;
    - ``beyond_history``: its peak in flight in minute ``m`` is larger than every minute's
      before ``m - lead``: a peak the function had never shown;
    - ``within_history``: a peak no larger than one it had already shown: what a plan from
      the function's history could have covered.

    The split depends on the demand only, not on the policy, so the three policies are
    compared on the same requests; a policy that sizes its minimum from history can only
    remove ``within_history`` throttles (the first two are the same for every such policy,
    reactive scaling included, up to where the capacity in place happened to be).

    The functions are simulated again one by one (``simulate_lmi`` with each policy's
    controls, the run's seed and workload); the totals must equal the run's rows, else
    ``RuntimeError`` (the breakdown would not describe the run).
    """
    import numpy as np

    from warmers.simulator.controls import LOCAL
    from warmers.simulator.lmi import simulate_lmi
    from warmers.simulator.policies import Observed
    from warmers.simulator.trace import MINUTE_MS, make_workload

    by_name = {p.name: p for p in policies if hasattr(p, "settings")}
    out = {name: dict.fromkeys(CAUSES, 0) for name in by_name}
    throttled: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.policy in by_name and r.throttled:
            throttled.setdefault(r.function_id, {})[r.policy] = r.throttled
    index = {fid: i for i, fid in enumerate(trace.function_ids)}
    for fid, got in throttled.items():
        w = make_workload(trace, index[fid], seed=seed, default_sla_ms=1000.0,
                          sla_duration_factor=1.0)
        observed = Observed.from_workload(w)
        peak = observed.concurrency_max
        for name, want in got.items():
            policy = by_name[name]
            result = simulate_lmi(w, policy.controls(w, observed, None))
            idx = np.nonzero(np.asarray(result.paths) != LOCAL)[0]
            if len(idx) != want:
                raise RuntimeError(f"{name} on {fid}: {len(idx)} throttled when simulated "
                                   f"alone, {want} in the run")
            lead = math.ceil(policy.settings.scale_out_lead_min)
            for m in (w.arrivals_ms[idx] // MINUTE_MS).astype(int):
                seen = peak[:max(0, m - lead)]
                if not seen.size or seen.max() <= 0:
                    out[name]["no_history"] += 1
                elif peak[m] > seen.max():
                    out[name]["beyond_history"] += 1
                else:
                    out[name]["within_history"] += 1
    return out


def causes_lines(causes: dict[str, dict[str, int]], names: list[str]) -> list[str]:
    """Markdown: the :func:`throttle_causes` table of ``names`` (reactive first, then the
    policy compared with it) and the ratio on ``within_history`` throttles."""
    rows = [[n, *(f"{causes[n][c]:,}" for c in CAUSES)] for n in names]
    reactive, ws = causes[names[0]]["within_history"], causes[names[-1]]["within_history"]
    share = f"{ws / reactive:.3f}" if reactive else "- (reactive has none)"
    return ["Throttled requests by what the function's history showed (`throttle_causes`):", "",
            table(["policy", "no history", "beyond history", "within history"], rows), "",
            (f"- within history: {names[-1]} / {names[0]} = {share} (a diagnosis, not the "
             "issue's target: the throttles a plan from history could have prevented)"), ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2019)
    parser.add_argument("--limit", type=int, default=None,
                        help="only the first N functions (a reduced run)")
    args = parser.parse_args(argv)

    from dataclasses import replace

    import numpy as np

    from warmers.lmi import LmiSettings
    from warmers.pricing import load_prices
    from warmers.simulator.calibration import load_calibration
    from warmers.simulator.lmi import LmiReactive, LmiStaticMinimum, WarmstartLmi
    from warmers.simulator.run import run_simulation
    from warmers.simulator.trace import load_trace
    from warmers.simulator.warmstart_policy import WarmstartPolicy

    trace = load_trace(ROOT / "tests" / "data" / "traces")
    if args.limit:
        keep = slice(0, args.limit)
        trace = replace(trace, function_ids=trace.function_ids[keep],
                        triggers=trace.triggers[keep], counts=trace.counts[keep],
                        duration_pct_ms=trace.duration_pct_ms[keep],
                        memory_mb=trace.memory_mb[keep],
                        duration_count=None if trace.duration_count is None
                        else trace.duration_count[keep])
    agent_trace = replace(trace, memory_mb=np.full_like(trace.memory_mb, AGENT_MEMORY_MB))
    calibration = load_calibration(None)
    #: (label, settings, minimum): AWS's defaults (16 requests per vCPU, minimum 3), and a
    #: CPU-bound handler (2 requests per environment) with the minimum lowered to 1
    configs = [("", LmiSettings(), 3),
               (" (2/env, min 1)", LmiSettings(concurrency_per_environment=2), 1)]
    #: (memory tag, trace, configs): the trace's own sizes with both configurations, and the
    #: agents' size with AWS's defaults
    runs = [("", trace, configs), (f" at {AGENT_MEMORY_MB} MB", agent_trace, configs[:1])]
    env_usd_h = LmiSettings().environment_hourly_usd()
    totals = np.asarray(trace.counts.sum(axis=1))
    busiest = {trace.function_ids[i] for i in np.argsort(-totals)[:BUSIEST]}

    def section(title: str, fleets: dict[str, dict[str, float]], lmi_hours: dict[str, float],
                tag: str, lambda_name: str) -> tuple[list[str], list[dict[str, Any]]]:
        mix_name = MIX + tag
        names = ["lmi reactive" + tag, "lmi static minimum" + tag, LMI + tag, lambda_name,
                 mix_name]
        rows = [[n, f"{int(fleets[n]['functions'])}", f"{int(fleets[n]['requests']):,}",
                 f"{int(fleets[n]['throttled']):,}", f"{int(fleets[n]['failed']):,}",
                 (f"{lmi_hours[n]:,.1f}" if n in lmi_hours else "-"),
                 f"${fleets[n]['cost_usd']:,.2f}"]
                for n in names]
        reactive, static = fleets[names[0]], fleets[names[1]]
        ws, mix = fleets[names[2]], fleets[mix_name]
        singles = names[:-1]
        best = min(singles, key=lambda n: (fleets[n]["failed"], fleets[n]["cost_usd"]))
        rs = [
            ratio(f"{title}: {names[2]} throttled / {names[0]} throttled",
                  ws["throttled"] / reactive["throttled"] if reactive["throttled"] else 0.0,
                  0.10, throttled=ws["throttled"], reactive=reactive["throttled"],
                  vacuous=reactive["throttled"] == 0),
            ratio(f"{title}: {names[2]} cost / {names[1]} cost",
                  ws["cost_usd"] / static["cost_usd"], 1.0),
            ratio(f"{title}: {mix_name} failed answers / best single fleet's ({best})",
                  mix["failed"] / fleets[best]["failed"] if fleets[best]["failed"] else
                  (0.0 if mix["failed"] == 0 else float("inf")), 1.0,
                  mix=mix["failed"], best=fleets[best]["failed"]),
            ratio(f"{title}: {mix_name} cost / best single fleet's ({best})",
                  mix["cost_usd"] / fleets[best]["cost_usd"], 1.0, op="<"),
        ]
        md = [f"## {title}", "",
              table(["policy", "functions", "requests", "throttled (429)", "failed answers",
                     "LMI environment-hours", "cost"], rows), "",
              (f"Per-function mix: LMI advised for {int(mix['lmi_functions'])} of "
               f"{int(mix['functions'])} functions (the oracle of the two runs' rows: "
               f"{int(mix['oracle_lmi_functions'])}). Best single-strategy fleet: {best}."), "",
              *(f"- {r['name']}: {r['value']:.3f} (target {r['target']}): "
                f"{'met' if r['met'] else 'NOT met'}"
                + (" (vacuous: the reactive fleet throttles nothing)" if r.get("vacuous")
                   else "") for r in rs), ""]
        return md, rs

    def harder_section(result: Any, tag: str, label: str) -> tuple[list[str], list[Any]]:
        names = ["lmi reactive" + tag, "lmi static minimum" + tag, LMI + tag]
        got = {n: {"throttled": sum(r.throttled for r in result.rows if r.policy == n),
                   "requests": sum(r.requests for r in result.rows if r.policy == n),
                   "cost_usd": sum(r.lambda_usd for r in result.rows if r.policy == n)}
               for n in names}
        title = f"Harder on purpose (the trace with bursts added), {label}"
        rows = [[n, f"{int(got[n]['requests']):,}", f"{int(got[n]['throttled']):,}",
                 f"${got[n]['cost_usd']:,.2f}"] for n in names]
        reactive, static, ws = (got[n] for n in names)
        rs = [ratio(f"{title}: {names[2]} throttled / {names[0]} throttled",
                    ws["throttled"] / reactive["throttled"] if reactive["throttled"] else 0.0,
                    0.10, throttled=ws["throttled"], reactive=reactive["throttled"],
                    vacuous=reactive["throttled"] == 0),
              ratio(f"{title}: {names[2]} cost / {names[1]} cost",
                    ws["cost_usd"] / static["cost_usd"], 1.0)]
        md = [f"## {title}", "",
              table(["policy", "requests", "throttled (429)", "cost"], rows), "",
              *(f"- {r['name']}: {r['value']:.3f} (target {r['target']}): "
                f"{'met' if r['met'] else 'NOT met'}" for r in rs), ""]
        return md, rs, got

    md_all: list[str] = []
    ratios_all: list[dict[str, Any]] = []
    fleets_json: dict[str, Any] = {}
    env_hours: dict[str, float] = {}
    advised_json: dict[str, Any] = {}
    wall = 0.0
    for memory_tag, run_trace, run_configs in runs:
        lambda_name = LAMBDA + memory_tag
        policies: list[Any] = []
        for tag, settings, low in run_configs:
            tag = tag + memory_tag
            policies += [LmiReactive(settings, minimum=low, name="lmi reactive" + tag),
                         LmiStaticMinimum(settings, floor=low, name="lmi static minimum" + tag),
                         WarmstartLmi(settings, floor=low, name=LMI + tag)]
        # the same 'warmstart, no overflow' as bench validation's (warmstart_variants):
        # strategy auto (recommend_strategy per function), not WarmstartPolicy's default
        policies.append(WarmstartPolicy(overflow=False, name=lambda_name, strategy="auto"))
        t0 = time.perf_counter()
        result = run_simulation(run_trace, policies, calibration, seed=args.seed, jobs=args.jobs)
        wall += time.perf_counter() - t0
        # LMI environment-hours of the whole trace: the instance-time cost item / one
        # environment's price (the per-function rows keep only the total cost)
        env_hours.update({t.policy: t.cost_usd.get("lmi_instances", 0.0) / env_usd_h
                          for t in result.totals if "lmi" in t.policy})
        causes = throttle_causes(run_trace, args.seed, policies, result.rows)
        for tag, settings, low in run_configs:
            tag = tag + memory_tag
            label = f"{settings.per_environment} requests per environment, minimum {low}"
            label += f", {AGENT_MEMORY_MB} MB" if memory_tag else ", the trace's memory sizes"
            advice = _advice(run_trace, args.seed, settings, low)
            advised = {fn for fn, a in advice.items() if a.chosen}
            advised_json[label] = {fn: {"chosen": a.chosen, "lambda_usd": a.lambda_usd,
                                        "lmi_usd": a.lmi_usd, "ramp_minutes": a.ramp_minutes,
                                        "reason": a.reason} for fn, a in advice.items()}
            whole = _fleets(result.rows, None, lambda_name, LMI + tag, MIX + tag, advised)
            busy = _fleets(result.rows, busiest, lambda_name, LMI + tag, MIX + tag, advised)
            md1, r1 = section(f"Whole trace ({run_trace.n_functions} functions x "
                              f"{run_trace.n_minutes} minutes), {label}", whole, env_hours, tag,
                              lambda_name)
            md2, r2 = section(f"The {BUSIEST} busiest functions alone, {label}", busy, {}, tag,
                              lambda_name)
            lmi_names = ["lmi reactive" + tag, "lmi static minimum" + tag, LMI + tag]
            md_all += md1 + causes_lines(causes, lmi_names) + md2
            ratios_all += r1 + r2
            fleets_json[label] = {"whole": whole, "busiest": busy,
                                  "throttle_causes": {n: causes[n] for n in lmi_names}}
    # harder on purpose: LMI policies only (the question is the forecast-driven minimum
    # against bursts no history announces)
    hard = harder_trace(trace, args.seed)
    hard_policies: list[Any] = []
    for tag, settings, low in configs:
        hard_policies += [LmiReactive(settings, minimum=low, name="lmi reactive" + tag),
                          LmiStaticMinimum(settings, floor=low, name="lmi static minimum" + tag),
                          WarmstartLmi(settings, floor=low, name=LMI + tag)]
    t0 = time.perf_counter()
    hard_result = run_simulation(hard, hard_policies, calibration, seed=args.seed,
                                 jobs=args.jobs)
    wall += time.perf_counter() - t0
    hard_causes = throttle_causes(hard, args.seed, hard_policies, hard_result.rows)
    for tag, settings, low in configs:
        label = f"{settings.per_environment} requests per environment, minimum {low}"
        md_h, r_h, got_h = harder_section(hard_result, tag, label)
        lmi_names = ["lmi reactive" + tag, "lmi static minimum" + tag, LMI + tag]
        md_all += md_h + causes_lines(hard_causes, lmi_names)
        ratios_all += r_h
        fleets_json[f"harder: {label}"] = {
            "whole": got_h, "busiest": {},
            "throttle_causes": {n: hard_causes[n] for n in lmi_names}}
    prices = load_prices()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Lambda Managed Instances on the Azure 2019 8-hour trace (issue 22)", "",
        f"- Date: {date}", f"- Machine: {machine()}",
        f"- Simulator wall time: {wall:.0f} s (jobs {args.jobs}, seed {args.seed})", "",
        ("Trace: Azure Functions Trace 2019 subset (Shahrad et al., USENIX ATC 2020, CC-BY 4.0; "
         "as vendored by vHive InVitro, MIT), 298 functions x 480 minutes."), "",
        ("LMI model (`warmers/simulator/lmi.py`): m7g.large (2 vCPU), 1 vCPU per environment "
         "serving 16 requests at once (the Python default; second configuration: 2, a "
         "CPU-bound handler, with the minimum lowered to 1), reactive scale-out to 2x the served "
         "peak usable 5 minutes later (assumed: AWS publishes no lead time; 2x/5 min is the "
         "documented doubling rule), scale-in after 5 minutes, 429 beyond capacity. Prices "
         f"(`warmers/prices.json`): EC2 m7g.large ${prices.price('ec2_m7g_large_hour').usd}/h "
         f"({prices.price('ec2_m7g_large_hour').source}), management fee "
         f"{prices.price('lmi_management_fee_fraction').usd:.0%} "
         f"({prices.price('lmi_management_fee_fraction').source}), requests "
         f"${prices.price('lmi_requests_per_million').usd}/1M; one environment "
         f"${env_usd_h:.4f}/h. The Lambda fleet's costs: on-demand, provisioned concurrency, "
         "SnapStart, requests (no GPU endpoint, no warmer reads in either)."), "",
        ("The per-function choice (`warmers.strategy.advise_managed_instances`, the `lmi=` input "
         "of `recommend_strategy`) is made from each function's per-minute profile before the "
         "runs: LMI where no minute's peak needs more than twice the environments of the 5 "
         "minutes before, and LMI's environments (minimum included) cost under 90 % of the "
         "cheapest the function could cost on Lambda (each minute at the cheaper of on-demand "
         "and provisioned concurrency sized to its mean in flight)."), "",
        *md_all,
        "## Caveats", "",
        (f"- Harder on purpose: per function {HARDER_BURSTS} bursts at random minutes (seed "
         f"{args.seed}), each 2 minutes of {HARDER_FACTOR}x the minute's calls (at least "
         f"{HARDER_FACTOR}); no causal policy can see the first of them coming: warmstart lmi "
         "holds the peak it has seen (`LmiSettings.peak_hold_min`, a day), so it covers the "
         "bursts after the first at its size."),
        ("- The 2048 MB run changes only the functions' memory (the trace's durations and "
         "arrivals are kept): it stands for agents of that size, which the Azure trace does not "
         "have."),
        ("- LMI's scale-out lead, its scaler's target and scale-in hold are assumptions "
         "(`warmers.simulator.lmi` docstring); instance bin-packing is ignored (environments "
         "are billed by their vCPU share of an instance)."),
        ("- warmstart lmi plans on unthrottled per-minute metrics (the simulator's Observed, as "
         "for every policy)."),
    ]
    figures = [figure(f"{label}: {n} {k}", v, "USD" if k == "cost_usd" else "count")
               for label, got in fleets_json.items() for n, f in got["whole"].items()
               for k, v in f.items()]
    figures += [figure(f"{label}: {n} throttled, {cause.replace('_', ' ')}", v, "count")
                for label, got in fleets_json.items()
                for n, by_cause in got["throttle_causes"].items() for cause, v in by_cause.items()]
    write_result("lmi", "\n".join(lines) + "\n", figures, ratios=ratios_all,
                 command=command_line(["lmi", "--jobs", str(args.jobs), "--seed",
                                       str(args.seed)]),
                 reduced=f"first {args.limit} functions" if args.limit else None,
                 extra={"fleets": fleets_json, "env_hours": env_hours, "wall_s": wall,
                        "busiest_ids": sorted(busiest), "advice": advised_json})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
