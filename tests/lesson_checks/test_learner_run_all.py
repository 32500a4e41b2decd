""" "Run All" on a learner version reaches the end, and stops politely on the way (what that means: run_all.py).

Each lesson's learner version is built in memory (scripts/build_lessons.render, what lessons/ holds) and executed
once, top to bottom, in one kernel (nbclient honours the `raises-exception` tag as JupyterLab's Run All does, so
executing with errors NOT allowed is Run All), in a temporary folder with the lesson's other files, in learner mode.
Where a browser can be had, the lessons the browser test serves unchanged are run there instead, once, and the same
assertions read the notebook JupyterLab saved (test_browser.py). A second, quick run executes only the setup cell
and the check cells (a learner who runs a check before its exercise): each must stop with the one-line "`name` is
not defined: run the cell that defines it first" message, not a raw NameError.
"""

from __future__ import annotations

import nbformat
import pytest
from nbgrader_pipeline import SOLUTIONS, build_lessons, lesson_slugs
from run_all import (
    SOLVED_IN_THE_BROWSER,
    assert_run_all_stops_politely,
    is_friendly,
    no_browser,
)

from autograders.kit import GRADING_ENV
from grading.submission import is_test_cell

pytestmark = pytest.mark.slow  # executes the learner versions: the full tier

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
    if slug not in SOLVED_IN_THE_BROWSER and no_browser() is None:
        pytest.skip(
            "asserted on the browser's Run All of this lesson, saved (test_browser.py): one run, not two"
        )
    nb = released_folder(learner_versions, slug, tmp_path)
    execute(nb, tmp_path)
    assert_run_all_stops_politely(nb, slug)


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
    checks = [c for c in nb.cells if is_test_cell(c)]
    nb.cells = [nb.cells[first_code], *checks]
    execute(nb, tmp_path)
    for cell in checks:
        found = [o for o in cell.outputs if o.get("output_type") == "error"]
        assert found, f"{slug}: {cell.metadata.nbgrader.grade_id} passed with no exercise run"
        assert is_friendly(found[0]), (
            f"{slug}: {cell.metadata.nbgrader.grade_id}: not a one-line message: {found[0]['ename']}: "
            f"{found[0]['traceback'][-1][:300]}"
        )
