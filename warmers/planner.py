"""The planner's names where the deploy side, the tools and the tests import them: a
deliberate re-export of :mod:`warmers.plan` (no logic here).

The planner is split by what it plans (:mod:`warmers.plan.policy`, the shared vocabulary;
:mod:`warmers.plan.alias`; :mod:`warmers.plan.managed_instances`; :mod:`warmers.plan.endpoint`;
:mod:`warmers.plan.run`), with :func:`warmers.plan.run.plan_run` the one entry. Code under
``warmers/`` imports the module that defines a name, not this one.
"""

from __future__ import annotations

from warmers.plan.alias import explain_alias, plan_alias
from warmers.plan.endpoint import (
    DEFAULT_FAILED_ANSWER_USD,
    MAX_SPEND_SEGMENTS,
    AgentDemand,
    EndpointPlan,
    EndpointPolicy,
    EndpointRunPlan,
    cold_start_late_fraction,
    plan_endpoint,
)
from warmers.plan.policy import (
    DEFAULT_ACCOUNT_CONCURRENCY,
    UNRESERVED_MINIMUM,
    AliasPolicy,
    PlanError,
    PlannerConfig,
    Step,
    WarmPlan,
    account_headroom,
    budget_units,
    chance_of_invocation,
    expected_utilization,
    units_that_pay,
)
from warmers.plan.run import AccountLimits, AliasRunPlan, MetricsMissing, RunPlan, plan_run

__all__ = [
    "DEFAULT_ACCOUNT_CONCURRENCY", "DEFAULT_FAILED_ANSWER_USD", "MAX_SPEND_SEGMENTS",
    "UNRESERVED_MINIMUM", "AccountLimits", "AgentDemand", "AliasPolicy", "AliasRunPlan",
    "EndpointPlan", "EndpointPolicy", "EndpointRunPlan", "MetricsMissing", "PlanError",
    "PlannerConfig", "RunPlan", "Step", "WarmPlan", "account_headroom", "budget_units",
    "chance_of_invocation", "cold_start_late_fraction", "expected_utilization", "explain_alias",
    "plan_alias", "plan_endpoint", "plan_run", "units_that_pay",
]
