"""An HTTP API (payload v2.0) handler: echoes the event and answers with cookies/base64."""

from __future__ import annotations

import base64
import json


def handler(event, context):
    path = event.get("rawPath", "")
    if path == "/binary":
        return {"statusCode": 200, "headers": {"content-type": "application/octet-stream"},
                "isBase64Encoded": True, "body": base64.b64encode(bytes(range(256))).decode()}
    if path == "/plain":
        return {"hello": "world"}  # no statusCode: the gateway infers a 200 JSON response
    if path == "/boom":
        raise RuntimeError("boom")
    return {
        "statusCode": 201,
        "headers": {"content-type": "application/json", "x-echo": "yes"},
        "multiValueHeaders": {"x-multi": ["a", "b"]},
        "cookies": ["session=abc; Path=/", "theme=dark"],
        "body": json.dumps({"event": event}),
    }
