"""What the judge's fresh process runs before it measures the learner's code again (grading/rerun.py, `definitions`):
the statements the check's call needs, and nothing else. A lesson cell that builds a model, profiles a step or draws
a plot that nothing the call reaches reads is not run again (on a CPU each such assignment costs up to
`LESSON_SECONDS`, on a GPU at GPU sizes as much per check); a learner's statement that binds nothing the call reaches
(an unrelated function with its decorators and default values, a patch, a loop) never runs.
"""

from __future__ import annotations

import ast

import nbformat
import pytest
from nbgrader_pipeline import SOLUTIONS, lesson_slugs

from grading.autograde import definitions_source
from grading.judge import CheckCall, parse_check_cell
from grading.rerun import LEARNER_SECONDS, LESSON_SECONDS, call_roots, definitions, needed
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


def test_only_what_the_call_needs_is_loaded():
    selected = definitions(LESSON, {"train_step"})
    assert codes(selected) == [
        "SIZES = dict(width=8)",  # read by LM's and SCALE's assignments
        "LM = build(SIZES['width'])",  # train_step's default
        "OPT = make(LM)",  # train_step's default
        "def train_step(model=LM, optimizer=OPT):\n    return helper(model)",
        "def helper(m):\n    for _ in range(2):\n        pass\n    return SCALE * m",
        "SCALE = float(SIZES['width'])",  # read by helper's body
    ]
    # `import torch`, `SUMMARY = {}` and `unrelated` are read by nothing the call reaches: not loaded
    assert [seconds for _code, seconds in selected] == [LESSON_SECONDS] * 3 + [0, 0, LESSON_SECONDS]


def test_without_the_call_every_statement_that_binds_a_name_is_loaded():
    every = definitions(LESSON)
    timed = [code for code, seconds in every if seconds]
    assert timed == [
        "SIZES = dict(width=8)",
        "LM = build(SIZES['width'])",
        "OPT = make(LM)",
        "FIG = draw()",
        "SUMMARY['peak'] = slow_profile(LM)",
        "SCALE = float(SIZES['width'])",
        "RESULT = train_for_an_hour()",
    ]
    assert "import torch" in codes(every) and "def unrelated():\n    return FIG" in codes(every)


def test_the_learner_s_statements_load_only_when_the_call_needs_them():
    """Honest shapes a learner mode accepts: an alias of a library function, a factory, a try-import; and what never
    runs: a statement that binds nothing (a patch, a loop), an unrelated function's decorator and default value."""
    cells = [
        ["import time\nimport functools", False],
        ["_clock = time.perf_counter", False],
        ["def make_timer(clock):\n    def timer(fn):\n        return clock()\n    return timer", False],
        ["time_step = make_timer(_clock)", False],
        ["try:\n    import fast_timer\nexcept ImportError:\n    fast_timer = None", False],
        ["time.sleep = lambda s: None\nfor _ in range(3):\n    time_step(print)", False],
        ["@functools.cache\ndef unrelated(x=print('defined')):\n    return x", False],
    ]
    selected = definitions(cells, {"time_step", "fast_timer"})
    assert codes(selected) == [
        ast.unparse(
            ast.parse(cells[0][0]).body[0]
        ),  # import time (functools: only the unrelated decorator's)
        *(ast.unparse(ast.parse(cells[i][0])) for i in (1, 2, 3, 4)),
    ]
    assert [seconds for _code, seconds in selected] == [
        0,
        LEARNER_SECONDS,
        0,
        LEARNER_SECONDS,
        LEARNER_SECONDS,
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
            yield (
                call,
                definitions(cells, call_roots(call)),
                [c for c, seconds in definitions(cells) if seconds],
            )


@pytest.mark.parametrize("slug", [s for s in lesson_slugs() if s.startswith(("03", "04", "06", "08"))])
def test_a_lessons_rerun_loads_few_of_its_assignments(slug):
    """The real lessons: each check collected again loads a few of the lesson's assignments, not its models and
    plots (lesson 06's Exercise 6.2 times a function given to it: none of the lesson's 38 is needed)."""
    for call, selected, every in _rerun_calls(slug):
        timed = [code for code, seconds in selected if seconds == LESSON_SECONDS]
        assert len(timed) <= max(10, len(every) // 3), (call.function, timed)
        assert not any(code.startswith(("fig", "FIG", "PEAKS")) for code in timed), (call.function, timed)
