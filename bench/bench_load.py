"""Load and faults through the local stack: throughput, p50/p99 and requests lost (target 0) at 1,
5, 20 and 50 concurrent clients, with and without faults.

Stack: the synthesized template as ``warmstart local up`` reads it (``cdk.out``, ``make synth``
first; ``infra.replay.runner.load_local_app``): the root agent (the reference intent agent, its
strategy as the template declares it: SnapStart) behind the gateway route with the template's
stage throttle (50 req/s, burst 100), the GPU endpoint server and a moto server, started by
:class:`~infra.local.stack.LocalStack` with the same service factory as ``local up``. Left out:
the warmer (its plans would change provisioned concurrency between runs) and the tool stub (the
intent agent calls no tool).

Client: :func:`infra.local.load.run_load`, closed-loop asyncio clients (``POST /v1/intent``,
``tool_ms`` 20: a simulated tool call, so a kill lands mid-invocation), a 100 ms backoff after a
429 or a 5xx. Not Locust: its workers need gevent's monkey-patching, which the in-process stack
(threads, subprocess pipes) and the fault thread cannot share, and its statistics aggregate by
name, while every request sent must be matched to its outcome (status or no response).

Each concurrency: a warm-up (its cold starts reported apart), a run without faults, a run with
the standard fault plan (``infra.local.load.STANDARD_PLAN``: an environment SIGKILLed
mid-invocation; the GPU endpoint killed, another environment killed while it is down, the
endpoint restarted; moto killed and restarted), 2.5 s apart (the throttle's bucket refills:
100 tokens at 50/s). Then 50 clients on ``GET /healthz`` (no model): the throttle answers 429
once the offered rate passes 50/s, when the host can offer it.

Ratios (target: 0 lost): requests lost / sent for each run; the 500s of a fault run are at most
the environments killed under an invocation. Throughput with faults / without is a figure
(no target). Usage: ``python -m bench load [--clients 1,5,20,50] [--duration-s 10]
[--warmup-s 5] [--cdk-out cdk.out]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import (
    REPO_ROOT,
    command_line,
    figure,
    load_average,
    machine,
    now_utc,
    ratio,
    table,
    write_result,
)

DEFAULTS = {"clients": "1,5,20,50", "duration_s": 10.0, "warmup_s": 5.0}
PAUSE_S = 2.5


def _app(cdk_out: Path) -> Any:
    from infra.local.spec import LocalApp
    from infra.replay.runner import function_for, load_local_app

    app = load_local_app(cdk_out=cdk_out, inline_code_dir=Path(tempfile.mkdtemp(prefix="bench-load-")))
    spec = function_for(app)
    return LocalApp((spec,), app.gateway, app.warnings, app.parameters, (), app.stage), spec


def _row(label: str, result: Any) -> dict[str, Any]:
    counts = result.counts
    paths = Counter(o.path or str(o.status) for o in result.outcomes if o.status)
    return {
        "clients": result.clients, "run": label, **counts,
        "by_status": {str(k): v for k, v in result.by_status.items()},
        "by_path": dict(paths),
        "errors_by_reason": dict(Counter(o.gateway_error for o in result.outcomes if o.kind == "errors")),
        "answered_per_s": result.throughput_per_s(),
        "responses_per_s": result.throughput_per_s(None),
        "p50_ms": result.latency_ms(0.5), "p99_ms": result.latency_ms(0.99),
        "p50_all_ms": result.latency_ms(0.5, None), "p99_all_ms": result.latency_ms(0.99, None),
        "wall_s": result.wall_s,
        "kills": sum(1 for f in result.faults if f.name == "kill-environment" and f.ok),
        "faults": [dataclasses.asdict(f) for f in result.faults],
        "load_average_after": load_average(),
    }


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_load")
    parser.add_argument("--clients", default=DEFAULTS["clients"])
    parser.add_argument("--duration-s", type=float, default=DEFAULTS["duration_s"])
    parser.add_argument("--warmup-s", type=float, default=DEFAULTS["warmup_s"])
    parser.add_argument("--cdk-out", type=Path, default=REPO_ROOT / "cdk.out")
    args, _ = parser.parse_known_args(argv)
    try:
        levels = [int(c) for c in args.clients.split(",")]
        if not levels or min(levels) < 1:
            raise ValueError
    except ValueError:
        print(f"--clients must be a comma-separated list of positive integers, got {args.clients!r}",
              file=sys.stderr)
        return 2

    from infra.local.load import run_load, stack_faults
    from infra.local.services import gpu_endpoint_factory
    from infra.local.stack import LocalStack, LocalStackConfig
    from infra.replay.services import ServiceUnavailable

    try:
        app, spec = _app(args.cdk_out)
    except ServiceUnavailable as exc:
        print(f"bench load: {exc}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    load_before = load_average()
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-load-logs-"))
    with open(log_dir / "stack.log", "w") as log, LocalStack(
            app, LocalStackConfig(metrics_flush_interval_s=10.0),
            backing_services=[gpu_endpoint_factory(functions=[spec.name], log_stream=log)],
            log_stream=log) as stack:
        url = stack.endpoints()["gateway"]
        route = stack.gateway.routes[0] if stack.gateway else None
        limits = stack.gateway.limits(route) if stack.gateway and route else "no gateway"
        print(f"stack up in {time.monotonic() - started:.1f} s: {spec.name} ({limits})", flush=True)
        for clients in levels:
            for label in ("warm-up", "no faults", "faults"):
                time.sleep(PAUSE_S)
                faults = stack_faults(stack, spec.name) if label == "faults" else []
                duration = args.warmup_s if label == "warm-up" else args.duration_s
                result = run_load(url, clients=clients, duration_s=duration, faults=faults)
                rows.append(_row(label, result))
                r = rows[-1]
                print(f"{clients:>3} clients {label:<9}: sent {r['sent']}, answered {r['answered']}, "
                      f"429 {r['throttled']}, 503 {r['shed']}, 5xx {r['errors']}, lost {r['lost']}; "
                      f"{r['answered_per_s']:.1f} answered/s, p50 {_fmt(r['p50_ms'])} ms, "
                      f"p99 {_fmt(r['p99_ms'])} ms", flush=True)
        time.sleep(PAUSE_S)
        result = run_load(url, clients=50, duration_s=args.duration_s, method="GET", path="/healthz")
        rows.append(_row("GET /healthz (throttle)", result))
    wall_s = time.monotonic() - started

    ratios = []
    for r in rows:
        ratios.append(ratio(f"lost / sent, {r['clients']} clients, {r['run']}",
                            r["lost"] / r["sent"] if r["sent"] else 0.0, 0.0,
                            lost=r["lost"], sent=r["sent"]))
        if r["run"] == "faults":
            ratios.append(ratio(f"5xx other than 503 / environments killed, {r['clients']} clients",
                                r["errors"] / max(1, r["kills"]), 1.0, errors=r["errors"], kills=r["kills"]))
    figures = []
    for r in rows:
        tag = {"clients": r["clients"], "run": r["run"]}
        figures += [figure("answered per second", r["answered_per_s"], "req/s", **tag),
                    figure("answered p50", r["p50_ms"], "ms", **tag),
                    figure("answered p99", r["p99_ms"], "ms", **tag),
                    figure("requests lost", r["lost"], "count", sent=r["sent"], **tag)]
    by = {(r["clients"], r["run"]): r for r in rows}
    for clients in levels:
        base, hurt = by.get((clients, "no faults")), by.get((clients, "faults"))
        if base and hurt and base["answered_per_s"]:
            figures.append(figure("answered/s with faults / without", hurt["answered_per_s"] / base["answered_per_s"],
                                  "ratio", clients=clients))
    headers = ["clients", "run", "sent", "answered", "429", "503", "5xx", "lost", "answered/s",
               "p50 ms", "p99 ms", "served by (X-Warmstart-Path)"]
    body = [[str(r["clients"]), r["run"], str(r["sent"]), str(r["answered"]), str(r["throttled"]),
             str(r["shed"]), str(r["errors"]), str(r["lost"]), _fmt(r["answered_per_s"], 1),
             _fmt(r["p50_ms"]), _fmt(r["p99_ms"]),
             ", ".join(f"{k} {v}" for k, v in sorted(r["by_path"].items()))] for r in rows]
    text = table(headers, body)
    fault_lines = []
    for r in rows:
        if r["errors"]:
            fault_lines.append(f"- {r['clients']} clients, {r['run']}: the 5xx were "
                               + ", ".join(f"{n} x {k}" for k, n in r["errors_by_reason"].items()))
        for f in r["faults"]:
            fault_lines.append(f"- {r['clients']} clients, {f['started_s']:.2f}-{f['ended_s']:.2f} s: "
                               f"{f['name']}: {f['detail']}" + ("" if f["ok"] else " (FAILED)"))
    lost = sum(r["lost"] for r in rows)
    overflowed = sum(r["by_path"].get("overflow", 0) for r in rows)
    degraded = sum(r["by_path"].get("degraded", 0) for r in rows)
    gpu_note = (f"{overflowed} answers overflowed to the GPU endpoint and {degraded} were degraded"
                + (": the environments (SnapStart restores, model in the snapshot) never needed it, "
                   "so its outage touched no request here; tests/e2e/test_load_faults.py runs the "
                   "agent on demand, whose cold starts overflow (and degrade while it is down)"
                   if overflowed == 0 else ""))
    met = all(x["met"] for x in ratios)
    defaults = (args.clients == DEFAULTS["clients"] and args.duration_s == DEFAULTS["duration_s"]
                and args.warmup_s == DEFAULTS["warmup_s"])
    reduced = None if defaults else (f"--clients {args.clients} --duration-s {args.duration_s:g} "
                                     f"--warmup-s {args.warmup_s:g}")
    command = command_line(["load", "--clients", args.clients, "--duration-s", f"{args.duration_s:g}",
                            "--warmup-s", f"{args.warmup_s:g}"])
    print(text)
    print(f"requests lost: {lost} of {sum(r['sent'] for r in rows)} ({'met' if met else 'MISSED'})")
    md = "\n".join([
        "# Load and faults through the local stack",
        "",
        f"- Date: {now_utc()}",
        (f"- Machine: {machine()}; load average before {load_before}, after {load_average()} "
        "(other work shared the host: the figures are this host's, not the deployed API's)"),
        f"- Command: `{command}` ({wall_s:.0f} s)",
        (f"- Stack: `{spec.name}` from the synthesized template, SnapStart as declared; gateway "
        f"route {limits}; GPU endpoint server, moto; no warmer."),
        ("- Client: closed-loop clients, `POST /v1/intent` with `tool_ms` 20 (a simulated tool "
        "call), 100 ms backoff after a 429/5xx; the last run is 50 clients on `GET /healthz`."),
        ("- Outcomes: answered (the agent's answers), 429 (stage throttle), 503 (the agent's shed "
        "or the integration timeout), 5xx (others: an invocation whose environment was killed), "
        "lost (no response). p50/p99 over answered requests."),
        f"- Target: 0 requests lost. Result: {lost} lost; all ratios {'met' if met else 'NOT met'}.",
        "",
        text,
        "",
        f"GPU endpoint: {gpu_note}.",
        "",
        "Faults (seconds from the start of each run):",
        "",
        *fault_lines,
        "",
    ])
    write_result("load", md, figures, ratios=ratios, command=command, reduced=reduced,
                 extra={"runs": rows, "stage": limits, "function": spec.name,
                        "load_average_before": load_before})
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
