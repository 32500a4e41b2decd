"""Whether a printed table lines up in a terminal or a notebook's output, where a Hangul syllable takes two columns.

A row padded by an f-string (`f"{name:<28}"`) is padded by characters: rows whose labels hold different numbers of
wide characters then stand ragged, though they line up character by character. `ragged_rows` finds such pairs of
consecutive rows in a cell's printed text; `memlab.notebook.pad` is the way to write one that lines up.
"""

from __future__ import annotations

import re

from memlab.notebook import display_width

#: a table cell: text without runs of two or more spaces (one space stays inside a cell)
CELL = re.compile(r"\S+(?: \S+)*")


def _edges(line: str) -> tuple[set[int], set[int], int]:
    """Where each table cell of `line` starts and ends, in characters and in display columns; how many cells. The
    row's end counts in display columns only: a right-aligned last column ends on one column (summary_table's
    values), but a left-aligned one ends where its text does, and two labels of as many characters ('매개변수',
    '(중복)') end on one character without being padded by characters."""
    spans = [m.span() for m in CELL.finditer(line)]
    edges = {p for span in spans for p in span}
    columns = {display_width(line[:p]) for p in edges}
    return edges - {spans[-1][1]} if spans else edges, columns, len(spans)


def ragged_rows(text: str) -> list[tuple[str, str]]:
    """Pairs of consecutive table rows of `text` (two or more cells each, wide characters in one of them) that share
    more cell edges counted in characters than in display columns: aligned for the program, not for the eye."""
    lines = text.splitlines()
    found = []
    for a, b in zip(lines, lines[1:]):
        (chars_a, cols_a, cells_a), (chars_b, cols_b, cells_b) = _edges(a), _edges(b)
        wide = display_width(a) > len(a) or display_width(b) > len(b)  # a character that takes two columns
        if min(cells_a, cells_b) < 2 or not wide:
            continue
        if len(chars_a & chars_b) > len(cols_a & cols_b):
            found.append((a, b))
    return found
