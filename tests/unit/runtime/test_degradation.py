"""Each degradation level's response shape: status, headers, body fields."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from functions.runtime.admission import (
    NO_OVERFLOW,
    Decision,
    EnvState,
    ModelState,
    OverflowState,
    Path,
    Reason,
    RequestInfo,
    decide,
)
from functions.runtime.degradation import (
    DEGRADED_EFFECT,
    Level,
    capabilities,
    degraded_response,
    iso_utc,
    parse_level,
    retry_after_from_ms,
    shed_response,
)
from functions.runtime.routes import RouteRegistry, RouteSpec

NOW = 1_764_451_800_000.0  # 2025-11-29T21:30:00Z
BODY_KEYS = {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}
READY = EnvState(ModelState.READY, 0.0, 50.0, 10.0)

ROUTES = RouteRegistry([
    RouteSpec("intent", "POST", "/v1/intent", "P0", degradable=True, needs_model=True),
    RouteSpec("summary", "POST", "/v1/summary", "P1"),
    RouteSpec("report", "POST", "/v1/report", "P2", sla_ms=29_000),
])


def _req(tier: str, degradable: bool = False) -> RequestInfo:
    return RequestInfo("/r", tier, 2000.0, NOW, degradable)  # type: ignore[arg-type]


def test_l1_p2_route_is_feature_disabled_503_with_retry_after() -> None:
    d = decide(_req("P2"), READY, NO_OVERFLOW, "L1", NOW + 5)
    r = shed_response(d, level=Level.L1, request_id="req-1", now_epoch_ms=NOW, feature="report")
    assert r.status_code == 503
    assert r.headers["Retry-After"] == "60"
    assert r.headers["X-Warmstart-Path"] == "shed"
    assert r.headers["Content-Type"] == "application/json"
    assert set(r.body) == BODY_KEYS
    assert r.body["error"] == "feature_disabled"
    assert "'report'" in r.body["message"] and "/capabilities" in r.body["message"]
    assert r.body["retry_after_s"] == 60 and r.body["level"] == "L1"
    assert r.body["request_id"] == "req-1"
    assert r.body["estimated_recovery_at"] == "2025-11-29T21:31:00.000Z"
    assert r.failure_tag is None  # policy, not a failure


def test_l2_cheaper_answer_marked_degraded() -> None:
    d = decide(_req("P0", degradable=True), READY, NO_OVERFLOW, "L2", NOW)
    assert d.path is Path.DEGRADE
    answer = {"intent": "billing", "score": 0.4, "scores": {"billing": 0.4}, "degraded": True,
              "model": "lexical"}
    r = degraded_response(answer, level=Level.L2)
    assert r.status_code == 200
    assert r.headers["X-Warmstart-Path"] == "degraded"
    assert "Retry-After" not in r.headers
    assert r.body["degraded"] is True and r.body["level"] == "L2"
    assert r.body["intent"] == "billing"
    assert answer.get("level") is None  # input not mutated


def test_l3_sheds_with_retry_after_and_estimated_recovery() -> None:
    d = decide(_req("P1", degradable=True), READY, OverflowState(True), "L3", NOW)
    r = shed_response(d, level=Level.L3, request_id="req-3", now_epoch_ms=NOW)
    assert (r.status_code, r.headers["Retry-After"]) == (503, "60")
    assert r.body["error"] == "overloaded" and r.body["level"] == "L3"
    recovery = datetime.fromisoformat(r.body["estimated_recovery_at"])
    assert recovery.timestamp() * 1000 == NOW + 60_000
    http = r.to_http_api({"Server-Timing": "admission;dur=0.1"})
    assert http["statusCode"] == 503 and http["isBase64Encoded"] is False
    assert http["headers"]["Server-Timing"] == "admission;dur=0.1"
    assert json.loads(http["body"]) == r.body


def test_sla_unreachable_shed_is_tagged_timeout_resource() -> None:
    d = decide(_req("P0"), EnvState(ModelState.LOADING, 4200.0, 50.0), NO_OVERFLOW, "L0", NOW)
    assert d.reason is Reason.NO_PATH_FITS
    r = shed_response(d, level=Level.L0, request_id="r", now_epoch_ms=NOW)
    assert r.body["error"] == "sla_unreachable"
    assert r.headers["Retry-After"] == "5"  # ceil(4.2 s)
    assert r.failure_tag == "timeout_resource"


def test_shed_response_refuses_non_shed_decisions() -> None:
    with pytest.raises(ValueError, match="needs a SHED decision, got LOCAL"):
        shed_response(Decision(Path.LOCAL, Reason.LOCAL_READY, 10), level=Level.L0,
                      request_id="", now_epoch_ms=NOW)


@pytest.mark.parametrize(
    ("level", "disabled", "degraded"),
    [
        ("L0", [], []),
        ("L1", ["report"], []),
        ("L2", ["report"], ["intent"]),
        ("L3", ["intent", "summary", "report"], []),
    ],
)
def test_capabilities_per_level(level: str, disabled: list[str], degraded: list[str]) -> None:
    caps = capabilities(ROUTES, level).to_dict()
    assert caps["level"] == level
    assert caps["disabled"] == disabled
    assert caps["degraded"] == degraded
    assert [f["feature"] for f in caps["features"]] == ["intent", "summary", "report"]
    json.dumps(caps)
    for row in caps["features"]:  # a degraded feature says what it gives up
        assert (row["reason"] == DEGRADED_EFFECT) is row["degraded"]
    if degraded:
        assert "downstream work" in DEGRADED_EFFECT and "no model" in DEGRADED_EFFECT


def test_parse_level() -> None:
    assert parse_level(" l2 ") is Level.L2
    assert parse_level(Level.L3) is Level.L3
    assert Level.L1.rank == 1
    with pytest.raises(ValueError, match="unknown degradation level 'L4'"):
        parse_level("L4")
    with pytest.raises(TypeError, match="must be a string"):
        parse_level(2)  # type: ignore[arg-type]


def test_helpers() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"
    assert retry_after_from_ms(1) == 1
    assert retry_after_from_ms(0) == 1
    assert retry_after_from_ms(2001) == 3
    with pytest.raises(ValueError, match="NaN"):
        retry_after_from_ms(float("nan"))
