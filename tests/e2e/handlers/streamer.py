"""A handler that streams: a ``StreamedResponse`` of N chunks, driven by its event (stdlib only).

Event keys (all optional): ``chunks`` (N, default 3), ``sleep_s`` (between chunks), ``gate``
(a file path: chunk ``gate_at`` (default 2) is produced only once the file exists, or after
10 s as ``b"gate-timeout"``), ``raise_after`` (raise after that many chunks), ``chunk_bytes``
(each chunk that many bytes), ``endless`` (chunks until closed), ``hang_after`` (sleep 60 s
after that many chunks), ``exit_after`` (the process exits after that many), ``sse`` (SSE
events), ``closed_flag`` / ``outcome_file`` (files the stream's ``on_close`` and
``on_finish`` write), ``buffered`` (answer a plain dict instead).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

from functions.runtime.streaming import StreamedResponse, runtime_streams, sse_event

STREAMS_AT_INIT = runtime_streams()  # the runtime client marks itself before this import


def _chunks(event: dict[str, Any]) -> Iterator[bytes]:
    count = int(event.get("chunks", 3))
    size = event.get("chunk_bytes")
    i = 0
    while event.get("endless") or i < count:
        if event.get("raise_after") is not None and i == int(event["raise_after"]):
            raise RuntimeError("the model went away")
        if event.get("hang_after") is not None and i == int(event["hang_after"]):
            time.sleep(60)
        if event.get("exit_after") is not None and i == int(event["exit_after"]):
            os._exit(3)  # the runtime process dies mid-stream
        if event.get("gate") and i == int(event.get("gate_at", 2)):
            deadline = time.monotonic() + 10.0
            while not os.path.exists(event["gate"]):
                if time.monotonic() > deadline:
                    yield b"gate-timeout"
                    return
                time.sleep(0.005)
        yield b"x" * int(size) if size else sse_event({"token": i}) if event.get("sse") else f"chunk-{i}".encode()
        i += 1
        if event.get("sleep_s"):
            time.sleep(float(event["sleep_s"]))


def handler(event: dict[str, Any], context: Any) -> Any:
    if event.get("buffered"):
        return {"buffered": True, "streams": runtime_streams(), "at_init": STREAMS_AT_INIT}
    closed_flag = event.get("closed_flag")

    def on_close() -> None:
        if closed_flag:
            with open(closed_flag, "w") as flag:
                flag.write("closed")

    response = StreamedResponse(
        200, {"content-type": "text/event-stream" if event.get("sse") else "text/plain",
              "x-streams": str(runtime_streams()), "x-request-id": context.aws_request_id},
        _chunks(event), cookies=["a=1"], on_close=on_close)
    if event.get("outcome_file"):
        path = event["outcome_file"]

        def on_finish(outcome: Any) -> None:
            with open(path, "w") as out:
                json.dump(outcome._asdict(), out)

        response.on_finish = on_finish
    return response
