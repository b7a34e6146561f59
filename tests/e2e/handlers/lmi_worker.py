"""A stdlib handler for the emulator's Lambda Managed Instances tests: one runtime process of an
LMI execution environment.

Its init writes ``init-<pid>`` into the temporary folder (``tempfile``: the environment's shared
``TMPDIR``). An event ``{"hold": true}`` makes the invocation wait until the file ``release``
exists there (the test writes it), so a test holds the processes busy without timing.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

TMP = Path(tempfile.gettempdir())
PID = os.getpid()
(TMP / f"init-{PID}").write_text(str(PID))
_SERVED = 0


def handler(event, context):
    global _SERVED
    _SERVED += 1
    if isinstance(event, dict) and event.get("hold"):
        deadline = time.monotonic() + 60.0
        while not (TMP / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return {
        "pid": PID,
        "tmp": str(TMP),
        "inits": sorted(p.name for p in TMP.glob("init-*")),
        "served": _SERVED,
        "init_type": os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE"),
        "max_concurrency": os.environ.get("AWS_LAMBDA_MAX_CONCURRENCY"),
        "log_stream": os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME"),
    }
