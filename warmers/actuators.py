"""Actuators: make a :class:`~warmers.plan.policy.WarmPlan` true (ConcurrencyActuator adapters).

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
* :class:`EndpointCapacityActuator` - the GPU overflow endpoint's instances (a production
  variant) or copies (an inference component) through Application Auto Scaling, and what
  serves now (:class:`warmers.endpoint_state.EndpointCapacity`, published by
  :class:`SsmCapacityPublisher`).
* :class:`SageMakerCapacityActuator` - the same through SageMaker's own API
  (``UpdateInferenceComponentRuntimeConfig``, ``UpdateEndpointWeightsAndCapacities``).
* :class:`ManagedInstancesActuator` - Lambda Managed Instances: ``PutFunctionScalingConfig``
  ``MinExecutionEnvironments`` / ``MaxExecutionEnvironments`` on the version the alias points
  at (:func:`apply_managed_instances` for every LMI alias of a run plan).

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
from typing import Any, Protocol

from functions.runtime.contract.warmer_document import LAMBDA_NAMESPACE as NAMESPACE
from functions.runtime.contract.warmer_document import LAMBDA_PC_DIMENSION as DIMENSION
from functions.runtime.contract.warmer_document import DocumentError, alias_resource_id
from warmers.endpoint_state import (
    EndpointCapacity,
    capacity_from_describe,
    desired_capacity,
    since,
    unknown_since,
)
from warmers.plan.endpoint import EndpointPlan, EndpointPolicy
from warmers.plan.policy import WarmPlan
from warmers.plan.run import RunPlan
from warmers.ports import ActuationResult
from warmers.retry import call_with_retries

logger = logging.getLogger("warmstart.warmer")

POLICY_NAME = "warmstart-target-tracking"
LOWER_ACTION = "warmstart-lower"
ACTION_PREFIX = "warmstart-"
#: target tracking on PC utilization, AWS's recommended starting point for Lambda
TARGET_UTILIZATION = 0.7


class ActuationError(RuntimeError):
    """A plan cannot be applied as asked (the message says why)."""


class ScalingConfigRefused(ActuationError):
    """``PutFunctionScalingConfig`` was throttled (retries spent) or refused; the message has
    AWS's code and what to do. The run plan stands; the minimum in force is unchanged."""


def resource_id(function_name: str, alias: str) -> str:
    """Application Auto Scaling resource id of an alias: the contract's rule
    (:func:`~functions.runtime.contract.warmer_document.alias_resource_id`). Raises
    ActuationError for ``$LATEST``."""
    try:
        return alias_resource_id(function_name, alias)
    except DocumentError as exc:
        raise ActuationError(str(exc)) from exc


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


# --- the GPU overflow endpoint's capacity ------------------------------------------------

SAGEMAKER_NAMESPACE = "sagemaker"


def describe_capacity(sagemaker: Any, policy: EndpointPolicy,
                      retry: dict[str, Any]) -> dict[str, Any]:
    """``DescribeInferenceComponent`` (an inference component) or ``DescribeEndpoint`` (a
    variant) of ``policy``'s endpoint, with ``call_with_retries(**retry)``; the answer
    :func:`capacity_from_describe` reads.

    Raises
    ------
    botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError
        When SageMaker refuses or cannot be reached once the retries are spent.
    """
    if policy.target == "inference_component":
        out: dict[str, Any] = call_with_retries(
            sagemaker.describe_inference_component,
            InferenceComponentName=policy.inference_component, **retry)
    else:
        out = call_with_retries(sagemaker.describe_endpoint, EndpointName=policy.endpoint_name,
                                **retry)
    return out


class _CapacityActuator:
    """What both endpoint actuators share: the SageMaker client that answers what serves and
    the retry bounds (``warmers.retry.call_with_retries``)."""

    def __init__(self, sagemaker: Any, *, attempts: int = 5,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: Callable[[], float] = random.random) -> None:
        self._sm = sagemaker
        self._retry: dict[str, Any] = {"attempts": attempts, "sleep": sleep, "rng": rng}


class EndpointCapacityActuator(_CapacityActuator):
    """The endpoint's capacity through Application Auto Scaling, and what answers now.

    The plan's capacity becomes both MinCapacity and MaxCapacity of the scalable target
    (``sagemaker:variant:DesiredInstanceCount`` or an inference component's
    ``DesiredCopyCount``): Application Auto Scaling scales out to a MinCapacity above the
    current capacity and in to a MaxCapacity below it
    (https://docs.aws.amazon.com/autoscaling/application/APIReference/API_RegisterScalableTarget.html),
    so the planner alone sizes the endpoint. No reactive policy: an instance takes minutes to
    provision (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html),
    longer than the cold-start burst it would react to; the forecast's lead covers it instead.

    Parameters
    ----------
    client : boto3 ``application-autoscaling`` client
    sagemaker : boto3 ``sagemaker`` client or None
        Answers what serves now (None: the state is ``unknown``).
    attempts, sleep, rng
        Retry bounds (``warmers.retry.call_with_retries``; botocore's standard mode retries
        throttling first).
    """

    def __init__(self, client: Any, sagemaker: Any = None, **retry: Any) -> None:
        super().__init__(sagemaker, **retry)
        self._c = client

    def apply(self, plan: EndpointPlan, policy: EndpointPolicy, *, now_s: float,
              last: EndpointCapacity | None) -> tuple[ActuationResult, EndpointCapacity]:
        """Register the planned capacity, then read what serves.

        Returns
        -------
        (ActuationResult, EndpointCapacity)
            When the scaling call is throttled or refused once the retries are spent, nothing
            changed: ``applied`` is False and the capacity is the last one known (``last``, else
            0) with the state ``unknown``, so the handlers degrade rather than overflow.
            Never raises for an AWS error.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        rid, dim = policy.resource_id, policy.scalable_dimension
        kept = last.capacity if last is not None else 0
        try:
            call_with_retries(self._c.register_scalable_target,
                              ServiceNamespace=SAGEMAKER_NAMESPACE, ResourceId=rid,
                              ScalableDimension=dim, MinCapacity=plan.capacity,
                              MaxCapacity=plan.capacity, **self._retry)
        except (ClientError, BotoCoreError) as exc:
            return (ActuationResult(policy.endpoint_name, False,
                                    f"{rid}: capacity not set ({exc}); last capacity {kept} "
                                    "kept, state unknown"),
                    unknown_since(last, now_s))
        detail = f"{rid}: Min/MaxCapacity {plan.capacity}"
        if self._sm is None:
            return (ActuationResult(policy.endpoint_name, True,
                                    detail + "; no SageMaker client: state unknown"),
                    unknown_since(last, now_s))
        try:
            described = describe_capacity(self._sm, policy, self._retry)
        except (ClientError, BotoCoreError) as exc:
            return (ActuationResult(policy.endpoint_name, True,
                                    f"{detail}; serving capacity not read ({exc}): unknown"),
                    unknown_since(last, now_s))
        state = since(last, capacity_from_describe(described, policy, now_s))
        return (ActuationResult(policy.endpoint_name, True,
                                f"{detail}; {state.capacity} {state.state}"), state)


class SageMakerCapacityActuator(_CapacityActuator):
    """The endpoint's capacity through SageMaker's own API, and what answers now.

    The plan's capacity becomes an inference component's copy count
    (``UpdateInferenceComponentRuntimeConfig``, ``DesiredRuntimeConfig.CopyCount``,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateInferenceComponentRuntimeConfig.html)
    or a production variant's instance count (``UpdateEndpointWeightsAndCapacities``,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateEndpointWeightsAndCapacities.html);
    then what serves is read as :class:`EndpointCapacityActuator` reads it. For a warmer whose
    role may call SageMaker but not Application Auto Scaling, and the local stack (moto's
    Application Auto Scaling refuses the inference-component dimension). The update is sent
    only when the plan differs from the capacity the endpoint is asked for now (its describe
    answer's desired count): SageMaker refuses an update while one is still in progress.

    Parameters
    ----------
    sagemaker : boto3 ``sagemaker`` client
    attempts, sleep, rng
        Retry bounds (``warmers.retry.call_with_retries``).
    """

    def apply(self, plan: EndpointPlan, policy: EndpointPolicy, *, now_s: float,
              last: EndpointCapacity | None) -> tuple[ActuationResult, EndpointCapacity]:
        """Set the planned capacity, then read what serves.

        Returns
        -------
        (ActuationResult, EndpointCapacity)
            When the update is throttled or refused once the retries are spent, ``applied`` is
            False and the capacity is still read and published (what serves is known); only
            when the endpoint cannot be read either is it the last capacity known (else 0) with
            the state ``unknown``, so the handlers degrade rather than overflow. Never raises
            for an AWS error.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        name = policy.endpoint_name
        kept = last.capacity if last is not None else 0
        what = (f"inference component {policy.inference_component}"
                if policy.target == "inference_component" else f"{name}/{policy.variant_name}")
        refused = ""
        try:
            described = describe_capacity(self._sm, policy, self._retry)
            if desired_capacity(described, policy) != plan.capacity:
                try:
                    self._update(policy, plan.capacity)
                except (ClientError, BotoCoreError) as exc:
                    refused = f"capacity {plan.capacity} not set ({exc})"
                else:
                    described = describe_capacity(self._sm, policy, self._retry)
        except (ClientError, BotoCoreError) as exc:
            return (ActuationResult(name, False, f"{what}: serving capacity not read ({exc})"
                                                 f"{'; ' + refused if refused else ''}; last "
                                                 f"capacity {kept} kept, state unknown"),
                    unknown_since(last, now_s))
        state = since(last, capacity_from_describe(described, policy, now_s))
        detail = f"{what}: {refused or f'{plan.capacity} asked'}; {state.capacity} {state.state}"
        return ActuationResult(name, not refused, detail), state

    def _update(self, policy: EndpointPolicy, capacity: int) -> None:
        if policy.target == "inference_component":
            call_with_retries(self._sm.update_inference_component_runtime_config,
                              InferenceComponentName=policy.inference_component,
                              DesiredRuntimeConfig={"CopyCount": capacity}, **self._retry)
        else:
            call_with_retries(self._sm.update_endpoint_weights_and_capacities,
                              EndpointName=policy.endpoint_name, DesiredWeightsAndCapacities=[{
                                  "VariantName": policy.variant_name,
                                  "DesiredInstanceCount": capacity}], **self._retry)


#: what :func:`warmers.runner.apply_endpoints` calls (``WarmerConfig.endpoint_actuator``)
EndpointActuator = EndpointCapacityActuator | SageMakerCapacityActuator


class SsmCapacityPublisher:
    """Writes an :class:`EndpointCapacity` to its SSM String parameter when it changes.

    Parameters
    ----------
    client : boto3 SSM client
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self.last: dict[str, EndpointCapacity] = {}

    def publish(self, parameter_name: str, state: EndpointCapacity) -> bool:
        """Put ``state`` unless it is the one last written; True when written.

        Raises
        ------
        botocore.exceptions.ClientError
            When SSM refuses (the caller logs ``tool_unavailable``).
        """
        if self.last.get(parameter_name) == state:
            return False
        self._client.put_parameter(Name=parameter_name, Value=state.to_json(), Type="String",
                                   Overwrite=True)
        logger.info(json.dumps({"event": "overflow_capacity", "parameter": parameter_name,
                                "capacity": state.capacity, "state": state.state}))
        self.last[parameter_name] = state
        return True


class ScalingConfigClient(Protocol):
    """The part of the boto3 ``lambda`` client :class:`ManagedInstancesActuator` calls (moto
    5.2 implements neither scaling-config operation; tests use a fake of this Protocol)."""

    def get_alias(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_function_configuration(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_function_scaling_config(self, **kwargs: Any) -> dict[str, Any]: ...

    def put_function_scaling_config(self, **kwargs: Any) -> dict[str, Any]: ...


class ManagedInstancesActuator:
    """Set an LMI alias's minimum/maximum execution environments on its published version.

    ``FunctionScalingConfig`` belongs to a function version (or ``$LATEST.PUBLISHED``), so the
    alias is resolved to its version first; a version without a capacity provider is refused.

    Parameters
    ----------
    client : boto3 ``lambda`` client (or a :class:`ScalingConfigClient`)
    attempts : int
        Tries of ``PutFunctionScalingConfig`` on throttling or a conflict
        (``TooManyRequestsException``, ``ResourceConflictException``), full jitter.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/api/API_PutFunctionScalingConfig.html ;
    https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html
    """

    def __init__(self, client: Any, *, attempts: int = 5,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: Callable[[], float] = random.random) -> None:
        self._c = client
        self._retry: dict[str, Any] = {"attempts": attempts, "sleep": sleep, "rng": rng}

    def version(self, function_name: str, alias: str) -> str:
        """The published version ``alias`` points at, checked to run on a capacity provider.

        Raises
        ------
        ActuationError
            On ``$LATEST`` or a version that is not on a capacity provider.
        """
        resource_id(function_name, alias)
        version = str(self._c.get_alias(FunctionName=function_name,
                                        Name=alias)["FunctionVersion"])
        if version == "$LATEST":
            raise ActuationError(f"{function_name}:{alias} points at $LATEST; publish a version "
                                 "on the capacity provider and point the alias at it")
        config = self._c.get_function_configuration(FunctionName=function_name,
                                                    Qualifier=version)
        if not (config.get("CapacityProviderConfig") or {}).get(
                "LambdaManagedInstancesCapacityProviderConfig"):
            raise ActuationError(
                f"{function_name}:{alias} (version {version}) is not on a capacity provider; "
                "publish the version with CapacityProviderConfig (strategy managed_instances) "
                "or change the alias's strategy")
        return version

    def current(self, function_name: str, alias: str) -> tuple[int | None, int | None]:
        """(min, max) execution environments in force on the alias's version (None: unset)."""
        version = self.version(function_name, alias)
        got = self._c.get_function_scaling_config(FunctionName=function_name, Qualifier=version)
        applied = got.get("AppliedFunctionScalingConfig") or got.get(
            "RequestedFunctionScalingConfig") or {}
        low, high = applied.get("MinExecutionEnvironments"), applied.get(
            "MaxExecutionEnvironments")
        return (None if low is None else int(low)), (None if high is None else int(high))

    def apply(self, plan: WarmPlan, *, now_s: float) -> ActuationResult:
        """Put the plan's minimum (and maximum) when it differs from what is in force.

        Raises
        ------
        ActuationError
            The plan is not an LMI plan, or the alias's version cannot take it.
        ScalingConfigRefused
            ``PutFunctionScalingConfig`` throttled with the retries spent, or refused.
        """
        from botocore.exceptions import ClientError

        if plan.action != "managed_instances":
            raise ActuationError(f"{plan.key}: not an LMI plan (action {plan.action!r})")
        version = self.version(plan.function_name, plan.alias)
        have = self.current(plan.function_name, plan.alias)
        want = (plan.min_execution_environments, max(plan.ceiling,
                                                     plan.min_execution_environments))
        if have == want:
            return ActuationResult(plan.key, False, f"LMI min/max already {want[0]}/{want[1]} "
                                                    f"on version {version}", calls=4)
        try:
            call_with_retries(self._c.put_function_scaling_config,
                              FunctionName=plan.function_name, Qualifier=version,
                              FunctionScalingConfig={"MinExecutionEnvironments": want[0],
                                                     "MaxExecutionEnvironments": want[1]},
                              **self._retry)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            code = err.get("Code", "?")
            hint = ("throttled: retries spent, the next run tries again"
                    if code in ("TooManyRequestsException", "ThrottlingException")
                    else "refused: check the values against the capacity provider's limits "
                         "and the warmer's lambda:PutFunctionScalingConfig permission")
            raise ScalingConfigRefused(
                f"{plan.key}: PutFunctionScalingConfig min {want[0]} max {want[1]} on version "
                f"{version} {hint} ({code}: {err.get('Message', '')}); in force: "
                f"{have[0]}/{have[1]}") from exc
        return ActuationResult(plan.key, True, f"LMI min/max {have[0]}/{have[1]} -> "
                                               f"{want[0]}/{want[1]} on version {version}",
                               calls=5)


def apply_managed_instances(run_plan: RunPlan, actuator: ManagedInstancesActuator
                            ) -> list[ActuationResult]:
    """Apply every LMI alias's plan of ``run_plan``; one alias's fault never stops the others.

    A refused, throttled or inapplicable call gives an ``applied=False`` result whose detail
    is the error (logged as ``tool_unavailable``); the plan itself stands in ``run_plan``.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    results = []
    for entry in run_plan.aliases:
        if entry.plan.action != "managed_instances":
            continue
        try:
            results.append(actuator.apply(entry.plan, now_s=run_plan.issued_at_s))
        except (ActuationError, ClientError, BotoCoreError) as exc:
            logger.error(json.dumps({"tag": "tool_unavailable",
                                     "source": "lambda:PutFunctionScalingConfig",
                                     "alias": entry.key, "message": str(exc)}))
            results.append(ActuationResult(entry.key, False, f"not applied: {exc}"))
    return results
