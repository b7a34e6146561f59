"""Progress of the long commands (replay, demo, calibrate), from tqdm.

- On a terminal: a live tqdm bar (redrawn in place).
- Not a terminal (CI logs, a pipe, a file): a plain tqdm status line every ``interval_s`` real
  seconds and a last one at the end, each ending in ``\\n`` (never a ``\\r``).
- ``quiet``: nothing.

References
----------
https://tqdm.github.io/docs/tqdm/ (``tqdm.format_meter`` gives the same text as the bar)
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import IO, Any, Self

#: Real seconds between two plain lines when the stream is not a terminal.
DEFAULT_INTERVAL_S = 10.0


def is_terminal(stream: IO[str]) -> bool:
    """True when ``stream`` is an interactive terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


class Progress:
    """Counts ``done`` out of ``total``; see the module docstring for where it goes.

    Parameters
    ----------
    total : int
        Units expected (requests, samples).
    desc : str
        Shown first (``replay [off]``).
    unit : str
        Name of one unit (``req``).
    stream : file, optional
        Default stderr.
    quiet : bool
        Show nothing.
    interval_s : float
        Real seconds between plain lines (not a terminal).
    """

    def __init__(self, total: int, desc: str, *, unit: str = "it", stream: IO[str] | None = None,
                 quiet: bool = False, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.total = int(total)
        self.desc = desc
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        self.interval_s = interval_s
        self.n = 0
        self.postfix: dict[str, Any] = {}
        self._t0 = time.monotonic()
        self._last_line = self._t0
        self._closed = False
        self._bar: Any = None
        if not quiet and is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, file=self.stream,
                             dynamic_ncols=True, mininterval=0.2, leave=True)

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Add ``n`` done; ``postfix`` (``sent=12``) is shown after the counts."""
        self.n += n
        if postfix:
            self.postfix.update(postfix)
        if self.quiet or self._closed:
            return
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(self.postfix, refresh=False)
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last_line >= self.interval_s:
            self._last_line = now
            self._line(now)

    def set_postfix(self, **postfix: Any) -> None:
        """Change what is shown after the counts without counting anything."""
        self.update(0, **postfix)

    def line(self) -> str:
        """The status text (what the bar shows, without the bar)."""
        from tqdm import tqdm

        postfix = ", ".join(f"{k}={v}" for k, v in self.postfix.items()) or None
        return str(tqdm.format_meter(self.n, self.total, time.monotonic() - self._t0,
                                     prefix=self.desc, unit=self.unit, postfix=postfix,
                                     ncols=0))

    def _line(self, now: float) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Finish: the bar's last state, or one last plain line."""
        if self._closed:
            return
        self._closed = True
        if self.quiet:
            return
        if self._bar is not None:
            if self.postfix:
                self._bar.set_postfix(self.postfix, refresh=False)
            self._bar.close()
            return
        self._line(time.monotonic())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
