"""Checks for lesson 06 — memory profiling.

No check holds an answer. Each runs in the steps of autograders/kit.py. What the learner's code returned, and what
the check observed of that call in the same process (how many steps the search ran, the memory left held, the
check's own clock around the call: CUDA events, a timing callback), are taken in learner steps, as plain data. The
expected values (what the tracker measured, the cost a timed case was built with, the threshold of a simulated
out-of-memory error, what a real Trainer does with the learner's arguments, the peak of the check's own GPU run) are
reference steps, so under grading only the judge has them. `time_step`, `largest_micro_batch` and `measure_trainer`
measure or probe the learner's code (`rerun=True`): under grading they are collected again in a fresh process.

- `find_peak` (Exercise 6.1) replays an event log of the tracker (`MemoryTrace.events`) from training steps the check
  runs itself; the expected answer is what the tracker measured while the step ran (`peak_bytes`,
  `peak_by_category`, the operator at the top of `timeline`), not a replay of the log: stored for the public steps
  (autograders/data/lesson06.json, scripts/make_check_data.py), read from the judge's own trace of a drawn one by the
  grading reference (autograders/references/lesson06.py, `expected_peak`). The trace itself is dropped before the
  learner's function runs: only its event log is kept.
- `time_step` (Exercise 6.2) is driven with functions whose true cost the check knows: they sleep, or they queue
  work on a simulated asynchronous device (`QueueDevice`: a worker thread that runs the queued work while the caller
  goes on, as a CUDA stream does) and are timed with that device's `synchronize`: that checks the synchronisation on
  any machine, so the exercise is graded on a CPU. Where CUDA is available, a real queue of matmuls is timed as well
  (with `sync=None`, which must mean `torch.cuda.synchronize`) and compared with CUDA events.
- `largest_micro_batch` (Exercise 6.3): the CPU stage gives it steps that raise `torch.OutOfMemoryError` above a
  batch size the check chose; the GPU stage caps the process's memory and lets real steps run out of it, then checks
  that the answer fits, that one more does not, and that nothing the failed steps allocated is still held.
- `trade_off_args` (Exercise 6.4): see below. `measure_trainer` (Exercise 6.5, GPU only): the check trains its own bf16
  classifier once measured by itself (the allocator's peak over `train()`), then, after leaving a 2 GiB peak behind,
  once through the learner's function, with the check's own synchronised clock inserted first among the callbacks.
- `trade_off_args` (Exercise 6.4): the learner's `TrainingArguments` (taken as data, `to_dict()`, and made again from
  it in the reference step) are run in a real `transformers.Trainer` on the check's own model and data, and what each set-up must do is observed: the dtype a Linear layer computes in, how
  often a decoder layer runs its forward per step, the optimizer and the dtype of its state.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import math
import numbers
import queue
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import nn

from autograders import kit, wire
from autograders.kit import _
from memlab.measure import CATEGORIES, measure_training_step
from memlab.models import build_model, mlp, tiny_llama_config

MiB = 1024**2
DATA = Path(__file__).resolve().parent / "data" / "lesson06.json"


@functools.cache
def stored() -> dict:
    """The expected values of the public cases (scripts/make_check_data.py, from autograders/references/)."""
    return kit.read_only(json.loads(DATA.read_text()))


def observed_call(label: str, run):
    """`run()` calls the learner's function with what the check made for it (a step, a clock, a simulated device) and
    returns `(what the function returned, what the check observed of the call)`, both taken in the same process
    (learner steps, autograders/kit.py): the function's result is the step `label`, refused as any result is if it
    is not plain data; the observations (plain data too) follow as a second step."""
    side = {}

    def result():
        value, side["observed"] = run()
        return value

    value = kit.learner(label, result)
    return value, kit.learner(
        kit.Case("{case}: what the check observed", case=label), lambda: side["observed"]
    )


# ---- e1: find_peak -----------------------------------------------------------------------------------------------


def _llama_step(batch: int, seq: int, checkpointing: bool, optimizer: str = "adamw", seed: int = 0):
    model = build_model(tiny_llama_config(), seed=seed)
    if checkpointing:
        model.config.use_cache = (
            False  # the KV cache is for generation; transformers says so when it switches it off
        )
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x's name; non-reentrant
            model.activation_checkpointing_enable()
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 2048, (batch, seq), generator=generator)
    return model, {"input_ids": ids, "labels": ids.clone()}, optimizer


def _mlp_step(widths, batch: int, optimizer: str, seed: int = 0):
    torch.manual_seed(seed)
    model = mlp(list(widths))
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, widths[0], generator=generator)
    y = torch.randint(0, widths[-1], (batch,), generator=generator)
    return model, (x, y), optimizer


def _optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    if name == "adamw-foreach":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    return torch.optim.SGD(model.parameters(), lr=1e-2)


def peak_trace(model, batch, optimizer_name: str):
    """One tracked training step (memlab.measure.measure_training_step) of `model` on `batch`."""
    return measure_training_step(model, batch, _optimizer(optimizer_name, model))


def _expected_peak(name: str, trace, public: bool) -> dict:
    """A reference step: the stored answer of a public step; a drawn one's, read from the trace by the grading
    reference."""
    if public:
        return stored()["find_peak"][name]
    return kit.references("lesson06").expected_peak(trace)


def _step_events(name: str, build, public: bool) -> tuple[list[dict], dict]:
    """The event log of the case's training step, and the expected answer (a reference step). The trace, which knows
    the answer, ends here: the frames the learner's function runs under hold only its event log."""
    trace = peak_trace(*build())
    expected = kit.reference(lambda: _expected_peak(name, trace, public))
    return trace.events, expected


def _e1_public_cases():
    return [
        (
            kit.Case("MLP 256-1024-1024-10, batch 64, AdamW"),
            lambda: _mlp_step((256, 1024, 1024, 10), 64, "adamw"),
        ),
        (
            kit.Case("MLP 256-1024-1024-10, batch 512, SGD"),
            lambda: _mlp_step((256, 1024, 1024, 10), 512, "sgd"),
        ),
        (
            kit.Case("tiny Llama, batch 4 x 128, AdamW (foreach)"),
            lambda: _llama_step(4, 128, False, "adamw-foreach"),
        ),
        (kit.Case("tiny Llama, batch 8 x 128, checkpointing, SGD"), lambda: _llama_step(8, 128, True, "sgd")),
    ]


def _e1_drawn_case(rng, i: int):
    """A training step drawn at grading time (numbered from 0, as the cases always were)."""
    i -= 1
    if rng.random() < 0.5:
        widths = (rng.choice([64, 128, 256]), rng.choice([256, 512, 1024]), rng.choice([256, 512]), 10)
        batch, opt = rng.choice([16, 64, 256]), rng.choice(["adamw", "sgd", "adamw-foreach"])
        desc = kit.Case(
            "MLP {widths}, batch {batch}, {opt}", widths="-".join(map(str, widths)), batch=batch, opt=opt
        )
        return kit.drawn(i, desc), lambda w=widths, b=batch, o=opt, i=i: _mlp_step(w, b, o, seed=i)
    batch, seq = rng.choice([2, 4, 8]), rng.choice([32, 64, 128])
    ckpt, opt = rng.random() < 0.5, rng.choice(["adamw", "sgd"])
    desc = kit.Case(
        "tiny Llama, batch {batch} x {seq}, checkpointing {ckpt}, {opt}",
        batch=batch,
        seq=seq,
        ckpt=ckpt,
        opt=opt,
    )
    return kit.drawn(i, desc), lambda b=batch, s=seq, c=ckpt, o=opt, i=i: _llama_step(b, s, c, o, seed=i)


@kit.check("e1_find_peak", points=3)
def check_find_peak(find_peak) -> int:
    kit.expect_callable(find_peak, "find_peak")
    cases = [(*case, True) for case in _e1_public_cases()]
    cases += [(*case, False) for case in kit.drawn_cases("e1_find_peak", 3, _e1_drawn_case)]
    for name, build, public in cases:
        # the input, the step's event log, is built in every mode (a deterministic step: the judge's is the same)
        events, expected = _step_events(name, build, public)
        got = kit.call(find_peak, events, case=name)
        kit.expect_keys(got, ("phase", "op", "bytes", "by_category"), case=name, what=_("the result"))
        kit.expect_type(got["bytes"], numbers.Integral, case=name, what='"bytes"')
        if kit.judging() and got["bytes"] != expected["bytes"]:
            raise kit.CheckFailed(
                _(
                    'case {case}: "bytes" (live bytes at the peak) is {how_far}: you got {got:,} (exactly).'
                ).format(case=name, how_far=kit.how_far(got["bytes"], expected["bytes"]), got=got["bytes"])
            )
        if kit.judging() and got["op"] != expected["op"]:
            raise kit.CheckFailed(
                _(
                    'case {case}: "op" should be the operator during which live bytes first reached the peak; got '
                    "{got}."
                ).format(case=name, got=repr(got["op"]))
            )
        if kit.judging() and got["phase"] != expected["phase"]:
            raise kit.CheckFailed(
                _(
                    'case {case}: "phase" should be the name of the first mark after the peak; got {got}.'
                ).format(case=name, got=repr(got["phase"]))
            )
        kit.expect_keys(got["by_category"], CATEGORIES, case=name, what='"by_category"')
        for category in CATEGORIES:
            if kit.judging() and got["by_category"][category] != expected["by_category"][category]:
                raise kit.CheckFailed(
                    _(
                        'case {case}: "by_category"[{category}] is {how_far}: you got {got:,} (exactly).'
                    ).format(
                        case=name,
                        category=repr(category),
                        how_far=kit.how_far(got["by_category"][category], expected["by_category"][category]),
                        got=got["by_category"][category],
                    )
                )
    return len(cases)


# ---- e2: time_step -----------------------------------------------------------------------------------------------

#: the check's timing tolerance. The expected mean and std are those of the durations the calls really took (the
#: check times each sleep itself), not of the nominal costs: on a loaded machine a 10 ms sleep can overshoot by tens
#: of milliseconds, and an honest answer must not lose its points to the machine's load.
E2_RTOL, E2_ATOL = 0.25, 0.006


class QueueDevice:
    """A simulated asynchronous device: `launch(seconds)` queues work and returns at once; a worker thread runs the
    queue in order; `synchronize()` waits until everything queued so far has run (as `torch.cuda.synchronize`)."""

    def __init__(self):
        self.jobs: queue.Queue = queue.Queue()
        self.durations: list[float] = []  # how long each job really ran, in launch order
        self.worker = threading.Thread(target=self._run, daemon=True)
        self.worker.start()

    def _run(self) -> None:
        while True:
            seconds = self.jobs.get()
            if seconds is None:
                self.jobs.task_done()
                return
            start = time.perf_counter()
            time.sleep(seconds)
            self.durations.append(time.perf_counter() - start)
            self.jobs.task_done()

    def launch(self, seconds: float) -> None:
        self.jobs.put(seconds)

    def synchronize(self) -> None:
        self.jobs.join()

    def close(self) -> None:
        self.jobs.put(None)
        self.worker.join()


@dataclasses.dataclass
class TimedCase:
    """A function whose every call costs `costs[i]` seconds (its i-th call), run on the host or queued on a device."""

    name: str
    costs: list[float]
    warmup: int
    repeats: int
    asynchronous: bool = False

    def expected(self, durations: list[float]) -> tuple[float, float]:
        """(mean, std) of the timed calls: the durations they really took (nominal costs where none was seen)."""
        measured = list(durations[self.warmup : self.warmup + self.repeats])
        if len(measured) < self.repeats or not all(isinstance(d, float) and d >= 0 for d in measured):
            measured = self.costs[self.warmup : self.warmup + self.repeats]
        return statistics.mean(measured), statistics.stdev(measured) if len(measured) > 1 else 0.0


def _e2_public_cases() -> list[TimedCase]:
    return [
        TimedCase(kit.Case("steady 20 ms on the host"), [0.02] * 7, warmup=2, repeats=5),
        TimedCase(
            kit.Case("slow first calls (compilation, allocator warm-up)"),
            [0.15, 0.15] + [0.01] * 4,
            warmup=2,
            repeats=4,
        ),
        TimedCase(kit.Case("alternating 10 ms / 30 ms"), [0.01] + [0.01, 0.03] * 3, warmup=1, repeats=6),
        TimedCase(
            kit.Case("asynchronous device, warm-up work still queued"),
            [0.1, 0.1] + [0.02] * 4,
            warmup=2,
            repeats=4,
            asynchronous=True,
        ),
        TimedCase(
            kit.Case("asynchronous device, 25 ms per call"),
            [0.025] * 6,
            warmup=1,
            repeats=5,
            asynchronous=True,
        ),
    ]


def _e2_drawn_case(rng, i: int) -> TimedCase:
    """Costs drawn at grading time (numbered from 0, as the cases always were)."""
    warmup, repeats = rng.randint(1, 3), rng.randint(3, 5)
    costs = [rng.uniform(0.04, 0.08) for _ in range(warmup)] + [
        rng.uniform(0.01, 0.03) for _ in range(repeats)
    ]
    asynchronous = rng.random() < 0.6
    kind = kit.Case("asynchronous device") if asynchronous else kit.Case("host")
    name = kit.Case("{kind}, warm-up {warmup}, repeats {repeats}", kind=kind, warmup=warmup, repeats=repeats)
    return TimedCase(kit.drawn(i - 1, name), costs, warmup, repeats, asynchronous)


def _run_timed_case(time_step, case: TimedCase):
    """The learner's `time_step` on a function of known costs: (its result, how many times it called the function),
    from one learner step that makes the function (and the simulated device it queues on) and times nothing itself."""

    def run():
        device = QueueDevice()
        calls, host = [0], []

        def fn():
            cost = case.costs[min(calls[0], len(case.costs) - 1)]
            calls[0] += 1
            if case.asynchronous:
                device.launch(cost)
            else:
                start = time.perf_counter()
                time.sleep(cost)
                host.append(time.perf_counter() - start)

        sync = device.synchronize if case.asynchronous else (lambda: None)
        try:
            result = kit.call(
                time_step, fn, warmup=case.warmup, repeats=case.repeats, sync=sync, case=case.name
            )
            device.synchronize()  # nothing of this case may still run during the next one
        finally:
            device.close()
        return result, {"calls": calls[0], "durations": list(device.durations if case.asynchronous else host)}

    return observed_call(case.name, run)


def _expect_mean_std(result, expected, *, case: str) -> None:
    kit.expect_type(result, tuple, case=case, what=_("the result"))
    if len(result) != 2:
        raise kit.CheckFailed(
            _(
                "case {case}: the result should be a pair (mean seconds, std seconds); got {count} items."
            ).format(case=case, count=len(result))
        )
    mean, std = result
    for value, what in ((mean, _("the mean")), (std, _("the standard deviation"))):
        kit.expect_type(value, numbers.Real, case=case, what=what)
    expected = (kit.DEFERRED, kit.DEFERRED) if expected is kit.DEFERRED else expected
    kit.expect_close(
        mean,
        expected[0],
        case=case,
        what=_("the mean time per call (s)"),
        rtol=E2_RTOL,
        atol=E2_ATOL,
        reveal=False,
    )
    kit.expect_close(
        std,
        expected[1],
        case=case,
        what=_("the standard deviation (s)"),
        rtol=E2_RTOL,
        atol=E2_ATOL,
        reveal=False,
    )


@kit.check("e2_time_step", points=2, rerun=True)
def check_time_step(time_step) -> int:
    kit.expect_callable(time_step, "time_step")
    cases = _e2_public_cases() + kit.drawn_cases("e2_time_step", 3, _e2_drawn_case)
    for case in cases:
        result, seen = _run_timed_case(time_step, case)
        kit.expect_equal(
            seen["calls"],
            kit.reference(lambda: case.warmup + case.repeats),  # noqa: B023 - called at once
            case=case.name,
            what=_("the number of calls of fn (warmup={warmup} + repeats={repeats})").format(
                warmup=case.warmup, repeats=case.repeats
            ),
        )
        _expect_mean_std(result, kit.reference(lambda: case.expected(seen["durations"])), case=case.name)  # noqa: B023
    # the queue device has checked the synchronisation; a GPU adds a real one (where the learner's code runs)
    if not kit.learner(kit.Case("a CUDA GPU for the timing of real work"), torch.cuda.is_available):
        return len(cases)
    run_cuda_timing_case(time_step)
    return len(cases) + 1


def run_cuda_timing_case(time_step) -> None:
    """The GPU stage: a queue of bf16 matmuls (asynchronous: the call returns before they run), timed with
    `sync=None`, which must mean torch.cuda.synchronize; compared with CUDA events around the same calls (the check's
    own clock, read in the learner step, in the process that runs the learner's call)."""
    case = kit.Case("CUDA matmuls, sync=None")

    def run():
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def fn():
            for _matmul in range(4):
                a @ a

        for _warmup in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _repeat in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        return kit.call(time_step, fn, warmup=2, repeats=5, case=case), times

    result, times = observed_call(case, run)
    kit.expect_type(result, tuple, case=case, what=_("the result"))
    mean = result[0]
    kit.expect_close(
        mean, statistics.mean(times), case=case, what=_("the mean time per call (s)"), rtol=0.3, reveal=False
    )


# ---- e3: largest_micro_batch -------------------------------------------------------------------------------------


class FakeSteps:
    """A step that "runs" micro-batches up to `fits` and raises torch.OutOfMemoryError above; it counts its calls."""

    def __init__(self, fits: int):
        self.fits, self.calls = fits, []

    def __call__(self, batch: int) -> None:
        self.calls.append(batch)
        if batch > self.fits:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {batch * 64} MiB (simulated)"
            )


def max_calls(max_batch: int) -> int:
    """The step calls a bisection over 1..max_batch needs, plus two to spare."""
    return math.ceil(math.log2(max_batch + 1)) + 2


def _e3_public_cases():
    return [
        (kit.Case("fits up to 13 of 64"), 13, 64),
        (kit.Case("nothing fits"), 0, 32),
        (kit.Case("everything fits"), 48, 48),
        (kit.Case("fits 1 of 100"), 1, 100),
    ]


def _e3_drawn_case(rng, i: int):
    """A threshold drawn at grading time (numbered from 0, as the cases always were)."""
    top = rng.randint(8, 500)
    fits = rng.randint(0, top)
    return kit.drawn(i - 1, kit.Case("fits up to {fits} of {top}", fits=fits, top=top)), fits, top


def _search_fake_steps(largest_micro_batch, fits: int, top: int, name: str):
    """The learner's search over simulated steps that run out of memory above `fits`: (its answer, how many steps it
    ran)."""

    def run():
        step = FakeSteps(fits)
        got = kit.call(largest_micro_batch, step, top, case=name)
        return got, len(step.calls)

    return observed_call(name, run)


def _other_error_outcome(largest_micro_batch) -> dict:
    """What the learner's search does with a step that raises a ValueError (not a lack of memory): whether a
    ValueError came out of it, and the name of the exception that did (None if it returned)."""

    def broken(batch):
        raise ValueError("a shape mismatch, not a lack of memory")

    try:
        largest_micro_batch(broken, 16)
    except ValueError as error:
        return {"value_error": True, "raised": type(error).__name__}
    except Exception as error:
        return {"value_error": False, "raised": type(error).__name__}
    return {"value_error": False, "raised": None}


@kit.check("e3_largest_micro_batch", points=2, rerun=True)
def check_largest_micro_batch(largest_micro_batch) -> int:
    kit.expect_callable(largest_micro_batch, "largest_micro_batch")
    cases = _e3_public_cases() + kit.drawn_cases("e3_largest_micro_batch", 3, _e3_drawn_case)
    for name, fits, top in cases:
        got, n_steps = _search_fake_steps(largest_micro_batch, fits, top, name)
        kit.expect_type(got, numbers.Integral, case=name, what=_("the result"))
        expected = kit.reference(lambda: fits)  # noqa: B023 - called at once
        kit.expect_close(got, expected, case=name, what=_("the largest micro-batch that fits"), reveal=False)
        if n_steps > max_calls(top):
            raise kit.CheckFailed(
                _(
                    "case {case}: {steps} steps were run; every step is a real training step, so search (at "
                    "most {limit} steps for max_batch={max_batch}), do not scan."
                ).format(case=name, steps=n_steps, limit=max_calls(top), max_batch=top)
            )
    name = kit.Case("a step that fails with another error")
    outcome = kit.learner(name, lambda: _other_error_outcome(largest_micro_batch))
    if outcome["raised"] is None:
        raise kit.CheckFailed(
            _(
                "case {case}: only torch.OutOfMemoryError means 'too big'; the ValueError was swallowed."
            ).format(case=name)
        )
    if not outcome["value_error"]:
        raise kit.CheckFailed(
            _("case {case}: the ValueError should propagate unchanged; got {raised}.").format(
                case=name, raised=outcome["raised"]
            )
        )
    n = len(cases) + 1
    kit.needs_hardware(
        cuda=True, passed=_("{count} cases with simulated out-of-memory errors").format(count=n)
    )
    run_cuda_oom_case(largest_micro_batch)
    return n + 1


class CudaSteps:
    """Training steps of an MLP whose activations grow with the micro-batch, on the GPU; holds big tensors in its
    frame, so an exception kept alive after an OOM keeps them allocated."""

    def __init__(self, width: int = 4096, depth: int = 6):
        torch.manual_seed(0)
        self.model = mlp([width] * (depth + 1)).cuda()
        self.width = width

    def __call__(self, batch: int) -> None:
        try:
            x = torch.randn(batch * 64, self.width, device="cuda")
            loss = self.model(x).float().pow(2).mean()
            loss.backward()
        finally:  # gradients of a step that failed half-way are not the learner's to free
            self.model.zero_grad(set_to_none=True)


def run_cuda_oom_case(largest_micro_batch, max_batch: int = 64, headroom: int = 1024 * MiB) -> dict:
    """Cap this process's GPU memory at what the model holds plus `headroom`, let the learner's search run into real
    out-of-memory errors, then check the answer under the same cap and that no memory was left held. The cap, the
    search and the check's own runs of the answer (and of one more) are one learner step: the process that ran the
    search is the one whose memory is looked at."""
    case = kit.Case("real CUDA steps, {headroom} MiB of headroom", headroom=headroom // MiB)

    def run():
        steps = CudaSteps()
        # one small step first: the first matrix products of a process allocate cuBLAS's workspaces through the
        # caching allocator and keep them (on an H200 the first step of this model left 1.0 MiB allocated, which
        # the check then blamed on the learner's search)
        steps(1)
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(0).total_memory
        baseline = torch.cuda.memory_allocated()
        fraction = min(1.0, (torch.cuda.memory_reserved() + headroom) / total)
        torch.cuda.set_per_process_memory_fraction(fraction)
        try:
            got = kit.call(largest_micro_batch, steps, max_batch, case=case)
            gc.collect()
            seen = {"held": torch.cuda.memory_allocated() - baseline, "cap_bytes": int(fraction * total)}
            seen["fits"] = seen["fits_more"] = None  # whether `got` and `got + 1` run under the cap
            if seen["held"] <= 0 and isinstance(got, numbers.Integral) and not isinstance(got, bool):
                seen["fits"] = _runs(steps, got) if got > 0 else True
                seen["fits_more"] = _runs(steps, got + 1) if got < max_batch else False
            return got, seen
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
            del steps
            gc.collect()
            torch.cuda.empty_cache()

    got, seen = observed_call(case, run)
    held = seen["held"]
    if held > 0:
        raise kit.CheckFailed(
            _(
                "case {case}: {held_mib:.1f} MiB allocated by the steps are still held after your function "
                "returned: an exception (or its traceback) kept alive holds the frames of the failed step."
            ).format(case=case, held_mib=held / MiB)
        )
    kit.expect_type(got, numbers.Integral, case=case, what=_("the result"))
    fits, fits_more = seen["fits"], seen["fits_more"]
    if not fits or fits_more:
        if fits:
            text = _(
                "case {case}: {got} should be the largest micro-batch whose step runs under this cap: "
                "{got} runs, {more} runs."
            )
        elif fits_more:
            text = _(
                "case {case}: {got} should be the largest micro-batch whose step runs under this cap: "
                "{got} does not run, {more} runs."
            )
        else:
            text = _(
                "case {case}: {got} should be the largest micro-batch whose step runs under this cap: "
                "{got} does not run, {more} does not."
            )
        raise kit.CheckFailed(text.format(case=case, got=got, more=got + 1))
    return {"largest": got, "cap_bytes": seen["cap_bytes"]}


def _runs(step, batch: int) -> bool:
    try:
        step(batch)
        return True
    except torch.OutOfMemoryError:
        pass
    gc.collect()
    torch.cuda.empty_cache()
    return False


# ---- e4: trade_off_args ------------------------------------------------------------------------------------------

SETUPS = ("fp32", "bf16", "bf16+ckpt+8bit")
#: the TrainingArguments fields that may differ between the three set-ups; everything else must be equal
SETUP_FIELDS = {
    "bf16",
    "optim",
    "gradient_checkpointing",
    "gradient_checkpointing_kwargs",
    "activation_checkpointing",
    "activation_checkpointing_kwargs",
}
#: fields that say where a run writes and logs, which the check changes for its own runs
RUN_FIELDS = {"output_dir", "logging_dir", "max_steps", "report_to", "disable_tqdm", "run_name"}


def tradeoff_model(seed: int = 0) -> nn.Module:
    """The check's classifier: a 4-layer tiny Llama for sequence classification."""
    config = tiny_llama_config(hidden_size=128, intermediate_size=344, num_hidden_layers=4)
    return build_model(config, task="seq-cls", seed=seed)


def tradeoff_data(n: int = 64, seq: int = 64, seed: int = 0):
    from memlab.data import TensorDictDataset

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 2048, (n, seq), generator=generator)
    return TensorDictDataset(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "labels": torch.randint(0, 2, (n,), generator=generator),
        }
    )


@dataclasses.dataclass
class Observed:
    """What a set-up did inside a Trainer: the dtype of a Linear layer's output, forward calls of the first decoder
    layer's MLP per optimizer step, the optimizer's class, and the dtypes of its state for one projection weight."""

    linear_dtype: torch.dtype | None = None
    layer_forwards_per_step: float = 0.0
    optimizer: str = ""
    weight_state_dtypes: tuple = ()
    fp16: bool = False


def observe_setup(args, steps: int = 2) -> Observed:
    """Run `args` in a Trainer for `steps` optimizer steps on the check's model and data, and watch what it does."""
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    model = tradeoff_model()
    layer = model.model.layers[0]
    proj = layer.mlp.down_proj
    seen = Observed(fp16=bool(args.fp16))
    calls = [0]

    def count(module, inputs):
        calls[0] += 1

    def dtype_of(module, inputs, output):
        seen.linear_dtype = output.dtype

    # transformers checkpoints a decoder layer's `forward`, not its `__call__` (its hooks stay outside the
    # checkpoint, transformers/modeling_layers.py): the recompute is seen from a module inside the layer
    hooks = [layer.mlp.register_forward_pre_hook(count), proj.register_forward_hook(dtype_of)]
    trainer = Trainer(model=model, args=args, train_dataset=tradeoff_data())
    for callback in (PrinterCallback, ProgressCallback):  # the check's runs print nothing
        trainer.remove_callback(callback)
    try:
        trainer.train()
    finally:
        for hook in hooks:
            hook.remove()
        forget_bnb_overrides()
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    seen.optimizer = f"{type(optimizer).__module__}.{type(optimizer).__name__}"
    state = optimizer.state.get(proj.weight, {})
    seen.weight_state_dtypes = tuple(
        sorted({str(v.dtype) for v in state.values() if isinstance(v, torch.Tensor) and v.numel() > 1})
    )
    seen.layer_forwards_per_step = calls[0] / steps
    return seen


def forget_bnb_overrides() -> int:
    """Clear what `Trainer` registered in bitsandbytes' process-wide `GlobalOptimManager`; return how many modules it
    held. With an 8-bit bitsandbytes optimizer, Trainer registers every `nn.Embedding` for 32-bit state
    (`manager.register_module_override(module, "weight", {"optim_bits": 32})`, transformers/trainer.py). The manager
    keeps a reference to each module (its memory is never freed) and records the override by the parameter's position
    in the optimizer, `(group index, parameter index)`, so every later 8-bit optimizer in the process keeps 32-bit
    state for whatever parameter sits at that position (bitsandbytes/optim/optimizer.py, `index2config`)."""
    import sys

    if "bitsandbytes" not in sys.modules:
        return 0
    manager = sys.modules["bitsandbytes"].optim.GlobalOptimManager.get_instance()
    held = len(manager.module_weight_config_triple)
    manager.initialize()
    return held


#: what the check's own run of the learner's arguments never takes from them, whatever they say: what would cost the
#: grader processes, memory or minutes outside any sandbox (a `dataloader_num_workers=32` forked 32 processes of the
#: judge), or needs what a grader does not set up (DeepSpeed, FSDP). None of them is a set-up field (SETUP_FIELDS).
JUDGE_RUN = dict(
    dataloader_num_workers=0,
    dataloader_persistent_workers=False,
    dataloader_prefetch_factor=None,
    dataloader_pin_memory=False,
    torch_compile=False,
    torch_compile_backend=None,  # either of these turns torch_compile on again in __post_init__
    torch_compile_mode=None,
    accelerator_config=None,  # a string is read as a JSON file's path
    push_to_hub=False,  # Trainer would create a repository with the grader's token
    full_determinism=False,
    eval_strategy="no",
    deepspeed=None,
    fsdp="",
)


def _run_args(args, output_dir: str, steps: int):
    """`args` with the run fields the check needs (its own folder, `steps` steps, no reports, no progress bar) and
    what it never takes from them (JUDGE_RUN); batch sizes at most the check's data (64 examples)."""
    return dataclasses.replace(
        args,
        output_dir=output_dir,
        max_steps=steps,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        logging_strategy="no",
        per_device_train_batch_size=max(1, min(int(args.per_device_train_batch_size), 64)),
        gradient_accumulation_steps=max(1, min(int(args.gradient_accumulation_steps), 8)),
        **JUDGE_RUN,
    )


def _expect_setup(seen: Observed, setup: str) -> None:
    case = setup
    if seen.fp16:
        raise kit.CheckFailed(
            _("case {case}: fp16 is on; the set-ups use bf16 (no GradScaler needed) or fp32.").format(
                case=case
            )
        )
    want_bf16 = setup != "fp32"
    if want_bf16 and seen.linear_dtype != torch.bfloat16:
        raise kit.CheckFailed(
            _(
                "case {case}: a Linear layer should compute in bfloat16 under the Trainer's autocast; it computed in "
                "{dtype}."
            ).format(case=case, dtype=seen.linear_dtype)
        )
    if not want_bf16 and seen.linear_dtype != torch.float32:
        raise kit.CheckFailed(
            _("case {case}: the fp32 set-up should compute in float32; a Linear layer gave {dtype}.").format(
                case=case, dtype=seen.linear_dtype
            )
        )
    want_recompute = setup == "bf16+ckpt+8bit"
    if want_recompute and seen.layer_forwards_per_step < 2:
        raise kit.CheckFailed(
            _(
                "case {case}: with activation checkpointing each decoder layer runs its forward twice per step (once "
                "more in backward); it ran {count:g} time(s)."
            ).format(case=case, count=seen.layer_forwards_per_step)
        )
    if not want_recompute and seen.layer_forwards_per_step != 1:
        raise kit.CheckFailed(
            _(
                "case {case}: without checkpointing each decoder layer runs its forward once per step; it ran "
                "{count:g} times."
            ).format(case=case, count=seen.layer_forwards_per_step)
        )
    is_bnb = seen.optimizer.startswith("bitsandbytes.")
    if setup == "bf16+ckpt+8bit":
        if not is_bnb or "torch.uint8" not in seen.weight_state_dtypes:
            raise kit.CheckFailed(
                _(
                    "case {case}: the optimizer should be bitsandbytes' 8-bit AdamW (its state in uint8); got "
                    "{optimizer} with state {dtypes}."
                ).format(case=case, optimizer=seen.optimizer, dtypes=list(seen.weight_state_dtypes))
            )
    elif is_bnb or not seen.optimizer.startswith("torch.optim."):
        raise kit.CheckFailed(
            _("case {case}: this set-up should use torch's AdamW (32-bit state); got {optimizer}.").format(
                case=case, optimizer=seen.optimizer
            )
        )


def args_data(args, setup: str) -> dict:
    """In the learner step: the learner's `TrainingArguments` as plain data. `fields` is `args.to_dict()` (what the
    set-ups are compared by), where a value that is not plain data is replaced by its repr and named in
    `not_plain`; `rebuilt_args` builds TrainingArguments again from it, without those."""
    from transformers import TrainingArguments

    kit.expect_type(args, TrainingArguments, case=setup, what=_("the result"))
    fields, not_plain = {}, []
    for key, value in args.to_dict().items():
        try:
            wire.encode(value)
        except wire.NotPlainData:
            value = repr(value)
            not_plain.append(str(key))
        fields[str(key)] = value
    return {"fields": fields, "not_plain": not_plain}


def rebuilt_args(data: dict):
    """In a reference step: TrainingArguments made from `args_data`, as `dataclasses.replace` would remake the
    learner's (its __post_init__ turns the enums' values back into enums); the obfuscated tokens, the values that
    were not plain data, and what the check never takes from them (JUDGE_RUN, which __post_init__ would act on:
    DeepSpeed's configuration file) are left at their defaults."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    skip = set(data["not_plain"])
    kwargs = {
        k: v
        for k, v in data["fields"].items()
        if k in names and k not in skip and k not in JUDGE_RUN and not k.endswith("_token")
    }
    return TrainingArguments(**kwargs)


def _unknown_setup_outcome(trade_off_args, folder: str):
    """The message of the failure the learner's function met on an unknown set-up (None if it returned)."""
    try:
        kit.call(trade_off_args, "fp16", folder, 2, case=kit.Case("an unknown set-up"))
    except kit.CheckFailed as failure:
        return str(failure)
    return None


@kit.check("e4_trade_off_args", points=2)
def check_trade_off_args(trade_off_args) -> int:
    kit.expect_callable(trade_off_args, "trade_off_args")
    with tempfile.TemporaryDirectory() as folder:
        made = {}
        for setup in SETUPS:
            made[setup] = kit.learner(
                setup,
                lambda setup=setup: args_data(kit.call(trade_off_args, setup, folder, 2, case=setup), setup),
            )
        base = made["fp32"]["fields"]
        for setup in SETUPS[1:]:
            other = made[setup]["fields"]
            differ = sorted(k for k in base if k not in SETUP_FIELDS | RUN_FIELDS and base[k] != other.get(k))
            if differ:
                raise kit.CheckFailed(
                    _(
                        "case {case}: only the set-up may change between the three runs (precision, checkpointing, "
                        "optimizer); these arguments differ from fp32's too: {differ}."
                    ).format(case=setup, differ=differ)
                )
        unknown = kit.Case("an unknown set-up")
        failure = kit.learner(unknown, lambda: _unknown_setup_outcome(trade_off_args, folder))
        if failure is None:
            raise kit.CheckFailed(
                _('case {case} ("fp16"): should raise ValueError; it returned.').format(case=unknown)
            )
        if "ValueError" not in failure:
            raise kit.CheckFailed(failure)  # what your function raised instead, as `call` said it
        kit.needs_hardware(packages=("bitsandbytes",), passed=_("the three TrainingArguments were made"))
        for setup in SETUPS:
            # the check's own Trainer run with the learner's arguments, remade from the data
            seen = kit.reference(
                lambda setup=setup: observe_setup(_run_args(rebuilt_args(made[setup]), folder, 2), steps=2)
            )
            if kit.judging():
                _expect_setup(seen, setup)
    return len(SETUPS) + 1


# ---- e5: measure_trainer (GPU) -----------------------------------------------------------------------------------

#: the check's GPU classifier: a 4-layer Llama of hidden 1024 and a 32,000-token vocabulary, bf16 autocast
E5_CONFIG = dict(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=16,
    vocab_size=32000,
)
E5_STEPS, E5_WARMUP = 10, 3


def _step_timer():
    """A TrainerCallback that times every optimizer step with the device synchronised at both ends."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_begin(self, args, state, control, **kwargs):
            torch.cuda.synchronize()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self.start)

    return StepTimer()


def gpu_trainer(folder: str):
    """The check's Trainer on the GPU: E5_CONFIG as a sequence classifier, bf16, batch 8 x 512, E5_STEPS steps."""
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    model = build_model(tiny_llama_config(**E5_CONFIG), task="seq-cls", device="cuda", seed=0)
    args = TrainingArguments(
        output_dir=folder,
        max_steps=E5_STEPS,
        per_device_train_batch_size=8,
        bf16=True,
        optim="adamw_torch",
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=tradeoff_data(n=8 * E5_STEPS, seq=512))
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    return trainer


def _fresh_gpu() -> None:
    _warm_up_cuda()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def _leave_a_peak_behind() -> None:
    """A 2 GiB peak from before the run, which a peak of `train()` only must not include."""
    junk = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
    del junk


def _reference_train_rise() -> int:
    """The check's own run: how far the allocator's peak during `train()` rose above what the process held when
    `train()` began. A peak itself depends on the process: a learner's kernel, or a rerun's, holds the tensors of
    the lesson's earlier cells, and the peak of `train()` includes them; the rise does not."""
    with tempfile.TemporaryDirectory() as folder:
        _fresh_gpu()
        trainer = gpu_trainer(folder)
        before = _allocated_now()
        torch.cuda.reset_peak_memory_stats()
        trainer.train()
        torch.cuda.synchronize()
        rise = torch.cuda.max_memory_allocated() - before
        del trainer
        _fresh_gpu()
    return rise


def _warm_up_cuda() -> None:
    """A small bias-carrying layer forward and backward, in fp32 and under bf16 autocast: the process's cuBLAS
    workspaces, which the caching allocator holds from their first use on, exist before a measurement starts."""
    layer = nn.Linear(64, 64, device="cuda")
    x = torch.ones(8, 64, device="cuda")
    layer(x).sum().backward()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        layer(x).float().sum().backward()
    del layer, x


def _allocated_now() -> int:
    """The bytes this process holds on the GPU, once its queued work is done."""
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def _measure_through(measure_trainer, case: str):
    """The learner's function on the check's Trainer, after a 2 GiB peak left behind, with the check's synchronised
    clock first among the callbacks: (what the function returned, the times of the clock)."""

    def run():
        with tempfile.TemporaryDirectory() as folder:
            _fresh_gpu()
            _leave_a_peak_behind()
            trainer = gpu_trainer(folder)
            timer = _step_timer()
            trainer.callback_handler.callbacks.insert(0, timer)  # the check's clock, around each step
            before = _allocated_now()  # what this process holds as the learner's function starts
            try:
                result = kit.call(measure_trainer, trainer, warmup=E5_WARMUP, case=case)
            finally:
                del trainer
                _fresh_gpu()
        return result, {"step_seconds": list(timer.times), "allocated_before": before}

    return observed_call(case, run)


@kit.check("e5_measure_trainer", points=1, rerun=True)
def check_measure_trainer(measure_trainer) -> int:
    kit.expect_callable(measure_trainer, "measure_trainer")
    kit.needs_hardware(cuda=True, passed="")
    case = kit.Case(
        "a bf16 Llama classifier (hidden 1024, vocabulary 32,000) for {steps} steps on the GPU",
        steps=E5_STEPS,
    )
    rise = kit.reference(_reference_train_rise)
    result, seen = _measure_through(measure_trainer, case)
    times = seen["step_seconds"]
    kit.expect_keys(result, ("peak_bytes", "step_seconds"), case=case, what=_("the result"))
    kit.expect_type(result["peak_bytes"], numbers.Integral, case=case, what='"peak_bytes"')
    kit.expect_close(
        result["peak_bytes"],
        # the same run's peak in the learner's process: what it held as the function started, plus the rise
        rise if rise is kit.DEFERRED else seen["allocated_before"] + rise,
        case=case,
        what=_('"peak_bytes" (the peak of train() only)'),
        rtol=0.02,
    )
    kit.expect_close(
        result["step_seconds"],
        statistics.mean(times[E5_WARMUP:]),
        case=case,
        what=_('"step_seconds" (mean of the synchronised steps after the warm-up)'),
        rtol=0.25,
    )
    return 1
