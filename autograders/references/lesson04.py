"""Lesson 04's reference answers (grading only; see autograders/references/__init__.py)."""

from __future__ import annotations

import itertools
import time

import torch
from torch.utils.checkpoint import checkpoint

from autograders.lesson04 import E2_BUDGETS


def llama_layer_saved_bytes(config, batch: int, seq: int, bytes_per_value: int) -> int:
    """Exercise 4.1: the bytes one eager-attention Llama decoder layer saves for backward (HF's modeling_llama).

    b*s tokens, hidden h, a heads of size d (a*d query width), intermediate I, p = bytes_per_value:
    - each RMSNorm (x2): its input in fp32 (4*b*s*h: the upcast copy, or the fp32 input itself), the per-token
      rsqrt (4*b*s) and the normalised values before the weight (p*b*s*h);
    - attention: the normed input of q/k/v_proj (p*b*s*h), the rotated queries and the keys and values after
      repeat_kv (p*b*s*a*d each: grouped-query attention saves them at the full head count), the fp32 softmax
      (4*b*a*s^2), its cast to the layer's dtype when that is not fp32 (p*b*a*s^2), the input of o_proj (p*b*s*a*d);
    - SwiGLU: the normed input of gate/up_proj (p*b*s*h), gate and up outputs, the SiLU output and the product that
      down_proj reads (4 * p*b*s*I).
    Rotary cos/sin and the mask are shared by every layer and not counted; the residual adds save nothing.
    """
    b, s, h, p = batch, seq, config.hidden_size, bytes_per_value
    a = config.num_attention_heads
    d = getattr(config, "head_dim", None) or h // a
    inner = config.intermediate_size
    tokens = b * s
    norms = 2 * (4 * tokens * h + 4 * tokens + p * tokens * h)
    attention = (
        p * tokens * h + 4 * p * tokens * a * d + 4 * b * a * s * s + (p * b * a * s * s if p != 4 else 0)
    )
    mlp = p * tokens * h + 4 * p * tokens * inner
    return norms + attention + mlp


def plan_table(blocks, x) -> dict[tuple[int, ...], tuple[int, int]]:
    """{plan (sorted tuple of block indices): (measured peak bytes, recomputed FLOPs)} for every subset of blocks."""
    from autograders.lesson04 import block_flops, measure_plan

    flops = block_flops(blocks, x)
    n = len(blocks)
    table = {}
    for k in range(n + 1):
        for plan in itertools.combinations(range(n), k):
            peak, _ = measure_plan(blocks, x, plan)
            table[plan] = (peak, sum(flops[i] for i in plan))
    return table


def least_flops_within(table, budget: int) -> int | None:
    """The least recomputed FLOPs of a plan whose peak fits in `budget`; None when no plan fits."""
    fitting = [flops for peak, flops in table.values() if peak <= budget]
    return min(fitting) if fitting else None


def plan_checkpointing(blocks, x, budget_bytes: int):
    """Exercise 4.2: the plan with the fewest recomputed FLOPs whose measured peak fits (None if none fits)."""
    from autograders.lesson04 import block_flops, measure_plan

    flops = block_flops(blocks, x)
    plans = [list(p) for k in range(len(blocks) + 1) for p in itertools.combinations(range(len(blocks)), k)]
    plans.sort(key=lambda plan: (sum(flops[i] for i in plan), len(plan)))
    for plan in plans:  # cheapest first: the first that fits is the answer
        peak, _ = measure_plan(blocks, x, plan)
        if peak <= budget_bytes:
            return plan
    return None


def e2_budgets(table) -> dict[str, int]:
    """The public budgets of a model, from its table of plans: nothing to checkpoint, two in between, too small."""
    no_plan = table[()][0]
    everything = table[max(table, key=len)][0]
    lowest = min(peak for peak, _ in table.values())
    budgets = (
        no_plan + 4096,
        no_plan - (no_plan - everything) // 3,
        lowest + (no_plan - lowest) // 10,
        lowest - 1,
    )
    # their names, in this order, as the check declares them
    return dict(zip(E2_BUDGETS, budgets, strict=True))


def measure_checkpointed_stack(
    layers, hidden, position_embeddings, use_checkpoint: bool, steps: int = 3
) -> dict:
    """Exercise 4.3: one warm-up step, then `steps` timed steps of forward (each layer checkpointed, non-reentrant,
    when `use_checkpoint`) + backward of `output.float().square().mean()`, gradients cleared after each step.
    Peak over the timed steps with track_memory (the caching allocator on CUDA, the storage tracker on the CPU)."""
    from memlab.measure import track_memory

    device = hidden.device

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def one_step():
        h = hidden
        for layer in layers:
            if use_checkpoint:
                h = checkpoint(layer, h, position_embeddings=position_embeddings, use_reentrant=False)
            else:
                h = layer(h, position_embeddings=position_embeddings)
        h.float().square().mean().backward()
        for p in layers.parameters():
            p.grad = None

    one_step()
    sync()
    with track_memory(
        model=layers, inputs=(hidden, position_embeddings), track_storages=device.type != "cuda"
    ) as trace:
        start = time.perf_counter()
        for _ in range(steps):
            one_step()
        sync()
        elapsed = time.perf_counter() - start
    return {"peak_bytes": trace.peak_bytes, "step_ms": 1000 * elapsed / steps}
