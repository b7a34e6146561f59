"""Streamed inputs: the published per-day files and Parquet shards, and their bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from tests.unit.simulator.sim_helpers import TRACE_DIR
from warmers.simulator.calibration import Calibration
from warmers.simulator.policies import KeepAlive
from warmers.simulator.run import run_series, run_simulation
from warmers.simulator.sources import (
    DayFiles,
    iter_parquet_series,
    parquet_schema,
    write_parquet_shards,
)
from warmers.simulator.stream import iter_fullday_series, series_of_trace
from warmers.simulator.trace import TraceFormatError, load_trace

REALHASH = TRACE_DIR / "azure2019_fullday_realhash"


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as fh:
        return list(csv.reader(fh))


def _write(path: Path, rows: list[list[str]]) -> None:
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)


@pytest.fixture
def days(tmp_path: Path) -> Path:
    """Two day files in the published names and layouts, from the 10 real busy functions'
    day: day 2 lacks function 0, repeats function 3's row, and lists the rows reversed."""
    inv = _rows(REALHASH / "invocations.csv")
    dur = _rows(REALHASH / "durations.csv")
    mem = _rows(REALHASH / "memory.csv")
    d = tmp_path / "days"
    d.mkdir()
    _write(d / "invocations_per_function_md.anon.d01.csv", inv)
    _write(d / "invocations_per_function_md.anon.d02.csv",
           [inv[0], *reversed(inv[2:]), inv[4]])
    _write(d / "function_durations_percentiles.anon.d01.csv", dur)
    # the published memory file is per application (no HashFunction column)
    _write(d / "app_memory_percentiles.anon.d01.csv",
           [[c for j, c in enumerate(r) if j != 2] for r in mem])
    return d


def test_day_files_union_missing_days_are_zero_and_said(days: Path) -> None:
    src = DayFiles(days)
    series = list(src)
    assert src.n_functions == len(series) == 10 and src.n_minutes == 2880
    inv = _rows(REALHASH / "invocations.csv")
    by_id = {s.function_id: s for s in series}
    first = by_id[inv[1][2]]
    day1 = np.array([int(v) for v in inv[1][4:]])
    assert np.array_equal(first.counts[:1440], day1)
    assert not first.counts[1440:].any()  # missing on day 2: zero, not dropped
    other = by_id[inv[3][2]]  # the repeated row: read once
    assert np.array_equal(other.counts[1440:], other.counts[:1440])
    assert any("missing from some day files" in n for n in src.notes)
    assert any("1 duplicated row(s) read once" in n for n in src.notes)
    assert first.duration_count == int(_rows(REALHASH / "durations.csv")[1][4])


def test_day_files_conflicting_duplicate_and_bad_header(days: Path) -> None:
    path = days / "invocations_per_function_md.anon.d02.csv"
    rows = _rows(path)
    changed = [*rows[1][:4], str(int(rows[1][4]) + 1), *rows[1][5:]]
    _write(path, [*rows, changed])
    with pytest.raises(TraceFormatError, match="appears twice with different counts"):
        DayFiles(days)
    _write(path, [rows[0][:-1], *rows[1:]])
    with pytest.raises(TraceFormatError, match="header must be"):
        DayFiles(days)


def test_day_files_without_a_profile(days: Path) -> None:
    dur = days / "function_durations_percentiles.anon.d01.csv"
    rows = _rows(dur)
    _write(dur, rows[:-1])
    with pytest.raises(TraceFormatError, match="no duration row"):
        list(DayFiles(days))
    src = DayFiles(days, skip_unprofiled=True)
    assert len(list(src)) == 9
    assert any("skipped" in n for n in src.notes)


def test_parquet_round_trip_gives_the_same_run(tmp_path: Path, calibration: Calibration) -> None:
    trace = load_trace(TRACE_DIR)
    small = trace.select(list(range(20)))
    paths = write_parquet_shards(series_of_trace(small), tmp_path / "pq", functions_per_shard=7)
    assert len(paths) == 3
    back = list(iter_parquet_series(tmp_path / "pq", batch_rows=4))
    assert [s.function_id for s in back] == list(small.function_ids)
    assert all(np.array_equal(s.counts, small.counts[i]) for i, s in enumerate(back))
    a = run_simulation(small, [KeepAlive(10)], calibration)
    b = run_series(iter_parquet_series(tmp_path / "pq"), [KeepAlive(10)], calibration)
    assert a.rows == b.rows


def test_parquet_wrong_schema_and_duplicates_are_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"function_id": ["f"], "counts": [[1, 2]]}), bad)
    with pytest.raises(TraceFormatError, match="wrong Parquet schema; expected function_id"):
        list(iter_parquet_series(bad))
    trace = load_trace(TRACE_DIR).select([0, 1])
    d = tmp_path / "dup"
    write_parquet_shards(series_of_trace(trace), d / "a")
    write_parquet_shards(series_of_trace(trace), d / "b")
    with pytest.raises(TraceFormatError, match="appears twice"):
        list(iter_parquet_series([d / "a" / "part-00000.parquet", d / "b" / "part-00000.parquet"]))
    assert parquet_schema().names[0] == "function_id"


def test_fullday_stream_skips_nothing() -> None:
    trace = load_trace(TRACE_DIR)
    src = TRACE_DIR / "azure2019_fullday_union.csv.gz"
    first = list(iter_fullday_series(src, trace, limit=40))
    assert len(first) == 40 and all(s.counts.shape == (1440,) for s in first)


def test_cli_reads_parquet_shards_and_refuses_a_wrong_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from infra.commands import simulate as simulate_cmd

    trace = load_trace(TRACE_DIR).select(list(range(6)))
    write_parquet_shards(series_of_trace(trace), tmp_path / "pq", functions_per_shard=2)

    def args(*extra: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        simulate_cmd.add_arguments(parser)
        return parser.parse_args(["--out", str(tmp_path / "out"), "--functions", "3",
                                  "--minutes", "30", "--jobs", "1", "--no-warmstart",
                                  "--json", *extra])

    assert simulate_cmd.run(args("--parquet", str(tmp_path / "pq"))) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["functions"] == 3 and out["minutes"] == 30 and out["engine"] == "local"
    assert out["invocations"] == int(trace.counts[:3, :30].sum())
    assert out["quantile_relative_accuracy"] == 0.01 and out["worker_peak_rss_mb"]
    bad = tmp_path / "bad"
    bad.mkdir()
    pq.write_table(pa.table({"function_id": ["f"]}), bad / "part-0.parquet")
    assert simulate_cmd.run(args("--parquet", str(bad))) == 2
    assert "wrong Parquet schema" in capsys.readouterr().err
