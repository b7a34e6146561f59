"""The request walk: which toolkit modules one warm request passes through, and how often.

Issue 21 item 7's measure of a hub. For every declared route of each agent (`bench.agents`), in
the agent's own process with its deploy settings (init type ``provisioned-concurrency``:
everything loaded), one warm call of the agent module's ``handler(event, context)`` is traced
with :func:`sys.setprofile` on the calling thread, twice:

- **calls** (the target's measure): every function *call* moves the walk to the callee's file;
  a module is *entered* each time a call lands in it after a call into another module
  (``A.f -> B.g -> A.h`` enters A twice; a return to A is not an entry). Target: no file
  entered more than twice (issue 21 item 7);
- **calls and returns** (stricter, for reference): returns move the walk too, back to the
  caller's file (``A.f -> B.g`` and back enters A twice).

Frames outside the toolkit (``functions/runtime/``: the standard library, Mangum, Starlette,
the app) are skipped, so a walk is the sequence of toolkit files, one *stop* each time the
file changes. Toolkit code that the app calls (its route using
`functions.runtime.agent_runtime`) is the app's work, not the handler's walk: frames under a
Mangum / Starlette / app frame are skipped. ``stops``: a walk's length; ``files``: distinct
files in it; ``revisits`` = stops - files; ``entered``: per file, its stops.

The app's own thread (the execution environment's event loop, `functions.runtime.lifespan`)
is not traced: the walk is the handler's, "from the handler to the app and back".

Run: ``.venv/bin/python -m bench request_walk`` (``--agents NAME... --routes 'GET /healthz'...``;
``--show`` prints each walk).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench import REPO_ROOT, command_line, figure, machine, now_utc, ratio, table, write_result
from bench.agents import (
    AGENTS,
    agent_named,
    load_warm,
    present_agents,
    run_in_agent_process,
    tool_stub,
)

#: Most stops one file may have in a walk (issue 21 item 7: "no module entered more than twice").
TARGET_MAX_ENTERED = 2
TOOLKIT_DIR = str(REPO_ROOT / "functions" / "runtime") + os.sep
#: Code outside the toolkit that is the app's side (with ``site-packages``: Mangum, Starlette,
#: FastAPI): toolkit code it calls (``AgentRuntime`` from a route) is not the handler's walk.
APP_DIRS = (str(REPO_ROOT) + os.sep,)


def walk(call: Any, *args: Any, returns: bool = False) -> list[str]:
    """The toolkit files (relative to ``functions/runtime/``) ``call(*args)`` enters on this
    thread, one entry each time a call lands in another toolkit file (``returns``: each time
    the running toolkit file changes, returns included)."""
    stops: list[str] = []
    root = sys._getframe()

    def in_app(frame: Any) -> bool:  # toolkit code the app (or Mangum) called: the app's walk
        while frame is not None and frame is not root:
            name = frame.f_code.co_filename
            if not name.startswith(TOOLKIT_DIR) and (name.startswith(APP_DIRS) or "site-packages" in name):
                return True
            frame = frame.f_back
        return False

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "return" and returns:
            frame = frame.f_back
        elif event != "call":
            return
        if frame is None:
            return
        code_file = frame.f_code.co_filename
        if code_file.startswith(TOOLKIT_DIR) and not in_app(frame):
            name = code_file[len(TOOLKIT_DIR):]
            if not stops or stops[-1] != name:
                stops.append(name)

    sys.setprofile(profile)
    try:
        call(*args)
    finally:
        sys.setprofile(None)
    return stops


def summary(stops: list[str]) -> dict[str, Any]:
    """``stops``, ``files``, ``revisits``, ``entered`` (file -> stops, most first), ``walk``."""
    entered = collections.Counter(stops)
    return {"stops": len(stops), "files": len(entered), "revisits": len(stops) - len(entered),
            "entered": dict(entered.most_common()), "walk": stops}


def _measure_in_child(name: str, labels: list[str] | None) -> dict[str, Any]:
    from tests.conftest import LambdaContext

    agent = agent_named(name)
    warm = load_warm(agent)
    context = LambdaContext(timeout_s=3600.0)
    out: dict[str, Any] = {"routes": []}
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for request in agent.requests:
            if labels is not None and request.label not in labels:
                continue
            event = warm.event(request)
            for _ in range(20):  # warm: first calls build caches
                response = warm.handler(event, context)
                if response["statusCode"] != 200:
                    raise RuntimeError(f"{agent.name} {request.label}: {response}")
            stops = walk(warm.handler, event, context)
            strict = summary(walk(warm.handler, event, context, returns=True))
            out["routes"].append({"route": request.label, **summary(stops), "with_returns": strict})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_request_walk", description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=None, help="agent names (default: all present)")
    parser.add_argument("--routes", nargs="+", default=None, help="'METHOD /path' labels")
    parser.add_argument("--show", action="store_true", help="print each walk")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.child is not None:
        args.child_out.write_text(json.dumps(_measure_in_child(args.child, args.routes)))
        return 0

    agents = [a for a in present_agents() if args.agents is None or a.name in args.agents]
    results: dict[str, Any] = {}
    needs_tool = any(r.needs_tool for a in agents for r in a.requests)
    with tool_stub(needs_tool) as tool_url:
        for agent in agents:
            child = ["--routes", *args.routes] if args.routes else []
            results[agent.name] = run_in_agent_process(agent, "bench.bench_request_walk", child,
                                                       tool_url=tool_url)
    rows, figures, ratios = [], [], []
    for name, res in results.items():
        for route in res["routes"]:
            worst_file, worst = next(iter(route["entered"].items()))
            r = ratio(f"{name} {route['route']}: most stops in one file", worst, TARGET_MAX_ENTERED,
                      agent=name, route=route["route"])
            ratios.append(r)
            figures.append(figure(f"{name} {route['route']} stops", route["stops"], "count", agent=name))
            busiest = ", ".join(f"{f} {n}" for f, n in route["entered"].items() if n > 1)
            strict = route["with_returns"]
            strict_file, strict_worst = next(iter(strict["entered"].items()))
            rows.append([name, route["route"], str(route["stops"]), str(route["files"]),
                         f"{worst_file} {worst}", busiest or "-", "yes" if r["met"] else "NO",
                         str(strict["stops"]), f"{strict_file} {strict_worst}"])
            if args.show:
                print(f"{name} {route['route']} (calls): " + " > ".join(route["walk"]))
                print(f"{name} {route['route']} (calls and returns): " + " > ".join(strict["walk"]))
    result_table = table(["agent", "route", "stops (calls)", "files", "most entered",
                          "entered more than once", f"met (<= {TARGET_MAX_ENTERED})",
                          "stops (calls and returns)", "most entered (calls and returns)"], rows)
    absent = [a.name for a in AGENTS if not a.present()]
    command = command_line(["request_walk", *(argv or [])])
    text = (
        "# bench_request_walk: toolkit modules one warm request passes through\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n- reproduce: `{command}`\n\n"
        f"{result_table}\n\n"
        + (f"- not in this checkout: {', '.join(absent)}\n\n" if absent else "")
        + "A stop (calls) is each call that lands in another toolkit file than the call before "
        "it, on the handler's thread (frames outside `functions/runtime/` skipped); with "
        "returns, a return to the caller's file is a stop too. Walks in the JSON beside it.\n"
    )
    reduced = " ".join(argv or []) if (args.agents or args.routes) else None
    path = write_result("bench_request_walk", text, figures, ratios=ratios, command=command,
                        reduced=reduced, extra={"walks": results})
    print(result_table)
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0 if all(r["met"] for r in ratios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
