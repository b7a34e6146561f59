"""Clocks for the local stack: real time, or time running faster for replays.

The emulator never reads the system clock directly; it asks a :class:`Clock`. A
:class:`ScaledClock` with ``time_scale=60`` makes one real second count as one emulated
minute, so a 10-minute idle timeout reclaims an execution environment after 10 real seconds
and a provisioned-concurrency allocation delay of 2 minutes takes 2 real seconds.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Port for time. ``time()`` is epoch seconds, ``monotonic()`` only for differences."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, seconds: float) -> bool: ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait on ``event`` for up to ``seconds`` of clock time; True if it was set."""
        return event.wait(max(0.0, seconds))


class ScaledClock:
    """A clock that runs ``time_scale`` times faster than real time.

    Parameters
    ----------
    time_scale : float
        Emulated seconds per real second, > 0. 1.0 is real time.
    start_epoch_s : float, optional
        Emulated epoch time at creation (default: the real time now).

    Raises
    ------
    ValueError
        If ``time_scale`` is not positive.
    """

    def __init__(self, time_scale: float, start_epoch_s: float | None = None) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
        self.time_scale = float(time_scale)
        self._real0 = time.monotonic()
        self._epoch0 = time.time() if start_epoch_s is None else float(start_epoch_s)

    def _elapsed_s(self) -> float:
        return (time.monotonic() - self._real0) * self.time_scale

    def time(self) -> float:
        return self._epoch0 + self._elapsed_s()

    def monotonic(self) -> float:
        return self._elapsed_s()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds) / self.time_scale)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds) / self.time_scale)

    def real_seconds(self, emulated_s: float) -> float:
        """Real seconds that ``emulated_s`` clock seconds take."""
        return emulated_s / self.time_scale
