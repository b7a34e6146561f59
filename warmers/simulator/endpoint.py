"""The GPU overflow endpoint in the simulator: finite capacity, queueing, provisioning, cost.

One endpoint is shared by every function of the trace that overflows to it (one app), so it is
simulated after the functions, on what they sent it. Per function the engine decides each
request's path as the runtime would with the endpoint in service (``admission.decide``; the
capacity it actually had is applied in step 3); the workers return every overflowed request (:class:`OverflowRequests`) and, per warmer run,
each function's share of the endpoint's demand (``warmers.plan.endpoint.AgentDemand``, computed by
``plan_run`` itself). Then, in time order:

1. **Plan** (``planned``): at every warmer run ``warmers.plan.endpoint.plan_endpoint`` (the function
   the warmer Lambda calls) plans the instances from the sum of the functions' demands, fed
   back its previous plan (hysteresis, floor, cap, budget, the target's minimum) and the
   overflow requests the endpoint answered in time over the spend guard's window before the
   run (what the agents' ``Requests`` metric tells the deployed warmer): plan and serve
   interleave in time order, the requests sent before each run served with the capacity known
   then (step 4), then the plan. The ``always_on`` variant holds ``always_on_instances`` from
   the start, as the shipped fixed-size endpoint does.
2. **Provision**: a scale-out is in service ``provisioning_delay_s`` after the warmer asked for
   it (SageMaker: "the provisioning process takes several minutes", endpoint-auto-scaling-
   zero-instances.html; the default 10 minutes is the conservative end of that); a scale-in
   takes effect at once. Instances are billed per second from the request of a scale-out
   (provisioning included) until the scale-in (the SageMaker real-time price per instance-hour,
   ``warmers/prices.json``).
3. **Admission knows the capacity** (the published state the handler reads,
   ``functions/runtime/overflow_capacity.py``): a request sent while no instance is in service
   gets what admission decides without overflow (local when the model is ready in time, else
   degraded or shed): the runner simulates each function a second time with that admission
   (``warmstart_policy.without_capacity``) and takes the request's outcome from it.
4. **Serve**: each instance answers ``concurrent_requests_per_instance`` requests at once
   (configured, else measured by ``warmstart calibrate`` against the GPU endpoint server, else
   4, the planner's ``EndpointPolicy`` default); more wait in one FIFO queue.
   A request holds its slot for what overflow adds plus its own duration (the calibrated
   overflow extra time includes the client's share, so the hold errs long). Its wait is added
   to its latency; an answer the queue (or the path itself) would bring after the SLA is a
   timeout of the runtime's overflow call, whose budget is the SLA's
   (``functions/runtime/overflow.py``): the runner answers it degraded at the deadline, and
   the endpoint still holds its slot.

Under ``WARMSTART_FINISH_PRELOAD=after`` (the default) an overflowed and a degraded answer
keep their environment busy the same way (until the model is ready) and a local one for its
duration more, so the two runs' environments differ by at most that; the environments of the
overflow run are the ones billed. The queue is invisible to admission (the deployed handler
learns the endpoint's p95 from its own calls).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Literal

import numpy as np

from functions.runtime.contract.warmer_document import DEFAULT_FAILED_ANSWER_USD
from warmers.plan.endpoint import (
    AgentDemand,
    EndpointPlan,
    EndpointPolicy,
    plan_endpoint,
)
from warmers.plan.policy import PlannerConfig
from warmers.simulator.trace import MINUTE_MS

EndpointMode = Literal["planned", "always_on"]

#: Requests an instance answers at once when neither configured nor measured.
DEFAULT_CONCURRENT_REQUESTS = 4

#: Default provisioning delay of a SageMaker instance, s (module docstring: "several minutes").
PROVISIONING_DELAY_S = 600.0


@dataclass(frozen=True)
class EndpointModel:
    """How the shared overflow endpoint behaves in a simulation.

    Parameters
    ----------
    mode : {"planned", "always_on"}
        ``planned``: the warmer's ``plan_endpoint`` sets the capacity every warmer run;
        ``always_on``: ``always_on_instances`` for the whole trace.
    instance_usd_per_hour : float
        Price of one instance-hour (``SimulatorPrices.gpu_endpoint_hour_usd``).
    concurrent_requests_per_instance : int or None
        Requests one instance answers at once; None (default): the calibration's measured
        ``endpoint_concurrency`` (``warmstart calibrate``), else
        :data:`DEFAULT_CONCURRENT_REQUESTS` (the planner's ``EndpointPolicy`` default).
    provisioning_delay_s : float
        From a scale-out request to the instances in service.
    always_on_instances : int
    target : {"inference_component", "variant"}
        What the planned capacity scales (an inference component can hold 0; a variant 1).
    cap : int
        Most instances the planner may ask for.
    budget_usd_per_hour : float
    failed_answer_usd : float or None
        The planner's value of a failed answer, USD (default the planner's
        ``DEFAULT_FAILED_ANSWER_USD``; None: not priced; see ``plan_endpoint``).
    floor : int
        Fewest instances the planner keeps (``EndpointPolicy.floor``).
    environment_idle_min : int
        ``EndpointPolicy.environment_idle_min``.
    spend_guard_window_min : int
    spend_guard_usd : float or None
        The planner's spend guard (``EndpointPolicy``; None: one instance held for the window).
    """

    mode: EndpointMode = "planned"
    instance_usd_per_hour: float = 1.0
    concurrent_requests_per_instance: int | None = None
    provisioning_delay_s: float = PROVISIONING_DELAY_S
    always_on_instances: int = 1
    target: Literal["inference_component", "variant"] = "inference_component"
    cap: int = 4
    budget_usd_per_hour: float = 10.0
    failed_answer_usd: float | None = DEFAULT_FAILED_ANSWER_USD
    floor: int = 0
    environment_idle_min: int = 5
    spend_guard_window_min: int = 60
    spend_guard_usd: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("planned", "always_on"):
            raise ValueError(f"mode must be 'planned' or 'always_on', got {self.mode!r}")
        if (self.concurrent_requests_per_instance is not None
                and self.concurrent_requests_per_instance < 1) or self.always_on_instances < 0:
            raise ValueError("concurrent_requests_per_instance must be >= 1 and "
                             "always_on_instances >= 0")
        if not self.provisioning_delay_s >= 0 or not self.instance_usd_per_hour > 0:
            raise ValueError("provisioning_delay_s must be >= 0 and instance_usd_per_hour > 0")

    def policy(self, agents: tuple[str, ...]) -> EndpointPolicy:
        """The planner's ``EndpointPolicy`` for ``agents`` (``FUNCTION:ALIAS`` keys)."""
        return EndpointPolicy(
            endpoint_name="overflow", agents=agents, target=self.target,
            inference_component="overflow-model" if self.target == "inference_component" else None,
            floor=self.floor, cap=self.cap, budget_usd_per_hour=self.budget_usd_per_hour,
            environment_idle_min=self.environment_idle_min,
            concurrent_requests_per_instance=self.concurrent_requests_per_instance
            or DEFAULT_CONCURRENT_REQUESTS,
            failed_answer_usd=self.failed_answer_usd,
            instance_usd_per_hour=self.instance_usd_per_hour,
            spend_guard_window_min=self.spend_guard_window_min,
            spend_guard_usd=self.spend_guard_usd)


@dataclass
class OverflowRequests:
    """Overflowed requests of one or more functions (columns of equal length).

    ``send_ms``: when the overflow call is made (ms from the trace start); ``hold_ms``: how long
    it holds an endpoint slot; ``latency_ms``: its latency with no queue; ``fallback_ms`` and
    ``fallback_path``: its latency and path code (``engine.LOCAL``, ``DEGRADED``, ``SHED``)
    when sent without capacity; ``sla_ms``; ``tail``: its warm duration alone is over the SLA;
    ``function_id``: ``FUNCTION:ALIAS``.
    """

    send_ms: list[np.ndarray] = field(default_factory=list)
    hold_ms: list[np.ndarray] = field(default_factory=list)
    latency_ms: list[np.ndarray] = field(default_factory=list)
    fallback_ms: list[np.ndarray] = field(default_factory=list)
    fallback_path: list[np.ndarray] = field(default_factory=list)
    sla_ms: list[np.ndarray] = field(default_factory=list)
    tail: list[np.ndarray] = field(default_factory=list)
    function_id: list[np.ndarray] = field(default_factory=list)

    def add(self, function_id: str, send_ms: np.ndarray, hold_ms: np.ndarray,
            latency_ms: np.ndarray, fallback_ms: np.ndarray, fallback_path: np.ndarray,
            sla_ms: float, tail: np.ndarray) -> None:
        n = int(send_ms.shape[0])
        if n == 0:
            return
        self.send_ms.append(np.asarray(send_ms, dtype=float))
        self.hold_ms.append(np.asarray(hold_ms, dtype=float))
        self.latency_ms.append(np.asarray(latency_ms, dtype=float))
        self.fallback_ms.append(np.asarray(fallback_ms, dtype=float))
        self.fallback_path.append(np.asarray(fallback_path, dtype=np.int8))
        self.sla_ms.append(np.full(n, float(sla_ms)))
        self.tail.append(np.asarray(tail, dtype=bool))
        self.function_id.append(np.full(n, function_id, dtype=object))

    def extend(self, other: OverflowRequests) -> None:
        for name in _COLUMNS:
            getattr(self, name).extend(getattr(other, name))

    def columns(self) -> dict[str, np.ndarray]:
        """Every column concatenated and sorted by ``send_ms``."""
        if not self.send_ms:
            return {k: np.zeros(0) for k in _COLUMNS}
        cols = {k: np.concatenate(getattr(self, k)) for k in _COLUMNS}
        order = np.argsort(cols["send_ms"], kind="stable")
        return {k: v[order] for k, v in cols.items()}


_COLUMNS = ("send_ms", "hold_ms", "latency_ms", "fallback_ms", "fallback_path", "sla_ms", "tail",
            "function_id")


@dataclass(frozen=True)
class CapacityTimeline:
    """The endpoint's instances per minute.

    ``wanted``: what the warmer asked for (billed: provisioning counts); ``in_service``: what
    answers requests; ``plans``: the planner's plans, one per warmer run (empty for
    ``always_on``); ``served``: the overflowed requests' outcomes when :func:`plan_capacity`
    served them between its plans (None: not given them; :func:`serve_overflow` them).
    """

    wanted: np.ndarray
    in_service: np.ndarray
    plans: tuple[EndpointPlan, ...] = ()
    served: Served | None = None

    @property
    def instance_hours(self) -> float:
        return float(self.wanted.sum()) / 60.0


def plan_capacity(model: EndpointModel, demands: dict[int, dict[str, AgentDemand | None]],
                  strategies: dict[str, str], memory_mb: dict[str, int],
                  planner: PlannerConfig, *, n_minutes: int, plan_every_min: int,
                  window_min: int, columns: dict[str, np.ndarray] | None = None,
                  concurrent_requests_per_instance: int = DEFAULT_CONCURRENT_REQUESTS
                  ) -> CapacityTimeline:
    """Instances per minute of the shared endpoint.

    Parameters
    ----------
    model : EndpointModel
    demands : mapping of warmer-run minute to (``FUNCTION:ALIAS`` -> AgentDemand or None)
        Each function's share of the overflow demand at that run (``plan_run``'s
        ``AliasRunPlan.overflow_demand``).
    strategies, memory_mb : mappings of ``FUNCTION:ALIAS``
        For the planner's alternative cost (``plan_endpoint``).
    planner : PlannerConfig
    n_minutes, plan_every_min, window_min : int
        Trace length; minutes between warmer runs; the forecast window.
    columns : dict of str to ndarray, optional
        The overflowed requests (``OverflowRequests.columns``): served between the plans
        (``CapacityTimeline.served``) so that each plan knows what the endpoint answered in
        the spend guard's window before it; None: every plan without (the guard not applied).
    concurrent_requests_per_instance : int
        Slots per instance when ``columns`` are served.

    Returns
    -------
    CapacityTimeline
    """
    wanted = np.zeros(n_minutes, dtype=np.int64)
    if model.mode == "always_on":
        wanted[:] = model.always_on_instances
        return CapacityTimeline(wanted, wanted.copy())
    agents = tuple(sorted({k for d in demands.values() for k in d}))
    plans: list[EndpointPlan] = []
    # in service at minute m: what was wanted in every minute of [m - delay, m] (a scale-out
    # is in service ``delay`` after it was asked for, a scale-in is at once); none before the
    # trace starts
    delay = math.ceil(model.provisioning_delay_s / 60.0 - 1e-9)
    queue = None if columns is None else _Queue(columns, concurrent_requests_per_instance)
    in_service = np.zeros(n_minutes, dtype=np.int64)
    known = 0  # minutes of ``in_service`` final so far
    if agents:
        policy = model.policy(agents)
        guard_ms = policy.spend_guard_window_min * MINUTE_MS
        previous: EndpointPlan | None = None
        for m in range(0, n_minutes, plan_every_min):
            answered = None
            if queue is not None:  # serve what was sent before this run, with what served then
                for k in range(known, m):
                    in_service[k] = wanted[k - delay:k + 1].min() if k >= delay else 0
                known = m
                queue.serve_before(m * MINUTE_MS, in_service)
                answered = queue.answered(m * MINUTE_MS - guard_ms, m * MINUTE_MS)
            got = demands.get(m, {})
            run = plan_endpoint(policy, {k: got.get(k) for k in agents}, strategies, memory_mb,
                                planner, window_min=window_min, now_s=m * 60.0,
                                previous=previous, answered_in_window=answered)
            previous = run.plan
            plans.append(run.plan)
            wanted[m:m + plan_every_min] = run.plan.capacity
    padded = np.concatenate([np.zeros(delay, dtype=np.int64), wanted])
    in_service = np.lib.stride_tricks.sliding_window_view(padded, delay + 1).min(axis=1)
    served = None
    if queue is not None:
        queue.serve_before(math.inf, in_service)
        served = queue.result()
    return CapacityTimeline(wanted, in_service, tuple(plans), served)


@dataclass(frozen=True)
class EndpointRun:
    """The overflowed requests' outcomes on the planned endpoint, kept for a caller that
    asked (``WarmstartPolicy.keep_plans``; the demo's slice rule reads it).

    ``send_ms``, ``path`` (``engine.OVERFLOW``, ``DEGRADED``, ``SHED`` or ``LOCAL``: the final
    path after capacity and the overflow call's deadline) and ``function_id``
    (``FUNCTION:ALIAS``) are arrays in ``send_ms`` order; ``timeline`` the capacity per minute.
    """

    send_ms: np.ndarray
    path: np.ndarray
    function_id: np.ndarray
    timeline: CapacityTimeline


@dataclass(frozen=True)
class Served:
    """Outcome of the overflowed requests on the finite endpoint (arrays in ``send_ms`` order).

    ``no_capacity``: no instance in service when sent (the fallback outcome instead);
    ``latency_ms``: the final latency (queue wait included, or the fallback's); ``wait_ms``:
    the queue wait (0 without capacity).
    """

    no_capacity: np.ndarray
    latency_ms: np.ndarray
    wait_ms: np.ndarray


def serve_overflow(columns: dict[str, np.ndarray], timeline: CapacityTimeline,
                   concurrent_requests_per_instance: int) -> Served:
    """Run the overflowed requests (``OverflowRequests.columns``) through the endpoint: a FIFO
    queue in front of ``in_service x concurrent_requests_per_instance`` slots per minute."""
    queue = _Queue(columns, concurrent_requests_per_instance)
    queue.serve_before(math.inf, timeline.in_service)
    return queue.result()


class _Queue:
    """The endpoint's FIFO queue, served in ``send_ms`` order in as many steps as wanted (the
    same outcome as one pass while each minute's ``in_service`` is final when it is read)."""

    def __init__(self, columns: dict[str, np.ndarray], per_instance: int) -> None:
        self.columns = columns
        self.per_instance = per_instance
        n = int(columns["send_ms"].shape[0])
        self.no_capacity = np.zeros(n, dtype=bool)
        self.wait = np.zeros(n)
        #: answered by the endpoint within the SLA (what the agents count as ``overflow``)
        self.in_time = np.zeros(n, dtype=bool)
        self.ends: list[float] = []  # end times of the requests holding a slot
        self.next = 0

    def serve_before(self, until_ms: float, in_service: np.ndarray) -> None:
        """Serve every request not yet served that was sent before ``until_ms``."""
        send, hold = self.columns["send_ms"], self.columns["hold_ms"]
        latency, sla = self.columns["latency_ms"], self.columns["sla_ms"]
        n, ends = int(send.shape[0]), self.ends
        n_min = int(in_service.shape[0])
        i = self.next
        while i < n and send[i] < until_ms:
            s = float(send[i])
            m = min(int(s // MINUTE_MS), n_min - 1) if n_min else 0
            slots = int(in_service[m]) * self.per_instance if n_min else 0
            if slots <= 0:
                self.no_capacity[i] = True
                i += 1
                continue
            while ends and ends[0] <= s:
                heappop(ends)
            start = s
            while len(ends) >= slots:  # every slot busy: the earliest to free serves this one
                start = max(start, heappop(ends))
            self.wait[i] = start - s
            self.in_time[i] = latency[i] + self.wait[i] <= sla[i]
            heappush(ends, start + float(hold[i]))
            i += 1
        self.next = i

    def answered(self, from_ms: float, to_ms: float) -> int:
        """Requests sent in ``[from_ms, to_ms)`` (served already) the endpoint answered in time."""
        send = self.columns["send_ms"]
        lo, hi = np.searchsorted(send, [from_ms, to_ms], side="left")
        return int(self.in_time[lo:hi].sum())

    def result(self) -> Served:
        latency = np.where(self.no_capacity, self.columns["fallback_ms"],
                           self.columns["latency_ms"] + self.wait)
        return Served(self.no_capacity, latency, self.wait)
