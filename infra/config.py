"""Typed deploy-time configuration, read from the ``warmstart`` key of ``cdk.json``'s context.

The CDK app (``infra/app.py``), the local stack and the warmer tooling all read the same
``cdk.json``; this module turns its ``warmstart`` context dict into frozen dataclasses and refuses
combinations AWS Lambda would refuse at deploy time, with a message that says what is wrong and
what to do. It imports only the standard library and ``warmers.pricing`` (itself stdlib only; no
``aws_cdk``), so it is cheap to use outside a synth.

**Agents.** ``warmstart.agents`` maps an agent name to its function: handler, code folders,
external path prefix, layers, memory, timeout, architecture, runtime, warm strategy,
provisioned-concurrency bounds, SLA, overflow, environment, log retention and reserved concurrency
(see :data:`AGENT_DEFAULTS` for what may be left out). Each agent becomes its own Lambda function
with an alias ``live`` behind one HTTP API. The old single ``warmstart.agent`` key still works: it
is read as one agent named ``agent`` at prefix ``/`` with the three layers ``web``, ``inference``,
``model`` and code ``functions`` (the whole package), and :attr:`WarmstartConfig.warnings` says
how to move it under ``agents``.

Prices are not written here or in ``cdk.json``: they live once, in the shared table
``warmers/prices.json`` (:mod:`warmers.pricing`). ``warmstart.pricing`` is optional; its
``items`` may override single items of that table (each with ``usd`` and its own ``source``),
and its ``region``/``currency``, when given, must match the table's.

**Streaming agents.** An agent whose declaration (its ``Agent`` in the handler module) has a
route with ``stream=True`` gets a function URL on its alias ``live`` (``InvokeMode:
RESPONSE_STREAM``, ``AuthType: AWS_IAM``); the stack reads the declaration at synth and checks
the agent with :func:`check_streaming_agent`. ``function_url_principals`` (optional, default:
this account) names who may invoke those URLs (:func:`function_url_principals`).

**Security options.** ``http_api.authorization`` (``none``, the public default; ``iam``; or a
JWT authorizer, :class:`JwtAuthorizerConfig`), ``logs.kms_key`` (a customer-managed key for the
log groups, :class:`LogsConfig`), per-agent ``reserved_concurrency``, checked against
``account_concurrency_limit`` (default 1000) minus the 100 Lambda keeps unreserved.

Keys that start with ``_`` are documentation and are ignored. Any other unknown key is an error
(a typo such as ``memroy_mb`` must not silently fall back to a default), except inside
``warmer`` and ``gpu_endpoint``, whose extra keys are kept in ``options`` for the constructs
that later issues add.

Example
-------
>>> cfg = load_config(Path("cdk.json"), strategy="provisioned")
>>> cfg.agent("intent").provisioned_concurrency.max
10

References
----------
Lambda limits: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
SnapStart limits: https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html
Reserved environment variables:
https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, Final, Literal

from functions.runtime.contract import ContractError
from functions.runtime.contract import environment as names
from functions.runtime.contract.warmer_document import ALIAS_STRATEGIES as STRATEGIES
from functions.runtime.contract.warmer_document import ARCHITECTURES, Architecture
from functions.runtime.contract.warmer_document import AliasStrategy as Strategy
from functions.runtime.streaming import MAX_BUFFERED_RESPONSE_BYTES, MAX_STREAMED_RESPONSE_BYTES
from warmers.pricing import PRICES_ORIGIN, Price, PriceTable, PriceTableError, load_prices

#: Context key in ``cdk.json`` that holds the whole configuration.
CONTEXT_KEY: Final = "warmstart"
#: Context key that selects a named variant, e.g. ``cdk synth -c warmstart:strategy=provisioned``.
STRATEGY_CONTEXT_KEY: Final = "warmstart:strategy"
#: Repository root and its ``layers/`` folder (one sub-folder per dependency layer).
REPO_ROOT: Final = Path(__file__).resolve().parents[1]
LAYERS_DIR: Final = REPO_ROOT / "layers"
#: The layer that ships ``layers/model/artifact`` (mounted at ``/opt/model``); it has no
#: ``requirements.txt``, so it is known by name.
MODEL_LAYER: Final = "model"

Overflow = Literal["gpu"]
OVERFLOWS: Final[tuple[Overflow, ...]] = ("gpu",)
#: Python runtimes Lambda still accepts for new functions (python3.9 is deprecated).
RUNTIMES: Final = ("python3.10", "python3.11", "python3.12", "python3.13", "python3.14")
#: SnapStart supports Python 3.12 and newer.
SNAPSTART_MIN_PYTHON: Final = (3, 12)

LAMBDA_LIMITS_URL: Final = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
SNAPSTART_URL: Final = "https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html"
RESERVED_ENV_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime"
)
LAMBDA_CONCURRENCY_URL: Final = "https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html"
PROVISIONED_CONCURRENCY_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html")
JWT_AUTHORIZER_URL: Final = (
    "https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html")
#: Lambda Managed Instances (strategy ``managed_instances``): the runtimes page (Python 3.13 and
#: later), the capacity providers page (VPC subnets and security groups), the scaling page (at
#: least 1 vCPU and 2 GB per function; three execution environments by default, for AZ
#: resiliency), and the API limits of ``CapacityProviderVpcConfig`` (1-16 subnets, at most 5
#: security groups), ``CapacityProviderScalingConfig`` (``MaxVCpuCount`` 2-15000) and
#: ``FunctionScalingConfig`` (``Min``/``MaxExecutionEnvironments`` 0-15000).
LMI_RUNTIMES_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-runtimes.html")
LMI_CAPACITY_PROVIDERS_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-capacity-providers.html")
LMI_SCALING_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html")
LMI_PYTHON_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html")
LMI_VPC_CONFIG_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/api/API_CapacityProviderVpcConfig.html")
LMI_FUNCTION_SCALING_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html")
LMI_PROVIDER_SCALING_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/api/API_CapacityProviderScalingConfig.html")
#: LMI supports Python 3.13 and later (:data:`LMI_RUNTIMES_URL`).
LMI_MIN_PYTHON: Final = (3, 13)
#: An LMI function has at least 1 vCPU and 2 GB (:data:`LMI_SCALING_URL`).
LMI_MIN_MEMORY_MB: Final = 2048
#: ``ExecutionEnvironmentMemoryGiBPerVCpu`` left at its default: 2 GiB per vCPU
#: (``aws_lambda.CapacityProviderFunctionOptions``), so an environment takes memory_mb / 2048 vCPUs.
LMI_MEMORY_MB_PER_VCPU: Final = 2048
#: ``FunctionScalingConfig``: 0..15000 each (:data:`LMI_FUNCTION_SCALING_URL`); AWS's default
#: minimum is 3 (:data:`LMI_SCALING_URL`). The maximum warmstart uses when none is given (the
#: warmer's default ``cap``), or the minimum when that is higher.
LMI_EXECUTION_ENVIRONMENTS_LIMIT: Final = 15_000
LMI_DEFAULT_MIN_EXECUTION_ENVIRONMENTS: Final = 3
LMI_DEFAULT_MAX_EXECUTION_ENVIRONMENTS: Final = 10
#: ``CapacityProviderVpcConfig``: 1-16 subnets, up to 5 security groups (:data:`LMI_VPC_CONFIG_URL`).
LMI_SUBNETS_LIMITS: Final = (1, 16)
LMI_SECURITY_GROUPS_LIMITS: Final = (1, 5)
#: ``MaxVCpuCount`` 2..15000 (:data:`LMI_PROVIDER_SCALING_URL`).
LMI_MAX_VCPU_LIMITS: Final = (2, 15_000)
#: ``PerExecutionEnvironmentMaxConcurrency``: Python's default is 16 per vCPU
#: (:data:`LMI_PYTHON_URL`); 1..1600 (:data:`LMI_FUNCTION_CONFIG_URL`, also what the warmer's
#: ``warmers.lmi.LmiSettings`` accepts). The capacity provider ARN's pattern is from there too.
LMI_FUNCTION_CONFIG_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/api/"
    "API_LambdaManagedInstancesCapacityProviderConfig.html")
LMI_MAX_CONCURRENCY_LIMITS: Final = (1, 1600)
_CAPACITY_PROVIDER_ARN: Final = re.compile(
    r"arn:aws(-[a-z]+)*:lambda:[a-z]{2}(-[a-z]+)+-\d:\d{12}:capacity-provider:[A-Za-z0-9_-]+")
_SUBNET_ID: Final = re.compile(r"subnet-[0-9a-f]{8,17}")
_SECURITY_GROUP_ID: Final = re.compile(r"sg-[0-9a-f]{8,17}")
_INSTANCE_TYPE: Final = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
#: Lambda's default concurrency limit per account and region, and the unreserved concurrency it
#: always keeps for functions without a reservation (the rows "Default account concurrency" and
#: "Unreserved concurrency minimum" of tests/data/pricing.md; :data:`LAMBDA_CONCURRENCY_URL`).
DEFAULT_ACCOUNT_CONCURRENCY: Final = 1000
UNRESERVED_CONCURRENCY_MINIMUM: Final = 100
MEMORY_LIMITS_MB: Final = (128, 10240)
TIMEOUT_LIMITS_S: Final = (1, 900)

#: Response streaming (function URLs with ``InvokeMode: RESPONSE_STREAM``): a stream lasts at
#: most the function's timeout, whose maximum is 900 s (15 min); up to
#: :data:`~functions.runtime.streaming.MAX_STREAMED_RESPONSE_BYTES` (200 MB) streamed, against
#: :data:`~functions.runtime.streaming.MAX_BUFFERED_RESPONSE_BYTES` (6 MB) for a buffered caller
#: (the HTTP API route of the same agent gets the whole stream collected).
RESPONSE_STREAMING_URL: Final = (
    "https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html")
MAX_STREAM_DURATION_S: Final = TIMEOUT_LIMITS_S[1]
STREAM_LIMITS_BYTES: Final = (MAX_BUFFERED_RESPONSE_BYTES, MAX_STREAMED_RESPONSE_BYTES)
#: Function URL access control: with ``AuthType: AWS_IAM`` a caller needs
#: ``lambda:InvokeFunctionUrl`` and, for function URLs created since October 2025, also
#: ``lambda:InvokeFunction`` (condition ``lambda:InvokedViaFunctionUrl``).
FUNCTION_URL_AUTH_URL: Final = "https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html"
#: The variable Lambda's managed runtimes run a wrapper script from; a streaming agent's is
#: set by the deploy (:data:`STREAM_EXEC_WRAPPER`), so the agent may not set it.
EXEC_WRAPPER_ENV: Final = "AWS_LAMBDA_EXEC_WRAPPER"
EXEC_WRAPPER_URL: Final = "https://docs.aws.amazon.com/lambda/latest/dg/runtimes-modify.html#runtime-wrapper"
#: The toolkit's streaming runtime client, started by the wrapper script (path in the function's
#: code asset, ``/var/task`` on Lambda).
STREAM_EXEC_WRAPPER: Final = "/var/task/functions/runtime/warmstart-stream"
#: ``function_url_principals`` entries: a 12-digit account id, or an IAM ARN of an account root,
#: role or user.
_PRINCIPAL: Final = re.compile(r"\d{12}|arn:aws(-[a-z]+)*:iam::\d{12}:(root|(role|user)/[\w+=,.@/-]+)")

#: Agent names: lower-case words joined by ``_`` (``intent``, ``order_lookup``). They name the
#: CDK constructs (``Agent-<name>``), the outputs (``<Name>FunctionName``), the SSM parameter and
#: ``POWERTOOLS_SERVICE_NAME``; each word starts with a letter so that two names never give the
#: same ``PascalCase`` output name.
AGENT_NAME_PATTERN: Final = re.compile(r"[a-z][a-z0-9]*(_[a-z][a-z0-9]*)*")
AGENT_NAME_MAX: Final = 32
#: One path segment of a path prefix: API Gateway HTTP API route paths, without ``{}`` variables.
_SEGMENT: Final = re.compile(r"[A-Za-z0-9._~-]+")
_HANDLER: Final = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SSM_PATH: Final = re.compile(r"/[A-Za-z0-9_.\-/]+")

#: Packaged with every agent, whatever its ``code`` says (the toolkit).
RUNTIME_PACKAGE: Final = "functions/runtime"

#: Settings an agent may leave out (``None``: derived from the agent's name, see
#: :func:`agent_defaults`). ``provisioned_concurrency`` is needed by strategy ``provisioned``.
AGENT_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType({
    "handler": None,                 # functions.<name>.handler.handler
    "code": None,                    # ["functions/<name>"]
    "path_prefix": None,             # /<name>
    "layers": ("web",),
    "runtime": "python3.12",
    "memory_mb": 1024,
    "timeout_s": 30,
    "architecture": "x86_64",
    "strategy": "none",
    "provisioned_concurrency": None,
    "sla_ms": 2000,
    "overflow": None,
    "overflow_contract": None,       # unchecked: see AgentConfig.overflow_contract
    "environment": MappingProxyType({}),
    "log_retention_days": 30,
    "degradation_parameter": None,   # /warmstart/<name>/degradation-level
    "reserved_concurrency": None,    # no reservation: the account's unreserved pool
    "calibration": None,             # calibration/<name>.json when that file exists
    "managed_instances": None,       # strategy managed_instances: its capacity provider and scaling
})

#: Bounds a variant ``-c warmstart:strategy=provisioned`` gives an agent that declares none
#: (target tracking at 0.7: the documented example value, see ProvisionedConcurrencyConfig).
DEFAULT_PROVISIONED_CONCURRENCY: Final[Mapping[str, Any]] = MappingProxyType(
    {"min": 1, "max": 10, "target_utilization": 0.7})

#: What the old single-agent key ``warmstart.agent`` is read as (one agent named ``agent``).
LEGACY_AGENT_NAME: Final = "agent"
LEGACY_AGENT: Final[Mapping[str, Any]] = MappingProxyType({
    "code": ("functions",),
    "path_prefix": "/",
    "layers": ("web", "inference", MODEL_LAYER),
    "overflow": "gpu",
})

#: Environment variables the deploy sets on every agent function, and the setting each comes from.
DEPLOY_ENVIRONMENT: Final[Mapping[str, str]] = MappingProxyType({
    names.ENV_AGENT_NAME: "the agent's name",
    names.ENV_BASE_PATH: "path_prefix",
    names.ENV_SLA_MS: "sla_ms",
    names.ENV_DEGRADATION_PARAMETER: "degradation_parameter",
    names.ENV_OVERFLOW_ENDPOINT_NAME: "overflow and gpu_endpoint",
    names.ENV_OVERFLOW_CAPACITY_PARAMETER: "overflow and gpu_endpoint.capacity",
    names.ENV_OVERFLOW_INFERENCE_COMPONENT: "overflow and gpu_endpoint.target",
    "POWERTOOLS_SERVICE_NAME": "the agent's name",
    "POWERTOOLS_METRICS_NAMESPACE": "the stack (namespace Warmstart)",
})
#: Names Lambda reserves (it refuses a function that sets them); see :data:`RESERVED_ENV_URL`.
LAMBDA_RESERVED_ENVIRONMENT: Final = frozenset({
    "_HANDLER", "_X_AMZN_TRACE_ID", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR",
})

#: Pricing items the cost model needs; each may be given once or per architecture
#: (``<name>_x86_64`` and ``<name>_arm64``).
REQUIRED_PRICES: Final = (
    "lambda_duration_gb_s",
    "lambda_requests_per_million",
    "pc_configured_gb_s",
    "pc_duration_gb_s",
    "snapstart_cache_gb_s",
    "snapstart_restore_gb",
    "http_api_requests_per_million",
)


class StackConfigError(ContractError):
    """The ``warmstart`` context (cdk.json) is invalid; the message names the key and the fix."""




# --------------------------------------------------------------------------------------------
# dataclasses


@dataclass(frozen=True)
class ProvisionedConcurrencyConfig:
    """Bounds for provisioned concurrency on the ``live`` alias.

    Attributes
    ----------
    min : int
        Execution environments always provisioned (alias setting and scalable-target minimum), >= 1.
    max : int
        Scalable-target maximum, >= ``min``.
    target_utilization : float
        Target tracking value on ``LambdaProvisionedConcurrencyUtilization``, in (0, 1].
    objective : {"cost", "sla"}
        What the warmer buys provisioned concurrency above ``min`` for
        (``warmers.plan.policy.AliasPolicy.objective``): ``cost`` (default) only as far as it costs
        no more than on demand; ``sla`` enough to cover the forecast peak (within ``max`` and
        the warmer's budget), for agents whose on-demand cold starts break their SLA.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html (target tracking
    at 0.7 is the documented example value).
    """

    min: int
    max: int
    target_utilization: float = 0.7
    objective: str = "cost"


@dataclass(frozen=True)
class ManagedInstancesDeployConfig:
    """Where and how an agent of strategy ``managed_instances`` runs (Lambda Managed Instances).

    LMI runs the function's execution environments on EC2 instances of a capacity provider, in
    *your* VPC: the instances get network interfaces in the subnets you name, behind the security
    groups you name, and reach AWS APIs and the internet only as those subnets route (a NAT
    gateway or VPC endpoints). There is no sane default without a VPC, so without
    ``capacity_provider_arn`` the synth refuses an agent that lacks ``subnet_ids`` or
    ``security_group_ids``.

    Attributes
    ----------
    capacity_provider_arn : str or None
        An existing capacity provider
        (``arn:aws:lambda:<region>:<account>:capacity-provider:<name>``) the function is put on;
        its networking, instance types and vCPU limit are its own, so ``subnet_ids``,
        ``security_group_ids``, ``instance_types`` and ``max_vcpu`` are refused with it. None:
        the stack creates one for the agent.
    subnet_ids : tuple of str
        ``subnet-...``, 1-16 (private subnets with a route to what the agent calls).
    security_group_ids : tuple of str
        ``sg-...``, 1-5.
    instance_types : tuple of str
        EC2 instance types the created provider may launch (``m7g.large``), of the agent's
        ``architecture``; empty: any (Lambda chooses).
    max_vcpu : int or None
        The created provider's ``MaxVCpuCount`` (2-15000); None: the service default (400).
    per_execution_environment_max_concurrency : int or None
        Requests one execution environment serves at once (1-1600); None: Python's default,
        16 per vCPU (one Python process per concurrent request).
    min_execution_environments : int
        The published version's minimum (default 3, AWS's default, one per AZ); the warmer
        raises it ahead of the forecast and never plans below it.
    max_execution_environments : int or None
        The version's maximum and the warmer's cap (0-15000, >= the minimum); None: 10, or the
        minimum when that is higher (:attr:`maximum`).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-capacity-providers.html
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html
    https://docs.aws.amazon.com/lambda/latest/api/API_CapacityProviderVpcConfig.html
    https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html
    """

    capacity_provider_arn: str | None = None
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    max_vcpu: int | None = None
    per_execution_environment_max_concurrency: int | None = None
    min_execution_environments: int = LMI_DEFAULT_MIN_EXECUTION_ENVIRONMENTS
    max_execution_environments: int | None = None

    @property
    def imported(self) -> bool:
        """True when the function goes on an existing capacity provider (by ARN)."""
        return self.capacity_provider_arn is not None

    @property
    def maximum(self) -> int:
        """The version's ``MaxExecutionEnvironments`` and the warmer's cap."""
        if self.max_execution_environments is not None:
            return self.max_execution_environments
        return max(self.min_execution_environments, LMI_DEFAULT_MAX_EXECUTION_ENVIRONMENTS)


_LMI_KEYS: Final = tuple(f.name for f in fields(ManagedInstancesDeployConfig))


@dataclass(frozen=True)
class AgentConfig:
    """One agent: its Lambda function, alias ``live``, warm strategy and place in the HTTP API.

    Attributes
    ----------
    name : str
        The ``agents`` key (``intent``); also ``WARMSTART_AGENT_NAME`` and
        ``POWERTOOLS_SERVICE_NAME``.
    handler : str
        ``package.module.function`` (``functions.agent.handler.handler``).
    code : tuple of str
        Folders relative to the repository root copied into the code asset at their relative
        path, besides ``functions/__init__.py`` and ``functions/runtime/`` (always packaged).
    path_prefix : str
        External path prefix in the HTTP API: ``/`` (the ``$default`` route) or ``/a[/b...]``
        (routes ``ANY /a`` and ``ANY /a/{proxy+}``); ``WARMSTART_BASE_PATH`` when not ``/``.
    layers : tuple of str
        Layers the function ships, in order (folders of ``layers/`` with a
        ``requirements.txt``, and ``model``).
    runtime, memory_mb, timeout_s, architecture
        Of the function (MB, s).
    strategy : str
        ``provisioned``, ``snapstart``, ``ping`` or ``none``.
    provisioned_concurrency : ProvisionedConcurrencyConfig or None
        Only with strategy ``provisioned``.
    sla_ms : int
        SLA of the agent's P0 routes (``WARMSTART_SLA_MS``), ms.
    overflow : str or None
        ``"gpu"``: overflows to the stack's shared GPU endpoint when ``gpu_endpoint.enabled``.
    overflow_contract : str or None
        Name of the answer contract the agent's overflow routes expect from the endpoint (what
        their ``overflow_request`` sends and ``overflow_answer`` checks, e.g. ``intent-v1``).
        The agents sharing the GPU endpoint must declare the same one, and the one the
        endpoint's model serves (``gpu_endpoint.contract``) when that is set: ``cdk synth``
        refuses the stack otherwise (an agent would get ``model_error`` on every overflow).
    environment : Mapping[str, str]
        The agent's own environment variables (e.g. ``LOOKUP_TOOL_URL``).
    log_retention_days : int
    degradation_parameter : str
        SSM parameter the warmer writes for this agent (``/warmstart/<name>/degradation-level``).
    calibration : str or None
        The admission calibration file (``warmstart calibrate --agent NAME``), relative to the
        repository root; ``None`` (default): ``calibration/<name>.json`` when it exists. ``cdk
        synth`` validates it (`functions.runtime.calibration.parse`, this agent, this memory
        size) and puts it into ``WARMSTART_CALIBRATION``.
    reserved_concurrency : int or None
        The function's reserved concurrency (``ReservedConcurrentExecutions``): at most this many
        execution environments at once, and as many kept out of the account's unreserved pool;
        ``None`` (default) reserves nothing. >= 1, and >= ``provisioned_concurrency.max``
        (Lambda refuses provisioned concurrency above it, :data:`PROVISIONED_CONCURRENCY_URL`).
    managed_instances : ManagedInstancesDeployConfig or None
        Strategy ``managed_instances`` only (required there): the capacity provider (an existing
        one by ARN, or subnets and security groups for one the stack creates) and the
        version's execution-environment bounds.
    """

    name: str
    handler: str
    code: tuple[str, ...]
    path_prefix: str
    layers: tuple[str, ...]
    runtime: str
    memory_mb: int
    timeout_s: int
    architecture: Architecture
    strategy: Strategy
    provisioned_concurrency: ProvisionedConcurrencyConfig | None
    sla_ms: int
    overflow: Overflow | None
    environment: Mapping[str, str]
    log_retention_days: int
    degradation_parameter: str
    reserved_concurrency: int | None = None
    calibration: str | None = None
    overflow_contract: str | None = None
    managed_instances: ManagedInstancesDeployConfig | None = None

    @property
    def python_version(self) -> str:
        """``"3.12"`` for ``python3.12``: the ``--python-version`` the layers are built for."""
        return self.runtime.removeprefix("python")

    @property
    def snapstart(self) -> bool:
        """True when SnapStart is turned on (``ApplyOn: PublishedVersions``)."""
        return self.strategy == "snapstart"

    @property
    def on_managed_instances(self) -> bool:
        """True for strategy ``managed_instances`` (its version runs on a capacity provider)."""
        return self.strategy == "managed_instances"

    @property
    def is_root(self) -> bool:
        """True for the agent at path prefix ``/`` (the HTTP API's ``$default`` route)."""
        return self.path_prefix == "/"

    @property
    def base_path(self) -> str | None:
        """``WARMSTART_BASE_PATH``: the path prefix, or ``None`` for the root agent."""
        return None if self.is_root else self.path_prefix

    @property
    def uses_model(self) -> bool:
        """True when the agent ships the model layer (``WARMSTART_MODEL_DIR=/opt/model``)."""
        return MODEL_LAYER in self.layers
Authorization = Literal["none", "iam", "jwt"]
AUTHORIZATIONS: Final[tuple[Authorization, ...]] = ("none", "iam", "jwt")


@dataclass(frozen=True)
class JwtAuthorizerConfig:
    """The HTTP API's JWT authorizer (``http_api.authorization`` of type ``jwt``).

    API Gateway reads the token from the ``Authorization`` header, checks its signature against
    the issuer's published keys, ``exp``/``nbf``/``iat``, that ``iss`` is ``issuer`` and that
    ``aud`` (or ``client_id``) is one of ``audience``; a route with ``scopes`` also needs one of
    them in the token's ``scope``/``scp`` claim. A request that fails gets 401 (403 for a missing
    scope) from API Gateway, before any Lambda runs.

    Attributes
    ----------
    issuer : str
        The identity provider's ``https://`` issuer URL (e.g. an Amazon Cognito user pool:
        ``https://cognito-idp.<region>.amazonaws.com/<user pool id>``).
    audience : tuple of str
        Accepted ``aud`` / ``client_id`` values, at least one.
    scopes : tuple of str
        Authorization scopes every route requires (empty: none).

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html
    """

    issuer: str
    audience: tuple[str, ...]
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class HttpApiConfig:
    """Default-stage throttling, access-log retention and route authorization of the HTTP API.

    ``authorization`` is ``"none"`` (public: the default), ``"iam"`` (SigV4-signed requests of
    principals allowed ``execute-api:Invoke``) or ``"jwt"`` (bearer tokens of one identity
    provider, :attr:`jwt`). In ``cdk.json`` it is the string ``"none"``/``"iam"`` or an object
    ``{"type": "none"|"iam"|"jwt", "issuer": ..., "audience": [...], "scopes": [...]}``
    (``issuer``, ``audience`` and ``scopes`` only with ``jwt``).

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-access-control-iam.html
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html
    """

    throttle_rate_per_s: float
    throttle_burst: int
    access_log_retention_days: int
    authorization: Authorization = "none"
    jwt: JwtAuthorizerConfig | None = None

    @property
    def public(self) -> bool:
        """True when the routes take unauthenticated requests (``authorization`` ``none``)."""
        return self.authorization == "none"


@dataclass(frozen=True)
class LogsConfig:
    """Encryption of the stack's log groups (``warmstart.logs``).

    ``kms_key`` false (default): CloudWatch Logs' own server-side encryption (AES-256-GCM, a key
    AWS owns). True: one customer-managed KMS key (rotation on) for the agents' log groups, the
    HTTP API access logs and the warmer's log group, with the key-policy statement CloudWatch
    Logs needs (principal ``logs.<region>.amazonaws.com``; ``kms:Encrypt*``, ``kms:Decrypt*``,
    ``kms:ReEncrypt*``, ``kms:GenerateDataKey*``, ``kms:Describe*``; on the condition that
    ``kms:EncryptionContext:aws:logs:arn`` is a log group of this account and region). The GPU
    endpoint's log group is made by SageMaker and keeps the default encryption.

    References
    ----------
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html
    """

    kms_key: bool = False


@dataclass(frozen=True)
class GpuEndpointConfig:
    """Optional SageMaker real-time endpoint used for overflow (off by default).

    ``contract``: the answer contract its model serves (see ``AgentConfig.overflow_contract``);
    None: not declared (the agents' contracts must still agree with each other).
    """

    enabled: bool
    instance_type: str
    model_asset: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    contract: str | None = None


@dataclass(frozen=True)
class WarmerDeployConfig:
    """The warmer's deploy settings (cdk.json ``warmstart.warmer``): whether it is deployed, its
    EventBridge Scheduler expression and the options the warmer construct reads
    (``infra/constructs/warmer.py``: ``cap``, ``floor``, ``budget_usd_per_hour``, ``actuator``,
    ``lead_min``, ``history_days``, ``runtime``, ``architecture``). Not the warmer's run-time
    config (``warmers.config.WarmerConfig``), which is read from the document the construct
    writes."""

    enabled: bool
    schedule: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class PricingConfig:
    """Prices for the cost model, in one region and currency.

    The items are the shared table ``warmers/prices.json`` (:mod:`warmers.pricing`, the one place
    prices are written) with the overrides of cdk.json's ``warmstart.pricing.items`` applied.

    Attributes
    ----------
    region : str
        Region the prices are for (the table's, ``us-east-1``).
    items : Mapping[str, Price]
        Item name -> :class:`warmers.pricing.Price` (``usd`` per ``unit``, ``source``, ...).
    currency : str
        ``"USD"``.
    overridden : tuple of str
        Names of the items cdk.json overrides (empty by default).
    """

    region: str
    items: Mapping[str, Price]
    currency: str = "USD"
    overridden: tuple[str, ...] = ()

    @property
    def table(self) -> PriceTable:
        """The items as a :class:`warmers.pricing.PriceTable` (e.g. for
        ``warmers.cost.CostModel.from_table``)."""
        origin = PRICES_ORIGIN + (" + cdk.json warmstart.pricing.items" if self.overridden else "")
        return PriceTable(region=self.region, currency=self.currency, items=self.items,
                          origin=origin, overridden=self.overridden)

    def price(self, name: str, *, architecture: Architecture | None = None) -> Price:
        """The price ``name``, per architecture when the table gives one.

        Raises
        ------
        warmers.pricing.MissingPriceError
            (a ``KeyError``) if neither ``<name>_<architecture>`` nor ``<name>`` is in the
            table; the message names the item and ``warmers/prices.json``.
        """
        return self.table.price(name, architecture=architecture)


@dataclass(frozen=True)
class AlarmConfig:
    """CloudWatch alarm thresholds, the same for every agent's ``live`` alias.

    ``duration_p99_ms`` is ``None`` by default: each agent's alarm then fires when the p99 of its
    duration exceeds that agent's SLA (``sla_ms``) in ``datapoints_to_alarm`` of
    ``evaluation_periods`` periods (see :meth:`duration_threshold_ms`).
    """

    period_s: int
    evaluation_periods: int
    datapoints_to_alarm: int
    errors_threshold: int
    throttles_threshold: int
    spillover_threshold: int
    duration_p99_ms: int | None = None

    def duration_threshold_ms(self, agent: AgentConfig) -> int:
        """The p99 duration alarm threshold of ``agent``, ms: ``duration_p99_ms`` or its SLA."""
        return self.duration_p99_ms if self.duration_p99_ms is not None else agent.sla_ms


@dataclass(frozen=True)
class WarmstartConfig:
    """The whole deploy-time configuration.

    Attributes
    ----------
    agents : Mapping[str, AgentConfig]
        Agent name -> its config, in ``cdk.json`` order.
    warnings : tuple of str
        Things that work but should change (the old ``agent`` key); the CDK app shows them as
        warnings on the stack.
    logs : LogsConfig
        Log-group encryption (``warmstart.logs``).
    account_concurrency_limit : int
        The account's Lambda concurrency limit in the deploy region (default 1000; new accounts
        may start lower, a quota increase raises it): the reserved concurrency of all agents
        (and 1 for the warmer) must leave 100 of it unreserved.
    function_url_principals : tuple of str
        Who may invoke the streaming agents' function URLs (``AuthType: AWS_IAM``): account ids
        or IAM ARNs; empty (default): this account (its root, so its IAM principals whose own
        policies allow it). See :func:`function_url_principals`.
    """

    stack_name: str
    region: str | None
    agents: Mapping[str, AgentConfig]
    http_api: HttpApiConfig
    debug_resource: bool
    gpu_endpoint: GpuEndpointConfig
    warmer: WarmerDeployConfig
    pricing: PricingConfig
    alarms: AlarmConfig
    warnings: tuple[str, ...] = ()
    logs: LogsConfig = field(default_factory=LogsConfig)
    account_concurrency_limit: int = DEFAULT_ACCOUNT_CONCURRENCY
    function_url_principals: tuple[str, ...] = ()

    @property
    def root_agent(self) -> AgentConfig | None:
        """The agent at path prefix ``/`` (the ``$default`` route), if one is declared."""
        return next((a for a in self.agents.values() if a.is_root), None)

    def agent(self, name: str | None = None) -> AgentConfig:
        """The agent ``name``; with ``None`` the default agent: the root agent, else the only one.

        Raises
        ------
        StackConfigError
            One line: ``unknown agent 'x'; known agents: intent, lookup``, or, for ``None``
            with several agents and none at ``/``, that a name is needed.
        """
        known = ", ".join(self.agents)
        if name is None:
            if self.root_agent is not None:
                return self.root_agent
            if len(self.agents) == 1:
                return next(iter(self.agents.values()))
            raise StackConfigError(f"several agents and none at path prefix '/': name one (known agents: {known})")
        if name not in self.agents:
            raise StackConfigError(f"unknown agent {name!r}; known agents: {known}")
        return self.agents[name]

    @property
    def overflow_agents(self) -> tuple[AgentConfig, ...]:
        """The agents that declare ``"overflow": "gpu"`` (they share the GPU endpoint)."""
        return tuple(a for a in self.agents.values() if a.overflow == "gpu")


# --------------------------------------------------------------------------------------------
# reading


class _Section:
    """Typed access to one mapping of the context, with the dotted path for error messages."""

    def __init__(self, raw: object, path: str, *, known: tuple[str, ...] | None) -> None:
        if not isinstance(raw, Mapping):
            raise StackConfigError(f"{path}: expected an object, got {_show(raw)}")
        self.raw = raw
        self.path = path
        if known is not None:
            unknown = sorted(k for k in raw if not str(k).startswith("_") and k not in known)
            if unknown:
                raise StackConfigError(
                    f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; "
                    f"known keys are {', '.join(known)}"
                )

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def _get(self, key: str, default: object) -> object:
        if key in self.raw and self.raw[key] is not None:
            return self.raw[key]
        if default is _MISSING:
            raise StackConfigError(f"{self.path}: missing key {key!r}")
        return default

    def text(self, key: str, default: object = None) -> str:
        value = self._get(key, _MISSING if default is None else default)
        if not isinstance(value, str) or not value:
            raise StackConfigError(f"{self.path}.{key}: expected a non-empty string, got {_show(value)}")
        return value

    def integer(self, key: str, default: object = None) -> int:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)  # from `cdk synth -c ...`, context values arrive as strings
        if isinstance(value, bool) or not isinstance(value, int):
            raise StackConfigError(f"{self.path}.{key}: expected an integer, got {_show(value)}")
        return value

    def number(self, key: str, default: object = None) -> float:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise StackConfigError(f"{self.path}.{key}: expected a number, got {_show(value)}")
        return float(value)

    def flag(self, key: str, default: object = None) -> bool:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise StackConfigError(f"{self.path}.{key}: expected true or false, got {_show(value)}")
        return value

    def section(self, key: str, *, known: tuple[str, ...] | None) -> _Section:
        return _Section(self._get(key, _MISSING), f"{self.path}.{key}", known=known)

    def extras(self, known: tuple[str, ...]) -> Mapping[str, Any]:
        return MappingProxyType(
            {k: copy.deepcopy(v) for k, v in self.raw.items() if k not in known and not k.startswith("_")}
        )


_MISSING: Final = object()
#: ``warmstart.warmer.enabled`` when left out: the default deploy has its warmer (issue 20: no
#: forecast, provisioned-concurrency plan or degradation level without it). The GPU endpoint
#: (``gpu_endpoint.enabled``) stays opt-in: it is hours of GPU instance, not API reads.
WARMER_ENABLED_DEFAULT: Final = True


def _show(value: object) -> str:
    return "nothing" if value is _MISSING else f"{type(value).__name__} {value!r}"


def _in_range(sec: _Section, key: str, value: int, limits: tuple[int, int], unit: str) -> None:
    low, high = limits
    if not low <= value <= high:
        raise StackConfigError(
            f"{sec.path}.{key}: {value} {unit} is outside Lambda's limits ({low}-{high} {unit}); "
            f"see {LAMBDA_LIMITS_URL}"
        )


def _python_tuple(runtime: str) -> tuple[int, int]:
    major, minor = runtime.removeprefix("python").split(".")
    return int(major), int(minor)


_AGENT_KEYS: Final = tuple(AGENT_DEFAULTS)
#: Keys of the old single-agent ``warmstart.agent`` section.
_LEGACY_AGENT_KEYS: Final = (
    "handler", "runtime", "memory_mb", "timeout_s", "architecture", "strategy",
    "provisioned_concurrency", "sla_ms", "log_retention_days",
)


def agent_defaults(name: str) -> dict[str, Any]:
    """:data:`AGENT_DEFAULTS` with the name-derived ones filled in for agent ``name``."""
    return {
        **AGENT_DEFAULTS,
        "handler": f"functions.{name}.handler.handler",
        "code": (f"functions/{name}",),
        "path_prefix": f"/{name}",
        "degradation_parameter": f"/warmstart/{name}/degradation-level",
    }


def known_layers(layers_dir: Path = LAYERS_DIR) -> tuple[str, ...]:
    """Layer names an agent may declare: folders of ``layers_dir`` with a ``requirements.txt``,
    and ``model`` (the artifact layer), sorted."""
    found = {MODEL_LAYER}
    if layers_dir.is_dir():
        found |= {p.name for p in layers_dir.iterdir() if (p / "requirements.txt").is_file()}
    return tuple(sorted(found))


def _strings(sec: _Section, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = sec.raw.get(key)
    if value is None:
        return default
    if (not isinstance(value, list | tuple) or not value
            or not all(isinstance(v, str) and v for v in value)):
        raise StackConfigError(f"{sec.path}.{key}: expected a non-empty list of strings, got {_show(value)}")
    return tuple(value)


def _path_prefix(sec: _Section, prefix: str) -> str:
    where = f"{sec.path}.path_prefix: {prefix!r}"
    if not prefix.startswith("/"):
        raise StackConfigError(f"{where} must start with '/' (e.g. '/{prefix.strip('/') or 'lookup'}')")
    if prefix == "/":
        return prefix
    segments = prefix[1:].split("/")
    if prefix.endswith("/") or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise StackConfigError(
            f"{where} must be '/' or '/segment[/segment...]' ending at a '/' boundary, without a "
            "trailing '/' or empty segments; a segment has letters, digits and . _ ~ - only "
            "(e.g. '/lookup')"
        )
    return prefix


def _code(sec: _Section, code: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for entry in code:
        path = PurePosixPath(entry)
        if path.is_absolute() or ".." in path.parts or "\\" in entry or str(path) == ".":
            raise StackConfigError(
                f"{sec.path}.code: {entry!r} must be a folder relative to the repository root, "
                "without '..' (e.g. 'functions/lookup')"
            )
        out.append(str(path))
    return tuple(dict.fromkeys(out))


def _handler(sec: _Section, handler: str, code: tuple[str, ...]) -> str:
    if not _HANDLER.fullmatch(handler):
        raise StackConfigError(f"{sec.path}.handler: {handler!r} is not a handler 'package.module.function'")
    module_path = handler.rsplit(".", 1)[0].replace(".", "/")
    if not any(module_path == c or module_path.startswith(c + "/") for c in (*code, RUNTIME_PACKAGE)):
        raise StackConfigError(
            f"{sec.path}.handler: module {handler.rsplit('.', 1)[0]} is not in the agent's code "
            f"({', '.join(code)}) nor in {RUNTIME_PACKAGE}; add its folder to code"
        )
    return handler


def _layers(sec: _Section, layers: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    for name in layers:
        if name not in known:
            raise StackConfigError(f"{sec.path}.layers: unknown layer {name!r}; known: {', '.join(known)}")
    twice = sorted({n for n in layers if layers.count(n) > 1})
    if twice:
        raise StackConfigError(f"{sec.path}.layers: layer {twice[0]!r} is listed twice")
    return layers


def _environment(sec: _Section) -> Mapping[str, str]:
    if not sec.has("environment"):
        return MappingProxyType({})
    env = sec.section("environment", known=None)
    out: dict[str, str] = {}
    for key, value in env.raw.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise StackConfigError(f"{env.path}: {key!r} is not an environment variable name "
                              "(letters, digits and _, not starting with a digit)")
        if key in LAMBDA_RESERVED_ENVIRONMENT:
            raise StackConfigError(f"{env.path}.{key}: reserved by AWS Lambda and cannot be set; "
                              f"see {RESERVED_ENV_URL}")
        if key in DEPLOY_ENVIRONMENT:
            raise StackConfigError(f"{env.path}.{key}: set by the deploy from {DEPLOY_ENVIRONMENT[key]}; "
                              "remove it here")
        if not isinstance(value, str):
            raise StackConfigError(f"{env.path}.{key}: expected a string, got {_show(value)}")
        out[key] = value
    return MappingProxyType(out)


def _provisioned(sec: _Section) -> ProvisionedConcurrencyConfig | None:
    if not sec.has("provisioned_concurrency"):
        return None
    pc_sec = sec.section("provisioned_concurrency",
                         known=("min", "max", "target_utilization", "objective"))
    pc_min, pc_max = pc_sec.integer("min"), pc_sec.integer("max")
    target = pc_sec.number("target_utilization", 0.7)
    objective = pc_sec.text("objective") if pc_sec.has("objective") else "cost"
    if objective not in ("cost", "sla"):
        raise StackConfigError(
            f"{pc_sec.path}.objective: {objective!r} is not 'cost' (provisioned concurrency only "
            "where it costs no more than on demand) or 'sla' (cover the forecast peak)")
    if pc_min < 1:
        raise StackConfigError(
            f"{pc_sec.path}.min: {pc_min} is below 1; provisioned concurrency needs at least one "
            "execution environment (drop provisioned_concurrency for none)"
        )
    if pc_max < pc_min:
        raise StackConfigError(f"{pc_sec.path}: max ({pc_max}) is below min ({pc_min}); set max >= min")
    if not 0.0 < target <= 1.0:
        raise StackConfigError(
            f"{pc_sec.path}.target_utilization: {target} is outside (0, 1]; "
            "it is a fraction of provisioned concurrency in use, e.g. 0.7"
        )
    return ProvisionedConcurrencyConfig(min=pc_min, max=pc_max, target_utilization=target,
                                        objective=objective)


def _check_strategy(sec: _Section, strategy: str, runtime: str,
                    pc: ProvisionedConcurrencyConfig | None) -> None:
    if strategy == "snapstart":
        if pc is not None:
            raise StackConfigError(
                f"{sec.path}: strategy 'snapstart' cannot be combined with provisioned concurrency "
                f"(provisioned_concurrency min={pc.min}, max={pc.max}): AWS Lambda does not support "
                f"SnapStart together with provisioned concurrency, see {SNAPSTART_URL}. "
                "Remove provisioned_concurrency or choose strategy 'provisioned'."
            )
        if _python_tuple(runtime) < SNAPSTART_MIN_PYTHON:
            raise StackConfigError(
                f"{sec.path}.runtime: SnapStart needs python3.12 or newer, got {runtime!r}; "
                f"see {SNAPSTART_URL}. Choose runtime python3.12+ or another strategy."
            )
    if strategy == "provisioned" and pc is None:
        raise StackConfigError(
            f"{sec.path}.provisioned_concurrency: strategy 'provisioned' needs "
            '{"min": N, "max": M} (N >= 1, M >= N)'
        )
    if strategy in ("ping", "none") and pc is not None:
        raise StackConfigError(
            f"{sec.path}.provisioned_concurrency: strategy {strategy!r} does not use provisioned "
            "concurrency; remove provisioned_concurrency or choose strategy 'provisioned'"
        )
    if strategy == "managed_instances":
        if pc is not None:
            raise StackConfigError(
                f"{sec.path}.provisioned_concurrency: strategy 'managed_instances' cannot be "
                "combined with provisioned concurrency: a Lambda Managed Instances version is "
                "sized by its minimum and maximum execution environments (FunctionScalingConfig, "
                f"see {LMI_FUNCTION_SCALING_URL}); remove provisioned_concurrency and set "
                "managed_instances.min_execution_environments")
        if _python_tuple(runtime) < LMI_MIN_PYTHON:
            raise StackConfigError(
                f"{sec.path}.runtime: Lambda Managed Instances need python3.13 or newer, got "
                f"{runtime!r}; see {LMI_RUNTIMES_URL}. Choose runtime python3.13+ or another "
                "strategy.")


def _lmi_count(sec: _Section, key: str, limits: tuple[int, int], unit: str, url: str) -> int | None:
    """An optional integer of ``managed_instances`` within ``limits``."""
    if not sec.has(key):
        return None
    value = sec.integer(key)
    if not limits[0] <= value <= limits[1]:
        raise StackConfigError(f"{sec.path}.{key}: {value} is outside {limits[0]}-{limits[1]} {unit}; "
                          f"see {url}")
    return value


def _lmi_ids(sec: _Section, key: str, pattern: re.Pattern[str], limits: tuple[int, int],
             example: str) -> tuple[str, ...]:
    """``subnet_ids`` / ``security_group_ids``: ids of the pattern, between ``limits`` of them."""
    ids = _strings(sec, key, ())
    for entry in ids:
        if not pattern.fullmatch(entry):
            raise StackConfigError(f"{sec.path}.{key}: {entry!r} is not an id such as {example!r}")
    if not limits[0] <= len(ids) <= limits[1]:
        raise StackConfigError(f"{sec.path}.{key}: {len(ids)} given, a capacity provider takes "
                          f"{limits[0]}-{limits[1]}; see {LMI_VPC_CONFIG_URL}")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise StackConfigError(f"{sec.path}.{key}: {twice[0]!r} is listed twice")
    return ids


def _managed_instances(sec: _Section, strategy: str, memory_mb: int) -> ManagedInstancesDeployConfig | None:
    """``managed_instances``: only with strategy ``managed_instances``, which requires it.

    Raises
    ------
    StackConfigError
        The block with another strategy; without it (or without subnets and security groups
        and no ``capacity_provider_arn``); networking keys next to ``capacity_provider_arn``;
        a malformed ARN or id; a count outside the API's limits; min above max; memory below
        LMI's 2 GB.
    """
    if strategy != "managed_instances":
        if sec.has("managed_instances"):
            raise StackConfigError(
                f"{sec.path}.managed_instances: only for strategy 'managed_instances' (this agent's "
                f"strategy is {strategy!r}); remove managed_instances or set strategy "
                "'managed_instances'")
        return None
    need = ('"managed_instances": {"capacity_provider_arn": "arn:aws:lambda:<region>:<account>:'
            'capacity-provider:<name>"} (an existing one) or {"subnet_ids": ["subnet-..."], '
            '"security_group_ids": ["sg-..."]} (the stack creates one in your VPC)')
    if not sec.has("managed_instances"):
        raise StackConfigError(
            f"{sec.path}.managed_instances: strategy 'managed_instances' runs the function on a "
            f"capacity provider in your VPC and needs it: {need}; see {LMI_CAPACITY_PROVIDERS_URL}")
    lmi = sec.section("managed_instances", known=_LMI_KEYS)
    if memory_mb < LMI_MIN_MEMORY_MB:
        raise StackConfigError(
            f"{sec.path}.memory_mb: {memory_mb} MB is below the {LMI_MIN_MEMORY_MB} MB a Lambda "
            f"Managed Instances function needs (1 vCPU and 2 GB, see {LMI_SCALING_URL}); raise "
            "memory_mb or choose another strategy")
    arn = lmi.text("capacity_provider_arn") if lmi.has("capacity_provider_arn") else None
    networking = ("subnet_ids", "security_group_ids", "instance_types", "max_vcpu")
    if arn is not None:
        if not _CAPACITY_PROVIDER_ARN.fullmatch(arn):
            raise StackConfigError(
                f"{lmi.path}.capacity_provider_arn: {arn!r} is not a capacity provider ARN "
                "(arn:aws:lambda:<region>:<account>:capacity-provider:<name>)")
        given = [k for k in networking if lmi.has(k)]
        if given:
            raise StackConfigError(
                f"{lmi.path}.{given[0]}: set by the existing capacity provider "
                "capacity_provider_arn names; remove it, or remove capacity_provider_arn to let "
                "the stack create one")
        subnets: tuple[str, ...] = ()
        groups: tuple[str, ...] = ()
    else:
        missing = [k for k in ("subnet_ids", "security_group_ids") if not lmi.has(k)]
        if missing:
            raise StackConfigError(
                f"{lmi.path}: missing {' and '.join(missing)}: Lambda Managed Instances run in "
                "your VPC and warmstart cannot guess it; give the private subnets and security "
                'groups of the capacity provider the stack creates ("subnet_ids": ["subnet-..."], '
                '"security_group_ids": ["sg-..."]), or capacity_provider_arn of an existing one; '
                f"see {LMI_CAPACITY_PROVIDERS_URL}")
        subnets = _lmi_ids(lmi, "subnet_ids", _SUBNET_ID, LMI_SUBNETS_LIMITS, "subnet-0abc1234")
        groups = _lmi_ids(lmi, "security_group_ids", _SECURITY_GROUP_ID,
                          LMI_SECURITY_GROUPS_LIMITS, "sg-0abc1234")
    types = _strings(lmi, "instance_types", ()) if lmi.has("instance_types") else ()
    for entry in types:
        if not _INSTANCE_TYPE.fullmatch(entry):
            raise StackConfigError(f"{lmi.path}.instance_types: {entry!r} is not an EC2 instance type "
                              "such as 'm7g.large'")
    low = (lmi.integer("min_execution_environments") if lmi.has("min_execution_environments")
           else LMI_DEFAULT_MIN_EXECUTION_ENVIRONMENTS)
    bounds = (0, LMI_EXECUTION_ENVIRONMENTS_LIMIT)
    if not bounds[0] <= low <= bounds[1]:
        raise StackConfigError(f"{lmi.path}.min_execution_environments: {low} is outside 0-"
                          f"{bounds[1]}; see {LMI_FUNCTION_SCALING_URL}")
    high = _lmi_count(lmi, "max_execution_environments", bounds, "execution environments",
                      LMI_FUNCTION_SCALING_URL)
    if high is not None and high < low:
        raise StackConfigError(f"{lmi.path}.max_execution_environments: {high} is below "
                          f"min_execution_environments ({low}); set max >= min")
    return ManagedInstancesDeployConfig(
        capacity_provider_arn=arn, subnet_ids=subnets, security_group_ids=groups,
        instance_types=types,
        max_vcpu=_lmi_count(lmi, "max_vcpu", LMI_MAX_VCPU_LIMITS, "vCPUs",
                            LMI_PROVIDER_SCALING_URL),
        per_execution_environment_max_concurrency=_lmi_count(
            lmi, "per_execution_environment_max_concurrency", LMI_MAX_CONCURRENCY_LIMITS,
            "concurrent requests", LMI_FUNCTION_CONFIG_URL),
        min_execution_environments=low, max_execution_environments=high)


def _choice(sec: _Section, key: str, default: str, valid: tuple[str, ...], plural: str) -> Any:
    value = sec.text(key, default)
    if value not in valid:
        raise StackConfigError(f"{sec.path}.{key}: unknown {key} {value!r}; "
                          f"valid {plural} are {', '.join(valid)}")
    return value


def _agent(sec: _Section, name: str, known: tuple[str, ...]) -> AgentConfig:
    """One agent section (``warmstart.agents.<name>``) with its defaults."""
    if len(name) > AGENT_NAME_MAX or not AGENT_NAME_PATTERN.fullmatch(name):
        raise StackConfigError(
            f"{sec.path}: agent name {name!r} is not valid; use lower-case words of letters and "
            f"digits joined by '_', each starting with a letter, at most {AGENT_NAME_MAX} "
            "characters (e.g. 'intent', 'order_lookup')"
        )
    defaults = agent_defaults(name)
    strategy = _choice(sec, "strategy", defaults["strategy"], STRATEGIES, "strategies")
    runtime = sec.text("runtime", defaults["runtime"])
    if runtime not in RUNTIMES:
        raise StackConfigError(
            f"{sec.path}.runtime: unsupported runtime {runtime!r}; valid runtimes are {', '.join(RUNTIMES)}"
        )
    architecture = _choice(sec, "architecture", defaults["architecture"], ARCHITECTURES,
                           "architectures")
    memory_mb = sec.integer("memory_mb", defaults["memory_mb"])
    _in_range(sec, "memory_mb", memory_mb, MEMORY_LIMITS_MB, "MB")
    timeout_s = sec.integer("timeout_s", defaults["timeout_s"])
    _in_range(sec, "timeout_s", timeout_s, TIMEOUT_LIMITS_S, "s")
    pc = _provisioned(sec)
    _check_strategy(sec, strategy, runtime, pc)
    sla_ms = sec.integer("sla_ms", defaults["sla_ms"])
    if not 1 <= sla_ms <= timeout_s * 1000:
        raise StackConfigError(
            f"{sec.path}.sla_ms: {sla_ms} ms must be between 1 ms and the function timeout "
            f"({timeout_s * 1000} ms)"
        )
    overflow = sec.raw.get("overflow")
    if overflow is not None and overflow not in OVERFLOWS:
        raise StackConfigError(f"{sec.path}.overflow: unknown overflow {overflow!r}; valid values are "
                          "'gpu' (the stack's shared gpu_endpoint) or null")
    degradation_parameter = sec.text("degradation_parameter", defaults["degradation_parameter"])
    if not _SSM_PATH.fullmatch(degradation_parameter):
        raise StackConfigError(
            f"{sec.path}.degradation_parameter: {degradation_parameter!r} is not an SSM parameter "
            f"path such as /warmstart/{name}/degradation-level"
        )
    code = _code(sec, _strings(sec, "code", defaults["code"]))
    reserved = _reserved_concurrency(sec, pc)
    managed = _managed_instances(sec, strategy, memory_mb)
    return AgentConfig(
        name=name,
        handler=_handler(sec, sec.text("handler", defaults["handler"]), code),
        code=code,
        path_prefix=_path_prefix(sec, sec.text("path_prefix", defaults["path_prefix"])),
        layers=_layers(sec, _strings(sec, "layers", defaults["layers"]), known),
        runtime=runtime,
        memory_mb=memory_mb,
        timeout_s=timeout_s,
        architecture=architecture,
        strategy=strategy,
        provisioned_concurrency=pc,
        sla_ms=sla_ms,
        overflow=overflow,
        environment=_environment(sec),
        log_retention_days=sec.integer("log_retention_days", defaults["log_retention_days"]),
        degradation_parameter=degradation_parameter,
        reserved_concurrency=reserved,
        calibration=_calibration(sec),
        overflow_contract=_contract(sec, "overflow_contract"),
        managed_instances=managed,
    )


def _contract(sec: _Section, key: str) -> str | None:
    """An answer contract name (``[A-Za-z0-9._-]``, at most 64), or None when absent."""
    if sec.raw.get(key) is None:
        return None
    name = sec.text(key)
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name):
        raise StackConfigError(f"{sec.path}.{key}: {name!r} must be 1-64 letters, digits, '.', '_' "
                          "or '-' (e.g. 'intent-v1')")
    return name


def check_overflow_contracts(agents: Mapping[str, AgentConfig], endpoint_contract: str | None,
                             path: str) -> None:
    """Refuse a GPU endpoint shared by agents that expect different answer contracts.

    Raises
    ------
    StackConfigError
        When two agents that overflow to the endpoint declare different
        ``overflow_contract`` values (or one declares one and another none), or an agent's
        differs from the endpoint's ``contract``; the message names each agent's contract.
    """
    sharing = {n: a.overflow_contract for n, a in agents.items() if a.overflow == "gpu"}
    if len(set(sharing.values()) | ({endpoint_contract} if endpoint_contract else set())) <= 1:
        return
    listing = ", ".join(f"{n}: {c or 'none declared'}" for n, c in sorted(sharing.items()))
    serves = f"; the endpoint serves {endpoint_contract!r}" if endpoint_contract else ""
    raise StackConfigError(
        f"{path}: the GPU endpoint is shared by agents that expect different answer contracts "
        f"({listing}{serves}); one endpoint answers one contract: give the agents the same "
        "overflow_contract (and gpu_endpoint.contract), or overflow only the agents whose "
        "contract the endpoint's model serves (\"overflow\": null on the others)")


def _calibration(sec: _Section) -> str | None:
    """``calibration``: null, or a ``.json`` file relative to the repository root."""
    if sec.raw.get("calibration") is None:
        return None
    entry = sec.text("calibration")
    path = PurePosixPath(entry)
    if path.is_absolute() or ".." in path.parts or "\\" in entry or path.suffix != ".json":
        raise StackConfigError(
            f"{sec.path}.calibration: {entry!r} must be a .json file relative to the repository "
            "root, without '..' (e.g. 'calibration/intent.json', written by `warmstart calibrate "
            "--agent NAME`)"
        )
    return str(path)


def _reserved_concurrency(sec: _Section, pc: ProvisionedConcurrencyConfig | None) -> int | None:
    """``reserved_concurrency``: null, or an integer >= 1 and >= the provisioned-concurrency max."""
    if not sec.has("reserved_concurrency"):
        return None
    reserved = sec.integer("reserved_concurrency")
    if reserved < 1:
        raise StackConfigError(
            f"{sec.path}.reserved_concurrency: {reserved} would throttle every invocation (no "
            "execution environment may run); set null for no reservation, or a number >= 1"
        )
    if pc is not None and pc.max > reserved:
        raise StackConfigError(
            f"{sec.path}.reserved_concurrency: {reserved} is below provisioned_concurrency.max "
            f"({pc.max}); Lambda refuses provisioned concurrency above a function's reserved "
            f"concurrency, see {PROVISIONED_CONCURRENCY_URL}. Raise reserved_concurrency or "
            "lower the max"
        )
    return reserved


def _check_reservations(top: _Section, agents: Mapping[str, AgentConfig], *, warmer: bool,
                        account_limit: int) -> None:
    """The reservations (agents, and 1 for the warmer) must leave 100 of the account unreserved."""
    reserved = {name: a.reserved_concurrency for name, a in agents.items()
                if a.reserved_concurrency is not None}
    if not reserved:
        return
    if warmer:
        reserved["warmer"] = 1  # infra/constructs/warmer.py: one run at a time
    total = sum(reserved.values())
    room = account_limit - UNRESERVED_CONCURRENCY_MINIMUM
    if total > room:
        parts = ", ".join(f"{name} {value}" for name, value in reserved.items())
        raise StackConfigError(
            f"{top.path}.agents: reserved concurrency adds up to {total} ({parts}), above the "
            f"{max(room, 0)} this account can reserve (account_concurrency_limit {account_limit} "
            f"minus the {UNRESERVED_CONCURRENCY_MINIMUM} Lambda keeps unreserved, see "
            f"{LAMBDA_CONCURRENCY_URL}); lower reserved_concurrency, or raise "
            "account_concurrency_limit after a quota increase"
        )


def function_url_principals(top: _Section) -> tuple[str, ...]:
    """``function_url_principals``: who may invoke the streaming agents' function URLs.

    Each entry is a 12-digit account id or an IAM ARN (``arn:aws:iam::<account>:root``,
    ``...:role/<name>``, ``...:user/<name>``); each gets both actions a function URL with
    ``AuthType: AWS_IAM`` needs (:data:`FUNCTION_URL_AUTH_URL`) on the agents' alias ``live``.
    Absent or null: ``()``, read as this account (its root: the account's IAM principals whose
    own identity policies allow the two actions).

    Raises
    ------
    StackConfigError
        Not a non-empty list of strings, an entry that is neither an account id nor an IAM
        ARN, or an entry listed twice.
    """
    if not top.has("function_url_principals"):
        return ()
    principals = _strings(top, "function_url_principals", ())
    for entry in principals:
        if not _PRINCIPAL.fullmatch(entry):
            raise StackConfigError(
                f"{top.path}.function_url_principals: {entry!r} is not a 12-digit account id or an "
                "IAM ARN (arn:aws:iam::<account>:root, :role/<name> or :user/<name>); see "
                f"{FUNCTION_URL_AUTH_URL}")
    twice = sorted({p for p in principals if principals.count(p) > 1})
    if twice:
        raise StackConfigError(f"{top.path}.function_url_principals: {twice[0]!r} is listed twice")
    return principals


def check_streaming_agent(agent: AgentConfig, first_token_sla_ms: Mapping[str, float]) -> None:
    """Refuse a streaming agent (one with a ``stream=True`` route) Lambda cannot serve as declared.

    Called by the stack for each agent whose declaration streams, before its function URL is
    made. What is checked, and where AWS says so:

    * ``timeout_s`` <= :data:`MAX_STREAM_DURATION_S` (900 s): a stream ends when the function
      times out (:data:`RESPONSE_STREAMING_URL`, :data:`LAMBDA_LIMITS_URL`);
    * each streaming route's first-token SLA fits in the timeout (a first token promised after
      the function is stopped is never sent);
    * the agent's own ``environment`` does not set ``AWS_LAMBDA_EXEC_WRAPPER``: the deploy sets
      it to the streaming runtime client (:data:`STREAM_EXEC_WRAPPER`, :data:`EXEC_WRAPPER_URL`);
    * strategy is not ``managed_instances``. The AWS docs read for this (the LMI runtimes and
      Python runtime pages, :data:`LMI_RUNTIMES_URL`, :data:`LMI_PYTHON_URL`) do not say LMI
      cannot stream; what they say is that on LMI the managed Python runtime serves concurrent
      requests from several processes of its own. A streaming agent's exec wrapper replaces that
      runtime with the toolkit's streaming runtime client (one invocation at a time, one
      process), so on LMI it would not serve the concurrency the capacity is sized for. Refused
      until the toolkit's runtime client serves LMI's concurrency (issue 22, item 3).

    Not checked, because the config cannot express it: a VPC (function URLs do not stream
    inside a VPC, :data:`RESPONSE_STREAMING_URL` "VPC compatibility": warmstart puts no
    on-demand agent in a VPC), an API Gateway REST API in streaming mode (not deployed: the
    function URL is the streaming endpoint).

    Parameters
    ----------
    agent : AgentConfig
    first_token_sla_ms : Mapping[str, float]
        ``"METHOD /path"`` of each streaming route -> its first-token SLA, ms (the declared
        ``first_token_ms``, else its ``sla_ms``, else its tier's default).

    Raises
    ------
    StackConfigError
        One line naming ``warmstart.agents.<name>.<key>``, the limit and its source.
    """
    where = f"{CONTEXT_KEY}.agents.{agent.name}"
    if agent.on_managed_instances:
        raise StackConfigError(
            f"{where}.strategy: 'managed_instances' cannot serve a streaming agent here: its "
            "streaming runtime client (AWS_LAMBDA_EXEC_WRAPPER) replaces the Python runtime that "
            "serves Lambda Managed Instances' concurrent requests in several processes (see "
            f"{LMI_PYTHON_URL}), and serves one at a time; choose another strategy for it")
    if not TIMEOUT_LIMITS_S[0] <= agent.timeout_s <= MAX_STREAM_DURATION_S:
        raise StackConfigError(
            f"{where}.timeout_s: {agent.timeout_s} s is outside 1-{MAX_STREAM_DURATION_S} s: a "
            "streaming agent's stream lasts at most the function's timeout, and Lambda's longest "
            f"is {MAX_STREAM_DURATION_S} s; see {RESPONSE_STREAMING_URL}")
    for route, sla_ms in first_token_sla_ms.items():
        if not 0 < sla_ms <= agent.timeout_s * 1000:
            raise StackConfigError(
                f"{where}.timeout_s: {agent.timeout_s} s ends the function before the first-token "
                f"SLA of the streaming route {route} ({sla_ms:g} ms); raise timeout_s or lower the "
                "route's first_token_ms")
    if EXEC_WRAPPER_ENV in agent.environment:
        raise StackConfigError(
            f"{where}.environment.{EXEC_WRAPPER_ENV}: set by the deploy for an agent with a "
            f"streaming route (the streaming runtime client {STREAM_EXEC_WRAPPER}, see "
            f"{EXEC_WRAPPER_URL}); remove it here")


def _authorization(api: _Section) -> tuple[Authorization, JwtAuthorizerConfig | None]:
    """``http_api.authorization``: ``"none"``/``"iam"``, or ``{"type": ..., ...}`` (jwt: issuer,
    audience, scopes)."""
    raw = api.raw.get("authorization")
    if raw is None or isinstance(raw, str):
        kind = _choice(api, "authorization", "none", AUTHORIZATIONS, "values")
        if kind == "jwt":
            raise StackConfigError(
                f"{api.path}.authorization: 'jwt' needs the identity provider: write "
                '{"type": "jwt", "issuer": "https://...", "audience": ["<client id>"]}'
            )
        return kind, None
    head = _Section(raw, f"{api.path}.authorization", known=None)
    kind = _choice(head, "type", "none", AUTHORIZATIONS, "types")
    sec = _Section(raw, head.path, known=("type", "issuer", "audience", "scopes")
                   if kind == "jwt" else ("type",))
    if kind != "jwt":
        return kind, None
    issuer = sec.text("issuer")
    if not re.fullmatch(r"https://[^\s/?#]+(/[^\s?#]*)?", issuer):
        raise StackConfigError(
            f"{sec.path}.issuer: {issuer!r} is not an https:// URL; API Gateway fetches the "
            "issuer's signing keys over HTTPS (e.g. "
            "https://cognito-idp.us-east-1.amazonaws.com/<user pool id>), see "
            f"{JWT_AUTHORIZER_URL}"
        )
    if not sec.has("audience"):
        raise StackConfigError(f"{sec.path}: missing key 'audience' (the accepted aud or client_id "
                          'values, e.g. ["<app client id>"])')
    audience = _strings(sec, "audience", ())
    scopes = _strings(sec, "scopes", ()) if sec.has("scopes") else ()
    return kind, JwtAuthorizerConfig(issuer=issuer, audience=audience, scopes=scopes)


def _legacy_agents(top: _Section) -> tuple[dict[str, Any], str]:
    """The old ``warmstart.agent`` section as an ``agents`` map, and the warning that says so."""
    sec = top.section("agent", known=_LEGACY_AGENT_KEYS)
    agent = {k: v for k, v in sec.raw.items() if not str(k).startswith("_")}
    agent.update({k: list(v) if isinstance(v, tuple) else v for k, v in LEGACY_AGENT.items()})
    if top.has("degradation_parameter"):
        agent["degradation_parameter"] = top.raw["degradation_parameter"]
    moved = json.dumps({LEGACY_AGENT_NAME: agent}, sort_keys=False)
    warning = (
        f"{CONTEXT_KEY}.agent is the old single-agent key: read as agents.{LEGACY_AGENT_NAME} "
        "(code functions, path_prefix /, layers web, inference, model, overflow gpu). Migrate: "
        f'replace "agent" (and "degradation_parameter") with "agents": {moved}, then narrow '
        "code and layers to what the agent needs"
    )
    return {LEGACY_AGENT_NAME: agent}, warning


def _agents(top: _Section, known: tuple[str, ...]) -> tuple[Mapping[str, AgentConfig], tuple[str, ...]]:
    warnings: tuple[str, ...] = ()
    if top.has("agent") and top.has("agents"):
        raise StackConfigError(
            f"{top.path}: both 'agent' (the old single-agent key) and 'agents' are set; move the "
            "settings of 'agent' into 'agents' and remove 'agent'"
        )
    if top.has("agent"):
        raw, warning = _legacy_agents(top)
        bodies = [(LEGACY_AGENT_NAME, raw[LEGACY_AGENT_NAME], f"{top.path}.agent")]
        warnings = (warning,)
        where = f"{top.path}.agent"
    else:
        if top.has("degradation_parameter"):
            raise StackConfigError(
                f"{top.path}.degradation_parameter: with 'agents' each agent has its own parameter "
                "(default /warmstart/<name>/degradation-level); set "
                "agents.<name>.degradation_parameter instead"
            )
        section = top.section("agents", known=None)
        bodies = [(name, body, f"{section.path}.{name}") for name, body in section.raw.items()
                  if not str(name).startswith("_")]
        where = section.path
    agents: dict[str, AgentConfig] = {}
    for name, body, path in bodies:
        agents[name] = _agent(_Section(body, path, known=_AGENT_KEYS), name, known)
    if not agents:
        raise StackConfigError(f"{where}: declare at least one agent, e.g. "
                          '{"intent": {"handler": "functions.agent.handler.handler"}}')
    seen: dict[str, str] = {}
    parameters: dict[str, str] = {}
    for agent in agents.values():
        if agent.path_prefix in seen:
            raise StackConfigError(
                f"{where}.{agent.name}.path_prefix: {agent.path_prefix!r} is already the "
                f"prefix of agent {seen[agent.path_prefix]!r}; each agent needs its own path prefix"
            )
        seen[agent.path_prefix] = agent.name
        if agent.degradation_parameter in parameters:
            raise StackConfigError(
                f"{where}.{agent.name}.degradation_parameter: "
                f"{agent.degradation_parameter!r} is already the parameter of agent "
                f"{parameters[agent.degradation_parameter]!r}; each agent needs its own"
            )
        parameters[agent.degradation_parameter] = agent.name
    return MappingProxyType(agents), warnings


def duplicate_agents(text: str) -> list[str]:
    """Agent names declared twice under ``context.warmstart.agents`` of a ``cdk.json`` text.

    JSON parsers keep the last of two equal keys silently; this finds them. Returns ``[]`` when
    the text is not JSON (the reader reports that).
    """
    twice: dict[int, list[str]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                twice.setdefault(id(out), []).append(key)
            out[key] = value
        return out

    try:
        doc = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError:
        return []
    node: Any = doc
    for key in ("context", CONTEXT_KEY, "agents"):
        node = node.get(key) if isinstance(node, dict) else None
    return twice.get(id(node), []) if isinstance(node, dict) else []


def _check_unique_agents(text: str, origin: object) -> None:
    for name in duplicate_agents(text):
        raise StackConfigError(f"{CONTEXT_KEY}.agents.{name}: agent {name!r} is declared twice in "
                          f"{origin}; give each agent its own name")


def _price_overrides(items_sec: _Section, table: PriceTable) -> dict[str, Price]:
    """cdk.json's ``pricing.items``: each names an item of the table, with its own source."""
    overrides: dict[str, Price] = {}
    for name in items_sec.raw:
        if str(name).startswith("_"):
            continue
        if name not in table.items:
            raise StackConfigError(
                f"{items_sec.path}.{name}: unknown price item; an override must name an item of "
                f"{table.origin} ({', '.join(table.items)}). Add new prices to {PRICES_ORIGIN} "
                "with usd, unit and source"
            )
        item = items_sec.section(name, known=("usd", "unit", "source", "verified", "note"))
        usd = item.number("usd")
        if usd < 0:
            raise StackConfigError(f"{item.path}.usd: {usd} is negative")
        note = item.raw.get("note", "")
        if not isinstance(note, str):
            raise StackConfigError(f"{item.path}.note: expected a string, got {_show(note)}")
        overrides[name] = Price(
            usd=usd,
            unit=item.text("unit", table.items[name].unit),
            source=item.text("source"),
            verified=item.flag("verified", False),
            note=note,
        )
    return overrides


def _pricing(top: _Section, table: PriceTable) -> PricingConfig:
    """The shared price table with cdk.json's optional ``pricing.items`` overrides applied."""
    overrides: dict[str, Price] = {}
    if top.has("pricing"):
        sec = top.section("pricing", known=("region", "currency", "items"))
        for key in ("region", "currency"):
            if sec.has(key) and sec.text(key) != getattr(table, key):
                raise StackConfigError(
                    f"{sec.path}.{key}: {sec.text(key)!r} differs from the {key} of the price "
                    f"table {table.origin} ({getattr(table, key)!r}); prices for another {key} "
                    f"belong in {PRICES_ORIGIN}, not in cdk.json"
                )
        if sec.has("items"):
            overrides = _price_overrides(sec.section("items", known=None), table)
    merged = table.with_overrides(overrides, origin="cdk.json warmstart.pricing.items")
    missing = [
        name for name in REQUIRED_PRICES
        if name not in merged.items and not all(f"{name}_{a}" in merged.items for a in ARCHITECTURES)
    ]
    if missing:
        raise StackConfigError(
            f"{table.origin}: missing price(s) {', '.join(missing)}; "
            "each needs usd, unit and source (see tests/data/pricing.md)"
        )
    return PricingConfig(region=merged.region, items=merged.items, currency=merged.currency,
                         overridden=merged.overridden)


def parse_config(raw: Mapping[str, Any], *, prices: PriceTable | None = None,
                 layers_dir: Path = LAYERS_DIR) -> WarmstartConfig:
    """Turn the ``warmstart`` context dict into a validated :class:`WarmstartConfig`.

    Parameters
    ----------
    raw : Mapping[str, Any]
        The value of ``context.warmstart`` in ``cdk.json`` (after :func:`apply_strategy`).
    prices : warmers.pricing.PriceTable, optional
        The price table ``pricing.items`` overrides; default: the shared ``warmers/prices.json``.
    layers_dir : Path
        Where the layers an agent may declare live (:func:`known_layers`).

    Returns
    -------
    WarmstartConfig

    Raises
    ------
    StackConfigError
        On a missing or mistyped key, an unknown key, a value outside Lambda's limits, or a
        combination AWS Lambda refuses (SnapStart with provisioned concurrency, SnapStart on a
        runtime older than python3.12), an agent problem (bad name, unknown layer, two agents
        with one path prefix, a prefix not at a ``/`` boundary, a handler outside the agent's
        code, a reserved environment variable), a price override of an item the table does
        not have, or an unreadable price table. The message names the key and what to do.
    """
    if prices is None:
        try:
            prices = load_prices()
        except PriceTableError as exc:
            raise StackConfigError(str(exc)) from exc
    top = _Section(
        raw,
        CONTEXT_KEY,
        known=(
            "stack_name", "region", "agents", "agent", "http_api", "debug_resource",
            "degradation_parameter", "gpu_endpoint", "warmer", "pricing", "alarms", "variants",
            "logs", "account_concurrency_limit", "function_url_principals",
        ),
    )
    agents, warnings = _agents(top, known_layers(layers_dir))

    api = top.section(
        "http_api",
        known=("throttle_rate_per_s", "throttle_burst", "access_log_retention_days", "authorization"),
    )
    authorization, jwt = _authorization(api)
    http_api = HttpApiConfig(
        throttle_rate_per_s=api.number("throttle_rate_per_s"),
        throttle_burst=api.integer("throttle_burst"),
        access_log_retention_days=api.integer("access_log_retention_days", 30),
        authorization=authorization,
        jwt=jwt,
    )
    if http_api.throttle_rate_per_s <= 0 or http_api.throttle_burst < 1:
        raise StackConfigError(f"{api.path}: throttle_rate_per_s must be > 0 and throttle_burst >= 1")

    gpu_known = ("enabled", "instance_type", "model_asset", "contract")
    gpu = top.section("gpu_endpoint", known=None)
    gpu_enabled = gpu.flag("enabled", False)
    if gpu_enabled and not any(a.overflow == "gpu" for a in agents.values()):
        raise StackConfigError(
            f"{gpu.path}.enabled: the GPU endpoint is enabled but no agent declares "
            '"overflow": "gpu"; set it on the agents that overflow, or disable the endpoint'
        )
    gpu_contract = _contract(gpu, "contract")
    if gpu_enabled:
        check_overflow_contracts(agents, gpu_contract, gpu.path)
    warmer_known = ("enabled", "schedule")
    warmer = top.section("warmer", known=None)
    account_limit = top.integer("account_concurrency_limit", DEFAULT_ACCOUNT_CONCURRENCY)
    if account_limit < 1:
        raise StackConfigError(f"{top.path}.account_concurrency_limit: {account_limit} must be >= 1 "
                          f"(Lambda's default is {DEFAULT_ACCOUNT_CONCURRENCY}, see "
                          f"{LAMBDA_CONCURRENCY_URL})")
    _check_reservations(top, agents, warmer=warmer.flag("enabled", WARMER_ENABLED_DEFAULT),
                        account_limit=account_limit)
    logs_cfg = LogsConfig()
    if top.has("logs"):
        logs_sec = top.section("logs", known=("kms_key",))
        logs_cfg = LogsConfig(kms_key=logs_sec.flag("kms_key", False))

    alarms = top.section(
        "alarms",
        known=("period_s", "evaluation_periods", "datapoints_to_alarm", "errors_threshold",
               "throttles_threshold", "spillover_threshold", "duration_p99_ms"),
    )
    alarm_cfg = AlarmConfig(
        period_s=alarms.integer("period_s", 60),
        evaluation_periods=alarms.integer("evaluation_periods", 5),
        datapoints_to_alarm=alarms.integer("datapoints_to_alarm", 3),
        errors_threshold=alarms.integer("errors_threshold"),
        throttles_threshold=alarms.integer("throttles_threshold"),
        spillover_threshold=alarms.integer("spillover_threshold"),
        duration_p99_ms=alarms.integer("duration_p99_ms") if alarms.has("duration_p99_ms") else None,
    )
    if alarm_cfg.datapoints_to_alarm > alarm_cfg.evaluation_periods:
        raise StackConfigError(
            f"{alarms.path}: datapoints_to_alarm ({alarm_cfg.datapoints_to_alarm}) exceeds "
            f"evaluation_periods ({alarm_cfg.evaluation_periods})"
        )
    if alarm_cfg.period_s not in (10, 30) and alarm_cfg.period_s % 60:
        raise StackConfigError(f"{alarms.path}.period_s: {alarm_cfg.period_s} must be 10, 30 or a multiple of 60")

    region = raw.get("region")
    if region is not None and (not isinstance(region, str) or not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region)):
        raise StackConfigError(f"{CONTEXT_KEY}.region: {region!r} is not an AWS region such as us-east-1")

    return WarmstartConfig(
        stack_name=top.text("stack_name"),
        region=region,
        agents=agents,
        http_api=http_api,
        debug_resource=top.flag("debug_resource", False),
        gpu_endpoint=GpuEndpointConfig(
            enabled=gpu_enabled,
            instance_type=gpu.text("instance_type"),
            model_asset=gpu.text("model_asset"),
            options=gpu.extras(gpu_known),
            contract=gpu_contract,
        ),
        warmer=WarmerDeployConfig(
            enabled=warmer.flag("enabled", WARMER_ENABLED_DEFAULT),
            schedule=warmer.text("schedule"),
            options=warmer.extras(warmer_known),
        ),
        pricing=_pricing(top, prices),
        alarms=alarm_cfg,
        warnings=warnings,
        logs=logs_cfg,
        account_concurrency_limit=account_limit,
        function_url_principals=function_url_principals(top),
    )


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _set_strategy(agent: dict[str, Any], strategy: str) -> None:
    """A variant's strategy on one agent: bounds for ``provisioned``, none for the others."""
    agent["strategy"] = strategy
    if strategy != "managed_instances":
        agent.pop("managed_instances", None)  # its capacity provider is for LMI only
    if strategy != "provisioned":
        agent["provisioned_concurrency"] = None
    elif not agent.get("provisioned_concurrency"):
        agent["provisioned_concurrency"] = dict(DEFAULT_PROVISIONED_CONCURRENCY)


def apply_strategy(raw: Mapping[str, Any], strategy: str | None) -> dict[str, Any]:
    """Apply the variant ``strategy`` (from ``-c warmstart:strategy=NAME``) to every agent.

    The variant's optional partial config under ``variants.<NAME>`` is deep-merged over the base
    first (a ``null`` value removes a setting; ``agents.<name>`` entries refine existing agents,
    e.g. their provisioned-concurrency bounds). Then every agent gets strategy ``NAME``: for
    ``provisioned``, an agent without bounds gets :data:`DEFAULT_PROVISIONED_CONCURRENCY`
    (min 1, max 10, target 0.7); for the other strategies, ``provisioned_concurrency`` is removed
    (SnapStart, pings, Lambda Managed Instances and on-demand take none), and for every strategy
    but ``managed_instances`` the agent's ``managed_instances`` block is removed. The old single ``agent`` key is treated the same.

    Parameters
    ----------
    raw : Mapping[str, Any]
        The ``warmstart`` context dict.
    strategy : str or None
        The variant name; ``None`` or ``""`` returns a copy of ``raw`` unchanged.

    Raises
    ------
    StackConfigError
        If ``strategy`` is not a strategy, or the variant refines an agent that does not exist.
    """
    if not isinstance(raw, Mapping):
        raise StackConfigError(f"{CONTEXT_KEY}: expected an object, got {_show(raw)}")
    if not strategy:
        return copy.deepcopy(dict(raw))
    if strategy not in STRATEGIES:
        raise StackConfigError(f"{STRATEGY_CONTEXT_KEY}: unknown strategy {strategy!r}; "
                          f"valid strategies are {', '.join(STRATEGIES)}")
    variants = raw.get("variants") or {}
    variant = variants.get(strategy) if isinstance(variants, Mapping) else None
    variant = variant if isinstance(variant, Mapping) else {}
    agents, refined = raw.get("agents"), variant.get("agents")
    # checked before the merge, which would let the variant's object replace a bad value
    for path, value in (("agents", agents), (f"variants.{strategy}.agents", refined)):
        if value is not None and not isinstance(value, Mapping):
            raise StackConfigError(f"{CONTEXT_KEY}.{path}: expected an object, got {_show(value)}")
    if isinstance(agents, Mapping) and isinstance(refined, Mapping):
        for name in refined:
            if not str(name).startswith("_") and name not in agents:
                known = ", ".join(k for k in agents if not str(k).startswith("_"))
                raise StackConfigError(f"{CONTEXT_KEY}.variants.{strategy}.agents.{name}: no agent "
                                  f"{name!r} to apply the variant to; known agents: {known}")
    merged = _deep_merge(dict(raw), variant)
    if isinstance(merged.get("agent"), dict):
        _set_strategy(merged["agent"], strategy)
    for name, agent in (merged.get("agents") or {}).items():
        if not str(name).startswith("_") and isinstance(agent, dict):
            _set_strategy(agent, strategy)
    return merged


def config_from_context(context: Mapping[str, Any], *, strategy: str | None = None,
                        prices: PriceTable | None = None,
                        layers_dir: Path = LAYERS_DIR) -> WarmstartConfig:
    """Parse a CDK context mapping (``{"warmstart": {...}, "warmstart:strategy": ...}``).

    Raises
    ------
    StackConfigError
        If ``warmstart`` is missing or invalid (see :func:`parse_config`).
    """
    if CONTEXT_KEY not in context:
        raise StackConfigError(f"context key {CONTEXT_KEY!r} is missing: run from the repository root (cdk.json)")
    chosen = strategy if strategy is not None else context.get(STRATEGY_CONTEXT_KEY)
    return parse_config(apply_strategy(context[CONTEXT_KEY], chosen), prices=prices,
                        layers_dir=layers_dir)


def check_cdk_json(cdk_json: Path) -> None:
    """Refuse a ``cdk.json`` that declares one agent name twice (JSON keeps only the last).

    Raises
    ------
    StackConfigError
        ``warmstart.agents.<name>: agent '<name>' is declared twice in <file>; ...``.
    """
    try:
        text = cdk_json.read_text(encoding="utf-8")
    except OSError:
        return
    _check_unique_agents(text, cdk_json)


def load_config(cdk_json: Path, *, strategy: str | None = None,
                prices: PriceTable | None = None,
                layers_dir: Path = LAYERS_DIR) -> WarmstartConfig:
    """Read ``cdk.json`` and parse its ``warmstart`` context (for tools that do not synth).

    Raises
    ------
    StackConfigError
        If the file is not JSON, declares an agent twice, or its ``warmstart`` context is invalid.
    """
    try:
        text = cdk_json.read_text(encoding="utf-8")
        document = json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        raise StackConfigError(f"{cdk_json}: cannot read cdk.json: {exc}") from exc
    _check_unique_agents(text, cdk_json)
    return config_from_context(document.get("context", {}), strategy=strategy, prices=prices,
                               layers_dir=layers_dir)
