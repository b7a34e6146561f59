"""Cold init of each agent's handler module in a fresh process, as ratios measured in one run.

Fresh-process commands, run in interleaved rounds (so machine load hits all alike):

* ``bare``    ``python -c pass`` plus one ``ready`` line: interpreter start-up;
* ``intent``  ``import functions.agent.handler`` (``AWS_LAMBDA_INITIALIZATION_TYPE=on-demand``),
  check ``handler`` is callable, print ``ready``;
* ``lookup``  the same for the model-free lookup agent (``functions.lookup.handler``), when it
  exists in this checkout;
* ``eager``   ``import bench.eager_handler``: fastapi + mangum + boto3 + onnxruntime imported and
  the intent agent's declaration run with everything loaded at import, then ``ready``.

Each time is from process spawn until the parent reads ``ready`` (the child is then killed:
the on-demand handler's background preload is not part of its init). Targets: each agent's
handler within 4x bare, eager at least 20x the intent handler.

Run: ``.venv/bin/python -m bench init`` (``--rounds N``, default 12).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import bench
from bench import REPO_ROOT, command_line, figure, machine, now_utc, ratio, table, write_result
from bench.agents import AGENTS, present_agents


def _handler_code(module: str) -> str:
    return (
        f"import {module} as h, sys; assert callable(h.handler); "
        "sys.stdout.write('ready %.3f\\n' % h.handler.environment.init_duration_ms); "
        "sys.stdout.flush()"
    )


BARE = "import sys; sys.stdout.write('ready\\n'); sys.stdout.flush()"
EAGER = (
    "import bench.eager_handler as h, sys; assert callable(h.handler); "
    "sys.stdout.write('ready %.3f\\n' % h.INIT_MS); sys.stdout.flush()"
)
TARGET_BARE_RATIO = 4.0
TARGET_EAGER_RATIO = 20.0
DEFAULT_ROUNDS = 12


def commands() -> dict[str, str]:
    """Label -> ``python -c`` code, for the agents present in this checkout."""
    out = {"bare": BARE}
    for agent in present_agents():
        out[agent.name] = _handler_code(agent.module)
    out["eager"] = EAGER
    return out


def _env(name: str) -> dict[str, str]:
    """The child's environment: the deploy's settings for agent ``name`` (on-demand init)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMSTART_")}
    agent = next((a for a in AGENTS if a.name == name), None)
    env.update(agent.environment(init_type="on-demand") if agent is not None
               else {"AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand"})
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
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    args, _ = parser.parse_known_args(argv)
    cmds = commands()
    envs = {name: _env(name) for name in cmds}
    for name, code in cmds.items():  # warm the OS file cache and bytecode once, not measured
        time_ready(code, envs[name])
    samples: dict[str, list[float]] = {k: [] for k in cmds}
    inproc: dict[str, list[float]] = {k: [] for k in cmds}
    names = list(cmds)
    for r in range(args.rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:  # rotate the order each round
            ms, init_ms = time_ready(cmds[name], envs[name])
            samples[name].append(ms)
            if init_ms is not None:
                inproc[name].append(init_ms)
    med = {k: statistics.median(v) for k, v in samples.items()}
    agents = [n for n in names if n not in ("bare", "eager")]
    ratios = [ratio(f"{a} handler / bare", med[a] / med["bare"], TARGET_BARE_RATIO) for a in agents]
    ratios.append(ratio("eager / intent handler", med["eager"] / med["intent"], TARGET_EAGER_RATIO,
                        op=">="))
    rows = [
        [name, f"{med[name]:.1f}", f"{min(samples[name]):.1f}", f"{max(samples[name]):.1f}",
         f"{statistics.median(inproc[name]):.1f}" if inproc[name] else "-"]
        for name in names
    ]
    results = table(["command", "median ms", "min ms", "max ms", "in-process init ms (median)"], rows)
    verdict = table(
        ["ratio", "value", "target", "met"],
        [[r["name"], f"{r['value']:.2f}x", r["target"] + "x", "yes" if r["met"] else "NO"] for r in ratios],
    )
    figures = []
    for name in names:
        figures.append(figure(f"{name} spawn to ready, median", med[name], "ms", n=len(samples[name]),
                              min=min(samples[name]), max=max(samples[name])))
        if inproc[name]:
            figures.append(figure(f"{name} in-process init, median", statistics.median(inproc[name]), "ms"))
    lookup_note = ("" if "lookup" in cmds else
                   " The lookup agent (`functions/lookup/`) is not in this checkout yet: not timed.")
    command = command_line(["init", *(argv or [])])
    text = (
        "# bench_init: cold init of each agent's handler module (fresh process)\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n- rounds: {args.rounds} (interleaved, "
        "order rotated), time from spawn until the child prints `ready`\n"
        f"- reproduce: `{command}`\n\n"
        f"{results}\n\n{verdict}\n\n"
        "`bare` = `python -c pass` plus one `ready` line. `intent` = import of "
        "`functions.agent.handler`, `lookup` = import of `functions.lookup.handler`, both with "
        "`AWS_LAMBDA_INITIALIZATION_TYPE=on-demand` (the preload continues on a background thread "
        "after `ready`). `eager` = `bench/eager_handler.py`: fastapi, mangum, boto3, onnxruntime "
        "imported and the intent agent's declaration run with the app built and the model loaded "
        "at import. The in-process column is the init duration each module measured itself "
        f"(import start to end).{lookup_note}\n"
    )
    path = write_result("bench_init", text, figures, ratios=ratios, command=command,
                        reduced=None if args.rounds >= DEFAULT_ROUNDS else f"--rounds {args.rounds}")
    return bench.finish(path, results, verdict, ratios=ratios)


if __name__ == "__main__":
    raise SystemExit(main())
