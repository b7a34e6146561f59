"""Warmer configuration: read once from the environment into a typed, frozen object.

Environment (set by the CDK construct ``infra/constructs/warmer.py`` or the local stack; the
names are the contract's, `functions.runtime.contract.environment`):

* ``WARMSTART_WARMER_CONFIG`` - the warmer's document, JSON: its schema, version and reader are
  the deploy-to-run contract's (`functions.runtime.contract.warmer_document.WarmerDocument`:
  ``{"version": 1, "aliases": [{"function_name", "alias", "strategy", "memory_mb", "floor",
  "cap", "budget_usd_per_hour", "degradation_parameter", ...}], "endpoints": [...],
  "actuator", "endpoint_actuator", "lead_min", "history_days", "planning_quantile",
  "architecture", "unreserved_concurrency", "reconcile_versions"}``). Here each ``aliases``
  entry becomes a ``warmers.plan.policy.AliasPolicy`` (its ``managed_instances`` object a
  ``warmers.lmi.LmiSettings``: strategy ``managed_instances``, Lambda Managed Instances) and
  each ``endpoints`` entry a ``warmers.plan.endpoint.EndpointPolicy``; ``"endpoint_actuator":
  "sagemaker"`` sets endpoint capacity through SageMaker's own API
  (``warmers.actuators.SageMakerCapacityActuator``, the local stack: moto's Application Auto
  Scaling has no inference-component dimension).
* ``WARMSTART_WARMER_STATE_PREFIX`` - SSM path under which the last good plan of each alias is
  kept (default ``/warmstart/warmer``; empty string: in memory only).
* ``WARMSTART_AWS_ENDPOINT_URL`` - optional endpoint for every client (moto server, local stack).
* ``WARMSTART_LAMBDA_ENDPOINT_URL`` - optional endpoint for the Lambda client only (the local
  emulator answers Invoke and the provisioned-concurrency API).
* ``WARMSTART_WARMER_DRY_RUN`` - ``true``: plan, apply nothing.
* ``AWS_REGION`` - region of the clients.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

from functions.runtime.contract import ContractError
from functions.runtime.contract import environment as names
from functions.runtime.contract.warmer_document import (
    DocumentError,
    WarmerDocument,
    entry_values,
)
from warmers.cost import CostModel
from warmers.forecast import ForecastConfig
from warmers.plan.endpoint import EndpointPolicy
from warmers.plan.policy import AliasPolicy, PlannerConfig

ActuatorKind = Literal["autoscaling", "lambda"]
EndpointActuatorKind = Literal["autoscaling", "sagemaker"]
E = TypeVar("E")
#: Where the last good plans are kept when the environment does not say.
DEFAULT_STATE_PREFIX = "/warmstart/warmer"


class WarmerConfigError(ContractError):
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
    state_prefix: str = DEFAULT_STATE_PREFIX
    endpoint_url: str | None = None
    lambda_endpoint_url: str | None = None
    region: str = "us-east-1"
    unreserved_concurrency: int | None = None
    reconcile_versions: bool = True
    dry_run: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **overrides: Any) -> WarmerConfig:
        """Build from the warmer's document (`WarmerDocument.from_dict` reads and checks it).

        Raises
        ------
        WarmerConfigError
            On a document the contract refuses (a missing, unknown or mistyped key, another
            version: the message names the field) or a value the planner refuses (naming the
            entry).
        """
        try:
            document = WarmerDocument.from_dict(data)
        except DocumentError as exc:
            raise WarmerConfigError(str(exc)) from exc
        return cls.from_document(document, **overrides)

    @classmethod
    def from_document(cls, document: WarmerDocument, **overrides: Any) -> WarmerConfig:
        """Build from a checked document: the planner's policies of its entries.

        Raises
        ------
        WarmerConfigError
            When the planner (``AliasPolicy``, ``LmiSettings``, ``EndpointPolicy``) refuses an
            entry, naming it.
        """
        policies = tuple(_policy(f"aliases[{i}]", entry_values(entry), AliasPolicy, _alias_entry)
                         for i, entry in enumerate(document.aliases))
        endpoints = tuple(_policy(f"endpoints[{i}]", entry_values(entry), EndpointPolicy)
                          for i, entry in enumerate(document.endpoints))
        try:
            q = document.planning_quantile
            quantiles = tuple(sorted({0.5, 0.9, 0.95, 0.99, q}))
            forecast = ForecastConfig(lead_min=document.lead_min, quantiles=quantiles,
                                      planning_quantile=q)
            planner = PlannerConfig(planning_quantile=q, cost=CostModel.us_east_1(
                document.architecture))  # type: ignore[arg-type]  # one of ARCHITECTURES
        except (TypeError, ValueError) as exc:
            raise WarmerConfigError(f"warmer config: {exc}") from exc
        return cls(policies=policies, endpoints=endpoints, forecast=forecast, planner=planner,
                   actuator=document.actuator,  # type: ignore[arg-type]
                   endpoint_actuator=document.endpoint_actuator,  # type: ignore[arg-type]
                   history_min=int(document.history_days * 1440),
                   unreserved_concurrency=document.unreserved_concurrency,
                   reconcile_versions=document.reconcile_versions, **overrides)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WarmerConfig:
        """Read the environment once (the handler passes ``os.environ``).

        Raises
        ------
        WarmerConfigError
            When ``WARMSTART_WARMER_CONFIG`` is missing, not valid JSON, or refused.
        """
        raw = env.get(names.ENV_WARMER_CONFIG)
        if not raw:
            raise WarmerConfigError(f"{names.ENV_WARMER_CONFIG} is not set (JSON with an "
                                    "'aliases' list)")
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise WarmerConfigError(f"{names.ENV_WARMER_CONFIG} is not valid JSON: {exc}"
                                    ) from exc
        return cls.from_dict(
            data, state_prefix=env.get(names.ENV_WARMER_STATE_PREFIX, DEFAULT_STATE_PREFIX),
            endpoint_url=env.get(names.ENV_AWS_ENDPOINT_URL) or None,
            lambda_endpoint_url=env.get(names.ENV_LAMBDA_ENDPOINT_URL) or None,
            region=env.get("AWS_REGION", "us-east-1"),
            dry_run=env.get(names.ENV_WARMER_DRY_RUN, "false").lower() == "true")


def _policy(where: str, kwargs: dict[str, Any], cls: type[E],
            prepare: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None) -> E:
    """``cls(**kwargs)`` (after ``prepare``), a WarmerConfigError naming the entry otherwise."""
    if prepare is not None:
        kwargs = prepare(where, kwargs)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise WarmerConfigError(f"{where}: {exc}") from exc


def _alias_entry(where: str, item: dict[str, Any]) -> dict[str, Any]:
    """An ``aliases`` entry with its ``managed_instances`` object made an ``LmiSettings``
    (strategy ``managed_instances``: Lambda Managed Instances, ``warmers.lmi``; the contract
    has checked it is given for that strategy only).

    Raises
    ------
    WarmerConfigError
        When ``managed_instances`` has unknown keys or invalid values.
    """
    raw = item.get("managed_instances")
    if raw is None:
        return item
    from warmers.lmi import LmiConfigError, LmiSettings

    allowed = {f.name for f in fields(LmiSettings)}
    unknown = set(raw) - allowed
    if unknown:
        raise WarmerConfigError(f"{where}.managed_instances: unknown keys {sorted(unknown)} "
                                f"(known: {sorted(allowed)})")
    try:
        settings = LmiSettings(**raw)
    except (TypeError, LmiConfigError) as exc:
        raise WarmerConfigError(f"{where}.managed_instances: {exc}") from exc
    return {**item, "managed_instances": settings}


def boto_config(max_pool_connections: int = 50) -> Any:
    """botocore config for the warmer's clients: standard retry mode (throttling, bounded)."""
    from botocore.config import Config

    return Config(retries={"mode": "standard", "max_attempts": 5},
                  max_pool_connections=max_pool_connections, connect_timeout=5, read_timeout=20)
