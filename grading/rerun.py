"""A measurement of the learner's code, collected again by the judge in a fresh process it starts.

Checks that measure the learner's code (the memory of its step, the time it reports, how it probes for an
out-of-memory error: `Check.rerun`) are not judged from the grading kernel's transcript: code that ran in that
kernel before the check (a cell's top-level statements) could have prepared the process the measurement runs in.
The judge starts a new process, sandboxed like the kernel (grading/isolation.py), in which

1. the kit is imported first, in collect mode, with this student's seed: the check's module, memlab's tracker and
   torch are in place before any of the learner's code exists;
2. the learner's **definitions only** are loaded from the notebook's code cells, in order: `import` statements,
   functions, classes, and assignments of literal constants (`ast.literal_eval`); no other top-level statement of
   a cell the learner wrote or changed runs (no training, no patching, no prints). The lesson's own cells (code
   identical to the lesson's source, not solution cells) also contribute their assignments (`SIZES`, `DEVICE`,
   `TARGETS`: names a learner's function may use), only those the check's call needs: an assignment runs when what
   it assigns is read by the call's arguments or, in turn, by a definition or assignment they need (`needed`), so
   that a lesson cell's model, profile or plot nobody reads is not built again; each is given at most
   `ASSIGNMENT_SECONDS` (a lesson cell that trains a model is skipped, not waited for); a statement that fails is
   skipped; then torch's process-wide state is put back as a fresh process has it (`fresh_torch_state`: a statement
   cut short can leave gradients off);
3. the check collects, exactly as in a kernel, and the transcript is printed as the last line of output.

The judge then judges that transcript. The learner's function still runs here (it is what is measured), so it could
patch the measurement while it runs: what this buys is that nothing ran before the measurement started.

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

from grading.i18n import _

RERUN_TIMEOUT = 900.0
ASSIGNMENT_SECONDS = 2  # what one assignment of a lesson's own cell may take in a rerun
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def definitions(cells: list[list], roots: set[str] | None = None) -> list[list]:
    """[statement's code, is an assignment of the lesson's own] for what a rerun loads from `cells`
    ([code, is the lesson's own cell] each), in order. With `roots` (the names the check's call reads), the
    lesson's own assignments are only those `needed` by them; None keeps every one."""
    parsed = []
    for source, own in cells:
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            parsed.append((ast.parse("\n".join(lines)), own))
        except SyntaxError:
            continue
    # a lesson's assignment that would call the learner's code (`RESULT = their_function(...)`) is not run: the
    # learner's code runs first in the check, under its measurement
    learners = {name for tree, own in parsed if not own for node in tree.body for name in _defined(node)}
    kept: list[tuple[ast.stmt, bool]] = []
    for tree, own in parsed:
        for node in tree.body:
            assignment = isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
            if isinstance(node, DEFINITIONS) or (assignment and _literal(node.value)):
                kept.append((node, False))
            elif (
                assignment
                and own
                and not learners & {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            ):
                kept.append((node, True))
    if roots is not None:
        used = needed([node for node, _timed in kept], roots)
        kept = [(node, timed) for index, (node, timed) in enumerate(kept) if not timed or index in used]
    return [[ast.unparse(node), timed] for node, timed in kept]


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


def _written(node: ast.stmt) -> set[str]:
    """The names `node` binds or stores into: what it defines or assigns (`_defined`), or imports."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return set(_defined(node))


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


def _defined(node) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


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
            "source_dir": request.source_dir,
            "language": request.language,
        }
    )
    argv = [sys.executable, "-P", "-m", "grading.rerun"]  # -P: the working directory is not put on sys.path
    # a fresh folder, never the submission's: `python -m` puts its working directory first on sys.path, and the
    # kernel could have planted modules (an `autograders/kit.py`) in any folder it could write
    workdir = tempfile.mkdtemp(prefix="memlab-rerun-")
    try:
        return _rerun(argv, workdir, payload, request)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _rerun(argv: list[str], workdir: str, payload: str, request) -> tuple[list, str]:
    from grading import isolation

    env = {"COURSE_GRADING": "collect", "COURSE_GRADING_SEED": str(request.seed)}
    if request.isolate:
        sandbox = isolation.Sandbox(
            kit_dir=request.kit_dir,
            workdir=workdir,
            readable=tuple(p for p in (request.source_dir, _grading_dir()) if p),
            limits=isolation.Limits(memory_bytes=int(request.memory_gb * 2**30)),
            threads=request.threads or None,
            environment=tuple(env.items()),
        )
        command, environment = sandbox.command(argv), sandbox.env()
        environment["PYTHONPATH"] = f"{request.kit_dir}:{os.path.dirname(_grading_dir())}"
    else:
        command, environment = argv, {**os.environ, **env}
    try:
        proc = subprocess.run(
            command,
            input=payload,
            capture_output=True,
            text=True,
            timeout=RERUN_TIMEOUT,
            env=environment,
            cwd=workdir,
        )
    except subprocess.TimeoutExpired:
        return (
            [],
            _("the measurement of your code, run again by the grader, took more than {seconds} s").format(
                seconds=f"{RERUN_TIMEOUT:g}"
            ),
        )
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    try:
        data = json.loads(last[0]) if last else None
    except json.JSONDecodeError:
        data = None
    if proc.returncode != 0 or not isinstance(data, dict):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        failed = _("your definitions, run again by the grader to measure them, failed: {error}")
        return [], failed.format(error=tail[0][:300])
    if "error" in data:
        return [], str(data["error"])[:500]
    return [data["transcript"]], ""


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


def main() -> int:
    """Inside the sandbox: the kit first, then the definitions, then the check's collection."""
    import importlib
    import linecache

    from autograders import kit  # collect mode, read from the environment at import

    def _too_long(signum, frame):
        raise TimeoutError(_("took more than {seconds} s").format(seconds=ASSIGNMENT_SECONDS))

    signal.signal(signal.SIGALRM, _too_long)

    request = json.loads(sys.stdin.read())
    # the check's messages in the lesson's language, as in its kernel
    if request.get("language", "en") != "en":
        from memlab import i18n

        i18n.use(request["language"])
    if request["source_dir"] and request["source_dir"] not in sys.path:
        sys.path.append(request["source_dir"])
    module = importlib.import_module(request["module"])
    declared = getattr(module, request["function"]).check
    namespace: dict = {"__name__": "__main__"}
    skipped = []
    # one by one: what fails (a helper whose default argument needs a name that was skipped) or takes too long (a
    # lesson cell that trains a model) is skipped
    for index, (code, timed) in enumerate(request["definitions"]):
        filename = (
            f"<your definitions {index}>"  # readable source: the kit tells a stub from written code by it
        )
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            if timed:
                signal.alarm(ASSIGNMENT_SECONDS)
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
        print(json.dumps({"error": why}))
        return 0
    transcript = kit.collect(declared, args, kwargs)
    print("\n" + json.dumps({"transcript": transcript.to_data()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
