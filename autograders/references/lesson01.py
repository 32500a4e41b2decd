"""Lesson 01's reference answers (grading only; see autograders/references/__init__.py).

The expected values of lesson 01's checks: measured (memlab's storage tracker around a real optimizer or training
step, the KV cache a real Llama builds) or the lesson's stated convention (`zero_convention_bytes`). The public cases
compare with the values stored from them (autograders/data/lesson01.json, scripts/make_check_data.py); the judge
computes the cases drawn at grading time with them. `tensor_bytes` and `kv_cache_formula_bytes` are the answers of
Exercises 1.1 and 1.4 written as formulas (memlab held them until they were found to answer the exercises): the tests
hold the measurements against them.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from autograders.lesson01 import _mlp_optimizer, _step
from memlab.measure import OPTIMIZER_STATE, local_tensor, measure_training_step, track_memory
from memlab.models import mlp


def state_bytes(model: torch.nn.Module, optimizer) -> int:
    """Exercise 1.1: the optimizer-state bytes the storage tracker counts (a storage two entries share, once)."""
    with track_memory(model=model, optimizer=optimizer) as trace:
        pass
    return trace.current_by_category[OPTIMIZER_STATE]


def adamw8bit_state_bytes(shapes, min_8bit_size: int) -> int:
    """Exercise 1.2: bitsandbytes' AdamW8bit state bytes for parameters of `shapes`, measured after one step."""
    import bitsandbytes as bnb

    holder = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(shape)) for shape in shapes])
    optimizer = bnb.optim.AdamW8bit(holder.parameters(), min_8bit_size=min_8bit_size)
    _step(holder, optimizer, 1)
    return state_bytes(holder, optimizer)


def live_bytes(widths: list[int], batch: int, optimizer_name: str) -> dict[str, int]:
    """Exercise 1.3: the live bytes at each mark of one tracked training step of the fp32 MLP."""
    torch.manual_seed(0)
    model = mlp(widths)
    x, y = torch.randn(batch, widths[0]), torch.randint(0, widths[-1], (batch,))
    trace = measure_training_step(model, (x, y), _mlp_optimizer(optimizer_name, model))
    return {m.name: m.current_bytes for m in trace.marks}


def kv_cache_bytes(config, batch: int, seq: int, dtype: torch.dtype) -> int:
    """Exercise 1.4: the bytes of the KV cache a real Llama of `config` builds for `batch` x `seq` tokens."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        output = model(input_ids=torch.randint(0, 100, (batch, seq)), use_cache=True)
    # transformers 5.24 renamed the output's `past_key_values` to `cache` (the old name warns on every read)
    cache = getattr(output, "cache", None)
    cache = output.past_key_values if cache is None else cache
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


#: ZeRO's bookkeeping (Rajbhandari et al. 2020, arXiv:1910.02054, §3.1: 2 + 2 + 12 = 16 B per parameter for
#: mixed-precision Adam), written out here on its own; tests/lesson_checks/test_autograders_lesson01.py checks that
#: memlab.estimate.model_state_bytes, which the lesson uses elsewhere, agrees with it.
FORMAT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
OPTIMIZER_BYTES = {"sgd": 0, "sgd-momentum": 4, "adamw": 8, "adamw-8bit": 2, "lion": 4}


def zero_convention_bytes(n_params: int, n_trainable: int, weights: str, optimizer: str) -> int:
    """Exercise 1.5: every parameter's weight; for each trainable one a gradient in the weights' format, an fp32
    master copy unless the weights are fp32, and the optimizer's state."""
    w = FORMAT_BYTES[weights]
    master = 0 if weights == "fp32" else 4
    return n_params * w + n_trainable * (w + master + OPTIMIZER_BYTES[optimizer])


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views and shared storages counted once): Exercise 1.1's
    answer, given the optimizer's state tensors."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = local_tensor(t).untyped_storage()
        seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


def kv_cache_formula_bytes(
    batch: int, seq: int, layers: int, kv_heads: int, head_dim: int, bytes_per_value: float = 2
) -> float:
    """Inference KV cache: a key and a value vector per token, per layer, per KV head: 2·b·s·L·n_kv·d_head·bytes
    (Exercise 1.4's formula). With grouped-query attention n_kv < n_heads (Ainslie et al. 2023, arXiv:2305.13245).
    Llama-2-7B (32 layers, 32 KV heads of 128) in fp16 keeps 0.5 MiB per token."""
    return 2 * batch * seq * layers * kv_heads * head_dim * bytes_per_value
