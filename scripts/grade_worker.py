#!/usr/bin/env python
"""Grade ONE submitted notebook, isolated: the unit of work of scripts/grade.py (one process per submission).

    python scripts/grade_worker.py TASK.json        (started by scripts/grade.py; writes the task's result_path)

The task names the prepared nbgrader course (a template with the lesson's source and a gradebook), the student's
lesson folder, a private work folder and the grading settings. Nothing outside the work folder is written, and the
submitted code never runs in this process: it runs in a kernel started through scripts/grade_sandbox.py.

1. **The submission is read as data first.** A notebook that is a symbolic link, empty, not JSON, too large or not
   a notebook is refused with one line for the CSV. nbformat 3 is converted. Graded cells the learner duplicated
   are kept once (the last copy, as nbgrader keeps it) and cells carrying grade ids the lesson does not have lose
   their grading metadata; graded test cells the learner deleted are put back from the lesson's source. Each of
   these is said in the notes. Only regular files are copied (no links), within a size budget.
2. **nbgrader autogrades it** in a private copy of the course, with this module's `GradingExecute` instead of
   nbgrader's `Execute`: every start of the kernel goes through the sandbox with a fresh signing key; after each
   cell it reads the sandbox's signed report. A graded test cell keeps its points only if the check reported a
   verified pass while the cell ran and the cell shows no error; otherwise an error output says why (so nbgrader's
   own scoring, the gradebook and formgrader agree with this verdict). Writing to stderr (a warning) or leaving a
   value in a check cell changes nothing. A cell that runs past the per-cell timeout is interrupted; a cell that
   ignores the interrupt, or kills the kernel, is stopped and the notebook is run again from the top without it,
   so only what depends on that cell loses points.
3. **The result** (points of every graded cell, notes, flags) is written as JSON to the task's `result_path`.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import hmac
import json
import os
import secrets
import shutil
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MAX_NOTEBOOK_BYTES = 100 * 2**20
MAX_FOLDER_BYTES = 500 * 2**20
MAX_RESTARTS = 3  # runs of a notebook after the first, each without one more cell that had to be stopped
INTERRUPT_GRACE = 10.0  # seconds a cell gets to stop after the timeout's interrupt
NOTE_CHARS = 200
SKIPPED_FOLDERS = {".ipynb_checkpoints", "__pycache__", "autograders", "memlab"}
KERNEL_NAME = "memlab-grading"
#: set by the instructor, these win over the share of the CPUs that grade.py gives each kernel
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


class Refused(Exception):
    """The submission cannot be graded at all; the message is the note."""


# ---- 1. the submission, read as data ---------------------------------------------------------------------------


def read_submission(folder: Path, slug: str):
    """The submitted notebook of `slug` in `folder` as an nbformat-4 notebook, and notes; or Refused."""
    import nbformat

    path = folder / f"{slug}.ipynb"
    if folder.parent.is_symlink():
        raise Refused("the student folder is a symbolic link: not graded")
    if folder.is_symlink():
        raise Refused(f"the {slug}/ folder is a symbolic link: not graded")
    if path.is_symlink():
        raise Refused(f"{slug}.ipynb is a symbolic link: not graded (submit the notebook itself)")
    if not path.is_file():
        raise Refused(missing_note(folder, slug))
    size = path.stat().st_size
    if size == 0:
        raise Refused(f"{slug}.ipynb is an empty file (0 bytes)")
    if size > MAX_NOTEBOOK_BYTES:
        raise Refused(f"{slug}.ipynb is {size / 2**20:.0f} MiB, more than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    text = path.read_bytes()
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise Refused(f"{slug}.ipynb is not a notebook (not valid JSON: {error})") from None
    if not isinstance(data, dict) or "nbformat" not in data:
        raise Refused(f"{slug}.ipynb is JSON but not a notebook (no nbformat field)")
    notes = []
    try:
        nb = nbformat.reads(text.decode("utf-8"), as_version=4)
    except Exception as error:  # nbformat's own validation and conversion errors
        raise Refused(
            f"{slug}.ipynb could not be read as a notebook ({type(error).__name__}: {error})"
        ) from None
    if data.get("nbformat") != 4:
        notes.append(f"converted from nbformat {data.get('nbformat')} to 4")
    if not isinstance(nb.get("cells"), list):
        raise Refused(f"{slug}.ipynb has no list of cells")
    return nb, notes


def missing_note(folder: Path, slug: str) -> str:
    if not folder.is_dir():
        return f"missing: no {slug}/ folder"
    found = sorted(p.name for p in folder.glob("*.ipynb"))
    return f"missing: no {slug}/{slug}.ipynb" + (f" (found {', '.join(found)})" if found else "")


def _grade_id(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta.get("grade_id") if isinstance(meta, dict) else None


def _is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader") or {}
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def restore_structure(nb, source) -> list[str]:
    """Make the submitted notebook gradable against its source; the notes say what was changed."""
    notes = []
    source_ids = [_grade_id(c) for c in source.cells if _grade_id(c)]
    known = set(source_ids)
    # grade ids the lesson does not have: an ordinary cell now (nbgrader would stop at them)
    for cell in nb.cells:
        grade_id = _grade_id(cell)
        if "nbgrader" in cell.get("metadata", {}) and grade_id not in known:
            del cell.metadata["nbgrader"]
            if grade_id:
                notes.append(f"a cell carried the unknown grade id {grade_id!r}: graded as an ordinary cell")
    # duplicates: the last copy is graded (as nbgrader's DeduplicateIds keeps it), the others become ordinary cells
    counts: dict[str, int] = {}
    for cell in nb.cells:
        if _grade_id(cell):
            counts[_grade_id(cell)] = counts.get(_grade_id(cell), 0) + 1
    seen: dict[str, int] = {}
    for cell in nb.cells:
        grade_id = _grade_id(cell)
        if grade_id and counts[grade_id] > 1:
            seen[grade_id] = seen.get(grade_id, 0) + 1
            if seen[grade_id] < counts[grade_id]:
                del cell.metadata["nbgrader"]
    for grade_id, n in counts.items():
        if n > 1:
            notes.append(f"{grade_id} appears {n} times: only the last copy is graded")
    # graded test cells the learner deleted: put back, after the cell that precedes them in the source
    present = {_grade_id(c) for c in nb.cells if _grade_id(c)}
    for i, grade_id in enumerate(source_ids):
        if grade_id in present:
            continue
        source_cell = next(c for c in source.cells if _grade_id(c) == grade_id)
        if not _is_test_cell(source_cell):
            notes.append(f"{grade_id}: the cell is missing from the notebook")
            continue
        before = [g for g in source_ids[:i] if g in present]
        position = len(nb.cells)
        if before:
            position = max(j for j, c in enumerate(nb.cells) if _grade_id(c) == before[-1]) + 1
        restored = copy.deepcopy(source_cell)
        restored.outputs, restored.execution_count = [], None
        nb.cells.insert(position, restored)
        present.add(grade_id)
        notes.append(f"{grade_id}: the check cell was missing and was put back")
    return notes


def copy_lesson_folder(src: Path, dest: Path, notebook_name: str) -> list[str]:
    """Copy the regular files of a submitted lesson folder (not the notebook: written apart), within a budget."""
    notes, budget = [], MAX_FOLDER_BYTES
    links = []
    for root, dirs, files in os.walk(src, followlinks=False):
        root_path = Path(root)
        for name in list(dirs):
            if (root_path / name).is_symlink():
                links.append((root_path / name).relative_to(src).as_posix())
                dirs.remove(name)
            elif name in SKIPPED_FOLDERS:
                dirs.remove(name)
        for name in files:
            path = root_path / name
            relative = path.relative_to(src)
            if relative.as_posix() == notebook_name:
                continue
            if path.is_symlink():
                links.append(relative.as_posix())
                continue
            if not path.is_file():
                continue
            size = path.stat().st_size
            if size > budget:
                notes.append(
                    f"{relative.as_posix()} was not copied ({size / 2**20:.0f} MiB: over the size budget)"
                )
                continue
            budget -= size
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    if links:
        notes.append(f"ignored symbolic link(s): {', '.join(sorted(links)[:5])}")
    return notes


# ---- a static read of the code the learner wrote -----------------------------------------------------------------

#: names and attributes that reach into the grading machinery rather than solve an exercise
STATIC_PATTERNS = {
    "autograders": "imports the grading kit (autograders)",
    "modules": "touches sys.modules",
    "builtins": "touches builtins",
    "__builtins__": "touches builtins",
    "get_ipython": "drives IPython itself (get_ipython)",
    "set_custom_exc": "changes how IPython shows errors (set_custom_exc)",
    "input_transformers_cleanup": "transforms cell sources (IPython input transformers)",
    "input_transformers_post": "transforms cell sources (IPython input transformers)",
    "ast_transformers": "transforms cell code (IPython AST transformers)",
    "showtraceback": "replaces IPython's error display",
    "_getframe": "reads call-stack frames",
    "currentframe": "reads call-stack frames",
    "f_back": "reads call-stack frames",
    "f_locals": "reads call-stack frames",
    "f_globals": "reads call-stack frames",
    "tb_frame": "reads call-stack frames",
    "__closure__": "reads function closures",
    "__globals__": "reads function globals",
    "__code__": "reads or replaces function code",
    "get_referrers": "searches the garbage collector",
    "get_objects": "searches the garbage collector",
    "ctypes": "uses ctypes (raw memory)",
    "settrace": "installs a trace function",
    "setprofile": "installs a profile function",
    "addaudithook": "installs an audit hook",
    "_exit": "exits the process (os._exit)",
    "reload": "reloads modules",
    "__import__": "imports by name at run time",
    "import_module": "imports by name at run time",
    "COURSE_GRADING": "reads or changes the grading mode",
}


def static_review(nb, source) -> list[str]:
    """'review: <where>: <what>' for code the learner wrote that reaches into the grading machinery."""
    source_texts = {
        c.source for c in source.cells if not (c.get("metadata", {}).get("nbgrader") or {}).get("solution")
    }
    imported_modules: set[str] = set()
    findings = []
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code" or cell.source in source_texts:
            continue
        where = _grade_id(cell) or f"cell {index + 1}"
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue  # IPython magics; the kernel will say what is wrong
        found = []
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Name):
                names.append(node.id)
            elif isinstance(node, ast.Attribute):
                names.append(node.attr)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                module = getattr(node, "module", None) or ""
                names += [module.split(".")[0], *(a.name.split(".")[0] for a in node.names)]
                imported_modules.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names += [w for w in ("COURSE_GRADING", "autograders") if w in node.value]
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    root = target
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(root, ast.Name)
                        and root.id
                        in {
                            "torch",
                            "np",
                            "numpy",
                            "math",
                            "os",
                            "sys",
                            "builtins",
                            "memlab",
                            *imported_modules,
                        }
                    ):
                        found.append(f"replaces {ast.unparse(target)}")
            found += [STATIC_PATTERNS[n] for n in names if n in STATIC_PATTERNS]
        for text in dict.fromkeys(found):
            findings.append(f"review: {where}: {text}")
    return findings[:10]


# ---- the sandbox's signed report ---------------------------------------------------------------------------------


class Report:
    """Reads the records a sandboxed kernel writes, checking each one's signature and sequence."""

    def __init__(self, path: Path, key: bytes):
        self.path, self.key, self.offset, self.seq = path, key, 0, 0
        self.problems: list[str] = []

    def read_new(self) -> list[dict]:
        if not self.path.exists():
            return []
        size = self.path.stat().st_size
        if size < self.offset:
            self.problems.append("the kernel's report file was truncated while it ran (tampering?)")
            self.offset = 0
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        complete = data.rfind(b"\n") + 1
        self.offset += complete
        records = []
        for line in data[:complete].splitlines():
            payload, _, mac = line.decode("utf-8", errors="replace").rpartition("\t")
            expected = hmac.new(self.key, payload.encode(), hashlib.sha256).hexdigest()
            if not payload or not hmac.compare_digest(mac, expected):
                self.problems.append("the kernel's report holds a line that is not the sandbox's (forged?)")
                continue
            record = json.loads(payload)
            if record.get("seq") != self.seq + 1:
                self.problems.append("records are missing from the kernel's report (tampering?)")
            self.seq = record.get("seq", self.seq)
            records.append(record)
        return records


# ---- 2. nbgrader's execution, isolated and judged -----------------------------------------------------------------


class CellStopped(Exception):
    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index, self.reason = index, reason


def _error_output(ename: str, evalue: str):
    from nbformat import NotebookNode

    return NotebookNode(
        output_type="error", ename=ename, evalue=evalue, traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"]
    )


def make_grading_execute():
    """The Execute preprocessor for autograde (built lazily: importing nbgrader is slow)."""
    from jupyter_core.utils import ensure_async
    from nbclient.exceptions import DeadKernelError
    from nbconvert.preprocessors.execute import NotebookClient
    from nbgrader.preprocessors import Execute

    class GradingExecute(Execute):
        settings: dict = {}  # set by grade_submission before autograde: the sandbox's config, minus the key
        findings: dict = {"flags": [], "notes": [], "monitor": {}}

        def preprocess(self, nb, resources, km=None):
            original = copy.deepcopy(nb)
            stopped: dict[int, str] = {}
            work = nb
            for attempt in range(MAX_RESTARTS + 1):
                work = copy.deepcopy(original)
                try:
                    self._execute(work, resources, stopped)
                except CellStopped as stop:
                    stopped[stop.index] = stop.reason
                    self.findings["notes"].append(f"cell {stop.index + 1} was stopped: {stop.reason}")
                    if attempt == MAX_RESTARTS:
                        self._not_run(work, stop.index)
                    continue
                break
            nb.cells = work.cells
            nb.metadata = work.metadata
            return nb, self.resources

        def _not_run(self, nb, after: int) -> None:
            for cell in nb.cells[after + 1 :]:
                if _is_test_cell(cell) and not any(
                    o.get("output_type") == "error" for o in cell.get("outputs", [])
                ):
                    cell.outputs = [
                        _error_output("NotRun", f"the kernel was stopped {MAX_RESTARTS + 1} times")
                    ]

        def _start_report(self) -> None:
            folder = Path(self.settings["work_dir"])
            self.key = secrets.token_bytes(32)
            starts = len(list(folder.glob("report-*.log")))
            report_path = folder / f"report-{starts}.log"
            config = dict(
                self.settings,
                key=self.key.hex(),
                report_path=str(report_path),
                monitor_path=str(folder / f"monitor-{starts}.json"),
            )
            config["write_roots"] = [
                *config["write_roots"],
                str(Path(self.resources["metadata"]["path"]).resolve()),
            ]
            config_path = folder / f"sandbox-{starts}.json"
            with open(os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
                json.dump(config, fh)
            os.environ["MEMLAB_SANDBOX_CONFIG"] = str(config_path)
            self.report = Report(report_path, self.key)
            self.monitor_path = folder / f"monitor-{starts}.json"

        def _execute(self, nb, resources, stopped: dict[int, str]) -> None:
            NotebookClient.__init__(self, nb, None)
            self.reset_execution_trackers()
            self._check_assign_resources(resources)
            self._start_report()
            with self.setup_kernel():
                info_msg = self.wait_for_reply(self.kc.kernel_info())
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                self._judge(None)  # the boot record
                for index, cell in enumerate(self.nb.cells):
                    if index in stopped:
                        if cell.cell_type == "code":
                            cell.outputs = [_error_output("CellStopped", f"not run: {stopped[index]}")]
                        continue
                    self._index = index
                    try:
                        self.preprocess_cell(cell, resources, index)
                    except CellStopped:
                        raise
                    except DeadKernelError:
                        raise CellStopped(index, self._death_reason()) from None
                    except (
                        Exception
                    ) as error:  # nbclient lost the kernel's thread (e.g. forked copies talking)
                        raise CellStopped(
                            index,
                            f"the grader lost contact with the kernel ({type(error).__name__}: {error})"[
                                :150
                            ],
                        ) from None
                    self._judge(cell)
            self.set_widgets_metadata()

        def _death_reason(self) -> str:
            monitor = {}
            if self.monitor_path.exists():
                monitor = json.loads(self.monitor_path.read_text())
                self.findings["monitor"].update(monitor)
            if monitor.get("stopped"):
                return f"the kernel was stopped: {monitor['stopped']}"
            return "the kernel died while it ran (os._exit, a crash, or out of memory)"

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
            if "stopped:" not in reason:
                reason = f"it ran past the {timeout} s limit and did not stop when interrupted"
            raise CellStopped(self._index, reason)

        def _judge(self, cell) -> None:
            records = self.report.read_new()
            flags = self.findings["flags"]
            for problem in self.report.problems:
                if problem not in flags:
                    flags.append(problem)
            self.report.problems.clear()
            passes = set()
            for record in records:
                if record.get("kind") == "flag" and record.get("text") not in flags:
                    flags.append(record["text"])
                elif record.get("kind") == "pass":
                    passes.add(record.get("check"))
            if cell is None or not _is_test_cell(cell):
                return
            grade_id = _grade_id(cell)
            check_name = grade_id[: -len("_check")] if grade_id.endswith("_check") else grade_id
            outputs = []
            for output in cell.outputs:
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output = copy.deepcopy(output)
                    output["name"] = "stdout"  # a warning is no failure: nbgrader would score any stderr 0
                if output.get("output_type") == "execute_result":
                    continue  # nbgrader would read a displayed value as partial credit
                outputs.append(output)
            cell.outputs = outputs
            if any(o.get("output_type") == "error" for o in outputs):
                return
            if check_name not in passes:
                text = (
                    "the cell ran without an error, but the course's check never reported a pass for "
                    f"{check_name} (was the check replaced, skipped or silenced?)"
                )
                cell.outputs.append(_error_output("GradingError", text))
                flag = f"{grade_id}: {text}"
                if flag not in flags:
                    flags.append(flag)

    return GradingExecute


# ---- the whole submission ---------------------------------------------------------------------------------------


def graded_cells(notebook) -> list[tuple[str, float, bool]]:
    """(grade_id, points, graded by hand) of every graded cell, in notebook order."""
    cells = []
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        if meta.get("grade"):
            cells.append((meta["grade_id"], float(meta.get("points", 0)), bool(meta.get("solution"))))
    return cells


def failure_notes(notebook, lost: set[str]) -> list[str]:
    """'grade_id: Error: first line' for each autograded cell of `lost`, and for the solution cell of its exercise
    when that cell failed too (the first cause: e.g. a MemoryError before the function was defined)."""
    notes = []
    solutions = {g[: -len("_check")] for g in lost if g.endswith("_check")}
    for cell in notebook.cells:
        grade_id = _grade_id(cell)
        if grade_id in solutions and cell.get("cell_type") == "code":
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if errors:
                first_line = ((errors[0].get("evalue") or "").strip().splitlines() or [""])[0]
                notes.append(f"{grade_id}: {errors[0].get('ename', 'Error')}: {first_line}"[:NOTE_CHARS])
            continue
        if grade_id not in lost or not _is_test_cell(cell):
            continue
        texts = []
        for error in (o for o in cell.get("outputs", []) if o.get("output_type") == "error"):
            first_line = ((error.get("evalue") or "").strip().splitlines() or [""])[0]
            text = f"{error.get('ename', 'Error')}: {first_line}".rstrip(": ")
            if text not in texts:
                texts.append(text)
        notes.append(f"{grade_id}: " + (" / ".join(texts) or "no points")[:NOTE_CHARS])
    return notes


def sandbox_settings(task: dict, work: Path) -> dict:
    """What the sandbox needs to know, minus the per-start key and paths (GradingExecute adds them)."""
    import site
    import sysconfig

    def real(paths):
        return [os.path.realpath(p) for p in paths if p and os.path.exists(p)]

    stdlib = real({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})
    site_packages = real(
        {
            *site.getsitepackages(),
            site.getusersitepackages(),
            *[p for p in sys.path if p.endswith(("site-packages", "dist-packages"))],
        }
    )
    python = real(
        {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    )
    protected = real(task["protected_roots"])
    system = [
        "/usr",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/bin",
        "/sbin",
        "/etc",
        "/opt",
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/snap",
    ]
    read_roots = []
    for root in real(system):
        read_roots += _allow_except(root, protected)
    read_roots += python + site_packages + stdlib + real([task["kit_dir"], str(work / "runtime"), hf_home()])
    return {
        "isolate": task["isolate"],
        "memory_bytes": task["memory_bytes"],
        "total_memory_bytes": task["memory_bytes"],
        "nproc": task["nproc"],
        "max_processes": task["nproc"],
        "fsize_bytes": 2 * 2**30,
        "read_roots": sorted(set(read_roots)),
        "write_roots": [str(work / "tmp"), "/dev"],  # /dev/null, /dev/shm, /dev/nvidia*
        "kit_dir": task["kit_dir"],
        "check_modules": task["check_modules"],
        "reference_modules": task["reference_modules"],
        "trusted_code_roots": [*site_packages, task["kit_dir"]],
        "stdlib_roots": stdlib,
        "protected_roots": protected,
        "work_dir": str(work),
    }


def _allow_except(root: str, protected: list[str], depth: int = 0) -> list[str]:
    """`root`, or (when a protected folder lies inside it) its children that hold nothing protected."""
    inside = [p for p in protected if p == root or p.startswith(root + os.sep)]
    if not inside:
        return [root]
    if depth > 6 or any(p == root for p in inside) or not os.path.isdir(root):
        return []
    allowed = []
    for name in sorted(os.listdir(root)):
        allowed += _allow_except(os.path.join(root, name), protected, depth + 1)
    return allowed


def hf_home() -> str:
    """Hugging Face's cache folder as this process sees it: the kernel may read it (never write it)."""
    return os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")


def kernel_environment(task: dict, work: Path) -> None:
    """The environment the kernel inherits (this process is one submission's worker: safe to change it)."""
    tmp = work / "tmp"
    for sub in ("home", "ipython", "mpl", "cache", "config"):
        (tmp / sub).mkdir(parents=True, exist_ok=True)
    (work / "runtime").mkdir(exist_ok=True)
    huggingface = hf_home()  # read before HOME changes below
    os.environ.update(
        COURSE_GRADING="strict",
        COURSE_GRADING_SEED=str(task["seed"]),
        PYTHONPATH=task["kit_dir"],
        PYTHONDONTWRITEBYTECODE="1",
        HOME=str(tmp / "home"),
        TMPDIR=str(tmp),
        IPYTHONDIR=str(tmp / "ipython"),
        MPLCONFIGDIR=str(tmp / "mpl"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        XDG_CONFIG_HOME=str(tmp / "config"),
        HF_HOME=huggingface,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        JUPYTER_PATH=task["jupyter_path"],
        JUPYTER_RUNTIME_DIR=str(work / "runtime"),
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
    )
    if "threads" in task and not any(v in os.environ for v in THREAD_VARIABLES):
        os.environ.update(dict.fromkeys(THREAD_VARIABLES, str(task["threads"])))


def grade_submission(task: dict) -> dict:
    """Grade one (student, lesson); the result dict (see module docstring)."""
    import nbformat

    slug, student = task["lesson"], task["student_id"]
    work = Path(task["work_dir"])
    source = nbformat.read(Path(task["template"]) / "solutions" / slug / f"{slug}.ipynb", as_version=4)
    cells = graded_cells(source)
    result = {
        "scores": {g: 0.0 for g, _, _ in cells},
        "manual": [g for g, _, m in cells if m],
        "notes": [],
        "flags": [],
        "seconds": 0.0,
    }
    start = time.perf_counter()
    try:
        nb, notes = read_submission(Path(task["submission"]), slug)
    except Refused as refused:
        result["notes"].append(str(refused))
        result["manual"] = []
        return result
    result["notes"] += notes + restore_structure(nb, source)
    result["notes"] += static_review(nb, source)

    course = work / "course"
    shutil.copytree(Path(task["template"]) / "solutions" / slug, course / "solutions" / slug)
    shutil.copy(Path(task["template"]) / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy(Path(task["template"]) / "gradebook.db", course / "gradebook.db")
    submitted = course / "submitted" / student / slug
    submitted.mkdir(parents=True)
    result["notes"] += copy_lesson_folder(Path(task["submission"]), submitted, f"{slug}.ipynb")
    nbformat.write(nb, submitted / f"{slug}.ipynb")

    kernel_environment(task, work)
    GradingExecute = make_grading_execute()  # noqa: N806
    GradingExecute.settings = sandbox_settings(task, work)
    api = nbgrader_api(course, task, GradingExecute)
    outcome = api.autograde(slug, student, force=True, create=True)
    findings = GradingExecute.findings
    result["flags"] += findings["flags"]
    result["notes"] += findings["notes"]
    if not outcome["success"]:
        result["notes"].insert(0, "autograde failed: " + autograde_error(outcome)[:NOTE_CHARS])
        result["seconds"] = time.perf_counter() - start
        return result

    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gradebook:
        for notebook in gradebook.find_submission(slug, student).notebooks:
            for grade in notebook.grades:
                score = grade.manual_score if grade.manual_score is not None else grade.auto_score
                result["scores"][grade.name] = (
                    None if score is None else float(score)
                )  # None: to grade by hand
    autograded = nbformat.read(course / "autograded" / student / slug / f"{slug}.ipynb", as_version=4)
    lost = {g for g, points, manual in cells if not manual and (result["scores"][g] or 0) < points}
    result["notes"] += failure_notes(autograded, lost)
    for grade_id in result["manual"]:
        if result["scores"][grade_id] is None:
            result["notes"].append(f"{grade_id}: needs manual grading")
        else:
            result["notes"].append(f"{grade_id}: no answer written")
    result["autograded"] = str(course / "autograded" / student / slug / f"{slug}.ipynb")
    result["seconds"] = time.perf_counter() - start
    return result


def nbgrader_api(course: Path, task: dict, execute_class):
    import warnings

    from build_lessons import load_config
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )

    warnings.filterwarnings("ignore", message=".* not in session", module="nbgrader")
    bindir = os.path.dirname(sys.executable)  # nbgrader shells out to `alembic`
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    config = load_config(course)
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = "sqlite:///" + str(course / "gradebook.db")
    config.Execute.timeout = task["timeout"]
    config.Execute.kernel_name = KERNEL_NAME
    config.Execute.interrupt_on_timeout = True
    config.Autograde.autograde_preprocessors = [
        execute_class,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
    config.NbGraderAPI.log_level = "WARN"
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def autograde_error(outcome: dict) -> str:
    """The exception behind a failed nbgrader run (its own NbGraderException only says "see the log")."""
    import re

    pattern = re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt|Exit)\b.*")
    lines = f"{outcome.get('log', '')}\n{outcome.get('error', '')}".splitlines()
    causes = [m.group(0).strip() for line in lines if (m := pattern.match(line))]
    causes = [c for c in causes if "NbGraderException" not in c]
    return causes[-1] if causes else "see nbgrader's log (grade.py --keep DIR keeps it)"


def main(argv: list[str]) -> int:
    task = json.loads(Path(argv[0]).read_text())
    try:
        result = grade_submission(task)
    except (
        Exception
    ):  # a bug of the grader, not the student's fault: say so in the notes, keep the batch going
        result = {
            "scores": {},
            "manual": [],
            "flags": [],
            "seconds": 0.0,
            "notes": ["the grader itself failed on this submission: " + traceback.format_exc(limit=3)[-300:]],
            "grader_error": True,
        }
    Path(task["result_path"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
