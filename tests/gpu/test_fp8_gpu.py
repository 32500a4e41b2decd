"""On a real GPU: lesson 07's FP8 GEMM exercise, the FP8 / bf16 GEMM sweep, and the DelayedScaler reference against
Transformer Engine itself.

- `check_fp8_matmul` with the grading reference, on a GPU with compute capability >= 8.9.
- `torch._scaled_mm` (E4M3 operands, per-tensor scales) against bf16 `@` for square GEMMs 1024..16384: TFLOP/s of
  each, to results/<gpu-name>.json ("fp8_gemm_sweep").
- Where transformer_engine is installed: a `te.Linear` run under TE's own `DelayedScaling` recipe with inputs of
  chosen amax, its input scale read after every step (`fp8_meta["scaling_fwd"].scale[0]`) and compared with
  `autograders.references.lesson07.DelayedScaler` fed the same amaxes ("te_delayed_scaling_vs_reference").
- Where transformer_engine is installed: what FP8 buys through TE, forward and backward, against bf16: `te.Linear`
  at two sizes and a Llama-2-7B-shaped `te.TransformerLayer`, under `DelayedScaling`, `Float8CurrentScaling` and,
  where the GPU has it, `MXFP8BlockScaling`: milliseconds, speed-up and peak ("te_speed"; lesson 07 §7 cites it).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from autograders.lesson07 import E2_PUBLIC, check_fp8_matmul
from autograders.references import lesson07 as ref
from coursetools.gpu.probes import cuda_ms as _ms

fp8_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
    reason="needs compute capability >= 8.9 (FP8 tensor cores)",
)


@fp8_gpu
def test_the_fp8_matmul_check_passes_the_reference_on_the_gpu(capsys):
    check_fp8_matmul(ref.fp8_matmul)
    assert "✓ e4_fp8_matmul" in capsys.readouterr().out


@fp8_gpu
def test_fp8_gemm_against_bf16(gpu_results):
    sweep = {}
    for n in (1024, 2048, 4096, 8192, 16384):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        qa, sa = ref.quantize_fp8(a, "e4m3")
        qb, sb = ref.quantize_fp8(b.t().contiguous(), "e4m3")
        inv_a, inv_b = (1 / sa).float(), (1 / sb).float()
        t_bf16 = _ms(lambda a=a, b=b: a @ b)
        t_fp8 = _ms(
            lambda qa=qa, qb=qb, inv_a=inv_a, inv_b=inv_b: torch._scaled_mm(
                qa, qb.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16
            )
        )
        t_full = _ms(lambda a=a, b=b: ref.fp8_matmul(a, b))
        flops = 2 * n**3
        sweep[str(n)] = {
            "bf16_tflops": flops / t_bf16 / 1e9,
            "fp8_gemm_tflops": flops / t_fp8 / 1e9,
            "fp8_with_quantize_tflops": flops / t_full / 1e9,
            "ms": {"bf16": t_bf16, "fp8_gemm": t_fp8, "fp8_with_quantize": t_full},
        }
        del a, b, qa, qb
        torch.cuda.empty_cache()
    gpu_results["fp8_gemm_sweep"] = sweep
    assert sweep["16384"]["fp8_gemm_tflops"] > sweep["16384"]["bf16_tflops"]


def test_transformer_engine_delayed_scaling_matches_the_reference(gpu_results):
    te = pytest.importorskip("transformer_engine.pytorch")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("TE's FP8 needs compute capability >= 8.9")
    from transformer_engine.common.recipe import DelayedScaling, Format

    compared = {}
    for name, fmt, length, algo, margin, amaxes in E2_PUBLIC:
        if fmt != "e4m3" or any(not (1e-6 < a < 1e6) for a in amaxes):
            continue  # the forward input is E4M3 under HYBRID; 0 / inf / NaN / tiny amaxes are the CPU check's
        recipe = DelayedScaling(
            fp8_format=Format.HYBRID, amax_history_len=length, amax_compute_algo=algo, margin=margin
        )
        lin = te.Linear(64, 64, params_dtype=torch.bfloat16).cuda()
        te_scales = []
        for amax in amaxes:
            x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
            x = (x / x.abs().max() * amax).to(torch.bfloat16)
            with _te_autocast(te, recipe):
                lin(x)
            te_scales.append(float(lin.fp8_meta["scaling_fwd"].scale[0]))
        observed = [
            float(torch.tensor(a, dtype=torch.bfloat16)) for a in amaxes
        ]  # the amax of the bf16 input
        expected = ref_scales(fmt, length, algo, margin, observed)
        compared[name] = {"te": te_scales, "reference": expected}
        torch.testing.assert_close(torch.tensor(te_scales), torch.tensor(expected), rtol=1e-6, atol=0)
    gpu_results["te_delayed_scaling_vs_reference"] = compared


def ref_scales(fmt, length, algo, margin, amaxes):
    scaler = ref.DelayedScaler(fmt, amax_history_len=length, amax_compute_algo=algo, margin=margin)
    scales = []
    for amax in amaxes:
        scaler.update(amax)
        scales.append(scaler.scale)
    return scales


#: what `test_transformer_engine_against_bf16` times: te.Linear(n, n) on n tokens, and one Llama-2-7B-shaped layer
TE_LINEAR_SIZES = (4096, 8192)
TE_LAYER = {"hidden": 4096, "ffn": 11008, "heads": 32, "seq": 2048, "batch": 4}


def test_transformer_engine_against_bf16(gpu_results):
    """Forward + backward of TE modules in bf16 and under each FP8 recipe this GPU runs: alone on the GPU, these say
    how large a GEMM or a layer must be before FP8 pays (quantizing every operand is memory traffic of its own)."""
    te = pytest.importorskip("transformer_engine.pytorch")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("TE's FP8 needs compute capability >= 8.9")
    from transformer_engine.common import recipe as recipes

    runs = {"bf16": None, "DelayedScaling": recipes.DelayedScaling()}
    runs["Float8CurrentScaling"] = recipes.Float8CurrentScaling()
    if te.is_mxfp8_available():
        runs["MXFP8BlockScaling"] = recipes.MXFP8BlockScaling()

    def timed(module, shape):
        x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn_like(x)
        row = {}
        for name, recipe in runs.items():

            def step(recipe=recipe):
                with _te_autocast(te, recipe) if recipe is not None else contextlib.nullcontext():
                    y = module(x)
                y.backward(grad)

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            ms = _ms(step, warmup=3, repeats=10)
            row[name] = {"ms": ms, "peak_mib": torch.cuda.max_memory_allocated() / 2**20}
        for name in row:
            row[name]["speedup_vs_bf16"] = row["bf16"]["ms"] / row[name]["ms"]
        return row

    measured = {}
    for n in TE_LINEAR_SIZES:
        linear = te.Linear(n, n, bias=False, params_dtype=torch.bfloat16, device="cuda")
        measured[f"te.Linear {n}x{n}, {n} tokens"] = timed(linear, (n, n))
        del linear
        torch.cuda.empty_cache()
    c = TE_LAYER
    layer = te.TransformerLayer(
        c["hidden"],
        c["ffn"],
        c["heads"],
        params_dtype=torch.bfloat16,
        device="cuda",
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    name = f"te.TransformerLayer {c['hidden']}/{c['ffn']}/{c['heads']} heads, seq {c['seq']} x batch {c['batch']}"
    measured[name] = timed(layer, (c["seq"], c["batch"], c["hidden"]))
    gpu_results["te_speed"] = measured
    assert all(row["bf16"]["ms"] > 0 for row in measured.values())


@pytest.mark.parametrize("fused", [False, True], ids=["q-k-v-apart", "fused-qkv"])
def test_transformer_engine_holds_fp8_weights_only_as_one_qkv_parameter(fused):
    """TE's own answer to the rule tests/lesson_checks/test_transformer_engine_api.py reads from its source (lesson 07's §7 stopped
    on it on an H200): inside quantized_model_init a TransformerLayer builds with fuse_qkv_params=True only."""
    te = pytest.importorskip("transformer_engine.pytorch")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("TE's FP8 needs compute capability >= 8.9")
    from transformer_engine.common.recipe import DelayedScaling

    init = te.quantized_model_init if hasattr(te, "quantized_model_init") else te.fp8_model_init
    with init(enabled=True, recipe=DelayedScaling()):
        if fused:
            te.TransformerLayer(
                256, 1024, 4, params_dtype=torch.bfloat16, device="cuda", fuse_qkv_params=True
            )
        else:
            with pytest.raises(RuntimeError, match="Splitting QuantizedTensor"):
                te.TransformerLayer(256, 1024, 4, params_dtype=torch.bfloat16, device="cuda")


def _te_autocast(te, recipe):
    """`te.autocast` (TE >= 2.9), or its older name."""
    if hasattr(te, "autocast"):
        return te.autocast(enabled=True, recipe=recipe)
    return te.fp8_autocast(enabled=True, fp8_recipe=recipe)
