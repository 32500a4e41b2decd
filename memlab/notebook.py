"""What a learner sees when a lesson's cell stops: one line that says what to do, not a traceback.

Three kinds of stop are shown as their message alone:
- a check's verdict (`autograders.kit.CheckFailed`, `NotGradedHere`: subclasses of `LessonMessage`);
- `needs(...)` at the top of a cell that uses an exercise's result: "finish Exercise 1.5 first: ...";
- the bare `raise NotImplementedError()` of an exercise that is not written yet, reached from a later cell.

They stay *errors*: the cell fails for nbgrader, the Validate button and nbval exactly as before; only the display
changes, through IPython's custom exception hook (`InteractiveShell.set_custom_exc`). Every other exception keeps
IPython's full traceback. `import memlab` installs the display when it runs inside IPython.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap

RED, RESET = "\x1b[0;31m", "\x1b[0m"
WIDTH = 110  # the width the lessons' prose is wrapped at


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


def needs(*names: str, exercise: str) -> None:
    """Stop the calling cell with one line unless every name is defined in it and written (not a stub).

    At the top of a cell that uses an exercise's result: `needs("BUDGET", exercise="Exercise 1.5")`.
    """
    namespace = sys._getframe(1).f_globals
    missing = []
    for name in names:
        if name not in namespace:
            missing.append(f"`{name}` is not defined")
        elif callable(namespace[name]) and not is_written(namespace[name]):
            missing.append(f"`{name}` is not written yet")
    if missing:
        raise ExerciseNeeded(f"finish {exercise} first (run its cells): {'; '.join(missing)}.")


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


def message_lines(etype, value, tb) -> list[str] | None:
    """The one-message display of an exception, or None when it keeps IPython's traceback."""
    if issubclass(etype, LessonMessage):
        text = f"{etype.__name__}: {value}"
    elif etype is NotImplementedError and not str(value) and tb is not None:
        name = _stub_function(tb)
        if name is None:
            return None
        text = (
            f"NotImplementedError: `{name}` is not written yet: write it (its exercise is above), run its cell, "
            "then this one."
        )
    else:
        return None
    head, _, rest = text.partition(": ")
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
    shell.set_custom_exc((LessonMessage, NotImplementedError), _show)
    return True
