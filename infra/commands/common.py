"""What every ``warmstart`` sub-command shares: errors and exit codes, flag checks, outputs.

Exit codes (the same for every sub-command):

- ``0``: success.
- ``2``: usage error: a flag value, a missing or unreadable input, an unknown hash or agent,
  an invalid ``cdk.json``; found before any expensive work. Raise `UsageError`.
- ``1``: the command ran and failed (a service did not start, no AWS credentials, a run
  error). Raise `CommandError`.

Errors are one line on stderr, ``warmstart <command>: error: <message>``, naming the flag and
the value; ``warmstart --debug ...`` shows the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from functions.runtime.contract import environment as names

#: Default directory of every output (reports, plots, JSON, calibration); ``--out-dir`` or
#: ``WARMSTART_OUT_DIR`` move it.
DEFAULT_OUT_DIR = Path("out")


class UsageError(ValueError):
    """The command line is wrong (exit 2); the message names the flag and the value."""


class CommandError(RuntimeError):
    """The command ran and failed (exit 1); the message says what to do."""


def command(prog: str) -> Callable[[Callable[[argparse.Namespace], int]],
                                   Callable[[argparse.Namespace], int]]:
    """Decorate a sub-command's ``run(args)``: a `UsageError` becomes one line on stderr and
    exit 2, a `CommandError` one line and exit 1 (``prog``: ``warmstart forecast``)."""
    def wrap(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(run)
        def wrapped(args: argparse.Namespace) -> int:
            try:
                return int(run(args) or 0)
            except UsageError as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return 2
            except CommandError as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return 1
        return wrapped
    return wrap


# ------------------------------------------------------------------------------------------
# argparse: one-line errors, defaults in --help

class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every option's default (unless its help already says it); keeps the layout of
    descriptions and epilogs (the ``--json`` schema tables)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        if "default" in help_text.lower() or action.default is argparse.SUPPRESS:
            return help_text
        if action.required:
            return f"{help_text} (required)"
        if action.option_strings and isinstance(action, (argparse._StoreTrueAction,
                                                         argparse._StoreFalseAction)):
            return f"{help_text} (default: off)" if help_text else "(default: off)"
        if action.option_strings and action.default is None:
            return f"{help_text} (default: none)"
        if action.option_strings and isinstance(action.default, list) and not action.default:
            return f"{help_text} (default: none)"
        return super()._get_help_string(action)


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (exit 2) and whose help shows the
    defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        # "argument --lead-min: must be ..." -> "--lead-min must be ..."
        if message.startswith("argument "):
            flag, sep, rest = message[len("argument "):].partition(": ")
            if sep and rest.startswith(("must ", "is ", "needs ")):
                message = f"{flag.split('/')[-1]} {rest}"
            elif sep:
                message = f"{flag.split('/')[-1]}: {rest}"
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def _number(raw: str, kind: type, what: str) -> Any:
    try:
        value = kind(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {raw}") from None
    if kind is float and math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be {what}, got {raw}")
    return value


def positive_int(raw: str) -> int:
    """argparse type: an integer > 0 (``--lead-min must be a positive integer, got -3``)."""
    value = _number(raw, int, "a positive integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {raw}")
    return int(value)


def non_negative_int(raw: str) -> int:
    """argparse type: an integer >= 0."""
    value = _number(raw, int, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {raw}")
    return int(value)


def positive_float(raw: str) -> float:
    """argparse type: a number > 0 (``--time-scale must be a positive number, got 0``)."""
    value = _number(raw, float, "a positive number")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {raw}")
    return float(value)


def non_negative_float(raw: str) -> float:
    """argparse type: a number >= 0."""
    value = _number(raw, float, "a number >= 0")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {raw}")
    return float(value)


def probability(raw: str) -> float:
    """argparse type: a number strictly between 0 and 1 (a quantile)."""
    value = _number(raw, float, "a number between 0 and 1")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1 (exclusive), got {raw}")
    return float(value)


def port(raw: str) -> int:
    """argparse type: a TCP port, 0 (any free one) to 65535."""
    value = _number(raw, int, "a port number from 0 to 65535")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {raw}")
    return int(value)


def existing_file(raw: str) -> Path:
    """argparse type: a file that exists (``--cdk-json is not a file, got missing.json``)."""
    path = Path(raw)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"is not a file, got {raw}")
    return path


def output_file(raw: str) -> Path:
    """argparse type: a file to write whose folder exists (nothing is created for it)."""
    path = Path(raw)
    parent = path.parent
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"is a directory, not a file, got {raw}")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"is in a folder that does not exist, got {raw} "
                                         f"(create {parent} first)")
    return path


# ------------------------------------------------------------------------------------------
# shared look-ups and outputs

def pick_hash(candidates: Iterable[str], wanted: str, *, flag: str = "--function") -> str:
    """The one hash in ``candidates`` equal to ``wanted`` or starting with it.

    Raises
    ------
    UsageError
        No hash or several hashes match: ``--function 6ebf: matches 3 functions in the trace
        (6ebf3ebd..., ...); give more of the hash``.
    """
    names = list(candidates)
    if wanted in names:
        return wanted
    matches = [n for n in names if n.startswith(wanted)] if wanted else []
    if not matches:
        raise UsageError(f"{flag} {wanted}: no function in the trace has this hash or prefix "
                         f"({len(names)} functions)")
    if len(matches) > 1:
        shown = ", ".join(m[:12] + "..." for m in matches[:3])
        raise UsageError(f"{flag} {wanted}: matches {len(matches)} functions in the trace "
                         f"({shown}); give more of the hash")
    return matches[0]


def out_dir(args: argparse.Namespace) -> Path:
    """The output directory: ``--out-dir``, else ``$WARMSTART_OUT_DIR``, else ``out``."""
    given = getattr(args, "out_dir", None)
    if given is not None:
        return Path(given)
    return Path(os.environ.get(names.ENV_OUT_DIR) or DEFAULT_OUT_DIR)


def print_json(document: Any, stream: Any = None) -> None:
    """Write ``document`` as one JSON document (indented, sorted keys kept as built)."""
    (stream or sys.stdout).write(json.dumps(document, indent=2, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def finite(value: float) -> float | None:
    """``value`` for JSON, with NaN / infinity as ``None`` (``null``)."""
    value = float(value)
    return value if math.isfinite(value) else None


def say(args: argparse.Namespace, message: str) -> None:
    """A progress or status line on stderr, unless ``--quiet``."""
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr, flush=True)
