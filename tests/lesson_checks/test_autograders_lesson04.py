"""Lesson 04's checks pass the reference solutions and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own (solutions/04-checkpointing/04-checkpointing.ipynb, loaded by
tests/solution_code.py; the notebook tests execute it); the grading references (autograders/references/lesson04.py)
must agree with them. Each wrong answer is
a mistake a learner is likely to make; the test asserts that the check names the case that exposes it and, where
the answer is hidden, that the message does not give the expected number away. The GPU check's logic runs here on
the CPU (`run_checkpointed_stack_check(fn, "cpu")`); the check itself says NOT CHECKED HERE without a CUDA GPU.
Under grading each check is collected in the kernel and judged outside it (strict mode does both in this process):
the last part of this file runs every check that way.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from check_helpers import assert_hidden, failure
from solution_code import solution
from torch.utils.checkpoint import checkpoint

import autograders.kit as kit
import autograders.lesson04 as lesson04
from autograders.kit import CheckFailed, NotGradedHere, check
from autograders.lesson04 import (
    _e1_public_cases,
    _plan_peaks,
    budget_stack,
    check_llama_layer_saved_bytes,
    check_measure_checkpointed_stack,
    check_plan_checkpointing,
    measure_layer_saved_bytes,
    run_checkpointed_stack_check,
    stored,
)
from autograders.references.lesson04 import llama_layer_saved_bytes as reference_formula
from autograders.references.lesson04 import plan_table
from memlab.measure import track_memory

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    llama_layer_saved_bytes,
    plan_checkpointing,
    measure_checkpointed_stack,
) = solution(
    "04-checkpointing", "llama_layer_saved_bytes", "plan_checkpointing", "measure_checkpointed_stack"
)

pytestmark = pytest.mark.usefixtures("learner_mode")


@check("e3_measure_checkpointed_stack", points=1, rerun=True)
def check_stack_on_cpu(fn) -> int:
    """The GPU check's logic at the CPU profile's sizes, its requirement bypassed."""
    return run_checkpointed_stack_check(fn, "cpu")


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


# ---- right answers pass, stubs and undefined names fail ----------------------------------------------------------


@pytest.mark.parametrize(
    ("check_fn", "solution", "line"),
    [
        (
            check_llama_layer_saved_bytes,
            llama_layer_saved_bytes,
            "✓ e1_llama_layer_saved_bytes: 5 cases passed",
        ),
        (check_plan_checkpointing, plan_checkpointing, "✓ e2_plan_checkpointing: 8 cases passed"),
        (check_stack_on_cpu, measure_checkpointed_stack, "✓ e3_measure_checkpointed_stack: 2 cases passed"),
    ],
    ids=["e1", "e2", "e3-on-cpu"],
)
def test_reference_solution_passes(check_fn, solution, line, capsys):
    assert check_fn(solution) is None
    assert capsys.readouterr().out.splitlines() == [line]


@pytest.mark.parametrize(
    "check_fn",
    [
        check_llama_layer_saved_bytes,
        check_plan_checkpointing,
        check_stack_on_cpu,
        check_measure_checkpointed_stack,
    ],
)
def test_the_stub_fails_every_check_as_not_written_yet(check_fn, no_gpu):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}: `.*` is not written yet"):
        check_fn(stub)


@pytest.mark.parametrize(
    "check_fn", [check_llama_layer_saved_bytes, check_plan_checkpointing, check_stack_on_cpu]
)
def test_an_undefined_answer_fails(check_fn):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}: `.*` is not defined yet"):
        check_fn(None)


def test_the_gpu_check_runs_its_cpu_stage_then_says_not_checked_here(no_gpu, capsys):
    assert check_measure_checkpointed_stack(measure_checkpointed_stack) is None
    out = " ".join(capsys.readouterr().out.split())  # the kit wraps long messages
    assert out.startswith("e3_measure_checkpointed_stack: NOT CHECKED HERE: needs a CUDA GPU")
    assert "What can be checked here passed: the tiny stack on the CPU" in out


def test_the_gpu_check_is_not_graded_without_a_gpu(no_gpu, strict_mode):
    with pytest.raises(NotGradedHere, match="NOT CHECKED HERE: needs a CUDA GPU"):
        check_measure_checkpointed_stack(measure_checkpointed_stack)


# ---- e1: the formula ------------------------------------------------------------------------------------------


def test_e1_the_reference_formula_is_the_measurement_exactly():
    """The stored public values are measurements; the formula reproduces them to the byte (and fresh ones too)."""
    for name, config, batch, seq, dtype in _e1_public_cases():
        p = 4 if dtype == "fp32" else 2
        assert reference_formula(config, batch, seq, p) == stored()["llama_layer_saved_bytes"][name]
    from memlab.models import tiny_llama_config

    config = tiny_llama_config(
        hidden_size=48, num_attention_heads=3, num_key_value_heads=1, intermediate_size=100
    )
    for dtype, p in ((torch.float32, 4), (torch.bfloat16, 2)):
        assert reference_formula(config, 2, 20, p) == measure_layer_saved_bytes(config, 2, 20, dtype)


E1 = "e1_llama_layer_saved_bytes: case "


def _parts(config, b, s, p):
    h, a = config.hidden_size, config.num_attention_heads
    d, inner, t = h // a, config.intermediate_size, b * s
    return dict(
        norms=2 * (4 * t * h + 4 * t + p * t * h),
        qkv_in=p * t * h,
        qkvo=4 * p * t * a * d,
        softmax=4 * b * a * s * s,
        probs=p * b * a * s * s if p != 4 else 0,
        mlp=p * t * h + 4 * p * t * inner,
    )


def test_e1_korthikantis_gpt_formula_fails():
    def gpt3(config, batch, seq, bytes_per_value):
        s, b, h, a = seq, batch, config.hidden_size, config.num_attention_heads
        return int(34 * s * b * h + 5 * a * s * s * b)

    message = failure(check_llama_layer_saved_bytes, gpt3)
    assert message.startswith(
        E1 + "tiny Llama (hidden 64, 4 heads, intermediate 172), batch 2, seq 32, fp32: "
    )
    assert "is too low" in message
    assert_hidden(message, stored()["llama_layer_saved_bytes"][_e1_public_cases()[0][0]])


def test_e1_forgetting_the_fp32_norm_upcast_fails_in_bf16():
    def no_upcast(config, batch, seq, p):
        parts = _parts(config, batch, seq, p)
        t, h = batch * seq, config.hidden_size
        parts["norms"] = 2 * (p * t * h + 4 * t + p * t * h)  # the norm's input in the layer's dtype
        return sum(parts.values())

    message = failure(check_llama_layer_saved_bytes, no_upcast)
    assert message.startswith(
        E1 + "tiny Llama (hidden 64, 4 heads, intermediate 172), batch 2, seq 32, bf16: "
    )  # fp32 passes: there the upcast is the input itself
    assert "too low" in message


def test_e1_forgetting_the_attention_probabilities_fails():
    def no_scores(config, batch, seq, p):
        parts = _parts(config, batch, seq, p)
        parts["softmax"] = parts["probs"] = 0
        return sum(parts.values())

    message = failure(check_llama_layer_saved_bytes, no_scores)
    assert message.startswith(
        E1 + "tiny Llama (hidden 64, 4 heads, intermediate 172), batch 2, seq 32, fp32: "
    )
    assert "too low" in message


def test_e1_a_softmax_in_the_layers_dtype_fails_in_bf16():
    def softmax_in_dtype(config, batch, seq, p):
        parts = _parts(config, batch, seq, p)
        parts["softmax"] = p * batch * config.num_attention_heads * seq * seq
        parts["probs"] = 0
        return sum(parts.values())

    message = failure(check_llama_layer_saved_bytes, softmax_in_dtype)
    assert message.startswith(
        E1 + "tiny Llama (hidden 64, 4 heads, intermediate 172), batch 2, seq 32, bf16: "
    )


def test_e1_keys_and_values_at_the_kv_head_count_fail_on_gqa():
    def kv_heads(config, batch, seq, p):
        parts = _parts(config, batch, seq, p)
        d = config.hidden_size // config.num_attention_heads
        t = batch * seq
        parts["qkvo"] = (
            2 * p * t * config.num_attention_heads * d + 2 * p * t * config.num_key_value_heads * d
        )
        return sum(parts.values())

    message = failure(check_llama_layer_saved_bytes, kv_heads)
    assert message.startswith(E1 + "grouped-query attention: 8 heads, 2 key/value heads")


def test_e1_leaving_out_the_per_token_rsqrt_is_within_the_tolerance(capsys):
    def no_rsqrt(config, batch, seq, p):
        return llama_layer_saved_bytes(config, batch, seq, p) - 2 * 4 * batch * seq

    assert check_llama_layer_saved_bytes(no_rsqrt) is None


def test_e1_forgetting_the_mlp_intermediate_tensors_fails():
    def two_mlp_tensors(config, batch, seq, p):
        parts = _parts(config, batch, seq, p)
        parts["mlp"] = p * batch * seq * config.hidden_size + 2 * p * batch * seq * config.intermediate_size
        return sum(parts.values())

    message = failure(check_llama_layer_saved_bytes, two_mlp_tensors)
    assert "too low, by 10% to a factor of 2" in message


def test_e1_measuring_a_real_layer_is_refused():
    def measures(config, batch, seq, p):
        return measure_layer_saved_bytes(config, batch, seq, torch.float32 if p == 4 else torch.bfloat16)

    message = failure(check_llama_layer_saved_bytes, measures)
    assert "your function ran a model (torch ran" in message
    assert "the exercise asks for a formula" in message


def test_e1_a_tensor_result_fails_on_the_type():
    message = failure(
        check_llama_layer_saved_bytes, lambda c, b, s, p: torch.tensor(llama_layer_saved_bytes(c, b, s, p))
    )
    assert "the number of bytes should be an int; got a Tensor" in message


# ---- e2: the plan ---------------------------------------------------------------------------------------------

E2 = "e2_plan_checkpointing: case "


def test_e2_checkpointing_everything_when_not_needed_fails():
    message = failure(check_plan_checkpointing, lambda blocks, x, budget: list(range(len(blocks))))
    assert message.startswith(
        E2
        + "model A, a budget that the plan without checkpointing fits: your plan [0, 1, 2, 3, 4] fits, but it "
        "recomputes"
    )
    assert message.endswith("(no checkpointing at all fits this budget): your recompute is too high.")


def test_e2_a_plan_over_the_budget_fails():
    message = failure(check_plan_checkpointing, lambda blocks, x, budget: [])
    assert message.startswith(
        E2 + "model A, a budget a third of the way down from no checkpointing: with your plan []"
    )
    assert "over the budget of" in message


def test_e2_an_empty_plan_where_none_fits_fails():
    def never_none(blocks, x, budget):
        plan = plan_checkpointing(blocks, x, budget)
        return list(range(len(blocks))) if plan is None else plan

    message = failure(check_plan_checkpointing, never_none)
    assert message.startswith(
        E2 + "model A, a budget below the peak of every plan (return None): no plan fits this budget, so the "
        "function should return None"
    )


def test_e2_returning_none_when_a_plan_fits_fails():
    message = failure(check_plan_checkpointing, lambda blocks, x, budget: None)
    assert message.startswith(
        E2 + "model A, a budget that the plan without checkpointing fits: your function returned None"
    )


def test_e2_a_greedy_plan_by_saved_bytes_that_ignores_flops_fails():
    """Checkpoint the widest blocks first: fits, but recomputes more than needed somewhere."""
    from autograders.lesson04 import measure_plan

    def widest_first(blocks, x, budget):
        order = sorted(range(len(blocks)), key=lambda i: -blocks[i][0].out_features)
        for k in range(len(blocks) + 1):
            plan = sorted(order[:k])
            if measure_plan(blocks, x, plan)[0] <= budget:
                return plan
        return None

    message = failure(check_plan_checkpointing, widest_first)
    assert "fits, but it recomputes" in message
    assert "a plan that fits with fewer exists" in message


def test_e2_indices_out_of_range_fail():
    message = failure(check_plan_checkpointing, lambda blocks, x, budget: [len(blocks)])
    assert message.endswith("the plan should hold block indices 0..4; it holds 5.")


def vandal(blocks, x, budget):
    plan = plan_checkpointing(blocks, x, budget)
    for p in blocks.parameters():
        p.data.zero_()
    x.zero_()
    return plan


def test_e2_the_learner_cannot_change_the_checks_model():
    """The learner gets a copy: zeroing its weights (and its input) does not change what the check measures."""
    assert check_plan_checkpointing(vandal) is None


def test_e2_the_drawn_budgets_are_chosen_among_the_peaks_the_references_measure():
    """A drawn case's budget is an input, computed in the grading kernel too: there without the grading references
    (`_plan_peaks`, the check's own code), the same peaks as their `plan_table`."""
    blocks, x = budget_stack(16, [(64, 3), (32, 5), (96, 1)], batch=64, seed=1)
    assert _plan_peaks(blocks, x) == sorted({peak for peak, _ in plan_table(blocks, x).values()})


# ---- e3: the stack, on the CPU profile --------------------------------------------------------------------------

E3 = "e3_measure_checkpointed_stack: case "


def _step(layers, hidden, pe, use_checkpoint, reentrant=False):
    h = hidden
    for layer in layers:
        h = (
            checkpoint(layer, h, position_embeddings=pe, use_reentrant=reentrant)
            if use_checkpoint
            else layer(h, position_embeddings=pe)
        )
    h.float().square().mean().backward()
    for p in layers.parameters():
        p.grad = None


def test_e3_ignoring_use_checkpoint_fails_on_the_forward_count():
    def never(layers, hidden, pe, use_checkpoint, steps=3):
        return measure_checkpointed_stack(layers, hidden, pe, False, steps)

    message = failure(check_stack_on_cpu, never)
    assert message.startswith(E3 + "3 layers")
    assert (
        "checkpoint=True: with steps=2 (one warm-up step, then 2 timed) and each layer checkpointed"
        in message
    )


def test_e3_no_warm_up_fails_on_the_forward_count():
    def no_warm_up(layers, hidden, pe, use_checkpoint, steps=3):
        with track_memory(model=layers, inputs=(hidden, pe)) as trace:
            start = time.perf_counter()
            for _ in range(steps):
                _step(layers, hidden, pe, use_checkpoint)
        return {"peak_bytes": trace.peak_bytes, "step_ms": 1000 * (time.perf_counter() - start) / steps}

    message = failure(check_stack_on_cpu, no_warm_up)
    assert "checkpoint=False: with steps=2 (one warm-up step, then 2 timed)" in message


def test_e3_a_peak_in_mib_fails():
    def mib(layers, hidden, pe, use_checkpoint, steps=3):
        got = measure_checkpointed_stack(layers, hidden, pe, use_checkpoint, steps)
        return {**got, "peak_bytes": got["peak_bytes"] / 2**20}

    message = failure(check_stack_on_cpu, mib)
    assert "peak_bytes (what the check saw from outside your function) is too low" in message


def test_e3_seconds_instead_of_milliseconds_fail():
    def seconds(layers, hidden, pe, use_checkpoint, steps=3):
        got = measure_checkpointed_stack(layers, hidden, pe, use_checkpoint, steps)
        return {**got, "step_ms": got["step_ms"] / 1000}

    message = failure(check_stack_on_cpu, seconds)
    assert "step_ms = " in message and "does not fit the time your call took" in message


def test_e3_missing_keys_fail():
    message = failure(check_stack_on_cpu, lambda *a, **k: {"peak": 1})
    assert "the returned dict is missing the key(s) ['peak_bytes', 'step_ms']" in message


# ---- graded: collected in the grading kernel, judged outside it (strict mode does both in this process) -------------

GRADING_SEED = 20261123


@pytest.mark.parametrize(
    ("check_fn", "answer", "line"),
    [
        (
            check_llama_layer_saved_bytes,
            llama_layer_saved_bytes,
            "✓ e1_llama_layer_saved_bytes: 8 cases passed",
        ),
        (check_stack_on_cpu, measure_checkpointed_stack, "✓ e3_measure_checkpointed_stack: 2 cases passed"),
    ],
    ids=["e1", "e3-on-cpu"],
)
def test_right_answers_pass_when_graded(check_fn, answer, line, strict_mode, capsys):
    """(e2's right answer is graded the same way, collected then judged with the seed's drawn cases, by
    test_the_grading_kernel_computes_no_expected_value[e2] below and tests/kit/test_drawn_cases.py: a few minutes each.)"""
    assert kit.current_context() == kit.Context(kit.STRICT, GRADING_SEED)
    assert check_fn(answer) is None
    assert capsys.readouterr().out.splitlines() == [line]


def test_e2_a_learner_who_vandalises_its_copy_passes_when_graded(kit_context, monkeypatch, capsys):
    """Collected and judged (the public cases only, to keep it short): the judge measures its own blocks."""
    kit_context(kit.STRICT)
    assert check_plan_checkpointing(vandal) is None
    assert capsys.readouterr().out.splitlines() == ["✓ e2_plan_checkpointing: 8 cases passed"]


def _gpt3(config, batch, seq, bytes_per_value):
    s, b, h, a = seq, batch, config.hidden_size, config.num_attention_heads
    return int(34 * s * b * h + 5 * a * s * s * b)


def _measures(config, batch, seq, p):
    return measure_layer_saved_bytes(config, batch, seq, torch.float32 if p == 4 else torch.bfloat16)


def _ignores_use_checkpoint(layers, hidden, pe, use_checkpoint, steps=3):
    return measure_checkpointed_stack(layers, hidden, pe, False, steps)


def _public_only(check_fn, answer, words):
    """A wrong answer graded on the public cases only (no grading seed): its first public case fails it as any drawn
    one would, and drawing plan_checkpointing's cases measures every plan of two models, when collecting and again
    when judging."""
    return check_fn, answer, words, None


def _graded(check_fn, answer, words):
    return check_fn, answer, words, GRADING_SEED


WRONG = [
    _graded(check_llama_layer_saved_bytes, stub, "is not written yet"),
    _graded(check_llama_layer_saved_bytes, _gpt3, "is too low"),
    _graded(check_llama_layer_saved_bytes, _measures, "your function ran a model (torch ran"),
    _graded(
        check_llama_layer_saved_bytes,
        lambda c, b, s, p: torch.tensor(llama_layer_saved_bytes(c, b, s, p)),
        "the number of bytes should be an int; got a Tensor",
    ),
    _graded(
        check_llama_layer_saved_bytes,
        lambda c, b, s, p: {"bytes": 1},
        "the number of bytes should be an int; got a dict",
    ),
    _graded(
        check_llama_layer_saved_bytes,
        lambda c, b, s, p: 1 / 0,
        "your function raised ZeroDivisionError: division by zero",
    ),
    _graded(check_plan_checkpointing, lambda blocks, x, budget: [], "over the budget of"),
    _public_only(
        check_plan_checkpointing,
        lambda blocks, x, budget: list(range(len(blocks))),
        "fits, but it recomputes",
    ),
    _public_only(
        check_plan_checkpointing, lambda blocks, x, budget: None, "your function returned None, but a plan"
    ),
    _public_only(check_plan_checkpointing, lambda blocks, x, budget: [len(blocks)], "it holds 5."),
    _public_only(check_plan_checkpointing, lambda blocks, x, budget: {0}, "a check takes only numbers"),
    _public_only(check_plan_checkpointing, lambda blocks, x, budget: "0", "got str"),
    _graded(check_stack_on_cpu, _ignores_use_checkpoint, "every layer should run 6 times"),
    _graded(
        check_stack_on_cpu, lambda *a, **k: {"peak": 1}, "is missing the key(s) ['peak_bytes', 'step_ms']"
    ),
    _graded(check_stack_on_cpu, lambda *a, **k: object(), "a check takes only numbers"),
    _graded(check_measure_checkpointed_stack, _ignores_use_checkpoint, "every layer should run 6 times"),
]


@pytest.mark.parametrize(
    ("check_fn", "answer", "words", "seed"),
    WRONG,
    ids=[f"{i}-{c[0].check_name}" for i, c in enumerate(WRONG)],
)
def test_wrong_answers_fail_the_same_way_when_graded(
    kit_context, check_fn, answer, words, seed, monkeypatch, no_gpu
):
    told = failure(check_fn, answer)  # a learner's notebook
    assert words in told
    kit_context(kit.STRICT, seed)
    assert failure(check_fn, answer) == told  # collected, then judged: the same case fails, the same words


def _labels_e1():
    from autograders.lesson04 import _e1_drawn_case

    cases = _e1_public_cases() + kit.drawn_cases("e1_llama_layer_saved_bytes", 3, _e1_drawn_case)
    labels = ["`llama_layer_saved_bytes` is written"]
    for name, *_ in cases:
        labels += [name, f"{name}: the model ops torch ran during the call"]
    return labels


def _labels_e2():
    names = [name for name, *_ in lesson04._e2_public_cases()]
    return ["`plan_checkpointing` is written", *names, "drawn at grading time #1", "drawn at grading time #2"]


def _labels_e3():
    labels = ["`measure_checkpointed_stack` is written"]
    for on in (False, True):
        case = (
            "3 layers {'hidden_size': 64, 'intermediate_size': 172, 'num_attention_heads': 4, "
            f"'num_key_value_heads': 4}}, batch 2, seq 64, float32 on cpu, checkpoint={on}"
        )
        labels += [case, f"{case}: what the check saw of the call"]
    return labels


@pytest.mark.parametrize(
    ("check_fn", "answer", "labels", "cases"),
    [
        (check_llama_layer_saved_bytes, llama_layer_saved_bytes, _labels_e1, 8),
        (check_plan_checkpointing, plan_checkpointing, _labels_e2, 10),
        (check_stack_on_cpu, measure_checkpointed_stack, _labels_e3, 2),
    ],
    ids=["e1", "e2", "e3-on-cpu"],
)
def test_the_grading_kernel_computes_no_expected_value(
    check_fn, answer, labels, cases, strict_mode, monkeypatch
):
    """Collected with every way to an expected value (the grading references, the stored and measured answers, the
    measurement of a plan) made to fail: every case is still recorded; then the judge, which has them, passes it."""
    computed = []

    def spy(*args, **kwargs):
        computed.append(args)
        raise AssertionError("an expected value was computed in the grading kernel")

    with monkeypatch.context() as m:
        for module, name in [
            (kit, "references"),
            (lesson04, "_e1_expected"),
            (lesson04, "_stored_least_flops"),
            (lesson04, "_least_flops_drawn"),
            (lesson04, "_judge_plan"),
        ]:
            m.setattr(module, name, spy)
        transcript = kit.collect(check_fn.check, (answer,), {})
    assert computed == []
    recorded = [r.label for r in transcript.records]
    expected = labels()
    assert len(recorded) == len(expected)
    for got, want in zip(recorded, expected):
        assert got.startswith(want)
    assert all(r.failed is None and r.missing is None for r in transcript.records)
    travelled = kit.Transcript.from_data(json.loads(json.dumps(transcript.to_data())))
    assert kit.judge(check_fn.check, travelled) == kit.Verdict(True, cases=cases)


def test_the_gpu_check_and_the_prediction_are_collected_again_when_graded():
    """Exercise 4.3 measures the learner's code; 4.1 asks for a prediction, watched for a model run
    (kit.call_predicting), which only a fresh process can be trusted to see. 4.2's plan is measured by the check."""
    assert check_measure_checkpointed_stack.check.rerun
    assert check_llama_layer_saved_bytes.check.rerun
    assert not check_plan_checkpointing.check.rerun
