"""The warmer document carries an agent's SLA and calibrated cold start for the endpoint
planner's counterfactual (``warmers.planner.cold_start_late_fraction``)."""

from __future__ import annotations

import json

from infra.constructs.warmer import calibrated_cold_start_p95_ms
from warmers.planner import AliasPolicy


def test_the_cold_start_is_the_sum_of_the_calibrated_stage_p95s() -> None:
    doc = {"version": 1, "stage_p95_ms": {"toolkit": 40.0, "overflow": 250.0, "web": 420.0,
                                          "model": 900.0}}
    assert calibrated_cold_start_p95_ms(json.dumps(doc)) == 1610.0
    assert calibrated_cold_start_p95_ms(None) is None
    assert calibrated_cold_start_p95_ms(json.dumps({"stage_p95_ms": {}})) is None


def test_the_alias_entry_the_construct_writes_is_a_valid_policy() -> None:
    entry = {"function_name": "fn", "alias": "live", "strategy": "provisioned",
             "sla_ms": 2000.0, "cold_start_p50_ms": 1610.0, "cold_start_p95_ms": 1610.0}
    policy = AliasPolicy(**entry)  # type: ignore[arg-type]
    assert (policy.sla_ms, policy.cold_start_p95_ms) == (2000.0, 1610.0)
