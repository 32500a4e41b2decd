"""Checks for lesson 01 — where training memory goes.

Every expected value is measured (memlab's storage tracker around a real optimizer / training step, a real KV
cache) or comes from the lesson's stated convention (ZeRO's bookkeeping); none is a copy of a solution. What
computes them answers the exercises, so it lives in the grading references (autograders/references/lesson01.py, not
in the learner release): the public cases compare with values stored from it (autograders/data/lesson01.json,
scripts/make_check_data.py), and under grading every check also draws cases of its own (`drawn_cases`: models,
optimizers, shapes and set-ups that no public case has), which only the judge measures, in reference steps
(autograders/kit.py). Exercise 1.3 asks to *predict* what the tracker measures: its check refuses a function that
runs the model (`kit.call_predicting`), and under grading is collected again in a fresh process (`rerun=True`).
"""

from __future__ import annotations

import functools
import json
import numbers
from pathlib import Path

import torch

from autograders import kit
from autograders.kit import _
from memlab.models import mlp

GiB = 1024**3
DATA = Path(__file__).resolve().parent / "data" / "lesson01.json"


@functools.cache
def stored() -> dict:
    """The expected values of the public cases, by check and case name (scripts/make_check_data.py)."""
    return kit.read_only(json.loads(DATA.read_text()))


def _step(model: torch.nn.Module, optimizer, steps: int) -> None:
    """`steps` real optimizer steps on random gradients: the state the learner's function is asked about."""
    for _i in range(steps):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()


def _sgd_sharing_storage(model: torch.nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum, stepped once, whose state also keeps a flat view of each momentum buffer (`flat`): two
    entries, one storage. Such sharing is how bitsandbytes' 8-bit optimizers hold their quantisation maps, and how
    some optimizers keep flattened copies; the storage counts once. (Not a subclass of an optimizer: torch wraps an
    optimizer class's `step` when it is first instantiated, which the grading sandbox would see as a change to the
    kit.)"""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    for state in optimizer.state.values():
        state["flat"] = state["momentum_buffer"].view(-1)
    return optimizer


def _state_cases():
    """(name, model, optimizer, steps) — built fresh for each call."""
    torch.manual_seed(0)
    cases = []
    m = mlp([40, 80, 3])
    cases.append((kit.Case("AdamW before its first step"), m, torch.optim.AdamW(m.parameters()), 0))
    m = mlp([40, 80, 3])
    cases.append((kit.Case("SGD without momentum"), m, torch.optim.SGD(m.parameters(), lr=0.1), 1))
    m = mlp([40, 80, 3])
    cases.append((kit.Case("SGD with momentum"), m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), 2))
    m = mlp([33, 70, 70, 5])
    cases.append((kit.Case("AdamW, 3 steps"), m, torch.optim.AdamW(m.parameters(), lr=1e-3), 3))
    m = mlp([33, 70, 5])
    groups = [{"params": m[0].parameters(), "lr": 1e-3}, {"params": m[2].parameters(), "lr": 1e-4}]
    cases.append((kit.Case("AdamW with two parameter groups"), m, torch.optim.AdamW(groups), 1))
    m = mlp([48, 96, 4])
    cases.append(
        (kit.Case("Adafactor (factored second moment)"), m, torch.optim.Adafactor(m.parameters()), 1)
    )
    try:
        import bitsandbytes as bnb
    except Exception:
        bnb = None
    if bnb is not None:
        # 64x128 and 128x40 (>= 4096 elements each): 8-bit state sharing one pair of qmaps; biases: 32-bit state
        m = mlp([64, 128, 40])
        cases.append(
            (
                kit.Case("bitsandbytes AdamW8bit (shared quantisation maps)"),
                m,
                bnb.optim.AdamW8bit(m.parameters()),
                1,
            )
        )
    m = mlp([24, 56, 6])  # shared storage without bitsandbytes too (already stepped: 0 steps more)
    cases.append(
        (kit.Case("momentum buffers that two state entries share (a view)"), m, _sgd_sharing_storage(m), 0)
    )
    return cases


def _random_widths(rng, n_layers: tuple[int, int], width: tuple[int, int]) -> list[int]:
    return [rng.randint(*width) for _ in range(rng.randint(*n_layers) + 1)]


def _drawn_state_case(rng, i: int):
    """An optimizer on a model drawn at grading time, Adam with amsgrad (a third state tensor) among them."""
    makers = {
        "SGD with momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        "Adam with amsgrad": lambda ps: torch.optim.Adam(ps, amsgrad=True),
        "AdamW": lambda ps: torch.optim.AdamW(ps),
        "RMSprop with momentum": lambda ps: torch.optim.RMSprop(ps, momentum=0.5),
        "Adagrad": lambda ps: torch.optim.Adagrad(ps),
        "Adafactor": lambda ps: torch.optim.Adafactor(ps),
    }
    widths = _random_widths(rng, (1, 3), (3, 90))
    name = rng.choice(sorted(makers))
    steps = rng.randint(0 if name != "Adagrad" else 1, 3)
    m = mlp(widths)
    label = kit.Case("{name} on mlp({widths}), {steps} step(s)", name=name, widths=widths, steps=steps)
    return kit.drawn(i, label), m, makers[name](m.parameters()), steps


def _expected_state(name: str, model, optimizer, public: bool) -> int:
    """A reference step: the stored bytes of a public case; a drawn one's, measured by the grading reference."""
    if public:
        return stored()["optimizer_state_bytes"][name]
    return kit.references("lesson01").state_bytes(model, optimizer)


@kit.check("e1_optimizer_state_bytes", points=2)
def check_optimizer_state_bytes(optimizer_state_bytes) -> int:
    kit.expect_callable(optimizer_state_bytes, "optimizer_state_bytes")
    cases = [(*case, True) for case in _state_cases()]
    cases += [(*case, False) for case in kit.drawn_cases("e1_optimizer_state_bytes", 2, _drawn_state_case)]
    for name, model, optimizer, steps, public in cases:
        _step(model, optimizer, steps)
        expected = kit.reference(lambda: _expected_state(name, model, optimizer, public))  # noqa: B023 - called at once
        got = kit.call(optimizer_state_bytes, optimizer, case=name)
        kit.expect_type(got, numbers.Integral, case=name, what=_("the byte count"))
        kit.expect_close(got, expected, case=name, what=_("the optimizer-state bytes"))
    return len(cases)


def _drawn_8bit_case(rng, i: int):
    shapes = [tuple(rng.randint(1, 300) for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(1, 4))]
    min_size = rng.choice([100, 1000, 4096, 10_000])
    return (
        kit.drawn(i, kit.Case("shapes {shapes}, min_8bit_size={min_size}", shapes=shapes, min_size=min_size)),
        shapes,
        min_size,
    )


#: (name, shapes, min_8bit_size) of the public cases
E2_CASES = [
    (kit.Case("one 64x128 matrix"), [(64, 128)], 4096),
    (kit.Case("a small MLP's shapes (two 8-bit matrices)"), [(128, 64), (128,), (40, 128), (40,)], 4096),
    (kit.Case("a matrix not a multiple of the block size"), [(1000, 7), (7,)], 4096),
    (kit.Case("everything too small for 8 bits"), [(50, 50), (50,)], 4096),
    (kit.Case("min_8bit_size lowered to 100"), [(50, 50), (50,)], 100),
    (kit.Case("min_8bit_size raised to 100,000"), [(256, 256), (300, 300)], 100_000),
]


def _expected_8bit(name: str, shapes, min_8bit_size: int, public: bool) -> int:
    """A reference step: the stored bytes of a public case; a drawn one's, measured by the grading reference."""
    if public:
        return stored()["adamw8bit_state_bytes"][name]
    return kit.references("lesson01").adamw8bit_state_bytes(shapes, min_8bit_size)


@kit.check("e2_adamw8bit_state_bytes", points=2)
def check_adamw8bit_state_bytes(adamw8bit_state_bytes) -> int:
    kit.expect_callable(adamw8bit_state_bytes, "adamw8bit_state_bytes")
    # what runs without bitsandbytes: the function answers a small question with a byte count
    first = kit.Case("one 64x128 matrix")
    got = kit.call(adamw8bit_state_bytes, [(64, 128)], min_8bit_size=4096, case=first)
    kit.expect_type(got, numbers.Integral, case=first, what=_("the byte count"))
    kit.needs_hardware(packages=("bitsandbytes",), passed=_("your function returns an int"))
    cases = [(*case, True) for case in E2_CASES]
    cases += [(*case, False) for case in kit.drawn_cases("e2_adamw8bit_state_bytes", 2, _drawn_8bit_case)]
    for name, shapes, min_8bit_size, public in cases:
        expected = kit.reference(lambda: _expected_8bit(name, shapes, min_8bit_size, public))  # noqa: B023
        got = kit.call(
            adamw8bit_state_bytes, [tuple(s) for s in shapes], min_8bit_size=min_8bit_size, case=name
        )
        kit.expect_type(got, numbers.Integral, case=name, what=_("the byte count"))
        kit.expect_close(
            got, expected, case=name, what=_("the predicted AdamW8bit state bytes"), reveal=False
        )
    return len(cases)


def _mlp_optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1)
    if name == "sgd-momentum":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


MARKS = ("after forward", "after backward", "after optimizer step")


def _drawn_live_case(rng, i: int):
    widths = _random_widths(rng, (1, 4), (2, 300))
    batch, optimizer_name = rng.randint(1, 300), rng.choice(["sgd", "sgd-momentum", "adamw"])
    return kit.drawn(i, _live_case_name(widths, batch, optimizer_name)), (widths, batch, optimizer_name)


#: (widths, batch, optimizer) of the public cases
E3_CASES = [
    ([100, 200, 10], 32, "adamw"),
    ([64, 256, 256, 4], 8, "sgd-momentum"),
    ([20, 500, 2], 128, "sgd"),
    ([300, 100, 100, 100, 50], 64, "adamw"),
    ([16, 16], 1000, "sgd-momentum"),  # a single Linear: no ReLU at all
]


def _live_case_name(widths, batch: int, optimizer_name: str) -> kit.Case:
    return kit.Case(
        "widths={widths}, batch={batch}, {optimizer}", widths=widths, batch=batch, optimizer=optimizer_name
    )


def _expected_live(name: str, widths, batch: int, optimizer_name: str, public: bool) -> dict[str, int]:
    """A reference step: the stored live bytes of a public case; a drawn one's, measured by the grading reference."""
    if public:
        return stored()["live_bytes"][name]
    return kit.references("lesson01").live_bytes(widths, batch, optimizer_name)


@kit.check("e3_predict_live_bytes", points=3, rerun=True)
def check_predict_live_bytes(predict_live_bytes) -> int:
    kit.expect_callable(predict_live_bytes, "predict_live_bytes")
    cases = [(_live_case_name(*case), case, True) for case in E3_CASES]
    cases += [(*case, False) for case in kit.drawn_cases("e3_predict_live_bytes", 2, _drawn_live_case)]
    for name, (widths, batch, optimizer_name), public in cases:
        measured = kit.reference(lambda: _expected_live(name, widths, batch, optimizer_name, public))  # noqa: B023
        got = kit.call_predicting(predict_live_bytes, list(widths), batch, optimizer_name, case=name)
        kit.expect_keys(got, MARKS, case=name, what=_("the returned dict"))
        for mark in MARKS:
            kit.expect_close(
                got[mark],
                measured if measured is kit.DEFERRED else measured[mark],
                case=name,
                what=_("the live bytes {mark}").format(mark=mark),
                reveal=False,
            )
    return len(cases)


def _drawn_kv_case(rng, i: int):
    kv = rng.choice([1, 2, 4])
    heads = dict(num_attention_heads=kv * rng.choice([1, 2, 4]), num_key_value_heads=kv)
    batch, seq, dtype = rng.randint(1, 4), rng.randint(1, 70), rng.choice([torch.float32, torch.bfloat16])
    label = kit.Case(
        "{heads} heads, {kv} KV heads, batch {batch}, seq {seq}, {dtype}",
        heads=heads["num_attention_heads"],
        kv=kv,
        batch=batch,
        seq=seq,
        dtype=dtype,
    )
    return kit.drawn(i, label), heads, batch, seq, dtype


#: (name, attention heads, batch, seq, dtype) of the public cases
E4_CASES = [
    (
        kit.Case("multi-head attention, fp32"),
        dict(num_attention_heads=4, num_key_value_heads=4),
        2,
        17,
        torch.float32,
    ),
    (
        kit.Case("grouped-query attention (2 KV heads)"),
        dict(num_attention_heads=8, num_key_value_heads=2),
        3,
        40,
        torch.float32,
    ),
    (
        kit.Case("bf16 cache, one sequence"),
        dict(num_attention_heads=4, num_key_value_heads=1),
        1,
        64,
        torch.bfloat16,
    ),
    (
        kit.Case("an explicit head_dim (32, not hidden_size // heads = 16)"),
        dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32),
        2,
        9,
        torch.float32,
    ),
    (
        kit.Case("num_key_value_heads not given (so one per attention head)"),
        dict(num_attention_heads=8),
        1,
        12,
        torch.float32,
    ),
]


def kv_config(heads: dict):
    """The case's Llama config: 3 layers of hidden size 64, with `heads`."""
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, vocab_size=100, **heads, use_cache=True
    )


def _expected_kv(name: str, config, batch: int, seq: int, dtype: torch.dtype, public: bool) -> int:
    """A reference step: the stored bytes of a public case; a drawn one's, measured by the grading reference."""
    if public:
        return stored()["kv_cache_bytes"][name]
    return kit.references("lesson01").kv_cache_bytes(config, batch, seq, dtype)


@kit.check("e4_kv_cache_bytes", points=1)
def check_kv_cache_bytes(kv_cache_bytes) -> int:
    kit.expect_callable(kv_cache_bytes, "kv_cache_bytes")
    cases = [(*case, True) for case in E4_CASES]
    cases += [(*case, False) for case in kit.drawn_cases("e4_kv_cache_bytes", 2, _drawn_kv_case)]
    for name, heads, batch, seq, dtype, public in cases:
        config = kv_config(heads)
        expected = kit.reference(lambda: _expected_kv(name, config, batch, seq, dtype, public))  # noqa: B023
        got = kit.call(
            kv_cache_bytes, config, batch, seq, bytes_per_value=torch.finfo(dtype).bits // 8, case=name
        )
        kit.expect_type(got, numbers.Real, case=name, what=_("the byte count"))
        kit.expect_close(got, expected, case=name, what=_("the KV-cache bytes"), reveal=False)
    return len(cases)


N7B, LORA_QV = 6_738_415_616, 4_194_304
#: (name, parameters, trainable, weights, optimizer) of the public cases; expected: ZeRO's bookkeeping
#: (autograders/references/lesson01.py, `zero_convention_bytes`)
E5_CASES = [
    (kit.Case("7B full fine-tuning, bf16 + AdamW"), N7B, N7B, "bf16", "adamw"),
    (kit.Case("7B full fine-tuning, fp32 + AdamW"), N7B, N7B, "fp32", "adamw"),
    (kit.Case("7B full fine-tuning, bf16 + 8-bit AdamW"), N7B, N7B, "bf16", "adamw-8bit"),
    (kit.Case("7B LoRA r=8 on q,v, bf16 base"), N7B, LORA_QV, "bf16", "adamw"),
    (kit.Case("1B full fine-tuning, bf16 + SGD"), 1_000_000_000, 1_000_000_000, "bf16", "sgd"),
    (kit.Case("125M fp16 + Lion"), 125_000_000, 125_000_000, "fp16", "lion"),
]


def _drawn_state_bytes_case(rng, i: int):
    n_params = rng.randint(10**6, 10**11)
    n_trainable = rng.choice([n_params, rng.randint(1, n_params // 100)])
    weights = rng.choice(["fp32", "bf16", "fp16"])
    optimizer = rng.choice(["sgd", "sgd-momentum", "adamw", "adamw-8bit", "lion"])
    label = kit.Case(
        "{n_params:,} parameters, {n_trainable:,} trainable, {weights} + {optimizer}",
        n_params=n_params,
        n_trainable=n_trainable,
        weights=weights,
        optimizer=optimizer,
    )
    return kit.drawn(i, label), n_params, n_trainable, weights, optimizer


def _expected_state_bytes(
    name: str, n_params, n_trainable, weights: str, optimizer: str, public: bool
) -> int:
    """A reference step: the stored bytes of a public case; a drawn one's, ZeRO's bookkeeping (the grading
    reference)."""
    if public:
        return stored()["training_state_bytes"][name]
    return kit.references("lesson01").zero_convention_bytes(n_params, n_trainable, weights, optimizer)


@kit.check("e5_training_state_bytes", points=2)
def check_training_state_bytes(training_state_bytes) -> int:
    kit.expect_callable(training_state_bytes, "training_state_bytes")
    cases = [(*case, True) for case in E5_CASES]
    cases += [
        (*case, False) for case in kit.drawn_cases("e5_training_state_bytes", 3, _drawn_state_bytes_case)
    ]
    for name, n_params, n_trainable, weights, optimizer, public in cases:
        expected = kit.reference(
            lambda: _expected_state_bytes(name, n_params, n_trainable, weights, optimizer, public)  # noqa: B023
        )
        got = kit.call(training_state_bytes, n_params, n_trainable, weights, optimizer, case=name)
        kit.expect_type(got, numbers.Real, case=name, what=_("the byte count"))
        kit.expect_close(
            got, expected, case=name, what=_("the training-state bytes"), rtol=1e-9, reveal=False
        )
    return len(cases)


__all__ = [
    "check_optimizer_state_bytes",
    "check_adamw8bit_state_bytes",
    "check_predict_live_bytes",
    "check_kv_cache_bytes",
    "check_training_state_bytes",
]
