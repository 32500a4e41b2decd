"""On a real GPU: lesson 06's allocator measurements and its GPU exercises, with the grading references.

- The time_step check's CUDA stage (queued matmuls against CUDA events) and the largest_micro_batch check's real
  out-of-memory stage, run with the references; the largest micro-batch found under the cap goes to results/.
- An allocator snapshot of the lesson's Llama step at GPU sizes (`_record_memory_history` / `_dump_snapshot`), its
  segment summary and the memory_viz HTML, written under results/snapshots/ (committed only from a GPU run).
- The fragmenting pattern of §1 with and without `expandable_segments:True`, each in a fresh process.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import torch

from autograders.lesson06 import (
    check_largest_micro_batch,
    check_measure_trainer,
    check_time_step,
    run_cuda_oom_case,
)
from autograders.references import lesson06 as ref
from memlab import models
from memlab.measure import measure_training_step

MiB = 1024**2
RESULTS = Path(__file__).resolve().parents[2] / "results"
GPU_LM = dict(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=16,
    vocab_size=32000,
)  # the lesson's SIZES["cuda"]["lm"]


def test_the_gpu_stages_of_the_checks_pass_the_references(gpu_results, capsys):
    check_time_step(ref.time_step)
    check_largest_micro_batch(ref.largest_micro_batch)
    check_measure_trainer(ref.measure_trainer)
    out = capsys.readouterr().out
    assert "✓ e2_time_step: 6 cases passed" in out and "✓ e3_largest_micro_batch" in out, out
    assert "✓ e5_measure_trainer: 1 case passed" in out, out
    found = run_cuda_oom_case(ref.largest_micro_batch)
    gpu_results["profiling_largest_micro_batch"] = {
        "model": "MLP 4096 x 6 layers, micro-batch unit 64 rows",
        "cap_mib": found["cap_bytes"] / MiB,
        "largest": found["largest"],
    }


def test_a_snapshot_of_the_lesson_step(gpu_results):
    model = models.build_model(models.tiny_llama_config(**GPU_LM), device="cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(3, 32000, (8, 512), device="cuda")
    batch = {"input_ids": ids, "labels": ids}
    measure_training_step(model, batch, optimizer, track_storages=False)  # warm-up: AdamW's state exists
    folder = RESULTS / "snapshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "lesson06_llama_step.pickle"
    trace = measure_training_step(
        model, batch, optimizer, track_storages=False, record_history=True, snapshot_path=str(path)
    )
    from torch.cuda import _memory_viz

    snapshot = pickle.loads(path.read_bytes())
    (folder / "lesson06_llama_step.html").write_text(_memory_viz.trace_plot(snapshot))
    (folder / "lesson06_llama_step_segsum.txt").write_text(_memory_viz.segsum(snapshot))
    gpu_results["profiling_snapshot"] = {
        "model": "tiny_llama_config(**SIZES['cuda']['lm']), batch 8 x 512, AdamW, after one warm-up step",
        "peak_mib_allocated": trace.peak_bytes / MiB,
        "peak_mib_reserved": trace.cuda_peak_reserved_bytes / MiB,
        "marks_mib": {m.name: m.peak_bytes / MiB for m in trace.marks},
        "snapshot": str(path.relative_to(RESULTS.parent)),
    }
    assert trace.peak_bytes > 0 and path.stat().st_size > 0


FRAGMENTING_STEPS = r"""
import json, torch
MiB = 1024**2
keep = []
for step in range(12):
    big = torch.empty((64 + 16 * step) * MiB, dtype=torch.uint8, device="cuda")
    keep.append(torch.empty(MiB + 4096, dtype=torch.uint8, device="cuda"))
    del big
print(json.dumps(dict(allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
                      peak_allocated=torch.cuda.max_memory_allocated(), peak_reserved=torch.cuda.max_memory_reserved())))
"""


def test_expandable_segments_on_the_fragmenting_pattern(gpu_results):
    measured = {}
    for conf in ("", "expandable_segments:True"):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        out = subprocess.run(
            [sys.executable, "-c", FRAGMENTING_STEPS], env=env, capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        measured[conf or "default"] = {k: v / MiB for k, v in r.items()}
    gpu_results["profiling_expandable_segments_mib"] = measured
    assert measured["expandable_segments:True"]["peak_reserved"] <= measured["default"]["peak_reserved"]


def test_the_chunked_loss_lowers_the_step_peak_on_the_gpu(gpu_results):
    """Lesson 06's chunked cross-entropy (loaded from the solution notebook) against the model's own loss, on the
    lesson's GPU-sized Llama with a 32,000-token vocabulary in bf16 at 8 x 512 tokens: the allocator's peak of one
    training step each (after a warm-up step), and the step time."""
    from solution_code import solution

    (chunked_loss,) = solution("06-profiling", "chunked_loss")
    model = models.build_model(models.tiny_llama_config(**GPU_LM), device="cuda", dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(3, GPU_LM["vocab_size"], (8, 512), device="cuda")
    batch = {"input_ids": ids, "labels": ids}

    def step(loss_fn):
        loss_fn(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    measured = {}
    for name, loss_fn in (
        ("own", lambda m, b: m(**b).loss),
        ("chunked_1024", lambda m, b: chunked_loss(m, b, 1024)),
    ):
        step(loss_fn)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(loss_fn)
        end.record()
        torch.cuda.synchronize()
        measured[f"{name}_peak_mib"] = (torch.cuda.max_memory_allocated() - before) / MiB
        measured[f"{name}_step_ms"] = start.elapsed_time(end)
    gpu_results["profiling_chunked_loss"] = {
        "model": "lesson 06's GPU Llama, bf16, 8 x 512 tokens",
        **measured,
    }
    assert measured["chunked_1024_peak_mib"] < measured["own_peak_mib"], measured
