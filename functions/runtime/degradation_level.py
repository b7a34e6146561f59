"""Handler-side reader of the degradation level the warmer publishes to SSM.

A short TTL cache keeps the SSM call off most invocations; on any SSM failure the last known level
(or the static ``WARMSTART_DEGRADATION_LEVEL``) stays in force and the failure is logged once per
streak with the tag ``tool_unavailable``. Standard library at import time; boto3 only when the
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
import time
from collections.abc import Callable
from typing import Any

from functions.runtime.degradation import Level, parse_level

logger = logging.getLogger("warmstart.runtime")

#: Default cache lifetime: the warmer publishes at most once a minute; 5 s bounds staleness
#: while keeping SSM GetParameter well under its standard throughput
#: (https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-throughput.html).
DEFAULT_TTL_S = 5.0


def _default_client_factory() -> Any:
    import boto3  # lazily: only environments that read a parameter pay for it

    return boto3.client("ssm")


class DegradationLevelReader:
    """Current degradation level with a TTL cache.

    Parameters
    ----------
    parameter_name : str or None
        SSM parameter (``WARMSTART_DEGRADATION_PARAMETER``); None: always ``default_level``.
    default_level : str
        Level used before the first successful read and without a parameter (L0..L3).
    ttl_s : float
        Seconds a read value is reused.
    client : boto3 SSM client, optional
        Injected client; otherwise ``client_factory()`` makes one on first use.
    clock : callable
        Monotonic seconds (injected in tests).

    Raises
    ------
    ValueError
        For an invalid ``default_level`` or a negative ``ttl_s``.
    """

    def __init__(self, parameter_name: str | None, *, default_level: str = "L0",
                 ttl_s: float = DEFAULT_TTL_S, client: Any = None,
                 client_factory: Callable[[], Any] = _default_client_factory,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s < 0:
            raise ValueError(f"ttl_s must be >= 0, got {ttl_s}")
        self._name = parameter_name
        self._level = parse_level(default_level)
        self._ttl_s = ttl_s
        self._client = client
        self._factory = client_factory
        self._clock = clock
        self._read_at: float | None = None
        self._failing = False
        self.reads = 0

    def level(self) -> Level:
        """The level, from cache when fresh, else from SSM (never raises)."""
        if self._name is None:
            return self._level
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self._ttl_s:
            return self._level
        self._read_at = now
        try:
            if self._client is None:
                self._client = self._factory()
            self.reads += 1
            raw = self._client.get_parameter(Name=self._name)["Parameter"]["Value"]
            level = parse_level(raw)
        except ValueError as exc:
            self._log("bad_request", f"parameter {self._name} holds an invalid level: {exc}")
            return self._level
        except Exception as exc:  # noqa: BLE001 - any SSM/network failure keeps the last level
            self._log("tool_unavailable",
                      f"cannot read {self._name} ({type(exc).__name__}: {exc}); "
                      f"keeping {self._level}")
            return self._level
        self._failing = False
        self._level = level
        return level

    __call__ = level

    def _log(self, tag: str, message: str) -> None:
        if not self._failing:
            logger.warning(json.dumps({"tag": tag, "message": message}))
        self._failing = True
