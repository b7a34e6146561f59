"""The per-function discrete-event core of the policy simulator, and its accounting.

Model (one function, one alias):

- Each request arrives at its time and runs on one execution environment for its duration;
  an environment runs one request at a time (Lambda's model).
- Routing: an idle provisioned environment first (provisioned concurrency), then the most
  recently used idle on-demand environment (a stack), else a **cold start**: a new on-demand
  environment, busy for the cold-start time (calibrated init, or restore under SnapStart) plus
  the request's duration. Requests never queue (Lambda scales per request).
- Keep-alive: an on-demand environment idle for ``keep_alive_ms`` is reclaimed.
- Concurrency limit (``Workload.concurrency_limit``, every policy alike): Lambda throttles an
  invocation that arrives while the function already has that many in flight (reserved
  concurrency, or the account's unreserved pool; provisioned environments in flight count, as
  do invocations still in their post-response phase): a ``429 TooManyRequestsException``,
  path ``throttled``, not billed, a failed answer.
- Provisioned environments: ``pc_effective[m]`` usable in minute ``m`` (the policy applies the
  allocation delay); spillover beyond them goes on demand. Billed per configured GB-s
  (``pc_configured``) plus the provisioned duration rate.
- Warm pings: at each ping time, ``ping_concurrency`` distinct environments each answer a ping
  (no app code, not counted as traffic); missing ones are created (ping-triggered init).
- Admission (optional, the warmstart policy): on a cold start, or on a warm environment whose
  model is still loading, an ``Admission`` picks local / overflow / degraded / shed.
- Model loading (admission only): an environment's model loads only while the environment runs
  (its init phase and its invocations, warm pings included): Lambda freezes an environment
  when its invocation is complete. ``finish_preload`` is the runtime's
  ``WARMSTART_FINISH_PRELOAD``: ``after`` (default) answers an overflowed or degraded request
  at once (its latency) and keeps the environment busy and billed in the invocation's
  post-response phase until the model is ready (the toolkit's internal extension), bounded by
  ``post_response_limit_ms`` (the function timeout); ``before`` returns at
  ``max(answer, min(model ready, SLA deadline - headroom))``: the response leaves then (its
  latency) and it is billed until then; ``off`` returns with the answer. A model not loaded
  when the invocation ends stays frozen at its progress; the environment's next request goes
  through admission again with the remaining load time.
- Failed answer: a request shed (a fast ``503`` with ``Retry-After``), answered degraded, or
  answered (locally or by overflow) later than its SLA although its warm duration met the SLA
  (a *late* answer). The engine models no errors. A request whose warm duration alone exceeds
  the SLA is in the *tail*: the same under every policy, counted apart and never as a failure
  when it is answered late (it is one when shed or degraded).

Because the idle environments form a stack (most recently used on top) and reclaim removes the
oldest, each arrival only looks at the top of the stack: when the top is older than the
keep-alive, every idle environment is; the core is one pass over the sorted arrivals with two
small heaps (on-demand busy, provisioned busy), about 0.5 us per request in CPython.

References
----------
Lambda execution environment lifecycle:
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html ;
provisioned concurrency and spillover:
https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html
"""

from __future__ import annotations

import math
from bisect import insort
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

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
    PING_BILLED_MS,
    PING_HOLD_MS,
    Prices,
)
from warmers.simulator.trace import MINUTE_MS, Workload

if TYPE_CHECKING:
    from warmers.simulator.lmi import LmiControls

#: Path codes of a request (the ``X-Warmstart-Path`` values, and Lambda's throttle).
LOCAL, OVERFLOW, DEGRADED, SHED, THROTTLED = 0, 1, 2, 3, 4
PATH_NAMES = ("local", "overflow", "degraded", "shed", "throttled")


class Admission(Protocol):
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
    admission : Admission or None
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
    admission: Admission | None = None
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

    def cost_usd(self, prices: Prices) -> dict[str, float]:
        """Cost of this function under the policy, by item, in USD.

        References
        ----------
        https://aws.amazon.com/lambda/pricing/ ; rates in ``constants.Prices``.
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


def simulate_function(
    workload: Workload, controls: Controls, *, state: EngineState | None = None,
    final: bool = True,
) -> FunctionResult:
    """Simulate one function under one policy's controls.

    Parameters
    ----------
    workload : Workload
        Its requests (sorted arrivals, durations), memory and SLA; with ``state``, one time
        chunk of them (``counts`` still the whole series: it sets the horizon).
    controls : Controls
        Keep-alive, cold-start time, provisioned concurrency, pings, admission.
    state : EngineState, optional
        Environments carried from the previous chunk (updated in place).
    final : bool
        This is the last chunk: trailing pings and the end of the horizon are accounted.
        With ``final=False`` the per-request arrays cover this chunk only and the scalar
        counters are running totals so far (the final chunk's are the function's totals).

    Returns
    -------
    FunctionResult

    Raises
    ------
    ValueError
        Arrays of the wrong length or unsorted arrivals.
    """
    a = workload.arrivals_ms
    d = workload.durations_ms
    if a.shape != d.shape or a.ndim != 1:
        raise ValueError(f"arrivals {a.shape} and durations {d.shape} must be equal 1-D shapes")
    if a.shape[0] > 1 and np.any(np.diff(a) < 0):
        raise ValueError("arrivals_ms must be sorted")
    n_min = workload.n_minutes
    for name in ("pc_effective", "pc_configured"):
        arr = getattr(controls, name)
        if arr is not None and arr.shape != (n_min,):
            raise ValueError(f"{name} must have shape ({n_min},), got {arr.shape}")
    if not final and state is None:
        raise ValueError("final=False needs a state to carry the environments")
    if controls.managed_instances is not None:
        from warmers.simulator.lmi import simulate_lmi

        return simulate_lmi(workload, controls, state=state, final=final)
    if controls.histogram is not None:
        return _simulate_histogram(workload, controls, controls.histogram, state, final)
    if controls.admission is None:
        return _simulate_plain(workload, controls, state, final)
    return _simulate_pool(workload, controls, state, final)


def _cold_times(w: Workload, c: Controls) -> list[float] | None:
    """Per request, the time its cold start would take (``Controls.cold_start_sigma``); None
    when every cold start takes ``cold_start_ms``."""
    if c.cold_start_sigma <= 0 or w.init_z is None:
        return None
    times: list[float] = (float(c.cold_start_ms) * np.exp(c.cold_start_sigma * w.init_z)).tolist()
    return times


def _cold_mean_ms(w: Workload, c: Controls) -> float:
    """Mean cold-start time (what an init is billed): the lognormal's mean, or the median."""
    if c.cold_start_sigma <= 0 or w.init_z is None:
        return float(c.cold_start_ms)
    return float(c.cold_start_ms) * math.exp(c.cold_start_sigma ** 2 / 2.0)


def _finish(
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
    mean = _cold_mean_ms(workload, controls)
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


def _simulate_plain(
    w: Workload, c: Controls, state: EngineState | None = None, final: bool = True,
) -> FunctionResult:
    """``_simulate_pool`` without admission: environments are ready once initialized, so the
    heaps hold plain floats (about twice as fast on the busiest functions)."""
    arrivals = w.arrivals_ms.tolist()
    durations = w.durations_ms.tolist()
    horizon = w.horizon_ms
    ka = float(c.keep_alive_ms)
    cold_ms = float(c.cold_start_ms)
    colds = _cold_times(w, c)
    pc = c.pc_effective.tolist() if c.pc_effective is not None else None
    n_min = w.n_minutes
    pings = c.ping_times_ms.tolist() if c.ping_times_ms is not None else []
    ping_conc = c.ping_concurrency
    ping_hold = PING_BILLED_MS if ping_conc == 1 else PING_HOLD_MS

    idle: list[float] = []  # idle since, per idle on-demand environment (top = last)
    busy: list[float] = []  # busy until, per busy on-demand environment (heap)
    pc_busy: list[float] = []
    cold_idx: list[int] = []
    throttled: list[int] = []
    limit = _limit(w)
    env_inits = 0
    od_busy = pc_busy_ms = idle_ms = 0.0
    n_pings = 0
    pi = 0
    cold_before = 0
    if state is not None and state.saved is not None:
        (idle, busy, pc_busy, env_inits, od_busy, pc_busy_ms, idle_ms, n_pings, pi,
         cold_before) = state.saved
    n_ping_times = len(pings)
    push = idle.append
    pop = idle.pop

    def ping(p: float) -> None:
        nonlocal n_pings, env_inits, od_busy, pc_busy_ms, idle_ms
        while busy and busy[0] <= p:
            push(heappop(busy))
        for _ in range(ping_conc):
            n_pings += 1
            if pc is not None:
                m = int(p // MINUTE_MS)
                if m < n_min and pc[m] > 0:
                    while pc_busy and pc_busy[0] <= p:
                        heappop(pc_busy)
                    if len(pc_busy) < pc[m]:
                        heappush(pc_busy, p + ping_hold)
                        pc_busy_ms += ping_hold
                        continue
            if idle and p - idle[-1] < ka:
                idle_ms += p - pop()
                heappush(busy, p + ping_hold)
            else:
                if idle:
                    idle_ms += ka * len(idle)
                    idle.clear()
                env_inits += 1
                heappush(busy, p + cold_ms + ping_hold)
            od_busy += ping_hold

    for i in range(len(arrivals)):
        t = arrivals[i]
        while pi < n_ping_times and pings[pi] <= t:
            ping(pings[pi])
            pi += 1
        while busy and busy[0] <= t:
            push(heappop(busy))
        while pc_busy and pc_busy[0] <= t:
            heappop(pc_busy)
        if len(busy) + len(pc_busy) >= limit:  # Lambda's throttle (module docstring)
            throttled.append(i)
            continue
        dur = durations[i]
        if pc is not None:
            m = int(t // MINUTE_MS)
            if pc[m] > 0:
                if len(pc_busy) < pc[m]:
                    heappush(pc_busy, t + dur)
                    pc_busy_ms += dur
                    continue
        if idle and t - idle[-1] < ka:
            idle_ms += t - pop()
            heappush(busy, t + dur)
        else:
            if idle:
                idle_ms += ka * len(idle)
                idle.clear()
            cold_idx.append(i)
            env_inits += 1
            heappush(busy, t + (cold_ms if colds is None else colds[i]) + dur)
        od_busy += dur
    if state is not None:
        state.saved = (idle, busy, pc_busy, env_inits, od_busy, pc_busy_ms, idle_ms, n_pings, pi,
                       cold_before + len(cold_idx))
    if final:
        while pi < n_ping_times:
            ping(pings[pi])
            pi += 1
        for since in idle:
            idle_ms += max(0.0, min(ka, horizon - since))
        for end in busy:
            idle_ms += max(0.0, min(ka, horizon - end))
    latencies = w.durations_ms.copy()
    if cold_idx:
        _add_cold(latencies, cold_idx, cold_ms, colds)
    paths = np.zeros(latencies.shape[0], dtype=np.int8)
    return _finish(
        w, c, latencies, paths, cold_before + len(cold_idx), env_inits, od_busy, pc_busy_ms,
        idle_ms, n_pings, final=final, throttled_idx=throttled,
    )


def _simulate_pool(
    w: Workload, c: Controls, state: EngineState | None = None, final: bool = True,
) -> FunctionResult:
    arrivals = w.arrivals_ms.tolist()
    durations = w.durations_ms.tolist()
    horizon = w.horizon_ms
    ka = float(c.keep_alive_ms)
    cold_ms = float(c.cold_start_ms)
    colds = _cold_times(w, c)
    pc = c.pc_effective.tolist() if c.pc_effective is not None else None
    n_min = w.n_minutes
    pings = c.ping_times_ms.tolist() if c.ping_times_ms is not None else []
    ping_conc = c.ping_concurrency
    ping_hold = PING_BILLED_MS if ping_conc == 1 else PING_HOLD_MS
    adm = c.admission
    sla = w.sla_ms

    idle_t: list[float] = []  # idle since, per idle on-demand environment (top = last)
    idle_r: list[float] = []  # model load time left, frozen while idle (admission only)
    # (busy until, model ready at if the environment kept running): the load time left when
    # it goes idle is ``max(0, ready - until)``
    busy: list[tuple[float, float]] = []
    pc_busy: list[float] = []
    special_idx: list[int] = []
    special_lat: list[float] = []
    special_path: list[int] = []
    throttled: list[int] = []
    limit = _limit(w)
    cold_starts = env_inits = 0
    od_busy = pc_busy_ms = idle_ms = init_saved = 0.0
    n_pings = 0
    pi = 0
    if state is not None and state.saved is not None:
        (idle_t, idle_r, busy, pc_busy, cold_starts, env_inits, od_busy, pc_busy_ms, idle_ms,
         init_saved, n_pings, pi) = state.saved
    n_ping_times = len(pings)
    toolkit = c.toolkit_init_ms
    ovf = c.overflow_extra_ms
    deg = c.degraded_ms
    finish = c.finish_preload == "before"
    after = c.finish_preload == "after"
    post_limit = c.post_response_limit_ms
    # latest return of an overflowed/degraded invocation that waits for the model, ms after
    # the arrival (the SLA deadline less the admission headroom)
    wait_until = sla - c.preload_headroom_ms

    for i in range(len(arrivals)):
        t = arrivals[i]
        dur = durations[i]
        # warm pings due before this arrival
        while pi < n_ping_times and pings[pi] <= t:
            p = pings[pi]
            pi += 1
            while busy and busy[0][0] <= p:
                end, ready = heappop(busy)
                idle_t.append(end)
                idle_r.append(ready - end if ready > end else 0.0)
            for _ in range(ping_conc):
                n_pings += 1
                if pc is not None:
                    m = int(p // MINUTE_MS)
                    if m < n_min and pc[m] > 0:
                        while pc_busy and pc_busy[0] <= p:
                            heappop(pc_busy)
                        if len(pc_busy) < pc[m]:
                            heappush(pc_busy, p + ping_hold)
                            pc_busy_ms += ping_hold
                            continue
                if idle_t and p - idle_t[-1] < ka:
                    idle_ms += p - idle_t.pop()
                    left = idle_r.pop()  # the model loads on while the ping runs
                    heappush(busy, (p + ping_hold, p + max(ping_hold, left) if left else p))
                else:
                    if idle_t:
                        idle_ms += ka * len(idle_t)
                        idle_t.clear()
                        idle_r.clear()
                    env_inits += 1
                    heappush(busy, (p + cold_ms + ping_hold, p + cold_ms))
                od_busy += ping_hold
        while busy and busy[0][0] <= t:
            end, ready = heappop(busy)
            idle_t.append(end)
            idle_r.append(ready - end if ready > end else 0.0)
        while pc_busy and pc_busy[0] <= t:
            heappop(pc_busy)
        if len(busy) + len(pc_busy) >= limit:  # Lambda's throttle (module docstring)
            throttled.append(i)
            continue
        if pc is not None:
            m = int(t // MINUTE_MS)
            if pc[m] > 0:
                if len(pc_busy) < pc[m]:
                    heappush(pc_busy, t + dur)
                    pc_busy_ms += dur
                    continue
        if idle_t and t - idle_t[-1] < ka:
            idle_ms += t - idle_t.pop()
            left = idle_r.pop()
            if adm is not None and left > 0.0:
                # the model was frozen mid-load: admission again, with the load time left
                path = adm.decide(t, t, sla, dur, left, False)
                if path == LOCAL:
                    lat = left + dur
                elif path == OVERFLOW or path == DEGRADED:
                    lat = ovf + dur if path == OVERFLOW else deg
                    if finish:
                        lat = max(lat, min(left, wait_until))
                else:
                    lat = 0.0
                special_idx.append(i)
                special_lat.append(lat)
                special_path.append(path)
                # after the response: busy (and billed) until the model is ready, bounded
                run = max(lat, min(left, post_limit)) if after and path != LOCAL else lat
                heappush(busy, (t + run, t + left))
                od_busy += run
            else:
                heappush(busy, (t + dur, t))
                od_busy += dur
        else:
            if idle_t:
                idle_ms += ka * len(idle_t)
                idle_t.clear()
                idle_r.clear()
            cold_starts += 1
            env_inits += 1
            cold = cold_ms if colds is None else colds[i]
            ready = t + cold
            path = LOCAL if adm is None else adm.decide(
                t, t + toolkit, sla, dur, max(0.0, cold - toolkit), True
            )
            if path == LOCAL:
                lat = cold + dur
                billed = dur  # the init (model load included) is billed apart (init_billed_ms)
            else:
                if path == OVERFLOW or path == DEGRADED:
                    lat = toolkit + (ovf + dur if path == OVERFLOW else deg)
                    if finish:
                        # the invocation waits for the model until the deadline less headroom
                        lat = max(lat, min(cold, wait_until))
                else:
                    lat = toolkit
                # the init phase ended after the toolkit's init (billed as such); the
                # invocation is billed from there until it is complete: with ``after``, its
                # post-response phase runs until the model is ready (bounded)
                init_saved += max(0.0, cold - toolkit)
                run = max(lat, min(cold, toolkit + post_limit)) if after and path != SHED else lat
                billed = run - toolkit
            special_idx.append(i)
            special_lat.append(lat)
            special_path.append(path)
            heappush(busy, (t + (run if path != LOCAL else lat), ready))
            od_busy += billed
    if state is not None:
        state.saved = (idle_t, idle_r, busy, pc_busy, cold_starts, env_inits, od_busy, pc_busy_ms,
                       idle_ms, init_saved, n_pings, pi)
    if final:
        # pings after the last arrival
        while pi < n_ping_times:
            p = pings[pi]
            pi += 1
            while busy and busy[0][0] <= p:
                end, ready = heappop(busy)
                idle_t.append(end)
                idle_r.append(ready - end if ready > end else 0.0)
            for _ in range(ping_conc):
                n_pings += 1
                if idle_t and p - idle_t[-1] < ka:
                    idle_ms += p - idle_t.pop()
                    left = idle_r.pop()  # the model loads on while the ping runs
                    heappush(busy, (p + ping_hold, p + max(ping_hold, left) if left else p))
                else:
                    if idle_t:
                        idle_ms += ka * len(idle_t)
                        idle_t.clear()
                        idle_r.clear()
                    env_inits += 1
                    heappush(busy, (p + cold_ms + ping_hold, p + cold_ms))
                od_busy += ping_hold
        # environments left at the end of the horizon idle until reclaim or the horizon
        for since in idle_t:
            idle_ms += max(0.0, min(ka, horizon - since))
        for end, _ in busy:
            idle_ms += max(0.0, min(ka, horizon - end))

    latencies = w.durations_ms.copy()
    paths = np.zeros(latencies.shape[0], dtype=np.int8)
    if special_idx:
        idx = np.asarray(special_idx, dtype=np.int64)
        latencies[idx] = special_lat
        paths[idx] = special_path
    return _finish(
        w, c, latencies, paths, cold_starts, env_inits, od_busy, pc_busy_ms, idle_ms, n_pings,
        init_saved, final=final, throttled_idx=throttled,
    )


def histogram_windows_ms(
    hist: list[int], oob: int, params: HistogramWindows, *, last_idle_min: float = 0.0,
) -> tuple[float, float]:
    """Pre-warm and keep-alive windows (ms) from an idle-time histogram.

    Parameters
    ----------
    hist : list[int]
        ``(range_min,)`` counts of idle times in 1-minute bins (bin ``b``: an idle time of
        ``b`` minutes, minutes from one invocation minute to the next).
    oob : int
        Idle times of ``range_min`` minutes or more (out of bounds).
    params : HistogramWindows
    last_idle_min : float
        The latest idle time, minutes (the out-of-bounds branch's forecast).

    Returns
    -------
    (prewarm_ms, keep_alive_ms) : tuple[float, float]
        See ``HistogramWindows`` for the branches.

    References
    ----------
    M. Shahrad et al., "Serverless in the Wild", USENIX ATC 2020, sec. 4.2.
    """
    state = _IdleHistogram(params)
    for b, n in enumerate(hist):
        for _ in range(n):
            state.add(b)
    state.oob = oob
    state.last = last_idle_min
    pw, ka, _ = state.windows_min()
    return pw * MINUTE_MS, ka * MINUTE_MS


class _IdleHistogram:
    """Idle-time histogram (whole minutes) with O(1) updates of its moments."""

    __slots__ = ("bins", "it_sum", "it_sum_sq", "last", "nonzero", "oob", "params", "sum_sq",
                 "total")

    def __init__(self, params: HistogramWindows) -> None:
        self.params = params
        self.bins = [0] * params.range_min
        self.nonzero: list[int] = []  # sorted bins with a count
        self.oob = 0
        self.total = 0  # in-range idle times
        self.sum_sq = 0  # sum of squared bin counts
        self.it_sum = 0.0  # sum and sum of squares of the in-range idle times
        self.it_sum_sq = 0.0
        self.last = 0.0

    def add(self, idle_min: int) -> None:
        self.last = float(idle_min)
        if idle_min >= len(self.bins):
            self.oob += 1
            return
        old = self.bins[idle_min]
        if old == 0:
            insort(self.nonzero, idle_min)
        self.bins[idle_min] = old + 1
        self.total += 1
        self.sum_sq += 2 * old + 1
        self.it_sum += idle_min
        self.it_sum_sq += idle_min * idle_min

    def _cv(self) -> float:
        n = self.total
        if self.params.cv_of == "idle_times":
            mean = self.it_sum / n
            var = max(0.0, self.it_sum_sq / n - mean * mean)
        else:  # the bin counts over the whole range
            nb = len(self.bins)
            mean = n / nb
            var = max(0.0, self.sum_sq / nb - mean * mean)
        return math.sqrt(var) / mean if mean > 0 else 0.0

    def _percentile(self, pct: float) -> float:
        """``pct`` percentile of the in-range idle times (minutes)."""
        n = self.total
        if self.params.percentile == "linear":  # numpy's default (linear in the order stats)
            pos = pct / 100.0 * (n - 1)
            lo_rank = math.floor(pos)
            v_lo = v_hi = -1.0
            cum = 0
            for b in self.nonzero:
                cum += self.bins[b]
                if v_lo < 0 and cum > lo_rank:
                    v_lo = b
                if cum > lo_rank + 1 or cum >= n:
                    v_hi = b
                    break
            return v_lo + (v_hi - v_lo) * (pos - lo_rank)
        need = pct / 100.0 * n  # the first bin whose cumulative share reaches pct
        cum = 0
        for b in self.nonzero:
            cum += self.bins[b]
            if cum >= need:
                return float(b)
        return float(self.nonzero[-1])

    def windows_min(self) -> tuple[float, float, str]:
        """(pre-warm minutes, keep-alive minutes, branch) from the idle times so far."""
        p = self.params
        standard = (0.0, float(len(self.bins)), "standard")
        if self.oob > p.oob_share * (self.total + self.oob):
            if p.oob_branch == "standard" or self.last <= 0:
                return standard
            # forecast of the next idle time: the last one (ARIMA(0,1,0), a random walk)
            pred = self.last
            return pred * (1.0 - p.forecast_margin), 2.0 * p.forecast_margin * pred, "forecast"
        if self.total < p.min_samples or self._cv() < p.cv_threshold:
            return standard
        head = self._percentile(p.head_pct)
        tail = self._percentile(p.tail_pct)
        if p.whole_minutes:
            pw = float(math.floor((1.0 - p.margin) * head))
            return pw, float(math.ceil((1.0 + p.margin) * tail)) - pw, "histogram"
        pw = (1.0 - p.margin) * head
        return pw, (1.0 + p.margin) * tail - pw, "histogram"


def _simulate_histogram(
    w: Workload, c: Controls, params: HistogramWindows, state: EngineState | None = None,
    final: bool = True,
) -> FunctionResult:
    """Hybrid histogram policy: the function is the unit that is loaded, as the application is
    in the paper (sec. 4.2); its execution environments live and go together.

    Time is in whole minutes, as in the paper's trace-driven evaluation: the idle time is the
    number of minutes from one minute with invocations (``a``) to the next (``m``). After each
    such minute the windows from the histogram so far apply: the function is loaded in minute
    ``m`` iff ``max(1, ceil(pw)) <= m - a <= floor(pw + ka)``; with ``pw >= 1`` minute it is
    unloaded after minute ``a`` and as many environments as were idle are loaded again at the
    start of minute ``a + ceil(pw)``. An arrival that finds the function loaded uses an idle
    environment when one is free (a new one otherwise: a cold start); one that finds it
    unloaded meets a cold start, as does every arrival that finds no idle environment. No
    environment is reclaimed on its own while the function stays loaded.
    """
    arrivals = w.arrivals_ms.tolist()
    durations = w.durations_ms.tolist()
    horizon = w.horizon_ms
    cold_ms = float(c.cold_start_ms)
    colds = _cold_times(w, c)
    hist = _IdleHistogram(params)
    pw, kaw, _ = hist.windows_min()

    idle: list[float] = []  # idle since (top = last); a reloaded one: since its reload
    busy: list[float] = []
    cold_idx: list[int] = []
    throttled: list[int] = []
    limit = _limit(w)
    cold_starts = env_inits = 0
    od_busy = idle_ms = 0.0
    last_minute = -1  # the last minute with invocations
    if state is not None and state.saved is not None:
        (hist, pw, kaw, idle, busy, cold_starts, env_inits, od_busy, idle_ms,
         last_minute) = state.saved

    def settle(t: float, minute: int) -> bool:
        """Idle environments from the last active minute until ``t`` (an arrival in
        ``minute``, or the horizon): counts their idle time, drops them or reloads them;
        True when the function is loaded at ``t``."""
        nonlocal idle_ms, env_inits
        gap = minute - last_minute
        lo = max(1, math.ceil(pw - 1e-9))
        hi = math.floor(pw + kaw + 1e-9)
        end_ms = (last_minute + hi + 1) * MINUTE_MS  # unloaded from here
        loaded = lo <= gap <= hi
        if lo > 1:  # unloaded after the active minute, reloaded at minute last + lo
            unload_ms = (last_minute + 1) * MINUTE_MS
            reload_ms = (last_minute + lo) * MINUTE_MS
            n = 0
            for since in idle:
                idle_ms += max(0.0, unload_ms - since)
                if since < reload_ms:
                    n += 1
            if t >= reload_ms:
                env_inits += n
                idle_ms += n * max(0.0, min(t, end_ms) - reload_ms)
            idle[:] = [t] * n if loaded else []
        else:
            for since in idle:
                idle_ms += max(0.0, min(t, end_ms) - since)
            idle[:] = [t] * len(idle) if loaded else []
        return loaded

    for i in range(len(arrivals)):
        t = arrivals[i]
        dur = durations[i]
        minute = int(t // MINUTE_MS)
        while busy and busy[0] <= t:
            idle.append(heappop(busy))
        if len(busy) >= limit:  # Lambda's throttle (module docstring)
            throttled.append(i)
            continue
        if minute != last_minute:
            if last_minute >= 0:
                settle(t, minute)
                hist.add(minute - last_minute)
                pw, kaw, _ = hist.windows_min()
            last_minute = minute
        if idle:
            idle_ms += t - idle.pop()
            heappush(busy, t + dur)
        else:
            cold_starts += 1
            env_inits += 1
            cold_idx.append(i)
            heappush(busy, t + (cold_ms if colds is None else colds[i]) + dur)
        od_busy += dur
    if state is not None:
        state.saved = (hist, pw, kaw, idle, busy, cold_starts, env_inits, od_busy, idle_ms,
                       last_minute)
    if final:
        while busy:
            idle.append(heappop(busy))
        if last_minute >= 0:
            idle.sort()
            settle(horizon, w.n_minutes + 10**9)  # never loaded again: count idle until unload
    latencies = w.durations_ms.copy()
    if cold_idx:
        _add_cold(latencies, cold_idx, cold_ms, colds)
    paths = np.zeros(latencies.shape[0], dtype=np.int8)
    return _finish(w, c, latencies, paths, cold_starts, env_inits, od_busy, 0.0, idle_ms, 0,
                   final=final, throttled_idx=throttled)


def _limit(w: Workload) -> float:
    """The function's concurrency limit (``Workload.concurrency_limit``); none: unbounded."""
    return math.inf if w.concurrency_limit is None else float(w.concurrency_limit)


def _add_cold(latencies: np.ndarray, cold_idx: list[int], cold_ms: float,
              colds: list[float] | None) -> None:
    """Add each cold-started request's cold-start time to its latency (in place)."""
    idx = np.asarray(cold_idx, dtype=np.int64)
    latencies[idx] += cold_ms if colds is None else np.asarray(colds)[idx]
