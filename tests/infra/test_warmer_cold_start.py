"""The warmer document carries an agent's SLA and calibrated cold start for the endpoint
planner's counterfactual (``warmers.plan.endpoint.cold_start_late_fraction``)."""

from __future__ import annotations

import json

import pytest

from infra.constructs.warmer import WarmerPropsError, calibrated_cold_start_p95_ms
from warmers.plan.policy import AliasPolicy


def test_the_cold_start_is_the_sum_of_the_calibrated_stage_p95s() -> None:
    doc = {"version": 1, "agent": "intent", "memory_mb": 1024, "machine": "m",
           "measured_at": "2026-12-01T10:00:00+00:00", "overflow_p95_ms": None,
           "stage_p95_ms": {"toolkit": 40.0, "overflow": 250.0, "web": 420.0, "model": 900.0}}
    assert calibrated_cold_start_p95_ms(json.dumps(doc)) == 1610.0
    assert calibrated_cold_start_p95_ms(None) is None
    assert calibrated_cold_start_p95_ms(json.dumps(doc | {"stage_p95_ms": {}})) is None
    # read with the contract's calibration reader: a document that is none is refused
    with pytest.raises(WarmerPropsError, match="calibration: version must be 1"):
        calibrated_cold_start_p95_ms(json.dumps({"stage_p95_ms": {"model": 900.0}}))


def test_the_alias_entry_the_construct_writes_is_a_valid_policy() -> None:
    entry = {"function_name": "fn", "alias": "live", "strategy": "provisioned",
             "sla_ms": 2000.0, "cold_start_p50_ms": 1610.0, "cold_start_p95_ms": 1610.0}
    policy = AliasPolicy(**entry)  # type: ignore[arg-type]
    assert (policy.sla_ms, policy.cold_start_p95_ms) == (2000.0, 1610.0)
