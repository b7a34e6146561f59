"""Which cold-start strategy an alias needs: SnapStart only where an on-demand cold start can
break the SLA.

SnapStart turns a cold start into a restore of a snapshot taken after the init phase, but for
Python it bills the snapshot's cache for every second the published version is active, whether
requests come or not, plus each restore (Lambda pricing: "SnapStart ... cache ... per GB-second,
restore ... per GB"; https://aws.amazon.com/lambda/pricing/), and it cannot be combined with
provisioned concurrency (https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html,
"Supported features and limitations"). An alias whose warm answers leave room in the SLA for a
full on-demand init gains nothing from that cache: a cold start there is slow but on time.

:func:`recommend_strategy` compares the share of cold starts that would answer a request late
(its warm duration within the SLA, its answer after it) on demand and under SnapStart, from the
alias's duration quantiles and the calibrated init and restore times (``warmstart
calibrate``), and picks on-demand (strategy ``provisioned``: the warmer buys provisioned
concurrency where it pays) when that share is at most ``max_late_fraction``, else
``snapstart``. Given :func:`advise_managed_instances`' verdict it advises Lambda Managed
Instances where they cost less at no more failed answers (steady, busy functions). Pure: numpy
and the standard library only (it runs in the warmer and in ``warmstart plan``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

#: Default most cold starts in which one may answer late on demand (one in a thousand): a
#: tolerance of ours, not from a source; ``recommend_strategy(max_late_fraction=...)`` sets it.
DEFAULT_MAX_LATE_FRACTION = 1e-3

#: Share of its concurrency limit from which an alias's peak counts as *at the limit*: there
#: every on-demand cold start holds one of the last slots for its whole init (Lambda counts an
#: initializing invocation as in flight), so the next requests are throttled; a SnapStart
#: restore holds it for the restore only. A tolerance of ours, not from a source (issue 19:
#: on a full-day series that reached the 1,000 account limit, on-demand inits cost 12 more
#: throttles than SnapStart's restores).
NEAR_LIMIT_FRACTION = 0.9

#: Points of the duration's quantile function the late share is integrated over.
GRID_POINTS = 4001

#: z of the 95th percentile of the standard normal (the lognormal through p50 and p95).
Z_95 = 1.6448536269514722

Advised = Literal["provisioned", "snapstart", "managed_instances"]

#: Share by which Lambda Managed Instances must undercut the cheapest the function could cost on
#: Lambda before they are advised (10 %): a tolerance of ours, not from a source (the instance
#: price is a secondary transcription and LMI's scale-out lead an assumption,
#: ``warmers.lmi.SCALE_OUT_LEAD_MIN``).
LMI_MARGIN_FRACTION = 0.10


def lognormal_sigma(p50_ms: float, p95_ms: float) -> float:
    """Shape of the lognormal through a median and a 95th percentile: ``ln(p95 / p50) / z_0.95``
    (``z_0.95`` = 1.6449, the standard normal's 95th percentile); 0 when they are equal or the
    median is 0. Both in the same unit (ms)."""
    if p50_ms <= 0 or p95_ms <= p50_ms:
        return 0.0
    return math.log(p95_ms / p50_ms) / Z_95


@dataclass(frozen=True)
class ColdStartTime:
    """A cold start's added latency, ms: a lognormal through its median and 95th percentile
    (the calibration's ``Timing``)."""

    p50_ms: float
    p95_ms: float

    def __post_init__(self) -> None:
        for name in ("p50_ms", "p95_ms"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number of ms >= 0, got {v!r}")
        if self.p95_ms < self.p50_ms:
            raise ValueError(f"p95_ms ({self.p95_ms}) must be >= p50_ms ({self.p50_ms})")

    @property
    def log_sigma(self) -> float:
        """:func:`lognormal_sigma` of this time."""
        return lognormal_sigma(self.p50_ms, self.p95_ms)

    def exceeds(self, slack_ms: np.ndarray) -> np.ndarray:
        """``P(cold start > slack)`` for each slack, ms (1 where the slack is <= 0)."""
        slack = np.asarray(slack_ms, dtype=float)
        out = np.ones_like(slack)
        pos = slack > 0
        sigma = self.log_sigma
        if self.p50_ms <= 0:
            out[pos] = 0.0
        elif sigma == 0.0:
            out[pos] = (slack[pos] < self.p50_ms).astype(float)
        else:
            z = (np.log(slack[pos]) - math.log(self.p50_ms)) / sigma
            erfc = np.frompyfunc(math.erfc, 1, 1)
            out[pos] = 0.5 * erfc(z / math.sqrt(2.0)).astype(float)
        return out


@dataclass(frozen=True)
class StrategyAdvice:
    """The recommended strategy and why.

    Attributes
    ----------
    strategy : {"provisioned", "snapstart", "managed_instances"}
        ``provisioned``: on demand, the warmer buying provisioned concurrency where it pays;
        ``snapstart``: every cold start a restore, no provisioned concurrency;
        ``managed_instances``: Lambda Managed Instances (only when `recommend_strategy` is
        given an `LmiAdvice` that chose them).
    late_fraction_on_demand, late_fraction_snapstart : float
        Share of cold starts, in [0, 1], whose request would be answered after the SLA
        although its warm duration met it, with an on-demand init or a SnapStart restore.
    reason : str
        One sentence with the numbers.
    """

    strategy: Advised
    late_fraction_on_demand: float
    late_fraction_snapstart: float
    reason: str


def late_fraction(sla_ms: float, cold: ColdStartTime, duration_levels: np.ndarray,
                  duration_ms: np.ndarray) -> float:
    """Share of cold starts that answer late: ``P(cold + d > sla and d <= sla)``.

    ``d`` is the request's warm duration, read off the quantile function through
    ``(duration_levels, duration_ms)`` (linear between the given points, as the Azure trace's
    percentiles are read), on a grid of :data:`GRID_POINTS` levels; ``cold`` is independent of
    ``d``.

    Parameters
    ----------
    sla_ms : float
        The alias's SLA, ms (> 0).
    cold : ColdStartTime
    duration_levels : np.ndarray
        ``(k,)`` increasing levels in [0, 1], from 0 to 1 (k >= 2).
    duration_ms : np.ndarray
        ``(k,)`` non-decreasing durations at those levels, ms.

    Returns
    -------
    float
        In [0, 1].

    Raises
    ------
    ValueError
        A non-positive SLA, levels not spanning [0, 1] increasingly, durations not
        non-decreasing, shapes that differ, or NaN.
    """
    if not math.isfinite(sla_ms) or sla_ms <= 0:
        raise ValueError(f"sla_ms must be a finite number > 0, got {sla_ms!r}")
    levels = np.asarray(duration_levels, dtype=float)
    values = np.asarray(duration_ms, dtype=float)
    if levels.ndim != 1 or levels.shape != values.shape or levels.shape[0] < 2:
        raise ValueError("duration_levels and duration_ms need the same shape (k,), k >= 2")
    if np.isnan(levels).any() or np.isnan(values).any():
        raise ValueError("duration quantiles contain NaN")
    if levels[0] != 0.0 or levels[-1] != 1.0 or np.any(np.diff(levels) <= 0):
        raise ValueError("duration_levels must increase from 0 to 1")
    if np.any(np.diff(values) < 0) or values[0] < 0:
        raise ValueError("duration_ms must be non-decreasing and >= 0")
    grid = (np.arange(GRID_POINTS) + 0.5) / GRID_POINTS
    d = np.interp(grid, levels, values)
    on_time_warm = d <= sla_ms
    p = cold.exceeds(sla_ms - d) * on_time_warm
    return float(p.mean())


def recommend_strategy(sla_ms: float, init: ColdStartTime, restore: ColdStartTime,
                       duration_levels: np.ndarray, duration_ms: np.ndarray, *,
                       max_late_fraction: float = DEFAULT_MAX_LATE_FRACTION,
                       snapstart_supported: bool = True,
                       peak_concurrency: float | None = None,
                       concurrency_limit: int | None = None,
                       lmi: LmiAdvice | None = None) -> StrategyAdvice:
    """On demand where its cold starts meet the SLA, SnapStart where they do not, Lambda
    Managed Instances where ``lmi`` chose them (cheaper at no more failed answers).

    Parameters
    ----------
    sla_ms : float
        The alias's SLA, ms.
    init, restore : ColdStartTime
        The calibrated on-demand init (until the agent can answer) and SnapStart restore.
    duration_levels, duration_ms : np.ndarray
        The alias's warm duration quantile function (:func:`late_fraction`).
    max_late_fraction : float
        In [0, 1): the most late cold starts on demand tolerated (default 1e-3).
    snapstart_supported : bool
        False where SnapStart is unavailable (runtime older than python3.12, EFS, ephemeral
        storage over 512 MB): the advice stays on demand and says what it costs.
    peak_concurrency, concurrency_limit : float, int or None
        The alias's peak in flight and the concurrency Lambda allows it (reserved concurrency
        or the account's pool): at :data:`NEAR_LIMIT_FRACTION` of the limit or more, SnapStart
        also where its cold starts are on time (its restores hold a slot shorter than an init,
        so fewer requests are throttled). None: not considered.
    lmi : LmiAdvice or None
        `advise_managed_instances` for this function: when it chose LMI, the advice is
        ``managed_instances`` with its reason (LMI has no per-request cold start, so the late
        shares above do not apply to it). None: LMI not considered.

    Returns
    -------
    StrategyAdvice

    Raises
    ------
    ValueError
        ``max_late_fraction`` out of range, or bad quantiles (:func:`late_fraction`).
    """
    if not 0.0 <= max_late_fraction < 1.0:
        raise ValueError(f"max_late_fraction must be in [0, 1), got {max_late_fraction!r}")
    on_demand = late_fraction(sla_ms, init, duration_levels, duration_ms)
    snap = late_fraction(sla_ms, restore, duration_levels, duration_ms)
    shares = (f"an on-demand cold start ({init.p50_ms:.0f} ms p50, {init.p95_ms:.0f} ms p95) "
              f"answers {on_demand:.2%} of its requests after the {sla_ms:.0f} ms SLA, a "
              f"SnapStart restore ({restore.p50_ms:.0f} ms p50) {snap:.2%}")
    if lmi is not None and lmi.chosen:
        return StrategyAdvice("managed_instances", on_demand, snap,
                              f"{lmi.reason} (on Lambda {shares})")
    near = (peak_concurrency is not None and concurrency_limit is not None
            and concurrency_limit > 0
            and peak_concurrency >= NEAR_LIMIT_FRACTION * concurrency_limit)
    if on_demand <= max_late_fraction and near and snapstart_supported:
        return StrategyAdvice("snapstart", on_demand, snap,
                              f"SnapStart: {shares}, but its peak of {peak_concurrency:.0f} in "
                              f"flight reaches {NEAR_LIMIT_FRACTION:.0%} of its concurrency "
                              f"limit {concurrency_limit}: an on-demand init holds a slot "
                              f"{init.p50_ms:.0f} ms, a restore {restore.p50_ms:.0f} ms, so "
                              "fewer requests are throttled")
    if on_demand <= max_late_fraction:
        return StrategyAdvice("provisioned", on_demand, snap,
                              f"on demand: {shares}; at most {max_late_fraction:.2%} tolerated, "
                              "so SnapStart's snapshot cache would buy nothing")
    if not snapstart_supported:
        return StrategyAdvice("provisioned", on_demand, snap,
                              f"on demand although {shares}: SnapStart is not available here")
    return StrategyAdvice("snapstart", on_demand, snap,
                          f"SnapStart: {shares} (more than {max_late_fraction:.2%} tolerated)")


@dataclass(frozen=True)
class LmiAdvice:
    """Whether a function is cheaper on Lambda Managed Instances at no more failed answers.

    Attributes
    ----------
    chosen : bool
        LMI advised: no minute of the profile outgrows what LMI's scaling adds in time, and
        LMI costs less than ``(1 - LMI_MARGIN_FRACTION)`` of the Lambda lower bound.
    lambda_usd, lmi_usd : float
        Over the profile's minutes, USD: the cheapest the function could cost on Lambda (each
        minute at the cheaper of on-demand duration and provisioned concurrency sized exactly
        to its mean in flight, plus requests: a lower bound of what the warmer's plans cost),
        and on LMI (environments for each minute's peak, never under the minimum, plus LMI's
        requests).
    environment_hours : float
        LMI environment-hours of that profile.
    ramp_minutes : int
        Minutes whose peak in flight needs more environments than twice the most of the
        :data:`warmers.lmi.SCALE_OUT_LEAD_MIN` minutes before (and than the minimum): AWS may
        throttle traffic that more than doubles within 5 minutes, where Lambda would
        cold-start instead.
    reason : str
        One sentence with the numbers.
    """

    chosen: bool
    lambda_usd: float
    lmi_usd: float
    environment_hours: float
    ramp_minutes: int
    reason: str


def advise_managed_instances(
        concurrency_max: np.ndarray, concurrency_mean: np.ndarray, invocations: np.ndarray, *,
        memory_mb: int, on_demand_gb_s_usd: float, pc_configured_gb_s_usd: float,
        pc_duration_gb_s_usd: float, lambda_request_usd: float,
        environment_hourly_usd: float, lmi_request_usd: float, per_environment: int,
        minimum_environments: int = 3, lead_min: int = 5, supported: bool = True,
        margin_fraction: float = LMI_MARGIN_FRACTION) -> LmiAdvice:
    """LMI against Lambda for one function's per-minute profile (what CloudWatch shows).

    Parameters
    ----------
    concurrency_max, concurrency_mean, invocations : np.ndarray
        ``(n_minutes,)`` peak and mean requests in flight per minute, and invocations per
        minute (``ConcurrentExecutions`` Maximum/Average and ``Invocations`` Sum).
    memory_mb : int
        The function's memory on Lambda, MB.
    on_demand_gb_s_usd, pc_configured_gb_s_usd, pc_duration_gb_s_usd, lambda_request_usd : float
        Lambda prices, USD per GB-s and per request (`warmers.cost.CostModel`).
    environment_hourly_usd, lmi_request_usd : float
        One LMI environment's instance-time (fee included) per hour and LMI's per-request
        charge, USD (`warmers.lmi.LmiSettings.environment_hourly_usd`, `warmers.lmi.request_usd`).
    per_environment : int
        Requests one environment serves at once (``PerExecutionEnvironmentMaxConcurrency``).
    minimum_environments : int
        ``MinExecutionEnvironments`` (AWS's default 3, `warmers.lmi`).
    lead_min : int
        Minutes LMI needs to add environments (the doubling rule's window).
    supported : bool
        False where the function cannot run on LMI (a runtime before python3.13, a streaming
        agent): never chosen.
    margin_fraction : float
        In [0, 1): by how much LMI must undercut the Lambda lower bound (:data:`LMI_MARGIN_FRACTION`).

    Raises
    ------
    ValueError
        Arrays of different lengths or with negative / non-finite values, or a price,
        ``memory_mb``, ``per_environment``, ``minimum_environments`` or ``lead_min`` out of range.
    """
    peak = np.asarray(concurrency_max, dtype=float)
    mean = np.asarray(concurrency_mean, dtype=float)
    calls = np.asarray(invocations, dtype=float)
    if not peak.shape == mean.shape == calls.shape or peak.ndim != 1:
        raise ValueError("concurrency_max, concurrency_mean and invocations must be 1-d arrays "
                         f"of one length, got {peak.shape}, {mean.shape}, {calls.shape}")
    for name, a in (("concurrency_max", peak), ("concurrency_mean", mean), ("invocations", calls)):
        if a.size and (not np.all(np.isfinite(a)) or float(a.min()) < 0):
            raise ValueError(f"{name} must be finite and >= 0")
    for name, v in (("on_demand_gb_s_usd", on_demand_gb_s_usd),
                    ("pc_configured_gb_s_usd", pc_configured_gb_s_usd),
                    ("pc_duration_gb_s_usd", pc_duration_gb_s_usd),
                    ("lambda_request_usd", lambda_request_usd),
                    ("environment_hourly_usd", environment_hourly_usd),
                    ("lmi_request_usd", lmi_request_usd)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite price >= 0, got {v!r}")
    if memory_mb < 128 or per_environment < 1 or minimum_environments < 0 or lead_min < 1:
        raise ValueError("memory_mb >= 128, per_environment >= 1, minimum_environments >= 0 and "
                         f"lead_min >= 1 required, got {memory_mb}, {per_environment}, "
                         f"{minimum_environments}, {lead_min}")
    if not 0.0 <= margin_fraction < 1.0:
        raise ValueError(f"margin_fraction must be in [0, 1), got {margin_fraction!r}")
    gb_minute = memory_mb / 1024.0 * 60.0
    units = np.ceil(mean)
    on_demand = mean * gb_minute * on_demand_gb_s_usd
    provisioned = units * gb_minute * pc_configured_gb_s_usd + mean * gb_minute * pc_duration_gb_s_usd
    total_calls = float(calls.sum())
    lambda_usd = float(np.minimum(on_demand, provisioned).sum()) + total_calls * lambda_request_usd
    needed = np.maximum(np.ceil(peak / per_environment), minimum_environments)
    environment_hours = float(needed.sum()) / 60.0
    lmi_usd = environment_hours * environment_hourly_usd + total_calls * lmi_request_usd
    ramp = 0
    for m in range(1, needed.shape[0]):
        before = float(needed[max(0, m - lead_min):m].max())
        if needed[m] > max(2.0 * before, float(minimum_environments)):
            ramp += 1
    numbers = (f"LMI ${lmi_usd:.2f} ({environment_hours:.1f} environment-hours, "
               f"{per_environment} requests each, minimum {minimum_environments}) against at "
               f"least ${lambda_usd:.2f} on Lambda at {memory_mb} MB")
    if not supported:
        return LmiAdvice(False, lambda_usd, lmi_usd, environment_hours, ramp,
                         f"Lambda: {numbers}; this function cannot run on LMI")
    if ramp:
        return LmiAdvice(False, lambda_usd, lmi_usd, environment_hours, ramp,
                         f"Lambda: {numbers}, but in {ramp} minute(s) its peak more than doubles "
                         f"within {lead_min} minutes, which LMI may throttle")
    if lmi_usd < (1.0 - margin_fraction) * lambda_usd:
        return LmiAdvice(True, lambda_usd, lmi_usd, environment_hours, ramp,
                         f"LMI: {numbers}, no minute outgrowing LMI's scaling")
    return LmiAdvice(False, lambda_usd, lmi_usd, environment_hours, ramp,
                     f"Lambda: {numbers} (LMI must cost under {1.0 - margin_fraction:.0%} of it)")
