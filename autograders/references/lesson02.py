"""Lesson 02's reference answers (grading only; see autograders/references/__init__.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

_NUMPY_FLOAT = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}


def numpy_decode(patterns, f) -> np.ndarray | None:
    """float64 values numpy gives these bit patterns of format `f` (fp16, fp32, fp64 only; else None)."""
    from autograders.lesson02 import _as_unsigned

    if f.name not in _NUMPY_FLOAT:
        return None
    with np.errstate(invalid="ignore"):  # fp16 NaN -> float64 warns, and is still NaN
        return _as_unsigned(patterns, f).view(_NUMPY_FLOAT[f.name]).astype(np.float64)


def decode(patterns, name: str) -> list[float]:
    """Exercise 2.1 for many bit patterns: torch's values (`Tensor.view`), cross-checked with numpy's where numpy has
    the format (a disagreement is the check's bug, never the learner's)."""
    from autograders.lesson02 import _same_values, torch_decode
    from memlab.formats import FORMATS

    f = FORMATS[name]
    by_torch = torch_decode(patterns, f)
    by_numpy = numpy_decode(patterns, f)
    if by_numpy is not None and not _same_values(by_torch, by_numpy).all():
        raise RuntimeError(
            f"torch and numpy disagree on some {name} bit patterns: the check cannot be trusted"
        )
    return by_torch.tolist()


def torch_limits(name: str) -> dict[str, float]:
    """Exercise 2.2 for a format torch has: its `finfo` and its smallest subnormal (which finfo lacks)."""
    from autograders.lesson02 import torch_decode
    from memlab.formats import FORMATS

    f = FORMATS[name]
    info = torch.finfo(f.dtype)
    return {
        "max": info.max,
        "min_normal": info.smallest_normal,
        "min_subnormal": float(torch_decode([1], f)[0]),
        "eps": info.eps,
    }


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
