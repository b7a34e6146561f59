"""Degradation levels ``L0`` .. ``L3``, which the warmer writes and every handler reads: a leaf
module of the contract (admission, degradation and config use it on the init path; the warmer's
``warmers.degradation`` computes them).

Thresholds (utilization of available concurrency, sustained 30 s; DESIGN.md): L0 < 95 %,
L1 >= 95 % (P2 features off), L2 >= 98 % (cheaper answers), L3 >= 99.5 % (new requests shed).
The warmer computes the level (`warmers.degradation`); handlers only read it.

Imports only the standard library.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Level", "parse_level"]


class Level(StrEnum):
    """Degradation level, as the warmer writes it (``"L0"`` .. ``"L3"``)."""

    L0 = "L0"
    L1 = "L1"
    L2 = "L2"
    L3 = "L3"

    @property
    def rank(self) -> int:
        """0 .. 3, for comparisons (``level.rank >= Level.L1.rank``)."""
        return int(self.value[1])


def parse_level(value: str | Level) -> Level:
    """Parse ``"L0"`` .. ``"L3"`` (case and surrounding blanks ignored).

    Raises
    ------
    ValueError
        Any other string; the message lists the accepted values.
    TypeError
        Not a string.
    """
    if isinstance(value, Level):
        return value
    if not isinstance(value, str):
        raise TypeError(f"degradation level must be a string L0..L3, got {type(value).__name__}")
    text = value.strip().upper()
    try:
        return Level(text)
    except ValueError:
        raise ValueError(
            f"unknown degradation level {value!r}: expected one of L0, L1, L2, L3"
        ) from None
