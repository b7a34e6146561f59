"""The replay report: one HTML file with the table and embedded PNGs (matplotlib, Agg).

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

import numpy as np

from infra.replay.runner import RunResult
from infra.replay.summary import _DIGITS, ROWS, _fmt, table

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


def _png(fig: object) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")  # type: ignore[attr-defined]
    return base64.b64encode(buf.getvalue()).decode()


def _minutes(result: RunResult, t_s: np.ndarray) -> np.ndarray:
    return (t_s - result.t0_s) / 60.0


def figures(results: Sequence[RunResult]) -> list[tuple[str, str]]:
    """(title, base64 PNG) of each figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        ax.set_xlabel("trace minute of the slice")
        ax.set_title(f"{r.config}: latency (real ms)")
        ax.legend(fontsize=7, loc="upper right")
    axes[0][0].set_ylabel("latency (ms)")
    out.append(("Latency over time", _png(fig)))
    plt.close(fig)

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
        ax.set_xlabel("trace minute of the slice")
        ax.set_title(f"{r.config}: concurrency vs provisioned concurrency")
        ax.legend(fontsize=7, loc="upper right")
    axes[0][0].set_ylabel("environments")
    out.append(("Concurrency against provisioned concurrency", _png(fig)))
    plt.close(fig)

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
            ax.axvline(0, color="grey", lw=0.8)
            ax.axvline(minutes, color="grey", lw=0.8)
            ax.set_xlim(min(-1.0, float(pt.min()) - 1.0), max(minutes, float(pt.max()) + lead + window) + 1)
        else:
            ax.text(0.5, 0.5, "no warmer in this configuration", transform=ax.transAxes,
                    ha="center", fontsize=9)
            ax.set_xlim(-1, minutes + 1)
        ax.set_xlabel("trace minute (slice between the grey lines)")
        ax.set_title(f"{r.config}: forecast")
        ax.legend(fontsize=7, loc="upper right")
    axes[0][0].set_ylabel("concurrency")
    out.append(("Forecast against measured concurrency", _png(fig)))
    plt.close(fig)
    return out


def write_report(results: Sequence[RunResult], path: Path, *, title: str = "warmstart replay",
                 extra: Sequence[str] = ()) -> Path:
    """Write the HTML report and return its path.

    Raises
    ------
    ValueError
        Without any run.
    OSError
        If the file cannot be written.
    """
    if not results:
        raise ValueError("no run to report")
    w = results[0].workload
    opts = results[0].options
    rows = "".join(
        "<tr><th>" + html.escape(label) + "</th>" + "".join(
            f"<td>{html.escape(_fmt(getattr(r.summary, attr), _DIGITS.get(attr, 0)))}</td>"
            for r in results) + "</tr>"
        for attr, label in ROWS)
    head = "".join(f"<th>{html.escape(r.config)}</th>" for r in results)
    notes = "".join(f"<li>{html.escape(r.config)}: {html.escape(n)}</li>"
                    for r in results for n in r.notes)
    notes += "".join(f"<li>{html.escape(e)}</li>" for e in extra)
    figs = "".join(f"<h2>{html.escape(t)}</h2><img src=\"data:image/png;base64,{b}\"/>"
                   for t, b in figures(results))
    walls = ", ".join(f"{r.config} {r.wall_s:.0f} s" for r in results)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1400px;margin:1em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
th:first-child{{text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Function <code>{html.escape(w.function_id)}</code> ({html.escape(w.trigger)}), trace minutes
{w.start_minute}..{w.start_minute + w.minutes - 1} (minute-of-day {w.minute_label}), {w.n_requests}
requests; time scale {opts.time_scale:g} (trace seconds per real second); simulated work per request =
trace duration{' / time scale' if opts.scale_durations else ''}. Wall time: {html.escape(walls)}.</p>
<table><tr><th></th>{head}</tr>{rows}</table>
<ul>{notes}</ul>
<p><b>Reading these numbers.</b> {html.escape(CAVEATS[0])}</p>
{figs}
<h2>Definitions</h2><pre>{html.escape(_definitions())}</pre>
<p>{html.escape(CITATION)}</p></body></html>"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc, encoding="utf-8")
    return path


def _definitions() -> str:
    from infra.replay import summary

    return (summary.__doc__ or "").strip()


def text_table(results: Sequence[RunResult]) -> str:
    """The runs' table as text (what the commands print)."""
    return table([r.summary for r in results])


def caveats() -> str:
    """How the time scale and the shared CPUs bias the numbers (printed with every table)."""
    return CAVEATS[0]


def markdown_table(results: Sequence[RunResult]) -> str:
    """The runs' table as Markdown."""
    lines = ["| | " + " | ".join(r.config for r in results) + " |",
             "|---|" + "---:|" * len(results)]
    for attr, label in ROWS:
        cells = []
        for r in results:
            value = getattr(r.summary, attr)
            cells.append(_fmt(value, _DIGITS.get(attr, 0)) if not (isinstance(value, float)
                                                                   and math.isnan(value)) else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
