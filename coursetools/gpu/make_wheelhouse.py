#!/usr/bin/env python
"""Download the Python wheels a remote, offline GPU machine lacks into .whl/ (git-ignored), small enough to travel.

    python -m coursetools.gpu.make_wheelhouse            download (into an empty .whl/), slim, verify, print the sizes
    python -m coursetools.gpu.make_wheelhouse --verify   only verify what .whl/ holds and print the sizes

The GPU machine (an H100 or H200 with the image 'cuda': Python 3.12, torch 2.11 + CUDA 13,
transformers 5.17, peft, accelerate; no network) lacks the notebook stack (nbclient, ipykernel, nbval), nbgrader and
its dependencies, bitsandbytes, datasets and torchao; and its transformers is too old for lessons 04 and 08, so
transformers (and peft) come in the versions CI tests. This script fetches, for CPython 3.12 on manylinux x86_64, the
pinned top-level packages below and, from each wheel's own METADATA, every dependency that the image does not hold
(IMAGE_PACKAGES, as the image's description listed them on 2026-11-17), in the version installed
in this environment where that version satisfies the requirement (the versions CI tested), else pip's choice.

A command on that machine carries the working tree and its carried paths together, at most 64 MiB. Two wheels are slimmed to fit
(SLIM): bitsandbytes keeps only its CUDA 13 and CPU libraries (torch 2.11+cu130 loads libbitsandbytes_cuda130.so;
the CUDA 11/12, ROCm and XPU builds are 115 of its 123 MiB unpacked; the wheel goes from 41 to 6.8 MiB), nbgrader
drops its documentation and its own test suite (10.9 to 1.2 MiB). A few declared dependencies are left out (SKIP): the grading on the GPU machine never imports them.

Grading needs bubblewrap (`bwrap`, a Debian package, not on PyPI) for its sandbox: the script also fetches Debian's
bubblewrap .deb (`apt-get download`); coursetools/gpu/gpu_evidence.py unpacks it on the GPU machine (`dpkg -x`, into /tmp,
never over /) and grades isolated when `grading.isolation.unavailable()` says the sandbox works there, else with
`--no-isolation`, and records which.

On the GPU machine the wheels are installed into the interpreter's own environment, not `--target /tmp/site`: the
grading sandbox sees only the Python installation and a private /tmp, and sets its own PYTHONPATH, so a kernel in it
would not find ipykernel or bitsandbytes under /tmp/site (`python -m coursetools.gpu.gpu_evidence --plan` prints the calls).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from base64 import urlsafe_b64encode
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / ".whl"
MANIFEST = "MANIFEST.json"
CARRY_LIMIT = 64 * 2**20  # what one GPU command may carry: the working tree and the carried paths together
#: the wheelhouse, at most, for checks made without it (48.2 MiB when made on 2026-11-24, 47.7 on 2026-11-27); with
#: the working tree (12.0 MiB since results/ holds the H200 run) it must stay under CARRY_LIMIT
EXPECTED_BYTES = 50 * 2**20
PYTHON = (3, 12)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]

#: what the course needs on the GPU machine, pinned (the versions of this project's CI environment)
TOP_LEVEL = {
    "nbclient": "0.11.0",  # scripts/execute_solutions.py, tests/gpu/test_solutions_on_gpu.py
    "nbformat": "5.10.4",
    "ipykernel": "7.4.0",  # the notebooks' kernel
    "nbval": "0.11.0",  # pyproject's pytest addopts name --nbval-lax: pytest does not start without it
    "nbgrader": "0.9.6",  # scripts/grade.py
    "datasets": "5.2.0",  # memlab.data
    "bitsandbytes": "0.50.2",  # lessons 01, 06, 08 (8-bit AdamW, QLoRA)
    "torchao": "0.18.0",  # lesson 07's torchao.float8 (0.18.0 is built for torch >= 2.11)
    # newer than the image's: the course calls PreTrainedModel.activation_checkpointing_enable / _disable, which
    # transformers has from 5.23.0 on; under the image's 5.17.0 lessons 04 and 08 fail (results/gpu_image_versions.json)
    "transformers": "5.24.0",
    "peft": "0.21.2",  # the version CI tests, whatever the image's is
    "trl": "1.16.0",  # tests/gpu/test_checkpointing_gpu.py: torchtune's OffloadActivations as TRL carries it (0.9 MiB)
}

#: distributions the GPU image holds (the image's list of its Python packages, read on 2026-11-17)
IMAGE_PACKAGES = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split()

#: versions of image packages seen there (a `pip list` there, 2026-11); requirements are checked against them
IMAGE_VERSIONS = {
    "accelerate": "1.15.0",
    "huggingface-hub": "1.33.0",
    "numpy": "2.5.2",
    "safetensors": "0.8.0",
    "tokenizers": "0.23.2",
    "torch": "2.11.0",
    "transformers": "5.17.0",
    "triton": "3.6.0",
}

#: declared dependencies left out, and why (none is imported by what runs on the GPU machine)
SKIP = {
    "jupyterlab": "nbgrader's JupyterLab extension (formgrader's UI); grade.py and nbgrader autograde never load it",
    "jupyterlab-server": "JupyterLab's server; only for the UI",
    "jupyter-lsp": "JupyterLab's language server; only for the UI",
    "async-lru": "JupyterLab's; only for the UI",
    "ipywidgets": "nbgrader declares it for its UI; no lesson imports it",
    "widgetsnbextension": "ipywidgets'",
    "jupyterlab-widgets": "ipywidgets'",
    "notebook": "Notebook 7's UI; nbconvert and jupyter_server import it only inside `try: ... except ImportError`",
}

#: files dropped from a wheel (regular expressions on the path inside it), and why
SLIM = {
    "bitsandbytes": (
        r"^bitsandbytes/libbitsandbytes_(cuda1[0-2]\d|rocm\d+|xpu\d+)\.so$",
        "only the CUDA 13 and CPU libraries kept (torch 2.11+cu130 loads libbitsandbytes_cuda130.so)",
    ),
    "nbgrader": (r"^nbgrader/(docs|tests)/", "its documentation and its own test suite"),
}

#: Debian packages fetched with `apt-get download` (not on PyPI)
DEBIAN = ("bubblewrap",)


def supported_tags() -> set[Tag]:
    """The wheel tags CPython 3.12 on manylinux x86_64 accepts."""
    tags = set(cpython_tags(PYTHON, abis=["cp312", "abi3", "none"], platforms=PLATFORMS))
    tags |= set(compatible_tags(PYTHON, interpreter="cp312", platforms=PLATFORMS))
    return tags


def marker_environment() -> dict[str, str]:
    env = default_environment()
    env.update(
        python_version="3.12",
        python_full_version="3.12.3",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
    )
    return env


def requirements_of(wheel: Path, extras: set[str]) -> list[Requirement]:
    """The Requires-Dist of `wheel` that apply on the GPU machine (with `extras` requested)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if re.match(r"[^/]+\.dist-info/METADATA$", n))
        text = zf.read(meta).decode()
    found = []
    env = marker_environment()
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras}):
            found.append(req)
    return found


def local_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def pip_download(specs: list[str], dest: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3"]
    command += ["--abi", "none", *(arg for p in PLATFORMS for arg in ("--platform", p)), "-d", str(dest)]
    subprocess.run([*command, *specs], check=True)


def wheels(folder: Path) -> dict[str, Path]:
    """{canonical name: wheel} of a folder."""
    return {canonicalize_name(parse_wheel_filename(p.name)[0]): p for p in sorted(folder.glob("*.whl"))}


def resolve(
    dest: Path, top_level: dict[str, str] = TOP_LEVEL, skip: dict[str, str] = SKIP
) -> dict[str, dict]:
    """Download `top_level` and every dependency the image lacks (but those in `skip`) into `dest`; {name: how it
    was chosen}."""
    chosen: dict[str, dict] = {}
    top = {canonicalize_name(n) for n in top_level}
    skip = {canonicalize_name(n) for n in skip}
    wanted: dict[str, tuple[SpecifierSet, set[str]]] = {
        canonicalize_name(n): (SpecifierSet(f"=={v}"), set()) for n, v in top_level.items()
    }
    while True:
        batch = []
        for name, (spec, _) in wanted.items():
            if name in chosen:
                continue
            here = local_version(name)
            if name in top:
                pick, why = str(spec), "pinned"
            elif here is not None and spec.contains(here, prereleases=True):
                pick, why = f"=={here}", "the version installed here"
            else:
                pick, why = str(spec), "pip's choice"
            batch.append(f"{name}{pick}")
            chosen[name] = {"why": why, "required": str(spec) or "any"}
        if not batch:
            return chosen
        pip_download(batch, dest)
        present = wheels(dest)
        new = [n for n in chosen if "version" not in chosen[n]]
        for name in new:
            chosen[name]["version"] = str(parse_wheel_filename(present[name].name)[1])
        for name in new:
            for req in requirements_of(present[name], wanted[name][1]):
                dep = canonicalize_name(req.name)
                if dep in IMAGE_SET or dep in skip:
                    continue
                old_spec, old_extras = wanted.get(dep, (SpecifierSet(), set()))
                if dep in chosen and not (old_spec & req.specifier).contains(
                    chosen[dep].get("version", "0"), prereleases=True
                ):
                    raise SystemExit(f"{dep} {chosen[dep]} does not satisfy {name}'s {req}")
                wanted[dep] = (old_spec & req.specifier, old_extras | set(req.extras))


IMAGE_SET = {canonicalize_name(n) for n in IMAGE_PACKAGES}


def slim(wheel: Path, pattern: str) -> tuple[int, int]:
    """Rewrite `wheel` without the files matching `pattern` (RECORD rewritten); (bytes before, after)."""
    before = wheel.stat().st_size
    drop = re.compile(pattern)
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        rows = []
        for info in src.infolist():
            if drop.search(info.filename) or info.filename == record_name:
                continue
            data = src.read(info)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            digest = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{info.filename},sha256={digest},{len(data)}")
        rows.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(rows) + "\n")
    tmp.replace(wheel)
    return before, wheel.stat().st_size


def apt_download(package: str, dest: Path) -> str:
    """Debian's .deb of `package` into `dest`; its file name, or why it could not be fetched."""
    if shutil.which("apt-get") is None:
        return f"not fetched: no apt-get here ({package} must come another way)"
    proc = subprocess.run(["apt-get", "download", package], cwd=dest, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"not fetched: apt-get download {package}: {proc.stderr.strip()[-300:]}"
    return next(p.name for p in dest.glob(f"{package}_*.deb"))


# ---- sizes and checks ----------------------------------------------------------------------------------------------


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what a GPU command sends besides the carried paths: tracked files and untracked, not ignored ones."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
    except (
        OSError,
        subprocess.CalledProcessError,
    ):  # not a git checkout: every file but the usual ignored ones
        skip = {".git", ".whl", ".venv", ".venv-ci", ".venv-ci-latest", "out-gpu", "__pycache__", ".cache"}
        listed = [
            os.fsencode(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(root).parts)
        ]
    total = 0
    for name in filter(None, listed):
        path = root / os.fsdecode(name)
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def verify(folder: Path, top_level: dict[str, str] = TOP_LEVEL, skip: dict[str, str] = SKIP) -> list[str]:
    """What is wrong with the wheelhouse in `folder` (empty: nothing): tags, duplicates, unmet requirements."""
    skip = {canonicalize_name(n) for n in skip}
    problems = []
    tags = supported_tags()
    names: dict[str, list[str]] = {}
    versions: dict[str, Version] = {}
    for wheel in sorted(folder.glob("*.whl")):
        name, version, _, wheel_tags = parse_wheel_filename(wheel.name)
        names.setdefault(name, []).append(wheel.name)
        versions[name] = version
        if not wheel_tags & tags:
            problems.append(f"{wheel.name}: no tag CPython 3.12 on manylinux x86_64 accepts")
    problems += [
        f"{n}: {len(w)} versions ({', '.join(w)}); pip refuses two" for n, w in names.items() if len(w) > 1
    ]
    for name in top_level:
        if canonicalize_name(name) not in versions:
            problems.append(f"{name}: missing")
    for wheel in sorted(folder.glob("*.whl")):
        owner = parse_wheel_filename(wheel.name)[0]
        for req in requirements_of(wheel, set()):
            dep = canonicalize_name(req.name)
            if dep in versions:
                if not req.specifier.contains(versions[dep], prereleases=True):
                    problems.append(f"{owner} needs {req}; the wheelhouse has {dep} {versions[dep]}")
            elif dep in IMAGE_SET:
                known = IMAGE_VERSIONS.get(dep)
                if known and not req.specifier.contains(known, prereleases=True):
                    problems.append(f"{owner} needs {req}; the GPU image has {dep} {known}")
            elif dep not in skip:
                problems.append(f"{owner} needs {req}: neither in the wheelhouse nor in the GPU image")
    return problems


def report(folder: Path) -> dict:
    tree = tree_bytes()
    whl = folder_bytes(folder)
    rows = sorted(((p.stat().st_size, p.name) for p in folder.iterdir() if p.is_file()), reverse=True)
    for size, name in rows:
        print(f"{size / 2**20:8.2f} MiB  {name}")
    total = tree + whl
    print(
        f"{len(rows)} files in {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}: {whl / 2**20:.2f} MiB"
    )
    print(f"working tree (git ls-files + untracked, not ignored): {tree / 2**20:.2f} MiB")
    print(f"carried in one GPU command: {total / 2**20:.2f} MiB of {CARRY_LIMIT / 2**20:.0f} MiB")
    return {"wheelhouse_bytes": whl, "tree_bytes": tree, "total_bytes": total, "limit_bytes": CARRY_LIMIT}


def build(folder: Path) -> dict:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    chosen = resolve(folder)
    slimmed = {}
    for name, (pattern, why) in SLIM.items():
        wheel = wheels(folder).get(canonicalize_name(name))
        if wheel is not None:
            before, after = slim(wheel, pattern)
            slimmed[name] = {"dropped": pattern, "why": why, "bytes_before": before, "bytes_after": after}
    debs = {package: apt_download(package, folder) for package in DEBIAN}
    manifest = {
        "for": "CPython 3.12, manylinux x86_64: the GPU machine's image 'cuda' (no network there)",
        "made_with": f"python -m coursetools.gpu.make_wheelhouse (pip {local_version('pip')})",
        "wheels": {n: chosen[n] for n in sorted(chosen)},
        "slimmed": slimmed,
        "skipped": SKIP,
        "image_packages_assumed": "the image's list of its packages, 2026-11-17",
        "debian": debs,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def ensure_ignored(root: Path = ROOT) -> None:
    """.whl/ must never be committed: it is in .gitignore (added if missing)."""
    gitignore = root / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.exists() else []
    if "/.whl/" not in lines and ".whl/" not in lines:
        gitignore.write_text("\n".join([*lines, "/.whl/"]) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verify", action="store_true", help="only verify and measure what the folder holds")
    parser.add_argument("--dest", type=Path, default=WHEELHOUSE, help="default: %(default)s")
    args = parser.parse_args(argv)
    folder = args.dest.resolve()
    ensure_ignored()
    if not args.verify:
        build(folder)
    elif not folder.is_dir():
        print(
            f"{folder} does not exist: run python -m coursetools.gpu.make_wheelhouse first", file=sys.stderr
        )
        return 1
    sizes = report(folder)
    problems = verify(folder)
    for problem in problems:
        print(f"PROBLEM {problem}", file=sys.stderr)
    if sizes["total_bytes"] >= CARRY_LIMIT:
        print(
            f"PROBLEM the tree and {folder.name}/ together exceed {CARRY_LIMIT / 2**20:.0f} MiB",
            file=sys.stderr,
        )
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
