"""scripts/grade_sandbox.py, one kernel at a time: what a submitted cell can and cannot do inside it.

Each test starts the sandboxed kernel as scripts/grade_worker.py would (its settings, a fresh key, a report file),
runs cells in it through jupyter_client and reads the signed report. Three set-ups: the default (here, as root: a PID
namespace), the path of an ordinary user (a user namespace too), and the fallback where namespaces are refused.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

import grade_worker
import pytest
from grade_sandbox import landlock_abi
from nbgrader_pipeline import ROOT, SCRIPTS

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="needs Linux Landlock")


class Kernel:
    """A sandboxed kernel and its report; `run(code)` returns (stdout, error name or None)."""

    def __init__(self, tmp: Path, **config):
        self.tmp = tmp
        kit = tmp / "kit"
        for package in ("memlab", "autograders"):
            shutil.copytree(ROOT / package, kit / package, ignore=shutil.ignore_patterns("__pycache__"))
        spec = tmp / "jupyter" / "kernels" / "memlab-grading"
        spec.mkdir(parents=True)
        argv = [sys.executable, str(SCRIPTS / "grade_sandbox.py"), "-f", "{connection_file}"]
        (spec / "kernel.json").write_text(
            json.dumps({"argv": argv, "language": "python", "display_name": "t"})
        )
        self.folder = tmp / "notebook"
        self.folder.mkdir()
        (tmp / "secret").mkdir()
        (tmp / "secret" / "answers.txt").write_text("42")
        task = {
            "kit_dir": str(kit),
            "seed": 5,
            "jupyter_path": str(tmp / "jupyter"),
            "isolate": True,
            "memory_bytes": config.pop("memory_bytes", 4 * 2**30),
            "nproc": 256,
            "check_modules": ["autograders.lesson02"],
            "reference_modules": ["autograders.references.lesson02"],
            "protected_roots": [str(ROOT), str(tmp / "secret")],
        }
        if "threads" in config:
            task["threads"] = config.pop("threads")
        saved = dict(os.environ)
        grade_worker.kernel_environment(task, tmp)
        settings = grade_worker.sandbox_settings(task, tmp)
        self.key = secrets.token_bytes(32)
        cfg = dict(
            settings,
            key=self.key.hex(),
            report_path=str(tmp / "report.log"),
            monitor_path=str(tmp / "monitor.json"),
            **config,
        )
        cfg["write_roots"] = [*cfg["write_roots"], str(self.folder)]
        (tmp / "sandbox.json").write_text(json.dumps(cfg))
        os.environ["MEMLAB_SANDBOX_CONFIG"] = str(tmp / "sandbox.json")
        from jupyter_client.manager import KernelManager

        try:
            self.km = KernelManager(
                kernel_name="memlab-grading", connection_file=str(tmp / "runtime" / "k.json")
            )
            self.km.start_kernel(cwd=str(self.folder))
            self.kc = self.km.client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=90)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.report = grade_worker.Report(tmp / "report.log", self.key)

    def run(self, code: str, timeout: float = 60) -> tuple[str, str | None]:
        msg_id = self.kc.execute(code)
        out, error = [], None
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                error = content["ename"]
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out), error

    def records(self) -> list[dict]:
        return self.report.read_new()

    def stop(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


#: a right answer to lesson 02's Exercise 2.2, for the checks run in a kernel below
FORMAT_LIMITS = (
    "from autograders.lesson02 import check_format_limits\n"
    "def format_limits(e, m, nan_encoding='ieee'):\n"
    "    import math\n"
    "    bias = 2 ** (e - 1) - 1\n"
    "    top = (2 - 2.0 ** (1 - m), 2**e - 1 - bias) if nan_encoding == 'fn' else (2 - 2.0**-m, 2**e - 2 - bias)\n"
    "    return {'max': math.ldexp(*top), 'min_normal': 2.0 ** (1 - bias), 'min_subnormal': 2.0 ** (1 - bias - m),"
    " 'eps': 2.0**-m}\n"
)


@pytest.fixture(params=["default", "user namespace", "no namespaces"])
def kernel(request, tmp_path):
    config = {
        "default": {},
        "user namespace": {"user_namespace": "always"},
        "no namespaces": {"namespaces": False},
    }[request.param]
    k = Kernel(tmp_path, **config)
    k.mode = request.param
    yield k
    k.stop()


def test_the_kernel_is_confined(kernel):
    out, error = kernel.run(
        "import os\n"
        "def attempt(f):\n"
        "    try:\n        f()\n        return 'allowed'\n    except Exception as e:\n        return type(e).__name__\n"
        f"print(attempt(lambda: open({str(ROOT / 'README.md')!r}).read()))\n"
        f"print(attempt(lambda: open({str(kernel.tmp / 'secret' / 'answers.txt')!r}).read()))\n"
        f"print(attempt(lambda: open({str(ROOT / 'autograders' / 'kit.py')!r}, 'a')))\n"
        "print(attempt(lambda: open('mine.txt', 'w').write('ok')))\n"
        f"print(attempt(lambda: open({str(kernel.tmp / 'report.log')!r}, 'a')))\n"
        "print(os.getpid())\n"
    )
    assert error is None, out
    lines = out.split()
    assert lines[:5] == [
        "PermissionError",
        "PermissionError",
        "PermissionError",
        "allowed",
        "PermissionError",
    ]
    assert (kernel.folder / "mine.txt").read_text() == "ok"
    if kernel.mode != "no namespaces":
        assert lines[5] == "2"  # pid 1 is the namespace's init; the kernel sees no process outside it
        out, _ = kernel.run(
            "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit())[:3])"
        )
        assert out.strip() == "[1, 2]"
    flags = [r["text"] for r in kernel.records() if r["kind"] == "flag"]
    assert any("answers.txt" in f for f in flags) and any("README.md" in f for f in flags)


def test_a_genuine_pass_is_recorded_and_a_forged_one_is_not(kernel):
    out, error = kernel.run(FORMAT_LIMITS + "check_format_limits(format_limits)")
    assert error is None and "✓ e2_format_limits" in out
    out, error = kernel.run("import sys\nsys.audit('memlab.check.passed', 'e4_ulp', 55)")
    assert error == "RuntimeError"
    records = kernel.records()
    passes = [r["check"] for r in records if r["kind"] == "pass"]
    assert passes == ["e2_format_limits"]
    assert any(r["kind"] == "violation" and r["check"] == "e4_ulp" for r in records)


def test_a_grading_reference_refuses_submitted_code(kernel):
    out, error = kernel.run("from autograders.references.lesson02 import ulp\nulp(1.0, 'fp16')")
    assert error == "RuntimeError"
    assert any("called a grading reference implementation" in r.get("text", "") for r in kernel.records())


def test_a_detached_process_dies_with_the_kernel(kernel):
    marker = kernel.tmp / "tmp" / "still-alive"
    out, error = kernel.run(
        "import subprocess\n"
        f"p = subprocess.Popen(['sh', '-c', 'sleep 4; touch {marker}'], start_new_session=True)\n"
        "import time; time.sleep(0.5)\nprint(p.pid)"
    )
    assert error is None
    kernel.stop()
    time.sleep(6)
    assert not marker.exists()


def test_a_memory_bomb_gets_a_memory_error(tmp_path):
    k = Kernel(tmp_path, memory_bytes=2**30)
    try:
        out, error = k.run("hog = bytearray(3 * 2**30)")
        assert error == "MemoryError"
        out, error = k.run("print('still here')")
        assert error is None and "still here" in out
    finally:
        k.stop()


def test_a_distributed_job_runs_inside_the_sandbox(tmp_path):
    """Lesson 05 starts 2 gloo processes with torchrun from the notebook (memlab.distributed): under grading they
    must start, find memlab in the kit, rendezvous over loopback TCP and write their results into TMPDIR."""
    k = Kernel(tmp_path)
    try:
        out, error = k.run(
            "from memlab.distributed import launch\n"
            "r = launch({'zero_memory': dict(widths=[8, 6, 4], strategies=['ddp', 'fsdp2'])})\n"
            "print(len(r['zero_memory']), r['zero_memory'][1]['strategies']['fsdp2']['after_step']['parameters'])",
            timeout=120,
        )
    finally:
        k.stop()
    assert error is None, out
    assert out.split() == [
        "2",
        str(4 * (3 * 8 + 3 + 2 * 6 + 2)),
    ]  # FSDP2: rank 1's half (rows padded) of each tensor


def test_each_kernel_gets_its_share_of_the_cpus(tmp_path, monkeypatch):
    """grade.py --jobs N splits the CPUs between the N kernels (torch would start one thread per core in each)."""
    import grade

    cpus = len(os.sched_getaffinity(0))
    assert grade.kernel_threads(1) == cpus
    assert grade.kernel_threads(2) == max(1, cpus // 2)
    assert grade.kernel_threads(4 * cpus) == 1
    for variable in grade.THREAD_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    kernel = Kernel(tmp_path, threads=1)
    try:
        out, error = kernel.run(
            "import os, torch\nprint(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])"
        )
    finally:
        kernel.stop()
    assert (out.split(), error) == (["1", "1"], None)


def test_the_instructors_thread_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    kernel = Kernel(tmp_path, threads=1)
    try:
        out, error = kernel.run("import torch\nprint(torch.get_num_threads())")
    finally:
        kernel.stop()
    assert (out.split(), error) == (["2"], None)


@pytest.mark.parametrize(
    "tampering",
    [
        "autograders.lesson02.LIMIT_CASES = autograders.lesson02.LIMIT_CASES[:1]",  # rebinds a constant
        "autograders.lesson02.LIMIT_CASES.pop()",  # mutates one in place
    ],
)
def test_changing_a_constant_of_the_checks_is_tampering(tmp_path, tampering):
    """A check module's constants (its cases, a bar, a tolerance) are watched by value like its functions: lesson 08's
    check passed a run that learned nothing once the submission set `ACCURACY_BAR = 0.0`."""
    kernel = Kernel(tmp_path)
    try:
        out, error = kernel.run(
            FORMAT_LIMITS
            + "import autograders.lesson02\n"
            + tampering
            + "\ncheck_format_limits(format_limits)"
        )
    finally:
        kernel.stop()
    assert error == "RuntimeError", out
    records = kernel.records()
    assert not [r for r in records if r["kind"] == "pass"]
    assert any(
        "autograders.lesson02.LIMIT_CASES" in r.get("text", "") for r in records if r["kind"] == "flag"
    )
