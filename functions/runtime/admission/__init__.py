"""SLA-aware admission: serve locally, overflow, degrade or shed (pure: no I/O, no clock).

`decide` picks the path of one request from its remaining SLA budget, its tier, the
execution environment's state, the overflow endpoint's state and the degradation level.
Times are passed in (``now_ms`` on the same clock as ``arrival_ms``), so the same code runs in
the handler, the unit tests and the policy simulator.

Definitions
-----------
``budget_ms = sla_ms - max(0, now_ms - arrival_ms) - policy.headroom_ms`` (remaining SLA
budget; the headroom covers what happens after the path answers: the response's way out and
scheduling stalls while a background preload holds the GIL).
``local_ms = env.load_remaining_ms + env.infer_p95_ms + request.downstream_ms`` (p95 time until
a local answer: 0 load when ready, the preload's remaining time when loading, the full p95 load
when not loaded; plus the downstream work the route declared for this request, e.g. a tool
call). ``overflow_ms = overflow.latency_p95_ms + request.downstream_ms`` (the overflow endpoint
does the same downstream work). ``degrade_ms = env.degrade_p95_ms`` (the degraded answer skips
the downstream work on purpose: that is what makes it cheaper).
The overflow endpoint is *usable* when configured, healthy and its breaker is closed, or
half-open with no probe running. A path *fits* when its p95 estimate <= ``budget_ms``
(equal fits; one ms over does not). Rows 4-8 are skipped for a path in ``exclude`` (paths
that already failed for this request, so a fallback never retries them).

Decision table (first matching row wins)
----------------------------------------
**Local first.** LOCAL is chosen whenever its own estimate fits: an answer that fits is never
traded for one that may not (issue 19: keeping a fallback reserve sent cold requests that local
serving answers in time to a shared endpoint whose queue then failed them). Its wait keeps the
richest fallback *reserve* that still fits after it: the whole chain (``overflow_ms`` + the
OVERFLOW reserve, when overflow is usable), else ``degrade_ms`` (degradable), else nothing.
OVERFLOW is chosen only when LOCAL does not fit, and only with its own reserve (``degrade_ms``
when the route is degradable, else 0). ``Decision.limit_ms`` bounds the path so the reserve
is kept: the preload wait for LOCAL, the call's budget for OVERFLOW.

**L3 sheds below P0 only.** A request the handler sees was admitted by Lambda (a throttled one
never reaches it), so shedding a P0 request turns an answer that fits into a failure; what L3
protects P0 with is the capacity P1 and P2 requests give back (L1: P2 off; L3: P1 shed too).
Before issue 19 L3 shed P0 as well: on the full-day Azure series that lost ~60,000 answers no
baseline lost. L2's precision cut still applies to every degradable route: it answers (the
route's declared cheaper answer) and frees capacity sooner.

===  ==========================================================  ========  ===================  ==============================
row  condition                                                   path      reason               retry_after_s / limit_ms
===  ==========================================================  ========  ===================  ==============================
1    level is L3 and tier is P1                                  SHED      level_shed           policy.level_retry_after_s
2    level >= L1 and tier is P2                                  SHED      feature_disabled     policy.level_retry_after_s
3    budget_ms <= 0                                              SHED      budget_exhausted     ceil(load_remaining_ms / 1000)
4    level is L2, route degradable, degrade_ms fits              DEGRADE   level_precision_cut  --
5    model ready and local_ms fits                               LOCAL     local_ready          limit 0 (no wait)
6    model loading / not loaded and local_ms fits                LOCAL     local_after_load     limit budget-local-reserve (*)
7    overflow usable and overflow_ms + reserve fits              OVERFLOW  overflow_fits        limit budget-reserve
7b   overflow usable, its client still being made, and the call  OVERFLOW  overflow_after_client limit budget-reserve (**)
     alone (overflow_ms - client_init_ms) + reserve fits
8    route degradable and degrade_ms fits                        DEGRADE   no_full_path_fits    --
9    otherwise                                                   SHED      no_path_fits         ceil(load_remaining_ms / 1000)
===  ==========================================================  ========  ===================  ==============================

(*) capped at ``env.wait_cap_ms`` when the reserve kept is the overflow chain: the load counts
a stage nobody measured, assumed to fit, and the wait for it is bounded (issue 20 item 2); a
cap of 0 (`functions.runtime.admission.state.UNKNOWN_STAGE_WAIT_MS`) skips row 6: the
request takes row 7, a full answer now, rather than wait for a stage whose length nobody knows.

(**) the overflow client being made in the preload (``OverflowState.client_init_ms``, the rest
of its p95) is waited for, bounded like row 6's wait for a stage: the call's deadline
(``limit_ms``) covers the client's creation, so a client slower than its median costs the
degraded answer the reserve still holds, not a breach; before this row a cold request at a
tight SLA was degraded at once whenever the client's p95 did not fit, though the client's
median (about half its p95, `functions.runtime.overflow.DEFAULT_CLIENT_INIT_P95_MS`) did
(issue 20: SLA 500 ms, 0 of 6 full answers). Only with a degrade reserve: a route that cannot
degrade has no answer to fall back on, so it keeps row 7's p95 rule.

``retry_after_s`` is at least ``policy.min_retry_after_s`` (1 s). Rows 3 and 9 tell the client
to come back when this environment's model should be loaded; rows 1-2 when the warmer can
next change the level (it runs every minute).

Properties the table guarantees (tested): a path whose p95 estimate exceeds the budget is
never chosen while another fits (SHED always fits: it costs nothing), except the bounded
waits (row 6's for a stage nobody measured, row 7b's for the overflow client), which always
keep the degraded answer's reserve; LOCAL is chosen
whenever it fits, so an on-demand cold start overflows only when the preload cannot finish in
time, and later requests on that environment run locally; when a LOCAL wait fails
(`functions.runtime.admission.flow.LocalUnavailable`) the reserve it kept is still there for
the fallback; P2 routes never run at L1+; a P0 request is never shed by the level.

References
----------
Lambda execution environment lifecycle (init phase, on-demand cold start):
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
HTTP API payload 2.0 (``requestContext.timeEpoch``):
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
Nearest-rank percentile: https://en.wikipedia.org/wiki/Percentile#The_nearest-rank_method
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from functions.runtime.breaker import BreakerState
from functions.runtime.contract.levels import Level, parse_level
from functions.runtime.events import MAX_EVENT_AGE_MS
from functions.runtime.routes import TIERS, Tier

#: p95 seeds used until measured, in ms. From DESIGN.md "Facts" (fresh process, 1 thread):
#: fastapi+mangum+onnxruntime+boto3 imports 780 ms median, int8 session ~130 ms, tokenizer;
#: ~1,000 ms median in all, x1.5 for a p95 on a shared host.
DEFAULT_LOAD_P95_MS = 1500.0
#: One sentence ~2.8 ms (int8, 1 thread); the first inference and the web stack add tens of ms.
DEFAULT_INFER_P95_MS = 50.0
#: p95 of one overflow call before any was measured, ms. The endpoint's latency is unknown to
#: the toolkit (its instance, model and network are the deployment's), so it is assumed to fit
#: until measured, with a bounded wait: OVERFLOW's ``limit_ms`` keeps the degraded answer's
#: reserve, and the client stops at that deadline (issue 20 item 2). 50 ms is the smallest
#: per-attempt timeout the client gives a call (`functions.runtime.overflow.TIMEOUT_BUCKETS_S`),
#: the least budget worth a call; the first measured call replaces it
#: (`LatencyTracker`: max(seed, observed) until 5 samples). Client creation is counted apart
#: (`functions.runtime.overflow.DEFAULT_CLIENT_INIT_P95_MS`). Was 300 ms (boto3 import +
#: client + one round trip) before the client moved to awscrt.
DEFAULT_OVERFLOW_P95_MS = 50.0
#: Lexical fallback (no model): ~2-5 ms warm; 60-75 ms measured for the first one in a cold
#: process under CPU contention (bench/bench_cold_start_sla.py), hence 50 ms.
DEFAULT_DEGRADE_P95_MS = 50.0


class Path(StrEnum):
    """Where a request goes (``X-Warmstart-Path`` uses `header_value`)."""

    LOCAL = "LOCAL"
    OVERFLOW = "OVERFLOW"
    DEGRADE = "DEGRADE"
    SHED = "SHED"

    @property
    def header_value(self) -> str:
        """``local`` | ``overflow`` | ``degraded`` | ``shed``."""
        return {"LOCAL": "local", "OVERFLOW": "overflow", "DEGRADE": "degraded",
                "SHED": "shed"}[self.value]


class Reason(StrEnum):
    """Why `decide` picked its path (one per table row)."""

    LEVEL_SHED = "level_shed"
    FEATURE_DISABLED = "feature_disabled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    LEVEL_PRECISION_CUT = "level_precision_cut"
    LOCAL_READY = "local_ready"
    LOCAL_AFTER_LOAD = "local_after_load"
    OVERFLOW_FITS = "overflow_fits"
    OVERFLOW_AFTER_CLIENT = "overflow_after_client"
    NO_FULL_PATH_FITS = "no_full_path_fits"
    NO_PATH_FITS = "no_path_fits"


class ModelState(StrEnum):
    """State of the local model in this execution environment."""

    READY = "ready"
    LOADING = "loading"
    NOT_LOADED = "not_loaded"


def _check_ms(name: str, value: float, *, allow_negative: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of ms, got {type(value).__name__}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if not allow_negative and value < 0:
        raise ValueError(f"{name} must be >= 0 ms, got {value}")


@dataclass(frozen=True)
class RequestInfo:
    """The request as admission sees it.

    Parameters
    ----------
    route : str
        Route path (for logs and messages).
    tier : {"P0", "P1", "P2"}
        `functions.runtime.routes.Tier`.
    sla_ms : float
        Latency SLA in ms from arrival, > 0 (`default_sla_ms` when the route declares none).
    arrival_ms : float
        When the SLA clock started (epoch ms; see `arrival_ms_from_event`).
    degradable : bool
        The route has a cheaper answer (DEGRADE is possible).
    downstream_ms : float
        Downstream work (a tool call, a database lookup) the full answer (local or overflow)
        spends besides the app's own compute, ms, from the route's ``downstream_ms`` hook
        (`functions.runtime.agent.Route`); 0 when none. The degraded answer skips it.

    Raises
    ------
    ValueError
        Unknown tier, non-positive SLA, non-finite or negative times.
    """

    route: str
    tier: Tier
    sla_ms: float
    arrival_ms: float
    degradable: bool = False
    downstream_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"unknown tier {self.tier!r}: use one of {', '.join(TIERS)}")
        _check_ms("sla_ms", self.sla_ms)
        if self.sla_ms <= 0:
            raise ValueError(f"sla_ms must be > 0 ms, got {self.sla_ms}")
        _check_ms("arrival_ms", self.arrival_ms, allow_negative=True)
        _check_ms("downstream_ms", self.downstream_ms)


@dataclass(frozen=True)
class EnvState:
    """This execution environment's ability to answer locally.

    Parameters
    ----------
    model_state : ModelState
    load_remaining_ms : float
        p95 time until the model is ready, ms: 0 when ready; the preload's remaining estimate
        (`estimate_load_remaining_ms`) when loading; the full p95 load when not loaded.
    infer_p95_ms : float
        p95 of a local answer once loaded (web stack + inference), ms.
    degrade_p95_ms : float
        p95 of the cheaper (degraded) answer, ms.
    wait_cap_ms : float
        Longest a LOCAL wait may last while the overflow path is kept as its fallback, ms
        (default: unbounded). Set when ``load_remaining_ms`` counts a stage nobody measured
        (assumed to fit): the wait for it is bounded, then the request overflows with its
        reserve intact (issue 20 item 2); 0 (the handler's,
        `functions.runtime.admission.state.UNKNOWN_STAGE_WAIT_MS`): no LOCAL wait, the
        request overflows at once. With only the degraded answer as fallback the wait is not
        capped: waiting is then the only way to a full answer.

    Raises
    ------
    ValueError
        Negative or non-finite times (``wait_cap_ms`` may be infinite).
    """

    model_state: ModelState
    load_remaining_ms: float = 0.0
    infer_p95_ms: float = DEFAULT_INFER_P95_MS
    degrade_p95_ms: float = DEFAULT_DEGRADE_P95_MS
    wait_cap_ms: float = math.inf

    def __post_init__(self) -> None:
        if not isinstance(self.model_state, ModelState):
            object.__setattr__(self, "model_state", ModelState(self.model_state))
        _check_ms("load_remaining_ms", self.load_remaining_ms)
        _check_ms("infer_p95_ms", self.infer_p95_ms)
        _check_ms("degrade_p95_ms", self.degrade_p95_ms)
        if self.wait_cap_ms != math.inf:
            _check_ms("wait_cap_ms", self.wait_cap_ms)

    @property
    def local_ms(self) -> float:
        """p95 estimate of a local answer from now, ms (load left + inference)."""
        load = 0.0 if self.model_state is ModelState.READY else self.load_remaining_ms
        return load + self.infer_p95_ms


@dataclass(frozen=True)
class OverflowState:
    """The overflow (GPU) endpoint as admission sees it.

    Parameters
    ----------
    configured : bool
        An endpoint name is configured.
    healthy : bool
        Last known health (False e.g. after a failure in this same request).
    breaker : BreakerState
    latency_p95_ms : float
        p95 of an overflow call including the client, ms.
    probe_in_flight : bool
        Half-open breaker already running its one probe.
    client_init_ms : float
        The part of ``latency_p95_ms`` that is the client still to be made (the rest of its
        p95 while the preload builds it), ms; 0 once a client exists. Must not exceed
        ``latency_p95_ms``. Row 7b of the decision table waits for it, bounded.
    """

    configured: bool
    healthy: bool = True
    breaker: BreakerState = BreakerState.CLOSED
    latency_p95_ms: float = DEFAULT_OVERFLOW_P95_MS
    probe_in_flight: bool = False
    client_init_ms: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.breaker, BreakerState):
            object.__setattr__(self, "breaker", BreakerState(self.breaker))
        _check_ms("latency_p95_ms", self.latency_p95_ms)
        _check_ms("client_init_ms", self.client_init_ms)
        if self.client_init_ms > self.latency_p95_ms:
            raise ValueError(f"client_init_ms ({self.client_init_ms}) is part of latency_p95_ms "
                             f"({self.latency_p95_ms}) and cannot exceed it")

    @property
    def usable(self) -> bool:
        """Configured, healthy, and the breaker lets a call through."""
        if not (self.configured and self.healthy):
            return False
        if self.breaker is BreakerState.OPEN:
            return False
        return not (self.breaker is BreakerState.HALF_OPEN and self.probe_in_flight)


NO_OVERFLOW = OverflowState(configured=False, healthy=False)


@dataclass(frozen=True)
class AdmissionPolicy:
    """Tunables of `decide`.

    Parameters
    ----------
    level_retry_after_s : int
        ``Retry-After`` for level-driven sheds (rows 1-2): the warmer re-evaluates the level
        every minute (EventBridge Scheduler, 1-minute rate), so 60 s.
    min_retry_after_s : int
        Lower bound of any ``Retry-After`` (RFC 9110 allows 0; 1 s avoids hot retry loops).
    headroom_ms : float
        Kept back from every budget, ms (default 0: the table's exact arithmetic). Handlers
        should use `HANDLER_HEADROOM_MS`.
    baseline : bool
        The plain on-demand baseline ("warmstart off", ``WARMSTART_ADMISSION=off``): the
        level and the SLA budget are ignored; LOCAL always (``local_ready``, or
        ``local_after_load`` with an unbounded wait: the handler bounds it by the invocation's
        remaining time); once LOCAL failed (the model did not load), SHED ``no_path_fits``.
        Never OVERFLOW or DEGRADE. `BASELINE_POLICY`.

    References
    ----------
    EventBridge Scheduler rate expressions (minimum 1 minute):
    https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html
    """

    level_retry_after_s: int = 60
    min_retry_after_s: int = 1
    headroom_ms: float = 0.0
    baseline: bool = False

    def __post_init__(self) -> None:
        _check_ms("headroom_ms", self.headroom_ms)
        if self.min_retry_after_s < 0 or self.level_retry_after_s < self.min_retry_after_s:
            raise ValueError(
                "need 0 <= min_retry_after_s <= level_retry_after_s, got "
                f"{self.min_retry_after_s} and {self.level_retry_after_s}"
            )


DEFAULT_POLICY = AdmissionPolicy()
#: Headroom for handlers, ms: in bench/bench_cold_start_sla.py under heavy CPU contention a
#: fallback planned to finish at the SLA finished up to ~90 ms late (the request thread waits
#: for the GIL while the preload thread is inside C calls such as session creation).
HANDLER_HEADROOM_MS = 100.0
HANDLER_POLICY = AdmissionPolicy(headroom_ms=HANDLER_HEADROOM_MS)
#: ``WARMSTART_ADMISSION=off``: the plain on-demand baseline (see `AdmissionPolicy.baseline`).
BASELINE_POLICY = AdmissionPolicy(headroom_ms=HANDLER_HEADROOM_MS, baseline=True)

#: How long before a request's SLA deadline the handler stops waiting for its preload after an
#: overflowed or degraded cold answer (``WARMSTART_FINISH_PRELOAD``), ms: twice the handler
#: headroom. The wait is optional work and must never break the SLA; waking from it under CPU
#: contention overran one headroom (20 concurrent cold starts on 2 cores, ``bench emulator``).
FINISH_PRELOAD_MARGIN_MS = 2.0 * HANDLER_HEADROOM_MS


@dataclass(frozen=True)
class Decision:
    """What to do with one request.

    Parameters
    ----------
    path : Path
    reason : Reason
        The decision-table row that matched.
    budget_ms : int
        Remaining SLA budget at decision time, less the policy's headroom, ms (floor; may be
        <= 0).
    retry_after_s : int or None
        Seconds for ``Retry-After`` (SHED only).
    estimate_ms : float
        p95 estimate of the chosen path, ms (0 for SHED).
    limit_ms : float
        How long the path may take before giving up so that its fallback still fits, ms.
        LOCAL: the longest wait for the preload (0 when the model is ready); OVERFLOW: the
        overflow call's budget; 0 otherwise.
    """

    path: Path
    reason: Reason
    budget_ms: int
    retry_after_s: int | None = None
    estimate_ms: float = 0.0
    limit_ms: float = 0.0


def remaining_budget_ms(request: RequestInfo, now_ms: float) -> float:
    """``sla_ms - max(0, now_ms - arrival_ms)``, in ms (negative when the SLA is gone)."""
    _check_ms("now_ms", now_ms, allow_negative=True)
    return request.sla_ms - max(0.0, now_ms - request.arrival_ms)


def decide(
    request: RequestInfo,
    env: EnvState,
    overflow: OverflowState,
    level: Level | str,
    now_ms: float,
    *,
    policy: AdmissionPolicy = DEFAULT_POLICY,
    exclude: frozenset[Path] = frozenset(),
) -> Decision:
    """Pick LOCAL, OVERFLOW, DEGRADE or SHED for one request (module docstring's table).

    Parameters
    ----------
    request : RequestInfo
    env : EnvState
    overflow : OverflowState
        Use `NO_OVERFLOW` when no endpoint is configured.
    level : Level or str
        Degradation level (``"L0"`` .. ``"L3"``).
    now_ms : float
        Now, on the clock of ``request.arrival_ms`` (epoch ms).
    policy : AdmissionPolicy
    exclude : frozenset of Path
        Paths already tried and failed for this request (e.g. OVERFLOW after a timeout):
        their rows are skipped. SHED cannot be excluded.

    Returns
    -------
    Decision

    Raises
    ------
    ValueError
        Unknown level, non-finite ``now_ms``, or SHED in ``exclude``.
    """
    if Path.SHED in exclude:
        raise ValueError("SHED cannot be excluded: it is the path that always fits")
    lvl = parse_level(level)
    budget = remaining_budget_ms(request, now_ms) - policy.headroom_ms
    budget_ms = math.floor(budget)

    def shed(reason: Reason, retry_s: int) -> Decision:
        return Decision(Path.SHED, reason, budget_ms, max(policy.min_retry_after_s, retry_s), 0.0)

    def come_back_s() -> int:
        wait_ms = 0.0 if env.model_state is ModelState.READY else env.load_remaining_ms
        return math.ceil(wait_ms / 1000.0)

    if policy.baseline:
        return _baseline(env, budget_ms, exclude, policy)
    # rows 1-2: level policy
    if lvl is Level.L3 and request.tier == "P1":
        return shed(Reason.LEVEL_SHED, policy.level_retry_after_s)
    if lvl.rank >= Level.L1.rank and request.tier == "P2":
        return shed(Reason.FEATURE_DISABLED, policy.level_retry_after_s)
    # row 3: nothing can be answered in time
    if budget <= 0:
        return shed(Reason.BUDGET_EXHAUSTED, come_back_s())
    # row 4: precision cut at L2
    can_degrade = request.degradable and Path.DEGRADE not in exclude
    if lvl is Level.L2 and can_degrade and env.degrade_p95_ms <= budget:
        return Decision(Path.DEGRADE, Reason.LEVEL_PRECISION_CUT, budget_ms, None,
                        env.degrade_p95_ms)
    # rows 5-6: local fits (the downstream work runs on the local and overflow paths)
    downstream_ms = request.downstream_ms
    local_ms = env.local_ms + downstream_ms
    overflow_ms = overflow.latency_p95_ms + downstream_ms
    can_overflow = Path.OVERFLOW not in exclude and overflow.usable
    overflow_reserve = env.degrade_p95_ms if can_degrade else 0.0
    if Path.LOCAL not in exclude:
        if env.model_state is ModelState.READY:
            if local_ms <= budget:
                return Decision(Path.LOCAL, Reason.LOCAL_READY, budget_ms, None, local_ms, 0.0)
        elif local_ms <= budget:
            # local first: an answer that fits is never traded for one that may not (issue
            # 19). The wait keeps the richest fallback chain that still fits after it.
            reserve = 0.0
            for chain in _local_reserves(can_overflow, can_degrade, overflow_ms,
                                         overflow_reserve, env.degrade_p95_ms):
                if local_ms + chain <= budget:
                    reserve = chain
                    break
            wait = budget - env.infer_p95_ms - downstream_ms - reserve
            if can_overflow and reserve >= overflow_ms:  # a full answer is the fallback
                wait = min(wait, env.wait_cap_ms)
            if wait > 0.0 or env.wait_cap_ms > 0.0:
                return Decision(Path.LOCAL, Reason.LOCAL_AFTER_LOAD, budget_ms, None,
                                local_ms, wait)
            # capped to no wait (a stage nobody measured, the overflow at hand): row 7
    # row 7: overflow fits with the degrade reserve
    if can_overflow and overflow_ms + overflow_reserve <= budget:
        return Decision(Path.OVERFLOW, Reason.OVERFLOW_FITS, budget_ms, None,
                        overflow_ms, budget - overflow_reserve)
    # row 7b: the client is still being made; the call alone fits with the degrade reserve
    if (can_overflow and can_degrade and overflow.client_init_ms > 0
            and overflow_ms - overflow.client_init_ms + overflow_reserve <= budget):
        return Decision(Path.OVERFLOW, Reason.OVERFLOW_AFTER_CLIENT, budget_ms, None,
                        overflow_ms, budget - overflow_reserve)
    # row 8: cheaper answer fits
    if can_degrade and env.degrade_p95_ms <= budget:
        return Decision(Path.DEGRADE, Reason.NO_FULL_PATH_FITS, budget_ms, None,
                        env.degrade_p95_ms)
    # row 9
    return shed(Reason.NO_PATH_FITS, come_back_s())


def _local_reserves(can_overflow: bool, can_degrade: bool, overflow_ms: float,
                    overflow_reserve_ms: float, degrade_ms: float) -> tuple[float, ...]:
    """The fallback reserves a LOCAL wait may keep, richest first, ms: the whole chain
    (overflow then its degrade reserve), the degraded answer alone, nothing."""
    chains: list[float] = []
    if can_overflow:
        chains.append(overflow_ms + overflow_reserve_ms)
    if can_degrade:
        chains.append(degrade_ms)
    chains.append(0.0)
    return tuple(chains)


def _baseline(env: EnvState, budget_ms: int, exclude: frozenset[Path],
              policy: AdmissionPolicy) -> Decision:
    """`decide` under `AdmissionPolicy.baseline`: local, waiting as long as the invocation lasts."""
    if Path.LOCAL in exclude:
        return Decision(Path.SHED, Reason.NO_PATH_FITS, budget_ms, policy.min_retry_after_s, 0.0)
    if env.model_state is ModelState.READY:
        return Decision(Path.LOCAL, Reason.LOCAL_READY, budget_ms, None, env.local_ms, 0.0)
    return Decision(Path.LOCAL, Reason.LOCAL_AFTER_LOAD, budget_ms, None, env.local_ms, math.inf)


def ready_local_fits(
    tier: str,
    degradable: bool,
    level_rank: int,
    budget_ms: float,
    infer_p95_ms: float,
    policy: AdmissionPolicy = DEFAULT_POLICY,
    downstream_ms: float = 0.0,
) -> bool:
    """True when `decide` would pick LOCAL (row 5, ``local_ready``) for a READY environment.

    The handler's warm path: it answers "is this a plain local request?" with a few
    comparisons instead of building `RequestInfo` / `EnvState` / `Decision` (the toolkit's warm
    overhead budget is ~5% of a request). Rows 1-4 are checked in the same order; when this
    returns False the handler runs the full `decide`. A test checks it agrees with `decide`.

    Parameters
    ----------
    tier : {"P0", "P1", "P2"}
    degradable : bool
        The route has a cheaper answer.
    level_rank : int
        `Level.rank` of the degradation level, 0 .. 3.
    budget_ms : float
        ``sla_ms - max(0, now_ms - arrival_ms)``, ms (before the policy's headroom).
    infer_p95_ms : float
        p95 of a local answer, ms.
    policy : AdmissionPolicy
    downstream_ms : float
        The request's downstream work, ms (`RequestInfo.downstream_ms`).

    Returns
    -------
    bool
    """
    if policy.baseline:
        return True  # the on-demand baseline serves every request locally
    if (level_rank >= 3 and tier == "P1") or (level_rank >= 1 and tier == "P2"):
        return False  # rows 1-2
    budget = budget_ms - policy.headroom_ms
    if budget <= 0:
        return False  # row 3
    if level_rank == 2 and degradable:
        return False  # row 4 (the degraded answer fits whenever row 5 would)
    return infer_p95_ms + downstream_ms <= budget  # row 5


# --------------------------------------------------------------------------------------
# SLA defaults per tier

#: P1 default SLA as a multiple of the P0 SLA (a project choice, not an AWS figure).
P1_SLA_FACTOR = 2.5
#: P2 default SLA: 1 s under the 30 s HTTP API integration timeout.
DEFAULT_P2_SLA_MS = 29_000.0


def default_sla_ms(tier: Tier | str, p0_sla_ms: float) -> float:
    """Default SLA of a tier when the route declares none, ms.

    P0: ``p0_sla_ms`` (``WARMSTART_SLA_MS``, 2,000 ms by default); P1: 2.5 x that;
    P2: 29,000 ms (1 s under the HTTP API's 30 s integration timeout).

    Raises
    ------
    ValueError
        Unknown tier, or ``p0_sla_ms <= 0``.

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html
    """
    _check_ms("p0_sla_ms", p0_sla_ms)
    if p0_sla_ms <= 0:
        raise ValueError(f"p0_sla_ms must be > 0 ms, got {p0_sla_ms}")
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
    if tier == "P0":
        return float(p0_sla_ms)
    if tier == "P1":
        return float(p0_sla_ms) * P1_SLA_FACTOR
    return max(DEFAULT_P2_SLA_MS, float(p0_sla_ms))


# --------------------------------------------------------------------------------------
# Arrival time


def arrival_ms_from_event(event: Any, invocation_start_ms: float) -> float:
    """When the SLA clock of ``event`` started, epoch ms.

    HTTP API (payload 2.0) and function URL events carry ``requestContext.timeEpoch`` (ms);
    REST API (1.0) events ``requestContext.requestTimeEpoch``. Other events (direct invoke,
    ALB) start at ``invocation_start_ms``.

    Parameters
    ----------
    event : dict
        The Lambda event.
    invocation_start_ms : float
        Epoch ms when the handler was entered.

    Returns
    -------
    float
        ``min(timeEpoch, invocation_start_ms)`` (clock skew never moves arrival into the
        future); ``invocation_start_ms`` when the event has no usable epoch, or when it is
        more than `functions.runtime.events.MAX_EVENT_AGE_MS` (900 s, the longest Lambda
        timeout; the one event-age limit of the toolkit) old, which only
        replayed or sample events are.

    Raises
    ------
    ValueError
        Non-finite ``invocation_start_ms``.
    """
    _check_ms("invocation_start_ms", invocation_start_ms, allow_negative=True)
    if not isinstance(event, Mapping):
        return float(invocation_start_ms)
    ctx = event.get("requestContext")
    if not isinstance(ctx, Mapping):
        return float(invocation_start_ms)
    epoch = ctx.get("timeEpoch", ctx.get("requestTimeEpoch"))
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
        return float(invocation_start_ms)
    epoch_f = float(epoch)
    if math.isnan(epoch_f) or invocation_start_ms - epoch_f > MAX_EVENT_AGE_MS:
        return float(invocation_start_ms)
    return min(epoch_f, float(invocation_start_ms))


# --------------------------------------------------------------------------------------
# Measurements


class LatencyTracker:
    """Rolling p95 of observed latencies, seeded with a default until measured.

    Parameters
    ----------
    default_ms : float
        Value reported before any observation, ms.
    window : int
        Observations kept (the most recent), >= 1.
    min_samples : int
        Below this many observations the estimate is ``max(default_ms, max(observed))``
        (conservative); from then on the nearest-rank p95 of the window.
    refresh_every : int
        `p95_ms` is recomputed (a sort of the window) at most once per this many
        observations, >= 1 (1: exact after every observation). A handler that observes every
        warm request uses 8: the estimate lags at most 8 samples behind.

    Raises
    ------
    ValueError
        Bad window / min_samples / default, or a negative / non-finite observation.

    Notes
    -----
    No clock and no I/O; the handler calls `observe` after each measured call.
    """

    def __init__(self, default_ms: float, *, window: int = 64, min_samples: int = 5,
                 refresh_every: int = 1) -> None:
        _check_ms("default_ms", default_ms)
        if refresh_every < 1:
            raise ValueError(f"refresh_every must be >= 1, got {refresh_every}")
        self.refresh_every = refresh_every
        self._p95: float | None = None
        self._since_p95 = 0
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 1 <= min_samples <= window:
            raise ValueError(f"min_samples must be in 1..window ({window}), got {min_samples}")
        self.default_ms = float(default_ms)
        self.min_samples = min_samples
        self._values: deque[float] = deque(maxlen=window)

    def observe(self, value_ms: float) -> None:
        """Add one observation (ms)."""
        if type(value_ms) is not float or not 0.0 <= value_ms < math.inf:  # else: _check_ms's
            _check_ms("value_ms", value_ms)  # cases (a float in [0, inf) passes them all)
        self._values.append(float(value_ms))
        self._since_p95 += 1
        if self._since_p95 >= self.refresh_every or len(self._values) <= self.min_samples:
            self._p95 = None

    def extend(self, values_ms: Iterable[float]) -> None:
        """Add several observations (ms)."""
        for value in values_ms:
            self.observe(value)

    @property
    def count(self) -> int:
        """Observations in the window."""
        return len(self._values)

    def recent(self) -> tuple[float, ...]:
        """The window, oldest first (for ``/debug/resource``)."""
        return tuple(self._values)

    @property
    def p95_ms(self) -> float:
        """Current p95 estimate, ms (recomputed per ``refresh_every`` observations)."""
        p95 = self._p95
        if p95 is None:
            p95 = self._p95 = self.quantile_ms(0.95)
            self._since_p95 = 0
        return p95

    def quantile_ms(self, q: float) -> float:
        """Nearest-rank ``q`` quantile (0 < q <= 1) with the seeding rule above, ms."""
        if not 0.0 < q <= 1.0:
            raise ValueError(f"q must be in (0, 1], got {q}")
        if len(self._values) < self.min_samples:
            return max([self.default_ms, *self._values])
        ordered = sorted(self._values)
        rank = max(1, math.ceil(q * len(ordered)))
        return ordered[rank - 1]


# --------------------------------------------------------------------------------------
# Cold start: time until the background preload is done


@dataclass(frozen=True)
class StageProgress:
    """One stage of the background preload (e.g. ``import``, ``session``, ``tokenizer``).

    Parameters
    ----------
    name : str
    p95_ms : float
        p95 duration of the stage, ms (seed or measured on an earlier environment).
    started_ms : float or None
        Clock value when it started (None: not yet).
    finished_ms : float or None
        Clock value when it finished (None: not yet).
    """

    name: str
    p95_ms: float
    started_ms: float | None = None
    finished_ms: float | None = None

    def __post_init__(self) -> None:
        _check_ms(f"{self.name}.p95_ms", self.p95_ms)


def estimate_load_remaining_ms(
    stages: Sequence[StageProgress],
    now_ms: float,
    *,
    overrun_floor_fraction: float = 0.1,
) -> float:
    """p95 time until a preload of sequential ``stages`` is done, ms.

    Finished stages count 0; the running stage counts ``p95 - elapsed`` but at least
    ``overrun_floor_fraction x p95`` (a stage past its p95 is not about to finish for
    sure); stages not started count their full p95.

    Parameters
    ----------
    stages : sequence of StageProgress
    now_ms : float
        Same clock as the stages' timestamps.
    overrun_floor_fraction : float
        In [0, 1].

    Returns
    -------
    float
        Remaining ms, >= 0.

    Raises
    ------
    ValueError
        Fraction out of range, a stage finished before it started.
    """
    if not 0.0 <= overrun_floor_fraction <= 1.0:
        raise ValueError(f"overrun_floor_fraction must be in [0, 1], got {overrun_floor_fraction}")
    total = 0.0
    for stage in stages:
        if stage.finished_ms is not None:
            if stage.started_ms is not None and stage.finished_ms < stage.started_ms:
                raise ValueError(f"stage {stage.name!r} finished before it started")
            continue
        if stage.started_ms is None:
            total += stage.p95_ms
            continue
        elapsed = max(0.0, now_ms - stage.started_ms)
        total += max(stage.p95_ms - elapsed, overrun_floor_fraction * stage.p95_ms)
    return total
