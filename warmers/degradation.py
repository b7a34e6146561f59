"""Degradation level from utilization of available concurrency, and its SSM publisher.

The level functions are pure; :class:`SsmLevelPublisher` does the I/O with an injected client.

| level | utilization of available concurrency |
|---|---|
| L0 | < 95% |
| L1 | >= 95% |
| L2 | >= 98% |
| L3 | >= 99.5% |

A level holds only when the utilization stayed at or above its threshold for ``sustain_s``
(30 s). Thresholds: the project's seed notes (DESIGN.md, "Degradation levels").
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Any, Literal

Level = Literal["L0", "L1", "L2", "L3"]
LEVELS: tuple[Level, ...] = ("L0", "L1", "L2", "L3")
#: (threshold, level), highest first. Source: DESIGN.md "Degradation levels".
THRESHOLDS: tuple[tuple[float, Level], ...] = ((0.995, "L3"), (0.98, "L2"), (0.95, "L1"))
SUSTAIN_S = 30.0

logger = logging.getLogger("warmstart.warmer")


def level_for_utilization(utilization: float) -> Level:
    """Instantaneous level for one utilization value (0..1, may exceed 1 when throttling).

    Raises
    ------
    ValueError
        If ``utilization`` is negative or NaN.
    """
    if not utilization >= 0.0:  # also catches NaN
        raise ValueError(f"utilization must be a number >= 0, got {utilization}")
    for threshold, level in THRESHOLDS:
        if utilization >= threshold:
            return level
    return "L0"


def sustained_level(samples: Sequence[tuple[float, float]], *, now_s: float,
                    sustain_s: float = SUSTAIN_S, period_s: float = 60.0) -> Level:
    """Highest level whose threshold every sample covering the last ``sustain_s`` meets.

    Parameters
    ----------
    samples : sequence of (start_s, utilization)
        Samples oldest first; each covers ``[start_s, start_s + period_s)``. NaN samples are gaps.
    now_s : float
        Epoch seconds (passed in).
    sustain_s : float
        How long a level's threshold must hold (30 s).
    period_s : float
        Length each sample covers (60 s for CloudWatch 1-minute metrics, where the minute's
        maximum concurrency is a conservative, upper estimate of a sustained value).

    Returns
    -------
    Level
        ``"L0"`` when the window is not fully covered by samples (no evidence of overload).
    """
    window_start = now_s - sustain_s
    covering = [(t, u) for t, u in samples if t + period_s > window_start and t <= now_s]
    if not covering or covering[0][0] > window_start:
        return "L0"
    covered_until = covering[0][0]
    for t, u in covering:
        if t > covered_until or math.isnan(u):  # a hole or NaN: not sustained
            return "L0"
        covered_until = t + period_s
    worst = min(u for _, u in covering)
    return level_for_utilization(worst)


def utilization(concurrency: float, available_concurrency: float) -> float:
    """Concurrency in use over concurrency available (reserved or account limit).

    Raises
    ------
    ValueError
        If ``available_concurrency`` is not positive.
    """
    if not available_concurrency > 0:
        raise ValueError(f"available_concurrency must be > 0, got {available_concurrency}")
    return max(0.0, concurrency) / available_concurrency


class SsmLevelPublisher:
    """Writes the level to an SSM String parameter when it changes.

    Parameters
    ----------
    client : boto3 SSM client (injected; ``endpoint_url``-able)
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._last: dict[str, str] = {}

    def publish(self, parameter_name: str, level: Level) -> bool:
        """Put ``level`` if it differs from the stored value; returns True when written.

        Raises
        ------
        ValueError
            For a value that is not a level.
        botocore.exceptions.ClientError
            When SSM refuses (the caller logs ``tool_unavailable``).
        """
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        if self._last.get(parameter_name) == level:
            return False
        current = None
        try:
            current = self._client.get_parameter(Name=parameter_name)["Parameter"]["Value"]
        except self._client.exceptions.ParameterNotFound:
            current = None
        if current != level:
            self._client.put_parameter(Name=parameter_name, Value=level, Type="String",
                                       Overwrite=True)
            logger.info(json.dumps({"event": "degradation_level", "parameter": parameter_name,
                                    "level": level, "was": current}))
        self._last[parameter_name] = level
        return current != level
