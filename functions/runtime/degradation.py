"""Degradation levels L0-L3 and what each one does to a request.

The level comes from the SSM parameter the warmer writes (read by
`functions.runtime.degradation_level`, owned by the warmers) or from config
(``WARMSTART_DEGRADATION_LEVEL``) while there is no warmer. Admission
(`functions.runtime.admission.decide`) turns the level into a path; this module builds the
responses for the paths that do not run the model at full precision:

=====  =====================================  ==========================================
level  utilization of available concurrency   effect on a request
=====  =====================================  ==========================================
L0     < 95 %                                 normal
L1     >= 95 %                                P2 routes off: ``503`` ``feature_disabled``,
                                              ``Retry-After``; ``/capabilities`` lists them
L2     >= 98 %                                degradable routes answer cheaply (lexical
                                              intent fallback), body ``degraded: true``
L3     >= 99.5 %                              new requests shed: ``503``, ``Retry-After``,
                                              ``estimated_recovery_at``
=====  =====================================  ==========================================

Error bodies are ``{"error", "message", "retry_after_s", "estimated_recovery_at", "level",
"request_id"}`` (DESIGN.md, "The request path").

Imports only the standard library; no I/O, no clock (``now_ms`` is passed in).

References
----------
Thresholds: the project's seed notes, DESIGN.md "Degradation levels".
Retry-After: RFC 9110 section 10.2.3, https://www.rfc-editor.org/rfc/rfc9110#name-retry-after
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from functions.runtime.contract.levels import Level, parse_level
from functions.runtime.errors import FailureTag

if TYPE_CHECKING:  # pragma: no cover
    from functions.runtime.admission import Decision
    from functions.runtime.routes import RouteSpec


#: Error codes in response bodies, by admission reason.
ERROR_FEATURE_DISABLED = "feature_disabled"
ERROR_OVERLOADED = "overloaded"
ERROR_SLA_UNREACHABLE = "sla_unreachable"


@dataclass(frozen=True)
class DegradationResponse:
    """A response built without the model (shed, feature off) or marked degraded.

    Parameters
    ----------
    status_code : int
    headers : dict of str to str
        Includes ``X-Warmstart-Path`` and, for 503s, ``Retry-After`` (whole seconds).
    body : dict
        JSON-serialisable body.
    failure_tag : str or None
        The one failure tag to log (``timeout_resource`` when no path fitted in the SLA);
        None for policy outcomes (L1 feature off, L3 shed) that are not failures.
    """

    status_code: int
    headers: dict[str, str]
    body: dict[str, Any]
    failure_tag: str | None = None

    def to_http_api(self, extra_headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """API Gateway HTTP API (payload 2.0) / Lambda proxy response dict."""
        headers = {**self.headers, **(extra_headers or {})}
        return {
            "statusCode": self.status_code,
            "headers": headers,
            "body": json.dumps(self.body, separators=(",", ":")),
            "isBase64Encoded": False,
        }


def iso_utc(epoch_ms: float) -> str:
    """Epoch ms -> ISO 8601 UTC with millisecond precision (``2026-11-29T21:30:00.000Z``)."""
    return (
        datetime.fromtimestamp(epoch_ms / 1000.0, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _error_body(
    error: str,
    message: str,
    *,
    retry_after_s: int | None,
    now_epoch_ms: float,
    level: Level,
    request_id: str,
) -> dict[str, Any]:
    recovery = None if retry_after_s is None else iso_utc(now_epoch_ms + retry_after_s * 1000.0)
    return {
        "error": error,
        "message": message,
        "retry_after_s": retry_after_s,
        "estimated_recovery_at": recovery,
        "level": level.value,
        "request_id": request_id,
    }


def _shed_headers(retry_after_s: int | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Cache-Control": "no-store",
        "X-Warmstart-Path": "shed",
    }
    if retry_after_s is not None:
        headers["Retry-After"] = str(int(retry_after_s))
    return headers


def shed_response(
    decision: Decision,
    *,
    level: Level,
    request_id: str,
    now_epoch_ms: float,
    feature: str = "",
) -> DegradationResponse:
    """The ``503`` for a SHED decision.

    Parameters
    ----------
    decision : Decision
        ``decision.path`` must be SHED; its ``reason`` picks the error code:
        ``feature_disabled`` (L1, P2 route), ``level_shed`` (L3) -> ``overloaded``,
        ``budget_exhausted`` / ``no_path_fits`` -> ``sla_unreachable``.
    level : Level
        Current degradation level (echoed in the body).
    request_id : str
    now_epoch_ms : float
        Wall-clock now in epoch ms; ``estimated_recovery_at = now + retry_after_s``.
    feature : str
        Feature name for the ``feature_disabled`` message.

    Returns
    -------
    DegradationResponse
        Status 503, ``Retry-After`` header, error body.

    Raises
    ------
    ValueError
        ``decision`` is not a SHED decision.
    """
    # compared by value: degradation must not import admission (admission imports levels)
    if decision.path.value != "SHED":
        raise ValueError(f"shed_response needs a SHED decision, got {decision.path.value}")
    retry = decision.retry_after_s
    if decision.reason.value == "feature_disabled":
        error = ERROR_FEATURE_DISABLED
        message = (
            f"feature {feature or 'this route'!r} is switched off at degradation level "
            f"{level.value}; see /capabilities and retry after {retry} s"
        )
        tag = None
    elif decision.reason.value == "level_shed":
        error = ERROR_OVERLOADED
        message = f"the service is shedding new requests (level {level.value}); retry after {retry} s"
        tag = None
    else:
        error = ERROR_SLA_UNREACHABLE
        message = (
            f"no way to answer within the SLA ({decision.reason.value}, "
            f"{decision.budget_ms} ms left); retry after {retry} s"
        )
        tag = FailureTag.TIMEOUT_RESOURCE.value
    body = _error_body(
        error, message, retry_after_s=retry, now_epoch_ms=now_epoch_ms, level=level,
        request_id=request_id,
    )
    return DegradationResponse(503, _shed_headers(retry), body, tag)


def mark_degraded(answer: Mapping[str, Any], *, level: Level) -> dict[str, Any]:
    """Copy of a cheaper answer with ``degraded: true`` and the level that caused it."""
    body = dict(answer)
    body["degraded"] = True
    body["level"] = level.value
    return body


def degraded_response(answer: Mapping[str, Any], *, level: Level) -> DegradationResponse:
    """``200`` with the cheaper answer, marked degraded, ``X-Warmstart-Path: degraded``."""
    return DegradationResponse(
        200,
        {"Content-Type": "application/json", "X-Warmstart-Path": "degraded"},
        mark_degraded(answer, level=level),
        None,
    )


@dataclass(frozen=True)
class Capability:
    """One row of ``/capabilities``."""

    feature: str
    method: str
    path: str
    tier: str
    enabled: bool
    degraded: bool
    reason: str | None = None


@dataclass(frozen=True)
class Capabilities:
    """What is on, off or degraded at a level (``GET /capabilities``)."""

    level: Level
    features: tuple[Capability, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON body: ``{"level", "features": [...], "disabled": [feature, ...]}``."""
        return {
            "level": self.level.value,
            "features": [c.__dict__.copy() for c in self.features],
            "disabled": [c.feature for c in self.features if not c.enabled],
            "degraded": [c.feature for c in self.features if c.degraded],
        }


#: What a degraded answer gives up (``/capabilities`` reason at L2): the route's cheaper answer
#: (its ``degraded`` hook) needs no model and skips the request's downstream work on purpose.
DEGRADED_EFFECT = "cheaper answer at L2 (the route's degraded answer: no model, no downstream work)"


def capabilities(routes: Iterable[RouteSpec], level: Level | str) -> Capabilities:
    """Which features a front end should grey out at ``level`` (``GET /capabilities``).

    L1 and above switch P2 routes off; L2 marks degradable routes degraded (reason
    `DEGRADED_EFFECT`: the degraded answer needs no model and skips the downstream tool call);
    L3 switches everything off (new requests are shed).

    Parameters
    ----------
    routes : iterable of functions.runtime.routes.RouteSpec
        The app's routes (a ``RouteRegistry``); ``feature``, ``tier`` and ``degradable`` are
        read.
    level : Level or str

    Raises
    ------
    ValueError
        Unknown level.
    """
    lvl = parse_level(level)
    rows = []
    for spec in routes:
        tier = str(spec.tier)
        enabled, degraded, reason = True, False, None
        if lvl is Level.L3:
            enabled, reason = False, "shedding new requests (L3)"
        elif lvl.rank >= Level.L1.rank and tier == "P2":
            enabled, reason = False, f"P2 features off at {lvl.value}"
        elif lvl is Level.L2 and spec.degradable:
            degraded, reason = True, DEGRADED_EFFECT
        rows.append(Capability(spec.feature, spec.method, spec.path, tier, enabled, degraded,
                               reason))
    return Capabilities(lvl, tuple(rows))


def retry_after_from_ms(wait_ms: float, *, minimum_s: int = 1) -> int:
    """Whole seconds (rounded up, at least ``minimum_s``) for a ``Retry-After`` header."""
    if math.isnan(wait_ms):
        raise ValueError("wait_ms is NaN")
    return max(int(minimum_s), math.ceil(max(wait_ms, 0.0) / 1000.0))
