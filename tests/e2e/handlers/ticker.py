"""A handler whose init phase starts a background thread that counts ticks (every 10 ms).

Like an agent's background model preload, the thread runs on its own; on Lambda it makes no
progress while the execution environment is frozen between invocations.
"""

from __future__ import annotations

import os
import threading
import time

TICK_S = 0.01
_TICKS = 0


def _count() -> None:
    global _TICKS
    while True:
        time.sleep(TICK_S)
        _TICKS += 1


threading.Thread(target=_count, name="ticker", daemon=True).start()


def handler(event, context):
    """Returns the tick count when the invocation started and when it returns."""
    start = _TICKS
    if isinstance(event, dict) and event.get("sleep_s"):
        time.sleep(float(event["sleep_s"]))
    return {"ticks_at_start": start, "ticks_at_end": _TICKS, "pid": os.getpid()}
