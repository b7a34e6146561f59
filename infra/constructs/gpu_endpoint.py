"""The overflow GPU endpoint: SageMaker Model + EndpointConfig (GPU instance) + Endpoint.

Optional by config (``warmstart.gpu_endpoint.enabled``; the stack creates this construct only
then). The container is ``functions/gpu_endpoint/Dockerfile`` (SageMaker contract: ``serve``,
port 8080, ``/ping``, ``/invocations``) with the model artifact baked in, built from the
repository by a Docker image asset at deploy time; or an existing image
(``gpu_endpoint.image_uri`` in config). ``connect(agent)`` grants ``sagemaker:InvokeEndpoint``
on this endpoint to the agent function only and sets ``WARMSTART_OVERFLOW_ENDPOINT_NAME``.

Config keys (``cdk.json`` ``warmstart.gpu_endpoint``): ``enabled``, ``instance_type`` (GPU
family required, e.g. ``ml.g6.xlarge``), ``model_asset`` (artifact directory baked into the
image), and in ``options``: ``image_uri``, ``initial_instance_count`` (default 1),
``variant_name`` (default ``AllTraffic``), ``endpoint_name`` (default ``<stack name>-<construct
id>``, e.g. ``Warmstart-GpuEndpoint``), ``capacity`` (the warmer's plan of the endpoint's
instances: ``floor``, ``cap``, ``budget_usd_per_hour``, ``concurrent_requests_per_instance``,
``environment_idle_min``, ``failed_answer_usd``; see ``warmers.planner.EndpointPolicy``).

**Planned capacity** (:meth:`GpuEndpoint.manage_capacity`, when the warmer is on): the variant
becomes a scalable target (``sagemaker:variant:DesiredInstanceCount``, 1 to ``cap``: a variant
cannot hold 0) that the warmer sets ahead of the forecast overflow, and an SSM parameter
``/warmstart/<stack name>/overflow-capacity`` carries what serves now to the connected agents
(``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``, read access for their roles only); it starts
``unknown`` (the agents degrade instead of overflowing) until the warmer's first run.

**Why the endpoint has a fixed name.** SageMaker writes the container's logs to the log group
``/aws/sagemaker/Endpoints/<endpoint name>``, which it creates with the execution role while the
endpoint starts. Naming the endpoint at synth lets that role write to its own log group only; a
generated name would be known only after the endpoint exists (and the role must work before).
CloudFormation cannot replace a resource with a fixed name: a change that needs a new endpoint
(rare: config changes are updates) needs a new ``endpoint_name``.

References
----------
https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints.html
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpointConfig.html
(KmsKeyId must not be set for instance types with local NVMe instance storage)
https://docs.aws.amazon.com/sagemaker/latest/dg/api-permissions-reference.html
https://docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html
(log group ``/aws/sagemaker/Endpoints/[EndpointName]``)
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpoint.html
(EndpointName pattern ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}``)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.config import GpuEndpointConfig
from infra.constructs.nag import acknowledge

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
DOCKERFILE: Final = "functions/gpu_endpoint/Dockerfile"
ENDPOINT_ENV: Final = "WARMSTART_OVERFLOW_ENDPOINT_NAME"
CAPACITY_ENV: Final = "WARMSTART_OVERFLOW_CAPACITY_PARAMETER"
#: Application Auto Scaling's dimension of a production variant's instance count.
VARIANT_DIMENSION: Final = "sagemaker:variant:DesiredInstanceCount"
#: What the agents read before the warmer's first run: unknown, so they degrade.
INITIAL_CAPACITY: Final = '{"capacity":0,"state":"unknown","at":null}'
#: SageMaker endpoint names (CreateEndpoint API reference).
ENDPOINT_NAME: Final = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
#: Where SageMaker writes an endpoint's container logs.
LOG_GROUP_PREFIX: Final = "/aws/sagemaker/Endpoints/"

#: SageMaker GPU instance families (NVIDIA). ``True``: local NVMe instance storage, where
#: SageMaker rejects a KmsKeyId on the endpoint config (its volume is the instance store).
GPU_FAMILIES: Final[dict[str, bool]] = {
    "g4dn": True, "g5": True, "g6": True, "g6e": True, "gr6": True,
    "p3": False, "p3dn": True, "p4d": True, "p4de": True, "p5": True, "p5e": True, "p5en": True,
}

#: Docker build context: the repository minus everything the image does not need.
CONTEXT_EXCLUDES: Final = (
    ".git", ".venv", ".venv-*", "node_modules", "cdk.out", ".cache", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", "tests", "bench", "infra", "warmers", "layers/web",
    "layers/inference", "layers/forecast", "*.egg-info", "**/__pycache__", "**/*.pyc",
    "build", "dist", "out",
)


class GpuEndpointConfigError(ValueError):
    """The ``gpu_endpoint`` config cannot make a GPU endpoint."""


def default_endpoint_name(stack_name: str, construct_id: str) -> str:
    """``<stack name>-<construct id>`` as a SageMaker endpoint name (other characters become
    ``-``, at most 63 characters): ``"Warmstart", "GpuEndpoint"`` -> ``"Warmstart-GpuEndpoint"``."""
    name = re.sub(r"[^a-zA-Z0-9]+", "-", f"{stack_name}-{construct_id}").strip("-")[:63]
    return name.rstrip("-")


def instance_family(instance_type: str) -> str:
    """``"ml.g6.xlarge"`` -> ``"g6"``.

    Raises
    ------
    GpuEndpointConfigError
        Not of the form ``ml.<family>.<size>``.
    """
    parts = instance_type.split(".")
    if len(parts) != 3 or parts[0] != "ml" or not parts[1] or not parts[2]:
        raise GpuEndpointConfigError(
            f"gpu_endpoint.instance_type {instance_type!r} is not a SageMaker instance type "
            "(expected ml.<family>.<size>, e.g. ml.g6.xlarge)"
        )
    return parts[1]


def validate_config(config: GpuEndpointConfig) -> None:
    """Refuse configs that cannot make a GPU endpoint (exact messages, tested).

    Raises
    ------
    GpuEndpointConfigError
        Non-GPU or malformed instance type, bad instance count, no image source.
    """
    family = instance_family(config.instance_type)
    if family not in GPU_FAMILIES:
        raise GpuEndpointConfigError(
            f"gpu_endpoint.instance_type {config.instance_type!r} is not a GPU instance type; "
            f"use one of the families {', '.join(sorted(GPU_FAMILIES))} (e.g. ml.g6.xlarge)"
        )
    count = config.options.get("initial_instance_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise GpuEndpointConfigError(
            f"gpu_endpoint.initial_instance_count must be an integer >= 1, got {count!r}"
        )
    name = config.options.get("endpoint_name")
    if name is not None and not (isinstance(name, str) and ENDPOINT_NAME.fullmatch(name)):
        raise GpuEndpointConfigError(
            f"gpu_endpoint.endpoint_name {name!r} is not a SageMaker endpoint name: letters, "
            "digits and '-', starting and ending with a letter or digit, at most 63 characters"
        )
    image_uri = config.options.get("image_uri")
    if image_uri is None and not config.model_asset:
        raise GpuEndpointConfigError(
            "gpu_endpoint needs model_asset (a model directory to bake into the image) "
            "or options.image_uri (a prebuilt image)"
        )


class GpuEndpoint(Construct):
    """SageMaker real-time endpoint serving the agent's model for overflow.

    Parameters
    ----------
    scope, construct_id
    config : infra.config.GpuEndpointConfig
    repo_root : Path
        Docker build context root (default: this repository).

    Attributes
    ----------
    role : iam.Role
        The SageMaker execution role.
    model : sagemaker.CfnModel
    endpoint_config : sagemaker.CfnEndpointConfig
    endpoint : sagemaker.CfnEndpoint
    image_asset : ecr_assets.DockerImageAsset or None
    endpoint_name : str
        Token for the endpoint's name.
    endpoint_arn : str
        Token for the endpoint's ARN.
    name : str
        The endpoint's name, known at synth (``options.endpoint_name`` or the default).
    log_group_name : str
        ``/aws/sagemaker/Endpoints/<name>``: the only log group the execution role may write.

    Raises
    ------
    GpuEndpointConfigError
        See `validate_config`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: GpuEndpointConfig,
        repo_root: Path = REPO_ROOT,
    ) -> None:
        validate_config(config)
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        family = instance_family(config.instance_type)
        variant = str(config.options.get("variant_name", "AllTraffic"))
        self.name: str = str(config.options.get("endpoint_name")
                             or default_endpoint_name(stack.stack_name, construct_id))
        if not ENDPOINT_NAME.fullmatch(self.name):
            raise GpuEndpointConfigError(
                f"the GPU endpoint's default name {self.name!r} is not a SageMaker endpoint name; "
                "set gpu_endpoint.endpoint_name")
        self.log_group_name: str = LOG_GROUP_PREFIX + self.name

        self.role = iam.Role(
            self, "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="warmstart GPU endpoint: pull its image, write its logs and metrics",
        )
        log_group_arn = stack.format_arn(service="logs", resource="log-group",
                                         resource_name=self.log_group_name,
                                         arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
                     "logs:DescribeLogStreams"],
            # this endpoint's log group, and its log streams (log-group:<name>:log-stream:<s>)
            resources=[log_group_arn, f"{log_group_arn}:*"],
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}},
        ))

        image_uri = config.options.get("image_uri")
        self.image_asset: ecr_assets.DockerImageAsset | None = None
        if image_uri is None:
            self.image_asset = ecr_assets.DockerImageAsset(
                self, "Image",
                directory=str(repo_root),
                file=DOCKERFILE,
                build_args={"MODEL_ASSET": config.model_asset},
                exclude=list(CONTEXT_EXCLUDES),
                ignore_mode=cdk.IgnoreMode.DOCKER,
                platform=ecr_assets.Platform.LINUX_AMD64,
            )
            self.image_asset.repository.grant_pull(self.role)
            image_uri = self.image_asset.image_uri

        self.model = sagemaker.CfnModel(
            self, "Model",
            execution_role_arn=self.role.role_arn,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=str(image_uri),
                mode="SingleModel",
                environment={"WARMSTART_MODEL_DIR": "/opt/model", "ORT_DISABLE_TELEMETRY": "1"},
            ),
        )
        # The model must not be created before the role's policy is attached (SageMaker pulls
        # the image with it); the role itself is a dependency through GetAtt (cfn-lint W3005).
        self.model.node.add_dependency(self.role.node.find_child("DefaultPolicy"))

        self.kms_key: kms.Key | None = None
        kms_key_id = None
        if not GPU_FAMILIES[family]:
            self.kms_key = kms.Key(self, "VolumeKey", enable_key_rotation=True,
                                   description="warmstart GPU endpoint storage volume")
            kms_key_id = self.kms_key.key_arn
        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self, "EndpointConfig",
            kms_key_id=kms_key_id,
            production_variants=[sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=variant,
                model_name=self.model.attr_model_name,
                initial_instance_count=int(config.options.get("initial_instance_count", 1)),
                instance_type=config.instance_type,
                initial_variant_weight=1.0,
            )],
        )
        self.endpoint = sagemaker.CfnEndpoint(
            self, "Endpoint", endpoint_name=self.name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
        )
        self.endpoint_name: str = self.endpoint.attr_endpoint_name
        self.endpoint_arn: str = self.endpoint.ref  # Ref of AWS::SageMaker::Endpoint is its ARN
        self.endpoint_config_arn: str = self.endpoint_config.ref  # its ARN too
        self.variant_name: str = variant
        #: Application Auto Scaling's id of the variant
        self.resource_id: str = f"endpoint/{self.name}/variant/{variant}"
        self.instance_type: str = config.instance_type
        self.capacity_options: Mapping[str, Any] = dict(config.options.get("capacity") or {})
        self.scalable_target: appscaling.CfnScalableTarget | None = None
        self.capacity_parameter: ssm.StringParameter | None = None

        for evidence, why in (
            (("Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:"
              f"{self.log_group_name}:*"),
             ("the log streams of this endpoint's own log group: SageMaker names them per "
              "instance and container at run time")),
            ("Resource::*",
             ("ecr:GetAuthorizationToken and cloudwatch:PutMetricData support no resource ARN; "
              "PutMetricData is limited to the SageMaker endpoint namespace by a condition")),
        ):
            acknowledge(self.role, f"AwsSolutions-IAM5[{evidence}]", why)
        acknowledge(self.model, "AwsSolutions-SM1",
                    "The endpoint serves a public embedding model, reads no data store and has "
                    "no VPC resources to reach; a VPC would only add NAT/endpoint cost")
        if GPU_FAMILIES[family]:
            acknowledge(self.endpoint_config, "AwsSolutions-SM2",
                        f"{config.instance_type} has local NVMe instance storage, for which "
                        "SageMaker rejects a KmsKeyId (CreateEndpointConfig API reference); the "
                        "instance store is encrypted at rest by the hardware")

    def manage_capacity(self) -> ssm.StringParameter:
        """Make the variant a scalable target (1 to ``capacity.cap`` instances, default 2) and
        create the capacity parameter the warmer writes and the connected agents read.

        Call it before :meth:`connect` (agents connected afterwards read the parameter). The
        warmer sets Min/MaxCapacity within these bounds; CloudFormation owns the target, so
        deleting the stack deregisters it.

        References
        ----------
        https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-policy.html
        (min-capacity at least 1 for a variant)
        """
        if self.capacity_parameter is not None:
            return self.capacity_parameter
        stack = cdk.Stack.of(self)
        cap = self.capacity_options.get("cap", 2)
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise GpuEndpointConfigError(
                f"gpu_endpoint.capacity.cap must be an integer >= 1 (a variant holds at least 1 "
                f"instance), got {cap!r}")
        self.scalable_target = appscaling.CfnScalableTarget(
            self, "ScalableTarget", service_namespace="sagemaker",
            resource_id=self.resource_id, scalable_dimension=VARIANT_DIMENSION,
            min_capacity=1, max_capacity=cap)
        self.scalable_target.add_dependency(self.endpoint)
        self.capacity_parameter = ssm.StringParameter(
            self, "CapacityParameter", string_value=INITIAL_CAPACITY,
            parameter_name=f"/warmstart/{stack.stack_name}/overflow-capacity",
            description="warmstart: the GPU endpoint's capacity the warmer plans (JSON)")
        return self.capacity_parameter

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow ``grantee`` ``sagemaker:InvokeEndpoint`` on this endpoint only."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["sagemaker:InvokeEndpoint"],
            resource_arns=[self.endpoint_arn],
        )

    def connect(self, agent: Any) -> iam.Grant:
        """Wire the agent function to this endpoint.

        Parameters
        ----------
        agent : AgentFunction or aws_lambda.Function
            The agent (its ``function`` attribute is used when present).

        Returns
        -------
        iam.Grant
            The invoke grant (to the agent function's role only).
        """
        function = getattr(agent, "function", agent)
        if not isinstance(function, lambda_.Function):
            raise TypeError(f"connect needs the agent's lambda Function, got {type(function).__name__}")
        function.add_environment(ENDPOINT_ENV, self.endpoint_name)
        if self.capacity_parameter is not None:
            function.add_environment(CAPACITY_ENV, self.capacity_parameter.parameter_name)
            self.capacity_parameter.grant_read(function)
        return self.grant_invoke(function)
