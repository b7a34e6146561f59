"""The app's work after its response (`functions.runtime.asgi`): FastAPI ``BackgroundTasks`` and
Starlette ``background=`` leave the adapter's call pending once the response is complete, and
finish in :meth:`Adapter.finish_background` (the post-response phase) or before the call returns.

Real FastAPI apps, the real adapter (Mangum's event handlers), a real loop; background tasks
that sleep and record when they ran.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, BackgroundTasks, Depends, FastAPI, HTTPException
from fastapi.responses import JSONResponse
from starlette.background import BackgroundTask

from functions.runtime.asgi import Adapter, AppFailure, make_adapter, uses_background_tasks
from tests.conftest import LambdaContext, adapt_event
from tests.unit.runtime.test_post_response import RuntimeApi

TASK_S = 0.3


def recording_app(log: list[tuple[str, float]]) -> FastAPI:
    app = FastAPI()

    async def slow_async(name: str) -> None:
        log.append((f"{name} started", time.monotonic()))
        await asyncio.sleep(TASK_S)
        log.append((f"{name} ended", time.monotonic()))

    def slow_sync(name: str) -> None:  # Starlette runs it on a worker thread
        log.append((f"{name} started", time.monotonic()))
        time.sleep(TASK_S)
        log.append((f"{name} ended", time.monotonic()))

    async def raises() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("the audit log is full")

    @app.post("/async")
    async def with_async(background_tasks: BackgroundTasks) -> dict[str, str]:
        background_tasks.add_task(slow_async, "async")
        return {"answer": "now"}

    @app.post("/sync")
    def with_sync(background_tasks: BackgroundTasks) -> dict[str, str]:
        background_tasks.add_task(slow_sync, "sync")
        return {"answer": "now"}

    @app.post("/starlette")
    async def with_starlette() -> JSONResponse:
        return JSONResponse({"answer": "now"}, background=BackgroundTask(slow_async, "starlette"))

    @app.post("/raises")
    async def with_raising(background_tasks: BackgroundTasks) -> dict[str, str]:
        background_tasks.add_task(raises)
        return {"answer": "kept"}

    @app.post("/forever")
    async def with_forever(background_tasks: BackgroundTasks) -> dict[str, str]:
        background_tasks.add_task(asyncio.sleep, 3600)
        return {"answer": "now"}

    @app.get("/boom")
    async def boom() -> dict[str, str]:
        raise KeyError("a bug in the route")

    @app.get("/missing")
    async def missing(background_tasks: BackgroundTasks) -> dict[str, str]:
        background_tasks.add_task(slow_async, "never")
        raise HTTPException(404, "no such thing")

    return app


def call(adapter: Adapter, path: str, method: str = "POST", **kwargs: Any) -> dict[str, Any]:
    return adapter(adapt_event("http_api_v2.json", method, path), LambdaContext(), **kwargs)


@pytest.mark.parametrize("path", ["/async", "/sync", "/starlette"])
def test_the_call_returns_with_the_answer_and_the_task_finishes_after_it(path: str) -> None:
    """GIVEN a route whose response has a background task that sleeps 0.3 s, WHEN the caller
    takes the work after the response (``after_response`` -> True), THEN the call returns the
    answer before the task ends, and ``finish_background`` runs the task to its end."""
    log: list[tuple[str, float]] = []
    adapter = make_adapter(recording_app(log))
    deferred: list[Any] = []
    adapter.after_response = lambda context: deferred.append(context) or True
    started = time.monotonic()
    response = call(adapter, path)
    returned = time.monotonic()
    assert response["statusCode"] == 200 and response["body"] == '{"answer":"now"}'
    assert returned - started < TASK_S, returned - started
    assert len(deferred) == 1 and adapter.background_pending == 1
    assert not any(event.endswith("ended") for event, _ in log)
    adapter.finish_background(time.time() * 1000.0 + 5000.0)
    assert adapter.background_pending == 0
    ended = dict(log)[f"{path[1:]} ended"]
    assert ended - returned >= TASK_S * 0.5  # it ran on after the return


def test_without_a_taker_the_task_finishes_before_the_call_returns() -> None:
    log: list[tuple[str, float]] = []
    adapter = make_adapter(recording_app(log))
    adapter.after_response = lambda context: False  # no extension active
    started = time.monotonic()
    response = call(adapter, "/async")
    assert response["statusCode"] == 200 and adapter.background_pending == 0
    assert dict(log)["async ended"] <= time.monotonic() and time.monotonic() - started >= TASK_S


def test_a_task_that_raises_is_reported_and_the_answer_stands() -> None:
    reported: list[tuple[BaseException, str]] = []
    adapter = make_adapter(recording_app([]))
    adapter.on_background_failure = lambda error, scope: reported.append((error, scope["path"]))
    response = call(adapter, "/raises")  # finished before the return: no taker
    assert response["statusCode"] == 200 and response["body"] == '{"answer":"kept"}'
    [(error, path)] = reported
    assert isinstance(error, RuntimeError) and str(error) == "the audit log is full"
    assert path == "/raises" and error.__traceback__ is not None
    # the same after the response, in the post-response phase
    adapter.after_response = lambda context: True
    assert call(adapter, "/raises")["body"] == '{"answer":"kept"}'
    adapter.finish_background(time.time() * 1000.0 + 5000.0)
    assert len(reported) == 2


def test_a_failing_reporter_falls_back_to_the_log(caplog: pytest.LogCaptureFixture) -> None:
    adapter = make_adapter(recording_app([]))

    def broken(error: BaseException, scope: Any) -> None:
        raise RuntimeError("no telemetry")

    adapter.on_background_failure = broken
    assert call(adapter, "/raises")["statusCode"] == 200
    [record] = [r for r in caplog.records if "after its response failed" in r.getMessage()]
    assert "the audit log is full" in record.getMessage() and record.exc_info is not None


def test_work_past_the_deadline_is_cancelled_and_reported_as_a_timeout() -> None:
    reported: list[BaseException] = []
    adapter = make_adapter(recording_app([]))
    adapter.on_background_failure = lambda error, scope: reported.append(error)
    adapter.after_response = lambda context: True
    assert call(adapter, "/forever")["statusCode"] == 200
    started = time.monotonic()
    adapter.finish_background(time.time() * 1000.0 + 200.0)
    assert 0.15 < time.monotonic() - started < 1.0
    assert adapter.background_pending == 0
    [error] = reported
    assert isinstance(error, TimeoutError) and "still running at the invocation's deadline" in str(error)


def test_before_the_return_the_work_is_bounded_by_the_remaining_time() -> None:
    reported: list[BaseException] = []
    adapter = make_adapter(recording_app([]))
    adapter.on_background_failure = lambda error, scope: reported.append(error)
    started = time.monotonic()
    response = adapter(adapt_event("http_api_v2.json", "POST", "/forever"), LambdaContext(timeout_s=0.4))
    assert response["statusCode"] == 200
    assert time.monotonic() - started < 0.4 + 0.2
    assert [type(e) for e in reported] == [TimeoutError]


def test_the_route_budget_cuts_the_route_not_its_background_tasks() -> None:
    """``cancel_after_s`` (a degradable route's budget) is met once the answer is complete: a
    background task that runs longer is not cut, and the call is no AppFailure."""
    log: list[tuple[str, float]] = []
    adapter = make_adapter(recording_app(log))
    adapter.after_response = lambda context: True
    response = call(adapter, "/async", cancel_after_s=0.05)
    assert response["statusCode"] == 200
    adapter.finish_background(time.time() * 1000.0 + 5000.0)
    assert "async ended" in dict(log)


def test_an_app_error_is_still_an_app_failure_not_work_after_the_response() -> None:
    """Starlette answers a route's exception with its ``500 text/plain`` and raises it again:
    that is the app's failure (the caller answers it), not a background task's."""
    reported: list[BaseException] = []
    log: list[tuple[str, float]] = []
    adapter = make_adapter(recording_app(log))
    adapter.on_background_failure = lambda error, scope: reported.append(error)
    with pytest.raises(AppFailure) as failed:
        call(adapter, "/boom", method="GET")
    assert isinstance(failed.value.error, KeyError) and failed.value.response["statusCode"] == 500
    assert reported == [] and adapter.background_pending == 0
    # an HTTPException's answer: the route's background tasks never run (Starlette's rule)
    response = call(adapter, "/missing", method="GET")
    assert response["statusCode"] == 404 and log == [] and reported == []


def test_a_task_pending_from_one_thread_is_finished_from_another() -> None:
    """The post-response phase runs on the extension's thread: the loop is the environment's."""
    log: list[tuple[str, float]] = []
    adapter = make_adapter(recording_app(log))
    adapter.after_response = lambda context: True
    assert call(adapter, "/async")["statusCode"] == 200
    thread = threading.Thread(target=adapter.finish_background, args=(time.time() * 1000.0 + 5000.0,))
    thread.start()
    thread.join(5)
    assert "async ended" in dict(log) and adapter.background_pending == 0


def audit(background_tasks: BackgroundTasks) -> BackgroundTasks:
    """A dependency that takes ``BackgroundTasks`` (module level: the annotations are strings)."""
    return background_tasks


def test_which_apps_take_background_tasks() -> None:
    plain = FastAPI()

    @plain.get("/")
    async def home() -> dict[str, str]:
        return {}

    assert not uses_background_tasks(plain)
    assert uses_background_tasks(recording_app([]))

    router = APIRouter()

    @router.get("/via-dependency")
    async def via_dependency(_: Annotated[BackgroundTasks, Depends(audit)]) -> dict[str, str]:
        return {}

    included = FastAPI()
    included.include_router(router)
    assert uses_background_tasks(included)
    mounted = FastAPI()
    mounted.mount("/sub", included)
    assert uses_background_tasks(mounted)

    async def raw(scope: Any, receive: Any, send: Any) -> None:
        pass

    assert not uses_background_tasks(raw)


def test_the_extension_runs_work_submitted_first_before_the_rest() -> None:
    api = RuntimeApi()
    try:
        from functions.runtime.post_response import PostResponse

        post = PostResponse(api.address)
        post.register()
        ran: list[str] = []
        post.submit("r1", lambda _: ran.append("preload"))
        post.submit("r1", lambda _: ran.append("background"), first=True)
        api.invoke("r1")
        post.handler_returned("r1")
        deadline = time.monotonic() + 5
        while len(ran) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran == ["background", "preload"]
    finally:
        api.close()


def test_the_extension_registers_where_background_tasks_can_run_after_the_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With a Runtime API and ``WARMSTART_FINISH_PRELOAD=after``: every on-demand environment
    registers (its app is not built yet); under provisioned concurrency only an app that takes
    ``BackgroundTasks`` (built in the init); never under SnapStart; never with ``before``."""
    from tests.agents.llm_app.handler import agent as llm_agent
    from tests.unit.runtime.test_agent import Built, env_for, orders_agent

    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9")  # the lifespan's client; unused
    api = RuntimeApi()
    built = Built()
    try:
        def registered(agent: Any, init_type: str, finish: str = "after") -> bool:
            before = len(api.requests)
            handler, _ = built.handler(agent, env_for(init_type, WARMSTART_FINISH_PRELOAD=finish,
                                                      AWS_LAMBDA_RUNTIME_API=api.address))
            handler.preload.wait_all(30)
            calls = [path for _, path, _ in api.requests[before:]]
            assert (handler.post_response is not None) is ("/2020-01-01/extension/register" in calls)
            if handler.lifespan is not None:
                handler.shutdown()
            return handler.post_response is not None

        assert registered(orders_agent(built.gate(released=True)), "on-demand")
        assert not registered(orders_agent(built.gate(released=True)), "on-demand", finish="before")
        assert not registered(orders_agent(built.gate(released=True)), "provisioned-concurrency")
        assert registered(llm_agent, "on-demand")  # no model: the background tasks
        assert registered(llm_agent, "provisioned-concurrency")
        assert not registered(llm_agent, "snap-start")
    finally:
        built.close()
        api.close()
