"""Lesson 03's checks pass the reference solution and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own (solutions/03-amp-gradscaler/03-amp-gradscaler.ipynb, loaded by tests/solution_code.py;
the notebook itself is executed by the notebook tests). Each wrong answer is a mistake a learner is likely to
make; the test asserts that the check names the case (and step) that exposes it and, where the answer is hidden
(reveal=False), that the message does not give the expected number away. The GPU check's logic is run here on the
CPU (`run_measure_amp_step_check(fn, "cpu")`, the same code at tiny sizes); the check itself says NOT CHECKED HERE
on a machine without a CUDA GPU, or raises NotGradedHere when grading strictly. Under grading (strict mode: the
kernel collects, the judge decides) every check passes the solution and fails each wrong answer with the message a
learner sees, and the kernel computes no expected value.
"""

import json
import time

import pytest
import torch
import torch.nn.functional as F
from check_helpers import assert_hidden, failure
from solution_code import solution

import autograders.kit as kit
import memlab.hardware as hardware
from autograders.kit import CheckFailed, NotGradedHere, check
from autograders.lesson03 import (
    _underflow_cases,
    check_amp_train_step,
    check_dynamic_loss_scaler,
    check_measure_amp_step,
    check_underflow_fraction,
    run_measure_amp_step_check,
)
from autograders.references.lesson03 import measure_amp_step as reference_measure_amp_step
from memlab.measure import track_memory

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    underflow_fraction,
    DynamicLossScaler,
    amp_train_step,
    clip_before_unscale,
) = solution(
    "03-amp-gradscaler", "underflow_fraction", "DynamicLossScaler", "amp_train_step", "clip_before_unscale"
)

# Exercise 3.4's answer: the grading reference (the same code, kept out of the learner release)
measure_amp_step = reference_measure_amp_step


@check("e4_measure_amp_step", points=1)
def check_measure_amp_step_on_cpu(fn) -> int:
    """The GPU check's logic at the CPU profile's sizes, its requirement bypassed."""
    return run_measure_amp_step_check(fn, "cpu")


pytestmark = pytest.mark.usefixtures("learner_mode")


# ---- the reference solution passes every check ------------------------------------------------------------


@pytest.mark.parametrize(
    ("check_fn", "solution", "line"),
    [
        (check_underflow_fraction, underflow_fraction, "✓ e1_underflow_fraction: 7 cases passed"),
        (check_dynamic_loss_scaler, DynamicLossScaler, "✓ e2_dynamic_loss_scaler: 5 cases passed"),
        (check_amp_train_step, amp_train_step, "✓ e3_amp_train_step: 5 cases passed"),
        (check_measure_amp_step_on_cpu, measure_amp_step, "✓ e4_measure_amp_step: 2 cases passed"),
    ],
    ids=["e1", "e2", "e3", "e4-on-cpu"],
)
def test_reference_solution_passes(check_fn, solution, line, capsys):
    assert check_fn(solution) is None
    assert capsys.readouterr().out.splitlines() == [line]


# ---- every check: the stub, an undefined name -----------------------------------------------------------------


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


class StubScaler:
    """The learner version of Exercise 3.2: every method body is the stub."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        # YOUR CODE HERE
        raise NotImplementedError()

    def scale(self, loss):
        # YOUR CODE HERE
        raise NotImplementedError()

    def unscale_(self, optimizer):
        # YOUR CODE HERE
        raise NotImplementedError()

    def step(self, optimizer):
        # YOUR CODE HERE
        raise NotImplementedError()

    def update(self):
        # YOUR CODE HERE
        raise NotImplementedError()

    def get_scale(self):
        # YOUR CODE HERE
        raise NotImplementedError()


NOT_WRITTEN = (
    "( case [^:]*: your function raised NotImplementedError: it is not written yet| `.*` is not written yet: "
)
NOT_WRITTEN += "it still raises NotImplementedError)\\.$"


@pytest.mark.parametrize(
    ("check_fn", "learner_stub"),
    [
        (check_underflow_fraction, stub),
        (check_dynamic_loss_scaler, StubScaler),
        (check_amp_train_step, stub),
        (check_measure_amp_step_on_cpu, stub),
    ],
    ids=["e1", "e2", "e3", "e4-on-cpu"],
)
def test_the_learner_stub_fails_every_check_as_not_written_yet(check_fn, learner_stub):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}:{NOT_WRITTEN}"):
        check_fn(learner_stub)


def test_the_gpu_exercise_stub_fails_on_a_machine_without_a_gpu(no_gpu, learner_mode, capsys):
    """Issue 7.1: the stub of a GPU-only exercise never validates, on any machine."""
    with pytest.raises(CheckFailed, match="^e4_measure_amp_step: `measure_amp_step` is not written yet"):
        check_measure_amp_step(stub)
    assert "NOT CHECKED HERE" not in capsys.readouterr().out


def test_a_scaler_with_only_its_constructor_written_fails_as_not_written_yet():
    class OnlyInit(StubScaler):
        def __init__(self, *args, **kwargs):
            pass

    with pytest.raises(
        CheckFailed,
        match="^e2_dynamic_loss_scaler: case default hyper-parameters: your function raised NotImplementedError: "
        "it is not written yet\\.$",
    ):
        check_dynamic_loss_scaler(OnlyInit)


@pytest.mark.parametrize(
    "check_fn",
    [
        check_underflow_fraction,
        check_dynamic_loss_scaler,
        check_amp_train_step,
        check_measure_amp_step_on_cpu,
    ],
    ids=["e1", "e2", "e3", "e4-on-cpu"],
)
def test_an_undefined_answer_fails_every_check(check_fn):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}: `.*` is not defined yet"):
        check_fn(None)


# ---- e1: underflow_fraction ------------------------------------------------------------------------------------


def test_e1_the_cases_tell_the_mistakes_apart():
    """Sanity of the check's own cases: each has a reference that the wrong answers below get wrong."""
    from autograders.references.lesson03 import underflow_fraction as reference

    fractions = {name: reference(grads, scale, dtype) for name, grads, scale, dtype in _underflow_cases()}
    assert fractions["values at fp16's subnormal edge (2^-24, 2^-25, 1.5*2^-25, ...), scale 1"] == 3 / 7
    assert 0 < fractions["log-uniform gradients from 2^-44 to 2^-8, scale 2^16"] < 0.2
    assert fractions["the same gradients in bf16, scale 1"] == 0.0
    assert all(0 <= f < 1 for f in fractions.values())


def test_e1_averaging_per_tensor_fractions_fails():
    def per_tensor_mean(grads, scale, dtype=torch.float16):
        fractions = []
        for g in grads:
            if g is None:
                continue
            nonzero = g != 0
            fractions.append(float((nonzero & ((g * scale).to(dtype) == 0)).sum() / nonzero.sum()))
        return sum(fractions) / len(fractions)

    message = failure(check_underflow_fraction, per_tensor_mean)
    assert message.startswith(
        "e1_underflow_fraction: case three tensors of 1000, 10 and 10 elements, scale 1: "
        "the underflow fraction is too high"
    )
    assert_hidden(message, 10 / 1020)


def test_e1_counting_zeros_in_the_denominator_fails():
    def all_elements(grads, scale, dtype=torch.float16):
        lost = total = 0
        for g in grads:
            if g is None:
                continue
            total += g.numel()
            lost += int(((g != 0) & ((g * scale).to(dtype) == 0)).sum())
        return lost / total

    message = failure(check_underflow_fraction, all_elements)
    assert message.startswith(
        "e1_underflow_fraction: case a tensor with exact zeros in it, scale 2^4: the underflow fraction is too low"
    )
    assert "too low, by a factor of 2 to 10" in message


def test_e1_counting_inf_as_underflow_fails():
    def not_representable(grads, scale, dtype=torch.float16):
        lost = total = 0
        for g in grads:
            if g is None:
                continue
            cast = (g * scale).to(dtype)
            nonzero = g != 0
            total += int(nonzero.sum())
            lost += int((nonzero & ((cast == 0) | cast.isinf())).sum())
        return lost / total

    message = failure(check_underflow_fraction, not_representable)
    assert message.startswith(
        "e1_underflow_fraction: case a scale that overflows the largest values to inf (inf is not zero), "
        "scale 2^16: the underflow fraction is too high"
    )


def test_e1_a_threshold_instead_of_rounding_fails_at_the_edge():
    """|x| < 2^-24 is not what fp16 does: 2^-25 rounds (ties to even) to 0, 1.5 * 2^-25 rounds up to 2^-24."""

    def below_smallest_subnormal(grads, scale, dtype=torch.float16):
        lost = total = 0
        for g in grads:
            if g is None:
                continue
            nonzero = g != 0
            total += int(nonzero.sum())
            lost += int((nonzero & ((g * scale).abs() < torch.finfo(dtype).smallest_normal * 2.0**-10)).sum())
        return lost / total

    message = failure(check_underflow_fraction, below_smallest_subnormal)
    assert message.startswith("e1_underflow_fraction: case values at fp16's subnormal edge")
    assert "too high" in message  # 1.5 * 2^-25 is counted as lost, but it rounds up to 2^-24
    assert_hidden(message, 3 / 7)


def test_e1_forgetting_the_scale_fails():
    message = failure(
        check_underflow_fraction,
        lambda grads, scale, dtype=torch.float16: underflow_fraction(grads, 1.0, dtype),
    )
    assert "case a tensor with exact zeros in it, scale 2^4: the underflow fraction is too high" in message


def test_e1_ignoring_dtype_fails_on_bf16():
    message = failure(
        check_underflow_fraction,
        lambda grads, scale, dtype=torch.float16: underflow_fraction(grads, scale, torch.float16),
    )
    assert "case the same gradients in bf16, scale 1: the underflow fraction is too high" in message


def test_e1_a_tensor_result_fails_on_the_type():
    def as_tensor(grads, scale, dtype=torch.float16):
        return torch.tensor(underflow_fraction(grads, scale, dtype))

    message = failure(check_underflow_fraction, as_tensor)
    assert "the fraction should be a float; got a Tensor" in message


def test_e1_skipping_none_is_required():
    def no_skip(grads, scale, dtype=torch.float16):
        lost = total = 0
        for g in grads:
            nonzero = g != 0
            total += int(nonzero.sum())
            lost += int((nonzero & ((g * scale).to(dtype) == 0)).sum())
        return lost / total

    message = failure(check_underflow_fraction, no_skip)
    assert message.startswith(
        "e1_underflow_fraction: case a list with None in it (a frozen parameter), scale 2^10: your function raised "
        "AttributeError"
    )


def test_e1_changing_the_gradients_in_place_fails():
    def in_place(grads, scale, dtype=torch.float16):
        for g in grads:
            if g is not None:
                g.mul_(scale)
        return underflow_fraction(grads, 1.0, dtype)

    message = failure(check_underflow_fraction, in_place)
    assert "your function changed the gradients it was given (in place)" in message


# ---- e2: DynamicLossScaler ---------------------------------------------------------------------------------------


class NeverGrows(DynamicLossScaler):
    def update(self):
        if self._found_inf:
            self._scale = self._scale * self.backoff_factor
        self._found_inf = None


class GrowsEveryStep(DynamicLossScaler):
    def update(self):
        if self._found_inf:
            self._scale = self._scale * self.backoff_factor
        else:
            self._scale = self._scale * self.growth_factor
        self._found_inf = None


class KeepsCountingAfterOverflow(DynamicLossScaler):
    def update(self):
        if self._found_inf:
            self._scale = self._scale * self.backoff_factor  # the count of clean steps is not reset
            self._found_inf = None
            return
        super().update()


class StepsOnInf(DynamicLossScaler):
    def step(self, optimizer):
        if self._found_inf is None:
            self.unscale_(optimizer)
        optimizer.step()
        return True


class DividesTwice(DynamicLossScaler):
    """step() always unscales, even after an explicit unscale_() (and never complains)."""

    def unscale_(self, optimizer):
        self._found_inf = None
        super().unscale_(optimizer)

    def step(self, optimizer):
        self.unscale_(optimizer)
        if self._found_inf:
            return False
        optimizer.step()
        return True


class NaNIsNotOverflow(DynamicLossScaler):
    def unscale_(self, optimizer):
        super().unscale_(optimizer)
        self._found_inf = any(
            bool(torch.isinf(p.grad).any())
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        )


class StepReturnsNone(DynamicLossScaler):
    def step(self, optimizer):
        super().step(optimizer)


class PythonFloatScale(DynamicLossScaler):
    """The scale as a Python float (float64): 2^127 * 2 = 2^128 is finite there, not in float32."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scale = float(self._scale)

    def scale(self, loss):
        return loss * self._scale

    def unscale_(self, optimizer):
        self._found_inf = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.div_(self._scale)
                    self._found_inf = self._found_inf or not bool(torch.isfinite(p.grad).all())

    def update(self):
        if self._found_inf:
            self._scale *= self.backoff_factor
            self._clean_steps = 0
        else:
            self._clean_steps += 1
            if self._clean_steps == self.growth_interval:
                if torch.isfinite(torch.tensor(self._scale * self.growth_factor, dtype=torch.float64)):
                    self._scale *= self.growth_factor
                self._clean_steps = 0
        self._found_inf = None

    def get_scale(self):
        return self._scale


class ForgetsToResetAfterUpdate(DynamicLossScaler):
    """update() leaves the 'already unscaled' state of the last iteration in place."""

    def update(self):
        found = self._found_inf
        super().update()
        self._found_inf = found


class NoneGradCrash(DynamicLossScaler):
    def unscale_(self, optimizer):
        self._found_inf = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad.mul_(1.0 / self._scale)
                self._found_inf = self._found_inf or not bool(torch.isfinite(p.grad).all())


E2 = "e2_dynamic_loss_scaler: case "


def test_e2_never_growing_fails_where_growth_is_due():
    message = failure(check_dynamic_loss_scaler, NeverGrows)
    assert message == (
        E2
        + "growth_interval=3, growth_factor=4, backoff_factor=0.25, init_scale=1024, step 3: after update(), it "
        "was clean step number 3 in a row (growth_interval=3), so the scale should grow from 1,024 to 4,096 "
        "(x growth_factor 4); got 1,024."
    )


def test_e2_growing_on_every_step_fails_at_the_first_step():
    message = failure(check_dynamic_loss_scaler, GrowsEveryStep)
    assert message == (
        E2
        + "default hyper-parameters, step 1: after update(), it was clean step number 1 in a row since the "
        "last growth or overflow (growth_interval=2000), so the scale should stay 65,536; got 131,072."
    )


def test_e2_not_restarting_the_count_after_an_overflow_fails():
    """growth_interval=3: clean 4, 5, overflow 6, clean 7 -> a count that was not reset reaches 3 at step 7."""
    message = failure(check_dynamic_loss_scaler, KeepsCountingAfterOverflow)
    assert message.startswith(
        E2
        + "growth_interval=3, growth_factor=4, backoff_factor=0.25, init_scale=1024, step 7: after update(), it "
        "was clean step number 1 in a row since the last growth or overflow (growth_interval=3), so the scale "
        "should stay 1,024; got 4,096."
    )


def test_e2_stepping_on_inf_fails():
    message = failure(check_dynamic_loss_scaler, StepsOnInf)
    assert message == (
        E2
        + "default hyper-parameters, step 3: the gradients held an inf, so step() should skip optimizer.step() "
        "and return False; it stepped."
    )


def test_e2_nan_not_treated_as_an_overflow_fails():
    message = failure(check_dynamic_loss_scaler, NaNIsNotOverflow)
    assert message == (
        E2
        + "default hyper-parameters, step 6: the gradients held a NaN, so step() should skip optimizer.step() "
        "and return False; it stepped."
    )


def test_e2_dividing_twice_after_an_explicit_unscale_fails():
    message = failure(check_dynamic_loss_scaler, DividesTwice)
    assert message.startswith(
        E2 + "unscale_ + clip_grad_norm_ before step, growth_interval=2, step 1: after step() the parameter "
        "0.weight differs from torch.amp.GradScaler's run on an identical model"
    )
    assert message.endswith("Were the gradients divided by the scale exactly once before optimizer.step()?")


def test_e2_step_returning_none_fails():
    message = failure(check_dynamic_loss_scaler, StepReturnsNone)
    assert message == (
        E2 + "default hyper-parameters, step 1: step(optimizer) should return True or False (whether the "
        "optimizer stepped); got None."
    )


def test_e2_a_python_float_scale_fails_where_float32_overflows():
    message = failure(check_dynamic_loss_scaler, PythonFloatScale)
    assert message == (
        E2
        + "init_scale=2^127: growing would overflow float32 to inf, growth_interval=1, step 1: after update(), "
        "it was clean step number 1 in a row, but 2^127 x growth_factor overflows float32 to inf, so the scale "
        "should stay 2^127 (keep the scale in float32 as torch does, and grow it only to a finite value); got "
        "2^128."
    )


def test_e2_not_resetting_the_iteration_state_in_update_fails():
    message = failure(check_dynamic_loss_scaler, ForgetsToResetAfterUpdate)
    assert message.startswith(
        E2 + "default hyper-parameters, step 2: after step() the parameter 0.weight differs"
    )


def test_e2_a_parameter_without_grad_must_be_skipped():
    message = failure(check_dynamic_loss_scaler, NoneGradCrash)
    assert message.startswith(
        E2 + "a frozen parameter (its .grad is None), growth_interval=2, step 1: your function raised "
        "AttributeError: 'NoneType' object has no attribute 'mul_'"
    )


def test_e2_a_missing_method_is_named():
    class NoGetScale:
        def __init__(self, **kwargs):
            pass

        def scale(self, loss):
            return loss

        def unscale_(self, optimizer):
            pass

        def step(self, optimizer):
            return True

        def update(self):
            pass

    message = failure(check_dynamic_loss_scaler, NoGetScale)
    assert message == (
        E2 + "default hyper-parameters: your DynamicLossScaler has no method `get_scale`; it needs scale(), "
        "unscale_(), step(), update(), get_scale()."
    )


def test_e2_scale_returning_a_float_fails():
    class FloatScale(DynamicLossScaler):
        def scale(self, loss):
            return loss.item() * self.get_scale()

    message = failure(check_dynamic_loss_scaler, FloatScale)
    assert message == (
        E2
        + "default hyper-parameters, step 1: scale(loss) should return a tensor that backward() can be called "
        "on (the loss times the scale); got a float."
    )


def test_e2_wrong_init_scale_is_caught_before_any_step():
    class Ignores(DynamicLossScaler):
        def __init__(self, *args, **kwargs):
            super().__init__()

    message = failure(check_dynamic_loss_scaler, Ignores)
    assert message == (
        E2
        + "growth_interval=3, growth_factor=4, backoff_factor=0.25, init_scale=1024: before the first step "
        "get_scale() should be init_scale = 1,024; got 65,536."
    )


def test_e2_wrapping_gradscaler_fails():
    class Wrapper:
        def __init__(self, **kwargs):
            self.inner = torch.amp.GradScaler("cpu", **kwargs)

        def scale(self, loss):
            return self.inner.scale(loss)

        def unscale_(self, optimizer):
            self.inner.unscale_(optimizer)

        def step(self, optimizer):
            before = self.inner.get_scale()
            self.inner.step(optimizer)
            return before == before

        def update(self):
            self.inner.update()

        def get_scale(self):
            return self.inner.get_scale()

    message = failure(check_dynamic_loss_scaler, Wrapper)
    assert message == (
        E2
        + "default hyper-parameters: your DynamicLossScaler uses torch.amp.GradScaler; the exercise is to write "
        "its rules yourself."
    )


def test_e2_a_step_that_does_not_match_what_it_returns_fails():
    class Lies(DynamicLossScaler):
        def step(self, optimizer):
            super().step(optimizer)
            return True

    message = failure(check_dynamic_loss_scaler, Lies)
    assert (
        message
        == E2 + "default hyper-parameters, step 3: step() returned True, but optimizer.step() was not called."
    )


# ---- e3: amp_train_step ------------------------------------------------------------------------------------------

E3 = "e3_amp_train_step: case "
FIRST_E3 = E3 + "fp16, max_norm=0.05 (clipping active), GradScaler growth_interval=1, step 1: "


def test_e3_clipping_before_unscale_fails_with_a_hint():
    message = failure(check_amp_train_step, clip_before_unscale)
    assert message.startswith(
        FIRST_E3 + "the returned gradient norm is too high, by more than a factor of 10: "
    )
    assert message.endswith(
        "That is the loss scale (65,536) times too big: clip_grad_norm_ measured the still-scaled gradients. "
        "Call scaler.unscale_(optimizer) before clip_grad_norm_."
    )


def test_e3_clipping_before_unscale_but_returning_the_true_norm_fails_on_the_parameters():
    def sneaky(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) / scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), grad_norm.item()

    message = failure(check_amp_train_step, sneaky)
    assert message == (
        FIRST_E3
        + "the gradient the optimizer applied to 0.weight is wrong: they are not the unscaled gradients "
        "clipped to max_norm: unscale_ first, then clip_grad_norm_(model.parameters(), max_norm), then "
        "scaler.step(optimizer)."
    )


def test_e3_not_clipping_fails_on_the_parameters():
    def no_clip(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        return amp_train_step(model, batch, optimizer, scaler, 1e9, dtype)

    message = failure(check_amp_train_step, no_clip)
    assert message.startswith(
        FIRST_E3
        + "the gradient the optimizer applied to 0.weight is wrong: they were not clipped (max_norm=0.05; "
        "the norm was "
    )


def test_e3_forgetting_update_fails():
    def no_update(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), grad_norm.item()

    message = failure(check_amp_train_step, no_update)
    assert message == (
        FIRST_E3
        + "the scaler's calls were ['scale', 'unscale_', 'step']: call scaler.step(optimizer) and then "
        "scaler.update() once, at the end of the step."
    )


def test_e3_without_autocast_fails():
    def fp32(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), grad_norm.item()

    message = failure(check_amp_train_step, fp32)
    assert message == (
        FIRST_E3 + "the forward pass should run under torch.autocast(device_type=x.device.type, "
        "dtype=torch.float16); the first Linear layer's output was torch.float32."
    )


def test_e3_ignoring_the_dtype_argument_fails_on_bf16():
    def always_fp16(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        return amp_train_step(model, batch, optimizer, scaler, max_norm, torch.float16)

    message = failure(check_amp_train_step, always_fp16)
    assert message.startswith(E3 + "bf16, max_norm=0.05, a disabled GradScaler (bf16 needs none), step 1: ")
    assert message.endswith("dtype=torch.bfloat16); the first Linear layer's output was torch.float16.")


def keeps_grads(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    """The reference step without its last line, optimizer.zero_grad()."""
    x, y = batch
    with torch.autocast(device_type=x.device.type, dtype=dtype):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item(), grad_norm.item()


def test_e3_not_zeroing_the_gradients_fails():
    message = failure(check_amp_train_step, keeps_grads)
    # the first case with 2 steps
    assert message.startswith(E3 + "fp16, max_norm=100 (no clipping), step 2: ")
    assert message.endswith(
        "the gradients of the previous step were still in .grad and were added to this step's: clear them with "
        "optimizer.zero_grad(set_to_none=True), at the end of each step or at its start."
    )


def test_e3_zeroing_the_gradients_at_the_start_of_the_step_passes(learner_mode, capsys):
    """Both places are right: what matters is that no step adds the previous step's gradients to its own."""

    def zero_first(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        optimizer.zero_grad(set_to_none=True)
        return keeps_grads(model, batch, optimizer, scaler, max_norm, dtype)

    check_amp_train_step(zero_first)
    assert "✓ e3_amp_train_step" in capsys.readouterr().out


def test_e3_returning_the_scaled_loss_fails_with_a_hint():
    def scaled_loss(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return scaled.item(), grad_norm.item()

    message = failure(check_amp_train_step, scaled_loss)
    assert message.startswith(FIRST_E3 + "the returned loss is too high")
    assert message.endswith(
        "That is the loss scale (65,536) times too big: return the loss itself (loss.item()), not the scaled loss."
    )


def test_e3_returning_tensors_fails():
    def tensors(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach(), grad_norm

    message = failure(check_amp_train_step, tensors)
    assert message == FIRST_E3 + "the loss should be a Python float (use .item()); got a tensor."


def test_e3_calling_gradscaler_internals_fails():
    """The check's scaler has only GradScaler's public methods (forwarded to a real one)."""

    def internals(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        if scaler._enabled:  # not public API
            pass
        return amp_train_step(model, batch, optimizer, scaler, max_norm, dtype)

    message = failure(check_amp_train_step, internals)
    assert message.startswith(FIRST_E3 + "your function raised AttributeError")


def test_e3_an_overflow_step_must_not_raise_or_step():
    def error_if_nonfinite(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=True)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), grad_norm.item()

    message = failure(check_amp_train_step, error_if_nonfinite)
    assert message.startswith(
        E3
        + "fp16, an input beyond fp16's range at step 2 (overflow), step 2: your function raised RuntimeError"
    )

    def plain_step(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        """Ignores the scaler's verdict: steps the optimizer itself."""
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), grad_norm.item()

    message = failure(check_amp_train_step, plain_step)
    assert message.startswith(
        FIRST_E3 + "the scaler's calls were ['scale', 'unscale_', 'update']: call scaler.step"
    )

    import math

    def steps_anyway(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
        """Uses the scaler, then steps the optimizer itself when the loss is not finite."""
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if not math.isfinite(loss.item()):
            optimizer.step()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), grad_norm.item()

    message = failure(check_amp_train_step, steps_anyway)
    assert message.startswith(
        E3 + "fp16, an input beyond fp16's range at step 2 (overflow), step 2: this step overflowed"
    )
    assert "the optimizer step should have been skipped" in message


# ---- e4: measure_amp_step (the GPU check's logic, run on the CPU) ------------------------------------------------

E4 = "e4_measure_amp_step: case "


def test_e4_seconds_instead_of_milliseconds_fails():
    def seconds(model, batch, optimizer, dtype, steps=10):
        result = measure_amp_step(model, batch, optimizer, dtype, steps)
        return {**result, "step_ms": result["step_ms"] / 1000}

    message = failure(check_measure_amp_step_on_cpu, seconds)
    assert message.startswith(
        E4 + "bf16 autocast, mlp([32, 64, 64, 10]), batch 256 on cpu, steps=12: step_ms = "
    )
    assert "too low, by more than a factor of 10 of what the check saw from outside your function" in message
    assert "tolerance: a factor of 20" in message


def test_e4_ignoring_dtype_fails_on_the_forward_dtype():
    def always_fp32(model, batch, optimizer, dtype, steps=10):
        return measure_amp_step(model, batch, optimizer, None, steps)

    message = failure(check_measure_amp_step_on_cpu, always_fp32)
    assert message == (
        E4
        + "bf16 autocast, mlp([32, 64, 64, 10]), batch 256 on cpu, steps=12: the training steps should run "
        "under torch.autocast(device.type, dtype=torch.bfloat16); the first Linear layer's output was "
        "torch.float32."
    )


def test_e4_reporting_the_current_instead_of_the_peak_fails():
    def current(model, batch, optimizer, dtype, steps=10):
        result = measure_amp_step(model, batch, optimizer, dtype, steps)
        state = sum(p.numel() * p.element_size() for p in model.parameters())
        return {**result, "peak_bytes": 3 * state}  # weights + AdamW's two moments: what is live after a step

    message = failure(check_measure_amp_step_on_cpu, current)
    assert (
        "peak_bytes (the peak over the timed steps, from memlab.measure.track_memory) is too low" in message
    )


def test_e4_a_tracker_that_does_not_know_the_model_fails_on_the_cpu():
    """On the CPU the tracker only counts what it is told existed before (on CUDA the allocator counts all)."""

    def untold(model, batch, optimizer, dtype, steps=10):
        x, y = batch

        def one_step():
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        one_step()  # the warm-up
        with track_memory() as trace:
            start = time.perf_counter()
            for _ in range(steps):
                with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                    loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - start
        return {"step_ms": 1000 * elapsed / steps, "peak_bytes": trace.peak_bytes}

    message = failure(check_measure_amp_step_on_cpu, untold)
    assert (
        "peak_bytes (the peak over the timed steps, from memlab.measure.track_memory) is too low" in message
    )


def test_e4_missing_keys_are_listed():
    message = failure(
        check_measure_amp_step_on_cpu, lambda model, batch, optimizer, dtype, steps=10: {"ms": 1.0}
    )
    assert message.endswith(
        "the returned dict is missing the key(s) ['step_ms', 'peak_bytes']; it has ['ms']."
    )


E4_CPU_PASSED = ". What can be checked here passed: a 2-step run on the CPU returned positive numbers."


def one_message(out: str) -> str:
    """A printed message wrapped to the lessons' width, as one line again."""
    assert max(len(line) for line in out.splitlines()) <= 110, out
    return " ".join(out.split())


def test_e4_on_a_machine_without_a_gpu_says_not_checked_here(no_gpu, capsys):
    assert check_measure_amp_step(measure_amp_step) is None
    assert one_message(capsys.readouterr().out) == (
        "e4_measure_amp_step: NOT CHECKED HERE: needs a CUDA GPU (compute capability >= 8.0), found no CUDA GPU"
        + E4_CPU_PASSED
    )


def test_e4_a_wrong_cpu_run_fails_on_a_machine_without_a_gpu(no_gpu, capsys):
    with pytest.raises(
        CheckFailed, match="a 2-step run of a tiny model on the CPU: the returned dict is missing"
    ):
        check_measure_amp_step(lambda model, batch, optimizer, dtype, steps=10: {"ms": 1.0})


def test_e4_when_grading_strictly_without_a_gpu_raises_not_graded_here(no_gpu, strict_mode, capsys):
    with pytest.raises(
        NotGradedHere, match=r"^NOT CHECKED HERE: needs a CUDA GPU \(compute capability >= 8\.0\)"
    ):
        check_measure_amp_step(measure_amp_step)
    assert capsys.readouterr().out == ""


def test_e4_on_a_gpu_without_bf16_tensor_cores_says_not_checked_here(monkeypatch, capsys):
    info = {"name": "Tesla T4", "capability": (7, 5), "total_gb": 15.0, "free_gb": 14.0}
    monkeypatch.setattr(hardware, "gpu_info", lambda index=0: info)
    assert check_measure_amp_step(measure_amp_step) is None
    assert one_message(capsys.readouterr().out) == (
        "e4_measure_amp_step: NOT CHECKED HERE: needs compute capability >= 8.0, found Tesla T4 (capability 7.5)"
        + E4_CPU_PASSED
    )


def test_e4_without_a_warm_up_step_fails():
    def no_warm_up(model, batch, optimizer, dtype, steps=10):
        result = measure_amp_step(model, batch, optimizer, dtype, steps - 1)
        return result

    message = failure(check_measure_amp_step_on_cpu, no_warm_up)
    assert message.endswith(
        "with steps=12 the optimizer should step 13 times (one warm-up step, then the timed ones); it stepped 12 "
        "times."
    )


# ---- under grading: the kernel collects, the judge decides (strict mode: both, in this process) ----------------


def _e1_all_elements(grads, scale, dtype=torch.float16):
    """Zeros counted in the denominator."""
    lost = total = 0
    for g in grads:
        if g is None:
            continue
        total += g.numel()
        lost += int(((g != 0) & ((g * scale).to(dtype) == 0)).sum())
    return lost / total


def _e1_in_place(grads, scale, dtype=torch.float16):
    for g in grads:
        if g is not None:
            g.mul_(scale)
    return underflow_fraction(grads, 1.0, dtype)


def _e1_tensor(grads, scale, dtype=torch.float16):
    return torch.tensor(underflow_fraction(grads, scale, dtype))


def _e1_above_one(grads, scale, dtype=torch.float16):
    return 1.5


class _FloatScale(DynamicLossScaler):
    def scale(self, loss):
        return loss.item() * self.get_scale()


class _DetachedScale(DynamicLossScaler):
    def scale(self, loss):
        return super().scale(loss).detach()


class _Lies(DynamicLossScaler):
    def step(self, optimizer):
        super().step(optimizer)
        return True


class _IgnoresHyperParameters(DynamicLossScaler):
    def __init__(self, *args, **kwargs):
        super().__init__()


class _Wrapper:
    def __init__(self, **kwargs):
        self.inner = torch.amp.GradScaler("cpu", **kwargs)

    def scale(self, loss):
        return self.inner.scale(loss)

    def unscale_(self, optimizer):
        self.inner.unscale_(optimizer)

    def step(self, optimizer):
        self.inner.step(optimizer)
        return True

    def update(self):
        self.inner.update()

    def get_scale(self):
        return self.inner.get_scale()


class _ScaleAsTensor(DynamicLossScaler):
    def get_scale(self):
        return self._scale.clone()


def _e3_no_update(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    x, y = batch
    with torch.autocast(device_type=x.device.type, dtype=dtype):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    optimizer.zero_grad(set_to_none=True)
    return loss.item(), grad_norm.item()


def _e3_fp32(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.item(), grad_norm.item()


def _e3_always_fp16(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    return amp_train_step(model, batch, optimizer, scaler, max_norm, torch.float16)


def _e3_scaled_loss(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    loss, norm = amp_train_step(model, batch, optimizer, scaler, max_norm, dtype)
    return loss * scaler.get_scale(), norm


def _e3_tensors(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    loss, norm = amp_train_step(model, batch, optimizer, scaler, max_norm, dtype)
    return torch.tensor(loss), torch.tensor(norm)


def _e3_no_clip(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    return amp_train_step(model, batch, optimizer, scaler, 1e9, dtype)


def _e3_steps_twice(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    x, y = batch
    with torch.autocast(device_type=x.device.type, dtype=dtype):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(grad_norm):
        optimizer.step()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.item(), grad_norm.item()


def _e3_returns_the_model(model, batch, optimizer, scaler, max_norm, dtype=torch.float16):
    amp_train_step(model, batch, optimizer, scaler, max_norm, dtype)
    return model


def _e4_always_fp32(model, batch, optimizer, dtype, steps=10):
    return measure_amp_step(model, batch, optimizer, None, steps)


def _e4_no_warm_up(model, batch, optimizer, dtype, steps=10):
    return measure_amp_step(model, batch, optimizer, dtype, steps - 1)


def _e4_missing_keys(model, batch, optimizer, dtype, steps=10):
    return {"ms": 1.0}


def _e4_not_finite(model, batch, optimizer, dtype, steps=10):
    return {**measure_amp_step(model, batch, optimizer, dtype, steps), "peak_bytes": float("nan")}


#: (check, a wrong answer): each one fails on a different kind of step (a learner step's own failure, a comparison
#: on what the learner's code did, a comparison with a reference step's expected value)
WRONG_ANSWERS = [
    (check_underflow_fraction, stub),
    (check_underflow_fraction, _e1_all_elements),
    (check_underflow_fraction, _e1_in_place),
    (check_underflow_fraction, _e1_tensor),
    (check_underflow_fraction, _e1_above_one),
    (check_dynamic_loss_scaler, StubScaler),
    (check_dynamic_loss_scaler, NeverGrows),
    (check_dynamic_loss_scaler, GrowsEveryStep),
    (check_dynamic_loss_scaler, KeepsCountingAfterOverflow),
    (check_dynamic_loss_scaler, StepsOnInf),
    (check_dynamic_loss_scaler, DividesTwice),
    (check_dynamic_loss_scaler, NaNIsNotOverflow),
    (check_dynamic_loss_scaler, StepReturnsNone),
    (check_dynamic_loss_scaler, PythonFloatScale),
    (check_dynamic_loss_scaler, ForgetsToResetAfterUpdate),
    (check_dynamic_loss_scaler, NoneGradCrash),
    (check_dynamic_loss_scaler, _FloatScale),
    (check_dynamic_loss_scaler, _DetachedScale),
    (check_dynamic_loss_scaler, _Lies),
    (check_dynamic_loss_scaler, _IgnoresHyperParameters),
    (check_dynamic_loss_scaler, _Wrapper),
    (check_dynamic_loss_scaler, _ScaleAsTensor),
    (check_amp_train_step, stub),
    (check_amp_train_step, clip_before_unscale),
    (check_amp_train_step, keeps_grads),
    (check_amp_train_step, _e3_no_update),
    (check_amp_train_step, _e3_fp32),
    (check_amp_train_step, _e3_always_fp16),
    (check_amp_train_step, _e3_scaled_loss),
    (check_amp_train_step, _e3_tensors),
    (check_amp_train_step, _e3_no_clip),
    (check_amp_train_step, _e3_steps_twice),
    (check_amp_train_step, _e3_returns_the_model),
    (check_measure_amp_step_on_cpu, stub),
    (check_measure_amp_step_on_cpu, _e4_always_fp32),
    (check_measure_amp_step_on_cpu, _e4_no_warm_up),
    (check_measure_amp_step_on_cpu, _e4_missing_keys),
    (check_measure_amp_step_on_cpu, _e4_not_finite),
    (check_measure_amp_step, _e4_missing_keys),  # the CPU stage, which runs before the GPU is looked for
]


def _ids(value):
    if value is check_measure_amp_step_on_cpu:
        return "e4-on-cpu"
    return getattr(value, "check_name", None) or getattr(value, "__name__", None)


@pytest.mark.parametrize(
    ("check_fn", "solution"),
    [
        (check_underflow_fraction, underflow_fraction),
        (check_dynamic_loss_scaler, DynamicLossScaler),
        (check_amp_train_step, amp_train_step),
        (check_measure_amp_step_on_cpu, measure_amp_step),
    ],
    ids=["e1", "e2", "e3", "e4-on-cpu"],
)
def test_when_graded_the_reference_solution_passes(
    kit_context, check_fn, solution, strict_mode, monkeypatch, capsys
):
    kit_context(kit.STRICT, 20261123)  # after the module's learner_mode
    assert check_fn(solution) is None
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"✓ {check_fn.check_name}: ")


@pytest.mark.parametrize(("check_fn", "wrong"), WRONG_ANSWERS, ids=_ids)
def test_when_graded_a_wrong_answer_fails_with_the_learners_message(
    kit_context, check_fn, wrong, no_gpu, monkeypatch
):
    in_the_notebook = failure(check_fn, wrong)
    kit_context(kit.STRICT, 20261123)
    assert failure(check_fn, wrong) == in_the_notebook


def _forbid_expected_values(monkeypatch) -> list[str]:
    """Make every way to an expected value fail loudly (the grading kernel must never take one)."""
    import autograders.lesson03 as lesson03

    taken = []

    def forbidden(what):
        def spy(*args, **kwargs):
            taken.append(what)
            raise AssertionError(f"the grading kernel computed an expected value ({what})")

        return spy

    for module, name in (
        (kit, "references"),
        (lesson03, "public_underflow"),
        (lesson03, "_ReferenceScalerRun"),
        (lesson03, "_autocast_loss"),
    ):
        monkeypatch.setattr(module, name, forbidden(f"{module.__name__}.{name}"))
    return taken


def _case_names(check_fn) -> list[str]:
    """The names of the cases `check_fn` runs under grading (the public ones, then those drawn from the seed)."""
    import autograders.lesson03 as lesson03

    if check_fn is check_underflow_fraction:
        public = [c[0] for c in lesson03._underflow_cases()]
        return public + [
            c[0] for c in kit.drawn_cases(check_fn.check_name, 3, lesson03._drawn_underflow_case)
        ]
    if check_fn is check_dynamic_loss_scaler:
        public = [c[0] for c in lesson03._scaler_cases()]
        return public + [c[0] for c in kit.drawn_cases(check_fn.check_name, 2, lesson03._drawn_scaler_case)]
    if check_fn is check_amp_train_step:
        public = [c[0] for c in lesson03._train_cases()]
        return public + [c[0] for c in kit.drawn_cases(check_fn.check_name, 2, lesson03._drawn_train_case)]
    return [f"{d}, mlp([32, 64, 64, 10]), batch 256 on cpu, steps=12" for d in ("bf16 autocast", "fp32")]


@pytest.mark.parametrize(
    ("check_fn", "solution", "n_cases"),
    [
        (check_underflow_fraction, underflow_fraction, 7 + 3),
        (check_dynamic_loss_scaler, DynamicLossScaler, 5 + 2),
        (check_amp_train_step, amp_train_step, 5 + 2),
        (check_measure_amp_step_on_cpu, measure_amp_step, 2),
    ],
    ids=["e1", "e2", "e3", "e4-on-cpu"],
)
def test_the_grading_kernel_only_collects_and_the_judge_decides(
    kit_context, check_fn, solution, n_cases, monkeypatch
):
    """Collect mode computes no expected value (references, stored answers, torch's GradScaler run, the expected
    loss all fail here) and still records every case; the judge, given only that record, passes it."""
    kit_context(kit.current_context().mode, 20261123)
    names = _case_names(check_fn)
    assert len(names) == n_cases
    with monkeypatch.context() as patched:
        taken = _forbid_expected_values(patched)
        transcript = kit.collect(check_fn.check, (solution,), {})
    assert taken == []
    assert all(r.failed is None and r.missing is None for r in transcript.records)
    labels = [r.label for r in transcript.records]
    for name in names:
        assert any(label.startswith(name) for label in labels), name
    data = kit.Transcript.from_data(json.loads(json.dumps(transcript.to_data())))
    verdict = kit.judge(check_fn.check, data)
    assert verdict.passed and verdict.cases == n_cases, verdict.message


def test_the_grading_kernel_records_a_wrong_answer_and_the_judge_fails_it(monkeypatch):
    """A mistake only the reference can see (the scale never grows): the kernel records the steps without a verdict,
    the judge fails it with the learner's message."""
    with monkeypatch.context() as patched:
        _forbid_expected_values(patched)
        transcript = kit.collect(check_dynamic_loss_scaler.check, (NeverGrows,), {})
    assert all(r.failed is None for r in transcript.records)
    verdict = kit.judge(check_dynamic_loss_scaler.check, transcript)
    assert not verdict.passed
    assert verdict.message == failure(check_dynamic_loss_scaler, NeverGrows)


def test_the_gpu_check_measures_when_rerun():
    """e4 measures the learner's code: under grading it is collected again in a fresh process (rerun)."""
    assert check_measure_amp_step.check.rerun
    assert not any(
        c.check.rerun for c in (check_underflow_fraction, check_dynamic_loss_scaler, check_amp_train_step)
    )
