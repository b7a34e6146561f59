"""The local path: run the app (an ASGI app behind Mangum) in this execution environment.

`LocalPath` waits, within a bound, for the preload stages a route needs (the web stack, the
model), then calls the adapter the web stage built. The warm path (everything loaded) is one
attribute check and the adapter call; the adapter runs the app on the execution environment's
one event loop (`functions.runtime.lifespan.AppLoop`), whichever thread calls.

A failure inside the app (an exception, or a degradable route cut at its budget) is raised as
:class:`AppFailed`, tagged by its cause (:func:`failure_tag`), so the dispatcher answers it
with the route's degraded answer or the JSON error contract, never Starlette's ``text/plain``.

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from functions.runtime.admission.flow import LocalUnavailable
from functions.runtime.errors import AppFailure, FailureTag
from functions.runtime.preload import Preloader
from functions.runtime.telemetry import InvocationRecord

if TYPE_CHECKING:
    from functions.runtime.routes import RouteSpec

__all__ = ["AppFailed", "LocalFailed", "LocalPath", "failure_tag"]

#: Exception class names (anywhere in the MRO) of a downstream that did not answer in time:
#: httpx ``TimeoutException``, botocore ``ReadTimeoutError`` / ``ConnectTimeoutError``,
#: requests ``Timeout``; ``TimeoutError`` (and ``asyncio.TimeoutError``) is checked by type.
_TIMEOUT_NAMES = ("TimeoutException", "ReadTimeoutError", "ConnectTimeoutError", "Timeout")
#: ... of a downstream that could not be reached or broke the exchange: httpx
#: ``TransportError`` (connect, reset, ``RemoteProtocolError`` mid-answer) and
#: ``HTTPStatusError`` (``raise_for_status``), botocore ``EndpointConnectionError``.
_UNAVAILABLE_NAMES = ("TransportError", "HTTPStatusError", "EndpointConnectionError",
                      "ConnectionClosedError")


class LocalFailed(LocalUnavailable):
    """A preload stage the route needs failed: this environment cannot serve it locally."""

    def __init__(self, message: str, tag: FailureTag) -> None:
        super().__init__(message)
        self.tag = tag


class AppFailed(LocalUnavailable):
    """The app failed while serving the request (see :func:`failure_tag` for the tag).

    Attributes
    ----------
    error : BaseException
        What the app raised (``TimeoutError`` when the toolkit cut it at its budget).
    cut : bool
        The toolkit cancelled the route at its budget.
    response : dict[str, Any] | None
        What the app answered before it raised (an exception handler's), in the source's
        format; never sent when it is Starlette's ``text/plain`` 500.
    tag : FailureTag
    """

    def __init__(self, error: BaseException, *, cut: bool,
                 response: dict[str, Any] | None = None) -> None:
        super().__init__(f"the app failed: {type(error).__name__}: {error}"[:500])
        self.error = error
        self.cut = cut
        self.response = response
        self.tag = failure_tag(error, cut=cut)


def failure_tag(error: BaseException, *, cut: bool = False) -> FailureTag:
    """The tag of a failure inside the app.

    ``downstream_timeout``: the toolkit cut the route at its budget, or the app raised a
    timeout (``TimeoutError``, httpx / botocore / requests timeouts); ``tool_unavailable``: a
    downstream refused or reset the connection, broke the exchange mid-answer or answered an
    error status the app raised on (``ConnectionError``, httpx ``TransportError``,
    ``HTTPStatusError``); ``model_error``: the agent's model was not there
    (`functions.runtime.agent_runtime.ModelNotReady`); the app's own tag for a
    `functions.runtime.asgi_stream.StreamAborted`; ``app_error`` otherwise.
    Checked by class name, so no client library (nor the streaming path) is imported.
    """
    names = [cls.__name__ for cls in type(error).__mro__]
    if not cut and "StreamAborted" in names and isinstance(getattr(error, "tag", None), FailureTag):
        return FailureTag(error.tag)  # type: ignore[attr-defined]
    if cut or isinstance(error, TimeoutError) or any(n in _TIMEOUT_NAMES for n in names):
        return FailureTag.DOWNSTREAM_TIMEOUT
    if "ModelNotReady" in names:
        return FailureTag.MODEL_ERROR
    if isinstance(error, ConnectionError) or any(n in _UNAVAILABLE_NAMES for n in names):
        return FailureTag.TOOL_UNAVAILABLE
    return FailureTag.APP_ERROR


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
        self._adapter: Any = None

    def needed(self, route: RouteSpec) -> str:
        """The last preload stage ``route`` needs (the model's, or the web stack's)."""
        return self.model if route.needs_model and self.model is not None else self.web

    def ready(self, needs_model: bool) -> bool:
        """True when the stages a route needs are loaded."""
        preload = self.preload
        if not preload.ready(self.web):
            return False
        return not needs_model or self.model is None or preload.ready(self.model)

    def run_now(self, event: Any, context: Any, record: InvocationRecord,
                request: Any = None, cancel_after_s: float | None = None) -> dict[str, Any]:
        """Run the app now (the stages must be ready: check `ready` first).

        Parameters
        ----------
        request : HttpRequest | None
            The parsed `functions.runtime.events.HttpRequest` (saves the adapter a second
            parse).
        cancel_after_s : float | None
            Cut the app's request after this long, s (a degradable route's budget).

        Raises
        ------
        AppFailed
            The app raised, or was cut at ``cancel_after_s``.
        """
        adapter = self._adapter
        if adapter is None:
            adapter = self._adapter = self.preload.result(self.web)
        record.path = "local"  # the dispatcher made ``record`` the current invocation
        try:
            response: dict[str, Any] = adapter(event, context, request, cancel_after_s)
        except AppFailure as exc:
            raise AppFailed(exc.error, cut=exc.cut, response=exc.response) from exc.error
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
        AppFailed
            The app failed (see `run_now`; never cut: a route admission cuts at its budget
            waits with `wait`, then runs with `run_now`).
        """
        self.wait(record, needs_model=needs_model, wait_ms=wait_ms)
        return self.run_now(event, context, record, request)

    def wait(self, record: InvocationRecord, *, needs_model: bool, wait_ms: float) -> None:
        """Wait for the stages a route needs, at most ``wait_ms`` in all (`run` without the
        app's run; a streaming route then runs the app itself). Raises as `run` does:
        `LocalFailed`, `LocalUnavailable`."""
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
