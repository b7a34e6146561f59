"""What admission knows about one execution environment: route hooks, measured latencies, seeds.

`Admission` is built once per execution environment (in the toolkit's preload stage) and read
by the dispatcher on every request; the decision itself is the pure
`functions.runtime.admission.decide`. `RouteHooks` are a route's resolved hooks (declared with
`functions.runtime.agent.Route`).

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from functions.runtime.admission import (
    DEFAULT_DEGRADE_P95_MS,
    DEFAULT_INFER_P95_MS,
    HANDLER_POLICY,
    AdmissionPolicy,
    EnvState,
    LatencyTracker,
    ModelState,
    StageProgress,
    default_sla_ms,
    estimate_load_remaining_ms,
)
from functions.runtime.contract.levels import Level
from functions.runtime.overflow import DEFAULT_CLIENT_INIT_P95_MS, OverflowClient
from functions.runtime.preload import Preloader
from functions.runtime.routes import RouteSpec

__all__ = ["BUFFERED_STREAM_SUFFIX", "DEFAULT_STAGE_P95_MS", "UNKNOWN_STAGE_P95_MS", "UNKNOWN_STAGE_WAIT_MS", "Admission",
           "RouteHooks"]

#: p95 seeds of the toolkit's own preload stages, ms, used until this environment measures them
#: (issue 20 item 2: without a calibration a function starts from these, not from guesses about
#: the agent):
#:
#: - ``toolkit``: the toolkit stage (admission, dispatcher, hooks), 46 ms measured in a fresh
#:   process on the project's 2-core host, ~60 with admission, x1.3 for a p95, rounded up;
#: - ``overflow``: making the awscrt overflow client (import ``awscrt.auth``/``awscrt.http``
#:   and build the client), `functions.runtime.overflow.DEFAULT_CLIENT_INIT_P95_MS`;
#: - ``telemetry``: Powertools logger and metrics, 26 ms measured, x1.3 rounded up generously;
#: - ``level``: the first SSM read of the degradation level (boto3 import + client + one call).
#:
#: ``web`` (the agent's app and its imports) and ``model`` (the agent's model loader) are the
#: agent's: they come from ``Agent(stage_p95_ms={"web": ..., "model": ...})`` or a calibration;
#: a stage with no estimate is assumed to fit (:data:`UNKNOWN_STAGE_P95_MS`) until measured.
#:
#: References
#: ----------
#: bench/results/overflow_client.json (awscrt "client_ms", 15 fresh processes, 2026-12-02);
#: bench/results/bench_init.md (toolkit-only init of a fresh process).
DEFAULT_STAGE_P95_MS: dict[str, float] = {
    "toolkit": 100.0,
    "overflow": DEFAULT_CLIENT_INIT_P95_MS,
    "telemetry": 100.0,
    "level": 300.0,
}
#: p95 assumed for a stage nobody has measured or declared, ms: 0, i.e. it is assumed to fit,
#: so it never degrades a request by itself (issue 20 item 2; before it, an unknown stage
#: counted as the 1,400 ms model seed). The wait for it is bounded
#: (:data:`UNKNOWN_STAGE_WAIT_MS` with the overflow at hand; else the LOCAL wait keeps the
#: degraded answer's reserve), so a stage that turns out slow costs a fallback answer within
#: the SLA.
UNKNOWN_STAGE_P95_MS = 0.0
#: How long a cold request waits for a local answer whose load counts a stage nobody measured
#: or declared, when a full answer (the overflow call, its degrade reserve kept) is at hand, ms
#: (`functions.runtime.admission.EnvState.wait_cap_ms`): none, the request overflows at once.
#: Nothing says how long such a stage takes, so no wait for it is known to pay off, while the
#: overflow call's cost is known; the wait is also worse than its arithmetic: while a heavy
#: stage (an extension module's import, a model session) holds the GIL, a waiting request wakes
#: late. Measured in ``bench answer_first`` (12 cold starts per SLA, 2 cores) with the bound
#: before it (2.5x the overflow seed, 125 ms, counted after the known stages' p95s): the
#: reference agent as shipped waited 250-490 ms, never for a local answer (0 of 24 at SLA
#: 1000-2000 ms), then overflowed: first answers p50 566-635 ms against 226-230 ms for the
#: same agent with its stages declared. Without an overflow endpoint the wait is not capped
#: (waiting is the only way to a full answer), and once the stage is measured (this
#: environment's preload, the fleet's calibration) its estimate decides.
UNKNOWN_STAGE_WAIT_MS = 0.0
#: After a streaming route's feature, the key of the tracker of its answers given in one piece
#: (`Admission.route_state`).
BUFFERED_STREAM_SUFFIX = ":buffered"


class RouteHooks(NamedTuple):
    """One route's resolved hooks (see `functions.runtime.agent.Route` for each contract).

    Attributes
    ----------
    validate : Callable[[Any], Mapping[str, Any]] | None
        ``JSON body (None when empty) -> payload``; raises ``BadRequest`` / ``ValueError``.
    degraded : Callable[[Mapping[str, Any]], Mapping[str, Any]] | None
        ``payload -> cheaper answer``.
    overflow_request : Callable[[Mapping[str, Any]], Mapping[str, Any]] | None
        ``payload -> JSON for the overflow endpoint`` (None: the payload itself).
    overflow_answer : Callable[[Any], dict[str, Any]] | None
        The overflow answer's check, already wrapped by `functions.runtime.overflow.checked`.
    downstream_ms : Callable[[Mapping[str, Any]], float] | None
        ``payload -> downstream work of the full answer, ms``.
    degraded_event : Callable[[Mapping[str, Any]], Mapping[str, Any]] | None
        Streaming routes: ``payload -> data of the degraded first event``.
    overflow_event : Callable[[Mapping[str, Any]], Any] | None
        Streaming routes: ``part of the endpoint's stream -> data of one SSE event`` (None:
        skip the part), `functions.runtime.overflow_stream`.
    """

    validate: Callable[[Any], Mapping[str, Any]] | None = None
    degraded: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    overflow_request: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    overflow_answer: Callable[[Any], dict[str, Any]] | None = None
    downstream_ms: Callable[[Mapping[str, Any]], float] | None = None
    degraded_event: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    overflow_event: Callable[[Mapping[str, Any]], Any] | None = None


#: A route with no hooks.
NO_HOOKS = RouteHooks()


class Admission:
    """SLA-aware admission state of one execution environment (built once, in the preload).

    Parameters
    ----------
    level : Callable[[], Level]
        Current degradation level; must not block.
    overflow : OverflowClient | None
        The overflow endpoint's client (None: not configured, or the baseline).
    hooks : Mapping[str, RouteHooks]
        Feature name -> the route's hooks.
    stage_p95_ms : Mapping[str, float] | None
        p95 seed of each preload stage, ms (default :data:`DEFAULT_STAGE_P95_MS`; entries
        given here replace the defaults); a stage named nowhere counts
        :data:`UNKNOWN_STAGE_P95_MS` (assumed to fit) and bounds the wait for it
        (:data:`UNKNOWN_STAGE_WAIT_MS`, `functions.runtime.admission.EnvState.wait_cap_ms`).
    policy : AdmissionPolicy
        Admission tunables (``HANDLER_POLICY``; ``BASELINE_POLICY`` for the off baseline).
    route_p95_ms : Mapping[str, float] | None
        Route name -> the p95 seed of its local answer (a calibration's ``route_p95_ms``),
        ms; a route named nowhere is seeded with ``DEFAULT_INFER_P95_MS``.
    """

    def __init__(
        self,
        *,
        level: Callable[[], Level],
        overflow: OverflowClient | None = None,
        hooks: Mapping[str, RouteHooks] | None = None,
        stage_p95_ms: Mapping[str, float] | None = None,
        policy: AdmissionPolicy = HANDLER_POLICY,
        route_p95_ms: Mapping[str, float] | None = None,
    ) -> None:
        self.level = level
        self.overflow = overflow
        self.hooks = dict(hooks or {})
        self.stage_p95_ms = {**DEFAULT_STAGE_P95_MS, **(stage_p95_ms or {})}
        self.policy = policy
        self.local: dict[str, LatencyTracker] = {}
        self.route_p95_ms = dict(route_p95_ms or {})
        self.degraded = LatencyTracker(DEFAULT_DEGRADE_P95_MS)
        #: feature -> (SLA ms, local latency tracker, hooks): one lookup on the warm path
        self.per_route: dict[str, tuple[float, LatencyTracker, RouteHooks]] = {}

    def tracker(self, feature: str) -> LatencyTracker:
        """p95 tracker of the local answer time of ``feature`` (seeded with its calibrated p95,
        else 50 ms)."""
        tracker = self.local.get(feature)
        if tracker is None:
            seed_ms = self.route_p95_ms.get(feature, DEFAULT_INFER_P95_MS)
            tracker = self.local[feature] = LatencyTracker(seed_ms, refresh_every=8)
        return tracker

    def route_state(self, route: RouteSpec, p0_sla_ms: float, *, buffered_stream: bool = False,
                    ) -> tuple[float, LatencyTracker, RouteHooks]:
        """``(SLA ms, local tracker, hooks)`` of ``route`` (cached by feature name).

        ``buffered_stream``: a streaming route answered in one piece (its caller does not
        stream): its own tracker (:data:`BUFFERED_STREAM_SUFFIX` after the feature), of the
        whole answer's time, since the route's tracker holds the time to its first chunk (what
        a streamed answer's first-token SLA is held against, `functions.runtime.admission.stream`)
        and a whole answer of a streaming route takes seconds longer.
        """
        key = route.feature + BUFFERED_STREAM_SUFFIX if buffered_stream else route.feature
        state = self.per_route.get(key)
        if state is None:
            sla = float(route.sla_ms or default_sla_ms(route.tier, p0_sla_ms))
            state = self.per_route[key] = (
                sla, self.tracker(key), self.hooks.get(route.feature, NO_HOOKS))
        return state

    def sla_ms(self, route: RouteSpec, p0_sla_ms: float) -> float:
        """The route's SLA: its own, else the tier default from ``WARMSTART_SLA_MS``, ms."""
        return self.route_state(route, p0_sla_ms)[0]

    def env_state(self, preload: Preloader, needed: str, web: str, tracker: LatencyTracker) -> EnvState:
        """This environment as `decide` sees it for a route that needs stage ``needed``.

        Parameters
        ----------
        preload : Preloader
        needed : str
            The last stage the route needs (the model's, or the web stack's).
        web : str
            The web stack's stage.
        tracker : LatencyTracker
            The route's local latency tracker.
        """
        degrade_p95 = self.degraded.p95_ms
        if preload.ready(web) and preload.ready(needed):
            return EnvState(ModelState.READY, 0.0, tracker.p95_ms, degrade_p95)
        stages = []
        unknown = False  # a stage still to finish that nobody measured or declared
        for name, started, finished in preload.progress():
            p95 = self.stage_p95_ms.get(name)
            if p95 is None:
                p95 = UNKNOWN_STAGE_P95_MS
                unknown = unknown or finished is None
            stages.append(StageProgress(name, p95, started, finished))
            if name == needed:
                break
        # the preloader's clock is the monotonic clock the stages were stamped with
        remaining = estimate_load_remaining_ms(stages, preload.now_ms())
        state = ModelState.LOADING if stages and stages[0].started_ms is not None else ModelState.NOT_LOADED
        if preload.failed(web) or preload.failed(needed):
            state = ModelState.NOT_LOADED  # run_local fails at once; admission falls back
        cap = UNKNOWN_STAGE_WAIT_MS if unknown else math.inf
        return EnvState(state, remaining, tracker.p95_ms, degrade_p95, cap)

    def debug(self) -> dict[str, Any]:
        """``/debug/resource`` fields: local p95s, overflow breaker and latencies."""
        out: dict[str, Any] = {
            "admission": "baseline" if self.policy.baseline else "on",
            "local_p95_ms": {k: t.p95_ms for k, t in self.local.items()},
            "degraded_p95_ms": self.degraded.p95_ms,
            "overflow": None,
        }
        ov = self.overflow
        if ov is not None:
            snap = ov.breaker.snapshot()
            out["overflow"] = {
                "endpoint_name": ov.endpoint_name,
                "client_ready": ov.client_ready,
                "breaker": str(snap.state),
                "p95_ms": ov.latency.p95_ms,
                "recent_latencies_ms": [round(v, 1) for v in ov.latency.recent()],
            }
        return out
