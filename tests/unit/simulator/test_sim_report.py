"""The simulator's results in words and in the Pareto plot: every policy labelled (no two
labels overlapping), several labelled ticks per decade on both log axes, plain numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmers.simulator import report
from warmers.simulator.run import PolicyTotals, SimulationResult


def _totals(policy: str, cold: int, lambda_usd: float, *, endpoint_usd: float = 0.0,
            cold_breaches: int = 5, overflowed: int = 0, degraded: int = 0,
            endpoint: dict[str, float] | None = None) -> PolicyTotals:
    return PolicyTotals(policy=policy, requests=100_000, cold_starts=cold, sla_breaches=900 + cold_breaches,
                        cold_breaches=cold_breaches, failed_answers=cold_breaches + degraded,
                        tail=900, degraded=degraded, overflowed=overflowed, p99_ms=900.0,
                        cost_usd={"ondemand": lambda_usd}, endpoint_usd=endpoint_usd, functions=60,
                        endpoint=endpoint or {})


@pytest.fixture
def result() -> SimulationResult:
    totals = [
        _totals("on-demand, keep-alive 5 min", 300, 1.24, cold_breaches=58),
        _totals("on-demand, keep-alive 10 min", 128, 1.23, cold_breaches=15),
        _totals("on-demand, keep-alive 15 min", 97, 1.23, cold_breaches=13),
        _totals("warm pings 5 min x1", 64, 1.23),
        _totals("target tracking 0.7", 64, 2.23),
        _totals("SnapStart", 127, 1.62, cold_breaches=0),
        _totals("warmstart", 52, 1.24, endpoint_usd=9.01, cold_breaches=0, overflowed=52,
                endpoint={"mode": "planned", "instance_hours": 8.0}),
        _totals("warmstart, no overflow", 52, 1.24, cold_breaches=0, degraded=40),
    ]
    return SimulationResult(totals=totals, rows=[], n_functions=60, n_minutes=480, seed=2019)


def test_summary_says_in_words_what_warmstart_did_and_what_it_paid_for(
        result: SimulationResult) -> None:
    words = report.summary_words(result)
    assert words.startswith("Over 60 functions x 480 minutes (100,000 requests), warmstart failed "
                            "as few answers as SnapStart, the best baseline: 0 failed answers (0 "
                            "late, 0 degraded, 0 shed), against 0 for the best baseline "
                            "(SnapStart) and 15 for on-demand, keep-alive 10 min; 52 cold starts "
                            "(0.052 % of requests; 128 for on-demand, keep-alive 10 min). Apart "
                            "from these, 900 requests had a warm duration over their SLA (the "
                            "same under every policy).")
    degrading = report.summary_words(result, "warmstart, no overflow")
    assert "failed more answers than SnapStart: 40 failed answers (0 late, 40 degraded" in degrading
    assert ("It cost $10.25, $9.02 more than on-demand, keep-alive 10 min ($1.23), because it "
            "pays for the GPU overflow endpoint ($9.01, 8.0 instance-hours), to which 52 cold "
            "requests overflowed and $0.01 more on Lambda (provisioned concurrency and warm pings ahead of "
            "bursts, the cold answers' billed wait for the model); on Lambda alone it cost "
            "$1.24.") in words


def test_summary_without_warmstart_names_the_best_and_cheapest_baselines(
        result: SimulationResult) -> None:
    result.totals = [t for t in result.totals if report.is_baseline(t.policy)]
    assert report.summary_words(result) == (
        "Over 60 functions x 480 minutes (100,000 requests), the baseline with the fewest failed "
        "answers was SnapStart (0 failed answers, 127 cold starts, $1.62); the cheapest was "
        "warm pings 5 min x1 ($1.23, 5 failed answers).")


def test_the_cost_sentence_is_the_same_in_markdown_and_in_words(result: SimulationResult) -> None:
    plain = report.cost_words(result)
    assert f"{plain}" == report.ratios_markdown(result).splitlines()[-1].replace("**", "")
    # SnapStart fails no more answers (0) than warmstart: it is the reference, target <= 1
    assert "**SnapStart**" in report.ratios_markdown(result)
    r = report.ratios(result)
    assert r.cheapest_same_rate == "SnapStart" and r.cost_target == 1.0
    assert r.cost_ratio_total == pytest.approx(10.25 / 1.62) and not r.cost_met
    # where no baseline fails as few answers, the target is 1.1 x the cheapest baseline
    for t in result.totals:
        if t.policy == "SnapStart":
            t.cold_breaches = t.failed_answers = 3
    r = report.ratios(result, "warmstart, no overflow")  # 40 failed: 15-min keep-alive fails 13
    assert r.cheapest_same_rate == "on-demand, keep-alive 10 min" and r.cost_target == 1.0
    r = report.ratios(result)
    assert r.cheapest_same_rate is None and r.cost_target == report.COST_SLACK
    assert r.cheapest == "warm pings 5 min x1"
    assert r.cost_ratio_lambda == pytest.approx(1.24 / 1.23)
    assert "target <= 1.1: not met" in report.cost_words(result)


def _plotted(result: SimulationResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    kept: list[object] = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.pareto_plot(result, tmp_path / "pareto.png")
    assert (tmp_path / "pareto.png").stat().st_size > 10_000
    (fig,) = kept
    return fig


def test_pareto_plot_labels_every_policy_without_overlaps(
        result: SimulationResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.text import Text

    fig = _plotted(result, tmp_path, monkeypatch)
    (ax,) = fig.axes  # type: ignore[attr-defined]
    labels = {t.get_text(): t for t in ax.texts}
    assert set(labels) == {t.policy for t in result.totals} | {"warmstart (Lambda only)"}
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = [Text.get_window_extent(t, renderer) for t in labels.values()]  # text, not arrow
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "two policy labels overlap"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "warmstart: 0.052 %, $10.25" in legend and len(legend) == len(labels) + 1  # + frontier


def test_pareto_axes_have_several_plain_labelled_ticks(
        result: SimulationResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fig = _plotted(result, tmp_path, monkeypatch)
    (ax,) = fig.axes  # type: ignore[attr-defined]
    fig.canvas.draw()  # type: ignore[attr-defined]

    def shown(axis: object, limits: tuple[float, float]) -> list[str]:
        lo, hi = sorted(limits)
        return [t.get_text() for t in axis.get_ticklabels()  # type: ignore[attr-defined]
                if t.get_text() and lo <= t.get_position()[0 if axis is ax.xaxis else 1] <= hi]

    xs = shown(ax.xaxis, ax.get_xlim())
    ys = shown(ax.yaxis, ax.get_ylim())
    # $1.23 .. $10.25 spans one decade: $1, $2, $5, $10 labelled; 0.052 .. 0.3 %: 0.05 .. 0.3
    assert xs == ["$1", "$2", "$5", "$10"]
    assert ys == ["0.05 %", "0.1 %", "0.2 %", "0.3 %"]
    assert not any("10^" in t or "$\\" in t for t in xs + ys)


def test_place_labels_moves_a_label_off_another_and_off_points() -> None:
    corners = report._place_labels([(100.0, 100.0), (100.0, 104.0), (150.0, 200.0)],
                                   [(80.0, 10.0)] * 3, dx=9.0, step=12.0)
    (x0, y0), (x1, y1), (x2, y2) = corners
    assert (x0, y0) == (109.0, 95.0)          # the first label sits right of its point
    assert x1 == 109.0 and abs(y1 - y0) >= 10.0  # the second is moved clear of it
    assert (x2, y2) == (159.0, 195.0)         # a lone point's label stays put
