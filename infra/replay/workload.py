"""One trace function's slice as timed requests, and the history before it.

The arrivals and durations are the policy simulator's (``warmers.simulator.trace``): per-minute
counts spread uniformly at random within each minute, durations drawn from the trace's duration
percentiles, seeded per function, so ``warmstart replay`` and ``warmstart simulate`` see the same
requests for the same seed.

Time scale ``X``: the slice's minutes pass ``X`` times faster than real time, and each request's
simulated work (``tool_ms``) is its trace duration divided by ``X`` (``scale_durations=True``), so
the number of requests in flight, which cold starts and provisioned concurrency depend on,
matches the trace. Init, inference and overheads run in real time and are not scaled.

References
----------
M. Shahrad et al., "Serverless in the Wild", USENIX ATC 2020 (the trace; CC-BY 4.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from warmers.simulator.trace import (
    MINUTE_MS,
    Trace,
    TraceFormatError,
    demand_concurrency,
    load_trace,
    make_workload,
)

#: Longest simulated tool call sent with one request (the agent bounds it too), ms.
MAX_TOOL_MS = 10_000.0
#: Shortest hash prefix accepted for ``--function``.
MIN_PREFIX_CHARS = 6
_INVOCATIONS_SUFFIX = "invocations.csv"


class ReplayInputError(ValueError):
    """The trace, function or slice cannot be replayed; the message says what to change."""


@dataclass(frozen=True, eq=False)
class ReplayWorkload:
    """The requests of one function's slice.

    Attributes
    ----------
    function_id, trigger : str
        Trace hash and trigger of the function.
    start_minute, minutes : int
        Slice: column offset into the trace file (0 = its first minute column) and length.
    minute_label : int
        Minute-of-day label of the slice's first column (as in the trace header).
    arrivals_ms : np.ndarray
        ``(n,)`` sorted arrival times in trace ms from the start of the slice.
    durations_ms : np.ndarray
        ``(n,)`` trace duration of each request in ms.
    counts : np.ndarray
        ``(minutes,)`` invocations per minute of the slice.
    concurrency : np.ndarray
        ``(minutes,)`` peak requests in flight per minute of the slice with the trace's durations
        (what the forecaster aims at).
    history_counts, history_concurrency, history_duration_ms : np.ndarray
        ``(h,)`` per-minute invocations, peak concurrency and mean duration (ms, NaN for empty
        minutes) of the ``h`` trace minutes just before the slice (what CloudWatch would hold).
    duration_pct_ms : np.ndarray
        ``(7,)`` the trace's duration percentiles (ms).
    trace_memory_mb : int
        Memory the function used on Azure, rounded up to a Lambda setting.
    """

    function_id: str
    trigger: str
    start_minute: int
    minutes: int
    minute_label: int
    arrivals_ms: np.ndarray
    durations_ms: np.ndarray
    counts: np.ndarray
    concurrency: np.ndarray
    history_counts: np.ndarray
    history_concurrency: np.ndarray
    history_duration_ms: np.ndarray
    duration_pct_ms: np.ndarray
    trace_memory_mb: int

    @property
    def n_requests(self) -> int:
        return int(self.arrivals_ms.shape[0])

    def tool_ms(self, time_scale: float, *, scale_durations: bool = True) -> np.ndarray:
        """Simulated work per request in real ms: trace duration (divided by the time scale).

        Returns
        -------
        np.ndarray
            ``(n,)`` float64 in ``[0, MAX_TOOL_MS]``.
        """
        work = self.durations_ms / time_scale if scale_durations else self.durations_ms
        return np.clip(work, 0.0, MAX_TOOL_MS)

    def real_offsets_s(self, time_scale: float) -> np.ndarray:
        """``(n,)`` real seconds from the replay start at which each request is sent."""
        return self.arrivals_ms / 1000.0 / time_scale


def trace_location(path: Path) -> tuple[Path, str]:
    """Directory and file prefix of a trace given as its invocations file or its directory.

    ``tests/data/traces/azure2019_invocations.csv`` -> (``tests/data/traces``, ``azure2019_``);
    ``tests/data/traces/azure2019_fullday_realhash`` -> (that directory, ``""``).

    Raises
    ------
    ReplayInputError
        If the path does not exist or is not an ``*invocations.csv`` file or a directory with one.
    """
    path = Path(path)
    if not path.exists():
        raise ReplayInputError(f"trace file {path} does not exist; give an Azure 2019 "
                               f"'*{_INVOCATIONS_SUFFIX}' file, e.g. "
                               "tests/data/traces/azure2019_invocations.csv")
    if path.is_dir():
        found = sorted(path.glob(f"*{_INVOCATIONS_SUFFIX}"))
        if len(found) != 1:
            raise ReplayInputError(f"{path} holds {len(found)} '*{_INVOCATIONS_SUFFIX}' files; "
                                   "give the invocations file itself")
        path = found[0]
    if not path.name.endswith(_INVOCATIONS_SUFFIX):
        raise ReplayInputError(f"{path.name} is not an Azure 2019 invocations file "
                               f"('*{_INVOCATIONS_SUFFIX}' with its durations and memory files "
                               "beside it)")
    return path.parent, path.name[: -len(_INVOCATIONS_SUFFIX)]


def read_trace(path: Path) -> Trace:
    """Load the trace (invocations + durations + memory) that ``path`` names.

    Raises
    ------
    ReplayInputError
        Missing files or a file not in the Azure 2019 format.
    """
    directory, prefix = trace_location(path)
    try:
        return load_trace(directory, prefix=prefix)
    except FileNotFoundError as exc:
        raise ReplayInputError(f"trace file missing: {exc.filename} (the durations and memory "
                               "files must sit beside the invocations file)") from exc
    except TraceFormatError as exc:
        raise ReplayInputError(f"trace not in the Azure 2019 format: {exc}") from exc


def find_function(trace: Trace, function: str) -> int:
    """Index of the function whose hash is ``function`` or starts with it (unique prefix).

    Raises
    ------
    ReplayInputError
        Unknown hash, a prefix shorter than ``MIN_PREFIX_CHARS``, or an ambiguous prefix.
    """
    function = function.strip()
    if function in trace.function_ids:
        return trace.function_ids.index(function)
    if len(function) < MIN_PREFIX_CHARS:
        raise ReplayInputError(f"--function: {function!r} is not a hash in the trace; give the full "
                               f"HashFunction or a prefix of at least {MIN_PREFIX_CHARS} characters")
    hits = [i for i, f in enumerate(trace.function_ids) if f.startswith(function)]
    if not hits:
        raise ReplayInputError(f"--function: no function {function!r} in the trace ({trace.n_functions} "
                               "functions); pick a HashFunction from its invocations file")
    if len(hits) > 1:
        raise ReplayInputError(f"--function: prefix {function!r} matches {len(hits)} functions; give more "
                               "characters")
    return hits[0]


def build_workload(trace: Trace, function: str, *, start_minute: int = 0,
                   minutes: int | None = None, history_min: int = 360,
                   seed: int = 0) -> ReplayWorkload:
    """The requests of ``function`` in minutes ``[start_minute, start_minute + minutes)``.

    Parameters
    ----------
    trace : Trace
    function : str
        HashFunction or a unique prefix of it.
    start_minute : int
        Column offset into the trace (0-based).
    minutes : int, optional
        Slice length; default: to the end of the trace.
    history_min : int
        Trace minutes before the slice kept as metric history for the warmer's forecaster.
    seed : int
        Arrival/duration seed (the simulator's).

    Raises
    ------
    ReplayInputError
        Unknown function, a slice outside the trace, or a slice without any invocation.
    """
    i = find_function(trace, function)
    n = trace.n_minutes
    if minutes is None:
        minutes = n - start_minute
    if not 0 <= start_minute < n:
        raise ReplayInputError(f"--start-minute {start_minute} is outside the trace (0..{n - 1})")
    if minutes < 1 or start_minute + minutes > n:
        raise ReplayInputError(f"--minutes {minutes} from minute {start_minute} leaves the trace "
                               f"({n} minutes); use 1..{n - start_minute}")
    full = make_workload(trace, i, seed=seed, default_sla_ms=0.0, sla_duration_factor=1.0)
    lo_ms, hi_ms = start_minute * MINUTE_MS, (start_minute + minutes) * MINUTE_MS
    pick = (full.arrivals_ms >= lo_ms) & (full.arrivals_ms < hi_ms)
    if not pick.any():
        raise ReplayInputError(
            f"function {trace.function_ids[i][:12]}... has no invocation in minutes "
            f"{start_minute}..{start_minute + minutes - 1}: the slice is empty; pick another "
            "--start-minute/--minutes")
    h0 = max(0, start_minute - history_min)
    conc = demand_concurrency(full)
    minute_of = np.minimum((full.arrivals_ms // MINUTE_MS).astype(np.int64), n - 1)
    busy = np.bincount(minute_of, weights=full.durations_ms, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_dur = np.where(full.counts > 0, busy / np.maximum(full.counts, 1), np.nan)
    return ReplayWorkload(
        function_id=trace.function_ids[i],
        trigger=trace.triggers[i],
        start_minute=start_minute,
        minutes=minutes,
        minute_label=trace.first_minute + start_minute,
        arrivals_ms=full.arrivals_ms[pick] - lo_ms,
        durations_ms=full.durations_ms[pick],
        counts=full.counts[start_minute:start_minute + minutes].copy(),
        concurrency=conc[start_minute:start_minute + minutes].astype(float),
        history_counts=full.counts[h0:start_minute].astype(float),
        history_concurrency=conc[h0:start_minute].astype(float),
        history_duration_ms=mean_dur[h0:start_minute],
        duration_pct_ms=trace.duration_pct_ms[i].copy(),
        trace_memory_mb=int(trace.memory_mb[i]),
    )
