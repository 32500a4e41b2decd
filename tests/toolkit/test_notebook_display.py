"""memlab.notebook: in a real kernel, a lesson's own errors are one message (no frame of the kit) and still errors.

The cells run in a fresh IPython kernel through nbclient, as JupyterLab, nbval and nbgrader run them.
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest

from memlab.notebook import (
    MODEL_OUTPUTS,
    ExerciseNeeded,
    cell_key,
    display_width,
    message_lines,
    needs,
    pad,
    summary_table,
)

RECORDED_CELL = "memlab.notebook.needs('TOTAL', exercise='Exercise 9.2')\nprint(TOTAL)"

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("lesson")
    recorded = [
        {"output_type": "stream", "name": "stdout", "text": "TOTAL = 42 (recorded)\n"},
        {"output_type": "display_data", "data": {"text/plain": "<a recorded figure>"}, "metadata": {}},
    ]
    (folder / MODEL_OUTPUTS).write_text(json.dumps({"cells": {cell_key(RECORDED_CELL): recorded}}))

    cells = [
        "import memlab\nfrom autograders.kit import check, call, expect_callable, expect_close",
        # a check failing on a wrong answer
        "@check('e9_double', points=1)\ndef check_double(double):\n    expect_callable(double, 'double')\n"
        "    for x in (0, 5):\n        expect_close(call(double, x, case=f'x={x}'), 2 * x, case=f'x={x}', "
        "what='double(x)', reveal=False)\n    return 2\n\n"
        "check_double(lambda x: 3 * x)",
        # the stub of an exercise, then a demo cell that calls it
        "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()",
        "print(double(4))",
        # a cell that needs an exercise's result
        "memlab.notebook.needs('BUDGET', 'double', exercise='Exercise 9.1')\nprint(BUDGET)",
        # an ordinary error keeps its traceback
        "def helper():\n    return {}['missing']\n\nhelper()",
        # a passing check
        "check_double(lambda x: 2 * x)",
        # a check run before its exercise's cell
        "check_double(triple)",
        # a NameError inside a function keeps its traceback (a typo in the learner's code)
        "def typo():\n    return undefined_thing\n\ntypo()",
        # a needs(...) cell with the model solution's outputs recorded in the lesson's folder
        RECORDED_CELL,
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(
        nb,
        timeout=120,
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    ).execute()
    return nb.cells


def _error(cell):
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1, cell.outputs
    return errors[0]


def test_a_failed_check_is_its_message_alone(executed):
    error = _error(executed[1])
    assert error.ename == "CheckFailed"
    assert error.evalue.startswith("e9_double: case x=5: double(x) is too high")
    text = ANSI.sub("", "\n".join(error.traceback))
    assert text.startswith("CheckFailed: e9_double: case x=5: double(x) is too high")
    assert "kit.py" not in text and "Traceback" not in text and "raise CheckFailed" not in text
    assert len(error.traceback) == 1


def test_a_stub_reached_from_a_later_cell_says_it_is_not_written(executed):
    error = _error(executed[3])
    assert error.ename == "NotImplementedError"
    text = ANSI.sub("", "\n".join(error.traceback))
    assert text.startswith("NotImplementedError: `double` is not written yet")
    assert "Traceback" not in text


def test_needs_names_the_exercise_to_finish_first(executed):
    error = _error(executed[4])
    assert error.ename == "ExerciseNeeded"
    assert error.evalue == (
        "finish Exercise 9.1 first (run its cells): `BUDGET` is not defined; `double` is not written yet."
    )
    assert not any(o.output_type == "stream" for o in executed[4].outputs)  # print(BUDGET) never ran


def test_other_errors_keep_their_traceback(executed):
    error = _error(executed[5])
    assert error.ename == "KeyError"
    text = ANSI.sub("", "\n".join(error.traceback))
    assert "helper()" in text and "return {}['missing']" in text


def test_a_passing_check_prints_one_line(executed):
    outputs = executed[6].outputs
    assert [o.output_type for o in outputs] == ["stream"]
    assert outputs[0].text == "✓ e9_double: 2 cases passed\n"


def test_needs_outside_a_kernel():
    BUDGET = 1  # noqa: F841 - read by needs() from this frame's globals, not locals
    with pytest.raises(ExerciseNeeded, match="`NOT_DEFINED_ANYWHERE` is not defined"):
        needs("NOT_DEFINED_ANYWHERE", exercise="Exercise 1.5")
    needs("pytest", exercise="Exercise 1.5")  # a module-level name of this file: fine


def test_message_lines_wraps_long_messages_and_leaves_other_errors_alone():
    lines = message_lines(ExerciseNeeded, ExerciseNeeded("word " * 60), None)
    assert len(lines) == 1
    assert all(len(ANSI.sub("", line)) <= 112 for line in lines[0].splitlines())
    assert message_lines(KeyError, KeyError("x"), None) is None
    assert message_lines(NotImplementedError, NotImplementedError("sum_cpu not implemented"), None) is None


def test_a_name_used_before_its_cell_ran_says_what_to_run(executed):
    error = _error(executed[7])
    assert error.ename == "NameError"  # still an error for nbgrader and nbval
    text = ANSI.sub("", "\n".join(error.traceback))
    assert len(error.traceback) == 1, text
    assert text.startswith("NameError: `triple` is not defined: run the cell that defines it first"), text


def test_a_name_error_inside_a_function_keeps_its_traceback(executed):
    error = _error(executed[8])
    text = ANSI.sub("", "\n".join(error.traceback))
    assert len(error.traceback) > 1 and "typo()" in text and "undefined_thing" in text, text


def test_needs_shows_the_recorded_outputs_of_its_cell_then_stops(executed):
    outputs = executed[9].outputs
    kinds = [o.output_type for o in outputs]
    assert kinds[-1] == "error" and outputs[-1].ename == "ExerciseNeeded", kinds
    assert "Above: this cell's output with the model solution" in outputs[-1].evalue
    shown = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs[:-1])
    assert "Exercise 9.2 is not finished" in shown
    assert "TOTAL = 42 (recorded)" in shown and "<a recorded figure>" in shown, shown


def test_needs_without_a_recorded_output_only_stops(executed):
    outputs = executed[4].outputs
    assert [o.output_type for o in outputs] == ["error"]
    assert "Above:" not in outputs[0].evalue


def test_pad_aligns_a_header_by_display_columns():
    for text in ("peak", "predicted MiB", "", "a header longer than its column"):
        for spec in ("<22", ">15", "^9", "8"):
            assert pad(text, spec) == format(text, spec)  # English: what the f-string gave
    assert display_width("최대 MiB") == 8  # a Hangul syllable takes two columns
    assert pad("최대 MiB", ">12") == "    최대 MiB" and display_width(pad("최대 MiB", "<12")) == 12
    assert display_width(pad("단계", "^7")) == 7


def test_a_summary_table_lines_up_in_english_and_in_korean_by_display_columns():
    english = {
        "peak (MiB)": "12.5",
        "steps per second, after warm-up": "3.25",
        "x": "not measured (no CUDA GPU)",
    }
    names, values = max(map(len, english)), max(map(len, english.values()))
    assert summary_table(english) == "\n".join(f"{k:<{names}}  {v:>{values}}" for k, v in english.items())
    assert summary_table(list(english.items())) == summary_table(english)
    korean = {
        "최대 메모리 (MiB)": "12.5",
        "워밍업 후 초당 스텝 수": "3.25",
        "QLoRA, 60 스텝: 정확도": "0.645",
    }
    lines = summary_table(korean).splitlines()
    assert len({display_width(line) for line in lines}) == 1, lines  # every row as wide as the others
    assert all(line.endswith(value) for line, value in zip(lines, korean.values(), strict=True))
    assert summary_table({}) == ""
