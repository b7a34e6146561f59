"""The emulator's parts work alone, from an EmulatorContext (issue 23 item 3: parts, not mixins).

Each test makes only the parts it names: no Emulator, no reaper thread. The environments are
real runtime processes (the emulator's bootstrap) answering a real Runtime API.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from infra.local.emulator.concurrency import Concurrency
from infra.local.emulator.config import EmulatorConfig
from infra.local.emulator.core import EmulatorContext, FunctionPool
from infra.local.emulator.pool import EnvironmentPool
from infra.local.emulator.processes import Processes
from infra.local.emulator.records import billed_report
from infra.local.emulator.runtime_api import Invocation
from infra.local.errors import ResourceNotFoundException, TooManyRequestsException
from infra.local.spec import FunctionSpec


class RecordedMetrics:
    """A MetricsSink that keeps what it is given (the emulator's metrics are this protocol)."""

    def __init__(self) -> None:
        self.points: list[tuple[str, float, str, str | None]] = []

    def record(self, metric: str, value: float, function_name: str, resource: str | None) -> None:
        self.points.append((metric, value, function_name, resource))


@pytest.fixture
def echo_code(tmp_path: Path) -> Path:
    (tmp_path / "echo.py").write_text(textwrap.dedent("""
        import os
        def handler(event, context):
            return {"pid": os.getpid(), "event": event}
    """))
    return tmp_path


def test_concurrency_alone_admits_up_to_the_reserved_limit_then_throttles(tmp_path):
    # GIVEN a context and only the Concurrency part, a function with reserved concurrency 2
    metrics = RecordedMetrics()
    context = EmulatorContext(EmulatorConfig(account_concurrency_limit=5), metrics=metrics)
    concurrency = Concurrency(context, Processes(context))
    fs = FunctionPool(FunctionSpec(name="fn", handler="h.handler", code_dir=tmp_path,
                                   reserved_concurrency=2))
    # WHEN three invocations ask to enter
    for _ in range(2):
        concurrency.check(fs, "fn:live")
        concurrency.enter(fs, "fn:live")
    # THEN the third is throttled with the reserved-concurrency reason, counted as a Throttles
    with pytest.raises(TooManyRequestsException) as raised:
        concurrency.check(fs, "fn:live")
    assert raised.value.reason == "ReservedFunctionConcurrentInvocationLimitExceeded"
    assert ("Throttles", 1, "fn", "fn:live") in metrics.points
    assert [p[1] for p in metrics.points if p[0] == "ConcurrentExecutions" and p[3] == "fn:live"] == [1, 2]
    # AND one leaving makes room again
    concurrency.leave(fs, "fn:live")
    concurrency.check(fs, "fn:live")
    assert fs.in_flight == 1 and fs.in_flight_by_resource == {"fn:live": 1}


def test_concurrency_alone_answers_the_api_for_functions_in_the_context(tmp_path):
    context = EmulatorContext(EmulatorConfig(account_concurrency_limit=7))
    concurrency = Concurrency(context, Processes(context))
    context.functions["fn"] = FunctionPool(FunctionSpec(name="fn", handler="h.handler", code_dir=tmp_path))
    assert concurrency.put_function_concurrency("fn", 3) == 3
    assert concurrency.get_function_concurrency("fn") == 3
    assert concurrency.account_settings()["AccountLimit"]["UnreservedConcurrentExecutions"] == 4
    with pytest.raises(ResourceNotFoundException):
        concurrency.get_function_concurrency("other")


def test_pool_and_processes_alone_start_reuse_and_reclaim_a_real_environment(echo_code):
    # GIVEN the pool, the processes and the concurrency parts on one context (no Emulator)
    context = EmulatorContext(EmulatorConfig(idle_timeout_s=3600.0))
    processes = Processes(context)
    pool = EnvironmentPool(context, Concurrency(context, processes))
    fs = FunctionPool(FunctionSpec(name="echo", handler="echo.handler", code_dir=echo_code))
    context.functions["echo"] = fs
    env = None
    try:
        # WHEN an environment is acquired: it is new (cold) and in state init until initialised
        env, cold, spillover = pool.acquire(fs, "$LATEST", None, None)
        assert (cold, spillover, env.state) == (True, False, "init")
        processes.initialize(fs, env)
        assert env.alive() and env.init_duration_ms is not None and env.init_duration_ms > 0
        # THEN the real runtime answers an invocation through its own Runtime API
        assert env.api is not None
        invocation = Invocation("r-1", json.dumps({"n": 1}).encode(), deadline_ms=int(time.time() * 1000) + 10_000,
                                invoked_function_arn=context.arn("echo"))
        env.api.start_invocation(invocation)
        assert env.api.wait_invoke_done(time.perf_counter() + 10.0, env.alive) is not None
        body = json.loads(invocation.body)
        assert invocation.outcome == "response"
        assert body["event"] == {"n": 1} and body["pid"] == env.pid
        pool.release(fs, env, None, dead=False)
        assert env.state == "idle" and fs.in_flight == 0
        # AND the next acquisition reuses it (warm), and the pool lists it
        again, cold, _ = pool.acquire(fs, "$LATEST", None, None)
        assert again is env and cold is False and env.state == "busy"
        pool.release(fs, env, None, dead=False)
        assert [e["id"] for e in pool.environments("echo")] == [env.id]
        assert env.pid in pool.process_ids()
        # AND it is kept while idle within the timeout, reclaimed once idle past it
        assert pool.reclaim_idle() == 0
        context.config = EmulatorConfig(idle_timeout_s=0.001)
        time.sleep(0.01)
        assert pool.reclaim_idle() == 1
        assert fs.envs == [] and not env.alive()
    finally:
        if env is not None:
            env.kill()


def test_billed_report_bills_the_on_demand_init_and_rounds_up():
    # Since 1 Aug 2025 the on-demand init phase is billed (records.billed_report's source)
    report = billed_report("r", 10.2, memory_size_mb=512, max_memory_used_mb=60,
                           init_duration_ms=250.1, restore_duration_ms=None,
                           post_runtime_extensions_duration_ms=None)
    assert report.billed_duration_ms == 11 + 251
    restored = billed_report("r", 10.2, memory_size_mb=512, max_memory_used_mb=60,
                             init_duration_ms=None, restore_duration_ms=99.5,
                             post_runtime_extensions_duration_ms=None)
    assert restored.billed_duration_ms == 11 and restored.billed_restore_duration_ms == 100
