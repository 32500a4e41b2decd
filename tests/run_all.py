"""What "Run All" on a learner version must show, asserted on a notebook a run left behind: by nbclient
(test_learner_run_all.py) or by JupyterLab in the browser, saved after its Run All (test_browser.py). Each lesson is
run once per test session for these assertions: in the browser where one can be had, else by nbclient.

A learner who opens a lesson and runs every cell, exercises not written yet, must reach the last cell and meet only
the lessons' one-line messages, never a NameError, a KeyError or a traceback out of a stub: a check that fails
(`CheckFailed`, or `NotGradedHere` under strict grading), a cell that uses an unfinished exercise (`ExerciseNeeded`,
from `memlab.notebook.needs`, under the model solution's recorded outputs of that cell), or the stub's own
`NotImplementedError`, shown as "`f` is not written yet". The first stop must be a graded check cell: the check sits
directly under its exercise, so Run All meets the friendly verdict before any demo calls the stub.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

from grading.submission import is_test_cell

FRIENDLY = {"CheckFailed", "ExerciseNeeded", "NotGradedHere"}
#: lessons the browser test serves with some exercises solved: their learner Run All is nbclient's
SOLVED_IN_THE_BROWSER = ("02-numeric-formats", "03-amp-gradscaler")


def chromium_path() -> str:
    return os.environ.get("MEMLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def no_chromium() -> str | None:
    """Why chromium cannot be started here, or None."""
    path = chromium_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return f"no browser: chromium not found at {path} (apt-get install chromium, or set MEMLAB_CHROMIUM)"
    return None


def no_browser() -> str | None:
    """Why the browser tests cannot run here (no chromium, or no Playwright), or None."""
    if no_chromium():
        return no_chromium()
    if importlib.util.find_spec("playwright") is None:
        return "no browser driver: pip install -r requirements-test.txt"
    return None


def is_friendly(error) -> bool:
    """One of the lessons' one-line stops (memlab.notebook's display: a traceback of one line, no frames)."""
    if error.get("ename") in FRIENDLY:
        return True
    traceback = error.get("traceback", [])
    one_line = {
        "NotImplementedError": "is not written yet",
        "NameError": "run the cell that defines it first",
    }
    phrase = one_line.get(error.get("ename"))
    return phrase is not None and len(traceback) == 1 and phrase in traceback[0]


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


def assert_run_all_stops_politely(nb, slug: str) -> None:
    """The assertions on a learner version after Run All (the module's docstring)."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), f"{slug}: Run All did not run every code cell"

    found = errors(nb)
    assert found, f"{slug}: Run All on the learner version raised nothing: no exercise stops it"
    unfriendly = [describe(*e) for e in found if not is_friendly(e[2])]
    assert not unfriendly, (
        f"{slug}: Run All on the learner version meets errors that are not a check's verdict, "
        "ExerciseNeeded or 'not written yet' (guard the cell with memlab.notebook.needs):\n"
        + "\n".join(unfriendly)
    )
    # a stopped needs(...) cell shows the model solution's output of that cell above its message
    shown = [
        c
        for _, c, e in found
        if e.get("ename") == "ExerciseNeeded"
        and "this cell's output with the model solution" in e.get("evalue", "")
    ]
    assert shown, f"{slug}: no stopped cell showed the model solution's recorded output"
    for c in shown:
        kinds = [o.get("output_type") for o in c.outputs]
        assert kinds.index("error") > 1, f"{slug}: a cell says it showed recorded outputs but shows {kinds}"
    index, cell, error = found[0]
    assert is_test_cell(cell), (
        f"{slug}: the first error of Run All is not in a graded check cell: {describe(index, cell, error)}"
    )
    # every graded check fails on the learner version (test_learner_versions.py asks nbgrader the same question)
    silent = [
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if is_test_cell(c) and not any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert not silent, f"{slug}: graded checks that did not stop on the learner version: {silent}"
