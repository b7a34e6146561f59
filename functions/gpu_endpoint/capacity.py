"""Finite, planned capacity of the local GPU endpoint: a SageMaker inference component.

The deployed overflow endpoint hosts the model as an inference component whose copy count the
warmer plans through Application Auto Scaling (``sagemaker:inference-component:DesiredCopyCount``,
``warmers.actuators.EndpointCapacityActuator``); it can be scaled to zero copies. This module
lets the local server (`functions.gpu_endpoint.server.create_app` with ``capacity=``) behave the
same way, as the simulator does (`warmers.simulator.endpoint`):

* **Copies and slots.** ``in_service`` copies answer ``concurrent_requests_per_copy`` requests
  each at once (``slots``); more requests wait in one FIFO queue. With no copy in service an
  invocation fails at once (`NoCapacity`; SageMaker answers ``ValidationError``).
* **Provisioning.** A scale-out is in service ``provisioning_delay_s`` after it was asked for
  ("the provisioning process takes several minutes. During that time, any attempts to invoke the
  endpoint will produce an error", endpoint-auto-scaling-zero-instances.html); each raise has
  its own delay. A scale-in takes effect at once: the newest pending copies go first, then
  in-service ones; in-flight requests finish, new ones wait for the smaller slot count.
* **Billing.** Copies are billed per second from the scale-out request (provisioning included)
  until the scale-in, i.e. the integral over wall time of the desired copy count.
* **Control plane.** `handle_control_request` answers the subset of the SageMaker API (awsJson1_1
  protocol, what the real boto3 ``sagemaker`` client speaks) that the warmer calls:
  ``DescribeInferenceComponent`` and ``UpdateInferenceComponentRuntimeConfig``.

Standard library only.

References
----------
https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeInferenceComponent.html
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateInferenceComponentRuntimeConfig.html
https://docs.aws.amazon.com/sagemaker/latest/APIReference/CommonErrors.html (ValidationException,
UnknownOperationException, SerializationException: HTTP 400)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

#: The account and region in the local ARNs.
LOCAL_ACCOUNT = "000000000000"
LOCAL_REGION = "local"
#: Inference component and endpoint name constraint (UpdateInferenceComponentRuntimeConfig,
#: ``InferenceComponentName``: length 0-63, pattern below).
NAME_PATTERN = re.compile(r"[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?")
NAME_MAX_LENGTH = 63
#: What SageMaker's ``InvokeEndpoint`` says (``ValidationError``, HTTP 400) while an inference
#: component has no copy in service: quoted in the AWS Machine Learning Blog post "Unlock cost
#: savings with the new scale down to zero feature in SageMaker Inference" (2024-12-03, section
#: "Test the solution"): "An error occurred (ValidationError) when calling the InvokeEndpoint
#: operation: Inference Component has no capacity to process this request. ...".
NO_CAPACITY_MESSAGE = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
    "in-progress (if configured) or try to increase the capacity by invoking "
    "UpdateInferenceComponentRuntimeConfig API."
)
#: The awsJson1_1 ``X-Amz-Target`` prefix of the SageMaker API (botocore's ``targetPrefix``).
TARGET_PREFIX = "SageMaker."
#: awsJson1_1 content type of control-plane answers.
AMZ_JSON_CONTENT_TYPE = "application/x-amz-json-1.1"

Status = Literal["InService", "Updating"]


class NoCapacity(Exception):
    """No copy of the inference component is in service: the invocation cannot be answered.

    Raised at once by `InferenceComponentCapacity.acquire` (no wait), and to requests queued
    when a scale-in leaves no copy in service.
    """

    def __init__(self, message: str = NO_CAPACITY_MESSAGE) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class _Pending:
    """Copies asked for by one scale-out, in service at ``ready_at_s`` (clock) / ``ready_wall_s``."""

    ready_at_s: float
    ready_wall_s: float
    count: int


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > NAME_MAX_LENGTH or not NAME_PATTERN.fullmatch(value):
        raise ValueError(f"{what} {value!r} must be 1-{NAME_MAX_LENGTH} letters, digits and inner "
                         "hyphens (SageMaker's name pattern)")
    return value


def _check_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        # ValueError, not TypeError: one error kind for every bad count the callers report
        raise ValueError(f"{what} must be an int, got {value!r}")  # noqa: TRY004
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


class InferenceComponentCapacity:
    """One inference component's copies: provisioning, FIFO slots, billing (thread-safe).

    Parameters
    ----------
    name : str
        Inference component name (SageMaker's pattern, 1-63 characters).
    endpoint_name : str
        The endpoint hosting it (same pattern).
    copies : int
        Copies in service from the start (no provisioning delay), >= 0.
    concurrent_requests_per_copy : int
        Requests one copy answers at once, >= 1.
    provisioning_delay_s : float
        From a scale-out request to its copies in service, s, >= 0 (SageMaker: "several
        minutes"; 600 s as the simulator's default, `warmers.simulator.endpoint`).
    poll_interval_s : float
        How often, s, queued invocations check for copies that came into service without other
        traffic (> 0).
    clock : callable
        Monotonic seconds (provisioning and queue waits).
    wall : callable
        Epoch seconds (``CreationTime``, history, billing). Must advance with ``clock``.

    Raises
    ------
    ValueError
        A bad name, a negative or non-int ``copies``, ``concurrent_requests_per_copy`` < 1, a
        negative ``provisioning_delay_s`` or a non-positive ``poll_interval_s``.

    Example
    -------
    >>> t = [0.0]
    >>> ic = InferenceComponentCapacity("overflow-model", endpoint_name="overflow",
    ...     provisioning_delay_s=60.0, clock=lambda: t[0], wall=lambda: t[0])
    >>> ic.set_desired(2); (ic.status(), ic.in_service(), ic.desired())
    ('Updating', 0, 2)
    >>> t[0] = 60.0; (ic.status(), ic.in_service(), ic.billed_copy_seconds())
    ('InService', 2, 120.0)
    """

    def __init__(
        self,
        name: str,
        *,
        endpoint_name: str,
        copies: int = 0,
        concurrent_requests_per_copy: int = 4,
        provisioning_delay_s: float = 600.0,
        poll_interval_s: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.name = _check_name(name, "inference component name")
        self.endpoint_name = _check_name(endpoint_name, "endpoint name")
        copies = _check_count(copies, "copies")
        per_copy = concurrent_requests_per_copy
        if isinstance(per_copy, bool) or not isinstance(per_copy, int) or per_copy < 1:
            raise ValueError(f"concurrent_requests_per_copy must be an int >= 1, got {per_copy!r}")
        if not isinstance(provisioning_delay_s, (int, float)) or not provisioning_delay_s >= 0:
            raise ValueError(f"provisioning_delay_s must be >= 0 s, got {provisioning_delay_s!r}")
        if not isinstance(poll_interval_s, (int, float)) or not poll_interval_s > 0:
            raise ValueError(f"poll_interval_s must be > 0 s, got {poll_interval_s!r}")
        self.concurrent_requests_per_copy = per_copy
        self.provisioning_delay_s = float(provisioning_delay_s)
        self.poll_interval_s = float(poll_interval_s)
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._in_service = copies
        self._pending: list[_Pending] = []
        self._active = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._tickers: set[asyncio.AbstractEventLoop] = set()
        now = float(wall())
        self.creation_time_s = now
        self._modified_s = now
        self._history: list[dict[str, float | int]] = [
            {"at": now, "desired": copies, "in_service": copies}]

    # -- ARNs -------------------------------------------------------------------------------

    @property
    def arn(self) -> str:
        """``arn:aws:sagemaker:local:000000000000:inference-component/NAME``."""
        return f"arn:aws:sagemaker:{LOCAL_REGION}:{LOCAL_ACCOUNT}:inference-component/{self.name}"

    @property
    def endpoint_arn(self) -> str:
        """``arn:aws:sagemaker:local:000000000000:endpoint/ENDPOINT``."""
        return f"arn:aws:sagemaker:{LOCAL_REGION}:{LOCAL_ACCOUNT}:endpoint/{self.endpoint_name}"

    # -- copies -----------------------------------------------------------------------------

    def _refresh_locked(self) -> None:
        """Bring the pending copies whose delay is over into service (history per arrival)."""
        now = self._clock()
        while self._pending and self._pending[0].ready_at_s <= now:
            arrived = self._pending.pop(0)
            self._in_service += arrived.count
            self._history.append({"at": arrived.ready_wall_s, "desired": self._desired_locked(),
                                  "in_service": self._in_service})

    def _desired_locked(self) -> int:
        return self._in_service + sum(p.count for p in self._pending)

    def set_desired(self, n: int) -> None:
        """Ask for ``n`` copies (``UpdateInferenceComponentRuntimeConfig``'s ``CopyCount``).

        A raise above the desired count adds ``n - desired`` copies in service
        ``provisioning_delay_s`` after now (copies in service stay); a cut takes effect at once,
        the newest pending copies first, then in-service ones (in-flight requests finish; when
        no copy is left in service the queued requests get `NoCapacity`). The same count again
        changes nothing.

        Raises
        ------
        ValueError
            ``n`` is negative, a bool or not an int.
        """
        n = _check_count(n, "copy count")
        with self._lock:
            self._refresh_locked()
            desired = self._desired_locked()
            if n == desired:
                return
            now_wall = float(self._wall())
            if n > desired:
                self._pending.append(_Pending(self._clock() + self.provisioning_delay_s,
                                              now_wall + self.provisioning_delay_s, n - desired))
            else:
                cut = desired - n
                while cut and self._pending:
                    newest = self._pending[-1]
                    taken = min(cut, newest.count)
                    newest.count -= taken
                    cut -= taken
                    if newest.count == 0:
                        self._pending.pop()
                self._in_service -= cut
            self._modified_s = now_wall
            self._history.append({"at": now_wall, "desired": n, "in_service": self._in_service})
            self._refresh_locked()  # a zero delay is in service at once
            self._grant_locked()

    def in_service(self) -> int:
        """Copies answering now."""
        with self._lock:
            self._refresh_locked()
            return self._in_service

    def desired(self) -> int:
        """Copies asked for: in service plus pending."""
        with self._lock:
            self._refresh_locked()
            return self._desired_locked()

    def status(self) -> Status:
        """``InService`` when every desired copy serves, else ``Updating``
        (``InferenceComponentStatus``: InService | Creating | Updating | Failed | Deleting)."""
        with self._lock:
            self._refresh_locked()
            return "InService" if self._in_service == self._desired_locked() else "Updating"

    def describe(self) -> dict[str, Any]:
        """The ``DescribeInferenceComponent`` answer.

        Returns
        -------
        dict
            ``InferenceComponentName``, ``InferenceComponentArn``, ``EndpointName``,
            ``EndpointArn``, ``VariantName`` (``AllTraffic``), ``InferenceComponentStatus``,
            ``RuntimeConfig: {"DesiredCopyCount", "CurrentCopyCount"}``, ``CreationTime`` and
            ``LastModifiedTime`` (epoch s as floats, which boto3 parses to datetimes).
        """
        with self._lock:
            self._refresh_locked()
            desired = self._desired_locked()
            return {
                "InferenceComponentName": self.name,
                "InferenceComponentArn": self.arn,
                "EndpointName": self.endpoint_name,
                "EndpointArn": self.endpoint_arn,
                "VariantName": "AllTraffic",
                "InferenceComponentStatus": "InService" if self._in_service == desired
                else "Updating",
                "RuntimeConfig": {"DesiredCopyCount": desired,
                                  "CurrentCopyCount": self._in_service},
                "CreationTime": self.creation_time_s,
                "LastModifiedTime": self._modified_s,
            }

    # -- billing ----------------------------------------------------------------------------

    def history(self) -> list[dict[str, float | int]]:
        """Every change, in time order: ``{"at": epoch_s, "desired": n, "in_service": n}``
        (the creation, each `set_desired` that changed the count, each arrival of pending
        copies)."""
        with self._lock:
            self._refresh_locked()
            return [dict(row) for row in self._history]

    def billed_copy_seconds(self, until_wall_s: float | None = None) -> float:
        """Copy-seconds billed from the creation until ``until_wall_s`` (epoch s; default now).

        The integral over wall time of the desired copy count: pending copies are billed from
        their scale-out request, as SageMaker bills instances while they provision, and a
        scale-in stops billing at once. Times before the creation count nothing.
        """
        rows = self.history()
        until = float(self._wall()) if until_wall_s is None else float(until_wall_s)
        total = 0.0
        for row, following in zip(rows, [*rows[1:], None], strict=True):
            end = until if following is None else min(float(following["at"]), until)
            total += int(row["desired"]) * max(0.0, end - float(row["at"]))
        return total

    def snapshot(self) -> dict[str, Any]:
        """``GET /_capacity``: ``{"inference_component", "desired", "in_service",
        "concurrent_requests_per_copy", "provisioning_delay_s", "billed_copy_s", "history"}``
        (``billed_copy_s`` until now, copy-seconds)."""
        history = self.history()
        return {"inference_component": self.name, "desired": history[-1]["desired"],
                "in_service": history[-1]["in_service"],
                "concurrent_requests_per_copy": self.concurrent_requests_per_copy,
                "provisioning_delay_s": self.provisioning_delay_s,
                "billed_copy_s": self.billed_copy_seconds(), "history": history}

    # -- slots ------------------------------------------------------------------------------

    def slots(self) -> int:
        """Requests answered at once now: ``in_service x concurrent_requests_per_copy``."""
        with self._lock:
            self._refresh_locked()
            return self._in_service * self.concurrent_requests_per_copy

    def in_flight(self) -> int:
        """Requests holding a slot."""
        with self._lock:
            return self._active

    def queue_length(self) -> int:
        """Requests waiting for a slot."""
        with self._lock:
            return sum(1 for w in self._waiters if not w.future.done())

    @staticmethod
    def _call(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> bool:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the waiter's loop is closed: nobody is left to wake
            return False
        return True

    @staticmethod
    def _resolve(future: asyncio.Future[None]) -> None:
        if not future.done():
            future.set_result(None)

    @staticmethod
    def _reject(future: asyncio.Future[None]) -> None:
        if not future.done():
            future.set_exception(NoCapacity())

    def _grant_locked(self) -> None:
        """Hand free slots to the queue's head (FIFO); fail the queue when no copy serves."""
        if self._in_service == 0:
            while self._waiters:
                waiter = self._waiters.popleft()
                self._call(waiter.loop, self._reject, waiter.future)
            return
        slots = self._in_service * self.concurrent_requests_per_copy
        while self._waiters and self._active < slots:
            waiter = self._waiters.popleft()
            if waiter.future.done():  # cancelled while queued
                continue
            waiter.granted = True
            self._active += 1
            if not self._call(waiter.loop, self._resolve, waiter.future):
                self._active -= 1

    def poll(self) -> None:
        """Bring copies whose delay is over into service and wake the waiters they can take."""
        with self._lock:
            self._refresh_locked()
            self._grant_locked()

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.poll()
        with self._lock:
            if any(w.loop is loop for w in self._waiters):
                loop.call_later(self.poll_interval_s, self._tick, loop)
            else:
                self._tickers.discard(loop)

    async def acquire(self) -> float:
        """Take a slot, waiting in FIFO order for one; returns the wait, ms (0.0 when free).

        No timeout of its own (the client's read timeout bounds the wait). A cancelled waiter
        leaves the queue, and gives back a slot it was handed in the meantime.

        Raises
        ------
        NoCapacity
            No copy in service (at once), or none left after a scale-in while queued.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._refresh_locked()
            if self._in_service == 0:
                raise NoCapacity()
            if not self._waiters and self._active < (
                    self._in_service * self.concurrent_requests_per_copy):
                self._active += 1
                return 0.0
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
            started = self._clock()
            if loop not in self._tickers:
                self._tickers.add(loop)
                loop.call_later(self.poll_interval_s, self._tick, loop)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if waiter.granted:
                    self._active -= 1
                    self._grant_locked()
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
            raise
        return (self._clock() - started) * 1000.0

    def release(self) -> None:
        """Give back a slot taken by `acquire` and hand it to the next waiter.

        Raises
        ------
        RuntimeError
            No slot is held.
        """
        with self._lock:
            if self._active <= 0:
                raise RuntimeError("release() without a slot held: call acquire() first")
            self._active -= 1
            self._refresh_locked()
            self._grant_locked()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """``async with capacity.slot() as queue_ms:`` holds a slot for the block (see
        `acquire`; raises `NoCapacity` the same way)."""
        queue_ms = await self.acquire()
        try:
            yield queue_ms
        finally:
            self.release()


# -- SageMaker control plane (awsJson1_1) -----------------------------------------------------


def _error(kind: str, message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"__type": kind, "message": message}


def handle_control_request(capacity: InferenceComponentCapacity, target: str | None,
                           raw: bytes) -> tuple[int, dict[str, Any]]:
    """Answer one SageMaker API call: ``POST /`` with ``X-Amz-Target: SageMaker.<Operation>``.

    Parameters
    ----------
    capacity : InferenceComponentCapacity
        The only inference component known.
    target : str or None
        The ``X-Amz-Target`` header.
    raw : bytes
        The JSON body.

    Returns
    -------
    (int, dict)
        HTTP status and JSON body. 200 with ``DescribeInferenceComponent``'s answer
        (`InferenceComponentCapacity.describe`), or with ``{"InferenceComponentArn"}`` for
        ``UpdateInferenceComponentRuntimeConfig`` (``DesiredRuntimeConfig.CopyCount`` becomes
        `InferenceComponentCapacity.set_desired`). Errors are 400 with
        ``{"__type", "message"}``, as the awsJson1_1 protocol carries them:
        ``UnknownOperationException`` (no or another target), ``SerializationException`` (the
        body is not a JSON object), ``ValidationException`` (a missing or ill-typed member, a
        negative ``CopyCount``, or an unknown component: "Could not find inference component
        ARN"). Never raises for a bad request.
    """
    given = target or ""
    operation = given[len(TARGET_PREFIX):] if given.startswith(TARGET_PREFIX) else None
    if operation not in ("DescribeInferenceComponent", "UpdateInferenceComponentRuntimeConfig"):
        return _error("UnknownOperationException",
                      f"Operation {target!r} is not served here: use X-Amz-Target "
                      "SageMaker.DescribeInferenceComponent or "
                      "SageMaker.UpdateInferenceComponentRuntimeConfig")
    try:
        body = json.loads(raw.decode("utf-8") if raw else "{}")
    except (UnicodeDecodeError, ValueError) as exc:
        return _error("SerializationException", f"The request body is not JSON: {exc}")
    if not isinstance(body, dict):
        return _error("SerializationException", "The request body must be a JSON object")
    name = body.get("InferenceComponentName")
    if not isinstance(name, str) or not name:
        return _error("ValidationException", "1 validation error detected: Value at "
                      "'inferenceComponentName' failed to satisfy constraint: Member must not "
                      "be null and must be a non-empty string")
    if name != capacity.name:
        return _error("ValidationException", "Could not find inference component "
                      f"\"arn:aws:sagemaker:{LOCAL_REGION}:{LOCAL_ACCOUNT}:"
                      f"inference-component/{name}\".")
    if operation == "DescribeInferenceComponent":
        return 200, capacity.describe()
    config = body.get("DesiredRuntimeConfig")
    count = config.get("CopyCount") if isinstance(config, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return _error("ValidationException", f"1 validation error detected: Value {count!r} at "
                      "'desiredRuntimeConfig.copyCount' failed to satisfy constraint: Member "
                      "must be an integer >= 0")
    capacity.set_desired(count)
    return 200, {"InferenceComponentArn": capacity.arn}
