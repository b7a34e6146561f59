"""The project's import graph, read from source with :mod:`ast` (nothing is imported): which
project modules each module imports, its circles (strongly connected components) and what a
module reaches.

Every ``import`` and ``from ... import`` counts, wherever it stands: at module level, inside a
function (a lazy import) or under ``if TYPE_CHECKING:`` (a type-only import); relative imports
are resolved. Used by the layering test (``tests/unit/test_layering.py``) and by the warmer
construct, which ships only what ``warmers.handler`` reaches
(``infra/constructs/warmer.py``). Standard library only.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

#: The project's own packages (``tests/`` is not one: tests may import anything).
PACKAGES: Final = ("functions", "warmers", "infra", "bench")
#: Never project source (build output, caches).
SKIPPED_PARTS: Final = frozenset({"__pycache__", "node_modules", "cdk.out"})


def project_modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` under ``packages`` (a package is
    named by its folder, its ``__init__.py`` file)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if SKIPPED_PARTS & set(rel.parts) or any(p.startswith(".") for p in rel.parts):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name ``module`` imports, anywhere in the file (lazy and type-only imports
    included); relative imports resolved; ``from a import b`` gives ``a.b`` (a submodule or an
    attribute: :func:`import_graph` tells them apart)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (the longest project module each imported
    name starts with; a module's import of itself left out)."""
    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        names = imported_names(module, path)
        # `from a import b` names both a and a.b: keep a only when b is not a submodule.
        targets = {owner(n) for n in names if not any(o.startswith(n + ".") and o in modules
                                                      for o in names)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> set[frozenset[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm,
    iterative; References: R. Tarjan, "Depth-first search and linear graph algorithms", 1972)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    counter = itertools.count()
    for start in graph:
        if start in index:
            continue
        index[start] = low[start] = next(counter)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = next(counter)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.add(frozenset(component))
    return found


def reached(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or not, ``start`` included."""
    seen = {start}
    todo = [start]
    while todo:
        for succ in graph[todo.pop()]:
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen
