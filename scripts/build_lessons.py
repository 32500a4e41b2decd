#!/usr/bin/env python
"""Regenerate lessons/ (the learner versions) from solutions/ with nbgrader's own pipeline.

    python scripts/build_lessons.py            write lessons/
    python scripts/build_lessons.py --check    write nothing; exit 1 and list the files that differ

For every lesson folder solutions/NN-slug/ this runs exactly what `nbgrader generate_assignment NN-slug` runs, with
the repository's nbgrader_config.py: nbgrader's GenerateAssignment preprocessors (IncludeHeaderFooter,
InstantiateTests, LockCells, ClearSolutions, ClearOutput, CheckCellMetadata, ComputeChecksums, SaveCells,
ClearHiddenTests, ClearMarkScheme, ...) through nbconvert's NotebookExporter, and copies the lesson's other files
(minus CourseDirectory.ignore) the way nbgrader does. The output is byte-identical to what nbgrader releases
(tests/test_lessons_in_sync.py runs the real command and compares), deterministic, and needs no kernel and no
gradebook (SaveCells, which only fills the gradebook, is switched off).

First it writes each lesson's `model_solution_outputs.json` into solutions/NN-slug/ (released with the lesson like
any other file): the outputs of the solution's `needs(...)` cells, which a learner stuck on an exercise is shown in
their place (memlab.notebook.needs, grading/learner_version.py). `--check` reports that file out of date too.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

from grading.course import HANDED_IN, ROOT, lesson_dirs, load_config
from grading.learner_version import model_outputs
from memlab.notebook import MODEL_OUTPUTS


def recorded_outputs(solutions: Path = ROOT / "solutions") -> dict[Path, bytes]:
    """{solutions/NN-slug/MODEL_OUTPUTS: bytes} for every lesson: its solution's recorded `needs(...)` outputs."""
    import nbformat

    files: dict[Path, bytes] = {}
    for lesson in lesson_dirs(solutions):
        cells: dict[str, list[dict]] = {}
        for path in sorted(lesson.glob("*.ipynb")):
            cells.update(model_outputs(nbformat.read(path, as_version=4)))
        record = {
            "about": "what each cell that calls needs(...) shows with the model solution, executed on a CPU; "
            "written by scripts/build_lessons.py from the solution notebook (memlab.notebook.needs shows it)",
            "lesson": lesson.name,
            "cells": cells,
        }
        files[lesson / MODEL_OUTPUTS] = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
    return files


def render(solutions: Path = ROOT / "solutions", config=None) -> dict[str, bytes]:
    """{path relative to lessons/ (posix): bytes} for every lesson in `solutions`, computed in memory."""
    from nbconvert.exporters import NotebookExporter
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import find_all_files

    config = copy.deepcopy(config) if config is not None else load_config()
    # SaveCells only records the cells in the gradebook; it never changes the notebook. Creating a gradebook costs
    # seconds (nbgrader runs the `alembic` command for every new database), so it is switched off here; the test
    # against the real `nbgrader generate_assignment` (which runs it) proves the output is the same.
    config.SaveCells.enabled = False
    coursedir = CourseDirectory(config=config)
    converter = GenerateAssignment(coursedir=coursedir, config=config)
    exporter = NotebookExporter(config=converter.config)
    for preprocessor in converter.preprocessors:
        exporter.register_preprocessor(preprocessor)

    released: dict[str, bytes] = {}
    cwd = os.getcwd()
    os.chdir(coursedir.root)  # nbgrader resolves the header/footer notebooks from the course root
    try:
        for lesson in lesson_dirs(solutions):
            slug = lesson.name
            for path in sorted(lesson.glob("*.ipynb")):
                resources = {
                    "unique_key": path.stem,
                    "output_files_dir": f"{path.stem}_files",
                    "nbgrader": {"student": ".", "assignment": slug, "notebook": path.stem, "db_url": ""},
                }
                output, _ = exporter.from_filename(str(path), resources=resources)
                released[f"{slug}/{path.name}"] = output.encode("utf-8")
            # a run the solution left in its folder (HANDED_IN) is the model answer's: never released
            for filename in sorted(find_all_files(str(lesson), coursedir.ignore + ["*.ipynb", *HANDED_IN])):
                relative = Path(filename).relative_to(lesson).as_posix()
                released[f"{slug}/{relative}"] = Path(filename).read_bytes()
    finally:
        os.chdir(cwd)
    return released


def compare(expected: dict[str, bytes], lessons: Path) -> tuple[list[str], list[str]]:
    """(files in `expected` that are missing or different in `lessons`, lesson notebooks there with no source)."""
    differ = [
        rel
        for rel, data in expected.items()
        if not (lessons / rel).is_file() or (lessons / rel).read_bytes() != data
    ]
    present = (
        sorted(p.relative_to(lessons).as_posix() for p in lessons.glob("*/*.ipynb"))
        if lessons.is_dir()
        else []
    )
    stale = [rel for rel in present if rel not in expected]
    return differ, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if lessons/ is out of date"
    )
    parser.add_argument("--solutions", type=Path, default=ROOT / "solutions", help="default: %(default)s")
    parser.add_argument("--lessons", type=Path, default=ROOT / "lessons", help="default: %(default)s")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    recorded = recorded_outputs(args.solutions.resolve())
    stale_records = [
        path for path, data in recorded.items() if not path.is_file() or path.read_bytes() != data
    ]
    if args.check and stale_records:
        for path in stale_records:
            print(f"out of date: {path}")
        print("run: python scripts/build_lessons.py", file=sys.stderr)
        return 1
    for path in stale_records:
        path.write_bytes(recorded[path])
        print(f"wrote {path}")
    expected = render(args.solutions.resolve())
    differ, stale = compare(expected, args.lessons)
    seconds = time.perf_counter() - start
    n_lessons = len({rel.split("/")[0] for rel in expected})

    if args.check:
        if not differ and not stale:
            print(
                f"lessons/ is in sync with solutions/: {n_lessons} lessons, {len(expected)} files ({seconds:.1f} s)"
            )
            return 0
        for rel in differ:
            print(f"out of date: {args.lessons / rel}")
        for rel in stale:
            print(f"no source in {args.solutions}: {args.lessons / rel}")
        print("run: python scripts/build_lessons.py", file=sys.stderr)
        return 1

    for rel in differ:
        target = args.lessons / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(expected[rel])
        print(f"wrote {target}")
    for rel in stale:
        (args.lessons / rel).unlink()
        print(f"removed {args.lessons / rel} (its solution notebook is gone)")
        if not any((args.lessons / rel).parent.iterdir()):
            (args.lessons / rel).parent.rmdir()
    print(f"{n_lessons} lessons, {len(expected)} files, {len(differ)} written ({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
