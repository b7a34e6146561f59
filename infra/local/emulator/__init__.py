"""A local Lambda service: real execution environments as processes, each with its own Runtime API.

Each execution environment is a process group: its external extensions, then its runtime
(AWS's ``awslambdaric`` by default, or the stdlib :mod:`infra.local.bootstrap`), talking HTTP
to the environment's own Lambda Runtime API and Extensions API
(``AWS_LAMBDA_RUNTIME_API=127.0.0.1:PORT``). The init phase is measured from process start
until the runtime and every extension wait on ``next``; the caller gets the answer when the
runtime posts it; the environment stays busy (and billed) until the runtime and every
extension wait on ``next`` again, and only then is it frozen (SIGSTOP to its process group,
``EmulatorConfig.freeze_idle``) until the next invocation or its end. The emulator scales from
zero, reuses idle environments, reclaims them after an idle timeout (``SHUTDOWN`` to external
extensions), throttles beyond the function's concurrency limit, keeps provisioned environments
for aliases, and restores SnapStart environments by forking an initialized template process
that ran the before-snapshot hooks.

A function deployed on Lambda Managed Instances (``add_function(...,
managed_instances=ManagedInstancesConfig(...))``, :mod:`.lmi`) runs instead on environments of
several runtime processes each, on instances of a capacity provider: no cold start on the
request path, ``429`` beyond capacity, background scale-out, ``Put/GetFunctionScalingConfig``,
billing by instance-time.

A runtime may answer in the Runtime API's streaming mode (warmstart's
:mod:`functions.runtime.stream_runtime`, started by the function's
``AWS_LAMBDA_EXEC_WRAPPER``): :meth:`Emulator.invoke_stream` hands the caller each piece as it
arrives (:class:`InvocationStream`), :meth:`Emulator.invoke` collects it (6 MB at most).

Parts, one trade each; :class:`Emulator` composes them (has-a) and each can be made alone from
an :class:`~.core.EmulatorContext` (the part tests do):

- ``config``       :class:`EmulatorConfig` and Lambda's limits; :class:`ManagedInstancesConfig`
- ``core``         :class:`~.core.EmulatorContext`, what the parts share (functions, clock,
                   metrics, log, threads), and the per-function state
- ``records``      :class:`Report` (REPORT numbers, billing), :class:`InvokeResult`, :class:`InvocationLog`
- ``runtime_api``  the per-environment Runtime API and Extensions API server
- ``environment``  one environment's processes: freeze, thaw, SHUTDOWN and end; SnapStart templates
- ``processes``    :class:`~.processes.Processes`: variables, spawn, the init phase, templates
- ``concurrency``  :class:`~.concurrency.Concurrency`: the limit (throttles), in-flight counts,
                   reserved and provisioned concurrency API and allocation
- ``pool``         :class:`~.pool.EnvironmentPool`: acquire (reuse order) / release / reclaim
- ``lmi_state``    Lambda Managed Instances: instances, environments, the scaling rule
- ``lmi``          :class:`~.lmi.ManagedInstances`: worker processes, routing, background
                   scaling, Put/GetFunctionScalingConfig, instance-time billing
- ``stream``       :class:`InvocationStream`: a streamed answer as the caller reads it
- ``service``      :class:`Emulator`: Invoke, InvokeWithResponseStream and the invoke phase

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html
https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html
https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html
https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-scaling.html
"""

from infra.local.emulator.config import (
    DEFAULT_INHERITED_ENV,
    MAX_ASYNC_PAYLOAD_BYTES,
    MAX_SYNC_PAYLOAD_BYTES,
    EmulatedEnvState,
    EmulatedInitType,
    EmulatorConfig,
    ManagedInstancesConfig,
    RuntimeClientName,
)
from infra.local.emulator.environment import EmulatedEnvironment, SnapshotTemplate
from infra.local.emulator.records import InvocationListener, InvocationLog, InvokeResult, Report
from infra.local.emulator.runtime_api import RuntimeApiServer
from infra.local.emulator.service import Emulator
from infra.local.emulator.stream import InvocationStream

__all__ = [
    "DEFAULT_INHERITED_ENV", "MAX_ASYNC_PAYLOAD_BYTES", "MAX_SYNC_PAYLOAD_BYTES", "EmulatedEnvState",
    "EmulatedEnvironment", "EmulatedInitType", "Emulator", "EmulatorConfig", "InvocationListener",
    "InvocationLog", "InvocationStream", "InvokeResult", "ManagedInstancesConfig", "Report",
    "RuntimeApiServer", "RuntimeClientName",
    "SnapshotTemplate",
]
