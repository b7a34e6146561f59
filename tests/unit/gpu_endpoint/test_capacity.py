"""The local endpoint's inference-component capacity: provisioning, FIFO slots, billing, control
plane (`functions.gpu_endpoint.capacity`), with an injected clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import pytest

from functions.gpu_endpoint.capacity import (
    NO_CAPACITY_MESSAGE,
    InferenceComponentCapacity,
    NoCapacity,
    handle_control_request,
)

WALL0 = 1_700_000_000.0


class FakeClock:
    """Monotonic seconds ``t``; wall time is ``WALL0 + t`` (the two advance together)."""

    def __init__(self) -> None:
        self.t = 0.0

    def clock(self) -> float:
        return self.t

    def wall(self) -> float:
        return WALL0 + self.t


def _ic(clk: FakeClock, **kw: Any) -> InferenceComponentCapacity:
    kw.setdefault("provisioning_delay_s", 600.0)
    return InferenceComponentCapacity("overflow-model", endpoint_name="overflow",
                                      poll_interval_s=0.005, clock=clk.clock, wall=clk.wall, **kw)


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 5.0))


async def _until(predicate: Any) -> None:
    """Let the loop run until ``predicate()`` holds (bounded by `_run`'s timeout)."""
    while not predicate():
        await asyncio.sleep(0.001)


async def _queued(ic: InferenceComponentCapacity, n: int) -> None:
    await _until(lambda: ic.queue_length() == n)


def test_initial_copies_serve_at_once() -> None:
    ic = _ic(FakeClock(), copies=2, concurrent_requests_per_copy=3)
    assert (ic.in_service(), ic.desired(), ic.status(), ic.slots()) == (2, 2, "InService", 6)


def test_scale_out_is_in_service_after_the_provisioning_delay() -> None:
    clk = FakeClock()
    ic = _ic(clk)
    ic.set_desired(2)
    clk.t = 599.9
    assert (ic.in_service(), ic.desired(), ic.status()) == (0, 2, "Updating")
    assert ic.describe()["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 0}
    clk.t = 600.0
    assert (ic.in_service(), ic.desired(), ic.status()) == (2, 2, "InService")


def test_two_raises_minutes_apart_each_have_their_own_delay() -> None:
    clk = FakeClock()
    ic = _ic(clk, copies=1)
    ic.set_desired(2)
    clk.t = 300.0
    ic.set_desired(4)
    clk.t = 600.0
    assert (ic.in_service(), ic.desired(), ic.status()) == (2, 4, "Updating")
    clk.t = 900.0
    assert (ic.in_service(), ic.desired(), ic.status()) == (4, 4, "InService")


def test_scale_in_is_at_once_newest_pending_first() -> None:
    clk = FakeClock()
    ic = _ic(clk, copies=2)
    ic.set_desired(3)            # +1 pending, ready at 600
    clk.t = 100.0
    ic.set_desired(5)            # +2 pending, ready at 700
    ic.set_desired(4)            # cuts one of the newest raise
    assert (ic.in_service(), ic.desired()) == (2, 4)
    clk.t = 600.0
    assert ic.in_service() == 3  # the first raise is untouched
    ic.set_desired(1)            # the last pending copy, then two in service, at once
    assert (ic.in_service(), ic.desired(), ic.status()) == (1, 1, "InService")
    clk.t = 800.0
    assert ic.in_service() == 1  # nothing pending came back


def test_zero_delay_is_in_service_at_once_and_same_count_changes_nothing() -> None:
    clk = FakeClock()
    ic = _ic(clk, provisioning_delay_s=0.0)
    ic.set_desired(1)
    assert (ic.in_service(), ic.status()) == (1, "InService")
    rows = len(ic.history())
    ic.set_desired(1)
    assert len(ic.history()) == rows


def test_billing_integrates_desired_copies_over_wall_time_and_history_records_each_change(
) -> None:
    """GIVEN 1 copy from the start, a raise to 3 at 100 s (in service at 160 s) and a cut to 0
    at 400 s THEN 1x100 + 3x300 = 1000 copy-seconds by 500 s (provisioning billed)."""
    clk = FakeClock()
    ic = _ic(clk, copies=1, provisioning_delay_s=60.0)
    clk.t = 100.0
    ic.set_desired(3)
    clk.t = 400.0
    ic.set_desired(0)
    assert ic.history() == [
        {"at": WALL0, "desired": 1, "in_service": 1},
        {"at": WALL0 + 100.0, "desired": 3, "in_service": 1},
        {"at": WALL0 + 160.0, "desired": 3, "in_service": 3},
        {"at": WALL0 + 400.0, "desired": 0, "in_service": 0},
    ]
    clk.t = 500.0
    assert ic.billed_copy_seconds() == pytest.approx(1000.0)
    assert ic.billed_copy_seconds(WALL0 + 130.0) == pytest.approx(100.0 + 3 * 30.0)
    assert ic.billed_copy_seconds(WALL0 - 50.0) == 0.0
    snap = ic.snapshot()
    assert snap["billed_copy_s"] == pytest.approx(1000.0)
    assert (snap["desired"], snap["in_service"], snap["inference_component"]) == (
        0, 0, "overflow-model")
    assert snap["history"] == ic.history()


def test_describe_has_the_describe_inference_component_shape() -> None:
    clk = FakeClock()
    ic = _ic(clk)
    clk.t = 5.0
    ic.set_desired(1)
    out = ic.describe()
    assert out == {
        "InferenceComponentName": "overflow-model",
        "InferenceComponentArn":
            "arn:aws:sagemaker:local:000000000000:inference-component/overflow-model",
        "EndpointName": "overflow",
        "EndpointArn": "arn:aws:sagemaker:local:000000000000:endpoint/overflow",
        "VariantName": "AllTraffic",
        "InferenceComponentStatus": "Updating",
        "RuntimeConfig": {"DesiredCopyCount": 1, "CurrentCopyCount": 0},
        "CreationTime": WALL0,
        "LastModifiedTime": WALL0 + 5.0,
    }


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": ""}, "inference component name must be a non-empty string"),
    ({"name": "bad_name"}, "SageMaker's name pattern"),
    ({"name": "x" * 64}, "SageMaker's name pattern"),
    ({"endpoint_name": "-bad"}, "endpoint name '-bad'"),
    ({"copies": -1}, "copies must be >= 0"),
    ({"copies": True}, "copies must be an int"),
    ({"copies": 1.0}, "copies must be an int"),
    ({"concurrent_requests_per_copy": 0}, "concurrent_requests_per_copy must be an int >= 1"),
    ({"provisioning_delay_s": -1.0}, "provisioning_delay_s must be >= 0"),
    ({"provisioning_delay_s": float("nan")}, "provisioning_delay_s must be >= 0"),
    ({"poll_interval_s": 0.0}, "poll_interval_s must be > 0"),
])
def test_constructor_refuses_bad_values(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"name": "overflow-model", "endpoint_name": "overflow", **kwargs}
    with pytest.raises(ValueError, match=message):
        InferenceComponentCapacity(args.pop("name"), **args)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2", None])
def test_set_desired_refuses_bad_counts_and_changes_nothing(bad: Any) -> None:
    ic = _ic(FakeClock(), copies=1)
    with pytest.raises(ValueError, match="copy count must be"):
        ic.set_desired(bad)
    assert (ic.desired(), len(ic.history())) == (1, 1)


def test_no_copy_in_service_fails_at_once_even_while_provisioning() -> None:
    clk = FakeClock()
    ic = _ic(clk)
    ic.set_desired(1)
    with pytest.raises(NoCapacity) as info:
        _run(ic.acquire())
    assert info.value.message == NO_CAPACITY_MESSAGE
    assert (ic.in_flight(), ic.queue_length()) == (0, 0)


def test_waiters_are_served_fifo_and_report_their_wait() -> None:
    clk = FakeClock()
    ic = _ic(clk, copies=1, concurrent_requests_per_copy=1)
    order: list[str] = []

    async def request(tag: str) -> float:
        async with ic.slot() as queue_ms:
            order.append(tag)
            await asyncio.sleep(0)
        return queue_ms

    async def main() -> list[float]:
        first = await ic.acquire()
        assert first == 0.0
        tasks = []
        for tag in "bcd":
            tasks.append(asyncio.create_task(request(tag)))
            await _queued(ic, len(tasks))
        clk.t = 0.25
        ic.release()
        return list(await asyncio.gather(*tasks))

    waits = _run(main())
    assert order == ["b", "c", "d"]
    assert waits[0] == pytest.approx(250.0)   # queued at t=0, slot freed at t=0.25 s
    assert (ic.in_flight(), ic.queue_length()) == (0, 0)


def test_a_cancelled_waiter_leaves_the_queue_and_leaks_no_slot() -> None:
    ic = _ic(FakeClock(), copies=1, concurrent_requests_per_copy=1)

    async def main() -> None:
        await ic.acquire()
        queued = asyncio.create_task(ic.acquire())
        await _until(lambda: ic.queue_length() == 1)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert ic.queue_length() == 0
        # handed a slot and cancelled before it resumed: the slot comes back
        handed = asyncio.create_task(ic.acquire())
        await _until(lambda: ic.queue_length() == 1)
        ic.release()                      # grants the slot to ``handed``
        assert ic.in_flight() == 1
        handed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handed
        assert ic.in_flight() == 0
        assert await ic.acquire() == 0.0  # the slot is free at once
        ic.release()

    _run(main())
    assert (ic.in_flight(), ic.queue_length()) == (0, 0)


def test_waiters_wake_when_a_copy_comes_into_service_without_other_traffic() -> None:
    clk = FakeClock()
    ic = _ic(clk, copies=1, concurrent_requests_per_copy=1, provisioning_delay_s=10.0)

    async def main() -> float:
        await ic.acquire()                # held for the whole test: no release wakes anyone
        queued = asyncio.create_task(ic.acquire())
        await _until(lambda: ic.queue_length() == 1)
        ic.set_desired(2)
        await asyncio.sleep(0.02)         # several poll intervals: still provisioning
        assert not queued.done()
        clk.t = 10.0                      # the copy is in service; the periodic check sees it
        return await queued

    assert _run(main()) == pytest.approx(10_000.0)
    assert ic.in_flight() == 2


def test_scale_in_lets_in_flight_finish_and_new_requests_wait_for_fewer_slots() -> None:
    ic = _ic(FakeClock(), copies=2, concurrent_requests_per_copy=1)

    async def main() -> None:
        await ic.acquire()
        await ic.acquire()
        ic.set_desired(1)
        assert (ic.in_flight(), ic.slots()) == (2, 1)
        waiting = asyncio.create_task(ic.acquire())
        await _until(lambda: ic.queue_length() == 1)
        ic.release()
        await asyncio.sleep(0.02)
        assert not waiting.done()         # one in flight = the one slot left
        ic.release()
        await waiting
        ic.release()

    _run(main())
    assert ic.in_flight() == 0


def test_scale_in_to_zero_fails_the_queued_requests() -> None:
    ic = _ic(FakeClock(), copies=1, concurrent_requests_per_copy=1)

    async def main() -> None:
        await ic.acquire()
        queued = asyncio.create_task(ic.acquire())
        await _until(lambda: ic.queue_length() == 1)
        ic.set_desired(0)
        with pytest.raises(NoCapacity):
            await queued
        ic.release()                      # the in-flight one finishes

    _run(main())
    assert (ic.in_flight(), ic.queue_length()) == (0, 0)


def test_release_without_a_slot_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="without a slot held"):
        _ic(FakeClock(), copies=1).release()


def _control(ic: InferenceComponentCapacity, operation: str | None,
             body: Any) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return handle_control_request(ic, None if operation is None else f"SageMaker.{operation}",
                                  raw)


def test_control_plane_describe_and_update() -> None:
    clk = FakeClock()
    ic = _ic(clk, provisioning_delay_s=1.0)
    status, out = _control(ic, "UpdateInferenceComponentRuntimeConfig", {
        "InferenceComponentName": "overflow-model", "DesiredRuntimeConfig": {"CopyCount": 2}})
    assert (status, out) == (200, {"InferenceComponentArn": ic.arn})
    status, out = _control(ic, "DescribeInferenceComponent",
                           {"InferenceComponentName": "overflow-model"})
    assert status == 200 and out == ic.describe()
    assert out["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 0}


@pytest.mark.parametrize(("operation", "body", "kind", "message"), [
    (None, {}, "UnknownOperationException", "is not served here"),
    ("CreateEndpoint", {}, "UnknownOperationException", "SageMaker.CreateEndpoint"),
    ("DescribeInferenceComponent", b"{not json", "SerializationException", "not JSON"),
    ("DescribeInferenceComponent", b"\xff\xfe", "SerializationException", "not JSON"),
    ("DescribeInferenceComponent", [1], "SerializationException", "JSON object"),
    ("DescribeInferenceComponent", {}, "ValidationException", "inferenceComponentName"),
    ("DescribeInferenceComponent", {"InferenceComponentName": 7}, "ValidationException",
     "inferenceComponentName"),
    ("DescribeInferenceComponent", {"InferenceComponentName": "other"}, "ValidationException",
     "Could not find inference component"),
    ("UpdateInferenceComponentRuntimeConfig", {"InferenceComponentName": "overflow-model"},
     "ValidationException", "desiredRuntimeConfig.copyCount"),
    ("UpdateInferenceComponentRuntimeConfig", {"InferenceComponentName": "overflow-model",
                                               "DesiredRuntimeConfig": {"CopyCount": -1}},
     "ValidationException", "Value -1"),
    ("UpdateInferenceComponentRuntimeConfig", {"InferenceComponentName": "overflow-model",
                                               "DesiredRuntimeConfig": {"CopyCount": "2"}},
     "ValidationException", "desiredRuntimeConfig.copyCount"),
    ("UpdateInferenceComponentRuntimeConfig", {"InferenceComponentName": "overflow-model",
                                               "DesiredRuntimeConfig": {"CopyCount": True}},
     "ValidationException", "desiredRuntimeConfig.copyCount"),
    ("UpdateInferenceComponentRuntimeConfig", {"InferenceComponentName": "overflow-model",
                                               "DesiredRuntimeConfig": 3},
     "ValidationException", "desiredRuntimeConfig.copyCount"),
])
def test_control_plane_refuses_bad_requests_with_400_and_changes_nothing(
    operation: str | None, body: Any, kind: str, message: str,
) -> None:
    ic = _ic(FakeClock(), copies=1)
    status, out = _control(ic, operation, body)
    assert status == 400 and out["__type"] == kind and message in out["message"]
    assert (ic.desired(), len(ic.history())) == (1, 1)
