"""Warm invocation overhead of the warmstart handler over plain Mangum + FastAPI.

One process, both adapters warm, same app (``functions.agent.app.create_app``), same model,
same events (API Gateway HTTP API payload 2.0):

* ``plain``   ``Mangum(create_app(...), lifespan="off")(event, context)``;
* ``toolkit`` ``functions.agent.handler.handler(event, context)``: ping check, event validation,
  path choice, Mangum + the same app, ``X-Warmstart-Path`` / ``Server-Timing`` headers,
  latency sample, log + buffered EMF metrics.

Routes: ``GET /healthz`` (no model: the toolkit's overhead is most visible) and
``POST /v1/intent`` (real ONNX inference). Blocks of calls alternate between the two adapters;
the ratio is median toolkit block time / median plain block time, in CPU time of the invoking
thread (``time.thread_time``: robust on a shared machine, where wall time includes time the
process waits for a core); the wall-clock ratio is reported beside it. Target <= 1.05.
Standard output (log lines, EMF) goes to ``/dev/null`` for both while measuring.

Run: ``.venv/bin/python -m bench warm_overhead`` (``--blocks N --calls M``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from typing import Any

from bench import REPO_ROOT, machine, now_utc, table, write_result

TARGET_RATIO = 1.05


def _toolkit_alone_us(agent: Any, calls: int, blocks: int) -> float:
    """CPU per call of the toolkit's dispatcher around a no-op app (median of blocks), us."""
    from functions.runtime.degradation import Level
    from functions.runtime.dispatch import Admission, Dispatcher, readiness_path
    from functions.runtime.lifecycle import ExecutionEnvironment
    from functions.runtime.preload import Preloader, Stage
    from functions.runtime.telemetry import Telemetry
    from tests.conftest import LambdaContext, adapt_event

    def noop_app(event: Any, context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}"}

    env = ExecutionEnvironment(agent.CONFIG.init_type, time.perf_counter() * 1000.0)
    preload = Preloader(
        [Stage("web", lambda: noop_app), Stage("model", lambda: None)],
        env, lambda: time.perf_counter() * 1000.0,
    )
    preload.run()
    env.finish_init(time.perf_counter() * 1000.0)
    dispatcher = Dispatcher(
        config=agent.CONFIG, environment=env, preload=preload, routes=agent.agent_routes(),
        telemetry=Telemetry(agent.CONFIG).load(),
        select_path=lambda req, route, budget: readiness_path(preload, req, route, budget),
        admission=Admission(level=lambda: Level.L0),  # as in the handler: admission's warm path
    )
    event = adapt_event("http_api_v2.json", "GET", "/healthz")
    arrival = event["requestContext"]
    context = LambdaContext(timeout_s=3600.0)
    samples = []
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for _ in range(200):
            dispatcher.handle(event, context)
        for _ in range(blocks):
            cpu0 = time.thread_time()
            for _ in range(calls):
                arrival["timeEpoch"] = int(time.time() * 1000)
                dispatcher.handle(event, context)
            samples.append((time.thread_time() - cpu0) / calls * 1e6)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_warm_overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30, help="alternating blocks per adapter")
    parser.add_argument("--calls", type=int, default=50, help="calls per block")
    args, _ = parser.parse_known_args(argv)

    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    sys.path.insert(0, str(REPO_ROOT))
    from mangum import Mangum

    import functions.agent.handler as agent
    from functions.agent.app import create_app
    from tests.conftest import LambdaContext, adapt_event

    if not agent.PRELOAD.wait_all(300.0):
        raise RuntimeError("the handler's preload did not finish in 300 s")
    agent.PRELOAD.result("model")
    plain = Mangum(
        create_app(
            config=agent.CONFIG,
            environment=agent.ENVIRONMENT,
            routes=agent.agent_routes(),
            model=lambda: agent.PRELOAD.result("model"),
        ),
        lifespan="off",
    )
    routes = {
        "GET /healthz": ("GET", "/healthz", None),
        "POST /v1/intent": ("POST", "/v1/intent", {"text": "where is my order? it has not arrived"}),
    }
    context = LambdaContext(timeout_s=3600.0)
    rows = []
    ok = True
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for label, (method, path, body) in routes.items():
            event = adapt_event("http_api_v2.json", method, path, body)
            arrival = event["requestContext"]
            adapters = {"plain": plain, "toolkit": agent.handler}
            for call in adapters.values():  # warm both (first calls build caches)
                for _ in range(20):
                    response = call(event, context)
                    assert response["statusCode"] == 200, response
            cpu_us: dict[str, list[float]] = {k: [] for k in adapters}
            wall_us: dict[str, list[float]] = {k: [] for k in adapters}
            for block in range(args.blocks):
                order = list(adapters) if block % 2 == 0 else list(reversed(adapters))
                for name in order:
                    call = adapters[name]
                    wall0, cpu0 = time.perf_counter(), time.thread_time()
                    for _ in range(args.calls):
                        # a fresh arrival per call (same cost for both adapters): admission
                        # sheds a request whose SLA ran out before it arrived (decision row 3)
                        arrival["timeEpoch"] = int(time.time() * 1000)
                        call(event, context)
                    cpu_us[name].append((time.thread_time() - cpu0) / args.calls * 1e6)
                    wall_us[name].append((time.perf_counter() - wall0) / args.calls * 1e6)
            plain_us = statistics.median(cpu_us["plain"])
            toolkit_us = statistics.median(cpu_us["toolkit"])
            ratio = toolkit_us / plain_us
            wall_ratio = statistics.median(wall_us["toolkit"]) / statistics.median(wall_us["plain"])
            ok &= ratio <= TARGET_RATIO
            rows.append([
                label, f"{plain_us:.1f}", f"{toolkit_us:.1f}", f"{toolkit_us - plain_us:+.1f}",
                f"{ratio:.3f}", f"{wall_ratio:.3f}", f"<= {TARGET_RATIO}",
                "yes" if ratio <= TARGET_RATIO else "NO",
            ])
    toolkit_alone_us = _toolkit_alone_us(agent, args.calls, args.blocks)
    result = table(
        ["route", "plain Mangum+FastAPI CPU us/call", "warmstart handler CPU us/call",
         "overhead us", "ratio (CPU)", "ratio (wall)", "target", "met"],
        rows,
    )
    text = (
        "# bench_warm_overhead: warm invocation, warmstart handler vs plain Mangum + FastAPI\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n"
        f"- {args.blocks} alternating blocks x {args.calls} calls per adapter and route; "
        "medians of per-block mean CPU time (thread time) per call; wall-clock ratio beside it\n"
        "- reproduce: `.venv/bin/python -m bench warm_overhead`\n\n"
        f"{result}\n\n"
        f"Toolkit alone (same dispatcher, a no-op app in place of Mangum + FastAPI, "
        f"`GET /healthz`): {toolkit_alone_us:.1f} us CPU per call, back to back.\n\n"
        "Same app object factory, same model, same HTTP API v2 event for both. The handler adds "
        "ping detection, event validation, the path choice, response headers, a latency sample, "
        "a DEBUG log line only when DEBUG is on, and buffered EMF request counts (flushed every 100 "
        "requests or 10 s).\n"
    )
    path = write_result("bench_warm_overhead", text)
    print(result)
    print(f"toolkit alone (no-op app): {toolkit_alone_us:.1f} us CPU per call")
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
