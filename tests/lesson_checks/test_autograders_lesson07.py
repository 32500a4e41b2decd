"""Lesson 07's checks pass the solution and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own
(solutions/07-fp8-transformer-engine/07-fp8-transformer-engine.ipynb, loaded by tests/solution_code.py); the grading references
(autograders/references/lesson07.py, Transformer Engine's recipe as its source reads) must pass too.
"""

from __future__ import annotations

import pytest
import torch
from check_helpers import failure
from solution_code import solution

import autograders.kit as kit
import autograders.lesson07 as lesson07
from autograders import wire
from autograders.kit import CheckFailed, NotGradedHere
from autograders.lesson07 import (
    E2_PUBLIC,
    check_delayed_scaler,
    check_fp8_matmul,
    check_quantize_fp8,
    check_quantize_mxfp8,
    cpu_scaled_mm_works,
    scales_of,
    stored,
)
from autograders.references import lesson07 as ref

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    quantize_fp8,
    dequantize_fp8,
    DelayedScaler,
    quantize_mxfp8,
    fp8_matmul,
) = solution(
    "07-fp8-transformer-engine",
    "quantize_fp8",
    "dequantize_fp8",
    "DelayedScaler",
    "quantize_mxfp8",
    "fp8_matmul",
)

pytestmark = pytest.mark.usefixtures("learner_mode")

FP8_DTYPES = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


needs_cpu_scaled_mm = pytest.mark.skipif(not cpu_scaled_mm_works(), reason="this torch has no CPU _scaled_mm")

# ---- right answers pass, stubs fail ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "line"),
    [
        (lambda: check_quantize_fp8(quantize_fp8, dequantize_fp8), "✓ e1_quantize_fp8: 16 cases passed"),
        (
            lambda: check_quantize_fp8(ref.quantize_fp8, ref.dequantize_fp8),
            "✓ e1_quantize_fp8: 16 cases passed",
        ),
        (lambda: check_delayed_scaler(DelayedScaler), "✓ e2_delayed_scaler: 9 cases passed"),
        (lambda: check_delayed_scaler(ref.DelayedScaler), "✓ e2_delayed_scaler: 9 cases passed"),
        (lambda: check_quantize_mxfp8(quantize_mxfp8), "✓ e3_quantize_mxfp8: 6 cases passed"),
        (lambda: check_quantize_mxfp8(ref.quantize_mxfp8), "✓ e3_quantize_mxfp8: 6 cases passed"),
    ],
    ids=["e1", "e1-reference", "e2", "e2-reference", "e3", "e3-reference"],
)
def test_right_answers_pass(run, line, capsys):
    assert run() is None
    assert capsys.readouterr().out.splitlines() == [line]


@needs_cpu_scaled_mm
@pytest.mark.parametrize("answer", [fp8_matmul, ref.fp8_matmul], ids=["e4", "e4-reference"])
def test_e4_passes_what_a_cpu_can_check(answer, capsys, no_gpu):
    assert check_fp8_matmul(answer) is None
    out = capsys.readouterr().out
    assert out.startswith("e4_fp8_matmul: NOT CHECKED HERE: needs a CUDA GPU (compute capability >= 8.9)")
    assert "2 CPU cases" in out


NOT_WRITTEN = (
    "( case [^:]*: your function raised NotImplementedError: it is not written yet| `.*` is not written yet: "
)
NOT_WRITTEN += "it still raises NotImplementedError)\\.$"


@pytest.mark.parametrize(
    "run",
    [
        lambda: check_quantize_fp8(stub, stub),
        lambda: check_quantize_fp8(quantize_fp8, stub),
        lambda: check_delayed_scaler(type("DelayedScaler", (), {"__init__": stub, "update": stub})),
        lambda: check_quantize_mxfp8(stub),
        lambda: check_fp8_matmul(stub),
    ],
    ids=["e1", "e1-dequantize", "e2", "e3", "e4"],
)
def test_the_learner_stubs_fail_as_not_written_yet(run):
    with pytest.raises(CheckFailed, match=NOT_WRITTEN):
        run()


def test_e1_under_strict_grading_draws_three_tensors_per_format(kit_context, monkeypatch, capsys):
    import autograders.kit as kit

    kit_context(kit.STRICT, 11)
    assert check_quantize_fp8(quantize_fp8, dequantize_fp8) is None
    assert capsys.readouterr().out.strip() == "✓ e1_quantize_fp8: 22 cases passed"


def test_the_stored_scales_are_the_references():
    for name, *rest in E2_PUBLIC:
        assert [s.hex() for s in scales_of(ref.DelayedScaler, *rest)] == list(
            stored()["delayed_scaler"][name]
        )


# ---- e1 ----------------------------------------------------------------------------------------------------------


def test_e1_no_scale_fails():
    def unscaled(x, fmt):
        dtype, fp8_max = FP8_DTYPES[fmt]
        return x.float().clamp(-fp8_max, fp8_max).to(dtype), torch.tensor(1.0)

    message = failure(lambda f: check_quantize_fp8(f, dequantize_fp8), unscaled)
    assert "scale is too low" in message and "case e4m3, activations" in message


def test_e1_an_amax_that_counts_infinities_fails():
    def inf_amax(x, fmt):
        dtype, fp8_max = FP8_DTYPES[fmt]
        amax = x.float().abs().max()
        scale = torch.tensor(fp8_max) / amax if amax > 0 else torch.tensor(1.0)
        return (x.float() * scale).clamp(-fp8_max, fp8_max).to(dtype), scale.float()

    message = failure(lambda f: check_quantize_fp8(f, dequantize_fp8), inf_amax)
    assert "case e4m3, with +inf, -inf and NaN" in message


def test_e1_casting_without_clamping_fails_on_e5m2_infinity():
    def no_clamp(x, fmt):
        dtype, fp8_max = FP8_DTYPES[fmt]
        q, scale = quantize_fp8(x, fmt)
        return (x.float() * scale).to(dtype), scale

    message = failure(lambda f: check_quantize_fp8(f, dequantize_fp8), no_clamp)
    assert "e5m2, with +inf, -inf and NaN" in message and "saturate" in message


def test_e1_a_dequantize_that_multiplies_fails():
    message = failure(lambda f: check_quantize_fp8(quantize_fp8, f), lambda q, s: q.float() * s)
    assert "dequantize_fp8(x_fp8, scale) should be x_fp8 / scale" in message


def test_e1_truncation_instead_of_rounding_fails():
    def truncate(x, fmt):
        q, scale = quantize_fp8(x, fmt)
        target = (x.float() * scale).clamp(-FP8_DTYPES[fmt][1], FP8_DTYPES[fmt][1])
        down = q.float().abs() > target.abs()  # rounded away from zero: step one value towards zero instead
        bits = q.view(torch.uint8).clone()
        bits[down & (q.float() != 0)] -= 1
        return bits.view(q.dtype), scale

    message = failure(lambda f: check_quantize_fp8(f, dequantize_fp8), truncate)
    assert "is not the FP8 value nearest to x * scale" in message


# ---- e2 ----------------------------------------------------------------------------------------------------------


def test_e2_a_scale_from_the_previous_steps_only_fails():
    class PreviousOnly(DelayedScaler):  # reads the history before writing this step's amax into it
        def update(self, amax):
            window = self.history.max() if self.algo == "max" else self.history[-1].clone()
            self.history = torch.roll(self.history, -1, 0)
            self.history[-1] = amax
            if window > 0 and torch.isfinite(window):
                self.scale = float(torch.tensor(self.fp8_max) / window / 2**self.margin)

    message = failure(check_delayed_scaler, PreviousOnly)
    assert "case growing activations, max over 4" in message and "after update 1" in message


def test_e2_current_scaling_instead_of_delayed_fails():
    class Current(DelayedScaler):
        def update(self, amax):
            if amax > 0 and amax != float("inf") and amax == amax:
                self.scale = self.fp8_max / amax / 2**self.margin

    message = failure(check_delayed_scaler, Current)
    assert "case growing activations, max over 4" in message and "after update 6" in message


def test_e2_resetting_on_a_zero_amax_fails():
    class ResetOnZero(DelayedScaler):
        def update(self, amax):
            super().update(amax)
            if amax == 0:
                self.scale = 1.0

    assert "case an amax of 0 keeps the scale" in failure(check_delayed_scaler, ResetOnZero)


def test_e2_a_float64_scale_that_never_overflows_fails():
    class Float64(DelayedScaler):
        def update(self, amax):
            self.history[0] = amax
            window = float(self.history.max() if self.algo == "max" else self.history[0])
            self.history = torch.roll(self.history, -1, 0)
            self.history[0] = 0.0
            if window > 0 and window != float("inf"):
                self.scale = self.fp8_max / window / 2**self.margin  # 448 / 1e-38 = 4.5e40: no float32 limit

    assert "case an amax too small for float32's scale" in failure(check_delayed_scaler, Float64)


def test_e2_ignoring_the_margin_fails():
    class NoMargin(DelayedScaler):
        def __init__(self, fmt, amax_history_len=1024, amax_compute_algo="max", margin=0):
            super().__init__(fmt, amax_history_len, amax_compute_algo, 0)

    assert "case margin 2" in failure(check_delayed_scaler, NoMargin)


# ---- e3 ----------------------------------------------------------------------------------------------------------


def test_e3_the_ocp_floor_rule_saturates_and_fails():
    def ocp_floor(
        x,
    ):  # OCP MX v1.0's shared exponent: floor(log2(amax)) - 8, which can exceed 448 after scaling
        blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
        amax = blocks.abs().amax(-1)
        e = torch.floor(torch.log2(amax)) - 8
        e = torch.where(amax > 0, e, torch.full_like(e, -127)).to(torch.int32)
        q = (blocks / torch.exp2(e.float()).unsqueeze(-1)).clamp(-448, 448).to(torch.float8_e4m3fn)
        return q.reshape(x.shape), e

    message = failure(check_quantize_mxfp8, ocp_floor)
    assert "2^e must keep the block's amax within E4M3's range" in message
    assert "OCP MX v1.0's rule" in message and "ceil(log2(amax / 448))" in message


def test_e3_a_wrong_exponent_that_is_not_ocps_gets_no_ocp_hint():
    def two_too_small(x):
        q, e = quantize_mxfp8(x)
        e = e - 2
        blocks = x.float().reshape(*e.shape, 32) / torch.exp2(e.float()).unsqueeze(-1)
        return blocks.clamp(-448, 448).to(torch.float8_e4m3fn).reshape(x.shape), e

    message = failure(check_quantize_mxfp8, two_too_small)
    assert "2^e must keep the block's amax within E4M3's range" in message
    assert "OCP" not in message


def test_e3_one_exponent_too_many_fails():
    def plus_one(x):
        q, e = quantize_mxfp8(x)
        e = e + 1
        blocks = x.float().reshape(*e.shape, 32) / torch.exp2(e.float()).unsqueeze(-1)
        return blocks.clamp(-448, 448).to(torch.float8_e4m3fn).reshape(x.shape), e

    assert "e must be the smallest such exponent" in failure(check_quantize_mxfp8, plus_one)


def test_e3_blocks_across_the_wrong_dimension_fail():
    def first_dim(x):
        q, e = quantize_mxfp8(x.transpose(0, -1).contiguous()) if x.shape[0] % 32 == 0 else quantize_mxfp8(x)
        return q, e.float()

    assert "exponents should be an integer tensor" in failure(check_quantize_mxfp8, first_dim)


# ---- e4 ----------------------------------------------------------------------------------------------------------


@needs_cpu_scaled_mm
def test_e4_a_bf16_matmul_is_not_an_fp8_gemm(no_gpu):
    message = failure(check_fp8_matmul, lambda a, b: a @ b)
    assert "torch._scaled_mm" in message and "it was not called" in message


@needs_cpu_scaled_mm
def test_e4_unscaled_operands_fail_on_small_values(no_gpu):
    def unscaled(a, b):
        one = torch.ones(())
        qa, qb = a.float().to(torch.float8_e4m3fn), b.t().contiguous().float().to(torch.float8_e4m3fn)
        return torch._scaled_mm(qa, qb.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    message = failure(check_fp8_matmul, unscaled)
    assert "values around 1e-3" in message and "relative error" in message


@needs_cpu_scaled_mm
def test_e4_scales_the_wrong_way_round_fail(no_gpu):
    def inverted(a, b):
        qa, sa = quantize_fp8(a, "e4m3")
        qb, sb = quantize_fp8(b.t().contiguous(), "e4m3")
        return torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    assert "relative error" in failure(check_fp8_matmul, inverted)


# ---- graded: collected in the kernel, judged outside it (strict mode does both in this process) -----------------


def _pair_subclass():  # a result the check cannot take: the right pair, in a tuple subclass
    class Pair(tuple):
        pass

    return lambda x, f: Pair(quantize_fp8(x, f))


class StringScale(DelayedScaler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale = "1.0"


class FailingUpdate(DelayedScaler):
    def update(self, amax):
        raise ValueError("no history yet")


class ChainingScaler(
    DelayedScaler
):  # returns self from update, and keeps its scale as a 0-d tensor: both fine
    def update(self, amax):
        super().update(amax)
        self.scale = torch.tensor(float(self.scale), dtype=torch.float32)
        return self


class CurrentScaling(DelayedScaler):
    def update(self, amax):
        if amax > 0 and amax != float("inf") and amax == amax:
            self.scale = self.fp8_max / amax / 2**self.margin


class NoMargin(DelayedScaler):
    def __init__(self, fmt, amax_history_len=1024, amax_compute_algo="max", margin=0):
        super().__init__(fmt, amax_history_len, amax_compute_algo, 0)


def _unscaled_quantize(x, fmt):
    dtype, fp8_max = FP8_DTYPES[fmt]
    return x.float().clamp(-fp8_max, fp8_max).to(dtype), torch.tensor(1.0)


def _mxfp8_plus_one(x):
    q, e = quantize_mxfp8(x)
    e = e + 1
    blocks = x.float().reshape(*e.shape, 32) / torch.exp2(e.float()).unsqueeze(-1)
    return blocks.clamp(-448, 448).to(torch.float8_e4m3fn).reshape(x.shape), e


def _unscaled_matmul(a, b):
    one = torch.ones(())
    qa, qb = a.float().to(torch.float8_e4m3fn), b.t().contiguous().float().to(torch.float8_e4m3fn)
    return torch._scaled_mm(qa, qb.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _in_place_matmul(
    a, b
):  # scales its inputs in place: the check hands it copies, so the answer is still right
    a.mul_(2.0)
    return fp8_matmul(a, b) / 2


def _right(name, run, cases, **marks):
    return pytest.param(run, cases, id=name, **marks)


RIGHT_UNDER_GRADING = [
    _right("e1", lambda: check_quantize_fp8(quantize_fp8, dequantize_fp8), 22),
    _right("e1-reference", lambda: check_quantize_fp8(ref.quantize_fp8, ref.dequantize_fp8), 22),
    _right("e2", lambda: check_delayed_scaler(DelayedScaler), 12),
    _right("e2-reference", lambda: check_delayed_scaler(ref.DelayedScaler), 12),
    _right("e2-chaining-tensor-scale", lambda: check_delayed_scaler(ChainingScaler), 12),
    _right("e3", lambda: check_quantize_mxfp8(quantize_mxfp8), 9),
    _right("e3-reference", lambda: check_quantize_mxfp8(ref.quantize_mxfp8), 9),
]


@pytest.mark.parametrize(("run", "cases"), RIGHT_UNDER_GRADING)
def test_right_answers_pass_when_graded(run, cases, strict_mode, capsys):
    assert kit.current_context().mode == kit.STRICT
    assert run() is None
    assert capsys.readouterr().out.splitlines()[-1].endswith(f": {cases} cases passed")


@needs_cpu_scaled_mm
@pytest.mark.parametrize(
    "answer", [fp8_matmul, ref.fp8_matmul, _in_place_matmul], ids=["e4", "e4-reference", "e4-in-place"]
)
def test_e4_when_graded_on_a_cpu_is_not_graded_here_after_its_cpu_stage(answer, strict_mode, no_gpu, capsys):
    with pytest.raises(
        NotGradedHere, match=r"^NOT CHECKED HERE: needs a CUDA GPU \(compute capability >= 8\.9\)"
    ):
        check_fp8_matmul(answer)


fp8_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
    reason="needs compute capability >= 8.9 (FP8 tensor cores)",
)


@fp8_gpu
@pytest.mark.parametrize("mode", ["learner", "strict"])
@pytest.mark.parametrize(
    "answer", [fp8_matmul, ref.fp8_matmul, _in_place_matmul], ids=["e4", "e4-reference", "e4-in-place"]
)
def test_e4_passes_on_an_fp8_gpu(kit_context, answer, mode, monkeypatch, capsys):
    kit_context(kit.STRICT if mode == "strict" else kit.LEARNER)
    n = 2 if cpu_scaled_mm_works() else 0
    assert check_fp8_matmul(answer) is None
    assert capsys.readouterr().out.splitlines()[-1] == f"✓ e4_fp8_matmul: {n + 3} cases passed"


@fp8_gpu
@pytest.mark.parametrize("mode", ["learner", "strict"])
def test_e4_a_bf16_matmul_fails_on_an_fp8_gpu(kit_context, mode, monkeypatch):
    kit_context(kit.STRICT if mode == "strict" else kit.LEARNER)
    # right on the CPU (its stage passes), a bf16 matmul on the GPU
    message = failure(check_fp8_matmul, lambda a, b: a @ b if a.is_cuda else fp8_matmul(a, b))
    assert "(cuda): the product should run as one FP8 GEMM, torch._scaled_mm; it was not called." in message


WRONG = [
    pytest.param(lambda: check_quantize_fp8(stub, stub), id="e1-stubs"),
    pytest.param(lambda: check_quantize_fp8(quantize_fp8, stub), id="e1-dequantize-stub"),
    pytest.param(lambda: check_quantize_fp8(_unscaled_quantize, dequantize_fp8), id="e1-unscaled"),
    pytest.param(lambda: check_quantize_fp8(_pair_subclass(), dequantize_fp8), id="e1-not-plain-data"),
    pytest.param(
        lambda: check_quantize_fp8(quantize_fp8, lambda q, s: q.float() * s), id="e1-dequantize-multiplies"
    ),
    pytest.param(
        lambda: check_delayed_scaler(type("DelayedScaler", (), {"__init__": stub, "update": stub})),
        id="e2-stub",
    ),
    pytest.param(lambda: check_delayed_scaler(CurrentScaling), id="e2-current-scaling"),
    pytest.param(lambda: check_delayed_scaler(NoMargin), id="e2-no-margin"),
    pytest.param(lambda: check_delayed_scaler(StringScale), id="e2-string-scale"),
    pytest.param(lambda: check_delayed_scaler(FailingUpdate), id="e2-update-raises"),
    pytest.param(lambda: check_quantize_mxfp8(stub), id="e3-stub"),
    pytest.param(lambda: check_quantize_mxfp8(_mxfp8_plus_one), id="e3-one-exponent-too-many"),
    pytest.param(lambda: check_fp8_matmul(stub), id="e4-stub"),
    pytest.param(
        lambda: check_fp8_matmul(lambda a, b: a @ b), id="e4-bf16-matmul", marks=needs_cpu_scaled_mm
    ),
    pytest.param(lambda: check_fp8_matmul(_unscaled_matmul), id="e4-unscaled", marks=needs_cpu_scaled_mm),
]


@pytest.mark.parametrize("run", WRONG)
def test_wrong_answers_fail_when_graded_with_the_learners_message(kit_context, run, monkeypatch, no_gpu):
    with pytest.raises(CheckFailed) as learner_failure:
        run()
    kit_context(kit.STRICT, 20261123)
    with pytest.raises(CheckFailed) as graded_failure:
        run()
    assert str(graded_failure.value) == str(learner_failure.value)
    assert "drawn at grading time" not in str(graded_failure.value)  # each fails on a public case already


def test_the_messages_of_the_graded_wrong_answers():
    """What the learner sees for the answers above (the same text when graded)."""
    assert "scale is too low" in failure(lambda f: check_quantize_fp8(f, dequantize_fp8), _unscaled_quantize)
    message = failure(lambda f: check_quantize_fp8(f, dequantize_fp8), _pair_subclass())
    assert message.startswith(
        "e1_quantize_fp8: case e4m3, activations, N(0, 3^2), 32 x 64: what your code gave"
    )
    assert (
        "32 x 64 is a test_autograders_lesson07._pair_subclass.<locals>.Pair, a subclass of tuple (a check takes a "
        "plain tuple); a check takes only" in message
    )
    message = failure(check_delayed_scaler, StringScale)
    assert "`scale` before any update should be a number; got a str ('1.0')." in message
    message = failure(check_delayed_scaler, FailingUpdate)
    assert "update(1): your function raised ValueError: no history yet" in message
    assert "after update 6" in failure(check_delayed_scaler, CurrentScaling)
    assert "e must be the smallest such exponent" in failure(check_quantize_mxfp8, _mxfp8_plus_one)


COLLECTED = [
    pytest.param("e1", check_quantize_fp8, (quantize_fp8, dequantize_fp8), id="e1"),
    pytest.param("e2", check_delayed_scaler, (DelayedScaler,), id="e2"),
    pytest.param("e3", check_quantize_mxfp8, (quantize_mxfp8,), id="e3"),
    pytest.param("e4", check_fp8_matmul, (fp8_matmul,), id="e4", marks=needs_cpu_scaled_mm),
]


def _forbidden(*args, **kwargs):
    raise AssertionError("an expected value was computed in the grading kernel")


@pytest.mark.parametrize(("name", "check_fn", "answers"), COLLECTED)
def test_the_grading_kernel_never_computes_expected_values(
    name, check_fn, answers, monkeypatch, strict_mode, no_gpu
):
    with monkeypatch.context() as m:
        m.setattr(kit, "references", _forbidden)
        for helper in ("stored", "_expected_scale", "scales_of", "_expected_scales"):
            m.setattr(lesson07, helper, _forbidden)
        transcript = kit.collect(check_fn.check, answers, {})
    assert all(r.failed is None for r in transcript.records), [r.failed for r in transcript.records]
    labels = [r.label for r in transcript.records]
    drawn_labels = [label for label in labels if "drawn at grading time" in label]
    if name == "e1":  # quantize and dequantize, 11 tensors per format
        assert len(labels) == 2 + 2 * 2 * 11 and len(drawn_labels) == 2 * 2 * 3
    elif name == "e2":  # the scaler and each of its updates, 9 public sequences and 3 drawn
        public = sum(1 + len(amaxes) for *_, amaxes in E2_PUBLIC)
        assert len(labels) - 1 == public + len(drawn_labels) and labels.count(labels[1]) == 1
        assert len({label.split(" (")[0] for label in drawn_labels}) == 3
    elif name == "e3":
        assert len(labels) == 1 + 9 and len(drawn_labels) == 3
    else:  # two CPU cases (the result, then which ops ran), then the GPU it lacks
        assert len(labels) == 1 + 2 * 2 + 1 and transcript.records[-1].missing is not None
    verdict = kit.judge(check_fn.check, kit.Transcript.from_data(transcript.to_data()), len(answers))
    if name == "e4":
        assert verdict.not_graded and "needs a CUDA GPU" in verdict.message
    else:
        assert verdict.passed and verdict.cases == {"e1": 22, "e2": 12, "e3": 9}[name], verdict.message


def test_fp8_tensors_cross_to_the_judge_bit_for_bit():
    bits = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        q = bits.view(dtype).t()  # every byte, NaNs and infinities included, not contiguous
        back = wire.decode(wire.encode((q, torch.tensor(448.0))))
        assert back[0].dtype == dtype and back[0].shape == q.shape
        assert torch.equal(back[0].view(torch.uint8), q.contiguous().view(torch.uint8))
