"""Cases drawn at grading time (issue: every case a check runs is public, since learners have autograders/).

Under strict grading (COURSE_GRADING=strict with a seed, as scripts/grade.py runs the kernel) every CPU check adds
cases drawn from the seed to its public ones. A right answer passes them; an answer hard-coded to the public cases
(it replays what the right answer returned for every public input, and anything else otherwise) passes a learner's
check but scores 0 when graded.
"""

from __future__ import annotations

import pytest
import test_autograders_lesson01 as l01
import test_autograders_lesson02 as l02
import test_autograders_lesson03 as l03
import test_autograders_lesson04 as l04
import test_autograders_lesson05 as l05
import test_autograders_lesson06 as l06
import test_autograders_lesson07 as l07
import test_autograders_lesson08 as l08

import autograders.kit as kit
from autograders.kit import CheckFailed

HAS_BNB = l01.HAS_BNB

#: (check, right answer); the hard-coded answer is built from the right one (all but the stateful exercises:
#: a learner cannot hard-code an optimizer's or a scaler's behaviour from its public cases any more than solve it)
CHECKS = [
    (l01.check_optimizer_state_bytes, l01.optimizer_state_bytes),
    pytest.param(l01.check_adamw8bit_state_bytes, l01.adamw8bit_state_bytes, marks=l01.needs_bnb),
    (l01.check_predict_live_bytes, l01.predict_live_bytes),
    (l01.check_kv_cache_bytes, l01.kv_cache_bytes),
    (l01.check_training_state_bytes, l01.training_state_bytes),
    (l02.check_decode, l02.decode),
    (l02.check_format_limits, l02.format_limits),
    (l02.check_round_to_bf16, l02.round_to_bf16),
    (l02.check_ulp, l02.ulp),
    (l03.check_underflow_fraction, l03.underflow_fraction),
    (l03.check_dynamic_loss_scaler, l03.DynamicLossScaler),
    (l03.check_amp_train_step, l03.amp_train_step),
    (l04.check_llama_layer_saved_bytes, l04.llama_layer_saved_bytes),
    # its drawn cases plan checkpointing over simulated stacks (30 to 100 s on 2 cores): the full tier
    pytest.param(l04.check_plan_checkpointing, l04.plan_checkpointing, marks=pytest.mark.slow),
    (l05.check_train_step_accumulated, l05.train_step_accumulated),
    (l05.check_seq_cls_loss, l05.seq_cls_loss),
    # its drawn cases are measured on 2 gloo processes launched by torchrun (about 10 s): the full tier
    pytest.param(l05.check_zero_bytes_per_rank, l05.zero_bytes_per_rank, marks=pytest.mark.slow),
    (l06.check_find_peak, l06.find_peak),
    (l06.check_time_step, l06.time_step),
    (l07.check_delayed_scaler, l07.DelayedScaler),
    (l07.check_quantize_mxfp8, l07.quantize_mxfp8),
    (l08.check_plan_for, l08.plan_for),
    (l08.check_add_lora, l08.add_lora),
    (l08.check_merged_weight, l08.merged_weight),
]
HARD_CODABLE = {
    "e2_adamw8bit_state_bytes",
    "e3_predict_live_bytes",
    "e4_kv_cache_bytes",
    "e5_training_state_bytes",
    "e1_decode",
    "e2_format_limits",
    "e3_round_to_bf16",
    "e4_ulp",
    "e1_underflow_fraction",
    "e1_llama_layer_saved_bytes",
    "e2_plan_checkpointing",
    "e3_zero_bytes_per_rank",
    "e1_find_peak",
    "e3_quantize_mxfp8",
    "e1_plan_for",
}


def _key(args, kwargs) -> str:
    """What a hard-coded answer can recognise its inputs by (tensors by their full contents)."""
    import torch

    def one(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", value.dtype, tuple(value.shape), value.detach().cpu().double().sum().item())
        if isinstance(value, (list, tuple)):
            return tuple(one(v) for v in value)
        if hasattr(value, "to_dict"):  # a transformers config
            return repr(sorted(value.to_dict().items()))
        return repr(value)

    return repr((one(list(args)), one(sorted(kwargs.items()))))


def hard_coded(check_fn, answer):
    """An answer that knows the public cases by heart: it replays the right answer's results for their inputs."""
    table = {}

    def recording(*args, **kwargs):
        result = answer(*args, **kwargs)
        table[_key(args, kwargs)] = result
        return result

    check_fn(recording)  # learner mode: the public cases only

    def replay(*args, **kwargs):
        key = _key(args, kwargs)
        if key in table:
            return table[key]
        return next(iter(table.values()))  # the right type, the wrong value

    return replay


def _count(line: str) -> int:
    return int(line.split(": ")[1].split()[0])


@pytest.mark.parametrize("check_fn, answer", CHECKS, ids=lambda v: getattr(v, "check_name", ""))
def test_a_right_answer_passes_the_drawn_cases_too(
    kit_context, check_fn, answer, monkeypatch, no_gpu, capsys
):
    kit_context(kit.LEARNER)
    check_fn(answer)
    public = _count(capsys.readouterr().out)
    kit_context(kit.STRICT, 20261123)
    assert check_fn(answer) is None
    assert _count(capsys.readouterr().out) > public


@pytest.mark.parametrize(
    "check_fn, answer",
    [c for c in CHECKS if getattr(c, "values", c)[0].check_name in HARD_CODABLE],
    ids=lambda v: getattr(v, "check_name", ""),
)
def test_an_answer_hard_coded_to_the_public_cases_scores_nothing_when_graded(
    kit_context, check_fn, answer, monkeypatch, no_gpu, capsys
):
    kit_context(kit.LEARNER)
    cheat = hard_coded(check_fn, answer)
    assert check_fn(cheat) is None  # a learner's own check cannot tell
    capsys.readouterr()
    kit_context(kit.STRICT, 7)
    with pytest.raises(CheckFailed, match="drawn at grading time"):
        check_fn(cheat)


def test_draws_depend_on_the_seed_and_the_check_and_nothing_else(kit_context, monkeypatch):
    kit_context(kit.STRICT, 1)
    first = kit.grading_rng("e4_ulp").random()
    assert kit.grading_rng("e4_ulp").random() == first  # reproducible: --jobs and shards grade alike
    assert kit.grading_rng("e1_decode").random() != first  # every check has its own stream
    kit_context(kit.current_context().mode, 2)
    assert kit.grading_rng("e4_ulp").random() != first  # another seed, other cases


def test_no_cases_are_drawn_for_a_learner(kit_context, monkeypatch):
    kit_context(kit.LEARNER)
    assert kit.grading_rng("e4_ulp") is None


def test_the_seed_is_read_only_under_strict_grading(monkeypatch):
    import importlib
    import os

    monkeypatch.setenv(kit.GRADING_ENV, "strict")
    monkeypatch.setenv(kit.SEED_ENV, "42")
    fresh = importlib.util.module_from_spec(importlib.util.find_spec("autograders.kit"))
    fresh.__spec__.loader.exec_module(fresh)
    assert fresh.grading_seed() == 42
    monkeypatch.setenv(kit.GRADING_ENV, "")
    fresh = importlib.util.module_from_spec(importlib.util.find_spec("autograders.kit"))
    fresh.__spec__.loader.exec_module(fresh)
    assert fresh.grading_seed() is None
    assert os.environ[kit.SEED_ENV] == "42"
