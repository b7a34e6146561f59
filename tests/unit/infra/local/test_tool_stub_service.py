"""The local tool stub as a backing service: empty ``*_TOOL_URL`` variables get its URL."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from infra.local.services import ToolStubService
from infra.local.spec import FunctionSpec


def _spec(environment: dict[str, str]) -> FunctionSpec:
    return FunctionSpec(name="lookup-fn", handler="functions.lookup.handler.handler",
                        code_dir=Path("functions/lookup"), environment=environment)


def test_empty_tool_urls_get_the_running_stub_and_it_answers() -> None:
    service = ToolStubService(latency_ms=0.0)
    service.start()
    try:
        env = service.function_environment(_spec({"LOOKUP_TOOL_URL": "", "OTHER_TOOL_URL": "https://x",
                                                  "WARMSTART_SLA_MS": ""}))
        # only the empty *_TOOL_URL variable is filled; a deployed URL and other names stay
        assert env == {"LOOKUP_TOOL_URL": service.endpoint}
        with urllib.request.urlopen(f"{service.endpoint}/orders/A-1", timeout=5) as reply:
            assert reply.status == 200
            assert json.loads(reply.read())["order_id"] == "A-1"
    finally:
        service.stop()
