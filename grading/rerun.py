"""A measurement of the learner's code, collected again by the judge in a fresh process it starts.

Checks that measure the learner's code (the memory of its step, the time it reports, how it probes for an
out-of-memory error: `Check.rerun`) are not judged from the grading kernel's transcript: code that ran in that
kernel before the check (a cell's top-level statements) could have prepared the process the measurement runs in.
The judge starts a new process, sandboxed like the kernel (grading/isolation.py), in which

1. the kit is imported first, in collect mode, with this student's seed, and the check's module: the check, memlab's
   tracker and torch are in place before any of the learner's code exists;
2. of the notebook's code, only the statements **the check's call needs** run, in the notebook's order (`needed`):
   those that bind a name the call's arguments read, or that a needed statement reads in turn (its body, default
   values, decorators, base classes included): imports, functions, classes, assignments, and the compound statements
   that bind such names (`try: import x`). A statement that binds nothing the call reaches (a training loop, a
   patch of torch, a call made for its effect, an unrelated function and its decorators) never runs. Of the
   lesson's own cells (code identical to the lesson's source, not solution cells) only assignments count, and not one
   that would call the learner's code. Modules the learner handed in next to the notebook (`name.py`) are imported
   from their source, as the kernel would, when a needed import names them. Each statement that runs code is given at
   most `LESSON_SECONDS` (the lesson's own: a cell that trains a model is skipped, not waited for) or
   `LEARNER_SECONDS`; a statement that fails is skipped; then torch's process-wide state is put back as a fresh
   process has it (`fresh_torch_state`: a statement cut short can leave gradients off);
3. the check collects, exactly as in a kernel, and its transcript goes back through a pipe of its own, not the
   process's output (which the learner's code writes too): exactly one record, after which the process ends at once
   (`os._exit`: no exit handler of the learner's runs). Two records, or none, fail the check.

What this buys is that nothing ran before the measurement but what the measured function needs to exist (a factory
that makes it, a constant it reads). That code, and the measured function itself while it runs, could still patch
the measurement: a learner's code in the measuring process can always tamper with it, and it is what is graded anyway.

    python -m grading.rerun < REQUEST.json      (inside the sandbox; started by `rerun`)
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from grading.i18n import _

RERUN_TIMEOUT = 900.0
LESSON_SECONDS = 2  # what one statement of a lesson's own cell may take in a rerun
LEARNER_SECONDS = 60  # what one statement of the learner's that runs code may take (a factory, a constant)
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: modules handed in next to the notebook that a rerun may import: at most this many, each at most this large
MAX_MODULES, MAX_MODULE_BYTES = 50, 1_000_000


def definitions(cells: list[list], roots: set[str] | None = None) -> list[list]:
    """[statement's code, its time limit in seconds (0: none)] for what a rerun runs of `cells` ([code, is the lesson's
    own cell] each), in order: with `roots` (the names the check's call reads), the statements `needed` by them;
    None keeps every statement that binds a name."""
    parsed = []
    for source, own in cells:
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            parsed.append((ast.parse("\n".join(lines)), own))
        except SyntaxError:
            continue
    # a lesson's assignment that would call the learner's code (`RESULT = their_function(...)`) is not run: the
    # learner's code runs first in the check, under its measurement
    learners = {name for tree, own in parsed if not own for node in tree.body for name in _written(node)}
    kept: list[tuple[ast.stmt, int]] = []
    for tree, own in parsed:
        for node in tree.body:
            if not _written(node, into=own):
                continue  # binds nothing (a call, a loop, a patch `torch.x = ...`): run for its effect, never here
            if not own:
                kept.append(
                    (
                        node,
                        0 if isinstance(node, DEFINITIONS) or _literal_assignment(node) else LEARNER_SECONDS,
                    )
                )
            elif isinstance(node, DEFINITIONS) or _literal_assignment(node):
                kept.append((node, 0))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and not learners & {
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            }:
                kept.append((node, LESSON_SECONDS))
    if roots is not None:
        used = needed([node for node, _seconds in kept], roots)
        kept = [entry for index, entry in enumerate(kept) if index in used]
    return [[ast.unparse(node), seconds] for node, seconds in kept]


def _literal_assignment(node) -> bool:
    return isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _literal(node.value)


def needed(statements: list[ast.stmt], roots: set[str]) -> set[int]:
    """The indices of the `statements` that what `roots` names depends on: a statement is needed when it writes
    (assigns, defines, imports, or stores into: `SUMMARY["x"] = ...`) a needed name, and every name a needed
    statement reads (its body, default arguments, decorators, index expressions included) is needed in turn. Scopes
    are not told apart: a function's local `x` makes a lesson's `x` needed too (more is loaded, never less)."""
    writes = [_written(node) for node in statements]
    reads = [
        {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for node in statements
    ]
    names, used = set(roots), set()
    while True:
        more = {i for i, written in enumerate(writes) if i not in used and written & names}
        if not more:
            return used
        used |= more
        for i in more:
            names |= reads[i]


def _written(node: ast.stmt, into: bool = True) -> set[str]:
    """The names `node` binds, wherever inside it (a compound statement's body, `try: import x`), not the local names
    of a function or class: what it defines, imports or assigns, and, with `into`, what it stores into
    (`SUMMARY["x"] = ...`, `torch.x = ...` write SUMMARY and torch)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*"}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not into:
            targets = [t for t in targets if isinstance(t, (ast.Name, ast.Tuple, ast.List))]
            return {
                n.id
                for t in targets
                for n in ast.walk(t)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    found = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            found |= _written(child, into)
        elif isinstance(child, (ast.excepthandler, ast.withitem, ast.match_case)):
            for inner in ast.iter_child_nodes(child):
                if isinstance(inner, ast.stmt):
                    found |= _written(inner, into)
    if isinstance(node, (ast.For, ast.AsyncFor)):
        found |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.With, ast.AsyncWith)):
        found |= {n.id for item in node.items if item.optional_vars for n in ast.walk(item.optional_vars)
                  if isinstance(n, ast.Name)}  # fmt: skip
    if isinstance(node, ast.Try):
        found |= {h.name for h in node.handlers if h.name}
    return found


def call_roots(call) -> set[str]:
    """The names a check's call reads: those of its arguments' expressions (`fn`, `fn=train_step`, `MODELS["a"]`)."""
    names = set()
    for expression in [*call.args, *(value for _key, value in call.kwargs)]:
        try:
            tree = ast.parse(expression, mode="eval")
        except SyntaxError:
            continue
        names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return names


def _literal(node) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def rerun(call, request) -> tuple[list, str]:
    """([transcript], "") from a fresh sandboxed process, or ([], why it could not be collected)."""
    payload = json.dumps(
        {
            "module": call.module,
            "function": call.function,
            "args": list(call.args),
            "kwargs": [list(k) for k in call.kwargs],
            "definitions": definitions(request.definitions, call_roots(call)),
            "modules": request.modules,
            "language": request.language,
        }
    )
    argv = [sys.executable, "-P", "-m", "grading.rerun"]  # -P: the working directory is not put on sys.path
    # a fresh folder, never the submission's: `python -m` puts its working directory first on sys.path, and the
    # kernel could have planted modules (an `autograders/kit.py`) in any folder it could write
    workdir = tempfile.mkdtemp(prefix="memlab-rerun-")
    checks = tempfile.mkdtemp(prefix="memlab-rerun-checks-")
    try:
        copy_check_module(call.module, request.source_dir, checks)
        return _rerun(argv, workdir, checks, payload, request)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(checks, ignore_errors=True)


def handed_in_modules(folder: str, exclude: set[str]) -> dict[str, str]:
    """{name: source} of the Python modules the learner handed in next to the notebook (`folder`'s top-level `*.py`,
    regular files), that a rerun may import: at most MAX_MODULES, each at most MAX_MODULE_BYTES; not the names of
    `exclude` (the course's own files there, such as a lesson's check module) nor of the kit's packages."""
    found: dict[str, str] = {}
    reserved = {"autograders", "memlab", "grading", *exclude}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        name = entry.name.removesuffix(".py")
        if not entry.name.endswith(".py") or not name.isidentifier() or name in reserved:
            continue
        if (
            not entry.is_file(follow_symlinks=False)
            or entry.stat(follow_symlinks=False).st_size > MAX_MODULE_BYTES
        ):
            continue
        try:
            found[name] = Path(entry.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(found) >= MAX_MODULES:
            break
    return found


def copy_check_module(module: str, source_dir: str, into: str) -> None:
    """A check module that is not the kit's (the tests' fixture lesson keeps its checks next to its notebook): that
    one file, copied for the rerun's sandbox, which never sees the lesson's folder (its solution notebook)."""
    if module.startswith(("autograders.", "memlab.")) or not source_dir:
        return
    path = os.path.join(source_dir, *module.split(".")) + ".py"
    if os.path.isfile(path) and not os.path.islink(path):
        shutil.copyfile(path, os.path.join(into, os.path.basename(path)))
        os.chmod(into, 0o755)


def _rerun(argv: list[str], workdir: str, checks: str, payload: str, request) -> tuple[list, str]:
    from grading import isolation
    from grading.submission import escaped
    from memlab.protocol import grading_environment

    env = dict(grading_environment(request.seed))
    settings = request.settings
    python_path = f"{checks}:{settings.kit_dir}:{os.path.dirname(_grading_dir())}"
    if settings.isolate:
        sandbox = isolation.Sandbox(
            kit_dir=settings.kit_dir,
            workdir=workdir,
            readable=(checks, _grading_dir()),
            limits=settings.limits(),
            threads=settings.threads or None,
            environment=tuple(env.items()),
        )
        sandbox.hand_over()
        command, environment = sandbox.command(argv), sandbox.env()
        environment["PYTHONPATH"] = python_path
    else:
        sandbox = None
        command, environment = argv, {**os.environ, **env, "PYTHONPATH": python_path}
    read_end, write_end = os.pipe()
    payload = json.dumps({**json.loads(payload), "channel": write_end})
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=workdir,
        start_new_session=True,
        pass_fds=(write_end,),
    )
    os.close(write_end)
    received: list[bytes] = []
    reader = threading.Thread(target=_read_channel, args=(read_end, received), daemon=True)
    reader.start()
    watch = isolation.Watch(proc.pid, sandbox.limits, workdir) if sandbox is not None else None
    try:
        _stdout, stderr = proc.communicate(payload, timeout=RERUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        isolation.kill_tree(proc.pid)
        proc.communicate()
        return (
            [],
            _("the measurement of your code, run again by the grader, took more than {seconds} s").format(
                seconds=f"{RERUN_TIMEOUT:g}"
            ),
        )
    finally:
        if watch is not None:
            watch.stop()
        isolation.kill_tree(proc.pid)  # what it left running holds the channel open
        reader.join(10)
        os.close(read_end)
    if watch is not None and watch.reason:
        return [], _("the measurement of your code, run again by the grader, was stopped: {reason}").format(
            reason=watch.reason
        )
    records = b"".join(received).decode("utf-8", "replace").splitlines()
    if len(records) > 1 or (records and len(b"".join(received)) >= CHANNEL_BYTES):
        return [], _(
            "the measurement of your code, run again by the grader, sent {count} records (one run sends one)"
        ).format(count=len(records))
    try:
        data = json.loads(records[0]) if records else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        tail = stderr.strip().splitlines()[-1:] or ["no output"]
        failed = _("your definitions, run again by the grader to measure them, failed: {error}")
        return [], failed.format(error=escaped(tail[0], 300))
    if "error" in data:
        return [], escaped(str(data["error"]), 500)
    return [data.get("transcript")], ""


#: the most a rerun's channel carries (a record is a few KiB): more is refused, not read into the judge's memory
CHANNEL_BYTES = 16 * 2**20


def _read_channel(fd: int, into: list[bytes]) -> None:
    total = 0
    while chunk := os.read(fd, 65536):
        total += len(chunk)
        if total > CHANNEL_BYTES:
            into.append(b"\n" * 2)  # two records: refused
            return
        into.append(chunk)


def fresh_torch_state() -> None:
    """Put back the process-wide state of torch that a fresh process starts with: gradients on, autocast off.
    A lesson's statement stopped by the alarm can leave it changed: a TimeoutError that lands between
    `torch.set_grad_enabled(False)` and the `try` or `with` that would undo it (torch.no_grad's __enter__, an
    optimizer's step) leaves gradients off for every later statement, and the learner's training step then fails
    with "element 0 of tensors does not require grad" (lesson 03's Exercise 3.4 lost its point so, once, in CI). What
    the measurement runs in is to be a fresh process's state, whatever ran before it."""
    import torch

    torch.set_grad_enabled(True)
    for device in ("cpu", "cuda"):
        torch.set_autocast_enabled(device, False)
    torch.clear_autocast_cache()


def _grading_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


class HandedInModules:
    """A finder of the modules the learner handed in next to the notebook (`name.py`), served from their source: the
    rerun's folder is a fresh one, so `import helper` finds them only through this. Never a name the kit or the check
    already holds (those are imported before any of the learner's code)."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        import importlib.util

        if path is not None or name not in self.sources or name in sys.modules:
            return None
        return importlib.util.spec_from_loader(name, self, origin=f"<your module {name}.py>")

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        import linecache

        source, filename = self.sources[module.__name__], f"<your module {module.__name__}.py>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), module.__dict__)


def main() -> int:
    """Inside the sandbox: the kit first, then what the check's call needs, then the check's collection, whose
    record leaves through the request's channel (a pipe's file descriptor) and nowhere else."""
    import importlib
    import linecache

    from autograders import kit  # collect mode, read from the environment at import

    request = json.loads(sys.stdin.read())
    channel = os.fdopen(request["channel"], "wb", buffering=0)

    def send(data: dict) -> None:
        """The one record of this process, then its end: nothing of the learner's runs after it (exit handlers,
        threads), and a second record, written by the learner's code, would be refused."""
        channel.write((json.dumps(data) + "\n").encode())
        os._exit(0)

    def _too_long(signum, frame):
        raise TimeoutError(_("took too long"))

    signal.signal(signal.SIGALRM, _too_long)
    # the check's messages in the lesson's language, as in its kernel
    if request.get("language", "en") != "en":
        from memlab import i18n

        i18n.use(request["language"])
    module = importlib.import_module(request["module"])
    declared = getattr(module, request["function"]).check
    sys.meta_path.append(HandedInModules(request.get("modules") or {}))
    namespace: dict = {"__name__": "__main__"}
    skipped = []
    # one by one: what fails (a helper whose default argument needs a name that was skipped) or takes too long (a
    # lesson cell that trains a model) is skipped
    for index, (code, seconds) in enumerate(request["definitions"]):
        filename = (
            f"<your definitions {index}>"  # readable source: the kit tells a stub from written code by it
        )
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            signal.alarm(int(seconds))
            try:
                exec(compile(code, filename, "exec"), namespace)
            finally:
                signal.alarm(0)
        except BaseException as error:  # noqa: BLE001 - the alarm's TimeoutError too, wherever it landed
            skipped.append(f"{code.splitlines()[0][:40]} ({type(error).__name__}: {error})")
    fresh_torch_state()
    try:
        args = [namespace[name] if name in namespace else eval(name, namespace) for name in request["args"]]
        kwargs = {k: eval(v, namespace) for k, v in request["kwargs"]}
    except Exception as error:
        why = _("the check's arguments are not among your definitions ({error})").format(error=error)
        if skipped:
            why += "; " + _("not loaded: {what}").format(what="; ".join(skipped)[:300])
        send({"error": why})
    send({"transcript": kit.collect(declared, args, kwargs).to_data()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
