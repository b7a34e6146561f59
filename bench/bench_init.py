"""Cold init of the handler module in a fresh process, as ratios measured in one run.

Three fresh-process commands, run in interleaved rounds (so machine load hits all alike):

* ``bare``    ``python -c pass`` plus one ``ready`` line: interpreter start-up;
* ``handler`` ``import functions.agent.handler`` (``AWS_LAMBDA_INITIALIZATION_TYPE=on-demand``),
  check ``handler`` is callable, print ``ready``;
* ``eager``   ``import bench.eager_handler``: fastapi + mangum + boto3 + onnxruntime imported and
  the model loaded at import, then ``ready``.

Each time is from process spawn until the parent reads ``ready`` (the child is then killed:
the on-demand handler's background preload is not part of its init). Targets: handler within
4x bare, eager at least 20x the handler.

Run: ``.venv/bin/python -m bench init`` (``--rounds N``, default 12).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from bench import REPO_ROOT, machine, now_utc, table, write_result

COMMANDS = {
    "bare": "import sys; sys.stdout.write('ready\\n'); sys.stdout.flush()",
    "handler": (
        "import functions.agent.handler as h, sys; assert callable(h.handler); "
        "sys.stdout.write('ready %.3f\\n' % h.ENVIRONMENT.init_duration_ms); sys.stdout.flush()"
    ),
    "eager": (
        "import bench.eager_handler as h, sys; assert callable(h.handler); "
        "sys.stdout.write('ready %.3f\\n' % h.INIT_MS); sys.stdout.flush()"
    ),
}
TARGET_BARE_RATIO = 4.0
TARGET_EAGER_RATIO = 20.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["AWS_LAMBDA_INITIALIZATION_TYPE"] = "on-demand"
    env.setdefault("ORT_DISABLE_TELEMETRY", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def time_ready(code: str, env: dict[str, str]) -> tuple[float, float | None]:
    """Spawn ``python -c code``; return (ms until its ``ready`` line, in-process init ms)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if not line.startswith("ready"):
            raise RuntimeError(f"{code!r} did not report ready (got {line!r})")
        parts = line.split()
        return elapsed_ms, float(parts[1]) if len(parts) > 1 else None
    finally:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_init", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args(argv)
    env = _env()
    for code in COMMANDS.values():  # warm the OS file cache and bytecode once, not measured
        time_ready(code, env)
    samples: dict[str, list[float]] = {k: [] for k in COMMANDS}
    inproc: dict[str, list[float]] = {k: [] for k in COMMANDS}
    names = list(COMMANDS)
    for r in range(args.rounds):
        for name in names[r % 3:] + names[: r % 3]:  # rotate the order each round
            ms, init_ms = time_ready(COMMANDS[name], env)
            samples[name].append(ms)
            if init_ms is not None:
                inproc[name].append(init_ms)
    med = {k: statistics.median(v) for k, v in samples.items()}
    bare_ratio = med["handler"] / med["bare"]
    eager_ratio = med["eager"] / med["handler"]
    rows = [
        [name, f"{med[name]:.1f}", f"{min(samples[name]):.1f}", f"{max(samples[name]):.1f}",
         f"{statistics.median(inproc[name]):.1f}" if inproc[name] else "-"]
        for name in names
    ]
    results = table(["command", "median ms", "min ms", "max ms", "in-process init ms (median)"], rows)
    ok_bare = bare_ratio <= TARGET_BARE_RATIO
    ok_eager = eager_ratio >= TARGET_EAGER_RATIO
    verdict = table(
        ["ratio", "value", "target", "met"],
        [
            ["handler / bare", f"{bare_ratio:.2f}x", f"<= {TARGET_BARE_RATIO:.0f}x", "yes" if ok_bare else "NO"],
            ["eager / handler", f"{eager_ratio:.1f}x", f">= {TARGET_EAGER_RATIO:.0f}x", "yes" if ok_eager else "NO"],
        ],
    )
    text = (
        "# bench_init: cold init of the handler module (fresh process)\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n- rounds: {args.rounds} (interleaved, "
        "order rotated), time from spawn until the child prints `ready`\n"
        "- reproduce: `.venv/bin/python -m bench init`\n\n"
        f"{results}\n\n{verdict}\n\n"
        "`bare` = `python -c pass` plus one `ready` line. `handler` = import of "
        "`functions.agent.handler` with `AWS_LAMBDA_INITIALIZATION_TYPE=on-demand` (its preload "
        "continues on a background thread after `ready`). `eager` = `bench/eager_handler.py`: "
        "fastapi, mangum, boto3, onnxruntime and the model loaded at import. The in-process "
        "column is the init duration each module measured itself (import start to end).\n"
    )
    path = write_result("bench_init", text)
    print(results)
    print(verdict)
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0 if ok_bare and ok_eager else 1


if __name__ == "__main__":
    raise SystemExit(main())
