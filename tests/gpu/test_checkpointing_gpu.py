"""On a real GPU: checkpointing a stack of Llama-2-7B-shaped layers (lesson 04, Exercise 4.3).

The measurement is Exercise 4.3 done as the lesson asks (`autograders.references.lesson04.measure_checkpointed_stack`,
the grading reference) on the check's own set-up (`stack_setup(...)` at its CUDA profile: four layers of hidden 4096,
intermediate 11008, 32 heads, bf16, batch 1, seq 2048). The numbers go to results/<gpu-name>.json.
"""

import contextlib
import importlib.metadata
import time

import pytest
import torch

from autograders.kit import GRADING_ENV
from autograders.lesson04 import E3_MIN_GPU_GB, E3_PROFILES, check_measure_checkpointed_stack, stack_setup
from autograders.references.lesson04 import measure_checkpointed_stack as reference_stack

MiB = 1024**2


@pytest.fixture
def big_gpu():
    total = torch.cuda.get_device_properties(0).total_memory / 1024**3
    if total < E3_MIN_GPU_GB:
        pytest.skip(f"needs a GPU with at least {E3_MIN_GPU_GB} GB; this one has {total:.0f}")
    return torch.device("cuda", 0)


def _measure(device, use_checkpoint: bool) -> dict:
    p = E3_PROFILES["cuda"]
    layers, hidden, pe = stack_setup(device, p["config"], p["layers"], p["batch"], p["seq"], p["dtype"])
    result = reference_stack(layers, hidden, pe, use_checkpoint, steps=p["steps"])
    del layers, hidden, pe
    torch.cuda.empty_cache()
    return result


def test_checkpointing_lowers_the_peak_of_7b_shaped_layers(gpu_results, big_gpu):
    off = _measure(big_gpu, False)
    on = _measure(big_gpu, True)
    p = E3_PROFILES["cuda"]
    gpu_results["checkpointing_7b_shaped_layers"] = {
        "config": p["config"],
        "layers": p["layers"],
        "batch": p["batch"],
        "seq": p["seq"],
        "dtype": str(p["dtype"]),
        "attention": "eager",
        "steps": p["steps"],
        "peak_mib_without": off["peak_bytes"] / MiB,
        "peak_mib_with": on["peak_bytes"] / MiB,
        "step_ms_without": off["step_ms"],
        "step_ms_with": on["step_ms"],
    }
    assert on["peak_bytes"] < off["peak_bytes"]
    assert on["step_ms"] > off["step_ms"] * 0.9  # recomputation is not free (loose: timing noise)


def test_save_on_cpu_lowers_the_device_peak(gpu_results, big_gpu):
    """Section 7's offloading, on the same layers without checkpointing."""
    p = E3_PROFILES["cuda"]
    layers, hidden, pe = stack_setup(big_gpu, p["config"], 2, p["batch"], p["seq"], p["dtype"])

    def step(offload):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else torch.enable_grad():
            h = hidden
            for layer in layers:
                h = layer(h, position_embeddings=pe)
        h.float().square().mean().backward()
        for q in layers.parameters():
            q.grad = None
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()

    step(False)
    keep, offload = step(False), step(True)
    gpu_results["save_on_cpu_7b_shaped_layers"] = {
        "layers": 2,
        "seq": p["seq"],
        "peak_mib_keep": keep / MiB,
        "peak_mib_save_on_cpu": offload / MiB,
    }
    assert offload < keep


#: the offloads of section 7 against checkpointing, on its two 7B-shaped layers (lesson 04's prose waits for these)
OFFLOADS = ("keep", "save_on_cpu", "overlapped (TRL)", "checkpointing")


def test_overlapped_offload_against_save_on_cpu_and_checkpointing(gpu_results, big_gpu):
    """Section 7's two layers four ways: activations kept; save_on_cpu (copies on the compute stream); torchtune's
    OffloadActivations as TRL carries it (copies on a second stream, prefetch in backward); checkpointing. The
    device peak, the step time (best of three after a warm-up) and the pinned host memory each holds at its peak."""
    offloading = pytest.importorskip("trl.models.activation_offloading", reason="needs trl (pip install trl)")
    from torch.utils.checkpoint import checkpoint

    p = E3_PROFILES["cuda"]
    layers, hidden, pe = stack_setup(big_gpu, p["config"], 2, p["batch"], p["seq"], p["dtype"])
    overlapped = offloading.OffloadActivations(use_pin_memory=True, use_streams=True)
    contexts = {
        "keep": contextlib.nullcontext,
        "save_on_cpu": lambda: torch.autograd.graph.save_on_cpu(pin_memory=True),
        "overlapped (TRL)": lambda: overlapped,
        "checkpointing": contextlib.nullcontext,
    }

    def step(mode: str) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with contexts[mode]():
            h = hidden
            for layer in layers:
                if mode == "checkpointing":
                    h = checkpoint(layer, h, position_embeddings=pe, use_reentrant=False)
                else:
                    h = layer(h, position_embeddings=pe)
        h.float().square().mean().backward()
        for q in layers.parameters():
            q.grad = None
        torch.cuda.synchronize()
        return 1000 * (time.perf_counter() - start)

    measured = {}
    for mode in OFFLOADS:
        step(mode)  # warm-up: the pinned pool and the kernels
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_peak_host_memory_stats()
        ms = min(step(mode) for _ in range(3))
        pinned = torch.cuda.host_memory_stats().get("active_bytes.peak")
        measured[mode] = {
            "peak_mib": torch.cuda.max_memory_allocated() / MiB,
            "step_ms": ms,
            "pinned_host_mib_peak": None if pinned is None else pinned / MiB,
        }
    gpu_results["offloading_7b_shaped_layers"] = {
        "layers": 2,
        "seq": p["seq"],
        "batch": p["batch"],
        "dtype": str(p["dtype"]),
        "trl": importlib.metadata.version("trl"),
        "steps": "best of 3 after one warm-up",
        **measured,
    }
    keep = measured["keep"]["peak_mib"]
    assert measured["save_on_cpu"]["peak_mib"] < keep and measured["overlapped (TRL)"]["peak_mib"] < keep
    assert measured["checkpointing"]["peak_mib"] < keep


def test_the_check_accepts_its_own_measurement(big_gpu, monkeypatch, capsys):
    monkeypatch.delenv(GRADING_ENV, raising=False)
    assert check_measure_checkpointed_stack(reference_stack) is None
    assert capsys.readouterr().out == "✓ e3_measure_checkpointed_stack: 4 cases passed\n"
