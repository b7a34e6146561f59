"""Run every policy over a trace and aggregate per function and over the trace."""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from warmers.simulator.calibration import Calibration
from warmers.simulator.constants import DEFAULT_SLA_MS, SLA_DURATION_FACTOR, Prices
from warmers.simulator.engine import DEGRADED, OVERFLOW, SHED, FunctionResult, simulate_function
from warmers.simulator.policies import Observed, Policy, PolicyContext
from warmers.simulator.trace import Trace, make_workload


@dataclass(frozen=True)
class FunctionRow:
    """One policy on one function (a row of the per-function CSV)."""

    function_id: str
    trigger: str
    policy: str
    requests: int
    cold_starts: int
    env_inits: int
    sla_breaches: int
    cold_breaches: int
    overflowed: int
    degraded: int
    shed: int
    pings: int
    p99_ms: float
    idle_gb_s: float
    lambda_usd: float
    sla_ms: float
    failed_answers: int = 0
    tail: int = 0


@dataclass
class PolicyTotals:
    """One policy over the whole trace.

    Attributes
    ----------
    failed_answers : int
        Requests shed, answered degraded, or answered later than the SLA although their warm
        duration met it (``cold_breaches``, the *late* answers): the headline.
    tail : int
        Requests whose warm duration alone exceeds the SLA (the same under every policy; not
        failures when answered late).
    sla_breaches : int
        Every answer (local or overflow) later than the SLA, the tail's included.
    cost_usd : dict[str, float]
        Lambda cost by item (requests, ondemand, pc_configured, pc_duration, snapstart).
    endpoint_usd : float
        The always-on overflow endpoint, counted once (warmstart with overflow only).
    """

    policy: str
    requests: int = 0
    cold_starts: int = 0
    env_inits: int = 0
    sla_breaches: int = 0
    cold_breaches: int = 0
    failed_answers: int = 0
    tail: int = 0
    overflowed: int = 0
    degraded: int = 0
    shed: int = 0
    pings: int = 0
    idle_gb_s: float = 0.0
    p99_ms: float = float("nan")
    cost_usd: dict[str, float] = field(default_factory=dict)
    endpoint_usd: float = 0.0
    functions: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0

    @property
    def cold_start_pct(self) -> float:
        return 100.0 * self.cold_starts / self.requests if self.requests else 0.0

    @property
    def failed_pct(self) -> float:
        return 100.0 * self.failed_answers / self.requests if self.requests else 0.0

    @property
    def late(self) -> int:
        """Late answers (warm duration within the SLA): a part of ``failed_answers``."""
        return self.cold_breaches

    @property
    def lambda_usd(self) -> float:
        return float(sum(self.cost_usd.values()))

    @property
    def pc_usd(self) -> float:
        """Provisioned concurrency (configured and duration), a part of ``lambda_usd``."""
        return self.cost_usd.get("pc_configured", 0.0) + self.cost_usd.get("pc_duration", 0.0)

    @property
    def total_usd(self) -> float:
        return self.lambda_usd + self.endpoint_usd


@dataclass
class SimulationResult:
    """All policies over one trace."""

    totals: list[PolicyTotals]
    rows: list[FunctionRow]
    n_functions: int
    n_minutes: int
    seed: int
    wall_s: float = 0.0

    def by_name(self, name: str) -> PolicyTotals:
        for t in self.totals:
            if t.policy == name:
                return t
        raise KeyError(f"no policy named {name!r}; have {[t.policy for t in self.totals]}")


def _p99_keep(n_total: int) -> int:
    """How many largest latencies determine the linear-interpolated p99 of ``n_total``."""
    if n_total <= 0:
        return 0
    pos = 0.99 * (n_total - 1)
    return n_total - math.floor(pos) + 1


@dataclass
class _Partial:
    rows: list[FunctionRow]
    totals: dict[str, PolicyTotals]
    top: dict[str, np.ndarray]


def _summarise(res: FunctionResult, policy: str, trigger: str, prices: Prices) -> FunctionRow:
    cost = res.cost_usd(prices)
    paths = res.paths
    return FunctionRow(
        function_id=res.function_id,
        trigger=trigger,
        policy=policy,
        requests=res.n_requests,
        cold_starts=res.cold_starts,
        env_inits=res.env_inits,
        sla_breaches=int(res.breach.sum()),
        cold_breaches=res.cold_breaches,
        overflowed=int((paths == OVERFLOW).sum()),
        degraded=int((paths == DEGRADED).sum()),
        shed=int((paths == SHED).sum()),
        pings=res.pings,
        p99_ms=float(np.percentile(res.latencies_ms, 99)) if res.n_requests else float("nan"),
        idle_gb_s=res.idle_gb_s,
        lambda_usd=float(sum(cost.values())),
        sla_ms=res.sla_ms,
        failed_answers=res.failed_answers,
        tail=int(res.tail.sum()),
    )


def _run_chunk(
    trace: Trace, indices: Sequence[int], policies: Sequence[Policy], ctx: PolicyContext,
    prices: Prices, seed: int, keep: int, default_sla_ms: float, sla_duration_factor: float,
) -> _Partial:
    rows: list[FunctionRow] = []
    totals = {p.name: PolicyTotals(policy=p.name) for p in policies}
    tops: dict[str, list[np.ndarray]] = {p.name: [] for p in policies}
    for i in indices:
        w = make_workload(
            trace, i, seed=seed, default_sla_ms=default_sla_ms,
            sla_duration_factor=sla_duration_factor,
        )
        observed = Observed.from_workload(w)
        for policy in policies:
            t0 = time.process_time()
            controls = policy.controls(w, observed, ctx)
            res = simulate_function(w, controls)
            row = _summarise(res, policy.name, w.trigger, prices)
            rows.append(row)
            t = totals[policy.name]
            t.cpu_s += time.process_time() - t0
            t.functions += 1
            t.requests += row.requests
            t.cold_starts += row.cold_starts
            t.env_inits += row.env_inits
            t.sla_breaches += row.sla_breaches
            t.cold_breaches += row.cold_breaches
            t.failed_answers += row.failed_answers
            t.tail += row.tail
            t.overflowed += row.overflowed
            t.degraded += row.degraded
            t.shed += row.shed
            t.pings += row.pings
            t.idle_gb_s += row.idle_gb_s
            for k, v in res.cost_usd(prices).items():
                t.cost_usd[k] = t.cost_usd.get(k, 0.0) + v
            adm = controls.admission
            decisions = getattr(adm, "decisions", None)
            if decisions:
                for k, v in decisions.items():
                    t.decisions[k] = t.decisions.get(k, 0) + v
            lat = res.latencies_ms
            if lat.shape[0] > keep:
                lat = np.partition(lat, lat.shape[0] - keep)[lat.shape[0] - keep:]
            tops[policy.name].append(lat)
    top = {
        name: (np.concatenate(parts) if parts else np.zeros(0)) for name, parts in tops.items()
    }
    for name, arr in top.items():
        if arr.shape[0] > keep:
            top[name] = np.partition(arr, arr.shape[0] - keep)[arr.shape[0] - keep:]
    return _Partial(rows, totals, top)


def _balanced_chunks(weights: np.ndarray, jobs: int) -> list[list[int]]:
    """Greedy longest-processing-time split of function indices into ``jobs`` chunks."""
    chunks: list[list[int]] = [[] for _ in range(jobs)]
    load = [0.0] * jobs
    for i in np.argsort(-weights, kind="stable"):
        k = int(np.argmin(load))
        chunks[k].append(int(i))
        load[k] += float(weights[i]) + 7500.0  # per-function cost (forecasts) in invocations
    return [sorted(c) for c in chunks if c]


_FORK_STATE: dict[str, object] = {}


def _worker(chunk_id: int) -> _Partial:
    s = _FORK_STATE
    return _run_chunk(
        s["trace"], s["chunks"][chunk_id], s["policies"], s["ctx"], s["prices"],  # type: ignore[arg-type,index]
        s["seed"], s["keep"], s["default_sla_ms"], s["sla_duration_factor"],  # type: ignore[arg-type]
    )


def run_simulation(
    trace: Trace,
    policies: Sequence[Policy],
    calibration: Calibration,
    *,
    prices: Prices | None = None,
    seed: int = 2019,
    jobs: int = 1,
    default_sla_ms: float = DEFAULT_SLA_MS,
    sla_duration_factor: float = SLA_DURATION_FACTOR,
    endpoint_policies: Sequence[str] = ("warmstart",),
) -> SimulationResult:
    """Simulate every policy on every function of ``trace``.

    Parameters
    ----------
    trace : Trace
    policies : sequence of Policy
        Names must be unique.
    calibration : Calibration
    prices : Prices, optional
    seed : int
        Seed of the arrival spreading and duration sampling (per function, stable).
    jobs : int
        Worker processes (fork); 1 runs in this process.
    endpoint_policies : sequence of str
        Policies that pay for the always-on overflow endpoint (once, over the trace).

    Returns
    -------
    SimulationResult

    Raises
    ------
    ValueError
        Duplicate policy names or ``jobs < 1``.
    """
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names must be unique, got {names}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    prices = prices or Prices()
    ctx = PolicyContext(calibration=calibration)
    n_total = int(trace.counts.sum())
    keep = _p99_keep(n_total)
    weights = trace.counts.sum(axis=1).astype(float)
    jobs = min(jobs, trace.n_functions) if trace.n_functions else 1
    if jobs == 1:
        partials = [
            _run_chunk(trace, range(trace.n_functions), policies, ctx, prices, seed, keep,
                       default_sla_ms, sla_duration_factor)
        ]
    else:
        chunks = _balanced_chunks(weights, jobs)
        _FORK_STATE.update(
            trace=trace, chunks=chunks, policies=list(policies), ctx=ctx, prices=prices,
            seed=seed, keep=keep, default_sla_ms=default_sla_ms,
            sla_duration_factor=sla_duration_factor,
        )
        try:
            with multiprocessing.get_context("fork").Pool(len(chunks)) as pool:
                partials = pool.map(_worker, range(len(chunks)))
        finally:
            _FORK_STATE.clear()
    totals = {name: PolicyTotals(policy=name) for name in names}
    rows: list[FunctionRow] = []
    tops: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for part in partials:
        rows.extend(part.rows)
        for name, t in part.totals.items():
            agg = totals[name]
            for attr in ("requests", "cold_starts", "env_inits", "sla_breaches", "cold_breaches",
                         "failed_answers", "tail", "overflowed", "degraded", "shed", "pings",
                         "functions"):
                setattr(agg, attr, getattr(agg, attr) + getattr(t, attr))
            agg.idle_gb_s += t.idle_gb_s
            agg.cpu_s += t.cpu_s
            for k, v in t.cost_usd.items():
                agg.cost_usd[k] = agg.cost_usd.get(k, 0.0) + v
            for k, v in t.decisions.items():
                agg.decisions[k] = agg.decisions.get(k, 0) + v
            tops[name].append(part.top[name])
    horizon_h = trace.n_minutes / 60.0
    for name in names:
        arr = np.concatenate(tops[name]) if tops[name] else np.zeros(0)
        agg = totals[name]
        if agg.requests:
            # the top ``keep`` latencies hold the two order statistics the p99 needs
            arr.sort()
            pos = 0.99 * (agg.requests - 1)
            lo = math.floor(pos)
            base = agg.requests - arr.shape[0]
            v_lo = arr[lo - base]
            v_hi = arr[min(lo + 1, agg.requests - 1) - base]
            agg.p99_ms = float(v_lo + (v_hi - v_lo) * (pos - lo))
        if name in endpoint_policies:
            agg.endpoint_usd = horizon_h * prices.gpu_endpoint_hour_usd
    rows.sort(key=lambda r: (r.function_id, names.index(r.policy)))
    return SimulationResult(
        totals=[totals[n] for n in names], rows=rows, n_functions=trace.n_functions,
        n_minutes=trace.n_minutes, seed=seed,
    )
