"""autograders/wire.py: what crosses from the learner's process to the judge is data, exactly, and nothing else."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from autograders import wire


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**80),
        1.5,
        -0.0,
        math.inf,
        "snow ☃ and a lone surrogate \udcff",
        b"\x00\xff",
        [1, (2.5, "x"), {"k": [None]}],
        {1: "int key", (1, 2): "tuple key", "nested": {"a": ()}},
    ],
    ids=repr,
)
def test_plain_values_come_back_equal_and_of_the_same_type(value):
    back = wire.decode(json.loads(json.dumps(wire.encode(value))))
    assert back == value or (isinstance(value, float) and math.isnan(value) and math.isnan(back))
    assert type(back) is type(value)


def test_nan_comes_back_nan():
    assert math.isnan(wire.roundtrip(math.nan))


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(12, dtype=torch.float32).reshape(3, 4),
        torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)[:, 1],  # not contiguous
        torch.tensor([True, False]),
        torch.tensor([[-(2**40)]], dtype=torch.int64),
        torch.tensor([1.0, -448.0, float("nan")]).to(torch.float8_e4m3fn),
        torch.empty(0, 5),
        torch.nn.Parameter(torch.ones(2)),
    ],
    ids=lambda t: f"{t.dtype}{tuple(t.shape)}",
)
def test_tensors_come_back_bit_for_bit_as_fresh_plain_tensors(tensor):
    back = wire.roundtrip(tensor)
    assert type(back) is torch.Tensor and back.dtype == tensor.dtype and back.shape == tensor.shape
    assert back.grad_fn is None and not back.requires_grad
    assert torch.equal(
        back.view(-1).view(torch.uint8), tensor.detach().contiguous().view(-1).view(torch.uint8)
    )


def test_numpy_scalars_become_python_numbers():
    assert type(wire.roundtrip(np.float32(0.5))) is float
    assert type(wire.roundtrip(np.int64(3))) is int
    assert type(wire.roundtrip(np.bool_(True))) is bool


class Liar(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class LyingTensor(torch.Tensor):
    pass


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (Liar(1.0), "test_wire.Liar, a subclass of float (a check takes a plain float)"),
        (object(), "the value is an object"),
        (torch.ones(2).as_subclass(LyingTensor), "LyingTensor, a subclass of Tensor"),
        (torch.empty(2, device="meta"), "a tensor that cannot be read"),
        (torch.ones(2).to_sparse(), "a sparse tensor"),
        ({"k": [1, np.array([1])]}, "the value['k'][1] is a numpy.ndarray"),
        ({[1]: 2} if False else {frozenset(): 1}, "a key of the value"),
    ],
    ids=["float-subclass", "object", "tensor-subclass", "meta", "sparse", "nested-ndarray", "odd-key"],
)
def test_anything_else_is_refused_saying_what_and_where(value, words):
    with pytest.raises(wire.NotPlainData) as info:
        wire.encode(value)
    assert words in str(info.value)


@pytest.mark.parametrize(
    "forged",
    [
        ["int", "1" * 6000],
        ["float", "twelve"],
        ["tensor", "float32", [2], "cpu", "AAAA"],  # 3 bytes for 8
        ["tensor", "os.system", [1], "cpu", ""],
        ["bool", 1],
        ["list", "not a list"],
        {"not": "a list"},
    ],
    ids=repr,
)
def test_forged_data_is_rejected_not_trusted(forged):
    with pytest.raises((ValueError, TypeError)):
        wire.decode(forged)


def test_depth_is_bounded():
    deep = []
    for _ in range(wire.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(wire.NotPlainData, match="nested more than"):
        wire.encode(deep)
