"""The paths of a buffered request that the warm path did not answer: local, overflow,
degraded and shed, each a path object with one ``answer(ctx, decision)``.

`BufferedPaths` (one per execution environment, built by the dispatcher) holds them and runs
the request through the loop (`functions.runtime.admission.flow.serve_paths`), then turns its
`functions.runtime.admission.flow.Outcome` into the answer (`BufferedPaths.outcome_answer`:
the record's path and failure tag, a shed answer in the event source's format, the preload
let finish after an overflowed or degraded cold answer). A streaming route's paths are
`functions.runtime.admission.stream`'s.

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

from typing import Any

from functions.runtime import events
from functions.runtime.admission import (
    FINISH_PRELOAD_MARGIN_MS,
    AdmissionPolicy,
    Decision,
    EnvState,
    Path,
    RequestInfo,
)
from functions.runtime.admission.flow import Outcome, ShedPath, serve_paths
from functions.runtime.answers import log_hook_failure
from functions.runtime.config import FinishPreload
from functions.runtime.errors import FailureTag, WarmstartError
from functions.runtime.local_path import AppFailed
from functions.runtime.request_context import RequestContext, remaining_ms
from functions.runtime.telemetry import InvocationRecord

#: The execution environment's `functions.runtime.dispatch.Dispatcher` (not imported, even
#: for type checking: the dispatcher imports this module, and no import circle is kept).
Dispatcher = Any

__all__ = ["BufferedPaths", "DegradedAnswer", "LocalAnswer", "OverflowAnswer"]


class LocalAnswer:
    """The app in this execution environment, on a cold request: wait for the stages the
    route needs (at most the decision's ``limit_ms`` and the invocation's time), then run the
    app (a degradable route cut at its budget, `functions.runtime.answers.Answers.cut_s`).

    Raises `functions.runtime.admission.flow.LocalUnavailable` (a stage not ready in time, or
    failed) and, on a degradable route, `functions.runtime.local_path.AppFailed`, so `serve_paths`
    falls back; a non-degradable route's app failure is answered here (the JSON error contract).
    """

    def __init__(self, d: Dispatcher) -> None:
        self.d = d

    def answer(self, ctx: RequestContext, decision: Decision) -> dict[str, Any]:
        d, record, route = self.d, ctx.record, ctx.route
        assert route is not None and ctx.info is not None and ctx.tracker is not None
        t0 = d._clock_ms()
        d.local.wait(record, needs_model=route.needs_model,
                     wait_ms=min(float(decision.limit_ms), ctx.remaining_ms - (t0 - ctx.admitted_ms)))
        cut = d.answers.cut_s(ctx) if ctx.info.degradable and not d.admission.policy.baseline else None
        try:
            response = d.local.run_now(ctx.event, ctx.context, record, ctx.request, cut)
        except AppFailed as exc:
            d.answers.log_app_failure(route, exc)
            if ctx.info.degradable:
                raise  # serve_paths falls back: the degraded answer (or overflow, or shed)
            return d.answers.app_failed(ctx, exc, logged=True)
        timings = record.timings_ms
        ctx.tracker.observe(max(0.0, d._clock_ms() - t0 - timings.get("tool", 0.0)
                                - timings.get("model", 0.0) - timings.get("init", 0.0)))
        return response


class OverflowAnswer:
    """The overflow endpoint (`functions.runtime.overflow.OverflowClient.invoke`, the call's
    budget ``decision.limit_ms``, the route's check of the answer); raises
    `functions.runtime.overflow.OverflowFailure` for `serve_paths` to fall back."""

    def answer(self, ctx: RequestContext, decision: Decision) -> dict[str, Any]:
        result = ctx.overflow_result = ctx.overflow.invoke(
            ctx.overflow_payload or {}, budget_ms=float(decision.limit_ms),
            validate=ctx.hooks.overflow_answer)
        return events.respond(ctx.kind, ctx.event, 200, result.body, {})


class DegradedAnswer:
    """The route's ``degraded`` answer (`functions.runtime.answers.Answers.degraded`)."""

    def __init__(self, d: Dispatcher) -> None:
        self.d = d

    def answer(self, ctx: RequestContext, decision: Decision) -> dict[str, Any]:
        return self.d.answers.degraded(ctx)


class BufferedPaths:
    """A buffered request's paths in one execution environment (`functions.runtime.admission.flow.Paths`).

    Parameters
    ----------
    d : Dispatcher
        The environment's dispatcher (admission, preload, local path, answers, clocks).
    """

    def __init__(self, d: Dispatcher) -> None:
        self.d = d
        self.local = LocalAnswer(d)
        self.overflow = OverflowAnswer()
        self.degraded = DegradedAnswer(d)
        self.shed = ShedPath(self)

    @property
    def policy(self) -> AdmissionPolicy:
        return self.d.admission.policy

    def wall_ms(self) -> float:
        return self.d._wall_ms()

    def env_state(self, ctx: RequestContext) -> EnvState:
        d = self.d
        assert ctx.route is not None and ctx.tracker is not None
        return d.admission.env_state(d.preload, d.local.needed(ctx.route), d._web, ctx.tracker)

    def unrouted(self, ctx: RequestContext) -> dict[str, Any]:
        """A route the agent did not declare: the app answers it (waiting for the web stack
        for the rest of the invocation; no SLA logic for a route without an SLA)."""
        d, record = self.d, ctx.record
        assert ctx.request is not None
        queue_ms = events.queue_ms(ctx.request, d._wall_ms())
        if queue_ms:
            record.timings_ms["queue"] = queue_ms
        try:
            return d.local.run(ctx.event, ctx.context, record, needs_model=False,
                               wait_ms=remaining_ms(ctx.context), request=ctx.request)
        except AppFailed as exc:
            return d.answers.app_failed(ctx, exc)
        except Exception as exc:  # noqa: BLE001 - LocalFailed / LocalUnavailable: the web stack
            error = WarmstartError(
                "the web stack is not available in this execution environment; retry",
                status=503, code="web_unavailable",
                tag=getattr(exc, "tag", FailureTag.TOOL_UNAVAILABLE), retry_after_s=1)
            return d.answers.refuse(ctx, error, "shed")

    def admit(self, ctx: RequestContext) -> dict[str, Any]:
        """Serve a cold request (the warm path did not answer it) along the path admission
        picks, falling back within its SLA."""
        d, route, hooks = self.d, ctx.route, ctx.hooks
        assert route is not None
        degrade = hooks.degraded  # a refused payload returned before: the payload is valid or absent
        ctx.info = RequestInfo(route.path, route.tier, ctx.sla_ms, ctx.arrival_ms,
                               degradable=route.degradable and degrade is not None,
                               downstream_ms=ctx.downstream_ms)
        ctx.remaining_ms = remaining_ms(ctx.context)
        # a model route overflows when it declared a payload (validate: what is sent) and a
        # check of the endpoint's answer (overflow_answer): never another model's answer as is
        overflow = (d.admission.overflow if route.needs_model and ctx.payload is not None
                    and hooks.overflow_answer is not None else None)
        ctx.overflow_payload = ctx.payload or {}
        if overflow is not None and hooks.overflow_request is not None:
            try:
                ctx.overflow_payload = dict(hooks.overflow_request(ctx.overflow_payload))
            except Exception as exc:  # noqa: BLE001 - the agent's hook failed: no overflow
                log_hook_failure(route, "overflow_request", exc)
                overflow = None
        ctx.overflow = overflow
        return self.outcome_answer(ctx, serve_paths(ctx, self))

    def outcome_answer(self, ctx: RequestContext, outcome: Outcome, *,
                       finish_preload: bool = True) -> Any:
        """The answer of ``outcome``, with the record's path and failure tag set; an
        overflowed or degraded cold answer lets the preload finish (``finish_preload``,
        `finish_preload_after`)."""
        d, record, route = self.d, ctx.record, ctx.route
        assert route is not None and ctx.deadline_ms is not None
        if not (outcome.path is Path.LOCAL and record.path == "degraded"):  # app's own cheaper answer
            record.path = outcome.header_path
        overflow_ms = outcome.timings_ms.get("overflow")
        if overflow_ms is not None:
            record.timings_ms["overflow"] = overflow_ms
        if outcome.failures:
            record.passed_over = tuple(f"{f.path.header_value}:{f.tag}" for f in outcome.failures)
        tag = outcome.failure_tag
        if tag is not None and record.failure is None and outcome.path is not Path.OVERFLOW:
            # a full overflow answer is no failure of the request: why the paths before it were
            # passed over is logged as ``passed_over``; a degraded or shed answer keeps its tag
            record.failure = FailureTag(tag)
        if (finish_preload and outcome.path in (Path.OVERFLOW, Path.DEGRADE)
                and d._model is not None and not d.preload.ready(d._model)):
            self.finish_preload_after(record, ctx.deadline_ms - FINISH_PRELOAD_MARGIN_MS)
        if outcome.path is not Path.SHED:
            return outcome.response
        if any(f.path is Path.DEGRADE for f in outcome.failures):
            # the route's degraded hook raised: the agent's fault, not a capacity problem
            error = WarmstartError(f"the degraded answer of route {route.feature!r} failed; see "
                                   "the function's log", status=500, code="internal_error",
                                   tag=FailureTag.MODEL_ERROR)
            return d.answers.refuse(ctx, error, "shed")
        if d.admission.policy.baseline and outcome.failures:
            # the baseline has no SLA logic: say why the local path could not answer
            failed = outcome.failures[-1].tag == FailureTag.MODEL_ERROR.value
            error = WarmstartError(
                "the model failed to load in this execution environment; retry" if failed else
                "the model is still loading and the invocation's time ran out; retry shortly",
                status=503, code="model_failed" if failed else "not_ready",
                tag=FailureTag(outcome.failures[-1].tag), retry_after_s=1)
            return d.answers.refuse(ctx, error, "shed")
        shed = outcome.response
        headers = {k.lower(): v for k, v in shed.headers.items() if k.lower() != "content-type"}
        return events.respond(ctx.kind, ctx.event, shed.status_code, shed.body, headers)

    def finish_preload_after(self, record: InvocationRecord, until_ms: float) -> None:
        """Let the preload finish the model stage after an overflowed or degraded answer.

        Lambda freezes the environment once the invocation is complete, so the preload only
        progresses while this invocation lasts (`RuntimeConfig.finish_preload`):

        - ``after``, with the toolkit's internal extension active: queue a wait for the model
          stage to the post-response phase (bounded by the function timeout; then the
          requests this environment finished before Powertools loaded are flushed); the
          answer returns at once.
        - ``before`` (or ``after`` without an Extensions API): wait here until ``until_ms``
          (monotonic clock, ms: the SLA's end less a margin) at the latest; the wait is
          recorded in ``Server-Timing`` as ``preload``.
        - ``off``: nothing.
        """
        d = self.d
        assert d._model is not None
        mode = d.config.finish_preload
        if not mode or mode == FinishPreload.OFF:
            return
        post = d.post_response
        if mode == FinishPreload.AFTER and post is not None and post.active and record.request_id:
            post.submit(record.request_id, self.preload_after_response)
            return
        wait_ms = until_ms - d._clock_ms()
        if wait_ms <= 0:
            return
        t0 = d._clock_ms()
        d.preload.wait(d._model, wait_ms / 1000.0)
        record.timings_ms["preload"] = d._clock_ms() - t0

    def preload_after_response(self, until_wall_ms: float) -> None:
        """Post-response work: wait for the model stage until ``until_wall_ms`` (epoch ms),
        then flush telemetry of requests that finished before Powertools loaded."""
        d = self.d
        assert d._model is not None
        left_s = (until_wall_ms - d._wall_ms()) / 1000.0
        if left_s > 0:
            d.preload.wait(d._model, left_s)
        if d.pending.records and (d._telemetry_stage is None or d.preload.done(d._telemetry_stage)):
            d.flush_pending()
