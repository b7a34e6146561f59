"""``warmers.strategy.advise_managed_instances``: LMI where it is cheaper at no more failed
answers, with the shipped prices (``warmers/prices.json``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.warmers.test_strategy import INIT, LEVELS, RESTORE, _uniform
from warmers.cost import CostModel
from warmers.lmi import LmiSettings, request_usd
from warmers.strategy import LmiAdvice, advise_managed_instances, recommend_strategy

COST = CostModel.us_east_1("arm64")
SETTINGS = LmiSettings()  # m7g.large, 1 vCPU per environment, 16 requests each (Python)


def _advise(peak: np.ndarray, mean: np.ndarray, *, memory_mb: int = 2048,
            **kwargs: object) -> LmiAdvice:
    calls = mean * 60.0 / 2.0  # 2 s per request (an agent calling an LLM)
    return advise_managed_instances(
        peak, mean, calls, memory_mb=memory_mb, on_demand_gb_s_usd=COST.on_demand_gb_s.usd,
        pc_configured_gb_s_usd=COST.pc_configured_gb_s.usd,
        pc_duration_gb_s_usd=COST.pc_duration_gb_s.usd, lambda_request_usd=COST.request.usd,
        environment_hourly_usd=SETTINGS.environment_hourly_usd(), lmi_request_usd=request_usd(),
        per_environment=SETTINGS.per_environment, **kwargs)  # type: ignore[arg-type]


STEADY_MEAN = np.full(480, 20.0)  # 20 in flight all day: 600 requests a minute
STEADY_PEAK = np.full(480, 26.0)


def test_a_steady_busy_agent_at_2048_mb_is_advised_lmi() -> None:
    advice = _advise(STEADY_PEAK, STEADY_MEAN)
    # 26 in flight -> 2 environments, the minimum 3: 3 x 8 h = 24 environment-hours
    assert advice.environment_hours == pytest.approx(24.0)
    assert advice.ramp_minutes == 0
    assert advice.chosen and advice.lmi_usd < 0.9 * advice.lambda_usd
    assert advice.reason.startswith("LMI:")
    # the Lambda side is a lower bound: provisioned concurrency sized exactly to the mean
    gb_s = 20.0 * 2.0 * 480 * 60
    pc = gb_s * (COST.pc_configured_gb_s.usd + COST.pc_duration_gb_s.usd)
    requests = 480 * 600 * COST.request.usd
    assert advice.lambda_usd == pytest.approx(min(pc, gb_s * COST.on_demand_gb_s.usd) + requests)
    strategy = recommend_strategy(2000.0, INIT, RESTORE, LEVELS, _uniform(0.0, 1000.0), lmi=advice)
    assert strategy.strategy == "managed_instances" and "LMI:" in strategy.reason


def test_the_same_traffic_at_128_mb_stays_on_lambda() -> None:
    advice = _advise(STEADY_PEAK, STEADY_MEAN, memory_mb=128)
    assert not advice.chosen and advice.lmi_usd > advice.lambda_usd
    assert "LMI must cost under 90%" in advice.reason
    strategy = recommend_strategy(10_000.0, INIT, RESTORE, LEVELS, _uniform(0.0, 1000.0), lmi=advice)
    assert strategy.strategy == "provisioned"


def test_a_quiet_function_pays_for_lmis_minimum_and_stays_on_lambda() -> None:
    mean, peak = np.full(480, 0.05), np.full(480, 1.0)
    advice = _advise(peak, mean)
    assert not advice.chosen and advice.environment_hours == pytest.approx(24.0)


def test_traffic_that_more_than_doubles_within_the_lead_is_not_moved_to_lmi() -> None:
    peak, mean = STEADY_PEAK.copy(), STEADY_MEAN.copy()
    peak[300:310], mean[300:310] = 400.0, 300.0  # a burst: 2 -> 25 environments in a minute
    advice = _advise(peak, mean)
    assert advice.ramp_minutes == 1 and not advice.chosen
    assert "more than doubles within 5 minutes" in advice.reason
    # a ramp LMI's scaling follows (x2 per minute from the minimum) is no ramp
    slow = STEADY_PEAK.copy()
    slow[300:305] = [96.0, 192.0, 384.0, 400.0, 400.0]
    assert _advise(slow, STEADY_MEAN).ramp_minutes == 0


def test_a_function_lmi_cannot_run_is_never_advised_lmi() -> None:
    advice = _advise(STEADY_PEAK, STEADY_MEAN, supported=False)
    assert not advice.chosen and "cannot run on LMI" in advice.reason


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"peak": np.full(3, 1.0), "mean": np.full(4, 1.0)}, "of one length"),
    ({"peak": np.array([1.0, -1.0]), "mean": np.zeros(2)}, "concurrency_max must be finite"),
    ({"peak": np.array([1.0, np.nan]), "mean": np.zeros(2)}, "concurrency_max must be finite"),
    ({"per_environment": 0}, "per_environment >= 1"),
    ({"margin_fraction": 1.0}, "margin_fraction must be in"),
    ({"environment_hourly_usd": -1.0}, "environment_hourly_usd must be a finite price"),
])
def test_bad_input_is_refused_naming_it(kwargs: dict[str, object], message: str) -> None:
    peak = kwargs.pop("peak", STEADY_PEAK)
    mean = kwargs.pop("mean", STEADY_MEAN)
    args: dict[str, object] = {
        "memory_mb": 2048, "on_demand_gb_s_usd": COST.on_demand_gb_s.usd,
        "pc_configured_gb_s_usd": COST.pc_configured_gb_s.usd,
        "pc_duration_gb_s_usd": COST.pc_duration_gb_s.usd, "lambda_request_usd": COST.request.usd,
        "environment_hourly_usd": SETTINGS.environment_hourly_usd(),
        "lmi_request_usd": request_usd(), "per_environment": 16, **kwargs}
    with pytest.raises(ValueError, match=message):
        advise_managed_instances(peak, mean, np.asarray(mean) * 30.0, **args)  # type: ignore[arg-type]
