"""The grading references (autograders/references/) and the values stored from them (autograders/data/).

The references are kept out of the learner release where they are an exercise's answer; the public cases compare
with stored values. These tests keep the two in step, and check the references against independent sources.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from nbgrader_pipeline import ROOT, SCRIPTS

from autograders.references import lesson02 as ref02
from autograders.references import lesson03 as ref03
from memlab.formats import FORMATS

TORCH_FORMATS = {
    "fp32": (8, 23, "ieee"),
    "fp16": (5, 10, "ieee"),
    "bf16": (8, 7, "ieee"),
    "fp8_e4m3": (4, 3, "fn"),
    "fp8_e5m2": (5, 2, "ieee"),
    "fp64": (11, 52, "ieee"),
}


@pytest.mark.slow  # recomputes every stored value with the grading references (about 15 s): the full tier
def test_the_stored_values_are_what_the_references_give():
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "make_check_data.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", sorted(TORCH_FORMATS))
def test_limits_reference_agrees_with_torch_finfo(name):
    info = torch.finfo(FORMATS[name].dtype)
    got = ref02.limits(*TORCH_FORMATS[name])
    assert (got["max"], got["min_normal"], got["eps"]) == (info.max, info.smallest_normal, info.eps)
    smallest = torch.tensor([1], dtype=FORMATS[name].int_dtype).view(FORMATS[name].dtype).double().item()
    assert got["min_subnormal"] == smallest


@pytest.mark.parametrize("name, np_type", [("fp16", np.float16), ("fp32", np.float32)])
def test_ulp_reference_agrees_with_numpy_spacing(name, np_type):
    rng = np.random.default_rng(0)
    values = rng.standard_normal(2000).astype(np_type) * np_type(2.0) ** rng.integers(-10, 10, 2000).astype(
        np_type
    )
    for x in values[np.isfinite(values)][:500]:
        assert ref02.ulp(float(x), name) == float(np.spacing(abs(x)))  # the gap away from zero


@pytest.mark.parametrize("name, np_type", [("fp16", np.float16), ("fp32", np.float32)])
def test_ulp_reference_of_a_value_between_two_numbers_of_the_format(name, np_type):
    """For an x the format cannot hold, the ulp is the gap between its two neighbours in the format."""
    rng = np.random.default_rng(1)
    limit = float(np.finfo(np_type).max)
    values = rng.standard_normal(500) * 2.0 ** rng.integers(-30, 16, 500)
    values = [*values[np.abs(values) <= limit], *(np.nextafter(2.0**k, 0.0) for k in range(-20, 16))]
    for x in values:
        below = np_type(x)
        if abs(float(below)) > abs(x):
            below = np.nextafter(below, np_type(0))
        assert float(below) != x
        assert ref02.ulp(float(x), name) == float(np.spacing(np.abs(below))), x


def test_underflow_reference_counts_torch_casts():
    grads = [torch.tensor([2.0**-24, 2.0**-26, 0.0, 1.0]), None]
    assert ref03.underflow_fraction(grads, 1.0, torch.float16) == 1 / 3
    assert ref03.underflow_fraction(grads, 4.0, torch.float16) == 0.0
    assert math.isclose(ref03.underflow_fraction(grads, 1.0, torch.bfloat16), 0.0)
