"""A streaming agent end to end: ``Agent(routes=[Route(stream=True)])`` in a real execution
environment of the emulator, run by warmstart's streaming runtime client (the exec wrapper),
read with ``Emulator.invoke_stream`` as a function URL's client reads it.

The agent (``tests/e2e/streaming_agent_app.py``) waits for files before each token and in its
model loader: the test writes them, so every step is checked without a timing assertion.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from functions.runtime.streaming import split_prelude
from infra.local.spec import AliasSpec, FunctionSpec
from tests.conftest import adapt_event
from tests.unit.runtime.test_stream_dispatch import events_of

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = "/var/task/functions/runtime/warmstart-stream"


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    """The folder of the agent's gate files (``model``, ``token-<i>``)."""
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "functions").symlink_to(ROOT / "functions")
    shutil.copy(Path(__file__).with_name("streaming_agent_app.py"), code / "stream_agent.py")
    return code


def spec(code: Path, gates: Path, **env: str) -> FunctionSpec:
    environment = {"AWS_LAMBDA_EXEC_WRAPPER": WRAPPER, "STREAM_AGENT_GATES": str(gates),
                   "WARMSTART_FINISH_PRELOAD": "off", "WARMSTART_SLA_MS": "2000", **env}
    return FunctionSpec(name="streamchat", handler="stream_agent.handler", code_dir=code,
                        environment=environment, timeout_s=30.0,
                        aliases=(AliasSpec("live", "1"),))


def url_event(path: str, body: Any = None) -> bytes:
    return json.dumps(adapt_event("function_url.json", "POST", path, body)).encode()


def prelude_of(stream: Any) -> tuple[dict[str, Any], bytes]:
    """The prelude (status, headers) and any body bytes read with it."""
    data = b""
    while True:
        data += next(stream)
        split = split_prelude(data)
        if split is not None:
            return split


def test_tokens_reach_the_client_one_by_one_with_status_and_headers_first(
        make_emulator: Any, code_dir: Path, gates: Path, tmp_path: Path) -> None:
    (gates / "model").write_text("ready")
    emu = make_emulator()
    emu.add_function(spec(code_dir, gates, STREAM_AGENT_GATED="1"))
    pong = emu.invoke("streamchat", json.dumps({"warmstart": {"ping": True}}).encode(),
                      qualifier="live")  # a warm ping: the preload finishes in it
    assert json.loads(pong.payload)["warmstart"]["ready"] is True
    stream = emu.invoke_stream("streamchat", url_event("/v1/chat", {"text": "hi"}), qualifier="live")
    meta, rest = prelude_of(stream)  # no token may exist yet: gate 0 is shut
    assert meta["statusCode"] == 200 and rest == b""
    assert meta["headers"]["content-type"].startswith("text/event-stream")
    assert meta["headers"]["x-warmstart-path"] == "local"
    seen = []
    for i in range(3):
        (gates / f"token-{i}").write_text("go")  # only now can the app make token i
        seen.append(events_of(next(stream))[0][1]["token"])
    assert list(stream) == []
    assert seen == ["the", "order", "shipped"]
    assert stream.error is None and stream.result.function_error is None
    assert stream.result.environment_id == pong.environment_id
    # recorded when the stream ended: one log line with its numbers, and the EMF metrics
    line = logged(tmp_path, '"message":"stream"')
    assert line["path"] == "local" and line["stream"]["chunks"] == 3
    assert line["stream"]["ttft_ms"] > 0 and "failure" not in line
    metrics = logged(tmp_path, '"TimeToFirstTokenMs"')
    assert metrics["TimeToFirstTokenMs"] == [line["stream"]["ttft_ms"]]
    assert "TokensPerSecond" in metrics and metrics["StreamChunks"] == [3.0]


def logged(tmp_path: Path, marker: str) -> dict[str, Any]:
    """The first JSON line holding ``marker`` in the emulator's log (the function's stdout),
    waiting for it a bounded while (the function writes it after the stream's end)."""
    log = tmp_path / "emulator0.log"
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        for raw in log.read_text().splitlines():
            start = raw.find("{")
            if marker in raw and start >= 0:
                try:
                    return dict(json.loads(raw[start:]))
                except ValueError:
                    continue
        time.sleep(0.02)
    raise AssertionError(f"no log line with {marker} in {log}")


def test_a_cold_start_sends_the_degraded_first_event_then_the_full_stream(
        make_emulator: Any, code_dir: Path, gates: Path) -> None:
    """GIVEN a model the preload estimates at 10 s and a first-token SLA of 800 ms, WHEN the
    first request arrives, THEN the degraded event comes first while the model still loads,
    then the app's tokens once it has loaded, in the same response."""
    emu = make_emulator()
    emu.add_function(spec(code_dir, gates, STREAM_AGENT_MODEL_P95_MS="10000"))
    stream = emu.invoke_stream("streamchat", url_event("/v1/chat", {"text": "hi"}), qualifier="live")
    meta, rest = prelude_of(stream)
    assert meta["statusCode"] == 200 and meta["headers"]["x-warmstart-path"] == "degraded"
    first = rest or next(stream)
    assert events_of(first) == [("degraded", {"notice": "warming up", "echo": "hi",
                                              "degraded": True, "level": "L0"})]
    (gates / "model").write_text("ready")  # the model loads only now
    body = b"".join(stream)
    assert [value["token"] for _, value in events_of(body)] == ["the", "order", "shipped"]
    assert stream.error is None


def failed_stream(make_emulator: Any, code_dir: Path, gates: Path, path: str) -> tuple[Any, bytes]:
    """The stream of ``path`` (a route that fails after its start) read to its end: the
    stream (``error`` holds the trailers) and its body; its prelude said 200."""
    (gates / "model").write_text("ready")
    emu = make_emulator()
    emu.add_function(spec(code_dir, gates))
    stream = emu.invoke_stream("streamchat", url_event(path), qualifier="live")
    meta, rest = prelude_of(stream)
    body = rest + b"".join(stream)
    assert meta["statusCode"] == 200
    return stream, body


def test_an_app_that_raises_mid_stream_ends_with_an_error_event_and_the_trailers(
        make_emulator: Any, code_dir: Path, gates: Path, tmp_path: Path) -> None:
    stream, body = failed_stream(make_emulator, code_dir, gates, "/v1/boom")
    names = [name for name, _ in events_of(body)]
    assert names == [None, "error"]
    assert events_of(body)[-1][1]["error"]["type"] == "stream_error"
    assert stream.error is not None and stream.error[0] == "Runtime.StreamError"
    line = logged(tmp_path, '"message":"stream failed"')
    assert line["failure"] == "stream_error" and line["stream"]["chunks"] == 2


def test_an_app_that_aborts_after_its_own_error_event_ends_with_the_trailers_only(
        make_emulator: Any, code_dir: Path, gates: Path, tmp_path: Path) -> None:
    """`StreamAborted` after the app's own error event: the client reads that event last (no
    second one) and the Runtime API's error trailers; the record carries the app's tag."""
    stream, body = failed_stream(make_emulator, code_dir, gates, "/v1/aborts")
    assert events_of(body) == [(None, {"token": "first"}), ("error", {"error": {
        "type": "llm_unavailable", "message": "no LLM answered"}})]
    assert stream.error is not None and stream.error[0] == "Runtime.StreamError"
    assert "downstream_timeout" in stream.error[1]["errorMessage"]
    line = logged(tmp_path, '"message":"stream failed"')
    assert line["failure"] == "downstream_timeout" and line["stream"]["chunks"] == 2
