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
    SimulatorCalibrationError,
    load_calibration,
    percentile_timing,
)
from warmers.simulator.constants import SimulatorPrices
from warmers.simulator.engine import simulate_function
from warmers.simulator.policies import KeepAlive, Observed, PolicyContext, SnapStart
from warmers.simulator.run import run_simulation
from warmers.simulator.sketch import RELATIVE_ACCURACY
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
    with pytest.raises(ValueError, match="executions"):
        sample_durations(pct, 1, np.random.default_rng(0), executions=-1)


def test_duration_tail_is_lognormal_from_p99_to_the_maximum() -> None:
    from statistics import NormalDist

    from warmers.simulator.trace import max_level

    # GIVEN a maximum 100x the 99th percentile, from a million executions
    pct = np.array([1.0, 2.0, 5.0, 10.0, 20.0, 100.0, 10_000.0])
    n_exec = 1_000_000
    d = sample_durations(pct, 2_000_000, np.random.default_rng(3), executions=n_exec)
    # THEN the body is unchanged and the tail is log-linear in the normal score: the 99.9th
    # percentile is where the lognormal through (0.99, 100 ms) and (N/(N+1), 10 s) puts it
    z = NormalDist().inv_cdf
    frac = (z(0.999) - z(0.99)) / (z(max_level(n_exec)) - z(0.99))
    assert np.percentile(d, 99.9) == pytest.approx(100.0 * 100.0 ** frac, rel=0.03)
    assert np.percentile(d, 99) == pytest.approx(100.0, rel=0.02)
    # far fewer slow requests than a straight line from p99 to the maximum at level 1 (which
    # puts ~0.5 % of requests above 5,050 ms)
    assert (d > 5_050.0).mean() < 0.0005
    assert d.max() <= 10_000.0
    assert max_level(9) == 0.9


def test_shipped_trace_has_few_requests_slower_than_their_sla_when_warm(trace) -> None:  # type: ignore[no-untyped-def]
    # the executions behind each function's percentiles are read from the durations file
    assert trace.duration_count is not None and trace.duration_count.min() > 0
    over = total = 0
    for i in range(0, trace.n_functions, 3):
        w = make_workload(trace, i, seed=2019, default_sla_ms=2000.0, sla_duration_factor=1.5)
        over += int((w.durations_ms > w.sla_ms).sum())
        total += w.durations_ms.shape[0]
    assert 0 < over < 0.001 * total


def test_trace_rejects_bad_duration_counts(trace) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="duration_count"):
        replace(trace, duration_count=trace.duration_count[:3])
    with pytest.raises(ValueError, match="duration_count"):
        replace(trace, duration_count=-trace.duration_count)
    assert trace.select([4, 2]).duration_count.tolist() == trace.duration_count[[4, 2]].tolist()


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
    original = dur.read_text()
    dur.write_text(original.replace(",Count,", ",Executions,", 1))
    with pytest.raises(TraceFormatError, match="missing column"):
        load_trace(d)
    rows = original.splitlines()
    fields = rows[1].split(",")
    fields[4] = "-3"  # Count
    dur.write_text("\n".join([rows[0], ",".join(fields), *rows[2:]]) + "\n")
    with pytest.raises(TraceFormatError, match="row 2: Count must be >= 0"):
        load_trace(d)
    dur.write_text(original.replace("percentile_Average_50", "p50"))
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
    with pytest.raises(SimulatorCalibrationError, match="not valid JSON"):
        load_calibration(p)
    data = json.loads(cal.to_json())
    del data["restore_ms"]
    p.write_text(json.dumps(data))
    with pytest.raises(SimulatorCalibrationError, match="missing 'restore_ms'"):
        load_calibration(p)
    data = json.loads(cal.to_json())
    data["init_ms"] = {"p50": 10, "p95": 5}
    p.write_text(json.dumps(data))
    with pytest.raises(SimulatorCalibrationError, match="p95"):
        load_calibration(p)
    assert percentile_timing([1, 2, 3, 4, 5]).p50 == 3
    with pytest.raises(SimulatorCalibrationError):
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
    # the DDSketch's bound: within 1 % of the order statistic at rank floor(0.99 (n - 1))
    exact = float(np.percentile(np.concatenate(lat), 99, method="lower"))
    assert abs(t.p99_ms - exact) <= RELATIVE_ACCURACY * exact
    assert t.requests == sum(x.shape[0] for x in lat)
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
    assert len(rows) == 1 + 4 * 12


def test_cli_policies_csv_is_one_row_per_policy_for_other_tools(tmp_path: Path) -> None:
    import csv

    assert simulate_cmd.run(_args(tmp_path)) == 0
    with (tmp_path / "out" / "policies.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    names = [r["policy"] for r in rows]
    assert len(names) == len(set(names)) == 12 and "warmstart" in names
    assert {"policy", "requests", "cold_starts", "failed_answers", "degraded", "shed",
            "total_usd"} <= set(rows[0])
    per_function = list(csv.DictReader((tmp_path / "out" / "functions.csv").open(newline="")))
    for r in rows:
        mine = [f for f in per_function if f["policy"] == r["policy"]]
        assert int(r["requests"]) == sum(int(f["requests"]) for f in mine) > 0
        assert int(r["cold_starts"]) == sum(int(f["cold_starts"]) for f in mine)
        assert int(r["failed_answers"]) == int(r["late"]) + int(r["degraded"]) + int(r["shed"])
        parts = float(r["lambda_usd"]) + float(r["endpoint_usd"]) + float(r["warmer_usd"])
        assert float(r["total_usd"]) == pytest.approx(parts, abs=1e-5)
        assert 0.0 <= float(r["provisioned_concurrency_usd"]) <= float(r["lambda_usd"])
        assert float(r["lambda_usd"]) == pytest.approx(
            sum(float(f["lambda_usd"]) for f in mine), abs=1e-4)
        # the shared endpoint's outcome is counted back into each function's row
        for col in ("failed_answers", "degraded", "overflowed"):
            assert int(r[col]) == sum(int(f[col]) for f in mine), (r["policy"], col)
    always = next(r for r in rows if r["policy"] == "warmstart, always-on endpoint")
    hourly = SimulatorPrices().gpu_endpoint_hour_usd
    assert float(always["endpoint_usd"]) == pytest.approx(hourly * 45 / 60, rel=1e-6)
    planned = next(r for r in rows if r["policy"] == "warmstart")
    # the planned endpoint costs its instance-hours, never more than always on at the cap
    assert 0.0 <= float(planned["endpoint_usd"]) <= 4 * hourly * 45 / 60
    tt = next(r for r in rows if r["policy"] == "target tracking 0.7")
    assert float(tt["provisioned_concurrency_usd"]) > 0  # at least 1 environment per function


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
