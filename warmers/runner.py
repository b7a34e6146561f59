"""One warmer run: read the inputs, :func:`warmers.plan.run.plan_run`, :func:`apply`.

``run_once`` is what the scheduled Lambda (``warmers.handler``) and the local stack's timer both
call: :func:`collect_inputs` (I/O: the last good plans, the metrics, the account limits), then
the pure ``plan_run`` over every alias at once (``warmstart plan`` and the simulator call the
same function), then :func:`apply` (I/O: actuators, plan store, degradation levels). A dry run
(``WarmerConfig.dry_run``) stops after planning: nothing is applied, saved or published. Time
and clients are passed in; nothing here reads the clock or ``os.environ``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from warmers.actuators import (
    ActuationError,
    AutoScalingActuator,
    EndpointActuator,
    EndpointCapacityActuator,
    LambdaPCActuator,
    ManagedInstancesActuator,
    SageMakerCapacityActuator,
    SsmCapacityPublisher,
    WarmPingActuator,
)
from warmers.cloudwatch import (
    FLEET_WINDOW_MIN,
    CachingMetricsSource,
    CloudWatchFleetTimings,
    CloudWatchMetricsSource,
    CloudWatchOverflowAnswers,
    EndpointSpendPublisher,
)
from warmers.config import WarmerConfig
from warmers.endpoint_state import EndpointCapacity
from warmers.level_publisher import FLEET_REFRESH_S, SsmLevelPublisher, fleet_calibration
from warmers.plan.endpoint import EndpointPlan
from warmers.plan.policy import WarmPlan
from warmers.plan.run import AccountLimits, MetricsMissing, RunPlan, plan_run
from warmers.ports import (
    ActuationResult,
    ConcurrencyActuator,
    MetricsSource,
    MetricsUnavailable,
    OverflowAnswersSource,
)
from warmers.series import PERIOD_S, MetricSeries
from warmers.state import MemoryPlanStore, PlanStore, SsmPlanStore

logger = logging.getLogger("warmstart.warmer")


@dataclass
class WarmerClients:
    """boto3 clients of one warmer (injected; create them with ``endpoint_url`` locally)."""

    cloudwatch: Any
    lambda_: Any
    application_autoscaling: Any
    ssm: Any
    #: SageMaker control plane (what the overflow endpoint serves now); None: not asked
    sagemaker: Any = None

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
                   ssm=boto3.client("ssm", **kw), sagemaker=boto3.client("sagemaker", **kw))


@dataclass(frozen=True)
class Actuators:
    """What :func:`apply` makes true a plan with (Chalice's executor side; all I/O)."""

    pc: ConcurrencyActuator
    pings: WarmPingActuator
    store: PlanStore
    publisher: SsmLevelPublisher | None = None
    endpoint: EndpointActuator | None = None
    capacity_publisher: SsmCapacityPublisher | None = None
    #: the last capacity state of each endpoint (kept between runs)
    endpoint_states: dict[str, EndpointCapacity] = field(default_factory=dict)
    #: publishes each endpoint's EndpointSpendUnansweredUsd; None: not published
    spend_publisher: EndpointSpendPublisher | None = None
    #: sets strategy ``managed_instances`` aliases' MinExecutionEnvironments; None: planned only
    lmi: ManagedInstancesActuator | None = None


@dataclass
class WarmerRuntime:
    """Long-lived parts of a warmer (kept per execution environment between runs)."""

    metrics: MetricsSource
    pc_actuator: ConcurrencyActuator
    ping_actuator: WarmPingActuator
    store: PlanStore
    publisher: SsmLevelPublisher | None
    lambda_client: Any = None
    last_results: list[ActuationResult] = field(default_factory=list)
    #: the last run's plan (also in a dry run)
    last_run: RunPlan | None = None
    endpoint_actuator: EndpointActuator | None = None
    capacity_publisher: SsmCapacityPublisher | None = None
    endpoint_states: dict[str, EndpointCapacity] = field(default_factory=dict)
    #: the endpoints' overflow answers (the spend guard); None: not read, guard not applied
    answers: OverflowAnswersSource | None = None
    spend_publisher: EndpointSpendPublisher | None = None
    #: the fleet's stage timings, published with each level; None: the plain level only
    fleet: CloudWatchFleetTimings | None = None
    #: ``function:alias`` -> (epoch s of the read, its calibration or None): :func:`read_fleet`
    fleet_reads: dict[str, tuple[float, dict[str, Any] | None]] = field(default_factory=dict)
    #: Lambda Managed Instances scaling config (strategy ``managed_instances``)
    lmi_actuator: ManagedInstancesActuator | None = None

    @property
    def actuators(self) -> Actuators:
        return Actuators(pc=self.pc_actuator, pings=self.ping_actuator, store=self.store,
                         publisher=self.publisher, endpoint=self.endpoint_actuator,
                         capacity_publisher=self.capacity_publisher,
                         endpoint_states=self.endpoint_states,
                         spend_publisher=self.spend_publisher, lmi=self.lmi_actuator)

    @classmethod
    def build(cls, clients: WarmerClients, config: WarmerConfig) -> WarmerRuntime:
        """The runtime of ``config`` on ``clients``.

        Raises
        ------
        warmers.config.WarmerConfigError
            With ``endpoint_actuator`` ``sagemaker``, endpoints to plan and no SageMaker
            client (the endpoints could be neither set nor read).
        """
        if (config.endpoint_actuator == "sagemaker" and config.endpoints
                and clients.sagemaker is None):
            from warmers.config import WarmerConfigError

            raise WarmerConfigError("endpoint_actuator 'sagemaker' needs a SageMaker client "
                              "(WarmerClients.sagemaker) to set and read the endpoints")
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
                   publisher=SsmLevelPublisher(clients.ssm), lambda_client=clients.lambda_,
                   endpoint_actuator=(SageMakerCapacityActuator(clients.sagemaker)
                                      if config.endpoint_actuator == "sagemaker"
                                      and clients.sagemaker is not None else
                                      EndpointCapacityActuator(clients.application_autoscaling,
                                                               clients.sagemaker)),
                   capacity_publisher=SsmCapacityPublisher(clients.ssm),
                   answers=CloudWatchOverflowAnswers(clients.cloudwatch),
                   spend_publisher=EndpointSpendPublisher(clients.cloudwatch),
                   fleet=CloudWatchFleetTimings(clients.cloudwatch),
                   lmi_actuator=ManagedInstancesActuator(clients.lambda_))


def _log(level: int, **fields: Any) -> None:
    logger.log(level, json.dumps(fields, default=str, separators=(",", ":")))


@dataclass(frozen=True)
class InputFault:
    """A dependency that failed while the inputs were read (logged as ``tool_unavailable``)."""

    source: str
    alias: str | None
    message: str


@dataclass(frozen=True)
class RunInputs:
    """What :func:`warmers.plan.run.plan_run` needs besides the config and the time."""

    series: dict[str, MetricSeries | MetricsMissing]
    previous: dict[str, WarmPlan | None]
    account: AccountLimits
    faults: tuple[InputFault, ...] = ()
    previous_endpoints: dict[str, EndpointPlan | None] = field(default_factory=dict)
    #: overflow answers of each endpoint's agents in its spend guard's window (None: unknown)
    answered: dict[str, int | None] = field(default_factory=dict)


def account_limits(lambda_client: Any) -> tuple[AccountLimits, InputFault | None]:
    """The account's limits from ``GetAccountSettings``, or unknown (with the fault) when the
    call fails or there is no client."""
    from botocore.exceptions import BotoCoreError, ClientError

    if lambda_client is None:
        return AccountLimits.unknown("no Lambda client to ask GetAccountSettings"), None
    try:
        limit = lambda_client.get_account_settings()["AccountLimit"]
    except (ClientError, BotoCoreError, KeyError) as exc:
        return (AccountLimits.unknown(f"GetAccountSettings failed ({exc})"),
                InputFault("lambda:GetAccountSettings", None,
                           f"account concurrency unknown, PC will not be raised: {exc}"))
    return AccountLimits(int(limit.get("UnreservedConcurrentExecutions", 0)),
                         int(limit.get("ConcurrentExecutions", 0)) or None,
                         "GetAccountSettings"), None


def collect_inputs(now_s: float, config: WarmerConfig, *, metrics: MetricsSource,
                   store: PlanStore, account: AccountLimits,
                   history_start_s: float | None = None,
                   answers: OverflowAnswersSource | None = None) -> RunInputs:
    """Read the last good plan of every alias and the metrics of those that need them.

    Parameters
    ----------
    now_s : float
        Epoch seconds of the run; metrics are read over ``[history_start_s, now_s)``.
    config : WarmerConfig
    metrics : MetricsSource
    store : PlanStore
    account : AccountLimits
        Already read (:func:`account_limits`) or given.
    history_start_s : float, optional
        Default ``now_s - config.history_min`` minutes.
    answers : OverflowAnswersSource, optional
        Where each endpoint's overflow answers over its ``spend_guard_window_min`` up to
        ``now_s`` are read (the spend guard); None: not read (unknown).

    Returns
    -------
    RunInputs
        A throttled or failed source becomes ``MetricsMissing`` for that alias (and a fault);
        a plan store that raises becomes "no previous plan" (and a fault); overflow answers
        that cannot be read are unknown (and a fault: the guard is not applied). Nothing is
        raised.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    start_s = now_s - config.history_min * PERIOD_S if history_start_s is None \
        else history_start_s
    series: dict[str, MetricSeries | MetricsMissing] = {}
    previous: dict[str, WarmPlan | None] = {}
    faults: list[InputFault] = []
    overflowing = {key for endpoint in config.endpoints for key in endpoint.agents}
    previous_endpoints: dict[str, EndpointPlan | None] = {}
    for endpoint in config.endpoints:
        try:
            previous_endpoints[endpoint.endpoint_name] = store.load_endpoint(
                endpoint.endpoint_name)
        except (ClientError, BotoCoreError) as exc:
            faults.append(InputFault("plan_store", endpoint.endpoint_name,
                                     f"last endpoint plan not loaded: {exc}; planning without it"))
            previous_endpoints[endpoint.endpoint_name] = None
    answered: dict[str, int | None] = {}
    for endpoint in config.endpoints:
        answered[endpoint.endpoint_name] = None
        if answers is None:
            continue
        try:
            answered[endpoint.endpoint_name] = answers.answered(
                endpoint, start_s=now_s - endpoint.spend_guard_window_min * PERIOD_S,
                end_s=now_s)
        except MetricsUnavailable as exc:
            faults.append(InputFault("cloudwatch:GetMetricData", endpoint.endpoint_name,
                                     f"{' '.join(str(exc).split())}; overflow answers unknown, "
                                     "spend guard not applied"))
    for policy in config.policies:
        try:
            previous[policy.key] = store.load(policy.function_name, policy.alias)
        except (ClientError, BotoCoreError) as exc:  # a store that does not guard itself
            faults.append(InputFault("plan_store", policy.key,
                                     f"last plan not loaded: {exc}; planning without it"))
            previous[policy.key] = None
        if not (policy.needs_metrics or policy.key in overflowing):
            continue
        try:
            series[policy.key] = metrics.fetch(policy.function_name, policy.alias,
                                               start_s=start_s, end_s=now_s)
        except MetricsUnavailable as exc:
            reason = " ".join(str(exc).split())
            series[policy.key] = MetricsMissing(reason)
            faults.append(InputFault("cloudwatch:GetMetricData", policy.key,
                                     f"{reason}; keeping the last good plan"))
    return RunInputs(series, previous, account, tuple(faults), previous_endpoints, answered)


def plan_now(now_s: float, config: WarmerConfig, runtime: WarmerRuntime) -> RunPlan:
    """Read the inputs through ``runtime`` and plan the run (nothing applied)."""
    if config.unreserved_concurrency is not None:  # fixed by config (local emulator)
        account = AccountLimits(config.unreserved_concurrency, None,
                                "WarmerConfig.unreserved_concurrency")
        fault = None
    else:
        account, fault = account_limits(runtime.lambda_client)
    inputs = collect_inputs(now_s, config, metrics=runtime.metrics, store=runtime.store,
                            account=account, answers=runtime.answers)
    for f in (*(() if fault is None else (fault,)), *inputs.faults):
        extra = {} if f.alias is None else {"alias": f.alias}
        _log(logging.WARNING, tag="tool_unavailable", source=f.source, message=f.message,
             **extra)
    return plan_run(inputs.series, inputs.previous, inputs.account, config, now_s,
                    previous_endpoints=inputs.previous_endpoints,
                    endpoint_answers=inputs.answered)


def read_fleet(now_s: float, config: WarmerConfig, fleet: CloudWatchFleetTimings | None,
               reads: dict[str, tuple[float, dict[str, Any] | None]] | None = None,
               ) -> dict[str, dict[str, Any]]:
    """The fleet calibration of every alias that publishes a degradation level.

    One ``GetMetricData`` per such alias (:class:`warmers.cloudwatch.CloudWatchFleetTimings`),
    at most once per :data:`warmers.level_publisher.FLEET_REFRESH_S` when ``reads`` keeps the last
    ones (a 60-minute p95 moves little in a minute; each metric requested is priced: 7 per
    alias per read, read every 5 minutes instead of every minute);
    an alias whose environments measured nothing in the window gets none (its handlers keep
    their seeds), and one whose read fails is logged as ``tool_unavailable`` and gets none (the
    plain level is published; the handlers' last fleet numbers age out).

    Returns
    -------
    dict
        ``function:alias`` -> version-1 calibration document (`warmers.level_publisher.fleet_calibration`).
    """
    out: dict[str, dict[str, Any]] = {}
    if fleet is None:
        return out
    for policy in config.policies:
        if not policy.degradation_parameter:
            continue
        last = None if reads is None else reads.get(policy.key)
        if last is not None and 0.0 <= now_s - last[0] < FLEET_REFRESH_S:
            if last[1] is not None:
                out[policy.key] = last[1]
            continue
        try:
            timings = fleet.read(policy.function_name, policy.alias, policy.memory_mb,
                                 now_s=now_s)
        except MetricsUnavailable as exc:
            _log(logging.WARNING, tag="tool_unavailable", source="cloudwatch:GetMetricData",
                 alias=policy.key, message=f"fleet timings not read: {exc}; the level is "
                                           "published alone")
            continue
        doc = fleet_calibration(policy.key, policy.memory_mb, timings.stage_p95_ms,
                                timings.overflow_p95_ms, now_s=now_s,
                                window_min=FLEET_WINDOW_MIN)
        if reads is not None:
            reads[policy.key] = (now_s, doc)
        if doc is not None:
            out[policy.key] = doc
    return out


def apply(run_plan: RunPlan, actuators: Actuators, *,
          calibrations: dict[str, dict[str, Any]] | None = None) -> list[ActuationResult]:
    """Make ``run_plan`` true: actuate each alias, save its plan, publish its level.

    Parameters
    ----------
    run_plan : RunPlan
    actuators : Actuators
    calibrations : dict, optional
        ``function:alias`` -> fleet calibration published with the alias's level
        (:func:`read_fleet`); an alias not in it gets the plain level.

    Returns
    -------
    list of ActuationResult
        What the actuators did, in alias order.

    Notes
    -----
    One alias's fault never stops the others. The actuators retry throttling and conflicts
    (botocore's standard mode, ``warmers.retry.call_with_retries``); when the retries are spent
    the alias's plan is not saved as the last good one (the next run plans from the one before)
    and ``tool_unavailable`` is logged. A plan store or level publisher that fails is logged the
    same way. Then each endpoint (:func:`apply_endpoints`) and its spend-guard metric
    (:func:`publish_spend`).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    now_s = run_plan.issued_at_s
    results: list[ActuationResult] = []
    for entry in run_plan.aliases:
        plan = entry.plan
        ok = True
        if entry.actuates:
            try:
                results.append(actuators.pc.apply(plan, now_s=now_s))
                if plan.action == "ping":
                    results.append(actuators.pings.apply(plan, now_s=now_s))
            except (ClientError, BotoCoreError, RuntimeError) as exc:
                ok = False
                _log(logging.ERROR, tag="tool_unavailable", source="actuator", alias=entry.key,
                     message=f"plan not applied: {exc}")
        elif plan.action == "managed_instances" and actuators.lmi is not None:
            # refused or throttled past the retries: not saved as the last good plan, as above
            try:
                results.append(actuators.lmi.apply(plan, now_s=now_s))
            except (ActuationError, ClientError, BotoCoreError) as exc:
                ok = False
                _log(logging.ERROR, tag="tool_unavailable",
                     source="lambda:PutFunctionScalingConfig", alias=entry.key,
                     message=f"plan not applied: {exc}")
                results.append(ActuationResult(entry.key, False, f"not applied: {exc}"))
        if ok:
            try:
                actuators.store.save(plan)
            except (ClientError, BotoCoreError) as exc:
                _log(logging.WARNING, tag="tool_unavailable", source="ssm:PutParameter",
                     alias=entry.key, message=f"plan not saved: {exc}")
        if (entry.degradation_parameter and entry.degradation_level is not None
                and actuators.publisher is not None):
            try:
                actuators.publisher.publish(
                    entry.degradation_parameter, entry.degradation_level,  # type: ignore[arg-type]
                    calibration=(calibrations or {}).get(entry.key), now_s=now_s)
            except (ClientError, BotoCoreError) as exc:
                _log(logging.WARNING, tag="tool_unavailable", source="ssm:PutParameter",
                     alias=entry.key, message=f"degradation level not published: {exc}")
    results += apply_endpoints(run_plan, actuators)
    publish_spend(run_plan, actuators.spend_publisher)
    return results


def publish_spend(run_plan: RunPlan, publisher: EndpointSpendPublisher | None) -> None:
    """Publish each endpoint's ``EndpointSpendUnansweredUsd`` (the construct's alarm reads it).

    A throttled or refused ``PutMetricData`` is logged as ``tool_unavailable`` and not raised.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    if publisher is None or not run_plan.endpoints:
        return
    try:
        publisher.publish([entry.plan for entry in run_plan.endpoints])
    except (ClientError, BotoCoreError) as exc:
        _log(logging.WARNING, tag="tool_unavailable", source="cloudwatch:PutMetricData",
             message=f"endpoint spend metric not published: {exc}")


def apply_endpoints(run_plan: RunPlan, actuators: Actuators) -> list[ActuationResult]:
    """Set each endpoint's capacity, save its plan, publish what serves.

    A scaling call throttled or refused once the retries are spent keeps the last capacity:
    the plan is not saved as the last good one, ``tool_unavailable`` is logged and the state
    published is ``unknown`` (the handlers then degrade instead of overflowing). Without an
    endpoint actuator (a runtime built by hand) endpoints are planned only.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    results: list[ActuationResult] = []
    if actuators.endpoint is None:
        return results
    for entry in run_plan.endpoints:
        name = entry.key
        result, state = actuators.endpoint.apply(entry.plan, entry.policy,
                                                 now_s=run_plan.issued_at_s,
                                                 last=actuators.endpoint_states.get(name))
        results.append(result)
        actuators.endpoint_states[name] = state
        if result.applied:
            try:
                actuators.store.save_endpoint(entry.plan)
            except (ClientError, BotoCoreError) as exc:
                _log(logging.WARNING, tag="tool_unavailable", source="ssm:PutParameter",
                     endpoint=name, message=f"endpoint plan not saved: {exc}")
        else:
            _log(logging.ERROR, tag="tool_unavailable",
                 source=("sagemaker" if isinstance(actuators.endpoint, SageMakerCapacityActuator)
                         else "application-autoscaling"),
                 endpoint=name, message=result.detail)
        parameter = entry.policy.capacity_parameter
        if parameter and actuators.capacity_publisher is not None:
            try:
                actuators.capacity_publisher.publish(parameter, state)
            except (ClientError, BotoCoreError) as exc:
                _log(logging.WARNING, tag="tool_unavailable", source="ssm:PutParameter",
                     endpoint=name, message=f"overflow capacity not published: {exc}")
    return results


def run_once(now_s: float, clients: WarmerClients | None, config: WarmerConfig, *,
             runtime: WarmerRuntime | None = None) -> list[WarmPlan]:
    """Plan every managed alias at once (:func:`plan_now`), then :func:`apply` unless dry run.

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
        One per alias, in config order (``runtime.last_run`` holds the whole ``RunPlan``). An
        alias whose actuation failed still gets its plan returned, but the plan is not saved as
        the last good one.

    Notes
    -----
    Faults never stop the run: metrics throttled or failed -> last good plan
    (``tool_unavailable``); metrics answered with no data point over the whole window -> zero
    traffic, planned toward the floor (the reason says so); plan store (SSM) unavailable ->
    planned without the stored plan (``tool_unavailable``); account settings unavailable -> PC
    not raised; actuator errors -> logged per alias.
    """
    if runtime is None:
        if clients is None:
            raise ValueError("run_once needs clients or a runtime")
        runtime = WarmerRuntime.build(clients, config)
    run_plan = plan_now(now_s, config, runtime)
    runtime.last_run = run_plan
    runtime.last_results = [] if config.dry_run else apply(
        run_plan, runtime.actuators,
        calibrations=read_fleet(now_s, config, runtime.fleet, runtime.fleet_reads))
    for plan in run_plan.plans:
        _log(logging.INFO, event="warm_plan", alias=plan.key, action=plan.action,
             provisioned_concurrency=plan.provisioned_concurrency,
             ping_concurrency=plan.ping_concurrency, hourly_cost_usd=round(plan.hourly_cost_usd, 4),
             fallback=plan.fallback, dry_run=config.dry_run, reason=plan.reason)
    for entry in run_plan.endpoints:
        state = runtime.endpoint_states.get(entry.key)
        _log(logging.INFO, event="endpoint_plan", endpoint=entry.key,
             capacity=entry.plan.capacity, pays=entry.plan.pays,
             hourly_cost_usd=round(entry.plan.hourly_cost_usd, 4),
             state=None if state is None else state.state, dry_run=config.dry_run,
             window_spend_usd=round(entry.plan.window_spend_usd, 4),
             answered_in_window=entry.plan.answered_in_window, reason=entry.plan.reason)
    return run_plan.plans
