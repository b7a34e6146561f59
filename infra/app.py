"""CDK app entry point: ``npx cdk synth`` runs ``.venv/bin/python infra/app.py`` (see cdk.json).

Reads the ``warmstart`` context (and ``-c warmstart:strategy=NAME``), builds the stack and runs
cdk-nag's AwsSolutions checks as a CDK validation plugin: a finding that is not acknowledged with a
reason fails the synth.
"""

from __future__ import annotations

import sys
from pathlib import Path

from functions.runtime.contract import environment as names

_REPO = Path(__file__).resolve().parents[1]
# Run as a script, Python puts infra/ first on sys.path, where infra/constructs would shadow the
# `constructs` library: put the repository root there instead.
if sys.path and Path(sys.path[0]).resolve() == _REPO / "infra":
    sys.path[0] = str(_REPO)

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.config import (
    CONTEXT_KEY,
    STRATEGY_CONTEXT_KEY,
    StackConfigError,
    WarmstartConfig,
    check_cdk_json,
    config_from_context,
)
from infra.stacks.warmstart_stack import WarmstartStack


def build_cdk_app(
    context: Mapping[str, Any] | None = None,
    *,
    outdir: str | None = None,
    nag: bool = True,
    code_root: Path | None = None,
) -> tuple[cdk.App, WarmstartStack, WarmstartConfig]:
    """Build the app and its stack (without synthesizing).

    Parameters
    ----------
    context : Mapping or None
        CDK context; ``None`` takes it from the CDK CLI (``cdk.json`` and ``-c``).
    outdir : str or None
        Cloud assembly folder; ``None`` for the CLI's (or a temporary one).
    nag : bool
        Add cdk-nag AwsSolutions as a validation plugin.
    code_root : Path or None
        Folder the agents' ``code`` paths are relative to; ``None`` for the repository root.

    Raises
    ------
    infra.config.StackConfigError
        If the ``warmstart`` context is invalid (or, from the CLI, ``cdk.json`` declares an agent
        twice).

    Notes
    -----
    The config's warnings (e.g. the old single ``agent`` key) become warning annotations on the
    stack: ``cdk synth`` prints them, and ``--strict`` fails on them.
    """
    if context is None:  # from the CDK CLI: its context lost any duplicate agent key already
        check_cdk_json(Path.cwd() / "cdk.json")
    app = cdk.App(context=dict(context) if context is not None else None, outdir=outdir)
    raw = {CONTEXT_KEY: app.node.try_get_context(CONTEXT_KEY),
           STRATEGY_CONTEXT_KEY: app.node.try_get_context(STRATEGY_CONTEXT_KEY)}
    if raw[CONTEXT_KEY] is None:
        raw.pop(CONTEXT_KEY)
    config = config_from_context(raw)
    stack = WarmstartStack(
        app,
        config.stack_name,
        config=config,
        **({"code_root": code_root} if code_root is not None else {}),
        # Environment-agnostic on purpose: `cdk deploy` takes account and region from the AWS
        # profile (AWS_REGION); config.region (us-east-1) is the region the prices are for and the
        # default of tools that call AWS outside CloudFormation.
        description="warmstart: AI agents on AWS Lambda ("
        + ", ".join(f"{a.name} {a.strategy}" for a in config.agents.values()) + ")",
    )
    for warning in config.warnings:
        cdk.Annotations.of(stack).add_warning_v2("warmstart:config", warning)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack, config


def main() -> int:
    """Synthesize; an invalid ``warmstart`` config, an agent importing a module its code and
    layers lack, or a handler module whose routes cannot be read, is one line on stderr and
    exit 2 (the traceback only with ``WARMSTART_DEBUG=1``)."""
    import os

    from infra.constructs.declaration import DeclarationReadError
    from infra.constructs.layers import MissingDependencyError

    try:
        app, _, _ = build_cdk_app()
    except (StackConfigError, MissingDependencyError, DeclarationReadError) as exc:
        if os.environ.get(names.ENV_DEBUG) == "1":
            raise
        print(f"warmstart synth: error: {exc}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
