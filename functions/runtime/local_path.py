"""The local path: run the app (an ASGI app behind Mangum) in this execution environment.

`LocalPath` waits, within a bound, for the preload stages a route needs (the web stack, the
model), then calls the adapter the web stage built. The warm path (everything loaded, this
thread has its event loop) is one attribute check and the adapter call.

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from functions.runtime.admission_flow import LocalUnavailable
from functions.runtime.errors import FailureTag
from functions.runtime.preload import Preloader
from functions.runtime.telemetry import InvocationRecord

__all__ = ["LocalFailed", "LocalPath"]


class LocalFailed(LocalUnavailable):
    """A preload stage the route needs failed: this environment cannot serve it locally."""

    def __init__(self, message: str, tag: FailureTag) -> None:
        super().__init__(message)
        self.tag = tag


class LocalPath:
    """Serves requests with the app in this execution environment.

    Parameters
    ----------
    preload : Preloader
        Stage ``web_stage`` returns the adapter (``(event, context, request) -> response``,
        `functions.runtime.asgi.make_adapter`);
        ``model_stage`` (None: the agent has no model) loads the model.
    clock_ms : Callable[[], float]
        Monotonic clock, ms.
    web_stage, model_stage : str, str | None
        Stage names.
    """

    def __init__(self, preload: Preloader, clock_ms: Callable[[], float], *,
                 web_stage: str = "web", model_stage: str | None = "model") -> None:
        self.preload = preload
        self._clock_ms = clock_ms
        self.web = web_stage
        self.model = model_stage
        self._loops = threading.local()
        self._adapter: Any = None
        self._adapter_thread = 0

    def ready(self, needs_model: bool) -> bool:
        """True when the stages a route needs are loaded."""
        preload = self.preload
        if not preload.ready(self.web):
            return False
        return not needs_model or self.model is None or preload.ready(self.model)

    def run_now(self, event: Any, context: Any, record: InvocationRecord,
                request: Any = None) -> dict[str, Any]:
        """Run the app now (the stages must be ready: check `ready` first); ``request`` is the
        parsed `functions.runtime.events.HttpRequest` (saves the adapter a second parse)."""
        adapter = self._adapter
        if adapter is None or threading.get_ident() != self._adapter_thread:
            adapter = self._bind()
        record.path = "local"  # the dispatcher made ``record`` the current invocation
        response: dict[str, Any] = adapter(event, context, request)
        return response

    def run(self, event: Any, context: Any, record: InvocationRecord, *, needs_model: bool,
            wait_ms: float, request: Any = None) -> dict[str, Any]:
        """Wait for the stages the route needs (at most ``wait_ms`` in all), then run the app.

        The wait for the web stack is reported in ``Server-Timing`` as ``init`` (the rest of
        this environment's init, paid by this request), the wait for the model as ``model``.

        Raises
        ------
        LocalFailed
            A stage the route needs failed to load (tag ``model_error`` for the model,
            ``tool_unavailable`` for the web stack).
        LocalUnavailable
            The stages were not ready within ``wait_ms`` (tag ``timeout_resource``).
        """
        preload = self.preload
        deadline = self._clock_ms() + wait_ms
        needed = [(self.web, "init")]
        if needs_model and self.model is not None:
            needed.append((self.model, "model"))
        for stage, timing in needed:
            if not preload.ready(stage):
                t0 = self._clock_ms()
                preload.wait(stage, max(0.0, deadline - t0) / 1000.0)
                waited = self._clock_ms() - t0
                record.timings_ms[timing] = record.timings_ms.get(timing, 0.0) + waited
                if preload.failed(stage):
                    tag = FailureTag.MODEL_ERROR if stage == self.model else FailureTag.TOOL_UNAVAILABLE
                    raise LocalFailed(f"preload stage {stage!r} failed in this execution environment", tag)
                if not preload.ready(stage):
                    raise LocalUnavailable(
                        f"preload stage {stage!r} not ready after {waited:.0f} ms (the wait admission allowed)"
                    )
        return self.run_now(event, context, record, request)

    def _bind(self) -> Any:
        """The adapter, with an event loop on this thread (Mangum runs the app with
        ``asyncio.get_event_loop()``; the adapter may have been built on the preload thread)."""
        if not getattr(self._loops, "ready", False):
            import asyncio

            asyncio.set_event_loop(asyncio.new_event_loop())
            self._loops.ready = True
        adapter = self.preload.result(self.web)
        self._adapter = adapter
        self._adapter_thread = threading.get_ident()
        return adapter
