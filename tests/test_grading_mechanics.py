"""scripts/grade.py on the fixture lesson (tests/fixtures/minicourse/solutions/00-fixture): the mechanics of grading.

One grading run (module fixture) of six students:
  solved    the solution notebook                      -> full points, except the GPU check (NotGradedHere here)
  blank     the learner version                        -> 0
  tampered  e2 wrong, every graded cell replaced by `pass` -> graded by the original cells: e1 only
  looping   e1 loops forever                           -> e1 lost (timeout), e2 still graded
  shadow    learner version + its own autograders/, memlab/ and fixture_checks.py that always pass -> 0
  misnamed  a notebook with the wrong name             -> a row of zeros that says "missing"
  corrupt   a notebook that is not JSON                -> a row of zeros that says why; grading goes on
  killer    e2 kills the kernel (os._exit)             -> nbgrader cannot grade the notebook: zeros, and why
"""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from nbgrader_pipeline import (
    CODE_STUB,
    FIXTURE_SOLUTIONS,
    SCRIPTS,
    build_lessons,
    graded_cells,
    row_for,
    run_grade,
    tree_digest,
    write_notebook,
)

from memlab.hardware import unmet_requirements

SLUG = "00-fixture"
NOTEBOOK = f"{SLUG}.ipynb"
SOLUTION = FIXTURE_SOLUTIONS / SLUG / NOTEBOOK
POINTS = {"e1_square_check": 4.0, "e2_add_check": 4.0, "e3_gpu_ones_check": 2.0}
HAS_GPU = unmet_requirements(cuda=True) is None
GPU_POINTS = POINTS["e3_gpu_ones_check"] if HAS_GPU else 0.0
STUDENTS = ["solved", "blank", "tampered", "looping", "shadow", "misnamed", "corrupt", "killer"]
TIMEOUT = 6  # seconds per cell: the slowest cell of the fixture (import torch) takes ~2 s on 2 cores

#: a learner-made check kit that passes everything, shipped next to the notebook
SHADOW_KIT = """
def check(name):
    return lambda fn: (lambda *args, **kwargs: None)

def requires(**kwargs):
    return lambda fn: fn

def _anything(*args, **kwargs):
    return None

call = expect_callable = expect_close = expect_equal = _anything
"""
SHADOW_FILES = {
    "autograders/__init__.py": "",
    "autograders/kit.py": SHADOW_KIT,
    "memlab/__init__.py": "raise ImportError('the learner-made memlab was imported')\n",
    "fixture_checks.py": "check_square = check_add = check_gpu_ones = lambda fn: None\n",
}


def _edit(nb, grade_id: str, old: str, new: str) -> None:
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    assert old in cell.source
    cell.source = cell.source.replace(old, new)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading-mechanics")
    learner = nbformat.reads(
        build_lessons.render(FIXTURE_SOLUTIONS)[f"{SLUG}/{NOTEBOOK}"].decode(), as_version=4
    )
    subs = tmp / "submissions"

    write_notebook(nbformat.read(SOLUTION, as_version=4), subs / "solved" / SLUG, NOTEBOOK)
    write_notebook(learner, subs / "blank" / SLUG, NOTEBOOK)

    tampered = nbformat.read(SOLUTION, as_version=4)
    _edit(tampered, "e2_add", "return a + b", "return a - b")
    for cell in tampered.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "pass"
    write_notebook(tampered, subs / "tampered" / SLUG, NOTEBOOK)

    looping = nbformat.read(SOLUTION, as_version=4)
    _edit(looping, "e1_square", "return x * x", "while True:\n        pass")
    write_notebook(looping, subs / "looping" / SLUG, NOTEBOOK)

    write_notebook(learner, subs / "shadow" / SLUG, NOTEBOOK)
    for relative, text in SHADOW_FILES.items():
        (subs / "shadow" / SLUG / relative).parent.mkdir(parents=True, exist_ok=True)
        (subs / "shadow" / SLUG / relative).write_text(text)

    write_notebook(nbformat.read(SOLUTION, as_version=4), subs / "misnamed" / SLUG, "00-fixture-Copy1.ipynb")

    (subs / "corrupt" / SLUG).mkdir(parents=True)
    (subs / "corrupt" / SLUG / NOTEBOOK).write_text('{"cells": [')

    killer = nbformat.read(SOLUTION, as_version=4)
    _edit(killer, "e2_add", "return a + b", "import os\n    os._exit(1)")
    write_notebook(killer, subs / "killer" / SLUG, NOTEBOOK)

    before = tree_digest(subs)
    course = tmp / "course"
    proc, rows = run_grade(
        subs,
        tmp / "grades.csv",
        "--solutions",
        str(FIXTURE_SOLUTIONS),
        "--timeout",
        str(TIMEOUT),
        "--keep",
        str(course),
    )
    return {
        "proc": proc,
        "rows": rows,
        "before": before,
        "after": tree_digest(subs),
        "subs": subs,
        "course": course,
    }


def _scores(row: dict) -> dict[str, float]:
    return {grade_id: float(row[grade_id]) for grade_id in POINTS}


@pytest.mark.slow
def test_exits_zero_and_prints_a_summary(graded):
    proc = graded["proc"]
    assert proc.returncode == 0, proc.stderr
    assert "student" in proc.stdout and "score" in proc.stdout
    for student in STUDENTS:
        assert student in proc.stdout


@pytest.mark.slow
def test_csv_columns_and_rows(graded):
    rows = graded["rows"]
    assert list(rows[0]) == ["student", "lesson", *POINTS, "total", "max", "notes"]
    assert [r["student"] for r in rows] == sorted(STUDENTS)
    for row in rows:
        assert row["lesson"] == SLUG
        assert float(row["max"]) == sum(POINTS.values()) == 10
        assert float(row["total"]) == sum(_scores(row).values())


@pytest.mark.slow
def test_solved_gets_full_points_and_the_gpu_check_says_why_not(graded):
    row = row_for(graded["rows"], "solved", SLUG)
    assert _scores(row) == {**POINTS, "e3_gpu_ones_check": GPU_POINTS}
    if not HAS_GPU:
        assert "e3_gpu_ones_check: NotGradedHere: NOT CHECKED HERE: needs a CUDA GPU" in row["notes"]
        assert "NotGradedHere" in graded["proc"].stdout  # the summary table shows it too


@pytest.mark.slow
def test_blank_gets_zero_with_reasons(graded):
    row = row_for(graded["rows"], "blank", SLUG)
    assert _scores(row) == dict.fromkeys(POINTS, 0.0)
    assert "e1_square_check: CheckFailed" in row["notes"] and "NotImplementedError" in row["notes"]


@pytest.mark.slow
def test_replaced_test_cells_are_restored_from_the_source(graded):
    row = row_for(graded["rows"], "tampered", SLUG)
    assert _scores(row) == {"e1_square_check": 4.0, "e2_add_check": 0.0, "e3_gpu_ones_check": GPU_POINTS}
    assert "e2_add_check: CheckFailed" in row["notes"]
    autograded = nbformat.read(graded["course"] / "autograded" / "tampered" / SLUG / NOTEBOOK, as_version=4)
    source = {
        c.metadata["nbgrader"]["grade_id"]: c.source for c in autograded.cells if "nbgrader" in c.metadata
    }
    assert "check_add(add)" in source["e2_add_check"]
    assert "BEGIN HIDDEN TESTS" in source["e1_square_check"]  # hidden tests are back too


@pytest.mark.slow
def test_infinite_loop_loses_only_its_exercise(graded):
    row = row_for(graded["rows"], "looping", SLUG)
    assert _scores(row) == {"e1_square_check": 0.0, "e2_add_check": 4.0, "e3_gpu_ones_check": GPU_POINTS}
    assert "e1_square_check: KeyboardInterrupt / CellTimeoutError" in row["notes"]


@pytest.mark.slow
def test_shipped_autograders_and_memlab_are_not_used(graded):
    row = row_for(graded["rows"], "shadow", SLUG)
    assert _scores(row) == dict.fromkeys(POINTS, 0.0)
    autograded = graded["course"] / "autograded" / "shadow" / SLUG
    assert not (autograded / "autograders").exists() and not (autograded / "memlab").exists()
    # the lesson's own files are put back over the learner's copies
    assert (autograded / "fixture_checks.py").read_bytes() == (
        FIXTURE_SOLUTIONS / SLUG / "fixture_checks.py"
    ).read_bytes()


def test_the_shadow_kit_would_have_won(tmp_path):
    """Control for the test above: next to the notebook, the learner-made kit shadows the installed one."""
    for relative, text in SHADOW_FILES.items():
        if relative.startswith("autograders/"):
            (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / relative).write_text(text)
    (tmp_path / "fixture_checks.py").write_bytes(
        (FIXTURE_SOLUTIONS / SLUG / "fixture_checks.py").read_bytes()
    )
    code = "import sys; sys.path.insert(0, ''); from fixture_checks import check_square; check_square(None)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, (
        proc.stderr
    )  # check_square(None) passes: the real kit would raise CheckFailed


@pytest.mark.slow
def test_missing_notebook_is_a_row_of_zeros_with_a_note(graded):
    row = row_for(graded["rows"], "misnamed", SLUG)
    assert _scores(row) == dict.fromkeys(POINTS, 0.0) and float(row["total"]) == 0
    assert row["notes"] == f"missing: no {SLUG}/{NOTEBOOK} (found 00-fixture-Copy1.ipynb)"


@pytest.mark.slow
@pytest.mark.parametrize(
    "student, reason",
    [
        ("corrupt", "autograde failed: nbformat.reader.NotJSONError: Notebook does not appear to be JSON"),
        ("killer", "autograde failed: nbclient.exceptions.DeadKernelError: Kernel died"),
    ],
)
def test_ungradable_notebook_is_a_row_of_zeros_that_says_why(graded, student, reason):
    row = row_for(graded["rows"], student, SLUG)
    assert _scores(row) == dict.fromkeys(POINTS, 0.0)
    assert row["notes"].startswith(reason)


@pytest.mark.slow
def test_submissions_are_left_untouched(graded):
    assert graded["after"] == graded["before"]


def test_learner_version_of_the_fixture_is_stripped():
    learner = nbformat.reads(
        build_lessons.render(FIXTURE_SOLUTIONS)[f"{SLUG}/{NOTEBOOK}"].decode(), as_version=4
    )
    assert graded_cells(SOLUTION) == POINTS
    text = nbformat.writes(learner)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text and "return x * x" not in text
    solution_cells = [c for c in learner.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert len(solution_cells) == 3 and all(
        line in c.source for c in solution_cells for line in CODE_STUB.split("\n")
    )


@pytest.mark.parametrize(
    "args, message",
    [(["--lessons", "99-nope"], "no such lesson"), ([], "no student folders")],
)
def test_bad_arguments_are_refused(tmp_path, args, message):
    command = [sys.executable, str(SCRIPTS / "grade.py"), str(tmp_path), "--out", str(tmp_path / "g.csv")]
    proc = subprocess.run(
        [*command, "--solutions", str(FIXTURE_SOLUTIONS), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "g.csv").exists()
