"""Publishing the degradation level (and an alias's fleet calibration) to SSM, where the
handlers read it (``functions.runtime.degradation_level``). The level itself is computed by the
pure :mod:`warmers.degradation`; this module does the I/O, with an injected SSM client.

References
----------
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from warmers.degradation import LEVELS, Level

logger = logging.getLogger("warmstart.warmer")

#: Rewrite an unchanged fleet calibration after this long, s, so its ``measured_at`` stays well
#: inside the handlers' staleness limit (``functions.runtime.calibration.FLEET_MAX_AGE_S``, 900 s)
#: without a PutParameter every minute.
FLEET_REFRESH_S = 300.0
#: Largest estimate a calibration may carry, ms (``functions.runtime.calibration.MAX_MS``).
_MAX_MS = 900_000.0


def fleet_calibration(key: str, memory_mb: int, stage_p95_ms: dict[str, float],
                      overflow_p95_ms: float | None, *, now_s: float,
                      window_min: int) -> dict[str, Any] | None:
    """The version-1 admission calibration document of an alias's fleet numbers.

    Parameters
    ----------
    key : str
        ``function:alias`` (the document's ``agent``: the handler does not compare it).
    memory_mb : int
        The alias's memory size (the handler refuses a document of another size).
    stage_p95_ms : dict[str, float]
        Measured stages only, ms; values that are not finite or out of range are left out.
    overflow_p95_ms : float | None
    now_s : float
        Epoch seconds of the run (``measured_at``).
    window_min : int
        Minutes the p95s cover (named in ``machine``).

    Returns
    -------
    dict | None
        The document (``"source": "fleet"``), or None when nothing was measured.
    """
    import datetime as dt

    def usable(v: float | None) -> bool:
        return v is not None and math.isfinite(v) and 0.0 <= v <= _MAX_MS

    stages = {k: round(float(v), 1) for k, v in sorted(stage_p95_ms.items()) if usable(v)}
    overflow = (round(float(overflow_p95_ms), 1)
                if overflow_p95_ms is not None and usable(overflow_p95_ms) else None)
    if not stages and overflow is None:
        return None
    return {"version": 1, "agent": key, "memory_mb": int(memory_mb),
            "machine": f"fleet of {key}, CloudWatch p95 over {window_min} min",
            "measured_at": dt.datetime.fromtimestamp(now_s, tz=dt.UTC).isoformat(),
            "stage_p95_ms": stages, "overflow_p95_ms": overflow, "source": "fleet"}


class SsmLevelPublisher:
    """Writes the level (and the fleet calibration) to an SSM String parameter when it changes.

    Without a calibration the value is the plain level (``"L1"``); with one it is the JSON
    document ``{"level": "L1", "calibration": {...}}`` (`fleet_calibration`), which the
    handlers' reader (``functions.runtime.degradation_level.parse_published``) reads in both
    forms.

    Parameters
    ----------
    client : boto3 SSM client (injected; ``endpoint_url``-able)
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._last: dict[str, str] = {}
        self._written_at: dict[str, float] = {}

    @staticmethod
    def _same(stored: str | None, value: str) -> bool:
        """``stored`` says what ``value`` says, ``measured_at`` aside."""
        if stored == value:
            return True
        if stored is None or not stored.startswith("{") or not value.startswith("{"):
            return False
        try:
            a, b = json.loads(stored), json.loads(value)
            a.get("calibration", {}).pop("measured_at", None)
            b.get("calibration", {}).pop("measured_at", None)
        except (ValueError, AttributeError):
            return False
        return bool(a == b)

    def publish(self, parameter_name: str, level: Level, *,
                calibration: dict[str, Any] | None = None, now_s: float | None = None) -> bool:
        """Put ``level`` if it differs from the stored value; returns True when written.

        With ``calibration`` the JSON form is written when the level or the numbers changed,
        or when the stored one is :data:`FLEET_REFRESH_S` old (by ``now_s``), so it never goes
        stale while the warmer runs.

        Raises
        ------
        ValueError
            For a value that is not a level.
        botocore.exceptions.ClientError
            When SSM refuses (the caller logs ``tool_unavailable``).
        """
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        value = level if calibration is None else json.dumps(
            {"level": level, "calibration": calibration}, separators=(",", ":"), sort_keys=True)
        written_at = self._written_at.get(parameter_name)
        fresh = calibration is None or now_s is None or (
            written_at is not None and now_s - written_at < FLEET_REFRESH_S)
        last = self._last.get(parameter_name)
        if last is not None and self._same(last, value) and fresh:
            return False
        current = None
        try:
            current = self._client.get_parameter(Name=parameter_name)["Parameter"]["Value"]
        except self._client.exceptions.ParameterNotFound:
            current = None
        write = not self._same(current, value) or not fresh
        if write:
            self._client.put_parameter(Name=parameter_name, Value=value, Type="String",
                                       Overwrite=True)
            if now_s is not None:
                self._written_at[parameter_name] = now_s
            logger.info(json.dumps({"event": "degradation_level", "parameter": parameter_name,
                                    "level": level, "was": current,
                                    "fleet_stages": None if calibration is None
                                    else sorted(calibration["stage_p95_ms"])}))
        self._last[parameter_name] = value
        return write
