"""Typed deploy-time configuration, read from the ``warmstart`` key of ``cdk.json``'s context.

The CDK app (``infra/app.py``), the local stack and the warmer tooling all read the same
``cdk.json``; this module turns its ``warmstart`` context dict into frozen dataclasses and refuses
combinations AWS Lambda would refuse at deploy time, with a message that says what is wrong and
what to do. It imports only the standard library and ``warmers.pricing`` (itself stdlib only; no
``aws_cdk``), so it is cheap to use outside a synth.

Prices are not written here or in ``cdk.json``: they live once, in the shared table
``warmers/prices.json`` (:mod:`warmers.pricing`). ``warmstart.pricing`` is optional; its
``items`` may override single items of that table (each with ``usd`` and its own ``source``),
and its ``region``/``currency``, when given, must match the table's.

Keys that start with ``_`` are documentation and are ignored. Any other unknown key is an error
(a typo such as ``memroy_mb`` must not silently fall back to a default), except inside
``warmer`` and ``gpu_endpoint``, whose extra keys are kept in ``options`` for the constructs
that later issues add.

Example
-------
>>> cfg = load_config(Path("cdk.json"), strategy="provisioned")
>>> cfg.agent.provisioned_concurrency.max
10

References
----------
Lambda limits: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
SnapStart limits: https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

from warmers.pricing import PRICES_ORIGIN, Price, PriceTable, PriceTableError, load_prices

#: Context key in ``cdk.json`` that holds the whole configuration.
CONTEXT_KEY: Final = "warmstart"
#: Context key that selects a named variant, e.g. ``cdk synth -c warmstart:strategy=provisioned``.
STRATEGY_CONTEXT_KEY: Final = "warmstart:strategy"

Strategy = Literal["provisioned", "snapstart", "ping", "none"]
STRATEGIES: Final[tuple[Strategy, ...]] = ("provisioned", "snapstart", "ping", "none")
Architecture = Literal["x86_64", "arm64"]
ARCHITECTURES: Final[tuple[Architecture, ...]] = ("x86_64", "arm64")
#: Python runtimes Lambda still accepts for new functions (python3.9 is deprecated).
RUNTIMES: Final = ("python3.10", "python3.11", "python3.12", "python3.13", "python3.14")
#: SnapStart supports Python 3.12 and newer.
SNAPSTART_MIN_PYTHON: Final = (3, 12)

LAMBDA_LIMITS_URL: Final = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
SNAPSTART_URL: Final = "https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html"
MEMORY_LIMITS_MB: Final = (128, 10240)
TIMEOUT_LIMITS_S: Final = (1, 900)

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


class ConfigError(ValueError):
    """The ``warmstart`` context is invalid; the message names the key and the fix."""


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

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html (target tracking
    at 0.7 is the documented example value).
    """

    min: int
    max: int
    target_utilization: float = 0.7


@dataclass(frozen=True)
class AgentConfig:
    """The agent function: what the Lambda function, its alias and its warm strategy look like."""

    handler: str
    runtime: str
    memory_mb: int
    timeout_s: int
    architecture: Architecture
    strategy: Strategy
    provisioned_concurrency: ProvisionedConcurrencyConfig | None
    sla_ms: int
    log_retention_days: int

    @property
    def python_version(self) -> str:
        """``"3.12"`` for ``python3.12``: the ``--python-version`` the layers are built for."""
        return self.runtime.removeprefix("python")

    @property
    def snapstart(self) -> bool:
        """True when SnapStart is turned on (``ApplyOn: PublishedVersions``)."""
        return self.strategy == "snapstart"


Authorization = Literal["none", "iam"]
AUTHORIZATIONS: Final[tuple[Authorization, ...]] = ("none", "iam")


@dataclass(frozen=True)
class HttpApiConfig:
    """Default-stage throttling, access-log retention and route authorization of the HTTP API.

    ``authorization`` is ``"none"`` (public) or ``"iam"`` (SigV4-signed requests only).

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-access-control-iam.html
    """

    throttle_rate_per_s: float
    throttle_burst: int
    access_log_retention_days: int
    authorization: Authorization = "none"


@dataclass(frozen=True)
class GpuEndpointConfig:
    """Optional SageMaker real-time endpoint used for overflow (off by default)."""

    enabled: bool
    instance_type: str
    model_asset: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class WarmerConfig:
    """Scheduled warmer placeholder; the warmer construct reads its own keys from ``options``."""

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
    """CloudWatch alarm thresholds on the ``live`` alias.

    ``duration_p99_ms`` defaults to the agent's SLA: an alarm fires when the p99 of the function
    duration exceeds the SLA in ``datapoints_to_alarm`` of ``evaluation_periods`` periods.
    """

    period_s: int
    evaluation_periods: int
    datapoints_to_alarm: int
    errors_threshold: int
    throttles_threshold: int
    spillover_threshold: int
    duration_p99_ms: int


@dataclass(frozen=True)
class WarmstartConfig:
    """The whole deploy-time configuration."""

    stack_name: str
    region: str | None
    agent: AgentConfig
    http_api: HttpApiConfig
    debug_resource: bool
    degradation_parameter: str
    gpu_endpoint: GpuEndpointConfig
    warmer: WarmerConfig
    pricing: PricingConfig
    alarms: AlarmConfig


# --------------------------------------------------------------------------------------------
# reading


class _Section:
    """Typed access to one mapping of the context, with the dotted path for error messages."""

    def __init__(self, raw: object, path: str, *, known: tuple[str, ...] | None) -> None:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{path}: expected an object, got {_show(raw)}")
        self.raw = raw
        self.path = path
        if known is not None:
            unknown = sorted(k for k in raw if not str(k).startswith("_") and k not in known)
            if unknown:
                raise ConfigError(
                    f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; "
                    f"known keys are {', '.join(known)}"
                )

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def _get(self, key: str, default: object) -> object:
        if key in self.raw and self.raw[key] is not None:
            return self.raw[key]
        if default is _MISSING:
            raise ConfigError(f"{self.path}: missing key {key!r}")
        return default

    def text(self, key: str, default: object = None) -> str:
        value = self._get(key, _MISSING if default is None else default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self.path}.{key}: expected a non-empty string, got {_show(value)}")
        return value

    def integer(self, key: str, default: object = None) -> int:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)  # from `cdk synth -c ...`, context values arrive as strings
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.path}.{key}: expected an integer, got {_show(value)}")
        return value

    def number(self, key: str, default: object = None) -> float:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{self.path}.{key}: expected a number, got {_show(value)}")
        return float(value)

    def flag(self, key: str, default: object = None) -> bool:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise ConfigError(f"{self.path}.{key}: expected true or false, got {_show(value)}")
        return value

    def section(self, key: str, *, known: tuple[str, ...] | None) -> _Section:
        return _Section(self._get(key, _MISSING), f"{self.path}.{key}", known=known)

    def extras(self, known: tuple[str, ...]) -> Mapping[str, Any]:
        return MappingProxyType(
            {k: copy.deepcopy(v) for k, v in self.raw.items() if k not in known and not k.startswith("_")}
        )


_MISSING: Final = object()


def _show(value: object) -> str:
    return "nothing" if value is _MISSING else f"{type(value).__name__} {value!r}"


def _in_range(sec: _Section, key: str, value: int, limits: tuple[int, int], unit: str) -> None:
    low, high = limits
    if not low <= value <= high:
        raise ConfigError(
            f"{sec.path}.{key}: {value} {unit} is outside Lambda's limits ({low}-{high} {unit}); "
            f"see {LAMBDA_LIMITS_URL}"
        )


def _python_tuple(runtime: str) -> tuple[int, int]:
    major, minor = runtime.removeprefix("python").split(".")
    return int(major), int(minor)


_AGENT_KEYS: Final = (
    "handler",
    "runtime",
    "memory_mb",
    "timeout_s",
    "architecture",
    "strategy",
    "provisioned_concurrency",
    "sla_ms",
    "log_retention_days",
)


def _agent(sec: _Section) -> AgentConfig:
    strategy = sec.text("strategy")
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"{sec.path}.strategy: unknown strategy {strategy!r}; "
            f"valid strategies are {', '.join(STRATEGIES)}"
        )
    runtime = sec.text("runtime")
    if runtime not in RUNTIMES:
        raise ConfigError(
            f"{sec.path}.runtime: unsupported runtime {runtime!r}; valid runtimes are {', '.join(RUNTIMES)}"
        )
    architecture = sec.text("architecture", "x86_64")
    if architecture not in ARCHITECTURES:
        raise ConfigError(
            f"{sec.path}.architecture: unknown architecture {architecture!r}; "
            f"valid architectures are {', '.join(ARCHITECTURES)}"
        )
    memory_mb = sec.integer("memory_mb")
    _in_range(sec, "memory_mb", memory_mb, MEMORY_LIMITS_MB, "MB")
    timeout_s = sec.integer("timeout_s")
    _in_range(sec, "timeout_s", timeout_s, TIMEOUT_LIMITS_S, "s")

    pc: ProvisionedConcurrencyConfig | None = None
    if sec.has("provisioned_concurrency"):
        pc_sec = sec.section("provisioned_concurrency", known=("min", "max", "target_utilization"))
        pc_min, pc_max = pc_sec.integer("min"), pc_sec.integer("max")
        target = pc_sec.number("target_utilization", 0.7)
        if pc_min < 1:
            raise ConfigError(
                f"{pc_sec.path}.min: {pc_min} is below 1; provisioned concurrency needs at least one "
                "execution environment (drop provisioned_concurrency for none)"
            )
        if pc_max < pc_min:
            raise ConfigError(f"{pc_sec.path}: max ({pc_max}) is below min ({pc_min}); set max >= min")
        if not 0.0 < target <= 1.0:
            raise ConfigError(
                f"{pc_sec.path}.target_utilization: {target} is outside (0, 1]; "
                "it is a fraction of provisioned concurrency in use, e.g. 0.7"
            )
        pc = ProvisionedConcurrencyConfig(min=pc_min, max=pc_max, target_utilization=target)

    if strategy == "snapstart":
        if pc is not None:
            raise ConfigError(
                f"{sec.path}: strategy 'snapstart' cannot be combined with provisioned concurrency "
                f"(provisioned_concurrency min={pc.min}, max={pc.max}): AWS Lambda does not support "
                f"SnapStart together with provisioned concurrency, see {SNAPSTART_URL}. "
                "Remove provisioned_concurrency or choose strategy 'provisioned'."
            )
        if _python_tuple(runtime) < SNAPSTART_MIN_PYTHON:
            raise ConfigError(
                f"{sec.path}.runtime: SnapStart needs python3.12 or newer, got {runtime!r}; "
                f"see {SNAPSTART_URL}. Choose runtime python3.12+ or another strategy."
            )
    if strategy == "provisioned" and pc is None:
        raise ConfigError(
            f"{sec.path}.provisioned_concurrency: strategy 'provisioned' needs "
            '{"min": N, "max": M} (N >= 1, M >= N)'
        )
    if strategy in ("ping", "none") and pc is not None:
        raise ConfigError(
            f"{sec.path}.provisioned_concurrency: strategy {strategy!r} does not use provisioned "
            "concurrency; remove provisioned_concurrency or choose strategy 'provisioned'"
        )

    sla_ms = sec.integer("sla_ms")
    if not 1 <= sla_ms <= timeout_s * 1000:
        raise ConfigError(
            f"{sec.path}.sla_ms: {sla_ms} ms must be between 1 ms and the function timeout "
            f"({timeout_s * 1000} ms)"
        )
    return AgentConfig(
        handler=sec.text("handler"),
        runtime=runtime,
        memory_mb=memory_mb,
        timeout_s=timeout_s,
        architecture=architecture,
        strategy=strategy,
        provisioned_concurrency=pc,
        sla_ms=sla_ms,
        log_retention_days=sec.integer("log_retention_days", 30),
    )


def _price_overrides(items_sec: _Section, table: PriceTable) -> dict[str, Price]:
    """cdk.json's ``pricing.items``: each names an item of the table, with its own source."""
    overrides: dict[str, Price] = {}
    for name in items_sec.raw:
        if str(name).startswith("_"):
            continue
        if name not in table.items:
            raise ConfigError(
                f"{items_sec.path}.{name}: unknown price item; an override must name an item of "
                f"{table.origin} ({', '.join(table.items)}). Add new prices to {PRICES_ORIGIN} "
                "with usd, unit and source"
            )
        item = items_sec.section(name, known=("usd", "unit", "source", "verified", "note"))
        usd = item.number("usd")
        if usd < 0:
            raise ConfigError(f"{item.path}.usd: {usd} is negative")
        note = item.raw.get("note", "")
        if not isinstance(note, str):
            raise ConfigError(f"{item.path}.note: expected a string, got {_show(note)}")
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
                raise ConfigError(
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
        raise ConfigError(
            f"{table.origin}: missing price(s) {', '.join(missing)}; "
            "each needs usd, unit and source (see tests/data/pricing.md)"
        )
    return PricingConfig(region=merged.region, items=merged.items, currency=merged.currency,
                         overridden=merged.overridden)


def parse_config(raw: Mapping[str, Any], *, prices: PriceTable | None = None) -> WarmstartConfig:
    """Turn the ``warmstart`` context dict into a validated :class:`WarmstartConfig`.

    Parameters
    ----------
    raw : Mapping[str, Any]
        The value of ``context.warmstart`` in ``cdk.json`` (after :func:`apply_strategy`).
    prices : warmers.pricing.PriceTable, optional
        The price table ``pricing.items`` overrides; default: the shared ``warmers/prices.json``.

    Returns
    -------
    WarmstartConfig

    Raises
    ------
    ConfigError
        On a missing or mistyped key, an unknown key, a value outside Lambda's limits, or a
        combination AWS Lambda refuses (SnapStart with provisioned concurrency, SnapStart on a
        runtime older than python3.12), a price override of an item the table does not have,
        or an unreadable price table. The message names the key and what to do.
    """
    if prices is None:
        try:
            prices = load_prices()
        except PriceTableError as exc:
            raise ConfigError(str(exc)) from exc
    top = _Section(
        raw,
        CONTEXT_KEY,
        known=(
            "stack_name", "region", "agent", "http_api", "debug_resource",
            "degradation_parameter", "gpu_endpoint", "warmer", "pricing", "alarms", "variants",
        ),
    )
    agent = _agent(top.section("agent", known=_AGENT_KEYS))

    api = top.section(
        "http_api",
        known=("throttle_rate_per_s", "throttle_burst", "access_log_retention_days", "authorization"),
    )
    authorization = api.text("authorization", "none")
    if authorization not in AUTHORIZATIONS:
        raise ConfigError(
            f"{api.path}.authorization: unknown authorization {authorization!r}; "
            f"valid values are {', '.join(AUTHORIZATIONS)}"
        )
    http_api = HttpApiConfig(
        throttle_rate_per_s=api.number("throttle_rate_per_s"),
        throttle_burst=api.integer("throttle_burst"),
        access_log_retention_days=api.integer("access_log_retention_days", 30),
        authorization=authorization,
    )
    if http_api.throttle_rate_per_s <= 0 or http_api.throttle_burst < 1:
        raise ConfigError(f"{api.path}: throttle_rate_per_s must be > 0 and throttle_burst >= 1")

    degradation_parameter = top.text("degradation_parameter")
    if not re.fullmatch(r"/[A-Za-z0-9_.\-/]+", degradation_parameter):
        raise ConfigError(
            f"{top.path}.degradation_parameter: {degradation_parameter!r} is not an SSM parameter "
            "path such as /warmstart/agent/degradation-level"
        )

    gpu_known = ("enabled", "instance_type", "model_asset")
    gpu = top.section("gpu_endpoint", known=None)
    warmer_known = ("enabled", "schedule")
    warmer = top.section("warmer", known=None)

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
        duration_p99_ms=alarms.integer("duration_p99_ms", agent.sla_ms),
    )
    if alarm_cfg.datapoints_to_alarm > alarm_cfg.evaluation_periods:
        raise ConfigError(
            f"{alarms.path}: datapoints_to_alarm ({alarm_cfg.datapoints_to_alarm}) exceeds "
            f"evaluation_periods ({alarm_cfg.evaluation_periods})"
        )
    if alarm_cfg.period_s not in (10, 30) and alarm_cfg.period_s % 60:
        raise ConfigError(f"{alarms.path}.period_s: {alarm_cfg.period_s} must be 10, 30 or a multiple of 60")

    region = raw.get("region")
    if region is not None and (not isinstance(region, str) or not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region)):
        raise ConfigError(f"{CONTEXT_KEY}.region: {region!r} is not an AWS region such as us-east-1")

    return WarmstartConfig(
        stack_name=top.text("stack_name"),
        region=region,
        agent=agent,
        http_api=http_api,
        debug_resource=top.flag("debug_resource", False),
        degradation_parameter=degradation_parameter,
        gpu_endpoint=GpuEndpointConfig(
            enabled=gpu.flag("enabled", False),
            instance_type=gpu.text("instance_type"),
            model_asset=gpu.text("model_asset"),
            options=gpu.extras(gpu_known),
        ),
        warmer=WarmerConfig(
            enabled=warmer.flag("enabled", False),
            schedule=warmer.text("schedule"),
            options=warmer.extras(warmer_known),
        ),
        pricing=_pricing(top, prices),
        alarms=alarm_cfg,
    )


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_strategy(raw: Mapping[str, Any], strategy: str | None) -> dict[str, Any]:
    """Apply the named variant ``strategy`` (from ``-c warmstart:strategy=NAME``).

    A variant is a partial config under ``variants.<NAME>`` that is deep-merged over the base
    (a ``null`` value removes a setting, e.g. ``provisioned_concurrency``); then
    ``agent.strategy`` is set to ``NAME``. A name without a variant only sets the strategy, so
    an unknown name fails validation with the list of valid strategies.

    Parameters
    ----------
    raw : Mapping[str, Any]
        The ``warmstart`` context dict.
    strategy : str or None
        The variant name; ``None`` or ``""`` returns a copy of ``raw`` unchanged.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{CONTEXT_KEY}: expected an object, got {_show(raw)}")
    if not strategy:
        return copy.deepcopy(dict(raw))
    variants = raw.get("variants") or {}
    variant = variants.get(strategy) if isinstance(variants, Mapping) and not strategy.startswith("_") else None
    merged = _deep_merge(dict(raw), variant if isinstance(variant, Mapping) else {})
    agent = merged.get("agent")
    if isinstance(agent, dict):
        agent["strategy"] = strategy
    return merged


def config_from_context(context: Mapping[str, Any], *, strategy: str | None = None,
                        prices: PriceTable | None = None) -> WarmstartConfig:
    """Parse a CDK context mapping (``{"warmstart": {...}, "warmstart:strategy": ...}``).

    Raises
    ------
    ConfigError
        If ``warmstart`` is missing or invalid (see :func:`parse_config`).
    """
    if CONTEXT_KEY not in context:
        raise ConfigError(f"context key {CONTEXT_KEY!r} is missing: run from the repository root (cdk.json)")
    chosen = strategy if strategy is not None else context.get(STRATEGY_CONTEXT_KEY)
    return parse_config(apply_strategy(context[CONTEXT_KEY], chosen), prices=prices)


def load_config(cdk_json: Path, *, strategy: str | None = None,
                prices: PriceTable | None = None) -> WarmstartConfig:
    """Read ``cdk.json`` and parse its ``warmstart`` context (for tools that do not synth).

    Raises
    ------
    ConfigError
        If the file is not JSON or its ``warmstart`` context is invalid.
    """
    try:
        document = json.loads(cdk_json.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{cdk_json}: cannot read cdk.json: {exc}") from exc
    return config_from_context(document.get("context", {}), strategy=strategy, prices=prices)
