"""lessons/ is generated from solutions/:

- the committed lessons/ equals scripts/build_lessons.py's output byte for byte, for every lesson;
- build_lessons.py's output equals what the real `nbgrader generate_assignment` releases, byte for byte (on the
  fixture lesson and on the real lessons), so lessons/ is exactly nbgrader's learner version;
- build_lessons.py is deterministic and its --check mode reports what is out of date.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from nbgrader_pipeline import (
    FIXTURE_SOLUTIONS,
    LESSONS,
    SCRIPTS,
    SOLUTIONS,
    build_lessons,
    copy_course,
    lesson_slugs,
    nbgrader_generate_assignment,
)


@pytest.fixture(scope="module")
def built():
    """build_lessons' output for the real solutions/ (computed once)."""
    return build_lessons.render(SOLUTIONS)


@pytest.mark.parametrize("slug", lesson_slugs())
def test_committed_lesson_is_the_built_one(built, slug):
    expected = {rel: data for rel, data in built.items() if rel.split("/")[0] == slug}
    assert f"{slug}/{slug}.ipynb" in expected
    out_of_date = [
        rel
        for rel, data in expected.items()
        if not (LESSONS / rel).is_file() or (LESSONS / rel).read_bytes() != data
    ]
    assert not out_of_date, f"lessons/ is out of date for {out_of_date}: run python scripts/build_lessons.py"


def test_no_lesson_without_a_source(built):
    _, stale = build_lessons.compare(built, LESSONS)
    assert not stale, f"{stale} in lessons/ have no solution notebook: run python scripts/build_lessons.py"


def test_build_is_deterministic(built):
    assert build_lessons.render(SOLUTIONS) == built


@pytest.mark.slow
def test_build_equals_nbgrader_generate_assignment(tmp_path):
    """One real `nbgrader generate_assignment` over the fixture lesson and every real lesson (a snapshot: lessons
    are edited while the tests run), compared file by file with build_lessons' output for the same snapshot."""
    course = copy_course(SOLUTIONS, tmp_path / "course")
    copy_course(FIXTURE_SOLUTIONS, course, ["00-fixture"])
    ours = build_lessons.render(course / "solutions")
    theirs = nbgrader_generate_assignment(course)
    assert "00-fixture/00-fixture.ipynb" in theirs and "00-fixture/fixture_checks.py" in theirs
    assert all(f"{slug}/{slug}.ipynb" in theirs for slug in lesson_slugs())
    assert sorted(ours) == sorted(theirs)
    assert [rel for rel in ours if ours[rel] != theirs[rel]] == []


def test_check_mode_lists_what_differs(tmp_path, capsys):
    lessons = tmp_path / "lessons"
    args = ["--solutions", str(FIXTURE_SOLUTIONS), "--lessons", str(lessons)]
    assert build_lessons.main(args) == 0  # writes
    assert build_lessons.main([*args, "--check"]) == 0

    notebook = lessons / "00-fixture" / "00-fixture.ipynb"
    notebook.write_bytes(notebook.read_bytes().replace(b"raise NotImplementedError()", b"return 42"))
    shutil.copytree(lessons / "00-fixture", lessons / "99-gone")
    (lessons / "99-gone" / "00-fixture.ipynb").rename(lessons / "99-gone" / "99-gone.ipynb")
    capsys.readouterr()
    assert build_lessons.main([*args, "--check"]) == 1
    out = capsys.readouterr().out
    assert f"out of date: {notebook}" in out and "99-gone.ipynb" in out
    assert build_lessons.main(args) == 0  # rewrites the notebook, removes the stale one
    assert build_lessons.main([*args, "--check"]) == 0
    assert not (lessons / "99-gone" / "99-gone.ipynb").exists()


def test_cli_check_exit_status(tmp_path):
    command = [sys.executable, str(SCRIPTS / "build_lessons.py"), "--solutions", str(FIXTURE_SOLUTIONS)]
    proc = subprocess.run(
        [*command, "--lessons", str(tmp_path), "--check"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1 and "out of date" in proc.stdout


def test_a_check_cell_s_points_are_written_from_its_check_s_declaration(tmp_path, capsys):
    """A check's points are declared once, in `@check(name, points=...)`: a check cell whose nbgrader points say
    otherwise is out of date for --check, and the build writes the declared points into the solution and so into
    the learner version (nbgrader grades with the cell's points)."""
    import nbformat

    solutions = tmp_path / "solutions"
    shutil.copytree(FIXTURE_SOLUTIONS, solutions)
    notebook = solutions / "00-fixture" / "00-fixture.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    check_cell = next(
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "e1_square_check"
    )
    declared = check_cell.metadata.nbgrader.points
    check_cell.metadata.nbgrader.points = declared + 3
    nbformat.write(nb, notebook)
    args = ["--solutions", str(solutions), "--lessons", str(tmp_path / "lessons")]
    capsys.readouterr()
    assert build_lessons.main([*args, "--check"]) == 1
    assert f"out of date: the points of e1_square_check in {notebook}" in capsys.readouterr().out
    assert build_lessons.main(args) == 0
    assert build_lessons.main([*args, "--check"]) == 0
    for path in (notebook, tmp_path / "lessons" / "00-fixture" / "00-fixture.ipynb"):
        cells = nbformat.read(path, as_version=4).cells
        points = {
            c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader.get("points")
            for c in cells
            if "nbgrader" in c.metadata
        }
        assert points["e1_square_check"] == declared, path
