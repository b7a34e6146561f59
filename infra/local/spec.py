"""What the emulator runs: functions, aliases, the gateway's routes and the agents, as frozen values.

These come from a synthesized CloudFormation template (:mod:`infra.local.template`) or are
built directly by tests and replays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from functions.runtime.contract import environment as names

if TYPE_CHECKING:
    from infra.local.emulator.config import ManagedInstancesConfig

#: Lambda's defaults when a template leaves a property out.
#: References: https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-lambda-function.html
DEFAULT_MEMORY_MB = 128
DEFAULT_TIMEOUT_S = 3.0


class SpecError(ValueError):
    """A function or alias description that the emulator cannot run; the message says why."""


@dataclass(frozen=True)
class AliasSpec:
    """An alias of a published version.

    Parameters
    ----------
    name : str
        Alias name, e.g. ``"live"``.
    version : str
        The published version it points to (``"1"``); never ``"$LATEST"`` when provisioned
        concurrency is set.
    provisioned_concurrency : int
        Environments to keep initialized for the alias (0 = none).
    """

    name: str
    version: str = "1"
    provisioned_concurrency: int = 0

    def __post_init__(self) -> None:
        if not self.name or self.name == "$LATEST" or self.name.isdigit():
            raise SpecError(f"alias name {self.name!r} is invalid: use letters, e.g. 'live'")
        if self.provisioned_concurrency < 0:
            raise SpecError(
                f"alias {self.name!r}: provisioned_concurrency must be >= 0, "
                f"got {self.provisioned_concurrency}"
            )
        if self.provisioned_concurrency and self.version == "$LATEST":
            raise SpecError(
                f"alias {self.name!r}: provisioned concurrency cannot be applied to $LATEST; "
                "point the alias at a published version"
            )


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function as the emulator runs it.

    Parameters
    ----------
    name : str
        Function name (what callers pass as ``FunctionName``).
    handler : str
        Handler string ``"package.module.function"``.
    code_dir : Path
        Directory that becomes ``LAMBDA_TASK_ROOT`` and the first ``sys.path`` entry.
    runtime : str
        Declared runtime (``python3.12``); environments run the local interpreter.
    memory_mb : int
        Memory size in MB (128..10240).
    timeout_s : float
        Invocation timeout in seconds (> 0).
    environment : Mapping[str, str]
        Function environment variables.
    snap_start : bool
        SnapStart on published versions (``ApplyOn: PublishedVersions``).
    reserved_concurrency : int or None
        Function concurrency limit (``ReservedConcurrentExecutions``); None = account limit.
    aliases : tuple of AliasSpec
        Aliases; each implies published version ``alias.version``.
    logical_id : str
        Logical ID in the template it came from (informational).
    extensions : tuple of Path
        Executables the emulator starts as external extensions of every environment (what a
        layer puts under ``/opt/extensions`` on Lambda); each registers under its file name.
        Not with ``snap_start`` (the emulator restores by forking the runtime only).
    layers : tuple of Path or None
        The function's layers, in order, each a folder as Lambda extracts it into ``/opt``
        (Python packages under ``python/``). A tuple (what a bundled template describes, empty
        for a function without layers): its environments run ``runtime``'s CPython with only
        ``code_dir``, these layers and what the Lambda runtime provides on the path
        (:mod:`infra.local.function_runtime`). ``None`` (the default for specs built by hand,
        and every function under ``local up --venv``): the emulator's interpreter with its
        site-packages, the project's ``.venv``.
    architecture : str
        ``x86_64`` or ``arm64`` (``Architectures``): which CPython runs the layers.
    """

    name: str
    handler: str
    code_dir: Path
    runtime: str = "python3.12"
    memory_mb: int = DEFAULT_MEMORY_MB
    timeout_s: float = DEFAULT_TIMEOUT_S
    environment: Mapping[str, str] = field(default_factory=dict)
    snap_start: bool = False
    reserved_concurrency: int | None = None
    aliases: tuple[AliasSpec, ...] = ()
    logical_id: str = ""
    extensions: tuple[Path, ...] = ()
    layers: tuple[Path, ...] | None = None
    architecture: str = "x86_64"

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("function name is empty")
        if "." not in self.handler:
            raise SpecError(
                f"function {self.name!r}: handler {self.handler!r} must be 'module.function'"
            )
        if not 128 <= self.memory_mb <= 10240:
            raise SpecError(
                f"function {self.name!r}: memory_mb must be 128..10240, got {self.memory_mb}"
            )
        if not self.timeout_s > 0:
            raise SpecError(f"function {self.name!r}: timeout_s must be > 0, got {self.timeout_s}")
        if self.reserved_concurrency is not None and self.reserved_concurrency < 0:
            raise SpecError(
                f"function {self.name!r}: reserved_concurrency must be >= 0, "
                f"got {self.reserved_concurrency}"
            )
        names = [a.name for a in self.aliases]
        if len(set(names)) != len(names):
            raise SpecError(f"function {self.name!r}: duplicate alias names {names}")
        if self.snap_start and any(a.provisioned_concurrency for a in self.aliases):
            raise SpecError(
                f"function {self.name!r}: SnapStart and provisioned concurrency cannot be "
                "combined on one function (AWS Lambda); choose one"
            )
        if self.snap_start and self.extensions:
            raise SpecError(f"function {self.name!r}: external extensions are not emulated with "
                            "SnapStart (restore forks the runtime process only)")
        if self.architecture not in ("x86_64", "arm64"):
            raise SpecError(f"function {self.name!r}: architecture must be 'x86_64' or 'arm64', "
                            f"got {self.architecture!r}")
        if self.layers is not None:
            if not (self.runtime.startswith("python3.") and self.runtime[len("python3."):].isdigit()):
                raise SpecError(f"function {self.name!r}: runtime {self.runtime!r} is not a Lambda "
                                "Python runtime (python3.12, ...): its layers cannot be run")
            object.__setattr__(self, "layers", tuple(Path(p) for p in self.layers))
        object.__setattr__(self, "extensions", tuple(Path(p) for p in self.extensions))
        object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
        object.__setattr__(self, "code_dir", Path(self.code_dir))

    @property
    def versions(self) -> tuple[str, ...]:
        """``$LATEST`` plus every published version an alias points to."""
        published = sorted({a.version for a in self.aliases if a.version != "$LATEST"})
        return ("$LATEST", *published)


#: Environment variables the deploy sets on an agent's function (infra/constructs/agent_function.py).
BASE_PATH_ENV = names.ENV_BASE_PATH


@dataclass(frozen=True)
class GatewayRoute:
    """One HTTP API route: its route key and the function alias it invokes.

    Parameters
    ----------
    function_name : str
    qualifier : str
        The alias (``live``).
    route_key : str
        ``$default`` (every request no other route takes) or ``"METHOD /path"``, the path with
        optional ``{name}`` segments and a last greedy ``{proxy+}``, e.g. ``ANY /lookup/{proxy+}``.
    """

    function_name: str
    qualifier: str = "live"
    route_key: str = "$default"

    @property
    def path_prefix(self) -> str:
        """``/`` for ``$default``, else the route's literal path before any ``{variable}``
        (``ANY /lookup/{proxy+}`` -> ``/lookup``)."""
        if self.route_key == "$default":
            return "/"
        path = self.route_key.split(" ", 1)[-1]
        literal = path.split("/{", 1)[0]
        return literal or "/"


#: API Gateway's maximum (and default) integration timeout of an HTTP API, seconds.
#: References: https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html
HTTP_API_INTEGRATION_TIMEOUT_S = 30.0
#: Account-level throttling per Region (steady rate, burst), the limits a route has when its
#: stage sets only one of the two. References:
#: https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html
ACCOUNT_RATE_PER_S, ACCOUNT_BURST = 10_000.0, 5_000


@dataclass(frozen=True)
class RouteThrottle:
    """A route's throttling: a token bucket of ``burst`` tokens refilled at ``rate_per_s``.

    Parameters
    ----------
    rate_per_s : float
        Steady-state requests per second (``ThrottlingRateLimit``), >= 0.
    burst : int
        Bucket size, requests (``ThrottlingBurstLimit``), >= 0; 0 refuses every request.

    References
    ----------
    https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html
    """

    rate_per_s: float
    burst: int

    def __post_init__(self) -> None:
        if not self.rate_per_s >= 0:
            raise SpecError(f"throttling rate must be >= 0 requests/s, got {self.rate_per_s}")
        if self.burst < 0:
            raise SpecError(f"throttling burst must be >= 0 requests, got {self.burst}")


@dataclass(frozen=True)
class StageSettings:
    """What the HTTP API's stage and integrations declare that the local gateway enforces.

    Parameters
    ----------
    default_throttle : RouteThrottle, optional
        The stage's ``DefaultRouteSettings`` throttling: every route's limits (None: unthrottled
        locally).
    route_throttles : Mapping[str, RouteThrottle]
        ``RouteSettings`` overrides by route key (``"ANY /lookup"``).
    integration_timeouts_s : Mapping[str, float]
        Integration ``TimeoutInMillis`` by route key, seconds (default
        `HTTP_API_INTEGRATION_TIMEOUT_S`).
    """

    default_throttle: RouteThrottle | None = None
    route_throttles: Mapping[str, RouteThrottle] = field(default_factory=dict)
    integration_timeouts_s: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, value in self.integration_timeouts_s.items():
            if not 0 < value <= HTTP_API_INTEGRATION_TIMEOUT_S:
                raise SpecError(f"route {key!r}: integration timeout must be in (0, "
                                f"{HTTP_API_INTEGRATION_TIMEOUT_S:g}] s, got {value}")
        object.__setattr__(self, "route_throttles", MappingProxyType(dict(self.route_throttles)))
        object.__setattr__(self, "integration_timeouts_s",
                           MappingProxyType(dict(self.integration_timeouts_s)))

    def throttle_for(self, route_key: str) -> RouteThrottle | None:
        """The route's limits: its own ``RouteSettings``, else the stage default."""
        return self.route_throttles.get(route_key, self.default_throttle)

    def timeout_for(self, route_key: str) -> float:
        """The route's integration timeout, seconds."""
        return self.integration_timeouts_s.get(route_key, HTTP_API_INTEGRATION_TIMEOUT_S)


@dataclass(frozen=True)
class AgentEndpoint:
    """An agent of the app: its name, function and external path prefix.

    Read from the function's environment (``WARMSTART_AGENT_NAME``, ``WARMSTART_BASE_PATH``;
    no base path = the root agent at ``/``).
    """

    name: str
    function_name: str
    path_prefix: str = "/"


@dataclass(frozen=True)
class LocalApp:
    """Everything a template describes for the local stack.

    ``gateway`` is the HTTP API's ``$default`` route (the root agent's alias), ``routes`` its
    other routes (``ANY /lookup``, ``ANY /lookup/{proxy+}``, ...); the local gateway takes the
    most specific route that matches a request, ``$default`` last.

    ``parameters`` are the template's SSM String parameters (name -> initial value), created in
    the moto server when the stack starts (e.g. the degradation level the warmer overwrites).

    ``stage`` is what the HTTP API's stage and integrations declare (throttling, integration
    timeouts), enforced by the local gateway.
    """

    functions: tuple[FunctionSpec, ...]
    gateway: GatewayRoute | None = None
    warnings: tuple[str, ...] = ()
    parameters: Mapping[str, str] = field(default_factory=dict)
    routes: tuple[GatewayRoute, ...] = ()
    stage: StageSettings = field(default_factory=StageSettings)
    #: function name -> its Lambda Managed Instances settings, for the functions on a capacity
    #: provider (the emulator runs them in its LMI mode)
    managed_instances: Mapping[str, ManagedInstancesConfig] = field(default_factory=dict)

    def function(self, name: str) -> FunctionSpec:
        for fn in self.functions:
            if fn.name == name or fn.logical_id == name:
                return fn
        raise KeyError(f"no function {name!r}; have {[f.name for f in self.functions]}")

    def all_routes(self) -> tuple[GatewayRoute, ...]:
        """Every route to a function of this app: ``routes`` then ``gateway`` (``$default``)."""
        names = {f.name for f in self.functions}
        found = (*self.routes, *((self.gateway,) if self.gateway is not None else ()))
        return tuple(r for r in found if r.function_name in names)

    @property
    def agents(self) -> tuple[AgentEndpoint, ...]:
        """The agents: functions whose environment names one (``WARMSTART_AGENT_NAME``)."""
        return tuple(
            AgentEndpoint(fn.environment[names.ENV_AGENT_NAME], fn.name,
                          fn.environment.get(BASE_PATH_ENV) or "/")
            for fn in self.functions if fn.environment.get(names.ENV_AGENT_NAME))

    def agent(self, name: str | None = None) -> AgentEndpoint:
        """The agent ``name``; with ``None`` the root agent (prefix ``/``), else the only one.

        Raises
        ------
        SpecError
            One line: ``unknown agent 'x'; known agents: intent, lookup``; or no agent at all;
            or several and none at ``/`` when no name is given.
        """
        agents = self.agents
        known = ", ".join(a.name for a in agents)
        if not agents:
            raise SpecError("the template declares no agent (no function with "
                            f"{names.ENV_AGENT_NAME}); synthesize the warmstart stack")
        if name is None:
            root = [a for a in agents if a.path_prefix == "/"]
            if root or len(agents) == 1:
                return (root or list(agents))[0]
            raise SpecError(f"several agents and none at path prefix '/': name one with --agent "
                            f"(known agents: {known})")
        for agent in agents:
            if agent.name == name:
                return agent
        raise SpecError(f"unknown agent {name!r}; known agents: {known}")
