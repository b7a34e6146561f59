"""Test-side path objects for `functions.runtime.admission.flow.serve_paths`.

`serve_paths` takes a request's context and a `functions.runtime.admission.flow.Paths` object; the
tests of the loop give each path's answer as a small function of their own (what it returns,
what it raises, how long it takes on a test clock): :func:`serve_calls` wraps them in path
objects, as the pipeline's own (`functions.runtime.admission.paths`) are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from functions.runtime.admission import (
    DEFAULT_POLICY,
    AdmissionPolicy,
    Decision,
    EnvState,
    RequestInfo,
)
from functions.runtime.admission.flow import Outcome, PathFailure, ShedPath, serve_paths
from functions.runtime.contract.levels import Level, parse_level


@dataclass
class Ctx:
    """The part of a request's context `serve_paths` reads."""

    info: RequestInfo
    level: Level
    overflow: Any = None
    overflow_payload: Mapping[str, Any] | None = None
    request_id: str = ""
    feature: str = ""
    failures: list[PathFailure] | None = None
    overflow_result: Any = None


class _Local:
    def __init__(self, run: Callable[[float], Any]) -> None:
        self.run = run

    def answer(self, ctx: Ctx, decision: Decision) -> Any:
        return self.run(float(decision.limit_ms))


class _Degraded:
    def __init__(self, run: Callable[[], Any] | None) -> None:
        self.run = run

    def answer(self, ctx: Ctx, decision: Decision) -> Any:
        assert self.run is not None, "a degraded answer was chosen for a route without one"
        return self.run()


class _Overflow:
    def __init__(self, validate: Callable[[Any], dict[str, Any]] | None,
                 on_result: Callable[[Any], Any] | None) -> None:
        self.validate, self.on_result = validate, on_result

    def answer(self, ctx: Ctx, decision: Decision) -> Any:
        result = ctx.overflow_result = ctx.overflow.invoke(
            ctx.overflow_payload or {}, budget_ms=float(decision.limit_ms), validate=self.validate)
        return self.on_result(result) if self.on_result is not None else result


class CallPaths:
    """`functions.runtime.admission.flow.Paths` from test functions."""

    def __init__(self, *, env: Callable[[], EnvState], clock_ms: Callable[[], float],
                 run_local: Callable[[float], Any], run_degraded: Callable[[], Any] | None,
                 overflow_validate: Callable[[Any], dict[str, Any]] | None,
                 on_overflow: Callable[[Any], Any] | None, policy: AdmissionPolicy) -> None:
        self._env, self._clock_ms, self.policy = env, clock_ms, policy
        self.local = _Local(run_local)
        self.degraded = _Degraded(run_degraded)
        self.overflow = _Overflow(overflow_validate, on_overflow)
        self.shed = ShedPath(self)

    def env_state(self, ctx: Any) -> EnvState:
        return self._env()

    def wall_ms(self) -> float:
        return self._clock_ms()


def serve_calls(request: RequestInfo, *, env: Callable[[], EnvState], level: Level | str,
                clock_ms: Callable[[], float], run_local: Callable[[float], Any],
                run_degraded: Callable[[], Any] | None = None, overflow: Any = None,
                overflow_payload: Mapping[str, Any] | None = None,
                overflow_validate: Callable[[Any], dict[str, Any]] | None = None,
                on_overflow: Callable[[Any], Any] | None = None, request_id: str = "",
                feature: str = "", policy: AdmissionPolicy = DEFAULT_POLICY) -> Outcome:
    """`serve_paths` one request whose paths are the given functions (``run_local(limit_ms)``,
    ``run_degraded()``, ``on_overflow(result)`` after ``overflow.invoke``)."""
    ctx = Ctx(request, parse_level(level), overflow, overflow_payload, request_id, feature)
    paths = CallPaths(env=env, clock_ms=clock_ms, run_local=run_local, run_degraded=run_degraded,
                      overflow_validate=overflow_validate, on_overflow=on_overflow, policy=policy)
    return serve_paths(ctx, paths)
