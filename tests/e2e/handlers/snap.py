"""A SnapStart handler: heavy-ish init, before-snapshot and after-restore hooks.

The init phase draws random state and an id that the snapshot captures. The after-restore
hook reseeds ``random`` and makes a new id, so restored environments differ (AWS's advice).
Set ``SNAP_HOOKS=off`` to skip the hooks and see the shared snapshot state.
"""

from __future__ import annotations

import os
import random
import time
import uuid

from snapshot_restore_py import register_after_restore, register_before_snapshot

STATE = {"env_id": uuid.uuid4().hex, "before_snapshot": 0, "after_restore": 0,
         "connection": "open", "init_pid": os.getpid()}
random.seed(1234)  # deterministic state baked into the snapshot
time.sleep(float(os.environ.get("INIT_SLEEP_S", "0")))

if os.environ.get("SNAP_HOOKS", "on") == "on":
    @register_before_snapshot
    def _close_connections() -> None:
        STATE["before_snapshot"] += 1
        STATE["connection"] = "closed"

    @register_after_restore
    def _restore_uniqueness() -> None:
        STATE["after_restore"] += 1
        random.seed(os.urandom(16))
        STATE["env_id"] = uuid.uuid4().hex
        STATE["connection"] = "reopened"


def handler(event, context):
    if isinstance(event, dict) and event.get("sleep_s"):
        time.sleep(float(event["sleep_s"]))
    return {"random": random.random(), "pid": os.getpid(), **STATE,
            "init_type": os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE")}
