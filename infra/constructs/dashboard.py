"""CloudWatch dashboard: cold starts, init duration, provisioned concurrency, spillover, request paths.

Two independent sources, so the dashboard is useful before and after the toolkit's own metrics:

- ``AWS/Lambda`` metrics on the alias (invocations, concurrency, duration p99, provisioned
  concurrency utilization, spillover) and a Logs Insights query over the platform ``REPORT``
  lines (every cold start logs an ``Init Duration``; a SnapStart restore a ``Restore Duration``);
- the toolkit's EMF metrics in namespace ``Warmstart`` (``ColdStart``, ``InitDuration`` (ms), and
  ``Requests`` with a ``path`` dimension = the ``X-Warmstart-Path`` header value), graphed with
  ``SEARCH`` so any dimension set the toolkit adds (``service``, ``function_name``) is shown.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-search-expressions.html
https://docs.aws.amazon.com/lambda/latest/dg/snapstart-monitoring.html
"""

from __future__ import annotations

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

_REPORT_QUERY: Final = (
    "filter @type = \"REPORT\" "
    "| stats count(*) as invocations, count(@initDuration) as cold_starts, "
    "avg(@initDuration) as avg_init_ms, pct(@initDuration, 99) as p99_init_ms, "
    "pct(@duration, 99) as p99_duration_ms by bin(5m)"
)


class WarmstartDashboard(Construct):
    """A CloudWatch dashboard for one agent alias.

    Parameters
    ----------
    alias : aws_lambda.Alias
        The ``live`` alias whose metrics are shown.
    log_group : aws_logs.ILogGroup
        The function's log group (for the ``REPORT`` line query).
    namespace : str
        EMF namespace of the toolkit metrics (``POWERTOOLS_METRICS_NAMESPACE``).
    sla_ms : int
        Drawn as a horizontal line on the duration graph.
    provisioned : bool
        Whether provisioned-concurrency graphs carry data (they are drawn either way).

    Attributes
    ----------
    dashboard : aws_cloudwatch.Dashboard
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alias: lambda_.Alias,
        log_group: logs.ILogGroup,
        namespace: str,
        sla_ms: int,
        provisioned: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        minute = cdk.Duration.minutes(1)

        def search(metric_name: str, stat: str, label: str) -> cloudwatch.MathExpression:
            return cloudwatch.MathExpression(
                expression=f"SEARCH('Namespace=\"{namespace}\" MetricName=\"{metric_name}\"', '{stat}', 60)",
                using_metrics={},
                label=label,
                period=minute,
            )

        pc_note = "" if provisioned else " (strategy is not 'provisioned': expect no data)"
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            default_interval=cdk.Duration.hours(3),
            widgets=[
                [
                    cloudwatch.GraphWidget(
                        title="Cold starts (toolkit EMF ColdStart)",
                        left=[search(COLD_START_METRIC, "Sum", "cold starts")],
                        width=8,
                    ),
                    cloudwatch.GraphWidget(
                        title="Init duration ms (toolkit EMF)",
                        left=[search(INIT_DURATION_METRIC, "p99", "init p99"),
                              search(INIT_DURATION_METRIC, "Average", "init avg")],
                        width=8,
                    ),
                    cloudwatch.GraphWidget(
                        title="Request paths (X-Warmstart-Path)",
                        left=[search(REQUESTS_METRIC, "Sum", "requests by path")],
                        stacked=True,
                        width=8,
                    ),
                ],
                [
                    cloudwatch.GraphWidget(
                        title="Invocations and concurrency (alias live)",
                        left=[alias.metric_invocations(period=minute, statistic="Sum")],
                        right=[alias.metric("ConcurrentExecutions", period=minute, statistic="Maximum")],
                        width=8,
                    ),
                    cloudwatch.GraphWidget(
                        title="Duration p99 vs SLA",
                        left=[alias.metric_duration(period=minute, statistic="p99")],
                        left_annotations=[cloudwatch.HorizontalAnnotation(value=sla_ms, label="SLA")],
                        width=8,
                    ),
                    cloudwatch.GraphWidget(
                        title="Errors and throttles",
                        left=[alias.metric_errors(period=minute, statistic="Sum"),
                              alias.metric_throttles(period=minute, statistic="Sum")],
                        width=8,
                    ),
                ],
                [
                    cloudwatch.GraphWidget(
                        title=f"Provisioned concurrency utilization{pc_note}",
                        left=[alias.metric("ProvisionedConcurrencyUtilization", period=minute, statistic="Maximum")],
                        left_annotations=[cloudwatch.HorizontalAnnotation(value=0.7, label="target tracking")],
                        width=8,
                    ),
                    cloudwatch.GraphWidget(
                        title=f"Spillover invocations{pc_note}",
                        left=[alias.metric("ProvisionedConcurrencySpilloverInvocations", period=minute,
                                           statistic="Sum"),
                              alias.metric("ProvisionedConcurrencyInvocations", period=minute, statistic="Sum")],
                        width=8,
                    ),
                    cloudwatch.LogQueryWidget(
                        title="Cold starts and init duration (platform REPORT lines)",
                        log_group_names=[log_group.log_group_name],
                        query_string=_REPORT_QUERY,
                        view=cloudwatch.LogQueryVisualizationType.TABLE,
                        width=8,
                    ),
                ],
            ],
        )
