"""Fixtures for the local stack's end-to-end tests: real processes, real HTTP, real boto3.

Every process a test starts is stopped by its fixture, and :func:`assert_gone` checks that the
execution environments and template processes really ended.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local.api import LambdaApiServer
from infra.local.emulator import Emulator, EmulatorConfig
from infra.local.spec import AliasSpec, FunctionSpec

if str(Path(__file__).parents[2]) not in sys.path:  # `tests.e2e.conftest` imports under any runner
    sys.path.insert(0, str(Path(__file__).parents[2]))
HANDLERS = Path(__file__).parent / "handlers"
EVENTS = Path(__file__).parents[1] / "data" / "events"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")


#: What a copy of the project links instead of copying (the virtualenv, the CDK CLI, the pip
#: wheelhouse: so a synth in the copy bundles the layers offline), and what it leaves out.
LINKED = (".venv", "node_modules", ".cache")
IGNORED = shutil.ignore_patterns(".git", ".venv", ".venv-*", "node_modules", ".cache", "cdk.out",
                                 "out", "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache",
                                 ".ruff_cache", "simulate-out")


def project_copy(tmp_path: Path) -> Path:
    """A copy of the checkout under ``tmp_path / "project"`` (never writing the checkout), with
    `LINKED` linked."""
    root = Path(__file__).resolve().parents[2]
    project = tmp_path / "project"
    shutil.copytree(root, project, ignore=IGNORED, symlinks=True)
    for name in LINKED:
        if (root / name).exists():
            (project / name).symlink_to(root / name)
    return project


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def assert_gone(pids: list[int], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"processes still running: {left}")


def spec(name: str, handler: str, **kwargs: Any) -> FunctionSpec:
    kwargs.setdefault("aliases", (AliasSpec("live", "1"),))
    return FunctionSpec(name=name, handler=handler, code_dir=HANDLERS, **kwargs)


@pytest.fixture
def make_emulator(tmp_path: Path) -> Iterator[Callable[..., Emulator]]:
    """Factory for emulators with short timeouts; stops them and checks no process is left."""
    made: list[Emulator] = []
    logs = []

    def make(**overrides: Any) -> Emulator:
        clock = overrides.pop("clock", None)
        metrics = overrides.pop("metrics", None)
        overrides.setdefault("idle_timeout_s", 60.0)
        overrides.setdefault("pc_allocation_delay_s", 0.0)
        overrides.setdefault("reap_interval_s", 0.1)
        log = open(tmp_path / f"emulator{len(made)}.log", "w")  # noqa: SIM115 (closed below)
        logs.append(log)
        emu = Emulator(EmulatorConfig(**overrides), clock=clock, metrics=metrics, log_stream=log)
        made.append(emu)
        return emu

    yield make
    for emu in made:
        pids = emu.process_ids()
        emu.stop()
        assert_gone(pids)
    for log in logs:
        log.close()


@pytest.fixture
def lambda_api() -> Iterator[Callable[[Emulator], Any]]:
    """Factory: serve an emulator's REST API and return a real boto3 lambda client for it."""
    import boto3
    from botocore.config import Config

    servers: list[LambdaApiServer] = []

    def serve(emu: Emulator) -> Any:
        server = LambdaApiServer(emu)
        server.start()
        servers.append(server)
        return boto3.client("lambda", endpoint_url=server.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing",
                            config=Config(retries={"total_max_attempts": 1}, read_timeout=30))

    yield serve
    for server in servers:
        server.stop()
