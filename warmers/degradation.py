"""Degradation level from utilization of available concurrency. Pure: no I/O, no clock.

The warmer publishes the level to SSM with ``warmers.level_publisher.SsmLevelPublisher``.

| level | utilization of available concurrency |
|---|---|
| L0 | < 95% |
| L1 | >= 95% |
| L2 | >= 98% |
| L3 | >= 99.5% |

A level holds only when the utilization provably stayed at or above its threshold for
``sustain_s`` (30 s); with 1-minute CloudWatch data the proof combines the minute's maximum and
its mean (see :func:`sustained_level`). Thresholds: the project's seed notes (DESIGN.md,
"Degradation levels").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from functions.runtime.contract.levels import Level

#: Every level, lowest first (the contract's :class:`~functions.runtime.contract.levels.Level`).
LEVELS: tuple[Level, ...] = tuple(Level)
#: (threshold, level), highest first. Source: DESIGN.md "Degradation levels".
THRESHOLDS: tuple[tuple[float, Level], ...] = ((0.995, Level.L3), (0.98, Level.L2),
                                               (0.95, Level.L1))
SUSTAIN_S = 30.0



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
    return Level.L0


def seconds_at_or_above(max_utilization: float, mean_utilization: float, threshold: float,
                        period_s: float) -> float:
    """Lower bound on the seconds of one period whose utilization was >= ``threshold``.

    Parameters
    ----------
    max_utilization : float
        The period's maximum utilization ``M`` (CloudWatch ``ConcurrentExecutions`` Maximum over
        available concurrency).
    mean_utilization : float
        The period's time-averaged utilization ``m`` (Little's law: ``Invocations`` Sum x
        ``Duration`` Average / period, over available concurrency). Clamped to ``M``.
    threshold : float
        The level's threshold ``T`` (0..1).
    period_s : float
        Length ``P`` of the period (60 s for CloudWatch 1-minute metrics).

    Returns
    -------
    float
        ``S`` in ``[0, P]``: the utilization was at or above ``T`` for at least ``S`` seconds
        of the period (in total, not necessarily in one stretch).

    Notes
    -----
    Let ``S`` be the time with ``u(t) >= T``. Then ``u(t) <= M`` during ``S`` and
    ``u(t) < T`` elsewhere, so ``m * P <= S * M + (P - S) * T``, i.e.
    ``S >= P * (m - T) / (M - T)`` when ``M > T``; ``S = 0`` when ``M < T`` (the
    threshold was never reached); when ``M == T`` the bound is ``P`` if ``m >= T``, else 0.
    A one-second spike to ``M`` with a low mean gives ``S ~ 0``; a minute that stayed near
    ``M`` gives ``S ~ P``.
    """
    m_max, m_mean = float(max_utilization), float(mean_utilization)
    if math.isnan(m_max) or math.isnan(m_mean) or m_max < threshold:
        return 0.0
    m_mean = min(max(m_mean, 0.0), m_max)
    if m_max - threshold <= 1e-12:
        return period_s if m_mean >= threshold - 1e-12 else 0.0
    return min(period_s, max(0.0, period_s * (m_mean - threshold) / (m_max - threshold)))


def period_level(max_utilization: float, mean_utilization: float, *, period_s: float,
                 need_s: float) -> Level:
    """Highest level whose threshold provably held ``need_s`` seconds of one period.

    Uses :func:`seconds_at_or_above`; NaN in either input gives ``"L0"`` (no evidence).
    """
    for threshold, level in THRESHOLDS:
        if seconds_at_or_above(max_utilization, mean_utilization, threshold,
                               period_s) >= need_s - 1e-9:
            return level
    return Level.L0


def sustained_level(samples: Sequence[tuple[float, float, float]], *, now_s: float,
                    sustain_s: float = SUSTAIN_S, period_s: float = 60.0) -> Level:
    """Highest level whose threshold held for ``sustain_s`` (30 s) up to ``now_s``.

    Parameters
    ----------
    samples : sequence of (start_s, max_utilization, mean_utilization)
        Samples oldest first; each covers ``[start_s, start_s + period_s)``. The maximum is the
        period's peak (CloudWatch ``ConcurrentExecutions`` Maximum / available concurrency);
        the mean is its time average (``Invocations`` x ``Duration`` Average / 60 s / available,
        Little's law). NaN marks a gap. For instantaneous samples pass the value twice.
    now_s : float
        Epoch seconds (passed in).
    sustain_s : float
        How long a level's threshold must hold (30 s, DESIGN.md "Degradation levels").
    period_s : float
        Length each sample covers.

    Returns
    -------
    Level
        The lowest of the per-sample levels over the samples covering
        ``[now_s - sustain_s, now_s]``; ``"L0"`` when that window is not fully covered.

    Notes
    -----
    Why not the minute's Maximum alone: CloudWatch's 1-minute ``ConcurrentExecutions`` Maximum
    is the peak of the minute, and the Lambda docs say to read it with MAX
    (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-concurrency.html), so a one-second
    spike to 100 % makes the whole minute read 100 %. "Sustained 30 s" cannot be seen at a
    1-minute resolution directly, so each sample must *prove* it: a sample with
    ``period_s >= sustain_s`` must show at least ``sustain_s`` seconds at or above the
    threshold by the bound of :func:`seconds_at_or_above` (for one 60 s minute and 30 s that
    means ``mean >= (max + T) / 2``); shorter samples must each lie wholly at or above it.
    The bound counts time in total within the minute, not one contiguous stretch: the best
    1-minute data allows. It is conservative: Little's law from ``Duration`` leaves out the
    init phase, which also occupies concurrency, so the mean is underestimated during cold
    starts and the level rises only on evidence. Mean concurrency = request rate x duration:
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
    """
    window_start = now_s - sustain_s
    covering = [s for s in samples if s[0] + period_s > window_start and s[0] <= now_s]
    if not covering or covering[0][0] > window_start:
        return Level.L0
    need_s = min(sustain_s, period_s)
    covered_until = covering[0][0]
    worst = len(LEVELS) - 1
    for t, peak, mean in covering:
        if t > covered_until:  # a hole: not sustained
            return Level.L0
        covered_until = t + period_s
        worst = min(worst, LEVELS.index(period_level(peak, mean, period_s=period_s,
                                                     need_s=need_s)))
    return LEVELS[worst]


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
