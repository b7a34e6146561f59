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
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from warmers.plan.endpoint import EndpointPlan
from warmers.plan.policy import PlanError, WarmPlan

T = TypeVar("T")

logger = logging.getLogger("warmstart.warmer")


class PlanStore(Protocol):
    def load(self, function_name: str, alias: str) -> WarmPlan | None: ...

    def save(self, plan: WarmPlan) -> None: ...

    def load_endpoint(self, endpoint_name: str) -> EndpointPlan | None: ...

    def save_endpoint(self, plan: EndpointPlan) -> None: ...


class MemoryPlanStore:
    """Plans kept in this process only."""

    def __init__(self) -> None:
        self._plans: dict[str, WarmPlan] = {}
        self._endpoints: dict[str, EndpointPlan] = {}

    def load(self, function_name: str, alias: str) -> WarmPlan | None:
        return self._plans.get(f"{function_name}:{alias}")

    def save(self, plan: WarmPlan) -> None:
        self._plans[plan.key] = plan

    def load_endpoint(self, endpoint_name: str) -> EndpointPlan | None:
        return self._endpoints.get(endpoint_name)

    def save_endpoint(self, plan: EndpointPlan) -> None:
        self._endpoints[plan.endpoint_name] = plan


class SsmPlanStore:
    """Plans in SSM parameters, cached in memory.

    Parameters
    ----------
    client : boto3 SSM client (injected)
    prefix : str
        Parameter path prefix, starting with ``/``. An alias's plan is
        ``<prefix>/<function>/<alias>/plan``, an endpoint's
        ``<prefix>/sagemaker/endpoint/<name>/plan`` (one level deeper: no alias's name).
    """

    def __init__(self, client: Any, prefix: str) -> None:
        if not prefix.startswith("/"):
            raise ValueError(f"SSM prefix must start with '/', got {prefix!r}")
        self._c = client
        self._prefix = prefix.rstrip("/")
        self._cache = MemoryPlanStore()

    def name(self, function_name: str, alias: str) -> str:
        return f"{self._prefix}/{function_name}/{alias}/plan"

    def endpoint_name(self, endpoint_name: str) -> str:
        return f"{self._prefix}/sagemaker/endpoint/{endpoint_name}/plan"

    def load(self, function_name: str, alias: str) -> WarmPlan | None:
        """The last plan: from memory, else from SSM; None when there is none or SSM fails.

        A throttled or failed ``GetParameter`` (``ClientError``/``BotoCoreError``) is logged
        as ``tool_unavailable`` and answered from memory (None in a fresh execution
        environment), so one alias's store fault never stops the warmer run.
        """
        cached = self._cache.load(function_name, alias)
        if cached is not None:
            return cached
        plan = self._read(self.name(function_name, alias), WarmPlan.from_dict)
        if plan is not None:
            self._cache.save(plan)
        return plan

    def load_endpoint(self, endpoint_name: str) -> EndpointPlan | None:
        """The endpoint's last plan, as :meth:`load` does for an alias."""
        cached = self._cache.load_endpoint(endpoint_name)
        if cached is not None:
            return cached
        plan = self._read(self.endpoint_name(endpoint_name), EndpointPlan.from_dict)
        if plan is not None:
            self._cache.save_endpoint(plan)
        return plan

    def _read(self, name: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
        from botocore.exceptions import BotoCoreError, ClientError

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
            return parse(json.loads(raw))
        except (ValueError, PlanError) as exc:
            logger.warning(json.dumps({"tag": "bad_request", "message":
                                       f"ignored saved plan {name}: {exc}"}))
            return None

    def save(self, plan: WarmPlan) -> None:
        """Keep ``plan`` in memory, then write it to SSM.

        A throttled or failed ``PutParameter`` is logged as ``tool_unavailable`` and not raised:
        the in-memory copy still serves the next run in this execution environment.
        """
        self._cache.save(plan)
        self._write(self.name(plan.function_name, plan.alias), plan.to_dict())

    def save_endpoint(self, plan: EndpointPlan) -> None:
        """Keep the endpoint's plan in memory, then write it to SSM (as :meth:`save`)."""
        self._cache.save_endpoint(plan)
        self._write(self.endpoint_name(plan.endpoint_name), plan.to_dict())

    def _write(self, name: str, doc: dict[str, Any]) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._c.put_parameter(Name=name, Value=json.dumps(doc, separators=(",", ":")),
                                  Type="String", Overwrite=True)
        except (ClientError, BotoCoreError) as exc:
            logger.warning(json.dumps({"tag": "tool_unavailable", "source": "ssm:PutParameter",
                                       "message": f"plan {name} kept in memory only: {exc}"}))
