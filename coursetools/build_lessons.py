#!/usr/bin/env python
"""Regenerate lessons/ (the learner versions) from solutions/ with nbgrader's own pipeline.

    python scripts/build_lessons.py            write lessons/
    python scripts/build_lessons.py --check    write nothing; exit 1 and list the files that differ

For every lesson folder solutions/NN-slug/ this runs exactly what `nbgrader generate_assignment NN-slug` runs, with
the repository's nbgrader_config.py: nbgrader's GenerateAssignment preprocessors (IncludeHeaderFooter,
InstantiateTests, LockCells, ClearSolutions, ClearOutput, CheckCellMetadata, ComputeChecksums, SaveCells,
ClearHiddenTests, ClearMarkScheme, ...) through nbconvert's NotebookExporter, and copies the lesson's other files
(minus CourseDirectory.ignore) the way nbgrader does. The output is byte-identical to what nbgrader releases
(tests/build/test_lessons_in_sync.py runs the real command and compares), deterministic, and needs no kernel and no
gradebook (SaveCells, which only fills the gradebook, is switched off).

First it writes each check cell's nbgrader points from the check it calls (`@check(name, points=...)` in
autograders/, where a check's points are declared once) into the solution, then each lesson's
`model_solution_outputs.json` into solutions/NN-slug/ (released with the lesson like
any other file): the outputs of the solution's `needs(...)` cells, which a learner stuck on an exercise is shown in
their place (memlab.notebook.needs, grading/learner_version.py). `--check` reports that file out of date too.

Then the translated editions (scripts/translations.py), for each language with a folder translations/<lang>/ next
to solutions/ (ko): every lesson whose catalogue translations/ko/NN-slug.po is complete is written as
ko/solutions/NN-slug/ (the solution with translated sources, no outputs, `memlab.i18n.use("ko")` after its
`import memlab`, and a model_solution_outputs.json keyed by the Korean cells) and ko/lessons/NN-slug/ (rendered from
it exactly as above); lessons whose catalogue is incomplete are listed, not built. translations/ko/memlab.po and
translations/ko/autograders.po (the check kit's messages) are compiled to memlab/locale/ko/LC_MESSAGES/memlab.mo and
autograders/locale/ko/LC_MESSAGES/autograders.mo. A lesson that has an edition (ko/solutions/NN-slug/) but whose
catalogue is no longer complete against solutions/ (English changed: run `python scripts/translations.py extract`,
translate the fuzzy and new messages) keeps its files and fails the build; so does a translation the build refuses.
`--check` also fails when ko/ or the compiled catalogues differ from what would be written.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import os
import shutil
import sys
import tempfile
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

    config = copy.deepcopy(config) if config is not None else load_config(ROOT)
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
    parser.add_argument(
        "--translations",
        type=Path,
        default=None,
        help="the catalogues (<lang>/NN-slug.po); default: translations/ next to --solutions",
    )
    parser.add_argument(
        "--editions",
        type=Path,
        default=None,
        help="where <lang>/solutions and <lang>/lessons are written; default: the folder of --solutions",
    )
    args = parser.parse_args(argv)
    english = build_english(args)
    course_root = args.solutions.resolve().parent
    translated = build_editions(
        args.solutions.resolve(),
        args.translations or course_root / "translations",
        args.editions or course_root,
        check=args.check,
    )
    return max(english, translated)


def undeclared_points(solutions: Path = ROOT / "solutions") -> dict[Path, dict[str, float]]:
    """{solution notebook: {grade id: declared points}} for the check cells whose nbgrader points are not those of
    the check they call: a check's points are declared once, in `@check(name, points=...)` (autograders/), and the
    build writes them into the check cells' metadata, which nbgrader reads."""
    import nbformat

    from grading.judge import load_check, parse_check_cell
    from grading.submission import grade_id, is_test_cell

    found: dict[Path, dict[str, float]] = {}
    for lesson in lesson_dirs(solutions):
        for path in sorted(lesson.glob("*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                call = parse_check_cell(cell.source) if is_test_cell(cell) else None
                if call is None:
                    continue
                declared = float(load_check(call, str(lesson)).points)
                if float(cell.metadata["nbgrader"].get("points", 0)) != declared:
                    found.setdefault(path, {})[grade_id(cell)] = declared
    return found


def write_points(path: Path, points: dict[str, float]) -> None:
    import nbformat

    from grading.submission import grade_id

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if grade_id(cell) in points:
            value = points[grade_id(cell)]
            cell.metadata["nbgrader"]["points"] = int(value) if value.is_integer() else value
    nbformat.write(nb, path)


def build_english(args) -> int:
    """lessons/ and the recorded outputs from solutions/ (the module's docstring); 0, or 1 on --check if stale."""
    start = time.perf_counter()
    undeclared = undeclared_points(args.solutions.resolve())
    if args.check and undeclared:
        for path, points in undeclared.items():
            print(f"out of date: the points of {', '.join(points)} in {path} (their checks declare others)")
        print("run: python scripts/build_lessons.py", file=sys.stderr)
        return 1
    for path, points in undeclared.items():
        write_points(path, points)
        print(f"wrote the points their checks declare into {path}: {points}")
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


# ---- the translated editions (scripts/translations.py) ----------------------------------------------------------


def _files_under(folder: Path) -> set[Path]:
    """The files of a built edition's folder, less what nbgrader never copies (checkpoints, caches) and a run a
    lesson leaves next to its notebook (HANDED_IN)."""
    if not folder.is_dir():
        return set()
    ignore = [*load_config(ROOT).CourseDirectory.ignore, *HANDED_IN]
    return {
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not any(
            fnmatch.fnmatch(part, pattern) for part in p.relative_to(folder).parts for pattern in ignore
        )
    }


def _same(path: Path, data: bytes) -> bool:
    """`path` holds `data` (a compiled catalogue: the same messages, whichever Babel wrote its header)."""
    if not path.is_file():
        return False
    if path.suffix == ".mo":
        from coursetools import translations as tr

        return tr.mo_messages(path.read_bytes()) == tr.mo_messages(data)
    return path.read_bytes() == data


def build_editions(solutions: Path, translations: Path, editions: Path, check: bool = False) -> int:
    """Write (or, with `check`, compare) <editions>/<lang>/solutions and lessons for every language with catalogues in
    `translations`, and memlab's compiled messages; 0, or 1 when something is stale or refused."""
    if not translations.is_dir():
        return 0
    from coursetools import translations as tr

    failed = False
    for language in [lang for lang in tr.LANGUAGES if (translations / lang).is_dir()]:
        start = time.perf_counter()
        edition = tr.build_edition(solutions, translations, language)
        out = editions / language
        expected: dict[Path, bytes] = {
            out / "solutions" / rel: data for rel, data in edition.solutions.items()
        }
        if edition.solutions:
            with tempfile.TemporaryDirectory() as tmp:
                for rel, data in edition.solutions.items():
                    (Path(tmp) / "solutions" / rel).parent.mkdir(parents=True, exist_ok=True)
                    (Path(tmp) / "solutions" / rel).write_bytes(data)
                expected |= {
                    out / "lessons" / rel: data for rel, data in render(Path(tmp) / "solutions").items()
                }
        root = solutions.parent
        for domain in tr.CODE_CATALOGUES:
            compiled = tr.compiled_messages(translations, language, domain)
            if compiled is not None and (root / domain).is_dir():
                expected[root / domain / "locale" / language / "LC_MESSAGES" / f"{domain}.mo"] = compiled

        built = {rel.split("/")[0] for rel in edition.solutions}
        existing = {p.parent.name for p in (out / "solutions").glob("*/*.ipynb")}
        # an edition whose catalogue is not complete any more (kept, and an error); one whose lesson is gone
        stale = sorted(s for s in existing - built if s in edition.statuses)
        orphans = sorted(existing - set(edition.statuses))
        keep = {out / part / slug for slug in stale for part in ("solutions", "lessons")}
        present = {
            p
            for p in _files_under(out / "solutions") | _files_under(out / "lessons")
            if not any(folder in p.parents for folder in keep)
        }
        differ = sorted(p for p, data in expected.items() if not _same(p, data))
        extra = sorted(present - set(expected))
        problems = [f"{language}: {error}" for error in edition.errors]
        for slug in stale:
            status = edition.statuses[slug]
            problems.append(
                f"{language}: {slug} has an edition in {out} but its catalogue is not complete against "
                f"{solutions / slug}: {status.summary()}"
            )
            problems += status.details()
        if built or stale:
            for domain in tr.CODE_CATALOGUES:
                status = tr.code_status(domain, translations, language, root)
                if (root / domain).is_dir() and not status.complete:
                    problems.append(f"{language}: {domain}'s messages: {status.summary()}")
                    problems += status.details()

        for warning in edition.warnings:
            print(f"{language}: warning: {warning}")
        incomplete = [s for s in edition.statuses.values() if not s.complete and s.slug not in stale]
        if incomplete:
            listed = ", ".join(
                f"{s.slug} ({s.messages - len(s.untranslated) - len(s.fuzzy) - len(s.missing)}/{s.messages})"
                if s.exists
                else f"{s.slug} (no catalogue)"
                for s in incomplete
            )
            print(
                f"{language}: not built, catalogue incomplete (translated/messages): {listed}; "
                f"python scripts/translations.py status --lang {language} says what is missing"
            )
        if check:
            for path in differ:
                print(f"out of date: {path}")
            for path in extra:
                print(f"no source in {solutions} and {translations}: {path}")
            for problem in problems:
                print(problem)
            if differ or extra or problems:
                failed = True
                print("run: python scripts/build_lessons.py", file=sys.stderr)
            else:
                print(
                    f"{out} is in sync with {solutions} and {translations / language}: {len(built)} lessons "
                    f"({time.perf_counter() - start:.1f} s)"
                )
            continue
        for path in differ:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(expected[path])
            print(f"wrote {path}")
        for path in extra:
            path.unlink()
            print(f"removed {path} (not part of the {language} edition)")
        for slug in orphans:
            for part in ("solutions", "lessons"):
                if (out / part / slug).is_dir():
                    shutil.rmtree(out / part / slug)
                    print(f"removed {out / part / slug} (its English lesson is gone)")
        for folder in sorted({p.parent for p in extra}, reverse=True):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        for problem in problems:
            print(problem, file=sys.stderr)
        failed |= bool(problems)
        print(
            f"{language}: {len(built)} of {len(edition.statuses)} lessons built, {len(differ)} files written "
            f"({time.perf_counter() - start:.1f} s)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
