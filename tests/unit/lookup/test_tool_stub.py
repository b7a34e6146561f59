"""The local order service (`infra.local.tool_stub`): real HTTP, real latency, injected failures."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from infra.local.tool_stub import STATUSES, ToolStub
from tests.conftest import REPO_ROOT


def get(url: str, timeout_s: float = 5.0) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_answers_an_order_after_its_latency(stub: ToolStub) -> None:
    stub.latency_ms = 60
    started = time.perf_counter()
    status, body = get(f"{stub.url}/orders/A-1001")
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    assert status == 200
    assert body["order_id"] == "A-1001" and body["status"] in STATUSES
    assert elapsed_ms >= 60
    assert stub.requests == ["A-1001"]
    assert get(f"{stub.url}/orders/A-1001")[1] == body  # stable per id


def test_explicit_status_missing_order_and_health(stub: ToolStub) -> None:
    stub.statuses["A-1"] = "delivered"
    stub.missing.add("GONE-1")
    assert get(f"{stub.url}/orders/A-1")[1]["status"] == "delivered"
    assert get(f"{stub.url}/orders/GONE-1")[0] == 404
    assert get(f"{stub.url}/healthz") == (200, {"status": "ok"})
    assert get(f"{stub.url}/nothing")[0] == 404
    assert stub.requests == ["A-1", "GONE-1"]  # order requests only


def test_error_injection_with_a_count(stub: ToolStub) -> None:
    stub.fail("error", status=500, times=2)
    assert get(f"{stub.url}/orders/A-1")[0] == 500
    assert get(f"{stub.url}/orders/A-1")[0] == 500
    assert get(f"{stub.url}/orders/A-1")[0] == 200


def test_hang_outlasts_the_client_timeout(stub: ToolStub) -> None:
    stub.fail("hang")
    started = time.perf_counter()
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        get(f"{stub.url}/orders/A-1", timeout_s=0.2)
    assert 0.2 <= time.perf_counter() - started < 2.0
    assert stub.requests == ["A-1"]  # received, never answered


def test_refuse_closes_the_port_and_reopens_it(stub: ToolStub) -> None:
    port = stub.port
    stub.fail("refuse")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    with pytest.raises(ConnectionRefusedError):
        conn.connect()
    stub.fail(None)
    assert stub.port == port
    assert get(f"{stub.url}/orders/A-1")[0] == 200


def test_refuse_with_a_count_is_refused(stub: ToolStub) -> None:
    with pytest.raises(ValueError, match="times cannot count refused"):
        stub.fail("refuse", times=1)
    with pytest.raises(ValueError, match="unknown failure"):
        stub.fail("slow")  # type: ignore[arg-type]


def test_stop_releases_a_hanging_request() -> None:
    server = ToolStub(hang_s=30.0).start()
    server.fail("hang")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5.0)
    conn.request("GET", "/orders/A-1")
    started = time.perf_counter()
    server.stop()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        conn.getresponse()
    assert time.perf_counter() - started < 3.0
    with pytest.raises(RuntimeError, match="not started"):
        ToolStub().url  # noqa: B018


def test_command_line_serves_with_latency() -> None:
    # GIVEN the stub started the documented way
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra.local.tool_stub", "--port", "0", "--latency-ms", "40"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[2]
        # WHEN an order is asked THEN it answers after the latency
        started = time.perf_counter()
        status, body = get(f"{url}/orders/Z-9")
        assert status == 200 and body["order_id"] == "Z-9"
        assert (time.perf_counter() - started) * 1000.0 >= 40
    finally:
        proc.terminate()
        proc.wait(timeout=10)
