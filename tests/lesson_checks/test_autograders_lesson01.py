"""Lesson 01's checks pass the reference solution and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own (solutions/01-memory-anatomy/01-memory-anatomy.ipynb, loaded by tests/solution_code.py;
the notebook itself is executed by the notebook tests). Each wrong answer is a mistake a learner is likely to
make; the test asserts the check names the case that exposes it and, where the answer is hidden (reveal=False),
that the message does not give the expected number away.
"""

import math
import re

import pytest
import torch
from check_helpers import assert_hidden, failure
from solution_code import solution

import autograders.kit as kit
from autograders.kit import CheckFailed, NotGradedHere
from autograders.lesson01 import (
    check_adamw8bit_state_bytes,
    check_kv_cache_bytes,
    check_optimizer_state_bytes,
    check_predict_live_bytes,
    check_training_state_bytes,
)
from memlab.hardware import package_importable

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    optimizer_state_bytes,
    adamw8bit_state_bytes,
    predict_live_bytes,
    kv_cache_bytes,
    training_state_bytes,
) = solution(
    "01-memory-anatomy",
    "optimizer_state_bytes",
    "adamw8bit_state_bytes",
    "predict_live_bytes",
    "kv_cache_bytes",
    "training_state_bytes",
)

HAS_BNB = package_importable("bitsandbytes")
needs_bnb = pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not importable here")


ALL_CHECKS = [
    check_optimizer_state_bytes,
    check_adamw8bit_state_bytes,
    check_predict_live_bytes,
    check_kv_cache_bytes,
    check_training_state_bytes,
]


pytestmark = pytest.mark.usefixtures("learner_mode")


# ---- the reference solution passes every check ------------------------------------------------------------


@pytest.mark.parametrize(
    ("check_fn", "solution", "line"),
    [
        (
            check_optimizer_state_bytes,
            optimizer_state_bytes,
            f"✓ e1_optimizer_state_bytes: {8 if HAS_BNB else 7} cases passed",
        ),
        pytest.param(
            check_adamw8bit_state_bytes,
            adamw8bit_state_bytes,
            "✓ e2_adamw8bit_state_bytes: 6 cases passed",
            marks=needs_bnb,
        ),
        (check_predict_live_bytes, predict_live_bytes, "✓ e3_predict_live_bytes: 5 cases passed"),
        (check_kv_cache_bytes, kv_cache_bytes, "✓ e4_kv_cache_bytes: 5 cases passed"),
        (check_training_state_bytes, training_state_bytes, "✓ e5_training_state_bytes: 6 cases passed"),
    ],
    ids=["e1", "e2", "e3", "e4", "e5"],
)
def test_reference_solution_passes(check_fn, solution, line, capsys):
    assert check_fn(solution) is None
    assert capsys.readouterr().out.splitlines() == [line]


# ---- every check: the stub, an undefined name, NaN ----------------------------------------------------------


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


@pytest.mark.parametrize("check_fn", ALL_CHECKS, ids=["e1", "e2", "e3", "e4", "e5"])
def test_the_learner_stub_fails_every_check_as_not_written_yet(check_fn):
    """Also where bitsandbytes is missing: the stub fails before the check looks for the package."""
    with pytest.raises(
        CheckFailed,
        match=f"^{check_fn.check_name}: `.*` is not written yet: it still raises NotImplementedError\\.$",
    ):
        check_fn(stub)


@pytest.mark.parametrize("check_fn", ALL_CHECKS, ids=["e1", "e2", "e3", "e4", "e5"])
def test_an_undefined_answer_fails_every_check(check_fn):
    if check_fn is check_adamw8bit_state_bytes and not HAS_BNB:
        pytest.skip("bitsandbytes is not importable here")
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}: `.*` is not defined yet"):
        check_fn(None)


def test_nan_fails_the_number_checks_as_not_finite():
    with pytest.raises(CheckFailed, match="the live bytes after forward should be a finite number; got nan"):
        check_predict_live_bytes(
            lambda widths, batch, optimizer: dict.fromkeys(
                ["after forward", "after backward", "after optimizer step"], math.nan
            )
        )
    with pytest.raises(CheckFailed, match="the KV-cache bytes should be a finite number; got nan"):
        check_kv_cache_bytes(lambda config, batch, seq, bytes_per_value=2: math.nan)
    with pytest.raises(CheckFailed, match="the training-state bytes should be a finite number; got inf"):
        check_training_state_bytes(lambda n, t, w, o: math.inf)


def test_nan_fails_the_integer_checks_as_the_wrong_type():
    with pytest.raises(CheckFailed, match=r"the byte count should be an int; got a float \(nan\)"):
        check_optimizer_state_bytes(lambda optimizer: math.nan)


# ---- e1: optimizer_state_bytes ---------------------------------------------------------------------------------


def test_e1_counting_shared_storages_twice_fails():
    """Two state entries that share one storage count once: bitsandbytes gives every 8-bit parameter the same two
    256-entry qmap tensors, and the check's own SGD keeps a view of each momentum buffer (no bitsandbytes needed)."""

    def per_tensor_nbytes(optimizer):
        return sum(
            value.nbytes
            for state in optimizer.state.values()
            for value in state.values()
            if isinstance(value, torch.Tensor)
        )

    message = failure(check_optimizer_state_bytes, per_tensor_nbytes)
    first = "bitsandbytes AdamW8bit (shared quantisation maps)" if HAS_BNB else "momentum buffers that two"
    assert message.startswith(f"e1_optimizer_state_bytes: case {first}")
    found = re.search(r"expected the optimizer-state bytes = ([\d,]+) \(exactly\); got ([\d,]+)\.$", message)
    assert found, message
    expected, got = (int(text.replace(",", "")) for text in found.groups())
    # a second copy of qmap1 + qmap2 (256 fp32 values each), or of every momentum buffer
    assert got - expected == (2 * 256 * 4 if HAS_BNB else expected)


def test_e1_forgetting_to_skip_non_tensors_fails_with_the_error():
    """bitsandbytes keeps `step` as a plain int in each parameter's state."""

    def no_skip(optimizer):
        return sum(value.untyped_storage().nbytes() for s in optimizer.state.values() for value in s.values())

    message = failure(check_optimizer_state_bytes, no_skip)
    assert (
        "case bitsandbytes AdamW8bit (shared quantisation maps): your function raised AttributeError"
        in message
    )
    assert "'int' object has no attribute 'untyped_storage'" in message
    assert (
        "return sum(value.untyped_storage().nbytes() for s in optimizer.state.values()" in message
    )  # their line


def test_e1_returning_a_float_fails_on_the_type():
    with pytest.raises(
        CheckFailed,
        match=r"case AdamW before its first step: the byte count should be an int; got a float \(0\.0\)",
    ):
        check_optimizer_state_bytes(lambda optimizer: float(optimizer_state_bytes(optimizer)))


def test_e1_counting_parameters_instead_of_state_fails():
    def param_bytes(optimizer):
        return sum(p.nbytes for group in optimizer.param_groups for p in group["params"])

    with pytest.raises(
        CheckFailed, match="case AdamW before its first step: expected the optimizer-state bytes = 0"
    ):
        check_optimizer_state_bytes(param_bytes)


# ---- e2: adamw8bit_state_bytes ---------------------------------------------------------------------------------


def _e2_variant(shapes, min_8bit_size=4096, *, qmaps="shared", absmax=True, honour_min=True):
    threshold = min_8bit_size if honour_min else 4096
    total, n_8bit = 0, 0
    for shape in shapes:
        n = math.prod(shape)
        if n < threshold:
            total += 2 * 4 * n
        else:
            n_8bit += 1
            total += 2 * n + (2 * 4 * math.ceil(n / 256) if absmax else 0)
    maps = {"shared": min(n_8bit, 1), "none": 0, "per parameter": n_8bit}[qmaps]
    return total + maps * 2 * 256 * 4


@needs_bnb
def test_e2_variant_helper_agrees_with_the_reference():
    for shapes, m in [([(64, 128)], 4096), ([(128, 64), (128,), (40, 128)], 4096), ([(50, 50)], 100)]:
        assert _e2_variant(shapes, m) == adamw8bit_state_bytes(shapes, m)


@needs_bnb
def test_e2_forgetting_the_quantisation_maps_fails():
    message = failure(
        check_adamw8bit_state_bytes,
        lambda shapes, min_8bit_size=4096: _e2_variant(shapes, min_8bit_size, qmaps="none"),
    )
    assert message.startswith("e2_adamw8bit_state_bytes: case one 64x128 matrix: ")
    assert "too low" in message and "(exactly)" in message
    assert_hidden(message, adamw8bit_state_bytes([(64, 128)]))


@needs_bnb
def test_e2_counting_the_quantisation_maps_per_parameter_fails():
    """The maps are shared by all 8-bit parameters: the two-matrix case tells per-parameter maps apart."""
    wrong = lambda shapes, min_8bit_size=4096: _e2_variant(shapes, min_8bit_size, qmaps="per parameter")  # noqa: E731
    message = failure(check_adamw8bit_state_bytes, wrong)
    assert message.startswith("e2_adamw8bit_state_bytes: case a small MLP's shapes (two 8-bit matrices): ")
    assert "too high" in message
    assert_hidden(message, adamw8bit_state_bytes([(128, 64), (128,), (40, 128), (40,)]))


@needs_bnb
def test_e2_forgetting_absmax_fails():
    message = failure(
        check_adamw8bit_state_bytes,
        lambda shapes, min_8bit_size=4096: _e2_variant(shapes, min_8bit_size, absmax=False),
    )
    assert message.startswith("e2_adamw8bit_state_bytes: case one 64x128 matrix: ")
    assert "too low, by 1% to 10%" in message
    assert_hidden(message, adamw8bit_state_bytes([(64, 128)]))


@needs_bnb
def test_e2_ignoring_min_8bit_size_fails():
    wrong = lambda shapes, min_8bit_size=4096: _e2_variant(shapes, min_8bit_size, honour_min=False)  # noqa: E731
    message = failure(check_adamw8bit_state_bytes, wrong)
    assert message.startswith("e2_adamw8bit_state_bytes: case min_8bit_size lowered to 100: ")
    assert "too high" in message
    assert_hidden(message, adamw8bit_state_bytes([(50, 50), (50,)], 100))


@needs_bnb
def test_e2_without_the_min_8bit_size_keyword_fails_with_the_error():
    with pytest.raises(
        CheckFailed, match="your function raised TypeError: .*unexpected keyword argument 'min_8bit_size'"
    ):
        check_adamw8bit_state_bytes(lambda shapes: adamw8bit_state_bytes(shapes))


def test_e2_without_bitsandbytes_says_not_checked_here(kit_context, monkeypatch, capsys):
    """What runs without bitsandbytes (written, returns an int) runs; then a NOT CHECKED HERE line, no ✓ line."""
    unmet = ("the package bitsandbytes", "bitsandbytes not importable")
    monkeypatch.setattr(kit, "unmet_requirements", lambda *args: unmet)
    assert check_adamw8bit_state_bytes(adamw8bit_state_bytes) is None
    out = capsys.readouterr().out
    assert " ".join(out.split()) == (  # one message, wrapped to the lessons' width
        "e2_adamw8bit_state_bytes: NOT CHECKED HERE: needs the package bitsandbytes, found bitsandbytes not "
        "importable. What can be checked here passed: your function returns an int."
    )
    assert max(len(line) for line in out.splitlines()) <= 110
    with pytest.raises(CheckFailed, match="the byte count should be an int; got a float"):
        check_adamw8bit_state_bytes(lambda shapes, min_8bit_size=4096: 1.5)

    kit_context(kit.STRICT)
    with pytest.raises(NotGradedHere, match="needs the package bitsandbytes"):
        check_adamw8bit_state_bytes(adamw8bit_state_bytes)


# ---- e3: predict_live_bytes -----------------------------------------------------------------------------------

MARKS = ("after forward", "after backward", "after optimizer step")
FIRST_E3_CASE = "case widths=[100, 200, 10], batch=32, adamw: "


def _adjusted(**minus):
    """The reference, minus some bytes at some marks: minus[mark] = f(widths, batch, optimizer)."""

    def predict(widths, batch, optimizer):
        result = predict_live_bytes(widths, batch, optimizer)
        for key, f in minus.items():
            mark = key.replace("_", " ")
            result[mark] -= f(widths, batch, optimizer)
        return result

    return predict


def _inputs(widths, batch, optimizer):
    return 4 * batch * widths[0] + 8 * batch


def test_e3_forgetting_the_inputs_fails():
    wrong = _adjusted(after_forward=_inputs, after_backward=_inputs, after_optimizer_step=_inputs)
    message = failure(check_predict_live_bytes, wrong)
    assert message.startswith(
        "e3_predict_live_bytes: " + FIRST_E3_CASE + "the live bytes after forward is too low"
    )
    assert "(exactly)" in message
    assert_hidden(message, predict_live_bytes([100, 200, 10], 32, "adamw")["after forward"])


def test_e3_counting_the_relu_output_twice_fails():
    """Linear's output and ReLU's output are not both kept: ReLU saves its output, the next Linear saves the same."""
    wrong = _adjusted(
        after_forward=lambda widths, batch, optimizer: -sum(4 * batch * w for w in widths[1:-1])
    )
    message = failure(check_predict_live_bytes, wrong)
    assert message.startswith(
        "e3_predict_live_bytes: " + FIRST_E3_CASE + "the live bytes after forward is too high"
    )
    assert_hidden(message, predict_live_bytes([100, 200, 10], 32, "adamw")["after forward"])


def test_e3_forgetting_adamw_step_tensors_fails():
    """AdamW's `step` is one 4-byte fp32 tensor per parameter tensor: 2 per Linear, 16 B for widths [100, 200, 10].
    The lesson promises the live bytes to the byte, and the tracker is exact, so the check allows no tolerance."""

    def forgot_steps(widths, batch, optimizer):
        return 4 * 2 * (len(widths) - 1) if optimizer == "adamw" else 0

    message = failure(check_predict_live_bytes, _adjusted(after_optimizer_step=forgot_steps))
    assert message.startswith(
        "e3_predict_live_bytes: "
        + FIRST_E3_CASE
        + "the live bytes after optimizer step is too low, by less than 1%"
    )


def test_e3_forgetting_the_int64_labels_fails():
    """The labels are int64: 8 B per example."""
    labels = lambda widths, batch, optimizer: 8 * batch  # noqa: E731
    wrong = _adjusted(after_forward=labels, after_backward=labels, after_optimizer_step=labels)
    with pytest.raises(
        CheckFailed,
        match="^e3_predict_live_bytes: "
        + FIRST_E3_CASE.replace("[", r"\[").replace("]", r"\]")
        + "the live bytes after forward is too low",
    ):
        check_predict_live_bytes(wrong)


def test_e3_measuring_instead_of_predicting_is_refused():
    """Exercise 1.3 asks for a prediction; the tracker measures the same numbers. A function that runs the model (on
    real tensors, or on the meta device, or on fake tensors, which need no memory at any size) fails: before the
    check recorded the model ops the call ran, each of these earned the exercise's points."""
    from torch._subclasses import FakeTensorMode

    from autograders.references.lesson01 import live_bytes
    from memlab.estimate import simulate_training_step
    from memlab.models import mlp

    def simulated(widths, batch, optimizer):
        trace = simulate_training_step(
            lambda: mlp(widths),
            lambda: (torch.randn(batch, widths[0]), torch.randint(0, widths[-1], (batch,))),
            lambda params: (
                torch.optim.AdamW(params) if optimizer == "adamw" else torch.optim.SGD(params, lr=0.1)
            ),
        )
        return {m.name: m.current_bytes for m in trace.marks}

    def forward_on_fake_tensors(widths, batch, optimizer):
        with FakeTensorMode():
            mlp(widths)(torch.randn(batch, widths[0]))
        return predict_live_bytes(widths, batch, optimizer)

    for measures in (live_bytes, simulated, forward_on_fake_tensors):
        message = failure(check_predict_live_bytes, measures)
        assert f"{FIRST_E3_CASE}your function ran a model (torch ran " in message, message
        assert "addmm" in message and "not a measurement" in message


def test_e3_adamw_state_for_every_optimizer_fails_on_sgd():
    def always_adamw(widths, batch, optimizer):
        return predict_live_bytes(widths, batch, "adamw")

    message = failure(check_predict_live_bytes, always_adamw)
    assert (
        "case widths=[64, 256, 256, 4], batch=8, sgd-momentum: the live bytes after optimizer step is too high"
        in (message)
    )


def test_e3_wrong_keys_fail_and_list_the_missing_ones():
    def short_keys(widths, batch, optimizer):
        result = predict_live_bytes(widths, batch, optimizer)
        return {
            "forward": result["after forward"],
            "backward": result["after backward"],
            "step": result["after optimizer step"],
        }

    assert failure(check_predict_live_bytes, short_keys) == (
        "e3_predict_live_bytes: " + FIRST_E3_CASE + "the returned dict is missing the key(s) "
        "['after forward', 'after backward', 'after optimizer step']; it has ['backward', 'forward', 'step']."
    )


def test_e3_returning_a_list_fails_on_the_type():
    with pytest.raises(CheckFailed, match=r"the returned dict should be a dict; got a list \(\["):
        check_predict_live_bytes(
            lambda widths, batch, optimizer: list(predict_live_bytes(widths, batch, optimizer).values())
        )


# ---- e4: kv_cache_bytes ------------------------------------------------------------------------------------------


def test_e4_ignoring_grouped_query_attention_fails():
    def all_heads(config, batch, seq, bytes_per_value=2):
        head_dim = config.hidden_size // config.num_attention_heads
        return (
            2
            * batch
            * seq
            * config.num_hidden_layers
            * config.num_attention_heads
            * head_dim
            * bytes_per_value
        )

    message = failure(check_kv_cache_bytes, all_heads)
    # the multi-head case passes (all heads are KV heads); 8 query heads over 2 KV heads is 4x too much
    assert message.startswith("e4_kv_cache_bytes: case grouped-query attention (2 KV heads): ")
    assert "the KV-cache bytes is too high, by a factor of 2 to 10" in message
    assert_hidden(
        message, 2 * 3 * 40 * 3 * 2 * 8 * 4
    )  # K and V, batch 3, seq 40, 3 layers, 2 heads of 8, fp32


def test_e4_forgetting_keys_and_values_are_two_tensors_fails():
    with pytest.raises(
        CheckFailed, match=r"case multi-head attention, fp32: .*too low, by a factor of 2 to 10"
    ):
        check_kv_cache_bytes(
            lambda config, batch, seq, bytes_per_value=2: (
                kv_cache_bytes(config, batch, seq, bytes_per_value) / 2
            )
        )


# ---- e5: training_state_bytes ------------------------------------------------------------------------------------

N7B, LORA = 6_738_415_616, 4_194_304


def test_e5_forgetting_the_master_copy_fails():
    def no_master(n_params, n_trainable, weights, optimizer):
        value_bytes = {"fp32": 4, "bf16": 2, "fp16": 2}[weights]
        state = {"sgd": 0, "sgd-momentum": 4, "adamw": 8, "adamw-8bit": 2, "lion": 4}[optimizer]
        return n_params * value_bytes + n_trainable * (value_bytes + state)

    message = failure(check_training_state_bytes, no_master)
    assert message.startswith("e5_training_state_bytes: case 7B full fine-tuning, bf16 + AdamW: ")
    assert "too low, by 10% to a factor of 2" in message  # 12 of 16 bytes per parameter
    assert_hidden(message, 16 * N7B)


def test_e5_optimizer_state_for_frozen_parameters_fails():
    def state_for_all(n_params, n_trainable, weights, optimizer):
        value_bytes = {"fp32": 4, "bf16": 2, "fp16": 2}[weights]
        state = {"sgd": 0, "sgd-momentum": 4, "adamw": 8, "adamw-8bit": 2, "lion": 4}[optimizer]
        master = 0 if weights == "fp32" else 4
        return n_params * (value_bytes + state) + n_trainable * (value_bytes + master)

    message = failure(check_training_state_bytes, state_for_all)
    # full fine-tuning cases pass (every parameter is trainable); LoRA is where it shows
    assert message.startswith("e5_training_state_bytes: case 7B LoRA r=8 on q,v, bf16 base: ")
    assert "too high" in message
    assert_hidden(message, training_state_bytes(N7B, LORA, "bf16", "adamw"))


def test_e5_unknown_optimizer_name_fails_with_the_key_error():
    def no_lion(n_params, n_trainable, weights, optimizer):
        value_bytes = {"fp32": 4, "bf16": 2, "fp16": 2}[weights]
        state = {"sgd": 0, "sgd-momentum": 4, "adamw": 8, "adamw-8bit": 2}[optimizer]  # learner-line-lion
        master = 0 if weights == "fp32" else 4
        return n_params * value_bytes + n_trainable * (value_bytes + master + state)

    message = failure(check_training_state_bytes, no_lion)
    assert message.startswith(
        "e5_training_state_bytes: case 125M fp16 + Lion: your function raised KeyError: 'lion'"
    )
    assert "# learner-line-lion" in message


def test_e4_ignoring_an_explicit_head_dim_fails():
    def hidden_over_heads(config, batch, seq, bytes_per_value=2):
        kv_heads = config.num_key_value_heads
        head_dim = config.hidden_size // config.num_attention_heads
        return 2 * batch * seq * config.num_hidden_layers * kv_heads * head_dim * bytes_per_value

    message = failure(check_kv_cache_bytes, hidden_over_heads)
    assert message.startswith(
        "e4_kv_cache_bytes: case an explicit head_dim (32, not hidden_size // heads = 16): "
    )
    assert "too low" in message


def test_e5_convention_agrees_with_memlab_estimate():
    """The grading reference's statement of ZeRO's bookkeeping and memlab.estimate.model_state_bytes (which the
    lesson uses elsewhere) are two implementations of one convention: they agree on every combination."""
    from autograders.references.lesson01 import FORMAT_BYTES, OPTIMIZER_BYTES, zero_convention_bytes
    from memlab.estimate import model_state_bytes

    for weights in FORMAT_BYTES:
        for optimizer in OPTIMIZER_BYTES:
            for n, trainable in ((10**9, 10**9), (6_738_415_616, 4_194_304)):
                expected = model_state_bytes(
                    n,
                    weights=weights,
                    grads=weights,
                    master_weights=None if weights == "fp32" else "fp32",
                    optimizer=optimizer,
                    n_trainable=trainable,
                )["total"]
                assert zero_convention_bytes(n, trainable, weights, optimizer) == expected
    assert (
        zero_convention_bytes(6_738_415_616, 6_738_415_616, "bf16", "adamw") == 16 * 6_738_415_616
    )  # ZeRO §3.1


def test_the_formulas_of_exercises_1_1_and_1_4_agree_with_the_measurements():
    """The grading references' formulas (once memlab's `tensor_bytes` and `estimate.kv_cache_bytes`): shared storage
    counted once, and the KV cache a real Llama builds, 0.5 MiB per token for Llama-2-7B in fp16."""
    from autograders.lesson01 import E4_CASES, kv_config
    from autograders.references.lesson01 import kv_cache_bytes, kv_cache_formula_bytes, tensor_bytes

    t = torch.zeros(100)
    assert tensor_bytes([t, t[:10], t.view(10, 10)]) == 400
    assert tensor_bytes([t, torch.zeros(5, dtype=torch.float16)]) == 410
    assert kv_cache_formula_bytes(batch=1, seq=1, layers=32, kv_heads=32, head_dim=128) == 512 * 1024
    for _name, heads, batch, seq, dtype in E4_CASES:
        config = kv_config(heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        formula = kv_cache_formula_bytes(
            batch, seq, config.num_hidden_layers, kv_heads, head_dim, dtype.itemsize
        )
        assert kv_cache_bytes(config, batch, seq, dtype) == formula


@pytest.mark.parametrize(
    ("check_fn", "solution"),
    [
        (check_optimizer_state_bytes, optimizer_state_bytes),
        pytest.param(check_adamw8bit_state_bytes, adamw8bit_state_bytes, marks=needs_bnb),
        (check_predict_live_bytes, predict_live_bytes),
        (check_kv_cache_bytes, kv_cache_bytes),
        (check_training_state_bytes, training_state_bytes),
    ],
    ids=["e1", "e2", "e3", "e4", "e5"],
)
def test_the_grading_kernel_computes_no_expected_value(check_fn, solution, strict_mode, monkeypatch):
    """Collect mode (the grading kernel) runs the learner's code on every case, drawn ones included, and neither the
    grading references nor the stored answers; the judge, with them, passes the record."""
    import json

    import autograders.lesson01 as lesson01

    def forbidden(*args, **kwargs):
        raise AssertionError("an expected value was computed in the grading kernel")

    with monkeypatch.context() as patched:
        for module, name in [(kit, "references"), (lesson01, "stored")]:
            patched.setattr(module, name, forbidden)
        transcript = kit.collect(check_fn.check, (solution,), {})
    assert all(r.failed is None and r.missing is None for r in transcript.records)
    assert any("drawn at grading time" in r.label for r in transcript.records)
    data = kit.Transcript.from_data(json.loads(json.dumps(transcript.to_data())))
    verdict = kit.judge(check_fn.check, data)
    assert verdict.passed, verdict.message
