"""The warmstart stack: composes the constructs, adds grants and outputs; no resources of its own.

CDK paths (construct ids are derived from the agent names, so a path stays the same as long as
the agent keeps its name; ``<S>`` is the stack name, ``Warmstart`` by default):

=====================================================  =============================================
``<S>/Layers/<layer>-<runtime>-<arch>/Layer``           each layer once per runtime and architecture,
                                                        shared by the agents that declare it
``<S>/Agent-<name>/Function/Resource``                  the agent's function (``AWS::Lambda::Function``)
``<S>/Agent-<name>/Alias``                              its alias ``live``
``<S>/Agent-<name>/{Role,LogGroup,DegradationLevel}``    its role, log group, SSM level parameter
``<S>/Agent-<name>/{Errors,Throttles,DurationP99,Spillover}Alarm``
``<S>/Agent-<name>/Alias/FunctionUrl``                  a streaming agent's function URL (on ``live``),
                                                        and its ``TimeToFirstTokenP95Alarm``
``<S>/Agent-<name>/CapacityProvider``                   strategy ``managed_instances``: the capacity
                                                        provider (created, with ``OperatorRole``, or
                                                        imported by ARN)
``<S>/HttpApi/Api``                                     the one HTTP API (``$default`` -> root agent,
                                                        ``ANY /<prefix>[/{proxy+}]`` -> the others)
``<S>/Dashboard/Dashboard``                             one band of widgets per agent
``<S>/GpuEndpoint``, ``<S>/Warmer``                     when enabled
``<S>/LogKey/Key``                                      the log groups' KMS key, with ``logs.kms_key``
=====================================================  =============================================

Outputs: ``ApiUrl``, ``DashboardName``, ``Agents`` (the names), and per agent (``<Name>`` =
``PascalCase`` of the name, e.g. ``Intent``, ``OrderLookup``): ``<Name>FunctionName``,
``<Name>AliasArn``, ``<Name>Url``, ``<Name>Strategy``, ``<Name>DegradationParameterName``; a
streaming agent (one whose declaration has a ``stream=True`` route) also ``<Name>StreamUrl``,
its function URL (``InvokeMode: RESPONSE_STREAM``, ``AuthType: AWS_IAM``: sign with SigV4,
service ``lambda``; see `infra.constructs.agent_function`); an agent of strategy
``managed_instances`` also ``<Name>CapacityProviderArn``, the capacity provider its version
runs on (`infra.constructs.managed_instances`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from functions.runtime.contract import environment as names
from infra.config import LAYERS_DIR, StackConfigError, WarmstartConfig
from infra.constructs.agent_function import (
    METRICS_NAMESPACE,
    AgentFunction,
    agent_construct_id,
    output_prefix,
)
from infra.constructs.bundling import REPO_ROOT
from infra.constructs.dashboard import DashboardAgent, WarmstartDashboard
from infra.constructs.declaration import AgentDeclaration, read_declaration
from infra.constructs.http_api import AgentHttpApi, ApiRoute
from infra.constructs.layers import ImportCheck, LayerCatalog, ModelLayer, check_function_imports
from infra.constructs.log_key import LogKey

#: The warmer's own function runs on this runtime unless ``warmer.options`` says otherwise.
WARMER_RUNTIME = ("python3.12", "x86_64")


class WarmstartStack(cdk.Stack):
    """Every agent's function (alias ``live``) behind one HTTP API, with layers, alarms and a dashboard.

    Parameters
    ----------
    config : WarmstartConfig
        The validated ``warmstart`` context.
    layers_dir : Path
        Folder with one sub-folder per dependency layer (``requirements.txt``) and ``model/artifact``.
    code_root : Path
        Repository root the agents' ``code`` folders are relative to.

    Attributes
    ----------
    config : WarmstartConfig
    layers : LayerCatalog
        The layers, built once per runtime and architecture.
    agents : dict[str, AgentFunction]
        Agent name -> its function, alias and alarms, in ``cdk.json`` order.
    import_checks : dict[str, ImportCheck or None]
        Agent name -> the synth's import check of its function (``None``: bundling skipped).
    declarations : dict[str, AgentDeclaration]
        Agent name -> its declared routes (read from its handler module at synth); those with
        a streaming route get a function URL.
    http_api : AgentHttpApi
    dashboard : WarmstartDashboard
    forecast_layer : construct or None
        The warmer's numpy layer; built only when the warmer is enabled.
    log_key : infra.constructs.log_key.LogKey or None
        The log groups' customer-managed key; only with ``logs.kms_key``.
    warmer, gpu_endpoint : construct or None
        Added by the warmer / GPU endpoint constructs when enabled in config.

    Raises
    ------
    infra.constructs.bundling.BundlingError
        If an agent's code folder, a layer's requirements or the model artifact is missing.
    infra.constructs.layers.MissingDependencyError
        If an agent's handler, app or hooks import a module its code and layers do not hold.
    infra.constructs.declaration.DeclarationReadError
        If an agent's handler module cannot be imported to read its routes.
    infra.config.StackConfigError
        A streaming agent `infra.config.check_streaming_agent` refuses.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: WarmstartConfig,
        layers_dir: Path = LAYERS_DIR,
        code_root: Path = REPO_ROOT,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.layers = LayerCatalog(self, "Layers", layers_dir=layers_dir)
        self.log_key = LogKey(self, "LogKey") if config.logs.kms_key else None
        key = self.log_key.key if self.log_key is not None else None

        self.agents: dict[str, AgentFunction] = {}
        self.import_checks: dict[str, ImportCheck | None] = {}
        self.declarations: dict[str, AgentDeclaration] = {}
        url_principals = [_principal(p) for p in config.function_url_principals]
        for name, agent_cfg in config.agents.items():
            # streaming is what the agent's own declaration says (a stream=True route)
            self.declarations[name] = read_declaration(agent_cfg.handler, agent=name, code_root=code_root,
                                                       p0_sla_ms=agent_cfg.sla_ms)
            # each package once across the function's layers (LayerCatalog.for_function)
            shipped = self.layers.for_function(agent_cfg.layers, agent=name, runtime=agent_cfg.runtime,
                                               architecture=agent_cfg.architecture)
            environment = {names.ENV_DEBUG_RESOURCE: "true" if config.debug_resource else "false"}
            if agent_cfg.uses_model:
                environment[names.ENV_MODEL_DIR] = ModelLayer.mount_path
            self.agents[name] = AgentFunction(
                self,
                agent_construct_id(name),
                agent=agent_cfg,
                alarms=config.alarms,
                layers=[(b.name, b.layer, b.unzipped_size_bytes) for b in shipped],
                environment=environment,
                code_root=code_root,
                log_key=key,
                declaration=self.declarations[name],
                function_url_principals=url_principals,
            )
            # the handler, its app and hooks import from the function's code and layers alone
            self.import_checks[name] = check_function_imports(
                self.agents[name].function, agent=name, handler=agent_cfg.handler,
                runtime=agent_cfg.runtime, architecture=agent_cfg.architecture, layers=shipped)

        self.http_api = AgentHttpApi(
            self, "HttpApi", config=config.http_api, log_key=key,
            routes=[ApiRoute(name, a.agent.path_prefix, a.alias) for name, a in self.agents.items()],
        )
        self.dashboard = WarmstartDashboard(
            self,
            "Dashboard",
            namespace=METRICS_NAMESPACE,
            agents=[DashboardAgent(
                name=name, alias=a.alias, log_group=a.log_group, sla_ms=a.agent.sla_ms,
                provisioned=a.agent.strategy == "provisioned", path_prefix=a.agent.path_prefix,
                strategy=a.agent.strategy,
                target_utilization=(a.agent.provisioned_concurrency.target_utilization
                                    if a.agent.provisioned_concurrency else 0.7),
                first_token_ms=a.first_token_ms,
            ) for name, a in self.agents.items()],
        )

        # Extension points. The GPU endpoint (overflow) and the warmer are constructs of their own
        # (infra/constructs/gpu_endpoint.py, infra/constructs/warmer.py); each is a few lines here.
        self.gpu_endpoint: Any = None
        if config.gpu_endpoint.enabled:
            module = _extension("gpu_endpoint", "warmstart.gpu_endpoint.enabled")
            self.gpu_endpoint = module.GpuEndpoint(self, "GpuEndpoint", config=config.gpu_endpoint)
            if config.warmer.enabled and config.overflow_agents:  # the warmer plans its capacity
                self.gpu_endpoint.manage_capacity()
            for agent_cfg in config.overflow_agents:  # one endpoint, shared by every overflow agent
                # sets WARMSTART_OVERFLOW_ENDPOINT_NAME, grants invoke to that agent's role only
                self.gpu_endpoint.connect(self.agents[agent_cfg.name])

        self.forecast_layer: Any = None
        self.warmer: Any = None
        if config.warmer.enabled:
            module = _extension("warmer", "warmstart.warmer.enabled")
            options = config.warmer.options
            runtime = str(options.get("runtime", WARMER_RUNTIME[0]))
            architecture = str(options.get("architecture", WARMER_RUNTIME[1]))
            self.forecast_layer = self.layers.get("forecast", runtime=runtime, architecture=architecture)
            self.warmer = module.Warmer(
                self, "Warmer", config=config, agents=list(self.agents.values()),
                forecast_layer=self.forecast_layer.layer, log_key=key,
                endpoint=self.gpu_endpoint if config.overflow_agents else None,
            )

        self.layers.prune()  # a layer only its deduplicated copies are shipped of: not in the template
        cdk.CfnOutput(self, "ApiUrl", value=self.http_api.url, description="HTTP API base URL")
        cdk.CfnOutput(self, "DashboardName", value=self.dashboard.dashboard.dashboard_name)
        cdk.CfnOutput(self, "Agents", value=",".join(self.agents),
                      description="agent names; each has <Name>FunctionName, <Name>AliasArn, <Name>Url")
        for name, agent in self.agents.items():
            prefix = output_prefix(name)
            cdk.CfnOutput(self, f"{prefix}FunctionName", value=agent.function.function_name,
                          description=f"agent {name}: function name")
            cdk.CfnOutput(self, f"{prefix}AliasArn", value=agent.alias.function_arn,
                          description=f"agent {name}: invoke this (alias live), never the unqualified function")
            cdk.CfnOutput(self, f"{prefix}Url", value=self.http_api.agent_url(name, agent.agent.path_prefix),
                          description=f"agent {name}: base URL (path prefix {agent.agent.path_prefix})")
            cdk.CfnOutput(self, f"{prefix}Strategy", value=agent.agent.strategy)
            cdk.CfnOutput(self, f"{prefix}DegradationParameterName",
                          value=agent.degradation_parameter.parameter_name)
            if agent.function_url is not None:
                cdk.CfnOutput(self, f"{prefix}StreamUrl", value=agent.function_url.url,
                              description=f"agent {name}: streaming function URL (alias live, "
                                          "RESPONSE_STREAM, AWS_IAM: sign requests with SigV4, "
                                          "service lambda)")
            if agent.capacity is not None:
                cdk.CfnOutput(self, f"{prefix}CapacityProviderArn", value=agent.capacity.arn,
                              description=f"agent {name}: the capacity provider its version runs "
                                          "on (Lambda Managed Instances)")


def _principal(entry: str) -> iam.IPrincipal:
    """A ``function_url_principals`` entry: an account id, else an IAM ARN."""
    return iam.AccountPrincipal(entry) if entry.isdigit() else iam.ArnPrincipal(entry)


def _extension(name: str, flag: str) -> Any:
    """Import ``infra.constructs.<name>`` or say which flag asked for it."""
    module = f"infra.constructs.{name}"
    if importlib.util.find_spec(module) is None:
        raise StackConfigError(f"{flag} is true but {module} does not exist yet; set it to false")
    return importlib.import_module(module)
