"""The replay / demo HTML report rendered from two synthetic runs (``off`` and ``on``): the
summary paragraph in words, a styled table, a caption under each plot, the slice's x-axis,
the empty provisioned-concurrency panels explained, the definitions as HTML (no raw markup).

The HTML is checked as text and parsed with the standard library here; the same runs are
rendered in headless Chromium by ``tests/e2e/test_report_browser.py``."""

from __future__ import annotations

import html
import html.parser
import types
from pathlib import Path

import numpy as np
import pytest

from infra.replay import report
from infra.replay.client import ClientRecord
from infra.replay.observe import StateSample
from infra.replay.summary import RunSummary

MINUTES = 20


def _summary(**kw: object) -> RunSummary:
    base: dict[str, object] = {
        "label": "x", "requests": 72, "answered": 72, "ok": 72, "cold_starts": 9,
        "init_p50_ms": 1400.0, "p50_ms": 310.0, "p95_ms": 2600.0, "p99_ms": 3100.0,
        "sla_ms": 2000.0, "sla_breaches": 7, "failed_answers": 7, "late": 7, "overflowed": 0,
        "degraded": 0, "shed": 0,
        "errors": 0, "throttled": 0, "spillover": 0, "warm_pings": 0, "provisioned_gb_s": 0.0,
        "invocation_gb_s": 200.0, "gpu_endpoint_hours": 0.0, "lambda_usd": 0.0034,
        "gpu_usd": 0.0, "client_lag_p99_ms": 2.0, "tool_honoured": 72, "tool_requested": 72}
    base.update(kw)
    return RunSummary(**base)  # type: ignore[arg-type]


def _run(config: str, summary: RunSummary, *, pc: int, snap_start: bool = False,
         plans: bool = False) -> types.SimpleNamespace:
    workload = types.SimpleNamespace(
        function_id="bb5d90eaa304798c9f993c324397bedc99d3dac24b9d408114fc2d62648e136c",
        trigger="http", start_minute=300, minutes=MINUTES, minute_label=300, n_requests=72,
        concurrency=np.array([3.0 if m % 10 == 0 else 0.0 for m in range(MINUTES)]))
    records = [ClientRecord(i, i * 1.5, i * 1.5, 300.0 + 50 * (i % 5), 200,
                            "local" if i % 4 else "overflow", {}, f"r{i}", 30.0)
               for i in range(72)]
    samples = [StateSample(t_s=1000.0 + 6.0 * k, busy=k % 4, environments=3,
                           pc_requested=pc, pc_allocated=pc) for k in range(MINUTES * 10)]
    plan_list = [types.SimpleNamespace(t_s=1000.0 + 60.0 * m - 900.0, lead_min=15, window_min=5,
                                       demand=3.2, provisioned_concurrency=pc, method="naive")
                 for m in range(0, MINUTES, 5)] if plans else []
    return types.SimpleNamespace(
        config=config, workload=workload,
        options=types.SimpleNamespace(time_scale=10.0, scale_durations=True),
        function=types.SimpleNamespace(snap_start=snap_start), summary=summary, records=records,
        observations={}, samples=samples, plans=plan_list, t0_s=1000.0, wall_s=120.0, notes=[])


@pytest.fixture
def runs() -> list[types.SimpleNamespace]:
    off = _run("off", _summary(label="off"), pc=0)
    on = _run("on", _summary(label="on", cold_starts=1, sla_breaches=0, failed_answers=0, late=0,
                              p95_ms=900.0,
                              provisioned_gb_s=1200.5, lambda_usd=0.0121, gpu_usd=0.0153,
                              overflowed=18), pc=2, plans=True)
    return [off, on]


class _Parser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.captions: list[str] = []
        self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_caption = tag == "figcaption"

    def handle_endtag(self, tag: str) -> None:
        self._in_caption = False if tag == "figcaption" else self._in_caption

    def handle_data(self, data: str) -> None:
        if self._in_caption:
            self.captions.append(data)


def test_the_report_renders_for_a_newcomer(runs: list[types.SimpleNamespace], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    path = report.write_report(runs, tmp_path / "r.html", title="warmstart demo")  # type: ignore[arg-type]
    doc = path.read_text(encoding="utf-8")
    text = html.unescape(doc)
    parser = _Parser()
    parser.feed(doc)
    # the summary paragraph first, in words, with why "on" costs more
    first = doc.index('<p class="summary">')
    assert first < doc.index("<table>")
    assert ("<p class=\"summary\">warmstart failed no answer, where on-demand alone failed 7: "
            "'off' saw 9 cold starts and 7 failed answers (7 late) in 72 requests (SLA 2,000 ms), "
            "p95 2,600 ms, for $0.0034; 'on' saw 1 cold start and 0 failed answers") in text
    assert ("It cost $0.0240 more ($0.0274 against $0.0034) because it pays for provisioned "
            "concurrency kept warm ahead of the bursts (1,200.5 GB-s, billed whether or not "
            "requests come) and the always-on GPU overflow endpoint ($0.0153 over the slice); off "
            "pays only for the requests it serves.</p>") in text
    # styled table; the lead picture, then a caption under each of the three plots
    assert "<style>" in doc and "tbody tr:nth-child(even)" in doc and "<thead>" in doc
    assert parser.tags.count("img") == 4 and parser.tags.count("figcaption") == 4
    assert [c[:30] for c in parser.captions] == [report.OVERVIEW_CAPTION[:30]] + [
        report.CAPTIONS[t][:30] for t in report.CAPTIONS]
    # definitions as HTML, not raw reStructuredText
    definitions = doc[doc.index('<div class="definitions">'):]
    assert "<em>cold start</em>" in definitions and "<code>Server-Timing</code>" in definitions
    assert "``" not in definitions and "*cold start*" not in definitions
    assert "<li>" in definitions and "-----" not in definitions


def test_axes_match_the_slice_and_empty_pc_panels_say_why(
        runs: list[types.SimpleNamespace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(report, "_png", lambda fig: "")
    limits: list[tuple[float, float]] = []
    texts: list[str] = []
    real_close = plt.close

    def close(fig: object) -> None:
        for ax in fig.axes:  # type: ignore[attr-defined]
            limits.append(tuple(ax.get_xlim()))
            texts.extend(t.get_text() for t in ax.texts)
        real_close(fig)  # type: ignore[arg-type]

    monkeypatch.setattr(plt, "close", close)
    report.figures(runs)  # type: ignore[arg-type]
    assert limits == [(0.0, float(MINUTES))] * 6  # 3 figures x (off, on)
    assert "off is on-demand only:\nno provisioned concurrency is requested" in texts
    assert "no warmer in this configuration (on-demand only)" in texts


@pytest.mark.parametrize(("config", "snap_start", "plans", "reason"), [
    ("off", False, False, "off is on-demand only:\nno provisioned concurrency is requested"),
    ("on", True, True, ("SnapStart function: no provisioned concurrency\n(AWS does not combine "
                       "them); its cold starts are restores")),
    ("on", False, False, "no warmer plan in this run:\nno provisioned concurrency was requested"),
    ("on", False, True, ("the warmer planned no provisioned concurrency\nfor this slice (its "
                        "reasons: the forecast panel and the warmer log)")),
])
def test_no_pc_reason(config: str, snap_start: bool, plans: bool, reason: str) -> None:
    run = _run(config, _summary(), pc=0, snap_start=snap_start, plans=plans)
    assert report.no_pc_reason(run) == reason  # type: ignore[arg-type]
    assert report.no_pc_reason(_run(config, _summary(), pc=1)) == ""  # type: ignore[arg-type]


def test_rst_to_html() -> None:
    assert report.rst_to_html("Definitions\n-----------\n- *a*: the ``X-Warmstart-Path``\n"
                              "  header, 2 * 3 <b>\n\nText *b*.") == (
        "<h3>Definitions</h3>\n<ul><li><em>a</em>: the <code>X-Warmstart-Path</code> header, "
        "2 * 3 &lt;b&gt;</li></ul>\n<p>Text <em>b</em>.</p>")


def test_requests_without_a_real_answer_are_said_in_the_summary() -> None:
    off = _run("off", _summary(label="off", shed=32, errors=1, failed_answers=40, tail=3), pc=0)
    assert report.summary_paragraph([off]).startswith(  # type: ignore[list-item]
        "'off' saw 9 cold starts and 40 failed answers (7 late, 32 shed with a 503 and 1 error "
        "(5xx or no answer)) in 72 requests (SLA 2,000 ms); 3 requests whose work alone exceeds "
        "the SLA are apart, p95 2,600 ms")


def test_one_run_is_summarized_alone(runs: list[types.SimpleNamespace]) -> None:
    text = report.summary_paragraph([runs[0]])  # type: ignore[list-item]
    assert text == ("'off' saw 9 cold starts and 7 failed answers (7 late) in 72 requests (SLA "
                    "2,000 ms), p95 2,600 ms, for $0.0034.")


def test_the_report_leads_with_the_verdict_and_one_picture(
        runs: list[types.SimpleNamespace], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN off with 7 late answers and on with none, on costing $0.0240 more
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    picture = tmp_path / "overview.png"
    # WHEN the report is written with the picture beside it
    path = report.write_report(runs, tmp_path / "r.html", overview_path=picture,  # type: ignore[arg-type]
                               reasoning=["why SnapStart"])
    doc = path.read_text(encoding="utf-8")
    # THEN the title, the verdict, the picture, then the reasoning, then the table
    verdict = doc.index('<p class="verdict">')
    lead = doc.index('<figure class="lead">')
    assert doc.index("<h1>") < verdict < lead < doc.index('<p class="summary">') \
        < doc.index("why SnapStart") < doc.index("<table>")
    assert html.unescape(doc[verdict:lead]) == (
        '<p class="verdict">warmstart on (provisioned concurrency + GPU endpoint) failed 0 of 72 '
        "answers, off 7: "
        "$0.0034 per avoided failed answer ($0.0240 more for 7 failed answers avoided).</p>")
    # and the picture is a PNG, the same bytes as the embedded one
    png = picture.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    import base64

    assert base64.b64encode(png).decode() in doc[lead:]


def test_the_overview_shares_one_time_axis(runs: list[types.SimpleNamespace],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen: list[object] = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (seen.append(fig), real_close(fig)))
    report.overview_png(runs)  # type: ignore[arg-type]
    (fig,) = seen
    axes = fig.axes  # type: ignore[attr-defined]
    assert [ax.get_ylabel() for ax in axes] == ["latency (ms)", "failed so far", "on: ready"]
    assert {tuple(ax.get_xlim()) for ax in axes} == {(0.0, float(MINUTES))}
    # the failed-answer panel ends at each run's count: off 0 of its records failed here
    labels = axes[1].get_legend_handles_labels()[1]
    assert labels == ["off: 0 failed", "on: 0 failed"]
    with pytest.raises(ValueError, match="no run to draw"):
        report.overview_png([])


def _with(summary: RunSummary, **kw: object) -> RunSummary:
    import dataclasses

    return dataclasses.replace(summary, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("off_failed", "off_usd", "on_failed", "on_usd", "snap", "line"), [
    (36, 0.3815, 2, 0.4328, False,
     ("warmstart on (provisioned concurrency) failed 2 of 72 answers, off 36: $0.0015 per avoided "
     "failed answer ($0.0513 more for 34 failed answers avoided).")),
    (22, 0.0625, 1, 0.0400, True,
     ("warmstart on (SnapStart) failed 1 of 72 answers, off 22: nothing paid per avoided failed "
      "answer: 'on' avoided 21 failed answers and cost $0.0225 less (a saving of $0.0011 per "
      "avoided failed answer).")),
    (3, 0.0100, 3, 0.0200, False,
     ("warmstart on (provisioned concurrency) failed as many answers as off (3 of 72): no failed "
     "answer avoided, so no USD per avoided failed answer: 'on' failed as many as 'off' and cost "
     "$0.0100 more.")),
    (2, 0.0100, 5, 0.0300, False,
     ("warmstart on (provisioned concurrency) failed more answers than off (5 against 2 of 72): "
     "no USD per avoided failed answer: 'on' failed 3 more answers than 'off' and cost $0.0200 "
     "more.")),
])
def test_verdict(off_failed: int, off_usd: float, on_failed: int, on_usd: float, snap: bool,
                 line: str) -> None:
    off = _run("off", _summary(label="off", failed_answers=off_failed, lambda_usd=off_usd), pc=0)
    on = _run("on", _summary(label="on", failed_answers=on_failed, lambda_usd=on_usd),
              pc=0 if snap else 2, snap_start=snap, plans=not snap)
    assert report.verdict([off, on]) == line  # type: ignore[list-item]


def test_verdict_of_one_run(runs: list[types.SimpleNamespace]) -> None:
    assert report.verdict([runs[0]]) == "off: 7 failed answers of 72 requests for $0.0034."  # type: ignore[list-item]
