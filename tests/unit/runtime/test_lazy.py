from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.runtime.lazy import ClientCache, lazy_import


@pytest.fixture
def probe_module(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A module on sys.path whose body writes a marker file when it runs."""
    name = "warmstart_lazy_probe"
    marker = tmp_path / "executed"
    (tmp_path / f"{name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('yes')\nVALUE = 42\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield name, marker
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_module_code_runs_on_first_attribute_access(probe_module: tuple[str, Path]) -> None:
    name, marker = probe_module
    module = lazy_import(name)
    assert name in sys.modules
    assert not marker.exists()
    assert module.VALUE == 42
    assert marker.read_text() == "yes"
    assert lazy_import(name) is sys.modules[name]


def test_missing_module_fails_at_once() -> None:
    with pytest.raises(ModuleNotFoundError, match="warmstart_no_such_module"):
        lazy_import("warmstart_no_such_module")


def test_boto3_clients_are_made_once_per_key_and_renewed_after_close() -> None:
    clients = ClientCache()
    ssm = clients.get("ssm", region_name="us-east-1")
    assert type(ssm).__name__ == "SSM"
    assert clients.get("ssm", region_name="us-east-1") is ssm
    other = clients.get("ssm", region_name="eu-west-1")
    assert other is not ssm and clients.created == 2
    clients.close_all()
    assert len(clients) == 0
    assert clients.get("ssm", region_name="us-east-1") is not ssm
    assert clients.created == 3
