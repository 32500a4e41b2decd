"""The judge: every check cell's verdict, reached in a process that never runs submitted code.

    python -m grading.judge < REQUEST.json        (started by grading.autograde.JudgeChecks; prints its reply)

(Under scripts/grade.py the same `judge_all` runs in the notebook's own worker process, which grades that notebook
only and never executes submitted code either: `GradingSettings.judge_in_process`.)

The request holds, per check cell, the cell's locked source (`from autograders.lesson01 import check_x` and the
call), the transcripts the cell showed (plain data, autograders/kit.py) and its error, if any; the student's seed of
drawn cases; and, for checks that measure the learner's code (`Check.rerun`), the notebook's code so that a fresh
sandboxed process can collect them again from the learner's definitions alone (grading/rerun.py).

For each cell the judge imports the check from the course's own kit (trusted: never from the submission's folder),
replays the transcript (`autograders.kit.judge`): each learner step returns what the kernel recorded, each
reference step computes the expected value here, and the comparisons decide. A transcript that does not follow the
check's own steps fails, and is flagged: honest code cannot produce one.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import os
import sys

from grading.i18n import _
from grading.settings import Settings


@dataclasses.dataclass
class CellRequest:
    grade_id: str
    source: str  # the locked source of the check cell
    transcripts: list  # what the cell showed (possibly forged: plain data only)
    error: str = ""  # the cell's own error, if it had one


@dataclasses.dataclass
class JudgeRequest:
    seed: int  # this student's seed of the drawn cases (memlab.protocol.student_seed)
    cells: list[CellRequest]
    #: how the notebook is graded (its kit_dir: the kit copy a rerun's sandbox imports, "" with isolation off)
    settings: Settings = dataclasses.field(default_factory=Settings)
    #: [code, is the lesson's own cell] for the notebook's code cells, in order: what a rerun loads (grading/rerun.py)
    definitions: list[list] = dataclasses.field(default_factory=list)
    workdir: str = ""
    source_dir: str = ""  # the lesson's source folder: where a check module that is not in the kit lives
    #: the lesson's language (its source notebook's metadata): the language of the verdicts' messages
    language: str = "en"
    #: {name: source} of the modules handed in next to the notebook, which a rerun may import (grading/rerun.py)
    modules: dict = dataclasses.field(default_factory=dict)

    def to_data(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_data(cls, data: dict) -> JudgeRequest:
        return cls(
            **{
                **data,
                "cells": [CellRequest(**c) for c in data["cells"]],
                "settings": Settings.from_data(data.get("settings", {})),
            }
        )


@dataclasses.dataclass
class CellVerdict:
    grade_id: str
    passed: bool
    message: str  # the success line, or why the cell lost its points
    ename: str = "CheckFailed"  # the error's name when it did not pass
    kernel_error: bool = False  # no transcript, because the cell itself failed: keep the cell's own error
    flag: str = ""  # evidence of tampering, for a human to read
    #: what work handed in (lesson 08's adapter) learned, as a short vector compared across the class (kit.signature)
    signature: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class JudgeReply:
    verdicts: list[CellVerdict]

    def to_data(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_data(cls, data: dict) -> JudgeReply:
        return cls([CellVerdict(**v) for v in data["verdicts"]])


@dataclasses.dataclass(frozen=True)
class CheckCall:
    """What a check cell's locked source calls: the check (module, function) and the names of its arguments."""

    module: str
    function: str
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...]


def parse_check_cell(source: str) -> CheckCall | None:
    """The check call of a check cell (`from M import check_x` then `check_x(a, b)`), or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    imported = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Name) and call.func.id in imported:
                module, function = imported[call.func.id]
                args = tuple(ast.unparse(a) for a in call.args)
                kwargs = tuple((k.arg, ast.unparse(k.value)) for k in call.keywords if k.arg)
                return CheckCall(module, function, args, kwargs)
    return None


def import_course_module(name: str, source_dir: str):
    """The module `name` as an import finds it; failing that, from the lesson's source folder `source_dir` (the tests'
    fixture lesson keeps its checks next to its notebook), found last as if `source_dir` ended sys.path, without
    putting it there. It is registered in sys.modules under `name`, so that a check cell's own `from name import ...`
    in this process gets the same module."""
    top = name.partition(".")[0]
    if source_dir and top not in sys.modules and importlib.util.find_spec(top) is None:
        package = os.path.join(source_dir, top)
        if os.path.isfile(os.path.join(package, "__init__.py")):
            spec = importlib.util.spec_from_file_location(
                top, os.path.join(package, "__init__.py"), submodule_search_locations=[package]
            )
        elif os.path.isfile(package + ".py"):
            spec = importlib.util.spec_from_file_location(top, package + ".py")
        else:
            spec = None
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules[top] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(top, None)
                raise
    return importlib.import_module(name)


def load_check(call: CheckCall, source_dir: str):
    """The Check object `call` names, imported from the course's kit or the lesson's source folder."""
    if not call.module.startswith(("autograders.", "memlab.")):
        module = import_course_module(call.module, source_dir)
    else:
        module = importlib.import_module(call.module)
    function = getattr(module, call.function, None)
    declared = getattr(function, "check", None)
    if declared is None:
        raise LookupError(f"{call.module}.{call.function} is not a check")
    return declared


def judge_cell(cell: CellRequest, request: JudgeRequest) -> CellVerdict:
    from autograders import kit

    call = parse_check_cell(cell.source)
    if call is None:
        return CellVerdict(cell.grade_id, False, _("the check cell calls no check"), ename="GradingError")
    declared = load_check(call, request.source_dir)
    if declared.cell != cell.grade_id:
        text = _("the cell {grade_id} calls the check of {other}").format(
            grade_id=cell.grade_id, other=declared.cell
        )
        return CellVerdict(cell.grade_id, False, text, ename="GradingError", flag=text)
    if declared.rerun and not _unwritten_in_kernel(cell):
        not_here = _judged_not_gradable_here(declared, call, cell)
        if not_here is not None:
            return _cell_verdict(cell, declared, not_here)
        from grading.rerun import rerun

        transcripts, error = rerun(call, request)
        if error:
            return CellVerdict(cell.grade_id, False, error, ename="RerunFailed")
    else:
        transcripts = cell.transcripts
    if not transcripts:
        if cell.error:
            return CellVerdict(cell.grade_id, False, cell.error, ename="Error", kernel_error=True)
        text = _(
            "the cell ran without an error, but showed no record of the check {name} "
            "(was the check replaced, skipped or silenced?)"
        ).format(name=declared.name)
        return CellVerdict(cell.grade_id, False, text, ename="GradingError", flag=f"{cell.grade_id}: {text}")
    if len(transcripts) > 1:
        text = _("the cell showed {count} records of its check (one run shows one)").format(
            count=len(transcripts)
        )
        return CellVerdict(cell.grade_id, False, text, ename="GradingError", flag=f"{cell.grade_id}: {text}")
    try:
        transcript = kit.Transcript.from_data(transcripts[0])
    except (ValueError, TypeError, KeyError) as malformed:
        text = _("the record of the check is malformed ({why})").format(why=malformed)
        return CellVerdict(cell.grade_id, False, text, ename="GradingError", flag=f"{cell.grade_id}: {text}")
    return _cell_verdict(
        cell, declared, kit.judge(declared, transcript, len(call.args), [k for k, _value in call.kwargs])
    )


def _cell_verdict(cell: CellRequest, declared, verdict) -> CellVerdict:
    """The cell's verdict from its check's (kit.Verdict)."""
    from autograders import kit

    if (
        verdict.passed and cell.error
    ):  # the check passed, but something else in its cell failed (a hidden test)
        return CellVerdict(cell.grade_id, False, cell.error, ename="Error", kernel_error=True)
    if verdict.passed:
        line = kit.success_line(declared.name, verdict.cases)
        return CellVerdict(cell.grade_id, True, line, signature=list(verdict.signature))
    flag = f"{cell.grade_id}: {verdict.message}" if verdict.forged else ""
    ename = "NotGradedHere" if verdict.not_graded else "CheckFailed"
    return CellVerdict(
        cell.grade_id, False, verdict.message, ename=ename, flag=flag, signature=list(verdict.signature)
    )


def _kernel_record(cell: CellRequest):
    """The kernel's one record of the check (kit.Transcript), or None: none, several, or malformed."""
    from autograders import kit

    if len(cell.transcripts) != 1:
        return None
    try:
        return kit.Transcript.from_data(cell.transcripts[0])
    except (ValueError, TypeError, KeyError):
        return None


def _unwritten_in_kernel(cell: CellRequest) -> bool:
    """The kernel's one record of the check stopped because the learner's code is not written (kit.stopped_unwritten):
    then there is nothing to measure again, and the kernel's record is judged."""
    from autograders import kit

    record = _kernel_record(cell)
    return record is not None and kit.stopped_unwritten(record)


def _judged_not_gradable_here(declared, call: CheckCall, cell: CellRequest):
    """The verdict on the kernel's one record of the check where, judged here, it ends at a `needs_hardware` this
    machine does not meet (a grader without a GPU); else None. Then the check is not collected again: the collection
    again (a sandboxed process that imports torch and loads the learner's definitions: seconds per check) could not
    earn a point here: a check calls `needs_hardware` before any pass, never around a branch or after a return
    (tests/grader/test_judge.py checks every check that is collected again), so a fresh record either fails a stage before
    it (no point) or stops at it (no point). A forged record that stops there earns nothing either."""
    from autograders import kit

    record = _kernel_record(cell)
    if record is None:
        return None
    try:
        verdict = kit.judge(declared, record, len(call.args), [k for k, _value in call.kwargs])
    except (
        ValueError,
        TypeError,
        KeyError,
        RuntimeError,
    ):  # a record or a check it cannot judge: the usual way
        return None
    return verdict if verdict.not_graded and not verdict.forged else None


def judge_all(request: JudgeRequest) -> JudgeReply:
    from autograders import kit
    from memlab import i18n

    language = request.language if request.language in i18n.LANGUAGES else i18n.ENGLISH
    if language != i18n.language():  # the verdicts' messages in the lesson's language
        i18n.use(language)
    verdicts = []
    with kit.context(kit.JUDGE, request.seed):  # the drawn cases of this student
        for cell in request.cells:
            try:
                verdicts.append(judge_cell(cell, request))
            except (
                Exception
            ) as error:  # a bug of the grader: the cell loses nothing it can be blamed for silently
                text = _("the judge itself failed on this cell ({error})").format(
                    error=f"{type(error).__name__}: {error}"
                )[:500]
                verdicts.append(CellVerdict(cell.grade_id, False, text, ename="GraderError"))
    return JudgeReply(verdicts)


def use_judge_environment() -> None:
    """What the judge runs under: Hugging Face offline (judging fetches nothing). A judge process sets it in `main`;
    a grade.py worker, in which the judge runs, when it starts (grading/worker.py). The kit's mode and seed are the
    judge's own `kit.context`, whatever the environment says."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def main() -> int:
    use_judge_environment()
    request = JudgeRequest.from_data(json.loads(sys.stdin.read()))
    reply = judge_all(request)
    sys.stdout.write("\n" + json.dumps(reply.to_data()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
