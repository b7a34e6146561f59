"""Text tables of the evaluation tools' results: one renderer for the simulator's report
(:mod:`warmers.simulator.report`) and the replay's (:mod:`infra.replay.summary`,
:mod:`infra.replay.report`), which each choose their own rows.

The first column holds labels (left-aligned), the others numbers (right-aligned).
"""

from __future__ import annotations

from collections.abc import Sequence


def fixed_width(rows: Sequence[Sequence[str]]) -> str:
    """Fixed-width text table for the terminal: ``rows[0]`` is the header, underlined with
    dashes; columns are two spaces apart.

    Parameters
    ----------
    rows : sequence of sequences of str, shape (1 + n_rows, n_columns)
        The header, then the body rows, all with the same number of cells.

    Raises
    ------
    ValueError
        No header row, or a row with another number of cells than the header.
    """
    if not rows:
        raise ValueError("a table needs at least its header row")
    n = len(rows[0])
    if any(len(r) != n for r in rows):
        raise ValueError(f"every row of the table must have {n} cells, as its header has")
    widths = [max(len(r[c]) for r in rows) for c in range(n)]
    lines = []
    for k, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """GitHub-flavoured Markdown table: the first column left-aligned, the others right.

    Parameters
    ----------
    header : sequence of str, shape (n_columns,)
    rows : sequence of sequences of str, shape (n_rows, n_columns)

    Raises
    ------
    ValueError
        A row with another number of cells than the header.
    """
    if any(len(r) != len(header) for r in rows):
        raise ValueError(f"every row of the table must have {len(header)} cells, as its "
                         "header has")
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    out.extend("| " + " | ".join(r) + " |" for r in rows)
    return "\n".join(out)
