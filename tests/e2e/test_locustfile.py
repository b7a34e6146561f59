"""bench/locustfile.py drives the reference agent through the local gateway (real Locust run)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from infra.local.gateway import Gateway
from infra.local.spec import AliasSpec, FunctionSpec

ROOT = Path(__file__).parents[2]


def test_locustfile_runs_headless_against_the_gateway(make_emulator, tmp_path: Path) -> None:
    # GIVEN the reference agent with SnapStart behind the local gateway
    emu = make_emulator()
    emu.add_function(FunctionSpec(name="agent", handler="functions.agent.handler.handler",
                                  code_dir=ROOT, memory_mb=2048, timeout_s=30, snap_start=True,
                                  aliases=(AliasSpec("live", "1"),)))
    gw = Gateway(emu, "agent", "live")
    gw.start()
    try:
        # WHEN Locust runs the shipped file for a few seconds with short think times
        env = dict(os.environ, WARMSTART_LOCUST_MIN_WAIT_S="0", WARMSTART_LOCUST_MAX_WAIT_S="0.2")
        run = subprocess.run(
            [sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "locustfile.py"),
             "--headless", "-u", "2", "-r", "2", "-t", "6s", "--host", gw.endpoint,
             "--csv", str(tmp_path / "run"), "--only-summary"],
            check=False, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    finally:
        gw.stop()
    # THEN requests of the task mix were sent, answered locally, and none failed
    assert run.returncode == 0, run.stderr[-2000:]
    with open(tmp_path / "run_stats.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Name"] != "Aggregated"]
    sent = {r["Name"]: int(r["Request Count"]) for r in rows}
    failures = sum(int(r["Failure Count"]) for r in rows)
    assert any(name.startswith("POST /v1/intent [local]") for name in sent), sent
    assert sum(sent.values()) >= 5 and failures == 0, (sent, failures)
