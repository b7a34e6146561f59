"""The execution environment's event loop and the app's ASGI lifespan, both owned by the toolkit.

**One event loop per execution environment** (:class:`AppLoop`). Every request, the app's
lifespan startup and shutdown run on the same ``asyncio`` loop, whichever thread calls the
handler: a run holds the loop's lock and makes the loop the calling thread's current loop
(Mangum runs the app with ``asyncio.get_event_loop()``), so an ``httpx.AsyncClient`` (or any
object bound to a loop) made at startup or in the app factory works on every invocation and
from every thread. There is no thread-id bookkeeping (Python reuses thread ids once a thread
exits). Lambda runs one invocation at a time per environment; calls from several threads of one
process (local runs, tests) take turns. Between runs the loop is idle, as Lambda's freeze
leaves it anyway.

**The ASGI lifespan** (:class:`Lifespan`) runs once per execution environment: ``startup`` in
the web preload stage (before the snapshot under SnapStart, before the first invocation under
provisioned concurrency, in the background on an on-demand init), ``shutdown`` when the
environment ends. The lifespan state (``scope["state"]``, what a FastAPI ``lifespan`` yields)
is copied into every request's scope, as uvicorn does; ``app.state`` is the app's own object.
Startup and shutdown are bounded: a lifespan that hangs (an ``await`` that never returns, or a
synchronous call that blocks the loop) raises :class:`LifespanTimeout` after ``timeout_s``.

The protocol: ``lifespan.startup`` -> ``lifespan.startup.complete`` | ``.failed``, then
``lifespan.shutdown`` -> ``lifespan.shutdown.complete`` | ``.failed``. An app that raises (or
returns) before it reads the startup message does not support the lifespan (a plain ASGI
callable): it is served without one, as uvicorn's ``lifespan="auto"`` does.

Imports only the standard library (``asyncio`` is imported by the web stage, with Mangum).

References
----------
https://asgi.readthedocs.io/en/latest/specs/lifespan.html (the protocol, ``state``)
https://www.starlette.io/lifespan/ (lifespan state copied into each request)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, MutableMapping
from typing import Any, TypeVar

__all__ = ["AppLoop", "Lifespan", "LifespanFailed", "LifespanTimeout"]

T = TypeVar("T")

#: What the helper thread of a bounded run is given beyond its own timeout to hand the loop
#: back (a cancelled coroutine's ``finally`` blocks), s.
CANCEL_GRACE_S = 1.0


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and let it unwind (its ``finally`` blocks) for at most
    :data:`CANCEL_GRACE_S`: a task left pending would be destroyed with its loop later."""
    task.cancel()
    await asyncio.wait({task}, timeout=CANCEL_GRACE_S)


class LifespanFailed(RuntimeError):
    """The app's lifespan startup (or shutdown) failed; the app's exception is the ``__cause__``
    (a ``lifespan.startup.failed`` without an exception carries the app's message)."""


class LifespanTimeout(LifespanFailed):
    """The app's lifespan startup (or shutdown) did not finish within its bound."""


class AppLoop:
    """The execution environment's one ``asyncio`` event loop, run by whichever thread calls.

    Attributes
    ----------
    loop : asyncio.AbstractEventLoop
        The loop (replaced by `renew` after a SnapStart restore).
    lock : threading.Lock
        Held while the loop runs (one run at a time).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.lock = threading.Lock()

    def run_here(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` to completion on this thread (waits for the loop's lock)."""
        with self.lock:
            asyncio.set_event_loop(self.loop)
            return self.loop.run_until_complete(coroutine)

    def run_bounded(self, make: Callable[[], Coroutine[Any, Any, T]], timeout_s: float,
                    what: str) -> T:
        """Run ``make()`` on the loop from a helper thread, returning within ``timeout_s``.

        The coroutine itself should bound its awaits (`Lifespan` does, and cancels what hangs);
        the helper thread bounds the rest: code that blocks the loop synchronously.

        Parameters
        ----------
        make : Callable[[], Coroutine]
            Builds the coroutine (on the helper thread, with the loop current).
        timeout_s : float
            Longest wait, s.
        what : str
            Named in the timeout's message.

        Raises
        ------
        LifespanTimeout
            The loop was busy or the coroutine blocked it past ``timeout_s`` (the loop then
            stays with the blocked thread: the environment cannot serve, it is misconfigured).
        BaseException
            Whatever the coroutine raised.
        """
        outcome: dict[str, Any] = {}

        def target() -> None:
            if not self.lock.acquire(timeout=timeout_s):
                outcome["busy"] = True
                return
            try:
                asyncio.set_event_loop(self.loop)
                outcome["value"] = self.loop.run_until_complete(make())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                outcome["error"] = exc
            finally:
                self.lock.release()

        thread = threading.Thread(target=target, name="warmstart-lifespan", daemon=True)
        thread.start()
        thread.join(timeout_s + CANCEL_GRACE_S)
        if thread.is_alive() or outcome.get("busy"):
            raise LifespanTimeout(
                f"{what} did not finish within {timeout_s:g} s and blocks the event loop (a "
                "synchronous call inside async code? use an async client, or run it with "
                "asyncio.to_thread)")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]  # type: ignore[no-any-return]

    def renew(self) -> None:
        """A new loop in place of the old one, which is closed as `close` closes it (after a
        SnapStart restore: the snapshot's selector and self-pipe are not this environment's)."""
        with self.lock:
            old, self.loop = self.loop, asyncio.new_event_loop()
            _close_loop(old)

    def close(self, timeout_s: float = CANCEL_GRACE_S) -> bool:
        """Close the loop: tasks still pending on it (an app cut at its budget whose
        cancellation never ran, a lifespan never shut down) are cancelled and given
        ``timeout_s`` to unwind first, and async generators are finalized: a coroutine left to
        the garbage collector with a closed loop raises ``RuntimeError: Event loop is closed``.

        Returns
        -------
        bool
            False when the loop is still held by a run (a coroutine blocking it past its
            bound, see `run_bounded`) after ``timeout_s``: it is left open.
        """
        if not self.lock.acquire(timeout=timeout_s):
            return False
        try:
            _close_loop(self.loop, timeout_s)
        finally:
            self.lock.release()
        return True


def _close_loop(loop: asyncio.AbstractEventLoop, timeout_s: float = CANCEL_GRACE_S) -> None:
    """Cancel ``loop``'s pending tasks (at most ``timeout_s`` to unwind), finalize its async
    generators and close it; a running or closed loop is left as it is."""
    if loop.is_running() or loop.is_closed():
        return
    try:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=timeout_s))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


class Lifespan:
    """Drives one app's ASGI lifespan on an `AppLoop`.

    Parameters
    ----------
    app : ASGI app
        The app (FastAPI, Starlette, any ASGI callable).
    loop : AppLoop
        Where startup, shutdown and the requests run.
    timeout_s : float
        Bound of startup and of shutdown, each, s.

    Attributes
    ----------
    state : dict[str, Any]
        The lifespan state (``scope["state"]``): what the app's lifespan put there.
    supported : bool | None
        None before `startup`; False for an app without a lifespan.
    running : bool
        Startup completed and shutdown has not run.
    """

    def __init__(self, app: Any, loop: AppLoop, *, timeout_s: float) -> None:
        self.app = app
        self.loop = loop
        self.timeout_s = float(timeout_s)
        self.state: dict[str, Any] = {}
        self.supported: bool | None = None
        self.running = False
        self._task: asyncio.Task[None] | None = None
        self._inbox: asyncio.Queue[dict[str, Any]] | None = None
        self._startup: asyncio.Future[bool] | None = None
        self._shutdown: asyncio.Future[None] | None = None
        self._stop_lock = threading.Lock()

    def startup(self) -> None:
        """Run the app's startup now (a fresh state dict).

        Raises
        ------
        LifespanFailed
            Startup raised (chained) or sent ``lifespan.startup.failed``.
        LifespanTimeout
            Startup did not complete within ``timeout_s``.
        """
        self.state = {}
        self.supported = self.loop.run_bounded(self._start, self.timeout_s,
                                               "the app's lifespan startup")
        self.running = bool(self.supported)

    def shutdown(self) -> None:
        """Run the app's shutdown (idempotent; bounded by ``timeout_s``).

        Raises
        ------
        LifespanFailed
            Shutdown raised (chained), sent ``lifespan.shutdown.failed`` or did not finish.
        """
        with self._stop_lock:
            if not self.running:
                return
            self.running = False
            self.loop.run_bounded(self._stop, self.timeout_s, "the app's lifespan shutdown")

    # -- on the loop ----------------------------------------------------------------------
    async def _start(self) -> bool:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        started: asyncio.Future[bool] = loop.create_future()
        stopped: asyncio.Future[None] = loop.create_future()
        self._inbox, self._startup, self._shutdown = inbox, started, stopped
        inbox.put_nowait({"type": "lifespan.startup"})
        scope: MutableMapping[str, Any] = {
            "type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        self._task = loop.create_task(self._main(scope, inbox, started, stopped))
        try:
            return await asyncio.wait_for(asyncio.shield(started), self.timeout_s)
        except TimeoutError:
            await _cancel(self._task)
            raise LifespanTimeout(f"the app's lifespan startup did not complete within "
                                  f"{self.timeout_s:g} s (an await that never returns? bound "
                                  "its timeouts)") from None

    async def _stop(self) -> None:
        inbox, stopped, task = self._inbox, self._shutdown, self._task
        if inbox is None or stopped is None or task is None:
            return
        inbox.put_nowait({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(asyncio.shield(stopped), self.timeout_s)
        except TimeoutError:
            await _cancel(task)
            raise LifespanTimeout(f"the app's lifespan shutdown did not complete within "
                                  f"{self.timeout_s:g} s") from None

    async def _main(self, scope: MutableMapping[str, Any], inbox: asyncio.Queue[dict[str, Any]],
                    started: asyncio.Future[bool], stopped: asyncio.Future[None]) -> None:
        reads = 0
        failed: list[str] = []

        async def receive() -> dict[str, Any]:
            nonlocal reads
            reads += 1
            return await inbox.get()

        async def send(message: dict[str, Any]) -> None:
            kind = message.get("type")
            if kind == "lifespan.startup.complete" and not started.done():
                started.set_result(True)
            elif kind == "lifespan.shutdown.complete" and not stopped.done():
                stopped.set_result(None)
            elif kind in ("lifespan.startup.failed", "lifespan.shutdown.failed"):
                failed.append(str(message.get("message", "")))

        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the app's own failure, handed on
            if not started.done():
                if reads == 0:  # raised before reading the startup: no lifespan support
                    started.set_result(False)
                else:
                    error = LifespanFailed(f"the app's lifespan startup raised "
                                           f"{type(exc).__name__}: {exc}")
                    error.__cause__ = exc
                    started.set_exception(error)
            elif not stopped.done():
                error = LifespanFailed(f"the app's lifespan shutdown raised "
                                       f"{type(exc).__name__}: {exc}")
                error.__cause__ = exc
                stopped.set_exception(error)
            return
        # the app returned
        if not started.done():
            if failed:
                started.set_exception(LifespanFailed(f"the app's lifespan startup failed: "
                                                     f"{failed[0][-2000:]}"))
            else:  # returned without a startup answer: no lifespan support
                started.set_result(False)
        elif not stopped.done():
            if failed:
                stopped.set_exception(LifespanFailed(f"the app's lifespan shutdown failed: "
                                                     f"{failed[-1][-2000:]}"))
            else:
                stopped.set_result(None)
