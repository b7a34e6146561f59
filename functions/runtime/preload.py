"""Init-phase loading of heavy resources: inline (pre-paid init) or on a background thread.

A :class:`Preloader` runs named stages in order (e.g. ``telemetry``, ``web``, ``model``). Under
provisioned concurrency or SnapStart the handler calls :meth:`Preloader.run` in the init phase,
so the work is paid before any request (and captured in the snapshot). On an on-demand init it
calls :meth:`Preloader.start`, which returns at once; invocations :meth:`Preloader.wait` for
the stage they need, bounded by their time budget.

Imports only the standard library.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from functions.runtime.lifecycle import ExecutionEnvironment, ResourceState

__all__ = ["Preloader", "Stage", "StageFailed"]


class StageFailed(RuntimeError):
    """A preload stage raised; the original exception is the ``__cause__``."""


class Stage(NamedTuple):
    """One preload step (immutable; a ``NamedTuple``: no ``dataclasses`` on the init path).

    Attributes
    ----------
    name : str
        Resource name (``web``, ``model``...), as reported in the environment's resources.
    load : Callable[[], Any]
        Loads the resource and returns it.
    """

    name: str
    load: Callable[[], Any]


class Preloader:
    """Runs stages once, in order, and lets invocations wait for them.

    Parameters
    ----------
    stages : Sequence[Stage]
        Stages in load order (stage names must be unique).
    environment : ExecutionEnvironment
        Receives each stage's state and load time.
    clock_ms : Callable[[], float]
        Monotonic clock, milliseconds.
    between_stages : Callable[[str], None] | None
        Called on the preload's thread before each stage but the first, with its name, when
        the stages run in the background (:meth:`start`): the handler waits there while a cold
        request's overflow call is in flight (bounded), so background imports do not take the
        interpreter from a request. Not called by :meth:`run` (no request runs meanwhile).
    """

    def __init__(
        self,
        stages: Sequence[Stage],
        environment: ExecutionEnvironment,
        clock_ms: Callable[[], float],
        between_stages: Callable[[str], None] | None = None,
    ) -> None:
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"preload stage names must be unique, got {names}")
        self._stages = list(stages)
        self._environment = environment
        self._clock_ms = clock_ms
        self._done = {s.name: threading.Event() for s in stages}
        self._results: dict[str, Any] = {}
        self._errors: dict[str, BaseException] = {}
        self._started_ms: dict[str, float] = {}
        self._finished_ms: dict[str, float] = {}
        self._started = False
        self._start_lock = threading.Lock()
        self._between_stages = between_stages
        self.thread: threading.Thread | None = None
        for stage in stages:
            environment.set_resource(stage.name, ResourceState.NOT_STARTED)

    def _claim(self) -> bool:
        with self._start_lock:
            if self._started:
                return False
            self._started = True
            return True

    def _run_all(self, between: Callable[[str], None] | None = None) -> None:
        for i, stage in enumerate(self._stages):
            if between is not None and i > 0:
                between(stage.name)
            self._environment.set_resource(stage.name, ResourceState.LOADING)
            started = self._started_ms[stage.name] = self._clock_ms()
            try:
                self._results[stage.name] = stage.load()
            except BaseException as exc:  # noqa: BLE001 - recorded, re-raised to waiters
                self._errors[stage.name] = exc
                self._environment.set_resource(
                    stage.name, ResourceState.FAILED, load_ms=self._clock_ms() - started
                )
            else:
                self._environment.set_resource(
                    stage.name, ResourceState.READY, load_ms=self._clock_ms() - started
                )
            self._finished_ms[stage.name] = self._clock_ms()
            self._done[stage.name].set()

    def run(self) -> None:
        """Run every stage now, on this thread (pre-paid init). Idempotent."""
        if self._claim():
            self._run_all()
        else:
            for event in self._done.values():
                event.wait()

    def start(self) -> threading.Thread | None:
        """Run the stages on a daemon thread and return at once (on-demand init).

        Returns
        -------
        threading.Thread | None
            The thread, or None when the stages were already started.
        """
        if not self._claim():
            return None
        self.thread = threading.Thread(target=self._run_all, args=(self._between_stages,),
                                       name="warmstart-preload", daemon=True)
        self.thread.start()
        return self.thread

    def now_ms(self) -> float:
        """Now on the clock the stages are stamped with (monotonic, ms)."""
        return self._clock_ms()

    def has(self, name: str) -> bool:
        """True when a stage ``name`` was declared."""
        return name in self._done

    @property
    def stage_names(self) -> tuple[str, ...]:
        """Stage names in load order."""
        return tuple(s.name for s in self._stages)

    def progress(self) -> tuple[tuple[str, float | None, float | None], ...]:
        """Where the preload stands: ``(name, started_ms, finished_ms)`` per stage, in order.

        Times are on the preloader's ``clock_ms`` (None: not started / not finished). Admission
        turns this into the time left until a stage is ready
        (:func:`functions.runtime.admission.estimate_load_remaining_ms`).
        """
        started, finished = self._started_ms, self._finished_ms
        return tuple((s.name, started.get(s.name), finished.get(s.name)) for s in self._stages)

    def failed(self, name: str) -> bool:
        """True when stage ``name`` finished by raising."""
        return self._done[name].is_set() and name in self._errors

    def ready(self, name: str) -> bool:
        """True when stage ``name`` finished successfully."""
        return self._done[name].is_set() and name not in self._errors

    def done(self, name: str) -> bool:
        """True when stage ``name`` finished, successfully or not."""
        return self._done[name].is_set()

    def wait(self, name: str, timeout_s: float | None) -> bool:
        """Wait until stage ``name`` finished.

        Parameters
        ----------
        name : str
            Stage name.
        timeout_s : float | None
            Longest wait, seconds (None: no limit).

        Returns
        -------
        bool
            True when the stage finished within the timeout (check :meth:`ready` or
            :meth:`result` for success).
        """
        if not self._started:
            self.start()
        return self._done[name].wait(timeout_s)

    def result(self, name: str) -> Any:
        """The value stage ``name`` returned.

        Raises
        ------
        StageFailed
            The stage raised (its exception is chained).
        RuntimeError
            The stage has not finished.
        """
        if not self._done[name].is_set():
            raise RuntimeError(f"preload stage {name!r} has not finished")
        if name in self._errors:
            raise StageFailed(f"preload stage {name!r} failed: {self._errors[name]!r}") from self._errors[name]
        return self._results[name]

    def all_done(self) -> bool:
        """True when every stage finished."""
        return all(e.is_set() for e in self._done.values())

    def wait_all(self, timeout_s: float | None) -> bool:
        """Wait for every stage, at most ``timeout_s`` seconds in total."""
        if not self._started:
            self.start()
        if timeout_s is None:
            for event in self._done.values():
                event.wait()
            return True
        deadline = self._clock_ms() + timeout_s * 1000.0
        for event in self._done.values():
            left_s = max(0.0, (deadline - self._clock_ms()) / 1000.0)
            if not event.wait(left_s):
                return False
        return True
