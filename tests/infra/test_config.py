"""infra/config.py: the cdk.json context parses, variants apply, and each bad input gets its exact error."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infra.config import (
    ConfigError,
    WarmstartConfig,
    apply_strategy,
    config_from_context,
    load_config,
    parse_config,
)
from tests.infra.cdk_helpers import REPO
from warmers.cost import CostModel
from warmers.pricing import Price, PriceTable, load_prices

BASE: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())["context"]["warmstart"]


def with_agent(**agent: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    for key, value in agent.items():
        raw["agent"][key] = value
    return raw


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    return str(caught.value)


def test_cdk_json_defaults_parse_into_typed_config() -> None:
    cfg = load_config(REPO / "cdk.json")
    assert isinstance(cfg, WarmstartConfig)
    assert cfg.agent.handler == "functions.agent.handler.handler"
    assert (cfg.agent.runtime, cfg.agent.architecture, cfg.agent.python_version) == ("python3.12", "x86_64", "3.12")
    assert cfg.agent.strategy == "snapstart" and cfg.agent.snapstart
    assert cfg.agent.provisioned_concurrency is None
    assert cfg.region == "us-east-1"
    assert cfg.gpu_endpoint.enabled is False and cfg.warmer.enabled is False
    assert cfg.alarms.duration_p99_ms == cfg.agent.sla_ms == 2000
    with pytest.raises(AttributeError):
        cfg.agent.memory_mb = 1  # type: ignore[misc]  # frozen


def test_pricing_defaults_to_the_shared_price_table() -> None:
    # GIVEN cdk.json, whose pricing section holds no prices (only region, currency and a _doc)
    assert set(BASE["pricing"]) - {"_doc"} == {"region", "currency"}
    # WHEN it is parsed THEN every price is the shared table's, with its source
    pricing = load_config(REPO / "cdk.json").pricing
    table = load_prices()
    assert dict(pricing.items) == dict(table.items) and pricing.overridden == ()
    assert (pricing.region, pricing.currency) == ("us-east-1", "USD")
    x86 = pricing.price("lambda_duration_gb_s", architecture="x86_64")
    arm = pricing.price("lambda_duration_gb_s", architecture="arm64")
    assert (x86, arm) == (table.items["lambda_duration_gb_s_x86_64"], table.items["lambda_duration_gb_s_arm64"])
    assert x86.source.startswith("https://pricing.us-east-1.amazonaws.com/")
    requests = pricing.price("lambda_requests_per_million")
    assert (requests.usd, requests.verified, requests.source) == (0.20, True, "https://aws.amazon.com/lambda/pricing/")
    # the replay summary looks the GPU endpoint's instance-hour price up by this key
    assert pricing.price("sagemaker_ml_g6_xlarge_hour").usd == table.items["sagemaker_ml_g6_xlarge_hour"].usd
    # and warmers' cost model built from the config's table equals the one built from the file
    assert CostModel.from_table(pricing.table, "arm64") == CostModel.us_east_1("arm64")


def test_pricing_override_in_context_wins_and_keeps_its_source() -> None:
    raw = copy.deepcopy(BASE)
    raw["pricing"]["items"] = {
        "sagemaker_ml_g6_xlarge_hour": {"usd": 0.98, "source": "negotiated quote 2026-11"},
        "lambda_duration_gb_s_arm64": {"usd": "0.00001", "unit": "GB-s", "source": "https://example.com/p",
                                       "verified": True, "note": "string number, as -c passes it"},
    }
    pricing = parse_config(raw).pricing
    gpu = pricing.price("sagemaker_ml_g6_xlarge_hour")
    table_gpu = load_prices().items["sagemaker_ml_g6_xlarge_hour"]
    # unit comes from the table; verified and note do not carry over to a new number
    assert gpu == Price(usd=0.98, unit=table_gpu.unit, source="negotiated quote 2026-11", verified=False)
    assert pricing.price("lambda_duration_gb_s", architecture="arm64").usd == 0.00001
    assert pricing.overridden == ("lambda_duration_gb_s_arm64", "sagemaker_ml_g6_xlarge_hour")
    # items not overridden stay the table's, and the cost model follows the override
    assert pricing.price("lambda_duration_gb_s", architecture="x86_64") == load_prices().items["lambda_duration_gb_s_x86_64"]
    assert CostModel.from_table(pricing.table, "arm64").on_demand_gb_s.usd == 0.00001
    assert "cdk.json" in pricing.table.origin


def test_pricing_unknown_item_errors_clearly() -> None:
    pricing = load_config(REPO / "cdk.json").pricing
    with pytest.raises(KeyError) as caught:
        pricing.price("no_such_price", architecture="arm64")
    message = str(caught.value)
    assert message.startswith("no price 'no_such_price' (architecture arm64) in warmers/prices.json; known items: ")
    assert message.endswith("Add it to warmers/prices.json with usd, unit and source")
    # an override of an item the table does not have is a config error, not a silent new price
    raw = copy.deepcopy(BASE)
    raw["pricing"]["items"] = {"lambda_duration_gb_s_x86": {"usd": 0.1, "source": "typo"}}
    message = error_of(raw)
    assert message.startswith(
        "warmstart.pricing.items.lambda_duration_gb_s_x86: unknown price item; an override must name "
        "an item of warmers/prices.json (lambda_duration_gb_s_x86_64, "
    )
    assert message.endswith("Add new prices to warmers/prices.json with usd, unit and source")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"usd": 1.0}, "warmstart.pricing.items.snapstart_restore_gb: missing key 'source'"),
        ({"usd": -1, "source": "x"}, "warmstart.pricing.items.snapstart_restore_gb.usd: -1.0 is negative"),
        ({"usd": "cheap", "source": "x"},
         "warmstart.pricing.items.snapstart_restore_gb.usd: expected a number, got str 'cheap'"),
        ({"usd": 1.0, "source": "x", "eur": 1},
         ("warmstart.pricing.items.snapstart_restore_gb: unknown key(s) 'eur'; known keys are usd, unit, "
          "source, verified, note")),
        ({"usd": 1.0, "source": "x", "note": 3},
         "warmstart.pricing.items.snapstart_restore_gb.note: expected a string, got int 3"),
    ],
)
def test_bad_price_override(item: dict[str, Any], message: str) -> None:
    raw = copy.deepcopy(BASE)
    raw["pricing"]["items"] = {"snapstart_restore_gb": item}
    assert error_of(raw) == message


def test_pricing_region_must_match_the_table_and_section_is_optional() -> None:
    raw = copy.deepcopy(BASE)
    raw["pricing"]["region"] = "eu-west-1"
    assert error_of(raw) == (
        "warmstart.pricing.region: 'eu-west-1' differs from the region of the price table "
        "warmers/prices.json ('us-east-1'); prices for another region belong in warmers/prices.json, "
        "not in cdk.json"
    )
    raw = copy.deepcopy(BASE)
    del raw["pricing"]
    assert dict(parse_config(raw).pricing.items) == dict(load_prices().items)


@pytest.mark.parametrize("strategy", ["provisioned", "snapstart", "ping", "none"])
def test_each_named_variant_is_valid(strategy: str) -> None:
    cfg = config_from_context({"warmstart": BASE, "warmstart:strategy": strategy})
    assert cfg.agent.strategy == strategy
    assert (cfg.agent.provisioned_concurrency is not None) == (strategy == "provisioned")


def test_provisioned_variant_bounds() -> None:
    pc = load_config(REPO / "cdk.json", strategy="provisioned").agent.provisioned_concurrency
    assert pc is not None and (pc.min, pc.max, pc.target_utilization) == (1, 10, 0.7)


def test_variant_merge_does_not_touch_the_input() -> None:
    before = copy.deepcopy(BASE)
    merged = apply_strategy(BASE, "provisioned")
    assert BASE == before
    assert merged["agent"]["provisioned_concurrency"]["max"] == 10


def test_context_values_from_the_cli_arrive_as_strings() -> None:
    raw = with_agent(memory_mb="1024", timeout_s="20")
    raw["debug_resource"] = "true"
    cfg = parse_config(raw)
    assert (cfg.agent.memory_mb, cfg.agent.timeout_s, cfg.debug_resource) == (1024, 20, True)


# ---- each bad input, its exact message -------------------------------------------------------


def test_snapstart_with_provisioned_concurrency_is_refused_with_the_reason() -> None:
    raw = with_agent(strategy="snapstart", provisioned_concurrency={"min": 2, "max": 5})
    assert error_of(raw) == (
        "warmstart.agent: strategy 'snapstart' cannot be combined with provisioned concurrency "
        "(provisioned_concurrency min=2, max=5): AWS Lambda does not support SnapStart together with "
        "provisioned concurrency, see https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html. "
        "Remove provisioned_concurrency or choose strategy 'provisioned'."
    )


def test_unknown_strategy_lists_the_valid_ones() -> None:
    assert error_of(with_agent(strategy="warm")) == (
        "warmstart.agent.strategy: unknown strategy 'warm'; valid strategies are provisioned, snapstart, ping, none"
    )


def test_unknown_strategy_from_the_command_line() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_context({"warmstart": BASE, "warmstart:strategy": "always-warm"})
    assert str(caught.value) == (
        "warmstart.agent.strategy: unknown strategy 'always-warm'; "
        "valid strategies are provisioned, snapstart, ping, none"
    )


def test_provisioned_concurrency_max_below_min() -> None:
    raw = with_agent(strategy="provisioned", provisioned_concurrency={"min": 5, "max": 2})
    assert error_of(raw) == "warmstart.agent.provisioned_concurrency: max (2) is below min (5); set max >= min"


def test_snapstart_on_a_runtime_older_than_python312() -> None:
    assert error_of(with_agent(strategy="snapstart", runtime="python3.11")) == (
        "warmstart.agent.runtime: SnapStart needs python3.12 or newer, got 'python3.11'; "
        "see https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html. "
        "Choose runtime python3.12+ or another strategy."
    )


def test_older_runtime_is_fine_without_snapstart() -> None:
    assert parse_config(with_agent(strategy="none", runtime="python3.11")).agent.runtime == "python3.11"


@pytest.mark.parametrize("memory_mb", [127, 10241])
def test_memory_outside_lambda_limits(memory_mb: int) -> None:
    assert error_of(with_agent(memory_mb=memory_mb)) == (
        f"warmstart.agent.memory_mb: {memory_mb} MB is outside Lambda's limits (128-10240 MB); "
        "see https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
    )


@pytest.mark.parametrize("timeout_s", [0, 901])
def test_timeout_outside_lambda_limits(timeout_s: int) -> None:
    assert error_of(with_agent(timeout_s=timeout_s)) == (
        f"warmstart.agent.timeout_s: {timeout_s} s is outside Lambda's limits (1-900 s); "
        "see https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
    )


def test_limits_themselves_are_accepted() -> None:
    for memory_mb, timeout_s in ((128, 1), (10240, 900)):
        cfg = parse_config(with_agent(memory_mb=memory_mb, timeout_s=timeout_s, sla_ms=1000))
        assert (cfg.agent.memory_mb, cfg.agent.timeout_s) == (memory_mb, timeout_s)


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ({"memroy_mb": 512},
         ("warmstart.agent: unknown key(s) 'memroy_mb'; known keys are handler, runtime, memory_mb, timeout_s, "
         "architecture, strategy, provisioned_concurrency, sla_ms, log_retention_days")),
        ({"memory_mb": "lots"}, "warmstart.agent.memory_mb: expected an integer, got str 'lots'"),
        ({"memory_mb": True}, "warmstart.agent.memory_mb: expected an integer, got bool True"),
        ({"runtime": "python3.8"},
         ("warmstart.agent.runtime: unsupported runtime 'python3.8'; valid runtimes are "
         "python3.10, python3.11, python3.12, python3.13, python3.14")),
        ({"architecture": "riscv"},
         "warmstart.agent.architecture: unknown architecture 'riscv'; valid architectures are x86_64, arm64"),
        ({"strategy": "provisioned"},
         'warmstart.agent.provisioned_concurrency: strategy \'provisioned\' needs {"min": N, "max": M} (N >= 1, M >= N)'),
        ({"strategy": "provisioned", "provisioned_concurrency": {"min": 0, "max": 3}},
         ("warmstart.agent.provisioned_concurrency.min: 0 is below 1; provisioned concurrency needs at least one "
         "execution environment (drop provisioned_concurrency for none)")),
        ({"strategy": "ping", "provisioned_concurrency": {"min": 1, "max": 3}},
         ("warmstart.agent.provisioned_concurrency: strategy 'ping' does not use provisioned concurrency; "
         "remove provisioned_concurrency or choose strategy 'provisioned'")),
        ({"strategy": "provisioned", "provisioned_concurrency": {"min": 1, "max": 3, "target_utilization": 1.5}},
         ("warmstart.agent.provisioned_concurrency.target_utilization: 1.5 is outside (0, 1]; "
         "it is a fraction of provisioned concurrency in use, e.g. 0.7")),
        ({"sla_ms": 45000},
         "warmstart.agent.sla_ms: 45000 ms must be between 1 ms and the function timeout (30000 ms)"),
        ({"handler": None}, "warmstart.agent: missing key 'handler'"),
    ],
)
def test_bad_agent_settings(agent: dict[str, Any], message: str) -> None:
    assert error_of(with_agent(**agent)) == message


def test_bad_top_level_settings() -> None:
    raw = copy.deepcopy(BASE)
    raw["http_api"]["authorization"] = "jwt"
    assert error_of(raw) == "warmstart.http_api.authorization: unknown authorization 'jwt'; valid values are none, iam"
    raw = copy.deepcopy(BASE)
    raw["degradation_parameter"] = "degradation-level"
    assert error_of(raw) == (
        "warmstart.degradation_parameter: 'degradation-level' is not an SSM parameter path such as "
        "/warmstart/agent/degradation-level"
    )
    # a price table without a price the cost model needs is refused, naming the table
    table = load_prices()
    partial = PriceTable(table.region, table.currency,
                         {k: v for k, v in table.items.items() if k != "snapstart_restore_gb"})
    with pytest.raises(ConfigError) as caught:
        parse_config(copy.deepcopy(BASE), prices=partial)
    assert str(caught.value) == (
        "warmers/prices.json: missing price(s) snapstart_restore_gb; "
        "each needs usd, unit and source (see tests/data/pricing.md)"
    )
    raw = copy.deepcopy(BASE)
    raw["alarms"]["datapoints_to_alarm"] = 9
    assert error_of(raw) == "warmstart.alarms: datapoints_to_alarm (9) exceeds evaluation_periods (5)"
    raw = copy.deepcopy(BASE)
    raw["region"] = "moon-1"
    assert error_of(raw) == "warmstart.region: 'moon-1' is not an AWS region such as us-east-1"


def test_missing_context_and_unreadable_cdk_json(tmp_path: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_context({})
    assert str(caught.value) == "context key 'warmstart' is missing: run from the repository root (cdk.json)"
    broken = tmp_path / "cdk.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match=r"cdk.json: cannot read cdk.json: Expecting property name"):
        load_config(broken)


def test_extension_sections_keep_unknown_keys_for_later_constructs() -> None:
    raw = copy.deepcopy(BASE)
    raw["warmer"]["horizon_min"] = 15
    raw["gpu_endpoint"]["initial_instance_count"] = 1
    cfg = parse_config(raw)
    assert cfg.warmer.options == {"horizon_min": 15}
    assert cfg.gpu_endpoint.options == {"initial_instance_count": 1}
