"""Hand-built workloads for the simulator tests (imported by the test modules)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from warmers.simulator.trace import MINUTE_MS, Workload

TRACE_DIR = Path(__file__).resolve().parents[2] / "data" / "traces"


def workload(
    arrivals_ms: Sequence[float],
    durations_ms: Sequence[float] | float,
    *,
    n_minutes: int,
    memory_mb: int = 1024,
    sla_ms: float = 2000.0,
    function_id: str = "fn",
) -> Workload:
    """A workload with exactly these arrivals and durations (memory 1 GB: GB-s = s)."""
    a = np.asarray(arrivals_ms, dtype=float)
    d = np.broadcast_to(np.asarray(durations_ms, dtype=float), a.shape).copy()
    minute = np.minimum((a // MINUTE_MS).astype(np.int64), n_minutes - 1)
    counts = np.bincount(minute, minlength=n_minutes).astype(np.int64)
    return Workload(
        function_id=function_id, trigger="http", arrivals_ms=a, durations_ms=d, counts=counts,
        memory_mb=memory_mb, sla_ms=sla_ms, p99_duration_ms=float(d.max()) if d.size else 0.0,
    )


def periodic(period_ms: float, n_minutes: int, duration_ms: float, offset_ms: float = 1000.0,
             **kw: object) -> Workload:
    a = np.arange(offset_ms, n_minutes * MINUTE_MS, period_ms)
    return workload(a, duration_ms, n_minutes=n_minutes, **kw)  # type: ignore[arg-type]
