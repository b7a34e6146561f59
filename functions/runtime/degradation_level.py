"""Handler-side reader of the degradation level the warmer publishes to SSM.

A short TTL cache keeps the SSM call off most invocations, and the call itself is never on a
request's path: `DegradationLevelReader.level` returns the cached level at once and, when the
cache has expired, starts a refresh on a daemon thread (refresh-ahead, served stale meanwhile).
Lambda freezes the execution environment between invocations, so the thread runs during the
invocation that started it (and the next ones if it is still going); nobody joins it. The first
read is synchronous (`DegradationLevelReader.refresh`, made by the handler's ``level`` preload
stage before any request consults the reader). On any SSM failure the last known level (or the static
``WARMSTART_DEGRADATION_LEVEL``) stays in force and the failure is logged once per streak with
the tag ``tool_unavailable``. Standard library at import time; boto3 only when the
first read happens (cold-start budget), and the SSM client is cached per execution environment.

Example
-------
>>> reader = DegradationLevelReader(None, default_level="L1")
>>> str(reader.level())
'L1'
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from functions.runtime.contract.levels import Level, parse_level

T = TypeVar("T")

logger = logging.getLogger("warmstart.runtime")

#: Default cache lifetime: the warmer publishes at most once a minute; 5 s bounds staleness
#: while keeping SSM GetParameter well under its standard throughput
#: (https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-throughput.html).
DEFAULT_TTL_S = 5.0


def _default_client_factory() -> Any:
    import boto3  # lazily: only environments that read a parameter pay for it

    return boto3.client("ssm")


class CachedParameter(Generic[T]):
    """An SSM parameter's parsed value with a TTL cache, refreshed off the request path.

    Subclasses give ``_parse`` (raw string -> value, ``ValueError`` when unusable) and
    ``what`` (the value's name in logs). The mechanics are the module docstring's.

    Parameters
    ----------
    parameter_name : str or None
        SSM parameter; None: always ``default``.
    default : T
        Value before the first successful read and without a parameter.
    ttl_s : float
        Seconds a read value is reused before `level` starts a background refresh.
    client : boto3 SSM client, optional
        Injected client; otherwise ``client_factory()`` makes one on first use.
    clock : callable
        Monotonic seconds (injected in tests).

    Raises
    ------
    ValueError
        For a negative ``ttl_s``.
    """

    what = "value"

    def __init__(self, parameter_name: str | None, *, default: T,
                 ttl_s: float = DEFAULT_TTL_S, client: Any = None,
                 client_factory: Callable[[], Any] = _default_client_factory,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s < 0:
            raise ValueError(f"ttl_s must be >= 0, got {ttl_s}")
        self._name = parameter_name
        self._level = default
        self._ttl_s = ttl_s
        self._client = client
        self._factory = client_factory
        self._clock = clock
        self._read_at: float | None = None
        self._completed = False
        self._failing = False
        self._lock = threading.Lock()
        self._refreshing = False
        self._thread: threading.Thread | None = None
        self.reads = 0

    def _parse(self, raw: str) -> T:
        raise NotImplementedError

    def value(self) -> T:
        """The current value; never raises, and never blocks once a first read was made.

        Returns the cached value. When it is older than ``ttl_s`` and no refresh is running,
        starts `refresh` on a daemon thread; this call still returns the last value (stale by
        at most one refresh). Only a reader that never read makes its first read here,
        synchronously (a one-off probe); the handler makes that read with `refresh` on its
        preload thread and consults the reader only after it, so no request waits for SSM.
        """
        if self._name is None:
            return self._level
        current = self._level
        read_at = self._read_at
        if read_at is None:
            return self.refresh()
        if self._clock() - read_at < self._ttl_s:
            return current
        self.refresh_soon()
        return current  # this request does not wait for the read

    def refresh_soon(self) -> None:
        """Start `refresh` on a daemon thread unless one is running; never blocks."""
        if self._name is None:
            return
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True
        thread = threading.Thread(target=self._refresh_in_background, daemon=True,
                                  name="warmstart-level-refresh")
        self._thread = thread
        thread.start()

    @property
    def parameter_name(self) -> str | None:
        """The SSM parameter read (None: none, the default always)."""
        return self._name

    @property
    def read_once(self) -> bool:
        """A read has finished (successfully or not)."""
        return self._completed

    @property
    def first_read_pending(self) -> bool:
        """A first read has started (the preload's) and not finished, successfully or not:
        until it does, `value` returns the default without waiting."""
        return self._read_at is not None and not self._completed

    @property
    def refreshing(self) -> bool:
        """A background refresh is running."""
        return self._refreshing

    def wait_refresh(self, timeout_s: float | None = None) -> bool:
        """Join the running background refresh (tests, shutdown); True when none is left."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        return not self._refreshing

    def close(self) -> None:
        """Drop the SSM client (closing its connections): the SnapStart before-snapshot hook.

        No connection may survive a snapshot: a restored environment would share, or find dead,
        a socket opened before the snapshot. The next read creates a new client.

        References
        ----------
        https://docs.aws.amazon.com/lambda/latest/dg/snapstart-best-practices.html
        """
        client, self._client = self._client, None
        close = getattr(client, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - a client that cannot close is dropped anyway
                logger.debug("closing the SSM client failed: %s", exc)

    def expire(self) -> None:
        """Mark the cached level stale without blocking: the SnapStart after-restore hook.

        A restored environment may resume hours after its snapshot, so the level cached at
        snapshot time must be re-read; the next `level` call starts a background refresh and
        serves the cached level meanwhile (only a reader that never read blocks).
        """
        if self._read_at is not None:
            self._read_at = float("-inf")

    def _refresh_in_background(self) -> None:
        try:
            self.refresh()
        finally:
            self._refreshing = False

    def refresh(self) -> T:
        """Read the parameter now (synchronous; blocks up to the client's timeouts).

        Used for the first read off the request path (the ``level`` preload stage) and by the
        background refresh. Never raises: on failure the last level stays in force.

        Returns
        -------
        T
            The value in force after the read.
        """
        if self._name is None:
            return self._level
        self._read_at = self._clock()
        try:
            if self._client is None:
                self._client = self._factory()
            self.reads += 1
            raw = self._client.get_parameter(Name=self._name)["Parameter"]["Value"]
            level = self._parse(raw)
        except ValueError as exc:
            self._log("bad_request", f"parameter {self._name} holds an invalid {self.what}: {exc}")
            return self._level
        except Exception as exc:  # noqa: BLE001 - any SSM/network failure keeps the last level
            self._log("tool_unavailable",
                      f"cannot read {self._name} ({type(exc).__name__}: {exc}); "
                      f"keeping {self._level}")
            return self._level
        else:
            self._failing = False
            self._level = level
            return level
        finally:
            self._completed = True

    def _log(self, tag: str, message: str) -> None:
        if not self._failing:
            logger.warning(json.dumps({"tag": tag, "message": message}))
        self._failing = True


def parse_published(raw: str) -> tuple[Level, str | None]:
    """The level and the fleet calibration of the parameter's value, in either form.

    The warmer writes the plain level (``"L1"``: the local stack, the replay, tests and a warmer
    without fleet numbers) or a JSON document ``{"level": "L0", "calibration": {...}}`` whose
    ``calibration`` is a version-1 admission calibration with ``"source": "fleet"``
    (`functions.runtime.calibration`, `warmers.degradation.SsmLevelPublisher`).

    Parameters
    ----------
    raw : str
        The parameter's value.

    Returns
    -------
    tuple[Level, str | None]
        The level, and the calibration as JSON text for `functions.runtime.calibration.load_fleet`
        (None: none published; it is validated there, so a bad one never costs the level).

    Raises
    ------
    ValueError
        Neither a level nor a JSON object with a valid ``level``.
    """
    text = raw.strip()
    if not text.startswith("{"):
        return parse_level(text), None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not a level and not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("level"), str):
        raise ValueError("a JSON value must be an object with a string 'level'")  # noqa: TRY004 (a malformed document, not a caller's type error)
    level = parse_level(doc["level"])
    cal = doc.get("calibration")
    if cal is None:
        return level, None
    return level, json.dumps(cal) if not isinstance(cal, str) else cal


class DegradationLevelReader(CachedParameter[Level]):
    """Current degradation level with a TTL cache (:class:`CachedParameter`), and the fleet
    calibration published with it (`calibration`, the last read's; see `parse_published`).

    Parameters
    ----------
    parameter_name : str or None
        SSM parameter (``WARMSTART_DEGRADATION_PARAMETER``); None: always ``default_level``.
    default_level : str
        Level used before the first successful read and without a parameter (L0..L3).
    ttl_s, client, client_factory, clock
        As :class:`CachedParameter`.

    Raises
    ------
    ValueError
        For an invalid ``default_level`` or a negative ``ttl_s``.
    """

    what = "level"

    def __init__(self, parameter_name: str | None, *, default_level: str = "L0",
                 ttl_s: float = DEFAULT_TTL_S, client: Any = None,
                 client_factory: Callable[[], Any] = _default_client_factory,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(parameter_name, default=parse_level(default_level), ttl_s=ttl_s,
                         client=client, client_factory=client_factory, clock=clock)
        #: the fleet calibration of the last good read, as JSON text (None: none published)
        self.calibration: str | None = None

    def _parse(self, raw: str) -> Level:
        level, self.calibration = parse_published(raw)
        return level

    def level(self) -> Level:
        """The current level (:meth:`CachedParameter.value`)."""
        return self.value()

    __call__ = level
