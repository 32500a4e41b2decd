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
