"""Where the last good plan of each alias lives between runs.

Decision: in memory (per execution environment) *and* in SSM Parameter Store, one standard
String parameter per alias (``<prefix>/<function>/<alias>/plan``, JSON < 4 KB). Memory saves a
call on warm runs; SSM lets a fresh execution environment (Lambda recycles them every few hours)
resume with the plan in force, so the hysteresis and the metrics-unavailable fallback keep
working. Standard parameters cost nothing (tests/data/pricing.md).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from warmers.planner import PlanError, WarmPlan

logger = logging.getLogger("warmstart.warmer")


class PlanStore(Protocol):
    def load(self, function_name: str, alias: str) -> WarmPlan | None: ...

    def save(self, plan: WarmPlan) -> None: ...


class MemoryPlanStore:
    """Plans kept in this process only."""

    def __init__(self) -> None:
        self._plans: dict[str, WarmPlan] = {}

    def load(self, function_name: str, alias: str) -> WarmPlan | None:
        return self._plans.get(f"{function_name}:{alias}")

    def save(self, plan: WarmPlan) -> None:
        self._plans[plan.key] = plan


class SsmPlanStore:
    """Plans in SSM parameters, cached in memory.

    Parameters
    ----------
    client : boto3 SSM client (injected)
    prefix : str
        Parameter path prefix, starting with ``/``.
    """

    def __init__(self, client: Any, prefix: str) -> None:
        if not prefix.startswith("/"):
            raise ValueError(f"SSM prefix must start with '/', got {prefix!r}")
        self._c = client
        self._prefix = prefix.rstrip("/")
        self._cache = MemoryPlanStore()

    def name(self, function_name: str, alias: str) -> str:
        return f"{self._prefix}/{function_name}/{alias}/plan"

    def load(self, function_name: str, alias: str) -> WarmPlan | None:
        """The last plan: from memory, else from SSM; None when there is none or SSM fails.

        A throttled or failed ``GetParameter`` (``ClientError``/``BotoCoreError``) is logged
        as ``tool_unavailable`` and answered from memory (None in a fresh execution
        environment), so one alias's store fault never stops the warmer run.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        cached = self._cache.load(function_name, alias)
        if cached is not None:
            return cached
        name = self.name(function_name, alias)
        try:
            raw = self._c.get_parameter(Name=name)["Parameter"]["Value"]
        except self._c.exceptions.ParameterNotFound:
            return None
        except (ClientError, BotoCoreError) as exc:
            logger.warning(json.dumps({"tag": "tool_unavailable", "source": "ssm:GetParameter",
                                       "message": f"saved plan {name} not read: {exc}; "
                                                  "no plan in memory either: planning "
                                                  "without one"}))
            return None  # memory was asked first and had none
        try:
            plan = WarmPlan.from_dict(json.loads(raw))
        except (ValueError, PlanError) as exc:
            logger.warning(json.dumps({"tag": "bad_request", "message":
                                       f"ignored saved plan {self.name(function_name, alias)}: "
                                       f"{exc}"}))
            return None
        self._cache.save(plan)
        return plan

    def save(self, plan: WarmPlan) -> None:
        """Keep ``plan`` in memory, then write it to SSM.

        A throttled or failed ``PutParameter`` is logged as ``tool_unavailable`` and not raised:
        the in-memory copy still serves the next run in this execution environment.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        self._cache.save(plan)
        name = self.name(plan.function_name, plan.alias)
        try:
            self._c.put_parameter(Name=name,
                                  Value=json.dumps(plan.to_dict(), separators=(",", ":")),
                                  Type="String", Overwrite=True)
        except (ClientError, BotoCoreError) as exc:
            logger.warning(json.dumps({"tag": "tool_unavailable", "source": "ssm:PutParameter",
                                       "message": f"plan {name} kept in memory only: {exc}"}))
