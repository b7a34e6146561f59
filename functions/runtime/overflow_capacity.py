"""Handler-side reader of the overflow endpoint's capacity the warmer publishes to SSM.

The warmer (``warmers.runner.apply_endpoints``) plans the GPU endpoint's capacity and writes
what serves now to ``WARMSTART_OVERFLOW_CAPACITY_PARAMETER`` as JSON
``{"capacity": n, "state": "in_service"|"provisioning"|"zero"|"unknown", "at": epoch_s}``.
Admission may overflow only while the state is ``in_service`` with at least one instance; at
zero capacity, while it is provisioning (minutes), when the warmer could not set or read it
(``unknown``), when the environment's reads failed and when the parameter holds something
else, the endpoint counts as unavailable and admission degrades instead of overflowing
(``OverflowClient.state().healthy`` is False). The read is the degradation level's: a TTL cache
refreshed on a daemon thread, never on a request's path
(`functions.runtime.degradation_level.CachedParameter`).

One exception, for the request overflow exists for: a new execution environment makes its
first read on the preload thread (it needs boto3, hundreds of ms), and its first request (the
cold start's) often arrives before that read is done. Until it is, the capacity is not known
either way, and overflow is *tried*: an endpoint without capacity refuses at once (SageMaker's
``ValidationError``: "Inference Component has no capacity to process this request"), and the
request falls back to the degraded answer within its SLA (`functions.runtime.admission.flow`).
Degrading instead would fail every cold start's first request whenever the endpoint does have
capacity. Standard library at import time.

Example
-------
>>> OverflowCapacity.parse('{"capacity": 2, "state": "in_service", "at": 0}').available
True
>>> OverflowCapacityReader(None).available()
False
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from functions.runtime.degradation_level import CachedParameter

#: what the warmer publishes (``warmers.actuators.EndpointCapacity``)
STATES = ("in_service", "provisioning", "zero", "unknown")


@dataclass(frozen=True)
class OverflowCapacity:
    """The endpoint's capacity as published.

    Attributes
    ----------
    capacity : int
        Instances (or inference-component copies) serving, >= 0.
    state : str
        One of :data:`STATES`.
    at_s : float or None
        Epoch seconds since the state holds (None: not said).
    """

    capacity: int
    state: str
    at_s: float | None = None

    @property
    def available(self) -> bool:
        """Overflow may be tried: ``in_service`` with capacity >= 1."""
        return self.state == "in_service" and self.capacity >= 1

    @classmethod
    def parse(cls, raw: str) -> OverflowCapacity:
        """Parse the parameter's JSON.

        Raises
        ------
        ValueError
            When it is not a JSON object with an integer ``capacity`` >= 0 and a known
            ``state`` (and a finite number or null ``at``).
        """
        try:
            doc: Any = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")  # noqa: TRY004 - the reader keeps the last value on ValueError
        capacity, state, at = doc.get("capacity"), doc.get("state"), doc.get("at")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an integer >= 0, got {capacity!r}")
        if state not in STATES:
            raise ValueError(f"state must be one of {STATES}, got {state!r}")
        if at is not None and (isinstance(at, bool) or not isinstance(at, int | float)
                               or not math.isfinite(at)):
            raise ValueError(f"at must be epoch seconds or null, got {at!r}")
        return cls(capacity, state, None if at is None else float(at))


#: without a parameter, and after a first read that failed: unknown, so overflow is not
#: tried (while the first read runs, `OverflowCapacityReader.available` tries it)
UNKNOWN = OverflowCapacity(0, "unknown")


class OverflowCapacityReader(CachedParameter[OverflowCapacity]):
    """The published capacity with a TTL cache (:class:`CachedParameter`).

    Parameters
    ----------
    parameter_name : str or None
        ``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``; None: always :data:`UNKNOWN`.
    ttl_s, client, client_factory, clock
        As :class:`CachedParameter`. On a failed read the last capacity stays in force; a
        parameter holding something unusable is logged ``bad_request`` and the last one kept.
    """

    what = "overflow capacity"

    def __init__(self, parameter_name: str | None, **kwargs: Any) -> None:
        super().__init__(parameter_name, default=UNKNOWN, **kwargs)

    def _parse(self, raw: str) -> OverflowCapacity:
        return OverflowCapacity.parse(raw)

    def available(self) -> bool:
        """Whether admission may overflow now: the published capacity, or True until this
        environment's first read is done (module docstring): a reader that never read starts
        that read on a daemon thread. Never blocks."""
        if self.parameter_name is not None and not self.read_once:
            if not self.first_read_pending:
                self.refresh_soon()
            return True
        return self.value().available
