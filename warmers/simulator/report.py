"""Results: the table, the ratios the issue asks for, the Pareto plot, the per-function CSV."""

from __future__ import annotations

import csv
import math
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
    if r.cheapest_same_rate is None:
        base = [t for t in result.totals if is_baseline(t.policy)]
        nearest = min(base, key=lambda t: (t.cold_start_pct, t.total_usd))
        cheapest = min(base, key=lambda t: t.total_usd)
        lines.append(
            f"Cost: no baseline reaches {policy}'s cold-start rate ({ws.cold_start_pct:.3f} %). "
            f"The baseline with the fewest cold starts is **{nearest.policy}** "
            f"({nearest.cold_start_pct:.3f} %, ${nearest.total_usd:.2f}): {policy} / it = "
            f"**{ws.total_usd / nearest.total_usd:.3f}** with the overflow endpoint "
            f"(${ws.total_usd:.2f}), **{ws.lambda_usd / nearest.total_usd:.3f}** for Lambda alone "
            f"(${ws.lambda_usd:.2f}). The cheapest baseline is {cheapest.policy} "
            f"(${cheapest.total_usd:.2f}, {cheapest.cold_start_pct:.3f} % cold starts)."
        )
    else:
        b = result.by_name(r.cheapest_same_rate)
        lines.append(
            f"Cost: the cheapest baseline with a cold-start rate <= {policy}'s "
            f"({ws.cold_start_pct:.3f} %) is **{b.policy}** ({b.cold_start_pct:.3f} %, "
            f"${b.total_usd:.2f}). {policy} / it = **{r.cost_ratio_total:.3f}** with the "
            f"overflow endpoint (${ws.total_usd:.2f}), **{r.cost_ratio_lambda:.3f}** for Lambda "
            f"alone (${ws.lambda_usd:.2f})."
        )
    return "\n".join(lines)


def pareto_plot(result: SimulationResult, path: Path, policy: str = "warmstart") -> None:
    """PNG scatter of cold-start % against total USD, Pareto frontier drawn (matplotlib Agg).

    warmstart is drawn twice when it pays for the endpoint: with it (filled) and Lambda only
    (hollow).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    pts = [(t.total_usd, t.cold_start_pct, t.policy) for t in result.totals]
    for x, y, name in pts:
        is_ws = name.startswith(policy)
        ax.scatter([x], [y], s=60 if is_ws else 35, c="tab:red" if is_ws else "tab:blue",
                   zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ws = next((t for t in result.totals if t.policy == policy), None)
    if ws is not None and ws.endpoint_usd > 0:
        ax.scatter([ws.lambda_usd], [ws.cold_start_pct], s=60, facecolors="none",
                   edgecolors="tab:red", zorder=3)
        ax.annotate(f"{policy} (Lambda only)", (ws.lambda_usd, ws.cold_start_pct),
                    textcoords="offset points", xytext=(5, -10), fontsize=8)
    frontier = []
    best = math.inf
    for x, y, _ in sorted(pts):
        if y < best:
            frontier.append((x, y))
            best = y
    if len(frontier) > 1:
        ax.plot([p[0] for p in frontier], [p[1] for p in frontier], "--", c="gray", lw=1,
                zorder=2, label="Pareto frontier")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("cost over the trace, USD (log)")
    ax.set_ylabel("cold starts, % of requests")
    ax.set_title(
        f"Cold starts vs cost, {result.n_functions} functions x {result.n_minutes} min",
        fontsize=10,
    )
    fig.text(0.01, 0.005, "Azure Functions Trace 2019, Shahrad et al., USENIX ATC 2020 "
             "(CC-BY 4.0)", fontsize=6, color="gray")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
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
