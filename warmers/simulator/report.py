"""Results: the table, the ratios the issue asks for, the Pareto plot, the per-function CSV."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from functions.runtime.admission import FINISH_PRELOAD_MARGIN_MS
from warmers.simulator.constants import TRACE_CITATION
from warmers.simulator.run import PolicyTotals, SimulationResult

HEADERS = (
    "policy", "requests", "cold starts", "cold %", "SLA breaches", "cold-caused", "overflow",
    "degraded",
    "shed", "p99 ms", "idle GB-s", "Lambda USD", "endpoint USD", "total USD",
)


#: Modelling choices every results page states (see ``engine`` and ``policies`` docstrings).
ASSUMPTIONS = (
    ("- Execution environments: one request at a time; routing to an idle provisioned "
    "environment first, then the most recently used idle on-demand one; no queueing, no "
    "throttling (the busiest function peaks at ~40 in flight, far below 1,000)."),
    ("- Lambda's undocumented idle reclaim is a fixed 10-minute keep-alive for every policy that "
    "sets none of its own; on-demand init is billed (since 2025-08-01); provisioned concurrency "
    "is billed per configured minute from the request (the 5-minute rounding is not modelled) "
    "and usable after 2 min + N/6,000 min."),
    ("- Latency of a cold start = calibrated init (SnapStart: restore) + the request's duration; "
    "the SLA of a function is max(2,000 ms, 1.5 x its p99 duration)."),
    ("- warmstart: the warmer runs every 15 simulated minutes (deployed: every minute), "
    "forecasting peak concurrency for the minutes its plan is in force (lead 3 min = the "
    "allocation delay, window 15 min); AliasPolicy defaults (cap 50, $1/h, sparse below 5 % "
    "active minutes); admission decides after the init phase with the calibrated p95s; the "
    "overflow endpoint's capacity is not limited. Model loading follows Lambda's freeze: it "
    "progresses only while its environment runs (init phase, invocations, warm pings); an "
    "overflowed or degraded cold answer's invocation waits for the model until the SLA "
    f"deadline less {FINISH_PRELOAD_MARGIN_MS:,.0f} ms (the runtime's "
    "`_finish_preload`, "
    "`WARMSTART_FINISH_PRELOAD` on), and the answer leaves and is billed until then (init "
    "phase billed as the toolkit's init); a model not loaded by then stays frozen, and the "
    "environment's next request goes through admission again with the load time left."),
    ("- Hybrid histogram: per function, windows applied to idle periods of the whole function, "
    "pre-warming as many environments as were alive; the ARIMA branch is not modelled."),
)


def _row(t: PolicyTotals) -> tuple[str, ...]:
    return (
        t.policy,
        f"{t.requests:,}",
        f"{t.cold_starts:,}",
        f"{t.cold_start_pct:.3f}",
        f"{t.sla_breaches:,}",
        f"{t.cold_breaches:,}",
        f"{t.overflowed:,}",
        f"{t.degraded:,}",
        f"{t.shed:,}",
        f"{t.p99_ms:,.0f}",
        f"{t.idle_gb_s:,.0f}",
        f"{t.lambda_usd:.2f}",
        f"{t.endpoint_usd:.2f}",
        f"{t.total_usd:.2f}",
    )


def text_table(result: SimulationResult) -> str:
    """Fixed-width table for the terminal."""
    rows = [HEADERS] + [_row(t) for t in result.totals]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    lines = []
    for k, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(result: SimulationResult) -> str:
    """GitHub-flavoured Markdown table of the totals."""
    out = ["| " + " | ".join(HEADERS) + " |", "|" + "|".join(
        ["---"] + ["---:"] * (len(HEADERS) - 1)) + "|"]
    for t in result.totals:
        out.append("| " + " | ".join(_row(t)) + " |")
    return "\n".join(out)


@dataclass(frozen=True)
class Ratios:
    """The issue's targets as ratios.

    Attributes
    ----------
    breaches_vs : dict[str, float]
        warmstart SLA breaches / each baseline's (``inf`` when the baseline has none and
        warmstart has some; ``nan`` when both have none).
    cheapest_same_rate : str or None
        Cheapest baseline whose cold-start rate is <= warmstart's (None: no baseline reaches
        it).
    cost_ratio_total, cost_ratio_lambda : float
        warmstart total (with the endpoint) / that baseline's total, and the same without the
        endpoint (``nan`` without such a baseline).
    """

    breaches_vs: dict[str, float]
    cold_breaches_vs: dict[str, float]
    cheapest_same_rate: str | None
    cost_ratio_total: float
    cost_ratio_lambda: float


def is_baseline(name: str) -> bool:
    """Every policy except the warmstart variants."""
    return not name.startswith("warmstart")


def _ratio(a: int, b: int) -> float:
    if b == 0:
        return float("nan") if a == 0 else math.inf
    return a / b


def ratios(result: SimulationResult, policy: str = "warmstart") -> Ratios:
    """warmstart against the baselines (every other policy in the result).

    Raises
    ------
    KeyError
        No policy called ``policy``.
    """
    ws = result.by_name(policy)
    baselines = [t for t in result.totals if is_baseline(t.policy)]
    breaches = {b.policy: _ratio(ws.sla_breaches, b.sla_breaches) for b in baselines}
    cold = {b.policy: _ratio(ws.cold_breaches, b.cold_breaches) for b in baselines}
    reaching = [b for b in baselines if b.cold_start_pct <= ws.cold_start_pct]
    if not reaching:
        return Ratios(breaches, cold, None, float("nan"), float("nan"))
    cheapest = min(reaching, key=lambda b: b.total_usd)
    return Ratios(
        breaches,
        cold,
        cheapest.policy,
        ws.total_usd / cheapest.total_usd if cheapest.total_usd else math.inf,
        ws.lambda_usd / cheapest.total_usd if cheapest.total_usd else math.inf,
    )


def ratios_markdown(result: SimulationResult, policy: str = "warmstart") -> str:
    r = ratios(result, policy)
    ws = result.by_name(policy)
    lines = [
        (f"SLA breaches, {policy} / baseline ({policy}: {ws.sla_breaches:,} in all, "
        f"{ws.cold_breaches:,} cold-caused, i.e. of requests whose warm duration met the SLA):"),
        "",
        "| baseline | breaches | ratio | cold-caused | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in result.totals:
        if not is_baseline(t.policy):
            continue
        lines.append(
            f"| {t.policy} | {t.sla_breaches:,} | {r.breaches_vs[t.policy]:.3f} | "
            f"{t.cold_breaches:,} | {r.cold_breaches_vs[t.policy]:.3f} |"
        )
    lines.append("")
    lines.append(cost_words(result, policy, bold=lambda text: f"**{text}**"))
    return "\n".join(lines)


def cost_words(result: SimulationResult, policy: str = "warmstart", *,
               bold: Callable[[str], str] = lambda text: text) -> str:
    """The cost sentence: ``policy`` against the cheapest baseline that reaches its cold-start
    rate (else the baseline with the fewest cold starts), with and without the endpoint;
    ``bold`` marks the ratios (Markdown ``**``, or nothing for plain text).

    Raises
    ------
    KeyError
        No policy called ``policy``.
    """
    r = ratios(result, policy)
    ws = result.by_name(policy)
    if r.cheapest_same_rate is None:
        base = [t for t in result.totals if is_baseline(t.policy)]
        nearest = min(base, key=lambda t: (t.cold_start_pct, t.total_usd))
        cheapest = min(base, key=lambda t: t.total_usd)
        return (
            f"Cost: no baseline reaches {policy}'s cold-start rate ({ws.cold_start_pct:.3f} %). "
            f"The baseline with the fewest cold starts is {bold(nearest.policy)} "
            f"({nearest.cold_start_pct:.3f} %, ${nearest.total_usd:.2f}): {policy} / it = "
            f"{bold(f'{ws.total_usd / nearest.total_usd:.3f}')} with the overflow endpoint "
            f"(${ws.total_usd:.2f}), {bold(f'{ws.lambda_usd / nearest.total_usd:.3f}')} for "
            f"Lambda alone (${ws.lambda_usd:.2f}). The cheapest baseline is {cheapest.policy} "
            f"(${cheapest.total_usd:.2f}, {cheapest.cold_start_pct:.3f} % cold starts)."
        )
    b = result.by_name(r.cheapest_same_rate)
    return (
        f"Cost: the cheapest baseline with a cold-start rate <= {policy}'s "
        f"({ws.cold_start_pct:.3f} %) is {bold(b.policy)} ({b.cold_start_pct:.3f} %, "
        f"${b.total_usd:.2f}). {policy} / it = {bold(f'{r.cost_ratio_total:.3f}')} with the "
        f"overflow endpoint (${ws.total_usd:.2f}), {bold(f'{r.cost_ratio_lambda:.3f}')} for "
        f"Lambda alone (${ws.lambda_usd:.2f})."
    )


def _plural(n: int, word: str, suffix: str = "s") -> str:
    return f"{n:,} {word}{suffix * (n != 1)}"


def summary_words(result: SimulationResult, policy: str = "warmstart") -> str:
    """What the simulation found, in words: cold starts and cold-caused SLA breaches of
    ``policy`` against the best baseline and plain on-demand (Lambda's 10-minute keep-alive),
    and what its extra cost pays for. Without ``policy`` in the result: the baselines' best and
    cheapest."""
    totals = result.totals
    base = [t for t in totals if is_baseline(t.policy)]
    if not base:
        return f"{len(totals)} policies simulated."
    fewest = min(base, key=lambda t: (t.cold_starts, t.total_usd))
    cheapest = min(base, key=lambda t: (t.total_usd, t.cold_starts))
    plain = next((t for t in base if "keep-alive 10 min" in t.policy), cheapest)
    scope = (f"Over {result.n_functions:,} functions x {result.n_minutes:,} minutes "
             f"({fewest.requests:,} requests)")
    ws = next((t for t in totals if t.policy == policy), None)
    if ws is None:
        return (f"{scope}, the baseline with the fewest cold starts was {fewest.policy} "
                f"({_plural(fewest.cold_starts, 'cold start')}, {fewest.cold_start_pct:.3f} %, "
                f"${fewest.total_usd:.2f}); the cheapest was {cheapest.policy} "
                f"(${cheapest.total_usd:.2f}, {_plural(cheapest.cold_starts, 'cold start')}).")
    if ws.cold_starts <= fewest.cold_starts:
        rank = f"{policy} had the fewest cold starts of the {len(totals)} policies"
    else:
        rank = f"{policy} had more cold starts than {fewest.policy}"
    words = (f"{scope}, {rank}: {_plural(ws.cold_starts, 'cold start')} "
             f"({ws.cold_start_pct:.3f} % of requests), against {fewest.cold_starts:,} for the "
             f"best baseline ({fewest.policy}) and {plain.cold_starts:,} for {plain.policy}. ")
    if ws.cold_breaches == 0:
        words += "None of its SLA breaches was caused by a cold start"
    else:
        words += f"{_plural(ws.cold_breaches, 'SLA breach', 'es')} were caused by cold starts"
    words += (f" ({plain.cold_breaches:,} for {plain.policy}); the {ws.sla_breaches - ws.cold_breaches:,} "
              "other breaches are requests whose own warm duration exceeds the SLA (the same under "
              "every policy). ")
    diff = ws.total_usd - plain.total_usd
    if diff > 0.005:
        paid = []
        if ws.endpoint_usd > 0:
            paid.append(f"the always-on GPU overflow endpoint (${ws.endpoint_usd:.2f}), to which "
                        f"{_plural(ws.overflowed, 'cold request')} overflowed")
        extra_lambda = ws.lambda_usd - plain.lambda_usd
        if extra_lambda > 0.005:
            paid.append(f"${extra_lambda:.2f} more on Lambda (provisioned concurrency and warm "
                        "pings ahead of bursts, the cold answers' billed wait for the model)")
        words += (f"It cost ${ws.total_usd:.2f}, ${diff:.2f} more than {plain.policy} "
                  f"(${plain.total_usd:.2f})"
                  + (", because it pays for " + " and ".join(paid) if paid else "")
                  + f"; on Lambda alone it cost ${ws.lambda_usd:.2f}.")
    else:
        words += (f"It cost ${ws.total_usd:.2f}, against ${plain.total_usd:.2f} for "
                  f"{plain.policy}.")
    return words


def table_rows(result: SimulationResult) -> list[tuple[str, ...]]:
    """The results table's rows as text, one per policy, in `HEADERS` order."""
    return [_row(t) for t in result.totals]


#: What the Pareto plot shows and what to look for (the caption under it in the HTML report).
PARETO_CAPTION = (
    "Each point is one policy over the whole trace: its cost (Lambda, plus the GPU overflow "
    "endpoint where it has one) against the share of requests that met a cold start; the "
    "hollow circle is warmstart without the endpoint's cost. Lower and further left is better; "
    "the dashed line joins the policies no other policy beats on both. Both axes are "
    "logarithmic. Look for how far warmstart sits below the baselines, and what it pays to get "
    "there.")


#: Marker of each policy in the Pareto plot, in the order of the result's totals.
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">", "h", "*", "p")


def _place_labels(points_px: list[tuple[float, float]], sizes_px: list[tuple[float, float]],
                  *, dx: float = 9.0, step: float = 12.0, marker_px: float = 7.0,
                  ) -> list[tuple[float, float]]:
    """Lower-left corners (display px) of one label per point: right of its point, moved up or
    down in ``step`` px until it overlaps neither a label already placed nor another point."""
    def hits(r: tuple[float, float, float, float], q: tuple[float, float, float, float]) -> bool:
        return r[0] < q[2] and q[0] < r[2] and r[1] < q[3] and q[1] < r[3]

    marks = [(x - marker_px, y - marker_px, x + marker_px, y + marker_px) for x, y in points_px]
    placed: list[tuple[float, float, float, float]] = []
    corners: list[tuple[float, float]] = []
    for i, ((x, y), (w, h)) in enumerate(zip(points_px, sizes_px)):
        for k in range(41):
            off = step * ((k + 1) // 2) * (1 if k % 2 else -1) if k else 0.0
            rect = (x + dx, y - h / 2 + off, x + dx + w, y + h / 2 + off)
            others = [m for j, m in enumerate(marks) if j != i]
            if not any(hits(rect, q) for q in placed + others):
                break
        placed.append(rect)
        corners.append((rect[0], rect[1]))
    return corners


def pareto_points(result: SimulationResult,
                  policy: str = "warmstart") -> list[tuple[str, float, float]]:
    """(label, total USD, cold-start %) of every point the Pareto plot draws: one per policy,
    and warmstart once more for Lambda alone when it pays for the overflow endpoint."""
    pts = [(t.policy, t.total_usd, t.cold_start_pct) for t in result.totals]
    ws = next((t for t in result.totals if t.policy == policy), None)
    if ws is not None and ws.endpoint_usd > 0:
        pts.append((f"{policy} (Lambda only)", ws.lambda_usd, ws.cold_start_pct))
    return pts


def pareto_plot(result: SimulationResult, path: Path, policy: str = "warmstart") -> None:
    """PNG scatter of cold-start % against total USD, Pareto frontier drawn (matplotlib Agg).

    Every policy has its own marker and a label beside its point (labels of nearby points are
    spread apart, with a leader line), and the legend lists every policy with its figures.
    Both axes are logarithmic with labelled ticks at 1, 2 and 5 x 10^k. warmstart is drawn
    twice when it pays for the endpoint: with it (filled) and Lambda only (hollow).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    pts = pareto_points(result, policy)
    for k, (name, x, y) in enumerate(pts):
        is_ws = name.startswith(policy)
        hollow = name.endswith("(Lambda only)")
        colour = "tab:red" if is_ws else f"C{k % 10 if k % 10 != 3 else 9}"
        marker = ("D" if "no overflow" in name else "o") if is_ws else _MARKERS[k % len(_MARKERS)]
        ax.scatter([x], [y], s=70 if is_ws else 45, marker=marker,
                   facecolors="none" if hollow else colour, edgecolors=colour, zorder=3,
                   label=f"{name}: {y:.3f} %, ${x:,.2f}")
    frontier = []
    best = math.inf
    for _, x, y in sorted(pts, key=lambda p: (p[1], p[2])):
        if y < best:
            frontier.append((x, y))
            best = y
    if len(frontier) > 1:
        ax.plot([p[0] for p in frontier], [p[1] for p in frontier], "--", c="gray", lw=1,
                zorder=2, label="Pareto frontier (no policy both cheaper and colder)")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=0.01)
    xs = [p[1] for p in pts if p[1] > 0]
    if xs:
        ax.set_xlim(min(xs) / 1.25, max(xs) * 1.6)
    ys = [p[2] for p in pts]
    ax.set_ylim(0.0 if min(ys) <= 0.01 else min(ys) / 1.3, max(ys) * 1.3 if max(ys) > 0 else 1)
    # several labelled ticks per decade, as plain numbers (no 10^k notation)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=30))
    ax.xaxis.set_minor_locator(ticker.LogLocator(base=10, subs=tuple(range(1, 10)), numticks=30))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"${v:,.{2 if v < 1 else 0}f}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_locator(ticker.SymmetricalLogLocator(
        base=10, linthresh=0.01, subs=(1.0, 2.0, 3.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g} %"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("cost over the trace, USD (log scale)")
    ax.set_ylabel("cold starts, % of requests (log scale)")
    ax.set_title(
        f"Cold starts vs cost, {result.n_functions} functions x {result.n_minutes} min",
        fontsize=11,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
              title="policy: cold starts, cost", title_fontsize=8.5)
    fig.text(0.01, 0.005, "Azure Functions Trace 2019, Shahrad et al., USENIX ATC 2020 "
             "(CC-BY 4.0)", fontsize=6, color="gray")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="x", alpha=0.12)
    fig.tight_layout(rect=(0, 0.02, 1, 1))  # before placing labels: it moves the axes
    # labels beside the points, moved apart where points crowd (display coordinates)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    texts = [ax.text(0, 0, name, fontsize=8.5, transform=None) for name, _, _ in pts]
    sizes = [(t.get_window_extent(renderer).width, t.get_window_extent(renderer).height)
             for t in texts]
    for t in texts:
        t.remove()
    points_px = [tuple(ax.transData.transform((x, y))) for _, x, y in pts]
    corners = _place_labels(points_px, sizes)
    to_data = ax.transData.inverted().transform
    for (name, x, y), (cx, cy), (_, h) in zip(pts, corners, sizes):
        lx, ly = to_data((cx, cy + h / 2))
        ax.annotate(name, (x, y), xytext=(lx, ly), textcoords="data", fontsize=8.5,
                    va="center", ha="left",
                    arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.6,
                                "shrinkA": 0, "shrinkB": 4})
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def write_function_csv(result: SimulationResult, path: Path) -> None:
    """One row per function and policy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["function_id", "trigger", "policy", "requests", "cold_starts", "env_inits",
                    "sla_breaches", "cold_breaches", "overflowed", "degraded", "shed", "pings", "p99_ms",
                    "idle_gb_s", "lambda_usd", "sla_ms"])
        for r in result.rows:
            w.writerow([r.function_id, r.trigger, r.policy, r.requests, r.cold_starts,
                        r.env_inits, r.sla_breaches, r.cold_breaches, r.overflowed, r.degraded, r.shed, r.pings,
                        f"{r.p99_ms:.3f}", f"{r.idle_gb_s:.3f}", f"{r.lambda_usd:.6f}",
                        f"{r.sla_ms:.0f}"])


def markdown_report(result: SimulationResult, *, title: str, preamble: str = "",
                    policy: str = "warmstart") -> str:
    """Full Markdown report: table, ratios, citation."""
    parts = [f"# {title}", ""]
    if preamble:
        parts += [preamble, ""]
    parts += [markdown_table(result), "", "Assumptions:", "", *ASSUMPTIONS, ""]
    if any(t.policy == policy for t in result.totals):
        parts += [ratios_markdown(result, policy), ""]
    parts += [TRACE_CITATION, ""]
    return "\n".join(parts)
