"""One function at a time: its series, its requests generated in time chunks, its metrics.

The simulator never holds more than one function's per-minute series and one time chunk of its
requests. A function's requests are drawn from the same random streams as
``trace.make_workload`` (arrivals first, then durations, from one PCG64 generator seeded by
``function_seed``): a chunk's draws are reached by advancing the generator
(``PCG64.advance``: one step per float64 draw), so any cut into chunks reproduces the unsplit
requests bit for bit.

References
----------
PCG64 ``advance``: https://numpy.org/doc/stable/reference/random/bit_generators/pcg64.html
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from warmers.simulator.policies import Observed
from warmers.simulator.trace import (
    MINUTE_MS,
    Trace,
    Workload,
    fullday_rows,
    function_seed,
    sample_durations,
    standard_normals,
)

#: Default most invocations in one time chunk (~100 bytes a request in the engine: ~50 MB).
CHUNK_INVOCATIONS = 500_000


@dataclass(frozen=True, eq=False)
class FunctionSeries:
    """One function of a trace: per-minute invocations and its duration and memory profile.

    Attributes
    ----------
    function_id, trigger : str
    counts : np.ndarray
        ``(n_minutes,)`` int64 invocations per minute.
    duration_pct_ms : np.ndarray
        ``(7,)`` float64 duration percentiles in ms at ``trace.DURATION_LEVELS``.
    memory_mb : int
        Lambda memory setting.
    duration_count : int or None
        Executions behind the percentiles (``Count``); None when unknown.
    """

    function_id: str
    trigger: str
    counts: np.ndarray
    duration_pct_ms: np.ndarray
    memory_mb: int
    duration_count: int | None = None

    @property
    def invocations(self) -> int:
        return int(self.counts.sum())


def series_of_trace(trace: Trace) -> Iterator[FunctionSeries]:
    """The functions of an in-memory ``Trace``, in order."""
    for i in range(trace.n_functions):
        yield FunctionSeries(
            function_id=trace.function_ids[i], trigger=trace.triggers[i],
            counts=trace.counts[i], duration_pct_ms=trace.duration_pct_ms[i],
            memory_mb=int(trace.memory_mb[i]),
            duration_count=None if trace.duration_count is None else int(trace.duration_count[i]),
        )


def chunk_bounds(counts: np.ndarray, max_invocations: int) -> list[tuple[int, int]]:
    """Cut a series into consecutive minute ranges ``[m0, m1)`` of at most ``max_invocations``
    invocations each (a single minute above the bound is a chunk of its own).

    Raises
    ------
    ValueError
        ``max_invocations < 1``.
    """
    if max_invocations < 1:
        raise ValueError(f"max_invocations must be >= 1, got {max_invocations}")
    counts = np.asarray(counts, dtype=np.int64)
    n = counts.shape[0]
    if n == 0:
        return [(0, 0)]
    cum = np.concatenate([[0], np.cumsum(counts)])
    bounds: list[tuple[int, int]] = []
    m0 = 0
    while m0 < n:
        # last m1 with cum[m1] - cum[m0] <= max_invocations, at least one minute
        m1 = int(np.searchsorted(cum, cum[m0] + max_invocations, side="right")) - 1
        m1 = min(max(m1, m0 + 1), n)
        bounds.append((m0, m1))
        m0 = m1
    return bounds


def _advanced(seed_state: Any, steps: int) -> np.random.Generator:
    bg = np.random.PCG64()
    bg.state = seed_state
    bg.advance(steps)
    return np.random.Generator(bg)


#: Concurrency Lambda allows a function by default: the account's quota of concurrent
#: executions, 1,000 per Region, the function alone in it
#: (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
DEFAULT_CONCURRENCY_LIMIT = 1000


@dataclass(frozen=True)
class WorkloadSpec:
    """How a series becomes requests: the seed, the SLA rule of ``trace.make_workload`` and
    the concurrency limit every policy's requests meet (``Workload.concurrency_limit``)."""

    seed: int
    default_sla_ms: float
    sla_duration_factor: float
    concurrency_limit: int | None = DEFAULT_CONCURRENCY_LIMIT
    #: added to every SLA, ms (a validation variant: the warm p99 plus a share of the init)
    sla_extra_ms: float = 0.0


def empty_workload(s: FunctionSeries, spec: WorkloadSpec) -> Workload:
    """The function's ``Workload`` without requests (what policies read: counts, SLA, profile)."""
    p99 = float(s.duration_pct_ms[5])
    return Workload(
        function_id=s.function_id, trigger=s.trigger, arrivals_ms=np.zeros(0),
        durations_ms=np.zeros(0), counts=s.counts, memory_mb=int(s.memory_mb),
        sla_ms=max(spec.default_sla_ms, spec.sla_duration_factor * p99) + spec.sla_extra_ms,
        p99_duration_ms=p99,
        duration_pct_ms=s.duration_pct_ms, concurrency_limit=spec.concurrency_limit,
    )


def chunk_workloads(
    s: FunctionSeries, spec: WorkloadSpec, bounds: list[tuple[int, int]],
) -> Iterator[Workload]:
    """The requests of each chunk of ``bounds`` (``counts`` stays the whole series), equal to
    the slices of ``trace.make_workload``'s requests at the chunk's minutes."""
    base = empty_workload(s, spec)
    counts = np.asarray(s.counts, dtype=np.int64)
    total = int(counts.sum())
    cum = np.concatenate([[0], np.cumsum(counts)])
    state = np.random.default_rng(function_seed(s.function_id, spec.seed)).bit_generator.state
    executions = total if s.duration_count is None else int(s.duration_count)
    for m0, m1 in bounds:
        before, n = int(cum[m0]), int(cum[m1] - cum[m0])
        minute = np.repeat(np.arange(m0, m1, dtype=np.float64), counts[m0:m1])
        arrivals = (minute + _advanced(state, before).random(n)) * MINUTE_MS
        arrivals.sort()
        durations = sample_durations(s.duration_pct_ms, n, _advanced(state, total + before),
                                     executions=executions)
        init_z = standard_normals(_advanced(state, 2 * total + 2 * before).random(2 * n))
        yield Workload(
            function_id=base.function_id, trigger=base.trigger, arrivals_ms=arrivals,
            durations_ms=durations, counts=s.counts, memory_mb=base.memory_mb,
            sla_ms=base.sla_ms, p99_duration_ms=base.p99_duration_ms,
            duration_pct_ms=s.duration_pct_ms, init_z=init_z,
            concurrency_limit=base.concurrency_limit,
        )


def observe_chunks(chunks: Iterator[Workload], bounds: list[tuple[int, int]],
                   n_minutes: int) -> Observed:
    """``Observed.from_workload`` computed one chunk at a time (requests in flight at a cut are
    carried into the next chunk); equal to it on the unsplit requests."""
    invocations = np.zeros(n_minutes, dtype=np.int64)
    busy = np.zeros(n_minutes)
    peak = np.zeros(n_minutes, dtype=np.int64)
    carried = np.zeros(0)
    for w, (m0, m1) in zip(chunks, bounds, strict=True):
        a, d = w.arrivals_ms, w.durations_ms
        span = m1 - m0
        if span == 0:
            continue
        minute = np.minimum((a // MINUTE_MS).astype(np.int64), n_minutes - 1)
        invocations[m0:m1] = np.bincount(minute - m0, minlength=span)
        busy[m0:m1] = np.bincount(minute - m0, weights=d, minlength=span)
        ends = np.concatenate([carried, a + d])
        level0 = carried.shape[0]
        if m1 < n_minutes:
            cut = m1 * MINUTE_MS
            carried, ends = ends[ends >= cut], ends[ends < cut]
        else:
            carried = np.zeros(0)
        # the level just before the chunk: requests started earlier, still in flight
        times = np.concatenate([ends, a])
        delta = np.concatenate([-np.ones_like(ends), np.ones_like(a)])
        order = np.lexsort((delta, times))
        level = (level0 + np.cumsum(delta[order])).astype(np.int64)
        ev_min = np.minimum((times[order] // MINUTE_MS).astype(np.int64), n_minutes - 1) - m0
        out = np.zeros(span, dtype=np.int64)
        if level.shape[0]:
            np.maximum.at(out, ev_min, level)
        last = np.full(span, level0, dtype=np.int64)
        idx_last = np.searchsorted(ev_min, np.arange(span), side="right") - 1
        valid = idx_last >= 0
        last[valid] = level[idx_last[valid]]
        prev = np.concatenate([[level0], last[:-1]])
        peak[m0:m1] = np.maximum(out, prev)
    with np.errstate(invalid="ignore", divide="ignore"):
        dur = np.where(invocations > 0, busy / np.maximum(invocations, 1), np.nan)
    return Observed(
        invocations=invocations.astype(float), concurrency_max=peak.astype(float),
        concurrency_mean=busy / MINUTE_MS, duration_ms=dur,
    )


def iter_fullday_series(path: Path, profiles: Trace, *, limit: int | None = None):  # type: ignore[no-untyped-def]
    """The full-day series of ``azure2019_fullday_union.csv.gz`` one at a time (none skipped),
    as :class:`FunctionSeries` borrowing the profile of ``profiles[i mod n]`` (see
    ``load_fullday_trace``, which also lists the errors).
    """
    if (limit is not None and limit < 1) or profiles.n_functions == 0:
        raise ValueError("limit must be >= 1 and profiles must hold at least one function")
    for i, (label, counts) in enumerate(fullday_rows(path, limit, None)):
        src = i % profiles.n_functions
        yield FunctionSeries(
            function_id=label, trigger=f"unknown (profile of {profiles.function_ids[src][:8]})",
            counts=counts, duration_pct_ms=profiles.duration_pct_ms[src],
            memory_mb=int(profiles.memory_mb[src]),
            duration_count=None if profiles.duration_count is None
            else int(profiles.duration_count[src]))
