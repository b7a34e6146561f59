"""Mergeable latency sketch: Datadog's DDSketch, fed whole numpy arrays at once.

Error bound: for a quantile ``q`` of ``n`` latencies, ``quantile(q)`` returns ``x~`` with
``|x~ - x| <= RELATIVE_ACCURACY * x``, where ``x`` is the exact order statistic of rank
``floor(q * (n - 1))`` (DDSketch's guarantee; Masson, Rim and Lee, "DDSketch: A Fast and
Fully-Mergeable Quantile Sketch with Relative-Error Guarantees", VLDB 2019). Latencies of
0 ms (a shed answer) are counted exactly. Merging adds bin counts, so it is exact and
independent of order: a sketch of the union equals the merge of sketches of the parts.
Bins are keyed here with numpy's ``log2`` (vectorized) rather than ``math.log``: at a bin
edge a value may land in the neighbouring bin, which moves the bound by one float ulp.
"""

from __future__ import annotations

import math

import numpy as np
from ddsketch import DDSketch

#: Relative accuracy of every quantile the simulator reports (1 %: DDSketch's default).
RELATIVE_ACCURACY = 0.01


class LatencySketch:
    """Latencies (ms, >= 0) of many requests in a DDSketch of ``RELATIVE_ACCURACY``.

    Memory: one bin per factor ``(1 + a) / (1 - a)`` of the range, ~350 bins for 1 ms-1,000 s
    at 1 %, whatever the number of requests.
    """

    __slots__ = ("_sketch",)

    def __init__(self, relative_accuracy: float = RELATIVE_ACCURACY) -> None:
        self._sketch = DDSketch(relative_accuracy)

    @property
    def count(self) -> int:
        return int(self._sketch.count + 0.5)

    @property
    def relative_accuracy(self) -> float:
        return float(self._sketch._mapping.relative_accuracy)

    def add_array(self, latencies_ms: np.ndarray) -> None:
        """Add ``(n,)`` latencies in ms.

        Raises
        ------
        ValueError
            A latency is negative or not finite.
        """
        v = np.asarray(latencies_ms, dtype=float).ravel()
        if v.size == 0:
            return
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError("latencies must be finite and >= 0 ms")
        mapping = self._sketch._mapping
        positive = v > mapping.min_possible
        zeros = int(v.size - positive.sum())
        if zeros:
            self._sketch.add(0.0, float(zeros))
        # the mapping's key, vectorized: ceil(log2(v) * multiplier) + offset
        mult = mapping._multiplier
        keys = np.ceil(np.log2(v[positive]) * mult).astype(np.int64) + int(mapping._offset)
        uniq, n = np.unique(keys, return_counts=True)
        for k, c in zip(uniq.tolist(), n.tolist(), strict=True):
            # the bin's representative value maps back to the bin (it lies inside it)
            self._sketch.add(mapping.value(k), float(c))

    def merge(self, other: LatencySketch) -> None:
        """Add ``other``'s latencies (exact; same accuracy required, else ValueError)."""
        self._sketch.merge(other._sketch)

    def quantile(self, q: float) -> float:
        """Latency in ms at quantile ``q`` in [0, 1] (NaN when empty), within the bound above."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        v = self._sketch.get_quantile_value(q)
        return float("nan") if v is None else float(v)


def _check_mapping() -> None:
    """Import-time guard: the vectorized key is the library's (fails loudly on an upgrade)."""
    m = DDSketch(RELATIVE_ACCURACY)._mapping
    for x in (1.0, 37.5, 1234.5, 98765.4):
        if int(math.ceil(math.log2(x) * m._multiplier) + m._offset) != m.key(x):
            raise RuntimeError("ddsketch's LogarithmicMapping changed: update sketch.py")


_check_mapping()
