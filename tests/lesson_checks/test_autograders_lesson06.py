"""Lesson 06's checks pass the solution and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own (solutions/06-profiling/06-profiling.ipynb, loaded by
tests/solution_code.py; the notebook itself is executed by the notebook tests); the grading references (autograders/references/lesson06.py, a second way
to write each answer) must pass too. Each wrong answer is a mistake a learner is likely to make; the test asserts
that the check names the case that exposes it and says what is wrong.
"""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace

import pytest
import torch
from check_helpers import assert_hidden, failure
from solution_code import solution
from transformers import TrainingArguments

import autograders.kit as kit
import autograders.lesson06 as l06
from autograders.kit import CheckFailed
from autograders.lesson06 import (
    QueueDevice,
    _e1_public_cases,
    check_find_peak,
    check_largest_micro_batch,
    check_measure_trainer,
    check_time_step,
    check_trade_off_args,
    max_calls,
    peak_trace,
)
from autograders.references import lesson06 as ref
from autograders.references.lesson06 import expected_peak
from memlab.measure import CATEGORIES, measure_training_step

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    find_peak,
    time_step,
    largest_micro_batch,
    trade_off_args,
) = solution("06-profiling", "find_peak", "time_step", "largest_micro_batch", "trade_off_args")

pytestmark = pytest.mark.usefixtures("learner_mode")

FIELDS = TrainingArguments.__dataclass_fields__


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


# ---- right answers pass, stubs and undefined names fail -------------------------------------------------------

CHECKS = [
    check_find_peak,
    check_time_step,
    check_largest_micro_batch,
    check_trade_off_args,
    check_measure_trainer,
]
IDS = ["e1", "e2", "e3", "e4", "e5"]


@pytest.mark.parametrize(
    ("check_fn", "answer", "line"),
    [
        (check_find_peak, find_peak, "✓ e1_find_peak: 4 cases passed"),
        (check_find_peak, ref.find_peak, "✓ e1_find_peak: 4 cases passed"),
        (check_time_step, time_step, "✓ e2_time_step: 5 cases passed"),
        (check_time_step, ref.time_step, "✓ e2_time_step: 5 cases passed"),
        # e4 trains three set-ups with Trainer (about 20 s on 2 cores): the full tier
        pytest.param(
            check_trade_off_args,
            trade_off_args,
            "✓ e4_trade_off_args: 4 cases passed",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["e1", "e1-reference", "e2", "e2-reference", "e4"],
)
def test_right_answers_pass(check_fn, answer, line, capsys):
    assert check_fn(answer) is None
    assert capsys.readouterr().out.splitlines() == [line]


@pytest.mark.parametrize(
    ("check_fn", "answer", "line"),
    [
        (
            check_largest_micro_batch,
            largest_micro_batch,
            "e3_largest_micro_batch: NOT CHECKED HERE: needs a CUDA GPU",
        ),
        (
            check_largest_micro_batch,
            ref.largest_micro_batch,
            "e3_largest_micro_batch: NOT CHECKED HERE: needs a CUDA GPU",
        ),
    ],
    ids=["e3", "e3-reference"],
)
def test_right_answers_pass_what_a_cpu_can_check(check_fn, answer, line, capsys, no_gpu):
    assert check_fn(answer) is None
    out = capsys.readouterr().out
    assert out.startswith(line) and "What can be checked here passed" in " ".join(out.split())


NOT_WRITTEN = (
    "( case [^:]*: your function raised NotImplementedError: it is not written yet| `.*` is not written yet: "
)
NOT_WRITTEN += "it still raises NotImplementedError)\\.$"


@pytest.mark.parametrize("check_fn", CHECKS, ids=IDS)
def test_the_learner_stub_fails_as_not_written_yet(check_fn):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}:{NOT_WRITTEN}"):
        check_fn(stub)


@pytest.mark.parametrize("check_fn", CHECKS, ids=IDS)
def test_an_undefined_answer_fails(check_fn):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}: `.*` is not defined yet"):
        check_fn(None)


# ---- e1: find_peak ---------------------------------------------------------------------------------------------


def test_e1_the_tracker_event_log_replays_to_what_the_tracker_measured():
    """The check's expectation (what the tracker measured while the step ran) and a replay of its log agree, on
    every public case: the log is complete, ordered, and labelled with the final categories."""
    for name, build in _e1_public_cases():
        trace = peak_trace(*build())
        assert ref.find_peak(trace.events) == expected_peak(trace), name
        assert l06.stored()["find_peak"][name] == expected_peak(trace), (
            name
        )  # what the public cases compare with


def test_e1_the_frames_find_peak_runs_under_hold_no_trace(strict_mode, monkeypatch):
    """In the grading kernel (collect mode, no grading references), a find_peak that walks the frames it is called
    under finds nothing there that holds or computes its case's answer: the tracker's trace of the step (whose
    peak_bytes and peak_by_category are the answer) is gone before the learner's function runs."""
    import sys

    from check_helpers import found_in_frames

    def missing(*args, **kwargs):
        raise RuntimeError("the grading kernel's copy of the kit has no autograders/references/")

    found = []

    def walking(events):
        answer = ref.find_peak(events)

        def is_expected(value):
            if isinstance(value, bool):
                return False
            return value in (answer, answer["bytes"], answer["by_category"])

        found.extend(found_in_frames(is_expected, sys._getframe(1)))
        return answer

    monkeypatch.setattr(kit, "references", missing)
    transcript = kit.collect(check_find_peak.check, (walking,), {})
    assert all(r.failed is None for r in transcript.records)
    assert sum("drawn at grading time" in r.label for r in transcript.records) == 3
    assert found == []


def test_e1_ignoring_frees_fails():
    def no_frees(events):
        return find_peak([e for e in events if e["action"] != "free"])

    message = failure(check_find_peak, no_frees)
    assert '"bytes" (live bytes at the peak) is too high' in message and "case MLP" in message


def test_e1_the_op_must_be_the_one_at_the_peak():
    def next_op(events):  # the operator of the event after the peak's
        result = find_peak(events)
        at = next(i for i, e in enumerate(events) if e.get("op") == result["op"] and e["action"] == "alloc")
        result["op"] = next(e["op"] for e in events[at + 1 :] if "op" in e and e["op"] != result["op"])
        return result

    message = failure(check_find_peak, next_op)
    assert '"op" should be the operator during which live bytes first reached the peak' in message


def test_e1_the_mark_before_the_peak_is_not_its_phase():
    def previous_mark(events):
        result = find_peak(events)
        marks = [e["name"] for e in events if e["action"] == "mark"]
        index = marks.index(result["phase"]) if result["phase"] in marks else 0
        result["phase"] = marks[index - 1] if index > 0 else "start"
        return result

    message = failure(check_find_peak, previous_mark)
    assert '"phase" should be the name of the first mark after the peak' in message


def test_e1_the_split_at_the_end_is_not_the_split_at_the_peak():
    def split_at_end(events):
        result = find_peak(events)
        live = {}
        for e in events:
            if e["action"] == "alloc":
                live[e["addr"]] = (e["size"], e["category"])
            elif e["action"] == "free":
                live.pop(e["addr"])
        result["by_category"] = {c: sum(s for s, cat in live.values() if cat == c) for c in CATEGORIES}
        return result

    message = failure(check_find_peak, split_at_end)
    assert '"by_category"' in message and "you got" in message


def test_e1_a_missing_key_is_named():
    def no_split(events):
        result = find_peak(events)
        del result["by_category"]
        return result

    assert "missing the key(s) ['by_category']" in failure(check_find_peak, no_split)


def test_e1_the_message_does_not_give_the_peak_away():
    def off_by_one(events):
        result = find_peak(events)
        result["bytes"] += 1
        return result

    message = failure(check_find_peak, off_by_one)
    name, build = _e1_public_cases()[0]
    assert_hidden(message, expected_peak(peak_trace(*build()))["bytes"])


# ---- e2: time_step ---------------------------------------------------------------------------------------------


def test_e2_the_queue_device_runs_work_after_launch_returns():
    device = QueueDevice()
    start = time.perf_counter()
    device.launch(0.05)
    launched = time.perf_counter() - start
    device.synchronize()
    done = time.perf_counter() - start
    device.close()
    assert launched < 0.01 and done >= 0.05


def test_e2_a_right_answer_passes_on_a_loaded_machine(no_gpu, monkeypatch, capsys):
    """Sleeps that overshoot by up to 40 ms (a busy machine, e.g. a grader with many jobs) cost a right answer
    nothing: the check expects the durations the calls really took, which it times itself."""
    import random

    real_sleep, rng = time.sleep, random.Random(3)
    monkeypatch.setattr(time, "sleep", lambda seconds: real_sleep(seconds + rng.uniform(0.0, 0.04)))
    assert check_time_step(time_step) is None
    assert "✓ e2_time_step" in capsys.readouterr().out


def test_e2_timing_the_warm_up_fails(no_gpu):
    def with_warmup(fn, warmup=2, repeats=5, sync=None):
        return time_step(fn, warmup=0, repeats=warmup + repeats, sync=sync)

    message = failure(check_time_step, with_warmup)
    assert "case slow first calls" in message and "the mean time per call (s) is too high" in message


def test_e2_not_synchronising_fails(no_gpu):
    def no_sync(fn, warmup=2, repeats=5, sync=None):
        return time_step(fn, warmup, repeats, sync=lambda: None)

    message = failure(check_time_step, no_sync)
    assert "case asynchronous device" in message and "the mean time per call (s) is too low" in message


def test_e2_forgetting_the_sync_after_the_warm_up_fails(no_gpu):
    def sync_in_loop_only(fn, warmup=2, repeats=5, sync=None):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.mean(times), statistics.stdev(times)

    message = failure(check_time_step, sync_in_loop_only)
    assert "case asynchronous device, warm-up work still queued" in message
    assert "the mean time per call (s) is too high" in message


def test_e2_a_wrong_number_of_calls_fails(no_gpu):
    def one_extra(fn, warmup=2, repeats=5, sync=None):
        fn()
        return time_step(fn, warmup, repeats, sync)

    message = failure(check_time_step, one_extra)
    assert "the number of calls of fn" in message


def test_e2_returning_the_total_not_the_mean_fails(no_gpu):
    def total(fn, warmup=2, repeats=5, sync=None):
        mean, std = time_step(fn, warmup, repeats, sync)
        return mean * repeats, std

    assert "the mean time per call (s) is too high" in failure(check_time_step, total)


def test_e2_no_spread_fails(no_gpu):
    def no_std(fn, warmup=2, repeats=5, sync=None):
        return time_step(fn, warmup, repeats, sync)[0], 0.0

    message = failure(check_time_step, no_std)
    assert "case alternating 10 ms / 30 ms" in message and "standard deviation" in message


# ---- e3: largest_micro_batch ----------------------------------------------------------------------------------


def test_e3_under_strict_grading_the_cpu_stage_adds_drawn_cases(kit_context, monkeypatch, capsys):
    """Where a GPU grades e3, its CPU stage has run drawn sizes first (here the GPU stage is switched off)."""
    import autograders.kit as kit
    import autograders.lesson06 as l06

    kit_context(kit.STRICT, 5)
    monkeypatch.setattr(kit, "needs_hardware", lambda **kwargs: None)
    monkeypatch.setattr(l06, "run_cuda_oom_case", lambda fn: None)
    assert check_largest_micro_batch(largest_micro_batch) is None
    assert capsys.readouterr().out.strip() == "✓ e3_largest_micro_batch: 9 cases passed"

    def hard_coded(step, max_batch):
        return {64: 13, 32: 0, 48: 48, 100: 1}.get(max_batch, 1)

    with pytest.raises(CheckFailed, match="drawn at grading time"):
        check_largest_micro_batch(hard_coded)


def test_e3_the_call_budget_is_a_bisection_plus_two():
    assert max_calls(64) == 7 + 2 and max_calls(1) == 1 + 2


def test_e3_a_linear_scan_fails(no_gpu):
    def scan(step, max_batch):
        best = 0
        for b in range(1, max_batch + 1):
            try:
                step(b)
                best = b
            except torch.OutOfMemoryError:
                break
        return best

    message = failure(check_largest_micro_batch, scan)
    assert "search" in message and "do not scan" in message


def test_e3_catching_every_error_fails(no_gpu):
    def catch_all(step, max_batch):
        low, high = 0, max_batch
        while low < high:
            mid = (low + high + 1) // 2
            try:
                step(mid)
                low = mid
            except Exception:
                high = mid - 1
        return low

    assert "the ValueError was swallowed" in failure(check_largest_micro_batch, catch_all)


def test_e3_an_off_by_one_search_fails_without_the_answer(no_gpu):
    def lower_mid(step, max_batch):
        low, high = 0, max_batch
        while low < high:
            mid = (low + high) // 2  # never tries high: stops one short
            try:
                step(mid)
                low = mid + 1 if mid < high else mid
            except torch.OutOfMemoryError:
                high = mid - 1
        return max(0, low - 1)

    message = failure(check_largest_micro_batch, lower_mid)
    assert "the largest micro-batch that fits is" in message


def test_e3_not_catching_the_out_of_memory_error_fails(no_gpu):
    def no_catch(step, max_batch):
        step(max_batch)
        return max_batch

    message = failure(check_largest_micro_batch, no_catch)
    assert "raised OutOfMemoryError" in message


# ---- e4: trade_off_args ----------------------------------------------------------------------------------------


# e4 runs Trainer on three set-ups (10 to 40 s on 2 cores): the full tier; the fast tier keeps e4's wrong answers
@pytest.mark.slow
def test_e4_leaves_no_bitsandbytes_override_behind():
    """The check's 8-bit Trainer run must not change a later bitsandbytes optimizer in the same process (Trainer's
    embedding override in GlobalOptimManager applies by parameter position; lesson 01's check would then see 32-bit
    state for its first parameter)."""
    bnb = pytest.importorskip("bitsandbytes")
    check_trade_off_args(trade_off_args)
    manager = bnb.optim.GlobalOptimManager.get_instance()
    assert manager.module_weight_config_triple == [] and manager.index2config == {}
    p = torch.nn.Parameter(torch.randn(64, 128))
    optimizer = bnb.optim.AdamW8bit([p])
    p.grad = torch.randn_like(p)
    optimizer.step()
    assert optimizer.state[p]["state1"].dtype == torch.uint8


def test_e4_fp16_instead_of_bf16_fails():
    def fp16(setup, output_dir, max_steps):
        args = trade_off_args("fp32", output_dir, max_steps)
        if setup == "fp32":
            return args
        if setup not in ("bf16", "bf16+ckpt+8bit"):
            raise ValueError(setup)
        extra = dict(optim="adamw_bnb_8bit", activation_checkpointing=True) if "ckpt" in setup else {}
        return TrainingArguments(**{**_init_kwargs(args), **extra, "fp16": True})

    message = failure(check_trade_off_args, fp16)
    assert "fp16" in message


def _init_kwargs(args) -> dict:
    import dataclasses

    return {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(args)
        if f.init and not f.name.startswith("_")
    }


def test_e4_a_changed_learning_rate_is_named():
    def other_lr(setup, output_dir, max_steps):
        args = trade_off_args(setup, output_dir, max_steps)
        if setup == "bf16":
            args.learning_rate = 1e-3
        return args

    message = failure(check_trade_off_args, other_lr)
    assert "case bf16" in message and "['learning_rate']" in message


# e4 runs Trainer on three set-ups (10 to 40 s on 2 cores): the full tier; the fast tier keeps e4's wrong answers
@pytest.mark.slow
def test_e4_forgetting_checkpointing_fails():
    def no_ckpt(setup, output_dir, max_steps):
        if setup == "bf16+ckpt+8bit":
            args = trade_off_args("bf16", output_dir, max_steps)
            args.optim = "adamw_bnb_8bit"
            return args
        return trade_off_args(setup, output_dir, max_steps)

    message = failure(check_trade_off_args, no_ckpt)
    assert "case bf16+ckpt+8bit" in message and "runs its forward twice per step" in message


def test_e4_a_32_bit_optimizer_in_the_third_set_up_fails():
    def adamw_32(setup, output_dir, max_steps):
        args = trade_off_args(setup, output_dir, max_steps)
        args.optim = "adamw_torch"
        return args

    message = failure(check_trade_off_args, adamw_32)
    assert "should be bitsandbytes' 8-bit AdamW" in message


def test_e4_an_unknown_set_up_must_raise():
    def lenient(setup, output_dir, max_steps):
        return trade_off_args(
            setup if setup in ("fp32", "bf16", "bf16+ckpt+8bit") else "fp32", output_dir, max_steps
        )

    assert "should raise ValueError" in failure(check_trade_off_args, lenient)


# ---- e5: measure_trainer ---------------------------------------------------------------------------------------


def test_e5_is_not_checked_without_a_gpu(capsys, no_gpu):
    assert check_measure_trainer(ref.measure_trainer) is None
    assert (
        capsys.readouterr().out.strip()
        == "e5_measure_trainer: NOT CHECKED HERE: needs a CUDA GPU, found no CUDA GPU."
    )


# ---- under grading: collected in the kernel, judged outside it (autograders/kit.py) --------------------------------


def _no_gpu_stage(monkeypatch):
    """Switch the GPU stages of e3 off (as the CPU-stage test above does): the CPU cases are what is judged."""
    monkeypatch.setattr(kit, "needs_hardware", lambda **kwargs: None)
    monkeypatch.setattr(l06, "run_cuda_oom_case", lambda fn: None)


def _message(check_fn, answer) -> str:
    with pytest.raises(CheckFailed) as info:
        check_fn(answer)
    return str(info.value)


def one_extra_call(fn, warmup=2, repeats=5, sync=None):
    fn()
    return time_step(fn, warmup, repeats, sync)


def linear_scan(step, max_batch):
    best = 0
    for b in range(1, max_batch + 1):
        try:
            step(b)
            best = b
        except torch.OutOfMemoryError:
            break
    return best


def no_frees(events):
    return find_peak([e for e in events if e["action"] != "free"])


def other_learning_rate(setup, output_dir, max_steps):
    args = trade_off_args(setup, output_dir, max_steps)
    if setup == "bf16":
        args.learning_rate = 1e-3
    return args


@pytest.mark.parametrize(
    ("check_fn", "answer", "line"),
    [
        (check_find_peak, find_peak, "✓ e1_find_peak: 7 cases passed"),
        (check_time_step, time_step, "✓ e2_time_step: 8 cases passed"),
        (check_largest_micro_batch, largest_micro_batch, "✓ e3_largest_micro_batch: 9 cases passed"),
        # e4 trains three set-ups with Trainer, and the judge again (over 10 s on 2 cores): the full tier
        pytest.param(
            check_trade_off_args,
            trade_off_args,
            "✓ e4_trade_off_args: 4 cases passed",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["e1", "e2", "e3", "e4"],
)
def test_right_answers_pass_when_collected_then_judged(
    check_fn, answer, line, strict_mode, no_gpu, monkeypatch, capsys
):
    """The drawn cases included; e3's GPU stage is switched off here (see the fakes below for the GPU stages)."""
    _no_gpu_stage(monkeypatch)
    assert check_fn(answer) is None
    assert capsys.readouterr().out.splitlines() == [line]


@pytest.mark.parametrize(
    ("check_fn", "answer", "words"),
    [
        (check_find_peak, no_frees, '"bytes" (live bytes at the peak) is too high'),
        (check_time_step, one_extra_call, "the number of calls of fn"),
        (check_largest_micro_batch, linear_scan, "do not scan"),
        (check_trade_off_args, other_learning_rate, "['learning_rate']"),
        (check_measure_trainer, stub, "not written yet"),
        (check_measure_trainer, None, "is not defined yet"),
    ],
    ids=["e1", "e2", "e3", "e4", "e5-stub", "e5-undefined"],
)
def test_wrong_answers_fail_when_judged_as_a_learner_is_told(
    kit_context, check_fn, answer, words, no_gpu, monkeypatch
):
    """Each wrong answer fails on a public case, before the GPU stages: the judge says what the notebook says."""
    told = _message(check_fn, answer)
    kit_context(kit.STRICT, 20261123)
    judged = _message(check_fn, answer)
    assert judged == told and words in judged


# e4 runs Trainer on three set-ups (10 to 40 s on 2 cores): the full tier; the fast tier keeps e4's wrong answers
@pytest.mark.slow
def test_e4_a_trainer_that_is_not_checkpointed_fails_in_the_judge(strict_mode):
    """What a set-up does is seen by the judge's own Trainer run, with arguments made again from the data."""

    def no_ckpt(setup, output_dir, max_steps):
        if setup == "bf16+ckpt+8bit":
            args = trade_off_args("bf16", output_dir, max_steps)
            args.optim = "adamw_bnb_8bit"
            return args
        return trade_off_args(setup, output_dir, max_steps)

    message = failure(check_trade_off_args, no_ckpt)
    assert message == (
        "e4_trade_off_args: case bf16+ckpt+8bit: with activation checkpointing each decoder layer runs its forward "
        "twice per step (once more in backward); it ran 1 time(s)."
    )


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (
            lambda setup, output_dir, max_steps: trade_off_args(
                setup if setup in ("fp32", "bf16", "bf16+ckpt+8bit") else "fp32", output_dir, max_steps
            ),
            'e4_trade_off_args: case an unknown set-up ("fp16"): should raise ValueError; it returned.',
        ),
        (
            lambda setup, output_dir, max_steps: (
                trade_off_args(setup, output_dir, max_steps)
                if setup in ("fp32", "bf16", "bf16+ckpt+8bit")
                else {}[setup]
            ),
            "e4_trade_off_args: case an unknown set-up: your function raised KeyError: 'fp16'",
        ),
    ],
    ids=["returned", "another-error"],
)
def test_e4_the_unknown_set_up_is_judged_by_what_was_raised(kit_context, answer, words, no_gpu, monkeypatch):
    told = _message(check_trade_off_args, answer)
    kit_context(kit.STRICT, 20261123)
    assert _message(check_trade_off_args, answer) == told
    assert told.startswith(words)


def test_e4_the_arguments_travel_as_data_and_are_made_again_alike(tmp_path):
    import dataclasses

    from autograders import wire
    from autograders.lesson06 import args_data, rebuilt_args

    for setup in ("fp32", "bf16", "bf16+ckpt+8bit"):
        args = trade_off_args(setup, str(tmp_path), 2)
        data = wire.roundtrip(args_data(args, setup))
        assert data["not_plain"] == [] and data["fields"] == args.to_dict()
        again = rebuilt_args(data)
        assert type(again) is TrainingArguments
        fields = [f.name for f in dataclasses.fields(args) if not f.name.endswith("_token")]
        assert {f: getattr(again, f) for f in fields} == {f: getattr(args, f) for f in fields}


def test_the_grading_kernel_computes_no_expected_value(strict_mode, no_gpu, monkeypatch):
    """Collected as the grading kernel does: every case's learner steps are recorded, and no reference step ran (no
    tracker expectation, no cost of a timed case, no Trainer run, no GPU peak, no grading reference)."""
    ran = []

    reference = kit.reference

    def spy(compute):
        return reference(lambda: ran.append(compute) or compute())

    def forbidden(*args, **kwargs):
        raise AssertionError("an expected value was computed in the grading kernel")

    monkeypatch.setattr(kit, "reference", spy)
    monkeypatch.setattr(kit, "references", forbidden)
    for name in ("_expected_peak", "stored", "observe_setup", "rebuilt_args", "_reference_train_rise"):
        monkeypatch.setattr(l06, name, forbidden)
    monkeypatch.setattr(l06.TimedCase, "expected", forbidden)
    written = {
        check_find_peak: ("`find_peak` is written", find_peak),
        check_time_step: ("`time_step` is written", time_step),
        check_largest_micro_batch: ("`largest_micro_batch` is written", largest_micro_batch),
        check_trade_off_args: ("`trade_off_args` is written", trade_off_args),
        check_measure_trainer: ("`measure_trainer` is written", ref.measure_trainer),
    }
    labels = {}
    for check_fn, (first, answer) in written.items():
        transcript = kit.collect(check_fn.check, (answer,), {})
        assert all(r.failed is None for r in transcript.records), check_fn.check_name
        labels[check_fn.check_name] = [r.label for r in transcript.records]
        assert labels[check_fn.check_name][0] == first
    assert ran == []
    e1_drawn = [name for name, _ in kit.drawn_cases("e1_find_peak", 3, l06._e1_drawn_case)]
    assert labels["e1_find_peak"][1:] == [name for name, _ in _e1_public_cases()] + e1_drawn
    e2_cases = l06._e2_public_cases() + kit.drawn_cases("e2_time_step", 3, l06._e2_drawn_case)
    observed = [label for c in e2_cases for label in (c.name, f"{c.name}: what the check observed")]
    assert labels["e2_time_step"][1:] == observed + ["a CUDA GPU for the timing of real work"]
    e3_cases = l06._e3_public_cases() + kit.drawn_cases("e3_largest_micro_batch", 3, l06._e3_drawn_case)
    observed = [label for c in e3_cases for label in (c[0], f"{c[0]}: what the check observed")]
    assert labels["e3_largest_micro_batch"][1:] == observed + [
        "a step that fails with another error",
        "needs (True, None, None, ())",
    ]
    assert labels["e4_trade_off_args"][1:] == [
        "fp32",
        "bf16",
        "bf16+ckpt+8bit",
        "an unknown set-up",
        "needs (False, None, None, ('bitsandbytes',))",
    ]
    assert labels["e5_measure_trainer"][1:] == ["needs (True, None, None, ())"]


# ---- the GPU stages, collected then judged on this machine with stand-ins for CUDA ---------------------------------


class HostEvent:
    """torch.cuda.Event read from the host clock."""

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.at - self.at) * 1000


class SleepyMatrix:
    """A "bf16 8192 x 8192 matrix" whose product takes 25 ms of the host: long enough that a busy machine's late
    wake-ups (a few ms each) stay well inside the check's 30% (with 5 ms, one CI run under load measured 80% over)."""

    def __matmul__(self, other):
        time.sleep(0.025)
        return self


class CudaTimingTorch:
    """torch as e2's GPU stage sees it here: CUDA is there, its events read the host clock, its matmuls sleep."""

    def __init__(self):
        self.cuda = SimpleNamespace(is_available=lambda: True, synchronize=lambda: None, Event=HostEvent)

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def randn(*shape, device=None, dtype=None):
        return SleepyMatrix()


def test_e2_the_gpu_stage_is_collected_then_judged(strict_mode, monkeypatch, capsys):
    monkeypatch.setattr(l06, "torch", CudaTimingTorch())
    transcript = kit.collect(check_time_step.check, (time_step,), {})
    assert [r.label for r in transcript.records][-3:] == [
        "a CUDA GPU for the timing of real work",
        "CUDA matmuls, sync=None",
        "CUDA matmuls, sync=None: what the check observed",
    ]
    assert check_time_step(time_step) is None
    assert capsys.readouterr().out.splitlines() == ["✓ e2_time_step: 9 cases passed"]


class FakeGpuMemory:
    """The allocator's counters as e3's GPU stage reads them, and steps whose activations count in them: a step above
    `fits` runs out of memory with its activations still referenced by its frame (so by the exception's traceback)."""

    def __init__(self, fits: int = 37):
        self.allocated, self.fits = 0, fits

    def install(self, monkeypatch):
        for name, fn in {
            "synchronize": lambda: None,
            "empty_cache": lambda: None,
            "get_device_properties": lambda index=0: SimpleNamespace(total_memory=80 * 1024**3),
            "memory_allocated": lambda: self.allocated,
            "memory_reserved": lambda: 0,
            "set_per_process_memory_fraction": lambda fraction: None,
        }.items():
            monkeypatch.setattr(torch.cuda, name, fn)
        memory = self

        class Activations:
            def __init__(self, n):
                self.n = n
                memory.allocated += n

            def __del__(self):
                memory.allocated -= self.n

        class Steps:
            def __call__(self, batch):
                activations = Activations(batch * 64 * 2**20)  # noqa: F841 - held by this frame
                if batch > memory.fits:
                    raise torch.OutOfMemoryError(f"CUDA out of memory (simulated, micro-batch {batch})")

        monkeypatch.setattr(l06, "CudaSteps", Steps)
        monkeypatch.setattr(kit, "needs_hardware", lambda **kwargs: None)


def test_e3_the_gpu_stage_is_collected_then_judged(strict_mode, monkeypatch, capsys):
    FakeGpuMemory().install(monkeypatch)
    assert check_largest_micro_batch(largest_micro_batch) is None
    assert capsys.readouterr().out.splitlines() == ["✓ e3_largest_micro_batch: 9 cases passed"]


def test_e3_an_out_of_memory_error_kept_alive_fails_in_the_judge_as_in_the_notebook(kit_context, monkeypatch):
    memory = FakeGpuMemory()
    memory.install(monkeypatch)
    kept = []

    def keeps_the_error(step, max_batch):
        low, high = 0, max_batch
        while low < high:
            mid = (low + high + 1) // 2
            try:
                step(mid)
                low = mid
            except torch.OutOfMemoryError as error:
                kept.append(error)  # its traceback holds the failed step's frame
                high = mid - 1
        return low

    told = _message(check_largest_micro_batch, keeps_the_error)
    kept.clear()
    kit_context(kit.STRICT, 20261123)
    judged = _message(check_largest_micro_batch, keeps_the_error)
    kept.clear()
    assert judged == told
    assert (
        "case real CUDA steps, 1024 MiB of headroom" in told
        and "MiB allocated by the steps are still held" in told
    )


FAKE_PEAK = 3 * 1024**3
FAKE_HELD = 512 * 1024**2  # what the process holds as train() starts: the model, in a fresh process


class HostClock:
    """The check's synchronised step clock, on the host."""

    def __init__(self):
        self.times = []

    def on_step_begin(self, *args, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, *args, **kwargs):
        self.times.append(time.perf_counter() - self.start)


class FakeTrainer:
    """A Trainer of 10 steps on the host: 3 slow ones (warm-up), then 7 of 10 ms, each between the callbacks."""

    def __init__(self, folder=None):
        self.callback_handler = SimpleNamespace(callbacks=[])

    def train(self):
        for i in range(10):
            for callback in self.callback_handler.callbacks:
                callback.on_step_begin(None, None, None)
            time.sleep(0.05 if i < 3 else 0.01)
            for callback in self.callback_handler.callbacks:
                callback.on_step_end(None, None, None)


def _fake_gpu_trainer(monkeypatch):
    monkeypatch.setattr(kit, "needs_hardware", lambda **kwargs: None)
    for name, value in {
        "_fresh_gpu": lambda: None,
        "_leave_a_peak_behind": lambda: None,
        "gpu_trainer": FakeTrainer,
        "_step_timer": HostClock,
        "_reference_train_rise": lambda: FAKE_PEAK - FAKE_HELD,
        "_allocated_now": lambda: FAKE_HELD,
    }.items():
        monkeypatch.setattr(l06, name, value)


def measure_on_host(trainer, warmup=3, extra_peak=0):
    clock = HostClock()
    trainer.callback_handler.callbacks.insert(0, clock)
    trainer.train()
    return {"peak_bytes": FAKE_PEAK + extra_peak, "step_seconds": statistics.mean(clock.times[warmup:])}


def test_e5_is_collected_then_judged(strict_mode, monkeypatch, capsys):
    _fake_gpu_trainer(monkeypatch)
    assert check_measure_trainer(measure_on_host) is None
    assert capsys.readouterr().out.splitlines() == ["✓ e5_measure_trainer: 1 case passed"]


def test_e5_expects_the_peak_of_the_process_it_measures(strict_mode, monkeypatch, capsys):
    """A kernel (or a rerun) that holds the tensors of the lesson's earlier cells: its peak of train() includes them,
    and a right answer still passes. On an H200 the check expected its own fresh process's peak (3.18 GB) where the
    rerun's was 5.95 GB, and the model solution lost its point."""
    _fake_gpu_trainer(monkeypatch)
    earlier_cells = 2560 * 1024**2
    monkeypatch.setattr(l06, "_allocated_now", lambda: FAKE_HELD + earlier_cells)
    assert (
        check_measure_trainer(lambda t, warmup=3: measure_on_host(t, warmup, extra_peak=earlier_cells))
        is None
    )
    assert capsys.readouterr().out.splitlines() == ["✓ e5_measure_trainer: 1 case passed"]
    told = _message(
        check_measure_trainer, measure_on_host
    )  # the fresh process's peak, in this process: short
    assert f"(the peak of train() only) = {FAKE_PEAK + earlier_cells:,}" in told


def test_e5_a_peak_from_before_train_fails_in_the_judge_as_in_the_notebook(kit_context, monkeypatch):
    _fake_gpu_trainer(monkeypatch)

    def with_the_old_peak(trainer, warmup=3):
        return measure_on_host(trainer, warmup, extra_peak=2 * 1024**3)

    told = _message(check_measure_trainer, with_the_old_peak)
    kit_context(kit.STRICT, 20261123)
    assert _message(check_measure_trainer, with_the_old_peak) == told
    assert 'expected "peak_bytes" (the peak of train() only) = 3,221,225,472' in told


def test_e4_the_check_s_own_run_never_takes_what_would_cost_the_grader():
    """The judge runs a Trainer with the learner's arguments, outside any sandbox: `dataloader_num_workers=32` forked 32
    processes of it (12 GiB, 30 minutes). What the check never takes from them (lesson06.JUDGE_RUN) is its own."""
    from transformers import TrainingArguments

    from autograders.lesson06 import JUDGE_RUN, _run_args, args_data, rebuilt_args

    learners = TrainingArguments(
        output_dir="unused",
        dataloader_num_workers=32,
        dataloader_persistent_workers=True,
        dataloader_prefetch_factor=64,
        torch_compile=True,
        per_device_train_batch_size=100_000,
        gradient_accumulation_steps=10**6,
        bf16=True,
        use_cpu=True,
        torch_compile_backend="inductor",
    )
    run = _run_args(rebuilt_args(args_data(learners, "bf16")), "judge-folder", 2)
    taken = {
        key: getattr(run, key) for key in JUDGE_RUN if key != "accelerator_config"
    }  # None becomes the default
    assert (
        taken == {k: v for k, v in JUDGE_RUN.items() if k != "accelerator_config"} and not run.torch_compile
    )
    assert run.per_device_train_batch_size == 64 and run.gradient_accumulation_steps == 8
    assert run.bf16 and run.output_dir == "judge-folder" and run.max_steps == 2  # the set-up is the learner's


# ---- the lesson's chunked loss (§5, "The loss and the logits"): the model's own loss, by chunks -------------------


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_the_chunked_loss_is_the_cross_entropy_with_its_gradients(chunk):
    """Any chunk size, one that does not divide the tokens, and labels ignored (-100) included."""
    (chunked_cross_entropy,) = solution("06-profiling", "chunked_cross_entropy")
    torch.manual_seed(0)
    hidden = torch.randn(3, 17, 8, requires_grad=True)
    weight = torch.randn(50, 8, requires_grad=True)
    labels = torch.randint(0, 50, (3, 17))
    labels[0, 5:9] = -100
    expected = torch.nn.functional.cross_entropy(
        (hidden[:, :-1] @ weight.T).reshape(-1, 50), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    want = torch.autograd.grad(expected, (hidden, weight))
    got = chunked_cross_entropy(hidden, weight, labels, chunk)
    grads = torch.autograd.grad(got, (hidden, weight))
    torch.testing.assert_close(got, expected)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w)


def test_the_chunked_loss_keeps_one_chunk_of_logits_alive():
    """What the lesson measures, at a size a test affords: the step's peak with the loss by chunks is below the
    model's own by more than one fp32 copy of the logits (three of batch x sequence x vocabulary are alive at the
    log-softmax's backward; a chunk's remain), and the loss is the model's own."""
    (chunked_loss,) = solution("06-profiling", "chunked_loss")
    from memlab.models import build_model, tiny_llama_config

    torch.manual_seed(0)
    model = build_model(tiny_llama_config(vocab_size=8000), device="cpu")
    ids = torch.randint(3, 8000, (2, 64))
    batch = {"input_ids": ids, "labels": ids}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    own = measure_training_step(model, batch, optimizer)
    chunked = measure_training_step(model, batch, optimizer, loss_fn=lambda m, b: chunked_loss(m, b, 16))
    logits = 2 * 64 * 8000 * 4  # one fp32 copy
    assert own.peak_bytes - chunked.peak_bytes > logits, (own.peak_bytes, chunked.peak_bytes, logits)
    torch.testing.assert_close(chunked_loss(model, batch, 16), model(**batch).loss)
