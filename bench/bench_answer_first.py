"""Answer first, finish after (issue 10): a cold first answer at overflow speed, the preload
finished in the post-response phase, at SLA 2000, 1000 and 500 ms.

Every sample is a new function in the local Lambda emulator (``infra.local.emulator``): a new
execution environment, a real process that speaks the Runtime and Extensions APIs, running the
reference agent (``functions.agent.handler``) with the local GPU endpoint server
(``python -m functions.gpu_endpoint``, CPU provider) reached through the toolkit's boto3
``sagemaker-runtime`` client. The arrival is stamped just before the Invoke
(``requestContext.timeEpoch``), so the first answer's latency includes the process start and
the init phase, as a Lambda cold start's does. The function carries an admission calibration
(``WARMSTART_CALIBRATION``) measured in the same run by ``warmstart calibrate --agent intent``'s
code (`infra.commands.calibrate_admission`), as ``cdk synth`` would deploy it.

Per SLA and mode (``after``: the default, the preload goes on after the response through the
toolkit's internal extension; ``before``: the answer waits for the preload with the SLA's
slack, the behaviour before issue 10):

- first answer: latency from arrival, path (overflow / degraded / local), within the SLA;
- billed duration of the cold invocation (REPORT ``Billed Duration``: the post-response phase
  is billed) and its ``PostRuntimeExtensionsDuration``;
- the next request, sent once the first invocation's post-response phase has ended (at the
  earliest :data:`NEXT_AFTER_S` after the first answer): served locally by the same
  environment?

The baseline measured in the same run: the warm overflow call (``InvokeEndpoint`` through
boto3 from this process to the same endpoint, median of :data:`WARM_CALLS`).

Targets (issue 10): 100 % of first answers within the SLA, 100 % overflow answers, first-answer
p50 <= 2.5x the warm overflow-call p50, the next request local in >= 90 % of samples.

Run: ``.venv/bin/python -m bench answer_first [--runs N] [--sla-ms MS ...]``. Writes
``bench/results/answer_first.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import command_line, figure, machine, ratio, table, write_result

HANDLER = "functions.agent.handler.handler"
DEFAULT_RUNS = 6
DEFAULT_SLAS_MS = (2000.0, 1000.0, 500.0)
MODES = ("after", "before")
#: The next request is sent once the first invocation's post-response phase has ended, and at
#: the earliest this long after the first answer (issue 10: "after that environment's
#: post-response phase has ended (say 1.5 s after the first answer)").
NEXT_AFTER_S = 1.5
WARM_CALLS = 30
TEXTS = ["where is my package", "I want a refund for my order", "please cancel my subscription",
         "I was charged twice on my credit card", "hello there"]


def intent_event(text: str, arrival_ms: float) -> bytes:
    """An API Gateway HTTP API (payload 2.0) event for ``POST /v1/intent``."""
    return json.dumps({
        "version": "2.0", "routeKey": "$default", "rawPath": "/v1/intent", "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/v1/intent",
                                    "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                                    "userAgent": "bench"},
                           "requestId": "bench", "routeKey": "$default", "stage": "$default",
                           "timeEpoch": int(arrival_ms)},
        "body": json.dumps({"text": text}), "isBase64Encoded": False}).encode()


def warm_overflow_ms(endpoint_url: str, endpoint_name: str, n: int = WARM_CALLS) -> list[float]:
    """``InvokeEndpoint`` round trips through boto3 from a warm client, ms."""
    import boto3

    client = boto3.client("sagemaker-runtime", endpoint_url=endpoint_url, region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
    body = json.dumps({"text": TEXTS[0]}).encode()
    client.invoke_endpoint(EndpointName=endpoint_name, Body=body, ContentType="application/json")
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.invoke_endpoint(EndpointName=endpoint_name, Body=body,
                               ContentType="application/json")["Body"].read()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def one_sample(emu: Any, name: str, env: dict[str, str], text: str,
               finals: dict[str, Any]) -> dict[str, Any]:
    """One fresh function: its cold first answer, then the next request."""
    from infra.local.spec import FunctionSpec

    emu.add_function(FunctionSpec(name=name, handler=HANDLER, code_dir=REPO, memory_mb=2048,
                                  timeout_s=30, environment=env))
    arrival = time.time() * 1000.0
    t0 = time.perf_counter()
    cold = emu.invoke(name, intent_event(text, arrival))
    first_ms = (time.perf_counter() - t0) * 1000.0
    answered = time.monotonic()
    payload = json.loads(cold.payload)
    headers = payload.get("headers") or {}
    # the next request goes once the first invocation's post-response phase has ended (its
    # final REPORT: the environment is idle again), and at the earliest NEXT_AFTER_S after the
    # first answer
    deadline = answered + 30.0
    while cold.request_id not in finals and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(max(0.0, answered + NEXT_AFTER_S - time.monotonic()))
    next_after_ms = (time.monotonic() - answered) * 1000.0
    nxt = emu.invoke(name, intent_event(TEXTS[1], time.time() * 1000.0))
    nxt_headers = json.loads(nxt.payload).get("headers") or {}
    final = finals.get(cold.request_id)
    report = final.report if final is not None else cold.report
    return {
        "first_ms": first_ms, "status": payload.get("statusCode"),
        "path": headers.get("x-warmstart-path"), "cold_start": cold.cold_start,
        "server_timing": headers.get("server-timing", ""),
        "billed_ms": report.billed_duration_ms if report else None,
        "post_response_ms": report.post_runtime_extensions_duration_ms if report else None,
        "next_path": nxt_headers.get("x-warmstart-path"),
        "next_same_environment": nxt.environment_id == cold.environment_id,
        "next_cold": nxt.cold_start,
        "next_sent_after_ms": next_after_ms,
    }


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench answer_first", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="samples per SLA and mode")
    parser.add_argument("--sla-ms", type=float, nargs="+", default=list(DEFAULT_SLAS_MS))
    parser.add_argument("--calibration-samples", type=int, default=5)
    args, _ = parser.parse_known_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")

    from infra.commands.calibrate import _machine
    from infra.commands.calibrate_admission import calibrate_agent
    from infra.config import load_config
    from infra.local.emulator import Emulator, EmulatorConfig
    from infra.local.services import GpuEndpointService

    agent = load_config(REPO / "cdk.json").agent("intent")
    print("calibrating the intent agent (admission) ...", file=sys.stderr)
    cal = calibrate_agent(agent, samples=args.calibration_samples,
                          body={"text": TEXTS[0]}, route=None, machine=_machine())
    cal = {k: v for k, v in cal.items() if k != "method"}
    # the emulator's functions run at 2048 MB like the cdk.json agent
    cal["memory_mb"] = 2048
    gpu = GpuEndpointService()
    gpu.start()
    rows: list[dict[str, Any]] = []
    try:
        warm = warm_overflow_ms(gpu.endpoint, gpu.endpoint_name)
        warm_p50 = p50(warm)
        devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
        with Emulator(EmulatorConfig(idle_timeout_s=120.0), log_stream=devnull) as emu:
            finals: dict[str, Any] = {}
            emu.add_listener(lambda record: finals.__setitem__(record.request_id, record))
            i = 0
            for sla in args.sla_ms:
                for mode in MODES:
                    for run in range(args.runs):
                        i += 1
                        env = {"WARMSTART_SLA_MS": str(int(sla)), "WARMSTART_FINISH_PRELOAD": mode,
                               "WARMSTART_OVERFLOW_ENDPOINT_NAME": gpu.endpoint_name,
                               "WARMSTART_OVERFLOW_ENDPOINT_URL": gpu.endpoint,
                               "WARMSTART_CALIBRATION": json.dumps(cal),
                               "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                               "AWS_REGION": "us-east-1", "POWERTOOLS_SERVICE_NAME": "bench"}
                        sample = one_sample(emu, f"af-{i}", env, TEXTS[run % len(TEXTS)], finals)
                        sample.update(sla_ms=sla, mode=mode)
                        rows.append(sample)
                        print(f"sla {sla:.0f} {mode} #{run + 1}: first {sample['first_ms']:.0f} ms "
                              f"{sample['path']}, billed {sample['billed_ms']} ms, next "
                              f"{sample['next_path']}", file=sys.stderr)
        devnull.close()
    finally:
        gpu.stop()

    figures, ratios, table_rows = [figure("warm overflow call p50", warm_p50, "ms", n=len(warm))], [], []
    for sla in args.sla_ms:
        for mode in MODES:
            got = [r for r in rows if r["sla_ms"] == sla and r["mode"] == mode]
            firsts = [r["first_ms"] for r in got]
            within = sum(1 for r in got if r["first_ms"] <= sla and r["status"] == 200)
            overflow = sum(1 for r in got if r["path"] == "overflow")
            local_next = sum(1 for r in got if r["next_path"] == "local" and r["next_same_environment"])
            billed = [r["billed_ms"] for r in got if r["billed_ms"] is not None]
            post = [r["post_response_ms"] for r in got if r["post_response_ms"] is not None]
            n = len(got)
            tag = f"SLA {sla:.0f} ms, {mode}"
            figures += [figure(f"first answer p50 ({tag})", p50(firsts), "ms", n=n),
                        figure(f"within SLA ({tag})", 100.0 * within / n, "%", n=n),
                        figure(f"overflow answers ({tag})", 100.0 * overflow / n, "%", n=n),
                        figure(f"next request local, same environment ({tag})",
                               100.0 * local_next / n, "%", n=n),
                        figure(f"billed duration p50 ({tag})", p50(billed), "ms", n=len(billed)),
                        figure(f"post-response phase p50 ({tag})", p50(post), "ms", n=len(post))]
            if mode == "after":
                ratios += [ratio(f"first answer p50 / warm overflow call p50 ({tag})",
                                 p50(firsts) / warm_p50, 2.5),
                           ratio(f"within SLA ({tag})", within / n, 1.0, op=">="),
                           ratio(f"overflow answers ({tag})", overflow / n, 1.0, op=">="),
                           ratio(f"next request local ({tag})", local_next / n, 0.9, op=">=")]
            table_rows.append([f"{sla:.0f}", mode, str(n), f"{p50(firsts):.0f}",
                               f"{p50(firsts) / warm_p50:.1f}x", f"{within}/{n}",
                               f"{overflow}/{n}", f"{local_next}/{n}", f"{p50(billed):.0f}",
                               f"{p50(post):.0f}"])
    met = all(r["met"] for r in ratios)
    md = "\n".join([
        "# Answer first, finish after: cold first answers at overflow speed",
        "",
        f"Machine: {machine()}. Command: `{command_line(argv, module='bench/bench_answer_first.py')}`.",
        (f"Warm overflow call (boto3 InvokeEndpoint, local GPU endpoint, CPU): p50 {warm_p50:.1f} "
         f"ms (n={len(warm)}). Admission calibration measured in this run: stage p95 "
         + ", ".join(f"{k} {v:.0f} ms" for k, v in cal["stage_p95_ms"].items())
         + f", overflow p95 {cal['overflow_p95_ms']} ms."),
        "",
        table(["SLA ms", "mode", "n", "first p50 ms", "/ warm overflow", "within SLA",
               "overflow", "next local", "billed p50 ms", "post-response p50 ms"], table_rows),
        "",
        ("`after` (default): the answer leaves when the runtime posts it; the toolkit's internal "
         "extension keeps the environment thawed until the model is loaded (billed: "
         "PostRuntimeExtensionsDuration). `before`: the answer waits for the preload with the "
         "SLA's slack. The next request is sent once the first invocation's post-response "
         "phase has ended (its final REPORT), at the earliest 1.5 s after the first answer."),
        "",
        (f"Targets (after): {'all met' if met else 'NOT all met'}: "
         + "; ".join(f"{r['name']} = {r['value']:.2f} ({r['target']}: {'met' if r['met'] else 'missed'})"
                    for r in ratios)),
    ])
    write_result("answer_first", md, figures, ratios=ratios,
                 command=command_line(argv, module="bench/bench_answer_first.py"),
                 reduced=None if args.runs >= DEFAULT_RUNS else f"--runs {args.runs}",
                 extra={"samples": rows, "calibration": cal, "warm_overflow_ms": warm})
    print(md)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
