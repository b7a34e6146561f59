"""What the emulator runs: functions, aliases and the gateway's target, as frozen values.

These come from a synthesized CloudFormation template (:mod:`infra.local.template`) or are
built directly by tests and replays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

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
        object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
        object.__setattr__(self, "code_dir", Path(self.code_dir))

    @property
    def versions(self) -> tuple[str, ...]:
        """``$LATEST`` plus every published version an alias points to."""
        published = sorted({a.version for a in self.aliases if a.version != "$LATEST"})
        return ("$LATEST", *published)


@dataclass(frozen=True)
class GatewayRoute:
    """The HTTP API's default route: which function and alias it invokes."""

    function_name: str
    qualifier: str = "live"


@dataclass(frozen=True)
class LocalApp:
    """Everything a template describes for the local stack.

    ``parameters`` are the template's SSM String parameters (name -> initial value), created in
    the moto server when the stack starts (e.g. the degradation level the warmer overwrites).
    """

    functions: tuple[FunctionSpec, ...]
    gateway: GatewayRoute | None = None
    warnings: tuple[str, ...] = ()
    parameters: Mapping[str, str] = field(default_factory=dict)

    def function(self, name: str) -> FunctionSpec:
        for fn in self.functions:
            if fn.name == name or fn.logical_id == name:
                return fn
        raise KeyError(f"no function {name!r}; have {[f.name for f in self.functions]}")
