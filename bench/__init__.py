"""Benchmarks: ratios against baselines measured in the same run (``python -m bench``).

Each ``bench/bench_*.py`` module has a ``main(argv=None) -> int`` that prints a table and writes
its result with :func:`write_result`: Markdown to ``bench/results/<name>.md`` and, beside it, the
same figures as JSON (``bench/results/<name>.json``: machine, load average, date, command, each
measured figure with its unit, each ratio with its target and whether it is met). Helpers shared
by the benchmarks live here (standard library only).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Where a reduced run (smaller than the benchmark's defaults) writes: never over the published
#: figures in ``bench/results`` (``out/`` is not committed).
REDUCED_DIR = REPO_ROOT / "out" / "bench"


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


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS does not say)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def figure(name: str, value: float | None, unit: str, **extra: Any) -> dict[str, Any]:
    """One measured figure for :func:`write_result`: ``name``, ``value`` and its ``unit``
    (``ms``, ``us``, ``s``, ``MB``, ``req/s``, ``count``, ``%``, ``ratio``); ``extra`` keys
    (``n``, ``route``, ...) are kept as they are."""
    return {"name": name, "value": value, "unit": unit, **extra}


def ratio(
    name: str, value: float, target: float, *, op: Literal["<=", ">=", "<"] = "<=",
    **extra: Any,
) -> dict[str, Any]:
    """One ratio with its target for :func:`write_result`; ``met`` is computed here.

    Parameters
    ----------
    name : str
        What is divided by what (``"handler / bare"``).
    value : float
        The ratio (dimensionless).
    target : float
        The bound.
    op : {"<=", ">=", "<"}
        ``value op target`` must hold.
    """
    met = {"<=": value <= target, ">=": value >= target, "<": value < target}[op]
    return {"name": name, "value": value, "target": f"{op} {target:g}", "met": bool(met), **extra}


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def command_line(argv: Sequence[str] | None = None, *, module: str | None = None) -> str:
    """The command that reproduces this run (``.venv/bin/python -m bench NAME OPTIONS``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    prefix = ".venv/bin/python -m bench" if module is None else f".venv/bin/python {module}"
    return " ".join([prefix, *(shlex.quote(a) for a in args)])


def write_result(
    name: str,
    markdown: str,
    figures: Iterable[Mapping[str, Any]] = (),
    *,
    ratios: Iterable[Mapping[str, Any]] = (),
    command: str | None = None,
    reduced: str | None = None,
    extra: Mapping[str, Any] | None = None,
    directory: Path | None = None,
) -> Path:
    """Write ``<directory>/<name>.md`` and ``<name>.json`` beside it; return the Markdown path.

    Parameters
    ----------
    name : str
        File stem (``bench_init``, ``emulator``).
    markdown : str
        The human-readable result (machine and date included by the caller).
    figures : Iterable[Mapping[str, Any]]
        Measured figures, each from :func:`figure` (a value and its unit).
    ratios : Iterable[Mapping[str, Any]]
        Ratios against the baseline of the same run, each from :func:`ratio` (target, met).
    command : str | None
        The command that reproduces the run.
    reduced : str | None
        Set when the run was smaller than the benchmark's defaults (what was reduced): the
        files go to :data:`REDUCED_DIR` (unless ``directory`` is given), the Markdown says under
        its title that it is not the official figure, and the JSON carries ``"reduced"``.
    extra : Mapping[str, Any] | None
        Further JSON-able fields (configuration, raw samples).
    directory : Path | None
        Default ``bench/results`` (:data:`REDUCED_DIR` for a reduced run).

    Returns
    -------
    Path
        The Markdown file.
    """
    if directory is None:
        directory = REDUCED_DIR if reduced else RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    ratios = [dict(r) for r in ratios]
    if reduced:
        title, _, rest = markdown.partition("\n")
        markdown = (f"{title}\n\n> **Reduced run** ({reduced}): a check that the benchmark runs, "
                    f"not the official figure; rerun with the defaults to publish.\n{rest}")
    path = directory / f"{name}.md"
    path.write_text(markdown if markdown.endswith("\n") else markdown + "\n")
    document = {
        "name": name,
        "date": now_utc(),
        "machine": machine(),
        "load_average": load_average(),
        "cpu_count": os.cpu_count(),
        "command": command,
        "reduced": reduced,
        "figures": [dict(f) for f in figures],
        "ratios": ratios,
        "all_met": all(r.get("met") for r in ratios) if ratios else None,
        **(dict(extra) if extra else {}),
    }
    (directory / f"{name}.json").write_text(
        json.dumps(_jsonable(document), indent=2, allow_nan=False) + "\n")
    return path


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (also readable as plain text)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def p50(values: Sequence[float]) -> float:
    """Median of ``values`` (NaN when there are none), in their unit."""
    import statistics

    return statistics.median(values) if values else float("nan")


def finish(path: Path, *lines: str, ratios: Iterable[Mapping[str, Any]]) -> int:
    """End a benchmark's ``main``: print ``lines`` (its table, its verdict) and where the result
    was written; return the exit status, 0 when every ratio is met (:func:`ratio`), else 1."""
    for line in lines:
        print(line)
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0 if all(r["met"] for r in ratios) else 1
