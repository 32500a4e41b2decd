"""What a grading process pays before it grades: jsonschema's rfc3987_syntax is left out (grading/__init__.py),
grade.py's workers are forked from a server that imported their modules once (grading/batch.py, worker_server), with
the kit's heavy dependencies only for lessons whose checks are the kit's, and a course's gradebook is made without
starting the `alembic` command (grading/course.py, create_gradebook); and the order a batch starts its submissions in
(grading/batch.py, grading_order).

And CUDA and fork (grading/worker.py): on a GPU machine the judge ran in a worker forked from a server that had
touched CUDA, and honest work lost most of its points ("Cannot re-initialize CUDA in forked subprocess"). No GPU is
needed to see that again: importing what the server imports, with torch's CUDA entry points replaced by a recorder
that answers as a GPU machine would (`CUDA_SPY`), shows every call that would have initialized CUDA there."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from grading.worker import KIT_PRELOAD, PRELOAD, TORCH_PRELOAD, preload_for

ROOT = Path(__file__).resolve().parents[2]


def imported_after(code: str) -> set[str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{code}\nimport sys\nprint(' '.join(n for n, m in sys.modules.items() if m))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_the_grader_reads_notebooks_without_compiling_rfc3987_grammars():
    if importlib.util.find_spec("rfc3987_syntax") is None:
        pytest.skip("rfc3987-syntax is not installed here: jsonschema cannot import it anyway")
    assert "rfc3987_syntax" in imported_after("import nbformat")  # what it costs without the grader first
    modules = imported_after("import grading\nimport nbformat\nnbformat.validate(nbformat.v4.new_notebook())")
    assert "rfc3987_syntax" not in modules and "lark" not in modules


def test_the_grader_and_memlab_import_without_torch():
    """scripts/grade.py answers a wrong argument at once (it took 3 s, 7 s under load, to import torch first), and
    `import memlab` does its setup (memlab/startup.py) without torch; a submodule comes when it is named."""
    assert "torch" not in imported_after("import memlab, grading.batch")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "grade.py"), "/nonexistent", "--out", "x.csv"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert "torch" in imported_after("import memlab\nmemlab.hardware.pick_device()")


def test_grade_py_without_the_course_installed_says_what_to_install():
    """A Python without the course (pip run from another folder installs nothing of it: requirements.txt's `-e .` is
    read against the working folder) gets the command that installs it, not a traceback ending in `grading`."""
    proc = subprocess.run(
        [
            sys.executable,
            "-S",
            str(ROOT / "scripts" / "grade.py"),
            "subs",
            "--out",
            "x.csv",
        ],  # -S: no site-packages
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT.parent,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{sys.executable} -m pip install -e {ROOT}" in proc.stderr


def test_grade_py_with_the_course_on_pythonpath_but_not_its_dependencies_says_what_to_install(tmp_path):
    """The course importable (PYTHONPATH) in a Python without its dependencies: the install command, not a
    traceback ending in the first dependency grading imports."""
    proc = subprocess.run(
        [sys.executable, "-S", str(ROOT / "scripts" / "grade.py"), "subs", "--out", "x.csv"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{sys.executable} -m pip install -e {ROOT}" in proc.stderr


def test_grade_py_without_nbgrader_says_so_before_grading(tmp_path):
    """nbgrader is imported only once grading has started (the smoke test's Python lacked it and got a traceback):
    grade.py looks for it, and torch, first."""
    hide = (
        "import importlib.util as u, runpy, sys\n"
        "find = u.find_spec\n"
        "u.find_spec = lambda name, *a: None if name == 'nbgrader' else find(name, *a)\n"
        f"sys.argv = [{str(ROOT / 'scripts' / 'grade.py')!r}, 'subs', '--out', 'x.csv']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", hide], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "lacks the course's dependencies (no nbgrader)" in proc.stderr


def test_grade_py_grades_from_its_checkout_when_this_python_has_the_dependencies_but_not_the_course():
    """A Python with torch, nbgrader, ... but not the course (the grading smoke test's): grade.py runs again with its
    checkout on PYTHONPATH, says so, and goes on (here to its answer about a folder that does not exist)."""
    import site

    env = {
        **os.environ,
        "PYTHONPATH": site.getsitepackages()[0],
    }  # -S: the packages, not the course's editable finder
    proc = subprocess.run(
        [sys.executable, "-S", str(ROOT / "scripts" / "grade.py"), "/nonexistent", "--out", "x.csv"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT.parent,
        env=env,
    )
    assert f"the course is not installed in {sys.executable}; grading from {ROOT}" in proc.stderr
    assert proc.returncode == 2 and "does not exist" in proc.stderr, proc.stderr


def test_the_worker_server_preloads_what_a_worker_needs_but_not_the_check_kit():
    modules = imported_after("import " + ", ".join(PRELOAD + TORCH_PRELOAD))
    assert {"torch", "nbformat", "nbgrader.apps", "grading.judge"} <= modules
    assert "autograders.kit" not in modules  # it comes with the check modules a judge imports


LESSON_08 = ROOT / "solutions" / "08-capstone-7b-lora" / "08-capstone-7b-lora.ipynb"
FIXTURE = ROOT / "tests" / "fixtures" / "minicourse" / "solutions" / "00-fixture" / "00-fixture.ipynb"


@pytest.mark.slow  # imports transformers' Trainer and peft in a new process: the full tier
def test_the_kits_dependencies_are_preloaded_only_for_lessons_whose_checks_are_the_kits():
    assert preload_for([FIXTURE], cuda=False) == PRELOAD + TORCH_PRELOAD
    assert preload_for([FIXTURE, LESSON_08], cuda=False) == PRELOAD + TORCH_PRELOAD + KIT_PRELOAD
    modules = imported_after("import " + ", ".join(KIT_PRELOAD))
    assert {"transformers.trainer", "peft"} <= modules and "autograders.kit" not in modules


# ---- CUDA and fork ----------------------------------------------------------------------------------------------

#: run before the imports under test: as soon as torch has been imported, its CUDA entry points record each call
#: (name and where from) into the JSON file argv[1] and answer as on a machine with one Hopper GPU. Any such call in
#: a process that later forks leaves its forks unable to use CUDA (torch.cuda.is_available() runs cudaGetDeviceCount,
#: which initializes the driver).
CUDA_SPY = """
import atexit, importlib.abc, importlib.util, json, sys, traceback
CALLS = []
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(CALLS)))
ANSWERS = {"is_available": True, "device_count": 1, "_cuda_getDeviceCount": 1, "get_device_capability": (9, 0),
           "is_initialized": False}
INITIALIZERS = ("is_available", "device_count", "init", "_lazy_init", "current_device", "get_device_capability",
                "get_device_properties", "get_device_name", "set_device", "mem_get_info", "synchronize",
                "memory_allocated", "max_memory_allocated", "get_arch_list")

def recorder(name):
    def call(*args, **kwargs):
        CALLS.append({"call": name, "from": "".join(traceback.format_stack(limit=6)[:-1])})
        if name in ANSWERS:
            return ANSWERS[name]
        raise RuntimeError(f"CUDA_SPY: {name} would need a GPU here")
    return call

def spy_on(torch):
    for name in INITIALIZERS:
        setattr(torch.cuda, name, recorder(name))
    if hasattr(torch._C, "_cuda_getDeviceCount"):  # a CUDA build (on a CPU build its absence says "not compiled")
        torch._C._cuda_getDeviceCount = recorder("_cuda_getDeviceCount")

class AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            spy_on(module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, AfterTorch())
"""


def cuda_calls_importing(modules: list[str], tmp_path: Path) -> tuple[list[dict], set[str]]:
    """The CUDA calls importing `modules` (in order, in a fresh interpreter) makes, and the modules it then holds.
    An import that fails because the spy said a GPU is there is fine: its call is recorded first."""
    record = tmp_path / "cuda-calls.json"
    code = CUDA_SPY + (
        "for name in sys.argv[2:]:\n"
        "    try:\n        __import__(name)\n"
        "    except Exception as error:\n        print('import', name, 'failed:', repr(error)[:200])\n"
        "print(' '.join(n for n, m in sys.modules.items() if m))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(record), *modules], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(record.read_text()), set(proc.stdout.split())


def test_the_cuda_spy_sees_a_library_that_touches_cuda_when_imported(tmp_path):
    """The recorder is not blind: bitsandbytes (imported by peft, imported by transformers' Trainer) calls
    torch.cuda.is_available() at import: on a GPU machine that alone makes a fork unable to use CUDA."""
    if importlib.util.find_spec("bitsandbytes") is None:
        pytest.skip("bitsandbytes is not installed here")
    calls, _modules = cuda_calls_importing(["bitsandbytes"], tmp_path)
    assert any(c["call"] == "is_available" and "bitsandbytes" in c["from"] for c in calls), calls


def test_where_a_cuda_device_may_be_present_the_worker_server_never_touches_cuda(tmp_path, monkeypatch):
    """What grade.py's worker server imports on a GPU machine (batch.worker_server, with the machine's CUDA device
    files present) makes no CUDA call and does not import torch: every worker forked from it may use CUDA. On the
    code of 2026-11-28 it imported torch, transformers' Trainer and peft, and bitsandbytes called is_available."""
    import multiprocessing

    from grading import batch, isolation, worker

    for module in (isolation, worker, batch):
        monkeypatch.setattr(module, "cuda_device_present", lambda environ=None: True, raising=False)
    preloads = []

    class Context:
        def set_forkserver_preload(self, modules):
            preloads.append(list(modules))

    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Context())
    monkeypatch.setattr("multiprocessing.forkserver.ensure_running", lambda: None)
    batch.worker_server([FIXTURE, LESSON_08])
    calls, modules = cuda_calls_importing(preloads[0], tmp_path)
    assert not calls, "the worker server touched CUDA:\n" + "\n".join(
        c["call"] + ":\n" + c["from"] for c in calls
    )
    assert "torch" not in modules
    assert {"nbformat", "nbgrader.apps", "grading.worker", "grading.judge"} <= modules


def test_a_worker_forked_after_torch_was_imported_on_a_cuda_machine_starts_again_fresh(tmp_path):
    """Belt and braces for a library release that imports torch under nbformat or nbgrader: a worker forked from a
    server that holds torch, where a CUDA device may be present, replaces itself by `python -m grading.worker` (the
    same process and session: grade.py's deadline still kills it) before it grades. Run here through a real
    forkserver whose preload imports torch and says a CUDA device is present (tests/pretend_cuda.py)."""
    log = tmp_path / "worker.log"
    task = tmp_path / "missing-task.json"
    code = (
        "import multiprocessing, sys\n"
        "from grading.worker import forked\n"
        "context = multiprocessing.get_context('forkserver')\n"
        "context.set_forkserver_preload(['torch', 'grading.worker', 'pretend_cuda'])\n"
        f"proc = context.Process(target=forked, args=({str(task)!r}, {str(log)!r}))\n"
        "proc.start(); proc.join(120); print('pid', proc.pid, 'exit', proc.exitcode)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = log.read_text()
    from grading.worker import FRESH_START_LOG

    assert text.startswith(FRESH_START_LOG), text[:2000]
    # the fresh interpreter is the worker's own main: it reads its task (missing here) and says so
    assert "FileNotFoundError" in text and "missing-task.json" in text, text[-2000:]


def test_a_worker_starts_again_only_where_torch_was_imported_and_cuda_may_be_present():
    from grading.worker import fresh_interpreter_needed

    assert fresh_interpreter_needed(True, {"torch": object()})
    assert not fresh_interpreter_needed(True, {"nbformat": object()})
    assert not fresh_interpreter_needed(False, {"torch": object()})


def test_cuda_visible_devices_decides_whether_a_cuda_device_may_be_present(monkeypatch):
    from grading import isolation

    monkeypatch.setattr(isolation.glob, "glob", lambda pattern: [pattern] if "nvidia" in pattern else [])
    assert isolation.cuda_device_present({})
    assert isolation.cuda_device_present({"CUDA_VISIBLE_DEVICES": "0"})
    for hidden in ("", " ", "-1", "-1,0"):
        assert isolation.cuda_hidden({"CUDA_VISIBLE_DEVICES": hidden})
        assert not isolation.cuda_device_present({"CUDA_VISIBLE_DEVICES": hidden})
    monkeypatch.setattr(isolation.glob, "glob", lambda pattern: [])
    assert not isolation.cuda_device_present({})


def test_a_sandbox_sees_the_gpus_the_instructor_leaves_visible(monkeypatch, tmp_path):
    """CUDA_VISIBLE_DEVICES is the instructor's, like the thread count: the kernel gets it, and where it hides every
    device the sandbox is given no GPU device file (grading as a machine without a GPU)."""
    from grading import isolation

    monkeypatch.setattr(
        isolation.glob, "glob", lambda pattern: ["/dev/nvidia0"] if "nvidia" in pattern else []
    )
    sandbox = isolation.Sandbox(kit_dir=str(tmp_path), workdir=str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert sandbox.env()["CUDA_VISIBLE_DEVICES"] == "1" and "/dev/nvidia0" in sandbox._bwrap()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert sandbox.env()["CUDA_VISIBLE_DEVICES"] == "" and "/dev/nvidia0" not in sandbox._bwrap()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "CUDA_VISIBLE_DEVICES" not in sandbox.env()


def _schema_and_revision(path: Path):
    with sqlite3.connect(path) as db:
        return (
            sorted(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()),
            db.execute("SELECT version_num FROM alembic_version").fetchall(),
        )


@pytest.mark.slow  # nbgrader's own way takes the seconds create_gradebook saves: the full tier
def test_a_course_gradebook_is_the_one_nbgrader_makes(tmp_path, monkeypatch):
    """The same tables and the same alembic revision as nbgrader's own Gradebook, which runs `alembic heads`."""
    from nbgrader.api import Gradebook

    from grading.course import create_gradebook

    create_gradebook(tmp_path / "ours.db")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    with Gradebook(f"sqlite:///{tmp_path / 'nbgraders.db'}"):
        pass
    ours, theirs = _schema_and_revision(tmp_path / "ours.db"), _schema_and_revision(tmp_path / "nbgraders.db")
    assert ours == theirs and len(ours[0]) > 10 and len(ours[1]) == 1


def test_a_batch_starts_with_the_last_lesson_and_keeps_the_students_order():
    from grading.batch import grading_order

    students = [(0, "ada"), (1, "bo")]
    lessons = ["01-memory-anatomy", "06-profiling", "08-capstone-7b-lora"]
    assert grading_order(students, lessons) == [
        (0, "ada", "08-capstone-7b-lora"),
        (1, "bo", "08-capstone-7b-lora"),
        (0, "ada", "06-profiling"),
        (1, "bo", "06-profiling"),
        (0, "ada", "01-memory-anatomy"),
        (1, "bo", "01-memory-anatomy"),
    ]
