"""``infra.progress``: a tqdm bar on a terminal, plain lines (never ``\\r``) elsewhere, nothing
with ``quiet``."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infra import progress as progress_mod
from infra.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_gets_periodic_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    p = Progress(40, "replay [off]", unit="req", stream=stream, interval_s=10.0)
    for _ in range(12):
        clock[0] += 0.25
        p.update(1, sent=15, in_flight=3)
    assert stream.getvalue() == ""  # less than 10 s: no line yet
    clock[0] += 10.0
    p.update(1, sent=15, in_flight=2)
    p.close()
    p.close()  # once only
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 2
    assert lines[0] == "replay [off]:  32% 13/40 [00:13<00:27,  1.00req/s, sent=15, in_flight=2]"
    assert lines[1].startswith("replay [off]:  32% 13/40 ")


def test_quiet_writes_nothing() -> None:
    stream = Terminal()
    with Progress(3, "calibrate", stream=stream, quiet=True, interval_s=0.0) as p:
        p.update(3)
    assert stream.getvalue() == "" and p.n == 3


def test_a_terminal_gets_a_live_tqdm_bar() -> None:
    stream = Terminal()
    with Progress(4, "calibrate on-demand", unit="env", stream=stream) as p:
        for _ in range(4):
            p.update(1, cold_ms=900)
            time.sleep(0.01)
    text = stream.getvalue()
    assert "\r" in text and "calibrate on-demand: 100%|" in text and "4/4" in text
    assert "cold_ms=900" in text


@pytest.fixture
def gateway() -> Iterator[str]:
    """A local server answering every POST with 200 ``{"ok": true}``."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_replay_client_reports_through_it(gateway: str) -> None:
    from infra.replay.client import send_requests

    stream = io.StringIO()
    records = send_requests(gateway, [0.0, 0.01, 0.02], [1.0, 1.0, 1.0], label="[off]",
                            progress_stream=stream)
    assert [r.status for r in records] == [200, 200, 200]
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 1  # a log: one line at the end
    assert lines[0].startswith("replay [off]: 100% 3/3 [") and lines[0].endswith(
        "req/s, sent=3, in_flight=0]")
    quiet = io.StringIO()
    send_requests(gateway, [0.0], [1.0], progress_stream=quiet, quiet=True)
    assert quiet.getvalue() == ""
