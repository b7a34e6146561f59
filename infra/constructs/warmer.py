"""The scheduled warmer: a small Lambda (``warmers.handler.handler``) with a numpy layer, run every
minute by EventBridge Scheduler, allowed to touch only the aliases it manages, their scalable
targets and the SSM parameters it writes.

**What AWS lets the role be scoped to** (Service Authorization Reference, per action):

* Application Auto Scaling ``RegisterScalableTarget``, ``DeregisterScalableTarget``,
  ``PutScalingPolicy``, ``PutScheduledAction``, ``DeleteScheduledAction``: the resource type is
  ``scalable-target`` (``arn:...:scalable-target/<id>``), whose id is random and assigned at
  registration, so a target the warmer registers itself has no ARN at synth. AWS defines no
  condition key for the resource id (the keys are ``application-autoscaling:service-namespace``,
  ``application-autoscaling:scalable-dimension``, ``aws:ResourceTag/*``, ``aws:RequestTag/*``,
  ``aws:TagKeys``). The grant is therefore ``scalable-target/*`` with ``StringEquals`` on the
  namespace and dimension of each :class:`ScalingScope` (by default ``lambda`` /
  ``lambda:function:ProvisionedConcurrency``: Lambda provisioned concurrency only, no ECS
  service, DynamoDB table or SageMaker variant). What remains open is any Lambda alias's
  provisioned-concurrency target in this account and region: the targets the warmer registers
  carry no tags (``warmers/actuators.py``), so ``aws:ResourceTag`` cannot narrow it further.
  The capacity itself is applied by Application Auto Scaling's service-linked role, on the
  functions the targets name.
* ``Describe*`` of Application Auto Scaling, ``cloudwatch:GetMetricData`` and
  ``lambda:GetAccountSettings``: no resource type, ``*`` only.
* CloudWatch ``PutMetricAlarm``, ``DescribeAlarms``, ``DeleteAlarms`` (the Application Auto
  Scaling guide lists them as needed by the caller of ``PutScalingPolicy`` with target
  tracking): resource type ``alarm`` (``arn:...:alarm:<name>``), and Application Auto Scaling
  names a target-tracking alarm ``TargetTracking-<resource id>-AlarmHigh|AlarmLow-<uuid>``, so the
  grant is one prefix per managed alias, ``TargetTracking-function:<function>:<alias>-*`` (and the
  prefixes of any other :class:`ScalingScope`), never every target-tracking alarm.
* Lambda provisioned-concurrency and invoke actions: the managed aliases' ARNs (and ``:*`` of a
  managed function for PC left on an old version); SSM: the warmer's own parameter prefix and
  the agents' degradation parameters; ``iam:CreateServiceLinkedRole``: the Lambda
  provisioned-concurrency service-linked role only.
* Lambda Managed Instances (strategy ``managed_instances``; ``warmers.actuators.
  ManagedInstancesActuator``): ``lambda:GetAlias`` on the alias (which version it points at),
  ``lambda:GetFunctionConfiguration`` (that the version is on a capacity provider) and
  ``lambda:GetFunctionScalingConfig`` / ``lambda:PutFunctionScalingConfig`` (its minimum and
  maximum execution environments) on that function: its ARN, its alias and its versions
  (``:*``: the version is numbered at publish time). No provisioned-concurrency action, no
  scalable target and no invoke on an LMI alias: it has none of those to manage. The alias entry
  of the warmer's config says ``"strategy": "managed_instances"``, ``floor``/``cap`` the
  minimum and maximum execution environments and ``managed_instances`` the
  ``warmers.lmi.LmiSettings`` the stack knows (concurrency per environment, the environment's
  vCPUs at LMI's default 2 GiB per vCPU, the created provider's ``MaxVCpuCount``).

Another scalable resource is one more :class:`ScalingScope`: ``Warmer(..., scaling_scopes=[...])``
or :meth:`Warmer.allow_scaling`. The GPU overflow endpoint whose capacity the warmer plans
(:class:`EndpointTarget`; ``Warmer(..., endpoint=gpu_endpoint)`` from the stack config) gets
its own scope with ``RegisterScalableTarget`` only (``sagemaker`` /
``sagemaker:variant:DesiredInstanceCount``: the warmer sets Min/MaxCapacity, no policy, no
alarm), the calls Application Auto Scaling needs of its caller on that one endpoint
(``sagemaker:DescribeEndpoint``, ``DescribeEndpointConfig``,
``UpdateEndpointWeightsAndCapacities``; ``DescribeEndpoint`` is also how the warmer reads what
serves), its service-linked role only, and write access to its capacity parameter. An endpoint
whose target is an inference component gets the ``sagemaker`` /
``sagemaker:inference-component:DesiredCopyCount`` scope instead, ``DescribeEndpoint`` and
``DescribeEndpointConfig`` on the endpoint, and ``DescribeInferenceComponent`` /
``UpdateInferenceComponentRuntimeConfig`` on that one inference component's ARN (what
Application Auto Scaling's SageMaker policy calls on a component, checked against its caller;
``DescribeInferenceComponent`` is how the warmer reads what serves, and
``UpdateInferenceComponentRuntimeConfig`` what ``endpoint_actuator: sagemaker`` calls).
With an endpoint the warmer also publishes its spend guard's ``EndpointSpendUnansweredUsd``:
``cloudwatch:PutMetricData`` has no resource type, so ``*`` with ``StringEquals`` on
``cloudwatch:namespace`` = the warmer's own namespace (``Warmstart/Warmer``); and an alarm on that
metric per endpoint (:attr:`Warmer.spend_alarms`) fires when the endpoint spent the guard's
threshold in its window with no overflow answer.

Two ways to build it (keyword-only props):

* from the stack's typed config: ``Warmer(self, "Warmer", config=config, agents=agents,
  forecast_layer=layer)`` - one target per agent, its ``live`` alias (strategy, memory,
  provisioned-concurrency bounds and degradation parameter from its config);
* from explicit targets: ``Warmer(self, "Warmer", targets=[WarmerTarget(function=fn,
  alias_name="live", ...)])`` (tests, other stacks).

References
----------
EventBridge Scheduler schedule targets: https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-targets.html
Application Auto Scaling and Lambda (permissions, service-linked role):
https://docs.aws.amazon.com/autoscaling/application/userguide/services-that-can-integrate-lambda.html
https://docs.aws.amazon.com/autoscaling/application/userguide/application-autoscaling-service-linked-roles.html
GetMetricData / GetAccountSettings take no resource ARN; resource types and condition keys:
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html
https://docs.aws.amazon.com/service-authorization/latest/reference/list_awslambda.html
https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsapplicationautoscaling.html
CloudWatch permissions the caller of PutScalingPolicy needs ("Permissions required for API actions
on target services and CloudWatch", Lambda functions):
https://docs.aws.amazon.com/autoscaling/application/userguide/security_iam_id-based-policy-examples.html
Application Auto Scaling checks the caller's permissions on the target resource:
https://docs.aws.amazon.com/autoscaling/application/userguide/security_iam_permission_validation.html
What it calls on SageMaker (AWSApplicationAutoscalingSageMakerEndpointPolicy, with
DescribeInferenceComponent and UpdateInferenceComponentRuntimeConfig since 2023-11-13):
https://docs.aws.amazon.com/autoscaling/application/userguide/security-iam-awsmanpol.html
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from functions.runtime.contract import environment as names
from functions.runtime.contract.calibration_document import CalibrationError, parse_calibration
from functions.runtime.contract.warmer_document import (
    ACTUATORS,
    ALIAS_STRATEGIES,
    LAMBDA_NAMESPACE,
    LAMBDA_PC_DIMENSION,
    SAGEMAKER_NAMESPACE,
    AliasEntry,
    DocumentError,
    EndpointEntry,
    EndpointTargetIds,
    WarmerDocument,
    alias_resource_id,
    read_entry,
    target_tracking_alarm_prefix,
)
from infra.constructs.bundling import IGNORED_SUFFIXES, CopyLocalBundling, bundling_options
from infra.constructs.nag import acknowledge
from infra.imports import import_graph, project_modules, reached
from warmers.cloudwatch import SPEND_UNANSWERED_METRIC, WARMER_NAMESPACE

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLER = "warmers.handler.handler"
AAS_SLR_SERVICE = "lambda.application-autoscaling.amazonaws.com"
AAS_SLR_NAME = "AWSServiceRoleForApplicationAutoScaling_LambdaConcurrency"
SAGEMAKER_SLR_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"
SAGEMAKER_SLR_NAME = "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
#: Application Auto Scaling writes the warmer makes (warmers/actuators.py AutoScalingActuator).
SCALING_WRITES = (
    "application-autoscaling:RegisterScalableTarget",
    "application-autoscaling:DeregisterScalableTarget",
    "application-autoscaling:PutScalingPolicy",
    "application-autoscaling:PutScheduledAction",
    "application-autoscaling:DeleteScheduledAction",
)
#: CloudWatch actions the caller of a target-tracking PutScalingPolicy needs (AWS guide above).
ALARM_ACTIONS = ("cloudwatch:PutMetricAlarm", "cloudwatch:DescribeAlarms", "cloudwatch:DeleteAlarms")


class WarmerPropsError(ValueError):
    """Invalid warmer props (the message says which)."""


@dataclass(frozen=True)
class ScalingScope:
    """One kind of scalable target the warmer may change, and the target-tracking alarms of the
    resources it manages there.

    Attributes
    ----------
    service_namespace : str
        ``application-autoscaling:service-namespace`` (``lambda``, ``sagemaker``).
    scalable_dimension : str
        ``application-autoscaling:scalable-dimension``
        (``lambda:function:ProvisionedConcurrency``, ``sagemaker:variant:DesiredInstanceCount``).
    alarm_name_prefixes : tuple of str
        ``TargetTracking-<resource id>-`` per managed resource (tokens allowed), e.g.
        ``TargetTracking-function:<fn>:live-`` or
        ``TargetTracking-endpoint/<endpoint>/variant/AllTraffic-``; the grant adds ``*``.
        Needed only when ``actions`` include ``PutScalingPolicy``.
    actions : tuple of str
        The Application Auto Scaling writes granted (default :data:`SCALING_WRITES`).
    """

    service_namespace: str
    scalable_dimension: str
    alarm_name_prefixes: tuple[str, ...]
    actions: tuple[str, ...] = SCALING_WRITES

    @property
    def sets_policies(self) -> bool:
        """Target tracking is put (so its alarms are managed too)."""
        return "application-autoscaling:PutScalingPolicy" in self.actions

    @property
    def condition(self) -> dict[str, dict[str, str]]:
        """The IAM condition that limits Application Auto Scaling writes to this scope."""
        return {"StringEquals": {
            "application-autoscaling:service-namespace": self.service_namespace,
            "application-autoscaling:scalable-dimension": self.scalable_dimension}}


def lambda_scope(targets: Sequence[WarmerTarget]) -> ScalingScope:
    """Provisioned concurrency of the managed aliases (``function:<fn>:<alias>``)."""
    return ScalingScope(LAMBDA_NAMESPACE, LAMBDA_PC_DIMENSION, tuple(
        target_tracking_alarm_prefix(alias_resource_id(t.function.function_name, t.alias_name))
        for t in targets))


@dataclass(frozen=True)
class EndpointTarget(EndpointTargetIds):
    """The GPU overflow endpoint whose capacity the warmer plans (mirrors
    ``warmers.plan.endpoint.EndpointPolicy``; checked by it at synth).

    Attributes
    ----------
    endpoint_name, variant_name : str
        Known at synth (the GPU endpoint has a fixed name).
    endpoint_arn, endpoint_config_arn : str
        Tokens allowed.
    agents : tuple of WarmerTarget
        The managed aliases that overflow to it.
    capacity_parameter : ssm.IStringParameter
        Where the warmer publishes what serves.
    instance_type : str
    options : mapping
        ``floor``, ``cap``, ``budget_usd_per_hour``, ``concurrent_requests_per_instance``,
        ``environment_idle_min``, ``failed_answer_usd``, ``spend_guard_window_min``,
        ``spend_guard_usd``.
    target : {"variant", "inference_component"}
        What the warmer scales (``EndpointPolicy.target``).
    inference_component : str or None
        The inference component's name (known at synth), with ``target`` ``inference_component``.
    inference_component_arn : str or None
        Its ARN (tokens allowed), with ``target`` ``inference_component``.
    """

    endpoint_name: str
    variant_name: str
    endpoint_arn: str
    endpoint_config_arn: str
    agents: tuple[WarmerTarget, ...]
    capacity_parameter: ssm.IStringParameter
    instance_type: str = "ml.g6.xlarge"
    options: Mapping[str, Any] = field(default_factory=dict)
    target: str = "variant"
    inference_component: str | None = None
    inference_component_arn: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The warmer document's ``endpoints`` entry (:meth:`entry`, as JSON).

        Raises
        ------
        WarmerPropsError
            As :meth:`entry`.
        """
        [out] = WarmerDocument(aliases=(), endpoints=(self.entry(),)).to_json()["endpoints"]
        return out

    def entry(self) -> EndpointEntry:
        """The warmer document's ``endpoints`` entry, checked against the contract (known
        options of their types, target, bounds) and priced: the instance type has a price
        (``warmers/prices.json`` or ``instance_usd_per_hour``) and the floor is within the
        budget.

        Raises
        ------
        WarmerPropsError
            ``gpu_endpoint.capacity: ...`` naming the option.
        """
        out: dict[str, Any] = {"endpoint_name": self.endpoint_name,
                               "variant_name": self.variant_name,
                               "instance_type": self.instance_type, **dict(self.options)}
        if self.target != "variant":  # the variant is the document's default
            out.update(target=self.target, inference_component=self.inference_component)
        out["agents"] = [f"{t.function.function_name}:{t.alias_name}" for t in self.agents]
        if self.agents and all(t.service_name for t in self.agents):
            # the service dimension of each agent's EMF Requests (the spend guard reads it)
            out["agent_services"] = [t.service_name for t in self.agents]
        out["capacity_parameter"] = self.capacity_parameter.parameter_name
        try:
            entry = read_entry(EndpointEntry, out, "").check()
        except DocumentError as exc:
            raise WarmerPropsError(f"gpu_endpoint.capacity: {exc}") from exc
        price = self.instance_usd_per_hour(entry)
        if entry.floor * price > entry.budget_usd_per_hour + 1e-9:
            raise WarmerPropsError(
                f"gpu_endpoint.capacity: endpoint {self.endpoint_name!r}: floor {entry.floor} "
                f"costs ${entry.floor * price:.4f}/h, above the budget "
                f"${entry.budget_usd_per_hour:.2f}/h; raise the budget or lower the floor")
        return entry

    @staticmethod
    def instance_usd_per_hour(entry: EndpointEntry) -> float:
        """USD per instance-hour of the entry: its override, else ``warmers/prices.json``
        (item ``sagemaker_<type with _ for .>_hour``, the planner's naming).

        Raises
        ------
        WarmerPropsError
            When the table has no price for the instance type.
        """
        if entry.instance_usd_per_hour is not None:
            return entry.instance_usd_per_hour
        from warmers.pricing import load_prices

        item = "sagemaker_" + entry.instance_type.replace(".", "_") + "_hour"
        try:
            return load_prices().price(item).usd
        except KeyError as exc:
            raise WarmerPropsError(f"gpu_endpoint.capacity: endpoint {entry.endpoint_name!r}: "
                                   f"no price for {entry.instance_type} ({exc}); set "
                                   "instance_usd_per_hour") from exc

    def spend_guard(self) -> tuple[float, int]:
        """The spend guard's threshold, USD, and window, minutes
        (``EndpointEntry.spend_guard_usd_at``, ``spend_guard_window_min``)."""
        entry = self.entry()
        return (entry.spend_guard_usd_at(self.instance_usd_per_hour(entry)),
                entry.spend_guard_window_min)


def endpoint_target_for(endpoint: Any, targets: Sequence[WarmerTarget],
                        agents: Sequence[Any]) -> EndpointTarget:
    """The endpoint target of the stack's GPU endpoint (a ``GpuEndpoint`` after
    ``manage_capacity``) and the targets of the agents that declare ``"overflow": "gpu"``."""
    overflowing = tuple(t for t, a in zip(targets, agents, strict=True)
                        if a.agent.overflow == "gpu")
    return EndpointTarget(endpoint.name, endpoint.variant_name, endpoint.endpoint_arn,
                          endpoint.endpoint_config_arn, overflowing,
                          endpoint.manage_capacity(), endpoint.instance_type,
                          endpoint.capacity_options, endpoint.target,
                          endpoint.inference_component_name, endpoint.inference_component_arn)


@dataclass(frozen=True)
class WarmerTarget:
    """One alias the warmer manages (mirrors ``warmers.plan.policy.AliasPolicy``)."""

    function: lambda_.IFunction
    alias_name: str
    strategy: str = "provisioned"
    memory_mb: int = 1024
    floor: int = 0
    cap: int = 10
    budget_usd_per_hour: float = 1.0
    degradation_parameter: ssm.IStringParameter | None = None
    available_concurrency: int | None = None
    objective: str = "cost"
    #: the agent's SLA and measured cold start (ms), for the endpoint planner's counterfactual
    #: (``AliasPolicy.sla_ms``, ``cold_start_p50_ms``/``cold_start_p95_ms``); None: unknown
    sla_ms: float | None = None
    cold_start_p95_ms: float | None = None
    #: the agent's ``POWERTOOLS_SERVICE_NAME`` (its name): the ``service`` dimension of its EMF
    #: metrics, which the endpoint's spend guard reads; None: the function name
    service_name: str | None = None
    #: strategy ``managed_instances``: the alias entry's ``managed_instances`` object
    #: (``warmers.lmi.LmiSettings`` fields); None: the warmer's defaults
    managed_instances: Mapping[str, Any] | None = None

    @property
    def on_managed_instances(self) -> bool:
        """Lambda Managed Instances: scaled by ``PutFunctionScalingConfig``, no PC."""
        return self.strategy == "managed_instances"


class Warmer(Construct):
    """The warmer function, its alias, layer, schedule and least-privilege role.

    Parameters
    ----------
    targets : sequence of WarmerTarget
        Aliases to manage (or give ``config`` + ``agents``).
    config : infra.config.WarmstartConfig, optional
        Typed stack config: ``config.warmer.schedule`` and ``config.warmer.options`` (``cap``,
        ``floor``, ``budget_usd_per_hour``, ``actuator``, ``lead_min``, ``history_days``,
        ``runtime``, ``architecture``); each agent's strategy, memory and
        provisioned-concurrency bounds.
    agents : sequence of infra.constructs.agent_function.AgentFunction, optional
        Every agent the warmer manages (one target each).
    forecast_layer : aws_lambda.ILayerVersion, optional
        The numpy layer; built here from ``layers/forecast/requirements.txt`` when absent.
    schedule : str
        EventBridge Scheduler expression (default every minute).
    actuator : {"autoscaling", "lambda"}
    runtime, architecture : str
        Of the warmer function (must match the layer's wheels).
    scaling_scopes : sequence of ScalingScope
        Other scalable targets the warmer may change (the managed aliases' Lambda scope is always
        there), e.g. a SageMaker variant; see :meth:`allow_scaling`.
    log_key : aws_kms.IKey, optional
        Customer-managed key of the warmer's log group (``warmstart.logs.kms_key``).
    endpoints : sequence of EndpointTarget
        GPU overflow endpoints whose capacity the warmer plans.
    endpoint : infra.constructs.gpu_endpoint.GpuEndpoint, optional
        With ``config`` + ``agents``: the stack's endpoint, planned for its overflow agents.

    Attributes
    ----------
    function, alias, role, log_group, schedule, layer
    spend_alarms : dict of str to aws_cloudwatch.Alarm
        Endpoint name -> the alarm on its ``EndpointSpendUnansweredUsd``.

    Raises
    ------
    WarmerPropsError
        No target, ``$LATEST``, unknown actuator or strategy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        targets: Sequence[WarmerTarget] = (),
        config: Any = None,
        agents: Sequence[Any] = (),
        forecast_layer: lambda_.ILayerVersion | None = None,
        schedule: str = "rate(1 minute)",
        actuator: str = "autoscaling",
        lead_min: int = 15,
        history_days: float = 14,
        state_prefix: str = "/warmstart/warmer",
        runtime: str = "python3.12",
        architecture: str = "x86_64",
        memory_mb: int = 512,
        timeout_s: int = 60,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        scaling_scopes: Sequence[ScalingScope] = (),
        log_key: kms.IKey | None = None,
        endpoints: Sequence[EndpointTarget] = (),
        endpoint: Any = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if config is not None and agents:
            options = dict(config.warmer.options)
            schedule = config.warmer.schedule
            actuator = options.get("actuator", actuator)
            lead_min = int(options.get("lead_min", lead_min))
            history_days = float(options.get("history_days", history_days))
            runtime = str(options.get("runtime", runtime))
            architecture = str(options.get("architecture", architecture))
            targets = [target_for(agent, options) for agent in agents]
            if endpoint is not None:
                endpoints = [*endpoints, endpoint_target_for(endpoint, targets, agents)]
        _validate(targets, actuator, state_prefix)
        endpoints = [e for e in endpoints if e.agents]  # no agent overflows: nothing to plan

        from infra.constructs.layers import DependencyLayer, architecture_for, runtime_for

        if forecast_layer is None:
            built = DependencyLayer(
                self, "ForecastLayer", requirements=REPO_ROOT / "layers" / "forecast" /
                "requirements.txt", runtime=runtime, architecture=architecture,
                description="warmstart forecast: numpy")
            forecast_layer = built.layer
        self.layer = forecast_layer

        self.log_group = logs.LogGroup(self, "LogGroup", retention=log_retention,
                                       encryption_key=log_key)
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                             description="warmstart warmer: metrics, plan, actuate, publish level")
        self.log_group.grant_write(self.role)

        stack = cdk.Stack.of(self)
        document = WarmerDocument(
            aliases=tuple(_alias_entry(t) for t in targets),
            endpoints=tuple(e.entry() for e in endpoints), actuator=actuator,
            lead_min=lead_min, history_days=float(history_days), architecture=architecture)
        try:
            document.check()  # what the warmer will read (warmers.config)
        except DocumentError as exc:
            raise WarmerPropsError(f"warmer document: {exc}") from exc
        warmer_config = document.to_json()
        source = REPO_ROOT / "warmers"
        code = lambda_.Code.from_asset(
            str(source), bundling=bundling_options(CopyLocalBundling(
                copies=control_plane_files(REPO_ROOT))))
        self.function = lambda_.Function(
            self, "Function", code=code, handler=HANDLER, runtime=runtime_for(runtime),
            architecture=architecture_for(architecture), memory_size=memory_mb,
            timeout=cdk.Duration.seconds(timeout_s), layers=[forecast_layer], role=self.role,
            log_group=self.log_group, logging_format=lambda_.LoggingFormat.JSON,
            reserved_concurrent_executions=1,  # one run at a time: runs never overlap
            environment={names.ENV_WARMER_CONFIG: stack.to_json_string(warmer_config),
                         names.ENV_WARMER_STATE_PREFIX: state_prefix},
            description="warmstart warmer: forecast -> plan -> provisioned concurrency / pings")
        acknowledge(self.function, "AwsSolutions-L1",
                    f"The runtime ({runtime}) is pinned to match the numpy layer, which is "
                    "pip-installed for exactly that CPython; upgrading is a config change plus a "
                    "layer rebuild.")
        self.alias = lambda_.Alias(self, "Alias", alias_name="live",
                                   version=self.function.current_version)
        self._scopes: list[str] = []
        self._acknowledged: set[str] = set()
        self.spend_alarms: dict[str, cloudwatch.Alarm] = {}
        self._grant(targets, state_prefix)
        concurrency = [t for t in targets if not t.on_managed_instances]
        for scaling_scope in ((lambda_scope(concurrency),) if concurrency else ()) + tuple(
                scaling_scopes):
            self.allow_scaling(scaling_scope)
        for endpoint_target in endpoints:
            self.allow_endpoint(endpoint_target)
        # The function must not run before both policies are attached; its role is already a
        # dependency through GetAtt Role.Arn (cfn-lint W3005), so depend on the policies only.
        default_policy = self.role.node.find_child("DefaultPolicy").node.default_child
        self.function.node.default_child.add_override(  # type: ignore[union-attr]
            "DependsOn", [stack.get_logical_id(default_policy),  # type: ignore[arg-type]
                          stack.get_logical_id(self.policy.node.default_child)])  # type: ignore[arg-type]

        scheduler_role = iam.Role(self, "SchedulerRole",
                                  assumed_by=iam.ServicePrincipal(
                                      "scheduler.amazonaws.com",
                                      conditions={"StringEquals": {
                                          "aws:SourceAccount": stack.account}}),
                                  description="EventBridge Scheduler invokes the warmer alias")
        self.alias.grant_invoke(scheduler_role)
        self.schedule = scheduler.CfnSchedule(
            self, "Schedule", schedule_expression=schedule,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            description="run the warmstart warmer",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=self.alias.function_arn, role_arn=scheduler_role.role_arn,
                input='{"source": "warmstart.scheduler"}',
                # a missed minute is superseded by the next run: never retry a stale one
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=0, maximum_event_age_in_seconds=60)))

    def _grant(self, targets: Sequence[WarmerTarget], state_prefix: str) -> None:
        stack = cdk.Stack.of(self)
        # provisioned concurrency and pings: every alias but the LMI ones (they have no PC)
        concurrency = [t for t in targets if not t.on_managed_instances]
        alias_arns = [f"{t.function.function_arn}:{t.alias_name}" for t in concurrency]
        version_arns = [f"{t.function.function_arn}:*" for t in concurrency]
        fn_arns = [t.function.function_arn for t in concurrency]
        lambda_statements = [
            iam.PolicyStatement(sid="ManagedAliases", actions=[
                "lambda:GetAlias", "lambda:GetProvisionedConcurrencyConfig",
                "lambda:PutProvisionedConcurrencyConfig",
                "lambda:DeleteProvisionedConcurrencyConfig", "lambda:InvokeFunction"],
                resources=alias_arns),
            iam.PolicyStatement(sid="ListPc", actions=["lambda:ListProvisionedConcurrencyConfigs"],
                                resources=fn_arns),
            iam.PolicyStatement(sid="ReconcileOldVersions",
                                actions=["lambda:DeleteProvisionedConcurrencyConfig",
                                         "lambda:GetProvisionedConcurrencyConfig"],
                                resources=version_arns),
        ] if concurrency else []
        lambda_statements += _managed_instances_statements(
            [t for t in targets if t.on_managed_instances])
        policy = iam.Policy(self, "Policy", statements=[
            iam.PolicyStatement(sid="ReadLambdaMetrics", actions=["cloudwatch:GetMetricData"],
                                resources=["*"]),
            iam.PolicyStatement(sid="AccountConcurrency", actions=["lambda:GetAccountSettings"],
                                resources=["*"]),
            *lambda_statements,
            iam.PolicyStatement(sid="DescribeScaling", actions=[
                "application-autoscaling:DescribeScalableTargets",
                "application-autoscaling:DescribeScalingPolicies",
                "application-autoscaling:DescribeScheduledActions"], resources=["*"]),
            _service_linked_role(stack, "AutoScalingServiceLinkedRole", AAS_SLR_SERVICE,
                                 AAS_SLR_NAME),
            iam.PolicyStatement(sid="PlanState", actions=["ssm:GetParameter", "ssm:PutParameter"],
                                resources=[stack.format_arn(
                                    service="ssm", resource="parameter",
                                    resource_name=f"{state_prefix.strip('/')}/*",
                                    arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME)]),
        ])
        policy.attach_to_role(self.role)
        self.policy = policy
        for target in targets:
            if target.degradation_parameter is not None:
                target.degradation_parameter.grant_read(self.role)
                target.degradation_parameter.grant_write(self.role)
        region, account = _region_account(stack)
        arn = f"arn:<AWS::Partition>:{{}}:{region}:{account}:{{}}"
        reasons = [
            ("Resource::*", ("GetMetricData, GetAccountSettings, PutMetricData (limited to the "
                            "warmer's own namespace by the cloudwatch:namespace condition) and "
                            "the Application Auto Scaling Describe* calls support no resource "
                            "ARN (Service Authorization Reference)")),
            (f"Resource::{arn.format('ssm', 'parameter/' + state_prefix.strip('/') + '/*')}",
             ("the last good plan is one SSM parameter per managed alias under the warmer's own "
             "prefix, named after the alias at run time")),
        ]
        for target in targets:
            reasons.append((f"Resource::{_arn_evidence(stack, target.function)}:*", (
                "the published version of a Lambda Managed Instances function carries its "
                "scaling config (Get/PutFunctionScalingConfig, GetFunctionConfiguration on the "
                "version the alias points at); versions are numbered at publish time"
                if target.on_managed_instances else
                "provisioned concurrency left directly on an old published version "
                "of a managed function must be found and deleted; versions are "
                "numbered at publish time")))
        for evidence, why in reasons:
            acknowledge(policy, f"AwsSolutions-IAM5[{evidence}]", why)

    def allow_scaling(self, scope: ScalingScope) -> None:
        """Let the warmer change scalable targets of ``scope`` and its target-tracking alarms.

        Adds two statements to the warmer's policy: the Application Auto Scaling writes on
        ``scalable-target/*`` limited by ``scope.condition`` (namespace and dimension; AWS offers
        no resource-id key and the target ARN's id is random), and ``PutMetricAlarm``,
        ``DescribeAlarms``, ``DeleteAlarms`` on ``alarm:<prefix>*`` for each prefix of the scope.
        The target service's own calls are not included: for a SageMaker variant the caller also
        needs ``sagemaker:DescribeEndpoint``, ``sagemaker:DescribeEndpointConfig`` and
        ``sagemaker:UpdateEndpointWeightsAndCapacities`` on that endpoint (Application Auto
        Scaling guide, "Permissions required for API actions on target services and
        CloudWatch"), granted by whoever adds the scope.

        Raises
        ------
        WarmerPropsError
            If ``scope`` names no alarm prefix (the alarms would be unscoped), or is added twice.
        """
        if scope.sets_policies and not scope.alarm_name_prefixes:
            raise WarmerPropsError(
                f"scaling scope {scope.scalable_dimension} needs the alarm name prefixes of the "
                "resources it manages (TargetTracking-<resource id>-)")
        if scope.scalable_dimension in self._scopes:
            raise WarmerPropsError(f"scaling scope {scope.scalable_dimension} is already allowed")
        self._scopes.append(scope.scalable_dimension)
        stack = cdk.Stack.of(self)
        sid = "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", scope.scalable_dimension))
        target_arn = stack.format_arn(service="application-autoscaling",
                                      resource="scalable-target", resource_name="*",
                                      arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME)
        alarm_arns = [stack.format_arn(service="cloudwatch", resource="alarm",
                                       resource_name=f"{prefix}*",
                                       arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)
                      for prefix in scope.alarm_name_prefixes]
        self.policy.add_statements(
            iam.PolicyStatement(sid=f"ScalableTargets{sid}", actions=list(scope.actions),
                                resources=[target_arn], conditions=scope.condition))
        if scope.sets_policies:
            self.policy.add_statements(
                iam.PolicyStatement(sid=f"TargetTrackingAlarms{sid}", actions=list(ALARM_ACTIONS),
                                    resources=alarm_arns))
        region, account = _region_account(stack)
        evidence = [((f"Resource::arn:<AWS::Partition>:application-autoscaling:{region}:{account}:"
                     "scalable-target/*"),
                     ("scalable-target ARNs carry a random id assigned at registration and AWS has "
                     "no resource-id condition key; the grant is limited to "
                     f"{scope.service_namespace} / {scope.scalable_dimension} by the "
                     "service-namespace and scalable-dimension condition keys"))]
        for prefix in scope.alarm_name_prefixes if scope.sets_policies else ():
            evidence.append((
                (f"Resource::arn:<AWS::Partition>:cloudwatch:{region}:{account}:alarm:"
                f"{_evidence(stack, prefix)}*"),
                ("Application Auto Scaling names each target-tracking alarm "
                "TargetTracking-<resource id>-AlarmHigh|AlarmLow-<uuid> at PutScalingPolicy; "
                "the grant covers the alarms of this one managed resource")))
        for where, why in evidence:
            if where not in self._acknowledged:
                self._acknowledged.add(where)
                acknowledge(self.policy, f"AwsSolutions-IAM5[{where}]", why)


    def allow_endpoint(self, endpoint: EndpointTarget) -> None:
        """Let the warmer set ``endpoint``'s capacity and publish what serves (see the module
        docstring): ``RegisterScalableTarget`` limited to SageMaker variants (or inference
        components), the endpoint's own ``DescribeEndpoint`` /
        ``UpdateEndpointWeightsAndCapacities`` (a variant) and its endpoint config's
        ``DescribeEndpointConfig``, an inference component's ``DescribeInferenceComponent`` /
        ``UpdateInferenceComponentRuntimeConfig`` on its ARN, the SageMaker service-linked
        role, its capacity parameter.

        Raises
        ------
        WarmerPropsError
            ``target`` ``inference_component`` without ``inference_component_arn``.

        References
        ----------
        https://docs.aws.amazon.com/autoscaling/application/userguide/security_iam_id-based-policy-examples.html
        ("Permissions required for API actions on target services", SageMaker AI)
        https://docs.aws.amazon.com/autoscaling/application/userguide/security-iam-awsmanpol.html
        (AWSApplicationAutoscalingSageMakerEndpointPolicy: the inference-component calls)
        """
        components = endpoint.target == "inference_component"
        if components and not endpoint.inference_component_arn:
            raise WarmerPropsError(
                f"endpoint {endpoint.endpoint_name}: target inference_component needs "
                "inference_component_arn (the grant's resource)")
        self.allow_scaling(ScalingScope(
            SAGEMAKER_NAMESPACE, endpoint.scalable_dimension, (),
            actions=("application-autoscaling:RegisterScalableTarget",)))
        stack = cdk.Stack.of(self)
        endpoint_actions = ["sagemaker:DescribeEndpoint"]
        if not components:
            endpoint_actions.append("sagemaker:UpdateEndpointWeightsAndCapacities")
        if components:
            self.policy.add_statements(iam.PolicyStatement(
                sid="OverflowInferenceComponent", actions=[
                    "sagemaker:DescribeInferenceComponent",
                    "sagemaker:UpdateInferenceComponentRuntimeConfig"],
                resources=[str(endpoint.inference_component_arn)]))
        self.policy.add_statements(
            iam.PolicyStatement(sid="OverflowEndpoint", actions=endpoint_actions,
                                resources=[endpoint.endpoint_arn]),
            iam.PolicyStatement(sid="OverflowEndpointConfig",
                                actions=["sagemaker:DescribeEndpointConfig"],
                                resources=[endpoint.endpoint_config_arn]),
            _service_linked_role(stack, "SageMakerScalingServiceLinkedRole",
                                 SAGEMAKER_SLR_SERVICE, SAGEMAKER_SLR_NAME))
        endpoint.capacity_parameter.grant_write(self.role)
        self._spend_guard(endpoint)

    def _spend_guard(self, endpoint: EndpointTarget) -> None:
        """``PutMetricData`` on the warmer's namespace only (once), and the alarm on the
        endpoint's ``EndpointSpendUnansweredUsd``: its spend-guard threshold reached in
        3 consecutive 5-minute periods (the metric is already a rolling window: 15 minutes of
        it is an endpoint still paying for nothing after the guard acted, e.g. a variant's
        least instance, or overflow that never gets answered)."""
        if not self.spend_alarms:
            self.policy.add_statements(iam.PolicyStatement(
                sid="PublishSpendGuard", actions=["cloudwatch:PutMetricData"], resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": WARMER_NAMESPACE}}))
        threshold, window_min = endpoint.spend_guard()
        name = endpoint.endpoint_name
        sid = "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", name))
        self.spend_alarms[name] = cloudwatch.Alarm(
            self, f"SpendUnanswered{sid}Alarm",
            metric=cloudwatch.Metric(namespace=WARMER_NAMESPACE,
                                     metric_name=SPEND_UNANSWERED_METRIC,
                                     dimensions_map={"EndpointName": name},
                                     period=cdk.Duration.minutes(5), statistic="Maximum"),
            threshold=threshold, evaluation_periods=3, datapoints_to_alarm=3,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=(f"warmstart warmer: GPU endpoint {name} spent >= ${threshold:.4f} "
                               f"in its last {window_min} min without answering one overflow "
                               "request (the spend guard scales it in to the floor; see the "
                               "warmer's endpoint_plan log)"))


def target_for(agent: Any, options: Mapping[str, Any]) -> WarmerTarget:
    """The warmer target of one agent (an ``AgentFunction``): its alias, strategy, memory, bounds
    and objective (its provisioned concurrency, else ``options`` ``floor``/``cap`` and the
    ``cost`` objective), budget and level parameter.

    With ``reserved_concurrency`` the agent's cap (and floor) is at most its reservation (Lambda
    refuses provisioned concurrency above it) and the warmer measures utilization against it
    (``available_concurrency``) instead of the account limit."""
    cfg = agent.agent
    if cfg.on_managed_instances and cfg.managed_instances is not None:
        return _managed_instances_target(agent, options)
    pc = cfg.provisioned_concurrency
    reserved = cfg.reserved_concurrency
    cap = pc.max if pc else int(options.get("cap", 10))
    floor = pc.min if pc else int(options.get("floor", 0))
    if reserved is not None:
        cap, floor = min(cap, reserved), min(floor, reserved)
    return WarmerTarget(
        function=agent.function, alias_name=agent.alias.alias_name, strategy=cfg.strategy,
        memory_mb=cfg.memory_mb, floor=floor, cap=cap,
        budget_usd_per_hour=float(options.get("budget_usd_per_hour", 1.0)),
        degradation_parameter=agent.degradation_parameter, available_concurrency=reserved,
        objective=pc.objective if pc else "cost", sla_ms=float(cfg.sla_ms),
        cold_start_p95_ms=calibrated_cold_start_p95_ms(
            getattr(agent, "calibration_json", None)), service_name=cfg.name)


def lmi_settings(cfg: Any) -> dict[str, Any]:
    """The warmer's ``managed_instances`` object of an LMI agent (an ``infra.config.AgentConfig``),
    checked by ``warmers.lmi.LmiSettings``.

    ``vcpus_per_environment``: ``memory_mb`` / 2048 (LMI's default
    ``ExecutionEnvironmentMemoryGiBPerVCpu`` of 2, which the stack leaves as it is);
    ``concurrency_per_environment``: ``per_execution_environment_max_concurrency`` when given;
    ``provider_max_vcpus``: a created provider's ``max_vcpu`` (an imported one's limit is not
    known at synth). The instance type the warmer prices with stays its default.

    Raises
    ------
    WarmerPropsError
        When ``LmiSettings`` refuses the values (the message names the agent's key).
    """
    from infra.config import LMI_MEMORY_MB_PER_VCPU
    from warmers.lmi import LmiConfigError, LmiSettings

    lmi = cfg.managed_instances
    out: dict[str, Any] = {"vcpus_per_environment": cfg.memory_mb / LMI_MEMORY_MB_PER_VCPU}
    if lmi.per_execution_environment_max_concurrency is not None:
        out["concurrency_per_environment"] = lmi.per_execution_environment_max_concurrency
    if lmi.max_vcpu is not None:
        out["provider_max_vcpus"] = lmi.max_vcpu
    try:
        LmiSettings(**out)
    except LmiConfigError as exc:
        raise WarmerPropsError(
            f"warmstart.agents.{cfg.name}.memory_mb: {cfg.memory_mb} MB is "
            f"{out['vcpus_per_environment']:g} vCPUs per execution environment, which the "
            f"warmer's LMI planner refuses ({exc}); lower memory_mb") from exc
    return out


def _managed_instances_target(agent: Any, options: Mapping[str, Any]) -> WarmerTarget:
    """An LMI agent's target: floor/cap are its version's min/max execution environments."""
    cfg = agent.agent
    lmi = cfg.managed_instances
    return WarmerTarget(
        function=agent.function, alias_name=agent.alias.alias_name, strategy=cfg.strategy,
        memory_mb=cfg.memory_mb, floor=lmi.min_execution_environments, cap=lmi.maximum,
        budget_usd_per_hour=float(options.get("budget_usd_per_hour", 1.0)),
        degradation_parameter=agent.degradation_parameter, sla_ms=float(cfg.sla_ms),
        service_name=cfg.name, managed_instances=lmi_settings(cfg))


def calibrated_cold_start_p95_ms(calibration_json: str | None) -> float | None:
    """An agent's cold start until it can answer, ms: the sum of its calibration's stage p95s
    (``warmstart calibrate --agent NAME``: toolkit, web, model, ...; sequential stages of the
    preload); None without a calibration or stages. The document is checked at synth already
    (``agent_function.admission_calibration``)."""
    if not calibration_json:
        return None
    try:
        return parse_calibration(calibration_json).cold_start_p95_ms()
    except CalibrationError as exc:
        raise WarmerPropsError(f"calibration: {exc}") from exc


def control_plane_files(root: Path = REPO_ROOT) -> list[tuple[Path, str]]:
    """What the warmer Lambda's asset holds: ``(file, its path in the asset)`` for each module
    ``warmers.handler`` imports, directly or not (lazy and type-only imports too:
    ``infra.imports``; under ``functions/`` the deploy-to-run contract,
    ``functions/runtime/contract/``), the ``__init__.py`` of each package they are in, and the
    data files beside the ``warmers`` modules (``warmers/prices.json``). The simulator and the other evaluation tools under
    ``warmers/`` (``evaluate``, ``traces``) are not imported by the handler, so not deployed.

    Parameters
    ----------
    root : Path
        The repository root (holds ``warmers/``).

    Returns
    -------
    list of (Path, str)
        Sorted by asset path; for ``CopyLocalBundling(copies=...)``.
    """
    modules = project_modules(root, ("warmers", "functions"))
    shipped = reached(import_graph(modules), "warmers.handler")
    for name in list(shipped):
        parts = name.split(".")
        shipped.update(".".join(parts[:i]) for i in range(1, len(parts)))
    files = {modules[name] for name in shipped}
    # data files beside the warmer's modules (prices.json); under functions/ only the modules
    # it imports (the deploy-to-run contract), not the agents' runtime files
    folders = {path.parent for path in files if path.relative_to(root).parts[0] == "warmers"}
    files.update(path for folder in folders for path in folder.iterdir()
                 if path.is_file() and path.suffix != ".py" and not path.name.endswith(
                     IGNORED_SUFFIXES))
    return sorted(((path, path.relative_to(root).as_posix()) for path in files),
                  key=lambda copy: copy[1])

#: What ``warmers.actuators.ManagedInstancesActuator`` calls on an LMI function's version.
LMI_VERSION_ACTIONS = ("lambda:GetFunctionConfiguration", "lambda:GetFunctionScalingConfig",
                       "lambda:PutFunctionScalingConfig")


def _managed_instances_statements(targets: Sequence[WarmerTarget]) -> list[iam.PolicyStatement]:
    """The LMI aliases' grants (see the module docstring): ``GetAlias`` on each alias, the
    scaling-config calls on each function, its alias and its versions; nothing without one."""
    if not targets:
        return []
    functions = [t.function.function_arn for t in targets]
    return [
        iam.PolicyStatement(sid="ManagedInstancesAliases", actions=["lambda:GetAlias"],
                            resources=[f"{t.function.function_arn}:{t.alias_name}"
                                       for t in targets]),
        iam.PolicyStatement(sid="ManagedInstancesScaling", actions=list(LMI_VERSION_ACTIONS),
                            resources=[*functions, *(f"{arn}:*" for arn in functions)]),
    ]


def _service_linked_role(stack: cdk.Stack, sid: str, service: str,
                         name: str) -> iam.PolicyStatement:
    """``iam:CreateServiceLinkedRole`` for Application Auto Scaling's role of one service only."""
    return iam.PolicyStatement(
        sid=sid, actions=["iam:CreateServiceLinkedRole"],
        resources=[stack.format_arn(service="iam", region="", resource="role",
                                    resource_name=f"aws-service-role/{service}/{name}")],
        conditions={"StringLike": {"iam:AWSServiceName": service}})


def _region_account(stack: cdk.Stack) -> tuple[str, str]:
    """Region and account as cdk-nag prints them in IAM5 evidence (pseudo parameters or literal)."""
    region = "<AWS::Region>" if cdk.Token.is_unresolved(stack.region) else stack.region
    account = "<AWS::AccountId>" if cdk.Token.is_unresolved(stack.account) else stack.account
    return region, account


def _evidence(stack: cdk.Stack, value: str) -> str:
    """How cdk-nag prints a string with tokens in IAM5 evidence: ``{"Ref": X}`` as ``<X>``,
    ``{"Fn::GetAtt": [X, A]}`` as ``<X.A>``, literal parts as they are."""
    resolved = stack.resolve(value)
    if isinstance(resolved, str):
        return resolved
    parts = resolved["Fn::Join"][1] if isinstance(resolved, dict) and "Fn::Join" in resolved else [resolved]
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict) and "Ref" in part:
            out.append(f"<{part['Ref']}>")
        elif isinstance(part, dict) and "Fn::GetAtt" in part:
            out.append("<{}.{}>".format(*part["Fn::GetAtt"]))
        else:
            raise WarmerPropsError(f"cannot name {part!r} in a cdk-nag acknowledgement")
    return "".join(out)


def _arn_evidence(stack: cdk.Stack, function: lambda_.IFunction) -> str:
    """How cdk-nag prints a function ARN in IAM5 evidence (``<LogicalId.Arn>`` or literal)."""
    child = function.node.default_child
    if isinstance(child, cdk.CfnResource):
        return f"<{stack.get_logical_id(child)}.Arn>"
    return function.function_arn


def _validate(targets: Sequence[WarmerTarget], actuator: str, state_prefix: str) -> None:
    if not targets:
        raise WarmerPropsError("Warmer needs at least one target (or config= and agents=)")
    if actuator not in ACTUATORS:
        raise WarmerPropsError(f"actuator must be 'autoscaling' or 'lambda', got {actuator!r}")
    if not state_prefix.startswith("/"):
        raise WarmerPropsError(f"state_prefix must start with '/', got {state_prefix!r}")
    for t in targets:
        if t.alias_name == "$LATEST":
            raise WarmerPropsError("a warmer target must be an alias, never $LATEST")
        if t.strategy not in ALIAS_STRATEGIES:
            raise WarmerPropsError(f"unknown strategy {t.strategy!r}")
        if not 0 <= t.floor <= t.cap:
            raise WarmerPropsError(f"need 0 <= floor <= cap, got {t.floor}, {t.cap}")


def _alias_entry(t: WarmerTarget) -> AliasEntry:
    """The warmer document's ``aliases`` entry of one target."""
    cold_start = {}
    if t.sla_ms is not None and t.cold_start_p95_ms is not None:
        # one measured p95 (the calibration has no median): a point at the p95, which errs
        # toward counting a cold start late
        cold_start = {"sla_ms": t.sla_ms, "cold_start_p50_ms": t.cold_start_p95_ms,
                      "cold_start_p95_ms": t.cold_start_p95_ms}
    return AliasEntry(
        function_name=t.function.function_name, alias=t.alias_name, strategy=t.strategy,
        memory_mb=t.memory_mb, floor=t.floor, cap=t.cap,
        budget_usd_per_hour=t.budget_usd_per_hour,
        degradation_parameter=(None if t.degradation_parameter is None
                               else t.degradation_parameter.parameter_name),
        available_concurrency=t.available_concurrency, objective=t.objective,
        managed_instances=None if t.managed_instances is None else dict(t.managed_instances),
        **cold_start)
