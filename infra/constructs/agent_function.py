"""One agent's function: function + layers + version + alias ``live`` + warm strategy + alarms.

The stack makes one per entry of ``warmstart.agents`` (construct ``Agent-<name>``, so the
function's CDK path is ``<Stack>/Agent-<name>/Function/Resource``), each with its own role, log
group, degradation-level SSM parameter (``/warmstart/<name>/degradation-level`` by default) and
environment (``WARMSTART_AGENT_NAME``, ``POWERTOOLS_SERVICE_NAME`` = the name,
``WARMSTART_BASE_PATH`` = the path prefix unless it is ``/``, ``WARMSTART_SLA_MS``, then the
agent's own ``environment``).

Strategy (``AgentConfig.strategy``):

- ``snapstart``: ``SnapStart: {ApplyOn: PublishedVersions}`` on the function; the alias points at
  the published version, so every invocation through ``live`` is served from a snapshot restore
  or a warm execution environment.
- ``provisioned``: provisioned concurrency on the alias ``live`` (never ``$LATEST``, never the
  unqualified function) plus an Application Auto Scaling scalable target on the alias with target
  tracking on ``LambdaProvisionedConcurrencyUtilization``. The warmer moves the target's minimum
  ahead of forecast load; target tracking reacts above it.
- ``ping`` / ``none``: plain on-demand (the warmer sends warm pings for ``ping``).
- ``managed_instances``: Lambda Managed Instances (`infra.constructs.managed_instances`): the
  function on a capacity provider (created here with the agent's subnets and security groups,
  or an existing one by ARN), the published version with the configured minimum and maximum
  execution environments, the alias ``live`` on that version; the warmer moves the version's
  minimum ahead of the forecast (``PutFunctionScalingConfig``).

**Streaming** (an agent whose declaration has a ``stream=True`` route, see
`infra.constructs.declaration`): a function URL on the alias ``live`` (the alias with the
provisioned concurrency or the SnapStart version, which the warmer manages), ``InvokeMode:
RESPONSE_STREAM``, ``AuthType: AWS_IAM``; ``AWS_LAMBDA_EXEC_WRAPPER`` starts the toolkit's
streaming runtime client (``functions/runtime/warmstart-stream``); an alarm on the p95 of the
toolkit's ``TimeToFirstTokenMs`` above the strictest first-token SLA. The HTTP API route stays:
a buffered caller gets the whole stream collected. An agent without a streaming route is
synthesized exactly as before.

*Why AWS_IAM, whatever ``http_api.authorization`` says.* A function URL knows only ``AWS_IAM``
or ``NONE``: it cannot check the HTTP API's JWTs, and ``NONE`` would be a public endpoint
outside the stage throttle (a function URL has none; only reserved concurrency bounds it), each
request billed for the whole stream. So callers sign: SigV4, service ``lambda``, the region's
credentials of a principal named in ``function_url_principals`` (default: this account's IAM
principals whose policies allow it), e.g. ``botocore.auth.SigV4Auth(credentials, "lambda",
region)`` over the request, or ``awscurl --service lambda``. Each principal needs
``lambda:InvokeFunctionUrl`` and, for function URLs created since October 2025,
``lambda:InvokeFunction`` (condition ``lambda:InvokedViaFunctionUrl``): both are granted on
the alias. A CloudFront distribution with origin access control in front (browsers, custom
domain) is not deployed here.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html
https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html
https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html (250 MB unzipped)
https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html
https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html
https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html (signing with SigV4)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from functions.runtime.contract import environment as names
from infra.config import (
    EXEC_WRAPPER_ENV,
    RUNTIME_PACKAGE,
    STREAM_EXEC_WRAPPER,
    STREAM_LIMITS_BYTES,
    AgentConfig,
    AlarmConfig,
    check_streaming_agent,
)
from infra.constructs.bundling import REPO_ROOT, BundlingError, describe_sizes, mb
from infra.constructs.dashboard import TIME_TO_FIRST_TOKEN_METRIC
from infra.constructs.declaration import AgentDeclaration
from infra.constructs.layers import architecture_for, function_code, runtime_for
from infra.constructs.managed_instances import (
    ManagedCapacity,
    acknowledge_operator_role,
    put_on_capacity_provider,
    version_options,
)
from infra.constructs.nag import acknowledge

#: Lambda's limit on a function and all its layers, unzipped.
UNZIPPED_LIMIT_BYTES: Final = 250 * 1024 * 1024
ALIAS_NAME: Final = "live"
METRICS_NAMESPACE: Final = "Warmstart"
#: The wrapper script in the code asset (``/var/task/...``, :data:`STREAM_EXEC_WRAPPER`).
STREAM_WRAPPER_FILE: Final = f"{RUNTIME_PACKAGE}/warmstart-stream"


def check_stream_wrapper(code_root: Path = REPO_ROOT) -> Path:
    """The streaming wrapper script under ``code_root``, which must be an executable file.

    Lambda's runtime runs ``AWS_LAMBDA_EXEC_WRAPPER`` as a program: a copy without its
    executable bit (a checkout with ``core.fileMode=false``, a zip tool that drops modes) fails
    every init with a permission error. The code asset keeps the mode (``shutil.copy2``, and the
    CDK CLI zips each file with its mode).

    Raises
    ------
    BundlingError
        Missing, or not executable; the message says ``chmod +x``.
    """
    import os

    path = code_root / STREAM_WRAPPER_FILE
    if not path.is_file():
        raise BundlingError(f"{STREAM_WRAPPER_FILE}: the streaming runtime wrapper is missing under "
                            f"{code_root}; a streaming agent needs it (AWS_LAMBDA_EXEC_WRAPPER)")
    if not os.access(path, os.X_OK):
        raise BundlingError(f"{STREAM_WRAPPER_FILE} is not executable: run `chmod +x {path}` (and "
                            "`git update-index --chmod=+x` on it); Lambda runs it as a program")
    return path


def agent_construct_id(name: str) -> str:
    """``Agent-<name>``: the construct id (and CDK path segment) of agent ``name``'s function."""
    return f"Agent-{name}"


def output_prefix(name: str) -> str:
    """``order_lookup`` -> ``OrderLookup``: the prefix of the agent's stack outputs."""
    return "".join(word.capitalize() for word in name.split("_"))


class PackageTooLargeError(ValueError):
    """Function code plus layers exceed Lambda's 250 MB unzipped limit."""


def check_unzipped_size(sizes: Sequence[tuple[str, int | None]], *, limit_bytes: int = UNZIPPED_LIMIT_BYTES) -> int | None:
    """Sum the measured sizes and refuse a total above Lambda's unzipped limit.

    Parameters
    ----------
    sizes : sequence of (name, bytes or None)
        Function code and each layer; ``None`` means not built (bundling skipped).
    limit_bytes : int
        250 MB (262,144,000 bytes) by default.

    Returns
    -------
    int or None
        The total in bytes, or ``None`` if any part was not built.

    Raises
    ------
    PackageTooLargeError
        If the total exceeds ``limit_bytes``; the message lists each part in MB.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
    """
    if any(size is None for _, size in sizes):
        return None
    measured = [(name, int(size)) for name, size in sizes if size is not None]
    total = sum(size for _, size in measured)
    if total > limit_bytes:
        raise PackageTooLargeError(
            f"function code and layers take {mb(total):.1f} MB unzipped, over Lambda's "
            f"{mb(limit_bytes):.0f} MB limit by {mb(total - limit_bytes):.1f} MB "
            f"({describe_sizes(measured)}); shrink a layer (pip --no-deps, drop unused packages) "
            "or ship the model in a container image. "
            "See https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
        )
    return total


def admission_calibration(agent: AgentConfig, code_root: Path = REPO_ROOT) -> str | None:
    """``WARMSTART_CALIBRATION`` of ``agent``: its calibration file as compact JSON.

    The file is ``agent.calibration`` (relative to ``code_root``), else
    ``calibration/<name>.json`` when it exists; ``None`` when there is none (the function then
    starts from the seeds and logs ``calibration_missing``). The ``method`` text is dropped
    (Lambda's environment variables share 4 KB,
    https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).

    Raises
    ------
    StackConfigError
        The named file is missing, or the document is malformed, of another agent or of
        another memory size (the message names ``warmstart.agents.<name>.calibration``).
    """
    from functions.runtime.contract.calibration_document import CalibrationError, parse_calibration
    from infra.config import StackConfigError

    field = f"warmstart.agents.{agent.name}.calibration"
    path = code_root / (agent.calibration or f"calibration/{agent.name}.json")
    if not path.is_file():
        if agent.calibration is not None:
            raise StackConfigError(f"{field}: {agent.calibration!r} does not exist; run `warmstart "
                              f"calibrate --agent {agent.name} --out {agent.calibration}`")
        return None
    text = path.read_text(encoding="utf-8")
    try:
        cal = parse_calibration(text)
    except CalibrationError as exc:
        raise StackConfigError(f"{field}: {path.relative_to(code_root)} is not a calibration: {exc}") from exc
    if cal.agent != agent.name or cal.memory_mb != agent.memory_mb:
        raise StackConfigError(
            f"{field}: {path.relative_to(code_root)} was measured for agent {cal.agent!r} at "
            f"{cal.memory_mb} MB, this agent is {agent.name!r} at {agent.memory_mb} MB; run "
            f"`warmstart calibrate --agent {agent.name}` again")
    import json

    doc = {k: v for k, v in json.loads(text).items() if k != "method"}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


class AgentFunction(Construct):
    """One agent's Lambda function with its alias ``live`` and its warm strategy.

    Parameters
    ----------
    agent : AgentConfig
        Name, handler, code folders, runtime, memory, timeout, strategy, provisioned-concurrency
        bounds, SLA, path prefix, environment and degradation parameter.
    alarms : AlarmConfig
        Thresholds for the alarms on the alias.
    layers : sequence of (name, LayerVersion, unzipped bytes or None)
        Layers in order; their sizes and the code's are checked against the 250 MB limit.
    environment : Mapping[str, str]
        Stack-wide variables (``WARMSTART_DEBUG_RESOURCE``, ``WARMSTART_MODEL_DIR`` when the
        model layer is shipped); the agent's own ``environment`` is applied over them.
    code_root : Path
        Repository root the agent's ``code`` folders are relative to.
    log_key : aws_kms.IKey, optional
        Customer-managed key of the function's log group (``warmstart.logs.kms_key``).
    declaration : AgentDeclaration, optional
        The agent's declared routes (`infra.constructs.declaration.read_declaration`); one
        with a streaming route makes a streaming agent (see the module docstring). None: not
        streaming.
    function_url_principals : sequence of aws_iam.IPrincipal, optional
        Who may invoke a streaming agent's function URL; empty: this account
        (``AccountRootPrincipal``).

    Attributes
    ----------
    function : aws_lambda.Function
    version : aws_lambda.Version
        The published version behind the alias.
    alias : aws_lambda.Alias
        ``live``: what the HTTP API, the warmer and callers invoke.
    role : aws_iam.Role
    log_group : aws_logs.LogGroup
    degradation_parameter : aws_ssm.StringParameter
    scalable_target : aws_applicationautoscaling.ScalableTarget or None
        On the alias; only for strategy ``provisioned``.
    capacity : infra.constructs.managed_instances.ManagedCapacity or None
        The capacity provider the function runs on; only for strategy ``managed_instances``.
    alarms : dict[str, aws_cloudwatch.Alarm]
        ``errors``, ``throttles``, ``duration_p99``, for ``provisioned`` ``spillover``. A
        streaming agent has ``first_token_p95`` (p95 of ``TimeToFirstTokenMs`` above its
        strictest first-token SLA) and ``duration_p99`` only when ``alarms.duration_p99_ms`` is
        set: its Duration is the length of its streams, which its SLA does not bound.
    function_url : aws_lambda.FunctionUrl or None
        The streaming agent's URL on the alias ``live``; None for the others.
    first_token_ms : float or None
        A streaming agent's strictest first-token SLA (its alarm threshold), ms.
    unzipped_size_bytes : int or None
        Code plus layers, measured; ``None`` when the stack skips bundling.
    size_breakdown : list of (name, bytes or None)

    Raises
    ------
    PackageTooLargeError
        If code plus layers exceed 250 MB unzipped.
    infra.constructs.bundling.BundlingError
        If a ``code`` folder is missing (the message names ``warmstart.agents.<name>.code``),
        or, bundling on, a streaming agent's wrapper script is missing or not executable.
    infra.config.StackConfigError
        A streaming agent `infra.config.check_streaming_agent` refuses.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        agent: AgentConfig,
        alarms: AlarmConfig,
        layers: Sequence[tuple[str, lambda_.ILayerVersion, int | None]],
        environment: Mapping[str, str],
        code_root: Path = REPO_ROOT,
        log_key: kms.IKey | None = None,
        declaration: AgentDeclaration | None = None,
        function_url_principals: Sequence[iam.IPrincipal] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.agent = agent
        self.declaration = declaration
        streams = declaration is not None and declaration.streams
        self.first_token_ms = declaration.strictest_first_token_ms if streams else None  # type: ignore[union-attr]
        if streams:
            check_streaming_agent(agent, declaration.first_token_sla_ms)  # type: ignore[union-attr]
            if cdk.Stack.of(scope).bundling_required:  # what the asset will hold
                check_stream_wrapper(code_root)

        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=retention(agent.log_retention_days),
            encryption_key=log_key,
        )
        # Own role, no managed policy: write to this log group only (+ grants added by the stack).
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"warmstart agent {agent.name}: function execution role",
        )
        self.log_group.grant_write(self.role)

        self.degradation_parameter = ssm.StringParameter(
            self,
            "DegradationLevel",
            parameter_name=agent.degradation_parameter,
            string_value="L0",
            description=f"warmstart degradation level (L0..L3) of agent {agent.name}, written by the "
                        "warmer, read by the agent",
        )
        self.degradation_parameter.grant_read(self.role)

        code, self.code_bundler = function_code(agent.code, agent=agent.name, root=code_root,
                                                handler=agent.handler, runtime=agent.runtime,
                                                architecture=agent.architecture)
        deploy_env = {
            names.ENV_AGENT_NAME: agent.name,
            "POWERTOOLS_SERVICE_NAME": agent.name,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            names.ENV_SLA_MS: str(agent.sla_ms),
            names.ENV_DEGRADATION_PARAMETER: agent.degradation_parameter,
        }
        if agent.base_path is not None:
            deploy_env[names.ENV_BASE_PATH] = agent.base_path
        calibration = admission_calibration(agent, code_root)
        #: the admission calibration this function starts from (compact JSON) or None: the
        #: warmer's endpoint planner reads the agent's measured cold start from it
        self.calibration_json = calibration
        if calibration is not None:
            deploy_env[names.ENV_CALIBRATION] = calibration
        if streams:
            deploy_env[EXEC_WRAPPER_ENV] = STREAM_EXEC_WRAPPER
        self.function = lambda_.Function(
            self,
            "Function",
            code=code,
            handler=agent.handler,
            runtime=runtime_for(agent.runtime),
            architecture=architecture_for(agent.architecture),
            memory_size=agent.memory_mb,
            timeout=cdk.Duration.seconds(agent.timeout_s),
            layers=[layer for _, layer, _ in layers],
            role=self.role,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if agent.snapstart else None,
            # None: no reservation (the account's unreserved pool); validated by infra/config.py
            reserved_concurrent_executions=agent.reserved_concurrency,
            environment={**deploy_env, **environment, **agent.environment},
            description=f"warmstart agent {agent.name} ({agent.strategy})",
            # LMI: the published version's min/max execution environments; None otherwise
            current_version_options=version_options(agent),
        )
        self.capacity: ManagedCapacity | None = None
        if agent.on_managed_instances:
            self.capacity = put_on_capacity_provider(self, function=self.function, agent=agent)
            acknowledge_operator_role(self.capacity, agent)
        # CDK makes the function depend on its role and the role's policy; the role dependency is
        # already implied by GetAtt Role.Arn (cfn-lint W3005). Keep only the policy: the function
        # must not start before its permissions are attached.
        policy = self.role.node.find_child("DefaultPolicy").node.default_child
        self.function.node.default_child.add_override(  # type: ignore[union-attr]
            "DependsOn", [cdk.Stack.of(self).get_logical_id(policy)]  # type: ignore[arg-type]
        )
        if agent.snapstart:
            cdk.Annotations.of(self.function).acknowledge_warning(
                "@aws-cdk/aws-lambda:snapStartRequirePublish",
                "a version is published (function.current_version) and the alias live points at it",
            )
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            f"The runtime is pinned on purpose by warmstart.agents.{agent.name}.runtime ({agent.runtime}): the layers "
            "are pip-installed for exactly that CPython (cp wheels for its --python-version), so a newer "
            "runtime is a config change plus a layer rebuild, never a silent upgrade.",
        )

        self.size_breakdown: list[tuple[str, int | None]] = [
            ("function code", _code_size(self.function)),
            *[(f"layer {name}", size) for name, _, size in layers],
        ]
        self.unzipped_size_bytes = check_unzipped_size(self.size_breakdown)
        if self.unzipped_size_bytes is not None:
            cdk.Annotations.of(self).add_info(
                f"unzipped size {mb(self.unzipped_size_bytes):.1f} MB of Lambda's "
                f"{mb(UNZIPPED_LIMIT_BYTES):.0f} MB ({describe_sizes(self.size_breakdown)})"  # type: ignore[arg-type]
            )

        self.version = self.function.current_version
        pc = agent.provisioned_concurrency if agent.strategy == "provisioned" else None
        self.alias = lambda_.Alias(
            self,
            "Alias",
            alias_name=ALIAS_NAME,
            version=self.version,
            provisioned_concurrent_executions=pc.min if pc else None,
            description=f"agent {agent.name}: what callers invoke, a published version",
        )

        self.scalable_target: appscaling.ScalableTarget | None = None
        if pc is not None:
            scaling = self.alias.add_auto_scaling(min_capacity=pc.min, max_capacity=pc.max)
            scaling.scale_on_utilization(utilization_target=pc.target_utilization)
            self.scalable_target = self.alias.node.find_child("AliasScaling").node.find_child("Target")  # type: ignore[assignment]

        self.function_url: lambda_.FunctionUrl | None = None
        if streams:
            self.function_url = self._streaming_url(function_url_principals)
        self.alarms = self._alarms(alarms, with_spillover=pc is not None)

    def _streaming_url(self, principals: Sequence[iam.IPrincipal]) -> lambda_.FunctionUrl:
        """The function URL on the alias ``live`` (streaming, IAM) and who may invoke it."""
        from infra.local.spec import HTTP_API_INTEGRATION_TIMEOUT_S

        buffered_mb, streamed_mb = (mb(n) for n in STREAM_LIMITS_BYTES)
        cdk.Annotations.of(self).add_info(
            f"agent {self.agent.name} streams: its function URL on alias {ALIAS_NAME} streams up to "
            f"{streamed_mb:.0f} MB for up to {self.agent.timeout_s} s; its HTTP API route answers "
            f"buffered callers with the whole stream, within {buffered_mb:.0f} MB and the HTTP "
            f"API's {HTTP_API_INTEGRATION_TIMEOUT_S:g} s integration timeout "
            "(https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html)")
        url = self.alias.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM,
                                          invoke_mode=lambda_.InvokeMode.RESPONSE_STREAM)
        # each principal: lambda:InvokeFunctionUrl (FunctionUrlAuthType AWS_IAM) and
        # lambda:InvokeFunction (InvokedViaFunctionUrl), on the alias (docs: urls-auth.html)
        for principal in principals or (iam.AccountRootPrincipal(),):
            url.grant_invoke_url(principal)
        return url

    @property
    def name(self) -> str:
        """The agent's name."""
        return self.agent.name

    def _alarms(self, cfg: AlarmConfig, *, with_spillover: bool) -> dict[str, cloudwatch.Alarm]:
        period = cdk.Duration.seconds(cfg.period_s)
        duration_ms = cfg.duration_threshold_ms(self.agent)

        def alarm(name: str, metric: cloudwatch.IMetric, threshold: float, what: str,
                  operator: cloudwatch.ComparisonOperator) -> cloudwatch.Alarm:
            return cloudwatch.Alarm(
                self,
                f"{name}Alarm",
                metric=metric,
                threshold=threshold,
                comparison_operator=operator,
                evaluation_periods=cfg.evaluation_periods,
                datapoints_to_alarm=cfg.datapoints_to_alarm,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"warmstart agent {self.agent.name}, alias {ALIAS_NAME}: {what}",
            )

        gte = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        made = {
            "errors": alarm("Errors", self.alias.metric_errors(period=period, statistic="Sum"),
                            cfg.errors_threshold, f"errors >= {cfg.errors_threshold} per {cfg.period_s} s", gte),
            "throttles": alarm("Throttles", self.alias.metric_throttles(period=period, statistic="Sum"),
                               cfg.throttles_threshold,
                               f"throttles >= {cfg.throttles_threshold} per {cfg.period_s} s", gte),
        }
        # A streaming agent's Duration is its streams' whole length, not a latency: its SLA
        # alarm is the first token's (below); a Duration alarm only when alarms.duration_p99_ms
        # names a threshold for it.
        if self.first_token_ms is None or cfg.duration_p99_ms is not None:
            made["duration_p99"] = alarm(
                "DurationP99",
                self.alias.metric_duration(period=period, statistic="p99"),
                duration_ms,
                f"p99 duration above {duration_ms} ms"
                + (" (the SLA)" if duration_ms == self.agent.sla_ms else ""),
                cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            )
        if self.first_token_ms is not None:
            first_token = cloudwatch.Metric(
                namespace=METRICS_NAMESPACE, metric_name=TIME_TO_FIRST_TOKEN_METRIC,
                dimensions_map={"service": self.agent.name}, period=period, statistic="p95")
            made["first_token_p95"] = alarm(
                "TimeToFirstTokenP95", first_token, self.first_token_ms,
                f"p95 time to first token above {self.first_token_ms:g} ms (the first-token SLA)",
                cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD)
        if with_spillover:
            made["spillover"] = alarm(
                "Spillover",
                self.alias.metric("ProvisionedConcurrencySpilloverInvocations", period=period, statistic="Sum"),
                cfg.spillover_threshold,
                f"invocations spilling over provisioned concurrency >= {cfg.spillover_threshold} per {cfg.period_s} s",
                gte,
            )
        return made


#: CloudWatch Logs accepts only these retention periods (days -> CDK enum).
_RETENTION: Final = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS, 150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def retention(days: int) -> logs.RetentionDays:
    """The shortest allowed CloudWatch Logs retention that keeps logs at least ``days`` days."""
    for allowed in sorted(_RETENTION):
        if allowed >= days:
            return _RETENTION[allowed]
    return _RETENTION[max(_RETENTION)]


def _code_size(function: lambda_.Function) -> int | None:
    from infra.constructs.bundling import staged_size_bytes

    return staged_size_bytes(function)
