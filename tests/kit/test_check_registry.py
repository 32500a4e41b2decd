"""Each check is declared once (`@check(name, points=...)` in autograders/): the notebooks' check cells, the
judge and the grader read that declaration. The cells' nbgrader points must be the declared ones, each check cell
must call the check of its own grade id, and every declared check must be used by exactly one cell."""

from __future__ import annotations

import nbformat
import pytest
from nbgrader_pipeline import FIXTURE_SOLUTIONS, SOLUTIONS, lesson_slugs

from autograders import kit
from grading.judge import load_check, parse_check_cell
from grading.submission import grade_id, is_test_cell

LESSONS = [SOLUTIONS / slug for slug in lesson_slugs()] + [FIXTURE_SOLUTIONS / "00-fixture"]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_every_check_cell_calls_its_declared_check_with_its_points(lesson):
    nb = nbformat.read(lesson / f"{lesson.name}.ipynb", as_version=4)
    modules = set()
    for cell in nb.cells:
        if not is_test_cell(cell):
            continue
        call = parse_check_cell(cell.source)
        assert call is not None, f"{grade_id(cell)} calls no check"
        declared = load_check(call, str(lesson))
        modules.add(declared.module)
        assert declared.cell == grade_id(cell)
        assert declared.points == float(cell.metadata["nbgrader"]["points"]), grade_id(cell)
    declared_here = {c.cell for c in kit.REGISTRY.values() if c.module in modules}
    used = {grade_id(c) for c in nb.cells if is_test_cell(c)}
    assert declared_here == used, "a check is declared but no cell of the lesson runs it (or the reverse)"
