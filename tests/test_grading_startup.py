"""What a grading process pays before it grades: jsonschema's rfc3987_syntax is left out (grading/__init__.py), and
grade.py's workers are forked from a server that imported their modules once (grading/batch.py, worker_server); and
the order a batch starts its submissions in (grading/batch.py, grading_order)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from grading.worker import PRELOAD


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


def test_the_worker_server_preloads_what_a_worker_needs_but_not_the_check_kit():
    modules = imported_after("import " + ", ".join(PRELOAD))
    assert {"torch", "nbformat", "nbgrader.apps", "grading.judge"} <= modules
    assert "autograders.kit" not in modules  # it reads the grading mode from the environment when imported


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
