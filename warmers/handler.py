"""Scheduled warmer Lambda entry (EventBridge Scheduler, every minute). Thin: config, clients,
``run_once`` (``warmers.plan.run.plan_run`` over every alias, then ``warmers.runner.apply``; the
same plan ``warmstart plan`` shows).

State: the runtime (clients, ping schedule, plan cache) lives per execution environment; the last
good plan of each alias is also saved in SSM (``warmers.state``), so a recycled environment
resumes with it. Handler string: ``warmers.handler.handler``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from warmers.config import WarmerConfig
from warmers.runner import WarmerClients, WarmerRuntime, run_once

logging.getLogger("warmstart.warmer").setLevel(logging.INFO)

_cache: dict[str, Any] = {}


def _runtime() -> tuple[WarmerConfig, WarmerRuntime]:
    if "runtime" not in _cache:
        config = WarmerConfig.from_env(os.environ)
        clients = WarmerClients.from_boto3(region=config.region, endpoint_url=config.endpoint_url,
                                           lambda_endpoint_url=config.lambda_endpoint_url)
        _cache["config"] = config
        _cache["runtime"] = WarmerRuntime.build(clients, config)
    return _cache["config"], _cache["runtime"]


def reset() -> None:
    """Forget the cached config and clients (tests; a new environment starts empty anyway)."""
    _cache.clear()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run the warmer once; returns the plans and the overflow endpoints' plans (also logged
    one JSON line each) and what the actuators did. The whole ``RunPlan`` (with each number's source) stays in the runtime
    (``last_run``), not in the response: at thousands of aliases it outgrows Lambda's 6 MB
    response payload (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html)."""
    config, runtime = _runtime()
    plans = run_once(time.time(), None, config, runtime=runtime)
    endpoints = runtime.last_run.endpoints if runtime.last_run is not None else ()
    return {"plans": [p.to_dict() for p in plans],
            "endpoints": [e.plan.to_dict() for e in endpoints],
            "actuations": [r.detail for r in runtime.last_results]}
