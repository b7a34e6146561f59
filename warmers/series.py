"""Per-minute metric history of one alias, and Little's law.

Pure: numpy only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Resolution of every series in the control plane (CloudWatch 1-minute metrics).
PERIOD_S = 60


@dataclass(frozen=True, eq=False)
class MetricSeries:
    """One alias's 1-minute history, oldest first; ``NaN`` marks a gap.

    Attributes
    ----------
    function_name, alias : str
        The Lambda function and alias (never ``$LATEST``).
    start_s : float
        Epoch seconds of the first minute (start of its period).
    invocations : np.ndarray
        Shape ``(n,)``, invocations per minute (CloudWatch ``Invocations`` Sum).
    concurrency : np.ndarray
        Shape ``(n,)``, concurrent executions per minute (``ConcurrentExecutions`` Maximum, or
        Little's law from counts and duration for a trace).
    duration_ms : np.ndarray
        Shape ``(n,)``, mean duration per minute in ms (``Duration`` Average).
    source : str
        ``"cloudwatch"`` or ``"trace"``.
    """

    function_name: str
    alias: str
    start_s: float
    invocations: np.ndarray
    concurrency: np.ndarray
    duration_ms: np.ndarray
    source: str = "cloudwatch"

    def __post_init__(self) -> None:
        n = self.invocations.shape[0]
        for name in ("invocations", "concurrency", "duration_ms"):
            arr = getattr(self, name)
            if arr.ndim != 1 or arr.shape[0] != n:
                raise ValueError(
                    f"MetricSeries.{name} must be 1-D with {n} minutes like invocations, "
                    f"got shape {arr.shape}"
                )

    @property
    def n_minutes(self) -> int:
        return int(self.invocations.shape[0])

    @property
    def end_s(self) -> float:
        """Epoch seconds just after the last minute."""
        return self.start_s + self.n_minutes * PERIOD_S

    @property
    def is_empty(self) -> bool:
        """True when no minute holds a value (CloudWatch returned nothing)."""
        return bool(
            self.n_minutes == 0
            or (np.isnan(self.invocations).all() and np.isnan(self.concurrency).all())
        )


def littles_law_concurrency(
    invocations_per_min: np.ndarray, duration_ms: np.ndarray | float
) -> np.ndarray:
    """Mean concurrency from arrival counts and mean duration, L = lambda * W.

    Parameters
    ----------
    invocations_per_min : np.ndarray
        Shape ``(n,)``, arrivals per minute (NaN kept as NaN).
    duration_ms : np.ndarray or float
        Mean execution duration in ms, scalar or shape ``(n,)``.

    Returns
    -------
    np.ndarray
        Shape ``(n,)``, mean number of concurrent executions in each minute.

    Raises
    ------
    ValueError
        If a duration is negative.

    References
    ----------
    J. D. C. Little, "A proof for the queuing formula L = lambda W", Operations Research 9(3),
    1961. AWS states the same estimate for Lambda: concurrency = (average requests per second) x
    (average request duration in seconds),
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
    """
    rate = np.asarray(invocations_per_min, dtype=float)
    dur = np.asarray(duration_ms, dtype=float)
    if np.any(dur[~np.isnan(dur)] < 0):
        raise ValueError("duration_ms must be >= 0 (a mean execution time in milliseconds)")
    return (rate / 60.0) * (dur / 1000.0)


def aggregate_max(values: np.ndarray, period_min: int) -> np.ndarray:
    """One Maximum per ``period_min`` minutes, as CloudWatch keeps 1-minute data beyond 15 days
    (5-minute for 63 days, 1-hour for 455 days; https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html#Metric).

    Parameters
    ----------
    values : np.ndarray
        Shape ``(n,)``, one value per minute, oldest first; NaN = gap.
    period_min : int
        Minutes per aggregate (>= 1).

    Returns
    -------
    np.ndarray
        Shape ``(n // period_min,)``: the periods end at the last minute (a partial period at the
        start is dropped); NaN for a period that is all gap.

    Raises
    ------
    ValueError
        If ``period_min < 1`` or ``values`` is not 1-D.
    """
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"values must be 1-D (one per minute), got shape {arr.shape}")
    if period_min < 1:
        raise ValueError(f"period_min must be >= 1, got {period_min}")
    k = arr.shape[0] // period_min
    blocks = arr[arr.shape[0] - k * period_min:].reshape(k, period_min)
    seen = np.isfinite(blocks).any(axis=1)
    out = np.full(k, np.nan)
    out[seen] = np.nanmax(blocks[seen], axis=1)
    return out
