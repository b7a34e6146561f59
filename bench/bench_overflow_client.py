"""The overflow client's import + first call in a fresh process: awscrt against boto3 (issue 20).

Each sample is a new Python process (what an on-demand execution environment's first overflow
pays) that, from its first line:

1. imports `functions.runtime.overflow` and makes an `OverflowClient` for the local GPU endpoint
   (``python -m functions.gpu_endpoint`` in its own process, CPU provider), with

   - ``awscrt``: the default client (SigV4 from ``awscrt.auth``, ``http.client``);
   - ``boto3``: a boto3 ``sagemaker-runtime`` client
     (`functions.runtime.overflow.boto3_client_factory`) with awscrt not importable, as the
     overflow client was before issue 20 (the baseline of the ratio);
   - ``boto3+crt``: the same boto3 client where awscrt is installed (the web layer now ships
     it): botocore then imports ``awscrt.auth`` itself (``botocore.compat.HAS_CRT``) and signs
     with its CRT signers, so ``import boto3`` costs more;
2. ``prewarm``: imports the client's libraries and makes the client (the preload's
   ``overflow`` stage);
3. makes the first ``InvokeEndpoint`` call (connection included), then a second one (warm).

Timed with ``time.perf_counter`` inside the child; the figure compared is *import + first
call* = step 1 start to the end of step 3's first call. Both clients run in interleaved
rounds (the order alternates), so machine load hits both alike, against the same endpoint; one
unmeasured round first warms the OS file cache and the bytecode.

Targets (medians, against ``boto3`` of the same run): import + first call below boto3's
(``< 1``); the part the change replaces, making the client (``prewarm``: the libraries' import
and the client), at most half of boto3's (``<= 0.5``; issue 20 measured ~414 ms for boto3's
import + client, ~51 ms for ``import awscrt.auth, awscrt.http``). The same ratio against
``boto3+crt`` (what a boto3 client would cost in the shipped layer) is reported with the
``< 1`` target.

Run: ``.venv/bin/python -m bench overflow_client [--rounds N]`` (default 9, at least 7).
Writes ``bench/results/overflow_client.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

import bench
from bench import REPO_ROOT, command_line, figure, machine, now_utc, ratio, table, write_result

CLIENTS = ("awscrt", "boto3", "boto3+crt")
DEFAULT_ROUNDS = 9
MIN_ROUNDS = 7
#: awscrt / boto3 medians: import + first call, and making the client (see the docstring).
TARGET_TOTAL_RATIO = 1.0
TARGET_CLIENT_RATIO = 0.5
TEXT = "my invoice is wrong, I was charged twice"

#: The child: argv = client kind, endpoint URL, endpoint name; prints one JSON line (ms).
CHILD = r"""
import sys
if sys.argv[1] == "boto3":
    sys.modules["awscrt"] = None  # not importable: botocore without its CRT (before issue 20)
import time
t0 = time.perf_counter()
import json
kind, url, name = sys.argv[1:4]
from functions.runtime.overflow import OverflowClient, boto3_client_factory
factory = (boto3_client_factory(endpoint_url=url, region_name="us-east-1")
           if kind.startswith("boto3") else None)
client = OverflowClient(name, endpoint_url=url, region_name="us-east-1", client_factory=factory)
t1 = time.perf_counter()
client.prewarm(5000.0)
t2 = time.perf_counter()
first = client.invoke({"text": sys.argv[4]}, budget_ms=5000.0)
t3 = time.perf_counter()
second = client.invoke({"text": sys.argv[4]}, budget_ms=5000.0)
t4 = time.perf_counter()
assert first.body["intent"] and second.body == first.body, (first, second)
loaded = sorted(m for m in ("boto3", "botocore", "awscrt") if sys.modules.get(m) is not None)
print(json.dumps({"module_ms": (t1 - t0) * 1e3, "client_ms": (t2 - t1) * 1e3,
                  "first_call_ms": (t3 - t2) * 1e3, "warm_call_ms": (t4 - t3) * 1e3,
                  "import_first_call_ms": (t3 - t0) * 1e3, "loaded": loaded}))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_"))}
    env.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
               AWS_SESSION_TOKEN="bench", AWS_REGION="us-east-1", PYTHONDONTWRITEBYTECODE="1")
    return env


def _client_sample(kind: str, endpoint_url: str, endpoint_name: str) -> dict[str, Any]:
    """One fresh process with client ``kind`` (one of `CLIENTS`); its timings, ms."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, kind, endpoint_url, endpoint_name, TEXT], cwd=REPO_ROOT,
        env=_env(), capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} sample failed: {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def measure(endpoint_url: str, endpoint_name: str, rounds: int = DEFAULT_ROUNDS
            ) -> dict[str, list[dict[str, Any]]]:
    """Interleaved fresh-process samples of both clients against one endpoint.

    Parameters
    ----------
    endpoint_url : str
        The GPU endpoint server (``POST /endpoints/{name}/invocations``).
    endpoint_name : str
    rounds : int
        Samples per client (one more unmeasured round warms the file cache first).

    Returns
    -------
    dict
        ``{"awscrt": [sample, ...], "boto3": [...], "boto3+crt": [...]}``, each sample as
        `_client_sample` returns it.
    """
    for kind in CLIENTS:
        _client_sample(kind, endpoint_url, endpoint_name)
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in CLIENTS}
    for r in range(rounds):
        k = r % len(CLIENTS)
        for kind in CLIENTS[k:] + CLIENTS[:k]:  # rotate the order each round
            samples[kind].append(_client_sample(kind, endpoint_url, endpoint_name))
    return samples


def _median(samples: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(s[key] for s in samples))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench overflow_client",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    args, _ = parser.parse_known_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    from infra.local.services import GpuEndpointService

    gpu = GpuEndpointService()
    gpu.start()
    try:
        samples = measure(gpu.endpoint, gpu.endpoint_name, args.rounds)
    finally:
        gpu.stop()

    keys = ("import_first_call_ms", "module_ms", "client_ms", "first_call_ms", "warm_call_ms")
    med = {kind: {key: _median(samples[kind], key) for key in keys} for kind in CLIENTS}
    def of(kind: str, key: str = "import_first_call_ms") -> float:
        return float(med["awscrt"][key] / med[kind][key])

    ratios = [
        ratio("awscrt / boto3 import + first call (median, fresh process)", of("boto3"),
              TARGET_TOTAL_RATIO, op="<"),
        ratio("awscrt / boto3 making the client (prewarm, median)", of("boto3", "client_ms"),
              TARGET_CLIENT_RATIO),
        ratio("awscrt / boto3+crt import + first call (median, fresh process)", of("boto3+crt"),
              TARGET_TOTAL_RATIO, op="<"),
    ]
    rows = []
    for kind in CLIENTS:
        spread = [s["import_first_call_ms"] for s in samples[kind]]
        rows.append([kind, *(f"{med[kind][key]:.1f}" for key in keys),
                     f"{min(spread):.1f}-{max(spread):.1f}",
                     ", ".join(samples[kind][0]["loaded"])])
    results = table(["client", "import + first call ms", "module ms", "client (prewarm) ms",
                     "first call ms", "warm call ms", "import + first call range ms",
                     "loaded of boto3/botocore/awscrt"], rows)
    verdict = table(["ratio", "value", "target", "met"],
                    [[r["name"], f"{r['value']:.3f}x", r["target"] + "x",
                      "yes" if r["met"] else "NO"] for r in ratios])
    figures = [figure(f"{kind} {key.removesuffix('_ms').replace('_', ' ')}, median",
                      med[kind][key], "ms", n=len(samples[kind]))
               for kind in CLIENTS for key in keys]
    command = command_line(["overflow_client", *(argv or [])])
    text = (
        "# bench overflow_client: the overflow client's import + first call, awscrt vs boto3\n\n"
        f"- date: {now_utc()}\n- machine: {machine()}\n"
        f"- samples: {args.rounds} fresh processes per client (interleaved, order rotated; "
        "one unmeasured round first), against the local GPU endpoint server (its own process, "
        "CPU provider)\n"
        f"- reproduce: `{command}`\n\n"
        f"{results}\n\n{verdict}\n\n"
        "Medians, ms, timed inside each child from its first line. *module*: import "
        "`functions.runtime.overflow` and make the `OverflowClient`; *client (prewarm)*: import "
        "the client's libraries and make the client (`awscrt`: `awscrt.auth`, `awscrt.http`, "
        "`http.client`; `boto3`: boto3, its session and a `sagemaker-runtime` client, with "
        "`awscrt` made unimportable as before issue 20; `boto3+crt`: the same with awscrt "
        "installed, which botocore then imports itself); *first "
        "call*: the first `InvokeEndpoint` (connect, sign, send, read, check); *import + first "
        "call*: the sum, what a cold environment's first overflow pays when nothing was "
        "prewarmed. *warm call*: the second call, same connection (with this local server, a "
        "connection's later calls take ~40 ms more than the inference its `Server-Timing` "
        "reports, through either client and through bare `http.client` alike: a property of "
        "the local connection, not a client cost). The last column lists "
        "which of boto3/botocore/awscrt each child had loaded by its end.\n"
    )
    reduced = None if args.rounds >= MIN_ROUNDS else f"--rounds {args.rounds}"
    path = write_result("overflow_client", text, figures, ratios=ratios, command=command,
                        reduced=reduced, extra={"samples": samples})
    return bench.finish(path, results, verdict, ratios=ratios)


if __name__ == "__main__":
    raise SystemExit(main())
