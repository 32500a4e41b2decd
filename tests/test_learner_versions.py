"""Learner versions fail, solutions pass (design brief §6), for every lesson in solutions/.

The verdicts are nbgrader's Validator's (`Validator(invert=True)` on the learner version: no graded cell may pass;
`Validator()` on the solution: every graded cell passes). Both notebooks are executed once, by the grading run that
test_grading_roundtrip.py also reads (the `real_grading` fixture in conftest.py, COURSE_GRADING=strict): a check
that needs hardware this machine lacks raises NotGradedHere there, so on the solution it is the one allowed failure.
The static checks of the learner version need no kernel.
"""

from __future__ import annotations

import nbformat
import pytest
from nbgrader_pipeline import (
    CODE_STUB,
    SOLUTIONS,
    build_lessons,
    graded_cells,
    lesson_slugs,
    validate_executed,
)

SLUGS = lesson_slugs()


@pytest.fixture(scope="module")
def learner_versions():
    return build_lessons.render(SOLUTIONS)


@pytest.mark.parametrize("slug", SLUGS)
def test_points_add_up_to_10(slug):
    points = graded_cells(SOLUTIONS / slug / f"{slug}.ipynb")
    assert points and sum(points.values()) == 10, points
    for grade_id in points:
        assert grade_id.endswith("_check"), f"{grade_id}: graded cells are named eK_slug_check (brief §3)"


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
        if meta.get("grade"):
            assert cell.metadata.get("editable") is False and cell.metadata.get("deletable") is False
            assert meta.get("checksum"), f"{meta['grade_id']} has no checksum"


@pytest.mark.slow
@pytest.mark.parametrize("slug", SLUGS)
def test_no_graded_cell_passes_on_the_learner_version(real_grading, slug):
    executed = real_grading.course / "autograded" / "blank" / slug / f"{slug}.ipynb"
    results = validate_executed(executed, invert=True)
    passed = [cell["source"].splitlines()[0] for cell in results.get("passed", [])]
    assert not passed, f"graded cells that pass on the learner version of {slug}: {passed}"
    assert results == {}, results  # nothing changed either


@pytest.mark.slow
@pytest.mark.parametrize("slug", SLUGS)
def test_every_graded_cell_passes_on_the_solution(real_grading, slug):
    executed = real_grading.course / "autograded" / "solved" / slug / f"{slug}.ipynb"
    results = validate_executed(executed)
    assert set(results) <= {"failed"}, results
    failed = [cell for cell in results.get("failed", []) if "NotGradedHere" not in cell["raw_error"]]
    assert not failed, "graded cells that fail on the solution of {}:\n{}".format(
        slug, "\n\n".join(f"{cell['source']}\n{cell['raw_error']}" for cell in failed)
    )
