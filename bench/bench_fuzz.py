"""Long fuzzing profile of the event edge: examples run and escapes found (target: 0 escapes in
>= 100,000 examples).

The strategies and the property are `bench.fuzz_events` (the same as ``make test``'s bounded
profile, ``tests/fuzz/test_edge_fuzz.py``): Hypothesis draws events of every source (HTTP API
v2, function URL, REST API v1, ALB with and without multi-value headers, warm ping, unknown),
mutated in every field, against the real handlers of the intent agent, the lookup agent (its
tool the real stub, ``infra.local.tool_stub``, in its own process) and a minimal user agent,
in-process. Each example checks the answer (format of the source, status class, no internal
detail, writable logs) and then that the next valid request to the same environment is
answered correctly.

Runs in chunks (``--chunk`` examples per environment, round robin, each chunk with its own
seed from ``--seed``), so a time limit (``--max-minutes``) stops between chunks and the report
says how many examples ran. Findings are counted by kind; ``escape`` is an exception out of
the handler, every other kind a broken property; the first example of each kind is kept.

``--workers N`` runs N processes, each with its own environments and seed (``seed + i``),
and sums their tallies.

Run: ``.venv/bin/python -m bench fuzz`` (``--examples 100000 --chunk 200 --seed 13
--max-minutes 0 --workers 1``; 0 minutes: no limit).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import (
    REPO_ROOT,
    RESULTS_DIR,
    command_line,
    figure,
    machine,
    now_utc,
    ratio,
    table,
    write_result,
)
from bench.agents import tool_stub

DEFAULT_EXAMPLES = 100_000
DEFAULT_CHUNK = 200
DEFAULT_SEED = 13


def run_fuzz(examples: int, chunk: int, seed: int, max_minutes: float, tool_url: str) -> dict[str, Any]:
    """Fuzz until ``examples`` ran or ``max_minutes`` passed (0: no limit); the tallies."""
    from bench import fuzz_events as fe

    envs = fe.environments(tool_url)
    found: collections.Counter[tuple[str, str]] = collections.Counter()
    first: dict[tuple[str, str], str] = {}
    per_env = dict.fromkeys((e.name for e in envs), 0)
    sources: collections.Counter[str] = collections.Counter()
    failing = 0
    started = time.monotonic()
    rng = random.Random(seed)
    total = 0

    def record(env: fe.Environment, case: fe.Case, problems: list[str]) -> None:
        nonlocal failing
        per_env[env.name] += 1
        sources[case.source] += 1
        if problems:
            failing += 1
        for problem in problems:
            key = (env.name, problem)
            found[key] += 1
            first.setdefault(key, fe.describe(case))

    with contextlib.redirect_stdout(io.StringIO()) as sink, \
            fe.probing_logs([e.handler.config.service_name for e in envs]) as probe:
        while total < examples:
            if max_minutes and time.monotonic() - started > max_minutes * 60:
                break
            for env in envs:
                size = min(chunk, max(0, examples - total))
                if size == 0:
                    break

                one = _fuzzer(env, size, rng.getrandbits(64), record, probe)
                before = per_env[env.name]
                one()
                total += per_env[env.name] - before
                sink.seek(0)
                sink.truncate()  # the EMF lines the metrics print: not kept
    elapsed_s = time.monotonic() - started
    escapes = sum(n for (_, p), n in found.items() if p.startswith("escape"))
    return {
        "examples": total, "elapsed_s": elapsed_s, "per_environment": per_env,
        "per_source": dict(sources), "failing_examples": failing, "escapes": escapes,
        "log_lines": probe.lines, "unwritable_log_records": probe.unwritable,
        "findings": [{"environment": e, "problem": p, "count": n, "first": first[(e, p)]}
                     for (e, p), n in found.most_common()],
    }


def _parallel(args: argparse.Namespace) -> dict[str, Any]:
    """``args.workers`` processes of this benchmark, seeds ``seed``, ``seed + 1``, ...; their
    tallies summed (the wall time is the longest worker's)."""
    import tempfile

    share = -(-args.examples // args.workers)
    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"worker{i}.json" for i in range(args.workers)]
        procs = [subprocess.Popen([sys.executable, "-m", "bench.bench_fuzz", "--examples", str(share),
                                   "--chunk", str(args.chunk), "--seed", str(args.seed + i),
                                   "--max-minutes", str(args.max_minutes), "--worker-out", str(out)],
                                  cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
                 for i, out in enumerate(outs)]
        for proc in procs:
            if proc.wait() != 0:
                raise RuntimeError(f"a fuzz worker failed (exit {proc.returncode})")
        parts = [json.loads(out.read_text()) for out in outs]
    merged: dict[str, Any] = {"examples": 0, "elapsed_s": 0.0, "per_environment": {}, "per_source": {},
                              "failing_examples": 0, "escapes": 0, "log_lines": 0,
                              "unwritable_log_records": 0, "findings": []}
    for part in parts:
        for key in ("examples", "failing_examples", "escapes", "log_lines", "unwritable_log_records"):
            merged[key] += part[key]
        merged["elapsed_s"] = max(merged["elapsed_s"], part["elapsed_s"])
        for key in ("per_environment", "per_source"):
            for name, count in part[key].items():
                merged[key][name] = merged[key].get(name, 0) + count
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    first: dict[tuple[str, str], str] = {}
    for part in parts:
        for f in part["findings"]:
            counts[(f["environment"], f["problem"])] += f["count"]
            first.setdefault((f["environment"], f["problem"]), f["first"])
    merged["findings"] = [{"environment": e, "problem": p, "count": n, "first": first[(e, p)]}
                          for (e, p), n in counts.most_common()]
    merged["workers"] = args.workers
    return merged


def _fuzzer(env: Any, size: int, seed: int, record: Any, probe: Any) -> Any:
    """A Hypothesis test of ``size`` examples of ``env`` (seeded), reporting to ``record``
    (a log record the ``probe`` could not write is a finding of that example)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from bench import fuzz_events as fe

    @hypothesis_seed(seed)
    @settings(max_examples=size, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=fe.cases(env))
    def one(case: fe.Case) -> None:
        before = probe.unwritable
        problems = fe.run_case(env, case)
        if probe.unwritable > before:
            problems.append("log: a record could not be written")
        record(env, case, problems)

    return one


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES)
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--max-minutes", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1,
                        help="processes fuzzing in parallel (each its own environments and seed)")
    parser.add_argument("--publish", action="store_true",
                        help="write to bench/results even when fewer examples ran (a time limit)")
    parser.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    with tool_stub(True) as tool_url:
        if tool_url is None:
            raise RuntimeError("the lookup agent's tool stub (infra.local.tool_stub) is needed")
        if args.worker_out is not None:
            result = run_fuzz(args.examples, args.chunk, args.seed, args.max_minutes, tool_url)
            Path(args.worker_out).write_text(json.dumps(result))
            return 0
        if args.workers > 1:
            result = _parallel(args)
        else:
            result = run_fuzz(args.examples, args.chunk, args.seed, args.max_minutes, tool_url)
    command = command_line(["fuzz", "--examples", str(args.examples), "--chunk", str(args.chunk),
                            "--seed", str(args.seed), "--max-minutes", str(args.max_minutes),
                            "--workers", str(args.workers)])
    ran = result["examples"]
    reduced = None
    if ran < DEFAULT_EXAMPLES:
        reduced = f"{ran} examples (< {DEFAULT_EXAMPLES})"
    rate = ran / result["elapsed_s"] if result["elapsed_s"] else 0.0
    rows = [[f["environment"], f["problem"], str(f["count"]), f["first"][:160].replace("|", "\\|")]
            for f in result["findings"]]
    markdown = (
        "# bench_fuzz: property-based fuzzing of the event edge\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n- reproduce: `{command}`\n"
        f"- examples run: **{ran}** ({', '.join(f'{k} {v}' for k, v in result['per_environment'].items())}); "
        f"by source: {', '.join(f'{k} {v}' for k, v in sorted(result['per_source'].items()))}\n"
        f"- time: {result['elapsed_s']:.0f} s wall, {result.get('workers', 1)} process(es) ({rate:.1f} examples/s; each example is the fuzzed "
        "invocation and the next valid request, in-process, on a shared machine)\n"
        f"- **escapes** (an exception out of the handler): **{result['escapes']}**; examples "
        f"breaking any part of the property: {result['failing_examples']}\n"
        f"- log records written: {result['log_lines']}, not writable as UTF-8: "
        f"{result['unwritable_log_records']}\n\n"
        "Property per example: the handler returns; the answer is in the source's format, JSON, "
        "within 6 MB, with `X-Warmstart-Path`; no 5xx but the user agent's deliberately failing "
        "route (a generic 500); no internal detail in the body; every log record writable; the "
        "next valid request to the same environment answered correctly.\n\n"
        + (table(["environment", "finding", "count", "first example"], rows) if rows
           else "No finding.") + "\n"
    )
    figures = [figure("examples", ran, "count"), figure("escapes", result["escapes"], "count"),
               figure("failing examples", result["failing_examples"], "count"),
               figure("unwritable log records", result["unwritable_log_records"], "count"),
               figure("rate", rate, "examples/s")]
    ratios = [ratio("escapes / examples", result["escapes"] / max(ran, 1), 0.0, op="<="),
              ratio("failing examples / examples", result["failing_examples"] / max(ran, 1), 0.0,
                    op="<=")]
    path = write_result("fuzz", markdown, figures, ratios=ratios, command=command, reduced=reduced,
                        extra={"result": result},
                        directory=RESULTS_DIR if args.publish else None)
    print(markdown)
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0 if result["escapes"] == 0 and result["failing_examples"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
