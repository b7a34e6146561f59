"""`warmstart demo` (what `make demo` runs): one real trace function, warmstart off and on.

1. Synthesizes the stack (``npx cdk synth -o out/demo/cdk.out``), or reuses that output when it
   is newer than every input of the synth (``cdk.json``, ``infra/`` app, constructs and stacks,
   ``functions/``, ``layers/``). The demo keeps its own output directory because the functions
   run from the synthesized asset directories: another synth into ``cdk.out`` while the demo
   runs would replace them under the running execution environments.
2. Replays a slice of a busy, bursty HTTP-triggered function of the shipped Azure 2019 trace
   through the local stack twice: ``off`` (on-demand only) and ``on`` (warmer + forecast-driven
   provisioned concurrency + overflow to the local GPU endpoint + degradation).
3. Prints both tables side by side and writes the HTML report and a Markdown table to
   ``out/demo/`` (``--out``); ``--publish`` also copies both to ``bench/results/`` (the
   committed results), so a plain ``make demo`` changes no tracked file.

Without ``--function`` the slice is picked by the documented rule of
:mod:`infra.replay.pick` (the simulator's warmer scanned over the trace's bursty HTTP
functions); the demo says which slice and why, and compares the replay's cold starts with the
simulator's on the same slice. A 20-minute slice at time scale 10 takes two minutes per run.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from functions.runtime.contract import environment as names
from infra.commands.common import command

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACE = Path("tests/data/traces/azure2019_invocations.csv")
DEFAULT_MINUTES = 20
DEFAULT_TIME_SCALE = 10.0
OUT_DIR = Path("out/demo")
PUBLISHED = Path("bench/results")
#: files the demo writes (in --out; copied to bench/results with --publish)
REPORT_NAME, TABLE_NAME, OVERVIEW_NAME = "demo-report.html", "demo.md", "demo-overview.png"
DEMO_CDK_OUT = Path("out/demo/cdk.out")
#: What the synthesized template depends on (a change makes cdk.out stale).
SYNTH_INPUTS = ("cdk.json", "infra/app.py", "infra/config.py", "infra/constructs", "infra/stacks",
                "functions", "layers")
#: Environment of `npx cdk synth` (as the Makefile exports it).
SYNTH_ENV = {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_RUNTIME_PACKAGE_CACHE_ROOT": str(REPO_ROOT / ".cache/jsii"),
    "CDK_HOME": str(REPO_ROOT / ".cache/cdk"),
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "ORT_DISABLE_TELEMETRY": "1",
    "MPLCONFIGDIR": str(REPO_ROOT / ".cache/matplotlib"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from infra.commands.common import non_negative_int, positive_float, positive_int

    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help=f"Azure 2019 invocations file (default {DEFAULT_TRACE})")
    parser.add_argument("--function", default=None,
                        help="HashFunction to replay (default: the slice infra/replay/pick.py's "
                             "rule picks, with --start-minute)")
    parser.add_argument("--start-minute", type=non_negative_int, default=None,
                        help="first trace minute (default: the picked slice's; 0 with --function)")
    parser.add_argument("--minutes", type=positive_int, default=DEFAULT_MINUTES,
                        help=f"trace minutes per run (default {DEFAULT_MINUTES})")
    parser.add_argument("--time-scale", type=positive_float, default=DEFAULT_TIME_SCALE,
                        help=f"trace seconds per real second (default {DEFAULT_TIME_SCALE:g})")
    parser.add_argument("--cdk-out", type=Path, default=None,
                        help="where the demo synthesizes to (default OUT_DIR/demo/cdk.out: its own "
                             "directory, so a synth elsewhere cannot replace the assets the "
                             "running functions use)")
    parser.add_argument("--no-synth", action="store_true",
                        help="use --cdk-out as it is, even when stale")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where the report ({REPORT_NAME}) and table ({TABLE_NAME}) go "
                             "(default OUT_DIR/demo)")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="skip measuring the agent's admission estimates on this machine "
                             "(warmstart calibrate --agent) before the runs: admission starts "
                             "from its seeds")
    parser.add_argument("--strategy", choices=("auto", "provisioned", "snapstart"),
                        default="auto",
                        help="the cold-start strategy 'on' deploys (default auto: what "
                             "warmers.strategy.recommend_strategy advises for the replayed "
                             "function, as the planner and warmstart simulate choose)")
    parser.add_argument("--off-runs", type=positive_int, default=1,
                        help="replay 'off' this many times and report how much its failed "
                             "answers and cost vary (default 1; the published demo uses 3)")
    parser.add_argument("--publish", action="store_true",
                        help=f"also copy the report and table to {PUBLISHED}/ (the committed "
                             "results; for maintainers)")


def newest_input_mtime(root: Path) -> float:
    """Latest modification time among the synth inputs under ``root`` (0 when none exist)."""
    newest = 0.0
    for name in SYNTH_INPUTS:
        path = root / name
        if path.is_file():
            newest = max(newest, path.stat().st_mtime)
        elif path.is_dir():
            for file in path.rglob("*"):
                if file.is_file() and "__pycache__" not in file.parts:
                    newest = max(newest, file.stat().st_mtime)
    return newest


def template_is_fresh(cdk_out: Path, root: Path) -> bool:
    """True when ``cdk_out`` holds a template newer than every synth input."""
    templates = list(cdk_out.glob("*.template.json")) if cdk_out.is_dir() else []
    if not templates:
        return False
    return min(t.stat().st_mtime for t in templates) >= newest_input_mtime(root)


def synthesize(cdk_out: Path, say: object = print) -> str | None:
    """Run ``npx cdk synth --quiet -o cdk_out``; returns None on success, else why it failed."""
    npx = shutil.which("npx")
    if npx is None:
        return "npx is not on PATH (Node.js 20 and `npm ci` are needed to synthesize)"
    env = dict(os.environ)
    env.update(SYNTH_ENV)
    started = time.monotonic()
    try:
        # --no-install: fail fast (and say so) instead of downloading a CDK CLI when
        # node_modules is missing
        proc = subprocess.run([npx, "--no-install", "cdk", "synth", "--quiet", "-o", str(cdk_out)],
                              cwd=str(REPO_ROOT), env=env, capture_output=True, text=True,
                              timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`npx cdk synth` failed to run: {exc}"
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        hint = ("\n(the AWS CDK CLI is not installed: run `make setup` or `npm ci`)"
                if "missing packages" in (proc.stderr or "") else "")
        return f"`npx cdk synth` exited with status {proc.returncode}:\n{tail}{hint}"
    say(f"demo: synthesized the stack into {cdk_out} in {time.monotonic() - started:.0f} s")  # type: ignore[operator]
    return None


def _under_root(path: Path) -> Path:
    """``path``, relative to the project root unless absolute."""
    return path if path.is_absolute() else REPO_ROOT / path


@command("warmstart demo")
def run(args: argparse.Namespace) -> int:
    import dataclasses

    from infra.commands.common import out_dir
    from infra.local.endpoint_capacity import planned_endpoint_from_cdk_json
    from infra.replay.report import caveats, replay_text_table, summary_paragraph, write_report
    from infra.replay.runner import ReplayOptions, load_local_app, run_replay
    from infra.replay.services import ServiceUnavailable
    from infra.replay.strategy import choose_strategy
    from infra.replay.workload import ReplayInputError, build_workload, read_trace

    started = time.monotonic()
    missing = _missing_parts()
    for part in missing:
        print(f"demo: warning: {part}", file=sys.stderr)
    try:
        trace = read_trace(args.trace if args.trace.exists() or args.trace.is_absolute()
                           else REPO_ROOT / args.trace)
        why = ""
        function, start_minute = args.function, args.start_minute
        floor, cap, objective, bounds = warmer_bounds(REPO_ROOT / "cdk.json")
        planned, endpoint_model, endpoint_said = planned_endpoint_from_cdk_json(
            REPO_ROOT / "cdk.json")
        if function is None:
            from infra.replay.pick import pick_slice

            picked = pick_slice(trace, minutes=args.minutes, objective=objective, floor=floor,
                                cap=cap, endpoint=endpoint_model, time_scale=args.time_scale)
            function = picked.function_id
            start_minute = picked.start_minute if start_minute is None else start_minute
            why = picked.reason()
            print(f"demo: {why}", flush=True)
        workload = build_workload(trace, function, start_minute=start_minute or 0,
                                  minutes=args.minutes)
        out = _under_root(args.out or out_dir(args) / "demo")
        print(f"demo: {bounds}", flush=True)
        print(f"demo: {endpoint_said}", flush=True)
        options = ReplayOptions(time_scale=args.time_scale, log_dir=out / "logs",
                                quiet=bool(getattr(args, "quiet", False)),
                                pc_floor=floor, pc_cap=cap, pc_objective=objective,
                                endpoint=planned)
    except (ReplayInputError, ValueError) as exc:
        print(f"warmstart demo: error: {exc}", file=sys.stderr)
        return 2
    from infra.replay.pick import simulated_cold_starts

    simulated = simulated_cold_starts(trace, workload.function_id, workload.start_minute,
                                      workload.minutes, objective=options.pc_objective,
                                      floor=options.pc_floor, cap=options.pc_cap)

    cdk_out = _under_root(args.cdk_out or out_dir(args) / "demo" / "cdk.out")
    if args.no_synth or template_is_fresh(cdk_out, REPO_ROOT):
        print(f"demo: using the synthesized stack in {cdk_out}"
              + (" (fresh)" if not args.no_synth else ""), flush=True)
    else:
        print("demo: synthesizing the stack (npx cdk synth)...", flush=True)
        problem = synthesize(cdk_out)
        if problem:
            if list(cdk_out.glob("*.template.json")) if cdk_out.is_dir() else []:
                print(f"demo: warning: {problem}\ndemo: using the older template in {cdk_out}",
                      file=sys.stderr)
            else:
                print(f"warmstart demo: error: {problem}", file=sys.stderr)
                return 1

    print(f"demo: function {workload.function_id[:16]}... ({workload.trigger}), trace minutes "
          f"{workload.start_minute}..{workload.start_minute + workload.minutes - 1}, "
          f"{workload.n_requests} requests, time scale {options.time_scale:g}: about "
          f"{workload.minutes * 60 / options.time_scale:.0f} s per run, off then on", flush=True)
    results: list[Any] = []
    calibration_words: list[str] = []
    with tempfile.TemporaryDirectory(prefix="warmstart-demo-") as inline:
        try:
            app = load_local_app(cdk_out=cdk_out, inline_code_dir=Path(inline))
            if not args.no_calibrate:
                app, said = calibrated(app, out / "calibration.json")
                print(f"demo: {said}", flush=True)
                calibration_words = [said]
        except ServiceUnavailable as exc:
            print(f"warmstart demo: error: {exc}", file=sys.stderr)
            return 1
        spec = app.function(app.gateway.function_name) if app.gateway is not None else None
        sla_ms = float(spec.environment.get(names.ENV_SLA_MS, 2000)) if spec else 2000.0
        try:
            choice = choose_strategy(workload, sla_ms=sla_ms, time_scale=options.time_scale,
                                     scale_durations=options.scale_durations,
                                     forced=None if args.strategy == "auto" else args.strategy)
        except ValueError as exc:
            print(f"warmstart demo: error: choosing the strategy: {exc}", file=sys.stderr)
            return 2
        cold = choice.restore if choice.strategy == "snapstart" else choice.init
        options = dataclasses.replace(options, strategy=choice.strategy,
                                      cold_start_ms=(cold.p50_ms, cold.p95_ms))
        print(f"demo: {choice.words()}", flush=True)
        extra_off = []
        for config in ["off"] * args.off_runs + ["on"]:
            try:
                result = run_replay(app, workload, config, options)  # type: ignore[arg-type]
            except ServiceUnavailable as exc:
                print(f"warmstart demo: error: [{config}] {exc}", file=sys.stderr)
                return 1
            if config == "off" and any(r.config == "off" for r in results):
                extra_off.append(result)
            else:
                results.append(result)
    off_runs = [r for r in results if r.config == "off"] + extra_off
    variability = off_variability(off_runs)

    for r in results:
        r.summary = dataclasses.replace(r.summary, sim_cold_starts=simulated[r.config])
    comparison = ([why] if why else []) + [choice.words(), variability, bounds, endpoint_said]
    comparison += calibration_words
    comparison += [pc_words(results), endpoint_words(results), simulator_words(results),
                   overflow_words(results)]
    print()
    print(replay_text_table(results))
    print(f"\n{summary_paragraph(results)}")  # the headline: failed answers, the tail apart
    for r in results:
        for note in r.notes:
            print(f"note [{r.config}]: {note}")
    for line in comparison:
        print(f"demo: {line}")
    print(f"\nReading these numbers: {caveats()}")
    elapsed = time.monotonic() - started
    try:
        out.mkdir(parents=True, exist_ok=True)
        report = write_report(results, out / REPORT_NAME,
                              title="warmstart demo: warmstart off vs on",
                              extra=[f"warmstart demo took {elapsed:.0f} s on {_machine()}"]
                              + comparison[2:] + missing,
                              overview_path=out / OVERVIEW_NAME,
                              reasoning=[choice.words(), variability])
        table_path = out / TABLE_NAME
        table_path.write_text(_markdown(results, workload, options, elapsed, comparison[2:] + missing,
                                        reasoning=[choice.words(), variability]),
                              encoding="utf-8")
        published = publish(out, REPO_ROOT / PUBLISHED) if args.publish else []
    except OSError as exc:
        print(f"warmstart demo: error: could not write the results: {exc}", file=sys.stderr)
        return 1
    print(f"\ndemo: report {report}\ndemo: table  {table_path}\n"
          f"demo: logs   {options.log_dir} (execution environments, GPU endpoint, warmer)")
    for path in published:
        print(f"demo: published {path}")
    print(f"demo: took {elapsed:.0f} s")
    return 0


def publish(out: Path, published: Path) -> list[Path]:
    """Copy the demo's report and table from ``out`` to ``published``; returns the copies.

    Raises
    ------
    OSError
        If a file is missing or cannot be copied.
    """
    missing = [name for name in (REPORT_NAME, TABLE_NAME) if not (out / name).is_file()]
    if missing:
        raise FileNotFoundError(f"nothing published: {', '.join(missing)} missing in {out}")
    published.mkdir(parents=True, exist_ok=True)
    copies = []
    names = (REPORT_NAME, TABLE_NAME) + ((OVERVIEW_NAME,) if (out / OVERVIEW_NAME).is_file() else ())
    for name in names:
        copies.append(Path(shutil.copyfile(out / name, published / name)))
    return copies


def calibrated(app: Any, path: Path, *, samples: int = 5) -> tuple[Any, str]:
    """``app`` with its gateway agent's ``WARMSTART_CALIBRATION`` measured on this machine, as
    a user does before deploying (``warmstart calibrate --agent NAME``, then synth puts the file
    into the function's environment): the document is written to ``path``; returns the app and a
    sentence saying what was measured.

    Raises
    ------
    ServiceUnavailable
        If the agent cannot be found in cdk.json or the measurement fails (the message says why).
    """
    import dataclasses
    import json

    from infra.commands.calibrate import TEXT
    from infra.commands.calibrate_admission import calibrate_agent
    from infra.config import StackConfigError, load_config
    for key, value in SYNTH_ENV.items():  # the construct module loads the CDK (jsii): quiet
        os.environ.setdefault(key, value)
    from infra.constructs.agent_function import admission_calibration
    from infra.replay.services import ServiceUnavailable

    spec = app.function(app.gateway.function_name)
    name = spec.environment.get(names.ENV_AGENT_NAME, "intent")
    try:
        agent = load_config(REPO_ROOT / "cdk.json").agent(name)
        doc = calibrate_agent(agent, samples=samples, body={"text": TEXT}, route=None,
                              machine=_machine(), overflow=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        calibration_json = admission_calibration(
            dataclasses.replace(agent, calibration=path.name), code_root=path.parent)
    except (StackConfigError, KeyError, RuntimeError, OSError) as exc:
        raise ServiceUnavailable(f"calibrating agent {name!r} failed: {exc} (--no-calibrate "
                                 "runs on admission's seeds)") from exc
    assert calibration_json is not None
    env = {**spec.environment, names.ENV_CALIBRATION: calibration_json}
    functions = tuple(dataclasses.replace(f, environment=env) if f.name == spec.name else f
                      for f in app.functions)
    stages = ", ".join(f"{k} {v:.0f}" for k, v in doc["stage_p95_ms"].items())
    overflow = doc.get("overflow_p95_ms")
    return dataclasses.replace(app, functions=functions), (
        f"admission calibrated on this machine first (warmstart calibrate --agent {name}, "
        f"{samples} fresh environments, written to {path.name}; synth would put it into "
        f"{names.ENV_CALIBRATION}): stage p95 ms {stages}; overflow call p95 "
        + ("not measured" if overflow is None else f"{overflow:.0f} ms"))


def warmer_bounds(cdk_json: Path, agent: str = "intent") -> tuple[int, int, str, str]:
    """The floor, cap and objective of the ``on`` run's warmer: ``provisioned_concurrency``
    ``min``, ``max`` and ``objective`` of ``agent`` in cdk.json's ``provisioned`` variant, as
    the stack gives its warmer (``infra.constructs.warmer``), with a sentence saying so.

    Raises
    ------
    ValueError
        If cdk.json cannot be read or the variant sets no provisioned concurrency.
    """
    from infra.config import StackConfigError, load_config

    try:
        pc = load_config(cdk_json, strategy="provisioned").agent(agent).provisioned_concurrency
    except (StackConfigError, KeyError) as exc:
        raise ValueError(f"{cdk_json}: no provisioned variant for agent {agent!r}: {exc}") from exc
    if pc is None:
        raise ValueError(f"{cdk_json}: the provisioned variant sets no provisioned_concurrency "
                         f"for agent {agent!r}")
    above = ("above the floor the planner buys provisioned concurrency only where it pays"
             if pc.objective == "cost" else
             "objective sla: above the floor the planner covers the forecast peak (planning "
             "quantile) within the cap and budget, break-even or not, because this agent's "
             "on-demand cold starts break its SLA")
    return pc.min, pc.max, pc.objective, (
        f"'on' runs the warmer as the stack does for cdk.json's provisioned variant: floor "
        f"{pc.min}, cap {pc.max} (provisioned_concurrency min/max/objective of agent {agent}); "
        f"{above}")


def endpoint_words(results: list[Any]) -> str:
    """What the ``on`` run's planned GPU endpoint did: when a copy was asked for and served,
    and which cold starts were degraded or overflowed around it."""
    on = [r for r in results if r.config == "on"]
    e = on[0].summary.endpoint if on else None
    if e is None:
        return "'on' had no planned GPU endpoint (always on, or not started)."
    s = on[0].summary

    def at(minute: float) -> str:
        return "never" if math.isnan(minute) else f"slice minute {minute:.1f}"

    return (f"the GPU endpoint: a copy asked for at {at(e.ordered_at_min)}, in service at "
            f"{at(e.in_service_at_min)}, published in service at "
            f"{at(e.published_in_service_at_min)} (from then on admission may overflow), most "
            f"{e.max_in_service} in service, {e.copy_hours * 60:.1f} copy-minutes billed; "
            f"cold starts answered degraded {s.cold_degraded}, by overflow {s.cold_overflowed}; "
            f"the plan's reason: {e.reason or 'none'}.")


def simulator_words(results: list[Any]) -> str:
    """The replay's cold starts against ``warmstart simulate``'s on the same slice: within 20 %
    or why they differ (issue 11)."""
    parts, apart = [], []
    for r in results:
        s = r.summary
        sim = s.sim_cold_starts
        parts.append(f"{r.config} {s.cold_starts} replayed vs {sim:.0f} simulated")
        if not (abs(s.cold_starts - sim) <= 0.2 * max(sim, 1.0)):
            apart.append(r.config)
    words = "cold starts against warmstart simulate on the same slice: " + ", ".join(parts)
    if not apart:
        return words + " (within 20 %)."
    return (words + f"; {' and '.join(apart)} differ by more than 20 %: the replay runs at time "
            "scale X, so each init (real time) weighs X times more against the trace's gaps, and "
            "every execution environment shares this machine's 2 cores, so concurrent inits slow "
            "each other and more requests find no free environment (the simulator gives each "
            "init its calibrated time); warm pings and the warmer's history differ too (the "
            "simulator's run starts without history).")


def pc_words(results: list[Any]) -> str:
    """What the ``on`` run's warmer did with provisioned concurrency, and why (its first plan's
    reason, from the planner)."""
    on = [r for r in results if r.config == "on"]
    if not on or not on[0].plans:
        return "'on' had no warmer plan: no provisioned concurrency."
    r = on[0]
    plans = r.plans
    values = [p.provisioned_concurrency for p in plans]
    first = plans[0]
    ahead_min = (r.t0_s - first.t_s) / 60.0
    return (f"the warmer made {len(plans)} plans; provisioned concurrency {values[0]} from its "
            f"first, {ahead_min:.1f} trace min before the slice, most {max(values)}, raised "
            f"{r.summary.pc_raises} time(s); the planner's reason: {first.reason}.")


def overflow_words(results: list[Any]) -> str:
    """The cold answers given by overflow next to the overflow call's own latency (issue 10)."""
    on = [r for r in results if r.config == "on"]
    if not on or not on[0].summary.overflowed:
        return "no request was answered by overflow in 'on'."
    s = on[0].summary
    if not s.cold_overflowed:
        return (f"{s.overflowed} request(s) answered by overflow in 'on', at p50 "
                f"{s.overflow_p50_ms:,.0f} ms from sending (the overflow call alone p50 "
                f"{s.overflow_call_p50_ms:,.0f} ms), all on environments still loading their "
                "model; no cold start's own request was (their overflow calls failed or did "
                "not fit the SLA budget, and admission degraded or shed them: see the lambda log).")
    ratio = s.cold_overflow_p50_ms / s.overflow_call_p50_ms if s.overflow_call_p50_ms else float("nan")
    return (f"{s.cold_overflowed} cold start(s) answered by overflow in 'on': answer p50 "
            f"{s.cold_overflow_p50_ms:,.0f} ms from sending, the overflow call alone p50 "
            f"{s.overflow_call_p50_ms:,.0f} ms ({ratio:.1f}x; the rest is the gateway, the "
            "emulator's init of the toolkit and admission before the call).")


def off_variability(off_runs: list[Any]) -> str:
    """How much ``off`` varies over its replays of the same slice, and why, in one sentence:
    failed answers (late / errors), USD, and the cold starts' REPORT init p50 of each run (the
    evidence for the why: every cold start's init runs for real on this host's CPUs, and a burst
    starts many at once, so how long they take, and so whether their requests answer in time
    or at all, depends on what else the host is doing).

    Raises
    ------
    ValueError
        Without any ``off`` run.
    """
    if not off_runs:
        raise ValueError("no 'off' run to compare")
    s = [r.summary for r in off_runs]
    if len(s) == 1:
        return ("'off' was replayed once (--off-runs 1), so its variation from run to run is "
                "not measured here: its cold starts run real inits on this host's CPUs, which a "
                "burst shares among many at once, so late answers and errors move from run to "
                "run with the host's load (--off-runs 3 measures it).")
    failed = [x.failed_answers for x in s]
    usd = [x.usd for x in s]
    inits = ", ".join("-" if math.isnan(x.init_p50_ms) else f"{x.init_p50_ms:,.0f}" for x in s)
    runs = "; ".join(f"{x.failed_answers} failed ({x.late} late, {x.degraded} degraded, "
                     f"{x.shed} shed, {x.errors} errors), ${x.usd:.4f}" for x in s)
    return (f"'off' over {len(s)} replays of the same slice: failed answers {min(failed)} to "
            f"{max(failed)}, USD {min(usd):.4f} to {max(usd):.4f} ({runs}); the cold starts' "
            f"init p50 per run {inits} ms (REPORT). Why it varies: every 'off' cold start runs a "
            "real init on this host's CPUs and a burst starts many at once, so their inits "
            "stretch with each other and with whatever else runs, and requests cross the SLA, "
            "or the function timeout (errors, billed for the whole timeout), by different "
            "amounts each run; the table shows the first replay.")


def _machine() -> str:
    return f"{platform.node() or 'host'} ({os.cpu_count()} CPUs, Python {platform.python_version()})"


def _markdown(results: list[Any], workload: object, options: object, elapsed_s: float,
              missing: list[str], reasoning: list[str] | None = None,
              overview: str | None = OVERVIEW_NAME) -> str:
    from infra.replay.report import (
        CITATION,
        OVERVIEW_CAPTION,
        caveats,
        replay_markdown_table,
        summary_paragraph,
        verdict,
    )

    w = workload
    lines = [
        "# warmstart demo: warmstart off vs on",
        "",
        f"**{verdict(results)}**",
        "",
    ]
    if overview:
        lines += [f"![latency and failed answers, off against on]({overview})", "",
                  f"*{OVERVIEW_CAPTION}*", ""]
    lines += [
        (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {_machine()}; "
         f"`warmstart demo` took {elapsed_s:.0f} s."),
        "",
        (f"Function `{w.function_id}` ({w.trigger}), trace minutes {w.start_minute}.."  # type: ignore[attr-defined]
         f"{w.start_minute + w.minutes - 1}, {w.n_requests} requests, time scale "  # type: ignore[attr-defined]
         f"{options.time_scale:g}; simulated work per request = trace duration / time scale."),  # type: ignore[attr-defined]
        "",
        summary_paragraph(results),
        "",
        *[line for r in (reasoning or []) for line in (f"- {r}",)],
        "",
        replay_markdown_table(results),
        "",
    ]
    for r in results:
        lines += [f"- {r.config}: {n}" for n in r.notes]
    lines += [f"- {m}" for m in missing]
    lines += ["", f"Reading these numbers: {caveats()}", "",
              "Definitions: see `infra/replay/summary.py`.", "", CITATION, ""]
    return "\n".join(lines)


def _missing_parts() -> list[str]:
    """Components the demo uses that are not (yet) in this tree, each as a sentence."""
    import importlib.util

    missing = []
    if not (REPO_ROOT / "layers/model/artifact/model.onnx").is_file():
        missing.append("layers/model/artifact/model.onnx is missing (export it with "
                       "layers/model/export_model.py): the agent cannot load its model")
    if importlib.util.find_spec("functions.gpu_endpoint.server") is None:
        missing.append("functions/gpu_endpoint is missing: the 'on' run has no overflow")
    if importlib.util.find_spec("warmers.runner") is None:
        missing.append("warmers/runner.py is missing: the 'on' run has no warmer")
    import re

    handler = REPO_ROOT / "functions/agent/handler.py"
    wired = re.compile(r"import [^\n]*\bAdmission\b|functions\.runtime\.(agent|admission|dispatch)"
                       r"|admission_flow")
    if handler.is_file() and not wired.search(handler.read_text(encoding="utf-8")):
        missing.append("the agent handler does not call admission yet: no overflow or "
                       "degradation paths")
    return missing
