"""Admission calibration: the measured estimates a deployed execution environment starts with.

Admission decides a cold request's path from p95 estimates: how long each preload stage still
needs (``toolkit``, ``overflow`` = the awscrt client's import + creation, ``web``, ``telemetry``, ``model``,
``level``) and how long an overflow call takes. A fresh environment has measured nothing yet,
so without a calibration it starts from seeds (`functions.runtime.admission.state.
DEFAULT_STAGE_P95_MS`, `functions.runtime.admission.DEFAULT_OVERFLOW_P95_MS`): the measured
costs of the toolkit's own parts (its init, the awscrt overflow client, Powertools, the level
read) plus what the agent declares (``Agent(stage_p95_ms=...)``); a stage nobody measured or
declared (the agent's app, its model, the endpoint's call) is assumed to fit until measured,
so a cold request is not degraded at once for want of a number (issue 20 item 2); with the
overflow at hand it is not waited for either
(`functions.runtime.admission.state.UNKNOWN_STAGE_WAIT_MS`). ``warmstart calibrate --agent NAME`` measures the agent's own stages
and overflow calls and writes this document; ``cdk synth`` puts it into the function's
``WARMSTART_CALIBRATION`` variable; the ``toolkit`` preload stage reads it here. From then on
each environment learns online (`functions.runtime.admission.LatencyTracker` over its recent
overflow calls and local answers), starting from these values.

The document (version 1; its schema and reader,
:func:`~functions.runtime.contract.calibration_document.parse_calibration`, are the deploy-to-run
contract's, ``functions/runtime/contract/calibration_document.py``, so the synth checks it
without this module)::

    {"version": 1, "agent": "intent", "memory_mb": 2048,
     "machine": "host x86_64 2 CPUs, Python 3.11.2", "measured_at": "2026-12-01T10:00:00+00:00",
     "stage_p95_ms": {"toolkit": 60.0, "overflow": 310.0, "web": 700.0, ...},
     "overflow_p95_ms": 58.0}

Optional per route (the route's name, as ``Route(name=...)`` or its path gives it):
``"route_p95_ms": {"chat": 1010.0}`` (the local answer on a warm environment; a stream's first
chunk after the app's start) and ``"stream_overflow_p95_ms": {"chat": 170.0}`` (a streaming
overflow's first event); and ``"degrade_p95_ms": 0.4`` (that route's degraded answer: what
admission keeps in reserve behind a local wait or an overflow). A new environment has measured no route yet: without these it seeds
every route at 50 ms, and a cold streaming request whose first token waits on an LLM is then
sent to wait for a local path that cannot keep the first-token SLA (issue 24's cold bench).

``overflow_p95_ms`` may be null (no overflow measured). Once deployed, the warmer publishes
the same document measured on the fleet (CloudWatch p95 of every environment's EMF
``StageDuration`` and ``OverflowLatency`` over 60 minutes, ``"source": "fleet"``) inside the
degradation parameter (`functions.runtime.degradation_level.parse_published`); `load_fleet`
checks it with :data:`FLEET_MAX_AGE_S` and the memory size, and the handler applies it over
the deployed calibration (issue 20 item 3). A calibration is *used* only when it is
well-formed, for this agent, for this memory size (CPU share scales with memory: Lambda
allocates CPU in proportion to memory, https://docs.aws.amazon.com/lambda/latest/dg/
configuration-memory.html) and at most :data:`MAX_AGE_DAYS` old; otherwise the seeds are used
and `load` says why (the toolkit logs it, once per environment).

Imports only the standard library.
"""

from __future__ import annotations

import datetime as dt

from functions.runtime.contract.calibration_document import (
    CALIBRATION_MAX_MS as MAX_MS,
)
from functions.runtime.contract.calibration_document import (
    CALIBRATION_STAGES as STAGES,
)
from functions.runtime.contract.calibration_document import (
    CALIBRATION_VERSION as VERSION,
)
from functions.runtime.contract.calibration_document import (
    AdmissionCalibration,
    CalibrationError,
)
from functions.runtime.contract.calibration_document import (
    parse_calibration as parse,
)
from functions.runtime.contract.environment import ENV_CALIBRATION

#: ``VERSION``, ``STAGES``, ``MAX_MS``, ``AdmissionCalibration``, ``CalibrationError`` and
#: ``parse`` are the contract's (deliberate re-exports under the names this module always had).
__all__ = ["FLEET_MAX_AGE_S", "MAX_AGE_DAYS", "MAX_FUTURE_DAYS", "MAX_MS", "SOURCE_FLEET",
           "STAGES", "VERSION", "AdmissionCalibration", "CalibrationError", "load",
           "load_fleet", "parse"]

#: A calibration older than this is stale, days: code, dependencies and the endpoint change;
#: re-run ``warmstart calibrate`` at least this often (a release usually does).
MAX_AGE_DAYS = 90
#: A fleet calibration (the warmer's, published with the degradation level) older than this is
#: stale, s: the warmer writes it every few minutes (``warmers.degradation.FLEET_REFRESH_S``)
#: from the last 60 minutes of ``StageDuration``; one older than 15 minutes means the warmer
#: stopped, and the fleet it measured may not be the one running now (a deploy, a new endpoint).
FLEET_MAX_AGE_S = 900.0
#: ``source`` of a calibration the warmer measured on the fleet (``warmstart calibrate`` writes
#: none).
SOURCE_FLEET = "fleet"
#: A calibration stamped further ahead of the function's clock than this is refused, days:
#: a skewed clock or a hand edit, not a measurement (its age, hence staleness, is unknown).
MAX_FUTURE_DAYS = 1.0


def load(text: str | None, *, agent: str | None, memory_mb: int | None,
         now: dt.datetime | None = None, max_age_days: float = MAX_AGE_DAYS,
         source: str = ENV_CALIBRATION) -> tuple[AdmissionCalibration | None, str]:
    """The calibration to use, or None and why the seeds are used instead.

    Parameters
    ----------
    text : str | None
        ``WARMSTART_CALIBRATION`` (None or blank: none deployed).
    agent : str | None
        This function's agent name (None: not compared, e.g. the fleet calibration read from
        the agent's own SSM parameter, which the warmer writes by function and alias).
    memory_mb : int | None
        ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` (None: unknown, e.g. a local run; not compared).
    now : datetime | None
        Current time (default: now, UTC).
    max_age_days : float
        Older is stale.
    source : str
        Where ``text`` came from, as the log line names it.

    Returns
    -------
    tuple[AdmissionCalibration | None, str]
        ``(calibration, line)``: the line names the calibration used, or says why none is
        (``calibration_missing`` / ``calibration_invalid`` / ``calibration_stale`` /
        ``calibration_mismatch`` lead the message, for the log's failure tag).
    """
    if text is None or not text.strip():
        return None, (f"calibration_missing: {source} is not set; admission starts "
                      "from the seeds (run `warmstart calibrate --agent NAME` and synth again)")
    try:
        cal = parse(text)
    except CalibrationError as exc:
        return None, f"calibration_invalid: {source} {exc}; admission uses the seeds"
    if agent is not None and cal.agent != agent:
        return None, (f"calibration_mismatch: the calibration is of agent {cal.agent!r}, this "
                      f"function serves {agent!r}; admission uses the seeds")
    if memory_mb is not None and cal.memory_mb != memory_mb:
        named = "" if source == ENV_CALIBRATION else f"{source} "
        return None, (f"calibration_mismatch: {named}measured at {cal.memory_mb} MB, this function has "
                      f"{memory_mb} MB (CPU scales with memory); admission uses the seeds")
    age_days = ((now or dt.datetime.now(dt.UTC)) - cal.measured_at).total_seconds() / 86400.0
    if age_days < -MAX_FUTURE_DAYS:
        return None, (f"calibration_invalid: {source} measured_at "
                      f"{cal.measured_at.isoformat()} is "
                      f"{-age_days:.0f} days in the future (a skewed clock or a hand edit); "
                      "admission uses the seeds")
    if age_days > max_age_days:
        if max_age_days < 1.0:
            return None, (f"calibration_stale: {source} measured {age_days * 1440.0:.0f} min ago "
                          f"(more than {max_age_days * 1440.0:g}); admission uses the seeds")
        return None, (f"calibration_stale: measured {age_days:.0f} days ago (more than "
                      f"{max_age_days:g}); admission uses the seeds")
    return cal, f"admission starts from the {cal.describe()}"


def load_fleet(text: str | None, *, memory_mb: int | None,
               now: dt.datetime | None = None) -> tuple[AdmissionCalibration | None, str]:
    """The fleet calibration the warmer published with the degradation level, or None and why.

    Same checks as `load` (well-formed version 1, this memory size), with the fleet's
    staleness limit :data:`FLEET_MAX_AGE_S` instead of :data:`MAX_AGE_DAYS` and no agent check
    (the parameter is the agent's own; the warmer names the document by function and alias).

    Parameters
    ----------
    text : str | None
        The ``calibration`` object of the parameter's JSON form, as JSON text (None: the
        parameter holds the plain level, or no calibration).
    memory_mb : int | None
        ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` (None: not compared).
    now : datetime | None
        Current time (default: now, UTC).

    Returns
    -------
    tuple[AdmissionCalibration | None, str]
        As `load`; the line's first word is the log's failure tag when None.
    """
    return load(text, agent=None, memory_mb=memory_mb, now=now,
                max_age_days=FLEET_MAX_AGE_S / 86400.0,
                source="the fleet calibration (degradation parameter)")
