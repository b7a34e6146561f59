"""``streamer.handler`` behind a function URL: its options come in the event's JSON body.

A function URL event (payload format 2.0) carries the request body as a string; this reads it
and hands it to ``streamer.handler`` as the event (stdlib only). Its own options:
``echo`` (answer the event's ``requestContext``, buffered), ``raise_before`` (raise before any
answer), ``hang_before`` (sleep that many seconds before answering).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from streamer import handler as streamer_handler


def handler(event: dict[str, Any], context: Any) -> Any:
    raw = event.get("body") or "{}"
    options = json.loads(base64.b64decode(raw) if event.get("isBase64Encoded") else raw)
    if options.get("echo"):
        return {"statusCode": 200, "headers": {"content-type": "application/json"},
                "body": json.dumps({"requestContext": event.get("requestContext")})}
    if options.get("raise_before"):
        raise ValueError("no answer at all")
    if options.get("hang_before"):
        time.sleep(float(options["hang_before"]))
    return streamer_handler(options, context)
