"""`AgentRuntime`: what the toolkit hands an agent's app factory, model loader and hooks.

Part of the public entry point (`functions.runtime.agent` re-exports it). Imports only the
standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from functions.runtime import lifecycle
from functions.runtime.clock import monotonic_ms as _clock_ms
from functions.runtime.config import RuntimeConfig

if TYPE_CHECKING:  # typing only
    from functions.runtime.admission.state import Admission
    from functions.runtime.contract.levels import Level
    from functions.runtime.preload import Preloader
    from functions.runtime.routes import RouteRegistry
    from functions.runtime.telemetry import InvocationRecord

__all__ = ["AgentRuntime", "DeclaredAgent", "ModelNotReady", "RuntimeHost"]


def _current_invocation() -> InvocationRecord | None:
    """`functions.runtime.telemetry.current_invocation()`, the module bound on first use: the init
    does not import telemetry, and a request pays an attribute lookup, not a function-local
    ``from ... import`` (~1 us each alone, more in place; the lookup agent's tool routes call
    ``timing`` on every request)."""
    record: InvocationRecord | None = _Telemetry.module().current_invocation()
    return record


class _Telemetry:
    """Holds the telemetry module once imported (an attribute, not a ``global`` statement)."""

    loaded: Any = None

    @classmethod
    def module(cls) -> Any:
        module = cls.loaded
        if module is None:
            from functions.runtime import telemetry

            module = cls.loaded = telemetry
        return module



class DeclaredAgent(Protocol):
    """What the runtime reads of its agent's declaration
    (`functions.runtime.agent_declaration.AgentSpec`; a Protocol, so this module
    imports neither the declaration nor the handler that import it)."""

    name: str
    registry: RouteRegistry


class RuntimeHost(Protocol):
    """What the runtime reads of its execution environment's handler
    (`functions.runtime.agent_handler.AgentHandler`): the preload, admission (None until the
    ``toolkit`` stage made it) and the current degradation level."""

    preload: Preloader
    admission: Admission | None

    def current_level(self) -> Level: ...


class ModelNotReady(RuntimeError):
    """`AgentRuntime.model` was called while the model is not loaded (or failed to load)."""


class AgentRuntime:
    """What the toolkit hands an agent's app factory and model loader.

    Attributes
    ----------
    name : str
        The agent's name.
    config : RuntimeConfig
        The toolkit's run-time configuration.
    settings : Mapping[str, str]
        The environment variables as read at init: the agent reads its own settings here
        (never ``os.environ`` in logic).
    environment : ExecutionEnvironment
        This execution environment (id, init type and duration, resources).
    routes : RouteRegistry
        The declared routes.
    """

    def __init__(self, agent: DeclaredAgent, config: RuntimeConfig, settings: Mapping[str, str],
                 environment: lifecycle.ExecutionEnvironment, handler: RuntimeHost | None) -> None:
        self.agent = agent
        self.name = agent.name
        self.config = config
        self.settings = settings
        self.environment = environment
        self.routes = agent.registry
        self._handler = handler

    def model(self) -> Any:
        """The loaded model (what the agent's loader returned).

        Raises
        ------
        ModelNotReady
            No model declared, not loaded yet, or its loader failed (chained).
        """
        handler = self._handler
        if handler is None or not handler.preload.has("model"):
            raise ModelNotReady(f"agent {self.name!r} has no model")
        preload = handler.preload
        if not preload.ready("model"):
            if preload.failed("model"):
                try:
                    preload.result("model")
                except Exception as exc:
                    raise ModelNotReady(f"agent {self.name!r}: the model failed to load") from exc
            raise ModelNotReady(f"agent {self.name!r}: the model is still loading (declare the "
                                "route with needs_model=True: the toolkit then waits for it, "
                                "overflows or degrades before the app runs)")
        return preload.result("model")

    def model_state(self) -> str:
        """``ready``, ``loading``, ``not_started``, ``failed``; ``none`` without a model."""
        handler = self._handler
        if handler is None or not handler.preload.has("model"):
            return "none"
        return str(self.environment.resource("model"))

    def level(self) -> str:
        """The current degradation level, ``"L0"`` .. ``"L3"`` (never blocks)."""
        handler = self._handler
        return str(handler.current_level() if handler is not None else self.config.degradation_level)

    def timing(self, name: str, duration_ms: float) -> None:
        """Add ``name;dur=duration_ms`` to the current response's ``Server-Timing`` (e.g.
        ``infer``, ``tool``; ``tool`` is subtracted from the local latency admission learns,
        as it is declared per request through ``downstream_ms``)."""
        record = _current_invocation()
        if record is not None:
            record.timings_ms[name] = record.timings_ms.get(name, 0.0) + float(duration_ms)

    def payload(self) -> dict[str, Any] | None:
        """The current request's payload, as its route's ``validate`` hook returned it (the app
        need not parse and check the body again); None when the route has no ``validate``."""
        record = _current_invocation()
        return record.payload if record is not None else None

    def path_params(self) -> dict[str, str]:
        """The current request's path parameters, for a templated route
        (``/orders/{order_id}`` -> ``{"order_id": "A-17"}``; ``{}`` otherwise): a hook declared
        with the runtime (``validate(body, runtime)``) can check them before any path runs."""
        record = _current_invocation()
        return dict(record.path_params) if record is not None else {}

    def remaining_ms(self) -> float | None:
        """What is left of the current request's SLA budget, ms (negative once it is spent;
        None outside a declared route's invocation). Cap a downstream call's timeout with it.
        On a streaming route: until its first chunk is out, what is left of the first token's
        SLA; after it, of the stream's own bound (the invocation's remaining time less
        `functions.runtime.stream_parts.DEADLINE_MARGIN_MS`), so a call made mid-stream gets the
        time the stream still has, not a spent first-token budget."""
        record = _current_invocation()
        if record is None or record.deadline_ms is None:
            return None
        return record.deadline_ms - _clock_ms()

    def mark_degraded(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """The app's own cheaper answer (e.g. a cached result after a downstream failure):
        returns ``answer`` with ``degraded: true`` and the level, and makes the response's
        ``X-Warmstart-Path`` ``degraded`` (counted as a degradation, never as a success)."""
        from functions.runtime.contract.levels import parse_level
        from functions.runtime.degradation import mark_degraded
        from functions.runtime.telemetry import current_invocation

        record = current_invocation()
        if record is not None:
            record.path = "degraded"
        return mark_degraded(answer, level=parse_level(self.level()))

    def fail(self, tag: str) -> str | None:
        """Tag the current invocation's failure (``bad_request``, ``model_error``,
        ``tool_unavailable``, ``timeout_network``, ``timeout_resource``); returns its request id.

        Raises
        ------
        ValueError
            Unknown tag.
        """
        from functions.runtime.errors import FailureTag
        from functions.runtime.telemetry import current_invocation

        failure = FailureTag(tag)
        record = current_invocation()
        if record is None:
            return None
        record.failure = failure
        return record.request_id

    def error_body(self, code: str, message: str, **fields: Any) -> dict[str, Any]:
        """An error body of the shared contract (``error``, ``message``, ``level``,
        ``request_id``, ...) for the current invocation."""
        from functions.runtime.errors import error_body
        from functions.runtime.telemetry import current_invocation

        record = current_invocation()
        return error_body(code, message, request_id=record.request_id if record else None,
                          level=self.level(), **fields)

    def capabilities(self) -> dict[str, Any]:
        """A ``GET /capabilities`` body: each declared route with its tier, its effective SLA
        (the tier default when it declares none) and whether it is on, off or degraded at the
        current level; the level; the model's state."""
        from functions.runtime.admission import default_sla_ms
        from functions.runtime.degradation import capabilities

        level = self.level()
        visible = [r for r in self.routes if not r.path.startswith("/debug/") or self.config.debug_resource]
        at_level = capabilities(visible, level).to_dict()
        return {
            "agent": self.name,
            "level": level,
            "model_state": self.model_state(),
            "features": at_level["features"],
            "disabled": at_level["disabled"],
            "degraded": at_level["degraded"],
            "routes": [
                {"feature": r.feature, "method": r.method, "path": r.path, "tier": r.tier,
                 "sla_ms": r.sla_ms if r.sla_ms is not None else default_sla_ms(r.tier, self.config.sla_ms),
                 "needs_model": r.needs_model, "degradable": r.degradable}
                for r in visible
            ],
        }

    def debug(self) -> dict[str, Any]:
        """A ``GET /debug/resource`` body: environment id, init type and duration, restore,
        resources and their load times, model state, level, recent latencies, admission's
        measured state (local p95s, overflow breaker)."""
        env = self.environment
        handler = self._handler
        admission = handler.admission if handler is not None else None
        return {
            "agent": self.name,
            "environment_id": env.environment_id,
            "init_type": str(env.init_type),
            "init_duration_ms": env.init_duration_ms,
            "restored": env.restored,
            "invocations": env.invocations,
            "requests": env.requests,
            "resources": {k: str(v) for k, v in env.resources.items()},
            "resource_load_ms": dict(env.resource_load_ms),
            "model_state": self.model_state(),
            "degradation_level": self.level(),
            "recent_latencies": env.recent_latencies(),
            **(admission.debug() if admission is not None else {}),
        }
