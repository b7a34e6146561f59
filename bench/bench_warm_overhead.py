"""Warm invocation overhead of each agent's warmstart handler over plain Mangum + FastAPI.

Each agent runs in its own process (its own execution environment, with the settings the
deploy gives its function, init type ``provisioned-concurrency`` so everything is loaded
before the first call), both adapters warm, same events (API Gateway HTTP API payload 2.0,
the agent's external prefix in the path):

* ``plain``   ``Mangum(app, lifespan="off", api_gateway_base_path=prefix)(event, context)``,
  ``app`` built with the same factory (`functions.runtime.agent.build_app` with the handler's
  own `AgentRuntime`), sharing the handler's loaded model;
* ``toolkit`` the agent module's ``handler(event, context)``: ping check, event validation,
  admission's warm path, the adapter (`functions.runtime.asgi`, Mangum + the app),
  ``X-Warmstart-Path`` / ``Server-Timing`` headers, latency sample, log + buffered EMF metrics.

Every declared route is measured (`bench.agents`); a route that calls a downstream tool gets
the tool stub (`infra.local.tool_stub`) in a separate process, so its CPU is not the agent's.
Blocks of calls alternate between the two adapters; the ratio is median toolkit block time /
median plain block time, in CPU time of the invoking thread (``time.thread_time``: robust on a
shared machine, where wall time includes time the process waits for a core); the wall-clock
ratio is reported beside it. Targets on every route: the ratio <= 1.05, and (issue 21) at
most :data:`TARGET_OVERHEAD_US` of CPU added per call. Standard output (log lines, EMF)
goes to ``/dev/null`` for both while measuring.

Run: ``.venv/bin/python -m bench warm_overhead`` (``--blocks N --calls M --agents NAME...``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench import REPO_ROOT, command_line, figure, machine, now_utc, ratio, table, write_result
from bench.agents import (
    AGENTS,
    BenchAgent,
    BenchRequest,
    agent_named,
    load_warm,
    present_agents,
    run_in_agent_process,
    tool_stub,
)

TARGET_RATIO = 1.05
#: Issue 21: what the toolkit adds to a warm request, at most this much CPU per call, us.
TARGET_OVERHEAD_US = 50.0
DEFAULT_BLOCKS = 30
DEFAULT_CALLS = 50


# ---- child: one agent, one execution environment ---------------------------------------------
def _noop_dispatcher(handler: Any) -> Any:
    """The agent's dispatcher wiring around a no-op adapter (no Mangum, no app): what the
    toolkit alone costs per call."""
    from functions.runtime.admission.state import Admission
    from functions.runtime.dispatch import Dispatcher
    from functions.runtime.lifecycle import ExecutionEnvironment
    from functions.runtime.preload import Preloader, Stage
    from functions.runtime.telemetry import Telemetry

    def noop_adapter(event: Any, context: Any, request: Any = None,
                     cancel_after_s: float | None = None) -> dict[str, Any]:
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}"}

    def clock_ms() -> float:
        return time.perf_counter() * 1000.0

    config = handler.config
    env = ExecutionEnvironment(config.init_type, clock_ms())
    preload = Preloader([Stage("web", lambda: noop_adapter)], env, clock_ms)
    preload.run()
    env.finish_init(clock_ms())
    real = handler.admission
    admission = Admission(level=handler.current_level, hooks=real.hooks, policy=real.policy,
                          stage_p95_ms=real.stage_p95_ms)
    return Dispatcher(config=config, environment=env, preload=preload, routes=handler.agent.registry,
                      telemetry=Telemetry(config).load(), admission=admission, model_stage=None)


def _blocks(adapters: dict[str, Any], event: dict[str, Any], context: Any, blocks: int,
            calls: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Alternating blocks of ``calls`` calls per adapter: per-block mean CPU and wall us/call."""
    arrival = event["requestContext"]
    cpu_us: dict[str, list[float]] = {k: [] for k in adapters}
    wall_us: dict[str, list[float]] = {k: [] for k in adapters}
    for block in range(blocks):
        order = list(adapters) if block % 2 == 0 else list(reversed(adapters))
        for name in order:
            call = adapters[name]
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            for _ in range(calls):
                # a fresh arrival per call (same cost for both adapters): admission sheds a
                # request whose SLA ran out before it arrived
                arrival["timeEpoch"] = int(time.time() * 1000)
                call(event, context)
            cpu_us[name].append((time.thread_time() - cpu0) / calls * 1e6)
            wall_us[name].append((time.perf_counter() - wall0) / calls * 1e6)
    return cpu_us, wall_us


def _after_inference(warm: Any, adapters: dict[str, Any], event: dict[str, Any], context: Any,
                     blocks: int, calls: int) -> dict[str, float] | None:
    """``GET /healthz`` with one untimed model inference before each call (the caches as a
    model route leaves them), CPU us per call, median of the blocks per adapter; None for an
    agent without a model (or a model without ``classifier.classify``)."""
    try:
        classify = warm.handler.runtime.model().classifier.classify
    except Exception:  # noqa: BLE001 - a model-free agent (ModelNotReady), or another model
        return None
    arrival = event["requestContext"]
    per_block: dict[str, list[float]] = {k: [] for k in adapters}
    for block in range(blocks):
        order = list(adapters) if block % 2 == 0 else list(reversed(adapters))
        for name in order:
            call, spent = adapters[name], 0.0
            for _ in range(calls):
                classify("where is my order? it has not arrived")
                arrival["timeEpoch"] = int(time.time() * 1000)
                cpu0 = time.thread_time()
                call(event, context)
                spent += time.thread_time() - cpu0
            per_block[name].append(spent / calls * 1e6)
    return {k: statistics.median(v) for k, v in per_block.items()}


def _measure_in_child(agent: BenchAgent, blocks: int, calls: int, labels: list[str] | None = None) -> dict[str, Any]:
    """Measure ``agent`` in this process (its settings already in ``os.environ``)."""
    from tests.conftest import LambdaContext

    warm = load_warm(agent)
    handler = warm.handler
    adapters = {"plain": warm.plain, "toolkit": handler}
    context = LambdaContext(timeout_s=3600.0)
    declared = {f"{r.method} {r.path}" for r in warm.module.agent.routes}
    requests = [r for r in agent.requests if labels is None or r.label in labels]
    measured = {r.label for r in requests}
    out: dict[str, Any] = {"routes": [], "unmeasured": sorted(declared - measured)}
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for request in requests:
            event = warm.event(request)
            for name, call in adapters.items():  # warm both (first calls build caches)
                for _ in range(20):
                    response = call(event, context)
                    if response["statusCode"] != 200:
                        raise RuntimeError(f"{agent.name} {request.label} via {name}: {response}")
            cpu_us, wall_us = _blocks(adapters, event, context, blocks, calls)
            out["routes"].append({"route": request.label, "cpu_us": cpu_us, "wall_us": wall_us})
        if "GET /healthz" in declared:
            event = warm.event(BenchRequest("GET", "/healthz"))
            cold = _after_inference(warm, adapters, event, context, blocks, calls)
            if cold is not None:
                out["healthz_after_inference_us"] = cold
            noop = _noop_dispatcher(handler)
            for _ in range(200):
                noop.handle(event, context)
            cpu_us, _wall = _blocks({"noop": noop.handle}, event, context, blocks, calls)
            out["toolkit_alone_us"] = statistics.median(cpu_us["noop"])
    return out


# ---- parent -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_warm_overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=DEFAULT_BLOCKS, help="alternating blocks per adapter")
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="calls per block")
    parser.add_argument("--agents", nargs="+", default=None, help="agent names (default: all present)")
    parser.add_argument("--routes", nargs="+", default=None,
                        help="'METHOD /path' labels to measure (default: every declared route)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)

    if args.child is not None:
        result = _measure_in_child(agent_named(args.child), args.blocks, args.calls, args.routes)
        args.child_out.write_text(json.dumps(result))
        return 0

    agents = [a for a in present_agents() if args.agents is None or a.name in args.agents]
    absent = [a.name for a in AGENTS if not a.present()]
    results: dict[str, dict[str, Any]] = {}
    needs_tool = any(r.needs_tool for a in agents for r in a.requests
                     if args.routes is None or r.label in args.routes)
    with tool_stub(needs_tool) as tool_url:
        for agent in agents:
            print(f"-- {agent.name}", flush=True)
            child = ["--blocks", str(args.blocks), "--calls", str(args.calls)]
            if args.routes is not None:
                child += ["--routes", *args.routes]
            results[agent.name] = run_in_agent_process(agent, "bench.bench_warm_overhead", child,
                                                       tool_url=tool_url)

    rows, figures, ratios = [], [], []
    for name, res in results.items():
        for route in res["routes"]:
            plain_us = statistics.median(route["cpu_us"]["plain"])
            toolkit_us = statistics.median(route["cpu_us"]["toolkit"])
            wall_ratio = statistics.median(route["wall_us"]["toolkit"]) / statistics.median(route["wall_us"]["plain"])
            # the spread of the overhead: toolkit block - the plain block next to it, per pair
            pairs = [t - p for t, p in zip(route["cpu_us"]["toolkit"], route["cpu_us"]["plain"])]
            q1, _, q3 = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else (pairs[0], 0.0, pairs[0])
            r = ratio(f"{name} {route['route']}: toolkit / plain (CPU)", toolkit_us / plain_us, TARGET_RATIO,
                      agent=name, route=route["route"])
            added = ratio(f"{name} {route['route']}: (toolkit - plain) / {TARGET_OVERHEAD_US:g} us (CPU)",
                          (toolkit_us - plain_us) / TARGET_OVERHEAD_US, 1.0, agent=name,
                          route=route["route"], overhead_us=toolkit_us - plain_us)
            ratios += [r, added]
            figures += [
                figure(f"{name} {route['route']} overhead IQR of paired blocks", q3 - q1, "us CPU/call",
                       agent=name),
                figure(f"{name} {route['route']} plain Mangum+FastAPI", plain_us, "us CPU/call", agent=name),
                figure(f"{name} {route['route']} warmstart handler", toolkit_us, "us CPU/call", agent=name),
                figure(f"{name} {route['route']} wall ratio", wall_ratio, "ratio", agent=name),
            ]
            rows.append([
                name, route["route"], f"{plain_us:.1f}", f"{toolkit_us:.1f}", f"{toolkit_us - plain_us:+.1f}",
                f"{q1:+.0f} .. {q3:+.0f}", "yes" if added["met"] else "NO", f"{r['value']:.3f}",
                f"{wall_ratio:.3f}", "yes" if r["met"] else "NO",
            ])
        if "toolkit_alone_us" in res:
            figures.append(figure(f"{name} toolkit alone (no-op app), GET /healthz",
                                  res["toolkit_alone_us"], "us CPU/call", agent=name))
    result_table = table(
        ["agent", "route", "plain Mangum+FastAPI CPU us/call", "warmstart handler CPU us/call",
         "overhead us", "paired blocks' overhead, IQR us", f"<= +{TARGET_OVERHEAD_US:g} us",
         "ratio (CPU)", "ratio (wall)", f"ratio <= {TARGET_RATIO}"],
        rows,
    )
    after = "; ".join(
        f"{n} plain {r['healthz_after_inference_us']['plain']:.1f} us, toolkit "
        f"{r['healthz_after_inference_us']['toolkit']:.1f} us (overhead "
        f"{r['healthz_after_inference_us']['toolkit'] - r['healthz_after_inference_us']['plain']:+.1f} us)"
        for n, r in results.items() if "healthz_after_inference_us" in r)
    for n, r in results.items():
        if "healthz_after_inference_us" in r:
            figures.append(figure(f"{n} GET /healthz after an inference, overhead",
                                  r["healthz_after_inference_us"]["toolkit"]
                                  - r["healthz_after_inference_us"]["plain"], "us CPU/call", agent=n))
    alone = "; ".join(f"{n} {r['toolkit_alone_us']:.1f} us" for n, r in results.items() if "toolkit_alone_us" in r)
    notes = []
    for name, res in results.items():
        if res["unmeasured"]:
            notes.append(f"- {name}: declared routes not measured: {', '.join(res['unmeasured'])}")
    if absent:
        notes.append(f"- not in this checkout, not measured: {', '.join(absent)}")
    command = command_line(["warm_overhead", *(argv or [])])
    reduced = None
    if args.blocks < DEFAULT_BLOCKS or args.calls < DEFAULT_CALLS or args.routes or args.agents:
        reduced = " ".join(argv or [])
    text = (
        "# bench_warm_overhead: warm invocation, warmstart handler vs plain Mangum + FastAPI\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n"
        f"- {args.blocks} alternating blocks x {args.calls} calls per adapter and route; "
        "medians of per-block mean CPU time (thread time) per call; wall-clock ratio beside it; "
        "each agent in its own process with its deploy settings; the IQR column is the middle "
        "half of (toolkit block - the plain block beside it): how far one run's overhead can move "
        "on this host\n"
        f"- reproduce: `{command}`\n\n"
        f"{result_table}\n\n"
        f"Toolkit alone (the agent's dispatcher around a no-op adapter in place of Mangum + "
        f"FastAPI, `GET /healthz`, back to back, CPU per call): {alone or '-'}.\n\n"
        f"`GET /healthz` with one untimed model inference before each call (the CPU caches as a "
        f"model route leaves them; same blocks, CPU of the call alone): {after or '-'}. The "
        "toolkit's code and Mangum's both run slower after the model's work (its caches "
        "evicted): the same toolkit work costs that much more there, a large part of the "
        "overhead on the model routes above; not measured for the tool routes (no model).\n\n"
        + ("\n".join(notes) + "\n\n" if notes else "")
        + "Same app factory, same loaded model, same HTTP API v2 event for both adapters. The "
        "handler adds ping detection, event validation, admission's warm path, the adapter's "
        "prefix and body-encoding handling, response headers, a latency sample, a DEBUG log line "
        "only when DEBUG is on, and buffered EMF request counts (flushed every 100 requests or "
        "10 s). Where the toolkit's time goes on `GET /healthz`: `bench/results/warm_path.md`.\n"
    )
    path = write_result("bench_warm_overhead", text, figures, ratios=ratios, command=command,
                        reduced=reduced, extra={"samples": results})
    print(result_table)
    print(f"toolkit alone (no-op app): {alone}")
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0 if all(r["met"] for r in ratios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
