"""An agent's function on Lambda Managed Instances (strategy ``managed_instances``).

The capacity provider is created for the agent (``Agent-<name>/CapacityProvider``: the L2
``aws_lambda.CapacityProvider`` with the subnets and security groups of
``managed_instances``, the agent's architecture, the optional instance-type allow list and
``MaxVCpuCount``, and the operator role CDK makes with the AWS managed policy
``AWSLambdaManagedEC2ResourceOperator``), or taken by ARN (``capacity_provider_arn``: an
existing provider, whose networking and limits are its own). The function gets
``CapacityProviderConfig`` (the provider's ARN, ``PerExecutionEnvironmentMaxConcurrency`` when
given) and is not published to ``$LATEST.PUBLISHED``: the one version that runs is the one the
stack publishes (``function.current_version``, with the configured minimum and maximum execution
environments), and the alias ``live`` points at it. A ``$LATEST.PUBLISHED`` version would be
one more version on the provider, with instances of its own (LMI starts three execution
environments per published version by default), that nobody invokes.

*What a user must provide.* LMI instances run in *your* VPC: private subnets (1-16, ideally one
per Availability Zone, with a route to what the agent calls: a NAT gateway, or VPC endpoints
for CloudWatch Logs, SSM and the other AWS APIs the agent uses) and security groups (1-5, with
the egress the agent needs; nothing calls the instances inbound, invocations reach them through
Lambda). warmstart has no VPC of its own to default to, so the synth refuses a created provider
without them (`infra.config.ManagedInstancesDeployConfig`). The deploying principal needs
``lambda:PassCapacityProvider`` on the provider (the core concepts page).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-capacity-providers.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-core-concepts.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html
https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.config import AgentConfig, ManagedInstancesDeployConfig
from infra.constructs.layers import architecture_for
from infra.constructs.nag import acknowledge

#: Construct id of the capacity provider (created or imported) under ``Agent-<name>``.
CAPACITY_PROVIDER_ID = "CapacityProvider"
#: The AWS managed policy CDK gives the created provider's operator role.
OPERATOR_POLICY = "AWSLambdaManagedEC2ResourceOperator"


@dataclass(frozen=True)
class ManagedCapacity:
    """What an agent on LMI runs on.

    Attributes
    ----------
    provider : aws_lambda.ICapacityProvider
        The created ``aws_lambda.CapacityProvider`` or the imported one.
    created : bool
        True when this stack creates (and owns) the provider.
    settings : infra.config.ManagedInstancesDeployConfig
    """

    provider: lambda_.ICapacityProvider
    created: bool
    settings: ManagedInstancesDeployConfig

    @property
    def arn(self) -> str:
        """The provider's ARN (a token for a created one)."""
        return self.provider.capacity_provider_arn


def version_options(agent: AgentConfig) -> lambda_.VersionOptions | None:
    """The published version's ``FunctionScalingConfig`` (min/max execution environments) for
    an LMI agent; None for the other strategies (their version is exactly as before)."""
    lmi = agent.managed_instances
    if not agent.on_managed_instances or lmi is None:
        return None
    return lambda_.VersionOptions(min_execution_environments=lmi.min_execution_environments,
                                  max_execution_environments=lmi.maximum)


def put_on_capacity_provider(scope: Construct, *, function: lambda_.Function,
                             agent: AgentConfig) -> ManagedCapacity:
    """Create (or import) ``agent``'s capacity provider under ``scope`` and put ``function`` on it.

    Parameters
    ----------
    scope : Construct
        The agent's construct (``Agent-<name>``).
    function : aws_lambda.Function
        The agent's function, before its version is published.
    agent : infra.config.AgentConfig
        Strategy ``managed_instances``, with its ``managed_instances`` settings.

    Returns
    -------
    ManagedCapacity

    Raises
    ------
    ValueError
        ``agent`` is not of strategy ``managed_instances`` (the config refuses that earlier).
    """
    lmi = agent.managed_instances
    if not agent.on_managed_instances or lmi is None:
        raise ValueError(f"agent {agent.name}: strategy {agent.strategy!r} has no capacity provider")
    if lmi.capacity_provider_arn is not None:
        provider = lambda_.CapacityProvider.from_capacity_provider_arn(
            scope, CAPACITY_PROVIDER_ID, lmi.capacity_provider_arn)
        cfn = function.node.default_child
        cfn.capacity_provider_config = lambda_.CfnFunction.CapacityProviderConfigProperty(  # type: ignore[union-attr]
            lambda_managed_instances_capacity_provider_config=(
                lambda_.CfnFunction.LambdaManagedInstancesCapacityProviderConfigProperty(
                    capacity_provider_arn=lmi.capacity_provider_arn,
                    per_execution_environment_max_concurrency=(
                        lmi.per_execution_environment_max_concurrency))))
        cfn.publish_to_latest_published = False  # type: ignore[union-attr]
        return ManagedCapacity(provider=provider, created=False, settings=lmi)

    subnets = [ec2.Subnet.from_subnet_id(scope, f"Subnet{i}", subnet_id)
               for i, subnet_id in enumerate(lmi.subnet_ids)]
    groups = [ec2.SecurityGroup.from_security_group_id(scope, f"SecurityGroup{i}", group_id,
                                                       mutable=False)
              for i, group_id in enumerate(lmi.security_group_ids)]
    created = lambda_.CapacityProvider(
        scope, CAPACITY_PROVIDER_ID, subnets=subnets, security_groups=groups,
        architectures=[architecture_for(agent.architecture)],
        instance_type_filter=(lambda_.InstanceTypeFilter.allow(
            [ec2.InstanceType(t) for t in lmi.instance_types]) if lmi.instance_types else None),
        max_v_cpu_count=lmi.max_vcpu)
    created.add_function(
        function,
        per_execution_environment_max_concurrency=lmi.per_execution_environment_max_concurrency,
        publish_to_latest_published=False)
    return ManagedCapacity(provider=created, created=True, settings=lmi)


def acknowledge_operator_role(capacity: ManagedCapacity, agent: AgentConfig) -> None:
    """The created provider's operator role uses the AWS managed policy LMI documents for it."""
    if not capacity.created:
        return
    role = capacity.provider.node.try_find_child("OperatorRole")
    if role is None:
        return
    acknowledge(
        role, f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{OPERATOR_POLICY}]",
        f"agent {agent.name}: the capacity provider's operator role is what Lambda assumes to "
        "launch and terminate the Managed Instances in the given subnets; AWS documents the "
        "managed policy AWSLambdaManagedEC2ResourceOperator for it and keeps it current as the "
        "service's needs change (capacity providers page, Lambda managed policies page)")
