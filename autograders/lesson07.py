"""Checks for lesson 07 — FP8 training and what Transformer Engine does underneath.

- `quantize_fp8` / `dequantize_fp8` (Exercise 7.1): properties, not a stored answer. The scale must be the task's
  fp8_max / amax (amax over the finite values: stored for the public tensors, autograders/data/lesson07.json; the
  grading reference's, `expected_scale`, for a drawn one); every finite element must be the FP8 value nearest to
  x * scale
  (an error of at most half the format's spacing there; ±fp8_max beyond the range), infinities saturate, NaN stays
  NaN; dequantizing divides by the scale.
- `DelayedScaler` (Exercise 7.2) is compared, update by update, with Transformer Engine's delayed-scaling recipe
  (`_default_get_amax_and_update_history` and `_default_sf_compute` in transformer_engine/pytorch/quantization.py,
  Transformer Engine 2.20.0.dev0, commit d0067d0): the public sequences' scales are stored
  (autograders/data/lesson07.json, scripts/make_check_data.py), the drawn ones come from the grading reference
  (autograders/references/lesson07.py). tests/gpu compares that reference with Transformer Engine itself.
- `quantize_mxfp8` (Exercise 7.3): per 32-element block, the exponent must be the smallest power of two that keeps
  the block's amax within E4M3's range (NVIDIA's rule, ceil(log2(amax / 448)): Transformer Engine's rounding up,
  `float_to_e8m0` in transformer_engine/common/util/ptx_arch_spec.cuh), and every element the nearest E4M3 value of
  x / 2^e. OCP MX v1.0's reference rule, floor(log2(amax)) - 8 (torchao's FLOOR mode), fails with a message that
  names it.
- `fp8_matmul` (Exercise 7.4): its result is compared with the product of the dequantized FP8 operands; it must
  dispatch `aten._scaled_mm` (seen by a dispatch mode). A CPU stage runs where torch has a CPU `_scaled_mm`; the
  GPU stage needs compute capability 8.9 (FP8 tensor cores).

Every touch of the learner's code is a learner step (autograders/kit.py): the functions' results come back as plain
data (FP8 tensors as their dtype and bytes), the learner's DelayedScaler lives in a dict that only learner steps fill
and each of its scales comes back as a float, and fp8_matmul's call runs under the dispatch mode inside its step (what
it saw comes back as a bool). The expected values (the task's scale, the stored and reference scales, the exact
product) are reference steps, so under grading only the judge computes them.
"""

from __future__ import annotations

import functools
import json
import numbers
from pathlib import Path

import torch

from autograders import kit
from autograders.kit import _
from memlab.formats import get_format

DATA = Path(__file__).resolve().parent / "data" / "lesson07.json"
FP8 = {"e4m3": ("fp8_e4m3", torch.float8_e4m3fn, 448.0), "e5m2": ("fp8_e5m2", torch.float8_e5m2, 57344.0)}


@functools.cache
def stored() -> dict:
    return kit.read_only(json.loads(DATA.read_text()))


def spacing(target: torch.Tensor, fmt: str) -> torch.Tensor:
    """The distance between neighbouring values of the FP8 format around each |target| (float64)."""
    layout = get_format(FP8[fmt][0])
    emin = 1 - layout.bias
    t = target.double().abs()
    exponent = torch.floor(torch.log2(t.clamp_min(2.0**emin)))
    return torch.exp2(exponent - layout.mantissa_bits)


def expect_nearest(q: torch.Tensor, target: torch.Tensor, fmt: str, *, case: str, what: str) -> None:
    """Every finite `target` went to the nearest value of the format (±max beyond the range): |q - t| <= spacing/2."""
    fp8_max = FP8[fmt][2]
    q, target = q.double(), target.double()
    finite = torch.isfinite(target)
    clamped = target.clamp(-fp8_max, fp8_max)
    error = (q - clamped).abs()
    bound = spacing(clamped, fmt) / 2
    bad = finite & ~(error <= bound)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise kit.CheckFailed(
            _(
                "case {case}: {what}: element {index} is not the FP8 value nearest to x * scale (clamped to "
                "±{fp8_max:g}): you got {got:.6g}, {error:.3g} away, more than half the format's spacing there "
                "({bound:.3g})."
            ).format(
                case=case,
                what=what,
                index=i,
                fp8_max=fp8_max,
                got=q.flatten()[i].item(),
                error=error.flatten()[i].item(),
                bound=bound.flatten()[i].item(),
            )
        )


# ---- e1: quantize_fp8 / dequantize_fp8 ---------------------------------------------------------------------------


def _e1_cases() -> list[tuple[str, torch.Tensor]]:
    """The public tensors (built afresh for each format)."""
    g = torch.Generator().manual_seed(7)
    special = torch.randn(64, generator=g) * 5
    special[[3, 17, 40]] = torch.tensor([float("inf"), float("-inf"), float("nan")])
    cases = [
        (kit.Case("activations, N(0, 3^2), 32 x 64"), torch.randn(32, 64, generator=g) * 3),
        (kit.Case("gradients around 1e-6"), torch.randn(32, 64, generator=g) * 1e-6),
        (kit.Case("huge values around 1e30"), torch.randn(16, 16, generator=g) * 1e30),
        (kit.Case("all zeros"), torch.zeros(8, 8)),
        (kit.Case("with +inf, -inf and NaN"), special),
        (kit.Case("amax below float32's normal range (1e-40)"), torch.tensor([1e-40, -5e-41, 0.0])),
        (
            kit.Case("one outlier 1e4 among N(0, 1)"),
            torch.cat([torch.randn(255, generator=g), torch.tensor([1e4])]),
        ),
        (kit.Case("bf16 input"), (torch.randn(16, 32, generator=g) * 20).bfloat16()),
    ]
    return cases


def _drawn_e1_case(rng, i: int) -> tuple[str, torch.Tensor]:
    """A tensor drawn at grading time (this lesson numbers its drawn cases from 0)."""
    magnitude = 10.0 ** rng.uniform(-8, 8)
    shape = (rng.randint(1, 40), rng.randint(1, 40))
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    return (
        kit.drawn(
            i - 1,
            kit.Case(
                "{rows} x {cols}, scale {magnitude:.2g}", rows=shape[0], cols=shape[1], magnitude=magnitude
            ),
        ),
        torch.randn(*shape, generator=gen) * magnitude,
    )


def _expected_scale(fmt: str, name: str, x: torch.Tensor, public: bool) -> float:
    """A reference step: the task's scale of a public tensor, stored; a drawn one's, the grading reference's."""
    if public:
        return float.fromhex(stored()["quantize_fp8_scale"][fmt][name])
    return kit.references("lesson07").expected_scale(x, FP8[fmt][2])


@kit.check("e1_quantize_fp8", points=3)
def check_quantize_fp8(quantize_fp8, dequantize_fp8) -> int:
    kit.expect_callable(quantize_fp8, "quantize_fp8")
    kit.expect_callable(dequantize_fp8, "dequantize_fp8")
    n = 0
    for fmt, (_layout, dtype, fp8_max) in FP8.items():
        cases = [(*case, True) for case in _e1_cases()]
        cases += [(*case, False) for case in kit.drawn_cases(f"e1_quantize_fp8/{fmt}", 3, _drawn_e1_case)]
        for name, x, public in cases:
            case = kit.Case("{fmt}, {case}", fmt=fmt, case=name)
            result = kit.call(quantize_fp8, x.clone(), fmt, case=case)
            kit.expect_type(result, tuple, case=case, what=_("the result"))
            if len(result) != 2:
                raise kit.CheckFailed(
                    _("case {case}: the result should be a pair (x_fp8, scale); got {count} items.").format(
                        case=case, count=len(result)
                    )
                )
            q, scale = result
            kit.expect_type(q, torch.Tensor, case=case, what="x_fp8")
            if q.dtype != dtype or q.shape != x.shape:
                raise kit.CheckFailed(
                    _(
                        "case {case}: x_fp8 should be a {dtype} tensor of shape {shape}; got {got_dtype} {got_shape}."
                    ).format(
                        case=case,
                        dtype=dtype,
                        shape=tuple(x.shape),
                        got_dtype=q.dtype,
                        got_shape=tuple(q.shape),
                    )
                )
            kit.expect_type(scale, torch.Tensor, case=case, what="scale")
            if scale.dtype != torch.float32 or scale.numel() != 1:
                raise kit.CheckFailed(
                    _(
                        "case {case}: scale should be a float32 tensor with one value; got {dtype} {shape}."
                    ).format(case=case, dtype=scale.dtype, shape=tuple(scale.shape))
                )
            expected = kit.reference(lambda: _expected_scale(fmt, name, x, public))  # noqa: B023 - called at once
            kit.expect_close(float(scale), expected, case=case, what="scale", rtol=1e-6, reveal=False)
            xf = x.float()
            target = xf * scale.float()
            expect_nearest(q.float(), target, fmt, case=case, what="x_fp8")
            qf = q.float()
            for where, want in ((xf == float("inf"), fp8_max), (xf == float("-inf"), -fp8_max)):
                if where.any() and not (qf[where] == want).all():
                    raise kit.CheckFailed(
                        _("case {case}: an infinite x should saturate to {expected:g}; got {got}.").format(
                            case=case, expected=want, got=qf[where].tolist()
                        )
                    )
            if torch.isnan(xf).any() and not torch.isnan(qf[torch.isnan(xf)]).all():
                raise kit.CheckFailed(
                    _("case {case}: a NaN should stay NaN; got {got}.").format(
                        case=case, got=qf[torch.isnan(xf)].tolist()
                    )
                )
            # the decoded x_fp8 and scale, as copies: what the learner's code does to them changes no later step
            back = kit.call(
                dequantize_fp8, q.clone(), scale.clone(), case=kit.Case("{case} (dequantize)", case=case)
            )
            kit.expect_type(back, torch.Tensor, case=case, what=_("dequantize_fp8's result"))
            if back.dtype != torch.float32 or back.shape != x.shape:
                raise kit.CheckFailed(
                    _(
                        "case {case}: dequantize_fp8 should return float32 of shape {shape}; got {dtype} {got_shape}."
                    ).format(case=case, shape=tuple(x.shape), dtype=back.dtype, got_shape=tuple(back.shape))
                )
            want = qf / scale.float()
            ok = torch.isclose(back, want, rtol=1e-6, atol=0.0, equal_nan=True)
            if not ok.all():
                i = int((~ok).flatten().nonzero()[0])
                raise kit.CheckFailed(
                    _(
                        "case {case}: dequantize_fp8(x_fp8, scale) should be x_fp8 / scale in float32: element {index} "
                        "is {how_far}."
                    ).format(
                        case=case,
                        index=i,
                        how_far=kit.how_far(back.flatten()[i].item(), want.flatten()[i].item()),
                    )
                )
            n += 1
    return n


# ---- e2: DelayedScaler -------------------------------------------------------------------------------------------

#: (name, fmt, amax_history_len, amax_compute_algo, margin, amaxes)
E2_PUBLIC = [
    (
        kit.Case("growing activations, max over 4"),
        "e4m3",
        4,
        "max",
        0,
        [1.0, 2.0, 4.0, 8.0, 16.0, 3.0, 2.0, 1.0, 1.0, 1.0],
    ),
    (
        kit.Case("one spike, max over 3 (it ages out)"),
        "e4m3",
        3,
        "max",
        0,
        [2.0, 2.0, 100.0, 2.0, 2.0, 2.0, 2.0, 2.0],
    ),
    (kit.Case("one spike, most_recent"), "e4m3", 3, "most_recent", 0, [2.0, 2.0, 100.0, 2.0, 2.0, 2.0]),
    (kit.Case("margin 2"), "e4m3", 2, "max", 2, [3.0, 5.0, 0.5, 0.5]),
    (kit.Case("gradients in E5M2"), "e5m2", 4, "max", 0, [1e-4, 3e-4, 2e-5, 7e-5, 1e-5, 1e-5]),
    (kit.Case("an amax of 0 keeps the scale"), "e4m3", 1, "max", 0, [4.0, 0.0, 0.0, 8.0]),
    (
        kit.Case("inf and NaN keep the scale"),
        "e4m3",
        1,
        "most_recent",
        0,
        [4.0, float("inf"), float("nan"), 2.0],
    ),
    (kit.Case("an amax too small for float32's scale"), "e4m3", 1, "max", 0, [1e-38, 1e-40, 1.0]),
    (kit.Case("history of 1"), "e5m2", 1, "max", 1, [10.0, 1.0, 1000.0]),
]


def _drawn_e2_case(rng, i: int) -> tuple:
    """A sequence drawn at grading time (numbered from 0); its scales come from the grading reference."""
    fmt = rng.choice(["e4m3", "e5m2"])
    length, algo, margin = rng.randint(1, 6), rng.choice(["max", "most_recent"]), rng.randint(0, 3)
    amaxes = [10.0 ** rng.uniform(-6, 4) if rng.random() > 0.1 else 0.0 for _ in range(rng.randint(4, 12))]
    desc = kit.Case(
        "{fmt}, history {length}, {algo}, margin {margin}, {steps} steps",
        fmt=fmt,
        length=length,
        algo=algo,
        margin=margin,
        steps=len(amaxes),
    )
    return kit.drawn(i - 1, desc), fmt, length, algo, margin, amaxes, False


def _expected_scales(name, fmt, length, algo, margin, amaxes, public: bool) -> list[float]:
    """A reference step: the scale before any update and after each one (stored for the public sequences)."""
    if public:
        return [float.fromhex(h) for h in stored()["delayed_scaler"][name]]
    return scales_of(kit.references("lesson07").DelayedScaler, fmt, length, algo, margin, amaxes)


@kit.check("e2_delayed_scaler", points=3)
def check_delayed_scaler(DelayedScaler) -> int:  # noqa: N803 - the learner's class
    kit.expect_callable(DelayedScaler, "DelayedScaler")
    cases = [(*row, True) for row in E2_PUBLIC]
    cases += kit.drawn_cases("e2_delayed_scaler", 3, _drawn_e2_case)
    for name, fmt, length, algo, margin, amaxes, public in cases:
        expected = kit.reference(lambda: _expected_scales(name, fmt, length, algo, margin, amaxes, public))  # noqa: B023
        case = kit.Case(
            "{case} ({fmt}, amax_history_len={length}, {algo}, margin={margin})",
            case=name,
            fmt=fmt,
            length=length,
            algo=repr(algo),
            margin=margin,
        )
        side = {}  # the learner's scaler, filled by learner steps only (the judge never has it)
        settings = dict(amax_history_len=length, amax_compute_algo=algo, margin=margin)
        got = kit.learner(case, lambda: _build(side, DelayedScaler, fmt, settings, case))  # noqa: B023 - called at once
        kit.expect_close(
            got,
            _nth(expected, 0),
            case=case,
            what=_("the scale before the first update"),
            rtol=1e-6,
            reveal=False,
        )
        for step, amax in enumerate(amaxes, start=1):
            label = kit.Case("{case}, update({amax:g})", case=case, amax=amax)
            got = kit.learner(label, lambda: _update(side, label, amax, case, step))  # noqa: B023 - called at once
            kit.expect_close(
                got,
                _nth(expected, step),
                case=case,
                what=_("the scale after update {step} (amax {amax:g})").format(step=step, amax=amax),
                rtol=1e-6,
                reveal=False,
            )
    return len(cases)


def _nth(expected, i: int):
    return expected if expected is kit.DEFERRED else expected[i]


def _build(side: dict, scaler_class, fmt: str, settings: dict, case: str) -> float:
    """A learner step: the learner's scaler, kept in `side` for the next steps, and its scale before any update."""
    side["scaler"] = kit.call(scaler_class, fmt, **settings, case=case)
    return _scale(side["scaler"], case, _("`scale` before any update"))


def _update(side: dict, label: str, amax: float, case: str, step: int) -> float:
    """A learner step: one `update(amax)` of the learner's scaler (what it returns is not used), then its scale."""
    kit.call(side["scaler"].update, amax, case=label)
    return _scale(side["scaler"], case, _("`scale` after update {step}").format(step=step))


def _scale(scaler, case: str, what: str) -> float:
    """Inside a learner step: the scaler's `scale`, as a float (`what` names it in a message)."""
    value = getattr(scaler, "scale", None)
    if isinstance(value, torch.Tensor):
        value = float(value)
    kit.expect_type(value, numbers.Real, case=case, what=what)
    return float(value)


def scales_of(scaler_class, fmt, length, algo, margin, amaxes) -> list[float]:
    """The scale before any update and after each one, of a DelayedScaler class."""
    scaler = scaler_class(fmt, amax_history_len=length, amax_compute_algo=algo, margin=margin)
    scales = [float(scaler.scale)]
    for amax in amaxes:
        scaler.update(amax)
        scales.append(float(scaler.scale))
    return scales


# ---- e3: quantize_mxfp8 ------------------------------------------------------------------------------------------

BLOCK = 32


def _e3_cases() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(11)
    outliers = torch.randn(4, 128, generator=g)
    outliers[:, 5] = 300.0
    outliers[2, 70] = -5e4
    mixed = torch.randn(2, 96, generator=g) * torch.logspace(-6, 6, 96)
    cases = [
        (kit.Case("N(0, 1), 8 x 64"), torch.randn(8, 64, generator=g)),
        (kit.Case("an outlier in some blocks"), outliers),
        (kit.Case("blocks 12 orders of magnitude apart"), mixed),
        (
            kit.Case("a block of zeros"),
            torch.cat([torch.zeros(1, 32), torch.randn(1, 32, generator=g)], dim=1),
        ),
        (kit.Case("exact powers of two times 448"), torch.tensor([[448.0 * 2.0**k for k in range(-16, 16)]])),
        (kit.Case("3-d activations (2, 3, 64)"), torch.randn(2, 3, 64, generator=g) * 7),
    ]
    return cases


def _drawn_e3_case(rng, i: int) -> tuple[str, torch.Tensor]:
    """A tensor drawn at grading time (numbered from 0)."""
    rows, blocks = rng.randint(1, 6), rng.randint(1, 5)
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    x = torch.randn(rows, blocks * BLOCK, generator=gen) * 10.0 ** rng.uniform(-5, 5)
    return kit.drawn(i - 1, kit.Case("{rows} x {cols}", rows=rows, cols=blocks * BLOCK)), x


@kit.check("e3_quantize_mxfp8", points=2)
def check_quantize_mxfp8(quantize_mxfp8) -> int:
    kit.expect_callable(quantize_mxfp8, "quantize_mxfp8")
    cases = _e3_cases() + kit.drawn_cases("e3_quantize_mxfp8", 3, _drawn_e3_case)
    for case, x in cases:
        result = kit.call(quantize_mxfp8, x.clone(), case=case)
        kit.expect_type(result, tuple, case=case, what=_("the result"))
        if len(result) != 2:
            raise kit.CheckFailed(
                _("case {case}: the result should be a pair (x_fp8, exponents); got {count} items.").format(
                    case=case, count=len(result)
                )
            )
        q, e = result
        kit.expect_type(q, torch.Tensor, case=case, what="x_fp8")
        kit.expect_type(e, torch.Tensor, case=case, what="exponents")
        blocks_shape = (*x.shape[:-1], x.shape[-1] // BLOCK)
        if q.dtype != torch.float8_e4m3fn or q.shape != x.shape:
            raise kit.CheckFailed(
                _(
                    "case {case}: x_fp8 should be float8_e4m3fn of shape {shape}; got {dtype} {got_shape}."
                ).format(case=case, shape=tuple(x.shape), dtype=q.dtype, got_shape=tuple(q.shape))
            )
        if e.is_floating_point() or tuple(e.shape) != blocks_shape:
            raise kit.CheckFailed(
                _(
                    "case {case}: exponents should be an integer tensor of shape {shape} (one per 32 values); got "
                    "{dtype} {got_shape}."
                ).format(case=case, shape=blocks_shape, dtype=e.dtype, got_shape=tuple(e.shape))
            )
        blocks = x.float().reshape(*blocks_shape, BLOCK)
        amax = blocks.abs().amax(-1)
        e64 = e.long()
        nonzero = amax > 0
        fits = (amax <= 448.0 * torch.exp2(e64.double())) | ~nonzero
        smallest = (amax > 448.0 * torch.exp2(e64.double() - 1)) | ~nonzero
        zero_ok = (e64 == -127) | nonzero
        for ok, rule in (
            (fits, _("2^e must keep the block's amax within E4M3's range (amax / 2^e <= 448)")),
            (
                smallest,
                _("e must be the smallest such exponent (2^(e-1) would not keep amax / 2^(e-1) within 448)"),
            ),
            (
                zero_ok,
                _(
                    "an all-zero block gets the exponent -127 (the E8M0 byte 0, as Transformer Engine writes it)"
                ),
            ),
        ):
            if not ok.all():
                i = int((~ok).flatten().nonzero()[0])
                hint = ""
                ocp = torch.floor(torch.log2(amax.double())) - 8  # OCP MX v1.0's reference rule
                if ok is fits and nonzero.flatten()[i] and e64.flatten()[i] == ocp.flatten()[i]:
                    hint = " " + _(
                        "That is OCP MX v1.0's rule, floor(log2(amax)) - 8, which lets up to 512 * 2^e through and "
                        "saturates it; this exercise uses NVIDIA's, e = ceil(log2(amax / 448))."
                    )
                raise kit.CheckFailed(
                    _("case {case}: block {block}: {rule}; got e = {exponent}.{hint}").format(
                        case=case, block=i, rule=rule, exponent=int(e64.flatten()[i]), hint=hint
                    )
                )
        target = blocks / torch.exp2(e64.float()).unsqueeze(-1)
        expect_nearest(q.float().reshape(*blocks_shape, BLOCK), target, "e4m3", case=case, what="x_fp8")
    return len(cases)


# ---- e4: fp8_matmul ----------------------------------------------------------------------------------------------


def _e4_cases(device: str) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    sizes = [
        (kit.Case("64 x 128 @ 128 x 96"), 64, 128, 96),
        (kit.Case("16 x 256 @ 256 x 32, values around 1e-3"), 16, 256, 32),
    ]
    if device == "cuda":
        sizes.append((kit.Case("1024 x 1024 @ 1024 x 2048"), 1024, 1024, 2048))
    cases = []
    for name, m, k, n in sizes:
        a = torch.randn(m, k, generator=g)
        b = torch.randn(k, n, generator=g)
        if "1e-3" in name:
            a, b = a * 1e-3, b * 1e-3
        case = kit.Case("{case} ({device})", case=name, device=device)
        cases.append((case, a.to(device, torch.bfloat16), b.to(device, torch.bfloat16)))
    return cases


def cpu_scaled_mm_works() -> bool:
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(
            a, a.t(), scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0), out_dtype=torch.float32
        )
        return True
    except (RuntimeError, NotImplementedError):
        return False


def _seen_call(fp8_matmul, a: torch.Tensor, b: torch.Tensor, case: str, side: dict):
    """A learner step: fp8_matmul on copies of a and b, under a dispatch mode that notes the ops it ran."""
    seen = kit.op_recorder()
    with seen:
        out = kit.call(fp8_matmul, a.clone(), b.clone(), case=case)
    side["ops"] = seen.ops
    return out


def run_fp8_matmul_cases(fp8_matmul, device: str) -> int:
    cases = _e4_cases(device)
    for case, a, b in cases:
        side = {}  # the ops the learner's call dispatched, filled by the learner step only
        out = kit.learner(case, lambda: _seen_call(fp8_matmul, a, b, case, side))  # noqa: B023 - called at once
        dispatched = kit.Case("{case}: torch._scaled_mm dispatched", case=case)
        scaled_mm = kit.learner(dispatched, lambda: "_scaled_mm" in side["ops"])  # noqa: B023 - called at once
        kit.expect_type(out, torch.Tensor, case=case, what=_("the result"))
        if out.dtype != torch.bfloat16 or tuple(out.shape) != (a.shape[0], b.shape[1]):
            raise kit.CheckFailed(
                _(
                    "case {case}: the result should be bfloat16 of shape {shape}; got {dtype} {got_shape}."
                ).format(
                    case=case, shape=(a.shape[0], b.shape[1]), dtype=out.dtype, got_shape=tuple(out.shape)
                )
            )
        if not scaled_mm:
            raise kit.CheckFailed(
                _(
                    "case {case}: the product should run as one FP8 GEMM, torch._scaled_mm; it was not called."
                ).format(case=case)
            )
        exact = kit.reference(lambda: a.double() @ b.double())  # noqa: B023 - called at once
        if kit.judging():
            error = (out.double() - exact).norm() / exact.norm()
            # two E4M3 operands (3 mantissa bits: relative rounding <= 2^-4 each), k random terms: about 4% in norm
            kit.expect_close(
                float(error),
                0.0,
                case=case,
                what=_("the relative error against the exact product"),
                atol=0.08,
            )
    return len(cases)


@kit.check("e4_fp8_matmul", points=2)
def check_fp8_matmul(fp8_matmul) -> int:
    kit.expect_callable(fp8_matmul, "fp8_matmul")
    n = 0
    if cpu_scaled_mm_works():
        n += run_fp8_matmul_cases(fp8_matmul, "cpu")
    kit.needs_hardware(
        cuda=True,
        min_capability=(8, 9),
        passed=_("{count} CPU cases of torch._scaled_mm").format(count=n)
        if n
        else _("nothing (this torch has no CPU _scaled_mm)"),
    )
    return n + run_fp8_matmul_cases(fp8_matmul, "cuda")
