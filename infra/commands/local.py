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
from typing import TYPE_CHECKING, Any

from functions.runtime.contract import environment as names
from infra.commands.common import command

if TYPE_CHECKING:
    from infra.local.spec import LocalApp


JSON_SCHEMA = """\
--json prints the endpoints as one JSON object on stdout once the stack is ready (the
other lines go to stderr), the same object --endpoints-file writes:
  lambda, gateway, moto, gpu_endpoint, tool, ...   str   service name -> URL (those started)
  warmer                                           str   its schedule, when it runs
  agents          object  agent name -> {url (str, the gateway plus its prefix),
                          function_name (str), alias (str, "live")}
"""

#: Where `make demo` synthesizes (under the output directory); `local up` falls back to it.
DEMO_CDK_OUT = Path("demo") / "cdk.out"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from infra.commands.common import (
        existing_file,
        non_negative_float,
        non_negative_int,
        port,
        positive_float,
        positive_int,
    )

    sub = parser.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="start moto, the GPU endpoint, the Lambda emulator, the gateway "
                                   "and the warmer until Ctrl-C",
                        description=__doc__.splitlines()[0], epilog=JSON_SCHEMA)
    source = up.add_mutually_exclusive_group()
    source.add_argument("--template", type=existing_file, help="a CloudFormation template (JSON)")
    source.add_argument("--cdk-out", type=Path, default=None,
                        help="directory with synthesized templates (default: cdk.out, else "
                             "OUT_DIR/demo/cdk.out as `make demo` leaves it)")
    up.add_argument("--time-scale", type=positive_float, default=1.0,
                    help="emulated seconds per real second (e.g. 60 for replays; default 1)")
    up.add_argument("--idle-timeout-s", type=positive_float, default=600.0,
                    help="idle seconds before an on-demand environment is reclaimed (default 600)")
    up.add_argument("--pc-allocation-delay-s", type=non_negative_float, default=60.0,
                    help="seconds before requested provisioned concurrency starts allocating (default 60)")
    up.add_argument("--concurrency-limit", type=positive_int, default=1000,
                    help="account concurrency limit (default 1000)")
    up.add_argument("--metrics-flush-interval-s", type=positive_float, default=10.0,
                    help="real seconds between metric publications to the moto server (default 10)")
    up.add_argument("--lambda-port", type=port, default=0,
                    help="Lambda API port (default 0 = any free)")
    up.add_argument("--gateway-port", type=port, default=0,
                    help="HTTP API port (default 0 = any free)")
    up.add_argument("--moto-port", type=port, default=0,
                    help="moto server port (default 0 = any free)")
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
    up.add_argument("--tool-latency-ms", type=non_negative_float, default=40.0,
                    help="real latency of the local tool stub's answers, ms (default 40)")
    up.add_argument("--no-llm-stub", action="store_true",
                    help="do not start the local LLM stub (started when a function has an "
                         "empty *_LLM_URLS variable, e.g. the chat agent's CHAT_LLM_URLS)")
    up.add_argument("--no-warmer", action="store_true", help="do not run the warmer schedule")
    up.add_argument("--warmer-period-s", type=positive_float, default=60.0,
                    help="clock seconds between warmer runs (default 60, like rate(1 minute); "
                         "the time scale shortens it in real time)")
    up.add_argument("--cdk-json", type=existing_file, default=None,
                    help="cdk.json whose warmstart config bounds the warmer (default: cdk.json, "
                         "when present)")
    up.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment variable for every function (repeatable)")
    up.add_argument("--endpoints-file", type=_endpoints_file,
                    help="also write the endpoints as JSON to this file once ready: service -> "
                         "URL, and \"agents\": name -> {url, function_name, alias}")
    up.add_argument("--venv", action="store_true",
                    help="run every function with this project's .venv instead of its own code "
                         "and layers under its runtime's CPython (the default, as on Lambda); "
                         "for a machine without that CPython: a package missing from the "
                         "layers then goes unnoticed")
    up.add_argument("--lmi-processes", type=non_negative_int, default=2,
                    help="runtime processes per execution environment for a function on Lambda "
                         "Managed Instances (default 2; 0: as deployed, Python's 16 per vCPU "
                         "unless the agent sets per_execution_environment_max_concurrency)")
    up.add_argument("--code-dir", type=Path, default=Path.cwd(),
                    help="code directory for functions without an asset (default: current dir)")
    up.add_argument("--json", action="store_true",
                    help="print the endpoints as one JSON object on stdout once ready "
                         "(schema below)")


def _endpoints_file(raw: str) -> Path:
    """argparse type of ``--endpoints-file``: a file in an existing folder, or in the output
    directory (created when the file is written)."""
    from infra.commands.common import out_dir, output_file

    path = Path(raw)
    if path.parent == out_dir(argparse.Namespace()) and not path.is_dir():
        return path
    return output_file(raw)


def resolve_cdk_out(args: argparse.Namespace) -> Path:
    """The ``cdk.out`` to read: ``--cdk-out``, else ``cdk.out`` when it holds a template, else
    ``OUT_DIR/demo/cdk.out`` (what ``make demo`` synthesized).

    Raises
    ------
    infra.commands.common.UsageError
        None holds a template: the message names the one command to run (``make synth``).
    """
    from infra.commands.common import UsageError, out_dir

    if args.cdk_out is not None:
        if not any(Path(args.cdk_out).glob("*.template.json")):
            raise UsageError(f"--cdk-out {args.cdk_out}: no synthesized template "
                             "(*.template.json) there; run `make synth` first")
        return Path(args.cdk_out)
    for candidate in (Path("cdk.out"), out_dir(args) / DEMO_CDK_OUT):
        if candidate.is_dir() and any(candidate.glob("*.template.json")):
            return candidate
    raise UsageError("no synthesized stack in cdk.out (nor in "
                     f"{out_dir(args) / DEMO_CDK_OUT}); run `make synth` first")


def check_ports_free(ports: dict[str, int]) -> None:
    """Refuse a fixed port another process holds, before anything starts.

    Raises
    ------
    infra.commands.common.UsageError
        ``--gateway-port 8080 is in use on 127.0.0.1 (pick another, or 0 for any free)``.
    """
    import socket

    from infra.commands.common import UsageError

    for flag, number in ports.items():
        if not number:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", number))
            except OSError:
                raise UsageError(f"{flag} {number} is in use on 127.0.0.1 (pick another, or 0 "
                                 "for any free)") from None


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


def endpoints_document(endpoints: dict[str, str], app: LocalApp) -> dict[str, object]:
    """What ``--json`` prints and ``--endpoints-file`` writes (see `JSON_SCHEMA`)."""
    gateway_url = endpoints.get("gateway", "")
    agents = {a.name: {"url": f"{gateway_url}{a.path_prefix.rstrip('/')}",
                       "function_name": a.function_name, "alias": "live"}
              for a in app.agents}
    return {**endpoints, "agents": agents}


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


@command("warmstart local up")
def _up(args: argparse.Namespace) -> int:
    from infra.commands.common import CommandError, UsageError
    from infra.config import StackConfigError, load_config
    from infra.local.emulator import ManagedInstancesConfig
    from infra.local.services import (
        ServiceStartError,
        gpu_endpoint_factory,
        llm_stub_factory,
        tool_stub_factory,
        wants_llm_stub,
        warmer_factory,
    )
    from infra.local.spec import FunctionSpec, GatewayRoute, LocalApp, StageSettings
    from infra.local.stack import LocalStack, LocalStackConfig
    from infra.local.template import TemplateError, find_templates, read_template

    check_ports_free({"--lambda-port": args.lambda_port, "--gateway-port": args.gateway_port,
                      "--moto-port": args.moto_port})
    cdk_out = None if args.template else resolve_cdk_out(args)
    cdk_json = args.cdk_json or (Path("cdk.json") if Path("cdk.json").is_file() else None)
    inline_dir = tempfile.TemporaryDirectory(prefix="warmstart-local-")
    try:
        env = _parse_env(args.env)
        templates = [args.template] if args.template else find_templates(cdk_out)  # type: ignore[arg-type]
        functions: list[FunctionSpec] = []
        warnings: list[str] = []
        parameters: dict[str, str] = {}
        gateway: GatewayRoute | None = None
        routes: list[GatewayRoute] = []
        managed: dict[str, ManagedInstancesConfig] = {}
        stage = StageSettings()  # the HTTP API's: throttling and timeouts the gateway enforces
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
            managed.update(app.managed_instances)
            if gateway is None and routes == [] and (app.gateway is not None or app.routes):
                stage = app.stage
            gateway = gateway or app.gateway
            routes += app.routes
        if not functions:
            raise TemplateError(f"no Lambda function in {[str(t) for t in templates]}")
        cdk_config = load_config(cdk_json) if cdk_json is not None else None
        config = LocalStackConfig(
            time_scale=args.time_scale, idle_timeout_s=args.idle_timeout_s,
            pc_allocation_delay_s=args.pc_allocation_delay_s,
            account_concurrency_limit=args.concurrency_limit,
            metrics_flush_interval_s=args.metrics_flush_interval_s, moto=not args.no_moto,
            lambda_port=args.lambda_port, gateway_port=args.gateway_port, moto_port=args.moto_port,
            env_overrides=env, own_layers=not args.venv,
            lmi_processes_per_environment=args.lmi_processes or None)
    except (TemplateError, StackConfigError, ValueError) as exc:
        inline_dir.cleanup()
        raise UsageError(str(exc)) from exc
    if cdk_out is not None and cdk_out != Path("cdk.out"):
        print(f"warmstart local: using the synthesized stack in {cdk_out}", file=sys.stderr)
    for warning in warnings:
        print(f"warmstart local: warning: {warning}", file=sys.stderr)

    stop = threading.Event()
    # with --json, stdout holds only the endpoints document; the rest goes to stderr
    info = sys.stderr if args.json else sys.stdout

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    backing: list[Any] = [] if args.no_gpu_endpoint else [gpu_endpoint_factory(
        log_stream=sys.stderr,
        **({"endpoint_name": args.gpu_endpoint_name} if args.gpu_endpoint_name else {}))]
    if not args.no_tool_stub:
        backing.append(tool_stub_factory(latency_ms=args.tool_latency_ms))
    if not args.no_llm_stub and any(wants_llm_stub(spec) for spec in functions):
        backing.append(llm_stub_factory())
    extra = [] if args.no_warmer or args.no_moto else [warmer_factory(
        cdk_config=cdk_config, period_s=args.warmer_period_s)]
    log_handler = None if args.no_warmer or args.no_moto else _warmer_logging()
    if args.no_moto and not args.no_warmer:
        print("warmstart local: warning: no warmer without the moto server (--no-moto)",
              file=sys.stderr)
    app = LocalApp(tuple(functions), gateway, tuple(warnings), parameters, tuple(routes), stage,
                   managed_instances=managed)
    stack = LocalStack(app, config, backing_services=backing, extra_services=extra)
    try:
        try:
            stack.start()
        except ServiceStartError as exc:
            raise CommandError(f"could not start the local stack: {exc} "
                               "(--no-gpu-endpoint / --no-warmer skip those services)") from exc
        except (RuntimeError, OSError, TimeoutError) as exc:
            raise CommandError(f"could not start the local stack: {exc}") from exc
        endpoints = stack.endpoints()
        for name, url in endpoints.items():
            if name != "warmer":  # a schedule, not a URL: described below
                print(f"warmstart local: {name:<12} {url}", file=info, flush=True)
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
                  f"{managed}", file=info, flush=True)
        for spec in deployed.functions:
            if names.ENV_OVERFLOW_ENDPOINT_URL in spec.environment:
                print(f"warmstart local: overflow  {spec.name} -> "
                      f"{spec.environment[names.ENV_OVERFLOW_ENDPOINT_NAME]} at "
                      f"{spec.environment[names.ENV_OVERFLOW_ENDPOINT_URL]}", file=info, flush=True)
        for spec in functions:
            aliases = ", ".join(f"{a.name}->{a.version}"
                                + (f" (PC {a.provisioned_concurrency})" if a.provisioned_concurrency else "")
                                for a in spec.aliases) or "none"
            strategy = "snapstart" if spec.snap_start else ("provisioned" if any(
                a.provisioned_concurrency for a in spec.aliases) else "on-demand")
            lmi = stack.lambda_service.managed_instances(spec) if stack.lambda_service else None
            if lmi is not None:
                strategy = (f"managed_instances (min {lmi.min_execution_environments} environments"
                            f" x {lmi.concurrency(spec.memory_mb)} processes, --lmi-processes)")
            packages = (".venv" if spec.layers is None or args.venv else
                        f"own ({spec.runtime}: code + {len(spec.layers)} layer(s))")
            print(f"warmstart local: function {spec.name} handler={spec.handler} "
                  f"memory={spec.memory_mb}MB timeout={spec.timeout_s:g}s strategy={strategy} "
                  f"packages={packages} aliases: {aliases}", file=info, flush=True)
        if stack.gateway is not None:
            for route in stack.gateway.routes:
                print(f"warmstart local: route    {route.route_key} -> "
                      f"{route.function_name}:{route.qualifier} ({stack.gateway.limits(route)})",
                      file=info, flush=True)
            for line in agent_lines(app, stack.gateway.endpoint):
                print(f"warmstart local: {line}", file=info, flush=True)
        document = endpoints_document(endpoints, deployed)
        if args.endpoints_file:
            args.endpoints_file.parent.mkdir(parents=True, exist_ok=True)
            args.endpoints_file.write_text(json.dumps(document))
        if args.json:
            print(json.dumps(document), flush=True)
        print("warmstart local: ready (Ctrl-C to stop)", file=info, flush=True)
        while not stop.wait(0.5):
            pass
        print("warmstart local: stopping", file=info, flush=True)
        return 0
    finally:
        stack.stop()
        inline_dir.cleanup()
        if log_handler is not None:
            logging.getLogger("warmstart.warmer").removeHandler(log_handler)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
