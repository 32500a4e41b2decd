"""Lesson 06's checks pass the solution and fail realistic wrong answers with a helpful message.

The right answers are copied from the solution cells of solutions/06-profiling/06-profiling.ipynb (the notebook
itself is executed by the notebook tests); the grading references (autograders/references/lesson06.py, a second way
to write each answer) must pass too. Each wrong answer is a mistake a learner is likely to make; the test asserts
that the check names the case that exposes it and says what is wrong.
"""

from __future__ import annotations

import gc
import statistics
import time

import pytest
import torch
from check_helpers import assert_hidden, failure
from transformers import TrainingArguments

from autograders.kit import CheckFailed
from autograders.lesson06 import (
    QueueDevice,
    _e1_public_cases,
    check_find_peak,
    check_largest_micro_batch,
    check_measure_trainer,
    check_time_step,
    check_trade_off_args,
    expected_peak,
    max_calls,
    peak_trace,
)
from autograders.references import lesson06 as ref
from memlab.measure import CATEGORIES

pytestmark = pytest.mark.usefixtures("learner_mode")

# ---- the solutions (copied from the solution cells) ---------------------------------------------------------


def find_peak(events: list[dict]) -> dict:
    live = 0
    by_category = dict.fromkeys(CATEGORIES, 0)
    sizes = {}
    peak = None
    for i, event in enumerate(events):
        if event["action"] == "alloc":
            sizes[event["addr"]] = (event["size"], event["category"])
            live += event["size"]
            by_category[event["category"]] += event["size"]
            if peak is None or live > peak[1]:
                peak = (i, live, event["op"], dict(by_category))
        elif event["action"] == "free":
            size, category = sizes.pop(event["addr"])
            live -= size
            by_category[category] -= size
    index, peak_bytes, op, split = peak
    phase = next((e["name"] for e in events[index + 1 :] if e["action"] == "mark"), None)
    return {"phase": phase, "op": op, "bytes": peak_bytes, "by_category": split}


def time_step(fn, warmup: int = 2, repeats: int = 5, sync=None) -> tuple[float, float]:
    if sync is None:
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.mean(times), statistics.stdev(times) if repeats > 1 else 0.0


def largest_micro_batch(step, max_batch: int) -> int:
    low, high = 0, max_batch
    while low < high:
        mid = (low + high + 1) // 2
        try:
            step(mid)
            fits = True
        except torch.OutOfMemoryError:
            fits = False
        if fits:
            low = mid
        else:
            high = mid - 1
            if torch.cuda.is_available():  # the CPU frees by reference count at once
                gc.collect()
                torch.cuda.empty_cache()
    return low


FIELDS = TrainingArguments.__dataclass_fields__


def trade_off_args(setup: str, output_dir: str, max_steps: int, **changes) -> TrainingArguments:
    ckpt = "activation_checkpointing" if "activation_checkpointing" in FIELDS else "gradient_checkpointing"
    common = dict(
        output_dir=output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=16,
        learning_rate=5e-4,
        lr_scheduler_type="linear",
        warmup_steps=0.1,
        logging_steps=4,
        report_to="none",
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
        optim="adamw_torch",
    )
    if setup == "fp32":
        return TrainingArguments(**common)
    if setup == "bf16":
        return TrainingArguments(**common, bf16=True)
    if setup == "bf16+ckpt+8bit":
        return TrainingArguments(**{**common, "optim": "adamw_bnb_8bit"}, bf16=True, **{ckpt: True})
    raise ValueError(f"unknown set-up {setup!r}")


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
        (check_trade_off_args, trade_off_args, "✓ e4_trade_off_args: 4 cases passed"),
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
    assert out.startswith(line) and "What can be checked here passed" in out


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


def test_e3_under_strict_grading_the_cpu_stage_adds_drawn_cases(monkeypatch, capsys):
    """Where a GPU grades e3, its CPU stage has run drawn sizes first (here the GPU stage is switched off)."""
    import autograders.kit as kit
    import autograders.lesson06 as l06

    monkeypatch.setattr(kit, "_MODE", kit.STRICT)
    monkeypatch.setattr(kit, "_SEED", 5)
    monkeypatch.setattr(l06, "needs_hardware", lambda **kwargs: None)
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
