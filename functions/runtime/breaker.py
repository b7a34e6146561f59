"""Circuit breaker for the overflow endpoint (no I/O; the clock is injected).

States (``BreakerState``):

* ``closed``: calls go through; ``failure_threshold`` consecutive failures open it.
* ``open``: calls are refused (admission does not pick OVERFLOW) until ``cooldown_ms`` has
  passed since it opened; then the next `allow` moves it to half-open.
* ``half_open``: exactly one probe call is let through; success closes the breaker, failure
  opens it again for another cool-down.

References
----------
M. Nygard, *Release It!* (2nd ed., 2018), "Circuit Breaker" pattern.
M. Fowler, "CircuitBreaker", https://martinfowler.com/bliki/CircuitBreaker.html
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    """State of a `CircuitBreaker`."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerSnapshot:
    """Read-only view for ``/debug/resource`` and admission.

    Parameters
    ----------
    state : BreakerState
        Effective state at ``now_ms`` (an open breaker past its cool-down reads half-open).
    consecutive_failures : int
    opened_at_ms : float or None
        Clock value when it last opened.
    probe_in_flight : bool
        A half-open probe is running (admission must not send a second one).
    """

    state: BreakerState
    consecutive_failures: int
    opened_at_ms: float | None
    probe_in_flight: bool


class CircuitBreaker:
    """Consecutive-failure circuit breaker with a half-open probe.

    Parameters
    ----------
    clock_ms : callable returning float
        Monotonic clock in ms (inject ``lambda: time.monotonic() * 1000`` in production, a fake
        in tests).
    failure_threshold : int
        Consecutive failures that open the breaker, >= 1 (default 3).
    cooldown_ms : float
        Time the breaker stays open before one probe is allowed, > 0 (default 5,000 ms).

    Raises
    ------
    ValueError
        ``failure_threshold < 1`` or ``cooldown_ms <= 0``.

    Notes
    -----
    Thread-safe: a Lambda execution environment runs one invocation at a time, but the local
    GPU-endpoint tests and the bench share one breaker across threads.
    """

    def __init__(
        self,
        clock_ms: Callable[[], float],
        *,
        failure_threshold: int = 3,
        cooldown_ms: float = 5000.0,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        if cooldown_ms <= 0:
            raise ValueError(f"cooldown_ms must be > 0 ms, got {cooldown_ms}")
        self._clock_ms = clock_ms
        self.failure_threshold = failure_threshold
        self.cooldown_ms = float(cooldown_ms)
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at_ms: float | None = None
        self._probe_in_flight = False

    def _effective_state(self, now_ms: float) -> BreakerState:
        if (
            self._state is BreakerState.OPEN
            and self._opened_at_ms is not None
            and now_ms - self._opened_at_ms >= self.cooldown_ms
        ):
            return BreakerState.HALF_OPEN
        return self._state

    def snapshot(self) -> BreakerSnapshot:
        """Current state, with an expired open state shown as half-open."""
        with self._lock:
            now_ms = self._clock_ms()
            return BreakerSnapshot(
                state=self._effective_state(now_ms),
                consecutive_failures=self._failures,
                opened_at_ms=self._opened_at_ms,
                probe_in_flight=self._probe_in_flight,
            )

    @property
    def state(self) -> BreakerState:
        """Effective state now (see `snapshot`)."""
        return self.snapshot().state

    def available(self) -> bool:
        """Whether a call would be allowed now, without claiming the half-open probe."""
        snap = self.snapshot()
        if snap.state is BreakerState.OPEN:
            return False
        return not (snap.state is BreakerState.HALF_OPEN and snap.probe_in_flight)

    def allow(self) -> bool:
        """Claim permission for one call.

        Returns
        -------
        bool
            True when closed, or when half-open and no probe is running (this call becomes the
            probe); False when open or a probe is already running.
        """
        with self._lock:
            now_ms = self._clock_ms()
            state = self._effective_state(now_ms)
            if state is BreakerState.CLOSED:
                return True
            if state is BreakerState.HALF_OPEN and not self._probe_in_flight:
                self._state = BreakerState.HALF_OPEN
                self._probe_in_flight = True
                return True
            return False

    def record_success(self) -> None:
        """A call succeeded: close the breaker and reset the failure count."""
        with self._lock:
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._opened_at_ms = None
            self._probe_in_flight = False

    def record_failure(self) -> None:
        """A call failed: count it; open at the threshold, or re-open after a failed probe."""
        with self._lock:
            now_ms = self._clock_ms()
            self._failures += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.failure_threshold:
                self._state = BreakerState.OPEN
                self._opened_at_ms = now_ms
            self._probe_in_flight = False

    def release(self) -> None:
        """A claimed call was not made (e.g. no budget left): free the half-open probe slot."""
        with self._lock:
            self._probe_in_flight = False
