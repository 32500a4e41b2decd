"""The check kit every lesson's autograder is built from (design brief §4).

A check is a function decorated with `@check("eK_slug")` that takes the learner's object, runs it on its own cases
and returns how many cases it ran. The decorator turns every failure into one `CheckFailed` with a message that
says which case, what was expected, what was got and the tolerance, raised from the check's own frame; in a
notebook it is shown as that message alone (memlab.notebook), still as an error, so nbgrader, Validate and nbval
count the cell as failed. On success it prints one line and returns None (nbgrader would read a returned value as
partial credit).

Stages, in this order, so that an unwritten exercise never passes on any machine: `expect_callable` (defined, a
function or class, not the lesson's stub), then whatever runs here (a tiny run on the CPU, the type of the result),
then `needs_hardware(...)` before the part that needs a GPU or a package. Where that is missing, a learner sees
`NOT CHECKED HERE: needs ..., found ...`; under `COURSE_GRADING=strict` (set by scripts/grade.py) the check raises
`NotGradedHere` with the same text, so the instructor sees why the cell scored 0.

The grading mode and the grading seed are read once, when the kit is imported: scripts/grade.py imports it before
any submitted code runs. Under strict grading a check also runs cases drawn from `grading_seed()`, so that an answer
hard-coded to the public cases fails, and a passed check announces itself with `sys.audit(PASS_EVENT, name, n)`,
which scripts/grade_sandbox.py verifies (it is a no-op anywhere else).
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import random
import sys
import traceback
import types

from memlab.hardware import unmet_requirements
from memlab.notebook import LessonMessage, unwritten_parts

GRADING_ENV = "COURSE_GRADING"
SEED_ENV = "COURSE_GRADING_SEED"
PASS_EVENT = "memlab.check.passed"

_STRICT = os.environ.get(GRADING_ENV, "").lower() == "strict"
_SEED = int(os.environ[SEED_ENV]) if _STRICT and os.environ.get(SEED_ENV, "").isdigit() else None


class CheckFailed(LessonMessage, AssertionError):
    """The learner's answer is wrong; the message says how."""


class NotGradedHere(LessonMessage, RuntimeError):
    """Strict grading on a machine that lacks what the check needs."""


class NotCheckedHere(Exception):
    """Raised by `needs_hardware` inside a check; `@check` turns it into the learner's line or NotGradedHere."""

    def __init__(self, needs: str, found: str, passed: str):
        super().__init__(f"NOT CHECKED HERE: needs {needs}, found {found}")
        self.passed = passed


def grading_strict() -> bool:
    return _STRICT


def grading_seed() -> int | None:
    """The seed of the cases drawn at grading time (strict grading only; None for a learner)."""
    return _SEED


def grading_rng(check_name: str) -> random.Random | None:
    """Under strict grading, the random generator of the cases `check_name` draws on top of its public ones (its
    own stream of the grading seed); None for a learner, whose checks run the public cases only."""
    if _SEED is None:
        return None
    return random.Random(f"{_SEED}/{check_name}")


def references(lesson: str):
    """The grading references of a lesson (autograders/references/lessonNN.py), for the cases drawn at grading
    time; they are not in the learner release, so grading for credit needs the instructor's copy of the course."""
    import importlib

    try:
        return importlib.import_module(f"autograders.references.{lesson}")
    except ModuleNotFoundError:
        raise RuntimeError(
            "grading for credit needs autograders/references/, which the learner release leaves out: grade with "
            "the instructor's copy of the course"
        ) from None


def read_only(value):
    """`value` with every dict made a read-only mapping and every list a tuple, all the way down: what a check
    caches (stored answers of the public cases, reference tables) is reachable from submitted code in the same
    kernel, and a mutable cache could be rewritten to agree with a wrong answer."""
    if isinstance(value, dict):
        return types.MappingProxyType({k: read_only(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(read_only(v) for v in value)
    return value


def drawn(i: int, description: str) -> str:
    """The name of a case drawn at grading time, as the messages show it."""
    return f"drawn at grading time #{i}, {description}"


def check(name: str):
    """Decorate a check: clean failure messages, one success line, returns None."""

    def decorate(check_fn):
        @functools.wraps(check_fn)
        def run(*args, **kwargs):
            try:
                n_cases = check_fn(*args, **kwargs)
            except CheckFailed as failure:
                message = f"{name}: {failure}"
            except NotCheckedHere as missing:
                if _STRICT:
                    raise NotGradedHere(str(missing)) from None
                passed = f" What can be checked here passed: {missing.passed}." if missing.passed else ""
                print(f"{name}: {missing}.{passed}")
                return None
            except NotGradedHere:
                raise
            except Exception as bug:  # a bug in the check itself: say so plainly, never blame the learner
                raise RuntimeError(
                    f"{name}: the check itself crashed ({type(bug).__name__}: {bug})."
                ) from bug
            else:
                if isinstance(n_cases, bool) or not isinstance(n_cases, int) or n_cases < 1:
                    raise RuntimeError(
                        f"{name}: the check itself is broken (it returned {n_cases!r}, not a count)."
                    )
                sys.audit(PASS_EVENT, name, n_cases)
                print(f"✓ {name}: {n_cases} case{'s' if n_cases != 1 else ''} passed")
                return None
            raise CheckFailed(message) from None

        run.check_name = name
        return run

    return decorate


def needs_hardware(
    cuda: bool = False,
    min_capability: tuple[int, int] | None = None,
    min_gpu_gb: float | None = None,
    packages: tuple[str, ...] = (),
    *,
    passed: str = "",
) -> None:
    """Inside a check, after the stages that run anywhere: stop here unless this machine has what the rest needs.

    `passed` says in a few words what was already checked (shown to the learner next to NOT CHECKED HERE).
    """
    unmet = unmet_requirements(cuda, min_capability, min_gpu_gb, packages)
    if unmet is not None:
        raise NotCheckedHere(*unmet, passed)


# ---- the stages of a check: exists / callable -> type, shape, dtype, device -> values --------------------------


def expect_callable(obj, name: str) -> None:
    """Stage one: `name` is defined, is a function or a class, and is not (entirely or partly) the lesson's stub."""
    if obj is None or obj is ...:
        raise CheckFailed(f"`{name}` is not defined yet (it is None): write it, run its cell, then this one.")
    if not callable(obj):
        raise CheckFailed(f"`{name}` should be a function; got a {type(obj).__name__}.")
    parts = unwritten_parts(obj)
    methods = [v for v in vars(obj).values() if callable(v)] if isinstance(obj, type) else [obj]
    if parts and len(parts) >= len(methods):
        raise CheckFailed(f"`{name}` is not written yet: it still raises NotImplementedError.")
    if parts:
        listed = ", ".join(f"`{p}`" for p in parts)
        verb = "raises" if len(parts) == 1 else "raise"
        raise CheckFailed(f"`{name}` is not finished: {listed} still {verb} NotImplementedError.")


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
    raise CheckFailed(f"case {case}: {what} is {how_far(got, expected)}: you got {_num(got)} ({tol_text}).")


def how_far(got: float, expected: float) -> str:
    """How far `got` is from `expected`, in words that do not give `expected` away ("too high, by less than 1%")."""
    if expected == 0:
        return "too high" if got > 0 else "too low"
    if got == 0:
        return "zero where it should not be"
    if (got > 0) != (expected > 0):
        return "of the wrong sign"
    direction = "too high" if abs(got) > abs(expected) else "too low"
    factor = max(abs(got / expected), abs(expected / got))
    for limit, words in (
        (1.01, "by less than 1%"),
        (1.1, "by 1% to 10%"),
        (2, "by 10% to a factor of 2"),
        (10, "by a factor of 2 to 10"),
    ):
        if factor < limit:
            return f"{direction}, {words}"
    return f"{direction}, by more than a factor of 10"


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
