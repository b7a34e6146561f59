"""The warmstart stack: composes the constructs, adds grants and outputs; no resources of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from infra.config import ConfigError, WarmstartConfig
from infra.constructs.agent_function import METRICS_NAMESPACE, AgentFunction
from infra.constructs.bundling import REPO_ROOT
from infra.constructs.dashboard import WarmstartDashboard
from infra.constructs.http_api import AgentHttpApi
from infra.constructs.layers import DependencyLayer, ModelLayer

LAYERS_DIR = REPO_ROOT / "layers"


class WarmstartStack(cdk.Stack):
    """Agent function (alias ``live``) behind an HTTP API, with layers, alarms and a dashboard.

    Parameters
    ----------
    config : WarmstartConfig
        The validated ``warmstart`` context.
    layers_dir : Path
        Folder with ``web/``, ``inference/``, ``forecast/`` requirements and ``model/artifact``.

    Attributes
    ----------
    config : WarmstartConfig
    web_layer, inference_layer : DependencyLayer
    model_layer : ModelLayer
    agent : AgentFunction
    http_api : AgentHttpApi
    dashboard : WarmstartDashboard
    forecast_layer : DependencyLayer or None
        Built only when the warmer is enabled (the warmer's dependencies).
    warmer, gpu_endpoint : construct or None
        Added by the warmer / GPU endpoint constructs when enabled in config.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: WarmstartConfig,
        layers_dir: Path = LAYERS_DIR,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        agent_cfg = config.agent
        runtime, architecture = agent_cfg.runtime, agent_cfg.architecture

        self.web_layer = DependencyLayer(
            self, "WebLayer", requirements=layers_dir / "web" / "requirements.txt",
            description="warmstart web: fastapi, mangum, pydantic, powertools, snapshot-restore-py",
            runtime=runtime, architecture=architecture,
        )
        self.inference_layer = DependencyLayer(
            self, "InferenceLayer", requirements=layers_dir / "inference" / "requirements.txt",
            no_deps=True, description="warmstart inference: onnxruntime, tokenizers, numpy",
            runtime=runtime, architecture=architecture,
        )
        self.model_layer = ModelLayer(self, "ModelLayer", artifact_dir=layers_dir / "model" / "artifact",
                                      runtime=runtime, architecture=architecture)

        self.agent = AgentFunction(
            self,
            "Agent",
            agent=agent_cfg,
            alarms=config.alarms,
            layers=[
                ("web", self.web_layer.layer, self.web_layer.unzipped_size_bytes),
                ("inference", self.inference_layer.layer, self.inference_layer.unzipped_size_bytes),
                ("model", self.model_layer.layer, self.model_layer.unzipped_size_bytes),
            ],
            environment={
                "WARMSTART_MODEL_DIR": ModelLayer.mount_path,
                "WARMSTART_DEBUG_RESOURCE": "true" if config.debug_resource else "false",
            },
            degradation_parameter_name=config.degradation_parameter,
        )
        self.http_api = AgentHttpApi(self, "HttpApi", target=self.agent.alias, config=config.http_api)
        self.dashboard = WarmstartDashboard(
            self,
            "Dashboard",
            alias=self.agent.alias,
            log_group=self.agent.log_group,
            namespace=METRICS_NAMESPACE,
            sla_ms=agent_cfg.sla_ms,
            provisioned=agent_cfg.strategy == "provisioned",
        )

        # Extension points. The GPU endpoint (overflow) and the warmer are constructs of their own
        # (infra/constructs/gpu_endpoint.py, infra/constructs/warmer.py); each is a few lines here.
        self.gpu_endpoint: Any = None
        if config.gpu_endpoint.enabled:
            module = _extension("gpu_endpoint", "warmstart.gpu_endpoint.enabled")
            self.gpu_endpoint = module.GpuEndpoint(self, "GpuEndpoint", config=config.gpu_endpoint)
            self.gpu_endpoint.connect(self.agent)  # sets WARMSTART_OVERFLOW_ENDPOINT_NAME, grants invoke

        self.forecast_layer: DependencyLayer | None = None
        self.warmer: Any = None
        if config.warmer.enabled:
            module = _extension("warmer", "warmstart.warmer.enabled")
            self.forecast_layer = DependencyLayer(
                self, "ForecastLayer", requirements=layers_dir / "forecast" / "requirements.txt",
                description="warmstart forecast: numpy", runtime=runtime, architecture=architecture,
            )
            self.warmer = module.Warmer(
                self, "Warmer", config=config, agent=self.agent, forecast_layer=self.forecast_layer.layer,
            )

        cdk.CfnOutput(self, "ApiUrl", value=self.http_api.url, description="HTTP API base URL")
        cdk.CfnOutput(self, "FunctionName", value=self.agent.function.function_name)
        cdk.CfnOutput(self, "AliasArn", value=self.agent.alias.function_arn,
                      description="invoke this (alias live), never the unqualified function")
        cdk.CfnOutput(self, "Strategy", value=agent_cfg.strategy)
        cdk.CfnOutput(self, "DegradationParameterName",
                      value=self.agent.degradation_parameter.parameter_name)
        cdk.CfnOutput(self, "DashboardName", value=self.dashboard.dashboard.dashboard_name)


def _extension(name: str, flag: str) -> Any:
    """Import ``infra.constructs.<name>`` or say which flag asked for it."""
    module = f"infra.constructs.{name}"
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"{flag} is true but {module} does not exist yet; set it to false")
    return importlib.import_module(module)
