"""The admission calibration document (the JSON of ``WARMSTART_CALIBRATION``): written by
``warmstart calibrate``, checked at synth (``infra/constructs/agent_function.py``), read by the
toolkit's ``toolkit`` preload stage (`functions.runtime.calibration`, which says what the
document means and when a calibration is used).

Document (JSON object, version :data:`CALIBRATION_VERSION`)::

    {"version": 1, "agent": "intent", "memory_mb": 2048,
     "machine": "host x86_64 2 CPUs, Python 3.11.2", "measured_at": "2026-12-01T10:00:00+00:00",
     "stage_p95_ms": {"toolkit": 60.0, "overflow": 310.0, "web": 700.0, ...},
     "overflow_p95_ms": 58.0}

optional ``route_p95_ms`` and ``stream_overflow_p95_ms`` (``{route name: ms}``) and
``degrade_p95_ms``; ``overflow_p95_ms`` may be null. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from functions.runtime.contract import ContractError

#: Calibration document version the toolkit reads.
CALIBRATION_VERSION = 1
#: Stages a calibration may carry (the toolkit's preload stages).
CALIBRATION_STAGES = ("toolkit", "overflow", "web", "telemetry", "model", "level")
#: Largest accepted estimate, ms (Lambda's 15-minute function timeout).
CALIBRATION_MAX_MS = 900_000.0


class CalibrationError(ContractError):
    """The calibration document is malformed; the message names the field."""


class AdmissionCalibration(NamedTuple):
    """A parsed calibration (the document: `functions.runtime.calibration`).

    Attributes
    ----------
    agent : str
    memory_mb : int
    machine : str
        Where it was measured (host, CPUs, Python).
    measured_at : datetime.datetime
        When (timezone-aware, UTC).
    stage_p95_ms : Mapping[str, float]
        p95 duration per preload stage, ms.
    overflow_p95_ms : float | None
        p95 of a warm overflow call through the toolkit's client, ms.
    route_p95_ms : Mapping[str, float]
        Route name -> p95 of its local answer on a warm environment, ms: a buffered route's
        answer time, a streaming route's time from the app's start to its first chunk (an LLM
        agent's first token waits on the LLM). Empty when not measured: a new environment then
        seeds each route with `functions.runtime.admission.DEFAULT_INFER_P95_MS`.
    stream_overflow_p95_ms : Mapping[str, float]
        Route name -> p95 of a streaming route's overflow, from the call to the endpoint
        stream's first event, ms (`functions.runtime.overflow_stream.StreamOverflow`). Empty
        when not measured: the stream is seeded with ``overflow_p95_ms``.
    degrade_p95_ms : float | None
        p95 of the measured route's degraded answer (its ``degraded`` hook; a stream's
        ``degraded_event`` and the event's encoding), ms; None: not measured (the seed
        `functions.runtime.admission.state.DEFAULT_DEGRADE_P95_MS` stays).
    """

    agent: str
    memory_mb: int
    machine: str
    measured_at: dt.datetime
    stage_p95_ms: Mapping[str, float]
    overflow_p95_ms: float | None
    route_p95_ms: Mapping[str, float] = {}  # a NamedTuple default: shared, never mutated
    stream_overflow_p95_ms: Mapping[str, float] = {}
    degrade_p95_ms: float | None = None

    def describe(self) -> str:
        """One line for the log: where and when it was measured."""
        return (f"calibration of agent {self.agent!r} at {self.memory_mb} MB, measured "
                f"{self.measured_at.isoformat(timespec='seconds')} on {self.machine}")

    def cold_start_p95_ms(self) -> float | None:
        """The agent's cold start until it can answer, ms: the sum of the stage p95s
        (sequential stages of the preload); None without stages."""
        total = sum(self.stage_p95_ms.values())
        return total if total > 0 else None


def _ms(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or not 0 <= value <= CALIBRATION_MAX_MS:
        raise CalibrationError(f"{field} must be a number of ms from 0 to "
                               f"{CALIBRATION_MAX_MS:.0f}, got {value!r}")
    return float(value)


def parse_calibration(text: str) -> AdmissionCalibration:
    """Parse and validate a calibration document.

    Parameters
    ----------
    text : str
        The JSON document (:data:`ENV_CALIBRATION`).

    Returns
    -------
    AdmissionCalibration

    Raises
    ------
    CalibrationError
        Not JSON, not an object, another version, or a field of the wrong type or range
        (the message names it); unknown stage names are refused (a typo would silently keep
        a seed).
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CalibrationError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CalibrationError(f"must be a JSON object, got {type(doc).__name__}")
    if doc.get("version") != CALIBRATION_VERSION:
        raise CalibrationError(f"version must be {CALIBRATION_VERSION}, got "
                               f"{doc.get('version')!r}")
    agent, machine, memory = doc.get("agent"), doc.get("machine"), doc.get("memory_mb")
    if not isinstance(agent, str) or not agent:
        raise CalibrationError(f"agent must be a non-empty string, got {agent!r}")
    if not isinstance(machine, str):
        raise CalibrationError(f"machine must be a string, got {machine!r}")
    if isinstance(memory, bool) or not isinstance(memory, int) or not 128 <= memory <= 10240:
        raise CalibrationError(f"memory_mb must be an integer from 128 to 10240, got {memory!r}")
    try:
        measured = dt.datetime.fromisoformat(str(doc.get("measured_at")))
    except ValueError:
        raise CalibrationError("measured_at must be an ISO 8601 time, got "
                               f"{doc.get('measured_at')!r}") from None
    if measured.tzinfo is None:
        raise CalibrationError(f"measured_at must carry a time zone, got {doc['measured_at']!r}")
    stages = doc.get("stage_p95_ms")
    if not isinstance(stages, dict):
        raise CalibrationError(f"stage_p95_ms must be an object, got {stages!r}")
    unknown = sorted(set(stages) - set(CALIBRATION_STAGES))
    if unknown:
        raise CalibrationError(f"stage_p95_ms has unknown stages {unknown}; known: "
                               f"{', '.join(CALIBRATION_STAGES)}")
    stage_ms = {name: _ms(v, f"stage_p95_ms.{name}") for name, v in stages.items()}
    overflow = doc.get("overflow_p95_ms")
    return AdmissionCalibration(
        agent=agent, memory_mb=memory, machine=machine,
        measured_at=measured.astimezone(dt.UTC), stage_p95_ms=stage_ms,
        overflow_p95_ms=None if overflow is None else _ms(overflow, "overflow_p95_ms"),
        route_p95_ms=_per_route(doc, "route_p95_ms"),
        stream_overflow_p95_ms=_per_route(doc, "stream_overflow_p95_ms"),
        degrade_p95_ms=None if doc.get("degrade_p95_ms") is None
        else _ms(doc["degrade_p95_ms"], "degrade_p95_ms"))


def _per_route(doc: Mapping[str, Any], field: str) -> dict[str, float]:
    """An optional ``{route name: ms}`` object of the document (absent or null: empty)."""
    value = doc.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CalibrationError(f"{field} must be an object of route name -> ms, got {value!r}")
    out: dict[str, float] = {}
    for name, ms in value.items():
        if not isinstance(name, str) or not name:
            raise CalibrationError(f"{field} keys must be route names, got {name!r}")
        out[name] = _ms(ms, f"{field}.{name}")
    return out
