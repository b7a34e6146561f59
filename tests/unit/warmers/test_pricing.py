"""warmers/pricing.py and warmers/prices.json: one sourced price table that every side reads."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import FrozenInstanceError, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from warmers.cost import ARCHITECTURES, CostModel
from warmers.pricing import (
    MissingPriceError,
    Price,
    PriceTable,
    PriceTableError,
    load_prices,
    parse_table,
    read_prices,
)
from warmers.simulator.constants import PRICE_ITEMS, PRICE_SOURCES, SimulatorPrices, price_sources

REPO = Path(__file__).resolve().parents[3]
PRICING_MD = REPO / "tests" / "data" / "pricing.md"

#: Row of tests/data/pricing.md -> the table item(s) it prices (per-architecture rows give two).
MD_ROWS: dict[str, tuple[str, ...]] = {
    "Lambda duration, on-demand, tier 1": ("lambda_duration_gb_s_x86_64", "lambda_duration_gb_s_arm64"),
    "Lambda requests": ("lambda_requests_per_million",),
    "Provisioned concurrency (PC), configured": ("pc_configured_gb_s_x86_64", "pc_configured_gb_s_arm64"),
    "Duration when PC is used": ("pc_duration_gb_s_x86_64", "pc_duration_gb_s_arm64"),
    "Ephemeral storage above 512 MB": ("ephemeral_storage_gb_s",),
    "SnapStart cache": ("snapstart_cache_gb_s",),
    "SnapStart restore": ("snapstart_restore_gb",),
    "SageMaker real-time ml.g6.xlarge": ("sagemaker_ml_g6_xlarge_hour",),
    "SageMaker real-time ml.g5.xlarge": ("sagemaker_ml_g5_xlarge_hour",),
    "SageMaker real-time ml.g4dn.xlarge": ("sagemaker_ml_g4dn_xlarge_hour",),
    "API Gateway HTTP API": ("http_api_requests_per_million",),
    "CloudWatch GetMetricData": ("cloudwatch_get_metric_data_per_1000_metrics",),
    "EventBridge Scheduler": ("eventbridge_scheduler_per_million",),
    "Lambda Managed Instances requests": ("lmi_requests_per_million",),
    "Lambda Managed Instances management fee": ("lmi_management_fee_fraction",),
    "EC2 m7g.large on-demand": ("ec2_m7g_large_hour",),
}
LAMBDA_ROWS = tuple(MD_ROWS)[:7]


def md_rows() -> dict[str, dict[str, str]]:
    """The rows of the markdown table in pricing.md, by item, with abbreviations resolved."""
    text = PRICING_MD.read_text(encoding="utf-8")
    abbreviations = dict(re.findall(r"^(PL-\S+) = (https://\S+)$", text, flags=re.MULTILINE))
    assert set(abbreviations) == {"PL-λ", "PL-SM"}, "pricing.md lost its PL-λ / PL-SM definitions"
    rows: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("item", "---"):
            continue
        item, value, unit, source, note = cells
        rows[item] = {"value": value, "unit": unit, "source": abbreviations.get(source, source), "note": note}
    return rows


def md_values(value: str) -> tuple[float, ...]:
    """``x86 $A / Arm $B`` -> (A, B); otherwise the first dollar amount -> (A,)."""
    per_arch = re.fullmatch(r"x86 \$([\d.]+) / Arm \$([\d.]+)", value)
    if per_arch:
        return float(per_arch[1]), float(per_arch[2])
    first = re.search(r"\$([\d.]+)", value)
    assert first, f"no dollar amount in {value!r}"
    return (float(first[1]),)


# --------------------------------------------------------------------------------------------
# the table against its sources


def test_every_price_has_a_source_url_or_a_named_secondary_source() -> None:
    table = load_prices()
    assert (table.region, table.currency) == ("us-east-1", "USD")
    assert len(table.items) >= 16
    for name, price in table.items.items():
        assert re.fullmatch(r"https://\S+", price.source) or (
            price.source.startswith("secondary: ") and len(price.source) > len("secondary: ") + 5
        ), f"{name}: source {price.source!r} is neither a URL nor 'secondary: <what>'"
        assert price.unit.strip(), name
        assert price.usd >= 0, name
        # an unverified secondary source is never marked verified
        assert not (price.source.startswith("secondary: ") and price.verified), name


def test_table_items_agree_with_pricing_md() -> None:
    rows, table = md_rows(), load_prices()
    # every item of the table is tied to a row of the source list, and vice versa
    assert sorted(k for keys in MD_ROWS.values() for k in keys) == sorted(table.items)
    for label, keys in MD_ROWS.items():
        assert label in rows, f"pricing.md has no row {label!r}"
        row = rows[label]
        assert md_values(row["value"])[: len(keys)] == tuple(table.items[k].usd for k in keys), label
        for key in keys:
            price = table.items[key]
            assert row["unit"] in price.unit, (label, row["unit"], price.unit)
            assert price.verified == row["note"].startswith("verified"), (label, row["note"])
            if row["source"].startswith("https://"):
                assert price.source == row["source"], label
            else:
                assert row["source"].startswith("secondary") and price.source.startswith("secondary: "), label


def test_lambda_rows_of_pricing_md_are_the_table_numbers() -> None:
    # the brief's minimum, spelled out: every Lambda row, both architectures where given
    rows, table = md_rows(), load_prices()
    for label in LAMBDA_ROWS:
        values = md_values(rows[label]["value"])
        assert values == tuple(table.items[k].usd for k in MD_ROWS[label]), label
    # and the derived break-even row (60 %) still follows from them
    assert "60%" in rows["PC break-even (derived)"]["value"]
    for arch in ARCHITECTURES:
        assert CostModel.us_east_1(arch).utilization_break_even() == pytest.approx(0.60, abs=0.005)


def test_no_module_writes_a_price_of_its_own() -> None:
    # GIVEN the distinctive numbers of the table (4+ significant decimals)
    table = load_prices()
    literals = {f"{p.usd:.10f}".rstrip("0") for p in table.items.values() if len(f"{p.usd:.10f}".rstrip("0")) >= 6}
    assert "0.0000166667" in literals and "1.1267" in literals
    # WHEN the code and config that use prices are searched THEN only the table holds them
    sources = [REPO / "cdk.json", *sorted((REPO / "warmers").rglob("*.py")), *sorted((REPO / "infra").rglob("*.py"))]
    for path in sources:
        text = path.read_text(encoding="utf-8")
        found = sorted(n for n in literals if re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", text))
        assert not found, f"{path.relative_to(REPO)} writes price(s) {found}; read them from warmers/prices.json"


# --------------------------------------------------------------------------------------------
# every side reads the table


def test_cost_model_and_simulator_prices_come_from_the_table() -> None:
    table = load_prices()
    for arch in ARCHITECTURES:
        cost = CostModel.us_east_1(arch)
        assert cost.on_demand_gb_s == table.items[f"lambda_duration_gb_s_{arch}"]
        assert cost.pc_configured_gb_s == table.items[f"pc_configured_gb_s_{arch}"]
        assert cost.pc_duration_gb_s == table.items[f"pc_duration_gb_s_{arch}"]
        assert cost.request.usd == table.items["lambda_requests_per_million"].usd / 1_000_000
        assert (cost.request.unit, cost.request.verified) == ("request", True)
    p = SimulatorPrices()
    assert p == SimulatorPrices.from_table(table)
    assert (p.ondemand_gb_s_usd, p.pc_configured_gb_s_usd, p.pc_duration_gb_s_usd) == (
        table.items["lambda_duration_gb_s_x86_64"].usd, table.items["pc_configured_gb_s_x86_64"].usd,
        table.items["pc_duration_gb_s_x86_64"].usd)
    assert p.snapstart_cache_gb_s_usd == table.items["snapstart_cache_gb_s"].usd
    assert p.snapstart_restore_gb_usd == table.items["snapstart_restore_gb"].usd
    assert p.gpu_endpoint_hour_usd == table.items["sagemaker_ml_g6_xlarge_hour"].usd
    assert p.request_usd == pytest.approx(0.20e-6, rel=1e-12)
    assert PRICE_SOURCES == price_sources(table)
    assert PRICE_SOURCES["gpu_endpoint_hour_usd"].endswith("AmazonSageMaker/current/us-east-1/index.csv")


def test_one_edit_of_the_table_changes_every_side() -> None:
    # GIVEN the table with one edited item per side
    table = load_prices()
    edited = PriceTable(table.region, table.currency, MappingProxyType({
        **table.items,
        "lambda_duration_gb_s_x86_64": replace(table.items["lambda_duration_gb_s_x86_64"], usd=0.00002),
        "lambda_requests_per_million": replace(table.items["lambda_requests_per_million"], usd=0.25),
        "snapstart_restore_gb": replace(table.items["snapstart_restore_gb"], usd=0.0002),
    }))
    # THEN the cost model and the simulator both follow it
    cost = CostModel.from_table(edited)
    assert (cost.on_demand_gb_s.usd, cost.request.usd) == (0.00002, 0.25 / 1_000_000)
    sim = SimulatorPrices.from_table(edited)
    assert (sim.ondemand_gb_s_usd, sim.request_usd, sim.snapstart_restore_gb_usd) == (0.00002, 0.25 / 1_000_000, 0.0002)
    assert cost.on_demand_hourly_usd(1.0, 1024) == pytest.approx(3600 * 0.00002)


def test_a_table_missing_an_item_names_it_and_the_file() -> None:
    table = load_prices()
    partial = PriceTable(table.region, table.currency,
                         {k: v for k, v in table.items.items() if not k.startswith("pc_duration")},
                         origin="custom.json")
    with pytest.raises(KeyError) as caught:
        CostModel.from_table(partial, "arm64")
    assert isinstance(caught.value, MissingPriceError)
    assert str(caught.value).startswith("no price 'pc_duration_gb_s' (architecture arm64) in custom.json; known items: ")
    assert (caught.value.name, caught.value.architecture, caught.value.origin) == ("pc_duration_gb_s", "arm64", "custom.json")
    with pytest.raises(MissingPriceError, match=r"no price 'snapstart_cache_gb_s' \(architecture x86_64\) in custom.json"):
        SimulatorPrices.from_table(PriceTable(table.region, table.currency,
                                     {k: v for k, v in table.items.items() if k != "snapstart_cache_gb_s"},
                                     origin="custom.json"))
    with pytest.raises(ValueError, match="architecture must be 'x86_64' or 'arm64', got 'sparc'"):
        CostModel.from_table(table, "sparc")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# the loader


def test_lookup_prefers_the_architecture_item_and_falls_back_to_the_shared_one() -> None:
    table = load_prices()
    assert table.price("pc_configured_gb_s", architecture="arm64") is table.items["pc_configured_gb_s_arm64"]
    assert table.price("snapstart_cache_gb_s", architecture="arm64") is table.items["snapstart_cache_gb_s"]
    assert "snapstart_cache_gb_s" in table and list(table) == list(table.items)
    with pytest.raises(MissingPriceError) as caught:
        table.price("lambda_duration_gb_s")  # only per-architecture items exist
    assert str(caught.value).startswith("no price 'lambda_duration_gb_s' in warmers/prices.json; known items: ")
    assert str(caught.value).endswith("Add it to warmers/prices.json with usd, unit and source")


def test_table_and_prices_are_read_only() -> None:
    table = load_prices()
    assert load_prices() is table  # read once per process
    with pytest.raises(TypeError):
        table.items["lambda_requests_per_million"] = Price(0.0, "x", "y", False)  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        table.items["lambda_requests_per_million"].usd = 0.0  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        table.region = "eu-west-1"  # type: ignore[misc]


def test_overrides_replace_known_items_only() -> None:
    table = load_prices()
    assert table.with_overrides({}, origin="nothing") is table
    new = Price(0.5, "instance-hour", "quote", False)
    merged = table.with_overrides({"sagemaker_ml_g6_xlarge_hour": new}, origin="cdk.json")
    assert merged.price("sagemaker_ml_g6_xlarge_hour") is new
    assert merged.overridden == ("sagemaker_ml_g6_xlarge_hour",) and merged.origin == "warmers/prices.json + cdk.json"
    assert table.price("sagemaker_ml_g6_xlarge_hour").usd == 1.1267  # the original is untouched
    with pytest.raises(MissingPriceError, match=r"no price 'sagemaker_ml_g7_hour' in warmers/prices.json"):
        table.with_overrides({"sagemaker_ml_g7_hour": new}, origin="cdk.json")


def test_the_file_is_package_data_of_warmers() -> None:
    shipped = resources.files("warmers").joinpath("prices.json")
    assert shipped.is_file()
    assert read_prices(shipped, origin="warmers/prices.json") == load_prices()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "prices.json" in pyproject["tool"]["setuptools"]["package-data"]["warmers"]


GOOD_ITEM = {"usd": 1.0, "unit": "hour", "source": "https://example.com"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "t.json: expected a JSON object with region, currency and items"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": GOOD_ITEM}, "prices": {}},
         "t.json: unknown key(s) prices; allowed: region, currency, items"),
        ({"currency": "USD", "items": {"a": GOOD_ITEM}}, "t.json: region must be a non-empty string, got None"),
        ({"region": "us-east-1", "currency": "USD", "items": {}},
         "t.json: items must be a non-empty object of name -> price"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": 1.0}},
         "t.json: items.a: expected an object with usd, unit, source, verified, note, got 1.0"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {**GOOD_ITEM, "usd": -0.1}}},
         "t.json: items.a: usd must be a finite number >= 0, got -0.1"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {**GOOD_ITEM, "usd": "1"}}},
         "t.json: items.a: usd must be a finite number >= 0, got '1'"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {**GOOD_ITEM, "usd": True}}},
         "t.json: items.a: usd must be a finite number >= 0, got True"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {"usd": 1.0, "unit": "hour"}}},
         "t.json: items.a: source must be a non-empty string, got None"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {**GOOD_ITEM, "unit": " "}}},
         "t.json: items.a: unit must be a non-empty string, got ' '"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {**GOOD_ITEM, "note": 3}}},
         "t.json: items.a: note must be a string, got 3"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {**GOOD_ITEM, "verified": "yes"}}},
         "t.json: items.a: verified must be true or false, got 'yes'"),
        ({"region": "us-east-1", "currency": "USD", "items": {"a": {**GOOD_ITEM, "eur": 1.0}}},
         "t.json: items.a: unknown key(s) eur; allowed: usd, unit, source, verified, note"),
    ],
)
def test_bad_table_is_refused_with_the_file_and_item(raw: Any, message: str) -> None:
    with pytest.raises(PriceTableError) as caught:
        parse_table(raw, origin="t.json")
    assert str(caught.value) == message


def test_unreadable_table_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match=r"^gone.json: cannot read the price table: .*No such file"):
        read_prices(tmp_path / "gone.json", origin="gone.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"region": "us-east-1",', encoding="utf-8")
    with pytest.raises(PriceTableError, match=r"^broken.json: cannot read the price table: Expecting"):
        read_prices(broken, origin="broken.json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"_doc": "x", "region": "eu-west-1", "currency": "USD",
                                "items": {"_comment": "skipped", "a": GOOD_ITEM}}), encoding="utf-8")
    table = read_prices(good, origin="good.json")
    assert table.items == {"a": Price(1.0, "hour", "https://example.com", False, "")}
    assert table.region == "eu-west-1"


def test_simulator_price_items_are_table_items() -> None:
    table = load_prices()
    for field_name, item in PRICE_ITEMS.items():
        assert table.price(item, architecture="x86_64").usd >= 0, field_name
    assert set(PRICE_ITEMS) == set(SimulatorPrices.__dataclass_fields__)
