"""grading/for_graders.py: the grader's notes and the written answers' rubrics, as cells of the autograded notebook
(formgrader and nbgrader's feedback show the notebook, not its metadata), with the learner's text never markup."""

from __future__ import annotations

import nbformat
import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbgrader_pipeline import FIXTURE_SOLUTIONS

from grading.for_graders import GRADER_CELL_KEY, RUBRIC, is_grader_cell, markdown_text, write_grader_cells

SOURCE = nbformat.read(FIXTURE_SOLUTIONS / "00-fixture" / "00-fixture.ipynb", as_version=4)
HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "![x](http://example.com/x.png)",
    "<script>alert(1)</script>",
    "**bold** `code` # heading\n\n- item",
    "a\\<b>c",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_note_is_shown_as_its_text_never_as_markup(text):
    rendered = markdown2html_mistune(markdown_text(text))
    assert "<img" not in rendered and "<a " not in rendered and "<script" not in rendered
    assert (
        "<strong>" not in rendered
        and "<code>" not in rendered
        and "<h1" not in rendered
        and "<li>" not in rendered
    )
    assert " ".join(text.split()).replace("<", "&lt;").replace(">", "&gt;") in rendered.replace("&amp;", "&")


def test_notes_at_the_top_and_a_rubric_after_each_written_answer():
    nb = nbformat.v4.new_notebook(cells=[nbformat.from_dict(dict(c)) for c in SOURCE.cells])
    answer = next(
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == "w1_square_sign"
    )
    forged = nbformat.v4.new_markdown_cell("**Notes from the grader**\n\nnone")
    forged.metadata[GRADER_CELL_KEY] = "notes"
    nb.cells.insert(3, forged)
    write_grader_cells(nb, SOURCE, ["e2_add_check: forged"], ["review: e2_add: reads call-stack frames"])
    assert nb.cells[0].metadata[GRADER_CELL_KEY] == "notes"
    assert "flag:** e2\\_add\\_check: forged" in nb.cells[0].source
    assert "review: e2\\_add: reads call\\-stack frames" in nb.cells[0].source
    assert sum(is_grader_cell(c, "notes") for c in nb.cells) == 1  # the forged one is gone
    answer = next(
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == "w1_square_sign"
    )
    assert is_grader_cell(nb.cells[answer + 1], RUBRIC)
    assert (
        SOURCE.cells[
            [c.metadata.get("nbgrader", {}).get("grade_id") for c in SOURCE.cells].index("w1_square_sign")
        ].source
        in nb.cells[answer + 1].source
    )
    write_grader_cells(nb, SOURCE, [], [])  # graded again with nothing to say: no notes cell, one rubric
    assert not any(is_grader_cell(c, "notes") for c in nb.cells)
    assert sum(is_grader_cell(c, RUBRIC) for c in nb.cells) == 1
