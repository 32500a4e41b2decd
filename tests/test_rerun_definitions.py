"""What the judge's fresh process loads before it measures the learner's code again (grading/rerun.py, `definitions`):
every import, function, class and literal constant, and of the lesson's own assignments only those the check's call
needs. A lesson cell that builds a model, profiles a step or draws a plot that nothing the call reaches reads is not
run again: on a CPU each such assignment costs up to `ASSIGNMENT_SECONDS`, on a GPU at GPU sizes as much per check.
"""

from __future__ import annotations

import nbformat
import pytest
from nbgrader_pipeline import SOLUTIONS, lesson_slugs

from grading.autograde import definitions_source
from grading.judge import CheckCall, parse_check_cell
from grading.rerun import call_roots, definitions, needed
from grading.submission import is_test_cell

LESSON = [
    # the lesson's own setup cell: a model, its optimizer, a plot nobody reads, a table it fills
    [
        "import torch\nSIZES = dict(width=8)\nLM = build(SIZES['width'])\nOPT = make(LM)\nFIG = draw()\n"
        "SUMMARY = {}\nSUMMARY['peak'] = slow_profile(LM)",
        True,
    ],
    # the learner's cells: a step whose defaults read the model, a helper it calls, a function the check never sees
    ["def train_step(model=LM, optimizer=OPT):\n    return helper(model)", False],
    ["def helper(m):\n    for _ in range(2):\n        pass\n    return SCALE * m", False],
    ["def unrelated():\n    return FIG", False],
    # the lesson's own again: one constant the helper reads, one expensive run nobody reads
    ["SCALE = float(SIZES['width'])\nRESULT = train_for_an_hour()", True],
]


def codes(selected: list[list]) -> list[str]:
    return [code for code, _timed in selected]


def test_only_the_lesson_assignments_the_call_needs_are_loaded():
    selected = definitions(LESSON, {"train_step"})
    assert codes(selected) == [
        "import torch",
        "SIZES = dict(width=8)",  # read by LM's and SCALE's assignments
        "LM = build(SIZES['width'])",  # train_step's default
        "OPT = make(LM)",  # train_step's default
        "SUMMARY = {}",  # a literal constant: always loaded, as every definition is
        "def train_step(model=LM, optimizer=OPT):\n    return helper(model)",
        "def helper(m):\n    for _ in range(2):\n        pass\n    return SCALE * m",
        "def unrelated():\n    return FIG",  # a definition costs nothing to load: kept
        "SCALE = float(SIZES['width'])",  # read by helper's body
    ]
    assert [timed for _code, timed in selected] == [False, True, True, True, False, False, False, False, True]


def test_without_the_call_every_lesson_assignment_is_loaded_as_before():
    timed = [code for code, timed in definitions(LESSON) if timed]
    assert timed == [
        "SIZES = dict(width=8)",
        "LM = build(SIZES['width'])",
        "OPT = make(LM)",
        "FIG = draw()",
        "SUMMARY['peak'] = slow_profile(LM)",
        "SCALE = float(SIZES['width'])",
        "RESULT = train_for_an_hour()",
    ]


def test_a_name_stored_into_makes_its_statement_needed():
    """`SUMMARY["peak"] = ...` writes SUMMARY: a function that reads SUMMARY needs it, and what it reads."""
    cells = [*LESSON, ["def report():\n    return SUMMARY['peak']", False]]
    assert "SUMMARY['peak'] = slow_profile(LM)" in codes(definitions(cells, {"report"}))
    assert "FIG = draw()" not in codes(definitions(cells, {"report"}))


def test_the_names_a_call_reads_are_its_arguments_expressions():
    call = CheckCall("m", "check_x", ("fn", "MODELS['a']"), (("sync", "make_sync(DEVICE)"),))
    assert call_roots(call) == {"fn", "MODELS", "make_sync", "DEVICE"}


def test_needed_follows_reads_through_statements_in_any_order():
    import ast

    statements = [
        ast.parse(code).body[0] for code in ("a = b + 1", "b = c", "c = 2", "d = 4", "def f():\n    return a")
    ]
    assert needed(statements, {"f"}) == {0, 1, 2, 4}
    assert needed(statements, {"nothing"}) == set()


def _rerun_calls(slug: str):
    """(check call, the definitions a rerun of it loads, every timed assignment) for each check of the lesson's
    solution that is collected again."""
    import importlib

    nb = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
    cells = definitions_source(nb, nb)
    for cell in [c for c in nb.cells if is_test_cell(c)]:
        call = parse_check_cell(cell.source)
        declared = getattr(importlib.import_module(call.module), call.function).check
        if declared.rerun:
            yield call, definitions(cells, call_roots(call)), [c for c, timed in definitions(cells) if timed]


@pytest.mark.parametrize("slug", [s for s in lesson_slugs() if s.startswith(("03", "04", "06", "08"))])
def test_a_lessons_rerun_loads_few_of_its_assignments(slug):
    """The real lessons: each check collected again loads a few of the lesson's assignments, not its models and
    plots (lesson 06's Exercise 6.2 times a function given to it: none of the lesson's 38 is needed)."""
    for call, selected, every in _rerun_calls(slug):
        timed = [code for code, timed in selected if timed]
        assert len(timed) <= max(10, len(every) // 3), (call.function, timed)
        assert not any(code.startswith(("fig", "FIG", "PEAKS")) for code in timed), (call.function, timed)
