"""Trace reader, sampling, calibration file, aggregation over a trace and the CLI."""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from infra.commands import simulate as simulate_cmd
from tests.unit.simulator.sim_helpers import TRACE_DIR
from warmers.simulator.calibration import (
    Calibration,
    CalibrationError,
    load_calibration,
    percentile_timing,
)
from warmers.simulator.engine import simulate_function
from warmers.simulator.policies import KeepAlive, Observed, PolicyContext, SnapStart
from warmers.simulator.run import run_simulation
from warmers.simulator.trace import (
    MINUTE_MS,
    TraceFormatError,
    lambda_memory_mb,
    load_trace,
    make_workload,
    sample_durations,
    spread_arrivals,
)


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    return load_trace(TRACE_DIR)


def test_shipped_trace_loads_whole(trace) -> None:  # type: ignore[no-untyped-def]
    assert trace.n_functions == 298 and trace.n_minutes == 480
    assert trace.first_minute == 480
    assert int(trace.counts.sum()) == 2_797_493
    assert trace.memory_mb.min() >= 128
    assert set(trace.triggers) >= {"http", "timer", "queue"}


def test_arrivals_are_spread_within_their_minute_deterministically() -> None:
    counts = np.array([3, 0, 5])
    a = spread_arrivals(counts, np.random.default_rng(7))
    b = spread_arrivals(counts, np.random.default_rng(7))
    assert np.array_equal(a, b) and a.shape == (8,)
    assert np.all(np.diff(a) >= 0)
    minutes = (a // MINUTE_MS).astype(int)
    assert np.bincount(minutes, minlength=3).tolist() == [3, 0, 5]
    with pytest.raises(ValueError, match=">= 0"):
        spread_arrivals(np.array([1, -1]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="whole"):
        spread_arrivals(np.array([1.5]), np.random.default_rng(0))


def test_durations_follow_the_percentiles() -> None:
    pct = np.array([10.0, 20.0, 50.0, 100.0, 200.0, 900.0, 1000.0])
    d = sample_durations(pct, 200_000, np.random.default_rng(1))
    assert d.min() >= 10.0 and d.max() <= 1000.0
    assert np.percentile(d, [25, 50, 75, 99]) == pytest.approx([50, 100, 200, 900], rel=0.02)
    with pytest.raises(ValueError, match="non-decreasing"):
        sample_durations(pct[::-1], 1, np.random.default_rng(0))


def test_workload_is_stable_per_function_and_seed(trace) -> None:  # type: ignore[no-untyped-def]
    a = make_workload(trace, 5, seed=1, default_sla_ms=2000, sla_duration_factor=1.5)
    b = make_workload(trace.select([7, 5]), 1, seed=1, default_sla_ms=2000,
                      sla_duration_factor=1.5)
    assert np.array_equal(a.arrivals_ms, b.arrivals_ms)
    assert np.array_equal(a.durations_ms, b.durations_ms)
    assert a.sla_ms == max(2000.0, 1.5 * a.p99_duration_ms)


def test_memory_setting() -> None:
    assert lambda_memory_mb(20.3) == 128 and lambda_memory_mb(300.2) == 301
    assert lambda_memory_mb(50_000) == 10_240
    with pytest.raises(ValueError):
        lambda_memory_mb(float("nan"))


def _copy_trace(tmp_path: Path) -> Path:
    for name in ("invocations", "durations", "memory"):
        shutil.copy(TRACE_DIR / f"azure2019_{name}.csv", tmp_path / f"azure2019_{name}.csv")
    return tmp_path


def test_bad_trace_files_get_clear_errors(tmp_path: Path) -> None:
    d = _copy_trace(tmp_path)
    inv = d / "azure2019_invocations.csv"
    lines = inv.read_text().splitlines()
    inv.write_text("\n".join(lines[:2] + [lines[2].rsplit(",", 1)[0]]) + "\n")
    with pytest.raises(TraceFormatError, match="row 3 has"):
        load_trace(d)
    inv.write_text("\n".join(lines[:2] + [lines[2].replace(",0,", ",-4,", 1)]) + "\n")
    with pytest.raises(TraceFormatError, match="negative"):
        load_trace(d)
    inv.write_text("\n".join(lines[:2] + [lines[2].replace(",0,", ",x,", 1)]) + "\n")
    with pytest.raises(TraceFormatError, match="row 3"):
        load_trace(d)
    inv.write_text("a,b,c\n")
    with pytest.raises(TraceFormatError, match="header"):
        load_trace(d)
    inv.write_text("\n".join(lines[:3]) + "\n")
    dur = d / "azure2019_durations.csv"
    dur.write_text(dur.read_text().replace("percentile_Average_50", "p50"))
    with pytest.raises(TraceFormatError, match="missing column"):
        load_trace(d)
    (d / "azure2019_durations.csv").unlink()
    with pytest.raises(FileNotFoundError):
        load_trace(d)


def test_calibration_file_round_trip_and_errors(tmp_path: Path) -> None:
    cal = load_calibration()  # the shipped file is valid and measured
    assert cal.init_ms.p50 > 0 and cal.samples > 0 and cal.method
    p = tmp_path / "c.json"
    p.write_text(cal.to_json())
    assert load_calibration(p) == cal
    p.write_text("{not json")
    with pytest.raises(CalibrationError, match="not valid JSON"):
        load_calibration(p)
    data = json.loads(cal.to_json())
    del data["restore_ms"]
    p.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match="missing 'restore_ms'"):
        load_calibration(p)
    data = json.loads(cal.to_json())
    data["init_ms"] = {"p50": 10, "p95": 5}
    p.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match="p95"):
        load_calibration(p)
    assert percentile_timing([1, 2, 3, 4, 5]).p50 == 3
    with pytest.raises(CalibrationError):
        percentile_timing([])


def test_run_simulation_aggregates_exactly(trace, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    small = trace.select([0, 1, 2, 3, 4, 5])
    small = replace(small, counts=small.counts[:, :60])
    policies = [KeepAlive(10), SnapStart()]
    one = run_simulation(small, policies, calibration, seed=3, jobs=1)
    two = run_simulation(small, policies, calibration, seed=3, jobs=2)
    assert [t.cold_starts for t in one.totals] == [t.cold_starts for t in two.totals]
    assert [t.p99_ms for t in one.totals] == pytest.approx([t.p99_ms for t in two.totals])
    # p99 over the trace = the p99 of every request's latency
    ctx = PolicyContext(calibration=calibration)
    lat = []
    cold = 0
    for i in range(small.n_functions):
        w = make_workload(small, i, seed=3, default_sla_ms=2000.0, sla_duration_factor=1.5)
        r = simulate_function(w, KeepAlive(10).controls(w, Observed.from_workload(w), ctx))
        lat.append(r.latencies_ms)
        cold += r.cold_starts
    t = one.by_name(KeepAlive(10).name)
    assert t.cold_starts == cold
    assert t.p99_ms == pytest.approx(float(np.percentile(np.concatenate(lat), 99)))
    assert t.requests == int(small.counts.sum())
    with pytest.raises(ValueError, match="unique"):
        run_simulation(small, [KeepAlive(10), KeepAlive(10)], calibration)


def _args(tmp_path: Path, **kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    simulate_cmd.add_arguments(parser)
    argv = ["--out", str(tmp_path / "out"), "--functions", "4", "--minutes", "45",
            "--jobs", "1"]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return parser.parse_args(argv)


def test_cli_writes_table_plot_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_cmd.run(_args(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "warmstart" in out and "Shahrad" in out
    md = (tmp_path / "out" / "simulation.md").read_text()
    assert "| warmstart |" in md and "USENIX ATC 2020" in md
    assert (tmp_path / "out" / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    rows = (tmp_path / "out" / "functions.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * 10


def test_cli_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_cmd.run(_args(tmp_path, trace_dir=tmp_path / "nope")) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "cal.json"
    bad.write_text("{}")
    assert simulate_cmd.run(_args(tmp_path, calibration=bad)) == 2
    assert "warmstart calibrate" in capsys.readouterr().err


def test_fullday_series_borrow_profiles(trace) -> None:  # type: ignore[no-untyped-def]
    from warmers.simulator.trace import load_fullday_trace

    full = load_fullday_trace(TRACE_DIR / "azure2019_fullday_union.csv.gz", trace, limit=3,
                              max_daily_total=5_000)
    assert full.n_functions == 3 and full.n_minutes == 1440
    assert np.all(full.counts.sum(axis=1) <= 5_000)
    assert np.array_equal(full.duration_pct_ms, trace.duration_pct_ms[:3])
    with pytest.raises(ValueError):
        load_fullday_trace(TRACE_DIR / "azure2019_fullday_union.csv.gz", trace, limit=0)
