"""The scheduled warmer: a small Lambda (``warmers.handler.handler``) with a numpy layer, run every
minute by EventBridge Scheduler, allowed to touch only the aliases it manages, their scalable
targets and the SSM parameters it writes.

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
GetMetricData / GetAccountSettings take no resource ARN:
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html
https://docs.aws.amazon.com/service-authorization/latest/reference/list_awslambda.html
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.constructs.bundling import CopyLocalBundling, bundling_options
from infra.constructs.nag import acknowledge

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLER = "warmers.handler.handler"
AAS_SLR_SERVICE = "lambda.application-autoscaling.amazonaws.com"
AAS_SLR_NAME = "AWSServiceRoleForApplicationAutoScaling_LambdaConcurrency"


class WarmerPropsError(ValueError):
    """Invalid warmer props (the message says which)."""


@dataclass(frozen=True)
class WarmerTarget:
    """One alias the warmer manages (mirrors ``warmers.planner.AliasPolicy``)."""

    function: lambda_.IFunction
    alias_name: str
    strategy: str = "provisioned"
    memory_mb: int = 1024
    floor: int = 0
    cap: int = 10
    budget_usd_per_hour: float = 1.0
    degradation_parameter: ssm.IStringParameter | None = None
    available_concurrency: int | None = None


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

    Attributes
    ----------
    function, alias, role, log_group, schedule, layer

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
        _validate(targets, actuator, state_prefix)

        from infra.constructs.layers import DependencyLayer, architecture_for, runtime_for

        if forecast_layer is None:
            built = DependencyLayer(
                self, "ForecastLayer", requirements=REPO_ROOT / "layers" / "forecast" /
                "requirements.txt", runtime=runtime, architecture=architecture,
                description="warmstart forecast: numpy")
            forecast_layer = built.layer
        self.layer = forecast_layer

        self.log_group = logs.LogGroup(self, "LogGroup", retention=log_retention)
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                             description="warmstart warmer: metrics, plan, actuate, publish level")
        self.log_group.grant_write(self.role)

        stack = cdk.Stack.of(self)
        warmer_config = {
            "aliases": [_alias_json(t) for t in targets],
            "actuator": actuator, "lead_min": lead_min, "history_days": history_days,
            "architecture": architecture,
        }
        source = REPO_ROOT / "warmers"
        code = lambda_.Code.from_asset(
            str(source), bundling=bundling_options(CopyLocalBundling(source=source,
                                                                     dest="warmers")))
        self.function = lambda_.Function(
            self, "Function", code=code, handler=HANDLER, runtime=runtime_for(runtime),
            architecture=architecture_for(architecture), memory_size=memory_mb,
            timeout=cdk.Duration.seconds(timeout_s), layers=[forecast_layer], role=self.role,
            log_group=self.log_group, logging_format=lambda_.LoggingFormat.JSON,
            reserved_concurrent_executions=1,  # one run at a time: runs never overlap
            environment={"WARMSTART_WARMER_CONFIG": stack.to_json_string(warmer_config),
                         "WARMSTART_WARMER_STATE_PREFIX": state_prefix},
            description="warmstart warmer: forecast -> plan -> provisioned concurrency / pings")
        acknowledge(self.function, "AwsSolutions-L1",
                    f"The runtime ({runtime}) is pinned to match the numpy layer, which is "
                    "pip-installed for exactly that CPython; upgrading is a config change plus a "
                    "layer rebuild.")
        self.alias = lambda_.Alias(self, "Alias", alias_name="live",
                                   version=self.function.current_version)
        self._grant(targets, state_prefix)

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
        alias_arns = [f"{t.function.function_arn}:{t.alias_name}" for t in targets]
        version_arns = [f"{t.function.function_arn}:*" for t in targets]
        fn_arns = [t.function.function_arn for t in targets]
        policy = iam.Policy(self, "Policy", statements=[
            iam.PolicyStatement(sid="ReadLambdaMetrics", actions=["cloudwatch:GetMetricData"],
                                resources=["*"]),
            iam.PolicyStatement(sid="AccountConcurrency", actions=["lambda:GetAccountSettings"],
                                resources=["*"]),
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
            iam.PolicyStatement(sid="ScalableTargets", actions=[
                "application-autoscaling:RegisterScalableTarget",
                "application-autoscaling:DeregisterScalableTarget",
                "application-autoscaling:PutScalingPolicy",
                "application-autoscaling:PutScheduledAction",
                "application-autoscaling:DeleteScheduledAction"],
                resources=[stack.format_arn(service="application-autoscaling",
                                            resource="scalable-target", resource_name="*",
                                            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME)]),
            iam.PolicyStatement(sid="DescribeScaling", actions=[
                "application-autoscaling:DescribeScalableTargets",
                "application-autoscaling:DescribeScalingPolicies",
                "application-autoscaling:DescribeScheduledActions"], resources=["*"]),
            iam.PolicyStatement(sid="TargetTrackingAlarms", actions=[
                "cloudwatch:PutMetricAlarm", "cloudwatch:DescribeAlarms",
                "cloudwatch:DeleteAlarms"],
                resources=[stack.format_arn(service="cloudwatch", resource="alarm",
                                            resource_name="TargetTracking-function:*",
                                            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)]),
            iam.PolicyStatement(sid="AutoScalingServiceLinkedRole",
                                actions=["iam:CreateServiceLinkedRole"],
                                resources=[stack.format_arn(
                                    service="iam", region="", resource="role",
                                    resource_name=f"aws-service-role/{AAS_SLR_SERVICE}/"
                                                  f"{AAS_SLR_NAME}")],
                                conditions={"StringLike": {"iam:AWSServiceName": AAS_SLR_SERVICE}}),
            iam.PolicyStatement(sid="PlanState", actions=["ssm:GetParameter", "ssm:PutParameter"],
                                resources=[stack.format_arn(
                                    service="ssm", resource="parameter",
                                    resource_name=f"{state_prefix.strip('/')}/*",
                                    arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME)]),
        ])
        policy.attach_to_role(self.role)
        for target in targets:
            if target.degradation_parameter is not None:
                target.degradation_parameter.grant_read(self.role)
                target.degradation_parameter.grant_write(self.role)
        region = "<AWS::Region>" if cdk.Token.is_unresolved(stack.region) else stack.region
        account = ("<AWS::AccountId>" if cdk.Token.is_unresolved(stack.account)
                   else stack.account)
        arn = f"arn:<AWS::Partition>:{{}}:{region}:{account}:{{}}"
        reasons = [
            ("Resource::*", ("GetMetricData, GetAccountSettings and the Application Auto Scaling "
                            "Describe* calls support no resource ARN (Service Authorization "
                            "Reference)")),
            (f"Resource::{arn.format('application-autoscaling', 'scalable-target/*')}",
             ("scalable-target ARNs carry a random id assigned at registration; the warmer "
             "registers the alias itself, so the ARN is unknown at deploy time")),
            (f"Resource::{arn.format('cloudwatch', 'alarm:TargetTracking-function:*')}",
             ("target-tracking alarms are created and named by Application Auto Scaling "
             "(TargetTracking-function:<fn>:<alias>-...), limited here to function targets")),
            (f"Resource::{arn.format('ssm', 'parameter/' + state_prefix.strip('/') + '/*')}",
             ("the last good plan is one SSM parameter per managed alias under the warmer's own "
             "prefix, named after the alias at run time")),
        ]
        for target in targets:
            reasons.append((f"Resource::{_arn_evidence(stack, target.function)}:*",
                            ("provisioned concurrency left directly on an old published version "
                            "of a managed function must be found and deleted; versions are "
                            "numbered at publish time")))
        for evidence, why in reasons:
            acknowledge(policy, f"AwsSolutions-IAM5[{evidence}]", why)


def target_for(agent: Any, options: Mapping[str, Any]) -> WarmerTarget:
    """The warmer target of one agent (an ``AgentFunction``): its alias, strategy, memory, bounds
    (its provisioned concurrency, else ``options`` ``floor``/``cap``), budget and level parameter."""
    cfg = agent.agent
    pc = cfg.provisioned_concurrency
    return WarmerTarget(
        function=agent.function, alias_name=agent.alias.alias_name, strategy=cfg.strategy,
        memory_mb=cfg.memory_mb,
        floor=pc.min if pc else int(options.get("floor", 0)),
        cap=pc.max if pc else int(options.get("cap", 10)),
        budget_usd_per_hour=float(options.get("budget_usd_per_hour", 1.0)),
        degradation_parameter=agent.degradation_parameter)


def _arn_evidence(stack: cdk.Stack, function: lambda_.IFunction) -> str:
    """How cdk-nag prints a function ARN in IAM5 evidence (``<LogicalId.Arn>`` or literal)."""
    child = function.node.default_child
    if isinstance(child, cdk.CfnResource):
        return f"<{stack.get_logical_id(child)}.Arn>"
    return function.function_arn


def _validate(targets: Sequence[WarmerTarget], actuator: str, state_prefix: str) -> None:
    if not targets:
        raise WarmerPropsError("Warmer needs at least one target (or config= and agents=)")
    if actuator not in ("autoscaling", "lambda"):
        raise WarmerPropsError(f"actuator must be 'autoscaling' or 'lambda', got {actuator!r}")
    if not state_prefix.startswith("/"):
        raise WarmerPropsError(f"state_prefix must start with '/', got {state_prefix!r}")
    for t in targets:
        if t.alias_name == "$LATEST":
            raise WarmerPropsError("a warmer target must be an alias, never $LATEST")
        if t.strategy not in ("provisioned", "snapstart", "ping", "none"):
            raise WarmerPropsError(f"unknown strategy {t.strategy!r}")
        if not 0 <= t.floor <= t.cap:
            raise WarmerPropsError(f"need 0 <= floor <= cap, got {t.floor}, {t.cap}")


def _alias_json(t: WarmerTarget) -> dict[str, Any]:
    out: dict[str, Any] = {
        "function_name": t.function.function_name, "alias": t.alias_name, "strategy": t.strategy,
        "memory_mb": t.memory_mb, "floor": t.floor, "cap": t.cap,
        "budget_usd_per_hour": t.budget_usd_per_hour,
    }
    if t.degradation_parameter is not None:
        out["degradation_parameter"] = t.degradation_parameter.parameter_name
    if t.available_concurrency is not None:
        out["available_concurrency"] = t.available_concurrency
    return out
