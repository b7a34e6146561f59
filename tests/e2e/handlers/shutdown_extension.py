#!/usr/bin/env python3
"""An external extension (its own process): registers for INVOKE and SHUTDOWN; on SHUTDOWN it
writes the event to ``$SHUTDOWN_LOG`` and asks for the next event, as the docs say."""

import http.client
import json
import os
import sys

API = os.environ["AWS_LAMBDA_RUNTIME_API"]


def call(method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(API)
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers or {})
    response = conn.getresponse()
    return response.status, response.headers, response.read()


status, headers, _ = call("POST", "/2020-01-01/extension/register", {"events": ["INVOKE", "SHUTDOWN"]},
                          {"Lambda-Extension-Name": os.path.basename(__file__)})
if status != 200:
    sys.exit(1)
ext_id = headers["Lambda-Extension-Identifier"]
while True:
    status, _h, body = call("GET", "/2020-01-01/extension/event/next",
                            headers={"Lambda-Extension-Identifier": ext_id})
    if status != 200:
        sys.exit(0)
    event = json.loads(body)
    if event["eventType"] == "SHUTDOWN":
        with open(os.environ["SHUTDOWN_LOG"], "a") as log:
            log.write(json.dumps(event) + "\n")
        if os.environ.get("SHUTDOWN_HANG"):
            import time
            time.sleep(60)
