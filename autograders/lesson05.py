"""Checks for lesson 05 — gradient accumulation (and, in its last section, data parallelism).

No check holds an answer. `train_step_accumulated` is watched while it runs (an optimizer step pre-hook keeps the
gradients the optimizer applies and counts the steps) and compared with one full-batch step that Hugging Face's own
causal-LM loss computes on an identical model: the micro-batches right-padded into one batch, the loss averaged over
all target tokens of the step. `seq_cls_loss` is compared with torch's `F.cross_entropy` when called directly, then
run as a `compute_loss_func` inside a real `transformers.Trainer` with gradient accumulation and SGD, whose parameter
update must equal a full-batch SGD update computed by hand. Every model and batch is the check's own (tiny Llama and
BERT models built with `memlab.models`), built apart for the learner's code (inside its learner steps, which return
what it did as plain data) and for the expected values (reference steps, autograders/kit.py: under grading only the
judge computes them). Under grading each check also draws cases of its own (`drawn_cases`). `zero_bytes_per_rank` is
compared with bytes measured on 2 gloo processes (`memlab.distributed`) or given by ZeRO's formulas: stored for the
public cases (autograders/data/lesson05.json, scripts/make_check_data.py), measured by the judge for the cases drawn
at grading time (autograders/references/lesson05.py, which is not in the learner release: measuring them answers
the exercise).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import logging
import math
import numbers
import random
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from autograders import kit
from autograders.kit import _
from memlab.models import build_model, mlp, tiny_bert_config, tiny_llama_config

PAD_ID = 0  # tiny_llama_config's pad token: the check's random token ids start at 3

# ---- e1: train_step_accumulated -----------------------------------------------------------------------------------

#: fp32 rounding: the same sums taken in another order and other matmul shapes (measured: about 1e-7 to 1e-6)
GRAD_RTOL = 2e-5
LOSS_RTOL = 1e-5


def lm_model(seed: int, hidden: int = 32, layers: int = 1, heads: int = 2, vocab: int = 96):
    """A tiny Llama causal LM (fp32, eager attention, no dropout) for the checks of Exercise 5.1."""
    config = tiny_llama_config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
    )
    return build_model(config, task="causal-lm", seed=seed)


def micro_batch(rows, generator: torch.Generator, vocab: int = 96) -> dict[str, torch.Tensor]:
    """One micro-batch: `rows` is a list of (length, masked prefix). Each row has `length` real tokens, the first
    `masked prefix` of them labelled -100 (a prompt), and is right-padded with PAD_ID / -100 to the longest row."""
    width = max(length for length, _ in rows)
    input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (length, prefix) in enumerate(rows):
        ids = torch.randint(3, vocab, (length,), generator=generator)
        input_ids[i, :length] = ids
        labels[i, prefix:length] = ids[prefix:]
    return {"input_ids": input_ids, "labels": labels}


def target_tokens(batch: dict[str, torch.Tensor]) -> int:
    """The targets of a causal LM: labels[:, 1:] != -100 (the model predicts token t+1 from tokens 0..t)."""
    return int((batch["labels"][:, 1:] != -100).sum())


def full_batch(micro_batches) -> dict[str, torch.Tensor]:
    """The micro-batches as one batch, right-padded to the longest row (causal attention: padding after a row's
    tokens changes none of its logits)."""
    width = max(mb["input_ids"].shape[1] for mb in micro_batches)
    pieces = {"input_ids": [], "labels": []}
    for mb in micro_batches:
        pad = width - mb["input_ids"].shape[1]
        pieces["input_ids"].append(F.pad(mb["input_ids"], (0, pad), value=PAD_ID))
        pieces["labels"].append(F.pad(mb["labels"], (0, pad), value=-100))
    return {key: torch.cat(value) for key, value in pieces.items()}


def _e1_cases():
    """(name, model seed, lr, [micro-batch row specs per step]); every step uses the same micro-batches."""
    return [
        (
            kit.Case("two micro-batches of the same shape (2 rows x 12 tokens each, no padding)"),
            0,
            0.5,
            [[(12, 0)] * 2] * 2,
            1,
        ),
        (
            kit.Case("very different token counts: 1 row of 40 tokens, then 4 rows of 3 tokens"),
            1,
            0.5,
            [[(40, 0)], [(3, 0)] * 4],
            1,
        ),
        (
            kit.Case(
                "a micro-batch with a single target token (a row of 2 tokens) between two of 2 x 20 tokens"
            ),
            2,
            0.5,
            [[(20, 0), (18, 0)], [(2, 0)], [(20, 0), (15, 0)]],
            1,
        ),
        (
            kit.Case("one micro-batch only (3 rows of 25, 9 and 4 tokens, right-padded)"),
            3,
            0.5,
            [[(25, 0), (9, 0), (4, 0)]],
            1,
        ),
        (
            kit.Case("three micro-batches with prompts labelled -100 and padding, two steps in a row"),
            4,
            0.3,
            [[(30, 10), (12, 0)], [(6, 5), (16, 2), (8, 0)], [(24, 20)]],
            2,
        ),
    ]


def _drawn_e1_case(rng: random.Random, i: int):
    specs = []
    for _micro in range(rng.randint(1, 4)):
        rows = []
        for _row in range(rng.randint(1, 4)):
            length = rng.randint(2, 32)
            prefix = rng.choice([0, 0, rng.randint(0, length - 2)])  # at least one target token per row
            rows.append((length, prefix))
        specs.append(rows)
    counts = "/".join(str(sum(length - max(1, p) for length, p in rows)) for rows in specs)
    name = kit.drawn(
        i, kit.Case("{count} micro-batch(es) with {counts} target tokens", count=len(specs), counts=counts)
    )
    return name, rng.randrange(10**6), rng.choice([0.1, 0.3, 0.5]), specs, rng.choice([1, 2])


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().flatten() for t in tensors])


def _grad_verdict(got: torch.Tensor, expected: torch.Tensor, n_micro: int) -> str | None:
    """None if `got` is `expected` to fp32 rounding, else what is wrong with it, in words."""
    scale = expected.norm()
    error = (got - expected).norm() / scale
    if error <= GRAD_RTOL:
        return None
    factor = float(got @ expected / (expected @ expected))
    residual = float((got - factor * expected).norm() / scale)
    if residual <= 10 * GRAD_RTOL:
        if n_micro > 1 and abs(factor - n_micro) < 1e-3 * n_micro:
            text = _(
                "they are {factor:.4g} times (the number of micro-batches, {count}: micro-batch means summed, never "
                "divided) the full batch's: the direction is right, the scale is not."
            )
        else:
            text = _(
                "they are {factor:.4g} times the full batch's: the direction is right, the scale is not."
            )
        return (
            text.format(factor=factor, count=n_micro)
            + " "
            + _(
                "The loss of the step is the sum of the per-token losses divided by the number of target tokens of "
                "the WHOLE step: count the shifted labels, labels[:, 1:] != -100, of every micro-batch"
            )
        )
    return _(
        "they point in another direction than the full batch's (relative error {error:.3g}): each micro-batch "
        "must count in proportion to its number of target tokens. A mean of per-micro-batch means gives a "
        "micro-batch of 2 tokens the same weight as one of 200"
    ).format(error=float(error))


def _full_batch_steps(seed: int, lr: float, micro_batches, n_steps: int) -> list[dict]:
    """The reference: `n_steps` full-batch SGD steps on a model identical to the learner's, the loss Hugging
    Face's own (mean over all target tokens). For each step: the micro-batches' mean losses and the step's loss
    before the update, the gradients the step applied and the parameters after it."""
    together = full_batch(micro_batches)
    model = lm_model(seed)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    steps = []
    for _step in range(n_steps):
        with torch.no_grad():
            micro_means = [model(**mb).loss.item() for mb in micro_batches]
        loss = model(**together).loss
        loss.backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        after = [p.detach().clone() for p in model.parameters()]
        steps.append({"micro_means": micro_means, "loss": loss.item(), "grads": grads, "parameters": after})
    return steps


def _watched_model(seed: int, lr: float) -> dict:
    """The learner's side of a case: the model and SGD optimizer the learner's function steps, watched (an optimizer
    step pre-hook keeps the gradients each step applies; a hook on the output layer counts the backward passes)."""
    model = lm_model(seed)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    applied: list[list[torch.Tensor | None]] = []
    optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: applied.append(
            [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        )
    )
    backwards = [0]  # backward passes that reached the output layer (every micro-batch has targets)
    model.get_output_embeddings().weight.register_post_accumulate_grad_hook(
        lambda p: backwards.__setitem__(0, backwards[0] + 1)
    )
    names = [n for n, _ in model.named_parameters()]
    return {
        "model": model,
        "optimizer": optimizer,
        "applied": applied,
        "backwards": backwards,
        "names": names,
    }


def _what_the_step_did(side: dict) -> dict:
    """What the learner's step did to the model and optimizer the check built, as plain data."""
    model, applied = side["model"], side["applied"]
    leftover = [
        (n, float(p.grad.norm())) for n, p in model.named_parameters() if p.grad is not None and p.grad.any()
    ]
    return {
        "names": list(side["names"]),
        "optimizer steps": len(applied),
        "backwards": side["backwards"][0],
        "applied": list(applied[0]) if len(applied) == 1 else None,
        "leftover": leftover[:1],
        "parameters": [p.detach().clone() for p in model.parameters()],
    }


def _run_e1_case(train_step_accumulated, name, seed, lr, specs, n_steps) -> None:
    generator = torch.Generator().manual_seed(seed)
    micro_batches = [micro_batch(rows, generator) for rows in specs]
    # the reference: full-batch steps on an identical model of its own
    expected_steps = kit.reference(lambda: _full_batch_steps(seed, lr, micro_batches, n_steps))
    side: dict = {}  # the learner's model and optimizer, built and touched only inside learner steps
    n_micro = len(micro_batches)
    for step in range(1, n_steps + 1):
        label = name if n_steps == 1 else kit.Case("{case}, step {step}", case=name, step=step)

        def learner_step(label=label):
            if not side:
                side.update(_watched_model(seed, lr))
            side["applied"].clear()
            side["backwards"][0] = 0
            copies = [{k: v.clone() for k, v in mb.items()} for mb in micro_batches]
            return kit.call(train_step_accumulated, side["model"], side["optimizer"], copies, case=label)

        # the learner's step, watched
        got = kit.learner(label, learner_step)
        if isinstance(got, torch.Tensor):
            raise kit.CheckFailed(
                _("case {case}: return the loss as a Python float (loss.item()); got a tensor.").format(
                    case=label
                )
            )
        kit.expect_type(got, numbers.Real, case=label, what=_("the returned loss"))
        did = kit.learner(
            kit.Case("{case}: the model and optimizer after the step", case=label),
            lambda: _what_the_step_did(side),
        )
        if did["optimizer steps"] != 1:
            raise kit.CheckFailed(
                _(
                    "case {case}: optimizer.step() should be called once per call, after the backward of the last "
                    "of the {count} micro-batch(es); it was called {calls} time(s)."
                ).format(case=label, count=n_micro, calls=did["optimizer steps"])
            )
        if did["backwards"] != n_micro:
            raise kit.CheckFailed(
                _(
                    "case {case}: backward() should run once per micro-batch ({count} here), each right after that "
                    "micro-batch's forward; it ran {runs} time(s). Adding the losses up and calling backward once "
                    "keeps every micro-batch's activations alive together: the memory accumulation is meant to save."
                ).format(case=label, count=n_micro, runs=did["backwards"])
            )
        names, applied = did["names"], did["applied"]
        missing = [n for n, g in zip(names, applied) if g is None]
        if missing:
            raise kit.CheckFailed(
                _(
                    "case {case}: when optimizer.step() ran, {parameter} had no gradient: call backward() on every "
                    "micro-batch's loss before the step (and zero the gradients after it, not before it)."
                ).format(case=label, parameter=missing[0])
            )
        if did["leftover"]:
            ((leftover_name, leftover_norm),) = did["leftover"]
            raise kit.CheckFailed(
                _(
                    "case {case}: after the step the gradients should be zeroed (optimizer.zero_grad(): None or "
                    "zeros are both fine); {parameter} still has a gradient of norm {norm:.3g}, which the next step "
                    "would add to."
                ).format(case=label, parameter=leftover_name, norm=leftover_norm)
            )
        if not kit.judging():
            continue
        expected = expected_steps[step - 1]
        verdict = _grad_verdict(_flat(applied), _flat(expected["grads"]), n_micro)
        if verdict:
            raise kit.CheckFailed(
                _(
                    "case {case}: the gradients the optimizer applied are not those of the full batch (tolerance "
                    "{rtol:g} relative, fp32 rounding): {verdict}."
                ).format(case=label, rtol=GRAD_RTOL, verdict=verdict)
            )
        for pname, p, q in zip(names, did["parameters"], expected["parameters"]):
            if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
                raise kit.CheckFailed(
                    _(
                        "case {case}: after the step the parameter {parameter} is not what one SGD step with the "
                        "full-batch gradient gives: let optimizer.step() make the update, once, and change nothing "
                        "else."
                    ).format(case=label, parameter=pname)
                )
        got = float(got)
        expected_loss, micro_means = expected["loss"], expected["micro_means"]
        if not math.isclose(got, expected_loss, rel_tol=LOSS_RTOL, abs_tol=1e-6):
            mean_of_means = sum(micro_means) / n_micro
            hint = ""
            if n_micro > 1 and math.isclose(got, micro_means[-1], rel_tol=LOSS_RTOL):
                hint = " " + _("That is the last micro-batch's loss alone.")
            elif n_micro > 1 and math.isclose(got, mean_of_means, rel_tol=LOSS_RTOL):
                hint = " " + _("That is the mean of the per-micro-batch means.")
            raise kit.CheckFailed(
                _(
                    "case {case}: the returned loss should be the step's loss, the mean over all target tokens of "
                    "all micro-batches (before the update); it is {how_far} (tolerance ±{rtol:g} relative).{hint}"
                ).format(case=label, how_far=kit.how_far(got, expected_loss), rtol=LOSS_RTOL, hint=hint)
            )


@kit.check("e1_train_step_accumulated", points=4)
def check_train_step_accumulated(train_step_accumulated) -> int:
    kit.expect_callable(train_step_accumulated, "train_step_accumulated")
    cases = _e1_cases() + kit.drawn_cases("e1_train_step_accumulated", 3, _drawn_e1_case)
    for case in cases:
        _run_e1_case(train_step_accumulated, *case)
    return len(cases)


# ---- e2: seq_cls_loss, a compute_loss_func for Trainer ------------------------------------------------------------

UPDATE_RTOL = 1e-4


def cls_model(kind: str, seed: int, num_labels: int = 2):
    """A tiny sequence classifier with dropout off (dropout would make two runs differ): "bert" or "llama"."""
    if kind == "bert":
        config = tiny_bert_config(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    else:
        config = tiny_llama_config(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    return build_model(config, task="seq-cls", num_labels=num_labels, seed=seed)


def cls_data(n: int, seq: int, num_labels: int, seed: int) -> dict[str, torch.Tensor]:
    """n examples of `seq` random tokens (ids >= 3: no padding), labels in [0, num_labels)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(3, 96, (n, seq), generator=g),
        "attention_mask": torch.ones(n, seq, dtype=torch.long),
        "labels": torch.randint(0, num_labels, (n,), generator=g),
    }


def full_batch_update(model, data: dict[str, torch.Tensor], lr: float) -> torch.Tensor:
    """The SGD update of one step on all of `data` at once, the loss the mean cross-entropy: what accumulation must
    reproduce. By hand, on a copy of the model (no Trainer)."""
    model = copy.deepcopy(model)
    model.train()
    logits = model(input_ids=data["input_ids"], attention_mask=data["attention_mask"]).logits
    F.cross_entropy(logits, data["labels"]).backward()
    return torch.cat([(-lr * p.grad).flatten() for p in model.parameters()])


@contextlib.contextmanager
def _quiet_trainer():
    """Trainer's warnings and log lines off (the check prints one line)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    accelerate_logger = logging.getLogger("accelerate")
    old = accelerate_logger.level
    accelerate_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        accelerate_logger.setLevel(old)


def trainer_update(
    model,
    data: dict[str, torch.Tensor],
    micro_batch_size: int,
    accumulation: int,
    lr: float,
    compute_loss_func=None,
    optimizer: str = "sgd",
    max_grad_norm: float = 0.0,
) -> torch.Tensor:
    """The parameter update of ONE optimizer step of `transformers.Trainer` over all of `data` (micro-batches of
    `micro_batch_size`, `accumulation` of them; the last may be smaller), on a copy of `model`. SGD (or AdamW)
    without weight decay, constant LR, clipping off when max_grad_norm=0, on the CPU, nothing saved or printed."""
    from transformers import PrinterCallback, ProgressCallback, Trainer, TrainingArguments

    from memlab.data import TensorDictDataset

    model = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    params = model.parameters()
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr)
    else:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    with _quiet_trainer(), tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=micro_batch_size,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            learning_rate=lr,
            lr_scheduler_type="constant",
            max_grad_norm=max_grad_norm,
            weight_decay=0.0,
            use_cpu=True,
            report_to=[],
            disable_tqdm=True,
            save_strategy="no",
            logging_strategy="no",
            eval_strategy="no",
            seed=0,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=TensorDictDataset(data),
            optimizers=(opt, None),
            compute_loss_func=compute_loss_func,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
    return torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])


def _e2_direct_cases():
    """(name, logits shape, labels, num_items_in_batch): seq_cls_loss called directly, as Trainer would."""
    return [
        (kit.Case("4 examples, 2 classes, num_items_in_batch=None (evaluation)"), (4, 2), [0, 1, 1, 0], None),
        (
            kit.Case("3 examples, 3 classes, num_items_in_batch=12 (a micro-batch of an accumulated step)"),
            (3, 3),
            [2, 0, 1],
            12,
        ),
        (
            kit.Case("5 examples, one labelled -100 (ignored), num_items_in_batch=None"),
            (5, 2),
            [1, -100, 0, 0, 1],
            None,
        ),
    ]


def _e2_trainer_cases():
    """(name, model kind, num_labels, examples, micro-batch size, accumulation steps, seq, seed)."""
    return [
        (
            kit.Case("BertForSequenceClassification, 16 examples: micro-batches of 4, accumulation 4"),
            "bert",
            2,
            16,
            4,
            4,
            10,
            0,
        ),
        (
            kit.Case(
                "LlamaForSequenceClassification, 3 labels, 10 examples: micro-batches of 4, 4 and 2 (accumulation 3)"
            ),
            "llama",
            3,
            10,
            4,
            3,
            8,
            1,
        ),
        (
            kit.Case("BertForSequenceClassification, 8 examples: micro-batches of 1, accumulation 8"),
            "bert",
            2,
            8,
            1,
            8,
            6,
            2,
        ),
    ]


def _drawn_e2_case(rng: random.Random, i: int):
    kind = rng.choice(["bert", "llama"])
    micro, accumulation = rng.randint(1, 4), rng.randint(2, 5)
    n = micro * (accumulation - 1) + rng.randint(1, micro)  # the last micro-batch may be smaller
    num_labels = rng.randint(2, 4)
    name = kit.drawn(
        i,
        kit.Case(
            "{kind}, {num_labels} labels, {n} examples, micro-batches of {micro}, accumulation {accumulation}",
            kind=kind,
            num_labels=num_labels,
            n=n,
            micro=micro,
            accumulation=accumulation,
        ),
    )
    return name, kind, num_labels, n, micro, accumulation, rng.randint(4, 12), rng.randrange(10**6)


def _direct_logits(name: str, shape) -> torch.Tensor:
    """The logits a direct case passes (as a leaf that requires grad), the same on every side of the check."""
    g = torch.Generator().manual_seed(len(name))
    return torch.randn(*shape, generator=g, requires_grad=True)


def _direct_expected(name: str, shape, labels, num_items) -> float:
    """torch's own cross-entropy on the case's logits: the mean, or the sum divided by num_items_in_batch."""
    logits, labels = _direct_logits(name, shape), torch.tensor(labels)
    if num_items is None:
        return F.cross_entropy(logits, labels).item()
    return F.cross_entropy(logits, labels, reduction="sum").item() / num_items


def _check_direct(seq_cls_loss, name, shape, labels, num_items) -> None:
    from transformers.modeling_outputs import SequenceClassifierOutput

    side: dict = {}  # the loss the learner's function returned, kept for the next learner step

    def direct_call():
        logits = _direct_logits(name, shape)
        num = None if num_items is None else torch.tensor(num_items)
        outputs = SequenceClassifierOutput(logits=logits)  # as Trainer passes it: labels popped, so no .loss
        side["loss"] = kit.call(
            seq_cls_loss, outputs, torch.tensor(labels), num_items_in_batch=num, case=name
        )
        return side["loss"]

    got = kit.learner(name, direct_call)
    if not isinstance(got, torch.Tensor):
        raise kit.CheckFailed(
            _(
                "case {case}: the loss should be a 0-dimensional tensor (backward() is called on it); got {type}."
            ).format(case=name, type=type(got).__name__)
        )
    if got.dim() != 0:
        raise kit.CheckFailed(
            _(
                "case {case}: the loss should be a 0-dimensional tensor (backward() is called on it); got a tensor "
                "of shape {shape}."
            ).format(case=name, shape=tuple(got.shape))
        )
    # the round trip drops autograd history: whether the returned loss had a gradient is read where it was returned
    if not kit.learner(
        kit.Case("{case}: the loss requires grad", case=name), lambda: bool(side["loss"].requires_grad)
    ):
        raise kit.CheckFailed(
            _("case {case}: the loss should be computed from outputs.logits (it has no gradient).").format(
                case=name
            )
        )
    expected = kit.reference(lambda: _direct_expected(name, shape, labels, num_items))
    if num_items is None:
        what = _("the loss (the mean cross-entropy over the labelled examples)")
    else:
        what = _("the loss (the summed cross-entropy divided by num_items_in_batch)")
    kit.expect_close(got.item(), expected, case=name, what=what, rtol=1e-5, reveal=False)


def _check_in_trainer(seq_cls_loss, name, kind, num_labels, n, micro, accumulation, seq, seed) -> None:
    lr = 0.5
    expected = kit.reference(
        lambda: full_batch_update(cls_model(kind, seed, num_labels), cls_data(n, seq, num_labels, seed), lr)
    )
    got = kit.learner(
        name,
        lambda: kit.call(
            trainer_update,
            cls_model(kind, seed, num_labels),
            cls_data(n, seq, num_labels, seed),
            micro,
            accumulation,
            lr,
            compute_loss_func=seq_cls_loss,
            case=name,
        ),
    )
    if not kit.judging():
        return
    error = float((got - expected).norm() / expected.norm())
    if error <= UPDATE_RTOL:
        return
    ratio = float(got.norm() / expected.norm())
    if abs(ratio - accumulation) < 0.01 * accumulation:
        detail = _(
            "the update is {ratio:.3g} times as large as the full batch's (relative error {error:.3g}): the "
            "accumulation steps, {accumulation}. With a compute_loss_func Trainer does not divide the loss by them; "
            "your loss must be normalised over the whole accumulated batch, by num_items_in_batch"
        )
    elif n % micro:
        detail = _(
            "the update is {ratio:.3g} times as large as the full batch's (relative error {error:.3g}). Here the "
            "micro-batches differ in size (the last has {last} example(s)): dividing each micro-batch's mean by the "
            "number of accumulation steps weighs their examples unequally; divide the sum by num_items_in_batch"
        )
    else:
        detail = _(
            "the update is {ratio:.3g} times as large as the full batch's (relative error {error:.3g})"
        )
    detail = detail.format(ratio=ratio, error=error, accumulation=accumulation, last=n % micro)
    raise kit.CheckFailed(
        _(
            "case {case}: one Trainer step with your compute_loss_func, SGD and clipping off should make the same "
            "parameter update as one full-batch step (tolerance {rtol:g} relative); {detail}."
        ).format(case=name, rtol=UPDATE_RTOL, detail=detail)
    )


@kit.check("e2_seq_cls_loss", points=3)
def check_seq_cls_loss(seq_cls_loss) -> int:
    kit.expect_callable(seq_cls_loss, "seq_cls_loss")
    direct = _e2_direct_cases()
    for case in direct:
        _check_direct(seq_cls_loss, *case)
    cases = _e2_trainer_cases() + kit.drawn_cases("e2_seq_cls_loss", 2, _drawn_e2_case)
    for case in cases:
        _check_in_trainer(seq_cls_loss, *case)
    return len(direct) + len(cases)


# ---- e3: zero_bytes_per_rank ------------------------------------------------------------------------------------
# The expected bytes are measured. The public cases were measured once on 2 gloo processes by
# scripts/make_check_data.py (memlab.distributed's "zero_memory" job, memlab.measure.track_memory in every rank, run
# by autograders/references/lesson05.py) and are stored in autograders/data/lesson05.json; the cases drawn at grading
# time are measured by the judge (a reference step: never in the grading kernel). Two more public cases need no
# measurement: ZeRO's own formulas where every first dimension divides the ranks (stored too).

DATA = Path(__file__).resolve().parent / "data" / "lesson05.json"
ZERO_STRATEGIES = ("ddp", "zero1", "fsdp2")
ZERO_KEYS = ("parameters", "gradients", "optimizer state")
ZERO_WIDTHS = ((256, 512, 512, 10), (100, 37, 11), (64, 3, 5), (30, 60, 60, 60, 7))
#: (widths, ranks, strategy) of the public cases that ZeRO's formulas give exactly (every first dimension divides the
#: ranks)
ZERO_FORMULA_CASES = (((64, 128, 32), 4, "fsdp2"), ((40, 24, 8), 8, "ddp"))


def mlp_shapes(widths) -> list[tuple[int, ...]]:
    """The parameter shapes of `memlab.models.mlp(widths)`, in model order."""
    return [tuple(p.shape) for p in mlp(list(widths)).parameters()]


def zero_key(widths, strategy: str) -> str:
    """How a public case is named in autograders/data/lesson05.json: "256x512x10:fsdp2"."""
    return "x".join(map(str, widths)) + ":" + strategy


@functools.cache
def public_zero_bytes() -> dict:
    """{(widths, strategy): per-rank bytes} of the public cases, in the stored order."""
    names = {
        zero_key(widths, strategy): (widths, strategy)
        for widths in ZERO_WIDTHS
        for strategy in ZERO_STRATEGIES
    }
    return kit.read_only(
        {names[key]: value for key, value in json.loads(DATA.read_text())["zero_bytes_per_rank"].items()}
    )


def _public_zero_cases() -> list[tuple[tuple[int, ...], str]]:
    """(widths, strategy) of the public measured cases, in the stored order (autograders/data/lesson05.json keeps
    its keys sorted)."""
    return sorted(
        ((widths, strategy) for widths in ZERO_WIDTHS for strategy in ZERO_STRATEGIES),
        key=lambda case: zero_key(*case),
    )


def _zero_formula_cases() -> list[tuple[str, tuple[int, ...], int, str]]:
    """(name, widths, ranks, strategy) of the public cases that ZeRO's formulas give exactly."""
    return [
        (
            kit.Case(
                "{strategy}, {world} ranks, widths {widths}", strategy=strategy, world=world, widths=widths
            ),
            widths,
            world,
            strategy,
        )
        for widths, world, strategy in ZERO_FORMULA_CASES
    ]


def _drawn_zero_widths(rng: random.Random, i: int) -> tuple[int, ...]:
    depth = rng.randint(2, 4)
    return tuple(rng.randint(2, 300) for _ in range(depth + 1))


def _expected_zero(source: tuple, widths: tuple[int, ...], strategy: str) -> list[dict[str, int]]:
    """A reference step: the per-rank bytes of a case, by where they come from (`source`): ("measured",) a public
    case measured once and stored, ("formula", name) a public case of ZeRO's formulas, stored, or ("drawn", every
    drawn widths) a case drawn at grading time, which the grading reference measures (all the drawn MLPs in one
    launch, the first time one of them is expected)."""
    kind = source[0]
    if kind == "measured":
        return public_zero_bytes()[(widths, strategy)]
    if kind == "formula":
        return stored_formula_bytes()[source[1]]
    return kit.references("lesson05").measure_zero_bytes(source[1])[(widths, strategy)]


@functools.cache
def stored_formula_bytes() -> dict:
    """{case name: per-rank bytes} of the public cases ZeRO's formulas give (scripts/make_check_data.py)."""
    return kit.read_only(json.loads(DATA.read_text())["zero_formula_bytes"])


@kit.check("e3_zero_bytes_per_rank", points=3)
def check_zero_bytes_per_rank(zero_bytes_per_rank) -> int:
    kit.expect_callable(zero_bytes_per_rank, "zero_bytes_per_rank")
    # plain data only, down to where each expected value comes from: nothing in this frame, which the learner's code
    # runs under, computes or holds one in the grading kernel
    cases = [
        (
            kit.Case("{strategy}, 2 ranks, mlp widths {widths}", strategy=strategy, widths=widths),
            widths,
            2,
            strategy,
            ("measured",),
        )
        for widths, strategy in _public_zero_cases()
    ]
    cases += [
        (name, widths, world, strategy, ("formula", name))
        for name, widths, world, strategy in _zero_formula_cases()
    ]
    drawn_widths = tuple(kit.drawn_cases("e3_zero_bytes_per_rank", 2, _drawn_zero_widths))
    i = 0
    for widths in drawn_widths:  # one case per strategy for each MLP drawn at grading time
        for strategy in ZERO_STRATEGIES:
            i += 1
            name = kit.drawn(
                i, kit.Case("{strategy}, 2 ranks, mlp widths {widths}", strategy=strategy, widths=widths)
            )
            cases.append((name, widths, 2, strategy, ("drawn", drawn_widths)))
    for name, widths, world, strategy, source in cases:
        shapes = mlp_shapes(widths)
        expected = kit.reference(lambda: _expected_zero(source, widths, strategy))  # noqa: B023 - called at once
        got = kit.call(zero_bytes_per_rank, [tuple(s) for s in shapes], world, strategy, case=name)
        kit.expect_type(got, (list, tuple), case=name, what=_("the result"))
        if len(got) != world:
            raise kit.CheckFailed(
                _("case {case}: expected a list with one dict per rank ({world}); got {count}.").format(
                    case=name, world=world, count=len(got)
                )
            )
        for rank, got_rank in enumerate(got):
            want = kit.DEFERRED if expected is kit.DEFERRED else expected[rank]
            kit.expect_keys(got_rank, ZERO_KEYS, case=name, what=_("rank {rank}'s dict").format(rank=rank))
            for key in ZERO_KEYS:
                kit.expect_type(
                    got_rank[key],
                    numbers.Integral,
                    case=name,
                    what=_("rank {rank}'s {key}").format(rank=rank, key=repr(key)),
                )
                kit.expect_close(
                    got_rank[key],
                    want if want is kit.DEFERRED else want[key],
                    case=name,
                    what=_(
                        "rank {rank}'s {key} bytes (measured with track_memory after optimizer.step())"
                    ).format(rank=rank, key=repr(key)),
                    reveal=False,
                )
    return len(cases)


__all__ = [
    "check_train_step_accumulated",
    "check_seq_cls_loss",
    "lm_model",
    "micro_batch",
    "full_batch",
    "target_tokens",
    "cls_model",
    "cls_data",
    "full_batch_update",
    "trainer_update",
    "check_zero_bytes_per_rank",
    "mlp_shapes",
]
