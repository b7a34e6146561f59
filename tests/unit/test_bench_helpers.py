"""The helpers the benchmarks share (`bench`): the median and the end of a benchmark's main."""

from __future__ import annotations

import math

import pytest

from bench import REPO_ROOT, finish, p50


def test_p50_is_the_median_and_nan_without_values() -> None:
    assert p50([3.0, 1.0, 2.0]) == 2.0
    assert p50([1.0, 2.0]) == 1.5
    assert math.isnan(p50([]))


def test_finish_prints_the_lines_and_the_result_and_fails_when_a_ratio_is_not_met(
        capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO_ROOT / "out" / "bench" / "x.md"
    assert finish(path, "table", "verdict", ratios=[{"met": True}]) == 0
    assert capsys.readouterr().out.split("\n") == ["table", "verdict", "wrote out/bench/x.md", ""]
    assert finish(path, ratios=[{"met": True}, {"met": False}]) == 1
    assert finish(path, ratios=[]) == 0
