"""The app of the fuzzer's minimal user agent (`bench.fuzz_events.user_agent`): what a user
writes with FastAPI, including a route whose code raises (its text must never reach a body).

Not ``from __future__ import annotations``: FastAPI reads the handlers' annotations (``Request``,
the pydantic model) at route declaration.
"""

from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel

#: The route that fails on purpose, and the text its exception carries.
BOOM_PATH = "/v1/boom"
SECRET = "db-password-in-/srv/agent/secret.py"


class Item(BaseModel):
    """The body of ``POST /v1/items``."""

    name: str
    count: int = 1


def create_app() -> FastAPI:
    """The app: health, an echo behind a payload hook, a pydantic body, a path template, and
    ``GET /v1/boom`` that raises."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> Any:
        return {"status": "ok"}

    @app.post("/v1/echo")
    async def echo(request: Request) -> Any:
        return {"echo": (await request.json())["message"][:200]}

    @app.post("/v1/items")
    async def items(item: Item) -> Any:
        return {"name": item.name[:100], "count": item.count}

    @app.get("/v1/items/{item_id}")
    async def item(item_id: str) -> Any:
        return {"item_id": item_id[:100]}

    @app.get(BOOM_PATH)
    async def boom() -> Any:
        raise RuntimeError(SECRET)

    return app
