"""Execution-environment lifecycle: init type, cold start, init duration, environment id.

One :class:`ExecutionEnvironment` object holds all per-environment state (there are no
module-level flags scattered across modules). The handler creates it once in the init phase
with :func:`start_environment`; other code reaches it through :func:`current_environment`.
Tests reset it with :func:`reset_environment`.

Times are passed in (milliseconds from a monotonic clock, e.g. ``time.perf_counter() * 1000``);
this module never reads the clock.

Imports only the standard library.
"""

from __future__ import annotations

import collections
import enum
import os
import threading
from collections.abc import Iterable

TYPE_CHECKING = False
if TYPE_CHECKING:
    import random

from functions.runtime.config import InitType
from functions.runtime.lazy import ClientCache

__all__ = [
    "ExecutionEnvironment",
    "InitType",
    "ResourceState",
    "current_environment",
    "reset_environment",
    "start_environment",
]

#: How many recent invocation latencies an environment keeps for ``/debug/resource``.
RECENT_LATENCIES = 50


def random_uuid4() -> str:
    """A random (version 4) UUID string from ``os.urandom``, as ``str(uuid.uuid4())`` gives:
    the standard library's ``uuid`` module imports ``platform`` and calls ``uname`` at import
    (RFC 9562 section 5.4: version bits 0100, variant bits 10)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class ResourceState(enum.StrEnum):
    """State of a resource loaded in the init phase (web stack, model)."""

    NOT_STARTED = "not_started"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class ExecutionEnvironment:
    """Mutable state of one execution environment.

    Parameters
    ----------
    init_type : InitType
        From ``AWS_LAMBDA_INITIALIZATION_TYPE``.
    init_started_ms : float
        Monotonic time the init phase started (handler module import), milliseconds.
    clients : ClientCache | None
        SDK client cache of this environment (a new one when None).

    Notes
    -----
    ``cold_start`` is true only for the first invocation of an on-demand environment. Under
    provisioned concurrency the init was paid before any request; after a SnapStart restore the
    init ran at snapshot time (the restore is reported separately, see :meth:`restored`). On
    Lambda Managed Instances (``lambda-managed-instances``) there is no per-request cold start:
    the environment is initialised before it gets traffic.

    One object per runtime process. On Lambda Managed Instances the Python runtime runs
    ``AWS_LAMBDA_MAX_CONCURRENCY`` processes in one execution environment, each with its own
    init and one request at a time (they share ``/tmp``, nothing in memory): each process has
    its own object, counters and ``environment_id`` (so the id names the runtime process
    there, not the LMI execution environment). Nothing here is shared between processes and
    the toolkit writes no file, so they cannot disturb one another. References:
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-python-runtime.html
    """

    def __init__(
        self,
        init_type: InitType,
        init_started_ms: float,
        *,
        clients: ClientCache | None = None,
    ) -> None:
        self.init_type = init_type
        self.init_started_ms = init_started_ms
        self.init_finished_ms: float | None = None
        self._environment_id: str | None = None
        self.clients = clients if clients is not None else ClientCache()
        self.invocations = 0
        self.requests = 0
        self.restores = 0
        self.restored_at_ms: float | None = None
        self.resources: dict[str, ResourceState] = {}
        self.resource_load_ms: dict[str, float] = {}
        #: (route, path, status, duration_ms) of recent requests (tuples: cheap on the hot path)
        self.recent: collections.deque[tuple[str, str, int, float]] = collections.deque(
            maxlen=RECENT_LATENCIES
        )
        self._cold_start_pending = init_type is InitType.ON_DEMAND
        self._lock = threading.Lock()

    @property
    def environment_id(self) -> str:
        """This environment's id: a uuid4, drawn on first use and again after a restore.

        Drawn on first use (`random_uuid4`: no ``uuid`` import, which pulls in ``platform``
        and cost a cold request 4-14 ms in bench answer_first's handler profile).
        """
        environment_id = self._environment_id
        if environment_id is None:
            with self._lock:
                if self._environment_id is None:
                    self._environment_id = random_uuid4()
                environment_id = self._environment_id
        return environment_id

    # -- init phase ---------------------------------------------------------------------
    def finish_init(self, now_ms: float) -> float:
        """Mark the end of the init phase.

        Parameters
        ----------
        now_ms : float
            Monotonic time, milliseconds.

        Returns
        -------
        float
            Init duration in milliseconds.
        """
        self.init_finished_ms = now_ms
        return now_ms - self.init_started_ms

    @property
    def init_duration_ms(self) -> float | None:
        """Init phase duration in milliseconds (None until :meth:`finish_init`)."""
        if self.init_finished_ms is None:
            return None
        return self.init_finished_ms - self.init_started_ms

    # -- invocations --------------------------------------------------------------------
    def begin_invocation(self, *, counted: bool = True) -> bool:
        """Register an invocation and say whether it is this environment's cold start.

        Parameters
        ----------
        counted : bool
            False for warm pings: they use up the cold start (the ping is what paid the init)
            but are not traffic, so ``requests`` is not incremented.

        Returns
        -------
        bool
            True exactly once, on the first invocation of an on-demand environment.
        """
        if not self._cold_start_pending:  # the warm path: no flag to clear
            # one invocation at a time per execution environment (Lambda's concurrency model;
            # per runtime process on Managed Instances), so the counters need no lock; the lock guards the cold-start flag's one transition
            # (measured ~2 us in place on the warm path, bench/bench_warm_path.py)
            self.invocations += 1
            if counted:
                self.requests += 1
            return False
        with self._lock:
            self.invocations += 1
            if counted:
                self.requests += 1
            cold = self._cold_start_pending
            self._cold_start_pending = False
            return cold

    def record(self, route: str, path: str, status: int, duration_ms: float) -> None:
        """Keep a finished request for ``/debug/resource``.

        Parameters
        ----------
        route : str
            ``METHOD /path`` of the request.
        path : str
            Request path taken (``local``, ``overflow``, ``degraded``, ``shed``).
        status : int
            HTTP status returned.
        duration_ms : float
            Handler time from invocation start to response, milliseconds.
        """
        self.recent.append((route, path, status, duration_ms))

    def recent_latencies(self) -> list[dict[str, object]]:
        """Recent requests, oldest first: ``route``, ``path``, ``status``, ``duration_ms``."""
        return [
            {"route": r, "path": p, "status": st, "duration_ms": round(ms, 3)}
            for r, p, st, ms in list(self.recent)
        ]

    # -- resources ----------------------------------------------------------------------
    def set_resource(self, name: str, state: ResourceState, *, load_ms: float | None = None) -> None:
        """Record the state (and load time in ms) of a resource loaded in the init phase."""
        self.resources[name] = state
        if load_ms is not None:
            self.resource_load_ms[name] = load_ms

    def resource(self, name: str) -> ResourceState:
        """State of a resource (``not_started`` when never registered)."""
        return self.resources.get(name, ResourceState.NOT_STARTED)

    # -- SnapStart ----------------------------------------------------------------------
    def before_snapshot(self) -> None:
        """Close connections: SDK clients are closed and dropped before the snapshot."""
        self.clients.close_all()

    def after_restore(self, now_ms: float, *, reseed: Iterable[random.Random] = ()) -> None:
        """Make this restored copy unique.

        Reseeds the module-level ``random`` generator (and any extra generators given) from
        the OS entropy source, draws a new environment id, drops cached SDK clients (their
        connections and credentials belong to the snapshot) and clears the cold-start flag.

        Parameters
        ----------
        now_ms : float
            Monotonic time of the restore, milliseconds.
        reseed : Iterable[random.Random]
            Further generators to reseed.

        References
        ----------
        https://docs.aws.amazon.com/lambda/latest/dg/snapstart-uniqueness.html
        """
        import random

        random.seed()
        for generator in reseed:
            generator.seed()
        self.clients.close_all()
        with self._lock:
            self._environment_id = random_uuid4()
            self._cold_start_pending = False
            self.restores += 1
            self.restored_at_ms = now_ms

    @property
    def restored(self) -> bool:
        """True once this environment was restored from a SnapStart snapshot."""
        return self.restores > 0


class _Holder:
    """Holds the one environment of this process (attribute, not a ``global`` statement)."""

    environment: ExecutionEnvironment | None = None


def start_environment(
    init_type: InitType, init_started_ms: float, *, clients: ClientCache | None = None
) -> ExecutionEnvironment:
    """Create this process's execution environment (called once, in the init phase).

    Parameters
    ----------
    init_type : InitType
        From the run-time configuration.
    init_started_ms : float
        Monotonic time the init phase started, milliseconds.
    clients : ClientCache | None
        SDK client cache (a new one when None).

    Returns
    -------
    ExecutionEnvironment
    """
    _Holder.environment = ExecutionEnvironment(init_type, init_started_ms, clients=clients)
    return _Holder.environment


def current_environment() -> ExecutionEnvironment:
    """The environment created by :func:`start_environment`.

    Raises
    ------
    RuntimeError
        No environment was started in this process.
    """
    if _Holder.environment is None:
        raise RuntimeError(
            "no execution environment: call lifecycle.start_environment() in the init phase"
        )
    return _Holder.environment


def reset_environment() -> None:
    """Forget the environment (tests; a fresh process has none)."""
    _Holder.environment = None
