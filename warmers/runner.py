"""One warmer run: metrics -> forecast -> plan -> actuate -> degradation level, per alias.

``run_once`` is what the scheduled Lambda (``warmers.handler``) and the local stack's timer both
call. Time and clients are passed in; nothing here reads the clock or ``os.environ``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from warmers.actuators import AutoScalingActuator, LambdaPCActuator, WarmPingActuator
from warmers.cloudwatch import CachingMetricsSource, CloudWatchMetricsSource
from warmers.config import WarmerConfig
from warmers.degradation import SsmLevelPublisher, sustained_level
from warmers.forecast import forecast_alias
from warmers.planner import UNRESERVED_MINIMUM, WarmPlan, plan_alias
from warmers.ports import ConcurrencyActuator, MetricsSource, MetricsUnavailable
from warmers.series import PERIOD_S, MetricSeries, littles_law_concurrency
from warmers.state import MemoryPlanStore, PlanStore, SsmPlanStore

logger = logging.getLogger("warmstart.warmer")


@dataclass
class WarmerClients:
    """boto3 clients of one warmer (injected; create them with ``endpoint_url`` locally)."""

    cloudwatch: Any
    lambda_: Any
    application_autoscaling: Any
    ssm: Any

    @classmethod
    def from_boto3(cls, *, region: str, endpoint_url: str | None = None,
                   lambda_endpoint_url: str | None = None) -> WarmerClients:
        """Clients with botocore's standard retry mode.

        ``endpoint_url`` points CloudWatch, SSM and Application Auto Scaling at a moto server;
        ``lambda_endpoint_url`` points Lambda (invoke, provisioned concurrency) at the local
        emulator (default: ``endpoint_url``).
        """
        import boto3

        from warmers.config import boto_config

        cfg = boto_config()
        kw: dict[str, Any] = {"region_name": region, "config": cfg}
        if endpoint_url:
            kw["endpoint_url"] = endpoint_url
        lkw = dict(kw)
        if lambda_endpoint_url:
            lkw["endpoint_url"] = lambda_endpoint_url
        return cls(cloudwatch=boto3.client("cloudwatch", **kw),
                   lambda_=boto3.client("lambda", **lkw),
                   application_autoscaling=boto3.client("application-autoscaling", **kw),
                   ssm=boto3.client("ssm", **kw))


@dataclass
class WarmerRuntime:
    """Long-lived parts of a warmer (kept per execution environment between runs)."""

    metrics: MetricsSource
    pc_actuator: ConcurrencyActuator
    ping_actuator: WarmPingActuator
    store: PlanStore
    publisher: SsmLevelPublisher | None
    lambda_client: Any = None
    last_results: list[Any] = field(default_factory=list)

    @classmethod
    def build(cls, clients: WarmerClients, config: WarmerConfig) -> WarmerRuntime:
        pc: ConcurrencyActuator
        if config.actuator == "lambda":
            pc = LambdaPCActuator(clients.lambda_, reconcile_versions=config.reconcile_versions)
        else:
            hold = (config.forecast.lead_min + config.forecast.window_min) * PERIOD_S
            pc = AutoScalingActuator(clients.application_autoscaling, hold_s=hold,
                                     lambda_client=clients.lambda_)
        store: PlanStore = (SsmPlanStore(clients.ssm, config.state_prefix)
                            if config.state_prefix else MemoryPlanStore())
        return cls(metrics=CachingMetricsSource(CloudWatchMetricsSource(clients.cloudwatch)),
                   pc_actuator=pc,
                   ping_actuator=WarmPingActuator(clients.lambda_), store=store,
                   publisher=SsmLevelPublisher(clients.ssm), lambda_client=clients.lambda_)


def _log(level: int, **fields: Any) -> None:
    logger.log(level, json.dumps(fields, default=str, separators=(",", ":")))


def _account_limits(lambda_client: Any) -> tuple[int | None, int | None]:
    """(unreserved concurrency, account concurrency limit) or (None, None) when unavailable."""
    from botocore.exceptions import BotoCoreError, ClientError

    if lambda_client is None:
        return None, None
    try:
        limit = lambda_client.get_account_settings()["AccountLimit"]
    except (ClientError, BotoCoreError, KeyError) as exc:
        _log(logging.WARNING, tag="tool_unavailable", source="lambda:GetAccountSettings",
             message=f"account concurrency unknown, PC will not be raised: {exc}")
        return None, None
    return (int(limit.get("UnreservedConcurrentExecutions", 0)),
            int(limit.get("ConcurrentExecutions", 0)) or None)


def run_once(now_s: float, clients: WarmerClients | None, config: WarmerConfig, *,
             runtime: WarmerRuntime | None = None) -> list[WarmPlan]:
    """Plan and apply every managed alias once.

    Parameters
    ----------
    now_s : float
        Epoch seconds of this run (the caller's clock: Lambda's, or the local stack's scaled one).
    clients : WarmerClients or None
        Used to build a runtime when ``runtime`` is not given.
    config : WarmerConfig
    runtime : WarmerRuntime, optional
        Reuse between runs (keeps the ping schedule and plan cache).

    Returns
    -------
    list of WarmPlan
        One per alias, in config order. An alias whose actuation failed still gets its plan
        returned, but the plan is not saved as the last good one.

    Notes
    -----
    Faults never stop the run: metrics throttled or failed -> last good plan
    (``tool_unavailable``); metrics answered with no data point over the whole window -> zero
    traffic, planned toward the floor (the reason says so); plan store (SSM) unavailable ->
    planned without the stored plan (``tool_unavailable``); account settings unavailable -> PC
    not raised; actuator errors -> logged per alias.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    if runtime is None:
        if clients is None:
            raise ValueError("run_once needs clients or a runtime")
        runtime = WarmerRuntime.build(clients, config)
    unreserved: int | None
    account_limit: int | None
    if config.unreserved_concurrency is not None:  # fixed by config (local emulator)
        unreserved, account_limit = config.unreserved_concurrency, None
    else:
        unreserved, account_limit = _account_limits(runtime.lambda_client)
    spare = None if unreserved is None else unreserved - UNRESERVED_MINIMUM
    plans: list[WarmPlan] = []
    runtime.last_results = []
    start_s = now_s - config.history_min * PERIOD_S
    for policy in config.policies:
        try:
            previous = runtime.store.load(policy.function_name, policy.alias)
        except (ClientError, BotoCoreError) as exc:  # a store that does not guard itself
            _log(logging.WARNING, tag="tool_unavailable", source="plan_store", alias=policy.key,
                 message=f"last plan not loaded: {exc}; planning without it")
            previous = None
        series: MetricSeries | None = None
        forecast = None
        plans_warmth = policy.strategy in ("provisioned", "ping")
        idle: str | None = None
        if plans_warmth or policy.degradation_parameter:
            try:
                series = runtime.metrics.fetch(policy.function_name, policy.alias,
                                               start_s=start_s, end_s=now_s)
                if plans_warmth:
                    forecast = forecast_alias(series, issued_at_s=now_s, config=config.forecast)
                    idle = _idle_note(series)
            except MetricsUnavailable as exc:
                _log(logging.WARNING, tag="tool_unavailable", source="cloudwatch:GetMetricData",
                     alias=policy.key, message=f"{exc}; keeping the last good plan")
        current = previous.provisioned_concurrency if previous else 0
        headroom = None if spare is None else max(0, spare + current)
        plan = plan_alias(forecast, policy, config.planner, now_s=now_s, previous=previous,
                          headroom=headroom)
        if idle is not None:
            plan = replace(plan, reason=f"{idle}; {plan.reason}")
        if spare is not None:
            spare -= plan.provisioned_concurrency - current
        ok = True
        if not config.dry_run and policy.strategy in ("provisioned", "ping"):
            try:
                runtime.last_results.append(runtime.pc_actuator.apply(plan, now_s=now_s))
                if plan.action == "ping":
                    runtime.last_results.append(runtime.ping_actuator.apply(plan, now_s=now_s))
            except (ClientError, BotoCoreError, RuntimeError) as exc:
                ok = False
                _log(logging.ERROR, tag="tool_unavailable", source="actuator", alias=policy.key,
                     message=f"plan not applied: {exc}")
        if ok:
            try:
                runtime.store.save(plan)
            except (ClientError, BotoCoreError) as exc:
                _log(logging.WARNING, tag="tool_unavailable", source="ssm:PutParameter",
                     alias=policy.key, message=f"plan not saved: {exc}")
        _publish_level(runtime, policy, series, now_s, account_limit, config.dry_run)
        _log(logging.INFO, event="warm_plan", alias=plan.key, action=plan.action,
             provisioned_concurrency=plan.provisioned_concurrency,
             ping_concurrency=plan.ping_concurrency, hourly_cost_usd=round(plan.hourly_cost_usd, 4),
             fallback=plan.fallback, reason=plan.reason)
        plans.append(plan)
    return plans


def _idle_note(series: MetricSeries) -> str | None:
    """Why the plan heads for the floor when the whole window had no invocation, else None.

    CloudWatch answering with no data point at all is zero traffic, not an outage: Lambda
    sends metrics when a function finishes processing an event, so a function with no
    invocations publishes none (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics.html,
    https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html). A failed or
    throttled call raises ``MetricsUnavailable`` instead and keeps the last good plan.
    """
    inv = np.nan_to_num(series.invocations, nan=0.0)
    conc = np.nan_to_num(series.concurrency, nan=0.0)
    if series.is_empty or inv.any() or conc.any():  # all NaN: gaps, not evidence of zero
        return None
    return (f"zero traffic: no invocation in the {series.n_minutes}-minute window (CloudWatch "
            "answered with no data point; Lambda publishes none without invocations), "
            "planning toward the floor")


def _publish_level(runtime: WarmerRuntime, policy: Any, series: MetricSeries | None, now_s: float,
                   account_limit: int | None, dry_run: bool) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    if not policy.degradation_parameter or runtime.publisher is None or series is None:
        return
    available = policy.available_concurrency or account_limit
    if not available:
        return
    peak = series.concurrency[-3:]
    n = peak.shape[0]
    invocations = series.invocations[-n:]
    with np.errstate(invalid="ignore"):
        # Little's law: the minute's mean in flight; a minute without invocations has mean 0
        # (Lambda publishes no Duration for it)
        mean = np.where(invocations == 0, 0.0,
                        littles_law_concurrency(invocations, series.duration_ms[-n:]))
    starts = series.start_s + PERIOD_S * np.arange(series.n_minutes - n, series.n_minutes)
    samples = [(float(t), float(c) / available, float(m) / available)
               for t, c, m in zip(starts, peak, mean)]
    level = sustained_level(samples, now_s=series.end_s)
    if dry_run:
        return
    try:
        runtime.publisher.publish(policy.degradation_parameter, level)
    except (ClientError, BotoCoreError) as exc:
        _log(logging.WARNING, tag="tool_unavailable", source="ssm:PutParameter",
             alias=policy.key, message=f"degradation level not published: {exc}")
