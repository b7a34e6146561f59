"""An HTTP API (payload v2.0) handler for the gateway's limits: sleeps, answers N bytes, counts."""

from __future__ import annotations

import base64
import json
import time


def handler(event, context):
    path = event.get("rawPath", "")
    query = event.get("queryStringParameters") or {}
    if path == "/sleep":
        time.sleep(float(query.get("s", "1")))
        return {"statusCode": 200, "body": "slept"}
    if path == "/bytes":  # a response body of n bytes
        return {"statusCode": 200, "headers": {"content-type": "text/plain"},
                "body": "x" * int(query.get("n", "0"))}
    body = event.get("body") or ""
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
    return {"statusCode": 200, "body": json.dumps({"received_bytes": len(raw)})}
