"""The judge's choice of whether to collect a measurement again (grading/judge.py, `Check.rerun`), and the
grader's own words in the lesson's language (grading/i18n.py).

A check that measures the learner's code is collected again in a fresh sandboxed process, seconds per check. Where
the grader's machine lacks what the check needs (a GPU), that collection cannot earn a point, so the judge judges
the kernel's record instead. That is sound only while every such check calls `needs_hardware` unconditionally,
before it can pass: the first test holds every lesson's checks to it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from pathlib import Path

import pytest

from autograders import kit
from grading import judge

ROOT = Path(__file__).resolve().parents[2]
LESSON_MODULES = sorted(f"autograders.{p.stem}" for p in (ROOT / "autograders").glob("lesson[0-9][0-9].py"))


def _is(func: ast.expr, name: str) -> bool:
    """`name(...)` or `kit.name(...)`: the lessons call the kit through its module."""
    return (isinstance(func, ast.Name) and func.id == name) or (
        isinstance(func, ast.Attribute) and func.attr == name
    )


def _calls_needs_hardware(node) -> bool:
    return any(isinstance(n, ast.Call) and _is(n.func, "needs_hardware") for n in ast.walk(node))


def _rerun_checks() -> list[kit.Check]:
    for name in LESSON_MODULES:
        importlib.import_module(name)
    return [c for c in kit.REGISTRY.values() if c.rerun and c.module.startswith("autograders.lesson")]


def test_every_collected_again_check_calls_needs_hardware_unconditionally_before_it_can_pass():
    checks = _rerun_checks()
    assert len(checks) >= 6, [c.name for c in checks]  # 03 e4, 04 e3, 06 e2 e3 e5, 08 e5
    with_hardware = 0
    for declared in checks:
        tree = ast.parse(textwrap.dedent(inspect.getsource(declared.function)))
        body = tree.body[0].body
        at = [i for i, stmt in enumerate(body) if _calls_needs_hardware(stmt)]
        if not at:
            continue  # needs nothing: always collected again
        with_hardware += 1
        for i in at:
            stmt = body[i]
            assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call), (
                f"{declared.name}: needs_hardware inside a statement (a branch, a loop, a try) at line {stmt.lineno}"
            )
        early = [
            n for stmt in body[: at[0]] for n in ast.walk(stmt) if isinstance(n, (ast.Return, ast.Yield))
        ]
        assert not early, f"{declared.name}: returns before its needs_hardware (line {early[0].lineno})"
    assert with_hardware >= 5


def test_needs_hardware_is_called_only_by_the_checks_themselves():
    """Not by a helper, where a branch around it would escape the test above."""
    for name in LESSON_MODULES:
        tree = ast.parse((ROOT / "autograders" / f"{name.split('.')[-1]}.py").read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            decorated = any(isinstance(d, ast.Call) and _is(d.func, "check") for d in fn.decorator_list)
            if not decorated:
                assert not _calls_needs_hardware(fn), (
                    f"{name}.{fn.name} calls needs_hardware but is not a check"
                )


def test_a_check_that_asks_for_a_prediction_is_collected_again():
    """`kit.call_predicting` records the model ops a learner's function ran, in the process that runs it: in the
    grading kernel, code of the notebook that ran before the check could have patched that record. Only a check
    collected again in a fresh process (`rerun=True`) can trust it. A check calls it directly (a helper that called
    it for a check would escape this test, as `needs_hardware` would above)."""
    predicting = []
    for name in LESSON_MODULES:
        tree = ast.parse((ROOT / "autograders" / f"{name.split('.')[-1]}.py").read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            calls = any(isinstance(n, ast.Call) and _is(n.func, "call_predicting") for n in ast.walk(fn))
            decorators = [d for d in fn.decorator_list if isinstance(d, ast.Call) and _is(d.func, "check")]
            if not calls:
                continue
            assert decorators, f"{name}.{fn.name} calls call_predicting but is not a check"
            rerun = {k.arg: k.value for k in decorators[0].keywords}.get("rerun")
            assert isinstance(rerun, ast.Constant) and rerun.value is True, (
                f"{name}.{fn.name} is not rerun=True"
            )
            predicting.append(f"{name}.{fn.name}")
    # Exercises 1.3 and 4.1 ask for predictions of what memlab's tracker measures
    assert predicting == [
        "autograders.lesson01.check_predict_live_bytes",
        "autograders.lesson04.check_llama_layer_saved_bytes",
    ]


CHECKS = """
from autograders.kit import call, check, expect_close, needs_hardware, reference


@check("e1_twice", points=2, rerun=True)
def check_twice(fn):
    got = call(fn, 2, case="fn(2) on the CPU")
    expect_close(got, reference(lambda: 4), case="fn(2) on the CPU", what="fn(2)")
    needs_hardware(cuda=True, passed="fn(2) on the CPU")
    return 1
"""


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """A check collected again, in a module of its own; `collected` counts the judge's calls of grading.rerun.rerun,
    which gives the record the honest code would give."""
    import grading.rerun

    if kit.unmet_requirements(cuda=True) is None:
        pytest.skip("this machine has a GPU: the judge collects GPU measurements again here")
    (tmp_path / "judge_checks.py").write_text(CHECKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("judge_checks", None)
    module = importlib.import_module("judge_checks")
    declared = module.check_twice.check
    collected = []

    def fake_rerun(call, request):
        collected.append(call)
        return [kit.collect(declared, [lambda x: 2 * x], {}).to_data()], ""

    monkeypatch.setattr(grading.rerun, "rerun", fake_rerun)

    def cell(fn) -> judge.CellRequest:
        record = kit.collect(declared, [fn], {}).to_data()
        return judge.CellRequest(
            "e1_twice_check", "from judge_checks import check_twice\ncheck_twice(f)", [record]
        )

    request = judge.JudgeRequest(seed=1, cells=[], source_dir=str(tmp_path))
    return cell, request, collected


def test_a_record_that_stops_at_a_gpu_this_grader_lacks_is_not_collected_again(measured):
    cell, request, collected = measured
    verdict = judge.judge_cell(cell(lambda x: 2 * x), request)
    assert collected == []
    assert (verdict.passed, verdict.ename, verdict.flag) == (False, "NotGradedHere", "")
    assert "CUDA" in verdict.message


def test_a_record_that_fails_before_the_gpu_is_collected_again(measured):
    """The kernel's record fails on the CPU: the fresh record (here, the honest one) is what is judged."""
    cell, request, collected = measured
    verdict = judge.judge_cell(cell(lambda x: 3 * x), request)
    assert len(collected) == 1
    assert (verdict.passed, verdict.ename) == (False, "NotGradedHere")


def test_a_forged_record_is_collected_again(measured):
    cell, request, collected = measured
    forged = cell(lambda x: 2 * x)
    forged.transcripts[0]["records"][0]["label"] = "fn(3) on the CPU"  # not this check's step
    judge.judge_cell(forged, request)
    assert len(collected) == 1


# ---- the grader's own words, in the lesson's language (grading/i18n.py) -------------------------------------------


def test_the_graders_notes_and_verdicts_speak_the_language_set(tmp_path):
    """A worker sets its notebook's language once; a note or a verdict of the grader's own is then in it."""
    from grading.batch import _edition_notes, _student_notes
    from grading.submission import Refused, read_submission
    from memlab import i18n

    (tmp_path / "00-fixture").mkdir()
    (tmp_path / "00-fixture" / "00-fixture.ipynb").write_bytes(b"")
    fixture = ROOT / "tests" / "fixtures" / "minicourse" / "solutions" / "00-fixture"
    request = judge.JudgeRequest(seed=1, cells=[], source_dir=str(fixture))
    silent = judge.CellRequest(
        "e1_square_check", "from fixture_checks import check_square\ncheck_square(f)", []
    )
    try:
        i18n.set_language("ko")
        with pytest.raises(Refused, match=r"00-fixture\.ipynb 파일이 비어 있습니다\(0바이트\)"):
            read_submission(tmp_path / "00-fixture", "00-fixture")
        verdict = judge.judge_cell(silent, request)
        assert (
            verdict.ename == "GradingError"
            and "e1_square 검사의 기록을 보여 주지 않았습니다" in verdict.message
        )
    finally:
        i18n.set_language("en")
    # grade.py's threads name each row's language instead
    assert _student_notes(".hidden", "ko") == [
        "학생 폴더 이름이 '.'으로 시작합니다(대부분의 시스템에서 숨김 폴더). 학생 폴더가 맞는지 확인하세요"
    ]
    assert (
        _edition_notes("ko") == ["한국어판(ko) 기준으로 채점했습니다(ko/solutions/)"]
        and _edition_notes("en") == []
    )
    assert _student_notes(".hidden", "en")[0].startswith("the student folder's name starts with '.'")
    verdict = judge.judge_cell(silent, judge.JudgeRequest(seed=1, cells=[], source_dir=str(tmp_path)))
    assert "showed no record of the check e1_square" in verdict.message
