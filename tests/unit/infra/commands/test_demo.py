"""`warmstart demo` output places: out/demo by default, bench/results only with --publish."""

from __future__ import annotations

import argparse
import types
from pathlib import Path

import pytest

from infra.commands import demo


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(argv)


def test_outputs_go_to_out_demo_and_are_published_only_on_request() -> None:
    args = _parse([])
    assert args.out is None and args.publish is False  # run(): OUT_DIR/demo, OUT_DIR = out
    args = _parse(["--out", "elsewhere", "--publish"])
    assert args.out == Path("elsewhere") and args.publish is True


def test_publish_copies_the_report_and_table(tmp_path: Path) -> None:
    out, published = tmp_path / "out", tmp_path / "bench" / "results"
    out.mkdir()
    (out / demo.REPORT_NAME).write_text("<html>report</html>", encoding="utf-8")
    (out / demo.TABLE_NAME).write_text("| a |", encoding="utf-8")
    (out / "logs").mkdir()
    copies = demo.publish(out, published)
    assert sorted(p.name for p in copies) == sorted([demo.REPORT_NAME, demo.TABLE_NAME])
    assert (published / demo.TABLE_NAME).read_text(encoding="utf-8") == "| a |"
    assert sorted(p.name for p in published.iterdir()) == sorted([demo.REPORT_NAME,
                                                                   demo.TABLE_NAME])


def test_publish_without_results_fails_and_copies_nothing_partial(tmp_path: Path) -> None:
    out, published = tmp_path / "out", tmp_path / "published"
    out.mkdir()
    (out / demo.REPORT_NAME).write_text("x", encoding="utf-8")  # the table is missing
    with pytest.raises(OSError):
        demo.publish(out, published)
    assert not published.exists() or not any(published.iterdir())


def test_bad_flags_and_a_missing_stack_are_one_line_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from infra.cli import main

    assert main(["demo", "--minutes", "0"]) == 2
    assert capsys.readouterr().err == ("warmstart demo: error: --minutes must be a positive "
                                       "integer, got 0 (see warmstart demo --help)\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["demo", "--no-synth", "--cdk-out", str(empty), "--out", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err == (f"warmstart demo: error: no *.template.json in {empty}; "
                                       "run `npx cdk synth` first\n")


def _run(config: str, **summary: float) -> types.SimpleNamespace:
    return types.SimpleNamespace(config=config, summary=types.SimpleNamespace(**summary))


def test_the_warmer_bounds_are_cdk_json_s_provisioned_variant(tmp_path: Path) -> None:
    floor, cap, objective, words = demo.warmer_bounds(demo.REPO_ROOT / "cdk.json")
    # cdk.json: variants.provisioned ... min 1, max 5, objective sla
    assert (floor, cap, objective) == (1, 5, "sla")
    assert "floor 1, cap 5" in words and "objective sla" in words
    bad = tmp_path / "cdk.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="no provisioned variant"):
        demo.warmer_bounds(bad)


def test_simulator_comparison_says_within_20_percent_or_why_not() -> None:
    close = [_run("off", cold_starts=11, sim_cold_starts=10.0),
             _run("on", cold_starts=2, sim_cold_starts=2.0)]
    assert demo.simulator_words(close).endswith("(within 20 %).")
    apart = [_run("off", cold_starts=36, sim_cold_starts=7.0),
             _run("on", cold_starts=2, sim_cold_starts=2.0)]
    words = demo.simulator_words(apart)
    assert "off 36 replayed vs 7 simulated" in words and "off differ by more than 20 %" in words
    assert "time scale" in words and "2 cores" in words


def test_cold_overflow_answers_are_put_beside_the_overflow_call() -> None:
    on = _run("on", overflowed=3, cold_overflowed=3, cold_overflow_p50_ms=900.0, overflow_call_p50_ms=300.0)
    assert "answer p50 900 ms from sending, the overflow call alone p50 300 ms (3.0x" in \
        demo.overflow_words([_run("off", cold_overflowed=0), on])
    assert demo.overflow_words([_run("on", overflowed=0)]).startswith("no request")
    warm = _run("on", overflowed=4, cold_overflowed=0, overflow_p50_ms=800.0,
                overflow_call_p50_ms=400.0)
    assert "4 request(s) answered by overflow" in demo.overflow_words([warm])


def test_pc_words_say_what_the_warmer_planned_and_why() -> None:
    plans = [types.SimpleNamespace(provisioned_concurrency=1, t_s=0.0, reason="floor 1"),
             types.SimpleNamespace(provisioned_concurrency=2, t_s=60.0, reason="forecast")]
    on = types.SimpleNamespace(config="on", plans=plans, t0_s=60.0,
                               summary=types.SimpleNamespace(pc_raises=2))
    words = demo.pc_words([on])
    assert "2 plans; provisioned concurrency 1 from its first, 1.0 trace min before" in words
    assert "most 2, raised 2 time(s)" in words and words.endswith("reason: floor 1.")
    assert demo.pc_words([types.SimpleNamespace(config="on", plans=[])]).startswith("'on' had no")


def test_the_demo_endpoint_is_a_planned_inference_component_the_simulator_models_too(
        tmp_path: Path) -> None:
    import json

    from infra.local.endpoint_capacity import planned_endpoint_from_cdk_json
    from warmers.simulator.calibration import load_calibration

    planned, model, words = planned_endpoint_from_cdk_json(demo.REPO_ROOT / "cdk.json")
    # cdk.json sets no gpu_endpoint.options.capacity: the planner's defaults, requests per copy
    # as measured for the simulator, 10 minutes of provisioning, a failed answer at the
    # planner's default price
    from functions.runtime.contract.warmer_document import DEFAULT_FAILED_ANSWER_USD

    assert (planned.floor, planned.cap, planned.failed_answer_usd) == (
        0, 2, DEFAULT_FAILED_ANSWER_USD)
    assert planned.concurrent_requests_per_copy == load_calibration().endpoint_concurrency
    assert (model.mode, model.cap, model.concurrent_requests_per_instance,
            model.provisioning_delay_s) == ("planned", 2, planned.concurrent_requests_per_copy,
                                            600.0)
    assert "in service 10 trace min later" in words and "production variant" in words
    # cdk.json's gpu_endpoint.capacity wins where it says
    doc = json.loads((demo.REPO_ROOT / "cdk.json").read_text(encoding="utf-8"))
    doc["context"]["warmstart"]["gpu_endpoint"]["capacity"] = {
        "cap": 3, "concurrent_requests_per_instance": 2, "failed_answer_usd": 0.05}
    mine = tmp_path / "cdk.json"
    mine.write_text(json.dumps(doc), encoding="utf-8")
    planned, model, words = planned_endpoint_from_cdk_json(mine)
    assert (planned.cap, planned.concurrent_requests_per_copy, planned.failed_answer_usd) == (
        3, 2, 0.05)
    assert model.failed_answer_usd == 0.05 and "$0.05 per failed answer" in words
    assert "cdk.json gpu_endpoint.capacity" in words
    # a stack that deploys an inference component: the demo's endpoint is what it deploys
    doc["context"]["warmstart"]["gpu_endpoint"]["target"] = "inference_component"
    mine.write_text(json.dumps(doc), encoding="utf-8")
    words = planned_endpoint_from_cdk_json(mine)[2]
    assert "deploys it so too (gpu_endpoint.target inference_component)" in words
    assert "production variant" not in words
    del doc["context"]["warmstart"]["gpu_endpoint"]["target"]
    doc["context"]["warmstart"]["gpu_endpoint"]["capacity"] = {"cap": -1}
    mine.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match="gpu_endpoint.capacity"):
        planned_endpoint_from_cdk_json(mine)
    doc["context"]["warmstart"]["gpu_endpoint"]["capacity"] = {
        "concurrent_requests_per_instance": 2.5}
    mine.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match="must be an integer"):
        planned_endpoint_from_cdk_json(mine)


def test_endpoint_words_say_when_the_copy_served_and_what_the_cold_starts_got() -> None:
    from infra.replay.summary import EndpointUsage

    use = EndpointUsage(0.35, 1, -3.0, 7.0, 8.0, reason="1 instance(s) pay")
    on = _run("on", endpoint=use, cold_degraded=2, cold_overflowed=1)
    words = demo.endpoint_words([_run("off", endpoint=None), on])
    assert "asked for at slice minute -3.0, in service at slice minute 7.0" in words
    assert "published in service at slice minute 8.0" in words and "21.0 copy-minutes" in words
    assert "degraded 2, by overflow 1" in words and words.endswith("1 instance(s) pay.")
    assert demo.endpoint_words([_run("on", endpoint=None)]).startswith("'on' had no planned")


def test_calibrating_an_agent_cdk_json_does_not_declare_is_a_clear_error(tmp_path: Path) -> None:
    from infra.replay.services import ServiceUnavailable

    spec = types.SimpleNamespace(name="f", environment={"WARMSTART_AGENT_NAME": "no-such-agent"})
    app = types.SimpleNamespace(gateway=types.SimpleNamespace(function_name="f"),
                                function=lambda name: spec, functions=(spec,))
    with pytest.raises(ServiceUnavailable, match="calibrating agent 'no-such-agent' failed"):
        demo.calibrated(app, tmp_path / "calibration.json")
    assert not (tmp_path / "calibration.json").exists()  # nothing half-written


def test_strategy_defaults_to_auto_and_off_runs_to_one() -> None:
    args = _parse([])
    assert args.strategy == "auto" and args.off_runs == 1
    args = _parse(["--strategy", "snapstart", "--off-runs", "3"])
    assert args.strategy == "snapstart" and args.off_runs == 3
    with pytest.raises(SystemExit):
        _parse(["--strategy", "lmi"])
    with pytest.raises(SystemExit):
        _parse(["--off-runs", "0"])


def _off(failed: int, late: int, errors: int, usd: float, init_p50_ms: float) -> object:
    return types.SimpleNamespace(summary=types.SimpleNamespace(
        failed_answers=failed, late=late, errors=errors, usd=usd, init_p50_ms=init_p50_ms,
        degraded=0, shed=failed - late - errors))


def test_off_variability_gives_the_spread_of_each_replay_and_its_evidence() -> None:
    # GIVEN three replays of 'off' on the same slice, one slowed by the host (longer inits)
    runs = [_off(22, 22, 0, 0.0625, 1760.0), _off(36, 1, 35, 0.3815, 4120.0),
            _off(25, 24, 1, 0.0710, 1902.0)]
    words = demo.off_variability(runs)  # type: ignore[arg-type]
    # THEN the range of failed answers and USD, each run's parts and init p50 are said
    assert words.startswith("'off' over 3 replays of the same slice: failed answers 22 to 36, "
                            "USD 0.0625 to 0.3815")
    assert "36 failed (1 late, 0 degraded, 0 shed, 35 errors), $0.3815" in words
    assert "init p50 per run 1,760, 4,120, 1,902 ms (REPORT)" in words
    assert "the table shows the first replay" in words


def test_off_variability_of_one_run_says_it_was_not_measured_and_none_is_an_error() -> None:
    assert "not measured here" in demo.off_variability([_off(3, 3, 0, 0.01, 1700.0)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no 'off' run"):
        demo.off_variability([])


def test_publish_copies_the_overview_picture_when_there_is_one(tmp_path: Path) -> None:
    out, published = tmp_path / "out", tmp_path / "pub"
    out.mkdir()
    for name in (demo.REPORT_NAME, demo.TABLE_NAME, demo.OVERVIEW_NAME):
        (out / name).write_bytes(b"x")
    copies = demo.publish(out, published)
    assert sorted(p.name for p in copies) == sorted(
        [demo.REPORT_NAME, demo.TABLE_NAME, demo.OVERVIEW_NAME])
