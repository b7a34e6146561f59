"""Which trace slice the demo replays: a documented rule, not a hand-picked result.

The demo must show, in ``on``, provisioned concurrency raised ahead of a rise, cold starts that
still happen and are overflowed, and degradation at the top of a burst. :func:`pick_slice`
finds such a slice in a trace with the policy simulator's own warmer (``warmers.simulator``:
forecaster + planner, every minute), before anything is replayed:

1. Candidates: HTTP-triggered functions (the demo's agent serves HTTP) whose trace peak
   concurrency (``demand_concurrency``: requests in flight with the trace's durations, seed
   ``seed``) is at least ``MIN_BURST_CONCURRENCY`` in at least ``MIN_BURST_MINUTES`` minutes:
   bursts that need more than one execution environment, more than once.
2. For each, the simulator's ``warmstart`` policy, on demand with the replay's planner
   objective, floor and cap and the replay's planned GPU endpoint (``endpoint``: an inference
   component the planner sizes, ``plan_endpoint``), plans every minute over the whole trace:
   provisioned concurrency ``pc[m]`` and endpoint copies ``wanted[m]`` per minute.
3. A window ``[s, s + minutes)`` (``s >= HISTORY_MIN``: the warmer has an hour of history)
   qualifies when, at its peak minute ``p`` (highest trace concurrency, the first one),
   ``floor < pc[p] < peak`` (provisioned concurrency the warmer raised above the floor in
   force, and requests beyond it: cold starts that overflow or degrade), the last raise of
   ``pc`` came at a minute ``r <= p`` (ahead of the rise), and it holds at most
   ``max_requests`` requests (the demo's time on 2 cores).
4. With a planned endpoint, a qualifying window also *has every mechanism*
   (:func:`endpoint_mechanisms`) when the replay's fresh stack will meet a burst beyond
   provisioned concurrency both before and after the endpoint's first copy is in service: the
   replay's first warmer run comes ``LEAD_IN_MIN`` minutes before the slice with no copy and
   plans from the history up to the slice (the simulator's plan at the slice's first minute);
   when that plan asks for one, it is in service ``provisioning minutes - LEAD_IN_MIN`` into
   the slice; a burst (``conc > pc``) ``margin_for(time_scale)`` or more minutes before that
   finds no copy (admission degrades), one as long after finds it (overflow).
5. Among windows with every mechanism: the highest peak (the biggest burst), then the largest
   excess ``peak - pc[p]``, then the widest margin around the copy's arrival, then the fewest
   requests, then the earliest (function order of the trace, then ``s``). When none has every
   mechanism, the same ranking (without the margin) over the qualifying windows, and the reason
   says degradation is not expected to act.
6. When no window qualifies (on the shipped 8-hour trace none does with the ``cost``
   objective: the planner buys provisioned concurrency only where its expected utilization
   reaches the break-even, and these bursts are too short for it), the window with the highest
   trace peak concurrency within ``max_requests`` requests, ties to the fewest requests and the
   earliest; ``SlicePick.qualified`` is then False and the reason says so.

The rule runs in about ten seconds on the shipped 8-hour trace (298 functions); the result and
its figures are printed by ``warmstart demo`` and written into its report.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from warmers.simulator.trace import Trace, demand_concurrency, make_workload

if TYPE_CHECKING:
    from warmers.simulator.endpoint import EndpointModel

MIN_BURST_CONCURRENCY = 2
MIN_BURST_MINUTES = 10
HISTORY_MIN = 60
DEFAULT_MAX_REQUESTS = 400
#: Trace minutes between the replay's first warmer run (fresh stack: no provisioned
#: concurrency, no endpoint copy) and the slice start: the emulator allocates provisioned
#: concurrency 60 s after the warmer asks (``ReplayOptions.pc_allocation_delay_s``), so it serves
#: from the slice's first minute; a GPU endpoint copy asked for at that run is in service
#: ``provisioning minutes - LEAD_IN_MIN`` into the slice.
LEAD_IN_MIN = 3
#: Least trace minutes kept clear of the copy's in-service minute on each side: the handlers
#: learn it at the warmer's next run (every minute) through the published state, read with a
#: TTL (:func:`margin_for` adds the TTL at the replay's time scale).
ENDPOINT_MARGIN_MIN = 2


class NoSliceFound(ValueError):
    """No window of the trace meets the rule; the message says which condition failed."""


@dataclass(frozen=True)
class SlicePick:
    """The slice the rule picked, with the figures that made it qualify.

    ``pc_at_peak`` and ``pc_raised_at`` are the simulator's planned provisioned concurrency at
    the peak minute and the trace minute it was raised at; ``peak_concurrency`` the trace's
    requests in flight at the peak minute; minutes are trace column offsets.
    """

    function_id: str
    start_minute: int
    minutes: int
    requests: int
    peak_minute: int
    peak_concurrency: int
    pc_at_peak: int
    pc_raised_at: int
    candidates: int
    windows: int
    qualified: bool = True
    #: slice minutes of a burst beyond provisioned concurrency before the endpoint's first copy
    #: is in service (degradation) and of one after it (overflow); -1: not asked for or none
    degrade_minute: int = -1
    overflow_minute: int = -1
    #: slice minute the copy asked for at the replay's first warmer run is in service (-1: none)
    endpoint_ready_minute: int = -1
    #: windows where every mechanism acts (provisioned concurrency, overflow, degradation)
    full_windows: int = 0
    #: step 4 was applied (the replay's endpoint is planned)
    endpoint_checked: bool = False

    @property
    def every_mechanism(self) -> bool:
        """The slice has bursts for degradation and for overflow around the copy's arrival."""
        return self.degrade_minute >= 0 and self.overflow_minute >= 0

    def reason(self) -> str:
        """Why this slice, in one sentence (printed and reported)."""
        endpoint = ""
        if self.every_mechanism:
            endpoint = (
                f"; {self.full_windows} of them also meet the endpoint's conditions and this is "
                "the first of those ranked: the simulator's plan asks for a GPU endpoint copy at "
                f"the replay's first warmer run ({LEAD_IN_MIN} trace min before the slice), in "
                f"service at slice minute {self.endpoint_ready_minute}, so the burst beyond "
                f"provisioned concurrency at slice minute {self.degrade_minute} finds no copy "
                f"(admission degrades) and the one at minute {self.overflow_minute} finds it "
                "(overflow)")
        elif self.endpoint_checked and self.qualified:
            endpoint = ("; no window also has a burst beyond provisioned concurrency before and "
                        "one after the arrival of the endpoint copy the simulator's plan asks for "
                        "at the replay's first warmer run, so degradation is not expected to act")
        if not self.qualified:
            return (
                f"slice picked by the rule of infra/replay/pick.py: of {self.candidates} HTTP "
                f"functions with bursts, no {self.minutes}-minute window has provisioned "
                "concurrency raised by the simulator's warmer before a peak that exceeds it (its "
                "planner buys provisioned concurrency only at or above the break-even "
                "utilization, and these bursts are too short for it), so the rule's fallback: "
                f"the window with the highest peak, {self.peak_concurrency} requests in flight at "
                f"trace minute {self.peak_minute}, {self.requests} requests")
        return (
            f"slice picked by the rule of infra/replay/pick.py: of {self.candidates} HTTP functions "
            f"with bursts, {self.windows} {self.minutes}-minute windows qualify in the simulator's "
            f"warmstart plan; this one has the highest peak (then the largest excess): at trace "
            f"minute {self.peak_minute}, {self.peak_concurrency} requests in flight against "
            f"{self.pc_at_peak} "
            f"provisioned (raised at minute {self.pc_raised_at}, ahead of it): in that plan "
            "provisioned concurrency acts and the requests beyond it are cold starts for "
            f"admission (overflow or degradation); {self.requests} requests{endpoint}")


def one_function(trace: Trace, index: int) -> Trace:
    """The trace of function ``index`` alone (same minutes)."""
    dc = trace.duration_count
    return dataclasses.replace(
        trace, function_ids=(trace.function_ids[index],), triggers=(trace.triggers[index],),
        counts=trace.counts[index:index + 1], duration_pct_ms=trace.duration_pct_ms[index:index + 1],
        memory_mb=trace.memory_mb[index:index + 1],
        duration_count=None if dc is None else dc[index:index + 1])


def planned_run(trace: Trace, index: int, *, seed: int = 0, objective: str = "cost",
                floor: int = 0, cap: int = 50,
                endpoint: EndpointModel | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(n_minutes,)`` provisioned concurrency and ``(n_minutes,)`` GPU endpoint copies the
    simulator's warmer plans each minute for function ``index`` (``warmstart`` policy with the
    planned endpoint ``endpoint``, default ``EndpointModel()``, planning every minute)."""
    from warmers.simulator.calibration import load_calibration
    from warmers.simulator.run import run_simulation
    from warmers.simulator.warmstart_policy import warmstart_variants

    policy = warmstart_variants(plan_every_min=1, strategy="provisioned", objective=objective,
                                floor=floor, cap=cap, endpoint=endpoint)[0]
    policy.keep_plans = True
    run_simulation(one_function(trace, index), [policy], load_calibration(), seed=seed)
    plans = policy.plans[trace.function_ids[index]]
    pc = np.zeros(trace.n_minutes, dtype=np.int64)
    for m, plan in enumerate(plans[:trace.n_minutes]):
        pc[m] = plan.provisioned_concurrency if plan.action == "provisioned" else 0
    wanted = np.zeros(trace.n_minutes, dtype=np.int64)
    if policy.endpoint_run is not None:
        got = policy.endpoint_run.timeline.wanted[:trace.n_minutes]
        wanted[:got.shape[0]] = got
    return pc, wanted


def planned_pc(trace: Trace, index: int, *, seed: int = 0, objective: str = "cost",
               floor: int = 0, cap: int = 50) -> np.ndarray:
    """``(n_minutes,)`` provisioned concurrency of :func:`planned_run`."""
    return planned_run(trace, index, seed=seed, objective=objective, floor=floor, cap=cap)[0]


def margin_for(time_scale: float, *, warmer_period_min: float = 1.0,
               ttl_s: float = 5.0) -> int:
    """Trace minutes a handler may learn late that the copy is in service: the warmer's next
    run (every ``warmer_period_min``) plus the handlers' cache of the published state
    (``ttl_s`` real seconds, ``functions.runtime.degradation_level.DEFAULT_TTL_S``, that is
    ``ttl_s x time_scale`` trace seconds), rounded up; at least :data:`ENDPOINT_MARGIN_MIN`."""
    return max(ENDPOINT_MARGIN_MIN,
               math.ceil(warmer_period_min + ttl_s * time_scale / 60.0 - 1e-9))


def endpoint_mechanisms(conc: np.ndarray, pc: np.ndarray, wanted: np.ndarray, start: int, *,
                        minutes: int, provisioning_min: int,
                        margin_min: int = ENDPOINT_MARGIN_MIN) -> tuple[int, int, int] | None:
    """Step 4 of the rule for the window at ``start``: ``(degrade minute, overflow minute,
    margin)`` in slice minutes, or None.

    The replay's first warmer run is :data:`LEAD_IN_MIN` minutes (stack clock) before the
    slice, with no endpoint copy, and plans from the trace's history up to the slice's first
    minute, as the simulator's run at minute ``start`` does; when that plan asks for a copy
    (``wanted[start] >= 1``) it is in service at slice minute ``ready = provisioning_min -
    LEAD_IN_MIN``. The window qualifies when requests in flight exceed provisioned concurrency
    (``conc > pc``: cold starts for admission) at a minute ``<= ready - margin_min`` (no copy:
    admission degrades) and at one ``>= ready + margin_min`` (a copy: overflow). The earliest
    and the latest of them are returned, with the margin ``min(ready - degrade, overflow -
    ready)``. ``margin_min`` (default :data:`ENDPOINT_MARGIN_MIN`; :func:`margin_for`) covers
    how late the handlers learn of the copy.
    """
    if not 0 <= start < wanted.shape[0] or int(wanted[start]) < 1:
        return None
    ready = provisioning_min - LEAD_IN_MIN
    beyond = np.flatnonzero(conc[start:start + minutes] > pc[start:start + minutes])
    before = beyond[beyond <= ready - margin_min]
    after = beyond[beyond >= ready + margin_min]
    if before.size == 0 or after.size == 0:
        return None
    d, o = int(before[0]), int(after[-1])
    return d, o, min(ready - d, o - ready)


def candidates(trace: Trace, *, seed: int = 0) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(index, per-minute trace concurrency, per-minute arrivals) of the rule's step 1."""
    out = []
    for i in range(trace.n_functions):
        if trace.triggers[i] != "http":
            continue
        w = make_workload(trace, i, seed=seed, default_sla_ms=0.0, sla_duration_factor=1.0)
        conc = demand_concurrency(w)
        if int((conc >= MIN_BURST_CONCURRENCY).sum()) >= MIN_BURST_MINUTES:
            out.append((i, conc.astype(np.int64), trace.counts[i].astype(np.int64)))
    return out


def qualifying_windows(conc: np.ndarray, counts: np.ndarray, pc: np.ndarray, *, minutes: int,
                       max_requests: int, floor: int = 0) -> list[tuple[int, int, int, int, int]]:
    """Windows meeting step 3: ``(excess, requests, start, peak minute, raised at)`` each."""
    out = []
    n = conc.shape[0]
    raises = np.flatnonzero(np.diff(pc) > 0) + 1  # minutes at which pc went up
    for s in range(HISTORY_MIN, n - minutes + 1):
        requests = int(counts[s:s + minutes].sum())
        if requests > max_requests:
            continue
        p = s + int(np.argmax(conc[s:s + minutes]))
        peak, at_peak = int(conc[p]), int(pc[p])
        if not floor < at_peak < peak:
            continue
        before = raises[raises <= p]
        if before.size == 0:
            continue
        out.append((peak - at_peak, requests, s, p, int(before[-1])))
    return out


def pick_slice(trace: Trace, *, minutes: int = 20, max_requests: int = DEFAULT_MAX_REQUESTS,
               seed: int = 0, objective: str = "cost", floor: int = 0,
               cap: int = 50, endpoint: EndpointModel | None = None,
               time_scale: float = 10.0) -> SlicePick:
    """Apply the module's rule to ``trace``, the simulator's warmer planning with the replay's
    ``objective``, ``floor`` and ``cap`` (``AliasPolicy``) and, with ``endpoint`` (the replay's
    planned GPU endpoint: its cap, requests per copy, provisioning delay, failed-answer price),
    the endpoint's copies (step 4, its margin from the replay's ``time_scale``,
    :func:`margin_for`); without it step 4 is skipped (an always-on endpoint).

    Raises
    ------
    NoSliceFound
        When no function has bursts, or no window qualifies.
    ValueError
        If ``minutes`` or ``max_requests`` is < 1.
    """
    if minutes < 1 or max_requests < 1:
        raise ValueError(f"minutes and max_requests must be >= 1, got {minutes}, {max_requests}")
    found = candidates(trace, seed=seed)
    if not found:
        raise NoSliceFound(f"no HTTP function of the trace has {MIN_BURST_MINUTES} minutes with "
                           f">= {MIN_BURST_CONCURRENCY} requests in flight")
    best: tuple[tuple[int, ...], SlicePick] | None = None
    full: tuple[tuple[int, ...], SlicePick] | None = None
    fallback: tuple[tuple[int, int, int, int], SlicePick] | None = None
    windows = full_windows = 0
    provisioning_min = (math.ceil(endpoint.provisioning_delay_s / 60.0 - 1e-9)
                        if endpoint is not None else 0)
    for order, (i, conc, counts) in enumerate(found):
        for s in range(HISTORY_MIN, trace.n_minutes - minutes + 1):
            requests = int(counts[s:s + minutes].sum())
            if requests > max_requests:
                continue
            p = s + int(np.argmax(conc[s:s + minutes]))
            key = (-int(conc[p]), requests, order, s)
            if fallback is None or key < fallback[0]:
                fallback = (key, SlicePick(trace.function_ids[i], s, minutes, requests, p,
                                           int(conc[p]), 0, -1, len(found), 0, qualified=False))
        pc, wanted = planned_run(trace, i, seed=seed, objective=objective, floor=floor, cap=cap,
                                 endpoint=endpoint)
        for excess, requests, s, p, r in qualifying_windows(conc, counts, pc, minutes=minutes,
                                                            max_requests=max_requests,
                                                            floor=floor):
            windows += 1
            pick = SlicePick(trace.function_ids[i], s, minutes, requests, p, int(conc[p]),
                             int(pc[p]), r, len(found), 0)
            rank: tuple[int, ...] = (-int(conc[p]), -excess, requests, order, s)
            if best is None or rank < best[0]:
                best = (rank, pick)
            acts = (endpoint_mechanisms(conc, pc, wanted, s, minutes=minutes,
                                        provisioning_min=provisioning_min,
                                        margin_min=margin_for(time_scale))
                    if endpoint is not None else None)
            if acts is not None:
                full_windows += 1
                d, o, margin = acts
                ranked: tuple[int, ...] = (-int(conc[p]), -excess, -margin, requests, order, s)
                if full is None or ranked < full[0]:
                    full = (ranked, dataclasses.replace(
                        pick, degrade_minute=d, overflow_minute=o,
                        endpoint_ready_minute=provisioning_min - LEAD_IN_MIN))
    if full is not None:
        return dataclasses.replace(full[1], windows=windows, full_windows=full_windows,
                                   endpoint_checked=True)
    if best is None and fallback is not None:
        return fallback[1]
    if best is None:
        raise NoSliceFound(f"no {minutes}-minute window of the {len(found)} bursty HTTP functions "
                           "has planned provisioned concurrency raised before a peak that exceeds "
                           f"it within {max_requests} requests")
    return dataclasses.replace(best[1], windows=windows, endpoint_checked=endpoint is not None)


def simulated_cold_starts(trace: Trace, function_id: str, start_minute: int, minutes: int, *,
                          seed: int = 0, objective: str = "cost", floor: int = 0,
                          cap: int = 50) -> dict[str, int]:
    """Cold starts ``warmstart simulate``'s policies give the slice, for the demo's comparison.

    ``run_simulation`` on the function alone, its trace cut to the slice: it starts with no
    execution environment, as the replay's fresh local stack does (the replay's warmer has the
    trace minutes before the slice as history; the simulator's has none). ``off``: on-demand
    with a 10-minute keep-alive (the emulator's idle timeout); ``on``: ``warmstart, always-on
    endpoint`` planning every minute (the endpoint's capacity decides a cold start's path, not
    whether it happens).

    Raises
    ------
    ValueError
        If the function is not in the trace or the slice leaves it.
    """
    from warmers.simulator.calibration import load_calibration
    from warmers.simulator.policies import KeepAlive
    from warmers.simulator.run import run_simulation
    from warmers.simulator.warmstart_policy import warmstart_variants

    if function_id not in trace.function_ids:
        raise ValueError(f"function {function_id[:12]}... is not in the trace")
    if start_minute < 0 or minutes < 1 or start_minute + minutes > trace.n_minutes:
        raise ValueError(f"slice {start_minute}+{minutes} leaves the trace ({trace.n_minutes} min)")
    one = one_function(trace, trace.function_ids.index(function_id))
    cut = dataclasses.replace(one, counts=one.counts[:, start_minute:start_minute + minutes],
                              first_minute=one.first_minute + start_minute)
    off, on = KeepAlive(10), warmstart_variants(plan_every_min=1, strategy="provisioned",
                                                objective=objective, floor=floor, cap=cap)[1]
    result = run_simulation(cut, [off, on], load_calibration(), seed=seed)
    return {"off": result.by_name(off.name).cold_starts, "on": result.by_name(on.name).cold_starts}
