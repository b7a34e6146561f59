from __future__ import annotations

import threading
import time

import pytest

from functions.runtime.config import InitType
from functions.runtime.lifecycle import ExecutionEnvironment, ResourceState
from functions.runtime.preload import Preloader, Stage, StageFailed


def _clock_ms() -> float:
    return time.perf_counter() * 1000.0


def test_inline_run_loads_every_stage_in_order() -> None:
    env = ExecutionEnvironment(InitType.PROVISIONED_CONCURRENCY, 0.0)
    order: list[str] = []
    preload = Preloader(
        [Stage("web", lambda: order.append("web") or "app"), Stage("model", lambda: order.append("model") or 7)],
        env, _clock_ms,
    )
    assert env.resource("model") is ResourceState.NOT_STARTED
    preload.run()
    assert order == ["web", "model"]
    assert preload.result("web") == "app" and preload.result("model") == 7
    assert env.resource("model") is ResourceState.READY and env.resource_load_ms["model"] >= 0
    assert preload.thread is None
    preload.run()  # idempotent
    assert order == ["web", "model"]


def test_background_start_returns_before_the_stages_finish() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)
    gate = threading.Event()
    preload = Preloader([Stage("model", lambda: gate.wait(10) and "loaded")], env, _clock_ms)
    thread = preload.start()
    assert thread is not None and thread.daemon
    assert preload.start() is None
    assert not preload.wait("model", 0.01)
    assert not preload.ready("model")
    assert env.resource("model") is ResourceState.LOADING
    gate.set()
    assert preload.wait("model", 10)
    assert preload.result("model") == "loaded" and preload.all_done()


def test_a_failed_stage_is_reported_and_later_stages_still_run() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)

    def broken() -> None:
        raise OSError("model.onnx not found")

    preload = Preloader([Stage("model", broken), Stage("web", lambda: "app")], env, _clock_ms)
    preload.run()
    assert preload.done("model") and not preload.ready("model")
    assert env.resource("model") is ResourceState.FAILED
    with pytest.raises(StageFailed, match="model.onnx not found") as info:
        preload.result("model")
    assert isinstance(info.value.__cause__, OSError)
    assert preload.result("web") == "app"


def test_result_before_finish_and_duplicate_names_are_errors() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)
    preload = Preloader([Stage("web", lambda: 1)], env, _clock_ms)
    with pytest.raises(RuntimeError, match="has not finished"):
        preload.result("web")
    with pytest.raises(ValueError, match="unique"):
        Preloader([Stage("a", lambda: 1), Stage("a", lambda: 2)], env, _clock_ms)


def test_wait_all_honours_its_timeout() -> None:
    env = ExecutionEnvironment(InitType.ON_DEMAND, 0.0)
    gate = threading.Event()
    preload = Preloader([Stage("a", lambda: 1), Stage("b", lambda: gate.wait(10))], env, _clock_ms)
    assert not preload.wait_all(0.05)
    gate.set()
    assert preload.wait_all(10)


def test_between_stages_runs_before_each_later_stage_in_the_background_only() -> None:
    """The handler's hook (it waits there for a cold request's overflow call) runs on the
    preload's thread before each stage but the first, with the stage's name; never inline."""
    seen: list[tuple[str, str]] = []
    stages = [Stage(name, (lambda n=name: seen.append(("load", n)))) for name in ("toolkit", "web", "model")]
    background = Preloader(stages, ExecutionEnvironment(InitType.ON_DEMAND, 0.0), _clock_ms,
                           between_stages=lambda name: seen.append(("between", name)))
    background.start()
    assert background.wait_all(10)
    assert seen == [("load", "toolkit"), ("between", "web"), ("load", "web"),
                    ("between", "model"), ("load", "model")]
    seen.clear()
    inline = Preloader(stages, ExecutionEnvironment(InitType.PROVISIONED_CONCURRENCY, 0.0),
                       _clock_ms, between_stages=lambda name: seen.append(("between", name)))
    inline.run()
    assert seen == [("load", "toolkit"), ("load", "web"), ("load", "model")]
