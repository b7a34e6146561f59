"""The lookup agent end to end through its real handler: real events, the real tool stub (real
HTTP, real waiting), the toolkit's admission and degradation."""

from __future__ import annotations

import time
from typing import Any

import pytest

from functions.lookup import tool
from functions.runtime.agent import DeclarationError
from infra.local.tool_stub import ToolStub
from tests.conftest import HTTP_EVENT_FILES
from tests.unit.lookup.conftest import call, failures, lookup

CONTRACT_FIELDS = {"error", "message", "retry_after_s", "estimated_recovery_at", "level", "request_id"}


# -- the local path --------------------------------------------------------------------------
@pytest.mark.parametrize("sample", HTTP_EVENT_FILES)
def test_answers_through_the_tool(make_handler: Any, stub: ToolStub, sample: str) -> None:
    stub.latency_ms = 40
    handler = make_handler()
    answer = lookup(handler, "A-1001", sample=sample)
    assert answer.status == 200, answer.body
    assert answer.body == {"order_id": "A-1001", "status": stub.order("A-1001")["status"],
                           "order": stub.order("A-1001"), "source": "tool", "age_s": 0.0,
                           "stale": False, "partial": False}
    assert answer.headers["x-warmstart-path"] == "local"
    assert answer.timing()["tool"] >= 40  # the real wait, reported as Server-Timing: tool
    assert stub.requests == ["A-1001"]


def test_a_fresh_cached_answer_is_reused(make_handler: Any, stub: ToolStub) -> None:
    # GIVEN one answer from the tool, then the order changes at the tool
    stub.latency_ms = 200
    handler = make_handler()
    first = lookup(handler, "A-1001")
    stub.statuses["A-1001"] = "delivered"
    # WHEN it is asked again within the TTL
    started = time.perf_counter()
    again = lookup(handler, "A-1001")
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    # THEN the cached answer comes back without a tool call (no wait, no tool timing)
    assert again.status == 200
    assert again.body["source"] == "cache" and again.body["stale"] is False
    assert again.body["status"] == first.body["status"] != "delivered"
    assert 0.0 <= again.body["age_s"] < 5.0
    assert "tool" not in again.timing() and elapsed_ms < 200
    assert stub.requests == ["A-1001"]


def test_the_order_route_takes_the_id_from_the_path(make_handler: Any, stub: ToolStub) -> None:
    handler = make_handler()
    answer = call(handler, "GET", "/v1/orders/B-2002")
    assert answer.status == 200
    assert answer.body["order_id"] == "B-2002" and answer.body["source"] == "tool"
    bad = call(handler, "GET", "/v1/orders/-bad")
    assert bad.status == 422 and bad.body["error"] == "bad_request"
    assert stub.requests == ["B-2002"]  # the bad id never reached the tool


def test_an_unknown_order_is_a_404(make_handler: Any, stub: ToolStub, caplog: pytest.LogCaptureFixture) -> None:
    stub.missing.add("GONE-1")
    answer = lookup(make_handler(), "GONE-1")
    assert answer.status == 404
    assert answer.body["error"] == "order_not_found" and set(answer.body) == CONTRACT_FIELDS
    assert failures(caplog) == ["bad_request"]


# -- tool failures -----------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "status", "code", "tag"), [
    ("error", 502, "tool_unavailable", "tool_unavailable"),
    ("hang", 504, "tool_timeout", "timeout_network"),
    ("refuse", 502, "tool_unavailable", "tool_unavailable"),
])
def test_a_tool_failure_without_a_cached_answer_is_a_json_error(
    make_handler: Any, stub: ToolStub, caplog: pytest.LogCaptureFixture,
    mode: str, status: int, code: str, tag: str,
) -> None:
    handler = make_handler(LOOKUP_TOOL_TIMEOUT_MS="150")
    caplog.clear()
    stub.fail(mode, status=503)  # type: ignore[arg-type]
    started = time.perf_counter()
    answer = lookup(handler, "A-1001")
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    assert answer.status == status
    assert set(answer.body) == CONTRACT_FIELDS
    assert answer.body["error"] == code
    assert answer.body["retry_after_s"] == tool.RETRY_AFTER_S
    assert answer.headers["retry-after"] == str(tool.RETRY_AFTER_S)
    assert "no answer is cached for order 'A-1001'" in answer.body["message"]
    assert answer.body["request_id"] and answer.body["level"] == "L0"
    assert failures(caplog) == [tag]
    if mode == "hang":  # waited for the timeout, not for the hang
        assert 150 <= elapsed_ms < 1000 and answer.timing()["tool"] >= 150


@pytest.mark.parametrize(("mode", "tool_error", "tag"), [
    ("error", "tool_unavailable", "tool_unavailable"), ("hang", "tool_timeout", "timeout_network"),
    ("refuse", "tool_unavailable", "tool_unavailable"),
])
def test_a_tool_failure_with_a_cached_answer_returns_it_degraded(
    make_handler: Any, stub: ToolStub, caplog: pytest.LogCaptureFixture,
    mode: str, tool_error: str, tag: str,
) -> None:
    # GIVEN an answer cached, past its freshness (TTL 0 s: every lookup calls the tool)
    handler = make_handler(LOOKUP_TOOL_TIMEOUT_MS="150", LOOKUP_CACHE_TTL_S="0")
    first = lookup(handler, "A-1001")
    assert first.body["source"] == "tool"
    # WHEN the tool fails
    stub.fail(mode)  # type: ignore[arg-type]
    caplog.clear()
    answer = lookup(handler, "A-1001")
    # THEN the cached answer is returned, marked degraded and stale, with its age
    assert answer.status == 200
    assert answer.body["degraded"] is True and answer.body["level"] == "L0"
    assert answer.body["source"] == "cache" and answer.body["stale"] is True
    assert answer.body["order"] == first.body["order"] and answer.body["age_s"] > 0
    assert answer.body["tool_error"] == tool_error and answer.body["message"]
    assert "tool" in answer.timing()
    assert failures(caplog) == [tag]  # answered, and logged as the failure it is


def test_a_cached_answer_past_the_stale_limit_is_not_used(make_handler: Any, stub: ToolStub) -> None:
    handler = make_handler(LOOKUP_CACHE_TTL_S="0", LOOKUP_CACHE_MAX_STALE_S="0.05")
    lookup(handler, "A-1001")
    time.sleep(0.1)
    stub.fail("error")
    assert lookup(handler, "A-1001").status == 502


def test_the_tool_recovers(make_handler: Any, stub: ToolStub) -> None:
    handler = make_handler(LOOKUP_CACHE_TTL_S="0")
    stub.fail("error", times=1)
    assert lookup(handler, "A-1001").status == 502
    answer = lookup(handler, "A-1001")
    assert answer.status == 200 and answer.body["source"] == "tool"


# -- degradation --------------------------------------------------------------------------------
def test_level_l2_answers_partial_then_cached_without_calling_the_tool(make_handler: Any, stub: ToolStub) -> None:
    # GIVEN this environment cached an answer for A-1001 at L0 (an L0 and an L2 handler share
    # the process's per-environment cache)
    lookup(make_handler(), "A-1001")
    assert stub.requests == ["A-1001"]
    handler = make_handler(WARMSTART_DEGRADATION_LEVEL="L2")
    # WHEN the level is L2 (precision cut)
    cached = lookup(handler, "A-1001")
    partial = lookup(handler, "B-2002")
    # THEN the degraded hook answers: the cached answer for A-1001, partial for B-2002
    assert cached.status == 200 and cached.headers["x-warmstart-path"] == "degraded"
    assert cached.body["degraded"] is True and cached.body["level"] == "L2"
    assert cached.body["source"] == "cache" and cached.body["order"] == stub.order("A-1001")
    assert cached.body["stale"] is False and cached.body["age_s"] >= 0
    assert partial.status == 200 and partial.headers["x-warmstart-path"] == "degraded"
    assert partial.body["degraded"] is True and partial.body["level"] == "L2"
    assert partial.body["partial"] is True and partial.body["status"] == "unknown"
    assert partial.body["source"] == "none" and partial.body["order"] is None
    assert partial.body["retry_after_s"] == tool.RETRY_AFTER_S and "B-2002" in partial.body["message"]
    assert stub.requests == ["A-1001"]  # L2 never called the tool
    # non-degradable routes still answer locally at L2
    health = call(handler, "GET", "/healthz")
    assert health.status == 200 and health.headers["x-warmstart-path"] == "local"


def test_level_l2_marks_an_old_cached_answer_stale(make_handler: Any, stub: ToolStub) -> None:
    lookup(make_handler(LOOKUP_CACHE_TTL_S="0"), "A-1001")
    answer = lookup(make_handler(WARMSTART_DEGRADATION_LEVEL="L2", LOOKUP_CACHE_TTL_S="0"), "A-1001")
    assert answer.body["degraded"] is True and answer.body["stale"] is True
    assert answer.body["source"] == "cache"


def test_admission_counts_the_tool_wait(make_handler: Any, stub: ToolStub) -> None:
    # GIVEN a 300 ms SLA and a tool that takes 400 ms
    stub.latency_ms = 400
    handler = make_handler(WARMSTART_SLA_MS="300", LOOKUP_CACHE_TTL_S="0")
    # WHEN the first lookup goes to the tool (its p95 is only the seed, 100 ms)
    first = lookup(handler, "A-1001")
    assert first.status == 200 and first.body["source"] == "tool"
    assert first.timing()["tool"] >= 400
    # THEN the measured 400 ms p95 no longer fits: the next lookups get the degraded answer
    # at once, without waiting for the tool
    started = time.perf_counter()
    partial = lookup(handler, "B-2002")
    cached = lookup(handler, "A-1001")
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    assert partial.headers["x-warmstart-path"] == "degraded" and partial.body["partial"] is True
    assert cached.headers["x-warmstart-path"] == "degraded" and cached.body["source"] == "cache"
    assert cached.body["stale"] is True and cached.body["degraded"] is True
    assert elapsed_ms < 400
    assert stub.requests == ["A-1001"]


def test_a_fresh_cached_answer_adds_no_downstream_wait(make_handler: Any, stub: ToolStub) -> None:
    # a slow tool's p95 does not degrade an order whose answer is cached and fresh
    stub.latency_ms = 400
    handler = make_handler(WARMSTART_SLA_MS="300")
    lookup(handler, "A-1001")
    again = lookup(handler, "A-1001")
    assert again.headers["x-warmstart-path"] == "local" and again.body["source"] == "cache"
    assert "degraded" not in again.body


# -- input and configuration -------------------------------------------------------------------
@pytest.mark.parametrize(("body", "status"), [
    ({"order_id": "bad id!"}, 422),
    ({"order_id": ""}, 422),
    ({"order_id": 1001}, 422),
    ({"order_id": "A" * 65}, 422),
    ({"id": "A-1001"}, 422),
    ({"order_id": "A-1001", "extra": 1}, 422),
    (["A-1001"], 422),
    (None, 422),
    ("{not json", 400),
])
def test_bad_input_is_refused_before_the_tool_is_called(
    make_handler: Any, stub: ToolStub, body: Any, status: int,
) -> None:
    handler = make_handler()
    raw = body if isinstance(body, str) else None
    if raw is None and body is not None:
        import json

        raw = json.dumps(body)
    answer = call(handler, "POST", "/v1/lookup", raw)
    assert answer.status == status
    assert answer.body["error"] == "bad_request" and set(answer.body) == CONTRACT_FIELDS
    assert stub.requests == []


def test_an_unset_tool_url_is_a_503_naming_it(make_handler: Any, stub: ToolStub,
                                              caplog: pytest.LogCaptureFixture) -> None:
    handler = make_handler(LOOKUP_TOOL_URL=None)
    caplog.clear()
    answer = lookup(handler, "A-1001")
    assert answer.status == 503
    assert answer.body["error"] == "tool_not_configured" and set(answer.body) == CONTRACT_FIELDS
    assert "LOOKUP_TOOL_URL is not set" in answer.body["message"]
    assert failures(caplog) == ["tool_unavailable"]
    health = call(handler, "GET", "/healthz")
    assert health.status == 200 and health.body["tool"] == "not_configured"
    assert stub.requests == []


def test_health_and_capabilities(make_handler: Any, stub: ToolStub) -> None:
    handler = make_handler(LOOKUP_TOOL_TIMEOUT_MS="250")
    health = call(handler, "GET", "/healthz")
    assert health.body["status"] == "ok" and health.body["agent"] == "lookup"
    assert health.body["model"] == "none" and health.body["tool"] == "configured"
    caps = call(handler, "GET", "/capabilities").body
    assert caps["agent"] == "lookup" and caps["model_state"] == "none"
    routes = {(r["method"], r["path"]): r for r in caps["routes"]}
    assert routes[("POST", "/v1/lookup")]["degradable"] is True
    assert routes[("POST", "/v1/lookup")]["sla_ms"] == 2000
    assert routes[("GET", "/v1/orders/{order_id}")]["degradable"] is False
    assert all(not r["needs_model"] for r in caps["routes"])
    assert caps["tool"]["configured"] is True and caps["tool"]["timeout_ms"] == 250
    assert stub.requests == []  # neither calls the tool
    missing = call(handler, "GET", "/v2/nothing")
    assert missing.status == 404 and missing.body["error"] == "not_found"


def test_declared_routes_match_the_app() -> None:
    from functions.lookup.handler import agent

    assert agent.check() == ["POST /v1/lookup", "GET /v1/orders/{order_id}", "GET /capabilities",
                             "GET /healthz"]
    with pytest.raises(DeclarationError, match="LOOKUP_TOOL_TIMEOUT_MS='soon'"):
        agent.check({"LOOKUP_TOOL_TIMEOUT_MS": "soon"})


@pytest.mark.parametrize("sample", HTTP_EVENT_FILES)
def test_the_base_path_is_stripped(make_handler: Any, stub: ToolStub, sample: str) -> None:
    handler = make_handler(WARMSTART_BASE_PATH="/lookup")
    answer = lookup(handler, "A-1001", sample=sample, path="/lookup/v1/lookup")
    assert answer.status == 200 and answer.body["source"] == "tool"
    by_path = call(handler, "GET", "/lookup/v1/orders/B-2002", sample=sample)
    assert by_path.status == 200 and by_path.body["order_id"] == "B-2002"
    assert stub.requests == ["A-1001", "B-2002"]
