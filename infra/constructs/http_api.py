"""HTTP API (API Gateway v2) in front of the agent's ``live`` alias.

All routes go to the alias through one Lambda proxy integration (payload format 2.0, the event
shape of ``tests/data/events/http_api_v2.json``). The ``$default`` stage auto-deploys, throttles
(rate and burst from config) and writes JSON access logs with the fields needed to follow a
request: request id, route, status, integration latency and error.

References
----------
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-logging-variables.html
"""

from __future__ import annotations

import json
from typing import Final

import jsii
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import HttpApiConfig
from infra.constructs.agent_function import retention
from infra.constructs.nag import acknowledge

#: JSON access-log line; ``$context`` variables per the API Gateway HTTP API docs.
ACCESS_LOG_FORMAT: Final = json.dumps(
    {
        "requestId": "$context.requestId",
        "requestTime": "$context.requestTimeEpoch",
        "ip": "$context.identity.sourceIp",
        "method": "$context.httpMethod",
        "routeKey": "$context.routeKey",
        "path": "$context.path",
        "status": "$context.status",
        "responseLength": "$context.responseLength",
        "responseLatency": "$context.responseLatency",
        "integrationLatency": "$context.integrationLatency",
        "integrationStatus": "$context.integrationStatus",
        "integrationError": "$context.integrationErrorMessage",
        "error": "$context.error.message",
    },
    separators=(",", ":"),
)


class AgentHttpApi(Construct):
    """An HTTP API whose every route invokes ``target`` (the ``live`` alias).

    Parameters
    ----------
    target : aws_lambda.IFunction
        The alias (never the unqualified function: that would invoke ``$LATEST``).
    config : HttpApiConfig
        Throttling, access-log retention and authorization (``"none"`` or ``"iam"``).

    Attributes
    ----------
    api : aws_apigatewayv2.HttpApi
    stage : aws_apigatewayv2.HttpStage
        ``$default``, throttled, with access logs.
    integration : aws_apigatewayv2_integrations.HttpLambdaIntegration
    access_log_group : aws_logs.LogGroup
    url : str
        The stage URL (a token until deploy).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        target: lambda_.IFunction,
        config: HttpApiConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        if isinstance(target, lambda_.Function):
            raise TypeError("AgentHttpApi needs the alias, not the function: the function would run $LATEST")
        self.integration = integrations.HttpLambdaIntegration(
            "AgentIntegration",
            target,
            payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0,
        )
        self.api = apigwv2.HttpApi(
            self,
            "Api",
            description="warmstart agent HTTP API (every route -> alias live)",
            default_integration=self.integration,
            default_authorizer=authorizers.HttpIamAuthorizer() if config.authorization == "iam" else None,
            create_default_stage=False,
        )
        if config.authorization == "none":
            acknowledge(
                self.api.node.find_child("DefaultRoute"),
                "AwsSolutions-APIG4",
                "warmstart.http_api.authorization is 'none': the reference agent is a public demo "
                "endpoint (intent classification of the posted text, no user data stored), bounded by "
                "stage throttling and the agent's admission control; set authorization to 'iam' to "
                "require SigV4-signed requests.",
            )
        self.access_log_group = logs.LogGroup(
            self,
            "AccessLogs",
            retention=retention(config.access_log_retention_days),
        )
        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(
                rate_limit=config.throttle_rate_per_s,
                burst_limit=config.throttle_burst,
            ),
            access_log_settings=_AccessLogSettings(self.access_log_group),
        )
        self.url: str = self.stage.url


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    """JSON access logs into ``log_group`` (``IAccessLogSettings`` is an interface, not a struct)."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._destination = apigwv2.LogGroupLogDestination(log_group)

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(ACCESS_LOG_FORMAT)
