"""The `warmstart` command line.

Each sub-command lives in its own module under `infra/commands/` and exposes
``add_arguments(parser: argparse.ArgumentParser) -> None`` and ``run(args) -> int``.
Modules are imported only when their sub-command runs, so `warmstart --help` stays fast.

Exit codes, the same for every sub-command: 0 success, 2 usage error (a flag, an input, the
config), 1 failure. Errors are one line on stderr; ``--debug`` shows the traceback of an
unexpected one. See ``infra/commands/common.py``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from functions.runtime.contract import environment as names
from infra.commands.common import CliParser, command

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


def version() -> str:
    """The installed package's version (``pyproject.toml``), else ``unknown``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    try:
        return _version("warmstart")
    except PackageNotFoundError:
        return "unknown"


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--debug``, ``--quiet``, ``--out-dir``: before the sub-command, or after it (then they
    leave the top-level value alone unless given)."""
    keep = {} if top else {"default": argparse.SUPPRESS}
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an unexpected error (default: off)",
                        **keep)  # type: ignore[arg-type]
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars or progress lines on stderr (default: off)",
                        **keep)  # type: ignore[arg-type]
    parser.add_argument("--out-dir", default=None if top else argparse.SUPPRESS, metavar="DIR",
                        help="directory of every output (reports, plots, JSON, calibration) "
                             f"(default: ${names.ENV_OUT_DIR}, else out)")


def _sub_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Parsers of the nested actions of ``parser`` (``local up``)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += list(dict.fromkeys(action.choices.values()))
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="warmstart", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"warmstart {version()}")
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in _available().items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module, _prog=f"warmstart {name}")
        importlib.import_module(f"infra.commands.{module}").add_arguments(sub_parser)
        nested = _sub_parsers(sub_parser)
        for parser_ in nested:
            parser_.set_defaults(_prog=parser_.prog)
            _add_common(parser_, top=False)
        if not nested:
            _add_common(sub_parser, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command; returns its exit code (0, 1 or 2)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) and usage errors (2, already printed)
        return exc.code if isinstance(exc.code, int) else 2
    prog = getattr(args, "_prog", "warmstart")
    module = importlib.import_module(f"infra.commands.{args._module}")
    try:
        return command(prog)(module.run)(args)  # UsageError -> 2, CommandError -> 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            return int(exc.code or 0)
        print(f"{prog}: error: {exc.code}", file=sys.stderr)
        return 1
    except Exception as exc:
        if args.debug:
            raise
        message = " ".join(str(exc).split()) or "(no message)"
        print(f"{prog}: error: {type(exc).__name__}: {message} (run `warmstart --debug "
              f"{prog.removeprefix('warmstart ')} ...` for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
