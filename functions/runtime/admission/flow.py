"""Run one request along the path admission picks, falling back inside the SLA.

`serve` is the loop the handler calls per request: decide (pure,
`functions.runtime.admission.decide`) -> run the path -> on a failure of LOCAL or OVERFLOW,
decide again with that path excluded and the clock moved on, so the request still ends
served, degraded or shed with ``Retry-After`` within its SLA. It does no I/O itself: the
handler passes the callables that run each path and the clock.

Imports only the standard library (and the stdlib-only toolkit modules).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.runtime.admission import (
    DEFAULT_POLICY,
    NO_OVERFLOW,
    AdmissionPolicy,
    Decision,
    EnvState,
    OverflowState,
    Path,
    RequestInfo,
    decide,
)
from functions.runtime.degradation import shed_response
from functions.runtime.errors import FailureTag
from functions.runtime.levels import Level, parse_level
from functions.runtime.overflow import OverflowClient, OverflowFailure, OverflowResult


class LocalUnavailable(Exception):
    """The local path could not answer in its budget (model not ready in time, load failed).

    ``run_local`` raises it; `serve` then falls back (tag ``timeout_resource``; a subclass
    may set another ``tag``, e.g. ``model_error`` when the model failed to load).
    """

    tag: FailureTag = FailureTag.TIMEOUT_RESOURCE


class DegradeUnavailable(Exception):
    """The degraded answer could not be built (the route's hook raised); `serve` then sheds
    (tag ``model_error``)."""

    tag: FailureTag = FailureTag.MODEL_ERROR


@dataclass(frozen=True)
class PathFailure:
    """A path that failed during one request, with its failure tag and message."""

    path: Path
    tag: str
    message: str
    duration_ms: float


@dataclass(frozen=True)
class Outcome:
    """How one request was answered.

    Parameters
    ----------
    path : Path
        The path that produced ``response``.
    decision : Decision
        The decision that led to ``path``.
    decisions : tuple of Decision
        Every decision taken, first to last (more than one after a fallback).
    response : Any
        What the path's callable returned; a
        `functions.runtime.degradation.DegradationResponse` for SHED.
    failures : tuple of PathFailure
        Paths that failed before ``path`` answered.
    timings_ms : dict of str to float
        Durations for ``Server-Timing``: ``admission``, ``local``, ``overflow``, ``degrade``.
    overflow : OverflowResult or None
        The overflow call's result when ``path`` is OVERFLOW.
    """

    path: Path
    decision: Decision
    decisions: tuple[Decision, ...]
    response: Any
    failures: tuple[PathFailure, ...] = ()
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    overflow: OverflowResult | None = None

    @property
    def header_path(self) -> str:
        """``X-Warmstart-Path`` value."""
        return self.path.header_value

    @property
    def failure_tag(self) -> str | None:
        """The one tag to log: the last failure's, else the shed response's, else None."""
        if self.failures:
            return self.failures[-1].tag
        return getattr(self.response, "failure_tag", None) if self.path is Path.SHED else None

    def server_timing(self) -> str:
        """``Server-Timing`` header value (``name;dur=<ms>`` entries).

        References
        ----------
        https://www.w3.org/TR/server-timing/
        """
        return ", ".join(f"{name};dur={value:.1f}" for name, value in self.timings_ms.items())

    def headers(self) -> dict[str, str]:
        """``X-Warmstart-Path`` and ``Server-Timing`` to add to the response."""
        return {"X-Warmstart-Path": self.header_path, "Server-Timing": self.server_timing()}


def serve(
    request: RequestInfo,
    *,
    env: Callable[[], EnvState],
    level: Level | str,
    clock_ms: Callable[[], float],
    run_local: Callable[[float], Any],
    run_degraded: Callable[[], Any] | None = None,
    overflow: OverflowClient | None = None,
    overflow_payload: Mapping[str, Any] | None = None,
    overflow_validate: Callable[[Any], dict[str, Any]] | None = None,
    on_overflow: Callable[[OverflowResult], Any] | None = None,
    request_id: str = "",
    feature: str = "",
    wall_clock_ms: Callable[[], float] | None = None,
    policy: AdmissionPolicy = DEFAULT_POLICY,
    max_decisions: int = 4,
) -> Outcome:
    """Decide and run one request, falling back within its SLA.

    Parameters
    ----------
    request : RequestInfo
        ``arrival_ms`` on the ``clock_ms`` clock (epoch ms).
    env : callable returning EnvState
        Called before every decision (the model may have become ready meanwhile).
    level : Level or str
    clock_ms : callable returning float
        Epoch ms now (the arrival clock).
    run_local : callable(wait_ms) -> response
        Serves locally; waits for the preload at most ``wait_ms`` (``Decision.limit_ms``: 0
        when the model is ready) and raises `LocalUnavailable` if it is not ready by then.
    run_degraded : callable() -> response, optional
        The cheaper answer (must be given when ``request.degradable``).
    overflow : OverflowClient, optional
        None: no overflow configured.
    overflow_payload : mapping, optional
        JSON body for the endpoint (defaults to ``{}``).
    overflow_validate : callable(answer) -> dict, optional
        The route's check of the endpoint's answer (raises
        `functions.runtime.overflow.OverflowModelError`); default: the client's.
    on_overflow : callable(OverflowResult) -> response, optional
        Turns the endpoint's answer into the response (default: the result itself).
    request_id, feature : str
        For shed bodies.
    wall_clock_ms : callable, optional
        Epoch ms for ``estimated_recovery_at`` (default ``clock_ms``).
    policy : AdmissionPolicy
    max_decisions : int
        Upper bound on decide/run rounds (each failure excludes one path, so 4 is enough).

    Returns
    -------
    Outcome

    Raises
    ------
    ValueError
        ``request.degradable`` without ``run_degraded``; bad level.
    """
    if request.degradable and run_degraded is None:
        raise ValueError(f"route {request.route!r} is degradable but no run_degraded was given")
    lvl = parse_level(level)
    wall = wall_clock_ms or clock_ms
    excluded: set[Path] = set()
    failures: list[PathFailure] = []
    decisions: list[Decision] = []
    timings: dict[str, float] = {}
    overflow_healthy = True
    response: Any

    for _ in range(max_decisions):
        t0 = clock_ms()
        ov_state: OverflowState = NO_OVERFLOW
        if overflow is not None:
            ov_state = overflow.state()
            if not overflow_healthy:
                ov_state = OverflowState(
                    configured=True, healthy=False, breaker=ov_state.breaker,
                    latency_p95_ms=ov_state.latency_p95_ms,
                )
        decision = decide(request, env(), ov_state, lvl, t0, policy=policy,
                          exclude=frozenset(excluded))
        decisions.append(decision)
        t1 = clock_ms()
        timings["admission"] = timings.get("admission", 0.0) + (t1 - t0)

        if decision.path is Path.SHED:
            response = shed_response(decision, level=lvl, request_id=request_id,
                                     now_epoch_ms=wall(), feature=feature)
            return Outcome(Path.SHED, decision, tuple(decisions), response, tuple(failures),
                           timings)
        if decision.path is Path.DEGRADE:
            assert run_degraded is not None
            try:
                response = run_degraded()
            except DegradeUnavailable as exc:
                failures.append(PathFailure(Path.DEGRADE, exc.tag.value, str(exc), clock_ms() - t1))
                excluded.add(Path.DEGRADE)
                continue
            timings["degrade"] = clock_ms() - t1
            return Outcome(Path.DEGRADE, decision, tuple(decisions), response, tuple(failures),
                           timings)
        if decision.path is Path.LOCAL:
            try:
                response = run_local(float(decision.limit_ms))
            except LocalUnavailable as exc:
                elapsed = clock_ms() - t1
                failures.append(PathFailure(Path.LOCAL, exc.tag.value, str(exc), elapsed))
                excluded.add(Path.LOCAL)
                continue
            timings["local"] = clock_ms() - t1
            return Outcome(Path.LOCAL, decision, tuple(decisions), response, tuple(failures),
                           timings)
        # OVERFLOW
        assert overflow is not None
        try:
            result = overflow.invoke(overflow_payload or {}, budget_ms=float(decision.limit_ms),
                                     validate=overflow_validate)
        except OverflowFailure as exc:
            elapsed = clock_ms() - t1
            timings["overflow"] = elapsed
            failures.append(PathFailure(Path.OVERFLOW, exc.tag.value, exc.message, elapsed))
            excluded.add(Path.OVERFLOW)
            overflow_healthy = False
            continue
        timings["overflow"] = clock_ms() - t1
        response = on_overflow(result) if on_overflow is not None else result
        return Outcome(Path.OVERFLOW, decision, tuple(decisions), response, tuple(failures),
                       timings, result)

    # every path failed max_decisions times: shed
    t0 = clock_ms()
    last = decide(request, env(), NO_OVERFLOW, lvl, t0, policy=policy,
                  exclude=frozenset({Path.LOCAL, Path.OVERFLOW, Path.DEGRADE}))
    decisions.append(last)
    response = shed_response(last, level=lvl, request_id=request_id, now_epoch_ms=wall(),
                             feature=feature)
    return Outcome(Path.SHED, last, tuple(decisions), response, tuple(failures), timings)
