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
from types import SimpleNamespace
from typing import Any

from functions.runtime.contract import environment as names

__all__ = ["calibrate_agent", "default_path", "nearest_rank_p95"]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Calls to the endpoint per sample process, after one unmeasured call (the connection).
OVERFLOW_CALLS = 20
#: Warm calls of the measured route per sample process, after one unmeasured call.
ROUTE_CALLS = 5

#: The first word of the line a sample process prints its measurements on.
SAMPLE_PREFIX = names.ENV_CALIBRATION_SAMPLE + "="

_CHILD_BODY = r"""
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
    streams = [r for r in handler.agent.routes if r.stream and r.overflow_event is not None]
    if not routes and not streams:
        out["overflow_error"] = "no route of this agent overflows" + (
            f" by the name {spec['route']!r}" if spec.get("route") else "")
    elif not routes:
        pass  # a streaming agent: its overflow's first event is measured below
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

# the route's local answer on this warm environment (a stream: the app's first chunk), and a
# streaming route's overflow first event: what a new environment seeds the route with
out["route_ms"], out["stream_overflow_ms"], out["route_error"] = [], [], None
measured = None
if body is not None and spec.get("route_calls"):
    candidates = handler.agent.routes
    if spec.get("route"):
        candidates = [r for r in candidates if r.name == spec["route"]]
    candidates = [r for r in candidates if r.validate is not None and "{" not in r.path]
    measured = candidates[0] if candidates else None
    if measured is None:
        out["route_error"] = "no route of this agent takes a request body" + (
            f" by the name {spec['route']!r}" if spec.get("route") else "")
if measured is not None:
    import os, uuid
    from functions.runtime import streaming
    from functions.runtime.streaming import StreamedResponse, StreamOutcome

    if measured.stream:  # as under warmstart's streaming runtime client, deployed
        streaming.mark_runtime_streams()
    from infra.local.gateway import function_url_event

    class Context:
        def __init__(self):
            self.aws_request_id = str(uuid.uuid4())
            self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "calibrate")
            self.function_version = "1"
            self.invoked_function_arn = (
                f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}:live")
            self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048"))
            self._deadline = time.monotonic() + 60.0

        def get_remaining_time_in_millis(self):
            return max(0, int((self._deadline - time.monotonic()) * 1000))

    raw = json.dumps(body).encode()
    target = os.environ.get(BASE_PATH_ENV, "") + measured.path

    def call():
        event = function_url_event(
            method=measured.method, target=target, body=raw,
            headers=[("content-type", "application/json")], source_ip="127.0.0.1",
            now_s=time.time(), request_id=str(uuid.uuid4()), url_id="calibrate" * 3 + "aaaaa",
            region="us-east-1")
        answer = handler(event, Context())
        if isinstance(answer, StreamedResponse):
            first = last = None
            size = count = 0
            for chunk in answer:
                last = time.perf_counter() * 1000.0
                first = last if first is None else first
                size, count = size + len(chunk), count + 1
            if answer.on_finish is not None:
                answer.on_finish(StreamOutcome(first, last, size, count, None))
            return answer.status_code, answer.headers.get("x-warmstart-path"), ""
        headers = {k.lower(): v for k, v in (answer.get("headers") or {}).items()}
        return (answer.get("statusCode"), headers.get("x-warmstart-path"),
                str(answer.get("body") or "")[:300])

    tracker = handler.admission.tracker(measured.name)
    try:
        for i in range(spec["route_calls"] + 1):
            before = tracker.count
            status, path, said = call()
            if status != 200 or path != "local":
                out["route_error"] = (f"{measured.method} {measured.path} answered {status} on "
                                      f"path {path!r}, not a local 200 (pass --body with a valid "
                                      "request of this route)" + (f": {said}" if said else ""))
                break
            if i and tracker.count > before:  # the first call warms the connections
                out["route_ms"].append(tracker.recent()[-1])
        out["route"] = out.get("route") or measured.name
    except Exception as exc:
        out["route_error"] = f"{type(exc).__name__}: {exc}"
    out["degrade_ms"] = []
    if out["route_error"] is None:  # the route's degraded answer, as admission times it
        from functions.runtime.admission.state import NO_HOOKS as _NO_HOOKS
        from functions.runtime.degradation import mark_degraded
        from functions.runtime.contract.levels import Level

        hooks = handler.admission.hooks.get(measured.name, _NO_HOOKS)
        hook = hooks.degraded_event if measured.stream else hooks.degraded
        if hook is not None:
            payload = hooks.validate(body) if hooks.validate is not None else body
            for i in range(spec["route_calls"] * 10 + 1):
                t0 = time.perf_counter() * 1000.0
                data = mark_degraded(hook(payload), level=Level.L0)
                if measured.stream:
                    streaming.sse_event(data, event="degraded")
                if i:
                    out["degrade_ms"].append(time.perf_counter() * 1000.0 - t0)
    if client is not None and measured.stream and out["route_error"] is None:
        from functions.runtime.admission.state import NO_HOOKS
        from functions.runtime.overflow_stream import open_overflow_stream

        hooks = handler.admission.hooks.get(measured.name, NO_HOOKS)
        if hooks.overflow_event is not None:
            payload = hooks.validate(body) if hooks.validate is not None else body
            for i in range(spec["route_calls"] + 1):
                t0 = time.perf_counter() * 1000.0
                response = open_overflow_stream(client, hooks, payload, feature=measured.name,
                                                deadline_ms=t0 + 10000.0)
                if response is None:
                    out["route_error"] = "the overflow stream did not start (see the log above)"
                    break
                first_ms = time.perf_counter() * 1000.0 - t0
                for _ in response:
                    pass
                if i:
                    out["stream_overflow_ms"].append(first_ms)
print(SAMPLE_PREFIX + json.dumps(out))
"""
#: The sample process's script: the contract's names, then the body.
CHILD = (f"BASE_PATH_ENV = {names.ENV_BASE_PATH!r}\nSAMPLE_PREFIX = {SAMPLE_PREFIX!r}\n"
         + _CHILD_BODY)


def nearest_rank_p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile (the toolkit's `LatencyTracker` rule), ms."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(0.95 * len(ordered))) - 1]


def default_path(cdk_json: Path, agent: str) -> Path:
    """``calibration/<agent>.json`` beside ``cdk.json``."""
    return cdk_json.resolve().parent / "calibration" / f"{agent}.json"


def _sample(handler: str, env: dict[str, str], body: Any, route: str | None,
            calls: int, timeout_s: float, route_calls: int = 0) -> dict[str, Any]:
    spec = json.dumps({"handler": handler, "body": body, "route": route, "calls": calls,
                       "route_calls": route_calls})
    proc = subprocess.run([sys.executable, "-c", CHILD, spec], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith(SAMPLE_PREFIX):
            sample: dict[str, Any] = json.loads(line.split("=", 1)[1])
            return sample
    raise RuntimeError(f"the agent's init failed in a fresh process (exit {proc.returncode}): "
                       f"{proc.stderr.strip()[-600:]}")


def calibrate_agent(agent: Any, *, samples: int, body: Any, route: str | None,
                    machine: str, overflow: bool = True, timeout_s: float = 120.0,
                    log: Any = None, endpoint_url: str | None = None,
                    endpoint_name: str | None = None) -> dict[str, Any]:
    """Measure ``agent`` (an `infra.config.AgentConfig`) and return the calibration document.

    ``endpoint_url``/``endpoint_name``: overflow to an endpoint already running (its
    ``/endpoints/<name>/invocations`` API) instead of starting the local GPU endpoint server.
    The route ``--body`` belongs to (``route``, else the first declared route that takes a
    body) is also called :data:`ROUTE_CALLS` times warm per sample; its local answer p95 (a
    stream: the app's first chunk) and, for a streaming route that overflows, its stream's
    first event p95 go into ``route_p95_ms`` / ``stream_overflow_p95_ms``. A route that does
    not answer a local 200 with that body leaves both out (said on ``log``).

    Raises
    ------
    RuntimeError
        An init failed, a stage failed to load, the GPU endpoint did not start, or the
        overflow calls failed (the message says which and why).
    """
    from infra.local.services import GpuEndpointService, LLMStubService, ToolStubService

    log = sys.stderr if log is None else log
    env = {**os.environ, **dict(agent.environment),
           "AWS_LAMBDA_INITIALIZATION_TYPE": "provisioned-concurrency",
           "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(agent.memory_mb),
           names.ENV_AGENT_NAME: agent.name, names.ENV_SLA_MS: str(agent.sla_ms),
           "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
           "AWS_ACCESS_KEY_ID": "calibrate", "AWS_SECRET_ACCESS_KEY": "calibrate",
           "ORT_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(REPO_ROOT)}
    env.pop(names.ENV_CALIBRATION, None)
    if agent.base_path:
        env[names.ENV_BASE_PATH] = agent.base_path
    endpoint = None
    services: list[Any] = []
    try:
        # the agent's downstreams as local up gives them (an empty *_TOOL_URL / *_LLM_URLS):
        # a route's answer is measured against a real server, the LLM stub at its published timing
        holder = SimpleNamespace(environment=dict(agent.environment))
        for service in (ToolStubService(), LLMStubService()):
            if not any(key.endswith(service.suffixes) and not str(value).strip()
                       for key, value in holder.environment.items()):
                continue
            service.start()
            services.append(service)
            env.update(service.function_environment(holder))  # type: ignore[arg-type]
        if endpoint_url is not None:  # an endpoint already running (a bench's, a real one)
            env[names.ENV_OVERFLOW_ENDPOINT_NAME] = endpoint_name or "calibrate"
            env[names.ENV_OVERFLOW_ENDPOINT_URL] = endpoint_url
        elif overflow and agent.overflow == "gpu":
            endpoint = GpuEndpointService()
            endpoint.start()
            env[names.ENV_OVERFLOW_ENDPOINT_NAME] = endpoint.endpoint_name
            env[names.ENV_OVERFLOW_ENDPOINT_URL] = endpoint.endpoint
    except BaseException:
        for service in services:
            service.stop()
        raise
    overflows = names.ENV_OVERFLOW_ENDPOINT_URL in env
    stages: dict[str, list[float]] = {}
    overflow_ms: list[float] = []
    route_ms: list[float] = []
    stream_overflow_ms: list[float] = []
    degrade_ms: list[float] = []
    measured_route: str | None = None
    route_note: str | None = None
    try:
        for i in range(samples):
            sample = _sample(agent.handler, env, body, route,
                             OVERFLOW_CALLS if overflows else 0, timeout_s, ROUTE_CALLS)
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
            if sample.get("route_error"):  # optional: the seeds stay for the routes
                route_note = route_note or str(sample["route_error"])
            else:
                route_ms += sample.get("route_ms", [])
                stream_overflow_ms += sample.get("stream_overflow_ms", [])
                degrade_ms += sample.get("degrade_ms", [])
                measured_route = sample.get("route") or measured_route
            print(f"calibrate {agent.name}: sample {i + 1}/{samples}: "
                  + ", ".join(f"{k} {v:.0f} ms" for k, v in sample["stages_ms"].items()),
                  file=log)
    finally:
        if endpoint is not None:
            endpoint.stop()
        for service in services:
            service.stop()
    if route_note is not None:
        print(f"calibrate {agent.name}: route latency not measured: {route_note}", file=log)
        route_ms, stream_overflow_ms, degrade_ms = [], [], []
    doc: dict[str, Any] = {
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
    if route_ms and measured_route is not None:
        doc["route_p95_ms"] = {measured_route: round(nearest_rank_p95(route_ms), 1)}
        doc["method"] += (f"; route {measured_route} p95 = nearest rank of {len(route_ms)} warm "
                          "local answers (a stream: the app's first chunk) with --body")
    if stream_overflow_ms and measured_route is not None:
        doc["stream_overflow_p95_ms"] = {
            measured_route: round(nearest_rank_p95(stream_overflow_ms), 1)}
        doc["method"] += (f"; stream overflow p95 = nearest rank of {len(stream_overflow_ms)} "
                          "first events of the endpoint's stream")
    if degrade_ms and measured_route is not None:
        # at least one GIL switch interval (5 ms by default): on a cold start the hook's thread
        # waits for the preload thread's hold of the GIL (sys.setswitchinterval's docs)
        floor_ms = sys.getswitchinterval() * 1000.0
        doc["degrade_p95_ms"] = round(max(nearest_rank_p95(degrade_ms), floor_ms), 3)
        doc["method"] += (f"; degrade p95 = nearest rank of {len(degrade_ms)} calls of route "
                          f"{measured_route}'s degraded hook (marked and encoded), at least "
                          f"the GIL switch interval ({floor_ms:.0f} ms)")
    return doc
