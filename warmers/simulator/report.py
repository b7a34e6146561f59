"""Results: the table, the ratios the issue asks for, the Pareto plot, the per-function CSV."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from functions.runtime.admission import FINISH_PRELOAD_MARGIN_MS
from warmers.simulator import tables
from warmers.simulator.constants import TRACE_CITATION
from warmers.simulator.run import PolicyTotals, SimulationResult

HEADERS = (
    "policy", "requests", "cold starts", "cold %", "failed answers", "failed %", "late",
    "degraded", "shed", "throttled", "overflow", "tail (warm > SLA)", "p99 ms", "idle GB-s", "Lambda USD",
    "PC USD", "endpoint USD", "warmer USD", "total USD",
)

#: What a failed answer is (said under every table).
FAILED_DEFINITION = (
    "failed answers = late + degraded + shed + throttled: a request fails when it is shed (503 "
    "with Retry-After), answered degraded, throttled by Lambda (429: the function already had "
    "its concurrency limit in flight, the same limit for every policy), or answered later than "
    "its SLA although its warm duration met the SLA (late). The tail = requests whose warm duration alone exceeds the SLA: the same "
    "under every policy, not counted as failures when answered late (they are when shed or "
    "degraded). The engine models no errors; requests longer than 30 s (the deployment's "
    "default function timeout) run as the trace measured them, counted apart as long requests. Lambda USD includes PC USD (provisioned "
    "concurrency); warmer USD = the warmer's CloudWatch GetMetricData reads (3 metrics per "
    "function per warmer run); total = Lambda + endpoint + warmer.")


#: Modelling choices every results page states (see ``engine`` and ``policies`` docstrings).
ASSUMPTIONS = (
    ("- Latency quantiles (p99 ms here and in the CSV files) come from a mergeable DDSketch "
    "(`warmers/simulator/sketch.py`): within 1 % (relative) of the exact order statistic at "
    "rank floor(0.99 (n - 1)); every count (requests, cold starts, failed answers, tail) is "
    "exact. The busiest functions run in time chunks with their execution environments "
    "carried across each cut (the same numbers as unsplit)."),
    ("- Execution environments: one request at a time; routing to an idle provisioned "
    "environment first, then the most recently used idle on-demand one; no queueing, no "
    "throttling (the busiest function peaks at ~40 in flight, far below 1,000)."),
    ("- Lambda's undocumented idle reclaim is a fixed 10-minute keep-alive for every policy that "
    "sets none of its own; on-demand init is billed (since 2025-08-01); provisioned concurrency "
    "is billed per configured minute from the request (the 5-minute rounding is not modelled) "
    "and usable after 2 min + N/6,000 min."),
    ("- Latency of a cold start = its init (SnapStart: restore) + the request's duration; each "
    "cold start's init is drawn from a lognormal through the calibrated p50 and p95 (one "
    "standard normal per request, seeded; inits not caused by a request take the median; "
    "inits billed at the lognormal's mean), so a policy that waits for a cold start meets the "
    "p95 as often as the calibration says; "
    "the SLA of a function is max(2,000 ms, 1.5 x its p99 duration). Durations: linear in the "
    "quantile function through the trace's percentiles up to p99, then a lognormal tail from "
    "p99 to the maximum, the maximum placed at level N/(N+1) of the N executions behind the "
    "percentiles (`trace.sample_durations`)."),
    ("- warmstart deploys, per function, the cold-start strategy `warmers.strategy."
    "recommend_strategy` advises from its SLA, its duration percentiles and the calibrated "
    "init and restore: SnapStart where more than 0.1 % of on-demand cold starts would answer "
    "after the SLA (the lognormal init against the duration's quantile function), else on "
    "demand with the warmer's provisioned concurrency (SnapStart bills its snapshot cache for "
    "every second the version is active and excludes provisioned concurrency). On SnapStart "
    "functions the planner plans nothing (restores cover cold starts) and admission has "
    "nothing to decide (a restored environment holds its model); the warmer still reads "
    "their metrics for the degradation level (counted in the warmer's cost). The CSV's "
    "`strategy` column says which, per function; `--strategy provisioned` runs every function "
    "on demand (the policy before issue 11's rework)."),
    ("- warmstart's warmer runs every 15 simulated minutes (deployed: every minute), "
    "forecasting peak concurrency for the minutes its plan is in force (lead 3 min = the "
    "allocation delay, window 15 min); AliasPolicy defaults (cap 50, $1/h, sparse below 5 % "
    "active minutes); admission decides after the init phase with the calibrated p95s. The "
    "GPU overflow endpoint is shared by every function and simulated after them "
    "(`warmers/simulator/endpoint.py`): `warmstart` plans its instances every warmer run "
    "with the warmer's `plan_endpoint` from the sum of the functions' forecast new "
    "environments (an inference component, which can hold 0), in service 10 min after a "
    "scale-out is asked for (SageMaker: 'several minutes') and billed from the ask; "
    "`warmstart, always-on endpoint` holds 1 instance throughout; each instance answers the "
    "calibration's measured `endpoint_concurrency` requests at once (else 4, the planner's "
    "default) behind one FIFO queue; an answer the queue (or "
    "the overflow path itself) would bring after the SLA is a timeout of the overflow call, "
    "answered degraded at the deadline as the runtime does; a request sent while no instance is in service gets what "
    "admission decides without overflow (local, degraded or shed). Model loading follows "
    "Lambda's freeze: it "
    "progresses only while its environment runs (init phase, invocations and their "
    "post-response phase, warm pings); an overflowed or degraded cold answer leaves at once "
    "and the model goes on loading in the invocation's post-response phase "
    "(`WARMSTART_FINISH_PRELOAD` after, the default: the environment is busy and billed "
    "until the model is ready, at most the 30 s function timeout; with `before` the "
    f"invocation would wait until the SLA deadline less {FINISH_PRELOAD_MARGIN_MS:,.0f} ms "
    "and answer then); init phase billed as the toolkit's init; a model not loaded when the "
    "invocation ends stays frozen, and the environment's next request goes through admission "
    "again with the load time left."),
    ("- Hybrid histogram (Shahrad et al. sec. 4.2): per function, in whole minutes, the function "
    "loaded or unloaded as a unit (its environments kept while it is loaded); idle times in "
    "1-minute bins over 4 h; pre-warm 0.9 x the 5th and keep-alive up to 1.1 x the 99th "
    "percentile bin; representative with >= 10 idle times and a CV of the bin counts >= 2, else "
    "a 240-minute keep-alive; more than half of the idle times out of bounds: the paper's ARIMA "
    "is replaced by a random walk's forecast (the last idle time), pre-warmed with a 15 % "
    "margin. The 'issue 11 reading' row: CV of the idle times, numpy percentiles, whole "
    "minutes, no forecast branch (`HistogramWindows.issue_model`)."),
)


def _row(t: PolicyTotals) -> tuple[str, ...]:
    return (
        t.policy,
        f"{t.requests:,}",
        f"{t.cold_starts:,}",
        f"{t.cold_start_pct:.3f}",
        f"{t.failed_answers:,}",
        f"{t.failed_pct:.4f}",
        f"{t.late:,}",
        f"{t.degraded:,}",
        f"{t.shed:,}",
        f"{t.throttled:,}",
        f"{t.overflowed:,}",
        f"{t.tail:,}",
        f"{t.p99_ms:,.0f}",
        f"{t.idle_gb_s:,.0f}",
        f"{t.lambda_usd:.2f}",
        f"{t.pc_usd:.2f}",
        f"{t.endpoint_usd:.2f}",
        f"{t.warmer_usd:.2f}",
        f"{t.total_usd:.2f}",
    )


def text_table(result: SimulationResult) -> str:
    """Fixed-width table of the totals for the terminal (:func:`tables.fixed_width`)."""
    return tables.fixed_width([HEADERS, *table_rows(result)])


def markdown_table(result: SimulationResult) -> str:
    """GitHub-flavoured Markdown table of the totals (:func:`tables.markdown`)."""
    return tables.markdown(HEADERS, table_rows(result))


#: Cost target where no baseline reaches warmstart's failed-answer rate: at most this times
#: the cheapest baseline (issue 11).
COST_SLACK = 1.1


@dataclass(frozen=True)
class Ratios:
    """The issue's targets as ratios.

    Attributes
    ----------
    failed_vs : dict[str, float]
        ``policy``'s failed answers / each baseline's (``inf`` when the baseline has none and
        ``policy`` has some; ``nan`` when both have none).
    cheapest_same_rate : str or None
        Cheapest baseline whose failed-answer rate is <= ``policy``'s (None: none reaches it).
    cheapest : str
        The cheapest baseline overall.
    cost_ratio_total, cost_ratio_lambda : float
        ``policy``'s total (with the endpoint) / the reference baseline's total, and the same
        for Lambda alone; the reference is ``cheapest_same_rate``, else ``cheapest``.
    cost_target : float
        1 against ``cheapest_same_rate``, ``COST_SLACK`` against ``cheapest``.
    """

    failed_vs: dict[str, float]
    cheapest_same_rate: str | None
    cheapest: str
    cost_ratio_total: float
    cost_ratio_lambda: float
    cost_target: float

    @property
    def cost_met(self) -> bool:
        return self.cost_ratio_total <= self.cost_target


def is_baseline(name: str) -> bool:
    """Every policy except the warmstart variants."""
    return not name.startswith("warmstart")


def _ratio(a: int, b: int) -> float:
    if b == 0:
        return float("nan") if a == 0 else math.inf
    return a / b


def ratios(result: SimulationResult, policy: str = "warmstart") -> Ratios:
    """``policy`` against the baselines (every other non-warmstart policy in the result).

    Raises
    ------
    KeyError
        No policy called ``policy``.
    ValueError
        No baseline in the result.
    """
    ws = result.by_name(policy)
    baselines = [t for t in result.totals if is_baseline(t.policy)]
    if not baselines:
        raise ValueError("no baseline policy in the result")
    failed = {b.policy: _ratio(ws.failed_answers, b.failed_answers) for b in baselines}
    cheapest = min(baselines, key=lambda b: (b.total_usd, b.failed_answers))
    reaching = [b for b in baselines if b.failed_answers <= ws.failed_answers]
    ref, target = (min(reaching, key=lambda b: b.total_usd), 1.0) if reaching else (
        cheapest, COST_SLACK)

    def over(x: float) -> float:
        return x / ref.total_usd if ref.total_usd else math.inf

    return Ratios(failed, ref.policy if reaching else None, cheapest.policy,
                  over(ws.total_usd), over(ws.lambda_usd), target)


def ratios_markdown(result: SimulationResult, policy: str = "warmstart") -> str:
    r = ratios(result, policy)
    ws = result.by_name(policy)
    lines = [
        (f"Failed answers, {policy} / baseline ({policy}: {ws.failed_answers:,} = "
         f"{ws.late:,} late + {ws.degraded:,} degraded + {ws.shed:,} shed; the tail of "
         f"{ws.tail:,} requests slower than the SLA even when warm is apart):"),
        "",
        "| baseline | failed answers | late | degraded | shed | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for t in result.totals:
        if not is_baseline(t.policy):
            continue
        lines.append(
            f"| {t.policy} | {t.failed_answers:,} | {t.late:,} | {t.degraded:,} | {t.shed:,} | "
            f"{r.failed_vs[t.policy]:.3f} |"
        )
    lines.append("")
    lines.append(cost_words(result, policy, bold=lambda text: f"**{text}**"))
    return "\n".join(lines)


def cost_words(result: SimulationResult, policy: str = "warmstart", *,
               bold: Callable[[str], str] = lambda text: text) -> str:
    """The cost sentence: ``policy`` against the cheapest baseline that fails no more answers
    (target: no more than it), else against the cheapest baseline (target: at most
    ``COST_SLACK`` times it), with and without the endpoint; ``bold`` marks the ratios
    (Markdown ``**``, or nothing for plain text).

    Raises
    ------
    KeyError
        No policy called ``policy``.
    """
    r = ratios(result, policy)
    ws = result.by_name(policy)
    verdict = "met" if r.cost_met else "not met"
    if r.cheapest_same_rate is None:
        c = result.by_name(r.cheapest)
        return (
            f"Cost: no baseline fails as few answers as {policy} ({ws.failed_answers:,}, "
            f"{ws.failed_pct:.4f} %). Against the cheapest baseline, {bold(c.policy)} "
            f"(${c.total_usd:.2f}, {c.failed_answers:,} failed answers): {policy} / it = "
            f"{bold(f'{r.cost_ratio_total:.3f}')} with the overflow endpoint "
            f"(${ws.total_usd:.2f}), {bold(f'{r.cost_ratio_lambda:.3f}')} for Lambda alone "
            f"(${ws.lambda_usd:.2f}); target <= {COST_SLACK:g}: {verdict}."
        )
    b = result.by_name(r.cheapest_same_rate)
    return (
        f"Cost: the cheapest baseline failing no more answers than {policy} "
        f"({ws.failed_answers:,}) is {bold(b.policy)} ({b.failed_answers:,}, "
        f"${b.total_usd:.2f}). {policy} / it = {bold(f'{r.cost_ratio_total:.3f}')} with the "
        f"overflow endpoint (${ws.total_usd:.2f}), {bold(f'{r.cost_ratio_lambda:.3f}')} for "
        f"Lambda alone (${ws.lambda_usd:.2f}); target <= 1: {verdict}."
    )


def _plural(n: int, word: str, suffix: str = "s") -> str:
    return f"{n:,} {word}{suffix * (n != 1)}"


def summary_words(result: SimulationResult, policy: str = "warmstart") -> str:
    """What the simulation found, in words: failed answers (with their parts) and cold starts
    of ``policy`` against the baseline failing the fewest and plain on-demand (Lambda's
    10-minute keep-alive), the policy-independent tail apart, and what its extra cost pays
    for. Without ``policy`` in the result: the baselines' best and cheapest."""
    totals = result.totals
    base = [t for t in totals if is_baseline(t.policy)]
    if not base:
        return f"{len(totals)} policies simulated."
    fewest = min(base, key=lambda t: (t.failed_answers, t.total_usd))
    cheapest = min(base, key=lambda t: (t.total_usd, t.failed_answers))
    plain = next((t for t in base if "keep-alive 10 min" in t.policy), cheapest)
    scope = (f"Over {result.n_functions:,} functions x {result.n_minutes:,} minutes "
             f"({fewest.requests:,} requests)")
    ws = next((t for t in totals if t.policy == policy), None)
    if ws is None:
        return (f"{scope}, the baseline with the fewest failed answers was {fewest.policy} "
                f"({_plural(fewest.failed_answers, 'failed answer')}, "
                f"{_plural(fewest.cold_starts, 'cold start')}, ${fewest.total_usd:.2f}); the "
                f"cheapest was {cheapest.policy} (${cheapest.total_usd:.2f}, "
                f"{_plural(cheapest.failed_answers, 'failed answer')}).")
    if ws.failed_answers < fewest.failed_answers:
        rank = f"{policy} failed the fewest answers of the {len(totals)} policies"
    elif ws.failed_answers == fewest.failed_answers:
        rank = f"{policy} failed as few answers as {fewest.policy}, the best baseline"
    else:
        rank = f"{policy} failed more answers than {fewest.policy}"
    words = (f"{scope}, {rank}: {_plural(ws.failed_answers, 'failed answer')} "
             f"({ws.late:,} late, {ws.degraded:,} degraded, {ws.shed:,} shed), against "
             f"{fewest.failed_answers:,} for the best baseline ({fewest.policy}) and "
             f"{plain.failed_answers:,} for {plain.policy}; "
             f"{_plural(ws.cold_starts, 'cold start')} ({ws.cold_start_pct:.3f} % of "
             f"requests; {plain.cold_starts:,} for {plain.policy}). "
             f"Apart from these, {_plural(ws.tail, 'request')} had a warm duration over "
             "their SLA (the same under every policy). ")
    diff = ws.total_usd - plain.total_usd
    if diff > 0.005:
        paid = []
        if ws.endpoint_usd > 0:
            hours = ws.endpoint.get("instance_hours", float("nan"))
            paid.append(f"the GPU overflow endpoint (${ws.endpoint_usd:.2f}, {hours:.1f} "
                        f"instance-hours), to which {_plural(ws.overflowed, 'cold request')} "
                        "overflowed")
        if ws.warmer_usd > 0.005:
            paid.append(f"the warmer's CloudWatch reads (${ws.warmer_usd:.2f})")
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


#: Columns of ``policies.csv`` (one row per policy; ``lambda_usd + endpoint_usd + warmer_usd =
#: total_usd``).
POLICY_CSV_COLUMNS = (
    "policy", "requests", "cold_starts", "failed_answers", "late", "degraded", "shed",
    "throttled", "overflowed", "tail", "env_inits", "pings", "p99_ms", "idle_gb_s", "lambda_usd",
    "provisioned_concurrency_usd", "endpoint_usd", "warmer_usd", "total_usd",
)


def write_policies_csv(result: SimulationResult, path: Path) -> None:
    """One row per policy, columns ``POLICY_CSV_COLUMNS``: counts as integers, USD with 6
    decimals. ``lambda_usd`` is all of Lambda (requests, on-demand duration and init,
    SnapStart, provisioned concurrency), as in ``functions.csv``; ``provisioned_concurrency_usd``
    is its provisioned-concurrency part (configured and duration); ``warmer_usd`` the warmer's
    CloudWatch reads; ``total_usd = lambda_usd + endpoint_usd + warmer_usd``. ``failed_answers = late + degraded + shed + throttled``; ``tail`` is apart (see
    ``FAILED_DEFINITION``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(POLICY_CSV_COLUMNS)
        for t in result.totals:
            w.writerow([t.policy, t.requests, t.cold_starts, t.failed_answers, t.late,
                        t.degraded, t.shed, t.throttled, t.overflowed, t.tail, t.env_inits, t.pings,
                        f"{t.p99_ms:.3f}", f"{t.idle_gb_s:.3f}",
                        f"{t.lambda_usd:.6f}", f"{t.pc_usd:.6f}",
                        f"{t.endpoint_usd:.6f}", f"{t.warmer_usd:.6f}", f"{t.total_usd:.6f}"])


def write_function_csv(result: SimulationResult, path: Path) -> None:
    """One row per function and policy; ``strategy``: the cold-start strategy the policy
    deployed there (warmstart: ``provisioned`` or ``snapstart``; empty for the baselines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["function_id", "trigger", "policy", "requests", "cold_starts", "env_inits",
                    "failed_answers", "late", "degraded", "shed", "throttled", "overflowed",
                    "tail", "pings",
                    "p99_ms", "idle_gb_s", "lambda_usd", "sla_ms", "strategy"])
        for r in result.rows:
            w.writerow([r.function_id, r.trigger, r.policy, r.requests, r.cold_starts,
                        r.env_inits, r.failed_answers, r.cold_breaches, r.degraded, r.shed,
                        r.throttled, r.overflowed, r.tail, r.pings, f"{r.p99_ms:.3f}", f"{r.idle_gb_s:.3f}",
                        f"{r.lambda_usd:.6f}", f"{r.sla_ms:.0f}", r.strategy])


def markdown_report(result: SimulationResult, *, title: str, preamble: str = "",
                    policy: str = "warmstart") -> str:
    """Full Markdown report: table, ratios, citation."""
    parts = [f"# {title}", ""]
    if preamble:
        parts += [preamble, ""]
    parts += [markdown_table(result), "", FAILED_DEFINITION, "", "Assumptions:", "",
              *ASSUMPTIONS, ""]
    if any(t.policy == policy for t in result.totals):
        parts += [ratios_markdown(result, policy), ""]
    parts += [TRACE_CITATION, ""]
    return "\n".join(parts)
