"""cdk-nag (AwsSolutions) acknowledgements, made next to the resources they cover.

cdk-nag 3.x runs as a CDK validation plugin (``Validations.of(app).add_plugins(AwsSolutionsChecks(app))``,
see ``infra/app.py``); a finding fails the synth unless the construct acknowledges it with a reason.
Every acknowledgement in this project goes through :func:`acknowledge`, which refuses an empty
reason, so ``grep -rn "acknowledge(" infra/constructs`` lists them all.

References
----------
https://github.com/cdklabs/cdk-nag/blob/main/RULES.md
"""

from __future__ import annotations

from typing import Final

import aws_cdk as cdk
from constructs import IConstruct

#: Rule ids as cdk-nag 3 reports them (``<pack>::<rule>``).
PACK: Final = "AwsSolutions"


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge AwsSolutions finding ``rule`` (e.g. ``"AwsSolutions-L1"``) on ``scope``.

    Raises
    ------
    ValueError
        If ``reason`` is shorter than 40 characters (a reason must say why, not just "ok").
    """
    if len(reason.strip()) < 40:
        raise ValueError(f"cdk-nag acknowledgement of {rule} on {scope.node.path} needs a written reason")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"{PACK}::{rule}", reason=reason))
