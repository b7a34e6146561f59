"""The agent of tests/e2e/test_toolkit_lmi.py (copied into the function code as ``lmi_agent.py``):
a toolkit ``Agent`` with a model, run on emulated Lambda Managed Instances.

``GET /v1/whoami`` answers with the runtime process's pid, the model's state and its loader's
pid; with ``?hold=1`` it first waits for the file ``release`` in the temporary folder (the LMI
environment's shared ``TMPDIR``), so the test holds the processes busy without timing.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from functions.runtime.agent import Agent, AgentRuntime, Route


def load_model(runtime: AgentRuntime) -> dict[str, Any]:
    return {"loaded_by": os.getpid(), "loaded_at": time.time()}


def create_app(runtime: AgentRuntime) -> Any:
    from fastapi import FastAPI

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/whoami")
    async def whoami(hold: int = 0) -> dict[str, Any]:
        release = Path(tempfile.gettempdir()) / "release"
        deadline = time.monotonic() + 60.0
        while hold and not release.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        debug = runtime.debug()
        return {"pid": os.getpid(), "model_state": runtime.model_state(),
                "loaded_by": runtime.model()["loaded_by"], "tmp": tempfile.gettempdir(),
                "init_type": debug["init_type"], "requests": debug["requests"],
                "environment_id": debug["environment_id"]}

    return app


agent = Agent("lmiagent", app=create_app, routes=[Route("GET", "/v1/whoami", needs_model=True)],
              model=load_model)
handler = agent.lambda_handler()
