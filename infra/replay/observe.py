"""What the local stack measured during a replay: per-invocation results and sampled state.

:class:`InvocationRecorder` is an invocation listener of the emulator
(:meth:`infra.local.emulator.Emulator.add_listener`: the gateway and the Lambda REST API both
invoke through it) and keeps each invocation's result (cold start, init type, REPORT
durations, environment, spillover): gateway invocations under the gateway's request id, which
the client also sees in the ``apigw-requestid`` response header, so client and emulator records
join exactly; direct invocations (the warmer's warm pings) in a list.

:class:`StateSampler` samples the function's execution environments and provisioned
concurrency every ``interval_s`` real seconds, stamped with the stack's (scaled) clock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from infra.local.clock import Clock
from infra.local.emulator import Emulator, InvocationLog
from infra.local.errors import LambdaApiError


@dataclass(frozen=True)
class InvocationObservation:
    """One invocation as the emulator saw it.

    Attributes
    ----------
    gateway_request_id : str
    cold_start : bool
        A new execution environment was created for this invocation.
    init_type : str or None
        ``on-demand``, ``provisioned-concurrency`` or ``snap-start``.
    duration_ms, billed_duration_ms : float
        REPORT ``Duration`` and ``Billed Duration`` (real ms; billed includes an on-demand init).
    init_duration_ms, restore_duration_ms : float or None
        REPORT ``Init Duration`` / ``Restore Duration`` (real ms) on a cold start.
    memory_mb : int
    environment_id : str or None
    spillover : bool
        Served on demand while the alias had provisioned concurrency configured.
    function_error : str or None
    throttled : bool
        The emulator refused it (``TooManyRequestsException``).
    """

    gateway_request_id: str
    cold_start: bool
    init_type: str | None
    duration_ms: float
    billed_duration_ms: float
    init_duration_ms: float | None
    restore_duration_ms: float | None
    memory_mb: int
    environment_id: str | None
    spillover: bool
    function_error: str | None
    throttled: bool = False
    t_s: float = 0.0
    warm_ping: bool = False


class InvocationRecorder:
    """An emulator invocation listener that keeps every invocation of one function.

    Parameters
    ----------
    function_name : str, optional
        Keep only this function's invocations (default: all).

    Examples
    --------
    >>> recorder = InvocationRecorder("AgentFunction")              # doctest: +SKIP
    >>> stack.emulator.add_listener(recorder)                         # doctest: +SKIP
    """

    def __init__(self, function_name: str | None = None) -> None:
        self._function_name = function_name
        self._lock = threading.Lock()
        self.observations: dict[str, InvocationObservation] = {}
        self.direct: list[InvocationObservation] = []

    def __call__(self, record: InvocationLog) -> None:
        if self._function_name is not None and record.function_name != self._function_name:
            return
        if record.invocation_type != "RequestResponse" and not record.throttled:
            return
        report = record.report
        obs = InvocationObservation(
            gateway_request_id=record.gateway_request_id or "", cold_start=record.cold_start,
            init_type=record.init_type,
            duration_ms=report.duration_ms if report else 0.0,
            billed_duration_ms=float(report.billed_duration_ms) if report else 0.0,
            init_duration_ms=report.init_duration_ms if report else None,
            restore_duration_ms=report.restore_duration_ms if report else None,
            memory_mb=report.memory_size_mb if report else 0,
            environment_id=record.environment_id, spillover=record.spillover,
            function_error=record.error_type or record.function_error,
            throttled=record.throttled, t_s=record.t_s, warm_ping=record.warm_ping)
        with self._lock:
            if obs.gateway_request_id:
                self.observations[obs.gateway_request_id] = obs
            else:
                self.direct.append(obs)

    def get(self, gateway_request_id: str | None) -> InvocationObservation | None:
        if not gateway_request_id:
            return None
        with self._lock:
            return self.observations.get(gateway_request_id)


@dataclass(frozen=True)
class StateSample:
    """The function's state at one instant.

    Attributes
    ----------
    t_s : float
        Stack clock (emulated epoch seconds).
    busy : int
        Environments running an invocation (concurrency).
    environments : int
        Live environments (any state).
    pc_requested, pc_allocated : int
        Provisioned concurrency requested on the alias and allocated (ready environments).
    """

    t_s: float
    busy: int
    environments: int
    pc_requested: int
    pc_allocated: int


class StateSampler:
    """Samples environments and provisioned concurrency of one alias in a thread.

    Parameters
    ----------
    emulator : Emulator
    clock : Clock
        The stack's clock (sample timestamps).
    function_name, alias : str
    interval_s : float
        Real seconds between samples.
    """

    def __init__(self, emulator: Emulator, clock: Clock, function_name: str, alias: str = "live",
                 interval_s: float = 0.1) -> None:
        self._emulator = emulator
        self._clock = clock
        self._fn = function_name
        self._alias = alias
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples: list[StateSample] = []

    def sample(self) -> StateSample:
        envs = self._emulator.environments(self._fn)
        requested = allocated = 0
        try:
            cfg: dict[str, Any] = self._emulator.get_provisioned_concurrency(self._fn, self._alias)
            requested = int(cfg.get("RequestedProvisionedConcurrentExecutions", 0))
            allocated = int(cfg.get("AllocatedProvisionedConcurrentExecutions", 0))
        except LambdaApiError:
            pass
        return StateSample(self._clock.time(), sum(1 for e in envs if e["state"] == "busy"),
                           len(envs), requested, allocated)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.samples.append(self.sample())
            self._stop.wait(max(0.0, self._interval_s - (time.monotonic() - started)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="replay-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
