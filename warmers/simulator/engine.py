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
  model is still loading, an ``AdmissionPort`` picks local / overflow / degraded / shed.
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
from heapq import heappop, heappush
from typing import NamedTuple

import numpy as np

from warmers.simulator.constants import (
    PING_BILLED_MS,
    PING_HOLD_MS,
)
from warmers.simulator.controls import (
    DEGRADED,
    LOCAL,
    OVERFLOW,
    SHED,
    Controls,
    EngineState,
    FunctionResult,
    HistogramWindows,
    account_result,
)
from warmers.simulator.lmi import simulate_lmi
from warmers.simulator.trace import MINUTE_MS, Workload


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
        return simulate_lmi(workload, controls, state=state, final=final)
    if controls.histogram is not None:
        return _simulate_histogram(workload, controls, controls.histogram, state, final)
    if controls.admission is None:
        return _simulate_plain(workload, controls, state, final)
    return _simulate_pool(workload, controls, state, final)


class _LoopInputs(NamedTuple):
    """What both event loops (:func:`_simulate_plain`, :func:`_simulate_pool`) read from the
    workload and the controls, as plain Python values (lists: the loops index them per
    request). Times in ms; ``pc`` per minute (None: no provisioned concurrency)."""

    arrivals: list[float]
    durations: list[float]
    horizon: float
    ka: float
    cold_ms: float
    colds: list[float] | None
    pc: list[float] | None
    n_min: int
    pings: list[float]
    ping_conc: int
    ping_hold: float

    @classmethod
    def of(cls, w: Workload, c: Controls) -> _LoopInputs:
        ping_conc = c.ping_concurrency
        return cls(
            arrivals=w.arrivals_ms.tolist(),
            durations=w.durations_ms.tolist(),
            horizon=w.horizon_ms,
            ka=float(c.keep_alive_ms),
            cold_ms=float(c.cold_start_ms),
            colds=_cold_times(w, c),
            pc=c.pc_effective.tolist() if c.pc_effective is not None else None,
            n_min=w.n_minutes,
            pings=c.ping_times_ms.tolist() if c.ping_times_ms is not None else [],
            ping_conc=ping_conc,
            ping_hold=PING_BILLED_MS if ping_conc == 1 else PING_HOLD_MS,
        )


def _cold_times(w: Workload, c: Controls) -> list[float] | None:
    """Per request, the time its cold start would take (``Controls.cold_start_sigma``); None
    when every cold start takes ``cold_start_ms``."""
    if c.cold_start_sigma <= 0 or w.init_z is None:
        return None
    times: list[float] = (float(c.cold_start_ms) * np.exp(c.cold_start_sigma * w.init_z)).tolist()
    return times


def _simulate_plain(
    w: Workload, c: Controls, state: EngineState | None = None, final: bool = True,
) -> FunctionResult:
    """``_simulate_pool`` without admission: environments are ready once initialized, so the
    heaps hold plain floats (about twice as fast on the busiest functions)."""
    (arrivals, durations, horizon, ka, cold_ms, colds, pc, n_min, pings, ping_conc,
     ping_hold) = _LoopInputs.of(w, c)

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
            if _pc_slot(pc, pc_busy, p, ping_hold, n_min):
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
            if pc[m] > 0 and len(pc_busy) < pc[m]:
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
    return account_result(
        w, c, latencies, paths, cold_before + len(cold_idx), env_inits, od_busy, pc_busy_ms,
        idle_ms, n_pings, final=final, throttled_idx=throttled,
    )


def _simulate_pool(
    w: Workload, c: Controls, state: EngineState | None = None, final: bool = True,
) -> FunctionResult:
    (arrivals, durations, horizon, ka, cold_ms, colds, pc, n_min, pings, ping_conc,
     ping_hold) = _LoopInputs.of(w, c)
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

    def ping(p: float) -> None:
        """``ping_conc`` warm pings at ``p`` (before an arrival, or after the last one)."""
        nonlocal n_pings, env_inits, od_busy, pc_busy_ms, idle_ms
        while busy and busy[0][0] <= p:
            end, ready = heappop(busy)
            idle_t.append(end)
            idle_r.append(ready - end if ready > end else 0.0)
        for _ in range(ping_conc):
            n_pings += 1
            if _pc_slot(pc, pc_busy, p, ping_hold, n_min):
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

    for i in range(len(arrivals)):
        t = arrivals[i]
        dur = durations[i]
        # warm pings due before this arrival
        while pi < n_ping_times and pings[pi] <= t:
            ping(pings[pi])
            pi += 1
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
            if pc[m] > 0 and len(pc_busy) < pc[m]:
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
            ping(pings[pi])
            pi += 1
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
    return account_result(
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
    return account_result(w, c, latencies, paths, cold_starts, env_inits, od_busy, 0.0, idle_ms, 0,
                   final=final, throttled_idx=throttled)


def _pc_slot(pc: list[float] | None, pc_busy: list[float], at_ms: float, hold_ms: float,
             n_min: int) -> bool:
    """Whether a provisioned environment free at ``at_ms`` takes a warm ping held ``hold_ms``
    (pushed on ``pc_busy``, the heap of busy-until times); False when the minute has no
    provisioned concurrency or all of it is busy. Shared by the engine loops' pings; their
    per-request path keeps the same check inline (the hot loop makes no call per request)."""
    if pc is None:
        return False
    m = int(at_ms // MINUTE_MS)
    if m >= n_min or pc[m] <= 0:
        return False
    while pc_busy and pc_busy[0] <= at_ms:
        heappop(pc_busy)
    if len(pc_busy) < pc[m]:
        heappush(pc_busy, at_ms + hold_ms)
        return True
    return False


def _limit(w: Workload) -> float:
    """The function's concurrency limit (``Workload.concurrency_limit``); none: unbounded."""
    return math.inf if w.concurrency_limit is None else float(w.concurrency_limit)


def _add_cold(latencies: np.ndarray, cold_idx: list[int], cold_ms: float,
              colds: list[float] | None) -> None:
    """Add each cold-started request's cold-start time to its latency (in place)."""
    idx = np.asarray(cold_idx, dtype=np.int64)
    latencies[idx] += cold_ms if colds is None else np.asarray(colds)[idx]
