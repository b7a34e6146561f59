"""Run every benchmark: ``python -m bench [name ...] [--option ...]``.

Imports each ``bench/bench_*.py`` module (or only the names given, e.g. ``init``) and calls its
``main(options)`` (options are passed to every selected benchmark); the exit status is non-zero
when any benchmark missed its target.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    names = sorted(p.stem for p in Path(__file__).resolve().parent.glob("bench_*.py"))
    args = argv if argv is not None else sys.argv[1:]
    first_option = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    wanted, options = args[:first_option], args[first_option:]
    if wanted:
        names = [n for n in names if n in wanted or n.removeprefix("bench_") in wanted]
    status = 0
    for name in names:
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        status |= int(module.main(list(options)) or 0)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
