"""`warmstart demo` output places: out/demo by default, bench/results only with --publish."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from infra.commands import demo


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(argv)


def test_outputs_go_to_out_demo_and_are_published_only_on_request() -> None:
    args = _parse([])
    assert args.out is None and args.publish is False  # run(): OUT_DIR/demo, OUT_DIR = out
    args = _parse(["--out", "elsewhere", "--publish"])
    assert args.out == Path("elsewhere") and args.publish is True


def test_publish_copies_the_report_and_table(tmp_path: Path) -> None:
    out, published = tmp_path / "out", tmp_path / "bench" / "results"
    out.mkdir()
    (out / demo.REPORT_NAME).write_text("<html>report</html>", encoding="utf-8")
    (out / demo.TABLE_NAME).write_text("| a |", encoding="utf-8")
    (out / "logs").mkdir()
    copies = demo.publish(out, published)
    assert sorted(p.name for p in copies) == sorted([demo.REPORT_NAME, demo.TABLE_NAME])
    assert (published / demo.TABLE_NAME).read_text(encoding="utf-8") == "| a |"
    assert sorted(p.name for p in published.iterdir()) == sorted([demo.REPORT_NAME,
                                                                   demo.TABLE_NAME])


def test_publish_without_results_fails_and_copies_nothing_partial(tmp_path: Path) -> None:
    out, published = tmp_path / "out", tmp_path / "published"
    out.mkdir()
    (out / demo.REPORT_NAME).write_text("x", encoding="utf-8")  # the table is missing
    with pytest.raises(OSError):
        demo.publish(out, published)
    assert not published.exists() or not any(published.iterdir())


def test_bad_flags_and_a_missing_stack_are_one_line_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from infra.cli import main

    assert main(["demo", "--minutes", "0"]) == 2
    assert capsys.readouterr().err == ("warmstart demo: error: --minutes must be a positive "
                                       "integer, got 0 (see warmstart demo --help)\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["demo", "--no-synth", "--cdk-out", str(empty), "--out", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err == (f"warmstart demo: error: no *.template.json in {empty}; "
                                       "run `npx cdk synth` first\n")
