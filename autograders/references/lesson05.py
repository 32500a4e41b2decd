"""Lesson 05's reference answers (grading only; see autograders/references/__init__.py).

`train_step_accumulated` and `seq_cls_loss`: the checks do not call them (they compare with Hugging Face's own
full-batch loss and with torch's cross-entropy); they are the answers the tests (tests/lesson_checks/test_autograders_lesson05.py,
tests/kit/test_drawn_cases.py) and tests/gpu hold the checks against. `measure_zero_bytes` and `zero_formula_bytes`
answer Exercise 5.3 (`zero_bytes_per_rank`): scripts/make_check_data.py stores the public cases' bytes from them, and
the judge measures the cases drawn at grading time with `measure_zero_bytes`.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from autograders.kit import read_only


def train_step_accumulated(model, optimizer, micro_batches) -> float:
    """One optimizer step over all `micro_batches` of a causal LM, the loss averaged over every target token of the
    step: each micro-batch's summed token loss (`num_items_in_batch`, Hugging Face's own switch from mean to
    sum / count) divided by the step's count of shifted labels, backward per micro-batch, one step, zero_grad."""
    n_targets = sum(int((mb["labels"][:, 1:] != -100).sum()) for mb in micro_batches)
    total = 0.0
    for mb in micro_batches:
        loss = model(
            **mb, num_items_in_batch=n_targets
        ).loss  # sum of this micro-batch's token losses / n_targets
        loss.backward()
        total += loss.item()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total


def seq_cls_loss(outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """A Trainer `compute_loss_func` for sequence classification: summed cross-entropy / num_items_in_batch (the
    labelled examples of the whole accumulated step), the plain mean when Trainer passes no count."""
    logits = outputs["logits"]
    if num_items_in_batch is None:
        return F.cross_entropy(logits, labels)
    return F.cross_entropy(logits, labels, reduction="sum") / num_items_in_batch


def measure_zero_bytes(widths_list, strategies=None) -> dict:
    """{(widths, strategy): [per-rank {category: bytes}]} measured on 2 gloo processes, one torchrun launch (read-only;
    the same MLPs are measured once per process: the bytes of a configuration are the same every time)."""
    from autograders.lesson05 import ZERO_STRATEGIES

    strategies = ZERO_STRATEGIES if strategies is None else strategies
    return _measured_zero_bytes(tuple(tuple(widths) for widths in widths_list), tuple(strategies))


@functools.cache
def _measured_zero_bytes(widths_list: tuple, strategies: tuple):
    from autograders.lesson05 import ZERO_KEYS
    from memlab.distributed import launch

    jobs = {
        f"zero_memory#{i}": dict(widths=list(widths), strategies=list(strategies))
        for i, widths in enumerate(widths_list)
    }
    measured = launch(jobs)
    return read_only(
        {
            (tuple(widths), strategy): [
                {key: rank["strategies"][strategy]["after_step"][key] for key in ZERO_KEYS}
                for rank in measured[f"zero_memory#{i}"]
            ]
            for i, widths in enumerate(widths_list)
            for strategy in strategies
        }
    )


def zero_formula_bytes(shapes, world: int, strategy: str) -> list[dict[str, int]]:
    """ZeRO's formulas, exact where each rank holds exactly 1/N of every tensor (fp32 AdamW: 4 B per parameter
    for weights and gradients, 8 B for the two moments, and one 4-byte `step` per parameter tensor it updates)."""
    psi = sum(math.prod(s) for s in shapes)
    n = world if strategy == "fsdp2" else 1
    per_rank = {
        "parameters": 4 * psi // n,
        "gradients": 4 * psi // n,
        "optimizer state": 8 * psi // n + 4 * len(shapes),
    }
    return [dict(per_rank) for _ in range(world)]
