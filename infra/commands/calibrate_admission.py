"""``warmstart calibrate --agent NAME``: the admission calibration of one agent.

Measures what admission's estimates stand for, for this agent, at its memory size, on this
machine (`functions.runtime.calibration` is the document and how the function reads it):

- ``stage_p95_ms``: each preload stage's duration in ``--samples`` fresh processes (a fresh
  Python per sample, the agent's handler module imported with a pre-paid init so the stages
  run in order on the main thread, as they run on the preload thread of an on-demand
  environment; ``ExecutionEnvironment.resource_load_ms``), nearest-rank p95;
- ``overflow_p95_ms``: warm calls through the toolkit's own overflow client (boto3
  ``sagemaker-runtime`` ``InvokeEndpoint``) to the local GPU endpoint server
  (``python -m functions.gpu_endpoint``) with the route's own ``overflow_request`` of
  ``--body``, when the agent overflows (``"overflow": "gpu"``), nearest-rank p95.

The document goes to ``calibration/<agent>.json`` beside ``cdk.json`` (or ``--out``); ``cdk
synth`` puts it into the function's ``WARMSTART_CALIBRATION`` (``agents.<name>.calibration``
names another file). A cold request's path then starts from these numbers instead of the
seeds, so at SLA 1000 or 500 ms it overflows whenever the endpoint's p95 fits.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["calibrate_agent", "default_path", "nearest_rank_p95"]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Calls to the endpoint per sample process, after one unmeasured call (the connection).
OVERFLOW_CALLS = 20

CHILD = r"""
import importlib, json, sys, time
spec = json.loads(sys.argv[1])
module, _, attr = spec["handler"].rpartition(".")
handler = getattr(importlib.import_module(module), attr)
out = {"stages_ms": dict(handler.environment.resource_load_ms),
       "failed": {},
       "overflow_ms": [], "overflow_error": None}
for name, state in handler.environment.resources.items():
    if str(state) == "failed":
        try:
            handler.preload.result(name)
        except Exception as exc:
            cause = exc.__cause__ or exc
            out["failed"][name] = f"{type(cause).__name__}: {cause}"
body = spec.get("body")
client = getattr(handler, "overflow", None)
if body is not None and client is not None:
    from functions.runtime.agent import resolve_hooks, with_runtime
    routes = [r for r in handler.agent.routes
              if r.needs_model and r.validate is not None and r.overflow_answer is not None]
    if spec.get("route"):
        routes = [r for r in routes if r.name == spec["route"]]
    if not routes:
        out["overflow_error"] = "no route of this agent overflows" + (
            f" by the name {spec['route']!r}" if spec.get("route") else "")
    else:
        hooks = {k: with_runtime(v, handler.runtime) if v is not None else None
                 for k, v in resolve_hooks(handler.agent.name, routes[0]).items()}
        try:
            payload = hooks["validate"](body)
            request = hooks["overflow_request"](payload) if hooks["overflow_request"] else payload
            out["route"] = routes[0].name
            for i in range(spec["calls"] + 1):
                result = client.invoke(request, budget_ms=10000.0)
                if i:
                    out["overflow_ms"].append(result.latency_ms)
        except Exception as exc:
            out["overflow_error"] = f"{type(exc).__name__}: {exc}"
print("WARMSTART_CALIBRATION_SAMPLE=" + json.dumps(out))
"""


def nearest_rank_p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile (the toolkit's `LatencyTracker` rule), ms."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(0.95 * len(ordered))) - 1]


def default_path(cdk_json: Path, agent: str) -> Path:
    """``calibration/<agent>.json`` beside ``cdk.json``."""
    return cdk_json.resolve().parent / "calibration" / f"{agent}.json"


def _sample(handler: str, env: dict[str, str], body: Any, route: str | None,
            calls: int, timeout_s: float) -> dict[str, Any]:
    spec = json.dumps({"handler": handler, "body": body, "route": route, "calls": calls})
    proc = subprocess.run([sys.executable, "-c", CHILD, spec], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("WARMSTART_CALIBRATION_SAMPLE="):
            sample: dict[str, Any] = json.loads(line.split("=", 1)[1])
            return sample
    raise RuntimeError(f"the agent's init failed in a fresh process (exit {proc.returncode}): "
                       f"{proc.stderr.strip()[-600:]}")


def calibrate_agent(agent: Any, *, samples: int, body: Any, route: str | None,
                    machine: str, overflow: bool = True, timeout_s: float = 120.0,
                    log: Any = None) -> dict[str, Any]:
    """Measure ``agent`` (an `infra.config.AgentConfig`) and return the calibration document.

    Raises
    ------
    RuntimeError
        An init failed, a stage failed to load, the GPU endpoint did not start, or the
        overflow calls failed (the message says which and why).
    """
    from infra.local.services import GpuEndpointService

    log = sys.stderr if log is None else log
    env = {**os.environ, **dict(agent.environment),
           "AWS_LAMBDA_INITIALIZATION_TYPE": "provisioned-concurrency",
           "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(agent.memory_mb),
           "WARMSTART_AGENT_NAME": agent.name, "WARMSTART_SLA_MS": str(agent.sla_ms),
           "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
           "AWS_ACCESS_KEY_ID": "calibrate", "AWS_SECRET_ACCESS_KEY": "calibrate",
           "ORT_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(REPO_ROOT)}
    env.pop("WARMSTART_CALIBRATION", None)
    if agent.base_path:
        env["WARMSTART_BASE_PATH"] = agent.base_path
    endpoint = None
    if overflow and agent.overflow == "gpu":
        endpoint = GpuEndpointService()
        endpoint.start()
        env["WARMSTART_OVERFLOW_ENDPOINT_NAME"] = endpoint.endpoint_name
        env["WARMSTART_OVERFLOW_ENDPOINT_URL"] = endpoint.endpoint
    stages: dict[str, list[float]] = {}
    overflow_ms: list[float] = []
    try:
        for i in range(samples):
            sample = _sample(agent.handler, env, body if endpoint else None, route,
                             OVERFLOW_CALLS, timeout_s)
            if sample["failed"]:
                failed = "; ".join(f"{k}: {v}" for k, v in sample["failed"].items())
                raise RuntimeError(f"agent {agent.name}: a preload stage failed in a fresh "
                                   f"process ({failed}); fix the agent first")
            if sample["overflow_error"]:
                raise RuntimeError(f"agent {agent.name}: the overflow calls failed: "
                                   f"{sample['overflow_error']} (pass --body with a valid "
                                   "request body of an overflowing route, or --no-overflow)")
            for name, ms in sample["stages_ms"].items():
                stages.setdefault(name, []).append(float(ms))
            overflow_ms += sample["overflow_ms"]
            print(f"calibrate {agent.name}: sample {i + 1}/{samples}: "
                  + ", ".join(f"{k} {v:.0f} ms" for k, v in sample["stages_ms"].items()),
                  file=log)
    finally:
        if endpoint is not None:
            endpoint.stop()
    return {
        "version": 1, "agent": agent.name, "memory_mb": agent.memory_mb, "machine": machine,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "stage_p95_ms": {k: round(nearest_rank_p95(v), 1) for k, v in stages.items()},
        "overflow_p95_ms": round(nearest_rank_p95(overflow_ms), 1) if overflow_ms else None,
        "method": (f"{samples} fresh processes, pre-paid init (stages in order on the main "
                   "thread); stage p95 = nearest rank of ExecutionEnvironment.resource_load_ms"
                   + (f"; overflow p95 = nearest rank of {len(overflow_ms)} warm InvokeEndpoint "
                      "calls through the toolkit's client to the local GPU endpoint server"
                      if overflow_ms else "; overflow not measured")),
    }
