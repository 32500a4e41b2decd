#!/usr/bin/env python
"""Execute solution notebooks in place on the CPU and save their outputs: how the committed outputs of solutions/
are refreshed (solutions are committed executed on a CPU: docs/develop.md).

    python scripts/execute_solutions.py                        every lesson in solutions/
    python scripts/execute_solutions.py 01-memory-anatomy ...  the named lessons (slugs or notebook paths)
    python scripts/execute_solutions.py --timeout 900          seconds per cell (default 600)
    python scripts/execute_solutions.py --check                execute, report, write nothing (exit 1 on an error)

Each notebook runs with nbclient in a fresh kernel whose cwd is the notebook's folder, with no GPU visible
(CUDA_VISIBLE_DEVICES=""), without the 7B simulations' disk cache (MEMLAB_SIMULATION_CACHE=off unless set: a cached
simulation would show a time no learner's first run shows), in learner mode (COURSE_GRADING unset: a check that needs a GPU prints NOT CHECKED HERE)
and offline unless told otherwise (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE default to 1). Cell metadata (nbgrader's
included) is kept, no timings are recorded. A notebook whose run fails is left untouched and the script exits 1;
cells tagged `raises-exception` may raise. Afterwards run scripts/build_lessons.py (outputs never reach lessons/,
but anything a notebook writes into its folder would be released with it).

`--check` is the same run without writing: each notebook executes in memory, in a temporary copy of its folder, so
nothing under solutions/ is written (for trying a new environment, e.g. the newest torch / transformers / peft a
plain install brings; CI's drift check grades the solutions with every cell run instead: .ci/run). It prints each notebook's time and slowest cell, and for a failing notebook the cell (index, nbgrader
grade_id, first line) and its error; it also checks that the kernel is this script's own Python, so the versions
tested are the environment's. Exit status 1 if any notebook failed.

A progress bar (`tqdm.auto`: in a kernel, a widget whose state lives in the kernel) is written into the committed
notebook as the last line tqdm would have left in a terminal, on stderr (`settle_progress_bars`): the notebook carries
no widget state, and a reader sees how far the bar went and how long it took.

`--edition ko` executes the Korean edition's solutions (ko/solutions/, built by scripts/build_lessons.py, never
committed executed) in a temporary copy and keeps the outputs of their `needs(...)` cells in
translations/ko/outputs/NN-slug.json, keyed by the Korean cells: what a Korean learner stuck on an exercise is
shown, in Korean (the build falls back to the English run's outputs for a cell translated since).

Executed in place, lesson 08's solution writes its graded run (`capstone-run/`, grading.course.HANDED_IN) next to the
notebook; it is moved to tests/fixtures/handed-in/08-capstone-7b-lora/, where the grading tests hand it in with the
solved notebook (it is the run the committed outputs show).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
# the run a solution writes for the learner to hand in (grading.course.HANDED_IN: lesson 08's capstone-run/) is moved
# out of solutions/ to here after the solution executed: the grading tests hand it in with the solved notebook, so
# that it matches the committed outputs, and solutions/ never holds a model answer that could be released
HANDED_IN_RUNS = ROOT / "tests" / "fixtures" / "handed-in"


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


def execute_notebook(nb, cwd: Path, timeout: int, **hooks) -> float:
    """Run the notebook `nb` (nbformat, changed in place) top to bottom in a fresh kernel whose cwd is `cwd`, in
    the environment of this process; the wall time in seconds. `hooks`: nbclient's `on_cell_start`,
    `on_cell_executed`, ... callbacks."""
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(cwd)}},  # the kernel's cwd
        record_timing=False,  # no per-cell timestamps in the committed file
        **hooks,
    )
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
BAR_WIDTH = 10  # characters of a settled bar, as tqdm draws one in a narrow terminal


def _bar_text(state: dict, model_id: str) -> str | None:
    """The last state of the tqdm.notebook bar whose container is widget `model_id`, as one line of text (None if
    that widget is not such a bar): its left text, the bar, its right text, as `tqdm.notebook.display` split them."""
    import html

    def model(ref: str) -> dict:
        return state.get(ref.removeprefix("IPY_MODEL_"), {})

    box = model(model_id)
    children = [model(ref) for ref in box.get("state", {}).get("children", [])]
    kinds = [child.get("model_name") for child in children]
    if box.get("model_name") != "HBoxModel" or kinds != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, progress, right = (child["state"] for child in children)

    def text(value: str) -> str:
        return html.unescape(value or "").replace("\u2007", " ")  # tqdm pads with figure spaces

    if "/?" in text(right.get("value")).split("[")[0]:  # no total ("7/?"): tqdm draws no bar, only the count
        return " ".join(
            part for part in (text(left.get("value")).strip(), text(right.get("value")).strip()) if part
        )
    done = progress.get("value", 0) / progress["max"] if progress.get("max") else 0.0
    filled = min(BAR_WIDTH, int(done * BAR_WIDTH))
    return f"{text(left.get('value'))}|{'█' * filled}{' ' * (BAR_WIDTH - filled)}|{text(right.get('value'))}"


def settle_progress_bars(nb) -> int:
    """Replace each tqdm progress bar an executed notebook `nb` shows (a widget) by its last state as text on stderr,
    and drop the widgets' saved state from its metadata once no widget is left; the number of bars replaced."""
    import nbformat

    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    settled, widgets_left = 0, 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.outputs:
            view = output.get("data", {}).get(WIDGET_VIEW)
            line = _bar_text(state, view.get("model_id", "")) if view else None
            if line is None:
                widgets_left += view is not None
                outputs.append(output)
                continue
            if outputs and outputs[-1].get("output_type") == "stream" and outputs[-1].get("name") == "stderr":
                outputs[-1]["text"] += line + "\n"
            else:
                outputs.append(nbformat.v4.new_output("stream", name="stderr", text=line + "\n"))
            settled += 1
        cell.outputs = outputs
    if not widgets_left:
        nb.metadata.pop("widgets", None)
    return settled


def execute(path: Path, timeout: int) -> float:
    """Run the notebook at `path` top to bottom and write it back with its outputs; the wall time in seconds."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    # the kernel inherits this environment: a non-inline matplotlib backend (CI sets MPLBACKEND=Agg) would make every
    # plt.show() draw nothing, and the committed notebook would lose its plots
    saved = os.environ.pop("MPLBACKEND", None)
    try:
        seconds = execute_notebook(nb, path.parent, timeout)
    finally:
        if saved is not None:
            os.environ["MPLBACKEND"] = saved
    settle_progress_bars(nb)
    nbformat.write(nb, path)
    keep_handed_in(path.parent)
    return seconds


def record_edition(language: str, names: list[str], timeout: int) -> int:
    """Execute the `language` edition's solutions of `names` (all when empty) in temporary copies and keep their
    `needs(...)` cells' outputs in translations/<language>/outputs/<slug>.json; 0, or 1 if a notebook failed."""
    import json

    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    from coursetools.translations import outputs_path
    from grading.learner_version import model_outputs

    edition = ROOT / language / "solutions"
    slugs = names or sorted(p.name for p in edition.iterdir() if p.is_dir())
    failed = 0
    for slug in slugs:
        (path,) = sorted((edition / slug).glob("*.ipynb"))
        with tempfile.TemporaryDirectory(prefix=f"edition-{language}-") as tmp:
            folder = Path(tmp) / slug
            shutil.copytree(edition / slug, folder)
            nb = nbformat.read(folder / path.name, as_version=4)
            saved = os.environ.pop("MPLBACKEND", None)  # the figures as a learner's notebook shows them
            try:
                seconds = execute_notebook(nb, folder, timeout)
            except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
                print(f"FAILED {language}/solutions/{slug}:\n{error}", file=sys.stderr)
                failed = 1
                continue
            finally:
                if saved is not None:
                    os.environ["MPLBACKEND"] = saved
        settle_progress_bars(nb)
        record = {
            "about": f"the outputs of the needs(...) cells of {language}/solutions/{slug}, executed on a CPU by "
            f"python scripts/execute_solutions.py --edition {language} {slug}",
            "lesson": slug,
            "cells": model_outputs(nb),
        }
        target = outputs_path(slug, language)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(
            f"{language}/solutions/{slug}: {seconds:.1f} s, {len(record['cells'])} cells kept in {target}",
            flush=True,
        )
    return failed


def hand_in(slug: str, folder: Path) -> list[str]:
    """Copy into `folder` (a submission's lesson folder) what the model solution handed in with its notebook
    (HANDED_IN_RUNS/<slug>/: lesson 08's capstone-run/); the names copied."""
    source = HANDED_IN_RUNS / slug
    if not source.is_dir():
        return []
    shutil.copytree(source, folder, dirs_exist_ok=True)
    return sorted(p.name for p in source.iterdir())


def keep_handed_in(lesson: Path) -> list[Path]:
    """Move what the executed solution wrote for handing in (HANDED_IN) from `lesson` to HANDED_IN_RUNS/<slug>/."""
    from grading.course import HANDED_IN

    moved = []
    for name in HANDED_IN:
        if (lesson / name).is_dir():
            target = HANDED_IN_RUNS / lesson.name / name
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(lesson / name, target)
            moved.append(target)
    return moved


# run in the kernel after the notebook's own cells (check mode only): which Python and which versions it ran
PROBE = """\
import importlib.metadata as _md, sys as _sys
print(_sys.prefix)
for _name in ("torch", "transformers", "peft", "bitsandbytes"):
    try:
        print(f"{_name} {_md.version(_name)}")
    except _md.PackageNotFoundError:
        print(f"{_name} not installed")
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CheckResult:
    """What `check` found for one notebook: time, slowest cell, the failing cell and its error, kernel versions."""

    seconds: float = 0.0
    slowest: tuple[float, int] = (0.0, -1)  # (seconds, cell index)
    failed_cell: str | None = None  # "cell 12 (e2_decode_check): from autograders..."
    error: str | None = None  # the last lines of the traceback, no colour codes
    kernel_prefix: str | None = None
    versions: list[str] = field(default_factory=list)


def describe_cell(nb, index: int) -> str:
    cell = nb.cells[index]
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    return f"cell {index}" + (f" ({grade_id})" if grade_id else "") + f": {first[:100]}"


def check(path: Path, timeout: int, tail: int = 25) -> CheckResult:
    """Execute the notebook at `path` in memory, in a temporary copy of its folder; write nothing back."""
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    n_cells = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    result = CheckResult()
    started: dict[int, float] = {}
    current = [-1]

    def on_start(cell, cell_index, **_):
        current[0] = cell_index
        started[cell_index] = time.perf_counter()

    def on_executed(cell, cell_index, **_):
        seconds = time.perf_counter() - started.get(cell_index, time.perf_counter())
        if cell_index < n_cells and seconds > result.slowest[0]:
            result.slowest = (seconds, cell_index)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="check-") as tmp:
        folder = Path(tmp) / path.parent.name
        shutil.copytree(path.parent, folder)
        try:
            execute_notebook(nb, folder, timeout, on_cell_start=on_start, on_cell_executed=on_executed)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
            result.failed_cell = describe_cell(nb, current[0]) if current[0] >= 0 else "before the first cell"
            if isinstance(error, CellExecutionError):
                text = ANSI.sub("", error.traceback)
                lines = [line for line in text.splitlines() if line.strip()]
                result.error = "\n".join(lines[-tail:])
            else:
                result.error = f"{type(error).__name__}: {ANSI.sub('', str(error)).strip()[-2000:]}"
    result.seconds = time.perf_counter() - start
    if result.failed_cell is None:
        lines = "".join(
            o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream"
        ).splitlines()
        result.kernel_prefix, result.versions = (lines[0], lines[1:]) if lines else (None, [])
    return result


def run_checks(paths: list[Path], timeout: int) -> int:
    """`--check`: run every notebook, print a line per notebook and each failure; 1 if any failed."""
    failed, total = [], 0.0
    for path in paths:
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        result = check(path, timeout)
        total += result.seconds
        if result.failed_cell is None and result.kernel_prefix != sys.prefix:
            result.failed_cell = "(kernel)"
            result.error = (
                f"the kernel ran in {result.kernel_prefix!r}, not in this environment ({sys.prefix!r}): a "
                "jupyter kernelspec named like the notebook's points elsewhere, so other versions were tested"
            )
        if result.failed_cell is None:
            slow_s, slow_i = result.slowest
            print(
                f"ok     {name}: {result.seconds:.1f} s (slowest: cell {slow_i}, {slow_s:.1f} s)"
                + (f"; kernel: {', '.join(result.versions)}" if path == paths[0] else ""),
                flush=True,
            )
        else:
            failed.append(name)
            print(
                f"FAILED {name}: {result.seconds:.1f} s, {result.failed_cell}\n{result.error}\n", flush=True
            )
    print(
        f"{len(paths) - len(failed)} of {len(paths)} notebooks ran without an error in {total:.1f} s",
        flush=True,
    )
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lessons", nargs="*", metavar="LESSON", help="slugs or notebook paths (default: all)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default: %(default)s)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="execute in memory and report; write nothing (exit 1 on an error)",
    )
    parser.add_argument(
        "--edition",
        metavar="LANG",
        help="execute LANG's edition (ko) in a temporary copy and keep its needs(...) outputs in translations/LANG/",
    )
    args = parser.parse_args(argv)

    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    from autograders.kit import GRADING_ENV
    from memlab import estimate

    # inherited by every kernel started below
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.pop(GRADING_ENV, None)
    # no disk cache of the 7B simulations: the outputs show what a learner's first run shows (its times included)
    os.environ.setdefault(estimate.CACHE_ENV, "off")

    if args.edition:
        return record_edition(args.edition, args.lessons, args.timeout)
    if args.check:
        return run_checks(notebooks(args.lessons), args.timeout)
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
