"""What every part of the emulator shares: the deployed functions, the clock, threads, the log.

:class:`EmulatorContext` holds it; each part (:mod:`.processes`, :mod:`.pool`,
:mod:`.concurrency`, :mod:`.lmi`, :mod:`.records`) is given the context and nothing else of the
emulator, and :class:`~infra.local.emulator.Emulator` composes the parts. A part can be made
alone from a context (the part tests do so); nothing here imports a part.
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
from infra.local.errors import ResourceNotFoundException
from infra.local.metrics import MetricsSink, NullMetrics
from infra.local.spec import FunctionSpec

if TYPE_CHECKING:
    from infra.local.emulator.environment import EmulatedEnvironment, SnapshotTemplate
    from infra.local.emulator.lmi_state import LmiFunction

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


class EmulatorContext:
    """The shared state of one local Lambda service: settings, clock, metrics, log, functions.

    Parameters
    ----------
    config : EmulatorConfig, optional
        Settings (default: :class:`EmulatorConfig`'s).
    clock : Clock, optional
        Time source (default: the system clock).
    metrics : MetricsSink, optional
        Where AWS/Lambda metrics go (default: nowhere).
    log_stream : file, optional
        Where environments' output and the REPORT lines go (default: this stderr).

    Raises
    ------
    ValueError
        ``config.runtime_client`` is ``awslambdaric`` and ``config.python`` cannot import it.
    """

    def __init__(self, config: EmulatorConfig | None = None, *, clock: Clock | None = None,
                 metrics: MetricsSink | None = None, log_stream: IO[str] | None = None) -> None:
        self.config = config or EmulatorConfig()
        _check_runtime_client(self.config)
        self.clock: Clock = clock or SystemClock()
        self.metrics: MetricsSink = metrics or NullMetrics()
        self.log_stream = log_stream
        #: variables added to every new environment (the stack adds local endpoints here)
        self.extra_env: dict[str, str] = dict(self.config.extra_env)
        #: the deployed functions by name (guarded by :attr:`lock`)
        self.functions: dict[str, FunctionPool] = {}
        self.lock = threading.Lock()
        #: set when the service stops: every background thread ends
        self.stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    def specs(self) -> list[FunctionSpec]:
        """The deployed functions' specs."""
        with self.lock:
            return [fs.spec for fs in self.functions.values()]

    def pools(self) -> list[FunctionPool]:
        """Every deployed function's state."""
        with self.lock:
            return list(self.functions.values())

    def arn(self, function_name: str, qualifier: str | None = None) -> str:
        """The function's ARN (``...:function:NAME``, ``:QUALIFIER`` when given)."""
        base = f"arn:aws:lambda:{self.config.region}:{self.config.account_id}:function:{function_name}"
        return f"{base}:{qualifier}" if qualifier else base

    def state(self, function_name: str) -> FunctionPool:
        """The function's state by name, ``name:qualifier`` or ARN. Raises ResourceNotFoundException."""
        name = function_name
        if name.startswith("arn:"):
            parts = name.split(":")
            name = parts[6] if len(parts) >= 7 else name
        elif ":" in name:
            name = name.split(":", 1)[0]
        with self.lock:
            fs = self.functions.get(name)
        if fs is None:
            raise ResourceNotFoundException(f"Function not found: {self.arn(name)}")
        return fs

    def track(self, thread: threading.Thread) -> None:
        """Start ``thread`` and keep it, so that :meth:`join` waits for it."""
        with self.lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait for every tracked thread (real seconds each)."""
        with self.lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=timeout_s)

    def log(self, text: str) -> None:
        """Write ``text`` to the log stream (errors writing it are ignored)."""
        stream = self.log_stream or sys.stderr
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
