from __future__ import annotations

import re

import pytest

from functions.runtime.config import (
    DegradationLevel,
    FinishPreload,
    InitType,
    RuntimeConfig,
    RuntimeConfigError,
)
from functions.runtime.contract.levels import Level


def test_defaults_from_an_empty_environment() -> None:
    config = RuntimeConfig.from_env({})
    assert config.init_type is InitType.ON_DEMAND
    assert config.sla_ms == 2000.0
    assert config.debug_resource is False
    assert config.degradation_level is DegradationLevel.L0
    assert config.degradation_parameter is None
    assert config.overflow_endpoint_name is None
    assert config.service_name == "warmstart-agent"
    assert config.metrics_namespace == "Warmstart"
    assert config.agent_name is None and config.base_path is None
    assert config.admission is True and config.finish_preload is FinishPreload.AFTER
    assert config.runtime_api is None and config.memory_mb is None
    assert DegradationLevel is Level  # one level type, under its config name


@pytest.mark.parametrize(("raw", "expected"), [("on", True), ("off", False), (" OFF ", False),
                                              ("On", True), ("", True)])
def test_admission_switch(raw: str, expected: bool) -> None:
    assert RuntimeConfig.from_env({"WARMSTART_ADMISSION": raw}).admission is expected


def test_every_variable_is_read() -> None:
    env = {
        "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start",
        "WARMSTART_AGENT_NAME": "lookup",
        "WARMSTART_BASE_PATH": "/lookup/",
        "WARMSTART_SLA_MS": "1500",
        "WARMSTART_DEBUG_RESOURCE": "TRUE",
        "WARMSTART_DEGRADATION_PARAMETER": "/warmstart/agent/degradation-level",
        "WARMSTART_DEGRADATION_LEVEL": "L2",
        "WARMSTART_OVERFLOW_ENDPOINT_NAME": "agent-gpu",
        "WARMSTART_OVERFLOW_ENDPOINT_URL": "http://127.0.0.1:9000",
        "WARMSTART_FINISH_PRELOAD": "off",
        "POWERTOOLS_SERVICE_NAME": "svc",
        "POWERTOOLS_METRICS_NAMESPACE": "Ns",
        "AWS_LAMBDA_FUNCTION_NAME": "agent",
        "AWS_LAMBDA_FUNCTION_VERSION": "7",
        "AWS_REGION": "eu-west-1",
    }
    config = RuntimeConfig.from_env(env)
    assert config.init_type is InitType.SNAP_START and config.init_type.prepaid
    assert config.agent_name == "lookup"
    assert config.base_path == "/lookup"  # a trailing "/" is dropped
    assert config.sla_ms == 1500.0
    assert config.debug_resource is True
    assert config.degradation_parameter == "/warmstart/agent/degradation-level"
    assert config.degradation_level is DegradationLevel.L2
    assert config.overflow_endpoint_name == "agent-gpu"
    assert config.overflow_endpoint_url == "http://127.0.0.1:9000"
    assert config.finish_preload is FinishPreload.OFF
    assert (config.service_name, config.metrics_namespace) == ("svc", "Ns")
    assert (config.function_name, config.function_version, config.region) == ("agent", "7", "eu-west-1")


@pytest.mark.parametrize(
    ("value", "prepaid"),
    [("on-demand", False), ("provisioned-concurrency", True), ("snap-start", True),
     ("lambda-managed-instances", True)],
)
def test_init_types_mirror_lambda_values(value: str, prepaid: bool) -> None:
    config = RuntimeConfig.from_env({"AWS_LAMBDA_INITIALIZATION_TYPE": value})
    assert config.init_type.value == value
    assert config.init_type.prepaid is prepaid


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"AWS_LAMBDA_INITIALIZATION_TYPE": "warm"},
            ("AWS_LAMBDA_INITIALIZATION_TYPE='warm' is not one of 'on-demand', "
            "'provisioned-concurrency', 'snap-start', 'lambda-managed-instances'"),
        ),
        (
            {"WARMSTART_DEBUG_RESOURCE": "maybe"},
            "WARMSTART_DEBUG_RESOURCE='maybe' is not a boolean: use 'true' or 'false'",
        ),
        (
            {"WARMSTART_SLA_MS": "fast"},
            "WARMSTART_SLA_MS='fast' is not a number: give milliseconds, e.g. 2000",
        ),
        (
            {"WARMSTART_SLA_MS": "-5"},
            "WARMSTART_SLA_MS='-5' must be a positive, finite number of milliseconds",
        ),
        (
            {"WARMSTART_DEGRADATION_LEVEL": "L9"},
            "WARMSTART_DEGRADATION_LEVEL='L9' is not one of 'L0', 'L1', 'L2', 'L3'",
        ),
        (
            {"WARMSTART_ADMISSION": "true"},
            "WARMSTART_ADMISSION='true' is not one of 'on', 'off'",
        ),
    ],
)
def test_bad_values_raise_a_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(RuntimeConfigError) as info:
        RuntimeConfig.from_env(env)
    assert str(info.value) == message


def test_config_is_frozen() -> None:
    config = RuntimeConfig.from_env({})
    with pytest.raises(AttributeError):
        config.sla_ms = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("raw", [None, "", "  ", "/"])
def test_no_base_path_is_the_root_agent(raw: str | None) -> None:
    env = {} if raw is None else {"WARMSTART_BASE_PATH": raw}
    assert RuntimeConfig.from_env(env).base_path is None


@pytest.mark.parametrize("raw", ["lookup", "/look up", "//lookup", "/a//b"])
def test_a_base_path_that_is_not_a_prefix_is_refused(raw: str) -> None:
    with pytest.raises(RuntimeConfigError) as info:
        RuntimeConfig.from_env({"WARMSTART_BASE_PATH": raw})
    assert str(info.value) == (f"WARMSTART_BASE_PATH={raw!r} is not a path prefix: use e.g. "
                               "'/lookup' (leading '/', no spaces, no '//')")


def test_agent_settings_are_not_toolkit_config() -> None:
    # the model folder and intents file belong to the intent agent (read from
    # AgentRuntime.settings, see functions.agent.hooks and
    # tests/unit/agent/test_model.py::test_default_model_dir), not to the toolkit
    config = RuntimeConfig.from_env({"WARMSTART_MODEL_DIR": "/models/minilm",
                                     "WARMSTART_INTENTS_FILE": "/etc/intents.json"})
    assert config == RuntimeConfig.from_env({})
    assert not {"model_dir", "intents_file"} & set(RuntimeConfig._fields)


@pytest.mark.parametrize(("raw", "mode"), [("after", "after"), ("BEFORE", "before"), ("off", "off"),
                                          ("on", "after"), ("", "after")])
def test_finish_preload_modes(raw: str, mode: str) -> None:
    """``on`` (the old switch's default) is read as ``after``; blank is the default."""
    assert RuntimeConfig.from_env({"WARMSTART_FINISH_PRELOAD": raw}).finish_preload == mode


def test_a_bad_finish_preload_or_memory_size_is_refused_with_the_variable_named() -> None:
    with pytest.raises(RuntimeConfigError, match="WARMSTART_FINISH_PRELOAD='later' is not one of "
                                          "'after', 'before', 'off'"):
        RuntimeConfig.from_env({"WARMSTART_FINISH_PRELOAD": "later"})
    with pytest.raises(RuntimeConfigError, match="AWS_LAMBDA_FUNCTION_MEMORY_SIZE='2G'"):
        RuntimeConfig.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2G"})
    config = RuntimeConfig.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048",
                                     "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001"})
    assert (config.memory_mb, config.runtime_api) == (2048, "127.0.0.1:9001")


def test_managed_instances_init_type_and_its_concurrency() -> None:
    # GIVEN what Lambda sets in a runtime process of a Managed Instances environment
    config = RuntimeConfig.from_env({"AWS_LAMBDA_INITIALIZATION_TYPE": "lambda-managed-instances",
                                     "AWS_LAMBDA_MAX_CONCURRENCY": "32"})
    # THEN the init is pre-paid (loaded before traffic), and the environment's concurrency is read
    assert config.init_type is InitType.LAMBDA_MANAGED_INSTANCES
    assert config.init_type.prepaid and config.init_type.managed_instances
    assert config.max_concurrency == 32
    assert not InitType.PROVISIONED_CONCURRENCY.managed_instances
    assert RuntimeConfig.from_env({}).max_concurrency is None


@pytest.mark.parametrize(("name", "raw", "unit"), [
    ("AWS_LAMBDA_MAX_CONCURRENCY", "0", "concurrent requests"),
    ("AWS_LAMBDA_MAX_CONCURRENCY", "-3", "concurrent requests"),
    ("AWS_LAMBDA_MAX_CONCURRENCY", "1.5", "concurrent requests"),
    ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "many", "MB"),
])
def test_a_count_that_is_not_a_positive_integer_is_refused_by_name(name: str, raw: str,
                                                                    unit: str) -> None:
    with pytest.raises(RuntimeConfigError, match="^" + re.escape(f"{name}={raw!r} is not a positive "
                                                          f"number of {unit}") + "$"):
        RuntimeConfig.from_env({name: raw})
