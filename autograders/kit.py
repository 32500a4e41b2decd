"""The check kit every lesson's autograder is built from (design brief §4).

A check is a function decorated with `@check("eK_slug")` that takes the learner's object, runs it on its own cases
and returns how many cases it ran. The decorator turns every failure into one `CheckFailed` with a message that
says which case, what was expected, what was got and the tolerance, raised from the check's own frame so the
learner sees no traceback from inside the kit. On success it prints one line and returns None (nbgrader would read
a returned value as partial credit).

`@requires(...)` declares hardware or packages a check needs. Where they are missing, a learner sees
`NOT CHECKED HERE: needs ..., found ...`; under `COURSE_GRADING=strict` (set by scripts/grade.py) the check raises
`NotGradedHere` with the same text instead, so the instructor sees why the cell scored 0.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import traceback

from memlab.hardware import unmet_requirements

GRADING_ENV = "COURSE_GRADING"


class CheckFailed(AssertionError):
    """The learner's answer is wrong; the message says how."""


class NotGradedHere(RuntimeError):
    """Strict grading on a machine that lacks what the check needs."""


def grading_strict() -> bool:
    return os.environ.get(GRADING_ENV, "").lower() == "strict"


def check(name: str):
    """Decorate a check: clean failure messages, one success line, returns None."""

    def decorate(check_fn):
        @functools.wraps(check_fn)
        def run(*args, **kwargs):
            try:
                n_cases = check_fn(*args, **kwargs)
            except CheckFailed as failure:
                message = f"{name}: {failure}"
            except NotGradedHere:
                raise
            except Exception as bug:  # a bug in the check itself: say so plainly, never blame the learner
                raise RuntimeError(
                    f"{name}: the check itself crashed ({type(bug).__name__}: {bug})."
                ) from bug
            else:
                if n_cases is not None:  # None: an inner @requires printed NOT CHECKED HERE, so no ✓ line
                    print(f"✓ {name}: {n_cases} case{'s' if n_cases != 1 else ''} passed")
                return None
            raise CheckFailed(message) from None

        run.check_name = name
        return run

    return decorate


def requires(
    cuda: bool = False,
    min_capability: tuple[int, int] | None = None,
    min_gpu_gb: float | None = None,
    packages: tuple[str, ...] = (),
):
    """Run the decorated check only where the hardware / packages are present (see module docstring)."""

    def decorate(check_fn):
        @functools.wraps(check_fn)
        def run(*args, **kwargs):
            unmet = unmet_requirements(cuda, min_capability, min_gpu_gb, packages)
            if unmet is None:
                return check_fn(*args, **kwargs)
            needs, found = unmet
            message = f"NOT CHECKED HERE: needs {needs}, found {found}"
            if grading_strict():
                raise NotGradedHere(message) from None
            print(message)
            return None

        return run

    return decorate


# ---- the stages of a check: exists / callable -> type, shape, dtype, device -> values --------------------------


def expect_callable(obj, name: str) -> None:
    if obj is None or obj is ...:
        raise CheckFailed(f"`{name}` is not defined yet (it is None): write it, run its cell, then this one.")
    if not callable(obj):
        raise CheckFailed(f"`{name}` should be a function; got a {type(obj).__name__}.")


def call(fn, *args, case: str, **kwargs):
    """Call the learner's function; if it raises, fail with its error and the line of their code that raised."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        # only the lesson stub's bare `raise NotImplementedError()` means "not written yet"; torch raises
        # NotImplementedError with a message for a missing kernel (e.g. "sum_cpu" not implemented for 'Float8_e4m3fn')
        if type(error) is NotImplementedError and not str(error):
            message = "your function raised NotImplementedError: it is not written yet."
            raise CheckFailed(f"case {case}: {message}") from None
        where = _learner_line(error)
        raise CheckFailed(
            f"case {case}: your function raised {type(error).__name__}: {error}{where}"
        ) from None


def _learner_line(error: BaseException) -> str:
    """' (at <file>:<line>: <code>)' for the innermost frame outside this kit and outside site-packages."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if f.filename != __file__ and "site-packages" not in f.filename]
    if not own:
        return ""
    frame = own[-1]
    where = "your code" if frame.filename.startswith("<") or "ipykernel" in frame.filename else frame.filename
    code = f": {frame.line.strip()}" if frame.line else ""
    return f" (at line {frame.lineno} of {where}{code})"


_TYPE_NAMES = {
    numbers.Integral: "an int",
    numbers.Real: "a number",
    int: "an int",
    float: "a float",
    dict: "a dict",
}


def expect_type(got, types, *, case: str, what: str) -> None:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(got, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(got, types)
    if not ok:
        wanted = " or ".join(_TYPE_NAMES.get(t, f"a {t.__name__}") for t in types)
        raise CheckFailed(f"case {case}: {what} should be {wanted}; got {_describe(got)}.")


def expect_finite(got, *, case: str, what: str) -> None:
    value = float(got)
    if not math.isfinite(value):
        raise CheckFailed(f"case {case}: {what} should be a finite number; got {value}.")


def expect_close(
    got,
    expected,
    *,
    case: str,
    what: str,
    rtol: float = 0.0,
    atol: float = 0.0,
    reveal: bool = True,
) -> None:
    """Fail unless |got - expected| <= atol + rtol*|expected|.

    `reveal=False` for the value an exercise asks for: the message then says how far off and in which direction,
    not the answer itself.
    """
    expect_type(got, numbers.Real, case=case, what=what)
    expect_finite(got, case=case, what=what)
    got, expected = float(got), float(expected)
    tolerance = atol + rtol * abs(expected)
    if abs(got - expected) <= tolerance:
        return
    tol_text = _tolerance_text(rtol, atol)
    if reveal:
        raise CheckFailed(f"case {case}: expected {what} = {_num(expected)} ({tol_text}); got {_num(got)}.")
    direction = "too high" if got > expected else "too low"
    ratio = f"{got / expected:.3g}x the expected value" if expected else f"off by {_num(got - expected)}"
    raise CheckFailed(
        f"case {case}: {what} is {direction}: you got {_num(got)}, which is {ratio} ({tol_text})."
    )


def expect_equal(got, expected, *, case: str, what: str, reveal: bool = True) -> None:
    if got == expected:
        return
    if reveal:
        raise CheckFailed(f"case {case}: expected {what} = {expected!r}; got {got!r}.")
    raise CheckFailed(f"case {case}: {what} is not right: got {got!r}.")


def expect_keys(got: dict, keys, *, case: str, what: str) -> None:
    expect_type(got, dict, case=case, what=what)
    missing = [k for k in keys if k not in got]
    if missing:
        raise CheckFailed(f"case {case}: {what} is missing the key(s) {missing}; it has {sorted(got)}.")


def _tolerance_text(rtol: float, atol: float) -> str:
    if not rtol and not atol:
        return "exactly"
    parts = []
    if rtol:
        parts.append(f"±{rtol:.3g} relative")
    if atol:
        parts.append(f"±{_num(atol)} absolute")
    return "tolerance " + " + ".join(parts)


def _num(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e18:
        return f"{int(x):,}"
    return f"{x:.6g}"


def _describe(obj) -> str:
    text = repr(obj)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(obj).__name__} ({text})"
