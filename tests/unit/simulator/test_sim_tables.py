"""The evaluation tools' one table renderer (`warmers.simulator.tables`)."""

from __future__ import annotations

import pytest

from warmers.simulator.tables import fixed_width, markdown


def test_fixed_width_left_aligns_labels_right_aligns_numbers_and_underlines_the_header() -> None:
    assert fixed_width([("policy", "cold"), ("warmstart", "3"), ("none", "1,204")]).split("\n") == [
        "policy      cold",
        "---------  -----",
        "warmstart      3",
        "none       1,204",
    ]


def test_markdown_aligns_the_first_column_left_and_the_others_right() -> None:
    assert markdown(["", "a", "b"], [["cold starts", "1", "22"]]).split("\n") == [
        "|  | a | b |",
        "|---|---:|---:|",
        "| cold starts | 1 | 22 |",
    ]


def test_a_row_of_another_width_than_the_header_is_refused() -> None:
    with pytest.raises(ValueError, match="must have 2 cells"):
        fixed_width([("a", "b"), ("only one",)])
    with pytest.raises(ValueError, match="must have 2 cells"):
        markdown(["a", "b"], [["1", "2", "3"]])
    with pytest.raises(ValueError, match="header row"):
        fixed_width([])
