"""Learner versions fail, solutions pass, for every lesson in solutions/.

The verdicts are nbgrader's Validator's (`Validator(invert=True)` on the learner version: no graded cell may pass;
`Validator()` on the solution: every graded cell passes). Both notebooks are executed by the grading run that
test_grading_roundtrip.py also reads (the `real_grading` fixture in conftest.py, COURSE_GRADING=strict; the full tier
grades the English solution, CI's drift check the Korean solution and blank): a check that needs hardware this
machine lacks raises NotGradedHere there, so on the solution it is the one allowed failure.
The static checks of the learner version need no kernel.
"""

from __future__ import annotations

import nbformat
import pytest
from nbgrader_pipeline import (
    CODE_STUB,
    SOLUTIONS,
    build_lessons,
    lesson_slugs,
    validate_executed,
)

SLUGS = lesson_slugs()
#: what ClearSolutions puts in place of a written answer (nbgrader's default text_stub)
TEXT_STUB = "YOUR ANSWER HERE"


@pytest.fixture(scope="module")
def learner_versions():
    return build_lessons.render(SOLUTIONS)


def graded(slug: str) -> tuple[dict[str, float], dict[str, float]]:
    """({grade_id: points} of the autograded cells, {grade_id: points} of the manually graded answers) of a lesson's
    solution notebook, in order. Autograded: a code cell with `grade` and not `solution` (a locked check cell);
    manually graded answer: a markdown cell with `grade` and `solution` (nbgrader's "Manually graded answer")."""
    auto, manual = {}, {}
    for cell in nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            continue
        kind = (cell.cell_type, bool(meta.get("solution")))
        assert kind in {("code", False), ("markdown", True)}, (
            f"{meta.get('grade_id')}: a graded cell is a check (code, not a solution) or a written answer "
            f"(markdown, a solution), not a {cell.cell_type} cell with solution={meta.get('solution')}"
        )
        (auto if kind == ("code", False) else manual)[meta["grade_id"]] = float(meta.get("points", 0))
    return auto, manual


@pytest.mark.parametrize("slug", SLUGS)
def test_points_add_up_to_10(slug):
    """10 autograded points in check cells named eK_slug_check, and one written answer of 2 points graded by hand
    (docs/learn.md, "What JupyterLab shows you")."""
    auto, manual = graded(slug)
    assert auto and sum(auto.values()) == 10, auto
    for grade_id in auto:
        assert grade_id.endswith("_check"), f"{grade_id}: graded cells are named eK_slug_check (brief §3)"
    assert len(manual) == 1, f"{slug}: one manually graded answer cell, found {manual}"
    [(grade_id, points)] = manual.items()
    assert points == 2, f"{grade_id}: a written answer is worth 2 points, not {points:g}"
    assert grade_id.startswith("w"), f"{grade_id}: written answers are named wK_slug"
    cells = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4).cells
    index = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    question = cells[index - 1]
    assert question.cell_type == "markdown" and "nbgrader" not in question.metadata
    assert question.source.startswith("### Question ") and "(2 points, graded by hand)" in question.source, (
        f"{grade_id}: the cell above a written answer asks the question: '### Question N.k — title (2 points, "
        "graded by hand)'"
    )
    assert "**Rubric**" in cells[index].source, f"{grade_id}: the solution is a model answer and a **Rubric**"


@pytest.mark.parametrize("slug", SLUGS)
def test_learner_version_hides_the_solutions(learner_versions, slug):
    text = learner_versions[f"{slug}/{slug}.ipynb"].decode()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN MARK SCHEME"):
        assert marker not in text
    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
        if meta.get("solution") and cell.cell_type == "code":
            assert all(line in cell.source for line in CODE_STUB.split("\n")), (
                f"{meta['grade_id']} has no stub"
            )
        # a written answer: the model answer and its rubric are gone
        if meta.get("solution") and cell.cell_type == "markdown":
            assert cell.source == TEXT_STUB, f"{meta['grade_id']} shows more than {TEXT_STUB!r}"
        if meta.get("grade") and meta.get("solution"):  # a written answer: the learner writes in it
            assert cell.metadata.get("deletable") is False and cell.metadata.get("editable") is not False
            assert meta.get("checksum"), f"{meta['grade_id']} has no checksum"
        elif meta.get("grade"):  # a check: locked
            assert cell.metadata.get("editable") is False and cell.metadata.get("deletable") is False
            assert meta.get("checksum"), f"{meta['grade_id']} has no checksum"


@pytest.mark.slow
@pytest.mark.parametrize("slug", SLUGS)
def test_no_graded_cell_passes_on_the_learner_version(real_grading, slug):
    executed = real_grading.autograded(real_grading.student("blank"), slug)
    results = validate_executed(executed, invert=True)
    passed = [cell["source"].splitlines()[0] for cell in results.get("passed", [])]
    assert not passed, f"graded cells that pass on the learner version of {slug}: {passed}"
    assert results == {}, results  # nothing changed either


@pytest.mark.slow
@pytest.mark.parametrize("slug", SLUGS)
def test_every_graded_cell_passes_on_the_solution(real_grading, slug):
    executed = real_grading.autograded(real_grading.student("solved"), slug)
    results = validate_executed(executed)
    assert set(results) <= {"failed"}, results
    failed = [cell for cell in results.get("failed", []) if "NotGradedHere" not in cell["raw_error"]]
    assert not failed, "graded cells that fail on the solution of {}:\n{}".format(
        slug, "\n\n".join(f"{cell['source']}\n{cell['raw_error']}" for cell in failed)
    )
