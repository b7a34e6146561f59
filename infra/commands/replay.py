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

from functions.runtime.contract import environment as names
from infra.commands.common import command

#: Report path under the output directory (``--out-dir``, default ``out``).
DEFAULT_REPORT = Path("replay/report.html")

JSON_SCHEMA = """\
--json writes one JSON object to stdout (the table goes away; the report is still written):
  function       str    the full HashFunction replayed
  trigger        str    its trigger in the trace
  start_minute   int    first trace minute of the slice
  minutes        int    trace minutes of the slice
  requests       int    requests sent per run
  time_scale     float  trace seconds per real second
  report         str or null  the HTML report (null with --attach)
  runs           list   one object per run, in order (off, then on):
    config                 str    "off", "on" or "attached"
    requests, answered, ok, cold_starts, sla_breaches, overflowed, degraded, shed,
    errors, throttled, spillover, warm_pings, tool_honoured, tool_requested,
    failed_answers, late, tail                                               int
    init_p50_ms, p50_ms, p95_ms, p99_ms, sla_ms, client_lag_p99_ms          float, ms
    provisioned_gb_s, invocation_gb_s   float, GB-s in trace seconds
    gpu_endpoint_hours                  float
    lambda_usd, gpu_usd, usd            float, USD (null: not measured)
    endpoint               object or null  with --endpoint planned, the GPU endpoint's copies
                           over the slice: copy_hours, max_in_service, ordered_at_min,
                           in_service_at_min, published_in_service_at_min (trace minutes from
                           the slice start), states [[s, state, copies]], planned [[s, copies]],
                           reason (infra.replay.summary.EndpointUsage); null when always on
    notes                  list of str
  (definitions: infra/replay/summary.py; null stands for a value that is not measured)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from infra.commands.common import (
        non_negative_float,
        non_negative_int,
        output_file,
        positive_float,
        positive_int,
    )

    parser.epilog = JSON_SCHEMA
    parser.add_argument("--trace", type=Path, required=True,
                        help="Azure 2019 invocations file (durations and memory files beside it), "
                             "e.g. tests/data/traces/azure2019_invocations.csv")
    parser.add_argument("--function", required=True,
                        help="HashFunction to replay (or a unique prefix of >= 6 characters)")
    parser.add_argument("--start-minute", type=non_negative_int, default=0,
                        help="first trace minute (0-based column offset; default 0)")
    parser.add_argument("--minutes", type=positive_int, default=None,
                        help="trace minutes to replay (default: to the end of the trace)")
    parser.add_argument("--time-scale", type=positive_float, default=10.0,
                        help="trace seconds per real second (default 10)")
    parser.add_argument("--config", choices=("off", "on", "both"), default="on",
                        help="off: on-demand only; on: warmstart; both: off then on (default on)")
    parser.add_argument("--report", type=output_file, default=None,
                        help=f"HTML report path, in an existing folder (default "
                             f"OUT_DIR/{DEFAULT_REPORT})")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table (schema below)")
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
                        help="cdk.json: with --attach, for the agent's path prefix; with "
                             "--endpoint planned, for gpu_endpoint.capacity (default cdk.json)")
    parser.add_argument("--endpoint", choices=("always-on", "planned"), default="always-on",
                        help="the local GPU endpoint of the 'on' run: always-on (one instance, "
                             "no limit on concurrent requests; default) or planned (an "
                             "inference component with 0 copies at the start whose copies the "
                             "warmer plans and SageMaker provisions minutes later, from "
                             "cdk.json's gpu_endpoint.capacity; what `make demo` runs)")
    parser.add_argument("--real-durations", action="store_true",
                        help="send trace durations unscaled (concurrency grows with the time scale)")
    parser.add_argument("--idle-timeout-s", type=positive_float, default=600.0,
                        help="idle seconds (trace time) before an environment is reclaimed "
                             "(default 600)")
    parser.add_argument("--pc-allocation-delay-s", type=non_negative_float, default=60.0,
                        help="seconds (trace time) before requested PC starts allocating "
                             "(default 60)")
    parser.add_argument("--pc-cap", type=non_negative_int, default=10,
                        help="most PC the warmer may set (default 10)")
    parser.add_argument("--pc-floor", type=non_negative_int, default=0,
                        help="least PC the warmer keeps (default 0)")
    parser.add_argument("--budget-usd-per-hour", type=non_negative_float, default=1.0,
                        help="the warmer's hourly PC budget (default 1.0)")
    parser.add_argument("--history-min", type=non_negative_int, default=360,
                        help="trace minutes before the slice given to the forecaster "
                             "(default 360)")
    parser.add_argument("--sla-ms", type=positive_float, default=None,
                        help=f"SLA of the route (default: the function's {names.ENV_SLA_MS})")
    parser.add_argument("--seed", type=int, default=0, help="arrival/duration seed (default 0)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep the emulator/GPU endpoint/warmer logs here "
                             "(default: next to the report)")


def _fail(message: str, code: int = 2) -> int:
    print(f"warmstart replay: error: {message}", file=sys.stderr)
    return code


@command("warmstart replay")
def run(args: argparse.Namespace) -> int:
    from infra.commands.common import out_dir
    from infra.local.endpoint_capacity import planned_endpoint_from_cdk_json
    from infra.replay.runner import ReplayOptions, load_local_app, run_replay
    from infra.replay.services import ServiceUnavailable
    from infra.replay.workload import ReplayInputError, build_workload, read_trace

    report = args.report or out_dir(args) / DEFAULT_REPORT
    info = sys.stderr if args.json else sys.stdout
    try:
        if args.pc_floor > args.pc_cap:
            raise ReplayInputError(f"--pc-floor must be <= --pc-cap, got --pc-floor "
                                   f"{args.pc_floor} --pc-cap {args.pc_cap}")
        planned = None
        if args.endpoint == "planned":
            if args.attach:
                raise ValueError("--endpoint planned starts the local GPU endpoint; with "
                                 "--attach the running stack's endpoint is used as it is")
            planned, _, said = planned_endpoint_from_cdk_json(args.cdk_json)
        trace = read_trace(args.trace)
        workload = build_workload(trace, args.function, start_minute=args.start_minute,
                                  minutes=args.minutes, history_min=args.history_min,
                                  seed=args.seed)
        options = ReplayOptions(
            time_scale=args.time_scale, scale_durations=not args.real_durations,
            idle_timeout_s=args.idle_timeout_s, pc_allocation_delay_s=args.pc_allocation_delay_s,
            pc_floor=args.pc_floor, pc_cap=args.pc_cap,
            budget_usd_per_hour=args.budget_usd_per_hour, history_min=args.history_min,
            sla_ms=args.sla_ms, log_dir=args.log_dir or report.parent / "logs",
            shape=_shape(args), quiet=bool(getattr(args, "quiet", False)), endpoint=planned)
    except (ReplayInputError, ValueError) as exc:
        return _fail(str(exc))
    if planned is not None:
        print(f"warmstart replay: {said}", file=info, flush=True)
    print(f"warmstart replay: {workload.function_id[:16]}... ({workload.trigger}), minutes "
          f"{workload.start_minute}..{workload.start_minute + workload.minutes - 1}, "
          f"{workload.n_requests} requests, time scale {options.time_scale:g} "
          f"(~{workload.minutes * 60 / options.time_scale:.0f} s per run)", file=info, flush=True)
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
    return _finish(results, report, args, workload)


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


def run_json(summary: Any, config: str, notes: Any = ()) -> dict[str, Any]:
    """One run of ``--json`` (see `JSON_SCHEMA`): the summary's fields, ``usd`` and the notes,
    NaN as ``null``."""
    import dataclasses

    from infra.commands.common import finite

    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return finite(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    doc: dict[str, Any] = {"config": config}
    for key, value in dataclasses.asdict(summary).items():
        if key in ("label", "notes"):
            continue
        doc[key] = clean(value)
    doc["usd"] = finite(summary.usd)
    doc["notes"] = [*summary.notes, *notes]
    return doc


def replay_json(workload: Any, time_scale: float, runs: list[dict[str, Any]],
                report: Path | None) -> dict[str, Any]:
    """The ``--json`` document (see `JSON_SCHEMA`)."""
    return {"function": workload.function_id, "trigger": workload.trigger,
            "start_minute": int(workload.start_minute), "minutes": int(workload.minutes),
            "requests": int(workload.n_requests), "time_scale": float(time_scale),
            "report": None if report is None else str(report), "runs": runs}


def _finish(results: list[Any], report: Path, args: argparse.Namespace, workload: Any) -> int:
    from infra.commands.common import print_json
    from infra.replay.report import replay_text_table, write_report

    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        path = write_report(results, report)
    except OSError as exc:
        return _fail(f"could not write the report {report}: {exc}", 1)
    if args.json:
        print_json(replay_json(workload, args.time_scale,
                               [run_json(r.summary, r.config, r.notes) for r in results], path))
        return 0
    print()
    print(replay_text_table(results))
    for r in results:
        for note in r.notes:
            print(f"note [{r.config}]: {note}")
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
    except ValueError as exc:  # StackConfigError: unknown agent, unreadable cdk.json
        return _fail(str(exc))
    x = options.time_scale  # type: ignore[attr-defined]
    records = send_requests(gateway, workload.real_offsets_s(x).tolist(),  # type: ignore[attr-defined]
                            workload.tool_ms(x, scale_durations=options.scale_durations).tolist(),  # type: ignore[attr-defined]
                            label="[attached]", shape=options.shape,  # type: ignore[attr-defined]
                            quiet=options.quiet)  # type: ignore[attr-defined]
    summary = summarize("attached", records, None, [], memory_mb=0,
                        sla_ms=options.sla_ms or 2000.0, time_scale=x,  # type: ignore[attr-defined]
                        prices=Prices.load(), gpu_endpoint_up=False,
                        slice_minutes=workload.minutes,  # type: ignore[attr-defined]
                        notes=(("attached: cold starts from Server-Timing init entries; "
                                "provisioned GB-s and invocation GB-s not measured"),))
    import dataclasses

    from infra.replay.summary import summary_table

    nan = float("nan")  # not measured without the emulator's records: shown as "-"
    summary = dataclasses.replace(summary, provisioned_gb_s=nan, invocation_gb_s=nan,
                                  lambda_usd=nan)
    if args.json:
        from infra.commands.common import print_json

        print_json(replay_json(workload, x, [run_json(summary, "attached")], None))
        return 0
    print()
    print(summary_table([summary]))
    print("note: attached to a running stack: cold starts counted from Server-Timing `init` "
          "entries (SnapStart restores carry none and are missed); GB-s and USD need the "
          "emulator's records and are not measured; no HTML report in this mode")
    return 0
