"""Lesson 03's reference answers (grading only; see autograders/references/__init__.py)."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from memlab.measure import track_memory


def underflow_fraction(grads, scale: float, dtype: torch.dtype) -> float:
    """Of the nonzero elements, the fraction whose `(g * scale).to(dtype)` is exactly zero: torch's own cast."""
    lost = total = 0
    for g in grads:
        if g is None:
            continue
        nonzero = g != 0
        total += int(nonzero.sum())
        lost += int((nonzero & ((g * scale).to(dtype) == 0)).sum())
    return lost / total


def measure_amp_step(model, batch, optimizer, dtype: torch.dtype | None, steps: int = 10) -> dict:
    """Exercise 3.4 done as the lesson asks: one warm-up step, then `steps` timed steps inside `track_memory`.

    One step = forward + cross_entropy under `torch.autocast(dtype)` (plain fp32 when dtype is None), backward,
    `optimizer.step()`, `optimizer.zero_grad(set_to_none=True)`. On CUDA the clock is read after
    `torch.cuda.synchronize()` and the peak is the caching allocator's (`track_storages=False`: no per-operator
    overhead in the timing); on the CPU the storage tracker measures the peak. tests/gpu measures bf16 against fp32
    with it.
    """
    device = next(model.parameters()).device
    x, y = batch

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def one_step():
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    one_step()  # warm-up: optimizer state, autocast's weight cache, library workspaces
    sync()
    with track_memory(
        model=model, optimizer=optimizer, inputs=batch, track_storages=device.type != "cuda"
    ) as trace:
        start = time.perf_counter()
        for _ in range(steps):
            one_step()
        sync()
        elapsed = time.perf_counter() - start
    return {"step_ms": 1000 * elapsed / steps, "peak_bytes": trace.peak_bytes}
