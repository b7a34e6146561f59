"""Measured init, restore and inference times of the reference agent (``warmstart calibrate``).

The simulator charges every cold start the calibrated init time (SnapStart: the restore time)
and gives the admission code the measured p95 values as its estimates.

File format (JSON)::

    {"init_ms": {"p50": 1234.5, "p95": 1400.0},
     "restore_ms": {"p50": 40.0, "p95": 60.0},
     "infer_ms": {"p50": 3.0, "p95": 5.0},
     "toolkit_init_ms": {"p50": 20.0, "p95": 30.0},     # optional
     "overflow_ms": {"p50": 10.0, "p95": 20.0},         # optional
     "degraded_ms": {"p50": 0.1, "p95": 0.2},           # optional
     "method": "...", "machine": "...", "measured_at": "...", "samples": 10}
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from warmers.strategy import lognormal_sigma

#: The calibration shipped with the project (measured on the development machine; see
#: its ``method`` field).
DEFAULT_CALIBRATION_PATH = Path(__file__).with_name("calibration.json")

_REQUIRED = ("init_ms", "restore_ms", "infer_ms")
_OPTIONAL = ("toolkit_init_ms", "overflow_ms", "degraded_ms")


class SimulatorCalibrationError(ValueError):
    """The simulator's calibration file is missing a field or holds an impossible value.

    Not the runtime's ``functions.runtime.contract.calibration_document.CalibrationError``
    (the admission calibration a deployed environment starts from): this one is the measured
    init, restore and inference times the simulator charges.
    """


@dataclass(frozen=True)
class Timing:
    """A measured time, in ms, at the median and the 95th percentile."""

    p50: float
    p95: float

    def __post_init__(self) -> None:
        for name in ("p50", "p95"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SimulatorCalibrationError(f"{name} must be a finite number of ms >= 0, got {v!r}")
        if self.p95 < self.p50:
            raise SimulatorCalibrationError(f"p95 ({self.p95}) must be >= p50 ({self.p50})")

    @property
    def log_sigma(self) -> float:
        """Shape of the lognormal through p50 and p95: ``ln(p95 / p50) / z_0.95``
        (``z_0.95`` = 1.6449); 0 when they are equal or p50 is 0."""
        return lognormal_sigma(self.p50, self.p95)


@dataclass(frozen=True)
class Calibration:
    """Times the simulator charges, in ms.

    Attributes
    ----------
    init_ms : Timing
        Full on-demand init of the reference agent until it can answer (imports + model load).
    restore_ms : Timing
        SnapStart-style restore until the restored environment answers.
    infer_ms : Timing
        One warm inference of the reference agent.
    toolkit_init_ms : Timing
        Init until the toolkit can decide (admission) without the model. Defaults to
        ``Timing(0, 0)`` when not measured.
    overflow_ms : Timing
        Extra latency of the overflow path over local execution (client + endpoint round
        trip). Defaults to ``infer_ms`` when not measured.
    degraded_ms : Timing
        Latency of the degraded (lexical) answer. Defaults to ``Timing(0, 0)``.
    endpoint_concurrency : int or None
        Requests one GPU endpoint instance answers at once (``warmstart calibrate``: the most
        concurrent requests whose p95 stays within twice the single request's); None: not
        measured (the simulator's endpoint then uses its configured value).
    method, machine, measured_at : str
        How, where and when the numbers were measured.
    samples : int
        Number of measurements behind each percentile.
    """

    init_ms: Timing
    restore_ms: Timing
    infer_ms: Timing
    toolkit_init_ms: Timing = field(default_factory=lambda: Timing(0.0, 0.0))
    overflow_ms: Timing | None = None
    degraded_ms: Timing = field(default_factory=lambda: Timing(0.0, 0.0))
    endpoint_concurrency: int | None = None
    method: str = ""
    machine: str = ""
    measured_at: str = ""
    samples: int = 0

    @property
    def overflow(self) -> Timing:
        return self.overflow_ms if self.overflow_ms is not None else self.infer_ms

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        for key in ("overflow_ms", "endpoint_concurrency"):
            if data[key] is None:
                data.pop(key)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "calibration") -> Calibration:
        """Build from parsed JSON.

        Raises
        ------
        SimulatorCalibrationError
            A required field is missing or a value is not a valid time.
        """
        if not isinstance(data, dict):
            raise SimulatorCalibrationError(f"{source}: expected a JSON object")
        timings: dict[str, Timing] = {}
        for key in _REQUIRED + _OPTIONAL:
            if key not in data:
                if key in _REQUIRED:
                    raise SimulatorCalibrationError(
                        f"{source}: missing {key!r} (run `warmstart calibrate` to measure it)"
                    )
                continue
            value = data[key]
            if not isinstance(value, dict) or "p50" not in value or "p95" not in value:
                raise SimulatorCalibrationError(f"{source}: {key} must be {{'p50': ms, 'p95': ms}}")
            try:
                timings[key] = Timing(value["p50"], value["p95"])
            except SimulatorCalibrationError as exc:
                raise SimulatorCalibrationError(f"{source}: {key}: {exc}") from None
        samples = data.get("samples", 0)
        if not isinstance(samples, int) or samples < 0:
            raise SimulatorCalibrationError(f"{source}: samples must be an integer >= 0")
        concurrency = data.get("endpoint_concurrency")
        if concurrency is not None and (isinstance(concurrency, bool)
                                        or not isinstance(concurrency, int) or concurrency < 1):
            raise SimulatorCalibrationError(f"{source}: endpoint_concurrency must be an integer >= 1 "
                                   f"or absent, got {concurrency!r}")
        return cls(
            init_ms=timings["init_ms"],
            restore_ms=timings["restore_ms"],
            infer_ms=timings["infer_ms"],
            toolkit_init_ms=timings.get("toolkit_init_ms", Timing(0.0, 0.0)),
            overflow_ms=timings.get("overflow_ms"),
            degraded_ms=timings.get("degraded_ms", Timing(0.0, 0.0)),
            endpoint_concurrency=concurrency,
            method=str(data.get("method", "")),
            machine=str(data.get("machine", "")),
            measured_at=str(data.get("measured_at", "")),
            samples=samples,
        )


def load_calibration(path: Path | None = None) -> Calibration:
    """Read a calibration JSON file (default: the shipped one).

    Raises
    ------
    FileNotFoundError
        No such file.
    SimulatorCalibrationError
        Not JSON, or a field is missing or invalid.
    """
    p = path or DEFAULT_CALIBRATION_PATH
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SimulatorCalibrationError(f"{p}: not valid JSON ({exc})") from exc
    return Calibration.from_mapping(data, source=str(p))


def percentile_timing(samples_ms: list[float]) -> Timing:
    """p50 and p95 (linear interpolation) of measured times.

    Raises
    ------
    SimulatorCalibrationError
        No samples.
    """
    if not samples_ms:
        raise SimulatorCalibrationError("no measurements to summarise")
    xs = sorted(float(x) for x in samples_ms)

    def pct(q: float) -> float:
        pos = q * (len(xs) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return Timing(round(pct(0.50), 3), round(pct(0.95), 3))
