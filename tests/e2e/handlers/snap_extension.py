"""A SnapStart handler with an internal extension that registers again after each restore.

The emulator restores by forking the template process: only the forking thread lives on in
the restored environment, so an extension thread started at the snapshot's init is gone, and
the restored environment has its own Runtime API. An after-restore hook (snapshot-restore-py)
registers again there and starts a new thread; registration is open during the restore.
"""

from __future__ import annotations

import http.client
import json
import os
import threading

from snapshot_restore_py import register_after_restore

NAME = os.path.basename(__file__)


def _register() -> int:
    api = os.environ["AWS_LAMBDA_RUNTIME_API"]
    conn = http.client.HTTPConnection(api)
    conn.request("POST", "/2020-01-01/extension/register", body=json.dumps({"events": ["INVOKE"]}),
                 headers={"Lambda-Extension-Name": NAME})
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        return response.status
    ext_id = response.headers["Lambda-Extension-Identifier"]

    def loop() -> None:
        events = http.client.HTTPConnection(api)
        while True:
            events.request("GET", "/2020-01-01/extension/event/next",
                           headers={"Lambda-Extension-Identifier": ext_id})
            answer = events.getresponse()
            answer.read()
            if answer.status != 200:
                return

    threading.Thread(target=loop, name="internal-extension", daemon=True).start()
    return response.status


REGISTERED = [_register()]  # at the snapshot's init, on the template's Runtime API


@register_after_restore
def _register_again() -> None:
    REGISTERED.append(_register())  # on the restored environment's own Runtime API


def handler(event, context):
    return {"registered": REGISTERED, "pid": os.getpid(),
            "runtime_api": os.environ["AWS_LAMBDA_RUNTIME_API"]}
