"""The nbgrader round trip on the real lessons, through scripts/grade.py: for every lesson in
solutions/, the solution notebook submitted as is gets every autograded point, except the cells whose check needs
hardware this machine lacks (NotGradedHere, said in the notes), and its written answer waits for a human; the blank
learner version gets 0 and "no answer written". The same holds in the Korean edition (ko/solutions/, ko/lessons/),
graded against its own sources in the same run, with the same CSV columns, and its verdicts are in Korean.

The grading run is the `real_grading` fixture in conftest.py, shared with test_learner_versions.py. The full tier
grades the English solution (demonstrations left out, as an instructor's default run); CI's drift check grades the
Korean solution (every cell run) and the Korean blank under the newest releases (conftest.py, `GRADED`).
"""

from __future__ import annotations

import re

import nbformat
import pytest
from nbgrader_pipeline import graded_cells, lesson_slugs, row_for

from grading.demonstrations import SKIPPED, tagged_sources
from grading.submission import grade_id, is_test_cell

SLUGS = lesson_slugs()
pytestmark = pytest.mark.slow
SOLVED = ("solved", "ko-solved")
BLANK = ("blank", "ko-blank")
HANGUL = re.compile("[가-힣]")
HANDS_IN_A_RUN, COPY_CHECK = "08-capstone-7b-lora", "e3_graded_run_check"  # lesson 08: its run and its check


def said(real_grading, student: str, message: str, **fields) -> str:
    """A note of the grader's own as it reads in `student`'s row: in the language of the edition graded against."""
    from grading.i18n import _

    return _(message, real_grading.language(student)).format(**fields)


def _split(slug, solutions):
    points = graded_cells(solutions / slug / f"{slug}.ipynb")
    auto = {g: p for g, p in points.items() if g.endswith("_check")}
    manual = {g: p for g, p in points.items() if g not in auto}
    return auto, manual


@pytest.mark.parametrize("student", SOLVED)
@pytest.mark.parametrize("slug", SLUGS)
def test_solution_gets_full_points(real_grading, slug, student):
    auto, manual = _split(slug, real_grading.solutions)
    row = real_grading.row(student, slug)
    not_graded_here = [g for g in auto if f"{g}: NotGradedHere" in row["notes"]]
    lost = {g: float(row[g]) for g in auto if float(row[g]) != auto[g] and g not in not_graded_here}
    assert not lost, f"{slug}: the solution lost points: {lost}; notes: {row['notes']}"
    assert all(float(row[g]) == 0 for g in not_graded_here)
    assert sum(auto.values()) == 10 and sum(manual.values()) == 2
    assert float(row["max"]) == 12 and float(row["needs_manual"]) == 2
    assert all(
        row[g] == ""
        and said(real_grading, student, "{grade_id}: needs manual grading", grade_id=g) in row["notes"]
        for g in manual
    )
    assert float(row["total"]) == 10 - sum(auto[g] for g in not_graded_here)
    # the course's own solution trips no tampering detector; lesson 08's graded run, handed in by both solved
    # students (the same fixture run), is flagged as the same work in each edition: copy detection spans editions
    other = next((s for s in SOLVED if s != student and s in real_grading.graded), None)
    copied = said(
        real_grading,
        student,
        "{grade_id}: the same work as {students} (what it learned, within {tolerance}: copied, or the same code run "
        "with the same seeds); no submission time tells who handed it in first",
        grade_id=COPY_CHECK,
        students=other,
        tolerance="0.001",
    )
    assert row["flags"] == (copied if slug == HANDS_IN_A_RUN and other else ""), row["flags"]


@pytest.mark.parametrize("student", SOLVED)
@pytest.mark.parametrize("slug", SLUGS)
def test_every_cell_of_the_solution_ran_without_an_error_or_was_left_out_as_tagged(
    real_grading, slug, student
):
    """The solution's demonstrations tagged skip-when-grading were left out (commented out) unless the run was told
    to run them (CI's drift check: then every cell ran), and no lesson cell that ran has an error output (a check
    cell's output is its verdict, an error where its check needs a GPU: test_solution_gets_full_points reads those)."""
    nb = nbformat.read(real_grading.autograded(student, slug), as_version=4)
    edition = real_grading.editions["ko" if student.startswith("ko-") else "en"]
    source = nbformat.read(edition / slug / f"{slug}.ipynb", as_version=4)
    tagged = tagged_sources(source)
    skipped = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(SKIPPED)]
    assert len(skipped) == (0 if real_grading.run_demonstrations else len(tagged))
    errors = [
        (c.source.splitlines()[0][:80], o.get("ename"), o.get("evalue", "")[:300])
        for c in nb.cells
        if c.cell_type == "code" and not is_test_cell(c)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{slug}: cells of the solution errored when graded: {errors}"


@pytest.mark.parametrize("student", BLANK)
@pytest.mark.parametrize("slug", SLUGS)
def test_learner_version_gets_zero(real_grading, slug, student):
    auto, manual = _split(slug, real_grading.solutions)
    row = real_grading.row(student, slug)
    assert {g: float(row[g]) for g in [*auto, *manual]} == dict.fromkeys([*auto, *manual], 0.0), row["notes"]
    assert float(row["total"]) == 0 and float(row["max"]) == 12 and float(row["needs_manual"]) == 0
    assert all(f"{g}: " in row["notes"] for g in auto)  # each lost cell says why
    assert all(
        said(real_grading, student, "{grade_id}: no answer written", grade_id=g) in row["notes"]
        for g in manual
    )
    assert row["flags"] == ""


@pytest.mark.parametrize("slug", SLUGS)
def test_csv_agrees_with_the_gradebook(real_grading, slug):
    from nbgrader.api import Gradebook

    for edition, course in real_grading.courses.items():
        if not course.is_dir():
            continue
        with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gradebook:
            students = [s.first_name for s in gradebook.students]
            for student in [s for s in (*SOLVED, *BLANK) if s in students]:
                (record,) = [s for s in gradebook.students if s.first_name == student]
                submission = gradebook.find_submission(slug, record.id)
                row = real_grading.row(student, slug)
                assert (float(row["total"]), float(row["max"])) == (submission.score, submission.max_score)
                # the edition's note, in its own language (grading/i18n.py), and the other notes in it too
                assert ("한국어판(ko) 기준으로 채점했습니다(ko/solutions/)" in row["notes"]) == (
                    edition == "ko"
                )
                assert ("needs manual grading" in row["notes"]) == (edition == "en" and "solved" in student)


@pytest.mark.parametrize("slug", SLUGS)
def test_korean_submissions_get_korean_verdicts(real_grading, slug):
    """Every check cell of a Korean submission shows its verdict in Korean: the ✓ line of the solution (where its
    check runs here) and the reason the blank one lost the cell."""
    for student in ("ko-solved", "ko-blank"):
        nb = nbformat.read(real_grading.autograded(student, slug), as_version=4)
        for cell in [c for c in nb.cells if is_test_cell(c)]:
            text = "".join(o.get("text", "") + o.get("evalue", "") for o in cell.get("outputs", []))
            if "NotGradedHere" in str(cell.get("outputs")) and student == "ko-solved":
                continue  # its check needs a GPU: the reason is the hardware's line
            assert HANGUL.search(text), f"{student} {slug} {grade_id(cell)}: not in Korean: {text[:300]!r}"


def _korean_printed(real_grading, slug: str) -> list[tuple[int, str]]:
    """(cell index, what the cell printed) for every code cell of the Korean solution's autograded notebook."""
    nb = nbformat.read(real_grading.autograded("ko-solved", slug), as_version=4)
    return [
        (index, "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout"))
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
    ]


@pytest.mark.parametrize("slug", SLUGS)
def test_korean_tables_line_up(real_grading, slug):
    """Every table a Korean solution prints lines up by display columns (tests/tables.py): a label that comes from
    data is padded with `memlab.notebook.pad`, not by an f-string's width. The drift check runs every cell of the
    Korean solutions, so their printed output is in its autograded notebooks."""
    from tables import ragged_rows

    if not real_grading.run_demonstrations:
        pytest.skip(
            "the Korean solutions run every cell in the drift check (MEMLAB_TEST_RUN_DEMONSTRATIONS=1)"
        )
    ragged = [
        (index, pair) for index, text in _korean_printed(real_grading, slug) for pair in ragged_rows(text)
    ]
    assert not ragged, f"{slug}: rows padded by characters, not display columns (cell, rows): {ragged[:3]}"


@pytest.mark.parametrize("slug", SLUGS)
def test_korean_solutions_print_no_english_words(real_grading, slug):
    """Every line a Korean solution prints is Korean to a Korean reader: no English word of three letters or more
    outside identifiers, names, units and the short list of library words in tests/korean_text.py."""
    from korean_text import english_lines

    if not real_grading.run_demonstrations:
        pytest.skip(
            "the Korean solutions run every cell in the drift check (MEMLAB_TEST_RUN_DEMONSTRATIONS=1)"
        )
    english = [
        (index, line, words)
        for index, text in _korean_printed(real_grading, slug)
        for line, words in english_lines(text)
    ]
    assert not english, (
        f"{slug}: English in the Korean edition's printed lines (cell, line, words): {english[:5]}"
    )


def test_the_graders_reference_implementation_does_not_exist_in_the_kernel(real_grading):
    """The grading references are not in the sandbox's copy of the kit: a learner cannot call them."""
    if real_grading.run_demonstrations:
        pytest.skip("the drift check grades the Korean solution and blank only")
    row = row_for(real_grading.rows, "reference_caller", "02-numeric-formats")
    assert float(row["e4_ulp_check"]) == 0
    assert "No module named 'autograders.references'" in row["notes"]
    assert float(row["e1_decode_check"]) > 0  # the rest of the notebook is graded as usual
