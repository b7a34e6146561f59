"""Circuit breaker states with an injected clock, and the overflow client's pure helpers."""

from __future__ import annotations

import io
import threading
import time

import pytest

from functions.runtime.admission import DEFAULT_OVERFLOW_P95_MS
from functions.runtime.breaker import BreakerState, CircuitBreaker
from functions.runtime.overflow import (
    DEFAULT_CLIENT_INIT_P95_MS,
    OverflowClient,
    OverflowModelError,
    OverflowUnavailable,
    checked,
    split_timeouts_s,
    timeout_bucket_s,
    validate_json_object,
)


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 0.0

    def __call__(self) -> float:
        return self.now_ms


def test_opens_after_threshold_consecutive_failures_only() -> None:
    clock = FakeClock()
    b = CircuitBreaker(clock, failure_threshold=3, cooldown_ms=1000)
    b.record_failure()
    b.record_failure()
    b.record_success()  # resets the count
    b.record_failure()
    b.record_failure()
    assert b.state is BreakerState.CLOSED and b.allow()
    b.record_failure()
    assert b.state is BreakerState.OPEN
    assert not b.allow() and not b.available()


def test_half_open_after_cooldown_single_probe_then_close_or_reopen() -> None:
    clock = FakeClock()
    b = CircuitBreaker(clock, failure_threshold=1, cooldown_ms=1000)
    b.record_failure()
    clock.now_ms = 999
    assert b.state is BreakerState.OPEN and not b.allow()
    clock.now_ms = 1000  # cool-down exactly over
    assert b.state is BreakerState.HALF_OPEN and b.available()
    assert b.allow()  # the probe
    assert not b.allow()  # only one probe
    assert b.snapshot().probe_in_flight and not b.available()
    b.record_failure()  # probe failed -> open again, new cool-down from now
    assert b.state is BreakerState.OPEN and b.snapshot().opened_at_ms == 1000
    clock.now_ms = 2000
    assert b.allow()
    b.record_success()
    assert b.state is BreakerState.CLOSED and b.snapshot().consecutive_failures == 0


def test_release_frees_the_probe_slot() -> None:
    clock = FakeClock()
    b = CircuitBreaker(clock, failure_threshold=1, cooldown_ms=10)
    b.record_failure()
    clock.now_ms = 10
    assert b.allow()
    b.release()
    assert b.allow()


def test_breaker_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="failure_threshold must be >= 1"):
        CircuitBreaker(FakeClock(), failure_threshold=0)
    with pytest.raises(ValueError, match="cooldown_ms must be > 0"):
        CircuitBreaker(FakeClock(), cooldown_ms=0)


def test_timeout_buckets_never_exceed_the_budget() -> None:
    assert timeout_bucket_s(49.9) is None
    assert timeout_bucket_s(50) == 0.05
    assert timeout_bucket_s(1999) == 1.5
    assert timeout_bucket_s(2000) == 2.0
    assert timeout_bucket_s(10**9) == 60.0
    for budget in range(50, 5000, 7):
        bucket = timeout_bucket_s(budget)
        assert bucket is not None
        connect, read = split_timeouts_s(bucket, 1.0)
        assert connect + read == pytest.approx(bucket) and connect + read <= budget / 1000 + 1e-9
    assert split_timeouts_s(8.0, 1.0) == (1.0, 7.0)


def test_default_answer_check_accepts_any_json_object() -> None:
    ok = {"answer": "42", "sources": []}  # not an intent answer: the toolkit knows no agent
    assert validate_json_object(ok) is ok
    for bad, kind in [([1], "list"), ("text", "str"), (None, "NoneType"), (3.5, "float")]:
        with pytest.raises(OverflowModelError, match=f"overflow answer is {kind}, expected an object"):
            validate_json_object(bad)


def test_a_routes_answer_check_is_wrapped_into_model_errors() -> None:
    """GIVEN a route's own overflow_answer check (raises ValueError/TypeError/KeyError), WHEN
    it is wrapped with `checked`, THEN each rejection is an OverflowModelError (tag
    model_error) naming the route's reason, a non-object answer is refused before the check
    runs, and a check returning something else than a dict is refused too."""
    seen: list[object] = []

    def check_answer(body: dict) -> dict:
        seen.append(body)
        if "answer" not in body:
            raise KeyError("answer")
        if not isinstance(body["answer"], str):
            raise TypeError("answer must be a string")
        if not body["answer"]:
            raise ValueError("answer is empty")
        return {"answer": body["answer"]}  # shaped: extra fields dropped

    run = checked(check_answer)
    assert run({"answer": "yes", "extra": 1}) == {"answer": "yes"}
    for bad, message in [({}, "'answer'"), ({"answer": 3}, "answer must be a string"),
                         ({"answer": ""}, "answer is empty")]:
        with pytest.raises(OverflowModelError, match=message) as info:
            run(bad)
        assert str(info.value).startswith("overflow answer rejected by the route's check: ")
        assert info.value.tag == "model_error"
    calls = len(seen)
    with pytest.raises(OverflowModelError, match="overflow answer is list, expected an object"):
        run([1, 2])
    assert len(seen) == calls  # the route's check never saw a non-object
    with pytest.raises(OverflowModelError, match="returned list, expected a dict"):
        checked(lambda body: [body])({"a": 1})
    # an overflow failure raised by the check itself passes through as it is
    unavailable = OverflowUnavailable("endpoint says busy")

    def busy(body: dict) -> dict:
        raise unavailable

    with pytest.raises(OverflowUnavailable) as raised:
        checked(busy)({"a": 1})
    assert raised.value is unavailable


def test_client_rejects_bad_settings_and_payloads() -> None:
    with pytest.raises(ValueError, match="endpoint_name must be a non-empty string"):
        OverflowClient("")
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        OverflowClient("e", max_attempts=0)
    made: list[tuple[float, float]] = []
    client = OverflowClient("e", client_factory=lambda c, r: made.append((c, r)) or object())
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        client.invoke({"text": object()}, budget_ms=1000)
    assert made == []
    # before any client exists the estimate includes the client's import + creation
    # (the awscrt client's measured p95) on top of the call's seed
    state = client.state()
    assert state.configured and state.usable
    assert state.latency_p95_ms == DEFAULT_OVERFLOW_P95_MS + DEFAULT_CLIENT_INIT_P95_MS == 270.0
    assert not client.client_ready
    client.prewarm(2000)
    assert made == [(0.5, 1.5)] and client.client_ready
    assert client.state().latency_p95_ms == DEFAULT_OVERFLOW_P95_MS


def test_cold_overflow_estimate_counts_only_what_is_left_of_a_running_prewarm() -> None:
    # GIVEN an overflow client whose creation (boto3 import) is under way in the preload
    clock = FakeClock()
    release = threading.Event()
    made: list[object] = []

    def slow_factory(*timeouts: float) -> object:
        release.wait(5.0)  # the prewarm is still making the client
        made.append(timeouts)
        return object()

    client = OverflowClient("ep", client_factory=slow_factory, clock_ms=clock,
                            client_init_p95_ms=800.0)
    base_ms = client.latency.p95_ms
    # BEFORE any prewarm: the whole client-creation p95 is counted
    assert client.state().latency_p95_ms == base_ms + 800.0
    worker = threading.Thread(target=client.prewarm)
    worker.start()
    try:
        for _ in range(500):  # wait (at most 5 s) until the prewarm has started
            if client._prewarm_started_ms is not None:
                break
            time.sleep(0.01)
        assert client._prewarm_started_ms is not None
        # WHEN 500 ms of the prewarm have passed
        clock.now_ms += 500.0
        # THEN only the remaining 300 ms are counted, and never less than nothing
        assert client.state().latency_p95_ms == pytest.approx(base_ms + 300.0)
        assert client.state().client_init_ms == pytest.approx(300.0)  # row 7b's bounded wait
        clock.now_ms += 5000.0
        assert client.state().latency_p95_ms == pytest.approx(base_ms)
    finally:
        release.set()
        worker.join(5.0)
    # AND once the client exists no creation time is counted
    assert made and client.state().latency_p95_ms == base_ms
    assert client.state().client_init_ms == 0.0


def test_wait_idle_waits_for_a_call_in_flight_and_no_longer() -> None:
    """GIVEN a call in flight (its client's answer held), WHEN the preload asks to wait for idle,
    THEN it waits (here: past a short bound, False) until the call ends, then returns True at
    once; with no call in flight it never waits."""
    release = threading.Event()

    class HeldClient:
        def invoke_endpoint(self, **_: object) -> dict[str, object]:
            release.wait(5.0)
            return {"Body": io.BytesIO(b'{"intent": "x"}')}

    client = OverflowClient("ep", client_factory=lambda c, r: HeldClient())
    assert client.wait_idle(0.0) is True
    answers: list[object] = []
    caller = threading.Thread(target=lambda: answers.append(
        client.invoke({"text": "hi"}, budget_ms=5000).body))
    caller.start()
    try:
        for _ in range(500):  # at most 5 s until the call is under way
            if client._in_flight:
                break
            time.sleep(0.01)
        assert client.wait_idle(0.05) is False  # the call still holds its answer
        waiter_done: list[bool] = []
        waiter = threading.Thread(target=lambda: waiter_done.append(client.wait_idle(5.0)))
        waiter.start()
        time.sleep(0.05)
        assert waiter_done == []  # still waiting
        release.set()
        waiter.join(5.0)
        assert waiter_done == [True]
    finally:
        release.set()
        caller.join(5.0)
    assert answers == [{"intent": "x"}] and client.wait_idle(0.0) is True


def test_prewarm_starts_the_calls_worker_thread_so_a_cold_call_does_not() -> None:
    """GIVEN a client with the hard deadline (calls run on its executor), WHEN the preload
    prewarms it, THEN the executor's worker thread is already running, and the first call runs
    on that same thread (starting one cost a cold request 4-9 ms); without the hard deadline no
    thread is made."""
    ran_on: list[str] = []

    class Client:
        def invoke_endpoint(self, **_: object) -> dict[str, object]:
            ran_on.append(threading.current_thread().name)
            return {"Body": io.BytesIO(b'{"intent": "x"}')}

    client = OverflowClient("ep", client_factory=lambda c, r: Client())
    before = {t.ident for t in threading.enumerate()}
    client.prewarm()
    started = [t for t in threading.enumerate()
               if t.ident not in before and t.name.startswith("overflow")]
    assert len(started) == 1 and started[0].is_alive()
    assert client.invoke({"text": "hi"}, budget_ms=5000).body == {"intent": "x"}
    assert ran_on == [started[0].name]
    client.close()

    inline = OverflowClient("ep", client_factory=lambda c, r: Client(), hard_deadline=False)
    inline.prewarm()
    assert inline._executor is None


def test_a_fork_after_close_gets_a_working_executor_as_a_snapshot_restore_does() -> None:
    """GIVEN a prewarmed client (its worker thread running), WHEN it is closed for a snapshot
    and the process forks (the local emulator's SnapStart restore: only the forking thread
    survives), THEN the child's prewarm and first call work at once: no executor whose worker
    died in the fork is kept (before: the restore's prewarm waited on it until the 10 s
    restore timeout)."""
    import os

    class Client:
        def invoke_endpoint(self, **_: object) -> dict[str, object]:
            return {"Body": io.BytesIO(b'{"intent": "x"}')}

    client = OverflowClient("ep", client_factory=lambda c, r: Client())
    client.prewarm()
    client.close()  # before_snapshot
    assert client._executor is None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the restored environment
        try:
            t0 = time.monotonic()
            client.prewarm()  # after_restore
            ok = client.invoke({"text": "hi"}, budget_ms=2000).body == {"intent": "x"}
            os.write(write, b"ok" if ok and time.monotonic() - t0 < 1.0 else b"slow")
        finally:
            os._exit(0)
    os.close(write)
    try:
        got = b""
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            chunk = os.read(read, 16)
            if not chunk:
                break
            got += chunk
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert got == b"ok"
