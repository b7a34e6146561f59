"""Each function's execution environments run with its own code and layers, as on Lambda.

On Lambda, a Python function's runtime (``python3.12``) runs that CPython with the function's
code first on ``sys.path`` (``/var/task``), then its layers' ``python`` and
``python/lib/python3.x/site-packages`` folders (extracted into ``/opt``), then what the managed
runtime itself holds: the SDK for Python (boto3 and its dependencies) and the runtime interface
client (``awslambdaric``), then the standard library. Nothing of the machine that deployed it.

Locally (:class:`LocalRuntime`, one per Python version and CPU): the same CPython found on this
machine (:func:`~infra.constructs.runtime_python.find_python`), run ``-S`` (no site-packages:
neither its own nor the project's ``.venv``), with ``PYTHONPATH`` = the function's code asset,
its built layer folders, links to this machine's boto3 (the runtime-included SDK's stand-in,
pure Python) and ``awslambdaric`` built for that CPython by the project's pip recipe (kept in
``.cache/local-runtime/``). A module missing from the function's layers then fails locally as it
does on AWS: the agent's web stage logs ``No module named 'httpx'`` and answers
``500 agent_misconfigured``.

The emulator starts every runtime with one interpreter (``EmulatorConfig.python``): the stack
points it at a launcher (:func:`write_launcher`) that runs the function's CPython ``-S`` when
the function's environment names it (``_WARMSTART_RUNTIME_PYTHON``, removed before the runtime
starts, so the function never sees it), else the project's interpreter as before (functions
described without layers: hand-built specs, tests, ``local up --venv``). As on Lambda, whose
code and layer folders are read-only, byte code that ships with them is read and none is
written (``PYTHONDONTWRITEBYTECODE=1``): a cold start compiles what ships as source, and the
cloud assembly's assets (what ``cdk deploy`` zips) stay as the synth made them.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/packaging-layers.html (layer paths for Python)
https://docs.aws.amazon.com/lambda/latest/dg/python-image.html (search path: the task root
first; runtime-included libraries in the runtime's own site-packages)
https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html#python-sdk-included
https://docs.python.org/3/using/cmdline.html#cmdoption-S (``-S``: no site module)
https://docs.aws.amazon.com/lambda/latest/dg/configuration-ephemeral-storage.html (only ``/tmp``
is writable)
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from functions.runtime.contract import environment as names
from infra.constructs.runtime_python import find_python, link_runtime_provided
from infra.local.spec import FunctionSpec

#: The launcher reads the function's interpreter from this variable (and removes it).
#: What the managed runtime holds besides the SDK: the runtime interface client and its
#: dependencies (``awslambdaric``'s ``Requires-Dist``), pinned to this project's versions.
RUNTIME_CLIENT: Final = ("awslambdaric", "simplejson", "snapshot-restore-py")
#: Where the runtime folders are kept between runs (ignored by git).
CACHE_DIR: Final = Path(__file__).resolve().parents[2] / ".cache"


class RuntimeUnavailable(RuntimeError):
    """A function cannot run with its own code and layers on this machine; the message says
    which function, why, and what to do (install the CPython, or ``local up --venv``)."""


@dataclass(frozen=True)
class LocalRuntime:
    """The local stand-in of one Lambda Python runtime.

    Attributes
    ----------
    runtime : str
        ``python3.12``.
    python : str
        This machine's CPython of that version (the real executable, not a pyenv shim).
    client_dir : Path
        ``awslambdaric`` and its dependencies, built for that CPython (``/var/runtime``).
    sdk_dir : Path
        Links to this machine's boto3, botocore and their dependencies (the runtime-included SDK).
    """

    runtime: str
    python: str
    client_dir: Path
    sdk_dir: Path


def _pinned(names: Sequence[str]) -> str:
    from importlib import metadata

    lines = []
    for name in names:
        try:
            lines.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError as exc:
            raise RuntimeUnavailable(f"{name} is not installed in {sys.executable}: it pins the "
                                     "local runtime's copy (make setup installs it)") from exc
    return "\n".join(lines) + "\n"


def prepare_runtime(runtime: str, architecture: str = "x86_64", *,
                    cache_dir: Path = CACHE_DIR) -> LocalRuntime:
    """The :class:`LocalRuntime` of ``runtime``, its folders built on first use and reused.

    Parameters
    ----------
    runtime : str
        A Lambda Python runtime name, ``python3.12``.
    architecture : str
        ``x86_64`` or ``arm64``: the function's; it must be this machine's CPU.
    cache_dir : Path
        Root of ``local-runtime/`` (and pip's wheelhouse under ``pip/``).

    Raises
    ------
    RuntimeUnavailable
        No CPython of that version for that CPU on this machine, or pip failed (first use only).
    """
    from infra.constructs.pip_install import PipInstallError, install_requirements, lambda_platforms

    version = runtime.removeprefix("python")
    python = find_python(version, architecture)
    if python is None:
        raise RuntimeUnavailable(
            f"no CPython {version} for {architecture} on this machine to run the function's "
            f"layers (built for {runtime}); install it (e.g. `pyenv install {version}`) or run "
            "`warmstart local up --venv` (every function with this project's .venv: not what "
            "Lambda runs)")
    requirements = _pinned(RUNTIME_CLIENT)
    platforms = lambda_platforms(architecture)
    key = hashlib.sha256("\0".join((requirements, version, *platforms, "bytecode")).encode()).hexdigest()[:16]
    root = cache_dir / "local-runtime" / f"cp{version.replace('.', '')}-{architecture}-{key}"
    client_dir = root / "client"
    if not (client_dir / "awslambdaric").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=root) as tmp:
            (Path(tmp) / "requirements.txt").write_text(requirements)
            try:
                install_requirements(requirements=Path(tmp) / "requirements.txt",
                                     target=Path(tmp) / "client", python_version=version,
                                     platforms=platforms, no_deps=True, cache_dir=cache_dir / "pip",
                                     compile_with=python)
            except PipInstallError as exc:
                raise RuntimeUnavailable(f"the local {runtime} runtime client could not be built: "
                                         f"{exc}") from None
            try:
                os.rename(Path(tmp) / "client", client_dir)
            except OSError:  # another run built it meanwhile
                if not (client_dir / "awslambdaric").is_dir():
                    raise
    sdk_dir = link_runtime_provided(root / "sdk")
    return LocalRuntime(runtime, python, client_dir, sdk_dir)


def function_path(spec: FunctionSpec, runtime: LocalRuntime) -> list[str]:
    """The function's ``sys.path`` before the standard library: its code folder, each layer's
    ``python/`` and ``python/lib/python3.x/site-packages`` (the last layer first: extracted one
    over another into ``/opt``, a later layer's file is the one left), the SDK, the runtime
    client."""
    assert spec.layers is not None
    version = runtime.runtime.removeprefix("python")
    path = [str(spec.code_dir.resolve())]
    for layer in reversed(spec.layers):
        for sub in (layer / "python", layer / "python" / "lib" / f"python{version}" / "site-packages"):
            if sub.is_dir():
                path.append(str(sub.resolve()))
    return [*path, str(runtime.sdk_dir), str(runtime.client_dir)]


def isolate(spec: FunctionSpec, runtime: LocalRuntime) -> FunctionSpec:
    """``spec`` with the variables that make the launcher run it with its own code and layers.

    Raises
    ------
    RuntimeUnavailable
        If a layer folder of the function is missing (the cloud assembly changed: synthesize
        again).
    """
    assert spec.layers is not None
    missing = [str(p) for p in spec.layers if not p.is_dir()]
    if missing:
        raise RuntimeUnavailable(f"function {spec.name}: layer folder(s) {missing} are missing; "
                                 "synthesize the app again (make synth)")
    env = dict(spec.environment)
    env[names.ENV_LOCAL_RUNTIME_PYTHON] = runtime.python
    env["PYTHONPATH"] = os.pathsep.join(function_path(spec, runtime))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # read-only code and layers, as on Lambda
    return replace(spec, environment=env)


LAUNCHER_NAME: Final = "python"  # the streaming exec wrapper keeps an interpreter named python*


def write_launcher(directory: Path, *, default_python: str = sys.executable) -> Path:
    """Write the emulator's interpreter, ``<directory>/python`` (a POSIX shell script), and
    return it: the function's CPython with ``-S`` when ``_WARMSTART_RUNTIME_PYTHON`` names it
    (the variable removed first), else ``default_python`` with the arguments as given."""
    directory.mkdir(parents=True, exist_ok=True)
    launcher = directory / LAUNCHER_NAME
    launcher.write_text(
        "#!/bin/sh\n"
        "# warmstart local: an execution environment's interpreter (infra/local/function_runtime.py).\n"
        f"# With {names.ENV_LOCAL_RUNTIME_PYTHON} set: that CPython, no site-packages (-S), "
        "PYTHONPATH =\n"
        "# the function's code, its layers, the SDK and the runtime client; else the project's.\n"
        f'if [ -n "${{{names.ENV_LOCAL_RUNTIME_PYTHON}:-}}" ]; then\n'
        f'  python=${names.ENV_LOCAL_RUNTIME_PYTHON}\n'
        f"  unset {names.ENV_LOCAL_RUNTIME_PYTHON}\n"
        '  exec "$python" -S "$@"\n'
        "fi\n"
        f'exec {shlex.quote(default_python)} "$@"\n')
    launcher.chmod(0o755)
    return launcher


def isolated_functions(functions: Sequence[FunctionSpec], *, cache_dir: Path = CACHE_DIR,
                       runtimes: Mapping[tuple[str, str], LocalRuntime] | None = None
                       ) -> list[FunctionSpec]:
    """Each function described with layers (:attr:`FunctionSpec.layers` not ``None``) made to
    run with its own code and layers (:func:`isolate`); the others as they are.

    Raises
    ------
    RuntimeUnavailable
        As :func:`prepare_runtime` (the message names the function) and :func:`isolate`.
    """
    made: dict[tuple[str, str], LocalRuntime] = dict(runtimes or {})
    out = []
    for spec in functions:
        if spec.layers is None:
            out.append(spec)
            continue
        key = (spec.runtime, spec.architecture)
        if key not in made:
            try:
                made[key] = prepare_runtime(spec.runtime, spec.architecture, cache_dir=cache_dir)
            except RuntimeUnavailable as exc:
                raise RuntimeUnavailable(f"function {spec.name} ({spec.runtime}): {exc}") from None
        out.append(isolate(spec, made[key]))
    return out
