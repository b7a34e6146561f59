"""The warmer's document (the JSON of ``WARMSTART_WARMER_CONFIG``) and the resource ids of what
the warmer scales: written by the deploy (``infra/constructs/warmer.py``, the local stack's
``infra/local/services.py``), read by the warmer (``warmers.config``).

* :class:`WarmerDocument` with its :class:`AliasEntry` and :class:`EndpointEntry` records,
  versioned (:data:`WARMER_DOCUMENT_VERSION`), written with :meth:`WarmerDocument.to_json` and
  read with :meth:`WarmerDocument.from_json` / :meth:`WarmerDocument.from_dict`, which refuse a
  document of another version, with a missing or unknown field, or a field of the wrong type,
  naming the field (:class:`DocumentError`, ``aliases[1].floor``). The document says *what* the
  warmer manages; what the warmer makes of it (bounds against prices, the plans) is the
  planner's (``warmers.plan``), which builds its policies from these records.
* Application Auto Scaling ids, namespaces and dimensions (:func:`alias_resource_id`,
  :func:`endpoint_resource_id`, :func:`endpoint_scalable_dimension`), which the CDK construct
  grants and the warmer's planner and actuators call.

Standard library only. The entries are frozen dataclasses, the one definition of their fields
and defaults: the planner's policies are subclasses that validate them
(``warmers.plan.policy.AliasPolicy``, ``warmers.plan.endpoint.EndpointPolicy``); the document
is a ``NamedTuple``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Literal, NamedTuple, TypeVar

from functions.runtime.contract import ContractError

#: Application Auto Scaling's namespace and dimension of Lambda provisioned concurrency.
LAMBDA_NAMESPACE = "lambda"
LAMBDA_PC_DIMENSION = "lambda:function:ProvisionedConcurrency"
#: SageMaker's namespace and the dimension of each endpoint target (:data:`ENDPOINT_TARGETS`).
SAGEMAKER_NAMESPACE = "sagemaker"
VARIANT_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
INFERENCE_COMPONENT_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"


def alias_resource_id(function_name: str, alias: str) -> str:
    """Application Auto Scaling ``ResourceId`` of an alias's provisioned concurrency:
    ``function:<function>:<alias>`` (tokens allowed in ``function_name`` at synth).

    Raises
    ------
    DocumentError
        For ``$LATEST`` (provisioned concurrency needs an alias or a version).

    References
    ----------
    https://docs.aws.amazon.com/autoscaling/application/APIReference/API_RegisterScalableTarget.html
    """
    if alias == "$LATEST":
        raise DocumentError("alias", "provisioned concurrency cannot target $LATEST; give "
                            "the alias (e.g. 'live') that points at a published version",
                            named=False)
    return f"function:{function_name}:{alias}"


def endpoint_resource_id(target: str, *, endpoint_name: str, variant_name: str,
                         inference_component: str | None) -> str:
    """Application Auto Scaling ``ResourceId`` of a SageMaker endpoint's capacity:
    ``endpoint/<endpoint>/variant/<variant>`` (target ``variant``) or
    ``inference-component/<component>`` (target ``inference_component``).

    Raises
    ------
    DocumentError
        For an unknown target, or ``inference_component`` without its name.
    """
    if target == "inference_component":
        if not inference_component:
            raise DocumentError("inference_component", "target inference_component needs "
                                "inference_component (its name)", named=False)
        return f"inference-component/{inference_component}"
    if target != "variant":
        raise DocumentError("target", f"must be one of {ENDPOINT_TARGETS}, got {target!r}")
    return f"endpoint/{endpoint_name}/variant/{variant_name}"


def endpoint_scalable_dimension(target: str) -> str:
    """The scalable dimension of an endpoint target (:data:`ENDPOINT_TARGETS`)."""
    return INFERENCE_COMPONENT_DIMENSION if target == "inference_component" else VARIANT_DIMENSION


class EndpointTargetIds:
    """``resource_id`` and ``scalable_dimension`` of an endpoint target, for every record of
    one (the document's :class:`EndpointEntry`, the planner's policy, the deploy's target):
    a base class for a dataclass with ``target``, ``endpoint_name``, ``variant_name`` and
    ``inference_component`` fields."""

    target: str
    endpoint_name: str
    variant_name: str
    inference_component: str | None

    @property
    def resource_id(self) -> str:
        """Application Auto Scaling ``ResourceId`` of the target (:func:`endpoint_resource_id`)."""
        return endpoint_resource_id(self.target, endpoint_name=self.endpoint_name,
                                    variant_name=self.variant_name,
                                    inference_component=self.inference_component)

    @property
    def scalable_dimension(self) -> str:
        """The target's scalable dimension (:func:`endpoint_scalable_dimension`)."""
        return endpoint_scalable_dimension(self.target)


def target_tracking_alarm_prefix(resource_id: str) -> str:
    """The name prefix Application Auto Scaling gives a target's target-tracking alarms
    (``TargetTracking-<resource id>-AlarmHigh|AlarmLow-<uuid>``), which the warmer's role may
    manage."""
    return f"TargetTracking-{resource_id}-"



#: Version of the warmer's document this code writes and reads. A document without
#: ``version`` (written before the field existed) is read as version 1.
WARMER_DOCUMENT_VERSION = 1
#: What the warmer may do for an alias (``AliasEntry.strategy``); also an agent's ``strategy``
#: in ``cdk.json`` (``infra.config``).
AliasStrategy = Literal["provisioned", "snapstart", "ping", "managed_instances", "none"]
ALIAS_STRATEGIES: tuple[AliasStrategy, ...] = ("provisioned", "snapstart", "ping",
                                              "managed_instances", "none")
#: What provisioned concurrency is bought for (``AliasEntry.objective``).
ALIAS_OBJECTIVES = ("cost", "sla")
#: What the warmer scales on an endpoint (``EndpointEntry.target``).
EndpointTargetKind = Literal["variant", "inference_component"]
ENDPOINT_TARGETS: tuple[EndpointTargetKind, ...] = ("variant", "inference_component")
#: What one failed answer costs an app when it says nothing, USD: a default of ours, not from a
#: source: about what serving one agent request end to end costs (an LLM call of a few
#: thousand tokens is $0.005-$0.05 at 2026 list prices), so failing it costs at least that. At
#: it one ml.g6.xlarge copy (its hourly price in warmers/prices.json) pays when it avoids 23 or
#: more failed answers an hour.
#: An app whose failed answer loses more says so (``failed_answer_usd``); ``null`` prices it
#: unbounded (every avoidable failure justifies the endpoint, within cap and budget).
DEFAULT_FAILED_ANSWER_USD = 0.05
#: How the warmer sets provisioned concurrency and endpoint capacity.
ACTUATORS = ("autoscaling", "lambda")
ENDPOINT_ACTUATORS = ("autoscaling", "sagemaker")
#: Instruction set of the managed functions (their prices differ; an agent's ``architecture``).
Architecture = Literal["x86_64", "arm64"]
ARCHITECTURES: tuple[Architecture, ...] = ("x86_64", "arm64")


Entry = TypeVar("Entry", "AliasEntry", "EndpointEntry")


class DocumentError(ContractError):
    """The warmer's document breaks the contract.

    ``field`` is the dotted path of the field (``aliases[0].floor``, ``version``, ``$`` for the
    whole document); the message leads with the entry, then the field and what is wrong
    (``aliases[0]: floor must be an integer, got 'one'``). ``named=False``: ``what`` names the
    field itself."""

    def __init__(self, field: str, what: str, *, named: bool = True) -> None:
        entry, _, name = field.rpartition(".")
        said = f"{name} {what}" if named else what
        if field == "$":
            message = f"warmer document {what}"
        else:
            message = f"{entry}: {said}" if entry else said
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class AliasEntry:
    """One alias the warmer manages (an ``aliases`` entry): the one definition of its fields and
    defaults, which ``warmers.plan.policy.AliasPolicy`` inherits (and validates);
    ``function_name`` and ``alias`` are required, ``managed_instances`` is the
    ``warmers.lmi.LmiSettings`` object (its fields are the LMI planner's; checked by the
    warmer's config)."""

    function_name: str
    alias: str
    strategy: str = "provisioned"
    memory_mb: int = 1024
    floor: int = 0
    cap: int = 50
    budget_usd_per_hour: float = 1.0
    ping_interval_s: int = 300
    ping_hold_ms: int = 75
    sparse_active_fraction: float = 0.05
    degradation_parameter: str | None = None
    available_concurrency: int | None = None
    objective: str = "cost"
    sla_ms: float | None = None
    cold_start_p50_ms: float | None = None
    cold_start_p95_ms: float | None = None
    managed_instances: Mapping[str, Any] | None = None

    @property
    def key(self) -> str:
        """``FUNCTION:ALIAS``, how endpoints name their agents."""
        return f"{self.function_name}:{self.alias}"

    @property
    def resource_id(self) -> str:
        """:func:`alias_resource_id` of this alias."""
        return alias_resource_id(self.function_name, self.alias)

    def check(self, where: str = "alias") -> AliasEntry:
        """Refuse values the document may not hold (the planner checks the rest).

        Raises
        ------
        DocumentError
            ``$LATEST``, an unknown strategy or objective, ``managed_instances`` with another
            strategy (``field`` names the entry's field).
        """
        if self.alias == "$LATEST":
            raise DocumentError(f"{where}.alias", "a warmer target must be an alias, never "
                                "$LATEST", named=False)
        _one_of(f"{where}.strategy", self.strategy, ALIAS_STRATEGIES)
        _one_of(f"{where}.objective", self.objective, ALIAS_OBJECTIVES)
        if self.managed_instances is not None and self.strategy != "managed_instances":
            raise DocumentError(f"{where}.managed_instances", "is only for strategy "
                                f"'managed_instances', got strategy {self.strategy!r}")
        return self


@dataclass(frozen=True)
class EndpointEntry(EndpointTargetIds):
    """One GPU overflow endpoint whose capacity the warmer plans (an ``endpoints`` entry): the
    one definition of its fields and defaults, which ``warmers.plan.endpoint.EndpointPolicy``
    inherits (and validates); ``endpoint_name`` and ``agents`` (``FUNCTION:ALIAS`` of managed
    aliases) are required. ``failed_answer_usd`` null means unbounded (left out: the default,
    :data:`DEFAULT_FAILED_ANSWER_USD`)."""

    endpoint_name: str
    agents: tuple[str, ...]
    target: str = "variant"
    variant_name: str = "AllTraffic"
    inference_component: str | None = None
    instance_type: str = "ml.g6.xlarge"
    floor: int = 0
    cap: int = 2
    budget_usd_per_hour: float = 5.0
    concurrent_requests_per_instance: int = 4
    environment_idle_min: int = 5
    failed_answer_usd: float | None = DEFAULT_FAILED_ANSWER_USD
    capacity_parameter: str | None = None
    instance_usd_per_hour: float | None = None
    spend_guard_window_min: int = 60
    spend_guard_usd: float | None = None
    agent_services: tuple[str, ...] = ()
    metrics_namespace: str = "Warmstart"

    def check(self, where: str = "endpoint") -> EndpointEntry:
        """Refuse values the document may not hold (the planner checks prices and budgets).

        Raises
        ------
        DocumentError
            An unknown target, an inference component without its name, bounds out of order.
        """
        _one_of(f"{where}.target", self.target, ENDPOINT_TARGETS)
        if self.target == "inference_component" and not self.inference_component:
            raise DocumentError(f"{where}.inference_component", "target inference_component "
                                "needs inference_component (its name)", named=False)
        if not 0 <= self.floor <= self.cap:
            raise DocumentError(f"{where}.floor", f"need 0 <= floor <= cap, got floor="
                                f"{self.floor} cap={self.cap}", named=False)
        return self

    def spend_guard_usd_at(self, instance_usd_per_hour: float) -> float:
        """Spend in the guard's window, USD, at which an endpoint that answered nothing is
        scaled in: ``spend_guard_usd``, else one instance held for the whole window
        (``instance_usd_per_hour`` x ``spend_guard_window_min`` / 60); the threshold of the
        construct's alarm and of the warmer's guard."""
        if self.spend_guard_usd is not None:
            return self.spend_guard_usd
        return instance_usd_per_hour * self.spend_guard_window_min / 60.0


class WarmerDocument(NamedTuple):
    """The warmer's document (:data:`ENV_WARMER_CONFIG`): what it manages and how.

    Attributes
    ----------
    aliases : tuple of AliasEntry
        At least one; ``FUNCTION:ALIAS`` unique.
    endpoints : tuple of EndpointEntry
        Endpoint names unique, their agents among ``aliases``.
    actuator : {"autoscaling", "lambda"}
        Provisioned concurrency through Application Auto Scaling or Lambda's own API.
    endpoint_actuator : {"autoscaling", "sagemaker"}
        Endpoint capacity through Application Auto Scaling or SageMaker's API (the local stack).
    lead_min : int
        Forecast lead, minutes.
    history_days : float
        Days of 1-minute metrics each run reads (1/24 to 14).
    planning_quantile : float
        Forecast quantile the plans cover.
    architecture : {"x86_64", "arm64"}
        Of the managed functions (prices).
    unreserved_concurrency : int or None
        Use this instead of ``GetAccountSettings`` (the local emulator's limit).
    reconcile_versions : bool
        False: skip ``ListProvisionedConcurrencyConfigs`` (the local emulator lacks it).
    version : int
        :data:`WARMER_DOCUMENT_VERSION`.
    """

    aliases: tuple[AliasEntry, ...]
    endpoints: tuple[EndpointEntry, ...] = ()
    actuator: str = "autoscaling"
    endpoint_actuator: str = "autoscaling"
    lead_min: int = 15
    history_days: float = 14.0
    planning_quantile: float = 0.95
    architecture: str = "x86_64"
    unreserved_concurrency: int | None = None
    reconcile_versions: bool = True
    version: int = WARMER_DOCUMENT_VERSION

    def check(self) -> WarmerDocument:
        """Refuse a document the contract does not allow: no alias, a duplicate alias or
        endpoint, an endpoint agent that is no managed alias, an unknown actuator, and each
        entry's :meth:`AliasEntry.check` / :meth:`EndpointEntry.check`.

        Raises
        ------
        DocumentError
            Naming the field.
        """
        if self.version != WARMER_DOCUMENT_VERSION:
            raise DocumentError("version", f"must be {WARMER_DOCUMENT_VERSION} (what this warmer "
                                f"reads), got {self.version!r}")
        if not self.aliases:
            raise DocumentError("aliases", "needs at least one alias")
        keys = [a.check(f"aliases[{i}]").key for i, a in enumerate(self.aliases)]
        if len(set(keys)) != len(keys):
            raise DocumentError("aliases", f"has a duplicate function:alias in {keys}")
        names = []
        for i, endpoint in enumerate(self.endpoints):
            endpoint.check(f"endpoints[{i}]")
            strays = [a for a in endpoint.agents if a not in keys]
            if strays:
                raise DocumentError(f"endpoints[{i}].agents", f"{strays} are not in 'aliases'")
            names.append(endpoint.endpoint_name)
        if len(set(names)) != len(names):
            raise DocumentError("endpoints", f"has a duplicate endpoint_name in {names}")
        _one_of("actuator", self.actuator, ACTUATORS, listed=False)
        _one_of("endpoint_actuator", self.endpoint_actuator, ENDPOINT_ACTUATORS,
                listed=False)
        _one_of("architecture", self.architecture, ARCHITECTURES, listed=False)
        if self.unreserved_concurrency is not None and self.unreserved_concurrency < 0:
            raise DocumentError("unreserved_concurrency", "must be a non-negative int or null, "
                                f"got {self.unreserved_concurrency}")
        if not 1 / 24 - 1e-9 <= self.history_days <= 14:
            raise DocumentError("history_days", "must be between 1/24 and 14 (1-minute "
                                f"retention), got {self.history_days}")
        return self

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready document: ``version``, the required fields and every field not at its
        default (smaller: Lambda's environment variables share 4 KB). Not checked here: call
        :meth:`check` (the construct's values may hold CDK tokens)."""
        out = _jsonable(self, required=("version", "aliases"))
        out["aliases"] = [_jsonable(a, required=("function_name", "alias"))
                          for a in self.aliases]
        if self.endpoints:
            out["endpoints"] = [_jsonable(e, required=("endpoint_name", "agents"))
                                for e in self.endpoints]
        return out

    @classmethod
    def from_json(cls, text: str) -> WarmerDocument:
        """Read and check the document's JSON text (:meth:`from_dict`).

        Raises
        ------
        DocumentError
            Not JSON (field ``$``), or as :meth:`from_dict`.
        """
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise DocumentError("$", f"is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> WarmerDocument:
        """Read and check a parsed document: each field of its type, no unknown field, the
        required ones present, then :meth:`check`.

        Raises
        ------
        DocumentError
            Naming the field: not an object, another ``version``, a missing, unknown or
            mistyped field, or what :meth:`check` refuses.
        """
        if not isinstance(data, Mapping):
            raise DocumentError("$", f"must be a JSON object, got {type(data).__name__}")
        version = data.get("version", WARMER_DOCUMENT_VERSION)
        if version != WARMER_DOCUMENT_VERSION:
            raise DocumentError("version", f"must be {WARMER_DOCUMENT_VERSION} (what this warmer "
                                f"reads), got {version!r}")
        raw_aliases = data.get("aliases")
        if not isinstance(raw_aliases, list) or not raw_aliases:
            raise DocumentError("aliases", "must be a non-empty list of alias entries")
        raw_endpoints = data.get("endpoints", [])
        if not isinstance(raw_endpoints, list):
            raise DocumentError("endpoints", "must be a list")
        fields = _read(cls, {k: v for k, v in data.items() if k not in ("aliases", "endpoints")},
                       "", skip=("aliases", "endpoints"))
        aliases = tuple(read_entry(AliasEntry, item, f"aliases[{i}]")
                        for i, item in enumerate(raw_aliases))
        endpoints = tuple(read_entry(EndpointEntry, item, f"endpoints[{i}]")
                          for i, item in enumerate(raw_endpoints))
        return cls(aliases=aliases, endpoints=endpoints, **fields).check()


def read_entry(kind: type[Entry], item: Any, where: str) -> Entry:
    """An :class:`AliasEntry` or :class:`EndpointEntry` from its JSON object: each field of its
    type, no unknown field, the required ones present; not yet ``check``-ed.

    Parameters
    ----------
    kind : type
        ``AliasEntry`` or ``EndpointEntry``.
    item : object
        The entry as parsed from JSON.
    where : str
        The entry's path in the document (``endpoints[0]``; ``""``: none), for the messages.

    Raises
    ------
    DocumentError
        Naming the field.
    """
    return kind(**_read(kind, item, where))


def _one_of(field: str, value: Any, allowed: tuple[str, ...], *, listed: bool = True) -> None:
    if value not in allowed:
        which = (f"one of {allowed}" if listed else " or ".join(repr(a) for a in allowed))
        raise DocumentError(field, f"must be {which}, got {value!r}")


def _record_fields(cls: Any) -> list[tuple[str, bool, Any, str]]:
    """``(name, has a default, the default, annotation as written)`` of each field of a
    record: a dataclass (the entries) or a NamedTuple (the document)."""
    if is_dataclass(cls):
        return [(f.name, f.default is not MISSING, None if f.default is MISSING else f.default,
                 str(f.type)) for f in fields(cls)]
    defaults = cls._field_defaults
    annotations = {name: getattr(a, "__forward_arg__", a)  # NamedTuple keeps a ForwardRef
                   for name, a in cls.__annotations__.items()}
    return [(name, name in defaults, defaults.get(name), str(annotations[name]))
            for name in cls._fields]


def entry_values(record: Any) -> dict[str, Any]:
    """A record's fields by name (shallow: a nested value is the record's own object)."""
    return {name: getattr(record, name) for name, *_ in _record_fields(type(record))}


def _jsonable(record: Any, *, required: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for name, has_default, default, _ in _record_fields(type(record)):
        value = getattr(record, name)
        if name in required or not has_default or value != default:
            out[name] = list(value) if isinstance(value, tuple) else (
                dict(value) if isinstance(value, Mapping) else value)
    return out


#: How each annotation of the records is checked: (accepts, what to say).
_KINDS: Mapping[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
              and math.isfinite(v), "a finite number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "tuple[str, ...]": (lambda v: isinstance(v, (list, tuple))
                        and all(isinstance(x, str) for x in v), "a list of strings"),
    "Mapping[str, Any]": (lambda v: isinstance(v, Mapping)
                          and all(isinstance(k, str) for k in v), "an object"),
}


def _read(cls: Any, item: Any, where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``item``'s fields for ``cls(**...)``, each checked against ``cls``'s annotation.

    Raises
    ------
    DocumentError
        ``item`` not an object, an unknown or missing field, a value of the wrong type.
    """
    prefix = f"{where}." if where else ""
    if not isinstance(item, Mapping):
        raise DocumentError(where or "$", "must be an object")
    specs = [spec for spec in _record_fields(cls) if spec[0] not in skip]
    known = {name for name, *_ in specs}
    unknown = sorted(set(item) - known)
    if unknown:
        raise DocumentError(f"{prefix}{unknown[0]}", f"unknown keys {unknown} (known: "
                            f"{sorted(known)})", named=False)
    out: dict[str, Any] = {}
    for name, has_default, _, annotation in specs:
        if name not in item:
            if not has_default:
                raise DocumentError(f"{prefix}{name}", "is missing (required)")
            continue
        value = item[name]
        optional = annotation.endswith(" | None")
        if value is None and optional:
            out[name] = None
            continue
        accepts, what = _KINDS[annotation.removesuffix(" | None")]
        if not accepts(value):
            raise DocumentError(f"{prefix}{name}", f"must be {what}"
                                f"{' or null' if optional else ''}, got {value!r}")
        if annotation.startswith("tuple"):
            value = tuple(value)
        elif annotation.startswith("float"):
            value = float(value)
        out[name] = value
    return out


