"""The Lambda entry point of the production-style app, for a real execution environment (the
emulator's): ``tests.agents.llm_app.entry.handler``. The in-process tests build their own
handlers from `tests.agents.llm_app.handler.agent` instead."""

from __future__ import annotations

from tests.agents.llm_app.handler import agent

handler = agent.lambda_handler()
