"""`warmstart local up`: run the synthesized stack on this machine (no Docker, no AWS account).

Reads the functions from the synthesized CDK template (``cdk.out/*.template.json``), starts a
moto server (with the template's SSM parameters), the GPU endpoint server (overflow), the Lambda
emulator with its REST API, the HTTP API gateway (every agent at its path prefix) and the warmer
on its schedule, prints the endpoints and each agent's URL, and runs until Ctrl-C (SIGINT) or
SIGTERM, then stops every process it started.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.local.spec import LocalApp


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="start moto, the GPU endpoint, the Lambda emulator, the gateway "
                                   "and the warmer until Ctrl-C",
                        description=__doc__.splitlines()[0])
    source = up.add_mutually_exclusive_group()
    source.add_argument("--template", type=Path, help="a CloudFormation template (JSON)")
    source.add_argument("--cdk-out", type=Path, default=Path("cdk.out"),
                        help="directory with synthesized templates (default: cdk.out)")
    up.add_argument("--time-scale", type=float, default=1.0,
                    help="emulated seconds per real second (e.g. 60 for replays; default 1)")
    up.add_argument("--idle-timeout-s", type=float, default=600.0,
                    help="idle seconds before an on-demand environment is reclaimed (default 600)")
    up.add_argument("--pc-allocation-delay-s", type=float, default=60.0,
                    help="seconds before requested provisioned concurrency starts allocating (default 60)")
    up.add_argument("--concurrency-limit", type=int, default=1000,
                    help="account concurrency limit (default 1000)")
    up.add_argument("--metrics-flush-interval-s", type=float, default=10.0,
                    help="real seconds between metric publications to the moto server (default 10)")
    up.add_argument("--lambda-port", type=int, default=0, help="Lambda API port (0 = any free)")
    up.add_argument("--gateway-port", type=int, default=0, help="HTTP API port (0 = any free)")
    up.add_argument("--moto-port", type=int, default=0, help="moto server port (0 = any free)")
    up.add_argument("--no-moto", action="store_true",
                    help="no moto server (and no metrics, no warmer)")
    up.add_argument("--no-gpu-endpoint", action="store_true",
                    help="do not start the GPU (overflow) endpoint server")
    up.add_argument("--gpu-endpoint-name", default=None,
                    help="SageMaker endpoint name it answers (default: the template's, "
                         "else warmstart-local-gpu)")
    up.add_argument("--no-tool-stub", action="store_true",
                    help="do not start the local downstream tool stub (empty *_TOOL_URL "
                         "variables, e.g. the lookup agent's LOOKUP_TOOL_URL, stay empty)")
    up.add_argument("--tool-latency-ms", type=float, default=40.0,
                    help="real latency of the local tool stub's answers, ms (default 40)")
    up.add_argument("--no-warmer", action="store_true", help="do not run the warmer schedule")
    up.add_argument("--warmer-period-s", type=float, default=60.0,
                    help="clock seconds between warmer runs (default 60, like rate(1 minute); "
                         "the time scale shortens it in real time)")
    up.add_argument("--cdk-json", type=Path, default=Path("cdk.json"),
                    help="cdk.json whose warmstart config bounds the warmer (default: cdk.json, "
                         "when present)")
    up.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment variable for every function (repeatable)")
    up.add_argument("--endpoints-file", type=Path,
                    help="also write the endpoints as JSON to this file once ready: service -> "
                         "URL, and \"agents\": name -> {url, function_name, alias}")
    up.add_argument("--code-dir", type=Path, default=Path.cwd(),
                    help="code directory for functions without an asset (default: current dir)")


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {pair!r} is not KEY=VALUE")
        env[key] = value
    return env


def agent_lines(app: LocalApp, gateway_url: str) -> list[str]:
    """One line per agent of ``app``: its name, URL (the gateway plus its path prefix) and the
    function alias the gateway sends it to."""
    routes = app.all_routes()
    lines = []
    for agent in app.agents:
        qualifier = next((r.qualifier for r in routes if r.function_name == agent.function_name), None)
        where = f"{agent.function_name}:{qualifier}" if qualifier else f"{agent.function_name} (no route)"
        lines.append(f"agent    {agent.name:<12} {gateway_url}{agent.path_prefix}  -> {where}")
    return lines


def run(args: argparse.Namespace) -> int:
    if args.local_command != "up":  # argparse makes this unreachable; keep the contract explicit
        print(f"unknown action {args.local_command!r}", file=sys.stderr)
        return 2
    return _up(args)


def _warmer_logging() -> logging.Handler:
    """Print the warmer's JSON log lines (plans, tool_unavailable) to stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("warmstart local: warmer %(message)s"))
    logger = logging.getLogger("warmstart.warmer")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler


def _up(args: argparse.Namespace) -> int:
    from infra.config import ConfigError, load_config
    from infra.local.services import (
        ServiceStartError,
        gpu_endpoint_factory,
        tool_stub_factory,
        warmer_factory,
    )
    from infra.local.spec import FunctionSpec, GatewayRoute, LocalApp
    from infra.local.stack import LocalStack, LocalStackConfig
    from infra.local.template import TemplateError, find_templates, read_template

    inline_dir = tempfile.TemporaryDirectory(prefix="warmstart-local-")
    try:
        env = _parse_env(args.env)
        templates = [args.template] if args.template else find_templates(args.cdk_out)
        functions: list[FunctionSpec] = []
        warnings: list[str] = []
        parameters: dict[str, str] = {}
        gateway: GatewayRoute | None = None
        routes: list[GatewayRoute] = []
        for template in templates:
            try:
                app = read_template(template, inline_code_dir=Path(inline_dir.name),
                                    fallback_code_dir=args.code_dir)
            except TemplateError as exc:
                if args.template or "no AWS::Lambda::Function" not in str(exc):
                    raise
                continue
            functions += app.functions
            warnings += app.warnings
            parameters.update(app.parameters)
            gateway = gateway or app.gateway
            routes += app.routes
        if not functions:
            raise TemplateError(f"no Lambda function in {[str(t) for t in templates]}")
        if not args.warmer_period_s > 0:
            raise ValueError(f"--warmer-period-s must be > 0, got {args.warmer_period_s}")
        cdk_config = load_config(args.cdk_json) if args.cdk_json.is_file() else None
        config = LocalStackConfig(
            time_scale=args.time_scale, idle_timeout_s=args.idle_timeout_s,
            pc_allocation_delay_s=args.pc_allocation_delay_s,
            account_concurrency_limit=args.concurrency_limit,
            metrics_flush_interval_s=args.metrics_flush_interval_s, moto=not args.no_moto,
            lambda_port=args.lambda_port, gateway_port=args.gateway_port, moto_port=args.moto_port,
            env_overrides=env)
    except (TemplateError, ConfigError, ValueError) as exc:
        print(f"warmstart local up: {exc}", file=sys.stderr)
        inline_dir.cleanup()
        return 2
    for warning in warnings:
        print(f"warmstart local: warning: {warning}", file=sys.stderr)

    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    backing = [] if args.no_gpu_endpoint else [gpu_endpoint_factory(
        log_stream=sys.stderr,
        **({"endpoint_name": args.gpu_endpoint_name} if args.gpu_endpoint_name else {}))]
    if not args.no_tool_stub:
        backing.append(tool_stub_factory(latency_ms=args.tool_latency_ms))
    extra = [] if args.no_warmer or args.no_moto else [warmer_factory(
        cdk_config=cdk_config, period_s=args.warmer_period_s)]
    log_handler = None if args.no_warmer or args.no_moto else _warmer_logging()
    if args.no_moto and not args.no_warmer:
        print("warmstart local: warning: no warmer without the moto server (--no-moto)",
              file=sys.stderr)
    app = LocalApp(tuple(functions), gateway, tuple(warnings), parameters, tuple(routes))
    stack = LocalStack(app, config, backing_services=backing, extra_services=extra)
    try:
        try:
            stack.start()
        except ServiceStartError as exc:
            print(f"warmstart local up: could not start the local stack: {exc} "
                  "(--no-gpu-endpoint / --no-warmer skip those services)", file=sys.stderr)
            return 1
        except (RuntimeError, OSError, TimeoutError) as exc:
            print(f"warmstart local up: could not start the local stack: {exc}", file=sys.stderr)
            return 1
        endpoints = stack.endpoints()
        for name, url in endpoints.items():
            if name != "warmer":  # a schedule, not a URL: described below
                print(f"warmstart local: {name:<12} {url}", flush=True)
        deployed = stack.deployed_app or app
        if "warmer" in endpoints:
            from infra.local.services import warmer_document

            managed = ", ".join(
                f"{a['function_name']}:{a['alias']} ({a.get('strategy', 'provisioned')}"
                + (f", PC {a.get('floor', 0)}..{a.get('cap', '-')})"
                   if a.get("strategy", "provisioned") == "provisioned" else ")")
                for a in warmer_document(deployed, cdk_config=cdk_config)["aliases"])
            print(f"warmstart local: warmer       every {args.warmer_period_s:g} clock s "
                  f"({args.warmer_period_s / args.time_scale:g} real s), Lambda PC actuator: "
                  f"{managed}", flush=True)
        for spec in deployed.functions:
            if "WARMSTART_OVERFLOW_ENDPOINT_URL" in spec.environment:
                print(f"warmstart local: overflow  {spec.name} -> "
                      f"{spec.environment['WARMSTART_OVERFLOW_ENDPOINT_NAME']} at "
                      f"{spec.environment['WARMSTART_OVERFLOW_ENDPOINT_URL']}", flush=True)
        for spec in functions:
            aliases = ", ".join(f"{a.name}->{a.version}"
                                + (f" (PC {a.provisioned_concurrency})" if a.provisioned_concurrency else "")
                                for a in spec.aliases) or "none"
            strategy = "snapstart" if spec.snap_start else ("provisioned" if any(
                a.provisioned_concurrency for a in spec.aliases) else "on-demand")
            print(f"warmstart local: function {spec.name} handler={spec.handler} "
                  f"memory={spec.memory_mb}MB timeout={spec.timeout_s:g}s strategy={strategy} "
                  f"aliases: {aliases}", flush=True)
        if stack.gateway is not None:
            for route in stack.gateway.routes:
                print(f"warmstart local: route    {route.route_key} -> "
                      f"{route.function_name}:{route.qualifier}", flush=True)
            for line in agent_lines(app, stack.gateway.endpoint):
                print(f"warmstart local: {line}", flush=True)
        if args.endpoints_file:
            gateway_url = endpoints.get("gateway", "")
            agents = {a.name: {"url": f"{gateway_url}{a.path_prefix.rstrip('/')}",
                               "function_name": a.function_name, "alias": "live"}
                      for a in deployed.agents}
            args.endpoints_file.write_text(json.dumps({**endpoints, "agents": agents}))
        print("warmstart local: ready (Ctrl-C to stop)", flush=True)
        while not stop.wait(0.5):
            pass
        print("warmstart local: stopping", flush=True)
        return 0
    finally:
        stack.stop()
        inline_dir.cleanup()
        if log_handler is not None:
            logging.getLogger("warmstart.warmer").removeHandler(log_handler)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
