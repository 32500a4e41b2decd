"""Lesson 07's reference answers (grading only; see autograders/references/__init__.py).

`DelayedScaler` is Transformer Engine's delayed-scaling recipe, read from its source (Transformer Engine
2.20.0.dev0, commit d0067d0, transformer_engine/pytorch/quantization.py: `_update_amax_history`,
`_default_get_amax_and_update_history`, `_default_sf_compute`; the recipe's defaults in
transformer_engine/common/recipe/__init__.py, `DelayedScaling`). tests/gpu/test_fp8_gpu.py compares it with
Transformer Engine itself where TE is installed.
"""

from __future__ import annotations

import torch

FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}


class DelayedScaler:
    """One tensor's delayed scaling: `scale` is what the current step casts with (1.0 at first); `update(amax)`
    records the amax that step observed, then, as Transformer Engine does at the end of a step:

    1. amax = max over the history (`"max"`) or the newest entry (`"most_recent"`);
    2. the history rolls by one (`torch.roll(h, -1, 0)`) and its first slot is zeroed for the next amax;
    3. scale = (fp8_max / amax) / 2^margin in float32, kept unchanged when amax is 0, inf or NaN, and float32's
       largest value when that division overflows.
    """

    def __init__(
        self, fmt: str, amax_history_len: int = 1024, amax_compute_algo: str = "max", margin: int = 0
    ):
        self.fp8_max = FP8_MAX[fmt]
        self.algo, self.margin = amax_compute_algo, margin
        self.history = torch.zeros(amax_history_len, dtype=torch.float32)
        self._scale = torch.ones((), dtype=torch.float32)

    @property
    def scale(self) -> float:
        return float(self._scale)

    def update(self, amax: float) -> None:
        self.history[0] = amax
        amax_t = self.history.max() if self.algo == "max" else self.history[0].clone()
        if self.history.numel() > 1:
            self.history.copy_(torch.roll(self.history, -1, 0))
        self.history[0] = 0.0
        sf = (self.fp8_max / amax_t) / (2**self.margin)
        sf = torch.where(amax_t > 0.0, sf, self._scale)
        sf = torch.where(torch.isfinite(amax_t), sf, self._scale)
        sf = torch.where(torch.isinf(sf), torch.full_like(sf, torch.finfo(torch.float32).max), sf)
        self._scale = sf.float()


def expected_scale(x: torch.Tensor, fp8_max: float) -> float:
    """Exercise 7.1's scale: fp8_max / amax in float32, amax over the finite values (1.0 when there are none, or all
    are 0); a scale beyond float32's range is float32's largest value."""
    finite = x.float()[torch.isfinite(x.float())]
    amax = finite.abs().max() if finite.numel() else torch.tensor(0.0)
    if amax == 0:
        return 1.0
    scale = torch.tensor(fp8_max, dtype=torch.float32) / amax.float()
    return torch.finfo(torch.float32).max if torch.isinf(scale) else float(scale)


def quantize_fp8(x: torch.Tensor, fmt: str):
    """Current (just-in-time) per-tensor scaling, saturating: (x_fp8, scale)."""
    dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
    fp8_max = FP8_MAX[fmt]
    x = x.float()
    finite = x[torch.isfinite(x)]
    amax = finite.abs().max() if finite.numel() else torch.tensor(0.0)
    scale = torch.tensor(fp8_max, dtype=torch.float32) / amax if amax > 0 else torch.tensor(1.0)
    if torch.isinf(scale):
        scale = torch.tensor(torch.finfo(torch.float32).max)
    return (x * scale).clamp(-fp8_max, fp8_max).to(dtype), scale


def dequantize_fp8(x_fp8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x_fp8.float() / scale


def quantize_mxfp8(x: torch.Tensor, block: int = 32):
    """MXFP8 as Transformer Engine casts it: per 32 values along the last dimension, the exponent
    e = ceil(log2(amax / 448)) (-127 for a zero block), elements x / 2^e in E4M3."""
    blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)
    amax = blocks.abs().amax(-1)
    e = torch.ceil(torch.log2(amax / 448.0))
    e = torch.where(amax > 0, e, torch.full_like(e, -127)).clamp(-127, 127).to(torch.int32)
    q = (blocks / torch.exp2(e.float()).unsqueeze(-1)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.reshape(x.shape), e


def fp8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b as one FP8 GEMM: both operands in E4M3 with current per-tensor scales, torch._scaled_mm, bf16 out."""
    qa, sa = quantize_fp8(a, "e4m3")
    qb, sb = quantize_fp8(b.t().contiguous(), "e4m3")  # _scaled_mm wants its second operand column-major
    one = torch.ones((), device=a.device)
    return torch._scaled_mm(
        qa,
        qb.t(),
        scale_a=(one / sa.to(a.device)).float(),
        scale_b=(one / sb.to(a.device)).float(),
        out_dtype=torch.bfloat16,
    )
