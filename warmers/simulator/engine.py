"""The per-function discrete-event core of the policy simulator, and its accounting.

Model (one function, one alias):

- Each request arrives at its time and runs on one execution environment for its duration;
  an environment runs one request at a time (Lambda's model).
- Routing: an idle provisioned environment first (provisioned concurrency), then the most
  recently used idle on-demand environment (a stack), else a **cold start**: a new on-demand
  environment, busy for the cold-start time (calibrated init, or restore under SnapStart) plus
  the request's duration. Requests never queue (Lambda scales per request).
- Keep-alive: an on-demand environment idle for ``keep_alive_ms`` is reclaimed.
- Provisioned environments: ``pc_effective[m]`` usable in minute ``m`` (the policy applies the
  allocation delay); spillover beyond them goes on demand. Billed per configured GB-s
  (``pc_configured``) plus the provisioned duration rate.
- Warm pings: at each ping time, ``ping_concurrency`` distinct environments each answer a ping
  (no app code, not counted as traffic); missing ones are created (ping-triggered init).
- Admission (optional, the warmstart policy): on a cold start, or on a warm environment whose
  model is still loading, an ``Admission`` picks local / overflow / degraded / shed.
- Model loading (admission only): an environment's model loads only while the environment runs
  (its init phase and its invocations, warm pings included): Lambda freezes an environment
  when its invocation returns. With ``finish_preload`` (the runtime's
  ``WARMSTART_FINISH_PRELOAD``, default on) an overflowed or degraded answer's invocation
  returns at ``max(answer, min(model ready, SLA deadline - headroom))``: the response leaves
  then (its latency) and it is billed until then. A model not loaded by then stays frozen at
  its progress; the environment's next request goes through admission again with the
  remaining load time.
- SLA breach: a request answered later than its SLA that was not degraded (shed requests are
  counted apart: they get a fast ``503`` with ``Retry-After``, not an answer).

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

from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Protocol

import numpy as np

from warmers.simulator.constants import (
    BILL_ONDEMAND_INIT,
    HIST_CV_THRESHOLD,
    HIST_HEAD_PCT,
    HIST_MARGIN,
    HIST_MIN_SAMPLES,
    HIST_RANGE_MIN,
    HIST_TAIL_PCT,
    PING_BILLED_MS,
    PING_HOLD_MS,
    Prices,
)
from warmers.simulator.trace import MINUTE_MS, Workload

#: Path codes of a request (the ``X-Warmstart-Path`` values).
LOCAL, OVERFLOW, DEGRADED, SHED = 0, 1, 2, 3
PATH_NAMES = ("local", "overflow", "degraded", "shed")


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
    """Settings of the hybrid histogram policy (Shahrad et al., USENIX ATC 2020, sec. 4.2)."""

    range_min: int = HIST_RANGE_MIN
    head_pct: float = HIST_HEAD_PCT
    tail_pct: float = HIST_TAIL_PCT
    margin: float = HIST_MARGIN
    cv_threshold: float = HIST_CV_THRESHOLD
    min_samples: int = HIST_MIN_SAMPLES


@dataclass(frozen=True, eq=False)
class Controls:
    """What a policy sets for one function; the engine simulates it.

    Attributes
    ----------
    keep_alive_ms : float
        Idle time after which an on-demand environment is reclaimed.
    cold_start_ms : float
        Latency a cold start adds (calibrated init, or restore under SnapStart).
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
    finish_preload : bool
        An overflowed or degraded answer's invocation waits for the model until the SLA
        deadline less ``preload_headroom_ms`` (``functions/runtime/dispatch.py``
        ``_finish_preload``); off: it returns with the answer.
    preload_headroom_ms : float
        The admission headroom (``functions.runtime.admission.HANDLER_POLICY.headroom_ms``).
    """

    keep_alive_ms: float
    cold_start_ms: float
    restore: bool = False
    pc_effective: np.ndarray | None = None
    pc_configured: np.ndarray | None = None
    ping_times_ms: np.ndarray | None = None
    ping_concurrency: int = 1
    admission: Admission | None = None
    toolkit_init_ms: float = 0.0
    overflow_extra_ms: float = 0.0
    degraded_ms: float = 0.0
    histogram: HistogramWindows | None = None
    finish_preload: bool = True
    preload_headroom_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.preload_headroom_ms >= 0:
            raise ValueError(f"preload_headroom_ms must be >= 0, got {self.preload_headroom_ms}")
        if not self.keep_alive_ms >= 0:
            raise ValueError(f"keep_alive_ms must be >= 0, got {self.keep_alive_ms}")
        if not self.cold_start_ms >= 0:
            raise ValueError(f"cold_start_ms must be >= 0, got {self.cold_start_ms}")
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
        ``(n_requests,)`` bool, answered later than the SLA and not degraded or shed.
    cold_breaches : int
        SLA breaches of requests whose warm duration alone was within the SLA (the breaches
        a cold start, or a slow path, caused).
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
    """

    function_id: str
    memory_mb: int
    sla_ms: float
    horizon_ms: float
    latencies_ms: np.ndarray
    paths: np.ndarray
    breach: np.ndarray
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

    @property
    def n_requests(self) -> int:
        return int(self.latencies_ms.shape[0])

    @property
    def gb(self) -> float:
        return self.memory_mb / 1024.0

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
            "requests": (self.n_requests + self.pings) * prices.request_usd,
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
        return out


def simulate_function(workload: Workload, controls: Controls) -> FunctionResult:
    """Simulate one function under one policy's controls.

    Parameters
    ----------
    workload : Workload
        Its requests (sorted arrivals, durations), memory and SLA.
    controls : Controls
        Keep-alive, cold-start time, provisioned concurrency, pings, admission.

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
    if controls.histogram is not None:
        return _simulate_histogram(workload, controls, controls.histogram)
    if controls.admission is None:
        return _simulate_plain(workload, controls)
    return _simulate_pool(workload, controls)


def _finish(
    workload: Workload, controls: Controls, latencies: np.ndarray, paths: np.ndarray,
    cold_starts: int, env_inits: int, od_busy: float, pc_busy: float, idle_ms: float,
    pings: int, init_saved_ms: float = 0.0,
) -> FunctionResult:
    answered = paths <= DEGRADED
    breach = (latencies > workload.sla_ms) & (paths != DEGRADED) & answered
    pc_conf_ms = 0.0
    if controls.pc_configured is not None:
        pc_conf_ms = float(controls.pc_configured.sum()) * MINUTE_MS
        # provisioned environments are alive for the configured time; what they did not
        # spend running requests is idle
        idle_ms += max(0.0, float(controls.pc_effective.sum()) * MINUTE_MS - pc_busy)  # type: ignore[union-attr]
    if controls.restore:
        init_billed = env_inits * controls.cold_start_ms
    else:
        init_billed = (env_inits * controls.cold_start_ms - init_saved_ms
                       if BILL_ONDEMAND_INIT else 0.0)
    return FunctionResult(
        function_id=workload.function_id,
        memory_mb=workload.memory_mb,
        sla_ms=workload.sla_ms,
        horizon_ms=workload.horizon_ms,
        latencies_ms=latencies,
        paths=paths,
        breach=breach,
        cold_breaches=int((breach & (workload.durations_ms <= workload.sla_ms)).sum()),
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
    )


def _simulate_plain(w: Workload, c: Controls) -> FunctionResult:
    """``_simulate_pool`` without admission: environments are ready once initialized, so the
    heaps hold plain floats (about twice as fast on the busiest functions)."""
    arrivals = w.arrivals_ms.tolist()
    durations = w.durations_ms.tolist()
    horizon = w.horizon_ms
    ka = float(c.keep_alive_ms)
    cold_ms = float(c.cold_start_ms)
    pc = c.pc_effective.tolist() if c.pc_effective is not None else None
    n_min = w.n_minutes
    pings = c.ping_times_ms.tolist() if c.ping_times_ms is not None else []
    ping_conc = c.ping_concurrency
    ping_hold = PING_BILLED_MS if ping_conc == 1 else PING_HOLD_MS

    idle: list[float] = []  # idle since, per idle on-demand environment (top = last)
    busy: list[float] = []  # busy until, per busy on-demand environment (heap)
    pc_busy: list[float] = []
    cold_idx: list[int] = []
    env_inits = 0
    od_busy = pc_busy_ms = idle_ms = 0.0
    n_pings = 0
    pi = 0
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
        dur = durations[i]
        if pc is not None:
            m = int(t // MINUTE_MS)
            if pc[m] > 0:
                while pc_busy and pc_busy[0] <= t:
                    heappop(pc_busy)
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
            heappush(busy, t + cold_ms + dur)
        od_busy += dur
    while pi < n_ping_times:
        ping(pings[pi])
        pi += 1
    for since in idle:
        idle_ms += max(0.0, min(ka, horizon - since))
    for end in busy:
        idle_ms += max(0.0, min(ka, horizon - end))
    latencies = w.durations_ms.copy()
    if cold_idx:
        latencies[np.asarray(cold_idx, dtype=np.int64)] += cold_ms
    paths = np.zeros(latencies.shape[0], dtype=np.int8)
    return _finish(
        w, c, latencies, paths, len(cold_idx), env_inits, od_busy, pc_busy_ms, idle_ms, n_pings
    )


def _simulate_pool(w: Workload, c: Controls) -> FunctionResult:
    arrivals = w.arrivals_ms.tolist()
    durations = w.durations_ms.tolist()
    horizon = w.horizon_ms
    ka = float(c.keep_alive_ms)
    cold_ms = float(c.cold_start_ms)
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
    cold_starts = env_inits = 0
    od_busy = pc_busy_ms = idle_ms = init_saved = 0.0
    n_pings = 0
    pi = 0
    n_ping_times = len(pings)
    toolkit = c.toolkit_init_ms
    ovf = c.overflow_extra_ms
    deg = c.degraded_ms
    finish = c.finish_preload
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
        if pc is not None:
            m = int(t // MINUTE_MS)
            if pc[m] > 0:
                while pc_busy and pc_busy[0] <= t:
                    heappop(pc_busy)
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
                heappush(busy, (t + lat, t + left))
                od_busy += lat
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
            ready = t + cold_ms
            path = LOCAL if adm is None else adm.decide(
                t, t + toolkit, sla, dur, max(0.0, cold_ms - toolkit), True
            )
            if path == LOCAL:
                lat = cold_ms + dur
                billed = dur  # the init (model load included) is billed apart (init_billed_ms)
            else:
                if path == OVERFLOW or path == DEGRADED:
                    lat = toolkit + (ovf + dur if path == OVERFLOW else deg)
                    if finish:
                        # the invocation waits for the model until the deadline less headroom
                        lat = max(lat, min(cold_ms, wait_until))
                else:
                    lat = toolkit
                # the init phase ended after the toolkit's init (billed as such); the
                # invocation is billed from there until it returns
                init_saved += max(0.0, cold_ms - toolkit)
                billed = lat - toolkit
            special_idx.append(i)
            special_lat.append(lat)
            special_path.append(path)
            heappush(busy, (t + lat, ready))
            od_busy += billed
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
        init_saved,
    )


def histogram_windows_ms(
    hist: list[int], oob: int, params: HistogramWindows
) -> tuple[float, float]:
    """Pre-warm and keep-alive windows (ms) from an idle-time histogram.

    Parameters
    ----------
    hist : list[int]
        ``(range_min,)`` counts of idle times in 1-minute bins.
    oob : int
        Idle times longer than the range (out of bounds).
    params : HistogramWindows

    Returns
    -------
    (prewarm_ms, keep_alive_ms) : tuple[float, float]
        ``(0, range)`` while the histogram is not representative (fewer than
        ``min_samples`` idle times, or the coefficient of variation of the bin counts below
        ``cv_threshold``); else the head percentile minus the margin as pre-warm window, and
        the tail percentile plus the margin, less the pre-warm window, as keep-alive.

    References
    ----------
    M. Shahrad et al., "Serverless in the Wild", USENIX ATC 2020, sec. 4.2 (hybrid histogram
    policy). The ARIMA branch for mostly out-of-bounds idle times is not modelled: in an
    8-hour trace hardly any idle time exceeds the 4-hour range.
    """
    state = _IdleHistogram(params)
    for b, n in enumerate(hist):
        state.add_count(b, n)
    state.oob = oob
    return state.windows_ms()


class _IdleHistogram:
    """Idle-time histogram with O(1) updates of the bin-count moments."""

    __slots__ = ("bins", "oob", "params", "sum_sq", "total")

    def __init__(self, params: HistogramWindows) -> None:
        self.params = params
        self.bins = [0] * params.range_min
        self.oob = 0
        self.total = 0
        self.sum_sq = 0

    def add_count(self, b: int, n: int = 1) -> None:
        if b >= len(self.bins):
            self.oob += n
            return
        old = self.bins[b]
        self.bins[b] = old + n
        self.total += n
        self.sum_sq += (old + n) * (old + n) - old * old

    def windows_ms(self) -> tuple[float, float]:
        p = self.params
        nb = len(self.bins)
        standard = (0.0, nb * MINUTE_MS)
        total = self.total
        if total == 0 or total + self.oob < p.min_samples:
            return standard
        mean = total / nb
        var = max(0.0, self.sum_sq / nb - mean * mean)
        if var**0.5 / mean < p.cv_threshold:
            return standard
        head_need = p.head_pct / 100.0 * total
        tail_need = p.tail_pct / 100.0 * total
        cum = 0
        head_bin = -1
        tail_bin = nb - 1
        for b, n in enumerate(self.bins):
            cum += n
            if head_bin < 0 and cum >= head_need:
                head_bin = b
            if cum >= tail_need:
                tail_bin = b
                break
        prewarm_min = max(head_bin, 0) * (1.0 - p.margin)
        keep_alive_min = (tail_bin + 1) * (1.0 + p.margin) - prewarm_min
        return prewarm_min * MINUTE_MS, max(keep_alive_min, 1.0) * MINUTE_MS


def _simulate_histogram(w: Workload, c: Controls, params: HistogramWindows) -> FunctionResult:
    """Hybrid histogram policy, extended to concurrent environments.

    When the function goes idle (its last busy environment finishes) at ``e``, the windows
    from the idle-time histogram so far apply: with a pre-warm window ``pw > 0`` the idle
    environments are unloaded at once and the same number is loaded again at ``e + pw`` and
    kept for the keep-alive window; with ``pw = 0`` they are kept for the keep-alive window.
    While the function is busy, environments that finish are kept for ``pw + keep-alive``.
    The idle time ``arrival - e`` of each idle period enters the histogram (1-minute bins).
    Windows are recomputed at most once per simulated minute.
    """
    arrivals = w.arrivals_ms.tolist()
    durations = w.durations_ms.tolist()
    horizon = w.horizon_ms
    cold_ms = float(c.cold_start_ms)
    hist = _IdleHistogram(params)
    dirty = False
    win_minute = -1
    pw, kaw = hist.windows_ms()

    idle: list[float] = []  # idle since (top = last)
    busy: list[float] = []
    cold_idx: list[int] = []
    cold_starts = env_inits = 0
    od_busy = idle_ms = 0.0
    idle_start = -1.0  # time the function last went idle; -1: active or never ran
    prewarmed = 0  # environments reloaded at idle_start + pw (pre-warm mode)
    prewarm_mode = False

    for i in range(len(arrivals)):
        t = arrivals[i]
        dur = durations[i]
        last_end = -1.0
        while busy and busy[0] <= t:
            last_end = heappop(busy)
            idle.append(last_end)
        if not busy and last_end >= 0.0:
            # the function went idle at last_end: apply the windows
            m = int(last_end // MINUTE_MS)
            if dirty and m != win_minute:
                pw, kaw = hist.windows_ms()
                win_minute = m
                dirty = False
            idle_start = last_end
            # environments already past the active keep-alive are gone
            k_active = pw + kaw
            while idle and last_end - idle[0] >= k_active:
                idle_ms += k_active
                idle.pop(0)
            if pw > 0.0:
                prewarm_mode = True
                prewarmed = len(idle)
                idle.clear()
            else:
                prewarm_mode = False
        if idle_start >= 0.0:
            # first arrival after an idle period: record the idle time
            hist.add_count(int((t - idle_start) // MINUTE_MS))
            dirty = True
            if prewarm_mode:
                load_at = idle_start + pw
                if t >= load_at:
                    env_inits += prewarmed  # loaded at idle_start + pw
                    if t - load_at < kaw:
                        idle = [load_at] * prewarmed
                    else:
                        idle_ms += kaw * prewarmed
                # t < load_at: the pre-warm had not happened; nothing was loaded
                prewarm_mode = False
                prewarmed = 0
                k = kaw
            else:
                k = kaw
            idle_start = -1.0
        else:
            k = pw + kaw
        if idle and t - idle[-1] < k:
            idle_ms += t - idle.pop()
            heappush(busy, t + dur)
        else:
            if idle:
                idle_ms += k * len(idle)
                idle.clear()
            cold_starts += 1
            env_inits += 1
            cold_idx.append(i)
            heappush(busy, t + cold_ms + dur)
        od_busy += dur
    k_end = pw + kaw
    if prewarm_mode and idle_start >= 0.0:
        load_at = idle_start + pw
        if load_at < horizon:
            env_inits += prewarmed
            idle_ms += prewarmed * min(kaw, horizon - load_at)
    for since in idle:
        idle_ms += max(0.0, min(k_end, horizon - since))
    for end in busy:
        idle_ms += max(0.0, min(k_end, horizon - end))
    latencies = w.durations_ms.copy()
    if cold_idx:
        latencies[np.asarray(cold_idx, dtype=np.int64)] += cold_ms
    paths = np.zeros(latencies.shape[0], dtype=np.int8)
    return _finish(w, c, latencies, paths, cold_starts, env_inits, od_busy, 0.0, idle_ms, 0)
