"""Admission calibration (`functions.runtime.calibration`): what a deployed environment starts
with, and every reason it falls back to the seeds (each logged once, with its tag)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from functions.runtime import calibration
from functions.runtime.admission import DEFAULT_OVERFLOW_P95_MS
from functions.runtime.admission.state import DEFAULT_STAGE_P95_MS
from functions.runtime.overflow import DEFAULT_CLIENT_INIT_P95_MS
from tests.unit.runtime.test_agent import ENDPOINT, Built, SageMakerStandIn, env_for, orders_agent

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1, "agent": "orders", "memory_mb": 2048, "machine": "test host",
        "measured_at": "2026-11-30T09:00:00+00:00",
        "stage_p95_ms": {"toolkit": 40.0, "overflow": 250.0, "web": 420.0, "model": 900.0},
        "overflow_p95_ms": 61.5, "method": "ignored by the toolkit",
    }
    doc.update(changes)
    return doc


def test_a_current_calibration_of_this_agent_and_memory_size_is_used() -> None:
    cal, line = calibration.load(json.dumps(document()), agent="orders", memory_mb=2048, now=NOW)
    assert cal is not None
    assert cal.stage_p95_ms == {"toolkit": 40.0, "overflow": 250.0, "web": 420.0, "model": 900.0}
    assert cal.overflow_p95_ms == 61.5 and cal.measured_at == dt.datetime(2026, 11, 30, 9, tzinfo=dt.UTC)
    assert line.startswith("admission starts from the calibration of agent 'orders' at 2048 MB")
    assert "test host" in line


@pytest.mark.parametrize(("raw", "tag", "detail"), [
    (None, "calibration_missing", "WARMSTART_CALIBRATION is not set"),
    ("  ", "calibration_missing", "WARMSTART_CALIBRATION is not set"),
    ("{not json", "calibration_invalid", "not JSON"),
    ("[1, 2]", "calibration_invalid", "must be a JSON object, got list"),
    ("[" * 5000 + "]" * 5000, "calibration_invalid", "not JSON"),
    (json.dumps(document(version=2)), "calibration_invalid", "version must be 1, got 2"),
    (json.dumps(document(memory_mb="2048")), "calibration_invalid", "memory_mb must be an integer"),
    (json.dumps(document(measured_at="yesterday")), "calibration_invalid", "measured_at must be an ISO"),
    (json.dumps(document(measured_at="2026-11-30T09:00:00")), "calibration_invalid", "time zone"),
    (json.dumps(document(stage_p95_ms={"modle": 900})), "calibration_invalid", "unknown stages ['modle']"),
    (json.dumps(document(stage_p95_ms={"model": -1})), "calibration_invalid", "stage_p95_ms.model must be"),
    (json.dumps(document(stage_p95_ms={"model": True})), "calibration_invalid", "stage_p95_ms.model must be"),
    (json.dumps(document(overflow_p95_ms="fast")), "calibration_invalid", "overflow_p95_ms must be"),
    (json.dumps(document(agent="lookup")), "calibration_mismatch", "of agent 'lookup'"),
    (json.dumps(document(memory_mb=1024)), "calibration_mismatch", "measured at 1024 MB, this function has 2048 MB"),
    (json.dumps(document(measured_at="2026-06-01T00:00:00+00:00")), "calibration_stale", "184 days ago (more than 90)"),
    (json.dumps(document(measured_at="2027-01-01T00:00:00+00:00")), "calibration_invalid", "is 30 days in the future"),
    (json.dumps(document(stage_p95_ms=None)), "calibration_invalid", "stage_p95_ms must be an object"),
    (json.dumps(document(overflow_p95_ms=float("inf"))), "calibration_invalid", "overflow_p95_ms must be"),
    (json.dumps(document(route_p95_ms=[900])), "calibration_invalid", "route_p95_ms must be an object"),
    (json.dumps(document(route_p95_ms={"chat": -1})), "calibration_invalid", "route_p95_ms.chat must be"),
    (json.dumps(document(stream_overflow_p95_ms={"": 10})), "calibration_invalid",
     "stream_overflow_p95_ms keys must be route names"),
    (json.dumps(document(degrade_p95_ms="quick")), "calibration_invalid", "degrade_p95_ms must be"),
])
def test_every_unusable_calibration_falls_back_to_the_seeds_and_says_why(
        raw: str | None, tag: str, detail: str) -> None:
    cal, line = calibration.load(raw, agent="orders", memory_mb=2048, now=NOW)
    assert cal is None
    assert line.startswith(f"{tag}: ") and detail in line, line
    assert line.endswith("the seeds") or "seeds (run" in line


def test_a_clock_a_few_hours_ahead_is_not_the_future() -> None:
    """Clocks differ by minutes, not days: a calibration stamped hours ahead is still used."""
    cal, _ = calibration.load(json.dumps(document(measured_at="2026-12-01T20:00:00+00:00")),
                              agent="orders", memory_mb=2048, now=NOW)
    assert cal is not None


def test_an_unknown_memory_size_is_not_compared() -> None:
    """A local run has no AWS_LAMBDA_FUNCTION_MEMORY_SIZE: the calibration is still used."""
    cal, _ = calibration.load(json.dumps(document(memory_mb=1024)), agent="orders", memory_mb=None,
                              now=NOW)
    assert cal is not None and cal.memory_mb == 1024


# -- through the entry point: the handler's admission starts from the calibration ----------------


@pytest.fixture
def built() -> Iterator[Built]:
    b = Built()
    yield b
    b.close()


@pytest.fixture(scope="module")
def sagemaker() -> Iterator[SageMakerStandIn]:
    stand_in = SageMakerStandIn()
    with stand_in.server:
        yield stand_in


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def _agent_env(sagemaker: SageMakerStandIn, **extra: str) -> dict[str, str]:
    return env_for("provisioned-concurrency", WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
                   WARMSTART_OVERFLOW_ENDPOINT_URL=sagemaker.server.url,
                   AWS_LAMBDA_FUNCTION_MEMORY_SIZE="2048", **extra)


def test_a_deployed_calibration_replaces_the_seeds_of_a_user_agent(
        built: Built, sagemaker: SageMakerStandIn, caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a user agent whose function carries a current calibration (and a declared seed
    # for a stage the calibration also measured, and one it did not)
    doc = document(measured_at=dt.datetime.now(dt.UTC).isoformat())
    agent = orders_agent(built.gate(released=True), stage_p95_ms={"model": 5000.0, "telemetry": 77.0})
    with caplog.at_level(logging.INFO, logger="warmstart"):
        handler, _ = built.handler(agent, _agent_env(sagemaker, WARMSTART_CALIBRATION=json.dumps(doc)))
    admission, overflow = handler.admission, handler.overflow
    assert admission is not None and overflow is not None
    # THEN measured beats declared beats the toolkit's defaults
    assert admission.stage_p95_ms["model"] == 900.0
    assert admission.stage_p95_ms["telemetry"] == 77.0
    assert admission.stage_p95_ms["level"] == DEFAULT_STAGE_P95_MS["level"]
    # the overflow estimate starts at the measured p95 and its client creation at the
    # measured overflow stage, then learns from this environment's own calls
    assert overflow.latency.p95_ms == 61.5 and overflow.client_init_p95_ms == 250.0
    for ms in (20.0, 22.0, 25.0, 21.0, 23.0, 24.0):
        overflow.latency.observe(ms)
    assert overflow.latency.p95_ms == 25.0
    assert any("admission starts from the calibration of agent 'orders'" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize(("raw", "tag"), [
    (None, "calibration_missing"),
    ("{not json", "calibration_invalid"),
    (json.dumps(document(stage_p95_ms={"model": "slow"})), "calibration_invalid"),
    (json.dumps(document(measured_at="2026-01-01T00:00:00+00:00")), "calibration_stale"),
    (json.dumps(document(memory_mb=4096)), "calibration_mismatch"),
])
def test_without_a_usable_calibration_the_handler_uses_the_seeds_and_logs_it_once(
        built: Built, sagemaker: SageMakerStandIn, caplog: pytest.LogCaptureFixture,
        raw: str | None, tag: str) -> None:
    # GIVEN a function whose calibration is missing, malformed, stale or of another memory
    # size, and an agent that declared its model's p95
    extra = {} if raw is None else {"WARMSTART_CALIBRATION": raw}
    agent = orders_agent(built.gate(released=True), stage_p95_ms={"model": 900.0})
    with caplog.at_level(logging.WARNING, logger="warmstart"):
        handler, _ = built.handler(agent, _agent_env(sagemaker, **extra))
    # THEN the environment starts (no init failure) from the toolkit's seeds and the agent's
    # declared stage, and says why in exactly one log line with the tag
    assert handler.admission is not None and handler.overflow is not None
    assert handler.admission.stage_p95_ms == {**DEFAULT_STAGE_P95_MS, "model": 900.0}
    assert handler.overflow.latency.p95_ms == DEFAULT_OVERFLOW_P95_MS
    assert handler.overflow.client_init_p95_ms == DEFAULT_CLIENT_INIT_P95_MS
    lines = [r.getMessage() for r in caplog.records if "calibration_" in r.getMessage()]
    assert len(lines) == 1 and f"failure_tag={tag}" in lines[0], lines


def test_the_per_route_numbers_seed_the_routes_a_new_environment_has_not_measured(
        built: Built, sagemaker: SageMakerStandIn) -> None:
    """GIVEN a calibration with a route's local p95, a streaming overflow's first event and the
    degraded answer's p95 THEN a new environment's trackers start there (not at the 50 ms
    seeds), a route it names nowhere keeps the seed, and each tracker learns from here on."""
    doc = document(measured_at=dt.datetime.now(dt.UTC).isoformat(),
                   route_p95_ms={"status": 930.0}, stream_overflow_p95_ms={"status": 160.0},
                   degrade_p95_ms=5.0)
    handler, _ = built.handler(orders_agent(built.gate(released=True)),
                               _agent_env(sagemaker, WARMSTART_CALIBRATION=json.dumps(doc)))
    admission, overflow = handler.admission, handler.overflow
    assert admission is not None and overflow is not None
    assert admission.tracker("status").p95_ms == 930.0
    assert admission.tracker("never_measured").p95_ms == 50.0  # DEFAULT_INFER_P95_MS
    assert overflow.stream_latency["status"].p95_ms == 160.0
    assert admission.degraded.p95_ms == 5.0
    tracker = admission.tracker("status")
    for ms in (100.0, 110.0, 120.0, 105.0, 115.0, 108.0):
        tracker.observe(ms)
    assert tracker.p95_ms == 120.0  # this environment's own answers replace the seed
