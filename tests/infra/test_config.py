"""infra/config.py: the cdk.json context parses (agents, variants, the old single-agent key), and
each bad input gets its exact error naming the agent and the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import (
    DEPLOY_ENVIRONMENT,
    StackConfigError,
    WarmstartConfig,
    apply_strategy,
    config_from_context,
    duplicate_agents,
    known_layers,
    load_config,
    parse_config,
)
from tests.infra.cdk_helpers import REPO
from warmers.cost import CostModel
from warmers.pricing import Price, PriceTable, load_prices

BASE: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())["context"]["warmstart"]
SNAPSTART_URL = "https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html"
LIMITS_URL = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
#: The old single-agent layout (before issue 9), as a cdk.json of that time had it.
LEGACY: dict[str, Any] = {
    **{k: v for k, v in BASE.items() if k not in ("agents", "variants")},
    "agent": {"handler": "functions.agent.handler.handler", "runtime": "python3.12", "memory_mb": 2048,
              "timeout_s": 30, "architecture": "x86_64", "strategy": "snapstart",
              "provisioned_concurrency": None, "sla_ms": 2000, "log_retention_days": 30},
    "degradation_parameter": "/warmstart/agent/degradation-level",
    "variants": {"provisioned": {"agent": {"strategy": "provisioned",
                                           "provisioned_concurrency": {"min": 2, "max": 4}}}},
}


def with_agent(name: str = "intent", **settings: Any) -> dict[str, Any]:
    """cdk.json's context with ``settings`` on agent ``name`` (a new agent if it is not there)."""
    raw = copy.deepcopy(BASE)
    agent = raw["agents"].setdefault(name, {})
    for key, value in settings.items():
        agent[key] = value
    return raw


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises(StackConfigError) as caught:
        parse_config(raw)
    return str(caught.value)


# ---- cdk.json's agents ----------------------------------------------------------------------


def test_cdk_json_declares_the_intent_and_lookup_agents() -> None:
    cfg = load_config(REPO / "cdk.json")
    assert isinstance(cfg, WarmstartConfig) and list(cfg.agents) == ["intent", "lookup", "chat"]
    intent, lookup = cfg.agents["intent"], cfg.agents["lookup"]
    assert intent.handler == "functions.agent.handler.handler"
    assert intent.code == ("functions/agent", "functions/intent_model")
    assert (intent.path_prefix, intent.is_root, intent.base_path) == ("/", True, None)
    assert intent.layers == ("web", "inference", "model") and intent.uses_model
    assert (intent.runtime, intent.architecture, intent.python_version) == ("python3.12", "x86_64", "3.12")
    assert intent.strategy == "snapstart" and intent.snapstart and intent.provisioned_concurrency is None
    assert (intent.memory_mb, intent.timeout_s, intent.sla_ms, intent.overflow) == (2048, 30, 2000, "gpu")
    assert intent.degradation_parameter == "/warmstart/intent/degradation-level"
    assert lookup.handler == "functions.lookup.handler.handler" and lookup.code == ("functions/lookup",)
    assert (lookup.path_prefix, lookup.is_root, lookup.base_path) == ("/lookup", False, "/lookup")
    assert lookup.layers == ("web",) and not lookup.uses_model
    assert (lookup.memory_mb, lookup.strategy, lookup.sla_ms, lookup.overflow) == (512, "none", 2000, None)
    assert dict(lookup.environment) == {"LOOKUP_TOOL_URL": ""}
    assert lookup.degradation_parameter == "/warmstart/lookup/degradation-level"
    assert cfg.region == "us-east-1" and cfg.warnings == ()
    # the warmer is on by default, the GPU endpoint opt-in (issue 20)
    assert cfg.gpu_endpoint.enabled is False and cfg.warmer.enabled is True
    # the duration alarm follows each agent's SLA unless alarms.duration_p99_ms says otherwise
    assert cfg.alarms.duration_p99_ms is None and cfg.alarms.duration_threshold_ms(lookup) == 2000
    assert [a.name for a in cfg.overflow_agents] == ["intent"]
    with pytest.raises(AttributeError):
        intent.memory_mb = 1  # type: ignore[misc]  # frozen
    with pytest.raises(TypeError):
        cfg.agents["x"] = intent  # type: ignore[index]  # read-only mapping


def test_agent_lookup_by_name_and_the_default_agent() -> None:
    cfg = load_config(REPO / "cdk.json")
    assert cfg.agent() is cfg.agents["intent"] is cfg.root_agent  # the agent at /
    assert cfg.agent("lookup") is cfg.agents["lookup"]
    with pytest.raises(StackConfigError) as caught:
        cfg.agent("search")
    assert str(caught.value) == "unknown agent 'search'; known agents: intent, lookup, chat"
    # no agent at /: the only agent is the default; of several, none is
    only = parse_config({**copy.deepcopy(BASE), "agents": {"lookup": BASE["agents"]["lookup"]},
                         "gpu_endpoint": {**BASE["gpu_endpoint"], "enabled": False}})
    assert only.root_agent is None and only.agent().name == "lookup"
    raw = with_agent("search", path_prefix="/search", code=["functions/lookup"],
                     handler="functions.lookup.handler.handler")
    del raw["agents"]["intent"]
    with pytest.raises(StackConfigError) as caught:
        parse_config(raw).agent()
    assert str(caught.value) == ("several agents and none at path prefix '/': name one "
                                 "(known agents: lookup, chat, search)")


def test_an_agent_needs_only_its_name() -> None:
    cfg = parse_config(with_agent("orders"))
    orders = cfg.agents["orders"]
    assert (orders.handler, orders.code, orders.path_prefix) == (
        "functions.orders.handler.handler", ("functions/orders",), "/orders")
    assert (orders.layers, orders.runtime, orders.memory_mb, orders.timeout_s) == (("web",), "python3.12", 1024, 30)
    assert (orders.architecture, orders.strategy, orders.provisioned_concurrency) == ("x86_64", "none", None)
    assert (orders.sla_ms, orders.overflow, dict(orders.environment), orders.log_retention_days) == (2000, None, {}, 30)
    assert orders.degradation_parameter == "/warmstart/orders/degradation-level"
    assert list(cfg.agents) == ["intent", "lookup", "chat", "orders"]  # cdk.json order


def test_known_layers_are_the_layer_folders_and_the_model(tmp_path: Path) -> None:
    assert known_layers(REPO / "layers") == ("chat", "forecast", "inference", "model", "web")
    (tmp_path / "gpu").mkdir()  # no requirements.txt: not a layer
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "requirements.txt").write_text("httpx==0.28.1\n")
    assert known_layers(tmp_path) == ("model", "tools")
    raw = with_agent("intent", layers=["tools", "web"])
    with pytest.raises(StackConfigError) as caught:
        parse_config(raw, layers_dir=tmp_path)
    assert str(caught.value) == "warmstart.agents.intent.layers: unknown layer 'web'; known: model, tools"
    raw = with_agent("intent", layers=["tools", "model"])
    raw["agents"]["lookup"]["layers"] = ["tools"]
    raw["agents"]["chat"]["layers"] = ["tools"]
    assert parse_config(raw, layers_dir=tmp_path).agents["lookup"].layers == ("tools",)


# ---- the old single `agent` key -------------------------------------------------------------


def test_the_old_agent_key_is_read_as_one_root_agent_with_a_warning() -> None:
    cfg = parse_config(LEGACY)
    assert list(cfg.agents) == ["agent"]
    agent = cfg.agents["agent"]
    assert (agent.handler, agent.code, agent.path_prefix) == ("functions.agent.handler.handler", ("functions",), "/")
    assert agent.layers == ("web", "inference", "model") and agent.overflow == "gpu"
    assert (agent.strategy, agent.memory_mb, agent.sla_ms) == ("snapstart", 2048, 2000)
    assert agent.degradation_parameter == "/warmstart/agent/degradation-level"
    [warning] = cfg.warnings
    assert warning.startswith(
        "warmstart.agent is the old single-agent key: read as agents.agent (code functions, "
        "path_prefix /, layers web, inference, model, overflow gpu). Migrate: replace \"agent\" (and "
        "\"degradation_parameter\") with \"agents\": {\"agent\": {\"handler\": \"functions.agent.handler.handler\", ")
    assert warning.endswith("then narrow code and layers to what the agent needs")
    # the variant of that time still applies, with its own bounds
    pc = config_from_context({"warmstart": LEGACY, "warmstart:strategy": "provisioned"}).agent().provisioned_concurrency
    assert pc is not None and (pc.min, pc.max) == (2, 4)
    # its errors name the old key
    bad = copy.deepcopy(LEGACY)
    bad["agent"]["memory_mb"] = 64
    assert error_of(bad).startswith("warmstart.agent.memory_mb: 64 MB is outside Lambda's limits")
    bad["agent"]["memroy_mb"] = 512
    assert error_of(bad) == (
        "warmstart.agent: unknown key(s) 'memroy_mb'; known keys are handler, runtime, memory_mb, "
        "timeout_s, architecture, strategy, provisioned_concurrency, sla_ms, log_retention_days")


def test_the_old_and_new_keys_together_are_refused() -> None:
    raw = {**copy.deepcopy(BASE), "agent": LEGACY["agent"]}
    assert error_of(raw) == (
        "warmstart: both 'agent' (the old single-agent key) and 'agents' are set; move the settings "
        "of 'agent' into 'agents' and remove 'agent'")
    raw = {**copy.deepcopy(BASE), "degradation_parameter": "/warmstart/agent/degradation-level"}
    assert error_of(raw) == (
        "warmstart.degradation_parameter: with 'agents' each agent has its own parameter (default "
        "/warmstart/<name>/degradation-level); set agents.<name>.degradation_parameter instead")


# ---- variants: every agent -------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["provisioned", "snapstart", "ping", "none"])
def test_each_variant_sets_the_strategy_of_every_agent(strategy: str) -> None:
    cfg = config_from_context({"warmstart": BASE, "warmstart:strategy": strategy})
    for agent in cfg.agents.values():
        assert agent.strategy == strategy
        assert (agent.provisioned_concurrency is not None) == (strategy == "provisioned")


def test_provisioned_variant_bounds_per_agent_and_by_default() -> None:
    cfg = load_config(REPO / "cdk.json", strategy="provisioned")
    # intent: the variant's own bounds (max 5: its bursts spill over); lookup: the default ones
    for name, bounds in (("intent", (1, 5, 0.7)), ("lookup", (1, 10, 0.7))):
        pc = cfg.agents[name].provisioned_concurrency
        assert pc is not None and (pc.min, pc.max, pc.target_utilization) == bounds
    # the reference agent's cold starts break its SLA on demand: its warmer covers the peak
    assert cfg.agents["intent"].provisioned_concurrency.objective == "sla"  # type: ignore[union-attr]
    assert cfg.agents["lookup"].provisioned_concurrency.objective == "cost"  # type: ignore[union-attr]
    raw = with_agent("lookup", provisioned_concurrency=None)
    raw["variants"]["provisioned"]["agents"]["lookup"] = {"provisioned_concurrency": {"min": 2, "max": 3}}
    pc = config_from_context({"warmstart": raw}, strategy="provisioned").agents["lookup"].provisioned_concurrency
    assert pc is not None and (pc.min, pc.max) == (2, 3)
    # an agent's own bounds are dropped by a strategy that takes none
    raw = with_agent("lookup", strategy="provisioned", provisioned_concurrency={"min": 1, "max": 2})
    assert config_from_context({"warmstart": raw}, strategy="snapstart").agents["lookup"].provisioned_concurrency is None


@pytest.mark.parametrize("agents", [[{"name": "a"}], "intent", 3])
def test_agents_that_are_not_an_object_are_refused_under_a_strategy(agents: Any) -> None:
    # before the variant's merge (it crashed with AttributeError on a list, or let the
    # variant's agents object replace the bad value and deployed that)
    with pytest.raises(StackConfigError, match=r"^warmstart\.agents: expected an object, got "):
        config_from_context({"warmstart": {**BASE, "agents": agents}}, strategy="provisioned")
    variants = {"provisioned": {"agents": agents}}
    with pytest.raises(StackConfigError, match=(r"^warmstart\.variants\.provisioned\.agents: "
                                            "expected an object, got ")):
        config_from_context({"warmstart": {**BASE, "variants": variants}},
                            strategy="provisioned")


def test_variant_merge_does_not_touch_the_input() -> None:
    before = copy.deepcopy(BASE)
    merged = apply_strategy(BASE, "provisioned")
    assert BASE == before
    assert merged["agents"]["intent"]["provisioned_concurrency"]["max"] == 5
    assert merged["agents"]["lookup"]["strategy"] == "provisioned"


def test_variant_errors() -> None:
    with pytest.raises(StackConfigError) as caught:
        config_from_context({"warmstart": BASE, "warmstart:strategy": "always-warm"})
    assert str(caught.value) == (
        "warmstart:strategy: unknown strategy 'always-warm'; valid strategies are provisioned, snapstart, ping, managed_instances, none")
    raw = copy.deepcopy(BASE)
    raw["variants"]["ping"] = {"agents": {"search": {"memory_mb": 256}}}
    with pytest.raises(StackConfigError) as caught:
        apply_strategy(raw, "ping")
    assert str(caught.value) == (
        "warmstart.variants.ping.agents.search: no agent 'search' to apply the variant to; "
        "known agents: intent, lookup, chat")


def test_context_values_from_the_cli_arrive_as_strings() -> None:
    raw = with_agent("lookup", memory_mb="1024", timeout_s="20")
    raw["debug_resource"] = "true"
    cfg = parse_config(raw)
    assert (cfg.agents["lookup"].memory_mb, cfg.agents["lookup"].timeout_s, cfg.debug_resource) == (1024, 20, True)


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


# ---- each bad input, its exact message -------------------------------------------------------


def test_snapstart_with_provisioned_concurrency_is_refused_with_the_reason() -> None:
    raw = with_agent("lookup", strategy="snapstart", provisioned_concurrency={"min": 2, "max": 5})
    assert error_of(raw) == (
        "warmstart.agents.lookup: strategy 'snapstart' cannot be combined with provisioned concurrency "
        "(provisioned_concurrency min=2, max=5): AWS Lambda does not support SnapStart together with "
        f"provisioned concurrency, see {SNAPSTART_URL}. "
        "Remove provisioned_concurrency or choose strategy 'provisioned'."
    )


def test_snapstart_on_a_runtime_older_than_python312() -> None:
    assert error_of(with_agent(strategy="snapstart", runtime="python3.11")) == (
        "warmstart.agents.intent.runtime: SnapStart needs python3.12 or newer, got 'python3.11'; "
        f"see {SNAPSTART_URL}. Choose runtime python3.12+ or another strategy."
    )
    assert parse_config(with_agent(strategy="none", runtime="python3.11")).agents["intent"].runtime == "python3.11"


@pytest.mark.parametrize(("key", "value", "unit", "limits"), [
    ("memory_mb", 127, "MB", "128-10240"), ("memory_mb", 10241, "MB", "128-10240"),
    ("timeout_s", 0, "s", "1-900"), ("timeout_s", 901, "s", "1-900"),
])
def test_memory_and_timeout_outside_lambda_limits(key: str, value: int, unit: str, limits: str) -> None:
    assert error_of(with_agent("lookup", **{key: value})) == (
        f"warmstart.agents.lookup.{key}: {value} {unit} is outside Lambda's limits ({limits} {unit}); "
        f"see {LIMITS_URL}"
    )


def test_limits_themselves_are_accepted() -> None:
    for memory_mb, timeout_s in ((128, 1), (10240, 900)):
        cfg = parse_config(with_agent("lookup", memory_mb=memory_mb, timeout_s=timeout_s, sla_ms=1000))
        assert (cfg.agents["lookup"].memory_mb, cfg.agents["lookup"].timeout_s) == (memory_mb, timeout_s)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"memroy_mb": 512},
         ("warmstart.agents.lookup: unknown key(s) 'memroy_mb'; known keys are handler, code, path_prefix, "
          "layers, runtime, memory_mb, timeout_s, architecture, strategy, provisioned_concurrency, sla_ms, "
          "overflow, overflow_contract, environment, log_retention_days, degradation_parameter, "
          "reserved_concurrency, calibration, managed_instances")),
        ({"memory_mb": "lots"}, "warmstart.agents.lookup.memory_mb: expected an integer, got str 'lots'"),
        ({"memory_mb": True}, "warmstart.agents.lookup.memory_mb: expected an integer, got bool True"),
        ({"runtime": "python3.8"},
         ("warmstart.agents.lookup.runtime: unsupported runtime 'python3.8'; valid runtimes are "
          "python3.10, python3.11, python3.12, python3.13, python3.14")),
        ({"architecture": "riscv"},
         "warmstart.agents.lookup.architecture: unknown architecture 'riscv'; valid architectures are x86_64, arm64"),
        ({"strategy": "warm"},
         "warmstart.agents.lookup.strategy: unknown strategy 'warm'; valid strategies are provisioned, snapstart, ping, managed_instances, none"),
        ({"strategy": "provisioned"},
         ('warmstart.agents.lookup.provisioned_concurrency: strategy \'provisioned\' needs {"min": N, "max": M} '
          "(N >= 1, M >= N)")),
        ({"strategy": "provisioned", "provisioned_concurrency": {"min": 5, "max": 2}},
         "warmstart.agents.lookup.provisioned_concurrency: max (2) is below min (5); set max >= min"),
        ({"strategy": "provisioned", "provisioned_concurrency": {"min": 0, "max": 3}},
         ("warmstart.agents.lookup.provisioned_concurrency.min: 0 is below 1; provisioned concurrency needs at "
          "least one execution environment (drop provisioned_concurrency for none)")),
        ({"strategy": "ping", "provisioned_concurrency": {"min": 1, "max": 3}},
         ("warmstart.agents.lookup.provisioned_concurrency: strategy 'ping' does not use provisioned concurrency; "
          "remove provisioned_concurrency or choose strategy 'provisioned'")),
        ({"strategy": "provisioned", "provisioned_concurrency": {"min": 1, "max": 3, "target_utilization": 1.5}},
         ("warmstart.agents.lookup.provisioned_concurrency.target_utilization: 1.5 is outside (0, 1]; "
          "it is a fraction of provisioned concurrency in use, e.g. 0.7")),
        ({"strategy": "provisioned", "provisioned_concurrency": {"min": 1, "max": 3, "objective": "latency"}},
         ("warmstart.agents.lookup.provisioned_concurrency.objective: 'latency' is not 'cost' (provisioned "
          "concurrency only where it costs no more than on demand) or 'sla' (cover the forecast peak)")),
        ({"sla_ms": 45000},
         "warmstart.agents.lookup.sla_ms: 45000 ms must be between 1 ms and the function timeout (30000 ms)"),
        # layers
        ({"layers": ["web", "gpu"]},
         "warmstart.agents.lookup.layers: unknown layer 'gpu'; known: chat, forecast, inference, model, web"),
        ({"layers": ["web", "web"]}, "warmstart.agents.lookup.layers: layer 'web' is listed twice"),
        ({"layers": []}, "warmstart.agents.lookup.layers: expected a non-empty list of strings, got list []"),
        ({"layers": "web"}, "warmstart.agents.lookup.layers: expected a non-empty list of strings, got str 'web'"),
        # path prefix
        ({"path_prefix": "lookup"}, "warmstart.agents.lookup.path_prefix: 'lookup' must start with '/' (e.g. '/lookup')"),
        *[({"path_prefix": bad},
           (f"warmstart.agents.lookup.path_prefix: {bad!r} must be '/' or '/segment[/segment...]' ending at a "
            "'/' boundary, without a trailing '/' or empty segments; a segment has letters, digits and "
            ". _ ~ - only (e.g. '/lookup')"))
          for bad in ("/lookup/", "//lookup", "/look up", "/lookup/{proxy+}", "/a//b")],
        ({"path_prefix": "/"},
         ("warmstart.agents.lookup.path_prefix: '/' is already the prefix of agent 'intent'; each agent "
          "needs its own path prefix")),
        # code and handler
        ({"code": ["/opt/lookup"]},
         ("warmstart.agents.lookup.code: '/opt/lookup' must be a folder relative to the repository root, "
          "without '..' (e.g. 'functions/lookup')")),
        ({"code": ["functions/../lookup"]},
         ("warmstart.agents.lookup.code: 'functions/../lookup' must be a folder relative to the repository "
          "root, without '..' (e.g. 'functions/lookup')")),
        ({"handler": "handler"}, "warmstart.agents.lookup.handler: 'handler' is not a handler 'package.module.function'"),
        ({"handler": "functions.agent.handler.handler"},
         ("warmstart.agents.lookup.handler: module functions.agent.handler is not in the agent's code "
          "(functions/lookup) nor in functions/runtime; add its folder to code")),
        # overflow, environment, degradation parameter
        ({"overflow": "cpu"},
         ("warmstart.agents.lookup.overflow: unknown overflow 'cpu'; valid values are 'gpu' (the stack's "
          "shared gpu_endpoint) or null")),
        ({"environment": {"LOOKUP_TOOL_URL": 8080}},
         "warmstart.agents.lookup.environment.LOOKUP_TOOL_URL: expected a string, got int 8080"),
        ({"environment": {"1BAD": "x"}},
         ("warmstart.agents.lookup.environment: '1BAD' is not an environment variable name (letters, digits "
          "and _, not starting with a digit)")),
        ({"environment": {"AWS_REGION": "eu-west-1"}},
         ("warmstart.agents.lookup.environment.AWS_REGION: reserved by AWS Lambda and cannot be set; see "
          "https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime")),
        ({"environment": {"WARMSTART_SLA_MS": "900"}},
         "warmstart.agents.lookup.environment.WARMSTART_SLA_MS: set by the deploy from sla_ms; remove it here"),
        ({"environment": {"WARMSTART_BASE_PATH": "/x"}},
         "warmstart.agents.lookup.environment.WARMSTART_BASE_PATH: set by the deploy from path_prefix; remove it here"),
        ({"environment": ["LOOKUP_TOOL_URL"]},
         "warmstart.agents.lookup.environment: expected an object, got list ['LOOKUP_TOOL_URL']"),
        ({"degradation_parameter": "level"},
         ("warmstart.agents.lookup.degradation_parameter: 'level' is not an SSM parameter path such as "
          "/warmstart/lookup/degradation-level")),
        ({"degradation_parameter": "/warmstart/intent/degradation-level"},
         ("warmstart.agents.lookup.degradation_parameter: '/warmstart/intent/degradation-level' is already "
          "the parameter of agent 'intent'; each agent needs its own")),
    ],
)
def test_bad_agent_settings(settings: dict[str, Any], message: str) -> None:
    assert error_of(with_agent("lookup", **settings)) == message


@pytest.mark.parametrize("variable", sorted(DEPLOY_ENVIRONMENT))
def test_every_variable_the_deploy_sets_is_refused_in_an_agents_environment(variable: str) -> None:
    # the deploy's wiring (overflow, capacity parameter, inference component, ...) would
    # replace the user's value without a word
    assert error_of(with_agent("lookup", environment={variable: "mine"})) == (
        f"warmstart.agents.lookup.environment.{variable}: set by the deploy from "
        f"{DEPLOY_ENVIRONMENT[variable]}; remove it here")
    assert "WARMSTART_OVERFLOW_INFERENCE_COMPONENT" in DEPLOY_ENVIRONMENT
    assert "WARMSTART_OVERFLOW_CAPACITY_PARAMETER" in DEPLOY_ENVIRONMENT


@pytest.mark.parametrize("name", ["Lookup", "look-up", "2fast", "a_", "a__b", "a_1", "x" * 33, "_x"])
def test_bad_agent_names(name: str) -> None:
    raw = copy.deepcopy(BASE)
    raw["agents"][name] = {"path_prefix": "/x"}
    if name.startswith("_"):  # a _doc-style key: documentation, not an agent
        assert name not in parse_config(raw).agents
        return
    assert error_of(raw) == (
        f"warmstart.agents.{name}: agent name {name!r} is not valid; use lower-case words of letters and "
        "digits joined by '_', each starting with a letter, at most 32 characters (e.g. 'intent', "
        "'order_lookup')")


def test_agent_declared_twice_in_cdk_json(tmp_path: Path) -> None:
    text = (REPO / "cdk.json").read_text().replace(
        '"lookup": {', '"lookup": {"path_prefix": "/old"},\n        "lookup": {', 1)
    assert duplicate_agents(text) == ["lookup"]
    assert duplicate_agents((REPO / "cdk.json").read_text()) == []
    path = tmp_path / "cdk.json"
    path.write_text(text)
    with pytest.raises(StackConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"warmstart.agents.lookup: agent 'lookup' is declared twice in {path}; give each agent its own name")


def test_no_agent_and_gpu_endpoint_without_overflow_agents() -> None:
    raw = {**copy.deepcopy(BASE), "agents": {"_doc": "nothing yet"}}
    assert error_of(raw) == (
        'warmstart.agents: declare at least one agent, e.g. {"intent": {"handler": '
        '"functions.agent.handler.handler"}}')
    raw = with_agent("intent", overflow=None)
    raw["gpu_endpoint"]["enabled"] = True
    assert error_of(raw) == (
        'warmstart.gpu_endpoint.enabled: the GPU endpoint is enabled but no agent declares "overflow": '
        '"gpu"; set it on the agents that overflow, or disable the endpoint')


def test_a_gpu_endpoint_shared_by_agents_with_different_answer_contracts_is_refused() -> None:
    # GIVEN two agents overflowing to the one endpoint
    raw = with_agent("lookup", overflow="gpu", overflow_contract="lookup-v1")
    raw["agents"]["intent"]["overflow_contract"] = "intent-v1"
    raw["gpu_endpoint"]["enabled"] = True
    raw["gpu_endpoint"]["contract"] = None
    # THEN different contracts are refused, naming each
    message = error_of(raw)
    assert message.startswith("warmstart.gpu_endpoint: the GPU endpoint is shared by agents that "
                              "expect different answer contracts (intent: intent-v1, lookup: "
                              "lookup-v1); one endpoint answers one contract")
    # one declared and one not: refused too
    raw["agents"]["lookup"]["overflow_contract"] = None
    assert "(intent: intent-v1, lookup: none declared)" in error_of(raw)
    # the same contract: accepted; the endpoint's own contract must match it
    raw["agents"]["lookup"]["overflow_contract"] = "intent-v1"
    assert parse_config(raw).agents["lookup"].overflow_contract == "intent-v1"
    raw["gpu_endpoint"]["contract"] = "intent-v2"
    assert "the endpoint serves 'intent-v2'" in error_of(raw)
    raw["gpu_endpoint"]["contract"] = "intent-v1"
    assert parse_config(raw).gpu_endpoint.contract == "intent-v1"
    # with the endpoint off nothing is shared: not checked
    raw["gpu_endpoint"]["enabled"] = False
    raw["agents"]["lookup"]["overflow_contract"] = "other"
    assert parse_config(raw).agents["lookup"].overflow_contract == "other"
    # a contract name is a plain token
    raw["agents"]["lookup"]["overflow_contract"] = "a b"
    assert error_of(raw).startswith("warmstart.agents.lookup.overflow_contract: 'a b' must be")


def test_bad_top_level_settings() -> None:
    raw = copy.deepcopy(BASE)
    raw["http_api"]["authorization"] = "oauth"
    assert error_of(raw) == ("warmstart.http_api.authorization: unknown authorization 'oauth'; "
                             "valid values are none, iam, jwt")
    # a price table without a price the cost model needs is refused, naming the table
    table = load_prices()
    partial = PriceTable(table.region, table.currency,
                         {k: v for k, v in table.items.items() if k != "snapstart_restore_gb"})
    with pytest.raises(StackConfigError) as caught:
        parse_config(copy.deepcopy(BASE), prices=partial)
    assert str(caught.value) == (
        "warmers/prices.json: missing price(s) snapstart_restore_gb; "
        "each needs usd, unit and source (see tests/data/pricing.md)"
    )
    raw = copy.deepcopy(BASE)
    raw["alarms"]["datapoints_to_alarm"] = 9
    assert error_of(raw) == "warmstart.alarms: datapoints_to_alarm (9) exceeds evaluation_periods (5)"
    raw = copy.deepcopy(BASE)
    raw["alarms"]["duration_p99_ms"] = 1500
    cfg = parse_config(raw)
    assert cfg.alarms.duration_threshold_ms(cfg.agents["lookup"]) == 1500
    raw = copy.deepcopy(BASE)
    raw["region"] = "moon-1"
    assert error_of(raw) == "warmstart.region: 'moon-1' is not an AWS region such as us-east-1"


def test_missing_context_and_unreadable_cdk_json(tmp_path: Any) -> None:
    with pytest.raises(StackConfigError) as caught:
        config_from_context({})
    assert str(caught.value) == "context key 'warmstart' is missing: run from the repository root (cdk.json)"
    broken = tmp_path / "cdk.json"
    broken.write_text("{not json")
    with pytest.raises(StackConfigError, match=r"cdk.json: cannot read cdk.json: Expecting property name"):
        load_config(broken)


def test_extension_sections_keep_unknown_keys_for_later_constructs() -> None:
    raw = copy.deepcopy(BASE)
    raw["warmer"]["horizon_min"] = 15
    raw["gpu_endpoint"]["initial_instance_count"] = 1
    cfg = parse_config(raw)
    assert cfg.warmer.options == {"horizon_min": 15}
    assert cfg.gpu_endpoint.options == {"initial_instance_count": 1}


def test_the_warmer_is_on_unless_switched_off() -> None:
    """A warmer section without ``enabled`` deploys the warmer (issue 20); ``false`` (or the
    ``-c`` string ``"false"``) switches it off; the GPU endpoint stays as configured."""
    raw = copy.deepcopy(BASE)
    del raw["warmer"]["enabled"]
    assert parse_config(raw).warmer.enabled is True
    raw["warmer"]["enabled"] = "false"
    assert parse_config(raw).warmer.enabled is False
    raw["warmer"]["enabled"] = "maybe"
    assert error_of(raw) == "warmstart.warmer.enabled: expected true or false, got str 'maybe'"


# ---- security options: authorization, reserved concurrency, log encryption -----------------

JWT_URL = "https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html"
ISSUER = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example"


def with_auth(value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["http_api"]["authorization"] = value
    return raw


def test_the_api_is_public_by_default_and_iam_or_jwt_on_request() -> None:
    assert parse_config(copy.deepcopy(BASE)).http_api.public  # cdk.json: "none"
    raw = copy.deepcopy(BASE)
    del raw["http_api"]["authorization"]
    assert parse_config(raw).http_api.authorization == "none"
    for value in ("iam", {"type": "iam"}):
        api = parse_config(with_auth(value)).http_api
        assert (api.authorization, api.jwt, api.public) == ("iam", None, False)
    api = parse_config(with_auth({"type": "jwt", "issuer": ISSUER, "audience": ["client-1"],
                                  "scopes": ["agents/invoke"]})).http_api
    assert api.authorization == "jwt" and not api.public
    assert api.jwt is not None and (api.jwt.issuer, api.jwt.audience, api.jwt.scopes) == (
        ISSUER, ("client-1",), ("agents/invoke",))
    assert parse_config(with_auth({"type": "jwt", "issuer": ISSUER, "audience": ["a", "b"]})
                        ).http_api.jwt.scopes == ()  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "message"), [
    ("jwt", ('warmstart.http_api.authorization: \'jwt\' needs the identity provider: write '
            '{"type": "jwt", "issuer": "https://...", "audience": ["<client id>"]}')),
    ({"type": "cognito"}, ("warmstart.http_api.authorization.type: unknown type 'cognito'; "
                          "valid types are none, iam, jwt")),
    ({"type": "iam", "issuer": ISSUER}, ("warmstart.http_api.authorization: unknown key(s) "
                                        "'issuer'; known keys are type")),
    ({"type": "jwt", "audience": ["a"]}, "warmstart.http_api.authorization: missing key 'issuer'"),
    ({"type": "jwt", "issuer": "http://idp.example/", "audience": ["a"]},
     ("warmstart.http_api.authorization.issuer: 'http://idp.example/' is not an https:// URL; API "
     "Gateway fetches the issuer's signing keys over HTTPS (e.g. "
     f"https://cognito-idp.us-east-1.amazonaws.com/<user pool id>), see {JWT_URL}")),
    ({"type": "jwt", "issuer": ISSUER},
     ("warmstart.http_api.authorization: missing key 'audience' (the accepted aud or client_id "
     'values, e.g. ["<app client id>"])')),
    ({"type": "jwt", "issuer": ISSUER, "audience": []},
     "warmstart.http_api.authorization.audience: expected a non-empty list of strings, got list []"),
    ({"type": "jwt", "issuer": ISSUER, "audience": ["a"], "scopes": "read"},
     "warmstart.http_api.authorization.scopes: expected a non-empty list of strings, got str 'read'"),
    ({"type": "jwt", "issuer": ISSUER, "audience": ["a"], "claims": {}},
     ("warmstart.http_api.authorization: unknown key(s) 'claims'; known keys are type, issuer, "
     "audience, scopes")),
])
def test_bad_authorization(value: Any, message: str) -> None:
    assert error_of(with_auth(value)) == message


def test_reserved_concurrency_per_agent() -> None:
    cfg = parse_config(with_agent("lookup", reserved_concurrency=50))
    assert cfg.agent("lookup").reserved_concurrency == 50
    assert cfg.agent("intent").reserved_concurrency is None  # the default: no reservation
    assert cfg.account_concurrency_limit == 1000
    # with provisioned concurrency, a reservation at the max is accepted
    raw = apply_strategy(with_agent("lookup", reserved_concurrency=10), "provisioned")
    assert parse_config(raw).agent("lookup").provisioned_concurrency.max == 10  # type: ignore[union-attr]


def test_bad_reserved_concurrency() -> None:
    assert error_of(with_agent("lookup", reserved_concurrency=0)) == (
        "warmstart.agents.lookup.reserved_concurrency: 0 would throttle every invocation (no "
        "execution environment may run); set null for no reservation, or a number >= 1")
    assert error_of(with_agent("lookup", reserved_concurrency="many")) == (
        "warmstart.agents.lookup.reserved_concurrency: expected an integer, got str 'many'")
    raw = apply_strategy(with_agent("lookup", reserved_concurrency=5), "provisioned")
    assert error_of(raw) == (
        "warmstart.agents.lookup.reserved_concurrency: 5 is below provisioned_concurrency.max (10); "
        "Lambda refuses provisioned concurrency above a function's reserved concurrency, see "
        "https://docs.aws.amazon.com/lambda/latest/dg/provisioned-concurrency.html. Raise "
        "reserved_concurrency or lower the max")
    # all reservations (and the warmer's 1) must leave the account its 100 unreserved
    raw = with_agent("lookup", reserved_concurrency=400)
    raw["agents"]["intent"]["reserved_concurrency"] = 500
    raw["warmer"]["enabled"] = False  # without the warmer's 1
    assert parse_config(raw).agent("intent").reserved_concurrency == 500  # 900 = 1000 - 100
    raw["warmer"]["enabled"] = True  # cdk.json's default
    assert error_of(raw) == (
        "warmstart.agents: reserved concurrency adds up to 901 (intent 500, lookup 400, warmer 1), "
        "above the 900 this account can reserve (account_concurrency_limit 1000 minus the 100 "
        "Lambda keeps unreserved, see https://docs.aws.amazon.com/lambda/latest/dg/"
        "lambda-concurrency.html); lower reserved_concurrency, or raise account_concurrency_limit "
        "after a quota increase")
    raw["account_concurrency_limit"] = 2000  # after a quota increase
    assert parse_config(raw).account_concurrency_limit == 2000
    raw = with_agent("lookup", reserved_concurrency=5)
    raw["account_concurrency_limit"] = 10  # a new account's lower limit: nothing to reserve
    # the default warmer reserves its 1 too
    assert "adds up to 6 (lookup 5, warmer 1), above the 0 this account can reserve" in error_of(raw)
    raw["account_concurrency_limit"] = 0
    assert error_of(raw) == ("warmstart.account_concurrency_limit: 0 must be >= 1 (Lambda's default "
                             "is 1000, see https://docs.aws.amazon.com/lambda/latest/dg/"
                             "lambda-concurrency.html)")


def test_account_limits_match_the_shared_data() -> None:
    from infra.config import DEFAULT_ACCOUNT_CONCURRENCY, UNRESERVED_CONCURRENCY_MINIMUM
    from warmers.plan.policy import UNRESERVED_MINIMUM

    rows = {line.split("|")[1].strip(): line.split("|")[2].strip()
            for line in (REPO / "tests" / "data" / "pricing.md").read_text().splitlines()
            if line.startswith("|") and line.count("|") > 3}
    assert rows["Default account concurrency"].replace(",", "") == str(DEFAULT_ACCOUNT_CONCURRENCY)
    assert rows["Unreserved concurrency minimum"] == str(UNRESERVED_CONCURRENCY_MINIMUM)
    assert UNRESERVED_MINIMUM == UNRESERVED_CONCURRENCY_MINIMUM  # the warmer keeps the same floor


def test_log_encryption_option() -> None:
    assert parse_config(copy.deepcopy(BASE)).logs.kms_key is False  # the default
    raw = copy.deepcopy(BASE)
    raw["logs"] = {"kms_key": True}
    assert parse_config(raw).logs.kms_key is True
    raw["logs"] = {"kms_key": "yes"}
    assert error_of(raw) == "warmstart.logs.kms_key: expected true or false, got str 'yes'"
    raw["logs"] = {"kms_key_arn": "arn:aws:kms:us-east-1:123456789012:key/x"}
    assert error_of(raw) == "warmstart.logs: unknown key(s) 'kms_key_arn'; known keys are kms_key"
