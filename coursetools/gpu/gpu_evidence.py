#!/usr/bin/env python
"""The course's GPU evidence in a few calls: measure on a GPU machine in parts, merge the records into results/.

    python -m coursetools.gpu.gpu_evidence --part N [--budget SECONDS] [--out DIR]   one part (1..5) on the GPU machine
    python -m coursetools.gpu.gpu_evidence --all [--budget SECONDS]                 every part, then the merge (own GPU box)
    python -m coursetools.gpu.gpu_evidence --merge FILES... [--results DIR]         records -> results/<gpu-name>.json + plots
    python -m coursetools.gpu.gpu_evidence --plan                                   the device-tool calls, one per part
    python -m coursetools.gpu.gpu_evidence --rehearse [--out DIR] [--results DIR]   every part's plumbing on this CPU, merged
                                                                            into a temporary folder (not results/)

The parts, in order of value (each fits one GPU command: by default it stops starting work after 480 s):
  1. the machine (device, driver, torch, CUDA, packages, the grading sandbox), the storage tracker against
     torch.cuda.max_memory_allocated and the simulator against a real CUDA step (tests/gpu/test_gpu_memory.py),
     lesson 03's bf16/fp32 measurement (tests/gpu/test_amp_gpu.py), lessons 01-03 executed at GPU sizes;
  2. lessons 04 and 06's GPU tests (checkpointing 7B-shaped layers, save_on_cpu and TRL's overlapped offload, the
     out-of-memory search, the allocator snapshot, expandable segments) and lessons 04-06 executed at GPU sizes; the
     snapshot's files;
  3. lesson 07: torch._scaled_mm against bf16 (tests/gpu/test_fp8_gpu.py, with Transformer Engine's DelayedScaling
     where it imports), torchao.float8 linear layers against bf16, lesson 07 at GPU sizes;
  4. lesson 08: the 7B LoRA step's peak with and without checkpointing, eager and SDPA, against
     memlab.estimate.simulate_7b_lora_step, step times, QLoRA's 7B peak (tests/gpu/test_capstone_gpu.py) and
     lesson 08 at GPU sizes (its short 7B IMDB fine-tune);
  5. grading on the GPU machine: scripts/grade.py on a solved and a blank submission of each lesson (--lessons), in
     the bubblewrap sandbox where it works there, else with --no-isolation (recorded); every GPU-only check of the
     solved submission must earn its points.

Every measurement is appended at once to $OUT/records-partN.jsonl (OUT from the environment, else ./out-gpu): one
JSON object per line with name, part, status ("measured", "skipped: <reason>", "failed: <error>"), values, units,
config and command, so a call killed at its time limit keeps what it measured. The GPU tests run through pytest with
this module as a plugin (`-p gpu_evidence`): what each test puts in its `gpu_results` becomes records as the test
ends, and the test itself a `gpu_tests/<file>::<test>` record. Notebooks run through the runner of
scripts/execute_solutions.py (in tests/gpu/test_solutions_on_gpu.py), simulations through memlab.estimate, grading
through scripts/grade.py. A part stops starting work when its budget (--budget) is spent and records what it did
not start as skipped, with the reason.

`--merge` writes one results/<gpu-name>.json per GPU (the names tests/gpu/conftest.py writes, plus `_device` and
`_parts`), merging with what the file already holds (a measured record is never replaced by a skipped one), and the
plots the lessons cite, results/<gpu-name>-*.png, from measured records only. It refuses rehearsal records in
results/.

Transformer Engine is not on the GPU machine's image and too large for one command: `--plan` lists first the calls
that bring its pieces (coursetools/gpu/make_te_wheelhouse.py, coursetools/gpu/gpu_te.sh); coursetools/gpu/gpu_evidence_call.sh installs it
before part 3 runs.
"""

from __future__ import annotations

import argparse
import ast
import csv
import datetime
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
RESULTS = ROOT / "results"
SOLUTIONS = ROOT / "solutions"
FIXTURE_SOLUTIONS = ROOT / "tests" / "fixtures" / "minicourse" / "solutions"
GPU_TESTS = "tests/gpu"

DEFAULT_BUDGET = 480.0  # seconds a part may start work in: one GPU command is 600 s at most
MIN_LEFT = 20.0  # a step or test is not started with less left than this
#: grade.py --memory-limit on the GPU machine (128 GiB there). grade.py's default, 8 GiB, is sized for CPU graders;
#: a CUDA process also maps host memory (the driver's, pinned buffers such as lesson 04's save_on_cpu) that prlimit's
#: data limit counts, so part 5 grades with more, as a precaution (not measured yet), and records it
GRADE_MEMORY_GB = 32.0
GRADE_SEED = 20261124
RECORDS = "records-part{part}.jsonl"
CARRY = [".whl"]
DEVICE_TIMEOUT_S = 600
PART_TITLES = {
    1: "environment, tracker vs allocator, lessons 01-03 at GPU sizes",
    2: "lessons 04-06: GPU tests, allocator snapshot, notebooks at GPU sizes",
    3: "lesson 07: _scaled_mm and torchao FP8 vs bf16, Transformer Engine, notebook at GPU sizes",
    4: "lesson 08: 7B LoRA step vs simulation, QLoRA, step times, notebook (7B IMDB fine-tune)",
    5: "grading on the GPU machine: solved and blank submissions",
    6: "the class benchmark on the machine's cores, CUDA visible and hidden",
}
#: the notebook test, by lesson
NOTEBOOK_TEST = (
    f"{GPU_TESTS}/test_solutions_on_gpu.py::test_solution_runs_on_the_gpu_and_every_gpu_check_is_checked"
)
#: gpu_results keys that hold one entry per lesson (recorded and merged one lesson at a time)
NESTED = ("solutions_on_gpu",)


def lesson_slugs(solutions: Path = SOLUTIONS) -> list[str]:
    return sorted(p.parent.name for p in solutions.glob("*/*.ipynb"))


def _lessons(prefixes: tuple[str, ...]) -> list[str]:
    return [s for s in lesson_slugs() if s.startswith(prefixes)]


def tests_of_part(part: int) -> list[str]:
    """The GPU tests of a part, in the order they run (most valuable first)."""
    notebooks = {
        1: ("01", "02", "03"),
        2: ("04", "05", "06"),
        3: ("07",),
        4: ("08",),
    }.get(part, ())
    books = [f"{NOTEBOOK_TEST}[{slug}]" for slug in _lessons(notebooks)]
    capstone = f"{GPU_TESTS}/test_capstone_gpu.py"
    return {
        1: [f"{GPU_TESTS}/test_gpu_memory.py", f"{GPU_TESTS}/test_amp_gpu.py", *books],
        2: [f"{GPU_TESTS}/test_checkpointing_gpu.py", f"{GPU_TESTS}/test_profiling_gpu.py", *books],
        3: [f"{GPU_TESTS}/test_fp8_gpu.py", *books],
        4: [
            f"{capstone}::test_exercise_8_5_passes_its_gpu_stage",
            f"{capstone}::test_7b_lora_step_against_the_simulation[eager]",
            f"{capstone}::test_7b_lora_step_against_the_simulation[sdpa]",
            f"{capstone}::test_qlora_7b_peak",
            *books,  # the notebook's 7B IMDB fine-tune takes longest: what the budget leaves
        ],
    }.get(part, [])


# ---- records -------------------------------------------------------------------------------------------------------


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def units_of(values) -> dict[str, str]:
    """The unit of each number in `values`, read off its key (`..._mib`: MiB, `..._ms`: ms, ...)."""
    suffixes = {
        "_mib": "MiB",
        "_gib": "GiB",
        "_ms": "ms",
        "_s": "s",
        "seconds": "s",
        "_tflops": "TFLOP/s",
        "_bytes": "bytes",
        "error": "relative (measured / simulated - 1)",
        "_gb": "GiB",
    }
    found: dict[str, str] = {}

    def walk(obj, path):
        if isinstance(obj, dict):
            for key, value in obj.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
            leaf = path.rsplit(".", 1)[-1]
            for suffix, unit in suffixes.items():
                if leaf.endswith(suffix):
                    found[re.sub(r"\.\d+(?=\.|$)", ".N", path)] = unit
                    break

    walk(values, "")
    return found


#: set by a call that runs several parts at once on one GPU (e.g. "parts 1, 2 and 5 at once"): every record then
#: says so, since memory peaks are per process but times, and free memory, are shared with the other parts
CONCURRENT_ENV = "GPU_EVIDENCE_CONCURRENT"


def concurrency() -> dict[str, str]:
    shared = os.environ.get(CONCURRENT_ENV, "").strip()
    return {"concurrent_with": shared} if shared else {}


class Recorder:
    """Appends one JSON line per record to `path`, flushed and synced at once."""

    def __init__(self, path: Path, part: int, device: str, rehearsal: bool):
        self.path, self.part, self.device, self.rehearsal = Path(path), part, device, rehearsal
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.counts = {"measured": 0, "skipped": 0, "failed": 0}

    def add(self, name, status, values=None, units=None, config=None, command=None, seconds=None) -> dict:
        if not (status == "measured" or re.match(r"(skipped|failed): \S", status)):
            raise ValueError(
                f"status must be measured, 'skipped: <reason>' or 'failed: <error>'; got {status!r}"
            )
        record = {
            "name": name,
            "part": self.part,
            "status": status,
            "values": values if values is not None else {},
            "units": units if units is not None else units_of(values or {}),
            "config": {**(config or {}), **concurrency()},
            "command": command or "",
            "seconds": None if seconds is None else round(seconds, 3),
            "device": self.device,
            "rehearsal": self.rehearsal,
            "time": now_iso(),
        }
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.counts[status.split(":")[0]] += 1
        print(f"[part {self.part}] {name}: {status}", flush=True)
        return record

    def measured(self, name, values, **kw):
        return self.add(name, "measured", values, **kw)

    def skipped(self, name, reason, **kw):
        return self.add(name, f"skipped: {reason}", **kw)

    def failed(self, name, error, **kw):
        return self.add(name, f"failed: {error}", **kw)


def read_records(paths) -> list[dict]:
    records = []
    for path in paths:
        if not Path(path).exists():  # a part that recorded nothing yet
            continue
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill: everything before it counts
                    print(f"{path}:{n}: not JSON (cut off?), ignored", file=sys.stderr)
                    continue
                record["_from"] = str(path)
                records.append(record)
    return records


# ---- the context of a part -------------------------------------------------------------------------------------------


class Budget:
    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.monotonic()

    def used(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return float("inf") if self.seconds <= 0 else self.seconds - self.used()

    def deadline(self) -> float:
        """Wall-clock time (epoch seconds) at which the budget ends; inf without one."""
        return time.time() + self.left()

    def why_not(self, need: float = MIN_LEFT) -> str | None:
        if self.left() >= need:
            return None
        return f"budget: {self.used():.0f} of {self.seconds:.0f} s used, {need:.0f} s needed to start"


class Context:
    def __init__(self, part, out, budget, rehearsal, cuda, recorder, lessons=None):
        self.part, self.out, self.budget, self.rehearsal = part, Path(out), budget, rehearsal
        self.cuda, self.rec, self.lessons = cuda, recorder, lessons


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def slug_of(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()  # as tests/gpu/conftest.py names its file


def child_env(**extra) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("MPLBACKEND", "Agg")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_bounded(command: list[str], ctx: Context, env=None, cwd=ROOT, grace: float = 15.0):
    """Run `command` (a new process group) until it ends or the budget does (plus `grace`); (returncode or None if
    stopped, combined output)."""
    timeout = None if ctx.budget.left() == float("inf") else max(ctx.budget.left() + grace, 1.0)
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env or child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []

    def pump():  # the output as it comes: a call killed at its limit still shows how far it got
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this call started, nothing else
        proc.wait()
        rc = None
    reader.join(10)
    return rc, "".join(lines)


def record_name_of_test(nodeid: str) -> str:
    """`gpu_tests/test_x.py::test_y[p]` for the node id `tests/gpu/test_x.py::test_y[p]` (one '/': one level in
    results/<gpu-name>.json)."""
    path, _, rest = nodeid.partition("::")
    return f"gpu_tests/{Path(path).name}::{rest.replace('/', '_')}"


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ---- steps shared by the parts ---------------------------------------------------------------------------------------


def step_pytest(ctx: Context, name: str, selection: list[str]) -> None:
    """Run GPU tests through pytest with this module as a plugin; the tests it never started are recorded skipped."""
    if not selection:
        return
    collected = (
        Path(tempfile.mkdtemp(prefix="gpu-evidence-")) / "collected.txt"
    )  # not in OUT: 8 files come back
    env = child_env(
        GPU_EVIDENCE_RECORDS=ctx.rec.path,
        GPU_EVIDENCE_PART=ctx.part,
        GPU_EVIDENCE_DEVICE=ctx.rec.device,
        GPU_EVIDENCE_REHEARSAL=int(ctx.rehearsal),
        GPU_EVIDENCE_DEADLINE=ctx.budget.deadline(),
        GPU_EVIDENCE_COLLECTED=collected,
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "coursetools.gpu.gpu_evidence",
        "-p",
        "no:cacheprovider",
        "-q",
        *selection,
    ]
    seen_before = {r["name"] for r in read_records([ctx.rec.path])}
    start = time.monotonic()
    rc, out = run_bounded(command, ctx, env=env)
    ctx.rec.counts = recount(ctx.rec.path)
    nodeids = collected.read_text().split("\n") if collected.exists() else []
    done = {r["name"] for r in read_records([ctx.rec.path])} - seen_before
    for nodeid in filter(None, nodeids):
        if record_name_of_test(nodeid) not in done:
            why = (
                "budget: the part's time ran out before this test ended"
                if rc is None
                else "pytest did not run it"
            )
            ctx.rec.skipped(record_name_of_test(nodeid), why, command=" ".join(command[1:]))
    if rc not in (0, 1, 5) or not nodeids:
        error = "stopped at the part's budget" if rc is None else f"pytest exited {rc}"
        ctx.rec.failed(
            name,
            f"{error}: {tail(out, 3)[-300:]}",
            values={"output_tail": tail(out, 60)},
            command=" ".join(command[1:]),
            seconds=time.monotonic() - start,
        )


def recount(path: Path) -> dict[str, int]:
    counts = {"measured": 0, "skipped": 0, "failed": 0}
    for record in read_records([path]):
        counts[record["status"].split(":")[0]] += 1
    return counts


def step_environment(ctx: Context) -> None:
    """The machine: device, driver, torch, CUDA, packages, pip check, the grading sandbox."""
    import platform

    import torch

    from grading import isolation
    from memlab import hardware

    values = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "packages": {
            name: hardware.package_version(name)
            for name in (
                "transformers",
                "peft",
                "accelerate",
                "bitsandbytes",
                "datasets",
                "torchao",
                "transformer_engine",
                "triton",
                "numpy",
                "nbclient",
                "ipykernel",
                "nbgrader",
                "nbval",
                "pytest",
            )
        },
        "bwrap": ensure_bwrap(),
        "grading_sandbox": isolation.unavailable() or "bubblewrap works here",
        "sandbox_sees_the_packages": outside_sandbox_view(isolation.python_folders()) or "yes",
        "prlimit": shutil.which("prlimit"),
    }
    try:
        with open("/proc/meminfo") as fh:
            values["memory_gib"] = int(fh.readline().split()[1]) / 2**20
    except OSError:
        pass
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        values["gpu"] = {
            "name": props.name,
            "capability": list(torch.cuda.get_device_capability(0)),
            "total_gib": props.total_memory / 2**30,
            "multiprocessors": props.multi_processor_count,
        }
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        values["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    values["pip_check"] = tail(check.stdout + check.stderr, 40)
    ctx.rec.measured("environment", values, units={"memory_gib": "GiB", "gpu.total_gib": "GiB"})


def step_rehearse_notebook(ctx: Context) -> None:
    """Rehearsal only: a notebook through the runner the GPU notebook test uses (nbclient + ipykernel here)."""
    import nbformat

    from coursetools.execute_solutions import execute_notebook
    from coursetools.gpu.probes import SUMMARY_MARK, SUMMARY_PROBE
    from coursetools.gpu.probes import cell_text as _text

    with tempfile.TemporaryDirectory(prefix="gpu-evidence-nb-") as tmp:
        folder = Path(tmp) / "00-fixture"
        shutil.copytree(FIXTURE_SOLUTIONS / "00-fixture", folder)
        nb = nbformat.read(folder / "00-fixture.ipynb", as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(SUMMARY_PROBE))
        seconds = execute_notebook(nb, folder, 120)
    summary = json.loads(_text(nb.cells.pop()).split(SUMMARY_MARK, 1)[1])
    lines = [line for cell in nb.cells if cell.cell_type == "code" for line in _text(cell).splitlines()]
    ctx.rec.measured(
        "rehearsal_notebook_runner",
        {
            "seconds": round(seconds, 1),
            "checks_passed": [line for line in lines if line.startswith("✓ ")],
            "not_checked_here": [line for line in lines if "NOT CHECKED HERE" in line],
            "summary": summary,
        },
        config={
            "notebook": "tests/fixtures/minicourse/solutions/00-fixture (the lessons run in part 1-4's pytest)"
        },
        command="execute_solutions.execute_notebook",
    )


def step_snapshot_files(ctx: Context, since: float) -> None:
    """The allocator snapshot test's files (results/snapshots/), copied flat into OUT for the merge."""
    folder = RESULTS / "snapshots"
    fresh = [p for p in sorted(folder.glob("lesson06_llama_step*")) if p.stat().st_mtime >= since]
    if not fresh:
        reason = (
            "no CUDA (the snapshot test did not run)" if not ctx.cuda else "the snapshot test wrote no file"
        )
        ctx.rec.skipped("profiling_snapshot_files", reason)
        return
    copied = {}
    for path in fresh:
        target = ctx.out / path.name
        if path.suffix == ".pickle":
            target = ctx.out / (path.name + ".gz")
            with open(path, "rb") as src, gzip.open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copy(path, target)
        if target.stat().st_size > 15 * 2**20:  # the device returns files up to 16 MiB
            target.unlink()
            copied[path.name] = "left out: over 15 MiB"
        else:
            copied[path.name] = target.name
    ctx.rec.measured("profiling_snapshot_files", {"files": copied})


#: set by coursetools/gpu/gpu_evidence_call.sh: the log of `bash coursetools/gpu/gpu_te.sh install`
TE_LOG_ENV = "GPU_EVIDENCE_TE_LOG"


def step_transformer_engine(ctx: Context) -> None:
    """TE's version and its default recipe on this GPU, where it imports; else what was tried (gpu_te.sh's log)."""
    log = Path(os.environ.get(TE_LOG_ENV, "/nonexistent"))
    tried = tail(log.read_text(), 25) if log.is_file() else None
    try:
        import torch
        import transformer_engine
        import transformer_engine.pytorch  # noqa: F401
    except Exception as error:  # not installed, or installed without its CUDA library
        why = f"not importable here: {type(error).__name__}: {str(error)[:200]}"
        if tried is None:
            ctx.rec.skipped(
                "transformer_engine",
                f"{why}; no install was tried (docs/gpu.md, Transformer Engine)",
            )
        else:
            ctx.rec.failed("transformer_engine", why, values={"install_log": tried})
        return
    values = {"version": transformer_engine.__version__, "install_log": tried}
    if ctx.cuda:
        from transformer_engine.pytorch.fp8 import get_default_fp8_recipe

        recipe = get_default_fp8_recipe()
        values["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        values["default_recipe"] = type(recipe).__name__
        values["default_recipe_format"] = getattr(getattr(recipe, "fp8_format", None), "name", None)
    ctx.rec.measured("transformer_engine", values)


TORCHAO_SIZES = (1024, 2048, 4096, 8192, 16384)


def step_torchao(ctx: Context) -> None:
    """torchao.float8 (tensorwise dynamic scaling) against bf16: one square Linear, forward + backward, eager and
    torch.compile'd, for each size; a record per size as it is measured."""
    if not ctx.cuda:
        ctx.rec.skipped("torchao_float8_linear/all", "no CUDA")
        return
    import torch

    try:
        import torchao
        from torchao.float8 import convert_to_float8_training
    except Exception as error:
        ctx.rec.skipped(
            "torchao_float8_linear/all", f"torchao not importable: {type(error).__name__}: {error}"
        )
        return
    if torch.cuda.get_device_capability() < (8, 9):
        ctx.rec.skipped("torchao_float8_linear/all", "needs compute capability >= 8.9")
        return
    from coursetools.gpu.probes import cuda_ms as _ms

    for mode in ("eager", "compiled"):
        for n in TORCHAO_SIZES:
            name = f"torchao_float8_linear/{mode}-{n}"
            why = ctx.budget.why_not(MIN_LEFT if mode == "eager" else 60)
            if why:
                ctx.rec.skipped(name, why)
                continue
            try:
                start = time.monotonic()
                values = _torchao_linear_ms(n, mode, convert_to_float8_training, _ms)
                ctx.rec.measured(
                    name,
                    values,
                    config={
                        "layer": f"Linear({n}, {n}, bias=False), bf16, input {n} x {n}",
                        "recipe": "convert_to_float8_training defaults (tensorwise)",
                        "mode": mode,
                        "torchao": torchao.__version__,
                    },
                    seconds=time.monotonic() - start,
                )
            except Exception as error:
                ctx.rec.failed(name, f"{type(error).__name__}: {str(error)[:300]}")
            finally:
                torch.cuda.empty_cache()


def _torchao_linear_ms(n: int, mode: str, convert, ms) -> dict:
    """One forward + backward of a bf16 Linear(n, n) on n x n inputs, and of its torchao float8 conversion."""
    import copy

    import torch

    base = torch.nn.Sequential(torch.nn.Linear(n, n, bias=False)).cuda().to(torch.bfloat16)
    fp8 = convert(copy.deepcopy(base))
    if mode == "compiled":
        base, fp8 = torch.compile(base), torch.compile(fp8)
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step(model):
        model(x).float().square().mean().backward()

    t_bf16 = ms(lambda: step(base))
    t_fp8 = ms(lambda: step(fp8))
    flops = 3 * 2 * n**3  # the forward GEMM and the two of backward
    return {
        "n": n,
        "bf16_ms": t_bf16,
        "fp8_ms": t_fp8,
        "bf16_tflops": flops / t_bf16 / 1e9,
        "fp8_tflops": flops / t_fp8 / 1e9,
        "speedup": t_bf16 / t_fp8,
    }


def step_simulations(ctx: Context) -> None:
    """memlab.estimate.simulate_7b_lora_step for the configurations part 4 measures (a simulation, no GPU)."""
    from memlab import estimate

    seq = 128 if ctx.rehearsal else 1024
    for attention in ("eager", "sdpa"):
        for checkpointing in (True, False):
            name = f"simulated_7b_lora/seq{seq}-{attention}-ckpt{int(checkpointing)}"
            why = ctx.budget.why_not()
            if why:
                ctx.rec.skipped(name, why)
                continue
            start = time.monotonic()
            peak = estimate.simulate_7b_lora_step(seq, 1, checkpointing, attn_implementation=attention)
            ctx.rec.measured(
                name,
                {
                    "simulated_peak_gib": peak.peak_bytes / 2**30,
                    "peak_op": peak.peak_op,
                    "per_layer_bytes": peak.per_layer_bytes,
                    "by_category_gib": {k: v / 2**30 for k, v in peak.by_category},
                    "kind": "simulation (FakeTensorMode, no memory allocated)",
                },
                config={"seq": seq, "micro_batch": 1, "checkpointing": checkpointing, "attention": attention},
                command=f"memlab.estimate.simulate_7b_lora_step({seq}, 1, {checkpointing}, "
                f"attn_implementation={attention!r})",
                seconds=time.monotonic() - start,
            )


# ---- part 5: grading ------------------------------------------------------------------------------------------------


def ensure_bwrap() -> str:
    """bwrap on PATH: already there, or unpacked from the carried Debian package (.whl/bubblewrap_*.deb) into a
    folder of /tmp (never over /). Says what it did."""
    if shutil.which("bwrap"):
        return f"on PATH: {shutil.which('bwrap')}"
    debs = sorted((ROOT / ".whl").glob("bubblewrap_*.deb"))
    if not debs:
        return "not on PATH, and no .whl/bubblewrap_*.deb carried"
    if not shutil.which("dpkg"):
        return f"not on PATH; {debs[0].name} carried, but no dpkg to unpack it"
    target = Path(tempfile.gettempdir()) / "gpu-evidence-bwrap"
    proc = subprocess.run(["dpkg", "-x", str(debs[0]), str(target)], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"dpkg -x {debs[0].name} failed: {proc.stderr.strip()[:200]}"
    os.environ["PATH"] = f"{target / 'usr' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return f"unpacked from {debs[0].name} into {target}"


def outside_sandbox_view(folders: list[str]) -> str | None:
    """Why a sandboxed kernel would not find the notebook stack (None: it would): the sandbox shows the Python
    installation (`folders`), not a `pip install --target` folder on PYTHONPATH."""
    import importlib.util

    for name in ("ipykernel", "nbformat", "bitsandbytes"):
        spec = importlib.util.find_spec(name)
        where = os.path.realpath(spec.origin) if spec and spec.origin else None
        if where and not any(where.startswith(folder + os.sep) for folder in folders):
            return f"{name} is installed at {where}, outside the Python installation the sandbox shows"
    return None


def _calls(func: ast.expr, name: str) -> bool:
    """`func` is `name` or `<module>.name` (the lessons call the kit as `kit.needs_hardware`)."""
    return getattr(func, "id", None) == name or (isinstance(func, ast.Attribute) and func.attr == name)


def check_requirements(module_file: Path) -> dict[str, list[str]]:
    """{check name: what its `needs_hardware(...)` asks} of every @check in a module (read, not imported)."""
    found: dict[str, list[str]] = {}
    tree = ast.parse(module_file.read_text())
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        names = [
            d.args[0].value
            for d in node.decorator_list
            if isinstance(d, ast.Call)
            and _calls(d.func, "check")
            and d.args
            and isinstance(d.args[0], ast.Constant)
        ]
        if not names:
            continue
        needs = []
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and _calls(call.func, "needs_hardware"):
                needs += [kw.arg for kw in call.keywords if kw.arg != "passed"]
        found[names[0]] = needs
    return found


def gpu_checks(solutions: Path, slug: str) -> dict[str, list[str]]:
    """{grade id of a check cell: its hardware needs} for the checks of a lesson that need a GPU."""
    modules = [ROOT / "autograders" / f"lesson{slug[:2]}.py", *sorted((solutions / slug).glob("*.py"))]
    found = {}
    for module in modules:
        if module.exists():
            for name, needs in check_requirements(module).items():
                if {"cuda", "min_capability", "min_gpu_gb"} & set(needs):
                    found[f"{name}_check"] = needs
    return found


def build_submissions(solutions: Path, slugs: list[str], folder: Path) -> None:
    """`solved` hands in the solution notebook (and lesson 08's run), `blank` the learner version nbgrader makes."""
    from coursetools import build_lessons
    from coursetools.execute_solutions import hand_in

    released = build_lessons.render(solutions)
    for slug in slugs:
        notebook = f"{slug}.ipynb"
        (folder / "solved" / slug).mkdir(parents=True)
        shutil.copy(solutions / slug / notebook, folder / "solved" / slug / notebook)
        hand_in(slug, folder / "solved" / slug)  # lesson 08: the run the solution trained, handed in with it
        (folder / "blank" / slug).mkdir(parents=True)
        (folder / "blank" / slug / notebook).write_bytes(released[f"{slug}/{notebook}"])


#: grade.py's --jobs for part 5 on a GPU machine: every lesson's solved and blank notebooks in one run, as a class is
#: graded (one job per two of its 16 cores; the parts beside it take the rest)
GRADE_JOBS = 8


def step_grading(ctx: Context) -> None:
    """Every lesson's solved and blank submission, graded by one grade.py run with --jobs, as an instructor grades a
    class on this machine: per lesson, its rows and whether the GPU checks earned their points; then the proof the
    GPU plan asks for, `grading_proof`: every solved notebook earns every autograded point unflagged, every blank 0."""
    from grading import isolation
    from grading.course import graded_cells

    solutions = FIXTURE_SOLUTIONS if ctx.rehearsal else SOLUTIONS
    slugs = lesson_slugs(solutions) if ctx.rehearsal else (ctx.lessons or lesson_slugs())
    bwrap = ensure_bwrap()
    problem = isolation.unavailable() or outside_sandbox_view(isolation.python_folders())
    isolated = problem is None
    ctx.rec.measured(
        "grading_sandbox",
        {
            "isolated": isolated,
            "bwrap": bwrap,
            "why_not": problem,
            "then": "graded in the bubblewrap sandbox"
            if isolated
            else "graded with --no-isolation (not for credit)",
        },
    )
    jobs = 2 if ctx.rehearsal else min(GRADE_JOBS, 2 * len(slugs))
    with tempfile.TemporaryDirectory(prefix="gpu-evidence-grading-") as tmp:
        subs = Path(tmp) / "submissions"
        build_submissions(solutions, slugs, subs)
        csv_path = Path(tmp) / "grades.csv"
        command = [sys.executable, str(SCRIPTS / "grade.py"), str(subs), "--out", str(csv_path)]
        command += ["--lessons", *slugs, "--seed", str(GRADE_SEED), "--jobs", str(jobs)]
        command += ["--memory-limit", f"{GRADE_MEMORY_GB:g}", "--solutions", str(solutions)]
        if ctx.rehearsal:
            command += ["--timeout", "60"]
        if not isolated:
            command.append("--no-isolation")
        shown = " ".join(["scripts/grade.py", "SUBMISSIONS", *command[3:]]).replace(str(ROOT) + "/", "")
        start = time.monotonic()
        rc, out = run_bounded(command, ctx)  # rows are written as they are graded: a stopped run keeps them
        seconds = time.monotonic() - start
        rows: dict[tuple[str, str], dict] = {}
        if csv_path.exists():
            with open(csv_path, newline="", encoding="utf-8") as fh:
                rows = {(row["lesson"], row["student"]): row for row in csv.DictReader(fh)}
    stopped = "stopped at the part's budget" if rc is None else (f"grade.py exited {rc}" if rc else "")
    config = {"memory_limit_gb": GRADE_MEMORY_GB, "jobs": jobs, "solutions": str(solutions.relative_to(ROOT))}
    proof = {}
    for slug in slugs:
        name = f"grading/{slug}"
        solved, blank = rows.get((slug, "solved")), rows.get((slug, "blank"))
        if solved is None or blank is None:
            graded = sorted(student for lesson, student in rows if lesson == slug)
            ctx.rec.failed(
                name,
                f"{stopped or 'grade.py ended'} before it graded both; rows for {graded or 'nobody'}",
                values={"output_tail": tail(out, 40)},
                config=config,
                command=shown,
                seconds=seconds,
            )
            ctx.rec.skipped(f"grading_gpu_checks/{slug}", "the grading did not finish")
            proof[slug] = {"graded": False}
            continue
        points = {gid: pts for gid, pts, _ in graded_cells(solutions / slug)}
        ctx.rec.measured(
            name,
            {
                "solved": solved,
                "blank": blank,
                "isolated": isolated,
                "seed": GRADE_SEED,
                "cell_points": points,
            },
            config=config,
            command=shown,
            seconds=seconds,
        )
        proof[slug] = {
            "graded": True,
            "solved_full_marks": _full_marks(solved),
            "solved_flags": solved.get("flags", ""),
            "blank_total": float(blank["total"]),
            "blank_flags": blank.get("flags", ""),
            "lost": solved.get("notes", "") if not _full_marks(solved) else "",
        }
        wanted = gpu_checks(solutions, slug)
        earned = {gid: {"points": float(solved.get(gid) or 0), "of": points.get(gid)} for gid in wanted}
        if not ctx.cuda:
            ctx.rec.skipped(
                f"grading_gpu_checks/{slug}",
                "no CUDA: the GPU checks cannot earn points here",
                values={"gpu_checks": earned, "needs": wanted},
            )
            continue
        ctx.rec.measured(
            f"grading_gpu_checks/{slug}",
            {
                "gpu_checks": earned,
                "needs": wanted,
                "all_earned": all(v["points"] == v["of"] for v in earned.values()),
                "solved_full_marks": _full_marks(solved),
                "notes": solved.get("notes", ""),
            },
        )
    holds = all(
        p["graded"]
        and p["solved_full_marks"]
        and not p["solved_flags"]
        and p["blank_total"] == 0
        and not p["blank_flags"]
        for p in proof.values()
    )
    values = {"holds": holds, "lessons": proof, "cuda": ctx.cuda, "isolated": isolated, "jobs": jobs}
    if holds or rc == 0:
        ctx.rec.measured("grading_proof", values, config=config, command=shown, seconds=seconds)
    else:
        ctx.rec.failed("grading_proof", stopped, values=values, config=config, command=shown, seconds=seconds)


def _full_marks(row: dict) -> bool:
    """Every autograded point of a CSV row (the written answer, to grade by hand, aside)."""
    return float(row["total"]) == float(row["max"]) - float(row["needs_manual"] or 0)


# ---- part 6: the class benchmark ------------------------------------------------------------------------------------

#: what part 6 grades on a GPU machine: 3 learners (solved, blank, first exercise unwritten) x every lesson, with one
#: job per core, first with CUDA visible (a GPU grader), then hidden (the same machine as a grader without a GPU)
BENCH_LEARNERS = 3


def step_bench(ctx: Context) -> None:
    """scripts/bench_grading.py on this machine's cores, within the part's budget; each run a record (a run stopped at
    the budget is recorded with what it graded, `complete: false`)."""
    from coursetools import bench_grading

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # grade.py splits the cores between its jobs itself
        os.environ.pop(name, None)
    argv = ["--learners", str(BENCH_LEARNERS), "--jobs", str(cpus), "--cuda", "visible", "hidden"]
    if ctx.rehearsal:  # the plumbing only: two notebooks per run
        argv = [
            "--learners",
            "2",
            "--jobs",
            "2",
            "--lessons",
            "02-numeric-formats",
            "--cuda",
            "visible",
            "hidden",
        ]
    if ctx.budget.left() != float("inf"):
        argv += ["--deadline", f"{max(ctx.budget.left() - MIN_LEFT, 1):.0f}"]
    out = ctx.out / "grading_benchmark.json"
    argv += ["--out", str(out)]
    start = time.monotonic()
    code = bench_grading.main(argv)
    seconds = time.monotonic() - start
    result = json.loads(out.read_text())
    command = "python scripts/bench_grading.py " + " ".join(argv[:-2])
    for run in result["runs"]:
        name = f"grading_benchmark/cuda-{run['cuda']}-jobs{run['jobs']}"
        values = {
            **run,
            "machine": result["machine"],
            "class_estimate": result["class_estimate"].get(run["cuda"]),
        }
        if run.get("not_started"):
            ctx.rec.skipped(name, f"not started: {run['not_started']}")
        elif str(run.get("stopped", "")).startswith("grade.py exited"):
            ctx.rec.failed(name, run["stopped"][:300], values=values, command=command, seconds=seconds)
        else:  # complete, or stopped at the deadline with what it graded (`complete: false`)
            ctx.rec.measured(name, values, command=command, seconds=seconds)
    if code != 0:
        print(f"[part 6] bench_grading.py exited {code}", flush=True)


# ---- the parts --------------------------------------------------------------------------------------------------------


def run_part(part: int, out: Path, budget_s: float, rehearsal: bool, lessons=None, tests=None) -> Recorder:
    import torch

    cuda = torch.cuda.is_available()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(out / RECORDS.format(part=part), part, device_name(), rehearsal)
    ctx = Context(part, out, Budget(budget_s), rehearsal, cuda, recorder, lessons)
    print(f"== part {part}: {PART_TITLES[part]} (budget {budget_s:g} s, records {recorder.path})", flush=True)
    started = time.time()
    steps = {
        1: [
            ("environment", step_environment),
            ("gpu_tests", lambda c: step_pytest(c, "gpu_tests", tests_of_part(1))),
        ],
        2: [
            ("gpu_tests", lambda c: step_pytest(c, "gpu_tests", tests_of_part(2))),
            ("snapshot_files", lambda c: step_snapshot_files(c, started)),
        ],
        3: [
            ("transformer_engine", step_transformer_engine),
            ("torchao_float8_linear", step_torchao),
            ("gpu_tests", lambda c: step_pytest(c, "gpu_tests", tests_of_part(3))),
        ],
        4: [
            ("simulated_7b_lora", step_simulations),
            ("gpu_tests", lambda c: step_pytest(c, "gpu_tests", tests_of_part(4))),
        ],
        5: [("grading", step_grading)],
        6: [("grading_benchmark", step_bench)],
    }[part]
    if tests:  # a part's GPU tests again, only these (e.g. after a fix), without the part's other steps
        steps = [("gpu_tests", lambda c: step_pytest(c, "gpu_tests", list(tests)))]
    if rehearsal and part == 1:
        steps.insert(1, ("rehearsal_notebook_runner", step_rehearse_notebook))
    for name, step in steps:
        why = ctx.budget.why_not()
        if why:
            recorder.skipped(name, why)
            continue
        try:
            step(ctx)
        except Exception as error:
            recorder.failed(
                name,
                f"{type(error).__name__}: {str(error)[:300]}",
                values={"traceback": traceback.format_exc()[-4000:]},
            )
    print(f"== part {part} done in {ctx.budget.used():.0f} s: {recorder.counts}", flush=True)
    return recorder


# ---- the pytest plugin (active when GPU_EVIDENCE_RECORDS is set) -----------------------------------------------------

_SEEN: dict[str, str] = {}


def _plugin_recorder() -> Recorder | None:
    path = os.environ.get("GPU_EVIDENCE_RECORDS")
    if not path:
        return None
    return Recorder(
        Path(path),
        int(os.environ["GPU_EVIDENCE_PART"]),
        os.environ.get("GPU_EVIDENCE_DEVICE", "?"),
        os.environ.get("GPU_EVIDENCE_REHEARSAL") == "1",
    )


def pytest_collection_finish(session):
    path = os.environ.get("GPU_EVIDENCE_COLLECTED")
    if path:
        Path(path).write_text("\n".join(item.nodeid for item in session.items) + "\n")


def pytest_runtest_setup(item):
    deadline = float(os.environ.get("GPU_EVIDENCE_DEADLINE", "inf"))
    if os.environ.get("GPU_EVIDENCE_RECORDS") and deadline - time.time() < MIN_LEFT:
        import pytest

        pytest.skip(f"budget: less than {MIN_LEFT:.0f} s of the part's budget left")


def _pytest_hookwrapper(fn):
    import pytest

    return pytest.hookimpl(hookwrapper=True)(fn)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    reason = reason.removeprefix("Skipped: ").strip() or "no reason given"
    torch = sys.modules.get("torch")  # the GPU tests have imported it; a process without it measured no GPU
    if (torch is None or not torch.cuda.is_available()) and re.search(r"CUDA|GPU|capability", reason):
        reason = f"no CUDA ({reason})"
    return reason


try:  # a hook wrapper needs pytest's decorator; without pytest (the GPU machine always has it) there is no plugin

    @_pytest_hookwrapper
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        rec = _plugin_recorder()
        if rec is None or not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        command = f"pytest {item.nodeid}"
        results = getattr(item, "funcargs", {}).get("gpu_results")
        for key, value in (results or {}).items():
            entries = value.items() if key in NESTED and isinstance(value, dict) else [(None, value)]
            for sub, entry in entries:
                name = key if sub is None else f"{key}/{sub}"
                text = json.dumps(entry, sort_keys=True, default=str)
                if _SEEN.get(name) != text:
                    _SEEN[name] = text
                    rec.measured(name, entry, config={"test": item.nodeid}, command=command)
        values = {"outcome": report.outcome, "duration_s": round(report.duration, 3)}
        if report.skipped:
            rec.skipped(
                record_name_of_test(item.nodeid), _skip_reason(report), values=values, command=command
            )
        elif report.failed:
            text = report.longreprtext
            errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
            message = (errors[0] if errors else tail(text, 1))[:300] or "no message"
            rec.failed(
                record_name_of_test(item.nodeid),
                message,
                values={**values, "error_tail": tail(text, 40)},
                command=command,
            )
        else:
            rec.measured(record_name_of_test(item.nodeid), values, command=command)

except ImportError:
    pass


# ---- merge ------------------------------------------------------------------------------------------------------------


def _better(new: dict, old: dict | None) -> bool:
    """Whether `new` replaces `old` for the same name: a measured record is never replaced by another status."""
    if old is None:
        return True
    if "status" not in old:  # an entry written by tests/gpu/conftest.py, or a folder of records (a/b names)
        folder = any(isinstance(v, dict) and "status" in v for v in old.values())
        return not folder  # a folder of records is never replaced by one record
    if old["status"] == "measured" and new["status"] != "measured":
        return False
    if new["status"] == "measured" and old["status"] != "measured":
        return True
    return new.get("time", "") >= old.get("time", "")


def _get(tree: dict, name: str):
    node = tree
    for key in name.split("/"):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _put(tree: dict, name: str, value) -> None:
    *parents, last = name.split("/")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def record_files(paths, unpacked: Path) -> list[Path]:
    """The record files among `paths`: a .jsonl as it is; a call's archive (evidence.tgz, snapshots.tgz) unpacked
    into `unpacked`, one folder per call, where its records find the files they name."""
    import tarfile

    files = []
    for path in map(Path, paths):
        if path.name.endswith((".tgz", ".tar.gz")):
            folder = unpacked / path.parent.name  # a call's files_at folder: its two archives unpack together
            folder.mkdir(parents=True, exist_ok=True)
            with tarfile.open(path) as archive:
                archive.extractall(folder, filter="data")
            files += [f for f in sorted(folder.rglob(RECORDS.format(part="*"))) if f not in files]
        else:
            files.append(path)
    return files


def merge(paths, results: Path = RESULTS) -> list[Path]:
    """results/<gpu-name>.json (one per GPU) and its plots from record files; the paths written."""
    records = read_records(paths)
    if not records:
        raise SystemExit("--merge: no records in " + ", ".join(map(str, paths)))
    results = Path(results)
    if results.resolve() == RESULTS.resolve() and any(r.get("rehearsal") for r in records):
        raise SystemExit("--merge: rehearsal records never go into results/; give --results DIR")
    results.mkdir(parents=True, exist_ok=True)
    written = []
    by_device: dict[str, list[dict]] = {}
    for record in records:
        by_device.setdefault(record["device"], []).append(record)
    for device, recs in by_device.items():
        slug = slug_of(device) + ("-rehearsal" if any(r.get("rehearsal") for r in recs) else "")
        path = results / f"{slug}.json"
        merged = json.loads(path.read_text()) if path.exists() else {}
        for record in sorted(recs, key=lambda r: r.get("time", "")):
            clean = {k: v for k, v in record.items() if not k.startswith("_")}
            if _better(clean, _get(merged, record["name"])):
                _put(merged, record["name"], clean)
            if record["name"] == "environment" and record["status"] == "measured":
                merged["_device"] = _device_summary(record)
        merged["_parts"] = _parts_summary(merged, recs, merged.get("_parts", {}))
        merged["_about"] = (
            "Written by coursetools/gpu/gpu_evidence.py --merge from the records of its parts (docs/gpu.md). "
            "Each entry: values, units, status (measured / skipped: reason / failed: error), config, command."
        )
        for record in recs:  # files the records name (the allocator snapshot), copied next to the results
            values = record.get("values")
            files = (
                values.get("files") if isinstance(values, dict) and record["status"] == "measured" else None
            )
            for source in files.values() if isinstance(files, dict) else []:
                found = Path(record["_from"]).parent / str(source)
                if found.is_file():
                    (results / "snapshots").mkdir(exist_ok=True)
                    shutil.copy(found, results / "snapshots" / found.name)
                    written.append(results / "snapshots" / found.name)
        path.write_text(json.dumps(merged, indent=1, sort_keys=True, default=str) + "\n")
        written.append(path)
        if device != "cpu":
            written += plots(merged, results, slug)
    for path in written:
        print(f"wrote {path}")
    return written


def _device_summary(env: dict) -> dict:
    v = env["values"]
    return {
        "name": env["device"],
        "capability": v.get("gpu", {}).get("capability"),
        "total_gib": v.get("gpu", {}).get("total_gib"),
        "nvidia_smi": v.get("nvidia_smi"),
        "torch": v.get("torch"),
        "cuda": v.get("cuda"),
        "python": v.get("python"),
        "packages": v.get("packages"),
        "measured": env.get("time"),
    }


def _parts_summary(merged: dict, new: list[dict], old: dict) -> dict:
    parts = {str(k): dict(v) for k, v in old.items()}
    statuses: dict[str, dict[str, int]] = {}

    def walk(node):
        if isinstance(node, dict) and "status" in node and "part" in node:
            counts = statuses.setdefault(str(node["part"]), {"measured": 0, "skipped": 0, "failed": 0})
            counts[node["status"].split(":")[0]] += 1
        elif isinstance(node, dict):
            for key, value in node.items():
                if not str(key).startswith("_"):
                    walk(value)

    walk(merged)
    for part, counts in statuses.items():
        entry = parts.setdefault(part, {})
        entry.update(title=PART_TITLES.get(int(part), ""), **counts)
        times = [r["time"] for r in new if str(r["part"]) == part]
        if times:
            entry["last_run"] = max(times)
    return dict(sorted(parts.items()))


# ---- plots ------------------------------------------------------------------------------------------------------------


def _measured(merged: dict, name: str):
    entry = _get(merged, name)
    if isinstance(entry, dict) and entry.get("status", "measured") == "measured":
        return entry.get("values", entry) if "status" in entry else entry
    return None


def _shared(merged: dict, *names: str) -> bool:
    """Whether any of these entries (or an entry of these folders) was measured while other parts shared the GPU."""
    for name in names:
        entry = _get(merged, name)
        entries = entry.values() if isinstance(entry, dict) and "status" not in entry else [entry]
        for one in entries:
            if isinstance(one, dict) and one.get("config", {}).get("concurrent_with"):
                return True
    return False


SHARED_NOTE = (
    "times taken while other measurements shared the GPU (config.concurrent_with): read them as rough"
)


def _note_shared(fig) -> None:
    fig.text(0.01, 0.005, SHARED_NOTE, fontsize=7, color="dimgray", ha="left", va="bottom")


def plots(merged: dict, results: Path, slug: str) -> list[Path]:
    """The figures the lessons cite, each only from measured values: FP8 vs bf16 GEMMs, the 7B LoRA peaks against
    the simulation, the checkpointing and AMP trade-offs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from memlab import plots as memplots

    written = []
    name = merged.get("_device", {}).get("name", slug)

    sweep = _measured(merged, "fp8_gemm_sweep")
    torchao = {
        key: entry["values"]
        for key, entry in (_get(merged, "torchao_float8_linear") or {}).items()
        if isinstance(entry, dict) and entry.get("status") == "measured"
    }
    if sweep or torchao:
        fig, ax = plt.subplots(figsize=(7, 4))
        if sweep:
            sizes = sorted(int(n) for n in sweep)
            for key, label in (
                ("bf16_tflops", "bf16 @"),
                ("fp8_gemm_tflops", "torch._scaled_mm (E4M3)"),
                ("fp8_with_quantize_tflops", "FP8 incl. quantize (lesson 07)"),
            ):
                ax.plot(sizes, [sweep[str(n)][key] for n in sizes], marker="o", label=label)
        for mode in ("eager", "compiled"):
            rows = sorted((v["n"], v["fp8_tflops"]) for k, v in torchao.items() if k.startswith(mode))
            if rows:
                ax.plot(
                    *zip(*rows, strict=True),
                    marker="s",
                    ls="--",
                    label=f"torchao.float8 Linear fwd+bwd ({mode})",
                )
        ax.set_xscale("log", base=2)
        ax.set(xlabel="n (square GEMM n x n x n)", ylabel="TFLOP/s", title=f"FP8 vs bf16 on {name}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        if _shared(merged, "fp8_gemm_sweep", "torchao_float8_linear"):
            _note_shared(fig)
        written.append(_save(fig, results / f"{slug}-fp8-gemm.png"))

    bars = {}
    for attention in ("eager", "sdpa"):
        row = _measured(merged, f"capstone_7b_lora_seq1024_mb1_{attention}") or {}
        for key, label in (("ckpt=True", "ckpt"), ("ckpt=False", "no ckpt")):
            if isinstance(row.get(key), dict) and "peak_gib" in row[key]:
                bars[f"{attention}, {label}"] = {
                    "measured": row[key]["peak_gib"],
                    "simulated": row[key]["simulated_gib"],
                }
    qlora = _measured(merged, "capstone_qlora_7b_seq1024_mb1")
    if qlora:
        bars["QLoRA NF4, ckpt"] = {"measured": qlora["peak_gib"]}
    if bars:
        fig, ax = plt.subplots(figsize=(7, 4))
        labels = list(bars)
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], [bars[k]["measured"] for k in labels], width=0.4, label="measured")
        ax.bar(
            [x + 0.2 for x in xs], [bars[k].get("simulated", 0) for k in labels], width=0.4, label="simulated"
        )
        ax.set_xticks(list(xs), labels, rotation=15)
        total = merged.get("_device", {}).get("total_gib")
        if total:
            ax.axhline(total, color="black", ls=":", lw=1, label=f"GPU memory ({total:.0f} GiB)")
        ax.set(ylabel="peak memory (GiB)", title=f"Llama-2-7B LoRA step, seq 1024, micro-batch 1, on {name}")
        ax.legend(fontsize=8)
        written.append(_save(fig, results / f"{slug}-lora-7b.png"))

    ckpt = _measured(merged, "checkpointing_7b_shaped_layers")
    amp = _measured(merged, "amp_bf16_vs_fp32_mlp")
    if ckpt or amp:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        if ckpt:
            memplots.tradeoff(
                {
                    "without checkpointing": (ckpt["peak_mib_without"], ckpt["step_ms_without"]),
                    "with checkpointing": (ckpt["peak_mib_with"], ckpt["step_ms_with"]),
                },
                "peak memory (MiB)",
                "time per step (ms)",
                ax=axes[0],
                title=f"{ckpt['layers']} Llama-2-7B layers, seq {ckpt['seq']}",
            )
        if amp:
            memplots.tradeoff(
                {
                    "fp32": (amp["fp32_peak_mib"], amp["fp32_step_ms"]),
                    "bf16 autocast": (amp["bf16_peak_mib"], amp["bf16_step_ms"]),
                },
                "peak memory (MiB)",
                "time per step (ms)",
                ax=axes[1],
                title="lesson 03's MLP: bf16 autocast vs fp32",
            )
        fig.suptitle(name)
        if _shared(merged, "checkpointing_7b_shaped_layers", "amp_bf16_vs_fp32_mlp"):
            _note_shared(fig)
        written.append(_save(fig, results / f"{slug}-tradeoffs.png"))
    return written


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=(0, 0.04, 1, 1) if fig.texts else None)  # room for a note at the foot
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---- the plan ---------------------------------------------------------------------------------------------------------


#: the script each GPU command runs: installs the wheelhouse, runs its specs side by side on the one GPU, packs
#: every record and log into $OUT/evidence.tgz (every 20 s too, so a call killed at its limit keeps its records)
CALL_SCRIPT = "coursetools/gpu/gpu_evidence_call.sh"
#: the GPU time of one allowance on the remote GPU machine, starts and idle time included
ALLOWANCE_S = 15 * 60
#: GPU seconds an allowance spends before its first command runs: the machine's start (the first H200 call:
#: 318 s of GPU time for a 288 s command, 2026-11-27)
MACHINE_START_S = 30
#: GPU seconds a call needs besides its parts' budget: installing the wheels, packing, the transfers (a call whose
#: parts had BUDGET=300 took 298 s, 2026-11-28: the parts ended before their budget)
CALL_OVERHEAD_S = 40
#: a call's parts are killed this long after their budget (gpu_evidence_call.sh): the most a call can take past it
KILL_AFTER_S = 60
#: GPU seconds one Transformer Engine piece call takes (six took 66 s on 2026-11-28, the machine warm)
PIECE_S = 11
#: the calls, in order of value: the first two are the GPU path's proof and fit one allowance after TE's pieces
PLAN = (
    {
        "title": "the proof: every lesson graded on the GPU in the sandbox (solved: every autograded point, "
        "unflagged; blank: 0), and lesson 07 at GPU sizes with Transformer Engine (part 3), side by side",
        "specs": ("3", "5:ALL"),
        "budget": 270,
    },
    {
        "title": "the class benchmark on the machine's cores: 3 learners x every lesson, CUDA visible (a GPU "
        "grader), then hidden (a grader without a GPU)",
        "specs": ("6",),
        "budget": 300,
    },
    {
        "title": "the rest of the evidence (a later allowance): lessons 01-06 and 08 at GPU sizes, their GPU tests",
        "specs": ("1", "2", "4"),
        "budget": 280,
    },
)


def plan_calls() -> list[dict]:
    """The device-tool calls, in order of value: {title, specs, command, carry, timeout_s, expected_s}."""
    calls = []
    for entry in PLAN:
        specs = [f"5:{','.join(lesson_slugs())}" if spec == "5:ALL" else spec for spec in entry["specs"]]
        budget = entry["budget"]
        calls.append(
            {
                "title": entry["title"],
                "specs": specs,
                "command": f"BUDGET={budget} bash {CALL_SCRIPT} {' '.join(specs)}",
                "carry": list(CARRY),
                "timeout_s": min(DEVICE_TIMEOUT_S, budget + KILL_AFTER_S + CALL_OVERHEAD_S),
                "expected_s": budget + CALL_OVERHEAD_S,
            }
        )
    return calls


def allowance_plan(with_te: bool = True) -> list[dict]:
    """Every call of an allowance in order, each with `device_s`, the GPU time used by the end of it at worst (the
    machine's start, the pieces as measured, each call until its timeout), and `fits`: within ALLOWANCE_S."""
    calls = (te_piece_calls() if with_te else []) + plan_calls()
    used = MACHINE_START_S
    for call in calls:
        used += PIECE_S if call["command"].startswith(f"bash {TE_SCRIPT}") else call["timeout_s"]
        call["device_s"] = used
        call["fits"] = used <= ALLOWANCE_S
    return calls


TE_SCRIPT = "coursetools/gpu/gpu_te.sh"
#: a piece's call: the machine's start (the first), the transfer and a copy; the command itself takes a second
TE_PIECE_TIMEOUT_S = 60


def te_piece_calls() -> list[dict]:
    """The calls that bring Transformer Engine's pieces (.te/, python -m coursetools.gpu.make_te_wheelhouse) to the warm
    machine, one each: `gpu_te.sh receive` keeps them in /tmp/te-pieces, and the next evidence call installs TE."""
    from coursetools.gpu.make_te_wheelhouse import SUMS, pieces_of

    pieces = pieces_of()
    return [
        {
            "title": f"Transformer Engine, piece {n} of {len(pieces)}",
            "command": f"bash {TE_SCRIPT} receive",
            "carry": [f".te/{SUMS}", f".te/{piece['name']}"],
            "timeout_s": TE_PIECE_TIMEOUT_S,
            "bytes": piece["bytes"],
        }
        for n, piece in enumerate(pieces, 1)
    ]


def print_plan() -> None:
    from coursetools.gpu.make_wheelhouse import CARRY_LIMIT, WHEELHOUSE, folder_bytes, tree_bytes

    tree = tree_bytes()
    whl = folder_bytes(WHEELHOUSE) if WHEELHOUSE.is_dir() else 0
    print("# GPU evidence: the GPU commands, in order of value (docs/gpu.md).")
    print(
        f"# carry: working tree {tree / 2**20:.1f} MiB + .whl {whl / 2**20:.1f} MiB = {(tree + whl) / 2**20:.1f} MiB"
        f" of {CARRY_LIMIT / 2**20:.0f} MiB"
    )
    if not whl:
        print("# .whl/ is missing: run `python -m coursetools.gpu.make_wheelhouse` first")
    pieces = te_piece_calls()
    calls = allowance_plan(with_te=bool(pieces))
    print(
        f"# An allowance has {ALLOWANCE_S} s of GPU time; each line below says the GPU time used by the end"
        " of that call at worst"
    )
    print(
        f"# (the machine's start {MACHINE_START_S} s, a piece {PIECE_S} s, a call its timeout_s: its parts stop"
        " starting work at BUDGET and are killed"
    )
    print(f"# {KILL_AFTER_S} s later). Make the calls back to back (the machine goes back after 30 s idle).")
    print(
        "# After each call, here: python -m coursetools.gpu.gpu_evidence --merge <files_at>/evidence.tgz [snapshots.tgz]"
    )
    print("# (results/<gpu-name>.json keeps what earlier calls measured), then commit results/.")
    if pieces:
        print(
            f"\n# Transformer Engine first: {len(pieces)} calls of one piece each (.te/, up to"
            f" {max(p['bytes'] for p in pieces) / 2**20:.1f} MiB + the tree); they wait on the warm machine in"
        )
        print("# /tmp/te-pieces, and the next call installs TE while its parts start (part 3 measures it).")
    else:
        print(
            "\n# Transformer Engine: no .te/ here (python -m coursetools.gpu.make_te_wheelhouse); call 1 runs without it"
        )
    n = 0
    for call in calls:
        if call["command"].startswith(f"bash {TE_SCRIPT}"):
            title = call["title"]
        else:
            n += 1
            title = f"call {n}: {call['title']}"
        where = "fits the allowance" if call["fits"] else "does not fit: a later allowance"
        print(f"\n# {title} [{call['device_s']} s of {ALLOWANCE_S}: {where}]")
        print(json.dumps({k: call[k] for k in ("command", "carry", "timeout_s")}, indent=1))


# ---- the rehearsal ----------------------------------------------------------------------------------------------------


def rehearse(out: Path | None, results: Path | None, budget: float = 0, jobs: int = 3) -> int:
    """Every part's plumbing on this machine with CUDA hidden, then the merge into a temporary folder."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a rehearsal never measures a GPU, also on a GPU box
    out = Path(out or tempfile.mkdtemp(prefix="gpu-evidence-rehearsal-out-"))
    results = Path(results or tempfile.mkdtemp(prefix="gpu-evidence-rehearsal-results-"))
    if results.resolve() == RESULTS.resolve():
        raise SystemExit("--rehearse never writes into results/: give another --results")
    out.mkdir(parents=True, exist_ok=True)
    # the parts are independent: run them side by side, each in its own process (as on the GPU machine), with its
    # output in OUT/partN.log
    running: dict[int, subprocess.Popen] = {}
    pending = list(PART_TITLES)
    while pending or running:
        while pending and len(running) < jobs:
            part = pending.pop(0)
            command = [
                sys.executable,
                "-m",
                "coursetools.gpu.gpu_evidence",
                "--part",
                str(part),
                "--as-rehearsal",
            ]
            command += ["--out", str(out), "--budget", f"{budget:g}"]
            with open(out / f"part{part}.log", "w") as log:
                running[part] = subprocess.Popen(
                    command, cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT
                )
        for part, proc in list(running.items()):
            if proc.poll() is not None:
                del running[part]
                print(f"== part {part}: exit {proc.returncode}", flush=True)
                if proc.returncode != 0:
                    print(tail((out / f"part{part}.log").read_text(), 40), flush=True)
        time.sleep(0.5)
    files = [out / RECORDS.format(part=part) for part in PART_TITLES]
    merge(files, results)
    failed = [r for r in read_records(files) if r["status"].startswith("failed")]
    print(f"rehearsal: records in {out}, merged into {results}")
    for record in failed:
        print(f"FAILED part {record['part']} {record['name']}: {record['status']}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--part", type=int, nargs="+", choices=sorted(PART_TITLES), help="the part(s) to run")
    what.add_argument("--all", action="store_true", help="every part, then the merge into --results")
    what.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="record files to merge (records-part*.jsonl, or a call's evidence.tgz and snapshots.tgz)",
    )
    what.add_argument("--plan", action="store_true", help="print the device-tool calls")
    what.add_argument(
        "--rehearse", action="store_true", help="run every part's plumbing here, merge to a temp folder"
    )
    parser.add_argument(
        "--budget", type=float, help=f"seconds per part (default {DEFAULT_BUDGET:g}; --all: none)"
    )
    parser.add_argument("--out", type=Path, help="where records go (default: $OUT, else ./out-gpu)")
    parser.add_argument("--results", type=Path, help="where --merge writes (default: results/)")
    parser.add_argument(
        "--lessons", nargs="+", metavar="SLUG", help="part 5: the lessons to grade (default: all)"
    )
    parser.add_argument(
        "--tests",
        nargs="+",
        metavar="NODEID",
        help="--part: only these GPU tests (pytest node ids), nothing else",
    )
    parser.add_argument("--jobs", type=int, default=3, help="--rehearse: parts run side by side (default: 3)")
    parser.add_argument(
        "--as-rehearsal", action="store_true", help=argparse.SUPPRESS
    )  # --rehearse's own parts
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    out = args.out or Path(os.environ.get("OUT") or "out-gpu")
    if args.plan:
        print_plan()
        return 0
    if args.merge:
        with tempfile.TemporaryDirectory(prefix="gpu-evidence-merge-") as unpacked:
            merge(record_files(args.merge, Path(unpacked)), args.results or RESULTS)
        return 0
    if args.rehearse:
        return rehearse(args.out, args.results, args.budget or 0, args.jobs)
    unknown = [s for s in args.lessons or [] if s not in lesson_slugs()]
    if unknown:
        parser.error(f"no such lesson: {', '.join(unknown)}")
    parts = sorted(PART_TITLES) if args.all else args.part
    budget = args.budget if args.budget is not None else (0 if args.all else DEFAULT_BUDGET)
    if args.as_rehearsal:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    rehearsal = args.as_rehearsal
    files = [
        run_part(part, out, budget, rehearsal=rehearsal, lessons=args.lessons, tests=args.tests).path
        for part in parts
    ]
    if args.all:
        merge(files, args.results or RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
