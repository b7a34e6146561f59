"""Where the toolkit's warm-path time goes, step by step, against plain Mangum + FastAPI.

For one route of each agent (default ``GET /healthz``), in the agent's own process with its
deploy settings (``provisioned-concurrency`` init: everything loaded), the warm path
``AgentHandler.__call__`` -> ``Dispatcher.handle`` -> ``Dispatcher._admit`` ->
``LocalPath.run_now`` -> the adapter (`functions.runtime.asgi`) -> Mangum + the app, then the
response headers and ``Telemetry.request_done``, seen three ways (CPU time of the calling thread,
interleaved rounds, medians of the per-round means):

1. **Totals**: the plain baseline, the full handler, the toolkit alone (the adapter swapped for
   a no-op: no Mangum, no app), and the toolkit alone followed by a plain call (what running
   other code between two Mangum calls costs them: cache misses).
2. **Per step, in place**: the full handler with that one step swapped for a stub that returns
   what the step would have computed; the difference to the full handler is what the step
   costs where it runs, its cache misses included (less a stub call, ~0.1 us). "Rest" = the
   overhead less the steps: the lines of ``handle`` / ``_admit`` themselves, and the cache
   misses the toolkit's code causes Mangum + the app.
3. **Per step, alone**: the step called in a tight loop (hot caches: a floor, often 2-4x less
   than in place); and **cProfile** of the full handler (the toolkit's functions; the profiler
   inflates every call, so read it for ranks).

No target of its own: the target is ``bench_warm_overhead``'s (<= 1.05 of plain per route).
Run: ``.venv/bin/python -m bench warm_path`` (``--rounds N --calls M --routes all``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bench import REPO_ROOT, command_line, figure, machine, now_utc, table, write_result
from bench.agents import (
    AGENTS,
    BenchAgent,
    WarmAgent,
    agent_named,
    load_warm,
    present_agents,
    run_in_agent_process,
    tool_stub,
)

DEFAULT_ROUNDS = 30
DEFAULT_CALLS = 100
#: Calls per round of a step measured alone (each is well under a microsecond).
ALONE_CALLS = 500

Swap = tuple[Callable[[], None], Callable[[], None]]


class WalkStep(NamedTuple):
    """One step of the warm path: where it is, the step alone, and its in-place stub."""

    label: str
    where: str
    alone: Callable[[], object] | None
    swap: Swap | None


# ---- child -------------------------------------------------------------------------------
def _noop_adapter(event: Any, context: Any, request: Any = None,
                  cancel_after_s: float | None = None) -> dict[str, Any]:
    return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}",
            "isBase64Encoded": False}


def _patch(owner: Any, name: str, stub: Any) -> Swap | None:
    """(apply, undo) replacing ``owner.name`` with ``stub``; None when ``owner`` has no such
    attribute (the code changed: the step is left out)."""
    if not hasattr(owner, name) or not hasattr(owner, "__dict__"):  # gone, or __slots__
        return None
    shadowing = not isinstance(owner, type) and name not in getattr(owner, "__dict__", {})
    original = getattr(owner, name)

    def apply() -> None:
        setattr(owner, name, stub)

    def undo() -> None:
        if shadowing:
            delattr(owner, name)  # the instance attribute hid the class's method
        else:
            setattr(owner, name, original)
    return apply, undo


def _both(*swaps: Swap | None) -> Swap | None:
    """One swap doing all of ``swaps`` (None when one of them is)."""
    present = [s for s in swaps if s is not None]
    if len(present) != len(swaps):
        return None

    def apply() -> None:
        for s in present:
            s[0]()

    def undo() -> None:
        for s in reversed(present):
            s[1]()
    return apply, undo


def _steps(warm: WarmAgent, event: dict[str, Any], context: Any) -> list[WalkStep]:
    """The warm path's steps, with the warm handler's own objects."""
    from functions.runtime import dispatch, events, local_path, request_context
    from functions.runtime.admission import ready_local_fits
    from functions.runtime.telemetry import (
        InvocationRecord,
        reset_current,
        server_timing,
        set_current,
    )

    handler = warm.handler
    dispatcher = handler.dispatcher
    config = handler.config
    env = handler.environment
    adm = handler.admission
    local = dispatcher.local
    adapter = local._adapter
    telemetry = dispatcher.telemetry
    kind = events.classify(event)
    strip = getattr(config, "strip_prefixes", ())
    request = events.parse_http_event(event, kind=kind, base_path=config.base_path, strip_prefixes=strip)
    route = dispatcher.routes.match(request.method, request.path)
    assert route is not None, f"{request.route} is not a declared route"
    state = adm.route_state(route, config.sla_ms)
    sla_ms, tracker, hooks = state
    payload = request_context.read_payload(event, hooks.validate) if hooks.validate is not None else None
    record = InvocationRecord("bench-request", request.route)
    response = warm.plain(event, context)
    level = adm.level()
    timings = {"queue": 0.4}
    timing = server_timing(timings)
    arrival = event["requestContext"]
    done = {"status": 200, "duration_ms": 0.2, "cold_start": False, "init_type": env.init_type.value,
            "environment_id": env.environment_id, "init_duration_ms": env.init_duration_ms,
            "now_ms": time.perf_counter() * 1000.0, "overflow_ms": None, "sla_breach": False}
    plain = warm.plain

    def clocks() -> object:
        clock_now = time.perf_counter() * 1000.0
        wall_now = time.time() * 1000.0
        return request_context.arrival_ms_of(request, wall_now - (clock_now - clock_now))

    def current() -> None:
        reset_current(set_current(record))

    def add_headers() -> None:
        events.add_headers(kind, {"statusCode": 200, "headers": {"content-type": "application/json"}},
                           {"x-warmstart-path": "local", "server-timing": timing})

    def plain_adapter(e: Any, c: Any, request: Any = None, cancel_after_s: Any = None) -> Any:
        return plain(e, c)

    class _Routes:
        def match(self, method: str, path: str) -> Any:
            return route

    routes = dispatcher.routes
    steps = [
        WalkStep("classify the event", "events.classify", lambda: events.classify(event),
                 _patch(events, "classify", lambda e: kind)),
        WalkStep("count the invocation", "ExecutionEnvironment.begin_invocation", env.begin_invocation,
                 _patch(env, "begin_invocation", lambda counted=True: False)),
        WalkStep("invocation record", "telemetry.InvocationRecord",
                 lambda: InvocationRecord(context.aws_request_id), None),
        WalkStep("parse + validate the event", "events.parse_http_event", lambda: events.parse_http_event(
            event, kind=kind, base_path=config.base_path, strip_prefixes=strip),
            # the request as parsed, with this call's arrival (a stale one would miss the SLA)
            _patch(events, "parse_http_event", lambda *a, **k: tuple.__new__(type(request), (
                *request[:3], float(arrival["timeEpoch"]), *request[4:])))),
        WalkStep("match the route", "RouteRegistry.match", lambda: routes.match(request.method, request.path),
                 (lambda: setattr(dispatcher, "routes", _Routes()), lambda: setattr(dispatcher, "routes", routes))),
        WalkStep("clocks, arrival, queue time", "request_context.arrival_ms_of + 2 clocks", clocks, None),
        WalkStep("route state (SLA, tracker, hooks)", "Admission.route_state",
                 lambda: adm.route_state(route, config.sla_ms), _patch(adm, "route_state", lambda r, s: state)),
    ]
    if payload is not None:
        steps.append(WalkStep("payload hook (body JSON + validate)", "request_context.read_payload + the validate hook",
                              lambda: request_context.read_payload(event, hooks.validate),
                              _patch(request_context, "read_payload", lambda e, v: payload)))
        if hooks.downstream_ms is not None:
            value_ms = hooks.downstream_ms(payload)
            fixed = (sla_ms, tracker, hooks._replace(downstream_ms=lambda p: value_ms))
            steps.append(WalkStep("downstream_ms hook", "the route's downstream_ms hook",
                                  lambda: hooks.downstream_ms(payload),
                                  _patch(adm, "route_state", lambda r, s: fixed)))
    steps += [
        WalkStep("degradation level", "Admission.level (AgentHandler.current_level)", adm.level,
                 _patch(adm, "level", lambda: level)),
        WalkStep("stages ready?", "LocalPath.ready (skipped once loaded)", lambda: local.ready(route.needs_model), None),
        WalkStep("warm-path admission check", "admission.ready_local_fits", lambda: ready_local_fits(
            route.tier, route.degradable, level.rank, sla_ms, tracker.p95_ms, adm.policy, 0.0),
            _patch(dispatch, "ready_local_fits", lambda *a: True)),
        WalkStep("current invocation set/reset", "telemetry.set_current / reset_current", current,
                 _both(_patch(local_path, "set_current", lambda r: None),
                       _patch(local_path, "reset_current", lambda p: None))),
        WalkStep("the adapter over plain Mangum", "asgi.Adapter (prefix as root_path, body encoding)", None,
                 (lambda: setattr(local, "_adapter", plain_adapter), lambda: setattr(local, "_adapter", adapter))),
        WalkStep("latency sample", "LatencyTracker.observe", lambda: tracker.observe(0.15),
                 _patch(tracker, "observe", lambda v: None)),
        WalkStep("Server-Timing value", "telemetry.server_timing", lambda: server_timing(timings),
                 _patch(dispatch, "server_timing", lambda t: timing)),
        WalkStep("add the response headers", "events.add_headers", add_headers,
                 _patch(events, "add_headers", lambda k, r, h: None)),
        WalkStep("recent latencies", "ExecutionEnvironment.record",
                 lambda: env.record(request.route, "local", 200, 0.2), _patch(env, "record", lambda *a: None)),
        WalkStep("telemetry (log + buffered EMF)", "Telemetry.request_done",
                 lambda: telemetry.request_done(record, **done),
                 _patch(telemetry, "request_done", lambda *a, **k: None)),
    ]
    del response
    return steps


def _interleaved(fns: dict[str, Callable[[], object]], rounds: int, calls: int,
                 swaps: dict[str, Swap] | None = None) -> dict[str, list[float]]:
    """Per-round mean CPU us/call of each function, rounds interleaved (order reversed every
    other round); ``swaps[name]`` is applied around that function's block."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(reversed(fns))):
            apply, undo = (swaps or {}).get(name, (lambda: None, lambda: None))
            fn = fns[name]
            apply()
            try:
                cpu0 = time.thread_time()
                for _ in range(calls):
                    fn()
                out[name].append((time.thread_time() - cpu0) / calls * 1e6)
            finally:
                undo()
    return out


def _measure(warm: WarmAgent, event: dict[str, Any], context: Any, rounds: int,
             calls: int) -> dict[str, Any]:
    handler, plain = warm.handler, warm.plain
    local = handler.dispatcher.local
    arrival = event["requestContext"]
    adapter = local._adapter

    def call(fn: Callable[[Any, Any], Any]) -> Callable[[], object]:
        def run() -> object:
            arrival["timeEpoch"] = int(time.time() * 1000)  # a fresh arrival: same cost for all
            return fn(event, context)
        return run

    def alone_then_plain() -> object:
        local._adapter = _noop_adapter
        arrival["timeEpoch"] = int(time.time() * 1000)
        handler(event, context)
        local._adapter = adapter
        return plain(event, context)

    noop: Swap = (lambda: setattr(local, "_adapter", _noop_adapter), lambda: setattr(local, "_adapter", adapter))
    steps = _steps(warm, event, context)
    totals: dict[str, Callable[[], object]] = {
        "plain Mangum + FastAPI": call(plain),
        "warmstart handler": call(handler),
        "toolkit alone (adapter -> no-op)": call(handler),
        "toolkit alone, then plain Mangum": alone_then_plain,
    }
    swaps: dict[str, Swap] = {"toolkit alone (adapter -> no-op)": noop}
    swaps.update({s.label: s.swap for s in steps if s.swap is not None})
    for name, swap in [(k, swaps.get(k)) for k in totals] + [(s.label, s.swap) for s in steps if s.swap]:
        apply, undo = swap or (lambda: None, lambda: None)  # every variant answers 200, and is warm
        apply()
        try:
            for _ in range(50):
                response = call(handler)() if name not in totals else totals[name]()
            if response["statusCode"] != 200:  # type: ignore[index]
                raise RuntimeError(f"{name}: {response}")
        finally:
            undo()
    measured = _interleaved(totals, rounds, calls, swaps)
    # each step: the full handler and the stubbed one back to back, order alternating; the
    # per-round difference cancels the machine's drift
    full = call(handler)
    deltas: dict[str, list[float]] = {}
    for step in steps:
        if step.swap is None:
            continue
        pair = _interleaved({"full": full, "stub": full}, rounds, calls, {"stub": step.swap})
        deltas[step.label] = [f - s for f, s in zip(pair["full"], pair["stub"], strict=True)]
    alone = _interleaved({s.label: s.alone for s in steps if s.alone is not None}, rounds, ALONE_CALLS)
    return {"totals": measured, "deltas": deltas, "alone": alone,
            "steps": [{"step": s.label, "where": s.where} for s in steps]}


def _profile(warm: WarmAgent, event: dict[str, Any], context: Any, calls: int) -> list[dict[str, Any]]:
    arrival = event["requestContext"]
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        arrival["timeEpoch"] = int(time.time() * 1000)
        warm.handler(event, context)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "/functions/" not in filename:
            continue
        where = filename.split("/functions/", 1)[1]
        rows.append({"function": f"functions/{where}:{line}({name})", "calls_per_request": ncalls / calls,
                     "tottime_us": tottime / calls * 1e6, "cumtime_us": cumtime / calls * 1e6})
    rows.sort(key=lambda r: -r["tottime_us"])
    return rows[:25]


def _measure_in_child(agent: BenchAgent, labels: list[str], rounds: int, calls: int) -> dict[str, Any]:
    """Measure ``agent``'s routes in this process (its settings already in ``os.environ``)."""
    from tests.conftest import LambdaContext

    warm = load_warm(agent)
    context = LambdaContext(timeout_s=3600.0)
    requests = list(agent.requests) if labels == ["all"] else [r for r in agent.requests if r.label in labels]
    out: dict[str, Any] = {"routes": []}
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for request in requests:
            event = warm.event(request)
            measured = _measure(warm, event, context, rounds, calls)
            measured["profile"] = _profile(warm, event, context, max(calls * 10, 1000))
            out["routes"].append({"route": request.label, **measured})
    return out


# ---- parent --------------------------------------------------------------------------------
def _section(name: str, route: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    med = {k: statistics.median(v) for k, v in route["totals"].items()}
    deltas = {k: statistics.median(v) for k, v in route["deltas"].items()}
    alone = {k: statistics.median(v) for k, v in route["alone"].items()}
    plain = med["plain Mangum + FastAPI"]
    full = med["warmstart handler"]
    toolkit = med["toolkit alone (adapter -> no-op)"]
    overhead = full - plain
    cache = med["toolkit alone, then plain Mangum"] - toolkit - plain
    where = {"agent": name, "route": route["route"]}
    totals = [
        ("plain Mangum + FastAPI", plain), ("warmstart handler", full),
        ("overhead (handler - plain)", overhead), ("toolkit alone (no Mangum, no app)", toolkit),
        ("cache misses other code causes a plain call", cache),
    ]
    t1 = table(["total", "CPU us/call"], [[k, f"{v:.1f}"] for k, v in totals])
    rows, figures, step_sum = [], [figure(f"{name} {route['route']}: {k}", v, "us CPU/call", **where)
                                       for k, v in totals], 0.0
    for step in route["steps"]:
        label = step["step"]
        in_place = deltas.get(label)
        step_sum += in_place or 0.0
        rows.append([label, f"`{step['where']}`", f"{in_place:.1f}" if in_place is not None else "-",
                     f"{alone[label]:.2f}" if label in alone else "-"])
        figures.append(figure(f"{name} {route['route']} step: {label}", in_place, "us CPU/call",
                              alone_us=alone.get(label), where=step["where"], **where))
    rows.append(["sum of the steps in place", "", f"{step_sum:.1f}", ""])
    rows.append(["rest: handle/_admit lines, cache misses of Mangum + app", "", f"{overhead - step_sum:.1f}", ""])
    figures.append(figure(f"{name} {route['route']}: rest (lines, cache misses)", overhead - step_sum,
                          "us CPU/call", **where))
    t2 = table(["step", "where", "in place us/call", "alone us/call"], rows)
    t3 = table(["toolkit function (cProfile)", "calls/request", "own us/request", "cumulative us/request"],
               [[f"`{r['function']}`", f"{r['calls_per_request']:.0f}", f"{r['tottime_us']:.1f}",
                 f"{r['cumtime_us']:.1f}"] for r in route["profile"][:15]])
    text = (f"## {name} `{route['route']}`\n\n{t1}\n\n### Per step\n\n{t2}\n\n"
            f"### cProfile (ranks; the profiler inflates each call)\n\n{t3}\n")
    return text, figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_warm_path", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--agents", nargs="+", default=None)
    parser.add_argument("--routes", nargs="+", default=["GET /healthz"],
                        help="'METHOD /path' labels, or all (default: 'GET /healthz')")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    labels = [" ".join(args.routes)] if len(args.routes) == 2 and args.routes[0].isupper() else args.routes

    if args.child is not None:
        result = _measure_in_child(agent_named(args.child), labels, args.rounds, args.calls)
        Path(args.child_out).write_text(json.dumps(result))
        return 0

    agents = [a for a in present_agents() if args.agents is None or a.name in args.agents]
    needs_tool = any(r.needs_tool for a in agents for r in a.requests if labels == ["all"] or r.label in labels)
    results: dict[str, Any] = {}
    with tool_stub(needs_tool) as tool_url:
        for agent in agents:
            print(f"-- {agent.name}", flush=True)
            child = ["--rounds", str(args.rounds), "--calls", str(args.calls), "--routes", *labels]
            results[agent.name] = run_in_agent_process(agent, "bench.bench_warm_path", child, tool_url=tool_url)
    sections, figures = [], []
    for name, res in results.items():
        for route in res["routes"]:
            text, figs = _section(name, route)
            sections.append(text)
            figures += figs
    absent = [a.name for a in AGENTS if not a.present()]
    command = command_line(["warm_path", "--rounds", str(args.rounds), "--calls", str(args.calls),
                            "--routes", *labels])
    reduced = None
    if args.rounds < DEFAULT_ROUNDS or args.calls < DEFAULT_CALLS:
        reduced = f"--rounds {args.rounds} --calls {args.calls}"
    markdown = (
        "# bench_warm_path: where the toolkit's warm-path time goes\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n"
        f"- {args.rounds} interleaved rounds x {args.calls} calls per variant ({ALONE_CALLS} per step "
        "alone), medians of per-round mean CPU time (thread time) per call; each agent in its own "
        "process with its deploy settings, everything loaded\n"
        f"- reproduce: `{command}`\n"
        + (f"- not in this checkout: {', '.join(absent)}\n" if absent else "")
        + "\nIn place = full handler less the handler with that step stubbed (cache misses "
        "included); alone = the step in a tight loop (hot caches, a floor). `-`: not stubbable "
        "without changing what the rest does.\n\n"
        + "\n".join(sections)
    )
    path = write_result("warm_path", markdown, figures, command=command, reduced=reduced,
                        extra={"results": results})
    print(markdown)
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
