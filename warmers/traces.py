"""Reader for the Azure Functions 2019 trace format (a MetricsSource for replays).

Formats (tests/data/SOURCES.md):

* invocations: ``HashOwner,HashApp,HashFunction,Trigger,<minute>...`` (counts per minute);
* the full-day union file: ``vec_id,n_occurrences,first_commit,first_path,first_hashname,
  daily_total,1..1440`` (``.csv`` or ``.csv.gz``);
* one series: a single column (any header, e.g. ``0``) holding one count per minute, many
  days concatenated (``tests/data/traces/azure2019_14day/``); the function is named after the
  file; an empty or ``nan`` cell is a gap (NaN);
* durations: ``HashOwner,HashApp,HashFunction,Average,Count,Minimum,Maximum,
  percentile_Average_{0,1,25,50,75,99,100}`` (ms).

Concurrency is derived by Little's law (rate x mean duration), since the trace has counts only.

References
----------
Shahrad et al., "Serverless in the Wild", USENIX ATC 2020; Azure Public Dataset (CC-BY 4.0).
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from warmers.ports import MetricsUnavailable
from warmers.series import PERIOD_S, MetricSeries, littles_law_concurrency

#: Mean duration assumed when a trace has no duration row for a function (ms).
DEFAULT_DURATION_MS = 1000.0


class TraceFormatError(ValueError):
    """The file is not in a supported Azure 2019 trace format (the message says what is off)."""


@dataclass(frozen=True, eq=False)
class TraceFunction:
    """One function's per-minute invocation counts from a trace.

    Attributes
    ----------
    hash_function : str
        The function's hash (union file: ``first_hashname``).
    invocations : np.ndarray
        Shape ``(n_minutes,)``, counts per minute.
    first_minute : int
        Minute-of-day label of the first column (1-based in the union file).
    """

    hash_owner: str
    hash_app: str
    hash_function: str
    trigger: str
    first_minute: int
    invocations: np.ndarray


@dataclass(frozen=True)
class DurationStats:
    """Per-function duration statistics (ms) from the durations file."""

    average_ms: float
    p50_ms: float
    p99_ms: float
    count: int


def _open_text(path: Path) -> IO[str]:
    if not path.exists():
        raise FileNotFoundError(f"trace file not found: {path}")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="")
    return path.open("r", newline="")


def read_invocations(path: str | Path) -> dict[str, TraceFunction]:
    """Read an invocations file (per-function, union or one-series format), keyed by function
    hash.

    Raises
    ------
    FileNotFoundError
    TraceFormatError
        On an unknown header, a non-numeric or negative count, a ragged row (with its line),
        or a function row repeated with different counts (an identical repeat is read once).
    """
    path = Path(path)
    out: dict[str, TraceFunction] = {}
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceFormatError(f"{path}: empty file") from None
        if len(header) == 1:
            return {_series_name(path): _read_one_series(path, reader)}
        seen: dict[str, int] = {}
        if header[:4] == ["HashOwner", "HashApp", "HashFunction", "Trigger"]:
            meta = 4
        elif header[:6] == ["vec_id", "n_occurrences", "first_commit", "first_path",
                            "first_hashname", "daily_total"]:
            meta = 6
        else:
            raise TraceFormatError(
                f"{path}: header {header[:6]} is neither the Azure 2019 invocations format "
                "(HashOwner,HashApp,HashFunction,Trigger,...) nor the full-day union format "
                "(vec_id,...,first_hashname,daily_total,...)")
        try:
            first_minute = int(header[meta])
        except (IndexError, ValueError):
            raise TraceFormatError(f"{path}: no minute columns after the metadata") from None
        width = len(header) - meta
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise TraceFormatError(
                    f"{path}:{line}: {len(row)} columns, header has {len(header)}")
            try:
                counts = np.array(row[meta:], dtype=float)
            except ValueError as exc:
                raise TraceFormatError(f"{path}:{line}: non-numeric count ({exc})") from None
            if counts.shape[0] != width or (counts < 0).any() or np.isinf(counts).any():
                raise TraceFormatError(f"{path}:{line}: counts must be finite and >= 0")
            if meta == 4:
                fn = TraceFunction(row[0], row[1], row[2], row[3], first_minute, counts)
                if fn.hash_function in out:
                    if not np.array_equal(out[fn.hash_function].invocations, counts):
                        raise TraceFormatError(
                            f"{path}:{line}: HashFunction {row[2][:12]}... repeats line "
                            f"{seen[row[2]]} with different counts; which one is right is "
                            "unknown")
                    continue  # an identical duplicated row: nothing to add, nothing lost
                seen[row[2]] = line
            else:
                fn = TraceFunction("", "", row[4], "unknown", first_minute, counts)
                if fn.hash_function in out:  # re-anonymised labels may repeat: keep both
                    fn = TraceFunction("", "", f"{row[4]}#{row[0]}", "unknown", first_minute,
                                       counts)
            out[fn.hash_function] = fn
    if not out:
        raise TraceFormatError(f"{path}: no function rows")
    return out


def _series_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name


def _read_one_series(path: Path, reader: Iterator[list[str]]) -> TraceFunction:
    """The one-series format: one count per row (line 2 on), empty or ``nan`` = a gap."""
    values: list[float] = []
    for line, row in enumerate(reader, start=2):
        if len(row) > 1:
            raise TraceFormatError(f"{path}:{line}: {len(row)} columns; a one-series file has "
                                   "one count per line")
        cell = row[0].strip() if row else ""
        if cell == "" or cell.lower() == "nan":
            values.append(float("nan"))
            continue
        try:
            value = float(cell)
        except ValueError:
            raise TraceFormatError(f"{path}:{line}: non-numeric count {cell!r}") from None
        if value < 0 or math.isinf(value):
            raise TraceFormatError(f"{path}:{line}: counts must be finite and >= 0, got {cell}")
        values.append(value)
    counts = np.array(values, dtype=float)
    if not np.isfinite(counts).any():
        raise TraceFormatError(f"{path}: no count in the one-series file")
    return TraceFunction("", "", _series_name(path), "unknown", 1, counts)


def read_durations(path: str | Path) -> dict[str, DurationStats]:
    """Read a durations file keyed by HashFunction.

    Raises
    ------
    FileNotFoundError
    TraceFormatError
        On a missing column or a non-numeric value.
    """
    path = Path(path)
    out: dict[str, DurationStats] = {}
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        need = {"HashFunction", "Average", "Count", "percentile_Average_50",
                "percentile_Average_99"}
        missing = need - set(reader.fieldnames or [])
        if missing:
            raise TraceFormatError(f"{path}: durations file lacks columns {sorted(missing)}")
        for line, row in enumerate(reader, start=2):
            try:
                out[row["HashFunction"]] = DurationStats(
                    float(row["Average"]), float(row["percentile_Average_50"]),
                    float(row["percentile_Average_99"]), int(float(row["Count"])))
            except ValueError as exc:
                raise TraceFormatError(f"{path}:{line}: {exc}") from None
    return out


def trace_series(fn: TraceFunction, *, duration_ms: float | None = None, start_s: float = 0.0,
                 alias: str = "live") -> MetricSeries:
    """A trace function as a :class:`MetricSeries`; concurrency by Little's law.

    Parameters
    ----------
    duration_ms : float, optional
        Mean duration (from :func:`read_durations`); default ``DEFAULT_DURATION_MS``.
    start_s : float
        Epoch seconds given to the first minute.
    """
    dur = DEFAULT_DURATION_MS if duration_ms is None else float(duration_ms)
    n = fn.invocations.shape[0]
    return MetricSeries(
        function_name=fn.hash_function, alias=alias, start_s=start_s,
        invocations=fn.invocations.astype(float),
        concurrency=littles_law_concurrency(fn.invocations, dur),
        duration_ms=np.full(n, dur), source="trace")


class TraceMetricsSource:
    """Serves trace functions as if they were CloudWatch (minute ``i`` at ``start_s + 60 i``).

    Parameters
    ----------
    functions : dict of TraceFunction
    durations : dict of DurationStats, optional
    start_s : float
        Epoch seconds of the trace's first minute.
    """

    def __init__(self, functions: dict[str, TraceFunction],
                 durations: dict[str, DurationStats] | None = None, *,
                 start_s: float = 0.0) -> None:
        self._functions = functions
        self._durations = durations or {}
        self._start_s = start_s

    def fetch(self, function_name: str, alias: str, *, start_s: float,
              end_s: float) -> MetricSeries:
        """Minutes of the trace inside ``[start_s, end_s)``.

        Raises
        ------
        MetricsUnavailable
            For an unknown function or a range outside the trace.
        """
        fn = self._functions.get(function_name)
        if fn is None:
            raise MetricsUnavailable(f"function {function_name!r} is not in the trace")
        stats = self._durations.get(function_name)
        full = trace_series(fn, duration_ms=stats.average_ms if stats else None,
                            start_s=self._start_s, alias=alias)
        i0 = max(0, int((start_s - self._start_s) // PERIOD_S))
        i1 = min(full.n_minutes, int((end_s - self._start_s) // PERIOD_S))
        if i1 <= i0:
            raise MetricsUnavailable(f"range [{start_s}, {end_s}) is outside the trace")
        return MetricSeries(
            function_name=function_name, alias=alias, start_s=self._start_s + i0 * PERIOD_S,
            invocations=full.invocations[i0:i1], concurrency=full.concurrency[i0:i1],
            duration_ms=full.duration_ms[i0:i1], source="trace")
