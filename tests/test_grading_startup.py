"""What a grading process pays before it grades: jsonschema's rfc3987_syntax is left out (grading/__init__.py),
grade.py's workers are forked from a server that imported their modules once (grading/batch.py, worker_server), with
the kit's heavy dependencies only for lessons whose checks are the kit's, and a course's gradebook is made without
starting the `alembic` command (grading/course.py, create_gradebook); and the order a batch starts its submissions in
(grading/batch.py, grading_order)."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from grading.worker import KIT_PRELOAD, PRELOAD, preload_for

ROOT = Path(__file__).resolve().parents[1]


def imported_after(code: str) -> set[str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{code}\nimport sys\nprint(' '.join(n for n, m in sys.modules.items() if m))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_the_grader_reads_notebooks_without_compiling_rfc3987_grammars():
    if importlib.util.find_spec("rfc3987_syntax") is None:
        pytest.skip("rfc3987-syntax is not installed here: jsonschema cannot import it anyway")
    assert "rfc3987_syntax" in imported_after("import nbformat")  # what it costs without the grader first
    modules = imported_after("import grading\nimport nbformat\nnbformat.validate(nbformat.v4.new_notebook())")
    assert "rfc3987_syntax" not in modules and "lark" not in modules


def test_the_grader_and_memlab_import_without_torch():
    """scripts/grade.py answers a wrong argument at once (it took 3 s, 7 s under load, to import torch first), and
    `import memlab` does its setup (memlab/startup.py) without torch; a submodule comes when it is named."""
    assert "torch" not in imported_after("import memlab, grading.batch")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "grade.py"), "/nonexistent", "--out", "x.csv"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert "torch" in imported_after("import memlab\nmemlab.hardware.pick_device()")


def test_the_worker_server_preloads_what_a_worker_needs_but_not_the_check_kit():
    modules = imported_after("import " + ", ".join(PRELOAD))
    assert {"torch", "nbformat", "nbgrader.apps", "grading.judge"} <= modules
    assert "autograders.kit" not in modules  # it reads the grading mode from the environment when imported


@pytest.mark.slow  # imports transformers' Trainer and peft in a new process: the full tier
def test_the_kits_dependencies_are_preloaded_only_for_lessons_whose_checks_are_the_kits():
    lesson = ROOT / "solutions" / "08-capstone-7b-lora" / "08-capstone-7b-lora.ipynb"
    fixture = ROOT / "tests" / "fixtures" / "minicourse" / "solutions" / "00-fixture" / "00-fixture.ipynb"
    assert preload_for([fixture]) == PRELOAD
    assert preload_for([fixture, lesson]) == PRELOAD + KIT_PRELOAD
    modules = imported_after("import " + ", ".join(KIT_PRELOAD))
    assert {"transformers.trainer", "peft"} <= modules and "autograders.kit" not in modules


def _schema_and_revision(path: Path):
    with sqlite3.connect(path) as db:
        return (
            sorted(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()),
            db.execute("SELECT version_num FROM alembic_version").fetchall(),
        )


@pytest.mark.slow  # nbgrader's own way takes the seconds create_gradebook saves: the full tier
def test_a_course_gradebook_is_the_one_nbgrader_makes(tmp_path, monkeypatch):
    """The same tables and the same alembic revision as nbgrader's own Gradebook, which runs `alembic heads`."""
    from nbgrader.api import Gradebook

    from grading.course import create_gradebook

    create_gradebook(tmp_path / "ours.db")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    with Gradebook(f"sqlite:///{tmp_path / 'nbgraders.db'}"):
        pass
    ours, theirs = _schema_and_revision(tmp_path / "ours.db"), _schema_and_revision(tmp_path / "nbgraders.db")
    assert ours == theirs and len(ours[0]) > 10 and len(ours[1]) == 1


def test_a_batch_starts_with_the_last_lesson_and_keeps_the_students_order():
    from grading.batch import grading_order

    students = [(0, "ada"), (1, "bo")]
    lessons = ["01-memory-anatomy", "06-profiling", "08-capstone-7b-lora"]
    assert grading_order(students, lessons) == [
        (0, "ada", "08-capstone-7b-lora"),
        (1, "bo", "08-capstone-7b-lora"),
        (0, "ada", "06-profiling"),
        (1, "bo", "06-profiling"),
        (0, "ada", "01-memory-anatomy"),
        (1, "bo", "01-memory-anatomy"),
    ]
