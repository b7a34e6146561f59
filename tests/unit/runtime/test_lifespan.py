"""The execution environment's event loop and the ASGI lifespan driver (`functions.runtime.lifespan`).

Real apps (Starlette / FastAPI lifespans, a plain ASGI callable), a real loop, real threads.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.testclient import TestClient

from functions.runtime.agent import agent_runtime
from functions.runtime.asgi import make_adapter
from functions.runtime.lifespan import AppLoop, Lifespan, LifespanFailed, LifespanTimeout
from tests.conftest import LambdaContext, adapt_event


def test_one_loop_whichever_thread_runs_it() -> None:
    apploop = AppLoop()
    seen: list[int] = []

    async def which() -> int:
        return id(asyncio.get_running_loop())

    for _ in range(6):  # sequential threads: Python reuses their ids
        thread = threading.Thread(target=lambda: seen.append(apploop.run_here(which())))
        thread.start()
        thread.join(10)
    assert seen == [id(apploop.loop)] * 6


def test_a_fastapi_lifespan_state_reaches_each_request_as_a_copy() -> None:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        app.state.opened = asyncio.Event()  # bound to the loop it is first awaited on
        yield {"counter": 0}

    app = FastAPI(lifespan=lifespan)

    @app.get("/n")
    async def n(request: Request) -> dict[str, Any]:
        request.state.counter += 1  # a per-request copy: never seen by the next request
        request.app.state.opened.set()
        await request.app.state.opened.wait()
        return {"counter": request.state.counter}

    apploop = AppLoop()
    lifespan_driver = Lifespan(app, apploop, timeout_s=5)
    lifespan_driver.startup()
    assert lifespan_driver.supported and lifespan_driver.state == {"counter": 0}
    adapter = make_adapter(app, loop=apploop)
    adapter.lifespan_state = lifespan_driver.state
    answers = []
    for _ in range(3):
        thread = threading.Thread(target=lambda: answers.append(
            adapter(adapt_event("http_api_v2.json", "GET", "/n"), LambdaContext())["body"]))
        thread.start()
        thread.join(10)
    assert answers == ['{"counter":1}'] * 3
    lifespan_driver.shutdown()
    assert not lifespan_driver.running


def test_a_plain_asgi_app_without_a_lifespan_is_served_without_one() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"  # raises on the lifespan scope, as such apps do
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    lifespan = Lifespan(app, AppLoop(), timeout_s=5)
    lifespan.startup()
    assert lifespan.supported is False and not lifespan.running
    lifespan.shutdown()  # nothing to do


def test_startup_failed_without_an_exception_carries_the_apps_message() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no database URL"})

    with pytest.raises(LifespanFailed, match="no database URL"):
        Lifespan(app, AppLoop(), timeout_s=5).startup()


def test_a_startup_that_blocks_the_loop_is_bounded() -> None:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        time.sleep(3)  # noqa: ASYNC251 - the case under test: a synchronous call inside async code: no await can time it out
        yield

    apploop = AppLoop()
    started = time.perf_counter()
    with pytest.raises(LifespanTimeout, match="blocks the event loop"):
        Lifespan(FastAPI(lifespan=lifespan), apploop, timeout_s=0.3).startup()
    assert time.perf_counter() - started < 0.3 + 1.5
    # the blocked run still holds the loop; once it hands it back, the lifespan's task left
    # on it is cancelled and the loop closed (else the garbage collector meets that task
    # with a closed loop: "Event loop is closed")
    assert apploop.close(timeout_s=5)
    assert apploop.loop.is_closed()


def test_closing_the_loop_unwinds_what_is_still_pending_on_it() -> None:
    apploop = AppLoop()
    unwound: list[str] = []

    async def held() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            unwound.append("finally")

    async def start() -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(held())
        await asyncio.sleep(0)
        return task

    task = apploop.run_here(start())
    assert not task.done()
    assert apploop.close()
    assert task.cancelled() and unwound == ["finally"] and apploop.loop.is_closed()


def test_a_shutdown_that_raises_is_reported() -> None:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        raise OSError("the pool would not close")

    lifespan_driver = Lifespan(FastAPI(lifespan=lifespan), AppLoop(), timeout_s=5)
    lifespan_driver.startup()
    with pytest.raises(LifespanFailed, match="the pool would not close"):
        lifespan_driver.shutdown()


def test_agent_runtime_outside_warmstart_says_how_to_test_the_app_alone() -> None:
    from functions.runtime.depends import agent_runtime as same

    assert agent_runtime is same  # one object: dependency_overrides keys on it
    app = FastAPI()

    @app.get("/who")
    async def who(runtime: Annotated[Any, Depends(agent_runtime)]) -> dict[str, str]:
        return {"name": runtime.name}

    with TestClient(app, raise_server_exceptions=True) as client:
        with pytest.raises(RuntimeError, match="dependency_overrides"):
            client.get("/who")
        app.dependency_overrides[agent_runtime] = lambda: type("R", (), {"name": "fake"})()
        assert client.get("/who").json() == {"name": "fake"}
