"""``warmstart plan``: the warm plan the warmer would apply now, with its reasons (no actuation).

From a trace (``--trace FILE [--function HASH ...] [--at-minute M]``; the busiest functions when
none is named) or from CloudWatch (``--cloudwatch --function-name NAME [--alias live]
[--endpoint-url URL]``, e.g. a moto server or the local stack).

``--agent NAME`` plans with that ``cdk.json`` agent's policy: its strategy, memory and
provisioned-concurrency bounds become the defaults of ``--strategy``, ``--memory-mb``,
``--floor`` and ``--cap`` (flags given explicitly win). With ``--cloudwatch`` and no
``--function-name``, the agent's function name is read from the synthesized template
(``--cdk-out``), and the agent defaults to the root agent (prefix ``/``) or the only one. An
unknown name is a one-line error listing the known agents.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from infra.commands.common import command

JSON_SCHEMA = """\
--json writes one JSON object to stdout instead of the lines:
  source      str          "trace" or "cloudwatch"
  agent       str or null  the cdk.json agent whose policy was used (--agent)
  at_minute   int or null  the trace minute planned at (trace only)
  plans       list         one object per alias:
    key                      str    FUNCTION:ALIAS
    function_name, alias     str
    action                   str    "provisioned", "ping" or "none"
    provisioned_concurrency  int
    ping_concurrency         int
    ping_interval_s          int
    hourly_cost_usd          float
    demand                   float  the forecast concurrency planned for
    method                   str    the forecast method
    reason                   str    why this plan
    forecast_reason          str or null  the forecast's own reason (null: no metrics)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from infra.commands.common import (
        existing_file,
        non_negative_float,
        non_negative_int,
        positive_float,
        positive_int,
    )

    parser.epilog = JSON_SCHEMA
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=existing_file, help="Azure 2019 invocations file")
    src.add_argument("--cloudwatch", action="store_true",
                     help="read AWS/Lambda metrics (needs AWS credentials)")
    parser.add_argument("--function", action="append", default=[],
                        help="trace function hash or a unique prefix of it (repeatable); "
                             "default: the --top busiest")
    parser.add_argument("--top", type=positive_int, default=5,
                        help="how many of the busiest trace functions to plan")
    parser.add_argument("--durations", type=existing_file,
                        help="trace durations file (Little's law)")
    parser.add_argument("--at-minute", type=non_negative_int, default=None,
                        help="trace minute (index) to plan at; default: the last")
    parser.add_argument("--function-name", action="append", default=[],
                        help="CloudWatch: Lambda function name (repeatable)")
    parser.add_argument("--alias", default="live", help="the alias planned for")
    parser.add_argument("--endpoint-url", default=None,
                        help="AWS endpoint (a moto server, the local stack)")
    parser.add_argument("--region", default="us-east-1", help="AWS region")
    parser.add_argument("--history-days", type=positive_float, default=14.0,
                        help="days of CloudWatch history read")
    parser.add_argument("--agent", default=None, metavar="NAME",
                        help="plan with this cdk.json agent's strategy, memory and PC bounds "
                             "(--cloudwatch without --function-name: default the root agent)")
    parser.add_argument("--cdk-json", type=Path, default=Path("cdk.json"),
                        help="cdk.json with the agents (default cdk.json)")
    parser.add_argument("--cdk-out", type=Path, default=Path("cdk.out"),
                        help="synthesized templates, for an agent's function name (default cdk.out)")
    parser.add_argument("--strategy", default=None,
                        choices=("provisioned", "snapstart", "ping", "none"),
                        help="default provisioned, or the agent's")
    parser.add_argument("--memory-mb", type=positive_int, default=None,
                        help="default 1024, or the agent's")
    parser.add_argument("--floor", type=non_negative_int, default=None,
                        help="default 0, or the agent's PC min")
    parser.add_argument("--cap", type=non_negative_int, default=None,
                        help="default 50, or the agent's PC max")
    parser.add_argument("--budget-usd-per-hour", type=non_negative_float, default=1.0,
                        help="hourly budget of provisioned concurrency, USD")
    parser.add_argument("--unreserved", type=non_negative_int, default=None,
                        help="account unreserved concurrency (default: GetAccountSettings, or "
                             "unknown for traces)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the lines (schema below)")


#: Policy defaults when no agent is selected.
DEFAULTS = {"strategy": "provisioned", "memory_mb": 1024, "floor": 0, "cap": 50}


class AgentChoiceError(ValueError):
    """``--agent`` names no agent, or its function cannot be found; a one-line message."""


def agent_policy(args: argparse.Namespace, *, needed: bool) -> tuple[str | None, dict[str, object]]:
    """The selected agent's name and the policy defaults (``DEFAULTS`` or the agent's).

    ``needed``: select the default agent even without ``--agent`` (CloudWatch without
    ``--function-name``).

    Raises
    ------
    AgentChoiceError
        Unknown agent, unreadable cdk.json, or no default agent.
    """
    if args.agent is None and not needed:
        return None, dict(DEFAULTS)
    from infra.config import ConfigError, load_config

    try:
        agent = load_config(args.cdk_json).agent(args.agent)
    except ConfigError as exc:
        raise AgentChoiceError(str(exc)) from exc
    pc = agent.provisioned_concurrency
    return agent.name, {"strategy": agent.strategy, "memory_mb": agent.memory_mb,
                        "floor": pc.min if pc else DEFAULTS["floor"],
                        "cap": pc.max if pc else DEFAULTS["cap"]}


def agent_function_name(cdk_out: Path, agent: str) -> str:
    """The function name of ``agent`` in the synthesized templates (``WARMSTART_AGENT_NAME``).

    Raises
    ------
    AgentChoiceError
        No template, or no function for that agent.
    """
    from infra.local.template import TemplateError, find_templates, read_template

    try:
        for path in find_templates(cdk_out):
            app = read_template(path, fallback_code_dir=Path.cwd())
            for endpoint in app.agents:
                if endpoint.name == agent:
                    return endpoint.function_name
    except TemplateError as exc:
        raise AgentChoiceError(f"agent {agent}: {exc}") from exc
    raise AgentChoiceError(f"agent {agent}: no function for it in {cdk_out}; synthesize first "
                           "(npx cdk synth) or pass --function-name")


@command("warmstart plan")
def run(args: argparse.Namespace) -> int:
    from infra.commands.common import CommandError, UsageError, pick_hash, print_json
    from warmers.forecast import ForecastError, forecast_alias
    from warmers.planner import AliasPolicy, PlanError, account_headroom, plan_alias
    from warmers.ports import MetricsSource, MetricsUnavailable
    from warmers.traces import (
        TraceFormatError,
        TraceMetricsSource,
        read_durations,
        read_invocations,
    )

    try:
        agent, defaults = agent_policy(args, needed=bool(args.cloudwatch and not args.function_name))
    except AgentChoiceError as exc:
        raise UsageError(str(exc)) from exc
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.floor > args.cap:
        raise UsageError(f"--floor must be <= --cap, got --floor {args.floor} --cap {args.cap}")
    notes: list[str] = []
    at: int | None = None
    try:
        if args.trace:
            functions = read_invocations(args.trace)
            durations = read_durations(args.durations) if args.durations else {}
            names = [pick_hash(functions, f) for f in args.function] or sorted(
                functions, key=lambda k: -float(functions[k].invocations.sum()))[: args.top]
            n = next(iter(functions.values())).invocations.shape[0]
            at = n - 1 if args.at_minute is None else args.at_minute
            if not 0 <= at < n:
                raise UsageError(f"--at-minute must be in [0, {n - 1}], got {at}")
            source: MetricsSource = TraceMetricsSource(functions, durations, start_s=0.0)
            now_s = (at + 1) * 60.0
            start_s = 0.0
            unreserved = args.unreserved
        else:
            names = args.function_name
            if not names:
                try:
                    names = [agent_function_name(args.cdk_out, str(agent))]
                except AgentChoiceError as exc:
                    raise UsageError(f"--cloudwatch needs --function-name ({exc})") from exc
            import boto3

            from warmers.cloudwatch import CloudWatchMetricsSource

            if boto3.Session(region_name=args.region).get_credentials() is None:
                raise CommandError(
                    "--cloudwatch: no AWS credentials found; set AWS_PROFILE or "
                    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (any value for a local stack "
                    "with --endpoint-url)")
            kw = {"region_name": args.region}
            if args.endpoint_url:
                kw["endpoint_url"] = args.endpoint_url
            source = CloudWatchMetricsSource(boto3.client("cloudwatch", **kw))
            now_s = time.time()
            start_s = now_s - args.history_days * 86400
            unreserved = args.unreserved
            if unreserved is None:
                try:
                    limits = boto3.client("lambda", **kw).get_account_settings()["AccountLimit"]
                    unreserved = int(limits["UnreservedConcurrentExecutions"])
                except Exception as exc:  # noqa: BLE001 - shown, plan still made
                    notes.append(f"account settings unavailable: {exc}; PC will not be raised")
        plans = []
        for name in names:
            policy = AliasPolicy(name, args.alias, strategy=args.strategy,
                                 memory_mb=args.memory_mb, floor=args.floor, cap=args.cap,
                                 budget_usd_per_hour=args.budget_usd_per_hour)
            try:
                series = source.fetch(name, args.alias, start_s=start_s, end_s=now_s)
                forecast = forecast_alias(series, issued_at_s=now_s)
            except MetricsUnavailable as exc:
                if args.cloudwatch:
                    raise CommandError(f"{name}:{args.alias}: CloudWatch metrics unavailable "
                                       f"({' '.join(str(exc).split())})") from exc
                notes.append(f"{name}:{args.alias}: metrics unavailable ({exc})")
                forecast = None
            headroom = None if unreserved is None else account_headroom(unreserved, 0)
            plans.append((plan_alias(forecast, policy, now_s=now_s, headroom=headroom), forecast))
    except (FileNotFoundError, TraceFormatError) as exc:
        raise UsageError(f"--trace {args.trace}: {exc}") from exc
    except (ForecastError, PlanError) as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print_json({"source": "trace" if args.trace else "cloudwatch", "agent": agent,
                    "at_minute": at, "notes": notes,
                    "plans": [_plan_json(plan, forecast) for plan, forecast in plans]})
        return 0
    for note in notes:
        print(f"({note})")
    for plan, forecast in plans:
        what = {"provisioned": f"provisioned concurrency {plan.provisioned_concurrency}",
                "ping": f"warm pings x{plan.ping_concurrency} every {plan.ping_interval_s} s",
                "none": "nothing"}[plan.action]
        print(f"{plan.key}: {what}, ${plan.hourly_cost_usd:.4f}/h")
        print(f"    why: {plan.reason}")
        if forecast is not None:
            print(f"    forecast: {forecast.concurrency.reason}")
    return 0


def _plan_json(plan: object, forecast: object) -> dict[str, object]:
    """One plan of ``--json`` (see `JSON_SCHEMA`)."""
    from infra.commands.common import finite

    p = plan
    return {"key": p.key, "function_name": p.function_name, "alias": p.alias,  # type: ignore[attr-defined]
            "action": p.action, "provisioned_concurrency": p.provisioned_concurrency,  # type: ignore[attr-defined]
            "ping_concurrency": p.ping_concurrency, "ping_interval_s": p.ping_interval_s,  # type: ignore[attr-defined]
            "hourly_cost_usd": finite(p.hourly_cost_usd), "demand": finite(p.demand),  # type: ignore[attr-defined]
            "method": p.method, "reason": p.reason,  # type: ignore[attr-defined]
            "forecast_reason": None if forecast is None else forecast.concurrency.reason}  # type: ignore[attr-defined]
