"""What the simulator's engine is given for one function and what it gives back: the request
paths, the :class:`Controls` a policy sets (provisioned concurrency, pings, admission, the
hybrid histogram's windows, LMI), the :class:`FunctionResult` and the :class:`EngineState`
carried between time chunks, and :func:`account_result`, the accounting every engine loop ends with
(:mod:`warmers.simulator.engine` the standard loops, :mod:`warmers.simulator.lmi` the LMI one).

Policies build controls without the engine's loops; the engine and LMI loop share this without
importing each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from warmers.lmi import SCALE_OUT_LEAD_MIN, LmiSettings
from warmers.simulator.constants import (
    BILL_ONDEMAND_INIT,
    HIST_CV_THRESHOLD,
    HIST_FORECAST_MARGIN,
    HIST_HEAD_PCT,
    HIST_MARGIN,
    HIST_MIN_SAMPLES,
    HIST_OOB_SHARE,
    HIST_RANGE_MIN,
    HIST_TAIL_PCT,
    SimulatorPrices,
)
from warmers.simulator.trace import MINUTE_MS, Workload

#: ASSUMPTION: capacity the reactive scaler keeps per served request in flight (2: room for
#: traffic to double, the documented rule; AWS's own default target is not published).
REACTIVE_HEADROOM = 2.0


#: ASSUMPTION: minutes of lower wants before LMI scales in ("scales down gradually",
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-troubleshooting.html).
SCALE_IN_HOLD_MIN = 5


@dataclass(frozen=True, eq=False)
class LmiControls:
    """How the engine runs one function on LMI (``Controls.managed_instances``).

    Attributes
    ----------
    settings : LmiSettings
        Instance type, vCPUs and requests per environment (prices come from it).
    minimum : np.ndarray
        ``(n_minutes,)`` ``MinExecutionEnvironments`` requested in each minute.
    lead_min : int
        Minutes from a scale-out decision (or a raised minimum) to usable environments.
    headroom : float
        Environments the reactive scaler wants per served request in flight, x per_environment.
    scale_in_hold_min : int
        Minutes of lower wants before capacity comes down.
    maximum : int or None
        ``MaxExecutionEnvironments`` (None: unbounded).
    """

    settings: LmiSettings
    minimum: np.ndarray
    lead_min: int = int(SCALE_OUT_LEAD_MIN)
    headroom: float = REACTIVE_HEADROOM
    scale_in_hold_min: int = SCALE_IN_HOLD_MIN
    maximum: int | None = None

    def __post_init__(self) -> None:
        if self.lead_min < 0 or self.scale_in_hold_min < 0:
            raise ValueError("lead_min and scale_in_hold_min must be >= 0")
        if not self.headroom >= 1.0:
            raise ValueError(f"headroom must be >= 1, got {self.headroom}")
        if np.any(np.asarray(self.minimum) < 0):
            raise ValueError("minimum must be >= 0")


#: Path codes of a request (the ``X-Warmstart-Path`` values, and Lambda's throttle).
LOCAL, OVERFLOW, DEGRADED, SHED, THROTTLED = 0, 1, 2, 3, 4


PATH_NAMES = ("local", "overflow", "degraded", "shed", "throttled")


class AdmissionPort(Protocol):
    """Port to the per-request decision of the warmstart runtime (``admission.decide``)."""

    def decide(
        self, arrival_ms: float, now_ms: float, sla_ms: float, duration_ms: float,
        model_ready_in_ms: float, cold_start: bool,
    ) -> int:
        """Path code (LOCAL, OVERFLOW, DEGRADED, SHED) for one request.

        Parameters
        ----------
        arrival_ms : float
            Arrival time (the SLA clock starts here), ms from the start of the trace.
        now_ms : float
            When the handler decides: the arrival, or after the init phase
            (``toolkit_init_ms``) on a cold start.
        sla_ms : float
            The request's SLA.
        duration_ms : float
            Its warm execution time.
        model_ready_in_ms : float
            How long from ``now_ms`` until the environment's model is loaded (0 when ready).
        cold_start : bool
            True when this request created its environment.
        """
        ...


@dataclass(frozen=True)
class HistogramWindows:
    """Settings of the hybrid histogram policy (Shahrad et al., USENIX ATC 2020, sec. 4.2).

    Idle times are whole minutes (from one minute with invocations to the next), in 1-minute
    bins over ``range_min`` minutes. The branches, in order:

    1. *Out of bounds*: more than ``oob_share`` of all idle times are ``>= range_min``. The
       paper forecasts the next idle time with ARIMA; ``oob_branch="forecast"`` uses the
       one-step forecast of a random walk, ARIMA(0,1,0) (the last idle time; an 8-hour trace
       holds at most one idle time of 4 hours or more, too few to fit any other ARIMA order)
       and pre-warms at ``(1 - forecast_margin)`` x it for ``2 x forecast_margin`` x it (the
       paper's 15 % margin). ``oob_branch="standard"``: the standard keep-alive.
    2. *Not representative*: fewer than ``min_samples`` in-range idle times, or a
       coefficient of variation below ``cv_threshold``: no pre-warm, keep-alive
       ``range_min`` (the standard keep-alive). ``cv_of="bin_counts"`` is the paper's CV of
       the histogram's bin counts; ``"idle_times"``, the CV of the idle times themselves.
    3. *Histogram*: head = the ``head_pct`` and tail = the ``tail_pct`` percentile of the
       in-range idle times; pre-warm ``(1 - margin)`` x head, keep-alive ``(1 + margin)`` x
       tail less the pre-warm. ``percentile="bin"``: the first bin whose cumulative share
       reaches the percentile (the paper); ``"linear"``: numpy's linear interpolation.
       ``whole_minutes``: pre-warm rounded down and the keep-alive's end rounded up to whole
       minutes.

    The defaults follow the paper's text; :meth:`issue_model` is the variant the independent
    model of ``tests/unit/simulator/test_sim_hybrid.py`` implements.
    """

    range_min: int = HIST_RANGE_MIN
    head_pct: float = HIST_HEAD_PCT
    tail_pct: float = HIST_TAIL_PCT
    margin: float = HIST_MARGIN
    cv_threshold: float = HIST_CV_THRESHOLD
    min_samples: int = HIST_MIN_SAMPLES
    oob_share: float = HIST_OOB_SHARE
    forecast_margin: float = HIST_FORECAST_MARGIN
    cv_of: Literal["bin_counts", "idle_times"] = "bin_counts"
    percentile: Literal["bin", "linear"] = "bin"
    whole_minutes: bool = False
    oob_branch: Literal["forecast", "standard"] = "forecast"

    def __post_init__(self) -> None:
        if self.range_min < 1 or self.min_samples < 1:
            raise ValueError("range_min and min_samples must be >= 1")
        if not (0.0 <= self.margin < 1.0 and 0.0 <= self.forecast_margin < 1.0):
            raise ValueError("margins must be in [0, 1)")
        if not (0.0 <= self.head_pct <= self.tail_pct <= 100.0):
            raise ValueError("need 0 <= head_pct <= tail_pct <= 100")
        if self.cv_of not in ("bin_counts", "idle_times"):
            raise ValueError(f"cv_of must be 'bin_counts' or 'idle_times', got {self.cv_of!r}")
        if self.percentile not in ("bin", "linear"):
            raise ValueError(f"percentile must be 'bin' or 'linear', got {self.percentile!r}")
        if self.oob_branch not in ("forecast", "standard"):
            raise ValueError(f"oob_branch must be 'forecast' or 'standard', got {self.oob_branch!r}")

    @classmethod
    def issue_model(cls) -> HistogramWindows:
        """Issue 11's reading: representative with >= 10 in-range idle times, at most half of
        all out of range and the idle times' CV >= 2; pre-warm floor(0.9 x p5), keep-alive
        ceil(1.1 x p99) - pre-warm (numpy percentiles); otherwise 240 min, no pre-warm."""
        return cls(cv_of="idle_times", percentile="linear", whole_minutes=True,
                   oob_branch="standard")


@dataclass(frozen=True, eq=False)
class Controls:
    """What a policy sets for one function; the engine simulates it.

    Attributes
    ----------
    keep_alive_ms : float
        Idle time after which an on-demand environment is reclaimed.
    cold_start_ms : float
        Median latency a cold start adds (calibrated init, or restore under SnapStart).
    cold_start_sigma : float
        Lognormal spread of it: the cold start of request ``i`` takes
        ``cold_start_ms * exp(cold_start_sigma * z_i)``, ``z_i`` the request's standard normal
        (``Workload.init_z``), so the calibrated p50 and p95 are the distribution's
        (``Timing.log_sigma``); 0, or a workload without ``init_z``: every cold start takes
        ``cold_start_ms``. Inits not caused by a request (warm pings, pre-warming) take the
        median; inits are billed at the distribution's mean, ``cold_start_ms *
        exp(sigma^2 / 2)``.
    restore : bool
        Cold starts are SnapStart restores (billed per GB restored, cache billed).
    pc_effective : np.ndarray or None
        ``(n_minutes,)`` provisioned environments usable in each minute.
    pc_configured : np.ndarray or None
        ``(n_minutes,)`` provisioned concurrency billed in each minute.
    ping_times_ms : np.ndarray or None
        Sorted times of warm pings.
    ping_concurrency : int
        Environments each ping must reach.
    admission : AdmissionPort or None
        Per-request decision on cold starts and loading environments.
    toolkit_init_ms, overflow_extra_ms, degraded_ms : float
        Latencies of the admission paths: init until the toolkit decides; what overflow adds
        over the request's own duration; the degraded answer.
    histogram : HistogramWindows or None
        Run the hybrid histogram policy instead of a fixed keep-alive.
    finish_preload : {"after", "before", "off"}
        ``after``: an overflowed or degraded answer leaves at once and its invocation's
        post-response phase runs (busy, billed) until the model is ready, at most
        ``post_response_limit_ms``; ``before``: the invocation waits for the model until the
        SLA deadline less ``preload_headroom_ms`` before it answers
        (``functions/runtime/dispatch.py`` ``_finish_preload``); ``off``: it returns with the
        answer. ``True`` / ``False`` are read as ``before`` / ``off`` (the switch's old values).
    post_response_limit_ms : float
        Longest post-response phase, ms (the function timeout: 30 s, cdk.json's default).
    preload_headroom_ms : float
        The admission headroom (``functions.runtime.admission.HANDLER_POLICY.headroom_ms``).
    managed_instances : warmers.simulator.lmi.LmiControls or None
        Run the function on Lambda Managed Instances instead (``warmers.simulator.lmi``: many
        requests per environment, reactive scaling above a minimum, 429 beyond capacity,
        instance-time billing); the other fields are then unused.
    """

    keep_alive_ms: float
    cold_start_ms: float
    restore: bool = False
    cold_start_sigma: float = 0.0
    pc_effective: np.ndarray | None = None
    pc_configured: np.ndarray | None = None
    ping_times_ms: np.ndarray | None = None
    ping_concurrency: int = 1
    admission: AdmissionPort | None = None
    toolkit_init_ms: float = 0.0
    overflow_extra_ms: float = 0.0
    degraded_ms: float = 0.0
    histogram: HistogramWindows | None = None
    finish_preload: str | bool = "after"
    preload_headroom_ms: float = 0.0
    post_response_limit_ms: float = 30_000.0
    managed_instances: LmiControls | None = None

    def __post_init__(self) -> None:
        given = self.finish_preload
        mode = "before" if given is True else "off" if given is False else given
        if mode not in ("after", "before", "off"):
            raise ValueError(f"finish_preload must be 'after', 'before' or 'off', got {self.finish_preload!r}")
        object.__setattr__(self, "finish_preload", mode)
        if not self.post_response_limit_ms >= 0:
            raise ValueError(f"post_response_limit_ms must be >= 0, got {self.post_response_limit_ms}")
        if not self.preload_headroom_ms >= 0:
            raise ValueError(f"preload_headroom_ms must be >= 0, got {self.preload_headroom_ms}")
        if not self.keep_alive_ms >= 0:
            raise ValueError(f"keep_alive_ms must be >= 0, got {self.keep_alive_ms}")
        if not self.cold_start_ms >= 0:
            raise ValueError(f"cold_start_ms must be >= 0, got {self.cold_start_ms}")
        if not self.cold_start_sigma >= 0:
            raise ValueError(f"cold_start_sigma must be >= 0, got {self.cold_start_sigma}")
        if self.ping_concurrency < 1:
            raise ValueError(f"ping_concurrency must be >= 1, got {self.ping_concurrency}")
        if (self.pc_effective is None) != (self.pc_configured is None):
            raise ValueError("pc_effective and pc_configured go together")
        if (
            self.pc_effective is not None
            and self.pc_configured is not None
            and (np.any(self.pc_effective < 0) or np.any(self.pc_configured < 0))
        ):
            raise ValueError("provisioned concurrency must be >= 0")


@dataclass(frozen=True, eq=False)
class FunctionResult:
    """Outcome of one policy on one function.

    Attributes
    ----------
    latencies_ms : np.ndarray
        ``(n_requests,)`` response time of each request.
    paths : np.ndarray
        ``(n_requests,)`` int8 path codes (``PATH_NAMES``).
    breach : np.ndarray
        ``(n_requests,)`` bool, answered (local or overflow) later than the SLA.
    tail : np.ndarray
        ``(n_requests,)`` bool, the warm duration alone exceeds the SLA (policy-independent).
    cold_breaches : int
        Late answers: ``breach`` and not ``tail`` (the breaches a cold start, or a slow path,
        caused); one part of ``failed_answers``.
    cold_starts : int
        Requests that arrived to no idle environment and created one (overflowed or not).
    env_inits : int
        Environments initialized on demand (cold starts + ping-triggered + pre-warmed).
    ondemand_busy_ms, pc_busy_ms : float
        Billed execution time on on-demand / provisioned environments (init excluded).
    init_billed_ms : float
        Billed init (on-demand init phases, or restore time under SnapStart).
    idle_env_ms : float
        Environment-ms alive but not running a request (on-demand and provisioned).
    pc_configured_env_ms : float
        Provisioned concurrency configured, in environment-ms.
    pings : int
        Warm pings sent (each billed as a request).
    restores : int
        SnapStart restores.
    throttled : int
        Requests Lambda throttled at the concurrency limit, or beyond LMI's capacity (not
        billed; failed answers).
    lmi_env_ms : float
        Lambda Managed Instances: execution-environment time held, environment-ms (0 off LMI).
    lmi_env_usd_per_hour : float
        Its price: the environment's vCPU share of the instance's EC2 price plus the management
        fee (``warmers.lmi.LmiSettings.environment_hourly_usd``).
    """

    function_id: str
    memory_mb: int
    sla_ms: float
    horizon_ms: float
    latencies_ms: np.ndarray
    paths: np.ndarray
    breach: np.ndarray
    tail: np.ndarray
    cold_breaches: int
    cold_starts: int
    env_inits: int
    ondemand_busy_ms: float
    pc_busy_ms: float
    init_billed_ms: float
    idle_env_ms: float
    pc_configured_env_ms: float
    pings: int
    restores: int
    snapstart: bool
    throttled: int = 0
    lmi_env_ms: float = 0.0
    lmi_env_usd_per_hour: float = 0.0

    @property
    def n_requests(self) -> int:
        return int(self.latencies_ms.shape[0])

    @property
    def gb(self) -> float:
        return self.memory_mb / 1024.0

    @property
    def failed(self) -> np.ndarray:
        """``(n_requests,)`` bool: shed, degraded, throttled, or a late answer (see the module
        docstring)."""
        failed = (self.paths >= DEGRADED) | (self.breach & ~self.tail)
        return np.asarray(failed, dtype=bool)

    @property
    def failed_answers(self) -> int:
        return int(self.failed.sum())

    @property
    def idle_gb_s(self) -> float:
        return self.idle_env_ms / 1000.0 * self.gb

    def cost_usd(self, prices: SimulatorPrices) -> dict[str, float]:
        """Cost of this function under the policy, by item, in USD.

        References
        ----------
        https://aws.amazon.com/lambda/pricing/ ; rates in ``constants.SimulatorPrices``.
        """
        gb = self.gb
        out = {
            "requests": (self.n_requests - self.throttled + self.pings) * prices.request_usd,
            "ondemand": (self.ondemand_busy_ms + self.init_billed_ms) / 1000.0 * gb
            * prices.ondemand_gb_s_usd,
            "pc_configured": self.pc_configured_env_ms / 1000.0 * gb
            * prices.pc_configured_gb_s_usd,
            "pc_duration": self.pc_busy_ms / 1000.0 * gb * prices.pc_duration_gb_s_usd,
            "snapstart": 0.0,
        }
        if self.snapstart:
            out["snapstart"] = (
                self.horizon_ms / 1000.0 * gb * prices.snapstart_cache_gb_s_usd
                + self.restores * gb * prices.snapstart_restore_gb_usd
            )
        if self.lmi_env_ms > 0:
            # LMI: instance-time (EC2 price + management fee) and LMI's request charge, which
            # warmers/prices.json gives as lmi_requests_per_million (no duration charge)
            from warmers.lmi import request_usd

            out["requests"] = (self.n_requests - self.throttled) * request_usd()
            out["lmi_instances"] = self.lmi_env_ms / 3_600_000.0 * self.lmi_env_usd_per_hour
        return out


class EngineState:
    """One function's execution environments carried across a cut of its requests into time
    chunks: busy and idle environments (with their model-load progress), provisioned ones,
    the next warm ping, the hybrid policy's histogram and every running counter.

    Pass one (empty) instance to consecutive ``simulate_function`` calls over consecutive
    chunks of one function's requests, with the same ``controls`` and ``final=True`` only for
    the last: the results equal one call over all requests (same arithmetic in the same order).
    """

    __slots__ = ("saved",)

    def __init__(self) -> None:
        self.saved: tuple | None = None  # type: ignore[type-arg]


def cold_mean_ms(w: Workload, c: Controls) -> float:
    """Mean cold-start time (what an init is billed): the lognormal's mean, or the median."""
    if c.cold_start_sigma <= 0 or w.init_z is None:
        return float(c.cold_start_ms)
    return float(c.cold_start_ms) * math.exp(c.cold_start_sigma ** 2 / 2.0)


def account_result(
    workload: Workload, controls: Controls, latencies: np.ndarray, paths: np.ndarray,
    cold_starts: int, env_inits: int, od_busy: float, pc_busy: float, idle_ms: float,
    pings: int, init_saved_ms: float = 0.0, final: bool = True,
    throttled_idx: list[int] | None = None,
) -> FunctionResult:
    if throttled_idx:
        idx = np.asarray(throttled_idx, dtype=np.int64)
        latencies[idx] = 0.0  # a 429 at once: no environment, no latency of its own
        paths[idx] = THROTTLED
    breach = (latencies > workload.sla_ms) & (paths <= OVERFLOW)
    tail = workload.durations_ms > workload.sla_ms
    pc_conf_ms = 0.0
    if controls.pc_configured is not None and final:
        pc_conf_ms = float(controls.pc_configured.sum()) * MINUTE_MS
        # provisioned environments are alive for the configured time; what they did not
        # spend running requests is idle
        idle_ms += max(0.0, float(controls.pc_effective.sum()) * MINUTE_MS - pc_busy)  # type: ignore[union-attr]
    mean = cold_mean_ms(workload, controls)
    if controls.restore:
        init_billed = env_inits * mean
    else:
        init_billed = (env_inits * mean - init_saved_ms if BILL_ONDEMAND_INIT else 0.0)
    return FunctionResult(
        function_id=workload.function_id,
        memory_mb=workload.memory_mb,
        sla_ms=workload.sla_ms,
        horizon_ms=workload.horizon_ms,
        latencies_ms=latencies,
        paths=paths,
        breach=breach,
        tail=tail,
        cold_breaches=int((breach & ~tail).sum()),
        cold_starts=cold_starts,
        env_inits=env_inits,
        ondemand_busy_ms=od_busy,
        pc_busy_ms=pc_busy,
        init_billed_ms=init_billed,
        idle_env_ms=idle_ms,
        pc_configured_env_ms=pc_conf_ms,
        pings=pings,
        restores=env_inits if controls.restore else 0,
        snapstart=controls.restore,
        throttled=len(throttled_idx) if throttled_idx else 0,
    )
