"""What a human grader reads in the autograded notebook, where formgrader and nbgrader's feedback show it.

nbgrader's formgrader and `generate_feedback` render the autograded notebook, nothing else: notes kept in its
metadata (`grading.autograde.FINDINGS_KEY`, which grade.py's CSV reads) are seen by nobody who grades with
nbgrader alone. So the judge also writes them as cells:

- a *notes* cell at the top: the flags (evidence of tampering) and notes (`review:` lines, check cells put back,
  marks changed in the notebook). It stays in the feedback: it is about the learner's own notebook.
- after each written answer (a manually graded cell), a *rubric* cell: the course's model answer and rubric from the
  lesson's source, for the grader. `DropRubrics` (in nbgrader's GenerateFeedback, nbgrader_config.py) takes these out
  of the feedback.

Each is marked by `GRADER_CELL_KEY` in its metadata; cells so marked in a submission are dropped before these are
written. Text the learner's code controls is escaped, so that a note cannot become markup (a link, an image, HTML)
in formgrader's page.
"""

from __future__ import annotations

import html
import re

import nbformat

from grading.i18n import _
from grading.submission import grade_id

GRADER_CELL_KEY = "memlab_for_graders"
NOTES, RUBRIC = "notes", "rubric"
#: Markdown's ASCII punctuation, each escaped with a backslash (CommonMark: any of them may be)
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def markdown_text(text: str) -> str:
    """`text` shown as itself in Markdown: HTML escaped, Markdown's punctuation backslash-escaped, slashes as
    entities (nbconvert's renderer turns a bare http://... into a link), on one line."""
    text = html.escape(" ".join(str(text).split()), quote=False)
    return MARKDOWN_PUNCTUATION.sub(r"\\\1", text).replace("/", "&#47;")


def grader_cell(kind: str, source: str):
    cell = nbformat.v4.new_markdown_cell(source)
    cell.metadata[GRADER_CELL_KEY] = kind
    cell.id = f"memlab-{kind}-{len(source)}"[:64]
    return cell


def is_grader_cell(cell, kind: str | None = None) -> bool:
    mark = cell.get("metadata", {}).get(GRADER_CELL_KEY)
    return mark is not None and (kind is None or mark == kind)


def notes_cell(flags: list[str], notes: list[str]):
    """The notes cell, or None when there is nothing to say."""
    if not flags and not notes:
        return None
    heading, flag = (
        _("Notes from the grader"),
        _("flag"),
    )  # outside the f-strings, where gettext's extractor sees them
    lines = [f"**{heading}**", ""]
    lines += [f"- **{flag}:** {markdown_text(f)}" for f in flags]
    lines += [f"- {markdown_text(n)}" for n in notes]
    return grader_cell(NOTES, "\n".join(lines))


def rubric_cell(source_cell):
    heading = _("The course's model answer and rubric, for the grader (left out of the feedback)")
    return grader_cell(RUBRIC, f"**{heading}**\n\n---\n\n{source_cell.source}\n\n---")


def manually_graded(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader") or {}
    return bool(meta.get("grade")) and bool(meta.get("solution"))


def write_grader_cells(nb, source, flags: list[str], notes: list[str]) -> None:
    """The notes cell at the top of `nb` and a rubric cell after each written answer (from `source`, the lesson's
    own notebook); any cell already marked as the grader's is dropped first."""
    nb.cells = [c for c in nb.cells if not is_grader_cell(c)]
    rubrics = {grade_id(c): c for c in (source.cells if source is not None else []) if manually_graded(c)}
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if manually_graded(cell) and grade_id(cell) in rubrics:
            cells.append(rubric_cell(rubrics[grade_id(cell)]))
    notes_at_top = notes_cell(flags, notes)
    nb.cells = ([notes_at_top] if notes_at_top else []) + cells
