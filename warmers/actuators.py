"""Actuators: make a :class:`~warmers.planner.WarmPlan` true (ConcurrencyActuator adapters).

* :class:`AutoScalingActuator` - Application Auto Scaling: the alias is a scalable target
  (``function:<fn>:<alias>``, ``lambda:function:ProvisionedConcurrency``); the plan raises its
  MinCapacity at once (the forecast already looks ``lead`` minutes ahead), lowers it through a
  one-time scheduled action after the windows already promised have passed, and keeps target
  tracking at 0.7 on ``LambdaProvisionedConcurrencyUtilization`` above it.
  https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html#managing-provisioned-concurency
  https://docs.aws.amazon.com/autoscaling/application/userguide/services-that-can-integrate-lambda.html
* :class:`LambdaPCActuator` - the Lambda provisioned-concurrency API on the alias (never
  ``$LATEST``), deleting PC left directly on a version.
* :class:`WarmPingActuator` - N concurrent direct invokes with the warm-ping payload, so they
  land on N distinct execution environments.

Every AWS call goes through an injected boto3 client (``endpoint_url``-able).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from warmers.planner import WarmPlan
from warmers.ports import ActuationResult
from warmers.retry import call_with_retries

logger = logging.getLogger("warmstart.warmer")

NAMESPACE = "lambda"
DIMENSION = "lambda:function:ProvisionedConcurrency"
POLICY_NAME = "warmstart-target-tracking"
LOWER_ACTION = "warmstart-lower"
ACTION_PREFIX = "warmstart-"
#: target tracking on PC utilization, AWS's recommended starting point for Lambda
TARGET_UTILIZATION = 0.7


class ActuationError(RuntimeError):
    """A plan cannot be applied as asked (the message says why)."""


def resource_id(function_name: str, alias: str) -> str:
    """Application Auto Scaling resource id of an alias."""
    if alias == "$LATEST":
        raise ActuationError("provisioned concurrency cannot target $LATEST; use an alias")
    return f"function:{function_name}:{alias}"


def _at(seconds: float) -> str:
    stamp = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return f"at({stamp.strftime('%Y-%m-%dT%H:%M:%S')})"


def _parse_at(schedule: str) -> float | None:
    if not schedule.startswith("at(") or not schedule.endswith(")"):
        return None
    try:
        stamp = dt.datetime.strptime(schedule[3:-1], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return stamp.replace(tzinfo=dt.UTC).timestamp()


class AutoScalingActuator:
    """Provisioned concurrency through Application Auto Scaling.

    Parameters
    ----------
    client : boto3 ``application-autoscaling`` client
    hold_s : float
        Delay before a lower MinCapacity takes effect (the lead plus window already promised:
        default 20 min).
    target_utilization : float
        Target tracking value on ``LambdaProvisionedConcurrencyUtilization``.
    lambda_client : boto3 ``lambda`` client, optional
        Used to delete the PC config when a plan drops to zero (deregistering the target does
        not remove it).
    attempts, sleep, rng
        Retry bounds and injected sleep/jitter source for ``ConcurrentUpdateException``.
    """

    def __init__(self, client: Any, *, hold_s: float = 1200.0,
                 target_utilization: float = TARGET_UTILIZATION, lambda_client: Any = None,
                 attempts: int = 5, sleep: Callable[[float], None] = time.sleep,
                 rng: Callable[[], float] = random.random) -> None:
        if not 0.0 < target_utilization < 1.0:
            raise ValueError(f"target_utilization must be in (0, 1), got {target_utilization}")
        self._c = client
        self._lambda = lambda_client
        self._hold_s = hold_s
        self._target = target_utilization
        self._retry: dict[str, Any] = {"attempts": attempts, "sleep": sleep, "rng": rng}
        self.calls = 0

    def _call(self, name: str, **kwargs: Any) -> Any:
        self.calls += 1
        return call_with_retries(getattr(self._c, name), **kwargs, **self._retry)

    def _target_row(self, rid: str) -> dict[str, Any] | None:
        rows = self._call("describe_scalable_targets", ServiceNamespace=NAMESPACE,
                          ResourceIds=[rid], ScalableDimension=DIMENSION)["ScalableTargets"]
        return rows[0] if rows else None

    def current(self, function_name: str, alias: str) -> int:
        row = self._target_row(resource_id(function_name, alias))
        return int(row["MinCapacity"]) if row else 0

    def apply(self, plan: WarmPlan, *, now_s: float) -> ActuationResult:
        """Register/raise now, or schedule the lowering; ensure target tracking; prune actions.

        Raises
        ------
        ActuationError
            For ``$LATEST``.
        botocore.exceptions.ClientError
            When retries are spent (the runner logs ``tool_unavailable``).
        """
        rid = resource_id(plan.function_name, plan.alias)
        self.calls = 0
        row = self._target_row(rid)
        want = plan.provisioned_concurrency
        keep: set[str] = set()
        if want <= 0:
            if row is None:
                return ActuationResult(plan.key, False, "no scalable target, nothing to remove",
                                       self.calls)
            self._call("deregister_scalable_target", ServiceNamespace=NAMESPACE,
                       ResourceId=rid, ScalableDimension=DIMENSION)
            detail = "deregistered the scalable target"
            if self._lambda is not None:
                try:
                    call_with_retries(self._lambda.delete_provisioned_concurrency_config,
                                      FunctionName=plan.function_name, Qualifier=plan.alias,
                                      **self._retry)
                    detail += " and deleted the PC config"
                except self._lambda.exceptions.ResourceNotFoundException:
                    pass
            return ActuationResult(plan.key, True, detail, self.calls)
        current_min = int(row["MinCapacity"]) if row else 0
        ceiling = max(want, plan.ceiling)
        if row is None or want >= current_min:
            self._call("register_scalable_target", ServiceNamespace=NAMESPACE, ResourceId=rid,
                       ScalableDimension=DIMENSION, MinCapacity=want, MaxCapacity=ceiling)
            detail = f"MinCapacity {current_min} -> {want} now (max {ceiling})"
        else:
            when = now_s + self._hold_s
            self._call("put_scheduled_action", ServiceNamespace=NAMESPACE,
                       ScheduledActionName=LOWER_ACTION, ResourceId=rid,
                       ScalableDimension=DIMENSION, Schedule=_at(when),
                       ScalableTargetAction={"MinCapacity": want, "MaxCapacity": ceiling})
            keep.add(LOWER_ACTION)
            detail = f"MinCapacity {current_min} -> {want} scheduled {_at(when)}"
        if not self._has_target_tracking(rid):
            self._call("put_scaling_policy", PolicyName=POLICY_NAME, ServiceNamespace=NAMESPACE,
                       ResourceId=rid, ScalableDimension=DIMENSION,
                       PolicyType="TargetTrackingScaling",
                       TargetTrackingScalingPolicyConfiguration={
                           "TargetValue": self._target,
                           "PredefinedMetricSpecification": {
                               "PredefinedMetricType": "LambdaProvisionedConcurrencyUtilization"}})
            detail += f"; target tracking {self._target} added"
        removed = self._prune(rid, keep, now_s)
        if removed:
            detail += f"; removed stale scheduled actions {removed}"
        return ActuationResult(plan.key, True, detail, self.calls)

    def _has_target_tracking(self, rid: str) -> bool:
        """True when a target-tracking policy on PC utilization exists (ours or the stack's)."""
        policies = self._call("describe_scaling_policies", ServiceNamespace=NAMESPACE,
                              ResourceId=rid, ScalableDimension=DIMENSION)["ScalingPolicies"]
        for policy in policies:
            spec = policy.get("TargetTrackingScalingPolicyConfiguration", {}).get(
                "PredefinedMetricSpecification", {})
            if spec.get("PredefinedMetricType") == "LambdaProvisionedConcurrencyUtilization":
                return True
        return False

    def _prune(self, rid: str, keep: set[str], now_s: float) -> list[str]:
        """Delete warmstart scheduled actions that are superseded or already past."""
        actions = self._call("describe_scheduled_actions", ServiceNamespace=NAMESPACE,
                             ResourceId=rid, ScalableDimension=DIMENSION)["ScheduledActions"]
        removed = []
        for action in actions:
            name = action["ScheduledActionName"]
            if not name.startswith(ACTION_PREFIX):
                continue
            when = _parse_at(action.get("Schedule", ""))
            if name in keep and (when is None or when > now_s):
                continue
            self._call("delete_scheduled_action", ServiceNamespace=NAMESPACE,
                       ScheduledActionName=name, ResourceId=rid, ScalableDimension=DIMENSION)
            removed.append(name)
        return removed


class LambdaPCActuator:
    """Provisioned concurrency set directly with the Lambda API on the alias.

    Parameters
    ----------
    client : boto3 ``lambda`` client
    reconcile_versions : bool
        Delete PC configured directly on a version (left over from an earlier deployment):
        warmstart keeps PC on aliases only.
    """

    def __init__(self, client: Any, *, reconcile_versions: bool = True, attempts: int = 5,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: Callable[[], float] = random.random) -> None:
        self._c = client
        self._reconcile = reconcile_versions
        self._retry: dict[str, Any] = {"attempts": attempts, "sleep": sleep, "rng": rng}

    def current(self, function_name: str, alias: str) -> int:
        try:
            cfg = self._c.get_provisioned_concurrency_config(FunctionName=function_name,
                                                             Qualifier=alias)
        except self._c.exceptions.ProvisionedConcurrencyConfigNotFoundException:
            return 0
        return int(cfg.get("RequestedProvisionedConcurrentExecutions", 0))

    def apply(self, plan: WarmPlan, *, now_s: float) -> ActuationResult:
        """Put/delete the alias's PC config, then delete PC left on versions.

        Raises
        ------
        ActuationError
            When the alias points at ``$LATEST`` (Lambda refuses PC there).
        botocore.exceptions.ClientError
            When retries are spent.
        """
        resource_id(plan.function_name, plan.alias)
        alias = self._c.get_alias(FunctionName=plan.function_name, Name=plan.alias)
        version = alias["FunctionVersion"]
        if version == "$LATEST":
            raise ActuationError(
                f"{plan.key} points at $LATEST; publish a version and point the alias at it "
                "before provisioning concurrency")
        want = plan.provisioned_concurrency
        have = self.current(plan.function_name, plan.alias)
        parts = []
        if want > 0 and want != have:
            call_with_retries(self._c.put_provisioned_concurrency_config,
                              FunctionName=plan.function_name, Qualifier=plan.alias,
                              ProvisionedConcurrentExecutions=want, **self._retry)
            parts.append(f"PC {have} -> {want} on {plan.alias} (version {version})")
        elif want == 0 and have > 0:
            call_with_retries(self._c.delete_provisioned_concurrency_config,
                              FunctionName=plan.function_name, Qualifier=plan.alias,
                              **self._retry)
            parts.append(f"PC {have} -> 0 on {plan.alias}")
        else:
            parts.append(f"PC already {have} on {plan.alias}")
        if self._reconcile:
            stale = self._stale_versions(plan.function_name)
            for qualifier in stale:
                call_with_retries(self._c.delete_provisioned_concurrency_config,
                                  FunctionName=plan.function_name, Qualifier=qualifier,
                                  **self._retry)
            if stale:
                parts.append(f"deleted PC left on version(s) {', '.join(stale)}")
        return ActuationResult(plan.key, want != have or bool(parts[1:]), "; ".join(parts))

    def _stale_versions(self, function_name: str) -> list[str]:
        stale = []
        kwargs: dict[str, Any] = {"FunctionName": function_name}
        while True:
            page = self._c.list_provisioned_concurrency_configs(**kwargs)
            for cfg in page.get("ProvisionedConcurrencyConfigs", []):
                qualifier = cfg["FunctionArn"].rsplit(":", 1)[-1]
                if qualifier.isdigit():
                    stale.append(qualifier)
            marker = page.get("NextMarker")
            if not marker:
                return stale
            kwargs["Marker"] = marker


def ping_payload(concurrency: int, hold_ms: int = 75) -> dict[str, Any]:
    """The warm-ping payload of the shared contract (answered by the toolkit, no app code)."""
    return {"warmstart": {"ping": True, "concurrency": concurrency, "hold_ms": hold_ms}}


class WarmPingActuator:
    """Warm pings: ``N`` concurrent RequestResponse invokes of the alias, each holding
    ``hold_ms``, so Lambda must route them to ``N`` distinct execution environments.

    Parameters
    ----------
    client : boto3 ``lambda`` client (create it with ``max_pool_connections >= N``)
    hold_ms : int
    max_concurrency : int
        Upper bound on N per alias.
    """

    def __init__(self, client: Any, *, hold_ms: int = 75, max_concurrency: int = 50) -> None:
        self._c = client
        self._hold_ms = hold_ms
        self._max = max_concurrency
        self._last_ping_s: dict[str, float] = {}

    def current(self, function_name: str, alias: str) -> int:
        return 0

    def due(self, plan: WarmPlan, now_s: float) -> bool:
        last = self._last_ping_s.get(plan.key)
        return last is None or now_s - last >= plan.ping_interval_s - 1.0

    def apply(self, plan: WarmPlan, *, now_s: float) -> ActuationResult:
        """Send the pings when due.

        Raises
        ------
        ActuationError
            For ``$LATEST``.
        """
        resource_id(plan.function_name, plan.alias)
        if plan.action != "ping" or plan.ping_concurrency <= 0:
            return ActuationResult(plan.key, False, "no pings in this plan")
        if not self.due(plan, now_s):
            return ActuationResult(plan.key, False, "pings not due yet")
        n = min(plan.ping_concurrency, self._max)
        body = json.dumps(ping_payload(n, self._hold_ms)).encode()

        def one(_: int) -> dict[str, Any]:
            resp = self._c.invoke(FunctionName=plan.function_name, Qualifier=plan.alias,
                                  InvocationType="RequestResponse", Payload=body)
            raw = resp["Payload"].read()
            try:
                return dict(json.loads(raw).get("warmstart", {}))
            except (ValueError, AttributeError):
                return {}

        with ThreadPoolExecutor(max_workers=n) as pool:
            pongs = list(pool.map(one, range(n)))
        self._last_ping_s[plan.key] = now_s
        envs = {p.get("environment_id") for p in pongs if p.get("pong")}
        cold = sum(1 for p in pongs if p.get("cold_start"))
        return ActuationResult(plan.key, True,
                               f"{n} pings: {len(envs)} distinct environments, {cold} cold",
                               calls=n)
