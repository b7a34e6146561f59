"""``warmers.lmi``: the Lambda Managed Instances minimum, through the one ``plan_run``."""

from __future__ import annotations

import numpy as np
import pytest

from warmers.config import WarmerConfig, WarmerConfigError
from warmers.lmi import (
    DEFAULT_MIN_EXECUTION_ENVIRONMENTS,
    LmiConfigError,
    LmiSettings,
    request_usd,
)
from warmers.plan.policy import PlanError, WarmPlan
from warmers.plan.run import AccountLimits, MetricsMissing, plan_run
from warmers.pricing import load_prices
from warmers.series import MetricSeries

NOW = 1_800_000_000.0 - 1_800_000_000.0 % 60
HELD_MS = 600.0
ACCOUNT = AccountLimits(900, 1000, "test")


def series(in_flight: np.ndarray | float, minutes: int = 720) -> MetricSeries:
    conc = np.broadcast_to(np.asarray(in_flight, dtype=float), (minutes,)).copy()
    return MetricSeries(function_name="f", alias="live", start_s=NOW - minutes * 60.0,
                        invocations=conc * 100.0, concurrency=conc,
                        duration_ms=np.full(minutes, HELD_MS))


def config(**alias: object) -> WarmerConfig:
    entry = {"function_name": "f", "alias": "live", "strategy": "managed_instances",
             "floor": 3, "cap": 40, "budget_usd_per_hour": 5.0} | alias
    return WarmerConfig.from_dict({"aliases": [entry], "history_days": 0.5})


def run(cfg: WarmerConfig, got: MetricSeries | MetricsMissing | None,
        previous: WarmPlan | None = None, now_s: float = NOW):
    entry = plan_run({} if got is None else {"f:live": got}, {"f:live": previous}, ACCOUNT, cfg,
                     now_s).alias("f:live")
    return entry, {s.name: s.value for s in entry.steps}


def test_minimum_covers_the_forecast_peak_and_every_number_is_explained() -> None:
    # GIVEN 160 requests in flight all along, Python's 16 per 1-vCPU environment
    entry, v = run(config(), series(160.0))
    # THEN the minimum is ceil(160 / 16) = 10 environments, set now for the window ahead
    assert entry.plan.action == "managed_instances"
    assert entry.plan.min_execution_environments == 10
    assert entry.plan.provisioned_concurrency == 0
    assert v["demand"] == pytest.approx(160.0, rel=0.05) and v["cover"] == 10
    assert "is met" in next(s.source for s in entry.steps if s.name == "lead")
    names = [s.name for s in entry.steps]
    for earlier, later in [("demand", "cover"), ("cover", "lead"), ("lead", "hysteresis"),
                           ("hysteresis", "floor"), ("cap", "budget_units"),
                           ("budget_units", "provider_max"),
                           ("provider_max", "min_execution_environments")]:
        assert names.index(earlier) < names.index(later)
    # AND the hourly cost is instance price + management fee for the vCPU share
    table = load_prices()
    per_env = (table.price("ec2_m7g_large_hour").usd
               * (1 + table.price("lmi_management_fee_fraction").usd) / 2)
    assert entry.plan.hourly_cost_usd == pytest.approx(10 * per_env)
    assert entry.plan.ceiling == 40
    assert "LMI minimum 10" in entry.plan.reason


def test_a_forecast_of_zero_never_goes_below_the_configured_minimum() -> None:
    entry, v = run(config(floor=3), series(0.0))
    assert v["cover"] == 0
    assert entry.plan.min_execution_environments == 3
    assert "no traffic forecast: the configured minimum 3" in entry.plan.reason


def test_the_function_maximum_the_budget_and_the_provider_bound_the_minimum() -> None:
    # cap 6 (the function's MaxExecutionEnvironments)
    assert run(config(cap=6), series(160.0))[0].plan.min_execution_environments == 6
    # budget: $0.2/h pays floor($0.2 / per-environment price) environments
    per_env = LmiSettings().environment_hourly_usd()
    entry, v = run(config(budget_usd_per_hour=0.2), series(160.0))
    assert entry.plan.min_execution_environments == int(0.2 // per_env) == v["budget_units"]
    assert "by the budget" in entry.plan.reason
    # provider: 8 vCPUs at 2 vCPU per environment hold 4 environments
    cfg = config(managed_instances={"provider_max_vcpus": 8, "vcpus_per_environment": 2})
    entry, v = run(cfg, series(160.0))
    assert v["cover"] == 5  # 2 vCPU x 16 = 32 per environment
    assert entry.plan.min_execution_environments == 4 and entry.plan.ceiling == 4
    assert "capacity provider's 8 vCPUs" in entry.plan.reason


def test_lowered_only_with_hysteresis() -> None:
    # (the peak hold, tested below, off: the planner's stabilization window alone)
    cfg = config(managed_instances={"peak_hold_min": 0})
    first, _ = run(cfg, series(160.0), now_s=NOW)
    assert first.plan.min_execution_environments == 10
    # traffic falls to 32 in flight a minute later: the minimum is kept (cooldown)
    later, _ = run(cfg, series(32.0), previous=first.plan, now_s=NOW + 60)
    assert later.plan.min_execution_environments == 10
    assert "hysteresis: kept 10 instead of 2" in later.plan.reason
    # after the stabilization window with only low wants, it comes down to 3 (floor)
    again = later.plan
    for minute in range(2, 14):
        again = run(cfg, series(32.0), previous=again, now_s=NOW + 60 * minute)[0].plan
    assert again.min_execution_environments == 3


def test_a_peak_seen_once_is_held_for_peak_hold_min_then_released() -> None:
    # GIVEN a function idle but for a burst of 80 in flight in one minute, half an hour ago
    conc = np.zeros(720)
    conc[-30] = 80.0
    cfg = config(floor=1, managed_instances={"peak_hold_min": 120})
    entry, v = run(cfg, series(conc))
    # THEN the minimum holds ceil(80 / 16) = 5 environments though the forecast wants fewer
    assert v["cover"] < 5 and v["peak_hold"] == 5
    assert entry.plan.min_execution_environments == 5
    assert entry.plan.recent_peaks == ((NOW, 5),)
    assert "held 5 environments for the peak in flight seen in the last 120 min" in \
        entry.plan.reason
    # AND it is still held 100 minutes later, when the burst has left the last hour's metrics
    quiet = series(0.0)
    later, v = run(cfg, quiet, previous=entry.plan, now_s=NOW + 100 * 60)
    assert later.plan.min_execution_environments == 5 and v["peak_hold"] == 5
    # AND released once peak_hold_min has passed (down to the floor, through the hysteresis)
    plan = later.plan
    for minute in range(121, 140):
        plan = run(cfg, quiet, previous=plan, now_s=NOW + 60 * minute)[0].plan
    assert plan.recent_peaks == () and plan.min_execution_environments == 1
    # AND the saved plan keeps the held peaks
    assert WarmPlan.from_dict(entry.plan.to_dict()).recent_peaks == ((NOW, 5),)


def test_held_peaks_keep_one_entry_per_value_that_can_still_be_the_highest() -> None:
    from warmers.forecast import AliasForecast
    from warmers.plan.managed_instances import hold_peaks

    settings = LmiSettings(concurrency_per_environment=1, peak_hold_min=60)
    previous = run(config(), series(160.0))[0].plan
    previous = WarmPlan.from_dict(previous.to_dict() | {
        "recent_peaks": [(NOW - 3000.0, 9), (NOW - 1200.0, 4), (NOW - 600.0, 2)]})

    def forecast(peak: float) -> AliasForecast:
        return AliasForecast("f", "live", NOW, None, None, 0.0,  # type: ignore[arg-type]
                             recent_peak_concurrency=peak)

    # a new peak of 3 makes the older 2 useless; 9 and 4 can still be the highest later
    assert hold_peaks(forecast(3.0), previous, settings, now_s=NOW) == (
        (NOW - 3000.0, 9), (NOW - 1200.0, 4), (NOW, 3))
    # an hour on, 9 has left the window; an unknown peak (NaN) adds nothing
    assert hold_peaks(forecast(float("nan")), previous, settings, now_s=NOW + 700.0) == (
        (NOW - 1200.0, 4), (NOW - 600.0, 2))
    # peak_hold_min 0: nothing is held
    off = LmiSettings(peak_hold_min=0)
    assert hold_peaks(forecast(50.0), previous, off, now_s=NOW) == ()


def test_metrics_missing_for_a_new_function_plans_the_configured_minimum() -> None:
    entry, _ = run(config(floor=3), MetricsMissing("no datapoints: new function"))
    assert entry.plan.min_execution_environments == 3 and entry.plan.fallback
    assert "a new function?" in entry.plan.reason
    assert any("metrics unavailable" in n for n in entry.notes)
    # with a last good minimum, that one is kept (clamped)
    held = run(config(), series(160.0))[0].plan
    kept, _ = run(config(), MetricsMissing("GetMetricData throttled"), previous=held,
                  now_s=NOW + 60)
    assert kept.plan.min_execution_environments == 10 and kept.plan.fallback


def test_a_short_forecast_lead_is_reported_as_late() -> None:
    cfg = WarmerConfig.from_dict({"aliases": [{"function_name": "f", "alias": "live",
                                               "strategy": "managed_instances", "floor": 0,
                                               "managed_instances": {"scale_out_lead_min": 20}}],
                                  "history_days": 0.5})
    entry, v = run(cfg, series(50.0))
    assert "may come late" in entry.plan.reason and v["lead"] == 14


def test_plan_round_trips_through_its_saved_form() -> None:
    plan = run(config(), series(160.0))[0].plan
    again = WarmPlan.from_dict(plan.to_dict())
    assert again.min_execution_environments == 10 and again.action == "managed_instances"


def test_config_validation_names_the_entry_and_field() -> None:
    with pytest.raises(WarmerConfigError, match=r"aliases\[0\]\.managed_instances: unknown keys "
                                          r"\['vcpu'\]"):
        config(managed_instances={"vcpu": 1})
    with pytest.raises(WarmerConfigError, match=r"aliases\[0\]: managed_instances is only for "
                                          "strategy 'managed_instances'"):
        config(strategy="provisioned", managed_instances={})
    with pytest.raises(WarmerConfigError, match="provider_max_vcpus must be 2..15000"):
        config(managed_instances={"provider_max_vcpus": 1})
    with pytest.raises(LmiConfigError, match="vcpus_per_environment"):
        LmiSettings(vcpus_per_environment=0.5)
    with pytest.raises(WarmerConfigError, match=r"managed_instances: peak_hold_min must be 0..20160"):
        config(managed_instances={"peak_hold_min": -1})
    # a minimum that alone costs more than the budget is refused before planning
    with pytest.raises(PlanError, match="minimum 40 LMI environments cost"):
        plan_run({}, {}, ACCOUNT, config(floor=40, budget_usd_per_hour=0.1), NOW)


def test_documented_defaults() -> None:
    assert LmiSettings().per_environment == 16  # 16 per vCPU, Python
    assert DEFAULT_MIN_EXECUTION_ENVIRONMENTS == 3
    assert request_usd() == pytest.approx(0.20 / 1_000_000)
