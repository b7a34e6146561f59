"""The edge property under fuzzing, the bounded profile (``make test``): a few hundred
Hypothesis examples per environment, derandomized (the same examples on every run), against
the real handlers of the intent agent, the lookup agent and a minimal user agent.

The strategies and the property are `bench.fuzz_events`; the long profile (>= 100,000
examples, new seeds) is ``bench/bench_fuzz.py``. A failing example is shrunk by Hypothesis and
reported with the problems the property found.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from bench import fuzz_events as fe
from infra.local.tool_stub import ToolStub

#: Examples per environment (three environments: ~15 s in all on a 2-core machine).
EXAMPLES = 120


@pytest.fixture(scope="module")
def environments() -> Iterator[dict[str, fe.Environment]]:
    stub = ToolStub().start()
    try:
        envs = {env.name: env for env in fe.environments(stub.url)}
        with contextlib.redirect_stdout(io.StringIO()), \
                fe.probing_logs([e.handler.config.service_name for e in envs.values()]) as probe:
            yield envs
        assert probe.unwritable == 0, "a log record could not be written as UTF-8"
    finally:
        stub.stop()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["intent", "lookup", "user"])
def test_every_fuzzed_event_gets_a_clean_answer_and_the_environment_keeps_serving(
        environments: dict[str, fe.Environment], name: str) -> None:
    env = environments[name]

    @settings(max_examples=EXAMPLES, database=None, deadline=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])
    @given(case=fe.cases(env))
    def holds(case: fe.Case) -> None:
        problems = fe.run_case(env, case)
        assert problems == [], f"{problems} for {fe.describe(case)}"

    holds()


def test_the_property_fails_on_what_it_must_find(environments: dict[str, fe.Environment]) -> None:
    """The property is not vacuous: an escape, a wrong format, a 5xx, a leak, an absolute
    redirect and a broken environment are each reported."""
    env = environments["user"]
    event = fe.http_event("alb_multi", "GET", "/healthz")
    case = fe.Case("alb_multi", event)
    good = {"statusCode": 200, "body": "{}", "isBase64Encoded": False,
            "multiValueHeaders": {"x-warmstart-path": ["local"]}}

    def raising(_: object) -> object:
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    assert fe.check(env, case, lambda e: good) == []
    assert fe.check(env, case, raising) == ["escape: UnicodeEncodeError"]
    assert any(p.startswith("format:") for p in fe.check(
        env, case, lambda e: {**good, "headers": {"x-warmstart-path": "local"}}))
    assert fe.check(env, case, lambda e: {**good, "statusCode": 500}) == ["status: 500 for alb_multi"]
    assert fe.check(env, case, lambda e: {**good, "body": '{"message": "ValueError: bad"}'}) == [
        "detail: 'ValueError' in the body"]
    assert fe.check(env, case, lambda e: {**good, "statusCode": 307, "multiValueHeaders": {
        "x-warmstart-path": ["local"], "location": ["https://evil.example/x"]}}) == [
        "redirect: an absolute Location (built from the request's Host)"]
    broken = fe.Environment("broken", lambda e, c: {"statusCode": 503, "body": "{}"}, [], [],
                            env.good)
    assert fe.check_next_valid(broken)[0].startswith("next valid request: 503")
