"""Helpers of the tests of the nbgrader pipeline (scripts/build_lessons.py, scripts/grade.py).

The fixtures that share one grading run between test files live in conftest.py; everything else is here.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from coursetools import build_lessons
from grading.course import HANDED_IN
from grading.course import graded_cells as course_graded_cells

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
SOLUTIONS = ROOT / "solutions"
LESSONS = ROOT / "lessons"
FIXTURE_SOLUTIONS = ROOT / "tests" / "fixtures" / "minicourse" / "solutions"


#: what ClearSolutions puts in place of a solution (nbgrader_config.py)
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def lesson_slugs(solutions: Path = SOLUTIONS) -> list[str]:
    """The lessons that exist in `solutions` right now (empty while none is written)."""
    return [p.name for p in build_lessons.lesson_dirs(solutions)]


def graded_cells(notebook: Path) -> dict[str, float]:
    """{grade_id: points} of the graded cells of a lesson's (only) notebook, in order: what grade.py grades."""
    return {grade_id: points for grade_id, points, _ in course_graded_cells(notebook.parent)}


def cli_env(tmp: Path) -> dict[str, str]:
    """The environment of a command-line nbgrader run: this venv's bin first (nbgrader shells out to `alembic`) and
    no personal Jupyter config (an ~/.jupyter/nbgrader_config.py would change what nbgrader generates)."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    config_dir = tmp / "jupyter-config"
    config_dir.mkdir(parents=True, exist_ok=True)
    env["JUPYTER_CONFIG_DIR"] = str(config_dir)
    return env


def copy_course(solutions: Path, course: Path, slugs: list[str] | None = None) -> Path:
    """A copy of `solutions` (the named lessons) and of the repository's nbgrader_config.py in `course`."""
    course.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    for slug in slugs if slugs is not None else lesson_slugs(solutions):
        shutil.copytree(
            solutions / slug, course / "solutions" / slug, ignore=shutil.ignore_patterns(*HANDED_IN)
        )
    return course


def nbgrader_generate_assignment(course: Path) -> dict[str, bytes]:
    """Run the real `nbgrader generate_assignment` on every lesson of `course` (a copy_course); what it released."""
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "nbgrader"), "generate_assignment", "*", "--force"],
        cwd=course,
        env=cli_env(course.parent),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"nbgrader generate_assignment failed:\n{proc.stdout}\n{proc.stderr}"
    released = course / "lessons"
    return {
        p.relative_to(released).as_posix(): p.read_bytes() for p in sorted(released.rglob("*")) if p.is_file()
    }


def run_grade(
    submissions: Path, out: Path, *args: str, timeout: float = 1800, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run scripts/grade.py as an instructor would, from `cwd`; (the process, the CSV's rows)."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "grade.py"), str(submissions), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    rows = []
    if out.exists():
        with open(out, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    return proc, rows


def tree_digest(folder: Path) -> str:
    """A hash of everything under `folder`: paths, kinds, contents, permissions and modification times."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        digest.update(f"{path.relative_to(folder).as_posix()}|{stat.st_mode}|{stat.st_mtime_ns}|".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def write_notebook(nb, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)
    return folder / name


def row_for(rows: list[dict], student: str, lesson: str) -> dict:
    matches = [r for r in rows if r["student"] == student and r["lesson"] == lesson]
    assert len(matches) == 1, f"expected one CSV row for {student}/{lesson}, got {len(matches)}: {rows}"
    return matches[0]


def validate_executed(notebook: Path, invert: bool = False) -> dict:
    """nbgrader's Validator verdict on a notebook that has already been executed (by the autograder): the
    Validator's own rules (a graded cell passes when it has no error), without running the notebook again."""
    from nbgrader.preprocessors import CheckCellMetadata
    from nbgrader.validator import Validator

    validator = Validator(invert=invert)
    validator.preprocessors = [CheckCellMetadata]  # instead of [CheckCellMetadata, ClearOutput, Execute]
    return validator.validate(str(notebook))
