"""Which cold-start strategy the replay's ``on`` run deploys: what ``warmstart simulate
--strategy auto`` and the planner would choose for the replayed function, not a fixed variant.

:func:`choose_strategy` asks :func:`warmers.strategy.recommend_strategy` with the replayed
route's SLA, the work the replay's requests do (the trace's duration percentiles, divided by
the time scale when the replay scales durations, as :meth:`ReplayWorkload.tool_ms` does) and
the calibrated on-demand init and SnapStart restore (``warmers/simulator/calibration.json``,
``warmstart calibrate``; the same numbers the simulator's ``auto`` strategy reads). Init and
restore run in real time in the replay, so they are compared with the scaled work unscaled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from warmers.strategy import (
    DEFAULT_MAX_LATE_FRACTION,
    Advised,
    ColdStartTime,
    StrategyAdvice,
    recommend_strategy,
)

if TYPE_CHECKING:
    from infra.replay.workload import ReplayWorkload
    from warmers.simulator.calibration import Calibration


@dataclass(frozen=True)
class StrategyChoice:
    """The ``on`` run's strategy and where it came from.

    Attributes
    ----------
    strategy : {"provisioned", "snapstart"}
        ``provisioned``: on demand, the warmer buying provisioned concurrency; ``snapstart``:
        every cold start a restore, no provisioned concurrency (AWS does not combine them).
    advice : StrategyAdvice or None
        ``recommend_strategy``'s answer; None when the strategy was forced (``forced``).
    init, restore : ColdStartTime
        The calibrated on-demand init and SnapStart restore, ms.
    sla_ms : float
        The replayed route's SLA, ms.
    work_pct_ms : np.ndarray
        ``(7,)`` the replay's work per request at the trace's duration levels, real ms.
    calibration_source : str
        The calibration file read.
    forced : bool
        The strategy was given (``--strategy``), not recommended.
    """

    strategy: Advised
    advice: StrategyAdvice | None
    init: ColdStartTime
    restore: ColdStartTime
    sla_ms: float
    work_pct_ms: np.ndarray
    calibration_source: str
    forced: bool = False

    def words(self) -> str:
        """Which strategy ``on`` deploys and why, in one sentence (printed and reported)."""
        deploys = ("SnapStart (every cold start a restore of the init snapshot; no provisioned "
                   "concurrency, which AWS does not combine with it; the warmer still plans the "
                   "GPU endpoint and publishes the degradation level)"
                   if self.strategy == "snapstart" else
                   "on demand with the warmer's provisioned concurrency (cdk.json's provisioned "
                   "variant's floor, cap and objective)")
        work = (f"the replay's work per request p50 {self.work_pct_ms[3]:,.0f} ms, p99 "
                f"{self.work_pct_ms[5]:,.0f} ms (trace durations / time scale)")
        if self.forced:
            return (f"'on' deploys {deploys}: forced by --strategy {self.strategy}; "
                    f"recommend_strategy was not asked ({work}).")
        assert self.advice is not None
        return (f"'on' deploys {deploys}, as warmers.strategy.recommend_strategy advises for "
                f"this function ({work}; simulator calibration "
                f"{'/'.join(Path(self.calibration_source).parts[-3:])}): "
                f"{self.advice.reason}.")


def work_percentiles_ms(workload: ReplayWorkload, time_scale: float, *,
                        scale_durations: bool = True) -> np.ndarray:
    """``(7,)`` the replay's work per request at the trace's duration levels, real ms: the
    trace's duration percentiles, divided by ``time_scale`` when durations are scaled."""
    from infra.replay.workload import MAX_TOOL_MS

    pct = np.asarray(workload.duration_pct_ms, dtype=float)
    work = pct / time_scale if scale_durations else pct
    return np.clip(np.maximum.accumulate(work), 0.0, MAX_TOOL_MS)


def choose_strategy(workload: ReplayWorkload, *, sla_ms: float, time_scale: float,
                    scale_durations: bool = True, calibration: Calibration | None = None,
                    forced: Advised | None = None,
                    max_late_fraction: float = DEFAULT_MAX_LATE_FRACTION) -> StrategyChoice:
    """The strategy the ``on`` run deploys for ``workload`` (see the module docstring).

    Parameters
    ----------
    workload : ReplayWorkload
        The replayed slice (its ``duration_pct_ms``, ms).
    sla_ms : float
        The route's SLA, real ms (> 0).
    time_scale : float
        Trace seconds per real second.
    scale_durations : bool
        The replay divides each request's work by the time scale (``ReplayOptions``).
    calibration : warmers.simulator.calibration.Calibration, optional
        Default: the shipped one (``load_calibration()``).
    forced : {"provisioned", "snapstart"}, optional
        Deploy this strategy instead of asking ``recommend_strategy``.
    max_late_fraction : float
        ``recommend_strategy``'s tolerance (default 1e-3).

    Returns
    -------
    StrategyChoice

    Raises
    ------
    ValueError
        A bad SLA or duration percentiles (``warmers.strategy.late_fraction``), or an unknown
        ``forced`` strategy.
    """
    from warmers.simulator.calibration import DEFAULT_CALIBRATION_PATH, load_calibration
    from warmers.simulator.trace import DURATION_LEVELS

    if forced is not None and forced not in ("provisioned", "snapstart"):
        raise ValueError(f"strategy must be 'provisioned' or 'snapstart', got {forced!r}")
    cal = calibration or load_calibration()
    init = ColdStartTime(cal.init_ms.p50, cal.init_ms.p95)
    restore = ColdStartTime(cal.restore_ms.p50, cal.restore_ms.p95)
    work = work_percentiles_ms(workload, time_scale, scale_durations=scale_durations)
    source = str(DEFAULT_CALIBRATION_PATH) if calibration is None else "the given calibration"
    if forced is not None:
        return StrategyChoice(forced, None, init, restore, sla_ms, work, source, forced=True)
    advice = recommend_strategy(sla_ms, init, restore, np.asarray(DURATION_LEVELS, dtype=float),
                                work, max_late_fraction=max_late_fraction)
    return StrategyChoice(advice.strategy, advice, init, restore, sla_ms, work, source)
