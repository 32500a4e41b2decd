"""Lesson 08's reference answers (grading only; see autograders/references/__init__.py).

`expected_plan` is Exercise 8.1's answer: the lesson's rule applied to the simulated peaks. scripts/make_check_data.py
stores its plans for the public cases (autograders/data/lesson08.json); the judge decides a drawn case with it; the
tests hold `E1_TOO_CLOSE` against it.
"""

from __future__ import annotations

import math


def expected_plan(gpu_gb: float, seq: int) -> tuple[dict | None, float]:
    """The lesson's rule, by simulation: the plan, and how close (relative) its deciding peaks came to the budget."""
    from autograders.lesson08 import BATCH, HEADROOM, MICRO_BATCHES, GiB, _peak

    budget = (1 - HEADROOM) * gpu_gb * GiB
    closest = math.inf
    for checkpointing in (False, True):
        best = None
        for micro_batch in MICRO_BATCHES:
            peak = _peak(seq, micro_batch, checkpointing)
            closest = min(closest, abs(peak - budget) / budget)
            if peak > budget:
                break
            best = micro_batch
        if best is not None:
            return {
                "checkpointing": checkpointing,
                "micro_batch": best,
                "accumulation": BATCH // best,
            }, closest
    return None, closest
