from __future__ import annotations

import json

import pytest

from warmers.config import WarmerConfig, WarmerConfigError

ALIAS = {"function_name": "agent", "alias": "live", "floor": 1, "cap": 10}


def test_from_env_reads_everything_once():
    env = {"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS], "actuator": "lambda",
                                                   "lead_min": 10, "history_days": 2,
                                                   "planning_quantile": 0.9}),
           "WARMSTART_AWS_ENDPOINT_URL": "http://127.0.0.1:5000", "AWS_REGION": "eu-west-1"}
    cfg = WarmerConfig.from_env(env)
    assert cfg.policies[0].key == "agent:live" and cfg.policies[0].cap == 10
    assert cfg.actuator == "lambda" and cfg.forecast.lead_min == 10
    assert cfg.history_min == 2880 and cfg.planner.planning_quantile == 0.9
    assert 0.9 in cfg.forecast.quantiles and cfg.endpoint_url == "http://127.0.0.1:5000"
    assert cfg.region == "eu-west-1" and cfg.state_prefix == "/warmstart/warmer"


@pytest.mark.parametrize("env, msg", [
    ({}, "not set"),
    ({"WARMSTART_WARMER_CONFIG": "{"}, "not valid JSON"),
    ({"WARMSTART_WARMER_CONFIG": "{}"}, "aliases"),
    ({"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS | {"colour": 1}]})}, "unknown"),
    ({"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS | {"alias": "$LATEST"}]})},
     r"\$LATEST"),
    ({"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS, ALIAS]})}, "duplicate"),
    ({"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS], "actuator": "x"})}, "actuator"),
    ({"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS], "endpoint_actuator": "x"})},
     "endpoint_actuator must be 'autoscaling' or 'sagemaker'"),
    ({"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS], "history_days": 30})},
     "history_days"),
])
def test_bad_config_is_refused_with_the_key(env, msg):
    with pytest.raises(WarmerConfigError, match=msg):
        WarmerConfig.from_env(env)


def test_local_overrides():
    env = {"WARMSTART_WARMER_CONFIG": json.dumps({"aliases": [ALIAS], "unreserved_concurrency": 64}),
           "WARMSTART_LAMBDA_ENDPOINT_URL": "http://127.0.0.1:9001"}
    cfg = WarmerConfig.from_env(env)
    assert cfg.unreserved_concurrency == 64 and cfg.lambda_endpoint_url == "http://127.0.0.1:9001"
    with pytest.raises(WarmerConfigError, match="unreserved_concurrency"):
        WarmerConfig.from_dict({"aliases": [ALIAS], "unreserved_concurrency": -1})
    assert not WarmerConfig.from_dict({"aliases": [ALIAS],
                                       "reconcile_versions": False}).reconcile_versions
    with pytest.raises(WarmerConfigError, match="reconcile_versions"):
        WarmerConfig.from_dict({"aliases": [ALIAS], "reconcile_versions": "no"})


def test_the_endpoint_actuator_defaults_to_application_auto_scaling():
    from warmers.actuators import EndpointCapacityActuator, SageMakerCapacityActuator
    from warmers.runner import WarmerClients, WarmerRuntime

    assert WarmerConfig.from_dict({"aliases": [ALIAS]}).endpoint_actuator == "autoscaling"
    direct = WarmerConfig.from_dict({"aliases": [ALIAS], "endpoint_actuator": "sagemaker"})
    clients = WarmerClients(cloudwatch=None, lambda_=None, application_autoscaling=None,
                            ssm=None, sagemaker=object())
    assert isinstance(WarmerRuntime.build(clients, direct).endpoint_actuator,
                      SageMakerCapacityActuator)
    assert isinstance(WarmerRuntime.build(clients, WarmerConfig.from_dict({"aliases": [ALIAS]}))
                      .endpoint_actuator, EndpointCapacityActuator)


def test_the_sagemaker_endpoint_actuator_without_a_sagemaker_client_is_refused():
    from warmers.runner import WarmerClients, WarmerRuntime

    cfg = WarmerConfig.from_dict({
        "aliases": [ALIAS], "endpoint_actuator": "sagemaker",
        "endpoints": [{"endpoint_name": "gpu", "agents": ["agent:live"],
                       "target": "inference_component", "inference_component": "ic"}]})
    clients = WarmerClients(cloudwatch=None, lambda_=None, application_autoscaling=None, ssm=None)
    with pytest.raises(WarmerConfigError, match="needs a SageMaker client"):
        WarmerRuntime.build(clients, cfg)
