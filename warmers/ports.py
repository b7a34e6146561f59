"""Ports of the control plane (Protocols); adapters live in ``cloudwatch``, ``traces``,
``actuators``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from warmers.plan.endpoint import EndpointPolicy
from warmers.plan.policy import WarmPlan
from warmers.series import MetricSeries


class MetricsUnavailable(RuntimeError):
    """The metrics source could not answer (throttled, failed, or no usable data).

    The warmer keeps the last good plan and logs ``tool_unavailable``.
    """


class MetricsEmpty(MetricsUnavailable):
    """The source answered, but with no data point at all in the range.

    Raised only where absence cannot be read as zero traffic (e.g. CloudWatch with
    ``zero_fill_counts=False``); the CloudWatch source by default returns a zero-traffic series.
    """


class MetricsSource(Protocol):
    """Where per-minute history comes from (CloudWatch, a trace, the local emulator)."""

    def fetch(self, function_name: str, alias: str, *, start_s: float,
              end_s: float) -> MetricSeries:
        """1-minute series over ``[start_s, end_s)`` (epoch seconds); NaN for gaps.

        Raises
        ------
        MetricsUnavailable
            When the source cannot answer.
        """
        ...


class OverflowAnswersSource(Protocol):
    """Where the overflow answers of an endpoint's agents come from (their own EMF metrics)."""

    def answered(self, policy: EndpointPolicy, *, start_s: float, end_s: float) -> int:
        """Overflow requests the agents of ``policy`` answered in ``[start_s, end_s)``.

        Raises
        ------
        MetricsUnavailable
            When the source cannot answer (the spend guard is then not applied).
        """
        ...


@dataclass(frozen=True)
class ActuationResult:
    """What an actuator did for one plan."""

    key: str
    applied: bool
    detail: str
    calls: int = 0


class ConcurrencyActuator(Protocol):
    """Makes a :class:`WarmPlan` true (provisioned concurrency or warm pings)."""

    def apply(self, plan: WarmPlan, *, now_s: float) -> ActuationResult:
        ...

    def current(self, function_name: str, alias: str) -> int:
        """Provisioned concurrency currently requested on the alias (0 if none)."""
        ...


class EpochClock(Protocol):
    """Port for the warmer's "now": a callable returning epoch seconds (``time.time``, or the
    local stack's scaled clock's ``time`` during replays). Not ``infra.local.clock.Clock``, the
    local stack's whole clock (time, monotonic, sleep, wait)."""

    def __call__(self) -> float:
        """Epoch seconds."""
        ...
