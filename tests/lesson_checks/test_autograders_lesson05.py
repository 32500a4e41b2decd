"""Lesson 05's checks pass the solution and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own (solutions/05-accumulation/05-accumulation.ipynb, loaded by tests/solution_code.py;
the notebook itself is executed by the notebook tests); the grading references (autograders/references/lesson05.py, a
second way to write each answer) must pass too. Each wrong answer is a mistake a learner is likely to make; the test
asserts that the check names the case that exposes it and says what is wrong.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from check_helpers import failure
from solution_code import solution

from autograders.kit import CheckFailed
from autograders.lesson05 import (
    ZERO_KEYS,
    _public_zero_cases,
    check_seq_cls_loss,
    check_train_step_accumulated,
    check_zero_bytes_per_rank,
    cls_data,
    cls_model,
    full_batch,
    full_batch_update,
    lm_model,
    micro_batch,
    public_zero_bytes,
    target_tokens,
    trainer_update,
)
from autograders.references import lesson05 as ref

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    train_step_accumulated,
    seq_cls_loss,
    zero_bytes_per_rank,
) = solution("05-accumulation", "train_step_accumulated", "seq_cls_loss", "zero_bytes_per_rank")

pytestmark = pytest.mark.usefixtures("learner_mode")


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


# ---- right answers pass, stubs and undefined names fail -------------------------------------------------------


@pytest.mark.parametrize(
    ("check_fn", "answer", "line"),
    [
        (check_train_step_accumulated, train_step_accumulated, "✓ e1_train_step_accumulated: 5 cases passed"),
        (
            check_train_step_accumulated,
            ref.train_step_accumulated,
            "✓ e1_train_step_accumulated: 5 cases passed",
        ),
        (check_seq_cls_loss, seq_cls_loss, "✓ e2_seq_cls_loss: 6 cases passed"),
        (check_seq_cls_loss, ref.seq_cls_loss, "✓ e2_seq_cls_loss: 6 cases passed"),
    ],
    ids=["e1", "e1-reference", "e2", "e2-reference"],
)
def test_right_answers_pass(check_fn, answer, line, capsys):
    assert check_fn(answer) is None
    assert capsys.readouterr().out.splitlines() == [line]


def test_zeroing_with_zeros_instead_of_none_is_accepted(capsys):
    def zeros_kept(model, optimizer, micro_batches):
        loss = train_step_accumulated(model, optimizer, micro_batches)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)  # what zero_grad(set_to_none=False) leaves
        return loss

    assert check_train_step_accumulated(zeros_kept) is None


NOT_WRITTEN = (
    "( case [^:]*: your function raised NotImplementedError: it is not written yet| `.*` is not written yet: "
)
NOT_WRITTEN += "it still raises NotImplementedError)\\.$"


@pytest.mark.parametrize("check_fn", [check_train_step_accumulated, check_seq_cls_loss], ids=["e1", "e2"])
def test_the_learner_stub_fails_as_not_written_yet(check_fn):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}:{NOT_WRITTEN}"):
        check_fn(stub)


@pytest.mark.parametrize("check_fn", [check_train_step_accumulated, check_seq_cls_loss], ids=["e1", "e2"])
def test_an_undefined_answer_fails(check_fn):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}: `.*` is not defined yet"):
        check_fn(None)


# ---- e1: the check's own cases and reference ------------------------------------------------------------------


def test_e1_micro_batches_count_shifted_targets_and_pad_right():
    mb = micro_batch([(5, 0), (3, 2)], torch.Generator().manual_seed(0))
    assert mb["input_ids"].shape == (2, 5)
    assert (mb["labels"][1, 3:] == -100).all() and (mb["input_ids"][1, 3:] == 0).all()
    assert (mb["labels"][1, :2] == -100).all()  # the prompt
    assert target_tokens(mb) == 4 + 1  # row 0: positions 1..4; row 1: position 2 only


def test_e1_padding_a_row_on_the_right_changes_none_of_its_logits():
    """The check's full batch pads micro-batches to one width: a causal LM's real positions must not see it."""
    model = lm_model(0)
    mb = micro_batch([(7, 0)], torch.Generator().manual_seed(1))
    padded = full_batch([mb, micro_batch([(12, 0)], torch.Generator().manual_seed(2))])
    alone = model(input_ids=mb["input_ids"]).logits
    together = model(input_ids=padded["input_ids"]).logits[:1, :7]
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)


def test_e1_the_mean_of_means_is_right_on_equal_micro_batches_only():
    """The first public case (equal shapes) is one where the naive recipe is right; the second is one where it is
    far off: the check tells the answers apart on the cases meant to."""
    with pytest.raises(CheckFailed, match="case very different token counts"):
        check_train_step_accumulated(mean_of_means)


# ---- e1: wrong answers -------------------------------------------------------------------------------------


def mean_of_means(model, optimizer, micro_batches):
    total = 0.0
    for mb in micro_batches:
        loss = model(**mb).loss / len(micro_batches)
        loss.backward()
        total += loss.item()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total


def test_e1_mean_of_means_fails_on_unequal_token_counts():
    message = failure(check_train_step_accumulated, mean_of_means)
    assert message.startswith(
        "e1_train_step_accumulated: case very different token counts: 1 row of 40 tokens, then 4 rows of 3 tokens: "
        "the gradients the optimizer applied are not those of the full batch"
    )
    assert "another direction" in message and "mean of per-micro-batch means" in message


def test_e1_forgetting_to_zero_the_gradients_fails():
    def no_zero_grad(model, optimizer, micro_batches):
        n = sum(target_tokens(mb) for mb in micro_batches)
        total = 0.0
        for mb in micro_batches:
            loss = model(**mb, num_items_in_batch=n).loss
            loss.backward()
            total += loss.item()
        optimizer.step()
        return total

    message = failure(check_train_step_accumulated, no_zero_grad)
    assert message.startswith("e1_train_step_accumulated: case two micro-batches of the same shape")
    assert "after the step the gradients should be zeroed" in message


def test_e1_zeroing_before_the_step_instead_of_after_fails():
    def zero_first(model, optimizer, micro_batches):
        optimizer.zero_grad()
        n = sum(target_tokens(mb) for mb in micro_batches)
        total = 0.0
        for mb in micro_batches:
            loss = model(**mb, num_items_in_batch=n).loss
            loss.backward()
            total += loss.item()
        optimizer.step()
        return total

    assert "should be zeroed" in failure(check_train_step_accumulated, zero_first)


def test_e1_stepping_per_micro_batch_fails():
    def step_each(model, optimizer, micro_batches):
        n = sum(target_tokens(mb) for mb in micro_batches)
        total = 0.0
        for mb in micro_batches:
            loss = model(**mb, num_items_in_batch=n).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total += loss.item()
        return total

    message = failure(check_train_step_accumulated, step_each)
    assert message.endswith("it was called 2 time(s).")
    assert "optimizer.step() should be called once per call" in message


def test_e1_counting_unshifted_tokens_fails_with_a_scale_hint():
    def unshifted(model, optimizer, micro_batches):
        n = sum(int((mb["labels"] != -100).sum()) for mb in micro_batches)  # includes labels[:, 0]
        total = 0.0
        for mb in micro_batches:
            loss = model(**mb, num_items_in_batch=n).loss
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        return total

    message = failure(check_train_step_accumulated, unshifted)
    assert "the direction is right, the scale is not" in message
    assert "labels[:, 1:] != -100" in message


def test_e1_summing_micro_batch_means_fails_as_k_times_too_large():
    def summed(model, optimizer, micro_batches):
        for mb in micro_batches:
            model(**mb).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return 0.0

    message = failure(check_train_step_accumulated, summed)
    assert "2 times (the number of micro-batches, 2: micro-batch means summed, never divided)" in message


def test_e1_returning_the_last_micro_batch_loss_fails():
    def last_loss(model, optimizer, micro_batches):
        n = sum(target_tokens(mb) for mb in micro_batches)
        for mb in micro_batches:
            out = model(**mb, num_items_in_batch=n)
            out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return out.loss.item() * n / target_tokens(micro_batches[-1])  # the last micro-batch's mean

    message = failure(check_train_step_accumulated, last_loss)
    assert message.startswith("e1_train_step_accumulated: case two micro-batches of the same shape")
    assert "the returned loss should be the step's loss" in message
    assert message.endswith("That is the last micro-batch's loss alone.")


def test_e1_one_backward_on_the_summed_loss_fails():
    def one_backward(model, optimizer, micro_batches):
        n = sum(target_tokens(mb) for mb in micro_batches)
        total = sum(
            model(**mb, num_items_in_batch=n).loss for mb in micro_batches
        )  # every graph alive at once
        total.backward()
        optimizer.step()
        optimizer.zero_grad()
        return total.item()

    message = failure(check_train_step_accumulated, one_backward)
    assert message.startswith("e1_train_step_accumulated: case two micro-batches of the same shape")
    assert "backward() should run once per micro-batch (2 here)" in message and "ran 1 time(s)" in message


def test_e1_returning_a_tensor_fails():
    def tensor_loss(model, optimizer, micro_batches):
        return torch.tensor(train_step_accumulated(model, optimizer, micro_batches))

    assert "return the loss as a Python float" in failure(check_train_step_accumulated, tensor_loss)


def test_e1_never_stepping_fails():
    def no_step(model, optimizer, micro_batches):
        for mb in micro_batches:
            model(**mb).loss.backward()
        optimizer.zero_grad()
        return 1.0

    assert "it was called 0 time(s)" in failure(check_train_step_accumulated, no_step)


# ---- e2: the check's reference update ------------------------------------------------------------------------


def test_e2_full_batch_update_is_what_trainer_does_without_accumulation():
    """The check's hand-made full-batch update equals Trainer's own step on the whole batch (model loss, GA 1)."""
    model, data = cls_model("llama", 0, 3), cls_data(8, 6, 3, 0)
    by_hand = full_batch_update(model, data, 0.5)
    by_trainer = trainer_update(model, data, 8, 1, 0.5)
    assert ((by_trainer - by_hand).norm() / by_hand.norm()).item() < 1e-5


def test_e2_the_classifier_bug_is_real_in_the_installed_transformers():
    """Issue #47688, as the lesson shows it: with accumulation 4 and the model's own loss, the update is 4x."""
    model, data = cls_model("bert", 0), cls_data(8, 6, 2, 0)
    ratio = (
        trainer_update(model, data, 2, 4, 0.5).norm() / full_batch_update(model, data, 0.5).norm()
    ).item()
    assert ratio == pytest.approx(4.0, rel=1e-3)


# ---- e2: wrong answers -------------------------------------------------------------------------------------


def test_e2_the_plain_mean_fails_at_the_direct_call_with_a_count():
    def mean(outputs, labels, num_items_in_batch=None):
        return F.cross_entropy(outputs.logits, labels)

    message = failure(check_seq_cls_loss, mean)
    assert message.startswith("e2_seq_cls_loss: case 3 examples, 3 classes, num_items_in_batch=12")
    assert "is too high" in message


def test_e2_dividing_by_the_accumulation_steps_fails_on_uneven_micro_batches():
    def over_steps(outputs, labels, num_items_in_batch=None):
        # right on the direct calls (12 = 3 examples x 4 micro-batches), wrong when the micro-batches differ in size
        loss = F.cross_entropy(outputs.logits, labels)
        if num_items_in_batch is None:
            return loss
        steps = round(float(num_items_in_batch) / len(labels))
        return loss / steps

    message = failure(check_seq_cls_loss, over_steps)
    assert message.startswith("e2_seq_cls_loss: case LlamaForSequenceClassification, 3 labels, 10 examples")
    assert "the micro-batches differ in size" in message


def test_e2_a_mean_that_ignores_the_count_in_trainer_fails_as_k_times():
    def mean_in_trainer(outputs, labels, num_items_in_batch=None):
        if (
            num_items_in_batch is None
            or isinstance(num_items_in_batch, torch.Tensor)
            and num_items_in_batch.dim()
        ):
            return F.cross_entropy(outputs.logits, labels)
        if (
            int(num_items_in_batch) == 12
        ):  # the direct call's count: passes it, then ignores the count in Trainer
            return F.cross_entropy(outputs.logits, labels, reduction="sum") / num_items_in_batch
        return F.cross_entropy(outputs.logits, labels)

    message = failure(check_seq_cls_loss, mean_in_trainer)
    assert message.startswith("e2_seq_cls_loss: case BertForSequenceClassification, 16 examples")
    assert "4 times as large" in message and "the accumulation steps, 4" in message


def test_e2_returning_the_model_loss_fails():
    def model_loss(outputs, labels, num_items_in_batch=None):
        return outputs.loss  # None: Trainer took the labels out of the inputs

    message = failure(check_seq_cls_loss, model_loss)
    assert "should be a 0-dimensional tensor" in message and "NoneType" in message


def test_e2_forgetting_the_none_case_fails_with_the_learner_line():
    def no_none(outputs, labels, num_items_in_batch=None):
        return F.cross_entropy(outputs.logits, labels, reduction="sum") / num_items_in_batch

    message = failure(check_seq_cls_loss, no_none)
    assert message.startswith("e2_seq_cls_loss: case 4 examples, 2 classes, num_items_in_batch=None")
    assert "your function raised TypeError" in message


def test_e2_counting_ignored_labels_fails():
    def counts_all(outputs, labels, num_items_in_batch=None):
        total = F.cross_entropy(outputs.logits, labels, reduction="sum")
        return total / (labels.numel() if num_items_in_batch is None else num_items_in_batch)

    message = failure(check_seq_cls_loss, counts_all)
    assert message.startswith("e2_seq_cls_loss: case 5 examples, one labelled -100")


def test_e2_a_detached_loss_fails():
    def detached(outputs, labels, num_items_in_batch=None):
        return seq_cls_loss(outputs, labels, num_items_in_batch).detach()

    assert "it has no gradient" in failure(check_seq_cls_loss, detached)


# ---- strict grading ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check_fn", "answer", "public"),
    [(check_train_step_accumulated, train_step_accumulated, 5), (check_seq_cls_loss, seq_cls_loss, 6)],
    ids=["e1", "e2"],
)
def test_strict_grading_draws_more_cases_and_the_right_answer_passes_them(
    kit_context, check_fn, answer, public, capsys, monkeypatch
):
    import autograders.kit as kit

    kit_context(kit.STRICT, 20261123)
    assert check_fn(answer) is None
    count = int(capsys.readouterr().out.split(": ")[1].split()[0])
    assert count > public


# ---- e3: zero_bytes_per_rank (the expected bytes were measured on 2 gloo ranks; see autograders/data) -----------


def _unpadded_fsdp2(shapes, world_size, strategy):
    out = zero_bytes_per_rank(shapes, world_size, strategy)
    if strategy == "fsdp2":
        for rank, r in enumerate(out):
            rows = [-(-s[0] // world_size) for s in shapes]
            local = sum(max(0, min(k, s[0] - rank * k)) * math.prod(s[1:]) for k, s in zip(rows, shapes))
            r["parameters"] = r["gradients"] = 4 * local
    return out


def _round_robin_zero1(shapes, world_size, strategy):
    out = zero_bytes_per_rank(shapes, world_size, strategy)
    if strategy == "zero1":
        for rank, r in enumerate(out):
            mine = [math.prod(s) for i, s in enumerate(shapes) if i % world_size == rank]
            r["optimizer state"] = 8 * sum(mine) + 4 * len(mine)
    return out


def _no_step_counters(shapes, world_size, strategy):
    out = zero_bytes_per_rank(shapes, world_size, strategy)
    if strategy != "zero1":
        for r in out:
            r["optimizer state"] -= 4 * len(shapes)
    return out


def _formula_only(shapes, world_size, strategy):
    """ZeRO's formulas with Psi/N, as if every tensor split evenly."""
    psi = sum(math.prod(s) for s in shapes)
    n = world_size
    state = {
        "ddp": (4 * psi, 4 * psi, 8 * psi),
        "zero1": (4 * psi, 4 * psi, 8 * psi // n),
        "fsdp2": (4 * psi // n, 4 * psi // n, 8 * psi // n),
    }[strategy]
    return [dict(zip(ZERO_KEYS, state, strict=True)) for _ in range(n)]


def test_e3_right_answer_passes(learner_mode, capsys):
    check_zero_bytes_per_rank(zero_bytes_per_rank)
    assert "✓ e3_zero_bytes_per_rank" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            _unpadded_fsdp2,
            r"fsdp2, 2 ranks, mlp widths \(100, 37, 11\): rank 1's 'parameters' bytes .* too low",
        ),
        (_round_robin_zero1, r"zero1, 2 ranks, .*'optimizer state' bytes"),
        (_no_step_counters, r"ddp, 2 ranks, .*'optimizer state' bytes .* too low, by less than 1%"),
        (_formula_only, r"'optimizer state' bytes"),
        (lambda shapes, n, s: zero_bytes_per_rank(shapes, n, s)[:1], r"one dict per rank \(2\)"),
        (
            lambda shapes, n, s: [
                {k: float(v) for k, v in r.items()} for r in zero_bytes_per_rank(shapes, n, s)
            ],
            r"'parameters' should be an int",
        ),
    ],
)
def test_e3_wrong_answers_fail_with_a_reason(learner_mode, wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_zero_bytes_per_rank(wrong)


def test_e3_stub_fails(learner_mode):
    def zero_bytes_per_rank(shapes, world_size, strategy):
        raise NotImplementedError()

    with pytest.raises(CheckFailed, match="not written yet"):
        check_zero_bytes_per_rank(zero_bytes_per_rank)


def test_e3_public_cases_cover_every_strategy_and_uneven_shapes():
    stored = public_zero_bytes()
    assert {s for _, s in stored} == {"ddp", "zero1", "fsdp2"}
    assert any(
        w[i] % 2 for w, _ in stored for i in range(1, len(w))
    )  # a first dimension that 2 does not divide


def test_e3_public_cases_run_in_the_stored_order():
    assert _public_zero_cases() == list(public_zero_bytes())


def test_e3_the_frames_the_learners_function_runs_under_give_no_expected_bytes(strict_mode, monkeypatch):
    """In the grading kernel (collect mode, no grading references), a zero_bytes_per_rank that walks the frames it is
    called under finds no expected bytes of its case there: neither held (a local, an attribute of one) nor
    computable (a local closure or partial of the check that measures or stores them)."""
    import sys

    from check_helpers import found_in_frames

    import autograders.kit as kit

    def missing(*args, **kwargs):
        raise RuntimeError("the grading kernel's copy of the kit has no autograders/references/")

    found = {}

    def walking(shapes, world_size, strategy):
        answer = zero_bytes_per_rank(shapes, world_size, strategy)

        def is_expected(value):
            return isinstance(value, (list, tuple)) and [dict(r) for r in value] == answer

        key = (tuple(map(tuple, shapes)), world_size, strategy)
        found[key] = found_in_frames(is_expected, sys._getframe(1))
        return answer

    monkeypatch.setattr(kit, "references", missing)
    transcript = kit.collect(check_zero_bytes_per_rank.check, (walking,), {})
    assert all(r.failed is None for r in transcript.records)
    assert sum("drawn at grading time" in r.label for r in transcript.records) == 6
    assert len(found) == len(transcript.records) - 1
    assert {key: where for key, where in found.items() if where} == {}


# ---- graded the grading kernel's way: collect in the kernel, judge apart (strict mode), same verdicts -------------


def step_returning_the_optimizer(model, optimizer, micro_batches):
    train_step_accumulated(model, optimizer, micro_batches)
    return optimizer  # not plain data: refused where it is returned


def no_zero_grad(model, optimizer, micro_batches):
    n = sum(target_tokens(mb) for mb in micro_batches)
    total = 0.0
    for mb in micro_batches:
        loss = model(**mb, num_items_in_batch=n).loss
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def last_micro_batch_loss(model, optimizer, micro_batches):
    n = sum(target_tokens(mb) for mb in micro_batches)
    for mb in micro_batches:
        out = model(**mb, num_items_in_batch=n)
        out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return out.loss.item() * n / target_tokens(micro_batches[-1])


def plain_mean(outputs, labels, num_items_in_batch=None):
    return F.cross_entropy(outputs.logits, labels)


def detached_loss(outputs, labels, num_items_in_batch=None):
    return seq_cls_loss(outputs, labels, num_items_in_batch).detach()


def vector_loss(outputs, labels, num_items_in_batch=None):
    return F.cross_entropy(outputs.logits, labels, reduction="none")


def outputs_returned(outputs, labels, num_items_in_batch=None):
    return outputs  # a ModelOutput: not plain data


def mean_ignoring_the_count_in_trainer(outputs, labels, num_items_in_batch=None):
    if num_items_in_batch is not None and int(num_items_in_batch) == 12:  # the direct call's count
        return F.cross_entropy(outputs.logits, labels, reduction="sum") / num_items_in_batch
    return F.cross_entropy(outputs.logits, labels)


STRICT_RIGHT = [
    (check_train_step_accumulated, train_step_accumulated, 5),
    (check_seq_cls_loss, seq_cls_loss, 6),
    # its drawn cases are measured on 2 gloo processes launched by torchrun (over 10 s): the full tier
    pytest.param(check_zero_bytes_per_rank, zero_bytes_per_rank, 14, marks=pytest.mark.slow),
]

STRICT_WRONG = [
    (check_train_step_accumulated, mean_of_means, "the gradients the optimizer applied are not those"),
    (check_train_step_accumulated, no_zero_grad, "after the step the gradients should be zeroed"),
    (check_train_step_accumulated, last_micro_batch_loss, "That is the last micro-batch's loss alone."),
    (check_train_step_accumulated, step_returning_the_optimizer, "is a torch.optim.sgd.SGD"),
    (check_seq_cls_loss, plain_mean, "is too high"),
    (check_seq_cls_loss, detached_loss, "it has no gradient"),
    (check_seq_cls_loss, vector_loss, "a tensor of shape (4,)"),
    (check_seq_cls_loss, outputs_returned, "SequenceClassifierOutput"),
    (check_seq_cls_loss, mean_ignoring_the_count_in_trainer, "4 times as large"),
    (check_zero_bytes_per_rank, _unpadded_fsdp2, "rank 1's 'parameters' bytes"),
    (check_zero_bytes_per_rank, _formula_only, "'optimizer state' bytes"),
    (
        check_zero_bytes_per_rank,
        lambda shapes, n, s: zero_bytes_per_rank(shapes, n, s)[:1],
        "one dict per rank",
    ),
    (check_zero_bytes_per_rank, lambda shapes, n, s: None, "the result should be a list or a tuple"),
]


def _grade_strictly(kit_context, monkeypatch):
    import autograders.kit as kit

    monkeypatch.setenv(kit.GRADING_ENV, "strict")
    kit_context(kit.STRICT, 20261123)


@pytest.mark.parametrize(
    ("check_fn", "answer", "public"), STRICT_RIGHT, ids=lambda v: getattr(v, "check_name", None)
)
def test_strict_mode_collects_then_judges_the_right_answer_as_passed(
    kit_context, check_fn, answer, public, monkeypatch, capsys
):
    _grade_strictly(kit_context, monkeypatch)
    assert check_fn(answer) is None
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"✓ {check_fn.check_name}: ")
    assert int(line.split(": ")[1].split()[0]) > public  # the drawn cases ran too


@pytest.mark.parametrize(
    ("check_fn", "answer", "needle"),
    STRICT_WRONG,
    ids=[
        f"{c.check_name}-{getattr(a, '__name__', 'lambda')}-{i}" for i, (c, a, _) in enumerate(STRICT_WRONG)
    ],
)
def test_strict_mode_fails_a_wrong_answer_with_the_learner_mode_message(
    kit_context, check_fn, answer, needle, monkeypatch
):
    in_notebook = failure(check_fn, answer)
    assert needle in in_notebook
    _grade_strictly(kit_context, monkeypatch)
    assert failure(check_fn, answer) == in_notebook


@pytest.mark.parametrize(("check_fn", "answer", "public"), STRICT_RIGHT, ids=["e1", "e2", "e3"])
def test_the_grading_kernel_never_computes_an_expected_value(
    kit_context, check_fn, answer, public, monkeypatch
):
    """Collect mode (the grading kernel) runs only learner steps: every reference of the lesson raises there, and the
    record it leaves is still complete (the judge, with the references back, passes it on every case)."""
    import autograders.kit as kit
    import autograders.lesson05 as lesson05

    _grade_strictly(kit_context, monkeypatch)
    computed = []

    def refuse(name):
        def expected_value(*args, **kwargs):
            computed.append(name)
            raise AssertionError(f"{name} computed in the grading kernel")

        return expected_value

    with monkeypatch.context() as patched:
        patched.setattr(kit, "references", refuse("references"))
        for name in (
            "_full_batch_steps",
            "full_batch_update",
            "_direct_expected",
            "public_zero_bytes",
            "stored_formula_bytes",
            "_expected_zero",
            "full_batch",
        ):
            patched.setattr(lesson05, name, refuse(name))
        transcript = kit.collect(check_fn.check, (answer,), {})
    assert computed == []
    assert transcript.records and all(r.failed is None and r.missing is None for r in transcript.records)
    assert any(r.label.startswith("drawn at grading time") for r in transcript.records)
    verdict = kit.judge(check_fn.check, transcript)
    assert verdict.passed, verdict.message
    assert verdict.cases > public
