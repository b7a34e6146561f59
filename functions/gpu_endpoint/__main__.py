"""Run the GPU endpoint server: ``python -m functions.gpu_endpoint [serve] [--port N]``.

SageMaker starts the container as ``docker run <image> serve``: with ``serve`` the server
binds ``0.0.0.0:8080`` unless told otherwise. Locally use ``--host 127.0.0.1 --port 0``; the
first stdout line is ``WARMSTART_GPU_ENDPOINT_URL=http://host:port`` once the model is
loaded and the socket listens (callers read it to find the ephemeral port).

Environment (read here, at the entry point, once): ``WARMSTART_MODEL_DIR``,
``WARMSTART_INTENTS_FILE``, ``WARMSTART_OVERFLOW_ENDPOINT_NAME`` (the only name answered on
``/endpoints/{name}/invocations``; any when unset), ``WARMSTART_GPU_FAULTS=true`` (serve the
fault-injection API), ``WARMSTART_GPU_PROVIDERS`` (comma list, e.g. ``CPUExecutionProvider``).

SageMaker's ``InvokeEndpointWithResponseStream`` front end (``/endpoints/{name}/
invocations-response-stream``, `functions.gpu_endpoint.stream`) is served only when `main` is
given an ``event_encoder``; runtime code never imports ``infra``, so the local stack starts
``python -m infra.local.gpu_endpoint_main`` (the same options), which hands in
``infra.local.eventstream.encode_message``. The container side (``/invocations`` with
``Accept: text/event-stream``) is always served.

Finite capacity: ``--inference-component NAME`` makes the server an inference component of the
endpoint (``--endpoint-name`` or ``WARMSTART_OVERFLOW_ENDPOINT_NAME``, required then) with
``--copies N`` in service at the start (default 0), ``--concurrent-requests-per-copy C``
(default 4) and ``--provisioning-delay-s S`` (default 600 s) from a scale-out to its copies in
service; the SageMaker control plane (``DescribeInferenceComponent``,
``UpdateInferenceComponentRuntimeConfig``) is served on ``POST /``
(`functions.gpu_endpoint.capacity`). Bad values exit 2 before the model loads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from functions.gpu_endpoint.capacity import InferenceComponentCapacity
from functions.gpu_endpoint.container import SAGEMAKER_MODEL_DIR
from functions.gpu_endpoint.server import bind_socket, create_app
from functions.runtime.contract import environment as names

if TYPE_CHECKING:
    from functions.gpu_endpoint.stream import EventEncoder

URL_PREFIX = names.ENV_GPU_ENDPOINT_URL + "="


def resolve_model_dir(explicit: str | None, env: Mapping[str, str]) -> Path:
    """``--model-dir``, else ``/opt/ml/model`` when it holds a model (SageMaker), else
    ``WARMSTART_MODEL_DIR`` / the agent's default model directory."""
    if explicit:
        return Path(explicit)
    if (SAGEMAKER_MODEL_DIR / "model.onnx").is_file():
        return SAGEMAKER_MODEL_DIR
    from functions.intent_model.model import default_model_dir

    return Path(default_model_dir(env))


def endpoint_parser() -> argparse.ArgumentParser:
    """The server's command line (``python -m functions.gpu_endpoint [serve] --host --port
    ...``); `main` parses with it."""
    parser = argparse.ArgumentParser(prog="python -m functions.gpu_endpoint",
                                     description="warmstart GPU (overflow) endpoint server")
    parser.add_argument("mode", nargs="?", choices=["serve"], default=None,
                        help="'serve' (SageMaker): default host 0.0.0.0 and port 8080")
    parser.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port; 0 = ephemeral")
    parser.add_argument("--model-dir", default=None, help="directory with model.onnx")
    parser.add_argument("--endpoint-name", default=None,
                        help="the endpoint name answered on /endpoints/{name}/invocations")
    parser.add_argument("--enable-fault-api", action="store_true",
                        help="serve POST/DELETE /_faults (tests and bench only)")
    parser.add_argument("--inference-component", default=None, metavar="NAME",
                        help="emulate this SageMaker inference component: finite, planned "
                             "capacity and the control plane on POST /")
    parser.add_argument("--copies", type=int, default=0, metavar="N",
                        help="copies in service at the start (default 0)")
    parser.add_argument("--concurrent-requests-per-copy", type=int, default=4, metavar="C",
                        help="requests one copy answers at once (default 4)")
    parser.add_argument("--provisioning-delay-s", type=float, default=600.0, metavar="S",
                        help="seconds from a scale-out to its copies in service (default 600)")
    return parser


def build_capacity(args: argparse.Namespace,
                   endpoint_name: str | None) -> InferenceComponentCapacity | None:
    """The inference component's capacity from the options (None without
    ``--inference-component``).

    Raises
    ------
    ValueError
        No endpoint name, or a bad option value (`InferenceComponentCapacity`).
    """
    if args.inference_component is None:
        return None
    if not endpoint_name:
        raise ValueError("--inference-component needs --endpoint-name (or "
                         f"{names.ENV_OVERFLOW_ENDPOINT_NAME})")
    return InferenceComponentCapacity(
        args.inference_component, endpoint_name=endpoint_name, copies=args.copies,
        concurrent_requests_per_copy=args.concurrent_requests_per_copy,
        provisioning_delay_s=args.provisioning_delay_s)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, *,
         event_encoder: EventEncoder | None = None) -> int:
    """Parse the options, load the model and serve until stopped.

    Parameters
    ----------
    argv : sequence of str, optional
        Command-line options (default ``sys.argv[1:]``).
    env : Mapping[str, str], optional
        The environment read (default ``os.environ``).
    event_encoder : callable, optional
        ``encode(headers, payload) -> bytes``, one event-stream message: serve SageMaker's
        streaming front end too (`functions.gpu_endpoint.server.create_app`). None (the
        container as SageMaker runs it): the container's routes only.

    Returns
    -------
    int
        0 once the server stopped; 2 for a bad option or a missing model (message on stderr).
    """
    environ = dict(os.environ if env is None else env)
    args = endpoint_parser().parse_args(argv)
    sagemaker = args.mode == "serve"
    host = args.host or ("0.0.0.0" if sagemaker else "127.0.0.1")
    port = args.port if args.port is not None else (8080 if sagemaker else 0)
    if not 0 <= port <= 65535:
        print(f"error: --port must be 0..65535, got {port}", file=sys.stderr)
        return 2
    endpoint_name = args.endpoint_name or environ.get(names.ENV_OVERFLOW_ENDPOINT_NAME)
    try:
        capacity = build_capacity(args, endpoint_name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    providers_env = environ.get(names.ENV_GPU_PROVIDERS, "").strip()
    providers = [p.strip() for p in providers_env.split(",") if p.strip()] or None
    intents = environ.get(names.ENV_INTENTS_FILE) or None
    model_dir = resolve_model_dir(args.model_dir, environ)
    if not (model_dir / "model.onnx").is_file():
        print(f"error: no model.onnx in {model_dir}; set --model-dir or {names.ENV_MODEL_DIR}",
              file=sys.stderr)
        return 2
    faults = args.enable_fault_api or environ.get(names.ENV_GPU_FAULTS, "").lower() == "true"
    app = create_app(
        model_dir,
        intents_path=Path(intents) if intents else None,
        providers=providers,
        endpoint_name=endpoint_name,
        enable_fault_api=faults,
        capacity=capacity,
        event_encoder=event_encoder,
    )
    import uvicorn

    sock = bind_socket(host, port)
    shown_host = "127.0.0.1" if host == "0.0.0.0" else host
    print(f"{URL_PREFIX}http://{shown_host}:{sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           access_log=False))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
