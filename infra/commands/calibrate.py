"""``warmstart calibrate``: measure the reference agent's init, restore and inference times.

Runs the real agent (``functions.agent.handler.handler``) on the local Lambda emulator
(``infra.local.emulator``: every execution environment is a real process) and writes the
calibration JSON that ``warmstart simulate`` charges cold starts with:

- ``init_ms``: what an on-demand cold start adds to the first answer: wall time of the first
  ``POST /v1/intent`` on a fresh environment minus the median warm answer (one fresh function,
  hence one fresh environment, per sample). The SLA is raised to 60 s for the measurement so
  the first request waits for the model instead of degrading.
- ``toolkit_init_ms``: the init phase itself (REPORT ``Init Duration``): until the toolkit can
  decide.
- ``restore_ms``: the same for a SnapStart restore (fork of the initialized template process
  with the after-restore hooks), minus the median warm answer.
- ``infer_ms``: warm invocations (REPORT ``Duration``).
- ``degraded_ms``: the lexical fallback (``functions.intent_model.model.lexical_classify``), in process.
- ``overflow_ms``: ``POST /invocations`` round trips to the local GPU endpoint server
  (``python -m functions.gpu_endpoint``, CPU provider here), when it starts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from functions.runtime.contract import environment as names
from infra.commands.common import command

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLER = "functions.agent.handler.handler"
TEXT = "what is the weather tomorrow"


JSON_SCHEMA = """\
--json prints the calibration as one JSON object on stdout (the file written has the same
content; `warmstart simulate --calibration FILE` reads it):
  init_ms, restore_ms, infer_ms, toolkit_init_ms, degraded_ms   {p50, p95}: float, ms
  overflow_ms      {p50, p95} or absent (--no-overflow)
  endpoint_concurrency  int or absent: requests one GPU endpoint instance answers at once
  method           str   how each timing was measured
  machine          str   host, CPUs, Python, load average at start
  measured_at      str   ISO 8601 UTC
  samples          int   --samples
"""

#: Lambda's memory range, MB (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
MEMORY_MB_RANGE = (128, 10240)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from infra.commands.common import output_file, positive_int

    parser.epilog = JSON_SCHEMA
    parser.add_argument("--samples", type=int, default=7,
                        help="fresh environments per measurement, >= 2 (default 7)")
    parser.add_argument("--warm", type=positive_int, default=5,
                        help="warm invocations per fresh environment (default 5)")
    parser.add_argument("--memory-mb", type=positive_int, default=2048,
                        help="function memory, MB (128 to 10240)")
    parser.add_argument("--out", type=output_file, default=None,
                        help="where to write the calibration JSON (simulate --calibration; "
                             "default OUT_DIR/calibration.json)")
    parser.add_argument("--no-overflow", action="store_true",
                        help="skip the GPU endpoint round trips")
    parser.add_argument("--json", action="store_true",
                        help="print the calibration JSON on stdout instead of a summary "
                             "(schema below)")
    group = parser.add_argument_group(
        "admission calibration (--agent)",
        "measure one cdk.json agent's preload stages and overflow calls instead, for the "
        "estimates its deployed function starts with (written to calibration/NAME.json beside "
        f"cdk.json; cdk synth puts it into {names.ENV_CALIBRATION})")
    group.add_argument("--agent", default=None, metavar="NAME",
                       help="the cdk.json agent to calibrate")
    group.add_argument("--body", default=None, metavar="JSON",
                       help="request body of an overflowing route, for the overflow calls "
                            "(default: {\"text\": \"what is the weather tomorrow\"})")
    group.add_argument("--route", default=None, metavar="NAME",
                       help="the overflowing route to call (default: the first one declared)")
    group.add_argument("--cdk-json", type=Path, default=Path("cdk.json"),
                       help="the app's cdk.json (default ./cdk.json)")


def intent_event(text: str = TEXT, now_ms: int | None = None) -> bytes:
    """An API Gateway HTTP API payload 2.0 event for ``POST /v1/intent``.

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/v1/intent",
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "host": "localhost"},
        "requestContext": {
            "accountId": "123456789012", "apiId": "local", "domainName": "localhost",
            "domainPrefix": "localhost",
            "http": {"method": "POST", "path": "/v1/intent", "protocol": "HTTP/1.1",
                     "sourceIp": "127.0.0.1", "userAgent": "warmstart-calibrate"},
            "requestId": str(uuid.uuid4()), "routeKey": "$default", "stage": "$default",
            "time": dt.datetime.now(dt.UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": now,
        },
        "body": json.dumps({"text": text}),
        "isBase64Encoded": False,
    }
    return json.dumps(event).encode()


def _check(result: Any, what: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(result.payload)
    if result.function_error or payload.get("statusCode") != 200:
        raise RuntimeError(f"{what}: the agent did not answer 200: {result.payload[:300]!r}")
    path = (payload.get("headers") or {}).get("x-warmstart-path")
    if path not in (None, "local"):
        raise RuntimeError(f"{what}: answered on path {path!r}, expected local")
    return payload


def _timed_invoke(emu: Any, name: str, qualifier: str | None = None) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = emu.invoke(name, intent_event(), qualifier=qualifier)
    return (time.perf_counter() - t0) * 1000.0, result


def measure_on_emulator(samples: int, warm: int, memory_mb: int,
                        log: Any = sys.stderr, quiet: bool = False) -> dict[str, list[float]]:
    """Cold, restored and warm answers of the reference agent on the local emulator.

    Progress goes to ``log`` (``infra.progress``: a bar on a terminal, plain lines otherwise,
    nothing when ``quiet``).

    Returns
    -------
    dict[str, list[float]]
        Samples in ms: ``cold_wall``, ``restore_wall``, ``warm_wall``, ``init_phase``,
        ``restore_phase``, ``warm_duration``.

    Raises
    ------
    RuntimeError
        The agent failed to answer, or an answer was not a cold start when one was expected.
    """
    from infra.local.emulator import Emulator, EmulatorConfig
    from infra.local.spec import AliasSpec, FunctionSpec

    env = {names.ENV_SLA_MS: "60000", "POWERTOOLS_SERVICE_NAME": "warmstart-agent",
           "POWERTOOLS_METRICS_NAMESPACE": "Warmstart"}
    out: dict[str, list[float]] = {k: [] for k in (
        "cold_wall", "restore_wall", "warm_wall", "init_phase", "restore_phase",
        "warm_duration")}
    from infra.progress import Progress

    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    try:
        with Emulator(EmulatorConfig(), log_stream=devnull) as emu, \
                Progress(samples, "calibrate on-demand", unit="env", stream=log,
                         quiet=quiet) as progress:
            for i in range(samples):
                name = f"calibrate-od-{i}"
                emu.add_function(FunctionSpec(name=name, handler=HANDLER, code_dir=REPO_ROOT,
                                              memory_mb=memory_mb, timeout_s=60.0,
                                              environment=env))
                wall, res = _timed_invoke(emu, name)
                _check(res, "on-demand cold start")
                if not res.cold_start or res.report is None:
                    raise RuntimeError("the first invocation of a new function was not cold")
                out["cold_wall"].append(wall)
                out["init_phase"].append(float(res.report.init_duration_ms or 0.0))
                for _ in range(warm):
                    wall, res = _timed_invoke(emu, name)
                    _check(res, "warm invocation")
                    out["warm_wall"].append(wall)
                    out["warm_duration"].append(float(res.report.duration_ms))
                progress.update(1, cold_ms=round(out["cold_wall"][-1]))
        # SnapStart: one snapshot; each sample restores a new environment (idle ones are
        # reclaimed at once so the next invocation restores again)
        cfg = EmulatorConfig(idle_timeout_s=0.05, reap_interval_s=0.05)
        with Emulator(cfg, log_stream=devnull) as emu, \
                Progress(samples, "calibrate SnapStart", unit="restore", stream=log,
                         quiet=quiet) as progress:
            emu.add_function(FunctionSpec(name="calibrate-ss", handler=HANDLER,
                                          code_dir=REPO_ROOT, memory_mb=memory_mb,
                                          timeout_s=60.0, environment=env, snap_start=True,
                                          aliases=(AliasSpec("live", "1"),)))
            for i in range(samples):
                deadline = time.monotonic() + 10.0
                while emu.environments("calibrate-ss") and time.monotonic() < deadline:
                    time.sleep(0.05)
                wall, res = _timed_invoke(emu, "calibrate-ss", qualifier="live")
                _check(res, "SnapStart restore")
                if res.init_type != "snap-start" or res.report is None or \
                        res.report.restore_duration_ms is None:
                    raise RuntimeError("expected a restored SnapStart environment")
                out["restore_wall"].append(wall)
                out["restore_phase"].append(float(res.report.restore_duration_ms))
                progress.update(1, restore_ms=round(wall))
    finally:
        devnull.close()
    return out


def measure_degraded(n: int = 300) -> list[float]:
    """Time of the lexical fallback answer, in process (ms per call)."""
    from functions.intent_model.model import lexical_classify, load_intents

    intents = load_intents()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        lexical_classify(TEXT, intents)
        times.append((time.perf_counter() - t0) * 1000.0)
    return times


#: Concurrency levels tried against the GPU endpoint server, and the latency bound: an
#: instance "answers k at once" while the p95 of k concurrent requests stays within
#: ``CONCURRENCY_SLOWDOWN`` x the single request's p95 (past the knee, requests only queue).
CONCURRENCY_LEVELS = (1, 2, 4, 8, 16)
CONCURRENCY_SLOWDOWN = 2.0


def endpoint_concurrency(p95_by_level: dict[int, float],
                         slowdown: float = CONCURRENCY_SLOWDOWN) -> int:
    """The most concurrent requests whose p95 is within ``slowdown`` x the p95 at level 1
    (levels tried in increasing order; the first level over the bound ends the search).

    Raises
    ------
    ValueError
        Without a measurement at level 1.
    """
    if 1 not in p95_by_level:
        raise ValueError("needs the p95 of single requests (level 1)")
    best = 1
    for level in sorted(p95_by_level):
        if p95_by_level[level] > slowdown * p95_by_level[1]:
            break
        best = level
    return best


def _concurrent_p95(client: Any, url: str, body: str, level: int, rounds: int) -> float:
    """p95 (ms) of ``rounds`` x ``level`` requests sent ``level`` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def one(_: int) -> float:
        t0 = time.perf_counter()
        client.post(f"{url}/invocations", content=body,
                    headers={"content-type": "application/json"}).raise_for_status()
        return (time.perf_counter() - t0) * 1000.0

    times: list[float] = []
    with ThreadPoolExecutor(level) as pool:
        for _ in range(rounds):
            times.extend(pool.map(one, range(level)))
    return float(statistics.quantiles(times, n=20, method="inclusive")[18])


def measure_overflow(n: int = 30, log: Any = sys.stderr,
                     concurrency_rounds: int = 0) -> tuple[list[float], int | None]:
    """Round trips ``POST /invocations`` to the local GPU endpoint server (ms), and with
    ``concurrency_rounds`` > 0 the concurrency one instance answers (:func:`endpoint_concurrency`
    over :data:`CONCURRENCY_LEVELS`, that many rounds each; else None).

    Raises
    ------
    RuntimeError
        The server did not start.
    """
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "functions.gpu_endpoint", "--host", "127.0.0.1", "--port", "0"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "ORT_DISABLE_TELEMETRY": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith(names.ENV_GPU_ENDPOINT_URL + "="):
            raise RuntimeError(f"GPU endpoint server did not start (first line {line!r})")
        url = line.split("=", 1)[1]
        body = json.dumps({"text": TEXT})
        times = []
        concurrency = None
        limits = httpx.Limits(max_connections=max(CONCURRENCY_LEVELS))
        with httpx.Client(timeout=30.0, limits=limits) as client:
            client.post(f"{url}/invocations", content=body,
                        headers={"content-type": "application/json"}).raise_for_status()
            for _ in range(n):
                t0 = time.perf_counter()
                client.post(f"{url}/invocations", content=body,
                            headers={"content-type": "application/json"}).raise_for_status()
                times.append((time.perf_counter() - t0) * 1000.0)
            if concurrency_rounds > 0:
                p95 = {k: _concurrent_p95(client, url, body, k, concurrency_rounds)
                       for k in CONCURRENCY_LEVELS}
                concurrency = endpoint_concurrency(p95)
                print("overflow endpoint concurrency p95 ms: " + ", ".join(
                    f"{k}: {v:.0f}" for k, v in p95.items()) + f" -> {concurrency} at once",
                    file=log)
        print(f"overflow endpoint {url}: {n} round trips", file=log)
        return times, concurrency
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}, load average at start "
            f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}")


@command("warmstart calibrate")
def run(args: argparse.Namespace) -> int:
    from infra.commands.common import CommandError, UsageError, out_dir
    from warmers.simulator.calibration import Calibration, percentile_timing

    if args.samples < 2:
        raise UsageError(f"--samples must be an integer >= 2, got {args.samples}")
    if args.warm < 1:
        raise UsageError(f"--warm must be a positive integer, got {args.warm}")
    if not MEMORY_MB_RANGE[0] <= args.memory_mb <= MEMORY_MB_RANGE[1]:
        raise UsageError(f"--memory-mb must be from {MEMORY_MB_RANGE[0]} to "
                         f"{MEMORY_MB_RANGE[1]} (Lambda's range), got {args.memory_mb}")
    if args.agent is not None:
        return _run_admission(args)
    out = args.out or out_dir(args) / "calibration.json"
    try:
        import infra.local.emulator  # noqa: F401
    except ImportError as exc:
        raise CommandError(f"the local emulator is not available ({exc})") from exc
    machine = _machine()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    try:
        m = measure_on_emulator(args.samples, args.warm, args.memory_mb,
                                quiet=bool(getattr(args, "quiet", False)))
        degraded = measure_degraded()
        overflow, concurrency = (None, None) if args.no_overflow else measure_overflow(
            concurrency_rounds=10)
    except RuntimeError as exc:
        raise CommandError(str(exc)) from exc
    warm_median = statistics.median(m["warm_wall"])
    init = [max(0.0, c - warm_median) for c in m["cold_wall"]]
    restore = [max(0.0, c - warm_median) for c in m["restore_wall"]]
    cal = Calibration(
        init_ms=percentile_timing(init),
        restore_ms=percentile_timing(restore),
        infer_ms=percentile_timing(m["warm_duration"]),
        toolkit_init_ms=percentile_timing(m["init_phase"]),
        overflow_ms=percentile_timing(overflow) if overflow else None,
        degraded_ms=percentile_timing(degraded),
        endpoint_concurrency=concurrency,
        method=(
            "warmstart calibrate: reference agent (functions.agent.handler.handler, "
            f"{args.memory_mb} MB) on the local emulator (infra.local.emulator, real processes); "
            f"init = first POST /v1/intent on a fresh on-demand environment minus the median "
            f"warm answer ({warm_median:.1f} ms), {args.samples} fresh environments; restore = "
            f"first answer of a restored SnapStart environment (fork of the initialized "
            f"template) minus the same, {args.samples} restores; infer = REPORT Duration of "
            f"{len(m['warm_duration'])} warm invocations; toolkit_init = REPORT Init Duration; "
            "degraded = lexical_classify in process; overflow = POST /invocations round trips "
            "to the local GPU endpoint server (CPU provider); endpoint_concurrency = the most "
            f"of {list(CONCURRENCY_LEVELS)} concurrent requests whose p95 stays within "
            f"{CONCURRENCY_SLOWDOWN:g}x the single request's (10 rounds each)"
            + (" (not measured: --no-overflow)" if not overflow else "")
        ),
        machine=machine,
        measured_at=started,
        samples=args.samples,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(cal.to_json(), encoding="utf-8")
    if args.json:
        print(cal.to_json(), end="")
    else:
        print(f"init p50 {cal.init_ms.p50:.0f} ms / p95 {cal.init_ms.p95:.0f} ms, restore p50 "
              f"{cal.restore_ms.p50:.0f} ms, infer p50 {cal.infer_ms.p50:.1f} ms, degraded p50 "
              f"{cal.degraded_ms.p50:.3f} ms"
              + (f", overflow p50 {cal.overflow_ms.p50:.0f} ms" if cal.overflow_ms else ""))
    print(f"wrote {out} (warmstart simulate --calibration {out})", file=sys.stderr)
    return 0


def _run_admission(args: argparse.Namespace) -> int:
    """``--agent NAME``: write that agent's admission calibration."""
    from infra.commands.calibrate_admission import calibrate_agent, default_path
    from infra.commands.common import CommandError, UsageError
    from infra.config import StackConfigError, load_config

    try:
        agent = load_config(args.cdk_json).agent(args.agent)
    except StackConfigError as exc:
        raise UsageError(str(exc)) from exc
    raw = args.body if args.body is not None else json.dumps({"text": TEXT})
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"--body is not JSON: {exc}") from exc
    out = args.out or default_path(args.cdk_json, agent.name)
    try:
        doc = calibrate_agent(agent, samples=args.samples, body=body, route=args.route,
                              machine=_machine(), overflow=not args.no_overflow)
    except RuntimeError as exc:
        raise CommandError(str(exc)) from exc
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2) + "\n"
    out.write_text(text, encoding="utf-8")
    if args.json:
        print(text, end="")
    else:
        stages = ", ".join(f"{k} {v:.0f}" for k, v in doc["stage_p95_ms"].items())
        overflow = doc["overflow_p95_ms"]
        routes = "".join(f"; route {k} p95 {v:.0f} ms" for k, v in doc.get("route_p95_ms", {}).items())
        routes += "".join(f"; route {k} overflow stream first event p95 {v:.0f} ms"
                          for k, v in doc.get("stream_overflow_p95_ms", {}).items())
        if doc.get("degrade_p95_ms") is not None:
            routes += f"; degraded answer p95 {doc['degrade_p95_ms']:.1f} ms"
        print(f"agent {agent.name} at {agent.memory_mb} MB: stage p95 ms: {stages}; overflow "
              f"p95 {'not measured' if overflow is None else f'{overflow:.0f} ms'}{routes}")
    print(f"wrote {out} (cdk synth puts it into {names.ENV_CALIBRATION})", file=sys.stderr)
    return 0
