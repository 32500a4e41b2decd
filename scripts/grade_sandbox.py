#!/usr/bin/env python
"""The kernel that runs one submitted notebook under scripts/grade.py: an IPython kernel, isolated and watched.

    python scripts/grade_sandbox.py -f CONNECTION_FILE        (jupyter_client starts it from a kernelspec)

Its settings come from the JSON file named by $MEMLAB_SANDBOX_CONFIG, written by scripts/grade_worker.py and read
before any submitted code runs (afterwards the file is out of the kernel's reach). In this order:

1. **Process isolation** (Linux). A PID namespace (through a user namespace where the grader is not root): the
   kernel and every process it starts live in it and all die when the kernel ends; the kernel cannot see or
   signal the grader. A trusted monitor outside the namespace (no submitted code ever runs in it) forwards
   signals, and stops the namespace when its processes together pass the memory limit or the process limit,
   writing why to `monitor_path`. Where namespaces are refused, the kernel gets its own session and the monitor
   kills everything that descends from it.
2. **Resource limits**: RLIMIT_DATA (memory of one process), RLIMIT_NPROC (processes, where the grader is not
   root), RLIMIT_FSIZE (size of one file), no core dumps.
3. **Filesystem isolation** with Landlock (Linux >= 5.13, no privileges needed): the kernel may read the system,
   the Python installation and its packages, the grading kit (memlab, autograders: a copy) and its own folder,
   and write only its own folder and a private temporary folder. The repository, the solutions, the gradebook,
   the other students' submissions and the CSV are out of reach, for every process the kernel starts too.
4. **The check modules are imported** (strict grading, the grading seed) and **an audit hook is installed**
   (PEP 578: it cannot be removed). The hook verifies every passed check (`sys.audit(kit.PASS_EVENT, ...)`): it
   must come from the kit's own `run` wrapper around the course's own check function, with the kit's, the check
   module's, builtins' and torch's functions as they were at start. Only then does it write a `pass` record to the
   report file, each record signed with a key that exists nowhere but in the hook and in the grader. It also
   records what submitted code is not expected to do (reaching into frames, the garbage collector, raw memory,
   the grader's files, the grading references) as `flag` records, and refuses changes to the kit's functions.
   scripts/grade_worker.py gives a check cell its points only for a verified `pass` record written while that cell
   ran, whatever the cell's output says.
5. ipykernel starts in this process (the hook must stay installed), from the connection file.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

CONFIG_ENV = "MEMLAB_SANDBOX_CONFIG"
PASS_EVENT = (
    "memlab.check.passed"  # autograders.kit.PASS_EVENT (not imported here: the kit loads after isolation)
)
REFERENCE_EVENT = "memlab.reference.called"  # autograders.references: a reference implementation was called

# ---- Linux system calls through ctypes (the standard library has no unshare() before Python 3.12) ----------------

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x4000, 1 << 18, 2, 4, 8
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1

# Landlock filesystem rights, by the ABI version that introduced them
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_WRITE_V1 = sum(1 << i for i in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def landlock_abi() -> int:
    """The Landlock ABI version of this kernel (0: none)."""
    result = _libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION
    )
    return max(int(result), 0)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def apply_landlock(read_roots: list[str], write_roots: list[str]) -> int:
    """Restrict this process and its future children to reading `read_roots` and writing `write_roots` (and
    signalling only processes of its own domain, where the ABI allows). Returns the ABI version used."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available on this kernel")
    read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    write = FS_WRITE_FILE | FS_WRITE_V1
    if abi >= 2:
        write |= FS_REFER
    if abi >= 3:
        write |= FS_TRUNCATE
    handled = read | write | (FS_IOCTL_DEV if abi >= 5 else 0)
    attr = _RulesetAttr(handled, 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _check(
        _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        rights = {}
        for path in read_roots:
            rights[path] = rights.get(path, 0) | read
        for path in write_roots:
            rights[path] = rights.get(path, 0) | read | write
        if "/dev" in rights and abi >= 5:
            rights["/dev"] |= FS_IOCTL_DEV  # GPUs are driven through ioctl on /dev/nvidia*
        for path, allowed in rights.items():
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a root that does not exist on this machine
            try:
                if not os.path.isdir(path):
                    allowed &= FS_EXECUTE | FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
                rule = _PathBeneathAttr(allowed & handled, fd)
                _check(
                    _libc.syscall(
                        SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0
                    ),
                    f"landlock_add_rule {path}",
                )
            finally:
                os.close(fd)
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def namespaces_available() -> bool:
    """Whether this user may create the PID namespace the sandbox puts a kernel in (tried in a throwaway child)."""
    flags = CLONE_NEWPID | (0 if os.getuid() == 0 else CLONE_NEWUSER)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if _libc.unshare(flags) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _mount_proc() -> None:
    """A /proc that shows only this PID namespace (in a mount namespace of our own)."""
    _unshare(CLONE_NEWNS)
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount proc")


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def set_limits(memory_bytes: int, nproc: int, fsize_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for limit, value in (
        (resource.RLIMIT_DATA, memory_bytes),
        (resource.RLIMIT_FSIZE, fsize_bytes),
        (resource.RLIMIT_NPROC, nproc),
    ):
        if value:
            soft, hard = resource.getrlimit(limit)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value if hard == resource.RLIM_INFINITY else hard))


# ---- the trusted monitor (outside the namespace) ---------------------------------------------------------------


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _processes() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _memory_bytes(pid: int) -> int:
    """The proportional set size of a process (shared pages split between their users: a forked process is not
    counted twice for the memory it shares with its parent); its resident size where PSS cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return _resident_bytes(pid)


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _forward_signals(pid: int) -> None:
    """Pass the signals jupyter_client sends (interrupt, terminate) on to `pid`."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda signum, frame: _forward(pid, signum))


def monitor(child: int, config: dict, namespace: str | None) -> int:
    """Forward signals to `child`, watch its processes, stop them all past the limits; the child's exit status."""
    _forward_signals(child)
    total_memory = int(config.get("total_memory_bytes") or 0)
    max_processes = int(config.get("max_processes") or 0)
    seen: set[int] = {child}
    stopped = None
    status = 0
    launcher = os.getppid()
    while True:
        if (
            os.getppid() != launcher
        ):  # the launcher was killed (a kernel shutdown): take the whole family down
            break
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == child:
            break
        if namespace is not None:
            members = [p for p in _processes() if p != os.getpid() and _pid_namespace(p) == namespace]
        else:  # no PID namespace: everything that descends from the child
            members = []
            for p in _processes():
                if p in seen or _parent_of(p) in seen:
                    seen.add(p)
                    members.append(p)
        if stopped is None:
            if max_processes and len(members) > max_processes:
                stopped = f"it started more than {max_processes} processes (the process limit)"
            elif (
                total_memory
                and sum(_resident_bytes(p) for p in members) > total_memory  # cheap; an upper bound of PSS
                and sum(_memory_bytes(p) for p in members) > total_memory
            ):
                stopped = (
                    f"its processes used more than {total_memory / 2**30:.1f} GiB together (the memory limit)"
                )
            if stopped:
                _record_monitor(config, {"stopped": stopped, "at": time.time()})
                for p in [child, *members]:
                    _kill(p)
        time.sleep(0.1)
    _kill(child)  # with a namespace, its init: the kernel dies by PDEATHSIG and the namespace with it
    if namespace is None:  # no namespace to take them all down: kill what is left of the family
        for p in _processes():
            if p in seen or _parent_of(p) in seen:
                seen.add(p)
                _kill(p)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _record_monitor(config: dict, data: dict) -> None:
    path = config.get("monitor_path")
    if not path:
        return
    previous = {}
    if os.path.exists(path):
        with open(path) as fh:
            previous = json.load(fh)
    previous.update(data)
    with open(path, "w") as fh:
        json.dump(previous, fh)


def _init_process(kernel: int) -> None:
    """PID 1 of the namespace: reap orphans, forward signals to the kernel, leave when it leaves."""
    _forward_signals(kernel)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if pid == kernel:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


# ---- the audit hook -------------------------------------------------------------------------------------------

#: events that submitted code is not expected to raise, with what they mean
SUSPICIOUS = {
    "gc.get_objects": "walked the garbage collector's objects (gc.get_objects)",
    "gc.get_referrers": "looked for the referrers of an object (gc.get_referrers)",
    "gc.get_referents": "looked into an object's references (gc.get_referents)",
    "sys._getframe": "read the call stack's frames (sys._getframe / inspect.currentframe / inspect.stack)",
    "sys._current_frames": "read every thread's frames (sys._current_frames)",
    "sys.settrace": "installed a trace function (sys.settrace)",
    "sys.setprofile": "installed a profile function (sys.setprofile)",
    "sys.addaudithook": "installed an audit hook",
    "ctypes.cdata": "read or wrote raw memory (ctypes from_address)",
    "ctypes.addressof": "took raw memory addresses (ctypes.addressof)",
    "ctypes.string_at": "read raw memory (ctypes.string_at)",
    "ctypes.wstring_at": "read raw memory (ctypes.wstring_at)",
    "ctypes.dlsym": "looked up native symbols (ctypes)",
    "code.__new__": "built a code object by hand",
    "os.kill": "sent a signal to a process (os.kill)",
    "os.killpg": "sent a signal to a process group (os.killpg)",
    "function.__new__": "built a function object by hand",
}
#: library functions that only pass a call on (IPython's `open` for notebook code): looked through, like the stdlib
PASS_THROUGH = {("interactiveshell.py", "_modified_open")}
#: modules whose functions and classes the checks rely on: they must be as they were when the kernel started
WATCHED_MODULES = (
    "builtins",
    "math",
    "numbers",
    "functools",
    "inspect",
    "traceback",
    "json",
    "numpy",
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.utils",
    "torch.nn.utils.clip_grad",
    "torch.amp",
    "torch.amp.grad_scaler",
    "torch.amp.autocast_mode",
    "torch.optim",
    "torch.optim.optimizer",
    "torch.cuda",
)
WATCHED_CLASSES = ("torch.Tensor", "torch.amp.GradScaler", "torch.optim.Optimizer")
#: names IPython itself puts into builtins while a cell runs
IPYTHON_BUILTINS = {
    "get_ipython",
    "display",
    "exit",
    "quit",
    "__IPYTHON__",
    "_",
    "__",
    "___",
    "help",
    "copyright",
    "credits",
    "license",
    "dreload",
    "input",
    "raw_input",
    "breakpoint",
}


def _comparable(value) -> bool:
    import types

    return isinstance(
        value,
        (
            types.FunctionType,
            types.BuiltinFunctionType,
            types.MethodType,
            type,
            types.ModuleType,
            staticmethod,
            classmethod,
            property,
            types.WrapperDescriptorType,
            types.MethodDescriptorType,
        ),
    )


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _frozen(value, depth: int = 0):
    """A comparable copy of a plain constant (numbers, strings, and tuples, lists, sets and dicts of them), or None
    when `value` is something else (a tensor, an object): those are not watched by value."""
    if isinstance(value, _PLAIN):
        return (type(value), repr(value))  # repr: 0.65 == 0.65, nan == nan, 1 != True
    if depth > 4 or not isinstance(value, (tuple, list, set, frozenset, dict)) or len(value) > 10_000:
        return None
    if isinstance(value, dict):
        items = [(_frozen(k, depth + 1), _frozen(v, depth + 1)) for k, v in value.items()]
        parts = sorted(items, key=repr)
    else:
        parts = [_frozen(v, depth + 1) for v in value]
        if isinstance(value, (set, frozenset)):
            parts = sorted(parts, key=repr)
    if any(p is None for p in parts) or any(isinstance(p, tuple) and None in p for p in parts):
        return None
    return (type(value), tuple(parts))


def _constants(kit_prefixes: tuple[str, ...]) -> dict[str, tuple[object, str, object]]:
    """{label: (module, name, frozen value)} of the kit modules' plain constants (ACCURACY_BAR, tolerances, the
    import time), compared by value: rebinding or mutating one is as much tampering as replacing a function."""
    constants = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(kit_prefixes):
            continue
        for k, v in list(vars(module).items()):
            if k.startswith("__") or _comparable(v):
                continue
            frozen = _frozen(v)
            if frozen is not None:
                constants[f"{name}.{k}"] = (module, k, frozen)
    return constants


def _snapshot(kit_prefixes: tuple[str, ...]) -> dict[str, tuple[object, dict]]:
    """{label: (object whose dict is watched, {name: value})} for the kit, the watched modules and classes."""
    snap = {}
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        if name in WATCHED_MODULES or name.startswith(kit_prefixes):
            items = {k: v for k, v in vars(module).items() if _comparable(v)}
            if name == "builtins":
                items = {k: v for k, v in items.items() if k not in IPYTHON_BUILTINS}
            snap[name] = (module, items)
            if name.startswith(kit_prefixes):
                for k, v in list(items.items()):
                    if isinstance(v, type) and getattr(v, "__module__", "") == name:
                        snap[f"{name}.{k}"] = (v, {a: b for a, b in vars(v).items() if _comparable(b)})
    for dotted in WATCHED_CLASSES:
        module_name, _, attr = dotted.rpartition(".")
        cls = getattr(sys.modules.get(module_name), attr, None)
        if cls is not None:
            snap[dotted] = (cls, {a: b for a, b in vars(cls).items() if _comparable(b)})
    return snap


def install_hook(report_fd: int, key: bytes, config: dict) -> None:
    """Install the audit hook; everything it needs is bound here, before any submitted code runs."""
    import hashlib
    import hmac

    kit_dir = os.path.realpath(config["kit_dir"])
    kit_prefixes = ("autograders", "memlab", *config.get("check_modules", ()))
    trusted_roots = tuple(os.path.realpath(p) + os.sep for p in config["trusted_code_roots"])
    stdlib_roots = tuple(os.path.realpath(p) + os.sep for p in config["stdlib_roots"])
    logging_files = (os.path.join(p, "logging") for p in config["stdlib_roots"])
    allowed_chains = tuple(os.path.realpath(p) + os.sep for p in logging_files) + tuple(
        os.path.realpath(os.path.join(p, "traceback.py")) for p in config["stdlib_roots"]
    )
    protected = tuple(os.path.realpath(p) + os.sep for p in config.get("protected_roots", ()))
    # what the kernel may read or write by design (the venv or the kit may lie inside a protected folder)
    exempt = tuple(os.path.realpath(p) + os.sep for p in [*config["read_roots"], *config["write_roots"]])
    references_dir = os.path.join(kit_dir, "autograders", "references") + os.sep

    import autograders.kit as kit

    run_code = kit.check("probe")(lambda: 1).__code__
    genuine = {}
    for module_name in [m for m in list(sys.modules) if m.startswith(kit_prefixes)]:
        for value in list(vars(sys.modules[module_name]).values()):
            name = getattr(value, "check_name", None)
            inner = getattr(value, "__wrapped__", None)
            if isinstance(name, str) and inner is not None:
                genuine[name] = (inner, inner.__code__)
    snapshot = _snapshot(kit_prefixes)
    constants = _constants(kit_prefixes)
    preloaded = frozenset(
        path
        for name, m in list(sys.modules.items())
        if name.startswith(kit_prefixes) and getattr(m, "__file__", None)
        for path in (m.__file__, os.path.realpath(m.__file__))
    )
    write, getframe, dumps, new_mac, sha256 = os.write, sys._getframe, json.dumps, hmac.new, hashlib.sha256
    realpath, fspath, isinstance_, str_, monotonic = (
        os.path.realpath,
        os.fspath,
        isinstance,
        str,
        time.monotonic,
    )
    state = {"seq": 0, "busy": False, "flags": set()}

    def emit(kind: str, **data) -> None:
        state["seq"] += 1
        payload = dumps({"seq": state["seq"], "kind": kind, "t": monotonic(), **data}, sort_keys=True)
        mac = new_mac(key, payload.encode(), sha256).hexdigest()
        write(report_fd, (payload + "\t" + mac + "\n").encode())

    def code_kind(filename: str) -> str:
        if filename.startswith(trusted_roots) or filename == __file__:
            return "trusted"
        if filename.startswith("<frozen ") or filename.startswith(stdlib_roots):
            return "stdlib"
        return "learner"

    def submitted_code_behind(frame) -> bool:
        """True when the nearest code outside the standard library is the submission's (not a library's, not the
        kit's); a chain through logging or traceback (which read frames for their own output) is not."""
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(allowed_chains):
                return False
            kind = code_kind(filename)
            if kind != "stdlib" and (os.path.basename(filename), frame.f_code.co_name) not in PASS_THROUGH:
                return kind == "learner"
            frame = frame.f_back
        return False

    def flag(text: str) -> None:
        if text not in state["flags"]:
            state["flags"].add(text)
            emit("flag", text=text)

    def integrity() -> list[str]:
        changed = []
        for label, (owner, items) in snapshot.items():
            now = vars(owner)
            for name, value in items.items():
                if now.get(name, None) is not value:
                    changed.append(f"{label}.{name}")
        for label, (module, name, frozen) in constants.items():
            if _frozen(vars(module).get(name, None)) != frozen:
                changed.append(label)
        return changed

    def verify_pass(args) -> None:
        caller = getframe(2)  # 0: this function, 1: the hook, 2: what called sys.audit
        name = args[0] if args else None
        if caller.f_code is not run_code:
            flag(f"announced a passed check ({name!r}) without running it (sys.audit called by hand)")
            emit("violation", check=str_(name), detail="a pass announced outside the kit")
            raise RuntimeError("TAMPERING: a check result was announced outside the check kit")
        check_fn = caller.f_locals.get("check_fn")
        entry = genuine.get(caller.f_locals.get("name"))
        if entry is None or check_fn is not entry[0] or check_fn.__code__ is not entry[1]:
            emit("violation", check=str_(name), detail="the check function is not the course's")
            flag(f"ran a check {name!r} that is not the course's own")
            raise RuntimeError("TAMPERING: the check that ran is not the course's own")
        changed = integrity()
        if changed:
            detail = "changed while grading: " + ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")
            emit("violation", check=str_(name), detail=detail)
            flag(f"changed the grading kit or the libraries it relies on ({', '.join(changed[:3])})")
            raise RuntimeError("TAMPERING: " + detail)
        emit("pass", check=str_(name), cases=int(args[1]) if len(args) > 1 else 0)

    def hook(event: str, args) -> None:
        if state["busy"]:
            return
        if event == PASS_EVENT:
            state["busy"] = True
            try:
                verify_pass(args)
            finally:
                state["busy"] = False
            return
        if event == REFERENCE_EVENT:
            state["busy"] = True
            try:
                frame = getframe(2)
                while frame is not None and frame.f_code is not run_code:
                    if code_kind(frame.f_code.co_filename) == "learner":
                        flag(f"called a grading reference implementation ({args[0] if args else '?'})")
                        raise RuntimeError(
                            "TAMPERING: submitted code called the grader's reference implementation"
                        )
                    frame = frame.f_back
            finally:
                state["busy"] = False
            return
        if event == "open":
            path = args[0] if args else None
            if isinstance_(path, (str_, bytes)) and (protected or references_dir):
                state["busy"] = True
                try:
                    full = realpath(
                        fspath(path if isinstance_(path, str_) else path.decode(errors="replace"))
                    )
                    if (
                        (full + os.sep).startswith(protected)
                        and not (full + os.sep).startswith(exempt)
                        and submitted_code_behind(getframe(1))
                    ):
                        flag(f"tried to open {full} (the grader's files, out of its reach)")
                    elif full.startswith(references_dir) and submitted_code_behind(getframe(1)):
                        flag(f"read the grader's reference implementations ({full})")
                finally:
                    state["busy"] = False
            return
        if event == "exec":
            code = args[0] if args else None
            filename = getattr(code, "co_filename", "")
            if isinstance_(filename, str_) and filename in preloaded:
                flag(f"re-ran the grading kit's module {os.path.basename(filename)} (reload)")
            return
        if event == "object.__setattr__":
            target = args[0] if args else None
            module = getattr(target, "__module__", None) or getattr(target, "__name__", "")
            if isinstance_(module, str_) and module.startswith(kit_prefixes):
                flag(f"changed {args[1]!s} of the grading kit's {module}")
                raise RuntimeError("TAMPERING: the grading kit cannot be changed")
            return
        text = SUSPICIOUS.get(event)
        if text is None:
            return
        state["busy"] = True
        try:
            if submitted_code_behind(getframe(1)):
                flag(text)
        finally:
            state["busy"] = False

    sys.addaudithook(hook)
    emit("boot", pid=os.getpid(), checks=sorted(genuine))


# ---- main -------------------------------------------------------------------------------------------------------


def _launcher(monitor_pid: int) -> None:
    """The process jupyter_client started and will signal or kill: it passes signals on to the monitor and leaves
    with it. Killed outright (a kernel shutdown), it leaves the monitor orphaned, which then kills every process of
    the kernel: a monitor jupyter_client could kill itself could not clean up."""
    _forward_signals(monitor_pid)
    while True:
        try:
            _, status = os.waitpid(monitor_pid, 0)
            break
        except InterruptedError:
            continue
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _isolate(config: dict) -> dict:
    """Namespaces and the monitor. Returns what was achieved; only the kernel process returns from here.

    launcher (the pid jupyter_client knows) -> monitor (own session, outside any namespace) -> init (PID 1 of the
    namespace, reaps orphans) -> kernel; without namespaces: launcher -> monitor -> kernel.
    """
    achieved = {"pid_namespace": False, "landlock": 0}
    if not config.get("isolate", True):
        return achieved
    monitor_pid = os.fork()
    if monitor_pid:
        _launcher(monitor_pid)  # never returns
    os.setsid()
    uid, gid = os.getuid(), os.getgid()
    # an ordinary user needs a user namespace to own a PID namespace; root does not, unless told to (the tests run
    # the ordinary user's path that way). "namespaces": false skips both (the fallback where they are refused).
    with_user = uid != 0 or config.get("user_namespace") == "always"
    flags = CLONE_NEWPID | (CLONE_NEWUSER if with_user else 0)
    try:
        if not config.get("namespaces", True):
            raise OSError("namespaces switched off")
        _unshare(flags)
        if with_user:
            with open("/proc/self/setgroups", "w") as fh:
                fh.write("deny")
            with open("/proc/self/uid_map", "w") as fh:
                fh.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as fh:
                fh.write(f"{gid} {gid} 1")
        namespaces = True
    except OSError as error:
        achieved["namespace_error"] = str(error)
        namespaces = False
    init = os.fork()
    if init:  # the monitor: trusted, outside the namespace, runs no submitted code
        namespace = _pid_namespace(init) if namespaces else None
        if namespace == _pid_namespace(os.getpid()):
            namespace = None
        _record_monitor(config, {"isolation": achieved | {"pid_namespace": namespaces}})
        os._exit(monitor(init, config, namespace))
    _die_with_parent()
    if namespaces:
        try:
            _mount_proc()
        except OSError as error:
            achieved["proc_error"] = str(error)
        kernel = os.fork()
        if kernel:
            _init_process(kernel)  # never returns
        _die_with_parent()
        achieved["pid_namespace"] = True
    # a session of its own: jupyter_client interrupts the launcher's process group, and the monitor and init pass
    # SIGINT on to the kernel alone, never to the processes a submission forked (copies of the kernel)
    os.setsid()
    return achieved


def main() -> None:
    with open(os.environ[CONFIG_ENV]) as fh:
        config = json.load(fh)
    key = bytes.fromhex(config.pop("key"))
    report_fd = os.open(config["report_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    achieved = _isolate(config)
    set_limits(
        int(config.get("memory_bytes") or 0),
        int(config.get("nproc") or 0),
        int(config.get("fsize_bytes") or 0),
    )
    if config.get("isolate", True):
        connection_file = sys.argv[sys.argv.index("-f") + 1] if "-f" in sys.argv[:-1] else None
        read_roots = [*config["read_roots"], *([connection_file] if connection_file else [])]
        achieved["landlock"] = apply_landlock(read_roots, config["write_roots"])
    os.environ.pop(CONFIG_ENV, None)
    os.environ.pop("JPY_PARENT_PID", None)  # the kernel's parent is this namespace's init: no parent polling
    # the grading kit: imported before any submitted code, so the grading mode, the seed and the check functions
    # are the ones this process started with
    sys.path.insert(
        0, os.getcwd()
    )  # a lesson's own check module (e.g. tests' fixture_checks.py) sits in its folder
    import importlib
    import pkgutil

    import autograders.kit  # noqa: F401
    import memlab

    # every module of the toolkit too, before the hook: (1) importing transformers imports torch._dynamo, which wraps
    # torch.manual_seed in place (torch/_dynamo/eval_frame.py), a library's own patch, not a change made while
    # grading (a lesson whose check module does not import transformers was flagged for it); (2) building a class
    # sets attributes on it (typing.NamedTuple sets __bases__, dataclasses set __init__), which the hook refuses on
    # the kit's classes: a toolkit module first imported by a lesson's setup cell failed to import
    # (memlab.plots defines no class and imports pyplot, which is left to the lesson, after IPython sets its backend)
    for info in pkgutil.iter_modules(memlab.__path__, "memlab."):
        if info.name != "memlab.plots":
            importlib.import_module(info.name)

    for module in config.get("check_modules", ()):
        importlib.import_module(module)
    for module in config.get("reference_modules", ()):
        importlib.import_module(module)
    sys.path.remove(os.getcwd())
    install_hook(report_fd, key, config)
    del key
    sys.argv = [sys.argv[0], *sys.argv[1:], "--HistoryManager.hist_file=:memory:"]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
