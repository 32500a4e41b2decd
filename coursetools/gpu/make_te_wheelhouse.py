#!/usr/bin/env python
"""Transformer Engine for a remote, offline GPU machine: its wheels, built and rehearsed here, in pieces commands carry.

    python -m coursetools.gpu.make_te_wheelhouse            download, build, rehearse, split into .te/ (git-ignored)
    python -m coursetools.gpu.make_te_wheelhouse --verify   check .te/'s pieces: checksums, and each call's carry size

Lesson 07 measures Transformer Engine (TE) where it is installed, and tests/gpu/test_fp8_gpu.py compares TE's
DelayedScaling with the course's reference. The GPU machine's image has no TE and no network, and TE cannot come
the way the other wheels do (coursetools/gpu/make_wheelhouse.py):
- its core, transformer_engine_cu13, is one 264 MiB wheel (its library holds machine code for eight GPU
  generations), and a command there carries 64 MiB together with the working tree;
- its PyTorch extension, transformer_engine_torch, is only a source distribution on PyPI. Its setup.py looks for a
  prebuilt wheel among the GitHub release's assets, which neither machine can reach, and otherwise compiles it
  against the torch it finds.

So this script does what pip would do on a machine with a network, here, ahead of time:
1. downloads TE's wheels for CPython 3.12 on manylinux x86_64 with the dependencies the image lacks (through
   make_wheelhouse.resolve and the image's package list there), and the extension's sdist;
2. builds the extension's wheel in a Python 3.12 environment under .cache/te-build/ that holds the image's torch
   (2.11.0, CUDA 13.0, from PyPI) and CUDA 13's headers from NVIDIA's wheels; the extension is C++ only (no CUDA
   kernels of its own: those are in the core library), so no GPU and no CUDA toolkit installation is needed here;
3. packs everything in one tar and splits it into pieces `.te/piece-NN`, each small enough to travel with the
   working tree in one call, with their checksums and the whole's in `.te/pieces.sha256`;
4. rehearses the GPU machine's side on this CPU: coursetools/gpu/gpu_te.sh, the script the GPU commands run, receives each
   piece in a call folder of its own, joins them, installs the wheels into the build environment (the image's torch
   and CUDA wheels; NVIDIA's cuDNN frontend and what it drags in removed, as on the image) and imports
   transformer_engine.pytorch; then every TE name the course uses is looked up (TE_NAMES).
It writes what it did, with versions, sizes and the rehearsal's outcome, to results/transformer_engine_carry.json.

On the GPU machine `bash coursetools/gpu/gpu_te.sh install` (run by coursetools/gpu/gpu_evidence_call.sh when the pieces are there)
builds the extension there from the sdist, with the image's nvcc, if the one built here does not import.

Needs a Python 3.12 interpreter here (--python; else python3.12 on PATH or pyenv's), about 5 GB in .cache/te-build/
(torch and the CUDA wheels) and about 10 minutes on 2 cores, most of it compiling the extension's 33 files.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from coursetools.gpu import make_wheelhouse as wh

ROOT = wh.ROOT
TE_DIR = ROOT / ".te"
BUILD_DIR = ROOT / ".cache" / "te-build"
RESULT = ROOT / "results" / "transformer_engine_carry.json"
SUMS = "pieces.sha256"
TE_VERSION = "2.20.2"
#: the extension's sdist, compiled here (PyPI has no wheel of it)
EXTENSION = "transformer_engine_torch"
#: what is downloaded as wheels, pinned; their dependencies the image lacks come too (make_wheelhouse.resolve)
TOP_LEVEL = {
    "transformer_engine": TE_VERSION,  # the Python package
    "transformer_engine_cu13": TE_VERSION,  # libtransformer_engine.so for CUDA 13 (the image's torch is cu130)
    "nvidia-cudnn-frontend": "1.32.0",  # the extension's requirement; its C++ headers build it
    "nvdlfw-inspect": "0.2.2",  # the extension's requirement (TE's debug tools)
}
#: cuDNN frontend's dependencies, left out (485 MiB installed; the image lacks them), and why
FRONTEND_DEPS = {
    "nvidia-cutlass-dsl": "cuDNN frontend's; TE imports it only for CuTeDSL kernels (Blackwell, opt-in)",
    "apache-tvm-ffi": "cuDNN frontend's; TE loads it only when NVTE_ENABLE_CUTEDSL_BACKEND is set",
}
#: declared dependencies not downloaded, and why
SKIP = {**FRONTEND_DEPS, EXTENSION: "built here from its sdist: PyPI has no wheel of it"}
#: the piece size leaves this much of a call's 64 MiB free besides the working tree (it grows as the course does)
MARGIN = 4 * 2**20
#: the names the course uses from TE (lesson 07's §7 cell, tests/gpu/test_fp8_gpu.py): the rehearsal looks them up
TE_NAMES = (
    "transformer_engine.pytorch.autocast",
    "transformer_engine.pytorch.fp8_autocast",
    "transformer_engine.pytorch.quantized_model_init",
    "transformer_engine.pytorch.fp8_model_init",
    "transformer_engine.pytorch.Linear",
    "transformer_engine.pytorch.TransformerLayer",
    "transformer_engine.pytorch.fp8.get_default_fp8_recipe",
    "transformer_engine.common.recipe.DelayedScaling",
    "transformer_engine.common.recipe.Format",
)
#: the keyword arguments lesson 07 passes to te.TransformerLayer
TRANSFORMER_LAYER_KWARGS = (
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "params_dtype",
    "device",
    "fuse_qkv_params",
)


def build_python(given: str | None) -> str:
    """A Python 3.12 interpreter (the GPU image's minor version; the extension is built for it)."""
    candidates = (
        [given]
        if given
        else ["python3.12", *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]
    )
    for candidate in candidates:
        try:
            out = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        except OSError:
            continue
        if out == "True":
            return candidate
    raise SystemExit(
        "no Python 3.12 here: give one with --python (the extension is built for the image's 3.12)"
    )


def run(command: list, **kw) -> str:
    print("+", " ".join(map(str, command)), flush=True)
    proc = subprocess.run([str(c) for c in command], text=True, capture_output=True, **kw)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-6000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(map(str, command[:6]))} ...")
    return proc.stdout


def build_env(python: str) -> Path:
    """.cache/te-build/venv: the image's torch and CUDA 13's headers and nvcc, from PyPI (kept between runs)."""
    venv = BUILD_DIR / "venv"
    py = venv / "bin" / "python"
    if not py.exists():
        run([python, "-m", "venv", venv])
    torch = f"torch=={wh.IMAGE_VERSIONS['torch']}"  # PyPI's Linux wheel of 2.11.0 is the CUDA 13.0 build, as the image's
    tools = ["cuda-toolkit[cccl,nvcc]", "setuptools", "wheel", "pybind11", "ninja"]
    on_the_image = ["einops", "onnx", "onnxscript"]  # TE imports them
    run([py, "-m", "pip", "install", "-q", torch, *tools, *on_the_image])
    return py


def download(dest: Path, py: Path) -> dict:
    wheels = dest / "wheels"
    build = dest / "build"
    for folder in (wheels, build):
        folder.mkdir(parents=True)
    chosen = wh.resolve(wheels, TOP_LEVEL, SKIP)
    env = dict(
        os.environ, NVTE_PYTORCH_FORCE_BUILD="TRUE"
    )  # its metadata step must not look for GitHub's wheel
    run(
        [py, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=:all:", "--no-build-isolation"]
        + ["-d", build, f"{EXTENSION}=={TE_VERSION}"],
        env=env,
    )
    return chosen


def build_extension(py: Path, dest: Path) -> tuple[Path, bool]:
    """Compile transformer_engine_torch's wheel against the build environment's torch, or reuse the one an earlier run
    compiled for the same TE and torch (in .cache/te-build/dist/; delete it to compile again); copied to dest/wheels.
    (its path there, whether it was compiled in this run)"""
    run([py, "-m", "pip", "install", "-q", "--no-deps", *sorted((dest / "wheels").glob("*.whl"))])
    torch = run([py, "-c", "import torch; print(torch.__version__)"]).strip()
    dist = BUILD_DIR / "dist" / f"torch-{torch}"
    built = next(dist.glob(f"{EXTENSION}-{TE_VERSION}-*.whl"), None) if dist.is_dir() else None
    compiled = built is None
    if not compiled:
        print(f"reusing {built} (delete it to compile again)", flush=True)
    else:
        sdist = next((dest / "build").glob(f"{EXTENSION}-*.tar.gz"))
        env = dict(
            os.environ,
            NVTE_PYTORCH_FORCE_BUILD="TRUE",  # no download attempt
            NVTE_BUILD_USE_NVIDIA_WHEELS="1",  # CUDA's headers from NVIDIA's wheels (no toolkit installed here)
            NVTE_CUDA_ARCHS="90",  # Hopper, the GPUs it runs on (decides only whether NCCL EP, Hopper and newer, is in)
            MAX_JOBS=str(os.cpu_count() or 2),
            PATH=f"{py.parent}{os.pathsep}{os.environ['PATH']}",  # the venv's nvcc (the build asks it CUDA's version)
        )
        dist.mkdir(parents=True, exist_ok=True)
        run([py, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", dist, sdist], env=env)
        built = next(dist.glob(f"{EXTENSION}-{TE_VERSION}-*.whl"))
    return Path(shutil.copy2(built, dest / "wheels" / built.name)), compiled


def split(dest: Path, piece_bytes: int) -> list[dict]:
    """Pack dest/wheels and dest/build into one tar and cut it into dest/piece-NN; write dest/pieces.sha256."""
    whole = dest / "te.tar"
    with tarfile.open(whole, "w") as tar:  # uncompressed: wheels are zip files already
        for folder in ("wheels", "build"):
            for path in sorted((dest / folder).iterdir()):
                tar.add(path, arcname=f"{folder}/{path.name}")
    pieces = []
    joined = hashlib.sha256()  # the whole's, as it is read once
    with open(whole, "rb") as src:
        while chunk := src.read(piece_bytes):
            name = f"piece-{len(pieces) + 1:02d}"
            (dest / name).write_bytes(chunk)
            joined.update(chunk)
            pieces.append({"name": name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    lines = [f"{p['sha256']}  {p['name']}" for p in pieces] + [f"{joined.hexdigest()}  te.tar"]
    (dest / SUMS).write_text("\n".join(lines) + "\n")
    whole.unlink()
    return pieces


def piece_size(tree: int) -> int:
    """The largest piece that travels with the working tree in one call, MARGIN left free."""
    return wh.CARRY_LIMIT - tree - MARGIN


def pieces_of(dest: Path | None = None) -> list[dict]:
    """The pieces .te/pieces.sha256 lists, in order: name, sha256, and bytes (0 where the file is missing)."""
    dest = dest or TE_DIR
    sums = dest / SUMS
    if not sums.exists():
        return []
    found = []
    for line in sums.read_text().splitlines():
        digest, name = line.split()
        if name.startswith("piece-"):
            path = dest / name
            found.append(
                {"name": name, "sha256": digest, "bytes": path.stat().st_size if path.exists() else 0}
            )
    return found


def verify(dest: Path | None = None) -> list[str]:
    """What is wrong with .te/ (empty: nothing): missing or changed pieces, a call over the carry limit."""
    dest = dest or TE_DIR
    pieces = pieces_of(dest)
    if not pieces:
        return [f"{dest}/{SUMS} is missing: run python -m coursetools.gpu.make_te_wheelhouse"]
    problems = []
    tree = wh.tree_bytes()
    for piece in pieces:
        path = dest / piece["name"]
        if not path.exists():
            problems.append(f"{piece['name']}: missing")
            continue
        with path.open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        if digest != piece["sha256"]:
            problems.append(f"{piece['name']}: checksum differs from {SUMS}")
        elif tree + piece["bytes"] + (dest / SUMS).stat().st_size >= wh.CARRY_LIMIT:
            problems.append(
                f"{piece['name']}: {(tree + piece['bytes']) / 2**20:.1f} MiB with the working tree, over"
                f" {wh.CARRY_LIMIT / 2**20:.0f} MiB: split again (python -m coursetools.gpu.make_te_wheelhouse)"
            )
    return problems


REHEARSAL_CHECK = """
import importlib, inspect, json, sys
import torch
import transformer_engine, transformer_engine.pytorch as te
names, kwargs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
missing = []
for name in names:
    module, _, attr = name.rpartition(".")
    try:
        getattr(importlib.import_module(module), attr)
    except Exception as error:
        missing.append(f"{name}: {type(error).__name__}: {error}")
params = inspect.signature(te.TransformerLayer.__init__).parameters
missing += [f"te.TransformerLayer has no keyword {k}" for k in kwargs if k not in params]
print(json.dumps({"transformer_engine": transformer_engine.__version__, "torch": torch.__version__,
                  "torch_cuda": torch.version.cuda, "missing": missing}))
"""


def rehearse(dest: Path, py: Path) -> dict:
    """The GPU machine's side, here: coursetools/gpu/gpu_te.sh receives each piece in its own call folder, then installs into
    the build environment. What the pieces hold is uninstalled from it first, so the import proves their install,
    and so are cuDNN frontend's left-out dependencies, which the image lacks too."""
    carried = [parse_wheel_filename(w.name)[0] for w in (dest / "wheels").glob("*.whl")]
    run([py, "-m", "pip", "uninstall", "-q", "-y", *carried, *FRONTEND_DEPS])
    store = Path(tempfile.mkdtemp(prefix="te-store-"))
    env = dict(os.environ, TE_STORE=str(store), PYTHON=str(py))
    script = Path(__file__).resolve().parent / "gpu_te.sh"
    log = []
    try:
        for piece in pieces_of(dest):
            with tempfile.TemporaryDirectory(prefix="te-call-") as call:  # what one GPU command has
                (Path(call) / ".te").mkdir()
                for name in (SUMS, piece["name"]):
                    os.symlink(dest / name, Path(call) / ".te" / name)
                proc = subprocess.run(
                    ["bash", script, "receive"], cwd=call, env=env, capture_output=True, text=True
                )
                log.append(proc.stdout.strip())
        with tempfile.TemporaryDirectory(prefix="te-call-") as call:
            proc = subprocess.run(
                ["bash", script, "install"], cwd=call, env=env, capture_output=True, text=True
            )
        log += [proc.stdout.strip(), proc.stderr.strip()[-2000:]]
        if proc.returncode != 0:
            return {"outcome": f"failed: gpu_te.sh install exited {proc.returncode}", "log": log}
        check = run([py, "-c", REHEARSAL_CHECK, json.dumps(TE_NAMES), json.dumps(TRANSFORMER_LAYER_KWARGS)])
        found = json.loads(check.strip().splitlines()[-1])
    finally:
        shutil.rmtree(store, ignore_errors=True)
    outcome = "passed" if not found["missing"] else "failed: " + "; ".join(found["missing"])
    return {"outcome": outcome, **found, "log": [line for line in log if line]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verify", action="store_true", help="only check the pieces in .te/")
    parser.add_argument(
        "--python", help="a Python 3.12 interpreter (default: python3.12 on PATH, else pyenv's)"
    )
    args = parser.parse_args(argv)
    wh.ensure_ignored()
    if not args.verify:
        started = datetime.datetime.now(datetime.timezone.utc)
        python = build_python(args.python)
        py = build_env(python)
        if TE_DIR.exists():
            shutil.rmtree(TE_DIR)
        TE_DIR.mkdir()
        chosen = download(TE_DIR, py)
        built, compiled = build_extension(py, TE_DIR)
        problems = wh.verify(TE_DIR / "wheels", TOP_LEVEL, SKIP)
        tree = wh.tree_bytes()
        pieces = split(TE_DIR, piece_size(tree))
        extension = {"name": built.name, "bytes": built.stat().st_size, "compiled_in_this_run": compiled}
        rehearsal = rehearse(TE_DIR, py)
        shutil.rmtree(TE_DIR / "wheels")
        shutil.rmtree(TE_DIR / "build")
        versions = json.loads(
            run(
                [
                    py,
                    "-c",
                    "import json, importlib.metadata as m; print(json.dumps({n: m.version(n) for n in"
                    " ('torch', 'cuda-toolkit', 'nvidia-cuda-runtime', 'nvidia-cuda-nvcc', 'setuptools')}))",
                ]
            )
        )
        record = {
            "_about": "Written by coursetools/gpu/make_te_wheelhouse.py: Transformer Engine's wheels for the GPU machine's"
            " image, the extension built here, split into pieces a GPU command carries, and the rehearsal of the GPU"
            " machine's side (coursetools/gpu/gpu_te.sh) on this CPU. What the GPU made of it is in results/<gpu-name>.json"
            " (transformer_engine, gpu_tests/test_fp8_gpu.py::test_transformer_engine_..., solutions_on_gpu).",
            "date": started.isoformat(timespec="seconds"),
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "python": run([python, "-V"]).strip(),
            },
            "transformer_engine": TE_VERSION,
            "built_against": versions,
            "compiler": run(["c++", "--version"]).splitlines()[0],
            "extension_wheel": extension,
            "wheels": {n: chosen[n] for n in sorted(chosen)},
            "left_out": SKIP,
            "wheelhouse_problems": problems,
            "working_tree_bytes": tree,
            "pieces": pieces,
            "carry_limit_bytes": wh.CARRY_LIMIT,
            "rehearsal": rehearsal,
            "minutes": round(
                (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60, 1
            ),
        }
        RESULT.write_text(json.dumps(record, indent=1) + "\n")
        print(
            f"rehearsal: {rehearsal['outcome']}; {len(pieces)} pieces in {TE_DIR}; {RESULT.relative_to(ROOT)}"
        )
        if problems or rehearsal["outcome"] != "passed":
            for problem in problems:
                print(f"PROBLEM {problem}", file=sys.stderr)
            return 1
    problems = verify()
    for problem in problems:
        print(f"PROBLEM {problem}", file=sys.stderr)
    for piece in pieces_of():
        print(f"{piece['bytes'] / 2**20:8.2f} MiB  .te/{piece['name']}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
