"""The streaming agent of tests/e2e/test_streaming_agent.py (copied into the function code as
``stream_agent.py``): ``Agent`` with a ``Route(stream=True)``.

The app streams one SSE event per word of its model; before each event it waits for the file
``token-<i>`` in ``STREAM_AGENT_GATES`` when ``STREAM_AGENT_GATED=1``, the model loader waits
for the file ``model`` there: the test drives both by writing files, never by timing.
``POST /v1/boom`` sends one event and raises; ``POST /v1/aborts`` sends one event and an error
event of its own, then raises `functions.runtime.asgi_stream.StreamAborted`.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from functions.runtime.agent import Agent, AgentRuntime, Route
from functions.runtime.streaming import sse_event

GATES = Path(os.environ.get("STREAM_AGENT_GATES", "/tmp"))
GATED = os.environ.get("STREAM_AGENT_GATED") == "1"
WORDS = ["the", "order", "shipped"]


def load_model(runtime: AgentRuntime) -> dict[str, Any]:
    deadline = time.monotonic() + 60.0
    while not (GATES / "model").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"words": list(WORDS)}


def payload(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise ValueError('send {"text": "..."}')  # noqa: TRY004 - a 422 (the validate contract)
    return {"text": body["text"]}


def first_event(data: dict[str, Any]) -> dict[str, Any]:
    return {"notice": "warming up", "echo": data["text"]}


def create_app(runtime: AgentRuntime) -> Any:
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    async def opened(name: str) -> None:
        while GATED and not (GATES / name).exists():
            await asyncio.sleep(0.005)

    @app.post("/v1/chat")
    async def chat() -> StreamingResponse:
        words = runtime.model()["words"]

        async def tokens() -> Any:
            for i, word in enumerate(words):
                await opened(f"token-{i}")
                await asyncio.sleep(0)
                yield sse_event({"token": word})
        return StreamingResponse(tokens(), media_type="text/event-stream")

    @app.post("/v1/boom")
    async def boom() -> StreamingResponse:
        async def tokens() -> Any:
            await asyncio.sleep(0)
            yield sse_event({"token": "first"})
            await asyncio.sleep(0)
            raise ConnectionResetError("the LLM reset the connection")
        return StreamingResponse(tokens(), media_type="text/event-stream")

    @app.post("/v1/aborts")
    async def aborts() -> StreamingResponse:
        from functions.runtime.asgi_stream import StreamAborted

        async def tokens() -> Any:
            await asyncio.sleep(0)
            yield sse_event({"token": "first"})
            yield sse_event({"error": {"type": "llm_unavailable", "message": "no LLM answered"}},
                            event="error")
            raise StreamAborted("downstream_timeout", "no LLM answered in time")
        return StreamingResponse(tokens(), media_type="text/event-stream")

    return app


agent = Agent(
    "streamchat",
    app=create_app,
    routes=[
        Route("POST", "/v1/chat", stream=True, needs_model=True, validate=payload,
              degraded_event=first_event, first_token_ms=800.0),
        Route("POST", "/v1/boom", stream=True),
        Route("POST", "/v1/aborts", stream=True),
    ],
    model=load_model,
    stage_p95_ms={"model": float(os.environ.get("STREAM_AGENT_MODEL_P95_MS", "300"))},
)
handler = agent.lambda_handler()
