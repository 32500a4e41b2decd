"""Lesson 05's reference answers (grading only; see autograders/references/__init__.py).

The checks of lesson 05 do not call them: they compare with Hugging Face's own full-batch loss and with torch's
cross-entropy. They are the answers the tests (tests/test_autograders_lesson05.py, tests/test_drawn_cases.py) and
tests/gpu hold the checks against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
