"""``warmstart plan``: the warm plan the warmer would apply now, with its reasons (no actuation).

The plan is ``warmers.plan.run.plan_run``'s, the function the warmer Lambda and the simulator
call: all aliases planned at once in the order given, sharing the account's unreserved
concurrency, with the warmer's forecast and planner settings (``WarmerConfig.from_dict``).
``--explain`` prints where each number came from; ``--json`` the whole run plan.

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
  notes       list of str  run-level notes (account limits assumed or unknown, metrics missing)
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
  run_plan    object       warmers.plan.run.RunPlan.to_dict(), the plan the warmer would apply:
    issued_at_s    float
    account        {unreserved_concurrency, concurrent_executions, source}
    headroom_left  int or null   unreserved concurrency above 100 left after every alias
    aliases        list, one per alias: key, strategy, plan (a WarmPlan), steps (a list of
                   {name, value, source}: where each number came from, what --explain
                   prints), notes, forecast (the concurrency QuantileForecast or null),
                   degradation_parameter, degradation_level
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
    parser.add_argument("--objective", choices=("cost", "sla"), default=None,
                        help="what provisioned concurrency is bought for: cost (only where it "
                             "costs no more than on demand) or sla (cover the forecast peak); "
                             "default cost, or the agent's provisioned_concurrency.objective")
    parser.add_argument("--budget-usd-per-hour", type=non_negative_float, default=1.0,
                        help="hourly budget of provisioned concurrency, USD")
    parser.add_argument("--unreserved", type=non_negative_int, default=None,
                        help="account unreserved concurrency (default: GetAccountSettings, or "
                             "for a trace Lambda's default quota, 1,000)")
    parser.add_argument("--state-prefix", default="/warmstart/warmer",
                        help="CloudWatch: read the warmer's last good plans from SSM under this "
                             "prefix, so hysteresis is planned as the warmer would ('' = none; "
                             "default /warmstart/warmer)")
    parser.add_argument("--overflow-endpoint", default=None, metavar="NAME",
                        help="also plan the capacity of this SageMaker overflow endpoint, shared "
                             "by every planned alias (warmers.plan.endpoint.plan_endpoint, as the "
                             "warmer does)")
    parser.add_argument("--endpoint-target", default="variant",
                        choices=("variant", "inference_component"),
                        help="what scales: the production variant (>= 1 instance) or an "
                             "inference component (can hold 0; needs --inference-component)")
    parser.add_argument("--inference-component", default=None, metavar="NAME",
                        help="the inference component scaled (--endpoint-target "
                             "inference_component)")
    parser.add_argument("--endpoint-instance-type", default="ml.g6.xlarge",
                        help="the endpoint's instance type, priced from warmers/prices.json")
    parser.add_argument("--endpoint-cap", type=non_negative_int, default=2,
                        help="most instances (default 2)")
    parser.add_argument("--endpoint-budget-usd-per-hour", type=non_negative_float, default=5.0,
                        help="most the endpoint may cost per hour (default 5)")
    parser.add_argument("--explain", action="store_true",
                        help="print where each number of each plan came from")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the lines (schema below)")


#: Policy defaults when no agent is selected.
DEFAULTS = {"strategy": "provisioned", "memory_mb": 1024, "floor": 0, "cap": 50,
            "objective": "cost"}


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
    from infra.config import StackConfigError, load_config

    try:
        agent = load_config(args.cdk_json).agent(args.agent)
    except StackConfigError as exc:
        raise AgentChoiceError(str(exc)) from exc
    pc = agent.provisioned_concurrency
    return agent.name, {"strategy": agent.strategy, "memory_mb": agent.memory_mb,
                        "floor": pc.min if pc else DEFAULTS["floor"],
                        "cap": pc.max if pc else DEFAULTS["cap"],
                        "objective": pc.objective if pc else DEFAULTS["objective"]}


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
    from warmers.config import WarmerConfig, WarmerConfigError
    from warmers.forecast import ForecastError
    from warmers.plan.policy import PlanError
    from warmers.plan.run import AccountLimits, MetricsMissing, plan_run
    from warmers.ports import MetricsSource
    from warmers.runner import account_limits, collect_inputs
    from warmers.state import MemoryPlanStore, PlanStore, SsmPlanStore
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
    store: PlanStore = MemoryPlanStore()
    given = (None if args.unreserved is None
             else AccountLimits(args.unreserved, None, "--unreserved"))
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
            account = given or AccountLimits.lambda_default()
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
            if given is None:
                account, fault = account_limits(boto3.client("lambda", **kw))
                if fault is not None:
                    notes.append(f"account settings unavailable: {fault.message}")
            else:
                account = given
            if args.state_prefix:
                store = SsmPlanStore(boto3.client("ssm", **kw), args.state_prefix)
        if account.source.startswith("assumed"):
            notes.append(f"account limits {account.source} (--unreserved to set)")
        try:
            config = WarmerConfig.from_dict(
                {"aliases": [{"function_name": name, "alias": args.alias,
                              "strategy": args.strategy, "memory_mb": args.memory_mb,
                              "floor": args.floor, "cap": args.cap,
                              "budget_usd_per_hour": args.budget_usd_per_hour,
                              "objective": args.objective}
                             for name in dict.fromkeys(names)],
                 "history_days": args.history_days,
                 "endpoints": [] if not args.overflow_endpoint else [{
                     "endpoint_name": args.overflow_endpoint,
                     "agents": [f"{name}:{args.alias}" for name in dict.fromkeys(names)],
                     "target": args.endpoint_target,
                     "inference_component": args.inference_component,
                     "instance_type": args.endpoint_instance_type,
                     "cap": args.endpoint_cap,
                     "budget_usd_per_hour": args.endpoint_budget_usd_per_hour}]})
        except WarmerConfigError as exc:
            raise UsageError(str(exc)) from exc
        inputs = collect_inputs(now_s, config, metrics=source, store=store, account=account)
        for f in inputs.faults:
            if f.source != "cloudwatch:GetMetricData":  # said per alias below
                notes.append(f"{f.source}: {f.message}")
        run_plan = plan_run(inputs.series, inputs.previous, inputs.account, config, now_s)
    except (FileNotFoundError, TraceFormatError) as exc:
        raise UsageError(f"--trace {args.trace}: {exc}") from exc
    except (ForecastError, PlanError) as exc:
        raise UsageError(str(exc)) from exc
    missing = [k for k, v in inputs.series.items() if isinstance(v, MetricsMissing)]
    for key in missing:
        notes.append(f"{key}: metrics unavailable ({inputs.series[key].reason}); "  # type: ignore[union-attr]
                     "planned without them, the others as usual")
    if args.json:
        print_json({"source": "trace" if args.trace else "cloudwatch", "agent": agent,
                    "at_minute": at, "notes": notes,
                    "plans": [_plan_json(entry) for entry in run_plan.aliases],
                    "run_plan": run_plan.to_dict()})
    else:
        _print(run_plan, notes, explain=args.explain)
    if missing and len(missing) == len(run_plan.aliases):
        raise CommandError("no alias had metrics: " + "; ".join(notes))
    return 0


def _print(run_plan: object, notes: list[str], *, explain: bool) -> None:
    from warmers.plan.run import RunPlan

    assert isinstance(run_plan, RunPlan)
    for entry in run_plan.aliases:
        plan = entry.plan
        what = {"provisioned": f"provisioned concurrency {plan.provisioned_concurrency}",
                "ping": f"warm pings x{plan.ping_concurrency} every {plan.ping_interval_s} s",
                "none": "nothing"}[plan.action]
        print(f"{plan.key}: {what}, ${plan.hourly_cost_usd:.4f}/h")
        print(f"    why: {plan.reason}")
        if entry.forecast is not None:
            print(f"    forecast: {entry.forecast.reason}")
        for note in entry.notes:
            print(f"    note: {note}")
        if explain:
            _print_steps(entry.steps)
    for endpoint in run_plan.endpoints:
        e = endpoint.plan
        unit = "copies" if endpoint.policy.target == "inference_component" else "instances"
        print(f"endpoint {e.endpoint_name} ({endpoint.policy.resource_id}): {e.capacity} {unit} "
              f"({endpoint.policy.instance_type}), ${e.hourly_cost_usd:.4f}/h")
        print(f"    why: {e.reason}")
        for note in endpoint.notes:
            print(f"    note: {note}")
        if explain:
            _print_steps(endpoint.steps)
    for note in notes:
        print(f"({note})")
    if explain:
        left = run_plan.headroom_left
        print(f"account: {run_plan.account.source}; unreserved concurrency above the 100 "
              f"minimum left after every alias: {'unknown' if left is None else left}")


def _print_steps(steps: tuple) -> None:  # type: ignore[type-arg]
    """The ``explain:`` block: each step's name, value and where it came from."""
    print("    explain:")
    width = max(len(s.name) for s in steps)
    for s in steps:
        print(f"      {s.name:<{width}}  {_number(s.value):>10}  {s.source}")


def _number(value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e3 else f"{value:.0f}"
    return str(value)


def _plan_json(entry: object) -> dict[str, object]:
    """One plan of ``--json`` (see `JSON_SCHEMA`)."""
    from infra.commands.common import finite
    from warmers.plan.run import AliasRunPlan

    assert isinstance(entry, AliasRunPlan)
    p = entry.plan
    return {"key": p.key, "function_name": p.function_name, "alias": p.alias,
            "action": p.action, "provisioned_concurrency": p.provisioned_concurrency,
            "ping_concurrency": p.ping_concurrency, "ping_interval_s": p.ping_interval_s,
            "hourly_cost_usd": finite(p.hourly_cost_usd), "demand": finite(p.demand),
            "method": p.method, "reason": p.reason,
            "forecast_reason": None if entry.forecast is None else entry.forecast.reason}
