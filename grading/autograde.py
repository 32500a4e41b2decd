"""nbgrader's autograde, the course's way: the notebook runs sandboxed, the checks are judged outside it.

nbgrader_config.py puts two preprocessors into `Autograde.autograde_preprocessors`, so `nbgrader autograde`,
formgrader's Autograde button and scripts/grade.py (which calls nbgrader's own autograde) all grade alike (the trust
model: docs/trust-model.md):

- `SandboxedExecute` (nbgrader's Execute) runs the kernel in the sandbox (grading/isolation.py), in collect mode with
  this student's seed (memlab.protocol): each check cell only shows a transcript of what the learner's code returned.
  The kernel works in a private copy of the notebook's folder, made again for each run. A cell past the timeout is
  interrupted; a cell that ignores the interrupt, or kills the kernel, is stopped and the notebook runs again from
  the top without it, so only what depends on that cell loses points.
- `JudgeChecks` hands every check cell's transcript to the judge (grading/judge.py) and replaces the cell's outputs
  with the verdict. It writes the findings a human should read (flags, notes, `review:` notes, marks changed in the
  notebook) into the notebook's metadata under `memlab_grading`, where scripts/grade.py reads them, and as cells
  where formgrader and the feedback show them, with each written answer's rubric (grading/for_graders.py;
  `DropRubrics` keeps the rubrics out of nbgrader's feedback).

Their settings are `GradingSettings` (grading/settings.py), nbgrader configuration like any other. This module
imports nbgrader: grading.batch, which starts grade.py, does not import it.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty

import nbformat
from jupyter_core.utils import ensure_async
from nbclient.exceptions import DeadKernelError
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Float

from grading import isolation
from grading.course import copy_regular_files, kit_copy
from grading.demonstrations import skip
from grading.for_graders import RUBRIC, is_grader_cell, write_grader_cells
from grading.i18n import _
from grading.judge import CellRequest, JudgeReply, JudgeRequest, judge_all
from grading.kernels import kernel_manager_class, restart_client
from grading.marks import changed_marks, course_marks, marks_note
from grading.settings import GradingSettings, Settings
from grading.submission import grade_id, is_test_cell, static_review
from memlab.i18n import set_language
from memlab.protocol import grading_environment, student_seed

MAX_RESTARTS = 3  # runs of a notebook after the first, each without one more cell that had to be stopped
INTERRUPT_GRACE = 10.0  # seconds a cell gets to stop after the timeout's interrupt
FINDINGS_KEY = "memlab_grading"


def notebook_settings(config, info: dict) -> tuple[Settings, int]:
    """The settings a notebook is graded with, and its student's seed of drawn cases (the same for both
    preprocessors: the kernel's side and the judge's)."""
    settings = GradingSettings(config=config).settings()
    return settings, student_seed(settings.seed, info.get("student", ""), info.get("assignment", ""))


# ---- the kernel -------------------------------------------------------------------------------------------------


class CellStopped(Exception):
    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index, self.reason = index, reason


def error_output(ename: str, evalue: str):
    return nbformat.NotebookNode(
        output_type="error", ename=ename, evalue=evalue, traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"]
    )


class SandboxedExecute(Execute):
    """nbgrader's Execute with the kernel sandboxed and in collect mode; stopped cells are skipped on a rerun."""

    def preprocess(self, nb, resources, km=None):
        info = resources.get("nbgrader", {})
        # the notes speak the lesson's language (grade.py's worker has set it already; a plain `nbgrader
        # autograde` grades notebooks of either edition in one process)
        set_language(source_language(lesson_source(self.config, info)[1]))
        folder = Path(resources.get("metadata", {}).get("path") or ".").resolve()
        settings, seed = notebook_settings(self.config, info)
        self._watches: list[isolation.Watch] = []
        original = copy.deepcopy(nb)
        stopped: dict[int, str] = {}
        notes = resources.setdefault(FINDINGS_KEY, {"notes": [], "flags": []})["notes"]
        work = nb
        for attempt in range(MAX_RESTARTS + 1):
            work = copy.deepcopy(original)
            # the kernel works in a private copy of the notebook's folder (its regular files), made again for each
            # run: what it leaves there (links into the grader's files, a notebook replaced by a link) is never read,
            # written, copied or chmod-ed by nbgrader or the grader, which work in `folder`
            scratch = Path(tempfile.mkdtemp(prefix="memlab-kernel-work-"))
            try:
                copy_regular_files(folder, scratch)
                manager = self._kernel_manager(settings, seed, scratch)
                run_resources = {
                    **resources,
                    "metadata": {**resources.get("metadata", {}), "path": str(scratch)},
                }
                self._execute(work, run_resources, stopped, manager)
            except CellStopped as stop:
                stopped[stop.index] = stop.reason
                notes.append(
                    _("cell {number} was stopped: {reason}").format(number=stop.index + 1, reason=stop.reason)
                )
                if attempt == MAX_RESTARTS:
                    self._not_run(work, stop.index)
                continue
            finally:
                for watch in self._watches:
                    watch.stop()
                self._watches.clear()
                shutil.rmtree(scratch, ignore_errors=True)  # never follows a link it finds
            break
        nb.cells = work.cells
        nb.metadata = work.metadata
        return nb, resources

    def _kernel_manager(self, settings: Settings, seed: int, workdir: Path) -> type:
        """The kernel manager class of one run: sandboxed in `workdir`, its runtime folder (the connection file and,
        sandboxed, its sockets) inside it."""
        runtime = tempfile.mkdtemp(prefix="kernel-", dir=workdir)
        environment = grading_environment(seed)
        sandbox = None
        if settings.isolate:
            sandbox = isolation.Sandbox(
                kit_dir=kit_copy(settings.kit_dir),
                workdir=str(workdir),
                readable=isolation.hf_caches(),
                limits=settings.limits(),
                threads=settings.threads or None,
                environment=environment,
            )
        unsandboxed_env = (*environment, ("PYTHONPATH", kit_copy(settings.kit_dir)))
        return kernel_manager_class(sandbox, runtime, self._watches, unsandboxed_env)

    def _not_run(self, nb, after: int) -> None:
        for cell in nb.cells[after + 1 :]:
            if is_test_cell(cell) and not any(
                o.get("output_type") == "error" for o in cell.get("outputs", [])
            ):
                cell.outputs = [
                    error_output(
                        "NotRun", _("the kernel was stopped {count} times").format(count=MAX_RESTARTS + 1)
                    )
                ]

    def _execute(self, nb, resources, stopped: dict[int, str], manager: type) -> None:
        restart_client(self, nb, resources, manager)
        with self.setup_kernel():
            info_msg = self.wait_for_reply(self.kc.kernel_info())
            self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
            for index, cell in enumerate(self.nb.cells):
                if index in stopped:
                    if cell.cell_type == "code":
                        cell.outputs = [
                            error_output("CellStopped", _("not run: {reason}").format(reason=stopped[index]))
                        ]
                    continue
                self._index = index
                try:
                    self.preprocess_cell(cell, resources, index)
                except CellStopped:
                    raise
                except DeadKernelError:
                    raise CellStopped(index, self._death_reason()) from None
                except Exception as error:  # nbclient lost the kernel (e.g. forked copies talking)
                    text = _("the grader lost contact with the kernel ({error})").format(
                        error=f"{type(error).__name__}: {error}"
                    )
                    raise CellStopped(index, text[:150]) from None
        self.set_widgets_metadata()

    def _death_reason(self) -> str:
        reasons = [w.reason for w in self._watches if w.reason]
        if reasons:
            return _("the kernel was stopped: {reason}").format(reason=reasons[-1])
        return _("the kernel died while it ran (os._exit, a crash, or out of memory)")

    async def _async_handle_timeout(self, timeout, cell=None):
        """nbclient's timeout (grading/kernels.py): interrupt the cell; stop the kernel only if it does not stop."""
        await ensure_async(self.km.interrupt_kernel())
        deadline = time.monotonic() + INTERRUPT_GRACE
        while time.monotonic() < deadline:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=0.5))
            except Empty:
                continue
            if msg.get("msg_type") == "execute_reply":
                return {"content": {**self.error_on_timeout, "status": "error"}}
        await ensure_async(self.km.shutdown_kernel(now=True))
        reason = self._death_reason()
        if not any(w.reason for w in self._watches):  # not stopped by a limit of the sandbox
            reason = _("it ran past the {seconds} s limit and did not stop when interrupted").format(
                seconds=timeout
            )
        raise CellStopped(self._index, reason)


# ---- before the kernel: the course's marks, the lesson's demonstrations ---------------------------------------------


class RestoreGradingMarks(NbGraderPreprocessor):
    """Every cell's grading marks as the course's gradebook has them (grading/marks.py): a sanitizing preprocessor,
    before nbgrader's OverwriteCells, which stopped a notebook whose marks had been edited."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gradebook:
            try:
                marks = course_marks(gradebook, info["notebook"], info["assignment"])
            except MissingEntry:
                return nb, resources  # not a notebook of the course: nbgrader skips it
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader")
            if meta is None:
                continue
            gid = meta.get("grade_id")
            if gid in marks:
                cell.metadata["nbgrader"] = dict(marks[gid])
            else:  # marks without a grade id of the lesson: an ordinary cell (nbgrader would stop at it)
                del cell.metadata["nbgrader"]
        return nb, resources


class SkipDemonstrations(NbGraderPreprocessor):
    """Comment out the submission's cells that are exactly the lesson's cells tagged `skip-when-grading`
    (grading/demonstrations.py), unless GradingSettings.run_demonstrations."""

    def preprocess(self, nb, resources):
        if GradingSettings(config=self.config).run_demonstrations:
            return nb, resources
        _, source = lesson_source(self.config, resources.get("nbgrader", {}))
        resources.setdefault("memlab_skipped_cells", skip(nb, source))
        return nb, resources


# ---- the verdict --------------------------------------------------------------------------------------------------


def transcripts_of(cell) -> list:
    from autograders.kit import TRANSCRIPT_MIME

    return [
        o["data"][TRANSCRIPT_MIME]
        for o in cell.get("outputs", [])
        if o.get("output_type") == "display_data" and TRANSCRIPT_MIME in o.get("data", {})
    ]


class JudgeChecks(NbGraderPreprocessor):
    """Every check cell's verdict, from a judge that never runs submitted code."""

    judge_timeout = Float(1800.0, help="seconds for the judge of one notebook").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        findings = resources.setdefault(FINDINGS_KEY, {"notes": [], "flags": []})
        settings, seed = notebook_settings(self.config, info)
        workdir = str(Path(resources.get("metadata", {}).get("path") or ".").resolve())
        source_dir, source = lesson_source(self.config, info)
        cells, requests = [], []
        for cell in nb.cells:
            if not is_test_cell(cell):
                continue
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if cell.source.startswith("# This cell (id:"):
                findings["notes"].append(
                    _("{grade_id}: the check cell was missing and was put back").format(
                        grade_id=grade_id(cell)
                    )
                )
            cells.append((cell, errors))
            requests.append(
                CellRequest(
                    grade_id=grade_id(cell),
                    source=cell.source,
                    transcripts=transcripts_of(cell),
                    error="; ".join(f"{e.get('ename')}: {e.get('evalue')}" for e in errors)[:2000],
                )
            )
        from grading.rerun import handed_in_modules

        course_files = {Path(f).stem for f in os.listdir(source_dir)} if os.path.isdir(source_dir) else set()
        kit_dir = kit_copy(settings.kit_dir) if settings.isolate else ""
        request = JudgeRequest(
            seed=seed,
            cells=requests,
            settings=Settings(**{**settings.to_data(), "kit_dir": kit_dir}),
            definitions=definitions_source(nb, source),
            modules=handed_in_modules(workdir, course_files),
            workdir=workdir,
            source_dir=source_dir,
            language=source_language(source),
        )
        verdicts = run_judge(request, self.judge_timeout, settings.judge_in_process)
        for (cell, errors), verdict in zip(cells, verdicts):
            cell.outputs = verdict_outputs(verdict, errors)
            if verdict.flag and verdict.flag not in findings["flags"]:
                findings["flags"].append(verdict.flag)
        if source is not None:
            findings["notes"] += static_review(nb, source)
            changed = changed_marks(submitted_notebook(self.config, info), source)
            if changed:
                findings["notes"].append(marks_note(changed))
        findings["signatures"] = {v.grade_id: v.signature for v in verdicts if v.signature}
        nb.metadata[FINDINGS_KEY] = findings
        write_grader_cells(nb, source, findings["flags"], findings["notes"])
        return nb, resources


class DropRubrics(NbGraderPreprocessor):
    """Out of nbgrader's feedback: the model answers and rubrics the judge wrote into the autograded notebook for
    the grader (grading/for_graders.py). The grader's notes stay."""

    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if not is_grader_cell(c, RUBRIC)]
        return nb, resources


def lesson_source(config, info: dict):
    """The lesson's source folder in the course (where a check module outside the kit lives) and its notebook."""
    coursedir = CourseDirectory(config=config)
    folder = Path(coursedir.format_path(coursedir.source_directory, ".", info.get("assignment", "")))
    path = folder / f"{info.get('notebook', '')}.ipynb"
    return str(folder), (nbformat.read(path, as_version=4) if path.is_file() else None)


def submitted_notebook(config, info: dict):
    """The notebook as it was handed in (nbgrader's submitted folder), before nbgrader's sanitizing: an empty
    notebook where it cannot be read."""
    coursedir = CourseDirectory(config=config)
    folder = Path(
        coursedir.format_path(
            coursedir.submitted_directory, info.get("student", ""), info.get("assignment", "")
        )
    )
    try:
        return nbformat.read(folder / f"{info.get('notebook', '')}.ipynb", as_version=4)
    except Exception:  # unreadable: nbgrader's own reading of it already said so
        return nbformat.v4.new_notebook()


def source_language(source) -> str:
    """The language of the lesson's source notebook (its metadata `memlab.language`, which the Korean edition's build
    writes; English without it): the judge speaks it. Read from the course's source, never from the submission."""
    language = ((source.metadata.get("memlab") or {}).get("language") if source is not None else None) or "en"
    return language if isinstance(language, str) else "en"


def verdict_outputs(verdict, errors: list) -> list:
    from nbformat import NotebookNode

    if verdict.passed:
        return [NotebookNode(output_type="stream", name="stdout", text=verdict.message + "\n")]
    if verdict.kernel_error and errors:
        return [errors[-1]]  # the cell's own error: a NameError, a timeout, a stopped cell
    return [error_output(verdict.ename, verdict.message)]


def definitions_source(nb, source) -> list[list]:
    """[code, is the lesson's own] for the code cells of the executed notebook, in order: a cell is the lesson's own
    when it is not a solution cell and its code is exactly a cell of the lesson's source (grading/rerun.py)."""
    own = set()
    if source is not None:
        own = {c.source for c in source.cells if c.cell_type == "code" and not _is_solution(c)}
    return [[c.source, c.source in own and not _is_solution(c)] for c in nb.cells if c.cell_type == "code"]


def _is_solution(cell) -> bool:
    return bool((cell.get("metadata", {}).get("nbgrader") or {}).get("solution"))


def run_judge(request: JudgeRequest, timeout: float, in_process: bool = False):
    """The judge's verdicts: from its own process (`python -m grading.judge`), or in this one where it grades only
    this notebook and ends (`in_process`: grade.py's worker, a fresh process, so nothing of one notebook's judging,
    imported check modules, the language, is left for another). The request crosses as the same JSON either way."""
    data = json.dumps(request.to_data())
    if in_process:
        return judge_all(JudgeRequest.from_data(json.loads(data))).verdicts
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "grading.judge"],  # -P: the working directory is not put on sys.path
        input=data,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the judge failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    return JudgeReply.from_data(json.loads(proc.stdout.strip().splitlines()[-1])).verdicts
