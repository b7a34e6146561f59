"""The Azure Functions 2019 trace: reader, arrival spreading and duration sampling.

Pure apart from the file readers (``load_trace``), which take paths and read nothing else.

References
----------
M. Shahrad et al., "Serverless in the Wild: Characterizing and Optimizing the Serverless
Workload at a Large Cloud Provider", USENIX ATC 2020. Data: Azure Public Dataset, CC-BY 4.0.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from warmers.simulator.constants import LAMBDA_MAX_MEMORY_MB, LAMBDA_MIN_MEMORY_MB

# One error for a malformed Azure 2019 trace, the control plane's reader's, re-exported for the
# simulator's callers (the "as" makes the re-export explicit to mypy)
from warmers.traces import TraceFormatError as TraceFormatError  # noqa: PLC0414

MINUTE_MS = 60_000.0

#: Percentile levels of ``azure2019_durations.csv`` (``percentile_Average_{0,1,25,50,75,99,100}``).
DURATION_LEVELS = np.array([0.0, 0.01, 0.25, 0.50, 0.75, 0.99, 1.0])
_DURATION_COLUMNS = [f"percentile_Average_{p}" for p in (0, 1, 25, 50, 75, 99, 100)]


@dataclass(frozen=True, eq=False)
class Trace:
    """Per-minute invocation counts of many functions, with duration and memory profiles.

    Attributes
    ----------
    function_ids : tuple[str, ...]
        ``(n_functions,)`` HashFunction (or row label) of each function.
    triggers : tuple[str, ...]
        ``(n_functions,)`` trigger type (``http``, ``timer``, ...; ``unknown`` when absent).
    counts : np.ndarray
        ``(n_functions, n_minutes)`` int64 invocations per minute.
    duration_pct_ms : np.ndarray
        ``(n_functions, 7)`` float64 duration percentiles in ms at ``DURATION_LEVELS``.
    memory_mb : np.ndarray
        ``(n_functions,)`` int64 configured Lambda memory in MB (see ``lambda_memory_mb``).
    first_minute : int
        Minute of day of column 0 (480 for the shipped 08:00-15:59 subset).
    duration_count : np.ndarray or None
        ``(n_functions,)`` int64 executions behind the duration percentiles (the durations
        file's ``Count``, a whole day); None when unknown (see ``sample_durations``).
    """

    function_ids: tuple[str, ...]
    triggers: tuple[str, ...]
    counts: np.ndarray
    duration_pct_ms: np.ndarray
    memory_mb: np.ndarray
    first_minute: int = 0
    duration_count: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.function_ids)
        if self.counts.ndim != 2 or self.counts.shape[0] != n:
            raise ValueError(f"counts must have shape ({n}, n_minutes), got {self.counts.shape}")
        if self.duration_pct_ms.shape != (n, len(DURATION_LEVELS)):
            raise ValueError(
                f"duration_pct_ms must have shape ({n}, 7), got {self.duration_pct_ms.shape}"
            )
        if self.memory_mb.shape != (n,) or len(self.triggers) != n:
            raise ValueError("memory_mb and triggers need one entry per function")
        if np.any(self.counts < 0):
            raise ValueError("invocation counts must be >= 0")
        if np.any(np.diff(self.duration_pct_ms, axis=1) < 0) or np.any(self.duration_pct_ms < 0):
            raise ValueError("duration percentiles must be >= 0 and non-decreasing")
        if self.duration_count is not None and (
            self.duration_count.shape != (n,) or np.any(self.duration_count < 0)
        ):
            raise ValueError("duration_count needs one count >= 0 per function")

    @property
    def n_functions(self) -> int:
        return len(self.function_ids)

    @property
    def n_minutes(self) -> int:
        return int(self.counts.shape[1])

    def select(self, index: np.ndarray | list[int]) -> Trace:
        """A trace holding only the functions at ``index`` (same minutes)."""
        idx = np.asarray(index, dtype=int)
        return Trace(
            function_ids=tuple(self.function_ids[i] for i in idx),
            triggers=tuple(self.triggers[i] for i in idx),
            counts=self.counts[idx],
            duration_pct_ms=self.duration_pct_ms[idx],
            memory_mb=self.memory_mb[idx],
            first_minute=self.first_minute,
            duration_count=None if self.duration_count is None else self.duration_count[idx],
        )


def lambda_memory_mb(allocated_mb: float) -> int:
    """Lambda memory setting for a function that allocated ``allocated_mb`` on Azure.

    Rounded up to a whole MB and clamped to Lambda's 128-10,240 MB range.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html
    """
    if not math.isfinite(allocated_mb) or allocated_mb < 0:
        raise ValueError(f"allocated memory must be a finite number >= 0 MB, got {allocated_mb}")
    return int(min(LAMBDA_MAX_MEMORY_MB, max(LAMBDA_MIN_MEMORY_MB, math.ceil(allocated_mb))))


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", newline="") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceFormatError(f"{path}: cannot read as CSV ({exc})") from exc
    if not rows:
        raise TraceFormatError(f"{path}: empty file, expected a header row")
    return rows[0], rows[1:]


def load_trace(directory: Path, *, prefix: str = "azure2019_") -> Trace:
    """Read ``<prefix>invocations.csv``, ``durations.csv`` and ``memory.csv`` from ``directory``.

    Functions missing from the duration or memory file are an error (the shipped subset has
    all three for every function). Memory is ``AverageAllocatedMb_pct99`` rounded up to a
    Lambda setting.

    Raises
    ------
    FileNotFoundError
        A file is missing.
    TraceFormatError
        A header or a value does not follow the Azure 2019 format; the message names the file,
        row and column.
    """
    inv_path = directory / f"{prefix}invocations.csv"
    header, rows = _read_csv(inv_path)
    if header[:3] != ["HashOwner", "HashApp", "HashFunction"]:
        raise TraceFormatError(
            f"{inv_path}: header must start HashOwner,HashApp,HashFunction, got {header[:3]}"
        )
    has_trigger = len(header) > 3 and header[3] == "Trigger"
    first_col = 4 if has_trigger else 3
    minute_cols = header[first_col:]
    try:
        first_minute = int(minute_cols[0])
    except (IndexError, ValueError) as exc:
        raise TraceFormatError(f"{inv_path}: no minute columns after the hashes") from exc
    ids: list[str] = []
    triggers: list[str] = []
    counts = np.zeros((len(rows), len(minute_cols)), dtype=np.int64)
    for r, row in enumerate(rows):
        if len(row) != len(header):
            raise TraceFormatError(
                f"{inv_path}: row {r + 2} has {len(row)} fields, the header has {len(header)}"
            )
        ids.append(row[2])
        triggers.append(row[3] if has_trigger else "unknown")
        try:
            counts[r] = [int(v) for v in row[first_col:]]
        except ValueError as exc:
            raise TraceFormatError(f"{inv_path}: row {r + 2}: {exc}") from exc
    if np.any(counts < 0):
        bad = int(np.argwhere(counts < 0)[0][0])
        raise TraceFormatError(f"{inv_path}: row {bad + 2} has a negative count")

    dur_path = directory / f"{prefix}durations.csv"
    dheader, drows = _read_csv(dur_path)
    try:
        hcol = dheader.index("HashFunction")
        pcols = [dheader.index(c) for c in _DURATION_COLUMNS]
        ccol = dheader.index("Count")
    except ValueError as exc:
        raise TraceFormatError(f"{dur_path}: missing column ({exc})") from exc
    durations: dict[str, list[float]] = {}
    executions: dict[str, int] = {}
    for r, row in enumerate(drows):
        try:
            durations[row[hcol]] = [float(row[c]) for c in pcols]
            executions[row[hcol]] = int(float(row[ccol]))
        except (ValueError, IndexError) as exc:
            raise TraceFormatError(f"{dur_path}: row {r + 2}: {exc}") from exc
        if executions[row[hcol]] < 0:
            raise TraceFormatError(f"{dur_path}: row {r + 2}: Count must be >= 0")

    mem_path = directory / f"{prefix}memory.csv"
    mheader, mrows = _read_csv(mem_path)
    try:
        # The subset's memory rows are keyed by function (first column).
        mkey = mheader.index("HashFunction")
        mcol = mheader.index("AverageAllocatedMb_pct99")
    except ValueError as exc:
        raise TraceFormatError(f"{mem_path}: missing column ({exc})") from exc
    memory: dict[str, float] = {}
    for r, row in enumerate(mrows):
        try:
            memory[row[mkey]] = float(row[mcol])
        except (ValueError, IndexError) as exc:
            raise TraceFormatError(f"{mem_path}: row {r + 2}: {exc}") from exc

    missing = [f for f in ids if f not in durations or f not in memory]
    if missing:
        raise TraceFormatError(
            f"{len(missing)} function(s) of {inv_path.name} have no duration or memory row, "
            f"first {missing[0]}"
        )
    return Trace(
        function_ids=tuple(ids),
        triggers=tuple(triggers),
        counts=counts,
        duration_pct_ms=np.array([durations[f] for f in ids], dtype=float),
        memory_mb=np.array([lambda_memory_mb(memory[f]) for f in ids], dtype=np.int64),
        first_minute=first_minute,
        duration_count=np.array([executions[f] for f in ids], dtype=np.int64),
    )


def function_seed(function_id: str, seed: int) -> int:
    """A stable 63-bit RNG seed per function, independent of the function's position."""
    digest = hashlib.sha256(f"{seed}:{function_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def spread_arrivals(counts_per_min: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Arrival times spread uniformly at random within each minute.

    Parameters
    ----------
    counts_per_min : np.ndarray
        ``(n_minutes,)`` non-negative integer invocations per minute.
    rng : np.random.Generator
        Seeded generator (deterministic output for a given seed).

    Returns
    -------
    np.ndarray
        ``(counts.sum(),)`` float64 sorted arrival times in ms from the start of minute 0.

    Raises
    ------
    ValueError
        A count is negative or not an integer.
    """
    counts = np.asarray(counts_per_min)
    if counts.ndim != 1:
        raise ValueError(f"counts_per_min must be 1-D, got shape {counts.shape}")
    if not np.issubdtype(counts.dtype, np.integer):
        if np.any(counts != np.round(counts)):
            raise ValueError("counts_per_min must hold whole invocation counts")
        counts = counts.astype(np.int64)
    if np.any(counts < 0):
        raise ValueError("counts_per_min must be >= 0")
    minute = np.repeat(np.arange(counts.shape[0], dtype=np.float64), counts)
    times = (minute + rng.random(minute.shape[0])) * MINUTE_MS
    times.sort()
    return times


#: Quantile level of the trace's 99th percentile: the body of the sampler ends, its tail begins.
TAIL_LEVEL = 0.99
_Z_TAIL = NormalDist().inv_cdf(TAIL_LEVEL)


def max_level(executions: int) -> float:
    """Quantile level at which the largest of ``executions`` samples sits: ``N / (N + 1)``.

    That is the expected value of ``F(X_(N))`` for the maximum of ``N`` independent draws
    (the Weibull plotting position ``k / (N + 1)`` with ``k = N``), so the trace's 100th
    percentile is placed there rather than at level 1.

    References
    ----------
    E. J. Gumbel, *Statistics of Extremes*, Columbia University Press, 1958 (the plotting
    position ``E[F(X_(k))] = k / (N + 1)`` of the k-th smallest of N samples).
    """
    n = max(int(executions), 1)
    return n / (n + 1.0)


def sample_durations(
    percentiles_ms: np.ndarray, n: int, rng: np.random.Generator, *,
    executions: int | None = None,
) -> np.ndarray:
    """Durations drawn from the trace's percentiles: a piecewise-linear inverse CDF up to the
    99th percentile and a lognormal tail from the 99th percentile to the maximum.

    Body (levels 0 to 0.99): linear interpolation of the quantile function through the
    percentiles at 0, 1, 25, 50, 75 and 99 % (each given percentile is reproduced exactly).

    Tail (levels above 0.99): ``log d`` is linear in the normal score ``z = Phi^-1(u)``
    from ``(z(0.99), log p99)`` to ``(z(u_max), log p100)``, i.e. a lognormal tail matched to
    the 99th percentile and the maximum, where ``u_max = N / (N + 1)`` is where the largest of
    the ``N = executions`` samples behind the percentiles sits (``max_level``); levels above
    ``u_max`` give the maximum. A straight line from p99 at 0.99 to the maximum at level 1
    (the earlier sampler) puts half of the top 1 % above ``(p99 + max) / 2``: with a maximum
    far above p99 that makes ~0.5 % of requests slower than any but one real execution. The
    lognormal shape follows Shahrad et al. (USENIX ATC 2020, sec. 3, "Function Execution
    Times": a lognormal distribution fits the execution times well). The percentiles are the
    trace's weighted percentiles of per-interval average execution times (the dataset's
    ``percentile_Average_*``), used as per-request durations, as before.

    Parameters
    ----------
    percentiles_ms : np.ndarray
        ``(7,)`` duration in ms at the levels ``DURATION_LEVELS`` (0, 1, 25, 50, 75, 99, 100 %).
    n : int
        Number of samples.
    rng : np.random.Generator
        Seeded generator.
    executions : int, optional
        Executions the percentiles were computed from (the durations file's ``Count``);
        default ``n``.

    Returns
    -------
    np.ndarray
        ``(n,)`` float64 durations in ms; at least 1 ms (Lambda's billing step).

    Raises
    ------
    ValueError
        Percentiles of the wrong shape, negative or decreasing; ``executions < 0``.
    """
    pct = np.asarray(percentiles_ms, dtype=float)
    if pct.shape != DURATION_LEVELS.shape:
        raise ValueError(f"percentiles_ms must have shape (7,), got {pct.shape}")
    if np.any(pct < 0) or np.any(np.diff(pct) < 0):
        raise ValueError("duration percentiles must be >= 0 and non-decreasing")
    if executions is not None and executions < 0:
        raise ValueError(f"executions must be >= 0, got {executions}")
    u = rng.random(n)
    out = np.interp(u, DURATION_LEVELS, pct)
    tail = u > TAIL_LEVEL
    if np.any(tail):
        lo, hi = math.log(max(pct[5], 1.0)), math.log(max(pct[6], 1.0))
        z_max = NormalDist().inv_cdf(max_level(n if executions is None else executions))
        if hi > lo and z_max > _Z_TAIL:
            inv = NormalDist().inv_cdf
            z = np.array([inv(min(float(v), 1.0 - 1e-16)) for v in u[tail]])
            frac = np.clip((z - _Z_TAIL) / (z_max - _Z_TAIL), 0.0, 1.0)
            out[tail] = np.minimum(np.exp(lo + (hi - lo) * frac), pct[6])
        else:  # no room for a tail: every draw above p99 is p99 (or the maximum, if equal)
            out[tail] = pct[5]
    return np.asarray(np.maximum(out, 1.0), dtype=float)


@dataclass(frozen=True, eq=False)
class Workload:
    """One function's simulated requests.

    Attributes
    ----------
    function_id, trigger : str
    arrivals_ms : np.ndarray
        ``(n,)`` sorted arrival times in ms from the start of minute 0.
    durations_ms : np.ndarray
        ``(n,)`` warm execution time of each request in ms.
    counts : np.ndarray
        ``(n_minutes,)`` invocations per minute (the series a metrics source would report).
    memory_mb : int
        Lambda memory setting.
    sla_ms : float
        The latency SLA of this function's requests.
    p99_duration_ms : float
        The trace's 99th percentile duration.
    init_z : np.ndarray or None
        ``(n,)`` one standard normal per request: how slow its cold start would be
        (``engine.Controls.cold_start_sigma``); None: every cold start takes the median.
    concurrency_limit : int or None
        Invocations Lambda lets this function have in flight at once (its reserved
        concurrency, or the account's unreserved pool): one more is throttled (429) under every
        policy (``engine``). None: unbounded (hand-built workloads of unit tests).
    """

    function_id: str
    trigger: str
    arrivals_ms: np.ndarray
    durations_ms: np.ndarray
    counts: np.ndarray
    memory_mb: int
    sla_ms: float
    p99_duration_ms: float
    duration_pct_ms: np.ndarray | None = None
    init_z: np.ndarray | None = None
    concurrency_limit: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency_limit is not None and self.concurrency_limit < 1:
            raise ValueError(f"concurrency_limit must be >= 1 or None, got "
                             f"{self.concurrency_limit}")

    @property
    def n_minutes(self) -> int:
        return int(self.counts.shape[0])

    @property
    def horizon_ms(self) -> float:
        return self.n_minutes * MINUTE_MS


def make_workload(
    trace: Trace, i: int, *, seed: int, default_sla_ms: float, sla_duration_factor: float,
    concurrency_limit: int | None = None,
) -> Workload:
    """Requests of function ``i``: arrivals spread within minutes, durations from percentiles.

    The SLA is ``max(default_sla_ms, sla_duration_factor * p99 duration)``;
    ``concurrency_limit``: ``Workload.concurrency_limit``.
    """
    rng = np.random.default_rng(function_seed(trace.function_ids[i], seed))
    arrivals = spread_arrivals(trace.counts[i], rng)
    executions = None if trace.duration_count is None else int(trace.duration_count[i])
    durations = sample_durations(trace.duration_pct_ms[i], arrivals.shape[0], rng,
                                 executions=executions)
    init_z = standard_normals(rng.random(2 * arrivals.shape[0]))
    p99 = float(trace.duration_pct_ms[i][5])
    return Workload(
        function_id=trace.function_ids[i],
        trigger=trace.triggers[i],
        arrivals_ms=arrivals,
        durations_ms=durations,
        counts=trace.counts[i],
        memory_mb=int(trace.memory_mb[i]),
        sla_ms=max(default_sla_ms, sla_duration_factor * p99),
        p99_duration_ms=p99,
        duration_pct_ms=trace.duration_pct_ms[i],
        init_z=init_z,
        concurrency_limit=concurrency_limit,
    )


def standard_normals(u: np.ndarray) -> np.ndarray:
    """``(n,)`` standard normals from ``(2n,)`` uniforms in [0, 1), two per value (Box-Muller:
    ``sqrt(-2 ln(1 - u1)) cos(2 pi u2)``), so a time chunk of requests draws exactly its own
    uniforms (``stream.chunk_workloads``)."""
    u1, u2 = u[0::2], u[1::2]
    return np.asarray(np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2), dtype=float)


def demand_concurrency(workload: Workload) -> np.ndarray:
    """Peak number of requests in flight in each minute (warm durations, no init).

    This is what CloudWatch ``ConcurrentExecutions`` (Maximum) would show with every request
    served warm; policies read it only for minutes before the one they decide for.

    Returns
    -------
    np.ndarray
        ``(n_minutes,)`` int64.
    """
    n_min = workload.n_minutes
    a = workload.arrivals_ms
    if a.shape[0] == 0:
        return np.zeros(n_min, dtype=np.int64)
    e = a + workload.durations_ms
    times = np.concatenate([e, a])
    delta = np.concatenate([-np.ones_like(e), np.ones_like(a)])
    # ends before starts at equal times (an environment freed at t can take a request at t)
    order = np.lexsort((delta, times))
    level = np.cumsum(delta[order])
    t_sorted = times[order]
    minute = np.minimum((t_sorted // MINUTE_MS).astype(np.int64), n_min - 1)
    out = np.zeros(n_min, dtype=np.int64)
    np.maximum.at(out, minute, level.astype(np.int64))
    # a minute also holds the level carried over from the end of the previous one
    carried = np.zeros(n_min, dtype=np.int64)
    last_level = np.zeros(n_min, dtype=np.int64)
    # level at the end of each minute: the last event's level in that minute
    idx_last = np.searchsorted(minute, np.arange(n_min), side="right") - 1
    valid = idx_last >= 0
    last_level[valid] = level[idx_last[valid]]
    carried[1:] = last_level[:-1]
    return np.maximum(out, carried)


def mean_concurrency(workload: Workload) -> np.ndarray:
    """Mean number of requests in flight per minute (Little's law from the sampled requests).

    Returns
    -------
    np.ndarray
        ``(n_minutes,)`` float64: busy milliseconds started in each minute divided by 60,000.
    """
    minute = np.minimum(
        (workload.arrivals_ms // MINUTE_MS).astype(np.int64), workload.n_minutes - 1
    )
    busy = np.bincount(minute, weights=workload.durations_ms, minlength=workload.n_minutes)
    return busy / MINUTE_MS


def fullday_rows(path: Path, limit: int | None, max_daily_total: int | None):  # type: ignore[no-untyped-def]
    """``(row label, counts)`` of ``azure2019_fullday_union.csv.gz``, read row by row."""
    opener = gzip.open if path.suffix == ".gz" else open
    n = 0
    try:
        with opener(path, "rt", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise TraceFormatError(f"{path}: empty file, expected a header row")
            try:
                first = header.index("1")
                total_col = header.index("daily_total")
            except ValueError as exc:
                raise TraceFormatError(
                    f"{path}: expected daily_total and minute columns 1..1440") from exc
            for r, row in enumerate(reader):
                try:
                    if max_daily_total is not None and int(row[total_col]) > max_daily_total:
                        continue
                    counts = np.array([int(v) for v in row[first:]], dtype=np.int64)
                except (ValueError, IndexError) as exc:
                    raise TraceFormatError(f"{path}: row {r + 2}: {exc}") from exc
                if counts.shape[0] != len(header) - first or np.any(counts < 0):
                    raise TraceFormatError(f"{path}: row {r + 2}: expected "
                                           f"{len(header) - first} counts >= 0")
                yield f"fullday-{row[0]}", counts
                n += 1
                if limit is not None and n >= limit:
                    return
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise TraceFormatError(f"{path}: cannot read as CSV ({exc})") from exc


def load_fullday_trace(
    path: Path, profiles: Trace, *, limit: int, max_daily_total: int | None = None
) -> Trace:
    """Full-day series (1,440 minutes) from ``azure2019_fullday_union.csv.gz``.

    That file holds invocation counts only (re-anonymised row labels, no join to the duration
    and memory files), so each series borrows the duration percentiles and memory of the
    subset function ``profiles[i mod n]``; the output says so.

    Parameters
    ----------
    path : Path
        The ``.csv.gz`` (or ``.csv``) file.
    profiles : Trace
        Where durations and memory come from (the shipped 298-function subset).
    limit : int
        Most series read (file order), >= 1.
    max_daily_total : int, optional
        Series with more invocations a day are skipped (default: none skipped; the
        simulator's time chunks bound the memory of the busiest).

    Raises
    ------
    ValueError
        ``limit < 1`` or empty ``profiles``.
    TraceFormatError
        Header or values not in the documented layout.
    """
    if limit < 1 or profiles.n_functions == 0:
        raise ValueError("limit must be >= 1 and profiles must hold at least one function")
    ids: list[str] = []
    counts: list[np.ndarray] = []
    for label, c in fullday_rows(path, limit, max_daily_total):
        ids.append(label)
        counts.append(c)
    if not ids:
        raise TraceFormatError(f"{path}: no series with at most {max_daily_total} invocations")
    src = np.arange(len(ids)) % profiles.n_functions
    return Trace(
        function_ids=tuple(ids),
        triggers=tuple(f"unknown (profile of {profiles.function_ids[i][:8]})" for i in src),
        counts=np.asarray(counts, dtype=np.int64),
        duration_pct_ms=profiles.duration_pct_ms[src],
        memory_mb=profiles.memory_mb[src],
        first_minute=0,
        duration_count=None if profiles.duration_count is None else profiles.duration_count[src],
    )
