"""Benchmarks: ratios against baselines measured in the same run (``python -m bench``).

Each ``bench/bench_*.py`` module has a ``main(argv=None) -> int`` that prints a table and writes
Markdown to ``bench/results/<name>.md`` with the machine and date. Helpers shared by the
benchmarks live here (standard library only).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    """One line describing this machine: CPU model, cores, memory, OS, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem_gib = f", {pages / 2**30:.0f} GiB RAM"
    except (ValueError, OSError, AttributeError):
        pass
    load = ""
    try:
        load = f", load avg {os.getloadavg()[0]:.1f}"
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{mem_gib}{load}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()} ({sys.implementation.name})"
    )


def now_utc() -> str:
    """Current UTC time, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_result(name: str, markdown: str) -> Path:
    """Write ``bench/results/<name>.md`` and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.md"
    path.write_text(markdown)
    return path


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (also readable as plain text)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])
