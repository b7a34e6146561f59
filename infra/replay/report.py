"""The replay report: one HTML file with the table and embedded PNGs (matplotlib, Agg).

It leads with a one-line verdict (:func:`verdict`: failed answers off against on and the USD
per avoided failed answer) and one picture (:func:`overview_png`: latency and failed answers
over the slice, off against on, with provisioned concurrency and GPU endpoint copies beneath,
on one time axis); the reasoning follows: the summary paragraph in words, a styled table,
each figure with a caption saying what to look for, the definitions rendered from
``infra.replay.summary``'s docstring.

Figures, one column per run: latency over time (by path, cold starts marked, SLA line);
concurrency against provisioned concurrency (sampled from the emulator); the warmer's forecast
(planning quantile, placed at the window it was made for) against the measured peak concurrency
per minute.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infra.replay.runner import RunResult
from infra.replay.summary import (
    _DIGITS,
    FAILED_OUTCOMES,
    CostPerAvoided,
    _fmt,
    cost_per_avoided,
    outcome,
    summary_rows,
    summary_table,
)
from warmers.simulator import tables

PATH_COLOURS = {"local": "tab:blue", "overflow": "tab:green", "degraded": "tab:orange",
                "shed": "tab:red", "": "black"}
CAVEATS = ((
    "Time scale X compresses the gaps between requests and the simulated work X-fold, but init "
    "(imports, model load), inference and overheads run in real time, so a cold start weighs X "
    "times more against the trace's inter-arrival times than it would in production; all "
    "execution environments also share this machine's CPUs, so concurrent cold starts slow each "
    "other down (on AWS each has its own). Both make on-demand bursts cascade into more cold "
    "starts than production would see; they affect 'off' most. Latencies are real milliseconds; "
    "GB-s are trace seconds (real seconds times X)."),
)
CITATION = ("Trace: Azure Public Dataset, \"Serverless in the Wild\", M. Shahrad et al., "
            "USENIX ATC 2020 (CC-BY 4.0), subset vendored by vHive InVitro (MIT).")


#: The report's style sheet: readable on a laptop screen (a column of text, a zebra table with
#: right-aligned tabular figures, plots at the page's width with their caption under them).
STYLE = """
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
  max-width:1200px;margin:1.5em auto;padding:0 1.2em}
h1{font-size:1.6em;margin-bottom:.3em}h2{font-size:1.25em;margin:1.6em 0 .4em}
h3{font-size:1.05em;margin:1em 0 .3em}
p.summary{font-size:1.08em;background:#f0f6ff;border-left:4px solid #3b82f6;padding:.7em 1em}
p.verdict{font-size:1.15em;font-weight:600;margin:.2em 0 .6em}
figure.lead{margin:.4em 0 1em}figure.lead img{border:0}
code{font:.9em ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f4f6;padding:0 .25em;
  border-radius:3px}
table{border-collapse:collapse;margin:1em 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #d0d7de;padding:.15em .8em;line-height:1.4;text-align:right}
thead th{background:#f6f8fa;border-bottom:2px solid #8c959f}thead th:first-child{text-align:left}
tbody th{text-align:left;font-weight:normal;white-space:nowrap}tbody tr:nth-child(even){background:#fafbfc}
tbody tr:hover{background:#eef4ff}
figure{margin:1.5em 0}figure img{max-width:100%;height:auto;border:1px solid #e5e7eb}
figcaption{color:#444;font-size:.95em;margin-top:.4em;max-width:75ch}
.top{display:flex;flex-wrap:wrap;gap:0 2.5em;align-items:flex-start}
.top>div{flex:1 1 24em}.top table{margin-top:0}.top ul{margin-top:0}.scroll{overflow-x:auto}table.wide{font-size:.85em}
table.wide th,table.wide td{padding:.3em .5em}
.definitions{max-width:80ch}.citation{color:#57606a;font-size:.9em}
"""


def page(*, title: str, summary: str, body: str, citation: str = "", lead: str = "") -> str:
    """One report page in the shared template (`STYLE`): the title, ``lead`` (HTML: the
    replay's verdict and picture, first on the screen), the summary paragraph in words (plain
    text, escaped here), the body (HTML), the citation (plain text).

    The replay / demo report and the ``simulate`` report are both written with it.
    """
    cite = f'<p class="citation">{html.escape(citation)}</p>' if citation else ""
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
{lead}<p class="summary">{html.escape(summary)}</p>
{body}
{cite}</body></html>"""


def write_page(path: Path, *, title: str, summary: str, body: str, citation: str = "",
               lead: str = "") -> Path:
    """Write `page` to ``path`` (its folder created) and return the path.

    Raises
    ------
    OSError
        If the file cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title=title, summary=summary, body=body, citation=citation, lead=lead),
                    encoding="utf-8")
    return path


def figure_html(title: str, png_b64: str, caption: str) -> str:
    """A figure of the template: its title, the embedded PNG, the caption saying what to look
    for (plain text)."""
    return (f"<figure><h2>{html.escape(title)}</h2><img alt=\"{html.escape(title)}\" "
            f"src=\"data:image/png;base64,{png_b64}\"/>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _png(fig: object) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")  # type: ignore[attr-defined]
    return base64.b64encode(buf.getvalue()).decode()


def _label_panel(ax: Any, result: RunResult, title: str, *, ncol: int = 1) -> None:
    """One run's panel: the slice's minutes on x, the run's name in the title, the legend
    below."""
    ax.set_xlim(0, result.workload.minutes)
    ax.set_xlabel("trace minute of the slice")
    ax.set_title(f"{result.config}: {title}")
    ax.legend(ncol=ncol, **LEGEND_BELOW)


def _add_figure(out: list[tuple[str, str]], fig: Any, axes: Any, heading: str, *,
                ylabel: str) -> None:
    """Label the first panel's y axis, append ``(heading, PNG)`` to ``out``, close the figure."""
    import matplotlib.pyplot as plt

    axes[0][0].set_ylabel(ylabel)
    out.append((heading, _png(fig)))
    plt.close(fig)


def _minutes(result: RunResult, t_s: np.ndarray) -> np.ndarray:
    return (t_s - result.t0_s) / 60.0


#: Font sizes of the figures (points; at the PNGs' 90 dpi, shown near 1:1 on a laptop screen,
#: 10 pt is 12.5 px: matplotlib's defaults, 8 pt legends, read at 10 px).
FIGURE_RC = {"font.size": 10.5, "axes.titlesize": 11.5, "axes.labelsize": 10.5,
             "xtick.labelsize": 10, "ytick.labelsize": 10, "legend.fontsize": 9.5}
LEGEND_BELOW = {"loc": "upper left", "bbox_to_anchor": (0.0, -0.22), "frameon": False}


def figures(results: Sequence[RunResult]) -> list[tuple[str, str]]:
    """(title, base64 PNG) of each figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context(FIGURE_RC):  # type: ignore[arg-type]
        return _figures(results)


def _figures(results: Sequence[RunResult]) -> list[tuple[str, str]]:
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    out: list[tuple[str, str]] = []
    n = len(results)
    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4), sharey=True, squeeze=False)
    for ax, r in zip(axes[0], results):
        x = r.options.time_scale
        for path, colour in PATH_COLOURS.items():
            pick = [rec for rec in r.records if rec.path == path and rec.status]
            if pick:
                ax.scatter([rec.planned_s * x / 60.0 for rec in pick],
                           [max(rec.latency_ms, 1.0) for rec in pick], s=10, c=colour,
                           label=path or "no path header", alpha=0.7)
        cold = [rec for rec in r.records if rec.status and
                (o := r.observations.get(rec.gateway_request_id)) is not None and o.cold_start]
        if cold:
            ax.scatter([rec.planned_s * x / 60.0 for rec in cold],
                       [max(rec.latency_ms, 1.0) for rec in cold], s=40, facecolors="none",
                       edgecolors="black", label="cold start")
        ax.axhline(r.summary.sla_ms, color="grey", ls="--", lw=1, label=f"SLA {r.summary.sla_ms:g} ms")
        ax.set_yscale("log")
        # readable log ticks: 1, 2, 5 x 10^k as plain milliseconds
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        _label_panel(ax, r, "latency (real ms)", ncol=3)
    _add_figure(out, fig, axes, "Latency over time", ylabel="latency (ms)")

    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 3.5), sharey=True, squeeze=False)
    for ax, r in zip(axes[0], results):
        if r.samples:
            t = _minutes(r, np.array([s.t_s for s in r.samples]))
            ax.step(t, [s.busy for s in r.samples], where="post", lw=0.8, label="concurrency (busy environments)")
            ax.step(t, [s.environments for s in r.samples], where="post", lw=0.8, alpha=0.6,
                    label="live environments")
            ax.step(t, [s.pc_allocated for s in r.samples], where="post", lw=1.5,
                    label="provisioned concurrency (allocated)")
            ax.step(t, [s.pc_requested for s in r.samples], where="post", lw=1, ls=":",
                    label="provisioned concurrency (requested)")
        why = no_pc_reason(r)
        if why:
            ax.text(0.5, 0.6, why, transform=ax.transAxes, ha="center", va="center", fontsize=10,
                    wrap=True, bbox={"boxstyle": "round", "fc": "white", "ec": "0.7"})
        _label_panel(ax, r, "concurrency vs provisioned concurrency")
    _add_figure(out, fig, axes, "Concurrency against provisioned concurrency",
                ylabel="environments")

    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 3.5), sharey=True, squeeze=False)
    for ax, r in zip(axes[0], results):
        minutes = r.workload.minutes
        if r.samples:
            t = _minutes(r, np.array([s.t_s for s in r.samples]))
            busy = np.array([s.busy for s in r.samples])
            idx = np.clip(np.floor(t).astype(int), 0, minutes - 1)
            peak = np.zeros(minutes)
            np.maximum.at(peak, idx[t >= 0], busy[t >= 0])
            ax.bar(np.arange(minutes) + 0.5, peak, width=0.9, alpha=0.35,
                   label="measured peak concurrency per minute")
        ax.step(np.arange(minutes + 1), np.append(r.workload.concurrency, r.workload.concurrency[-1:]),
                where="post", color="grey", lw=1,
                label="trace peak concurrency per minute (trace durations)")
        if r.plans:
            lead = r.plans[0].lead_min
            window = r.plans[0].window_min
            pt = np.array([(p.t_s - r.t0_s) / 60.0 for p in r.plans])
            demand = np.array([p.demand for p in r.plans])
            ok = np.isfinite(demand)
            ax.plot(pt[ok] + lead + window / 2.0, demand[ok], "o-", ms=3,
                    label=f"forecast q0.95 peak, made {lead} min ahead")
            ax.step(pt, [p.provisioned_concurrency for p in r.plans], where="post",
                    label="planned provisioned concurrency")
        else:
            ax.text(0.5, 0.5, "no warmer in this configuration (on-demand only)",
                    transform=ax.transAxes, ha="center", fontsize=10)
        # x: the slice; plans made before it that target it are drawn
        _label_panel(ax, r, "forecast")
    _add_figure(out, fig, axes, "Forecast against measured concurrency", ylabel="concurrency")
    return out


#: Colours of the runs in the overview (off grey, on blue) and of a failed answer's mark.
RUN_COLOURS = {"off": "tab:gray", "on": "tab:blue"}
FAILED_COLOUR = "tab:red"
OVERVIEW_CAPTION = (
    "One time axis, the slice's trace minutes. Top: every request's latency (real ms, "
    "logarithmic), off grey and on blue, a red cross on each failed answer (late, degraded, "
    "shed or error), the dashed line the SLA. Middle: failed answers so far, off against on. "
    "Bottom: what on kept ready: provisioned concurrency allocated and GPU endpoint copies in "
    "service (published by the warmer), or a note that SnapStart needs neither.")


def overview_png(results: Sequence[RunResult]) -> bytes:
    """The report's lead picture as PNG bytes (see :data:`OVERVIEW_CAPTION`).

    Parameters
    ----------
    results : sequence of RunResult
        The runs (``off`` and ``on``, or one of them), drawn on one shared time axis.

    Raises
    ------
    ValueError
        Without any run.
    """
    if not results:
        raise ValueError("no run to draw")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context(FIGURE_RC):  # type: ignore[arg-type]
        fig = _overview(results)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
        plt.close(fig)
    return buf.getvalue()


def _overview(results: Sequence[RunResult]) -> Any:
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    minutes = max(r.workload.minutes for r in results)
    fig, (lat, failed, ready) = plt.subplots(
        3, 1, figsize=(12.5, 6.2), sharex=True, gridspec_kw={"height_ratios": [3, 1.6, 1.6]})
    for r in results:
        x = r.options.time_scale
        colour = RUN_COLOURS.get(r.config, "black")
        sla = r.summary.sla_ms
        t = np.array([rec.planned_s * x / 60.0 for rec in r.records])
        ms = np.array([max(rec.latency_ms, 1.0) for rec in r.records])
        bad = np.array([outcome(rec, sla) in FAILED_OUTCOMES for rec in r.records], dtype=bool)
        if t.shape[0]:
            lat.scatter(t, ms, s=14, c=colour, alpha=0.75, label=f"{r.config}: latency")
            if bad.any():
                lat.scatter(t[bad], ms[bad], s=34, marker="x", c=FAILED_COLOUR, lw=1.1)
            order = np.argsort(t, kind="stable")
            steps = np.cumsum(bad[order])
            failed.step(np.concatenate([[0.0], t[order], [minutes]]),
                        np.concatenate([[0], steps, steps[-1:]]), where="post", color=colour,
                        lw=1.8, label=f"{r.config}: {int(bad.sum())} failed")
    if any(r.records for r in results):
        lat.scatter([], [], s=34, marker="x", c=FAILED_COLOUR, label="failed answer")
    lat.axhline(results[0].summary.sla_ms, color="black", ls="--", lw=1,
                label=f"SLA {results[0].summary.sla_ms:,.0f} ms")
    lat.set_yscale("log")
    lat.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    lat.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    lat.yaxis.set_minor_formatter(ticker.NullFormatter())
    lat.set_ylabel("latency (ms)")
    lat.legend(ncol=4, loc="upper right", fontsize=9, framealpha=0.85)
    failed.set_ylabel("failed so far")
    failed.legend(loc="upper left", fontsize=9, framealpha=0.85)
    on = next((r for r in results if r.config == "on"), None)
    notes = []
    if on is not None:
        if on.samples:
            ts = _minutes(on, np.array([s.t_s for s in on.samples]))
            ready.step(ts, [s.pc_allocated for s in on.samples], where="post", lw=1.8,
                       color="tab:purple", label="on: provisioned concurrency (allocated)")
            ready.step(ts, [s.busy for s in on.samples], where="post", lw=0.7, alpha=0.6,
                       color="tab:blue", label="on: busy environments")
        e = on.summary.endpoint
        if e is not None and e.states:
            st = [(t_s / 60.0, n if state == "in_service" else 0) for t_s, state, n in e.states]
            st = [(0.0, _in_service_at(st, 0.0))] + [p for p in st if 0.0 < p[0] < minutes]
            ready.step([p[0] for p in st] + [minutes], [p[1] for p in st] + [st[-1][1]],
                       where="post", lw=1.8, color="tab:green",
                       label="on: GPU endpoint copies in service")
        elif e is None and on.summary.gpu_usd > 0:
            notes.append("GPU endpoint always on (1 instance)")
        if getattr(on.function, "snap_start", False):
            notes.append(f"on runs SnapStart: no provisioned concurrency; "
                         f"{on.summary.restores} cold starts were restores")
        if e is not None and not any(state == "in_service" and n for _, state, n in e.states):
            notes.append("the warmer asked for no GPU endpoint copy that came into service")
    if notes:  # above the panel: inside it the note would cover the lines and the legend
        ready.set_title("; ".join(notes), fontsize=9, loc="left")
    ready.set_ylabel("on: ready")
    ready.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ready.set_ylim(bottom=0)
    ready.set_xlim(0, minutes)
    ready.set_xlabel("trace minute of the slice")
    if ready.get_legend_handles_labels()[0]:
        ready.legend(loc="upper right", fontsize=9, framealpha=0.85)
    fig.tight_layout(h_pad=0.4)
    return fig


def _in_service_at(steps: Sequence[tuple[float, int]], minute: float) -> int:
    """Copies in service at ``minute`` from (minute, copies) steps in time order (0 before)."""
    now = 0
    for at, n in steps:
        if at > minute:
            break
        now = n
    return now


def deployed_words(result: RunResult) -> str:
    """What the ``on`` run deployed, in a few words (the verdict's parenthesis)."""
    if getattr(result.function, "snap_start", False):
        return "SnapStart"
    return ("provisioned concurrency" if result.plans else "on demand") + (
        " + GPU endpoint" if result.summary.endpoint is not None or result.summary.gpu_usd > 0
        else "")


def verdict(results: Sequence[RunResult]) -> str:
    """The report's first line: failed answers ``on`` against ``off`` and what ``on`` paid per
    failed answer avoided (:func:`infra.replay.summary.cost_per_avoided`), with the sign and the
    cases of none avoided or more failed said plainly; one run: its failed answers and USD."""
    by = {r.config: r for r in results}
    off, on = by.get("off"), by.get("on")
    if off is None or on is None:
        return "; ".join(f"{r.config}: {r.summary.failed_answers} failed answers of "
                         f"{r.summary.requests} requests for ${r.summary.usd:.4f}"
                         for r in results) + "."
    a, b = off.summary, on.summary
    cpa: CostPerAvoided = cost_per_avoided(a, b)
    what = f"warmstart on ({deployed_words(on)})"
    if cpa.avoided > 0:
        head = f"{what} failed {b.failed_answers} of {b.requests} answers, off {a.failed_answers}"
    elif cpa.avoided == 0:
        head = f"{what} failed as many answers as off ({b.failed_answers} of {b.requests})"
    else:
        head = (f"{what} failed more answers than off ({b.failed_answers} against "
                f"{a.failed_answers} of {b.requests})")
    return f"{head}: {cpa.words()}."


#: What each figure shows and what to look for (the caption under it).
CAPTIONS = {
    "Latency over time": (
        "Each dot is one request, at the trace minute it was sent, coloured by the path that "
        "answered it (local, overflow to the GPU endpoint, degraded, shed); circled dots were "
        "cold starts. Look for dots above the dashed SLA line: those requests were late (failed "
        "answers, unless their work alone exceeds the SLA). "
        "The latency axis is logarithmic."),
    "Concurrency against provisioned concurrency": (
        "Busy and live execution environments against the provisioned concurrency the alias "
        "asked for (dotted) and had allocated (thick). Where busy environments rise above the "
        "allocated provisioned concurrency, requests needed on-demand environments: that is "
        "where cold starts can happen. A panel without provisioned concurrency says why."),
    "Forecast against measured concurrency": (
        "Bars: the peak concurrency measured each minute of the slice; grey line: the trace's "
        "own peak concurrency (its durations); dots: the warmer's q0.95 forecast, drawn at the "
        "window it was made for; steps: the provisioned concurrency it planned. Look for bars "
        "above the dots: minutes the forecast was too low."),
}


def no_pc_reason(result: RunResult) -> str:
    """Why a run's provisioned-concurrency lines are flat zero (``""`` when they are not)."""
    if any(s.pc_requested or s.pc_allocated for s in result.samples):
        return ""
    if result.config == "off":
        return "off is on-demand only:\nno provisioned concurrency is requested"
    if getattr(result.function, "snap_start", False):
        return ("SnapStart function: no provisioned concurrency\n(AWS does not combine them); "
                "its cold starts are restores")
    if not result.plans:
        return "no warmer plan in this run:\nno provisioned concurrency was requested"
    return ("the warmer planned no provisioned concurrency\nfor this slice (its reasons: "
            "the forecast panel and the warmer log)")


def summary_paragraph(results: Sequence[RunResult]) -> str:
    """What happened, in words: failed answers (with their parts), cold starts, p95 latency and
    cost of each run, the tail apart, and why one run cost more than the other (what it paid
    for)."""
    def usd(value: float) -> str:
        return "not measured" if math.isnan(value) else f"${value:.4f}"

    def run_words(r: RunResult) -> str:
        s = r.summary
        failed = getattr(s, "failed_answers", 0)
        return (f"{r.config!r} saw {s.cold_starts} cold start{'s' * (s.cold_starts != 1)} and "
                f"{failed} failed answer{'s' * (failed != 1)}{parts(s)} in {s.requests} "
                f"requests (SLA {s.sla_ms:,.0f} ms){tail(s)}, p95 {s.p95_ms:,.0f} ms, for "
                f"{usd(s.usd)}")

    def parts(s: object) -> str:  # what the failed answers were
        found = [f"{n} {what}" for n, what in (
            (getattr(s, "late", 0), "late"),
            (getattr(s, "degraded", 0), "degraded"),
            (getattr(s, "shed", 0), "shed with a 503"),
            (getattr(s, "errors", 0),
             "error" + "s" * (getattr(s, "errors", 0) != 1) + " (5xx or no answer)")) if n]
        throttled = getattr(s, "throttled", 0)
        if throttled:
            found.append(f"{throttled} throttled")
        return f" ({_and(found)})" if found else ""

    def tail(s: object) -> str:
        n = getattr(s, "tail", 0)
        return (f"; {n} request{'s' * (n != 1)} whose work alone exceeds the SLA are apart"
                if n else "")

    by = {r.config: r for r in results}
    words = "; ".join(run_words(r) for r in results) + "."
    off, on = by.get("off"), by.get("on")
    if off is None or on is None:
        return words[0].upper() + words[1:]
    a, b = off.summary, on.summary
    fa, fb = getattr(a, "failed_answers", 0), getattr(b, "failed_answers", 0)
    if fb == 0:
        verdict = "warmstart failed no answer"
        if fa:
            verdict += f", where on-demand alone failed {fa}"
    elif fb < fa:
        verdict = f"warmstart cut the failed answers from {fa} to {fb}"
    else:
        verdict = f"warmstart did not reduce the failed answers ({fa} off, {fb} on)"
    paid = []
    if b.provisioned_gb_s > 0 and not math.isnan(b.provisioned_gb_s):
        paid.append(f"provisioned concurrency kept warm ahead of the bursts "
                    f"({b.provisioned_gb_s:,.1f} GB-s, billed whether or not requests come)")
    if b.gpu_usd > 0:
        endpoint = getattr(b, "endpoint", None)
        paid.append(f"the GPU overflow endpoint's copies while asked for (${b.gpu_usd:.4f}, "
                    f"{endpoint.copy_hours * 60:.1f} copy-minutes)" if endpoint is not None else
                    f"the always-on GPU overflow endpoint (${b.gpu_usd:.4f} over the slice)")
    if getattr(b, "snapstart_usd", 0.0) > 0:
        paid.append(f"SnapStart's snapshot cache and {b.restores} restore"
                    f"{'s' * (b.restores != 1)} (${b.snapstart_usd:.4f})")
    if b.warm_pings:
        paid.append(f"{b.warm_pings} warm pings")
    cost = ""
    if not (math.isnan(a.usd) or math.isnan(b.usd)):
        diff = b.usd - a.usd
        if diff > 0:
            cost = (f" It cost {usd(diff)} more ({usd(b.usd)} against {usd(a.usd)})"
                    + (" because it pays for " + _and(paid) if paid else "")
                    + "; off pays only for the requests it serves.")
        else:
            cost = f" It cost {usd(-diff)} less ({usd(b.usd)} against {usd(a.usd)})."
    return f"{verdict}: {words}{cost}"  # "warmstart" stays lower case (the name)


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def rst_to_html(text: str) -> str:
    """The reStructuredText subset of the docstrings (paragraphs, ``- `` lists, ````code````,
    ``*emphasis*``, section underlines) as HTML; everything else is escaped text."""
    import re

    def inline(chunk: str) -> str:
        chunk = html.escape(chunk, quote=False)
        chunk = re.sub(r"``(.+?)``", r"<code>\1</code>", chunk)
        return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", chunk)

    blocks: list[str] = []
    items: list[str] = []
    para: list[str] = []

    def flush_para() -> None:
        if para:
            blocks.append(f"<p>{inline(' '.join(para))}</p>")
            para.clear()

    def flush_items() -> None:
        if items:
            blocks.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    lines = text.splitlines()
    for k, raw in enumerate(lines):
        line = raw.strip()
        underline = k + 1 < len(lines) and re.fullmatch(r"-{3,}|={3,}", lines[k + 1].strip())
        if re.fullmatch(r"-{3,}|={3,}", line):
            continue
        if underline:
            flush_para()
            flush_items()
            blocks.append(f"<h3>{inline(line)}</h3>")
        elif not line:
            flush_para()
            flush_items()
        elif line.startswith("- "):
            flush_para()
            items.append(line[2:])
        elif items and raw.startswith("  "):
            items[-1] += " " + line
        else:
            flush_items()
            para.append(line)
    flush_para()
    flush_items()
    return "\n".join(blocks)


def write_report(results: Sequence[RunResult], path: Path, *, title: str = "warmstart replay",
                 extra: Sequence[str] = (), overview_path: Path | None = None,
                 reasoning: Sequence[str] = ()) -> Path:
    """Write the HTML report and return its path.

    It opens with :func:`verdict` and :func:`overview_png`; the reasoning follows.

    Parameters
    ----------
    results : sequence of RunResult
    path : Path
        The HTML file.
    title : str
    extra : sequence of str
        Notes listed beside the table.
    overview_path : Path, optional
        Also write the lead picture there (PNG).
    reasoning : sequence of str
        Sentences shown right under the summary paragraph (why this strategy, how much off
        varies), before the table.

    Raises
    ------
    ValueError
        Without any run.
    OSError
        If a file cannot be written.
    """
    if not results:
        raise ValueError("no run to report")
    overview = overview_png(results)
    if overview_path is not None:
        Path(overview_path).parent.mkdir(parents=True, exist_ok=True)
        Path(overview_path).write_bytes(overview)
    lead = (f'<p class="verdict">{html.escape(verdict(results))}</p>'
            f'<figure class="lead"><img alt="latency and failed answers over the slice, off '
            f'against on, with what on kept ready beneath" src="data:image/png;base64,'
            f'{base64.b64encode(overview).decode()}"/><figcaption>'
            f'{html.escape(OVERVIEW_CAPTION)}</figcaption></figure>')
    why = "".join(f"<li>{html.escape(line)}</li>" for line in reasoning)
    why = f'<ul class="reasoning">{why}</ul>' if why else ""
    w = results[0].workload
    opts = results[0].options
    rows = "".join(
        "<tr><th>" + html.escape(label) + "</th>" + "".join(
            f"<td>{html.escape(_fmt(getattr(r.summary, attr), _DIGITS.get(attr, 0)))}</td>"
            for r in results) + "</tr>"
        for attr, label in summary_rows([r.summary for r in results]))
    head = "".join(f"<th>{html.escape(r.config)}</th>" for r in results)
    notes = "".join(f"<li>{html.escape(r.config)}: {html.escape(n)}</li>"
                    for r in results for n in r.notes)
    notes += "".join(f"<li>{html.escape(e)}</li>" for e in extra)
    figs = "".join(figure_html(t, b, CAPTIONS.get(t, "")) for t, b in figures(results))
    walls = ", ".join(f"{r.config} {r.wall_s:.0f} s" for r in results)
    body = f"""<p>Function <code>{html.escape(w.function_id)}</code> ({html.escape(w.trigger)}), trace minutes
{w.start_minute}..{w.start_minute + w.minutes - 1} (minute-of-day {w.minute_label}), {w.n_requests}
requests; time scale {opts.time_scale:g} (trace seconds per real second); simulated work per request =
trace duration{' / time scale' if opts.scale_durations else ''}. Wall time: {html.escape(walls)}.</p>
{why}
<div class="top"><table><thead><tr><th></th>{head}</tr></thead><tbody>{rows}</tbody></table>
<div><ul class="notes">{notes}</ul>
<p><b>Reading these numbers.</b> {html.escape(CAVEATS[0])}</p></div></div>
{figs}
<h2>Definitions</h2><div class="definitions">{rst_to_html(_definitions())}</div>
"""
    return write_page(path, title=title, summary=summary_paragraph(results), body=body,
                      citation=CITATION, lead=lead)


def _definitions() -> str:
    from infra.replay import summary

    return (summary.__doc__ or "").strip()


def replay_text_table(results: Sequence[RunResult]) -> str:
    """The runs' table as text (what the commands print)."""
    return summary_table([r.summary for r in results])


def caveats() -> str:
    """How the time scale and the shared CPUs bias the numbers (printed with every table)."""
    return CAVEATS[0]


def replay_markdown_table(results: Sequence[RunResult]) -> str:
    """The runs' table as Markdown."""
    rows = []
    for attr, label in summary_rows([r.summary for r in results]):
        cells = [label]
        for r in results:
            value = getattr(r.summary, attr)
            cells.append(_fmt(value, _DIGITS.get(attr, 0)) if not (isinstance(value, float)
                                                                   and math.isnan(value)) else "-")
        rows.append(cells)
    return tables.markdown(["", *(r.config for r in results)], rows)
