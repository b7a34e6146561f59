"""Shared test helpers: the real Lambda event samples and a Lambda context object.

The samples in ``tests/data/events/`` are never edited; :func:`adapt_event` copies one and
points it at a route of the app at run time.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
EVENTS_DIR = TESTS_DIR / "data" / "events"

#: The HTTP event samples (every file but the scheduled event, which is not HTTP).
HTTP_EVENT_FILES = (
    "http_api_v2.json",
    "http_api_v2_base64_body.json",
    "function_url.json",
    "rest_api_v1.json",
    "alb.json",
)

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
# Test modules import shared helpers as ``tests.conftest`` / ``tests.unit.agent.conftest``; with
# ``--import-mode=importlib`` that needs the repository root on sys.path even when pytest is run
# as ``.venv/bin/pytest`` rather than ``python -m pytest``.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


class LambdaContext:
    """The context object Lambda passes to a handler (the attributes handlers use).

    Parameters
    ----------
    timeout_s : float
        Function timeout; ``get_remaining_time_in_millis`` counts down from it.
    function_name : str
        ``function_name`` attribute.
    """

    def __init__(self, timeout_s: float = 30.0, function_name: str = "agent") -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.function_name = function_name
        self.function_version = "1"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}:live"
        self.memory_limit_in_mb = 2048
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/11/29/[1]" + uuid.uuid4().hex
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_event(name: str) -> dict[str, Any]:
    """A deep copy of ``tests/data/events/<name>``."""
    return copy.deepcopy(json.loads((EVENTS_DIR / name).read_text()))


def adapt_event(
    name: str,
    method: str,
    path: str,
    body: str | bytes | Mapping[str, Any] | None = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A copy of a real HTTP event sample aimed at ``method path`` with ``body``.

    Dict bodies are JSON-encoded; the base64 sample keeps ``isBase64Encoded`` and gets its body
    base64-encoded. Arrival times are set to now so the SLA clock is meaningful.
    """
    event = load_event(name)
    if isinstance(body, Mapping):
        body = json.dumps(body)
    now_ms = int(time.time() * 1000)
    context = event["requestContext"]
    if event.get("version") == "2.0":
        event["rawPath"] = path
        event["rawQueryString"] = ""
        context["http"]["method"] = method
        context["http"]["path"] = path
        context["timeEpoch"] = now_ms
    else:
        event["path"] = path
        event["httpMethod"] = method
        event["queryStringParameters"] = None
        event.pop("multiValueQueryStringParameters", None)
        if "resource" in event:
            event["resource"] = path
            context["path"] = path
            context["resourcePath"] = path
            context["httpMethod"] = method
            context["requestTimeEpoch"] = now_ms
    extra = {"content-type": "application/json"} if body is not None else {}
    extra.update(headers or {})
    if extra:
        if isinstance(event.get("headers"), dict):
            event["headers"].update(extra)
        if isinstance(event.get("multiValueHeaders"), dict):
            event["multiValueHeaders"].update({k: [v] for k, v in extra.items()})
    if body is None:
        event.pop("body", None)
        event["isBase64Encoded"] = False
    elif event.get("isBase64Encoded"):
        raw = body.encode() if isinstance(body, str) else body
        event["body"] = base64.b64encode(raw).decode()
    else:
        event["body"] = body if isinstance(body, str) else body.decode()
    return event


@pytest.fixture
def lambda_context() -> LambdaContext:
    """A fresh Lambda context with 30 s remaining."""
    return LambdaContext()


@pytest.fixture
def event_factory() -> Callable[..., dict[str, Any]]:
    """:func:`adapt_event` as a fixture."""
    return adapt_event


_MAIN_THREAD_LOOP: list[Any] = []


@pytest.fixture(autouse=True)
def _main_thread_has_an_open_event_loop() -> Any:
    """After each test, the main thread's current event loop is an open one.

    An `AppLoop` run on the main thread (``run_here``) makes its loop the thread's current one,
    and closing it (``close``/``renew``) leaves the closed loop current: plain Mangum, which
    takes ``asyncio.get_event_loop()``, then fails in a later test with ``Event loop is
    closed`` (tests/unit/agent/test_app.py after tests/unit/runtime/test_lifespan.py). On Lambda
    the toolkit's loop is the only one, so this is the test process's concern: one spare loop,
    closed at exit.
    """
    yield
    import asyncio
    import threading
    import warnings

    if threading.current_thread() is not threading.main_thread():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            current = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            current = None
    if current is None or current.is_closed():
        if not _MAIN_THREAD_LOOP or _MAIN_THREAD_LOOP[0].is_closed():
            _MAIN_THREAD_LOOP[:] = [asyncio.new_event_loop()]
            import atexit

            atexit.register(_MAIN_THREAD_LOOP[0].close)
        asyncio.set_event_loop(_MAIN_THREAD_LOOP[0])
