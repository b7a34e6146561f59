"""Streamed trace inputs: the Azure 2019 per-day files as published, and Parquet shards.

Both yield one ``stream.FunctionSeries`` at a time; neither holds the whole trace.

Per-day files (Azure Public Dataset, AzureFunctionsDataset2019, as extracted from its archive):

- ``invocations_per_function_md.anon.dNN.csv``: ``HashOwner,HashApp,HashFunction,Trigger,1..1440``
  (invocations per function per minute of day NN);
- ``function_durations_percentiles.anon.dNN.csv``: ``HashOwner,HashApp,HashFunction,Average,
  Count,Minimum,Maximum,percentile_Average_{0,1,25,50,75,99,100}``;
- ``app_memory_percentiles.anon.dNN.csv``: ``HashOwner,HashApp,...,AverageAllocatedMb_pct99,...``
  (per application; a ``HashFunction`` column, as in InVitro's extracts, is accepted and ignored).

References
----------
M. Shahrad et al., "Serverless in the Wild", USENIX ATC 2020; dataset description:
https://github.com/Azure/AzurePublicDataset/blob/master/AzureFunctionsDataset2019.md
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from warmers.simulator.stream import FunctionSeries
from warmers.simulator.trace import _DURATION_COLUMNS, TraceFormatError, lambda_memory_mb

MINUTES_PER_DAY = 1440
_INV = re.compile(r"invocations_per_function_md\.anon\.d(\d+)\.csv$")


def _parse_csv_line(raw: bytes, path: Path, line: int) -> list[str]:
    try:
        return next(csv.reader([raw.decode("utf-8")]))
    except (UnicodeDecodeError, StopIteration, csv.Error) as exc:
        raise TraceFormatError(f"{path}: line {line}: cannot read as CSV ({exc})") from exc


class DayFiles:
    """The functions of several published day files, one function (all its days) at a time.

    An index pass records, per day file, the byte offset of each function's row (memory
    O(functions x days) offsets, not the counts); each function's row of each day is then
    read with one seek. A function absent from a day file has zero invocations that day (the
    union of the days' function sets; ``notes`` says how many). A row repeated within a day
    file is read once when it repeats exactly (``notes`` counts it) and is an error when its
    counts differ. Each function's duration percentiles are those of the day with the most
    executions (``Count``); its memory is its application's ``AverageAllocatedMb_pct99`` on
    the first day that has it.

    Parameters
    ----------
    directory : Path
        Holds the day files (plain CSV, as extracted; ``.gz`` is refused: it cannot be seeked).
    days : iterable of int, optional
        Day numbers to read (default: every ``invocations_per_function_md.anon.dNN.csv``).
    skip_unprofiled : bool
        Functions without a duration or memory row are skipped (counted in ``notes``) instead
        of an error.

    Raises
    ------
    FileNotFoundError
        No day file, or a requested day's file is missing.
    TraceFormatError
        A header or value out of the layout above, or a conflicting duplicate row.
    """

    def __init__(self, directory: Path, *, days: Iterable[int] | None = None,
                 skip_unprofiled: bool = False) -> None:
        self.directory = Path(directory)
        found = {int(m.group(1)): p for p in sorted(self.directory.iterdir())
                 if (m := _INV.search(p.name))}
        if days is None:
            if not found:
                raise FileNotFoundError(
                    f"{self.directory}: no invocations_per_function_md.anon.dNN.csv")
            self.days = sorted(found)
        else:
            self.days = sorted(set(days))
            missing = [d for d in self.days if d not in found]
            if missing:
                raise FileNotFoundError(f"{self.directory}: no invocations file for day(s) "
                                        f"{missing}")
        self.paths = [found[d] for d in self.days]
        self.skip_unprofiled = skip_unprofiled
        self.notes: list[str] = []
        self._offsets: dict[tuple[str, str, str], list[int]] = {}
        self._triggers: dict[tuple[str, str, str], str] = {}
        duplicates = 0
        for k, path in enumerate(self.paths):
            duplicates += self._index(k, path)
        n = len(self._offsets)
        partial = sum(1 for offs in self._offsets.values() if min(offs) < 0)
        if partial:
            self.notes.append(f"{partial} of {n} functions are missing from some day files: "
                              "zero invocations on those days (the union of the days)")
        if duplicates:
            self.notes.append(f"{duplicates} duplicated row(s) read once")
        self._durations = self._read_durations()
        self._memory = self._read_memory()

    @property
    def n_functions(self) -> int:
        return len(self._offsets)

    @property
    def n_minutes(self) -> int:
        return MINUTES_PER_DAY * len(self.days)

    def _index(self, k: int, path: Path) -> int:
        if path.suffix == ".gz":
            raise TraceFormatError(f"{path}: compressed day files cannot be read by seeking; "
                                   "extract them first")
        duplicates = 0
        with path.open("rb") as fh:
            header = _parse_csv_line(fh.readline(), path, 1)
            expected = ["HashOwner", "HashApp", "HashFunction", "Trigger"] + [
                str(m) for m in range(1, MINUTES_PER_DAY + 1)]
            if header != expected:
                raise TraceFormatError(
                    f"{path}: header must be HashOwner,HashApp,HashFunction,Trigger,1..1440, "
                    f"got {','.join(header[:6])}... ({len(header)} columns)")
            line = 1
            while True:
                offset = fh.tell()
                raw = fh.readline()
                if not raw:
                    break
                line += 1
                if not raw.strip():
                    continue
                parts = raw.split(b",", 4)
                if len(parts) < 5:
                    raise TraceFormatError(f"{path}: line {line}: fewer than 5 fields")
                key = (parts[0].decode(), parts[1].decode(), parts[2].decode())
                offs = self._offsets.get(key)
                if offs is None:
                    offs = [-1] * len(self.paths)
                    self._offsets[key] = offs
                    self._triggers[key] = parts[3].decode()
                if offs[k] >= 0:
                    if not np.array_equal(self._row(k, offs[k]), self._parse(path, raw, line)):
                        raise TraceFormatError(
                            f"{path}: line {line}: function {key[2]} appears twice with "
                            "different counts")
                    duplicates += 1
                    continue
                offs[k] = offset
        return duplicates

    def _parse(self, path: Path, raw: bytes, line: int) -> np.ndarray:
        row = _parse_csv_line(raw, path, line)
        if len(row) != 4 + MINUTES_PER_DAY:
            raise TraceFormatError(
                f"{path}: line {line} has {len(row)} fields, the header has {4 + MINUTES_PER_DAY}")
        try:
            counts = np.array([int(v) for v in row[4:]], dtype=np.int64)
        except ValueError as exc:
            raise TraceFormatError(f"{path}: line {line}: {exc}") from exc
        if np.any(counts < 0):
            raise TraceFormatError(f"{path}: line {line}: a negative count")
        return counts

    def _row(self, k: int, offset: int) -> np.ndarray:
        path = self.paths[k]
        with path.open("rb") as fh:
            fh.seek(offset)
            return self._parse(path, fh.readline(), -1)

    def _profile_rows(
        self, kind: str, columns: tuple[str, ...],
    ) -> Iterator[tuple[Path, int, list[str], list[int]]]:
        """``(path, row number, row, indices of columns)`` of every day's ``kind`` file."""
        for day in self.days:
            path = self.directory / f"{kind}.anon.d{day:02d}.csv"
            if not path.exists():
                continue
            with path.open(newline="") as fh:
                reader = csv.reader(fh)
                header = next(reader, [])
                try:
                    cols = [header.index(c) for c in columns]
                except ValueError as exc:
                    raise TraceFormatError(f"{path}: missing column ({exc})") from exc
                for r, row in enumerate(reader, start=2):
                    yield path, r, row, cols

    def _read_durations(self) -> dict[tuple[str, str, str], tuple[np.ndarray, int]]:
        best: dict[tuple[str, str, str], tuple[np.ndarray, int]] = {}
        names = ("HashOwner", "HashApp", "HashFunction", "Count", *_DURATION_COLUMNS)
        for path, r, row, cols in self._profile_rows("function_durations_percentiles", names):
            try:
                key = (row[cols[0]], row[cols[1]], row[cols[2]])
                count = int(float(row[cols[3]]))
                pct = np.array([float(row[c]) for c in cols[4:]])
            except (ValueError, IndexError) as exc:
                raise TraceFormatError(f"{path}: row {r}: {exc}") from exc
            if count < 0 or np.any(pct < 0) or np.any(np.diff(pct) < 0):
                raise TraceFormatError(f"{path}: row {r}: Count must be >= 0 and "
                                       "percentiles >= 0 and non-decreasing")
            if key in self._offsets and (key not in best or count > best[key][1]):
                best[key] = (pct, count)
        return best

    def _read_memory(self) -> dict[tuple[str, str], float]:
        memory: dict[tuple[str, str], float] = {}
        names = ("HashOwner", "HashApp", "AverageAllocatedMb_pct99")
        for path, r, row, cols in self._profile_rows("app_memory_percentiles", names):
            try:
                memory.setdefault((row[cols[0]], row[cols[1]]), float(row[cols[2]]))
            except (ValueError, IndexError) as exc:
                raise TraceFormatError(f"{path}: row {r}: {exc}") from exc
        return memory

    def __iter__(self) -> Iterator[FunctionSeries]:
        skipped = skipped_inv = 0
        for key, offs in self._offsets.items():
            counts = np.zeros(self.n_minutes, dtype=np.int64)
            for k, off in enumerate(offs):
                if off >= 0:
                    counts[k * MINUTES_PER_DAY:(k + 1) * MINUTES_PER_DAY] = self._row(k, off)
            prof = self._durations.get(key)
            mem = self._memory.get(key[:2])
            if prof is None or mem is None:
                if not self.skip_unprofiled:
                    what = "duration" if prof is None else "memory"
                    raise TraceFormatError(
                        f"{self.directory}: function {key[2]} has no {what} row in any day "
                        "file (skip_unprofiled=True skips such functions)")
                skipped += 1
                skipped_inv += int(counts.sum())
                continue
            yield FunctionSeries(
                function_id=key[2], trigger=self._triggers[key], counts=counts,
                duration_pct_ms=prof[0], memory_mb=lambda_memory_mb(mem), duration_count=prof[1])
        if skipped:
            self.notes.append(f"{skipped} function(s) without a duration or memory row skipped "
                              f"({skipped_inv:,} invocations)")


def parquet_schema() -> Any:
    """``pyarrow.Schema`` of a shard: ``function_id`` string, ``trigger`` string,
    ``memory_mb`` int64 (Lambda MB), ``duration_count`` int64 (nullable: unknown),
    ``duration_pct_ms`` fixed list of 7 float64 (ms at 0, 1, 25, 50, 75, 99, 100 %),
    ``counts`` list of int64 (invocations per minute, the same length in every row)."""
    import pyarrow as pa

    return pa.schema([
        ("function_id", pa.string()), ("trigger", pa.string()), ("memory_mb", pa.int64()),
        ("duration_count", pa.int64()), ("duration_pct_ms", pa.list_(pa.float64(), 7)),
        ("counts", pa.list_(pa.int64())),
    ])


def write_parquet_shards(series: Iterable[FunctionSeries], directory: Path, *,
                         functions_per_shard: int = 1000) -> list[Path]:
    """Write ``series`` as ``part-NNNNN.parquet`` shards of ``functions_per_shard`` rows
    (streamed: one shard in memory at a time). Returns the paths written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if functions_per_shard < 1:
        raise ValueError(f"functions_per_shard must be >= 1, got {functions_per_shard}")
    directory.mkdir(parents=True, exist_ok=True)
    schema = parquet_schema()
    paths: list[Path] = []
    batch: list[FunctionSeries] = []

    def flush() -> None:
        table = pa.table({
            "function_id": [s.function_id for s in batch], "trigger": [s.trigger for s in batch],
            "memory_mb": [int(s.memory_mb) for s in batch],
            "duration_count": [s.duration_count for s in batch],
            "duration_pct_ms": [np.asarray(s.duration_pct_ms, dtype=float).tolist()
                                for s in batch],
            "counts": [np.asarray(s.counts, dtype=np.int64) for s in batch],
        }, schema=schema)
        path = directory / f"part-{len(paths):05d}.parquet"
        pq.write_table(table, path)
        paths.append(path)
        batch.clear()

    for s in series:
        batch.append(s)
        if len(batch) >= functions_per_shard:
            flush()
    if batch:
        flush()
    return paths


def iter_parquet_series(source: Path | Iterable[Path], *,
                        batch_rows: int = 64) -> Iterator[FunctionSeries]:
    """The functions of Parquet shards (a directory of ``*.parquet`` or a list of files),
    ``batch_rows`` rows read at a time.

    Raises
    ------
    FileNotFoundError
        No shard.
    TraceFormatError
        A shard's schema is not ``parquet_schema()`` (the message lists expected and found
        columns), a function appears twice, series of different lengths, or bad values.
    """
    import pyarrow.parquet as pq

    if isinstance(source, Path):
        paths = sorted(source.glob("*.parquet")) if source.is_dir() else [source]
    else:
        paths = list(source)
    if not paths:
        raise FileNotFoundError(f"{source}: no .parquet shard")
    expected = parquet_schema()
    seen: set[str] = set()
    n_minutes: int | None = None
    for path in paths:
        pf = pq.ParquetFile(path)
        got = pf.schema_arrow
        if [(f.name, f.type) for f in got] != [(f.name, f.type) for f in expected]:
            raise TraceFormatError(
                f"{path}: wrong Parquet schema; expected "
                f"{', '.join(f'{f.name}: {f.type}' for f in expected)}; got "
                f"{', '.join(f'{f.name}: {f.type}' for f in got)}")
        for batch in pf.iter_batches(batch_size=batch_rows):
            cols = batch.to_pydict()
            for r, fid in enumerate(cols["function_id"]):
                if fid is None or fid in seen:
                    raise TraceFormatError(f"{path}: function {fid!r} is null or appears twice")
                seen.add(fid)
                counts = np.asarray(cols["counts"][r], dtype=np.int64)
                pct = np.asarray(cols["duration_pct_ms"][r], dtype=float)
                mem = cols["memory_mb"][r]
                if n_minutes is None:
                    n_minutes = counts.shape[0]
                if counts.shape[0] != n_minutes or np.any(counts < 0):
                    raise TraceFormatError(f"{path}: {fid}: counts must be >= 0 and "
                                           f"{n_minutes} long, got {counts.shape[0]}")
                if mem is None or np.any(np.isnan(pct)) or np.any(np.diff(pct) < 0):
                    raise TraceFormatError(f"{path}: {fid}: memory_mb missing or duration "
                                           "percentiles not non-decreasing")
                yield FunctionSeries(
                    function_id=fid, trigger=cols["trigger"][r] or "unknown", counts=counts,
                    duration_pct_ms=pct, memory_mb=int(mem),
                    duration_count=cols["duration_count"][r])
