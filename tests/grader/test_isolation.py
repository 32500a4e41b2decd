"""grading/isolation.py: what a process started through `Sandbox.command` can and cannot do.

Each test runs a small Python program in a sandbox as the grader does (`Sandbox.command(argv)` with
`Sandbox.env()`, a copy of the kit without its references, the test's own folder as the submission's folder) and
reads what it printed; a few start a real Jupyter kernel through grading.kernels.kernel_manager_class. CI
installs bubblewrap: grading cannot be tested without it, so nothing here is skipped when it is missing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from autograders import wire
from autograders.kit import TRANSCRIPT_MIME
from grading import isolation
from grading.batch import kernel_threads
from grading.course import prepare_kit
from grading.kernels import kernel_manager_class
from grading.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20


@pytest.fixture(scope="module")
def kit_dir(tmp_path_factory) -> str:
    return str(prepare_kit(tmp_path_factory.mktemp("kit")))


@pytest.fixture
def workdir(tmp_path) -> Path:
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "mine.txt").write_text("my own file")
    (tmp_path / "other-student").mkdir()
    (tmp_path / "other-student" / "answers.txt").write_text("42")
    return folder


def sandbox(kit_dir: str, workdir: Path, **settings) -> isolation.Sandbox:
    return isolation.Sandbox(kit_dir=kit_dir, workdir=str(workdir), **settings)


#: a helper defined in every program run by `run_python`: what happens when `f` runs ("ok: <its value>" or the error's name)
ATTEMPT = """
import json, os
def attempt(f):
    try:
        return f"ok: {f()}"
    except Exception as error:
        return type(error).__name__
"""


def run_python(box: isolation.Sandbox, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`code` (after ATTEMPT) run by this Python inside `box`, as the grader starts a process there."""
    box.hand_over()
    return subprocess.run(
        box.command([sys.executable, "-c", ATTEMPT + textwrap.dedent(code)]),
        env=box.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def printed(proc: subprocess.CompletedProcess):
    """The JSON value a sandboxed program printed last."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_isolation_is_available_here():
    """CI runs on Linux with bubblewrap: the isolation every grading test relies on is real here."""
    assert isolation.unavailable() is None
    assert os.path.exists("/proc/self/ns/pid")


def test_the_submissions_folder_is_readable_and_writable(kit_dir, workdir):
    proc = run_python(
        sandbox(kit_dir, workdir),
        """
        print(json.dumps({
            "cwd": os.getcwd(),
            "read": attempt(lambda: open("mine.txt").read()),
            "write": attempt(lambda: open("written.txt", "w").write("from the sandbox")),
            "tmp": attempt(lambda: open("/tmp/scratch", "w").write("x")),
        }))
        """,
    )
    assert printed(proc) == {
        "cwd": str(workdir),
        "read": "ok: my own file",
        "write": "ok: 16",
        "tmp": "ok: 1",
    }
    assert (workdir / "written.txt").read_text() == "from the sandbox"


def test_the_repository_and_other_folders_do_not_exist_inside(kit_dir, workdir):
    secret = workdir.parent / "other-student" / "answers.txt"
    proc = run_python(
        sandbox(kit_dir, workdir),
        f"""
        paths = {[str(ROOT / "solutions"), str(ROOT / "README.md"), str(ROOT / "autograders"), str(secret)]!r}
        print(json.dumps({{
            "exist": [p for p in paths if os.path.exists(p)],
            "secret": attempt(lambda: open({str(secret)!r}).read()),
            "references": attempt(lambda: __import__("autograders.references.lesson01")),
            "kit": attempt(lambda: __import__("autograders.kit").kit.__file__.startswith({kit_dir!r})),
        }}))
        """,
    )
    assert printed(proc) == {
        "exist": [],
        "secret": "FileNotFoundError",
        "references": "ModuleNotFoundError",  # the kit a sandbox imports has no grading references
        "kit": "ok: True",
    }


def test_nothing_outside_the_submissions_folder_and_tmp_is_writable(kit_dir, workdir):
    targets = {
        "kit": os.path.join(kit_dir, "autograders", "kit.py"),
        "python": os.path.join(sys.prefix, "tampered.txt"),
        "system": "/usr/tampered.txt",
        "etc": "/etc/tampered.txt",
    }
    kit_before = Path(targets["kit"]).read_bytes()
    proc = run_python(
        sandbox(kit_dir, workdir),
        f"""
        targets = {targets!r}
        print(json.dumps({{name: attempt(lambda p=p: open(p, "a").write("x")) for name, p in targets.items()}}))
        """,
    )
    # a read-only file system (OSError), or, where the grader is root, files the sandbox's own user may not write
    assert set(printed(proc).values()) <= {"OSError", "PermissionError"}, printed(proc)
    assert Path(targets["kit"]).read_bytes() == kit_before
    assert not any(os.path.exists(targets[k]) for k in ("python", "system", "etc"))


@pytest.mark.skipif(os.geteuid() != 0, reason="a grader that is not root reads only its own files anyway")
def test_a_grader_running_as_root_does_not_lend_root_to_the_sandbox(kit_dir, workdir, tmp_path):
    """The sandbox runs as a user of its own: a file only root may read, in a folder the sandbox is shown, stays
    unread (the kernel ran as root in its own user namespace, mapped to the machine's root, and read such files)."""
    shown = tmp_path / "shown"
    shown.mkdir(mode=0o755)
    (shown / "root-only.txt").write_text("root's secret")
    os.chmod(shown / "root-only.txt", 0o600)
    (shown / "public.txt").write_text("anyone's")
    os.chmod(shown / "public.txt", 0o644)
    proc = run_python(
        sandbox(kit_dir, workdir, readable=(str(shown),)),
        f"""
        print(json.dumps({{
            "uid": os.getuid(),
            "root_only": attempt(lambda: open({str(shown / "root-only.txt")!r}).read()),
            "public": attempt(lambda: open({str(shown / "public.txt")!r}).read()),
            "shadow": attempt(lambda: open("/etc/shadow").read()[:4]) if os.path.exists("/etc/shadow") else "none",
        }}))
        """,
    )
    seen = printed(proc)
    assert seen["uid"] == isolation.sandbox_uid() and seen["uid"] != 0
    assert seen["root_only"] == "PermissionError" and seen["public"] == "ok: anyone's"
    assert seen["shadow"] in ("PermissionError", "none")


def test_the_hugging_face_token_stays_out_of_the_sandbox(kit_dir, workdir, tmp_path, monkeypatch):
    """The models and datasets the grader has cached are readable; its access token, in the same HF_HOME, is not
    there at all (HF_HOME itself was mounted, token included)."""
    home = tmp_path / "hf"
    for folder in ("hub", "datasets"):
        (home / folder).mkdir(parents=True)
        (home / folder / "cached.txt").write_text("a cached file")
    (home / "token").write_text("hf_grader_secret")
    (home / "stored_tokens").write_text("hf_grader_secret")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    for folder in (home, home / "hub", home / "datasets"):
        os.chmod(folder, 0o755)
    proc = run_python(
        sandbox(kit_dir, workdir, readable=isolation.hf_caches()),
        f"""
        home = {str(home)!r}
        print(json.dumps({{name: attempt(lambda name=name: open(os.path.join(home, name)).read())
                          for name in ("token", "stored_tokens", "hub/cached.txt", "datasets/cached.txt")}}))
        """,
    )
    assert printed(proc) == {
        "token": "FileNotFoundError",
        "stored_tokens": "FileNotFoundError",
        "hub/cached.txt": "ok: a cached file",
        "datasets/cached.txt": "ok: a cached file",
    }


def test_tmp_and_dev_shm_are_bounded_and_counted_as_memory(kit_dir, workdir):
    """/tmp and /dev/shm are RAM: a submission kept 3 GiB there under --memory-limit 1, unseen. Each is a tmpfs of at
    most the memory limit, and the watch adds what they hold to the processes' memory."""
    box = sandbox(kit_dir, workdir, limits=isolation.Limits(memory_bytes=300 * MiB))
    watch, out = _watched(
        box,
        """
        import os, time
        for folder in ("/dev/shm", "/tmp"):
            try:
                with open(folder + "/hoard", "wb") as fh:
                    for _ in range(200):
                        fh.write(b"x" * 2**20)  # 200 MiB in each: 400 MiB together, over the 300 MiB limit
            except OSError as error:
                print(type(error).__name__, flush=True)
        print("hoarded", flush=True)
        time.sleep(60)
        """,
    )
    assert watch.reason is not None and "the memory limit" in watch.reason, out
    assert "/tmp" in watch.reason


@pytest.mark.parametrize(
    "limits, code, said",
    [
        (
            isolation.Limits(folder_files=200),
            "for i in range(2000):\n    open(f'f{i}', 'w').close()\ntime.sleep(60)",
            "the file limit",
        ),
        (
            isolation.Limits(folder_bytes=40 * MiB),
            "with open('big', 'wb') as fh:\n    for _ in range(100):\n        fh.write(b'x' * 2**20)\n"
            "        fh.flush()\ntime.sleep(60)",
            "the disk limit",
        ),
    ],
    ids=["files", "bytes"],
)
def test_the_folder_of_a_submission_is_bounded(kit_dir, workdir, limits, code, said):
    """A submission wrote 5 GiB and 200,000 files into its folder, twice with --keep: the watch walks the folder too."""
    box = sandbox(kit_dir, workdir, limits=limits)
    box.hand_over()
    proc = subprocess.Popen(
        box.command([sys.executable, "-c", "import time\n" + code]),
        env=box.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watch = isolation.Watch(proc.pid, box.limits, box.workdir)
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        watch.stop()
        isolation.kill_tree(proc.pid)
    assert watch.reason is not None and said in watch.reason, out


def test_tmp_and_dev_shm_are_private_and_empty(kit_dir, workdir, tmp_path):
    name = f"memlab-test-{uuid.uuid4().hex}"
    outside_tmp = Path("/tmp") / name
    outside_tmp.write_text("the grader's own file")
    try:
        write = """
        import json, os, sys
        name = sys.argv[1]
        seen = {"tmp": os.listdir("/tmp"), "shm": os.listdir("/dev/shm")}
        for folder in ("/tmp", "/dev/shm"):
            with open(os.path.join(folder, name), "w") as fh:
                fh.write("left by a submission")
        print(json.dumps(seen))
        """
        box = sandbox(kit_dir, workdir)
        argv = [sys.executable, "-c", textwrap.dedent(write), name]
        for _ in range(2):  # the second sandbox sees nothing the first one wrote
            proc = subprocess.run(
                box.command(argv), env=box.env(), capture_output=True, text=True, timeout=120
            )
            seen = printed(proc)
            assert name not in seen["tmp"] and name not in seen["shm"]
            assert seen["shm"] == []
            # the sandbox's HOME, and the folders that lead to what it binds read-only or writable: the kit, the
            # submission's folder, and the Python installation where it lives under /tmp (a clone CI'd in /tmp)
            bound = (kit_dir, workdir, sys.prefix, Path(__file__).resolve())
            assert set(seen["tmp"]) <= {
                "home",
                *(Path(p).parts[2] for p in bound if str(p).startswith("/tmp/")),
            }
        assert not os.path.exists(f"/dev/shm/{name}")
        assert outside_tmp.read_text() == "the grader's own file"
    finally:
        outside_tmp.unlink()


def test_there_is_no_network(kit_dir, workdir):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    port = server.getsockname()[1]
    try:
        proc = run_python(
            sandbox(kit_dir, workdir),
            f"""
            import socket
            def connect(host):
                with socket.create_connection((host, {port}), timeout=5):
                    return "connected"
            print(json.dumps({{"loopback": attempt(lambda: connect("127.0.0.1")),
                               "outside": attempt(lambda: connect("1.1.1.1"))}}))
            """,
        )
        result = printed(proc)
        with pytest.raises(TimeoutError):
            server.accept()  # nobody came
    finally:
        server.close()
    assert result["loopback"] == "ConnectionRefusedError"  # its own loopback, where nothing listens
    assert not result["outside"].startswith("ok")


def _running(marker: str) -> list[int]:
    """The processes of this machine whose command line holds `marker`."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_processes_started_inside_die_with_the_sandbox(kit_dir, workdir):
    seconds = f"{30 + uuid.uuid4().int % 1000 / 1000:.3f}"  # a sleep of a duration no one else uses
    marker = workdir / "still-alive"
    proc = run_python(
        sandbox(kit_dir, workdir),
        f"""
        import subprocess, time
        subprocess.Popen(["sh", "-c", "sleep {seconds}; touch {marker}"], start_new_session=True)
        subprocess.Popen(["sleep", "{seconds}"], start_new_session=True, stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        print("detached")
        """,
    )
    assert proc.returncode == 0 and "detached" in proc.stdout, proc.stderr
    deadline = time.monotonic() + 5
    while _running(f"sleep{chr(0)}{seconds}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(f"sleep{chr(0)}{seconds}") == []
    assert not marker.exists()


def _watched(box: isolation.Sandbox, code: str, timeout: float = 60) -> tuple[isolation.Watch, str]:
    """Run `code` in `box` under a Watch, as the grader runs a kernel; (the watch, what the program printed)."""
    box.hand_over()
    proc = subprocess.Popen(
        box.command([sys.executable, "-c", textwrap.dedent(code)]),
        env=box.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watch = isolation.Watch(proc.pid, box.limits)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        watch.stop()
        isolation.kill_tree(proc.pid)
        proc.wait()
    return watch, out


def test_one_large_allocation_is_a_memory_error(kit_dir, workdir):
    box = sandbox(kit_dir, workdir, limits=isolation.Limits(memory_bytes=300 * MiB))
    proc = run_python(
        box,
        "print(json.dumps({'big': attempt(lambda: len(bytearray(600 * 2**20))), 'small': 1}))",
    )
    assert printed(proc) == {"big": "MemoryError", "small": 1}  # prlimit's data limit; the program goes on


def test_a_memory_bomb_spread_over_processes_is_stopped(kit_dir, workdir):
    """Each child stays under the per-process limit; together they pass it, and the watch kills them all."""
    box = sandbox(kit_dir, workdir, limits=isolation.Limits(memory_bytes=300 * MiB))
    start = time.monotonic()
    watch, out = _watched(
        box,
        """
        import os, time
        for _ in range(6):
            if os.fork() == 0:
                hog = b"x" * (100 * 2**20)  # written: resident, private
                time.sleep(60)
                os._exit(0)
        print("forked", flush=True)
        time.sleep(60)
        """,
    )
    assert watch.reason is not None and "the memory limit" in watch.reason, out
    assert "0.3 GiB" in watch.reason
    assert time.monotonic() - start < 30  # stopped, not run to its end


def test_a_process_bomb_is_stopped(kit_dir, workdir):
    box = sandbox(kit_dir, workdir, limits=isolation.Limits(processes=20))
    watch, out = _watched(
        box,
        """
        import os, time
        for _ in range(200):
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
            except BlockingIOError:
                print("BlockingIOError", flush=True)  # RLIMIT_NPROC, where the grader is not root
                break
        time.sleep(60)
        """,
    )
    # as root RLIMIT_NPROC does not bind: the watch counts the processes
    assert (watch.reason is not None and "the process limit" in watch.reason) or "BlockingIOError" in out
    if os.geteuid() == 0:
        assert watch.reason == "it started more than 20 processes (the process limit)"


def test_each_kernel_gets_its_share_of_the_cpus(kit_dir, workdir, monkeypatch):
    """grade.py --jobs N splits the CPUs between the N kernels (torch would start one thread per core in each)."""
    cpus = len(os.sched_getaffinity(0))
    assert kernel_threads(1) == cpus
    assert kernel_threads(2) == max(1, cpus // 2)
    assert kernel_threads(4 * cpus) == 1
    assert isolation.THREAD_VARIABLES == ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    for variable in isolation.THREAD_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    code = "import os, torch; print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])"
    proc = run_python(sandbox(kit_dir, workdir, threads=1), code)
    assert (proc.stdout.split(), proc.returncode) == (["1", "1", "1"], 0), proc.stderr
    proc = run_python(sandbox(kit_dir, workdir), "import os; print('OMP_NUM_THREADS' in os.environ)")
    assert proc.stdout.split() == ["False"]  # no share: torch's own default


def test_the_instructors_thread_setting_wins(kit_dir, workdir, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    proc = run_python(sandbox(kit_dir, workdir, threads=1), "import torch; print(torch.get_num_threads())")
    assert (proc.stdout.split(), proc.returncode) == (["2"], 0), proc.stderr


def test_the_environment_is_the_sandboxes_own(kit_dir, workdir, monkeypatch):
    monkeypatch.setenv("MEMLAB_TEST_SECRET", "the grader's")
    box = sandbox(kit_dir, workdir, environment=(("COURSE_GRADING", "collect"), ("COURSE_GRADING_SEED", "5")))
    proc = run_python(
        box,
        "import json, os; from autograders import kit\n"
        "print(json.dumps([os.environ.get('MEMLAB_TEST_SECRET'), kit.current_context().mode, kit.grading_seed(),\n"
        "                  os.environ['HOME']]))",
    )
    assert printed(proc) == [None, "collect", 5, "/tmp/home"]


def test_on_a_gpu_machine_the_driver_library_path_is_kept(kit_dir, workdir, monkeypatch):
    """On the H200 the CUDA driver's library was found through the instructor's LD_LIBRARY_PATH
    (/usr/local/nvidia/lib64): a sandbox with the GPU's devices keeps it; without a GPU nothing is inherited."""
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    box = sandbox(kit_dir, workdir)
    monkeypatch.setattr(isolation, "gpu_devices", lambda: [])
    assert "LD_LIBRARY_PATH" not in box.env()
    monkeypatch.setattr(isolation, "gpu_devices", lambda: ["/dev/nvidia0", "/dev/nvidiactl"])
    assert box.env()["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    monkeypatch.delenv("LD_LIBRARY_PATH")
    assert "LD_LIBRARY_PATH" not in box.env()


@pytest.mark.slow  # two sandboxed gloo ranks (about 10 s): the full tier
def test_a_distributed_job_runs_inside_the_sandbox(kit_dir, workdir):
    """Lesson 05 starts 2 gloo processes with torchrun from the notebook (memlab.distributed): in a sandbox they
    must start, find memlab in the kit, rendezvous over the sandbox's own loopback and write into its /tmp."""
    proc = run_python(
        sandbox(kit_dir, workdir),
        """
        from memlab.distributed import launch
        r = launch({'zero_memory': dict(widths=[8, 6, 4], strategies=['ddp', 'fsdp2'])})
        print(len(r['zero_memory']), r['zero_memory'][1]['strategies']['fsdp2']['after_step']['parameters'])
        """,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # FSDP2: rank 1's half (rows padded) of each tensor
    assert proc.stdout.split()[-2:] == ["2", str(4 * (3 * 8 + 3 + 2 * 6 + 2))]


# ---- a real kernel, started as nbgrader's Execute starts it under grading -----------------------------------------


def _execute(
    cells: list[str],
    kit_dir: str,
    workdir: Path,
    runtime: Path,
    timeout: int = 60,
    interrupt=False,
    **settings,
):
    """A notebook of `cells` run by nbclient in a kernel of grading.kernels.kernel_manager_class (a cell past
    `timeout` is interrupted when `interrupt`)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    box = sandbox(kit_dir, workdir, writable=(str(runtime),), **settings)
    watches: list = []
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=interrupt,
        kernel_manager_class=kernel_manager_class(box, str(runtime), watches),
        resources={"metadata": {"path": str(workdir)}},
    )
    try:
        client.execute()
    except DeadKernelError:
        pass  # stopped: the watches say why
    finally:
        for watch in watches:
            watch.stop()
    return nb, watches


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_a_sandboxed_kernel_answers(kit_dir, workdir, tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    nb, watches = _execute(
        [
            f"import os, json\nprint(json.dumps([os.getcwd(), os.path.exists({str(ROOT / 'solutions')!r}), os.getpid()]))",
            "open('from-the-kernel.txt', 'w').write('hello')\nprint(6 * 7)",
            "from autograders import kit\n"
            "@kit.check('e9_demo', points=1)\n"
            "def check_demo(fn):\n"
            "    got = kit.call(fn, 2, case='fn(2)')\n"
            "    kit.expect_close(got, kit.reference(lambda: 4), case='fn(2)', what='fn(2)')\n"
            "    return 1\n"
            "check_demo(lambda x: x + 2)",
        ],
        kit_dir,
        workdir,
        runtime,
        environment=(("COURSE_GRADING", "collect"), ("COURSE_GRADING_SEED", "5")),
    )
    first, second, third = nb.cells
    cwd, sees_solutions, pid = json.loads(_text(first))
    assert (cwd, sees_solutions) == (str(workdir), False)
    assert pid < 10  # its own PID namespace: the grader's processes do not exist for it
    assert _text(second).strip() == "42"
    assert (workdir / "from-the-kernel.txt").read_text() == "hello"
    (shown,) = [o for o in third.outputs if o.output_type == "display_data"]
    transcript = shown["data"][TRANSCRIPT_MIME]  # collected, not judged: a transcript and no verdict
    assert transcript == {"check": "e9_demo", "records": [{"label": "fn(2)", "value": wire.encode(4)}]}
    assert not [o for o in third.outputs if o.output_type in ("error", "stream")]
    assert len(watches) == 1 and watches[0].reason is None


def test_an_interrupt_stops_the_cell_not_the_kernel(kit_dir, workdir, tmp_path):
    """A cell past the timeout is interrupted (KeyboardInterrupt) and the kernel goes on. jupyter_client signals the
    kernel's process group, bubblewrap's own processes included: that took the kernel down with them."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    nb, watches = _execute(
        ["x = 41", "while True:\n    pass", "print(x + 1)"],
        kit_dir,
        workdir,
        runtime,
        timeout=5,
        interrupt=True,
    )
    assert [o.get("ename") for o in nb.cells[1].outputs if o.output_type == "error"] == ["KeyboardInterrupt"]
    assert _text(nb.cells[2]).strip() == "42"


def test_a_kernel_that_passes_the_memory_limit_is_stopped_with_the_reason(kit_dir, workdir, tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    nb, watches = _execute(
        [
            "import os, time\n"
            "for _ in range(8):\n"
            "    if os.fork() == 0:\n"
            "        hog = b'x' * (100 * 2**20)\n"
            "        time.sleep(60)\n"
            "        os._exit(0)\n"
            "time.sleep(60)",
        ],
        kit_dir,
        workdir,
        runtime,
        timeout=120,
        limits=isolation.Limits(memory_bytes=400 * MiB),
    )
    reasons = [w.reason for w in watches if w.reason]
    assert reasons and "the memory limit" in reasons[0]


# ---- the judge's rerun of a measurement (grading/rerun.py): a fresh sandboxed process -------------------------------

RERUN_CHECKS = """
from autograders.kit import call, check, expect_close, reference


@check("e1_plus_two", points=1, rerun=True)
def check_plus_two(fn):
    got = call(fn, 2, case="fn(2)")
    expect_close(got, reference(lambda: 4), case="fn(2)", what="fn(2)")
    return 1
"""

#: a kit a kernel could write into the submission's folder, hoping that the rerun imports it before the real one
PLANTED_KIT = """
import json, sys
print(json.dumps({"transcript": {"check": "e1_plus_two", "records": [{"label": "fn(2)", "value": ["int", "4"]}]}}))
sys.exit(0)
"""


def rerun_check(
    kit_dir, workdir, tmp_path, checks: str, check: str, args: tuple, definitions: list, modules=None
):
    """grading.rerun.rerun of `check`, declared in a checks module whose source is `checks`, with these definitions
    ([code, the lesson's own]) loaded first, in the sandbox: (transcripts, error)."""
    from grading.judge import CheckCall, JudgeRequest
    from grading.rerun import rerun

    source = tmp_path / "lesson"
    source.mkdir(exist_ok=True)
    (source / "lesson_checks.py").write_text(checks)
    (source / "lesson.ipynb").write_text("the model solution")
    request = JudgeRequest(
        seed=5,
        cells=[],
        definitions=definitions,
        workdir=str(workdir),
        source_dir=str(source),
        settings=Settings(kit_dir=kit_dir, memory_gb=2),
        modules=modules or {},
    )
    return rerun(CheckCall("lesson_checks", check, args, ()), request)


def _recorded(transcripts) -> dict:
    """{label: the decoded value} of a rerun's one transcript."""
    (transcript,) = transcripts
    return {r["label"]: wire.decode(r["value"]) for r in transcript["records"] if "value" in r}


@pytest.mark.parametrize(
    "cells, modules",
    [
        # an alias of a library function at module level (the rerun skipped it: NameError)
        (["import operator", "_add = operator.add", "def plus_two(x):\n    return _add(x, 2)"], {}),
        # a factory (the rerun said "the check's arguments are not among your definitions")
        (["def make(n):\n    def f(x):\n        return x + n\n    return f", "plus_two = make(2)"], {}),
        # the code in a module handed in next to the notebook (the rerun could not import it)
        (
            ["from helper import plus_two"],
            {"helper": "import operator\n\ndef plus_two(x):\n    return operator.add(x, 2)\n"},
        ),
    ],
    ids=["alias", "factory", "module"],
)
def test_a_rerun_takes_every_honest_shape_of_the_learner_s_code(kit_dir, workdir, tmp_path, cells, modules):
    definitions = [[code, False] for code in cells]
    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, RERUN_CHECKS, "check_plus_two", ("plus_two",), definitions, modules
    )
    assert error == "" and _recorded(transcripts) == {"fn(2)": 4}


def test_a_rerun_runs_none_of_the_learner_s_code_the_check_does_not_need(kit_dir, workdir, tmp_path):
    """An unrelated function's default value and a bare statement ran when the rerun loaded "definitions only": they
    could prepare the process before the measurement. Now only what the call needs runs."""
    definitions = [
        ["import builtins", False],
        ["def other(y=setattr(builtins, 'PREPARED', 1)):\n    return y", False],
        ["builtins.PREPARED_TOO = 1", False],
        [
            "def plus_two(x):\n    return x + 2 + getattr(builtins, 'PREPARED', 0) + getattr(builtins, 'PREPARED_TOO', 0)",
            False,
        ],
    ]
    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, RERUN_CHECKS, "check_plus_two", ("plus_two",), definitions
    )
    assert error == "" and _recorded(transcripts) == {"fn(2)": 4}


FORGED_AT_EXIT = """
import atexit, json

def plus_two(x):
    record = {"check": "e1_plus_two", "records": [{"label": "fn(2)", "value": ["int", "4"]}]}
    atexit.register(lambda: print("\\n" + json.dumps({"transcript": record})))
    return x + 1
"""

SECOND_RECORD = """
import json, os

def plus_two(x):
    record = json.dumps({"transcript": {"check": "e1_plus_two", "records": [{"label": "fn(2)", "value": ["int", "4"]}]}})
    for fd in os.listdir("/proc/self/fd"):
        try:
            os.write(int(fd), (record + "\\n").encode())
        except OSError:
            pass
    return x + 1
"""


def test_a_rerun_s_record_comes_only_from_the_check(kit_dir, workdir, tmp_path):
    """The judge took the rerun's transcript from its last line of output, which an exit handler of the learner's
    printed; the record now has a channel of its own, one record, after which the process ends."""
    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, RERUN_CHECKS, "check_plus_two", ("plus_two",), [[FORGED_AT_EXIT, False]]
    )
    assert error == "" and _recorded(transcripts) == {"fn(2)": 3}
    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, RERUN_CHECKS, "check_plus_two", ("plus_two",), [[SECOND_RECORD, False]]
    )
    assert transcripts == [] and "sent 2 records" in error


def test_a_rerun_does_not_see_the_lesson_s_folder(kit_dir, workdir, tmp_path):
    """The measurement's sandbox was shown the lesson's source folder (its solution notebook), on sys.path."""
    solution = tmp_path / "lesson" / "lesson.ipynb"
    code = f"def plus_two(x):\n    try:\n        return open({str(solution)!r}).read()\n    except Exception as error:\n        return type(error).__name__"
    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, RERUN_CHECKS, "check_plus_two", ("plus_two",), [[code, False]]
    )
    assert error == "" and _recorded(transcripts) == {"fn(2)": "FileNotFoundError"}


def test_a_rerun_imports_nothing_the_kernel_left_in_its_folder(kit_dir, workdir, tmp_path):
    for folder in (
        workdir,
        workdir / ".rerun",
    ):  # where the kernel (which could write there) would plant a kit
        (folder / "autograders").mkdir(parents=True)
        (folder / "autograders" / "__init__.py").write_text("")
        (folder / "autograders" / "kit.py").write_text(PLANTED_KIT)
    definitions = [["def plus_two(x):\n    return x + 1  # wrong", False]]
    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, RERUN_CHECKS, "check_plus_two", ("plus_two",), definitions
    )
    assert error == ""
    assert transcripts == [{"check": "e1_plus_two", "records": [{"label": "fn(2)", "value": wire.encode(3)}]}]


GRAD_CHECKS = """
from autograders.kit import call, check, expect_callable


@check("e1_grad_step", points=1, rerun=True)
def check_grad_step(fn):
    expect_callable(fn, "grad_step")
    call(fn, case="one backward")
    return 1
"""


def test_a_rerun_measures_in_a_fresh_processs_torch_state(kit_dir, workdir, tmp_path):
    """A lesson statement that leaves gradients off (as a TimeoutError from the 2 s alarm can, landing inside
    torch.no_grad's __enter__: lesson 03's Exercise 3.4 lost its point so in CI) does not reach the measurement."""
    learner = "def grad_step():\n    w = torch.ones(2, requires_grad=True)\n    (w * 2).sum().backward()\n    return float(w.grad.sum())"
    definitions = [
        ["import torch", False],
        ["_LEFT_OFF = torch.set_grad_enabled(False)", True],  # the lesson's own statement, cut short
        [learner, False],
    ]
    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, GRAD_CHECKS, "check_grad_step", ("grad_step",), definitions
    )
    assert error == ""
    records = {r["label"]: r for r in transcripts[0]["records"]}
    assert records["one backward"] == {"label": "one backward", "value": wire.encode(4.0)}, records


PREDICT_CHECKS = """
from autograders.kit import call_predicting, check


@check("e1_predict", points=1, rerun=True)
def check_predict(fn):
    call_predicting(fn, 8, case="n=8")
    return 1
"""

#: a notebook whose prediction measures, and which earlier empties the list of ops the kit watches for
MEASURES_BEHIND_A_PATCH = [
    ["import torch", False],
    ["import autograders.kit as _kit\n_kit.MODEL_OPS = frozenset()", False],
    ["def predict(n):\n    return torch.nn.Linear(n, n)(torch.ones(1, n)).numel() * 4", False],
]


def test_a_prediction_is_watched_in_a_process_the_notebook_s_other_code_never_reached(
    kit_dir, workdir, tmp_path
):
    """In the kernel, a statement before the check can blind the kit to the model the learner's function runs
    (Exercises 1.3 and 4.1 ask for a prediction of what memlab's tracker measures): the kernel's record says no model
    op ran. The judge collects the check again, and there only the function and what it reads are loaded."""
    import autograders.kit as kit_module

    checks: dict = {"__name__": "lesson_checks_in_the_kernel"}
    exec(PREDICT_CHECKS, checks)
    notebook: dict = {}
    exec(MEASURES_BEHIND_A_PATCH[0][0] + "\n" + MEASURES_BEHIND_A_PATCH[2][0], notebook)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kit_module, "MODEL_OPS", frozenset())  # what the patching statement does in the kernel
        records = kit_module.collect(checks["check_predict"].check, [notebook["predict"]], {}).records
    kernel = {r.label: wire.decode(r.value) for r in records if r.value is not None}
    assert kernel["n=8: the model ops torch ran during the call"] == []

    transcripts, error = rerun_check(
        kit_dir, workdir, tmp_path, PREDICT_CHECKS, "check_predict", ("predict",), MEASURES_BEHIND_A_PATCH
    )
    assert error == ""
    assert _recorded(transcripts)["n=8: the model ops torch ran during the call"] == ["addmm"]


WRITTEN_CHECKS = """
from autograders.kit import call, check, expect_callable, expect_close, reference


@check("e1_plus_two", points=1, rerun=True)
def check_plus_two(fn):
    expect_callable(fn, "plus_two")
    got = call(fn, 2, case="fn(2)")
    expect_close(got, reference(lambda: 4), case="fn(2)", what="fn(2)")
    return 1
"""


def test_a_measurement_is_collected_again_unless_the_kernel_found_it_unwritten(tmp_path, monkeypatch):
    """A rerun costs a sandboxed Python that imports torch and loads the definitions (seconds); for a stub the kernel's
    record already says `not written yet`, and the same definitions loaded again would say the same."""
    import grading.rerun
    from grading.judge import CellRequest, JudgeRequest, judge_cell

    source = tmp_path / "lesson"
    source.mkdir()
    (source / "written_checks.py").write_text(WRITTEN_CHECKS)
    reruns = []

    def fake_rerun(call, request):  # what the fresh process collects: a wrong answer
        reruns.append(call.function)
        records = [
            {"label": "`plus_two` is written", "value": wire.encode(None)},
            {"label": "fn(2)", "value": wire.encode(3)},
        ]
        return [{"check": "e1_plus_two", "records": records}], ""

    monkeypatch.setattr(grading.rerun, "rerun", fake_rerun)
    cell_source = "from written_checks import check_plus_two\n\ncheck_plus_two(plus_two)"
    request = JudgeRequest(seed=5, cells=[], source_dir=str(source))
    unwritten = {"label": "`plus_two` is written", "failed": "`plus_two` is not written yet: it still raises"}
    stub = CellRequest("e1_plus_two_check", cell_source, [{"check": "e1_plus_two", "records": [unwritten]}])
    verdict = judge_cell(stub, request)
    assert not verdict.passed and "not written yet" in verdict.message and reruns == []

    # a kernel record that claims a pass is never taken for the measurement: the rerun's record decides
    passed = [
        {"label": "`plus_two` is written", "value": wire.encode(None)},
        {"label": "fn(2)", "value": wire.encode(4)},
    ]
    claimed = CellRequest("e1_plus_two_check", cell_source, [{"check": "e1_plus_two", "records": passed}])
    verdict = judge_cell(claimed, request)
    assert not verdict.passed and "fn(2)" in verdict.message and reruns == ["check_plus_two"]
