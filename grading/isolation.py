"""Isolation of the processes that run submitted code: bubblewrap, prlimit, and a watch on the process tree.

Two kinds of process run a learner's code under grading: the Jupyter kernel that executes the submitted notebook
(`SandboxedKernelManager`, used by grading.nbgrader's Execute) and the fresh process in which the judge re-runs a
measurement of the learner's code (grading/rerun.py). Both are started through `Sandbox.command`:

- **setpriv** (util-linux), where the grader is root: bubblewrap builds the view as root (no user namespace, so that
  the sandbox's processes are really another user of the machine) and the sandboxed command then runs as a user of
  its own (`sandbox_uid`): not root, who could read every file of the machine that the view shows, and not one of the
  machine's users; only the folders it must write are handed over to it (`Sandbox.hand_over`).
- **bubblewrap** (`bwrap`, Debian's `bubblewrap`; https://github.com/containers/bubblewrap) builds the view: the
  system's read-only folders, the Python installation, a copy of the grading kit without its references, Hugging
  Face's model and dataset caches (never its token), and read-write only the submission's own folder; a private
  `/tmp` and `/dev/shm` (tmpfs of at most the memory limit each), `/dev` and `/proc`; new
  PID, IPC, UTS and network namespaces (no network at all, not even the grader's loopback: the kernel talks to
  nbclient over Unix sockets in its runtime folder); `/dev/nvidia*` passed through where the machine has them. The
  repository, the solutions, the gradebook, other students' folders and the CSV do not exist in that view. Every
  process dies with the sandbox (`--die-with-parent`, and the PID namespace dies with its first process).
- **prlimit** (util-linux) sets the per-process limits: data segment (memory), file size, no core dumps, processes
  (the last one counts only where the grader is not root).
- **`Watch`** polls the sandbox from outside (the grader's own thread: no submitted code runs in it) and kills all of
  its processes when together they pass a limit, saying why: memory (their memory and what they keep in the
  sandbox's `/tmp` and `/dev/shm`, which is memory too), processes, and the bytes and files of its folder.

Nothing here is hand-written system calls: the namespaces and mounts are bubblewrap's, the limits prlimit's.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import signal
import sys
import sysconfig
import threading
import time
from pathlib import Path

from grading.i18n import _

SYSTEM_FOLDERS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/sys")
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
#: the files through which a process reaches an NVIDIA GPU with CUDA: where none exists, torch finds no CUDA device
CUDA_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia[0-9]*")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # set by an instructor, they win over the CPU share


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one submission's processes may use together."""

    memory_bytes: int = 8 * 2**30
    processes: int = 256
    file_bytes: int = 2 * 2**30  # one file (prlimit)
    folder_bytes: int = 4 * 2**30  # every file of its folder together (the watch)
    folder_files: int = 50_000


#: where the grader is root, a sandbox runs as a user id of this range (none of the machine's users): one per grading
#: process, so that the per-user process limit (RLIMIT_NPROC) is each submission's own
UID_BASE, UID_SPAN = 1_900_000, 100_000


def sandbox_uid() -> int | None:
    """The user a sandbox started by this process runs as: None where the grader is not root (it runs as the
    grader, who cannot read root's files anyway), else a user id of its own."""
    if os.geteuid() != 0:
        return None
    return UID_BASE + os.getpid() % UID_SPAN


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """The view and the limits of one sandboxed process (and every process it starts)."""

    kit_dir: str  # memlab + autograders (no references/): read-only, first on PYTHONPATH
    workdir: str  # the submission's folder: read-write, the working directory
    writable: tuple[str, ...] = ()  # more read-write folders at their own paths (the kernel's runtime folder)
    readable: tuple[str, ...] = ()  # more read-only folders (Hugging Face's cache)
    limits: Limits = Limits()
    threads: int | None = None  # OMP_NUM_THREADS / MKL_NUM_THREADS for torch, unless the instructor set them
    environment: tuple[tuple[str, str], ...] = ()  # more variables (the grading mode and seed)

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the sandbox (call `hand_over` first)."""
        return [*_prlimit(self.limits), *self._bwrap(), "--", *_as_sandbox_user(), *argv]

    def hand_over(self) -> None:
        """Where the grader is root: the folders the sandbox writes (its folder, `writable`), with everything in them,
        belong to the sandbox's user, and the kit is readable by it. Links are changed themselves, never followed."""
        uid = sandbox_uid()
        if uid is None:
            return
        for folder in (self.workdir, *self.writable):
            for root, dirs, files in os.walk(folder):
                for name in (root, *(os.path.join(root, n) for n in dirs + files)):
                    os.chown(name, uid, uid, follow_symlinks=False)
        os.chmod(self.kit_dir, 0o755)

    def _bwrap(self) -> list[str]:
        args = [_need("bwrap"), *_namespaces(), "--die-with-parent", "--proc", "/proc", "--dev", "/dev"]
        # /tmp and /dev/shm are memory: at most the memory limit each, and the watch counts them with the processes'
        size = str(self.limits.memory_bytes)
        for folder in ("/tmp", "/dev/shm"):  # writable by the sandbox's user, as a machine's /tmp is (sticky)
            args += ["--perms", "01777", "--size", size, "--tmpfs", folder]
        args += ["--perms", "0777", "--dir", "/tmp/home"]
        # jupyter_client tells a kernel its parent's pid, which means nothing inside a PID namespace (ipykernel
        # would take the parent for gone and exit); the sandbox dies with its parent anyway (--die-with-parent).
        # 1 is ipykernel's "no parent to poll" (kernelapp.init_poller); without a parent at all it would take itself
        # for a terminal's `ipython kernel` and print that banner, six lines a notebook, to the grader's terminal
        args += ["--setenv", "JPY_PARENT_PID", "1"]
        for folder in SYSTEM_FOLDERS:
            args += ["--ro-bind-try", folder, folder]
        binds = [("--ro-bind", f) for f in (*python_folders(), *self.readable, self.kit_dir)]
        binds += [("--bind", f) for f in (self.workdir, *self.writable)]
        made = {"/", "/tmp", "/dev", "/dev/shm", "/proc"}  # folders of the sandbox's own (empty but for ours)
        bound = list(SYSTEM_FOLDERS)  # folders of the machine: what is under them comes with them
        for how, folder in binds:
            # the folders that lead to it, readable by the sandbox's user (bubblewrap would give them the mode of the
            # machine's: root's home, 0700, and the Python installation under it would not be found)
            for parent in _ancestors(folder):
                if parent not in made and not any(parent.startswith(b + "/") for b in bound):
                    args += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            args += [how, folder, folder]
            bound.append(folder)
        for device in gpu_devices():
            args += ["--dev-bind", device, device]
        return [*args, "--chdir", self.workdir]

    def env(self) -> dict[str, str]:
        """The whole environment of the sandboxed process: nothing inherited but the locale and the threads."""
        env = {
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp/home",
            "TMPDIR": "/tmp",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONPATH": self.kit_dir,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "MPLBACKEND": "Agg",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": hf_home(),
            "IPYTHONDIR": "/tmp/home/.ipython",
            "MPLCONFIGDIR": "/tmp/home/.mpl",
        }
        if gpu_devices() and os.environ.get("LD_LIBRARY_PATH"):
            # where the CUDA driver's library is found on some GPU machines (/usr/local/nvidia/lib64): read-only
            # under /usr, and the instructor's setting, never the submission's
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        if (
            "CUDA_VISIBLE_DEVICES" in os.environ
        ):  # the instructor's choice of GPUs (none: graded as without a GPU)
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        if any(name in os.environ for name in THREAD_VARIABLES):  # the instructor's setting, alone
            env.update({name: os.environ[name] for name in THREAD_VARIABLES if name in os.environ})
        elif self.threads:
            env.update(dict.fromkeys(THREAD_VARIABLES, str(self.threads)))
        env.update(dict(self.environment))
        return env


def _ancestors(path: str) -> list[str]:
    """'/a', '/a/b' for '/a/b/c'."""
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _namespaces() -> list[str]:
    """bubblewrap's new namespaces: all of them; where the grader is root, all but a user namespace, in which the
    sandboxed processes would still be root to the machine's files (their user id maps to the creator's, 0)."""
    if sandbox_uid() is None:
        return ["--unshare-all"]
    unshare = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return [
        *unshare,
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
    ]  # for setpriv, which drops every one


def _as_sandbox_user() -> list[str]:
    """Inside the sandbox, setpriv's way to the sandbox's user before the command runs (nothing where the grader is
    not root). Changing from root to another user clears every capability."""
    uid = sandbox_uid()
    if uid is None:
        return []
    return [
        _need("setpriv"),
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",  # a setuid program (su, mount) gains nothing either
        "--",
    ]


def _prlimit(limits: Limits) -> list[str]:
    return [
        _need("prlimit"),
        f"--data={limits.memory_bytes}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
        f"--nproc={limits.processes}",
    ]


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(f"grading needs `{tool}` ({PACKAGES[tool]}): {INSTALL_HINT}")
    return path


PACKAGES = {"bwrap": "Debian/Ubuntu package bubblewrap", "prlimit": "util-linux", "setpriv": "util-linux"}
INSTALL_HINT = "apt-get install bubblewrap (or grade with --no-isolation, never for credit)"


def python_folders() -> list[str]:
    """The Python installation and its packages (the virtual environment and the interpreter it was made from)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    real = sorted({os.path.realpath(p) for p in paths if p and os.path.isdir(p)})
    return [p for p in real if not any(p != q and p.startswith(q + os.sep) for q in real)]


def cuda_hidden(environ=None) -> bool:
    """CUDA_VISIBLE_DEVICES hides every device (empty, or an invalid first index such as -1: CUDA enumerates the
    devices up to the first invalid one). An instructor's way to grade as a machine without a GPU."""
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    return value is not None and (value.strip() == "" or value.split(",")[0].strip().startswith("-"))


def cuda_device_present(environ=None) -> bool:
    """Whether a process started here may find a CUDA device, decided without touching CUDA (which would make this
    process's forks unable to use it): a device file of NVIDIA's driver exists and CUDA_VISIBLE_DEVICES does not hide
    it. Where it says False, torch.cuda.is_available() is False."""
    return not cuda_hidden(environ) and any(glob.glob(pattern) for pattern in CUDA_DEVICE_FILES)


def gpu_devices() -> list[str]:
    """The GPU device files a sandbox is given: none where CUDA_VISIBLE_DEVICES hides every device."""
    if cuda_hidden():
        return []
    return sorted({p for pattern in GPU_DEVICES for p in glob.glob(pattern)})


def hf_home() -> str:
    return os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")


def hf_caches() -> tuple[str, ...]:
    """The Hugging Face caches a sandbox may read (the models and datasets this machine already holds): the hub's
    and datasets' cache folders, never HF_HOME itself, where the grader's access token lives."""
    home = hf_home()
    folders = (
        os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"),
        os.environ.get("HF_DATASETS_CACHE") or os.path.join(home, "datasets"),
    )
    return tuple(dict.fromkeys(f for f in folders if os.path.isdir(f)))


def unavailable() -> str | None:
    """Why submissions cannot be isolated on this machine (None when they can): tried, not guessed."""
    import subprocess

    if not sys.platform.startswith("linux"):
        return f"grading isolates submissions with bubblewrap, which needs Linux; this is {sys.platform}"
    tools = ("bwrap", "prlimit") + (("setpriv",) if sandbox_uid() is not None else ())
    for tool in tools:
        if shutil.which(tool) is None:
            return f"grading needs `{tool}` ({PACKAGES[tool]}), which is not installed: {INSTALL_HINT}"
    probe = subprocess.run(
        [
            *_as_sandbox_user(),
            shutil.which("bwrap"),
            "--unshare-all",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
        ]
        + ["--dev", "/dev", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return (
            f"bubblewrap cannot create namespaces here ({probe.stderr.strip()[:200]}): allow unprivileged user "
            "namespaces (e.g. sysctl kernel.unprivileged_userns_clone=1)"
        )
    return None


# ---- the watch: memory and processes of a sandbox, from outside --------------------------------------------------


class Watch:
    """Kill the process tree of `pid` (a sandbox's bwrap) when it passes `limits` together; `reason` says why. With
    `folder` (the sandbox's read-write folder), its bytes and files are watched too."""

    #: the folder is walked at most this often (a walk of 50,000 files takes a while)
    FOLDER_INTERVAL = 1.0

    def __init__(self, pid: int, limits: Limits, folder: str | None = None, interval: float = 0.1):
        self.pid, self.limits, self.folder, self.interval = pid, limits, folder, interval
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{pid}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        walked = 0.0
        while not self._stop.wait(self.interval):
            members = descendants(self.pid)
            if not members and not _alive(self.pid):
                return
            self.reason = self._over(members)
            if self.reason is None and self.folder and time.monotonic() - walked >= self.FOLDER_INTERVAL:
                walked = time.monotonic()
                self.reason = self._folder_over()
            if self.reason:
                for p in [self.pid, *members]:
                    kill(p)
                return

    def _over(self, members: list[int]) -> str | None:
        if len(members) > self.limits.processes:
            return _("it started more than {count} processes (the process limit)").format(
                count=self.limits.processes
            )
        kept = sum(_tmpfs_used(p) for p in members[:1])  # one mount namespace: its /tmp and /dev/shm, once
        if (
            sum(_resident(p) for p in members) + kept > self.limits.memory_bytes
            and sum(_proportional(p) for p in members) + kept > self.limits.memory_bytes
        ):
            gib = self.limits.memory_bytes / 2**30
            return _(
                "its processes used more than {gib} GiB together (the memory limit, files in /tmp and /dev/shm "
                "included)"
            ).format(gib=f"{gib:.1f}")
        return None

    def _folder_over(self) -> str | None:
        size, count = folder_usage(self.folder, self.limits.folder_files + 1)
        if count > self.limits.folder_files:
            return _("it wrote more than {count} files into its folder (the file limit)").format(
                count=self.limits.folder_files
            )
        if size > self.limits.folder_bytes:
            return _("it wrote more than {gib} GiB into its folder (the disk limit)").format(
                gib=f"{self.limits.folder_bytes / 2**30:.1f}"
            )
        return None


def folder_usage(folder: str, stop_at: int) -> tuple[int, int]:
    """(bytes, entries) under `folder`, links not followed; counting stops after `stop_at` entries."""
    size = count = 0
    todo = [folder]
    while todo and count < stop_at:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            count += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                else:
                    size += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
    return size, count


def _tmpfs_used(pid: int) -> int:
    """Bytes kept in the /tmp and /dev/shm that process `pid` sees (the sandbox's own tmpfs: memory)."""
    used = 0
    for mount in ("tmp", "dev/shm"):
        try:
            stat = os.statvfs(f"/proc/{pid}/root/{mount}")
        except OSError:
            continue
        used += (stat.f_blocks - stat.f_bfree) * stat.f_frsize
    return used


def descendants(pid: int) -> list[int]:
    """Every process that descends from `pid` (read from /proc)."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = _parent(int(name))
            if parent is not None:
                parents.setdefault(parent, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def sandboxed(pid: int) -> list[int]:
    """The processes in the sandbox of bubblewrap `pid`: its descendants that are not bubblewrap itself."""
    return [p for p in descendants(pid) if _name(p) != "bwrap"]


def kill_tree(pid: int) -> None:
    for p in [pid, *descendants(pid)]:
        kill(p)


def kill(pid: int) -> None:
    send(pid, signal.SIGKILL)


def send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _proportional(pid: int) -> int:
    """PSS (shared pages split between their users: a fork is not counted twice); RSS where it cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return _resident(pid)
