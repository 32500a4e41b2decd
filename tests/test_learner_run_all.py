""" "Run All" on a learner version reaches the end, and stops politely on the way.

A learner who opens a lesson and runs every cell, exercises not written yet, must reach the last cell (JupyterLab's
Run All goes past a cell tagged `raises-exception`; nbclient honours the same tag, so executing with errors NOT
allowed is Run All) and meet only the lessons' one-line messages, never a NameError, a KeyError or a traceback out
of a stub: a check that fails (`CheckFailed`, or `NotGradedHere` under strict grading), a cell that uses an
unfinished exercise (`ExerciseNeeded`, from `memlab.notebook.needs`, under the model solution's recorded outputs of
that cell), or the stub's own `NotImplementedError`, shown as "`f` is not written yet". The first stop must be a
graded check cell: the check sits directly under its exercise, so Run All meets the friendly verdict before any
demo calls the stub.

Each lesson's learner version is built in memory (scripts/build_lessons.render, what lessons/ holds) and executed
once, top to bottom, in one kernel, in a temporary folder with the lesson's other files, in learner mode. A second,
quick run executes only the setup cell and the check cells (a learner who runs a check before its exercise): each
must stop with the one-line "`name` is not defined: run the cell that defines it first" message, not a raw NameError.
"""

from __future__ import annotations

import nbformat
import pytest
from nbgrader_pipeline import SOLUTIONS, build_lessons, lesson_slugs

from autograders.kit import GRADING_ENV

pytestmark = pytest.mark.slow  # executes the learner versions: the full tier

FRIENDLY = {"CheckFailed", "ExerciseNeeded", "NotGradedHere"}
CELL_TIMEOUT = 300  # seconds per cell


def execute(nb, cwd, timeout: int = CELL_TIMEOUT):
    """Run All on `nb` (changed in place) in a fresh kernel whose cwd is `cwd`: an error stops it unless its cell is
    tagged `raises-exception`, as in JupyterLab."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    try:
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
            resources={"metadata": {"path": str(cwd)}},
            allow_errors=False,
            record_timing=False,
        ).execute()
    except CellExecutionError as error:
        ran = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count")]
        pytest.fail(
            f"Run All stopped at cell {ran[-1] if ran else '?'} of {len(nb.cells)}: an error in a cell not tagged "
            f"raises-exception (grading/learner_version.py tags exercise, check and needs(...) cells):\n"
            f"{str(error)[-1500:]}"
        )
    return nb


def released_folder(learner_versions, slug, folder):
    """Write the learner version of `slug` (notebook and files) into `folder`; its notebook."""
    for rel, data in learner_versions.items():
        lesson, _, name = rel.partition("/")
        if lesson == slug:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
    return nbformat.read(folder / f"{slug}.ipynb", as_version=4)


def is_graded_check(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


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
    nb = released_folder(learner_versions, slug, tmp_path)
    execute(nb, tmp_path)

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


@pytest.mark.parametrize("slug", lesson_slugs())
def test_a_stopped_needs_cell_shows_the_model_solutions_output(learner_versions, slug, tmp_path, monkeypatch):
    """Every `needs(...)` cell whose solution shows something has that output recorded next to the learner version,
    under the current source of the cell (the file is up to date), and nothing of an exercise or check cell is."""
    import json

    from grading.learner_version import is_exercise_or_check, uses_needs
    from memlab.notebook import MODEL_OUTPUTS, cell_key, recorded_outputs

    nb = released_folder(learner_versions, slug, tmp_path)
    solution = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
    keys = set(json.loads((tmp_path / MODEL_OUTPUTS).read_text())["cells"])
    shown = [c for c in solution.cells if uses_needs(c) and any(o.output_type != "error" for o in c.outputs)]
    assert shown, f"{slug}: no needs(...) cell with an output"
    for cell in shown:
        if any(
            o.output_type in ("display_data", "execute_result") or o.get("name") == "stdout"
            for o in cell.outputs
        ):
            assert recorded_outputs(cell.source, tmp_path), (
                f"{slug}: no recorded output for {cell.source[:80]!r}"
            )
    graded = {cell_key(c.source) for c in nb.cells if is_exercise_or_check(c)}
    assert not keys & graded, f"{slug}: an exercise's or a check's output is recorded"


@pytest.mark.parametrize("slug", lesson_slugs())
def test_a_check_run_before_its_exercise_says_what_to_run(learner_versions, slug, tmp_path, monkeypatch):
    monkeypatch.delenv(GRADING_ENV, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    nb = released_folder(learner_versions, slug, tmp_path)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    checks = [c for c in nb.cells if is_graded_check(c)]
    nb.cells = [nb.cells[first_code], *checks]
    execute(nb, tmp_path)
    for cell in checks:
        found = [o for o in cell.outputs if o.get("output_type") == "error"]
        assert found, f"{slug}: {cell.metadata.nbgrader.grade_id} passed with no exercise run"
        assert is_friendly(found[0]), (
            f"{slug}: {cell.metadata.nbgrader.grade_id}: not a one-line message: {found[0]['ename']}: "
            f"{found[0]['traceback'][-1][:300]}"
        )
