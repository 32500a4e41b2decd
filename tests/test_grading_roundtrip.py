"""The nbgrader round trip on the real lessons, through scripts/grade.py (design brief §6): for every lesson in
solutions/, the solution notebook submitted as is gets full points, except the cells whose check needs hardware
this machine lacks (NotGradedHere, said in the notes), and the blank learner version gets 0.

The grading run is the `real_grading` fixture in conftest.py, shared with test_learner_versions.py.
"""

from __future__ import annotations

import pytest
from nbgrader_pipeline import graded_cells, lesson_slugs, row_for

SLUGS = lesson_slugs()
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("slug", SLUGS)
def test_solution_gets_full_points(real_grading, slug):
    points = graded_cells(real_grading.solutions / slug / f"{slug}.ipynb")
    row = row_for(real_grading.rows, "solved", slug)
    not_graded_here = [g for g in points if f"{g}: NotGradedHere" in row["notes"]]
    lost = {g: float(row[g]) for g in points if float(row[g]) != points[g] and g not in not_graded_here}
    assert not lost, f"{slug}: the solution lost points: {lost}; notes: {row['notes']}"
    assert all(float(row[g]) == 0 for g in not_graded_here)
    assert float(row["max"]) == sum(points.values()) == 10
    assert float(row["total"]) == 10 - sum(points[g] for g in not_graded_here)


@pytest.mark.parametrize("slug", SLUGS)
def test_learner_version_gets_zero(real_grading, slug):
    points = graded_cells(real_grading.solutions / slug / f"{slug}.ipynb")
    row = row_for(real_grading.rows, "blank", slug)
    assert {g: float(row[g]) for g in points} == dict.fromkeys(points, 0.0), row["notes"]
    assert float(row["total"]) == 0 and float(row["max"]) == 10
    assert all(f"{g}: " in row["notes"] for g in points)  # each lost cell says why


@pytest.mark.parametrize("slug", SLUGS)
def test_csv_agrees_with_the_gradebook(real_grading, slug):
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + str(real_grading.course / "gradebook.db")) as gradebook:
        for student in ("solved", "blank"):
            submission = gradebook.find_submission(slug, student)
            row = row_for(real_grading.rows, student, slug)
            assert (float(row["total"]), float(row["max"])) == (submission.score, submission.max_score)
