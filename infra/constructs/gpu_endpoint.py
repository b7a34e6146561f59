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
``environment_idle_min``, ``failed_answer_usd``, ``spend_guard_window_min``,
``spend_guard_usd``; see ``warmers.plan.endpoint.EndpointPolicy``), and
``target`` (``variant``, the default, or ``inference_component``: below).

**Target ``inference_component``** (opt-in: scale to zero). The endpoint config names no model:
its one production variant has ``ManagedInstanceScaling`` (``ENABLED``, ``MinInstanceCount`` 0,
``MaxInstanceCount`` ``max_instance_count``, default ``capacity.cap``), ``RoutingConfig``
``LEAST_OUTSTANDING_REQUESTS`` and ``InitialInstanceCount`` ``initial_instance_count`` (default 1;
CreateEndpointConfig needs at least 1 instance to create the endpoint, managed instance scaling
removes it once no copy runs), and the config carries ``ExecutionRoleArn`` (the model's role).
An ``AWS::SageMaker::InferenceComponent`` (``inference_component_name``, default ``<endpoint
name>-model``) runs the model on that variant, each copy with ``accelerators_per_copy`` GPUs
(default 1) and ``memory_per_copy_mb`` of host memory (default 4096: a quarter of the 16 GiB
of the smallest GPU instances here, ``ml.g4dn|g5|g6.xlarge``, far above the model server with
its 24 MB ONNX model, and small enough that SageMaker's agents keep the rest). It starts with
``max(capacity.floor, 1)`` copies: CreateInferenceComponent accepts 0, but one copy makes
CloudFormation's create wait until the container answers, so a broken image fails the deploy
instead of the first overflow; the warmer sets the planned count (0 allowed) at its first run.
The planner counts one copy per instance (``warmers.plan.endpoint.EndpointPolicy``). The agents
invoke with ``InferenceComponentName`` (``WARMSTART_OVERFLOW_INFERENCE_COMPONENT``) and the
warmer scales ``sagemaker:inference-component:DesiredCopyCount`` from 0 to ``capacity.cap``.

**Planned capacity** (:meth:`GpuEndpoint.manage_capacity`, when the warmer is on): the variant
becomes a scalable target (``sagemaker:variant:DesiredInstanceCount``, 1 to ``cap``: a variant
cannot hold 0; an inference component's ``DesiredCopyCount``, 0 to ``cap``) that the warmer sets ahead of the forecast overflow, and an SSM parameter
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
Inference components and scale to zero:
https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html
(the endpoint hosts inference components, ``MinInstanceCount`` 0, the component a scalable target
with min capacity 0)
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariantManagedInstanceScaling.html
(``MinInstanceCount`` >= 0, ``MaxInstanceCount`` >= 1)
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateInferenceComponent.html
(InferenceComponentName pattern ``^[a-zA-Z0-9]([\\-a-zA-Z0-9]*[a-zA-Z0-9])?$``, at most 63)
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentRuntimeConfig.html
(``CopyCount`` >= 0)
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentComputeResourceRequirements.html
(``MinMemoryRequiredInMb`` >= 128, ``NumberOfAcceleratorDevicesRequired`` >= 1)
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-sagemaker-inferencecomponent.html
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

from functions.runtime.contract import environment as names
from functions.runtime.contract.warmer_document import (
    ENDPOINT_TARGETS,
    endpoint_resource_id,
    endpoint_scalable_dimension,
)
from infra.config import GpuEndpointConfig
from infra.constructs.nag import acknowledge

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
DOCKERFILE: Final = "functions/gpu_endpoint/Dockerfile"
#: What the endpoint's capacity is counted in (``gpu_endpoint.target``; the warmer document's).
TARGETS: Final = ENDPOINT_TARGETS
#: Options that only ``target: inference_component`` reads.
INFERENCE_COMPONENT_OPTIONS: Final = ("inference_component_name", "accelerators_per_copy",
                                      "memory_per_copy_mb", "max_instance_count")
#: Host memory per copy (module docstring: a quarter of a 16 GiB ``xlarge`` GPU instance).
DEFAULT_MEMORY_PER_COPY_MB: Final = 4096
#: What the agents read before the warmer's first run: unknown, so they degrade.
INITIAL_CAPACITY: Final = '{"capacity":0,"state":"unknown","at":null}'
#: SageMaker endpoint names (CreateEndpoint API reference).
ENDPOINT_NAME: Final = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
#: SageMaker inference component names (CreateInferenceComponent API reference; at most 63).
INFERENCE_COMPONENT_NAME: Final = re.compile(r"[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?")
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


def _integer(options: Mapping[str, Any], key: str, default: int | None,
             minimum: int) -> int | None:
    """``options[key]`` (else ``default``) as an integer >= ``minimum``.

    Raises
    ------
    GpuEndpointConfigError
        ``gpu_endpoint.<key> must be an integer >= <minimum>, got <value>``.
    """
    value = options.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GpuEndpointConfigError(
            f"gpu_endpoint.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def inference_component_name_error(name: object) -> str | None:
    """Why ``name`` is not a SageMaker inference component name, or None when it is one."""
    if isinstance(name, str) and len(name) <= 63 and INFERENCE_COMPONENT_NAME.fullmatch(name):
        return None
    return (f"{name!r} is not a SageMaker inference component name: letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters")


def validate_config(config: GpuEndpointConfig) -> None:
    """Refuse configs that cannot make a GPU endpoint (exact messages, tested).

    Raises
    ------
    GpuEndpointConfigError
        Non-GPU or malformed instance type, bad instance count, no image source; an unknown
        ``target``; with ``target: inference_component`` a bad ``inference_component_name``,
        ``accelerators_per_copy`` (integer >= 1), ``memory_per_copy_mb`` (integer >= 128, the
        API's minimum), ``max_instance_count`` (integer >= 1, at least
        ``initial_instance_count``); those four options with ``target: variant``.
    """
    family = instance_family(config.instance_type)
    if family not in GPU_FAMILIES:
        raise GpuEndpointConfigError(
            f"gpu_endpoint.instance_type {config.instance_type!r} is not a GPU instance type; "
            f"use one of the families {', '.join(sorted(GPU_FAMILIES))} (e.g. ml.g6.xlarge)"
        )
    options = config.options
    count = _integer(options, "initial_instance_count", 1, 1)
    target = options.get("target", "variant")
    if target not in TARGETS:
        raise GpuEndpointConfigError(
            f"gpu_endpoint.target must be 'variant' or 'inference_component', got {target!r}")
    if target == "variant":
        stray = [key for key in INFERENCE_COMPONENT_OPTIONS if key in options]
        if stray:
            raise GpuEndpointConfigError(
                f"gpu_endpoint.{stray[0]} applies only to target 'inference_component' "
                "(set gpu_endpoint.target, or remove it)")
    else:
        ic_name = options.get("inference_component_name")
        if ic_name is not None and (why := inference_component_name_error(ic_name)):
            raise GpuEndpointConfigError(f"gpu_endpoint.inference_component_name {why}")
        _integer(options, "accelerators_per_copy", 1, 1)
        _integer(options, "memory_per_copy_mb", DEFAULT_MEMORY_PER_COPY_MB, 128)
        most = _integer(options, "max_instance_count", None, 1)
        if most is not None and count is not None and most < count:
            raise GpuEndpointConfigError(
                f"gpu_endpoint.max_instance_count {most} is below initial_instance_count "
                f"{count}")
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
    target : {"variant", "inference_component"}
        What the warmer scales (``gpu_endpoint.target``).
    inference_component : sagemaker.CfnInferenceComponent or None
        With ``target`` ``inference_component``: the model on the endpoint.
    inference_component_name : str or None
        Known at synth (``inference_component_name`` or ``<endpoint name>-model``).
    inference_component_arn : str or None
        Token for its ARN.
    resource_id, scalable_dimension : str
        Application Auto Scaling's id and dimension of what the warmer scales
        (``endpoint/<name>/variant/<variant>`` or ``inference-component/<name>``).
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
        self.target: str = str(config.options.get("target", "variant"))
        self.capacity_options: Mapping[str, Any] = dict(config.options.get("capacity") or {})
        components = self.target == "inference_component"
        self.inference_component_name: str | None = None
        if components:
            self.inference_component_name = str(config.options.get("inference_component_name")
                                                or f"{self.name}-model")
            if why := inference_component_name_error(self.inference_component_name):
                raise GpuEndpointConfigError(
                    f"the GPU endpoint's default inference component name {why}; set "
                    "gpu_endpoint.inference_component_name")

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
                environment={names.ENV_MODEL_DIR: "/opt/model", "ORT_DISABLE_TELEMETRY": "1"},
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
        initial_instances = int(config.options.get("initial_instance_count", 1))
        if components:
            # no model on the variant: inference components run on it, and managed instance
            # scaling sizes its instances to their copies, down to 0 (module docstring)
            production_variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=variant,
                initial_instance_count=initial_instances,
                instance_type=config.instance_type,
                initial_variant_weight=1.0,
                managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
                    status="ENABLED", min_instance_count=0,
                    max_instance_count=int(config.options.get("max_instance_count")
                                           or self._cap())),
                routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(
                    routing_strategy="LEAST_OUTSTANDING_REQUESTS"),
            )
        else:
            production_variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=variant,
                model_name=self.model.attr_model_name,
                initial_instance_count=initial_instances,
                instance_type=config.instance_type,
                initial_variant_weight=1.0,
            )
        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self, "EndpointConfig",
            kms_key_id=kms_key_id,
            execution_role_arn=self.role.role_arn if components else None,
            production_variants=[production_variant],
        )
        if components:  # SageMaker acts with the role from the endpoint's creation on
            self.endpoint_config.node.add_dependency(self.role.node.find_child("DefaultPolicy"))
        self.endpoint = sagemaker.CfnEndpoint(
            self, "Endpoint", endpoint_name=self.name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
        )
        self.inference_component: sagemaker.CfnInferenceComponent | None = None
        self.inference_component_arn: str | None = None
        if components:
            floor = self.capacity_options.get("floor", 0)
            self.inference_component = sagemaker.CfnInferenceComponent(
                self, "InferenceComponent",
                endpoint_name=self.endpoint.attr_endpoint_name,  # GetAtt: after the endpoint
                inference_component_name=self.inference_component_name,
                variant_name=variant,
                specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                    model_name=self.model.attr_model_name,
                    compute_resource_requirements=(
                        sagemaker.CfnInferenceComponent
                        .InferenceComponentComputeResourceRequirementsProperty(
                            number_of_accelerator_devices_required=int(
                                config.options.get("accelerators_per_copy", 1)),
                            min_memory_required_in_mb=int(config.options.get(
                                "memory_per_copy_mb", DEFAULT_MEMORY_PER_COPY_MB))))),
                # at least one copy at create (module docstring); the warmer plans from then on
                runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                    copy_count=max(int(floor) if isinstance(floor, int) else 0, 1)),
            )
            self.inference_component_arn = self.inference_component.attr_inference_component_arn
        self.endpoint_name: str = self.endpoint.attr_endpoint_name
        self.endpoint_arn: str = self.endpoint.ref  # Ref of AWS::SageMaker::Endpoint is its ARN
        self.endpoint_config_arn: str = self.endpoint_config.ref  # its ARN too
        self.variant_name: str = variant
        # Application Auto Scaling's id and dimension of what is scaled (the contract's rules,
        # which the warmer calls)
        self.resource_id: str = endpoint_resource_id(
            self.target, endpoint_name=self.name, variant_name=variant,
            inference_component=self.inference_component_name)
        self.scalable_dimension: str = endpoint_scalable_dimension(self.target)
        self.instance_type: str = config.instance_type
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

    def _cap(self) -> int:
        """``capacity.cap`` (default 2, as ``warmers.plan.endpoint.EndpointPolicy``).

        Raises
        ------
        GpuEndpointConfigError
            Not an integer >= 1.
        """
        cap = self.capacity_options.get("cap", 2)
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            holds = ("the warmer plans at most cap copies" if self.target == "inference_component"
                     else "a variant holds at least 1 instance")
            raise GpuEndpointConfigError(
                f"gpu_endpoint.capacity.cap must be an integer >= 1 ({holds}), got {cap!r}")
        return cap

    def manage_capacity(self) -> ssm.StringParameter:
        """Make the variant a scalable target (1 to ``capacity.cap`` instances, default 2), or
        with ``target`` ``inference_component`` the inference component (0 to ``capacity.cap``
        copies), and create the capacity parameter the warmer writes and the connected agents
        read.

        Call it before :meth:`connect` (agents connected afterwards read the parameter). The
        warmer sets Min/MaxCapacity within these bounds; CloudFormation owns the target, so
        deleting the stack deregisters it.

        References
        ----------
        https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-policy.html
        (min-capacity at least 1 for a variant)
        https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html
        (``inference-component/<name>``, ``sagemaker:inference-component:DesiredCopyCount``,
        min-capacity 0)
        """
        if self.capacity_parameter is not None:
            return self.capacity_parameter
        stack = cdk.Stack.of(self)
        cap = self._cap()
        self.scalable_target = appscaling.CfnScalableTarget(
            self, "ScalableTarget", service_namespace="sagemaker",
            resource_id=self.resource_id, scalable_dimension=self.scalable_dimension,
            min_capacity=0 if self.inference_component is not None else 1, max_capacity=cap)
        self.scalable_target.add_dependency(self.inference_component or self.endpoint)
        self.capacity_parameter = ssm.StringParameter(
            self, "CapacityParameter", string_value=INITIAL_CAPACITY,
            parameter_name=f"/warmstart/{stack.stack_name}/overflow-capacity",
            description="warmstart: the GPU endpoint's capacity the warmer plans (JSON)")
        return self.capacity_parameter

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow ``grantee`` ``sagemaker:InvokeEndpoint`` on this endpoint only (and its
        inference component: the call names it in ``InferenceComponentName``, and the grant
        holds whether IAM evaluates the endpoint's ARN alone or the component's too)."""
        arns = [self.endpoint_arn]
        if self.inference_component_arn is not None:
            arns.append(self.inference_component_arn)
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["sagemaker:InvokeEndpoint"], resource_arns=arns)

    def connect(self, agent: Any) -> iam.Grant:
        """Wire the agent function to this endpoint: ``WARMSTART_OVERFLOW_ENDPOINT_NAME``, with an
        inference component ``WARMSTART_OVERFLOW_INFERENCE_COMPONENT``, with managed capacity
        ``WARMSTART_OVERFLOW_CAPACITY_PARAMETER`` (and read access to it).

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
        function.add_environment(names.ENV_OVERFLOW_ENDPOINT_NAME, self.endpoint_name)
        if self.inference_component_name is not None:  # InvokeEndpoint's InferenceComponentName
            function.add_environment(names.ENV_OVERFLOW_INFERENCE_COMPONENT, self.inference_component_name)
        if self.capacity_parameter is not None:
            function.add_environment(names.ENV_OVERFLOW_CAPACITY_PARAMETER, self.capacity_parameter.parameter_name)
            self.capacity_parameter.grant_read(function)
        return self.grant_invoke(function)
