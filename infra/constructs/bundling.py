"""Local bundling (no Docker) for Lambda layers and function code, and asset size accounting.

CDK asks an ``ILocalBundling`` first and falls back to the Docker ``image`` only when it returns
``False``; ours never do: a failed ``pip install`` raises :class:`BundlingError` with pip's output,
so a machine without Docker gets the real error instead of "docker: not found".

Asset hashes are computed here (``AssetHashType.CUSTOM``) from everything that decides the
output (requirements text, target platform and Python, the pip flags, the copied files), so the
template is stable between synths and a cached bundle in ``cdk.out`` is reused.

References
----------
https://docs.aws.amazon.com/cdk/api/v2/python/aws_cdk/ILocalBundling.html
https://docs.aws.amazon.com/lambda/latest/dg/python-package.html#python-package-native-libraries
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aws_cdk as cdk
import jsii
from constructs import Construct

from infra.constructs.pip_install import (  # noqa: F401 (lambda_platforms, REPO_ROOT: re-exported)
    PIP_CACHE_DIR,
    REPO_ROOT,
    PipInstallError,
    compile_bytecode,
    install_requirements,
    lambda_platforms,
    pip_command,
    pip_download_command,
    wheelhouse_for,
)
from infra.constructs.runtime_python import find_python, host_architecture

#: Bumped when the bundling recipe changes, so cached bundles are rebuilt.
RECIPE_VERSION: Final = "2"
#: Never copied into an asset.
IGNORED_NAMES: Final = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "tests")
IGNORED_SUFFIXES: Final = (".pyc", ".pyo")
#: Only used if local bundling is ever declined (it never is); no Docker is needed.
FALLBACK_IMAGE: Final = "public.ecr.aws/sam/build-python3.12"


#: The last lines of a synth-time child script (``python -I -c SCRIPT``): print its ``out``
#: as one JSON line and leave at once (``os._exit``: the handler module's background preload
#: never runs to the end). A script ends with it: ``SCRIPT = BODY + CHILD_SCRIPT_END``.
CHILD_SCRIPT_END: Final = r'''
sys.stdout.write(json.dumps(out) + "\n")
sys.stdout.flush()
os._exit(0)
'''


class BundlingError(RuntimeError):
    """Building an asset locally failed (pip error, missing source)."""


@jsii.implements(cdk.ILocalBundling)
class PipLocalBundling:
    """Installs ``requirements`` into ``<output>/python`` with pip for the Lambda platform, with
    byte code compiled by the function's CPython when this machine has it (Lambda cannot write
    byte code into a layer: without it each cold start compiles what it imports)."""

    def __init__(
        self,
        *,
        requirements: Path,
        python_version: str,
        platforms: Sequence[str],
        no_deps: bool,
        cache_dir: Path = PIP_CACHE_DIR,
    ) -> None:
        self.requirements = requirements
        self.python_version = python_version
        self.platforms = tuple(platforms)
        self.no_deps = no_deps
        self.cache_dir = cache_dir
        #: the function's CPython that compiles the layer's byte code (None: not on this machine,
        #: the layer ships source only)
        self.compile_with = find_python(python_version, host_architecture())

    @property
    def wheelhouse(self) -> Path:
        """Where this platform's wheels are kept: ``.cache/pip/wheelhouse/cp312-manylinux2014_x86_64``."""
        return wheelhouse_for(self.cache_dir, self.python_version, self.platforms)

    def command(self, output_dir: Path) -> list[str]:
        """The install command (wheelhouse only, no index)."""
        return pip_command(requirements=self.requirements, target=output_dir / "python",
                           python_version=self.python_version, platforms=self.platforms,
                           no_deps=self.no_deps, wheelhouse=self.wheelhouse)

    def download_command(self) -> list[str]:
        """The download command that fills the wheelhouse from the package index."""
        return pip_download_command(requirements=self.requirements, python_version=self.python_version,
                                    platforms=self.platforms, no_deps=self.no_deps,
                                    wheelhouse=self.wheelhouse, cache_dir=self.cache_dir)

    def try_bundle(self, output_dir: str, *, image: Any = None, **_options: Any) -> bool:
        """Install from the wheelhouse; download what is missing first (so rebuilds work offline).

        Raises
        ------
        BundlingError
            If pip fails; the message has the command and pip's output.
        """
        try:
            install_requirements(requirements=self.requirements, target=Path(output_dir) / "python",
                                 python_version=self.python_version, platforms=self.platforms,
                                 no_deps=self.no_deps, cache_dir=self.cache_dir,
                                 compile_with=self.compile_with)
        except PipInstallError as exc:
            raise BundlingError(str(exc)) from None
        return True

    def fingerprint(self) -> str:
        """Hash of everything that decides the output."""
        digest = hashlib.sha256()
        for part in (RECIPE_VERSION, self.python_version, *self.platforms, str(self.no_deps),
                     f"bytecode={self.compile_with is not None}"):
            digest.update(part.encode() + b"\0")
        digest.update(self.requirements.read_bytes())
        return digest.hexdigest()


def _included(root: Path) -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_NAMES)
        for name in sorted(filenames):
            if not name.endswith(IGNORED_SUFFIXES):
                files.append(Path(dirpath) / name)
    return files


@jsii.implements(cdk.ILocalBundling)
class CopyLocalBundling:
    """Copies ``source`` to ``<output>/<dest>``, or each ``(source, dest)`` of ``copies``,
    leaving out caches and tests.

    A folder source lands under the folder ``dest``; a file source is copied to the file
    ``dest``, with its mode (an executable script stays executable). The fingerprint hashes
    every copied file's output path and content, and its executable bit when set.

    With ``python_version`` (a function's code: ``"3.12"``) the copied modules are compiled
    by that CPython when this machine has it (`functions.runtime` and the agent's code, as
    the dependency layers are, `infra.constructs.pip_install.compile_bytecode`): Lambda's
    ``/var/task`` is read-only, so without byte code every cold start compiles each module it
    imports from source, the toolkit's own included (18 of them, ~18 ms of its toolkit stage
    on this project's 2-core host, `functions.runtime.agent_handler`), and keeps nothing.
    """

    def __init__(self, *, source: Path | None = None, dest: str = "",
                 copies: Sequence[tuple[Path, str]] = (), python_version: str | None = None,
                 architecture: str | None = None) -> None:
        if (source is None) == (not copies):
            raise ValueError("CopyLocalBundling needs source and dest, or copies (not both)")
        self.copies: tuple[tuple[Path, str], ...] = (
            ((source, dest),) if source is not None else tuple(copies))
        #: the function's CPython that compiles the copied modules (None: no version given, or
        #: not on this machine: the asset ships source only)
        self.compile_with = (find_python(python_version, architecture or host_architecture())
                             if python_version is not None else None)
        self.python_version = python_version if self.compile_with is not None else None

    def files(self) -> list[tuple[Path, str]]:
        """``(file, its path in the output)`` for every file copied, in a stable order."""
        out = []
        for source, dest in self.copies:
            if source.is_file():
                out.append((source, dest))
                continue
            out += [(path, f"{dest}/{path.relative_to(source).as_posix()}") for path in _included(source)]
        return out

    def try_bundle(self, output_dir: str, *, image: Any = None, **_options: Any) -> bool:
        for path, rel in self.files():
            copy_to = Path(output_dir) / rel
            copy_to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy_to)
        if self.compile_with is not None:
            compile_bytecode(Path(output_dir), python=self.compile_with)
        return True

    def fingerprint(self) -> str:
        """Hash of each copied file's output path and content, and of its executable bit when
        set (``copy2`` keeps the mode and the CDK CLI zips it: a wrapper script made executable
        after a synth is a new asset, not a cached copy without the bit)."""
        digest = hashlib.sha256(f"{RECIPE_VERSION}\0".encode())
        if self.python_version is not None:
            digest.update(f"bytecode=cpython-{self.python_version}\0".encode())
        for path, rel in self.files():
            digest.update(rel.encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
            if os.access(path, os.X_OK):
                digest.update(b"\0+x")
        return digest.hexdigest()


def bundling_options(local: PipLocalBundling | CopyLocalBundling) -> cdk.BundlingOptions:
    """``BundlingOptions`` that always bundle locally; the image is never pulled."""
    return cdk.BundlingOptions(
        image=cdk.DockerImage.from_registry(FALLBACK_IMAGE),
        local=local,
        command=["false"],  # the Docker path is never taken: local bundling never declines
    )


def dir_size_bytes(root: Path) -> int:
    """Sum of file sizes under ``root`` (what Lambda counts as unzipped size)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def staged_path(owner: Construct) -> Path | None:
    """Where the asset that ``Code.from_asset`` bound under ``owner`` was staged (a folder, or
    a zip staged as is); ``None`` when the stack skips bundling (``aws:cdk:bundling-stacks``)."""
    if not cdk.Stack.of(owner).bundling_required:
        return None
    asset = owner.node.try_find_child("Code")
    if asset is None:
        raise BundlingError(f"{owner.node.path}: no code asset found to measure")
    staged = Path(asset.asset_path)  # type: ignore[attr-defined]
    if not staged.is_absolute():
        staged = Path(cdk.Stage.of(owner).asset_outdir) / staged  # type: ignore[union-attr]
    return staged


def staged_size_bytes(owner: Construct) -> int | None:
    """Unzipped size of the asset that ``Code.from_asset`` bound under ``owner``.

    Returns ``None`` when the stack skips bundling (``aws:cdk:bundling-stacks``), since nothing
    was built to measure.
    """
    staged = staged_path(owner)
    if staged is None:
        return None
    if staged.is_file():  # a zip staged as is
        import zipfile

        with zipfile.ZipFile(staged) as archive:
            return sum(info.file_size for info in archive.infolist())
    return dir_size_bytes(staged)


def requirement_lines(requirements: Path) -> list[str]:
    """The requirement lines of a ``requirements.txt`` (comments and blank lines left out)."""
    lines = (line.split("#", 1)[0].strip() for line in requirements.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def canonical_name(name: str) -> str:
    """A distribution's normalized name (PEP 503): ``Typing_Extensions`` -> ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Distribution:
    """One distribution installed in a layer's ``python/`` folder (from its ``.dist-info``).

    Attributes
    ----------
    name : str
        Normalized name (:func:`canonical_name`).
    version : str
    files : tuple of str
        Its files, relative to ``python/`` (the ``RECORD``; entries outside the folder, such as
        console scripts in ``../../bin``, left out), the ``.dist-info`` folder included.
    top_level : tuple of str
        The top-level modules it provides (first path parts of its importable files).
    """

    name: str
    version: str
    files: tuple[str, ...]
    top_level: tuple[str, ...]


def installed_distributions(python_dir: Path) -> dict[str, Distribution]:
    """The distributions pip installed into ``python_dir`` (a layer's ``python/``), by name.

    Read from each ``*.dist-info/METADATA`` (``Name``, ``Version``) and ``RECORD``, so it works
    for wheels of any platform and Python version (nothing is imported).
    """
    found: dict[str, Distribution] = {}
    for info in sorted(python_dir.glob("*.dist-info")):
        fields: dict[str, str] = {}
        for line in (info / "METADATA").read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        record = info / "RECORD"
        rows = [line.split(",", 1)[0] for line in record.read_text(encoding="utf-8").splitlines()] if record.is_file() else []
        files = sorted({row for row in rows if row and not row.startswith("..")}
                       | {f"{info.name}/{p.name}" for p in info.iterdir()})
        top = sorted({row.split("/", 1)[0].split(".", 1)[0] for row in files
                      if not row.split("/", 1)[0].endswith((".dist-info", ".data"))
                      and (row.endswith((".py", ".so", ".pyd")) or "/" in row)})
        name = canonical_name(fields.get("Name", info.name.split("-", 1)[0]))
        found[name] = Distribution(name, fields.get("Version", ""), tuple(files), tuple(top))
    return found


def require_dir(path: Path, what: str, hint: str) -> Path:
    """Return ``path`` if it is a non-empty directory, else raise :class:`BundlingError`."""
    if not path.is_dir() or not any(path.iterdir()):
        raise BundlingError(f"{what} not found at {path} ({'empty folder' if path.is_dir() else 'missing'}): {hint}")
    return path


def mb(size_bytes: int) -> float:
    """Bytes to MB (MiB, as Lambda counts its 250 MB limit)."""
    return size_bytes / (1024 * 1024)


def describe_sizes(sizes: Iterable[tuple[str, int]]) -> str:
    """``name 1.2 MB, ...`` of ``(name, bytes)`` pairs (MiB), for a size error."""
    return ", ".join(f"{name} {mb(size):.1f} MB" for name, size in sizes)
