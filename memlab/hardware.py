"""What machine is this notebook running on, and does it have what an exercise needs?

`pick_device` and `preflight` open every lesson; `unmet_requirements` is the one place that decides whether a
piece of hardware or a package is present, shared by the lessons and by the autograders' `@requires`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform

import torch

from memlab.i18n import _

GiB = 1024**3

#: the packages `preflight` reports, by import name (version looked up by distribution name)
REPORTED_PACKAGES = {
    "transformers": "transformers",
    "peft": "peft",
    "bitsandbytes": "bitsandbytes",
    "transformer_engine": "transformer_engine",
}


def pick_device() -> torch.device:
    """The device the lessons run on: the first CUDA GPU if there is one, else the CPU.

    Apple's MPS is deliberately not picked: the allocator statistics the course measures with are CUDA's, and on
    MPS the CPU tracker would not see the device's memory.
    """
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def package_version(dist_name: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed (nothing is imported)."""
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_importable(import_name: str) -> bool:
    """True when `import import_name` works here (some packages install but fail to import without a GPU)."""
    try:
        importlib.import_module(import_name)
    except Exception:
        return False
    return True


def gpu_info(index: int = 0) -> dict | None:
    """Name, compute capability, total and free memory (GiB) of CUDA device `index`, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    free, total = torch.cuda.mem_get_info(index)
    return {
        "name": props.name,
        "capability": (props.major, props.minor),
        "total_gb": total / GiB,
        "free_gb": free / GiB,
    }


def unmet_requirements(
    cuda: bool = False,
    min_capability: tuple[int, int] | None = None,
    min_gpu_gb: float | None = None,
    packages: tuple[str, ...] = (),
) -> tuple[str, str] | None:
    """None when this machine meets every requirement, else `(needs, found)`: two short human-readable strings.

    `min_capability` and `min_gpu_gb` imply `cuda=True`. `packages` are import names.
    """
    needs, found = [], []
    info = gpu_info()
    if cuda or min_capability or min_gpu_gb:
        if info is None:
            needs.append(_("a CUDA GPU") + _gpu_detail(min_capability, min_gpu_gb))
            found.append(_("no CUDA GPU"))
        else:
            if min_capability and info["capability"] < tuple(min_capability):
                needs.append(_capability(min_capability))
                major, minor = info["capability"][:2]
                found.append(
                    _("{gpu} (capability {major}.{minor})").format(gpu=info["name"], major=major, minor=minor)
                )
            if min_gpu_gb and info["total_gb"] < min_gpu_gb:
                needs.append(_("a GPU with >= {gib:g} GiB").format(gib=min_gpu_gb))
                found.append(_("{gpu} with {gib:.1f} GiB").format(gpu=info["name"], gib=info["total_gb"]))
    for name in packages:
        if not package_importable(name):
            needs.append(_("the package {name}").format(name=name))
            found.append(_("{name} not importable").format(name=name))
    if not needs:
        return None
    return ", ".join(needs), ", ".join(found)


def _gpu_detail(min_capability, min_gpu_gb) -> str:
    parts = []
    if min_capability:
        parts.append(_capability(min_capability))
    if min_gpu_gb:
        parts.append(_(">= {gib:g} GiB").format(gib=min_gpu_gb))
    return f" ({', '.join(parts)})" if parts else ""


def _capability(minimum) -> str:
    return _("compute capability >= {major}.{minor}").format(major=minimum[0], minor=minimum[1])


def preflight(verbose: bool = True) -> dict:
    """Versions of the stack and the GPU (if any), as a dict; prints it as one line unless `verbose=False`."""
    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        **{name: package_version(dist) for name, dist in REPORTED_PACKAGES.items()},
        "gpu": gpu_info(),
    }
    if verbose:
        from memlab.notebook import fill

        print(fill(format_preflight(report), sep=" | "))
    return report


def format_preflight(report: dict) -> str:
    libs = " | ".join(f"{name} {report[name] or '—'}" for name in ["torch", *REPORTED_PACKAGES])
    gpu = report["gpu"]
    if gpu is None:
        where = _("CPU only (no CUDA GPU): CPU sizes, GPU-only checks will say NOT CHECKED HERE")
    else:
        major, minor = gpu["capability"]
        where = _("{name} (sm_{major}{minor}), {free:.1f} of {total:.1f} GiB free").format(
            name=gpu["name"], major=major, minor=minor, free=gpu["free_gb"], total=gpu["total_gb"]
        )
    return f"python {report['python']} | {libs} | {where}"
