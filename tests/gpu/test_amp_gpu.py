"""On a real GPU: bf16 autocast against fp32 on the same activation-dominated model (lesson 03, Exercise 3.4).

The measurement is Exercise 3.4 done as the lesson asks (`autograders.references.lesson03.measure_amp_step`, the
grading reference) on the check's own set-up (`amp_setup(...)` at its CUDA profile).
"""

import pytest
import torch

from autograders.kit import GRADING_ENV
from autograders.lesson03 import E4_PROFILES, amp_setup, check_measure_amp_step
from autograders.references.lesson03 import measure_amp_step as reference_amp_step

MiB = 1024**2
STEPS = 10


@pytest.fixture
def bf16_gpu():
    if torch.cuda.get_device_capability(0) < (8, 0):
        pytest.skip("bf16 tensor cores need compute capability 8.0 or later")
    return torch.device("cuda", 0)


def _measure(device, dtype) -> tuple[dict, int]:
    profile = E4_PROFILES["cuda"]
    model, optimizer, batch = amp_setup(device, profile["widths"], profile["batch"])
    n_params = sum(p.numel() for p in model.parameters())
    result = reference_amp_step(model, batch, optimizer, dtype, steps=STEPS)
    del model, optimizer, batch
    torch.cuda.empty_cache()
    return result, n_params


def test_bf16_autocast_lowers_the_peak_of_an_activation_dominated_step(gpu_results, bf16_gpu):
    fp32, n_params = _measure(bf16_gpu, None)
    bf16, _ = _measure(bf16_gpu, torch.bfloat16)
    profile = E4_PROFILES["cuda"]
    model_state = 16 * n_params  # fp32 weights + gradients + AdamW's two moments
    gpu_results["amp_bf16_vs_fp32_mlp"] = {
        "widths": profile["widths"],
        "batch": profile["batch"],
        "steps": STEPS,
        "optimizer": "AdamW",
        "n_params": n_params,
        "model_state_mib": model_state / MiB,
        "fp32_step_ms": fp32["step_ms"],
        "bf16_step_ms": bf16["step_ms"],
        "fp32_peak_mib": fp32["peak_bytes"] / MiB,
        "bf16_peak_mib": bf16["peak_bytes"] / MiB,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
    }
    assert model_state < fp32["peak_bytes"] / 2, "the set-up should be dominated by activations"
    assert bf16["peak_bytes"] < fp32["peak_bytes"]


def test_the_check_accepts_its_own_measurement(bf16_gpu, monkeypatch, capsys):
    monkeypatch.delenv(GRADING_ENV, raising=False)
    assert check_measure_amp_step(reference_amp_step) is None
    assert capsys.readouterr().out == "✓ e4_measure_amp_step: 2 cases passed\n"
