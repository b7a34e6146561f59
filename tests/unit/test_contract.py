"""The deploy-to-run contract (``functions/runtime/contract/``): every ``WARMSTART_*`` name is
spelled there only, the warmer's document round-trips and is refused naming the field, the
resource ids are the same on both sides, and the deploy side no longer reaches into the run
side's planner, actuators or calibration.

The literal scan reads every non-test module of the project with :mod:`ast`: a string constant
(an f-string's literal parts included) that holds ``WARMSTART_`` outside a docstring must be in
the contract's ``environment.py``, or in a file of :data:`KNOWN_LITERALS` (files others are
moving onto the contract; each is to be cleared and removed from the list: a listed file with
no literal left fails too, so the list only shrinks).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Iterable
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from functions.runtime.contract import ContractError
from functions.runtime.contract import environment as names
from functions.runtime.contract.calibration_document import CalibrationError, parse_calibration
from functions.runtime.contract.warmer_document import (
    WARMER_DOCUMENT_VERSION,
    AliasEntry,
    DocumentError,
    EndpointEntry,
    WarmerDocument,
    alias_resource_id,
    endpoint_resource_id,
    entry_values,
)
from infra.imports import PACKAGES, import_graph, imported_names, project_modules, reached

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_NAMES = "functions/runtime/contract/environment.py"
NAME = re.compile(r"_?WARMSTART_[A-Z0-9_]+")

#: Files that still spell a ``WARMSTART_*`` name (not this change's to edit): the runtime's
#: (helper H3, issue 21), the emulator's (issue 23 item 3), the simulator's, the benches', the
#: reference agent's and its model's. Remove a file once it names the contract's constants.
KNOWN_LITERALS: frozenset[str] = frozenset({
    "bench/bench_answer_first.py",
    "bench/bench_cold_start_sla.py",
    "bench/bench_streaming.py",
    "bench/fuzz_events.py",
    "functions/agent/hooks.py",
    "functions/intent_model/model.py",
    "functions/runtime/agent_handler.py",
    "functions/runtime/overflow.py",
    "infra/local/emulator/processes.py",
    "warmers/simulator/report.py",
})


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                found.add(id(body[0].value))
    return found


def literal_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each ``WARMSTART_*`` name in a string constant of ``path`` that is not a
    docstring (comments are not in the tree)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = _docstrings(tree)
    return sorted((node.lineno, name) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in skip for name in NAME.findall(node.value))


def spelled_outside_the_contract(root: Path, packages: Iterable[str]) -> dict[str, list]:
    """File (relative to ``root``) -> its literal names, for every module but the contract's."""
    out = {}
    for path in project_modules(root, packages).values():
        rel = path.relative_to(root).as_posix()
        if rel != CONTRACT_NAMES and (found := literal_names(path)):
            out[rel] = found
    return out


def test_every_warmstart_name_in_code_comes_from_the_contract() -> None:
    found = spelled_outside_the_contract(ROOT, PACKAGES)
    new = {f: n for f, n in found.items() if f not in KNOWN_LITERALS}
    assert new == {}, ("spell these with functions.runtime.contract.environment's ENV_* "
                       f"constants: {new}")
    cleared = sorted(KNOWN_LITERALS - set(found))
    assert cleared == [], f"no literal left: remove from KNOWN_LITERALS: {cleared}"


def test_the_scan_sees_a_planted_literal_and_skips_docstrings(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Reads ``WARMSTART_SLA_MS`` (a docstring)."""\n')
    (pkg / "clean.py").write_text("# WARMSTART_SLA_MS in a comment\nfrom x import names\n"
                                  "V = names.ENV_SLA_MS\n")
    (pkg / "planted.py").write_text('import os\n\ndef f():\n    """WARMSTART_A."""\n'
                                    '    return os.environ.get("WARMSTART_SLA_MS"), '
                                    'f"set {1} or _WARMSTART_ENV_FD"\n')
    assert spelled_outside_the_contract(tmp_path, ("pkg",)) == {
        "pkg/planted.py": [(5, "WARMSTART_SLA_MS"), (5, "_WARMSTART_ENV_FD")]}


def test_every_name_is_listed_once_with_what_it_carries() -> None:
    constants = {k: v for k, v in vars(names).items() if k.startswith("ENV_")}
    assert sorted(constants.values()) == sorted(names.ENVIRONMENT)
    assert len(set(constants.values())) == len(constants)
    assert all(NAME.fullmatch(v) and names.ENVIRONMENT[v] for v in constants.values())


# ---- the warmer's document -----------------------------------------------------------------

DOCUMENT = WarmerDocument(
    aliases=(AliasEntry("intent", "live", strategy="provisioned", memory_mb=2048, floor=1, cap=8,
                        degradation_parameter="/warmstart/intent/degradation-level",
                        sla_ms=2000.0, cold_start_p50_ms=900.0, cold_start_p95_ms=900.0),
             AliasEntry("lookup", "live", strategy="managed_instances",
                        managed_instances={"vcpus_per_environment": 1.0})),
    endpoints=(EndpointEntry("gpu", ("intent:live",), target="inference_component",
                             inference_component="gpu-model", failed_answer_usd=None,
                             capacity_parameter="/warmstart/gpu/capacity"),),
    actuator="lambda", history_days=1.0, unreserved_concurrency=64)


def test_the_document_round_trips_through_json() -> None:
    text = json.dumps(DOCUMENT.to_json())
    assert json.loads(text)["version"] == WARMER_DOCUMENT_VERSION
    assert WarmerDocument.from_json(text) == DOCUMENT
    # a field at its default is left out, a null that is not the default is kept
    entry = json.loads(text)["endpoints"][0]
    assert "variant_name" not in entry and entry["failed_answer_usd"] is None


def test_a_document_without_version_is_read_as_version_1() -> None:
    doc = DOCUMENT.to_json()
    del doc["version"]
    assert WarmerDocument.from_dict(doc) == DOCUMENT


def _refused(doc: object) -> DocumentError:
    with pytest.raises(DocumentError) as info:
        WarmerDocument.from_dict(doc)
    assert isinstance(info.value, ContractError)
    return info.value


@pytest.mark.parametrize(("change", "field", "message"), [
    (lambda d: d.update(version=2), "version", r"^version must be 1 .*got 2"),
    (lambda d: d["aliases"][0].pop("function_name"), "aliases[0].function_name",
     r"^aliases\[0\]: function_name is missing"),
    (lambda d: d["aliases"][1].update(floor="one"), "aliases[1].floor",
     r"^aliases\[1\]: floor must be an integer, got 'one'"),
    (lambda d: d["endpoints"][0].update(surge=1), "endpoints[0].surge",
     r"^endpoints\[0\]: unknown keys \['surge'\]"),
    (lambda d: d["endpoints"][0].update(agents=["other:live"]), "endpoints[0].agents",
     r"^endpoints\[0\]: agents \['other:live'\] are not in 'aliases'"),
    (lambda d: d["aliases"][0].update(strategy="warm"), "aliases[0].strategy",
     r"^aliases\[0\]: strategy must be one of"),
    (lambda d: d.update(actuator="x"), "actuator", r"^actuator must be 'autoscaling' or"),
    (lambda d: d.update(aliases=[]), "aliases", r"^aliases must be a non-empty list"),
    (lambda d: d["aliases"].__setitem__(0, "intent:live"), "aliases[0]",
     r"^aliases\[0\] must be an object"),
    (lambda d: d.update(history_days=True), "history_days",
     r"^history_days must be a finite number"),
    (lambda d: d.update(architecture="arm"), "architecture",
     r"^architecture must be 'x86_64' or 'arm64', got 'arm'"),
])
def test_a_bad_document_is_refused_naming_the_field(change, field: str, message: str) -> None:
    doc = DOCUMENT.to_json()
    change(doc)
    error = _refused(doc)
    assert error.field == field
    assert re.search(message, str(error)), str(error)


def test_a_document_that_is_not_json_or_not_an_object_is_refused() -> None:
    with pytest.raises(DocumentError, match="^warmer document is not valid JSON"):
        WarmerDocument.from_json("{")
    assert _refused([1]).field == "$"


def test_the_warmers_reader_refuses_what_the_contract_refuses() -> None:
    from warmers.config import WarmerConfig, WarmerConfigError

    doc = DOCUMENT.to_json() | {"version": 3}
    with pytest.raises(WarmerConfigError, match="^version must be 1"):
        WarmerConfig.from_env({names.ENV_WARMER_CONFIG: json.dumps(doc)})
    config = WarmerConfig.from_env({names.ENV_WARMER_CONFIG: json.dumps(DOCUMENT.to_json())})
    assert [p.key for p in config.policies] == [a.key for a in DOCUMENT.aliases]
    assert config.endpoints[0].failed_answer_usd is None


@pytest.mark.parametrize(("entry", "policy"), [
    (AliasEntry, "warmers.plan.policy:AliasPolicy"),
    (EndpointEntry, "warmers.plan.endpoint:EndpointPolicy"),
])
def test_the_planners_policy_is_the_entry_with_its_checks(entry, policy: str) -> None:
    """The entry is the one definition of the fields and defaults: the planner's policy is a
    subclass that adds no field of its own (only the LMI settings' type is redeclared), and a
    document's entry becomes a policy with the same values."""
    import importlib

    module, _, name = policy.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, entry)
    planner = {f.name: (None if f.default is MISSING else f.default) for f in fields(cls)}
    contract = {f.name: (None if f.default is MISSING else f.default) for f in fields(entry)}
    assert planner == contract
    redeclared = {n for n in inspect.get_annotations(cls) if n in contract}
    assert redeclared <= {"managed_instances"}
    required = {"function_name": "fn", "alias": "live"} if entry is AliasEntry else {
        "endpoint_name": "ep", "agents": ("fn:live",)}
    document_entry = entry(**required)
    assert entry_values(cls(**entry_values(document_entry))) == entry_values(document_entry)


# ---- resource ids --------------------------------------------------------------------------

def test_the_resource_ids_are_the_planners_and_the_actuators() -> None:
    from warmers.actuators import resource_id
    from warmers.plan.endpoint import EndpointPolicy

    assert alias_resource_id("fn", "live") == resource_id("fn", "live") == "function:fn:live"
    for kwargs in ({}, {"target": "inference_component", "inference_component": "gpu-model"}):
        policy = EndpointPolicy(endpoint_name="gpu", agents=("fn:live",), **kwargs)
        entry = EndpointEntry("gpu", ("fn:live",), **kwargs)
        assert entry.resource_id == policy.resource_id
        assert entry.scalable_dimension == policy.scalable_dimension
    assert endpoint_resource_id("variant", endpoint_name="gpu", variant_name="AllTraffic",
                                inference_component=None) == "endpoint/gpu/variant/AllTraffic"
    with pytest.raises(DocumentError, match=r"\$LATEST"):
        alias_resource_id("fn", "$LATEST")


# ---- the calibration document --------------------------------------------------------------

def test_the_calibration_document_is_the_contracts() -> None:
    from functions.runtime import calibration

    assert calibration.parse is parse_calibration  # the runtime reads the contract's schema
    doc = {"version": 1, "agent": "intent", "memory_mb": 1024, "machine": "m",
           "measured_at": "2026-12-01T10:00:00+00:00",
           "stage_p95_ms": {"toolkit": 60.0, "model": 700.0}, "overflow_p95_ms": None}
    assert parse_calibration(json.dumps(doc)).cold_start_p95_ms() == 760.0
    with pytest.raises(CalibrationError, match="stage_p95_ms.model must be a number"):
        parse_calibration(json.dumps(doc | {"stage_p95_ms": {"model": "slow"}}))


# ---- who imports what ----------------------------------------------------------------------

def test_the_constructs_reach_neither_the_planner_the_actuators_nor_the_calibration() -> None:
    graph = import_graph(project_modules(ROOT))
    banned = ("warmers.planner", "warmers.plan", "warmers.actuators",
              "functions.runtime.calibration")
    crossings = sorted(f"{m} -> {t}" for m, targets in graph.items()
                       if m.startswith("infra.constructs.") for t in targets
                       if t == banned[0] or t.startswith(banned[1]) or t in banned[2:])
    assert crossings == []


def test_the_runtime_config_loads_the_names_and_not_the_documents() -> None:
    """The names and the levels (an enum the config parses the level with) are on every
    agent's init path; the documents' NamedTuples are not."""
    import subprocess
    import sys

    code = ("import sys, functions.runtime.config; print(sorted(m for m in sys.modules "
            "if m.startswith('functions.runtime.contract')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == repr(["functions.runtime.contract",
                                "functions.runtime.contract.environment",
                                "functions.runtime.contract.levels"])


def test_the_contract_imports_the_standard_library_only() -> None:
    modules = project_modules(ROOT, ("functions",))
    contract = [m for m in modules if m.startswith("functions.runtime.contract")]
    assert len(contract) == 5  # the package, environment, warmer and calibration documents, levels
    for module in contract:
        for name in imported_names(module, modules[module]):
            top = name.split(".")[0]
            assert top != "functions" or name.startswith("functions.runtime.contract"), name
            assert top in {"functions", "__future__", "collections", "dataclasses", "datetime", "enum", "json",
                           "math", "typing"}, name
    # the names, on every agent's init path, import nothing of the documents
    assert reached(import_graph(modules), "functions.runtime.contract.environment") == {
        "functions.runtime.contract.environment"}
