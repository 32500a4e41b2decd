"""Lesson 02's reference answers (grading only; see autograders/references/__init__.py)."""

from __future__ import annotations

import math


def limits(exponent_bits: int, mantissa_bits: int, nan_encoding: str = "ieee") -> dict[str, float]:
    """Largest finite, smallest normal, smallest subnormal and machine epsilon of a binary float format.

    IEEE 754 §3.3 (and the fp8 paper, Micikevicius et al. 2022, arXiv:2209.05433, §3 for "fn"): bias 2^(e-1) - 1;
    "ieee" keeps the all-ones exponent for inf/NaN, "fn" (E4M3FN) uses it for numbers and keeps only the all-ones
    mantissa there for NaN.
    """
    e, m = exponent_bits, mantissa_bits
    bias = 2 ** (e - 1) - 1
    if nan_encoding == "fn":
        largest = math.ldexp(2 - 2.0 ** (1 - m), 2**e - 1 - bias)
    else:
        largest = math.ldexp(2 - 2.0**-m, 2**e - 2 - bias)
    return {
        "max": largest,
        "min_normal": math.ldexp(1.0, 1 - bias),
        "min_subnormal": math.ldexp(1.0, 1 - bias - m),
        "eps": math.ldexp(1.0, -m),
    }


def ulp(x: float, name: str) -> float:
    """The gap between the two numbers of the format on either side of x: for a number of the format, the gap to
    its neighbour one bit pattern further from zero (toward zero at the largest finite). x need not be a number of
    the format, but |x| is at most its largest finite value."""
    from autograders.lesson02 import torch_decode
    from memlab.formats import FORMATS, to_bits

    f = FORMATS[name]
    bits = to_bits(x, f)  # x rounded to nearest: step toward zero until at or below |x|
    while abs(float(torch_decode([bits], f)[0])) > abs(x):
        bits -= 1
    below = float(torch_decode([bits], f)[0])
    up = float(torch_decode([bits + 1], f)[0])
    if math.isfinite(up):
        return abs(up - below)
    return abs(below - float(torch_decode([bits - 1], f)[0]))
