"""Per-environment state is reset around every toolkit test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import snapshot_restore_py

from functions.runtime import lifecycle, telemetry


@pytest.fixture(autouse=True)
def fresh_environment() -> Iterator[None]:
    """No execution environment, no registered SnapStart hooks, no current invocation."""
    lifecycle.reset_environment()
    snapshot_restore_py.get_before_snapshot().clear()
    snapshot_restore_py.get_after_restore().clear()
    token = telemetry.set_current(None)
    yield
    telemetry.reset_current(token)
    lifecycle.reset_environment()
    snapshot_restore_py.get_before_snapshot().clear()
    snapshot_restore_py.get_after_restore().clear()
