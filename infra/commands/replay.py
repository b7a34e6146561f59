"""`warmstart replay`: replay one trace function's invocations through the local stack.

Starts the local stack from the synthesized template (``cdk.out``) in configuration ``off``
(on-demand only) or ``on`` (warmer + provisioned concurrency + overflow + degradation), or
attaches to a running ``warmstart local up`` (``--attach``), sends the slice's requests to the
gateway at the chosen time scale, and prints the run's table and where the report was written.

``--agent NAME`` replays against that agent's function (default: the root agent at prefix ``/``,
or the only agent); with ``--attach`` the requests go to the gateway at the agent's path prefix
(from ``--cdk-json``). An unknown name is a one-line error listing the known agents.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_REPORT = Path("out/replay/report.html")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, required=True,
                        help="Azure 2019 invocations file (durations and memory files beside it), "
                             "e.g. tests/data/traces/azure2019_invocations.csv")
    parser.add_argument("--function", required=True,
                        help="HashFunction to replay (or a unique prefix of >= 6 characters)")
    parser.add_argument("--start-minute", type=int, default=0,
                        help="first trace minute (0-based column offset; default 0)")
    parser.add_argument("--minutes", type=int, default=None,
                        help="trace minutes to replay (default: to the end of the trace)")
    parser.add_argument("--time-scale", type=float, default=10.0,
                        help="trace seconds per real second (default 10)")
    parser.add_argument("--config", choices=("off", "on", "both"), default="on",
                        help="off: on-demand only; on: warmstart; both: off then on (default on)")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT,
                        help=f"HTML report path (default {DEFAULT_REPORT})")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--template", type=Path, help="a synthesized CloudFormation template")
    source.add_argument("--cdk-out", type=Path, default=Path("cdk.out"),
                        help="directory of synthesized templates (default cdk.out)")
    source.add_argument("--attach", type=Path, metavar="ENDPOINTS_JSON",
                        help="replay against a running `warmstart local up --endpoints-file F`")
    parser.add_argument("--agent", default=None, metavar="NAME",
                        help="the agent to replay against (default: the root agent, or the only one)")
    parser.add_argument("--route", default=None, metavar='"METHOD /path"',
                        help="the request to send, for an agent other than the reference one "
                             "(e.g. 'POST /v1/lookup'; default: POST /v1/intent with the trace's "
                             "durations as tool_ms)")
    parser.add_argument("--body", default=None, metavar="JSON",
                        help="JSON body sent with --route (e.g. '{\"order_id\": \"A-1\"}')")
    parser.add_argument("--cdk-json", type=Path, default=Path("cdk.json"),
                        help="with --attach: cdk.json, for the agent's path prefix (default cdk.json)")
    parser.add_argument("--real-durations", action="store_true",
                        help="send trace durations unscaled (concurrency grows with the time scale)")
    parser.add_argument("--idle-timeout-s", type=float, default=600.0,
                        help="idle seconds (trace time) before an environment is reclaimed (600)")
    parser.add_argument("--pc-allocation-delay-s", type=float, default=60.0,
                        help="seconds (trace time) before requested PC starts allocating (60)")
    parser.add_argument("--pc-cap", type=int, default=10, help="most PC the warmer may set (10)")
    parser.add_argument("--pc-floor", type=int, default=0, help="least PC the warmer keeps (0)")
    parser.add_argument("--budget-usd-per-hour", type=float, default=1.0,
                        help="the warmer's hourly PC budget (1.0)")
    parser.add_argument("--history-min", type=int, default=360,
                        help="trace minutes before the slice given to the forecaster (360)")
    parser.add_argument("--sla-ms", type=float, default=None,
                        help="SLA of the route (default: the function's WARMSTART_SLA_MS)")
    parser.add_argument("--seed", type=int, default=0, help="arrival/duration seed (0)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep the emulator/GPU endpoint/warmer logs here "
                             "(default: next to the report)")


def _fail(message: str, code: int = 2) -> int:
    print(f"warmstart replay: error: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from infra.replay.runner import ReplayOptions, load_local_app, run_replay
    from infra.replay.services import ServiceUnavailable
    from infra.replay.workload import ReplayInputError, build_workload, read_trace

    try:
        if not args.time_scale > 0:
            raise ReplayInputError(f"--time-scale must be > 0, got {args.time_scale}")
        trace = read_trace(args.trace)
        workload = build_workload(trace, args.function, start_minute=args.start_minute,
                                  minutes=args.minutes, history_min=args.history_min,
                                  seed=args.seed)
        options = ReplayOptions(
            time_scale=args.time_scale, scale_durations=not args.real_durations,
            idle_timeout_s=args.idle_timeout_s, pc_allocation_delay_s=args.pc_allocation_delay_s,
            pc_floor=args.pc_floor, pc_cap=args.pc_cap,
            budget_usd_per_hour=args.budget_usd_per_hour, history_min=args.history_min,
            sla_ms=args.sla_ms, log_dir=args.log_dir or args.report.parent / "logs",
            shape=_shape(args))
    except (ReplayInputError, ValueError) as exc:
        return _fail(str(exc))
    print(f"warmstart replay: {workload.function_id[:16]}... ({workload.trigger}), minutes "
          f"{workload.start_minute}..{workload.start_minute + workload.minutes - 1}, "
          f"{workload.n_requests} requests, time scale {options.time_scale:g} "
          f"(~{workload.minutes * 60 / options.time_scale:.0f} s per run)", flush=True)
    if args.attach:
        return _attach(args, workload, options)
    configs = ["off", "on"] if args.config == "both" else [args.config]
    with tempfile.TemporaryDirectory(prefix="warmstart-replay-") as inline:
        try:
            app = load_local_app(template=args.template, cdk_out=args.cdk_out,
                                 inline_code_dir=Path(inline))
            app = for_agent(app, args.agent)
        except (ServiceUnavailable, ValueError) as exc:
            return _fail(str(exc))
        results = []
        for config in configs:
            try:
                results.append(run_replay(app, workload, config, options))  # type: ignore[arg-type]
            except ServiceUnavailable as exc:
                return _fail(str(exc), 1)
    return _finish(results, args.report)


def for_agent(app: Any, name: str | None) -> Any:
    """``app`` with its ``$default`` route on agent ``name``'s alias ``live`` (what the replay
    runner replays against); with ``None`` the root agent, or the only one. A template that
    names no agent (no ``WARMSTART_AGENT_NAME``) is returned as is when no name is given.

    Raises
    ------
    infra.local.spec.SpecError
        (a ``ValueError``) Unknown agent: ``unknown agent 'x'; known agents: intent, lookup``.
    """
    import dataclasses

    from infra.local.spec import GatewayRoute

    if name is None and not app.agents:
        return app
    agent = app.agent(name)
    return dataclasses.replace(app, gateway=GatewayRoute(agent.function_name, "live"))


def _attach_prefix(cdk_json: Path, name: str | None) -> str:
    """The path prefix of agent ``name`` in ``cdk_json`` (``""`` for ``/``, or without cdk.json
    and no name)."""
    from infra.config import load_config

    if name is None and not cdk_json.is_file():
        return ""
    prefix = load_config(cdk_json).agent(name).path_prefix
    return "" if prefix == "/" else prefix


def _shape(args: argparse.Namespace) -> Any:
    """The request shape from ``--route`` / ``--body`` (None: the reference agent's default).

    Raises
    ------
    ValueError
        A bad ``--route`` or ``--body``, or ``--body`` without ``--route``.
    """
    from infra.replay.client import RequestShape

    if args.route is None:
        if args.body is not None:
            raise ValueError("--body needs --route (the request it is the body of)")
        return None
    return RequestShape.parse(args.route, args.body)


def _finish(results: list[Any], report: Path) -> int:
    from infra.replay.report import text_table, write_report

    print()
    print(text_table(results))
    for r in results:
        for note in r.notes:
            print(f"note [{r.config}]: {note}")
    try:
        path = write_report(results, report)
    except OSError as exc:
        return _fail(f"could not write the report {report}: {exc}", 1)
    print(f"\nreport: {path}")
    return 0


def _attach(args: argparse.Namespace, workload: object, options: object) -> int:
    """Replay against a running stack: client-side measurements only."""
    from infra.replay.client import send_requests
    from infra.replay.summary import Prices, summarize

    try:
        endpoints = json.loads(Path(args.attach).read_text())
        gateway = endpoints["gateway"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _fail(f"--attach {args.attach}: cannot read the gateway endpoint ({exc}); write it "
                     "with `warmstart local up --endpoints-file FILE`")
    try:
        gateway += _attach_prefix(args.cdk_json, args.agent)
    except ValueError as exc:  # ConfigError: unknown agent, unreadable cdk.json
        return _fail(str(exc))
    x = options.time_scale  # type: ignore[attr-defined]
    records = send_requests(gateway, workload.real_offsets_s(x).tolist(),  # type: ignore[attr-defined]
                            workload.tool_ms(x, scale_durations=options.scale_durations).tolist(),  # type: ignore[attr-defined]
                            label="[attached]", shape=options.shape)  # type: ignore[attr-defined]
    summary = summarize("attached", records, None, [], memory_mb=0,
                        sla_ms=options.sla_ms or 2000.0, time_scale=x,  # type: ignore[attr-defined]
                        prices=Prices.load(), gpu_endpoint_up=False,
                        slice_minutes=workload.minutes,  # type: ignore[attr-defined]
                        notes=(("attached: cold starts from Server-Timing init entries; "
                                "provisioned GB-s and invocation GB-s not measured"),))
    import dataclasses

    from infra.replay.summary import table

    nan = float("nan")  # not measured without the emulator's records: shown as "-"
    summary = dataclasses.replace(summary, provisioned_gb_s=nan, invocation_gb_s=nan,
                                  lambda_usd=nan)
    print()
    print(table([summary]))
    print("note: attached to a running stack: cold starts counted from Server-Timing `init` "
          "entries (SnapStart restores carry none and are missed); GB-s and USD need the "
          "emulator's records and are not measured; no HTML report in this mode")
    return 0
