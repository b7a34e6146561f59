"""Warmer configuration: read once from the environment into a typed, frozen object.

Environment (set by the CDK construct ``infra/constructs/warmer.py`` or the local stack):

* ``WARMSTART_WARMER_CONFIG`` - JSON: ``{"aliases": [{"function_name", "alias", "strategy",
  "memory_mb", "floor", "cap", "budget_usd_per_hour", "degradation_parameter", ...}],
  (strategy ``managed_instances``: Lambda Managed Instances, ``floor``/``cap`` the minimum and
  maximum execution environments, optional ``"managed_instances": {"instance_type",
  "instance_vcpus", "vcpus_per_environment", "concurrency_per_environment",
  "provider_max_vcpus", "scale_out_lead_min"}``, ``warmers.lmi.LmiSettings``)
  "actuator": "autoscaling"|"lambda", "lead_min": 15, "history_days": 14,
  "planning_quantile": 0.95, "architecture": "x86_64", "unreserved_concurrency": null}``
  (``unreserved_concurrency``: use this instead of ``GetAccountSettings``, e.g. the local
  emulator's limit; ``"reconcile_versions": false`` skips ``ListProvisionedConcurrencyConfigs``,
  which the local emulator does not answer; ``"endpoints": [{"endpoint_name", "agents":
  ["FUNCTION:ALIAS", ...], "target": "variant"|"inference_component", "variant_name",
  "inference_component", "instance_type", "floor", "cap", "budget_usd_per_hour",
  "concurrent_requests_per_instance", "environment_idle_min", "failed_answer_usd",
  "capacity_parameter", "instance_usd_per_hour", "spend_guard_window_min", "spend_guard_usd",
  "agent_services", "metrics_namespace"}]``: the GPU overflow endpoints whose capacity
  the warmer plans, ``warmers.plan.endpoint.EndpointPolicy``; ``"endpoint_actuator":
  "autoscaling"|"sagemaker"``: set their capacity through Application Auto Scaling (default,
  what the CDK construct grants) or SageMaker's own API
  (``warmers.actuators.SageMakerCapacityActuator``, the local stack: moto's Application Auto
  Scaling has no inference-component dimension))
* ``WARMSTART_WARMER_STATE_PREFIX`` - SSM path under which the last good plan of each alias is
  kept (default ``/warmstart/warmer``; empty string: in memory only).
* ``WARMSTART_AWS_ENDPOINT_URL`` - optional endpoint for every client (moto server, local stack).
* ``WARMSTART_LAMBDA_ENDPOINT_URL`` - optional endpoint for the Lambda client only (the local
  emulator answers Invoke and the provisioned-concurrency API).
* ``AWS_REGION`` - region of the clients.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

from warmers.cost import CostModel
from warmers.forecast import ForecastConfig
from warmers.plan.endpoint import EndpointPolicy
from warmers.plan.policy import AliasPolicy, PlannerConfig

ActuatorKind = Literal["autoscaling", "lambda"]
EndpointActuatorKind = Literal["autoscaling", "sagemaker"]
E = TypeVar("E")


class ConfigError(ValueError):
    """The warmer's configuration is invalid (the message names the key)."""


@dataclass(frozen=True)
class WarmerConfig:
    """Everything one warmer run needs besides clients and the time."""

    policies: tuple[AliasPolicy, ...]
    endpoints: tuple[EndpointPolicy, ...] = ()
    forecast: ForecastConfig = field(default_factory=ForecastConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    actuator: ActuatorKind = "autoscaling"
    endpoint_actuator: EndpointActuatorKind = "autoscaling"
    history_min: int = 14 * 1440
    state_prefix: str = "/warmstart/warmer"
    endpoint_url: str | None = None
    lambda_endpoint_url: str | None = None
    region: str = "us-east-1"
    unreserved_concurrency: int | None = None
    reconcile_versions: bool = True
    dry_run: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **overrides: Any) -> WarmerConfig:
        """Build from the JSON document described in the module docstring.

        Raises
        ------
        ConfigError
            On a missing/unknown key or an invalid value.
        """
        if not isinstance(data, Mapping):
            raise ConfigError("warmer config must be a JSON object")
        aliases = data.get("aliases")
        if not isinstance(aliases, list) or not aliases:
            raise ConfigError("warmer config needs a non-empty 'aliases' list")
        policies = _entries(aliases, "aliases", AliasPolicy, _alias_entry)
        keys = [p.key for p in policies]
        if len(set(keys)) != len(keys):
            raise ConfigError(f"aliases: duplicate function:alias in {keys}")
        endpoints = _endpoints(data.get("endpoints", []), set(keys))
        actuator = data.get("actuator", "autoscaling")
        if actuator not in ("autoscaling", "lambda"):
            raise ConfigError(f"actuator must be 'autoscaling' or 'lambda', got {actuator!r}")
        endpoint_actuator = data.get("endpoint_actuator", "autoscaling")
        if endpoint_actuator not in ("autoscaling", "sagemaker"):
            raise ConfigError("endpoint_actuator must be 'autoscaling' or 'sagemaker', got "
                              f"{endpoint_actuator!r}")
        try:
            lead = int(data.get("lead_min", 15))
            q = float(data.get("planning_quantile", 0.95))
            quantiles = tuple(sorted({0.5, 0.9, 0.95, 0.99, q}))
            forecast = ForecastConfig(lead_min=lead, quantiles=quantiles, planning_quantile=q)
            planner = PlannerConfig(planning_quantile=q, cost=CostModel.us_east_1(
                data.get("architecture", "x86_64")))
            history_min = int(float(data.get("history_days", 14)) * 1440)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"warmer config: {exc}") from exc
        if not 60 <= history_min <= 14 * 1440:
            raise ConfigError("history_days must be between 1/24 and 14 (1-minute retention)")
        unreserved = data.get("unreserved_concurrency")
        if unreserved is not None and (not isinstance(unreserved, int) or unreserved < 0):
            raise ConfigError("unreserved_concurrency must be a non-negative int or null")
        reconcile = data.get("reconcile_versions", True)
        if not isinstance(reconcile, bool):
            raise ConfigError("reconcile_versions must be true or false")
        return cls(policies=tuple(policies), endpoints=endpoints, forecast=forecast,
                   planner=planner,
                   actuator=actuator, endpoint_actuator=endpoint_actuator,
                   history_min=history_min,
                   unreserved_concurrency=unreserved, reconcile_versions=reconcile, **overrides)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WarmerConfig:
        """Read the environment once (the handler passes ``os.environ``).

        Raises
        ------
        ConfigError
            When ``WARMSTART_WARMER_CONFIG`` is missing or not valid JSON.
        """
        raw = env.get("WARMSTART_WARMER_CONFIG")
        if not raw:
            raise ConfigError("WARMSTART_WARMER_CONFIG is not set (JSON with an 'aliases' list)")
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"WARMSTART_WARMER_CONFIG is not valid JSON: {exc}") from exc
        return cls.from_dict(
            data, state_prefix=env.get("WARMSTART_WARMER_STATE_PREFIX", "/warmstart/warmer"),
            endpoint_url=env.get("WARMSTART_AWS_ENDPOINT_URL") or None,
            lambda_endpoint_url=env.get("WARMSTART_LAMBDA_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION", "us-east-1"),
            dry_run=env.get("WARMSTART_WARMER_DRY_RUN", "false").lower() == "true")


def _entries(items: list[Any], key: str, cls: type[E],
             prepare: Callable[[str, Mapping[str, Any]], dict[str, Any]] | None = None
             ) -> list[E]:
    """``cls(**item)`` for each object of the list ``key``, a ConfigError naming the entry
    otherwise (not an object, unknown keys, refused by ``prepare`` or by ``cls``)."""
    allowed = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    out = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where} must be an object")
        unknown = set(item) - allowed
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
        kwargs = dict(item) if prepare is None else prepare(where, item)
        try:
            out.append(cls(**kwargs))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    return out


def _alias_entry(where: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """An ``aliases`` entry with its ``managed_instances`` object made an ``LmiSettings``
    (strategy ``managed_instances``: Lambda Managed Instances, ``warmers.lmi``).

    Raises
    ------
    ConfigError
        When ``managed_instances`` is not an object, has unknown keys or invalid values, or is
        given for another strategy.
    """
    raw = item.get("managed_instances")
    if raw is None:
        return dict(item)
    if item.get("strategy") != "managed_instances":
        raise ConfigError(f"{where}: managed_instances is only for strategy "
                          f"'managed_instances', got strategy {item.get('strategy')!r}")
    from warmers.lmi import LmiConfigError, LmiSettings

    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}.managed_instances must be an object")
    allowed = {f.name for f in fields(LmiSettings)}
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}.managed_instances: unknown keys {sorted(unknown)} "
                          f"(known: {sorted(allowed)})")
    try:
        settings = LmiSettings(**raw)
    except (TypeError, LmiConfigError) as exc:
        raise ConfigError(f"{where}.managed_instances: {exc}") from exc
    return {**item, "managed_instances": settings}


def _endpoints(raw: Any, managed: set[str]) -> tuple[EndpointPolicy, ...]:
    """The ``endpoints`` list: each a known EndpointPolicy whose agents are managed aliases.

    Raises
    ------
    ConfigError
        Naming the entry and what is wrong.
    """
    if not isinstance(raw, list):
        raise ConfigError("endpoints must be a list")

    def agents(where: str, item: Mapping[str, Any]) -> dict[str, Any]:
        keys = item.get("agents")
        if not isinstance(keys, list) or not all(isinstance(a, str) for a in keys):
            raise ConfigError(f"{where}: agents must be a list of 'FUNCTION:ALIAS'")
        strays = [a for a in keys if a not in managed]
        if strays:
            raise ConfigError(f"{where}: agents {strays} are not in 'aliases'")
        return {**item, "agents": tuple(keys)}

    out = _entries(raw, "endpoints", EndpointPolicy, agents)
    names = [e.endpoint_name for e in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"endpoints: duplicate endpoint_name in {names}")
    return tuple(out)


def boto_config(max_pool_connections: int = 50) -> Any:
    """botocore config for the warmer's clients: standard retry mode (throttling, bounded)."""
    from botocore.config import Config

    return Config(retries={"mode": "standard", "max_attempts": 5},
                  max_pool_connections=max_pool_connections, connect_timeout=5, read_timeout=20)
