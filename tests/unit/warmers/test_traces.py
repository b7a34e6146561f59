from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from warmers.ports import MetricsUnavailable
from warmers.traces import (
    TraceFormatError,
    TraceMetricsSource,
    read_durations,
    read_invocations,
    trace_series,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


def test_reads_the_8h_subset_with_durations():
    fns = read_invocations(DATA / "azure2019_invocations.csv")
    durs = read_durations(DATA / "azure2019_durations.csv")
    assert len(fns) == 298
    fn = next(iter(fns.values()))
    assert fn.first_minute == 480 and fn.invocations.shape == (480,)
    assert fn.trigger in {"event", "http", "orchestration", "queue", "storage", "timer"}
    stats = durs[fn.hash_function]
    series = trace_series(fn, duration_ms=stats.average_ms)
    expected = fn.invocations / 60.0 * stats.average_ms / 1000.0
    np.testing.assert_allclose(series.concurrency, expected)


def test_reads_the_full_day_union_file_gzip():
    fns = read_invocations(DATA / "azure2019_fullday_union.csv.gz")
    assert len(fns) == 5200
    fn = next(iter(fns.values()))
    assert fn.first_minute == 1 and fn.invocations.shape == (1440,)


def test_trace_source_serves_ranges_and_faults():
    fns = read_invocations(DATA / "azure2019_fullday_realhash" / "invocations.csv")
    src = TraceMetricsSource(fns, start_s=1000 * 60.0)
    name = next(iter(fns))
    s = src.fetch(name, "live", start_s=1000 * 60.0 + 600, end_s=1000 * 60.0 + 1200)
    assert s.n_minutes == 10 and s.start_s == 1000 * 60.0 + 600
    np.testing.assert_array_equal(s.invocations, fns[name].invocations[10:20])
    with pytest.raises(MetricsUnavailable, match="not in the trace"):
        src.fetch("nope", "live", start_s=0, end_s=60)
    with pytest.raises(MetricsUnavailable, match="outside"):
        src.fetch(name, "live", start_s=0, end_s=60)


@pytest.mark.parametrize("content, msg", [
    ("a,b,c\n1,2,3\n", "neither"),
    ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1\n", "columns"),
    ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1,x\n", "non-numeric"),
    ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1,-2\n", ">= 0"),
    ("", "empty"),
])
def test_bad_trace_files(tmp_path, content, msg):
    path = tmp_path / "bad.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(content)
    with pytest.raises(TraceFormatError, match=msg):
        read_invocations(path)


def test_missing_file_and_bad_durations(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_invocations(tmp_path / "none.csv")
    bad = tmp_path / "d.csv"
    bad.write_text("HashFunction,Average\nf,1\n")
    with pytest.raises(TraceFormatError, match="lacks columns"):
        read_durations(bad)
