"""HTTP API (API Gateway v2) in front of every agent's ``live`` alias, one path prefix per agent.

**Why one API with path prefixes, not one API per agent.** The agents of an app are one product
to its callers: one base URL (one custom domain, one CORS and auth setup), one stage with one
throttle (rate and burst shared by all agents, so a burst on one cannot exceed what the app is
sized for) and one access log where a request's route key says which agent served it. Routing
stays in API Gateway, before any Lambda runs: the root agent (prefix ``/``) takes the
``$default`` route; every other agent gets ``ANY <prefix>`` and ``ANY <prefix>/{proxy+}``.
API Gateway matches the most specific route first (full matches, then greedy ``{proxy+}``
routes, longest first, then ``$default``), so ``/lookup/x`` goes to the lookup agent and
``/lookupx`` or ``/v1/intent`` to the root agent. Each agent's runtime strips its prefix
(``WARMSTART_BASE_PATH``) before its own routing.

Each agent has its own Lambda proxy integration (payload format 2.0, the event shape of
``tests/data/events/http_api_v2.json``) on its alias ``live``, never the unqualified function.
The ``$default`` stage auto-deploys, throttles (rate and burst from config) and writes JSON
access logs with the fields needed to follow a request: request id, route, status, integration
latency and error.

**Authorization** (``warmstart.http_api.authorization``): ``none`` (the default) leaves every
route public, and the synth says so in a warning; ``iam`` puts the ``AWS_IAM`` authorizer
(SigV4-signed requests of principals allowed ``execute-api:Invoke``) and ``jwt`` a JWT
authorizer (``Authorization: Bearer <token>`` of one issuer and audience, optional scopes) on
every route, the ``$default`` route included. API Gateway answers an unauthorized request with
401/403 before any Lambda runs.

References
----------
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-routes.html
(routing API requests: most specific match first, greedy path variables, ``$default``)
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-logging-variables.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-access-control-iam.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import aws_cdk as cdk
import jsii
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_kms as kms
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


@dataclass(frozen=True)
class ApiRoute:
    """One agent's place in the HTTP API.

    Attributes
    ----------
    name : str
        The agent's name (names its integration, ``Integration-<name>``).
    path_prefix : str
        ``/`` for the ``$default`` route, else ``/a[/b...]`` (routes ``ANY /a``, ``ANY /a/{proxy+}``).
    target : aws_lambda.IFunction
        The agent's alias ``live``.
    """

    name: str
    path_prefix: str
    target: lambda_.IFunction


class AgentHttpApi(Construct):
    """One HTTP API in front of every agent's ``live`` alias (see the module docstring).

    Parameters
    ----------
    routes : sequence of ApiRoute
        One per agent; at most one with prefix ``/``, every prefix once.
    config : HttpApiConfig
        Throttling, access-log retention and authorization (``"none"``, ``"iam"``, ``"jwt"``).
    log_key : aws_kms.IKey, optional
        Customer-managed key of the access-log group (``warmstart.logs.kms_key``).

    Attributes
    ----------
    api : aws_apigatewayv2.HttpApi
    stage : aws_apigatewayv2.HttpStage
        ``$default``, throttled, with access logs.
    integrations : dict[str, aws_apigatewayv2_integrations.HttpLambdaIntegration]
        Agent name -> its integration (on its alias).
    routes : dict[str, list of aws_apigatewayv2.HttpRoute]
        Agent name -> its routes (``$default`` for the root agent).
    access_log_group : aws_logs.LogGroup
    authorizer : HttpIamAuthorizer or HttpJwtAuthorizer or None
        On every route; ``None`` when the API is public.
    url : str
        The stage URL (a token until deploy), ending in ``/``.

    Raises
    ------
    TypeError
        If a target is a function rather than an alias (it would run ``$LATEST``).
    ValueError
        If no route is given, two routes share a prefix, or a prefix is not ``/`` or ``/a[/b...]``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        routes: Sequence[ApiRoute],
        config: HttpApiConfig,
        log_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        _check_routes(routes)
        self.integrations = {
            r.name: integrations.HttpLambdaIntegration(
                f"Integration-{r.name}", r.target,
                payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0)
            for r in routes
        }
        root = next((r for r in routes if r.path_prefix == "/"), None)
        names = ", ".join(f"{r.path_prefix} -> {r.name}" for r in routes)
        self.authorizer = _authorizer(config)
        self.api = apigwv2.HttpApi(
            self,
            "Api",
            description=f"warmstart agents HTTP API ({names}; each -> its alias live)",
            default_integration=self.integrations[root.name] if root is not None else None,
            default_authorizer=self.authorizer,
            default_authorization_scopes=(list(config.jwt.scopes)
                                          if config.jwt is not None and config.jwt.scopes else None),
            create_default_stage=False,
        )
        self.routes: dict[str, list[apigwv2.HttpRoute]] = {}
        if root is not None:
            self.routes[root.name] = [self.api.node.find_child("DefaultRoute")]  # type: ignore[list-item]
        for route in routes:
            if route.path_prefix == "/":
                continue
            self.routes[route.name] = [
                *self.api.add_routes(path=route.path_prefix, methods=[apigwv2.HttpMethod.ANY],
                                     integration=self.integrations[route.name]),
                *self.api.add_routes(path=f"{route.path_prefix}/{{proxy+}}",
                                     methods=[apigwv2.HttpMethod.ANY],
                                     integration=self.integrations[route.name]),
            ]
        if config.public:
            cdk.Annotations.of(self).add_warning_v2(
                "warmstart:public-api",
                "The HTTP API is public (warmstart.http_api.authorization is 'none'): anyone with "
                "its URL can invoke every agent, within the stage throttle. Set it to 'iam' or "
                '{"type": "jwt", "issuer": ..., "audience": [...]} to require callers to '
                "authenticate.")
            for made in self.routes.values():
                for http_route in made:
                    acknowledge(
                        http_route,
                        "AwsSolutions-APIG4",
                        "warmstart.http_api.authorization is 'none': the reference agents are public "
                        "demo endpoints (intent classification and lookups of the posted text, no user "
                        "data stored), bounded by stage throttling and each agent's admission control; "
                        "set authorization to 'iam' or 'jwt' to require authenticated callers.",
                    )
        self.access_log_group = logs.LogGroup(
            self,
            "AccessLogs",
            retention=retention(config.access_log_retention_days),
            encryption_key=log_key,
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

    def agent_url(self, name: str, path_prefix: str) -> str:
        """The base URL of agent ``name`` (the stage URL plus its prefix; a token until deploy)."""
        return self.url + path_prefix.lstrip("/")


def _authorizer(config: HttpApiConfig) -> apigwv2.IHttpRouteAuthorizer | None:
    """The authorizer every route gets: IAM, JWT (issuer, audience) or none (public)."""
    if config.authorization == "iam":
        return authorizers.HttpIamAuthorizer()
    if config.authorization == "jwt":
        if config.jwt is None:
            raise ValueError("http_api authorization 'jwt' needs its issuer and audience (config.jwt)")
        return authorizers.HttpJwtAuthorizer(
            "JwtAuthorizer", config.jwt.issuer, jwt_audience=list(config.jwt.audience),
            authorizer_name="warmstart-jwt")
    return None


def _check_routes(routes: Sequence[ApiRoute]) -> None:
    if not routes:
        raise ValueError("AgentHttpApi needs at least one route")
    seen: dict[str, str] = {}
    for route in routes:
        if isinstance(route.target, lambda_.Function):
            raise TypeError(f"AgentHttpApi needs agent {route.name}'s alias, not the function: the "
                            "function would run $LATEST")
        prefix = route.path_prefix
        if prefix != "/" and (not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix
                              or "{" in prefix or "}" in prefix):
            raise ValueError(f"agent {route.name}: path prefix {prefix!r} must be '/' or '/a[/b...]'")
        if prefix in seen:
            raise ValueError(f"agents {seen[prefix]} and {route.name} share the path prefix {prefix!r}")
        seen[prefix] = route.name


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
