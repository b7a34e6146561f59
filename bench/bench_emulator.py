"""The local Lambda emulator with the reference agent, as ratios measured in one run.

1. **SnapStart restore vs full init.** The agent (``functions.agent.handler.handler``) under
   ``provisioned-concurrency`` init (web stack + ONNX model loaded before the init ends: a full
   init) against SnapStart restores (a fork of the initialized template process plus the
   after-restore hooks). Target: median restore <= 5% of median full init. Also the first
   ``/v1/intent`` response of a fresh environment of each kind, and of an on-demand one.
2. **Warm throughput** of ``POST /v1/intent`` through the gateway (HTTP -> payload 2.0 event ->
   emulator -> execution environment -> Mangum -> FastAPI) against the same FastAPI app served
   by uvicorn directly, closed loop, 1 client (and 4 clients for information), interleaved
   rounds. Target: gateway/uvicorn >= 0.5 with 1 client.
3. **20 requests at once from zero** through the gateway (on-demand, and SnapStart): cold
   starts, init/restore times, status codes, p50/p99 latency.
4. **Runtime interface client**: AWS's ``awslambdaric`` against the stdlib bootstrap, both
   speaking the environment's Runtime API: cold init + first invoke from zero and the warm
   invoke round trip, for a trivial handler and for the reference agent (first
   ``/v1/intent`` through the gateway). No target: it decides which client environments run.

Run: ``.venv/bin/python -m bench emulator`` (``--rounds N``, ``--seconds S``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench import REPO_ROOT, command_line, figure, machine, now_utc, ratio, table, write_result
from infra.local.emulator import Emulator, EmulatorConfig, RuntimeClientName
from infra.local.gateway import Gateway
from infra.local.spec import AliasSpec, FunctionSpec

HANDLER = "functions.agent.handler.handler"
TARGET_RESTORE_RATIO = 0.05
TARGET_THROUGHPUT_RATIO = 0.5
BODY = {"text": "I want a refund for my order, it arrived broken"}
UVICORN_APP = """
import os, sys, uvicorn
os.environ["AWS_LAMBDA_INITIALIZATION_TYPE"] = "provisioned-concurrency"
import functions.agent.handler as h
app = h.handler.preload.result("web").app   # the FastAPI app the toolkit's adapter wraps
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def _agent(name: str, **kwargs: Any) -> FunctionSpec:
    return FunctionSpec(name=name, handler=HANDLER, code_dir=REPO_ROOT, runtime="python3.12",
                        memory_mb=2048, timeout_s=30, aliases=kwargs.pop("aliases", (AliasSpec("live", "1"),)),
                        environment={"POWERTOOLS_SERVICE_NAME": "warmstart-agent",
                                     "POWERTOOLS_METRICS_NAMESPACE": "Warmstart"}, **kwargs)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _intent(url: str, client: httpx.Client) -> tuple[int, float]:
    """-> (HTTP status, or -1 for a transport error; latency ms)."""
    t0 = time.perf_counter()
    try:
        status = client.post(f"{url}/v1/intent", json=BODY).status_code
    except httpx.TransportError:
        status = -1
    return status, (time.perf_counter() - t0) * 1000.0


# ---- 1. restore vs full init -------------------------------------------------------------
def bench_restore(log: Any, rounds: int) -> dict[str, Any]:
    config = EmulatorConfig(idle_timeout_s=1e-6, reap_interval_s=3600.0, pc_allocation_delay_s=0.0)
    with Emulator(config, log_stream=log) as emu:
        emu.add_function(_agent("agent-pc"))
        emu.add_function(_agent("agent-snap", snap_start=True))
        emu.add_function(_agent("agent-od"))
        snapshot_init_ms = emu.snapshot_init_ms("agent-snap")
        gw_pc, gw_snap, gw_od = (Gateway(emu, n, "live") for n in ("agent-pc", "agent-snap", "agent-od"))
        for gw in (gw_pc, gw_snap, gw_od):
            gw.start()
        full_init, restore, first_pc, first_snap, first_od = [], [], [], [], []
        od_statuses: list[int] = []
        try:
            with httpx.Client(timeout=60) as client:
                for _ in range(rounds):
                    # full init: one provisioned environment, allocated now, then its first request
                    emu.put_provisioned_concurrency("agent-pc", "live", 1)
                    emu.wait_provisioned_ready("agent-pc", "live", timeout_s=120)
                    full_init += [e["init_duration_ms"] for e in emu.environments("agent-pc")
                                  if e["provisioned_for"] == "live"]
                    first_pc.append(_intent(gw_pc.endpoint, client)[1])
                    emu.delete_provisioned_concurrency("agent-pc", "live")
                    # SnapStart: the first request of a fresh environment restores a fork
                    status, ms = _intent(gw_snap.endpoint, client)
                    first_snap.append(ms)
                    restore += [e["restore_duration_ms"] for e in emu.environments("agent-snap")]
                    # on-demand: short init, the model loads in the background during the request
                    status, ms = _intent(gw_od.endpoint, client)
                    first_od.append(ms)
                    od_statuses.append(status)
                    emu.reclaim_idle()  # every environment idle -> next round starts from zero
        finally:
            for gw in (gw_pc, gw_snap, gw_od):
                gw.stop()
    return {"snapshot_init_ms": snapshot_init_ms, "full_init_ms": full_init, "restore_ms": restore,
            "first_pc_ms": first_pc, "first_snap_ms": first_snap, "first_od_ms": first_od,
            "od_statuses": od_statuses}


# ---- 2. warm throughput ----------------------------------------------------------------------
def _closed_loop(url: str, clients: int, seconds: float) -> tuple[float, list[float], int]:
    stop = time.perf_counter() + seconds
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(timeout=30) as client:
            while time.perf_counter() < stop:
                status, ms = _intent(url, client)
                with lock:
                    latencies.append(ms)
                    if status != 200:
                        errors[0] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies) / (time.perf_counter() - t0), latencies, errors[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_throughput(log: Any, rounds: int, seconds: float) -> dict[str, Any]:
    port = _free_port()
    env = dict(os.environ, POWERTOOLS_SERVICE_NAME="warmstart-agent")
    uv = subprocess.Popen([sys.executable, "-c", UVICORN_APP, str(port)], cwd=REPO_ROOT, env=env,
                          stdout=log, stderr=log)
    uv_url = f"http://127.0.0.1:{port}"
    results: dict[str, list[float]] = {"gateway_1": [], "uvicorn_1": [], "gateway_4": [], "uvicorn_4": []}
    errors = {k: 0 for k in results}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.post(f"{uv_url}/v1/intent", json=BODY, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or uv.poll() is not None:
                raise RuntimeError("uvicorn baseline did not start")
            time.sleep(0.2)
        with Emulator(EmulatorConfig(pc_allocation_delay_s=0.0), log_stream=log) as emu:
            emu.add_function(_agent("agent", aliases=(AliasSpec("live", "1", 4),)))
            gw = Gateway(emu, "agent", "live")
            gw.start()
            try:
                for url in (gw.endpoint, uv_url):  # warm both paths
                    _closed_loop(url, 4, 1.0)
                for _ in range(rounds):
                    for clients in (1, 4):
                        for name, url in (("gateway", gw.endpoint), ("uvicorn", uv_url)):
                            rps, _lat, errs = _closed_loop(url, clients, seconds)
                            results[f"{name}_{clients}"].append(rps)
                            errors[f"{name}_{clients}"] += errs
            finally:
                gw.stop()
    finally:
        uv.terminate()
        uv.wait(timeout=10)
    return {"rps": results, "errors": errors}


# ---- 3. burst from zero ------------------------------------------------------------------------
def bench_burst(log: Any, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, kwargs in (("on-demand", {}), ("snapstart", {"snap_start": True})):
        with Emulator(EmulatorConfig(), log_stream=log) as emu:
            emu.add_function(_agent("agent", **kwargs))
            gw = Gateway(emu, "agent", "live")
            gw.start()
            try:
                barrier = threading.Barrier(n)

                def call(_: int, url: str = gw.endpoint,
                         barrier: threading.Barrier = barrier) -> tuple[int, float]:
                    with httpx.Client(timeout=60) as client:
                        barrier.wait()
                        return _intent(url, client)

                t0 = time.perf_counter()
                with ThreadPoolExecutor(n) as pool:
                    results = list(pool.map(call, range(n)))
                wall_s = time.perf_counter() - t0
                envs = emu.environments("agent")
            finally:
                gw.stop()
        latencies = [ms for _s, ms in results]
        statuses: dict[int, int] = {}
        for status, _ms in results:
            statuses[status] = statuses.get(status, 0) + 1
        key = "restore_duration_ms" if kwargs else "init_duration_ms"
        inits = [e[key] for e in envs if e[key] is not None]
        out[label] = {"environments": len(envs), "statuses": statuses, "wall_s": wall_s,
                      "p50_ms": _pct(latencies, 0.5), "p99_ms": _pct(latencies, 0.99),
                      "max_ms": max(latencies), "init_median_ms": statistics.median(inits),
                      "init_max_ms": max(inits), "init_kind": key.removesuffix("_duration_ms")}
    return out


# ---- 4. runtime interface client -------------------------------------------------------------
CLIENTS: tuple[RuntimeClientName, ...] = ("awslambdaric", "bootstrap")
TRIVIAL = "def handler(event, context):\n    return {'ok': True, 'event': event}\n"


def bench_runtime_clients(log: Any, rounds: int, warm_n: int) -> dict[str, Any]:
    """Per client: cold (init + first invoke, from zero) and warm round trips, interleaved."""
    out: dict[str, Any] = {c: {"cold_ms": [], "init_ms": [], "warm_ms": [], "agent_first_ms": [],
                               "agent_init_ms": [], "agent_statuses": []} for c in CLIENTS}
    with tempfile.TemporaryDirectory() as code:
        with open(os.path.join(code, "trivial.py"), "w") as f:
            f.write(TRIVIAL)
        trivial = FunctionSpec(name="trivial", handler="trivial.handler", code_dir=Path(code),
                               aliases=(AliasSpec("live", "1"),))
        for _ in range(rounds):
            for client_name in CLIENTS:
                config = EmulatorConfig(runtime_client=client_name, reap_interval_s=3600.0)
                with Emulator(config, log_stream=log) as emu:
                    emu.add_function(trivial)
                    t0 = time.perf_counter()
                    first = emu.invoke("trivial", b'{"n": 0}', qualifier="live")
                    out[client_name]["cold_ms"].append((time.perf_counter() - t0) * 1000.0)
                    assert first.function_error is None and first.report is not None, first.payload
                    out[client_name]["init_ms"].append(first.report.init_duration_ms)
                    for i in range(warm_n):
                        t0 = time.perf_counter()
                        res = emu.invoke("trivial", b'{"n": 1}', qualifier="live")
                        out[client_name]["warm_ms"].append((time.perf_counter() - t0) * 1000.0)
                        assert not res.cold_start and res.function_error is None, (i, res.payload)
                    emu.add_function(_agent("agent"))
                    gw = Gateway(emu, "agent", "live")
                    gw.start()
                    try:
                        with httpx.Client(timeout=60) as http_client:
                            status, ms = _intent(gw.endpoint, http_client)
                    finally:
                        gw.stop()
                    out[client_name]["agent_first_ms"].append(ms)
                    out[client_name]["agent_statuses"].append(status)
                    out[client_name]["agent_init_ms"] += [e["init_duration_ms"] for e in emu.environments("agent")]
    return out


def _fmt(x: float) -> str:
    return f"{x:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="per throughput measurement")
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--warm", type=int, default=300, help="warm invokes per runtime client and round")
    args, _ = parser.parse_known_args(argv)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    started = now_utc()
    with tempfile.TemporaryFile("w+") as log:
        restore = bench_restore(log, args.rounds)
        throughput = bench_throughput(log, args.rounds, args.seconds)
        burst = bench_burst(log, args.burst)
        clients = bench_runtime_clients(log, args.rounds, args.warm)
    full = statistics.median(restore["full_init_ms"])
    rest = statistics.median(restore["restore_ms"])
    restore_ratio = rest / full
    rps = {k: statistics.median(v) for k, v in throughput["rps"].items()}
    tp_ratio = rps["gateway_1"] / rps["uvicorn_1"]
    tp_ratio_4 = rps["gateway_4"] / rps["uvicorn_4"]
    ratios = [ratio("SnapStart restore / full init (medians)", restore_ratio, TARGET_RESTORE_RATIO),
              ratio("gateway / uvicorn throughput, 1 client (medians)", tp_ratio,
                    TARGET_THROUGHPUT_RATIO, op=">=")]
    ok = all(r["met"] for r in ratios)

    t1 = table([f"measure (median of {args.rounds})", "ms"], [
        ["full init (provisioned-concurrency init: web stack + model)", _fmt(full)],
        ["SnapStart snapshot init (same work, paid at publish)", _fmt(restore["snapshot_init_ms"])],
        ["SnapStart restore (fork + after-restore hooks)", _fmt(rest)],
        ["first /v1/intent, provisioned environment (after its init)", _fmt(statistics.median(restore["first_pc_ms"]))],
        ["first /v1/intent, SnapStart restore from zero", _fmt(statistics.median(restore["first_snap_ms"]))],
        [f"first /v1/intent, on-demand cold start from zero (HTTP statuses {restore['od_statuses']})",
         _fmt(statistics.median(restore["first_od_ms"]))],
    ])
    t2 = table(["path", "clients", "req/s (median)", "errors"], [
        [name, str(c), _fmt(rps[f"{name}_{c}"]), str(throughput["errors"][f"{name}_{c}"])]
        for c in (1, 4) for name in ("gateway", "uvicorn")])
    t3 = table(["strategy", "environments", "statuses", "init/restore median ms", "max ms",
                "p50 ms", "p99 ms", "wall s"], [
        [label, str(b["environments"]), json.dumps(b["statuses"]),
         f"{_fmt(b['init_median_ms'])} ({b['init_kind']})", _fmt(b["init_max_ms"]),
         _fmt(b["p50_ms"]), _fmt(b["p99_ms"]), _fmt(b["wall_s"])] for label, b in burst.items()])
    med = {c: {k: statistics.median(v) for k, v in clients[c].items()
               if k != "agent_statuses" and v} for c in CLIENTS}
    p99 = {c: _pct(clients[c]["warm_ms"], 0.99) for c in CLIENTS}
    t4 = table(["runtime client", f"cold: init + first invoke, ms (median of {args.rounds})",
                "init phase, ms", f"warm invoke round trip, ms (median of {args.rounds * args.warm})",
                "warm p99, ms", "agent: first /v1/intent from zero, ms", "agent init phase, ms",
                "agent statuses"], [
        [c, _fmt(med[c]["cold_ms"]), _fmt(med[c]["init_ms"]), f"{med[c]['warm_ms']:.3f}",
         f"{p99[c]:.3f}", _fmt(med[c]["agent_first_ms"]), _fmt(med[c]["agent_init_ms"]),
         json.dumps(clients[c]["agent_statuses"])] for c in CLIENTS])
    ric_vs_bootstrap_cold = med["awslambdaric"]["cold_ms"] / med["bootstrap"]["cold_ms"]
    ric_vs_bootstrap_warm = med["awslambdaric"]["warm_ms"] / med["bootstrap"]["warm_ms"]
    verdict = (f"restore/full init = {restore_ratio:.3%} (target <= {TARGET_RESTORE_RATIO:.0%}): "
               f"{'met' if restore_ratio <= TARGET_RESTORE_RATIO else 'MISSED'}; "
               f"gateway/uvicorn throughput (1 client) = {tp_ratio:.2f} (target >= {TARGET_THROUGHPUT_RATIO}): "
               f"{'met' if tp_ratio >= TARGET_THROUGHPUT_RATIO else 'MISSED'}; with 4 clients {tp_ratio_4:.2f}; "
               f"awslambdaric / bootstrap: cold {ric_vs_bootstrap_cold:.2f}, warm round trip "
               f"{ric_vs_bootstrap_warm:.2f}")
    command = command_line(["emulator", "--rounds", str(args.rounds), "--seconds", f"{args.seconds:g}",
                            "--burst", str(args.burst), "--warm", str(args.warm)])
    header = (f"Machine: {machine()}  \nRun: {started} (UTC); rounds {args.rounds}, "
              f"{args.seconds:g} s per throughput measurement; reference agent `{HANDLER}`.  \n"
              f"Reproduce: `{command}`")
    note1 = ("Full init = the init phase of a provisioned-concurrency environment (interpreter "
             "start, toolkit, fastapi + mangum, onnxruntime session, tokenizer, warm-up inference), "
             "measured by the emulator from process spawn to ready. Restore = fork of the "
             "initialized template process + after-restore hooks until ready.")
    note2 = ("Closed loop, `POST /v1/intent`, keep-alive clients in this process. The gateway path "
             "includes the API Gateway event mapping, the emulator, the environment's socket hop, "
             "the toolkit (admission, telemetry) and Mangum; uvicorn serves the FastAPI app "
             "directly in one process. With 4 clients the gateway path has 4 provisioned "
             "environments (4 processes) against one uvicorn process, so that row is for "
             "information only.")
    note3 = ("Product defaults (P0 SLA 2,000 ms). An on-demand environment's init returns at once "
             "and the model loads in the background; a request that cannot be served within its "
             "SLA budget is shed by the agent (503 + Retry-After, the product's admission), so "
             "statuses other than 200 are the agent's decisions (-1 would be a transport error). "
             "All inits compete for this machine's cores. SnapStart restores fork the one "
             "template process.")
    note4 = ("Both clients run in the same emulator against the same per-environment Runtime API "
             "(HTTP on 127.0.0.1): awslambdaric is AWS's client (C extension over libcurl; what "
             "AWS's Python base images run), the bootstrap is the stdlib client "
             "(http.client, keep-alive). Cold = `Invoke` from zero until the answer (process "
             "spawn, interpreter, client import, handler import, first invoke); warm = "
             "sequential `Emulator.invoke` round trips of a trivial handler. Environments run "
             "awslambdaric by default; SnapStart templates and their forked restores run the "
             "bootstrap: the emulator restores by forking the template process on request, "
             "which needs a fork point inside that process (the bootstrap forks on a control "
             "message); awslambdaric's process calls `restore/next` once and then serves "
             "itself, and has no such point without patching its private client. awslambdaric "
             "on python3.12+ polls `next` from a fresh thread per invocation (its "
             "`use_thread_polling`), part of its warm round trip.")
    markdown = "\n\n".join([
        "# Emulator benchmark (`bench/bench_emulator.py`)", header, f"**Result:** {verdict}.",
        "## 1. SnapStart restore vs full init", t1, note1,
        "## 2. Warm throughput: gateway + emulator vs uvicorn", t2, note2,
        f"## 3. {args.burst} requests at once from zero (through the gateway)", t3, note3,
        "## 4. Runtime interface client: awslambdaric vs the stdlib bootstrap", t4, note4,
    ]) + "\n"
    figures = [
        figure("full init (provisioned-concurrency), median", full, "ms", n=len(restore["full_init_ms"])),
        figure("SnapStart snapshot init", restore["snapshot_init_ms"], "ms"),
        figure("SnapStart restore, median", rest, "ms", n=len(restore["restore_ms"])),
        figure("first /v1/intent, provisioned environment, median",
               statistics.median(restore["first_pc_ms"]), "ms"),
        figure("first /v1/intent, SnapStart restore from zero, median",
               statistics.median(restore["first_snap_ms"]), "ms"),
        figure("first /v1/intent, on-demand cold start from zero, median",
               statistics.median(restore["first_od_ms"]), "ms", statuses=restore["od_statuses"]),
        *(figure(f"{name} throughput, {c} client(s), median", rps[f"{name}_{c}"], "req/s",
                 errors=throughput["errors"][f"{name}_{c}"]) for c in (1, 4) for name in ("gateway", "uvicorn")),
        figure("gateway / uvicorn throughput, 4 clients (information)", tp_ratio_4, "ratio"),
        *(figure(f"burst {args.burst} from zero, {label}: {key}", b[key], unit, statuses=b["statuses"])
          for label, b in burst.items()
          for key, unit in (("p50_ms", "ms"), ("p99_ms", "ms"), ("init_median_ms", "ms"),
                            ("environments", "count"), ("wall_s", "s"))),
        *(figure(f"{c}: {key}", med[c][key], "ms", n=len(clients[c][key]))
          for c in CLIENTS for key in ("cold_ms", "init_ms", "warm_ms", "agent_first_ms", "agent_init_ms")),
        *(figure(f"{c}: warm_p99_ms", p99[c], "ms") for c in CLIENTS),
        figure("awslambdaric / bootstrap, cold (medians)", ric_vs_bootstrap_cold, "ratio"),
        figure("awslambdaric / bootstrap, warm round trip (medians)", ric_vs_bootstrap_warm, "ratio"),
    ]
    reduced = None
    if args.rounds < 3 or args.seconds < 4.0 or args.burst < 20 or args.warm < 300:
        reduced = f"--rounds {args.rounds} --seconds {args.seconds:g} --burst {args.burst} --warm {args.warm}"
    path = write_result("emulator", markdown, figures, ratios=ratios, command=command, reduced=reduced)
    print(markdown)
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
