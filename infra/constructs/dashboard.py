"""CloudWatch dashboard: cold starts, init duration, provisioned concurrency, spillover, request paths.

One dashboard for the app, one band of widgets per agent (a title row, then three rows of
graphs on that agent's alias ``live`` and its log group, and for a streaming agent a fourth:
time to first token p50/p95 against its first-token SLA, tokens per second p50), in
``cdk.json`` order.

Two independent sources, so the dashboard is useful before and after the toolkit's own metrics:

- ``AWS/Lambda`` metrics on the alias (invocations, concurrency, duration p99, provisioned
  concurrency utilization, spillover) and a Logs Insights query over the platform ``REPORT``
  lines (every cold start logs an ``Init Duration``; a SnapStart restore a ``Restore Duration``);
- the toolkit's EMF metrics in namespace ``Warmstart`` (``ColdStart``, ``InitDuration`` (ms), and
  ``Requests`` with a ``path`` dimension = the ``X-Warmstart-Path`` header value), graphed with
  ``SEARCH`` so any dimension set the toolkit adds (``function_name``, ...) is shown, limited to
  the agent by Powertools' ``service`` dimension (= ``POWERTOOLS_SERVICE_NAME`` = the agent's name).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-search-expressions.html
https://docs.aws.amazon.com/lambda/latest/dg/snapstart-monitoring.html
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

#: EMF metric names the toolkit publishes in the ``Warmstart`` namespace (the contract with
#: ``functions/runtime`` telemetry).
COLD_START_METRIC: Final = "ColdStart"
INIT_DURATION_METRIC: Final = "InitDuration"  # EMF unit: Milliseconds
REQUESTS_METRIC: Final = "Requests"
PATH_DIMENSION: Final = "path"
#: A streaming route's EMF metrics (ms from arrival to the first body chunk; body chunks after
#: the first per second of streaming, SSE events counted as tokens).
TIME_TO_FIRST_TOKEN_METRIC: Final = "TimeToFirstTokenMs"
TOKENS_PER_SECOND_METRIC: Final = "TokensPerSecond"

_REPORT_QUERY: Final = (
    "filter @type = \"REPORT\" "
    "| stats count(*) as invocations, count(@initDuration) as cold_starts, "
    "avg(@initDuration) as avg_init_ms, pct(@initDuration, 99) as p99_init_ms, "
    "pct(@duration, 99) as p99_duration_ms by bin(5m)"
)


@dataclass(frozen=True)
class DashboardAgent:
    """What the dashboard shows of one agent.

    Attributes
    ----------
    name : str
        The agent's name (``POWERTOOLS_SERVICE_NAME``: the ``service`` dimension of its EMF metrics).
    alias : aws_lambda.Alias
        Its ``live`` alias.
    log_group : aws_logs.ILogGroup
        Its function's log group (for the ``REPORT`` line query).
    sla_ms : int
        Drawn as a horizontal line on the duration graph.
    provisioned : bool
        Whether provisioned-concurrency graphs carry data (they are drawn either way).
    path_prefix : str
        Shown in the agent's title row.
    target_utilization : float
        Target tracking value, drawn on the utilization graph.
    strategy : str
        Shown in the agent's title row.
    first_token_ms : float or None
        A streaming agent's first-token SLA, ms, drawn on its time-to-first-token graph; None
        (not streaming): no streaming row.
    """

    name: str
    alias: lambda_.Alias
    log_group: logs.ILogGroup
    sla_ms: int
    provisioned: bool
    path_prefix: str = "/"
    strategy: str = "none"
    target_utilization: float = 0.7
    first_token_ms: float | None = None


class WarmstartDashboard(Construct):
    """A CloudWatch dashboard with one band of widgets per agent.

    Parameters
    ----------
    agents : sequence of DashboardAgent
    namespace : str
        EMF namespace of the toolkit metrics (``POWERTOOLS_METRICS_NAMESPACE``).

    Attributes
    ----------
    dashboard : aws_cloudwatch.Dashboard
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        agents: Sequence[DashboardAgent],
        namespace: str,
    ) -> None:
        super().__init__(scope, construct_id)
        if not agents:
            raise ValueError("WarmstartDashboard needs at least one agent")
        rows: list[list[cloudwatch.IWidget]] = []
        for agent in agents:
            rows += _agent_rows(agent, namespace)
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            default_interval=cdk.Duration.hours(3),
            widgets=rows,
        )


def _agent_rows(agent: DashboardAgent, namespace: str) -> list[list[cloudwatch.IWidget]]:
    """The title row and the three graph rows of one agent."""
    minute = cdk.Duration.minutes(1)
    alias = agent.alias

    def search(metric_name: str, stat: str, label: str) -> cloudwatch.MathExpression:
        return cloudwatch.MathExpression(
            expression=(f"SEARCH('Namespace=\"{namespace}\" MetricName=\"{metric_name}\" "
                        f"service=\"{agent.name}\"', '{stat}', 60)"),
            using_metrics={},
            label=label,
            period=minute,
        )

    pc_note = "" if agent.provisioned else " (strategy is not 'provisioned': expect no data)"
    title = f"{agent.name}: "
    streaming: list[list[cloudwatch.IWidget]] = []
    if agent.first_token_ms is not None:
        streaming = [[
            cloudwatch.GraphWidget(
                title=f"{title}time to first token ms (toolkit EMF {TIME_TO_FIRST_TOKEN_METRIC})",
                left=[search(TIME_TO_FIRST_TOKEN_METRIC, "p50", "first token p50"),
                      search(TIME_TO_FIRST_TOKEN_METRIC, "p95", "first token p95")],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=agent.first_token_ms,
                                                                  label="first-token SLA")],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title=f"{title}tokens per second (toolkit EMF {TOKENS_PER_SECOND_METRIC})",
                left=[search(TOKENS_PER_SECOND_METRIC, "p50", "tokens/s p50")],
                width=12,
            ),
        ]]
    return [
        [cloudwatch.TextWidget(
            markdown=f"## Agent `{agent.name}`: path prefix `{agent.path_prefix}`, strategy "
                     f"`{agent.strategy}`, SLA {agent.sla_ms} ms",
            width=24, height=1)],
        [
            cloudwatch.GraphWidget(
                title=f"{title}cold starts (toolkit EMF ColdStart)",
                left=[search(COLD_START_METRIC, "Sum", "cold starts")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title=f"{title}init duration ms (toolkit EMF)",
                left=[search(INIT_DURATION_METRIC, "p99", "init p99"),
                      search(INIT_DURATION_METRIC, "Average", "init avg")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title=f"{title}request paths (X-Warmstart-Path)",
                left=[search(REQUESTS_METRIC, "Sum", "requests by path")],
                stacked=True,
                width=8,
            ),
        ],
        [
            cloudwatch.GraphWidget(
                title=f"{title}invocations and concurrency (alias live)",
                left=[alias.metric_invocations(period=minute, statistic="Sum")],
                right=[alias.metric("ConcurrentExecutions", period=minute, statistic="Maximum")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title=f"{title}duration p99 vs SLA",
                left=[alias.metric_duration(period=minute, statistic="p99")],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=agent.sla_ms, label="SLA")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title=f"{title}errors and throttles",
                left=[alias.metric_errors(period=minute, statistic="Sum"),
                      alias.metric_throttles(period=minute, statistic="Sum")],
                width=8,
            ),
        ],
        [
            cloudwatch.GraphWidget(
                title=f"{title}provisioned concurrency utilization{pc_note}",
                left=[alias.metric("ProvisionedConcurrencyUtilization", period=minute, statistic="Maximum")],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=agent.target_utilization,
                                                                  label="target tracking")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title=f"{title}spillover invocations{pc_note}",
                left=[alias.metric("ProvisionedConcurrencySpilloverInvocations", period=minute,
                                   statistic="Sum"),
                      alias.metric("ProvisionedConcurrencyInvocations", period=minute, statistic="Sum")],
                width=8,
            ),
            cloudwatch.LogQueryWidget(
                title=f"{title}cold starts and init duration (platform REPORT lines)",
                log_group_names=[agent.log_group.log_group_name],
                query_string=_REPORT_QUERY,
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=8,
            ),
        ],
        *streaming,
    ]
