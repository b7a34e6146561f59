"""The `warmstart` command line.

Each sub-command lives in its own module under `infra/commands/` and exposes
``add_arguments(parser: argparse.ArgumentParser) -> None`` and ``run(args) -> int``.
Modules are imported only when their sub-command runs, so `warmstart --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

#: sub-command name -> (module under infra.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "new": ("new", "scaffold an agent (functions/NAME, a test) and register it in cdk.json"),
    "demo": ("demo", "run the main job: synthesize the stack and serve real requests"),
    "local": ("local", "run the local stack (emulator, gateway, moto server, GPU endpoint)"),
    "forecast": ("forecast", "forecast a trace function's load against what happened"),
    "plan": ("plan", "show the current warm plan with its reasons"),
    "replay": ("replay", "replay a production trace through the local stack"),
    "simulate": ("simulate", "simulate warm policies over the whole shipped trace"),
    "calibrate": ("calibrate", "measure init, restore and inference times on the emulator"),
}


def _available() -> dict[str, tuple[str, str]]:
    """Sub-commands whose module exists (later issues add the rest)."""
    found = {}
    for name, (module, help_text) in COMMANDS.items():
        if importlib.util.find_spec(f"infra.commands.{module}") is not None:
            found[name] = (module, help_text)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmstart", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in _available().items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module)
        importlib.import_module(f"infra.commands.{module}").add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = importlib.import_module(f"infra.commands.{args._module}")
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
