"""No function of the learner release computes an exercise's answer (issue 40, item 2).

What computes an expected value lives in autograders/references/ (the judge's side only): the learner release
(scripts/release.py) and the grading kernel's copy of the kit leave it out, and the checks' public cases compare with
stored values. This test copies the released packages as scripts/release.py does (`PACKAGES`, without what `NEVER`
leaves out), takes every exercise whose public cases are plain data (numbers, strings, lists, dicts, configs,
tensors) with their answers (the test solutions' results, recorded while the lesson's own check runs them in a
learner's notebook), and has tests/answer_probe.py, in a process that imports only the release, call every function
defined in a released `autograders` or `memlab` module, public or not, whose signature accepts a case's arguments.
None may return the case's answer (for Exercise 8.1 the plan's decision, for 7.1 the scale too), nor a tuple or list
holding it, on two cases of an exercise at least whose answers differ (one alone can be a coincidence: 85 cast to
E5M2 is 80.0, and so is what the E5M2 bit pattern 85 means). A case is also offered in the forms a learner holding it makes of it at once (`_other_forms`: a format's
`FloatFormat` for its name, a dtype for its bytes per value, the tracker's trace of a public training step for its
event log), so that a function that answers with its arguments spelled otherwise is found too.

`KNOWN` lists what still does, each with the reason it cannot move; the test fails if one of them stops doing so
(then take it off the list) or if anything else does. A function is called until it has taken
`answer_probe.FUNCTION_SECONDS` over all the cases; one that takes longer must be in `SLOW`, which says why what it
does with such arguments cannot be an answer.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import uuid

import pytest
import test_autograders_lesson01 as l01
import test_autograders_lesson02 as l02
import test_autograders_lesson03 as l03
import test_autograders_lesson04 as l04
import test_autograders_lesson05 as l05
import test_autograders_lesson06 as l06
import test_autograders_lesson07 as l07
import test_autograders_lesson08 as l08
import torch
from nbgrader_pipeline import ROOT

from coursetools import release
from memlab.estimate import simulation_cache

#: (function, exercise) -> why it still returns the answer of the exercise's public cases
KNOWN: dict[tuple[str, str], str] = {
    ("autograders.lesson02.torch_decode", "2.1 decode"): "torch's reading of bit patterns (Tensor.view of an "
    "integer tensor): the checks build their cases with it in the grading kernel (the ulp cases' values, the "
    "values of drawn bit patterns), and it is one line of torch that any learner can write",
    (
        "autograders.lesson04.measure_layer_saved_bytes",
        "4.1 llama_layer_saved_bytes",
    ): "the lesson's notebook "
    "imports it after Exercise 4.1, to compare the learner's formula with the measurement; the check refuses a "
    "function that runs a model (kit.call_predicting), as this one does, and takes that record in a fresh process",
}

#: function -> why it may run out of its time on the cases' arguments without an answer to give
SLOW = {
    "autograders.lesson06.run_cuda_oom_case": "builds a 4096-wide MLP before moving it to a CUDA GPU, which the "
    "probe has not; on a GPU it runs the learner's search of Exercise 6.3",
    "autograders.lesson04._plan_peaks": "measures a plan for every subset of the rows of what it is given "
    "(2^rows of them); it returns a sorted list of peaks",
    "memlab.data.make_tokenizer": "trains a BPE tokenizer on fallback text when a tokenizer name does not load "
    "offline; it returns a tokenizer",
    "autograders.lesson08.eval_accuracy": "loads and tokenises the IMDB test reviews before it fails on a model "
    "that is not one; it returns an accuracy in [0, 1]",
    "autograders.lesson06.observe_setup": "runs a transformers Trainer; it returns what it observed of the run",
}

#: at most this many elements in a tensor argument: a probed function may do anything with it
SMALL_TENSOR = 4096


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """The packages of the learner release, copied as scripts/release.py copies them."""
    out = tmp_path_factory.mktemp("release") / "memlab-course"
    for package in release.PACKAGES:
        shutil.copytree(ROOT / package, out / package, ignore=release.NEVER)
    assert not (out / "autograders" / "references").exists()
    return out


def _recorded(check_fn, solution, *others, parts=lambda answer: [answer]):
    """[(args, kwargs, answer parts)] of every call the check makes of `solution` on its public cases (learner
    mode: no case is drawn)."""
    calls = []

    def recorder(*args, **kwargs):
        answer = solution(*args, **kwargs)
        calls.append((copy.deepcopy(args), copy.deepcopy(kwargs), parts(copy.deepcopy(answer))))
        return answer

    check_fn(recorder, *others)
    return calls


def _small(calls):
    def small(value):
        return not isinstance(value, torch.Tensor) or value.numel() <= SMALL_TENSOR

    return [
        (args, kwargs, parts)
        for args, kwargs, parts in calls
        if all(small(a) for a in args) and all(small(v) for v in kwargs.values())
    ]


def _every(n: int, calls: list) -> list:
    """`n` of `calls`, evenly spaced (a function whose signature takes a case is called on each of its cases)."""
    return calls[:: max(1, len(calls) // n)][:n]


def _decode_cases():
    """5 of the bit patterns the check decodes in each of its formats, evenly spaced (it decodes some 120,000)."""
    cases = []
    for name in l02.lesson02.DECODE_FORMATS:
        for bits in _every(5, l02.lesson02._decode_patterns(name)[1:]):
            cases.append(((bits, name), {}, [l02.decode(bits, name)]))
    return cases


def _other_forms(exercise: str, args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The case's arguments as a learner holding them writes them at once for another function's signature."""
    from memlab.formats import FORMATS

    dtype_of = {4: torch.float32, 2: torch.bfloat16}
    if exercise == "1.4 kv_cache_bytes":
        config, batch, seq = args
        return [((config, batch, seq, dtype_of[kwargs["bytes_per_value"]]), {})]
    if exercise == "2.1 decode":
        bits, name = args
        return [((bits, FORMATS[name]), {}), (([bits], FORMATS[name]), {})]
    if exercise == "2.2 format_limits":
        named = [
            name
            for name, f in FORMATS.items()
            if (f.exponent_bits, f.mantissa_bits, f.nan_encoding) == (*args, "ieee")[:3]
        ]
        return [((name,), {}) for name in named] + [((FORMATS[name],), {}) for name in named]
    if exercise == "2.4 ulp":
        x, name = args
        return [((x, FORMATS[name]), {})]
    if exercise == "4.1 llama_layer_saved_bytes":
        config, batch, seq, bytes_per_value = args
        return [((config, batch, seq, dtype_of[bytes_per_value]), {})]
    if exercise == "7.1 quantize_fp8":
        x, fmt = args
        return [((x, {"e4m3": 448.0, "e5m2": 57344.0}[fmt]), {})]
    return []


def _traces_of_the_public_steps():
    """Exercise 6.1 given the tracker's trace of each public training step instead of its event log (a learner can
    make one: the steps are public, and memlab.measure is the lesson's tool)."""
    from autograders.lesson06 import _e1_public_cases, peak_trace

    cases = []
    for _name, build in _e1_public_cases():
        trace = peak_trace(*build())
        cases.append(((trace,), {}, [l06.find_peak(trace.events)]))
    return cases


def _plan_decision(plan):
    """Exercise 8.1's answer without the simulated peak (the lesson's own tool, memlab.estimate, gives that)."""
    return [None if plan is None else {k: plan[k] for k in ("checkpointing", "micro_batch", "accumulation")}]


def _exercises() -> dict[str, dict]:
    exercises = {
        "1.2 adamw8bit_state_bytes": (
            lambda: _recorded(l01.check_adamw8bit_state_bytes, l01.adamw8bit_state_bytes),
            0.0,
        ),
        "1.3 predict_live_bytes": (
            lambda: _recorded(l01.check_predict_live_bytes, l01.predict_live_bytes),
            0.0,
        ),
        "1.4 kv_cache_bytes": (lambda: _recorded(l01.check_kv_cache_bytes, l01.kv_cache_bytes), 0.0),
        "1.5 training_state_bytes": (
            lambda: _recorded(l01.check_training_state_bytes, l01.training_state_bytes),
            1e-9,
        ),
        "2.1 decode": (_decode_cases, 0.0),
        "2.2 format_limits": (lambda: _recorded(l02.check_format_limits, l02.format_limits), 0.0),
        "2.3 round_to_bf16": (
            lambda: _small(_recorded(l02.check_round_to_bf16, l02.round_to_bf16)),
            0.0,
        ),
        "2.4 ulp": (lambda: _every(25, _recorded(l02.check_ulp, l02.ulp)), 0.0),
        "3.1 underflow_fraction": (
            lambda: _recorded(l03.check_underflow_fraction, l03.underflow_fraction),
            1e-6,
        ),
        "4.1 llama_layer_saved_bytes": (
            lambda: _recorded(l04.check_llama_layer_saved_bytes, l04.llama_layer_saved_bytes),
            0.0,
        ),
        "5.3 zero_bytes_per_rank": (
            lambda: _recorded(l05.check_zero_bytes_per_rank, l05.zero_bytes_per_rank),
            0.0,
        ),
        "6.1 find_peak": (
            lambda: _recorded(l06.check_find_peak, l06.find_peak) + _traces_of_the_public_steps(),
            0.0,
        ),
        "7.1 quantize_fp8": (
            lambda: _small(
                _recorded(
                    l07.check_quantize_fp8,
                    l07.quantize_fp8,
                    l07.dequantize_fp8,
                    parts=lambda answer: [answer, float(answer[1])],  # (x_fp8, scale), and the scale alone
                )
            ),
            1e-6,
        ),
        "7.3 quantize_mxfp8": (
            lambda: _small(_recorded(l07.check_quantize_mxfp8, l07.quantize_mxfp8)),
            0.0,
        ),
        "8.1 plan_for": (
            lambda: _recorded(l08.check_plan_for, l08.plan_for, parts=_plan_decision),
            0.0,
        ),
    }
    if not l01.HAS_BNB:
        del exercises["1.2 adamw8bit_state_bytes"]
    gathered = {}
    for name, (cases, rtol) in exercises.items():
        recorded = cases()
        assert recorded, name
        others = [
            (other_args, other_kwargs, parts)
            for args, kwargs, parts in recorded
            for other_args, other_kwargs in _other_forms(name, args, kwargs)
        ]
        gathered[name] = {"cases": recorded + others, "rtol": rtol}
    return gathered


def _end_leftovers(marker: str) -> list[int]:
    """End the processes a probed function started and left behind (torchrun's workers live in sessions of their
    own): those whose environment carries this probe's `marker`."""
    import os
    import signal
    from pathlib import Path

    ended = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"MEMLAB_ANSWER_PROBE={marker}".encode() in environment:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                ended.append(int(entry.name))
            except OSError:
                pass
    return ended


# about 110 s on 2 cores (every check's cases, each answer probed in a process of the release's own): the full tier
@pytest.mark.slow
def test_no_released_function_returns_an_exercises_answer(released, tmp_path, learner_mode, capsys):
    exercises = _exercises()
    capsys.readouterr()  # the checks' lines
    cases = tmp_path / "cases.pt"
    torch.save(exercises, cases)
    out = tmp_path / "probed.json"
    # the simulations the checks ran just now, so that a function that simulates 7B steps answers in time
    simulations = tmp_path / "simulations"
    if simulation_cache() is not None and simulation_cache().is_dir():
        shutil.copytree(simulation_cache(), simulations)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(released),
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "MEMLAB_SIMULATION_CACHE": str(simulations),
        "OMP_NUM_THREADS": "1",
        "MEMLAB_ANSWER_PROBE": uuid.uuid4().hex,
    }
    try:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "answer_probe.py"), str(released), str(cases), str(out)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    finally:
        _end_leftovers(env["MEMLAB_ANSWER_PROBE"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    probed = json.loads(out.read_text())
    assert {f"autograders.lesson0{n}" for n in range(1, 9)} <= set(probed["modules"])
    assert {"memlab.measure", "memlab.estimate", "memlab.formats"} <= set(probed["modules"])
    assert probed["calls"] > 1000, probed["calls"]
    answers: dict[tuple[str, str], set[str]] = {}
    for hit in probed["found"]:
        parts = exercises[hit["exercise"]]["cases"][hit["case"]][2]
        answers.setdefault((hit["function"], hit["exercise"]), set()).add(repr(parts))
    found = {key for key, distinct in answers.items() if len(distinct) >= 2}
    problems = [
        f"returns the answer of {exercise}: {function}" for function, exercise in sorted(found - set(KNOWN))
    ]
    problems += [
        f"ran out of its time, not in SLOW: {name}" for name in probed["over_budget"] if name not in SLOW
    ]
    problems += [
        f"no longer returns the answer of {exercise}, take it off KNOWN: {function}"
        for function, exercise in sorted(set(KNOWN) - found)
    ]
    assert problems == [], "\n".join(problems)
