"""Lambda Managed Instances (LMI) in the emulator: settings, state and the scaling rule.

What is emulated (the process side is in :mod:`.lmi`):

- A **capacity provider** (:class:`CapacityProviderState`) owns EC2-like instances of one type
  (``instance_vcpus`` each), up to ``max_vcpu`` vCPUs in all (the provider's ``MaxVCpuCount``,
  shared by every function on it). A new instance takes ``instance_launch_s`` clock seconds to
  launch; it is billed from then until it ends, per instance type (instance-seconds).
- An LMI **execution environment** (:class:`LmiEnvironment`) of a function version takes
  ``vcpus_per_environment`` vCPUs on one instance and runs ``per_environment`` real runtime
  processes ("workers", each an :class:`~infra.local.emulator.environment.EmulatedEnvironment`
  with its own init, one request at a time), sharing one ``TMPDIR`` (the emulator cannot give
  them one ``/tmp`` path; code that uses ``tempfile`` sees the shared folder). It is never
  frozen; a worker that crashes leaves the others serving.
- **Routing**: a request goes to an idle worker of the version (the least busy environment
  first); there is no cold start on the request path. When every worker of the version is
  busy the request is refused at once: ``429 TooManyRequestsException``.
- **Background scaling** (:func:`want_environments`), every ``scale_interval_s`` clock
  seconds, never on an arrival: the version's demand in the last interval (its peak requests in
  flight plus the requests throttled) is to use at most ``target_utilization`` of the slots;
  the environments it wants are raised at once (new ones start on instances with room, else on
  newly launched instances, after the launch delay) and lowered only to the highest want of the
  last ``scale_in_hold_s``. Always within ``[MinExecutionEnvironments,
  MaxExecutionEnvironments]`` and the provider's vCPU limit (at the limit scale-out stops and
  the refused launches are counted).

The rule's source: AWS documents that LMI "scales asynchronously based on CPU resource
utilization and multi-concurrency saturation", that it "does not scale when invocations arrive",
and that "if your traffic more than doubles within 5 minutes, you may see throttles". AWS
publishes neither the target nor the delays; the defaults here are assumptions that reproduce
that rule: a target of 0.5 keeps room for traffic to double, so traffic that at most doubles
between two decisions is served, and traffic that more than doubles faster than capacity comes
(the interval plus the launch delay, within the 5-minute window) is throttled until it has come.
The same assumptions as the policy simulator (``warmers/simulator/lmi.py``: headroom 2x,
5-minute scale-in hold).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-execution-environment.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html
https://docs.aws.amazon.com/lambda/latest/api/API_FunctionScalingConfig.html (0..15000)
https://docs.aws.amazon.com/lambda/latest/api/API_CapacityProviderScalingConfig.html
(``MaxVCpuCount`` 2..15000)
https://docs.aws.amazon.com/lambda/latest/api/API_LambdaManagedInstancesCapacityProviderConfig.html
(``PerExecutionEnvironmentMaxConcurrency`` 1..1600, ``ExecutionEnvironmentMemoryGiBPerVCpu`` 2..8)
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

# the facts the warmer plans with (Python's 16 requests per vCPU, AWS's default minimum of 3,
# the API's 15,000): one definition, with its sources, in warmers/lmi.py
from infra.local.emulator.config import ManagedInstancesConfig

if TYPE_CHECKING:
    from infra.local.emulator.environment import EmulatedEnvironment

#: ``AWS_LAMBDA_INITIALIZATION_TYPE`` on Lambda Managed Instances (see
#: `functions.runtime.config.InitType`).
LMI_INIT_TYPE: Final = "lambda-managed-instances"
#: Smallest function memory on LMI, MB (2 GB and 1 vCPU).
MIN_MEMORY_MB: Final = 2048
#: Init timeout of an LMI environment: the larger of 130 s and the function timeout, s.
#: https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-execution-environment.html
MIN_INIT_TIMEOUT_S: Final = 130.0
#: Prefix of ``EmulatedEnvironment.provisioned_for`` of an LMI worker (``lmi:<environment id>``;
#: ``:`` is not allowed in an alias name, so it never meets an alias's provisioned concurrency).
WORKER_MARK: Final = "lmi:"


def want_environments(demand: int, per_environment: int, target_utilization: float,
                      minimum: int, maximum: int | None) -> int:
    """Environments the scaler wants for ``demand`` requests at once.

    ``ceil(demand / (per_environment x target_utilization))``, at least ``minimum``, at most
    ``maximum`` (None: no maximum). See the module docstring for the rule and its source.
    """
    want = math.ceil(demand / (per_environment * target_utilization)) if demand > 0 else 0
    want = max(minimum, want)
    return want if maximum is None else min(want, maximum)


@dataclass(eq=False)
class Instance:
    """One instance of a capacity provider; times in clock seconds."""

    instance_type: str
    vcpus: int
    ready_at: float
    id: str = field(default_factory=lambda: "i-" + uuid.uuid4().hex[:17])
    used_vcpus: float = 0.0
    ended_at: float | None = None

    def billed_s(self, now: float) -> float:
        """Instance-seconds billed so far: from launch (``ready_at``) until its end or ``now``."""
        end = self.ended_at if self.ended_at is not None else now
        return max(0.0, end - self.ready_at)


class CapacityProviderState:
    """A capacity provider's instances and vCPU limit (guarded by its functions' locks and
    :attr:`lock`)."""

    def __init__(self, arn: str, instance_type: str, instance_vcpus: int, max_vcpu: int) -> None:
        import threading

        self.arn = arn
        self.instance_type = instance_type
        self.instance_vcpus = instance_vcpus
        self.max_vcpu = max_vcpu
        self.instances: list[Instance] = []
        #: scale-out decisions refused at the vCPU limit (one per environment not started)
        self.scale_out_blocked = 0
        self.lock = threading.Lock()

    def live(self) -> list[Instance]:
        return [i for i in self.instances if i.ended_at is None]

    def vcpus(self) -> int:
        """vCPUs of the live instances."""
        return sum(i.vcpus for i in self.live())

    def place(self, vcpus: float, now: float, launch_s: float) -> Instance | None:
        """An instance with ``vcpus`` free (claimed): a live one, else a newly launched one
        (usable ``launch_s`` later); None at the vCPU limit (counted)."""
        with self.lock:
            for inst in self.live():
                if inst.vcpus - inst.used_vcpus >= vcpus - 1e-9:
                    inst.used_vcpus += vcpus
                    return inst
            if self.vcpus() + self.instance_vcpus > self.max_vcpu:
                self.scale_out_blocked += 1
                return None
            inst = Instance(self.instance_type, self.instance_vcpus, ready_at=now + launch_s)
            inst.used_vcpus = vcpus
            self.instances.append(inst)
            return inst

    def release(self, inst: Instance, vcpus: float, now: float) -> None:
        """Give back an environment's vCPUs; an instance left empty ends (billing stops)."""
        with self.lock:
            inst.used_vcpus = max(0.0, inst.used_vcpus - vcpus)
            if inst.used_vcpus <= 1e-9 and inst.ended_at is None:
                inst.ended_at = max(now, inst.ready_at)

    def end_all(self, now: float) -> None:
        with self.lock:
            for inst in self.live():
                inst.ended_at = max(now, inst.ready_at) if now >= inst.ready_at else inst.ready_at

    def instance_seconds(self, now: float) -> dict[str, float]:
        """Billed instance-seconds per instance type."""
        with self.lock:
            out: dict[str, float] = {}
            for inst in self.instances:
                out[inst.instance_type] = out.get(inst.instance_type, 0.0) + inst.billed_s(now)
            return out


LmiEnvState = Literal["launching", "init", "ready", "dead"]


@dataclass(eq=False)
class LmiEnvironment:
    """One LMI execution environment: its instance, vCPUs, shared ``TMPDIR`` and workers."""

    version: str
    instance: Instance
    vcpus: float
    tmp_dir: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    workers: list[EmulatedEnvironment] = field(default_factory=list)
    state: LmiEnvState = "launching"
    retire: bool = False

    def busy(self) -> int:
        return sum(1 for w in self.workers if w.state == "busy")

    def idle_worker(self) -> EmulatedEnvironment | None:
        return next((w for w in self.workers if w.state == "idle"), None)


class LmiFunction:
    """A function's LMI state: scaling configs per version, environments, demand, throttles.

    Guarded by the function pool's lock.
    """

    def __init__(self, config: ManagedInstancesConfig, provider: CapacityProviderState,
                 memory_mb: int) -> None:
        self.config = config
        self.provider = provider
        self.per_environment = config.concurrency(memory_mb)
        self.vcpus_per_environment = config.vcpus_per_environment(memory_mb)
        #: version -> (MinExecutionEnvironments, MaxExecutionEnvironments or None)
        self.requested: dict[str, tuple[int, int | None]] = {}
        self.applied: dict[str, tuple[int, int | None]] = {}
        self.environments: list[LmiEnvironment] = []
        self.in_flight: dict[str, int] = {}
        self.peak: dict[str, int] = {}  # peak in flight since the last decision
        self.throttled: dict[str, int] = {}  # requests throttled since the last decision
        self.wants: dict[str, deque[tuple[float, int]]] = {}
        self.throttles = 0  # all requests throttled
        self.init_error: str | None = None  # the last runtime worker init that failed

    def live(self, version: str) -> list[LmiEnvironment]:
        """The version's environments that are not ended nor retiring."""
        return [e for e in self.environments
                if e.version == version and e.state != "dead" and not e.retire]

    def acquire(self, version: str) -> EmulatedEnvironment | None:
        """An idle worker of the version (marked busy), from its least busy environment; None
        (the request counted as throttled) when every worker is busy."""
        ready = [e for e in self.live(version) if e.idle_worker() is not None]
        if not ready:
            self.throttles += 1
            self.throttled[version] = self.throttled.get(version, 0) + 1
            return None
        worker = min(ready, key=LmiEnvironment.busy).idle_worker()
        assert worker is not None
        worker.state = "busy"
        self.in_flight[version] = in_flight = self.in_flight.get(version, 0) + 1
        self.peak[version] = max(self.peak.get(version, 0), in_flight)
        return worker

    def released(self, version: str) -> None:
        self.in_flight[version] = max(0, self.in_flight.get(version, 0) - 1)

    def decide(self, version: str, now: float, *, interval_ended: bool = True) -> int:
        """Environments the version should have now (the rule of the module docstring).

        ``interval_ended``: a scaling decision, which starts a new interval (its demand is
        reset and its want kept for the hold); False for a scaling-config change between two
        decisions, which only applies the new minimum and maximum.
        """
        demand = self.peak.get(version, 0) + self.throttled.get(version, 0)
        minimum, maximum = self.requested[version]
        want = want_environments(demand, self.per_environment, self.config.target_utilization,
                                 minimum, maximum)
        history = self.wants.setdefault(version, deque())
        if not interval_ended:
            held = max([w for _, w in history] + [want])
            return max(minimum, min(held, maximum) if maximum is not None else held)
        self.peak[version] = self.in_flight.get(version, 0)
        self.throttled[version] = 0
        history.append((now, want))
        while history and now - history[0][0] > self.config.scale_in_hold_s:
            history.popleft()
        held = max(w for _, w in history)
        return max(minimum, min(held, maximum) if maximum is not None else held)
