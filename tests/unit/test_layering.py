"""The project's import graph: no new import circles, and the layering kept
(``bench -> infra -> warmers -> functions``, nothing running back up; the warmer Lambda's code
free of the CDK).

Every non-test module of the project's packages is parsed with :mod:`ast` (``infra.imports``);
every ``import`` and ``from ... import`` counts, wherever it stands: at module level, inside a function (a lazy
import) or under ``if TYPE_CHECKING:`` (a type-only import). A lazy or type-only circle still
ties the modules together: neither can be read, moved or tested without the other.

The circles that remain (others are breaking them) are listed in :data:`KNOWN_CIRCLES`: a new
circle fails :func:`test_no_import_circle_beyond_the_known_ones`, and so does a known circle
that is gone (remove it from the list, so it cannot come back unnoticed).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from infra.imports import circles, import_graph, imported_names, project_modules, reached

ROOT = Path(__file__).resolve().parents[2]
#: Top-level names of the CDK and its runtime: never imported by code that runs in a Lambda.
CDK_MODULES = frozenset({"aws_cdk", "constructs", "jsii", "cdk_nag"})

#: Import circles that remain, each the modules of one strongly connected component. Only
#: circles in ``functions/runtime`` (the agent runtime, issue 21) and the local emulator
#: (``infra/local/emulator``, issue 23 item 3) may be here; each is to be broken and removed.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset({
})


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    return project_modules(ROOT)


@pytest.fixture(scope="module")
def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return import_graph(modules)


def _crossings(graph: Mapping[str, set[str]], source: str, banned: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, targets in graph.items()
                  if m == source or m.startswith(source + ".")
                  for t in targets if t.split(".")[0] in banned)


def test_no_import_circle_beyond_the_known_ones(graph: dict[str, set[str]]) -> None:
    found = circles(graph)
    new = sorted(sorted(c) for c in found - KNOWN_CIRCLES)
    gone = sorted(sorted(c) for c in KNOWN_CIRCLES - found)
    assert not new, f"new import circles (break them; lazy and type-only imports count): {new}"
    assert not gone, f"known circles that are gone: remove them from KNOWN_CIRCLES: {gone}"


def test_known_circles_are_only_those_left_to_others() -> None:
    allowed = ("functions.runtime.", "infra.local.emulator.")
    assert all(m.startswith(allowed) for circle in KNOWN_CIRCLES for m in circle)


def test_functions_import_neither_infra_nor_warmers(graph: dict[str, set[str]]) -> None:
    assert _crossings(graph, "functions", ("infra", "warmers", "bench")) == []


def test_warmers_import_neither_infra_nor_bench(graph: dict[str, set[str]]) -> None:
    assert _crossings(graph, "warmers", ("infra", "bench")) == []


def test_the_warmer_lambdas_code_imports_no_cdk(modules: dict[str, Path],
                                                graph: dict[str, set[str]]) -> None:
    """What ``warmers.handler`` reaches (the warmer Lambda's code) names no CDK module."""
    shipped = reached(graph, "warmers.handler")
    assert "warmers.runner" in shipped  # the walk follows the handler's imports
    cdk = sorted(f"{m} imports {n}" for m in shipped for n in imported_names(m, modules[m])
                 if n.split(".")[0] in CDK_MODULES)
    assert cdk == []


# The checks themselves, on a package written here: each must see what it is meant to catch.

def _package(tmp_path: Path, files: Mapping[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return project_modules(tmp_path, ("pkg",))


def test_lazy_type_only_and_relative_imports_all_count(tmp_path: Path) -> None:
    modules = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "def f():\n    from . import c\n    return c\n",
        "pkg/c.py": "from .sub import d\n",
        "pkg/sub/__init__.py": "from .d import x\n",
        "pkg/sub/d.py": "import pkg.a\nx = 1\n",
    })
    graph = import_graph(modules)
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.sub.d"}
    assert graph["pkg.sub"] == {"pkg.sub.d"}
    assert circles(graph) == {frozenset({"pkg.a", "pkg.b", "pkg.c", "pkg.sub.d"})}


def test_from_a_package_import_an_attribute_is_an_edge_to_the_package(tmp_path: Path) -> None:
    modules = _package(tmp_path, {"pkg/__init__.py": "X = 1\n", "pkg/a.py": "from pkg import X\n"})
    assert import_graph(modules) == {"pkg": set(), "pkg.a": {"pkg"}}


def test_an_added_circle_is_reported_and_a_chain_is_not() -> None:
    chain = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"d"}}
    assert circles(chain) == set()
    assert circles({**chain, "c": {"a"}}) == {frozenset({"a", "b", "c"})}
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}) == {
        frozenset({"a", "b"}), frozenset({"c", "d"})}
