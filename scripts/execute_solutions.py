#!/usr/bin/env python
"""Execute solution notebooks in place on the CPU and save their outputs: how the committed outputs of solutions/
are refreshed (design brief §2: solutions are "committed executed (CPU run)").

    python scripts/execute_solutions.py                        every lesson in solutions/
    python scripts/execute_solutions.py 01-memory-anatomy ...  the named lessons (slugs or notebook paths)
    python scripts/execute_solutions.py --timeout 900          seconds per cell (default 600)

Each notebook runs with nbclient in a fresh kernel whose cwd is the notebook's folder, with no GPU visible
(CUDA_VISIBLE_DEVICES=""), in learner mode (COURSE_GRADING unset: a check that needs a GPU prints NOT CHECKED HERE)
and offline unless told otherwise (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE default to 1). Cell metadata (nbgrader's
included) is kept, no timings are recorded. A notebook whose run fails is left untouched and the script exits 1;
cells tagged `raises-exception` may raise. Afterwards run scripts/build_lessons.py (outputs never reach lessons/,
but anything a notebook writes into its folder would be released with it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"


def notebooks(names: list[str]) -> list[Path]:
    """The solution notebooks named by slug or path; all of them when `names` is empty."""
    if not names:
        return sorted(SOLUTIONS.glob("*/*.ipynb"))
    found = []
    for name in names:
        path = Path(name)
        if path.suffix == ".ipynb" and path.is_file():
            found.append(path.resolve())
        elif (SOLUTIONS / name).is_dir():
            found += sorted((SOLUTIONS / name).glob("*.ipynb"))
        else:
            raise SystemExit(f"no solution notebook or lesson called {name!r} (lessons: {SOLUTIONS})")
    return found


def execute_notebook(nb, cwd: Path, timeout: int) -> float:
    """Run the notebook `nb` (nbformat, changed in place) top to bottom in a fresh kernel whose cwd is `cwd`, in
    the environment of this process; the wall time in seconds."""
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(cwd)}},  # the kernel's cwd
        record_timing=False,  # no per-cell timestamps in the committed file
    )
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def execute(path: Path, timeout: int) -> float:
    """Run the notebook at `path` top to bottom and write it back with its outputs; the wall time in seconds."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    seconds = execute_notebook(nb, path.parent, timeout)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lessons", nargs="*", metavar="LESSON", help="slugs or notebook paths (default: all)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default: %(default)s)")
    args = parser.parse_args(argv)

    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    from autograders.kit import GRADING_ENV

    # inherited by every kernel started below
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.pop(GRADING_ENV, None)

    failed = []
    for path in notebooks(args.lessons):
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"{name} ...", flush=True)
        try:
            seconds = execute(path, args.timeout)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
            print(f"FAILED {name} (left unchanged):\n{error}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"{name}: {seconds:.1f} s", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
