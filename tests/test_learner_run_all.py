""" "Run All" on a learner version stops politely.

A learner who opens a lesson and runs every cell, exercises not written yet, must meet only the lessons' one-line
messages, never a NameError, a KeyError or a traceback out of a stub: a check that fails (`CheckFailed`, or
`NotGradedHere` under strict grading), a cell that uses an unfinished exercise (`ExerciseNeeded`, from
`memlab.notebook.needs`), or the stub's own `NotImplementedError`, shown as "`f` is not written yet". And the first
stop must be a graded check cell: the check sits directly under its exercise, so Run All meets the friendly verdict
before any demo calls the stub.

Each lesson's learner version is built in memory (scripts/build_lessons.render, what lessons/ holds) and executed
once, top to bottom, in one kernel, in a temporary folder with the lesson's other files, in learner mode.
"""

from __future__ import annotations

import nbformat
import pytest
from nbgrader_pipeline import SOLUTIONS, build_lessons, lesson_slugs

from autograders.kit import GRADING_ENV

FRIENDLY = {"CheckFailed", "ExerciseNeeded", "NotGradedHere"}
CELL_TIMEOUT = 300  # seconds per cell


def execute(nb, cwd, timeout: int = CELL_TIMEOUT):
    """Run every cell of `nb` (changed in place), errors allowed, in a fresh kernel whose cwd is `cwd`."""
    from nbclient import NotebookClient

    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(cwd)}},
        allow_errors=True,
        record_timing=False,
    ).execute()
    return nb


def is_graded_check(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_friendly(error) -> bool:
    """One of the lessons' one-line stops (memlab.notebook's display: a traceback of one line, no frames)."""
    if error.get("ename") in FRIENDLY:
        return True
    traceback = error.get("traceback", [])
    return (
        error.get("ename") == "NotImplementedError"
        and len(traceback) == 1
        and "is not written yet" in traceback[0]
    )


def errors(nb) -> list[tuple[int, object, dict]]:
    """(index, cell, error output) for every error output, in cell order."""
    return [
        (index, cell, output)
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


def describe(index: int, cell, error: dict) -> str:
    where = cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id")
    first_line = (error.get("evalue") or "").strip().splitlines()[:1]
    return f"cell {index} ({where}): {error.get('ename')}: {' '.join(first_line)}"


@pytest.fixture(scope="module")
def learner_versions():
    return build_lessons.render(SOLUTIONS)


@pytest.mark.slow
@pytest.mark.parametrize("slug", lesson_slugs())
def test_run_all_on_the_learner_version_stops_only_at_friendly_messages(
    learner_versions, slug, tmp_path, monkeypatch
):
    monkeypatch.delenv(GRADING_ENV, raising=False)  # learner mode, inherited by the kernel
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for rel, data in learner_versions.items():
        lesson, _, name = rel.partition("/")
        if lesson == slug:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(data)
    nb = nbformat.read(tmp_path / f"{slug}.ipynb", as_version=4)
    execute(nb, tmp_path)

    found = errors(nb)
    assert found, f"{slug}: Run All on the learner version raised nothing: no exercise stops it"
    unfriendly = [describe(*e) for e in found if not is_friendly(e[2])]
    assert not unfriendly, (
        f"{slug}: Run All on the learner version meets errors that are not a check's verdict, "
        "ExerciseNeeded or 'not written yet' (guard the cell with memlab.notebook.needs):\n"
        + "\n".join(unfriendly)
    )
    index, cell, error = found[0]
    assert is_graded_check(cell), (
        f"{slug}: the first error of Run All is not in a graded check cell: {describe(index, cell, error)}"
    )
    # every graded check fails on the learner version (test_learner_versions.py asks nbgrader the same question)
    silent = [
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if is_graded_check(c) and not any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert not silent, f"{slug}: graded checks that did not stop on the learner version: {silent}"
