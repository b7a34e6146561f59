"""``warmstart`` conventions shared by every sub-command (``infra/cli.py``): ``--version``,
defaults in ``--help``, one-line errors with the flag and the value, exit codes 0 / 2 / 1, the
traceback only with ``--debug``."""

from __future__ import annotations

import argparse
import types
from pathlib import Path

import pytest

from infra import cli
from infra.cli import build_parser, main
from infra.commands.common import CliParser

TRACE = str(Path(__file__).resolve().parents[4] / "tests/data/traces/azure2019_fullday_realhash"
            / "invocations.csv")
#: Every sub-command, as it is invoked (``local up`` is nested).
SUBCOMMANDS = [["demo"], ["new"], ["local", "up"], ["forecast"], ["plan"], ["replay"],
               ["simulate"], ["calibrate"]]


def _parser_of(path: list[str]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"warmstart {cli.version()}\n"
    assert cli.version() == "0.1.0"


def test_every_subcommand_is_covered() -> None:
    assert sorted(cli._available()) == sorted({p[0] for p in SUBCOMMANDS})


@pytest.mark.parametrize("path", SUBCOMMANDS, ids=" ".join)
def test_help_shows_the_default_of_every_option(path: list[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser_of(path)
    assert isinstance(parser, CliParser)
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        shown = formatter._expand_help(action) if action.help else ""
        assert "default" in shown.lower() or "(required)" in shown, (path, action.option_strings,
                                                                      shown)
    assert main([*path, "--help"]) == 0
    assert "default" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["forecast", "--trace", TRACE, "--function", "f", "--lead-min", "-3"],
     "warmstart forecast: error: --lead-min must be a positive integer, got -3"),
    (["replay", "--trace", TRACE, "--function", "f", "--time-scale", "0"],
     "warmstart replay: error: --time-scale must be a positive number, got 0"),
    (["demo", "--time-scale", "-1"],
     "warmstart demo: error: --time-scale must be a positive number, got -1"),
    (["local", "up", "--time-scale", "0"],
     "warmstart local up: error: --time-scale must be a positive number, got 0"),
    (["simulate", "--jobs", "0"], "warmstart simulate: error: --jobs must be a positive integer, got 0"),
    (["simulate", "--minutes", "-5"],
     "warmstart simulate: error: --minutes must be an integer >= 0, got -5"),
    (["calibrate", "--warm", "0"], "warmstart calibrate: error: --warm must be a positive integer, got 0"),
    (["plan", "--trace", TRACE, "--top", "-3"],
     "warmstart plan: error: --top must be a positive integer, got -3"),
    (["plan", "--trace", TRACE, "--top", "many"],
     "warmstart plan: error: --top must be a positive integer, got many"),
    (["forecast", "--trace", TRACE, "--function", "f", "--quantile", "1.5"],
     "warmstart forecast: error: --quantile must be a number between 0 and 1 (exclusive), got 1.5"),
    (["new"], "warmstart new: error: the following arguments are required: name"),
])
def test_usage_errors_are_one_line_with_the_flag_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    prog = message.split(": error:")[0]
    assert err == f"{message} (see {prog} --help)\n"


def test_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warmstart: error: COMMAND: invalid choice: 'deploy' (choose from 'new', ")
    assert err.count("\n") == 1


def _boom_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``warmstart simulate`` fail with an unexpected exception."""
    real = cli.importlib.import_module

    def run(args: argparse.Namespace) -> int:
        raise KeyError("calibration")

    def fake(name: str):  # type: ignore[no-untyped-def]
        module = real(name)
        if name == "infra.commands.simulate":
            return types.SimpleNamespace(add_arguments=module.add_arguments, run=run)
        return module

    monkeypatch.setattr(cli.importlib, "import_module", fake)


def test_an_unexpected_error_is_one_line_and_exit_1_without_debug(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _boom_module(monkeypatch)
    assert main(["simulate"]) == 1
    assert capsys.readouterr().err == (
        "warmstart simulate: error: KeyError: 'calibration' (run `warmstart --debug simulate "
        "...` for the traceback)\n")


@pytest.mark.parametrize("argv", [["--debug", "simulate"], ["simulate", "--debug"]])
def test_debug_shows_the_traceback(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _boom_module(monkeypatch)
    with pytest.raises(KeyError, match="calibration"):
        main(argv)


def test_common_options_after_the_subcommand_keep_the_top_level_ones() -> None:
    args = build_parser().parse_args(["--out-dir", "elsewhere", "--quiet", "simulate"])
    assert args.out_dir == "elsewhere" and args.quiet is True and args.debug is False
    args = build_parser().parse_args(["simulate", "--out-dir", "x", "--quiet"])
    assert args.out_dir == "x" and args.quiet is True
    args = build_parser().parse_args(["local", "up", "--quiet"])
    assert args.quiet is True and args.out_dir is None
