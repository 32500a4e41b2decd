"""Grade ONE submitted notebook: the unit of work of grading/batch.py (one process per submission).

    python -m grading.worker TASK.json        (writes the task's result.json)

scripts/grade.py does not start Python for each submission: it forks each worker from a server that has imported
nbformat and nbgrader once (`forked`, multiprocessing's forkserver), and on a machine without a GPU torch and what
the course's checks import too (about 2 s less per notebook on 2 cores). The judge then runs in the worker itself
(`GradingSettings.judge_in_process`): the worker grades one notebook and ends, so it is as fresh as a judge process
of its own would be.

**CUDA and fork.** A process forked from one that has touched CUDA cannot use CUDA: torch refuses ("Cannot
re-initialize CUDA in forked subprocess") or the driver fails ("CUDA error: initialization error"). Touching it takes
no more than `torch.cuda.is_available()`, which bitsandbytes calls when it is imported (peft imports it,
transformers' Trainer imports peft), and which library does so at import changes from release to release. So where
a CUDA device may be present (`grading.isolation.cuda_device_present`: its device files exist and
CUDA_VISIBLE_DEVICES does not hide them), the server imports only what never imports torch (`PRELOAD`), and a
worker forked from a server that has torch anyway (a later release of one of those packages may import it) starts
again as a fresh interpreter before it does anything (`fresh_interpreter_needed`). A GPU grader's workers import
torch themselves, each after its own fork. (Spawning every worker would be as safe, and pay for nbgrader's imports
too.)

1. The submission is read as data (grading/submission.py); a notebook that cannot be graded is one line of notes.
   Cells carrying grade ids the lesson does not have lose their grading metadata (nbgrader would stop at them);
   of a graded cell duplicated, the last copy is graded; a deleted solution cell is put back as released.
2. nbgrader autogrades it in a private copy of the course, with the course's own nbgrader_config.py: the kernel
   runs sandboxed and only collects, the judge decides (grading/autograde.py), nbgrader puts back deleted check
   cells and restores edited ones, and its gradebook holds the scores. This is the same code path as a plain
   `nbgrader autograde`, with the task's seed, limits and timeout as configuration.
3. The result (grading/types.py) is written as JSON: the gradebook's scores, the judge's notes and flags from the
   autograded notebook, and why each lost cell lost its points.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import sys
import time
import traceback
import uuid
from collections import Counter
from pathlib import Path

from grading.course import graded_cells, nbgrader_api
from grading.i18n import _
from grading.isolation import cuda_device_present
from grading.submission import (
    Refused,
    copy_lesson_folder,
    grade_id,
    is_test_cell,
    notebook_path,
    read_submission,
)
from grading.types import Result, Task
from memlab.i18n import set_language

NOTE_CHARS = 300
#: what the server that grade.py forks its workers from imports once, on every machine: none of it imports torch
#: (tests/grader/test_grading_startup.py), so a server that imports only these never touches CUDA
PRELOAD = [
    "nbformat",
    "nbgrader.apps",
    "grading.worker",
    "grading.autograde",
    "grading.judge",
    "memlab",
]
#: what the server imports besides where no CUDA device can be present: torch, and, for lessons whose checks are the
#: kit's (`from autograders.lessonNN import ...`), the check modules' own dependencies (memlab's models and
#: simulator: transformers, torch's fake tensors) and the libraries their references call (transformers' Trainer in
#: lessons 05 and 06, peft in lesson 08): about 4 s once instead of 2-4 s in each judge. A lesson whose checks are a
#: module of its own (the tests' fixture lesson) does not pay for them.
TORCH_PRELOAD = ["torch"]
KIT_PRELOAD = ["memlab.models", "memlab.estimate", "transformers.trainer", "peft"]


#: the value of PYTHONSAFEPATH grade.py starts its worker server with (grading.batch.worker_server), so that the
#: server does not import from the working folder; its workers remove it, leaving an instructor's own setting
SERVER_SAFE_PATH = "grade.py worker server"


def preload_for(lesson_notebooks: list[Path], cuda: bool) -> list[str]:
    """What the worker server imports for grading these lessons (their source notebooks) on a machine where a CUDA
    device may be present (`cuda`) or not: `PRELOAD` alone with CUDA (nothing that touches it); else torch too, and
    `KIT_PRELOAD` when a lesson's checks are the kit's."""
    if cuda:
        return list(PRELOAD)
    kit_checks = any(
        p.is_file() and "from autograders." in p.read_text(encoding="utf-8") for p in lesson_notebooks
    )
    return PRELOAD + TORCH_PRELOAD + (KIT_PRELOAD if kit_checks else [])


def fresh_interpreter_needed(cuda: bool, loaded=None) -> bool:
    """Whether a worker forked from the server must start again as a fresh interpreter before it grades: where a
    CUDA device may be present and torch was imported before the fork (anything may have touched CUDA then)."""
    return cuda and "torch" in (sys.modules if loaded is None else loaded)


def check_modules(nb) -> set[str]:
    """The modules a notebook's check cells import their checks from (`autograders.lesson02`, ...)."""
    from grading.judge import parse_check_cell

    calls = (parse_check_cell(c.source) for c in nb.cells if is_test_cell(c))
    return {call.module for call in calls if call}


def another_lessons_notebook(nb, source) -> str | None:
    """Why `nb` is graded 0 without running it when it is another lesson's notebook handed in for this one: none of
    its graded cells is one of this lesson's, and its checks come from other modules than this lesson's (so that
    nbgrader would put back every check and stub and grade a notebook of unrelated code)."""
    ours = {grade_id(c) for c in source.cells if grade_id(c)}
    theirs = {grade_id(c) for c in nb.cells if grade_id(c)}
    modules = check_modules(nb)
    if not theirs or theirs & ours or not modules or modules & check_modules(source):
        return None
    text = _(
        "not this lesson's notebook: none of its graded cells is this lesson's, and its checks are {modules}'s "
        "({grade_ids}): graded 0, not run"
    )
    return text.format(modules=", ".join(sorted(modules)[:3]), grade_ids=", ".join(sorted(theirs)[:4]))


def drop_unknown_grade_ids(nb, known: set[str]) -> list[str]:
    notes = []
    for cell in nb.cells:
        gid = grade_id(cell)
        if "nbgrader" in cell.get("metadata", {}) and gid not in known:
            del cell.metadata["nbgrader"]
            if gid:
                text = _("a cell carried the unknown grade id {grade_id}: graded as an ordinary cell")
                notes.append(text.format(grade_id=repr(gid)))
    return notes


def keep_last_copies(nb) -> list[str]:
    """A graded cell the learner duplicated: the last copy is graded, the others become ordinary cells (nbgrader's
    own DeduplicateIds leaves them metadata that its CheckCellMetadata then refuses, failing the whole notebook)."""
    counts = Counter(grade_id(c) for c in nb.cells if grade_id(c))
    seen: Counter = Counter()
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid and counts[gid] > 1:
            seen[gid] += 1
            if seen[gid] < counts[gid]:
                del cell.metadata["nbgrader"]
    text = _("{grade_id} appears {count} times: only the last copy is graded")
    return [text.format(grade_id=gid, count=n) for gid, n in counts.items() if n > 1]


def put_back_solution_cells(nb, released) -> list[str]:
    """Solution cells the learner deleted, put back as released (the stub: nothing to earn), each after the graded
    cell before it: nbgrader puts back deleted check cells after the cell before them in the source, and fails the
    whole notebook (a KeyError) when that cell is gone too."""
    notes = []
    present = {grade_id(c) for c in nb.cells if grade_id(c)}
    order = [c for c in released.cells if grade_id(c)]
    for i, cell in enumerate(order):
        gid = grade_id(cell)
        meta = cell.metadata["nbgrader"]
        if gid in present or not meta.get("solution") or meta.get("grade"):  # nbgrader puts back graded cells
            continue
        before = [grade_id(c) for c in order[:i] if grade_id(c) in present]
        position = max(j for j, c in enumerate(nb.cells) if grade_id(c) == before[-1]) + 1 if before else 0
        restored = copy.deepcopy(cell)
        restored["id"] = f"restored-{uuid.uuid4().hex[:12]}"
        nb.cells.insert(position, restored)
        present.add(gid)
        notes.append(
            _("{grade_id}: the cell is missing from the notebook (put back as released: no answer)").format(
                grade_id=gid
            )
        )
    return notes


def grade(task: Task) -> Result:
    import nbformat

    slug, student = task.lesson, task.student_id
    work = Path(task.work_dir)
    source_folder = Path(task.template) / "solutions" / slug
    cells = graded_cells(source_folder)
    result = Result(
        scores={g: 0.0 for g, _points, _manual in cells}, manual=[g for g, _points, m in cells if m]
    )
    start = time.perf_counter()
    set_language(task.language)  # this process grades one notebook: its notes speak the edition's language
    try:
        nb, notes = read_submission(Path(task.submission), slug)
    except Refused as refused:
        result.notes.append(str(refused))
        result.manual = []
        return result
    source = nbformat.read(source_folder / f"{slug}.ipynb", as_version=4)
    other = another_lessons_notebook(nb, source)
    if other:
        result.notes.append(other)
        result.manual = []
        return result
    result.notes += notes + drop_unknown_grade_ids(nb, {grade_id(c) for c in source.cells if grade_id(c)})
    result.notes += keep_last_copies(nb)
    released = Path(task.template) / "lessons" / slug / f"{slug}.ipynb"
    result.notes += put_back_solution_cells(nb, nbformat.read(released, as_version=4))

    course = work / "course"
    shutil.copytree(source_folder, course / "solutions" / slug)
    shutil.copy(Path(task.template) / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy(Path(task.template) / "gradebook.db", course / "gradebook.db")
    submitted = course / "submitted" / student / slug
    submitted.mkdir(parents=True)
    handed_in = notebook_path(Path(task.submission), slug).name
    result.notes += copy_lesson_folder(Path(task.submission), submitted, handed_in)
    nbformat.write(nb, submitted / f"{slug}.ipynb")

    # the judge in this process: it grades one notebook and ends
    api = nbgrader_api(course, **dataclasses.replace(task.settings, judge_in_process=True).as_config())
    outcome = api.autograde(slug, student, force=True, create=True)
    result.seconds = time.perf_counter() - start
    if not outcome["success"]:
        result.notes.insert(
            0, _("autograde failed: {error}").format(error=autograde_error(outcome)[:NOTE_CHARS])
        )
        return result
    autograded_path = course / "autograded" / student / slug / f"{slug}.ipynb"
    autograded = nbformat.read(autograded_path, as_version=4)
    read_autograded(course, slug, student, autograded, cells, result)
    result.autograded = str(autograded_path)
    return result


def read_autograded(course: Path, slug: str, student: str, autograded, cells, result: Result) -> None:
    """Scores from the gradebook; notes, flags and signatures from the autograded notebook."""
    from nbgrader.api import Gradebook

    from grading.autograde import FINDINGS_KEY

    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gradebook:
        submission = gradebook.find_submission(slug, student)
        for notebook in submission.notebooks:
            for g in notebook.grades:
                score = g.manual_score if g.manual_score is not None else g.auto_score
                result.scores[g.name] = None if score is None else float(score)  # None: to grade by hand
        if submission.timestamp is not None and submission.duedate is not None:
            result.seconds_late = float(submission.total_seconds_late)
        result.late_penalty = float(submission.late_submission_penalty or 0.0)
    findings = autograded.metadata.get(FINDINGS_KEY, {})
    result.notes += [str(n) for n in findings.get("notes", [])]
    result.flags += [str(f) for f in findings.get("flags", [])]
    result.signatures = {
        str(k): [float(x) for x in v]
        for k, v in findings.get("signatures", {}).items()
        if isinstance(v, list)
    }
    lost = {g for g, points, manual in cells if not manual and (result.scores.get(g) or 0) < points}
    result.notes += failure_notes(autograded, lost)
    for gid in result.manual:
        text = (
            _("{grade_id}: needs manual grading")
            if result.scores[gid] is None
            else _("{grade_id}: no answer written")
        )
        result.notes.append(text.format(grade_id=gid))


def failure_notes(notebook, lost: set[str]) -> list[str]:
    """'grade_id: Error: first line' for each autograded cell of `lost`, and for the solution cell of its exercise
    when that cell failed too (the first cause: e.g. a MemoryError before the function was defined)."""
    notes = []
    solutions = {g[: -len("_check")] for g in lost if g.endswith("_check")}
    for cell in notebook.cells:
        gid = grade_id(cell)
        if gid in solutions and cell.get("cell_type") == "code":
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if errors:
                notes.append(
                    f"{gid}: {errors[0].get('ename', 'Error')}: {_first_line(errors[0])}"[:NOTE_CHARS]
                )
            continue
        if gid not in lost or not is_test_cell(cell):
            continue
        texts = []
        for error in (o for o in cell.get("outputs", []) if o.get("output_type") == "error"):
            text = f"{error.get('ename', 'Error')}: {_first_line(error)}".rstrip(": ")
            if text not in texts:
                texts.append(text)
        notes.append(f"{gid}: " + (" / ".join(texts) or _("no points"))[:NOTE_CHARS])
    return notes


def _first_line(error) -> str:
    return ((error.get("evalue") or "").strip().splitlines() or [""])[0]


def autograde_error(outcome: dict) -> str:
    """The exception behind a failed nbgrader run (its own NbGraderException only says "see the log")."""
    import re

    pattern = re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt|Exit)\b.*")
    lines = f"{outcome.get('log', '')}\n{outcome.get('error', '')}".splitlines()
    causes = [m.group(0).strip() for line in lines if (m := pattern.match(line))]
    causes = [c for c in causes if "NbGraderException" not in c]
    return causes[-1] if causes else "see nbgrader's log (grade.py --keep DIR keeps it)"


def main(argv: list[str]) -> int:
    from grading.judge import use_judge_environment

    use_judge_environment()  # the judge runs in this process (GradingSettings.judge_in_process)
    task = Task.load(Path(argv[0]))
    try:
        result = grade(task)
    except (
        Exception
    ):  # a bug of the grader, not the student's fault: say so in the notes, keep the batch going
        result = Result(
            notes=["the grader itself failed on this submission: " + traceback.format_exc(limit=3)[-300:]],
            grader_error=True,
        )
    result.save(task.result_path)
    return 0


#: what a worker that starts again as a fresh interpreter writes to its log first
FRESH_START_LOG = "worker: started again as a fresh interpreter (torch was imported before the fork on a machine where a CUDA device may be present)"


def forked(task_path: str, log_path: str) -> None:
    """A worker forked from grade.py's preloaded server (multiprocessing's forkserver): in its own session, as a
    started `python -m grading.worker` is, so that a worker past its deadline is killed with its kernel; its output
    to `log_path`; the judge in this process. Where it must not use what the server imported
    (`fresh_interpreter_needed`), it becomes `python -m grading.worker` in place: the same process, session and log."""
    os.setsid()
    if os.environ.get("PYTHONSAFEPATH") == SERVER_SAFE_PATH:  # the server's own, not the instructor's
        del os.environ["PYTHONSAFEPATH"]
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    if fresh_interpreter_needed(cuda_device_present()):
        print(FRESH_START_LOG, flush=True)
        os.execv(sys.executable, [sys.executable, "-P", "-m", "grading.worker", task_path])
    sys.exit(main([task_path]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
