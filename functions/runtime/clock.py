"""The toolkit's monotonic clock: one definition for every stage of an execution environment.

Admission, the preload, the dispatcher, the streams and the overflow client compare times
read from this clock (an invocation's start, its SLA deadline, a stage's wait), so they must
all read the same one. It is monotonic (never goes back when the wall clock is set) and has
no defined origin: only differences mean something. Under SnapStart the values keep
increasing across a restore, as ``time.perf_counter`` does.

Imports only the standard library.

References
----------
https://docs.python.org/3/library/time.html#time.perf_counter
"""

from __future__ import annotations

from time import perf_counter

__all__ = ["monotonic_ms"]


def monotonic_ms() -> float:
    """Now on the toolkit's monotonic clock, ms (``time.perf_counter() * 1000``; no defined
    origin: subtract two readings)."""
    return perf_counter() * 1000.0
