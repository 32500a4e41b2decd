"""nbgrader's autograde, the course's way: the notebook runs sandboxed, the checks are judged outside it.

nbgrader_config.py puts two preprocessors into `Autograde.autograde_preprocessors`, so `nbgrader autograde`,
formgrader's Autograde button and scripts/grade.py (which calls nbgrader's own autograde) all grade alike:

- `SandboxedExecute` (nbgrader's Execute) starts the kernel through grading/isolation.py and in collect mode
  (`COURSE_GRADING=collect` with this student's seed): each check cell only shows a transcript of what the learner's
  code returned (autograders/kit.py). A cell that runs past the timeout is interrupted; a cell that ignores the
  interrupt, or kills the kernel, is stopped and the notebook runs again from the top without it, so only what
  depends on that cell loses points.
- `JudgeChecks` hands every check cell's transcript to a judge process (grading/judge.py) and replaces the cell's
  outputs with the verdict: the success line, or one error output whose message says why (nbgrader's SaveAutoGrades
  then gives the cell its points, or 0). What a cell wrote to stderr or left as a value no longer matters. It also
  writes the findings a human should read (a transcript that does not match its check, a check cell that showed no
  transcript without an error, `review:` notes on code that reaches into the grading machinery) into the
  notebook's metadata under `memlab_grading`, where scripts/grade.py reads them for its CSV.

The settings (`GradingSettings`: the seed, the memory limit, isolation) come from nbgrader's configuration;
scripts/grade.py passes its command-line values the same way.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from traitlets import Bool, Float, Int, Unicode
from traitlets.config import Configurable

from grading import isolation
from grading.course import copy_regular_files
from grading.i18n import _
from grading.submission import grade_id, is_test_cell, static_review
from memlab.i18n import set_language

ROOT = Path(__file__).resolve().parents[1]
MAX_RESTARTS = 3  # runs of a notebook after the first, each without one more cell that had to be stopped
INTERRUPT_GRACE = 10.0  # seconds a cell gets to stop after the timeout's interrupt
FINDINGS_KEY = "memlab_grading"


#: where a course keeps the seed of its drawn cases when no seed is configured: in its root folder (nbgrader's
#: CourseDirectory.root), so that every process that grades the course, kernel side and judge side, every re-grade
#: and formgrader's Autograde button draw the same cases for a student
SEED_FILE = "grading_seed.json"


class GradingSettings(Configurable):
    """How submissions are graded (nbgrader configuration: `c.GradingSettings.seed = 1234`, ...)."""

    seed = Int(
        None,
        allow_none=True,
        help="seed of the cases drawn at grading time (default: the course's own, made once and kept in "
        f"{SEED_FILE} in the course's root folder)",
    ).tag(config=True)
    memory_gb = Float(8.0, help="memory of one submission's processes together, GiB").tag(config=True)
    processes = Int(256, help="processes of one submission at a time").tag(config=True)
    threads = Int(0, help="torch threads per kernel (0: all CPUs; OMP_NUM_THREADS set by you wins)").tag(
        config=True
    )
    isolate = Bool(True, help="run submissions sandboxed (never switch off for credit)").tag(config=True)
    run_demonstrations = Bool(
        False, help="also run the cells a lesson tags skip-when-grading (grading/demonstrations.py)"
    ).tag(config=True)
    kit_dir = Unicode(
        "", help="a prepared copy of the kit the kernels import (default: made per process)"
    ).tag(config=True)
    judge_in_process = Bool(
        False,
        help="judge in this process (grade.py's worker, which grades one notebook and ends) instead of a new one "
        "per notebook (a plain `nbgrader autograde`, which grades many in one process)",
    ).tag(config=True)

    def limits(self) -> isolation.Limits:
        return isolation.Limits(memory_bytes=int(self.memory_gb * 2**30), processes=self.processes)

    def master_seed(self) -> int:
        """The configured seed, or the course's own (`course_seed`): never one drawn for this process alone, which
        the kernel's side and the judge's side of the same notebook would each draw differently."""
        if self.seed is None:
            from nbgrader.coursedir import CourseDirectory

            self.seed = course_seed(Path(CourseDirectory(config=self.config).root))
        return self.seed


def course_seed(root: Path) -> int:
    """The seed kept in `root`/SEED_FILE, made (at random) by the first process that needs it: written to a new
    file that appears whole (a process that loses the race reads the winner's)."""
    path = root / SEED_FILE
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["seed"])
    except FileNotFoundError:
        pass
    seed = secrets.randbelow(2**31)
    tmp = path.with_name(f".{SEED_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"seed": seed}) + "\n", encoding="utf-8")
    try:
        os.link(tmp, path)  # fails if another process made it first: its seed is the course's
    except FileExistsError:
        seed = int(json.loads(path.read_text(encoding="utf-8"))["seed"])
    else:
        print(f"grading seed {seed} (made for this course, kept in {path})", file=sys.stderr)
    finally:
        tmp.unlink(missing_ok=True)
    return seed


def student_seed(seed: int, student: str, lesson: str) -> int:
    """The seed of one student's drawn cases in one lesson (all that a kernel is told of the grading seed)."""
    return int(hashlib.sha256(f"{seed}/{student}/{lesson}".encode()).hexdigest()[:12], 16)


_KIT: dict[str, str] = {}


def kit_copy(base: str = "") -> str:
    """A copy of memlab and autograders without the grading references: what a sandboxed process may import."""
    if base:
        return base
    if "dir" not in _KIT:
        folder = Path(tempfile.mkdtemp(prefix="memlab-kit-"))
        prepare_kit(folder)
        _KIT["dir"] = str(folder)
    return _KIT["dir"]


def prepare_kit(folder: Path) -> Path:
    import autograders
    import memlab

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "references")
    for package in (memlab, autograders):
        source = Path(package.__file__).parent
        shutil.copytree(source, folder / source.name, ignore=ignore, dirs_exist_ok=True)
    return folder


# ---- the kernel -------------------------------------------------------------------------------------------------


def sandboxed_kernel_manager(
    sandbox: isolation.Sandbox | None, runtime: str, watches: list, unsandboxed_env: tuple = ()
):
    """An AsyncKernelManager class whose kernel runs in `sandbox` (None: not isolated, never for credit), with its
    connection file (and, sandboxed, its Unix sockets) in the folder `runtime`."""
    import uuid

    from jupyter_client.manager import AsyncKernelManager

    class SandboxedKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            kwargs.setdefault(
                "connection_file", os.path.join(runtime, f"kernel-{uuid.uuid4().hex[:12]}.json")
            )
            if sandbox is not None:  # no network in the sandbox: Unix sockets in the runtime folder
                kwargs.update(transport="ipc", cache_ports=False)
            super().__init__(**kwargs)

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            if sandbox is not None:
                sandbox.hand_over()  # its folder, with the connection file just written, to the sandbox's user
                kernel_cmd = sandbox.command(kernel_cmd)
                kw["env"] = sandbox.env()
            else:
                kw["env"] = {**os.environ, **dict(unsandboxed_env)}
            await super()._async_launch_kernel(kernel_cmd, **kw)
            if sandbox is not None and self.provisioner is not None and self.provisioner.process is not None:
                watches.append(isolation.Watch(self.provisioner.process.pid, sandbox.limits, sandbox.workdir))

        async def _async_signal_kernel(self, signum: int) -> None:
            # jupyter_client signals the kernel's process group, which holds bubblewrap's own processes too: an
            # interrupt then ended the kernel instead of the cell. Signal the processes inside the sandbox only.
            process = self.provisioner.process if self.provisioner is not None else None
            if sandbox is None or process is None or signum != signal.SIGINT:
                return await super()._async_signal_kernel(signum)
            for pid in isolation.sandboxed(process.pid):
                isolation.send(pid, signum)

    return SandboxedKernelManager


class CellStopped(Exception):
    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index, self.reason = index, reason


def error_output(ename: str, evalue: str):
    from nbformat import NotebookNode

    return NotebookNode(
        output_type="error", ename=ename, evalue=evalue, traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"]
    )


def _make_execute():
    from jupyter_core.utils import ensure_async
    from nbclient.exceptions import DeadKernelError
    from nbconvert.preprocessors.execute import NotebookClient
    from nbgrader.preprocessors import Execute

    class SandboxedExecute(Execute):
        """nbgrader's Execute with the kernel sandboxed and in collect mode; stopped cells are skipped on a rerun."""

        def preprocess(self, nb, resources, km=None):
            settings = GradingSettings(config=self.config)
            info = resources.get("nbgrader", {})
            # the notes speak the lesson's language (grade.py's worker has set it already; a plain `nbgrader
            # autograde` grades notebooks of either edition in one process)
            set_language(source_language(lesson_source(self.config, info)[1]))
            folder = Path(resources.get("metadata", {}).get("path") or ".").resolve()
            seed = student_seed(settings.master_seed(), info.get("student", ""), info.get("assignment", ""))
            environment = (("COURSE_GRADING", "collect"), ("COURSE_GRADING_SEED", str(seed)))
            self._watches: list[isolation.Watch] = []
            original = copy.deepcopy(nb)
            stopped: dict[int, str] = {}
            notes = resources.setdefault(FINDINGS_KEY, {"notes": [], "flags": []})["notes"]
            work = nb
            try:
                for attempt in range(MAX_RESTARTS + 1):
                    work = copy.deepcopy(original)
                    # the kernel works in a private copy of the notebook's folder (its regular files), made again for
                    # each run: what it leaves there (links into the grader's files, a notebook replaced by a link)
                    # is never read, written, copied or chmod-ed by nbgrader or the grader, which work in `folder`
                    scratch = Path(tempfile.mkdtemp(prefix="memlab-kernel-work-"))
                    try:
                        copy_regular_files(folder, scratch)
                        self._prepare_kernel(settings, scratch, environment)
                        run_resources = {
                            **resources,
                            "metadata": {**resources.get("metadata", {}), "path": str(scratch)},
                        }
                        self._execute(work, run_resources, stopped)
                    except CellStopped as stop:
                        stopped[stop.index] = stop.reason
                        notes.append(
                            _("cell {number} was stopped: {reason}").format(
                                number=stop.index + 1, reason=stop.reason
                            )
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
            finally:
                for watch in self._watches:
                    watch.stop()
            nb.cells = work.cells
            nb.metadata = work.metadata
            return nb, resources

        def _prepare_kernel(self, settings, workdir: Path, environment) -> None:
            """The kernel manager class of one run: sandboxed in `workdir`, its runtime folder (the connection file
            and, sandboxed, its sockets) inside it."""
            runtime = tempfile.mkdtemp(prefix="kernel-", dir=workdir)
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
            self.kernel_manager_class = sandboxed_kernel_manager(
                sandbox, runtime, self._watches, unsandboxed_env
            )

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

        def _execute(self, nb, resources, stopped: dict[int, str]) -> None:
            # the kernel is killed once its last cell has run ("immediate"), not asked to exit: every output it
            # could give is in, and a graceful exit (atexit hooks, torch's teardown) took 0.6 s of the 2.3 s that
            # grading one notebook of the tests' fixture lesson took
            NotebookClient.__init__(
                self, nb, None, kernel_manager_class=self.kernel_manager_class, shutdown_kernel="immediate"
            )
            self.reset_execution_trackers()
            self._check_assign_resources(resources)
            with self.setup_kernel():
                info_msg = self.wait_for_reply(self.kc.kernel_info())
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                for index, cell in enumerate(self.nb.cells):
                    if index in stopped:
                        if cell.cell_type == "code":
                            cell.outputs = [
                                error_output(
                                    "CellStopped", _("not run: {reason}").format(reason=stopped[index])
                                )
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
            from queue import Empty

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

    return SandboxedExecute


# ---- the verdict --------------------------------------------------------------------------------------------------


def transcripts_of(cell) -> list:
    from autograders.kit import TRANSCRIPT_MIME

    return [
        o["data"][TRANSCRIPT_MIME]
        for o in cell.get("outputs", [])
        if o.get("output_type") == "display_data" and TRANSCRIPT_MIME in o.get("data", {})
    ]


def _make_judge_checks():
    from nbgrader.preprocessors import NbGraderPreprocessor

    from grading.judge import CellRequest, JudgeRequest

    class JudgeChecks(NbGraderPreprocessor):
        """Every check cell's verdict, from a judge process that never runs submitted code."""

        judge_timeout = Float(1800.0, help="seconds for the judge of one notebook").tag(config=True)

        def preprocess(self, nb, resources):
            settings = GradingSettings(config=self.config)
            info = resources.get("nbgrader", {})
            findings = resources.setdefault(FINDINGS_KEY, {"notes": [], "flags": []})
            seed = student_seed(settings.master_seed(), info.get("student", ""), info.get("assignment", ""))
            workdir = str(Path(resources.get("metadata", {}).get("path") or ".").resolve())
            source_dir, source = lesson_source(self.config, info)
            cells, requests = [], []
            for cell in nb.cells:
                if not is_test_cell(cell):
                    continue
                found = transcripts_of(cell)
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
                        transcripts=found,
                        error="; ".join(f"{e.get('ename')}: {e.get('evalue')}" for e in errors)[:2000],
                    )
                )
            from grading.rerun import handed_in_modules

            course_files = (
                {Path(f).stem for f in os.listdir(source_dir)} if os.path.isdir(source_dir) else set()
            )
            request = JudgeRequest(
                seed=seed,
                cells=requests,
                definitions=definitions_source(nb, source),
                modules=handed_in_modules(workdir, course_files),
                workdir=workdir,
                kit_dir=kit_copy(settings.kit_dir) if settings.isolate else "",
                memory_gb=settings.memory_gb,
                threads=settings.threads,
                isolate=settings.isolate,
                language=source_language(source),
            )
            request.source_dir = source_dir
            verdicts = run_judge(request, self.judge_timeout, settings.judge_in_process)
            for (cell, errors), verdict in zip(cells, verdicts):
                cell.outputs = verdict_outputs(verdict, errors)
                if verdict.flag and verdict.flag not in findings["flags"]:
                    findings["flags"].append(verdict.flag)
            if source is not None:
                findings["notes"] += static_review(nb, source)
                from grading.marks import changed_marks, marks_note

                changed = changed_marks(submitted_notebook(self.config, info), source)
                if changed:
                    findings["notes"].append(marks_note(changed))
            findings["signatures"] = {v.grade_id: v.signature for v in verdicts if v.signature}
            nb.metadata[FINDINGS_KEY] = findings
            return nb, resources

    return JudgeChecks


def lesson_source(config, info: dict):
    """The lesson's source folder in the course (where a check module outside the kit lives) and its notebook."""
    import nbformat
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    folder = Path(coursedir.format_path(coursedir.source_directory, ".", info.get("assignment", "")))
    path = folder / f"{info.get('notebook', '')}.ipynb"
    return str(folder), (nbformat.read(path, as_version=4) if path.is_file() else None)


def submitted_notebook(config, info: dict):
    """The notebook as it was handed in (nbgrader's submitted folder), before nbgrader's sanitizing: an empty
    notebook where it cannot be read."""
    import nbformat
    from nbgrader.coursedir import CourseDirectory

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


def run_judge(request, timeout: float, in_process: bool = False):
    """The judge's verdicts: from its own process (`python -m grading.judge`), or in this one where it grades only
    this notebook and ends (`in_process`: grade.py's worker, a fresh process, so nothing of one notebook's judging,
    the drawn cases' seed, imported check modules, the language, is left for another). The request crosses as the
    same JSON either way."""
    from grading.judge import JudgeReply, JudgeRequest, judge_all

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


_LAZY = {"SandboxedExecute": _make_execute, "JudgeChecks": _make_judge_checks}


def __getattr__(name: str):
    """The two preprocessors, built on first use (importing nbgrader is slow)."""
    if name in _LAZY:
        cls = _LAZY[name]()
        cls.__module__ = __name__
        globals()[name] = cls
        return cls
    raise AttributeError(name)
