"""The state every part of the emulator shares: per-function pools, locks, threads, the clock.

:class:`EmulatorCore` holds it; the layers above it add one seam each (see the package
docstring): processes and template/restore (:mod:`.environment`), the environment pool
(:mod:`.pool`), the concurrency and provisioned-concurrency API (:mod:`.concurrency`) and the
invocation itself (:mod:`.service`).
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from infra.local.clock import Clock, SystemClock
from infra.local.emulator.config import EmulatorConfig
from infra.local.emulator.records import InvocationListener
from infra.local.errors import ResourceNotFoundException
from infra.local.metrics import MetricsSink, NullMetrics
from infra.local.spec import FunctionSpec

if TYPE_CHECKING:
    from infra.local.emulator.environment import EmulatedEnvironment, SnapshotTemplate
    from infra.local.emulator.lmi_state import CapacityProviderState, LmiFunction

_LOG = logging.getLogger("warmstart.local.emulator")


@dataclass
class ProvisionedConfig:
    """One alias's provisioned-concurrency config, as ``GetProvisionedConcurrencyConfig`` shows it."""

    requested: int
    allocated: int = 0
    status: str = "IN_PROGRESS"
    status_reason: str | None = None
    last_modified: str = ""
    generation: int = 0


class FunctionPool:
    """One function's execution environments, in-flight counts, limits, aliases and templates.

    ``lock`` (a Condition) guards every field; environments change state only under it.
    """

    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        self.lock = threading.Condition()
        self.envs: list[EmulatedEnvironment] = []
        self.in_flight = 0
        self.in_flight_by_resource: dict[str, int] = {}
        self.reserved: int | None = spec.reserved_concurrency
        self.aliases: dict[str, str] = {a.name: a.version for a in spec.aliases}
        self.pc: dict[str, ProvisionedConfig] = {}
        self.templates: dict[str, SnapshotTemplate] = {}
        #: its Lambda Managed Instances state (:mod:`.lmi`), None for an ordinary function
        self.lmi: LmiFunction | None = None


class EmulatorCore:
    """Shared state and helpers of the local Lambda service (see :class:`~infra.local.emulator.Emulator`)."""

    def __init__(self, config: EmulatorConfig | None = None, *, clock: Clock | None = None,
                 metrics: MetricsSink | None = None, log_stream: IO[str] | None = None) -> None:
        self.config = config or EmulatorConfig()
        _check_runtime_client(self.config)
        self.clock: Clock = clock or SystemClock()
        self.metrics: MetricsSink = metrics or NullMetrics()
        self._log_stream = log_stream
        #: variables added to every new environment (the stack adds local endpoints here)
        self.extra_env: dict[str, str] = dict(self.config.extra_env)
        self._functions: dict[str, FunctionPool] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listeners: tuple[InvocationListener, ...] = ()
        #: Lambda Managed Instances: capacity providers by ARN, and whether the scaler runs
        self._providers: dict[str, CapacityProviderState] = {}
        self._lmi_scaler_started = False

    def functions(self) -> list[FunctionSpec]:
        with self._lock:
            return [fs.spec for fs in self._functions.values()]

    def _pools(self) -> list[FunctionPool]:
        with self._lock:
            return list(self._functions.values())

    def arn(self, function_name: str, qualifier: str | None = None) -> str:
        base = f"arn:aws:lambda:{self.config.region}:{self.config.account_id}:function:{function_name}"
        return f"{base}:{qualifier}" if qualifier else base

    def _state(self, function_name: str) -> FunctionPool:
        name = function_name
        if name.startswith("arn:"):
            parts = name.split(":")
            name = parts[6] if len(parts) >= 7 else name
        elif ":" in name:
            name = name.split(":", 1)[0]
        with self._lock:
            fs = self._functions.get(name)
        if fs is None:
            raise ResourceNotFoundException(f"Function not found: {self.arn(name)}")
        return fs

    def _track(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _log(self, text: str) -> None:
        stream = self._log_stream or sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            pass


def _check_runtime_client(config: EmulatorConfig) -> None:
    """Raise ValueError when ``config.python`` cannot import awslambdaric but is to run it."""
    if config.runtime_client != "awslambdaric":
        return
    if config.python == sys.executable:
        found = importlib.util.find_spec("awslambdaric") is not None
    else:
        try:
            found = subprocess.run([config.python, "-c", "import awslambdaric"], check=False, capture_output=True,
                                   timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            found = False
    if not found:
        raise ValueError(
            f"runtime_client 'awslambdaric': {config.python} cannot import awslambdaric; "
            "install it there (pip install awslambdaric) or use runtime_client='bootstrap'")
