"""Lesson 06's reference answers (grading only; see autograders/references/__init__.py).

`expected_peak` is Exercise 6.1's answer read from the tracker's own trace: scripts/make_check_data.py stores the
public steps' answers from it, and the judge reads a drawn step's with it. The checks do not call the others: they
compare with what the tracker measured, with sleeps and queued work of known cost, and with what a Trainer is seen to
do. They are the answers the tests (tests/lesson_checks/test_autograders_lesson06.py, tests/kit/test_drawn_cases.py) hold the checks
against.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch

from memlab.measure import CATEGORIES


def time_step(fn, warmup: int = 2, repeats: int = 5, sync=None) -> tuple[float, float]:
    """Mean and sample standard deviation of `repeats` calls of `fn` after `warmup` calls, the device synchronised
    before the clock starts and before it stops (default: torch.cuda.synchronize when CUDA is available)."""
    if sync is None:
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.mean(times), (statistics.stdev(times) if len(times) > 1 else 0.0)


def expected_peak(trace) -> dict:
    """Exercise 6.1's answer, as the tracker measured it while the step ran: the peak, its split, the first operator at
    which live bytes reached it, and the mark after it (None if no mark follows)."""
    index, op, live = trace.peak_event
    following = [
        name[len("mark: ") :] for i, name, _ in trace.timeline if i > index and name.startswith("mark: ")
    ]
    assert live == trace.peak_bytes
    return {
        "phase": following[0] if following else None,
        "op": op,
        "bytes": trace.peak_bytes,
        "by_category": dict(trace.peak_by_category),
    }


def find_peak(events: list[dict]) -> dict:
    """Replay an event log of memlab's tracker: the first event at which live bytes are highest, its operator, the
    first mark after it and the live bytes by category there."""
    live, by_category, sizes = 0, dict.fromkeys(CATEGORIES, 0), {}
    best = None
    for i, event in enumerate(events):
        if event["action"] == "alloc":
            sizes[event["addr"]] = (event["size"], event["category"])
            live += event["size"]
            by_category[event["category"]] += event["size"]
            if best is None or live > best[1]:
                best = (i, live, event["op"], dict(by_category))
        elif event["action"] == "free":
            size, category = sizes.pop(event["addr"])
            live -= size
            by_category[category] -= size
    if best is None:
        return {"phase": None, "op": None, "bytes": 0, "by_category": by_category}
    index, peak, op, split = best
    phase = next((e["name"] for e in events[index + 1 :] if e["action"] == "mark"), None)
    return {"phase": phase, "op": op, "bytes": peak, "by_category": split}


def largest_micro_batch(step, max_batch: int) -> int:
    """Bisection for the largest micro-batch in 1..max_batch whose `step` runs; 0 if none does. Only
    torch.OutOfMemoryError means "too big"; after one, the failed step's memory is given back."""
    low, high = 0, max_batch  # low fits (0 trivially), everything above high is unknown or does not fit
    while low < high:
        mid = (low + high + 1) // 2
        try:
            step(mid)
            fits = True
        except torch.OutOfMemoryError:
            fits = False
        if fits:
            low = mid
        else:
            high = mid - 1
            if torch.cuda.is_available():  # the CPU frees by reference count at once
                gc.collect()
                torch.cuda.empty_cache()
    return low


def measure_trainer(trainer, warmup: int = 3) -> dict:
    """`trainer.train()` on a CUDA GPU: the allocator's peak over that call only, and the mean of the synchronised
    optimizer steps after `warmup`, timed by a callback placed first."""
    from autograders.lesson06 import _step_timer

    clock = _step_timer()
    trainer.callback_handler.callbacks.insert(0, clock)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    torch.cuda.synchronize()
    return {
        "peak_bytes": torch.cuda.max_memory_allocated(),
        "step_seconds": statistics.mean(clock.times[warmup:]),
    }
