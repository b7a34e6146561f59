"""The toolkit's internal extension (`functions.runtime.post_response`) on its faults: a
registration refused or unreachable (the handler falls back to finishing before the response),
``event/next`` answering 500 (retried, then ``exit/error`` and the extension stops), work that
raises or has no time left. A small real HTTP server plays the Runtime API here; the emulator's
own Runtime API runs the happy path end to end (tests/e2e/test_post_response.py)."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from functions.runtime.post_response import PostResponse, PostResponseError
from tests.unit.runtime.test_agent import Built, env_for, orders_agent


class RuntimeApi:
    """Answers register with ``register_status``; ``event/next`` from a queue of
    ``(status, body)``; records every request."""

    def __init__(self, register_status: int = 200) -> None:
        self.register_status = register_status
        self.events: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                api.requests.append(("POST", self.path, dict(self.headers)))
                if self.path.endswith("/register"):
                    self._send(api.register_status, {"errorType": "Refused"} if
                               api.register_status != 200 else {},
                               {"Lambda-Extension-Identifier": "ext-1"})
                else:
                    self._send(202, {}, {})

            def do_GET(self) -> None:
                api.requests.append(("GET", self.path, dict(self.headers)))
                status, body = api.events.get(timeout=10)
                self._send(status, body, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def invoke(self, request_id: str, deadline_in_ms: float = 5000.0) -> None:
        self.events.put((200, {"eventType": "INVOKE", "requestId": request_id,
                               "deadlineMs": time.time() * 1000 + deadline_in_ms}))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[RuntimeApi]:
    server = RuntimeApi()
    yield server
    server.close()


def test_work_runs_after_the_handler_returned_and_a_failing_item_is_reported(api: RuntimeApi) -> None:
    errors: list[tuple[str, str]] = []
    post = PostResponse(api.address, on_error=lambda tag, msg: errors.append((tag, msg)))
    assert post.register() == "ext-1" and post.active
    method, path, headers = api.requests[0]
    assert (method, path) == ("POST", "/2020-01-01/extension/register")
    assert headers["Lambda-Extension-Name"] == "warmstart-post-response"
    ran: list[str] = []

    def boom(_: float) -> None:
        raise RuntimeError("flush failed")

    post.submit("r1", boom)
    post.submit("r1", lambda until_ms: ran.append(f"r1 until {until_ms > time.time() * 1000}"))
    api.invoke("r1")
    time.sleep(0.2)
    assert ran == []  # the handler has not returned yet: nothing runs
    post.handler_returned("r1")
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == ["r1 until True"]
    assert errors == [("internal_error", "post-response work failed: RuntimeError: flush failed")]
    # a returned invocation whose INVOKE arrives later is matched by its request id
    post.handler_returned("r2")
    post.submit("r2", lambda _: ran.append("r2"))
    api.invoke("r2")
    deadline = time.monotonic() + 5
    while len(ran) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran[-1] == "r2" and post.active


def test_work_without_time_left_is_skipped_with_a_timeout_tag(api: RuntimeApi) -> None:
    errors: list[tuple[str, str]] = []
    post = PostResponse(api.address, on_error=lambda tag, msg: errors.append((tag, msg)))
    post.register()
    ran: list[int] = []
    post.submit("late", lambda _: ran.append(1))
    post.handler_returned("late")
    api.invoke("late", deadline_in_ms=-1000.0)  # the function timeout has passed
    deadline = time.monotonic() + 5
    while not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == [] and errors and errors[0][0] == "timeout"


def test_a_runtime_api_answering_500_stops_the_extension_after_retries(api: RuntimeApi) -> None:
    errors: list[tuple[str, str]] = []
    post = PostResponse(api.address, on_error=lambda tag, msg: errors.append((tag, msg)))
    post.register()
    for _ in range(3):
        api.events.put((500, {"errorType": "Runtime.Unknown"}))
    deadline = time.monotonic() + 5
    while post.active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not post.active
    assert [r[1] for r in api.requests].count("/2020-01-01/extension/event/next") == 3
    assert ("POST", "/2020-01-01/extension/exit/error") in [(m, p) for m, p, _ in api.requests]
    assert errors and errors[-1][0] == "internal_error" and "HTTP 500" in errors[-1][1]


def test_a_refused_registration_says_why() -> None:
    server = RuntimeApi(register_status=403)
    try:
        with pytest.raises(PostResponseError, match="extension register refused: HTTP 403"):
            PostResponse(server.address).register()
    finally:
        server.close()
    with pytest.raises(PostResponseError, match="cannot reach the Runtime API"):
        PostResponse("127.0.0.1:9").register()


def test_a_handler_whose_registration_fails_finishes_the_preload_before_the_response(
        caplog: pytest.LogCaptureFixture) -> None:
    built = Built()
    try:
        with caplog.at_level(logging.WARNING, logger="warmstart"):
            handler, _ = built.handler(orders_agent(built.gate(released=True)), env_for(
                WARMSTART_FINISH_PRELOAD="after", AWS_LAMBDA_RUNTIME_API="127.0.0.1:9"))
        assert handler.post_response is None
        [line] = [r.getMessage() for r in caplog.records if "post-response" in r.getMessage()]
        assert "failure_tag=extension_refused" in line and "before the response" in line
    finally:
        built.close()
