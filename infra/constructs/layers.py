"""Lambda layers: Python dependencies built locally with pip, and the model artifact.

``DependencyLayer`` installs ``layers/<name>/requirements.txt`` for the Lambda platform
(manylinux, CPython of the function's runtime) into the layer's ``python/`` folder, which Lambda
puts on ``sys.path`` (``/opt/python``). ``ModelLayer`` ships ``layers/model/artifact`` as
``/opt/model`` (the ``WARMSTART_MODEL_DIR`` default). ``LayerCatalog`` builds each layer once per
runtime and architecture and shares it between the agents that declare it, and
``LayerCatalog.for_function`` ships each package once across one function's layers;
``function_code`` makes one agent's code asset. ``check_imports`` is the synth's check that an
agent's handler, app and hooks import from its code and layers alone (a clean ``python -I -S``
of the function's CPython when this machine has one; see its docstring for the fallback).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/packaging-layers.html (layer paths)
https://docs.aws.amazon.com/lambda/latest/dg/python-layers.html
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Final, cast

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from functions.runtime.contract import environment as names
from infra.config import MODEL_LAYER, RUNTIME_PACKAGE
from infra.constructs.bundling import (
    CHILD_SCRIPT_END,
    REPO_ROOT,
    BundlingError,
    CopyLocalBundling,
    Distribution,
    PipLocalBundling,
    bundling_options,
    installed_distributions,
    lambda_platforms,
    require_dir,
    requirement_lines,
    staged_path,
    staged_size_bytes,
)
from infra.constructs.runtime_python import (  # noqa: F401 (RUNTIME_PROVIDED: re-exported)
    RUNTIME_PROVIDED,
    find_python,
    link_runtime_provided,
)

#: Always packaged with an agent's code (the ``functions`` package marker).
FUNCTIONS_INIT: Final = "functions/__init__.py"
_ARCHITECTURES = {"x86_64": lambda_.Architecture.X86_64, "arm64": lambda_.Architecture.ARM_64}


def runtime_for(name: str) -> lambda_.Runtime:
    """The CDK ``Runtime`` constant for a runtime name such as ``python3.12``.

    The constants carry what CDK knows about each runtime (e.g. SnapStart support); a
    ``Runtime("python3.12")`` made by hand would not.
    """
    runtime = getattr(lambda_.Runtime, "PYTHON_" + name.removeprefix("python").replace(".", "_"), None)
    if runtime is None:
        raise ValueError(f"aws-cdk-lib has no Lambda runtime {name!r}")
    return cast(lambda_.Runtime, runtime)


def architecture_for(name: str) -> lambda_.Architecture:
    """The CDK ``Architecture`` for ``x86_64`` or ``arm64``."""
    return _ARCHITECTURES[name]


class DependencyLayer(Construct):
    """A layer of Python packages installed by pip for the Lambda platform, without Docker.

    Parameters
    ----------
    scope, construct_id
        As for any construct.
    requirements : Path
        The ``requirements.txt`` to install (pinned versions).
    runtime : str
        Lambda runtime name, e.g. ``"python3.12"``; decides ``--python-version``.
    architecture : str
        ``"x86_64"`` or ``"arm64"``; decides the manylinux ``--platform`` tags.
    no_deps : bool
        Install exactly the listed packages (``pip --no-deps``); the file must then list them all.
    description : str
        Layer description.

    Attributes
    ----------
    layer : aws_lambda.LayerVersion
    local_bundling : PipLocalBundling
        The bundler, with the exact pip command (``local_bundling.command(out)``).
    unzipped_size_bytes : int or None
        Measured size of the built layer; ``None`` when the stack skips bundling.

    Raises
    ------
    infra.constructs.bundling.BundlingError
        If ``requirements`` does not exist or pip fails.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        requirements: Path,
        runtime: str,
        architecture: str,
        no_deps: bool = False,
        description: str,
    ) -> None:
        super().__init__(scope, construct_id)
        if not requirements.is_file():
            raise BundlingError(f"requirements file not found: {requirements}")
        self.local_bundling = PipLocalBundling(
            requirements=requirements,
            python_version=runtime.removeprefix("python"),
            platforms=lambda_platforms(architecture),
            no_deps=no_deps,
        )
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(
                str(requirements.parent),
                asset_hash_type=cdk.AssetHashType.CUSTOM,
                asset_hash=self.local_bundling.fingerprint(),
                bundling=bundling_options(self.local_bundling),
            ),
            compatible_runtimes=[runtime_for(runtime)],
            compatible_architectures=[architecture_for(architecture)],
            description=description,
        )
        self.unzipped_size_bytes = staged_size_bytes(self.layer)


class ModelLayer(Construct):
    """The model artifact folder as a layer, mounted at ``/opt/model``.

    Parameters
    ----------
    artifact_dir : Path
        Folder with ``model.onnx`` and ``tokenizer.json`` (``layers/model/artifact``).
    runtime, architecture : str
        As for :class:`DependencyLayer` (the files are platform-independent; this only labels the layer).

    Attributes
    ----------
    layer : aws_lambda.LayerVersion
    mount_path : str
        ``"/opt/model"``.
    unzipped_size_bytes : int or None

    Raises
    ------
    infra.constructs.bundling.BundlingError
        If ``artifact_dir`` is missing or empty.
    """

    mount_path = "/opt/model"

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        artifact_dir: Path,
        runtime: str,
        architecture: str,
    ) -> None:
        super().__init__(scope, construct_id)
        require_dir(
            artifact_dir,
            "model artifact",
            "export it first with the model export script under layers/model/ "
            "(it writes model.onnx and tokenizer.json there)",
        )
        bundler = CopyLocalBundling(source=artifact_dir, dest="model")
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(
                str(artifact_dir),
                asset_hash_type=cdk.AssetHashType.CUSTOM,
                asset_hash=bundler.fingerprint(),
                bundling=bundling_options(bundler),
            ),
            compatible_runtimes=[runtime_for(runtime)],
            compatible_architectures=[architecture_for(architecture)],
            description=f"warmstart model artifact, mounted at {self.mount_path}",
        )
        self.unzipped_size_bytes = staged_size_bytes(self.layer)


def function_code(
    code: Sequence[str], *, agent: str, root: Path = REPO_ROOT, handler: str | None = None,
    runtime: str | None = None, architecture: str | None = None,
) -> tuple[lambda_.Code, CopyLocalBundling]:
    """Code asset of one agent: ``functions/__init__.py``, ``functions/runtime/`` and the
    agent's ``code`` folders, each at its path relative to ``root``, and nothing else.

    The handler string stays ``functions.agent.handler.handler``, as in local runs. The asset's
    source is ``root`` (what a synth with bundling skipped points ``aws:asset:path`` at); the
    bundle holds only the listed paths (no tests, no caches). A folder inside another listed
    one is copied once.

    Parameters
    ----------
    code : sequence of str
        Folders relative to ``root`` (``AgentConfig.code``).
    agent : str
        The agent's name, for error messages.
    root : Path
        The repository root.
    handler : str | None
        The agent's handler (``package.module.function``): its module file must exist.
    runtime, architecture : str | None
        The function's runtime (``"python3.12"``) and CPU (``"x86_64"``): with them the
        modules are shipped with byte code compiled by that CPython when this machine has it
        (`infra.constructs.bundling.CopyLocalBundling`); without, source only.

    Raises
    ------
    BundlingError
        If a ``code`` folder (or ``functions/runtime``) is missing or empty, or the handler's
        module file is missing; the message names ``warmstart.agents.<agent>.code`` /
        ``.handler``.
    """
    require_dir(root / RUNTIME_PACKAGE, "the toolkit functions/runtime", "run from a checkout of the repository")
    wanted: list[str] = []
    for rel in code:
        path = root / rel
        if not path.is_dir() or not any(path.iterdir()):
            state = "empty folder" if path.is_dir() else ("not a folder" if path.exists() else "missing")
            raise BundlingError(
                f"warmstart.agents.{agent}.code: {rel} not found at {path} ({state}); create it "
                "or list the agent's code folders (relative to the repository root) in cdk.json"
            )
        wanted.append(PurePosixPath(rel).as_posix())
    if handler is not None:
        module = handler.rsplit(".", 1)[0].replace(".", "/")
        if not ((root / f"{module}.py").is_file() or (root / module / "__init__.py").is_file()):
            raise BundlingError(
                f"warmstart.agents.{agent}.handler: {handler!r}: no module file {module}.py under "
                f"{root}; fix the handler (package.module.function) or create the module"
            )
    parts = [FUNCTIONS_INIT, RUNTIME_PACKAGE, *wanted]
    kept = [p for p in dict.fromkeys(parts)
            if not any(p != q and p.startswith(q + "/") for q in parts)]
    if not (root / FUNCTIONS_INIT).is_file():
        raise BundlingError(f"{root / FUNCTIONS_INIT} is missing: run from a checkout of the repository")
    bundler = CopyLocalBundling(
        copies=[(root / p, p) for p in kept], architecture=architecture,
        python_version=(runtime.removeprefix("python")
                        if runtime is not None and runtime.startswith("python") else None))
    asset = lambda_.Code.from_asset(
        str(root),
        asset_hash_type=cdk.AssetHashType.CUSTOM,
        asset_hash=bundler.fingerprint(),
        bundling=bundling_options(bundler),
    )
    return asset, bundler


@dataclass(frozen=True)
class BuiltLayer:
    """A layer as an agent function ships it: name, layer version, measured size (bytes or
    None), and the folder it was built into (``None`` when the stack skips bundling)."""

    name: str
    layer: lambda_.ILayerVersion
    unzipped_size_bytes: int | None
    staged_dir: Path | None = None

    @property
    def python_dir(self) -> Path | None:
        """Its ``python/`` folder (``/opt/python`` on Lambda), if it was built and has one."""
        if self.staged_dir is None or not (self.staged_dir / "python").is_dir():
            return None
        return self.staged_dir / "python"


#: How the known dependency layers are built (``pip --no-deps`` and their descriptions); any
#: other folder of ``layers/`` with a ``requirements.txt`` is installed with its dependencies.
LAYER_RECIPES: Final[Mapping[str, tuple[bool, str]]] = MappingProxyType({
    "web": (False, ("warmstart web: fastapi, mangum, pydantic, powertools, snapshot-restore-py, "
                   "awscrt")),
    "inference": (True, "warmstart inference: onnxruntime, tokenizers, numpy"),
    "forecast": (False, "warmstart forecast: numpy"),
})


class LayerCatalog(Construct):
    """Every layer the stack ships, each built once per runtime and architecture and shared.

    ``get("web", runtime="python3.12", architecture="x86_64")`` builds the layer the first time
    (construct ``Layers/web-python3.12-x86_64``) and returns the same one afterwards, so two agents
    that both declare ``web`` ship one layer version.

    Parameters
    ----------
    layers_dir : Path
        ``layers/``: one folder per dependency layer (``requirements.txt``) and
        ``model/artifact`` (the model layer).

    Attributes
    ----------
    built : dict[(name, runtime, architecture), BuiltLayer]
    """

    def __init__(self, scope: Construct, construct_id: str, *, layers_dir: Path) -> None:
        super().__init__(scope, construct_id)
        self.layers_dir = layers_dir
        self.built: dict[tuple[str, str, str], BuiltLayer] = {}
        #: layers shipped without the distributions an earlier layer of a function holds
        self.derived: dict[str, BuiltLayer] = {}
        self._shipped: set[tuple[str, str, str]] = set()  # built layers some function ships as is

    def get(self, name: str, *, runtime: str, architecture: str) -> BuiltLayer:
        """The layer ``name`` for ``runtime`` and ``architecture`` (built on first use).

        Raises
        ------
        infra.constructs.bundling.BundlingError
            If its requirements file or the model artifact is missing, or pip fails.
        """
        self._shipped.add((name, runtime, architecture))
        return self._build(name, runtime=runtime, architecture=architecture)

    def prune(self) -> list[str]:
        """Remove the built layers no function ships as they are (only their deduplicated
        copies are shipped), so the template holds no unused layer version; returns their
        construct ids. Call once every function has its layers."""
        removed = []
        for key in [k for k in self.built if k not in self._shipped]:
            construct_id = "-".join(key)
            if self.node.try_remove_child(construct_id):
                removed.append(construct_id)
            del self.built[key]
        return removed

    def _build(self, name: str, *, runtime: str, architecture: str) -> BuiltLayer:
        key = (name, runtime, architecture)
        if key not in self.built:
            construct_id = f"{name}-{runtime}-{architecture}"
            made: DependencyLayer | ModelLayer
            if name == MODEL_LAYER:
                made = ModelLayer(self, construct_id, artifact_dir=self.layers_dir / "model" / "artifact",
                                  runtime=runtime, architecture=architecture)
            else:
                no_deps, description = LAYER_RECIPES.get(name, (False, f"warmstart {name} layer"))
                made = DependencyLayer(self, construct_id,
                                       requirements=self.layers_dir / name / "requirements.txt",
                                       no_deps=no_deps, description=description,
                                       runtime=runtime, architecture=architecture)
            self.built[key] = BuiltLayer(name, made.layer, made.unzipped_size_bytes,
                                         staged_path(made.layer))
        return self.built[key]

    def for_function(self, names: Sequence[str], *, agent: str, runtime: str,
                     architecture: str) -> list[BuiltLayer]:
        """The layers one agent's function ships, in order, each package shipped once.

        Lambda extracts a function's layers into one ``/opt`` (``/opt/python`` on ``sys.path``),
        so a distribution two of them hold (``anyio`` in ``web`` and in the agent's own layer)
        would be shipped, and counted against the 250 MB, twice. The later layer is shipped
        without it: a copy of that layer less the distribution's files (its ``RECORD``), made
        once per set of left-out distributions (construct ``<layer>-<runtime>-<arch>-dedup-<hash>``)
        and shared by the functions that need the same copy (:meth:`prune` then removes a layer
        no function ships as it is). A dependency layer whose
        requirements list no package (the scaffold's, before any is added) is not shipped.

        Parameters
        ----------
        names : sequence of str
            ``AgentConfig.layers``.
        agent : str
            The agent's name, for messages.
        runtime, architecture : str
            As for :meth:`get`.

        Raises
        ------
        infra.constructs.bundling.BundlingError
            If two of the layers hold different versions of one distribution (the message names
            both layers and versions), or as :meth:`get`.
        """
        shipped: list[BuiltLayer] = []
        seen: dict[str, tuple[str, str]] = {}  # distribution -> (version, layer holding it)
        for name in names:
            if name != MODEL_LAYER and not requirement_lines(self.layers_dir / name / "requirements.txt"):
                continue  # nothing to install: no layer (an empty zip is not a layer)
            built = self._build(name, runtime=runtime, architecture=architecture)
            python_dir = built.python_dir
            if python_dir is None:  # bundling skipped, or the model layer
                self._shipped.add((name, runtime, architecture))
                shipped.append(built)
                continue
            dists = installed_distributions(python_dir)
            conflicts = [(d, seen[d]) for d in dists if d in seen and seen[d][0] != dists[d].version]
            if conflicts:
                dist, (version, other) = conflicts[0]
                raise BundlingError(
                    f"warmstart.agents.{agent}.layers: layers {other!r} and {name!r} hold {dist} "
                    f"{version} and {dists[dist].version}; Lambda merges a function's layers into "
                    f"one /opt/python, so pin {dist}=={version} in layers/{name}/requirements.txt "
                    "(or drop it there)")
            shared = sorted(d for d in dists if d in seen)
            if shared:
                built = self._without(built, [dists[d] for d in shared], runtime=runtime,
                                      architecture=architecture, shipped_by=sorted({seen[d][1] for d in shared}))
            else:
                self._shipped.add((name, runtime, architecture))
            for dist, info in dists.items():
                seen.setdefault(dist, (info.version, name))
            shipped.append(built)
        return shipped

    def _without(self, built: BuiltLayer, dists: Sequence[Distribution], *, runtime: str,
                 architecture: str, shipped_by: Sequence[str]) -> BuiltLayer:
        """``built`` less the files of ``dists`` (a copy of its staged folder), made once."""
        import hashlib

        assert built.staged_dir is not None
        label = ",".join(f"{d.name}=={d.version}" for d in dists)
        construct_id = (f"{built.name}-{runtime}-{architecture}-dedup-"
                        f"{hashlib.sha256(label.encode()).hexdigest()[:8]}")
        if construct_id in self.derived:
            return self.derived[construct_id]
        python_dir = built.staged_dir / "python"
        dropped = {f for d in dists for f in d.files}
        copies = [(path, f"python/{path.relative_to(python_dir).as_posix()}")
                  for path in sorted(python_dir.rglob("*"))
                  if path.is_file() and not _dropped(path.relative_to(python_dir).as_posix(), dropped)]
        bundler = CopyLocalBundling(copies=copies)
        scope = Construct(self, construct_id)
        layer = lambda_.LayerVersion(
            scope, "Layer",
            code=lambda_.Code.from_asset(str(built.staged_dir), asset_hash_type=cdk.AssetHashType.CUSTOM,
                                         asset_hash=bundler.fingerprint(), bundling=bundling_options(bundler)),
            compatible_runtimes=[runtime_for(runtime)],
            compatible_architectures=[architecture_for(architecture)],
            description=(f"warmstart {built.name} layer without {', '.join(d.name for d in dists)} "
                         f"(shipped by {', '.join(shipped_by)})")[:256],
        )
        self.derived[construct_id] = BuiltLayer(built.name, layer, staged_size_bytes(layer), staged_path(layer))
        return self.derived[construct_id]


def _dropped(rel: str, dropped: set[str]) -> bool:
    """Whether ``rel`` (a file of a layer's ``python/``) is one of ``dropped`` (a distribution's
    ``RECORD``) or the byte code of one (``pkg/__pycache__/mod.cpython-312.pyc``, compiled after
    pip installed it, so not in the ``RECORD``)."""
    if rel in dropped:
        return True
    parent, _, name = rel.rpartition("/")
    if not parent.endswith("__pycache__") or not name.endswith(".pyc"):
        return False
    source_dir = parent.removesuffix("__pycache__").rstrip("/")
    source = f"{source_dir}/{name.split('.', 1)[0]}.py" if source_dir else f"{name.split('.', 1)[0]}.py"
    return source in dropped


# ---- the synth's import check ------------------------------------------------------------------

#: Run by ``python -I -S``: only the standard library, then sys.path = code + layers (+ the
#: runtime's boto3); imports the handler module, then every Agent's app, hooks and model loader
#: (imports only: nothing is called), and prints one JSON line.
_CHECK_SCRIPT: Final = r'''
import importlib, json, os, sys, traceback
args = json.loads(sys.argv[1])
sys.path[:0] = args["path"]
out = {"ok": True}
def where(exc):
    roots = tuple(args["path"][:1])
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith(roots):
            return f"{os.path.relpath(frame.filename, roots[0])}:{frame.lineno}"
    return None
try:
    try:
        module = importlib.import_module(args["module"])
        from functions.runtime.agent import Agent, resolve, resolve_hooks
        for agent in [v for v in vars(module).values() if isinstance(v, Agent)]:
            resolve(agent.app, agent=agent.name, where="agent", field="app")
            for route in agent.routes:
                resolve_hooks(agent.name, route)
            if agent.model is not None:
                resolve(agent.model, agent=agent.name, where="agent", field="model")
    except Exception as exc:
        cause = exc
        while cause is not None and not isinstance(cause, ImportError):
            cause = cause.__cause__
        if cause is None:
            raise
        out = {"ok": False, "name": cause.name, "not_found": isinstance(cause, ModuleNotFoundError),
               "message": str(cause), "where": where(cause)}
except BaseException as exc:
    out = {"ok": False, "name": None, "not_found": False,
           "message": f"{type(exc).__name__}: {exc}", "where": where(exc)}
out["python"] = "%d.%d" % sys.version_info[:2]
''' + CHILD_SCRIPT_END


class MissingDependencyError(BundlingError):
    """An agent's handler, app or hooks import a module its code and layers do not hold."""


@dataclass(frozen=True)
class ImportCheck:
    """What the synth's import check of one agent found.

    Attributes
    ----------
    agent : str
    python : str
        The interpreter it ran (``python3.12`` of the function's runtime when found).
    complete : bool
        False when it ran under another Python (or CPU) than the function's and stopped at a
        compiled module the layers hold for the function's platform: the imports after it were
        not checked (``note`` says which).
    elapsed_ms : float
        Wall time of the check, ms.
    note : str or None
    """

    agent: str
    python: str
    complete: bool
    elapsed_ms: float
    note: str | None = None


def check_imports(
    *,
    agent: str,
    handler: str,
    code_dir: Path,
    layer_dirs: Sequence[Path],
    runtime: str,
    architecture: str = "x86_64",
    python: str | None = None,
    timeout_s: float = 120.0,
) -> ImportCheck:
    """Import the agent's handler module, its app and its declared hooks in a clean interpreter
    whose ``sys.path`` is the function's code asset and its layers' ``python/`` folders only.

    The interpreter runs ``-I -S`` (no ``PYTHON*`` variables, no site-packages: not the
    project's ``.venv``); besides the code and layers it sees the standard library and the
    packages the Lambda runtime provides (:data:`RUNTIME_PROVIDED`, this machine's copies).
    Only imports run: the app factory, hooks and model loader are resolved, never called.

    Which interpreter: the layers hold wheels built for the function's platform (manylinux,
    CPython of ``runtime``), and a compiled one (pydantic-core, numpy) imports only under that
    CPython. So the check runs ``python3.12`` (for ``python3.12``) when :func:`find_python`
    finds one: then it is the deployed import, compiled modules included. Without one it runs
    this interpreter and is honest about the limit: a module missing from code and layers still
    fails the check, but an import that fails on a module the layers do hold (built for the
    other Python) ends the check there, reported as incomplete (``ImportCheck.complete``), not
    as an error.

    Parameters
    ----------
    agent : str
        The agent's name, for the message.
    handler : str
        ``package.module.function``.
    code_dir : Path
        The function's staged code asset (``functions/...``).
    layer_dirs : sequence of Path
        Its layers' ``python/`` folders, in order.
    runtime, architecture : str
        The function's (``python3.12``, ``x86_64``).
    python : str or None
        The interpreter; ``None``: :func:`find_python`, else this one.
    timeout_s : float
        Bound of the check, s.

    Returns
    -------
    ImportCheck

    Raises
    ------
    MissingDependencyError
        One line: ``warmstart.agents.<agent>: module 'httpx' is not in the function's code or
        layers (imported at functions/x/app.py:9); ...``.
    """
    import json
    import subprocess
    import sys
    import tempfile
    import time

    version = runtime.removeprefix("python")
    chosen = python or find_python(version, architecture) or sys.executable
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="warmstart-check-") as tmp:
        # absolute: the interpreter runs in `tmp`, and a CLI synth stages assets under a
        # relative cdk.out
        path = [str(Path(code_dir).resolve()), *(str(Path(d).resolve()) for d in layer_dirs),
                str(link_runtime_provided(Path(tmp) / "runtime"))]
        module = handler.rsplit(".", 1)[0]
        try:
            # -B: the check writes no byte code into the staged assets (what `cdk deploy` zips)
            proc = subprocess.run([chosen, "-I", "-S", "-B", "-c", _CHECK_SCRIPT,
                                   json.dumps({"path": path, "module": module})],
                                  capture_output=True, text=True, timeout=timeout_s, check=False,
                                  env={"LANG": "C.UTF-8", names.ENV_AGENT_NAME: agent}, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise MissingDependencyError(
                f"warmstart.agents.{agent}: importing {module} did not finish within {timeout_s:.0f} s "
                "(the synth's import check); move slow work out of import time") from None
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise BundlingError(f"warmstart.agents.{agent}: the import check ({chosen}) gave no result "
                            f"(exit {proc.returncode}): {proc.stderr.strip()[-2000:]}") from None
    if result["ok"]:
        return ImportCheck(agent, chosen, True, elapsed_ms)
    name = result["name"] or ""
    at = f" (imported at {result['where']})" if result["where"] else ""
    ran = result["python"]
    if ran != version and name and any(_holds(Path(d), name.split(".", 1)[0]) for d in layer_dirs):
        return ImportCheck(agent, chosen, False, elapsed_ms,
                           f"stopped at {name!r}{at}: the layers hold it built for CPython {version}, "
                           f"the check ran Python {ran}; install python{version} for a complete check")
    if result["not_found"] and name:
        raise MissingDependencyError(
            f"warmstart.agents.{agent}: module {name!r} is not in the function's code "
            f"or layers{at}; add the package that provides it to the agent's requirements "
            f"(layers/{agent}/requirements.txt, listed in warmstart.agents.{agent}.layers) and synth again")
    raise MissingDependencyError(
        f"warmstart.agents.{agent}: importing {module} with only the function's code and layers "
        f"failed{at}: {result['message']}".replace("\n", " "))


def _holds(python_dir: Path, top: str) -> bool:
    """Whether a layer's ``python/`` has the top-level module ``top`` (a package or a file)."""
    return (python_dir / top).is_dir() or any(python_dir.glob(f"{top}.*"))


def check_function_imports(function: lambda_.Function, *, agent: str, handler: str, runtime: str,
                           architecture: str, layers: Sequence[BuiltLayer]) -> ImportCheck | None:
    """:func:`check_imports` of a synthesized agent function: its staged code asset and the
    ``python/`` folders of the layers it ships, in order; the outcome becomes an info annotation.

    Returns ``None`` (nothing checked) when the stack skips bundling: nothing was built to
    import from.

    Raises
    ------
    MissingDependencyError
        As :func:`check_imports`.
    """
    code_dir = staged_path(function)
    if code_dir is None or not code_dir.is_dir() or any(b.staged_dir is None for b in layers):
        return None
    dirs = [d for d in (b.python_dir for b in layers) if d is not None]
    check = check_imports(agent=agent, handler=handler, code_dir=code_dir, layer_dirs=dirs,
                          runtime=runtime, architecture=architecture)
    cdk.Annotations.of(function).add_info(
        f"import check of {handler.rsplit('.', 1)[0]} (code + layers only, {check.python}): "
        + ("passed" if check.complete else f"incomplete, {check.note}")
        + f" in {check.elapsed_ms:.0f} ms")
    return check
