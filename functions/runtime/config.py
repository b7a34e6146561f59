"""Run-time configuration: the environment read once into a frozen, typed object.

Only :meth:`RuntimeConfig.from_env` looks at environment variables, and only at the mapping it
is given (the handler passes ``os.environ`` once, in the init phase). Everything else receives
the resulting :class:`RuntimeConfig`.

Imports only the standard library.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import NamedTuple

from functions.runtime.contract import ContractError
from functions.runtime.contract import environment as names
from functions.runtime.contract.levels import Level

__all__ = [
    "DegradationLevel",
    "FinishPreload",
    "InitType",
    "RuntimeConfig",
    "RuntimeConfigError",
]

class RuntimeConfigError(ContractError):
    """An environment variable holds a value the toolkit cannot use.

    The message names the variable, the value and what is accepted.
    """




class InitType(enum.StrEnum):
    """How the execution environment was initialised.

    Values mirror ``AWS_LAMBDA_INITIALIZATION_TYPE``. ``lambda-managed-instances`` is what
    Lambda sets on Lambda Managed Instances (LMI): AWS's runtime interface emulator sets it for
    its LMI mode, beside ``AWS_LAMBDA_MAX_CONCURRENCY``
    (``aws/aws-lambda-runtime-interface-emulator``,
    ``internal/lambda-managed-instances``, its environment-variable test), and telemetry of LMI
    functions reports ``initializationType: lambda-managed-instances``.

    An LMI environment is initialised before it receives traffic (Lambda starts the version's
    execution environments before it marks the version ACTIVE, and scales out in the background,
    never on an arrival); its init may take up to 15 minutes (at least 130 s). So its init is
    pre-paid like provisioned concurrency: the toolkit loads the web stack and the model in the
    init phase. The Python runtime on LMI runs one process per concurrent request
    (``PerExecutionEnvironmentMaxConcurrency`` processes, each with its own init, each serving
    one request at a time, sharing ``/tmp``); an LMI environment is never frozen between
    invocations, and each process here is one toolkit environment (its own
    `functions.runtime.lifecycle.ExecutionEnvironment`, admission state and level cache).

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-execution-environment.html
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html
    """

    ON_DEMAND = "on-demand"
    PROVISIONED_CONCURRENCY = "provisioned-concurrency"
    SNAP_START = "snap-start"
    LAMBDA_MANAGED_INSTANCES = "lambda-managed-instances"

    @property
    def prepaid(self) -> bool:
        """True when the init phase is paid ahead of requests (PC, SnapStart snapshot, LMI)."""
        return self is not InitType.ON_DEMAND

    @property
    def managed_instances(self) -> bool:
        """True on Lambda Managed Instances (several requests at once per environment)."""
        return self is InitType.LAMBDA_MANAGED_INSTANCES


class FinishPreload(enum.StrEnum):
    """``WARMSTART_FINISH_PRELOAD``: where an on-demand cold start's preload finishes after its
    request was answered by overflow or a degraded answer while the model was still loading.

    ``after`` (default): the answer is returned at once and the preload goes on in the same
    invocation's post-response phase, through the toolkit's internal extension
    (`functions.runtime.post_response`); where the runtime offers no Extensions API
    (``AWS_LAMBDA_RUNTIME_API`` unset, or the registration refused) it falls back to
    ``before``. ``before``: the invocation spends what is left of the request's SLA budget
    waiting for the preload before it returns (the answer leaves within its SLA, later).
    ``off``: the invocation returns at once and the preload only progresses while later
    invocations run (Lambda freezes the environment in between). ``on`` is read as ``after``.
    """

    AFTER = "after"
    BEFORE = "before"
    OFF = "off"


def _finish_preload(env: Mapping[str, str], name: str) -> FinishPreload:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return FinishPreload.AFTER
    value = raw.strip().lower()
    if value == "on":
        return FinishPreload.AFTER
    try:
        return FinishPreload(value)
    except ValueError:
        raise RuntimeConfigError(f"{name}={raw!r} is not one of 'after', 'before', 'off'") from None


#: The degradation level type (`functions.runtime.contract.levels.Level`), under its config name.
DegradationLevel = Level


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise RuntimeConfigError(f"{name}={raw!r} is not a boolean: use 'true' or 'false'")


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise RuntimeConfigError(f"{name}={raw!r} is not a number: give milliseconds, e.g. 2000") from None
    if not value > 0 or value == float("inf"):
        raise RuntimeConfigError(f"{name}={raw!r} must be a positive, finite number of milliseconds")
    return value


def _on_off(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in ("on", "off"):
        return value == "on"
    raise RuntimeConfigError(f"{name}={raw!r} is not one of 'on', 'off'")


def _optional(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    return raw or None


def _enum(env: Mapping[str, str], name: str, kind: type[enum.StrEnum], default: str) -> str:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return kind(raw.strip())
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise RuntimeConfigError(f"{name}={raw!r} is not one of {allowed}") from None


def _positive_int(env: Mapping[str, str], name: str, unit: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) <= 0:
        raise RuntimeConfigError(f"{name}={raw!r} is not a positive number of {unit}")
    return int(raw)


def _base_path(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    if not raw or raw == "/":
        return None
    if not raw.startswith("/") or "//" in raw or any(c.isspace() for c in raw):
        raise RuntimeConfigError(f"{name}={raw!r} is not a path prefix: use e.g. '/lookup' (leading '/', "
                          "no spaces, no '//')")
    return raw.rstrip("/")


class RuntimeConfig(NamedTuple):
    """Everything the run-time toolkit reads from the environment (nothing agent-specific:
    an agent reads its own variables from `functions.runtime.agent.AgentRuntime.settings`).

    Immutable and typed. A ``NamedTuple`` rather than a frozen dataclass because this module is
    on the init path: ``dataclasses`` imports ``inspect`` (~8-12 ms measured with
    ``-X importtime`` here), ``typing`` costs about a third of that.

    Attributes
    ----------
    init_type : InitType
        ``AWS_LAMBDA_INITIALIZATION_TYPE`` (``on-demand`` when unset, e.g. in local runs).
    agent_name : str | None
        ``WARMSTART_AGENT_NAME``: the agent this function serves (set by the deploy); the
        declaration's name is used when unset.
    base_path : str | None
        ``WARMSTART_BASE_PATH``: the external path prefix the HTTP API routes to this agent
        (e.g. ``/lookup``), stripped at a ``/`` boundary before routing; None for none.
    strip_prefixes : tuple[str, ...]
        ``WARMSTART_STRIP_PREFIXES`` (comma-separated): custom-domain mapping keys the event
        does not reveal (a ``$default`` route behind a custom domain), stripped first
        (`functions.runtime.events.split_path`).
    sla_ms : float
        ``WARMSTART_SLA_MS``, default SLA of P0 routes in milliseconds (default 2000).
    debug_resource : bool
        ``WARMSTART_DEBUG_RESOURCE``; enables ``GET /debug/resource`` (default false).
    degradation_parameter : str | None
        ``WARMSTART_DEGRADATION_PARAMETER``, SSM parameter holding the level.
    degradation_level : DegradationLevel
        ``WARMSTART_DEGRADATION_LEVEL``, static level when no parameter is set (default L0).
    overflow_endpoint_name : str | None
        ``WARMSTART_OVERFLOW_ENDPOINT_NAME``; None disables overflow.
    overflow_endpoint_url : str | None
        ``WARMSTART_OVERFLOW_ENDPOINT_URL`` for the ``sagemaker-runtime`` client.
    overflow_inference_component : str | None
        ``WARMSTART_OVERFLOW_INFERENCE_COMPONENT``: the inference component of the endpoint
        that serves the overflow (``InvokeEndpoint``'s ``InferenceComponentName``, required by
        an endpoint that hosts inference components, which can scale to zero); None: the
        endpoint's production variant answers.
    overflow_capacity_parameter : str | None
        ``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``, SSM parameter holding the endpoint's
        capacity the warmer publishes (`functions.runtime.overflow_capacity`); None: overflow
        is tried whenever configured.
    admission : bool
        ``WARMSTART_ADMISSION`` (``on`` | ``off``, default ``on``). ``off`` is the plain
        on-demand baseline ("warmstart off"): a request waits for the local model (bounded by
        the invocation's remaining time), never overflows, never gets a degraded answer and is
        never shed by admission (bad input is still a 4xx; a model that failed to load is
        still a 503 ``model_error``).
    finish_preload : FinishPreload
        ``WARMSTART_FINISH_PRELOAD`` (``after`` | ``before`` | ``off``, default ``after``; see
        `FinishPreload`). Lambda freezes an execution environment between invocations, so a
        background preload only progresses while an invocation (or its post-response phase)
        runs; without finishing it, later requests would keep overflowing. References:
        https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
    runtime_api : str | None
        ``AWS_LAMBDA_RUNTIME_API`` (``host:port`` of the Runtime and Extensions APIs).
    memory_mb : int | None
        ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``, MB.
    max_concurrency : int | None
        ``AWS_LAMBDA_MAX_CONCURRENCY``: requests the execution environment serves at once,
        set by Lambda on Managed Instances (the function's
        ``PerExecutionEnvironmentMaxConcurrency``; with Python, the number of runtime
        processes, each serving one request at a time); None elsewhere (one at a time).
        References: https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html ("Lambda
        Managed Instances support concurrent requests"); aws/aws-lambda-go PR #600.
    calibration : str | None
        ``WARMSTART_CALIBRATION``: the admission calibration document (JSON, written at synth
        from ``warmstart calibrate``; read by `functions.runtime.calibration.load` in the
        toolkit stage, so a bad one never fails the init: admission falls back to the seeds).
    service_name : str
        ``POWERTOOLS_SERVICE_NAME`` (default ``warmstart-agent``).
    metrics_namespace : str
        ``POWERTOOLS_METRICS_NAMESPACE`` (default ``Warmstart``).
    function_name : str | None
        ``AWS_LAMBDA_FUNCTION_NAME``.
    function_version : str | None
        ``AWS_LAMBDA_FUNCTION_VERSION``.
    region : str | None
        ``AWS_REGION``.
    stream_idle_ms : float
        ``WARMSTART_STREAM_IDLE_MS``: longest a streaming route's app may send nothing (before
        its first chunk or between two), ms, before the stream ends with an error event
        (``stream_timeout``); default 30,000 (`functions.runtime.asgi_stream.DEFAULT_IDLE_S`).
    """

    init_type: InitType = InitType.ON_DEMAND
    agent_name: str | None = None
    base_path: str | None = None
    strip_prefixes: tuple[str, ...] = ()
    sla_ms: float = 2000.0
    debug_resource: bool = False
    degradation_parameter: str | None = None
    degradation_level: DegradationLevel = DegradationLevel.L0
    overflow_endpoint_name: str | None = None
    overflow_endpoint_url: str | None = None
    overflow_inference_component: str | None = None
    overflow_capacity_parameter: str | None = None
    admission: bool = True
    finish_preload: FinishPreload = FinishPreload.AFTER
    runtime_api: str | None = None
    memory_mb: int | None = None
    max_concurrency: int | None = None
    calibration: str | None = None
    service_name: str = "warmstart-agent"
    metrics_namespace: str = "Warmstart"
    function_name: str | None = None
    function_version: str | None = None
    region: str | None = None
    stream_idle_ms: float = 30_000.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RuntimeConfig:
        """Read the configuration from an environment mapping.

        Parameters
        ----------
        env : Mapping[str, str]
            Usually ``os.environ``, passed once by the handler at init.

        Returns
        -------
        RuntimeConfig

        Raises
        ------
        RuntimeConfigError
            A variable holds an unusable value (unknown init type or level, a non-boolean
            ``WARMSTART_DEBUG_RESOURCE``, a non-positive ``WARMSTART_SLA_MS``, a
            ``WARMSTART_ADMISSION`` other than ``on`` / ``off``, a ``WARMSTART_BASE_PATH`` that
            is not a path, an ``AWS_LAMBDA_MAX_CONCURRENCY`` that is not a positive integer).
        """
        return cls(
            init_type=InitType(_enum(env, "AWS_LAMBDA_INITIALIZATION_TYPE", InitType, "on-demand")),
            agent_name=_optional(env, names.ENV_AGENT_NAME),
            base_path=_base_path(env, names.ENV_BASE_PATH),
            strip_prefixes=tuple(p for p in (_base_path({"v": raw}, "v") for raw in
                                             env.get(names.ENV_STRIP_PREFIXES, "").split(","))
                                 if p is not None),
            sla_ms=_positive_float(env, names.ENV_SLA_MS, 2000.0),
            debug_resource=_bool(env, names.ENV_DEBUG_RESOURCE, False),
            degradation_parameter=_optional(env, names.ENV_DEGRADATION_PARAMETER),
            degradation_level=DegradationLevel(
                _enum(env, names.ENV_DEGRADATION_LEVEL, DegradationLevel, "L0")
            ),
            overflow_endpoint_name=_optional(env, names.ENV_OVERFLOW_ENDPOINT_NAME),
            overflow_endpoint_url=_optional(env, names.ENV_OVERFLOW_ENDPOINT_URL),
            overflow_inference_component=_optional(env, names.ENV_OVERFLOW_INFERENCE_COMPONENT),
            overflow_capacity_parameter=_optional(env, names.ENV_OVERFLOW_CAPACITY_PARAMETER),
            admission=_on_off(env, names.ENV_ADMISSION, True),
            finish_preload=_finish_preload(env, names.ENV_FINISH_PRELOAD),
            runtime_api=_optional(env, "AWS_LAMBDA_RUNTIME_API"),
            memory_mb=_positive_int(env, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "MB"),
            max_concurrency=_positive_int(env, "AWS_LAMBDA_MAX_CONCURRENCY",
                                          "concurrent requests"),
            calibration=_optional(env, names.ENV_CALIBRATION),
            service_name=_optional(env, "POWERTOOLS_SERVICE_NAME") or "warmstart-agent",
            metrics_namespace=_optional(env, "POWERTOOLS_METRICS_NAMESPACE") or "Warmstart",
            function_name=_optional(env, "AWS_LAMBDA_FUNCTION_NAME"),
            function_version=_optional(env, "AWS_LAMBDA_FUNCTION_VERSION"),
            region=_optional(env, "AWS_REGION"),
            stream_idle_ms=_positive_float(env, names.ENV_STREAM_IDLE_MS, 30_000.0),
        )
