"""Helpers for the CDK tests: real synths of the real app (infra.app.build_cdk_app) with cdk.json's context."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def cdk_context(
    *,
    strategy: str | None = None,
    bundling: bool = False,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The context `npx cdk synth` would pass: cdk.json's, plus the CLI's asset metadata flag.

    ``overrides`` maps dotted paths under ``warmstart`` (``agents.lookup.memory_mb``,
    ``warmer.enabled``) to values.
    """
    context: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())["context"]
    context["aws:cdk:enable-asset-metadata"] = True  # the CLI sets it; SAM reads it
    if not bundling:
        context["aws:cdk:bundling-stacks"] = []
    if strategy is not None:
        context["warmstart:strategy"] = strategy
    for dotted, value in (overrides or {}).items():
        node = context["warmstart"]
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return context


@dataclass
class Synth:
    """One synthesized app: its template, cdk-nag validation report and files."""

    template: dict[str, Any]
    report: dict[str, Any]
    template_path: Path
    outdir: Path
    stack: Any
    error: str | None


def synth(outdir: Path, *, nag: bool = True, code_root: Path | None = None,
          **context_args: Any) -> Synth:
    """Build the real app (infra.app.build_cdk_app) with cdk.json's context and synthesize it.

    ``code_root``: where the agents' code folders are (default: the repository).
    """
    from infra.app import build_cdk_app

    app, stack, _ = build_cdk_app(cdk_context(**context_args), outdir=str(outdir), nag=nag,
                              code_root=code_root)
    error = None
    try:
        app.synth()
    except RuntimeError as exc:  # jsii error: cdk-nag findings fail the synth; the report says which
        error = str(exc)
    template_path = outdir / f"{stack.stack_name}.template.json"
    report_path = outdir / "validation-report.json"
    return Synth(
        template=json.loads(template_path.read_text()) if template_path.exists() else {},
        report=json.loads(report_path.read_text()) if report_path.exists() else {},
        template_path=template_path,
        outdir=outdir,
        stack=stack,
        error=error,
    )
