"""Grading skips a lesson's demonstrations that no check depends on (grading/demonstrations.py), and only those.

What is skipped is decided from the lesson's source (its cells tagged `skip-when-grading`) and the submission's code,
never from the submission's metadata; a tagged cell still runs where a later cell, the learner's own included, reads
what it binds. The end-to-end proof (every solution full marks with its demonstrations skipped, lesson 08's run
evaluated as handed in) is the grading round trip.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

from grading import demonstrations
from grading.demonstrations import SKIPPED, TAG, decide, skip, tagged_sources, unsafe_tags

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((ROOT / "solutions").glob("*/*.ipynb"))
LESSON_08 = ROOT / "solutions" / "08-capstone-7b-lora" / "08-capstone-7b-lora.ipynb"


def _code(source: str, tags=(), nbgrader=None):
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.parent.name for p in SOLUTIONS])
def test_every_lesson_tags_only_cells_grading_can_skip(path):
    assert unsafe_tags(nbformat.read(path, as_version=4)) == []


def test_lesson_08_skips_its_training_and_demonstrations_when_its_solution_is_graded():
    nb = nbformat.read(LESSON_08, as_version=4)
    skipped, kept = decide(nb, tagged_sources(nb))
    assert kept == {}
    sources = [nb.cells[i].source for i in skipped]
    assert any(
        "run_capstone(RUN_DIR)" in s for s in sources
    )  # the graded run is handed in, not trained again
    assert any("prepare_model_for_kbit_training" in s for s in sources)  # QLoRA
    graded = {i for i, c in enumerate(nb.cells) if (c.metadata.get("nbgrader") or {}).get("grade")}
    assert graded and not graded & set(skipped)


SOURCE = _notebook(
    _code("SIZES = {'n': 3}"),
    _code("def square(x):\n    return x * x", nbgrader={"solution": True, "grade_id": "e1"}),
    _code("check_square(square)", nbgrader={"grade": True, "grade_id": "e1_check", "points": 1}),
    _code("TABLE = [square(i) for i in range(SIZES['n'])]\nSUMMARY['table'] = TABLE", tags=[TAG]),
    _code("print(SUMMARY)", tags=[TAG]),
)


def test_a_submission_s_unchanged_demonstrations_are_commented_out_and_nothing_else():
    submission = copy.deepcopy(SOURCE)
    assert skip(submission, SOURCE) == [3, 4]
    assert submission.cells[3].source.splitlines()[0] == SKIPPED
    assert submission.cells[3].source.splitlines()[1] == "# TABLE = [square(i) for i in range(SIZES['n'])]"
    assert [c.source for c in submission.cells[:3]] == [c.source for c in SOURCE.cells[:3]]


def test_a_changed_demonstration_runs():
    submission = copy.deepcopy(SOURCE)
    submission.cells[3].source += "\nprint('mine')"
    assert skip(submission, SOURCE) == [4]


def test_a_tag_the_submission_adds_skips_nothing():
    submission = copy.deepcopy(SOURCE)
    for cell in submission.cells:
        cell.metadata["tags"] = [TAG]
    del SOURCE.cells[3].metadata["tags"], SOURCE.cells[4].metadata["tags"]
    try:
        assert skip(submission, SOURCE) == []
    finally:
        SOURCE.cells[3].metadata["tags"] = [TAG]
        SOURCE.cells[4].metadata["tags"] = [TAG]


def test_a_learner_function_that_reads_a_demonstration_s_global_keeps_it_running():
    """`TABLE` is bound by a demonstration; a learner's cell after it that reads it (in a function body) keeps it."""
    submission = copy.deepcopy(SOURCE)
    submission.cells.append(_code("def mine():\n    return TABLE[-1]\n\nmine()"))
    skipped, kept = decide(submission, tagged_sources(SOURCE))
    assert skipped == [4] and 3 in kept and "TABLE" in kept[3]


def test_names_read_are_the_cell_s_globals_not_its_functions_own():
    code = "def f(checkpointing):\n    p = [q for q in range(3)]\n    return checkpointing + TOP + p[0]\nSUMMARY['k'] = v"
    assert demonstrations.read_names(code) == {"TOP", "range", "v"}
    assert demonstrations.bound_names(
        "import bitsandbytes as bnb\nfor m in x:\n    m.flag = 1\nSUMMARY['a'] = 1"
    ) == {
        "bnb",
        "m",
        "SUMMARY",
    }


def test_a_tag_on_a_graded_cell_or_on_a_cell_the_solution_needs_is_refused():
    nb = copy.deepcopy(SOURCE)
    nb.cells[2].metadata["tags"] = [TAG]
    nb.cells[4].metadata["tags"] = []  # the summary now runs, and reads what cell 3 stores into
    problems = unsafe_tags(nb)
    assert any(p.startswith("cell 2: only a lesson's own code cell") for p in problems)
    assert any(p.startswith("cell 3: binds ['SUMMARY']") for p in problems)
