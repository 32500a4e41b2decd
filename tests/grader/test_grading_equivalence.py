"""`nbgrader autograde` grades exactly as scripts/grade.py does (grading/autograde.py, nbgrader_config.py).

One folder of submissions (solved, blank, partly solved, and cheats) of the fixture lesson and of lesson 02 is
graded twice with the same seed: by scripts/grade.py, and by the real `nbgrader autograde` command in a course
folder holding the same submissions under the same student ids. Every cell's score, and every check cell's
verdict text, must be the same.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbgrader_pipeline import (
    FIXTURE_SOLUTIONS,
    ROOT,
    SOLUTIONS,
    build_lessons,
    cli_env,
    run_grade,
    write_notebook,
)

from grading.batch import student_ids
from grading.course import graded_cells
from grading.submission import grade_id, is_test_cell

pytestmark = pytest.mark.slow  # grades lessons with nbgrader autograde and with grade.py: the full tier

SEED = 4321
WRONG_ADD = ("return a + b", "return a - b")
#: e2's check replaced by one that shows a transcript with the right values of the public cases
FORGED = """
import fixture_checks
from IPython.display import display
from autograders.kit import TRANSCRIPT_MIME, wire


def _forged_check(fn):
    records = [{"label": "`add` is written", "value": ["none"]}]
    records += [{"label": f"add({a}, {b})", "value": wire.encode(a + b)} for a, b in [(2, 3), (-1, 1), (0.5, 0.25)]]
    display({TRANSCRIPT_MIME: {"check": "e2_add", "records": records}, "text/plain": "forged"}, raw=True)


fixture_checks.check_add = _forged_check
"""


def _edit(nb, gid: str, old: str, new: str):
    nb = nbformat.from_dict(nb)
    (cell,) = [c for c in nb.cells if grade_id(c) == gid]
    assert old in cell.source
    cell.source = cell.source.replace(old, new)
    return nb


@pytest.fixture(scope="module")
def graded_both_ways(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("equivalence")
    solutions = tmp / "solutions"
    shutil.copytree(FIXTURE_SOLUTIONS / "00-fixture", solutions / "00-fixture")
    shutil.copytree(SOLUTIONS / "02-numeric-formats", solutions / "02-numeric-formats")
    released = build_lessons.render(solutions)
    subs = tmp / "subs"
    for slug in ("00-fixture", "02-numeric-formats"):
        name = f"{slug}.ipynb"
        solved = nbformat.read(solutions / slug / name, as_version=4)
        blank = nbformat.reads(released[f"{slug}/{name}"].decode(), as_version=4)
        write_notebook(solved, subs / "solved" / slug, name)
        write_notebook(blank, subs / "blank" / slug, name)
    fixture = nbformat.read(solutions / "00-fixture" / "00-fixture.ipynb", as_version=4)
    write_notebook(_edit(fixture, "e2_add", *WRONG_ADD), subs / "partly" / "00-fixture", "00-fixture.ipynb")
    forged = _edit(fixture, "e2_add", WRONG_ADD[0], WRONG_ADD[1] + "\n" + FORGED)
    write_notebook(forged, subs / "forger" / "00-fixture", "00-fixture.ipynb")
    formats = nbformat.read(solutions / "02-numeric-formats" / "02-numeric-formats.ipynb", as_version=4)
    lying = _edit(
        formats,
        "e4_ulp",
        "def ulp(",
        "class Liar(float):\n    def __eq__(self, o):\n        return True\n\n\ndef _ulp(",
    )
    lying.cells[
        [grade_id(c) for c in lying.cells].index("e4_ulp")
    ].source += "\n\ndef ulp(x, fmt):\n    return Liar(0.0)\n"
    write_notebook(lying, subs / "liar" / "02-numeric-formats", "02-numeric-formats.ipynb")

    proc, rows = run_grade(
        subs,
        tmp / "grades.csv",
        "--solutions",
        str(solutions),
        "--seed",
        str(SEED),
        "--keep",
        str(tmp / "kept"),
    )
    assert proc.returncode == 0, proc.stderr

    # the same submissions, under the same student ids, graded by the nbgrader command itself
    course = tmp / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(solutions, course / "solutions")
    students = sorted(p.name for p in subs.iterdir())
    ids = student_ids(students)
    for student in students:
        for lesson in (subs / student).iterdir():
            shutil.copytree(lesson, course / "submitted" / ids[student] / lesson.name)
    env = cli_env(tmp)
    nbgrader = [sys.executable, "-m", "nbgrader"]
    for slug in ("00-fixture", "02-numeric-formats"):
        for step in (
            ["generate_assignment", slug, "--force"],
            ["autograde", slug, f"--GradingSettings.seed={SEED}", "--force"],
        ):
            done = subprocess.run(
                [*nbgrader, *step], cwd=course, env=env, capture_output=True, text=True, timeout=1500
            )
            assert done.returncode == 0, done.stdout + done.stderr
    return rows, course, tmp / "kept" / "course", students


def _scores(course, slug: str, sid: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(slug, slug, sid)
        return {g.name: g.auto_score for g in notebook.grades if g.auto_score is not None}


def _verdicts(course, slug: str, sid: str) -> dict[str, str]:
    nb = nbformat.read(course / "autograded" / sid / slug / f"{slug}.ipynb", as_version=4)
    out = {}
    for cell in nb.cells:
        if is_test_cell(cell):
            out[grade_id(cell)] = " | ".join(
                o.get("text") or f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs
            )
    return out


def test_nbgrader_autograde_gives_the_scores_and_verdicts_of_grade_py(graded_both_ways):
    rows, course, kept, students = graded_both_ways
    compared = 0
    ids = student_ids(students)
    for student in students:
        sid = ids[student]
        for row in [r for r in rows if r["student"] == student]:
            slug = row["lesson"]
            if not (course / "submitted" / sid / slug).is_dir():
                continue  # nothing handed in: grade.py's row of zeros says "missing"
            ours = _scores(course, slug, sid)
            for gid, _points, manual in graded_cells(course / "solutions" / slug):
                if not manual:
                    assert float(row[gid]) == ours[gid], (student, slug, gid)
                    compared += 1
            assert _verdicts(course, slug, sid) == _verdicts(kept, slug, sid), (student, slug)
    assert compared >= 20


def test_the_solutions_score_full_unflagged_and_the_blanks_zero(graded_both_ways):
    rows, *_ = graded_both_ways
    for row in rows:
        if row["student"] == "solved":
            auto = float(row["max"]) - float(row["needs_manual"])
            gpu = (
                2.0 if row["lesson"] == "00-fixture" else 0.0
            )  # e3_gpu_ones needs a GPU: not graded on a CPU
            assert float(row["total"]) >= auto - gpu, row
            assert not row["flags"], row
        if row["student"] == "blank":
            assert float(row["total"]) == 0, row
            assert not row["flags"], row


def test_a_wrong_answer_earns_nothing_however_it_is_dressed(graded_both_ways):
    rows, *_ = graded_both_ways
    by = {(r["student"], r["lesson"]): r for r in rows}
    assert by[("partly", "00-fixture")]["e2_add_check"] == "0"
    assert by[("partly", "00-fixture")]["e1_square_check"] == "4"
    assert by[("forger", "00-fixture")]["e2_add_check"] == "0"  # the drawn cases are missing from the forgery
    assert "does not match" in by[("forger", "00-fixture")]["flags"]
    assert by[("liar", "02-numeric-formats")]["e4_ulp_check"] == "0"
    assert "a check takes only numbers" in by[("liar", "02-numeric-formats")]["notes"]


def test_plain_nbgrader_needs_no_seed(tmp_path):
    """`nbgrader autograde LESSON` with the course's config and no seed, as formgrader's Autograde button runs it: the
    kernel's side and the judge's side draw the same cases (the course's seed, made once and kept in its root), so
    correct work earns its points; a re-grade draws them again from the same seed. On the code of 2026-11-28 each side
    drew its own seed and the solution's drawn cases failed as "the record of this check does not match it"."""
    from grading.settings import SEED_FILE

    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(FIXTURE_SOLUTIONS / "00-fixture", course / "solutions" / "00-fixture")
    solved = nbformat.read(course / "solutions" / "00-fixture" / "00-fixture.ipynb", as_version=4)
    write_notebook(solved, course / "submitted" / "ada" / "00-fixture", "00-fixture.ipynb")
    env = cli_env(tmp_path)
    nbgrader = [sys.executable, "-m", "nbgrader"]
    seeds, scores = [], []
    for step in (["generate_assignment", "00-fixture", "--force"], ["autograde", "00-fixture", "--force"]) + (
        ["autograde", "00-fixture", "--force"],
    ):
        done = subprocess.run(
            [*nbgrader, *step], cwd=course, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # the sandboxed kernel has no parent it could poll: it must not take itself for a terminal's `ipython
        # kernel` and print that banner (six lines a notebook, in the instructor's terminal or formgrader's log)
        assert "Ctrl-C will not work" not in done.stdout + done.stderr, done.stdout + done.stderr
        if step[0] == "autograde":
            scores.append(_scores(course, "00-fixture", "ada"))
            assert scores[-1]["e2_add_check"] == 4 and scores[-1]["e1_square_check"] == 4, (
                scores[-1],
                _verdicts(course, "00-fixture", "ada"),
            )
            seeds.append(json.loads((course / SEED_FILE).read_text())["seed"])
    assert seeds[0] == seeds[1]
