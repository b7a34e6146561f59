"""What the local stack measured during a replay: per-invocation results and sampled state.

:class:`RecordingInvoker` wraps the emulator's ``invoke`` (the port the gateway and the Lambda
REST API both call) and keeps each invocation's result (cold start, init type, REPORT
durations, environment, spillover): gateway invocations under the gateway's request id, which
the client also sees in the ``apigw-requestid`` response header, so client and emulator records
join exactly; direct invocations (the warmer's warm pings) in a list.

:class:`StateSampler` samples the function's execution environments and provisioned
concurrency every ``interval_s`` real seconds, stamped with the stack's (scaled) clock.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.local.clock import Clock
from infra.local.emulator import Emulator, InvokeResult
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


class RecordingInvoker:
    """An ``invoke`` that forwards to the emulator's and records every result.

    Parameters
    ----------
    invoke : callable
        The emulator's bound ``invoke`` (it does the work).
    now_s : callable
        The stack's clock (``t_s`` of each observation).

    Examples
    --------
    >>> recorder = RecordingInvoker(stack.emulator.invoke, stack.clock.time)  # doctest: +SKIP
    >>> stack.emulator.invoke = recorder.invoke      # the gateway and the REST API call it
    """

    def __init__(self, invoke: Callable[..., InvokeResult], now_s: Callable[[], float]) -> None:
        self._invoke = invoke
        self._now_s = now_s
        self._lock = threading.Lock()
        self.observations: dict[str, InvocationObservation] = {}
        self.direct: list[InvocationObservation] = []

    def invoke(self, function_name: str, payload: bytes | None = None, *,
               qualifier: str | None = None, invocation_type: str = "RequestResponse",
               client_context: str | None = None) -> InvokeResult:
        request_id = _gateway_request_id(payload)
        ping = _is_warm_ping(payload)
        t_s = self._now_s()
        try:
            result = self._invoke(function_name, payload, qualifier=qualifier,
                                  invocation_type=invocation_type, client_context=client_context)
        except LambdaApiError as exc:
            throttled = "TooManyRequests" in type(exc).__name__
            self._keep(InvocationObservation(request_id or "", False, None, 0.0, 0.0, None, None,
                                             0, None, False, type(exc).__name__, throttled, t_s,
                                             ping))
            raise
        if invocation_type == "RequestResponse":
            report = result.report
            self._keep(InvocationObservation(
                gateway_request_id=request_id or "", cold_start=result.cold_start,
                init_type=result.init_type,
                duration_ms=report.duration_ms if report else 0.0,
                billed_duration_ms=float(report.billed_duration_ms) if report else 0.0,
                init_duration_ms=report.init_duration_ms if report else None,
                restore_duration_ms=report.restore_duration_ms if report else None,
                memory_mb=report.memory_size_mb if report else 0,
                environment_id=result.environment_id, spillover=result.spillover,
                function_error=result.function_error, t_s=t_s, warm_ping=ping))
        return result

    def _keep(self, obs: InvocationObservation) -> None:
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


def _is_warm_ping(payload: bytes | None) -> bool:
    try:
        event = json.loads(payload or b"{}")
        return isinstance(event, dict) and bool((event.get("warmstart") or {}).get("ping"))
    except (ValueError, AttributeError):
        return False


def _gateway_request_id(payload: bytes | None) -> str | None:
    try:
        event = json.loads(payload or b"{}")
        return str(event["requestContext"]["requestId"])
    except (ValueError, KeyError, TypeError):
        return None


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
