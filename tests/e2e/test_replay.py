"""`warmstart replay` end to end: a short slice of the real trace through the real local stack.

Real processes throughout: the reference agent in emulator execution environments, the gateway,
a moto server, the warmer's ``run_once`` against them, the asyncio HTTP client. The function is
the one the synthesized template describes (handler, memory, SLA), built directly here so the
test does not pay for a CDK synth.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from infra.cli import main
from infra.local.spec import AliasSpec, FunctionSpec, GatewayRoute, LocalApp
from infra.replay.runner import ReplayOptions, RunResult, run_replay
from infra.replay.workload import build_workload, read_trace

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests/data/traces/azure2019_invocations.csv"
#: sparse HTTP function: 3 + 2 invocations in trace minutes 401-402
FUNCTION = "57bcf6dbc41e"
START_MINUTE, MINUTES = 401, 2
TIME_SCALE = 30.0

pytestmark = pytest.mark.timeout(120)


def _agent_app() -> LocalApp:
    spec = FunctionSpec(
        name="AgentFunction", handler="functions.agent.handler.handler", code_dir=REPO,
        memory_mb=2048, timeout_s=30.0,
        environment={"WARMSTART_MODEL_DIR": str(REPO / "layers/model/artifact"),
                     "WARMSTART_SLA_MS": "2000",
                     "WARMSTART_DEGRADATION_PARAMETER": "/warmstart/test/degradation-level"},
        aliases=(AliasSpec("live", "1"),))
    return LocalApp((spec,), GatewayRoute("AgentFunction", "live"))


def _children() -> list[int]:
    """Live (non-zombie) child processes of this test process."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    workload = build_workload(read_trace(TRACE), FUNCTION, start_minute=START_MINUTE,
                              minutes=MINUTES, history_min=120)
    logs = tmp_path_factory.mktemp("replay-logs")
    before = set(_children())
    results = {}
    for config, floor in (("off", 0), ("on", 1)):
        options = ReplayOptions(time_scale=TIME_SCALE, pc_floor=floor, pc_cap=2, overflow=False,
                                history_min=120, log_dir=logs, progress=io.StringIO())
        results[config] = run_replay(_agent_app(), workload, config, options,  # type: ignore[arg-type]
                                     say=lambda _text: None)
    assert set(_children()) <= before, "the replay left processes running"
    return results


def test_every_request_is_sent_answered_and_accounted(runs: dict[str, RunResult]) -> None:
    # GIVEN a 2-minute slice with 5 invocations WHEN it is replayed off and on
    for result in runs.values():
        s = result.summary
        # THEN each invocation became one real HTTP request with an answer
        assert s.requests == result.workload.n_requests == 5
        assert s.answered == s.requests
        # AND each answer was joined with the emulator's record of its invocation
        assert all(r.gateway_request_id in result.observations for r in result.records)
        # AND the paths add up to the answers
        paths = [r.path for r in result.records]
        assert len(paths) == sum(paths.count(p) for p in ("local", "overflow", "degraded", "shed"))
        assert s.overflowed + s.degraded + s.shed + paths.count("local") == s.answered
        # AND requests went out on schedule (open loop, scaled time)
        assert [r.index for r in result.records] == list(range(s.requests))
        assert max(r.sent_s - r.planned_s for r in result.records) < 0.5


def test_scale_from_zero_starts_cold_without_provisioned_concurrency(
        runs: dict[str, RunResult]) -> None:
    off = runs["off"]
    first = off.observations[off.records[0].gateway_request_id]
    assert first.cold_start and first.init_type == "on-demand"
    assert off.summary.cold_starts >= 1
    assert off.summary.provisioned_gb_s == 0.0
    assert not off.plans


def test_warmer_provisions_ahead_and_removes_cold_starts(runs: dict[str, RunResult]) -> None:
    on, off = runs["on"], runs["off"]
    # the real warmer planned at least the floor and the emulator allocated it before the slice
    assert on.plans and on.plans[0].provisioned_concurrency >= 1
    assert on.samples[0].pc_allocated >= 1
    assert on.summary.provisioned_gb_s > 0.0
    served = [on.observations[r.gateway_request_id].init_type for r in on.records]
    assert "provisioned-concurrency" in served
    assert on.summary.cold_starts < off.summary.cold_starts


def test_costs_come_from_measured_durations(runs: dict[str, RunResult]) -> None:
    for result in runs.values():
        billed_ms = sum(o.billed_duration_ms for o in result.observations.values())
        expected_gb_s = billed_ms / 1000.0 * TIME_SCALE * 2048 / 1024
        assert result.summary.invocation_gb_s == pytest.approx(expected_gb_s)
        assert result.summary.lambda_usd > 0.0


@pytest.mark.parametrize(("argv", "message"), [
    (["--trace", str(TRACE), "--function", "ffffffffffff"], "no function 'ffffffffffff'"),
    (["--trace", str(TRACE), "--function", FUNCTION, "--start-minute", "0", "--minutes", "3"],
     "the slice is empty"),
    (["--trace", str(REPO / "tests/data/traces/missing_invocations.csv"), "--function", FUNCTION],
     "does not exist"),
    (["--trace", str(TRACE), "--function", FUNCTION, "--start-minute", "479", "--minutes", "5"],
     "leaves the trace"),
    (["--trace", str(TRACE), "--function", FUNCTION, "--time-scale", "0"], "time-scale"),
])
def test_bad_input_is_refused_with_a_clear_message(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", *argv]) == 2
    err = capsys.readouterr().err
    assert "warmstart replay: error:" in err and message in err


def test_server_timing_and_provisioned_gb_s_by_hand() -> None:
    from infra.replay.client import parse_server_timing
    from infra.replay.observe import StateSample
    from infra.replay.summary import provisioned_gb_s

    assert parse_server_timing('init;dur=12.5, model;dur="3", infer, bad;dur=x') == {
        "init": 12.5, "model": 3.0, "infer": 0.0}
    assert parse_server_timing(None) == {}
    # 2 environments of 1024 MB for 60 s, then 4 for 30 s: 2*60 + 4*30 = 240 GB-s
    samples = [StateSample(0.0, 0, 2, 2, 2), StateSample(60.0, 0, 4, 4, 4),
               StateSample(90.0, 0, 0, 0, 0)]
    assert provisioned_gb_s(samples, 1024) == pytest.approx(240.0)
    assert provisioned_gb_s(samples[:1], 1024) == 0.0


def test_an_overflow_endpoint_that_cannot_start_leaves_the_run_without_overflow() -> None:
    from infra.local.services import GpuEndpointService
    from infra.replay.runner import _OptionalGpu

    # GIVEN the stack's GPU endpoint service with an interpreter that exits at once
    notes: list[str] = []
    said: list[str] = []
    gpu = _OptionalGpu(GpuEndpointService(python="/bin/false", start_timeout_s=5.0,
                                          functions=["AgentFunction"]), "on", notes, said.append)
    # WHEN the stack starts it
    gpu.start()
    # THEN the run goes on without overflow and says why
    assert not gpu.up and gpu.endpoint.startswith("not running")
    assert notes and notes[0].startswith("no overflow: the GPU endpoint")
    assert said and "running without overflow" in said[0]
    assert gpu.function_environment(_agent_app().functions[0]) == {}
    gpu.stop()
