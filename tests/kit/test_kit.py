"""The check kit (autograders/kit.py) keeps the check contract (its module docstring).

A check prints one `✓` line and returns None on success; on failure it raises one `CheckFailed` whose message
names the check and the case and says what was expected, what was got and the tolerance, with no traceback from
inside the kit. An unwritten exercise fails at the first stage. `needs_hardware` says NOT CHECKED HERE (learner mode)
or raises NotGradedHere (strict grading) after the stages that run anywhere.
"""

import linecache
import math
import os
import traceback

import pytest
import torch
from check_helpers import assert_hidden

import autograders.kit as kit
import memlab.hardware as hardware
from autograders.kit import (
    CheckFailed,
    NotGradedHere,
    call,
    check,
    expect_callable,
    expect_close,
    expect_equal,
    expect_keys,
    expect_type,
    how_far,
    needs_hardware,
)

KIT_FILE = os.path.abspath(kit.__file__)
THIS_FILE = os.path.abspath(__file__)


def fake_gpu(monkeypatch, capability=(7, 5), total_gb=15.0):
    info = {"name": "Tesla T4", "capability": capability, "total_gb": total_gb, "free_gb": total_gb - 1}
    monkeypatch.setattr(hardware, "gpu_info", lambda index=0: info)


# ---- a tiny check written with the kit, as a lesson's autograder would be ----------------------------------


@check("e9_double", points=1)
def check_double(double) -> int:
    """The learner writes double(x) = 2x; the case at x=5 is the one that tells wrong answers apart."""
    expect_callable(double, "double")
    cases = [(0, 0), (5, 10), (-3, -6)]
    for x, expected in cases:
        got = call(double, x, case=f"x={x}")
        expect_close(got, expected, case=f"x={x}", what="double(x)")
    return len(cases)


@check("e9_secret", points=1)
def check_secret(secret) -> int:
    """An exercise whose answer must stay hidden (reveal=False)."""
    got = call(secret, case="the only case")
    expect_close(got, 123_457, case="the only case", what="the answer", rtol=1e-3, reveal=False)
    return 1


@check("e9_count", points=1)
def check_count(count) -> int:
    got = call(count, case="ten items")
    expect_type(got, int, case="ten items", what="the count")
    expect_close(got, 10, case="ten items", what="the count")
    return 1


def raised(check_fn, learner_fn) -> CheckFailed:
    with pytest.raises(CheckFailed) as info:
        check_fn(learner_fn)
    return info.value


def assert_clean_traceback(error: BaseException) -> None:
    """Only this test file and at most the kit's `run` wrapper (which raises) in the traceback; no chained cause."""
    frames = traceback.extract_tb(error.__traceback__)
    files = [os.path.abspath(f.filename) for f in frames]
    assert set(files) <= {THIS_FILE, KIT_FILE}, files
    kit_frames = [f for f in frames if os.path.abspath(f.filename) == KIT_FILE]
    assert len(kit_frames) <= 1, kit_frames
    assert all(f.name == "run" for f in kit_frames), kit_frames
    assert error.__cause__ is None
    assert error.__suppress_context__ is True


# ---- success -------------------------------------------------------------------------------------------------


def test_success_prints_one_line_and_returns_none(capsys):
    assert check_double(lambda x: 2 * x) is None
    assert capsys.readouterr().out == "✓ e9_double: 3 cases passed\n"


def test_success_with_one_case_says_case_not_cases(capsys):
    assert check_secret(lambda: 123_457) is None
    assert capsys.readouterr().out == "✓ e9_secret: 1 case passed\n"


def test_check_keeps_its_name_and_docstring():
    assert check_double.check_name == "e9_double"
    assert check_double.__name__ == "check_double"
    assert "double(x) = 2x" in check_double.__doc__


def test_within_tolerance_passes_and_the_edge_counts_as_inside(capsys):
    expect_close(101, 100, case="c", what="v", rtol=0.01)  # |101-100| == 0.01*100: on the edge, passes
    expect_close(164, 100, case="c", what="v", atol=64)
    expect_close(7, 7, case="c", what="v")
    assert capsys.readouterr().out == ""


# ---- failures: the message ------------------------------------------------------------------------------------


def test_failure_is_an_assertion_error_naming_check_case_expected_got_tolerance(capsys):
    error = raised(check_double, lambda x: 2 * x + 1)
    assert isinstance(error, AssertionError)
    message = str(error)
    assert message.startswith("e9_double: case x=0: ")
    assert message == "e9_double: case x=0: expected double(x) = 0 (exactly); got 1."
    assert "✓" not in capsys.readouterr().out
    assert_clean_traceback(error)


def test_failure_names_the_case_that_failed():
    error = raised(check_double, lambda x: x * x if x == 5 else 2 * x)
    assert str(error) == "e9_double: case x=5: expected double(x) = 10 (exactly); got 25."


def test_failure_message_states_relative_and_absolute_tolerance():
    with pytest.raises(CheckFailed) as info:
        expect_close(2_000_000, 1_234_567, case="big", what="the bytes", rtol=1e-3, atol=64)
    assert str(info.value) == (
        "case big: expected the bytes = 1,234,567 (tolerance ±0.001 relative + ±64 absolute); got 2,000,000."
    )


@pytest.mark.parametrize(("got", "direction"), [(200_000, "too high"), (100_000, "too low")])
def test_reveal_false_hides_the_expected_value_but_says_which_way(got, direction):
    error = raised(check_secret, lambda: got)
    message = str(error)
    assert message.startswith("e9_secret: case the only case: the answer is ")
    assert direction in message
    assert f"you got {got:,}" in message
    assert "tolerance ±0.001 relative" in message
    for spelling in ("123457", "123,457", "123457.0", "1.23457e+05", "expected the answer ="):
        assert spelling not in message


def test_reveal_false_with_an_expected_zero_says_which_way():
    with pytest.raises(CheckFailed, match=r"^case c: v is too high: you got 5 \(exactly\)\.$"):
        expect_close(5, 0, case="c", what="v", reveal=False)


@pytest.mark.parametrize(
    ("got", "expected", "words"),
    [
        (1000, 52_356, "too low, by more than a factor of 10"),
        (100.5, 99.9, "too high, by less than 1%"),
        (95, 100, "too low, by 1% to 10%"),
        (150, 100, "too high, by 10% to a factor of 2"),
        (-4, -1, "too high, by a factor of 2 to 10"),
        (-1, 3, "of the wrong sign"),
        (0, 7, "zero where it should not be"),
    ],
)
def test_how_far_says_direction_and_a_band_never_a_ratio(got, expected, words):
    assert how_far(got, expected) == words
    with pytest.raises(CheckFailed) as info:
        expect_close(got, expected, case="c", what="v", reveal=False)
    message = str(info.value)
    assert words in message
    assert "x the expected" not in message
    assert_hidden(message, expected)


def test_expect_equal_reveals_or_hides():
    with pytest.raises(CheckFailed, match=r"expected the dtype = 'bf16'; got 'fp16'"):
        expect_equal("fp16", "bf16", case="c", what="the dtype")
    with pytest.raises(CheckFailed) as info:
        expect_equal("fp16", "bf16", case="c", what="the dtype", reveal=False)
    assert "bf16" not in str(info.value)
    assert "not right: got 'fp16'" in str(info.value)


def test_expect_keys_lists_what_is_missing_and_what_is_there():
    with pytest.raises(CheckFailed, match=r"missing the key\(s\) \['b'\]; it has \['a', 'c'\]"):
        expect_keys({"c": 1, "a": 2}, ["a", "b"], case="c", what="the dict")
    with pytest.raises(CheckFailed, match="the dict should be a dict; got a list"):
        expect_keys([1, 2], ["a"], case="c", what="the dict")


# ---- failures: the learner's function raises -----------------------------------------------------------------


def test_learner_value_error_gives_type_message_and_line():
    def double(x):
        raise ValueError("negative sizes are not allowed")  # learner-line-value

    error = raised(check_double, double)
    message = str(error)
    assert message.startswith(
        "e9_double: case x=0: your function raised ValueError: negative sizes are not allowed"
    )
    assert f"of {THIS_FILE}" in message
    assert "# learner-line-value" in message  # the learner's own source line is quoted
    assert_clean_traceback(error)


def _learner_helper(x):
    zero = x - x
    return x / zero  # learner-line-zero


def test_error_in_nested_learner_code_points_at_the_innermost_line():
    def double(x):
        return 2 * _learner_helper(x)

    error = raised(check_double, double)
    lineno = _learner_helper.__code__.co_firstlineno + 2
    assert "your function raised ZeroDivisionError: division by zero" in str(error)
    assert f"(at line {lineno} of {THIS_FILE}: return x / zero  # learner-line-zero)" in str(error)
    assert_clean_traceback(error)


def test_the_stub_says_not_written_yet():
    def double(x):
        # YOUR CODE HERE
        raise NotImplementedError()

    error = raised(check_double, double)
    assert str(error) == "e9_double: `double` is not written yet: it still raises NotImplementedError."
    assert_clean_traceback(error)


def test_torch_not_implemented_for_a_dtype_is_not_called_unwritten():
    """torch raises NotImplementedError (with a message) for a missing kernel: that is a bug, not a stub."""

    def double(x):
        t = torch.full((1,), float(x)).to(torch.float8_e4m3fn)
        return float(t.sum()) * 2  # learner-line-fp8

    error = raised(check_double, double)
    message = str(error)
    assert "not written yet" not in message
    assert "your function raised NotImplementedError:" in message
    assert "Float8_e4m3fn" in message
    assert "# learner-line-fp8" in message
    assert_clean_traceback(error)


def test_code_from_a_notebook_cell_is_called_your_code(monkeypatch):
    filename = "<ipython-input-7-0123456789ab>"
    source = "def double(x):\n    scale = {'two': 2}\n    return x * scale['three']\n"
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    monkeypatch.setitem(linecache.cache, filename, (len(source), None, source.splitlines(True), filename))

    error = raised(check_double, namespace["double"])
    assert str(error) == (
        "e9_double: case x=0: your function raised KeyError: 'three' "
        "(at line 3 of your code: return x * scale['three'])"
    )


# ---- failures: wrong type, NaN, inf ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "described"),
    [
        ("10", "a str ('10')"),
        (None, "a NoneType (None)"),
        (torch.tensor(10), "a Tensor (tensor(10))"),
        (True, "a bool (True)"),
        (10.0, "a float (10.0)"),
    ],
)
def test_wrong_type_is_said_plainly(returned, described):
    error = raised(check_count, lambda: returned)
    assert str(error).startswith("e9_count: case ten items: the count should be a")
    assert str(error).endswith(f" int; got {described}.")
    assert_clean_traceback(error)


def test_bool_is_not_accepted_as_a_number_by_expect_close():
    with pytest.raises(CheckFailed, match=r"should be a number; got a bool \(True\)"):
        expect_close(True, 1, case="c", what="v")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_said_not_to_be_finite(value):
    error = raised(check_double, lambda x: value)
    assert str(error) == f"e9_double: case x=0: double(x) should be a finite number; got {value}."


def test_long_values_are_shortened_in_the_message():
    error = raised(check_count, lambda: "x" * 500)
    assert "..." in str(error)
    assert len(str(error)) < 150


# ---- not the learner's fault ---------------------------------------------------------------------------------


def test_a_bug_in_the_check_is_reported_as_the_check_crashing():
    @check("e9_buggy", points=1)
    def check_buggy(fn) -> int:
        got = call(fn, case="c")
        return got + "cases"  # the check's own TypeError

    with pytest.raises(RuntimeError) as info:
        check_buggy(lambda: 3)
    error = info.value
    assert not isinstance(error, CheckFailed)
    assert str(error).startswith("e9_buggy: the check itself crashed (TypeError: ")
    assert "your function" not in str(error)
    assert isinstance(error.__cause__, TypeError)  # kept for whoever fixes the check


def test_expect_callable_says_not_defined_yet():
    with pytest.raises(CheckFailed, match=r"^`double` is not defined yet \(it is None\)"):
        expect_callable(None, "double")
    with pytest.raises(CheckFailed, match="`double` should be a function; got an? int"):
        expect_callable(3, "double")
    expect_callable(print, "print")


def test_check_given_none_fails_cleanly():
    error = raised(check_double, None)
    assert str(error).startswith("e9_double: `double` is not defined yet")
    assert_clean_traceback(error)


# ---- stages: an unwritten exercise fails first, then what runs here, then the hardware ---------------------------

NO_CUDA = "NOT CHECKED HERE: needs a CUDA GPU, found no CUDA GPU"


def _define(source: str, name: str, filename: str = "<ipython-input-3-5ca1ab1e>"):
    """Define `name` from `source` as a notebook cell would (its source readable through linecache)."""
    namespace = {"torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return namespace[name]


STUB = "def gpu_double(x, device='cuda'):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
WRITTEN = "def gpu_double(x, device='cuda'):\n    return 2 * torch.as_tensor(x, device=device)\n"


@check("e9_gpu_double", points=1)
def check_gpu_double(gpu_double) -> int:
    """A GPU exercise in the kit's stages: callable and written, a tiny CPU run, then the GPU part."""
    expect_callable(gpu_double, "gpu_double")
    got = call(gpu_double, 3, device="cpu", case="gpu_double(3) on the CPU")
    expect_type(got, torch.Tensor, case="gpu_double(3) on the CPU", what="the result")
    needs_hardware(cuda=True, passed="a tiny run on the CPU")
    got = call(gpu_double, 3, case="gpu_double(3) on the GPU")
    expect_equal(got.device.type, "cuda", case="gpu_double(3) on the GPU", what="the device")
    return 2


def test_a_stub_fails_before_anything_runs_on_any_machine(no_gpu, learner_mode, capsys):
    error = raised(check_gpu_double, _define(STUB, "gpu_double"))
    assert (
        str(error) == "e9_gpu_double: `gpu_double` is not written yet: it still raises NotImplementedError."
    )
    assert "NOT CHECKED HERE" not in capsys.readouterr().out


def test_a_stub_fails_when_grading_strictly_too(no_gpu, strict_mode):
    with pytest.raises(CheckFailed, match="not written yet"):
        check_gpu_double(_define(STUB, "gpu_double"))


def test_written_gpu_exercise_on_a_cpu_machine_says_what_passed(no_gpu, learner_mode, capsys):
    assert check_gpu_double(_define(WRITTEN, "gpu_double")) is None
    out = capsys.readouterr().out
    assert (
        " ".join(out.split())
        == f"e9_gpu_double: {NO_CUDA}. What can be checked here passed: a tiny run on the CPU."
    )
    assert max(len(line) for line in out.splitlines()) <= 110, out  # wrapped to the lessons' width
    assert "✓" not in out


def test_written_gpu_exercise_when_grading_strictly_raises_not_graded_here(no_gpu, strict_mode, capsys):
    with pytest.raises(NotGradedHere) as info:
        check_gpu_double(_define(WRITTEN, "gpu_double"))
    assert str(info.value) == NO_CUDA
    assert info.value.__suppress_context__ is True
    assert not isinstance(info.value, CheckFailed)
    assert capsys.readouterr().out == ""


def test_a_wrong_cpu_stage_fails_before_the_hardware_is_looked_at(no_gpu, learner_mode):
    wrong = _define("def gpu_double(x, device='cuda'):\n    return [2 * x]\n", "gpu_double")
    error = raised(check_gpu_double, wrong)
    assert "the result should be a Tensor; got a list" in str(error)


def test_a_stub_without_readable_source_fails_at_the_first_call(no_gpu, learner_mode):
    namespace = {}
    exec(compile(STUB, "<string>", "exec"), namespace)  # no linecache entry: the source cannot be read
    error = raised(check_gpu_double, namespace["gpu_double"])
    assert "your function raised NotImplementedError: it is not written yet." in str(error)


def test_a_class_with_some_methods_still_stubs_is_not_finished():
    source = (
        "class Scaler:\n"
        "    def __init__(self):\n        self.s = 1.0\n"
        "    def scale(self, x):\n        # YOUR CODE HERE\n        raise NotImplementedError()\n"
        "    def update(self):\n        raise NotImplementedError\n"
    )
    with pytest.raises(CheckFailed) as info:
        expect_callable(_define(source, "Scaler"), "Scaler")
    assert str(info.value) == (
        "`Scaler` is not finished: `Scaler.scale`, `Scaler.update` still raise NotImplementedError."
    )


def test_a_function_that_raises_only_on_one_branch_is_written():
    source = "def f(x):\n    if x < 0:\n        raise NotImplementedError()\n    return x\n"
    expect_callable(_define(source, "f"), "f")


def test_needs_hardware_with_a_missing_package(learner_mode, capsys):
    @check("e9_needs_pkg", points=1)
    def check_pkg(fn) -> int:
        needs_hardware(packages=("definitely_not_a_pkg",))
        return 1

    assert check_pkg(None) is None
    assert " ".join(capsys.readouterr().out.split()) == (
        "e9_needs_pkg: NOT CHECKED HERE: needs the package definitely_not_a_pkg, found definitely_not_a_pkg not "
        "importable."
    )


def test_needs_hardware_that_is_present_lets_the_check_go_on(strict_mode, capsys):
    @check("e9_has_pkg", points=1)
    def check_pkg(fn) -> int:
        needs_hardware(packages=("torch",))
        return 2

    assert check_pkg(None) is None
    assert capsys.readouterr().out == "✓ e9_has_pkg: 2 cases passed\n"


def test_needs_hardware_with_a_gpu_that_is_too_small(monkeypatch, learner_mode, capsys):
    fake_gpu(monkeypatch, capability=(8, 0), total_gb=15.0)

    @check("e9_big_gpu", points=1)
    def check_big(fn) -> int:
        needs_hardware(cuda=True, min_gpu_gb=24)
        return 1

    assert check_big(None) is None
    assert capsys.readouterr().out == (
        "e9_big_gpu: NOT CHECKED HERE: needs a GPU with >= 24 GiB, found Tesla T4 with 15.0 GiB.\n"
    )


def test_the_grading_mode_is_read_once_at_import(kit_context, monkeypatch, no_gpu):
    """Popping COURSE_GRADING after the kit is imported does not turn strict grading into learner mode."""
    kit_context(kit.STRICT)
    monkeypatch.delenv(kit.GRADING_ENV, raising=False)
    with pytest.raises(NotGradedHere):
        check_gpu_double(_define(WRITTEN, "gpu_double"))


def test_a_check_that_returns_no_count_is_a_broken_check():
    broken = check("e9_broken", points=1)(lambda fn: None)
    with pytest.raises(RuntimeError, match="the check itself is broken"):
        broken(None)


# ---- one check, two places: collected in the grading kernel, judged outside it -------------------------------------

REFERENCE_RUNS = []


@check("e9_triple", points=1)
def check_triple(triple) -> int:
    """A check whose expected values come from a reference step (as measurements and drawn answers do)."""
    expect_callable(triple, "triple")
    cases = [1, 4, 2.5]
    for x in cases:
        got = call(triple, x, case=f"x={x}")
        expected = kit.reference(lambda x=x: REFERENCE_RUNS.append(x) or 3 * x)
        expect_close(got, expected, case=f"x={x}", what="triple(x)", reveal=False)
    return len(cases)


def collected(check_fn, learner_fn):
    """The transcript a grading kernel would show, as the judge receives it (JSON)."""
    import json

    transcript = kit.collect(check_fn.check, (learner_fn,), {})
    return kit.Transcript.from_data(json.loads(json.dumps(transcript.to_data())))


def test_the_grading_kernel_collects_without_computing_what_is_expected():
    REFERENCE_RUNS.clear()
    transcript = collected(check_triple, lambda x: 3 * x)
    assert REFERENCE_RUNS == []  # no expected value ever existed in the kernel
    assert [r.label for r in transcript.records] == ["`triple` is written", "x=1", "x=4", "x=2.5"]
    assert kit.judge(check_triple.check, transcript) == kit.Verdict(True, cases=3)
    assert REFERENCE_RUNS == [1, 4, 2.5]


def test_the_judge_says_what_a_learner_is_told():
    wrong = lambda x: 3 * x + (x == 4)  # noqa: E731
    verdict = kit.judge(check_triple.check, collected(check_triple, wrong))
    assert not verdict.passed
    assert verdict.message == str(raised(check_triple, wrong))
    assert "triple(x) is too high" in verdict.message


def test_a_forged_transcript_is_judged_by_its_values():
    transcript = collected(check_triple, lambda x: 0)
    transcript.records[2].value = kit.wire.encode(12)  # the right answer for x=4, forged: still only data
    verdict = kit.judge(check_triple.check, transcript)
    assert not verdict.passed and "case x=1" in verdict.message


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (lambda t: t.records.pop(), "the record ends before the step 'x=2.5'"),
        (lambda t: setattr(t.records[1], "label", "x=100"), "the step 'x=1' was recorded as 'x=100'"),
        (lambda t: t.records.append(t.records[-1]), "1 step(s) the check never took"),
        (lambda t: setattr(t.records[1], "value", ["float", "not hex"]), "malformed"),
        (lambda t: setattr(t, "check", "e1_other"), "the record is of another check"),
    ],
)
def test_a_transcript_that_does_not_match_the_check_fails(tamper, words):
    transcript = collected(check_triple, lambda x: 3 * x)
    tamper(transcript)
    verdict = kit.judge(check_triple.check, transcript)
    assert not verdict.passed
    assert words in verdict.message


class Liar(float):
    """An object that says it equals whatever it is compared with."""

    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class Sneaky:
    def __float__(self):
        return 3.0


@pytest.mark.parametrize("liar", [Liar(0.0), Sneaky()], ids=["float-subclass", "has-__float__"])
def test_an_object_that_lies_is_refused_in_the_notebook_and_under_grading(liar):
    error = raised(check_triple, lambda x: liar)
    assert "case x=1: what your code gave in case x=1 is a" in str(error)
    assert "a check takes only numbers, strings, bool, None, lists, tuples and dicts" in str(error)
    verdict = kit.judge(check_triple.check, collected(check_triple, lambda x: liar))
    assert verdict.message == str(error)


def test_a_learner_object_used_outside_a_learner_step_is_a_bug_of_the_check():
    @check("e9_sloppy", points=1)
    def check_sloppy(fn) -> int:
        expect_equal(fn.__name__, "f", case="c", what="the name")  # reads the learner's object directly
        return 1

    transcript = kit.collect(check_sloppy.check, (lambda: 0,), {})
    with pytest.raises(RuntimeError, match="was used outside a learner step"):
        kit.judge(check_sloppy.check, transcript)


def test_a_check_is_declared_once_with_its_points():
    declared = check_triple.check
    assert (declared.name, declared.points, declared.cell) == ("e9_triple", 1.0, "e9_triple_check")
    assert kit.REGISTRY[f"{__name__}:e9_triple"] is declared


# ---- memlab.hardware ---------------------------------------------------------------------------------------------


def test_unmet_requirements_none_when_nothing_is_needed(no_gpu):
    assert hardware.unmet_requirements() is None
    assert hardware.unmet_requirements(packages=("torch", "math")) is None


def test_unmet_requirements_without_a_gpu(no_gpu):
    assert hardware.unmet_requirements(cuda=True) == ("a CUDA GPU", "no CUDA GPU")
    assert hardware.unmet_requirements(min_capability=(8, 9)) == (
        "a CUDA GPU (compute capability >= 8.9)",
        "no CUDA GPU",
    )
    assert hardware.unmet_requirements(min_gpu_gb=24) == ("a CUDA GPU (>= 24 GiB)", "no CUDA GPU")
    assert hardware.unmet_requirements(cuda=True, min_capability=(9, 0), min_gpu_gb=40.5) == (
        "a CUDA GPU (compute capability >= 9.0, >= 40.5 GiB)",
        "no CUDA GPU",
    )


def test_unmet_requirements_packages(no_gpu):
    assert hardware.unmet_requirements(packages=("definitely_not_a_pkg",)) == (
        "the package definitely_not_a_pkg",
        "definitely_not_a_pkg not importable",
    )
    needs, found = hardware.unmet_requirements(
        cuda=True, packages=("torch", "no_such_pkg_a", "no_such_pkg_b")
    )
    assert needs == "a CUDA GPU, the package no_such_pkg_a, the package no_such_pkg_b"
    assert found == "no CUDA GPU, no_such_pkg_a not importable, no_such_pkg_b not importable"


def test_unmet_requirements_with_a_gpu_too_old_and_too_small(monkeypatch):
    fake_gpu(monkeypatch, capability=(7, 5), total_gb=15.0)
    assert hardware.unmet_requirements(cuda=True) is None
    assert hardware.unmet_requirements(min_capability=(7, 5), min_gpu_gb=15) is None
    assert hardware.unmet_requirements(min_capability=(8, 9)) == (
        "compute capability >= 8.9",
        "Tesla T4 (capability 7.5)",
    )
    assert hardware.unmet_requirements(min_gpu_gb=24) == ("a GPU with >= 24 GiB", "Tesla T4 with 15.0 GiB")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what this machine (no CUDA GPU) reports")
def test_preflight_on_this_machine(capsys):
    report = hardware.preflight(verbose=False)
    assert isinstance(report, dict)
    assert report["torch"] == torch.__version__
    assert report["gpu"] is None
    assert set(report) >= {"python", "torch", "transformers", "peft", "bitsandbytes", "gpu"}
    assert capsys.readouterr().out == ""

    hardware.preflight()
    out = capsys.readouterr().out
    assert all(len(line) <= 110 for line in out.splitlines()), out  # wrapped at " | " to the lessons' width
    line = " ".join(out.split())
    assert f"torch {torch.__version__}" in line
    assert "CPU only (no CUDA GPU)" in line


def test_format_preflight_with_a_gpu():
    report = {
        "python": "3.12.0",
        "torch": "2.13.0",
        "transformers": "5.0",
        "peft": None,
        "bitsandbytes": None,
        "transformer_engine": None,
        "gpu": {"name": "NVIDIA H100", "capability": (9, 0), "total_gb": 79.1, "free_gb": 78.5},
    }
    line = hardware.format_preflight(report)
    assert line.endswith("NVIDIA H100 (sm_90), 78.5 of 79.1 GiB free")
    assert "peft —" in line


def test_cached_answers_of_the_checks_cannot_be_rewritten():
    """A check's cached table of expected answers is reachable from submitted code: it must refuse to change."""
    from autograders import lesson02, lesson03, lesson04, lesson05, lesson07

    table = lesson02.public_ulps()
    with pytest.raises(TypeError):
        table["fp32"]["0x1.0000000000000p+0"] = 0.0
    with pytest.raises(TypeError):
        table["fp32"] = {}
    with pytest.raises(TypeError):
        lesson02.public_limits()["fp16"]["max"] = 0.0
    for cached in (
        lesson03.public_underflow(),
        lesson04.stored(),
        lesson05.public_zero_bytes(),
        lesson07.stored(),
    ):
        key = next(iter(cached))
        with pytest.raises(TypeError):
            cached[key] = None
    assert kit.read_only({"a": [1, {"b": [2]}]}) == {"a": (1, {"b": (2,)})}
