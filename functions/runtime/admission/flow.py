"""Run one request along the path admission picks, falling back inside the SLA.

`serve_paths` is the loop the pipeline runs per request that the warm path did not answer: decide
(pure, `functions.runtime.admission.decide`) -> the chosen path object's ``answer`` -> on a
failure of LOCAL, OVERFLOW or DEGRADE, decide again with that path excluded and the clock moved
on, so the request still ends served, degraded or shed with ``Retry-After`` within its SLA. It
takes no callables: the request's context (``info``, ``level``, ``overflow``) and a `Paths`
object (one `AnswerPath` per path, the environment's state, the clock), and does no I/O itself.

Imports only the standard library (and the stdlib-only toolkit modules).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from functions.runtime.admission import (
    NO_OVERFLOW,
    AdmissionPolicy,
    Decision,
    EnvState,
    OverflowState,
    Path,
    RequestInfo,
)
from functions.runtime.admission import decide as decide_path
from functions.runtime.contract.levels import Level
from functions.runtime.degradation import shed_response
from functions.runtime.errors import FailureTag
from functions.runtime.overflow import OverflowFailure, OverflowResult

__all__ = ["AnswerPath", "DegradeUnavailable", "LocalUnavailable", "Outcome", "PathFailure",
           "Paths", "ServeContext", "ShedPath", "serve_paths"]


class LocalUnavailable(Exception):
    """The local path could not answer in its budget (model not ready in time, load failed).

    ``run_local`` raises it; `serve_paths` then falls back (tag ``timeout_resource``; a subclass
    may set another ``tag``, e.g. ``model_error`` when the model failed to load).
    """

    tag: FailureTag = FailureTag.TIMEOUT_RESOURCE


class DegradeUnavailable(Exception):
    """The degraded answer could not be built (the route's hook raised); `serve_paths` then sheds
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


class ServeContext(Protocol):
    """What `serve_paths` reads from a request's context (`functions.runtime.request_context`).

    Attributes
    ----------
    info : RequestInfo
        The decision's view of the request (``arrival_ms`` on the `Paths.wall_ms` clock).
    level : Level
    overflow : Any
        The request's overflow (``state() -> OverflowState``), None when it cannot overflow.
    request_id, feature : str
        For shed bodies.
    failures : list[PathFailure] | None
        Set by `serve_paths`: the paths that failed so far (what a `ShedPath` answers with).
    overflow_result : OverflowResult | None
        Set by the OVERFLOW path: the endpoint's answer (`Outcome.overflow`).
    """

    info: RequestInfo
    level: Level
    overflow: Any
    request_id: str
    feature: str
    failures: list[PathFailure] | None
    overflow_result: OverflowResult | None


class AnswerPath(Protocol):
    """One path of the pipeline: local, overflow, degraded or shed.

    ``answer(ctx, decision)`` answers the request along this path within
    ``decision.limit_ms`` (the wait a LOCAL answer may spend on the preload, the call budget of
    an OVERFLOW); a LOCAL path raises `LocalUnavailable`, an OVERFLOW path
    `functions.runtime.overflow.OverflowFailure`, a DEGRADE path `DegradeUnavailable` when it
    cannot, and `serve_paths` falls back.
    """

    def answer(self, ctx: Any, decision: Decision) -> Any: ...


class Paths(Protocol):
    """The paths of one kind of request (buffered, streaming) and what the loop reads.

    Attributes
    ----------
    local, degraded, overflow, shed : AnswerPath
        ``degraded`` runs only for a ``info.degradable`` request, ``overflow`` only when the
        context has an ``overflow``.
    policy : AdmissionPolicy
    """

    local: AnswerPath
    degraded: AnswerPath
    overflow: AnswerPath
    shed: AnswerPath
    policy: AdmissionPolicy

    def env_state(self, ctx: Any) -> EnvState:
        """This environment for ``ctx``'s route (called before every decision: the model may
        have become ready meanwhile)."""
        ...

    def wall_ms(self) -> float:
        """Epoch ms now (the arrival clock)."""
        ...


class ShedPath:
    """The shed answer: ``503`` (or ``403`` for a feature the level disabled) with
    ``Retry-After`` (`functions.runtime.degradation.shed_response`, a ``DegradationResponse``);
    a pipeline answering in an event source's format extends it."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths

    def answer(self, ctx: Any, decision: Decision) -> Any:
        return shed_response(decision, level=ctx.level, request_id=ctx.request_id,
                             now_epoch_ms=self.paths.wall_ms(), feature=ctx.feature)


def serve_paths(ctx: ServeContext, paths: Paths, *, max_decisions: int = 4) -> Outcome:
    """Decide and answer one request, falling back within its SLA.

    Parameters
    ----------
    ctx : ServeContext
        The request (its ``failures`` is set here).
    paths : Paths
        The path objects, the environment's state and the clock.
    max_decisions : int
        Upper bound on decide/answer rounds (each failure excludes one path, so 4 is enough).

    Returns
    -------
    Outcome
        ``response``: what the chosen path's ``answer`` returned.
    """
    request, level, policy = ctx.info, ctx.level, paths.policy
    overflow = ctx.overflow
    wall_ms = paths.wall_ms
    excluded: set[Path] = set()
    failures: list[PathFailure] = []
    ctx.failures = failures
    decisions: list[Decision] = []
    timings: dict[str, float] = {}
    overflow_healthy = True

    for _ in range(max_decisions):
        t0 = wall_ms()
        ov_state: OverflowState = NO_OVERFLOW
        if overflow is not None:
            ov_state = overflow.state()
            if not overflow_healthy:
                ov_state = OverflowState(configured=True, healthy=False, breaker=ov_state.breaker,
                                         latency_p95_ms=ov_state.latency_p95_ms)
        decision = decide_path(request, paths.env_state(ctx), ov_state, level, t0, policy=policy,
                               exclude=frozenset(excluded))
        decisions.append(decision)
        t1 = wall_ms()
        timings["admission"] = timings.get("admission", 0.0) + (t1 - t0)
        chosen = decision.path
        if chosen is Path.SHED:
            return Outcome(Path.SHED, decision, tuple(decisions), paths.shed.answer(ctx, decision),
                           tuple(failures), timings)
        try:
            if chosen is Path.DEGRADE:
                response = paths.degraded.answer(ctx, decision)
            elif chosen is Path.LOCAL:
                response = paths.local.answer(ctx, decision)
            else:
                response = paths.overflow.answer(ctx, decision)
        except (LocalUnavailable, DegradeUnavailable) as exc:
            failures.append(PathFailure(chosen, exc.tag.value, str(exc), wall_ms() - t1))
            excluded.add(chosen)
            continue
        except OverflowFailure as exc:
            elapsed = timings["overflow"] = wall_ms() - t1
            failures.append(PathFailure(Path.OVERFLOW, exc.tag.value, exc.message, elapsed))
            excluded.add(Path.OVERFLOW)
            overflow_healthy = False
            continue
        timings[_TIMING[chosen]] = wall_ms() - t1
        result = ctx.overflow_result if chosen is Path.OVERFLOW else None
        return Outcome(chosen, decision, tuple(decisions), response, tuple(failures), timings,
                       result)

    # every path failed max_decisions times: shed
    last = decide_path(request, paths.env_state(ctx), NO_OVERFLOW, level, wall_ms(),
                       policy=policy, exclude=frozenset({Path.LOCAL, Path.OVERFLOW, Path.DEGRADE}))
    decisions.append(last)
    return Outcome(Path.SHED, last, tuple(decisions), paths.shed.answer(ctx, last),
                   tuple(failures), timings)


#: ``Outcome.timings_ms`` key of each path's answer.
_TIMING = {Path.LOCAL: "local", Path.OVERFLOW: "overflow", Path.DEGRADE: "degrade"}
