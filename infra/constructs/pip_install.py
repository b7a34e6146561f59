"""pip installs for the Lambda platform, standard library only (no ``aws_cdk``), so the synth's
layer bundling and ``warmstart local up``'s runtime folder share one recipe.

A layer is installed from a wheelhouse kept in the project (``.cache/pip/wheelhouse/<tag>``)
with ``--no-index``; wheels missing from it are downloaded first, so a rebuild works offline.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/python-package.html#python-package-native-libraries
https://peps.python.org/pep-0600/
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

#: Repository root (``infra/constructs/pip_install.py`` -> ``../..``).
REPO_ROOT: Final = Path(__file__).resolve().parents[2]
#: pip's download cache, inside the project so it is kept between synths and never global.
PIP_CACHE_DIR: Final = REPO_ROOT / ".cache" / "pip"


class PipInstallError(RuntimeError):
    """pip failed; the message has the command and pip's output."""


def lambda_platforms(architecture: str) -> tuple[str, ...]:
    """pip ``--platform`` tags whose wheels run on Lambda's Python 3.12+ runtimes.

    ``manylinux2014`` (glibc 2.17) is the baseline; some wheels (onnxruntime >= 1.2x) are only
    published as ``manylinux_2_28``, and pip does not widen an explicit platform to newer glibc
    tags, so the glibc 2.28 tag is passed too. The python3.12+ runtimes run on Amazon Linux 2023
    (glibc 2.34), so both run there.

    References
    ----------
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html
    https://peps.python.org/pep-0600/
    """
    arch = {"x86_64": "x86_64", "arm64": "aarch64"}[architecture]
    return (f"manylinux2014_{arch}", f"manylinux_2_28_{arch}")


def _platform_args(python_version: str, platforms: Sequence[str]) -> list[str]:
    args: list[str] = []
    for platform in platforms:
        args += ["--platform", platform]
    return args + ["--python-version", python_version, "--implementation", "cp", "--only-binary=:all:"]


def pip_command(
    *,
    requirements: Path,
    target: Path,
    python_version: str,
    platforms: Sequence[str],
    no_deps: bool,
    wheelhouse: Path,
    python: str = sys.executable,
) -> list[str]:
    """``pip install`` that fills a layer's ``python/`` folder from the local wheelhouse only."""
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet",
           *_platform_args(python_version, platforms),
           "--no-compile", "--no-index", "--find-links", str(wheelhouse),
           "--target", str(target), "-r", str(requirements)]
    if no_deps:
        cmd.append("--no-deps")
    return cmd


def pip_download_command(
    *,
    requirements: Path,
    python_version: str,
    platforms: Sequence[str],
    no_deps: bool,
    wheelhouse: Path,
    cache_dir: Path,
    python: str = sys.executable,
) -> list[str]:
    """``pip download`` of the Lambda-platform wheels into the wheelhouse (kept between builds)."""
    cmd = [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--quiet",
           *_platform_args(python_version, platforms),
           "--cache-dir", str(cache_dir), "--dest", str(wheelhouse), "-r", str(requirements)]
    if no_deps:
        cmd.append("--no-deps")
    return cmd


def wheelhouse_for(cache_dir: Path, python_version: str, platforms: Sequence[str]) -> Path:
    """Where one platform's wheels are kept: ``<cache>/wheelhouse/cp312-manylinux2014_x86_64``."""
    return cache_dir / "wheelhouse" / f"cp{python_version.replace('.', '')}-{platforms[0]}"


def install_requirements(
    *,
    requirements: Path,
    target: Path,
    python_version: str,
    platforms: Sequence[str],
    no_deps: bool,
    cache_dir: Path = PIP_CACHE_DIR,
    compile_with: str | None = None,
) -> None:
    """Install ``requirements`` into ``target`` for the Lambda platform: from the wheelhouse,
    downloading what is missing first; console scripts left out, and byte code either left out
    or, with ``compile_with``, made by that interpreter (:func:`compile_bytecode`).

    Parameters
    ----------
    compile_with : str or None
        The function's CPython (``python3.12`` for ``python_version`` 3.12); ``None``: no byte code.

    Raises
    ------
    PipInstallError
        If pip fails (the message has the command and the tail of pip's output).
    """
    wheelhouse = wheelhouse_for(cache_dir, python_version, platforms)
    wheelhouse.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = pip_command(requirements=requirements, target=target, python_version=python_version,
                          platforms=platforms, no_deps=no_deps, wheelhouse=wheelhouse)
    proc = subprocess.run(install, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:  # wheels missing from the wheelhouse: fetch them, then install
        shutil.rmtree(target, ignore_errors=True)
        download = pip_download_command(requirements=requirements, python_version=python_version,
                                        platforms=platforms, no_deps=no_deps, wheelhouse=wheelhouse,
                                        cache_dir=cache_dir)
        for cmd in (download, install):
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            if proc.returncode != 0:
                raise PipInstallError(
                    f"pip for layer {requirements} failed (exit {proc.returncode}).\n"
                    f"command: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-4000:]}")
    prune(target)
    if compile_with is not None:
        compile_bytecode(target, python=compile_with)


def compile_bytecode(root: Path, *, python: str) -> None:
    """Compile every module under ``root`` with ``python`` (the function's CPython), into
    ``__pycache__/<name>.cpython-3XX.pyc`` as the import system reads it, checked by the source's
    hash never (``unchecked-hash``: a layer is immutable, and its zip may not keep the sources'
    times, which a timestamp check would compare).

    Lambda's code and layer folders are read-only: without this, each cold start compiles every
    module it imports from source and keeps nothing. A file that does not compile (e.g. a
    Python 2 test module a wheel ships) is left as source; it would not import either.

    References
    ----------
    https://docs.python.org/3/library/compileall.html
    https://peps.python.org/pep-0552/ (hash-based .pyc files)
    """
    subprocess.run([python, "-I", "-S", "-m", "compileall", "-q", "-j", "2",
                    "--invalidation-mode", "unchecked-hash", str(root)],
                   capture_output=True, text=True, check=False)


def prune(root: Path) -> None:
    """Drop byte-code caches and console scripts (their shebang points at this machine)."""
    for path in sorted(root.rglob("__pycache__"), reverse=True):
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(root / "bin", ignore_errors=True)
