"""The simulator at scale: time chunks equal the unsplit run; Dask equals the local pool."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import TRACE_DIR
from warmers.simulator.calibration import Calibration
from warmers.simulator.policies import baseline_policies
from warmers.simulator.run import EngineUnavailable, SimulationResult, run_series, run_simulation
from warmers.simulator.stream import series_of_trace
from warmers.simulator.trace import load_trace
from warmers.simulator.warmstart_policy import warmstart_variants


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    return load_trace(TRACE_DIR)


def _totals(r: SimulationResult) -> list[dict]:  # type: ignore[type-arg]
    return [{k: v for k, v in dataclasses.asdict(t).items() if k != "cpu_s"} for t in r.totals]


def test_time_chunks_equal_the_unsplit_run_on_a_busy_real_series(trace, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    # the busiest real series of the 8-hour trace, its first 40 minutes (~140k invocations)
    busiest = int(np.argmax(trace.counts.sum(axis=1)))
    busy = replace(trace.select([busiest]), counts=trace.counts[[busiest], :40])
    assert busy.counts.sum() > 100_000
    # warmstart on demand (auto deploys SnapStart on this function: no admission to carry)
    def policies():  # type: ignore[no-untyped-def]
        return [*baseline_policies(), *warmstart_variants(15, strategy="provisioned")]

    whole = run_simulation(busy, policies(), calibration, chunk_invocations=10**9)
    cut = run_simulation(busy, policies(), calibration, chunk_invocations=15_000)
    assert whole.chunks == 1 and cut.chunks >= 9
    assert cut.largest_chunk_invocations <= 15_000
    # every field of every row, floats bit for bit (environments carried across each cut)
    assert cut.rows == whole.rows
    assert _totals(cut) == _totals(whole)
    assert any(r.cold_starts > 0 for r in whole.rows)
    # the admission path (environments with their model-load progress) ran across the cuts
    assert sum(whole.by_name("warmstart").decisions.values()) > 0


def _small(trace):  # type: ignore[no-untyped-def]
    return replace(trace.select(list(range(8))), counts=trace.counts[:8, :90])


@pytest.mark.slow
def test_dask_local_cluster_equals_local_pool(trace, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    small = _small(trace)
    # the warmstart variants too: their overflowed requests and demands are merged across
    # shards and the shared endpoint is resolved after every shard
    local = run_simulation(small, [*baseline_policies(), *warmstart_variants(15)], calibration,
                           jobs=2, shard_functions=2)
    dask = run_simulation(small, [*baseline_policies(), *warmstart_variants(15)], calibration,
                          engine="dask", jobs=2, shard_functions=2)
    assert dask.engine == "dask" and dask.shards == local.shards == 4
    assert dask.rows == local.rows
    assert _totals(dask) == _totals(local)
    assert len(dask.worker_peak_rss_mb) >= 1


@pytest.mark.slow
def test_dask_worker_killed_mid_run_retries_its_shard_once(trace, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    from distributed import Client, LocalCluster

    small = _small(trace)
    local = run_simulation(small, baseline_policies(), calibration, shard_functions=1)
    killed: list[int] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        def kill_one_busy_worker() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                busy = [w for w, tasks in client.processing().items() if tasks]
                if busy:
                    pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
                time.sleep(0.01)

        # a loaded host may finish every shard before the killer sees one running: run again
        # (at most 3 times) until a worker was killed mid-run
        for _attempt in range(3):
            killer = threading.Thread(target=kill_one_busy_worker)
            killer.start()
            dask = run_series(series_of_trace(small), baseline_policies(), calibration,
                              engine="dask", dask_address=cluster.scheduler_address,
                              shard_functions=1)
            killer.join()
            if killed:
                break
    assert killed, "no worker was killed while shards ran (3 runs)"
    # the lost shard ran again elsewhere and counted once: the same numbers as the local run
    assert dask.shards == 8
    assert dask.rows == local.rows
    assert _totals(dask) == _totals(local)


def test_unreachable_dask_scheduler_is_a_clear_error(trace, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EngineUnavailable, match="unreachable"):
        run_simulation(_small(trace), baseline_policies(), calibration, engine="dask",
                       dask_address="tcp://127.0.0.1:9")


def test_unknown_engine_is_refused(trace, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="engine must be"):
        run_simulation(_small(trace), baseline_policies(), calibration, engine="ray")
