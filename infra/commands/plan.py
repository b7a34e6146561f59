"""``warmstart plan``: the warm plan the warmer would apply now, with its reasons (no actuation).

From a trace (``--trace FILE [--function HASH ...] [--at-minute M]``; the busiest functions when
none is named) or from CloudWatch (``--cloudwatch --function-name NAME [--alias live]
[--endpoint-url URL]``, e.g. a moto server or the local stack).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="Azure 2019 invocations file")
    src.add_argument("--cloudwatch", action="store_true", help="read AWS/Lambda metrics")
    parser.add_argument("--function", action="append", default=[],
                        help="trace function hash (repeatable); default: the --top busiest")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--durations", type=Path, help="trace durations file (Little's law)")
    parser.add_argument("--at-minute", type=int, default=None,
                        help="trace minute (index) to plan at; default: the last")
    parser.add_argument("--function-name", action="append", default=[],
                        help="CloudWatch: Lambda function name (repeatable)")
    parser.add_argument("--alias", default="live")
    parser.add_argument("--endpoint-url", default=None)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--history-days", type=float, default=14.0)
    parser.add_argument("--strategy", default="provisioned",
                        choices=("provisioned", "snapstart", "ping", "none"))
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--floor", type=int, default=0)
    parser.add_argument("--cap", type=int, default=50)
    parser.add_argument("--budget-usd-per-hour", type=float, default=1.0)
    parser.add_argument("--unreserved", type=int, default=None,
                        help="account unreserved concurrency (default: GetAccountSettings, or "
                             "unknown for traces)")


def run(args: argparse.Namespace) -> int:
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
        if args.trace:
            functions = read_invocations(args.trace)
            durations = read_durations(args.durations) if args.durations else {}
            names = args.function or sorted(
                functions, key=lambda k: -float(functions[k].invocations.sum()))[: args.top]
            unknown = [n for n in names if n not in functions]
            if unknown:
                print(f"warmstart plan: not in the trace: {', '.join(unknown)}")
                return 2
            n = next(iter(functions.values())).invocations.shape[0]
            at = n - 1 if args.at_minute is None else args.at_minute
            if not 0 <= at < n:
                print(f"warmstart plan: --at-minute must be in [0, {n - 1}]")
                return 2
            source: MetricsSource = TraceMetricsSource(functions, durations, start_s=0.0)
            now_s = (at + 1) * 60.0
            start_s = 0.0
            unreserved = args.unreserved
        else:
            names = args.function_name
            if not names:
                print("warmstart plan: --cloudwatch needs --function-name")
                return 2
            import boto3

            from warmers.cloudwatch import CloudWatchMetricsSource

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
                    print(f"(account settings unavailable: {exc}; PC will not be raised)")
        for name in names:
            policy = AliasPolicy(name, args.alias, strategy=args.strategy,
                                 memory_mb=args.memory_mb, floor=args.floor, cap=args.cap,
                                 budget_usd_per_hour=args.budget_usd_per_hour)
            try:
                series = source.fetch(name, args.alias, start_s=start_s, end_s=now_s)
                forecast = forecast_alias(series, issued_at_s=now_s)
            except MetricsUnavailable as exc:
                print(f"{name}:{args.alias}: metrics unavailable ({exc})")
                forecast = None
            headroom = None if unreserved is None else account_headroom(unreserved, 0)
            plan = plan_alias(forecast, policy, now_s=now_s, headroom=headroom)
            what = {"provisioned": f"provisioned concurrency {plan.provisioned_concurrency}",
                    "ping": f"warm pings x{plan.ping_concurrency} every {plan.ping_interval_s} s",
                    "none": "nothing"}[plan.action]
            print(f"{plan.key}: {what}, ${plan.hourly_cost_usd:.4f}/h")
            print(f"    why: {plan.reason}")
            if forecast is not None:
                print(f"    forecast: {forecast.concurrency.reason}")
    except (FileNotFoundError, TraceFormatError, ForecastError, PlanError) as exc:
        print(f"warmstart plan: {exc}")
        return 2
    return 0
