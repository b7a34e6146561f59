"""``make browser`` (part of ``make setup``): installs Chromium from Debian's packages only
when apt-get exists and it runs as root, does nothing otherwise, and never fails the set-up.

Runs the real Makefile with a PATH of fake tools (``apt-get``, ``id``, ``chromium``) that log
their arguments, so nothing is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def _tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{script}\n")
    path.chmod(0o755)


def _browser(tmp_path: Path, *, apt_get: str | None, uid: int, chromium: bool = False,
             ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _tool(bin_dir, "id", f'[ "$1" = -u ] && echo {uid}')
    if apt_get is not None:
        _tool(bin_dir, "apt-get", f'echo "apt-get $*" >> {log}\n{apt_get}')
    if chromium:
        _tool(bin_dir, "chromium", f'echo "chromium $*" >> {log}')
    assert MAKE is not None
    done = subprocess.run([MAKE, "-s", "-C", str(ROOT), "browser"], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=60, check=False)
    calls = log.read_text().splitlines() if log.exists() else []
    return done, calls


def test_as_root_with_apt_get_it_installs_chromium(tmp_path: Path) -> None:
    done, calls = _browser(tmp_path, apt_get="exit 0", uid=0)
    assert done.returncode == 0, done.stderr
    assert calls == ["apt-get install -y --no-install-recommends chromium"]


def test_a_failed_install_refreshes_the_lists_once_and_never_fails_setup(tmp_path: Path) -> None:
    done, calls = _browser(tmp_path, apt_get="exit 100", uid=0)
    assert done.returncode == 0, done.stderr
    assert calls == ["apt-get install -y --no-install-recommends chromium", "apt-get update"]
    assert "chromium could not be installed; the browser test will skip" in done.stdout


@pytest.mark.parametrize(("apt_get", "uid"), [(None, 0), ("exit 0", 1000)])
def test_without_apt_get_or_root_it_does_nothing(tmp_path: Path, apt_get: str | None,
                                                 uid: int) -> None:
    done, calls = _browser(tmp_path, apt_get=apt_get, uid=uid)
    assert done.returncode == 0, done.stderr
    assert calls == []
    assert "no apt-get, or not root: chromium not installed" in done.stdout


def test_an_installed_chromium_is_left_alone(tmp_path: Path) -> None:
    done, calls = _browser(tmp_path, apt_get="exit 0", uid=0, chromium=True)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    assert calls == []


def test_setup_depends_on_it() -> None:
    setup = next(line for line in (ROOT / "Makefile").read_text().splitlines()
                 if line.startswith("setup:"))
    assert "browser" in setup.split(":", 1)[1].split()
