"""A handler with an internal extension (a thread of the runtime process), stdlib only.

At import (the init phase) it registers with the Extensions API under its file name for
``INVOKE``, as an internal extension must, and tries what Lambda refuses (the same name again;
``SHUTDOWN`` for an internal extension). Its thread waits on ``event/next``; on ``INVOKE`` it
waits for the handler to return, then works ``post_s`` seconds after the response (or never
calls ``next`` again with ``hang``) before it asks for the next event.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time

API = os.environ["AWS_LAMBDA_RUNTIME_API"]
NAME = os.path.basename(__file__)
_handler_done = threading.Event()
_plan: dict = {}
_post_work: list[dict] = []


def _call(method: str, path: str, body: dict | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection(API)
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, dict(response.headers), json.loads(data or b"null")


REGISTER = _call("POST", "/2020-01-01/extension/register", {"events": ["INVOKE"]},
                 {"Lambda-Extension-Name": NAME, "Lambda-Extension-Accept-Feature": "accountId"})
EXTENSION_ID = REGISTER[1]["Lambda-Extension-Identifier"]
DUPLICATE = _call("POST", "/2020-01-01/extension/register", {"events": ["INVOKE"]},
                  {"Lambda-Extension-Name": NAME})
SHUTDOWN_INTERNAL = _call("POST", "/2020-01-01/extension/register", {"events": ["SHUTDOWN"]},
                          {"Lambda-Extension-Name": "other.py"})
EVENTS: list[dict] = []


def _extension() -> None:
    while True:
        status, _headers, event = _call("GET", "/2020-01-01/extension/event/next",
                                        headers={"Lambda-Extension-Identifier": EXTENSION_ID})
        if status != 200:
            return
        EVENTS.append(event)
        if event.get("eventType") != "INVOKE":
            continue
        _handler_done.wait(30)
        _handler_done.clear()
        if _plan.get("hang"):
            time.sleep(3600)
        if _plan.get("exit_error"):  # a failure the extension cannot recover from
            _call("POST", "/2020-01-01/extension/exit/error", {"errorMessage": "lost its socket"},
                  {"Lambda-Extension-Identifier": EXTENSION_ID,
                   "Lambda-Extension-Function-Error-Type": "Extension.Broken"})
        started = time.time()
        time.sleep(float(_plan.get("post_s", 0)))
        _post_work.append({"request_id": event["requestId"], "started": started, "ended": time.time()})


threading.Thread(target=_extension, name="internal-extension", daemon=True).start()


def _on_sigterm(signum, frame):  # the runtime's Shutdown phase when extensions are registered
    with open(os.environ["SIGTERM_LOG"], "a") as log:
        log.write(json.dumps({"signal": signum, "post_work": len(_post_work)}) + "\n")
    os._exit(0)


if os.environ.get("SIGTERM_LOG"):
    signal.signal(signal.SIGTERM, _on_sigterm)


def handler(event, context):
    """Plans the extension's post-response work and says what the init phase saw."""
    _plan.clear()
    _plan.update(event)
    time.sleep(float(event.get("sleep_s", 0)))
    late = None
    if event.get("register_late"):
        late = _call("POST", "/2020-01-01/extension/register", {"events": ["INVOKE"]},
                     {"Lambda-Extension-Name": "late.py"})
    answer = {
        "runtime_api": API, "pid": os.getpid(), "request_id": context.aws_request_id,
        "register": {"status": REGISTER[0], "body": REGISTER[2]},
        "duplicate": {"status": DUPLICATE[0], "body": DUPLICATE[2]},
        "shutdown_internal": {"status": SHUTDOWN_INTERNAL[0], "body": SHUTDOWN_INTERNAL[2]},
        "late": None if late is None else {"status": late[0], "body": late[2]},
        "events": list(EVENTS), "post_work": list(_post_work),
    }
    _handler_done.set()
    return answer
