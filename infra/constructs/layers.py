"""Lambda layers: Python dependencies built locally with pip, and the model artifact.

``DependencyLayer`` installs ``layers/<name>/requirements.txt`` for the Lambda platform
(manylinux, CPython of the function's runtime) into the layer's ``python/`` folder, which Lambda
puts on ``sys.path`` (``/opt/python``). ``ModelLayer`` ships ``layers/model/artifact`` as
``/opt/model`` (the ``WARMSTART_MODEL_DIR`` default).

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/packaging-layers.html (layer paths)
https://docs.aws.amazon.com/lambda/latest/dg/python-layers.html
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.constructs.bundling import (
    REPO_ROOT,
    CopyLocalBundling,
    PipLocalBundling,
    bundling_options,
    lambda_platforms,
    require_dir,
    staged_size_bytes,
)

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
        from infra.constructs.bundling import BundlingError

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


def function_code(source: Path = REPO_ROOT / "functions") -> tuple[lambda_.Code, CopyLocalBundling]:
    """Code asset holding the ``functions`` package (no tests, no caches) at the asset root.

    The handler string stays ``functions.agent.handler.handler``, as in local runs.
    """
    require_dir(source, "functions package", "run from a checkout of the repository")
    bundler = CopyLocalBundling(source=source, dest="functions")
    code = lambda_.Code.from_asset(
        str(source),
        asset_hash_type=cdk.AssetHashType.CUSTOM,
        asset_hash=bundler.fingerprint(),
        bundling=bundling_options(bundler),
    )
    return code, bundler
