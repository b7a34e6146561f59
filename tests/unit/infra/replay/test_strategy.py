"""The replay's ``on`` run deploys what ``warmers.strategy.recommend_strategy`` advises for the
replayed function (``infra.replay.strategy``), and the runner and warmer document follow it."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from infra.local.spec import AliasSpec, FunctionSpec
from infra.replay.runner import ReplayOptions, configure
from infra.replay.services import replay_warmer_document
from infra.replay.strategy import choose_strategy, work_percentiles_ms
from warmers.simulator.calibration import Timing

#: the trace's duration percentiles of the demo's function bb5d90ea (ms)
DEMO_PCT_MS = np.array([673.0, 819.0, 2147.0, 2893.0, 3527.0, 7415.0, 33736.0])


def _workload(pct_ms: np.ndarray) -> types.SimpleNamespace:
    return types.SimpleNamespace(duration_pct_ms=pct_ms)


def _calibration(init_p50: float, init_p95: float) -> types.SimpleNamespace:
    return types.SimpleNamespace(init_ms=Timing(init_p50, init_p95),
                                 restore_ms=Timing(27.8, 32.7))


def test_work_is_the_trace_durations_scaled_as_the_replay_sends_them() -> None:
    w = _workload(DEMO_PCT_MS)
    assert work_percentiles_ms(w, 10.0).tolist() == pytest.approx(  # type: ignore[arg-type]
        [67.3, 81.9, 214.7, 289.3, 352.7, 741.5, 3373.6])
    # unscaled, clipped at the replay's most simulated work (10 s)
    assert work_percentiles_ms(w, 10.0, scale_durations=False)[-1] == 10_000.0  # type: ignore[arg-type]


def test_a_slow_init_against_the_sla_deploys_snapstart() -> None:
    # GIVEN the shipped calibration's init (1,646 / 1,912 ms) and the demo's function at x10
    choice = choose_strategy(_workload(DEMO_PCT_MS), sla_ms=2000.0, time_scale=10.0,  # type: ignore[arg-type]
                             calibration=_calibration(1646.2, 1911.8))  # type: ignore[arg-type]
    # THEN on demand answers ~40 % of cold starts late, a restore almost none: SnapStart
    assert choice.strategy == "snapstart" and not choice.forced
    assert choice.advice is not None and 0.3 < choice.advice.late_fraction_on_demand < 0.5
    assert choice.advice.late_fraction_snapstart < 1e-3
    words = choice.words()
    assert words.startswith("'on' deploys SnapStart (every cold start a restore")
    assert "as warmers.strategy.recommend_strategy advises" in words
    assert f"{choice.advice.late_fraction_on_demand:.2%} of its requests after the 2000 ms SLA" in words


def test_an_init_that_fits_the_sla_stays_on_demand_with_provisioned_concurrency() -> None:
    # a 5 s SLA leaves room for a 400 ms init after the longest work (3,374 ms at x10)
    choice = choose_strategy(_workload(DEMO_PCT_MS), sla_ms=5000.0, time_scale=10.0,  # type: ignore[arg-type]
                             calibration=_calibration(300.0, 400.0))  # type: ignore[arg-type]
    assert choice.strategy == "provisioned"
    assert choice.words().startswith("'on' deploys on demand with the warmer's provisioned "
                                     "concurrency")


def test_a_forced_strategy_is_said_and_not_recommended() -> None:
    choice = choose_strategy(_workload(DEMO_PCT_MS), sla_ms=2000.0, time_scale=10.0,  # type: ignore[arg-type]
                             calibration=_calibration(1646.2, 1911.8),  # type: ignore[arg-type]
                             forced="provisioned")
    assert choice.strategy == "provisioned" and choice.advice is None and choice.forced
    assert "forced by --strategy provisioned" in choice.words()
    with pytest.raises(ValueError, match="'provisioned' or 'snapstart'"):
        choose_strategy(_workload(DEMO_PCT_MS), sla_ms=2000.0, time_scale=10.0,  # type: ignore[arg-type]
                        forced="ping")  # type: ignore[arg-type]


def _spec(tmp_path: Path, *, snap_start: bool = True) -> FunctionSpec:
    return FunctionSpec(name="Agent", handler="h.handler", code_dir=tmp_path,
                        snap_start=snap_start, aliases=(AliasSpec("live", "1"),),
                        environment={"WARMSTART_SLA_MS": "2000"})


@pytest.mark.parametrize(("config", "strategy", "snap"), [
    ("off", "snapstart", False), ("off", "provisioned", False),
    ("on", "provisioned", False), ("on", "snapstart", True)])
def test_snapstart_only_in_on_with_the_snapstart_strategy(tmp_path: Path, config: str,
                                                          strategy: str, snap: bool) -> None:
    got = configure(_spec(tmp_path), config, strategy)  # type: ignore[arg-type]
    assert got.snap_start is snap
    assert all(a.provisioned_concurrency == 0 for a in got.aliases)


def test_options_refuse_an_unknown_strategy() -> None:
    assert ReplayOptions(strategy="snapstart").strategy == "snapstart"
    with pytest.raises(ValueError, match="strategy must be one of"):
        ReplayOptions(strategy="ping")


def test_the_warmer_document_carries_the_strategy_and_the_late_fraction_inputs() -> None:
    doc = replay_warmer_document(function_name="Agent", alias="live", memory_mb=2048, floor=0,
                                 cap=0, budget_usd_per_hour=1.0, degradation_parameter=None,
                                 available_concurrency=None, history_min=360,
                                 strategy="snapstart", sla_ms=2000.0,
                                 cold_start_ms=(27.8, 32.7))
    (alias,) = doc["aliases"]
    assert alias["strategy"] == "snapstart"
    assert (alias["sla_ms"], alias["cold_start_p50_ms"], alias["cold_start_p95_ms"]) == (
        2000.0, 27.8, 32.7)
    from warmers.config import WarmerConfig

    policy = WarmerConfig.from_dict(doc).policies[0]  # the warmer reads it
    assert policy.strategy == "snapstart" and policy.cold_start_p50_ms == 27.8
    plain = replay_warmer_document(function_name="Agent", alias="live", memory_mb=2048, floor=1,
                                   cap=5, budget_usd_per_hour=1.0, degradation_parameter=None,
                                   available_concurrency=None, history_min=360)
    assert plain["aliases"][0]["strategy"] == "provisioned"
    assert "sla_ms" not in plain["aliases"][0]
