"""Small handlers for the emulator's end-to-end tests: plain functions, stdlib only."""

from __future__ import annotations

import os
import random
import time
import uuid

ENV_ID = uuid.uuid4().hex  # made once per execution environment (init phase)
INIT_TYPE = os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE")
_INVOCATIONS = 0
time.sleep(float(os.environ.get("INIT_SLEEP_S", "0")))

LAMBDA_VARS = ("AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_VERSION",
               "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_REGION",
               "AWS_DEFAULT_REGION", "_HANDLER", "AWS_LAMBDA_LOG_GROUP_NAME",
               "AWS_LAMBDA_LOG_STREAM_NAME", "LAMBDA_TASK_ROOT", "TZ", "GREETING")


def echo(event, context):
    """Returns the event, the environment's identity and what the context says."""
    global _INVOCATIONS
    _INVOCATIONS += 1
    if isinstance(event, dict) and event.get("sleep_s"):
        time.sleep(float(event["sleep_s"]))
    return {
        "event": event,
        "env_id": ENV_ID,
        "pid": os.getpid(),
        "init_type": INIT_TYPE,
        "invocation": _INVOCATIONS,
        "random": random.random(),
        "context": {
            "aws_request_id": context.aws_request_id,
            "function_name": context.function_name,
            "function_version": context.function_version,
            "invoked_function_arn": context.invoked_function_arn,
            "memory_limit_in_mb": context.memory_limit_in_mb,
            "log_group_name": context.log_group_name,
            "log_stream_name": context.log_stream_name,
            "remaining_ms": context.get_remaining_time_in_millis(),
        },
        "env": {k: os.environ.get(k) for k in LAMBDA_VARS},
    }


def crash(event, context):
    """Ends the process mid-invocation (like a segfault or OOM kill would)."""
    if isinstance(event, dict) and event.get("sleep_s"):
        time.sleep(float(event["sleep_s"]))
    os._exit(3)


def fail(event, context):
    """Raises: the caller gets errorMessage/errorType/stackTrace with X-Amz-Function-Error."""
    raise ValueError(f"bad order id {event.get('order_id')!r}")


def unserializable(event, context):
    return {"when": object()}


def hog(event, context):
    """Touches ``mb`` megabytes, more than a 128 MB function may use."""
    block = bytearray(int(event.get("mb", 200)) * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return {"touched_mb": len(block) // (1024 * 1024)}
