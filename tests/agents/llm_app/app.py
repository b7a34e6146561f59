"""A production-style FastAPI agent, written the usual way (not for warmstart in particular).

A module-level ``app``; an ``httpx.AsyncClient`` to a downstream LLM service made in the
``lifespan`` and kept on ``app.state`` and in the lifespan state; Pydantic request and answer
models; ``Depends`` for the client and for the agent's runtime; FastAPI's ``BackgroundTasks``
(``POST /v1/feedback`` answers 202 and sends the feedback to the downstream afterwards); settings
from the process environment (``LLM_BASE_URL``, ``LLM_TIMEOUT_S``). ``tests/agents/test_llm_app.py``
serves it through the real warmstart handler.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import httpx
from fastapi import BackgroundTasks, Depends, FastAPI, Request
from pydantic import BaseModel, Field

from functions.runtime.agent import AgentRuntime, agent_runtime

#: How many times this process ran the lifespan's startup and shutdown (the tests read them).
LIFECYCLE = {"startups": 0, "shutdowns": 0}
#: One record per feedback the background task sent (``text``, ``started``, ``ended``: epoch s).
FEEDBACK: list[dict[str, Any]] = []


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    if os.environ.get("LLM_STARTUP_FAILS"):
        raise RuntimeError("cannot reach the model registry (LLM_STARTUP_FAILS is set)")
    if os.environ.get("LLM_STARTUP_HANGS"):
        import asyncio

        await asyncio.Event().wait()  # a connection that never answers
    client = httpx.AsyncClient(base_url=os.environ["LLM_BASE_URL"],
                               timeout=float(os.environ.get("LLM_TIMEOUT_S", "5")))
    app.state.llm = client
    LIFECYCLE["startups"] += 1
    try:
        yield {"llm": client, "started_by": "lifespan"}
    finally:
        await client.aclose()
        LIFECYCLE["shutdowns"] += 1
        mark = os.environ.get("LLM_SHUTDOWN_MARK")  # a file the tests read (another process)
        if mark:
            with open(mark, "a") as out:  # noqa: ASYNC230 - a line at the very end
                out.write("shutdown\n")


app = FastAPI(title="llm agent", lifespan=lifespan)


class Question(BaseModel):
    question: str = Field(min_length=1, max_length=2000)
    user: str = "anonymous"


class Answer(BaseModel):
    answer: str
    model: str
    agent: str
    budget_left_ms: float | None


def check_question(body: Any) -> dict[str, Any]:
    """The route's ``validate`` hook: the same Pydantic model (a ``ValidationError`` is a
    ``ValueError``: the toolkit answers 422)."""
    return Question.model_validate(body).model_dump()


def busy_answer(payload: dict[str, Any]) -> dict[str, Any]:
    """The route's ``degraded`` hook: the cheaper answer, without the LLM."""
    return {"answer": "The assistant is busy; here is the short answer.", "model": "none",
            "question": payload.get("question")}


def llm(request: Request) -> httpx.AsyncClient:
    """The lifespan-made client, from the lifespan state (``request.state``)."""
    client: httpx.AsyncClient = request.state.llm
    return client


@app.get("/")
async def home(request: Request) -> dict[str, Any]:
    return {"service": "llm agent", "root_path": request.scope.get("root_path", "")}


@app.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    client: httpx.AsyncClient = request.app.state.llm
    return {"status": "ok", "llm": str(client.base_url), "closed": client.is_closed,
            "state": request.state.started_by}


@app.post("/v1/ask", response_model=Answer)
async def ask(question: Question, client: Annotated[httpx.AsyncClient, Depends(llm)],
              runtime: Annotated[AgentRuntime, Depends(agent_runtime)]) -> Answer:
    reply = await client.post("/v1/complete", json={"prompt": question.question})
    reply.raise_for_status()
    data = reply.json()
    return Answer(answer=data["text"], model=data["model"], agent=runtime.name,
                  budget_left_ms=runtime.remaining_ms())


@app.post("/v1/summarize")
async def summarize(question: Question,
                    client: Annotated[httpx.AsyncClient, Depends(llm)]) -> dict[str, Any]:
    reply = await client.post("/v1/complete", json={"prompt": f"summarize: {question.question}"})
    reply.raise_for_status()
    return {"summary": reply.json()["text"]}


@app.get("/v1/echo/{word}")
async def echo(word: str) -> dict[str, str]:
    return {"word": word}


@app.get("/v1/boom")
async def boom() -> dict[str, str]:
    raise KeyError("a bug in the app")


class Feedback(BaseModel):
    text: str = Field(min_length=1, max_length=2000)
    #: how long the feedback store takes to accept the write, s (a slow downstream)
    store_delay_s: float = Field(default=0.0, ge=0.0, le=30.0)
    #: the store refuses the write (the background task raises)
    store_fails: bool = False


async def send_feedback(client: httpx.AsyncClient, item: Feedback) -> None:
    """The background task: forwards the feedback with the lifespan-made client, after the
    answer left. Appends to `FEEDBACK` and, when ``LLM_FEEDBACK_MARK`` names a file, a JSON line
    there (another process's tests read it)."""
    started = time.time()
    await asyncio.sleep(item.store_delay_s)
    if item.store_fails:
        raise RuntimeError(f"the feedback store refused {item.text!r}")
    reply = await client.post("/v1/complete", json={"prompt": f"feedback: {item.text}"})
    reply.raise_for_status()
    record = {"text": item.text, "started": started, "ended": time.time()}
    FEEDBACK.append(record)
    mark = os.environ.get("LLM_FEEDBACK_MARK")
    if mark:
        with open(mark, "a") as out:  # noqa: ASYNC230 - one short line
            out.write(json.dumps(record) + "\n")


@app.post("/v1/feedback", status_code=202)
async def feedback(item: Feedback, background_tasks: BackgroundTasks,
                   client: Annotated[httpx.AsyncClient, Depends(llm)]) -> dict[str, Any]:
    background_tasks.add_task(send_feedback, client, item)
    return {"accepted": True, "answered_at": time.time()}
