"""The load client's accounting against a real HTTP server that answers 200, 429, 503 and 500 in
turn and drops every fifth connection unanswered: each request sent has one outcome, a dropped
one is *lost*; faults run in order under the load; bad arguments are refused."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infra.local.load import ScheduledFault, run_load, stack_faults


@pytest.fixture
def server() -> Iterator[str]:
    statuses = itertools.cycle([200, 429, 503, 500, 0])
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                status = next(statuses)
            if status == 0:  # no answer at all
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.send_header("X-Warmstart-Path", "local")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def test_every_request_sent_has_one_outcome_and_a_dropped_one_is_lost(server):
    result = run_load(server, clients=3, duration_s=5.0, max_requests=50, backoff_s=0.0)
    counts = result.counts
    assert counts["sent"] == 50 == len(result.outcomes) and result.unaccounted == 0
    assert counts == {"answered": 10, "throttled": 10, "shed": 10, "errors": 10, "lost": 10, "sent": 50}
    assert result.by_status == {0: 10, 200: 10, 429: 10, 500: 10, 503: 10}
    lost = [o for o in result.outcomes if o.kind == "lost"]
    assert all(o.error for o in lost) and all(o.path == "local" for o in result.outcomes if o.status == 200)
    assert result.throughput_per_s() > 0 and result.latency_ms(0.5) <= result.latency_ms(0.99)
    get = run_load(server, clients=1, duration_s=5.0, max_requests=5, method="GET", path="/healthz")
    assert get.counts["sent"] == 5 and get.unaccounted == 0


def test_faults_run_in_order_under_the_load_and_a_failed_one_is_recorded(server):
    ran: list[str] = []

    def boom() -> str:
        raise RuntimeError("cannot")

    faults = [ScheduledFault(0.05, "first", lambda: ran.append("first") or "did first"),
              ScheduledFault(0.05, "broken", boom),
              ScheduledFault(0.05, "last", lambda: ran.append("last") or "did last")]
    result = run_load(server, clients=2, duration_s=0.01, faults=faults, tail_s=0.2, backoff_s=0.0)
    assert ran == ["first", "last"]
    assert [(f.name, f.ok, f.detail) for f in result.faults] == [
        ("first", True, "did first"), ("broken", False, "RuntimeError: cannot"), ("last", True, "did last")]
    # the load lasted past the last fault by the tail, though its duration was shorter
    assert max(o.sent_s for o in result.outcomes) >= result.faults[-1].ended_s + 0.1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"clients": 0, "duration_s": 1.0}, "clients must be >= 1"),
    ({"clients": 1, "duration_s": 0.0}, "duration_s must be > 0"),
    ({"clients": 1, "duration_s": 1.0, "max_requests": 0}, "max_requests must be >= 1"),
    ({"clients": 1, "duration_s": 1.0, "backoff_s": -1.0}, "must be >= 0"),
    ({"clients": 1, "duration_s": 1.0, "path": "v1/intent"}, "path must start with '/'"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_load("http://127.0.0.1:9", **kwargs)


def test_unknown_faults_and_negative_delays_are_refused():
    with pytest.raises(ValueError, match="unknown fault 'unplug'; known: kill-environment"):
        stack_faults(object(), "fn", [(1.0, "unplug")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay must be >= 0 s"):
        stack_faults(object(), "fn", [(-1.0, "kill-moto")])  # type: ignore[arg-type]
