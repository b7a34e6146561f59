"""Lambda layers: Python dependencies built locally with pip, and the model artifact.

``DependencyLayer`` installs ``layers/<name>/requirements.txt`` for the Lambda platform
(manylinux, CPython of the function's runtime) into the layer's ``python/`` folder, which Lambda
puts on ``sys.path`` (``/opt/python``). ``ModelLayer`` ships ``layers/model/artifact`` as
``/opt/model`` (the ``WARMSTART_MODEL_DIR`` default). ``LayerCatalog`` builds each layer once per
runtime and architecture and shares it between the agents that declare it;
``function_code`` makes one agent's code asset.

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

from infra.config import MODEL_LAYER, RUNTIME_PACKAGE
from infra.constructs.bundling import (
    REPO_ROOT,
    BundlingError,
    CopyLocalBundling,
    PipLocalBundling,
    bundling_options,
    lambda_platforms,
    require_dir,
    staged_size_bytes,
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
    code: Sequence[str], *, agent: str, root: Path = REPO_ROOT, handler: str | None = None
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
    bundler = CopyLocalBundling(copies=[(root / p, p) for p in kept])
    asset = lambda_.Code.from_asset(
        str(root),
        asset_hash_type=cdk.AssetHashType.CUSTOM,
        asset_hash=bundler.fingerprint(),
        bundling=bundling_options(bundler),
    )
    return asset, bundler


@dataclass(frozen=True)
class BuiltLayer:
    """A layer as an agent function ships it: name, layer version, measured size (bytes or None)."""

    name: str
    layer: lambda_.ILayerVersion
    unzipped_size_bytes: int | None


#: How the known dependency layers are built (``pip --no-deps`` and their descriptions); any
#: other folder of ``layers/`` with a ``requirements.txt`` is installed with its dependencies.
LAYER_RECIPES: Final[Mapping[str, tuple[bool, str]]] = MappingProxyType({
    "web": (False, "warmstart web: fastapi, mangum, pydantic, powertools, snapshot-restore-py, "
                   "awscrt"),
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

    def get(self, name: str, *, runtime: str, architecture: str) -> BuiltLayer:
        """The layer ``name`` for ``runtime`` and ``architecture`` (built on first use).

        Raises
        ------
        infra.constructs.bundling.BundlingError
            If its requirements file or the model artifact is missing, or pip fails.
        """
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
            self.built[key] = BuiltLayer(name, made.layer, made.unzipped_size_bytes)
        return self.built[key]
