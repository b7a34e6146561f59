"""Settings of the local Lambda service and its limits (from the Lambda docs)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from functions.runtime.streaming import CAPPED_STREAM_BYTES_PER_S, MAX_STREAMED_RESPONSE_BYTES
from infra.local import bootstrap as wire
from warmers.lmi import (
    DEFAULT_MIN_EXECUTION_ENVIRONMENTS,
    MAX_EXECUTION_ENVIRONMENTS,
    PYTHON_CONCURRENCY_PER_VCPU,
)

#: How an emulated execution environment started (``AWS_LAMBDA_INITIALIZATION_TYPE``).
EmulatedInitType = Literal["on-demand", "provisioned-concurrency", "snap-start",
                           "lambda-managed-instances"]
#: Where an emulated execution environment is in its life: ``busy`` covers the whole invoke
#: phase, post-response work of extensions included.
EmulatedEnvState = Literal["init", "idle", "busy", "dead"]
#: The runtime interface client an environment runs (see :class:`EmulatorConfig`).
RuntimeClientName = Literal["awslambdaric", "bootstrap"]
BOOTSTRAP = Path(wire.__file__).resolve()
#: Synchronous invoke payload limit (6 MB). References: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
MAX_SYNC_PAYLOAD_BYTES = 6 * 1024 * 1024
#: Asynchronous (Event) payload limit (1 MB since 2025; was 256 KB).
MAX_ASYNC_PAYLOAD_BYTES = 1024 * 1024
#: Host variables passed to environments (the rest of the host environment is not).
DEFAULT_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "ORT_DISABLE_TELEMETRY",
                         "MPLCONFIGDIR", "PYTHONDONTWRITEBYTECODE", "TMPDIR")


@dataclass(frozen=True)
class EmulatorConfig:
    """Settings of the local Lambda service.

    Parameters
    ----------
    region : str
        Region in ARNs and ``AWS_REGION``.
    account_id : str
        Account in ARNs.
    idle_timeout_s : float
        Clock seconds an on-demand environment stays idle before it is reclaimed (AWS does not
        publish this; observed 5-15 minutes, default 600).
    account_concurrency_limit : int
        Concurrency limit of functions without reserved concurrency (AWS default 1000).
    pc_allocation_delay_s : float
        Clock seconds between a ``PutProvisionedConcurrencyConfig`` call and the start of
        allocation (AWS takes minutes; default 60).
    init_timeout_s : float
        Real seconds an on-demand init may take (Lambda: 10 s).
    prepaid_init_timeout_s : float
        Real seconds a provisioned or SnapStart (snapshot) init may take.
    python : str
        Interpreter for execution environments (default: this one).
    inherit_env : tuple of str
        Host environment variables passed through to environments.
    extra_env : Mapping[str, str]
        Variables added to every environment (e.g. ``AWS_ENDPOINT_URL`` of the moto server).
    reap_interval_s : float
        Real seconds between idle-reclaim sweeps.
    runtime_client : {"awslambdaric", "bootstrap"}
        What on-demand and provisioned environments run against their Runtime API:
        ``awslambdaric`` (AWS's runtime interface client, what AWS's Python base images run;
        the default) or ``bootstrap`` (:mod:`infra.local.bootstrap`, stdlib only). SnapStart
        templates always run ``bootstrap``: the emulator restores by forking the template,
        which only a runtime that forks on request can do (see ``bench emulator``).
    post_response_grace_s : float
        Real seconds the invoking thread waits, after the runtime posted its answer, for the
        runtime to ask for the next event (a runtime does so at once, well under 1 ms) before
        it hands the answer over. Only the runtime is waited for: when extensions still work
        after the response, the answer goes out then and the invoke phase ends in the
        background. Keeps a run of sequential invocations on one warm environment.
    freeze_idle : bool
        Freeze an idle execution environment (SIGSTOP to its process group) once its first
        invocation returns, or once a provisioned environment's init phase ends, and thaw it
        (SIGCONT) just before the next invocation or before it is ended, as Lambda does: its
        background threads and processes make no progress between invocations. Default on;
        off only to compare with the optimistic never-frozen behaviour.
    max_stream_bytes : int
        Largest response a runtime may stream, bytes (AWS: 200 MB, the default); a longer
        stream fails with ``Function.ResponseSizeTooLarge``. Smaller in tests.
    stream_bytes_per_s : float or None
        Bandwidth of a streamed response past its first 6 MB, bytes per second (AWS: 2 MB/s,
        the default); None: uncapped.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html (10 s init;
    the environment is frozen after the function and extensions complete)
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html (1000 default)
    https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html (200 MB,
    2 MB/s past the first 6 MB)
    """

    region: str = "us-east-1"
    account_id: str = "123456789012"
    idle_timeout_s: float = 600.0
    account_concurrency_limit: int = 1000
    pc_allocation_delay_s: float = 60.0
    init_timeout_s: float = 10.0
    prepaid_init_timeout_s: float = 120.0
    python: str = sys.executable
    inherit_env: tuple[str, ...] = DEFAULT_INHERITED_ENV
    extra_env: Mapping[str, str] = field(default_factory=dict)
    reap_interval_s: float = 1.0
    freeze_idle: bool = True
    runtime_client: RuntimeClientName = "awslambdaric"
    post_response_grace_s: float = 0.2
    max_stream_bytes: int = MAX_STREAMED_RESPONSE_BYTES
    stream_bytes_per_s: float | None = CAPPED_STREAM_BYTES_PER_S

    def __post_init__(self) -> None:
        for name in ("idle_timeout_s", "init_timeout_s", "prepaid_init_timeout_s", "reap_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.pc_allocation_delay_s < 0:
            raise ValueError(f"pc_allocation_delay_s must be >= 0, got {self.pc_allocation_delay_s}")
        if self.runtime_client not in ("awslambdaric", "bootstrap"):
            raise ValueError(f"runtime_client must be 'awslambdaric' or 'bootstrap', got {self.runtime_client!r}")
        if self.post_response_grace_s < 0:
            raise ValueError(f"post_response_grace_s must be >= 0, got {self.post_response_grace_s}")
        if self.stream_bytes_per_s is not None and not self.stream_bytes_per_s > 0:
            raise ValueError(f"stream_bytes_per_s must be > 0 or None, got {self.stream_bytes_per_s}")
        if self.max_stream_bytes < 1:
            raise ValueError(f"max_stream_bytes must be >= 1, got {self.max_stream_bytes}")
        if self.account_concurrency_limit < 1:
            raise ValueError("account_concurrency_limit must be >= 1")


# the facts the warmer plans with (Python's 16 requests per vCPU, AWS's default minimum of 3,
# the API's 15,000): one definition, with its sources, in warmers/lmi.py
@dataclass(frozen=True)
class ManagedInstancesConfig:
    """How one emulated function runs on LMI (its capacity provider and scaling settings).

    Parameters
    ----------
    capacity_provider_arn : str
        The capacity provider; functions given the same ARN share its instances and vCPU limit.
    instance_type : str
        EC2 instance type (billing key; ``warmers/prices.json`` item ``ec2_<type>_hour``).
    instance_vcpus : int
        vCPUs of one instance (m7g.large: 2).
    max_vcpu : int
        The provider's ``MaxVCpuCount`` (2..15000; emulator default 400, not AWS's).
    memory_gib_per_vcpu : float
        ``ExecutionEnvironmentMemoryGiBPerVCpu`` (2..8): an environment takes memory / this
        vCPUs (at least 1).
    per_environment_max_concurrency : int or None
        ``PerExecutionEnvironmentMaxConcurrency`` (1..1600): runtime processes per environment;
        None: Python's default, 16 per vCPU.
    min_execution_environments, max_execution_environments : int, int or None
        The version's scaling config at deploy (defaults: AWS's 3, unbounded).
    instance_launch_s : float
        Clock seconds from a launch decision to a usable instance (ASSUMPTION: AWS publishes
        no figure; default 60). Not paid at deploy.
    scale_interval_s : float
        Clock seconds between two scaling decisions (ASSUMPTION, default 15).
    target_utilization : float
        Share of the slots the scaler lets the demand use, in (0, 1] (ASSUMPTION, default 0.5:
        room for traffic to double).
    scale_in_hold_s : float
        Clock seconds a higher want holds before capacity comes down (ASSUMPTION, 300).

    Raises
    ------
    ValueError
        A value outside its range (the message names the field).
    """

    capacity_provider_arn: str = "arn:aws:lambda:us-east-1:123456789012:capacity-provider:local"
    instance_type: str = "m7g.large"
    instance_vcpus: int = 2
    max_vcpu: int = 400
    memory_gib_per_vcpu: float = 2.0
    per_environment_max_concurrency: int | None = None
    min_execution_environments: int = DEFAULT_MIN_EXECUTION_ENVIRONMENTS
    max_execution_environments: int | None = None
    instance_launch_s: float = 60.0
    scale_interval_s: float = 15.0
    target_utilization: float = 0.5
    scale_in_hold_s: float = 300.0

    def __post_init__(self) -> None:
        if not 2 <= self.max_vcpu <= 15_000:
            raise ValueError(f"max_vcpu must be 2..15000 (MaxVCpuCount), got {self.max_vcpu}")
        if not 1 <= self.instance_vcpus <= self.max_vcpu:
            raise ValueError(f"instance_vcpus must be 1..max_vcpu ({self.max_vcpu}), got "
                             f"{self.instance_vcpus}")
        if not 2.0 <= self.memory_gib_per_vcpu <= 8.0:
            raise ValueError("memory_gib_per_vcpu must be 2..8 (ExecutionEnvironmentMemoryGiBPerVCpu)"
                             f", got {self.memory_gib_per_vcpu}")
        per_env = self.per_environment_max_concurrency
        if per_env is not None and not 1 <= per_env <= 1600:
            raise ValueError("per_environment_max_concurrency must be 1..1600 "
                             f"(PerExecutionEnvironmentMaxConcurrency), got {per_env}")
        check_scaling(self.min_execution_environments, self.max_execution_environments)
        for name in ("instance_launch_s", "scale_in_hold_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.scale_interval_s > 0:
            raise ValueError(f"scale_interval_s must be > 0, got {self.scale_interval_s}")
        if not 0 < self.target_utilization <= 1:
            raise ValueError(f"target_utilization must be in (0, 1], got {self.target_utilization}")

    def vcpus_per_environment(self, memory_mb: int) -> float:
        """vCPUs one environment of a function of ``memory_mb`` MB takes (at least 1)."""
        return max(1.0, memory_mb / 1024.0 / self.memory_gib_per_vcpu)

    def concurrency(self, memory_mb: int) -> int:
        """Runtime processes (requests at once) per environment."""
        if self.per_environment_max_concurrency is not None:
            return self.per_environment_max_concurrency
        return int(PYTHON_CONCURRENCY_PER_VCPU * self.vcpus_per_environment(memory_mb))


def check_scaling(minimum: object, maximum: object) -> None:
    """Raise ValueError unless ``minimum``/``maximum`` are a valid ``FunctionScalingConfig``
    (integers 0..15000, ``maximum`` None or >= ``minimum``); the message names the field."""
    for name, value in (("MinExecutionEnvironments", minimum), ("MaxExecutionEnvironments", maximum)):
        if value is None and name == "MaxExecutionEnvironments":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not (
                0 <= value <= MAX_EXECUTION_ENVIRONMENTS):
            raise ValueError(f"{name} must be an integer 0..{MAX_EXECUTION_ENVIRONMENTS}, "
                             f"got {value!r}")
    if maximum is not None and minimum > maximum:  # type: ignore[operator]
        raise ValueError(f"MinExecutionEnvironments ({minimum}) is greater than "
                         f"MaxExecutionEnvironments ({maximum})")
