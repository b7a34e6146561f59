"""Run every policy over a trace and aggregate per function and over the trace.

Functions are streamed one at a time (``stream.FunctionSeries``), grouped into shards of
consecutive functions; a shard is the unit of work of the local process pool (default) or of a
Dask cluster (``engine="dask"``), merged in shard order so every engine gives the same numbers.
A function's requests are generated and simulated in time chunks of at most
``chunk_invocations`` (its execution environments carried across each cut, ``EngineState``),
so a worker's memory is bounded by the chunk size, not by the busiest function. Latency
quantiles come from a mergeable DDSketch (``sketch.RELATIVE_ACCURACY``, 1 % relative error);
every count (requests, failed answers, cold starts...) stays exact.

Why Dask and not Ray: a shard is one pure Python call returning a small picklable partial, which
is exactly ``Client.submit``; Dask (``distributed``) is pure-Python wheels of a few MB that start
a ``LocalCluster`` of worker processes in about a second (the tests start one), while Ray
ships a wheel of tens of MB with a C++ raylet and object store whose start-up takes seconds.
On a lost worker the Dask scheduler reruns its tasks elsewhere; a shard's partial is read
once, from its future's result, so it is never counted twice.
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from warmers.cloudwatch import QUERIES as WARMER_QUERIES
from warmers.plan.endpoint import AgentDemand
from warmers.simulator.calibration import Calibration
from warmers.simulator.constants import DEFAULT_SLA_MS, SLA_DURATION_FACTOR, SimulatorPrices
from warmers.simulator.controls import DEGRADED, LOCAL, OVERFLOW, SHED, THROTTLED, EngineState
from warmers.simulator.endpoint import (
    DEFAULT_CONCURRENT_REQUESTS,
    EndpointModel,
    EndpointRun,
    OverflowRequests,
    plan_capacity,
    serve_overflow,
)
from warmers.simulator.engine import simulate_function
from warmers.simulator.policies import Policy, PolicyContext
from warmers.simulator.sketch import RELATIVE_ACCURACY, LatencySketch
from warmers.simulator.stream import (
    CHUNK_INVOCATIONS,
    DEFAULT_CONCURRENCY_LIMIT,
    FunctionSeries,
    WorkloadSpec,
    chunk_bounds,
    chunk_workloads,
    empty_workload,
    observe_chunks,
    series_of_trace,
)
from warmers.simulator.trace import Trace
from warmers.simulator.warmstart_policy import without_capacity

#: A request longer than this runs past the deployment's default function timeout, ms
#: (cdk.json's ``timeout_s`` default, 30 s); the simulator counts them (``long_requests``)
#: and lets them run, since the trace measured them (Lambda allows up to 900 s).
LONG_REQUEST_MS = 30_000.0

#: Default most functions, and invocations, in one shard (the unit of work of a worker).
SHARD_FUNCTIONS = 16
SHARD_INVOCATIONS = 1_000_000


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
    p99_ms: float  # DDSketch estimate, within sketch.RELATIVE_ACCURACY (relative)
    idle_gb_s: float
    lambda_usd: float
    sla_ms: float
    failed_answers: int = 0
    tail: int = 0
    #: requests Lambda throttled at the function's concurrency limit (429; failed answers)
    throttled: int = 0
    #: requests whose warm duration exceeds ``LONG_REQUEST_MS`` (the deployment's default
    #: function timeout): the trace's own durations, which the simulator lets run; a deployment
    #: needs a longer timeout for them (at most Lambda's 900 s)
    long_requests: int = 0
    #: the cold-start strategy the policy deployed on this function (warmstart: ``provisioned``
    #: or ``snapstart``; empty for the baselines)
    strategy: str = ""


@dataclass
class PolicyTotals:
    """One policy over the whole trace.

    Attributes
    ----------
    failed_answers : int
        Requests shed, answered degraded, throttled (429 at the concurrency limit), or answered
        later than the SLA although their warm duration met it (``cold_breaches``, the *late*
        answers): the headline.
    throttled : int
        Requests Lambda throttled at the function's concurrency limit (``engine`` module
        docstring; the same limit for every policy).
    tail : int
        Requests whose warm duration alone exceeds the SLA (the same under every policy; not
        failures when answered late).
    sla_breaches : int
        Every answer (local or overflow) later than the SLA, the tail's included.
    cost_usd : dict[str, float]
        Lambda cost by item (requests, ondemand, pc_configured, pc_duration, snapstart).
    endpoint_usd : float
        The shared overflow endpoint's instance-hours (provisioning included) x the
        instance-hour price, counted once (policies with an ``endpoint`` only).
    warmer_usd : float
        The warmer's own cost: its CloudWatch ``GetMetricData`` reads (every metric of every
        alias at every warmer run it simulates, ``warmers.cloudwatch.QUERIES``); policies
        without a warmer pay 0. The warmer's Lambda time (~16 ms per alias per run,
        ``bench/results/warmer_scale.md``) is not counted.
    endpoint : dict
        The endpoint's figures (``warmers.simulator.endpoint``): instance-hours, most
        instances in service, minutes with none, requests degraded for want of capacity,
        requests that queued and their longest wait; empty without an endpoint.
    p50_ms, p95_ms, p99_ms : float
        Latency quantiles over every request, from the merged DDSketch: within
        ``sketch.RELATIVE_ACCURACY`` (1 %) of the exact order statistic (NaN without requests).
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
    throttled: int = 0
    long_requests: int = 0
    pings: int = 0
    idle_gb_s: float = 0.0
    p50_ms: float = float("nan")
    p95_ms: float = float("nan")
    p99_ms: float = float("nan")
    cost_usd: dict[str, float] = field(default_factory=dict)
    endpoint_usd: float = 0.0
    warmer_usd: float = 0.0
    endpoint: dict[str, Any] = field(default_factory=dict)
    functions: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0
    #: functions per deployed cold-start strategy (warmstart only), e.g. {"snapstart": 221}
    strategies: dict[str, int] = field(default_factory=dict)

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
        """Lambda (provisioned concurrency included) + the overflow endpoint + the warmer's
        reads."""
        return self.lambda_usd + self.endpoint_usd + self.warmer_usd


@dataclass
class SimulationResult:
    """All policies over one trace."""

    totals: list[PolicyTotals]
    rows: list[FunctionRow]
    n_functions: int
    n_minutes: int
    seed: int
    wall_s: float = 0.0
    engine: str = "local"
    shards: int = 0
    chunks: int = 0
    largest_chunk_invocations: int = 0
    worker_peak_rss_mb: dict[str, float] = field(default_factory=dict)
    quantile_relative_accuracy: float = RELATIVE_ACCURACY

    def by_name(self, name: str) -> PolicyTotals:
        for t in self.totals:
            if t.policy == name:
                return t
        raise KeyError(f"no policy named {name!r}; have {[t.policy for t in self.totals]}")



_COUNTS = ("requests", "cold_starts", "env_inits", "sla_breaches", "cold_breaches",
           "failed_answers", "tail", "overflowed", "degraded", "shed", "throttled",
           "long_requests", "pings", "functions")


class EngineUnavailable(RuntimeError):
    """The distributed engine cannot be used: not installed, or its cluster is unreachable."""


@dataclass(frozen=True)
class _Job:
    """What every shard needs besides its functions (sent once per task)."""

    policies: tuple[Policy, ...]
    ctx: PolicyContext
    prices: SimulatorPrices
    spec: WorkloadSpec
    chunk_invocations: int


@dataclass
class _Partial:
    """One shard's outcome (merged by the caller in shard order)."""

    index: int
    rows: list[FunctionRow]
    totals: dict[str, PolicyTotals]
    sketches: dict[str, LatencySketch]
    n_minutes: int
    chunks: int
    largest_chunk: int
    worker: str
    peak_rss_mb: float
    #: per endpoint policy: its overflowed requests (resolved on the shared endpoint after
    #: every shard), the functions' demand per warmer-run minute, their memory sizes
    overflow: dict[str, OverflowRequests] = field(default_factory=dict)
    demands: dict[str, dict[int, dict[str, AgentDemand | None]]] = field(default_factory=dict)
    memory_mb: dict[str, int] = field(default_factory=dict)


#: Prefix of the controls of a policy's run with the endpoint out of capacity.
_NO_CAPACITY = "\x00no capacity: "


def _endpoint_of(policy: Policy) -> EndpointModel | None:
    """The shared endpoint a policy overflows to (None: none, or not modelled)."""
    model = getattr(policy, "endpoint", None)
    return model if getattr(policy, "overflow", False) and model is not None else None


def _add_totals(agg: PolicyTotals, t: PolicyTotals) -> None:
    for attr in _COUNTS:
        setattr(agg, attr, getattr(agg, attr) + getattr(t, attr))
    agg.idle_gb_s += t.idle_gb_s
    agg.cpu_s += t.cpu_s
    for k, v in t.cost_usd.items():
        agg.cost_usd[k] = agg.cost_usd.get(k, 0.0) + v
    for k, v in t.decisions.items():
        agg.decisions[k] = agg.decisions.get(k, 0) + v
    for k, n in t.strategies.items():
        agg.strategies[k] = agg.strategies.get(k, 0) + n


def _simulate_series(s: FunctionSeries, job: _Job, part: _Partial) -> None:
    """Every policy on one function, chunk by chunk; adds its rows, totals and sketches."""
    bounds = chunk_bounds(s.counts, job.chunk_invocations)
    n_min = int(s.counts.shape[0])
    part.chunks += len(bounds)
    part.largest_chunk = max(
        part.largest_chunk, max(int(s.counts[m0:m1].sum()) for m0, m1 in bounds))
    first = None
    if len(bounds) == 1:
        first = next(chunk_workloads(s, job.spec, bounds))
        observed = observe_chunks(iter([first]), bounds, n_min)
    else:  # pass 1: the metrics (a chunk at a time); pass 2 regenerates the same requests
        observed = observe_chunks(chunk_workloads(s, job.spec, bounds), bounds, n_min)
    base = empty_workload(s, job.spec)
    names = [p.name for p in job.policies]
    controls, states, cpu = {}, {}, dict.fromkeys(names, 0.0)
    modelled = {p.name for p in job.policies if _endpoint_of(p) is not None}
    deployed: dict[str, str] = {}
    for policy in job.policies:
        t0 = time.process_time()
        controls[policy.name] = policy.controls(base, observed, job.ctx)
        strategy_of = getattr(policy, "deployed_strategy", None)
        deployed[policy.name] = strategy_of(base, job.ctx) if strategy_of is not None else ""
        cpu[policy.name] += time.process_time() - t0
        states[policy.name] = EngineState()
        if policy.name in modelled:
            # the same function once more with the endpoint out of capacity: what each
            # overflowed request gets when it is sent while no instance is in service
            controls[_NO_CAPACITY + policy.name] = without_capacity(controls[policy.name])
            states[_NO_CAPACITY + policy.name] = EngineState()
            key = f"{s.function_id}:live"
            by_minute = part.demands.setdefault(policy.name, {})
            for m, d in getattr(policy, "last_demands", {}).items():
                by_minute.setdefault(m, {})[key] = d
            part.memory_mb[key] = base.memory_mb
    counts = {n: dict.fromkeys(("requests", "sla_breaches", "cold_breaches", "overflowed",
                                "degraded", "shed", "throttled", "failed_answers", "tail",
                                "long_requests"), 0)
              for n in names}
    sketches = {n: LatencySketch() for n in names}
    row_sketches = {n: LatencySketch() for n in names}
    finals = {}
    chunks = iter([first]) if first is not None else chunk_workloads(s, job.spec, bounds)
    for k, w in enumerate(chunks):
        final = k == len(bounds) - 1
        for name in names:
            t0 = time.process_time()
            res = simulate_function(w, controls[name], state=states[name], final=final)
            c = counts[name]
            paths = res.paths
            c["requests"] += res.n_requests
            c["sla_breaches"] += int(res.breach.sum())
            c["cold_breaches"] += res.cold_breaches
            c["overflowed"] += int((paths == OVERFLOW).sum())
            c["degraded"] += int((paths == DEGRADED).sum())
            c["shed"] += int((paths == SHED).sum())
            c["throttled"] += int((paths == THROTTLED).sum())
            c["failed_answers"] += res.failed_answers
            c["tail"] += int(res.tail.sum())
            c["long_requests"] += int((w.durations_ms > LONG_REQUEST_MS).sum())
            row_sketches[name].add_array(res.latencies_ms)
            if name in modelled:
                # overflowed requests are resolved on the shared endpoint (run_series):
                # counted there, with their final latency
                ovf = paths == OVERFLOW
                late = res.breach & ~res.tail
                c["overflowed"] -= int(ovf.sum())
                c["sla_breaches"] -= int(res.breach[ovf].sum())
                c["cold_breaches"] -= int(late[ovf].sum())
                c["failed_answers"] -= int(late[ovf].sum())
                sketches[name].add_array(res.latencies_ms[~ovf])
                # the run without capacity is needed for overflowed requests only (a function
                # cut in chunks runs it on every chunk: its environments carry across)
                if ovf.any() or len(bounds) > 1:
                    ctl = controls[name]
                    alt = simulate_function(w, controls[_NO_CAPACITY + name],
                                            state=states[_NO_CAPACITY + name], final=final)
                    lat = res.latencies_ms[ovf]
                    hold = ctl.overflow_extra_ms + w.durations_ms[ovf]
                    before = np.maximum(lat - hold, 0.0)  # the init and the decision, ms
                    part.overflow.setdefault(name, OverflowRequests()).add(
                        f"{s.function_id}:live", w.arrivals_ms[ovf] + before, hold, lat,
                        alt.latencies_ms[ovf], alt.paths[ovf], res.sla_ms, res.tail[ovf])
            else:
                sketches[name].add_array(res.latencies_ms)
            cpu[name] += time.process_time() - t0
            if final:
                finals[name] = res
        del w
    for name in names:
        res, c = finals[name], counts[name]
        cost = res.cost_usd(job.prices)
        # the final chunk's result holds the running totals, but requests of its chunk only
        # (a throttled request is not billed)
        cost["requests"] = (c["requests"] - c["throttled"] + res.pings) * job.prices.request_usd
        row = FunctionRow(
            function_id=s.function_id, trigger=s.trigger, policy=name,
            requests=c["requests"], cold_starts=res.cold_starts, env_inits=res.env_inits,
            sla_breaches=c["sla_breaches"], cold_breaches=c["cold_breaches"],
            overflowed=c["overflowed"], degraded=c["degraded"], shed=c["shed"],
            pings=res.pings, p99_ms=row_sketches[name].quantile(0.99), idle_gb_s=res.idle_gb_s,
            lambda_usd=float(sum(cost.values())), sla_ms=res.sla_ms,
            failed_answers=c["failed_answers"], tail=c["tail"], strategy=deployed[name],
            throttled=c["throttled"], long_requests=c["long_requests"],
        )
        part.rows.append(row)
        t = part.totals[name]
        t.cpu_s += cpu[name]
        t.functions += 1
        for attr in ("requests", "cold_starts", "env_inits", "sla_breaches", "cold_breaches",
                     "failed_answers", "tail", "overflowed", "degraded", "shed", "throttled",
                     "long_requests", "pings"):
            setattr(t, attr, getattr(t, attr) + getattr(row, attr))
        t.idle_gb_s += row.idle_gb_s
        if row.strategy:
            t.strategies[row.strategy] = t.strategies.get(row.strategy, 0) + 1
        for key, v in cost.items():
            t.cost_usd[key] = t.cost_usd.get(key, 0.0) + v
        decisions = getattr(controls[name].admission, "decisions", None)
        if decisions:
            for key, v in decisions.items():
                t.decisions[key] = t.decisions.get(key, 0) + v
        part.sketches[name].merge(sketches[name])


def _peak_rss_mb() -> float:
    """This process's peak resident set, MB (``getrusage`` ``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _run_shard(index: int, series: list[FunctionSeries], job: _Job) -> _Partial:
    """Simulate one shard (pure: the same shard gives the same partial on any worker)."""
    import os
    names = [p.name for p in job.policies]
    part = _Partial(index=index, rows=[], totals={n: PolicyTotals(policy=n) for n in names},
                    sketches={n: LatencySketch() for n in names}, n_minutes=0, chunks=0,
                    largest_chunk=0, worker="", peak_rss_mb=0.0)
    for s in series:
        if part.n_minutes and s.counts.shape[0] != part.n_minutes:
            raise ValueError(f"{s.function_id}: {s.counts.shape[0]} minutes, the trace has "
                             f"{part.n_minutes}")
        part.n_minutes = int(s.counts.shape[0])
        _simulate_series(s, job, part)
    part.worker = f"{os.uname().nodename}:{os.getpid()}"
    part.peak_rss_mb = _peak_rss_mb()
    return part


def shards_of(series: Iterable[FunctionSeries], *, max_functions: int = SHARD_FUNCTIONS,
              max_invocations: int = SHARD_INVOCATIONS) -> Iterator[list[FunctionSeries]]:
    """Consecutive functions grouped into shards of at most ``max_functions`` functions and
    ``max_invocations`` invocations (a function above the budget is a shard of its own)."""
    shard: list[FunctionSeries] = []
    load = 0
    for s in series:
        n = s.invocations
        if shard and (len(shard) >= max_functions or load + n > max_invocations):
            yield shard
            shard, load = [], 0
        shard.append(s)
        load += n
    if shard:
        yield shard


_FORK_JOB: dict[str, _Job] = {}


def _pool_task(index: int, series: list[FunctionSeries]) -> _Partial:
    return _run_shard(index, series, _FORK_JOB["job"])


def _windowed(submit: Any, shards: Iterator[list[FunctionSeries]], window: int,
              wait_any: Any) -> list[_Partial]:
    """Submit shards keeping at most ``window`` in flight (the input is read as it goes)."""
    out: list[_Partial] = []
    pending: set = set()  # type: ignore[type-arg]
    for i, shard in enumerate(shards):
        pending.add(submit(i, shard))
        if len(pending) >= window:
            done, pending = wait_any(pending)
            out.extend(f.result() for f in done)
    while pending:
        done, pending = wait_any(pending)
        out.extend(f.result() for f in done)
    return out


def _run_local(shards: Iterator[list[FunctionSeries]], job: _Job, jobs: int) -> list[_Partial]:
    if jobs == 1:
        return [_run_shard(i, shard, job) for i, shard in enumerate(shards)]
    _FORK_JOB["job"] = job
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            return _windowed(lambda i, sh: pool.submit(_pool_task, i, sh), shards, 2 * jobs,
                             lambda p: wait(p, return_when=FIRST_COMPLETED))
    finally:
        _FORK_JOB.clear()


def _run_dask(shards: Iterator[list[FunctionSeries]], job: _Job, address: str | None,
              jobs: int, retries: int) -> list[_Partial]:
    """Shards as Dask tasks. A task whose worker dies is rerun elsewhere (the scheduler's
    ``allowed-failures``, plus ``retries``): a shard's partial is taken once, from the
    future's one result, so it is never counted twice."""
    try:
        from distributed import Client, LocalCluster
        from distributed import wait as dask_wait
    except ImportError as exc:  # pragma: no cover - the dist extra is installed by make
        raise EngineUnavailable(
            "engine 'dask' needs the dist extra: pip install -e '.[dist]'") from exc
    cluster = None
    try:
        if address is None:
            cluster = LocalCluster(n_workers=jobs,  # type: ignore[no-untyped-call]
                                   threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)  # type: ignore[no-untyped-call]
        else:
            try:
                client = Client(address, timeout=5)  # type: ignore[no-untyped-call]
            except (OSError, TimeoutError) as exc:
                raise EngineUnavailable(
                    f"dask scheduler at {address} is unreachable ({exc}); start one with "
                    "`dask scheduler` and `dask worker`, or use --engine local") from exc
        with client:
            job_f = client.scatter(job, broadcast=True)  # type: ignore[no-untyped-call]

            def submit(i: int, shard: list[FunctionSeries]):  # type: ignore[no-untyped-def]
                return client.submit(_run_shard, i, shard, job_f, key=f"shard-{i}",
                                     retries=retries, pure=False)

            def wait_any(p):  # type: ignore[no-untyped-def]
                res = dask_wait(p, return_when="FIRST_COMPLETED")  # type: ignore[no-untyped-call]
                return res.done, res.not_done

            n_workers = max(1, len(client.scheduler_info().get("workers", {})) or jobs)
            return _windowed(submit, shards, 2 * n_workers, wait_any)
    finally:
        if cluster is not None:
            cluster.close()


def run_series(
    series: Iterable[FunctionSeries],
    policies: Sequence[Policy],
    calibration: Calibration,
    *,
    prices: SimulatorPrices | None = None,
    seed: int = 2019,
    jobs: int = 1,
    engine: str = "local",
    dask_address: str | None = None,
    chunk_invocations: int = CHUNK_INVOCATIONS,
    shard_functions: int = SHARD_FUNCTIONS,
    shard_invocations: int = SHARD_INVOCATIONS,
    retries: int = 2,
    default_sla_ms: float = DEFAULT_SLA_MS,
    sla_duration_factor: float = SLA_DURATION_FACTOR,
    concurrency_limit: int | None = DEFAULT_CONCURRENCY_LIMIT,
    sla_extra_ms: float = 0.0,
) -> SimulationResult:
    """Simulate every policy on every function of a stream of series (read as it goes).

    Parameters
    ----------
    series : iterable of FunctionSeries
        All with the same number of minutes (ValueError otherwise).
    policies : sequence of Policy
        Names must be unique.
    calibration : Calibration
    prices : SimulatorPrices, optional
    seed : int
        Seed of the arrival spreading and duration sampling (per function, stable).
    jobs : int
        Local worker processes (fork; 1 runs in this process), or the workers of the local
        Dask cluster started when ``engine="dask"`` and no ``dask_address`` is given.
    engine : {"local", "dask"}
    dask_address : str, optional
        Scheduler of a running Dask cluster (``tcp://host:8786``).
    chunk_invocations : int
        Most invocations of one function simulated at once (the memory bound per worker).
    shard_functions, shard_invocations : int
        Size of a unit of work (see ``shards_of``); the results do not depend on it except
        for the order of float sums.
    retries : int
        Extra attempts of a Dask task that failed (beyond worker losses, always retried).
    concurrency_limit : int or None
        In-flight invocations Lambda allows each function, the same for every policy
        (``Workload.concurrency_limit``; default the account quota of 1,000, each function
        alone in it); beyond it a request is throttled (429, a failed answer). None: unbounded.
    sla_extra_ms : float
        Added to every function's SLA, ms (``WorkloadSpec.sla_extra_ms``; default 0).

    Returns
    -------
    SimulationResult
        Rows sorted by function and policy order; totals with exact counts and DDSketch
        quantiles; ``worker_peak_rss_mb`` per worker process (``getrusage`` peak).

    Raises
    ------
    ValueError
        Duplicate policy names, ``jobs < 1``, an unknown engine or uneven series lengths.
    EngineUnavailable
        ``engine="dask"`` without the dist extra, or its scheduler is unreachable.
    """
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names must be unique, got {names}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if engine not in ("local", "dask"):
        raise ValueError(f"engine must be 'local' or 'dask', got {engine!r}")
    prices = prices or SimulatorPrices()
    job = _Job(policies=tuple(policies), ctx=PolicyContext(calibration=calibration),
               prices=prices, spec=WorkloadSpec(seed, default_sla_ms, sla_duration_factor,
                                 concurrency_limit, sla_extra_ms),
               chunk_invocations=chunk_invocations)
    shards = shards_of(series, max_functions=shard_functions, max_invocations=shard_invocations)
    if engine == "local":
        partials = _run_local(shards, job, jobs)
    else:
        partials = _run_dask(shards, job, dask_address, jobs, retries)
    partials.sort(key=lambda p: p.index)
    n_minutes = {p.n_minutes for p in partials}
    if len(n_minutes) > 1:
        raise ValueError(f"series of different lengths in one run: {sorted(n_minutes)} minutes")
    totals = {name: PolicyTotals(policy=name) for name in names}
    sketches = {name: LatencySketch() for name in names}
    rows: list[FunctionRow] = []
    rss: dict[str, float] = {}
    overflow: dict[str, OverflowRequests] = {}
    demands: dict[str, dict[int, dict[str, AgentDemand | None]]] = {}
    memory_mb: dict[str, int] = {}
    for part in partials:
        rows.extend(part.rows)
        for name in names:
            _add_totals(totals[name], part.totals[name])
            sketches[name].merge(part.sketches[name])
        for name, got in part.overflow.items():
            overflow.setdefault(name, OverflowRequests()).extend(got)
        for name, by_minute in part.demands.items():
            into = demands.setdefault(name, {})
            for m, d in by_minute.items():
                into.setdefault(m, {}).update(d)
        memory_mb.update(part.memory_mb)
        rss[part.worker] = max(rss.get(part.worker, 0.0), part.peak_rss_mb)
    n_min = n_minutes.pop() if n_minutes else 0
    for policy in policies:
        model = _endpoint_of(policy)
        if model is not None:
            if model.concurrent_requests_per_instance is None:
                model = replace(model, concurrent_requests_per_instance=(
                    calibration.endpoint_concurrency or DEFAULT_CONCURRENT_REQUESTS))
            _resolve_endpoint(policy, model, overflow.get(policy.name, OverflowRequests()),
                              demands.get(policy.name, {}), memory_mb, n_min,
                              totals[policy.name], sketches[policy.name], rows)
    for policy in policies:
        every = getattr(policy, "plan_every_min", None)
        if isinstance(every, int) and every > 0:  # a policy with a warmer (warmstart)
            runs = len(range(0, n_min, every))
            # the spend guard of a planned endpoint reads one more metric per agent per run
            # (its overflow answers, ``warmers.cloudwatch``); the on-demand agents overflow
            model = _endpoint_of(policy)
            guard = 0
            if model is not None and model.mode == "planned":
                guard = sum(1 for r in rows if r.policy == policy.name
                            and r.strategy != "snapstart")
            totals[policy.name].warmer_usd = (
                (totals[policy.name].functions * len(WARMER_QUERIES) + guard) * runs
                * prices.get_metric_data_metric_usd)
    for name in names:
        agg = totals[name]
        agg.p50_ms = sketches[name].quantile(0.50)
        agg.p95_ms = sketches[name].quantile(0.95)
        agg.p99_ms = sketches[name].quantile(0.99)
    rows.sort(key=lambda r: (r.function_id, names.index(r.policy)))
    return SimulationResult(
        totals=[totals[n] for n in names], rows=rows,
        n_functions=len({r.function_id for r in rows}), n_minutes=n_min, seed=seed,
        engine=engine, shards=len(partials), chunks=sum(p.chunks for p in partials),
        largest_chunk_invocations=max((p.largest_chunk for p in partials), default=0),
        worker_peak_rss_mb=rss,
    )


def _resolve_endpoint(policy: Any, model: EndpointModel, requests: OverflowRequests,
                      demands: dict[int, dict[str, AgentDemand | None]],
                      memory_mb: dict[str, int], n_minutes: int, agg: PolicyTotals,
                      sketch: LatencySketch, rows: list[FunctionRow]) -> None:
    """Plan the shared endpoint, serve the policy's overflowed requests on it, and count them
    (``warmers.simulator.endpoint``): into the totals, the latency sketch and the rows. Plans
    and serving interleave in time order (each plan knows what the endpoint answered before
    it: the spend guard)."""
    planner = policy.planner_config
    plan_every = int(policy.plan_every_min)
    window = int(policy.forecast_config.window_min)
    cols = requests.columns()
    per_instance = model.concurrent_requests_per_instance or DEFAULT_CONCURRENT_REQUESTS
    timeline = plan_capacity(model, demands, dict.fromkeys(memory_mb, "provisioned"), memory_mb,
                             planner, n_minutes=n_minutes, plan_every_min=plan_every,
                             window_min=window, columns=cols,
                             concurrent_requests_per_instance=per_instance)
    served = (timeline.served if timeline.served is not None
              else serve_overflow(cols, timeline, per_instance))
    lat = served.latency_ms
    path = np.where(served.no_capacity, cols["fallback_path"], OVERFLOW)
    # the runtime's overflow call has the SLA's budget (functions/runtime/overflow.py): an
    # answer not back by then is a timeout, and the request is answered degraded at the
    # deadline (the endpoint still works on it: its slot stays held)
    timed_out = (path == OVERFLOW) & (lat > cols["sla_ms"])
    path = np.where(timed_out, DEGRADED, path)
    lat = np.where(timed_out, cols["sla_ms"], lat)
    answered = (path == OVERFLOW) | (path == LOCAL)
    degraded, shed = path == DEGRADED, path == SHED
    breach = answered & (lat > cols["sla_ms"])
    late = breach & ~cols["tail"].astype(bool)
    agg.overflowed += int((path == OVERFLOW).sum())
    agg.degraded += int(degraded.sum())
    agg.shed += int(shed.sum())
    agg.sla_breaches += int(breach.sum())
    agg.cold_breaches += int(late.sum())
    agg.failed_answers += int(degraded.sum() + shed.sum() + late.sum())
    sketch.add_array(lat)
    agg.endpoint_usd = timeline.instance_hours * model.instance_usd_per_hour
    if getattr(policy, "keep_plans", False):
        policy.endpoint_run = EndpointRun(cols["send_ms"], path, cols["function_id"], timeline)
    queued = served.wait_ms > 0
    agg.endpoint = {
        "mode": model.mode, "instance_hours": timeline.instance_hours,
        "max_in_service": float(timeline.in_service.max(initial=0)),
        "minutes_without_capacity": float((timeline.in_service == 0).sum()),
        "sent_without_capacity": float(served.no_capacity.sum()),
        "degraded_or_shed_without_capacity": float((served.no_capacity & (degraded | shed)).sum()),
        "queued": float(queued.sum()),
        "max_wait_ms": float(served.wait_ms.max(initial=0.0)),
        "timed_out": float(timed_out.sum()),
        "concurrent_requests_per_instance": float(per_instance),
        "provisioning_delay_s": model.provisioning_delay_s,
        "plans_paying": float(sum(p.pays for p in timeline.plans)),
        "plans_spend_guarded": float(sum(p.spend_guard_since_s is not None
                                         for p in timeline.plans)),
        "plans": float(len(timeline.plans)),
    }
    fids = np.asarray([str(f).rsplit(":", 1)[0] for f in cols["function_id"]], dtype=object)
    if not fids.size:
        return
    uniq, inv = np.unique(fids, return_inverse=True)

    def per_function(flags: np.ndarray) -> dict[str, int]:
        sums = np.bincount(inv, weights=flags.astype(float), minlength=uniq.shape[0])
        return {str(f): round(float(v)) for f, v in zip(uniq, sums, strict=True)}

    ovf, deg, shd, brc, lat_ = (per_function(x) for x in (path == OVERFLOW, degraded, shed,
                                                          breach, late))
    for i, row in enumerate(rows):
        if row.policy == policy.name and row.function_id in ovf:
            f = row.function_id
            rows[i] = replace(
                row, overflowed=row.overflowed + ovf[f], degraded=row.degraded + deg[f],
                shed=row.shed + shd[f], sla_breaches=row.sla_breaches + brc[f],
                cold_breaches=row.cold_breaches + lat_[f],
                failed_answers=row.failed_answers + deg[f] + shd[f] + lat_[f])


def run_simulation(
    trace: Trace,
    policies: Sequence[Policy],
    calibration: Calibration,
    **kwargs: object,
) -> SimulationResult:
    """Simulate every policy on every function of an in-memory ``trace`` (see ``run_series``
    for the keyword arguments and errors)."""
    return run_series(series_of_trace(trace), policies, calibration, **kwargs)  # type: ignore[arg-type]
