"""On a real GPU: the tracker against the caching allocator, and the simulator against a real CUDA step."""

import time

import pytest
import torch

from memlab import estimate
from memlab.measure import measure_training_step
from memlab.models import build_model, mlp, tiny_llama_config

MiB = 1024**2


def test_tracker_agrees_with_max_memory_allocated(gpu_results):
    torch.manual_seed(0)
    widths, batch = [4096, 8192, 8192, 4096, 10], 2048
    model = mlp(widths).cuda()
    data = (torch.randn(batch, widths[0], device="cuda"), torch.randint(0, 10, (batch,), device="cuda"))
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    measure_training_step(model, data, optimizer)  # warm-up: cuBLAS workspaces, optimizer state
    trace = measure_training_step(model, data, optimizer)
    gpu_results["tracker_vs_allocator_mlp"] = {
        "widths": widths,
        "batch": batch,
        "allocator_peak_mib": trace.peak_bytes / MiB,
        "tracked_peak_mib": trace.tracked_peak_bytes / MiB,
        "reserved_peak_mib": trace.cuda_peak_reserved_bytes / MiB,
    }
    assert trace.tracked_peak_bytes == pytest.approx(trace.peak_bytes, rel=0.05)


def test_simulated_llama_step_predicts_the_cuda_peak(gpu_results):
    # ~1.1B parameters: Llama-shaped, bf16 weights, AdamW with foreach (CUDA's default implementation)
    config = tiny_llama_config(
        hidden_size=2048,
        intermediate_size=5504,
        num_hidden_layers=20,
        num_attention_heads=16,
        num_key_value_heads=16,
        vocab_size=32000,
        use_cache=False,
    )
    batch_size, seq = 2, 1024

    def make_optimizer(params):
        return torch.optim.AdamW(params, foreach=True)

    def batch(device="cpu"):
        ids = torch.randint(0, 32000, (batch_size, seq), device=device)
        return {"input_ids": ids, "labels": ids}

    simulated = estimate.simulate_training_step(
        lambda: build_model(config, dtype=torch.bfloat16, device="meta"), batch, make_optimizer
    )
    model = build_model(config, dtype=torch.bfloat16, device="cuda")
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params >= 1_000_000_000
    torch.cuda.empty_cache()
    real = measure_training_step(model, batch("cuda"), make_optimizer(model.parameters()))
    gpu_results["simulated_vs_cuda_llama_1b"] = {
        "n_params": n_params,
        "batch": batch_size,
        "seq": seq,
        "cuda_peak_mib": real.peak_bytes / MiB,
        "simulated_peak_mib": simulated.peak_bytes / MiB,
        "relative_error": simulated.peak_bytes / real.peak_bytes - 1,
    }
    assert simulated.peak_bytes == pytest.approx(real.peak_bytes, rel=0.05)


def _peak_of_a_step(config, batch, inside_backward: bool) -> tuple[int, int, int]:
    """(the allocator's peak of the second step, all gradients' bytes, the largest parameter's) of an AdamW step
    after backward, or of one AdamW per parameter stepped in its post-accumulate-grad hook."""
    torch.manual_seed(0)
    model = build_model(config, dtype=torch.bfloat16, device="cuda")
    if inside_backward:
        optimizers = {p: torch.optim.AdamW([p], foreach=True) for p in model.parameters()}

        def step_now(p):
            optimizers[p].step()
            optimizers[p].zero_grad(set_to_none=True)

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(step_now)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    for _ in range(2):  # the peak of the second: the first step makes AdamW's state and cuBLAS's workspaces
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        model(**batch).loss.backward()
        if not inside_backward:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    return torch.cuda.max_memory_allocated(), sum(sizes), max(sizes)


def test_optimizer_step_inside_backward_removes_the_gradient_buffer(gpu_results):
    """Lesson 05's step inside backward on a ~1.1B Llama in bf16 (one short row: the training state dominates): one
    AdamW per parameter stepped in its post-accumulate-grad hook against one AdamW after backward. The allocator's
    peak drops by most of the gradient buffer: all of it but about the largest parameter's gradient."""
    config = tiny_llama_config(
        hidden_size=2048,
        intermediate_size=5504,
        num_hidden_layers=20,
        num_attention_heads=16,
        num_key_value_heads=16,
        vocab_size=32000,
        use_cache=False,
    )
    ids = torch.randint(0, 32000, (1, 128), device="cuda")
    batch = {"input_ids": ids, "labels": ids}
    ordinary, gradients, largest = _peak_of_a_step(config, batch, inside_backward=False)
    torch.cuda.empty_cache()
    fused, _, _ = _peak_of_a_step(config, batch, inside_backward=True)
    gpu_results["optimizer_step_inside_backward_llama_1b"] = {
        "peak_ordinary_mib": ordinary / MiB,
        "peak_inside_backward_mib": fused / MiB,
        "gradient_buffer_mib": gradients / MiB,
        "largest_gradient_mib": largest / MiB,
    }
    assert ordinary - fused >= 0.8 * (gradients - largest)


def test_what_offloading_the_optimizer_costs_on_this_machine(gpu_results):
    """Lesson 05's §6.5 on a GPU machine: the bandwidth a pinned host buffer of 1 GiB reaches to the GPU and back
    (what PCIe makes of ZeRO-Offload's traffic: 16-bit gradients out, 16-bit weights in), and torch.optim.AdamW's
    time per parameter on this machine's CPU, which runs the offloaded step."""
    n = 2**30
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(n, dtype=torch.uint8, device="cuda")
    seconds = {}
    for name, copy in (("host_to_gpu", lambda: device.copy_(host, non_blocking=True)),
                       ("gpu_to_host", lambda: host.copy_(device, non_blocking=True))):  # fmt: skip
        copy()  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            copy()
        end.record()
        torch.cuda.synchronize()
        seconds[name] = start.elapsed_time(end) / 1e3 / 5
    params = [torch.nn.Parameter(torch.randn(50_000_000))]
    params[0].grad = torch.randn_like(params[0])
    adam = torch.optim.AdamW(params, lr=1e-4)
    adam.step()
    timed = time.perf_counter()
    adam.step()
    per_parameter = (time.perf_counter() - timed) / params[0].numel()
    gpu_results["cpu_offload"] = {
        "pinned_gb_per_s": {k: n / s / 1e9 for k, s in seconds.items()},
        "cpu_adamw_ns_per_parameter": per_parameter * 1e9,
        "cpu_threads": torch.get_num_threads(),
    }
    assert all(n / s / 1e9 > 1 for s in seconds.values()), seconds
