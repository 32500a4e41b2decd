"""What a learner sees when a lesson's cell stops: one line that says what to do, not a traceback.

Four kinds of stop are shown as their message alone:
- a check's verdict (`autograders.kit.CheckFailed`, `NotGradedHere`: subclasses of `LessonMessage`);
- `needs(...)` at the top of a cell that uses an exercise's result: "finish Exercise 1.5 first: ...";
- the bare `raise NotImplementedError()` of an exercise that is not written yet, reached from a later cell;
- a name used at the top level of a cell before the cell that defines it ran (a check run before its exercise):
  "`f` is not defined: run the cell that defines it first ...".

They stay *errors*: the cell fails for nbgrader, the Validate button and nbval exactly as before; only the display
changes, through IPython's custom exception hook (`InteractiveShell.set_custom_exc`). Every other exception keeps
IPython's full traceback. `import memlab` installs the display when it runs inside IPython.

A learner who is stuck on an exercise still sees what the sections after it show: before `needs(...)` stops a
cell, it displays that cell's outputs from the model solution, recorded on a CPU when the lesson was built
(`MODEL_OUTPUTS` in the lesson's folder, written by scripts/build_lessons.py; only the outputs of cells that call
`needs`, never an exercise's or a check's). In the learner version these cells and the exercise and check cells
carry the `raises-exception` tag (grading.learner_version.TagCellsThatMayRaise), so JupyterLab's Run All goes on
to the end of the lesson instead of stopping at the first unfinished exercise.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import sys
import textwrap
import unicodedata
from pathlib import Path

from memlab import protocol
from memlab.i18n import _

RED, RESET = "\x1b[0;31m", "\x1b[0m"
WIDTH = 110  # the width the lessons' prose is wrapped at
MODEL_OUTPUTS = (
    "model_solution_outputs.json"  # in a lesson's folder: {"cells": {cell_key(source): [outputs]}}
)


class LessonMessage(Exception):
    """An error whose message is everything the learner needs: shown without a traceback."""


class ExerciseNeeded(LessonMessage):
    """A cell uses the result of an exercise that is not done yet."""


# ---- is an exercise written yet? ----------------------------------------------------------------------------------


def _body_is_stub(body: list[ast.stmt]) -> bool:
    """A function body that is only (a docstring and) `raise NotImplementedError` / `raise NotImplementedError()`."""
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    if isinstance(exc, ast.Call) and not exc.args and not exc.keywords:
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _function_is_stub(fn) -> bool | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return _body_is_stub(node.body)


def unwritten_parts(obj) -> list[str] | None:
    """The parts of an exercise's function or class that still raise the lesson's stub ([] when none does), or None
    when the source cannot be read (then nothing can be said without running it). A class is read method by method
    (a class defined in a notebook cell has no readable source of its own)."""
    if isinstance(obj, type):
        methods = [
            value
            for value in vars(obj).values()
            if inspect.isfunction(value) and value.__qualname__.startswith(obj.__qualname__ + ".")
        ]
        verdicts = [(m.__qualname__, _function_is_stub(m)) for m in methods]
        if not verdicts or all(stub is None for _, stub in verdicts):
            return None
        return [name for name, stub in verdicts if stub]
    if inspect.isfunction(obj):
        stub = _function_is_stub(obj)
        return None if stub is None else ([obj.__name__] if stub else [])
    return None


def is_written(obj) -> bool:
    """False for an exercise that is still (entirely or partly) the stub the learner version ships with."""
    parts = unwritten_parts(obj)
    return not parts


def fill(text: str, width: int = WIDTH, indent: str = "  ", sep: str | None = None) -> str:
    """`text` wrapped to the lessons' width (a laptop's JupyterLab shows about 110 characters of output), the lines
    after the first indented; split only at `sep` when given (e.g. " | "), else at spaces."""
    if sep is None:
        return textwrap.fill(
            text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
    lines, line = [], ""
    for piece in text.split(sep):
        candidate = f"{line}{sep}{piece}" if line else piece
        if line and len(candidate) > width:
            lines.append(line + sep.rstrip())
            line = indent + piece
        else:
            line = candidate
    return "\n".join([*lines, line])


def display_width(text: str) -> int:
    """The columns `text` takes in a monospace output: 2 for a wide character (Hangul, CJK), 0 for a combining one,
    1 for the others (Unicode's East Asian Width, as terminals count)."""
    return sum(
        0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        for ch in text
    )


def pad(text: str, spec: str) -> str:
    """`text` aligned in a column as f"{text:<22}" would align it ("<22", ">15" or "^8"), counting display columns
    (`display_width`) instead of characters, so that a table header in Korean lines up with its columns. A table's
    header is written `pad("measured MiB", ">15")`: the translation replaces the text and keeps the column."""
    align, width = (spec[0], int(spec[1:])) if spec[:1] in "<>^" else ("<", int(spec))
    gap = max(0, width - display_width(text))
    if align == ">":
        return " " * gap + text
    if align == "^":
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap


def summary_table(rows) -> str:
    """A lesson's summary, `rows` a dict or (name, value) pairs of text, as two columns: the names left-aligned to
    the widest, two spaces, the values right-aligned to the widest, both by display columns (`pad`), so that the
    Korean edition's names, wider than they have characters, line up too. Every lesson ends with one."""
    pairs = [(str(name), str(value)) for name, value in (rows.items() if isinstance(rows, dict) else rows)]
    names = max((display_width(name) for name, _ in pairs), default=0)
    values = max((display_width(value) for _, value in pairs), default=0)
    return "\n".join(pad(name, f"<{names}") + "  " + pad(value, f">{values}") for name, value in pairs)


def cell_key(source: str) -> str:
    """The key of a cell's recorded outputs: a hash of its source (so an edited cell has none)."""
    return hashlib.sha256(source.strip().encode("utf-8")).hexdigest()[:20]


def _running_cell_source() -> str | None:
    """The source of the cell IPython is running now (its raw input history is stored before the cell runs)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    return history[-1] if history else None


def recorded_outputs(source: str | None, folder: Path | None = None) -> list[dict]:
    """The model solution's outputs of the cell with this source, from the lesson folder's MODEL_OUTPUTS ([] when
    there are none: another folder, an edited cell, a file that cannot be read)."""
    if not source:
        return []
    try:
        recorded = json.loads(((folder or Path.cwd()) / MODEL_OUTPUTS).read_text(encoding="utf-8"))
        outputs = recorded["cells"].get(cell_key(source), [])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return outputs if isinstance(outputs, list) else []


def show_recorded(outputs: list[dict], exercise: str) -> None:
    """Display recorded outputs (streams, rich displays) under a line that says where they come from."""
    from IPython.display import publish_display_data

    note = _(
        "{exercise} is not finished, so this cell stops. Below: what it shows with the model solution "
        "(recorded on a CPU when the lesson was built)."
    ).format(exercise=exercise)
    publish_display_data(data={"text/markdown": f"*{note}*", "text/plain": note})
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            stream = sys.stderr if output.get("name") == "stderr" else sys.stdout
            stream.write(output.get("text", ""))
            stream.flush()
        elif kind in ("display_data", "execute_result"):
            publish_display_data(data=output.get("data", {}), metadata=output.get("metadata", {}))


def needs(*names: str, exercise: str) -> None:
    """Stop the calling cell with one line unless every name is defined in it and written (not a stub).

    At the top of a cell that uses an exercise's result: `needs("BUDGET", exercise="Exercise 1.5")`. Before it stops
    the cell, it shows the model solution's recorded outputs of that cell (in learner mode, when the lesson folder
    has them), so the rest of the section can still be read.
    """
    namespace = sys._getframe(1).f_globals
    missing = []
    for name in names:
        if name not in namespace:
            missing.append(_("`{name}` is not defined").format(name=name))
        elif callable(namespace[name]) and not is_written(namespace[name]):
            missing.append(_("`{name}` is not written yet").format(name=name))
    if not missing:
        return
    shown = []
    if not os.environ.get(protocol.GRADING_ENV):  # a graded notebook gets no recorded outputs
        shown = recorded_outputs(_running_cell_source())
        if shown:
            show_recorded(shown, exercise)
    where = _(" Above: this cell's output with the model solution.") if shown else ""
    raise ExerciseNeeded(
        _("finish {exercise} first (run its cells): {missing}.{where}").format(
            exercise=exercise, missing="; ".join(missing), where=where
        )
    )


# ---- the display ------------------------------------------------------------------------------------------------


def _stub_function(tb) -> str | None:
    """The name of the learner's function when the innermost frame is the lesson's stub line, else None."""
    while tb.tb_next is not None:
        tb = tb.tb_next
    import linecache

    code = tb.tb_frame.f_code
    line = linecache.getline(code.co_filename, tb.tb_lineno).strip()
    if line in ("raise NotImplementedError()", "raise NotImplementedError"):
        return getattr(code, "co_qualname", code.co_name)
    return None


def _at_cell_top_level(tb) -> bool:
    """True when the innermost frame is a cell's own top-level code (not inside a function it calls)."""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name == "<module>" and tb.tb_frame.f_globals.get("__name__") == "__main__"


def message_lines(etype, value, tb) -> list[str] | None:
    """The one-message display of an exception, or None when it keeps IPython's traceback."""
    if issubclass(etype, LessonMessage):
        text = f"{etype.__name__}: {value}"
    elif etype is NotImplementedError and not str(value) and tb is not None:
        name = _stub_function(tb)
        if name is None:
            return None
        text = "NotImplementedError: " + _(
            "`{name}` is not written yet: write it (its exercise is above), run its cell, then this one."
        ).format(name=name)
    elif etype is NameError and tb is not None and _at_cell_top_level(tb) and getattr(value, "name", None):
        text = "NameError: " + _(
            "`{name}` is not defined: run the cell that defines it first (for a check, its exercise's cell "
            "above; or Run All from the top), or check its spelling."
        ).format(name=value.name)
    else:
        return None
    head, _sep, rest = text.partition(": ")
    wrapped = textwrap.fill(rest, WIDTH, initial_indent=" " * (len(head) + 2), subsequent_indent="  ")
    return [f"{RED}{head}{RESET}: {wrapped.lstrip()}"]


def _show(shell, etype, value, tb, tb_offset=None):
    lines = message_lines(etype, value, tb)
    if lines is None:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    else:
        shell._showtraceback(etype, value, lines)
    return None


def install_display() -> bool:
    """Show lesson messages without a traceback in this IPython kernel; False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((LessonMessage, NotImplementedError, NameError), _show)
    return True
