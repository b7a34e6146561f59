"""FastAPI ``BackgroundTasks`` after the answer, in a real execution environment (the emulator's
Runtime and Extensions API), with the production-style app (``tests/agents/llm_app``) and its
downstream stub on 127.0.0.1.

The toolkit's internal extension registers in the on-demand init; ``POST /v1/feedback`` answers
202 as soon as the response is complete, and its background task (1 s) runs in the
invocation's post-response phase: the Invoke result comes back first, the REPORT handed to the
listeners bills the task (``PostRuntimeExtensionsDuration``). A task that raises leaves the
answer as it was; its failure is logged with the traceback and counted (EMF).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from infra.local.emulator import Emulator
from infra.local.spec import FunctionSpec
from tests.agents.test_llm_app import StubLLM
from tests.conftest import adapt_event

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
TASK_S = 1.0


def event(method: str, path: str, body: Any = None) -> bytes:
    return json.dumps(adapt_event("http_api_v2.json", method, path, body)).encode()


def test_a_background_task_runs_after_the_answer_in_the_post_response_phase(
        make_emulator: Any, tmp_path: Path) -> None:
    finals: dict[str, Any] = {}
    arrived = threading.Condition()

    def listen(record: Any) -> None:
        with arrived:
            finals[record.request_id] = record
            arrived.notify_all()

    def final(request_id: str) -> Any:
        with arrived:
            assert arrived.wait_for(lambda: request_id in finals, 30), "no final REPORT"
            return finals[request_id]

    mark = tmp_path / "feedback.jsonl"
    with StubLLM() as stub:
        emu: Emulator = make_emulator()
        emu.add_listener(listen)
        emu.add_function(FunctionSpec(
            name="llm", handler="tests.agents.llm_app.entry.handler", code_dir=ROOT,
            memory_mb=1024, timeout_s=10,
            environment={"LLM_BASE_URL": stub.url, "LLM_FEEDBACK_MARK": str(mark),
                         "WARMSTART_SLA_MS": "5000", "AWS_REGION": "us-east-1",
                         "POWERTOOLS_SERVICE_NAME": "llm"}))
        first = emu.invoke("llm", event("GET", "/healthz"))  # the cold start: the web stage
        assert json.loads(first.payload)["statusCode"] == 200, first.payload
        final(first.request_id)

        # WHEN a request queues a background task that needs 1 s
        invoked = time.time()
        result = emu.invoke("llm", event("POST", "/v1/feedback",
                                         {"text": "warm is good", "store_delay_s": TASK_S}))
        answered = time.time()
        # THEN the answer comes back first, before the task has sent anything
        payload = json.loads(result.payload)
        assert payload["statusCode"] == 202 and json.loads(payload["body"])["accepted"] is True
        assert not result.cold_start and result.environment_id == first.environment_id
        assert answered - invoked < TASK_S * 0.8, answered - invoked
        assert not mark.exists()
        assert result.report is not None and not result.report.final
        # and the task finishes in the post-response phase, billed there
        report = final(result.request_id).report
        assert report.final and report.post_runtime_extensions_duration_ms >= TASK_S * 1000 * 0.8
        [record] = [json.loads(line) for line in mark.read_text().splitlines()]
        assert record["text"] == "warm is good" and record["ended"] > answered
        assert stub.requests == 1  # with the lifespan's client, on the environment's loop

        # WHEN the task raises, THEN the answer is the same, and the failure is logged, counted
        failed = emu.invoke("llm", event("POST", "/v1/feedback",
                                         {"text": "refused", "store_delay_s": 0.2,
                                          "store_fails": True}))
        assert json.loads(failed.payload)["statusCode"] == 202
        assert final(failed.request_id).report.status == "success"
        log = "".join(p.read_text() for p in tmp_path.glob("emulator*.log"))
        assert "a background task failed after the response" in log
        assert "the feedback store refused" in log and '"failure":"app_error"' in log
        assert "BackgroundFailures" in log
        # the environment goes on serving
        again = emu.invoke("llm", event("GET", "/healthz"))
        assert json.loads(again.payload)["statusCode"] == 200
        assert again.environment_id == first.environment_id
