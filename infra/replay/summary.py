"""The per-run table of a replay: counts, latency percentiles, GB-s and estimated USD.

Every number comes from a measurement: client records (status, latency, ``X-Warmstart-Path``,
``Server-Timing``), the emulator's per-invocation results (cold start, REPORT billed duration)
and the sampled provisioned concurrency. Nothing is taken from the trace except the request
count sent.

Definitions
-----------
- *cold start*: an invocation for which the emulator created a new execution environment
  (on-demand or SnapStart restore; provisioned environments are initialized ahead and are not).
  When the emulator's records are unavailable (attached stack), a ``Server-Timing`` ``init``
  entry marks one.
- *failed answer*: a request shed, answered degraded, answered with an error (no answer, or a
  server error that is not a graceful shed), or answered *late*: later than the SLA although
  its simulated work (``tool_ms``, the trace duration scaled) met the SLA. The simulator's
  definition, plus errors.
- *tail*: requests whose simulated work alone exceeds the SLA: the trace's, not the policy's,
  the same in every run; not failures when answered late (they are when shed, degraded or
  errored), and never in the comparison.
- *SLA breach*: a request answered later than the SLA, or not answered at all, or answered with a
  server error that is not a graceful shed (the tail's included; kept for reference).
- *cold starts answered by overflow*: overflowed requests whose invocation was a cold start
  (the others ran on an environment still loading its model); answer latencies are the
  client's, from sending; the *overflow call alone* is the handler's ``Server-Timing``
  ``overflow`` entry of every overflowed request (the endpoint call).
- *provisioned concurrency raised by the warmer*: its plans (those before the slice too) that
  raised provisioned concurrency; *most allocated*: the sampled allocation during the slice.
- *cold starts, warmstart simulate*: the policy simulator on the same function and slice
  (``infra.replay.pick.simulated_cold_starts``), for comparison.
- *overflowed / degraded / shed*: the ``X-Warmstart-Path`` header (``degraded`` also when the body
  says ``"degraded": true``).
- *GB-s* are in trace (emulated) seconds: with time scale ``X`` one real second is ``X`` trace
  seconds, as for the stack's clock. Provisioned GB-s integrate the allocated provisioned
  environments over the stack clock; invocation GB-s are REPORT billed durations times ``X``,
  of the requests and of the warmer's warm pings during the slice.
- *streamed answers*: answers sent chunked (a function URL in ``RESPONSE_STREAM`` mode);
  their *time to first byte* is the client's, real ms from sending to the first body byte
  (the rows appear only when a run has streamed answers).
- *USD per avoided failed answer*: ``(on USD - off USD) / (off failed - on failed)``, only
  when ``on`` failed fewer answers (negative: it also cost less); none avoided, or more
  failed, is said in words, never a ratio (:func:`cost_per_avoided`).
- *USD*: Lambda prices (``warmers.cost.CostModel``, us-east-1, from tests/data/pricing.md) and,
  when the GPU endpoint ran, its instance-hour price (cdk.json ``pricing``) over the slice
  (always on) or over its copy-hours (planned: copies asked for, from each scale-out request,
  provisioning included, to the scale-in; :func:`endpoint_usage`).
- *GPU endpoint copy asked for / in service*: the planned endpoint's first scale-out request
  and the first in-service state the warmer published (from then on the handlers may overflow),
  in trace minutes from the slice start (negative: before it).
  Lambda in parts: requests + on-demand GB-s, provisioned concurrency (configured GB-s
  and the duration of invocations it served) and, with SnapStart, the snapshot cache over the
  slice (GB-s of the published version; AWS bills at least 3 hours per cache, not prorated
  here) and the restores (per GB restored).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infra.replay.client import ClientRecord
from infra.replay.observe import InvocationObservation, StateSample
from warmers.simulator import tables

GRACEFUL_PATHS = ("shed", "degraded")


@dataclass(frozen=True)
class Prices:
    """USD prices the summary uses, with where they came from."""

    on_demand_gb_s: float
    pc_configured_gb_s: float
    pc_duration_gb_s: float
    request: float
    gpu_instance_hour: float | None
    gpu_instance_type: str | None
    sources: tuple[str, ...] = ()
    #: SnapStart: the snapshot cache per GB-s the published version is active, and each
    #: restore per GB (warmers/prices.json ``snapstart_cache_gb_s``, ``snapstart_restore_gb``)
    snapstart_cache_gb_s: float = 0.0
    snapstart_restore_gb: float = 0.0

    @classmethod
    def load(cls, cdk_json: str | None = "cdk.json", architecture: str = "x86_64") -> Prices:
        """Lambda prices from ``warmers.cost``; the GPU endpoint's from cdk.json when readable."""
        from warmers.cost import CostModel

        cost = CostModel.us_east_1(architecture)  # type: ignore[arg-type]
        gpu_usd: float | None = None
        gpu_type: str | None = None
        sources = [f"Lambda: {cost.on_demand_gb_s.source}", f"requests: {cost.request.source}"]
        if cdk_json:
            try:
                from pathlib import Path

                from infra.config import load_config

                config = load_config(Path(cdk_json))
                gpu_type = config.gpu_endpoint.instance_type
                key = "sagemaker_" + gpu_type.replace(".", "_").replace("-", "_") + "_hour"
                price = config.pricing.price(key)
                gpu_usd = price.usd
                sources.append(f"GPU endpoint {gpu_type}: {price.source}")
            except Exception as exc:  # noqa: BLE001 - a missing price is reported, not fatal
                sources.append(f"GPU endpoint price unavailable ({type(exc).__name__}: {exc})")
        from warmers.pricing import load_prices

        table = load_prices()
        cache, restore = table.price("snapstart_cache_gb_s"), table.price("snapstart_restore_gb")
        sources.append(f"SnapStart cache and restore: {cache.source}")
        return cls(cost.on_demand_gb_s.usd, cost.pc_configured_gb_s.usd,
                   cost.pc_duration_gb_s.usd, cost.request.usd, gpu_usd, gpu_type, tuple(sources),
                   snapstart_cache_gb_s=cache.usd, snapstart_restore_gb=restore.usd)


@dataclass(frozen=True)
class EndpointUsage:
    """The planned GPU endpoint (an inference component) over one slice.

    Attributes
    ----------
    copy_hours : float
        Copies asked for, integrated over the slice, in trace hours (billed: a scale-out is
        billed from its request, provisioning included, until the scale-in).
    max_in_service : int
        Most copies answering at once during the slice.
    ordered_at_min : float
        Trace minutes from the slice start to the first request of a copy (negative: before
        the slice; NaN: none asked for).
    in_service_at_min : float
        Trace minutes from the slice start to the first copy in service (NaN: never).
    published_in_service_at_min : float
        Trace minutes from the slice start to the warmer's first published ``in_service``
        state, from when the handlers may overflow (NaN: never).
    states : tuple of (float, str, int)
        Every published state: (trace seconds from the slice start, state, copies).
    planned : tuple of (float, int)
        Every endpoint plan: (trace seconds from the slice start, copies asked for).
    reason : str
        The last plan's reason.
    """

    copy_hours: float
    max_in_service: int
    ordered_at_min: float
    in_service_at_min: float
    published_in_service_at_min: float
    states: tuple[tuple[float, str, int], ...] = ()
    planned: tuple[tuple[float, int], ...] = ()
    reason: str = ""


def endpoint_usage(history: Sequence[Mapping[str, Any]], wall_t0: float, wall_end: float,
                   time_scale: float, *,
                   published: Sequence[tuple[float, str, int]] = (),
                   planned: Sequence[tuple[float, int]] = (), reason: str = "") -> EndpointUsage:
    """Summarize the endpoint's capacity history over the slice ``[wall_t0, wall_end]``.

    Parameters
    ----------
    history : sequence of mapping
        The server's ``GET /_capacity`` ``history``: ``{"at": epoch s (real), "desired": n,
        "in_service": n}`` per change, in time order; each holds until the next.
    wall_t0, wall_end : float
        Real epoch seconds of the slice's start and end.
    time_scale : float
        Trace seconds per real second.
    published, planned : sequences
        The warmer's published states and plans, in trace seconds from the slice start.
    reason : str

    Returns
    -------
    EndpointUsage

    Raises
    ------
    ValueError
        If ``wall_end < wall_t0``, ``time_scale <= 0`` or a history row lacks a number.
    """
    if wall_end < wall_t0 or not time_scale > 0:
        raise ValueError("need wall_end >= wall_t0 and time_scale > 0")
    rows = []
    for row in history:
        try:
            rows.append((float(row["at"]), int(row["desired"]), int(row["in_service"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"capacity history row {row!r}: {exc}") from None
    rows.sort(key=lambda r: r[0])
    copy_s = 0.0
    most = 0
    ordered = serving = math.nan
    for k, (at, desired, in_service) in enumerate(rows):
        until = rows[k + 1][0] if k + 1 < len(rows) else wall_end
        lo, hi = max(at, wall_t0), min(until, wall_end)
        if hi > lo:
            copy_s += desired * (hi - lo)
            most = max(most, in_service)
        rel_min = (at - wall_t0) * time_scale / 60.0
        if desired >= 1 and math.isnan(ordered) and at <= wall_end:
            ordered = rel_min
        if in_service >= 1 and math.isnan(serving) and at <= wall_end:
            serving = rel_min
    seen = next((t / 60.0 for t, state, n in published if state == "in_service" and n >= 1),
                math.nan)
    return EndpointUsage(copy_s * time_scale / 3600.0, most, ordered, serving, seen,
                         tuple(published), tuple(planned), reason)


@dataclass(frozen=True)
class RunSummary:
    """One replay run's measured results (see the module docstring for definitions)."""

    label: str
    requests: int
    answered: int
    ok: int
    cold_starts: int
    init_p50_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    sla_ms: float
    sla_breaches: int
    overflowed: int
    degraded: int
    shed: int
    errors: int
    throttled: int
    spillover: int
    warm_pings: int
    provisioned_gb_s: float
    invocation_gb_s: float
    gpu_endpoint_hours: float
    lambda_usd: float
    gpu_usd: float
    client_lag_p99_ms: float
    tool_honoured: int
    tool_requested: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    failed_answers: int = 0
    late: int = 0
    tail: int = 0
    pc_usd: float = 0.0
    pc_max: int = 0
    pc_raises: int = 0
    cold_overflowed: int = 0
    cold_overflow_p50_ms: float = float("nan")
    overflow_p50_ms: float = float("nan")
    overflow_call_p50_ms: float = float("nan")
    sim_cold_starts: float = float("nan")
    cold_degraded: int = 0
    endpoint: EndpointUsage | None = None
    snapstart_usd: float = 0.0
    restores: int = 0
    streamed: int = 0
    ttfb_p50_ms: float = float("nan")
    ttfb_p95_ms: float = float("nan")

    @property
    def endpoint_copies_max(self) -> float:
        """Most GPU endpoint copies in service (NaN: always on, not planned)."""
        return float(self.endpoint.max_in_service) if self.endpoint else math.nan

    @property
    def endpoint_ordered_at_min(self) -> float:
        return self.endpoint.ordered_at_min if self.endpoint else math.nan

    @property
    def endpoint_serving_at_min(self) -> float:
        return self.endpoint.published_in_service_at_min if self.endpoint else math.nan

    @property
    def usd(self) -> float:
        return self.lambda_usd + self.gpu_usd

    @property
    def ondemand_usd(self) -> float:
        """Lambda without provisioned concurrency or SnapStart: requests and on-demand GB-s."""
        return self.lambda_usd - self.pc_usd - self.snapstart_usd


ReplayOutcome = str
#: What :func:`outcome` can say of one request (``failed`` ones are the failed answers).
FAILED_OUTCOMES = ("late", "degraded", "shed", "error")


def outcome(record: ClientRecord, sla_ms: float) -> ReplayOutcome:
    """How one request ended, by the module's definitions: ``error`` (no answer, or a server
    error that is not a graceful shed), ``degraded``, ``shed``, ``late`` (answered after the SLA
    although its work met it), ``tail`` (work alone over the SLA, answered) or ``ok``. The
    first four are failed answers (:data:`FAILED_OUTCOMES`)."""
    graceful = record.path in GRACEFUL_PATHS
    if record.status == 0 or (record.status >= 500 and not graceful):
        return "error"
    if _degraded(record):
        return "degraded"
    if record.path == "shed":
        return "shed"
    if record.latency_ms > sla_ms:
        return "tail" if record.tool_ms > sla_ms else "late"
    return "ok"


@dataclass(frozen=True)
class CostPerAvoided:
    """What ``on`` paid per failed answer it avoided against ``off``.

    Attributes
    ----------
    avoided : int
        ``off`` failed answers less ``on``'s (negative: ``on`` failed more).
    extra_usd : float
        ``on`` USD less ``off`` USD (negative: ``on`` was cheaper).
    usd_per_avoided : float
        ``extra_usd / avoided`` when ``avoided > 0`` (negative: each avoided failed answer also
        saved money), else NaN (no ratio: none avoided, or more failed).
    """

    avoided: int
    extra_usd: float
    usd_per_avoided: float

    def words(self) -> str:
        """The ratio in words, its sign and the no-ratio cases said plainly."""
        more = (f"${self.extra_usd:.4f} more" if self.extra_usd >= 0
                else f"${-self.extra_usd:.4f} less")
        if self.avoided > 0:
            each = "failed answer" if self.avoided == 1 else "failed answers"
            if self.usd_per_avoided >= 0:
                return (f"${self.usd_per_avoided:.4f} per avoided failed answer ({more} for "
                        f"{self.avoided} {each} avoided)")
            return (f"nothing paid per avoided failed answer: 'on' avoided {self.avoided} "
                    f"{each} and cost {more} (a saving of ${-self.usd_per_avoided:.4f} per "
                    "avoided failed answer)")
        if self.avoided == 0:
            return (f"no failed answer avoided, so no USD per avoided failed answer: 'on' failed "
                    f"as many as 'off' and cost {more}")
        return (f"no USD per avoided failed answer: 'on' failed {-self.avoided} more "
                f"answer{'s' * (self.avoided != -1)} than 'off' and cost {more}")


def cost_per_avoided(off: RunSummary, on: RunSummary) -> CostPerAvoided:
    """``(on USD - off USD) / (off failed - on failed)``, see :class:`CostPerAvoided`."""
    avoided = off.failed_answers - on.failed_answers
    extra = on.usd - off.usd
    ratio = extra / avoided if avoided > 0 else math.nan
    return CostPerAvoided(avoided, extra, ratio)


def _degraded(r: ClientRecord) -> bool:
    """Answered degraded: the ``X-Warmstart-Path`` header, or the body's ``"degraded": true``
    (an overflowed answer's body flag is the endpoint's, not a degradation)."""
    return r.path == "degraded" or bool(r.degraded_body and r.path != "overflow")


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.shape[0] else float("nan")


def provisioned_gb_s(samples: Sequence[StateSample], memory_mb: int) -> float:
    """Integral of allocated provisioned environments over the stack clock, times GB.

    Left Riemann sum over the samples (each value holds until the next sample).
    """
    if len(samples) < 2:
        return 0.0
    t = np.array([s.t_s for s in samples])
    alloc = np.array([s.pc_allocated for s in samples], dtype=float)
    return float(np.sum(alloc[:-1] * np.diff(t)) * memory_mb / 1024.0)


def summarize(label: str, records: Sequence[ClientRecord],
              observations: dict[str, InvocationObservation] | None,
              samples: Sequence[StateSample], *, memory_mb: int, sla_ms: float,
              time_scale: float, prices: Prices, gpu_endpoint_up: bool, slice_minutes: int,
              notes: Sequence[str] = (),
              direct: Sequence[InvocationObservation] = (),
              planned_pc: Sequence[int] = (),
              endpoint: EndpointUsage | None = None,
              snap_start: bool = False) -> RunSummary:
    """Build the table row of one run.

    Parameters
    ----------
    records : sequence of ClientRecord
        Every request sent.
    observations : dict, optional
        Gateway request id -> the emulator's record (None for an attached stack).
    samples : sequence of StateSample
        Sampled provisioned concurrency (empty for an attached stack).
    memory_mb : int
        Function memory.
    sla_ms : float
        The route's SLA (real ms).
    time_scale : float
        Trace seconds per real second.
    prices : Prices
    gpu_endpoint_up : bool
        The GPU endpoint ran during the slice (its hours are charged: the whole slice, or with
        ``endpoint`` its copy-hours).
    slice_minutes : int
        Trace minutes replayed.
    direct : sequence of InvocationObservation
        Invocations during the slice that did not come through the gateway (warm pings): their
        requests and durations are charged too.
    planned_pc : sequence of int
        Provisioned concurrency of each warmer plan, in order (those made before the slice
        too): ``pc_raises`` counts the plans that raised it (from 0 before the first).
    endpoint : EndpointUsage, optional
        The planned endpoint's copies over the slice (None: always on, one instance).
    snap_start : bool
        The function ran with SnapStart: its snapshot cache is charged for the slice (trace
        seconds x GB; AWS bills at least 3 h per cache, which a slice does not prorate) and each
        restore per GB.
    """
    answered = [r for r in records if r.status]
    lat = np.array([r.latency_ms for r in answered], dtype=float)
    ttfb = np.array([r.first_byte_ms for r in answered if r.streamed], dtype=float)
    obs = [observations.get(r.gateway_request_id) for r in records] if observations is not None \
        else [None] * len(records)
    if observations is not None:
        cold = [o for o in obs if o is not None and o.cold_start]
        cold_starts = len(cold)
        init_ms = np.array([o.init_duration_ms or o.restore_duration_ms or 0.0 for o in cold])
    else:
        cold_starts = sum(1 for r in answered if "init" in r.server_timing_ms)
        init_ms = np.array([r.server_timing_ms["init"] for r in answered
                            if "init" in r.server_timing_ms])
    breaches = errors = late = tail = failed_answers = 0
    for r in records:
        end = outcome(r, sla_ms)
        errors += end == "error"
        tail += r.tool_ms > sla_ms
        late += end == "late"
        failed_answers += end in FAILED_OUTCOMES
        if end == "error" or r.latency_ms > sla_ms:
            breaches += 1
    gb = memory_mb / 1024.0
    inv_gb_s = od_gb_s = pcd_gb_s = 0.0
    for o in [*obs, *direct]:
        if o is None:
            continue
        value = o.billed_duration_ms / 1000.0 * time_scale * gb
        inv_gb_s += value
        if o.init_type == "provisioned-concurrency":
            pcd_gb_s += value
        else:
            od_gb_s += value
    pc_gb_s = provisioned_gb_s(samples, memory_mb)
    pc_usd = pc_gb_s * prices.pc_configured_gb_s + pcd_gb_s * prices.pc_duration_gb_s
    restores = sum(1 for o in obs if o is not None and o.cold_start
                   and o.init_type == "snap-start") if snap_start else 0
    snapstart_usd = (slice_minutes * 60.0 * gb * prices.snapstart_cache_gb_s
                     + restores * gb * prices.snapstart_restore_gb) if snap_start else 0.0
    lambda_usd = ((len(answered) + len(direct)) * prices.request + od_gb_s * prices.on_demand_gb_s
                  + pc_usd + snapstart_usd)
    planned = [0, *planned_pc]
    pc_raises = sum(1 for a, b in itertools.pairwise(planned) if b > a)
    overflowed = [(r, o) for r, o in zip(records, obs) if r.path == "overflow" and r.status]
    cold_over = np.array([r.latency_ms for r, o in overflowed if o is not None and o.cold_start])
    over_ms = np.array([r.latency_ms for r, _ in overflowed])
    call_ms = np.array([r.server_timing_ms["overflow"] for r, _ in overflowed
                        if "overflow" in r.server_timing_ms])
    gpu_hours = 0.0
    if gpu_endpoint_up:
        gpu_hours = endpoint.copy_hours if endpoint is not None else slice_minutes / 60.0
    cold_degraded = sum(1 for r, o in zip(records, obs) if o is not None and o.cold_start
                        and _degraded(r))
    gpu_usd = gpu_hours * (prices.gpu_instance_hour or 0.0)
    lag = np.array([r.sent_s - r.planned_s for r in records]) * 1000.0
    local = [(r, o) for r, o in zip(records, obs) if r.path == "local" and r.tool_ms >= 5.0]
    honoured = sum(1 for r, o in local if "tool" in r.server_timing_ms
                   or (o is not None and o.duration_ms >= 0.9 * r.tool_ms))
    return RunSummary(
        label=label, requests=len(records), answered=len(answered),
        ok=sum(1 for r in answered if 200 <= r.status < 300), cold_starts=cold_starts,
        init_p50_ms=_pct(init_ms, 50), p50_ms=_pct(lat, 50), p95_ms=_pct(lat, 95),
        p99_ms=_pct(lat, 99), sla_ms=sla_ms, sla_breaches=breaches,
        overflowed=sum(1 for r in records if r.path == "overflow"),
        degraded=sum(1 for r in records if _degraded(r)),
        shed=sum(1 for r in records if r.path == "shed"), errors=errors,
        throttled=sum(1 for o in obs if o is not None and o.throttled),
        spillover=sum(1 for o in obs if o is not None and o.spillover),
        warm_pings=sum(1 for o in direct if o.warm_ping),
        provisioned_gb_s=pc_gb_s, invocation_gb_s=inv_gb_s, gpu_endpoint_hours=gpu_hours,
        lambda_usd=lambda_usd, gpu_usd=gpu_usd,
        client_lag_p99_ms=_pct(lag, 99) if lag.shape[0] else float("nan"),
        tool_honoured=honoured, tool_requested=len(local), notes=tuple(notes),
        failed_answers=failed_answers, late=late, tail=tail, pc_usd=pc_usd,
        pc_max=max((s.pc_allocated for s in samples), default=0), pc_raises=pc_raises,
        cold_overflowed=int(cold_over.shape[0]), cold_overflow_p50_ms=_pct(cold_over, 50),
        overflow_p50_ms=_pct(over_ms, 50),
        overflow_call_p50_ms=_pct(call_ms, 50), cold_degraded=cold_degraded,
        endpoint=endpoint, snapstart_usd=snapstart_usd, restores=restores,
        streamed=int(ttfb.shape[0]), ttfb_p50_ms=_pct(ttfb, 50), ttfb_p95_ms=_pct(ttfb, 95))


def _fmt(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


ROWS: tuple[tuple[str, str], ...] = (
    ("requests", "requests sent"),
    ("answered", "answered (HTTP response)"),
    ("cold_starts", "cold starts"),
    ("restores", "of which SnapStart restores"),
    ("init_p50_ms", "cold-start init p50 (ms, REPORT)"),
    ("p50_ms", "latency p50 (ms, real)"),
    ("p95_ms", "latency p95 (ms, real)"),
    ("p99_ms", "latency p99 (ms, real)"),
    ("failed_answers", "failed answers (late + degraded + shed + errors)"),
    ("late", "late (work within the SLA, answered after it)"),
    ("degraded", "degraded"),
    ("shed", "shed"),
    ("errors", "errors (5xx / no answer)"),
    ("tail", "tail: work alone over the SLA (apart)"),
    ("overflowed", "overflowed"),
    ("overflow_p50_ms", "overflowed answer p50 (ms, real, from sending)"),
    ("cold_overflowed", "cold starts answered by overflow"),
    ("cold_overflow_p50_ms", "cold starts' overflowed answer p50 (ms, real)"),
    ("cold_degraded", "cold starts answered degraded"),
    ("overflow_call_p50_ms", "overflow call alone p50 (ms, Server-Timing overflow)"),
    ("sim_cold_starts", "cold starts, warmstart simulate (same slice)"),
    ("pc_max", "provisioned concurrency, most allocated"),
    ("pc_raises", "provisioned concurrency raised by the warmer (times)"),
    ("spillover", "spillover (on-demand beyond PC)"),
    ("endpoint_ordered_at_min", "GPU endpoint copy asked for (slice min)"),
    ("endpoint_serving_at_min", "GPU endpoint in service, published (slice min)"),
    ("endpoint_copies_max", "GPU endpoint copies, most in service"),
    ("warm_pings", "warm pings (warmer, direct invokes)"),
    ("provisioned_gb_s", "provisioned GB-s"),
    ("invocation_gb_s", "invocation GB-s"),
    ("ondemand_usd", "Lambda USD: requests + on-demand"),
    ("pc_usd", "Lambda USD: provisioned concurrency"),
    ("snapstart_usd", "Lambda USD: SnapStart cache + restores"),
    ("gpu_usd", "GPU endpoint USD"),
    ("usd", "estimated USD"),
)
#: Shown after the latency rows when a run has streamed answers (:func:`summary_rows`).
STREAM_ROWS: tuple[tuple[str, str], ...] = (
    ("streamed", "streamed answers (chunked)"),
    ("ttfb_p50_ms", "time to first byte p50 (ms, real, streamed)"),
    ("ttfb_p95_ms", "time to first byte p95 (ms, real, streamed)"),
)


def summary_rows(summaries: Sequence[RunSummary]) -> tuple[tuple[str, str], ...]:
    """The table's rows: :data:`ROWS`, with :data:`STREAM_ROWS` after the latency
    percentiles when any run streamed."""
    if not any(s.streamed for s in summaries):
        return ROWS
    at = [attr for attr, _ in ROWS].index("p99_ms") + 1
    return (*ROWS[:at], *STREAM_ROWS, *ROWS[at:])


_DIGITS = {"endpoint_ordered_at_min": 1, "endpoint_serving_at_min": 1, "provisioned_gb_s": 1, "invocation_gb_s": 1, "lambda_usd": 5, "ondemand_usd": 5,
           "pc_usd": 5, "snapstart_usd": 5, "gpu_usd": 4, "usd": 4}


def summary_table(summaries: Sequence[RunSummary]) -> str:
    """The runs side by side as a fixed-width text table."""
    head = ["", *[s.label for s in summaries]]
    rows = [head]
    for attr, title in summary_rows(summaries):
        if attr == "late":
            title = (f"late (work within the SLA, answered after {summaries[0].sla_ms:,.0f} ms)"
                     if summaries else title)
        rows.append([title, *[_fmt(getattr(s, attr), _DIGITS.get(attr, 0)) for s in summaries]])
    return tables.fixed_width(rows)
