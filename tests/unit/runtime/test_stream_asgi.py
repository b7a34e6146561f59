"""`functions.runtime.asgi_stream`: a real FastAPI app's ``StreamingResponse`` of SSE events,
run on the environment's event loop and handed over chunk by chunk.

The app's generator waits for a gate the test opens (asyncio polling a ``threading.Event``)
before each event, so a test drives the iterator one step at a time and checks what the app
has produced so far: no timing assertions. Bounds (idle, deadline) are set small and only
their outcome is checked.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from fastapi import BackgroundTasks, FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse

from functions.runtime import asgi_stream
from functions.runtime.asgi import Adapter, make_adapter
from functions.runtime.asgi_stream import (
    DEADLINE_MARGIN_MS,
    AppStream,
    StreamAborted,
    StreamFailed,
    stream_app,
    stream_deadline_ms,
)
from functions.runtime.errors import AppFailure, FailureTag
from functions.runtime.streaming import StreamedResponse, sse_event
from tests.conftest import LambdaContext, adapt_event

#: A bound no test reaches (s): the gates, not the clock, decide each step.
FOREVER_S = 30.0


async def opened(gate: threading.Event) -> None:
    """Wait for ``gate`` on the event loop (cancellable: the loop keeps serving)."""
    while not gate.is_set():
        await asyncio.sleep(0.002)


class Gates:
    """One gate per event; what the app produced; whether its generator ended."""

    def __init__(self, n: int = 3) -> None:
        self.allow = [threading.Event() for _ in range(n)]
        self.produced: list[int] = []
        self.finished = threading.Event()  # the generator's ``finally`` ran
        self.background: list[str] = []

    def open_all(self) -> None:
        for gate in self.allow:
            gate.set()


def sse_app(gates: Gates) -> FastAPI:
    app = FastAPI()

    async def tokens(fail_after: int | None = None) -> Any:
        try:
            for i, gate in enumerate(gates.allow):
                if fail_after is not None and i == fail_after:
                    raise ConnectionResetError("the LLM reset the connection")
                await opened(gate)
                gates.produced.append(i)
                yield sse_event({"token": i})
                await asyncio.sleep(0)
        finally:
            gates.finished.set()

    @app.get("/tokens")
    async def stream() -> StreamingResponse:
        return StreamingResponse(tokens(), media_type="text/event-stream",
                                 headers={"x-agent": "chat"})

    @app.get("/raises")
    async def raises() -> StreamingResponse:
        return StreamingResponse(tokens(fail_after=1), media_type="text/event-stream")

    @app.get("/scope")
    async def scope(request: Request) -> StreamingResponse:
        async def one() -> Any:
            await asyncio.sleep(0)  # a pause: without one the answer is complete at once
            yield sse_event({"root_path": request.scope["root_path"], "path": request.url.path,
                             "state": request.state.db,
                             "runtime": request.scope.get("warmstart.runtime")})
        return StreamingResponse(one(), media_type="text/event-stream")

    @app.get("/with-task")
    async def with_task(background_tasks: BackgroundTasks) -> StreamingResponse:
        async def audit() -> None:
            await asyncio.sleep(0)
            gates.background.append("audited")

        background_tasks.add_task(audit)
        return StreamingResponse(tokens(), media_type="text/event-stream",
                                 background=background_tasks)

    @app.get("/json")
    async def plain() -> dict[str, Any]:
        return {"answer": 42}

    @app.get("/missing")
    async def missing() -> None:
        raise HTTPException(404, "no such conversation")

    @app.get("/broken")
    async def broken() -> None:
        raise RuntimeError("the route is broken")

    async def own_error(media_type: str, error: BaseException) -> Any:
        await opened(gates.allow[0])
        if media_type == "text/event-stream":
            yield sse_event({"token": 0})
            yield sse_event({"error": {"type": "llm_unavailable", "message": "no LLM answered",
                                       "retry_after_s": 2}}, event="error")
        else:
            yield b"partial answer"
        raise error

    @app.get("/aborts")
    async def aborts() -> StreamingResponse:
        return StreamingResponse(own_error("text/event-stream", StreamAborted(
            "downstream_timeout", "no LLM answered within the first-token budget")),
            media_type="text/event-stream")

    @app.get("/aborts-grouped")
    async def aborts_grouped() -> StreamingResponse:
        return StreamingResponse(own_error("text/event-stream", ExceptionGroup("the turn failed", [
            StreamAborted("tool_unavailable", "the order service refused")])),
            media_type="text/event-stream")

    @app.get("/aborts-plain")
    async def aborts_plain() -> StreamingResponse:
        return StreamingResponse(own_error("text/plain", StreamAborted(
            "stream_error", "the report broke")), media_type="text/plain")

    @app.get("/aborts-at-once")
    async def aborts_at_once() -> None:
        raise StreamAborted("tool_unavailable", "the order service refused")

    @app.get("/silent")
    async def silent() -> StreamingResponse:
        await opened(gates.allow[0])  # sends no start until opened
        return StreamingResponse(tokens(), media_type="text/event-stream")

    return app


@pytest.fixture
def gates() -> Iterator[Gates]:
    g = Gates()
    yield g
    g.open_all()  # nothing waits past the test


@pytest.fixture
def adapter(gates: Gates) -> Adapter:
    return make_adapter(sse_app(gates))


def start(adapter: Adapter, path: str, *, context: Any = None,
          idle_s: float = FOREVER_S) -> StreamedResponse | dict[str, Any]:
    event = adapt_event("function_url.json", "GET", path)
    return stream_app(adapter, event, context or LambdaContext(), idle_s=idle_s)


def data_of(chunk: bytes) -> tuple[str | None, Any]:
    """``(event name, JSON data)`` of one SSE event."""
    name, data = None, None
    for line in chunk.decode().strip().split("\n"):
        key, _, value = line.partition(": ")
        if key == "event":
            name = value
        elif key == "data":
            data = json.loads(value)
    return name, data


def loop_is_free(adapter: Adapter) -> bool:
    """The environment's loop is not held by a stream any more (waits for its release)."""
    if not adapter.loop.lock.acquire(timeout=FOREVER_S):
        return False
    adapter.loop.lock.release()
    return True


def test_status_and_headers_come_first_then_each_chunk_as_the_app_sends_it(
        adapter: Adapter, gates: Gates) -> None:
    response = start(adapter, "/tokens")
    assert isinstance(response, StreamedResponse)
    # the prelude is known before the app produced any event
    assert response.status_code == 200 and gates.produced == []
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-agent"] == "chat"
    chunks = iter(response)
    for i in range(3):
        gates.allow[i].set()
        assert data_of(next(chunks)) == (None, {"token": i})
        assert gates.produced == list(range(i + 1))  # the next event is not made yet
    with pytest.raises(StopIteration):
        next(chunks)
    assert gates.finished.is_set() and loop_is_free(adapter)


def test_the_scope_is_the_buffered_adapters(gates: Gates) -> None:
    adapter = make_adapter(sse_app(gates), base_path="/chat", runtime="the agent's runtime")
    adapter.lifespan_state = {"db": "pool"}
    event = adapt_event("function_url.json", "GET", "/chat/scope")
    response = stream_app(adapter, event, LambdaContext())
    assert isinstance(response, StreamedResponse)
    (chunk,) = list(response)
    assert data_of(chunk)[1] == {"root_path": "/chat", "path": "/chat/scope", "state": "pool",
                                 "runtime": "the agent's runtime"}


def test_close_disconnects_the_app_and_stops_its_generator(adapter: Adapter, gates: Gates) -> None:
    response = start(adapter, "/tokens")
    assert isinstance(response, StreamedResponse)
    chunks = iter(response)
    gates.allow[0].set()
    assert data_of(next(chunks))[1] == {"token": 0}
    response.close()  # the client went away
    assert gates.finished.wait(FOREVER_S)  # the generator's finally ran
    gates.open_all()
    assert gates.produced == [0] and loop_is_free(adapter)
    with pytest.raises(StopIteration):  # the iterator was closed with it
        next(chunks)


def test_an_exception_after_the_first_chunk_ends_with_an_error_event_then_raises(
        adapter: Adapter, gates: Gates) -> None:
    response = start(adapter, "/raises")
    assert isinstance(response, StreamedResponse)
    chunks = iter(response)
    gates.allow[0].set()
    assert data_of(next(chunks))[1] == {"token": 0}
    name, data = data_of(next(chunks))
    assert name == "error" and data["error"]["type"] == "stream_error"
    assert "ConnectionResetError" in data["error"]["message"]
    with pytest.raises(StreamFailed) as failed:
        next(chunks)
    assert failed.value.tag is FailureTag.STREAM_ERROR
    assert loop_is_free(adapter)


def test_an_app_silent_past_the_idle_bound_ends_with_a_timeout_event(
        adapter: Adapter, gates: Gates) -> None:
    response = start(adapter, "/tokens", idle_s=0.2)
    assert isinstance(response, StreamedResponse)
    chunks = iter(response)
    gates.allow[0].set()
    assert data_of(next(chunks))[1] == {"token": 0}
    name, data = data_of(next(chunks))  # gate 1 stays shut: the app sends nothing
    assert name == "error" and data["error"]["type"] == "stream_timeout"
    assert "idle bound" in data["error"]["message"]
    with pytest.raises(StreamFailed):
        next(chunks)
    assert gates.finished.wait(FOREVER_S) and gates.produced == [0]  # the app was cancelled


def test_the_stream_ends_before_the_functions_deadline(adapter: Adapter, gates: Gates) -> None:
    # 300 ms left for the stream once the margin is kept
    context = LambdaContext(timeout_s=DEADLINE_MARGIN_MS / 1000.0 + 0.3)
    response = start(adapter, "/tokens", context=context)
    assert isinstance(response, StreamedResponse)
    chunks = list_until_failure(response)
    name, data = data_of(chunks[-1])
    assert name == "error" and data["error"]["type"] == "stream_timeout"
    assert "deadline" in data["error"]["message"]
    assert gates.finished.wait(FOREVER_S) and gates.produced == []
    assert context.get_remaining_time_in_millis() > 0  # it ended before the function timeout


def list_until_failure(response: StreamedResponse) -> list[bytes]:
    chunks: list[bytes] = []
    with pytest.raises(StreamFailed):
        for chunk in response:
            chunks.append(chunk)  # noqa: PERF402 - what came before the raise
    return chunks


def test_no_start_within_the_idle_bound_is_an_app_failure(adapter: Adapter, gates: Gates) -> None:
    with pytest.raises(AppFailure) as failed:
        start(adapter, "/silent", idle_s=0.2)
    assert failed.value.cut and isinstance(failed.value.error, TimeoutError)
    assert loop_is_free(adapter)


def test_background_tasks_run_after_the_stream(adapter: Adapter, gates: Gates) -> None:
    """Without a post-response phase they finish before the iterator ends; with one (the
    adapter's ``after_response`` takes them) they are still pending when it ends."""
    gates.open_all()
    response = start(adapter, "/with-task")
    assert isinstance(response, StreamedResponse)
    assert [data_of(c)[1] for c in response] == [{"token": i} for i in range(3)]
    assert gates.background == ["audited"]

    later = Gates()
    later.open_all()
    adapter = make_adapter(sse_app(later))
    taken: list[Any] = []
    adapter.after_response = lambda context: taken.append(context) or True
    response = start(adapter, "/with-task")
    assert isinstance(response, StreamedResponse)
    assert len(list(response)) == 3
    assert later.background == [] and adapter.background_pending == 1 and len(taken) == 1
    adapter.finish_background(time.time() * 1000.0 + FOREVER_S * 1000.0)
    assert later.background == ["audited"] and adapter.background_pending == 0


def test_an_answer_finished_at_once_is_returned_buffered(adapter: Adapter) -> None:
    answer = start(adapter, "/json")
    assert isinstance(answer, dict) and answer["statusCode"] == 200
    assert json.loads(answer["body"]) == {"answer": 42}
    missing = start(adapter, "/missing")
    assert isinstance(missing, dict) and missing["statusCode"] == 404
    assert json.loads(missing["body"]) == {"detail": "no such conversation"}
    assert loop_is_free(adapter)


def test_an_app_that_raises_before_its_start_is_an_app_failure(adapter: Adapter) -> None:
    with pytest.raises(AppFailure) as failed:
        start(adapter, "/broken")
    assert isinstance(failed.value.error, RuntimeError) and not failed.value.cut
    assert failed.value.response["statusCode"] == 500  # Starlette's text/plain, never sent as is


def test_a_slow_reader_holds_the_app_back(monkeypatch: pytest.MonkeyPatch, gates: Gates) -> None:
    """More than HIGH_WATER_BYTES queued: the app's send waits until half is taken."""
    monkeypatch.setattr(asgi_stream, "HIGH_WATER_BYTES", 40)
    gates.open_all()
    app = FastAPI()
    sent: list[int] = []

    @app.get("/many")
    async def many() -> StreamingResponse:
        async def gen() -> Any:
            for i in range(50):
                sent.append(i)
                yield b"x" * 20
        return StreamingResponse(gen(), media_type="application/octet-stream")

    adapter = make_adapter(app)
    event = adapt_event("function_url.json", "GET", "/many")
    stream = AppStream(adapter, event, LambdaContext(),
                       deadline_ms=stream_deadline_ms(None, time.perf_counter() * 1000.0))
    stream.start()
    assert stream.wait_started() is None
    chunks = stream.chunks()
    first = next(chunks)
    assert threading_wait(lambda: stream._waiting)  # the producer waits for the reader
    assert len(sent) < 10
    rest = list(chunks)
    assert len(rest) + 1 == 50 and first == b"x" * 20 and len(sent) == 50


def threading_wait(condition: Any, timeout_s: float = FOREVER_S) -> bool:
    done = threading.Event()
    deadline = threading.Timer(timeout_s, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if condition():
                return True
            done.wait(0.002)
        return False
    finally:
        deadline.cancel()


def until_failed(chunks: Iterable[bytes]) -> tuple[list[bytes], StreamFailed]:
    """The chunks an iterator hands out before it raises `StreamFailed`, and the exception."""
    out: list[bytes] = []
    it = iter(chunks)
    with pytest.raises(StreamFailed) as failed:
        while True:
            out.append(next(it))
    return out, failed.value


def test_an_app_that_sent_its_own_error_event_aborts_with_the_trailers_and_no_second_event(
        adapter: Adapter, gates: Gates) -> None:
    """GIVEN an app that ends its stream with an error event of its own and raises
    `StreamAborted`, THEN its events come as sent, the toolkit adds none, and the iterator
    raises `StreamFailed` with the app's tag (the runtime client's error trailers)."""
    response = start(adapter, "/aborts")
    assert isinstance(response, StreamedResponse)
    gates.allow[0].set()
    chunks, failed = until_failed(response)
    assert [data_of(c) for c in chunks] == [
        (None, {"token": 0}),
        ("error", {"error": {"type": "llm_unavailable", "message": "no LLM answered",
                             "retry_after_s": 2}})]
    assert failed.tag is FailureTag.DOWNSTREAM_TIMEOUT
    assert str(failed) == "downstream_timeout: no LLM answered within the first-token budget"
    assert isinstance(failed.__cause__, StreamAborted) and loop_is_free(adapter)


@pytest.mark.parametrize(("path", "tag", "body"), [
    ("/aborts-grouped", FailureTag.TOOL_UNAVAILABLE, None),  # in an exception group, alone
    ("/aborts-plain", FailureTag.STREAM_ERROR, b"partial answer"),  # not SSE: no event at all
])
def test_an_aborted_stream_in_a_group_or_not_sse_ends_with_the_apps_tag(
        adapter: Adapter, gates: Gates, path: str, tag: FailureTag, body: bytes | None) -> None:
    event = adapt_event("function_url.json", "GET", path)
    stream = AppStream(adapter, event, LambdaContext(), deadline_ms=stream_deadline_ms(
        LambdaContext(), asgi_stream._clock_ms()), idle_s=FOREVER_S)
    stream.start()
    assert stream.wait_started() is None
    gates.allow[0].set()
    chunks, failed = until_failed(stream.chunks())
    assert failed.tag is tag and stream.tally.tag is tag
    if body is not None:
        assert chunks == [body]
    else:
        assert [name for name, _ in map(data_of, chunks)] == [None, "error"]
    assert loop_is_free(adapter)


def test_stream_aborted_before_the_start_is_an_app_failure_with_its_tag(adapter: Adapter) -> None:
    from functions.runtime.local_path import failure_tag

    with pytest.raises(AppFailure) as failed:
        start(adapter, "/aborts-at-once")
    assert isinstance(failed.value.error, StreamAborted)
    assert failure_tag(failed.value.error) is FailureTag.TOOL_UNAVAILABLE
    assert failure_tag(failed.value.error, cut=True) is FailureTag.DOWNSTREAM_TIMEOUT


def test_stream_aborted_takes_only_a_failure_tag() -> None:
    with pytest.raises(ValueError, match="'llm_unavailable' is not a failure tag; use one of .*stream_error"):
        StreamAborted("llm_unavailable", "no LLM answered")
    assert StreamAborted(FailureTag.STREAM_ERROR, "x" * 600).message == "x" * 500
