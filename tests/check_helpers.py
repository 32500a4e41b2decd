"""Helpers shared by the tests of the lessons' checks (tests/test_autograders_lessonNN.py)."""

from __future__ import annotations

import pytest

from autograders.kit import CheckFailed


def failure(check_fn, answer) -> str:
    """The message of the CheckFailed that `check_fn(answer)` raises (the test fails if it raises none)."""
    with pytest.raises(CheckFailed) as info:
        check_fn(answer)
    return str(info.value)


def assert_hidden(message: str, *values) -> None:
    """A reveal=False check must not print the number the exercise asks for, in any usual spelling."""
    for value in values:
        x = float(value)
        spellings = {f"{value}", f"{x!r}", f"{x:.6g}", f"{x:.4g}", f"{x:.3g}"}
        if x.is_integer():
            spellings |= {f"{int(x)}", f"{int(x):,}"}
        for spelling in spellings:
            assert spelling not in message, (spelling, message)


def found_in_frames(is_expected, start) -> list[str]:
    """What learner code running under the frame `start` (its caller's, say) can find there that `is_expected`
    recognises: a local value of any frame from `start` up, an attribute of one (`vars()`, one level down), or what a
    local callable of a check module (autograders.lessonNN: a closure, a `functools.partial`) returns when called
    with no argument. Each find is described as "function: name[.attribute][()]"."""
    import functools
    import inspect

    def checks_own(value) -> bool:
        target = value.func if isinstance(value, functools.partial) else value
        if not callable(target) or isinstance(target, type):
            return False
        if not getattr(target, "__module__", "").startswith("autograders.lesson"):
            return False
        try:
            inspect.signature(value).bind()
        except (TypeError, ValueError):
            return False
        return True

    def matches(value) -> bool:
        try:
            return bool(is_expected(value))
        except Exception:
            return False

    found = []
    frame = start
    while frame is not None:
        where = frame.f_code.co_name
        for name, value in list(frame.f_locals.items()):
            if matches(value):
                found.append(f"{where}: {name}")
            try:
                attributes = vars(value)
            except TypeError:
                attributes = {}
            for attribute, inner in list(attributes.items()):
                if matches(inner):
                    found.append(f"{where}: {name}.{attribute}")
            if checks_own(value):
                try:
                    result = value()
                except Exception:
                    continue
                if matches(result):
                    found.append(f"{where}: {name}()")
        frame = frame.f_back
    return found
